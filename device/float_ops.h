/*
 * float_ops.h: what each floating-point elementwise op computes, written
 * once. The kernels (k_elementwise.c) expand these lists into one loop per
 * op; the fused loops (fusion.c) expand them into the cases of their
 * chunk interpreter, so fused and unfused runs compute the same
 * expressions and agree bit for bit.
 *
 * Each entry is X(T, OPCODE, EXPRESSION) where the expression reads the
 * element(s) `a` (and `b`) of type T. Include after <tgmath.h>: the math
 * functions resolve to the float or double version by the argument type.
 */
#ifndef TESSEL_DEVICE_FLOAT_OPS_H
#define TESSEL_DEVICE_FLOAT_OPS_H

/* The reducers' arithmetic (add, multiply, maximum, minimum). */
#include "arith.h"

#define DEV_FLOAT_UNARY_OPS(X, T)                                           \
    X(T, OP_ABS, fabs(a))                                                      \
    X(T, OP_NEGATE, -a)                                                        \
    X(T, OP_SIGN, isnan(a) ? a : a > 0 ? (T)1 : a < 0 ? (T)-1 : a)             \
    X(T, OP_FLOOR, floor(a))                                                   \
    X(T, OP_CEIL, ceil(a))                                                     \
    X(T, OP_ROUND_AFZ, round(a))                                               \
    X(T, OP_ROUND_EVEN, nearbyint(a))                                          \
    X(T, OP_EXP, exp(a))                                                       \
    X(T, OP_EXPM1, expm1(a))                                                   \
    X(T, OP_LOG, log(a))                                                       \
    X(T, OP_LOG1P, log1p(a))                                                   \
    X(T, OP_LOGISTIC, (T)1 / ((T)1 + exp(-a)))                                 \
    X(T, OP_SQRT, sqrt(a))                                                     \
    X(T, OP_RSQRT, (T)1 / sqrt(a))                                             \
    X(T, OP_CBRT, cbrt(a))                                                     \
    X(T, OP_TANH, tanh(a))                                                     \
    X(T, OP_SINE, sin(a))                                                      \
    X(T, OP_COSINE, cos(a))                                                    \
    X(T, OP_TAN, tan(a))                                                       \
    X(T, OP_ERF, erf(a))                                                       \
    X(T, OP_ACOS, acos(a))                                                     \
    X(T, OP_ACOSH, acosh(a))                                                   \
    X(T, OP_ASIN, asin(a))                                                     \
    X(T, OP_ASINH, asinh(a))                                                   \
    X(T, OP_ATAN, atan(a))                                                     \
    X(T, OP_ATANH, atanh(a))                                                   \
    X(T, OP_COSH, cosh(a))                                                     \
    X(T, OP_SINH, sinh(a))

#define DEV_FLOAT_BINARY_OPS(X, T)                                          \
    X(T, OP_ADD, DEV_ADD(a, b))                                                     \
    X(T, OP_SUBTRACT, a - b)                                                   \
    X(T, OP_MULTIPLY, DEV_MUL(a, b))                                                \
    X(T, OP_DIVIDE, a / b)                                                     \
    X(T, OP_REMAINDER, fmod(a, b))                                             \
    X(T, OP_MAXIMUM, DEV_FMAX(a, b))                                           \
    X(T, OP_MINIMUM, DEV_FMIN(a, b))                                           \
    X(T, OP_POWER, pow(a, b))                                                  \
    X(T, OP_ATAN2, atan2(a, b))

/* Compiled for AVX-512 and AVX2 too, picked at load time for the CPU at
 * hand (the binary stays portable): 16 floats an instruction instead of
 * SSE's 4 matter once fusion keeps the operands in cache. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DEV_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DEV_VECTOR_CLONES
#endif

#endif
