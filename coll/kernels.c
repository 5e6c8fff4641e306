/*
 * coll_kernels.c: the loops of the collectives' data paths (coll.h): a
 * simple reducer applied across several operands in group order, and
 * copies, each writing one or several destinations, with non-temporal
 * stores for results too big to stay in cache.
 *
 * A combine walks the elements in blocks of BLOCK bytes: the block's
 * result is computed once (source 0 op source 1, then op source 2, ...,
 * each source read once) and then stored to every destination. Where the
 * result is not read again soon (stream), the stores bypass the cache
 * (_mm_stream_si128): no read for ownership, and the caches keep what the
 * next kernel reads. The bits are those of dev_red_combine_array
 * (device/reducer.c) applied in the same order: f32 and f64 add and
 * multiply in their own type round as a double rounded back does (the
 * double holds the exact sum or product of two f32 closely enough that
 * the second rounding never changes it), maximum and minimum are
 * DEV_FMAX / DEV_FMIN (NaN from the left, the left on a tie), integers
 * wrap. Other element types (f16, bf16, f8, pred) go through
 * dev_red_combine_array itself, a block at a time.
 */
#include "coll.h"

#include <assert.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/float_ops.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The fallback's blocks (f16, bf16, f8, pred): BLOCK bytes stay in L1
 * between computing and storing. */
enum { BLOCK = 8192 };

/* The fast loops work a tile at a time: 64 bytes (a cache line, four
 * 16-byte stores), computed in registers from every source, then stored
 * to every destination. */
enum { TILE = 64 };

/* ---- stores ---- */

/* One tile to d: streaming stores (d 16-byte aligned) or ordinary ones. */
static inline void store_tile(void *d, const void *tile, bool nt)
{
#if defined(__SSE2__)
    if (nt) {
        const __m128i *s = tile;
        __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                e = _mm_loadu_si128(s + 3);
        __m128i *o = d;
        _mm_stream_si128(o, a);
        _mm_stream_si128(o + 1, b);
        _mm_stream_si128(o + 2, c);
        _mm_stream_si128(o + 3, e);
        return;
    }
#else
    (void)nt;
#endif
    memcpy(d, tile, TILE);
}

/* One 16-byte vector to d: a streaming store (d 16-byte aligned) or an
 * ordinary one. */
static inline void store_vec(void *d, const void *v, bool nt)
{
#if defined(__SSE2__)
    if (nt) {
        _mm_stream_si128(d, _mm_loadu_si128(v));
        return;
    }
#else
    (void)nt;
#endif
    memcpy(d, v, 16);
}

/* After the last streaming store of a call: make them visible before the
 * caller's barrier tells other threads the data is there. */
static void store_fence(bool stream)
{
#if defined(__SSE2__)
    if (stream)
        _mm_sfence();
#else
    (void)stream;
#endif
}

/* Streaming stores need every destination 16-byte aligned at the same
 * point: the bytes before it (fewer than 16, *head) go the ordinary way.
 * false: the destinations are aligned differently (ordinary stores). */
static bool stream_head(void *const *dst, int32_t ndst, size_t doff, size_t *head)
{
    size_t mis = (uintptr_t)((uint8_t *)dst[0] + doff) & 15;
    for (int32_t k = 1; k < ndst; k++)
        if (((uintptr_t)((uint8_t *)dst[k] + doff) & 15) != mis)
            return false;
    *head = (16 - mis) & 15;
    return true;
}

void coll_copy(void *const *dst, int32_t ndst, size_t doff, const void *src, size_t bytes, bool stream)
{
    size_t head = 0;
    bool nt = false;
#if defined(__SSE2__)
    nt = stream && bytes >= 2 * TILE && stream_head(dst, ndst, doff, &head);
#endif
    const uint8_t *s = src;
    for (int32_t k = 0; k < ndst; k++)
        if (head && (uint8_t *)dst[k] + doff != s)
            memcpy((uint8_t *)dst[k] + doff, s, head);
    size_t o = head;
    if (nt) {
        /* The source read once, a tile at a time, into every destination. */
        for (; o + TILE <= bytes; o += TILE)
            for (int32_t k = 0; k < ndst; k++)
                store_tile((uint8_t *)dst[k] + doff + o, s + o, true);
        store_fence(true);
    }
    for (int32_t k = 0; o < bytes && k < ndst; k++)
        if ((uint8_t *)dst[k] + doff != s)
            memcpy((uint8_t *)dst[k] + doff + o, s + o, bytes - o);
}

