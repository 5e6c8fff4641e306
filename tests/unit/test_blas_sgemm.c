/*
 * test_blas_sgemm.c: the f32 GEMM of BLIS and oneDNN behind cblas_sgemm's
 * signature (device/blas_sgemm.c), and the probe that chooses among them
 * and OpenBLAS for tessel's dots (device/blas_choice.c).
 *
 * Every order (row- and column-major) and transpose of both operands, with
 * leading dimensions wider than the matrices, alpha and beta not 1 and 0,
 * against a triple loop in double computed here from cblas's definition:
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
 * transposes, and a 256^3 product of small integers exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { M = 5, N = 7, K = 3, LD = 11 };

/* Element (i, j) of a matrix stored with leading dimension ld. */
static float at(const float *x, enum CBLAS_ORDER o, int ld, int i, int j)
{
    return o == CblasRowMajor ? x[i * ld + j] : x[j * ld + i];
}

static void check_fn(const char *lib, SgemmFn *g)
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
                g(o, ts[ai], ts[bi], M, N, K, 1.5f, a, LD, b, LD, 0.5f, c, LD);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double want = 0.5 * at(c0, o, LD, i, j);
                        for (int p = 0; p < K; p++) {
                            double x = ai ? at(a, o, LD, p, i) : at(a, o, LD, i, p);
                            double y = bi ? at(b, o, LD, j, p) : at(b, o, LD, p, j);
                            want += 1.5 * x * y;
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

enum { P = 256 };

/* A P^3 product of small integers (exact in f32: every element equal to a
 * double dot), B transposed, through g at `threads` BLAS threads a device. */
static void check_exact(const char *what, SgemmFn *g, int threads)
{
    static float a[P * P], bm[P * P], c[P * P];
    for (int i = 0; i < P * P; i++) {
        a[i] = (float)((i * 7) % 13 - 6);
        bm[i] = (float)((i * 5) % 11 - 5);
    }
    dev_blas_sgemm_threads(threads, false);
    memset(c, 0, sizeof c);
    g(CblasRowMajor, CblasNoTrans, CblasTrans, P, P, P, 1.0f, a, P, bm, P, 0.0f, c, P);
    for (int i = 0; i < P; i++)
        for (int j = 0; j < P; j++) {
            double want = 0;
            for (int p = 0; p < P; p++)
                want += (double)a[i * P + p] * bm[j * P + p];
            if (c[i * P + j] != (float)want)
                fail_msg("%s %d^3 at %d threads: C(%d,%d) = %g, expected %g", what, P, threads, i, j,
                         c[i * P + j], want);
        }
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
        if (threads > 1) {
            const char *v2 = dev_blas_sgemm_verdict();
            printf("test_blas_sgemm: f32 GEMM at 2 threads: %s\n", v2);
            assert_non_null(strstr(v2, ", measured (f32 512^3, 2 threads): openblas "));
        }
    }
    const char *v = dev_blas_sgemm_verdict();
    printf("test_blas_sgemm: f32 GEMM: %s\n", v);
    assert_non_null(strstr(v, ", measured (f32 384^3, one thread): openblas "));
    bool named = false;
    for (int i = 0; i < 3; i++) {
        static const char *const libs[3] = {"openblas", "blis", "onednn"};
        char chose[32], rate[32], skipped[32];
        snprintf(chose, sizeof chose, "%s, measured", libs[i]);
        snprintf(rate, sizeof rate, " %s ", libs[i]);
        snprintf(skipped, sizeof skipped, " %s skipped (", libs[i]);
        named = named || strncmp(v, chose, strlen(chose)) == 0;
        const char *at = strstr(v, rate);
        assert_non_null(at);
        assert_true(strstr(at, "GFLOP/s") || strstr(v, skipped));
    }
    assert_true(named);
    assert_non_null(strstr(v, "; under 256^3 multiply-adds: openblas"));
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
        cmocka_unit_test(probed_sgemm),
        cmocka_unit_test(blis_sgemm),
        cmocka_unit_test(onednn_sgemm),
        cmocka_unit_test(unknown_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
