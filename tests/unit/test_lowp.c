/*
 * test_lowp.c: the f8/f4 codecs (ir/lowp.c), exhaustively.
 *
 * The reference here is written independently of lowp.c, from each type's
 * definition (sign bit, E exponent bits with bias B, M mantissa bits,
 * subnormals at biased exponent 0, and the listed special codes):
 *   - decoding: every one of the 256 (f4: 16) codes against the formula
 *     (-1)^s * 2^(1-B) * (0.m)  or  (-1)^s * 2^(e-B) * (1.m);
 *   - encoding: a brute-force search for the nearest finite value in the
 *     decoded table (ties: the code with an even last mantissa bit), at
 *     every representable value, at every midpoint between neighbours and
 *     just either side of it, and beyond the largest value;
 *   - a few values by hand from the published type definitions
 *     (arXiv:2209.05433 for e4m3fn/e5m2, arXiv:2206.02915 for fnuz, OCP MX
 *     v1.0 for e8m0fnu and e2m1fn): max 448, 57344, 240, 30, 15.5, 6.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "ir/ir.h"

typedef struct Def {
    IrType t;
    int ebits, mbits, bias;
    int ncodes;          /* 256, or 16 for f4 */
    int inf;             /* positive inf code, -1 none */
    bool fnuz;           /* 0x80 is the only NaN, no -0 */
    bool nan_all_ones;   /* fn: S.1111.111 is NaN */
    bool ieee_nan;       /* every code above inf is NaN */
    double max;          /* largest finite, by hand */
} Def;

static const Def defs[] = {
    {IR_F8E5M2, 5, 2, 15, 256, 0x7c, false, false, true, 57344},
    {IR_F8E4M3, 4, 3, 7, 256, 0x78, false, false, true, 240},
    {IR_F8E3M4, 3, 4, 3, 256, 0x70, false, false, true, 15.5},
    {IR_F8E4M3FN, 4, 3, 7, 256, -1, false, true, false, 448},
    {IR_F8E4M3B11FNUZ, 4, 3, 11, 256, -1, true, false, false, 30},
    {IR_F8E5M2FNUZ, 5, 2, 16, 256, -1, true, false, false, 57344},
    {IR_F8E4M3FNUZ, 4, 3, 8, 256, -1, true, false, false, 240},
    {IR_F4E2M1FN, 2, 1, 1, 16, -1, false, false, false, 6},
};

/* The definition's value of code c (NAN for NaN codes). */
static double def_value(const Def *d, unsigned c)
{
    unsigned sign = c >> (d->ebits + d->mbits);
    unsigned e = (c >> d->mbits) & ((1u << d->ebits) - 1);
    unsigned m = c & ((1u << d->mbits) - 1);
    unsigned mag = c & ((1u << (d->ebits + d->mbits)) - 1);
    if (d->fnuz && c == 0x80)
        return NAN;
    if (d->nan_all_ones && mag == (1u << (d->ebits + d->mbits)) - 1)
        return NAN;
    if (d->inf >= 0 && mag == (unsigned)d->inf)
        return sign ? -INFINITY : INFINITY;
    if (d->ieee_nan && mag > (unsigned)d->inf)
        return NAN;
    double v = e == 0 ? pow(2, 1 - d->bias) * (m / pow(2, d->mbits))
                      : pow(2, (int)e - d->bias) * (1 + m / pow(2, d->mbits));
    return sign ? -v : v;
}

static void test_decode_every_code(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof defs / sizeof defs[0]; k++) {
        const Def *d = &defs[k];
        double max = 0;
        for (int c = 0; c < d->ncodes; c++) {
            double want = def_value(d, (unsigned)c), got = ir_lowp_to_double(d->t, (uint8_t)c);
            if (isnan(want)) {
                if (!isnan(got))
                    fail_msg("%s code 0x%02x: want NaN, got %g", ir_type_name(d->t), c, got);
                continue;
            }
            if (got != want || signbit(got) != signbit(want))
                fail_msg("%s code 0x%02x: want %.17g, got %.17g", ir_type_name(d->t), c, want, got);
            if (isfinite(got) && got > max)
                max = got;
        }
        assert_true(max == d->max);
    }
}

