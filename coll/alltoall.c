/*
 * alltoall.c: all-to-all, in a host and across hosts.
 *
 * In a host (coll_alltoall_part): member i receives block i of every
 * member's operand, in group order. Group {d0,d1}, operands [a0 a1] and
 * [b0 b1]:
 *
 *     d0: [a0 b0]      d1: [a1 b1]
 *
 * Without a dimension, operand j of every member goes to member j (a
 * tuple); ragged-all-to-all writes each member's updates into the
 * receiver's output rows.
 *
 * Across hosts: host A sends host B, for each group spanning hosts, block
 * i of each of A's members for each of B's members i (point to point,
 * one message a pair of hosts), nothing else:
 *
 *     h0 {d0: [a0 a1 a2 a3], d1: [b..]}   h1 {d2: [c..], d3: [e..]}
 *     h0 -> h1: a2 a3 b2 b3      h1 -> h0: c0 c1 e0 e1
 *     then each device picks its blocks as in a host
 *
 * One device a host (alltoall_direct; the direct path of steps.c):
 * alltoall_in straight from the operand into the result.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* all-to-all without a dimension: operand j of every member goes to
 * member j; result j is what member j sent here. */
IrStatus coll_alltoall_tuple(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                                 const int64_t *members, int32_t size, int32_t mine, int32_t nopnd, DevValue **out,
                                 IrDiag *d)
{
    if (nopnd != size || ins->shape.type != IR_TUPLE || ins->shape.ntuple != size)
        return coll_fail(m, ins, d, IR_EINPUT, "an all-to-all without dimensions over a group of %d devices needs "
                         "%d operands and results, not %d", (int)size, (int)size, (int)nopnd);
    DevValue **el = ts_calloc((size_t)size, sizeof *el);
    if (!el)
        return IR_ENOMEM;
    IrStatus st = IR_OK;
    for (int32_t j = 0; st == IR_OK && j < size; j++) {
        const DevValue *v = ops[members[j]][mine];
        if (!coll_dims_equal(&v->shape, &ins->shape.tuple[j]))
            st = coll_shape_fail(m, ins, d, &v->shape, &ins->shape.tuple[j], size);
        else if (!(el[j] = dev_value_clone(v)))
            st = IR_ENOMEM;
    }
    if (st == IR_OK && !(*out = dev_value_tuple(&ins->shape, size, el)))
        st = IR_ENOMEM;
    for (int32_t j = 0; st != IR_OK && j < size; j++)
        dev_value_unref(el[j]);
    ts_free(el);
    return st;
}

/* ragged-all-to-all(input, output, input_offsets, send_sizes,
 * output_offsets, recv_sizes): the offsets and sizes hold U updates per
 * member, update e going to member e / U: rows [input_offsets[e],
 * + send_sizes[e]) of the sender's input land at rows output_offsets[e] of
 * that member's output (the sender's offsets name the receiver's rows).
 * This device's result is its own output with every update sent to it
 * written in. Example (2 devices, U 1): device 0 input [a b c], offsets
 * {0,1} sizes {1,2} output_offsets {0,0}; device 1 input [d e], offsets
 * {0,1} sizes {1,1} output_offsets {1,1}: device 0 gets [a d . .], device
 * 1 gets [b c e .] (rows of output otherwise kept). */
IrStatus coll_alltoall_ragged(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                                  const int64_t *members, int32_t size, int32_t mine, int32_t nopnd, int64_t me,
                                  DevValue **out, IrDiag *d)
{
    if (nopnd != 6)
        return coll_fail(m, ins, d, IR_EINPUT, "ragged-all-to-all takes 6 operands, not %d", (int)nopnd);
    const DevValue *own = ops[me][1];
    DevValue *r = dev_value_clone(own);
    if (!r)
        return IR_ENOMEM;
    int64_t rows = own->shape.rank ? own->shape.dims[0] : 0;
    int64_t row = rows ? own->nbytes / rows : 0;
    for (int32_t j = 0; j < size; j++) {
        DevValue *const *s = ops[members[j]];
        const DevValue *in = s[0], *ioff = s[2], *send = s[3], *ooff = s[4];
        int64_t n = dev_value_elements(ioff);
        if (in->shape.type != own->shape.type || in->shape.rank != own->shape.rank || in->shape.rank < 1 ||
            !ir_dims_equal(in->shape.dims + 1, own->shape.dims + 1, in->shape.rank - 1) ||
            dev_value_elements(send) != n || dev_value_elements(ooff) != n || n % size != 0) {
            dev_value_unref(r);
            return coll_fail(m, ins, d, IR_EINPUT, "device %lld's operands are not a ragged layout over %d devices "
                             "(rows of one shape, offsets and sizes of one length, a multiple of the group)",
                             (long long)members[j], (int)size);
        }
        int64_t u = n / size;
        for (int64_t e = (int64_t)mine * u; e < (int64_t)(mine + 1) * u; e++) {
            int64_t a = dev_load_i64(ioff->shape.type, ioff->data, e);
            int64_t c = dev_load_i64(send->shape.type, send->data, e);
            int64_t b = dev_load_i64(ooff->shape.type, ooff->data, e);
            if (a < 0 || c < 0 || b < 0 || c > in->shape.dims[0] - a || c > rows - b) {
                dev_value_unref(r);
                return coll_fail(m, ins, d, IR_EINPUT, "device %lld's update %lld (rows %lld, %lld of them, to row "
                                 "%lld) is out of bounds", (long long)members[j], (long long)e, (long long)a,
                                 (long long)c, (long long)b);
            }
            if (c > 0)
                memcpy(r->data + b * row, in->data + a * row, (size_t)(c * row));
        }
    }
    *out = r;
    return IR_OK;
}