/* ---- the reducers, per type ---- */

/* dst[k][doff + i] = src[0][soff + i] OP ... OP src[nsrc-1][soff + i]
 * for i < n, a tile at a time: four 16-byte vectors (GCC's vector
 * extensions) loaded from every source in turn and combined in
 * registers, then stored to every destination (the tile is complete
 * before it is stored: a destination may be a source). nt: streaming
 * stores (every destination 16-byte aligned). */
typedef void (*CombineFn)(void *const *dst, int32_t ndst, int64_t doff, const void *const *src, int32_t nsrc,
                          int64_t soff, int64_t n, bool nt);

/* Vector select: m's lanes all ones pick x, all zeros y. */
#define SEL(MV, V, m, x, y) ((V)((((MV)(m)) & ((MV)(x))) | (~((MV)(m)) & ((MV)(y)))))

#define KERNEL(NAME, T, MT, EXPR, VEXPR)                                               \
    /* Two sources into one destination, ordinary stores: a plain loop      \
     * the compiler vectorizes for the widest unit at hand (AVX-512,        \
     * AVX2, SSE2: DEV_VECTOR_CLONES), which matters where the operands     \
     * are in cache. o may be a or b (element by element). */               \
    DEV_VECTOR_CLONES static void NAME##_pair(T *o, const T *a, const T *b, int64_t n)  \
    {                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                              \
            T x = a[i], y = b[i];                                                      \
            o[i] = (EXPR);                                                             \
        }                                                                              \
    }                                                                                  \
    static void NAME(void *const *dst, int32_t ndst, int64_t doff, const void *const *src, int32_t nsrc,  \
                     int64_t soff, int64_t n, bool nt)                                 \
    {                                                                                  \
        typedef T V __attribute__((vector_size(16)));                                  \
        typedef MT MV __attribute__((vector_size(16)));                                \
        enum { L = 16 / sizeof(T) };                                                   \
        int64_t i = 0;                                                                 \
        if (nsrc == 2) {                                                               \
            /* The common case, one vector at a time straight through. */            \
            const T *a = (const T *)src[0] + soff, *b = (const T *)src[1] + soff;      \
            T *o = (T *)dst[0] + doff;                                                 \
            if (ndst == 1 && !nt) {                                                    \
                NAME##_pair(o, a, b, n);                                               \
                return;                                                                \
            } else if (ndst == 1) {                                                    \
                for (; i + L <= n; i += L) {                                           \
                    V x, y;                                                            \
                    memcpy(&x, a + i, sizeof x);                                       \
                    memcpy(&y, b + i, sizeof y);                                       \
                    x = (VEXPR);                                                       \
                    store_vec(o + i, &x, true);                                        \
                }                                                                      \
            } else {                                                                   \
                for (; i + L <= n; i += L) {                                           \
                    V x, y;                                                            \
                    memcpy(&x, a + i, sizeof x);                                       \
                    memcpy(&y, b + i, sizeof y);                                       \
                    x = (VEXPR);                                                       \
                    for (int32_t k = 0; k < ndst; k++)                                 \
                        store_vec((T *)dst[k] + doff + i, &x, nt);                     \
                }                                                                      \
            }                                                                          \
        }                                                                              \
        for (; i + 4 * L <= n; i += 4 * L) {                                           \
            V r[4], x, y;                                                              \
            memcpy(r, (const T *)src[0] + soff + i, sizeof r);                         \
            for (int32_t j = 1; j < nsrc; j++) {                                       \
                const T *s = (const T *)src[j] + soff + i;                             \
                for (int q = 0; q < 4; q++) {                                          \
                    memcpy(&y, s + q * L, sizeof y);                                   \
                    x = r[q];                                                          \
                    r[q] = (VEXPR);                                                    \
                }                                                                      \
            }                                                                          \
            for (int32_t k = 0; k < ndst; k++)                                         \
                store_tile((T *)dst[k] + doff + i, r, nt);                             \
        }                                                                              \
        (void)sizeof(MV);                                                              \
        for (; i < n; i++) {                                                           \
            T x = ((const T *)src[0])[soff + i];                                       \
            for (int32_t j = 1; j < nsrc; j++) {                                       \
                T y = ((const T *)src[j])[soff + i];                                   \
                x = (EXPR);                                                            \
            }                                                                          \
            for (int32_t k = 0; k < ndst; k++)                                         \
                ((T *)dst[k])[doff + i] = x;                                           \
        }                                                                              \
    }

