/*
 * test_k_reduce.c: reduce, reduce-window and select-and-scatter
 * (device/k_reduce.c), run as HLO text through dev_execute.
 *
 * Expected values are worked out by hand in the comments. The fast paths
 * (simple reducers) are also checked against the general path (the same
 * reducer written so that ir_simple_reducer does not recognise it) on
 * random integer data, where both must agree exactly.
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

/* Parse, run with n arguments (borrowed), return the result. */
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
    return out;
}

/* run() for one argument, which it releases. */
static DevValue *run1(const char *txt, DevValue *arg)
{
    DevValue *r = run(txt, 1, &arg);
    dev_value_unref(arg);
    return r;
}

static void expect_f32(const DevValue *v, const float *want, int64_t n)
{
    assert_int_equal(v->shape.type, IR_F32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++) {
        float got = ((const float *)v->data)[i];
        if (isnan(want[i]))
            assert_true(isnan(got));
        else if (got != want[i]) {
            print_message("element %lld: got %g want %g\n", (long long)i, got, want[i]);
            fail();
        }
    }
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

static uint64_t rng = 12345;

static int32_t rnd_int(int32_t lo, int32_t hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int32_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

/* Computations used below. add/max/min are simple reducers; add_slow is
 * the same sum written so that the fast path does not apply. */
#define COMPS(T)                                                                   \
    "add {\n  a = " T "[] parameter(0)\n  b = " T "[] parameter(1)\n"             \
    "  ROOT r = " T "[] add(a, b)\n}\n"                                            \
    "max {\n  a = " T "[] parameter(0)\n  b = " T "[] parameter(1)\n"             \
    "  ROOT r = " T "[] maximum(a, b)\n}\n"                                        \
    "min {\n  a = " T "[] parameter(0)\n  b = " T "[] parameter(1)\n"             \
    "  ROOT r = " T "[] minimum(a, b)\n}\n"                                        \
    "add_slow {\n  a = " T "[] parameter(0)\n  b = " T "[] parameter(1)\n"        \
    "  s = " T "[] add(a, b)\n  z = " T "[] subtract(b, b)\n"                     \
    "  ROOT r = " T "[] add(s, z)\n}\n"

/* ------------------------------------------------------------------ */
/* reduce                                                              */
/* ------------------------------------------------------------------ */

/* {{1,2,3},{4,5,6}}: sum over dim 1 {6,15}; over dim 0 {5,7,9}; all 21. */
static void test_reduce_hand(void **state)
{
    (void)state;
    float x[] = {1, 2, 3, 4, 5, 6};
    const char *fmt = "HloModule m\n" COMPS("f32")
                      "ENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] constant(0)\n"
                      "  ROOT r = f32[%s] reduce(x, z), dimensions={%s}, to_apply=%s\n}\n";
    struct { const char *shape, *dims, *comp; float want[3]; int n; } c[] = {
        {"2", "1", "add", {6, 15}, 2},
        {"3", "0", "add", {5, 7, 9}, 3},
        {"", "0,1", "add", {21}, 1},
        {"2", "1", "add_slow", {6, 15}, 2},
        {"3", "0", "max", {4, 5, 6}, 3},
        {"2", "1", "min", {0, 0}, 2},   /* init 0 is below every element */
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char txt[2048];
        snprintf(txt, sizeof txt, fmt, c[i].shape, c[i].dims, c[i].comp);
        DevValue *r = run1(txt, val(IR_F32, 2, (int64_t[]){2, 3}, x));
        expect_f32(r, c[i].want, c[i].n);
        dev_value_unref(r);
    }
}

/* max/min propagate NaN, wherever it is: {{1,NaN,3},{NaN,0,-1},{2,5,4}}
 * max over dim 1 (init -inf) -> {NaN, NaN, 5}; min -> {NaN, NaN, 2}. */
static void test_reduce_nan(void **state)
{
    (void)state;
    float x[] = {1, NAN, 3, NAN, 0, -1, 2, 5, 4};
    const char *fmt = "HloModule m\n" COMPS("f32")
                      "ENTRY e {\n  x = f32[3,3] parameter(0)\n  z = f32[] constant(%s)\n"
                      "  ROOT r = f32[3] reduce(x, z), dimensions={1}, to_apply=%s\n}\n";
    char txt[2048];
    snprintf(txt, sizeof txt, fmt, "-inf", "max");
    DevValue *r = run1(txt, val(IR_F32, 2, (int64_t[]){3, 3}, x));
    expect_f32(r, (float[]){NAN, NAN, 5}, 3);
    dev_value_unref(r);
    snprintf(txt, sizeof txt, fmt, "inf", "min");
    r = run1(txt, val(IR_F32, 2, (int64_t[]){3, 3}, x));
    expect_f32(r, (float[]){NAN, NAN, 2}, 3);
    dev_value_unref(r);
    /* A NaN init propagates too. */
    snprintf(txt, sizeof txt, fmt, "nan", "max");
    r = run1(txt, val(IR_F32, 2, (int64_t[]){3, 3}, x));
    expect_f32(r, (float[]){NAN, NAN, NAN}, 3);
    dev_value_unref(r);
}

/* Empty dims: reducing a size-0 dim gives the init; a size-0 kept dim
 * gives an empty result. */
static void test_reduce_empty(void **state)
{
    (void)state;
    const char *fmt = "HloModule m\n" COMPS("f32")
                      "ENTRY e {\n  x = f32[%s] parameter(0)\n  z = f32[] constant(5)\n"
                      "  ROOT r = f32[%s] reduce(x, z), dimensions={%s}, to_apply=%s\n}\n";
    char txt[2048];
    snprintf(txt, sizeof txt, fmt, "0,3", "3", "0", "add");
    DevValue *r = run1(txt, val(IR_F32, 2, (int64_t[]){0, 3}, NULL));
    expect_f32(r, (float[]){5, 5, 5}, 3);
    dev_value_unref(r);
    snprintf(txt, sizeof txt, fmt, "3,0", "3", "1", "add_slow");
    r = run1(txt, val(IR_F32, 2, (int64_t[]){3, 0}, NULL));
    expect_f32(r, (float[]){5, 5, 5}, 3);
    dev_value_unref(r);
    snprintf(txt, sizeof txt, fmt, "0,3", "0", "1", "max");
    r = run1(txt, val(IR_F32, 2, (int64_t[]){0, 3}, NULL));
    assert_int_equal(dev_value_elements(r), 0);
    dev_value_unref(r);
}

/* Integers wrap: s32 (2^31-1) + 1 = -2^31; u8 200 + 100 = 44; s8 product
 * 16 * 16 = 256 -> 0. */
static void test_reduce_int_wraps(void **state)
{
    (void)state;
    const char *s32 = "HloModule m\n" COMPS("s32")
                      "ENTRY e {\n  x = s32[2] parameter(0)\n  z = s32[] constant(0)\n"
                      "  ROOT r = s32[] reduce(x, z), dimensions={0}, to_apply=add\n}\n";
    DevValue *r = run1(s32, val(IR_S32, 1, (int64_t[]){2}, (int32_t[]){INT32_MAX, 1}));
    expect_s32(r, (int32_t[]){INT32_MIN}, 1);
    dev_value_unref(r);
    const char *u8 = "HloModule m\n" COMPS("u8")
                     "ENTRY e {\n  x = u8[2] parameter(0)\n  z = u8[] constant(0)\n"
                     "  ROOT r = u8[] reduce(x, z), dimensions={0}, to_apply=add\n}\n";
    r = run1(u8, val(IR_U8, 1, (int64_t[]){2}, (uint8_t[]){200, 100}));
    assert_int_equal(r->data[0], 44);
    dev_value_unref(r);
    const char *s8 =
        "HloModule m\nmul {\n  a = s8[] parameter(0)\n  b = s8[] parameter(1)\n"
        "  ROOT r = s8[] multiply(a, b)\n}\n"
        "ENTRY e {\n  x = s8[2] parameter(0)\n  z = s8[] constant(1)\n"
        "  ROOT r = s8[] reduce(x, z), dimensions={0}, to_apply=mul\n}\n";
    r = run1(s8, val(IR_S8, 1, (int64_t[]){2}, (int8_t[]){16, 16}));
    assert_int_equal((int8_t)r->data[0], 0);
    dev_value_unref(r);
    /* Signed max on negative numbers (u64-compare would pick -1). */
    const char *smax = "HloModule m\n" COMPS("s32")
                       "ENTRY e {\n  x = s32[3] parameter(0)\n  z = s32[] constant(-100)\n"
                       "  ROOT r = s32[] reduce(x, z), dimensions={0}, to_apply=max\n}\n";
    r = run1(smax, val(IR_S32, 1, (int64_t[]){3}, (int32_t[]){-5, -1, -7}));
    expect_s32(r, (int32_t[]){-1}, 1);
    dev_value_unref(r);
}

/* pred: and / or over rows {{1,1},{1,0},{0,0}} -> and {1,0,0}, or {1,1,0}. */
static void test_reduce_pred(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\nc {\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n"
        "  ROOT r = pred[] %s(a, b)\n}\n"
        "ENTRY e {\n  x = pred[3,2] parameter(0)\n  z = pred[] constant(%s)\n"
        "  ROOT r = pred[3] reduce(x, z), dimensions={1}, to_apply=c\n}\n";
    uint8_t x[] = {1, 1, 1, 0, 0, 0};
    char txt[1024];
    snprintf(txt, sizeof txt, fmt, "and", "true");
    DevValue *r = run1(txt, val(IR_PRED, 2, (int64_t[]){3, 2}, x));
    assert_memory_equal(r->data, ((uint8_t[]){1, 0, 0}), 3);
    dev_value_unref(r);
    snprintf(txt, sizeof txt, fmt, "or", "false");
    r = run1(txt, val(IR_PRED, 2, (int64_t[]){3, 2}, x));
    assert_memory_equal(r->data, ((uint8_t[]){1, 1, 0}), 3);
    dev_value_unref(r);
}

/* f16 sums accumulate wider than f16 and round once: 1 + 3 * 2^-11 rounds
 * to 1 + 2^-9 (0x3c02); an f16 running sum would stay at 1 (0x3c00). */
static void test_reduce_f16_wide_accumulator(void **state)
{
    (void)state;
    const char *txt = "HloModule m\n" COMPS("f16")
                      "ENTRY e {\n  x = f16[4] parameter(0)\n  z = f16[] constant(0)\n"
                      "  ROOT r = f16[] reduce(x, z), dimensions={0}, to_apply=add\n}\n";
    DevValue *r = run1(txt, val(IR_F16, 1, (int64_t[]){4}, (uint16_t[]){0x3c00, 0x1000, 0x1000, 0x1000}));
    assert_int_equal(((uint16_t *)r->data)[0], 0x3c02);
    dev_value_unref(r);
}

/* Variadic reduce (argmax): values {3,7,7,1}, indices {0,1,2,3}; the
 * reducer keeps the accumulator on ties (GE), so the first 7 wins: (7, 1). */
static void test_reduce_variadic_argmax(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nargmax {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = s32[] parameter(3)\n"
        "  ge = pred[] compare(a, c), direction=GE\n"
        "  v = f32[] select(ge, a, c)\n  i = s32[] select(ge, b, d)\n"
        "  ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
        "ENTRY e {\n  x = f32[2,4] parameter(0)\n  y = s32[2,4] parameter(1)\n"
        "  m = f32[] constant(-inf)\n  z = s32[] constant(-1)\n"
        "  ROOT r = (f32[2], s32[2]) reduce(x, y, m, z), dimensions={1}, to_apply=argmax\n}\n";
    float x[] = {3, 7, 7, 1, -1, -2, 9, 9};
    int32_t y[] = {0, 1, 2, 3, 0, 1, 2, 3};
    DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){2, 4}, x), val(IR_S32, 2, (int64_t[]){2, 4}, y)};
    DevValue *r = run(txt, 2, args);
    assert_int_equal(r->shape.type, IR_TUPLE);
    assert_int_equal(r->nelems, 2);
    expect_f32(r->elems[0], (float[]){7, 9}, 2);
    expect_s32(r->elems[1], (int32_t[]){1, 2}, 2);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* JAX's argmax reducer (jnp.argmax lowers to it: NaN wins, ties keep
 * the lower index), its value passed through an f32 -> f32 convert so
 * that the table of reduce_select.c does not take it, run over blocks of
 * outputs (reduce_columns.c) against
 * a plain loop of those rules: f32[1500,3] along dim 1 and f32[3,1500]
 * along dim 0 (strided inputs), 1500 outputs each (a block of 1024 and a
 * shorter one), with NaNs and ties. */
static void argmax_naive(const float *x, int64_t nout, int64_t nred, int64_t ostr, int64_t rstr, float *v,
                         int32_t *i)
{
    for (int64_t o = 0; o < nout; o++) {
        float bv = -INFINITY;
        int32_t bi = 0;
        for (int64_t r = 0; r < nred; r++) {
            float c = x[o * ostr + r * rstr];
            bool take = isnan(bv) ? false : isnan(c) || c > bv;
            if (take) {
                bv = c;
                bi = (int32_t)r;
            }
        }
        v[o] = bv;
        i[o] = bi;
    }
}

static void test_reduce_argmax_columns(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\nargmax {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = s32[] parameter(3)\n"
        "  gt = pred[] compare(a, c), direction=GT\n  ne = pred[] compare(a, a), direction=NE\n"
        "  or1 = pred[] or(gt, ne)\n  v = f32[] select(or1, a, c)\n  vc = f32[] convert(v)\n"
        "  eq = pred[] compare(a, c), direction=EQ\n  lt = pred[] compare(b, d), direction=LT\n"
        "  and1 = pred[] and(eq, lt)\n  or2 = pred[] or(or1, and1)\n  i = s32[] select(or2, b, d)\n"
        "  ROOT t = (f32[], s32[]) tuple(vc, i)\n}\n"
        "ENTRY e {\n  x = f32[%d,%d] parameter(0)\n  y = s32[%d,%d] iota(), iota_dimension=%d\n"
        "  m = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
        "  ROOT r = (f32[1500], s32[1500]) reduce(x, y, m, z), dimensions={%d}, to_apply=argmax\n}\n";
    float *x = malloc(4500 * sizeof *x);
    float *wv = malloc(1500 * sizeof *wv);
    int32_t *wi = malloc(1500 * sizeof *wi);
    assert_non_null(x);
    assert_non_null(wv);
    assert_non_null(wi);
    for (int i = 0; i < 4500; i++)
        x[i] = (float)((i * 37) % 11) - 5; /* many ties */
    x[7] = NAN, x[9] = NAN, x[10] = NAN, x[3001] = NAN;
    for (int dim = 1; dim >= 0; dim--) {
        char txt[2048];
        int rows = dim == 1 ? 1500 : 3, cols = dim == 1 ? 3 : 1500;
        snprintf(txt, sizeof txt, fmt, rows, cols, rows, cols, dim, dim);
        DevValue *r = run1(txt, val(IR_F32, 2, (int64_t[]){rows, cols}, x));
        if (dim == 1)
            argmax_naive(x, 1500, 3, 3, 1, wv, wi);
        else
            argmax_naive(x, 1500, 3, 1, 1500, wv, wi);
        expect_f32(r->elems[0], wv, 1500);
        expect_s32(r->elems[1], wi, 1500);
        dev_value_unref(r);
    }
    free(x);
    free(wv);
    free(wi);
}

/* Reducers that compare and pick (ir_select_reducer; the kernel looks
 * them up in a table, device/reduce_select.c) against the same reducer
 * with its results passed through a copy, which the recognition refuses,
 * so that the general path runs it (each instruction's elementwise kernel:
 * reducer_scalar.c): bit for bit equal on values with ties,
 * +0 and -0, NaNs of both signs (and a payload), index ties, over each dim,
 * both and a window, in f32, f16 and s32. %1$s is the value type. */
static const char *const select_reducers[] = {
    /* JAX's argmax: NaN wins, ties keep the lower index */
    "  gt = pred[] compare(a, c), direction=GT\n  ne = pred[] compare(a, a), direction=NE\n"
    "  or1 = pred[] or(gt, ne)\n  v = %1$s[] select(or1, a, c)\n"
    "  eq = pred[] compare(a, c), direction=EQ\n  lt = pred[] compare(b, d), direction=LT\n"
    "  and1 = pred[] and(eq, lt)\n  or2 = pred[] or(or1, and1)\n  i = s32[] select(or2, b, d)\n",
    /* JAX's argmin */
    "  lt0 = pred[] compare(a, c), direction=LT\n  ne = pred[] compare(a, a), direction=NE\n"
    "  or1 = pred[] or(lt0, ne)\n  v = %1$s[] select(or1, a, c)\n"
    "  eq = pred[] compare(a, c), direction=EQ\n  lt = pred[] compare(b, d), direction=LT\n"
    "  and1 = pred[] and(eq, lt)\n  or2 = pred[] or(or1, and1)\n  i = s32[] select(or2, b, d)\n",
    /* keep the accumulator on ties (GE), NaN loses */
    "  ge = pred[] compare(a, c), direction=GE\n  v = %1$s[] select(ge, a, c)\n  i = s32[] select(ge, b, d)\n",
    /* operands swapped, not and xor, the input's own NaN test, a select of selects */
    "  g = pred[] compare(c, a), direction=LE\n  n = pred[] compare(c, c), direction=EQ\n"
    "  k = pred[] xor(g, n)\n  nk = pred[] not(k)\n  v0 = %1$s[] select(k, c, a)\n  v = %1$s[] select(nk, v0, c)\n"
    "  tb = pred[] compare(d, b), direction=GE\n  i = s32[] select(tb, d, b)\n",
};

/* Reduce (or reduce-window) x and y with select_reducers[form], its
 * results through a copy when slow; *recognised: did ir_select_reducer
 * take the reducer? */
static DevValue *select_reduce(int form, const char *ty, bool slow, const char *shape, const char *op,
                               const char *attr, DevValue **args, bool *recognised)
{
    char body[1024], copy[64] = "", txt[4096];
    snprintf(body, sizeof body, select_reducers[form], ty);
    if (slow)
        snprintf(copy, sizeof copy, "  vc = %s[] copy(v)\n", ty);
    snprintf(txt, sizeof txt,
             "HloModule m\nr {\n  a = %s[] parameter(0)\n  b = s32[] parameter(1)\n"
             "  c = %s[] parameter(2)\n  d = s32[] parameter(3)\n%s%s"
             "  ROOT t = (%s[], s32[]) tuple(%s, i)\n}\n"
             "ENTRY e {\n  x = %s[6,5] parameter(0)\n  y = s32[6,5] parameter(1)\n"
             "  m = %s[] constant(%s)\n  z = s32[] constant(2)\n"
             "  ROOT o = (%s%s, s32%s) %s(x, y, m, z), %s, to_apply=r\n}\n",
             ty, ty, body, copy, ty, slow ? "vc" : "v", ty, ty, strcmp(ty, "s32") ? "-inf" : "5", ty, shape,
             shape, op, attr);
    IrModule *m = parse_ok(txt);
    IrType t = args[0]->shape.type;
    IrType types[4] = {t, IR_S32, t, IR_S32};
    IrSelectReducer sel;
    int32_t r = 0;
    while (r < m->ncomp && strcmp(m->comp[r]->name, "r"))
        r++;
    *recognised = ir_select_reducer(m, r, 2, types, &sel);
    ir_module_free(m);
    return run(txt, 2, args);
}

static void test_reduce_select_table(void **state)
{
    (void)state;
    const uint32_t f32_bits[] = {0xbf800000u, 0, 0x80000000u, 0x3f800000u, 0x7fc00000u, 0xffc00000u, 0x7fc00001u};
    const uint16_t f16_bits[] = {0xbc00u, 0, 0x8000u, 0x3c00u, 0x7e00u, 0xfe00u};
    const char *types[] = {"f32", "f16", "s32"};
    const char *ops[][3] = {{"reduce", "dimensions={0}", "[5]"},
                            {"reduce", "dimensions={1}", "[6]"},
                            {"reduce", "dimensions={0,1}", "[]"},
                            {"reduce-window", "window={size=2x3 pad=1_0x0_2}", "[6,5]"}};
    for (int ti = 0; ti < 3; ti++)
        for (int form = 0; form < (int)(sizeof select_reducers / sizeof *select_reducers); form++)
            for (int oi = 0; oi < 4; oi++) {
                uint8_t xb[30 * 4];
                int32_t y[30];
                for (int i = 0; i < 30; i++) {
                    int r = rnd_int(0, 6);
                    y[i] = rnd_int(0, 3);
                    if (ti == 0)
                        memcpy(xb + 4 * i, &f32_bits[r], 4);
                    else if (ti == 1)
                        memcpy(xb + 2 * i, &f16_bits[r % 6], 2);
                    else
                        ((int32_t *)(void *)xb)[i] = r % 3 - 1;
                }
                IrType t = ti == 0 ? IR_F32 : ti == 1 ? IR_F16 : IR_S32;
                DevValue *args[2] = {val(t, 2, (int64_t[]){6, 5}, xb), val(IR_S32, 2, (int64_t[]){6, 5}, y)};
                DevValue *res[2];
                bool recognised[2];
                for (int slow = 0; slow < 2; slow++)
                    res[slow] = select_reduce(form, types[ti], slow, ops[oi][2], ops[oi][0], ops[oi][1], args,
                                              &recognised[slow]);
                assert_true(recognised[0]);
                assert_false(recognised[1]);
                for (int j = 0; j < 2; j++) {
                    assert_int_equal(res[0]->elems[j]->nbytes, res[1]->elems[j]->nbytes);
                    if (memcmp(res[0]->elems[j]->data, res[1]->elems[j]->data, (size_t)res[0]->elems[j]->nbytes)) {
                        print_message("%s form %d %s %s: result %d differs\n", types[ti], form, ops[oi][0],
                                      ops[oi][1], j);
                        fail();
                    }
                }
                dev_value_unref(res[0]);
                dev_value_unref(res[1]);
                dev_value_unref(args[0]);
                dev_value_unref(args[1]);
            }
}

/* The partitioner's lifted reducer (partition/spmd_reduce.c): values and
 * a pred "valid" each, calling JAX's argmax where both are valid. Taken
 * by the table (three slots, one a pred) and equal to the interpreter bit
 * for bit (the slow form copies the value), random valid flags. */
static void test_reduce_select_lifted(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\nargmax {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = s32[] parameter(3)\n%s"
        "  ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
        "valid_or {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n  fa = pred[] parameter(2)\n"
        "  c = f32[] parameter(3)\n  d = s32[] parameter(4)\n  fb = pred[] parameter(5)\n"
        "  f = (f32[], s32[]) call(a, b, c, d), to_apply=argmax\n"
        "  both = pred[] and(fa, fb)\n  any = pred[] or(fa, fb)\n"
        "  f0 = f32[] get-tuple-element(f), index=0\n  f1 = s32[] get-tuple-element(f), index=1\n"
        "  ab0 = f32[] select(fa, a, c)\n  ab1 = s32[] select(fa, b, d)\n"
        "  o0 = f32[] select(both, f0, ab0)%s\n  o1 = s32[] select(both, f1, ab1)\n"
        "  ROOT t = (f32[], s32[], pred[]) tuple(o0%s, o1, any)\n}\n"
        "ENTRY e {\n  x = f32[4,9] parameter(0)\n  y = s32[4,9] parameter(1)\n  ok = pred[4,9] parameter(2)\n"
        "  m = f32[] constant(-inf)\n  z = s32[] constant(0)\n  f = pred[] constant(false)\n"
        "  ROOT r = (f32[4], s32[4], pred[4]) reduce(x, y, ok, m, z, f), dimensions={1}, to_apply=valid_or\n}\n";
    const uint32_t bits[] = {0xbf800000u, 0, 0x80000000u, 0x3f800000u, 0x7fc00000u, 0xffc00000u};
    uint32_t x[36];
    int32_t y[36];
    uint8_t ok[36];
    for (int i = 0; i < 36; i++) {
        x[i] = bits[rnd_int(0, 5)];
        y[i] = rnd_int(0, 3);
        ok[i] = (uint8_t)rnd_int(0, 1);
    }
    DevValue *args[3] = {val(IR_F32, 2, (int64_t[]){4, 9}, x), val(IR_S32, 2, (int64_t[]){4, 9}, y),
                         val(IR_PRED, 2, (int64_t[]){4, 9}, ok)};
    DevValue *res[2];
    for (int slow = 0; slow < 2; slow++) {
        char txt[4096];
        snprintf(txt, sizeof txt, fmt, select_reducers[0], slow ? "\n  o0c = f32[] copy(o0)" : "", slow ? "c" : "");
        /* the argmax body names its value type %1$s: f32 here */
        char body[4096];
        snprintf(body, sizeof body, txt, "f32");
        IrModule *m = parse_ok(body);
        int32_t r = 0;
        while (r < m->ncomp && strcmp(m->comp[r]->name, "valid_or"))
            r++;
        IrSelectReducer sel;
        bool taken = ir_select_reducer(m, r, 3, (IrType[]){IR_F32, IR_S32, IR_PRED, IR_F32, IR_S32, IR_PRED}, &sel);
        assert_true(slow ? !taken : taken);
        ir_module_free(m);
        res[slow] = run(body, 3, args);
    }
    for (int j = 0; j < 3; j++)
        assert_memory_equal(res[0]->elems[j]->data, res[1]->elems[j]->data, (size_t)res[0]->elems[j]->nbytes);
    for (int k = 0; k < 2; k++)
        dev_value_unref(res[k]);
    for (int k = 0; k < 3; k++)
        dev_value_unref(args[k]);
}

/* A reducer of scalar elementwise ops (ir_scalar_computation) runs as a
 * program without the interpreter (reducer_scalar.c); the same body
 * behind a call, which only the interpreter runs, gives the same bits:
 * an (add, max) tuple with an exp, a constant and a copy, over random
 * f32 with a NaN, in a reduce of each dim and a reduce-window. */
static void test_reduce_scalar_program(void **state)
{
    (void)state;
    const char *fmt =
        "HloModule m\nbody {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n  h = f32[] constant(0.5)\n"
        "  e = f32[] exponential(c)\n  eh = f32[] multiply(e, h)\n  s = f32[] add(a, eh)\n"
        "  m = f32[] maximum(b, d)\n  mc = f32[] copy(m)\n  ROOT t = (f32[], f32[]) tuple(s, mc)\n}\n"
        "called {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n"
        "  ROOT t = (f32[], f32[]) call(a, b, c, d), to_apply=body\n}\n"
        "ENTRY e {\n  x = f32[6,5] parameter(0)\n  y = f32[6,5] parameter(1)\n"
        "  z = f32[] constant(0)\n  n = f32[] constant(-inf)\n"
        "  ROOT o = (f32%s, f32%s) %s(x, y, z, n), %s, to_apply=%s\n}\n";
    const char *ops[][3] = {{"reduce", "dimensions={0}", "[5]"},
                            {"reduce", "dimensions={1}", "[6]"},
                            {"reduce-window", "window={size=2x3 pad=1_0x0_2}", "[6,5]"}};
    float x[30], y[30];
    for (int i = 0; i < 30; i++) {
        x[i] = (float)rnd_int(-1000, 1000) / 397.0f;
        y[i] = (float)rnd_int(-1000, 1000) / 211.0f;
    }
    y[13] = NAN;
    for (int oi = 0; oi < 3; oi++) {
        DevValue *res[2];
        for (int slow = 0; slow < 2; slow++) {
            char txt[4096];
            snprintf(txt, sizeof txt, fmt, ops[oi][2], ops[oi][2], ops[oi][0], ops[oi][1], slow ? "called" : "body");
            IrModule *m = parse_ok(txt);
            int32_t r = 0;
            while (r < m->ncomp && strcmp(m->comp[r]->name, slow ? "called" : "body"))
                r++;
            assert_true(ir_scalar_computation(m, r) == !slow);
            ir_module_free(m);
            DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){6, 5}, x), val(IR_F32, 2, (int64_t[]){6, 5}, y)};
            res[slow] = run(txt, 2, args);
            dev_value_unref(args[0]);
            dev_value_unref(args[1]);
        }
        for (int j = 0; j < 2; j++)
            assert_memory_equal(res[0]->elems[j]->data, res[1]->elems[j]->data, (size_t)res[0]->elems[j]->nbytes);
        dev_value_unref(res[0]);
        dev_value_unref(res[1]);
    }
}

