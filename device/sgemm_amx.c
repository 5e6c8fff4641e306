/*
 * sgemm_amx.c: the f32 GEMM as three bf16 products on Intel AMX's tiles
 * (bf16x3), behind cblas_sgemm's signature (`--sgemm amx-bf16x3`).
 *
 * Why: a core with AMX (Sapphire Rapids and later) multiplies bf16 tiles
 * at 1024 FLOPs a cycle where AVX-512 does 64 f32 FLOPs, so an f32 product
 * at the FMA peak is not at the core's peak (BENCHMARKS.md, "AMX: the
 * floor below the FMA peak"). Each f32 operand is split into its bf16
 * rounding hi and the bf16 rounding lo of what that leaves, x = hi + lo
 * within 2^-16 |x|, and C = Ahi Bhi + Alo Bhi + Ahi Blo, accumulated in f32
 * by the tiles. The dropped Alo Blo and the splits' remainders are about
 * 2^-16 of each term, so a sum is within a few f32 roundings of the f32
 * product's (JAX calls this precision HIGH); not the bits of an f32
 * library, so only where the caller asks for it, never the probe's pick,
 * and never for a dot that asks for HIGHEST (contract.c's ct_exact).
 * The tiles treat subnormal inputs as zero (values under 2^-126, and the lo
 * parts of values under about 2^-110). A product with an infinite or NaN
 * element, or one beyond bf16's largest (3.39e38), goes to the fallback
 * (found while splitting): inf times a low part of 0 would be NaN.
 *
 * How: op(A) is split into two row-major bf16 copies (rows padded to a
 * multiple of 32, k to a multiple of 32, and the row stride one cache line
 * longer, so that a tile's 16 rows do not share L1 sets), op(B) into two
 * copies in the tiles' VNNI layout: panels of 16 columns whose rows hold 16
 * pairs (B(2q, j), B(2q + 1, j)), 64 bytes, one tile row. Each 32 x 32 block
 * of C is 4 accumulator tiles over the whole k, the 3 products at each step
 * (C is written once); blocks go panel by panel within a band of rows whose copies fit in
 * BAND_BYTES (the L2), so each panel is read once a band. The copies live
 * in a buffer per thread kept between calls (fresh pages each call cost as
 * much as the copying). Products under AMX_MIN_MACS multiply-adds, summing
 * fewer than AMX_MIN_K terms (one attention head's scores, k = 64: 57
 * GFLOP/s against OpenBLAS's 91, `gemm_bench --layouts`), or thinner than
 * a tile, go to the f32 fallback (OpenBLAS): there the copies and C's
 * stores cost more than the tiles save. One thread: the calling one.
 */
#include "blas.h"

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

enum {
    TILE_ROWS = 16,        /* rows of a tile */
    TILE_K = 32,           /* bf16 of k in a row of an A tile */
    BLOCK = 32,            /* rows and columns of C per 4 accumulator tiles */
    BAND_BYTES = 1 << 20,  /* a band of rows' two A copies */
    AMX_MIN_MACS = 1 << 18, /* smaller products: the fallback */
    AMX_MIN_K = 128,        /* shorter sums: the fallback (the copies and C's stores outweigh the tiles) */
    ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18,
};

/* The layout _tile_loadconfig reads (palette 1). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

static SgemmFn *fallback_fn;
static const char *amx_why;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static pthread_key_t scratch_key;
static _Thread_local struct {
    uint16_t *buf;
    size_t bytes;
} scratch;

/* The split of 16 f32 lanes into bf16 high and low parts; the lanes whose
 * high part is not finite (an infinite or NaN x, or one that overflows
 * bf16) set in *odd: there the three products would not be f32's (inf
 * times a low part of 0 is NaN), so the caller leaves the product to f32. */
AMX_TARGET static inline void split16(__m512 x, __m256i *hi, __m256i *lo, __mmask16 *odd)
{
    __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16), exponent = _mm512_set1_epi32(0x7f800000);
    *odd |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    *hi = h;
    *lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, _mm512_castsi512_ps(bits)));
}

static __mmask16 lanes16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

/* op(A) (m x k) into hi and lo, row-major, row stride ld bf16; rows m..mp
 * and columns k..kp zero. False where an element is not finite in bf16. */
