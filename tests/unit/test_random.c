/*
 * test_random.c: the deterministic random inputs (runtime/random.c) against
 * the test vectors of DESIGN.md, bit for bit, plus f16/bf16 vectors and
 * rounding corner cases worked out independently (Python: struct 'e' for
 * f16, exact rational rounding for bf16), complex and sub-byte leaves
 * against a Python re-implementation of the rule, and box fills.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "runtime/runtime.h"

static IrShape shape1(IrType t, int64_t *dims, int32_t rank)
{
    IrShape s = {0};
    s.type = t;
    s.rank = rank;
    s.dims = dims;
    return s;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_splitmix64(void **state)
{
    (void)state;
    assert_int_equal(rt_splitmix64(0), 0xe220a8397b1dcdafull);
}

static void test_f32_seed7_leaf0(void **state)
{
    (void)state;
    int64_t dims[] = {4};
    IrShape s = shape1(IR_F32, dims, 1);
    float out[4];
    IrDiag d = {0};
    assert_int_equal(rt_random_fill(7, 0, &s, out, &d), IR_OK);
    assert_int_equal(f32_bits(out[0]), 0x3e600a3d);
    assert_int_equal(f32_bits(out[1]), 0x3f6d3c70);
    assert_int_equal(f32_bits(out[2]), 0xbed4554f);
    assert_int_equal(f32_bits(out[3]), 0xbf4cc276);
    assert_true(out[0] > 0.2187890f && out[0] < 0.2187891f);
}

static void test_s32_seed7_leaf1(void **state)
{
    (void)state;
    int64_t dims[] = {6};
    IrShape s = shape1(IR_S32, dims, 1);
    int32_t out[6];
    int32_t want[6] = {6, 4, -7, -2, 2, -8};
    assert_int_equal(rt_random_fill(7, 1, &s, out, NULL), IR_OK);
    assert_memory_equal(out, want, sizeof want);
}

static void test_u8_seed7_leaf2(void **state)
{
    (void)state;
    int64_t dims[] = {5};
    IrShape s = shape1(IR_U8, dims, 1);
    uint8_t out[5];
    uint8_t want[5] = {4, 15, 1, 1, 3};
    assert_int_equal(rt_random_fill(7, 2, &s, out, NULL), IR_OK);
    assert_memory_equal(out, want, sizeof want);
}

static void test_pred_seed7_leaf3(void **state)
{
    (void)state;
    int64_t dims[] = {5};
    IrShape s = shape1(IR_PRED, dims, 1);
    uint8_t out[5];
    uint8_t want[5] = {1, 1, 1, 0, 0};
    assert_int_equal(rt_random_fill(7, 3, &s, out, NULL), IR_OK);
    assert_memory_equal(out, want, sizeof want);
}

static void test_f64_seed0_leaf0(void **state)
{
    (void)state;
    int64_t dims[] = {3};
    IrShape s = shape1(IR_F64, dims, 1);
    double out[3];
    assert_int_equal(rt_random_fill(0, 0, &s, out, NULL), IR_OK);
    /* Exact: these decimal strings round-trip to the same doubles. */
    assert_true(out[0] == -0.7225811797088915);
    assert_true(out[1] == -0.6312666514008465);
    assert_true(out[2] == 0.39490654357907085);
}

static void test_other_int_widths(void **state)
{
    (void)state;
    int64_t dims[] = {8};
    IrShape s = shape1(IR_S8, dims, 1);
    int8_t s8[8];
    int8_t want_s8[8] = {7, -7, 5, 5, -8, -1, 8, 5};
    assert_int_equal(rt_random_fill(9, 2, &s, s8, NULL), IR_OK);
    assert_memory_equal(s8, want_s8, sizeof want_s8);
    int64_t s64[8];
    s.type = IR_S64;
    assert_int_equal(rt_random_fill(9, 2, &s, s64, NULL), IR_OK);
    for (int i = 0; i < 8; i++)
        assert_int_equal(s64[i], want_s8[i]);
    uint64_t u64[8];
    uint64_t want_u[8] = {15, 1, 13, 13, 0, 7, 16, 13};
    s.type = IR_U64;
    assert_int_equal(rt_random_fill(9, 2, &s, u64, NULL), IR_OK);
    assert_memory_equal(u64, want_u, sizeof want_u);
    uint16_t u16[8];
    s.type = IR_U16;
    assert_int_equal(rt_random_fill(9, 2, &s, u16, NULL), IR_OK);
    for (int i = 0; i < 8; i++)
        assert_int_equal(u16[i], want_u[i]);
    int16_t s16[8];
    s.type = IR_S16;
    assert_int_equal(rt_random_fill(9, 2, &s, s16, NULL), IR_OK);
    for (int i = 0; i < 8; i++)
        assert_int_equal(s16[i], want_s8[i]);
}

