/*
 * lowp.c: the f8 and f4 element types, one code a byte: decode a code to
 * double (exact) and encode a double to a code (rounded once, to nearest
 * even). Every kernel converts through these, so that `convert`, arithmetic
 * on these types (computed in f32 and rounded back) and the `.npy` float32
 * carriers agree with each other and with XLA.
 *
 * The rules are ml_dtypes' (jax-ml/ml_dtypes, include/float8.h and
 * mxfloat.h: ConvertImpl without saturation), which XLA's literals, its
 * evaluator and its CPU backend follow:
 *   - finite values round to nearest, ties to the even significand;
 *   - overflow (a result beyond the largest finite code after rounding) and
 *     +-inf become the type's infinity when it has one (f8e5m2, f8e4m3,
 *     f8e3m4), else its NaN (f8e4m3fn, the fnuz kinds, f8e8m0fnu), and
 *     f4e2m1fn, which has neither, saturates to +-6;
 *   - NaN becomes the type's NaN with the sign kept where the type has a
 *     signed NaN; f4e2m1fn has no NaN and ml_dtypes maps NaN to the code
 *     0x8 (-0), -NaN to 0x0;
 *   - fnuz kinds have no -0: -0 and negative underflow give 0x00, and their
 *     one NaN is 0x80 (decoded as a NaN with the sign bit set);
 *   - f8e8m0fnu is unsigned with no zero: 0, negatives and NaN give 0xff;
 *     below 2^-126 it rounds on the grid {0x00 = "0", 0x01 = 2^-126} as
 *     ml_dtypes' subnormal path does (so (2^-127, 2^-126) gives 2^-126).
 */
#include "device.h"

#include <math.h>

typedef enum LowpNan {
    NAN_IEEE,    /* all-ones exponent: inf (mantissa 0) or NaN */
    NAN_ONES,    /* only s.1111.111 is NaN (f8e4m3fn) */
    NAN_FNUZ,    /* 0x80 is NaN, there is no -0 and no inf */
    NAN_E8M0,    /* 0xff is NaN, unsigned, no zero */
    NAN_NONE,    /* f4e2m1fn: every code is a number */
} LowpNan;

typedef struct LowpFormat {
    uint8_t ebits, mbits;
    int16_t bias;
    LowpNan nan;
    uint8_t max_code; /* largest finite value, positive */
    uint8_t inf_code; /* what +inf and positive overflow become */
    uint8_t nan_code; /* what a positive NaN becomes */
} LowpFormat;

/* Codes from each type's definition (OCP 8-bit FP spec, IEEE 754 style
 * formats, ml_dtypes' numeric_limits). */
static const LowpFormat *format_of(IrType t)
{
    static const LowpFormat e5m2 = {5, 2, 15, NAN_IEEE, 0x7b, 0x7c, 0x7e};
    static const LowpFormat e4m3 = {4, 3, 7, NAN_IEEE, 0x77, 0x78, 0x7c};
    static const LowpFormat e3m4 = {3, 4, 3, NAN_IEEE, 0x6f, 0x70, 0x78};
    static const LowpFormat e4m3fn = {4, 3, 7, NAN_ONES, 0x7e, 0x7f, 0x7f};
    static const LowpFormat e4m3b11 = {4, 3, 11, NAN_FNUZ, 0x7f, 0x80, 0x80};
    static const LowpFormat e5m2fnuz = {5, 2, 16, NAN_FNUZ, 0x7f, 0x80, 0x80};
    static const LowpFormat e4m3fnuz = {4, 3, 8, NAN_FNUZ, 0x7f, 0x80, 0x80};
    static const LowpFormat e8m0 = {8, 0, 127, NAN_E8M0, 0xfe, 0xff, 0xff};
    static const LowpFormat e2m1 = {2, 1, 1, NAN_NONE, 0x07, 0x07, 0x08};
    switch (t) {
    case IR_F8E5M2: return &e5m2;
    case IR_F8E4M3: return &e4m3;
    case IR_F8E3M4: return &e3m4;
    case IR_F8E4M3FN: return &e4m3fn;
    case IR_F8E4M3B11FNUZ: return &e4m3b11;
    case IR_F8E5M2FNUZ: return &e5m2fnuz;
    case IR_F8E4M3FNUZ: return &e4m3fnuz;
    case IR_F8E8M0FNU: return &e8m0;
    case IR_F4E2M1FN: return &e2m1;
    default: return NULL;
    }
}

