/*
 * elementwise_base.c: the baseline of the `elementwise` benchmark: STREAM's
 * triad a[i] = b[i] + s * c[i] over three f32[N] arrays, one thread (a
 * one-device `tessel run` executes on one thread), and the check of
 * tessel's result of bench/gen.py's elementwise module.
 *
 * `elementwise_base N REPS` prints `stream triad GB/s` for the median of
 * REPS timed triads after one warm-up, counting 3 * N * 4 bytes a triad as
 * STREAM does (two reads, one write). The driver runs it between tessel's
 * runs (one triad measurement per tessel run, interleaved).
 *
 * `elementwise_base N --check SEED FILE.npy` recomputes the module's chain
 * from the random inputs (x leaf 0, y leaf 1):
 *     t1 = x + y; t2 = t1 * x; t3 = t2 - y; t4 = max(t3, x); t5 = t4 * t4;
 *     t6 = t5 + y; t7 = -t6; t8 = |t7|
 * in f32, one rounding per op as tessel's kernels do, and requires tessel's
 * output to match within 1 ulp-ish (1e-6 relative). Exit 1 otherwise.
 *
 * `elementwise_base N --sum SEED` prints `sum S`: the double-precision sum
 * of random leaf 0 of f32[N] (the check of the `memory` benchmark's
 * reduce).
 */
#include "bench_common.h"

#include <math.h>

static int check(int64_t n, uint64_t seed, const char *path)
{
    int64_t m = 0;
    float *t = bench_read_npy_f32(path, &m);
    if (!t)
        return 1;
    if (m != n) {
        fprintf(stderr, "elementwise_base: %s has %lld elements, expected %lld\n", path,
                (long long)m, (long long)n);
        free(t);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        volatile float x = bench_random_f32(seed, 0, (uint64_t)i), y = bench_random_f32(seed, 1, (uint64_t)i);
        volatile float v = x + y;
        v = v * x;
        v = v - y;
        v = v > x ? v : x;
        v = v * v;
        v = v + y;
        v = -v;
        v = fabsf(v);
        if (!(fabsf(t[i] - v) <= 1e-6f * fmaxf(1.0f, fabsf(v)))) {
            fprintf(stderr, "elementwise_base: tessel's element %lld is %g, expected %g\n",
                    (long long)i, (double)t[i], (double)v);
            free(t);
            return 1;
        }
    }
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t n = argc >= 3 ? atoll(argv[1]) : 0;
    if (n < 1) {
        fprintf(stderr, "usage: elementwise_base N REPS | N --check SEED FILE.npy | N --sum SEED\n");
        return 2;
    }
    if (!strcmp(argv[2], "--sum") && argc == 4) {
        uint64_t seed = strtoull(argv[3], NULL, 0);
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += bench_random_f32(seed, 0, (uint64_t)i);
        printf("sum %.17g\n", sum);
        return 0;
    }
    if (!strcmp(argv[2], "--check") && argc == 5)
        return check(n, strtoull(argv[3], NULL, 0), argv[4]);
    int reps = atoi(argv[2]);
    if (reps < 1)
        reps = 1;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b),
          *c = malloc((size_t)n * sizeof *c);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!a || !b || !c || !t) {
        fprintf(stderr, "elementwise_base: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i++)
        a[i] = 0, b[i] = (float)(i % 7), c[i] = (float)(i % 5);
    const float s = 3.0f;
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now_ms();
        for (int64_t i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        if (r >= 0)
            t[r] = bench_now_ms() - t0;
    }
    /* STREAM's own check: every a[i] is b[i] + 3 c[i]. */
    for (int64_t i = 0; i < n; i++)
        if (a[i] != (float)(i % 7) + 3.0f * (float)(i % 5)) {
            fprintf(stderr, "elementwise_base: triad wrong at %lld\n", (long long)i);
            return 1;
        }
    double ms = bench_median(t, reps);
    printf("stream triad %.3f GB/s (%.3f ms)\n", 3.0 * (double)n * 4 / (ms * 1e6), ms);
    free(a);
    free(b);
    free(c);
    free(t);
    return 0;
}
