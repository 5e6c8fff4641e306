/*
 * sgemm_avx512.c: tessel's own f32 GEMM, an AVX-512 register-blocked
 * micro-kernel on packed panels (BLIS's loops), behind cblas_sgemm's
 * signature: one more candidate of the probe (blas_choice.c, issue 34;
 * `--sgemm avx512` fixes it).
 *
 * Why: on the Intel Xeon this project runs on, oneDNN 2.6's f32 GEMM
 * reached 0.69 of the FMA loop's peak at 1024^3, OpenBLAS 0.65, BLIS 0.44,
 * while a plain AVX-512 micro-kernel on L1-resident panels reached 0.80 to
 * 0.83 (BENCHMARKS.md, "tessel's own f32 GEMM"). Only f32 FMAs: every
 * term is the f32 product of the same two elements, summed in f32 along k
 * in order within a KC block; only the summation order differs from other
 * libraries'.
 *
 * How (row-major C = alpha op(A) op(B) + beta C; a column-major product is
 * the row-major product of the transposes, operands swapped): op(B) is
 * packed KC rows by NC columns at a time into panels NR = 16 NV columns
 * wide (row p of a panel: its NR elements, three cache lines; the block
 * stays in L2), a transposed op(A) MC rows by KC at a time into panels of
 * MR rows (column p of a panel: its MR elements). A plain A is read in
 * place, MR rows lda apart, where a block of its rows is whole strips of
 * MR (else packed as the transposed one, by 8 x 8 transposes): its 8 KiB
 * a strip stay in L1 as a panel would, and the transposes cost more than
 * the strided reads (block-infer's step with every product in this kernel
 * 36.1 ms packed, 35.5 in place; BENCHMARKS.md, "Stop 60"). The
 * micro-kernel keeps an MR x NR tile of C in MR * NV zmm accumulators,
 * loads NV vectors of B's panel and broadcasts MR elements of A's per step
 * of k; A's strip stays in L1 while the kernel runs it against every B
 * panel of the block, whose lines it prefetches PREFETCH_B steps ahead,
 * and C's tile is prefetched as its sum starts.
 * Tiles of 8 x 48 beat 12 x 32, 14 x 32 and 6 x 64 on the Intel machine
 * and again on an AMD Zen 5 (BENCHMARKS.md, "Stop 59").
 * Panels are zero-padded to whole tiles, so the kernel always runs whole;
 * C's edges are masked stores (rows past m are not stored, columns past n
 * masked off), so any m, n, k and strides work (a whole tile of a product
 * whose alpha is 1 and beta 0 runs an instantiation with plain stores:
 * tile_whole). The first KC block scales C by beta (beta 0 does not read
 * C: a NaN there is overwritten, as BLAS says), the later ones add to it;
 * alpha scales each block's sum.
 * A caller's DevGemmThen (a dot's elementwise consumers, k_dot.c) runs on
 * each strip of MR rows of a block right after the last KC block stores
 * it, while the strip (up to 24 KiB) is in L1, and hears of each tile.
 *
 * Compiled for AVX-512F by the target attribute, so the build runs on any
 * x86-64; dev_sgemm_avx512 gives the function only where cpuid says
 * AVX-512F and the OS saves the zmm state (xgetbv). One thread a call: the
 * calling one (the probe times it at one BLAS thread only). The packed
 * buffers are a thread's, kept between its calls.
 */
#include "blas.h"

#include <assert.h>
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AVX512_TARGET __attribute__((target("avx512f")))

enum {
    MR = 8,          /* rows of C's tile: broadcasts of A a step (8 x 8 transposes pack A) */
    NV = 3,          /* zmm vectors of a tile's row: loads of B a step */
    NR = 16 * NV,    /* columns of C's tile */
    KC = 256,        /* k a block: an A panel, MR x KC floats (8 KiB), stays in L1 */
    MC = 192,        /* rows of A a block, packed together (B's column blocks outermost) */
    MA = 512,        /* rows of A a block, B kept: the k blocks outermost (512 KiB in L2 beside B's block) */
    NC = 768,        /* columns of B a block: KC x NC floats (768 KiB) in L2 */
    NC_KEPT = 384,   /* columns of a kept B's block: 384 KiB in L2 beside A's 512 KiB */
    PREFETCH_B = 16, /* steps of k ahead that B's panel is fetched into L1 */
    WHOLE_MAX = 4 << 20, /* floats of an unkept B packed whole ahead of its product (16 MiB) */
};
_Static_assert(MC % MR == 0 && MA % MR == 0 && MA >= MC && NC % NR == 0 && NC_KEPT % NR == 0 && MR <= 16,
               "blocks of whole tiles, a panel's column one vector");

