/*
 * blas_watch.c: the probe's choice of f32 GEMM library held against the
 * program's own calls (issue 34).
 *
 * The probe (blas_choice.c) times the libraries on one product, each in
 * turn, with nothing else running in the process. A program's calls can
 * run far slower in the library it chose: another library's threads
 * compete with it. Measured on `dot_bench` (one device over both cores
 * of the AMD machine, oneDNN chosen at 2 threads, 200 GFLOP/s in the
 * probe): after each OpenBLAS call, OpenBLAS's pool thread spins in
 * sched_yield for about 0.1 s (2^28 cycles, its THREAD_TIMEOUT) and took
 * half of a core from oneDNN's OpenMP team, whose calls then ran 69
 * GFLOP/s (31 ms at 1024^3 instead of 10.7) for long stretches of rounds;
 * with OPENBLAS_THREAD_TIMEOUT=4 in the environment, never. A competing
 * process can do the same to one team more than to another (an OpenMP
 * team spins at its barriers where OpenBLAS's pool yields).
 *
 * So the first WATCH_CALLS large products from WATCH_AFTER_PROBE_S after
 * a probe (blas_choice.c) are timed (their rate, 2mnk / seconds, is known
 * after each call). Where their median
 * rate is at least WATCH_SLOW of the probe's for the library chosen, the
 * choice holds. Otherwise each other library present, the fastest in the
 * probe first, takes the next WATCH_CALLS calls, and the library whose
 * calls ran fastest (median) keeps the rest; the verdict's note says so.
 * A library on trial whose call runs under WATCH_SLOW of the best median
 * so far is out after that call (under load 15, BLIS's team ran 2 GFLOP/s
 * where OpenBLAS ran 8: each of its calls cost a second).
 * Medians: the first call after a switch may pay the previous library's
 * spinning, and one call of an odd shape (a thin k) runs slower anyway.
 * Once per probe: a choice made on the program's own calls is not
 * revisited (no flapping between libraries under a changing load).
 *
 * Pure bookkeeping on rates handed in, so the tests drive it with made-up
 * times (tests/unit/test_blas_sgemm.c); blas_choice.c calls it under its
 * lock and keeps the timing.
 */
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_SLOW 0.5

static const char *const watch_lib[SGEMM_LIBS] = {"openblas", "blis", "onednn", "avx512"};

void sgemm_watch_start(SgemmWatch *w, const double probed[SGEMM_LIBS], int chosen)
{
    memset(w, 0, sizeof *w);
    memcpy(w->probed, probed, sizeof w->probed);
    w->use = chosen;
    w->chosen = chosen;
    w->stage = WATCH_CHECK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sgemm_watch_median(const SgemmWatch *w, int lib)
{
    double r[WATCH_CALLS];
    int n = w->calls[lib];
    if (n == 0)
        return 0;
    memcpy(r, w->rates[lib], (size_t)n * sizeof *r);
    qsort(r, (size_t)n, sizeof *r, cmp_double);
    return n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

/* The next library to try: present (a probed rate), not yet timed on the
 * program's calls, the fastest in the probe; -1 when none is left. */
static int next_trial(const SgemmWatch *w)
{
    int best = -1;
    for (int i = 0; i < SGEMM_LIBS; i++)
        if (w->probed[i] > 0 && !w->ended[i] && (best < 0 || w->probed[i] > w->probed[best]))
            best = i;
    return best;
}

/* The trials are over: the fastest median keeps the calls, and the note
 * says what each library's calls ran. */
static void settle(SgemmWatch *w)
{
    int win = w->chosen;
    for (int i = 0; i < SGEMM_LIBS; i++)
        if (w->ended[i] && sgemm_watch_median(w, i) > sgemm_watch_median(w, win))
            win = i;
    w->use = win;
    w->stage = WATCH_DONE;
    int used = snprintf(w->note, sizeof w->note, "; %s's first %d calls ran %.1f GFLOP/s (%.2f of its probe), then",
                        watch_lib[w->chosen], WATCH_CALLS, sgemm_watch_median(w, w->chosen) * 1e-9,
                        sgemm_watch_median(w, w->chosen) / w->probed[w->chosen]);
    for (int i = 0; i < SGEMM_LIBS && used > 0 && (size_t)used < sizeof w->note; i++)
        if (i != w->chosen && w->ended[i])
            used += snprintf(w->note + used, sizeof w->note - (size_t)used, " %s %.1f%s", watch_lib[i],
                             sgemm_watch_median(w, i) * 1e-9, w->calls[i] < WATCH_CALLS ? " (cut short)" : "");
    if (used > 0 && (size_t)used < sizeof w->note)
        snprintf(w->note + used, sizeof w->note - (size_t)used, ": %s", watch_lib[win]);
}

/* The best median of the libraries whose turn is over. */
static double best_ended(const SgemmWatch *w)
{
    double best = 0;
    for (int i = 0; i < SGEMM_LIBS; i++)
        if (w->ended[i] && sgemm_watch_median(w, i) > best)
            best = sgemm_watch_median(w, i);
    return best;
}

bool sgemm_watch_record(SgemmWatch *w, int lib, double flops, double seconds)
{
    if (w->stage == WATCH_DONE || lib != w->use)
        return w->stage == WATCH_DONE; /* a call that started before the last switch */
    double rate = seconds > 0 ? flops / seconds : 0;
    w->rates[lib][w->calls[lib]++] = rate;
    /* A library on trial whose call ran under WATCH_SLOW of the best so far
     * is out at once: under load an OpenMP team can run 50x slower than
     * OpenBLAS, and two more of its calls would cost seconds. */
    bool cut = w->stage == WATCH_TRY && rate < WATCH_SLOW * best_ended(w);
    if (w->calls[lib] < WATCH_CALLS && !cut)
        return false;
    w->ended[lib] = true;
    if (w->stage == WATCH_CHECK && sgemm_watch_median(w, lib) >= WATCH_SLOW * w->probed[lib]) {
        w->stage = WATCH_DONE;
        return true;
    }
    w->stage = WATCH_TRY;
    int next = next_trial(w);
    if (next < 0)
        settle(w);
    else
        w->use = next;
    return w->stage == WATCH_DONE;
}
