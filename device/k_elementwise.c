/*
 * k_elementwise.c: every unary, binary and ternary op of hlo_ops.def, with
 * compare, convert, reduce-precision, bitcast-convert and map, in XLA's
 * semantics (operation semantics + hlo_evaluator).
 *
 * Speed: each (op, type) pair is one tight loop over the whole array (the
 * switch over the opcode is outside the loop), generated for every native
 * C type by the macros below; f16 and bf16 are computed in f32 a chunk at a
 * time and rounded back. Integer arithmetic wraps (done in the unsigned
 * type, so C never sees a signed overflow).
 *
 * Integer corner cases (XLA):
 *   x / 0 = -1 (all ones)          x % 0 = x
 *   INT_MIN / -1 = INT_MIN         INT_MIN % -1 = 0
 *   shift-left, shift-right-logical by >= width (or negative): 0
 *   shift-right-arithmetic by >= width: 0 or -1 (the sign fill)
 *   power: x^0 = 1, 1^y = 1, x^(negative) = 0 otherwise
 * Float corner cases:
 *   maximum/minimum propagate NaN: max(a, b) = (isnan(a) || a >= b) ? a : b
 *   remainder is C fmod; sign(-0.0) = -0.0, sign(NaN) = NaN
 *   compare type=TOTALORDER: -NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN
 */
#include "device.h"

#include <complex.h>
#include <string.h>
#include <tgmath.h>

#include "float_ops.h"
#include "vmath.h"

#define LOOP(stmt)                        \
    for (int64_t i = 0; i < n; i++) {     \
        stmt;                             \
    }

/* Elements converted per chunk when f16/bf16 are computed in f32. */
#define CHUNK 512

/* ------------------------------------------------------------------ */
/* Float ops (f32, f64), one loop per op                              */
/* ------------------------------------------------------------------ */

/* The reducers' arithmetic (DEV_ADD, DEV_FMAX, ...) is arith.h's, through
 * float_ops.h. */
#define FMAX DEV_FMAX
#define FMIN DEV_FMIN

/* One loop per op of float_ops.h's lists. */
#define UNARY_CASE(T, OPC, EXPR) \
    case OPC: LOOP(T a = x[i]; r[i] = (EXPR)) break;
#define BINARY_CASE(T, OPC, EXPR) \
    case OPC: LOOP(T a = x[i]; T b = y[i]; r[i] = (EXPR)) break;

#define DEF_FLOAT_OPS(T, SUF)                                                                \
    DEV_VECTOR_CLONES static bool unary_##SUF(IrOpcode op, const T *restrict x, T *restrict r, \
                                              int64_t n)                                     \
    {                                                                                        \
        if (dev_vmath_##SUF(op, x, r, n))                                                    \
            return true;                                                                     \
        switch (op) {                                                                        \
            DEV_FLOAT_UNARY_OPS(UNARY_CASE, T)                                               \
        default: return false;                                                               \
        }                                                                                    \
        return true;                                                                         \
    }                                                                                        \
    DEV_VECTOR_CLONES static bool binary_##SUF(IrOpcode op, const T *restrict x,             \
                                               const T *restrict y, T *restrict r, int64_t n) \
    {                                                                                        \
        switch (op) {                                                                        \
            DEV_FLOAT_BINARY_OPS(BINARY_CASE, T)                                             \
        default: return false;                                                               \
        }                                                                                    \
        return true;                                                                         \
    }                                                                                        \
    static void clamp_##SUF(const T *lo, int64_t slo, const T *restrict x, const T *hi,      \
                            int64_t shi, T *restrict r, int64_t n)                           \
    {                                                                                        \
        LOOP(T v = FMAX(x[i], lo[i * slo]); r[i] = FMIN(v, hi[i * shi]))                     \
    }

DEF_FLOAT_OPS(float, f32)
DEF_FLOAT_OPS(double, f64)

/* ------------------------------------------------------------------ */
/* Integer ops, one set per C type                                     */
/* ------------------------------------------------------------------ */