/* All-to-all of one operand along a dimension across hosts: member i of
 * a group receives block i of every member's operand, so host A sends
 * host B, for each group spanning hosts, block i of each of A's members
 * for each of B's members i (point to point, one message per pair of
 * hosts), nothing else. The receiver rebuilds each remote member's
 * operand with just the blocks its own members read (the others zero),
 * and coll.c picks the results as for local operands. *done false: the
 * groups do not cut the operand evenly (coll_allgather_operands then). */
static IrStatus alltoall_across(CollHost *w, const IrModule *m, const IrInstr *ins, const int32_t *color, bool *done,
                                IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    size_t es = ir_type_size(mine->shape.type);
    int64_t count = dev_value_elements(mine), hosts = w->ndev / w->nlocal, me = coll_host_of(w, w->first);
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    CollXfer *sends = ts_calloc((size_t)hosts, sizeof *sends), *recvs = ts_calloc((size_t)hosts, sizeof *recvs);
    int64_t ncross = 0;
    IrStatus st = members && cross && sends && recvs ? coll_cross_groups(w, m, ins, color, members, cross, &ncross, d)
                                                     : coll_oom(d);
    int32_t size = 0, idx = 0;
    if (st == IR_OK)
        st = coll_uniform_size(w, m, ins, members, &size, d);
    int64_t dim = st == IR_OK ? coll_even_dim(ins, mine, size) : -1;
    *done = dim >= 0 && w->nops == 1;
    int64_t be = *done ? count / size : 0;
    /* Bytes of each pair's message: pass 0 sizes, pass 1 packs (host
     * order of peers, groups in order, senders in group order, their
     * blocks for the peer's members in group order). */
    for (int pass = 0; *done && st == IR_OK && pass < 2; pass++) {
        for (int64_t h = 0; pass && h < hosts; h++) {
            sends[h].host = recvs[h].host = (int)h;
            sends[h].buf = ts_malloc(sends[h].bytes + 1);
            recvs[h].buf = ts_malloc(recvs[h].bytes + 1);
            if (!sends[h].buf || !recvs[h].buf)
                st = coll_oom(d);
            sends[h].bytes = recvs[h].bytes = 0; /* refilled as packed */
        }
        for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
            int32_t sz = 0;
            st = coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
            for (int32_t s = 0; st == IR_OK && s < sz; s++)
                for (int32_t r = 0; r < sz; r++) {
                    int64_t hs = coll_host_of(w, members[s]), hr = coll_host_of(w, members[r]);
                    if (hs == hr || (hs != me && hr != me))
                        continue;
                    if (hs == me) {
                        if (pass)
                            coll_copy_block(&mine->shape, w->ops[members[s]][0]->data, dim, sz, r,
                                       (uint8_t *)sends[hr].buf + sends[hr].bytes);
                        sends[hr].bytes += (size_t)be * es;
                    } else {
                        recvs[hs].bytes += (size_t)be * es;
                    }
                }
        }
    }
    int32_t nsend = 0, nrecv = 0;
    for (int64_t h = 0; *done && st == IR_OK && h < hosts; h++) {
        /* Keep only the peers with data, in host order (their buffers move along). */
        if (sends[h].bytes)
            sends[nsend++] = sends[h];
        else
            ts_free(sends[h].buf);
        if (recvs[h].bytes)
            recvs[nrecv++] = recvs[h];
        else
            ts_free(recvs[h].buf);
        if (h >= nsend)
            sends[h].buf = NULL;
        if (h >= nrecv)
            recvs[h].buf = NULL;
    }
    if (*done && st == IR_OK)
        st = w->t->exchange(w->t, coll_xfer_kind(ins), (int64_t)(be * (int64_t)es), sends, nsend, recvs, nrecv,
                                   d);
    /* Unpack in the order packed: remote senders' operands, with the
     * blocks of this host's members. */
    w->nremote = w->nops;
    int64_t *at = *done && st == IR_OK ? ts_calloc((size_t)hosts, sizeof(int64_t)) : NULL;
    int32_t *slot = at ? ts_malloc((size_t)hosts * sizeof(int32_t)) : NULL;
    if (*done && st == IR_OK && (!at || !slot))
        st = coll_oom(d);
    for (int64_t h = 0; slot && h < hosts; h++)
        slot[h] = -1;
    for (int32_t k = 0; slot && k < nrecv; k++)
        slot[recvs[k].host] = k;
    for (int64_t j = 0; at && st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t s = 0; st == IR_OK && s < sz; s++) {
            int64_t hs = coll_host_of(w, members[s]);
            if (hs == me)
                continue;
            for (int32_t r = 0; st == IR_OK && r < sz; r++) {
                if (coll_host_of(w, members[r]) != me)
                    continue;
                int64_t g = members[s];
                if (!w->remote[g]) {
                    DevValue **v = ts_calloc(1, sizeof *v);
                    if (!v || !(v[0] = dev_value_zeros(&mine->shape))) {
                        ts_free(v);
                        st = coll_oom(d);
                        break;
                    }
                    w->remote[g] = w->ops[g] = v;
                }
                /* block r of sender g's operand */
                int64_t soff[IR_MAX_RANK] = {0}, zero[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
                const IrShape *sh = &mine->shape;
                for (int32_t q = 0; q < sh->rank; q++)
                    ext[q] = sh->dims[q];
                ext[dim] = sh->dims[dim] / sz;
                soff[dim] = ext[dim] * r;
                coll_copy_box(es, sh->rank, (const uint8_t *)recvs[slot[hs]].buf + at[hs], ext, zero,
                            w->remote[g][0]->data, sh->dims, soff, ext);
                at[hs] += be * (int64_t)es;
            }
        }
    }
    for (int64_t h = 0; sends && h < hosts; h++) {
        ts_free(sends[h].buf);
        ts_free(recvs[h].buf);
    }
    ts_free(at);
    ts_free(slot);
    ts_free(sends);
    ts_free(recvs);
    ts_free(members);
    ts_free(cross);
    return st;
}