/* Fast path vs general path on random s32 data (exact), reducing several
 * dim sets of a [3,4,5,2] array; and a naive sum for one of them. */
static void test_reduce_fast_vs_general(void **state)
{
    (void)state;
    const char *sets[][2] = {{"0", "4,5,2"}, {"1,3", "3,5"}, {"0,2", "4,2"}, {"3", "3,4,5"},
                             {"0,1,2,3", ""}, {"2,1", "3,2"}};
    int32_t x[120];
    for (int i = 0; i < 120; i++)
        x[i] = rnd_int(-1000000, 1000000);
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        DevValue *res[2];
        for (int slow = 0; slow < 2; slow++) {
            char txt[2048];
            snprintf(txt, sizeof txt,
                     "HloModule m\n" COMPS("s32")
                     "ENTRY e {\n  x = s32[3,4,5,2] parameter(0)\n  z = s32[] constant(7)\n"
                     "  ROOT r = s32[%s] reduce(x, z), dimensions={%s}, to_apply=%s\n}\n",
                     sets[s][1], sets[s][0], slow ? "add_slow" : "add");
            res[slow] = run1(txt, val(IR_S32, 4, (int64_t[]){3, 4, 5, 2}, x));
        }
        assert_int_equal(res[0]->nbytes, res[1]->nbytes);
        assert_memory_equal(res[0]->data, res[1]->data, (size_t)res[0]->nbytes);
        if (s == 1) { /* dims {1,3}: out[a][c] = 7 + sum_{b,d} x[a][b][c][d] */
            int32_t want[15];
            for (int a = 0; a < 3; a++)
                for (int c = 0; c < 5; c++) {
                    int64_t sum = 7;
                    for (int b = 0; b < 4; b++)
                        for (int d = 0; d < 2; d++)
                            sum += x[((a * 4 + b) * 5 + c) * 2 + d];
                    want[a * 5 + c] = (int32_t)sum;
                }
            expect_s32(res[0], want, 15);
        }
        dev_value_unref(res[0]);
        dev_value_unref(res[1]);
    }
}

