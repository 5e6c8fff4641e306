/*
 * blas_choice.c: which library computes tessel's f32 GEMMs, fixed by the
 * caller or chosen by measurement on the machine that runs (issue 34).
 *
 * OpenBLAS, BLIS and oneDNN each win somewhere (BENCHMARKS.md, "The GEMM":
 * on the AMD machine oneDNN by 3-10%, elsewhere OpenBLAS's kernel for the
 * CPU may be the best), so no build can know. The caller fixes one
 * (dev_blas_choose_sgemm: TsTuning.sgemm, `tessel run --sgemm`) or leaves
 * it to the probe: at the process's first f32 GEMM of at least
 * PROBE_MIN_MACS multiply-adds (through DevBlas.sgemm, which blas.c points
 * here) the libraries present are timed on the same PROBE_N^3 row-major
 * product on the device's thread, one warm-up call each and then
 * PROBE_ROUNDS interleaved rounds; the fastest best time wins. A library
 * that does not load is skipped and the verdict says why. Only where the
 * BLAS runs one thread a device (every run whose devices share the cores):
 * BLIS and oneDNN run on the calling thread alone (blas_sgemm.c), so where
 * a device spans several cores OpenBLAS's pool keeps the work. Smaller
 * products always run in OpenBLAS: there a library's call overhead counts
 * more than its kernel, and the probe is not worth its cost, about 0.1 s
 * once a process (oneDNN generates its kernels at its first call: 40 to 65
 * ms on the AMD machine; the timed calls take 20 to 40 ms). A run that
 * knows its program has such a product measures before its clock starts
 * (dev_blas_sgemm_prepare, as it loads the library: bench's `mlp` line
 * counts the first step, and the probe made it 0.1 s slower); otherwise
 * the first step pays it. The other executor threads wait for it in
 * pthread_once, so it measures with their cores idle. A choice measured at
 * one BLAS thread is kept only while the devices run one: where a device
 * set made afterwards runs more, OpenBLAS's pool takes the products again.
 *
 * The choice is read by every executor thread afterwards without a lock:
 * it is written once, inside pthread_once, before any call is forwarded.
 */
#include "blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROBE_N = 384, PROBE_ROUNDS = 6, NLIBS = 3 };
#define PROBE_MIN_MACS ((int64_t)256 * 256 * 256)

static const char *const lib_name[NLIBS] = {"openblas", "blis", "onednn"};

static atomic_int want = -1;             /* DEV_SGEMM_*; -1: nobody said (the probe) */
static SgemmFn *openblas_fn;             /* OpenBLAS's cblas_sgemm (dev_blas_sgemm_pick) */
static SgemmFn *chosen;                  /* what the probe chose */
static char verdict[320] = "openblas: no f32 GEMM of 256^3 multiply-adds or more (which the probe would time the "
                           "libraries for) has run";
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

void dev_blas_choose_sgemm(int lib)
{
    int none = -1;
    if (lib < DEV_SGEMM_PROBE || lib > DEV_SGEMM_ONEDNN)
        lib = DEV_SGEMM_PROBE;
    atomic_compare_exchange_strong(&want, &none, lib);
}

/* Where the probe chose BLIS or oneDNN (at one thread) and the devices now
 * run several BLAS threads each: OpenBLAS, whose pool uses them. */
static bool threads_overrule(void)
{
    return chosen && chosen != openblas_fn && dev_blas_sgemm_thread_count() > 1;
}

const char *dev_blas_sgemm_verdict(void)
{
    if (threads_overrule()) { /* the probe's own words for the case (a buffer per caller's thread) */
        static _Thread_local char many[160];
        snprintf(many, sizeof many, "openblas: %d BLAS threads a device (BLIS and oneDNN are measured and used "
                 "where devices run one)", dev_blas_sgemm_thread_count());
        return many;
    }
    return verdict;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One timed product of the probe's operands. */
static double timed(SgemmFn *f, const float *a, const float *b, float *c)
{
    double t0 = now_s();
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, PROBE_N, PROBE_N, PROBE_N, 1.0f, a, PROBE_N, b, PROBE_N, 0.0f, c,
      PROBE_N);
    return now_s() - t0;
}

