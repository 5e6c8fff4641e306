/*
 * test_sgemm_avx512.c: tessel's own f32 GEMM (device/sgemm_avx512.c,
 * `--sgemm avx512`), fixed as DevBlas.sgemm.
 *
 * On a CPU without AVX-512F (or an OS that does not save zmm) every test
 * is skipped, saying why. Otherwise, against a double loop, each element
 * within (k + 2) 2^-24 of the sum of |alpha A(i,k) B(k,j)| and |beta C(i,j)|
 * (f32's bound for a sum of k products, whatever its order): both orders
 * and transposes, leading dimensions wider than the matrices, alpha and
 * beta of 1 and 0, 1.5 and 0.5, -2 and 1; m, n, k of 1, 3 and 17, tails
 * of the kernel's 8 x 48 tiles, and shapes over its blocks (k past 256 and
 * 512, m past 192, n past 768); C's padding untouched. beta 0 does not
 * read C (NaN there is overwritten), alpha 0 and k 0 leave beta C. Exact
 * where f32 is: small integers give the integer sums bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool have; /* AVX-512 here: main fixed the kernel as DevBlas.sgemm */

/* DevBlas.sgemm, the kernel (main fixed it), or NULL: skip. */
static SgemmFn *kernel(void)
{
    if (!have)
        return NULL;
    const DevBlas *b = dev_blas();
    assert_non_null(b);
    assert_int_equal(dev_blas_sgemm_current(), DEV_SGEMM_AVX512);
    return b->sgemm;
}

static double at(const float *x, enum CBLAS_ORDER o, int64_t ld, int64_t i, int64_t j)
{
    return o == CblasRowMajor ? x[i * ld + j] : x[j * ld + i];
}

static float draw(uint64_t *z)
{
    *z = *z * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*z >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

/* One product through f against the double loop. C starts NaN where beta
 * is 0 (it must not be read). */
static void check(SgemmFn *f, enum CBLAS_ORDER o, bool ta, bool tb, int m, int n, int k, float alpha, float beta)
{
    int pad = 3;
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = (o == CblasRowMajor ? ac : ar) + pad, ldb = (o == CblasRowMajor ? bc : br) + pad;
    int ldc = (o == CblasRowMajor ? n : m) + pad;
    size_t asz = (size_t)lda * (size_t)(o == CblasRowMajor ? ar : ac);
    size_t bsz = (size_t)ldb * (size_t)(o == CblasRowMajor ? br : bc);
    size_t csz = (size_t)ldc * (size_t)(o == CblasRowMajor ? m : n);
    float *a = malloc((asz + 1) * sizeof *a), *b = malloc((bsz + 1) * sizeof *b);
    float *c = malloc(csz * sizeof *c), *c0 = malloc(csz * sizeof *c0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(c0);
    uint64_t z = (uint64_t)(m * 131 + n * 17 + k);
    for (size_t i = 0; i < asz; i++)
        a[i] = draw(&z);
    for (size_t i = 0; i < bsz; i++)
        b[i] = draw(&z);
    for (size_t i = 0; i < csz; i++)
        c[i] = c0[i] = draw(&z);
    if (beta == 0.0f)
        for (int r = 0; r < (o == CblasRowMajor ? m : n); r++)
            for (int p = 0; p < ldc - pad; p++)
                c[(size_t)r * ldc + p] = c0[(size_t)r * ldc + p] = NAN;
    f(o, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
      ldc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int q = 0; q < k; q++) {
                double x = ta ? at(a, o, lda, q, i) : at(a, o, lda, i, q);
                double y = tb ? at(b, o, ldb, j, q) : at(b, o, ldb, q, j);
                sum += x * y;
                mag += fabs(x * y);
            }
            double cij = beta != 0.0f ? at(c0, o, ldc, i, j) : 0.0;
            double want = alpha * sum + beta * cij;
            double tol = (k + 2) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * cij));
            double got = at(c, o, ldc, i, j);
            if (!(fabs(got - want) <= tol))
                fail_msg("%s ta %d tb %d %dx%dx%d alpha %g beta %g: C(%d,%d) = %.9g, want %.9g (tolerance %.3g)",
                         o == CblasRowMajor ? "row" : "col", ta, tb, m, n, k, alpha, beta, i, j, got, want, tol);
        }
    for (int r = 0; r < (o == CblasRowMajor ? m : n); r++)
        for (int p = ldc - pad; p < ldc; p++)
            assert_true(c[(size_t)r * ldc + p] == c0[(size_t)r * ldc + p]);
    free(a);
    free(b);
    free(c);
    free(c0);
}

