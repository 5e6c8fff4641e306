/*
 * prop_reduce.c: sharding propagation through reduce.
 *
 * Forward, the reduced dims are removed (their tiles join the
 * replication), for every output of a variadic reduce: f32[8,4]
 * {devices=[2,1]0,1} dimensions={0} gives f32[4] replicated
 * ({devices=[1,2]0,1 last_tile_dim_replicate} normalised). Backward, the
 * reduced dims are inserted untiled. The init values take nothing.
 */
#include "prop_internal.h"

static IrStatus reduce_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    const IrSharding *t = NULL;
    if (x->op != OP_REDUCE || k >= x->nopnd / 2)
        return IR_OK;
    NEED(t = shd_remove_dims(p->tmp, s, x->a.dimensions.n, x->a.dimensions.v));
    return prop_emit_all(p, g, t, os);
}

static IrStatus reduce_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                           const IrShape *us)
{
    IrInstr *x = prop_ins(p, u);
    int32_t gr = prop_ins(p, g)->shape.rank;
    int64_t map[IR_MAX_RANK];
    const IrSharding *t = NULL;
    if (x->op != OP_REDUCE || k >= x->nopnd / 2)
        return IR_OK;
    int32_t n = 0;
    for (int32_t d = 0; d < gr; d++)
        if (!prop_has(&x->a.dimensions, d))
            map[n++] = d;
    if (n != us->rank)
        return IR_OK;
    NEED(t = shd_insert_dims(p->tmp, s, gr, map));
    return prop_emit(p, g, 0, t, us);
}

/* Input i corresponds to output i; the init values to none. */
static int32_t reduce_slot(const Prop *p, int32_t u, int32_t k)
{
    IrInstr *x = prop_ins(p, u);
    return x->op == OP_REDUCE && k < x->nopnd / 2 ? k : -1;
}

const PropRule prop_rule_reduce = {.fwd = reduce_fwd, .bwd = reduce_bwd, .slot = reduce_slot};
