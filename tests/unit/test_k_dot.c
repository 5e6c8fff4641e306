/*
 * test_k_dot.c: the dot and convolution kernels (device/k_dot.c, device/k_conv.c), run as
 * HLO text through dev_execute.
 *
 * Expected values are worked out by hand in comments, or computed here by
 * independent naive formulas (a triple loop for dot; XLA's evaluator rule,
 * one output element at a time, for convolution) and compared with both
 * the OpenBLAS path and the loop path (DevExecOptions.no_blas).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/device.h"
#include "kernel_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* exec_module with the choice of the BLAS or the loop path. */
static IrStatus exec_dot(const IrModule *m, int n, DevValue **args, bool no_blas, DevValue **out,
                        IrDiag *d)
{
    DevExecOptions opt = {0};
    opt.no_blas = no_blas;
    return dev_execute(m, m->entry, n, args, &opt, out, d);
}

/* Parse, run with opt, and return the result (asserting success). */
static DevValue *run_with(const char *txt, int n, DevValue **args, DevExecOptions opt)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = dev_execute(m, m->entry, n, args, &opt, &out, &d);
    if (st != IR_OK)
        print_message("run failed: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    ir_module_free(m);
    return out;
}

/* Parse, run, and return the result (asserting success). */
static DevValue *run(const char *txt, int n, DevValue **args, bool no_blas)
{
    return run_with(txt, n, args, (DevExecOptions){.no_blas = no_blas});
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1p-53 * 2 - 1;
}

static void fill_f32(DevValue *v)
{
    for (int64_t i = 0; i < dev_value_elements(v); i++)
        ((float *)v->data)[i] = (float)rnd();
}

static void fill_f64(DevValue *v)
{
    for (int64_t i = 0; i < dev_value_elements(v); i++)
        ((double *)v->data)[i] = rnd();
}

/* Every element of a float result (as double) close to want[]. */
static void expect_near(const DevValue *v, const double *want, int64_t n, double rel)
{
    assert_int_equal(dev_value_elements(v), n);
    double scale = 1e-30;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double got = dev_load_f64(v->shape.type, v->data, i);
        if (!(fabs(got - want[i]) <= rel * scale)) {
            print_message("element %lld: got %.9g want %.9g\n", (long long)i, got, want[i]);
            fail();
        }
    }
}

static void expect_f32(const DevValue *v, const float *want, int64_t n)
{
    assert_int_equal(v->shape.type, IR_F32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(((const float *)v->data)[i], want[i], 0);
}

/* ------------------------------------------------------------------ */
/* dot                                                                 */
/* ------------------------------------------------------------------ */

static const char *DOT_2x3x2 =
    "HloModule m\n"
    "ENTRY e {\n"
    "  a = f32[2,3] parameter(0)\n"
    "  b = f32[3,2] parameter(1)\n"
    "  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

/* {{1,2,3},{4,5,6}} x {{1,2},{3,4},{5,6}} = {{22,28},{49,64}}
 * (1+6+15, 2+8+18, 4+15+30, 8+20+36). */
static void test_dot_hand(void **state)
{
    (void)state;
    float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 3, 4, 5, 6}, want[] = {22, 28, 49, 64};
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){2, 3}, a), val(IR_F32, 2, (int64_t[]){3, 2}, b)};
        DevValue *r = run(DOT_2x3x2, 2, args, no_blas);
        expect_f32(r, want, 4);
        dev_value_unref(r);
        dev_value_unref(args[0]);
        dev_value_unref(args[1]);
    }
}

/* Random odd sizes against a naive triple loop in double, both paths, and
 * the two paths against each other. f32 and f64. */
static void dot_random_case(IrType t, int64_t m, int64_t k, int64_t n)
{
    char txt[512];
    const char *tn = ir_type_name(t);
    snprintf(txt, sizeof txt,
             "HloModule m\nENTRY e {\n  a = %s[%lld,%lld] parameter(0)\n  b = %s[%lld,%lld] parameter(1)\n"
             "  ROOT d = %s[%lld,%lld] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
             tn, (long long)m, (long long)k, tn, (long long)k, (long long)n, tn, (long long)m,
             (long long)n);
    DevValue *args[2] = {val(t, 2, (int64_t[]){m, k}, NULL), val(t, 2, (int64_t[]){k, n}, NULL)};
    if (t == IR_F32) {
        fill_f32(args[0]);
        fill_f32(args[1]);
    } else {
        fill_f64(args[0]);
        fill_f64(args[1]);
    }
    double *want = calloc((size_t)(m * n), sizeof *want);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t x = 0; x < k; x++)
                want[i * n + j] += dev_load_f64(t, args[0]->data, i * k + x) *
                                   dev_load_f64(t, args[1]->data, x * n + j);
    double tol = t == IR_F32 ? 1e-5 : 1e-12;
    DevValue *blas = run(txt, 2, args, false), *loops = run(txt, 2, args, true);
    expect_near(blas, want, m * n, tol);
    expect_near(loops, want, m * n, tol);
    for (int64_t i = 0; i < m * n; i++)
        want[i] = dev_load_f64(t, blas->data, i);
    expect_near(loops, want, m * n, tol);
    free(want);
    dev_value_unref(blas);
    dev_value_unref(loops);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

static void test_dot_random_odd(void **state)
{
    (void)state;
    dot_random_case(IR_F32, 7, 13, 5);
    dot_random_case(IR_F32, 1, 31, 9);
    dot_random_case(IR_F32, 17, 1, 3);
    dot_random_case(IR_F64, 7, 13, 5);
    dot_random_case(IR_F64, 33, 65, 19);
}

/* Batch dim in the middle of both operands: lhs [3,2,4] (batch dim 1,
 * contracting 2), rhs [4,2,5] (batch 1, contracting 0) -> [2,3,5]:
 *   out[b][i][j] = sum_k lhs[i][b][k] * rhs[k][b][j]. */
