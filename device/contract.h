/*
 * contract.h: what the contractions of the CPU backend share (contract.c):
 * compute types and conversions, strided views packed into and out of
 * them, the GEMM (OpenBLAS or loops), and the kernels' small helpers.
 * Used by k_dot.c (dot) and k_conv.c (convolution); private to device/.
 *
 * Compute types: as in XLA's evaluator, operands are first converted to
 * the result's type:
 *   f16, bf16, f32 -> f32   (half types accumulate in f32 and are rounded
 *                            once at the end, like XLA's CPU backend)
 *   f64 -> f64, c64 -> float complex, c128 -> double complex
 *   integers -> 64-bit two's complement, truncated at the end: the low bits
 *               of a wrapped 64-bit sum are those of the narrow-type sum
 *   pred -> OR over k of (a AND b)
 * f32 and f64 GEMMs go to OpenBLAS (cblas_sgemm / cblas_dgemm) unless
 * DevExecOptions.no_blas; everything else uses loops that sum over k in
 * increasing order, one C element at a time (so the loop path of f32 is
 * XLA's evaluator's order).
 */
#ifndef TESSEL_DEVICE_CONTRACT_H
#define TESSEL_DEVICE_CONTRACT_H

#include "device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum Ct {
    CT_F32,   /* float: f16, bf16, f32, f8 and f4 results */
    CT_F64,   /* double */
    CT_C64,   /* float complex */
    CT_C128,  /* double complex */
    CT_INT,   /* uint64_t, two's complement: every integer result */
    CT_PRED,  /* uint8_t 0/1 */
} Ct;

/* The compute type of result type t; its element size; whether elements
 * of type t already are compute-type c values. */
Ct ct_of(IrType t);
size_t ct_size(Ct c);
bool ct_native(Ct c, IrType t);

/* A strided view of an array: element (i_0, ..., i_{rank-1}) of the index
 * space `dims` lives at element base + sum i_k * stride[k] of the data. */
typedef struct CtView {
    int32_t rank;
    int64_t base;
    int64_t dims[IR_MAX_RANK];
    int64_t stride[IR_MAX_RANK];
} CtView;

/* The view of array shape s with its dims visited in order `order`
 * (order[k] = which dim of s is the k-th of the view); its element count. */
void ct_view_of(CtView *v, const IrShape *s, int32_t n, const int64_t *order);
int64_t ct_view_elements(const CtView *v);
/* ct_pack: gather the elements of view v of src (type t), in row-major
 * order of the view, into dst as compute-type values (a
 * transpose-and-convert); ct_unpack: the inverse, converting back. */
void ct_pack(Ct c, IrType t, const uint8_t *src, const CtView *v, uint8_t *dst);
void ct_unpack(Ct c, IrType t, const uint8_t *src, const CtView *v, uint8_t *dst);

/* C[m,n] = op(A) op(B), row-major. A is m x k (lda >= k), or k x m when ta
 * (lda >= m); B is k x n (ldb >= n), or n x k when tb (ldb >= k); C has
 * row stride ldc. C is overwritten (beta = 0), or added to when acc
 * (beta = 1: a K-blocked product continues the sums in k order). */
typedef struct CtGemm {
    Ct c;
    bool ta, tb;
    bool blas;  /* f32/f64 may use OpenBLAS */
    bool exact; /* f32: f32's own product, never bf16 passes (ct_exact) */
    bool acc;   /* C += op(A) op(B) */
    int64_t m, n, k, lda, ldb, ldc;
} CtGemm;

void ct_gemm(const CtGemm *g, const void *a, const void *b, void *c);
/* Whether ct_gemm computes a product like g's (its types, strides and
 * options) of `macs` multiply-adds in tessel's own f32 kernel
 * (sgemm_avx512.c, whose packed-B entry points then give the same bits):
 * f32 through BLAS, and DevBlas.sgemm (or the exact one) that kernel, or
 * the probe sending products of that size to it. */
bool ct_gemm_own_kernel(const CtGemm *g, int64_t macs);

/* The multiply-accumulate of the loop kernels: sum, or OR of ANDs (pred). */
#define MAC_ADD(acc, x, y) ((acc) += (x) * (y))
#define MAC_OR(acc, x, y) ((acc) |= (uint8_t)((x) & (y)))

/* May f32/f64 contractions use BLAS (not DevExecOptions.no_blas)? */
bool ct_use_blas(const DevKernelArgs *k);
/* Does the instruction ask for full precision (operand_precision with a
 * HIGHEST, XLA's f32 product)? Then its f32 GEMMs take f32's own product
 * where DevBlas.sgemm computes bf16 passes (--sgemm amx-bf16x3). */
bool ct_exact(const DevKernelArgs *k);
/* a * b into *r; false on overflow or a negative operand. */
bool ct_mul_ok(int64_t a, int64_t b, int64_t *r);
/* A scratch buffer of n elements of esz bytes; NULL on overflow or OOM.
 * Never NULL for n == 0 (ts_malloc(0) is unique and non-NULL). */
void *ct_scratch(int64_t n, size_t esz);
/* v's data, or a stand-in for the NULL buffer of an empty array, so that
 * offset arithmetic on it stays defined (never read). */
const uint8_t *ct_data_of(const DevValue *v);

#endif /* TESSEL_DEVICE_CONTRACT_H */
