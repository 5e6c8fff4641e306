/*
 * allreduce.c: all-reduce (and collective-reduce), in a host and across
 * hosts.
 *
 * In a host (coll_allreduce_part; result.c's split path when the whole
 * group is on the host): every member's result is the reducer over the
 * members' operands in group order. Devices d0..d3 of one host, group
 * {d0,d1,d2,d3}, one element each:
 *
 *     d0: a   d1: b   d2: c   d3: e   ->   every member: ((a+b)+c)+e
 *
 * Split path: member j reduces slice j of the elements over every
 * member's operand and writes it into every member's result.
 *
 * Across hosts (coll_allreduce_across; the host's leader device moves
 * the data, hierarchically): 2 hosts h0 {d0,d1} and h1 {d2,d3}, group
 * {d0,d1,d2,d3}:
 *
 *     step 1, in each host:   h0: p0 = a+b         h1: p1 = c+e
 *     step 2, one transport call among the group's hosts (host order):
 *                             h0, h1: p0+p1
 *     step 3, in each host:   d0, d1 (and d2, d3) take a reference to it
 *
 * One group spanning hosts reduces straight from the members' operands
 * into the shared result (allreduce_into: pipelined point to point for
 * large buffers); several are packed into one buffer (a host without a
 * member of a group contributes the identity). A reducer the transport
 * cannot run itself goes through allreduce_any_in (a user-defined
 * operation calling the HLO reducer), when it commutes or every group's
 * hosts come in group order; else the operands travel and each device
 * combines in group order (coll_allgather_operands).
 *
 * An all-reduce taking in the add that reads its result (steps.c's
 * run_collective_add): in a host, each member writes its slice of the sum
 * plus every member's own addend into every member's result
 * (coll_split_part_add); elsewhere the add follows the result.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reducer's combination of operand k of every member, in group order
 * (one pass: every operand read once, the result written once). */
IrStatus coll_reduce_members(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                               const int64_t *members, int32_t size, int32_t k, DevValue **out, IrDiag *d)
{
    if (ins->ncalled < 1)
        return coll_fail(m, ins, d, IR_EINPUT, "a reduction without to_apply=");
    IrOpcode op = ir_simple_reducer(m, ins->called[0]);
    const DevValue *first = ops[members[0]][k];
    if (op != OP_COUNT && coll_can_combine(op, first->shape.type)) {
        /* A simple reducer: one pass, every operand read once. */
        DevValue *v = dev_value_new_uninit(&first->shape);
        CollPtrs l;
        const void *const *src = v ? coll_member_data(&l, ops, members, size, k) : NULL;
        if (!src) {
            dev_value_unref(v);
            return IR_ENOMEM;
        }
        void *dst = v->data;
        coll_combine(op, v->shape.type, &dst, 1, 0, src, size, 0, dev_value_elements(v),
                        coll_stream_into(w->stream_bound, &v, 1, v->nbytes));
        coll_ptrs_free(&l);
        *out = v;
        return IR_OK;
    }
    /* Any other reducer (complex add, ...): its computation, elementwise,
     * in group order (device/reducer_comp.c). */
    DevValue *v = dev_value_clone(first);
    if (!v)
        return IR_ENOMEM;
    int64_t count = dev_value_elements(v);
    for (int32_t j = 1; j < size; j++) {
        IrStatus st = dev_red_call(m, ins->called[0], v->shape.type, v->data, v->data, ops[members[j]][k]->data,
                                   count, d);
        if (st != IR_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", d->msg ? d->msg : "the reducer failed");
            dev_value_unref(v);
            ir_diag_clear(d); /* the error goes to the instruction */
            return coll_fail(m, ins, d, st, "%s", msg);
        }
    }
    *out = v;
    return IR_OK;
}

/* reduce_across for a color with one group spanning hosts (the group of
 * device `first`; members[] has room for every device): the result is
 * allocated once for the host and the transport's allreduce_into reduces
 * into it from the local members' operands, in group order. */
static IrStatus reduce_one_across(CollHost *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const int32_t *color,
                                  int64_t first, int64_t *members, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int32_t idx = 0, size = 0, nsrc = 0;
    IrStatus st = coll_group(m, ins, &cw, first, members, &size, &idx, d);
    const void **src = st == IR_OK ? ts_malloc((size_t)size * sizeof *src) : NULL;
    DevValue *v = src ? dev_value_new_uninit(&mine->shape) : NULL;
    if (st == IR_OK && !v)
        st = coll_oom(d);
    for (int32_t k = 0; st == IR_OK && k < size; k++)
        if (coll_on_host(w, members[k]))
            src[nsrc++] = w->ops[members[k]][0]->data;
    if (st == IR_OK && nsrc == 0)
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "an all-reduce group without a member here");
    if (st == IR_OK)
        st = w->t->allreduce_into(w->t, color, coll_xfer_kind(ins), mine->nbytes, src, nsrc, v->data,
                                         dev_value_elements(mine), mine->shape.type, op, d);
    for (int32_t k = 0; st == IR_OK && k < size; k++)
        if (coll_on_host(w, members[k]))
            w->reduced[members[k]] = dev_value_ref(v);
    dev_value_unref(v);
    ts_free(src);
    return st;
}

/* All-reduce of one operand across hosts: for each group whose members
 * live on several hosts of this host's color, this host combines its own
 * members (in group order), then one MPI all-reduce among the color's
 * hosts over a buffer of every such group (hosts without members of a
 * group contribute the identity). reduced[g] holds the result for each
 * local member g of such a group. */
