/*
 * coll.c: the result of each collective for one device, given the
 * operands of the devices it reads (coll.h). Every member of a group
 * reads the same operands in the same group order, so the members of an
 * all-reduce compute bit-identical results.
 */
#include "coll.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static IrStatus coll_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static IrStatus coll_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_error(d, st, m->file, m->src, ins->pos, "%s: %s", ins->name, msg);
}

static bool scaled(const IrShape *have, const IrShape *want, int64_t dim, int64_t times);
static IrStatus shape_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, const IrShape *ps, const IrShape *rs,
                           int32_t size);

/* ---- groups ---- */

static const char *mode_ids(IrGroupMode mode)
{
    return mode == IR_GROUPS_GLOBAL ? "devices" : mode == IR_GROUPS_PARTITION ? "partitions" : "replicas";
}

IrStatus rt_coll_group(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, int64_t me, int64_t *members,
                       int32_t *size, int32_t *my_index, IrDiag *d)
{
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    IrGroupMode mode = ir_group_mode(ins);
    int64_t rep = me / w->n, part = me % w->n;
    int64_t domain = mode == IR_GROUPS_GLOBAL ? w->n * w->r : mode == IR_GROUPS_PARTITION ? w->n : w->r;
    int64_t key = mode == IR_GROUPS_GLOBAL ? me : mode == IR_GROUPS_PARTITION ? part : rep;
    /* The keys of my group, into members[] first. */
    int32_t nkey = 0, found = -1;
    if (!g->present || g->ngroups == 0) {
        for (int64_t k = 0; k < domain; k++)
            members[nkey++] = k;
        found = 0;
    } else {
        for (int32_t k = 0; k < g->ngroups; k++)
            for (int32_t j = 0; j < g->group_size[k]; j++) {
                int64_t id = g->groups[k][j];
                if (id < 0 || id >= domain)
                    return coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld, but there are %lld %s",
                                     (long long)id, (long long)domain, mode_ids(mode));
                if (id != key)
                    continue;
                if (found >= 0)
                    return coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld twice", (long long)id);
                found = k;
            }
        if (found < 0) {
            members[nkey++] = key;
        } else {
            for (int32_t j = 0; j < g->group_size[found]; j++)
                members[nkey++] = g->groups[found][j];
        }
    }
    /* Keys to global ids. */
    int32_t n = 0;
    if (mode == IR_GROUPS_REPLICA_AND_PARTITION) {
        int64_t keys[nkey > 0 ? nkey : 1];
        memcpy(keys, members, (size_t)nkey * sizeof *keys);
        for (int64_t p = 0; p < w->n; p++)
            for (int32_t j = 0; j < nkey; j++)
                members[n++] = keys[j] * w->n + p;
    } else {
        for (int32_t j = 0; j < nkey; j++)
            members[n++] = mode == IR_GROUPS_GLOBAL      ? members[j]
                           : mode == IR_GROUPS_PARTITION ? rep * w->n + members[j]
                                                    : members[j] * w->n + part;
    }
    *my_index = 0;
    for (int32_t j = 0; j < n; j++)
        if (members[j] == me)
            *my_index = j;
    *size = n;
    return IR_OK;
}

/* The static half of rt_coll_group and of the shape checks, once per
 * instruction: every id in range and named once, and each result shape
 * fits the group size. */
