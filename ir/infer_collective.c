/*
 * infer_collective.c: shape rules of the collectives (all-reduce,
 * all-gather, reduce-scatter, all-to-all, ragged-all-to-all,
 * collective-permute), their -start forms, and send/recv with their -done.
 * Group sizes are counted as XLA does (group_size).
 */
#include "infer_internal.h"

#include <string.h>

IrGroupMode ir_group_mode(const IrInstr *ins)
{
    if (ins->a.channel_id == 0)
        return IR_GROUPS_REPLICA;
    if (ins->a.use_global_device_ids)
        return IR_GROUPS_GLOBAL;
    switch (ins->op) {
    case OP_ALL_TO_ALL:
    case OP_RAGGED_ALL_TO_ALL:
    case OP_COLLECTIVE_PERMUTE:
    case OP_COLLECTIVE_PERMUTE_START:
    case OP_COLLECTIVE_BROADCAST:
    case OP_SEND:
    case OP_RECV:
        return IR_GROUPS_PARTITION;
    default:
        return IR_GROUPS_REPLICA_AND_PARTITION;
    }
}

int64_t ir_group_size(const IrInstr *ins, int64_t n, int64_t r)
{
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    int64_t listed = g->ngroups ? g->group_size[0] : -1; /* -1: empty groups, everyone takes part */
    int64_t size;
    switch (ir_group_mode(ins)) {
    case IR_GROUPS_REPLICA: size = listed >= 0 ? listed : r; break;
    case IR_GROUPS_PARTITION: size = listed >= 0 ? listed : n; break;
    case IR_GROUPS_GLOBAL: size = listed >= 0 ? listed : (r > 0 && n > 0 ? r * n : 0); break;
    default: size = (listed >= 0 ? listed : r) * n; break;
    }
    return size > 0 ? size : 0;
}

/* The number of participants in each group, as XLA counts it
 * (ir_group_size) in the module header's world; the groups must all have
 * one size. 0 when unknown (empty groups and no counts in the header). */
static IrStatus group_size(Ctx *x, int64_t *size)
{
    const IrReplicaGroups *g = &x->ins->a.x->replica_groups;
    *size = 0;
    for (int32_t i = 1; i < g->ngroups; i++)
        if (g->group_size[i] != g->group_size[0])
            return infer_fail(x, "replica groups must all have the same size, got %lld and %d",
                        (long long)g->group_size[0], (int)g->group_size[i]);
    *size = ir_group_size(x->ins, x->m->num_partitions, x->m->replica_count);
    return IR_OK;
}

/* The shape of an element of a collective's result: element i when the
 * result is a tuple of N operands, else the result itself. */
static const IrShape *declared_part(Ctx *x, int32_t i)
{
    const IrShape *s = &x->ins->shape;
    if (x->ins->op == OP_ALL_GATHER_START) { /* (inputs, gathered) */
        if (s->type != IR_TUPLE || s->ntuple != 2)
            return NULL;
        s = &s->tuple[1];
    }
    if (x->ins->nopnd > 1 && s->type == IR_TUPLE)
        return i < s->ntuple ? &s->tuple[i] : NULL;
    return s;
}

/* Build a result from N per-operand array shapes (a tuple when N > 1). */
static IrStatus collective_result(Ctx *x, IrShape *out, IrShape *parts)
{
    int32_t n = x->ins->nopnd;
    if (n == 1) {
        *out = parts[0];
        return IR_OK;
    }
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    out->tuple = parts;
    return IR_OK;
}

static IrStatus check_collective_reducer(Ctx *x)
{
    const IrShape *s = infer_opnd(x, 0);
    const IrShape *leaf = s->type == IR_TUPLE ? ir_shape_leaf(s, 0) : s;
    if (!leaf)
        return infer_fail(x, "operand has no array elements");
    /* Floats of another precision than the reducer's are accepted, as for
     * reduce (reducer_param_type): XLA's mixed-precision all-reduce. */
    const IrComputation *comp = infer_callee(x, 0);
    IrType t = infer_reducer_param_type(x, comp, 0, leaf->type);
    IrType tt[2] = {t, t};
    return infer_check_scalar_comp(x, comp, "reduction", 2, tt, 1, &t);
}

