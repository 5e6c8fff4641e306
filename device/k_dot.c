/*
 * k_dot.c: dot and convolution, the two contractions of the CPU backend.
 *
 * Both come down to one primitive, a row-major GEMM
 *     C[M,N] = op(A)[M,K] * op(B)[K,N]          (op: optional transpose)
 * computed in a "compute type" chosen from the result's element type. As in
 * XLA's evaluator, operands are first converted to the result's type:
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
 *
 * dot: an operand is used in place when its dims are already in GEMM order,
 * [batch, free, contracting] or [batch, contracting, free] (a transpose flag
 * covers the second), and when its element type is the compute type;
 * otherwise it is copied once, converted, into [batch, free, contracting]
 * (lhs) or [batch, contracting, free] (rhs). One GEMM per batch element;
 * the result [batch, lhs free, rhs free] is the GEMM output itself.
 *
 * convolution: im2col + GEMM, see the comment above dev_k_convolution.
 */
#include "blas.h"

#include <complex.h>
#include <limits.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Compute types and conversions                                       */
/* ------------------------------------------------------------------ */

typedef enum Ct {
    CT_F32,   /* float: f16, bf16, f32, f8 and f4 results */
    CT_F64,   /* double */
    CT_C64,   /* float complex */
    CT_C128,  /* double complex */
    CT_INT,   /* uint64_t, two's complement: every integer result */
    CT_PRED,  /* uint8_t 0/1 */
} Ct;

static Ct ct_of(IrType t)
{
    switch (t) {
    case IR_F16: case IR_BF16: case IR_F32: return CT_F32;
    case IR_F64: return CT_F64;
    case IR_C64: return CT_C64;
    case IR_C128: return CT_C128;
    case IR_PRED: return CT_PRED;
    default: /* the f8 and f4 kinds accumulate in f32, as f16 does */
        return ir_type_is_lowp_float(t) ? CT_F32 : CT_INT;
    }
}

static size_t ct_size(Ct c)
{
    static const size_t size[] = {4, 8, 8, 16, 8, 1};
    return size[c];
}

/* True when elements of type t already are compute-type c values. */
static bool ct_native(Ct c, IrType t)
{
    switch (c) {
    case CT_F32: return t == IR_F32;
    case CT_F64: return t == IR_F64;
    case CT_C64: return t == IR_C64;
    case CT_C128: return t == IR_C128;
    case CT_INT: return t == IR_S64 || t == IR_U64;
    case CT_PRED: return t == IR_PRED;
    }
    return false;
}

/* Real and imaginary parts of element i of any array type. */
static void load_complex(IrType t, const uint8_t *src, int64_t i, double *re, double *im)
{
    if (t == IR_C64) {
        const float *p = (const float *)src + 2 * i;
        *re = p[0];
        *im = p[1];
    } else if (t == IR_C128) {
        const double *p = (const double *)src + 2 * i;
        *re = p[0];
        *im = p[1];
    } else {
        *re = dev_load_f64(t, src, i);
        *im = 0;
    }
}

/* Element i of `src` (type t) converted to compute type c, written at dst. */
static void elem_to_ct(Ct c, IrType t, const uint8_t *src, int64_t i, uint8_t *dst)
{
    double re, im;
    switch (c) {
    case CT_F32: {
        float v = (float)dev_load_f64(t, src, i);
        memcpy(dst, &v, sizeof v);
        break;
    }
    case CT_F64: {
        double v = dev_load_f64(t, src, i);
        memcpy(dst, &v, sizeof v);
        break;
    }
    case CT_C64: {
        load_complex(t, src, i, &re, &im);
        float v[2] = {(float)re, (float)im};
        memcpy(dst, v, sizeof v);
        break;
    }
    case CT_C128: {
        load_complex(t, src, i, &re, &im);
        double v[2] = {re, im};
        memcpy(dst, v, sizeof v);
        break;
    }
    case CT_INT: {
        uint64_t v = ir_type_is_int(t) || t == IR_PRED ? dev_load_u64(t, src, i)
                                                      : (uint64_t)dev_load_i64(t, src, i);
        memcpy(dst, &v, sizeof v);
        break;
    }
    case CT_PRED:
        load_complex(t, src, i, &re, &im);
        *dst = re != 0 || im != 0;
        break;
    }
}

/* Compute-type value at src stored as element i of dst (type t). The
 * result type always belongs to c's family (c = ct_of(t)). */
static void elem_from_ct(Ct c, IrType t, const uint8_t *src, uint8_t *dst, int64_t i)
{
    switch (c) {
    case CT_F32: {
        float v;
        memcpy(&v, src, sizeof v);
        if (t == IR_F16)
            ((uint16_t *)dst)[i] = dev_f32_to_f16(v);
        else if (t == IR_BF16)
            ((uint16_t *)dst)[i] = dev_f32_to_bf16(v);
        else
            dev_store_f64(t, dst, i, v);
        break;
    }
    case CT_F64: {
        double v;
        memcpy(&v, src, sizeof v);
        dev_store_f64(t, dst, i, v);
        break;
    }
    case CT_INT: {
        uint64_t v;
        memcpy(&v, src, sizeof v);
        dev_store_u64(t, dst, i, v);
        break;
    }
    case CT_C64: case CT_C128: case CT_PRED:
        memcpy(dst + (size_t)i * ct_size(c), src, ct_size(c));
        break;
    }
}

/* Copy n elements of esz bytes: element j from src + j*sstride elements to
 * dst + j*dstride elements (strides may be negative). Typed loops for the
 * usual sizes: a memcpy call per element costs more than the copy. */
static void copy_elems(size_t esz, const uint8_t *src, int64_t sstride, uint8_t *dst,
                       int64_t dstride, int64_t n)
{
    if (sstride == 1 && dstride == 1) {
        memcpy(dst, src, (size_t)n * esz);
        return;
    }
#define COPY(T)                                                 \
    for (int64_t j = 0; j < n; j++)                             \
        ((T *)dst)[j * dstride] = ((const T *)src)[j * sstride]; \
    return
    switch (esz) {
    case 1: COPY(uint8_t);
    case 2: COPY(uint16_t);
    case 4: COPY(uint32_t);
    case 8: COPY(uint64_t);
    default:
        for (int64_t j = 0; j < n; j++)
            memcpy(dst + j * dstride * (int64_t)esz, src + j * sstride * (int64_t)esz, esz);
    }
#undef COPY
}

/* A run of n elements of src (type t), starting at element i0 with a
 * stride, converted into consecutive compute-type values at dst. */
static void run_to_ct(Ct c, IrType t, const uint8_t *src, int64_t i0, int64_t stride, int64_t n,
                      uint8_t *dst)
{
    if (ct_native(c, t)) {
        size_t esz = ct_size(c);
        copy_elems(esz, src + i0 * (int64_t)esz, stride, dst, 1, n);
    } else if (c == CT_F32 && (t == IR_F16 || t == IR_BF16)) {
        const uint16_t *s = (const uint16_t *)src + i0;
        float *d = (float *)dst;
        for (int64_t j = 0; j < n; j++)
            d[j] = t == IR_F16 ? dev_f16_to_f32(s[j * stride]) : dev_bf16_to_f32(s[j * stride]);
    } else {
        size_t esz = ct_size(c);
        for (int64_t j = 0; j < n; j++)
            elem_to_ct(c, t, src, i0 + j * stride, dst + (size_t)j * esz);
    }
}

