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
 * where f32 is: small integers give the integer sums bit for bit. B packed
 * once and kept (packed.c) gives the unkept product's bits, A stored
 * transposed the plain one's, and alpha 1 (a whole tile's own path at
 * beta 0) the bits of alpha -1 negated; products over part of a B packed
 * into a caller's buffer the bits of the same products unkept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"
#include "device/device.h"
#include "kernel_test.h"
#include "sgemm_check.h"

#include <math.h>
#include <stdio.h>

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

/* f32's bound for a sum of k products, whatever its order, and the
 * roundings of alpha's product and beta's */
static double f32_bound(int k, double alpha_terms, double beta_c)
{
    return (k + 2) * 0x1p-24 * (alpha_terms + beta_c);
}

static void check(SgemmFn *f, enum CBLAS_ORDER o, bool ta, bool tb, int m, int n, int k, float alpha, float beta)
{
    sgemm_check(f, f32_bound, o, ta, tb, m, n, k, alpha, beta);
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
    /* rows around the tile's 8, columns around its 48 and a vector's 16,
     * last panels of 16 and 32 columns (the narrower tiles) */
    static const int shapes[][3] = {{7, 47, 33}, {9, 49, 64}, {16, 96, 31}, {15, 16, 100},
                                    {8, 48, 1},  {25, 95, 70}, {10, 72, 40}, {12, 80, 9}};
    static const float ab[][2] = {{1, 0}, {1.5f, 0.5f}, {-2, 1}};
    for (int s = 0; s < 8; s++)
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

/* B packed once (packed.c's kept form) gives the bits of the unkept
 * product (computed in another loop order), plain and transposed, over the
 * blocks and in the tails; and
 * through a DevPacked, kept at the first product and run from at both. */
static void kept_b_same_bits(void **state)
{
    (void)state;
    if (!kernel())
        skip();
    /* m, n, k; 600 rows: two of the kept product's A blocks (MA = 512)
     * against two of its column blocks (384) and two k blocks of B, where
     * the unkept product runs B's one column block (768) outermost; an
     * unkept B wider than 768 is packed whole and run as kept, but past 4M
     * floats (64 x 2000 x 2100) B's column blocks outermost again */
    static const int shapes[][3] = {{70, 800, 600}, {5, 47, 3}, {33, 100, 257}, {600, 700, 300}, {64, 2000, 2100}};
    uint64_t z = 7;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int tb = 0; tb < 2; tb++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ldb = tb ? k + 2 : n + 2;
            float *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)(tb ? n : k) * ldb * sizeof *b);
            float *c = malloc((size_t)m * n * sizeof *c), *c0 = malloc((size_t)m * n * sizeof *c0);
            assert_true(a && b && c && c0);
            for (int i = 0; i < m * k; i++)
                a[i] = sgemm_draw(&z);
            for (int i = 0; i < (tb ? n : k) * ldb; i++)
                b[i] = sgemm_draw(&z);
            assert_true(dev_sgemm_avx512_rowmajor(false, tb, m, n, k, 1, a, k, b, ldb, 0, c0, n));
            DevSgemmAvx512B *kept = dev_sgemm_avx512_pack_b(n, k, b, tb, ldb);
            assert_non_null(kept);
            assert_true(dev_sgemm_avx512_b_bytes(kept) >= (size_t)n * k * sizeof(float));
            assert_true(dev_sgemm_avx512_run_b(kept, m, a, k, c, n));
            assert_memory_equal(c, c0, (size_t)m * n * sizeof *c);
            dev_sgemm_avx512_b_free(kept);
            free(a);
            free(b);
            free(c);
            free(c0);
        }
    enum { M = 64, K = 512, N = 512 }; /* 2^24 multiply-adds: kept */
    DevValue *x = f32_uniform(M, K, &z), *w = f32_uniform(K, N, &z);
    static float c[M * N], c0[M * N];
    DevPacked *pc = dev_packed_new();
    assert_non_null(pc);
    for (int step = 0; step < 2; step++) {
        fill_uniform(x, &z);
        const float *a = (const float *)x->data, *b = (const float *)w->data;
        assert_true(dev_packed_sgemm(pc, w, M, N, K, a, K, b, false, N, c, N));
        assert_true(dev_sgemm_avx512_rowmajor(false, false, M, N, K, 1, a, K, b, N, 0, c0, N));
        assert_memory_equal(c, c0, sizeof c);
    }
    int32_t weights;
    size_t bytes;
    int64_t runs;
    dev_packed_stats(pc, &weights, &bytes, &runs);
    assert_int_equal(weights, 1);
    assert_int_equal(runs, 2);
    dev_packed_free(pc);
    dev_value_unref(x);
    dev_value_unref(w);
}