/* Across hosts, one device a host and each group on increasing hosts
 * (the direct path, steps.c), an all-to-all along a dimension: one
 * alltoall_in from the operand straight into the result,
 *
 *     h0: [a0 a1]   h1: [b0 b1]   ->   h0: [a0 b0]   h1: [a1 b1]
 *
 * *done: it ran. */
static IrStatus alltoall_direct(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                                bool *done, IrDiag *d)
{
    CollDirect c;
    if (ins->a.dimensions.n == 0 || !coll_direct_operand(w, ins, hg, &c))
        return IR_OK;
    IrStatus st = coll_direct_group(w, m, ins, &c, d);
    int64_t n = st == IR_OK ? c.ps->dims[c.dim] : 0;
    if (st != IR_OK || !coll_direct_fits(&c, n % c.size == 0 ? n : -1))
        return st;
    DevValue *v = dev_value_new_uninit(c.rs);
    st = v ? w->t->alltoall_in(w->t, hg->color, coll_xfer_kind(ins), c.x->nbytes, c.x->data, v->data,
                               (size_t)c.x->nbytes, coll_stream_into(w->tune.stream_bound, &v, 1, v->nbytes), d)
           : coll_oom(d);
    return coll_direct_done(w, v, st, done);
}

/* The across-hosts step (the leader's): the direct path, else blocks
 * point to point between hosts (alltoall_across), else the operands
 * travel. */
IrStatus coll_alltoall_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                              IrDiag *d)
{
    bool done = false;
    IrStatus st = alltoall_direct(w, m, ins, hg, &done, d);
    if (st != IR_OK || done)
        return st;
    if (w->nops == 1 && w->ops[w->first][0]->shape.type != IR_TUPLE &&
        ((st = alltoall_across(w, m, ins, hg->color, &done, d)) != IR_OK || done))
        return st;
    return coll_allgather_operands(w, ins, hg->color, d);
}

/* Chunk j of every member's operand along dim goes to member j; the
 * result concatenates, in group order, the chunks sent here. */
IrStatus coll_alltoall_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                            const int64_t *members, int32_t size, int32_t mine, int32_t k, const IrShape *ps,
                            const IrShape *rs, DevValue **out, IrDiag *d)
{
    int64_t dim = 0;
    IrStatus st = coll_op_dim(m, ins, ps, &dim, d);
    if (st != IR_OK)
        return st;
    if (!coll_dims_equal(ps, rs) || ps->dims[dim] % size != 0)
        return coll_shape_fail(m, ins, d, ps, rs, size);
    DevValue *v = dev_value_new_uninit(rs);
    if (!v)
        return IR_ENOMEM;
    int64_t outer, inner;
    coll_runs_of(ps, dim, &outer, &inner);
    size_t es = ir_type_size(ps->type);
    int64_t run = ps->dims[dim] / size * inner, row = ps->dims[dim] * inner;
    bool stream = coll_stream_into(w->stream_bound, &v, 1, v->nbytes);
    void *dst = v->data;
    for (int32_t j = 0; run > 0 && j < size; j++) {
        const uint8_t *src = ops[members[j]][k]->data;
        for (int64_t o = 0; o < outer; o++)
            coll_copy(&dst, 1, (size_t)(o * row + j * run) * es, src + (size_t)(o * row + mine * run) * es,
                         (size_t)run * es, stream);
    }
    *out = v;
    return IR_OK;
    }
