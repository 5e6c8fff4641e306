/*
 * strategy_tuple.c: a reduce of several inputs (argmax's values and
 * indices), whose result is a tuple of arrays of one dims, and the
 * get-tuple-elements that read it (and a topk's: its values and indices
 * share their dims too; its roles are strategy_local.c's), as
 * partition/spmd_reduce.c runs them.
 *
 * The tuple's dims are its elements' (they share them), so one spec
 * stands for every element: the reduce is sharded as a reduce of one
 * input is, each input alike, its kept dims tiled with no collective; a
 * reduced dim tiled leaves partial results that the partitioner does not
 * all-reduce (the reducer is any computation): each device reduces its
 * shard with the reducer lifted to carry a "valid" flag, then every
 * partial result and flag is all-gathered along a new dim and reduced
 * again: one all-gather per element and one for the flags, of the output
 * shard times the group. A reduce of one input whose reducer is not a
 * simple op (add, max, ...) runs the same way. A get-tuple-element of
 * such a reduce follows it (its element under the reduce's spec).
 * Example: am = (f32[300], s32[300]) reduce(x f32[300,13], idx, -inf, 0),
 * dimensions={1}, on 4 devices: the rows over 4, both results [x], no
 * collective; the 13 columns, a reduced dim, are never tiled (4 does not
 * divide them).
 */
#include "strategy_internal.h"

/* Is x a reduce of several inputs, or a topk, whose results share one
 * dims? */
static bool tuple_of_one_dims(const IrInstr *x)
{
    if ((x->op != OP_REDUCE && x->op != OP_TOPK) || x->shape.type != IR_TUPLE || x->shape.ntuple < 2 ||
        (x->op == OP_REDUCE && x->nopnd != 2 * x->shape.ntuple))
        return false;
    for (int32_t k = 1; k < x->shape.ntuple; k++)
        if (!ir_shape_same_dims(&x->shape.tuple[k], &x->shape.tuple[0]))
            return false;
    return true;
}

const IrShape *auto_result_dims(const IrInstr *x)
{
    if (x->shape.type != IR_TUPLE)
        return &x->shape;
    return tuple_of_one_dims(x) ? &x->shape.tuple[0] : NULL;
}

bool auto_gte_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    if (x->op != OP_GET_TUPLE_ELEMENT || x->nopnd != 1 || !tuple_of_one_dims(&c->instr[x->opnd[0]]))
        return false;
    for (int32_t d = 0; d < x->shape.rank; d++)
        r->map[0][d] = (int8_t)d;
    r->uneven = true;
    return true;
}

double auto_partials_gather_seconds(const AutoCost *cost, const IrInstr *x, int64_t nred, int scope, double bytes)
{
    /* Each element's partials and the flags (a byte an element): the
     * gathered result is the group's nred shards. */
    const IrShape *dims = auto_result_dims(x);
    double elems = bytes / (double)ir_shape_bytes(&x->shape) * (double)(dims ? ir_shape_elements(dims) : 0);
    int32_t n = x->shape.type == IR_TUPLE ? x->shape.ntuple : 1;
    return auto_coll_seconds(cost, AUTO_ALL_GATHER, nred, scope, (double)nred * (bytes + elems)) +
           n * cost->alpha[AUTO_ALL_GATHER][scope ? 1 : 0];
}
