/*
 * prop_local.c: sharding propagation through fft, topk (and XLA's TopK
 * custom-call: prop_custom.c hands it here), cholesky and triangular-solve, the ops that need some trailing dims whole (the fft's
 * transformed dims, topk's last dim, the two matrix dims) and treat the
 * leading dims as a batch (spmd_local.c partitions them so).
 *
 * Both ways the sharding passes with the whole dims untiled, to every
 * output and from every operand (all have the same rank):
 * c64[8,6,5] {devices=[2,2,1]0,1,2,3} through fft_length={6,5} gives
 * {devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}.
 */
#include "prop_internal.h"

/* The first whole dim of x, whose result (first element) has rank r. */
static int32_t first_whole(const IrInstr *x, int32_t r)
{
    if (ir_is_topk(x))
        return r - 1;
    return x->op == OP_FFT ? r - x->a.x->fft_length.n : r - 2;
}

/* s with dims [first_whole, rank) untiled, or NULL (*t) when the shape
 * does not fit the op. */
static IrStatus batch_only(Prop *p, const IrInstr *x, const IrSharding *s, const IrShape *sh,
                           const IrSharding **t)
{
    int64_t dims[IR_MAX_RANK];
    int32_t n = 0;
    *t = NULL;
    for (int32_t d = first_whole(x, sh->rank); d < sh->rank; d++)
        if (d >= 0)
            dims[n++] = d;
    NEED(*t = shd_replicate_dims(p->tmp, s, n, dims));
    return IR_OK;
}

static const IrShape *first_leaf(const IrShape *s)
{
    return s->type == IR_TUPLE ? (s->ntuple > 0 ? &s->tuple[0] : NULL) : s;
}

static IrStatus local_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    const IrShape *rs = first_leaf(&x->shape);
    const IrSharding *t;
    if (!rs || rs->rank != os->rank)
        return IR_OK;
    TRY(batch_only(p, x, s, os, &t));
    return prop_emit_all(p, g, t, os);
}

static IrStatus local_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                          const IrShape *us)
{
    (void)k;
    IrInstr *x = prop_ins(p, u);
    const IrSharding *t;
    if (us->rank != prop_ins(p, g)->shape.rank)
        return IR_OK;
    TRY(batch_only(p, x, s, us, &t));
    return prop_emit(p, g, 0, t, us);
}

/* topk's one operand corresponds to its values (slot 0). */
static int32_t local_slot(const Prop *p, int32_t u, int32_t k)
{
    (void)p;
    (void)u;
    (void)k;
    return 0;
}

const PropRule prop_rule_local = {.fwd = local_fwd, .bwd = local_bwd, .slot = local_slot};
