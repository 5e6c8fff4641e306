/*
 * p2p.c: point to point. Between hosts (coll_p2p_operands): a permute or
 * broadcast whose devices each read one other device's operands sends
 * each host only those (host A sends host B, in one message, the operands
 * of A's devices some device of B reads, in device order):
 *
 *     permute pairs {d0->d2}, h0 {d0, d1}, h1 {d2, d3}:
 *     h0 -> h1: d0's operand      h1: nothing to send
 *
 * Between devices: XLA's send and recv (coll_p2p_run).
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Permute and broadcast: each device reads one device's operands
 * (src[], host_colors): host A sends host B, in one message, the
 * operands of A's devices that some device of B reads, in device order;
 * B receives the same list from A. Nothing else moves. */
IrStatus coll_p2p_operands(CollHost *w, const IrInstr *ins, const int64_t *src, IrDiag *d)
{
    size_t b = 0;
    IrStatus st = coll_operand_bytes(w, &b, d);
    if (st != IR_OK)
        return st;
    int64_t hosts = w->ndev / w->nlocal, me = coll_host_of(w, w->first), l = w->nlocal;
    /* wanted[s] = stamp: device s is in the list of the current pair. */
    int64_t *wanted = ts_malloc((size_t)w->ndev * sizeof *wanted);
    CollXfer *sends = ts_calloc((size_t)hosts, sizeof *sends), *recvs = ts_calloc((size_t)hosts, sizeof *recvs);
    int32_t nsend = 0, nrecv = 0;
    st = wanted && sends && recvs ? IR_OK : coll_oom(d);
    for (int64_t s = 0; wanted && s < w->ndev; s++)
        wanted[s] = -1;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++) {
        if (h == me)
            continue;
        /* To h: my devices that h's devices read. From h: h's devices mine read. */
        for (int pass = 0; st == IR_OK && pass < 2; pass++) {
            int64_t reader = pass ? me : h, holder = pass ? h : me, stamp = 2 * h + pass, cnt = 0;
            for (int64_t g = reader * l; g < (reader + 1) * l; g++)
                if (src[g] >= 0 && coll_host_of(w, src[g]) == holder && wanted[src[g]] != stamp) {
                    wanted[src[g]] = stamp;
                    cnt++;
                }
            if (!cnt)
                continue;
            CollXfer *x = pass ? &recvs[nrecv++] : &sends[nsend++];
            x->host = (int)h;
            x->bytes = b * (size_t)cnt;
            x->buf = ts_malloc(x->bytes + 1);
            if (!x->buf) {
                st = coll_oom(d);
                break;
            }
            size_t o = 0;
            for (int64_t s = holder * l; !pass && s < (holder + 1) * l; s++)
                if (wanted[s] == stamp)
                    coll_pack_operands(w, s, x->buf, &o);
        }
    }
    int64_t what = (int64_t)b;
    if (st == IR_OK)
        st = w->t->exchange(w->t, coll_xfer_kind(ins), what, sends, nsend, recvs, nrecv, d);
    w->nremote = w->nops;
    for (int32_t j = 0; st == IR_OK && j < nrecv; j++) {
        int64_t h = recvs[j].host, stamp = 2 * h + 1;
        size_t o = 0;
        for (int64_t s = h * l; st == IR_OK && s < (h + 1) * l; s++)
            if (wanted[s] == stamp) {
                st = coll_install_remote(w, s, (const uint8_t *)recvs[j].buf + o, d);
                o += b;
            }
    }
    for (int32_t j = 0; sends && j < nsend; j++)
        ts_free(sends[j].buf);
    for (int32_t j = 0; recvs && j < nrecv; j++)
        ts_free(recvs[j].buf);
    ts_free(sends);
    ts_free(recvs);
    ts_free(wanted);
    return st;
}

/* XLA's point-to-point channels, in a program every device runs: a send
 * leaves its data with its device (dev->sent, by channel_id); the recv of
 * the same channel is a collective-permute of what each device sent, over
 * the pairs of _xla_send_recv_source_target_pairs (ir_send_recv_pairs)
 * (same_link says which send a recv takes), run where the data is needed: at the recv-done when the recv has one
 * (XLA issues the recv before the send: recv, send, recv-done,
 * send-done), else at the recv itself (the send then comes first). Every
 * device reaches that point in the same order, so it is a collective like
 * the others (two barriers; across hosts the leader's exchange). Example:
 * pairs {{0,1},{1,2}} on 3 devices: device 1 receives device 0's data,
 * device 2 device 1's, device 0 zeros. */

