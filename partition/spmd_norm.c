/*
 * spmd_norm.c: the batch-norm handler (training, inference, grad).
 *
 * Rule. x (and dy) take the sharding S of the op's first result, the
 * per-feature vectors (scale, offset, mean, variance) S projected onto the
 * feature dim (Sf: the feature dim's tiles, every other tile replication).
 *   - Only the feature dim tiled (or nothing): each device normalises its
 *     own features; the op runs as it is on the per-device shapes.
 *   - inference: always local, whatever S (no statistics are computed).
 *   - training / grad with another dim tiled: the statistics are sums over
 *     the non-feature dims, so each device sums its shard (padding of
 *     uneven dims masked to 0 so it adds nothing) and an all-reduce over
 *     the devices holding the other tiles of those dims completes them, as
 *     XLA's BatchNormExpander followed by the partitioner's reduce rule
 *     would. The variance is computed in two passes, mean((x - mean)^2)
 *     after the mean is all-reduced, as the reference kernel (k_norm.c)
 *     does: E[x^2] - E[x]^2 would save one all-reduce but loses digits
 *     when |mean| is large against the spread. Half and f8 types compute
 *     in f32 (f64 stays f64) and round once at the end.
 * Example (2 devices): tr = (f32[5,3], f32[3], f32[3])
 * batch-norm-training(x, sc, off), feature_index=1 with x
 * {devices=[2,1]0,1}: device 0 holds rows 0-2, device 1 rows 3-4 and a
 * padding row (masked). Each reduces its rows to sum f32[3]; all-reduce
 * {{0,1}} adds them; mean = sum/5; each sums its (x - mean)^2, all-reduce
 * again, var = sum/5; y is batch-norm-inference(x, sc, off, mean, var) on
 * each device's rows; mean and var are replicated.
 * grad(x, gamma, mean, var, dy): sum(dy) and sum(dy (x - mean)) are
 * all-reduced the same way (one all-reduce each), then dx = gamma s (dy -
 * mean(dy) - s^2 (x - mean) mean(dy (x - mean))), s = (var + eps)^-1/2,
 * dgamma = s sum(dy (x - mean)), doffset = sum(dy): k_norm.c's formulas.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

typedef struct Norm {
    int64_t fi;                 /* feature dim */
    const IrShape *xs;          /* x's logical shape */
    IrType t, ct;               /* element type, compute type */
    const IrSharding *s, *sf;   /* x's and the feature vectors' shardings */
    const IrSharding *smask;    /* s with the feature dim untiled: what padding to mask */
    int64_t red[IR_MAX_RANK];   /* non-feature dims */
    int32_t nred;
    int64_t tiled[IR_MAX_RANK]; /* of which tiled by s */
    int32_t ntiled;
    int64_t count;              /* elements per feature */
} Norm;

static bool norm_plan(PComp *pc, int32_t i, Norm *n)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    const IrSharding *s = pc->shd[i];
    if (ins->shape.type == IR_TUPLE && !(s = shd_tuple_element(a, s, &ins->shape, 0)))
        return false;
    n->s = s->kind == SHD_TILED ? s : &repl_sharding;
    n->fi = ins->a.x->feature_index;
    n->xs = &pc->sc->instr[ins->opnd[0]].shape;
    n->t = n->xs->type;
    n->ct = n->t == IR_F64 ? IR_F64 : IR_F32;
    n->nred = n->ntiled = 0;
    n->count = 1;
    for (int32_t d = 0; d < n->xs->rank; d++) {
        if (d == n->fi)
            continue;
        n->red[n->nred++] = d;
        n->count *= n->xs->dims[d];
        if (shd_tiles(n->s, d) > 1)
            n->tiled[n->ntiled++] = d;
    }
    n->sf = shd_project(a, n->s, 1, &n->fi);
    n->smask = shd_replicate_dims(a, n->s, 1, &n->fi);
    return n->sf && n->smask;
}

/* Per-feature sum of v (a shard of an x-shaped value, in ct) over the
 * non-feature dims, complete on every device: [local F] under sf. */
