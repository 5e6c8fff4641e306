/*
 * vmath.h: the transcendental elementwise ops (exp, log, tanh, sin, ...)
 * over whole arrays through glibc's vector math library, libmvec.
 *
 * libm's scalar tanhf takes about 25 ns an element on the machines
 * tessel runs on; libmvec's 16-lane AVX-512 version about 0.6 ns (1M f32:
 * 27 ms against 0.6). Its results are within 4 ulp of the correctly
 * rounded value (glibc's stated bound), not always libm's bits, so every
 * path that computes one of these ops on f32 or f64 (the kernels of
 * k_elementwise.c, which the row groups call too, and the fused chunk
 * interpreter) comes here, and an element's result depends on its value
 * alone, never on where it sits in an array or a chunk: the last partial
 * vector goes through the same function, padded. So a partitioned run
 * still equals the reference run bit for bit, and a fused group its
 * unfused ops.
 *
 * The width is the CPU's (AVX-512, else AVX2, else SSE2), fixed for the
 * process. Without libmvec (another libc or architecture) the functions
 * return false and the callers compute float_ops.h's scalar expressions.
 */
#ifndef TESSEL_DEVICE_VMATH_H
#define TESSEL_DEVICE_VMATH_H

#include <stdbool.h>
#include <stdint.h>

#include "../ir/ir.h"

/* r[i] = op(a[i]) for i < n (r may be a), for op one of exp, expm1, log,
 * log1p, logistic, tanh, sine, cosine, tan, erf, the inverse and
 * hyperbolic trigonometric functions. Returns false for any other op, or
 * where no vector library is available; r is then untouched. */
bool dev_vmath_f32(IrOpcode op, const float *a, float *r, int64_t n);
bool dev_vmath_f64(IrOpcode op, const double *a, double *r, int64_t n);

/* Whether dev_vmath_* takes op (the same answer for f32 and f64). */
bool dev_vmath_has(IrOpcode op);

#endif
