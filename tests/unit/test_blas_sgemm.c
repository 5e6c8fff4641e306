/*
 * test_blas_sgemm.c: the f32 GEMM of BLIS and oneDNN behind cblas_sgemm's
 * signature (device/blas_sgemm.c), and the probe that chooses among them
 * and OpenBLAS for tessel's dots (device/blas_choice.c).
 *
 * Every order (row- and column-major) and transpose of both operands, with
 * leading dimensions wider than the matrices, alpha and beta 1.5 and 0.5
 * and 1 and 0 (oneDNN's B^T and thin products of up to 512 rows at one
 * thread go to its matmul primitive: more shapes than its cache per thread keeps,
 * on one thread, on a second after it, on two at once, exactly), against a triple loop in double computed here from cblas's definition:
 * C = alpha op(A) op(B) + beta C, element (i, j) of a matrix stored with
 * leading dimension ld at [i * ld + j] row-major, [j * ld + i] column-major.
 * A library that is not installed (scripts/setup.sh installs both) is
 * skipped, saying so. The probe: DevBlas.sgemm, left to measure (the
 * default), computes the same products, and afterwards its verdict names
 * the library it chose and a rate or the reason for a skip for each of the
 * three. (Which one wins is the machine's business: not asserted.) Told
 * of a large product before any (dev_blas_sgemm_prepare, as a run does
 * before its clock starts), it measures then, and only then; where the
 * devices' BLAS thread count changes, the next large product measures
 * again at the new count (512^3 at 2 threads). BLIS and
 * oneDNN also at two threads a device (an OpenMP team): the orders and
 * transposes, and a 256^3 product of small integers exactly. The watch of
 * the probe's choice (device/blas_watch.c), fed made-up rates (no clock):
 * a choice whose first calls run as probed holds; a library slow on its
 * first calls (another library's threads spinning beside it) gives the
 * rest to the library whose calls ran fastest, the others tried fastest
 * in the probe first, an absent one never, one whose call runs under half
 * the best so far cut short after it; one slow call of three does not
 * count; calls made while another library was on trial, or after the
 * watch, are ignored. Through DevBlas.sgemm, the watched calls compute the
 * same products and the verdict afterwards still names a library; at 2
 * threads, products of 48^3 (OpenBLAS) and 128^3 (the chosen library) too.
 * The choice per product shape at one thread (device/blas_shapes.c): the
 * bookkeeping fed made-up times (the two fastest of the probe are the
 * candidates, the smaller time wins, a transpose is another shape, a full
 * table records no more, the verdict's clause); through DevBlas.sgemm, the
 * 256^3 product's shape is in the verdict, a new shape's products of
 * inexact values have the same bits every time (row- and column-major
 * calls alike), two threads at a new shape's first product at once get
 * the same bits, and a shape told before its first product is chosen then.
 * The small products' library at one thread (device/blas_small.c):
 * OpenBLAS under 32^3, else the one timed once, computing the products.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum { M = 5, N = 7, K = 3, LD = 11 };

/* Element (i, j) of a matrix stored with leading dimension ld. */
static float at(const float *x, enum CBLAS_ORDER o, int ld, int i, int j)
{
    return o == CblasRowMajor ? x[i * ld + j] : x[j * ld + i];
}