static IrStatus check_one(const IrModule *m, const IrComputation *c, const IrInstr *ins, const RtCollWorld *w,
                          IrDiag *d)
{
    IrGroupMode mode = ir_group_mode(ins);
    int64_t domain = mode == IR_GROUPS_GLOBAL ? w->n * w->r : mode == IR_GROUPS_PARTITION ? w->n : w->r;
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if ((ins->op == OP_SEND || ins->op == OP_RECV) && !ins->a.x->is_host_transfer) {
        /* A link between devices: its pairs, at most one per target. */
        int32_t cap = (int32_t)(2 * w->n * w->r), n = 0;
        int64_t *v = ts_malloc((size_t)cap * sizeof *v);
        IrStatus st = v ? IR_OK : coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
        /* A send that names no pairs reaches no recv (its data is dropped);
         * a recv must say where its data comes from. */
        bool named = ir_frontend_attr(ins, "_xla_send_recv_source_target_pairs") != NULL;
        if (st == IR_OK && (named || ins->op == OP_RECV) && !ir_send_recv_pairs(ins, v, cap, &n))
            st = coll_fail(m, ins, d, IR_EINPUT, "a %s between devices needs its pairs (frontend_attributes="
                           "{_xla_send_recv_source_target_pairs=\"{{0,1},...}\"}, at most one for each of the %lld "
                           "devices)", ir_op_name(ins->op), (long long)(w->n * w->r));
        for (int32_t k = 0; st == IR_OK && k < n; k++)
            if (v[k] >= domain)
                st = coll_fail(m, ins, d, IR_EINPUT, "_xla_send_recv_source_target_pairs names %lld, but there are "
                               "%lld %s", (long long)v[k], (long long)domain, mode_ids(mode));
        ts_free(v);
        return st;
    }
    if (ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_PERMUTE_START) {
        const IrI64List *p = &ins->a.x->source_target_pairs;
        for (int32_t k = 0; k < p->n; k++)
            if (p->v[k] < 0 || (p->v[k] >= domain && !(mode == IR_GROUPS_PARTITION && p->v[k] < w->n * w->r)))
                return coll_fail(m, ins, d, IR_EINPUT, "source_target_pairs names %lld, but there are %lld %s",
                                 (long long)p->v[k], (long long)domain, mode_ids(mode));
        return IR_OK;
    }
    uint8_t *seen = ts_calloc((size_t)(domain > 0 ? domain : 1), 1);
    if (!seen)
        return coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    IrStatus st = IR_OK;
    int64_t size = g->present && g->ngroups > 0 ? g->group_size[0] : domain;
    for (int32_t k = 0; st == IR_OK && g->present && k < g->ngroups; k++)
        for (int32_t j = 0; st == IR_OK && j < g->group_size[k]; j++) {
            int64_t id = g->groups[k][j];
            if (id < 0 || id >= domain)
                st = coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld, but there are %lld %s", (long long)id,
                               (long long)domain, mode_ids(mode));
            else if (seen[id]++)
                st = coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld twice", (long long)id);
        }
    ts_free(seen);
    if (mode == IR_GROUPS_REPLICA_AND_PARTITION)
        size *= w->n;
    /* The shapes a group of `size` gives (one operand, arrays). */
    const IrShape *rs = &ins->shape;
    if (st != IR_OK || ins->nopnd != 1 || rs->type == IR_TUPLE || ins->opnd[0] < 0)
        return st;
    const IrShape *ps = &c->instr[ins->opnd[0]].shape;
    int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    if (ps->type == IR_TUPLE || dim < 0 || dim >= ps->rank || size < 1)
        return st;
    bool fits = ins->op == OP_ALL_GATHER      ? scaled(ps, rs, dim, size)
                : ins->op == OP_REDUCE_SCATTER ? scaled(rs, ps, dim, size)
                : ins->op == OP_ALL_TO_ALL     ? ps->dims[dim] % size == 0
                                               : true;
    return fits ? IR_OK : shape_fail(m, ins, d, ps, rs, (int32_t)size);
}

IrStatus rt_coll_check_module(const IrModule *m, const RtCollWorld *w, IrDiag *d)
{
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            const IrInstr *ins = &m->comp[k]->instr[i];
            bool coll = ins->op == OP_ALL_REDUCE || ins->op == OP_ALL_GATHER || ins->op == OP_REDUCE_SCATTER ||
                        ins->op == OP_ALL_TO_ALL || ins->op == OP_COLLECTIVE_PERMUTE ||
                        ins->op == OP_COLLECTIVE_BROADCAST || ins->op == OP_COLLECTIVE_REDUCE ||
                        ins->op == OP_RAGGED_ALL_TO_ALL || ins->op == OP_ALL_REDUCE_START ||
                        ins->op == OP_ALL_GATHER_START || ins->op == OP_COLLECTIVE_PERMUTE_START ||
                        ((ins->op == OP_SEND || ins->op == OP_RECV) && !ins->a.x->is_host_transfer);
            IrStatus st = coll ? check_one(m, m->comp[k], ins, w, d) : IR_OK;
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}