static void test_dot_batch_not_leading(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = f32[3,2,4] parameter(0)\n  b = f32[4,2,5] parameter(1)\n"
        "  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={2},"
        " rhs_batch_dims={1}, rhs_contracting_dims={0}\n}\n";
    DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){3, 2, 4}, NULL),
                         val(IR_F32, 3, (int64_t[]){4, 2, 5}, NULL)};
    fill_f32(args[0]);
    fill_f32(args[1]);
    const float *l = (const float *)args[0]->data, *r = (const float *)args[1]->data;
    double want[30] = {0};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++)
                for (int k = 0; k < 4; k++)
                    want[(b * 3 + i) * 5 + j] += (double)l[(i * 2 + b) * 4 + k] * r[(k * 2 + b) * 5 + j];
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *out = run(txt, 2, args, no_blas);
        expect_near(out, want, 30, 1e-5);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* A batched f32 product whose lhs rows are mostly zero (the dense dispatch
 * of a mixture of experts: k_dot.c's gemm_rows multiplies only the other
 * rows): [2, 40, 70] x [2, 70, 20], batch 0 with 3 of 4 rows zero (some
 * -0, one row nonzero only in its last element, one a lone NaN), batch 1
 * all zero. Against a triple loop in double (NaN where it gives NaN),
 * both paths; a zero row's result is +0. Then rhs holding an inf: the
 * zero rows' results are NaN in its column (0 * inf), as the whole
 * product gives. */
static void dot_zero_rows_case(bool inf)
{
    enum { B = 2, M = 40, K = 70, N = 20 };
    const char *txt =
        "HloModule m\nENTRY e {\n  a = f32[2,40,70] parameter(0)\n  b = f32[2,70,20] parameter(1)\n"
        "  ROOT d = f32[2,40,20] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2},"
        " rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n";
    DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){B, M, K}, NULL), val(IR_F32, 3, (int64_t[]){B, K, N}, NULL)};
    fill_f32(args[0]);
    fill_f32(args[1]);
    float *a = (float *)args[0]->data, *bm = (float *)args[1]->data;
    for (int i = 0; i < M; i++)
        for (int x = 0; x < K; x++) {
            if (i % 4 != 1)
                a[i * K + x] = i % 4 == 2 ? -0.0f : 0.0f;
            a[(M + i) * K + x] = 0.0f;
        }
    for (int x = 0; x < K - 1; x++) /* row 5: nonzero only in its last element */
        a[5 * K + x] = 0.0f;
    a[5 * K + K - 1] = 0.5f;
    a[8 * K + 3] = NAN; /* row 8: a lone NaN */
    if (inf)
        bm[7 * N + 4] = INFINITY; /* batch 0, k 7, column 4 */
    double want[B * M * N];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int x = 0; x < K; x++)
                    s += (double)a[(b * M + i) * K + x] * bm[(b * K + x) * N + j];
                want[(b * M + i) * N + j] = s;
            }
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *out = run(txt, 2, args, no_blas);
        const float *got = (const float *)out->data;
        for (int e = 0; e < B * M * N; e++) {
            if (isnan(want[e]) || isnan(got[e])) {
                assert_true(isnan(want[e]) && isnan(got[e]));
                continue;
            }
            if (isinf(want[e]))
                assert_true(got[e] == want[e]);
            else
                assert_true(fabs(got[e] - want[e]) <= 1e-5 * 8);
            if (want[e] == 0 && e / N % M % 4 != 1 && e / N != 5 && e / N != 8)
                assert_false(signbit(got[e])); /* a zero row's result: +0 */
        }
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

static void test_dot_zero_rows(void **state)
{
    (void)state;
    dot_zero_rows_case(false);
    dot_zero_rows_case(true);
}

/* Two contracting dims, listed out of order, and batch dims that are
 * trailing: lhs [4,3,2,5] with batch {3}, contracting {2,0}; rhs
 * [2,6,4,5] with batch {3}, contracting {0,2} -> [5,3,6]:
 *   out[b][i][j] = sum_{x<2,y<4} lhs[y][i][x][b] * rhs[x][j][y][b]. */