static int32_t feature_sum(PComp *pc, const Norm *n, int32_t v)
{
    v = spmd_mask_padding(pc, v, n->xs, n->smask, spmd_emit_scalar_const(pc, n->ct, 0));
    int32_t r = spmd_emit_reduce(pc, v, OP_ADD, n->nred, n->red);
    if (n->ntiled == 0)
        return r;
    int32_t ng, size;
    int64_t *groups;
    if (!shd_groups_along(pc, n->s, n->ntiled, n->tiled, &ng, &size, &groups))
        return -1;
    return spmd_emit_all_reduce(pc, r, OP_ADD, ng, size, groups);
}

/* Broadcast a per-feature shard to the shape of the x shard xv. */
static int32_t along_features(PComp *pc, const Norm *n, int32_t f, int32_t xv)
{
    if (f < 0 || xv < 0)
        return -1;
    IrShape s;
    if (ir_shape_copy(spmd_arena(pc), &s, spmd_val_shape(pc, xv)) != IR_OK)
        return -1;
    s.type = spmd_val_shape(pc, f)->type;
    return spmd_emit_broadcast(pc, f, &s, 1, &n->fi);
}

static int32_t divide_by(PComp *pc, int32_t v, double k, IrType t)
{
    if (v < 0)
        return -1;
    int32_t c = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, t, k), spmd_val_shape(pc, v), 0, NULL);
    return spmd_emit_binary(pc, OP_DIVIDE, v, c);
}

/* Operand k in the compute type, under sharding s. */
static int32_t operand_ct(PComp *pc, int32_t i, int32_t k, const IrSharding *s, IrType ct)
{
    return spmd_emit_convert(pc, spmd_operand_as(pc, i, k, s), ct);
}

static int32_t emit_norm_op(PComp *pc, int32_t i, IrOpcode op, const IrShape *shape, int32_t nopnd,
                            const int32_t *ops)
{
    int32_t r = spmd_emit(pc, op, shape, nopnd, ops);
    if (r >= 0) {
        IrAttrsX *x = ir_attrs_x_edit(spmd_arena(pc), &pc->dc->instr[r].a);
        if (!x)
            return -1;
        x->epsilon = pc->sc->instr[i].a.x->epsilon;
        x->feature_index = pc->sc->instr[i].a.x->feature_index;
    }
    return r;
}

/* (v0, v1, v2) converted to t, under (s, sf, sf), resharded to i's sharding. */
static IrStatus finish3(PComp *pc, int32_t i, const Norm *n, int32_t v0, int32_t v1, int32_t v2)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t el[3] = {spmd_emit_convert(pc, v0, n->t), spmd_emit_convert(pc, v1, n->t), spmd_emit_convert(pc, v2, n->t)};
    IrSharding *parts[3] = {(IrSharding *)n->s, (IrSharding *)n->sf, (IrSharding *)n->sf};
    IrSharding *rs = shd_tuple(spmd_tmp(pc), 3, parts);
    if (!rs)
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_reshard(pc, spmd_emit_tuple(pc, 3, el), &ins->shape, rs, pc->shd[i]));
}

/* y = batch-norm-inference(x, scale, offset, mean, var) on each shard, in
 * ct; mean and var are per-feature shards in ct. */
static int32_t normalise(PComp *pc, int32_t i, const Norm *n, int32_t xv, int32_t mu, int32_t var)
{
    int32_t ops[5] = {xv, operand_ct(pc, i, 1, n->sf, n->ct), operand_ct(pc, i, 2, n->sf, n->ct), mu, var};
    if (xv < 0)
        return -1;
    IrShape s;
    if (ir_shape_copy(spmd_arena(pc), &s, spmd_val_shape(pc, xv)) != IR_OK)
        return -1;
    return emit_norm_op(pc, i, OP_BATCH_NORM_INFERENCE, &s, 5, ops);
}

static IrStatus training(PComp *pc, int32_t i, const Norm *n)
{
    int32_t xv = operand_ct(pc, i, 0, n->s, n->ct);
    int32_t mu = divide_by(pc, feature_sum(pc, n, xv), (double)n->count, n->ct);
    int32_t xc = spmd_emit_binary(pc, OP_SUBTRACT, xv, along_features(pc, n, mu, xv));
    int32_t var = divide_by(pc, feature_sum(pc, n, spmd_emit_binary(pc, OP_MULTIPLY, xc, xc)), (double)n->count, n->ct);
    return finish3(pc, i, n, normalise(pc, i, n, xv, mu, var), mu, var);
}

