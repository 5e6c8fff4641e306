/*
 * k_geev.c: the custom-call JAX's CPU lowering emits for the
 * eigendecomposition of a general square matrix (jnp.linalg.eig,
 * eigvals), run with LAPACK's geev from OpenBLAS as jaxlib runs it
 * (jaxlib/cpu/lapack_kernels.cc); batched over every dimension but the
 * minor two; f32, f64, c64, c128.
 *
 *   (R[..., n] wr, R[..., n] wi, C[..., n, n] vl, C[..., n, n] vr, s32[...])
 *       custom-call(R[..., n, n] a), custom_call_target="lapack_?geev_ffi" (s, d)
 *   (C[..., n] w, C[..., n, n] vl, C[..., n, n] vr, s32[...])
 *       custom-call(C[..., n, n] a), custom_call_target="lapack_?geev_ffi" (c, z)
 *       backend_config={compute_left = 78 : ui8, compute_right = 86 : ui8}
 *
 * R is a real type and C its complex one. Per matrix: the eigenvalues (a
 * real matrix's as real and imaginary parts, a conjugate pair's positive
 * part first, as LAPACK orders them), the left and right eigenvectors as
 * columns, each of unit 2-norm with its largest component real (V: computed;
 * N: not, left zero), and info (0; i > 0: the QR algorithm did not converge
 * and only eigenvalues i+1.. are computed, the eigenvectors left zero;
 * -4: a holds a NaN or an infinity, LAPACK is not called and every result
 * of the matrix is NaN, as jaxlib skips such a matrix). JAX turns every
 * result of a matrix whose info is not 0 into NaN.
 *
 * For a real matrix LAPACK packs a conjugate pair's eigenvectors into two
 * real columns j, j+1 (the real part, then the imaginary part); they are
 * unpacked into v_j = x + iy and v_j+1 = x - iy, as jaxlib does. Row-major
 * data is the transpose of the column-major matrices LAPACK reads and
 * writes (dev_lapack_transpose, k_qr.c). ir/lapack_calls.c checks the
 * call's form when the module is parsed; the kernel checks the shapes again.
 */
#include "blas.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static IrType complex_of(IrType t)
{
    return t == IR_F32 ? IR_C64 : t == IR_F64 ? IR_C128 : t;
}

/* The scratch of a batch: the column-major matrix, LAPACK's left and right
 * eigenvectors, its eigenvalues (real: wr then wi), and workspaces. */
typedef struct Scratch {
    uint8_t *a, *vl, *vr, *w, *work, *rwork;
    int lwork;
} Scratch;

static void scratch_free(Scratch *s)
{
    ts_free(s->a);
    ts_free(s->vl);
    ts_free(s->vr);
    ts_free(s->w);
    ts_free(s->work);
    ts_free(s->rwork);
}

/* geev on the column-major n x n a; w: wr then wi (n each) for a real
 * type, the n complex eigenvalues for a complex one. */
static int geev(const DevBlas *bl, IrType t, char jl, char jr, int n, void *a, void *w, Scratch *s)
{
    int ld = n > 0 ? n : 1, info = 0;
    switch (t) {
    case IR_F32:
        bl->sgeev(&jl, &jr, &n, a, &ld, w, (float *)w + n, (void *)s->vl, &ld, (void *)s->vr, &ld, (void *)s->work,
                  &s->lwork, &info, 1, 1);
        break;
    case IR_F64:
        bl->dgeev(&jl, &jr, &n, a, &ld, w, (double *)w + n, (void *)s->vl, &ld, (void *)s->vr, &ld,
                  (void *)s->work, &s->lwork, &info, 1, 1);
        break;
    case IR_C64:
        bl->cgeev(&jl, &jr, &n, a, &ld, w, (void *)s->vl, &ld, (void *)s->vr, &ld, (void *)s->work, &s->lwork,
                  (void *)s->rwork, &info, 1, 1);
        break;
    default:
        bl->zgeev(&jl, &jr, &n, a, &ld, w, (void *)s->vl, &ld, (void *)s->vr, &ld, (void *)s->work, &s->lwork,
                  (void *)s->rwork, &info, 1, 1);
        break;
    }
    return info;
}