/* The column folds (kept dims innermost: batch norm's and the mean
 * pool's sums over NHWC) against a naive fold in the fast path's own
 * arithmetic, so exactly: each output starts at the init and takes its
 * inputs in increasing row-major order in double, rounded once. f32 and
 * f64 random values with NaNs, [3,4,5,C] reducing {0,1,2}, {1,2} and {0}
 * (C = 7, and 37 for the vector loops' remainders), add, max, min and
 * multiply; f64 values in an f64 reduce. */
static double naive_comb(const char *comp, double a, double b)
{
    if (!strcmp(comp, "add"))
        return a + b;
    if (!strcmp(comp, "mul"))
        return a * b;
    if (isnan(a) || isnan(b))
        return isnan(a) ? a : b;
    return !strcmp(comp, "max") ? (a >= b ? a : b) : (a <= b ? a : b);
}

/* reduce(x, init) of f32 or f64 (ty) shape in_shape to out_shape over
 * dims with reducer comp (add, max, min or mul), run; x is released. */
static DevValue *reduce_float(const char *ty, const char *comp, const char *init, const char *in_shape,
                              const char *out_shape, const char *dims, DevValue *x)
{
    char tmpl[2048], txt[4096];
    snprintf(tmpl, sizeof tmpl,
             "HloModule m\n" COMPS("@")
             "mul {\n  a = @[] parameter(0)\n  b = @[] parameter(1)\n"
             "  ROOT r = @[] multiply(a, b)\n}\n"
             "ENTRY e {\n  x = @[%s] parameter(0)\n  z = @[] constant(%s)\n"
             "  ROOT r = @[%s] reduce(x, z), dimensions={%s}, to_apply=%s\n}\n",
             in_shape, init, out_shape, dims, comp);
    size_t at = 0;
    for (const char *q = tmpl; *q && at + 4 < sizeof txt; q++) /* @ -> the type */
        if (*q == '@')
            at += (size_t)snprintf(txt + at, sizeof txt - at, "%s", ty);
        else
            txt[at++] = *q;
    txt[at] = 0;
    return run1(txt, x);
}

