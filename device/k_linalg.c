/*
 * k_linalg.c: cholesky (LAPACK potrf) and triangular-solve (BLAS trsm),
 * batched over every dimension but the minor two, f32/f64/c64/c128.
 *
 * Row-major data seen by column-major LAPACK is the transpose. For
 * cholesky with lower=true we want L, A = L L^H, from A's lower triangle.
 * The buffer read column-major is M = A^T, whose upper triangle is A's
 * lower one; potrf with uplo='U' gives M = U^H U. For Hermitian A,
 * A^T = conj(A), so A = U^T conj(U) = (U^T)(U^T)^H: L = U^T, which is what
 * the buffer holds when read row-major again. So lower=true calls 'U' and
 * lower=false calls 'L' (and gives U with A = U^H U, XLA's a = u^T . u).
 *
 * What XLA does where the docs say "implementation-defined" (XLA's
 * CholeskyExpander, which its CPU backend runs): the other triangle of
 * the result is zero, and a matrix that is not positive definite (potrf's
 * info > 0, a NaN pivot included) comes out entirely NaN (NaN + 0i for
 * complex), each matrix of a batch on its own.
 *
 * triangular-solve(a, b) solves op(a) x = b (left_side) or x op(a) = b,
 * op = transpose_a (NO_TRANSPOSE, TRANSPOSE, ADJOINT), reading only the
 * `lower` or upper triangle of a, its diagonal taken as ones when
 * unit_diagonal: exactly cblas_?trsm in row-major order with alpha = 1.
 * The result overwrites a copy of b (or b itself at its last use).
 *
 * LAPACK's Fortran potrf and the cblas trsm come from OpenBLAS through
 * dev_blas (loaded on first use; device.h declares the table).
 */
#include "blas.h"

#include <complex.h>
#include <math.h>
#include <string.h>

static bool linalg_type(IrType t)
{
    return t == IR_F32 || t == IR_F64 || t == IR_C64 || t == IR_C128;
}

/* Batches of square matrices [..., n, n]: n and the batch count, checked
 * against BLAS's int. */
static IrStatus square_batch(const DevKernelArgs *k, const IrShape *s, const char *what,
                             int64_t *n, int64_t *batch)
{
    if (s->type == IR_TUPLE || s->rank < 2 || s->dims[s->rank - 1] != s->dims[s->rank - 2])
        return dev_kernel_error(k, IR_EINPUT, "%s must be square matrices [..., n, n]", what);
    if (!linalg_type(s->type))
        return dev_kernel_error(k, IR_EUNSUPPORTED, "%s of %s is not supported (f32, f64, c64, c128)",
                                ir_op_name(k->ins->op), ir_type_name(s->type));
    *n = s->dims[s->rank - 1];
    if (*n > INT32_MAX / 2)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "matrices of %lld rows are too large for BLAS",
                                (long long)*n);
    *batch = 1;
    for (int32_t i = 0; i < s->rank - 2; i++)
        *batch *= s->dims[i];
    return IR_OK;
}

/* The result: a fresh copy of `v`, or v itself when this is its last use. */
static DevValue *writable_copy(DevValue *v)
{
    if (dev_value_sole(v))
        return dev_value_ref(v);
    DevValue *r = dev_value_new_uninit(&v->shape);
    if (r && v->nbytes > 0)
        memcpy(r->data, v->data, (size_t)v->nbytes);
    return r;
}

/* ------------------------------------------------------------------ */
/* cholesky                                                            */
/* ------------------------------------------------------------------ */

/* Zero the triangle potrf left alone (strictly above the diagonal when
 * `lower`, below otherwise), a run of each row at a time (the direct call
 * of LAPACK pays nothing of this: kernels_bench cholesky counts it); on
 * failure fill the matrix with NaN. */
#define CHOL_FINISH(NAME, T, NANV)                                                 \
    static void NAME(T *a, int64_t n, bool lower, bool failed)                     \
    {                                                                              \
        if (failed) {                                                              \
            for (int64_t i = 0; i < n * n; i++)                                    \
                a[i] = NANV;                                                       \
            return;                                                                \
        }                                                                          \
        for (int64_t i = 0; i < n; i++) {                                          \
            T *row = a + i * n;                                                    \
            if (lower)                                                             \
                memset(row + i + 1, 0, (size_t)(n - i - 1) * sizeof(T));          \
            else                                                                   \
                memset(row, 0, (size_t)i * sizeof(T));                             \
        }                                                                          \
    }

CHOL_FINISH(finish_f32, float, NAN)
CHOL_FINISH(finish_f64, double, NAN)
/* A real converted to complex has imaginary part 0: NaN + 0i (glibc's
 * CMPLX macros are missing under clang, which builds the fuzzers). */
CHOL_FINISH(finish_c64, float complex, (float complex)NAN)
CHOL_FINISH(finish_c128, double complex, (double complex)NAN)

/* One n x n matrix in place; see the top of the file for uplo. */
static void cholesky_one(const DevBlas *bl, IrType t, void *a, int n, bool lower)
{
    const char uplo = lower ? 'U' : 'L';
    int info = 0;
    switch (t) {
    case IR_F32: bl->spotrf(&uplo, &n, a, &n, &info, 1); finish_f32(a, n, lower, info != 0); break;
    case IR_F64: bl->dpotrf(&uplo, &n, a, &n, &info, 1); finish_f64(a, n, lower, info != 0); break;
    case IR_C64: bl->cpotrf(&uplo, &n, a, &n, &info, 1); finish_c64(a, n, lower, info != 0); break;
    default: bl->zpotrf(&uplo, &n, a, &n, &info, 1); finish_c128(a, n, lower, info != 0); break;
    }
}