int64_t rt_coll_permute_source(const IrInstr *ins, const RtCollWorld *w, int64_t me)
{
    const IrI64List *p = &ins->a.x->source_target_pairs;
    IrGroupMode mode = ir_group_mode(ins);
    int64_t rep = me / w->n, part = me % w->n;
    int64_t key = mode == IR_GROUPS_GLOBAL ? me : mode == IR_GROUPS_PARTITION ? part : rep;
    int64_t src = -1;
    for (int32_t k = 0; k + 1 < p->n; k += 2)
        if (p->v[k + 1] == key)
            src = p->v[k];
    if (src < 0)
        return -1;
    /* IrGroupMode ids to global ids. tessel's partitioner repeats partition
     * pairs for every replica as global ids (partition + replica * N);
     * a pair naming the ids of this replica's partitions is the same. */
    if (mode == IR_GROUPS_PARTITION)
        src = src < w->n ? rep * w->n + src : src;
    else if (mode == IR_GROUPS_REPLICA)
        src = src * w->n + part;
    return src < w->n * w->r ? src : -1;
}

/* ---- the results ---- */

static bool dims_equal(const IrShape *a, const IrShape *b)
{
    return a->type == b->type && a->rank == b->rank && ir_dims_equal(a->dims, b->dims, a->rank);
}

/* Pointer lists for the loops (coll_kernels.c): a small one on the
 * caller's stack, a long one on the heap. */
enum { PTRS_ON_STACK = 64 };

typedef struct Ptrs {
    void **p;
    void *stack[PTRS_ON_STACK];
} Ptrs;

static void **ptrs_get(Ptrs *l, int32_t n)
{
    l->p = n <= PTRS_ON_STACK ? l->stack : ts_malloc((size_t)n * sizeof *l->p);
    return l->p;
}

static void ptrs_free(Ptrs *l)
{
    if (l->p != l->stack)
        ts_free(l->p);
    l->p = NULL;
}

/* Operand k of every member, in group order. */
static const void *const *member_data(Ptrs *l, DevValue *const *const *ops, const int64_t *members, int32_t size,
                                      int32_t k)
{
    void **p = ptrs_get(l, size);
    for (int32_t j = 0; p && j < size; j++)
        p[j] = ops[members[j]][k]->data;
    return (const void *const *)p;
}

/* The elements of a box along one dimension of shape s: `outer` runs
 * (the dimensions before dim), each of `inner` elements per index of dim
 * (the dimensions after it). */
static void runs_of(const IrShape *s, int64_t dim, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int32_t i = 0; i < s->rank; i++) {
        if (i < dim)
            *outer *= s->dims[i];
        else if (i > dim)
            *inner *= s->dims[i];
    }
}

/* The reducer's combination of operand k of every member, in group order
 * (one pass: every operand read once, the result written once). */
