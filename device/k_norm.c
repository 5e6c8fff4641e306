/*
 * k_norm.c: batch-norm-training, batch-norm-inference, batch-norm-grad.
 *
 * The operand x has a feature dimension (feature_index); for each feature
 * l the statistics run over every other dimension, N elements. With the
 * operand seen as [outer, F, inner] (outer: the dims before the feature
 * one, inner: those after), element (o, l, i) sits at (o F + l) inner + i.
 * Every kind of float the operand has (f16, bf16 and the f8 kinds too) is
 * computed in double and rounded once to the element type at the end; XLA
 * computes half types in f32, which double contains exactly.
 *
 *   training(x, gamma, beta) -> (y, mu, var):
 *     mu_l = mean x,  var_l = mean (x - mu_l)^2  (biased; two passes)
 *     y = gamma_l (x - mu_l) / sqrt(var_l + eps) + beta_l
 *   inference(x, gamma, beta, mu, var) -> y, the same formula with the
 *     given mu and var
 *   grad(x, gamma, mu, var, dy) -> (dx, dgamma, dbeta), derived below.
 *
 * Derivation of grad. Let s = (var + eps)^(-1/2) and xh = (x - mu) s, so
 * y = gamma xh + beta, with mu and var the batch statistics of x (they
 * depend on x): d mu / d x_j = 1/N, d var / d x_j = 2 (x_j - mu) / N (the
 * term through mu sums (x_i - mu) to zero), d s / d x_j = -s^3 (x_j - mu)/N.
 * Then d y_i / d x_j = gamma [(delta_ij - 1/N) s - s^3 (x_i - mu)(x_j - mu)/N]
 * and, summing against dy,
 *     dx_j   = gamma s (dy_j - mean(dy) - s^2 (x_j - mu) mean(dy (x - mu)))
 *     dgamma = sum dy xh          dbeta = sum dy
 * which is XLA's formula (operation_semantics.md, BatchNormGrad) with
 * d_l = mean(dy) and c_l = mean(dy (x - mu)) / (var + eps).
 */
#include "device.h"

#include <math.h>

/* The operand as [outer, F, inner]. */
typedef struct NormDims {
    int64_t outer, f, inner, n;   /* n = outer * inner: elements per feature */
} NormDims;

static bool is_array(const DevValue *v)
{
    return v && v->shape.type != IR_TUPLE && ir_type_is_array(v->shape.type);
}

/* Operand 0 is x; `nvec` operands are [F] vectors of x's type, except the
 * one at `grad_at` (>= 0) which is shaped like x. */
static IrStatus norm_dims(const DevKernelArgs *k, int32_t want, int32_t grad_at, NormDims *nd)
{
    if (k->nopnd != want)
        return dev_kernel_error(k, IR_EINPUT, "%s takes %d operands", ir_op_name(k->ins->op), want);
    const DevValue *x = k->opnd[0];
    if (!is_array(x) || !ir_type_is_float(x->shape.type))
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s of %s is not supported (floats only)",
                                ir_op_name(k->ins->op), ir_type_name(x->shape.type));
    int64_t fi = k->ins->a.x->feature_index;
    if (fi < 0 || fi >= x->shape.rank)
        return dev_kernel_error(k, IR_EINPUT, "feature_index=%lld is not a dimension of the operand",
                                (long long)fi);
    nd->outer = nd->inner = 1;
    for (int32_t i = 0; i < x->shape.rank; i++)
        if (i < fi)
            nd->outer *= x->shape.dims[i];
        else if (i > fi)
            nd->inner *= x->shape.dims[i];
    nd->f = x->shape.dims[fi];
    nd->n = nd->outer * nd->inner;
    for (int32_t i = 1; i < want; i++) {
        const DevValue *v = k->opnd[i];
        bool ok = is_array(v) && v->shape.type == x->shape.type &&
                  (i == grad_at ? ir_shape_same_dims(&v->shape, &x->shape)
                                : v->shape.rank == 1 && v->shape.dims[0] == nd->f);
        if (!ok)
            return dev_kernel_error(k, IR_EINPUT, "operand %d must be %s", (int)i,
                                    i == grad_at ? "shaped like the operand"
                                                 : "a vector of the feature dimension's size");
    }
    return IR_OK;
}

static int64_t at(const NormDims *nd, int64_t o, int64_t l, int64_t i)
{
    return (o * nd->f + l) * nd->inner + i;
}

