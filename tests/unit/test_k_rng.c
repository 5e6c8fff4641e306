/*
 * test_k_rng.c: device/k_rng.c. The block functions against Random123's
 * published known-answer vectors (kat_vectors: threefry2x32_20 and
 * philox4x32_10), rng-bit-generator's layout against what XLA's CPU
 * runtime prints (r-xla/anvil's reference page for nvl_rng_bit_generator:
 * state {0, 0}, THREE_FRY, ui32[3,2] -> 1.7973e+09 2.5791e+09 / 1.3515e+09
 * 3.2358e+09 / 1.6886e+09 4.2293e+09, new state {0, 3}), and
 * stochastic-convert against values worked out by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/device.h"
#include "kernel_test.h"

#include <math.h>

static void test_threefry_kat(void **state)
{
    (void)state;
    static const uint32_t v[3][6] = {
        /* ctr0, ctr1, key0, key1 -> out0, out1 */
        {0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xc4923a9cu, 0x483df7a0u},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t o[2];
        dev_threefry2x32(v[i], v[i] + 2, o);
        assert_int_equal(o[0], v[i][4]);
        assert_int_equal(o[1], v[i][5]);
    }
}

static void test_philox_kat(void **state)
{
    (void)state;
    static const uint32_t v[3][10] = {
        /* ctr0..3, key0, key1 -> out0..3 */
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t o[4];
        dev_philox4x32(v[i], v[i] + 4, o);
        for (int j = 0; j < 4; j++)
            assert_int_equal(o[j], v[i][6 + j]);
    }
}

static DevValue *run1(const char *txt, DevValue *arg)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = exec_module(m, arg ? 1 : 0, &arg, &out, &d);
    if (st != IR_OK)
        print_message("%s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    ir_module_free(m);
    dev_value_unref(arg);
    return out;
}

/* Within 5 significant digits of what anvil printed. */
static void near5(uint32_t got, double printed)
{
    assert_true(fabs((double)got - printed) <= 0.00005 * printed * 10);
}

static void test_threefry_layout_as_xla(void **state)
{
    (void)state;
    uint64_t s0[2] = {0, 0};
    DevValue *out = run1("HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                         "  ROOT r = (u64[2], u32[3,2]) rng-bit-generator(s), algorithm=rng_three_fry\n}\n",
                         val(IR_U64, 1, (int64_t[]){2}, s0));
    const uint64_t *ns = (const uint64_t *)out->elems[0]->data;
    const uint32_t *b = (const uint32_t *)out->elems[1]->data;
    assert_true(ns[0] == 0 && ns[1] == 3);
    assert_int_equal(b[0], 0x6b200159u); /* = threefry({0,0},{0,0}), Random123's first vector */
    assert_int_equal(b[1], 0x99ba4efeu);
    near5(b[2], 1.3515e9);
    near5(b[3], 3.2358e9);
    near5(b[4], 1.6886e9);
    near5(b[5], 4.2293e9);
    dev_value_unref(out);
}

/* Philox, u64[2] state {key 0, counter 0}: the counter's high word is the
 * key (0), so block 0 is Random123's all-zero vector; u32[5] takes block
 * 0's four words and block 1's first; new state {0, 2}. u64[3] state
 * {0, 0, 0} gives the same words, u64 outputs pair them (lo, hi). */
