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

/* A batch-norm of a float x: inference(x, scale, offset, mean, variance),
 * training(x, scale, offset) -> (y, mean, variance) and grad(x, scale,
 * mean, variance, dy) -> (dx, dscale, doffset). Every dim tiles, the
 * per-feature vectors (operands and results) along the feature dim alone
 * (partition/spmd_norm.c: the vectors take x's sharding projected onto
 * the feature dim). Inference computes no statistics: local whatever the
 * sharding. Training and grad sum over every dim but the feature: with
 * one of those tiled each device sums its shard and two all-reduces of
 * the vectors' shard complete the sums (auto_norm_stats_seconds); with
 * the feature dim alone tiled they run locally. */
static bool norm_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    int32_t want = x->op == OP_BATCH_NORM_TRAINING ? 3 : 5;
    const IrShape *s = auto_result_dims(x);
    int64_t fi = x->a.x ? x->a.x->feature_index : -1;
    if (!s || x->nopnd != want || fi < 0 || fi >= s->rank || !ir_type_is_float(s->type))
        return false;
    for (int32_t i = 0; i < x->nopnd; i++) {
        bool like_x = i == 0 || (x->op == OP_BATCH_NORM_GRAD && i == 4);
        const IrShape *os = &c->instr[x->opnd[i]].shape;
        if (like_x ? !ir_shape_same_dims(os, s) : os->rank != 1 || os->dims[0] != s->dims[fi])
            return false;
        if (like_x)
            for (int32_t d = 0; d < s->rank; d++)
                r->map[i][d] = (int8_t)d;
        else
            r->map[i][fi] = 0;
    }
    r->uneven = true;
    /* Inference: a multiply-add and a scale an element; training and
     * grad: their passes over x (the sums, the centring, the output). */
    r->flops = (x->op == OP_BATCH_NORM_INFERENCE ? 4.0 : 8.0) * (double)ir_shape_elements(s);
    return true;
}

double auto_norm_stats_seconds(const AutoMesh *m, const AutoCost *cost, int64_t local, const IrInstr *x,
                               const AutoSpec *out)
{
    if (x->op != OP_BATCH_NORM_TRAINING && x->op != OP_BATCH_NORM_GRAD)
        return 0;
    const IrShape *s = auto_result_dims(x);
    int64_t fi = x->a.x->feature_index, n = 1;
    unsigned axes = 0;
    for (int32_t a = 0; a < m->naxes; a++)
        if (out->dim[a] >= 0 && out->dim[a] != fi) {
            n *= m->size[a];
            axes |= 1u << a;
        }
    if (n == 1)
        return 0;
    /* The sums are in f32 (f64 stays f64), a vector's shard each. */
    int64_t ft = auto_spec_tiles(m, out, (int32_t)fi);
    double bytes = (double)((s->dims[fi] + ft - 1) / ft) * (s->type == IR_F64 ? 8 : 4);
    return 2 * auto_coll_seconds(cost, AUTO_ALL_REDUCE, n, auto_axes_scope(m, axes, local), bytes);
}

bool auto_local_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    if (ir_op_family(x->op) == FAM_BATCH_NORM)
        return norm_roles(r, c, x);
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
    } else if (ir_is_topk(x) && s) {
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
