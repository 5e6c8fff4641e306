/*
 * test_k_sort.c: sort (device/k_sort.c), run as HLO text through
 * dev_execute. Expected orders are worked out by hand in the comments, or
 * by a stable insertion sort written here; the fast comparator path and
 * the general (dev_call) path must agree exactly, stability included.
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

/* Parse and run with n arguments, which it releases; returns the result. */
static DevValue *run(const char *txt, int n, DevValue **args)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = exec_module(m, n, args, &out, &d);
    if (st != IR_OK)
        print_message("run failed: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    ir_module_free(m);
    for (int i = 0; i < n; i++)
        dev_value_unref(args[i]);
    return out;
}

static void expect_s32(const DevValue *v, const int32_t *want, int64_t n)
{
    assert_int_equal(v->shape.type, IR_S32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++)
        if (((const int32_t *)v->data)[i] != want[i]) {
            print_message("element %lld: got %d want %d\n", (long long)i,
                          ((const int32_t *)v->data)[i], want[i]);
            fail();
        }
}

static uint64_t rng = 777;

static int32_t rnd_int(int32_t lo, int32_t hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int32_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

/* Comparators over (key type @, value type s32). lt, gt, gt_swapped,
 * lt_total, by_value_desc (by the second operand) and lt_and (`and(p0 <
 * p1, true)`: a lifted constant key) take the native path; lt_slow
 * (`copy(p0 < p1)`: copy is not evaluated natively) the general one, call
 * by call. TOTALORDER exists for floats only. */
static const char *CMPS =
    "lt {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  ROOT r = pred[] compare(a, b), direction=LT\n}\n"
    "gt {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  ROOT r = pred[] compare(a, b), direction=GT\n}\n"
    "lt_slow {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  l = pred[] compare(a, b), direction=LT\n  ROOT r = pred[] copy(l)\n}\n"
    "lt_and {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  l = pred[] compare(a, b), direction=LT\n  t = pred[] constant(true)\n"
    "  ROOT r = pred[] and(l, t)\n}\n"
    "gt_swapped {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  ROOT r = pred[] compare(b, a), direction=LT\n}\n"
    "by_value_desc {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  ROOT r = pred[] compare(c, d), direction=GT\n}\n";
static const char *CMP_TOTAL =
    "lt_total {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
    "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
    "  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER\n}\n";

/* Append tmpl to out with every '@' replaced by k. */
static void subst(char *out, size_t n, const char *tmpl, const char *k)
{
    size_t len = strlen(out), kl = strlen(k);
    for (; *tmpl; tmpl++) {
        if (*tmpl == '@') {
            assert_true(len + kl < n);
            memcpy(out + len, k, kl);
            len += kl;
        } else {
            assert_true(len + 1 < n);
            out[len++] = *tmpl;
        }
    }
    out[len] = 0;
}

/* The comparators above for key type k, as HLO text. */
static void comparators(char *out, size_t n, const char *k)
{
    out[0] = 0;
    subst(out, n, CMPS, k);
    if (k[0] == 'f' || k[0] == 'b')
        subst(out, n, CMP_TOTAL, k);
}

/* Sort (keys k[n], values s32[n]) along dim 0 with comparator `cmp`. */
static DevValue *sort_pair(const char *k, int64_t n, const void *keys, const int32_t *vals,
                           const char *cmp)
{
    char comps[8192], txt[12288];
    comparators(comps, sizeof comps, k);
    snprintf(txt, sizeof txt,
             "HloModule m\n%sENTRY e {\n  k = %s[%lld] parameter(0)\n"
             "  v = s32[%lld] parameter(1)\n"
             "  ROOT s = (%s[%lld], s32[%lld]) sort(k, v), dimensions={0}, is_stable=true,"
             " to_apply=%s\n}\n",
             comps, k, (long long)n, (long long)n, k, (long long)n, (long long)n, cmp);
    IrType t = ir_type_from_name(k, strlen(k));
    DevValue *args[2] = {val(t, 1, (int64_t[]){n}, keys), val(IR_S32, 1, (int64_t[]){n}, vals)};
    return run(txt, 2, args);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

/* keys {3,1,2,1} values {10,20,30,40}: ascending and stable ->
 * keys {1,1,2,3}, values {20,40,30,10}; descending (gt and the swapped
 * lt) -> {3,2,1,1}, {10,30,20,40} (the two 1s keep their order). */
static void test_sort_pairs_stable(void **state)
{
    (void)state;
    float keys[] = {3, 1, 2, 1};
    int32_t vals[] = {10, 20, 30, 40};
    const char *asc[] = {"lt", "lt_slow", "lt_total", "lt_and"};
    for (int i = 0; i < 4; i++) {
        DevValue *r = sort_pair("f32", 4, keys, vals, asc[i]);
        assert_memory_equal(r->elems[0]->data, ((float[]){1, 1, 2, 3}), 16);
        expect_s32(r->elems[1], (int32_t[]){20, 40, 30, 10}, 4);
        dev_value_unref(r);
    }
    const char *desc[] = {"gt", "gt_swapped"};
    for (int i = 0; i < 2; i++) {
        DevValue *r = sort_pair("f32", 4, keys, vals, desc[i]);
        assert_memory_equal(r->elems[0]->data, ((float[]){3, 2, 1, 1}), 16);
        expect_s32(r->elems[1], (int32_t[]){10, 30, 20, 40}, 4);
        dev_value_unref(r);
    }
}

/* TOTALORDER: {NaN, 1, -NaN, -0, 0, -inf, inf, -1} ->
 * {-NaN, -inf, -1, -0, 0, 1, inf, NaN}; values show the permutation
 * {2, 5, 7, 3, 4, 1, 6, 0}. Checked bit for bit (signs of 0 and NaN). */
static void test_sort_totalorder_nan(void **state)
{
    (void)state;
    uint32_t bits[] = {0x7fc00000, 0x3f800000, 0xffc00000, 0x80000000,
                       0x00000000, 0xff800000, 0x7f800000, 0xbf800000};
    int32_t vals[] = {0, 1, 2, 3, 4, 5, 6, 7};
    DevValue *r = sort_pair("f32", 8, bits, vals, "lt_total");
    expect_s32(r->elems[1], (int32_t[]){2, 5, 7, 3, 4, 1, 6, 0}, 8);
    uint32_t want[] = {0xffc00000, 0xff800000, 0xbf800000, 0x80000000,
                       0x00000000, 0x3f800000, 0x7f800000, 0x7fc00000};
    assert_memory_equal(r->elems[0]->data, want, sizeof want);
    dev_value_unref(r);
    /* f16 and bf16 keys in total order: f16 {NaN, -2, -0, 0.5} ->
     * {-2, -0, 0.5, NaN}. */
    uint16_t h[] = {0x7e00, 0xc000, 0x8000, 0x3800};
    r = sort_pair("f16", 4, h, vals, "lt_total");
    expect_s32(r->elems[1], (int32_t[]){1, 2, 3, 0}, 4);
    dev_value_unref(r);
    uint16_t bf[] = {0xffc0 /* -NaN */, 0x3f80, 0x0000, 0x8000};
    r = sort_pair("bf16", 4, bf, vals, "lt_total");
    expect_s32(r->elems[1], (int32_t[]){0, 3, 2, 1}, 4);
    dev_value_unref(r);
}

/* The default float compare on data without NaN, and with NaN: NaN never
 * compares less, so the finite elements still come out ascending
 * relative to each other when NaN is last. */
static void test_sort_float_default(void **state)
{
    (void)state;
    float keys[] = {2.5f, -1, 0, 7, -3};
    int32_t vals[] = {0, 1, 2, 3, 4};
    DevValue *r = sort_pair("f32", 5, keys, vals, "lt");
    expect_s32(r->elems[1], (int32_t[]){4, 1, 2, 0, 3}, 5);
    dev_value_unref(r);
    float withnan[] = {2, 1, NAN};
    r = sort_pair("f32", 3, withnan, vals, "lt");
    expect_s32(r->elems[1], (int32_t[]){1, 0, 2}, 3);
    dev_value_unref(r);
}

/* Integers by their own signedness: s32 {-1, 5, -7} -> {-7, -1, 5};
 * u32 {0xffffffff, 1, 0x80000000} -> {1, 0x80000000, 0xffffffff};
 * pred {1, 0, 1, 0} -> {0, 0, 1, 1} (values {1, 3, 0, 2}). */
static void test_sort_ints(void **state)
{
    (void)state;
    int32_t vals[] = {0, 1, 2, 3};
    DevValue *r = sort_pair("s32", 3, (int32_t[]){-1, 5, -7}, vals, "lt");
    expect_s32(r->elems[0], (int32_t[]){-7, -1, 5}, 3);
    dev_value_unref(r);
    r = sort_pair("u32", 3, (uint32_t[]){0xffffffffu, 1, 0x80000000u}, vals, "lt");
    assert_memory_equal(r->elems[0]->data, ((uint32_t[]){1, 0x80000000u, 0xffffffffu}), 12);
    dev_value_unref(r);
    r = sort_pair("u32", 3, (uint32_t[]){0xffffffffu, 1, 0x80000000u}, vals, "lt_slow");
    assert_memory_equal(r->elems[0]->data, ((uint32_t[]){1, 0x80000000u, 0xffffffffu}), 12);
    dev_value_unref(r);
    r = sort_pair("pred", 4, (uint8_t[]){1, 0, 1, 0}, vals, "lt");
    expect_s32(r->elems[1], (int32_t[]){1, 3, 0, 2}, 4);
    dev_value_unref(r);
}

/* A comparator on the second operand (general path): values descending,
 * keys follow. */
static void test_sort_by_second_operand(void **state)
{
    (void)state;
    DevValue *r = sort_pair("s32", 4, (int32_t[]){1, 2, 3, 4}, (int32_t[]){5, 9, 5, 7}, "by_value_desc");
    expect_s32(r->elems[0], (int32_t[]){2, 4, 1, 3}, 4);
    expect_s32(r->elems[1], (int32_t[]){9, 7, 5, 5}, 4);
    dev_value_unref(r);
}

/* Rows of a 2-D array along either dim, one operand (the result is an
 * array, not a tuple): {{3,1,2},{0,5,4}} along dim 1 -> {{1,2,3},{0,4,5}};
 * along dim 0 -> {{0,1,2},{3,5,4}}. */
static void test_sort_2d(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\ncmp {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  ROOT r = pred[] compare(a, b), direction=LT\n}\n"
        "ENTRY e {\n  x = s32[2,3] parameter(0)\n"
        "  ROOT s = s32[2,3] sort(x), dimensions={%d}, to_apply=cmp\n}\n";
    int32_t x[] = {3, 1, 2, 0, 5, 4};
    const int32_t want[2][6] = {{0, 1, 2, 3, 5, 4}, {1, 2, 3, 0, 4, 5}};
    for (int d = 0; d < 2; d++) {
        char txt[1024];
        snprintf(txt, sizeof txt, fmt, d);
        DevValue *arg = val(IR_S32, 2, (int64_t[]){2, 3}, x);
        DevValue *r = run(txt, 1, &arg);
        assert_int_not_equal(r->shape.type, IR_TUPLE);
        expect_s32(r, want[d], 6);
        dev_value_unref(r);
    }
}

/* Fast and general paths agree, stability included, on random keys with
 * many duplicates; both match a stable insertion sort written here. The
 * array is [3, 37] sorted along dim 1 (three independent rows). */
static void test_sort_fast_vs_general_random(void **state)
{
    (void)state;
    int32_t keys[111], vals[111];
    for (int i = 0; i < 111; i++) {
        keys[i] = rnd_int(-5, 5);
        vals[i] = i;
    }
    int32_t wk[111], wv[111];
    memcpy(wk, keys, sizeof wk);
    memcpy(wv, vals, sizeof wv);
    for (int row = 0; row < 3; row++) { /* stable insertion sort per row */
        int32_t *k = wk + row * 37, *v = wv + row * 37;
        for (int i = 1; i < 37; i++)
            for (int j = i; j > 0 && k[j] < k[j - 1]; j--) {
                int32_t t = k[j];
                k[j] = k[j - 1];
                k[j - 1] = t;
                t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
    }
    const char *cmps[] = {"lt", "lt_slow", "lt_and"};
    char comps[8192];
    comparators(comps, sizeof comps, "s32");
    for (int c = 0; c < 3; c++) {
        char txt[12288];
        snprintf(txt, sizeof txt,
                 "HloModule m\n%sENTRY e {\n  k = s32[3,37] parameter(0)\n"
                 "  v = s32[3,37] parameter(1)\n"
                 "  ROOT s = (s32[3,37], s32[3,37]) sort(k, v), dimensions={1}, to_apply=%s\n}\n",
                 comps, cmps[c]);
        DevValue *args[2] = {val(IR_S32, 2, (int64_t[]){3, 37}, keys), val(IR_S32, 2, (int64_t[]){3, 37}, vals)};
        DevValue *r = run(txt, 2, args);
        expect_s32(r->elems[0], wk, 111);
        expect_s32(r->elems[1], wv, 111);
        dev_value_unref(r);
    }
}

/* Size-1 and size-0 sort dims. */
static void test_sort_degenerate(void **state)
{
    (void)state;
    DevValue *r = sort_pair("f32", 1, (float[]){4}, (int32_t[]){9}, "lt");
    expect_s32(r->elems[1], (int32_t[]){9}, 1);
    dev_value_unref(r);
    r = sort_pair("f32", 0, NULL, NULL, "lt_slow");
    assert_int_equal(dev_value_elements(r->elems[0]), 0);
    dev_value_unref(r);
}

/* XLA's TopK comparator (as its SPMD tests have it): keys are float bits
 * twiddled into ordered s32 (negative floats: 0x7fffffff - bits), sorted
 * descending, ties broken by the smaller second operand. keys
 * {1.5, -2, 1.5, 0, -0, 3}, values {5, 4, 3, 2, 1, 0}: 3 (0), then the two
 * 1.5s by value (3 before 5, against their input order), 0 (2), -0 (1)
 * (below +0 in this key), -2 (4). `copy` at the root forces the general
 * path for comparison. */
static void test_sort_topk_comparator(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
        "  ba = s32[] bitcast-convert(a)\n  zero = s32[] constant(0)\n"
        "  na = pred[] compare(ba, zero), direction=LT\n  big = u32[] constant(2147483647)\n"
        "  ua = u32[] bitcast-convert(a)\n  sa = u32[] subtract(big, ua)\n"
        "  fa = s32[] bitcast-convert(sa)\n  ka = s32[] select(na, fa, ba)\n"
        "  bb = s32[] bitcast-convert(b)\n  nb = pred[] compare(bb, zero), direction=LT\n"
        "  ub = u32[] bitcast-convert(b)\n  sb = u32[] subtract(big, ub)\n"
        "  fb = s32[] bitcast-convert(sb)\n  kb = s32[] select(nb, fb, bb)\n"
        "  gt = pred[] compare(ka, kb), direction=GT\n  lt = pred[] compare(kb, ka), direction=GT\n"
        "  tie = pred[] compare(gt, lt), direction=EQ\n  byv = pred[] compare(c, d), direction=LT\n"
        "  %s = pred[] select(tie, byv, gt)\n%s}\n"
        "ENTRY e {\n  k = f32[6] parameter(0)\n  v = s32[6] parameter(1)\n"
        "  ROOT s = (f32[6], s32[6]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp\n}\n";
    const char *roots[][2] = {{"ROOT r", ""}, {"r", "  ROOT c2 = pred[] copy(r)\n"}};
    for (int i = 0; i < 2; i++) {
        char txt[4096];
        snprintf(txt, sizeof txt, fmt, roots[i][0], roots[i][1]);
        DevValue *args[2] = {val(IR_F32, 1, (int64_t[]){6}, (float[]){1.5f, -2, 1.5f, 0, -0.0f, 3}),
                             val(IR_S32, 1, (int64_t[]){6}, (int32_t[]){5, 4, 3, 2, 1, 0})};
        DevValue *r = run(txt, 2, args);
        expect_s32(r->elems[1], (int32_t[]){0, 3, 5, 2, 1, 4}, 6);
        uint32_t want[] = {0x40400000, 0x3fc00000, 0x3fc00000, 0x00000000, 0x80000000, 0xc0000000};
        assert_memory_equal(r->elems[0]->data, want, sizeof want);
        dev_value_unref(r);
    }
}

/* Keys computed by several instructions (and constants) on each side:
 * compare(-x, -y) LT is descending; not(x >= y) is ascending; and
 * comparing x*3 - 1 bitcast to u32 puts negative keys last. */
static void test_sort_lifted_keys(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\ncmp {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n%s}\n"
        "ENTRY e {\n  k = s32[5] parameter(0)\n  v = s32[5] parameter(1)\n"
        "  ROOT s = (s32[5], s32[5]) sort(k, v), dimensions={0}, to_apply=cmp\n}\n";
    const char *bodies[] = {
        /* descending through negation */
        "  na = s32[] negate(a)\n  nb = s32[] negate(b)\n  ROOT r = pred[] compare(na, nb), direction=LT\n",
        /* ascending through not(a >= b) */
        "  ge = pred[] compare(a, b), direction=GE\n  ROOT r = pred[] not(ge)\n",
        /* ascending by (x*3 - 1) read as unsigned: negative x sort last */
        "  three = s32[] constant(3)\n  one = s32[] constant(1)\n"
        "  ma = s32[] multiply(a, three)\n  ka = s32[] subtract(ma, one)\n"
        "  mb = s32[] multiply(b, three)\n  kb = s32[] subtract(mb, one)\n"
        "  ua = u32[] bitcast-convert(ka)\n  ub = u32[] bitcast-convert(kb)\n"
        "  ROOT r = pred[] compare(ua, ub), direction=LT\n",
    };
    /* keys {4, -1, 7, 0, 2} with values {0..4} */
    const int32_t want[][5] = {{2, 0, 4, 3, 1}, {1, 3, 4, 0, 2}, {4, 0, 2, 1, 3}};
    /* third: x*3-1 = {11, -4, 20, -1, 5} as u32: 5 < 11 < 20 < 2^32-4 < 2^32-1:
     * keys 2, 4, 7, -1, 0 -> values 4, 0, 2, 1, 3. */
    for (int i = 0; i < 3; i++) {
        char txt[4096];
        snprintf(txt, sizeof txt, fmt, bodies[i]);
        DevValue *args[2] = {val(IR_S32, 1, (int64_t[]){5}, (int32_t[]){4, -1, 7, 0, 2}),
                             val(IR_S32, 1, (int64_t[]){5}, (int32_t[]){0, 1, 2, 3, 4})};
        DevValue *r = run(txt, 2, args);
        expect_s32(r->elems[1], want[i], 5);
        dev_value_unref(r);
    }
}

/* Failure injection over the general path (lt_slow) and the native path
 * with lifted keys (neg: descending through negate), and a dimension
 * planted out of range after parsing (IR_EINPUT from the kernel). */
static void test_sort_errors(void **state)
{
    (void)state;
    char comps[8192], txt[12288];
    comparators(comps, sizeof comps, "f32");
    const char *cmps[] = {"lt_slow", "neg"};
    const int32_t want[][6] = {{5, 3, 4, 1, 2, 0}, {0, 2, 1, 4, 3, 5}};
    for (int c = 0; c < 2; c++) {
        snprintf(txt, sizeof txt,
                 "HloModule m\n%sneg {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n"
                 "  na = f32[] negate(a)\n  nb = f32[] negate(b)\n"
                 "  ROOT r = pred[] compare(na, nb), direction=LT\n}\n"
                 "ENTRY e {\n  k = f32[6] parameter(0)\n  v = s32[6] parameter(1)\n"
                 "  ROOT s = (f32[6], s32[6]) sort(k, v), dimensions={0}, to_apply=%s\n}\n",
                 comps, cmps[c]);
        IrModule *m = parse_ok(txt);
        DevValue *args[2] = {val(IR_F32, 1, (int64_t[]){6}, (float[]){5, 3, 4, 1, 2, 0}),
                             val(IR_S32, 1, (int64_t[]){6}, (int32_t[]){0, 1, 2, 3, 4, 5})};
        DevValue *ref = NULL;
        IrDiag d = {0};
        assert_int_equal(exec_module(m, 2, args, &ref, &d), IR_OK);
        expect_s32(ref->elems[1], want[c], 6);
        int failures = 0;
        for (long n = 1; n < 100000; n++) {
            DevValue *out = NULL;
            ts_fail_alloc_after(n);
            IrStatus st = exec_module(m, 2, args, &out, &d);
            ts_fail_alloc_after(0);
            if (st == IR_OK) {
                assert_memory_equal(out->elems[1]->data, ref->elems[1]->data, 24);
                dev_value_unref(out);
                break;
            }
            assert_int_equal(st, IR_ENOMEM);
            ir_diag_clear(&d);
            failures++;
        }
        assert_true(failures > 3);
        IrComputation *e = ir_entry(m);
        e->instr[e->root].a.dimensions.v[0] = 3;
        DevValue *out = NULL;
        assert_int_equal(exec_module(m, 2, args, &out, &d), IR_EINPUT);
        assert_null(out);
        assert_non_null(strstr(d.msg, "sort"));
        ir_diag_clear(&d);
        dev_value_unref(ref);
        dev_value_unref(args[0]);
        dev_value_unref(args[1]);
        ir_module_free(m);
    }
}

/* f8 under TOTALORDER: -inf < -1 < -0 < +0 < 1 < NaN (IEEE totalOrder on
 * the decoded values); the f8e5m2 codes of those are 0xfc 0xbc 0x80 0x00
 * 0x3c 0x7e (sign, 5 exponent bits biased by 15, 2 mantissa bits). */
static void test_sort_f8_total_order(void **state)
{
    (void)state;
    const char *txt = "HloModule m\nlt {\n  a = f8e5m2[] parameter(0)\n  b = f8e5m2[] parameter(1)\n"
                      "  ROOT c = pred[] compare(a, b), direction=LT, type=TOTALORDER\n}\n"
                      "ENTRY e {\n  x = u8[6] parameter(0)\n  f = f8e5m2[6] bitcast-convert(x)\n"
                      "  s = f8e5m2[6] sort(f), dimensions={0}, to_apply=lt\n"
                      "  ROOT r = u8[6] bitcast-convert(s)\n}\n";
    uint8_t in[6] = {0x3c, 0x7e, 0x80, 0x00, 0xfc, 0xbc}, want[6] = {0xfc, 0xbc, 0x80, 0x00, 0x3c, 0x7e};
    DevValue *a[1] = {val(IR_U8, 1, (int64_t[]){6}, in)};
    DevValue *out = run(txt, 1, a);
    assert_memory_equal(out->data, want, 6);
    dev_value_unref(out);
}

/* ir_sort_keys, the classification the kernel and the memory estimate
 * (partition/memory.c) share, on JAX's comparator (by hand): each side's
 * NaN and -0 canonicalised by selects, then one TOTALORDER compare. The
 * compare is the one node; ka and kb, the selects it reads, the leaves,
 * lifted with what they read (a's and b's compares, the constants), the
 * index parameters i, j neither (the root does not need them). A mixing
 * add (a + b) is no node the kernel evaluates: the general path. */
static void test_sort_keys_classify(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n%s}\n"
        "ENTRY e {\n  x = f32[6] parameter(0)\n  y = s32[6] iota(), iota_dimension=0\n"
        "  ROOT s = (f32[6], s32[6]) sort(x, y), dimensions={0}, to_apply=cmp\n}\n";
    const char *jax =
        "  nan_a = pred[] compare(a, a), direction=NE\n  nan = f32[] constant(nan)\n"
        "  zero = f32[] constant(0)\n  z_a = pred[] compare(a, zero), direction=EQ\n"
        "  ka0 = f32[] select(z_a, zero, a)\n  ka = f32[] select(nan_a, nan, ka0)\n"
        "  nan_b = pred[] compare(b, b), direction=NE\n  z_b = pred[] compare(b, zero), direction=EQ\n"
        "  kb0 = f32[] select(z_b, zero, b)\n  kb = f32[] select(nan_b, nan, kb0)\n"
        "  ROOT lt = pred[] compare(ka, kb), direction=LT, type=TOTALORDER\n";
    char txt[4096];
    snprintf(txt, sizeof txt, fmt, jax);
    IrModule *m = parse_ok(txt);
    const IrComputation *c = m->comp[ir_find_computation(m, "cmp")];
    IrSortKeys k;
    IrDiag d = {0};
    assert_int_equal(ir_sort_keys(m, c, 2, &k, &d), IR_OK);
    assert_true(k.native);
    struct {
        const char *name;
        int role, dep;
    } want[] = {
        {"lt", IR_SORT_REACH | IR_SORT_NODE, 3},
        {"ka", IR_SORT_REACH | IR_SORT_LEAF | IR_SORT_LIFT, 1},
        {"kb", IR_SORT_REACH | IR_SORT_LEAF | IR_SORT_LIFT, 2},
        {"ka0", IR_SORT_REACH | IR_SORT_LIFT, 1},
        {"nan_b", IR_SORT_REACH | IR_SORT_LIFT, 2},
        {"zero", IR_SORT_REACH | IR_SORT_LIFT, 0},
        {"a", IR_SORT_REACH | IR_SORT_LIFT, 1},
        {"i", 0, 1},
        {"j", 0, 2},
    };
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        int32_t x = ir_find_instr(c, want[w].name);
        assert_true(x >= 0);
        if (k.role[x] != want[w].role || k.dep[x] != want[w].dep)
            print_message("%s: role %d dep %d\n", want[w].name, k.role[x], k.dep[x]);
        assert_int_equal(k.role[x], want[w].role);
        assert_int_equal(k.dep[x], want[w].dep);
    }
    ir_sort_keys_free(&k);
    ir_module_free(m);
    snprintf(txt, sizeof txt, fmt, "  s = f32[] add(a, b)\n  zero = f32[] constant(0)\n"
                                    "  ROOT lt = pred[] compare(s, zero), direction=LT\n");
    m = parse_ok(txt);
    c = m->comp[ir_find_computation(m, "cmp")];
    assert_int_equal(ir_sort_keys(m, c, 2, &k, &d), IR_OK);
    assert_false(k.native);
    ir_sort_keys_free(&k);
    /* a comparator of other parameters than the sort's operands ask */
    assert_int_equal(ir_sort_keys(m, c, 1, &k, &d), IR_OK);
    assert_false(k.native);
    assert_int_equal(k.n, 0);
    ir_sort_keys_free(&k);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_pairs_stable),
        cmocka_unit_test(test_sort_totalorder_nan),
        cmocka_unit_test(test_sort_float_default),
        cmocka_unit_test(test_sort_ints),
        cmocka_unit_test(test_sort_by_second_operand),
        cmocka_unit_test(test_sort_2d),
        cmocka_unit_test(test_sort_fast_vs_general_random),
        cmocka_unit_test(test_sort_degenerate),
        cmocka_unit_test(test_sort_topk_comparator),
        cmocka_unit_test(test_sort_lifted_keys),
        cmocka_unit_test(test_sort_errors),
        cmocka_unit_test(test_sort_f8_total_order),
        cmocka_unit_test(test_sort_keys_classify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
