/*
 * prop_dot.c: sharding propagation through dot, and the rules of the ops
 * whose result dims each come from a dim of one of two operands (dot,
 * convolution, gather: their maps are in their files).
 *
 * Forward, operand k's tiles go to the result dims its map gives them
 * (the others' tiles, contracting dims' included, become replication);
 * backward, an operand takes the result's tiles on the dims it maps, the
 * others untiled. Example (2 devices): lhs f32[8,16] {devices=[1,2]0,1}
 * x rhs f32[16,4] contracting 1 with 0 gives out f32[8,4] replicated from
 * the lhs (Megatron's second matmul needs an all-reduce); rhs
 * {devices=[1,2]0,1} (column parallel) gives out {devices=[1,2]0,1}, and
 * back. The other operand's contracting tiles are not copied across (XLA
 * does, at higher aggressiveness).
 */
#include "prop_internal.h"

IrStatus prop_maps_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os, PropMaps maps)
{
    IrInstr *x = prop_ins(p, g);
    int64_t map[IR_MAX_RANK], map2[IR_MAX_RANK];
    const IrSharding *t = NULL;
    const IrShape *a = &prop_ins(p, prop_opnd(p, g, 0))->shape, *b = &prop_ins(p, prop_opnd(p, g, 1))->shape;
    if (!ir_shape_is_array(&x->shape) || !maps(x, a, b, map, map2))
        return IR_OK;
    NEED(t = shd_project(p->tmp, s, x->shape.rank, k == 0 ? map : map2));
    return prop_emit(p, g, 0, t, os);
}

IrStatus prop_maps_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us,
                       PropMaps maps)
{
    IrInstr *x = prop_ins(p, u);
    int32_t gr = prop_ins(p, g)->shape.rank;
    int64_t map[IR_MAX_RANK], map2[IR_MAX_RANK], inv[IR_MAX_RANK];
    const IrSharding *t = NULL;
    const IrShape *a = &prop_ins(p, prop_opnd(p, u, 0))->shape, *b = &prop_ins(p, prop_opnd(p, u, 1))->shape;
    if (!maps(x, a, b, map, map2) || k > 1)
        return IR_OK;
    prop_invert(k == 0 ? map : map2, us->rank, inv, gr);
    NEED(t = shd_project(p->tmp, s, gr, inv));
    return prop_emit(p, g, 0, t, us);
}

/* Dot: result dims in order are the batch dims, lhs free dims, rhs free
 * dims. out_from[side][r] is the operand dim result dim r comes from (-1
 * for the other side's dims). Contracting dims map nowhere: forward their
 * tiles become replication of the result, backward they stay untiled.
 * Example: lhs f32[8,16]{1,2 tiles} x rhs f32[16,4] (contract 1 with 0):
 * out f32[8,4] from lhs is {1,1,2 replicated} = replicated (Megatron's
 * second matmul needs an all-reduce); from rhs {devices=[1,2]} (column
 * parallel) rhs dim 1 -> out dim 1. */
static bool dot_maps(const IrInstr *x, const IrShape *lhs, const IrShape *rhs, int64_t *from_lhs,
                     int64_t *from_rhs)
{
    const IrDotDnums *dn = &x->a.dot;
    int32_t r = x->shape.rank, o = 0;
    if (dn->lhs_batch.n != dn->rhs_batch.n)
        return false;
    for (int32_t i = 0; i < r; i++)
        from_lhs[i] = from_rhs[i] = -1;
    for (int32_t i = 0; i < dn->lhs_batch.n && o < r; i++, o++) {
        from_lhs[o] = dn->lhs_batch.v[i];
        from_rhs[o] = dn->rhs_batch.v[i];
    }
    for (int32_t d = 0; d < lhs->rank; d++)
        if (!prop_has(&dn->lhs_batch, d) && !prop_has(&dn->lhs_contracting, d)) {
            if (o >= r)
                return false;
            from_lhs[o++] = d;
        }
    for (int32_t d = 0; d < rhs->rank; d++)
        if (!prop_has(&dn->rhs_batch, d) && !prop_has(&dn->rhs_contracting, d)) {
            if (o >= r)
                return false;
            from_rhs[o++] = d;
        }
    return o == r;
}

static IrStatus dot_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    return prop_maps_fwd(p, g, k, s, os, dot_maps);
}

static IrStatus dot_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us)
{
    return prop_maps_bwd(p, u, k, g, s, us, dot_maps);
}

const PropRule prop_rule_dot = {.fwd = dot_fwd, .bwd = dot_bwd};