static void check_fn_ab(const char *lib, SgemmFn *g, float alpha, float beta)
{
    float a[LD * LD], b[LD * LD], c[LD * LD], c0[LD * LD];
    for (int i = 0; i < LD * LD; i++) {
        a[i] = (float)((i * 7) % 13) - 6.0f;
        b[i] = (float)((i * 5) % 11) * 0.5f - 2.0f;
        c0[i] = (float)(i % 9) - 4.0f;
    }
    const enum CBLAS_ORDER orders[2] = {CblasRowMajor, CblasColMajor};
    const enum CBLAS_TRANSPOSE ts[2] = {CblasNoTrans, CblasTrans};
    for (int oi = 0; oi < 2; oi++)
        for (int ai = 0; ai < 2; ai++)
            for (int bi = 0; bi < 2; bi++) {
                enum CBLAS_ORDER o = orders[oi];
                memcpy(c, c0, sizeof c);
                g(o, ts[ai], ts[bi], M, N, K, alpha, a, LD, b, LD, beta, c, LD);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double want = beta * at(c0, o, LD, i, j);
                        for (int p = 0; p < K; p++) {
                            double x = ai ? at(a, o, LD, p, i) : at(a, o, LD, i, p);
                            double y = bi ? at(b, o, LD, j, p) : at(b, o, LD, p, j);
                            want += alpha * x * y;
                        }
                        double got = at(c, o, LD, i, j);
                        if (fabs(got - want) > 1e-4 * (1 + fabs(want)))
                            fail_msg("%s %s-major trans %d %d: C(%d,%d) = %g, expected %g", lib,
                                     oi ? "column" : "row", ai, bi, i, j, got, want);
                    }
                /* Outside the M x N block, C keeps its values. */
                for (int i = 0; i < LD; i++)
                    for (int j = 0; j < LD; j++)
                        if ((oi == 0 && (i >= M || j >= N)) || (oi == 1 && (j >= M || i >= N)))
                            assert_true(c[i * LD + j] == c0[i * LD + j]);
            }
}

/* alpha 1.5, beta 0.5; and alpha 1, beta 0 (oneDNN's B^T products of
 * one thread take its matmul primitive there: blas_sgemm.c). */
static void check_fn(const char *lib, SgemmFn *g)
{
    check_fn_ab(lib, g, 1.5f, 0.5f);
    check_fn_ab(lib, g, 1.0f, 0.0f);
}

/* B^T products of 40 shapes (more than the 32 a thread's cache of oneDNN
 * primitives keeps: the least recently used are replaced), twice over,
 * every element against a double dot of small integers (exact in f32);
 * each followed by the product of B as stored with the same sizes and
 * leading dimensions (oneDNN's primitive for thin ones: its own slot,
 * with a scratchpad for its copy of B). */
static void *check_shapes(void *arg)
{
    SgemmFn *g;
    memcpy(&g, &arg, sizeof g);
    enum { S = 40 };
    static _Thread_local float a[S * S], bm[S * S], c[S * S];
    for (int i = 0; i < S * S; i++) {
        a[i] = (float)((i * 7) % 13 - 6);
        bm[i] = (float)((i * 5) % 11 - 5);
    }
    for (int round = 0; round < 2; round++)
        for (int s = 0; s < S; s++) {
            int m = 1 + s, n = S - s, k = 1 + (s * 3) % (S - 3);
            for (int tb = 1; tb >= 0; tb--) {
                memset(c, 0, sizeof c);
                g(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, S, bm, S, 0.0f, c,
                  S);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double want = 0;
                        for (int p = 0; p < k; p++)
                            want += (double)a[i * S + p] * (tb ? bm[j * S + p] : bm[p * S + j]);
                        if (c[i * S + j] != (float)want)
                            fail_msg("%s %dx%dx%d: C(%d,%d) = %g, expected %g", tb ? "B^T" : "B", m, k, n, i, j,
                                     c[i * S + j], want);
                    }
            }
        }
    return NULL;
}

/* check_shapes on threads of their own: one, then another after it (which
 * takes over the first's cache), then two at once. */
static void check_threads(SgemmFn *g)
{
    pthread_t t[2];
    void *arg;
    memcpy(&arg, &g, sizeof g);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&t[0], NULL, check_shapes, arg), 0);
        assert_int_equal(pthread_join(t[0], NULL), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, check_shapes, arg), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

enum { P = 256 };

/* An n^3 product (n <= P) of small integers (exact in f32: every element
 * equal to a double dot), B transposed, through g at `threads` BLAS
 * threads a device. */