/* A transposed op(A) packs into panels (eight at a time from each of A's
 * rows where 64 rows remain, then one at a time) holding the elements a
 * plain A gives the kernel, read in place where a block of its rows is
 * whole strips of 8 (else packed by transposes), so the product of A
 * stored transposed has the bits of the same product of A stored plain:
 * m of one group of eight panels, groups and a remainder, past MC's 192
 * rows and MA's 512; A in place (64, 200, 600, 72), packed (100), and both
 * in one product (203: a block of 192 in place, then 11 rows packed); with
 * leading dimensions wider than the matrix, unkept B and B wider than 768
 * (packed whole, run in the kept loop order). */
static void transposed_a_same_bits(void **state)
{
    (void)state;
    if (!kernel())
        skip();
    static const int shapes[][3] = {{64, 50, 257}, {100, 800, 70}, {200, 48, 300},
                                    {600, 1000, 65}, {72, 33, 9}, {203, 60, 40}};
    uint64_t z = 11;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], lda = k + 3, ldt = m + 5;
        size_t na = (size_t)m * lda, nt = (size_t)k * ldt, nb = (size_t)k * n, nc = (size_t)m * n;
        float *a = malloc((na + nt + nb + 2 * nc) * sizeof *a); /* A, A^T, B, C, C from A^T */
        assert_non_null(a);
        float *at = a + na, *b = at + nt, *c = b + nb, *ct = c + nc;
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++)
                at[p * ldt + i] = a[i * lda + p] = sgemm_draw(&z);
        for (int i = 0; i < k * n; i++)
            b[i] = sgemm_draw(&z);
        assert_true(dev_sgemm_avx512_rowmajor(false, false, m, n, k, 1.5f, a, lda, b, n, 0, c, n));
        assert_true(dev_sgemm_avx512_rowmajor(true, false, m, n, k, 1.5f, at, ldt, b, n, 0, ct, n));
        assert_memory_equal(ct, c, nc * sizeof *c);
        free(a);
    }
}

/* A whole tile of a product whose alpha is 1 and beta 0 runs its own
 * instantiation (plain stores, no multiply by alpha), other tiles and
 * other products the masked one. Negation is exact and rounding to
 * nearest is symmetric, so alpha -1 on -C gives the bits of alpha 1 on C
 * negated, whichever tile computed them: whole tiles and tails (last
 * panels of 4, 16 and 32 columns), k over two blocks, beta 0 and 1, A
 * plain and transposed, B unkept and (alpha 1, beta 0) kept. */