/* The reverse: n consecutive compute-type values stored into dst (type t)
 * at elements i0, i0 + stride, ... */
static void run_from_ct(Ct c, IrType t, const uint8_t *src, uint8_t *dst, int64_t i0,
                        int64_t stride, int64_t n)
{
    size_t esz = ct_size(c);
    if (ct_native(c, t)) {
        copy_elems(esz, src, 1, dst + i0 * (int64_t)esz, stride, n);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        elem_from_ct(c, t, src + (size_t)j * esz, dst, i0 + j * stride);
}

/* A strided view of an array: element (i_0, ..., i_{rank-1}) of the index
 * space `dims` lives at element base + sum i_k * stride[k] of the data. */
typedef struct View {
    int32_t rank;
    int64_t base;
    int64_t dims[IR_MAX_RANK];
    int64_t stride[IR_MAX_RANK];
} View;

/* The view of array shape s with its dims visited in order `order`
 * (order[k] = which dim of s is the k-th of the view). */
static void view_of(View *v, const IrShape *s, int32_t n, const int64_t *order)
{
    int64_t st[IR_MAX_RANK];
    ir_shape_strides(s, st);
    v->rank = n;
    v->base = 0;
    for (int32_t k = 0; k < n; k++) {
        v->dims[k] = s->dims[order[k]];
        v->stride[k] = st[order[k]];
    }
}

static int64_t view_elements(const View *v)
{
    int64_t n = 1;
    for (int32_t k = 0; k < v->rank; k++)
        n *= v->dims[k];
    return n;
}

/* Advance the odometer idx over all but the last dim of v; off follows. */
static void view_bump(const View *v, int64_t *idx, int64_t *off)
{
    for (int32_t d = v->rank - 2; d >= 0; d--) {
        idx[d]++;
        *off += v->stride[d];
        if (idx[d] < v->dims[d])
            return;
        *off -= v->dims[d] * v->stride[d];
        idx[d] = 0;
    }
}

/* Gather the elements of view v of src (type t), in row-major order of the
 * view, into dst as compute-type values (a transpose-and-convert). */
static void pack(Ct c, IrType t, const uint8_t *src, const View *v, uint8_t *dst)
{
    int64_t total = view_elements(v);
    if (total == 0)
        return;
    if (v->rank == 0) {
        run_to_ct(c, t, src, v->base, 1, 1, dst);
        return;
    }
    int64_t inner = v->dims[v->rank - 1], istride = v->stride[v->rank - 1];
    int64_t idx[IR_MAX_RANK] = {0}, off = v->base;
    size_t run = (size_t)inner * ct_size(c);
    for (int64_t done = 0; done < total; done += inner, dst += run) {
        run_to_ct(c, t, src, off, istride, inner, dst);
        view_bump(v, idx, &off);
    }
}

/* Scatter consecutive compute-type values from src into the elements of
 * view v of dst (type t), converting: the inverse of pack. */
static void unpack(Ct c, IrType t, const uint8_t *src, const View *v, uint8_t *dst)
{
    int64_t total = view_elements(v);
    if (total == 0)
        return;
    if (v->rank == 0) {
        run_from_ct(c, t, src, dst, v->base, 1, 1);
        return;
    }
    int64_t inner = v->dims[v->rank - 1], istride = v->stride[v->rank - 1];
    int64_t idx[IR_MAX_RANK] = {0}, off = v->base;
    size_t run = (size_t)inner * ct_size(c);
    for (int64_t done = 0; done < total; done += inner, src += run) {
        run_from_ct(c, t, src, dst, off, istride, inner);
        view_bump(v, idx, &off);
    }
}

/* ------------------------------------------------------------------ */
/* GEMM                                                                */
/* ------------------------------------------------------------------ */

/* C[m,n] = op(A) op(B), row-major. A is m x k (lda >= k), or k x m when ta
 * (lda >= m); B is k x n (ldb >= n), or n x k when tb (ldb >= k); C has
 * row stride ldc. C is overwritten (beta = 0), or added to when acc
 * (beta = 1: a K-blocked product continues the sums in k order). */
typedef struct Gemm {
    Ct c;
    bool ta, tb;
    bool blas;  /* f32/f64 may use OpenBLAS */
    bool acc;   /* C += op(A) op(B) */
    int64_t m, n, k, lda, ldb, ldc;
} Gemm;

/* One loop kernel per compute type: for each C element, sum over k in
 * increasing order. Without tb the k loop is outside the j loop so that B
 * and C rows are read contiguously; the per-element order is the same. */
#define GEMM_LOOP(NAME, T, ZERO, MAC)                                              \
    static void NAME(const Gemm *g, const T *a, const T *b, T *c)                 \
    {                                                                             \
        for (int64_t i = 0; i < g->m; i++) {                                      \
            T *crow = c + i * g->ldc;                                             \
            if (!g->tb) {                                                         \
                for (int64_t j = 0; j < g->n && !g->acc; j++)                     \
                    crow[j] = ZERO;                                               \
                for (int64_t kk = 0; kk < g->k; kk++) {                           \
                    T av = g->ta ? a[kk * g->lda + i] : a[i * g->lda + kk];       \
                    const T *brow = b + kk * g->ldb;                              \
                    for (int64_t j = 0; j < g->n; j++)                            \
                        MAC(crow[j], av, brow[j]);                                \
                }                                                                 \
            } else {                                                              \
                for (int64_t j = 0; j < g->n; j++) {                              \
                    const T *bcol = b + j * g->ldb;                               \
                    T acc = g->acc ? crow[j] : ZERO;                              \
                    for (int64_t kk = 0; kk < g->k; kk++) {                       \
                        T av = g->ta ? a[kk * g->lda + i] : a[i * g->lda + kk];   \
                        MAC(acc, av, bcol[kk]);                                   \
                    }                                                             \
                    crow[j] = acc;                                                \
                }                                                                 \
            }                                                                     \
        }                                                                         \
    }

#define MAC_ADD(acc, x, y) ((acc) += (x) * (y))
#define MAC_OR(acc, x, y) ((acc) |= (uint8_t)((x) & (y)))

GEMM_LOOP(gemm_f32, float, 0.0f, MAC_ADD)
GEMM_LOOP(gemm_f64, double, 0.0, MAC_ADD)
GEMM_LOOP(gemm_c64, float complex, 0.0f, MAC_ADD)
GEMM_LOOP(gemm_c128, double complex, 0.0, MAC_ADD)
GEMM_LOOP(gemm_int, uint64_t, 0u, MAC_ADD)
GEMM_LOOP(gemm_pred, uint8_t, 0u, MAC_OR)

static bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

static bool gemm_blas_ok(const Gemm *g)
{
    return g->blas && (g->c == CT_F32 || g->c == CT_F64) && fits_int(g->m) && fits_int(g->n) &&
           fits_int(g->k) && fits_int(g->lda) && fits_int(g->ldb) && fits_int(g->ldc) &&
           g->lda >= 1 && g->ldb >= 1 && g->ldc >= 1;
}

static void gemm(const Gemm *g, const void *a, const void *b, void *c)
{
    if (g->m == 0 || g->n == 0)
        return;
    if (g->k == 0) { /* an empty sum: all-zero bits are 0 in every compute type */
        for (int64_t i = 0; i < g->m && !g->acc; i++)
            memset((uint8_t *)c + (size_t)(i * g->ldc) * ct_size(g->c), 0,
                   (size_t)g->n * ct_size(g->c));
        return;
    }
    /* Without a loadable BLAS the loops below compute the same product. */
    const DevBlas *bl = gemm_blas_ok(g) ? dev_blas() : NULL;
    if (bl) {
        enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
        enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
        if (g->c == CT_F32)
            bl->sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, 1.0f, a,
                        (int)g->lda, b, (int)g->ldb, g->acc ? 1.0f : 0.0f, c, (int)g->ldc);
        else
            bl->dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, 1.0, a,
                        (int)g->lda, b, (int)g->ldb, g->acc ? 1.0 : 0.0, c, (int)g->ldc);
        return;
    }
    switch (g->c) {
    case CT_F32: gemm_f32(g, a, b, c); break;
    case CT_F64: gemm_f64(g, a, b, c); break;
    case CT_C64: gemm_c64(g, a, b, c); break;
    case CT_C128: gemm_c128(g, a, b, c); break;
    case CT_INT: gemm_int(g, a, b, c); break;
    case CT_PRED: gemm_pred(g, a, b, c); break;
    }
}