IrStatus infer_all_reduce(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    IrStatus st;
    if (n == 1 && infer_opnd(x, 0)->type == IR_TUPLE) {
        /* Older form: one tuple operand, reduced element by element. */
        const IrShape *s = infer_opnd(x, 0);
        for (int32_t i = 0; i < s->ntuple; i++)
            if (!infer_is_array(&s->tuple[i]))
                return infer_fail(x, "tuple operand elements must be arrays, got %s", infer_sstr(x, s));
    } else {
        for (int32_t i = 0; i < n; i++)
            if ((st = infer_expect_array(x, i, "operand")) != IR_OK)
                return st;
    }
    /* No group-size check: XLA's verifier lets an all-reduce's replica
     * groups differ in size ({0},{1,2},{3}), and its shape does not depend
     * on them. */
    if ((st = check_collective_reducer(x)) != IR_OK)
        return st;
    if (n == 1)
        return infer_copy_shape(x, out, infer_opnd(x, 0));
    return infer_tuple(x, out);
}

/* all-gather multiplies dimensions={d} by the group size; reduce-scatter
 * divides it. When the group size is unknown (empty groups, no counts in
 * the module header) it is read off the declared shape, as XLA does. */
IrStatus infer_gather_scatter_collective(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    bool gather = x->ins->op == OP_ALL_GATHER || x->ins->op == OP_ALL_GATHER_START;
    const IrI64List *dl = &x->ins->a.dimensions;
    IrStatus st;
    int64_t gs;
    if ((st = group_size(x, &gs)) != IR_OK)
        return st;
    if (!gather && (st = check_collective_reducer(x)) != IR_OK)
        return st;
    if (dl->n != 1)
        return infer_fail(x, "needs dimensions={d} with one dimension, got %s", infer_lstr(x, dl));
    int64_t d = dl->v[0];
    IrShape *parts = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!parts)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++) {
        if ((st = infer_expect_array(x, i, "operand")) != IR_OK)
            return st;
        const IrShape *s = infer_opnd(x, i);
        if (d < 0 || d >= s->rank)
            return infer_fail(x, "dimension %lld is out of range for operand %s", (long long)d,
                        infer_sstr(x, s));
        int64_t k = gs;
        const IrShape *decl = declared_part(x, i);
        if (k == 0 && decl && infer_is_array(decl) && decl->rank == s->rank) {
            int64_t a = gather ? decl->dims[d] : s->dims[d];
            int64_t b = gather ? s->dims[d] : decl->dims[d];
            k = b > 0 ? (a + b - 1) / b : 1;
            if (k < 1)
                k = 1;
        }
        if (k < 1)
            k = 1;
        int64_t *dims = infer_scratch(x, s->rank);
        if (!dims)
            return infer_oom(x);
        memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
        if (gather) {
            if (infer_mul_ovf(dims[d], k, &dims[d]))
                return infer_fail(x, "gathered size overflows");
        } else {
            if (dims[d] % k != 0)
                return infer_fail(x, "dimension %lld of size %lld is not divisible by the group size "
                            "%lld", (long long)d, (long long)dims[d], (long long)k);
            dims[d] /= k;
        }
        if ((st = infer_make_array(x, &parts[i], s->type, s->rank, dims)) != IR_OK)
            return st;
    }
    return collective_result(x, out, parts);
}

/* all-to-all: the array form (dimensions={d}) splits d into group-size
 * pieces and concatenates them back along d: same shape, d divisible by the
 * group size. The tuple form exchanges whole operands: same shapes. */
