/*
 * k_conv.c: convolution, as im2col + GEMM in the compute type of the result
 * (contract.h); see the comment above dev_k_convolution for the engines.
 */
#include "contract.h"

#include <complex.h>
#include <string.h>
#include <unistd.h>

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
        if (!ct_mul_ok(p->is, p->isz[s], &p->is) || !ct_mul_ok(p->w, p->wsz[s], &p->w) ||
            !ct_mul_ok(p->os, p->osz[s], &p->os))
            return dev_kernel_error(k, IR_EINPUT, "convolution: size overflow");
    }
    if (!ct_mul_ok(p->ki, p->w, &p->kk) || !ct_mul_ok(p->ob, p->os, &p->ncol))
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
    if (!ct_mul_ok(p->w, p->os, &n))
        return NULL;
    int64_t *off = ct_scratch(n, sizeof *off);
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
static void ker_view(const DevKernelArgs *k, CtView *v, int64_t d0, int64_t d1, bool spatial_first)
{
    const IrConvDnums *cd = &k->ins->a.x->conv;
    int32_t ns = cd->nspatial, sp0 = spatial_first ? 0 : 2;
    int64_t order[IR_MAX_RANK];
    order[spatial_first ? ns : 0] = d0;
    order[spatial_first ? ns + 1 : 1] = d1;
    for (int32_t s = 0; s < ns; s++)
        order[sp0 + s] = cd->k_spatial[s];
    ct_view_of(v, &k->opnd[1]->shape, ns + 2, order);
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
        km->a = ct_data_of(kv);
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
    CtView v;
    ker_view(k, &v, o, i, false);
    if (!(km->owned = ct_scratch(ct_view_elements(&v), ct_size(c))))
        return dev_kernel_oom(k, NULL);
    ct_pack(c, kv->shape.type, kv->data, &v, km->owned);
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

/* The general engine's im2col matrix is kept near this many bytes; it is
 * blocked by columns and, when KI*W alone is too large (weight gradients
 * have windows as big as the image), by rows too, with at least
 * CONV_MIN_COLS columns. The channels-last engines leave to it the
 * convolutions whose CONV_MIN_COLS / 4 rows of Col would exceed it. */
#define CONV_COL_BYTES ((int64_t)8 << 20)
#define CONV_MIN_COLS 256

/* The channels-last engines build their im2col matrix a block of rows at
 * a time, each multiplied while it is still in the core's L2 cache: near
 * the L2's size (the system's figure; 1 MiB where it gives none), within
 * [512 KiB, CONV_COL_BYTES], and at least CONV_MIN_COLS / 4 rows. The
 * 8 MiB blocks of before went to L3 and back: measured here (1 MiB of L2
 * a core; BENCHMARKS.md, conv34) the net's convolutions took BLOCK_GAIN
 * of their CPU time with 1 MiB blocks. */
static int64_t block_rows(size_t esz, int64_t row_len, int64_t nrows)
{
    static int64_t bytes;
    int64_t b = __atomic_load_n(&bytes, __ATOMIC_RELAXED);
    if (b == 0) {
        long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
        l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
        b = l2 > 0 ? (int64_t)l2 : (int64_t)1 << 20;
        b = b < (512 << 10) ? 512 << 10 : b > CONV_COL_BYTES ? CONV_COL_BYTES : b;
        __atomic_store_n(&bytes, b, __ATOMIC_RELAXED);
    }
    int64_t r = b / (int64_t)esz / (row_len > 0 ? row_len : 1);
    r = r < CONV_MIN_COLS / 4 ? CONV_MIN_COLS / 4 : r;
    return r < nrows ? r : nrows;
}

/* The sparse engine runs where fewer than 1 in CONV_SPARSE_BELOW of the
 * im2col entries are real taps (with BLAS). Measured (BENCHMARKS.md,
 * conv34): f32[16,64,S,S] NCHW base-dilated into [16,32,32,32] by a 3x3
 * window, CPU time of the sparse engine over the dense one's: 0.96 at
 * density 1/4 (dilation 2x2), 0.57 at 1/6 (2x3), 0.54 at 1/9 (3x3). The
 * channels-last engines, whose dense products skip the packing both
 * general engines pay, leave a convolution to the sparse one below 1/8
 * (CONV_NHWC_SPARSE_BELOW; not measured) where they cannot phase it. */
#define CONV_SPARSE_BELOW 4
#define CONV_NHWC_SPARSE_BELOW 8

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
    uint8_t *col = ct_scratch(kc * nb, esz);
    if (!col) {
        ts_free(km.owned);
        return dev_kernel_oom(k, NULL);
    }
    CtGemm g = {.c = c, .blas = ct_use_blas(k), .exact = ct_exact(k), .ta = km.trans, .lda = km.lda, .ldc = p->ncol};
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
                ct_gemm(&g, km.a + (size_t)aoff * esz, col, outc + (size_t)(run.of0 * p->ncol + c0) * esz);
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
    t->start = ct_scratch(p->os + 1, sizeof(int64_t));
    t->w = ct_scratch(nvalid, sizeof(int64_t));
    t->off = ct_scratch(nvalid, sizeof(int64_t));
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
    CtView v; /* kerT[w][ki][o] straight from the kernel operand */
    ker_view(k, &v, k->ins->a.x->conv.k_in_feature, k->ins->a.x->conv.k_out_feature, true);
    uint8_t *kert = ct_scratch(ct_view_elements(&v), esz), *acc = ct_scratch(p->of, esz);
    if (!kert || !acc || !taps_new(p, off, nvalid, &t)) {
        ts_free(kert);
        ts_free(acc);
        return dev_kernel_oom(k, NULL);
    }
    ct_pack(c, k->opnd[1]->shape.type, k->opnd[1]->data, &v, kert);
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
 * Below 1/CONV_SPARSE_BELOW (1/2 without BLAS, whose GEMM loops are no
 * faster than the sparse loops) the sparse engine does the real taps
 * only. */
static IrStatus conv_run(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in,
                         uint8_t *outc)
{
    int64_t nvalid, total;
    int64_t *off = conv_taps(k, p, &nvalid, &total);
    if (!off)
        return dev_kernel_oom(k, NULL);
    bool blas = ct_use_blas(k) && (c == CT_F32 || c == CT_F64);
    bool sparse = total > 0 && nvalid * (blas ? CONV_SPARSE_BELOW : 2) < total;
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

/* n runs of `run` bytes into dst: run t is the one at offset off[t * ostr]
 * (in runs) of plane, or zeros where that offset is negative (padding,
 * holes). Runs that lie next to each other in the input, and holes next
 * to holes, are one memcpy or memset: a stride-1 3x3 window's row of taps
 * over 3 channels is one copy of 36 bytes rather than three of 12. */
static void copy_runs(const uint8_t *plane, const int64_t *off, int64_t ostr, int64_t n, size_t run,
                      uint8_t *dst)
{
    for (int64_t t = 0, e; t < n; t = e) {
        int64_t o = off[t * ostr];
        if (o < 0) {
            for (e = t + 1; e < n && off[e * ostr] < 0; e++)
                ;
            memset(dst + (size_t)t * run, 0, (size_t)(e - t) * run);
        } else {
            for (e = t + 1; e < n && off[e * ostr] == o + (e - t); e++)
                ;
            memcpy(dst + (size_t)t * run, plane + (size_t)o * run, (size_t)(e - t) * run);
        }
    }
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
        copy_runs(in + (size_t)(ob * p->is) * run, off + os, p->os, p->w, run, col + (size_t)j * rowb);
    }
}

/* The phases of a base-dilated (transposed) channels-last convolution:
 * with lhs dilation d in a spatial dim, whether window position w reads
 * an input or a hole depends only on the output coordinate's phase
 * (o*stride - pad_lo) mod d, so the output positions fall into at most
 * prod d classes, each of which reads a fixed subset of the taps. Per
 * class q: out rows of q = Col_q[rows, T_q*KI] x Ker_q[T_q*KI, KO], with
 * Ker_q the kernel blocks of q's taps; the GEMMs skip the holes the dense
 * im2col would multiply (3/4 of them for the stride-2 input gradient).
 * Rows of one class are computed into a buffer and copied to their places
 * in the output. phase[os] is the class of output position os. */
typedef struct Phases {
    int64_t n;            /* classes */
    int64_t *phase;       /* [OS] */
    int64_t *taps;        /* [n][W]: q's taps, ntaps[q] of them */
    int64_t *ntaps;       /* [n] */
} Phases;

#define CONV_MAX_PHASES 64

static void phases_free(Phases *ph)
{
    ts_free(ph->phase);
    ts_free(ph->taps);
    ts_free(ph->ntaps);
}

/* Fill ph; false when out of memory, or with one class (no base
 * dilation) or too many. */
static bool phases_new(const DevKernelArgs *k, const ConvPlan *p, Phases *ph)
{
    const IrWindowDim *wd = k->ins->a.x->window.dim;
    memset(ph, 0, sizeof *ph);
    ph->n = 1;
    for (int32_t s = 0; s < p->ns; s++)
        if ((ph->n *= wd[s].lhs_dilate) > CONV_MAX_PHASES)
            return false;
    if (ph->n == 1) /* no base dilation: the dense engine */
        return false;
    ph->phase = ct_scratch(p->os, sizeof(int64_t));
    ph->taps = ct_scratch(ph->n * p->w, sizeof(int64_t));
    ph->ntaps = ct_scratch(ph->n, sizeof(int64_t));
    if (!ph->phase || !ph->taps || !ph->ntaps) {
        phases_free(ph);
        return false;
    }
    int64_t oi[IR_MAX_RANK] = {0};
    for (int64_t os = 0; os < p->os; os++) {
        int64_t q = 0;
        for (int32_t s = 0; s < p->ns; s++) {
            int64_t d = wd[s].lhs_dilate, r = (oi[s] * wd[s].stride - wd[s].pad_lo) % d;
            q = q * d + (r < 0 ? r + d : r);
        }
        ph->phase[os] = q;
        for (int32_t s = p->ns - 1; s >= 0 && ++oi[s] == p->osz[s]; s--)
            oi[s] = 0;
    }
    for (int64_t q = 0; q < ph->n; q++) {
        int64_t phs[IR_MAX_RANK], rem = q, wi[IR_MAX_RANK] = {0};
        for (int32_t s = p->ns - 1; s >= 0; s--) {
            phs[s] = rem % wd[s].lhs_dilate;
            rem /= wd[s].lhs_dilate;
        }
        ph->ntaps[q] = 0;
        for (int64_t w = 0; w < p->w; w++) {
            bool real = true;
            for (int32_t s = 0; s < p->ns; s++)
                real = real && (phs[s] + wi[s] * wd[s].rhs_dilate) % wd[s].lhs_dilate == 0;
            if (real)
                ph->taps[q * p->w + ph->ntaps[q]++] = w;
            for (int32_t s = p->ns - 1; s >= 0 && ++wi[s] == p->wsz[s]; s--)
                wi[s] = 0;
        }
    }
    return true;
}

/* conv_nhwc by phases (above); ker is [W, KI, KO]. */
static IrStatus nhwc_phases(const DevKernelArgs *k, Ct c, const ConvPlan *p, const Phases *ph,
                            const uint8_t *in, const uint8_t *ker, const int64_t *off, uint8_t *outp)
{
    size_t esz = ct_size(c), run = (size_t)p->ki * esz, orow = (size_t)p->ko * esz;
    int64_t nr = block_rows(esz, p->kk, p->ncol);
    uint8_t *kq = ct_scratch(p->kk * p->ko, esz), *col = ct_scratch(nr * p->kk, esz),
            *res = ct_scratch(nr * p->ko, esz);
    int64_t *rows = ct_scratch(nr, sizeof(int64_t)), *members = ct_scratch(p->os, sizeof(int64_t)),
            *offq = ct_scratch(p->w * p->os, sizeof(int64_t));
    IrStatus st = IR_OK;
    if (!kq || !col || !res || !rows || !members || !offq) {
        st = dev_kernel_oom(k, NULL);
        goto done;
    }
    for (int64_t q = 0; q < ph->n; q++) {
        const int64_t *tq = ph->taps + q * p->w;
        int64_t nt = ph->ntaps[q], nm = 0;
        size_t blk = (size_t)(p->ki * p->ko) * esz;
        for (int64_t t = 0; t < nt; t++)
            memcpy(kq + (size_t)t * blk, ker + (size_t)tq[t] * blk, blk);
        /* q's output positions, and their taps' offsets [os][t]. */
        for (int64_t os = 0; os < p->os; os++)
            if (ph->phase[os] == q) {
                for (int64_t t = 0; t < nt; t++)
                    offq[nm * nt + t] = off[tq[t] * p->os + os];
                members[nm++] = os;
            }
        CtGemm g = {.c = c, .blas = true, .exact = ct_exact(k), .n = p->ko, .k = nt * p->ki, .lda = nt * p->ki,
                    .ldb = p->ko, .ldc = p->ko};
        for (int64_t e = 0; e < p->ob * nm;) { /* rows (ob, members[i]) at e = ob*nm + i */
            int64_t m = p->ob * nm - e < nr ? p->ob * nm - e : nr;
            for (int64_t r = 0; r < m; r++, e++) {
                int64_t ob = e / nm, i = e % nm;
                rows[r] = ob * p->os + members[i];
                copy_runs(in + (size_t)(ob * p->is) * run, offq + i * nt, 1, nt, run,
                          col + (size_t)(r * nt) * run);
            }
            g.m = m;
            ct_gemm(&g, col, kq, res); /* k = 0 (no real tap) zeroes res */
            for (int64_t r = 0; r < m; r++)
                memcpy(outp + (size_t)rows[r] * orow, res + (size_t)r * orow, orow);
        }
    }
done:
    ts_free(kq);
    ts_free(col);
    ts_free(res);
    ts_free(rows);
    ts_free(members);
    ts_free(offq);
    return st;
}

/* The kernel as [W, KI, KO] (HWIO) in the compute type: in place when it
 * is so, unreversed, else packed into *own; false when out of memory. */
static bool nhwc_ker(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t **ker, uint8_t **own)
{
    const IrConvDnums *cd = &k->ins->a.x->conv;
    *ker = ct_data_of(k->opnd[1]);
    *own = NULL;
    if (ct_native(c, k->opnd[1]->shape.type) && !reversed(k, p) && cd->k_in_feature == p->ns &&
        cd->k_out_feature == p->ns + 1 && spatial_at(cd->k_spatial, p->ns, 0))
        return true;
    CtView v;
    ker_view(k, &v, cd->k_in_feature, cd->k_out_feature, true);
    if (!(*own = ct_scratch(ct_view_elements(&v), ct_size(c))))
        return false;
    ct_pack(c, k->opnd[1]->shape.type, k->opnd[1]->data, &v, *own);
    *ker = *own;
    return true;
}

/* ---- few channels: direct tiles (AVX-512 or AVX2) ----
 *
 * With few input channels (an image's 3) the rows of the channels-last
 * im2col matrix are short: the net's first convolution is the GEMM
 * [B*S, 27] x [27, 32] and its weight gradient [27, B*S] x [B*S, 32], in
 * which OpenBLAS packs, zeroes and the engine copies more than they
 * multiply (0.8 and 1.3 ms a call for 28 MFLOP each; the 151-MFLOP
 * convolutions of the net take 2-2.5). For 2-D ones the input is copied
 * once with its padding into P[B, PH, PW, C], after which every tap is in
 * place: with stride 1 and no dilation the taps (wx, c) of output pixel ox
 * in image row oy + wy are the W1*C floats at P[b, oy + wy, ox] (rows of
 * the im2col matrix overlap, C floats apart). A tile keeps its sums in
 * registers, ni rows by 32 output features, and adds a * b over three
 * nested loops of steps, a the ni floats sa apart, b 32 consecutive
 * features:
 *   forward   rows: 8 output pixels (sa = stride * C), steps (wy, wx, c),
 *             b the kernel's row (wy, wx, c) of [W, C, KO] (HWIO); any
 *             channel count up to DIRECT_KK taps, stride and rhs dilation;
 *   gradient  rows: the filter's (ox, c) of one oy, j < OS1*C (sa = 1),
 *             steps (f, wy, wx) over the image, b the output gradient at
 *             (f, wy, wx).
 * Each sum is taken in a fixed order of its terms, whatever the batch. */
#define SMALL_KI 4       /* weight gradients: input channels at most */
#define SMALL_ROWS 12    /* a tile's rows at most (24 vector sums) */
#define SMALL_FWD_ROWS 8
/* The forward tiles take convolutions of any channel count up to this
 * many taps (W*KI): a tile's kernel columns, 32 features by W*KI, stay
 * within 64 KiB (in L2) as it streams them. Measured on the net's
 * stride-2 convolution (3x3x32 -> 64, one device's shapes): 1.98 ms a
 * call by im2col + sgemm, 1.64 by tiles; larger K not measured. */
#define DIRECT_KK 512
/* In the AVX2 form, up to this many: it reads the kernel's columns in two
 * halves of 16 features, each streamed again for every part of a tile's
 * rows. Measured on the AMD Zen 3 machine (BENCHMARKS.md, "Stop 51"), ms a
 * call against im2col + sgemm: the net's first convolution (27 taps)
 * 0.76-0.80 against 1.06-1.35, the stride-2 one (288 taps) 3.24 against
 * 3.06. */
#define DIRECT_KK_AVX2 128

typedef struct SmallTile {
    const float *a, *b;
    int64_t sa;
    int64_t n1, as1, bs1, n2, as2, bs2, n3, as3, bs3;
    uint16_t m0, m1;     /* the features of this tile: masks of the two vectors */
    float *c;
    int64_t ldc, nc;     /* rows c[i * ldc] stored, i < nc */
} SmallTile;

/* Which form of the tiles runs: none (the GEMM engines instead), the
 * AVX-512 one (16 lanes: a tile's 32 features are two vectors), or the
 * AVX2 one (8 lanes, 16 registers: a tile is cut into parts of 16
 * features by up to 6 rows, 12 sums in registers, as AVX2 GEMM kernels
 * cut theirs). Both add each sum's terms in the same order with the same
 * fused multiply-adds, so both give the same bits. */
typedef enum { SMALL_NONE, SMALL_AVX2, SMALL_AVX512 } SmallIsa;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

static SmallIsa small_isa(const DevKernelArgs *k)
{
    if (__builtin_cpu_supports("avx512f") && !(k->opt && k->opt->no_avx512))
        return SMALL_AVX512;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? SMALL_AVX2 : SMALL_NONE;
}

#define SMALL_T __attribute__((target("avx512f")))

SMALL_T static inline __attribute__((always_inline)) void small_tile(int ni, const SmallTile *t)
{
    __m512 acc[SMALL_ROWS][2];
#pragma GCC unroll 12
    for (int i = 0; i < ni; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t i1 = 0; i1 < t->n1; i1++)
        for (int64_t i2 = 0; i2 < t->n2; i2++) {
            const float *a = t->a + i1 * t->as1 + i2 * t->as2, *b = t->b + i1 * t->bs1 + i2 * t->bs2;
            for (int64_t i3 = 0; i3 < t->n3; i3++, a += t->as3, b += t->bs3) {
                __m512 b0 = _mm512_maskz_loadu_ps(t->m0, b), b1 = _mm512_maskz_loadu_ps(t->m1, b + 16);
#pragma GCC unroll 12
                for (int i = 0; i < ni; i++) {
                    __m512 x = _mm512_set1_ps(a[i * t->sa]);
                    acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
                }
            }
        }
#pragma GCC unroll 12
    for (int i = 0; i < ni; i++)
        if (i < t->nc) {
            _mm512_mask_storeu_ps(t->c + i * t->ldc, t->m0, acc[i][0]);
            _mm512_mask_storeu_ps(t->c + i * t->ldc + 16, t->m1, acc[i][1]);
        }
}

#define SMALL_TILE(N)                                   \
    SMALL_T static void small_tile_##N(const SmallTile *t) \
    {                                                   \
        small_tile(N, t);                               \
    }
SMALL_TILE(1)
SMALL_TILE(2)
SMALL_TILE(3)
SMALL_TILE(4)
SMALL_TILE(5)
SMALL_TILE(6)
SMALL_TILE(7)
SMALL_TILE(8)
SMALL_TILE(9)
SMALL_TILE(10)
SMALL_TILE(11)
SMALL_TILE(12)

/* ---- the AVX2 form: parts of 16 features by up to SMALL2_ROWS rows ---- */
#define SMALL2_ROWS 6
#define SMALL2_T __attribute__((target("avx2,fma")))

/* The lanes of an 8-bit mask of features, as maskload wants them (a
 * lane's sign bit set where its feature is). */
SMALL2_T static inline __m256i small2_lanes(unsigned m)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), bit), bit);
}

