/*
 * scalar.c: one element at a time, in any element type. IEEE half (f16) and
 * bfloat16 conversions, and typed loads and stores that convert with XLA's
 * `convert` semantics. Kernels use these on their generic (slow) paths and
 * have tight per-type loops for the common types.
 *
 * Conversion rules (XLA's convert):
 *   float -> int   truncate toward zero, saturate at the type's range, NaN -> 0
 *   int -> float   round to nearest even
 *   int -> int     two's complement wrap (keep the low bits)
 *   any -> pred    x != 0 (NaN != 0, so NaN -> true)
 *   pred -> any    0 or 1
 *   complex        loads give the real part; stores set imag = 0
 * f64 -> f16/bf16 goes through f32 as Eigen's half and bfloat16 do (XLA's
 * evaluator), so results match XLA bit for bit.
 *
 * Sub-byte integers (s2, s4, u2, u4) take one byte an element; loads
 * sign- or zero-extend the low 2 or 4 bits (so a byte written by a bitcast
 * from another type still reads right) and stores keep the low bits,
 * extended, so int -> int wraps in the type's width and float -> int
 * saturates at its range (s4: -8..7). The f8 and f4 kinds convert through
 * ir/lowp.c (ir_lowp_*), exactly, from double (one rounding).
 */
#include "device.h"

#include <math.h>
#include <string.h>

/* ---- f16 ---- */

/* Half: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 * Example: 1.0f = 0x3f800000 -> exponent 127-127+15 = 15 -> 0x3c00. */
uint16_t dev_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (halfway past 65504, odd): inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half: >= 2^-14 */
        uint32_t h = (ax >> 13) - (112u << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is still right */
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
        return sign;
    /* Subnormal half: value / 2^-24, rounded to nearest even. */
    uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

float dev_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ---- bf16: the top half of an f32 ---- */

uint16_t dev_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(x >> 16);
}

float dev_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ---- saturating float -> int ---- */

static int64_t sat_i64(double v, int64_t lo, int64_t hi)
{
    if (isnan(v))
        return 0;
    if (v <= (double)lo)
        return lo;
    /* (double)hi rounds up to 2^63 for s64: >= catches it. */
    if (v >= (double)hi)
        return hi;
    return (int64_t)v;
}

static uint64_t sat_u64(double v, uint64_t hi)
{
    if (isnan(v) || v <= 0)
        return 0;
    if (v >= (double)hi)
        return hi;
    return (uint64_t)v;
}

/* ---- sub-byte integers ---- */

/* The low `bits` bits of byte b, sign-extended. Example: s4 0x0f -> -1. */
static int8_t sext_bits(uint8_t b, int bits)
{
    return (int8_t)((int8_t)(uint8_t)(b << (8 - bits)) >> (8 - bits));
}

static uint8_t zext_bits(uint8_t b, int bits)
{
    return (uint8_t)(b & ((1u << bits) - 1u));
}

/* Canonical byte of a sub-byte integer type from any integer (wraps). */
uint8_t dev_subbyte_wrap(IrType t, uint64_t v)
{
    switch (t) {
    case IR_S2: return (uint8_t)sext_bits((uint8_t)v, 2);
    case IR_S4: return (uint8_t)sext_bits((uint8_t)v, 4);
    case IR_U2: return zext_bits((uint8_t)v, 2);
    case IR_U4: return zext_bits((uint8_t)v, 4);
    default: return (uint8_t)v;
    }
}

/* ---- loads ---- */

#define AT(T) (((const T *)base)[i])

