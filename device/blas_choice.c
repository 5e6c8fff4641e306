/*
 * blas_choice.c: which library computes tessel's f32 GEMMs, fixed by the
 * caller or chosen by measurement on the machine that runs (issue 34).
 *
 * OpenBLAS, BLIS and oneDNN each win somewhere (BENCHMARKS.md, "The GEMM":
 * on the AMD machine oneDNN by 3-10%, elsewhere OpenBLAS's kernel for the
 * CPU may be the best), so no build can know; tessel's own AVX-512 kernel
 * (sgemm_avx512.c) is a fourth candidate where the CPU has AVX-512F, timed
 * at one BLAS thread only (it runs one thread a call: at T threads it
 * would lose by T, so the verdict says it was skipped). The caller fixes one
 * (dev_blas_choose_sgemm: TsTuning.sgemm, `tessel run --sgemm`) or leaves
 * it to the probe: at the process's first f32 GEMM of at least
 * PROBE_MIN_MACS multiply-adds (through DevBlas.sgemm, which blas.c points
 * here) the libraries present are timed on the same row-major product on
 * the device's thread, at the devices' BLAS thread count T (one thread
 * where devices share the cores; OpenBLAS's pool or an OpenMP team of T
 * where one device spans T cores: blas_sgemm.c), PROBE_N^3 at one thread
 * and as many multiply-adds a thread at T (probe_size). Each library runs
 * in turn a warm-up call and PROBE_ROUNDS / 2 timed ones, twice (the
 * second pass in the opposite order); the fastest best time wins. In
 * turns, not interleaved call by call: after a call, OpenBLAS's pool and
 * OpenMP's team spin for a while before they sleep, and a team spinning
 * on the other core (OpenMP's threads do not yield) slowed the next
 * library's 2-thread call by up to 3x; the warm-up call absorbs that. A
 * library that does not load is skipped and the verdict says why.
 * Smaller products run in OpenBLAS: there a library's call overhead counts
 * more than its kernel (except, at several threads with another library
 * chosen, those from 64^3 on, where OpenBLAS would wake its pool, whose
 * spinning slows the chosen team: those go to it; at one thread those
 * from 32^3 on go to the faster of OpenBLAS and tessel's kernel, timed on
 * attention's small products: blas_small.c), and the probe is not
 * worth its cost, about 0.1 s
 * once a process (oneDNN generates its kernels at its first call: 40 to 65
 * ms on the AMD machine; the timed calls take 20 to 40 ms). A run that
 * knows its program has such a product measures before its clock starts
 * (dev_blas_sgemm_prepare, as it loads the library: bench's `mlp` line
 * counts the first step, and the probe made it 0.1 s slower); otherwise
 * the first step pays it. The other executor threads wait for it on the
 * probe's lock, so it measures with their cores idle. A choice holds for
 * the thread count it was measured at: where the devices' count changes
 * afterwards, the next large product measures again at the new one. (A
 * run measures before its devices exist, at the one thread a device that
 * dev_blas_preload leaves: where its one device then spans several cores,
 * its first step measures again: 60 ms at 2 threads on an idle machine,
 * more under load.)
 *
 * At one BLAS thread a device the probe only ranks the libraries: each
 * large product shape (row-major m, n, k and transposes) is given, at its
 * first product, the faster of the probe's two fastest on that product's
 * own operands (blas_shapes.c, shape_lib), since at 384^3 oneDNN and
 * tessel's kernel are within the probe's noise while on the program's
 * shapes one or the other is 3-9 % faster; the probe's winner takes the
 * shapes past the table's SHAPE_MAX. A shape told before the run
 * (dev_blas_sgemm_prepare_shape) is timed in the form the program runs
 * it: a kept weight's B packed once, each call from the library's kept
 * form (alone, unkept, oneDNN led by 2-5 % on shapes where, kept and
 * beside a second core's product, the two tie: BENCHMARKS.md, gemm49),
 * and on several devices beside a second thread's product. At several threads the probe's
 * choice is held against the program's first large
 * products (blas_watch.c): they are timed, and where they run at less
 * than half the rate the probe measured (another library's threads
 * spinning beside the chosen one's: the dot line's 0.29 of the peak, a
 * competing process), the other libraries take a few calls each and the
 * fastest on the program's own calls keeps the rest; the verdict says so.
 *
 * The choice and its count are atomics, read by every executor thread
 * without a lock; the probe writes them under the lock, the count last,
 * and so does the watch when it ends (`watched`, last).
 */
