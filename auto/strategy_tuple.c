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
 * An rng-bit-generator's tuple is its state and its bits: the bits take
 * the spec, any dim tiled, and the state stays replicated, as
 * partition/spmd_rng.c runs it, bit for bit the unpartitioned draw: with
 * dim 0 alone tiled each device draws its own range of the counter
 * stream, with another dim tiled each draws the whole array and cuts its
 * shard out (priced so). Only its bits' get-tuple-element follows it.
 * A batch-norm-training's (y, mean, variance) and a batch-norm-grad's
 * (dx, dscale, doffset) take x's spec: y (dx) under it, the two
 * per-feature vectors under its projection onto the feature dim (the
 * axes on it, every other axis replicated), as partition/spmd_norm.c
 * leaves them; their get-tuple-elements follow it, the vectors' reading
 * the projection (auto_element_spec).
 * Example: am = (f32[300], s32[300]) reduce(x f32[300,13], idx, -inf, 0),
 * dimensions={1}, on 4 devices: the rows over 4, both results [x], no
 * collective; the 13 columns, a reduced dim, are never tiled (4 does not
 * divide them).
 */
#include "strategy_internal.h"

/* Is x a reduce of several inputs, a topk or a sort of several
 * operands, whose results share one dims? */
static bool tuple_of_one_dims(const IrInstr *x)
{
    if ((x->op != OP_REDUCE && !ir_is_topk(x) && x->op != OP_SORT) || x->shape.type != IR_TUPLE ||
        x->shape.ntuple < 2 || (x->op == OP_REDUCE && x->nopnd != 2 * x->shape.ntuple) ||
        (x->op == OP_SORT && x->nopnd != x->shape.ntuple))
        return false;
    for (int32_t k = 1; k < x->shape.ntuple; k++)
        if (!ir_shape_same_dims(&x->shape.tuple[k], &x->shape.tuple[0]))
            return false;
    return true;
}

/* Is x an rng-bit-generator of (state, bits)? */
static bool rng(const IrInstr *x)
{
    return x->op == OP_RNG_BIT_GENERATOR && x->shape.type == IR_TUPLE && x->shape.ntuple == 2 &&
           x->shape.tuple[1].type != IR_TUPLE;
}

/* Is x a batch-norm-training or -grad of (x-shaped, vector, vector)? */
static bool norm_tuple(const IrInstr *x)
{
    return (x->op == OP_BATCH_NORM_TRAINING || x->op == OP_BATCH_NORM_GRAD) && x->a.x &&
           x->shape.type == IR_TUPLE && x->shape.ntuple == 3 && x->shape.tuple[0].type != IR_TUPLE &&
           x->a.x->feature_index >= 0 && x->a.x->feature_index < x->shape.tuple[0].rank &&
           x->shape.tuple[1].rank == 1 && ir_shape_same_dims(&x->shape.tuple[1], &x->shape.tuple[2]) &&
           x->shape.tuple[1].dims[0] == x->shape.tuple[0].dims[x->a.x->feature_index];
}

/* The vectors' spec of a batch-norm under x's `spec`, in x's dims: the
 * axes on the feature dim, the others replicated. */
static AutoSpec feature_spec(const IrInstr *x, const AutoSpec *spec)
{
    AutoSpec f = auto_spec_replicated();
    for (int32_t a = 0; a < AUTO_MAX_AXES; a++)
        if (spec->dim[a] == x->a.x->feature_index)
            f.dim[a] = spec->dim[a];
    return f;
}

const IrShape *auto_result_dims(const IrInstr *x)
{
    if (x->shape.type != IR_TUPLE)
        return &x->shape;
    if (rng(x))
        return &x->shape.tuple[1];
    if (norm_tuple(x))
        return &x->shape.tuple[0];
    return tuple_of_one_dims(x) ? &x->shape.tuple[0] : NULL;
}

IrSharding *auto_result_sharding(IrArena *a, const AutoMesh *m, const IrInstr *x, const AutoSpec *spec)
{
    IrSharding *s = auto_spec_sharding(a, m, spec, auto_result_dims(x)->rank);
    if (!s || x->shape.type != IR_TUPLE)
        return s;
    if (norm_tuple(x)) {
        AutoSpec f = feature_spec(x, spec);
        int64_t fi = x->a.x->feature_index;
        IrSharding *v = shd_project(a, auto_spec_sharding(a, m, &f, auto_result_dims(x)->rank), 1, &fi);
        IrSharding *el[3] = {s, v, v};
        return v ? shd_tuple(a, 3, el) : NULL;
    }
    IrSharding *t = shd_broadcast_to_shape(a, s, &x->shape);
    if (t && rng(x) && t->kind == SHD_TUPLE && t->ntuple == 2)
        t->tuple[0] = (IrSharding){.kind = SHD_REPLICATED};
    return t;
}

bool auto_rng_roles(Roles *r, const IrInstr *x)
{
    if (!rng(x) || x->nopnd != 1)
        return false;
    /* Every bits dim (the last tiles padded: a device draws its rows of
     * the whole draw); the state is no role's. */
    r->flops = (double)ir_shape_elements(&x->shape.tuple[1]);
    r->uneven = true;
    return true;
}

bool auto_rng_draws_whole(const AutoMesh *m, const IrInstr *x, const AutoSpec *out)
{
    for (int32_t d = 1; x->op == OP_RNG_BIT_GENERATOR && d < auto_result_dims(x)->rank; d++)
        if (auto_spec_tiles(m, out, d) > 1)
            return true;
    return false;
}

bool auto_gte_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    const IrInstr *t = x->op == OP_GET_TUPLE_ELEMENT && x->nopnd == 1 ? &c->instr[x->opnd[0]] : NULL;
    if (!t || !(tuple_of_one_dims(t) || (rng(t) && x->a.tuple_index == 1) || norm_tuple(t)))
        return false;
    if (norm_tuple(t) && x->a.tuple_index > 0) {
        /* A vector: its dim is x's feature dim. */
        r->map[0][0] = (int8_t)t->a.x->feature_index;
        r->uneven = true;
        return true;
    }
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

bool auto_element_spec(const IrComputation *c, const IrInstr *x, const AutoSpec *spec, AutoSpec *elem,
                       IrShape *shape, int64_t *dims)
{
    const IrInstr *t = x->op == OP_GET_TUPLE_ELEMENT && x->nopnd == 1 ? &c->instr[x->opnd[0]] : NULL;
    if (t && rng(t) && x->a.tuple_index == 0) {
        *elem = auto_spec_replicated();
        *shape = x->shape;
        return true;
    }
    if (!t || !norm_tuple(t) || x->a.tuple_index == 0)
        return false;
    /* x's dims, every one but the feature of size 1: the vector's bytes. */
    *elem = feature_spec(t, spec);
    *shape = t->shape.tuple[0];
    shape->dynamic = NULL;
    shape->has_layout = false;
    for (int32_t d = 0; d < shape->rank && d < IR_MAX_RANK; d++)
        dims[d] = d == t->a.x->feature_index ? shape->dims[d] : 1;
    shape->dims = dims;
    return shape->rank <= IR_MAX_RANK;
}
