/*
 * k_qr.c: the custom-call targets `Qr` and
 * `ProductOfElementaryHouseholderReflectors` that XLA's client library
 * (xla/hlo/builder/lib/qr.cc) emits and XLA's QrExpander lowers on CPU,
 * with LAPACK's geqrf and orgqr/ungqr from OpenBLAS; batched over every
 * dimension but the minor two; f32, f64, c64, c128.
 *
 *   (T[..., m, n], T[..., min(m, n)]) custom-call(T[..., m, n] a),
 *       custom_call_target="Qr"
 *
 * gives a with R in and above the diagonal and the Householder vectors
 * below it, and the scalars taus: A = H_1 H_2 ... H_p R with
 * H_j = I - tau_j v_j v_j^H, v_j[j] = 1 (implicit), v_j[i < j] = 0 and
 * v_j[i > j] stored at a[i, j]. That is exactly geqrf's output: XLA's
 * House() builds LAPACK's larfg reflector (beta = -sign(Re alpha) * norm,
 * alpha = 0 counting as positive; tau = (beta - alpha) / beta;
 * v = x / (alpha - beta); tau = 0 and v = e_j when the part below the
 * diagonal is zero and alpha is real), so geqrf's values, signs included,
 * are XLA's up to rounding.
 *
 *   T[..., m, n] custom-call(T[..., m, n] a, T[..., k] taus),
 *       custom_call_target="ProductOfElementaryHouseholderReflectors"
 *
 * gives the first n columns of H_1 ... H_k, reading only a's vectors
 * (strictly below the diagonal of its first k columns): orgqr (ungqr for
 * complex), which needs m >= n >= k as XLA's builder does.
 *
 * Row-major data is the transpose of what column-major LAPACK reads, so
 * each matrix is transposed into a column-major scratch buffer, factored
 * there, and transposed back. Each call asks LAPACK for its workspace
 * first (lwork = -1); the matrices of a batch share one scratch buffer and
 * one workspace.
 *
 * LAPACK's Fortran routines come from OpenBLAS through dev_blas (loaded on
 * first use; device.h declares them: 32-bit integers, no LAPACKE).
 */
#include "blas.h"

#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef DevLapackDims QrDims;

IrStatus dev_lapack_dims(const DevKernelArgs *k, const IrShape *s, const char *what, DevLapackDims *q)
{
    const char *t = k->ins->a.x->custom_call_target;
    if (s->type == IR_TUPLE || s->rank < 2)
        return dev_kernel_error(k, IR_EINPUT, "%s of %s must be matrices [..., m, n]", what, t);
    if (s->type != IR_F32 && s->type != IR_F64 && s->type != IR_C64 && s->type != IR_C128)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s of %s is not supported (f32, f64, c64, c128)",
                                t, ir_type_name(s->type));
    int64_t m = s->dims[s->rank - 2], n = s->dims[s->rank - 1];
    /* LAPACK takes 32-bit sizes; half the range keeps lda * n style index
     * arithmetic inside LAPACK well away from overflow, as k_linalg.c. */
    if (m > INT32_MAX / 2 || n > INT32_MAX / 2)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "matrices of %lldx%lld are too large for LAPACK",
                                (long long)m, (long long)n);
    if (!(q->bl = dev_blas()))
        return dev_kernel_error(k, IR_ERUNTIME, "%s needs OpenBLAS's LAPACK: %s", t, dev_blas_error());
    q->type = s->type;
    q->esz = ir_type_size(s->type);
    q->m = (int)m;
    q->n = (int)n;
    q->p = q->m < q->n ? q->m : q->n;
    q->batch = 1;
    for (int32_t i = 0; i < s->rank - 2; i++)
        q->batch *= s->dims[i];
    return IR_OK;
}

IrType dev_lapack_real(IrType t)
{
    return t == IR_C64 ? IR_F32 : t == IR_C128 ? IR_F64 : t;
}

void *dev_lapack_cells(int64_t elements, size_t esz)
{
    if (elements < 1)
        elements = 1;
    if ((uint64_t)elements > SIZE_MAX / esz)
        return NULL;
    return ts_malloc((size_t)elements * esz);
}