/* r holds want's nout values exactly (rounded to f32 unless wide), NaN
 * where want is; what names the case in a failure. r is released. */
static void expect_float_exact(DevValue *r, bool wide, const double *want, int64_t nout, const char *what)
{
    assert_int_equal(dev_value_elements(r), nout);
    for (int64_t j = 0; j < nout; j++) {
        double got = wide ? ((const double *)r->data)[j] : ((const float *)r->data)[j];
        double w = wide ? want[j] : (float)want[j];
        if (isnan(w) ? !isnan(got) : got != w) {
            print_message("%s element %lld: got %.17g want %.17g\n", what, (long long)j, got, w);
            fail();
        }
    }
    dev_value_unref(r);
}

static void test_reduce_column_folds(void **state)
{
    (void)state;
    const char *comps[][2] = {{"add", "0.5"}, {"max", "-inf"}, {"min", "inf"}, {"mul", "1"}};
    const char *sets[][2] = {{"0,1,2", "%d"}, {"1,2", "3,%d"}, {"0", "4,5,%d"}};
    const bool red[][4] = {{1, 1, 1, 0}, {0, 1, 1, 0}, {1, 0, 0, 0}};
    for (int wide = 0; wide < 2; wide++)
        for (int c = 7; c <= 37; c += 30)
            for (size_t s = 0; s < 3; s++)
                for (size_t o = 0; o < 4; o++) {
                    const char *ty = wide ? "f64" : "f32";
                    int64_t dims[4] = {3, 4, 5, c}, n = 60 * c;
                    double *x = malloc((size_t)n * sizeof *x), *want = malloc((size_t)n * sizeof *want);
                    float *xf = malloc((size_t)n * sizeof *xf);
                    assert_non_null(x);
                    assert_non_null(want);
                    assert_non_null(xf);
                    for (int64_t i = 0; i < n; i++) {
                        x[i] = rnd_int(-1000000, 1000000) / 999983.0;
                        if (!strcmp(comps[o][0], "mul"))
                            x[i] = 1 + x[i] / 64;
                        if (rnd_int(0, 150) == 0)
                            x[i] = NAN;
                        xf[i] = (float)x[i];
                        if (!wide)
                            x[i] = xf[i];
                    }
                    double init = strtod(comps[o][1], NULL);
                    int64_t nout = 0;
                    for (int64_t i = 0; i < n; i++) { /* output index of input i */
                        int64_t rem = i, co[4], k = 0;
                        for (int d = 3; d >= 0; d--)
                            co[d] = rem % dims[d], rem /= dims[d];
                        for (int d = 0; d < 4; d++)
                            if (!red[s][d])
                                k = k * dims[d] + co[d];
                        if (k >= nout) {
                            for (int64_t j = nout; j <= k; j++)
                                want[j] = init;
                            nout = k + 1;
                        }
                        want[k] = naive_comb(comps[o][0], want[k], x[i]);
                    }
                    char shape[32], in[32], what[128];
                    snprintf(shape, sizeof shape, sets[s][1], c);
                    snprintf(in, sizeof in, "3,4,5,%d", c);
                    snprintf(what, sizeof what, "%s %s {%s} C=%d", ty, comps[o][0], sets[s][0], c);
                    DevValue *xv = val(wide ? IR_F64 : IR_F32, 4, dims, wide ? (void *)x : (void *)xf);
                    expect_float_exact(reduce_float(ty, comps[o][0], comps[o][1], in, shape, sets[s][0], xv), wide,
                                       want, nout, what);
                    free(x);
                    free(xf);
                    free(want);
                }
}