/* The computation holding ins (instructions live in their computation's
 * array). */
static const IrComputation *comp_of(const IrModule *m, const IrInstr *ins)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        if (ins >= m->comp[c]->instr && ins < m->comp[c]->instr + m->comp[c]->ninstr)
            return m->comp[c];
    return NULL;
}

/* The recv whose data recv-done `ins` completes: its operand, or, when
 * that comes through something else (a pipelined loop's parameter), the
 * module's recv of the same channel_id; NULL when there is none. */
static const IrInstr *recv_of(const IrModule *m, const IrInstr *ins)
{
    const IrComputation *c = comp_of(m, ins);
    const IrInstr *r = c && ins->nopnd > 0 && ins->opnd[0] >= 0 ? &c->instr[ins->opnd[0]] : NULL;
    if (r && r->op == OP_RECV)
        return r;
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            r = &m->comp[k]->instr[i];
            if (r->op == OP_RECV && !r->a.x->is_host_transfer && r->a.channel_id == ins->a.channel_id)
                return r; /* XLA gives a recv-done its recv's channel_id */
        }
    return NULL;
}

/* A send and its recv: the same pairs (as NCCL matches them: XLA's
 * pipelined loops give the send and the recv of one link different
 * channel_ids, and its NCCL groups reuse one channel for other pairs);
 * without pairs, the same channel_id. Sends of one link are received in
 * the order they were made. */
static bool same_link(const IrInstr *a, const IrInstr *b)
{
    const char *pa = ir_frontend_attr(a, "_xla_send_recv_source_target_pairs");
    const char *pb = ir_frontend_attr(b, "_xla_send_recv_source_target_pairs");
    if (pa && pb)
        return strcmp(pa, pb) == 0;
    return !pa && !pb && a->a.channel_id == b->a.channel_id;
}

/* Some recv-done completes recv (recv_of): its exchange waits for it. */
static bool has_recv_done(const IrModule *m, const IrInstr *recv)
{
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            const IrInstr *rd = &m->comp[k]->instr[i];
            if (rd->op != OP_RECV_DONE || rd->a.x->is_host_transfer || rd->nopnd < 1)
                continue;
            const IrInstr *direct = &m->comp[k]->instr[rd->opnd[0]];
            if (direct == recv || (direct->op != OP_RECV && rd->a.channel_id == recv->a.channel_id))
                return true;
        }
    return false;
}

/* The oldest data this device sent on recv's link (taken), or NULL. */
static DevValue *take_sent(CollDevice *dev, const IrInstr *recv)
{
    for (int32_t k = 0; k < dev->nsent; k++)
        if (same_link(dev->sent_by[k], recv)) {
            DevValue *v = dev->sent[k];
            memmove(&dev->sent[k], &dev->sent[k + 1], (size_t)(dev->nsent - k - 1) * sizeof *dev->sent);
            memmove(&dev->sent_by[k], &dev->sent_by[k + 1], (size_t)(dev->nsent - k - 1) * sizeof *dev->sent_by);
            dev->nsent--;
            return v;
        }
    return NULL;
}

static IrStatus keep_sent(CollDevice *dev, const IrInstr *send, DevValue *v)
{
    DevValue **ns = ts_realloc(dev->sent, (size_t)(dev->nsent + 1) * sizeof *ns);
    if (ns)
        dev->sent = ns;
    const IrInstr **nb = ns ? ts_realloc(dev->sent_by, (size_t)(dev->nsent + 1) * sizeof *nb) : NULL;
    if (nb)
        dev->sent_by = nb;
    if (!ns || !nb) {
        dev_value_unref(v);
        return IR_ENOMEM;
    }
    dev->sent[dev->nsent] = v;
    dev->sent_by[dev->nsent++] = send;
    return IR_OK;
}

/* The exchange of a recv (pairs and channel from `recv`, data of shape
 * `data`): a collective-permute of what every device sent. */
