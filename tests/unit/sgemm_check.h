/*
 * sgemm_check.h: one f32 GEMM through cblas_sgemm's signature against a
 * double loop, for the tests of tessel's own GEMMs (test_sgemm_avx512.c,
 * test_sgemm_amx.c). Include after <cmocka.h> and "device/blas.h".
 *
 * sgemm_check: random A, B and C in [-1, 1) (a seed from the shape), both
 * stored with leading dimensions 3 wider than they need, C NaN where beta
 * is 0 (it must not be read); each element of C within tol(k, sum of
 * |alpha A(i,q) B(q,j)|, |beta C(i,j)|) of the double loop's, and C's
 * padding untouched.
 */
#ifndef TESSEL_SGEMM_CHECK_H
#define TESSEL_SGEMM_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef double (*SgemmTolerance)(int k, double alpha_terms, double beta_c);

/* Element (i, j) of a matrix stored with leading dimension ld. */
static inline double sgemm_at(const float *x, enum CBLAS_ORDER o, int64_t ld, int64_t i, int64_t j)
{
    return o == CblasRowMajor ? x[i * ld + j] : x[j * ld + i];
}

static inline float sgemm_draw(uint64_t *z)
{
    *z = *z * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*z >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static inline void sgemm_check(SgemmFn *f, SgemmTolerance tol, enum CBLAS_ORDER o, bool ta, bool tb, int m, int n,
                               int k, float alpha, float beta)
{
    int pad = 3;
    /* stored shapes: op(A) is m x k, so A is k x m when transposed */
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = (o == CblasRowMajor ? ac : ar) + pad, ldb = (o == CblasRowMajor ? bc : br) + pad;
    int ldc = (o == CblasRowMajor ? n : m) + pad, rows = o == CblasRowMajor ? m : n;
    size_t asz = (size_t)lda * (size_t)(o == CblasRowMajor ? ar : ac);
    size_t bsz = (size_t)ldb * (size_t)(o == CblasRowMajor ? br : bc), csz = (size_t)ldc * (size_t)rows;
    float *a = malloc(asz * sizeof *a), *b = malloc(bsz * sizeof *b), *c = malloc(csz * sizeof *c);
    float *c0 = malloc(csz * sizeof *c0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(c0);
    uint64_t z = (uint64_t)(m * 131 + n * 17 + k);
    for (size_t i = 0; i < asz; i++)
        a[i] = sgemm_draw(&z);
    for (size_t i = 0; i < bsz; i++)
        b[i] = sgemm_draw(&z);
    for (size_t i = 0; i < csz; i++)
        c[i] = c0[i] = beta == 0.0f && (int)(i % (size_t)ldc) < ldc - pad ? NAN : sgemm_draw(&z);
    f(o, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
      ldc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int q = 0; q < k; q++) {
                double x = ta ? sgemm_at(a, o, lda, q, i) : sgemm_at(a, o, lda, i, q);
                double y = tb ? sgemm_at(b, o, ldb, j, q) : sgemm_at(b, o, ldb, q, j);
                sum += x * y;
                mag += fabs(x * y);
            }
            double cij = beta != 0.0f ? sgemm_at(c0, o, ldc, i, j) : 0.0;
            double want = alpha * sum + beta * cij, got = sgemm_at(c, o, ldc, i, j);
            double t = tol(k, fabs(alpha) * mag, fabs(beta * cij));
            if (!(fabs(got - want) <= t))
                fail_msg("%s ta %d tb %d %dx%dx%d alpha %g beta %g: C(%d,%d) = %.9g, want %.9g (tolerance %.3g)",
                         o == CblasRowMajor ? "row" : "col", ta, tb, m, n, k, alpha, beta, i, j, got, want, t);
        }
    for (int r = 0; r < rows; r++)
        for (int p = ldc - pad; p < ldc; p++)
            assert_true(c[(size_t)r * ldc + p] == c0[(size_t)r * ldc + p]);
    free(a);
    free(b);
    free(c);
    free(c0);
}

#endif /* TESSEL_SGEMM_CHECK_H */