static void test_dot_multi_contracting(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = f32[4,3,2,5] parameter(0)\n  b = f32[2,6,4,5] parameter(1)\n"
        "  ROOT d = f32[5,3,6] dot(a, b), lhs_batch_dims={3}, lhs_contracting_dims={2,0},"
        " rhs_batch_dims={3}, rhs_contracting_dims={0,2}\n}\n";
    DevValue *args[2] = {val(IR_F32, 4, (int64_t[]){4, 3, 2, 5}, NULL),
                         val(IR_F32, 4, (int64_t[]){2, 6, 4, 5}, NULL)};
    fill_f32(args[0]);
    fill_f32(args[1]);
    const float *l = (const float *)args[0]->data, *r = (const float *)args[1]->data;
    double want[90] = {0};
    for (int b = 0; b < 5; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 6; j++)
                for (int x = 0; x < 2; x++)
                    for (int y = 0; y < 4; y++)
                        want[(b * 3 + i) * 6 + j] += (double)l[((y * 3 + i) * 2 + x) * 5 + b] *
                                                     r[((x * 6 + j) * 4 + y) * 5 + b];
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *out = run(txt, 2, args, no_blas);
        expect_near(out, want, 90, 1e-5);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Operands already in GEMM order but transposed (used in place with the
 * transpose flags): lhs [13,7] contracting {0}, rhs [5,13] contracting
 * {1}: out[i][j] = sum_k lhs[k][i] * rhs[j][k]. Batch [3] leading too. */
static void test_dot_transposed_in_place(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = f64[3,13,7] parameter(0)\n  b = f64[3,5,13] parameter(1)\n"
        "  ROOT d = f64[3,7,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1},"
        " rhs_batch_dims={0}, rhs_contracting_dims={2}\n}\n";
    DevValue *args[2] = {val(IR_F64, 3, (int64_t[]){3, 13, 7}, NULL),
                         val(IR_F64, 3, (int64_t[]){3, 5, 13}, NULL)};
    fill_f64(args[0]);
    fill_f64(args[1]);
    const double *l = (const double *)args[0]->data, *r = (const double *)args[1]->data;
    double want[105] = {0};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 5; j++)
                for (int k = 0; k < 13; k++)
                    want[(b * 7 + i) * 5 + j] += l[(b * 13 + k) * 7 + i] * r[(b * 5 + j) * 13 + k];
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *out = run(txt, 2, args, no_blas);
        expect_near(out, want, 105, 1e-12);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Integer dots wrap like the narrow type: s32 (2^30 * 2 + 2^30 * 2 =
 * 2^32 -> 0; 2^30*1 + 7*1 = 2^30 + 7) and u8 (200*2 + 100*1 = 500 -> 244). */
static void test_dot_int_wraps(void **state)
{
    (void)state;
    const char *s32 =
        "HloModule m\nENTRY e {\n  a = s32[2,2] parameter(0)\n  b = s32[2,1] parameter(1)\n"
        "  ROOT d = s32[2,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    int32_t a[] = {1 << 30, 1 << 30, 1 << 30, 7}, b[] = {2, 1};
    DevValue *args[2] = {val(IR_S32, 2, (int64_t[]){2, 2}, a), val(IR_S32, 2, (int64_t[]){2, 1}, b)};
    DevValue *r = run(s32, 2, args, false);
    /* row 0: 2^31 + 2^30 = 3*2^30 -> wraps to -2^30; row 1: 2^31 + 7 -> -2^31 + 7 */
    assert_int_equal(((int32_t *)r->data)[0], -(1 << 30));
    assert_int_equal(((int32_t *)r->data)[1], INT32_MIN + 7);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);

    const char *u8 =
        "HloModule m\nENTRY e {\n  a = u8[1,2] parameter(0)\n  b = u8[2] parameter(1)\n"
        "  ROOT d = u8[1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    uint8_t ua[] = {200, 100}, ub[] = {2, 1};
    DevValue *uargs[2] = {val(IR_U8, 2, (int64_t[]){1, 2}, ua), val(IR_U8, 1, (int64_t[]){2}, ub)};
    r = run(u8, 2, uargs, false);
    assert_int_equal(r->data[0], 244);
    dev_value_unref(r);
    dev_value_unref(uargs[0]);
    dev_value_unref(uargs[1]);
}

/* f16 and bf16 accumulate in f32 and round once. f16: 1 + 3 * 2^-11 is
 * halfway between 1+2^-10 (odd mantissa) and 1+2^-9 (even): 0x3c02. Had it
 * summed in f16, each 1 + 2^-11 would round back to 1 (0x3c00).
 * bf16: 1 + 3 * 2^-8 -> halfway between 1+2^-7 and 1+2^-6: 0x3f82. */
static void test_dot_half_accumulates_in_f32(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\nENTRY e {\n  a = %s[1,4] parameter(0)\n  b = %s[4,1] parameter(1)\n"
        "  ROOT d = %s[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    struct { IrType t; uint16_t one, small, want; } c[] = {
        {IR_F16, 0x3c00, 0x1000 /* 2^-11 */, 0x3c02},
        {IR_BF16, 0x3f80, 0x3b80 /* 2^-8 */, 0x3f82},
    };
    for (int i = 0; i < 2; i++)
        for (int no_blas = 0; no_blas < 2; no_blas++) {
            char txt[512];
            const char *tn = ir_type_name(c[i].t);
            snprintf(txt, sizeof txt, fmt, tn, tn, tn);
            uint16_t a[] = {c[i].one, c[i].small, c[i].small, c[i].small};
            uint16_t b[] = {c[i].one, c[i].one, c[i].one, c[i].one};
            DevValue *args[2] = {val(c[i].t, 2, (int64_t[]){1, 4}, a), val(c[i].t, 2, (int64_t[]){4, 1}, b)};
            DevValue *r = run(txt, 2, args, no_blas);
            assert_int_equal(((uint16_t *)r->data)[0], c[i].want);
            dev_value_unref(r);
            dev_value_unref(args[0]);
            dev_value_unref(args[1]);
        }
}

/* pred dot: OR over k of AND. {{1,0},{0,0}} x {{0,1},{1,0}} =
 * {{0,1},{0,0}}. */
