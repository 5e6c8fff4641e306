/*
 * arith.h: the arithmetic of the simple reducers (add, multiply, maximum,
 * minimum, and, or, xor: the ops with an IDENTITY in ir/hlo_op_sem.def),
 * written once. The elementwise kernels (k_elementwise.c, through
 * float_ops.h), the fused loops (fusion.c's interpreter, fusion_rows.c's
 * row folds), the reducers (reducer.c) and the collectives' combining
 * kernels expand these, so every path computes the same expression and a
 * fused, unfused, reduced or all-reduced value agrees bit for bit.
 *
 * Each is a macro generic over the C type of its operands (float,
 * double, an integer type, a complex type), so that a loop over one type
 * stays one tight loop the compiler vectorises: no call, no conversion.
 * Rules (XLA's):
 *   floats: maximum/minimum propagate NaN (the lhs NaN when both are) and
 *     keep the lhs on a tie: max(-0.0, +0.0) = -0.0, max(+0.0, -0.0) = +0.0;
 *   integers: add and multiply wrap, so the caller passes them in the
 *     unsigned type (C never sees a signed overflow); max/min keep the lhs
 *     on a tie (indistinguishable for integers);
 *   pred (0/1): add = maximum = or, multiply = minimum = and
 *     (dev_red_canonical).
 * The AVX-512 forms below are the same IEEE operations on 16 f32 lanes.
 */
#ifndef TESSEL_DEVICE_ARITH_H
#define TESSEL_DEVICE_ARITH_H

#define DEV_ADD(a, b) ((a) + (b))
#define DEV_MUL(a, b) ((a) * (b))
/* max/min with NaN propagation and the lhs on a tie, without branches so
 * that loops vectorize. */
#define DEV_FMAX(a, b) ((((a) != (a)) | ((a) >= (b))) ? (a) : (b))
#define DEV_FMIN(a, b) ((((a) != (a)) | ((a) <= (b))) ? (a) : (b))
#define DEV_IMAX(a, b) ((a) >= (b) ? (a) : (b))
#define DEV_IMIN(a, b) ((a) <= (b) ? (a) : (b))
#define DEV_AND(a, b) ((a) & (b))
#define DEV_OR(a, b) ((a) | (b))
#define DEV_XOR(a, b) ((a) ^ (b))

/* The reducers per domain, as X(OPCODE, OPERATION): expand into the cases
 * of a switch over the opcode, one loop each. */
#define DEV_FLOAT_REDUCERS(X) \
    X(OP_ADD, DEV_ADD)        \
    X(OP_MULTIPLY, DEV_MUL)   \
    X(OP_MAXIMUM, DEV_FMAX)   \
    X(OP_MINIMUM, DEV_FMIN)
/* The integer reducers whose result is the same bits in the signed and
 * the unsigned type (computed in the unsigned one). */
#define DEV_WRAP_REDUCERS(X) \
    X(OP_ADD, DEV_ADD)       \
    X(OP_MULTIPLY, DEV_MUL)  \
    X(OP_AND, DEV_AND)       \
    X(OP_OR, DEV_OR)         \
    X(OP_XOR, DEV_XOR)
/* The integer reducers that read the sign (computed in the signed type
 * for signed integers, the unsigned one for unsigned). */
#define DEV_ORDER_REDUCERS(X) \
    X(OP_MAXIMUM, DEV_IMAX)   \
    X(OP_MINIMUM, DEV_IMIN)

/* ---- AVX-512 (16 f32 lanes), for the fused register path ---- */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define DEV_AVX512 __attribute__((target("avx512f")))

DEV_AVX512 static inline __m512 dev_v16_add(__m512 a, __m512 b)
{
    return _mm512_add_ps(a, b);
}

DEV_AVX512 static inline __m512 dev_v16_mul(__m512 a, __m512 b)
{
    return _mm512_mul_ps(a, b);
}

/* DEV_FMAX: a where a is NaN or a >= b. */
DEV_AVX512 static inline __m512 dev_v16_max(__m512 a, __m512 b)
{
    __mmask16 m = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ);
    return _mm512_mask_blend_ps(m, b, a);
}

/* DEV_FMIN: a where a is NaN or a <= b. */
DEV_AVX512 static inline __m512 dev_v16_min(__m512 a, __m512 b)
{
    __mmask16 m = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ);
    return _mm512_mask_blend_ps(m, b, a);
}
#endif

#endif