static void check_exact_n(const char *what, SgemmFn *g, int threads, int n)
{
    static float a[P * P], bm[P * P], c[P * P];
    for (int i = 0; i < P * P; i++) {
        a[i] = (float)((i * 7) % 13 - 6);
        bm[i] = (float)((i * 5) % 11 - 5);
    }
    dev_blas_sgemm_threads(threads, false);
    memset(c, 0, sizeof c);
    g(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, P, bm, P, 0.0f, c, P);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double want = 0;
            for (int p = 0; p < n; p++)
                want += (double)a[i * P + p] * bm[j * P + p];
            if (c[i * P + j] != (float)want)
                fail_msg("%s %d^3 at %d threads: C(%d,%d) = %g, expected %g", what, n, threads, i, j,
                         c[i * P + j], want);
        }
}

static void check_exact(const char *what, SgemmFn *g, int threads)
{
    check_exact_n(what, g, threads, P);
}

/* A library at one BLAS thread a device (the calling thread) and at two
 * (an OpenMP team, as where one device spans two cores); the count goes
 * back to one afterwards. */
static void check_lib(const char *lib)
{
    const char *why = "";
    SgemmFn *g = dev_blas_sgemm_from(lib, &why);
    if (!g) {
        printf("test_blas_sgemm: %s skipped: %s\n", lib, why);
        skip();
    }
    for (int threads = 1; threads <= 2; threads++) {
        dev_blas_sgemm_threads(threads, false);
        check_fn(lib, g);
        check_exact(lib, g, threads);
    }
    dev_blas_sgemm_threads(1, false);
    check_threads(g);
}

/* Two threads (as two devices) at a new shape's first product at once. */
enum { TM = 224, TK = 352, TN = 256 };
static float once_a[TM * TK], once_b[TK * TN], once_c[2][TM * TN];
static void *shape_at_once(void *arg)
{
    float *c = arg;
    dev_blas()->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, TM, TN, TK, 1.0f, once_a, TK, once_b, TN, 0.0f, c, TN);
    return NULL;
}

