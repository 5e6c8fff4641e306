/*
 * blas.c: OpenBLAS, loaded the first time a kernel (or the device set's
 * thread policy) needs it.
 *
 * Why not link it: OpenBLAS (pthread build) starts its thread pool in the
 * library's constructor, and the pool's threads spin in sched_yield for
 * about 0.1 s before they sleep. Linked, that happens in every process
 * that merely loads libtessel: `tessel check`, `compile`, `plan`, which
 * never execute a kernel, paid a core's worth of spinning (on a machine
 * whose cores are busy, as much CPU time again as the compile itself).
 * Loaded here, only processes that execute pay it, and they pay it where
 * they would have anyway: when their devices are made (dev_devices_create
 * sets the thread count) or at the first GEMM, before any timed step.
 *
 * The f32 GEMM (DevBlas.sgemm) is the one blas_choice.c picks: OpenBLAS's
 * cblas_sgemm, BLIS's or oneDNN's behind the same signature (blas_sgemm.c),
 * or the probe that measures them; a fixed library that does not load is
 * an error, as a missing OpenBLAS is (dev_blas_error).
 *
 * The library is the one the build found (TESSEL_BLAS_PATH, the directory
 * pkg-config names and the library's soname: what the linked binary's
 * RUNPATH resolved to), else the soname on the loader's search path.
 * Loading happens once per process (pthread_once); the table never changes
 * afterwards, so kernels on every executor thread read it without a lock.
 */
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TESSEL_BLAS_PATH
#define TESSEL_BLAS_PATH "libopenblas.so.0"
#endif
#ifndef TESSEL_BLAS_SONAME
#define TESSEL_BLAS_SONAME "libopenblas.so.0"
#endif

static DevBlas blas;
static int blas_want;            /* threads the first user asks for; 0: OpenBLAS's default */
static bool blas_set_env;        /* the first user saw OPENBLAS_NUM_THREADS unset (dev_blas_preload) */
static const DevBlas *blas_ok;   /* &blas once every symbol resolved */
static char blas_why[256];       /* why it did not, for messages */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* One symbol into *slot (a function pointer); false, with the reason kept,
 * when the library lacks it. */
static bool sym(void *lib, const char *name, void *slot)
{
    void *p = dlsym(lib, name);
    if (!p) {
        snprintf(blas_why, sizeof blas_why, "OpenBLAS (%s) has no %s", TESSEL_BLAS_SONAME, name);
        return false;
    }
    /* POSIX guarantees that a data pointer from dlsym converts to a
     * function pointer; C does not, so copy the bits. */
    memcpy(slot, &p, sizeof p);
    return true;
}

