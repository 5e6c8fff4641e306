/*
 * result.c: one device's result of a collective, given the operands of
 * the devices it reads (published in shared memory, other hosts' brought
 * in by the leader): the checks every collective shares, then the
 * collective's in-host step (coll_allreduce_part in allreduce.c, ...).
 * Every member of a group reads the same operands in the same group
 * order, so the members of an all-reduce compute bit-identical results.
 * Also the split path: a group wholly on the host computing its
 * all-reduce or all-gather together (coll_split_ok, coll_split_part).
 */
#include "coll.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

IrStatus coll_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_error(d, st, m->file, m->src, ins->pos, "%s: %s", ins->name, msg);
}

bool coll_dims_equal(const IrShape *a, const IrShape *b)
{
    return a->type == b->type && a->rank == b->rank && ir_dims_equal(a->dims, b->dims, a->rank);
}

static void **coll_ptrs_get(CollPtrs *l, int32_t n)
{
    l->p = n <= COLL_PTRS_ON_STACK ? l->stack : ts_malloc((size_t)n * sizeof *l->p);
    return l->p;
}

void coll_ptrs_free(CollPtrs *l)
{
    if (l->p != l->stack)
        ts_free(l->p);
    l->p = NULL;
}

/* Operand k of every member, in group order. */
const void *const *coll_member_data(CollPtrs *l, DevValue *const *const *ops, const int64_t *members, int32_t size,
                                      int32_t k)
{
    void **p = coll_ptrs_get(l, size);
    for (int32_t j = 0; p && j < size; j++)
        p[j] = ops[members[j]][k]->data;
    return (const void *const *)p;
}

/* The elements of a box along one dimension of shape s: `outer` runs
 * (the dimensions before dim), each of `inner` elements per index of dim
 * (the dimensions after it). */
void coll_runs_of(const IrShape *s, int64_t dim, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int32_t i = 0; i < s->rank; i++) {
        if (i < dim)
            *outer *= s->dims[i];
        else if (i > dim)
            *inner *= s->dims[i];
    }
}



/* The dimension of an all-gather, reduce-scatter or all-to-all, checked
 * against the operand's rank. */
IrStatus coll_op_dim(const IrModule *m, const IrInstr *ins, const IrShape *ps, int64_t *dim, IrDiag *d)
{
    *dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    if (*dim < 0 || *dim >= ps->rank)
        return coll_fail(m, ins, d, IR_EINPUT, "dimension %lld is out of range of the operand's rank %d",
                         (long long)*dim, (int)ps->rank);
    return IR_OK;
}

/* Shape `want` is `have` with dimension `dim` multiplied by `times`. */
bool coll_scaled(const IrShape *have, const IrShape *want, int64_t dim, int64_t times)
{
    if (have->type != want->type || have->rank != want->rank)
        return false;
    for (int32_t i = 0; i < have->rank; i++)
        if (want->dims[i] != (i == dim ? have->dims[i] * times : have->dims[i]))
            return false;
    return true;
}

IrStatus coll_shape_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, const IrShape *ps, const IrShape *rs,
                           int32_t size)
{
    char *a = ir_shape_str(ps, false), *b = ir_shape_str(rs, false);
    IrStatus st = coll_fail(m, ins, d, IR_EINPUT, "over a group of %d devices, an operand %s cannot give %s", (int)size,
                            a ? a : "?", b ? b : "?");
    ts_free(a);
    ts_free(b);
    return st;
}


bool coll_split_ok(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops, const int64_t *members,
                      int32_t size, int32_t nopnd, IrOpcode *op)
{
    *op = OP_COUNT;
    if ((ins->op != OP_ALL_REDUCE && ins->op != OP_ALL_GATHER) || nopnd != 1 || size < 1 ||
        ins->shape.type == IR_TUPLE)
        return false;
    for (int32_t j = 0; j < size; j++)
        if (!ops[members[j]] || !ops[members[j]][0])
            return false;
    const IrShape *ps = &ops[members[0]][0]->shape, *rs = &ins->shape;
    if (ps->type == IR_TUPLE)
        return false;
    for (int32_t j = 1; j < size; j++)
        if (!coll_dims_equal(&ops[members[j]][0]->shape, ps))
            return false;
    if (ins->op == OP_ALL_GATHER) {
        int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
        return dim >= 0 && dim < ps->rank && coll_scaled(ps, rs, dim, size);
    }
    *op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    return *op != OP_COUNT && coll_dims_equal(ps, rs) && coll_can_combine(*op, ps->type);
}

