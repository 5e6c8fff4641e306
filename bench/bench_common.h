/*
 * bench_common.h: helpers shared by the benchmark programs and their
 * hand-written baselines in bench/ (header-only, static functions, so a
 * baseline does not link anything of tessel's): a monotonic clock, the
 * median, tessel's deterministic random inputs (docs/cli.md, "Deterministic
 * random inputs", re-implemented here so the baselines see the same
 * numbers as `tessel run --random-inputs SEED` without calling tessel), and
 * a reader for the f32 .npy files tessel writes.
 */
#ifndef TESSEL_BENCH_COMMON_H
#define TESSEL_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline uint64_t bench_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Element i (row-major in the leaf's whole logical shape) of f32 leaf k of
 * `tessel run --random-inputs seed`: h = sm(sm(sm(seed) ^ k) ^ i), then
 * ((h >> 11) * 2^-53) * 2 - 1 rounded to f32. Example from docs/cli.md:
 * seed 7, leaf 0, i 0 gives 0.21878906. */
static inline float bench_random_f32(uint64_t seed, uint64_t leaf, uint64_t i)
{
    uint64_t h = bench_splitmix64(bench_splitmix64(bench_splitmix64(seed) ^ leaf) ^ i);
    return (float)((double)(h >> 11) * 0x1p-53 * 2 - 1);
}

/* Device d's seed of `tessel run --spmd --per-device --random-inputs seed`
 * (docs/cli.md): splitmix64(seed ^ splitmix64(d)); its elements are then
 * bench_random_f32(that seed, leaf, i). */
static inline uint64_t bench_device_seed(uint64_t seed, uint64_t d)
{
    return bench_splitmix64(seed ^ bench_splitmix64(d));
}

/* n floats for a large buffer, allocated as tessel allocates its own
 * (device/value.c, ir/arena.c ir_hint_huge): malloc, then transparent
 * huge pages asked for on the whole pages inside the block when it is 2
 * MiB or more; untouched (the first write pays the page faults). NULL on
 * failure; free() it. */
static inline float *bench_alloc_f32(int64_t n)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    void *p = malloc(bytes);
#ifdef MADV_HUGEPAGE
    if (p && bytes >= ((size_t)2 << 20)) {
        uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return p;
}

/* Read a little-endian f32 .npy (version 1 or 2) into a malloc'd array;
 * *n gets the element count. NULL (with a message on stderr) when the file
 * is missing, not <f4, or truncated. */
static inline float *bench_read_npy_f32(const char *path, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench: cannot open %s\n", path);
        return NULL;
    }
    unsigned char pre[12];
    float *data = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        goto bad;
    size_t hlen = pre[6] == 1 ? (size_t)(pre[8] | pre[9] << 8) : 0;
    if (pre[6] == 2) {
        if (fread(pre + 10, 1, 2, f) != 2)
            goto bad;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    char *hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
        free(hdr);
        goto bad;
    }
    hdr[hlen] = 0;
    int ok = strstr(hdr, "<f4") != NULL;
    /* Element count: the product of the numbers in the shape tuple. */
    int64_t count = 1;
    char *s = strstr(hdr, "'shape'");
    s = s ? strchr(s, '(') : NULL;
    for (char *p = s ? s + 1 : NULL; p && *p && *p != ')'; p++)
        if (*p >= '0' && *p <= '9') {
            count *= strtoll(p, &p, 10);
            p--;
        }
    free(hdr);
    if (!ok || !s)
        goto bad;
    data = malloc((size_t)(count ? count : 1) * sizeof *data);
    if (!data || fread(data, sizeof *data, (size_t)count, f) != (size_t)count)
        goto bad;
    fclose(f);
    *n = count;
    return data;
bad:
    fprintf(stderr, "bench: %s is not a readable f32 .npy\n", path);
    free(data);
    fclose(f);
    return NULL;
}

/* bench_read_npy_f32 of a file that must hold exactly n elements; NULL
 * (with a message naming `who`) otherwise. */
static inline float *bench_read_npy_f32_n(const char *path, int64_t n, const char *who)
{
    int64_t m = 0;
    float *t = bench_read_npy_f32(path, &m);
    if (t && m != n) {
        fprintf(stderr, "%s: %s has %lld elements, expected %lld\n", who, path, (long long)m, (long long)n);
        free(t);
        t = NULL;
    }
    return t;
}

#endif /* TESSEL_BENCH_COMMON_H */