/* Unsigned integer power by squaring (wraps). Example: 3^5: 3*81 = 243. */
static uint64_t ipow_u64(uint64_t base, uint64_t e)
{
    uint64_t r = 1;
    while (e) {
        if (e & 1)
            r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}

/* The high `bits` bits of the 2*bits-bit product, unsigned and signed
 * (mulhi). Below 64 bits the product fits in 64; at 64 it is assembled
 * from 32-bit halves, and the signed one corrected from the unsigned one:
 * hi_s = hi_u - (a < 0 ? b : 0) - (b < 0 ? a : 0) (mod 2^64).
 * Example: u8 200 * 100 = 20000 = 0x4e20 -> 0x4e = 78. */
static uint64_t mulhi_u(uint64_t a, uint64_t b, int bits)
{
    if (bits < 64)
        return (a * b) >> bits;
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

static int64_t mulhi_s(int64_t a, int64_t b, int bits)
{
    if (bits < 64)
        return (a * b) >> bits; /* |a*b| < 2^62; >> of a negative is arithmetic in GCC */
    uint64_t h = mulhi_u((uint64_t)a, (uint64_t)b, 64);
    h -= a < 0 ? (uint64_t)b : 0;
    h -= b < 0 ? (uint64_t)a : 0;
    return (int64_t)h;
}

/* Leading zeros of the low `bits` bits of x. */
static int clz_bits(uint64_t x, int bits)
{
    return x == 0 ? bits : __builtin_clzll(x) - (64 - bits);
}

/* T the type, U its unsigned twin, S its signed twin, W the unsigned type
 * arithmetic is done in (never promoted to int, so never overflows), BITS
 * the width, SIGNED whether T is signed. NEG(x) tests the sign without a
 * comparison the compiler calls always false for unsigned T. */
#define NEG(x, S, SIGNED) ((SIGNED) && (S)(x) < 0)
#define DEF_INT_OPS(T, U, S, W, BITS, SIGNED, SUF)                                             \
    static bool unary_##SUF(IrOpcode op, const T *restrict a, T *restrict r, int64_t n)     \
    {                                                                                       \
        switch (op) {                                                                       \
        case OP_ABS:                                                                        \
            LOOP(r[i] = NEG(a[i], S, SIGNED) ? (T)(U)(0u - (W)a[i]) : a[i]) break;          \
        case OP_NEGATE: LOOP(r[i] = (T)(U)(0u - (W)a[i])) break;                            \
        case OP_SIGN: LOOP(r[i] = (T)((a[i] > 0) - NEG(a[i], S, SIGNED))) break;            \
        case OP_POPCNT: LOOP(r[i] = (T)__builtin_popcountll((uint64_t)(U)a[i])) break;      \
        case OP_CLZ: LOOP(r[i] = (T)clz_bits((uint64_t)(U)a[i], BITS)) break;               \
        case OP_NOT: LOOP(r[i] = (T)(U)~(U)a[i]) break;                                     \
        default: return false;                                                              \
        }                                                                                   \
        return true;                                                                        \
    }                                                                                       \
    static T div_##SUF(T a, T b)                                                            \
    {                                                                                       \
        if (b == 0)                                                                         \
            return (T)(U)~(U)0;                                                             \
        if (SIGNED && b == (T)-1)                                                           \
            return (T)(U)(0u - (W)a); /* INT_MIN / -1 wraps to INT_MIN */                   \
        return a / b;                                                                       \
    }                                                                                       \
    static T rem_##SUF(T a, T b)                                                            \
    {                                                                                       \
        if (b == 0)                                                                         \
            return a;                                                                       \
        if (SIGNED && b == (T)-1)                                                           \
            return 0;                                                                       \
        return a % b;                                                                       \
    }                                                                                       \
    static T pow_##SUF(T a, T b)                                                            \
    {                                                                                       \
        if (a == 1 || b == 0)                                                               \
            return 1;                                                                       \
        if (NEG(b, S, SIGNED))                                                              \
            return 0;                                                                       \
        return (T)(U)ipow_u64((uint64_t)(U)a, (uint64_t)(U)b);                              \
    }                                                                                       \
    static bool binary_##SUF(IrOpcode op, const T *restrict a, const T *restrict b,         \
                             T *restrict r, int64_t n)                                      \
    {                                                                                       \
        switch (op) {                                                                       \
        case OP_ADD: LOOP(r[i] = (T)(U)DEV_ADD((W)a[i], (W)b[i])) break;                    \
        case OP_SUBTRACT: LOOP(r[i] = (T)(U)((W)a[i] - (W)b[i])) break;                     \
        case OP_MULTIPLY: LOOP(r[i] = (T)(U)DEV_MUL((W)a[i], (W)b[i])) break;               \
        case OP_DIVIDE: LOOP(r[i] = div_##SUF(a[i], b[i])) break;                           \
        case OP_REMAINDER: LOOP(r[i] = rem_##SUF(a[i], b[i])) break;                        \
        case OP_MAXIMUM: LOOP(r[i] = DEV_IMAX(a[i], b[i])) break;                           \
        case OP_MINIMUM: LOOP(r[i] = DEV_IMIN(a[i], b[i])) break;                           \
        case OP_POWER: LOOP(r[i] = pow_##SUF(a[i], b[i])) break;                            \
        case OP_MULHI:                                                                      \
            LOOP(r[i] = SIGNED ? (T)(U)(uint64_t)mulhi_s((int64_t)a[i], (int64_t)b[i], BITS)   \
                               : (T)(U)mulhi_u((uint64_t)(U)a[i], (uint64_t)(U)b[i], BITS)) \
            break;                                                                          \
        case OP_AND: LOOP(r[i] = DEV_AND(a[i], b[i])) break;                                \
        case OP_OR: LOOP(r[i] = DEV_OR(a[i], b[i])) break;                                  \
        case OP_XOR: LOOP(r[i] = DEV_XOR(a[i], b[i])) break;                                \
        case OP_SHL:                                                                        \
            LOOP(r[i] = (U)b[i] >= BITS ? 0 : (T)(U)((W)(U)a[i] << (U)b[i])) break;         \
        case OP_SHRL:                                                                       \
            LOOP(r[i] = (U)b[i] >= BITS ? 0 : (T)(U)((W)(U)a[i] >> (U)b[i])) break;         \
        case OP_SHRA:                                                                       \
            LOOP(r[i] = (T)(U)((U)b[i] >= BITS ? ((S)a[i] < 0 ? (S)-1 : 0)                  \
                                               : (S)((S)a[i] >> (U)b[i])))                  \
            break;                                                                          \
        default: return false;                                                              \
        }                                                                                   \
        return true;                                                                        \
    }                                                                                       \
    static void clamp_##SUF(const T *lo, int64_t slo, const T *restrict x, const T *hi,     \
                            int64_t shi, T *restrict r, int64_t n)                          \
    {                                                                                       \
        LOOP(T v = x[i] > lo[i * slo] ? x[i] : lo[i * slo];                                 \
             r[i] = v < hi[i * shi] ? v : hi[i * shi])                                      \
    }

DEF_INT_OPS(int8_t, uint8_t, int8_t, uint32_t, 8, 1, s8)
DEF_INT_OPS(int16_t, uint16_t, int16_t, uint32_t, 16, 1, s16)
DEF_INT_OPS(int32_t, uint32_t, int32_t, uint32_t, 32, 1, s32)
DEF_INT_OPS(int64_t, uint64_t, int64_t, uint64_t, 64, 1, s64)
DEF_INT_OPS(uint8_t, uint8_t, int8_t, uint32_t, 8, 0, u8)
DEF_INT_OPS(uint16_t, uint16_t, int16_t, uint32_t, 16, 0, u16)
DEF_INT_OPS(uint32_t, uint32_t, int32_t, uint32_t, 32, 0, u32)
DEF_INT_OPS(uint64_t, uint64_t, int64_t, uint64_t, 64, 0, u64)

/* ---- pred: logical ops on 0/1 bytes ---- */

static bool unary_pred(IrOpcode op, const uint8_t *restrict a, uint8_t *restrict r, int64_t n)
{
    if (op != OP_NOT)
        return false;
    LOOP(r[i] = a[i] ? 0 : 1)
    return true;
}

static bool binary_pred(IrOpcode op, const uint8_t *restrict a, const uint8_t *restrict b,
                        uint8_t *restrict r, int64_t n)
{
    switch (op) {
    case OP_AND: case OP_MINIMUM: LOOP(r[i] = DEV_AND(a[i], b[i])) break;
    case OP_OR: case OP_MAXIMUM: LOOP(r[i] = DEV_OR(a[i], b[i])) break;
    case OP_XOR: LOOP(r[i] = DEV_XOR(a[i], b[i])) break;
    default: return false;
    }
    return true;
}

/* ---- complex: C99 <complex.h> through <tgmath.h> ---- */

/* The branch cuts are C99's (Annex G), which XLA's CPU backend and NumPy
 * share: acos/asin cut along the real axis outside [-1, 1], atanh outside
 * (-1, 1), atan and asinh along the imaginary axis outside [-i, i], log and
 * sqrt along the negative reals. log1p and expm1 keep their precision near
 * zero the way XLA writes them:
 *   log1p(x+iy) = log1p(x(2+x) + y^2)/2 + i atan2(y, 1+x)
 *   expm1(x+iy) = (expm1(x) cos y - 2 sin^2(y/2)) + i exp(x) sin y
 * sign(z) = z/|z| (0 for 0); power: 0^0 = 1, else C's cpow. */
#define DEF_COMPLEX_OPS(T, R, SUF)                                                          \
    static T log1p_##SUF(T z)                                                               \
    {                                                                                       \
        R x = creal(z), y = cimag(z);                                                       \
        return (R)0.5 * log1p(x * ((R)2 + x) + y * y) + (T)I * atan2(y, (R)1 + x);         \
    }                                                                                       \
    static T expm1_##SUF(T z)                                                               \
    {                                                                                       \
        R x = creal(z), y = cimag(z), h = sin(y / (R)2);                                    \
        return expm1(x) * cos(y) - (R)2 * h * h + (T)I * (exp(x) * sin(y));                 \
    }                                                                                       \
    static T sign_##SUF(T z)                                                                \
    {                                                                                       \
        R m = cabs(z);                                                                      \
        return m == 0 ? z : z / m;                                                          \
    }                                                                                       \
    static T pow_##SUF(T a, T b)                                                            \
    {                                                                                       \
        return b == 0 ? (T)1 : cpow(a, b);                                                  \
    }                                                                                       \
    static bool unary_##SUF(IrOpcode op, const T *restrict a, T *restrict r, int64_t n)     \
    {                                                                                       \
        switch (op) {                                                                       \
        case OP_NEGATE: LOOP(r[i] = -a[i]) break;                                           \
        case OP_EXP: LOOP(r[i] = exp(a[i])) break;                                          \
        case OP_EXPM1: LOOP(r[i] = expm1_##SUF(a[i])) break;                                \
        case OP_LOG: LOOP(r[i] = log(a[i])) break;                                          \
        case OP_LOG1P: LOOP(r[i] = log1p_##SUF(a[i])) break;                                \
        case OP_LOGISTIC: LOOP(r[i] = (R)1 / ((R)1 + exp(-a[i]))) break;                    \
        case OP_SQRT: LOOP(r[i] = sqrt(a[i])) break;                                        \
        case OP_RSQRT: LOOP(r[i] = (R)1 / sqrt(a[i])) break;                                \
        case OP_SIGN: LOOP(r[i] = sign_##SUF(a[i])) break;                                  \
        case OP_TANH: LOOP(r[i] = tanh(a[i])) break;                                        \
        case OP_SINE: LOOP(r[i] = sin(a[i])) break;                                         \
        case OP_COSINE: LOOP(r[i] = cos(a[i])) break;                                       \
        case OP_TAN: LOOP(r[i] = tan(a[i])) break;                                          \
        case OP_ACOS: LOOP(r[i] = acos(a[i])) break;                                        \
        case OP_ACOSH: LOOP(r[i] = acosh(a[i])) break;                                      \
        case OP_ASIN: LOOP(r[i] = asin(a[i])) break;                                        \
        case OP_ASINH: LOOP(r[i] = asinh(a[i])) break;                                      \
        case OP_ATAN: LOOP(r[i] = atan(a[i])) break;                                        \
        case OP_ATANH: LOOP(r[i] = atanh(a[i])) break;                                      \
        case OP_COSH: LOOP(r[i] = cosh(a[i])) break;                                        \
        case OP_SINH: LOOP(r[i] = sinh(a[i])) break;                                        \
        default: return false;                                                              \
        }                                                                                   \
        return true;                                                                        \
    }                                                                                       \
    static bool binary_##SUF(IrOpcode op, const T *restrict a, const T *restrict b,         \
                             T *restrict r, int64_t n)                                      \
    {                                                                                       \
        switch (op) {                                                                       \
        case OP_ADD: LOOP(r[i] = DEV_ADD(a[i], b[i])) break;                                \
        case OP_SUBTRACT: LOOP(r[i] = a[i] - b[i]) break;                                   \
        case OP_MULTIPLY: LOOP(r[i] = DEV_MUL(a[i], b[i])) break;                           \
        case OP_DIVIDE: LOOP(r[i] = a[i] / b[i]) break;                                     \
        case OP_POWER: LOOP(r[i] = pow_##SUF(a[i], b[i])) break;                            \
        default: return false;                                                              \
        }                                                                                   \
        return true;                                                                        \
    }

DEF_COMPLEX_OPS(float _Complex, float, c64)
DEF_COMPLEX_OPS(double _Complex, double, c128)

/* ---- f16 / bf16: through f32 a chunk at a time ---- */

/* bf16 <-> f32 inline (the same rule as scalar.c's dev_f32_to_bf16), so
 * the chunk loops below vectorise instead of calling out per element. */
static inline float bf16_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static inline uint16_t f32_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static void narrow_to_f32(IrType t, const uint16_t *restrict src, float *restrict dst, int64_t n)
{
    if (t == IR_BF16)
        LOOP(dst[i] = bf16_f32(src[i]))
    else
        LOOP(dst[i] = dev_f16_to_f32(src[i]))
}

static void f32_to_narrow(IrType t, const float *restrict src, uint16_t *restrict dst, int64_t n)
{
    if (t == IR_BF16)
        LOOP(dst[i] = f32_bf16(src[i]))
    else
        LOOP(dst[i] = dev_f32_to_f16(src[i]))
}

static bool unary_narrow(IrType t, IrOpcode op, const uint16_t *a, uint16_t *r, int64_t n)
{
    float fa[CHUNK], fr[CHUNK];
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        narrow_to_f32(t, a + s, fa, m);
        if (!unary_f32(op, fa, fr, m))
            return false;
        f32_to_narrow(t, fr, r + s, m);
        if (n == 0)
            break;
    }
    return true;
}

static bool binary_narrow(IrType t, IrOpcode op, const uint16_t *a, const uint16_t *b,
                          uint16_t *r, int64_t n)
{
    float fa[CHUNK], fb[CHUNK], fr[CHUNK];
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        narrow_to_f32(t, a + s, fa, m);
        narrow_to_f32(t, b + s, fb, m);
        if (!binary_f32(op, fa, fb, fr, m))
            return false;
        f32_to_narrow(t, fr, r + s, m);
        if (n == 0)
            break;
    }
    return true;
}

/* ---- f8 / f4: through f32 a chunk at a time, as XLA's CPU backend ---- */

/* Every code of t as f32 (exact), so a chunk decodes by table look-up. */
static void lowp_table(IrType t, float tab[256])
{
    for (int c = 0; c < 256; c++)
        tab[c] = ir_lowp_to_float(t, (uint8_t)c);
}

static void f32_to_lowp(IrType t, const float *restrict src, uint8_t *restrict dst, int64_t n)
{
    LOOP(dst[i] = ir_lowp_from_float(t, src[i]))
}

static bool unary_lowp(IrType t, IrOpcode op, const uint8_t *a, uint8_t *r, int64_t n)
{
    float tab[256], fa[CHUNK], fr[CHUNK];
    lowp_table(t, tab);
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        for (int64_t i = 0; i < m; i++)
            fa[i] = tab[a[s + i]];
        if (!unary_f32(op, fa, fr, m))
            return false;
        f32_to_lowp(t, fr, r + s, m);
        if (n == 0)
            break;
    }
    return true;
}

static bool binary_lowp(IrType t, IrOpcode op, const uint8_t *a, const uint8_t *b, uint8_t *r,
                        int64_t n)
{
    float tab[256], fa[CHUNK], fb[CHUNK], fr[CHUNK];
    lowp_table(t, tab);
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        for (int64_t i = 0; i < m; i++) {
            fa[i] = tab[a[s + i]];
            fb[i] = tab[b[s + i]];
        }
        if (!binary_f32(op, fa, fb, fr, m))
            return false;
        f32_to_lowp(t, fr, r + s, m);
        if (n == 0)
            break;
    }
    return true;
}

/* ---- s2 / s4 / u2 / u4: the 8-bit loops, wrapped back to the width ---- */

/* Operands are read canonical (sign- or zero-extended from the low bits),
 * the 8-bit loop runs, and the result keeps the low bits: every wrapping op
 * (add, multiply, negate, shift-left, divide's INT_MIN / -1, ...) then
 * wraps in the narrow width. Ops whose answer depends on the width read
 * the zero-extended bits: popcnt, clz (less the 8 - width extra zeros) and
 * shift-right-logical; shift-right-arithmetic reads the sign-extended
 * value even for u2/u4 (XLA shifts unsigned types as their signed twin);
 * mulhi takes the width itself. Example: s4 7 + 1 = 8 -> -8. */
static void subbyte_read(IrType t, bool zext, const uint8_t *src, uint8_t *dst, int64_t m)
{
    uint8_t mask = (uint8_t)((1u << ir_type_bits(t)) - 1u);
    for (int64_t i = 0; i < m; i++)
        dst[i] = zext ? (uint8_t)(src[i] & mask) : dev_subbyte_wrap(t == IR_U2 ? IR_S2 : t == IR_U4 ? IR_S4 : t, src[i]);
}

static bool unary_subbyte(IrType t, IrOpcode op, const uint8_t *a, uint8_t *r, int64_t n)
{
    int bits = ir_type_bits(t);
    bool zext = op == OP_POPCNT || op == OP_CLZ || !ir_type_is_signed_int(t);
    uint8_t x[CHUNK];
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        subbyte_read(t, zext, a + s, x, m);
        bool ok = zext ? unary_u8(op, x, r + s, m)
                       : unary_s8(op, (const int8_t *)x, (int8_t *)(r + s), m);
        if (!ok)
            return false;
        for (int64_t i = 0; i < m; i++)
            r[s + i] = dev_subbyte_wrap(t, op == OP_CLZ ? (uint64_t)(r[s + i] - (8 - bits)) : r[s + i]);
        if (n == 0)
            break;
    }
    return true;
}

static bool binary_subbyte(IrType t, IrOpcode op, const uint8_t *a, const uint8_t *b, uint8_t *r,
                           int64_t n)
{
    int bits = ir_type_bits(t);
    bool sgn = ir_type_is_signed_int(t);
    /* The loop's signedness and whether the lhs is read zero-extended. */
    bool use_signed = op == OP_SHRL ? false : op == OP_SHRA ? true : sgn;
    bool zext_a = op == OP_SHRL || (!sgn && op != OP_SHRA);
    uint8_t x[CHUNK], y[CHUNK];
    for (int64_t s = 0; s < n || s == 0; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        subbyte_read(t, zext_a, a + s, x, m);
        subbyte_read(t, !sgn, b + s, y, m);
        bool ok = true;
        if (op == OP_MULHI) {
            for (int64_t i = 0; i < m; i++)
                r[s + i] = (uint8_t)(sgn ? (uint64_t)mulhi_s((int8_t)x[i], (int8_t)y[i], bits)
                                         : mulhi_u(x[i], y[i], bits));
        } else if (use_signed) {
            ok = binary_s8(op, (const int8_t *)x, (const int8_t *)y, (int8_t *)(r + s), m);
        } else {
            ok = binary_u8(op, x, y, r + s, m);
        }
        if (!ok)
            return false;
        for (int64_t i = 0; i < m; i++)
            r[s + i] = dev_subbyte_wrap(t, r[s + i]);
        if (n == 0)
            break;
    }
    return true;
}

/* ---- dispatch by type ---- */

static bool unary_typed(IrOpcode op, IrType t, const void *a, void *r, int64_t n)
{
    switch (t) {
    case IR_PRED: return unary_pred(op, a, r, n);
    case IR_S8: return unary_s8(op, a, r, n);
    case IR_S16: return unary_s16(op, a, r, n);
    case IR_S32: return unary_s32(op, a, r, n);
    case IR_S64: return unary_s64(op, a, r, n);
    case IR_U8: return unary_u8(op, a, r, n);
    case IR_U16: return unary_u16(op, a, r, n);
    case IR_U32: return unary_u32(op, a, r, n);
    case IR_U64: return unary_u64(op, a, r, n);
    case IR_F16: case IR_BF16: return unary_narrow(t, op, a, r, n);
    case IR_F32: return unary_f32(op, a, r, n);
    case IR_F64: return unary_f64(op, a, r, n);
    case IR_C64: return unary_c64(op, a, r, n);
    case IR_C128: return unary_c128(op, a, r, n);
    case IR_S2: case IR_S4: case IR_U2: case IR_U4: return unary_subbyte(t, op, a, r, n);
    default: return ir_type_is_lowp_float(t) && unary_lowp(t, op, a, r, n);
    }
}

static bool binary_typed(IrOpcode op, IrType t, const void *a, const void *b, void *r, int64_t n)
{
    switch (t) {
    case IR_PRED: return binary_pred(op, a, b, r, n);
    case IR_S8: return binary_s8(op, a, b, r, n);
    case IR_S16: return binary_s16(op, a, b, r, n);
    case IR_S32: return binary_s32(op, a, b, r, n);
    case IR_S64: return binary_s64(op, a, b, r, n);
    case IR_U8: return binary_u8(op, a, b, r, n);
    case IR_U16: return binary_u16(op, a, b, r, n);
    case IR_U32: return binary_u32(op, a, b, r, n);
    case IR_U64: return binary_u64(op, a, b, r, n);
    case IR_F16: case IR_BF16: return binary_narrow(t, op, a, b, r, n);
    case IR_F32: return binary_f32(op, a, b, r, n);
    case IR_F64: return binary_f64(op, a, b, r, n);
    case IR_C64: return binary_c64(op, a, b, r, n);
    case IR_C128: return binary_c128(op, a, b, r, n);
    case IR_S2: case IR_S4: case IR_U2: case IR_U4: return binary_subbyte(t, op, a, b, r, n);
    default: return ir_type_is_lowp_float(t) && binary_lowp(t, op, a, b, r, n);
    }
}

/* ------------------------------------------------------------------ */
/* compare                                                             */
/* ------------------------------------------------------------------ */

/* Total-order keys: flip the magnitude bits of negative floats, then
 * compare as signed integers. Example (f32): -0.0 = 0x80000000 -> key
 * 0xffffffff = -1 < 0 = key of +0.0; -NaN 0xffc00000 -> 0x803fffff, the
 * most negative of all. */
static int64_t key_f32(float f)
{
    int32_t s;
    memcpy(&s, &f, sizeof s);
    return s ^ ((s >> 31) & 0x7fffffff);
}

static int64_t key_f64(double f)
{
    int64_t s;
    memcpy(&s, &f, sizeof s);
    return s ^ ((s >> 63) & INT64_MAX);
}

#define CMP_LOOP(EXPR_A, EXPR_B)                                   \
    switch (dir) {                                                 \
    case CMP_EQ: LOOP(r[i] = (EXPR_A) == (EXPR_B)) break;          \
    case CMP_NE: LOOP(r[i] = (EXPR_A) != (EXPR_B)) break;          \
    case CMP_LT: LOOP(r[i] = (EXPR_A) < (EXPR_B)) break;           \
    case CMP_LE: LOOP(r[i] = (EXPR_A) <= (EXPR_B)) break;          \
    case CMP_GT: LOOP(r[i] = (EXPR_A) > (EXPR_B)) break;           \
    case CMP_GE: LOOP(r[i] = (EXPR_A) >= (EXPR_B)) break;          \
    default: return false;                                         \
    }                                                              \
    return true;

static bool cmp_f32(IrCmpDir dir, const float *restrict a, const float *restrict b,
                    uint8_t *restrict r, int64_t n)
{
    CMP_LOOP(a[i], b[i])
}

static bool cmp_f64(IrCmpDir dir, const double *restrict a, const double *restrict b,
                    uint8_t *restrict r, int64_t n)
{
    CMP_LOOP(a[i], b[i])
}

static bool cmp_s32(IrCmpDir dir, const int32_t *restrict a, const int32_t *restrict b,
                    uint8_t *restrict r, int64_t n)
{
    CMP_LOOP(a[i], b[i])
}

static bool cmp_i64(IrCmpDir dir, const int64_t *restrict a, const int64_t *restrict b,
                    uint8_t *restrict r, int64_t n)
{
    CMP_LOOP(a[i], b[i])
}

static bool cmp_u64(IrCmpDir dir, const uint64_t *restrict a, const uint64_t *restrict b,
                    uint8_t *restrict r, int64_t n)
{
    CMP_LOOP(a[i], b[i])
}

/* Comparison class of the operands: the type= attribute, else derived. */
static IrCmpType cmp_class(IrCmpType given, IrType t)
{
    if (given != CMPT_DEFAULT)
        return given;
    if (ir_type_is_float(t))
        return CMPT_FLOAT;
    return ir_type_is_signed_int(t) ? CMPT_SIGNED : CMPT_UNSIGNED;
}

/* The generic path: a chunk of elements is turned into doubles, totally
 * ordered keys, or 64-bit integers, then compared. */
static bool compare_generic(IrCmpDir dir, IrCmpType cls, IrType t, const void *a,
                            const void *b, uint8_t *r, int64_t n)
{
    union {
        double f[CHUNK];
        int64_t s[CHUNK];
        uint64_t u[CHUNK];
    } x, y;
    for (int64_t s = 0; s < n; s += CHUNK) {
        int64_t m = n - s < CHUNK ? n - s : CHUNK;
        bool ok;
        if (ir_type_is_float(t) && cls == CMPT_TOTALORDER) {
            for (int64_t i = 0; i < m; i++) {
                double va = dev_load_f64(t, a, s + i), vb = dev_load_f64(t, b, s + i);
                /* f16/bf16/f32 convert to f32 exactly, NaN sign kept. */
                x.s[i] = t == IR_F64 ? key_f64(va) : key_f32((float)va);
                y.s[i] = t == IR_F64 ? key_f64(vb) : key_f32((float)vb);
            }
            ok = cmp_i64(dir, x.s, y.s, r + s, m);
        } else if (ir_type_is_float(t) || ir_type_is_complex(t)) {
            for (int64_t i = 0; i < m; i++) {
                x.f[i] = dev_load_f64(t, a, s + i);
                y.f[i] = dev_load_f64(t, b, s + i);
            }
            ok = cmp_f64(dir, x.f, y.f, r + s, m);
        } else if (cls == CMPT_SIGNED) {
            for (int64_t i = 0; i < m; i++) {
                x.s[i] = dev_load_i64(t, a, s + i);
                y.s[i] = dev_load_i64(t, b, s + i);
            }
            ok = cmp_i64(dir, x.s, y.s, r + s, m);
        } else {
            for (int64_t i = 0; i < m; i++) {
                x.u[i] = dev_load_u64(t, a, s + i);
                y.u[i] = dev_load_u64(t, b, s + i);
            }
            ok = cmp_u64(dir, x.u, y.u, r + s, m);
        }
        if (!ok)
            return false;
    }
    return true;
}

static bool compare_typed(IrCmpDir dir, IrCmpType given, IrType t, const void *a, const void *b,
                          uint8_t *r, int64_t n)
{
    IrCmpType cls = cmp_class(given, t);
    if (t == IR_F32 && cls == CMPT_FLOAT)
        return cmp_f32(dir, a, b, r, n);
    if (t == IR_F64 && cls == CMPT_FLOAT)
        return cmp_f64(dir, a, b, r, n);
    if (t == IR_S32 && cls == CMPT_SIGNED)
        return cmp_s32(dir, a, b, r, n);
    if (ir_type_is_complex(t) && dir != CMP_EQ && dir != CMP_NE)
        return false;
    if (ir_type_is_complex(t)) { /* equal when both parts are */
        bool eq = dir == CMP_EQ;
        for (int64_t i = 0; i < n; i++) {
            bool same = t == IR_C64
                            ? ((const float _Complex *)a)[i] == ((const float _Complex *)b)[i]
                            : ((const double _Complex *)a)[i] == ((const double _Complex *)b)[i];
            r[i] = eq ? same : !same;
        }
        return true;
    }
    return compare_generic(dir, cls, t, a, b, r, n);
}

/* ------------------------------------------------------------------ */
/* convert                                                             */
/* ------------------------------------------------------------------ */

/* Saturating float -> s32 (NaN -> 0), the common fast case. */
static int32_t f64_to_s32(double v)
{
    if (isnan(v))
        return 0;
    if (v <= (double)INT32_MIN)
        return INT32_MIN;
    if (v >= (double)INT32_MAX)
        return INT32_MAX;
    return (int32_t)v;
}

#define CONV(ST, DT, EXPR)                                           \
    do {                                                             \
        const ST *restrict s_ = src;                                 \
        DT *restrict d_ = dst;                                       \
        for (int64_t i = 0; i < n; i++) {                            \
            ST x = s_[i];                                            \
            d_[i] = (EXPR);                                          \
        }                                                            \
    } while (0)

/* Fast loops for the common pairs; false when the pair has none. */
static bool convert_fast(IrType st, const void *src, IrType dt, void *dst, int64_t n)
{
#define PAIR(a, b) ((a) * IR_NTYPES + (b))
    switch (PAIR(st, dt)) {
    case PAIR(IR_F32, IR_F64): CONV(float, double, x); return true;
    case PAIR(IR_F64, IR_F32): CONV(double, float, (float)x); return true;
    case PAIR(IR_S32, IR_F32): CONV(int32_t, float, (float)x); return true;
    case PAIR(IR_S32, IR_F64): CONV(int32_t, double, x); return true;
    case PAIR(IR_S64, IR_S32): CONV(int64_t, int32_t, (int32_t)(uint32_t)(uint64_t)x); return true;
    case PAIR(IR_S32, IR_S64): CONV(int32_t, int64_t, x); return true;
    case PAIR(IR_F32, IR_S32): CONV(float, int32_t, f64_to_s32(x)); return true;
    case PAIR(IR_F64, IR_S32): CONV(double, int32_t, f64_to_s32(x)); return true;
    case PAIR(IR_PRED, IR_F32): CONV(uint8_t, float, x != 0); return true;
    case PAIR(IR_PRED, IR_S32): CONV(uint8_t, int32_t, x != 0); return true;
    case PAIR(IR_F32, IR_PRED): CONV(float, uint8_t, x != 0); return true;
    case PAIR(IR_S32, IR_PRED): CONV(int32_t, uint8_t, x != 0); return true;
    case PAIR(IR_F32, IR_BF16): CONV(float, uint16_t, f32_bf16(x)); return true;
    case PAIR(IR_BF16, IR_F32): CONV(uint16_t, float, bf16_f32(x)); return true;
    case PAIR(IR_F32, IR_F16): CONV(float, uint16_t, dev_f32_to_f16(x)); return true;
    case PAIR(IR_F16, IR_F32): CONV(uint16_t, float, dev_f16_to_f32(x)); return true;
    default: return false;
    }
#undef PAIR
}

static void convert_array(IrType st, const void *src, IrType dt, void *dst, int64_t n)
{
    if (st == dt) {
        memcpy(dst, src, (size_t)n * ir_type_size(st));
        return;
    }
    if (convert_fast(st, src, dt, dst, n))
        return;
    if (ir_type_is_lowp_float(st) && (dt == IR_F32 || dt == IR_BF16 || dt == IR_F16)) {
        /* exact in f32, subnormal bits too (f8e8m0fnu's 2^-127, which a
         * (float) of the double would flush: device/fpmode.c), then each
         * narrower kind's own rounding from f32 */
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) {
            float f = ir_lowp_to_float(st, s[i]);
            if (dt == IR_F32)
                ((float *)dst)[i] = f;
            else
                ((uint16_t *)dst)[i] = dt == IR_BF16 ? dev_f32_to_bf16(f) : dev_f32_to_f16(f);
        }
        return;
    }
    if (st == IR_F32 && ir_type_is_lowp_float(dt)) { /* on the bits, as XLA */
        f32_to_lowp(dt, src, dst, n);
        return;
    }
    if (ir_type_is_complex(st) && ir_type_is_complex(dt)) {
        for (int64_t i = 0; i < 2 * n; i++)
            if (st == IR_C64)
                ((double *)dst)[i] = ((const float *)src)[i];
            else
                ((float *)dst)[i] = (float)((const double *)src)[i];
    } else if (ir_type_is_float(st) || ir_type_is_complex(st)) {
        LOOP(dev_store_f64(dt, dst, i, dev_load_f64(st, src, i)))
    } else if (ir_type_is_unsigned_int(st)) {
        LOOP(dev_store_u64(dt, dst, i, dev_load_u64(st, src, i)))
    } else {
        LOOP(dev_store_i64(dt, dst, i, dev_load_i64(st, src, i)))
    }
}

