/*
 * k_dot.c: dot, as one row-major GEMM per batch element
 *     C[M,N] = op(A)[M,K] * op(B)[K,N]          (op: optional transpose)
 * in the compute type of the result (contract.h).
 *
 * An operand is used in place when its element type is the compute type
 * and each batch element's matrix is one strided GEMM operand: its free
 * dims form one run of memory and its contracting dims another (each
 * dim's stride the next one's times its size), one of the two runs of
 * stride 1 (a transpose flag covers the contracting run inside), the
 * other's stride the row stride (lda/ldb); the batch dims may sit anywhere
 * with any strides. Otherwise it is copied once, converted, into [batch,
 * free, contracting] (lhs) or [batch, contracting, free] (rhs). One GEMM
 * per batch element; the result [batch, lhs free, rhs free] is the GEMM
 * output itself.
 *
 * A dot may read an operand as a transpose of a value (fusion.c runs a
 * transpose read only by dots inside them): the dimension numbers then
 * name the transposed dims, mapped through the permutation onto the
 * value's. JAX's attention reads its q/k/v heads so: [H,D,B,S] transposed
 * to [B,H,S,D], each (b, h) matrix [S,D] in place with row stride B*S and
 * the transpose flag, no copy made.
 *
 * A dot whose one user is a transpose to [batch, rhs free, lhs free]
 * (fusion.c groups the pair; JAX writes weight gradients so) writes that
 * layout directly: C^T = op(B)^T op(A)^T, the same GEMM with the operands
 * swapped, instead of a full-size result moved again by the transpose.
 *
 * Causal attention (issue 34). A dot whose result a causal mask reads only
 * on and below the diagonal (ir/causal.c proves it on the IR; the fusion
 * group says dot_lower) computes, per block of 64 rows [r0, r1), only the
 * columns [0, r1): the scores' upper tiles, which the select replaces, are
 * written 0, never multiplied. The same bits as computing them: each kept
 * element is the same sum over the contracted dim. And a product whose
 * square operand is zero on one side of its diagonal (the probabilities P
 * of a causal softmax, exactly 0 where exp(-1e9 - max) underflows, and
 * the backward's dS) multiplies each block only over the k range the
 * triangle leaves: P.V and dQ = dS K (A[m,k] = 0 for k > m), dK = dS^T Q
 * (k < m), dV^T = dO^T P (B[k,n] = 0 for k < n). That is checked on the
 * values, not assumed: the skipped region must be all zeros (a full
 * matrix fails at its first element) and what it would have multiplied
 * finite (0 * inf is NaN), else the GEMM runs whole. Values equal; the
 * sums' order changes with the shorter k (not bit for bit).
 *
 * Zero rows (issue 34). A product whose op(A) has at least 1/8 of its rows
 * zero and op(B) finite multiplies only the other rows (gemm_rows): a
 * mixture of experts with dense dispatch sends every expert all the
 * tokens, the one-hot gate zeroing all but its own, so 3/4 of a top-1
 * 4-expert layer's expert rows are zero, in both of its expert dots.
 * Checked on the values per call, as the triangles are.
 *
 * Elementwise consumers (DevDotEpilogue.then, fusion.c's run_feeds): on
 * each strip of rows tessel's own GEMM finishes (DevGemmThen), from B
 * kept packed or not; after the product, a block of rows at a time, on
 * every other path (other libraries, the triangles, zero rows).
 */
#include "contract.h"
#include "blas.h" /* dev_sgemm_avx512_rowmajor_then */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "float_ops.h" /* DEV_VECTOR_CLONES */
#include "fusion.h"    /* dev_fusion_fold_f32 */
#include "vmath.h"

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
        if (!ct_mul_ok(p, s->dims[dims[i]], &p))
            return -1;
    return p;
}

static IrStatus dot_plan(const DevKernelArgs *k, const IrShape *ls, const IrShape *rs, DotPlan *p)
{
    const IrShape *os = &k->ins->shape;
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

/* Dims d[0..n) of s (strides st) as one run of len elements, the last
 * dim's stride *stride, each dim's stride the next one's times its size
 * (dims of size 1 skipped; none left: *stride 0). False when they do not
 * form such a run. */
static bool dims_run(const IrShape *s, const int64_t *st, const int64_t *d, int32_t n, int64_t *stride,
                     int64_t *len)
{
    int64_t next = 0, l = 1;
    *stride = 0;
    for (int32_t i = n - 1; i >= 0; i--) {
        int64_t size = s->dims[d[i]];
        l *= size;
        if (size == 1)
            continue;
        if (*stride == 0)
            *stride = st[d[i]];
        else if (st[d[i]] != next)
            return false;
        next = st[d[i]] * size;
    }
    *len = l;
    return true;
}

/* One GEMM operand: the matrix [x, y] of each batch element, in place in
 * the value's buffer (through strides) or packed to scratch. Batch element
 * i (row-major over batch.dims) starts at element offset(i) of data. */
typedef struct DotOperand {
    const uint8_t *data;
    uint8_t *owned;   /* scratch to free, or NULL */
    bool trans;       /* stored [y, x] */
    int64_t ld;       /* the stored matrix's row stride, in elements */
    CtView batch;     /* the batch dims' sizes and strides */
} DotOperand;

/* Can the matrices [x, y] of s be read in place, each a row-major [x, y]
 * (or, trans, [y, x]) with row stride ld? Their batch dims may have any
 * strides (a head dim between the rows, JAX's q/k/v). */
static bool in_place(const IrShape *s, const int64_t *x, int32_t nx, const int64_t *y, int32_t ny,
                     DotOperand *op)
{
    int64_t st[IR_MAX_RANK], sx, sy, lx, ly;
    ir_shape_strides(s, st);
    if (!dims_run(s, st, x, nx, &sx, &lx) || !dims_run(s, st, y, ny, &sy, &ly))
        return false;
    int64_t wx = lx > 1 ? lx : 1, wy = ly > 1 ? ly : 1;
    if (sy <= 1) { /* rows x, columns y */
        op->trans = false;
        op->ld = sx > 0 ? sx : wy;
        return op->ld >= wy;
    }
    if (sx <= 1) { /* rows y, columns x */
        op->trans = true;
        op->ld = sy;
        return op->ld >= wx;
    }
    return false;
}

/* Prepare one dot operand, v read as the transpose of it by perm (NULL:
 * v itself; logical dim i is dim perm[i] of v). For the lhs, x = free and
 * y = contracting (GEMM A = [M, K]); for the rhs, x = contracting and y =
 * free (B = [K, N]); the lists name logical dims. In place when v's
 * elements are compute-type values whose matrices in_place reads; else
 * packed into [batch, x, y]. */
static IrStatus dot_operand(const DevKernelArgs *k, Ct c, const DevValue *v, const int64_t *perm,
                            const int64_t *batch, int32_t nb, const int64_t *x, int32_t nx, const int64_t *y,
                            int32_t ny, DotOperand *op)
{
    const IrShape *s = &v->shape;
    int64_t order[IR_MAX_RANK], st[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < nb; i++)
        order[r++] = perm ? perm[batch[i]] : batch[i];
    for (int32_t i = 0; i < nx; i++)
        order[r++] = perm ? perm[x[i]] : x[i];
    for (int32_t i = 0; i < ny; i++)
        order[r++] = perm ? perm[y[i]] : y[i];
    op->owned = NULL;
    ir_shape_strides(s, st);
    op->batch.rank = nb;
    op->batch.base = 0;
    for (int32_t i = 0; i < nb; i++) {
        op->batch.dims[i] = s->dims[order[i]];
        op->batch.stride[i] = st[order[i]];
    }
    if (ct_native(c, s->type) && in_place(s, order + nb, nx, order + nb + nx, ny, op)) {
        op->data = ct_data_of(v);
        return IR_OK;
    }
    CtView view;
    ct_view_of(&view, s, r, order);
    int64_t total = ct_view_elements(&view), rows = 1, cols = 1;
    for (int32_t i = 0; i < nx; i++)
        rows *= view.dims[nb + i];
    for (int32_t i = 0; i < ny; i++)
        cols *= view.dims[nb + nx + i];
    if (!(op->owned = ct_scratch(total, ct_size(c))))
        return dev_kernel_oom(k, NULL);
    ct_pack(c, s->type, v->data, &view, op->owned);
    op->data = op->owned;
    op->trans = false;
    op->ld = cols;
    /* Packed row-major: each batch dim's stride is the elements after it. */
    for (int32_t i = nb - 1, after = rows * cols; i >= 0; i--) {
        op->batch.stride[i] = after;
        after *= op->batch.dims[i];
    }
    return IR_OK;
}

/* The element offset of batch element i (row-major over v's dims). */
static int64_t batch_offset(const CtView *v, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = v->rank - 1; d >= 0; d--) {
        off += (i % v->dims[d]) * v->stride[d];
        i /= v->dims[d];
    }
    return off;
}

