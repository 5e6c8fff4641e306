/*
 * test_packed.c: f32 weights packed once for oneDNN's matmul and kept
 * across steps (device/packed.c, blas_sgemm.c's dev_sgemm_pack), through
 * dev_execute as the runtime calls it step after step with
 * DevExecOptions.packed (runtime/local.c).
 *
 * oneDNN is fixed as the f32 GEMM (dev_blas_choose_sgemm, before the
 * library loads); where libdnnl.so.2 is not installed every test is
 * skipped, saying so. Products of 64 x 1024 x 256 (256^3 multiply-adds,
 * the fewest packed) against a triple loop in double computed here:
 * - dot(x, w) and dot(x, v^T) (rhs_contracting_dims={1}) on parameters
 *   w and v, 3 steps with a new x each: each result within 1e-5 of the
 *   loop's largest magnitude; both weights packed at the first step
 *   (2 kept), every product of the 3 steps run from them (6); a w that
 *   is another value at step 4 (new values) is packed anew and its
 *   product is the new one's;
 * - not packed: a donated w (the executor may hand its buffer to an
 *   output), a B that is computed (negate(w)), a product under 256^3,
 *   one summing over fewer than 1024, one of more than 512 rows, and
 *   without DevExecOptions.packed; their results are the loop's too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/blas.h"
#include "device/device.h"
#include "kernel_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { M = 64, K = 1024, N = 256 };

static const char *const TWO_DOTS =
    "HloModule two_dots\n"
    "ENTRY e {\n"
    "  x = f32[64,1024] parameter(0)\n"
    "  w = f32[1024,256] parameter(1)\n"
    "  v = f32[256,1024] parameter(2)\n"
    "  a = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  b = f32[64,256] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
    "  ROOT t = (f32[64,256], f32[64,256]) tuple(a, b)\n"
    "}\n";

static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* got[m,n] against x[m,k] times w (k x n, or n x k when tb) in double. */
static void expect_product(const DevValue *got, const DevValue *x, const DevValue *w, bool tb, int64_t m,
                           int64_t k, int64_t n)
{
    const float *xa = (const float *)x->data, *wa = (const float *)w->data, *g = (const float *)got->data;
    double *want = malloc((size_t)(m * n) * sizeof *want), scale = 1e-30, err = 0;
    assert_non_null(want);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t q = 0; q < k; q++)
                s += (double)xa[i * k + q] * (tb ? wa[j * k + q] : wa[q * n + j]);
            want[i * n + j] = s;
            scale = fmax(scale, fabs(s));
        }
    for (int64_t i = 0; i < m * n; i++)
        err = fmax(err, fabs((double)g[i] - want[i]));
    free(want);
    assert_true(err <= 1e-5 * scale);
}

static bool onednn_or_skip(void)
{
    const char *why = "";
    if (!dev_blas_sgemm_from("onednn", &why)) {
        print_message("skipped: %s\n", why);
        return false;
    }
    assert_int_equal(dev_blas_sgemm_current(), DEV_SGEMM_ONEDNN);
    return true;
}

