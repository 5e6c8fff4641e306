/*
 * bench_peak.h: the machine's f32 peak FLOP rate on one core, measured
 * (header-only, static functions; for dot_bench and gemm_bench).
 *
 * bench_peak_gflops runs 12 independent chains of fused multiply-adds on
 * the widest vectors the CPU has (AVX-512: 16 f32 lanes, else AVX2 + FMA:
 * 8), in registers only, and returns the rate: lanes x FMA pipes x 2 x the
 * core's clock, as the hardware delivers it (on a CPU that splits a
 * 512-bit FMA over two 256-bit pipes, AMD Zen 4, half of what the lanes
 * suggest). bench_cpu_mhz reads the clock /proc/cpuinfo reports, so that
 * the line can print FLOPs per cycle beside it (BENCHMARKS.md, "The GEMM":
 * the derivation from lscpu). The best of 5 runs of about 50 ms.
 */
#ifndef TESSEL_BENCH_PEAK_H
#define TESSEL_BENCH_PEAK_H

#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bench_peak_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define BENCH_PEAK_ITERS 2000000L

__attribute__((target("avx512f"))) static double bench_peak_avx512(void)
{
    __m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        acc[i] = _mm512_set1_ps((float)i);
    double t0 = bench_peak_now();
    for (long it = 0; it < BENCH_PEAK_ITERS; it++)
        for (int i = 0; i < 12; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], m, a);
    double t = bench_peak_now() - t0;
    float sink = 0;
    for (int i = 0; i < 12; i++)
        sink += _mm512_reduce_add_ps(acc[i]);
    volatile float keep = sink;
    (void)keep;
    return (double)BENCH_PEAK_ITERS * 12 * 16 * 2 / t / 1e9;
}

__attribute__((target("avx2,fma"))) static double bench_peak_avx2(void)
{
    __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    double t0 = bench_peak_now();
    for (long it = 0; it < BENCH_PEAK_ITERS; it++)
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], m, a);
    double t = bench_peak_now() - t0;
    float buf[8], sink = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(buf, acc[i]);
        sink += buf[0];
    }
    volatile float keep = sink;
    (void)keep;
    return (double)BENCH_PEAK_ITERS * 12 * 8 * 2 / t / 1e9;
}

/* The peak in GFLOP/s (best of 5), and the lanes used in *lanes; 0 on a
 * CPU without FMA. */
static inline double bench_peak_gflops(int *lanes)
{
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        *lanes = 0;
        return 0;
    }
    *lanes = avx512 ? 16 : 8;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double g = avx512 ? bench_peak_avx512() : bench_peak_avx2();
        if (g > best)
            best = g;
    }
    return best;
}

/* The first "cpu MHz" of /proc/cpuinfo, 0 when absent. */
static inline double bench_cpu_mhz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7) && sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : "", "%lf", &mhz) == 1)
            break;
    if (f)
        fclose(f);
    return mhz;
}

#endif
