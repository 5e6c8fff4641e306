/*
 * lowp.c: exact conversion between double and the one-byte codes of XLA's
 * 8- and 4-bit floating kinds (f8e5m2, f8e4m3, f8e4m3fn, f8e4m3b11fnuz,
 * f8e5m2fnuz, f8e4m3fnuz, f8e3m4, f8e8m0fnu, f4e2m1fn).
 *
 * The rules are those of ml_dtypes (include/float8.h and mxfloat.h), whose
 * `static_cast<To>(from)` (ConvertImpl with kSaturate=false, kTruncate=false)
 * is what XLA's convert does on literals, in the HLO evaluator and on the CPU
 * backend:
 *   - round to nearest, ties to even, directly from the double (no double
 *     rounding through f32);
 *   - a result above the largest finite value (after rounding) becomes the
 *     type's `infinity()`: inf for the IEEE-like kinds (e5m2, e4m3, e3m4),
 *     NaN for the kinds without inf (fn: 0x7f with the sign; fnuz: 0x80;
 *     e8m0fnu: 0xff), and the largest finite value for f4e2m1fn, which has
 *     neither inf nor NaN (its `infinity()` is its max, 6);
 *   - inf maps the same way; NaN maps to the type's quiet NaN with the sign
 *     of the input where the type has one (f4e2m1fn's `quiet_NaN()` is the
 *     code 0x8, i.e. -0, and a negative NaN becomes +0);
 *   - fnuz kinds have no negative zero: -0 and negative values that round to
 *     zero give 0x00;
 *   - f8e8m0fnu is an unsigned power of two 2^(code-127) with no zero: zero
 *     and negative inputs give NaN, values below 2^-127 give 2^-127, and
 *     since it has no mantissa bit to be even, a value m*2^e with m >= 1.5
 *     rounds up (ml_dtypes' round-to-nearest-even tests the implicit bit,
 *     which is always 1).
 */
#include "ir.h"

#include <math.h>
#include <string.h>

/* Encoding parameters of one kind. `emin` is the exponent of the smallest
 * normal value (1 - bias); `max_code` the largest finite positive code. */
typedef struct LowpFormat {
    int mant;          /* stored mantissa bits */
    int emin;
    uint8_t max_code;
    uint8_t sign_bit;  /* 0x80, or 0x08 for f4 */
    int8_t inf_code;   /* positive infinity code, -1 when the kind has none */
    uint8_t nan_code;  /* positive quiet NaN */
    bool fnuz;         /* NaN is 0x80, no negative zero */
} LowpFormat;

static bool lowp_format(IrType t, LowpFormat *f)
{
    switch (t) {
    case IR_F8E5M2:        *f = (LowpFormat){2, 1 - 15, 0x7b, 0x80, 0x7c, 0x7e, false}; return true;
    case IR_F8E4M3:        *f = (LowpFormat){3, 1 - 7, 0x77, 0x80, 0x78, 0x7c, false}; return true;
    case IR_F8E3M4:        *f = (LowpFormat){4, 1 - 3, 0x6f, 0x80, 0x70, 0x78, false}; return true;
    case IR_F8E4M3FN:      *f = (LowpFormat){3, 1 - 7, 0x7e, 0x80, -1, 0x7f, false}; return true;
    case IR_F8E4M3B11FNUZ: *f = (LowpFormat){3, 1 - 11, 0x7f, 0x80, -1, 0x80, true}; return true;
    case IR_F8E5M2FNUZ:    *f = (LowpFormat){2, 1 - 16, 0x7f, 0x80, -1, 0x80, true}; return true;
    case IR_F8E4M3FNUZ:    *f = (LowpFormat){3, 1 - 8, 0x7f, 0x80, -1, 0x80, true}; return true;
    case IR_F4E2M1FN:      *f = (LowpFormat){1, 1 - 1, 0x07, 0x08, -1, 0x08, false}; return true;
    default: return false;
    }
}

static bool e8m0_is(IrType t) { return t == IR_F8E8M0FNU; }

static double e8m0_to_double(uint8_t code)
{
    return code == 0xff ? NAN : ldexp(1.0, (int)code - 127);
}

static uint8_t e8m0_from_double(double x)
{
    if (isnan(x) || x <= 0 || isinf(x))
        return 0xff;
    /* Below 2^-126 ml_dtypes' ConvertImpl takes its subnormal path: the
     * value is rounded to nearest even on the linear grid {0, 2^-126}, and
     * the 0 it gives is code 0x00 (2^-127). So (2^-127, 2^-126) gives 0x01,
     * 2^-127 and below 0x00. */
    if (x < 0x1p-126)
        return x > 0x1p-127 ? 0x01 : 0x00;
    int e;
    double m = frexp(x, &e) * 2;   /* x = m * 2^(e-1), m in [1, 2) */
    e -= 1;
    if (m >= 1.5)
        e += 1;
    if (e < -127)
        return 0x00;
    if (e > 127)
        return 0xff;
    return (uint8_t)(e + 127);
}

