/*
 * blas_sgemm.c: the f32 GEMM from another library than OpenBLAS, behind
 * cblas_sgemm's signature (issue 34).
 *
 * tessel's f32 dots call DevBlas.sgemm (contract.c). blas_choice.c decides
 * which library fills it (fixed by the caller's tuning, or measured) and
 * asks here for BLIS's or oneDNN's. BLIS is called through its typed API bli_sgemm, which takes
 * a row and a column stride per matrix, so an order and a transpose are
 * strides; no other library exports that name, so the call cannot land in
 * OpenBLAS (BLIS's own cblas_sgemm would call sgemm_, which OpenBLAS, loaded
 * first, also defines). oneDNN's dnnl_sgemm is row-major; a column-major
 * product is the row-major product of the transposes, operands swapped.
 * Both run as many threads as a device's BLAS runs (dev_blas_sgemm_threads
 * records the devices' count): the calling thread alone wherever devices
 * share the cores, an OpenMP team of that many (the caller and the
 * runtime's threads) where one device spans several cores. BLIS is told
 * the count when it differs from the one it was last told (its setting is
 * global; every device of a set runs the same count), oneDNN's OpenMP
 * runtime before every call (omp_set_num_threads sets the calling
 * thread's count only). Whether a team beats OpenBLAS's pool is the
 * probe's business (blas_choice.c): under load OpenMP's threads spin at
 * their barriers (a 2-thread BLIS once ran 3x slower than OpenBLAS at load
 * 16), idle oneDNN's team was the fastest here (BENCHMARKS.md, "The GEMM").
 *
 * The libraries are loaded once (pthread_once per library) and never
 * unloaded; the pointers are read without a lock afterwards.
 */
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*BliSgemm)(int transa, int transb, int64_t m, int64_t n, int64_t k, const float *alpha,
                         const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb,
                         const float *beta, float *c, int64_t rsc, int64_t csc);
typedef int (*DnnlSgemm)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

static BliSgemm bli_sgemm_fn;
static void (*bli_set_threads_fn)(int64_t);
static DnnlSgemm dnnl_sgemm_fn;
static void (*omp_set_threads_fn)(int);
static char blis_why[200], dnnl_why[200];
static atomic_int threads;         /* the devices' BLAS thread count; 0: not told */
static atomic_int blis_threads;    /* the count BLIS was last told */

static pthread_once_t blis_once = PTHREAD_ONCE_INIT, dnnl_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer (POSIX allows the conversion; C does not,
 * so the bits are copied). */
static void *sym_of(void *lib, const char *name)
{
    return lib ? dlsym(lib, name) : NULL;
}

static void blis_load(void)
{
    /* BLIS 0.9's 64-bit integer build (Debian's libblis4-*). */
    void *lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    void *g = sym_of(lib, "bli_sgemm"), *t = sym_of(lib, "bli_thread_set_num_threads");
    if (!g || !t) {
        const char *e = lib ? "it has no bli_sgemm or bli_thread_set_num_threads" : dlerror();
        snprintf(blis_why, sizeof blis_why, "BLIS (libblis.so.4) for f32 GEMMs: %s", e ? e : "dlopen failed");
        return;
    }
    memcpy(&bli_set_threads_fn, &t, sizeof t);
    bli_set_threads_fn(1);
    atomic_store(&blis_threads, 1);
    memcpy(&bli_sgemm_fn, &g, sizeof g);
}

static void dnnl_load(void)
{
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    void *g = sym_of(lib, "dnnl_sgemm"), *o = sym_of(lib, "omp_set_num_threads");
    if (!g) {
        const char *e = lib ? "it has no dnnl_sgemm" : dlerror();
        snprintf(dnnl_why, sizeof dnnl_why, "oneDNN (libdnnl.so.2) for f32 GEMMs: %s", e ? e : "dlopen failed");
        return;
    }
    if (o) /* an OpenMP build; a sequential or TBB one has no such symbol */
        memcpy(&omp_set_threads_fn, &o, sizeof o);
    memcpy(&dnnl_sgemm_fn, &g, sizeof g);
}

/* The (row, column) strides of op(X) for X stored with leading dimension
 * ld in `order`, transposed or not. */
static void strides(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE t, int ld, int64_t *rs, int64_t *cs)
{
    bool row = order == CblasRowMajor;
    *rs = row ? ld : 1;
    *cs = row ? 1 : ld;
    if (t != CblasNoTrans) {
        int64_t s = *rs;
        *rs = *cs;
        *cs = s;
    }
}

static void sgemm_blis(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    int64_t rsa, csa, rsb, csb, rsc, csc;
    strides(order, ta, lda, &rsa, &csa);
    strides(order, tb, ldb, &rsb, &csb);
    strides(order, CblasNoTrans, ldc, &rsc, &csc);
    int nt = dev_blas_sgemm_thread_count();
    if (atomic_exchange(&blis_threads, nt) != nt)
        bli_set_threads_fn(nt);
    /* 0: BLIS_NO_TRANSPOSE; the transposes are in the strides. */
    bli_sgemm_fn(0, 0, m, n, k, &alpha, a, rsa, csa, b, rsb, csb, &beta, c, rsc, csc);
}

static void sgemm_dnnl(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    char ca = ta == CblasNoTrans ? 'N' : 'T', cb = tb == CblasNoTrans ? 'N' : 'T';
    if (omp_set_threads_fn)
        omp_set_threads_fn(dev_blas_sgemm_thread_count());
    if (order == CblasRowMajor)
        dnnl_sgemm_fn(ca, cb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else /* C^T = op(B)^T op(A)^T, all row-major */
        dnnl_sgemm_fn(cb, ca, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

SgemmFn *dev_blas_sgemm_from(const char *lib, const char **why)
{
    if (!strcmp(lib, "blis")) {
        pthread_once(&blis_once, blis_load);
        *why = blis_why;
        return bli_sgemm_fn ? sgemm_blis : NULL;
    }
    if (!strcmp(lib, "onednn")) {
        pthread_once(&dnnl_once, dnnl_load);
        *why = dnnl_why;
        return dnnl_sgemm_fn ? sgemm_dnnl : NULL;
    }
    *why = "unknown f32 GEMM library (openblas, blis or onednn)";
    return NULL;
}

void dev_blas_sgemm_threads(int n, bool unless_told)
{
    int none = 0;
    if (unless_told)
        atomic_compare_exchange_strong(&threads, &none, n < 1 ? 1 : n);
    else
        atomic_store(&threads, n < 1 ? 1 : n);
}

int dev_blas_sgemm_thread_count(void)
{
    int n = atomic_load(&threads);
    return n < 1 ? 1 : n;
}