/* A reduced innermost run of f32 or f64 (a row: softmax's sums) folds in
 * 8 interleaved lanes (reducer.c's dev_red_fold_lanes), as the fused row
 * group does: lane j takes elements j, j + 8, ... of a run of 16 or more
 * from the first 8, the lanes then fold into the accumulator in lane
 * order and the tail after the last full round follows. Checked exactly
 * against that order written out here, on random values with NaNs:
 * [3,5,C] reducing {2} (a run a row), {0,2} (three runs into each
 * output, each continuing from the last), {1,2} and {0,1,2} (one long
 * run), C = 7 (under 16: in order), 37 (a tail) and 512, add, max, min and
 * multiply, f32 and f64. The sums must differ from a sequential fold
 * somewhere (else this would not test the order). */
static double lanes_ref(const char *comp, double a, const double *x, int64_t n)
{
    int64_t i = 0;
    if (n >= 16) {
        double acc[8];
        for (int j = 0; j < 8; j++)
            acc[j] = x[j];
        for (i = 8; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] = naive_comb(comp, acc[j], x[i + j]);
        for (int j = 0; j < 8; j++)
            a = naive_comb(comp, a, acc[j]);
    }
    for (; i < n; i++)
        a = naive_comb(comp, a, x[i]);
    return a;
}

