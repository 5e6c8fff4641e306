/*
 * allgather.c: all-gather, in a host and across hosts; and the exchange of
 * every operand among a color's hosts that collectives without a path of
 * their own use (coll_allgather_operands).
 *
 * In a host (coll_allgather_part; result.c's split path): member j's
 * block goes to place j of every member's result along the dimension.
 * Group {d0,d1,d2}, operands A, B, C:
 *
 *     d0, d1, d2:  [A | B | C]
 *
 * Across hosts, one device a host and each group on increasing hosts
 * (allgather_direct; the direct path of steps.c): straight from the
 * operand into the result, one allgather_into (pipelined for large
 * blocks):
 *
 *     h0: A   h1: B   h2: C   ->   h0, h1, h2: [A | B | C]
 *
 * Else (several devices a host): the operands of every host of the color
 * travel to every other (one allgather_in of each host's devices'
 * operands, device by device), and each device picks its blocks:
 *
 *     h0 {d0: A, d1: B}   h1 {d2: C, d3: D}
 *     step 1: h0 sends [A B], h1 sends [C D]; both receive [A B C D]
 *     step 2: each device builds its result from the group's operands
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Member j's operand (of `size`) placed as block j along dim of each of
 * out[0..nout) (the all-gather's result shape). */
void coll_gather_block(const DevValue *opnd, int32_t j, int32_t size, int64_t dim, DevValue *const *out,
                         int32_t nout, bool stream)
{
    const IrShape *ps = &opnd->shape;
    int64_t outer, inner;
    coll_runs_of(ps, dim, &outer, &inner);
    size_t es = ir_type_size(ps->type);
    size_t run = (size_t)(ps->dims[dim] * inner) * es;
    void *stack[COLL_PTRS_ON_STACK];
    /* Destinations COLL_PTRS_ON_STACK at a time (no allocation that can fail). */
    for (int32_t b = 0; run > 0 && b < nout; b += COLL_PTRS_ON_STACK) {
        int32_t n = nout - b < COLL_PTRS_ON_STACK ? nout - b : COLL_PTRS_ON_STACK;
        for (int32_t q = 0; q < n; q++)
            stack[q] = out[b + q]->data;
        for (int64_t o = 0; o < outer; o++)
            coll_copy(stack, n, ((size_t)o * (size_t)size + (size_t)j) * run, opnd->data + (size_t)o * run, run,
                         stream);
    }
}

/* The bytes of one device's operands (every device's: one program), or
 * an error for tuple operands. */
IrStatus coll_operand_bytes(CollHost *w, size_t *b, IrDiag *d)
{
    DevValue *const *mine = w->ops[w->first];
    *b = 0;
    if (w->nops < 1)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "a collective without operands");
    for (int32_t k = 0; k < w->nops; k++) {
        if (mine[k]->shape.type == IR_TUPLE)
            return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                            "a collective of tuple operands across hosts is not supported");
        *b += (size_t)mine[k]->nbytes;
    }
    return IR_OK;
}

/* Remote device g's operands from `bytes` (w->nops of them, shaped as
 * this host's): w->ops[g] and w->remote[g]. */
IrStatus coll_install_remote(CollHost *w, int64_t g, const uint8_t *bytes, IrDiag *d)
{
    DevValue *const *mine = w->ops[w->first];
    int32_t n = w->nops;
    DevValue **v = ts_calloc((size_t)n, sizeof *v);
    w->remote[g] = v;
    w->ops[g] = v;
    size_t o = 0;
    for (int32_t k = 0; v && k < n; k++) {
        if (!(v[k] = dev_value_new_uninit(&mine[k]->shape)))
            break;
        if (v[k]->nbytes)
            memcpy(v[k]->data, bytes + o, (size_t)v[k]->nbytes);
        o += (size_t)v[k]->nbytes;
    }
    return v && v[n - 1] ? IR_OK : coll_oom(d);
}