/* Rows [0, ni) of the part: a, b and c already at its first row and
 * feature, k0 and k1 its two vectors' lanes; rows below nc stored. */
SMALL2_T static inline __attribute__((always_inline)) void small2_tile(int ni, const SmallTile *t, const float *a0,
                                                                      const float *b0, float *c, int64_t nc,
                                                                      __m256i k0, __m256i k1)
{
    __m256 acc[SMALL2_ROWS][2];
#pragma GCC unroll 6
    for (int i = 0; i < ni; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t i1 = 0; i1 < t->n1; i1++)
        for (int64_t i2 = 0; i2 < t->n2; i2++) {
            const float *a = a0 + i1 * t->as1 + i2 * t->as2, *b = b0 + i1 * t->bs1 + i2 * t->bs2;
            for (int64_t i3 = 0; i3 < t->n3; i3++, a += t->as3, b += t->bs3) {
                __m256 v0 = _mm256_maskload_ps(b, k0), v1 = _mm256_maskload_ps(b + 8, k1);
#pragma GCC unroll 6
                for (int i = 0; i < ni; i++) {
                    __m256 x = _mm256_broadcast_ss(a + i * t->sa);
                    acc[i][0] = _mm256_fmadd_ps(x, v0, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(x, v1, acc[i][1]);
                }
            }
        }
#pragma GCC unroll 6
    for (int i = 0; i < ni; i++)
        if (i < nc) {
            _mm256_maskstore_ps(c + i * t->ldc, k0, acc[i][0]);
            _mm256_maskstore_ps(c + i * t->ldc + 8, k1, acc[i][1]);
        }
}

#define SMALL2_TILE(N)                                                                                     \
    SMALL2_T static void small2_tile_##N(const SmallTile *t, const float *a, const float *b, float *c,   \
                                         int64_t nc, __m256i k0, __m256i k1)                              \
    {                                                                                                      \
        small2_tile(N, t, a, b, c, nc, k0, k1);                                                            \
    }