/* The packed buffers (a thread's scratch, a kept B) come from ir_big_alloc
 * at a 2 MiB boundary, advised for huge pages, the scratch a whole huge
 * page however small: the kernel walks B's panels, A's block and C across
 * megabytes a call, and in 4 KiB pages a kept 512 x 2048 B took 2 % more
 * time than in 2 MiB ones (both cores busy; BENCHMARKS.md, "Stop 59"). */
#define HUGE_PAGE ((size_t)2 << 20)

static SgemmFn *fallback_fn;
static const char *avx512_why;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;
static pthread_key_t scratch_key, whole_key;
static _Thread_local float *scratch; /* MA x KC of A, then KC x NC of B */
static _Thread_local float *whole;   /* op(B) packed whole for an unkept product (pack_b_whole) */
static _Thread_local size_t whole_floats;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The lanes of a row of 16 that hold columns left..: all 16, or the first
 * `left`, or none. */
static __mmask16 lanes16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

/* C's MR x 16 nv tile at c (rows < rows, the columns mask[j] of vector
 * j) from kc steps of A's panel ap (with lda, A's MR rows in place from
 * ap, lda apart: the same elements, so the same bits) and the first nv
 * vectors of B's panel bp: acc * alpha, plus C * beta when `first`
 * (beta 0: C not read), else plus C. Inlined with a constant nv into tile (all NV) and the narrower
 * tiles of a last panel of 16 or 32 columns (n = 64 would otherwise run
 * a third of its FMAs on padding). */
AVX512_TARGET static inline __attribute__((always_inline)) void
tile_of(int nv, int64_t lda, int64_t kc, const float *restrict ap, const float *restrict bp, float *c, int64_t ldc,
        int rows, const __mmask16 mask[NV], float alpha, float beta, bool first)
{
    __m512 acc[MR][NV];
    for (int i = 0; i < MR && i < rows; i++) /* C's lines on their way while the sum runs */
        for (int j = 0; j < nv; j++)
            _mm_prefetch((const char *)(c + i * ldc + 16 * j), _MM_HINT_T0);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < nv; j++)
            acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m512 b[NV];
        for (int j = 0; j < nv; j++) /* B's panel streams from L2 */
            _mm_prefetch((const char *)(bp + (p + PREFETCH_B) * NR + 16 * j), _MM_HINT_T0);
        for (int j = 0; j < nv; j++)
            b[j] = _mm512_load_ps(bp + p * NR + 16 * j);
#pragma GCC unroll 32
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(lda ? ap[i * lda + p] : ap[p * MR + i]);
            for (int j = 0; j < nv; j++)
                acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(first ? beta : 1.0f);
    bool read = !first || beta != 0.0f;
    for (int i = 0; i < MR && i < rows; i++)
        for (int j = 0; j < nv; j++) {
            float *cij = c + i * ldc + 16 * j;
            __m512 v = _mm512_mul_ps(acc[i][j], va);
            if (read)
                v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[j], cij), v);
            _mm512_mask_storeu_ps(cij, mask[j], v);
        }
}

#define TILE_ARGS                                                                                          \
    int64_t kc, const float *restrict ap, const float *restrict bp, float *c, int64_t ldc, int rows,              \
        const __mmask16 mask[NV], float alpha, float beta, bool first
/* The tiles of 48, 32 and 16 columns, from A's packed panel (lda 0) or
 * from A in place (one instantiation each). */