/* ------------------------------------------------------------------ */
/* reduce-precision                                                    */
/* ------------------------------------------------------------------ */

/* Round to `mbits` mantissa bits (nearest even) and clamp to the exponent
 * range of `ebits` exponent bits (overflow -> inf, underflow -> zero, no
 * subnormals), as XLA does on the bits of the value. A NaN comes back as
 * it came, sign and payload, whatever `mbits`: XLA's CPU backend (what JAX
 * runs) selects the operand where it is NaN, also at mantissa_bits=0,
 * where rounding alone would carry a NaN's payload into an infinity.
 * Example: 1 + 2^-10 to (8, 7) keeps 1.0: the dropped bits are below half. */
static float reduce_precision_f32(float v, int64_t ebits, int64_t mbits)
{
    uint32_t x;
    memcpy(&x, &v, sizeof x);
    if (mbits < 23) {
        uint32_t last = 1u << (23 - mbits);
        uint32_t bias = ((last >> 1) - 1) + ((x & last) >> (23 - mbits));
        x = (x + bias) & ~(last - 1);
    }
    if (ebits < 8) {
        uint32_t rbias = (1u << (ebits - 1)) - 1;
        uint32_t maxe = 127 + rbias, mine = 127 - rbias, e = x & 0x7f800000u;
        if (e > (maxe << 23))
            x = (x & 0x80000000u) | 0x7f800000u;
        else if (e <= (mine << 23))
            x &= 0x80000000u;
    }
    float r;
    memcpy(&r, &x, sizeof r);
    if (isnan(v))
        r = v;
    return r;
}