static void probed_sgemm(void **state)
{
    (void)state;
    dev_blas_choose_sgemm(DEV_SGEMM_PROBE);
    const DevBlas *b = dev_blas();
    if (!b) {
        printf("test_blas_sgemm: probe skipped: %s\n", dev_blas_error());
        skip();
    }
    /* As devices that share the cores set it: one BLAS thread each. */
    b->set_num_threads(1);
    dev_blas_sgemm_threads(1, false);
    /* Small products stay in OpenBLAS and measure nothing. */
    check_fn("probe", b->sgemm);
    assert_non_null(strstr(dev_blas_sgemm_verdict(), "openblas: no f32 GEMM of 256^3"));
    /* Told before a run of a program whose GEMMs are all small, or while
     * the BLAS runs several threads a device, the probe measures nothing;
     * told of a 256^3 one at one thread, it measures before any product. */
    dev_blas_sgemm_prepare((int64_t)P * P * P - 1);
    assert_non_null(strstr(dev_blas_sgemm_verdict(), "openblas: no f32 GEMM of 256^3"));
    dev_blas_sgemm_threads(2, false);
    dev_blas_sgemm_prepare((int64_t)P * P * P);
    assert_non_null(strstr(dev_blas_sgemm_verdict(), "openblas: no f32 GEMM of 256^3"));
    dev_blas_sgemm_threads(1, false);
    dev_blas_sgemm_prepare((int64_t)P * P * P);
    assert_non_null(strstr(dev_blas_sgemm_verdict(), ", measured (f32 384^3, one thread): openblas "));
    /* A 256^3 product runs in the library chosen: every element against a
     * double dot of small integers (exact in f32); again where the devices
     * run two BLAS threads each, which the probe measures first (OpenBLAS's
     * pool and OpenMP teams of 2), and at one again, measured again. */
    for (int threads = 2; threads >= 1; threads--) {
        check_exact("probed", b->sgemm, threads);
        /* At 2 threads, products between OpenBLAS's pool threshold (64^3)
         * and 256^3 go to the library chosen there, smaller ones stay in
         * OpenBLAS: both exact. */
        check_exact_n("probed, pool-sized", b->sgemm, threads, 128);
        check_exact_n("probed, small", b->sgemm, threads, 48);
        if (threads > 1) {
            const char *v2 = dev_blas_sgemm_verdict();
            printf("test_blas_sgemm: f32 GEMM at 2 threads: %s\n", v2);
            assert_non_null(strstr(v2, ", measured (f32 512^3, 2 threads): openblas "));
        }
    }
    /* The watch's calls (three per library at most) compute the same. */
    for (int call = 0; call < 3 * SGEMM_LIBS; call++)
        check_exact("watched", b->sgemm, 1);
    const char *v = dev_blas_sgemm_verdict();
    printf("test_blas_sgemm: f32 GEMM: %s\n", v);
    assert_non_null(strstr(v, ", measured (f32 384^3, one thread): openblas "));
    bool named = false;
    for (int i = 0; i < SGEMM_LIBS; i++) {
        static const char *const libs[SGEMM_LIBS] = {"openblas", "blis", "onednn", "avx512"};
        char chose[32], rate[32], skipped[32];
        snprintf(chose, sizeof chose, "%s, measured", libs[i]);
        snprintf(rate, sizeof rate, " %s ", libs[i]);
        snprintf(skipped, sizeof skipped, " %s skipped (", libs[i]);
        named = named || strncmp(v, chose, strlen(chose)) == 0;
        snprintf(chose, sizeof chose, "%s, on the program's calls: ", libs[i]);
        named = named || strncmp(v, chose, strlen(chose)) == 0;
        const char *at = strstr(v, rate);
        assert_non_null(at);
        assert_true(strstr(at, "GFLOP/s") || strstr(v, skipped));
    }
    assert_true(named);
    assert_non_null(strstr(v, "; under 256^3 multiply-adds: openblas"));
    /* At one thread the 256^3 product's shape got its own library, timed
     * on it (where two libraries were present to time). */
    int cand[2];
    if (sgemm_shapes_candidates((double[]){strstr(v, " openblas ") && strstr(v, " openblas skipped") == NULL,
                                           strstr(v, " blis ") && strstr(v, " blis skipped") == NULL,
                                           strstr(v, " onednn ") && strstr(v, " onednn skipped") == NULL,
                                           strstr(v, " avx512 ") && strstr(v, " avx512 skipped") == NULL},
                                cand) == 2) {
        assert_non_null(strstr(v, "; per product shape (M x K x N: GFLOP/s in thread CPU time): 256x256x256 B^T "));
        assert_true(dev_blas_sgemm_shapes() >= 1);
    }
    /* A new shape's products, of values that round differently in each
     * library, have one library's bits every time: the first product is
     * computed after its shape's library is chosen. */
    enum { SM = 192, SK = 320, SN = 288 };
    static float sa[SM * SK], sb[SK * SN], c1[SM * SN], c2[SM * SN];
    for (int i = 0; i < SM * SK; i++)
        sa[i] = sinf((float)i * 0.37f);
    for (int i = 0; i < SK * SN; i++)
        sb[i] = cosf((float)i * 0.11f);
    b->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SM, SN, SK, 1.0f, sa, SK, sb, SN, 0.0f, c1, SN);
    for (int round = 0; round < 3; round++) {
        b->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SM, SN, SK, 1.0f, sa, SK, sb, SN, 0.0f, c2, SN);
        assert_memory_equal(c1, c2, sizeof c1);
    }
    /* ... and a column-major call of the same product (C^T = B^T A^T) is
     * the same row-major shape: the same library, the same bits. */
    static float c3[SM * SN];
    b->sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, SN, SM, SK, 1.0f, sb, SN, sa, SK, 0.0f, c3, SN);
    assert_memory_equal(c1, c3, sizeof c1);
    /* Two devices that reach a new shape together time it together and
     * compute it in the one library the first to finish chose: the same
     * bits in both, and in a later product. */
    for (int i = 0; i < TM * TK; i++)
        once_a[i] = sinf((float)i * 0.29f);
    for (int i = 0; i < TK * TN; i++)
        once_b[i] = cosf((float)i * 0.13f);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, shape_at_once, once_c[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_memory_equal(once_c[0], once_c[1], sizeof once_c[0]);
    shape_at_once(once_c[1]);
    assert_memory_equal(once_c[0], once_c[1], sizeof once_c[0]);
    /* A shape told before its first product (as a run tells its plain
     * matrix dots before its clock starts) is chosen then; one under 256^3
     * multiply-adds is not. */
    int before = dev_blas_sgemm_shapes();
    dev_blas_sgemm_prepare_shape(true, false, 320, 288, 200, false, 1);
    dev_blas_sgemm_prepare_shape(false, false, 64, 64, 64, true, 2);
    if (before > 0) {
        assert_int_equal(dev_blas_sgemm_shapes(), before + 1);
        assert_non_null(strstr(dev_blas_sgemm_verdict(), ", 320x200x288 A^T "));
        assert_null(strstr(dev_blas_sgemm_verdict(), "64x64x64"));
    }
    /* A kept weight's shape on two devices is timed in the program's form:
     * B packed once where a candidate keeps it (tessel's kernel always,
     * oneDNN up to 512 rows summing 1024 or more), a second thread's
     * product beside each timed call; the verdict says both. */
    dev_blas_sgemm_prepare_shape(false, false, 256, 512, 1024, true, 2);
    if (before > 0) {
        const char *pv = dev_blas_sgemm_verdict();
        printf("test_blas_sgemm: %s\n", pv);
        const char *kept = strstr(pv, ", 256x1024x512 ");
        assert_int_equal(dev_blas_sgemm_shapes(), before + 2);
        assert_non_null(kept);
        char clause[160];
        snprintf(clause, sizeof clause, "%s", kept);
        char *close = strchr(clause, ')');
        assert_non_null(close);
        close[1] = '\0';
        bool keeps = strstr(clause, "onednn ") || strstr(clause, "avx512 "); /* a candidate that keeps B */
        assert_non_null(strstr(clause, keeps ? "; B kept; beside a second " : "; beside a second "));
        assert_non_null(strstr(clause, " of the time)"));
        assert_true(keeps || !strstr(clause, "B kept"));
    }
}

