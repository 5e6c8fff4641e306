/*
 * k_eigh_svd.c: the custom-calls JAX's CPU lowering emits for the
 * Hermitian eigendecomposition (jnp.linalg.eigh, eigvalsh) and the SVD
 * (jnp.linalg.svd, norm(ord=2), pinv, matrix_rank ...), run with LAPACK
 * from OpenBLAS as jaxlib runs them (jaxlib/cpu/lapack_kernels.cc);
 * batched over every dimension but the minor two; f32, f64, c64, c128.
 *
 *   (T[..., n, n], R[..., n], s32[...]) custom-call(T[..., n, n] a),
 *       custom_call_target="lapack_?syevd_ffi" (s, d) or "lapack_?heevd_ffi"
 *       (c, z), backend_config={mode = 86 : ui8, uplo = 76 : ui8}
 *
 * gives, per matrix, what syevd / heevd leave: with mode V the
 * eigenvectors as columns (mode N: what LAPACK leaves of a), the
 * eigenvalues ascending (R is T's real type), and info (0, or i > 0: the
 * algorithm failed to converge). Only the uplo triangle of a is read.
 * Where it holds a NaN or an infinity, LAPACK is not called (OpenBLAS's
 * iterations need not end on one): info is -4 and the matrix's results
 * are NaN (JAX's LAPACK may leave some values finite there).
 *
 *   (T[..., m, n], R[..., k], T[..., m, uc], T[..., vr, n], s32[...])
 *       custom-call(T[..., m, n] a), custom_call_target="lapack_?gesdd_ffi"
 *       (divide and conquer) or "lapack_?gesvd_ffi" (QR), backend_config=
 *       {mode = 65 : ui8}
 *
 * gives what LAPACK leaves of a, the singular values descending
 * (k = min(m, n)), U and V^H (mode A: [m, m] and [n, n]; S: [m, k] and
 * [k, n]; N: not computed, left zero), and info (0; i > 0: did not
 * converge; -4: a holds a NaN or an infinity, every result of the matrix
 * NaN, as LAPACK 3.10 on reports it; tessel checks before calling LAPACK,
 * as OpenBLAS 0.3.21's gesdd spins on such a matrix). JAX turns every
 * result of a matrix whose info is not 0 into NaN.
 *
 * ir/lapack_calls.c checks the call's form when the module is parsed; the
 * kernels check the shapes again. Row-major data is the transpose of what
 * column-major LAPACK reads: each matrix is transposed into a column-major
 * scratch buffer, decomposed there, and its results transposed back
 * (dev_lapack_transpose, k_qr.c). Each call asks LAPACK for its workspace
 * first (lwork = -1); the matrices of a batch share it.
 */
#include "blas.h"

#include <complex.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* A workspace size LAPACK answered in a query (a real number, or the real
 * part of a complex one, of type t), rounded up; -1 when it does not fit
 * an int. */
static int64_t answered(IrType t, const void *w)
{
    double v = t == IR_F32 || t == IR_C64 ? (double)*(const float *)w : *(const double *)w;
    if (!(v >= 0) || v > (double)INT_MAX)
        return -1;
    return (int64_t)ceil(v);
}

/* The scratch of a batch: the column-major matrix and results, and
 * LAPACK's workspaces (work of T, rwork of R, iwork of int). */
typedef struct Scratch {
    uint8_t *a, *u, *vt, *work, *rwork;
    int *iwork;
    int lwork, lrwork, liwork;
} Scratch;

static void scratch_free(Scratch *s)
{
    ts_free(s->a);
    ts_free(s->u);
    ts_free(s->vt);
    ts_free(s->work);
    ts_free(s->rwork);
    ts_free(s->iwork);
}

/* Whether the column-major n x n (or m x n, uplo 0) matrix a holds only
 * finite values: all of it, or its uplo ('L', 'U') triangle. */