/* Rows (or columns) of a block of the triangular products below. */
#define TRI_TILE 64

/* Element (i, j) of op(X) (X stored [rows, ld], or transposed). */
static const uint8_t *at(const uint8_t *x, bool t, int64_t ld, int64_t i, int64_t j, size_t esz)
{
    return x + (size_t)(t ? j * ld + i : i * ld + j) * esz;
}

/* r[i] = exp(r[i]) for i < n, as the exp kernel computes it (vmath.h:
 * an element's result depends on its value alone). */
static void exp_f32(float *r, int64_t n)
{
    if (!dev_vmath_f32(OP_EXP, r, r, n))
        for (int64_t i = 0; i < n; i++)
            r[i] = expf(r[i]);
}

/* The scale and the select (DevDotEpilogue) over row[0..n) (m: its mask
 * row). The same IEEE operations as the unfused divide (multiply) and
 * select. */
DEV_VECTOR_CLONES static void scale_select(const DevDotEpilogue *e, float *row, const uint8_t *m, int64_t n)
{
    float s = e->scale, fill = e->fill;
    if (e->scaled && e->divide)
        for (int64_t j = 0; j < n; j++)
            row[j] = row[j] / s;
    else if (e->scaled)
        for (int64_t j = 0; j < n; j++)
            row[j] = row[j] * s;
    if (m && e->keep)
        for (int64_t j = 0; j < n; j++)
            row[j] = m[j] ? row[j] : fill;
    else if (m)
        for (int64_t j = 0; j < n; j++)
            row[j] = m[j] ? fill : row[j];
}

/* The elements a row's sum folds: n, or fewer where the elements from
 * hi on are all +0 (ef, whose bits are 0). dev_red_fold_lanes adds them
 * to lanes whose partial sums are never -0 (each starts at an element,
 * and an exp is never -0) or, after the lanes, to a total that is not
 * -0 either: x + (+0) is x, so folding a multiple of its 8 lanes (at
 * least 16 elements) that covers [0, hi) gives the whole row's sum. */
static int64_t sum_length(int64_t hi, int64_t n, float ef)
{
    uint32_t u;
    memcpy(&u, &ef, sizeof u);
    int64_t l = (hi + 7) / 8 * 8;
    l = l < 16 ? 16 : l;
    return hi < n && u == 0 && l <= n / 8 * 8 ? l : n;
}

/* 1 + the last j < n with (m[j] != 0) == keep, or 0: the end of what a
 * mask row keeps (8 bytes at a time over the masked tail). */
static int64_t kept_end(const uint8_t *m, int64_t n, bool keep)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    int64_t hi = n;
    for (; hi >= 8; hi -= 8) {
        uint64_t w;
        memcpy(&w, m + hi - 8, sizeof w);
        bool masked = keep ? w == 0 : ((w - ones) & ~w & highs) == 0; /* no byte kept */
        if (!masked)
            break;
    }
    while (hi > 0 && (m[hi - 1] != 0) != keep)
        hi--;
    return hi;
}

/* The end of what mask row r of e keeps (kept_end), from e's table where
 * it has one; n where there is no mask. */
static int64_t row_kept_end(const DevDotEpilogue *e, int64_t r, int64_t n)
{
    if (!e->mask)
        return n;
    return e->kept_ends ? e->kept_ends[r] : kept_end(e->mask + r * n, n, e->keep);
}

/* epi with its mask rows' kept_end worked out once (*ends, to free; NULL
 * where there is no softmax over a mask, or no memory: each row scans its
 * mask again), for the m rows of n columns that every batch element's
 * softmax reads: a causal row's scan from its end was 0.6 ms of block-infer's
 * 37 ms step, done again for each of its 12 batch elements and heads
 * (BENCHMARKS.md, "Stop 59"). */
static DevDotEpilogue with_kept_ends(const DevDotEpilogue *epi, int64_t m, int64_t n, int64_t **ends)
{
    DevDotEpilogue e = *epi;
    *ends = NULL;
    if (!e.softmax || !e.mask || e.kept_ends || !(*ends = ts_malloc((size_t)m * sizeof **ends)))
        return e;
    for (int64_t r = 0; r < m; r++)
        (*ends)[r] = kept_end(e.mask + r * n, n, e.keep);
    e.kept_ends = *ends;
    return e;
}