/* Which kept products packed.c keeps, the form a new shape's kept
 * products are timed in (blas_choice.c). */
static void packed_keeps(void **state)
{
    (void)state;
    assert_true(dev_packed_keeps(DEV_SGEMM_AVX512, 4096, 8, 512));   /* any rows and sums */
    assert_false(dev_packed_keeps(DEV_SGEMM_AVX512, 64, 64, 64));    /* under 256^3 */
    assert_false(dev_packed_keeps(DEV_SGEMM_ONEDNN, 1024, 2048, 1024)); /* over 512 rows */
    assert_false(dev_packed_keeps(DEV_SGEMM_ONEDNN, 512, 2048, 512));   /* a sum under 1024 */
    assert_false(dev_packed_keeps(DEV_SGEMM_OPENBLAS, 512, 2048, 1024));
    assert_true(dev_packed_keeps(DEV_SGEMM_AMX_BF16X3, 512, 2048, 1024));
}

/* The small products' library (blas_small.c): OpenBLAS below 32^3
 * multiply-adds, untimed; from there the faster of OpenBLAS and tessel's
 * kernel, timed once (which one wins is the machine's: not asserted), the
 * same function for every later small product, whose results are the
 * product's (the orders, transposes, alpha and beta against the double
 * loop), and the timing named in the verdict. */
static void naive_sgemm(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                        float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float sum = 0;
            for (int p = 0; p < k; p++)
                sum += (ta == CblasTrans ? at(a, o, lda, p, i) : at(a, o, lda, i, p)) *
                       (tb == CblasTrans ? at(b, o, ldb, j, p) : at(b, o, ldb, p, j));
            float *cij = o == CblasRowMajor ? &c[i * ldc + j] : &c[j * ldc + i];
            *cij = alpha * sum + (beta == 0 ? 0 : beta * *cij);
        }
}

