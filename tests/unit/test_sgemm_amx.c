/*
 * test_sgemm_amx.c: the f32 GEMM as three bf16 products on AMX tiles
 * (device/sgemm_amx.c, `--sgemm amx-bf16x3`).
 *
 * On a CPU without AMX (or a kernel that refuses its state) every test is
 * skipped, saying why. Otherwise: every order and transpose of both
 * operands, leading dimensions wider than the matrices, alpha and beta 1
 * and 0 and 1.5 and 0.5, on shapes with tails in every dimension (not
 * multiples of the 16-row tiles, the 32-wide blocks or the sum's 32) and
 * one over several bands of rows, against a double loop: each element
 * within 2^-14 of the sum of |A(i,k) B(k,j)| (bf16x3 is within about 3 *
 * 2^-16 a term; a single bf16 product, 2^-8, fails it). Exactly: A of
 * 1 + 2^-10 (not a bf16) times ones gives f32's k (1 + 2^-10), which only
 * the low parts carry. Through DevBlas's signature: a product with an
 * infinite element is f32's (inf, not NaN: the fallback takes it), and so
 * are small products and sums under 128 (the fallback's bits exactly),
 * which B's kept copies refuse too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"
#include "sgemm_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS's cblas_sgemm (main fixes the library): the fallback and the
 * reference for bits. */
static SgemmFn *openblas(void)
{
    const DevBlas *b = dev_blas();
    assert_non_null(b);
    return b->sgemm;
}

static SgemmFn *amx(void)
{
    const char *why = "";
    SgemmFn *f = dev_sgemm_amx(openblas(), &why);
    if (!f)
        printf("skipped: %s\n", why);
    return f;
}

/* bf16x3's error: within about 3 * 2^-16 a term (a single bf16 product,
 * 2^-8, fails it) */
static double bf16x3_bound(int k, double alpha_terms, double beta_c)
{
    (void)k;
    (void)beta_c;
    return alpha_terms * 0x1p-14 + 1e-6;
}

/* One product through f, each element of C within 2^-14 of sum |a b|. */
static void check(SgemmFn *f, enum CBLAS_ORDER o, bool ta, bool tb, int m, int n, int k, float alpha, float beta)
{
    sgemm_check(f, bf16x3_bound, o, ta, tb, m, n, k, alpha, beta);
}

static void orders_and_transposes(void **state)
{
    (void)state;
    SgemmFn *f = amx();
    if (!f)
        skip();
    /* sums of 128 or more (shorter ones go to the fallback) */
    const int shapes[][3] = {{37, 45, 170}, {64, 96, 128}, {100, 33, 165}, {48, 200, 133}};
    const float ab[][2] = {{1, 0}, {1.5f, 0.5f}};
    for (int s = 0; s < 4; s++)
        for (int o = 0; o < 2; o++)
            for (int t = 0; t < 4; t++)
                for (int v = 0; v < 2; v++)
                    check(f, o ? CblasColMajor : CblasRowMajor, t & 1, t & 2, shapes[s][0], shapes[s][1],
                          shapes[s][2], ab[v][0], ab[v][1]);
}

static void several_bands(void **state)
{
    (void)state;
    SgemmFn *f = amx();
    if (!f)
        skip();
    /* k 2080: copies' rows of 4224 bytes, bands of 96 rows: two, the
     * second 54 rows (a tile and a tail) */
    check(f, CblasRowMajor, false, false, 150, 40, 2080, 1, 0);
    check(f, CblasRowMajor, true, true, 150, 40, 2080, 1, 0.5f);
}

static void low_parts_count(void **state)
{
    (void)state;
    if (!amx())
        skip();
    enum { M = 32, N = 32, K = 64 };
    static float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = 1.0f + 0x1p-10f;
    for (int i = 0; i < K * N; i++)
        b[i] = 1.0f;
    assert_true(dev_sgemm_amx_rowmajor(false, false, M, N, K, 1, a, K, b, N, 0, c, N));
    for (int i = 0; i < M * N; i++)
        assert_true(c[i] == (float)K * (1.0f + 0x1p-10f));
}

static void infinities_and_small_products(void **state)
{
    (void)state;
    SgemmFn *f = amx();
    if (!f)
        skip();
    enum { M = 64, N = 64, K = 64 };
    static float a[M * K], b[K * N], c[M * N], c0[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = 1.0f;
    a[3 * K + 5] = INFINITY;
    /* refused on the tiles, computed by the fallback: row 3 infinite */
    assert_false(dev_sgemm_amx_rowmajor(false, false, M, N, K, 1, a, K, b, N, 0, c, N));
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c, N);
    openblas()(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c0, N);
    for (int j = 0; j < N; j++)
        assert_true(isinf(c[3 * N + j]) && c[3 * N + j] > 0);
    assert_memory_equal(c, c0, sizeof c);
    /* 16 x 16 x 16: under the tiles' minimum, the fallback's own bits */
    for (int i = 0; i < M * K; i++)
        a[i] = (float)i * 0.001f;
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, 16, 16, 16, 1, a, 16, b, 16, 0, c, 16);
    openblas()(CblasRowMajor, CblasNoTrans, CblasNoTrans, 16, 16, 16, 1, a, 16, b, 16, 0, c0, 16);
    assert_memory_equal(c, c0, 256 * sizeof *c);
    /* 64 x 64 x 64: enough multiply-adds, but a sum under 128 */
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c, N);
    openblas()(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, c0, N);
    assert_memory_equal(c, c0, sizeof c);
    /* nor kept for such a sum, nor run kept for fewer than 16 rows: a
     * kept product has the bits of the unkept one */
    assert_null(dev_sgemm_amx_pack_b(N, K, b, false, N));
    static float bk[256 * 256];
    for (int i = 0; i < 256 * 256; i++)
        bk[i] = 1.0f;
    DevSgemmAmxB *kept = dev_sgemm_amx_pack_b(256, 256, bk, false, 256);
    assert_non_null(kept);
    static float a8[8 * 256], c8[8 * 256];
    assert_false(dev_sgemm_amx_run_b(kept, 8, a8, 256, c8, 256));
    dev_sgemm_amx_b_free(kept);
}

int main(void)
{
    dev_blas_choose_sgemm(DEV_SGEMM_OPENBLAS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(orders_and_transposes),
        cmocka_unit_test(several_bands),
        cmocka_unit_test(low_parts_count),
        cmocka_unit_test(infinities_and_small_products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