/* CollDevice g's operands appended at buf + *o. */
void coll_pack_operands(const CollHost *w, int64_t g, uint8_t *buf, size_t *o)
{
    for (int32_t k = 0; k < w->nops; k++) {
        if (w->ops[g][k]->nbytes)
            memcpy(buf + *o, w->ops[g][k]->data, (size_t)w->ops[g][k]->nbytes);
        *o += (size_t)w->ops[g][k]->nbytes;
    }
}

/* The operands of every host of this host's color copied into ops[]
 * (one MPI all-gather among those hosts, over their communicator): each
 * host sends its devices' operands, device by device, operand by
 * operand. Hosts of other colors hold no member of this host's groups. */
IrStatus coll_allgather_operands(CollHost *w, const IrInstr *ins, const int32_t *color, IrDiag *d)
{
    size_t b = 0;
    IrStatus st = coll_operand_bytes(w, &b, d);
    if (st != IR_OK)
        return st;
    int64_t hosts = w->ndev / w->nlocal, me = coll_host_of(w, w->first), k = 0;
    for (int64_t h = 0; h < hosts; h++)
        k += color[me] >= 0 ? color[h] == color[me] : h == me;
    size_t block = b * (size_t)w->nlocal;
    uint8_t *send = ts_malloc(block + 1), *recv = ts_malloc(block * (size_t)k + 1);
    st = send && recv ? IR_OK : coll_oom(d);
    size_t o = 0;
    for (int64_t g = w->first; st == IR_OK && g < w->first + w->nlocal; g++)
        coll_pack_operands(w, g, send, &o);
    if (st == IR_OK)
        st = w->t->allgather_in(w->t, color, coll_xfer_kind(ins), send, block, recv, d);
    w->nremote = w->nops;
    /* Block j is the j-th host of the color, in host order. */
    int64_t j = 0;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++) {
        if (color[me] < 0 ? h != me : color[h] != color[me])
            continue;
        for (int64_t l = 0; h != me && st == IR_OK && l < w->nlocal; l++)
            st = coll_install_remote(w, h * w->nlocal + l, recv + (size_t)j * block + (size_t)l * b, d);
        j++;
    }
    ts_free(send);
    ts_free(recv);
    return st;
}

/* Across hosts, one device a host and each group on increasing hosts
 * (the direct path, steps.c): one allgather_into from the operand
 * straight into the result, h0: A  h1: B  h2: C  ->  [A | B | C] on each.
 * *done: it ran. */
static IrStatus allgather_direct(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                                 bool *done, IrDiag *d)
{
    CollDirect c;
    if (!coll_direct_operand(w, ins, hg, &c))
        return IR_OK;
    IrStatus st = coll_direct_group(w, m, ins, &c, d);
    if (st != IR_OK || !coll_direct_fits(&c, c.ps->dims[c.dim] * c.size))
        return st;
    DevValue *v = dev_value_new_uninit(c.rs);
    st = v ? w->t->allgather_into(w->t, hg->color, coll_xfer_kind(ins), c.x->data, (size_t)c.x->nbytes, v->data,
                                  coll_stream_into(w->tune.stream_bound, &v, 1, v->nbytes), d)
           : coll_oom(d);
    return coll_direct_done(w, v, st, done);
}

/* The across-hosts step (the leader's): the direct path, else every
 * operand of the color's hosts to each of them. */
IrStatus coll_allgather_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                               IrDiag *d)
{
    bool done = false;
    IrStatus st = allgather_direct(w, m, ins, hg, &done, d);
    return st != IR_OK || done ? st : coll_allgather_operands(w, ins, hg->color, d);
}

IrStatus coll_allgather_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d)
{
    int64_t dim = 0;
    IrStatus st = coll_op_dim(m, ins, ps, &dim, d);
    if (st != IR_OK)
        return st;
    if (!coll_scaled(ps, rs, dim, size))
        return coll_shape_fail(m, ins, d, ps, rs, size);
    DevValue *v = dev_value_new_uninit(rs);
    if (!v)
        return IR_ENOMEM;
    for (int32_t j = 0; j < size; j++)
        coll_gather_block(ops[members[j]][k], j, size, dim, &v, 1, coll_stream_into(w->stream_bound, &v, 1, v->nbytes));
    *out = v;
    return IR_OK;
}