void dev_lapack_nan(uint8_t *p, int64_t n, IrType t)
{
    IrType rt = dev_lapack_real(t);
    int64_t reals = n * (t == rt ? 1 : 2);
    for (int64_t i = 0; i < reals; i++) {
        if (rt == IR_F32)
            ((float *)(void *)p)[i] = NAN;
        else
            ((double *)(void *)p)[i] = NAN;
    }
}

void dev_lapack_transpose(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols, size_t esz)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            memcpy(dst + (size_t)(j * rows + i) * esz, src + (size_t)(i * cols + j) * esz, esz);
}

/* One geqrf (k < 0) or orgqr/ungqr (k >= 0) call; lwork = -1 is the
 * workspace query. a is column-major with lda = max(1, m). */
static int lapack_call(const DevBlas *bl, IrType t, int m, int n, int k, void *a, void *tau, void *work,
                       int lwork)
{
    int lda = m > 0 ? m : 1, info = 0;
    if (k < 0) {
        switch (t) {
        case IR_F32: bl->sgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info); break;
        case IR_F64: bl->dgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info); break;
        case IR_C64: bl->cgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info); break;
        default: bl->zgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info); break;
        }
    } else {
        switch (t) {
        case IR_F32: bl->sorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info); break;
        case IR_F64: bl->dorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info); break;
        case IR_C64: bl->cungqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info); break;
        default: bl->zungqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info); break;
        }
    }
    return info;
}

/* Scratch for a batch: one column-major matrix and LAPACK's workspace,
 * sized by the workspace query (its answer is in work[0], a real number
 * or the real part of a complex one). */
typedef struct QrScratch {
    uint8_t *col;
    uint8_t *work;
    int lwork;
} QrScratch;

static IrStatus qr_scratch(const DevKernelArgs *k, const QrDims *q, int kk, QrScratch *s)
{
    uint8_t query[16] = {0};
    uint8_t tau1[16] = {0};
    int lda = q->m > 0 ? q->m : 1;
    int info = lapack_call(q->bl, q->type, q->m, q->n, kk, NULL, tau1, query, -1);
    double want = q->type == IR_F32 || q->type == IR_C64 ? (double)*(float *)(void *)query
                                                          : *(double *)(void *)query;
    if (info != 0)
        return dev_kernel_error(k, IR_EINTERNAL, "LAPACK's workspace query failed (info %d)", info);
    /* At least n (LAPACK's minimum for both routines), at most what an int
     * holds; the query may round a large size up, so clamp. */
    if (!(want >= 1))
        want = 1;
    if (want < q->n)
        want = q->n;
    if (want > INT32_MAX / 2)
        want = INT32_MAX / 2;
    s->lwork = (int)want;
    size_t cells = (size_t)lda * (size_t)(q->n > 0 ? q->n : 1);
    if (cells > SIZE_MAX / q->esz || (size_t)s->lwork > SIZE_MAX / q->esz)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", k->ins->a.x->custom_call_target);
    s->col = ts_malloc(cells * q->esz);
    s->work = ts_malloc((size_t)s->lwork * q->esz);
    if (!s->col || !s->work) {
        ts_free(s->col);
        ts_free(s->work);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", k->ins->a.x->custom_call_target);
    }
    return IR_OK;
}

static void qr_scratch_free(QrScratch *s)
{
    ts_free(s->col);
    ts_free(s->work);
}

IrStatus dev_lapack_one(const DevKernelArgs *k, DevLapackDims *q)
{
    if (k->nopnd != 1)
        return dev_kernel_error(k, IR_EINPUT, "%s takes one operand", k->ins->a.x->custom_call_target);
    return dev_lapack_dims(k, &k->opnd[0]->shape, "the operand", q);
}