static double reduce_precision_f64(double v, int64_t ebits, int64_t mbits)
{
    uint64_t x;
    memcpy(&x, &v, sizeof x);
    if (mbits < 52) {
        uint64_t last = 1ull << (52 - mbits);
        uint64_t bias = ((last >> 1) - 1) + ((x & last) >> (52 - mbits));
        x = (x + bias) & ~(last - 1);
    }
    if (ebits < 11) {
        uint64_t rbias = (1ull << (ebits - 1)) - 1;
        uint64_t maxe = 1023 + rbias, mine = 1023 - rbias, e = x & 0x7ff0000000000000ull;
        if (e > (maxe << 52))
            x = (x & 0x8000000000000000ull) | 0x7ff0000000000000ull;
        else if (e <= (mine << 52))
            x &= 0x8000000000000000ull;
    }
    double r;
    memcpy(&r, &x, sizeof r);
    if (isnan(v))
        r = v;
    return r;
}

/* ------------------------------------------------------------------ */
/* the kernel                                                          */
/* ------------------------------------------------------------------ */

static IrStatus new_result(const DevKernelArgs *k, DevValue **out)
{
    *out = dev_value_new_uninit(&k->ins->shape);
    if (!*out)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for %s result",
                                ir_op_name(k->ins->op));
    return IR_OK;
}

