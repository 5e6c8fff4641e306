/*
 * blas_small.c: the library of the probe's small f32 products at one BLAS
 * thread a device: OpenBLAS or tessel's own kernel, timed once (issue 34).
 *
 * Products under PROBE_MIN_MACS run outside the probe (blas_choice.c):
 * there a library's call overhead counts as much as its kernel, so they
 * went to OpenBLAS, whose small-matrix path has the least. Causal
 * attention is made of such products: per block of 64 rows, the scores
 * 64 x r1 x 64 and P.V 64 x 64 x r1 (k_dot.c, attention_one), about 0.45
 * GFLOP a step of the GPT-2 block on a device, where OpenBLAS ran them at
 * 70-78 GFLOP/s and tessel's kernel at 95-97 on the AMD machine. So from
 * SMALL_MIN_MACS on, the first such product times both on those two forms
 * (SMALL_ROUNDS calls each, in turns, the best of each), and the faster
 * computes every small product from there on for the rest of the
 * process: a product's library never changes within a run, so neither do
 * its bits. Only these two: tessel's kernel sums along k in one order
 * whatever m, n and where the operands sit (the fused attention's blocks
 * and the unfused P.V's calls give the same bits, k_dot.c), and OpenBLAS
 * is what ran them before; oneDNN's and BLIS's per-call costs are larger.
 * Below SMALL_MIN_MACS OpenBLAS always (its overhead the least).
 */
#include "blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { SMALL_ROUNDS = 8, SMALL_M = 64, SMALL_K = 256, SMALL_D = 64 };
#define SMALL_MIN_MACS ((int64_t)32 * 32 * 32)

static pthread_mutex_t small_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(SgemmFn *) small_fn; /* NULL until timed */
static char small_note[192];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The best time of one call of f on each of the two forms, summed:
 * scores (64 x 256 x 64, B transposed) and P.V (64 x 64 x 256). */
static double forms_best(SgemmFn *f, const float *a, const float *b, float *c)
{
    double best[2] = {0, 0};
    for (int r = 0; r < SMALL_ROUNDS; r++) {
        double t0 = now_s();
        f(CblasRowMajor, CblasNoTrans, CblasTrans, SMALL_M, SMALL_K, SMALL_D, 1.0f, a, SMALL_D, b, SMALL_D, 0.0f,
          c, SMALL_K);
        double t1 = now_s();
        f(CblasRowMajor, CblasNoTrans, CblasNoTrans, SMALL_M, SMALL_D, SMALL_K, 1.0f, c, SMALL_K, b, SMALL_D, 0.0f,
          c + SMALL_M * SMALL_K, SMALL_D);
        double t2 = now_s();
        if (r == 0 || t1 - t0 < best[0])
            best[0] = t1 - t0;
        if (r == 0 || t2 - t1 < best[1])
            best[1] = t2 - t1;
    }
    return best[0] + best[1];
}

/* Times OpenBLAS and tessel's kernel, under small_lock; the faster. */
static SgemmFn *small_probe(SgemmFn *openblas)
{
    const char *why = NULL;
    SgemmFn *own = dev_sgemm_avx512(openblas, &why);
    if (!own) {
        snprintf(small_note, sizeof small_note, "openblas (avx512: %s)", why ? why : "absent");
        return openblas;
    }
    /* A: 64 x 64; B: 256 x 64 (K, then V); C: the scores, then P.V */
    size_t na = SMALL_M * SMALL_D, nb = (size_t)SMALL_K * SMALL_D, nc = SMALL_M * SMALL_K + SMALL_M * SMALL_D;
    float *a = malloc((na + nb + nc) * sizeof *a);
    if (!a) {
        snprintf(small_note, sizeof small_note, "openblas (no memory to time them)");
        return openblas;
    }
    float *b = a + na, *c = b + nb;
    for (size_t i = 0; i < na + nb; i++) /* small exact values: no denormals, no overflow */
        a[i] = (float)((int)(i % 13) - 6) * 0.125f;
    double t[2] = {0, 0};
    SgemmFn *fn[2] = {openblas, own};
    for (int pass = 0; pass < 2; pass++) /* in turns, the second pass the other way round */
        for (int j = 0; j < 2; j++) {
            int i = pass ? 1 - j : j;
            double s = forms_best(fn[i], a, b, c);
            if (pass == 0 || s < t[i])
                t[i] = s;
        }
    free(a);
    double flops = 2.0 * 2 * SMALL_M * SMALL_K * (double)SMALL_D;
    int win = t[1] < t[0];
    snprintf(small_note, sizeof small_note,
             "%s (timed on 64x64x256 B^T and 64x256x64: openblas %.1f GFLOP/s, avx512 %.1f)", win ? "avx512" : "openblas",
             flops / t[0] * 1e-9, flops / t[1] * 1e-9);
    return fn[win];
}

SgemmFn *dev_blas_sgemm_small(SgemmFn *openblas, int64_t macs)
{
    if (macs < SMALL_MIN_MACS)
        return openblas;
    SgemmFn *f = atomic_load(&small_fn);
    if (f)
        return f;
    pthread_mutex_lock(&small_lock);
    if (!(f = atomic_load(&small_fn))) {
        f = small_probe(openblas);
        atomic_store(&small_fn, f);
    }
    pthread_mutex_unlock(&small_lock);
    return f;
}

void dev_blas_sgemm_small_note(char *buf, size_t len)
{
    pthread_mutex_lock(&small_lock);
    snprintf(buf, len, "%s", atomic_load(&small_fn) ? small_note : "");
    pthread_mutex_unlock(&small_lock);
}
