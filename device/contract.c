/*
 * contract.c: what dot (k_dot.c) and convolution (k_conv.c) share: compute
 * types and conversions, strided views packed into and out of them, and
 * the GEMM (contract.h says which types go where).
 */
#include "contract.h"

#include "blas.h"

#include <complex.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ */
/* Compute types and conversions                                       */
/* ------------------------------------------------------------------ */

Ct ct_of(IrType t)
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

size_t ct_size(Ct c)
{
    static const size_t size[] = {4, 8, 8, 16, 8, 1};
    return size[c];
}

/* True when elements of type t already are compute-type c values. */
bool ct_native(Ct c, IrType t)
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

/* The view of array shape s with its dims visited in order `order`
 * (order[k] = which dim of s is the k-th of the view). */
void ct_view_of(CtView *v, const IrShape *s, int32_t n, const int64_t *order)
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

int64_t ct_view_elements(const CtView *v)
{
    int64_t n = 1;
    for (int32_t k = 0; k < v->rank; k++)
        n *= v->dims[k];
    return n;
}

/* Advance the odometer idx over all but the last dim of v; off follows. */
static void ct_view_bump(const CtView *v, int64_t *idx, int64_t *off)
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
void ct_pack(Ct c, IrType t, const uint8_t *src, const CtView *v, uint8_t *dst)
{
    int64_t total = ct_view_elements(v);
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
        ct_view_bump(v, idx, &off);
    }
}

/* Scatter consecutive compute-type values from src into the elements of
 * view v of dst (type t), converting: the inverse of ct_pack. */
void ct_unpack(Ct c, IrType t, const uint8_t *src, const CtView *v, uint8_t *dst)
{
    int64_t total = ct_view_elements(v);
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
        ct_view_bump(v, idx, &off);
    }
}

/* ------------------------------------------------------------------ */
/* GEMM                                                                */
/* ------------------------------------------------------------------ */

/* One loop kernel per compute type: for each C element, sum over k in
 * increasing order. Without tb the k loop is outside the j loop so that B
 * and C rows are read contiguously; the per-element order is the same. */
#define GEMM_LOOP(NAME, T, ZERO, MAC)                                              \
    static void NAME(const CtGemm *g, const T *a, const T *b, T *c)                 \
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

static bool gemm_blas_ok(const CtGemm *g)
{
    return g->blas && (g->c == CT_F32 || g->c == CT_F64) && fits_int(g->m) && fits_int(g->n) &&
           fits_int(g->k) && fits_int(g->lda) && fits_int(g->ldb) && fits_int(g->ldc) &&
           g->lda >= 1 && g->ldb >= 1 && g->ldc >= 1;
}

bool ct_gemm_own_kernel(const CtGemm *g, int64_t macs)
{
    const DevBlas *bl = g->c == CT_F32 && gemm_blas_ok(g) ? dev_blas() : NULL;
    return bl && dev_sgemm_avx512_is(dev_blas_sgemm_for(g->exact ? dev_blas_sgemm_exact() : bl->sgemm, macs));
}

void ct_gemm(const CtGemm *g, const void *a, const void *b, void *c)
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
        SgemmFn *sgemm = g->exact ? dev_blas_sgemm_exact() : bl->sgemm;
        if (g->c == CT_F32)
            sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, 1.0f, a, (int)g->lda, b, (int)g->ldb,
                  g->acc ? 1.0f : 0.0f, c, (int)g->ldc);
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

bool ct_use_blas(const DevKernelArgs *k)
{
    return !(k->opt && k->opt->no_blas);
}

bool ct_exact(const DevKernelArgs *k)
{
    /* "{highest,default}" as written: XLA prints lower case, accepts any */
    for (const char *p = k->ins ? k->ins->a.precision_config : NULL; p && *p; p++)
        if (strncasecmp(p, "highest", 7) == 0)
            return true;
    return false;
}

/* a * b into *r; false on overflow or a negative operand. */
bool ct_mul_ok(int64_t a, int64_t b, int64_t *r)
{
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, r);
}

/* A scratch buffer of n elements of esz bytes; NULL on overflow or OOM.
 * Never NULL for n == 0 (ts_malloc(0) is unique and non-NULL). */
void *ct_scratch(int64_t n, size_t esz)
{
    int64_t bytes;
    if (!ct_mul_ok(n, (int64_t)esz, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return NULL;
    return ts_malloc((size_t)bytes);
}

/* Stands in for the NULL buffer of an empty array, so that offset
 * arithmetic on it stays defined; never read. */
static const uint8_t empty_data[16];

const uint8_t *ct_data_of(const DevValue *v)
{
    return v->data ? v->data : empty_data;
}
