/*
 * test_k_topk.c: topk and the TopK custom-call (device/k_topk.c) through
 * dev_execute, on cases worked out by hand in the comments: XLA's total
 * order on floats (NaN, infinities, signed zeros), ties in index order,
 * k = 0, unsigned 64-bit keys, and TopK comparators that are run as sort
 * runs them.
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

static DevValue *run_text(const char *txt, DevValue *arg, IrStatus want, IrDiag *keep)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = exec_module(m, 1, &arg, &out, &d);
    if (st != want)
        print_message("status %d: %s\n", st, d.msg ? d.msg : "");
    assert_int_equal(st, want);
    if (keep)
        *keep = d;
    else
        ir_diag_clear(&d);
    ir_module_free(m);
    return out;
}

/* x = {1, NaN, -inf, -0, +0, 1, -NaN, inf}. Total order, largest first:
 * +NaN(1) inf(7) 1(0) 1(5) +0(4) -0(3) -inf(2) -NaN(6); the two 1s keep
 * index order. Smallest first (largest=false): -NaN(6) -inf(2) -0(3) +0(4)
 * 1(0) 1(5) inf(7) NaN(1). */
static void test_total_order(void **state)
{
    (void)state;
    int64_t d[1] = {8};
    const float x[8] = {1, NAN, -INFINITY, -0.0f, 0.0f, 1, -NAN, INFINITY};
    const int32_t desc[8] = {1, 7, 0, 5, 4, 3, 2, 6}, asc[8] = {6, 2, 3, 4, 0, 5, 7, 1};
    const char *fmt = "HloModule t\nENTRY e {\n  x = f32[8] parameter(0)\n"
                      "  ROOT t = (f32[8], s32[8]) topk(x), k=8, largest=%s\n}\n";
    for (int largest = 0; largest < 2; largest++) {
        char txt[256];
        snprintf(txt, sizeof txt, fmt, largest ? "true" : "false");
        DevValue *v = val(IR_F32, 1, d, x);
        DevValue *r = run_text(txt, v, IR_OK, NULL);
        const int32_t *want = largest ? desc : asc;
        assert_memory_equal(r->elems[1]->data, want, sizeof desc);
        for (int i = 0; i < 8; i++)   /* values are the input's bits, sign of NaN and zero kept */
            assert_memory_equal(&((float *)r->elems[0]->data)[i], &x[want[i]], sizeof(float));
        dev_value_unref(r);
        dev_value_unref(v);
    }
}

/* u64 keys above 2^63 order as unsigned: {2^63, 1, 2^64-1} -> largest 2:
 * 2^64-1 (2), 2^63 (0). k = 0 gives empty results. */
static void test_unsigned_and_k0(void **state)
{
    (void)state;
    int64_t d[1] = {3};
    const uint64_t x[3] = {UINT64_C(1) << 63, 1, UINT64_MAX};
    DevValue *v = val(IR_U64, 1, d, x);
    DevValue *r = run_text("HloModule t\nENTRY e {\n  x = u64[3] parameter(0)\n"
                           "  ROOT t = (u64[2], s32[2]) topk(x), k=2\n}\n", v, IR_OK, NULL);
    const int32_t want[2] = {2, 0};
    assert_memory_equal(r->elems[1]->data, want, sizeof want);
    dev_value_unref(r);
    r = run_text("HloModule t\nENTRY e {\n  x = u64[3] parameter(0)\n"
                 "  ROOT t = (u64[0], s32[0]) topk(x), k=0\n}\n", v, IR_OK, NULL);
    assert_int_equal(dev_value_elements(r->elems[0]), 0);
    dev_value_unref(r);
    dev_value_unref(v);
}

/* TopK with a comparator that is not a compare of parameters 0 and 1
 * runs it, as sort would, on (value, index) pairs, stably. XLA's CPU
 * pipeline writes the total order out: bitcast to s32, negatives' bits
 * flipped (xor 0x7fffffff), compare GT. Rows {-1, 3, -2, 3} and
 * {-0, +0, -5, 2}: the two largest are 3 (index 1), 3 (index 3) -- a tie,
 * index order -- and 2 (3), +0 (1): -0's key is -1, below +0's 0.
 * compare(a, a), GT puts nothing before anything: the first two as they
 * are, {-1, 3} (0, 1) and {-0, +0} (0, 1). */
static void test_custom_comparators(void **state)
{
    (void)state;
    int64_t d[2] = {2, 4};
    const float x[8] = {-1, 3, -2, 3, -0.0f, 0.0f, -5, 2};
    DevValue *v = val(IR_F32, 2, d, x);
    const char *fmt = "HloModule t\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                      "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n"
                      "  z = s32[] constant(0)\n  m = s32[] constant(2147483647)\n"
                      "  ba = s32[] bitcast(a)\n  bb = s32[] bitcast(b)\n"
                      "  xa = s32[] xor(m, ba)\n  xb = s32[] xor(m, bb)\n"
                      "  na = pred[] compare(ba, z), direction=LT\n  nb = pred[] compare(bb, z), direction=LT\n"
                      "  ka = s32[] select(na, xa, ba)\n  kb = s32[] select(nb, xb, bb)\n"
                      "  ROOT c = pred[] compare(%s), direction=GT\n}\nENTRY e {\n"
                      "  x = f32[2,4] parameter(0)\n"
                      "  ROOT t = (f32[2,2], s32[2,2]) custom-call(x), custom_call_target=\"TopK\", "
                      "called_computations={cmp}\n}\n";
    const char *ops[2] = {"ka, kb", "a, a"};
    const float want_v[2][4] = {{3, 3, 2, 0.0f}, {-1, 3, -0.0f, 0.0f}};
    const int32_t want_i[2][4] = {{1, 3, 3, 1}, {0, 1, 0, 1}};
    for (int c = 0; c < 2; c++) {
        char txt[1200];
        snprintf(txt, sizeof txt, fmt, ops[c]);
        DevValue *r = run_text(txt, v, IR_OK, NULL);
        const float *got = (const float *)r->elems[0]->data;
        for (int k = 0; k < 4; k++) {
            assert_true(got[k] == want_v[c][k]);
            assert_int_equal(signbit(got[k]) != 0, signbit(want_v[c][k]) != 0);
        }
        assert_memory_equal(r->elems[1]->data, want_i[c], sizeof want_i[c]);
        dev_value_unref(r);
    }
    dev_value_unref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_total_order),
        cmocka_unit_test(test_unsigned_and_k0),
        cmocka_unit_test(test_custom_comparators),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
