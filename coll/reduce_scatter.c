/*
 * reduce_scatter.c: reduce-scatter, in a host and across hosts.
 *
 * In a host (coll_reduce_scatter_part): member i's result is block i (of
 * `size` along the dimension) of the reducer over every member's operand
 * in group order. Group {d0,d1}, operands [a0 a1] and [b0 b1]:
 *
 *     d0: a0+b0      d1: a1+b1
 *
 * Across hosts with a simple reducer: each host combines its own members'
 * operands in group order (the identity where it has none), cuts the
 * partial into the group's blocks, and one reduce_scatter_in among the
 * color's hosts brings each host only its members' blocks:
 *
 *     h0 {d0: [a0 a1 a2 a3], d1: [b0 b1 b2 b3]}   h1 {d2: [c..], d3: [e..]}
 *     step 1: h0: p = a+b, sends p to the segments of d0..d3; h1: q = c+e
 *     step 2: h0 receives blocks 0, 1 of p+q; h1 blocks 2, 3
 *     step 3: d0 takes block 0, d1 block 1, d2 block 2, d3 block 3
 *
 * One device a host (reduce_scatter_direct; the direct path of steps.c):
 * reduce_scatter_into straight from the operand into the result. Floats narrower than f32 and uneven groups: the
 * operands travel (coll_allgather_operands) and each device combines in
 * group order.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reduce-scatter: this member's slice (index `mine` along dim, rs's
 * extent) of the combination of every member's operand k, computed alone:
 * each operand's slice read once. */
static IrStatus reduce_slice(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t mine, int32_t k, int64_t dim,
                             const IrShape *rs, DevValue **out, IrDiag *d)
{
    IrOpcode op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    const IrShape *ps = &ops[members[0]][k]->shape;
    if (op == OP_COUNT || !coll_can_combine(op, ps->type)) {
        /* A reducer computation: the whole combination, then the slice. */
        DevValue *sum = NULL, *v = NULL;
        IrStatus st = coll_reduce_members(m, ins, w, ops, members, size, k, &sum, d);
        if (st == IR_OK && !(v = dev_value_new_uninit(rs)))
            st = IR_ENOMEM;
        if (st == IR_OK) {
            int64_t zero[IR_MAX_RANK] = {0}, off[IR_MAX_RANK] = {0};
            off[dim] = mine * rs->dims[dim];
            coll_copy_box(ir_type_size(ps->type), ps->rank, sum->data, ps->dims, off, v->data, rs->dims, zero,
                        rs->dims);
            *out = v;
        }
        dev_value_unref(sum);
        return st;
    }
    DevValue *v = dev_value_new_uninit(rs);
    CollPtrs l;
    const void *const *src = v ? coll_member_data(&l, ops, members, size, k) : NULL;
    if (!src) {
        dev_value_unref(v);
        return IR_ENOMEM;
    }
    int64_t outer, inner;
    coll_runs_of(ps, dim, &outer, &inner);
    int64_t run = rs->dims[dim] * inner, row = ps->dims[dim] * inner;
    bool stream = coll_stream_into(w->stream_bound, &v, 1, v->nbytes);
    void *dst = v->data;
    for (int64_t o = 0; run > 0 && o < outer; o++)
        coll_combine(op, ps->type, &dst, 1, o * run, src, size, o * row + mine * run, run, stream);
    coll_ptrs_free(&l);
    *out = v;
    return IR_OK;
}

/* Reduce-scatter of one operand across hosts, with a simple reducer:
 * for each group spanning hosts of this host's color (coll_cross_groups),
 * this host combines its own members in group order (the identity where
 * it has none) and cuts the partial into the group's blocks; one MPI
 * reduce-scatter among the color's hosts brings each host only its own
 * members' blocks, combined over every host (reduced[g]). *done false:
 * the groups do not cut the operand evenly (coll_allgather_operands then). */