static void test_reduce_row_lanes(void **state)
{
    (void)state;
    const char *comps[][2] = {{"add", "0.5"}, {"max", "-inf"}, {"min", "inf"}, {"mul", "1"}};
    const char *sets[][2] = {{"2", "3,5"}, {"0,2", "5"}, {"1,2", "3"}, {"0,1,2", ""}};
    const int cs[] = {7, 37, 512};
    int sums_differ = 0;
    for (int wide = 0; wide < 2; wide++)
        for (size_t ci = 0; ci < 3; ci++)
            for (size_t s = 0; s < 4; s++)
                for (size_t o = 0; o < 4; o++) {
                    const char *ty = wide ? "f64" : "f32";
                    int c = cs[ci];
                    int64_t dims[3] = {3, 5, c}, n = 15 * c;
                    double *x = malloc((size_t)n * sizeof *x), want[15], seq[15];
                    float *xf = malloc((size_t)n * sizeof *xf);
                    assert_non_null(x);
                    assert_non_null(xf);
                    for (int64_t i = 0; i < n; i++) {
                        x[i] = rnd_int(-1000000, 1000000) / 999983.0;
                        if (!strcmp(comps[o][0], "mul"))
                            x[i] = 1 + x[i] / 1024;
                        if (rnd_int(0, 600) == 0)
                            x[i] = NAN;
                        xf[i] = (float)x[i];
                        if (!wide)
                            x[i] = xf[i];
                    }
                    double init = strtod(comps[o][1], NULL);
                    /* The runs in input order, each into its output. */
                    int64_t run = s == 0 || s == 1 ? c : s == 2 ? 5 * c : 15 * c;
                    int64_t nout = s == 0 ? 15 : s == 1 ? 5 : s == 2 ? 3 : 1;
                    for (int64_t k = 0; k < nout; k++)
                        want[k] = seq[k] = init;
                    for (int64_t r0 = 0; r0 < n; r0 += run) {
                        int64_t k = s == 1 ? (r0 / c) % 5 : r0 / run;
                        want[k] = lanes_ref(comps[o][0], want[k], x + r0, run);
                        for (int64_t i = 0; i < run; i++)
                            seq[k] = naive_comb(comps[o][0], seq[k], x[r0 + i]);
                    }
                    char in[32], what[128];
                    snprintf(in, sizeof in, "3,5,%d", c);
                    snprintf(what, sizeof what, "%s %s {%s} C=%d", ty, comps[o][0], sets[s][0], c);
                    for (int64_t j = 0; j < nout; j++)
                        if (wide && !strcmp(comps[o][0], "add") && !isnan(want[j]) && want[j] != seq[j])
                            sums_differ++;
                    DevValue *xv = val(wide ? IR_F64 : IR_F32, 3, dims, wide ? (void *)x : (void *)xf);
                    expect_float_exact(reduce_float(ty, comps[o][0], comps[o][1], in, sets[s][1], sets[s][0], xv),
                                       wide, want, nout, what);
                    free(x);
                    free(xf);
                }
    assert_true(sums_differ > 0);
}

/* ------------------------------------------------------------------ */
/* reduce-window                                                       */
/* ------------------------------------------------------------------ */

static DevValue *reduce_window_f32(const char *in_shape, const char *out_shape, const char *window,
                                   const char *init, const char *comp, DevValue *x)
{
    char txt[2048];
    snprintf(txt, sizeof txt,
             "HloModule m\n" COMPS("f32")
             "ENTRY e {\n  x = f32[%s] parameter(0)\n  z = f32[] constant(%s)\n"
             "  ROOT r = f32[%s] reduce-window(x, z), window={%s}, to_apply=%s\n}\n",
             in_shape, init, out_shape, window, comp);
    return run1(txt, x);
}

/* 1-D sums: {1,2,3,4}, size 2, pad 0_1 -> {3,5,7,4} (the padded position
 * is skipped). Stride 2 -> {3,7}. */
static void test_reduce_window_1d(void **state)
{
    (void)state;
    float x[] = {1, 2, 3, 4};
    for (int slow = 0; slow < 2; slow++) {
        const char *comp = slow ? "add_slow" : "add";
        DevValue *r = reduce_window_f32("4", "4", "size=2 pad=0_1", "0", comp,
                                        val(IR_F32, 1, (int64_t[]){4}, x));
        expect_f32(r, (float[]){3, 5, 7, 4}, 4);
        dev_value_unref(r);
        r = reduce_window_f32("4", "2", "size=2 stride=2", "0", comp, val(IR_F32, 1, (int64_t[]){4}, x));
        expect_f32(r, (float[]){3, 7}, 2);
        dev_value_unref(r);
    }
}