static bool finite_matrix(const uint8_t *a, int m, int n, IrType t, char uplo)
{
    bool f32 = dev_lapack_real(t) == IR_F32;
    int parts = t == dev_lapack_real(t) ? 1 : 2;
    for (int j = 0; j < n; j++) {
        int lo = uplo == 'L' ? j : 0, hi = uplo == 'U' ? j + 1 : m;
        for (int64_t i = (int64_t)lo * parts; i < (int64_t)hi * parts; i++) {
            int64_t at = (int64_t)j * m * parts + i;
            double x = f32 ? (double)((const float *)(const void *)a)[at] : ((const double *)(const void *)a)[at];
            if (!isfinite(x))
                return false;
        }
    }
    return true;
}

/* ---- syevd / heevd ---- */

static int syevd(const DevBlas *bl, IrType t, char jobz, char uplo, int n, void *a, void *w, Scratch *s)
{
    int lda = n > 0 ? n : 1, info = 0;
    switch (t) {
    case IR_F32:
        bl->ssyevd(&jobz, &uplo, &n, a, &lda, w, (void *)s->work, &s->lwork, s->iwork, &s->liwork, &info, 1, 1);
        break;
    case IR_F64:
        bl->dsyevd(&jobz, &uplo, &n, a, &lda, w, (void *)s->work, &s->lwork, s->iwork, &s->liwork, &info, 1, 1);
        break;
    case IR_C64:
        bl->cheevd(&jobz, &uplo, &n, a, &lda, w, (void *)s->work, &s->lwork, (void *)s->rwork, &s->lrwork, s->iwork,
                   &s->liwork, &info, 1, 1);
        break;
    default:
        bl->zheevd(&jobz, &uplo, &n, a, &lda, w, (void *)s->work, &s->lwork, (void *)s->rwork, &s->lrwork, s->iwork,
                   &s->liwork, &info, 1, 1);
        break;
    }
    return info;
}

/* Query and allocate the workspaces of one n x n problem. */
static IrStatus syevd_scratch(const DevKernelArgs *k, const DevLapackDims *q, char jobz, char uplo, Scratch *s)
{
    const char *t = k->ins->a.x->custom_call_target;
    double work1[2] = {0}, rwork1 = 0, w1 = 0;
    int iwork1 = 0;
    Scratch query = {.work = (uint8_t *)work1, .rwork = (uint8_t *)&rwork1, .iwork = &iwork1,
                     .lwork = -1, .lrwork = -1, .liwork = -1};
    int info = syevd(q->bl, q->type, jobz, uplo, q->n, NULL, &w1, &query);
    s->lwork = (int)answered(q->type, work1);
    s->lrwork = (int)answered(dev_lapack_real(q->type), &rwork1);
    s->liwork = iwork1;
    if (info != 0 || s->lwork < 0 || s->lrwork < 0 || s->liwork < 0)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s: LAPACK's workspace for %dx%d matrices cannot be had "
                                                    "(query info %d)", t, q->n, q->n, info);
    s->lwork = s->lwork > 1 ? s->lwork : 1;
    s->lrwork = s->lrwork > 1 ? s->lrwork : 1;
    s->liwork = s->liwork > 1 ? s->liwork : 1;
    s->a = dev_lapack_cells((int64_t)q->n * q->n, q->esz);
    s->work = dev_lapack_cells(s->lwork, q->esz);
    s->rwork = dev_lapack_cells(s->lrwork, ir_type_size(dev_lapack_real(q->type)));
    s->iwork = dev_lapack_cells(s->liwork, sizeof(int));
    if (!s->a || !s->work || !s->rwork || !s->iwork)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    return IR_OK;
}

