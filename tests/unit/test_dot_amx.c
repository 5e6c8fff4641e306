/*
 * test_dot_amx.c: dots under `--sgemm amx-bf16x3`: weights kept as AMX's
 * bf16 copies across steps (device/packed.c with sgemm_amx.c's
 * dev_sgemm_amx_pack_b), through dev_execute as the runtime calls it step
 * after step with DevExecOptions.packed, and dots that ask for full
 * precision computed in f32.
 *
 * The AMX GEMM is fixed (dev_blas_choose_sgemm, before the library
 * loads); on a CPU without AMX every test is skipped, saying so. dot(x, w)
 * and dot(x, v^T) on parameters, 64 x 1024 x 256 (the fewest
 * multiply-adds packed), 3 steps with a new x each: each result has the
 * bits of the same product unkept (dev_sgemm_amx_rowmajor: the kept
 * copies are the ones a call makes) and is within 2^-14 of the sum of
 * |x w| of a double loop; both weights kept at the first step, all 6
 * products run from them. Kept where oneDNN's packing is not: 1024 rows.
 * Not kept: a donated w; its product is still right. A dot with
 * operand_precision={highest,highest} has OpenBLAS's bits (f32's own
 * product; kept or not), its neighbour without them AMX's, and the two
 * differ (so the check can fail).
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
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static const char *dots(char *buf, size_t len, int64_t m, int64_t k, int64_t n)
{
    snprintf(buf, len,
             "HloModule dots\n"
             "ENTRY e {\n"
             "  x = f32[%lld,%lld] parameter(0)\n"
             "  w = f32[%lld,%lld] parameter(1)\n"
             "  v = f32[%lld,%lld] parameter(2)\n"
             "  a = f32[%lld,%lld] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
             "  b = f32[%lld,%lld] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
             "  ROOT t = (f32[%lld,%lld], f32[%lld,%lld]) tuple(a, b)\n"
             "}\n",
             (long long)m, (long long)k, (long long)k, (long long)n, (long long)n, (long long)k, (long long)m,
             (long long)n, (long long)m, (long long)n, (long long)m, (long long)n, (long long)m, (long long)n);
    return buf;
}

/* got: the unkept product's bits, and within 2^-14 of sum |x w|. */
static void expect_product(const DevValue *got, const DevValue *x, const DevValue *w, bool tb, int64_t m,
                           int64_t k, int64_t n)
{
    const float *xa = (const float *)x->data, *wa = (const float *)w->data, *g = (const float *)got->data;
    float *same = malloc((size_t)(m * n) * sizeof *same);
    assert_non_null(same);
    assert_true(dev_sgemm_amx_rowmajor(false, tb, m, n, k, 1, xa, k, wa, tb ? k : n, 0, same, n));
    assert_memory_equal(g, same, (size_t)(m * n) * sizeof *same);
    free(same);
    for (int64_t i = 0; i < m; i += 7)
        for (int64_t j = 0; j < n; j += 5) {
            double s = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                double p = (double)xa[i * k + q] * (tb ? wa[j * k + q] : wa[q * n + j]);
                s += p;
                mag += fabs(p);
            }
            assert_true(fabs((double)g[i * n + j] - s) <= mag * 0x1p-14);
        }
}

static bool amx_or_skip(void)
{
    const char *why = "";
    if (!dev_blas() || !dev_sgemm_amx(dev_blas()->sgemm, &why)) {
        print_message("skipped: %s\n", why);
        return false;
    }
    assert_int_equal(dev_blas_sgemm_current(), DEV_SGEMM_AMX_BF16X3);
    return true;
}