/* 2x2 max pool, stride 2, on iota 4x4 {0..15}: {5,7,13,15}. */
static void test_reduce_window_maxpool(void **state)
{
    (void)state;
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    DevValue *r = reduce_window_f32("4,4", "2,2", "size=2x2 stride=2x2", "-inf", "max",
                                    val(IR_F32, 2, (int64_t[]){4, 4}, x));
    expect_f32(r, (float[]){5, 7, 13, 15}, 4);
    dev_value_unref(r);
    /* 3x3 window, stride 1, pad 1_1 on both dims (SAME): corners see a 2x2
     * block: out[0][0] = max{0,1,4,5} = 5, out[3][3] = 15, out[1][1] = 10. */
    r = reduce_window_f32("4,4", "4,4", "size=3x3 pad=1_1x1_1", "-inf", "max",
                          val(IR_F32, 2, (int64_t[]){4, 4}, x));
    expect_f32(r, (float[]){5, 6, 7, 7, 9, 10, 11, 11, 13, 14, 15, 15, 13, 14, 15, 15}, 16);
    dev_value_unref(r);
}

/* Base dilation {1,2,3} -> {1,_,2,_,3}, size 2: {1, 2, 2, 3}.
 * Window dilation {1,2,3,4,5}, size 2 rhs_dilate 2: {1+3, 2+4, 3+5}.
 * A non-identity init with padding is applied once: init 10,
 * {1,2,3} size 3 pad 1_1 -> {10+1+2, 10+1+2+3, 10+2+3}. */
static void test_reduce_window_dilation_padding(void **state)
{
    (void)state;
    for (int slow = 0; slow < 2; slow++) {
        const char *comp = slow ? "add_slow" : "add";
        DevValue *r = reduce_window_f32("3", "4", "size=2 lhs_dilate=2", "0", comp,
                                        val(IR_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3}));
        expect_f32(r, (float[]){1, 2, 2, 3}, 4);
        dev_value_unref(r);
        r = reduce_window_f32("5", "3", "size=2 rhs_dilate=2", "0", comp,
                              val(IR_F32, 1, (int64_t[]){5}, (float[]){1, 2, 3, 4, 5}));
        expect_f32(r, (float[]){4, 6, 8}, 3);
        dev_value_unref(r);
        r = reduce_window_f32("3", "3", "size=3 pad=1_1", "10", comp,
                              val(IR_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3}));
        expect_f32(r, (float[]){13, 16, 15}, 3);
        dev_value_unref(r);
    }
    /* Negative padding crops: {1,2,3,4}, size 1, pad -1_-1 -> {2,3}. */
    DevValue *r = reduce_window_f32("4", "2", "size=1 pad=-1_-1", "0", "add",
                                    val(IR_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4}));
    expect_f32(r, (float[]){2, 3}, 2);
    dev_value_unref(r);
}

/* Variadic reduce-window: running (max, argmax) over windows of 2 of
 * {3,1,4,1,5}: values {3,4,4,5}, indices {0,2,2,4}. */
