/*
 * prop_norm.c: sharding propagation through batch-norm-training,
 * -inference and -grad.
 *
 * x, dy and the x-shaped result share one sharding; the per-feature
 * vectors (scale, offset, mean, variance and the vector results) take its
 * feature dim's tiles (the other tiles become replication), and a vector's
 * sharding gives x-shaped values the feature dim's tiles alone:
 * f32[8,6] {devices=[2,2]0,1,2,3} with feature_index=1 gives the vectors
 * {devices=[2,2]0,2,1,3 last_tile_dim_replicate}, and back
 * {devices=[1,2,2]0,2,1,3 last_tile_dim_replicate} for x.
 */
#include "prop_internal.h"

/* s, of a value of rank `from` (x-shaped or a vector), for a value of
 * rank `to`; NULL in *t when neither is a vector of the feature dim. */
static IrStatus convert(Prop *p, const IrInstr *x, const IrSharding *s, int32_t from, int32_t to,
                        const IrSharding **t)
{
    int64_t fi = x->a.x->feature_index;
    *t = NULL;
    if (from == to)
        *t = s;
    else if (from == 1)
        NEED(*t = shd_insert_dims(p->tmp, s, to, &fi));
    else if (to == 1)
        NEED(*t = shd_project(p->tmp, s, 1, &fi));
    return IR_OK;
}

static IrStatus norm_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    for (int32_t l = 0; l < prop_nleaf(p, g); l++) {
        const IrSharding *t;
        TRY(convert(p, x, s, os->rank, prop_lshape(p, g, l)->rank, &t));
        TRY(prop_emit(p, g, l, t, os));
    }
    return IR_OK;
}

static IrStatus norm_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                         const IrShape *us)
{
    (void)k;
    const IrSharding *t;
    TRY(convert(p, prop_ins(p, u), s, us->rank, prop_ins(p, g)->shape.rank, &t));
    return prop_emit(p, g, 0, t, us);
}

/* x and dy read the x-shaped result (slot 0), the vectors the mean (or
 * dscale) slot 1. */
static int32_t norm_slot(const Prop *p, int32_t u, int32_t k)
{
    IrInstr *x = prop_ins(p, u);
    return k == 0 || (x->op == OP_BATCH_NORM_GRAD && k == 4) ? 0 : 1;
}

const PropRule prop_rule_batch_norm = {.fwd = norm_fwd, .bwd = norm_bwd, .slot = norm_slot};