IrStatus infer_all_to_all(Ctx *x, IrShape *out)
{
    IrStatus st;
    const IrI64List *dl = &x->ins->a.dimensions;
    int64_t gs;
    if ((st = group_size(x, &gs)) != IR_OK)
        return st;
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if ((st = infer_expect_array(x, i, "operand")) != IR_OK)
            return st;
    if (dl->n > 0) {
        const IrShape *s = infer_opnd(x, 0);
        if (x->ins->nopnd != 1)
            return infer_fail(x, "the dimensions= form takes one operand, got %d", (int)x->ins->nopnd);
        if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= s->rank)
            return infer_fail(x, "dimensions=%s must name one dimension of %s", infer_lstr(x, dl),
                        infer_sstr(x, s));
        if (gs > 0 && s->dims[dl->v[0]] % gs != 0)
            return infer_fail(x, "split dimension %lld of size %lld is not divisible by the group "
                        "size %lld", (long long)dl->v[0], (long long)s->dims[dl->v[0]],
                        (long long)gs);
        return infer_copy_shape(x, out, s);
    }
    /* The tuple form sends operand i to participant i of the group. */
    if (x->ins->nopnd > 1 && gs > 0 && gs != x->ins->nopnd)
        return infer_fail(x, "the tuple form with %d operands needs groups of %d participants, "
                    "got %lld", (int)x->ins->nopnd, (int)x->ins->nopnd, (long long)gs);
    if (x->ins->nopnd == 1)
        return infer_copy_shape(x, out, infer_opnd(x, 0));
    return infer_tuple(x, out);
}

/* ragged-all-to-all(input, output, input_offsets, send_sizes,
 * output_offsets, recv_sizes): the result is the updated output. */
IrStatus infer_ragged_all_to_all(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 6; i++)
        if ((st = infer_expect_array(x, i, i < 2 ? "data" : "offsets or sizes")) != IR_OK)
            return st;
    for (int32_t i = 2; i < 6; i++)
        if (!ir_type_is_int(infer_opnd(x, i)->type))
            return infer_fail(x, "operand %d must hold integers, got %s", (int)i, infer_sstr(x, infer_opnd(x, i)));
    if (infer_opnd(x, 0)->type != infer_opnd(x, 1)->type)
        return infer_fail(x, "input %s and output %s must have one element type", infer_sstr(x, infer_opnd(x, 0)),
                    infer_sstr(x, infer_opnd(x, 1)));
    return infer_copy_shape(x, out, infer_opnd(x, 1));
}

IrStatus infer_collective_permute(Ctx *x, IrShape *out)
{
    const IrI64List *p = &x->ins->a.x->source_target_pairs;
    if (p->n % 2 != 0)
        return infer_fail(x, "source_target_pairs must hold {source,target} pairs");
    int64_t P = x->m->num_partitions > 0 ? x->m->num_partitions : 0;
    int64_t R = x->m->replica_count > 0 ? x->m->replica_count : 0;
    int64_t limit = x->ins->a.channel_id ? P : R;
    /* Sources unique and targets unique. Pairs are few (one per device). */
    for (int32_t i = 0; i < p->n; i++) {
        if (p->v[i] < 0 || (limit > 0 && p->v[i] >= limit))
            return infer_fail(x, "source_target_pairs: id %lld is out of range", (long long)p->v[i]);
        for (int32_t j = i % 2; j < i; j += 2)
            if (p->v[j] == p->v[i])
                return infer_fail(x, "source_target_pairs: %s %lld appears twice",
                            i % 2 ? "target" : "source", (long long)p->v[i]);
    }
    if (x->ins->a.x->permute_slice_sizes) {
        /* In place: (input, output, input_start_indices,
         * output_start_indices) with slice_sizes; the result is output. */
        if (x->ins->nopnd != 4)
            return infer_fail(x, "the slice_sizes= form takes 4 operands (input, output, input and output start "
                        "indices), got %d", (int)x->ins->nopnd);
        return infer_copy_shape(x, out, infer_opnd(x, 1));
    }
    /* The combined form permutes each operand: the tuple of their shapes. */
    if (x->ins->nopnd > 1 && x->ins->op == OP_COLLECTIVE_PERMUTE)
        return infer_tuple(x, out);
    return infer_copy_shape(x, out, infer_opnd(x, 0));
}