/* Every finite non-NaN code re-encodes to itself; NaN codes re-encode to a
 * NaN code; inf to inf. */
static void test_roundtrip_every_code(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof defs / sizeof defs[0]; k++) {
        const Def *d = &defs[k];
        for (int c = 0; c < d->ncodes; c++) {
            double v = ir_lowp_to_double(d->t, (uint8_t)c);
            uint8_t back = ir_lowp_from_double(d->t, v);
            if (isnan(v)) {
                if (d->t == IR_F4E2M1FN)
                    fail_msg("f4e2m1fn has no NaN code");
                assert_true(ir_lowp_is_nan(d->t, back));
            } else if (back != c) {
                fail_msg("%s code 0x%02x (%g) re-encodes to 0x%02x", ir_type_name(d->t), c, v, back);
            }
        }
    }
}

/* Nearest finite code to x by search; ties to the code whose last mantissa
 * bit is 0. Only for |x| <= max. */
static int nearest_code(const Def *d, double x)
{
    int best = -1;
    double bestd = INFINITY;
    for (int c = 0; c < d->ncodes; c++) {
        double v = def_value(d, (unsigned)c);
        if (!isfinite(v))
            continue;
        if ((v == 0 && signbit(v) != signbit(x) && !d->fnuz) || (d->fnuz && c == 0x80))
            continue;
        if (v != 0 && (v < 0) != (x < 0))
            continue;
        double dist = fabs(v - x);
        if (dist < bestd || (dist == bestd && (c & 1) == 0)) {
            best = c;
            bestd = dist;
        }
    }
    return best;
}

static void check_encode(const Def *d, double x)
{
    int want = nearest_code(d, x);
    uint8_t got = ir_lowp_from_double(d->t, x);
    if (want != got)
        fail_msg("%s(%.17g): want 0x%02x, got 0x%02x", ir_type_name(d->t), x, want, got);
}

static void test_encode_between_codes(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof defs / sizeof defs[0]; k++) {
        const Def *d = &defs[k];
        /* Positive finite values ascending: codes 0 .. max increase. */
        double prev = 0;
        for (int c = 1; c < d->ncodes / 2; c++) {
            double v = def_value(d, (unsigned)c);
            if (!isfinite(v) || v > d->max)
                break;
            double mid = (prev + v) / 2, eps = (v - prev) / 64;
            double xs[] = {v, mid, mid - eps, mid + eps, prev + eps};
            for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
                check_encode(d, xs[i]);
                check_encode(d, -xs[i]);
            }
            prev = v;
        }
    }
}

/* Beyond the largest value, by hand from the rule each type follows
 * (ml_dtypes' ConvertImpl without saturation, which XLA's convert uses). */