static void test_reduce_window_variadic(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nargmax {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = s32[] parameter(3)\n"
        "  ge = pred[] compare(a, c), direction=GE\n"
        "  v = f32[] select(ge, a, c)\n  i = s32[] select(ge, b, d)\n"
        "  ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
        "ENTRY e {\n  x = f32[5] parameter(0)\n  y = s32[5] parameter(1)\n"
        "  m = f32[] constant(-inf)\n  z = s32[] constant(-1)\n"
        "  ROOT r = (f32[4], s32[4]) reduce-window(x, y, m, z), window={size=2}, to_apply=argmax\n}\n";
    DevValue *args[2] = {val(IR_F32, 1, (int64_t[]){5}, (float[]){3, 1, 4, 1, 5}),
                         val(IR_S32, 1, (int64_t[]){5}, (int32_t[]){0, 1, 2, 3, 4})};
    DevValue *r = run(txt, 2, args);
    expect_f32(r->elems[0], (float[]){3, 4, 4, 5}, 4);
    expect_s32(r->elems[1], (int32_t[]){0, 2, 2, 4}, 4);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Fast vs general on random s32, 2-D with every window feature at once. */
static void test_reduce_window_fast_vs_general(void **state)
{
    (void)state;
    int32_t x[42];
    for (int i = 0; i < 42; i++)
        x[i] = rnd_int(-1000, 1000);
    DevValue *res[2];
    /* dim 0: 6 -> dilated 11, pad 2_1 -> 14, window 3 dilated 2 -> 5: (14-5)/2+1 = 5;
     * dim 1: 7, pad -1_0 -> 6, window 2: 5. */
    for (int slow = 0; slow < 2; slow++) {
        char txt[2048];
        snprintf(txt, sizeof txt,
                 "HloModule m\n" COMPS("s32")
                 "ENTRY e {\n  x = s32[6,7] parameter(0)\n  z = s32[] constant(3)\n"
                 "  ROOT r = s32[5,5] reduce-window(x, z), window={size=3x2 stride=2x1 pad=2_1x-1_0"
                 " lhs_dilate=2x1 rhs_dilate=2x1}, to_apply=%s\n}\n",
                 slow ? "add_slow" : "add");
        res[slow] = run1(txt, val(IR_S32, 2, (int64_t[]){6, 7}, x));
    }
    assert_memory_equal(res[0]->data, res[1]->data, 100);
    /* out[0][0]: dim 0 positions u = 0*2-2 + {0,2,4} = -2, 0, 2 -> input rows
     * 0 (u=0) and 1 (u=2); dim 1 positions 0*1+1 + {0,1} -> cols 1, 2. */
    int32_t want00 = 3 + x[0 * 7 + 1] + x[0 * 7 + 2] + x[1 * 7 + 1] + x[1 * 7 + 2];
    assert_int_equal(((int32_t *)res[0]->data)[0], want00);
    dev_value_unref(res[0]);
    dev_value_unref(res[1]);
}

/* ------------------------------------------------------------------ */
/* select-and-scatter                                                  */
/* ------------------------------------------------------------------ */

static DevValue *sas_f32(const char *shape, const char *src_shape, const char *window,
                         const char *select, DevValue *x, DevValue *src)
{
    char txt[2048];
    snprintf(txt, sizeof txt,
             "HloModule m\n" COMPS("f32")
             "ge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  ROOT r = pred[] compare(a, b), direction=GE\n}\n"
             "gt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  ROOT r = pred[] compare(a, b), direction=GT\n}\n"
             "ge_slow {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  lt = pred[] compare(a, b), direction=LT\n  ROOT r = pred[] not(lt)\n}\n"
             "ENTRY e {\n  x = f32[%s] parameter(0)\n  s = f32[%s] parameter(1)\n"
             "  z = f32[] constant(0)\n"
             "  ROOT r = f32[%s] select-and-scatter(x, s, z), window={%s}, select=%s,"
             " scatter=%s\n}\n",
             shape, src_shape, shape, window, select, strstr(select, "slow") ? "add_slow" : "add");
    DevValue *args[2] = {x, src};
    DevValue *r = run(txt, 2, args);
    dev_value_unref(x);
    dev_value_unref(src);
    return r;
}

/* {1,3,3,2}, windows of 2 stride 2, source {10,20}: window {1,3} picks
 * index 1, window {3,2} picks index 2 -> {0,10,20,0}. */
static void test_sas_hand(void **state)
{
    (void)state;
    const char *sels[] = {"ge", "ge_slow"};
    for (int i = 0; i < 2; i++) {
        DevValue *r = sas_f32("4", "2", "size=2 stride=2", sels[i],
                              val(IR_F32, 1, (int64_t[]){4}, (float[]){1, 3, 3, 2}),
                              val(IR_F32, 1, (int64_t[]){2}, (float[]){10, 20}));
        expect_f32(r, (float[]){0, 10, 20, 0}, 4);
        dev_value_unref(r);
    }
}

/* Ties: {5,5,1,1}: with GE the first of equal elements stays selected
 * ({10,0,20,0}); with GT each later equal element replaces it
 * ({0,10,0,20}). */
static void test_sas_ties(void **state)
{
    (void)state;
    const char *sels[] = {"ge", "ge_slow", "gt"};
    const float want[][4] = {{10, 0, 20, 0}, {10, 0, 20, 0}, {0, 10, 0, 20}};
    for (int i = 0; i < 3; i++) {
        DevValue *r = sas_f32("4", "2", "size=2 stride=2", sels[i],
                              val(IR_F32, 1, (int64_t[]){4}, (float[]){5, 5, 1, 1}),
                              val(IR_F32, 1, (int64_t[]){2}, (float[]){10, 20}));
        expect_f32(r, want[i], 4);
        dev_value_unref(r);
    }
}

/* Overlapping windows accumulate: {1,5,2}, size 2 stride 1, source {1,2}:
 * both windows pick index 1 -> {0,3,0}. Padding is never selected:
 * {-1,-2}, size 2 pad 1_0 (source 2): window {pad,-1} -> index 0 even
 * though the init-like padding would be larger; {-1,-2} -> index 0 ->
 * {1+2, 0}. */
static void test_sas_overlap_and_padding(void **state)
{
    (void)state;
    DevValue *r = sas_f32("3", "2", "size=2", "ge", val(IR_F32, 1, (int64_t[]){3}, (float[]){1, 5, 2}),
                          val(IR_F32, 1, (int64_t[]){2}, (float[]){1, 2}));
    expect_f32(r, (float[]){0, 3, 0}, 3);
    dev_value_unref(r);
    for (int i = 0; i < 2; i++) {
        r = sas_f32("2", "2", "size=2 pad=1_0", i ? "ge_slow" : "ge",
                    val(IR_F32, 1, (int64_t[]){2}, (float[]){-1, -2}),
                    val(IR_F32, 1, (int64_t[]){2}, (float[]){1, 2}));
        expect_f32(r, (float[]){3, 0}, 2);
        dev_value_unref(r);
    }
}

/* A 2-D max-pool gradient: 4x4 {0..15} with a 1 at (0,0) raised to 20,
 * windows 2x2 stride 2, source {1,2,3,4}: maxima at (0,0)=20, (1,3)=7,
 * (3,1)=13, (3,3)=15. */
static void test_sas_2d(void **state)
{
    (void)state;
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    x[0] = 20;
    float want[16] = {0};
    want[0] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
    const char *sels[] = {"ge", "ge_slow"};
    for (int i = 0; i < 2; i++) {
        DevValue *r = sas_f32("4,4", "2,2", "size=2x2 stride=2x2", sels[i],
                              val(IR_F32, 2, (int64_t[]){4, 4}, x),
                              val(IR_F32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4}));
        expect_f32(r, want, 16);
        dev_value_unref(r);
    }
}

/* Failure injection over the general paths (argument slots, results). */
static void test_reduce_oom(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\n" COMPS("f32")
        "ge_slow {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  lt = pred[] compare(a, b), direction=LT\n  ROOT r = pred[] not(lt)\n}\n"
        "ENTRY e {\n  x = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n"
        "  a = f32[4] reduce(x, z), dimensions={0}, to_apply=add_slow\n"
        "  b = f32[2,2] reduce-window(x, z), window={size=2x2 stride=2x2}, to_apply=add_slow\n"
        "  c = f32[4,4] select-and-scatter(x, b, z), window={size=2x2 stride=2x2},"
        " select=ge_slow, scatter=add_slow\n"
        "  d = f32[2,2] reduce-window(c, z), window={size=2x2 stride=2x2}, to_apply=max\n"
        "  ROOT t = (f32[4], f32[2,2]) tuple(a, d)\n}\n";
    IrModule *m = parse_ok(txt);
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)((i * 7) % 16);
    DevValue *arg = val(IR_F32, 2, (int64_t[]){4, 4}, x), *ref = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_module(m, 1, &arg, &ref, &d), IR_OK);
    int failures = 0;
    for (long n = 1; n < 100000; n++) {
        DevValue *out = NULL;
        ts_fail_alloc_after(n);
        IrStatus st = exec_module(m, 1, &arg, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            assert_memory_equal(out->elems[0]->data, ref->elems[0]->data, 16);
            assert_memory_equal(out->elems[1]->data, ref->elems[1]->data, 16);
            dev_value_unref(out);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        ir_diag_clear(&d);
        failures++;
    }
    assert_true(failures > 3);
    dev_value_unref(ref);
    dev_value_unref(arg);
    ir_module_free(m);
}

/* A reducer that fails at run time (a custom-call nobody registered):
 * the error comes back through the kernel. */
static void test_reduce_reducer_error(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nbad {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT r = f32[] custom-call(a, b), custom_call_target=\"nope\"\n}\n"
        "ENTRY e {\n  x = f32[3] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=bad\n}\n";
    IrModule *m = parse_ok(txt);
    DevValue *arg = val(IR_F32, 1, (int64_t[]){3}, NULL), *out = NULL;
    IrDiag d = {0};
    assert_int_not_equal(exec_module(m, 1, &arg, &out, &d), IR_OK);
    assert_null(out);
    assert_non_null(d.msg);
    ir_diag_clear(&d);
    dev_value_unref(arg);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_hand),
        cmocka_unit_test(test_reduce_nan),
        cmocka_unit_test(test_reduce_empty),
        cmocka_unit_test(test_reduce_int_wraps),
        cmocka_unit_test(test_reduce_pred),
        cmocka_unit_test(test_reduce_f16_wide_accumulator),
        cmocka_unit_test(test_reduce_variadic_argmax),
        cmocka_unit_test(test_reduce_argmax_columns),
        cmocka_unit_test(test_reduce_select_table),
        cmocka_unit_test(test_reduce_select_lifted),
        cmocka_unit_test(test_reduce_scalar_program),
        cmocka_unit_test(test_reduce_fast_vs_general),
        cmocka_unit_test(test_reduce_column_folds),
        cmocka_unit_test(test_reduce_row_lanes),
        cmocka_unit_test(test_reduce_window_1d),
        cmocka_unit_test(test_reduce_window_maxpool),
        cmocka_unit_test(test_reduce_window_dilation_padding),
        cmocka_unit_test(test_reduce_window_variadic),
        cmocka_unit_test(test_reduce_window_fast_vs_general),
        cmocka_unit_test(test_sas_hand),
        cmocka_unit_test(test_sas_ties),
        cmocka_unit_test(test_sas_overlap_and_padding),
        cmocka_unit_test(test_sas_2d),
        cmocka_unit_test(test_reduce_oom),
        cmocka_unit_test(test_reduce_reducer_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