SMALL2_TILE(1)
SMALL2_TILE(2)
SMALL2_TILE(3)
SMALL2_TILE(4)
SMALL2_TILE(5)
SMALL2_TILE(6)

/* Tile t (ni rows by 32 features) as parts: each half of its features
 * that has any, by groups of up to SMALL2_ROWS of the rows stored, as
 * even as they come (8 rows as 4 and 4: a part of 2 rows would keep 4
 * sums, fewer than the FMA pipes' latency needs to stay busy). */
SMALL2_T static void small2_run(int ni, const SmallTile *t)
{
    static void (*const fn[SMALL2_ROWS + 1])(const SmallTile *, const float *, const float *, float *, int64_t,
                                             __m256i, __m256i) = {
        NULL, small2_tile_1, small2_tile_2, small2_tile_3, small2_tile_4, small2_tile_5, small2_tile_6};
    int64_t rows = t->nc < ni ? t->nc : ni, parts = (rows + SMALL2_ROWS - 1) / SMALL2_ROWS;
    for (int h = 0; h < 2; h++) {
        unsigned m = h ? t->m1 : t->m0;
        if (!m)
            continue;
        __m256i k0 = small2_lanes(m & 0xff), k1 = small2_lanes(m >> 8);
        for (int64_t p = 0, i0 = 0; p < parts; p++) {
            int n = (int)((rows - i0 + (parts - p) - 1) / (parts - p));
            fn[n](t, t->a + i0 * t->sa, t->b + 16 * h, t->c + i0 * t->ldc + 16 * h, n, k0, k1);
            i0 += n;
        }
    }
}