static void test_overflow_and_specials(void **state)
{
    (void)state;
    /* e4m3fn: 448 = 0x7e; 464 is the midpoint to the (NaN) code 0x7f: ties
     * to even keep 448; above it is NaN with the sign. */
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FN, 464), 0x7e);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FN, 464.5), 0x7f);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FN, -1e9), 0xff);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FN, INFINITY), 0x7f);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FN, -0.0), 0x80);
    /* e5m2: 57344 = 0x7b, 61440 is the midpoint to inf: ties to even go to
     * 0x7c = inf (mantissa 00 is even). */
    assert_int_equal(ir_lowp_from_double(IR_F8E5M2, 61439), 0x7b);
    assert_int_equal(ir_lowp_from_double(IR_F8E5M2, 61440), 0x7c);
    assert_int_equal(ir_lowp_from_double(IR_F8E5M2, -INFINITY), 0xfc);
    assert_int_equal(ir_lowp_from_double(IR_F8E5M2, NAN), 0x7e);
    /* fnuz: overflow, inf and NaN are 0x80; no negative zero. */
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FNUZ, 1000), 0x80);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FNUZ, -INFINITY), 0x80);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3FNUZ, -0.0), 0x00);
    assert_int_equal(ir_lowp_from_double(IR_F8E5M2FNUZ, -1e-30), 0x00);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3B11FNUZ, 31), 0x80); /* above 30+1 midpoint */
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3B11FNUZ, 30.9), 0x7f);
    /* e4m3 (IEEE-like): 240 = 0x77, 248 midpoint to inf: tie to even -> inf. */
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3, 247), 0x77);
    assert_int_equal(ir_lowp_from_double(IR_F8E4M3, 248), 0x78);
    /* e3m4: 15.5 = 0x6f, 15.75 is the midpoint to inf -> inf (even). */
    assert_int_equal(ir_lowp_from_double(IR_F8E3M4, 15.75), 0x70);
    /* f4e2m1fn saturates: 6 is the largest, 100 and inf give 6; NaN is
     * ml_dtypes' quiet_NaN() 0x8 (-0). 5 is the tie between 4 (0x6, even)
     * and 6 (0x7): 4. */
    assert_int_equal(ir_lowp_from_double(IR_F4E2M1FN, 100), 0x7);
    assert_int_equal(ir_lowp_from_double(IR_F4E2M1FN, -INFINITY), 0xf);
    assert_int_equal(ir_lowp_from_double(IR_F4E2M1FN, NAN), 0x8);
    assert_int_equal(ir_lowp_from_double(IR_F4E2M1FN, 5), 0x6);
    assert_int_equal(ir_lowp_from_double(IR_F4E2M1FN, 0.25), 0x0); /* tie 0 / 0.5 -> 0 */
    assert_true(ir_lowp_to_double(IR_F4E2M1FN, 0xf7) == 6); /* high nibble ignored */
}

/* e8m0fnu: 2^(c-127), 0xff NaN, no zero, no sign; ties (1.5 * 2^e) round
 * up, everything up to 2^-127 gives 2^-127, (2^-127, 2^-126) gives 2^-126
 * (ml_dtypes' subnormal path). */
static void test_e8m0(void **state)
{
    (void)state;
    for (int c = 0; c < 255; c++) {
        double v = ir_lowp_to_double(IR_F8E8M0FNU, (uint8_t)c);
        assert_true(v == ldexp(1, c - 127));
        assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, v), c);
        /* ml_dtypes' subnormal path: just above 2^-127 rounds to 2^-126 */
        assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, v * 1.49), c == 0 ? 1 : c);
        if (c < 254)
            assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, v * 1.5), c + 1);
    }
    assert_true(isnan(ir_lowp_to_double(IR_F8E8M0FNU, 0xff)));
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, 0), 0xff);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, -1), 0xff);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, INFINITY), 0xff);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, ldexp(1, 128)), 0xff);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, ldexp(1, -140)), 0x00);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, 1), 127);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, ldexp(1.125, -127)), 0x01);
    assert_int_equal(ir_lowp_from_double(IR_F8E8M0FNU, ldexp(1, -127)), 0x00);
}

/* Other types are not low-precision kinds: NaN and 0, not a crash. */
static void test_other_types(void **state)
{
    (void)state;
    assert_true(isnan(ir_lowp_to_double(IR_F32, 1)));
    assert_int_equal(ir_lowp_from_double(IR_S32, 1.0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_every_code),
        cmocka_unit_test(test_roundtrip_every_code),
        cmocka_unit_test(test_encode_between_codes),
        cmocka_unit_test(test_overflow_and_specials),
        cmocka_unit_test(test_e8m0),
        cmocka_unit_test(test_other_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