static IrStatus not_defined(const DevKernelArgs *k, IrType t)
{
    return dev_kernel_error(k, IR_EINPUT, "%s is not defined for %s", ir_op_name(k->ins->op),
                            ir_type_name(t));
}

/* Every operand must be an array with the result's dims; `scalar_ok` is a
 * bit set of operands that may also be scalars (select's predicate,
 * clamp's bounds). */
static IrStatus check_operands(const DevKernelArgs *k, unsigned scalar_ok)
{
    const IrShape *rs = &k->ins->shape;
    if (!ir_shape_is_array(rs))
        return dev_kernel_error(k, IR_EINPUT, "%s needs an array result",
                                ir_op_name(k->ins->op));
    int arity = ir_op_arity(k->ins->op);
    if (arity >= 0 && k->nopnd != arity)
        return dev_kernel_error(k, IR_EINPUT, "%s takes %d operands, not %d",
                                ir_op_name(k->ins->op), arity, (int)k->nopnd);
    for (int32_t i = 0; i < k->nopnd; i++) {
        const IrShape *s = &k->opnd[i]->shape;
        bool scalar = ((scalar_ok >> i) & 1u) && s->rank == 0;
        if (!ir_shape_is_array(s) || (!scalar && !ir_shape_same_dims(s, rs))) {
            char *a = ir_shape_str(s, false), *b = ir_shape_str(rs, false);
            IrStatus st = dev_kernel_error(k, IR_EINPUT, "operand %d has shape %s, result %s",
                                           (int)i, a ? a : "?", b ? b : "?");
            ts_free(a);
            ts_free(b);
            return st;
        }
    }
    return IR_OK;
}