static void small_run(SmallIsa isa, int ni, const SmallTile *t)
{
    static void (*const fn[SMALL_ROWS + 1])(const SmallTile *) = {
        NULL, small_tile_1, small_tile_2, small_tile_3, small_tile_4, small_tile_5, small_tile_6,
        small_tile_7, small_tile_8, small_tile_9, small_tile_10, small_tile_11, small_tile_12};
    if (isa == SMALL_AVX512)
        fn[ni](t);
    else
        small2_run(ni, t);
}
#else
static SmallIsa small_isa(const DevKernelArgs *k)
{
    (void)k;
    return SMALL_NONE;
}

static void small_run(SmallIsa isa, int ni, const SmallTile *t)
{
    (void)isa, (void)ni, (void)t;
}
#endif

/* The tiles of features [o0, o0 + 32) of KO: their masks. */
static void small_masks(int64_t ko, int64_t o0, SmallTile *t)
{
    int64_t n = ko - o0;
    t->m0 = n >= 16 ? 0xffff : (uint16_t)((1u << n) - 1);
    t->m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (uint16_t)((1u << (n - 16)) - 1);
}

/* Is window dim s stride 1 and undilated? */
static bool small_dim(const IrWindowDim *wd)
{
    return wd->stride == 1 && wd->lhs_dilate == 1 && wd->rhs_dilate == 1;
}