AMX_TARGET static bool pack_a(const float *a, int64_t lda, bool ta, int64_t m, int64_t k, int64_t mp,
                              int64_t kp, int64_t ld, uint16_t *hi, uint16_t *lo)
{
    __mmask16 odd = 0;
    if (!ta) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < kp; j += 16) {
                __m256i h, l;
                split16(_mm512_maskz_loadu_ps(lanes16(k - j), a + i * lda + j), &h, &l, &odd);
                _mm256_storeu_si256((__m256i *)(hi + i * ld + j), h);
                _mm256_storeu_si256((__m256i *)(lo + i * ld + j), l);
            }
    } else {
        /* A(i, j) = a[j * lda + i]: 16 of a column of op(A) gathered a load
         * (the 16 rows of a they come from stay in L1 along i). */
        __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32((int)lda));
        for (int64_t j = 0; j < kp; j += 16) {
            __mmask16 mask = lanes16(k - j);
            for (int64_t i = 0; i < m; i++) {
                __m256i h, l;
                split16(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx, a + (mask ? j * lda : 0) + i, 4),
                        &h, &l, &odd);
                _mm256_storeu_si256((__m256i *)(hi + i * ld + j), h);
                _mm256_storeu_si256((__m256i *)(lo + i * ld + j), l);
            }
        }
    }
    for (int64_t i = m; i < mp; i++) {
        memset(hi + i * ld, 0, (size_t)kp * 2);
        memset(lo + i * ld, 0, (size_t)kp * 2);
    }
    return !odd;
}

/* Two rows of 16 f32 (k even and odd) as one VNNI tile row of pairs. */
AMX_TARGET static inline __m512i pairs(__m256i even, __m256i odd)
{
    return _mm512_or_si512(_mm512_cvtepu16_epi32(even), _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
}

/* op(B) (k x n) into hi and lo in VNNI panels of kp / 2 rows of 32 bf16
 * (panel p: columns 16p to 16p + 15); rows k..kp and columns n..np zero.
 * False where an element is not finite in bf16. */
AMX_TARGET static bool pack_b(const float *b, int64_t ldb, bool tb, int64_t k, int64_t n, int64_t kp,
                              int64_t np, uint16_t *hi, uint16_t *lo)
{
    int64_t panel = kp * 16, half = k / 2;
    __mmask16 odd = 0;
    if (!tb) {
        for (int64_t p = 0; p < np / 16; p++) {
            __mmask16 mask = lanes16(n - p * 16);
            const float *col = b + (mask ? p * 16 : 0);
            for (int64_t q = 0; q < kp / 2; q++) {
                __m512 x0 = _mm512_maskz_loadu_ps(2 * q < k ? mask : 0, col + (2 * q < k ? 2 * q * ldb : 0));
                __m512 x1 = _mm512_maskz_loadu_ps(2 * q + 1 < k ? mask : 0,
                                                  col + (2 * q + 1 < k ? (2 * q + 1) * ldb : 0));
                __m256i h0, l0, h1, l1;
                split16(x0, &h0, &l0, &odd);
                split16(x1, &h1, &l1, &odd);
                _mm512_storeu_si512(hi + p * panel + q * 32, pairs(h0, h1));
                _mm512_storeu_si512(lo + p * panel + q * 32, pairs(l0, l1));
            }
        }
        return !odd;
    }
    /* B(q, j) = b[j * ldb + q]: a pair of k is 8 contiguous bytes of b, so a
     * tile row (16 columns' pairs) is two gathers of 8 pairs; an odd k's
     * last element, and the rows past k, are filled one by one. */
    __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32((int)ldb));
    for (int64_t p = 0; p < np / 16; p++) {
        int64_t j0 = p * 16, left = n - j0;
        __mmask8 m0 = (__mmask8)lanes16(left), m1 = (__mmask8)lanes16(left - 8);
        for (int64_t q = 0; q < kp / 2; q++) {
            __m512 x0, x1;
            if (q < half) {
                const double *at = (const double *)(const void *)(b + (m0 ? j0 * ldb + 2 * q : 0));
                x0 = _mm512_castpd_ps(_mm512_mask_i32gather_pd(_mm512_setzero_pd(), m0, idx, at, 4));
                x1 = _mm512_castpd_ps(
                    _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m1, idx, m1 ? at + 4 * ldb : at, 4));
            } else {
                float t[32] = {0};
                for (int64_t j = 0; j < 16 && j < left && 2 * q < k; j++)
                    t[2 * j] = b[(j0 + j) * ldb + 2 * q];
                x0 = _mm512_loadu_ps(t);
                x1 = _mm512_loadu_ps(t + 16);
            }
            __m256i h0, l0, h1, l1;
            split16(x0, &h0, &l0, &odd);
            split16(x1, &h1, &l1, &odd);
            _mm512_storeu_si512(hi + p * panel + q * 32, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
            _mm512_storeu_si512(lo + p * panel + q * 32, _mm512_inserti64x4(_mm512_castsi256_si512(l0), l1, 1));
        }
    }
    return !odd;
}

/* rows x cols of C (at most 32 x 32) = alpha acc + beta C (C not read
 * where beta is 0, as BLAS does). */