AVX512_TARGET static void tile(int64_t lda, TILE_ARGS)
{
    if (lda)
        tile_of(NV, lda, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
    else
        tile_of(NV, 0, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
}

AVX512_TARGET static void tile32(int64_t lda, TILE_ARGS)
{
    if (lda)
        tile_of(2, lda, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
    else
        tile_of(2, 0, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
}

AVX512_TARGET static void tile16(int64_t lda, TILE_ARGS)
{
    if (lda)
        tile_of(1, lda, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
    else
        tile_of(1, 0, kc, ap, bp, c, ldc, rows, mask, alpha, beta, first);
}

/* A whole tile (MR rows, NR columns) of a product whose alpha is 1 and
 * beta 0 (a dot's): tile_of with those constants, so its stores are plain
 * (no mask register) and nothing multiplies the sum by alpha (acc * 1 is
 * acc, NaN included: the same bits). The generic tile's masks, rows, alpha
 * and beta at run time cost 2-3 % of run_block's rate on whole tiles (a C
 * program on the AMD machine: 0.95-0.96 of the FMA loop against
 * 0.97-0.99; BENCHMARKS.md, "Stop 61"). Instantiations for last panels
 * of exactly 32 and 16 columns gained nothing measurable (attention's). */
static const __mmask16 whole_mask[NV] = {0xffff, 0xffff, 0xffff};

AVX512_TARGET static void tile_whole(int64_t lda, int64_t kc, const float *restrict ap, const float *restrict bp,
                                     float *c, int64_t ldc, bool first)
{
    if (lda)
        tile_of(NV, lda, kc, ap, bp, c, ldc, MR, whole_mask, 1.0f, 0.0f, first);
    else
        tile_of(NV, 0, kc, ap, bp, c, ldc, MR, whole_mask, 1.0f, 0.0f, first);
}

/* The 8 x 8 block at src (row stride lds) transposed into dst (row
 * stride ldd): dst[q ldd + r] = src[r lds + q]. */
AVX512_TARGET static inline void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd)
{
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

/* `lines` lines of `len` floats at src (stride lds) as the columns of
 * dst (row stride ldd): dst[q ldd + r] = src[r lds + q], 8 x 8 blocks
 * transposed where whole, the rest one by one. */
AVX512_TARGET static void transpose_lines(const float *src, int64_t lds, int64_t lines, int64_t len, float *dst,
                                          int64_t ldd)
{
    int64_t r = 0;
    for (; r + 8 <= lines; r += 8) {
        int64_t q = 0;
        for (; q + 8 <= len; q += 8)
            transpose8(src + r * lds + q, lds, dst + q * ldd + r, ldd);
        for (; q < len; q++)
            for (int64_t i = r; i < r + 8; i++)
                dst[q * ldd + i] = src[i * lds + q];
    }
    for (; r < lines; r++)
        for (int64_t q = 0; q < len; q++)
            dst[q * ldd + r] = src[r * lds + q];
}

/* The PANELS8 panels of MR rows of a transposed op(A) from rows i0 + r..
 * (PANELS8 MR of them, whole) by columns p0.. (kb): each of A's rows
 * p0.. holds them as 64 contiguous floats, four lines read once, where a
 * panel at a time read each line twice, half of it each time, the lines
 * lda apart (x^T of mlp-sgd's weight gradient: its products 2-3 % faster,
 * BENCHMARKS.md, "Stop 60"). */
enum { PANELS8 = 8 };
_Static_assert(PANELS8 * MR == 64, "a group of panels is four lines of a row");

AVX512_TARGET static void pack_a_t8(const float *a, int64_t lda, int64_t i0, int64_t r, int64_t p0, int64_t kb,
                                    float *restrict pa)
{
    for (int64_t p = 0; p < kb; p++) {
        const float *src = a + (p0 + p) * lda + i0 + r;
        for (int q = 0; q < PANELS8 / 2; q++) {
            __m512 v = _mm512_loadu_ps(src + 16 * q);
            _mm256_storeu_ps(pa + (2 * q) * MR * kb + p * MR, _mm512_castps512_ps256(v));
            _mm256_storeu_ps(pa + (2 * q + 1) * MR * kb + p * MR,
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        }
    }
}

/* op(A)'s rows i0.. (mb of them) by columns p0.. (kb) into panels of MR
 * rows, [panel][p][MR], rows past mb zero. */
AVX512_TARGET static void pack_a(const float *a, int64_t lda, bool ta, int64_t i0, int64_t mb, int64_t p0,
                                 int64_t kb, float *restrict pa)
{
    int64_t r = 0;
    for (; ta && r + PANELS8 * MR <= mb; r += PANELS8 * MR, pa += PANELS8 * MR * kb)
        pack_a_t8(a, lda, i0, r, p0, kb, pa);
    for (; r < mb; r += MR, pa += MR * kb) {
        int64_t rows = min64(MR, mb - r);
        if (ta) { /* op(A)(i, p) = a[p lda + i]: a panel's column is contiguous */
            __mmask16 mask = lanes16(rows);
            for (int64_t p = 0; p < kb; p++)
                _mm512_mask_storeu_ps(pa + p * MR, (__mmask16)((1u << MR) - 1),
                                      _mm512_maskz_loadu_ps(mask, a + (p0 + p) * lda + i0 + r));
            continue;
        }
        transpose_lines(a + (i0 + r) * lda + p0, lda, rows, kb, pa, MR);
        for (int64_t p = 0; p < kb && rows < MR; p++)
            for (int64_t i = rows; i < MR; i++)
                pa[p * MR + i] = 0.0f;
    }
}

/* op(B)'s rows p0.. (kb) by columns j0.. (nb) into panels of NR columns,
 * [panel][p][NR], columns past nb zero. */
AVX512_TARGET static void pack_b(const float *b, int64_t ldb, bool tb, int64_t p0, int64_t kb, int64_t j0,
                                 int64_t nb, float *restrict pb)
{
    for (int64_t s = 0; s < nb; s += NR, pb += NR * kb) {
        int64_t cols = min64(NR, nb - s);
        if (!tb) { /* op(B)(p, j) = b[p ldb + j]: a panel's row is contiguous */
            for (int64_t p = 0; p < kb; p++)
                for (int j = 0; j < NV; j++)
                    _mm512_store_ps(pb + p * NR + 16 * j,
                                    _mm512_maskz_loadu_ps(lanes16(cols - 16 * j), b + (p0 + p) * ldb + j0 + s + 16 * j));
            continue;
        }
        transpose_lines(b + (j0 + s) * ldb + p0, ldb, cols, kb, pb, NR);
        for (int64_t p = 0; p < kb && cols < NR; p++)
            for (int64_t j = cols; j < NR; j++)
                pb[p * NR + j] = 0.0f;
    }
}

/* C = beta C where the sum is empty (k 0 or alpha 0); beta 0 stores zeros. */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

static int64_t round_up(int64_t x, int64_t to)
{
    return (x + to - 1) / to * to;
}

/* C's rows i0.. (mb) by columns j0.. (nb) += (alpha) the k block p0 (kb)
 * of A's packed block pa (lda 0) or of A in place (pa its element (i0,
 * p0), rows lda apart; mb whole strips) and B's pb (its panels kstride
 * rows apart: kb, or more where only a block's first kb rows are read),
 * tile by tile (the first k block scales C by beta instead of adding).
 * `then` (the last k block's, else NULL): told of each tile, then given
 * each strip of MR rows. */
AVX512_TARGET static void run_block(int64_t mb, int64_t nb, int64_t kb, int64_t kstride, bool first, const float *pa,
                                    int64_t lda, const float *pb, float *c, int64_t ldc, float alpha, float beta,
                                    const DevGemmThen *then, int64_t i0, int64_t j0)
{
    for (int64_t r = 0; r < mb; r += MR) {
        for (int64_t s = 0; s < nb; s += NR) {
            int64_t cols = nb - s;
            if (cols >= NR && mb - r >= MR && alpha == 1.0f && beta == 0.0f) {
                tile_whole(lda, kb, pa + r * (lda ? lda : kb), pb + s * kstride, c + r * ldc + s, ldc, first);
            } else {
                __mmask16 mask[NV];
                for (int j = 0; j < NV; j++)
                    mask[j] = lanes16(cols - 16 * j);
                (cols <= 16 ? tile16 : cols <= 32 ? tile32 : tile)(lda, kb, pa + r * (lda ? lda : kb), pb + s * kstride,
                                                                   c + r * ldc + s, ldc, (int)min64(MR, mb - r),
                                                                   mask, alpha, beta, first);
            }
            if (then && then->tile)
                then->tile(then->ctx, i0 + r, min64(MR, mb - r), j0 + s, min64(NR, cols));
        }
        if (then) /* the strip is final, in L1 */
            then->fn(then->ctx, c + r * ldc, i0 + r, min64(MR, mb - r), j0, nb, ldc);
    }
}

/* The row-major product in the calling thread's packed buffers pa (MA x
 * KC) and pb (KC x NC); where `kept` is op(B) packed whole (B's kept
 * form) for kn columns and kk rows (n and k, or more: then the product
 * reads the first k rows and n columns of it), its blocks instead of pb:
 * block (p0, j0) at p0 np + kbk j0, np being kn rounded up to whole
 * panels and kbk the block's rows in the kept form (each block is the one
 * pack_b would make, so a kept product has the bits of an unkept one, and
 * the same k blocks from p0 = 0 are summed in the same order).
 * Two loop orders, each tile of C summing its k blocks in order from the
 * same panels either way (the same bits): B's column blocks outermost
 * (BLIS's), A's blocks of MC rows packed (or read in place) once per
 * column block and k block; or, where B is kept, the k blocks outermost
 * and A's blocks of MA rows packed once a product (or read in place),
 * B's kept column blocks (NC_KEPT) the inner loop (A was packed 3 times
 * on n = 2048 the other way: kept products ran
 * 2-5 % faster so, BENCHMARKS.md, gemm49). An unkept B wider than NC is
 * packed whole first into a thread's buffer and run as kept (rowmajor):
 * A is then packed once, B still once (the A-transposed weight gradients
 * of mlp-sgd ran 0.5-1 ms faster of 10; BENCHMARKS.md, "Stop 59"). */
AVX512_TARGET static void multiply(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                                   float *pa, float *pb, const float *kept, int64_t kn, int64_t kk,
                                   const DevGemmThen *then)
{
    if (kept) {
        int64_t np = round_up(kn, NR);
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
            int64_t kb = min64(KC, k - p0), kbk = min64(KC, kk - p0);
            for (int64_t i0 = 0; i0 < m; i0 += MA) {
                int64_t mb = min64(MA, m - i0);
                bool direct = !ta && mb % MR == 0;
                if (!direct)
                    pack_a(a, lda, ta, i0, mb, p0, kb, pa);
                for (int64_t j0 = 0; j0 < n; j0 += NC_KEPT) {
                    int64_t nb = min64(NC_KEPT, n - j0);
                    const float *block = kept + p0 * np + kbk * j0;
                    run_block(mb, nb, kb, kbk, p0 == 0, direct ? a + i0 * lda + p0 : pa, direct ? lda : 0, block,
                              c + i0 * ldc + j0, ldc, alpha, beta, p0 + kb >= k ? then : NULL, i0, j0);
                }
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += NC) {
        int64_t nb = min64(NC, n - j0);
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
            int64_t kb = min64(KC, k - p0);
            pack_b(b, ldb, tb, p0, kb, j0, nb, pb);
            for (int64_t i0 = 0; i0 < m; i0 += MC) {
                int64_t mb = min64(MC, m - i0);
                bool direct = !ta && mb % MR == 0;
                if (!direct)
                    pack_a(a, lda, ta, i0, mb, p0, kb, pa);
                run_block(mb, nb, kb, kb, p0 == 0, direct ? a + i0 * lda + p0 : pa, direct ? lda : 0, pb,
                          c + i0 * ldc + j0, ldc, alpha, beta, p0 + kb >= k ? then : NULL, i0, j0);
            }
        }
    }
}

static void scratch_free(void *p)
{
    ir_big_free(p);
}

/* Whether the CPU has AVX-512F and the OS saves the zmm state (XCR0's
 * SSE, AVX, opmask and both zmm halves: bits 1, 2, 5, 6, 7). */
static void avx512_check(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX512F)) {
        avx512_why = "avx512: the CPU has no AVX-512F";
        return;
    }
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) {
        avx512_why = "avx512: the OS does not save the vector state (no OSXSAVE)";
        return;
    }
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6) != 0xe6) {
        avx512_why = "avx512: the OS does not save the zmm state (XCR0)";
        return;
    }
    if (pthread_key_create(&scratch_key, scratch_free) != 0 || pthread_key_create(&whole_key, scratch_free) != 0) {
        avx512_why = "avx512: no thread key for its buffers";
        return;
    }
    avx512_why = NULL;
}

/* The calling thread's packed buffers, made at its first call (NULL:
 * no memory). */
static float *scratch_of(void)
{
    if (!scratch) {
        /* B's prefetches run up to PREFETCH_B rows past its last panel */
        size_t bytes = (size_t)(MA * KC + KC * NC + PREFETCH_B * NR) * sizeof(float);
        scratch = ir_big_alloc(bytes < HUGE_PAGE ? HUGE_PAGE : bytes);
        if (scratch)
            pthread_setspecific(scratch_key, scratch);
    }
    return scratch;
}

/* op(B) (k x n) packed whole into buf: k x round_up(n, NR) floats, block
 * (p0, j0) at p0 np + kb j0 (multiply's kept form). */
AVX512_TARGET static void pack_b_whole(const float *b, int64_t ldb, bool tb, int64_t n, int64_t k, float *buf)
{
    int64_t np = round_up(n, NR);
    for (int64_t j0 = 0; j0 < n; j0 += NC)
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
            int64_t kb = min64(KC, k - p0);
            pack_b(b, ldb, tb, p0, kb, j0, min64(NC, n - j0), buf + p0 * np + kb * j0);
        }
}

