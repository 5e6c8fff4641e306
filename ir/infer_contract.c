/*
 * infer_contract.c: shape rules of the contractions and the numeric kernels:
 * dot and scaled-dot, ragged-dot, convolution, fft, top-k, the linear algebra
 * ops (cholesky, triangular-solve) and batch-norm.
 */
#include "infer_internal.h"

#include <string.h>

/* The result element type of dot/convolution: the declared one (XLA's
 * preferred_element_type) when it is of the operands' kind, else theirs. */
static IrStatus contraction_type(Ctx *x, IrType lt, IrType rt, IrType *out)
{
    bool lf = ir_type_is_float(lt), rf = ir_type_is_float(rt);
    bool li = ir_type_is_int(lt) || lt == IR_PRED, ri = ir_type_is_int(rt) || rt == IR_PRED;
    bool lc = ir_type_is_complex(lt), rc = ir_type_is_complex(rt);
    if (!((lf && rf) || (li && ri) || (lc && rc)))
        return infer_fail(x, "lhs type %s and rhs type %s are of different kinds", ir_type_name(lt),
                    ir_type_name(rt));
    IrType t = x->ins->shape.type;
    bool ok = (lf && (ir_type_is_float(t) || ir_type_is_complex(t))) ||
              (li && (ir_type_is_int(t) || t == IR_PRED || ir_type_is_float(t))) ||
              (lc && ir_type_is_complex(t));
    *out = ok ? t : lt;
    return IR_OK;
}

/* dot: result dimensions are the batch dimensions (lhs order), then the lhs
 * free dimensions, then the rhs free dimensions. f32[2,3,4] x f32[2,4,5]
 * lhs_batch_dims={0} lhs_contracting_dims={2} rhs_batch_dims={0}
 * rhs_contracting_dims={1} -> f32[2,3,5]. */
IrStatus infer_dot(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "lhs")) != IR_OK || (st = infer_expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = infer_opnd(x, 0), *r = infer_opnd(x, 1);
    const IrDotDnums *dn = &x->ins->a.dot;
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if ((st = infer_check_dim_list(x, &dn->lhs_batch, l->rank, "lhs_batch_dims", false)) != IR_OK ||
        (st = infer_check_dim_list(x, &dn->rhs_batch, r->rank, "rhs_batch_dims", false)) != IR_OK ||
        (st = infer_check_dim_list(x, &dn->lhs_contracting, l->rank, "lhs_contracting_dims",
                             false)) != IR_OK ||
        (st = infer_check_dim_list(x, &dn->rhs_contracting, r->rank, "rhs_contracting_dims",
                             false)) != IR_OK)
        return st;
    if (dn->lhs_batch.n != dn->rhs_batch.n)
        return infer_fail(x, "lhs has %d batch dimensions, rhs has %d", (int)dn->lhs_batch.n,
                    (int)dn->rhs_batch.n);
    if (dn->lhs_contracting.n != dn->rhs_contracting.n)
        return infer_fail(x, "lhs has %d contracting dimensions, rhs has %d", (int)dn->lhs_contracting.n,
                    (int)dn->rhs_contracting.n);
    for (int32_t i = 0; i < dn->lhs_batch.n; i++) {
        int64_t a = dn->lhs_batch.v[i], b = dn->rhs_batch.v[i];
        if (ir_list_has(&dn->lhs_contracting, a) || ir_list_has(&dn->rhs_contracting, b))
            return infer_fail(x, "a dimension cannot be both batch and contracting");
        if (l->dims[a] != r->dims[b])
            return infer_fail(x, "lhs batch dimension %lld has size %lld, rhs batch dimension %lld has "
                        "size %lld", (long long)a, (long long)l->dims[a], (long long)b,
                        (long long)r->dims[b]);
    }
    for (int32_t i = 0; i < dn->lhs_contracting.n; i++) {
        int64_t a = dn->lhs_contracting.v[i], b = dn->rhs_contracting.v[i];
        if (l->dims[a] != r->dims[b])
            return infer_fail(x, "lhs contracting dimension %lld has size %lld, rhs contracting "
                        "dimension %lld has size %lld", (long long)a, (long long)l->dims[a],
                        (long long)b, (long long)r->dims[b]);
    }
    int64_t *dims = infer_scratch(x, l->rank + r->rank);
    if (!dims)
        return infer_oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < dn->lhs_batch.n; i++)
        dims[k++] = l->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < l->rank; i++)
        if (!ir_list_has(&dn->lhs_batch, i) && !ir_list_has(&dn->lhs_contracting, i))
            dims[k++] = l->dims[i];
    for (int32_t i = 0; i < r->rank; i++)
        if (!ir_list_has(&dn->rhs_batch, i) && !ir_list_has(&dn->rhs_contracting, i))
            dims[k++] = r->dims[i];
    return infer_make_array(x, out, t, k, dims);
}

