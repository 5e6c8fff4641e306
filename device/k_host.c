/*
 * k_host.c: the ops that talk to the host, as XLA shapes them:
 *   infeed(token)                   -> (data, token)        data from feed
 *   outfeed(value, token)           -> token                value to take
 *   send(value, token), is_host_transfer=true
 *                                   -> (value, u32[] context, token)
 *   send-done(send)                 -> token
 *   recv(token), is_host_transfer=true
 *                                   -> (data, u32[] context, token)
 *   recv-done(recv)                 -> (data, token)
 * The value moves at send and recv (nothing overlaps yet); the -done ops
 * only unpack. Sends and receives between devices (no is_host_transfer)
 * would need point-to-point channels tessel's runtime does not have: they
 * are refused, as is any host transfer when the run gave no feed/take
 * (DevExecOptions.host) -- an error naming the instruction, never a wait.
 */
#include "device.h"

static IrStatus no_host(const DevKernelArgs *k)
{
    return dev_kernel_error(k, IR_EUNSUPPORTED,
                            "%s talks to the host, and this run has no host transfers: give "
                            "its values with `tessel run --infeed FILE.npy` (the reference or "
                            "one device; outfeeds are written as DIR/outfeed_<i>.npy)",
                            ir_op_name(k->ins->op));
}

static IrStatus need_host_transfer(const DevKernelArgs *k)
{
    if (k->ins->a.x->is_host_transfer)
        return IR_OK;
    return dev_kernel_error(k, IR_EUNSUPPORTED,
                            "%s between devices (channel_id=%lld, no is_host_transfer=true) is "
                            "not supported: tessel's runtime has collectives, not point-to-point "
                            "channels", ir_op_name(k->ins->op), (long long)k->ins->a.channel_id);
}

/* A tuple of the values el[0..n) (references taken over) of shape s. */
static IrStatus tuple3(const IrShape *s, int32_t n, DevValue **el, DevValue **out)
{
    for (int32_t i = 0; i < n; i++)
        if (!el[i]) {
            for (int32_t j = 0; j < n; j++)
                dev_value_unref(el[j]);
            return IR_ENOMEM;
        }
    *out = dev_value_tuple(s, n, el);
    return *out ? IR_OK : IR_ENOMEM;
}

static IrStatus shape_is(const DevKernelArgs *k, int32_t n)
{
    const IrShape *s = &k->ins->shape;
    if (s->type != IR_TUPLE || s->ntuple != n || s->tuple[n - 1].type != IR_TOKEN)
        return dev_kernel_error(k, IR_EINPUT, "%s must have a %d-tuple shape ending in token[]",
                                ir_op_name(k->ins->op), (int)n);
    return IR_OK;
}

/* infeed / recv: (data, [u32 context,] token), data from the feed. */
static IrStatus feed(const DevKernelArgs *k, int32_t n, DevValue **out)
{
    IrStatus st = shape_is(k, n);
    if (st != IR_OK)
        return st;
    const IrShape *s = &k->ins->shape;
    DevValue *data = NULL;
    if ((st = k->opt->host->feed(k->opt->host->ctx, k->m, k->ins, &s->tuple[0], &data, k->d)) !=
        IR_OK)
        return st;
    if (!ir_shape_equal(&data->shape, &s->tuple[0])) {
        dev_value_unref(data);
        return dev_kernel_error(k, IR_EINTERNAL, "the feed gave a value of another shape");
    }
    DevValue *el[3] = {data, dev_value_zeros(&s->tuple[1]), NULL};
    if (n == 3)
        el[2] = dev_value_zeros(&s->tuple[2]);
    return tuple3(s, n, el, out);
}

/* outfeed / send: give operand 0 to the host. */
static IrStatus take(const DevKernelArgs *k)
{
    if (k->nopnd < 1 || k->opnd[0]->shape.type == IR_TOKEN)
        return dev_kernel_error(k, IR_EINPUT, "%s needs a value to send", ir_op_name(k->ins->op));
    return k->opt->host->take(k->opt->host->ctx, k->m, k->ins, k->opnd[0], k->d);
}

static IrStatus part_tuple(const DevKernelArgs *k, DevValue **out)
{
    /* recv-done: (data, token) from recv's (data, context, token). */
    DevValue *t = k->nopnd == 1 ? k->opnd[0] : NULL;
    if (!t || t->shape.type != IR_TUPLE || t->nelems != 3 || shape_is(k, 2) != IR_OK)
        return dev_kernel_error(k, IR_EINPUT, "recv-done needs the tuple its recv made");
    DevValue *el[2] = {dev_value_ref(t->elems[0]), dev_value_ref(t->elems[2])};
    return tuple3(&k->ins->shape, 2, el, out);
}

IrStatus dev_k_host_transfer(const DevKernelArgs *k, DevValue **out)
{
    IrOpcode op = k->ins->op;
    IrStatus st = IR_OK;
    bool host_op = ir_op_talks_to_host(op) || k->ins->a.x->is_host_transfer;
    if (!host_op)
        return need_host_transfer(k);
    if (op == OP_SEND_DONE) {
        *out = dev_value_zeros(&k->ins->shape);
        return *out ? IR_OK : IR_ENOMEM;
    }
    if (op == OP_RECV_DONE)
        return part_tuple(k, out);
    if (!k->opt->host || !k->opt->host->feed || !k->opt->host->take)
        return no_host(k);
    switch (op) {
    case OP_INFEED: return feed(k, 2, out);
    case OP_RECV: return feed(k, 3, out);
    case OP_OUTFEED:
        if ((st = take(k)) != IR_OK)
            return st;
        *out = dev_value_zeros(&k->ins->shape);
        return *out ? IR_OK : IR_ENOMEM;
    case OP_SEND: {
        if ((st = shape_is(k, 3)) != IR_OK || (st = take(k)) != IR_OK)
            return st;
        const IrShape *s = &k->ins->shape;
        DevValue *el[3] = {dev_value_ref(k->opnd[0]), dev_value_zeros(&s->tuple[1]),
                           dev_value_zeros(&s->tuple[2])};
        return tuple3(s, 3, el, out);
    }
    default:
        return dev_kernel_error(k, IR_EINTERNAL, "not a host transfer");
    }
}