/* P[b][py][px][c] = in[b][py - lo0][px - lo1][c] (in [nb, h, w, c]), 0
 * outside the input, for py < ph, px < pw; `extra` zeros after. NULL when
 * out of memory. */
static float *small_pad(const float *in, int64_t nb, int64_t h, int64_t w, int64_t c, int64_t lo0,
                        int64_t lo1, int64_t ph, int64_t pw, int64_t extra)
{
    float *pb = ct_scratch(nb * ph * pw * c + extra, sizeof(float));
    if (!pb)
        return NULL;
    memset(pb, 0, (size_t)(nb * ph * pw * c + extra) * sizeof(float));
    int64_t x0 = lo1 > 0 ? lo1 : 0, x1 = w + lo1 < pw ? w + lo1 : pw; /* px of the input's columns */
    for (int64_t b = 0; b < nb; b++)
        for (int64_t py = 0; py < ph && x0 < x1; py++) {
            int64_t y = py - lo0;
            if (y >= 0 && y < h)
                memcpy(pb + ((b * ph + py) * pw + x0) * c, in + ((b * h + y) * w + x0 - lo1) * c,
                       (size_t)((x1 - x0) * c) * sizeof(float));
        }
    return pb;
}

/* The forward tiles (above): in [B, H, W, C], ker [W0, W1, C, KO], out
 * [B, OH, OW, KO]; false (nothing done) unless 2-D, no base dilation, at
 * most DIRECT_KK taps (DIRECT_KK_AVX2 in the AVX2 form), f32, a CPU with
 * AVX-512 or AVX2 and FMA. */
static bool small_fwd(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, uint8_t *outp,
                      IrStatus *st)
{
    const IrWindowDim *wd = k->ins->a.x->window.dim;
    SmallIsa isa = small_isa(k);
    if (c != CT_F32 || p->ns != 2 || wd[0].lhs_dilate != 1 || wd[1].lhs_dilate != 1 ||
        p->kk > (isa == SMALL_AVX2 ? DIRECT_KK_AVX2 : DIRECT_KK) || isa == SMALL_NONE)
        return false;
    int64_t C = p->ki, ko = p->ko, oh = p->osz[0], ow = p->osz[1], w0 = p->wsz[0], w1 = p->wsz[1];
    int64_t sy = wd[0].stride, sx = wd[1].stride, ry = wd[0].rhs_dilate, rx = wd[1].rhs_dilate;
    int64_t ph = (oh - 1) * sy + (w0 - 1) * ry + 1, pw = (ow - 1) * sx + (w1 - 1) * rx + 1;
    const uint8_t *ker;
    uint8_t *ker_own;
    /* The last tile of a row reads up to SMALL_FWD_ROWS pixels on. */
    float *pb = small_pad((const float *)in, p->ib, p->isz[0], p->isz[1], C, wd[0].pad_lo, wd[1].pad_lo, ph, pw,
                          SMALL_FWD_ROWS * sx * C);
    if (!pb || !nhwc_ker(k, c, p, &ker, &ker_own)) {
        ts_free(pb);
        *st = dev_kernel_oom(k, NULL);
        return true;
    }
    float *out = (float *)outp;
    SmallTile t = {.b = (const float *)ker, .sa = sx * C, .n1 = w0, .as1 = ry * pw * C, .bs1 = w1 * C * ko,
                   .n2 = w1, .as2 = rx * C, .bs2 = C * ko, .n3 = C, .as3 = 1, .bs3 = ko, .ldc = ko};
    if (rx == 1) { /* a window row's taps are one run */
        t.n2 = 1;
        t.n3 = w1 * C;
    }
    for (int64_t b = 0; b < p->ib; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t x0 = 0; x0 < ow; x0 += SMALL_FWD_ROWS)
                for (int64_t o0 = 0; o0 < ko; o0 += 32) {
                    small_masks(ko, o0, &t);
                    t.a = pb + ((b * ph + oy * sy) * pw + x0 * sx) * C;
                    t.b = (const float *)ker + o0;
                    t.c = out + ((b * oh + oy) * ow + x0) * ko + o0;
                    t.nc = ow - x0 < SMALL_FWD_ROWS ? ow - x0 : SMALL_FWD_ROWS;
                    small_run(isa, SMALL_FWD_ROWS, &t);
                }
    ts_free(pb);
    ts_free(ker_own);
    *st = IR_OK;
    return true;
}

/* The weight-gradient tiles (above; conv_wgrad's layout): in [F, H, W, C]
 * (the data batch F contracted), g [F, WY, WX, KO] (the kernel operand:
 * the output gradient), out [OY, OX, C, KO] (the filter's gradient);
 * false (nothing done) unless 2-D, stride 1, undilated, OX*C at most
 * SMALL_ROWS, f32, a CPU with AVX-512 or AVX2 and FMA. */