/* ragged-dot(lhs, rhs, group_sizes): lhs_ragged_dims names the lhs
 * dimension cut into groups, rhs_group_dims the rhs dimension that picks
 * one rhs per group. With the ragged dimension free in lhs (the common
 * mode, [m, k] x [g, k, n] -> [m, n]), the result is the dot of lhs with
 * one rhs. Other modes are taken as declared. */
IrStatus infer_ragged_dot(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "lhs")) != IR_OK || (st = infer_expect_array(x, 1, "rhs")) != IR_OK ||
        (st = infer_expect_array(x, 2, "group_sizes")) != IR_OK)
        return st;
    const IrShape *l = infer_opnd(x, 0), *r = infer_opnd(x, 1), *g = infer_opnd(x, 2);
    const IrAttrs *a = &x->ins->a;
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if (!ir_type_is_int(g->type))
        return infer_fail(x, "group_sizes must be integers, got %s", infer_sstr(x, g));
    if (a->x->lhs_ragged_dims.n != 1 || a->x->rhs_group_dims.n > 1)
        return infer_fail(x, "needs one lhs_ragged_dims and at most one rhs_group_dims");
    if ((st = infer_check_dim_list(x, &a->x->lhs_ragged_dims, l->rank, "lhs_ragged_dims", false)) != IR_OK ||
        (st = infer_check_dim_list(x, &a->x->rhs_group_dims, r->rank, "rhs_group_dims", false)) != IR_OK)
        return st;
    int64_t rd = a->x->lhs_ragged_dims.v[0];
    const IrDotDnums *dn = &a->dot;
    if (ir_list_has(&dn->lhs_contracting, rd) || ir_list_has(&dn->lhs_batch, rd) || a->x->rhs_group_dims.n == 0)
        return infer_copy_shape(x, out, &x->ins->shape);
    int64_t gd = a->x->rhs_group_dims.v[0];
    int64_t *dims = infer_scratch(x, l->rank + r->rank);
    if (!dims)
        return infer_oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < dn->lhs_batch.n; i++)
        dims[k++] = l->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < l->rank; i++)
        if (!ir_list_has(&dn->lhs_batch, i) && !ir_list_has(&dn->lhs_contracting, i))
            dims[k++] = l->dims[i];
    for (int32_t i = 0; i < r->rank; i++)
        if (i != gd && !ir_list_has(&dn->rhs_batch, i) && !ir_list_has(&dn->rhs_contracting, i))
            dims[k++] = r->dims[i];
    return infer_make_array(x, out, t, k, dims);
}

/* Distinct dimension numbers in range: the dims of one dim_labels side. */
static IrStatus check_labels(Ctx *x, const char *side, int32_t rank, int64_t a, int64_t b,
                             const int64_t *sp, int32_t nsp)
{
    if (nsp + 2 != rank)
        return infer_fail(x, "dim_labels %s has %d dimensions but the shape has rank %d", side,
                    (int)nsp + 2, (int)rank);
    uint64_t seen = 0;
    for (int32_t i = -2; i < nsp; i++) {
        int64_t v = i == -2 ? a : i == -1 ? b : sp[i];
        if (v < 0 || v >= rank || (seen >> v & 1))
            return infer_fail(x, "dim_labels %s names dimension %lld twice or out of range", side,
                        (long long)v);
        seen |= (uint64_t)1 << v;
    }
    return IR_OK;
}