/* steps of the module on new x each, the weights kept (or, donated, not). */
static void run_steps(int64_t m, int64_t k, int64_t n, bool donate, int32_t want_weights)
{
    char txt[1024];
    IrModule *mod = parse_ok(dots(txt, sizeof txt, m, k, n));
    DevValue *args[3] = {f32_uniform(m, k, &rng), f32_uniform(k, n, &rng), f32_uniform(n, k, &rng)};
    bool donated[3] = {false, donate, false};
    DevExecOptions opt = {.packed = dev_packed_new(), .donated = donate ? donated : NULL, .ndonated = donate ? 3 : 0};
    assert_non_null(opt.packed);
    int32_t weights;
    size_t bytes;
    int64_t runs;
    for (int s = 0; s < 3; s++) {
        if (s > 0)
            fill_uniform(args[0], &rng);
        DevValue *in[3] = {args[0], donate ? dev_value_ref(args[1]) : args[1], args[2]};
        DevValue *out = NULL;
        IrDiag d = {0};
        assert_int_equal(dev_execute(mod, mod->entry, 3, in, &opt, &out, &d), IR_OK);
        expect_product(out->elems[0], args[0], args[1], false, m, k, n);
        expect_product(out->elems[1], args[0], args[2], true, m, k, n);
        dev_value_unref(out);
        dev_packed_stats(opt.packed, &weights, &bytes, &runs);
        assert_int_equal(weights, want_weights);
        assert_int_equal(runs, want_weights * (s + 1));
        assert_true(bytes >= (size_t)(weights * k * n) * 4);
    }
    dev_packed_free(opt.packed);
    for (int i = 0; i < 3; i++)
        dev_value_unref(args[i]);
    ir_module_free(mod);
}

static void kept_across_steps(void **state)
{
    (void)state;
    if (!amx_or_skip())
        skip();
    run_steps(64, 1024, 256, false, 2);
    run_steps(1024, 256, 64, false, 2); /* 1024 rows: oneDNN's packing would not keep them */
}

static void donated_not_kept(void **state)
{
    (void)state;
    if (!amx_or_skip())
        skip();
    run_steps(64, 1024, 256, true, 1); /* v kept, the donated w not */
}

static void highest_is_f32(void **state)
{
    (void)state;
    if (!amx_or_skip())
        skip();
    enum { M = 64, K = 1024, N = 256 };
    IrModule *mod = parse_ok("HloModule p\n"
                             "ENTRY e {\n"
                             "  x = f32[64,1024] parameter(0)\n"
                             "  w = f32[1024,256] parameter(1)\n"
                             "  v = f32[1024,256] parameter(2)\n"
                             "  a = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                             "operand_precision={highest,highest}\n"
                             "  b = f32[64,256] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                             "  ROOT t = (f32[64,256], f32[64,256]) tuple(a, b)\n"
                             "}\n");
    DevValue *args[3] = {f32_uniform(M, K, &rng), f32_uniform(K, N, &rng), f32_uniform(K, N, &rng)};
    static float f32w[M * N], amxv[M * N];
    const float *x = (const float *)args[0]->data;
    dev_blas_sgemm_exact()(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, x, K,
                           (const float *)args[1]->data, N, 0, f32w, N);
    assert_true(dev_sgemm_amx_rowmajor(false, false, M, N, K, 1, x, K, (const float *)args[2]->data, N, 0, amxv, N));
    for (int kept = 0; kept < 2; kept++) {
        DevExecOptions opt = {.packed = kept ? dev_packed_new() : NULL};
        for (int s = 0; s < 2; s++) {
            DevValue *out = NULL;
            IrDiag d = {0};
            assert_int_equal(dev_execute(mod, mod->entry, 3, args, &opt, &out, &d), IR_OK);
            assert_memory_equal(out->elems[0]->data, f32w, sizeof f32w);
            assert_memory_equal(out->elems[1]->data, amxv, sizeof amxv);
            dev_value_unref(out);
        }
        dev_packed_free(opt.packed);
    }
    /* the same product of x and v in f32 differs from AMX's somewhere */
    dev_blas_sgemm_exact()(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, x, K,
                           (const float *)args[2]->data, N, 0, f32w, N);
    assert_true(memcmp(f32w, amxv, sizeof f32w) != 0);
    for (int i = 0; i < 3; i++)
        dev_value_unref(args[i]);
    ir_module_free(mod);
}

int main(void)
{
    /* Before the library loads: only the first word counts. */
    dev_blas_choose_sgemm(DEV_SGEMM_AMX_BF16X3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kept_across_steps),
        cmocka_unit_test(donated_not_kept),
        cmocka_unit_test(highest_is_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