/* Value of a code under format f (NaN and inf codes handled by the caller). */
static double finite_value(const LowpFormat *f, unsigned mag)
{
    unsigned bexp = mag >> f->mant, frac = mag & ((1u << f->mant) - 1);
    if (bexp == 0)
        return ldexp((double)frac, f->emin - f->mant);
    return ldexp((double)((1u << f->mant) | frac), f->emin + (int)bexp - 1 - f->mant);
}

double ir_lowp_to_double(IrType t, uint8_t code)
{
    if (e8m0_is(t))
        return e8m0_to_double(code);
    LowpFormat f;
    if (!lowp_format(t, &f))
        return NAN;
    if (t == IR_F4E2M1FN)
        code &= 0x0f;
    /* fnuz's one NaN is the negative-zero code; ml_dtypes decodes it with
     * its sign bit set (-NaN), so float32 files carry the same bits. */
    if (f.fnuz && code == 0x80)
        return -NAN;
    bool neg = (code & f.sign_bit) != 0;
    unsigned mag = code & (unsigned)(f.sign_bit - 1);
    double v;
    if (f.inf_code >= 0 && mag == (unsigned)f.inf_code)
        v = INFINITY;
    else if (mag > f.max_code)
        return neg ? -NAN : NAN;
    else
        v = finite_value(&f, mag);
    return neg ? -v : v;
}

uint8_t ir_lowp_from_float(IrType t, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint32_t mag = bits & 0x7fffffffu;
    if (mag == 0 || mag >= 0x00800000u)
        return ir_lowp_from_double(t, (double)x);
    /* subnormal: mag * 2^-149, exact and normal as a double (no DAZ) */
    double v = (double)mag * 0x1p-149;
    return ir_lowp_from_double(t, (bits >> 31) ? -v : v);
}

float ir_lowp_to_float(IrType t, uint8_t code)
{
    double v = ir_lowp_to_double(t, code);
    double a = fabs(v);
    if (!(a > 0 && a < 0x1p-126))
        return (float)v;
    /* an f32 subnormal: a multiple of 2^-149 below 2^-126, its bits the
     * multiple (the double product is exact and normal) */
    uint32_t bits = (uint32_t)(a * 0x1p149) | (signbit(v) ? 0x80000000u : 0);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round r >= 0 to the nearest integer, ties to even. r - floor(r) is exact
 * for every double, so the comparison with 0.5 decides the tie exactly. */
static double round_half_even(double r)
{
    double fl = floor(r), frac = r - fl;
    if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0))
        return fl + 1;
    return fl;
}

/* The code of |x| (finite, > 0) before overflow handling: the magnitude
 * rounded to the grid of the format, as an unbounded integer code
 * ((e - emin) << mant) + n where n is the rounded significand in units of
 * the quantum 2^(e - mant), e clamped to emin for subnormals. A carry of
 * the rounding (n = 2^(mant+1)) lands on the next binade's first code. */
static double magnitude_code(const LowpFormat *f, double ax)
{
    int e;
    frexp(ax, &e);
    e -= 1;                             /* ax in [2^e, 2^(e+1)) */
    if (e < f->emin)
        e = f->emin;
    double n = round_half_even(ldexp(ax, f->mant - e));
    return ldexp((double)(e - f->emin), f->mant) + n;
}

static uint8_t overflow_code(const LowpFormat *f, bool neg)
{
    uint8_t sign = neg ? f->sign_bit : 0;
    if (f->inf_code >= 0)
        return (uint8_t)(sign | (uint8_t)f->inf_code);
    if (f->fnuz)
        return 0x80;
    if (f->sign_bit == 0x08)             /* f4e2m1fn saturates */
        return (uint8_t)(sign | f->max_code);
    return (uint8_t)(sign | f->nan_code); /* fn: NaN with the sign */
}

static uint8_t nan_code(const LowpFormat *f, bool neg)
{
    if (f->fnuz)
        return 0x80;
    if (f->sign_bit == 0x08)             /* f4: quiet_NaN() is -0, so -NaN is +0 */
        return neg ? 0x00 : 0x08;
    return (uint8_t)((neg ? f->sign_bit : 0) | f->nan_code);
}

uint8_t ir_lowp_from_double(IrType t, double x)
{
    if (e8m0_is(t))
        return e8m0_from_double(x);
    LowpFormat f;
    if (!lowp_format(t, &f))
        return 0;
    bool neg = signbit(x) != 0;
    if (isnan(x))
        return nan_code(&f, neg);
    if (isinf(x))
        return overflow_code(&f, neg);
    double c = x == 0 ? 0 : magnitude_code(&f, fabs(x));
    if (c > f.max_code)
        return overflow_code(&f, neg);
    if (c == 0 && f.fnuz)
        return 0x00;
    return (uint8_t)((neg ? f.sign_bit : 0) | (uint8_t)c);
}

bool ir_lowp_is_nan(IrType t, uint8_t code)
{
    return isnan(ir_lowp_to_double(t, code));
}
