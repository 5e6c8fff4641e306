/*
 * strategy_local.c: the roles of the ops that work on whole trailing dims
 * and treat every leading index alone, as partition/spmd_local.c runs
 * them: an fft (its fft_length dims transformed), cholesky and
 * triangular-solve (the two matrix dims), a topk (the last dim: its
 * values and indices, a tuple of one dims, take one spec:
 * strategy_tuple.c), a sort (its sorted dim; its operands and results
 * alike) and a reverse (its reversed dims: partition/spmd_ops.c runs
 * both locally). Every other dim is a batch dim: tiled like an
 * elementwise op's (each device transforms or factors its
 * own rows, nothing exchanged; an uneven batch dim's padding rows stay
 * rows of their own); the dims they work on stay whole. Each operand has
 * the result's rank and batch dims. Example: f = c64[6,5,8] fft(c),
 * fft_length={8}, on 4 devices: dims 0 and 1 tile ([x,-,-] over 2x2 as
 * [x,y,-]), dim 2 never.
 */
#include "strategy_internal.h"

#include <math.h>

/* batch-norm-inference(x, scale, offset, mean, variance) of a float x:
 * every dim tiles (each device normalises its own elements, no statistics
 * computed: partition/spmd_norm.c runs it locally whatever the sharding),
 * the four per-feature vectors along the feature dim. (Training and its
 * gradient sum over the other dims and return tuples of other dims: left
 * to propagation.) */
static bool norm_inference_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    int64_t fi = x->a.x ? x->a.x->feature_index : -1;
    if (x->nopnd != 5 || fi < 0 || fi >= x->shape.rank || !ir_type_is_float(x->shape.type))
        return false;
    for (int32_t i = 1; i < 5; i++)
        if (c->instr[x->opnd[i]].shape.rank != 1)
            return false;
    for (int32_t d = 0; d < x->shape.rank; d++)
        r->map[0][d] = (int8_t)d;
    for (int32_t i = 1; i < 5; i++)
        r->map[i][fi] = 0;
    r->uneven = true;
    r->flops = 4.0 * (double)ir_shape_elements(&x->shape);
    return true;
}

bool auto_local_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    if (x->op == OP_BATCH_NORM_INFERENCE)
        return norm_inference_roles(r, c, x);
    const IrShape *s = auto_result_dims(x);
    int32_t whole;
    double work = (double)ir_shape_elements(s);
    bool kept[MAX_ROLES]; /* dims a sort or a reverse works on */
    for (int32_t d = 0; d < MAX_ROLES; d++)
        kept[d] = false;
    if (x->op == OP_FFT && x->a.x && x->a.x->fft_length.n > 0) {
        whole = s->rank - x->a.x->fft_length.n;
        double n = 1;
        for (int32_t k = 0; k < x->a.x->fft_length.n; k++)
            n *= (double)(x->a.x->fft_length.v[k] > 1 ? x->a.x->fft_length.v[k] : 1);
        work *= 5 * log2(n > 1 ? n : 2); /* the radix-2 count, 5 N log2 N */
    } else if (x->op == OP_TOPK && s) {
        whole = s->rank - 1;
        /* A pass over each row's operand elements. */
        const IrShape *in = &c->instr[x->opnd[0]].shape;
        work = (double)ir_shape_elements(in);
    } else if ((x->op == OP_SORT || x->op == OP_REVERSE) && s->rank <= MAX_ROLES) {
        whole = s->rank;
        for (int32_t k = 0; k < x->a.dimensions.n; k++)
            if (x->a.dimensions.v[k] >= 0 && x->a.dimensions.v[k] < s->rank)
                kept[x->a.dimensions.v[k]] = true;
        if (x->op == OP_SORT) { /* n log2 n compares along the sorted dim */
            int64_t n = x->a.dimensions.n ? s->dims[x->a.dimensions.v[0]] : 1;
            work *= log2(n > 1 ? (double)n : 2);
        }
    } else if (x->op == OP_CHOLESKY || x->op == OP_TRIANGULAR_SOLVE) {
        whole = s->rank - 2;
        /* m^3/3 a cholesky, m^2 n a solve: the elements times m (/3). */
        const IrShape *a = &c->instr[x->opnd[0]].shape;
        work *= (double)(a->rank >= 1 ? a->dims[a->rank - 1] : 1) / (x->op == OP_CHOLESKY ? 3 : 1);
    } else {
        return false;
    }
    if (whole < 0)
        return false;
    for (int32_t i = 0; i < x->nopnd; i++)
        if (c->instr[x->opnd[i]].shape.rank != s->rank)
            return false;
    for (int32_t d = 0; d < s->rank; d++) {
        r->tileable[d] = d < whole && !kept[d];
        for (int32_t i = 0; i < x->nopnd && r->tileable[d]; i++)
            r->map[i][d] = (int8_t)d;
    }
    r->uneven = true;
    r->flops = work;
    return true;
}