IrStatus dev_k_cholesky(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 1)
        return dev_kernel_error(k, IR_EINPUT, "cholesky takes one operand");
    DevValue *a = k->opnd[0];
    int64_t n = 0, batch = 0;
    IrStatus st = square_batch(k, &a->shape, "the operand of cholesky", &n, &batch);
    if (st != IR_OK)
        return st;
    if (!ir_shape_equal(&a->shape, &k->ins->shape))
        return dev_kernel_error(k, IR_EINPUT, "cholesky's shape must be its operand's");
    const DevBlas *bl = dev_blas();
    if (!bl)
        return dev_kernel_error(k, IR_ERUNTIME, "cholesky needs OpenBLAS: %s", dev_blas_error());
    DevValue *r = writable_copy(a);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in cholesky");
    size_t esz = ir_type_size(a->shape.type);
    for (int64_t b = 0; b < batch && n > 0; b++)
        cholesky_one(bl, a->shape.type, r->data + (size_t)(b * n * n) * esz, (int)n, k->ins->a.x->lower);
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* triangular-solve                                                    */
/* ------------------------------------------------------------------ */

static IrStatus trsm_transpose(const DevKernelArgs *k, CBLAS_TRANSPOSE *tr)
{
    const char *t = k->ins->a.x->transpose_a ? k->ins->a.x->transpose_a : "NO_TRANSPOSE";
    if (strcmp(t, "NO_TRANSPOSE") == 0)
        *tr = CblasNoTrans;
    else if (strcmp(t, "TRANSPOSE") == 0)
        *tr = CblasTrans;
    else if (strcmp(t, "ADJOINT") == 0)
        *tr = CblasConjTrans;
    else
        return dev_kernel_error(k, IR_EINPUT,
                                "transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT, got '%s'", t);
    return IR_OK;
}

/* b: [batch..., m, n] with a's batch dims; a is m x m (left) or n x n. */
static IrStatus trsm_shapes(const DevKernelArgs *k, const IrShape *as, const IrShape *bs,
                            int64_t na, int64_t *m, int64_t *n)
{
    if (bs->type != as->type || bs->rank != as->rank ||
        !ir_dims_equal(as->dims, bs->dims, as->rank - 2) || !ir_shape_equal(bs, &k->ins->shape))
        return dev_kernel_error(k, IR_EINPUT,
                                "b must have a's type and batch dims, and be the result's shape");
    *m = bs->dims[bs->rank - 2];
    *n = bs->dims[bs->rank - 1];
    if ((k->ins->a.x->left_side ? *m : *n) != na)
        return dev_kernel_error(k, IR_EINPUT, "a is %lldx%lld but b is %lldx%lld (left_side=%s)",
                                (long long)na, (long long)na, (long long)*m, (long long)*n,
                                k->ins->a.x->left_side ? "true" : "false");
    if (*m > INT32_MAX / 2 || *n > INT32_MAX / 2)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "b is too large for BLAS");
    return IR_OK;
}

typedef struct Trsm {
    CBLAS_SIDE side;
    CBLAS_UPLO uplo;
    CBLAS_TRANSPOSE tr;
    CBLAS_DIAG diag;
    int m, n, lda;
} Trsm;

static void trsm_one(const DevBlas *bl, IrType t, const Trsm *s, const void *a, void *b)
{
    const float one_c[2] = {1, 0};
    const double one_z[2] = {1, 0};
    switch (t) {
    case IR_F32:
        bl->strsm(CblasRowMajor, s->side, s->uplo, s->tr, s->diag, s->m, s->n, 1.0f, a, s->lda,
                    b, s->n);
        break;
    case IR_F64:
        bl->dtrsm(CblasRowMajor, s->side, s->uplo, s->tr, s->diag, s->m, s->n, 1.0, a, s->lda,
                    b, s->n);
        break;
    case IR_C64:
        bl->ctrsm(CblasRowMajor, s->side, s->uplo, s->tr, s->diag, s->m, s->n, one_c, a, s->lda,
                    b, s->n);
        break;
    default:
        bl->ztrsm(CblasRowMajor, s->side, s->uplo, s->tr, s->diag, s->m, s->n, one_z, a, s->lda,
                    b, s->n);
        break;
    }
}

IrStatus dev_k_triangular_solve(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2)
        return dev_kernel_error(k, IR_EINPUT, "triangular-solve takes two operands");
    DevValue *a = k->opnd[0], *b = k->opnd[1];
    int64_t na = 0, batch = 0, m = 0, n = 0;
    Trsm s = {0};
    IrStatus st = square_batch(k, &a->shape, "a of triangular-solve", &na, &batch);
    if (st == IR_OK)
        st = trsm_shapes(k, &a->shape, &b->shape, na, &m, &n);
    if (st == IR_OK)
        st = trsm_transpose(k, &s.tr);
    if (st != IR_OK)
        return st;
    s.side = k->ins->a.x->left_side ? CblasLeft : CblasRight;
    s.uplo = k->ins->a.x->lower ? CblasLower : CblasUpper;
    s.diag = k->ins->a.x->unit_diagonal ? CblasUnit : CblasNonUnit;
    s.m = (int)m;
    s.n = (int)n;
    s.lda = (int)na > 0 ? (int)na : 1;
    const DevBlas *bl = dev_blas();
    if (!bl)
        return dev_kernel_error(k, IR_ERUNTIME, "triangular-solve needs OpenBLAS: %s", dev_blas_error());
    DevValue *r = writable_copy(b);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in triangular-solve");
    size_t esz = ir_type_size(a->shape.type);
    for (int64_t i = 0; i < batch && m > 0 && n > 0; i++)
        trsm_one(bl, a->shape.type, &s, a->data + (size_t)(i * na * na) * esz,
                 r->data + (size_t)(i * m * n) * esz);
    *out = r;
    return IR_OK;
}