static void test_dot_pred(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = pred[2,2] parameter(0)\n  b = pred[2,2] parameter(1)\n"
        "  ROOT d = pred[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    uint8_t a[] = {1, 0, 0, 0}, b[] = {0, 1, 1, 0}, want[] = {0, 1, 0, 0};
    DevValue *args[2] = {val(IR_PRED, 2, (int64_t[]){2, 2}, a), val(IR_PRED, 2, (int64_t[]){2, 2}, b)};
    DevValue *r = run(txt, 2, args, false);
    assert_memory_equal(r->data, want, 4);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* c64: (1+2i)(3+4i) + (0+1i)(0+1i) = (3-8 + (4+6)i) + (-1) = -6+10i. */
static void test_dot_complex(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = c64[2] parameter(0)\n  b = c64[2] parameter(1)\n"
        "  ROOT d = c64[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
    float a[] = {1, 2, 0, 1}, b[] = {3, 4, 0, 1};
    DevValue *args[2] = {val(IR_C64, 1, (int64_t[]){2}, a), val(IR_C64, 1, (int64_t[]){2}, b)};
    DevValue *r = run(txt, 2, args, false);
    assert_float_equal(((float *)r->data)[0], -6, 0);
    assert_float_equal(((float *)r->data)[1], 10, 0);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Empty dims: K = 0 gives zeros; M = 0 gives an empty result. */
static void test_dot_empty(void **state)
{
    (void)state;
    const char *k0 =
        "HloModule m\nENTRY e {\n  a = f32[2,0] parameter(0)\n  b = f32[0,3] parameter(1)\n"
        "  ROOT d = f32[2,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    const char *m0 =
        "HloModule m\nENTRY e {\n  a = s32[0,3] parameter(0)\n  b = s32[3,2] parameter(1)\n"
        "  ROOT d = s32[0,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    float zeros[6] = {0};
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){2, 0}, NULL), val(IR_F32, 2, (int64_t[]){0, 3}, NULL)};
        DevValue *r = run(k0, 2, args, no_blas);
        expect_f32(r, zeros, 6);
        dev_value_unref(r);
        dev_value_unref(args[0]);
        dev_value_unref(args[1]);
    }
    DevValue *args[2] = {val(IR_S32, 2, (int64_t[]){0, 3}, NULL), val(IR_S32, 2, (int64_t[]){3, 2}, NULL)};
    DevValue *r = run(m0, 2, args, false);
    assert_int_equal(dev_value_elements(r), 0);
    assert_int_equal(r->shape.dims[1], 2);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Mixed types (bf16 x bf16 -> f32, XLA's preferred_element_type): the
 * operands convert to f32. 1.5 * 2 + 0.25 * 4 = 4. */
static void test_dot_mixed_types(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  a = bf16[2] parameter(0)\n  b = bf16[2] parameter(1)\n"
        "  ROOT d = f32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
    uint16_t a[] = {0x3fc0 /* 1.5 */, 0x3e80 /* 0.25 */}, b[] = {0x4000 /* 2 */, 0x4080 /* 4 */};
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *args[2] = {val(IR_BF16, 1, (int64_t[]){2}, a), val(IR_BF16, 1, (int64_t[]){2}, b)};
        DevValue *r = run(txt, 2, args, no_blas);
        float want = 4;
        expect_f32(r, &want, 1);
        dev_value_unref(r);
        dev_value_unref(args[0]);
        dev_value_unref(args[1]);
    }
}

/* A kernel-level error: dimension numbers that the verifier would reject,
 * planted after parsing, give IR_EINPUT with the instruction's name. */
static void test_dot_bad_dnums(void **state)
{
    (void)state;
    IrModule *m = parse_ok(DOT_2x3x2);
    IrComputation *c = ir_entry(m);
    c->instr[c->root].a.dot.lhs_contracting.v[0] = 5;
    DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){2, 3}, NULL), val(IR_F32, 2, (int64_t[]){3, 2}, NULL)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_dot(m, 2, args, false, &out, &d), IR_EINPUT);
    assert_null(out);
    assert_non_null(strstr(d.msg, "dot"));
    ir_diag_clear(&d);
    ir_module_free(m);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* ------------------------------------------------------------------ */
/* convolution                                                         */
/* ------------------------------------------------------------------ */

/* in {1,2,3,4}, kernel {1,10}, stride 1: {1+20, 2+30, 3+40}. */
static void test_conv_1d_hand(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = f32[1,1,4] parameter(0)\n  k = f32[1,1,2] parameter(1)\n"
        "  ROOT c = f32[1,1,3] convolution(i, k), window={size=2}, dim_labels=bf0_oi0->bf0\n}\n";
    float in[] = {1, 2, 3, 4}, k[] = {1, 10}, want[] = {21, 32, 43};
    for (int no_blas = 0; no_blas < 2; no_blas++) {
        DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){1, 1, 4}, in), val(IR_F32, 3, (int64_t[]){1, 1, 2}, k)};
        DevValue *r = run(txt, 2, args, no_blas);
        expect_f32(r, want, 3);
        dev_value_unref(r);
        dev_value_unref(args[0]);
        dev_value_unref(args[1]);
    }
}

/* Padding, stride, lhs dilation and reversal by hand, 1-D, s32.
 * in {1,2,3}, lhs_dilate=2 -> {1,_,2,_,3}; pad 1_1 -> {_,1,_,2,_,3,_};
 * kernel {1,10,100} reversed -> {100,10,1}; stride 2 over the 7 positions
 * gives windows at 0, 2, 4: {_,1,_}->10, {_,2,_}->20, {_,3,_}->30. */
static void test_conv_1d_dilated_reversed(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = s32[1,1,3] parameter(0)\n  k = s32[1,1,3] parameter(1)\n"
        "  ROOT c = s32[1,1,3] convolution(i, k), window={size=3 stride=2 pad=1_1 lhs_dilate=2"
        " rhs_reversal=1}, dim_labels=bf0_oi0->bf0\n}\n";
    int32_t in[] = {1, 2, 3}, k[] = {1, 10, 100}, want[] = {10, 20, 30};
    DevValue *args[2] = {val(IR_S32, 3, (int64_t[]){1, 1, 3}, in), val(IR_S32, 3, (int64_t[]){1, 1, 3}, k)};
    DevValue *r = run(txt, 2, args, false);
    assert_memory_equal(r->data, want, sizeof want);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Grouped: 2 input features, feature_group_count=2, 2 output features:
 * output 0 sees only input feature 0, output 1 only input feature 1.
 * in (b=1, f=2, 3 positions) {{1,2,3},{10,20,30}}, kernel window 1:
 * k[o=0][i=0] = 2, k[o=1][i=0] = 3 -> {{2,4,6},{30,60,90}}. */
static void test_conv_grouped_hand(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = f32[1,2,3] parameter(0)\n  k = f32[2,1,1] parameter(1)\n"
        "  ROOT c = f32[1,2,3] convolution(i, k), window={size=1}, dim_labels=bf0_oi0->bf0,"
        " feature_group_count=2\n}\n";
    float in[] = {1, 2, 3, 10, 20, 30}, k[] = {2, 3}, want[] = {2, 4, 6, 30, 60, 90};
    DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){1, 2, 3}, in), val(IR_F32, 3, (int64_t[]){2, 1, 1}, k)};
    DevValue *r = run(txt, 2, args, false);
    expect_f32(r, want, 6);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* batch_group_count=2 (weight gradients): input batch 2 splits into 2
 * groups of 1; output feature 0 uses input batch 0, output feature 1 uses
 * input batch 1. in {{1,2}} (b0) {{3,4}} (b1), f=1, 2 positions; kernel
 * window 2 {1,1} for both outputs: out (b=1, f=2, 1 pos) = {1+2, 3+4}. */