/* Per-feature vectors in double. */
static double *vec_load(const DevValue *v, int64_t f)
{
    double *r = ts_malloc((size_t)(f > 0 ? f : 1) * sizeof *r);
    for (int64_t l = 0; r && l < f; l++)
        r[l] = dev_load_f64(v->shape.type, v->data, l);
    return r;
}

static DevValue *vec_store(const IrShape *s, const double *v, int64_t f)
{
    DevValue *r = dev_value_new_uninit(s);
    for (int64_t l = 0; r && l < f; l++)
        dev_store_f64(s->type, r->data, l, v[l]);
    return r;
}

/* mu and biased var of feature l of x. */
static void moments(const DevValue *x, const NormDims *nd, int64_t l, double *mu, double *var)
{
    IrType t = x->shape.type;
    double s = 0, q = 0;
    for (int64_t o = 0; o < nd->outer; o++)
        for (int64_t i = 0; i < nd->inner; i++)
            s += dev_load_f64(t, x->data, at(nd, o, l, i));
    *mu = nd->n ? s / (double)nd->n : 0;
    for (int64_t o = 0; o < nd->outer; o++)
        for (int64_t i = 0; i < nd->inner; i++) {
            double d = dev_load_f64(t, x->data, at(nd, o, l, i)) - *mu;
            q += d * d;
        }
    *var = nd->n ? q / (double)nd->n : 0;
}

/* y = gamma (x - mu) / sqrt(var + eps) + beta into y (shaped like x). */
static void normalize(const DevValue *x, const NormDims *nd, double eps, const double *gamma,
                      const double *beta, const double *mu, const double *var, DevValue *y)
{
    IrType t = x->shape.type;
    for (int64_t o = 0; o < nd->outer; o++)
        for (int64_t l = 0; l < nd->f; l++) {
            double s = gamma[l] / sqrt(var[l] + eps);
            for (int64_t i = 0; i < nd->inner; i++) {
                int64_t e = at(nd, o, l, i);
                dev_store_f64(y->shape.type, y->data, e, (dev_load_f64(t, x->data, e) - mu[l]) * s + beta[l]);
            }
        }
}