/* ------------------------------------------------------------------ */
/* -start forms, send and recv                                         */
/* ------------------------------------------------------------------ */

/* all-gather-start: (input, gathered) as XLA's InferAllGatherStartShape
 * builds it, the input being the operand or the tuple of the operands and
 * `gathered` what all-gather would return: f32[4] dimensions={0} over 2
 * -> (f32[4], f32[8]). */
IrStatus infer_all_gather_start(Ctx *x, IrShape *out)
{
    IrShape parts[2];
    IrStatus st = infer_gather_scatter_collective(x, &parts[1]);
    if (st != IR_OK)
        return st;
    if (x->ins->nopnd == 1)
        st = infer_copy_shape(x, &parts[0], infer_opnd(x, 0));
    else
        st = infer_tuple(x, &parts[0]);
    if (st != IR_OK)
        return st;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : infer_oom(x);
}

/* collective-permute-start: (operand, result, u32[], u32[]). */
IrStatus infer_permute_start(Ctx *x, IrShape *out)
{
    IrShape tmp;
    IrStatus st = infer_expect_tuple_result(x, 2, "(operand, result, context...)");
    if (st != IR_OK || (st = infer_collective_permute(x, &tmp)) != IR_OK)
        return st;
    if (x->ins->nopnd == 1 && (st = infer_expect_like_operand(x, 0, 0)) != IR_OK)
        return st;
    return infer_copy_shape(x, out, &x->ins->shape);
}

/* send(data, token) and recv(token): (data, u32[] context, token[]);
 * send-done: token[]; recv-done: (data, token[]). */
IrStatus infer_send_recv(Ctx *x, IrShape *out)
{
    bool send = x->ins->op == OP_SEND;
    int32_t tok = send ? 1 : 0;
    if (infer_opnd(x, tok)->type != IR_TOKEN)
        return infer_fail(x, "operand %d must be a token, got %s", (int)tok, infer_sstr(x, infer_opnd(x, tok)));
    const IrShape *o = &x->ins->shape;
    IrStatus st = infer_expect_tuple_result(x, 3, "(data, u32[], token[])");
    if (st != IR_OK)
        return st;
    /* The context is u32[]; XLA's own tests also write s32[]. */
    if (o->ntuple != 3 || o->tuple[2].type != IR_TOKEN || !infer_is_scalar(&o->tuple[1]) ||
        !ir_type_is_int(o->tuple[1].type))
        return infer_fail(x, "result must be a tuple (data, u32[], token[]), got %s", infer_sstr(x, o));
    if (send && (st = infer_expect_like_operand(x, 0, 0)) != IR_OK)
        return st;
    return infer_copy_shape(x, out, o);
}

IrStatus infer_send_recv_done(Ctx *x, IrShape *out)
{
    const IrShape *s = infer_opnd(x, 0);
    if (s->type != IR_TUPLE || s->ntuple != 3 || s->tuple[2].type != IR_TOKEN)
        return infer_fail(x, "operand %s must be the (data, u32[], token[]) of a %s, got %s",
                    infer_opnd_name(x, 0), x->ins->op == OP_SEND_DONE ? "send" : "recv", infer_sstr(x, s));
    memset(out, 0, sizeof *out);
    if (x->ins->op == OP_SEND_DONE) {
        out->type = IR_TOKEN;
        return IR_OK;
    }
    IrShape parts[2];
    memset(parts, 0, sizeof parts);
    parts[0] = s->tuple[0];
    parts[1].type = IR_TOKEN;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : infer_oom(x);
}
