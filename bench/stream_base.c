/*
 * stream_base.c: the memory bandwidth the in-process collective
 * benchmarks (`allreduce-local`, `allgather-local`, `reduce-scatter-local`,
 * `alltoall-local`) are measured against: T threads (as many as tessel's
 * devices), each pinned to core t (tessel binds its device threads to
 * their cores) and each working on its own slice of arrays it touched
 * first (warm, as tessel's later steps are), all starting from a barrier;
 * a pass lasts until the last thread is done.
 *   triad   a[i] = b[i] + s * c[i]   (STREAM's: 2 arrays read, 1 written)
 *   memcpy  memcpy(a, b, slice)      (1 read, 1 written)
 * Bytes are counted as STREAM counts them (every array element read or
 * written once; no read for ownership). Prints `stream triad X GB/s
 * memcpy Y GB/s (min A, max B; min C, max D)`, medians of REPS passes each
 * (interleaved), the extremes in parentheses. The triad's result is
 * checked (exactly: one f32 multiply-add per element, computed the same
 * way again).
 *
 * usage: stream_base N T [REPS]    (N f32 elements per array)
 */
#include "bench_common.h"

#include <pthread.h>
#include <sched.h>

typedef struct Job {
    int t, nt, reps;
    int64_t n;
    float *a, *b, *c;
    pthread_barrier_t *bar;
    double *triad, *copy; /* [reps], thread 0 writes */
} Job;

static void *worker(void *arg)
{
    Job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->t, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    int64_t lo = j->n * j->t / j->nt, hi = j->n * (j->t + 1) / j->nt;
    for (int64_t i = lo; i < hi; i++) {
        j->a[i] = 0;
        j->b[i] = (float)(i % 1000) * 0.5f;
        j->c[i] = (float)(i % 7);
    }
    const float s = 3.0f;
    for (int r = 0; r < j->reps; r++) {
        for (int k = 0; k < 2; k++) {
            pthread_barrier_wait(j->bar);
            double t0 = bench_now_ms();
            if (k == 0) {
                float *restrict a = j->a;
                const float *restrict b = j->b, *restrict c = j->c;
                for (int64_t i = lo; i < hi; i++)
                    a[i] = b[i] + s * c[i];
            } else {
                memcpy(j->a + lo, j->b + lo, (size_t)(hi - lo) * sizeof(float));
            }
            pthread_barrier_wait(j->bar);
            if (j->t == 0)
                (k == 0 ? j->triad : j->copy)[r] = bench_now_ms() - t0;
        }
    }
    /* The last pass was the copy: redo the triad once and check it. */
    for (int64_t i = lo; i < hi; i++)
        j->a[i] = j->b[i] + s * j->c[i];
    return NULL;
}

int main(int argc, char **argv)
{
    int64_t n = argc >= 3 ? atoll(argv[1]) : 0;
    int nt = argc >= 3 ? atoi(argv[2]) : 0, reps = argc >= 4 ? atoi(argv[3]) : 10;
    if (n < 1 || nt < 1 || nt > 1024 || reps < 1) {
        fprintf(stderr, "usage: stream_base N T [REPS]\n");
        return 2;
    }
    float *a = bench_alloc_f32(n), *b = bench_alloc_f32(n), *c = bench_alloc_f32(n);
    double *triad = malloc((size_t)reps * sizeof *triad), *copy = malloc((size_t)reps * sizeof *copy);
    Job *jobs = calloc((size_t)nt, sizeof *jobs);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    pthread_barrier_t bar;
    if (!a || !b || !c || !triad || !copy || !jobs || !th || pthread_barrier_init(&bar, NULL, (unsigned)nt)) {
        fprintf(stderr, "stream_base: out of memory\n");
        return 1;
    }
    for (int t = 0; t < nt; t++) {
        jobs[t] = (Job){.t = t, .nt = nt, .reps = reps, .n = n, .a = a, .b = b, .c = c, .bar = &bar,
                        .triad = triad, .copy = copy};
        if (pthread_create(&th[t], NULL, worker, &jobs[t])) {
            fprintf(stderr, "stream_base: cannot start thread %d\n", t);
            return 1;
        }
    }
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    for (int64_t i = 0; i < n; i++) {
        float want = (float)(i % 1000) * 0.5f + 3.0f * (float)(i % 7);
        if (a[i] != want) {
            fprintf(stderr, "stream_base: a[%lld] is %g, expected %g\n", (long long)i, (double)a[i],
                    (double)want);
            return 1;
        }
    }
    double tm = bench_median(triad, reps), cm = bench_median(copy, reps); /* sort */
    double bytes = (double)n * sizeof(float);
    printf("stream triad %.2f GB/s memcpy %.2f GB/s (triad min %.3f ms, median %.3f ms, max %.3f ms; memcpy min "
           "%.3f ms, median %.3f ms, max %.3f ms; %lld f32 an array, %d threads, %d passes)\n",
           3 * bytes / (tm * 1e6), 2 * bytes / (cm * 1e6), triad[0], tm, triad[reps - 1], copy[0], cm,
           copy[reps - 1], (long long)n, nt, reps);
    free(a);
    free(b);
    free(c);
    free(triad);
    free(copy);
    free(jobs);
    free(th);
    return 0;
}