static IrStatus reduce_across(CollHost *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const CollReducer *any,
                              const int32_t *color, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    int64_t count = dev_value_elements(mine);
    size_t b = (size_t)mine->nbytes;
    IrType t = mine->shape.type;
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t ncross = 0;
    IrStatus st = members && cross ? coll_cross_groups(w, m, ins, color, members, cross, &ncross, d) : coll_oom(d);
    if (st == IR_OK && ncross == 1 && !any && coll_can_combine(op, t)) {
        /* One group: straight from the local members' operands into the
         * result its local members share (no staging buffer, no copy out). */
        st = reduce_one_across(w, m, ins, op, color, cross[0], members, d);
        ts_free(members);
        ts_free(cross);
        return st;
    }
    uint8_t *buf = st == IR_OK ? ts_malloc(b * (size_t)ncross + 1) : NULL;
    bool *present = st == IR_OK ? ts_malloc((size_t)ncross + 1) : NULL;
    if (st == IR_OK && (!buf || !present))
        st = coll_oom(d);
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t idx = 0, size = 0;
        st = coll_group(m, ins, &cw, cross[j], members, &size, &idx, d);
        uint8_t *slice = buf + (size_t)j * b;
        bool first = true;
        for (int32_t k = 0; st == IR_OK && k < size; k++) {
            if (!coll_on_host(w, members[k]))
                continue;
            if (first)
                memcpy(slice, w->ops[members[k]][0]->data, b);
            else if (any)
                st = dev_red_call(m, any->comp, t, slice, slice, w->ops[members[k]][0]->data, count, d);
            else
                dev_red_combine_array(op, t, slice, w->ops[members[k]][0]->data, count);
            first = false;
        }
        present[j] = !first;
        if (first && !any)
            dev_red_fill_identity(op, t, slice, count);
    }
    if (st == IR_OK && any)
        st = w->t->allreduce_any_in(w->t, color, coll_xfer_kind(ins), (int64_t)b, buf, ncross, count, present, t,
                                           any, d);
    else if (st == IR_OK)
        st = w->t->allreduce_in(w->t, color, coll_xfer_kind(ins), (int64_t)b, buf, count * ncross, t, op, d);
    /* One value per group, shared by its local members (each takes a
     * share of it, result.c): a kernel writes in place only into a value
     * it alone holds (dev_value_sole), so sharing is safe. */
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        DevValue *v = dev_value_new_uninit(&mine->shape);
        int32_t idx = 0, size = 0;
        if (!v) {
            st = coll_oom(d);
            break;
        }
        if (b)
            memcpy(v->data, buf + (size_t)j * b, b);
        st = coll_group(m, ins, &cw, cross[j], members, &size, &idx, d);
        for (int32_t k = 0; st == IR_OK && k < size; k++)
            if (coll_on_host(w, members[k]))
                w->reduced[members[k]] = dev_value_ref(v);
        dev_value_unref(v);
    }
    ts_free(buf);
    ts_free(present);
    ts_free(members);
    ts_free(cross);
    return st;
}

/* May a reducer that is not proven commutative combine hierarchically?
 * Only if every group's members come host by host in ascending host
 * order (members of one host together): then combining each host's
 * members in group order, and the hosts in rank order (MPI's order for
 * a non-commutative operation), is the group order. Else the operands
 * travel and each device combines in group order (coll_allgather_operands). */
static IrStatus hosts_in_group_order(CollHost *w, const IrModule *m, const IrInstr *ins, bool *ok, IrDiag *d)
{
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    IrStatus st = members ? IR_OK : coll_oom(d);
    *ok = true;
    for (int64_t g = 0; st == IR_OK && *ok && g < w->ndev; g++) {
        int32_t size = 0, idx = 0;
        st = coll_group(m, ins, &cw, g, members, &size, &idx, d);
        for (int32_t j = 1; st == IR_OK && members[0] == g && j < size; j++)
            *ok = *ok && coll_host_of(w, members[j]) >= coll_host_of(w, members[j - 1]);
    }
    ts_free(members);
    return st;
}

IrStatus coll_allreduce_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                               IrDiag *d)
{
    IrOpcode op = coll_transport_op(w, m, ins);
    bool one = ins->ncalled > 0 && w->nops == 1 && ins->shape.type != IR_TUPLE &&
               w->ops[w->first][0]->shape.type != IR_TUPLE;
    if (one && op != OP_COUNT)
        return reduce_across(w, m, ins, op, NULL, hg->color, d);
    /* Any other reducer: a user-defined operation runs it (the transport's
     * allreduce_any_in), when the order of hosts allows. */
    CollReducer red = {m, ins->ncalled > 0 ? ins->called[0] : -1, false};
    bool general = one && red.comp >= 0 && red.comp < m->ncomp && m->comp[red.comp]->nparam == 2;
    IrStatus st = IR_OK;
    if (general) {
        red.commute = dev_red_commutes(m, red.comp);
        bool ordered = red.commute;
        if (!ordered)
            st = hosts_in_group_order(w, m, ins, &ordered, d);
        general = ordered;
    }
    if (st != IR_OK)
        return st;
    return general ? reduce_across(w, m, ins, op, &red, hg->color, d) : coll_allgather_operands(w, ins, hg->color, d);
}

IrStatus coll_allreduce_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d)
{
    if (!coll_dims_equal(ps, rs))
        return coll_shape_fail(m, ins, d, ps, rs, size);
    return coll_reduce_members(m, ins, w, ops, members, size, k, out, d);
}