#include "blas.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROBE_N = 384, PROBE_ROUNDS = 6, NLIBS = SGEMM_LIBS, VERDICT_LEN = 2048 };
#define PROBE_MIN_MACS ((int64_t)256 * 256 * 256)
/* OpenBLAS runs an f32 GEMM of fewer multiply-adds on the calling thread
 * alone (SMP_THRESHOLD_MIN 65536 x GEMM_MULTITHREAD_THRESHOLD 4, interface/
 * gemm.c); from there on it wakes its pool. */
#define OPENBLAS_POOL_MACS ((int64_t)65536 * 4)

static const char *const lib_name[NLIBS] = {"openblas", "blis", "onednn", "avx512"};
/* The DEV_SGEMM_* of each (avx512 came after amx-bf16x3). */
static const int lib_choice[NLIBS] = {DEV_SGEMM_OPENBLAS, DEV_SGEMM_BLIS, DEV_SGEMM_ONEDNN, DEV_SGEMM_AVX512};

static atomic_int want = -1;             /* DEV_SGEMM_*; -1: nobody said (the probe) */
static SgemmFn *openblas_fn;             /* OpenBLAS's cblas_sgemm (dev_blas_sgemm_pick) */
static SgemmFn *exact_fn;                /* f32's own product where DevBlas.sgemm is not (amx-bf16x3) */
static _Atomic(SgemmFn *) chosen;        /* what the probe chose */
static atomic_int chosen_threads;        /* the BLAS thread count it measured at; 0: none yet */
static SgemmFn *lib_fn[NLIBS];           /* the libraries the probe timed (NULL: absent) */
static SgemmWatch watch;                 /* the choice held against the first calls (blas_watch.c) */
static atomic_bool watched;              /* the watch is done: calls go to `chosen` untimed */
static double probed_rate[NLIBS];        /* the last probe's FLOP/s per library (0: absent) */
static SgemmShapes shapes;               /* the library per product shape at one thread (blas_shapes.c) */
static char probe_verdict[VERDICT_LEN];  /* the probe's measurements, for the verdict */
static double probe_end;                 /* when it ended (now_s) */
/* The watch counts no call that starts sooner after the probe: the last
 * library the probe timed may still spin (OpenBLAS's pool for about 0.1 s,
 * 2^28 cycles) and slow the first calls of the one it chose. */
#define WATCH_AFTER_PROBE_S 0.15
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER; /* the probe and the verdict */
static char verdict[VERDICT_LEN] = "openblas: no f32 GEMM of 256^3 multiply-adds or more (which the probe would time the "
                           "libraries for) has run";

void dev_blas_choose_sgemm(int lib)
{
    int none = -1;
    if (lib < DEV_SGEMM_PROBE || lib > DEV_SGEMM_AVX512)
        lib = DEV_SGEMM_PROBE;
    atomic_compare_exchange_strong(&want, &none, lib);
}