static void test_f64_seed3_leaf5(void **state)
{
    (void)state;
    int64_t dims[] = {2};
    IrShape s = shape1(IR_F64, dims, 1);
    double out[2];
    assert_int_equal(rt_random_fill(3, 5, &s, out, NULL), IR_OK);
    assert_true(out[0] == -0.3150183311465957);
    assert_true(out[1] == 0.047983160241132916);
}

static void test_f16_bf16_seed7_leaf0(void **state)
{
    (void)state;
    int64_t dims[] = {6};
    IrShape s = shape1(IR_F16, dims, 1);
    uint16_t out[6];
    uint16_t want_f16[6] = {0x3300, 0x3b6a, 0xb6a3, 0xba66, 0x3bcd, 0xbae1};
    assert_int_equal(rt_random_fill(7, 0, &s, out, NULL), IR_OK);
    assert_memory_equal(out, want_f16, sizeof want_f16);
    uint16_t want_bf16[6] = {0x3e60, 0x3f6d, 0xbed4, 0xbf4d, 0x3f7a, 0xbf5c};
    s.type = IR_BF16;
    assert_int_equal(rt_random_fill(7, 0, &s, out, NULL), IR_OK);
    assert_memory_equal(out, want_bf16, sizeof want_bf16);
}

/* Bits h chosen so that the double is a rounding corner case:
 *   0xc040000000800000 -> 0.5 + 2^-9 + 2^-40: just above a bf16 tie; going
 *       through f32 first would round to the tie and then to even (0x3f00),
 *       rounding once gives 0.5 + 2^-8 = 0x3f01. f16 0x3804.
 *   0xc008000000800000 -> 0.5 + 2^-12 + 2^-40: the same for f16 (0x3801,
 *       not 0x3800).
 *   0x8000080000000000 -> 2^-20: an f16 subnormal, 16 * 2^-24 = 0x0010.
 *   0x7fffff4000000000 -> -1.5 * 2^-24: f16 subnormal tie, to even 0x8002.
 *   0xc0c0000000000000 -> 0.5 + 3 * 2^-9: a bf16 tie, to even 0x3f02. */
static void test_rounding_corners(void **state)
{
    (void)state;
    static const struct {
        uint64_t h;
        uint16_t bf16, f16;
    } v[] = {
        {0xc040000000800000ull, 0x3f01, 0x3804},
        {0xc008000000800000ull, 0x3f00, 0x3801},
        {0x8000080000000000ull, 0x3580, 0x0010},
        {0x7fffff4000000000ull, 0xb3c0, 0x8002},
        {0xc0c0000000000000ull, 0x3f02, 0x380c},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint16_t b, f;
        assert_int_equal(rt_random_store(IR_BF16, v[i].h, &b, 0), IR_OK);
        assert_int_equal(rt_random_store(IR_F16, v[i].h, &f, 0), IR_OK);
        assert_int_equal(b, v[i].bf16);
        assert_int_equal(f, v[i].f16);
    }
    /* h >> 11 == 0 gives exactly -1. */
    double x;
    assert_int_equal(rt_random_store(IR_F64, 0x7ff, &x, 0), IR_OK);
    assert_true(x == -1.0);
}

/* s32[3,4], seed 11, leaf 4, whole: 5 8 3 5 / 8 4 -8 -8 / -7 -1 -6 0.
 * Box rows [1,3) cols [2,4) takes whole indices 6 7 10 11. */
static void test_box(void **state)
{
    (void)state;
    int64_t dims[] = {3, 4};
    IrShape s = shape1(IR_S32, dims, 2);
    int32_t whole[12];
    int32_t want[12] = {5, 8, 3, 5, 8, 4, -8, -8, -7, -1, -6, 0};
    assert_int_equal(rt_random_fill(11, 4, &s, whole, NULL), IR_OK);
    assert_memory_equal(whole, want, sizeof want);
    int64_t lo[] = {1, 2}, hi[] = {3, 4};
    int32_t box[4];
    int32_t want_box[4] = {-8, -8, -6, 0};
    assert_int_equal(rt_random_fill_box(11, 4, &s, lo, hi, box, NULL), IR_OK);
    assert_memory_equal(box, want_box, sizeof want_box);
    /* one column */
    int64_t lo2[] = {0, 1}, hi2[] = {3, 2};
    int32_t col[3];
    int32_t want_col[3] = {8, 4, -1};
    assert_int_equal(rt_random_fill_box(11, 4, &s, lo2, hi2, col, NULL), IR_OK);
    assert_memory_equal(col, want_col, sizeof want_col);
    /* empty box writes nothing */
    int64_t lo3[] = {2, 0}, hi3[] = {2, 4};
    int32_t untouched = 1234;
    assert_int_equal(rt_random_fill_box(11, 4, &s, lo3, hi3, &untouched, NULL), IR_OK);
    assert_int_equal(untouched, 1234);
}

static void test_scalar(void **state)
{
    (void)state;
    IrShape s = shape1(IR_S32, NULL, 0);
    int32_t v = 99;
    /* rank 0: element 0 of leaf 1, seed 7: 6 (the first of the s32 vector) */
    assert_int_equal(rt_random_fill(7, 1, &s, &v, NULL), IR_OK);
    assert_int_equal(v, 6);
}