/* The sign bit's position: 7 for f8, 3 for f4; none for f8e8m0fnu. */
static unsigned sign_shift(const LowpFormat *f)
{
    return (unsigned)f->ebits + f->mbits;
}

/* -code. fnuz zero and NaN (0x00, 0x80) are their own negation, as is
 * every code of the unsigned f8e8m0fnu. */
static uint8_t negate(const LowpFormat *f, uint8_t code)
{
    if (f->nan == NAN_E8M0)
        return code;
    if (f->nan == NAN_FNUZ && (code & 0x7f) == 0)
        return code;
    return (uint8_t)(code ^ (1u << sign_shift(f)));
}

double dev_lowp_to_f64(IrType t, uint8_t code)
{
    const LowpFormat *f = format_of(t);
    if (!f)
        return 0;
    if (f->nan == NAN_E8M0)
        return code == 0xff ? NAN : ldexp(1.0, (int)code - 127);
    unsigned ss = sign_shift(f);
    code &= (uint8_t)((2u << ss) - 1u);
    bool neg = (code >> ss) & 1u;
    unsigned mag = code & ((1u << ss) - 1u);
    unsigned exp = mag >> f->mbits, man = mag & ((1u << f->mbits) - 1u);
    double nan = neg ? -NAN : NAN;
    if (f->nan == NAN_FNUZ && code == 0x80)
        return -NAN;
    if (f->nan == NAN_ONES && mag == 0x7f)
        return nan;
    if (f->nan == NAN_IEEE && exp == (1u << f->ebits) - 1u)
        return man ? nan : neg ? -INFINITY : INFINITY;
    double v = exp == 0 ? ldexp((double)man, 1 - f->bias - f->mbits)
                        : ldexp((double)(man + (1u << f->mbits)), (int)exp - f->bias - f->mbits);
    return neg ? -v : v;
}

/* |x| (finite, > 0) to the magnitude bits, rounded to nearest even; may
 * exceed max_code (overflow). Worked example, f8e4m3fn (bias 7, 3
 * mantissa bits), x = 464: log2 floor 8, quantum 2^(8-3) = 32, 464/32 =
 * 14.5 rounds to 14 (even), bits = 14 + ((8 + 7 - 1) << 3) = 126 = 0x7e
 * (448); 465 rounds to 15, bits 0x7f > max: NaN. */
static uint64_t round_magnitude(const LowpFormat *f, double ax)
{
    int e2;
    (void)frexp(ax, &e2);
    int ue = e2 - 1;                       /* ax in [2^ue, 2^(ue+1)) */
    if (ue > f->bias + (1 << f->ebits) + 1) /* far beyond any code */
        return UINT64_MAX;
    int emin = 1 - f->bias;
    int q = (ue < emin ? emin : ue) - f->mbits; /* the quantum, 2^q */
    double n = nearbyint(ldexp(ax, -q));        /* exact scaling; RNE */
    if (ue < emin)
        return (uint64_t)n; /* subnormal, or the smallest normal on a carry */
    return (uint64_t)n + ((uint64_t)(ue + f->bias - 1) << f->mbits);
}

uint8_t dev_lowp_from_f64(IrType t, double x)
{
    const LowpFormat *f = format_of(t);
    if (!f)
        return 0;
    bool neg = signbit(x) != 0;
    if (isnan(x))
        return neg ? negate(f, f->nan_code) : f->nan_code;
    if (isinf(x))
        return neg ? negate(f, f->inf_code) : f->inf_code;
    if (f->nan == NAN_E8M0 && (x == 0 || neg))
        return f->nan_code;
    if (x == 0)
        return neg ? negate(f, 0) : 0;
    uint64_t bits = round_magnitude(f, fabs(x));
    uint8_t code = bits > f->max_code ? f->inf_code : (uint8_t)bits;
    return neg ? negate(f, code) : code;
}

float dev_lowp_to_f32(IrType t, uint8_t code)
{
    return (float)dev_lowp_to_f64(t, code); /* every code is exact in f32 */
}
