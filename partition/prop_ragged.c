/*
 * prop_ragged.c: sharding propagation through ragged-dot, as dot with the
 * dims a tile would cut a group out of left untiled.
 *
 * The result is [batch..., lhs free..., rhs free...] (rhs's group dim
 * gone), as dot's. Tiles pass between a result dim and the operand dim it
 * comes from, except for the ragged dim (each row's group depends on its
 * global index) and, when group_sizes has more than one dim (one set of
 * sizes per leading lhs index), every lhs dim. Example: r = f32[7,4]
 * ragged-dot(l f32[7,5], w f32[3,5,4], g s32[3]) lhs_ragged_dims={0}
 * rhs_group_dims={0}: w {devices=[1,1,2]0,1} gives r {devices=[1,2]0,1}
 * and back; l {devices=[2,1]0,1} gives r nothing (dim 0 is ragged). A
 * ragged batch dim is the plain batched dot: every dim passes.
 */
#include "prop_internal.h"

bool shd_ragged_dot_maps(const IrInstr *x, const IrShape *lhs, const IrShape *rhs, const IrShape *groups,
                         int64_t *from_lhs, int64_t *from_rhs)
{
    const IrDotDnums *dn = &x->a.dot;
    int32_t r = x->shape.rank, o = 0;
    if (x->a.x->lhs_ragged_dims.n != 1 || dn->lhs_batch.n != dn->rhs_batch.n || x->shape.type == IR_TUPLE)
        return false;
    int64_t rd = x->a.x->lhs_ragged_dims.v[0];
    int64_t gd = x->a.x->rhs_group_dims.n == 1 ? x->a.x->rhs_group_dims.v[0] : -1;
    if (prop_has(&dn->lhs_contracting, rd))
        return false;
    /* The ragged dim a batch dim: the plain batched dot, nothing to keep whole. */
    bool plain = prop_has(&dn->lhs_batch, rd);
    bool lhs_ok = plain || groups->rank == 1;
    if (plain)
        rd = -1;
    for (int32_t i = 0; i < r; i++)
        from_lhs[i] = from_rhs[i] = -1;
    for (int32_t i = 0; i < dn->lhs_batch.n && o < r; i++, o++) {
        bool ok = lhs_ok && dn->lhs_batch.v[i] != rd;
        from_lhs[o] = ok ? dn->lhs_batch.v[i] : -1;
        from_rhs[o] = ok ? dn->rhs_batch.v[i] : -1;
    }
    for (int32_t d = 0; d < lhs->rank; d++)
        if (!prop_has(&dn->lhs_batch, d) && !prop_has(&dn->lhs_contracting, d)) {
            if (o >= r)
                return false;
            from_lhs[o++] = lhs_ok && d != rd ? d : -1;
        }
    for (int32_t d = 0; d < rhs->rank; d++)
        if (d != gd && !prop_has(&dn->rhs_batch, d) && !prop_has(&dn->rhs_contracting, d)) {
            if (o >= r)
                return false;
            from_rhs[o++] = d;
        }
    return o == r;
}

/* The maps of g (a ragged-dot) with its operands' shapes. */
static bool maps_of(Prop *p, int32_t g, int64_t *from_a, int64_t *from_b)
{
    IrInstr *x = prop_ins(p, g);
    if (x->nopnd != 3)
        return false;
    const IrShape *a = &prop_ins(p, prop_opnd(p, g, 0))->shape, *b = &prop_ins(p, prop_opnd(p, g, 1))->shape;
    const IrShape *gs = &prop_ins(p, prop_opnd(p, g, 2))->shape;
    return shd_ragged_dot_maps(x, a, b, gs, from_a, from_b);
}

static IrStatus ragged_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    int64_t ma[IR_MAX_RANK], mb[IR_MAX_RANK];
    const IrSharding *t = NULL;
    if (k > 1 || !maps_of(p, g, ma, mb))
        return IR_OK;
    NEED(t = shd_project(p->tmp, s, prop_ins(p, g)->shape.rank, k == 0 ? ma : mb));
    return prop_emit(p, g, 0, t, os);
}

static IrStatus ragged_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us)
{
    int64_t ma[IR_MAX_RANK], mb[IR_MAX_RANK], inv[IR_MAX_RANK];
    int32_t gr = prop_ins(p, g)->shape.rank;
    const IrSharding *t = NULL;
    if (k > 1 || !maps_of(p, u, ma, mb))
        return IR_OK;
    prop_invert(k == 0 ? ma : mb, us->rank, inv, gr);
    NEED(t = shd_project(p->tmp, s, gr, inv));
    return prop_emit(p, g, 0, t, us);
}

const PropRule prop_rule_ragged_dot = {.fwd = ragged_fwd, .bwd = ragged_bwd};