static IrStatus scatter_across(CollHost *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const int32_t *color,
                               bool *done, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    IrType t = mine->shape.type;
    size_t es = ir_type_size(t);
    int64_t count = dev_value_elements(mine), hosts = w->ndev / w->nlocal, me = coll_host_of(w, w->first);
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *counts = ts_calloc((size_t)hosts, sizeof(int64_t));
    int64_t ncross = 0;
    IrStatus st = members && cross && counts ? coll_cross_groups(w, m, ins, color, members, cross, &ncross, d) : coll_oom(d);
    int32_t size = 0, idx = 0;
    if (st == IR_OK)
        st = coll_uniform_size(w, m, ins, members, &size, d);
    int64_t dim = st == IR_OK ? coll_even_dim(ins, mine, size) : -1;
    *done = dim >= 0 && ins->shape.type == t && dev_value_elements(mine) / size == ir_shape_elements(&ins->shape);
    int64_t be = *done ? count / size : 0;
    /* Each host's segment: its members' blocks, group by group. */
    for (int64_t j = 0; *done && st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t i = 0; st == IR_OK && i < sz; i++)
            counts[coll_host_of(w, members[i])] += be;
    }
    if (st != IR_OK || !*done) {
        ts_free(members);
        ts_free(cross);
        ts_free(counts);
        return st;
    }
    int64_t total = 0;
    for (int64_t h = 0; h < hosts; h++)
        total += counts[h];
    uint8_t *part = ts_malloc((size_t)count * es + 1), *send = ts_malloc((size_t)total * es + 1);
    uint8_t *recv = ts_malloc((size_t)counts[me] * es + 1);
    int64_t *at = ts_calloc((size_t)hosts, sizeof(int64_t)); /* each host's segment filled so far */
    st = part && send && recv && at ? IR_OK : coll_oom(d);
    for (int64_t h = 1; at && h < hosts; h++)
        at[h] = at[h - 1] + counts[h - 1];
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        bool first = true;
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            if (!coll_on_host(w, members[i]))
                continue;
            if (first)
                memcpy(part, w->ops[members[i]][0]->data, (size_t)count * es);
            else
                dev_red_combine_array(op, t, part, w->ops[members[i]][0]->data, count);
            first = false;
        }
        if (first)
            dev_red_fill_identity(op, t, part, count);
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            int64_t h = coll_host_of(w, members[i]);
            coll_copy_block(&mine->shape, part, dim, sz, i, send + (size_t)at[h] * es);
            at[h] += be;
        }
    }
    if (st == IR_OK)
        st = w->t->reduce_scatter_in(w->t, color, coll_xfer_kind(ins), (int64_t)(be * (int64_t)es), send, counts,
                                            recv, t, op, d);
    /* This host's blocks, in the order they were packed. */
    int64_t o = 0;
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            if (!coll_on_host(w, members[i]))
                continue;
            DevValue *v = dev_value_new_uninit(&ins->shape);
            if (!v) {
                st = coll_oom(d);
                break;
            }
            if (be)
                memcpy(v->data, recv + (size_t)o * es, (size_t)be * es);
            o += be;
            w->reduced[members[i]] = v;
        }
    }
    ts_free(part);
    ts_free(send);
    ts_free(recv);
    ts_free(at);
    ts_free(members);
    ts_free(cross);
    ts_free(counts);
    return st;
}

/* Floats narrower than f32 (f16, bf16, f8): a sum rounded to them at
 * every step moves by an ulp with the order of its terms, more than the
 * oracle allows, so their reduce-scatters keep one process's group order
 * (the operands travel: coll_allgather_operands) instead of combining per host. */
static bool order_sensitive(IrType t)
{
    return ir_type_is_float(t) && ir_type_size(t) < 4;
}

/* Across hosts, one device a host and each group on increasing hosts
 * (the direct path, steps.c), a simple reducer the combine loops run:
 * one reduce_scatter_into from the operand straight into the result,
 *
 *     h0: [a0 a1]   h1: [b0 b1]   ->   h0: a0+b0   h1: a1+b1
 *
 * *done: it ran. */
static IrStatus reduce_scatter_direct(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                                      bool *done, IrDiag *d)
{
    CollDirect c;
    if (!coll_direct_operand(w, ins, hg, &c))
        return IR_OK;
    IrOpcode op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    if (op == OP_COUNT || !coll_can_combine(op, c.ps->type))
        return IR_OK;
    IrStatus st = coll_direct_group(w, m, ins, &c, d);
    int64_t n = st == IR_OK ? c.ps->dims[c.dim] : 0;
    if (st != IR_OK || !coll_direct_fits(&c, n % c.size == 0 ? n / c.size : -1))
        return st;
    DevValue *v = dev_value_new_uninit(c.rs);
    st = v ? w->t->reduce_scatter_into(w->t, hg->color, coll_xfer_kind(ins), c.x->nbytes, c.x->data, v->data,
                                       dev_value_elements(c.x), c.ps->type, op, d)
           : coll_oom(d);
    return coll_direct_done(w, v, st, done);
}

/* The across-hosts step (the leader's): the direct path, else the
 * per-host partials (scatter_across), else the operands travel. */
IrStatus coll_reduce_scatter_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                                    IrDiag *d)
{
    bool done = false;
    IrStatus st = reduce_scatter_direct(w, m, ins, hg, &done, d);
    if (st != IR_OK || done)
        return st;
    IrOpcode op = coll_transport_op(w, m, ins);
    if (op != OP_COUNT && w->nops == 1 && ins->shape.type != IR_TUPLE &&
        w->ops[w->first][0]->shape.type != IR_TUPLE && !order_sensitive(w->ops[w->first][0]->shape.type) &&
        ((st = scatter_across(w, m, ins, op, hg->color, &done, d)) != IR_OK || done))
        return st;
    return coll_allgather_operands(w, ins, hg->color, d);
}

IrStatus coll_reduce_scatter_part(const IrModule *m, const IrInstr *ins, const CollWorld *w,
                                  DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t mine,
                                  int32_t k, const IrShape *ps, const IrShape *rs, DevValue **out, IrDiag *d)
{
    int64_t dim = 0;
    IrStatus st = coll_op_dim(m, ins, ps, &dim, d);
    if (st != IR_OK)
        return st;
    if (!coll_scaled(rs, ps, dim, size))
        return coll_shape_fail(m, ins, d, ps, rs, size);
    return reduce_slice(m, ins, w, ops, members, size, mine, k, dim, rs, out, d);
}