const char *dev_blas_sgemm_verdict(void)
{
    /* A copy per caller's thread: a probe may rewrite the verdict. */
    static _Thread_local char copy[sizeof verdict + 256];
    char small[192];
    dev_blas_sgemm_small_note(small, sizeof small);
    pthread_mutex_lock(&probe_lock);
    snprintf(copy, sizeof copy, "%s%s%s", verdict, small[0] ? "; products from 32^3 to 256^3: " : "", small);
    pthread_mutex_unlock(&probe_lock);
    return copy;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One timed n^3 product of the probe's operands. */
static double timed(SgemmFn *f, int n, const float *a, const float *b, float *c)
{
    double t0 = now_s();
    f(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return now_s() - t0;
}

/* The probe's n at nt threads: PROBE_N at one, else the smallest multiple
 * of 64 whose n^3 gives each thread at least PROBE_N^3 multiply-adds (512
 * at 2: a product split over threads has their start and join to pay
 * too, which a product of one thread's size would overweigh). */
static int probe_size(int nt)
{
    int n = PROBE_N;
    while ((int64_t)n * n * n < (int64_t)PROBE_N * PROBE_N * PROBE_N * nt)
        n += 64;
    return n;
}

/* The verdict's last clause, appended: where the products under
 * PROBE_MIN_MACS go when `lib` takes the large ones at nt threads
 * (sgemm_probed). */
static void small_clause(int lib, int nt)
{
    size_t used = strlen(verdict);
    if (nt > 1 && lib != 0)
        snprintf(verdict + used, sizeof verdict - used,
                 "; under 256^3 multiply-adds: %s from 64^3 (OpenBLAS's pool would wake), openblas below",
                 lib_name[lib]);
    else if (nt > 1)
        snprintf(verdict + used, sizeof verdict - used, "; under 256^3 multiply-adds: openblas");
    else
        snprintf(verdict + used, sizeof verdict - used,
                 "; under 256^3 multiply-adds: openblas below 32^3, from there the faster of openblas and avx512 "
                 "(blas_small.c)");
}

/* The verdict's clause of the shapes measured so far, appended. */
static void shapes_clause(void)
{
    size_t used = strlen(verdict);
    sgemm_shapes_note(&shapes, verdict + used, sizeof verdict - used);
}

/* Times the libraries at nt threads, under probe_lock; sets the verdict
 * and returns the fastest. */
static SgemmFn *probe(int nt)
{
    int pn = probe_size(nt);
    SgemmFn **fn = lib_fn;
    fn[0] = openblas_fn;
    const char *why[NLIBS] = {"", "", "", ""};
    for (int i = 1; i < NLIBS - 1; i++)
        fn[i] = dev_blas_sgemm_from(lib_name[i], &why[i]);
    /* tessel's own runs one thread a call: at several it would lose by
     * their count, so it is not timed there */
    fn[NLIBS - 1] = nt == 1 ? dev_sgemm_avx512(openblas_fn, &why[NLIBS - 1]) : NULL;
    if (nt > 1)
        why[NLIBS - 1] = "one thread a call";
    size_t n = (size_t)pn * pn;
    float *a = malloc(3 * n * sizeof *a);
    if (!a) { /* no memory to measure with: OpenBLAS, as before the probe */
        snprintf(verdict, sizeof verdict, "openblas (no memory for the probe)");
        atomic_store(&watched, true);
        return openblas_fn;
    }
    float *b = a + n, *c = b + n;
    for (size_t i = 0; i < 2 * n; i++) /* small exact values: no denormals, no overflow */
        a[i] = (float)((int)(i % 17) - 8) * 0.125f;
    double best[NLIBS] = {0};
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < NLIBS; k++) {
            int i = pass ? NLIBS - 1 - k : k; /* the second pass in the opposite order */
            if (!fn[i])
                continue;
            (void)timed(fn[i], pn, a, b, c); /* warm-up (oneDNN generates its kernel at its first) */
            for (int r = 0; r < PROBE_ROUNDS / 2; r++) {
                double t = timed(fn[i], pn, a, b, c);
                if ((pass == 0 && r == 0) || t < best[i])
                    best[i] = t;
            }
        }
    free(a);
    int win = 0;
    for (int i = 1; i < NLIBS; i++)
        if (fn[i] && best[i] < best[win])
            win = i;
    char threads[24] = "one thread";
    if (nt > 1)
        snprintf(threads, sizeof threads, "%d threads", nt);
    int used = snprintf(verdict, sizeof verdict, "%s, measured (f32 %d^3, %s):", lib_name[win], pn, threads);
    double flops = 2.0 * pn * pn * (double)pn;
    for (int i = 0; i < NLIBS && used > 0 && (size_t)used < sizeof verdict; i++) {
        if (fn[i])
            used += snprintf(verdict + used, sizeof verdict - (size_t)used, "%s %s %.1f GFLOP/s", i ? "," : "",
                             lib_name[i], flops / best[i] * 1e-9);
        else
            used += snprintf(verdict + used, sizeof verdict - (size_t)used, "%s %s skipped (%s)", i ? "," : "",
                             lib_name[i], why[i]);
    }
    memcpy(probe_verdict, verdict, sizeof probe_verdict);
    small_clause(win, nt);
    double rate[NLIBS] = {0};
    for (int i = 0; i < NLIBS; i++)
        rate[i] = fn[i] && best[i] > 0 ? flops / best[i] : 0;
    memcpy(probed_rate, rate, sizeof probed_rate);
    sgemm_watch_start(&watch, rate, win);
    probe_end = now_s();
    /* At one thread each product shape is timed on its own first call
     * (shape_lib): no watch, whose trials would give a shape's first
     * products other libraries' bits than its later ones. */
    atomic_store(&watched, nt == 1);
    if (nt == 1)
        shapes_clause();
    return fn[win];
}

/* The choice at the devices' current BLAS thread count: the one measured
 * at it, or measured now (once per count change: the first caller
 * measures, the others wait on the lock and then find it made). */
static SgemmFn *choice(void)
{
    int nt = dev_blas_sgemm_thread_count();
    if (atomic_load(&chosen_threads) == nt)
        return atomic_load(&chosen);
    pthread_mutex_lock(&probe_lock);
    if (atomic_load(&chosen_threads) != nt) {
        atomic_store(&chosen, probe(nt));
        atomic_store(&chosen_threads, nt);
    }
    SgemmFn *f = atomic_load(&chosen);
    pthread_mutex_unlock(&probe_lock);
    return f;
}

/* One of the watch's calls (blas_watch.c): in the library it names, timed,
 * the rate recorded; when the watch is done, its library becomes the
 * choice and its note joins the verdict. The call itself runs outside the
 * lock (devices that share the cores call at once). */
static void sgemm_watched(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                          int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                          int ldc)
{
    pthread_mutex_lock(&probe_lock);
    int lib = watch.use, nt = atomic_load(&chosen_threads);
    SgemmFn *f = lib_fn[lib] ? lib_fn[lib] : atomic_load(&chosen);
    double t0 = now_s();
    bool counts = t0 - probe_end >= WATCH_AFTER_PROBE_S;
    pthread_mutex_unlock(&probe_lock);
    if (!counts) {
        atomic_load(&chosen)(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double seconds = now_s() - t0;
    pthread_mutex_lock(&probe_lock);
    /* A probe at another thread count since: this call is not its. */
    if (!atomic_load(&watched) && atomic_load(&chosen_threads) == nt &&
        sgemm_watch_record(&watch, lib, 2.0 * m * n * (double)k, seconds)) {
        atomic_store(&chosen, lib_fn[watch.use]);
        if (watch.note[0]) {
            snprintf(verdict, sizeof verdict, "%s, on the program's calls: %.380s%.200s", lib_name[watch.use],
                     probe_verdict, watch.note);
            small_clause(watch.use, nt);
        }
        atomic_store(&watched, true);
    }
    pthread_mutex_unlock(&probe_lock);
}

/* The index of a library's function among those the probe timed (0,
 * OpenBLAS, where it is none of them). */
static int lib_index(SgemmFn *f)
{
    for (int i = 0; i < NLIBS; i++)
        if (f && f == lib_fn[i])
            return i;
    return 0;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The shapes being timed: every thread that reaches a shape before it is
 * decided times it too (the devices of a program run its products at
 * about the same time), their best times pooled. */
static struct {
    SgemmShape shape;
    double best[NLIBS]; /* each library's best thread CPU time so far; 0: none */
} trials[SHAPE_MAX];
static int ntrials;

/* The trial of a shape, made if new; -1 where the table is full. Under
 * probe_lock. */
static int trial_of(SgemmShape s)
{
    for (int i = 0; i < ntrials; i++)
        if (trials[i].shape.ta == s.ta && trials[i].shape.tb == s.tb && trials[i].shape.m == s.m &&
            trials[i].shape.n == s.n && trials[i].shape.k == s.k)
            return i;
    if (ntrials == SHAPE_MAX)
        return -1;
    trials[ntrials].shape = s;
    memset(trials[ntrials].best, 0, sizeof trials[ntrials].best);
    return ntrials++;
}

/* One candidate's product of a shape being timed, in the form the program
 * runs it: where B is a kept operand (`kept`) and packed.c keeps it for
 * that library, B packed once (outside the timing, as packed.c packs it at
 * the first step) and each call its kept path (tessel's kernel's run_b,
 * oneDNN's packed matmul); else the library's call. Its own C and packed
 * B: one thread uses a packed B at a time. */
typedef struct ShapeRun {
    SgemmFn *fn;
    SgemmShape s;
    const float *a, *b;
    int64_t lda, ldb;
    float *c;
    DevSgemmAvx512B *x;
    DevSgemmPacked *p;
} ShapeRun;

static bool shape_run_init(ShapeRun *r, int lib, SgemmFn *fn, SgemmShape s, const float *a, int64_t lda,
                           const float *b, int64_t ldb, bool kept)
{
    *r = (ShapeRun){.fn = fn, .s = s, .a = a, .b = b, .lda = lda, .ldb = ldb};
    r->c = malloc((size_t)(s.m * s.n) * sizeof *r->c);
    if (!r->c)
        return false;
    if (kept && !s.ta && dev_packed_keeps(lib_choice[lib], s.m, s.n, s.k)) {
        if (lib_choice[lib] == DEV_SGEMM_AVX512)
            r->x = dev_sgemm_avx512_pack_b(s.n, s.k, b, s.tb, ldb);
        else if (lib_choice[lib] == DEV_SGEMM_ONEDNN)
            r->p = dev_sgemm_pack(s.m, s.n, s.k, lda, b, s.tb, ldb, s.n);
    }
    return true;
}

static void shape_run(const ShapeRun *r)
{
    const SgemmShape *s = &r->s;
    if (r->x && dev_sgemm_avx512_run_b(r->x, s->m, r->a, r->lda, r->c, s->n))
        return;
    if (r->p && dev_sgemm_packed_run(r->p, r->a, r->c))
        return;
    r->fn(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n,
          (int)s->k, 1.0f, r->a, (int)r->lda, r->b, (int)r->ldb, 0.0f, r->c, (int)s->n);
}

static void shape_run_free(ShapeRun *r)
{
    dev_sgemm_avx512_b_free(r->x);
    dev_sgemm_packed_free(r->p);
    free(r->c);
}

/* A second thread computing the same product in the same library beside
 * each timed call, as the program's other device does: beside a second
 * core's product the libraries rank otherwise than one thread alone
 * (BENCHMARKS.md, gemm49 and shape49). `lib` is the library it runs
 * (-1: none, it waits); `running` the one whose call it last started. */
typedef struct Beside {
    ShapeRun run[NLIBS];
    atomic_int lib, running;
    atomic_bool stop;
} Beside;

static void *beside_loop(void *arg)
{
    Beside *w = arg;
    while (!atomic_load(&w->stop)) {
        int lib = atomic_load(&w->lib);
        atomic_store(&w->running, lib);
        if (lib >= 0)
            shape_run(&w->run[lib]);
        else
            sched_yield();
    }
    return NULL;
}

/* The library (index) for a large row-major product at one thread: its
 * shape's, or measured now (blas_shapes.c: the probe's two fastest in
 * turns, SHAPE_ROUNDS calls each, A B B A A B, on this call's operands
 * into a scratch C, in the program's form (ShapeRun: kept where B is),
 * the best thread CPU time each). Outside the lock: devices that reach
 * the shape together time it together, as they run it, their best times
 * pooled; the first to finish decides for all, before any of them
 * computes the product. Where `beside` (a shape told before the devices
 * run: dev_blas_sgemm_prepare_shape), a second thread runs the same
 * library's product beside each timed call (Beside). -1 where the table
 * is full or there is no memory to measure with (the probe's choice
 * then). */
static int shape_lib(SgemmShape s, const float *a, int64_t lda, const float *b, int64_t ldb, bool kept, bool beside)
{
    pthread_mutex_lock(&probe_lock);
    int lib = sgemm_shapes_find(&shapes, s);
    int cand[2], t = -1;
    SgemmFn *fn[NLIBS] = {0}; /* the candidates' functions, as the lock saw them (a probe rewrites lib_fn) */
    if (lib < 0 && shapes.n < SHAPE_MAX && sgemm_shapes_candidates(probed_rate, cand) == 2 && lib_fn[cand[0]] &&
        lib_fn[cand[1]]) {
        t = trial_of(s);
        fn[cand[0]] = lib_fn[cand[0]];
        fn[cand[1]] = lib_fn[cand[1]];
    }
    pthread_mutex_unlock(&probe_lock);
    if (t < 0)
        return lib;
    ShapeRun run[NLIBS] = {0};
    Beside *w = beside ? calloc(1, sizeof *w) : NULL;
    bool ok = true, w_ok = w != NULL; /* the second thread's runs made (without them, timed alone) */
    for (int j = 0; j < 2; j++) {
        ok = ok && shape_run_init(&run[cand[j]], cand[j], fn[cand[j]], s, a, lda, b, ldb, kept);
        w_ok = w_ok && shape_run_init(&w->run[cand[j]], cand[j], fn[cand[j]], s, a, lda, b, ldb, kept);
    }
    pthread_t th;
    if (w) {
        atomic_store(&w->lib, -1);
        atomic_store(&w->running, -1);
        if (!ok || !w_ok || pthread_create(&th, NULL, beside_loop, w) != 0) {
            for (int j = 0; j < 2; j++)
                shape_run_free(&w->run[cand[j]]);
            free(w);
            w = NULL;
        }
    }
    /* How much of the timed calls' wall time the second thread computed
     * (a loaded machine may leave it no core): the verdict says it. */
    clockid_t beside_clock;
    bool clocked = w && pthread_getcpuclockid(th, &beside_clock) == 0;
    double beside_cpu = 0, timed_wall = 0;
    for (int r = 0; ok && r < 2 * SHAPE_ROUNDS; r++) {
        int i = cand[(r + r / 2) % 2]; /* 0 1 1 0 0 1 */
        if (w) { /* the second thread in this library's call before the clock starts */
            atomic_store(&w->lib, i);
            while (atomic_load(&w->running) != i)
                sched_yield();
        }
        struct timespec b0 = {0}, b1 = {0};
        if (clocked)
            clock_gettime(beside_clock, &b0);
        double w0 = now_s(), t0 = thread_cpu_s();
        shape_run(&run[i]);
        double sec = thread_cpu_s() - t0;
        if (clocked) {
            clock_gettime(beside_clock, &b1);
            timed_wall += now_s() - w0;
            beside_cpu += (double)(b1.tv_sec - b0.tv_sec) + (double)(b1.tv_nsec - b0.tv_nsec) * 1e-9;
        }
        sec = sec > 0 ? sec : 1e-9;
        pthread_mutex_lock(&probe_lock);
        if (trials[t].best[i] == 0 || sec < trials[t].best[i])
            trials[t].best[i] = sec;
        pthread_mutex_unlock(&probe_lock);
    }
    bool ran_kept = false;
    /* under load the second thread may get no core while the calls are timed: 0 */
    double ran_beside = w && timed_wall > 0 ? beside_cpu / timed_wall : 0;
    for (int j = 0; j < 2; j++)
        ran_kept = ran_kept || run[cand[j]].x || run[cand[j]].p;
    if (w) {
        atomic_store(&w->stop, true);
        pthread_join(th, NULL);
        for (int j = 0; j < 2; j++)
            shape_run_free(&w->run[cand[j]]);
        free(w);
    }
    for (int j = 0; j < 2; j++)
        shape_run_free(&run[cand[j]]);
    if (!ok)
        return lib;
    pthread_mutex_lock(&probe_lock);
    lib = sgemm_shapes_find(&shapes, s);
    if (lib < 0) {
        int at = shapes.n;
        lib = sgemm_shapes_add(&shapes, s, trials[t].best, ran_kept);
        if (shapes.n > at) {
            shapes.e[at].timed_beside = w != NULL;
            shapes.e[at].beside = ran_beside;
        }
        snprintf(verdict, sizeof verdict, "%s", probe_verdict);
        small_clause(lib_index(atomic_load(&chosen)), 1);
        shapes_clause();
    }
    pthread_mutex_unlock(&probe_lock);
    return lib;
}

/* A product's row-major shape: a column-major C = op(A) op(B) is the
 * row-major C^T = op(B)^T op(A)^T, the operands swapped (sgemm_avx512.c
 * computes it so). */
static SgemmShape rowmajor_shape(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                                 int n, int k)
{
    if (order == CblasRowMajor)
        return (SgemmShape){.ta = ta != CblasNoTrans, .tb = tb != CblasNoTrans, .m = m, .n = n, .k = k};
    return (SgemmShape){.ta = tb != CblasNoTrans, .tb = ta != CblasNoTrans, .m = n, .n = m, .k = k};
}

/* Whether large products choose by shape now: under the probe at one BLAS
 * thread, measured at one. */
static bool by_shape(int nt)
{
    return nt == 1 && atomic_load(&chosen_threads) == 1;
}

/* DevBlas.sgemm under the probe: small products to OpenBLAS; the first
 * large one at a thread count measures, the next ones are watched, then
 * every large one at it goes to the library that was fastest. */
static void sgemm_probed(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n,
                         int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    int64_t macs = (int64_t)m * n * k;
    if (macs < PROBE_MIN_MACS) {
        /* Where another library's team was chosen at several threads, the
         * products that would wake OpenBLAS's pool go to it too: the pool
         * spins ~0.1 s after a call, beside the team (one device over 2
         * cores, a 1024^3 and a 128^3 dot a step: 10.5-13.6 ms a step
         * against 9.8-10.5 with every dot in oneDNN). */
        int nt = dev_blas_sgemm_thread_count();
        SgemmFn *f = nt == 1 ? dev_blas_sgemm_small(openblas_fn, macs) : openblas_fn;
        if (nt > 1 && macs >= OPENBLAS_POOL_MACS && atomic_load(&chosen_threads) == nt)
            f = atomic_load(&chosen);
        f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    SgemmFn *f = choice();
    if (by_shape(dev_blas_sgemm_thread_count())) {
        bool row = order == CblasRowMajor;
        int lib = shape_lib(rowmajor_shape(order, ta, tb, m, n, k), row ? a : b, row ? lda : ldb, row ? b : a,
                            row ? ldb : lda, false, false);
        if (lib >= 0 && lib_fn[lib])
            f = lib_fn[lib];
        f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else if (!atomic_load(&watched))
        sgemm_watched(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* As sgemm_probed picks for a product of that size (keep the two alike). */
SgemmFn *dev_blas_sgemm_for(SgemmFn *f, int64_t macs)
{
    if (f != sgemm_probed)
        return f;
    if (macs >= PROBE_MIN_MACS)
        return NULL; /* per shape, or the watch's: not known from the size */
    int nt = dev_blas_sgemm_thread_count();
    if (nt > 1)
        return macs >= OPENBLAS_POOL_MACS && atomic_load(&chosen_threads) == nt ? atomic_load(&chosen) : openblas_fn;
    return dev_blas_sgemm_small(openblas_fn, macs);
}

SgemmFn *dev_blas_sgemm_exact(void)
{
    return exact_fn ? exact_fn : dev_blas()->sgemm;
}

int dev_blas_sgemm_current(void)
{
    int lib = atomic_load(&want);
    if (lib != DEV_SGEMM_PROBE && lib != -1)
        return lib;
    if (!openblas_fn || !atomic_load(&watched) || atomic_load(&chosen_threads) != dev_blas_sgemm_thread_count())
        return DEV_SGEMM_PROBE;
    SgemmFn *f = atomic_load(&chosen);
    for (int i = 0; i < NLIBS; i++)
        if (f && f == lib_fn[i])
            return lib_choice[i];
    return DEV_SGEMM_PROBE;
}

/* dev_blas_sgemm_shape_lib's, and `beside` for shape_lib. */
static int shape_lib_of(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, bool kept, bool beside)
{
    int lib = atomic_load(&want);
    if ((lib != DEV_SGEMM_PROBE && lib != -1) || !dev_blas() || !openblas_fn || m * n * k < PROBE_MIN_MACS)
        return dev_blas_sgemm_current();
    (void)choice();
    if (!by_shape(dev_blas_sgemm_thread_count()))
        return dev_blas_sgemm_current();
    int i = shape_lib((SgemmShape){.ta = ta, .tb = tb, .m = m, .n = n, .k = k}, a, lda, b, ldb, kept, beside);
    return i >= 0 && lib_fn[i] ? lib_choice[i] : dev_blas_sgemm_current();
}

int dev_blas_sgemm_shape_lib(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                             const float *b, int64_t ldb, bool kept)
{
    return shape_lib_of(ta, tb, m, n, k, a, lda, b, ldb, kept, false);
}

int dev_blas_sgemm_shapes(void)
{
    pthread_mutex_lock(&probe_lock);
    int n = shapes.n;
    pthread_mutex_unlock(&probe_lock);
    return n;
}

void dev_blas_sgemm_prepare_shape(bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool kept, int devices)
{
    int lib = atomic_load(&want);
    if ((lib != DEV_SGEMM_PROBE && lib != -1) || m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX / k ||
        n > INT32_MAX / k || m * n * k < PROBE_MIN_MACS || !dev_blas() || !openblas_fn ||
        dev_blas_sgemm_thread_count() > 1)
        return;
    /* The operands: small exact values, as the probe's (no denormals);
     * their row strides the tightest, as a dot's own operands. */
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
    if (a && b) {
        for (int64_t i = 0; i < m * k; i++)
            a[i] = (float)((int)(i % 17) - 8) * 0.125f;
        for (int64_t i = 0; i < k * n; i++)
            b[i] = (float)((int)(i % 13) - 6) * 0.125f;
        (void)shape_lib_of(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, kept, devices > 1);
    }
    free(a);
    free(b);
}

void dev_blas_sgemm_prepare(int64_t largest_macs)
{
    /* After the load (inside dev_blas's pthread_once), openblas_fn is set
     * exactly when the probe is the choice. Several BLAS threads a device
     * (OPENBLAS_NUM_THREADS told so at the load): the devices may still
     * lower it, so the first large product measures, at the devices'
     * count, as without this call. */
    if (largest_macs < PROBE_MIN_MACS || !dev_blas() || !openblas_fn || dev_blas_sgemm_thread_count() > 1)
        return;
    (void)choice();
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
    if (lib == DEV_SGEMM_AVX512) {
        SgemmFn *g = dev_sgemm_avx512(openblas, why);
        if (g)
            snprintf(verdict, sizeof verdict, "avx512 (tuning)");
        return g;
    }
    if (lib == DEV_SGEMM_AMX_BF16X3) {
        exact_fn = openblas;
        SgemmFn *g = dev_sgemm_amx(openblas, why);
        if (g)
            snprintf(verdict, sizeof verdict,
                     "amx-bf16x3 (tuning; products under 2^18 multiply-adds, sums under 128 or thinner than a tile: "
                     "openblas)");
        return g;
    }
    openblas_fn = openblas;
    return sgemm_probed;
}