static void blas_load(void)
{
    /* The constructor starts as many threads as OPENBLAS_NUM_THREADS says
     * (else one a core), and they spin before they sleep: told the count
     * the device set will use (1 where devices share cores: no pool at
     * all), it starts no more. Set only for the load, only when the
     * caller saw the variable unset (TsTuning.openblas_num_threads_unset:
     * the library reads no environment variable); the thread count is set
     * afterwards anyway. Once per process: glibc's first setenv copies the
     * environment into a new array (readers of the old one, MPI's threads,
     * are unaffected), and unsetenv only moves entries of it. */
    bool told = false;
    if (blas_want > 0 && blas_set_env) {
        char n[16];
        snprintf(n, sizeof n, "%d", blas_want);
        told = setenv("OPENBLAS_NUM_THREADS", n, 0) == 0;
    }
    void *lib = dlopen(TESSEL_BLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen(TESSEL_BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (told)
        unsetenv("OPENBLAS_NUM_THREADS");
    if (!lib) {
        const char *e = dlerror();
        snprintf(blas_why, sizeof blas_why, "%s", e ? e : "dlopen failed");
        return;
    }
    DevBlas *b = &blas;
    bool ok = sym(lib, "cblas_sgemm", &b->sgemm) && sym(lib, "cblas_dgemm", &b->dgemm) &&
              sym(lib, "cblas_strsm", &b->strsm) && sym(lib, "cblas_dtrsm", &b->dtrsm) &&
              sym(lib, "cblas_ctrsm", &b->ctrsm) && sym(lib, "cblas_ztrsm", &b->ztrsm) &&
              sym(lib, "spotrf_", &b->spotrf) && sym(lib, "dpotrf_", &b->dpotrf) &&
              sym(lib, "cpotrf_", &b->cpotrf) && sym(lib, "zpotrf_", &b->zpotrf) &&
              sym(lib, "sgeqrf_", &b->sgeqrf) && sym(lib, "dgeqrf_", &b->dgeqrf) &&
              sym(lib, "cgeqrf_", &b->cgeqrf) && sym(lib, "zgeqrf_", &b->zgeqrf) &&
              sym(lib, "sorgqr_", &b->sorgqr) && sym(lib, "dorgqr_", &b->dorgqr) &&
              sym(lib, "cungqr_", &b->cungqr) && sym(lib, "zungqr_", &b->zungqr) &&
              sym(lib, "sgetrf_", &b->sgetrf) && sym(lib, "dgetrf_", &b->dgetrf) &&
              sym(lib, "cgetrf_", &b->cgetrf) && sym(lib, "zgetrf_", &b->zgetrf) &&
              sym(lib, "ssyevd_", &b->ssyevd) && sym(lib, "dsyevd_", &b->dsyevd) &&
              sym(lib, "cheevd_", &b->cheevd) && sym(lib, "zheevd_", &b->zheevd) &&
              sym(lib, "sgesdd_", &b->sgesdd) && sym(lib, "dgesdd_", &b->dgesdd) &&
              sym(lib, "cgesdd_", &b->cgesdd) && sym(lib, "zgesdd_", &b->zgesdd) &&
              sym(lib, "sgesvd_", &b->sgesvd) && sym(lib, "dgesvd_", &b->dgesvd) &&
              sym(lib, "cgesvd_", &b->cgesvd) && sym(lib, "zgesvd_", &b->zgesvd) &&
              sym(lib, "sgeev_", &b->sgeev) && sym(lib, "dgeev_", &b->dgeev) &&
              sym(lib, "cgeev_", &b->cgeev) && sym(lib, "zgeev_", &b->zgeev) &&
              sym(lib, "openblas_get_num_threads", &b->get_num_threads) &&
              sym(lib, "openblas_set_num_threads", &b->set_num_threads);
    if (ok) {
        dev_blas_sgemm_threads(b->get_num_threads(), true);
        const char *why = "";
        SgemmFn *g = dev_blas_sgemm_pick(b->sgemm, &why);
        if (g)
            b->sgemm = g;
        else {
            snprintf(blas_why, sizeof blas_why, "the f32 GEMM's library (tuning): %s", why);
            ok = false;
        }
    }
    if (ok)
        blas_ok = b;
    /* A library that lacks a symbol stays loaded: unloading one whose
     * constructor started threads is not safe. */
}

const DevBlas *dev_blas_for_threads(int n)
{
    /* Only the first caller's count matters (the load happens once); the
     * device set is made before any kernel runs, so it is that caller.
     * Read by blas_load inside pthread_once, which orders the two. */
    static pthread_mutex_t want_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&want_lock);
    if (blas_want == 0)
        blas_want = n;
    pthread_mutex_unlock(&want_lock);
    return dev_blas();
}

const DevBlas *dev_blas(void)
{
    pthread_once(&blas_once, blas_load);
    return blas_ok;
}

void dev_blas_preload(bool env_unset)
{
    /* A pool of one: no threads start, none spin; the device set raises
     * the count where its policy wants more (OpenBLAS then starts them).
     * Like blas_want, only the first caller's word counts (read by
     * blas_load inside pthread_once, after this store). */
    static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&env_lock);
    if (blas_want == 0)
        blas_set_env = env_unset;
    pthread_mutex_unlock(&env_lock);
    (void)dev_blas_for_threads(1);
}

const char *dev_blas_error(void)
{
    pthread_once(&blas_once, blas_load);
    return blas_ok ? NULL : blas_why;
}