static IrStatus same_type_check(const DevKernelArgs *k, int32_t first, int32_t last, IrType t)
{
    for (int32_t i = first; i <= last; i++)
        if (k->opnd[i]->shape.type != t)
            return dev_kernel_error(k, IR_EINPUT, "operand %d is %s, expected %s", (int)i,
                                    ir_type_name(k->opnd[i]->shape.type), ir_type_name(t));
    return IR_OK;
}

static IrStatus run_compare(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType t = k->opnd[0]->shape.type;
    IrStatus st = same_type_check(k, 1, 1, t);
    if (st != IR_OK)
        return st;
    if (r->shape.type != IR_PRED)
        return dev_kernel_error(k, IR_EINPUT, "compare returns pred, not %s",
                                ir_type_name(r->shape.type));
    if (k->ins->a.direction == CMP_NONE)
        return dev_kernel_error(k, IR_EINPUT, "compare needs direction=");
    if (!compare_typed(k->ins->a.direction, k->ins->a.cmp_type, t, k->opnd[0]->data,
                       k->opnd[1]->data, r->data, n))
        return not_defined(k, t);
    return IR_OK;
}

/* select(pred, on_true, on_false): copies element bytes. */
/* o[i] = p[i] ? a[i] : b[i] for elements of 1, 2, 4, 8 bytes. Both sides
 * are read, so the choice is a blend the compiler vectorises rather than
 * a branch: a relu's mask (the backward pass's select) is a coin toss,
 * which a branch mispredicts half the time (peers-convnet: the selects'
 * branchy loop was the top function of the step, 13-17% of the samples). */
#define DEF_SELECT(T)                                                                       \
    DEV_VECTOR_CLONES static void select_##T(const uint8_t *p, const T *a, const T *b, T *o, \
                                             int64_t n)                                     \
    {                                                                                       \
        LOOP(T x = a[i]; T y = b[i]; o[i] = p[i] ? x : y)                                   \
    }
DEF_SELECT(uint8_t)
DEF_SELECT(uint16_t)
DEF_SELECT(uint32_t)
DEF_SELECT(uint64_t)
#undef DEF_SELECT

static IrStatus run_select(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType t = r->shape.type;
    if (k->opnd[0]->shape.type != IR_PRED)
        return dev_kernel_error(k, IR_EINPUT, "select needs a pred selector");
    IrStatus st = same_type_check(k, 1, 2, t);
    if (st != IR_OK)
        return st;
    const uint8_t *p = k->opnd[0]->data;
    int64_t sp = k->opnd[0]->shape.rank == 0 && k->ins->shape.rank != 0 ? 0 : 1;
    const uint8_t *a = k->opnd[1]->data, *b = k->opnd[2]->data;
    uint8_t *o = r->data;
    size_t w = ir_type_size(t);
    if (sp == 0) { /* one choice for all */
        if (n > 0)
            memcpy(o, p[0] ? a : b, (size_t)n * w);
        return IR_OK;
    }
    switch (w) {
    case 1: select_uint8_t(p, a, b, o, n); break;
    case 2: select_uint16_t(p, (const uint16_t *)a, (const uint16_t *)b, (uint16_t *)o, n); break;
    case 4: select_uint32_t(p, (const uint32_t *)a, (const uint32_t *)b, (uint32_t *)o, n); break;
    case 8: select_uint64_t(p, (const uint64_t *)a, (const uint64_t *)b, (uint64_t *)o, n); break;
    default: LOOP(memcpy(o + i * w, (p[i] ? a : b) + i * w, w)) break;
    }
    return IR_OK;
}

/* clamp(lo, x, hi) = min(max(x, lo), hi); lo and hi may be scalars. */
static IrStatus run_clamp(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType t = r->shape.type;
    IrStatus st = same_type_check(k, 0, 2, t);
    if (st != IR_OK)
        return st;
    int64_t slo = k->opnd[0]->shape.rank == 0 ? 0 : 1;
    int64_t shi = k->opnd[2]->shape.rank == 0 ? 0 : 1;
    const void *lo = k->opnd[0]->data, *x = k->opnd[1]->data, *hi = k->opnd[2]->data;
    void *o = r->data;
    switch (t) {
    case IR_PRED: case IR_U8: clamp_u8(lo, slo, x, hi, shi, o, n); break;
    case IR_S8: clamp_s8(lo, slo, x, hi, shi, o, n); break;
    case IR_S16: clamp_s16(lo, slo, x, hi, shi, o, n); break;
    case IR_S32: clamp_s32(lo, slo, x, hi, shi, o, n); break;
    case IR_S64: clamp_s64(lo, slo, x, hi, shi, o, n); break;
    case IR_U16: clamp_u16(lo, slo, x, hi, shi, o, n); break;
    case IR_U32: clamp_u32(lo, slo, x, hi, shi, o, n); break;
    case IR_U64: clamp_u64(lo, slo, x, hi, shi, o, n); break;
    case IR_F32: clamp_f32(lo, slo, x, hi, shi, o, n); break;
    case IR_F64: clamp_f64(lo, slo, x, hi, shi, o, n); break;
    default:
        if (!ir_type_is_float(t) && !ir_type_is_int(t))
            return not_defined(k, t);
        /* f16, bf16, f8, f4, s2..u4: the result is one of the inputs, exact
         * through double (integer bounds of these widths are exact too). */
        for (int64_t i = 0; i < n; i++) {
            double vl = dev_load_f64(t, lo, i * slo), vx = dev_load_f64(t, x, i);
            double vh = dev_load_f64(t, hi, i * shi);
            double v = FMAX(vx, vl);
            v = FMIN(v, vh);
            dev_store_f64(t, o, i, v);
        }
        break;
    }
    return IR_OK;
}

static IrStatus run_reduce_precision(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType t = r->shape.type;
    int64_t eb = k->ins->a.x->exponent_bits, mb = k->ins->a.x->mantissa_bits;
    if (!ir_type_is_float(t))
        return not_defined(k, t);
    if (eb < 1 || mb < 0)
        return dev_kernel_error(k, IR_EINPUT, "exponent_bits=%lld mantissa_bits=%lld out of range",
                                (long long)eb, (long long)mb);
    const void *a = k->opnd[0]->data;
    void *o = r->data;
    if (t == IR_F64) {
        LOOP(((double *)o)[i] = reduce_precision_f64(((const double *)a)[i], eb, mb))
    } else if (t == IR_F32) { /* not through double: that would quiet a signalling NaN */
        LOOP(((float *)o)[i] = reduce_precision_f32(((const float *)a)[i], eb, mb))
    } else {
        LOOP(dev_store_f64(t, o, i, reduce_precision_f32((float)dev_load_f64(t, a, i), eb, mb)))
    }
    return IR_OK;
}