/* An all-reduce's slice `part` of `size` over operand `first`'s
 * elements [*lo, *hi): whole cache lines but the last. false: empty. */
static bool split_slice(const DevValue *first, int32_t size, int32_t part, int64_t *lo, int64_t *hi)
{
    int64_t count = dev_value_elements(first), es = (int64_t)ir_type_size(first->shape.type);
    int64_t line = es > 0 && es < 64 ? 64 / es : 1;
    int64_t per = (count + size - 1) / size;
    per = (per + line - 1) / line * line;
    *lo = per * part;
    *hi = *lo + per < count ? *lo + per : count;
    return *lo < *hi;
}

void coll_split_part(const IrInstr *ins, DevValue *const *const *ops, const int64_t *members, int32_t size,
                        IrOpcode op, int32_t part, DevValue *const *out, int32_t nout, void **scratch, bool stream)
{
    if (ins->op == OP_ALL_GATHER) {
        int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
        coll_gather_block(ops[members[part]][0], part, size, dim, out, nout, stream);
        return;
    }
    const DevValue *first = ops[members[0]][0];
    int64_t lo, hi;
    if (!split_slice(first, size, part, &lo, &hi))
        return;
    void **src = scratch, **dst = scratch + size;
    for (int32_t j = 0; j < size; j++)
        src[j] = ops[members[j]][0]->data;
    for (int32_t q = 0; q < nout; q++)
        dst[q] = out[q]->data;
    coll_combine(op, first->shape.type, dst, nout, lo, (const void *const *)src, size, lo, hi - lo, stream);
}

void coll_split_part_add(DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t part,
                         DevValue *const *out, DevValue *const *add, void **scratch, bool stream)
{
    const DevValue *first = ops[members[0]][0];
    int64_t lo, hi;
    if (!split_slice(first, size, part, &lo, &hi))
        return;
    void **src = scratch, **dst = scratch + size, **with = scratch + 2 * size;
    for (int32_t j = 0; j < size; j++) {
        src[j] = ops[members[j]][0]->data;
        dst[j] = out[j]->data;
        with[j] = add[j]->data;
    }
    coll_combine_add(first->shape.type, dst, size, lo, (const void *const *)src, size, lo,
                     (const void *const *)with, hi - lo, stream);
}

/* Result part k (shape rs) of a collective that acts on each operand on
 * its own: the collective's in-host step (its file). */
static IrStatus one_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me,
                         DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t mine, int32_t k,
                         const IrShape *rs, DevValue **out, IrDiag *d)
{
    const DevValue *opnd = ops[me][k];
    const IrShape *ps = &opnd->shape;
    if (ps->type == IR_TUPLE || rs->type == IR_TUPLE)
        return coll_fail(m, ins, d, IR_EUNSUPPORTED, "tuple-shaped operands are not supported");
    /* A broadcast reads only its root (across hosts nothing else is
     * brought in), a permute only its source. */
    bool all = ins->op != OP_COLLECTIVE_PERMUTE && ins->op != OP_COLLECTIVE_BROADCAST;
    for (int32_t j = 0; j < (all ? size : ins->op == OP_COLLECTIVE_BROADCAST); j++)
        if (!coll_dims_equal(&ops[members[j]][k]->shape, ps))
            return coll_fail(m, ins, d, IR_EINPUT, "device %lld gives an operand of another shape",
                             (long long)members[j]);
    /* A group of this device alone (and a permute from itself): the
     * result is its operand, shared (a value is not written while
     * shared), not a copy; the executor runs such groups as the identity
     * without a runtime too (exec.c's run_collective_alone), and the
     * memory plan counts no bytes for them (partition/memory.c). */
    bool self = ins->op == OP_COLLECTIVE_PERMUTE ? coll_permute_source(ins, w, me) == me
                                                 : size == 1 && members[0] == me;
    if (self && coll_dims_equal(ps, rs)) {
        *out = dev_value_ref(ops[me][k]);
        return IR_OK;
    }
    switch (ins->op) {
    case OP_ALL_REDUCE:
    case OP_COLLECTIVE_REDUCE: return coll_allreduce_part(m, ins, w, ops, members, size, k, ps, rs, out, d);
    case OP_COLLECTIVE_BROADCAST: return coll_broadcast_part(m, ins, ops, members, size, k, ps, rs, out, d);
    case OP_ALL_GATHER: return coll_allgather_part(m, ins, w, ops, members, size, k, ps, rs, out, d);
    case OP_REDUCE_SCATTER:
        return coll_reduce_scatter_part(m, ins, w, ops, members, size, mine, k, ps, rs, out, d);
    case OP_ALL_TO_ALL: return coll_alltoall_part(m, ins, w, ops, members, size, mine, k, ps, rs, out, d);
    case OP_COLLECTIVE_PERMUTE: return coll_permute_part(m, ins, w, me, ops, size, k, rs, out, d);
    default: return coll_fail(m, ins, d, IR_EINTERNAL, "not a collective");
    }
}