static bool small_wgrad(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, const uint8_t *g,
                        uint8_t *outp, IrStatus *st)
{
    const IrWindowDim *wd = k->ins->a.x->window.dim;
    SmallIsa isa = small_isa(k);
    if (c != CT_F32 || p->ns != 2 || p->ib > SMALL_KI || p->osz[1] * p->ib > SMALL_ROWS || !small_dim(&wd[0]) ||
        !small_dim(&wd[1]) || isa == SMALL_NONE)
        return false;
    int64_t C = p->ib, ko = p->ko, oy_n = p->osz[0], ox_n = p->osz[1], wy = p->wsz[0], wx = p->wsz[1];
    int64_t ph = oy_n + wy - 1, pw = ox_n + wx - 1, ni = ox_n * C;
    float *pb = small_pad((const float *)in, p->if_, p->isz[0], p->isz[1], C, wd[0].pad_lo, wd[1].pad_lo, ph, pw, 0);
    if (!pb) {
        *st = dev_kernel_oom(k, NULL);
        return true;
    }
    SmallTile t = {.sa = 1, .n1 = p->if_, .as1 = ph * pw * C, .bs1 = wy * wx * ko, .n2 = wy, .as2 = pw * C,
                   .bs2 = wx * ko, .n3 = wx, .as3 = C, .bs3 = ko, .ldc = ko, .nc = ni};
    for (int64_t oy = 0; oy < oy_n; oy++)
        for (int64_t o0 = 0; o0 < ko; o0 += 32) {
            small_masks(ko, o0, &t);
            t.a = pb + oy * pw * C;
            t.b = (const float *)g + o0;
            t.c = (float *)outp + oy * ni * ko + o0;
            small_run(isa, (int)ni, &t);
        }
    ts_free(pb);
    *st = IR_OK;
    return true;
}

/* One spatial dim of a phase of a stride-1 base-dilated convolution
 * (nhwc_phases' classes; here per dim): the outputs o = o0 + d*m, m < n,
 * read the input at base + m (+ k*bstep for their k-th real tap, window
 * position w0 + k*wstep, k < nt). */
typedef struct PhaseDim {
    int64_t o0, n, nt, w0, wstep, base, bstep;
} PhaseDim;

/* Phase q (< d) of window dim wd over osz outputs and wsz taps. */
static PhaseDim phase_dim(const IrWindowDim *wd, int64_t osz, int64_t wsz, int64_t q)
{
    int64_t d = wd->lhs_dilate, r = wd->rhs_dilate;
    PhaseDim pd = {0};
    pd.o0 = ((q + wd->pad_lo) % d + d) % d; /* (o0 - pad_lo) mod d == q */
    pd.n = pd.o0 < osz ? (osz - pd.o0 + d - 1) / d : 0;
    int64_t first = -1, second = -1;
    for (int64_t w = 0; w < wsz; w++)
        if (((pd.o0 - wd->pad_lo + w * r) % d + d) % d == 0) {
            if (first < 0)
                first = w;
            else if (second < 0)
                second = w;
            pd.nt++;
        }
    pd.w0 = first < 0 ? 0 : first;
    pd.wstep = second < 0 ? 1 : second - first;
    /* o0 - pad_lo + w0*r is a multiple of d: exact, negative too. */
    pd.base = (pd.o0 - wd->pad_lo + pd.w0 * r) / d;
    pd.bstep = pd.wstep * r / d;
    return pd;
}

/* nhwc_phases as direct tiles (the tiles above, any channel count): a
 * phase's output pixels in a row, d1 apart, read consecutive input pixels
 * at each of its real taps, so the padded input is read in place and the
 * tiles write the output rows ldc = d1*KO apart: no Col of copied taps, no
 * rows moved into place. ker is [W, KI, KO]. false (nothing done) unless
 * 2-D, stride 1, f32, a CPU with AVX-512 or AVX2 and FMA. */
static bool direct_phases(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, const uint8_t *ker,
                          uint8_t *outp, IrStatus *st)
{
    const IrWindowDim *wd = k->ins->a.x->window.dim;
    SmallIsa isa = small_isa(k);
    if (c != CT_F32 || p->ns != 2 || wd[0].stride != 1 || wd[1].stride != 1 || isa == SMALL_NONE)
        return false;
    int64_t d0 = wd[0].lhs_dilate, d1 = wd[1].lhs_dilate, C = p->ki, ko = p->ko;
    int64_t lo[2] = {0, 0}, top[2] = {p->isz[0], p->isz[1]};
    for (int32_t s = 0; s < 2; s++)
        for (int64_t q = 0; q < wd[s].lhs_dilate; q++) {
            PhaseDim pd = phase_dim(&wd[s], p->osz[s], p->wsz[s], q);
            if (pd.n == 0 || pd.nt == 0)
                continue;
            int64_t first = pd.base, last = pd.base + (pd.nt - 1) * pd.bstep + pd.n; /* exclusive */
            lo[s] = -first > lo[s] ? -first : lo[s];
            top[s] = last > top[s] ? last : top[s];
        }
    /* Rows SMALL_FWD_ROWS pixels longer: a row's last tile reads on. */
    int64_t ph = top[0] + lo[0], pw = top[1] + lo[1] + SMALL_FWD_ROWS;
    float *pb = small_pad((const float *)in, p->ib, p->isz[0], p->isz[1], C, lo[0], lo[1], ph, pw, 0);
    if (!pb) {
        *st = dev_kernel_oom(k, NULL);
        return true;
    }
    float *out = (float *)outp;
    int64_t oh = p->osz[0], ow = p->osz[1], w1 = p->wsz[1];
    for (int64_t q0 = 0; q0 < d0; q0++)
        for (int64_t q1 = 0; q1 < d1; q1++) {
            PhaseDim py = phase_dim(&wd[0], oh, p->wsz[0], q0), px = phase_dim(&wd[1], ow, w1, q1);
            SmallTile t = {.sa = C, .n1 = py.nt, .as1 = py.bstep * pw * C, .bs1 = py.wstep * w1 * C * ko,
                           .n2 = px.nt, .as2 = px.bstep * C, .bs2 = px.wstep * C * ko, .n3 = C, .as3 = 1,
                           .bs3 = ko, .ldc = d1 * ko};
            if (py.nt == 0 || px.nt == 0) /* no real tap: zeros */
                t.n1 = 0;
            for (int64_t b = 0; b < p->ib; b++)
                for (int64_t my = 0; my < py.n; my++)
                    for (int64_t mx = 0; mx < px.n; mx += SMALL_FWD_ROWS)
                        for (int64_t o0 = 0; o0 < ko; o0 += 32) {
                            small_masks(ko, o0, &t);
                            t.a = pb + ((b * ph + py.base + my + lo[0]) * pw + px.base + mx + lo[1]) * C;
                            t.b = (const float *)ker + ((py.w0 * w1 + px.w0) * C) * ko + o0;
                            t.c = out + ((b * oh + py.o0 + d0 * my) * ow + px.o0 + d1 * mx) * ko + o0;
                            t.nc = px.n - mx < SMALL_FWD_ROWS ? px.n - mx : SMALL_FWD_ROWS;
                            small_run(isa, SMALL_FWD_ROWS, &t);
                        }
        }
    ts_free(pb);
    *st = IR_OK;
    return true;
}