/* real / imag of a complex (or real: itself / zero), complex(re, im). */
static IrStatus run_complex_part(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType st = k->opnd[0]->shape.type, t = r->shape.type;
    const void *a = k->opnd[0]->data;
    if (k->ins->op == OP_COMPLEX) {
        if (!(t == IR_C64 && st == IR_F32) && !(t == IR_C128 && st == IR_F64))
            return not_defined(k, st);
        IrStatus s = same_type_check(k, 1, 1, st);
        if (s != IR_OK)
            return s;
        const void *b = k->opnd[1]->data;
        if (t == IR_C64)
            LOOP(((float *)r->data)[2 * i] = ((const float *)a)[i];
                 ((float *)r->data)[2 * i + 1] = ((const float *)b)[i])
        else
            LOOP(((double *)r->data)[2 * i] = ((const double *)a)[i];
                 ((double *)r->data)[2 * i + 1] = ((const double *)b)[i])
        return IR_OK;
    }
    int part = k->ins->op == OP_IMAG ? 1 : 0;
    if (ir_type_is_complex(st)) {
        if (t != (st == IR_C64 ? IR_F32 : IR_F64))
            return not_defined(k, st);
        if (st == IR_C64)
            LOOP(((float *)r->data)[i] = ((const float *)a)[2 * i + part])
        else
            LOOP(((double *)r->data)[i] = ((const double *)a)[2 * i + part])
        return IR_OK;
    }
    if (!ir_type_is_float(st) || t != st)
        return not_defined(k, st);
    if (part)
        memset(r->data, 0, (size_t)n * ir_type_size(t));
    else
        memcpy(r->data, a, (size_t)n * ir_type_size(t));
    return IR_OK;
}

static IrStatus run_is_finite(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType st = k->opnd[0]->shape.type;
    if (!ir_type_is_float(st) || r->shape.type != IR_PRED)
        return not_defined(k, st);
    const void *a = k->opnd[0]->data;
    uint8_t *o = r->data;
    if (st == IR_F32)
        LOOP(o[i] = isfinite(((const float *)a)[i]))
    else
        LOOP(o[i] = isfinite(dev_load_f64(st, a, i)))
    return IR_OK;
}

/* abs of a complex is its real modulus (c64 -> f32, c128 -> f64), hypot
 * without overflow. */
static IrStatus run_complex_abs(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType st = k->opnd[0]->shape.type;
    if (r->shape.type != (st == IR_C64 ? IR_F32 : IR_F64))
        return dev_kernel_error(k, IR_EINPUT, "abs of %s returns %s, not %s", ir_type_name(st),
                                st == IR_C64 ? "f32" : "f64", ir_type_name(r->shape.type));
    if (st == IR_C64)
        LOOP(((float *)r->data)[i] = cabs(((const float _Complex *)k->opnd[0]->data)[i]))
    else
        LOOP(((double *)r->data)[i] = cabs(((const double _Complex *)k->opnd[0]->data)[i]))
    return IR_OK;
}

/* The ops whose operands and result share one element type. */
static IrStatus run_same_type(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    IrType t = r->shape.type;
    IrStatus st = same_type_check(k, 0, k->nopnd - 1, t);
    if (st != IR_OK)
        return st;
    bool ok = k->nopnd == 1
                  ? unary_typed(k->ins->op, t, k->opnd[0]->data, r->data, n)
                  : binary_typed(k->ins->op, t, k->opnd[0]->data, k->opnd[1]->data, r->data, n);
    return ok ? IR_OK : not_defined(k, t);
}

IrStatus dev_k_elementwise_check(const DevKernelArgs *k)
{
    IrOpcode op = k->ins->op;
    unsigned scalar_ok = op == OP_SELECT ? 1u : op == OP_CLAMP ? 5u : 0u;
    return check_operands(k, scalar_ok);
}

IrStatus dev_k_elementwise_range(const DevKernelArgs *k, int64_t n, DevValue *r)
{
    switch (k->ins->op) {
    case OP_CONVERT:
        if (ir_type_is_complex(k->opnd[0]->shape.type) && !ir_type_is_complex(r->shape.type))
            return dev_kernel_error(k, IR_EINPUT, "convert from complex needs real or imag");
        convert_array(k->opnd[0]->shape.type, k->opnd[0]->data, r->shape.type, r->data, n);
        return IR_OK;
    case OP_COMPARE: return run_compare(k, n, r);
    case OP_SELECT: return run_select(k, n, r);
    case OP_CLAMP: return run_clamp(k, n, r);
    case OP_REDUCE_PRECISION: return run_reduce_precision(k, n, r);
    case OP_REAL: case OP_IMAG: case OP_COMPLEX: return run_complex_part(k, n, r);
    case OP_IS_FINITE: return run_is_finite(k, n, r);
    case OP_ABS:
        if (ir_type_is_complex(k->opnd[0]->shape.type))
            return run_complex_abs(k, n, r);
        return run_same_type(k, n, r);
    case OP_COPY: case OP_MAP:
        return dev_kernel_error(k, IR_EINTERNAL, "%s has no range kernel", ir_op_name(k->ins->op));
    default: return run_same_type(k, n, r);
    }
}