/* Row `row` of n (the mask's row r) scaled, masked and into its softmax
 * (DevDotEpilogue), with the row group's operations (fusion_rows.c) in
 * its order on each element: the max, x - m, exp, the sum, e / z. Where
 * the mask keeps nothing from column hi on, the columns [hi, n) all hold
 * the fill: their x - m, exp and e / z are computed once (the same bits
 * as each), their max is the fill's, so a causal row is scaled, masked
 * and exp'ed over its kept part only. t: n floats of scratch. A reader
 * that reads the columns [0, w) alone (w <= n: P.V over a causal block)
 * gets the row written up to w where the row's columns [w, n) are +0 (the
 * mask keeps nothing from w on and the fill's exp over the sum is +0: a
 * causal softmax's exp(-1e9 - max)), and true; else the whole row, and
 * false. Columns the row's kept part does not reach are never read; of
 * those it reaches, the ones from `cols` on (scores not computed there)
 * read as 0, as a lower product's unread columns are written. */
DEV_VECTOR_CLONES static bool softmax_row_upto(const DevDotEpilogue *e, float *row, int64_t r, int64_t n,
                                               float *t, int64_t w, int64_t cols)
{
    const uint8_t *m = e->mask ? e->mask + r * n : NULL;
    int64_t hi = row_kept_end(e, r, n);
    if (hi > cols)
        memset(row + cols, 0, (size_t)(hi - cols) * sizeof *row);
    scale_select(e, row, m, hi);
    float fill = e->fill, mx = dev_fusion_fold_f32(OP_MAXIMUM, e->max_init, row, hi);
    if (hi < n) {
        /* Neither a NaN nor a zero: the one value the row holds at its
         * extreme, as the whole row's fold finds it; else that fold. */
        mx = DEV_FMAX(mx, fill);
        if (mx != mx || mx == 0) {
            for (int64_t j = hi; j < n; j++)
                row[j] = fill;
            mx = dev_fusion_fold_f32(OP_MAXIMUM, e->max_init, row, n);
        }
    }
    if (e->clamped)
        mx = e->clamp_first ? DEV_FMAX(e->clamp, mx) : DEV_FMAX(mx, e->clamp);
    for (int64_t j = 0; j < hi; j++)
        t[j] = row[j] - mx;
    if (hi < n)
        t[hi] = fill - mx;
    exp_f32(t, hi < n ? hi + 1 : n);
    float ef = hi < n ? t[hi] : 0;
    int64_t ns = sum_length(hi, n, ef);
    for (int64_t j = hi + 1; j < ns; j++)
        t[j] = ef;
    float z = dev_fusion_fold_f32(OP_ADD, e->sum_init, t, ns);
    for (int64_t j = 0; j < hi; j++)
        row[j] = t[j] / z;
    float pf = ef / z;
    uint32_t pu;
    memcpy(&pu, &pf, sizeof pu);
    bool tail_zero = hi <= w && pu == 0;
    for (int64_t j = hi, end = tail_zero ? w : n; j < end; j++)
        row[j] = pf;
    return tail_zero;
}

static void softmax_row(const DevDotEpilogue *e, float *row, int64_t r, int64_t n, float *t)
{
    softmax_row_upto(e, row, r, n, t, n, n);
}

/* The epilogue (DevDotEpilogue) over rows [r0, r1) of one batch
 * element's f32 C (c: its row r0, row stride n, element `first` of the
 * result): the scale, then the select, then the softmax (t: its scratch
 * row), then the elementwise consumers. */
static void epilogue_rows(const DevDotEpilogue *e, float *t, float *c, int64_t r0, int64_t r1, int64_t n,
                          int64_t first)
{
    for (int64_t r = r0; r < r1 && (e->scaled || e->mask || e->softmax); r++) {
        if (e->softmax)
            softmax_row(e, c + (r - r0) * n, r, n, t);
        else
            scale_select(e, c + (r - r0) * n, e->mask ? e->mask + r * n : NULL, n);
    }
    if (e->then)
        e->then(e->ctx, c, first, (r1 - r0) * n);
}

/* The elementwise consumers (DevDotEpilogue.then) of one batch element's
 * C, whose element (0, 0) is the result's element `base`, as the GEMM
 * finishes each block of it (DevGemmThen). */
typedef struct ThenAt {
    const DevDotEpilogue *e;
    int64_t base, m, ldc; /* C's rows and row stride */
} ThenAt;