static void probe(void)
{
    int nt = dev_blas_sgemm_thread_count();
    if (nt > 1) {
        chosen = openblas_fn;
        snprintf(verdict, sizeof verdict, "openblas: %d BLAS threads a device (BLIS and oneDNN are measured and "
                 "used where devices run one)", nt);
        return;
    }
    SgemmFn *fn[NLIBS] = {openblas_fn, NULL, NULL};
    const char *why[NLIBS] = {"", "", ""};
    for (int i = 1; i < NLIBS; i++)
        fn[i] = dev_blas_sgemm_from(lib_name[i], &why[i]);
    size_t n = (size_t)PROBE_N * PROBE_N;
    float *a = malloc(3 * n * sizeof *a);
    if (!a) { /* no memory to measure with: OpenBLAS, as before the probe */
        chosen = openblas_fn;
        snprintf(verdict, sizeof verdict, "openblas (no memory for the probe)");
        return;
    }
    float *b = a + n, *c = b + n;
    for (size_t i = 0; i < 2 * n; i++) /* small exact values: no denormals, no overflow */
        a[i] = (float)((int)(i % 17) - 8) * 0.125f;
    double best[NLIBS];
    for (int i = 0; i < NLIBS; i++)
        best[i] = fn[i] ? timed(fn[i], a, b, c) : 0; /* warm-up (oneDNN generates its kernel here) */
    for (int r = 0; r < PROBE_ROUNDS; r++)
        for (int k = 0; k < NLIBS; k++) {
            int i = (k + r) % NLIBS; /* each library in each position once in a while */
            if (!fn[i])
                continue;
            double t = timed(fn[i], a, b, c);
            if (r == 0 || t < best[i])
                best[i] = t;
        }
    free(a);
    int win = 0;
    for (int i = 1; i < NLIBS; i++)
        if (fn[i] && best[i] < best[win])
            win = i;
    chosen = fn[win];
    int used = snprintf(verdict, sizeof verdict, "%s, measured (f32 %d^3, one thread):", lib_name[win], PROBE_N);
    double flops = 2.0 * PROBE_N * PROBE_N * (double)PROBE_N;
    for (int i = 0; i < NLIBS && used > 0 && (size_t)used < sizeof verdict; i++) {
        if (fn[i])
            used += snprintf(verdict + used, sizeof verdict - (size_t)used, "%s %s %.1f GFLOP/s", i ? "," : "",
                             lib_name[i], flops / best[i] * 1e-9);
        else
            used += snprintf(verdict + used, sizeof verdict - (size_t)used, "%s %s skipped (%s)", i ? "," : "",
                             lib_name[i], why[i]);
    }
    if (used > 0 && (size_t)used < sizeof verdict)
        snprintf(verdict + used, sizeof verdict - (size_t)used, "; under 256^3 multiply-adds: openblas");
}

/* DevBlas.sgemm under the probe: small products to OpenBLAS; the first
 * large one measures, then every large one goes to the fastest. */
static void sgemm_probed(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                         int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    if ((int64_t)m * n * k < PROBE_MIN_MACS) {
        openblas_fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    pthread_once(&probe_once, probe);
    SgemmFn *f = threads_overrule() ? openblas_fn : chosen;
    f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dev_blas_sgemm_prepare(int64_t largest_macs)
{
    /* After the load (inside dev_blas's pthread_once), openblas_fn is set
     * exactly when the probe is the choice. Several BLAS threads a device
     * (OPENBLAS_NUM_THREADS told so at the load): the devices may still
     * lower it, so the first large product decides, as without this call. */
    if (largest_macs < PROBE_MIN_MACS || !dev_blas() || !openblas_fn || dev_blas_sgemm_thread_count() > 1)
        return;
    pthread_once(&probe_once, probe);
}

SgemmFn *dev_blas_sgemm_pick(SgemmFn *openblas, const char **why)
{
    int lib = atomic_load(&want);
    *why = "";
    if (lib == DEV_SGEMM_OPENBLAS) {
        snprintf(verdict, sizeof verdict, "openblas (tuning)");
        return openblas;
    }
    if (lib == DEV_SGEMM_BLIS || lib == DEV_SGEMM_ONEDNN) {
        const char *name = lib_name[lib - 1];
        SgemmFn *g = dev_blas_sgemm_from(name, why);
        if (g)
            snprintf(verdict, sizeof verdict, "%s (tuning)", name);
        return g;
    }
    openblas_fn = openblas;
    return sgemm_probed;
}