IrStatus dev_k_syevd(const DevKernelArgs *k, DevValue **out)
{
    const char *t = k->ins->a.x->custom_call_target;
    DevLapackDims q;
    IrStatus st = dev_lapack_one(k, &q);
    if (st != IR_OK)
        return st;
    const DevValue *a = k->opnd[0];
    int32_t r = a->shape.rank;
    const IrShape *rs = &k->ins->shape;
    bool ok = q.m == q.n && rs->type == IR_TUPLE && rs->ntuple == 3 && ir_shape_equal(&rs->tuple[0], &a->shape) &&
              rs->tuple[1].type == dev_lapack_real(q.type) && rs->tuple[1].rank == r - 1 &&
              ir_dims_equal(rs->tuple[1].dims, a->shape.dims, r - 1) && rs->tuple[2].type == IR_S32 &&
              rs->tuple[2].rank == r - 2 && ir_dims_equal(rs->tuple[2].dims, a->shape.dims, r - 2);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "%s's result must be (T[..., n, n], R[..., n], s32[...]) for its "
                                              "operand T[..., n, n], R T's real type", t);
    int jobz = ir_lapack_char(k->ins->a.x->backend_config, "mode");
    int uplo = ir_lapack_char(k->ins->a.x->backend_config, "uplo");
    if ((jobz != 'V' && jobz != 'N') || (uplo != 'L' && uplo != 'U'))
        return dev_kernel_error(k, IR_EINPUT, "%s's backend_config must give mode (V, N) and uplo (L, U)", t);
    DevValue *el[3] = {dev_value_new_uninit(&rs->tuple[0]), dev_value_new(&rs->tuple[1]),
                       dev_value_new(&rs->tuple[2])};
    Scratch s = {0};
    st = el[0] && el[1] && el[2] ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    if (st == IR_OK && q.batch > 0 && q.n > 0)
        st = syevd_scratch(k, &q, (char)jobz, (char)uplo, &s);
    if (st == IR_OK) {
        size_t mat = (size_t)q.n * (size_t)q.n * q.esz, vec = (size_t)q.n * ir_type_size(dev_lapack_real(q.type));
        int32_t *info = (int32_t *)(void *)el[2]->data;
        for (int64_t b = 0; q.n > 0 && b < q.batch; b++) {
            uint8_t *vb = el[0]->data + (size_t)b * mat, *wb = el[1]->data + (size_t)b * vec;
            dev_lapack_transpose(s.a, a->data + (size_t)b * mat, q.n, q.n, q.esz);
            if (!finite_matrix(s.a, q.n, q.n, q.type, (char)uplo)) {
                info[b] = -4;
                dev_lapack_nan(vb, (int64_t)q.n * q.n, q.type);
                dev_lapack_nan(wb, q.n, dev_lapack_real(q.type));
                continue;
            }
            info[b] = syevd(q.bl, q.type, (char)jobz, (char)uplo, q.n, s.a, wb, &s);
            if (info[b] < 0) { /* an argument LAPACK refused: ours, not the user's */
                st = dev_kernel_error(k, IR_EINTERNAL, "%s refused argument %d", t, -info[b]);
                break;
            }
            dev_lapack_transpose(vb, s.a, q.n, q.n, q.esz);
        }
    }
    scratch_free(&s);
    if (st != IR_OK) {
        for (int e = 0; e < 3; e++)
            dev_value_unref(el[e]);
        return st;
    }
    *out = dev_value_tuple(rs, 3, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
}

/* ---- gesdd / gesvd ---- */

typedef struct Svd {
    char mode;
    bool qr;       /* gesvd */
    int ucols;     /* U [m, ucols] */
    int vtrows;    /* V^H [vtrows, n] */
} Svd;

static int gesdd(const DevBlas *bl, IrType t, const Svd *v, int m, int n, void *a, void *sv, Scratch *s)
{
    int lda = m > 0 ? m : 1, ldu = m > 0 ? m : 1, ldvt = v->vtrows > 0 ? v->vtrows : 1, info = 0;
    char job = v->mode;
    void *u = s->u, *vt = s->vt, *w = s->work, *rw = s->rwork;
    if (v->qr) {
        switch (t) {
        case IR_F32: bl->sgesvd(&job, &job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, &info, 1, 1); break;
        case IR_F64: bl->dgesvd(&job, &job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, &info, 1, 1); break;
        case IR_C64:
            bl->cgesvd(&job, &job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, rw, &info, 1, 1);
            break;
        default: bl->zgesvd(&job, &job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, rw, &info, 1, 1); break;
        }
        return info;
    }
    switch (t) {
    case IR_F32: bl->sgesdd(&job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, s->iwork, &info, 1); break;
    case IR_F64: bl->dgesdd(&job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, s->iwork, &info, 1); break;
    case IR_C64:
        bl->cgesdd(&job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, rw, s->iwork, &info, 1);
        break;
    default: bl->zgesdd(&job, &m, &n, a, &lda, sv, u, &ldu, vt, &ldvt, w, &s->lwork, rw, s->iwork, &info, 1); break;
    }
    return info;
}