/* The calling thread's buffer for op(B) packed whole, grown to `floats`
 * (NULL: no memory; the smaller one it had is kept). */
static float *whole_of(size_t floats)
{
    if (whole_floats < floats) {
        float *w = ir_big_alloc(floats * sizeof(float));
        if (!w)
            return NULL;
        ir_big_free(whole);
        whole = w;
        whole_floats = floats;
        pthread_setspecific(whole_key, whole);
    }
    return whole;
}

static bool rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc, const DevGemmThen *then)
{
    pthread_once(&avx512_once, avx512_check);
    if (avx512_why)
        return false;
    if (m <= 0 || n <= 0)
        return true;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        if (then)
            then->fn(then->ctx, c, 0, m, 0, n, ldc);
        return true;
    }
    if (!scratch_of())
        return false;
    /* Wider than a block of B's columns: B's blocks outermost would pack
     * A once per block, so B is packed whole first and the product runs
     * as a kept one, A packed once (the same bits either way). */
    size_t floats = (size_t)(k * round_up(n, NR) + PREFETCH_B * NR);
    float *kept = n > NC && floats <= WHOLE_MAX ? whole_of(floats) : NULL;
    if (kept)
        pack_b_whole(b, ldb, tb, n, k, kept);
    multiply(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch, scratch + MA * KC, kept, n, k, then);
    return true;
}