static void then_block(void *ctx, float *c, int64_t i0, int64_t rows, int64_t j0, int64_t cols, int64_t ldc)
{
    const ThenAt *at = ctx;
    if (j0 == 0 && cols == ldc) { /* whole rows: one run of elements */
        at->e->then(at->e->ctx, c, at->base + i0 * ldc, rows * cols);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        at->e->then(at->e->ctx, c + r * ldc, at->base + (i0 + r) * ldc + j0, cols);
}

/* A tile of the strip of rows [i0, i0 + rows) is final: the same columns
 * of the next strip's rows (the GEMM's next) come to `then` after it. */
static void then_tile(void *ctx, int64_t i0, int64_t rows, int64_t j0, int64_t cols)
{
    const ThenAt *at = ctx;
    for (int64_t r = i0 + rows; r < i0 + 2 * rows && r < at->m; r++)
        at->e->ahead(at->e->ctx, at->base + r * at->ldc + j0, cols);
}

/* One batch element's C[M,N] = op(A) op(B) whose result is read only on
 * and below the diagonal (a causal mask's scores, ir_dot_reads_lower):
 * per block of TRI_TILE rows [r0, r1), the columns [0, r1) only; the rest
 * of the rows is written 0 (a defined value the mask discards). */
static void gemm_lower(const CtGemm *g, size_t esz, const uint8_t *a, const uint8_t *b, uint8_t *c,
                       const DevDotEpilogue *epi, float *t, int64_t base)
{
    for (int64_t r0 = 0; r0 < g->m; r0 += TRI_TILE) {
        int64_t r1 = r0 + TRI_TILE < g->m ? r0 + TRI_TILE : g->m, n1 = r1 < g->n ? r1 : g->n;
        CtGemm s = *g;
        s.m = r1 - r0;
        s.n = n1;
        ct_gemm(&s, at(a, g->ta, g->lda, r0, 0, esz), b, c + (size_t)(r0 * g->ldc) * esz);
        for (int64_t r = r0; r < r1 && n1 < g->n; r++)
            memset(c + (size_t)(r * g->ldc + n1) * esz, 0, (size_t)(g->n - n1) * esz);
        if (epi)
            epilogue_rows(epi, t, (float *)(void *)(c + (size_t)(r0 * g->ldc) * esz), r0, r1, g->n, base + r0 * g->ldc);
    }
}

/* The zero triangles a dot's operand may have (probabilities computed
 * under a causal mask, and their gradients): op(A)[m,k] == 0 for k > m
 * (P.V, dQ = dS K), for k < m (dK = dS^T Q); op(B)[k,n] == 0 for k < n
 * (dV^T = dO^T P), for k > n. A block of rows of A (columns of B) then
 * needs only a range of k. */
typedef enum Tri { TRI_A_LOWER, TRI_A_UPPER, TRI_B_UPPER, TRI_B_LOWER, TRI_KINDS } Tri;

/* The k range [*k0, *k1) block [f0, f1) of the free dim needs. */
static void tri_range(Tri t, int64_t f0, int64_t f1, int64_t k, int64_t *k0, int64_t *k1)
{
    bool upper = t == TRI_A_UPPER || t == TRI_B_UPPER;
    *k0 = upper ? (f0 < k ? f0 : k) : 0;
    *k1 = upper ? k : (f1 < k ? f1 : k);
}

/* Are the f32 elements (i, j) of op(X), i in [i0,i1), j in [j0,j1), all
 * zero (either sign; zero = true) or all finite (zero = false)? */
static bool region_is(bool zero, const float *x, bool t, int64_t ld, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    if (t) { /* stored transposed: element (i, j) at j * ld + i */
        int64_t s = i0;
        i0 = j0, j0 = s, s = i1, i1 = j1, j1 = s;
    }
    uint32_t mask = zero ? 0x7fffffffu : 0x7f800000u;
    for (int64_t i = i0; i < i1; i++) {
        uint32_t any = 0;
        const float *row = x + i * ld;
        for (int64_t j = j0; j < j1; j++) {
            uint32_t u;
            memcpy(&u, &row[j], sizeof u);
            any |= zero ? u & mask : (uint32_t)((u & mask) == mask);
        }
        if (any)
            return false;
    }
    return true;
}

/* Has this batch element's op(A) or op(B) the zero triangle t, exactly,
 * and is what it would multiply finite (0 * inf is not 0)? Checked
 * block by block, so that a full matrix fails at its first element. */
static bool tri_holds(Tri t, const CtGemm *g, const float *a, const float *b)
{
    bool on_a = t == TRI_A_LOWER || t == TRI_A_UPPER;
    int64_t nf = on_a ? g->m : g->n, first_end = TRI_TILE < nf ? TRI_TILE : nf, last0 = (nf - 1) / TRI_TILE * TRI_TILE;
    for (int64_t f0 = 0; f0 < nf; f0 += TRI_TILE) {
        int64_t f1 = f0 + TRI_TILE < nf ? f0 + TRI_TILE : nf, k0, k1;
        tri_range(t, f0, f1, g->k, &k0, &k1);
        bool ok = on_a ? region_is(true, a, g->ta, g->lda, f0, f1, 0, k0) &&
                         region_is(true, a, g->ta, g->lda, f0, f1, k1, g->k)
                       : region_is(true, b, g->tb, g->ldb, 0, k0, f0, f1) &&
                         region_is(true, b, g->tb, g->ldb, k1, g->k, f0, f1);
        if (!ok)
            return false;
    }
    /* The other operand's rows (columns) some block skips. */
    bool upper = t == TRI_A_UPPER || t == TRI_B_UPPER;
    int64_t s0 = upper ? 0 : first_end, s1 = upper ? (last0 < g->k ? last0 : g->k) : g->k;
    return on_a ? region_is(false, b, g->tb, g->ldb, s0, s1, 0, g->n)
                : region_is(false, a, g->ta, g->lda, 0, g->m, s0, s1);
}

/* C = op(A) op(B) over the k ranges triangle t leaves, block by block. */
static void gemm_tri(Tri t, const CtGemm *g, size_t esz, const uint8_t *a, const uint8_t *b, uint8_t *c)
{
    bool on_a = t == TRI_A_LOWER || t == TRI_A_UPPER;
    int64_t nf = on_a ? g->m : g->n;
    for (int64_t f0 = 0; f0 < nf; f0 += TRI_TILE) {
        int64_t f1 = f0 + TRI_TILE < nf ? f0 + TRI_TILE : nf, k0, k1;
        tri_range(t, f0, f1, g->k, &k0, &k1);
        CtGemm s = *g;
        s.k = k1 - k0;
        if (on_a)
            s.m = f1 - f0;
        else
            s.n = f1 - f0;
        const uint8_t *ab = on_a ? at(a, g->ta, g->lda, f0, k0, esz) : at(a, g->ta, g->lda, 0, k0, esz);
        const uint8_t *bb = on_a ? at(b, g->tb, g->ldb, k0, 0, esz) : at(b, g->tb, g->ldb, k0, f0, esz);
        uint8_t *cb = c + (size_t)(on_a ? f0 * g->ldc : f0) * esz;
        if (s.k > 0) {
            ct_gemm(&s, ab, bb, cb);
        } else {
            for (int64_t r = 0; r < s.m; r++)
                memset(cb + (size_t)(r * g->ldc) * esz, 0, (size_t)s.n * esz);
        }
    }
}

/* A product whose op(A) has zero rows: the dense dispatch of a top-k
 * mixture of experts (each expert's [tokens, D] slice, the one-hot gate
 * times the tokens, is zero but for the tokens routed to it, and so are
 * the rows of its hidden activation, relu(0) = 0). Where at least
 * 1/ZERO_ROWS_MIN of op(A)'s rows are zero (either sign) and op(B) is
 * finite (0 * inf is NaN), the other rows are gathered, multiplied, moved
 * to their places and the zero rows written +0 (what the GEMM writes: its
 * sums start at +0). Checked on the values per call (K >= 64, N >= 16): a
 * row is read up to its first nonzero element, so a dense op(A) costs M
 * loads. Values equal the whole product's; the GEMM may sum in another
 * order for another M (not bit for bit). */
#define ZERO_ROWS_MIN 8

static int64_t zero_rows(const float *a, int64_t m, int64_t k, int64_t lda, int64_t *keep)
{
    int64_t nk = 0;
    for (int64_t i = 0; i < m; i++) {
        const float *row = a + i * lda;
        int64_t j = 0;
        for (uint32_t u = 0; j < k; j++) {
            memcpy(&u, &row[j], sizeof u);
            if (u & 0x7fffffffu)
                break;
        }
        if (j < k)
            keep[nk++] = i;
    }
    return m - nk;
}

static bool gemm_rows(const CtGemm *g, const uint8_t *a, const uint8_t *b, uint8_t *c)
{
    if (g->c != CT_F32 || g->acc || g->ta || g->m < ZERO_ROWS_MIN || g->k < TRI_TILE || g->n < TRI_TILE / 4)
        return false;
    const float *af = (const float *)(const void *)a;
    int64_t *keep = ct_scratch(g->m, sizeof *keep);
    if (!keep)
        return false;
    int64_t nz = zero_rows(af, g->m, g->k, g->lda, keep), nk = g->m - nz;
    float *ac = NULL;
    if (nz * ZERO_ROWS_MIN < g->m ||
        !region_is(false, (const float *)(const void *)b, g->tb, g->ldb, 0, g->k, 0, g->n) ||
        (nk > 0 && !(ac = ct_scratch(nk * g->k, sizeof *ac)))) {
        ts_free(keep);
        return false;
    }
    for (int64_t r = 0; r < nk; r++)
        memcpy(ac + r * g->k, af + keep[r] * g->lda, (size_t)g->k * sizeof *ac);
    float *cf = (float *)(void *)c;
    if (nk > 0) {
        CtGemm s = *g;
        s.m = nk;
        s.lda = g->k;
        ct_gemm(&s, ac, b, c); /* into C's first nk rows */
    }
    /* Row r of the product belongs at keep[r] >= r: from the last down,
     * no row is overwritten before it moves; then the zero rows. */
    int64_t r = nk - 1;
    for (int64_t i = g->m - 1; i >= 0; i--) {
        float *dst = cf + i * g->ldc;
        if (r >= 0 && keep[r] == i) {
            if (r != i)
                memcpy(dst, cf + r * g->ldc, (size_t)g->n * sizeof *cf);
            r--;
        } else {
            memset(dst, 0, (size_t)g->n * sizeof *cf);
        }
    }
    ts_free(ac);
    ts_free(keep);
    return true;
}

/* One batch element's GEMM: the causal scores' tiles (lower), a product
 * over an operand's zero triangle or zero rows without them, else whole:
 * from B's packed form where `steady` is B's value (packed.c keeps it).
 * C's element (0, 0) is the result's element `base`. An epilogue of
 * elementwise consumers alone runs inside tessel's own GEMM, on each
 * strip of rows it finishes (DevGemmThen); any other, after the product,
 * a block of TRI_TILE rows at a time. */
static void gemm_one(const CtGemm *g, bool lower, const uint8_t *a, const uint8_t *b, uint8_t *c,
                     const DevDotEpilogue *epi, float *t, DevPacked *pc, DevValue *steady, int64_t base)
{
    size_t esz = ct_size(g->c);
    if (lower && g->m > TRI_TILE) {
        gemm_lower(g, esz, a, b, c, epi, t, base);
        return;
    }
    ThenAt then_at = {epi, base, g->m, g->ldc};
    DevGemmThen then = {then_block, &then_at, epi && epi->ahead ? then_tile : NULL};
    /* where ct_gemm's BLAS would run this product in tessel's own GEMM
     * (the shape's library): the same multiply, the same bits */
    bool own = epi && epi->then && !epi->scaled && !epi->mask && !epi->softmax && g->c == CT_F32 && !g->acc &&
               g->blas && g->m <= INT_MAX && g->n <= INT_MAX && g->k <= INT_MAX && g->lda <= INT_MAX &&
               g->ldb <= INT_MAX && g->ldc <= INT_MAX &&
               dev_blas_sgemm_shape_lib(g->ta, g->tb, g->m, g->n, g->k, (const float *)(const void *)a, g->lda,
                                        (const float *)(const void *)b, g->ldb, steady != NULL) == DEV_SGEMM_AVX512;
    bool done = false;
    if (g->c == CT_F32 && !g->acc && g->k >= 2 * TRI_TILE)
        for (Tri t = TRI_A_LOWER; t < TRI_KINDS && !done; t++) {
            bool on_a = t == TRI_A_LOWER || t == TRI_A_UPPER;
            if ((on_a ? g->m : g->n) == g->k && tri_holds(t, g, (const float *)a, (const float *)b)) {
                gemm_tri(t, g, esz, a, b, c);
                done = true;
            }
        }
    /* a dot that asks for f32's own product keeps no bf16 copies */
    bool keep = steady && !(g->exact && dev_blas_sgemm_current() == DEV_SGEMM_AMX_BF16X3);
    const float *af = (const float *)(const void *)a, *bf = (const float *)(const void *)b;
    float *cf = (float *)(void *)c;
    bool then_done = false;
    if (!done && !gemm_rows(g, a, b, c)) {
        if (keep && dev_packed_sgemm_then(pc, steady, g->m, g->n, g->k, af, g->lda, bf, g->tb, g->ldb, cf, g->ldc,
                                          own ? &then : NULL))
            then_done = own;
        else if (own && dev_sgemm_avx512_rowmajor_then(g->ta, g->tb, g->m, g->n, g->k, af, g->lda, bf, g->ldb, cf,
                                                       g->ldc, &then))
            then_done = true;
        else
            ct_gemm(g, a, b, c);
    }
    for (int64_t r0 = 0; epi && !then_done && r0 < g->m; r0 += TRI_TILE)
        epilogue_rows(epi, t, (float *)(void *)(c + (size_t)(r0 * g->ldc) * esz), r0,
                      r0 + TRI_TILE < g->m ? r0 + TRI_TILE : g->m, g->n, base + r0 * g->ldc);
}

/* The dot's operand j when it is an undonated parameter of the entry
 * computation, read in place: a buffer the runtime feeds again unchanged
 * step after step, which packed.c may keep packed (DevExecOptions.packed;
 * NULL: none, or not such an operand). */
static DevValue *steady_operand(const DevKernelArgs *k, int32_t j, const DotOperand *op)
{
    const DevExecOptions *o = k->opt;
    if (!o || !o->packed || op->owned || k->m->entry < 0 || k->c != k->m->comp[k->m->entry] || j >= k->ins->nopnd)
        return NULL;
    const IrInstr *p = &k->c->instr[k->ins->opnd[j]];
    int64_t pn = p->a.parameter_number;
    if (p->op != OP_PARAMETER || (o->donated && pn < o->ndonated && o->donated[pn]) || !k->opnd[j] ||
        op->data != k->opnd[j]->data)
        return NULL;
    return k->opnd[j];
}

/* Run the batched GEMM of a planned dot into c_out ([B, M, N], compute
 * type; transposed: [B, N, M], each C^T computed as op(B)^T op(A)^T).
 * lower: the result is read only on and below its diagonal. */
static void dot_run(const DevKernelArgs *k, Ct c, const DotPlan *p, const DotOperand *a,
                    const DotOperand *b, bool transposed, bool lower, const DevDotEpilogue *epi,
                    float *t, uint8_t *c_out)
{
    CtGemm g = {.c = c, .ta = a->trans, .tb = b->trans, .blas = ct_use_blas(k), .exact = ct_exact(k),
              .m = p->m, .n = p->n, .k = p->k, .lda = a->ld, .ldb = b->ld, .ldc = p->n};
    const DotOperand *first = a, *second = b;
    if (transposed) {
        g = (CtGemm){.c = c, .ta = !b->trans, .tb = !a->trans, .blas = g.blas, .exact = g.exact, .m = p->n, .n = p->m,
                     .k = p->k, .lda = b->ld, .ldb = a->ld, .ldc = p->m};
        first = b;
        second = a;
        lower = false;
    }
    /* One f32 product on a steady B (a weight fed again each step): from
     * its packed form where packed.c keeps one. */
    DevValue *steady = p->b == 1 && c == CT_F32 && g.blas && !g.ta && !g.acc
                           ? steady_operand(k, transposed ? 0 : 1, second)
                           : NULL;
    size_t esz = ct_size(c);
    for (int64_t i = 0; i < p->b; i++)
        gemm_one(&g, lower, first->data + (size_t)batch_offset(&first->batch, i) * esz,
                 second->data + (size_t)batch_offset(&second->batch, i) * esz,
                 c_out + (size_t)(i * p->m * p->n) * esz, epi, t, steady ? k->opt->packed : NULL, steady,
                 i * p->m * p->n);
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
/* The shape operand v is read as: v transposed by perm (dims[i] = v's
 * dims[perm[i]], in dims[]), or v's own (perm NULL). False when perm is
 * not a permutation of v's dims. */
static bool read_shape(const DevValue *v, const int64_t *perm, int32_t nperm, IrShape *s, int64_t *dims)
{
    *s = v->shape;
    if (!perm)
        return true;
    s->dims = dims;
    s->has_layout = false;
    s->minor_to_major = NULL;
    bool seen[IR_MAX_RANK] = {false};
    if (nperm != v->shape.rank)
        return false;
    for (int32_t i = 0; i < nperm; i++) {
        if (perm[i] < 0 || perm[i] >= nperm || seen[perm[i]])
            return false;
        seen[perm[i]] = true;
        s->dims[i] = v->shape.dims[perm[i]];
    }
    return true;
}

static IrStatus dot_into(const DevKernelArgs *k, const IrI64List *const perm[2], const IrShape *tshape,
                         bool lower, const DevDotEpilogue *epi, DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "dot takes two arrays");
    IrShape ls, rs;
    int64_t ldims[IR_MAX_RANK], rdims[IR_MAX_RANK];
    const int64_t *lp = perm[0] ? perm[0]->v : NULL, *rp = perm[1] ? perm[1]->v : NULL;
    if (!read_shape(k->opnd[0], lp, perm[0] ? perm[0]->n : 0, &ls, ldims) ||
        !read_shape(k->opnd[1], rp, perm[1] ? perm[1]->n : 0, &rs, rdims))
        return dev_kernel_error(k, IR_EINPUT, "dot: an operand's transpose is not a permutation of its dims");
    DotPlan p = {0};
    IrStatus st = dot_plan(k, &ls, &rs, &p);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->ins->shape;
    const IrDotDnums *dn = &k->ins->a.dot;
    Ct c = ct_of(os->type);
    if (tshape && (tshape->type != os->type || tshape->rank != os->rank ||
                   ir_shape_elements(tshape) != ir_shape_elements(os)))
        return dev_kernel_error(k, IR_EINTERNAL, "dot: the transposed result's shape does not fit");
    DevValue *r = dev_value_new_uninit(tshape ? tshape : os);
    if (!r)
        return dev_kernel_oom(k, NULL);
    int64_t total = p.b * p.m * p.n;
    if (total == 0) {
        *out = r;
        return IR_OK;
    }
    DotOperand a = {0}, b = {0};
    uint8_t *cbuf = NULL;
    float *t = NULL;
    if ((st = dot_operand(k, c, k->opnd[0], lp, dn->lhs_batch.v, p.nb, p.lfree, p.nlf,
                          dn->lhs_contracting.v, p.nc, &a)) != IR_OK ||
        (st = dot_operand(k, c, k->opnd[1], rp, dn->rhs_batch.v, p.nb, dn->rhs_contracting.v, p.nc,
                          p.rfree, p.nrf, &b)) != IR_OK)
        goto done;
    bool direct = ct_native(c, os->type);
    /* Elementwise consumers alone take any f32 result, however laid out. */
    bool then_only = epi && epi->then && !epi->scaled && !epi->mask && !epi->softmax;
    if (epi && (c != CT_F32 || !direct || (!then_only && (tshape || p.nlf != 1 || p.nrf != 1)))) {
        st = dev_kernel_error(k, IR_EINTERNAL, "dot: an epilogue on a result that is not f32 [batch, M, N]");
        goto done;
    }
    if ((!direct && !(cbuf = ct_scratch(total, ct_size(c)))) ||
        (epi && epi->softmax && !(t = ct_scratch(p.n, sizeof *t)))) {
        st = dev_kernel_oom(k, NULL);
        goto done;
    }
    int64_t *ends = NULL;
    DevDotEpilogue e = epi ? with_kept_ends(epi, p.m, p.n, &ends) : (DevDotEpilogue){0};
    dot_run(k, c, &p, &a, &b, tshape != NULL, lower && p.nlf == 1 && p.nrf == 1, epi ? &e : NULL, t,
            direct ? r->data : cbuf);
    ts_free(ends);
    if (!direct) {
        CtView v = {.rank = 1, .dims = {total}, .stride = {1}};
        ct_unpack(c, os->type, cbuf, &v, r->data);
    }
done:
    ts_free(a.owned);
    ts_free(b.owned);
    ts_free(cbuf);
    ts_free(t);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

/* ---- attention's P.V in the scores' group ----
 *
 * The scores' group (a dot epilogue ending in a softmax) whose one reader
 * is P.V (IrFusionGroup.dot_then): per batch element and block of 64 rows
 * [r0, r1), the block's scores (the causal tiles' columns [0, r1) only)
 * go into a scratch block, through the epilogue, and straight on into
 * out[r0:r1] = P[r0:r1, 0:k] V[0:k], so P [batch, M, N] is never written
 * nor read back. k is r1 where the block's columns [r1, N) are all zeros
 * (a causal softmax's exp(-1e9 - max)) and V's rows a block skips are
 * finite (0 * inf is NaN), else N: the GEMM calls gemm_tri makes for P.V
 * unfused on a causal P, on the same values (the same bits, with a BLAS
 * whose sums do not depend on where the operands sit). */

/* The scores' GEMM of batch element i, block [r0, r1), into pb (row
 * stride g->n): columns [0, r1) where lower, else all; the columns after
 * those written 0 where `zero_rest` (else never read: softmax_row_upto).
 * Returns how many columns it computed. */
static int64_t scores_block(const CtGemm *g, bool lower, const uint8_t *a, const uint8_t *b, const float *kp,
                            float *pb, int64_t r0, int64_t r1, bool zero_rest)
{
    CtGemm s = *g;
    s.m = r1 - r0;
    s.n = lower && g->m > TRI_TILE && r1 < g->n ? r1 : g->n;
    s.ldc = g->n;
    const uint8_t *ab = at(a, g->ta, g->lda, r0, 0, sizeof(float));
    if (!kp || !dev_sgemm_avx512_run_part(kp, g->n, g->k, g->ta, s.m, s.n, s.k, (const float *)(const void *)ab,
                                          g->lda, pb, s.ldc))
        ct_gemm(&s, ab, b, pb);
    for (int64_t r = 0; zero_rest && r < s.m && s.n < g->n; r++)
        memset(pb + r * g->n + s.n, 0, (size_t)(g->n - s.n) * sizeof *pb);
    return s.n;
}

/* The epilogue's softmax over the block's rows [r0, r1) (pb, n columns,
 * scores computed in [0, cols)) for a P.V that reads their columns
 * [0, w) alone: true where every row's columns [w, n) are +0, then never
 * written (softmax_row_upto); false where one is not, and then every row
 * is whole. */
static bool softmax_block_upto(const DevDotEpilogue *e, float *t, float *pb, int64_t r0, int64_t r1, int64_t n,
                               int64_t w, int64_t cols)
{
    bool zero = true;
    for (int64_t r = r0; r < r1; r++) {
        if (softmax_row_upto(e, pb + (r - r0) * n, r, n, t, zero ? w : n, cols) || !zero)
            continue;
        for (int64_t q = r0; q < r; q++) /* their tails: +0, written now */
            memset(pb + (q - r0) * n + w, 0, (size_t)(n - w) * sizeof *pb);
        zero = false;
    }
    return zero;
}

/* The shapes of attention's two dots: the scores [batch, M, N] (k) and
 * P.V (kv: its lhs P [batch..., M, N], batch dims first and in order,
 * contracted over N; its rhs V). */
static IrStatus pv_plan(const DevKernelArgs *k, const DevKernelArgs *kv, const DotPlan *p, const IrShape *vs,
                        DotPlan *pv)
{
    const IrInstr *d = kv->ins;
    const IrShape *ls = &kv->c->instr[d->opnd[0]].shape;
    IrStatus st = dot_plan(kv, ls, vs, pv);
    if (st != IR_OK)
        return st;
    const IrDotDnums *dn = &d->a.dot;
    bool ok = pv->nb == p->nb && pv->b == p->b && pv->m == p->m && pv->k == p->n && pv->nlf == 1 &&
              pv->nrf == 1 && pv->nc == 1 && dn->lhs_contracting.v[0] == ls->rank - 1 &&
              ls->rank == p->nb + 2 && d->shape.type == IR_F32 && vs->type == IR_F32;
    for (int32_t i = 0; ok && i < pv->nb; i++)
        ok = dn->lhs_batch.v[i] == i;
    return ok ? IR_OK : dev_kernel_error(k, IR_EINTERNAL, "dot: P.V does not fit the scores' group");
}

/* One batch element: scores, epilogue and P.V block by block (pb: a
 * block of P, t: the softmax's scratch row). With `packed` (room for
 * op(B) of both products, as sgemm_avx512.c packs it), K and V are packed
 * once here and each block's products read the part they need, where
 * each block packed its part again (K's first r1 rows twice over on
 * average: a tenth of block-infer's attention, BENCHMARKS.md, "Stop 61"),
 * with the bits of the unkept products (which run in that kernel:
 * attention_packs). */
static void attention_one(const CtGemm *g, const CtGemm *gv, bool lower, const DevDotEpilogue *epi,
                          const uint8_t *a, const uint8_t *b, const float *v, float *o, float *pb, float *t,
                          float *packed)
{
    const float *kp = NULL, *vp = NULL;
    if (packed && dev_sgemm_avx512_pack_b_into(packed, g->n, g->k, (const float *)(const void *)b, g->tb, g->ldb)) {
        float *vb = packed + dev_sgemm_avx512_b_floats(g->n, g->k);
        if (dev_sgemm_avx512_pack_b_into(vb, gv->n, gv->k, v, gv->tb, gv->ldb)) {
            kp = packed;
            vp = vb;
        }
    }
    int64_t kk = gv->k, first_end = TRI_TILE < g->m ? TRI_TILE : g->m;
    /* gemm_one's test for a lower zero triangle of P (tri_holds: V's rows
     * the blocks skip finite); P's zeros are checked block by block. */
    bool tri = kk >= 2 * TRI_TILE && g->m == kk && region_is(false, v, gv->tb, gv->ldb, first_end, kk, 0, gv->n);
    for (int64_t r0 = 0; r0 < g->m; r0 += TRI_TILE) {
        int64_t r1 = r0 + TRI_TILE < g->m ? r0 + TRI_TILE : g->m;
        CtGemm s = *gv;
        s.m = r1 - r0;
        /* Where P.V may stop at column r1 under a mask, the block's
         * columns after r1 are neither computed, zeroed, nor checked: the
         * softmax says whether they are +0. */
        bool narrow = tri && r1 < kk && epi->softmax && epi->mask;
        int64_t cols = scores_block(g, lower, a, b, kp, pb, r0, r1, !narrow);
        bool zero_after_r1;
        if (narrow) {
            zero_after_r1 = softmax_block_upto(epi, t, pb, r0, r1, g->n, r1, cols);
        } else {
            epilogue_rows(epi, t, pb, r0, r1, g->n, 0); /* no consumers: P.V reads P */
            zero_after_r1 = tri && r1 < kk && region_is(true, pb, false, g->n, 0, r1 - r0, r1, kk);
        }
        if (zero_after_r1)
            s.k = r1;
        if (!vp || !dev_sgemm_avx512_run_part(vp, gv->n, gv->k, false, s.m, s.n, s.k, pb, s.lda, o + r0 * gv->ldc,
                                              gv->ldc))
            ct_gemm(&s, pb, v, o + r0 * gv->ldc);
    }
}

/* The floats attention_one packs K and V into (plus 64 bytes to align
 * them), or 0 where one of its blocks' products would not run in tessel's
 * own kernel (the probe's small products may go to OpenBLAS, a fixed
 * library computes them, or the loops do), or an operand is not as the
 * packed form reads it: then each block's products go through ct_gemm as
 * before. Every block's products are checked, at the sizes scores_block
 * and attention_one give them (P.V's k: r1 or all). */
static int64_t attention_packs(const CtGemm *g, const CtGemm *gv, bool lower)
{
    if (g->acc || gv->acc || gv->ta || g->k <= 0 || gv->k <= 0 || g->n <= 0 || gv->n <= 0)
        return 0;
    for (int64_t r0 = 0; r0 < g->m; r0 += TRI_TILE) {
        int64_t r1 = r0 + TRI_TILE < g->m ? r0 + TRI_TILE : g->m, mb = r1 - r0;
        int64_t n = lower && g->m > TRI_TILE && r1 < g->n ? r1 : g->n;
        if (!ct_gemm_own_kernel(g, mb * n * g->k) || !ct_gemm_own_kernel(gv, mb * gv->n * gv->k) ||
            (r1 < gv->k && !ct_gemm_own_kernel(gv, mb * gv->n * r1)))
            return 0;
    }
    return (int64_t)(dev_sgemm_avx512_b_floats(g->n, g->k) + dev_sgemm_avx512_b_floats(gv->n, gv->k)) + 16;
}

IrStatus dev_k_dot_attention(const DevKernelArgs *k, const IrI64List *const perm[2], bool lower,
                             const DevDotEpilogue *epi, const DevKernelArgs *kv, const IrI64List *vperm,
                             DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]) || kv->nopnd != 2 ||
        !dev_value_is_array(kv->opnd[1]) || !epi)
        return dev_kernel_error(k, IR_EINPUT, "dot takes two arrays");
    IrShape ls, rs, vs;
    int64_t ldims[IR_MAX_RANK], rdims[IR_MAX_RANK], vdims[IR_MAX_RANK];
    const int64_t *lp = perm[0] ? perm[0]->v : NULL, *rp = perm[1] ? perm[1]->v : NULL, *vp = vperm ? vperm->v : NULL;
    if (!read_shape(k->opnd[0], lp, perm[0] ? perm[0]->n : 0, &ls, ldims) ||
        !read_shape(k->opnd[1], rp, perm[1] ? perm[1]->n : 0, &rs, rdims) ||
        !read_shape(kv->opnd[1], vp, vperm ? vperm->n : 0, &vs, vdims))
        return dev_kernel_error(k, IR_EINPUT, "dot: an operand's transpose is not a permutation of its dims");
    DotPlan p = {0}, pv = {0};
    IrStatus st = dot_plan(k, &ls, &rs, &p);
    if (st == IR_OK)
        st = pv_plan(k, kv, &p, &vs, &pv);
    if (st != IR_OK)
        return st;
    if (k->ins->shape.type != IR_F32 || p.nlf != 1 || p.nrf != 1)
        return dev_kernel_error(k, IR_EINTERNAL, "dot: an epilogue on a result that is not f32 [batch, M, N]");
    DevValue *r = dev_value_new_uninit(&kv->ins->shape);
    if (!r)
        return dev_kernel_oom(k, NULL);
    if (p.b * p.m * pv.n == 0) {
        *out = r;
        return IR_OK;
    }
    const IrDotDnums *dn = &k->ins->a.dot, *dv = &kv->ins->a.dot;
    DotOperand a = {0}, b = {0}, v = {0};
    float *pb = NULL, *t = NULL;
    if ((st = dot_operand(k, CT_F32, k->opnd[0], lp, dn->lhs_batch.v, p.nb, p.lfree, p.nlf, dn->lhs_contracting.v,
                          p.nc, &a)) != IR_OK ||
        (st = dot_operand(k, CT_F32, k->opnd[1], rp, dn->rhs_batch.v, p.nb, dn->rhs_contracting.v, p.nc, p.rfree,
                          p.nrf, &b)) != IR_OK ||
        (st = dot_operand(kv, CT_F32, kv->opnd[1], vp, dv->rhs_batch.v, pv.nb, dv->rhs_contracting.v, pv.nc,
                          pv.rfree, pv.nrf, &v)) != IR_OK)
        goto done;
    int64_t rows = TRI_TILE < p.m ? TRI_TILE : p.m;
    if (!(pb = ct_scratch(rows * p.n, sizeof *pb)) || !(t = ct_scratch(p.n, sizeof *t))) {
        st = dev_kernel_oom(k, NULL);
        goto done;
    }
    CtGemm g = {.c = CT_F32, .ta = a.trans, .tb = b.trans, .blas = ct_use_blas(k), .exact = ct_exact(k), .m = p.m,
                .n = p.n, .k = p.k, .lda = a.ld, .ldb = b.ld, .ldc = p.n};
    CtGemm gv = {.c = CT_F32, .tb = v.trans, .blas = g.blas, .exact = g.exact, .m = p.m, .n = pv.n, .k = pv.k,
                 .lda = p.n, .ldb = v.ld, .ldc = pv.n};
    int64_t *ends = NULL;
    DevDotEpilogue e = with_kept_ends(epi, p.m, p.n, &ends);
    int64_t npk = attention_packs(&g, &gv, lower);
    float *pk = npk ? ct_scratch(npk, sizeof(float)) : NULL; /* without it, each block packs its part */
    float *packed = pk ? (float *)(void *)(((uintptr_t)pk + 63) & ~(uintptr_t)63) : NULL;
    for (int64_t i = 0; i < p.b; i++)
        attention_one(&g, &gv, lower, &e, a.data + (size_t)batch_offset(&a.batch, i) * sizeof(float),
                      b.data + (size_t)batch_offset(&b.batch, i) * sizeof(float),
                      (const float *)(const void *)(v.data + (size_t)batch_offset(&v.batch, i) * sizeof(float)),
                      (float *)(void *)r->data + i * p.m * pv.n, pb, t, packed);
    ts_free(pk);
    ts_free(ends);
done:
    ts_free(a.owned);
    ts_free(b.owned);
    ts_free(v.owned);
    ts_free(pb);
    ts_free(t);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

IrStatus dev_k_dot(const DevKernelArgs *k, DevValue **out)
{
    const IrI64List *none[2] = {NULL, NULL};
    return dot_into(k, none, NULL, false, NULL, out);
}

IrStatus dev_k_dot_fused(const DevKernelArgs *k, const IrI64List *const perm[2], const IrShape *tshape,
                         bool lower, const DevDotEpilogue *epi, DevValue **out)
{
    return dot_into(k, perm, tshape, lower, epi, out);
}