/* The real workspace complex gesdd / gesvd need (LAPACK's documented
 * minimum, as jaxlib sizes it), in elements. */
static int64_t svd_rwork(const Svd *v, int64_t m, int64_t n)
{
    int64_t p = m < n ? m : n, x = m < n ? n : m;
    if (v->qr)
        return 5 * p;
    if (v->mode == 'N')
        return 7 * p;
    int64_t a = 5 * p * p + 5 * p, b = 2 * x * p + 2 * p * p + p;
    return a > b ? a : b;
}

static IrStatus svd_scratch(const DevKernelArgs *k, const DevLapackDims *q, const Svd *v, Scratch *s)
{
    const char *t = k->ins->a.x->custom_call_target;
    double work1[2] = {0}, sv1 = 0;
    Scratch query = {.lwork = -1, .work = (uint8_t *)work1};
    int info = gesdd(q->bl, q->type, v, q->m, q->n, NULL, &sv1, &query);
    int64_t lwork = answered(q->type, work1), lrwork = svd_rwork(v, q->m, q->n);
    if (info != 0 || lwork < 0 || lrwork > INT_MAX)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s: LAPACK's workspace for %dx%d matrices cannot be had "
                                                    "(query info %d)", t, q->m, q->n, info);
    s->lwork = lwork > 1 ? (int)lwork : 1;
    s->a = dev_lapack_cells((int64_t)q->m * q->n, q->esz);
    s->u = dev_lapack_cells(v->mode == 'N' ? 1 : (int64_t)q->m * v->ucols, q->esz);
    s->vt = dev_lapack_cells(v->mode == 'N' ? 1 : (int64_t)v->vtrows * q->n, q->esz);
    s->work = dev_lapack_cells(s->lwork, q->esz);
    s->rwork = dev_lapack_cells(lrwork, ir_type_size(dev_lapack_real(q->type)));
    s->iwork = dev_lapack_cells(8 * (int64_t)q->p, sizeof(int));
    if (!s->a || !s->u || !s->vt || !s->work || !s->rwork || !s->iwork)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    return IR_OK;
}