static DevValue *step(const IrModule *m, int32_t n, DevValue **args, const DevExecOptions *opt)
{
    DevValue *out = NULL;
    IrDiag d = {0};
    IrStatus st = dev_execute(m, m->entry, n, args, opt, &out, &d);
    if (st != IR_OK)
        print_message("run failed: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    return out;
}

static void kept_across_steps(void **state)
{
    (void)state;
    if (!onednn_or_skip())
        skip();
    IrModule *m = parse_ok(TWO_DOTS);
    DevValue *args[3] = {f32_uniform(M, K, &rng), f32_uniform(K, N, &rng), f32_uniform(N, K, &rng)};
    DevExecOptions opt = {.packed = dev_packed_new()};
    assert_non_null(opt.packed);
    int32_t weights;
    size_t bytes;
    int64_t runs;
    for (int s = 0; s < 4; s++) {
        if (s > 0)
            fill_uniform(args[0], &rng); /* a new x every step: A is never kept */
        if (s == 3) {      /* another w: a new key, packed anew */
            dev_value_unref(args[1]);
            args[1] = f32_uniform(K, N, &rng);
        }
        DevValue *r = step(m, 3, args, &opt);
        expect_product(r->elems[0], args[0], args[1], false, M, K, N);
        expect_product(r->elems[1], args[0], args[2], true, M, K, N);
        dev_value_unref(r);
        dev_packed_stats(opt.packed, &weights, &bytes, &runs);
        assert_int_equal(weights, s < 3 ? 2 : 3);
        assert_int_equal(runs, 2 * (s + 1));
        assert_true(bytes >= (size_t)weights * K * N * sizeof(float));
    }
    dev_packed_free(opt.packed);
    for (int i = 0; i < 3; i++)
        dev_value_unref(args[i]);
    ir_module_free(m);
}

/* The module's products, run twice with opt: packed none of them. */
static void not_packed(const char *txt, int64_t m_, int64_t k_, int64_t n_, bool donate, bool with_cache)
{
    IrModule *m = parse_ok(txt);
    DevValue *x = f32_uniform(m_, k_, &rng), *w = f32_uniform(k_, n_, &rng);
    bool donated[2] = {false, donate};
    DevExecOptions opt = {.packed = with_cache ? dev_packed_new() : NULL,
                          .donated = donate ? donated : NULL,
                          .ndonated = donate ? 2 : 0};
    for (int s = 0; s < 2; s++) {
        DevValue *args[2] = {x, donate ? dev_value_ref(w) : w};
        DevValue *r = step(m, 2, args, &opt);
        if (strstr(txt, "negate"))
            for (int64_t i = 0; i < dev_value_elements(r); i++) /* x (-w) = -(x w) */
                ((float *)r->data)[i] = -((float *)r->data)[i];
        expect_product(r, x, w, false, m_, k_, n_);
        dev_value_unref(r);
    }
    int32_t weights;
    size_t bytes;
    int64_t runs;
    dev_packed_stats(opt.packed, &weights, &bytes, &runs);
    assert_int_equal(weights, 0);
    assert_int_equal(runs, 0);
    dev_packed_free(opt.packed);
    dev_value_unref(x);
    dev_value_unref(w);
    ir_module_free(m);
}

static void not_packed_cases(void **state)
{
    (void)state;
    if (!onednn_or_skip())
        skip();
    const char *plain = "HloModule p\n"
                        "ENTRY e {\n"
                        "  x = f32[64,1024] parameter(0)\n"
                        "  w = f32[1024,256] parameter(1)\n"
                        "  ROOT a = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                        "}\n";
    const char *computed = "HloModule c\n"
                           "ENTRY e {\n"
                           "  x = f32[64,1024] parameter(0)\n"
                           "  w = f32[1024,256] parameter(1)\n"
                           "  n = f32[1024,256] negate(w)\n"
                           "  ROOT a = f32[64,256] dot(x, n), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                           "}\n";
    const char *small = "HloModule s\n"
                        "ENTRY e {\n"
                        "  x = f32[32,1024] parameter(0)\n"
                        "  w = f32[1024,256] parameter(1)\n"
                        "  ROOT a = f32[32,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                        "}\n";
    const char *short_sum = "HloModule k\n"
                            "ENTRY e {\n"
                            "  x = f32[64,512] parameter(0)\n"
                            "  w = f32[512,512] parameter(1)\n"
                            "  ROOT a = f32[64,512] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                            "}\n";
    const char *tall = "HloModule t\n"
                       "ENTRY e {\n"
                       "  x = f32[1024,1024] parameter(0)\n"
                       "  w = f32[1024,16] parameter(1)\n"
                       "  ROOT a = f32[1024,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                       "}\n";
    not_packed(plain, M, K, N, true, true);      /* donated */
    not_packed(computed, M, K, N, false, true);  /* B computed in the step */
    not_packed(small, 32, K, N, false, true);    /* under 256^3 */
    not_packed(short_sum, 64, 512, 512, false, true); /* a sum under 1024 */
    not_packed(tall, 1024, 1024, 16, false, true);    /* over 512 rows */
    not_packed(plain, M, K, N, false, false);    /* no DevExecOptions.packed */
}

int main(void)
{
    /* Before the library loads: only the first word counts. */
    dev_blas_choose_sgemm(DEV_SGEMM_ONEDNN);
    dev_blas_sgemm_threads(1, false);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kept_across_steps),
        cmocka_unit_test(not_packed_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
