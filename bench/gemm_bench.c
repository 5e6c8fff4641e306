/*
 * gemm_bench.c: the GEMM libraries tessel can call for its f32 dots
 * (OpenBLAS, BLIS, oneDNN) against each other and the machine's peak, one
 * thread (or --threads T), on tessel's dot shapes (issue 34).
 *
 * OpenBLAS is called as cblas_sgemm (its pool set to T threads), BLIS and
 * oneDNN as tessel calls them when the probe chooses them
 * (device/blas_sgemm.c: through bli_sgemm and dnnl_sgemm, the calling
 * thread alone at T = 1, an OpenMP team of T otherwise); a library
 * that does not load is skipped, saying so (bench/setup.sh installs them). The peak is measured (bench_peak.h: an
 * FMA loop in registers on the widest vectors), and printed with the clock
 * /proc/cpuinfo reports and the FLOPs per cycle that makes.
 *
 * Shapes (row-major C[M,N] = A[M,K] B[K,N]): 1024^3, then the per-device
 * dots of bench/peers_models.py on 2 devices: the Megatron MLP's two
 * (512x1024x2048, 512x2048x1024), the GPT-2 block's projections and MLP
 * over 1024 tokens (1024x768x384, 1024x384x768, 1024x768x1536,
 * 1024x1536x768) and one head's attention (512x64x512, 512x512x64).
 * --quick: 1024^3 and the first two. --peak: only the peak, its GFLOP/s
 * on one line (bench/peers.py's floors). --layouts: instead, the GPT-2 block's
 * attention GEMMs as tessel calls them, transposes and row strides
 * included, in the layout JAX's lowering gives them and in the one
 * partition/spmd_swap.c makes (the q/k/v projection 384x768x1024 with both
 * operands transposed against 1024x768x384 plain; one head's scores and
 * P.V, 12 calls each, reading q/k/v from [H,Dh,B,S] against [B,S,H,Dh]).
 * At one thread on a CPU with AVX-512F, `avx512` runs beside them: tessel's
 * own f32 kernel (device/sgemm_avx512.c, `--sgemm avx512`, a candidate of
 * the probe there), and a line before the shapes gives its micro-kernel's
 * ceiling: the kernel alone on panels that stay in L1 (what a GEMM's
 * inner loop reaches on this core, the best of 11 runs of about 5 ms, as
 * short as the peak's: under load a longer run is more often preempted),
 * a second denominator for the rates below (the last line says the best
 * 1024^3 rate's fraction of it too).
 * On a CPU with AMX (one thread), `amx-bf16x3` runs beside them: tessel's
 * f32 GEMM as three bf16 products on the tiles (device/sgemm_amx.c,
 * `--sgemm amx-bf16x3`), its rate counted in f32 FLOPs against the same
 * FMA peak, which it may pass; not f32's bits, so never the line's best.
 * Each library's C is compared with
 * OpenBLAS's (1e-4 of the largest magnitude) and 16 entries with a double
 * dot product; a mismatch exits 1. Per shape, the libraries run
 * interleaved, 2 warm-up and R timed rounds (7; 3 with --quick), medians;
 * at T > 1 in turns instead (each library's warm-up and timed rounds
 * together): a library's threads spin a while after its call (OpenMP's
 * without yielding), which slowed the next library's T-thread call when
 * interleaved (device/blas_choice.c). The peak at T threads is T times
 * the one-core peak. Prints a line per shape, then
 *     bench gemm: ... best LIB F of peak at 1024^3 ratio F
 * where F is the fastest library's fraction of the measured peak at 1024^3
 * (issue 34's target: at least 0.85) and the line names the library
 * tessel's probe should choose on this machine (device/blas_choice.c;
 * `tessel run --stats` says what it chose).
 */
#include "bench_common.h"
#include "bench_peak.h"
#include "device/blas.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void openblas_set_num_threads(int);
char *openblas_get_config(void);

enum { LIB_OPENBLAS, LIB_BLIS, LIB_DNNL, LIB_AVX512, LIB_AMX, NLIB };
static SgemmFn *lib_gemm[NLIB];
static char blis_ver[64] = "", dnnl_ver[64] = "";
static const char *blis_why = "", *dnnl_why = "", *amx_why = "", *avx512_why = "";
static const char *lib_name[NLIB] = {"openblas", "blis", "onednn", "avx512", "amx-bf16x3"};

/* OpenBLAS's cblas_sgemm (linked), and BLIS's and oneDNN's as tessel calls
 * them (device/blas_sgemm.c); the versions from the libraries themselves,
 * already loaded by then (RTLD_NOLOAD). */