IrStatus dev_k_gesdd(const DevKernelArgs *k, DevValue **out)
{
    const char *t = k->ins->a.x->custom_call_target;
    DevLapackDims q;
    IrStatus st = dev_lapack_one(k, &q);
    if (st != IR_OK)
        return st;
    const DevValue *a = k->opnd[0];
    int32_t r = a->shape.rank;
    const IrShape *rs = &k->ins->shape;
    Svd v = {.mode = (char)ir_lapack_char(k->ins->a.x->backend_config, "mode"),
             .qr = strstr(t, "gesvd") != NULL};
    if (v.mode != 'A' && v.mode != 'S' && v.mode != 'N')
        return dev_kernel_error(k, IR_EINPUT, "%s's backend_config must give mode (A, S, N)", t);
    bool ok = rs->type == IR_TUPLE && rs->ntuple == 5 && ir_shape_equal(&rs->tuple[0], &a->shape);
    for (int e = 1; ok && e < 5; e++)
        ok = ir_shape_is_array(&rs->tuple[e]) && rs->tuple[e].rank == (e == 1 ? r - 1 : e == 4 ? r - 2 : r) &&
             rs->tuple[e].type == (e == 1 ? dev_lapack_real(q.type) : e == 4 ? IR_S32 : q.type) &&
             ir_dims_equal(rs->tuple[e].dims, a->shape.dims, r - 2);
    if (ok) {
        const int64_t *ud = rs->tuple[2].dims + r - 2, *vd = rs->tuple[3].dims + r - 2;
        int64_t uc = v.mode == 'A' ? q.m : q.p, vr = v.mode == 'A' ? q.n : q.p;
        ok = rs->tuple[1].dims[r - 2] == q.p && ud[0] == q.m && vd[1] == q.n &&
             (v.mode == 'N' || (ud[1] == uc && vd[0] == vr));
        v.ucols = (int)uc;
        v.vtrows = (int)vr;
    }
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "%s's result must be (T[..., m, n], R[..., k], T[..., m, m or k], "
                                              "T[..., n or k, n], s32[...]) for its operand T[..., m, n], "
                                              "k = min(m, n), R T's real type", t);
    DevValue *el[5];
    for (int e = 0; e < 5; e++)
        el[e] = e == 0 ? dev_value_new_uninit(&rs->tuple[0]) : dev_value_new(&rs->tuple[e]);
    Scratch s = {0};
    st = IR_OK;
    for (int e = 0; e < 5; e++)
        if (!el[e])
            st = dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    if (st == IR_OK && a->nbytes > 0)
        memcpy(el[0]->data, a->data, (size_t)a->nbytes);
    bool empty = q.m == 0 || q.n == 0;
    if (st == IR_OK && q.batch > 0 && !empty)
        st = svd_scratch(k, &q, &v, &s);
    size_t rsz = ir_type_size(dev_lapack_real(q.type));
    size_t mat = (size_t)q.m * (size_t)q.n * q.esz, svs = (size_t)q.p * rsz;
    size_t us = (size_t)rs->tuple[2].dims[r - 2] * (size_t)rs->tuple[2].dims[r - 1] * q.esz;
    size_t vts = (size_t)rs->tuple[3].dims[r - 2] * (size_t)rs->tuple[3].dims[r - 1] * q.esz;
    int32_t *info = st == IR_OK ? (int32_t *)(void *)el[4]->data : NULL;
    for (int64_t b = 0; st == IR_OK && !empty && b < q.batch; b++) {
        uint8_t *ab = el[0]->data + (size_t)b * mat, *svb = el[1]->data + (size_t)b * svs;
        uint8_t *ub = el[2]->data + (size_t)b * us, *vtb = el[3]->data + (size_t)b * vts;
        dev_lapack_transpose(s.a, ab, q.m, q.n, q.esz);
        info[b] = finite_matrix(s.a, q.m, q.n, q.type, 0) ? gesdd(q.bl, q.type, &v, q.m, q.n, s.a, svb, &s) : -4;
        if (info[b] == -4) { /* a NaN or an infinity in a: nothing computed */
            dev_lapack_nan(ab, (int64_t)q.m * q.n, q.type);
            dev_lapack_nan(svb, q.p, dev_lapack_real(q.type));
            if (v.mode != 'N') {
                dev_lapack_nan(ub, (int64_t)q.m * v.ucols, q.type);
                dev_lapack_nan(vtb, (int64_t)v.vtrows * q.n, q.type);
            }
            continue;
        }
        if (info[b] < 0) { /* an argument LAPACK refused: ours, not the user's */
            st = dev_kernel_error(k, IR_EINTERNAL, "%s refused argument %d", t, -info[b]);
            break;
        }
        dev_lapack_transpose(ab, s.a, q.n, q.m, q.esz);
        if (v.mode != 'N') {
            dev_lapack_transpose(ub, s.u, v.ucols, q.m, q.esz);
            dev_lapack_transpose(vtb, s.vt, q.n, v.vtrows, q.esz);
        }
    }
    scratch_free(&s);
    if (st != IR_OK) {
        for (int e = 0; e < 5; e++)
            dev_value_unref(el[e]);
        return st;
    }
    *out = dev_value_tuple(rs, 5, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
}