double dev_load_f64(IrType t, const void *base, int64_t i)
{
    switch (t) {
    case IR_PRED: return AT(uint8_t) != 0;
    case IR_S8: return AT(int8_t);
    case IR_S16: return AT(int16_t);
    case IR_S32: return AT(int32_t);
    case IR_S64: return (double)AT(int64_t);
    case IR_U8: return AT(uint8_t);
    case IR_U16: return AT(uint16_t);
    case IR_U32: return AT(uint32_t);
    case IR_U64: return (double)AT(uint64_t);
    case IR_F16: return dev_f16_to_f32(AT(uint16_t));
    case IR_BF16: return dev_bf16_to_f32(AT(uint16_t));
    case IR_F32: return AT(float);
    case IR_F64: return AT(double);
    case IR_C64: return ((const float *)base)[2 * i];
    case IR_C128: return ((const double *)base)[2 * i];
    case IR_S2: return sext_bits(AT(uint8_t), 2);
    case IR_S4: return sext_bits(AT(uint8_t), 4);
    case IR_U2: return zext_bits(AT(uint8_t), 2);
    case IR_U4: return zext_bits(AT(uint8_t), 4);
    default:
        if (ir_type_is_lowp_float(t))
            return ir_lowp_to_double(t, AT(uint8_t));
        return 0;
    }
}

int64_t dev_load_i64(IrType t, const void *base, int64_t i)
{
    switch (t) {
    case IR_PRED: return AT(uint8_t) != 0;
    case IR_S8: return AT(int8_t);
    case IR_S16: return AT(int16_t);
    case IR_S32: return AT(int32_t);
    case IR_S64: return AT(int64_t);
    case IR_U8: return AT(uint8_t);
    case IR_U16: return AT(uint16_t);
    case IR_U32: return AT(uint32_t);
    case IR_U64: return (int64_t)AT(uint64_t);
    case IR_S2: return sext_bits(AT(uint8_t), 2);
    case IR_S4: return sext_bits(AT(uint8_t), 4);
    case IR_U2: return zext_bits(AT(uint8_t), 2);
    case IR_U4: return zext_bits(AT(uint8_t), 4);
    default: return sat_i64(dev_load_f64(t, base, i), INT64_MIN, INT64_MAX);
    }
}

uint64_t dev_load_u64(IrType t, const void *base, int64_t i)
{
    switch (t) {
    case IR_PRED: return AT(uint8_t) != 0;
    case IR_S8: return (uint64_t)(int64_t)AT(int8_t);
    case IR_S16: return (uint64_t)(int64_t)AT(int16_t);
    case IR_S32: return (uint64_t)(int64_t)AT(int32_t);
    case IR_S64: return (uint64_t)AT(int64_t);
    case IR_U8: return AT(uint8_t);
    case IR_U16: return AT(uint16_t);
    case IR_U32: return AT(uint32_t);
    case IR_U64: return AT(uint64_t);
    case IR_S2: return (uint64_t)(int64_t)sext_bits(AT(uint8_t), 2);
    case IR_S4: return (uint64_t)(int64_t)sext_bits(AT(uint8_t), 4);
    case IR_U2: return zext_bits(AT(uint8_t), 2);
    case IR_U4: return zext_bits(AT(uint8_t), 4);
    default: return sat_u64(dev_load_f64(t, base, i), UINT64_MAX);
    }
}

#undef AT

/* ---- stores ---- */

#define PUT(T, x) (((T *)base)[i] = (T)(x))

void dev_store_f64(IrType t, void *base, int64_t i, double v)
{
    switch (t) {
    case IR_PRED: PUT(uint8_t, v != 0); break;
    case IR_S8: PUT(int8_t, sat_i64(v, INT8_MIN, INT8_MAX)); break;
    case IR_S16: PUT(int16_t, sat_i64(v, INT16_MIN, INT16_MAX)); break;
    case IR_S32: PUT(int32_t, sat_i64(v, INT32_MIN, INT32_MAX)); break;
    case IR_S64: PUT(int64_t, sat_i64(v, INT64_MIN, INT64_MAX)); break;
    case IR_U8: PUT(uint8_t, sat_u64(v, UINT8_MAX)); break;
    case IR_U16: PUT(uint16_t, sat_u64(v, UINT16_MAX)); break;
    case IR_U32: PUT(uint32_t, sat_u64(v, UINT32_MAX)); break;
    case IR_U64: PUT(uint64_t, sat_u64(v, UINT64_MAX)); break;
    case IR_F16: PUT(uint16_t, dev_f32_to_f16((float)v)); break;
    case IR_BF16: PUT(uint16_t, dev_f32_to_bf16((float)v)); break;
    case IR_F32: PUT(float, v); break;
    case IR_F64: PUT(double, v); break;
    case IR_C64:
        ((float *)base)[2 * i] = (float)v;
        ((float *)base)[2 * i + 1] = 0;
        break;
    case IR_C128:
        ((double *)base)[2 * i] = v;
        ((double *)base)[2 * i + 1] = 0;
        break;
    case IR_S2: PUT(int8_t, sat_i64(v, -2, 1)); break;
    case IR_S4: PUT(int8_t, sat_i64(v, -8, 7)); break;
    case IR_U2: PUT(uint8_t, sat_u64(v, 3)); break;
    case IR_U4: PUT(uint8_t, sat_u64(v, 15)); break;
    default:
        if (ir_type_is_lowp_float(t))
            PUT(uint8_t, ir_lowp_from_double(t, v));
        break;
    }
}