static void load_libs(int threads)
{
    lib_gemm[LIB_OPENBLAS] = cblas_sgemm;
    lib_gemm[LIB_AMX] = threads == 1 ? dev_sgemm_amx(cblas_sgemm, &amx_why) : NULL;
    lib_gemm[LIB_AVX512] = threads == 1 ? dev_sgemm_avx512(cblas_sgemm, &avx512_why) : NULL;
    if (threads > 1)
        amx_why = avx512_why = "skipped at several threads (one thread a product)";
    lib_gemm[LIB_BLIS] = dev_blas_sgemm_from("blis", &blis_why);
    lib_gemm[LIB_DNNL] = dev_blas_sgemm_from("onednn", &dnnl_why);
    void *h = lib_gemm[LIB_BLIS] ? dlopen("libblis.so.4", RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *f = h ? dlsym(h, "bli_info_get_version_str") : NULL;
    if (f) {
        const char *(*ver)(void);
        memcpy(&ver, &f, sizeof f);
        snprintf(blis_ver, sizeof blis_ver, "%s", ver());
    }
    h = lib_gemm[LIB_DNNL] ? dlopen("libdnnl.so.2", RTLD_NOW | RTLD_NOLOAD) : NULL;
    f = h ? dlsym(h, "dnnl_version") : NULL;
    if (f) {
        typedef struct {
            int major, minor, patch;
        } Ver; /* the head of dnnl_version_t */
        const Ver *(*ver)(void);
        memcpy(&ver, &f, sizeof f);
        snprintf(dnnl_ver, sizeof dnnl_ver, "%d.%d.%d", ver()->major, ver()->minor, ver()->patch);
    }
}

/* avx512's micro-kernel alone on panels in L1 (the best of 11 runs of
 * 0.79 GFLOP, about 5 ms), GFLOP/s; 0 where it cannot run. */
static double kernel_ceiling(void)
{
    double best = 0;
    for (int r = 0; r < 11; r++) {
        double t0 = bench_peak_now(), flops = dev_sgemm_avx512_tile_flops(8000);
        double t = bench_peak_now() - t0;
        if (flops > 0 && t > 0 && flops / t / 1e9 > best)
            best = flops / t / 1e9;
    }
    return best;
}

static void gemm(int lib, int64_t m, int64_t k, int64_t n, const float *a, const float *b, float *c)
{
    lib_gemm[lib](CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
                  0.0f, c, (int)n);
}

/* Inputs in [-1, 1): tessel's deterministic random values (bench_common.h). */
static void fill(float *f, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        f[i] = bench_random_f32(seed, 0, (uint64_t)i);
}

/* c against the reference ref (OpenBLAS's) and 16 double dot products. */
static int validate(const char *lib, const float *c, const float *ref, const float *a, const float *b, int64_t m,
                    int64_t k, int64_t n)
{
    double maxabs = 0;
    for (int64_t i = 0; i < m * n; i++)
        maxabs = fmax(maxabs, fabs(ref[i]));
    for (int64_t i = 0; i < m * n; i++)
        if (!(fabs((double)c[i] - ref[i]) <= 1e-4 * maxabs)) {
            fprintf(stderr, "gemm_bench: %s and openblas differ at %lld: %g vs %g\n", lib, (long long)i,
                    (double)c[i], (double)ref[i]);
            return 1;
        }
    for (int s = 0; s < 16; s++) {
        int64_t i = (s * 7919) % m, j = (s * 104729) % n;
        double want = 0;
        for (int64_t kk = 0; kk < k; kk++)
            want += (double)a[i * k + kk] * b[kk * n + j];
        if (fabs(want - c[i * n + j]) > 1e-4 * (maxabs > 1 ? maxabs : 1)) {
            fprintf(stderr, "gemm_bench: %s entry (%lld,%lld) is %g, expected %g\n", lib, (long long)i, (long long)j,
                    (double)c[i * n + j], want);
            return 1;
        }
    }
    return 0;
}

/* One GEMM call as tessel's dot makes it (device/k_dot.c), `calls` times
 * per round (one head each: the operands advance by their head strides). */
typedef struct Call {
    const char *what;
    bool ta, tb;
    int m, n, k, lda, ldb, calls;
    int64_t a_step, b_step;
} Call;

/* --layouts: each call of the list in each library, interleaved as the
 * shapes are, and its result against OpenBLAS's (1e-4 of the largest). */
static int layouts(const bool *have, int reps, double peak)
{
    /* x [2*512, 768] and w [768, 384] (this device's 6 heads of 64); q/k/v
     * as JAX lays them out, [6,64,2,512], and as spmd_swap.c does,
     * [2,512,6,64]; head (b, h) of [6,64,2,512] starts at h*64*1024 + b*512,
     * of [2,512,6,64] at b*512*384 + h*64 (calls step over h, b = 0). */
    static const Call calls[] = {
        {"q/k/v projection, both transposed", true, true, 384, 1024, 768, 384, 768, 1, 0, 0},
        {"q/k/v projection, swapped: plain", false, false, 1024, 384, 768, 768, 384, 1, 0, 0},
        {"scores q k^T from [H,Dh,B,S] (TN)", true, false, 512, 512, 64, 1024, 1024, 12, 65536, 65536},
        {"scores q k^T from [B,S,H,Dh] (NT)", false, true, 512, 512, 64, 384, 384, 12, 64, 64},
        {"P.v, v from [H,Dh,B,S] (NT)", false, true, 512, 64, 512, 512, 1024, 12, 262144, 65536},
        {"P.v, v from [B,S,H,Dh] (NN)", false, false, 512, 64, 512, 512, 384, 12, 262144, 64},
    };
    size_t big = (size_t)4 << 20; /* elements: every operand above fits */
    float *a = malloc(big * sizeof *a), *b = malloc(big * sizeof *b), *c[NLIB];
    for (int l = 0; l < NLIB; l++)
        c[l] = calloc(big, sizeof **c);
    fill(a, (int64_t)big, 1);
    fill(b, (int64_t)big, 2);
    int rc = 0;
    for (size_t s = 0; s < sizeof calls / sizeof calls[0] && rc == 0; s++) {
        const Call *x = &calls[s];
        double t[NLIB][16];
        for (int r = -2; r < reps; r++)
            for (int j = 0; j < NLIB; j++) {
                int l = (j + (r < 0 ? 0 : r)) % NLIB;
                if (!have[l])
                    continue;
                double t0 = bench_peak_now();
                for (int h = 0; h < x->calls; h++)
                    lib_gemm[l](CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans, x->tb ? CblasTrans : CblasNoTrans,
                                x->m, x->n, x->k, 1.0f, a + h * x->a_step, x->lda, b + h * x->b_step, x->ldb, 0.0f,
                                c[l] + (size_t)h * (size_t)(x->m * x->n), x->n);
                if (r >= 0)
                    t[l][r] = bench_peak_now() - t0;
            }
        printf("gemm %s, %dx%dx%d x%d:", x->what, x->m, x->k, x->n, x->calls);
        size_t total = (size_t)x->calls * (size_t)(x->m * x->n);
        double maxabs = 0;
        for (size_t i = 0; i < total; i++)
            maxabs = fmax(maxabs, fabs(c[LIB_OPENBLAS][i]));
        for (int l = 0; l < NLIB; l++) {
            if (!have[l])
                continue;
            for (size_t i = 0; i < total && rc == 0; i++)
                if (!(fabs((double)c[l][i] - c[LIB_OPENBLAS][i]) <= 1e-4 * maxabs)) {
                    fprintf(stderr, "gemm_bench: %s and openblas differ at %zu\n", lib_name[l], i);
                    rc = 1;
                }
            double g = 2.0 * x->m * x->k * x->n * x->calls / bench_median(t[l], reps) / 1e9;
            printf(" %s %.1f GFLOP/s (%.2f of peak)", lib_name[l], g, peak > 0 ? g / peak : 0.0);
        }
        printf("\n");
    }
    free(a);
    free(b);
    for (int l = 0; l < NLIB; l++)
        free(c[l]);
    if (rc)
        printf("bench gemm: FAILED a library's result differs (stderr)\n");
    return rc;
}

int main(int argc, char **argv)
{
    static const int64_t shapes[][3] = {{1024, 1024, 1024}, {512, 1024, 2048}, {512, 2048, 1024},
                                        {1024, 768, 384},   {1024, 384, 768},   {1024, 768, 1536},
                                        {1024, 1536, 768},  {512, 64, 512},     {512, 512, 64}};
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]), reps = 7, threads = 1;
    bool layout_calls = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak") && argc == 2) {
            /* The peak alone, for bench/peers.py's floors: the GFLOP/s. */
            int lanes = 0;
            printf("%.1f\n", bench_peak_gflops(&lanes));
            return 0;
        } else if (!strcmp(argv[i], "--layouts")) {
            layout_calls = true;
        } else if (!strcmp(argv[i], "--quick")) {
            nshapes = 3;
            reps = 3;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc && atoi(argv[i + 1]) >= 1) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: gemm_bench [--quick] [--threads T] [--layouts] | gemm_bench --peak\n");
            return 2;
        }
    }
    openblas_set_num_threads(threads);
    dev_blas_sgemm_threads(threads, false); /* BLIS's and oneDNN's count, as a device's */
    load_libs(threads);
    bool have[NLIB] = {true, lib_gemm[LIB_BLIS] != NULL, lib_gemm[LIB_DNNL] != NULL, lib_gemm[LIB_AVX512] != NULL,
                       lib_gemm[LIB_AMX] != NULL};
    int lanes = 0;
    double peak1 = bench_peak_gflops(&lanes), mhz = bench_cpu_mhz(), peak = peak1 * threads;
    printf("gemm: peak %.1f GFLOP/s one core (FMA loop on %d f32 lanes; %.0f MHz in /proc/cpuinfo: %.1f FLOPs "
           "a cycle)",
           peak1, lanes, mhz, mhz > 0 ? peak1 * 1e3 / mhz : 0.0);
    char nthreads[24] = "one thread";
    if (threads > 1) {
        snprintf(nthreads, sizeof nthreads, "%d threads", threads);
        printf(", %.1f GFLOP/s %s", peak, nthreads);
    }
    printf("\n");
    printf("gemm: openblas (%s); blis %s; onednn %s (skipped where absent: bench/setup.sh); avx512 %s; "
           "amx-bf16x3 %s\n",
           openblas_get_config(), have[LIB_BLIS] ? blis_ver : blis_why, have[LIB_DNNL] ? dnnl_ver : dnnl_why,
           have[LIB_AVX512] ? "(tessel's own kernel)" : avx512_why,
           have[LIB_AMX] ? "(three bf16 products on AMX tiles: not f32's bits, never the best)" : amx_why);
    double ceiling = have[LIB_AVX512] ? kernel_ceiling() : 0;
    if (ceiling > 0)
        printf("gemm: micro-kernel ceiling %.1f GFLOP/s one core (%.2f of the peak: avx512's 8 x 48 tile alone on "
               "panels in L1)\n",
               ceiling, ceiling / peak1);
    if (layout_calls)
        return layouts(have, reps, peak);
    int rc = 0, best_lib = 0;
    double best_frac = 0, frac1024[NLIB] = {0};
    for (int s = 0; s < nshapes && rc == 0; s++) {
        int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *c[NLIB];
        double *t[NLIB];
        for (int l = 0; l < NLIB; l++) {
            c[l] = calloc((size_t)(m * n), sizeof **c);
            t[l] = calloc((size_t)reps, sizeof **t);
        }
        fill(a, m * k, 1);
        fill(b, k * n, 2);
        for (int x = 0; x < (reps + 2) * NLIB; x++) {
            /* One thread: round r, library j (who goes first rotates); more:
             * library j's rounds in turn. */
            int r = threads > 1 ? x % (reps + 2) - 2 : x / NLIB - 2, j = threads > 1 ? x / (reps + 2) : x % NLIB;
            int l = (j + (r < 0 || threads > 1 ? 0 : r)) % NLIB;
            if (!have[l])
                continue;
            double t0 = bench_peak_now();
            gemm(l, m, k, n, a, b, c[l]);
            if (r >= 0)
                t[l][r] = bench_peak_now() - t0;
        }
        printf("gemm %lldx%lldx%lld:", (long long)m, (long long)k, (long long)n);
        for (int l = 0; l < NLIB; l++) {
            if (!have[l])
                continue;
            if (l != LIB_OPENBLAS && validate(lib_name[l], c[l], c[LIB_OPENBLAS], a, b, m, k, n))
                rc = 1;
            double g = 2.0 * (double)m * (double)k * (double)n / bench_median(t[l], reps) / 1e9;
            printf(" %s %.1f GFLOP/s (%.2f of peak)", lib_name[l], g, peak > 0 ? g / peak : 0.0);
            if (s == 0)
                frac1024[l] = peak > 0 ? g / peak : 0.0;
        }
        printf("\n");
        if (rc == 0 && validate("openblas", c[LIB_OPENBLAS], c[LIB_OPENBLAS], a, b, m, k, n))
            rc = 1;
        free(a);
        free(b);
        for (int l = 0; l < NLIB; l++) {
            free(c[l]);
            free(t[l]);
        }
    }
    if (rc) {
        printf("bench gemm: FAILED a library's result differs (stderr)\n");
        return 1;
    }
    for (int l = 0; l < LIB_AMX; l++)
        if (have[l] && frac1024[l] > best_frac) {
            best_frac = frac1024[l];
            best_lib = l;
        }
    printf("bench gemm: 1024^3 f32 %s: openblas %.2f", nthreads, frac1024[LIB_OPENBLAS]);
    for (int l = 1; l < NLIB; l++)
        if (have[l])
            printf(", %s %.2f", lib_name[l], frac1024[l]);
        else
            printf(", %s skipped", lib_name[l]);
    printf(" of the peak %.1f GFLOP/s (median of %d)", peak, reps);
    if (ceiling > 0)
        printf("; of the micro-kernel ceiling %.1f: best %.2f", ceiling, best_frac * peak / ceiling);
    printf(" best %s ratio %.2f\n", lib_name[best_lib], best_frac);
    return 0;
}