static void test_conv_batch_group_hand(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = f32[2,1,2] parameter(0)\n  k = f32[2,1,2] parameter(1)\n"
        "  ROOT c = f32[1,2,1] convolution(i, k), window={size=2}, dim_labels=bf0_oi0->bf0,"
        " batch_group_count=2\n}\n";
    float in[] = {1, 2, 3, 4}, k[] = {1, 1, 1, 1}, want[] = {3, 7};
    DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){2, 1, 2}, in), val(IR_F32, 3, (int64_t[]){2, 1, 2}, k)};
    DevValue *r = run(txt, 2, args, false);
    expect_f32(r, want, 2);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* A convolution configuration for the randomised comparison. Labels are
 * XLA's dim_labels; sizes are per role (spatial dims in digit order). */
typedef struct ConvCase {
    const char *labels;
    int ns;
    int64_t ib, if_, ko, fgc, bgc;
    int64_t isz[3], wsz[3], stride[3], plo[3], phi[3], ld[3], rd[3];
    int rev[3];
} ConvCase;

/* Positions of b/f (or o/i) and the spatial digits in one label part. */
typedef struct Labels {
    int batch, feature, spatial[3];
} Labels;

static void parse_labels(const char *s, int n, char b, char f, Labels *l)
{
    for (int i = 0; i < n; i++) {
        if (s[i] == b)
            l->batch = i;
        else if (s[i] == f)
            l->feature = i;
        else
            l->spatial[s[i] - '0'] = i;
    }
}

static int64_t out_size(const ConvCase *c, int s)
{
    int64_t din = c->isz[s] == 0 ? 0 : (c->isz[s] - 1) * c->ld[s] + 1;
    int64_t dw = (c->wsz[s] - 1) * c->rd[s] + 1;
    int64_t padded = din + c->plo[s] + c->phi[s];
    return padded < dw ? 0 : (padded - dw) / c->stride[s] + 1;
}

static void dims_str(char *buf, int n, const int64_t *d)
{
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        sprintf(buf + strlen(buf), "%s%lld", i ? "," : "", (long long)d[i]);
}

/* XLA's evaluator rule, one output element at a time, in double. */
static double naive_conv_at(const ConvCase *c, const Labels *li, const Labels *lk, const Labels *lo,
                            const int64_t *idims, const int64_t *kdims, const float *in,
                            const float *ker, const int64_t *oidx)
{
    int n = c->ns + 2;
    int64_t ki = c->if_ / c->fgc, ofgs = c->ko / c->fgc;
    int64_t of = oidx[lo->feature], ob = oidx[lo->batch];
    int64_t g = of / ofgs;
    int64_t dmul = c->bgc > 1 ? c->ko / c->bgc : 1, bgi = of / dmul, bgs = c->ib / c->bgc;
    int64_t batch = ob + (bgi * bgs) % c->ib;
    double sum = 0;
    int64_t w[3] = {0};
    int64_t nw = 1;
    for (int s = 0; s < c->ns; s++)
        nw *= c->wsz[s];
    for (int64_t wi = 0; wi < nw; wi++) {
        int64_t rem = wi, pos[3], kpos[3];
        bool ok = true;
        for (int s = c->ns - 1; s >= 0; s--) {
            w[s] = rem % c->wsz[s];
            rem /= c->wsz[s];
        }
        for (int s = 0; s < c->ns; s++) {
            int64_t u = oidx[lo->spatial[s]] * c->stride[s] - c->plo[s] + w[s] * c->rd[s];
            if (u % c->ld[s] != 0) {
                ok = false;
                break;
            }
            pos[s] = u / c->ld[s];
            if (pos[s] < 0 || pos[s] >= c->isz[s]) {
                ok = false;
                break;
            }
            kpos[s] = c->rev[s] ? c->wsz[s] - 1 - w[s] : w[s];
        }
        if (!ok)
            continue;
        for (int64_t z = 0; z < ki; z++) {
            int64_t ii[5], kk[5];
            ii[li->batch] = batch;
            ii[li->feature] = g * ki + z;
            kk[lk->batch] = of;      /* 'o' */
            kk[lk->feature] = z;     /* 'i' */
            for (int s = 0; s < c->ns; s++) {
                ii[li->spatial[s]] = pos[s];
                kk[lk->spatial[s]] = kpos[s];
            }
            int64_t ioff = 0, koff = 0;
            for (int d = 0; d < n; d++) {
                ioff = ioff * idims[d] + ii[d];
                koff = koff * kdims[d] + kk[d];
            }
            sum += (double)in[ioff] * ker[koff];
        }
    }
    return sum;
}