static IrStatus grad(PComp *pc, int32_t i, const Norm *n)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrType ct = n->ct;
    int32_t xv = operand_ct(pc, i, 0, n->s, ct), dy = operand_ct(pc, i, 4, n->s, ct);
    int32_t gamma = operand_ct(pc, i, 1, n->sf, ct), mu = operand_ct(pc, i, 2, n->sf, ct);
    int32_t var = operand_ct(pc, i, 3, n->sf, ct);
    int32_t xc = spmd_emit_binary(pc, OP_SUBTRACT, xv, along_features(pc, n, mu, xv));
    int32_t sdy = feature_sum(pc, n, dy);
    int32_t sdyx = feature_sum(pc, n, spmd_emit_binary(pc, OP_MULTIPLY, dy, xc));
    if (var < 0)
        return spmd_set_val(pc, i, -1);
    int32_t eps = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, ct, ins->a.x->epsilon), spmd_val_shape(pc, var), 0, NULL);
    int32_t s = spmd_emit_unary(pc, OP_RSQRT, spmd_emit_binary(pc, OP_ADD, var, eps));
    int32_t mdy = divide_by(pc, sdy, (double)n->count, ct);
    int32_t mdyx = divide_by(pc, sdyx, (double)n->count, ct);
    int32_t s2m = spmd_emit_binary(pc, OP_MULTIPLY, spmd_emit_binary(pc, OP_MULTIPLY, s, s), mdyx);
    /* dx = gamma s (dy - mdy - s^2 mdyx (x - mu)) */
    int32_t inner = spmd_emit_binary(pc, OP_SUBTRACT, dy, along_features(pc, n, mdy, xv));
    inner = spmd_emit_binary(pc, OP_SUBTRACT, inner,
                        spmd_emit_binary(pc, OP_MULTIPLY, along_features(pc, n, s2m, xv), xc));
    int32_t gs = spmd_emit_binary(pc, OP_MULTIPLY, gamma, s);
    int32_t dx = spmd_emit_binary(pc, OP_MULTIPLY, along_features(pc, n, gs, xv), inner);
    return finish3(pc, i, n, dx, spmd_emit_binary(pc, OP_MULTIPLY, sdyx, s), sdy);
}

/* The op as it is on each device's shard: x (and dy) under s, the
 * vectors under sf. */
static IrStatus local(PComp *pc, int32_t i, const Norm *n)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    int32_t ops[5];
    for (int32_t k = 0; k < ins->nopnd && k < 5; k++) {
        bool shaped_like_x = k == 0 || (ins->op == OP_BATCH_NORM_GRAD && k == 4);
        ops[k] = spmd_operand_as(pc, i, k, shaped_like_x ? n->s : n->sf);
    }
    const IrSharding *rs = n->s;
    if (ins->shape.type == IR_TUPLE) {
        IrSharding *parts[3] = {(IrSharding *)n->s, (IrSharding *)n->sf, (IrSharding *)n->sf};
        rs = shd_tuple(a, 3, parts);
    }
    IrShape ls;
    if (!rs || shd_shard_shape(a, &ins->shape, rs, &ls) != IR_OK)
        return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &ls, ins->nopnd, ops, 0, NULL);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, rs, pc->shd[i]));
}

IrStatus spmd_batch_norm(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    Norm n;
    int32_t want = ins->op == OP_BATCH_NORM_TRAINING ? 3 : 5;
    bool tuple = ins->op != OP_BATCH_NORM_INFERENCE;
    if (ins->nopnd != want || (tuple && (ins->shape.type != IR_TUPLE || ins->shape.ntuple != 3)) ||
        pc->sc->instr[ins->opnd[0]].shape.type == IR_TUPLE)
        return spmd_fallback(pc, i);
    if (!norm_plan(pc, i, &n))
        return spmd_oom(pc);
    if (n.fi < 0 || n.fi >= n.xs->rank || !ir_type_is_float(n.t))
        return spmd_fallback(pc, i);
    if (ins->op == OP_BATCH_NORM_INFERENCE || n.ntiled == 0)
        return local(pc, i, &n);
    return ins->op == OP_BATCH_NORM_TRAINING ? training(pc, i, &n) : grad(pc, i, &n);
}