static void small_products(void **state)
{
    (void)state;
    SgemmFn *const cblas_sgemm = naive_sgemm; /* OpenBLAS's stand-in: a plain loop */
    char note[192];
    assert_ptr_equal(dev_blas_sgemm_small(cblas_sgemm, 31 * 32 * 32), cblas_sgemm);
    dev_blas_sgemm_small_note(note, sizeof note);
    assert_string_equal(note, "");
    SgemmFn *f = dev_blas_sgemm_small(cblas_sgemm, 32 * 32 * 32);
    const char *why = NULL;
    SgemmFn *own = dev_sgemm_avx512(cblas_sgemm, &why);
    assert_true(f == cblas_sgemm || (own && f == own));
    assert_ptr_equal(dev_blas_sgemm_small(cblas_sgemm, 64 * 64 * 255), f);
    assert_ptr_equal(dev_blas_sgemm_small(cblas_sgemm, 100), cblas_sgemm);
    check_fn("small", f);
    dev_blas_sgemm_small_note(note, sizeof note);
    printf("test_blas_sgemm: small products: %s\n", note);
    if (own)
        assert_non_null(strstr(note, f == own ? "avx512 (timed on 64x64x256 B^T and 64x256x64: openblas "
                                              : "openblas (timed on 64x64x256 B^T and 64x256x64: openblas "));
    else
        assert_non_null(strstr(note, "openblas (avx512: "));
}