/* The channels-last engine: input [IB, IS..., IF] and output [OB, OS...,
 * OF] in the compute type, no feature or batch groups, f32/f64 with BLAS.
 *     out[OB*OS, KO] = Col[OB*OS, W*KI] x Ker[W*KI, KO]
 * so im2col copies runs of KI contiguous features and the GEMM writes the
 * output's own layout: nothing packed on the way in, nothing transposed on
 * the way out (the general engine makes both [.., F, S] and back). The
 * kernel is read in place when it is [S..., I, O] (HWIO) unreversed, else
 * packed so. Col is blocked by rows (block_rows). *taken is false
 * (nothing done) where the sparse engine should run instead (conv_run's
 * rule) or a row of Col alone is too large to block well. */
static IrStatus conv_nhwc(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, uint8_t *outp,
                          bool *taken)
{
    IrStatus st;
    *taken = false;
    size_t esz = ct_size(c);
    int64_t nr = CONV_COL_BYTES / (int64_t)esz / p->kk;
    if (nr < CONV_MIN_COLS / 4 && nr < p->ncol)
        return IR_OK;
    if (small_fwd(k, c, p, in, outp, &st)) {
        *taken = true;
        return st;
    }
    int64_t nvalid, total;
    int64_t *off = conv_taps(k, p, &nvalid, &total);
    if (!off)
        return dev_kernel_oom(k, NULL);
    /* Phases from half the taps holes down (measured: at 1/2 phases and
     * the dense product tie; at 1/9 phases take 0.22 of the time the
     * sparse engine does, so they come before conv_run's sparse rule). */
    Phases ph;
    bool phased = nvalid * 2 < total && phases_new(k, p, &ph);
    if (!phased && nvalid * CONV_NHWC_SPARSE_BELOW < total) {
        ts_free(off);
        return IR_OK;
    }
    *taken = true;
    const uint8_t *ker;
    uint8_t *ker_own;
    if (!nhwc_ker(k, c, p, &ker, &ker_own)) {
        if (phased)
            phases_free(&ph);
        ts_free(off);
        return dev_kernel_oom(k, NULL);
    }
    if (phased) {
        if (!direct_phases(k, c, p, in, ker, outp, &st))
            st = nhwc_phases(k, c, p, &ph, in, ker, off, outp);
        phases_free(&ph);
        ts_free(ker_own);
        ts_free(off);
        return st;
    }
    nr = block_rows(esz, p->kk, p->ncol);
    uint8_t *col = ct_scratch(nr * p->kk, esz);
    if (!col) {
        ts_free(off);
        ts_free(ker_own);
        return dev_kernel_oom(k, NULL);
    }
    CtGemm g = {.c = c, .blas = true, .exact = ct_exact(k), .n = p->ko, .k = p->kk, .lda = p->kk, .ldb = p->ko,
                .ldc = p->ko};
    for (int64_t j0 = 0; j0 < p->ncol; j0 += nr) {
        g.m = p->ncol - j0 < nr ? p->ncol - j0 : nr;
        nhwc_im2col(p, esz, in, off, j0, g.m, col);
        ct_gemm(&g, col, ker, outp + (size_t)(j0 * p->ko) * esz);
    }
    ts_free(col);
    ts_free(ker_own);
    ts_free(off);
    return IR_OK;
}

/* Is this the weight gradient of a channels-last convolution as JAX writes
 * it: input f01b (the data batch as the contracted feature, the channels
 * as the batch), kernel i01o (the output gradient, NHWC), output 01bf (the
 * filter gradient, HWIO)? In ConvPlan's terms the conv's output positions
 * OS are the filter's taps and its window W runs over the image. */
static bool wgrad_layout(const IrConvDnums *cd, int32_t ns)
{
    return cd->in_feature == 0 && spatial_at(cd->in_spatial, ns, 1) && cd->in_batch == ns + 1 &&
           cd->k_in_feature == 0 && spatial_at(cd->k_spatial, ns, 1) && cd->k_out_feature == ns + 1 &&
           spatial_at(cd->out_spatial, ns, 0) && cd->out_batch == ns && cd->out_feature == ns + 1;
}

/* Rows [r0, r0 + n) of the weight gradient's Col[IF*W, OS*IB]: row (f, w)
 * holds, for each output position (tap) os, the IB contiguous channels of
 * input (f, position(os, w)), or zeros for padding and holes. */
static void wgrad_im2col(const ConvPlan *p, size_t esz, const uint8_t *in, const int64_t *off, int64_t r0,
                         int64_t n, uint8_t *col)
{
    size_t run = (size_t)p->ib * esz, rowb = (size_t)p->os * run;
    for (int64_t r = 0; r < n; r++) {
        int64_t f = (r0 + r) / p->w, w = (r0 + r) % p->w;
        copy_runs(in + (size_t)(f * p->is) * run, off + w * p->os, 1, p->os, run, col + (size_t)r * rowb);
    }
}