static IrStatus tuple_out(const DevKernelArgs *k, DevValue **el, DevValue **out)
{
    *out = dev_value_tuple(&k->ins->shape, 3, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", ir_op_name(k->ins->op));
}

/* The result shape: x's, or a tuple (x's, [F], [F]). */
static IrStatus check_result(const DevKernelArgs *k, bool tuple)
{
    const IrShape *rs = &k->ins->shape, *xs = &k->opnd[0]->shape;
    bool ok = tuple ? rs->type == IR_TUPLE && rs->ntuple == 3 && ir_shape_equal(&rs->tuple[0], xs)
                    : ir_shape_equal(rs, xs);
    for (int i = 1; ok && tuple && i < 3; i++)
        ok = rs->tuple[i].type == xs->type && rs->tuple[i].rank == 1 &&
             rs->tuple[i].dims[0] == xs->dims[k->ins->a.x->feature_index];
    return ok ? IR_OK : dev_kernel_error(k, IR_EINPUT, "the result shape does not fit the operands");
}

static void free3(double *a, double *b, double *c)
{
    ts_free(a);
    ts_free(b);
    ts_free(c);
}

IrStatus dev_k_batch_norm_training(const DevKernelArgs *k, DevValue **out)
{
    NormDims nd = {0};
    IrStatus st = norm_dims(k, 3, -1, &nd);
    if (st == IR_OK)
        st = check_result(k, true);
    if (st != IR_OK)
        return st;
    const DevValue *x = k->opnd[0];
    double *gamma = vec_load(k->opnd[1], nd.f), *beta = vec_load(k->opnd[2], nd.f);
    double *mv = ts_malloc((size_t)(nd.f > 0 ? 2 * nd.f : 1) * sizeof *mv);
    DevValue *el[3] = {dev_value_new_uninit(&x->shape), NULL, NULL};
    if (gamma && beta && mv && el[0]) {
        for (int64_t l = 0; l < nd.f; l++)
            moments(x, &nd, l, &mv[l], &mv[nd.f + l]);
        normalize(x, &nd, k->ins->a.x->epsilon, gamma, beta, mv, mv + nd.f, el[0]);
        el[1] = vec_store(&k->ins->shape.tuple[1], mv, nd.f);
        el[2] = vec_store(&k->ins->shape.tuple[2], mv + nd.f, nd.f);
    }
    free3(gamma, beta, mv);
    if (!el[0] || !el[1] || !el[2]) {
        for (int i = 0; i < 3; i++)
            dev_value_unref(el[i]);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in batch-norm-training");
    }
    return tuple_out(k, el, out);
}

IrStatus dev_k_batch_norm_inference(const DevKernelArgs *k, DevValue **out)
{
    NormDims nd = {0};
    IrStatus st = norm_dims(k, 5, -1, &nd);
    if (st == IR_OK)
        st = check_result(k, false);
    if (st != IR_OK)
        return st;
    double *v[4];
    bool ok = true;
    for (int i = 0; i < 4; i++)
        ok &= (v[i] = vec_load(k->opnd[i + 1], nd.f)) != NULL;
    DevValue *y = ok ? dev_value_new_uninit(&k->opnd[0]->shape) : NULL;
    if (y)
        normalize(k->opnd[0], &nd, k->ins->a.x->epsilon, v[0], v[1], v[2], v[3], y);
    for (int i = 0; i < 4; i++)
        ts_free(v[i]);
    if (!y)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in batch-norm-inference");
    *out = y;
    return IR_OK;
}

/* One feature of batch-norm-grad (the formulas at the top). */
static void grad_feature(const DevKernelArgs *k, const NormDims *nd, int64_t l, const double *st,
                         DevValue *dx, double *dgamma, double *dbeta)
{
    const DevValue *x = k->opnd[0], *dy = k->opnd[4];
    IrType t = x->shape.type;
    double gamma = st[0], mu = st[1], s = 1 / sqrt(st[2] + (double)k->ins->a.x->epsilon);
    double sdy = 0, sdyx = 0;
    for (int64_t o = 0; o < nd->outer; o++)
        for (int64_t i = 0; i < nd->inner; i++) {
            int64_t e = at(nd, o, l, i);
            double g = dev_load_f64(t, dy->data, e);
            sdy += g;
            sdyx += g * (dev_load_f64(t, x->data, e) - mu);
        }
    *dbeta = sdy;
    *dgamma = sdyx * s;
    double mdy = nd->n ? sdy / (double)nd->n : 0, mdyx = nd->n ? sdyx / (double)nd->n : 0;
    for (int64_t o = 0; o < nd->outer; o++)
        for (int64_t i = 0; i < nd->inner; i++) {
            int64_t e = at(nd, o, l, i);
            double xc = dev_load_f64(t, x->data, e) - mu, g = dev_load_f64(t, dy->data, e);
            dev_store_f64(t, dx->data, e, gamma * s * (g - mdy - s * s * xc * mdyx));
        }
}

IrStatus dev_k_batch_norm_grad(const DevKernelArgs *k, DevValue **out)
{
    NormDims nd = {0};
    IrStatus st = norm_dims(k, 5, 4, &nd);
    if (st == IR_OK)
        st = check_result(k, true);
    if (st != IR_OK)
        return st;
    double *gamma = vec_load(k->opnd[1], nd.f), *mu = vec_load(k->opnd[2], nd.f);
    double *var = vec_load(k->opnd[3], nd.f);
    double *gb = ts_malloc((size_t)(nd.f > 0 ? 2 * nd.f : 1) * sizeof *gb);
    DevValue *el[3] = {dev_value_new_uninit(&k->opnd[0]->shape), NULL, NULL};
    if (gamma && mu && var && gb && el[0]) {
        for (int64_t l = 0; l < nd.f; l++) {
            double s3[3] = {gamma[l], mu[l], var[l]};
            grad_feature(k, &nd, l, s3, el[0], &gb[l], &gb[nd.f + l]);
        }
        el[1] = vec_store(&k->ins->shape.tuple[1], gb, nd.f);
        el[2] = vec_store(&k->ins->shape.tuple[2], gb + nd.f, nd.f);
    }
    free3(gamma, mu, var);
    ts_free(gb);
    if (!el[0] || !el[1] || !el[2]) {
        for (int i = 0; i < 3; i++)
            dev_value_unref(el[i]);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in batch-norm-grad");
    }
    return tuple_out(k, el, out);
}