static void conv_random_case(const ConvCase *c)
{
    int n = c->ns + 2;
    /* A valid configuration (the naive rule would read out of bounds). */
    assert_int_equal(c->if_ % c->fgc, 0);
    assert_int_equal(c->ko % c->fgc, 0);
    assert_int_equal(c->ko % c->bgc, 0);
    assert_int_equal(c->ib % c->bgc, 0);
    const char *arrow = strstr(c->labels, "->");
    Labels li = {0}, lk = {0}, lo = {0};
    parse_labels(c->labels, n, 'b', 'f', &li);
    parse_labels(c->labels + n + 1, n, 'o', 'i', &lk);
    parse_labels(arrow + 2, n, 'b', 'f', &lo);
    int64_t idims[5], kdims[5], odims[5];
    idims[li.batch] = c->ib;
    idims[li.feature] = c->if_;
    kdims[lk.batch] = c->ko;
    kdims[lk.feature] = c->if_ / c->fgc;
    odims[lo.batch] = c->ib / c->bgc;
    odims[lo.feature] = c->ko;
    for (int s = 0; s < c->ns; s++) {
        idims[li.spatial[s]] = c->isz[s];
        kdims[lk.spatial[s]] = c->wsz[s];
        odims[lo.spatial[s]] = out_size(c, s);
    }
    char ib[64], kb[64], ob[64], win[512] = "", txt[1024];
    dims_str(ib, n, idims);
    dims_str(kb, n, kdims);
    dims_str(ob, n, odims);
    if (c->ns > 0) {
        strcpy(win, ", window={size=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%lld", s ? "x" : "", (long long)c->wsz[s]);
        strcat(win, " stride=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%lld", s ? "x" : "", (long long)c->stride[s]);
        strcat(win, " pad=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%lld_%lld", s ? "x" : "", (long long)c->plo[s],
                    (long long)c->phi[s]);
        strcat(win, " lhs_dilate=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%lld", s ? "x" : "", (long long)c->ld[s]);
        strcat(win, " rhs_dilate=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%lld", s ? "x" : "", (long long)c->rd[s]);
        strcat(win, " rhs_reversal=");
        for (int s = 0; s < c->ns; s++)
            sprintf(win + strlen(win), "%s%d", s ? "x" : "", c->rev[s]);
        strcat(win, "}");
    }
    snprintf(txt, sizeof txt,
             "HloModule m\nENTRY e {\n  i = f32[%s] parameter(0)\n  k = f32[%s] parameter(1)\n"
             "  ROOT c = f32[%s] convolution(i, k)%s, dim_labels=%s, feature_group_count=%lld,"
             " batch_group_count=%lld\n}\n",
             ib, kb, ob, win, c->labels, (long long)c->fgc, (long long)c->bgc);
    DevValue *args[2] = {val(IR_F32, n, idims, NULL), val(IR_F32, n, kdims, NULL)};
    fill_f32(args[0]);
    fill_f32(args[1]);
    int64_t nout = 1;
    for (int d = 0; d < n; d++)
        nout *= odims[d];
    double *want = malloc((size_t)(nout > 0 ? nout : 1) * sizeof *want);
    for (int64_t o = 0; o < nout; o++) {
        int64_t oidx[5], rem = o;
        for (int d = n - 1; d >= 0; d--) {
            oidx[d] = rem % odims[d];
            rem /= odims[d];
        }
        want[o] = naive_conv_at(c, &li, &lk, &lo, idims, kdims, (const float *)args[0]->data,
                                (const float *)args[1]->data, oidx);
    }
    /* BLAS, the loops, and the AVX2 forms of k_conv.c's direct tiles
     * (which an AVX-512 CPU runs otherwise): the same bits as the
     * AVX-512 form where both take the case (the AVX2 forward takes up
     * to 128 taps, DIRECT_KK_AVX2; the AVX-512 one more). */
    int64_t taps = c->if_ / c->fgc;
    for (int s = 0; s < c->ns; s++)
        taps *= c->wsz[s];
    DevValue *r[3];
    for (int mode = 0; mode < 3; mode++) {
        r[mode] = run_with(txt, 2, args, (DevExecOptions){.no_blas = mode == 1, .no_avx512 = mode == 2});
        for (int d = 0; d < n; d++)
            assert_int_equal(r[mode]->shape.dims[d], odims[d]);
        expect_near(r[mode], want, nout, 1e-5);
    }
    bool same_bits = taps <= 128;
#if defined(__x86_64__)
    same_bits = same_bits && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    if (same_bits)
        assert_memory_equal(r[0]->data, r[2]->data, (size_t)r[0]->nbytes);
    for (int mode = 0; mode < 3; mode++)
        dev_value_unref(r[mode]);
    free(want);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

#define ONES3 {1, 1, 1}
#define ZEROS3 {0, 0, 0}

static void test_conv_random_configs(void **state)
{
    (void)state;
    const ConvCase cases[] = {
        /* NHWC / HWIO, plain. */
        {"b01f_01io->b01f", 2, 2, 3, 4, 1, 1, {5, 6}, {3, 3}, ONES3, ZEROS3, ZEROS3, ONES3, ONES3, ZEROS3},
        /* stride, asymmetric and negative padding. */
        {"b01f_01io->b01f", 2, 1, 2, 3, 1, 1, {7, 6}, {3, 2}, {2, 3}, {1, -1}, {2, 0}, ONES3, ONES3, ZEROS3},
        /* transposed conv: lhs dilation + padding, NCHW / OIHW. */
        {"bf01_oi01->bf01", 2, 2, 2, 3, 1, 1, {3, 4}, {3, 2}, ONES3, {2, 1}, {2, 1}, {2, 3}, ONES3, {1, 0}},
        /* atrous (rhs dilation) with reversal. */
        {"b0f1_i10o->1bf0", 2, 1, 3, 2, 1, 1, {9, 8}, {3, 2}, {1, 2}, {2, 0}, {1, 1}, ONES3, {2, 3}, {1, 1}},
        /* grouped and depthwise. */
        {"b01f_01io->b01f", 2, 2, 6, 4, 2, 1, {5, 5}, {2, 3}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"b01f_01io->b01f", 2, 1, 4, 8, 4, 1, {6, 5}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        /* batch groups (weight gradient shape). */
        {"f01b_i01o->01bf", 2, 4, 3, 6, 1, 2, {5, 4}, {2, 3}, ONES3, ZEROS3, {1, 0}, ONES3, ONES3, ZEROS3},
        {"bf0_oi0->bf0", 1, 6, 1, 3, 1, 3, {7}, {4}, {1}, {1}, {1}, {1}, {2}, {0}},
        /* channels-last base-dilated convolutions (conv_nhwc by phases): the
         * stride-2 input gradient as JAX writes it, odd sizes, lhs dilation
         * 3 in 1-D, in one dim only, with stride and reversal. */
        {"b01f_01oi->b01f", 2, 2, 5, 3, 1, 1, {4, 5}, {3, 3}, ONES3, {1, 1}, {2, 2}, {2, 2}, ONES3, ZEROS3},
        {"b01f_01io->b01f", 2, 3, 4, 5, 1, 1, {5, 3}, {3, 2}, ONES3, {2, 1}, {1, 0}, {2, 2}, ONES3, ZEROS3},
        {"b0f_0io->b0f", 1, 2, 3, 2, 1, 1, {5}, {4}, {1}, {2}, {3}, {3}, {1}, {0}},
        {"b01f_01io->b01f", 2, 1, 3, 4, 1, 1, {6, 4}, {3, 3}, {1, 2}, {1, 1}, {2, 1}, {2, 1}, ONES3, {1, 1}},
        {"b01f_01io->b01f", 2, 2, 2, 3, 1, 1, {4, 4}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {2, 2}, {1, 2}, ZEROS3},
        /* channels-last forward tiles with stride 2 x 3, rhs dilation
         * 2 x 3 (taps of a window row apart), 40 features, rows of 13. */
        {"b01f_01io->b01f", 2, 2, 6, 40, 1, 1, {11, 40}, {3, 2}, {2, 3}, {1, 0}, {1, 2}, ONES3, {2, 3}, {0, 1}},
        /* stride-1 phases as direct tiles: rows of 12 outputs of a phase
         * (a full tile and a cut one), lhs dilation 3 x 2 with rhs
         * dilation 2 (the odd x phase has no real tap: zeros), negative
         * padding, 40 features, a reversed (packed) kernel. */
        {"b01f_01io->b01f", 2, 1, 5, 40, 1, 1, {7, 15}, {3, 4}, ONES3, {2, -1}, {1, 2}, {3, 2}, {1, 2}, {1, 0}},
        /* channels-last weight gradients (conv_wgrad): plain, the stride-2
         * forward's (rhs dilation), 1-D, and reversed (the general engine). */
        {"f01b_i01o->01bf", 2, 3, 4, 5, 1, 1, {7, 6}, {5, 4}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"f01b_i01o->01bf", 2, 2, 3, 4, 1, 1, {8, 7}, {4, 3}, ONES3, {1, 1}, {0, 2}, ONES3, {2, 2}, ZEROS3},
        {"f0b_i0o->0bf", 1, 5, 2, 3, 1, 1, {9}, {4}, {2}, {1}, {0}, {1}, {1}, {0}},
        {"f01b_i01o->01bf", 2, 3, 4, 5, 1, 1, {7, 6}, {5, 4}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, {1, 0}},
        /* few channels (k_conv.c's direct tiles): forward with asymmetric
         * and negative padding, rows of 11 and 5 pixels (tiles of 8 cut),
         * 37 and 8 output features (masked vectors), a reversed kernel
         * (packed); weight gradients with 9, 10 and 12 tile rows (OX*C) and
         * 20, 33 and 16 features. */
        {"b01f_01io->b01f", 2, 2, 3, 37, 1, 1, {7, 11}, {3, 3}, ONES3, {1, 0}, {2, 1}, ONES3, ONES3, ZEROS3},
        {"b01f_01io->b01f", 2, 3, 1, 8, 1, 1, {9, 6}, {5, 2}, ONES3, {-1, 1}, {2, 0}, ONES3, ONES3, {1, 0}},
        {"f01b_i01o->01bf", 2, 3, 4, 20, 1, 1, {7, 6}, {7, 6}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"f01b_i01o->01bf", 2, 2, 3, 33, 1, 1, {6, 9}, {4, 7}, ONES3, {0, 2}, {1, 0}, ONES3, ONES3, ZEROS3},
        {"f01b_i01o->01bf", 2, 4, 2, 16, 1, 1, {5, 5}, {4, 3}, ONES3, {1, 1}, {1, 0}, ONES3, ONES3, ZEROS3},
        /* no spatial dims: a matmul. */
        {"bf_io->bf", 0, 5, 7, 3, 1, 1, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}},
        /* three spatial dims. */
        {"b012f_012io->b012f", 3, 1, 2, 2, 1, 1, {4, 3, 5}, {2, 2, 3}, {1, 2, 1}, {0, 1, 1}, {1, 0, 1},
         {1, 1, 2}, {1, 1, 1}, {0, 1, 0}},
        /* padding only: output larger than the input. */
        {"b0f_0io->b0f", 1, 1, 1, 1, 1, 1, {2}, {2}, {1}, {3}, {3}, {1}, {1}, {0}},
        /* kernel layouts read in place (OHWI, and OI / IO without spatial
         * dims) and a reversed HWIO kernel, which cannot be. */
        {"b01f_o01i->b01f", 2, 2, 3, 5, 1, 1, {6, 5}, {2, 3}, ONES3, {1, 0}, {0, 1}, ONES3, ONES3, ZEROS3},
        {"bf_oi->bf", 0, 4, 6, 4, 2, 1, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}},
        {"fb_io->bf", 0, 3, 5, 4, 1, 1, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}},
        {"b01f_01io->b01f", 2, 1, 3, 2, 1, 1, {5, 6}, {3, 2}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, {1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        conv_random_case(&cases[i]);
}

/* Larger f32 convolutions against the naive rule, sized to reach each
 * engine and blocking of the kernel:
 *  - BLAS with real sizes;
 *  - more im2col columns than one block holds (576 rows x 4096 columns);
 *  - a weight-gradient shape whose 9*32*32 = 9216 rows need row blocks
 *    (the GEMMs accumulate);
 *  - base dilation 4x4 (1/16 of the im2col entries are real taps), which
 *    takes the sparse engine with and without BLAS;
 *  - a channels-last weight gradient (conv_wgrad) whose 32*16*16 = 8192
 *    Col rows need two row blocks. */
static void test_conv_larger(void **state)
{
    (void)state;
    const ConvCase cases[] = {
        {"b01f_01io->b01f", 2, 2, 16, 24, 1, 1, {17, 19}, {3, 3}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"b01f_01io->b01f", 2, 1, 64, 4, 1, 1, {64, 64}, {3, 3}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"bf01_oi01->bf01", 2, 16, 9, 2, 1, 1, {35, 35}, {32, 32}, ONES3, ZEROS3, ZEROS3, ONES3, ONES3, ZEROS3},
        {"b01f_01io->b01f", 2, 2, 5, 6, 1, 1, {9, 8}, {3, 3}, {1, 2}, {2, 2}, {2, 1}, {4, 4}, ONES3, {1, 0}},
        /* the shape of XLA's ConvWithParallelDimAndNonParallelSpatialDim,
         * scaled down: stride 7 with lhs_dilate 8 (1/8 of the taps real). */
        {"012bf_012oi->012bf", 3, 3, 4, 2, 1, 1, {8, 5, 5}, {8, 3, 3}, {7, 1, 1}, ZEROS3, ZEROS3,
         {8, 1, 1}, ONES3, ZEROS3},
        {"f01b_i01o->01bf", 2, 32, 32, 8, 1, 1, {32, 32}, {16, 16}, ONES3, {1, 1}, {0, 0}, ONES3, {2, 2},
         ZEROS3},
        /* the net's first convolution and its weight gradient (direct
         * tiles), on 2 images. */
        {"b01f_01io->b01f", 2, 2, 3, 32, 1, 1, {32, 32}, {3, 3}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        {"f01b_i01o->01bf", 2, 3, 2, 32, 1, 1, {32, 32}, {32, 32}, ONES3, {1, 1}, {1, 1}, ONES3, ONES3, ZEROS3},
        /* the net's input gradient by phases, rows in several blocks. */
        {"b01f_01oi->b01f", 2, 8, 64, 32, 1, 1, {16, 16}, {3, 3}, ONES3, {1, 1}, {2, 2}, {2, 2}, ONES3, ZEROS3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        conv_random_case(&cases[i]);
}

/* f16 convolution: products and sums in f32, one rounding at the end.
 * in {1, 2^-11, 2^-11, 2^-11} (f=4), kernel ones: like the dot case,
 * 1 + 3*2^-11 rounds to 0x3c02. */
static void test_conv_f16(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = f16[1,4] parameter(0)\n  k = f16[4,1] parameter(1)\n"
        "  ROOT c = f16[1,1] convolution(i, k), dim_labels=bf_io->bf\n}\n";
    uint16_t in[] = {0x3c00, 0x1000, 0x1000, 0x1000}, k[] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
    DevValue *args[2] = {val(IR_F16, 2, (int64_t[]){1, 4}, in), val(IR_F16, 2, (int64_t[]){4, 1}, k)};
    DevValue *r = run(txt, 2, args, false);
    assert_int_equal(((uint16_t *)r->data)[0], 0x3c02);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Failure injection: every allocation of a conv (packing, im2col, output)
 * may fail; each failure is IR_ENOMEM and nothing leaks (run under
 * valgrind / ASan). */
static void test_conv_and_dot_oom(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  i = f32[2,5,5,3] parameter(0)\n  k = f32[3,3,3,4] parameter(1)\n"
        "  c = f32[2,5,5,4] convolution(i, k), window={size=3x3 pad=1_1x1_1},"
        " dim_labels=b01f_01io->b01f\n"
        "  ROOT d = f32[2,5,4,4] dot(c, c), lhs_batch_dims={0,2}, lhs_contracting_dims={1},"
        " rhs_batch_dims={0,2}, rhs_contracting_dims={1}\n}\n";
    IrModule *m = parse_ok(txt);
    DevValue *args[2] = {val(IR_F32, 4, (int64_t[]){2, 5, 5, 3}, NULL),
                         val(IR_F32, 4, (int64_t[]){3, 3, 3, 4}, NULL)};
    fill_f32(args[0]);
    fill_f32(args[1]);
    DevValue *ref = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_dot(m, 2, args, false, &ref, &d), IR_OK);
    int failures = 0;
    for (long n = 1; n < 10000; n++) {
        DevValue *out = NULL;
        ts_fail_alloc_after(n);
        IrStatus st = exec_dot(m, 2, args, false, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            assert_memory_equal(out->data, ref->data, (size_t)ref->nbytes);
            dev_value_unref(out);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_null(out);
        ir_diag_clear(&d);
        failures++;
    }
    assert_true(failures > 3);
    dev_value_unref(ref);
    ir_module_free(m);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_hand),
        cmocka_unit_test(test_dot_random_odd),
        cmocka_unit_test(test_dot_batch_not_leading),
        cmocka_unit_test(test_dot_zero_rows),
        cmocka_unit_test(test_dot_multi_contracting),
        cmocka_unit_test(test_dot_transposed_in_place),
        cmocka_unit_test(test_dot_int_wraps),
        cmocka_unit_test(test_dot_half_accumulates_in_f32),
        cmocka_unit_test(test_dot_pred),
        cmocka_unit_test(test_dot_complex),
        cmocka_unit_test(test_dot_empty),
        cmocka_unit_test(test_dot_mixed_types),
        cmocka_unit_test(test_dot_bad_dnums),
        cmocka_unit_test(test_conv_1d_hand),
        cmocka_unit_test(test_conv_1d_dilated_reversed),
        cmocka_unit_test(test_conv_grouped_hand),
        cmocka_unit_test(test_conv_batch_group_hand),
        cmocka_unit_test(test_conv_random_configs),
        cmocka_unit_test(test_conv_larger),
        cmocka_unit_test(test_conv_f16),
        cmocka_unit_test(test_conv_and_dot_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
