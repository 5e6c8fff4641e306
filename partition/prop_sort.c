/*
 * prop_sort.c: sharding propagation through sort.
 *
 * Every output and every operand alike, with the sort dim untiled (each
 * device sorts whole rows): f32[8,16] {devices=[2,2]0,1,2,3}
 * dimensions={1} gives {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate},
 * both ways.
 */
#include "prop_internal.h"

static IrStatus sort_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    const IrSharding *t = NULL;
    if (x->a.dimensions.n < 1)
        return IR_OK;
    NEED(t = shd_replicate_dims(p->tmp, s, 1, x->a.dimensions.v));
    return prop_emit_all(p, g, t, os);
}

static IrStatus sort_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                         const IrShape *us)
{
    (void)k;
    IrInstr *x = prop_ins(p, u);
    const IrSharding *t = NULL;
    if (x->a.dimensions.n < 1 || us->rank != prop_ins(p, g)->shape.rank)
        return IR_OK;
    NEED(t = shd_replicate_dims(p->tmp, s, 1, x->a.dimensions.v));
    return prop_emit(p, g, 0, t, us);
}

/* Operand i corresponds to output i. */
static int32_t sort_slot(const Prop *p, int32_t u, int32_t k)
{
    (void)p;
    (void)u;
    return k;
}

const PropRule prop_rule_sort = {.fwd = sort_fwd, .bwd = sort_bwd, .slot = sort_slot};