IrStatus dev_k_qr(const DevKernelArgs *k, DevValue **out)
{
    QrDims q;
    IrStatus st = dev_lapack_one(k, &q);
    if (st != IR_OK)
        return st;
    const DevValue *a = k->opnd[0];
    /* The result XLA's builder declares: (a's shape, [..., min(m, n)]). */
    const IrShape *rs = &k->ins->shape;
    bool ok = rs->type == IR_TUPLE && rs->ntuple == 2 && ir_shape_equal(&rs->tuple[0], &a->shape) &&
              rs->tuple[1].type == a->shape.type && rs->tuple[1].rank == a->shape.rank - 1 &&
              ir_dims_equal(rs->tuple[1].dims, a->shape.dims, a->shape.rank - 2) &&
              rs->tuple[1].dims[rs->tuple[1].rank - 1] == q.p;
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "Qr's result must be (T[..., m, n], T[..., min(m, n)]) "
                                              "for its operand T[..., m, n]");
    DevValue *el[2] = {dev_value_new_uninit(&rs->tuple[0]), dev_value_new(&rs->tuple[1])};
    QrScratch s = {0};
    if (!el[0] || !el[1]) {
        dev_value_unref(el[0]);
        dev_value_unref(el[1]);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in Qr");
    }
    if (a->nbytes > 0)
        memcpy(el[0]->data, a->data, (size_t)a->nbytes);
    /* Nothing to factor when a matrix has no rows or columns: a stays,
     * taus is empty. */
    if (q.p > 0 && q.batch > 0 && (st = qr_scratch(k, &q, -1, &s)) != IR_OK) {
        dev_value_unref(el[0]);
        dev_value_unref(el[1]);
        return st;
    }
    size_t mat = (size_t)q.m * (size_t)q.n * q.esz;
    for (int64_t b = 0; q.p > 0 && b < q.batch; b++) {
        uint8_t *ab = el[0]->data + (size_t)b * mat;
        dev_lapack_transpose(s.col, ab, q.m, q.n, q.esz);
        int info = lapack_call(q.bl, q.type, q.m, q.n, -1, s.col, el[1]->data + (size_t)(b * q.p) * q.esz,
                               s.work, s.lwork);
        if (info != 0) {
            qr_scratch_free(&s);
            dev_value_unref(el[0]);
            dev_value_unref(el[1]);
            return dev_kernel_error(k, IR_EINTERNAL, "geqrf failed (info %d)", info);
        }
        dev_lapack_transpose(ab, s.col, q.n, q.m, q.esz);
    }
    qr_scratch_free(&s);
    *out = dev_value_tuple(rs, 2, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in Qr");
}

IrStatus dev_k_householder_product(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2)
        return dev_kernel_error(k, IR_EINPUT,
                                "ProductOfElementaryHouseholderReflectors takes two operands (a, taus)");
    const DevValue *a = k->opnd[0], *taus = k->opnd[1];
    QrDims q;
    IrStatus st = dev_lapack_dims(k, &a->shape, "a", &q);
    if (st != IR_OK)
        return st;
    const IrShape *ts = &taus->shape;
    if (ts->type != a->shape.type || ts->rank != a->shape.rank - 1 ||
        !ir_dims_equal(ts->dims, a->shape.dims, a->shape.rank - 2))
        return dev_kernel_error(k, IR_EINPUT, "taus must be T[..., k] with a's type and batch dimensions");
    int64_t kk = ts->dims[ts->rank - 1];
    /* XLA's builder refuses m < n and k > n; orgqr needs both too. */
    if (q.m < q.n || kk > q.n)
        return dev_kernel_error(k, IR_EINPUT, "needs m >= n >= k, got a [..., %d, %d] and %lld taus",
                                q.m, q.n, (long long)kk);
    if (!ir_shape_equal(&k->ins->shape, &a->shape))
        return dev_kernel_error(k, IR_EINPUT, "the result must have a's shape");
    DevValue *r = dev_value_new_uninit(&a->shape);
    QrScratch s = {0};
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in ProductOfElementaryHouseholderReflectors");
    if (q.n == 0 || q.batch == 0) { /* no columns: an empty Q */
        *out = r;
        return IR_OK;
    }
    if ((st = qr_scratch(k, &q, (int)kk, &s)) != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    size_t mat = (size_t)q.m * (size_t)q.n * q.esz;
    for (int64_t b = 0; b < q.batch; b++) {
        dev_lapack_transpose(s.col, a->data + (size_t)b * mat, q.m, q.n, q.esz);
        /* orgqr reads tau without writing it (const in the declaration). */
        int info = lapack_call(q.bl, q.type, q.m, q.n, (int)kk, s.col,
                               (uint8_t *)taus->data + (size_t)(b * kk) * q.esz, s.work, s.lwork);
        if (info != 0) {
            qr_scratch_free(&s);
            dev_value_unref(r);
            return dev_kernel_error(k, IR_EINTERNAL, "orgqr failed (info %d)", info);
        }
        dev_lapack_transpose(r->data + (size_t)b * mat, s.col, q.n, q.m, q.esz);
    }
    qr_scratch_free(&s);
    *out = r;
    return IR_OK;
}