bool dev_sgemm_avx512_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    return rowmajor(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

bool dev_sgemm_avx512_rowmajor_then(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                    const float *b, int64_t ldb, float *c, int64_t ldc, const DevGemmThen *then)
{
    return rowmajor(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, then);
}

/* op(B) packed whole, kept while B's buffer is unchanged (packed.c). */
struct DevSgemmAvx512B {
    int64_t n, k;
    float *buf; /* k x round_up(n, NR) floats in pack_b's blocks, then PREFETCH_B * NR */
};

DevSgemmAvx512B *dev_sgemm_avx512_pack_b(int64_t n, int64_t k, const float *b, bool tb, int64_t ldb)
{
    pthread_once(&avx512_once, avx512_check);
    if (avx512_why || n <= 0 || k <= 0)
        return NULL;
    int64_t np = round_up(n, NR);
    DevSgemmAvx512B *p = malloc(sizeof *p);
    float *buf = ir_big_alloc((size_t)(k * np + PREFETCH_B * NR) * sizeof(float));
    if (!p || !buf) {
        free(p);
        ir_big_free(buf);
        return NULL;
    }
    *p = (DevSgemmAvx512B){.n = n, .k = k, .buf = buf};
    pack_b_whole(b, ldb, tb, n, k, buf);
    return p;
}

bool dev_sgemm_avx512_run_b_then(const DevSgemmAvx512B *p, int64_t m, const float *a, int64_t lda, float *c,
                                 int64_t ldc, const DevGemmThen *then)
{
    if (m <= 0)
        return true;
    if (!scratch_of())
        return false;
    multiply(false, false, m, p->n, p->k, 1.0f, a, lda, NULL, 0, 0.0f, c, ldc, scratch, NULL, p->buf, p->n, p->k,
             then);
    return true;
}

bool dev_sgemm_avx512_run_b(const DevSgemmAvx512B *p, int64_t m, const float *a, int64_t lda, float *c, int64_t ldc)
{
    return dev_sgemm_avx512_run_b_then(p, m, a, lda, c, ldc, NULL);
}

size_t dev_sgemm_avx512_b_floats(int64_t n, int64_t k)
{
    return (size_t)(k * round_up(n, NR) + PREFETCH_B * NR);
}

bool dev_sgemm_avx512_pack_b_into(float *buf, int64_t n, int64_t k, const float *b, bool tb, int64_t ldb)
{
    pthread_once(&avx512_once, avx512_check);
    if (avx512_why || n <= 0 || k <= 0 || (uintptr_t)buf % 64)
        return false;
    pack_b_whole(b, ldb, tb, n, k, buf);
    return true;
}

bool dev_sgemm_avx512_run_part(const float *packed, int64_t kn, int64_t kk, bool ta, int64_t m, int64_t n, int64_t k,
                               const float *a, int64_t lda, float *c, int64_t ldc)
{
    assert(n <= kn && k <= kk);
    if (m <= 0 || n <= 0 || k <= 0 || !scratch_of())
        return false;
    multiply(ta, false, m, n, k, 1.0f, a, lda, NULL, 0, 0.0f, c, ldc, scratch, NULL, packed, kn, kk, NULL);
    return true;
}

size_t dev_sgemm_avx512_b_bytes(const DevSgemmAvx512B *p)
{
    return p ? (size_t)(p->k * round_up(p->n, NR) + PREFETCH_B * NR) * sizeof(float) : 0;
}

void dev_sgemm_avx512_b_free(DevSgemmAvx512B *p)
{
    if (p)
        ir_big_free(p->buf);
    free(p);
}

double dev_sgemm_avx512_tile_flops(int64_t reps)
{
    enum { K = 128 }; /* A's panel 4 KiB and B's 24 KiB: both in L1 */
    pthread_once(&avx512_once, avx512_check);
    float *buf = avx512_why ? NULL : aligned_alloc(64, (size_t)(MR * K + NR * K + PREFETCH_B * NR + MR * NR) * 4);
    if (!buf)
        return 0;
    float *ap = buf, *bp = ap + MR * K, *c = bp + NR * K + PREFETCH_B * NR;
    for (int64_t i = 0; i < MR * K + NR * K + PREFETCH_B * NR + MR * NR; i++)
        buf[i] = (float)(i % 7) * 0x1p-10f;
    __mmask16 mask[NV];
    for (int j = 0; j < NV; j++)
        mask[j] = 0xffff;
    for (int64_t r = 0; r < reps; r++)
        tile(0, K, ap, bp, c, NR, MR, mask, 1.0f, 1.0f, false);
    /* the sums read, so the calls are not dead */
    volatile float sink = c[0];
    (void)sink;
    free(buf);
    return 2.0 * MR * NR * K * (double)reps;
}

static void sgemm_avx512(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                         int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    /* column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T */
    bool done = order == CblasRowMajor
                    ? dev_sgemm_avx512_rowmajor(ta != CblasNoTrans, tb != CblasNoTrans, m, n, k, alpha, a, lda, b,
                                                ldb, beta, c, ldc)
                    : dev_sgemm_avx512_rowmajor(tb != CblasNoTrans, ta != CblasNoTrans, n, m, k, alpha, b, ldb, a,
                                                lda, beta, c, ldc);
    if (!done)
        fallback_fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool dev_sgemm_avx512_is(SgemmFn *f)
{
    return f && f == sgemm_avx512;
}

SgemmFn *dev_sgemm_avx512(SgemmFn *fallback, const char **why)
{
    pthread_once(&avx512_once, avx512_check);
    if (avx512_why) {
        *why = avx512_why;
        return NULL;
    }
    fallback_fn = fallback;
    return sgemm_avx512;
}
