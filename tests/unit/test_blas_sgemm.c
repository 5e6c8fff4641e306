/*
 * test_blas_sgemm.c: the f32 GEMM of BLIS and oneDNN behind cblas_sgemm's
 * signature (device/blas_sgemm.c), the library a build can choose for
 * tessel's dots (TESSEL_SGEMM).
 *
 * Every order (row- and column-major) and transpose of both operands, with
 * leading dimensions wider than the matrices, alpha and beta not 1 and 0,
 * against a triple loop in double computed here from cblas's definition:
 * C = alpha op(A) op(B) + beta C, element (i, j) of a matrix stored with
 * leading dimension ld at [i * ld + j] row-major, [j * ld + i] column-major.
 * A library that is not installed (bench/setup.sh installs both) is
 * skipped, saying so.
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

static void check_lib(const char *lib)
{
    const char *why = "";
    SgemmFn *g = dev_blas_sgemm_from(lib, &why);
    if (!g) {
        printf("test_blas_sgemm: %s skipped: %s\n", lib, why);
        skip();
    }
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
        cmocka_unit_test(blis_sgemm),
        cmocka_unit_test(onednn_sgemm),
        cmocka_unit_test(unknown_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