static void test_philox_layout(void **state)
{
    (void)state;
    uint64_t s0[2] = {0, 0};
    DevValue *out = run1("HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                         "  ROOT r = (u64[2], u32[5]) rng-bit-generator(s), algorithm=rng_default\n}\n",
                         val(IR_U64, 1, (int64_t[]){2}, s0));
    const uint64_t *ns = (const uint64_t *)out->elems[0]->data;
    const uint32_t *b = (const uint32_t *)out->elems[1]->data;
    assert_true(ns[0] == 0 && ns[1] == 2);
    assert_int_equal(b[0], 0x6627e8d5u);
    assert_int_equal(b[3], 0x9b00dbd8u);
    uint32_t c1[4] = {1, 0, 0, 0}, k0[2] = {0, 0}, o[4];
    dev_philox4x32(c1, k0, o);
    assert_int_equal(b[4], o[0]);
    dev_value_unref(out);
    uint64_t s3[3] = {0, 0, 0};
    out = run1("HloModule m\nENTRY e {\n  s = u64[3] parameter(0)\n"
               "  ROOT r = (u64[3], u64[3]) rng-bit-generator(s), algorithm=rng_philox\n}\n",
               val(IR_U64, 1, (int64_t[]){3}, s3));
    const uint64_t *w = (const uint64_t *)out->elems[1]->data;
    ns = (const uint64_t *)out->elems[0]->data;
    assert_true(w[0] == (0xe169c58dull << 32 | 0x6627e8d5u));
    assert_true(w[1] == (0x9b00dbd8ull << 32 | 0xbc57ac4cu));
    assert_true(w[2] == ((uint64_t)o[1] << 32 | o[0]));
    assert_true(ns[1] == 2 && ns[2] == 0);
    dev_value_unref(out);
}

/* s8 from f32 with u32 random bits: 2.25 has fraction 0.25 -> fixed
 * 0x40000000: random 0x3fffffff < fixed rounds up to 3, 0x40000000 does
 * not (2); -2.25 the same negated; 1000 clamps to 127; -1000 to -128; NaN
 * gives 0; 5.0 (no fraction) stays 5 whatever the bits. */
static void test_stochastic_convert(void **state)
{
    (void)state;
    float x[7] = {2.25f, 2.25f, -2.25f, 1000.0f, -1000.0f, NAN, 5.0f};
    uint32_t r[7] = {0x3fffffffu, 0x40000000u, 0x3fffffffu, 0, 0, 0, 0};
    /* Parsed unverified: the verifier's shape rule for stochastic-convert
     * is another area's (ir/infer.c) and may not be there yet. */
    const char *txt = "HloModule m\nENTRY e {\n  x = f32[7] parameter(0)\n  r = u32[7] parameter(1)\n"
                      "  ROOT c = s8[7] stochastic-convert(x, r)\n}\n";
    IrParseOptions po = ir_default_parse_options();
    po.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("t.hlo", txt, strlen(txt), &po, &m, &d), IR_OK);
    DevValue *a[2] = {val(IR_F32, 1, (int64_t[]){7}, x), val(IR_U32, 1, (int64_t[]){7}, r)};
    DevValue *out = NULL;
    assert_int_equal(exec_module(m, 2, a, &out, &d), IR_OK);
    static const int8_t want[7] = {3, 2, -3, 127, -128, 0, 5};
    assert_memory_equal(out->data, want, 7);
    dev_value_unref(out);
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
    ir_module_free(m);
}

/* rng uniform: in [a, b), the same on every run with the same seed. */
static void test_rng_uniform(void **state)
{
    (void)state;
    const char *txt = "HloModule m\nENTRY e {\n  a = f32[] constant(-2)\n  b = f32[] constant(3)\n"
                      "  ROOT r = f32[64] rng(a, b), distribution=rng_uniform\n}\n";
    DevValue *x = run1(txt, NULL), *y = run1(txt, NULL);
    const float *p = (const float *)x->data;
    double lo = 9, hi = -9;
    for (int i = 0; i < 64; i++) {
        assert_true(p[i] >= -2 && p[i] < 3);
        lo = fmin(lo, p[i]);
        hi = fmax(hi, p[i]);
    }
    assert_true(lo < -1 && hi > 2); /* spread over the range, not constant */
    assert_memory_equal(x->data, y->data, 64 * 4);
    dev_value_unref(x);
    dev_value_unref(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threefry_kat),
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_threefry_layout_as_xla),
        cmocka_unit_test(test_philox_layout),
        cmocka_unit_test(test_stochastic_convert),
        cmocka_unit_test(test_rng_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