static void alpha_one_whole_tiles_same_bits(void **state)
{
    (void)state;
    if (!kernel())
        skip();
    static const int shapes[][3] = {{64, 96, 300}, {17, 100, 600}, {40, 48, 7}, {24, 64, 130}, {600, 800, 260}};
    uint64_t z = 13;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int v = 0; v < 8; v++) {
            bool ta = v & 1, kept = v & 2;
            float beta = (v & 4) ? 1.0f : 0.0f;
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
            float *a = malloc((na + nb + 2 * nc) * sizeof *a); /* A, B, C for alpha 1, C for alpha -1 */
            assert_non_null(a);
            float *b = a + na, *c = b + nb, *cn = c + nc;
            for (size_t i = 0; i < na; i++)
                a[i] = sgemm_draw(&z);
            for (size_t i = 0; i < nb; i++)
                b[i] = sgemm_draw(&z);
            for (size_t i = 0; i < nc; i++)
                cn[i] = -(c[i] = sgemm_draw(&z));
            int lda = ta ? m : k;
            if (kept && !ta && beta == 0) { /* kept B (alpha 1, beta 0) against the unkept alpha -1 */
                DevSgemmAvx512B *x = dev_sgemm_avx512_pack_b(n, k, b, false, n);
                assert_non_null(x);
                assert_true(dev_sgemm_avx512_run_b(x, m, a, lda, c, n));
                dev_sgemm_avx512_b_free(x);
            } else {
                assert_true(dev_sgemm_avx512_rowmajor(ta, false, m, n, k, 1, a, lda, b, n, beta, c, n));
            }
            assert_true(dev_sgemm_avx512_rowmajor(ta, false, m, n, k, -1, a, lda, b, n, beta, cn, n));
            for (size_t i = 0; i < nc; i++)
                if (c[i] != -cn[i] || signbit(c[i]) == signbit(cn[i]))
                    fail_msg("%dx%dx%d (v %d) element %zu: alpha 1 gives %a, alpha -1 %a", m, n, k, v, i,
                             (double)c[i], (double)cn[i]);
            free(a);
        }
}

/* op(B) packed once into a caller's buffer for kk rows and kn columns,
 * and products reading its first k rows and n columns (attention's blocks
 * over K and V packed once a head), have the bits of the unkept products
 * of that part of B: k inside a block, at a block's end and past it (256),
 * n inside a kept column block, past it (384) and whole, A plain and
 * transposed, B plain and transposed. A buffer off 64 bytes is refused. */
static void packed_part_same_bits(void **state)
{
    (void)state;
    if (!kernel())
        skip();
    enum { KN = 520, KK = 600 };
    static const int parts[][3] = {{64, 100, 300}, {13, 434, 256}, {64, 520, 600}, {8, 48, 7}, {70, 30, 257}};
    uint64_t z = 17;
    size_t nbuf = dev_sgemm_avx512_b_floats(KN, KK) + 16;
    float *raw = malloc(nbuf * sizeof(float)), *b = malloc((size_t)KN * KK * sizeof(float));
    assert_true(raw && b);
    float *buf = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    assert_false(dev_sgemm_avx512_pack_b_into(buf + 1, KN, KK, b, false, KN));
    for (int i = 0; i < KN * KK; i++)
        b[i] = sgemm_draw(&z);
    for (int tb = 0; tb < 2; tb++) {
        int ldb = tb ? KK : KN; /* B plain k x n (row stride KN), or stored n x k */
        assert_true(dev_sgemm_avx512_pack_b_into(buf, KN, KK, b, tb, ldb));
        for (int s = 0; s < (int)(sizeof parts / sizeof parts[0]); s++)
            for (int ta = 0; ta < 2; ta++) {
                int m = parts[s][0], n = parts[s][1], k = parts[s][2], lda = ta ? m + 3 : k + 5;
                float *a = malloc((size_t)(ta ? k : m) * lda * sizeof *a);
                float *c = malloc((size_t)m * n * sizeof *c), *c0 = malloc((size_t)m * n * sizeof *c0);
                assert_true(a && c && c0);
                for (int i = 0; i < (ta ? k : m) * lda; i++)
                    a[i] = sgemm_draw(&z);
                assert_true(dev_sgemm_avx512_run_part(buf, KN, KK, ta, m, n, k, a, lda, c, n));
                assert_true(dev_sgemm_avx512_rowmajor(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c0, n));
                assert_memory_equal(c, c0, (size_t)m * n * sizeof *c);
                free(a);
                free(c);
                free(c0);
            }
    }
    free(raw);
    free(b);
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
        cmocka_unit_test(kept_b_same_bits),
        cmocka_unit_test(transposed_a_same_bits),
        cmocka_unit_test(alpha_one_whole_tiles_same_bits),
        cmocka_unit_test(packed_part_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