static IrStatus reduce_members(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, DevValue *const *const *ops,
                               const int64_t *members, int32_t size, int32_t k, DevValue **out, IrDiag *d)
{
    if (ins->ncalled < 1)
        return coll_fail(m, ins, d, IR_EINPUT, "a reduction without to_apply=");
    IrOpcode op = ir_simple_reducer(m, ins->called[0]);
    const DevValue *first = ops[members[0]][k];
    if (op != OP_COUNT && rt_coll_can_combine(op, first->shape.type)) {
        /* A simple reducer: one pass, every operand read once. */
        DevValue *v = dev_value_new_uninit(&first->shape);
        Ptrs l;
        const void *const *src = v ? member_data(&l, ops, members, size, k) : NULL;
        if (!src) {
            dev_value_unref(v);
            return IR_ENOMEM;
        }
        void *dst = v->data;
        rt_coll_combine(op, v->shape.type, &dst, 1, 0, src, size, 0, dev_value_elements(v),
                        rt_coll_stream_into(w->stream_bound, &v, 1, v->nbytes));
        ptrs_free(&l);
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

/* Reduce-scatter: this member's slice (index `mine` along dim, rs's
 * extent) of the combination of every member's operand k, computed alone:
 * each operand's slice read once. */
static IrStatus reduce_slice(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t mine, int32_t k, int64_t dim,
                             const IrShape *rs, DevValue **out, IrDiag *d)
{
    IrOpcode op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    const IrShape *ps = &ops[members[0]][k]->shape;
    if (op == OP_COUNT || !rt_coll_can_combine(op, ps->type)) {
        /* A reducer computation: the whole combination, then the slice. */
        DevValue *sum = NULL, *v = NULL;
        IrStatus st = reduce_members(m, ins, w, ops, members, size, k, &sum, d);
        if (st == IR_OK && !(v = dev_value_new_uninit(rs)))
            st = IR_ENOMEM;
        if (st == IR_OK) {
            int64_t zero[IR_MAX_RANK] = {0}, off[IR_MAX_RANK] = {0};
            off[dim] = mine * rs->dims[dim];
            rt_copy_box(ir_type_size(ps->type), ps->rank, sum->data, ps->dims, off, v->data, rs->dims, zero,
                        rs->dims);
            *out = v;
        }
        dev_value_unref(sum);
        return st;
    }
    DevValue *v = dev_value_new_uninit(rs);
    Ptrs l;
    const void *const *src = v ? member_data(&l, ops, members, size, k) : NULL;
    if (!src) {
        dev_value_unref(v);
        return IR_ENOMEM;
    }
    int64_t outer, inner;
    runs_of(ps, dim, &outer, &inner);
    int64_t run = rs->dims[dim] * inner, row = ps->dims[dim] * inner;
    bool stream = rt_coll_stream_into(w->stream_bound, &v, 1, v->nbytes);
    void *dst = v->data;
    for (int64_t o = 0; run > 0 && o < outer; o++)
        rt_coll_combine(op, ps->type, &dst, 1, o * run, src, size, o * row + mine * run, run, stream);
    ptrs_free(&l);
    *out = v;
    return IR_OK;
}

/* The dimension of an all-gather, reduce-scatter or all-to-all, checked
 * against the operand's rank. */
static IrStatus op_dim(const IrModule *m, const IrInstr *ins, const IrShape *ps, int64_t *dim, IrDiag *d)
{
    *dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    if (*dim < 0 || *dim >= ps->rank)
        return coll_fail(m, ins, d, IR_EINPUT, "dimension %lld is out of range of the operand's rank %d",
                         (long long)*dim, (int)ps->rank);
    return IR_OK;
}

/* Shape `want` is `have` with dimension `dim` multiplied by `times`. */
static bool scaled(const IrShape *have, const IrShape *want, int64_t dim, int64_t times)
{
    if (have->type != want->type || have->rank != want->rank)
        return false;
    for (int32_t i = 0; i < have->rank; i++)
        if (want->dims[i] != (i == dim ? have->dims[i] * times : have->dims[i]))
            return false;
    return true;
}

static IrStatus shape_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, const IrShape *ps, const IrShape *rs,
                           int32_t size)
{
    char *a = ir_shape_str(ps, false), *b = ir_shape_str(rs, false);
    IrStatus st = coll_fail(m, ins, d, IR_EINPUT, "over a group of %d devices, an operand %s cannot give %s", (int)size,
                            a ? a : "?", b ? b : "?");
    ts_free(a);
    ts_free(b);
    return st;
}

/* Member j's operand (of `size`) placed as block j along dim of each of
 * out[0..nout) (the all-gather's result shape). */
static void gather_block(const DevValue *opnd, int32_t j, int32_t size, int64_t dim, DevValue *const *out,
                         int32_t nout, bool stream)
{
    const IrShape *ps = &opnd->shape;
    int64_t outer, inner;
    runs_of(ps, dim, &outer, &inner);
    size_t es = ir_type_size(ps->type);
    size_t run = (size_t)(ps->dims[dim] * inner) * es;
    void *stack[PTRS_ON_STACK];
    /* Destinations PTRS_ON_STACK at a time (no allocation that can fail). */
    for (int32_t b = 0; run > 0 && b < nout; b += PTRS_ON_STACK) {
        int32_t n = nout - b < PTRS_ON_STACK ? nout - b : PTRS_ON_STACK;
        for (int32_t q = 0; q < n; q++)
            stack[q] = out[b + q]->data;
        for (int64_t o = 0; o < outer; o++)
            rt_coll_copy(stack, n, ((size_t)o * (size_t)size + (size_t)j) * run, opnd->data + (size_t)o * run, run,
                         stream);
    }
}

bool rt_coll_split_ok(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops, const int64_t *members,
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
        if (!dims_equal(&ops[members[j]][0]->shape, ps))
            return false;
    if (ins->op == OP_ALL_GATHER) {
        int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
        return dim >= 0 && dim < ps->rank && scaled(ps, rs, dim, size);
    }
    *op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    return *op != OP_COUNT && dims_equal(ps, rs) && rt_coll_can_combine(*op, ps->type);
}

void rt_coll_split_part(const IrInstr *ins, DevValue *const *const *ops, const int64_t *members, int32_t size,
                        IrOpcode op, int32_t part, DevValue *const *out, int32_t nout, void **scratch, bool stream)
{
    if (ins->op == OP_ALL_GATHER) {
        int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
        gather_block(ops[members[part]][0], part, size, dim, out, nout, stream);
        return;
    }
    /* All-reduce: slice `part`, whole cache lines but the last. */
    const DevValue *first = ops[members[0]][0];
    int64_t count = dev_value_elements(first), es = (int64_t)ir_type_size(first->shape.type);
    int64_t line = es > 0 && es < 64 ? 64 / es : 1;
    int64_t per = (count + size - 1) / size;
    per = (per + line - 1) / line * line;
    int64_t lo = per * part, hi = lo + per < count ? lo + per : count;
    if (lo >= hi)
        return;
    void **src = scratch, **dst = scratch + size;
    for (int32_t j = 0; j < size; j++)
        src[j] = ops[members[j]][0]->data;
    for (int32_t q = 0; q < nout; q++)
        dst[q] = out[q]->data;
    rt_coll_combine(op, first->shape.type, dst, nout, lo, (const void *const *)src, size, lo, hi - lo, stream);
}

/* Result part k (shape rs) of a collective that acts on each operand on
 * its own. */
static IrStatus one_part(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, int64_t me,
                         DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t mine, int32_t k,
                         const IrShape *rs, DevValue **out, IrDiag *d)
{
    const DevValue *opnd = ops[me][k];
    const IrShape *ps = &opnd->shape;
    if (ps->type == IR_TUPLE || rs->type == IR_TUPLE)
        return coll_fail(m, ins, d, IR_EUNSUPPORTED, "tuple-shaped operands are not supported");
    /* A broadcast reads only its root (across hosts nothing else is
     * brought in: local.c), a permute only its source. */
    bool all = ins->op != OP_COLLECTIVE_PERMUTE && ins->op != OP_COLLECTIVE_BROADCAST;
    for (int32_t j = 0; j < (all ? size : ins->op == OP_COLLECTIVE_BROADCAST); j++)
        if (!dims_equal(&ops[members[j]][k]->shape, ps))
            return coll_fail(m, ins, d, IR_EINPUT, "device %lld gives an operand of another shape",
                             (long long)members[j]);
    int64_t dim = 0;
    switch (ins->op) {
    case OP_ALL_REDUCE:
    case OP_COLLECTIVE_REDUCE:
        if (!dims_equal(ps, rs))
            return shape_fail(m, ins, d, ps, rs, size);
        return reduce_members(m, ins, w, ops, members, size, k, out, d);
    case OP_COLLECTIVE_BROADCAST:
        if (!dims_equal(ps, rs))
            return shape_fail(m, ins, d, ps, rs, size);
        *out = dev_value_clone(ops[members[0]][k]);
        return *out ? IR_OK : IR_ENOMEM;
    case OP_ALL_GATHER: {
        IrStatus st = op_dim(m, ins, ps, &dim, d);
        if (st != IR_OK)
            return st;
        if (!scaled(ps, rs, dim, size))
            return shape_fail(m, ins, d, ps, rs, size);
        DevValue *v = dev_value_new_uninit(rs);
        if (!v)
            return IR_ENOMEM;
        for (int32_t j = 0; j < size; j++)
            gather_block(ops[members[j]][k], j, size, dim, &v, 1, rt_coll_stream_into(w->stream_bound, &v, 1, v->nbytes));
        *out = v;
        return IR_OK;
    }
    case OP_REDUCE_SCATTER: {
        IrStatus st = op_dim(m, ins, ps, &dim, d);
        if (st != IR_OK)
            return st;
        if (!scaled(rs, ps, dim, size))
            return shape_fail(m, ins, d, ps, rs, size);
        return reduce_slice(m, ins, w, ops, members, size, mine, k, dim, rs, out, d);
    }
    case OP_ALL_TO_ALL: {
        /* Chunk j of every member's operand along dim goes to member j;
         * the result concatenates, in group order, the chunks sent here. */
        IrStatus st = op_dim(m, ins, ps, &dim, d);
        if (st != IR_OK)
            return st;
        if (!dims_equal(ps, rs) || ps->dims[dim] % size != 0)
            return shape_fail(m, ins, d, ps, rs, size);
        DevValue *v = dev_value_new_uninit(rs);
        if (!v)
            return IR_ENOMEM;
        int64_t outer, inner;
        runs_of(ps, dim, &outer, &inner);
        size_t es = ir_type_size(ps->type);
        int64_t run = ps->dims[dim] / size * inner, row = ps->dims[dim] * inner;
        bool stream = rt_coll_stream_into(w->stream_bound, &v, 1, v->nbytes);
        void *dst = v->data;
        for (int32_t j = 0; run > 0 && j < size; j++) {
            const uint8_t *src = ops[members[j]][k]->data;
            for (int64_t o = 0; o < outer; o++)
                rt_coll_copy(&dst, 1, (size_t)(o * row + j * run) * es, src + (size_t)(o * row + mine * run) * es,
                             (size_t)run * es, stream);
        }
        *out = v;
        return IR_OK;
    }
    case OP_COLLECTIVE_PERMUTE: {
        int64_t src = rt_coll_permute_source(ins, w, me);
        if (src >= 0 && !dims_equal(&ops[src][k]->shape, rs))
            return shape_fail(m, ins, d, &ops[src][k]->shape, rs, size);
        *out = src >= 0 ? dev_value_clone(ops[src][k]) : dev_value_new(rs);
        return *out ? IR_OK : IR_ENOMEM;
    }
    default:
        return coll_fail(m, ins, d, IR_EINTERNAL, "not a collective");
    }
}

/* all-to-all without a dimension: operand j of every member goes to
 * member j; result j is what member j sent here. */
static IrStatus tuple_all_to_all(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
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
        if (!dims_equal(&v->shape, &ins->shape.tuple[j]))
            st = shape_fail(m, ins, d, &v->shape, &ins->shape.tuple[j], size);
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
static IrStatus ragged_all_to_all(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
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

IrStatus rt_coll_result(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, int64_t me,
                        DevValue *const *const *ops, int32_t nopnd, DevValue *reduced, DevValue **out, IrDiag *d)
{
    *out = NULL;
    int64_t ndev = w->n * w->r;
    int64_t *members = ts_malloc((size_t)ndev * sizeof *members);
    if (!members)
        return coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    int32_t size = 0, mine = 0;
    IrStatus st = ins->op == OP_COLLECTIVE_PERMUTE ? IR_OK : rt_coll_group(m, ins, w, me, members, &size, &mine, d);
    if (ins->op == OP_COLLECTIVE_PERMUTE)
        members[size++] = me;
    bool tuple = ins->shape.type == IR_TUPLE;
    if (st != IR_OK) {
    } else if (nopnd < 1) {
        st = coll_fail(m, ins, d, IR_EINPUT, "needs an operand");
    } else if (ins->op == OP_RAGGED_ALL_TO_ALL) {
        st = ragged_all_to_all(m, ins, ops, members, size, mine, nopnd, me, out, d);
    } else if (ins->op == OP_ALL_TO_ALL && ins->a.dimensions.n == 0) {
        st = tuple_all_to_all(m, ins, ops, members, size, mine, nopnd, out, d);
    } else if (reduced && !tuple) {
        *out = dev_value_ref(reduced);
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