/* Whether the column-major n x n matrix a holds only finite values. */
static bool finite_matrix(const uint8_t *a, int64_t n, IrType t)
{
    int64_t reals = n * n * (t == dev_lapack_real(t) ? 1 : 2);
    for (int64_t i = 0; i < reals; i++) {
        double x = dev_lapack_real(t) == IR_F32 ? (double)((const float *)(const void *)a)[i]
                                        : ((const double *)(const void *)a)[i];
        if (!isfinite(x))
            return false;
    }
    return true;
}

/* Real component k of column-major packed, as a double. */
static double comp(const uint8_t *packed, IrType rt, int64_t k)
{
    return rt == IR_F32 ? (double)((const float *)(const void *)packed)[k] : ((const double *)(const void *)packed)[k];
}

/* dst (row-major n x n of rt's complex type) = LAPACK's real packed
 * eigenvectors (column-major): column j real where wi[j] is 0 (or NaN),
 * else columns j, j+1 the pair x + iy, x - iy. */
static void unpack(uint8_t *dst, const uint8_t *packed, const uint8_t *wi, int n, IrType rt)
{
    for (int j = 0; j < n;) {
        double im = comp(wi, rt, j);
        bool pair = im != 0 && !isnan(im) && j + 1 < n;
        for (int i = 0; i < n; i++) {
            double x = comp(packed, rt, (int64_t)j * n + i), y = pair ? comp(packed, rt, (int64_t)(j + 1) * n + i) : 0;
            int64_t at = 2 * ((int64_t)i * n + j); /* a complex number: its real part, then its imaginary */
            if (rt == IR_F32) {
                float *d = (float *)(void *)dst;
                d[at] = (float)x;
                d[at + 1] = (float)y;
                if (pair) {
                    d[at + 2] = (float)x;
                    d[at + 3] = (float)-y;
                }
            } else {
                double *d = (double *)(void *)dst;
                d[at] = x;
                d[at + 1] = y;
                if (pair) {
                    d[at + 2] = x;
                    d[at + 3] = -y;
                }
            }
        }
        j += pair ? 2 : 1;
    }
}

/* The workspaces of one n x n problem. LAPACK's documented least work
 * (4n real, 2n complex), not the size a query answers: with that, the
 * blocked back-substitution of OpenBLAS 0.3.21's ?trevc3 writes past its
 * arrays (cgeev of a 6x6 matrix crashed in ctrevc3); with the least, geev
 * takes the unblocked one. */
static IrStatus geev_scratch(const DevKernelArgs *k, const DevLapackDims *q, Scratch *s)
{
    const char *t = k->ins->a.x->custom_call_target;
    int64_t n = q->n, lwork = q->type == dev_lapack_real(q->type) ? 4 * n : 2 * n;
    if (lwork > INT_MAX)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s: LAPACK's workspace for %dx%d matrices does not fit its int",
                                t, q->n, q->n);
    s->lwork = lwork > 1 ? (int)lwork : 1;
    s->a = dev_lapack_cells(n * n, q->esz);
    s->vl = dev_lapack_cells(n * n, q->esz);
    s->vr = dev_lapack_cells(n * n, q->esz);
    s->w = dev_lapack_cells(2 * n, ir_type_size(complex_of(q->type)));
    s->work = dev_lapack_cells(s->lwork, q->esz);
    s->rwork = dev_lapack_cells(2 * n, ir_type_size(dev_lapack_real(q->type)));
    if (!s->a || !s->vl || !s->vr || !s->w || !s->work || !s->rwork)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    return IR_OK;
}

/* The shapes: nres results (5 real, 4 complex) over the operand a. */
static bool shapes_ok(const IrShape *rs, const IrShape *a, IrType type)
{
    bool real = type == dev_lapack_real(type);
    int32_t r = a->rank, nres = real ? 5 : 4;
    if (rs->type != IR_TUPLE || rs->ntuple != nres || a->dims[r - 2] != a->dims[r - 1])
        return false;
    for (int e = 0; e < nres; e++) {
        const IrShape *s = &rs->tuple[e];
        bool vals = e < (real ? 2 : 1), info = e == nres - 1;
        IrType want = info ? IR_S32 : vals && real ? type : complex_of(type);
        int32_t rank = info ? r - 2 : vals ? r - 1 : r;
        if (!ir_shape_is_array(s) || s->type != want || s->rank != rank || !ir_dims_equal(s->dims, a->dims, rank))
            return false;
    }
    return true;
}