/* The weight-gradient engine (wgrad_layout; no groups, no reversal, f32/f64
 * with BLAS, operands and result in the compute type):
 *     out[OS*IB, KO] = Col[IF*W, OS*IB]^T x Ker[IF*W, KO]
 * where Ker is the kernel operand as it lies and out the result's own
 * layout, so only Col is built, from runs of IB contiguous channels; the
 * general engine would transpose the input to [IB, IF, IS] and gather Col
 * one element at a time. Col is blocked by rows (block_rows), the
 * blocks' products accumulating. *taken as conv_nhwc's. */
static IrStatus conv_wgrad(const DevKernelArgs *k, Ct c, const ConvPlan *p, const uint8_t *in, uint8_t *outp,
                           bool *taken)
{
    *taken = false;
    IrStatus st;
    if (small_wgrad(k, c, p, in, ct_data_of(k->opnd[1]), outp, &st)) {
        *taken = true;
        return st;
    }
    size_t esz = ct_size(c);
    int64_t nr = CONV_COL_BYTES / (int64_t)esz / p->ncol;
    if (nr < CONV_MIN_COLS / 4 && nr < p->kk)
        return IR_OK;
    int64_t nvalid, total;
    int64_t *off = conv_taps(k, p, &nvalid, &total);
    if (!off)
        return dev_kernel_oom(k, NULL);
    if (nvalid * CONV_NHWC_SPARSE_BELOW < total) {
        ts_free(off);
        return IR_OK;
    }
    *taken = true;
    nr = block_rows(esz, p->ncol, p->kk);
    uint8_t *col = ct_scratch(nr * p->ncol, esz);
    if (!col) {
        ts_free(off);
        return dev_kernel_oom(k, NULL);
    }
    const uint8_t *ker = ct_data_of(k->opnd[1]);
    CtGemm g = {.c = c, .blas = true, .exact = ct_exact(k), .ta = true, .m = p->ncol, .n = p->ko, .lda = p->ncol,
                .ldb = p->ko, .ldc = p->ko};
    for (int64_t r0 = 0; r0 < p->kk; r0 += nr) {
        g.k = p->kk - r0 < nr ? p->kk - r0 : nr;
        g.acc = r0 > 0;
        wgrad_im2col(p, esz, in, off, r0, g.k, col);
        ct_gemm(&g, col, ker + (size_t)(r0 * p->ko) * esz, outp);
    }
    ts_free(col);
    ts_free(off);
    return IR_OK;
}

/* View of s with dims in order (d0, d1, sp...); true when that order is the
 * identity, i.e. the view is s's own row-major layout. */
static bool canon_view(CtView *v, const IrShape *s, int64_t d0, int64_t d1, int32_t ns,
                       const int64_t *sp)
{
    int64_t order[IR_MAX_RANK];
    order[0] = d0;
    order[1] = d1;
    if (ns > 0)
        memcpy(order + 2, sp, (size_t)ns * sizeof *order);
    ct_view_of(v, s, ns + 2, order);
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
 * changes: conv_nhwc (base-dilated ones by phases, real taps only:
 * nhwc_phases); so do their weight gradients (f01b_i01o->01bf, as
 * JAX writes them): conv_wgrad.
 *
 * Inputs: two array operands. On success *out is a new array. Fails with
 * IR_EINPUT on inconsistent dimension numbers or sizes, IR_ENOMEM on OOM.
 */
IrStatus dev_k_convolution(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]))
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
        return dev_kernel_oom(k, NULL);
    if (ir_shape_elements(os) == 0) {
        *out = r;
        return IR_OK;
    }
    const DevValue *iv = k->opnd[0];
    if (p.fgc == 1 && p.bgc == 1 && p.kk > 0 && ct_use_blas(k) && (c == CT_F32 || c == CT_F64) &&
        ct_native(c, iv->shape.type) && ct_native(c, os->type) &&
        channels_last(cd->in_batch, cd->in_feature, cd->in_spatial, p.ns) &&
        channels_last(cd->out_batch, cd->out_feature, cd->out_spatial, p.ns)) {
        bool taken = false;
        st = conv_nhwc(k, c, &p, ct_data_of(iv), r->data, &taken);
        if (st != IR_OK || taken) {
            if (st != IR_OK)
                dev_value_unref(r);
            else
                *out = r;
            return st;
        }
    }
    if (p.fgc == 1 && p.bgc == 1 && p.kk > 0 && ct_use_blas(k) && (c == CT_F32 || c == CT_F64) &&
        ct_native(c, iv->shape.type) && ct_native(c, k->opnd[1]->shape.type) && ct_native(c, os->type) &&
        !reversed(k, &p) && wgrad_layout(cd, p.ns)) {
        bool taken = false;
        st = conv_wgrad(k, c, &p, ct_data_of(iv), r->data, &taken);
        if (st != IR_OK || taken) {
            if (st != IR_OK)
                dev_value_unref(r);
            else
                *out = r;
            return st;
        }
    }
    CtView vi, vo;
    bool in_direct = canon_view(&vi, &iv->shape, cd->in_batch, cd->in_feature, p.ns, cd->in_spatial) &&
                     ct_native(c, iv->shape.type);
    bool out_direct = canon_view(&vo, os, cd->out_feature, cd->out_batch, p.ns, cd->out_spatial) &&
                      ct_native(c, os->type);
    const uint8_t *in = ct_data_of(iv);
    uint8_t *in_own = NULL, *out_own = NULL;
    if (!in_direct) {
        if (!(in_own = ct_scratch(ct_view_elements(&vi), ct_size(c)))) {
            st = dev_kernel_oom(k, NULL);
            goto done;
        }
        ct_pack(c, iv->shape.type, iv->data, &vi, in_own);
        in = in_own;
    }
    if (!out_direct && !(out_own = ct_scratch(ir_shape_elements(os), ct_size(c)))) {
        st = dev_kernel_oom(k, NULL);
        goto done;
    }
    if ((st = conv_run(k, c, &p, in, out_direct ? r->data : out_own)) != IR_OK)
        goto done;
    if (!out_direct)
        ct_unpack(c, os->type, out_own, &vo, r->data);
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