IrStatus dev_k_elementwise(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    if (k->ins->op == OP_COPY) { /* values are immutable: a copy is a reference */
        if (k->nopnd != 1 || !ir_shape_equal(&k->opnd[0]->shape, &k->ins->shape))
            return dev_kernel_error(k, IR_EINPUT, "copy changes the shape");
        *out = dev_value_ref(k->opnd[0]);
        return IR_OK;
    }
    IrStatus st = dev_k_elementwise_check(k);
    if (st != IR_OK)
        return st;
    DevValue *r;
    if ((st = new_result(k, &r)) != IR_OK)
        return st;
    if ((st = dev_k_elementwise_range(k, ir_shape_elements(&k->ins->shape), r)) != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

/* Written over an operand (dev_k_elementwise_over): each block of the
 * result goes to a scratch buffer of this many bytes, then over the
 * operand's block, which has been read by then; later blocks read only
 * later elements, so no element is read after it is overwritten, and no
 * range kernel sees its output alias an input (they take restrict
 * pointers). 16 KiB stays in L1 with the block's operands. */
#define OVER_BLOCK_BYTES (16 << 10)

IrStatus dev_k_elementwise_over(const DevKernelArgs *k, int32_t j)
{
    const IrShape *rs = &k->ins->shape;
    IrOpcode op = k->ins->op;
    if (op == OP_COPY || op == OP_MAP || k->nopnd > 3 || j < 0 || j >= k->nopnd)
        return dev_kernel_error(k, IR_EINTERNAL, "%s cannot be written over operand %d", ir_op_name(op), (int)j);
    IrStatus st = dev_k_elementwise_check(k);
    if (st != IR_OK)
        return st;
    if (k->opnd[j]->nbytes != ir_shape_bytes(rs) || !ir_shape_same_dims(&k->opnd[j]->shape, rs))
        return dev_kernel_error(k, IR_EINTERNAL, "%s: operand %d is not the result's size", ir_op_name(op), (int)j);
    size_t w = ir_type_size(rs->type);
    int64_t total = ir_shape_elements(rs), block = w > 0 ? OVER_BLOCK_BYTES / (int64_t)w : total;
    size_t need = (size_t)(total < block ? total : block) * w;
    _Alignas(64) uint8_t small[256]; /* small arrays (a reducer's scalars) allocate nothing */
    uint8_t *scratch = need <= sizeof small ? small : ts_malloc(need);
    if (!scratch)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for %s's block", ir_op_name(op));
    DevValue view[3], *views[3], res = {.shape = *rs, .refs = 1};
    DevKernelArgs kb = *k;
    kb.opnd = views;
    for (int64_t first = 0; st == IR_OK && first < total; first += block) {
        int64_t n = total - first < block ? total - first : block;
        for (int32_t i = 0; i < k->nopnd; i++) {
            view[i] = *k->opnd[i]; /* a shallow copy: shape and data borrowed */
            size_t wi = ir_type_size(view[i].shape.type);
            if (view[i].shape.rank > 0) { /* scalar operands (select, clamp) stay put */
                view[i].data += (size_t)first * wi;
                view[i].nbytes = n * (int64_t)wi;
            }
            views[i] = &view[i];
        }
        res.data = scratch;
        res.nbytes = n * (int64_t)w;
        if ((st = dev_k_elementwise_range(&kb, n, &res)) == IR_OK)
            memcpy(k->opnd[j]->data + (size_t)first * w, scratch, (size_t)n * w);
    }
    if (scratch != small)
        ts_free(scratch);
    return st;
}

/* ------------------------------------------------------------------ */
/* bitcast-convert                                                     */
/* ------------------------------------------------------------------ */

/* Bits an element occupies for bitcast-convert: sub-byte types (s2, s4,
 * u2, u4, f4e2m1fn) count their width, though stored one a byte. */
static int bitcast_bits(IrType t)
{
    int b = ir_type_bits(t);
    return b < 8 && t != IR_PRED ? b : (int)ir_type_size(t) * 8;
}

/* Between widths where one is below a byte: the elements are laid end to
 * end as a little-endian bit stream (element 0 in the low bits), as XLA
 * packs sub-byte types. Example: u8 0xb4 -> u4[2] {0x4, 0xb}; s4 {-1, 1}
 * -> u8 0x1f. Sub-byte results are stored canonical (extended). */
static void bitcast_bits_copy(IrType st, const uint8_t *src, IrType dt, uint8_t *dst,
                              int64_t nd)
{
    int ws = bitcast_bits(st), wd = bitcast_bits(dt);
    size_t bs = ir_type_size(st), bd = ir_type_size(dt);
    if (ws > wd) { /* each source element splits into ws/wd parts */
        int parts = ws / wd;
        for (int64_t j = 0; j < nd; j++) {
            const uint8_t *e = src + (size_t)(j / parts) * bs;
            int off = (int)(j % parts) * wd;
            uint8_t v = (uint8_t)((e[off / 8] >> (off % 8)) & ((1u << wd) - 1u));
            dst[j] = dev_subbyte_wrap(dt, v);
        }
        return;
    }
    int parts = wd / ws;
    memset(dst, 0, (size_t)nd * bd);
    for (int64_t j = 0; j < nd; j++)
        for (int p = 0; p < parts; p++) {
            uint8_t v = (uint8_t)(src[(size_t)(j * parts + p)] & ((1u << ws) - 1u));
            int off = p * ws;
            dst[(size_t)j * bd + (size_t)(off / 8)] |= (uint8_t)(v << (off % 8));
        }
    if (wd < 8)
        for (int64_t j = 0; j < nd; j++)
            dst[j] = dev_subbyte_wrap(dt, dst[j]);
}

/* The bytes stay; only the type (and, between widths, the minor
 * dimension) changes. Example: f32[3] -> u8[3,4]; u16[2,2] -> u32[2]. Data
 * is row-major little-endian, so the bytes are the same in both. Widths
 * are bit widths (XLA's shape inference): s4[2] -> u8[], u8[3] -> s4[3,2]. */
IrStatus dev_k_bitcast_convert(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    if (k->nopnd != 1 || !ir_shape_is_array(&k->opnd[0]->shape) ||
        !ir_shape_is_array(&k->ins->shape))
        return dev_kernel_error(k, IR_EINPUT, "bitcast-convert needs one array operand");
    const IrShape *s = &k->opnd[0]->shape, *d = &k->ins->shape;
    int64_t ws = bitcast_bits(s->type), wd = bitcast_bits(d->type);
    bool ok;
    if (ws == wd) {
        ok = ir_shape_same_dims(s, d);
    } else if (ws > wd) { /* result has an extra minor dim of ws/wd */
        IrShape t = *d;
        t.rank = d->rank - 1;
        ok = d->rank == s->rank + 1 && ir_shape_same_dims(s, &t) && d->dims[d->rank - 1] * wd == ws;
    } else {
        IrShape t = *s;
        t.rank = s->rank - 1;
        ok = s->rank == d->rank + 1 && ir_shape_same_dims(&t, d) && s->dims[s->rank - 1] * ws == wd;
    }
    if (!ok) {
        char *a = ir_shape_str(s, false), *b = ir_shape_str(d, false);
        IrStatus st = dev_kernel_error(k, IR_EINPUT, "cannot bitcast-convert %s to %s",
                                       a ? a : "?", b ? b : "?");
        ts_free(a);
        ts_free(b);
        return st;
    }
    DevValue *r;
    IrStatus st = new_result(k, &r);
    if (st != IR_OK)
        return st;
    if (ws % 8 == 0 && wd % 8 == 0) {
        if (r->nbytes > 0)
            memcpy(r->data, k->opnd[0]->data, (size_t)r->nbytes);
    } else if (ws == wd) { /* same width, one a byte: keep the low bits */
        int64_t n = dev_value_elements(r);
        for (int64_t i = 0; i < n; i++)
            r->data[i] = dev_subbyte_wrap(d->type, k->opnd[0]->data[i]);
    } else {
        bitcast_bits_copy(s->type, k->opnd[0]->data, d->type, r->data, dev_value_elements(r));
    }
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* map                                                                 */
/* ------------------------------------------------------------------ */

/* When the mapped computation is one elementwise op over its parameters
 * (e.g. `ROOT add(p0, p1)`), run that op's kernel on the whole arrays:
 * a synthetic instruction with the map's result shape and the callee
 * root's opcode and attributes. Returns false when it does not apply. */
static bool map_fast(const DevKernelArgs *k, int32_t comp, DevValue **out, IrStatus *st)
{
    const IrComputation *c = k->m->comp[comp];
    if (c->root < 0 || c->root >= c->ninstr)
        return false;
    const IrInstr *root = &c->instr[c->root];
    if (!ir_op_is_elementwise(root->op) || root->nopnd > 3 || root->shape.type != k->ins->shape.type)
        return false;
    DevValue *opnd[3];
    for (int32_t i = 0; i < root->nopnd; i++) {
        int32_t o = root->opnd[i];
        if (o < 0 || o >= c->ninstr || c->instr[o].op != OP_PARAMETER)
            return false;
        int64_t pn = c->instr[o].a.parameter_number;
        if (pn < 0 || pn >= k->nopnd || c->instr[o].shape.type != k->opnd[pn]->shape.type)
            return false;
        opnd[i] = k->opnd[pn];
    }
    IrInstr ins = *root;
    ins.shape = k->ins->shape;
    ins.name = k->ins->name;
    ins.pos = k->ins->pos;
    DevKernelArgs sub = *k;
    sub.ins = &ins;
    sub.nopnd = root->nopnd;
    sub.opnd = opnd;
    *st = dev_k_elementwise(&sub, out);
    return true;
}

/* Per element: scalar arguments, one dev_call, copy the scalar result. */
static IrStatus map_slow(const DevKernelArgs *k, int32_t comp, int64_t n, DevValue *r)
{
    DevValue *args[16] = {0};
    IrStatus st = IR_OK;
    size_t wr = ir_type_size(r->shape.type);
    for (int32_t j = 0; j < k->nopnd && st == IR_OK; j++) {
        IrShape s = {.type = k->opnd[j]->shape.type};
        if (!(args[j] = dev_value_new(&s)))
            st = dev_kernel_error(k, IR_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n && st == IR_OK; i++) {
        for (int32_t j = 0; j < k->nopnd && st == IR_OK; j++) {
            if (args[j]->refs != 1) { /* the callee kept it: use a fresh one */
                DevValue *f = dev_value_new(&args[j]->shape);
                dev_value_unref(args[j]);
                if (!(args[j] = f)) {
                    st = dev_kernel_error(k, IR_ENOMEM, "out of memory");
                    break;
                }
            }
            size_t w = ir_type_size(args[j]->shape.type);
            memcpy(args[j]->data, k->opnd[j]->data + (size_t)i * w, w);
        }
        DevValue *v = NULL;
        if (st == IR_OK)
            st = dev_call(k, comp, k->nopnd, args, &v);
        if (st == IR_OK && (v->shape.type != r->shape.type || v->shape.rank != 0))
            st = dev_kernel_error(k, IR_EINPUT, "mapped computation must return a %s scalar",
                                  ir_type_name(r->shape.type));
        if (st == IR_OK)
            memcpy(r->data + (size_t)i * wr, v->data, wr);
        dev_value_unref(v);
    }
    for (int32_t j = 0; j < k->nopnd; j++)
        dev_value_unref(args[j]);
    return st;
}

IrStatus dev_k_map(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    if (k->ins->ncalled < 1 || k->ins->called[0] < 0 || k->ins->called[0] >= k->m->ncomp)
        return dev_kernel_error(k, IR_EINPUT, "map needs to_apply=");
    if (k->nopnd > 16)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "map with more than 16 operands");
    IrStatus st = check_operands(k, 0);
    if (st != IR_OK)
        return st;
    int32_t comp = k->ins->called[0];
    const IrComputation *c = k->m->comp[comp];
    if (c->nparam != k->nopnd)
        return dev_kernel_error(k, IR_EINPUT, "map has %d operands, %s takes %d", (int)k->nopnd,
                                c->name, (int)c->nparam);
    if (map_fast(k, comp, out, &st))
        return st;
    DevValue *r;
    if ((st = new_result(k, &r)) != IR_OK)
        return st;
    if ((st = map_slow(k, comp, ir_shape_elements(&k->ins->shape), r)) != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}