/* The choice per product shape (blas_shapes.c), fed made-up times. */
static void shapes_choose(void **state)
{
    (void)state;
    int cand[2];
    /* The two fastest in the probe, the fastest first; an absent one never. */
    assert_int_equal(sgemm_shapes_candidates((double[]){140e9, 100e9, 150e9, 0}, cand), 2);
    assert_int_equal(cand[0], 2);
    assert_int_equal(cand[1], 0);
    assert_int_equal(sgemm_shapes_candidates((double[]){0, 0, 0, 150e9}, cand), 1);
    assert_int_equal(cand[0], 3);
    assert_int_equal(cand[1], -1);
    static SgemmShapes t; /* zero: empty */
    SgemmShape long_sum = {.m = 512, .n = 1024, .k = 2048}, wide = {.m = 512, .n = 2048, .k = 1024};
    SgemmShape wide_bt = wide;
    wide_bt.tb = true;
    assert_int_equal(sgemm_shapes_find(&t, long_sum), -1);
    /* The smaller time wins; an untimed library (0) never; tessel's own
     * kernel (index 3) keeps a shape timed with B unkept within 12 % of
     * the fastest, not beyond; a shape timed with B kept goes to the
     * fastest. */
    SgemmShape close = {.m = 2048, .n = 1024, .k = 512, .ta = true};
    assert_int_equal(sgemm_shapes_add(&t, close, (double[]){0, 0, 0.0138, 0.0146}, false), 3);
    assert_int_equal(sgemm_shapes_find(&t, close), 3);
    t.n = 0;
    assert_int_equal(sgemm_shapes_add(&t, close, (double[]){0, 0, 0.0138, 0.0146}, true), 2);
    assert_int_equal(sgemm_shapes_find(&t, close), 2);
    assert_true(t.e[0].kept);
    t.n = 0;
    assert_int_equal(sgemm_shapes_add(&t, long_sum, (double[]){0, 0, 0.0128, 0.0146}, false), 2);
    assert_int_equal(sgemm_shapes_add(&t, wide, (double[]){0, 0, 0.0157, 0.0143}, false), 3);
    assert_int_equal(sgemm_shapes_find(&t, long_sum), 2);
    assert_int_equal(sgemm_shapes_find(&t, wide), 3);
    assert_int_equal(sgemm_shapes_find(&t, wide_bt), -1); /* a transpose is another shape */
    assert_int_equal(sgemm_shapes_add(&t, wide_bt, (double[]){0, 0, 0, 0}, false), -1);
    assert_int_equal(t.n, 2);
    assert_false(t.e[0].kept || t.e[0].timed_beside);
    char note[512];
    sgemm_shapes_note(&t, note, sizeof note);
    printf("test_blas_sgemm: %s\n", note);
    assert_non_null(strstr(note, ": 512x2048x1024 onednn (onednn 167.8 avx512 147.1), 512x1024x2048 avx512 (onednn "
                                 "136.8 avx512 150.2)"));
    /* The form a shape was timed in, where it was not the plain call. */
    t.e[0].kept = true;
    t.e[0].timed_beside = true;
    t.e[0].beside = 0.93;
    sgemm_shapes_note(&t, note, sizeof note);
    assert_non_null(
        strstr(note, "512x2048x1024 onednn (onednn 167.8 avx512 147.1; B kept; beside a second 0.93 of the time), "));
    /* A second thread given no core while the calls were timed (a loaded
     * machine) is still said: its share, 0, is what the timing means. */
    t.e[0].kept = false;
    t.e[0].beside = 0;
    sgemm_shapes_note(&t, note, sizeof note);
    assert_non_null(strstr(note, "512x2048x1024 onednn (onednn 167.8 avx512 147.1; beside a second 0.00 of the time), "));
    t.e[0].timed_beside = false;
    /* Truncated quietly, never past the buffer. */
    char small[24];
    sgemm_shapes_note(&t, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
    /* A full table records no more. */
    while (t.n < SHAPE_MAX) {
        SgemmShape s = {.m = 1000 + t.n, .n = 8, .k = 8};
        sgemm_shapes_add(&t, s, (double[]){1, 0, 0, 0}, false);
    }
    SgemmShape late = {.m = 7, .n = 7, .k = 7};
    assert_int_equal(sgemm_shapes_add(&t, late, (double[]){1, 2, 0, 0}, false), 0);
    assert_int_equal(sgemm_shapes_find(&t, late), -1);
}

/* The watch fed `n` calls of `lib` at `gflops` (2e9 FLOPs each, so the
 * seconds are 2 / gflops); returns what the last record returned. */
static bool feed(SgemmWatch *w, int lib, int n, double gflops)
{
    bool done = false;
    for (int i = 0; i < n; i++)
        done = sgemm_watch_record(w, lib, 2e9, 2.0 / gflops);
    return done;
}

enum { OPENBLAS, BLIS, ONEDNN };

static void watch_holds(void **state)
{
    (void)state;
    SgemmWatch w;
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 0}, ONEDNN);
    assert_int_equal(w.use, ONEDNN);
    assert_false(feed(&w, ONEDNN, WATCH_CALLS - 1, 140));
    assert_true(feed(&w, ONEDNN, 1, 140)); /* 0.93 of the probe's */
    assert_int_equal(w.use, ONEDNN);
    assert_int_equal(w.stage, WATCH_DONE);
    assert_string_equal(w.note, "");
    /* Later calls change nothing. */
    assert_true(feed(&w, ONEDNN, 5, 1));
    assert_int_equal(w.use, ONEDNN);
    /* One call of three at a tenth (the first after a switch, paying the
     * other library's spinning): the median holds. */
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 0}, ONEDNN);
    feed(&w, ONEDNN, 1, 15);
    assert_true(feed(&w, ONEDNN, WATCH_CALLS - 1, 150));
    assert_int_equal(w.use, ONEDNN);
    assert_string_equal(w.note, "");
}