AMX_TARGET static void store_block(const float *acc, float *c, int64_t ldc, int64_t rows, int64_t cols,
                                   float alpha, float beta)
{
    __mmask16 m0 = lanes16(cols), m1 = lanes16(cols - 16);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int64_t i = 0; i < rows; i++) {
        __m512 x0 = _mm512_mul_ps(va, _mm512_load_ps(acc + i * BLOCK));
        __m512 x1 = _mm512_mul_ps(va, _mm512_load_ps(acc + i * BLOCK + 16));
        float *row = c + i * ldc;
        if (beta != 0.0f) {
            x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), x0);
            x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, m1 ? row + 16 : row), x1);
        }
        _mm512_mask_storeu_ps(row, m0, x0);
        _mm512_mask_storeu_ps(m1 ? row + 16 : row, m1, x1);
    }
}

/* C (m x n, row-major) = alpha (Ahi Bhi + Alo Bhi + Ahi Blo) + beta C. */
AMX_TARGET static void multiply(int64_t m, int64_t n, int64_t kp, int64_t ld, const uint16_t *ahi,
                                const uint16_t *alo, const uint16_t *bhi, const uint16_t *blo, float alpha,
                                float beta, float *c, int64_t ldc)
{
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = TILE_ROWS;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    int64_t panel = kp * 16, stride = ld * 2;
    int64_t band = BAND_BYTES / (4 * ld) / BLOCK * BLOCK;
    if (band < BLOCK)
        band = BLOCK;
    float acc[BLOCK * BLOCK] __attribute__((aligned(64)));
    for (int64_t i1 = 0; i1 < m; i1 += band) {
        int64_t i2 = i1 + band < m ? i1 + band : m;
        for (int64_t j0 = 0; j0 < n; j0 += BLOCK)
            for (int64_t i0 = i1; i0 < i2; i0 += BLOCK) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                /* the three products interleaved at each step of k: A's hi
                 * tiles serve two, B's hi tiles two, so 10 loads feed 12
                 * products (12 when each pass ran the whole k: 0.87 of the
                 * time, BENCHMARKS.md "AMX") */
                const uint16_t *h0 = ahi + i0 * ld, *h1 = h0 + TILE_ROWS * ld;
                const uint16_t *l0 = alo + i0 * ld, *l1 = l0 + TILE_ROWS * ld;
                const uint16_t *bh0 = bhi + (j0 / 16) * panel, *bh1 = bh0 + panel;
                const uint16_t *bl0 = blo + (j0 / 16) * panel, *bl1 = bl0 + panel;
                for (int64_t kk = 0; kk < kp; kk += TILE_K) {
                    _tile_loadd(4, h0 + kk, stride); /* Ahi Bhi */
                    _tile_loadd(6, bh0 + kk * 16, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_loadd(7, bh1 + kk * 16, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_loadd(5, h1 + kk, stride);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                    _tile_loadd(6, bl0 + kk * 16, 64); /* Ahi Blo */
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_loadd(7, bl1 + kk * 16, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(3, 5, 7);
                    _tile_loadd(4, l0 + kk, stride); /* Alo Bhi */
                    _tile_loadd(6, bh0 + kk * 16, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_loadd(7, bh1 + kk * 16, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_loadd(5, l1 + kk, stride);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, acc, BLOCK * 4);
                _tile_stored(1, acc + 16, BLOCK * 4);
                _tile_stored(2, acc + TILE_ROWS * BLOCK, BLOCK * 4);
                _tile_stored(3, acc + TILE_ROWS * BLOCK + 16, BLOCK * 4);
                store_block(acc, c + i0 * ldc + j0, ldc, m - i0 < BLOCK ? m - i0 : BLOCK,
                            n - j0 < BLOCK ? n - j0 : BLOCK, alpha, beta);
            }
    }
    _tile_release();
}

static int64_t round_up(int64_t x, int64_t to)
{
    return (x + to - 1) / to * to;
}

static void scratch_free(void *p)
{
    free(p);
}

/* Whether the CPU has AMX's bf16 tiles and AVX-512's bf16 conversions, and
 * the kernel lets this process use the tiles (Linux asks each process to
 * request their state: arch_prctl, 5.16 on). */
static void amx_check(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bf16")) {
        amx_why = "amx-bf16x3: the CPU has no AVX-512 with bf16 conversions";
        return;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) {
        amx_why = "amx-bf16x3: the CPU has no AMX bf16 tiles";
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        amx_why = "amx-bf16x3: the kernel refused the AMX tile state (arch_prctl)";
        return;
    }
    if (pthread_key_create(&scratch_key, scratch_free) != 0) {
        amx_why = "amx-bf16x3: no thread key for its buffers";
        return;
    }
    amx_why = NULL;
}

/* The thread's buffer of at least `bytes`, kept for its next calls; NULL
 * where it cannot be had. */
static uint16_t *scratch_of(size_t bytes)
{
    if (scratch.bytes < bytes) {
        uint16_t *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p)
            return NULL;
        free(scratch.buf);
        scratch.buf = p;
        scratch.bytes = bytes;
        pthread_setspecific(scratch_key, p);
    }
    return scratch.buf;
}

bool dev_sgemm_amx_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    pthread_once(&amx_once, amx_check);
    if (amx_why)
        return false;
    int64_t mp = round_up(m, BLOCK), np = round_up(n, BLOCK), kp = round_up(k, TILE_K), ld = kp + 32;
    uint16_t *ahi = scratch_of((size_t)(2 * mp * ld + 2 * np * kp) * sizeof(uint16_t));
    if (!ahi)
        return false;
    uint16_t *alo = ahi + mp * ld, *bhi = alo + mp * ld, *blo = bhi + np * kp;
    if (!pack_a(a, lda, ta, m, k, mp, kp, ld, ahi, alo) || !pack_b(b, ldb, tb, k, n, kp, np, bhi, blo))
        return false;
    multiply(m, n, kp, ld, ahi, alo, bhi, blo, alpha, beta, c, ldc);
    return true;
}

/* B's two copies, made once (packed.c keeps them while B's buffer is
 * unchanged). */
struct DevSgemmAmxB {
    int64_t n, k, kp, np;
    uint16_t *hi, *lo;
};

DevSgemmAmxB *dev_sgemm_amx_pack_b(int64_t n, int64_t k, const float *b, bool tb, int64_t ldb)
{
    pthread_once(&amx_once, amx_check);
    /* the shapes sgemm_amx leaves to the fallback are not kept either, so
     * that a kept product has the bits of an unkept one */
    if (amx_why || n < TILE_ROWS || k < AMX_MIN_K)
        return NULL;
    int64_t np = round_up(n, BLOCK), kp = round_up(k, TILE_K);
    DevSgemmAmxB *p = malloc(sizeof *p);
    uint16_t *buf = aligned_alloc(64, (size_t)(2 * np * kp) * sizeof(uint16_t));
    if (!p || !buf) {
        free(p);
        free(buf);
        return NULL;
    }
    *p = (DevSgemmAmxB){.n = n, .k = k, .kp = kp, .np = np, .hi = buf, .lo = buf + np * kp};
    if (!pack_b(b, ldb, tb, k, n, kp, np, p->hi, p->lo)) {
        dev_sgemm_amx_b_free(p);
        return NULL;
    }
    return p;
}

bool dev_sgemm_amx_run_b(const DevSgemmAmxB *p, int64_t m, const float *a, int64_t lda, float *c, int64_t ldc)
{
    if (m < TILE_ROWS || m * p->n * p->k < AMX_MIN_MACS)
        return false;
    int64_t mp = round_up(m, BLOCK), ld = p->kp + 32;
    uint16_t *ahi = scratch_of((size_t)(2 * mp * ld) * sizeof(uint16_t));
    if (!ahi)
        return false;
    uint16_t *alo = ahi + mp * ld;
    if (!pack_a(a, lda, false, m, p->k, mp, p->kp, ld, ahi, alo))
        return false;
    multiply(m, p->n, p->kp, ld, ahi, alo, p->hi, p->lo, 1.0f, 0.0f, c, ldc);
    return true;
}

size_t dev_sgemm_amx_b_bytes(const DevSgemmAmxB *p)
{
    return p ? (size_t)(2 * p->np * p->kp) * sizeof(uint16_t) : 0;
}

void dev_sgemm_amx_b_free(DevSgemmAmxB *p)
{
    if (p)
        free(p->hi);
    free(p);
}

static void sgemm_amx(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                      int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc)
{
    bool small = m < TILE_ROWS || n < TILE_ROWS || k < AMX_MIN_K || (int64_t)m * n * k < AMX_MIN_MACS;
    /* column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T */
    bool done = !small && (order == CblasRowMajor
                               ? dev_sgemm_amx_rowmajor(ta != CblasNoTrans, tb != CblasNoTrans, m, n, k, alpha, a,
                                                        lda, b, ldb, beta, c, ldc)
                               : dev_sgemm_amx_rowmajor(tb != CblasNoTrans, ta != CblasNoTrans, n, m, k, alpha, b,
                                                        ldb, a, lda, beta, c, ldc));
    if (!done)
        fallback_fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

SgemmFn *dev_sgemm_amx(SgemmFn *fallback, const char **why)
{
    pthread_once(&amx_once, amx_check);
    if (amx_why) {
        *why = amx_why;
        return NULL;
    }
    fallback_fn = fallback;
    return sgemm_amx;
}