void dev_store_i64(IrType t, void *base, int64_t i, int64_t v)
{
    switch (t) {
    case IR_PRED: PUT(uint8_t, v != 0); break;
    case IR_S8: case IR_U8: PUT(uint8_t, (uint64_t)v); break;
    case IR_S16: case IR_U16: PUT(uint16_t, (uint64_t)v); break;
    case IR_S32: case IR_U32: PUT(uint32_t, (uint64_t)v); break;
    case IR_S64: case IR_U64: PUT(uint64_t, (uint64_t)v); break;
    case IR_S2: case IR_S4: case IR_U2: case IR_U4: PUT(uint8_t, dev_subbyte_wrap(t, (uint64_t)v)); break;
    /* Directly to the narrow float: int64 -> double -> float would round twice. */
    case IR_F16: PUT(uint16_t, dev_f32_to_f16((float)v)); break;
    case IR_BF16: PUT(uint16_t, dev_f32_to_bf16((float)v)); break;
    case IR_F32: PUT(float, v); break;
    default: dev_store_f64(t, base, i, (double)v); break;
    }
}

void dev_store_u64(IrType t, void *base, int64_t i, uint64_t v)
{
    switch (t) {
    case IR_PRED: PUT(uint8_t, v != 0); break;
    case IR_S8: case IR_U8: PUT(uint8_t, v); break;
    case IR_S16: case IR_U16: PUT(uint16_t, v); break;
    case IR_S32: case IR_U32: PUT(uint32_t, v); break;
    case IR_S64: case IR_U64: PUT(uint64_t, v); break;
    case IR_S2: case IR_S4: case IR_U2: case IR_U4: PUT(uint8_t, dev_subbyte_wrap(t, v)); break;
    case IR_F16: PUT(uint16_t, dev_f32_to_f16((float)v)); break;
    case IR_BF16: PUT(uint16_t, dev_f32_to_bf16((float)v)); break;
    case IR_F32: PUT(float, v); break;
    default: dev_store_f64(t, base, i, (double)v); break;
    }
}

#undef PUT

/* A float's position in IEEE totalOrder as a signed integer:
 * -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN. Negative values have
 * their magnitude bits flipped so that larger magnitudes sort lower, e.g.
 * f32 -0.0 (0x80000000) -> -1, +0.0 -> 0, -1.0 -> -0x3f800001. */
int64_t dev_total_order_key(IrType t, const void *base, int64_t i)
{
    int64_t v;
    int bits;
    switch (t) {
    case IR_F16: case IR_BF16: v = ((const int16_t *)base)[i]; bits = 16; break;
    case IR_F32: v = ((const int32_t *)base)[i]; bits = 32; break;
    case IR_F64: v = ((const int64_t *)base)[i]; bits = 64; break;
    default: { /* f8, f4: decoded exactly to f32, which orders them alike */
        float f = ir_type_is_lowp_float(t) ? ir_lowp_to_float(t, ((const uint8_t *)base)[i])
                                           : (float)dev_load_f64(t, base, i);
        int32_t b;
        memcpy(&b, &f, sizeof b);
        v = b;
        bits = 32;
        break;
    }
    }
    int64_t mag = bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    return v < 0 ? v ^ mag : v;
}