/* convolution: output batch = input batch / batch_group_count, output
 * feature = kernel output features, spatial dimensions by the window.
 * f32[1,5,5,2] b01f x f32[3,3,2,4] 01io, window size=3x3 pad=1_1x1_1 ->
 * f32[1,5,5,4] b01f. */
IrStatus infer_convolution(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "lhs")) != IR_OK || (st = infer_expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = infer_opnd(x, 0), *r = infer_opnd(x, 1);
    const IrConvDnums *cd = &x->ins->a.x->conv;
    const IrWindow *w = &x->ins->a.x->window;
    int64_t fgc = infer_dflt1(x->ins->a.x->feature_group_count), bgc = infer_dflt1(x->ins->a.x->batch_group_count);
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if (!cd->present)
        return infer_fail(x, "needs a dim_labels= attribute");
    if (l->rank != r->rank)
        return infer_fail(x, "lhs %s and rhs %s must have the same rank", infer_sstr(x, l), infer_sstr(x, r));
    if (l->rank > 64)
        return infer_fail(x, "rank %d is too large", (int)l->rank);
    if ((st = check_labels(x, "input", l->rank, cd->in_batch, cd->in_feature, cd->in_spatial,
                           cd->nspatial)) != IR_OK ||
        (st = check_labels(x, "kernel", r->rank, cd->k_in_feature, cd->k_out_feature,
                           cd->k_spatial, cd->nspatial)) != IR_OK ||
        (st = check_labels(x, "output", l->rank, cd->out_batch, cd->out_feature,
                           cd->out_spatial, cd->nspatial)) != IR_OK)
        return st;
    if (w->rank != cd->nspatial)
        return infer_fail(x, "window has %d dimensions but the convolution has %d spatial dimensions",
                    (int)w->rank, (int)cd->nspatial);
    if (fgc < 1 || bgc < 1)
        return infer_fail(x, "feature_group_count and batch_group_count must be positive");
    if (fgc > 1 && bgc > 1)
        return infer_fail(x, "feature_group_count and batch_group_count cannot both be above 1");
    int64_t batch = l->dims[cd->in_batch], feat = l->dims[cd->in_feature];
    int64_t kin = r->dims[cd->k_in_feature], kout = r->dims[cd->k_out_feature];
    if (feat % fgc != 0)
        return infer_fail(x, "input feature dimension size %lld is not a multiple of "
                    "feature_group_count %lld", (long long)feat, (long long)fgc);
    if (feat / fgc != kin)
        return infer_fail(x, "input feature dimension size %lld / feature_group_count %lld must equal "
                    "the kernel input feature size %lld", (long long)feat, (long long)fgc,
                    (long long)kin);
    if (kout % fgc != 0)
        return infer_fail(x, "kernel output feature size %lld is not a multiple of "
                    "feature_group_count %lld", (long long)kout, (long long)fgc);
    if (batch % bgc != 0)
        return infer_fail(x, "input batch size %lld is not a multiple of batch_group_count %lld",
                    (long long)batch, (long long)bgc);
    if (kout % bgc != 0)
        return infer_fail(x, "kernel output feature size %lld is not a multiple of "
                    "batch_group_count %lld", (long long)kout, (long long)bgc);
    int64_t *dims = infer_scratch(x, l->rank);
    if (!dims)
        return infer_oom(x);
    dims[cd->out_batch] = batch / bgc;
    dims[cd->out_feature] = kout;
    for (int32_t i = 0; i < cd->nspatial; i++) {
        if (w->dim[i].size != r->dims[cd->k_spatial[i]])
            return infer_fail(x, "window dimension %d has size %lld but kernel spatial dimension %lld "
                        "has size %lld", (int)i, (long long)w->dim[i].size,
                        (long long)cd->k_spatial[i], (long long)r->dims[cd->k_spatial[i]]);
        if ((st = infer_window_dim(x, i, &w->dim[i], l->dims[cd->in_spatial[i]],
                             &dims[cd->out_spatial[i]])) != IR_OK)
            return st;
    }
    return infer_make_array(x, out, t, l->rank, dims);
}

/* fft: FFT/IFFT keep a complex shape; RFFT takes f32/f64 to c64/c128 and
 * halves the last dimension (n/2+1); IRFFT does the reverse. The last
 * len(fft_length) dimensions are transformed. */