IrStatus dev_k_geev(const DevKernelArgs *k, DevValue **out)
{
    const char *t = k->ins->a.x->custom_call_target;
    DevLapackDims q;
    IrStatus st = dev_lapack_one(k, &q);
    if (st != IR_OK)
        return st;
    const DevValue *a = k->opnd[0];
    const IrShape *rs = &k->ins->shape;
    bool real = q.type == dev_lapack_real(q.type);
    int nres = real ? 5 : 4;
    if (!shapes_ok(rs, &a->shape, q.type))
        return dev_kernel_error(k, IR_EINPUT, "%s's result must be (R[..., n], R[..., n], C[..., n, n], "
                                              "C[..., n, n], s32[...]) for a real operand R[..., n, n], or "
                                              "(C[..., n], C[..., n, n], C[..., n, n], s32[...]) for a complex "
                                              "one, C the complex type of R", t);
    int jl = ir_lapack_char(k->ins->a.x->backend_config, "compute_left");
    int jr = ir_lapack_char(k->ins->a.x->backend_config, "compute_right");
    if ((jl != 'V' && jl != 'N') || (jr != 'V' && jr != 'N'))
        return dev_kernel_error(k, IR_EINPUT, "%s's backend_config must give compute_left and compute_right "
                                              "(V, N)", t);
    DevValue *el[5] = {0};
    for (int e = 0; e < nres; e++)
        if (!(el[e] = dev_value_new(&rs->tuple[e])))
            st = dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    Scratch s = {0};
    if (st == IR_OK && q.batch > 0 && q.n > 0)
        st = geev_scratch(k, &q, &s);
    IrType rt = dev_lapack_real(q.type), ct = complex_of(q.type);
    size_t mat = (size_t)q.n * (size_t)q.n * q.esz, cmat = (size_t)q.n * (size_t)q.n * ir_type_size(ct);
    size_t rvec = (size_t)q.n * ir_type_size(rt), cvec = (size_t)q.n * ir_type_size(ct);
    DevValue *vl = el[nres - 3], *vr = el[nres - 2];
    int32_t *info = st == IR_OK ? (int32_t *)(void *)el[nres - 1]->data : NULL;
    for (int64_t b = 0; st == IR_OK && q.n > 0 && b < q.batch; b++) {
        uint8_t *vlb = vl->data + (size_t)b * cmat, *vrb = vr->data + (size_t)b * cmat;
        dev_lapack_transpose(s.a, a->data + (size_t)b * mat, q.n, q.n, q.esz);
        info[b] = finite_matrix(s.a, q.n, q.type) ? geev(q.bl, q.type, (char)jl, (char)jr, q.n, s.a, s.w, &s) : -4;
        if (info[b] < 0 && info[b] != -4) { /* an argument LAPACK refused: ours, not the user's */
            st = dev_kernel_error(k, IR_EINTERNAL, "%s refused argument %d", t, -info[b]);
            break;
        }
        if (info[b] == -4) { /* a NaN or an infinity in a: nothing computed */
            for (int e = 0; e < nres - 1; e++) {
                bool vals = e < nres - 3;
                dev_lapack_nan(el[e]->data + (size_t)b * (vals ? (real ? rvec : cvec) : cmat),
                               (int64_t)q.n * (vals ? 1 : q.n), el[e]->shape.type);
            }
            continue;
        }
        if (real) {
            memcpy(el[0]->data + (size_t)b * rvec, s.w, rvec);
            memcpy(el[1]->data + (size_t)b * rvec, s.w + rvec, rvec);
        } else {
            memcpy(el[0]->data + (size_t)b * cvec, s.w, cvec);
        }
        if (info[b] != 0)
            continue; /* did not converge: the eigenvectors stay zero */
        if (jl == 'V') {
            if (real)
                unpack(vlb, s.vl, s.w + rvec, q.n, rt);
            else
                dev_lapack_transpose(vlb, s.vl, q.n, q.n, q.esz);
        }
        if (jr == 'V') {
            if (real)
                unpack(vrb, s.vr, s.w + rvec, q.n, rt);
            else
                dev_lapack_transpose(vrb, s.vr, q.n, q.n, q.esz);
        }
    }
    scratch_free(&s);
    if (st != IR_OK) {
        for (int e = 0; e < nres; e++)
            dev_value_unref(el[e]);
        return st;
    }
    *out = dev_value_tuple(rs, nres, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
}