/* Complex leaves: element i is (draw 2i, draw 2i+1) in the component type.
 * Values from a Python re-implementation of DESIGN.md's rule (splitmix64
 * on Python ints, numpy.float32 for the rounding):
 *   SEED 7, leaf 4, c64[3]: (0x3f0d92c7, 0xbf25a013) (0x3e338c6a, 0x3ed6a6a9)
 *                           (0xbd88bf2a, 0xbf38b325)
 *   SEED 0, leaf 1, c128[2]: (-0x1.d8d233f7f9cc4p-2, -0x1.cd63735381cf4p-2)
 *                            (-0x1.10839f03ab0e8p-2, -0x1.d82a1eab4e13cp-1) */
static void test_complex(void **state)
{
    (void)state;
    int64_t d3[] = {3}, d2[] = {2};
    IrShape c = shape1(IR_C64, d3, 1), z = shape1(IR_C128, d2, 1);
    float f[6];
    assert_int_equal(rt_random_fill(7, 4, &c, f, NULL), IR_OK);
    const uint32_t want[6] = {0x3f0d92c7, 0xbf25a013, 0x3e338c6a, 0x3ed6a6a9, 0xbd88bf2a,
                              0xbf38b325};
    for (int i = 0; i < 6; i++)
        assert_int_equal(f32_bits(f[i]), want[i]);
    double w[4];
    assert_int_equal(rt_random_fill(0, 1, &z, w, NULL), IR_OK);
    const double wz[4] = {-0x1.d8d233f7f9cc4p-2, -0x1.cd63735381cf4p-2, -0x1.10839f03ab0e8p-2,
                          -0x1.d82a1eab4e13cp-1};
    for (int i = 0; i < 4; i++)
        assert_true(w[i] == wz[i]);
    /* a box of a complex array draws the same elements: [1,3) of c64[3] */
    float b[4];
    int64_t lo[] = {1}, hi[] = {3};
    assert_int_equal(rt_random_fill_box(7, 4, &c, lo, hi, b, NULL), IR_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(f32_bits(b[i]), want[2 + i]);
}

/* s4 (h mod 16) - 8, s2 (h mod 4) - 2, u4 h mod 16, u2 h mod 4, from the
 * same Python re-implementation: SEED 7, leaf 5, 6 elements. */
static void test_sub_byte(void **state)
{
    (void)state;
    int64_t d[] = {6};
    static const struct {
        IrType t;
        int8_t v[6];
    } cases[] = {
        {IR_S4, {2, 0, -7, 4, 5, -3}},
        {IR_S2, {0, -2, -1, -2, -1, -1}},
        {IR_U4, {10, 8, 1, 12, 13, 5}},
        {IR_U2, {2, 0, 1, 0, 1, 1}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        IrShape s = shape1(cases[k].t, d, 1);
        int8_t out[6];
        assert_int_equal(rt_random_fill(7, 5, &s, out, NULL), IR_OK);
        assert_memory_equal(out, cases[k].v, 6);
    }
}

static void test_errors(void **state)
{
    (void)state;
    int64_t dims[] = {3, 4};
    IrShape s = shape1(IR_S32, dims, 2);
    int32_t out[12];
    IrDiag d = {0};
    int64_t lo[] = {0, 3}, hi[] = {3, 5};
    assert_int_equal(rt_random_fill_box(1, 0, &s, lo, hi, out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "dimension 1"));
    ir_diag_clear(&d);
    int64_t lo2[] = {2, 0}, hi2[] = {1, 4};
    assert_int_equal(rt_random_fill_box(1, 0, &s, lo2, hi2, out, &d), IR_EINPUT);
    ir_diag_clear(&d);
    s.type = IR_OPAQUE; /* every array type draws now; opaque has no elements */
    assert_int_equal(rt_random_fill(1, 0, &s, out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "array shape"));
    ir_diag_clear(&d);
    IrShape tup = {0};
    tup.type = IR_TUPLE;
    assert_int_equal(rt_random_fill(1, 0, &tup, out, &d), IR_EINPUT);
    ir_diag_clear(&d);
    assert_int_equal(rt_random_store(IR_TOKEN, 1, out, 0), IR_EUNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitmix64),
        cmocka_unit_test(test_f32_seed7_leaf0),
        cmocka_unit_test(test_s32_seed7_leaf1),
        cmocka_unit_test(test_u8_seed7_leaf2),
        cmocka_unit_test(test_pred_seed7_leaf3),
        cmocka_unit_test(test_f64_seed0_leaf0),
        cmocka_unit_test(test_other_int_widths),
        cmocka_unit_test(test_f64_seed3_leaf5),
        cmocka_unit_test(test_f16_bf16_seed7_leaf0),
        cmocka_unit_test(test_rounding_corners),
        cmocka_unit_test(test_box),
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_complex),
        cmocka_unit_test(test_sub_byte),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