IrStatus infer_fft(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    const IrI64List *fl = &x->ins->a.x->fft_length;
    const char *ty = x->ins->a.x->fft_type ? x->ins->a.x->fft_type : "";
    int32_t n = fl->n;
    if (n < 1 || n > 3 || n > s->rank)
        return infer_fail(x, "fft_length=%s must have 1 to 3 entries, at most the rank %d",
                    infer_lstr(x, fl), (int)s->rank);
    int64_t *dims = infer_scratch(x, s->rank);
    if (!dims)
        return infer_oom(x);
    memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
    int32_t base = s->rank - n;
    IrType t;
    if (strcmp(ty, "FFT") == 0 || strcmp(ty, "IFFT") == 0) {
        if (!ir_type_is_complex(s->type))
            return infer_fail(x, "%s needs a complex operand, got %s", ty, infer_sstr(x, s));
        for (int32_t i = 0; i < n; i++)
            if (s->dims[base + i] != fl->v[i])
                return infer_fail(x, "operand dimension %d is %lld but fft_length says %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)fl->v[i]);
        t = s->type;
    } else if (strcmp(ty, "RFFT") == 0) {
        if (s->type != IR_F32 && s->type != IR_F64)
            return infer_fail(x, "RFFT needs an f32 or f64 operand, got %s", infer_sstr(x, s));
        for (int32_t i = 0; i < n; i++)
            if (s->dims[base + i] != fl->v[i])
                return infer_fail(x, "operand dimension %d is %lld but fft_length says %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)fl->v[i]);
        dims[s->rank - 1] = fl->v[n - 1] == 0 ? 0 : fl->v[n - 1] / 2 + 1;
        t = s->type == IR_F32 ? IR_C64 : IR_C128;
    } else if (strcmp(ty, "IRFFT") == 0) {
        if (!ir_type_is_complex(s->type))
            return infer_fail(x, "IRFFT needs a complex operand, got %s", infer_sstr(x, s));
        for (int32_t i = 0; i < n; i++) {
            int64_t want = i == n - 1 ? (fl->v[i] == 0 ? 0 : fl->v[i] / 2 + 1) : fl->v[i];
            if (s->dims[base + i] != want)
                return infer_fail(x, "operand dimension %d is %lld but fft_length needs %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)want);
        }
        dims[s->rank - 1] = fl->v[n - 1];
        t = infer_component_type(s->type);
    } else {
        return infer_fail(x, "fft_type must be FFT, IFFT, RFFT or IRFFT, got '%s'", ty);
    }
    return infer_make_array(x, out, t, s->rank, dims);
}

/* ------------------------------------------------------------------ */
/* top-k, linear algebra, batch norm                                   */
/* ------------------------------------------------------------------ */

/* topk: the k largest (or smallest) along the last dimension, values and
 * their s32 indices. f32[6,16] k=8 -> (f32[6,8], s32[6,8]). */
IrStatus infer_topk(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    int64_t k = x->ins->a.x->topk_k;
    if (s->rank < 1)
        return infer_fail(x, "operand must have rank >= 1, got %s", infer_sstr(x, s));
    if (k < 0 || k > s->dims[s->rank - 1])
        return infer_fail(x, "k=%lld must be in [0, %lld]", (long long)k, (long long)s->dims[s->rank - 1]);
    int64_t *dims = infer_scratch(x, s->rank);
    IrShape parts[2];
    if (!dims)
        return infer_oom(x);
    memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
    dims[s->rank - 1] = k;
    if ((st = infer_make_array(x, &parts[0], s->type, s->rank, dims)) != IR_OK ||
        (st = infer_make_array(x, &parts[1], IR_S32, s->rank, dims)) != IR_OK)
        return st;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : infer_oom(x);
}

/* The last two dimensions of operand i form a square matrix. */
static IrStatus expect_matrices(Ctx *x, int32_t i, const char *what)
{
    IrStatus st = infer_expect_array(x, i, what);
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, i);
    if (!ir_type_is_float(s->type) && !ir_type_is_complex(s->type))
        return infer_fail(x, "%s must be floating-point or complex, got %s", what, infer_sstr(x, s));
    if (s->rank < 2 || s->dims[s->rank - 1] != s->dims[s->rank - 2])
        return infer_fail(x, "%s must be square matrices [..., n, n], got %s", what, infer_sstr(x, s));
    return IR_OK;
}

IrStatus infer_cholesky(Ctx *x, IrShape *out)
{
    IrStatus st = expect_matrices(x, 0, "a");
    return st != IR_OK ? st : infer_copy_shape(x, out, infer_opnd(x, 0));
}

/* triangular-solve(a [..., m, m], b): b is [..., m, n] when left_side (solve
 * op(a) x = b), else [..., n, m] (x op(a) = b); the result is b's shape. */
IrStatus infer_triangular_solve(Ctx *x, IrShape *out)
{
    IrStatus st = expect_matrices(x, 0, "a");
    if (st != IR_OK || (st = infer_expect_array(x, 1, "b")) != IR_OK)
        return st;
    const IrShape *a = infer_opnd(x, 0), *b = infer_opnd(x, 1);
    if (a->type != b->type || a->rank != b->rank)
        return infer_fail(x, "a %s and b %s must have one element type and rank", infer_sstr(x, a), infer_sstr(x, b));
    if (!ir_dims_equal(a->dims, b->dims, a->rank - 2))
        return infer_fail(x, "a %s and b %s must have the same batch dimensions", infer_sstr(x, a), infer_sstr(x, b));
    int64_t m = a->dims[a->rank - 1];
    int64_t bm = b->dims[b->rank - (x->ins->a.x->left_side ? 2 : 1)];
    if (bm != m)
        return infer_fail(x, "b %s must have %lld in its %s dimension to match a %s", infer_sstr(x, b),
                    (long long)m, x->ins->a.x->left_side ? "second-to-last" : "last", infer_sstr(x, a));
    return infer_copy_shape(x, out, b);
}

/* Operand i is a feature vector: rank 1, the size of the feature dimension. */
static IrStatus expect_feature_vector(Ctx *x, int32_t i, const char *what)
{
    const IrShape *s = infer_opnd(x, 0), *v = infer_opnd(x, i);
    int64_t f = x->ins->a.x->feature_index;
    if (!infer_is_array(v) || v->rank != 1 || v->dims[0] != s->dims[f] || v->type != s->type)
        return infer_fail(x, "%s (operand %d) must be %s[%lld], got %s", what, (int)i, ir_type_name(s->type),
                    (long long)s->dims[f], infer_sstr(x, v));
    return IR_OK;
}

/* batch-norm-training(operand, scale, offset) -> (normalized, mean, var);
 * -inference(operand, scale, offset, mean, var) -> normalized;
 * -grad(operand, scale, mean, var, grad_output) -> (grad_operand,
 * grad_scale, grad_offset). Feature vectors have the size of dimension
 * feature_index. */
IrStatus infer_batch_norm(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    int64_t f = x->ins->a.x->feature_index;
    if (!ir_type_is_float(s->type))
        return infer_fail(x, "operand must be floating-point, got %s", infer_sstr(x, s));
    if (f < 0 || f >= s->rank)
        return infer_fail(x, "feature_index=%lld is out of range for %s", (long long)f, infer_sstr(x, s));
    bool grad = x->ins->op == OP_BATCH_NORM_GRAD;
    for (int32_t i = 1; i < x->ins->nopnd; i++) {
        if (grad && i == 4) {
            if (!ir_shape_equal(infer_opnd(x, 4), s))
                return infer_fail(x, "grad_output (operand 4) must be %s, got %s", infer_sstr(x, s),
                            infer_sstr(x, infer_opnd(x, 4)));
        } else if ((st = expect_feature_vector(x, i, "feature vector")) != IR_OK) {
            return st;
        }
    }
    if (x->ins->op == OP_BATCH_NORM_INFERENCE)
        return infer_copy_shape(x, out, s);
    IrShape parts[3];
    parts[0] = *s;
    parts[1] = parts[2] = *infer_opnd(x, 1);
    return ir_shape_make_tuple(x->a, out, 3, parts) == IR_OK ? IR_OK : infer_oom(x);
}