IrStatus coll_result(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me,
                        DevValue *const *const *ops, int32_t nopnd, DevValue *reduced, DevValue **out, IrDiag *d)
{
    *out = NULL;
    int64_t ndev = w->n * w->r;
    int64_t *members = ts_malloc((size_t)ndev * sizeof *members);
    if (!members)
        return coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    int32_t size = 0, mine = 0;
    IrStatus st = ins->op == OP_COLLECTIVE_PERMUTE ? IR_OK : coll_group(m, ins, w, me, members, &size, &mine, d);
    if (ins->op == OP_COLLECTIVE_PERMUTE)
        members[size++] = me;
    bool tuple = ins->shape.type == IR_TUPLE;
    if (st != IR_OK) {
    } else if (nopnd < 1) {
        st = coll_fail(m, ins, d, IR_EINPUT, "needs an operand");
    } else if (ins->op == OP_RAGGED_ALL_TO_ALL) {
        st = coll_alltoall_ragged(m, ins, ops, members, size, mine, nopnd, me, out, d);
    } else if (ins->op == OP_ALL_TO_ALL && ins->a.dimensions.n == 0) {
        st = coll_alltoall_tuple(m, ins, ops, members, size, mine, nopnd, out, d);
    } else if (reduced && !tuple) {
        /* The leader's one value for the group's members here: each
         * takes a share, counted against its own device. */
        if (!(*out = dev_value_share(reduced, dev_alloc_current())))
            st = coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    } else if (!tuple || nopnd == 1) {
        st = one_part(m, ins, w, me, ops, members, size, mine, 0, tuple ? &ins->shape.tuple[0] : &ins->shape, out, d);
        if (st == IR_OK && tuple) {
            DevValue *el = *out;
            if (!(*out = dev_value_tuple(&ins->shape, 1, &el))) {
                dev_value_unref(el);
                st = IR_ENOMEM;
            }
        }
    } else if (ins->shape.ntuple != nopnd) {
        st = coll_fail(m, ins, d, IR_EINPUT, "%d operands but %d results", (int)nopnd, (int)ins->shape.ntuple);
    } else {
        DevValue **el = ts_calloc((size_t)nopnd, sizeof *el);
        st = el ? IR_OK : IR_ENOMEM;
        for (int32_t k = 0; st == IR_OK && k < nopnd; k++)
            st = one_part(m, ins, w, me, ops, members, size, mine, k, &ins->shape.tuple[k], &el[k], d);
        if (st == IR_OK && !(*out = dev_value_tuple(&ins->shape, nopnd, el)))
            st = IR_ENOMEM;
        for (int32_t k = 0; el && st != IR_OK && k < nopnd; k++)
            dev_value_unref(el[k]);
        ts_free(el);
    }
    ts_free(members);
    if (st == IR_ENOMEM && (!d || d->status == IR_OK))
        coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    return st;
}