static void watch_switches(void **state)
{
    (void)state;
    /* oneDNN chosen at 150, its first calls at 30 (0.2): BLIS (120 in the
     * probe) is tried next, then OpenBLAS; OpenBLAS's calls ran fastest. */
    SgemmWatch w;
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 0}, ONEDNN);
    assert_false(feed(&w, ONEDNN, WATCH_CALLS, 30));
    assert_int_equal(w.stage, WATCH_TRY);
    assert_int_equal(w.use, BLIS);
    /* A oneDNN call that started before the switch is not BLIS's. */
    assert_false(feed(&w, ONEDNN, 1, 500));
    assert_int_equal(w.calls[BLIS], 0);
    assert_false(feed(&w, BLIS, WATCH_CALLS, 80));
    assert_int_equal(w.use, OPENBLAS);
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 100));
    assert_int_equal(w.use, OPENBLAS);
    assert_int_equal(w.stage, WATCH_DONE);
    assert_true(fabs(sgemm_watch_median(&w, ONEDNN) - 30e9) < 1e3);
    assert_string_equal(w.note, "; onednn's first 3 calls ran 30.0 GFLOP/s (0.20 of its probe), then openblas "
                                "100.0 blis 80.0: openblas");
    /* Slow everywhere (a loaded machine): the chosen one keeps the calls
     * when the others ran slower still. */
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 0}, ONEDNN);
    feed(&w, ONEDNN, WATCH_CALLS, 40);
    feed(&w, BLIS, WATCH_CALLS, 10);
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 35));
    assert_int_equal(w.use, ONEDNN);
    assert_non_null(strstr(w.note, ": onednn"));
    /* A library on trial whose call runs under half the best median so
     * far is out after one call. */
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 0}, ONEDNN);
    feed(&w, ONEDNN, WATCH_CALLS, 40);
    assert_int_equal(w.use, BLIS);
    assert_false(feed(&w, BLIS, 1, 19));
    assert_int_equal(w.calls[BLIS], 1);
    assert_int_equal(w.use, OPENBLAS);
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 35));
    assert_int_equal(w.use, ONEDNN);
    assert_string_equal(w.note, "; onednn's first 3 calls ran 40.0 GFLOP/s (0.27 of its probe), then openblas "
                                "35.0 blis 19.0 (cut short): onednn");
    /* A library the probe could not load is never tried. */
    sgemm_watch_start(&w, (double[]){100e9, 0, 150e9, 0}, ONEDNN);
    feed(&w, ONEDNN, WATCH_CALLS, 30);
    assert_int_equal(w.use, OPENBLAS);
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 90));
    assert_int_equal(w.calls[BLIS], 0);
    assert_int_equal(w.use, OPENBLAS);
    /* tessel's own kernel (index 3) is tried like the libraries, by its
     * probe's rate: first here, and it keeps the calls. */
    sgemm_watch_start(&w, (double[]){100e9, 120e9, 150e9, 140e9}, ONEDNN);
    feed(&w, ONEDNN, WATCH_CALLS, 30);
    assert_int_equal(w.use, 3);
    assert_false(feed(&w, 3, WATCH_CALLS, 130));
    assert_int_equal(w.use, BLIS);
    assert_false(feed(&w, BLIS, WATCH_CALLS, 90));
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 80));
    assert_int_equal(w.use, 3);
    assert_string_equal(w.note, "; onednn's first 3 calls ran 30.0 GFLOP/s (0.20 of its probe), then openblas "
                                "80.0 blis 90.0 avx512 130.0: avx512");
    /* The only library present: slow, tried nowhere else, kept. */
    sgemm_watch_start(&w, (double[]){100e9, 0, 0, 0}, OPENBLAS);
    assert_true(feed(&w, OPENBLAS, WATCH_CALLS, 10));
    assert_int_equal(w.use, OPENBLAS);
}

static void blis_sgemm(void **state)
{
    (void)state;
    check_lib("blis");
}

static void onednn_sgemm(void **state)
{
    (void)state;
    check_lib("onednn");
}

static void unknown_library(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_null(dev_blas_sgemm_from("mkl", &why));
    assert_non_null(strstr(why, "openblas, blis or onednn"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_products), /* first: its timing is once a process, before any probe */
        cmocka_unit_test(probed_sgemm),
        cmocka_unit_test(shapes_choose),
        cmocka_unit_test(packed_keeps),
        cmocka_unit_test(watch_holds),
        cmocka_unit_test(watch_switches),
        cmocka_unit_test(blis_sgemm),
        cmocka_unit_test(onednn_sgemm),
        cmocka_unit_test(unknown_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