/* The lane tests of DEV_FMAX / DEV_FMIN. */
#define VFMAX(MV, V) SEL(MV, V, (x != x) | (x >= y), x, y)
#define VFMIN(MV, V) SEL(MV, V, (x != x) | (x <= y), x, y)

KERNEL(f32_add, float, int32_t, DEV_ADD(x, y), DEV_ADD(x, y))
KERNEL(f32_mul, float, int32_t, DEV_MUL(x, y), DEV_MUL(x, y))
KERNEL(f32_max, float, int32_t, DEV_FMAX(x, y), VFMAX(MV, V))
KERNEL(f32_min, float, int32_t, DEV_FMIN(x, y), VFMIN(MV, V))
KERNEL(f64_add, double, int64_t, DEV_ADD(x, y), DEV_ADD(x, y))
KERNEL(f64_mul, double, int64_t, DEV_MUL(x, y), DEV_MUL(x, y))
KERNEL(f64_max, double, int64_t, DEV_FMAX(x, y), VFMAX(MV, V))
KERNEL(f64_min, double, int64_t, DEV_FMIN(x, y), VFMIN(MV, V))

/* Integers: add and multiply wrap (unsigned arithmetic), bitwise ops,
 * max and min in the type's signedness (the left on a tie). The scalar
 * arithmetic is arith.h's (through float_ops.h), as the device kernels'. */