static void small_and_odd_shapes(void **state)
{
    (void)state;
    SgemmFn *f = kernel();
    if (!f)
        skip();
    static const int dims[] = {1, 3, 17};
    static const float ab[][2] = {{1, 0}, {1.5f, 0.5f}, {-2, 1}};
    for (int x = 0; x < 27; x++)
        for (int o = 0; o < 2; o++)
            for (int t = 0; t < 4; t++)
                check(f, o ? CblasColMajor : CblasRowMajor, t & 1, t & 2, dims[x % 3], dims[x / 3 % 3], dims[x / 9],
                      ab[(x + t) % 3][0], ab[(x + t) % 3][1]);
}

static void tile_tails(void **state)
{
    (void)state;
    SgemmFn *f = kernel();
    if (!f)
        skip();
    /* rows around the tile's 8, columns around its 48 and a vector's 16 */
    static const int shapes[][3] = {{7, 47, 33}, {9, 49, 64}, {16, 96, 31}, {15, 16, 100}, {8, 48, 1}, {25, 95, 70}};
    static const float ab[][2] = {{1, 0}, {1.5f, 0.5f}, {-2, 1}};
    for (int s = 0; s < 6; s++)
        for (int o = 0; o < 2; o++)
            for (int t = 0; t < 4; t++)
                for (int v = 0; v < 3; v++)
                    check(f, o ? CblasColMajor : CblasRowMajor, t & 1, t & 2, shapes[s][0], shapes[s][1],
                          shapes[s][2], ab[v][0], ab[v][1]);
}

static void over_blocks(void **state)
{
    (void)state;
    SgemmFn *f = kernel();
    if (!f)
        skip();
    /* k over the 256 block twice, m over the 192 rows of A's, n over the
     * 768 columns of B's */
    check(f, CblasRowMajor, false, false, 200, 50, 600, 1, 0);
    check(f, CblasRowMajor, true, true, 30, 800, 300, 1.5f, 0.5f);
    check(f, CblasColMajor, false, true, 197, 770, 40, -2, 1);
    check(f, CblasRowMajor, true, false, 1000, 20, 257, 1, 0);
}

static void empty_sums_and_exact_integers(void **state)
{
    (void)state;
    SgemmFn *f = kernel();
    if (!f)
        skip();
    enum { M = 50, N = 70, K = 300 };
    static float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * N; i++)
        c[i] = (float)(i % 9);
    /* k 0 and alpha 0: C = beta C, A and B not read */
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, 0, 1, NULL, 1, NULL, N, 2, c, N);
    for (int i = 0; i < M * N; i++)
        assert_true(c[i] == 2.0f * (float)(i % 9));
    for (int i = 0; i < M * K; i++)
        a[i] = NAN;
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 0, a, K, b, N, 0, c, N);
    for (int i = 0; i < M * N; i++)
        assert_true(c[i] == 0.0f);
    /* small integers: every partial sum exact in f32, so every order gives
     * the same bits */
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 5) - 2.0f;
    assert_true(dev_sgemm_avx512_rowmajor(false, false, M, N, K, 1, a, K, b, N, 0, c, N));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0;
            for (int q = 0; q < K; q++)
                want += (double)a[i * K + q] * b[q * N + j];
            assert_true(c[i * N + j] == (float)want);
        }
}

int main(void)
{
    /* m 0: true exactly where the kernel can run here */
    have = dev_sgemm_avx512_rowmajor(false, false, 0, 0, 0, 1, NULL, 1, NULL, 1, 0, NULL, 1);
    if (have)
        dev_blas_choose_sgemm(DEV_SGEMM_AVX512);
    else
        printf("skipped: %s\n", "no AVX-512F (or no zmm state) here");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_and_odd_shapes),
        cmocka_unit_test(tile_tails),
        cmocka_unit_test(over_blocks),
        cmocka_unit_test(empty_sums_and_exact_integers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