static IrStatus p2p_exchange(CollDevice *dev, const IrModule *m, const IrInstr *recv, const IrShape *data, DevValue **out,
                             IrDiag *d)
{
    int32_t cap = (int32_t)(2 * dev->w->ndev), n = 0;
    int64_t *pairs = ts_malloc((size_t)cap * sizeof *pairs);
    if (!pairs)
        return coll_error(m, recv, d, IR_ENOMEM, "out of memory");
    if (!ir_send_recv_pairs(recv, pairs, cap, &n)) {
        ts_free(pairs);
        return coll_error(m, recv, d, IR_EINPUT, "a recv between devices needs its pairs: "
                          "frontend_attributes={_xla_send_recv_source_target_pairs=\"{{0,1},...}\"}, at most one a "
                          "device");
    }
    IrInstr perm = *recv;
    perm.op = OP_COLLECTIVE_PERMUTE;
    perm.shape = *data;
    perm.a.use_global_device_ids = false;
    IrAttrsX px = *perm.a.x; /* perm lives only for this call */
    px.source_target_pairs = (IrI64List){.n = n, .v = pairs};
    perm.a.x = &px;
    DevValue *mine = take_sent(dev, recv);
    if (!mine)
        mine = dev_value_zeros(data);
    IrStatus st = mine ? coll_collective(dev, m, &perm, 1, &mine, out, d)
                       : coll_error(m, recv, d, IR_ENOMEM, "out of memory");
    dev_value_unref(mine);
    ts_free(pairs);
    return st;
}

/* (data, u32[] context, token[]) or (data, token[]) of shape s from data
 * (taken). */
static IrStatus p2p_tuple(const IrShape *s, DevValue *data, DevValue **out)
{
    if (!data)
        return IR_ENOMEM;
    DevValue *el[3] = {data, NULL, NULL};
    for (int32_t k = 1; k < s->ntuple && k < 3; k++)
        el[k] = dev_value_zeros(&s->tuple[k]);
    *out = dev_value_tuple(s, s->ntuple < 3 ? s->ntuple : 3, el);
    return *out ? IR_OK : IR_ENOMEM;
}

IrStatus coll_p2p_run(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                        DevValue **out, IrDiag *d)
{
    CollDevice *dev = ctx;
    *out = NULL;
    const IrShape *s = &ins->shape;
    bool tuple = s->type == IR_TUPLE && s->ntuple >= 2;
    coll_async_drain(dev->async); /* a recv's exchange is a collective too */
    switch (ins->op) {
    case OP_SEND:
        if (!tuple || nopnd < 1)
            return coll_error(m, ins, d, IR_EINPUT, "a send is (data, u32[], token[]) of a data operand");
        if (keep_sent(dev, ins, dev_value_ref(operands[0])) != IR_OK)
            return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
        return p2p_tuple(s, dev_value_ref(operands[0]), out) == IR_OK ? IR_OK
                                                                         : coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    case OP_SEND_DONE:
        *out = dev_value_zeros(s);
        return *out ? IR_OK : coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    case OP_RECV: {
        if (!tuple)
            return coll_error(m, ins, d, IR_EINPUT, "a recv is (data, u32[], token[])");
        DevValue *data = NULL;
        IrStatus st = has_recv_done(m, ins) ? ((data = dev_value_zeros(&s->tuple[0])) ? IR_OK : IR_ENOMEM)
                                            : p2p_exchange(dev, m, ins, &s->tuple[0], &data, d);
        if (st == IR_OK)
            st = p2p_tuple(s, data, out);
        return st == IR_ENOMEM && d->status == IR_OK ? coll_error(m, ins, d, st, "out of memory") : st;
    }
    case OP_RECV_DONE: {
        const IrInstr *recv = recv_of(m, ins);
        if (!tuple)
            return coll_error(m, ins, d, IR_EINPUT, "a recv-done is (data, token[])");
        DevValue *data = NULL;
        IrStatus st = p2p_exchange(dev, m, recv ? recv : ins, &s->tuple[0], &data, d);
        if (st == IR_OK)
            st = p2p_tuple(s, data, out);
        return st == IR_ENOMEM && d->status == IR_OK ? coll_error(m, ins, d, st, "out of memory") : st;
    }
    default:
        return coll_error(m, ins, d, IR_EINTERNAL, "not a send or recv");
    }
}