/* ------------------------------------------------------------------ */
/* Shared helpers                                                      */
/* ------------------------------------------------------------------ */

static bool use_blas(const DevKernelArgs *k)
{
    return !(k->opt && k->opt->no_blas);
}

/* a * b into *r; false on overflow or a negative operand. */
static bool mul_ok(int64_t a, int64_t b, int64_t *r)
{
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, r);
}

/* A scratch buffer of n elements of esz bytes; NULL on overflow or OOM.
 * Never NULL for n == 0 (ts_malloc(0) is unique and non-NULL). */
static void *scratch(int64_t n, size_t esz)
{
    int64_t bytes;
    if (!mul_ok(n, (int64_t)esz, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return NULL;
    return ts_malloc((size_t)bytes);
}

/* Stands in for the NULL buffer of an empty array, so that offset
 * arithmetic on it stays defined; never read. */
static const uint8_t empty_data[16];

static const uint8_t *data_of(const DevValue *v)
{
    return v->data ? v->data : empty_data;
}

/* Equal dims, rank entries each (rank-0 shapes may have NULL dims). */
static bool is_array_value(const DevValue *v)
{
    return v && v->shape.type != IR_TUPLE && ir_type_is_array(v->shape.type);
}

static IrStatus oom(const DevKernelArgs *k)
{
    return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", ir_op_name(k->ins->op));
}

/* ------------------------------------------------------------------ */
/* dot                                                                 */
/* ------------------------------------------------------------------ */

/* The dims of a dot, classified. Result = [batch..., lhs free..., rhs free...]. */
typedef struct DotPlan {
    int32_t nb, nc, nlf, nrf;
    int64_t lfree[IR_MAX_RANK], rfree[IR_MAX_RANK];
    int64_t b, m, n, k;   /* batch, lhs free, rhs free and contracting sizes */
} DotPlan;

/* Collect the dims of s that are in neither list, ascending; false when a
 * list names a dim out of range or twice. */
static bool free_dims(const IrShape *s, const IrI64List *x, const IrI64List *y, int64_t *free,
                      int32_t *nfree)
{
    bool seen[IR_MAX_RANK] = {false};
    const IrI64List *lists[2] = {x, y};
    for (int l = 0; l < 2; l++)
        for (int32_t i = 0; i < lists[l]->n; i++) {
            int64_t d = lists[l]->v[i];
            if (d < 0 || d >= s->rank || seen[d])
                return false;
            seen[d] = true;
        }
    *nfree = 0;
    for (int32_t d = 0; d < s->rank; d++)
        if (!seen[d])
            free[(*nfree)++] = d;
    return true;
}

static int64_t dims_product(const IrShape *s, const int64_t *dims, int32_t n)
{
    int64_t p = 1;
    for (int32_t i = 0; i < n; i++)
        if (!mul_ok(p, s->dims[dims[i]], &p))
            return -1;
    return p;
}

static IrStatus dot_plan(const DevKernelArgs *k, DotPlan *p)
{
    const IrShape *ls = &k->opnd[0]->shape, *rs = &k->opnd[1]->shape, *os = &k->ins->shape;
    const IrDotDnums *dn = &k->ins->a.dot;
    if (dn->lhs_batch.n != dn->rhs_batch.n || dn->lhs_contracting.n != dn->rhs_contracting.n ||
        !free_dims(ls, &dn->lhs_batch, &dn->lhs_contracting, p->lfree, &p->nlf) ||
        !free_dims(rs, &dn->rhs_batch, &dn->rhs_contracting, p->rfree, &p->nrf))
        return dev_kernel_error(k, IR_EINPUT, "dot: bad dimension numbers");
    p->nb = dn->lhs_batch.n;
    p->nc = dn->lhs_contracting.n;
    for (int32_t i = 0; i < p->nb; i++)
        if (ls->dims[dn->lhs_batch.v[i]] != rs->dims[dn->rhs_batch.v[i]])
            return dev_kernel_error(k, IR_EINPUT, "dot: batch dimension %d sizes differ", (int)i);
    for (int32_t i = 0; i < p->nc; i++)
        if (ls->dims[dn->lhs_contracting.v[i]] != rs->dims[dn->rhs_contracting.v[i]])
            return dev_kernel_error(k, IR_EINPUT, "dot: contracting dimension %d sizes differ",
                                    (int)i);
    /* The result's dims, in order, must be batch, lhs free, rhs free. */
    int64_t want[IR_MAX_RANK];
    int32_t r = 0;
    if (p->nb + p->nlf + p->nrf > IR_MAX_RANK)
        return dev_kernel_error(k, IR_EINPUT, "dot: result rank too large");
    for (int32_t i = 0; i < p->nb; i++)
        want[r++] = ls->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < p->nlf; i++)
        want[r++] = ls->dims[p->lfree[i]];
    for (int32_t i = 0; i < p->nrf; i++)
        want[r++] = rs->dims[p->rfree[i]];
    if (os->type == IR_TUPLE || os->rank != r || !ir_dims_equal(os->dims, want, r))
        return dev_kernel_error(k, IR_EINPUT, "dot: result shape does not match the operands");
    p->b = dims_product(ls, dn->lhs_batch.v, p->nb);
    p->m = dims_product(ls, p->lfree, p->nlf);
    p->n = dims_product(rs, p->rfree, p->nrf);
    p->k = dims_product(ls, dn->lhs_contracting.v, p->nc);
    if (p->b < 0 || p->m < 0 || p->n < 0 || p->k < 0)
        return dev_kernel_error(k, IR_EINPUT, "dot: size overflow");
    return IR_OK;
}

/* Dims of s in the order batch, x, y? */
static bool dims_in_order(const IrShape *s, const int64_t *batch, int32_t nb, const int64_t *x,
                          int32_t nx, const int64_t *y, int32_t ny)
{
    int32_t pos = 0;
    for (int32_t i = 0; i < nb; i++)
        if (batch[i] != pos++)
            return false;
    for (int32_t i = 0; i < nx; i++)
        if (x[i] != pos++)
            return false;
    for (int32_t i = 0; i < ny; i++)
        if (y[i] != pos++)
            return false;
    return pos == s->rank;
}

/* One GEMM operand: in place in the value's buffer or packed to scratch. */
typedef struct DotOperand {
    const uint8_t *data;
    uint8_t *owned;   /* scratch to free, or NULL */
    bool trans;
} DotOperand;

/* Prepare one dot operand. For the lhs, x = free and y = contracting (GEMM
 * A = [M, K]); for the rhs, x = contracting and y = free (B = [K, N]). The
 * swapped order is accepted in place with the transpose flag. */
static IrStatus dot_operand(const DevKernelArgs *k, Ct c, const DevValue *v, const int64_t *batch,
                            int32_t nb, const int64_t *x, int32_t nx, const int64_t *y, int32_t ny,
                            DotOperand *op)
{
    const IrShape *s = &v->shape;
    op->owned = NULL;
    op->trans = false;
    if (ct_native(c, s->type)) {
        if (dims_in_order(s, batch, nb, x, nx, y, ny)) {
            op->data = data_of(v);
            return IR_OK;
        }
        if (dims_in_order(s, batch, nb, y, ny, x, nx)) {
            op->data = data_of(v);
            op->trans = true;
            return IR_OK;
        }
    }
    int64_t order[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < nb; i++)
        order[r++] = batch[i];
    for (int32_t i = 0; i < nx; i++)
        order[r++] = x[i];
    for (int32_t i = 0; i < ny; i++)
        order[r++] = y[i];
    View view;
    view_of(&view, s, r, order);
    if (!(op->owned = scratch(view_elements(&view), ct_size(c))))
        return oom(k);
    pack(c, s->type, v->data, &view, op->owned);
    op->data = op->owned;
    return IR_OK;
}

/* Run the batched GEMM of a planned dot into c_out ([B, M, N], compute type). */
static void dot_run(const DevKernelArgs *k, Ct c, const DotPlan *p, const DotOperand *a,
                    const DotOperand *b, uint8_t *c_out)
{
    Gemm g = {.c = c, .ta = a->trans, .tb = b->trans, .blas = use_blas(k),
              .m = p->m, .n = p->n, .k = p->k};
    g.lda = a->trans ? p->m : p->k;
    g.ldb = b->trans ? p->k : p->n;
    g.ldc = p->n;
    size_t esz = ct_size(c);
    for (int64_t i = 0; i < p->b; i++)
        gemm(&g, a->data + (size_t)(i * p->m * p->k) * esz, b->data + (size_t)(i * p->k * p->n) * esz,
             c_out + (size_t)(i * p->m * p->n) * esz);
}

/*
 * dot: general dimension numbers. Example: lhs f32[2,3,4] with
 * lhs_batch_dims={0}, lhs_contracting_dims={2} and rhs f32[2,4,5] with
 * rhs_batch_dims={0}, rhs_contracting_dims={1} gives f32[2,3,5]: for each
 * batch b, out[b] = lhs[b] (3x4) x rhs[b] (4x5). Batch and contracting dims
 * may sit anywhere; free dims keep their relative order.
 *
 * Inputs: two array operands. On success *out is a new array. Fails with
 * IR_EINPUT on inconsistent dimension numbers, IR_ENOMEM on OOM.
 */
IrStatus dev_k_dot(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2 || !is_array_value(k->opnd[0]) || !is_array_value(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "dot takes two arrays");
    DotPlan p = {0};
    IrStatus st = dot_plan(k, &p);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->ins->shape;
    const IrDotDnums *dn = &k->ins->a.dot;
    Ct c = ct_of(os->type);
    DevValue *r = dev_value_new_uninit(os);
    if (!r)
        return oom(k);
    int64_t total = p.b * p.m * p.n;
    if (total == 0) {
        *out = r;
        return IR_OK;
    }
    DotOperand a = {0}, b = {0};
    uint8_t *cbuf = NULL;
    if ((st = dot_operand(k, c, k->opnd[0], dn->lhs_batch.v, p.nb, p.lfree, p.nlf,
                          dn->lhs_contracting.v, p.nc, &a)) != IR_OK ||
        (st = dot_operand(k, c, k->opnd[1], dn->rhs_batch.v, p.nb, dn->rhs_contracting.v, p.nc,
                          p.rfree, p.nrf, &b)) != IR_OK)
        goto done;
    bool direct = ct_native(c, os->type);
    if (!direct && !(cbuf = scratch(total, ct_size(c)))) {
        st = oom(k);
        goto done;
    }
    dot_run(k, c, &p, &a, &b, direct ? r->data : cbuf);
    if (!direct) {
        View v = {.rank = 1, .dims = {total}, .stride = {1}};
        unpack(c, os->type, cbuf, &v, r->data);
    }
done:
    ts_free(a.owned);
    ts_free(b.owned);
    ts_free(cbuf);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* convolution                                                         */
/* ------------------------------------------------------------------ */

/* Everything about a convolution's geometry, with the operands in the
 * canonical orders used below:
 *   input  [IB, IF, IS...]   kernel [KO, KI, W...]   output [OF, OB, OS...] */
typedef struct ConvPlan {
    int32_t ns;
    int64_t ib, if_, ki, ko, ob, of, fgc, bgc;
    int64_t isz[IR_MAX_RANK], wsz[IR_MAX_RANK], osz[IR_MAX_RANK];
    int64_t is, w, os;   /* products of isz, wsz, osz */
    int64_t kk, ncol;    /* GEMM sizes: KI*W rows, OB*OS columns */
} ConvPlan;

/* Do the given dims form a permutation of 0..rank-1? */
static bool is_permutation(int32_t rank, int64_t a, int64_t b, int32_t ns, const int64_t *sp)
{
    bool seen[IR_MAX_RANK] = {false};
    if (ns + 2 != rank)
        return false;
    int64_t all[IR_MAX_RANK];
    all[0] = a;
    all[1] = b;
    for (int32_t i = 0; i < ns; i++)
        all[i + 2] = sp[i];
    for (int32_t i = 0; i < rank; i++) {
        if (all[i] < 0 || all[i] >= rank || seen[all[i]])
            return false;
        seen[all[i]] = true;
    }
    return true;
}

static IrStatus conv_plan(const DevKernelArgs *k, ConvPlan *p)
{
    const IrShape *in = &k->opnd[0]->shape, *ker = &k->opnd[1]->shape, *os = &k->ins->shape;
    const IrConvDnums *cd = &k->ins->a.x->conv;
    const IrWindow *win = &k->ins->a.x->window;
    int32_t ns = cd->nspatial;
    p->ns = ns;
    if (!cd->present || os->type == IR_TUPLE ||
        !is_permutation(in->rank, cd->in_batch, cd->in_feature, ns, cd->in_spatial) ||
        !is_permutation(ker->rank, cd->k_out_feature, cd->k_in_feature, ns, cd->k_spatial) ||
        !is_permutation(os->rank, cd->out_batch, cd->out_feature, ns, cd->out_spatial) ||
        (win->rank != ns && !(win->rank == 0 && ns == 0)))
        return dev_kernel_error(k, IR_EINPUT, "convolution: bad dim_labels or window");
    p->fgc = k->ins->a.x->feature_group_count > 0 ? k->ins->a.x->feature_group_count : 1;
    p->bgc = k->ins->a.x->batch_group_count > 0 ? k->ins->a.x->batch_group_count : 1;
    p->ib = in->dims[cd->in_batch];
    p->if_ = in->dims[cd->in_feature];
    p->ki = ker->dims[cd->k_in_feature];
    p->ko = ker->dims[cd->k_out_feature];
    p->ob = os->dims[cd->out_batch];
    p->of = os->dims[cd->out_feature];
    if (p->if_ != p->ki * p->fgc || p->ko % p->fgc != 0 || p->ko % p->bgc != 0 ||
        p->ib % p->bgc != 0 || p->ob != p->ib / p->bgc || p->of != p->ko)
        return dev_kernel_error(k, IR_EINPUT,
                                "convolution: feature/batch sizes do not agree with "
                                "feature_group_count=%lld batch_group_count=%lld",
                                (long long)p->fgc, (long long)p->bgc);
    p->is = p->w = p->os = 1;
    for (int32_t s = 0; s < ns; s++) {
        const IrWindowDim *wd = &win->dim[s];
        p->isz[s] = in->dims[cd->in_spatial[s]];
        p->wsz[s] = ker->dims[cd->k_spatial[s]];
        p->osz[s] = os->dims[cd->out_spatial[s]];
        if (wd->size != p->wsz[s] || wd->stride < 1 || wd->lhs_dilate < 1 || wd->rhs_dilate < 1)
            return dev_kernel_error(k, IR_EINPUT, "convolution: bad window in dimension %d",
                                    (int)s);
        if (!mul_ok(p->is, p->isz[s], &p->is) || !mul_ok(p->w, p->wsz[s], &p->w) ||
            !mul_ok(p->os, p->osz[s], &p->os))
            return dev_kernel_error(k, IR_EINPUT, "convolution: size overflow");
    }
    if (!mul_ok(p->ki, p->w, &p->kk) || !mul_ok(p->ob, p->os, &p->ncol))
        return dev_kernel_error(k, IR_EINPUT, "convolution: size overflow");
    return IR_OK;
}

/* Input coordinate read by output position o and window position w of one
 * spatial dim, or -1 when it falls into padding or a base-dilation hole:
 *     u = o*stride - pad_lo + w*rhs_dilation;  coordinate = u / lhs_dilation
 * e.g. stride 1, pad_lo 1, lhs dilation 2: o=0,w=1 -> u=0 -> input 0;
 * o=0,w=2 -> u=1 -> a hole (-1). Window reversal is applied to the kernel. */
static int64_t conv_coord(const IrWindowDim *wd, int64_t isz, int64_t o, int64_t w)
{
    int64_t u = o * wd->stride - wd->pad_lo + w * wd->rhs_dilate;
    if (wd->lhs_dilate > 1) {
        if (u % wd->lhs_dilate != 0)
            return -1;
        u /= wd->lhs_dilate;
    }
    return u >= 0 && u < isz ? u : -1;
}

/* The offset table: off[w * OS + os] = offset inside one canonical input
 * plane [IS...] read by output position os at window position w, or -1. */
static int64_t *conv_offsets(const DevKernelArgs *k, const ConvPlan *p)
{
    int64_t n;
    if (!mul_ok(p->w, p->os, &n))
        return NULL;
    int64_t *off = scratch(n, sizeof *off);
    if (!off)
        return NULL;
    int64_t istr[IR_MAX_RANK];
    for (int32_t s = p->ns - 1, st = 1; s >= 0; s--) {
        istr[s] = st;
        st *= p->isz[s];
    }
    int64_t oi[IR_MAX_RANK] = {0}, wi[IR_MAX_RANK];
    for (int64_t o = 0; o < p->os; o++) {
        memset(wi, 0, sizeof wi);
        for (int64_t w = 0; w < p->w; w++) {
            int64_t sum = 0;
            for (int32_t s = 0; s < p->ns && sum >= 0; s++) {
                int64_t u = conv_coord(&k->ins->a.x->window.dim[s], p->isz[s], oi[s], wi[s]);
                sum = u < 0 ? -1 : sum + u * istr[s];
            }
            off[w * p->os + o] = sum;
            for (int32_t s = p->ns - 1; s >= 0 && ++wi[s] == p->wsz[s]; s--)
                wi[s] = 0;
        }
        for (int32_t s = p->ns - 1; s >= 0 && ++oi[s] == p->osz[s]; s--)
            oi[s] = 0;
    }
    return off;
}

/* The runs of output features sharing one feature group g and one batch
 * group bg: [of0, of1). With fgc = bgc = 1 there is one run, all of OF. */
typedef struct OfRun {
    int64_t of0, of1, g, bg;
} OfRun;

static bool next_run(const ConvPlan *p, OfRun *r)
{
    if (r->of1 >= p->of)
        return false;
    int64_t ofgs = p->ko / p->fgc;                        /* outputs per feature group */
    int64_t dmul = p->bgc > 1 ? p->ko / p->bgc : p->ko;   /* outputs per batch group */
    r->of0 = r->of1;
    r->g = r->of0 / ofgs;
    r->bg = r->of0 / dmul;
    int64_t e1 = (r->g + 1) * ofgs, e2 = (r->bg + 1) * dmul;
    r->of1 = e1 < e2 ? e1 : e2;
    return true;
}

/* The first element of input plane (batch ob + bg*OB, feature g*KI + ki). */
static const uint8_t *conv_plane(const ConvPlan *p, size_t esz, const uint8_t *in, int64_t ob,
                                 const OfRun *r, int64_t ki)
{
    return in + (size_t)(((ob + r->bg * p->ob) * p->if_ + r->g * p->ki + ki) * p->is) * esz;
}

/* dst[t] = o[t] < 0 ? 0 : src[o[t]] for t < n (elements of esz bytes). */
static void gather_offsets(size_t esz, const uint8_t *src, const int64_t *o, int64_t n, uint8_t *dst)
{
#define GATHER(T)                                            \
    for (int64_t t = 0; t < n; t++)                          \
        ((T *)dst)[t] = o[t] < 0 ? 0 : ((const T *)src)[o[t]]; \
    return
    switch (esz) {
    case 1: GATHER(uint8_t);
    case 4: GATHER(uint32_t);
    case 8: GATHER(uint64_t);
    default:
        for (int64_t t = 0; t < n; t++) {
            if (o[t] < 0)
                memset(dst + (size_t)t * esz, 0, esz);
            else
                memcpy(dst + (size_t)t * esz, src + (size_t)o[t] * esz, esz);
        }
    }
#undef GATHER
}

/* How the dense engine reads the kernel as the GEMM's A = Ker[KO, KI*W].
 * Row k of the KI*W reduction dim is (ki, w) = (k / W, k % W), or with
 * wmajor (w, ki) = (k / KI, k % KI); im2col builds its rows to match. The
 * kernel operand is used in place when it already is such a matrix or its
 * transpose (layouts OI01, O01I, I01O and 01IO with spatial dims in order,
 * no reversal, compute type); otherwise it is packed as OI01. */
typedef struct KerMat {
    const uint8_t *a;
    uint8_t *owned;
    bool trans;    /* stored as [KI*W, KO] */
    bool wmajor;
    int64_t lda;
} KerMat;

/* sp[s] == first + s for every spatial dim? */
static bool spatial_at(const int64_t *sp, int32_t ns, int64_t first)
{
    for (int32_t s = 0; s < ns; s++)
        if (sp[s] != first + s)
            return false;
    return true;
}

static bool reversed(const DevKernelArgs *k, const ConvPlan *p)
{
    for (int32_t s = 0; s < p->ns; s++)
        if (k->ins->a.x->window.dim[s].reversal && p->wsz[s] > 1)
            return true;
    return false;
}

/* The kernel operand as a view in order (d0 | d1 | spatial...) or
 * (spatial... | d0 | d1), with reversed spatial dims walked backwards. */
static void ker_view(const DevKernelArgs *k, View *v, int64_t d0, int64_t d1, bool spatial_first)
{
    const IrConvDnums *cd = &k->ins->a.x->conv;
    int32_t ns = cd->nspatial, sp0 = spatial_first ? 0 : 2;
    int64_t order[IR_MAX_RANK];
    order[spatial_first ? ns : 0] = d0;
    order[spatial_first ? ns + 1 : 1] = d1;
    for (int32_t s = 0; s < ns; s++)
        order[sp0 + s] = cd->k_spatial[s];
    view_of(v, &k->opnd[1]->shape, ns + 2, order);
    for (int32_t s = 0; s < ns; s++)
        if (k->ins->a.x->window.dim[s].reversal && v->dims[sp0 + s] > 1) {
            v->base += (v->dims[sp0 + s] - 1) * v->stride[sp0 + s];
            v->stride[sp0 + s] = -v->stride[sp0 + s];
        }
}

static IrStatus ker_matrix(const DevKernelArgs *k, Ct c, const ConvPlan *p, KerMat *km)
{
    const IrConvDnums *cd = &k->ins->a.x->conv;
    const DevValue *kv = k->opnd[1];
    int64_t o = cd->k_out_feature, i = cd->k_in_feature;
    int32_t ns = cd->nspatial;
    memset(km, 0, sizeof *km);
    if (ct_native(c, kv->shape.type) && !reversed(k, p)) {
        km->a = data_of(kv);
        if (o == 0 && i == 1 && spatial_at(cd->k_spatial, ns, 2)) {
            km->lda = p->kk;
            return IR_OK;
        }
        if (o == 0 && i == ns + 1 && spatial_at(cd->k_spatial, ns, 1)) {
            km->wmajor = true;
            km->lda = p->kk;
            return IR_OK;
        }
        if (i == 0 && o == ns + 1 && spatial_at(cd->k_spatial, ns, 1)) {
            km->trans = true;
            km->lda = p->ko;
            return IR_OK;
        }
        if (i == ns && o == ns + 1 && spatial_at(cd->k_spatial, ns, 0)) {
            km->trans = km->wmajor = true;
            km->lda = p->ko;
            return IR_OK;
        }
    }
    View v;
    ker_view(k, &v, o, i, false);
    if (!(km->owned = scratch(view_elements(&v), ct_size(c))))
        return oom(k);
    pack(c, kv->shape.type, kv->data, &v, km->owned);
    km->a = km->owned;
    km->lda = p->kk;
    return IR_OK;
}

/* One block of the im2col matrix: rows [k0, k0 + nk) of the KI*W rows,
 * columns [c0, c0 + nc) of the OB*OS columns. Row (ki, w), column
 * j = (ob, os) holds input[ob + bg*OB, g*KI + ki, position(os, w)], 0 for
 * padding and holes. */
typedef struct ColBlock {
    int64_t c0, nc, k0, nk;
} ColBlock;

static void conv_im2col(const ConvPlan *p, size_t esz, const uint8_t *in, const int64_t *off,
                        const ColBlock *b, const OfRun *run, bool wmajor, uint8_t *col)
{
    for (int64_t r = 0; r < b->nk; r++) {
        int64_t kr = b->k0 + r;
        int64_t ki = wmajor ? kr % p->ki : kr / p->w, w = wmajor ? kr / p->ki : kr % p->w;
        const int64_t *offw = off + w * p->os;
        uint8_t *row = col + (size_t)(r * b->nc) * esz;
        int64_t ob = b->c0 / p->os, os = b->c0 % p->os;
        for (int64_t j = 0; j < b->nc; ob++, os = 0) {
            int64_t n = p->os - os < b->nc - j ? p->os - os : b->nc - j;
            gather_offsets(esz, conv_plane(p, esz, in, ob, run, ki), offw + os, n,
                           row + (size_t)j * esz);
            j += n;
        }
    }
}

/* The im2col matrix is kept near this many bytes; it is blocked by columns
 * and, when KI*W alone is too large (weight gradients have windows as big
 * as the image), by rows too, with at least CONV_MIN_COLS columns. */
#define CONV_COL_BYTES ((int64_t)8 << 20)
#define CONV_MIN_COLS 256

static void conv_blocks(const ConvPlan *p, size_t esz, int64_t *nb, int64_t *kc)
{
    int64_t budget = CONV_COL_BYTES / (int64_t)esz;   /* elements */
    int64_t n = p->kk > 0 ? budget / p->kk : p->ncol;
    if (n >= CONV_MIN_COLS || n >= p->ncol) {
        *nb = n < 1 ? 1 : n > p->ncol ? p->ncol : n;
        *kc = p->kk;
        return;
    }
    *nb = p->ncol < CONV_MIN_COLS ? p->ncol : CONV_MIN_COLS;
    *kc = budget / *nb;
}

/* The dense engine: out[OF, OB*OS] = Ker[OF, KI*W] x Col[KI*W, OB*OS], one
 * GEMM per column block, output-feature run and row block (row blocks
 * accumulate). */
static IrStatus conv_dense(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in,
                           const int64_t *off, uint8_t *outc)
{
    size_t esz = ct_size(c);
    KerMat km;
    IrStatus st = ker_matrix(k, c, p, &km);
    if (st != IR_OK)
        return st;
    int64_t nb, kc;
    conv_blocks(p, esz, &nb, &kc);
    uint8_t *col = scratch(kc * nb, esz);
    if (!col) {
        ts_free(km.owned);
        return oom(k);
    }
    Gemm g = {.c = c, .blas = use_blas(k), .ta = km.trans, .lda = km.lda, .ldc = p->ncol};
    for (int64_t c0 = 0; c0 < p->ncol; c0 += nb) {
        int64_t ncb = p->ncol - c0 < nb ? p->ncol - c0 : nb;
        OfRun run = {0};
        while (next_run(p, &run)) {
            int64_t k0 = 0;
            do { /* at least once: KI*W = 0 still zeroes the output */
                ColBlock b = {.c0 = c0, .nc = ncb, .k0 = k0, .nk = p->kk - k0 < kc ? p->kk - k0 : kc};
                conv_im2col(p, esz, in, off, &b, &run, km.wmajor, col);
                g.m = run.of1 - run.of0;
                g.n = g.ldb = ncb;
                g.k = b.nk;
                g.acc = k0 > 0;
                int64_t aoff = km.trans ? k0 * km.lda + run.of0 : run.of0 * km.lda + k0;
                gemm(&g, km.a + (size_t)aoff * esz, col, outc + (size_t)(run.of0 * p->ncol + c0) * esz);
                k0 += b.nk;
            } while (k0 < p->kk);
        }
    }
    ts_free(col);
    ts_free(km.owned);
    return IR_OK;
}

/* The taps of each output position: the window positions that read real
 * input (not padding or a hole), as CSR: taps of os are
 * w[start[os] .. start[os+1]) with input offsets off[...]. */
typedef struct ConvTaps {
    int64_t *start, *w, *off;
} ConvTaps;

static void taps_free(ConvTaps *t)
{
    ts_free(t->start);
    ts_free(t->w);
    ts_free(t->off);
}

static bool taps_new(const ConvPlan *p, const int64_t *off, int64_t nvalid, ConvTaps *t)
{
    t->start = scratch(p->os + 1, sizeof(int64_t));
    t->w = scratch(nvalid, sizeof(int64_t));
    t->off = scratch(nvalid, sizeof(int64_t));
    if (!t->start || !t->w || !t->off) {
        taps_free(t);
        return false;
    }
    int64_t e = 0;
    for (int64_t os = 0; os < p->os; os++) {
        t->start[os] = e;
        for (int64_t w = 0; w < p->w; w++)
            if (off[w * p->os + os] >= 0) {
                t->w[e] = w;
                t->off[e++] = off[w * p->os + os];
            }
    }
    t->start[p->os] = e;
    return true;
}

/* The sparse engine, one loop kernel per compute type: for each output
 * column (ob, os) and feature run, acc[m] = sum over the taps of os and
 * over ki of kerT[w][ki][of0 + m] * input(ki, tap), with kerT the kernel
 * as [W, KI, KO] so that the innermost loop runs over contiguous output
 * features. Work is proportional to the real taps only. */
#define CONV_SPARSE(NAME, T, ZERO, MAC)                                                  \
    static void NAME(const ConvPlan *p, const ConvTaps *t, const OfRun *r, const T *in,  \
                     const T *kert, T *acc, T *out)                                      \
    {                                                                                    \
        int64_t m = r->of1 - r->of0;                                                     \
        for (int64_t j = 0; j < p->ncol; j++) {                                          \
            int64_t ob = j / p->os, os = j % p->os;                                      \
            for (int64_t x = 0; x < m; x++)                                              \
                acc[x] = ZERO;                                                           \
            const T *plane = in + ((ob + r->bg * p->ob) * p->if_ + r->g * p->ki) * p->is; \
            for (int64_t e = t->start[os]; e < t->start[os + 1]; e++) {                  \
                const T *kw = kert + t->w[e] * p->ki * p->ko + r->of0;                   \
                for (int64_t ki = 0; ki < p->ki; ki++) {                                 \
                    T v = plane[ki * p->is + t->off[e]];                                 \
                    const T *kr = kw + ki * p->ko;                                       \
                    for (int64_t x = 0; x < m; x++)                                      \
                        MAC(acc[x], kr[x], v);                                           \
                }                                                                        \
            }                                                                            \
            for (int64_t x = 0; x < m; x++)                                              \
                out[(r->of0 + x) * p->ncol + j] = acc[x];                                \
        }                                                                                \
    }

CONV_SPARSE(sparse_f32, float, 0.0f, MAC_ADD)
CONV_SPARSE(sparse_f64, double, 0.0, MAC_ADD)
CONV_SPARSE(sparse_c64, float complex, 0.0f, MAC_ADD)
CONV_SPARSE(sparse_c128, double complex, 0.0, MAC_ADD)
CONV_SPARSE(sparse_int, uint64_t, 0u, MAC_ADD)
CONV_SPARSE(sparse_pred, uint8_t, 0u, MAC_OR)

static IrStatus conv_sparse(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in,
                            const int64_t *off, int64_t nvalid, uint8_t *outc)
{
    size_t esz = ct_size(c);
    ConvTaps t = {0};
    View v; /* kerT[w][ki][o] straight from the kernel operand */
    ker_view(k, &v, k->ins->a.x->conv.k_in_feature, k->ins->a.x->conv.k_out_feature, true);
    uint8_t *kert = scratch(view_elements(&v), esz), *acc = scratch(p->of, esz);
    if (!kert || !acc || !taps_new(p, off, nvalid, &t)) {
        ts_free(kert);
        ts_free(acc);
        return oom(k);
    }
    pack(c, k->opnd[1]->shape.type, k->opnd[1]->data, &v, kert);
    OfRun run = {0};
    while (next_run(p, &run)) {
        const void *x = in, *kt = kert;
        void *a = acc, *o = outc;
        switch (c) {
        case CT_F32: sparse_f32(p, &t, &run, x, kt, a, o); break;
        case CT_F64: sparse_f64(p, &t, &run, x, kt, a, o); break;
        case CT_C64: sparse_c64(p, &t, &run, x, kt, a, o); break;
        case CT_C128: sparse_c128(p, &t, &run, x, kt, a, o); break;
        case CT_INT: sparse_int(p, &t, &run, x, kt, a, o); break;
        case CT_PRED: sparse_pred(p, &t, &run, x, kt, a, o); break;
        }
    }
    taps_free(&t);
    ts_free(kert);
    ts_free(acc);
    return IR_OK;
}

/* conv_offsets' table with its count of real taps (*nvalid of *total):
 * NULL when out of memory. */
static int64_t *conv_taps(const DevKernelArgs *k, const ConvPlan *p, int64_t *nvalid, int64_t *total)
{
    int64_t *off = conv_offsets(k, p);
    *nvalid = 0;
    *total = p->w * p->os;
    for (int64_t i = 0; off && i < *total; i++)
        *nvalid += off[i] >= 0;
    return off;
}

/* Pick an engine. The im2col matrix has KI*W*OB*OS entries of which only
 * the fraction `density` of real taps is non-zero; base dilation (the
 * transposed convolutions of gradients) can make that tiny, e.g. 1/32.
 * Below 1/8 (1/2 without BLAS, whose GEMM loops are no faster than the
 * sparse loops) the sparse engine does the real taps only. */
static IrStatus conv_run(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in,
                         uint8_t *outc)
{
    int64_t nvalid, total;
    int64_t *off = conv_taps(k, p, &nvalid, &total);
    if (!off)
        return oom(k);
    bool blas = use_blas(k) && (c == CT_F32 || c == CT_F64);
    bool sparse = total > 0 && nvalid * (blas ? 8 : 2) < total;
    IrStatus st = sparse ? conv_sparse(k, c, p, in, off, nvalid, outc)
                         : conv_dense(k, c, p, in, off, outc);
    ts_free(off);
    return st;
}

/* Are (batch, spatial..., feature) the dims 0, 1..ns, ns+1: the feature
 * minor-most, the batch major (NHWC for 2-D, JAX's default layout)? */
static bool channels_last(int64_t batch, int64_t feature, const int64_t *sp, int32_t ns)
{
    return batch == 0 && feature == ns + 1 && spatial_at(sp, ns, 1);
}

/* Rows [j0, j0 + n) of the channels-last im2col matrix Col[OB*OS, W*KI]:
 * row (ob, os) is, for each window position w, the KI features of the
 * input at that tap (contiguous in [IB, IS..., IF]), or zeros for padding
 * and holes. */
static void nhwc_im2col(const ConvPlan *p, size_t esz, const uint8_t *in, const int64_t *off, int64_t j0,
                        int64_t n, uint8_t *col)
{
    size_t run = (size_t)p->ki * esz, rowb = (size_t)p->w * run;
    for (int64_t j = 0; j < n; j++) {
        int64_t ob = (j0 + j) / p->os, os = (j0 + j) % p->os;
        const uint8_t *plane = in + (size_t)(ob * p->is) * run;
        uint8_t *row = col + (size_t)j * rowb;
        for (int64_t w = 0; w < p->w; w++) {
            int64_t o = off[w * p->os + os];
            if (o < 0)
                memset(row + (size_t)w * run, 0, run);
            else
                memcpy(row + (size_t)w * run, plane + (size_t)o * run, run);
        }
    }
}

/* The channels-last engine: input [IB, IS..., IF] and output [OB, OS...,
 * OF] in the compute type, no feature or batch groups, f32/f64 with BLAS.
 *     out[OB*OS, KO] = Col[OB*OS, W*KI] x Ker[W*KI, KO]
 * so im2col copies runs of KI contiguous features and the GEMM writes the
 * output's own layout: nothing packed on the way in, nothing transposed on
 * the way out (the general engine makes both [.., F, S] and back). The
 * kernel is read in place when it is [S..., I, O] (HWIO) unreversed, else
 * packed so. Col is blocked by rows near CONV_COL_BYTES. *taken is false
 * (nothing done) where the sparse engine should run instead (conv_run's
 * rule) or a row of Col alone is too large to block well. */
static IrStatus conv_nhwc(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, uint8_t *outp,
                          bool *taken)
{
    *taken = false;
    size_t esz = ct_size(c);
    int64_t nr = CONV_COL_BYTES / (int64_t)esz / p->kk;
    if (nr < CONV_MIN_COLS / 4 && nr < p->ncol)
        return IR_OK;
    int64_t nvalid, total;
    int64_t *off = conv_taps(k, p, &nvalid, &total);
    if (!off)
        return oom(k);
    if (nvalid * 8 < total) {
        ts_free(off);
        return IR_OK;
    }
    *taken = true;
    const IrConvDnums *cd = &k->ins->a.x->conv;
    const uint8_t *ker = data_of(k->opnd[1]);
    uint8_t *ker_own = NULL;
    if (!(ct_native(c, k->opnd[1]->shape.type) && !reversed(k, p) && cd->k_in_feature == p->ns &&
          cd->k_out_feature == p->ns + 1 && spatial_at(cd->k_spatial, p->ns, 0))) {
        View v; /* [W, KI, KO] */
        ker_view(k, &v, cd->k_in_feature, cd->k_out_feature, true);
        if (!(ker_own = scratch(view_elements(&v), esz))) {
            ts_free(off);
            return oom(k);
        }
        pack(c, k->opnd[1]->shape.type, k->opnd[1]->data, &v, ker_own);
        ker = ker_own;
    }
    if (nr > p->ncol)
        nr = p->ncol;
    uint8_t *col = scratch(nr * p->kk, esz);
    if (!col) {
        ts_free(off);
        ts_free(ker_own);
        return oom(k);
    }
    Gemm g = {.c = c, .blas = true, .n = p->ko, .k = p->kk, .lda = p->kk, .ldb = p->ko, .ldc = p->ko};
    for (int64_t j0 = 0; j0 < p->ncol; j0 += nr) {
        g.m = p->ncol - j0 < nr ? p->ncol - j0 : nr;
        nhwc_im2col(p, esz, in, off, j0, g.m, col);
        gemm(&g, col, ker, outp + (size_t)(j0 * p->ko) * esz);
    }
    ts_free(col);
    ts_free(ker_own);
    ts_free(off);
    return IR_OK;
}

/* View of s with dims in order (d0, d1, sp...); true when that order is the
 * identity, i.e. the view is s's own row-major layout. */
static bool canon_view(View *v, const IrShape *s, int64_t d0, int64_t d1, int32_t ns,
                       const int64_t *sp)
{
    int64_t order[IR_MAX_RANK];
    order[0] = d0;
    order[1] = d1;
    if (ns > 0)
        memcpy(order + 2, sp, (size_t)ns * sizeof *order);
    view_of(v, s, ns + 2, order);
    bool ident = true;
    for (int32_t i = 0; i < ns + 2; i++)
        ident = ident && order[i] == i;
    return ident;
}

/*
 * convolution, as XLA defines it (HloEvaluator's rule).
 *
 * For output (ob, of, os...): feature group g = of / (KO/fgc), batch group
 * bg = of / (KO/bgc) (0 when bgc = 1), and
 *   out[ob, of, os] = sum over ki < KI and window position w of
 *       in[ob + bg*OB, g*KI + ki, pos(os, w)] * ker[of, ki, w']
 * where pos() applies stride, padding (negative too) and lhs/rhs dilation per
 * spatial dim (conv_coord; padding and holes contribute 0) and w' is w or,
 * with window reversal, size-1-w. With no spatial dims this is a matmul.
 *
 * Example (1-D, no groups): in [1,1,4] = {1,2,3,4}, ker [1,1,2] = {1,10},
 * stride 1, no padding: out = {1+20, 2+30, 3+40} = {21, 32, 43}.
 *
 * The input is brought to [IB, IF, IS] in the compute type (in place when
 * it already is), and the result is computed as [OF, OB*OS], then
 * transposed into the output's dim_labels order and rounded to its element
 * type. Two engines (conv_run picks by the share of real taps):
 *   dense:  im2col + GEMM, out = Ker[OF, KI*W] x Col[KI*W, OB*OS], blocked
 *           by columns and rows (OpenBLAS for f32/f64);
 *   sparse: loops over the real taps only, for heavily base-dilated convs.
 * Channels-last convolutions (input and output [B, S..., F], no groups,
 * f32/f64 with BLAS) where the dense engine would run skip both layout
 * changes: conv_nhwc.
 *
 * Inputs: two array operands. On success *out is a new array. Fails with
 * IR_EINPUT on inconsistent dimension numbers or sizes, IR_ENOMEM on OOM.
 */
IrStatus dev_k_convolution(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2 || !is_array_value(k->opnd[0]) || !is_array_value(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "convolution takes two arrays");
    ConvPlan p = {0};
    IrStatus st = conv_plan(k, &p);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->ins->shape;
    const IrConvDnums *cd = &k->ins->a.x->conv;
    Ct c = ct_of(os->type);
    DevValue *r = dev_value_new_uninit(os);
    if (!r)
        return oom(k);
    if (ir_shape_elements(os) == 0) {
        *out = r;
        return IR_OK;
    }
    const DevValue *iv = k->opnd[0];
    if (p.fgc == 1 && p.bgc == 1 && p.kk > 0 && use_blas(k) && (c == CT_F32 || c == CT_F64) &&
        ct_native(c, iv->shape.type) && ct_native(c, os->type) &&
        channels_last(cd->in_batch, cd->in_feature, cd->in_spatial, p.ns) &&
        channels_last(cd->out_batch, cd->out_feature, cd->out_spatial, p.ns)) {
        bool taken = false;
        st = conv_nhwc(k, c, &p, data_of(iv), r->data, &taken);
        if (st != IR_OK || taken) {
            if (st != IR_OK)
                dev_value_unref(r);
            else
                *out = r;
            return st;
        }
    }
    View vi, vo;
    bool in_direct = canon_view(&vi, &iv->shape, cd->in_batch, cd->in_feature, p.ns, cd->in_spatial) &&
                     ct_native(c, iv->shape.type);
    bool out_direct = canon_view(&vo, os, cd->out_feature, cd->out_batch, p.ns, cd->out_spatial) &&
                      ct_native(c, os->type);
    const uint8_t *in = data_of(iv);
    uint8_t *in_own = NULL, *out_own = NULL;
    if (!in_direct) {
        if (!(in_own = scratch(view_elements(&vi), ct_size(c)))) {
            st = oom(k);
            goto done;
        }
        pack(c, iv->shape.type, iv->data, &vi, in_own);
        in = in_own;
    }
    if (!out_direct && !(out_own = scratch(ir_shape_elements(os), ct_size(c)))) {
        st = oom(k);
        goto done;
    }
    if ((st = conv_run(k, c, &p, in, out_direct ? r->data : out_own)) != IR_OK)
        goto done;
    if (!out_direct)
        unpack(c, os->type, out_own, &vo, r->data);
done:
    ts_free(in_own);
    ts_free(out_own);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}