#define INT_KERNELS(P, U, S)                                                           \
    KERNEL(P##_add, U, S, (U)DEV_ADD(x, y), DEV_ADD(x, y))                             \
    KERNEL(P##_mul, U, S, (U)DEV_MUL(x, y), DEV_MUL(x, y))                             \
    KERNEL(P##_and, U, S, (U)DEV_AND(x, y), DEV_AND(x, y))                             \
    KERNEL(P##_or, U, S, (U)DEV_OR(x, y), DEV_OR(x, y))                                \
    KERNEL(P##_xor, U, S, (U)DEV_XOR(x, y), DEV_XOR(x, y))                             \
    KERNEL(P##_smax, S, S, DEV_IMAX(x, y), SEL(MV, V, x >= y, x, y))                   \
    KERNEL(P##_smin, S, S, DEV_IMIN(x, y), SEL(MV, V, x <= y, x, y))                   \
    KERNEL(P##_umax, U, S, DEV_IMAX(x, y), SEL(MV, V, x >= y, x, y))                   \
    KERNEL(P##_umin, U, S, DEV_IMIN(x, y), SEL(MV, V, x <= y, x, y))

INT_KERNELS(i8, uint8_t, int8_t)
INT_KERNELS(i16, uint16_t, int16_t)
INT_KERNELS(i32, uint32_t, int32_t)
INT_KERNELS(i64, uint64_t, int64_t)

static CombineFn int_kernel(int bits, bool is_signed, IrOpcode op)
{
#define PICK(P)                                                                        \
    switch (op) {                                                                      \
    case OP_ADD: return P##_add;                                                       \
    case OP_MULTIPLY: return P##_mul;                                                  \
    case OP_AND: return P##_and;                                                       \
    case OP_OR: return P##_or;                                                         \
    case OP_XOR: return P##_xor;                                                       \
    case OP_MAXIMUM: return is_signed ? P##_smax : P##_umax;                           \
    case OP_MINIMUM: return is_signed ? P##_smin : P##_umin;                           \
    default: return NULL;                                                              \
    }
    switch (bits) {
    case 8: PICK(i8)
    case 16: PICK(i16)
    case 32: PICK(i32)
    case 64: PICK(i64)
    default: return NULL;
    }
#undef PICK
}

/* The fast loop of op on type t, or NULL (then dev_red_combine_array). */
static CombineFn kernel_for(IrOpcode op, IrType t)
{
    switch (t) {
    case IR_F32:
        return op == OP_ADD ? f32_add : op == OP_MULTIPLY ? f32_mul : op == OP_MAXIMUM ? f32_max
               : op == OP_MINIMUM ? f32_min : NULL;
    case IR_F64:
        return op == OP_ADD ? f64_add : op == OP_MULTIPLY ? f64_mul : op == OP_MAXIMUM ? f64_max
               : op == OP_MINIMUM ? f64_min : NULL;
    case IR_S8: case IR_S16: case IR_S32: case IR_S64:
        return int_kernel((int)ir_type_bits(t), true, op);
    case IR_U8: case IR_U16: case IR_U32: case IR_U64:
        return int_kernel((int)ir_type_bits(t), false, op);
    default:
        return NULL;
    }
}

bool coll_can_combine(IrOpcode op, IrType t)
{
    DevRedDom d;
    return dev_red_dom(t, &d) && dev_red_has(d, op);
}

/* The fallback: a block of n elements from offset off combined into out
 * (L1) through dev_red_combine_array, in order. */
static void combine_block(IrOpcode op, IrType t, size_t es, uint8_t *out, const void *const *src, int32_t nsrc,
                          int64_t off, int64_t n)
{
    memcpy(out, (const uint8_t *)src[0] + (size_t)off * es, (size_t)n * es);
    for (int32_t j = 1; j < nsrc; j++)
        dev_red_combine_array(op, t, out, (const uint8_t *)src[j] + (size_t)off * es, n);
}

bool coll_combine(IrOpcode op, IrType t, void *const *dst, int32_t ndst, int64_t doff, const void *const *src,
                     int32_t nsrc, int64_t soff, int64_t count, bool stream)
{
    op = dev_red_canonical(t, op);
    if (nsrc < 1 || ndst < 1 || (nsrc > 1 && !coll_can_combine(op, t)))
        return false;
    size_t es = ir_type_size(t);
    if (nsrc == 1) {
        /* One member: its operand as it is. */
        coll_copy(dst, ndst, (size_t)doff * es, (const uint8_t *)src[0] + (size_t)soff * es, (size_t)count * es,
                     stream);
        return true;
    }
    CombineFn f = kernel_for(op, t);
    if (f) {
        size_t head = 0;
        bool nt = false;
#if defined(__SSE2__)
        nt = stream && stream_head(dst, ndst, (size_t)doff * es, &head) && head % es == 0;
#endif
        int64_t h = nt ? (int64_t)(head / es) : 0;
        h = h < count ? h : count;
        if (h)
            f(dst, ndst, doff, src, nsrc, soff, h, false);
        f(dst, ndst, doff + h, src, nsrc, soff + h, count - h, nt);
        store_fence(nt);
        return true;
    }
    int64_t per = BLOCK / (int64_t)(es ? es : 1);
    _Alignas(64) uint8_t block[BLOCK];
    for (int64_t i = 0; i < count; i += per) {
        int64_t n = count - i < per ? count - i : per;
        combine_block(op, t, es, block, src, nsrc, soff + i, n);
        for (int32_t j = 0; j < ndst; j++)
            memcpy((uint8_t *)dst[j] + (size_t)(doff + i) * es, block, (size_t)n * es);
    }
    return true;
}

/* The sum in group order, then each destination's own addend: a block
 * of BLOCK bytes summed into L1 (the combine's loop), then added to each
 * addend's block on its way to its destination (streaming through a
 * second L1 block where stream). */
#define COMBINE_ADD(NAME, T, SUM, PAIR)                                                                   \
    static void NAME(void *const *dst, int32_t ndst, int64_t doff, const void *const *src, int32_t nsrc,  \
                     int64_t soff, const void *const *add, int64_t count, bool stream)                    \
    {                                                                                                      \
        enum { PER = BLOCK / sizeof(T) };                                                                  \
        _Alignas(64) T sum[PER], out[PER];                                                                 \
        void *to_sum[1] = {sum};                                                                           \
        for (int64_t i = 0; i < count; i += PER) {                                                         \
            int64_t n = count - i < PER ? count - i : PER;                                                 \
            if (nsrc == 1)                                                                                 \
                memcpy(sum, (const T *)src[0] + soff + i, (size_t)n * sizeof(T));                          \
            else                                                                                           \
                SUM(to_sum, 1, 0, src, nsrc, soff + i, n, false);                                          \
            for (int32_t k = 0; k < ndst; k++) {                                                           \
                const T *a = (const T *)add[k] + doff + i;                                                 \
                if (!stream) {                                                                             \
                    PAIR((T *)dst[k] + doff + i, sum, a, n);                                               \
                    continue;                                                                              \
                }                                                                                          \
                PAIR(out, sum, a, n);                                                                      \
                coll_copy(&dst[k], 1, (size_t)(doff + i) * sizeof(T), out, (size_t)n * sizeof(T), true);   \
            }                                                                                              \
        }                                                                                                  \
    }

COMBINE_ADD(f32_sum_add, float, f32_add, f32_add_pair)
COMBINE_ADD(f64_sum_add, double, f64_add, f64_add_pair)

bool coll_combine_add(IrType t, void *const *dst, int32_t ndst, int64_t doff, const void *const *src, int32_t nsrc,
                      int64_t soff, const void *const *add, int64_t count, bool stream)
{
    if (nsrc < 1 || ndst < 1 || (t != IR_F32 && t != IR_F64))
        return false;
    if (t == IR_F32)
        f32_sum_add(dst, ndst, doff, src, nsrc, soff, add, count, stream);
    else
        f64_sum_add(dst, ndst, doff, src, nsrc, soff, add, count, stream);
    return true;
}

void coll_copy_box(size_t esize, int32_t rank, const uint8_t *src, const int64_t *sdims,
                 const int64_t *soff, uint8_t *dst, const int64_t *ddims, const int64_t *doff,
                 const int64_t *ext)
{
    /* callers pass boxes inside both arrays (shard boxes, checked tiles);
     * an empty box (a tile past the end of an uneven dim) may lie anywhere */
#ifndef NDEBUG
    bool empty = false;
    for (int32_t k = 0; k < rank; k++)
        empty |= ext[k] == 0;
    for (int32_t k = 0; !empty && k < rank; k++)
        assert(ext[k] > 0 && soff[k] >= 0 && doff[k] >= 0 && soff[k] + ext[k] <= sdims[k] &&
               doff[k] + ext[k] <= ddims[k]);
#endif
    if (rank == 0) {
        memcpy(dst, src, esize);
        return;
    }
    for (int32_t k = 0; k < rank; k++)
        if (ext[k] <= 0)
            return;
    int64_t sst[IR_MAX_RANK], dst_st[IR_MAX_RANK], idx[IR_MAX_RANK];
    int64_t a = 1, b = 1;
    for (int32_t k = rank - 1; k >= 0; k--) {
        sst[k] = a;
        dst_st[k] = b;
        a *= sdims[k];
        b *= ddims[k];
        idx[k] = 0;
    }
    /* Copy rows of the innermost dim at a time. */
    size_t row = (size_t)ext[rank - 1] * esize;
    for (;;) {
        int64_t so = soff[rank - 1], dof = doff[rank - 1];
        for (int32_t k = 0; k < rank - 1; k++) {
            so += (soff[k] + idx[k]) * sst[k];
            dof += (doff[k] + idx[k]) * dst_st[k];
        }
        memcpy(dst + (size_t)dof * esize, src + (size_t)so * esize, row);
        int32_t k = rank - 2;
        for (; k >= 0; k--) {
            if (++idx[k] < ext[k])
                break;
            idx[k] = 0;
        }
        if (k < 0)
            break;
    }
}

bool coll_stream(int64_t bytes)
{
    return bytes >= COLL_STREAM_BYTES;
}

/* ---- streaming into bound memory: measured once a process ----
 *
 * Whether streaming stores into a device allocator's NUMA-bound memory
 * pay depends on the machine: on the AMD VM of BENCHMARKS.md they ran
 * about 10 times slower than ordinary stores (64 MiB: 21 ms against 2),
 * on the Intel VM that replaced it 2.5 times faster (32 MiB: 2.5 ms
 * against 6; its 260 MiB last-level cache puts glibc's own streaming
 * threshold above such copies, so memcpy reads every line for ownership).
 * It also depends on the size: on the second Intel VM (480 MiB of L3)
 * one thread's 16 MiB copy took 1.6 ms with ordinary stores and 1.9
 * streaming, a 64 MiB copy 7.0 against 5.3. So the first collective of
 * a size class that could stream into bound memory times both ways on a
 * buffer of that class's size from the same allocator (touched first,
 * the fastest of PROBE_ROUNDS each, interleaved), and every later one of the class follows its verdict.
 * The classes double from COLL_STREAM_BYTES; the last, PROBE_CLASSES
 * - 1, takes every larger size and is probed at its lower bound (32 MiB:
 * two buffers of it touched and 6 copies, some 30 ms on that VM, once a
 * process), so a probe never holds more than twice that. Both ways store
 * the same bytes: the choice changes the speed, never a result.
 * The tuning's stream_bound (COLL_STREAM_ON, _OFF) sets the verdict
 * instead; --stats says what the probe decided (coll_stream_verdicts). */
enum { PROBE_CLASSES = COLL_PROBE_CLASSES, PROBE_ROUNDS = 3 };

/* The size class of a collective writing `bytes` (at least
 * COLL_STREAM_BYTES). */
static int probe_class(int64_t bytes)
{
    int c = 0;
    while (c < PROBE_CLASSES - 1 && bytes >= COLL_STREAM_BYTES << (c + 1))
        c++;
    return c;
}

static double probe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 1: streaming stores of `bytes` into a's memory are at least as fast as
 * ordinary ones; -1: slower, or the probe's memory was refused. */
static int probe_bound(DevAllocator *a, size_t bytes)
{
    uint8_t *dst = dev_alloc(a, bytes), *src = dev_alloc(a, bytes);
    int verdict = -1;
    if (dst && src) {
        /* Huge pages, as a device value's buffers have (device/value.c):
         * a 4 KiB page's first touch would cost the probe more than its
         * copies. */
        ir_hint_huge(dst, bytes);
        ir_hint_huge(src, bytes);
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
        double best[2] = {1e30, 1e30}; /* [0] ordinary, [1] streaming */
        void *d[1] = {dst};
        for (int r = 0; r < 2 * PROBE_ROUNDS; r++) {
            double t0 = probe_now();
            coll_copy(d, 1, 0, src, bytes, r % 2 == 1);
            double t = probe_now() - t0;
            best[r % 2] = t < best[r % 2] ? t : best[r % 2];
        }
        verdict = best[1] <= best[0] ? 1 : -1;
    }
    dev_alloc_free(dst);
    dev_alloc_free(src);
    return verdict;
}

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;
static int probe_verdict[PROBE_CLASSES]; /* 0: not measured yet; 1 streams; -1 does not */

static bool bound_streams(int mode, DevAllocator *a, int64_t bytes)
{
    if (mode == COLL_STREAM_ON || mode == COLL_STREAM_OFF)
        return mode == COLL_STREAM_ON;
    int c = probe_class(bytes);
    pthread_mutex_lock(&probe_mu);
    if (!probe_verdict[c])
        probe_verdict[c] = probe_bound(a, (size_t)(COLL_STREAM_BYTES << c));
    bool yes = probe_verdict[c] > 0;
    pthread_mutex_unlock(&probe_mu);
    return yes;
}

bool coll_stream_into(int mode, DevValue *const *out, int32_t nout, int64_t bytes)
{
    if (!coll_stream(bytes))
        return false;
    for (int32_t k = 0; k < nout; k++)
        if (out[k]->alloc)
            return bound_streams(mode, out[k]->alloc, bytes);
    return true;
}

void coll_stream_verdicts(int8_t verdict[COLL_PROBE_CLASSES])
{
    pthread_mutex_lock(&probe_mu);
    for (int c = 0; c < PROBE_CLASSES; c++)
        verdict[c] = (int8_t)probe_verdict[c];
    pthread_mutex_unlock(&probe_mu);
}
