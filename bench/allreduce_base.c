/*
 * allreduce_base.c: the baseline of the `allreduce` benchmark: MPI_Allreduce
 * (sum, out of place: tessel's result is a buffer of its own too) of the
 * same replicated f32[N] that `mpirun -np P tessel run allreduce.hlo
 * --random-inputs SEED` reduces (bench/gen.py allreduce N).
 *
 * Buffers are treated as tessel treats its own: the result buffer is
 * allocated once (asking for transparent huge pages, as tessel's large
 * buffers do) and reused, so the first call pays its first touch (cold,
 * as tessel's first step does) and the K calls after it run on warm
 * memory (as tessel's later steps reuse the buffers the first one
 * freed). Each call starts from a barrier; its time is the slowest
 * rank's. Rank 0 prints `base cold MS warm MS total MS min MS max MS`:
 * the first call, the median of the K warm ones, their sum with the
 * first, and the fastest and slowest warm call.
 *
 * Validation: the result is exactly P * x (x + x is exact in f32), on
 * every rank; with --check FILE.npy tessel's output must be exactly the
 * same. Exit 1 on a mismatch.
 *
 * usage: mpirun -np P allreduce_base N SEED [--warm K] [--check FILE.npy]
 */
#include "bench_common.h"

#include <mpi.h>
#include <sys/mman.h>

static double reduce_once(const float *x, float *y, int64_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = bench_now_ms() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* Index of the first element of got that is not p * x, or -1. */
static int64_t first_wrong(const float *got, const float *x, int64_t n, int p)
{
    for (int64_t i = 0; i < n; i++)
        if (got[i] != x[i] * (float)p)
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t n = argc >= 3 ? atoll(argv[1]) : 0;
    if (n < 1 || n > (1ll << 31) - 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P allreduce_base N SEED [--warm K] [--check FILE.npy]\n");
        MPI_Finalize();
        return 2;
    }
    uint64_t seed = strtoull(argv[2], NULL, 0);
    int warm = 5;
    const char *check = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc)
            check = argv[++i];
    }
    float *x = bench_alloc_f32(n), *y = bench_alloc_f32(n);
    double *tw = malloc((size_t)(warm > 0 ? warm : 1) * sizeof *tw);
    if (!x || !y || !tw)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int64_t i = 0; i < n; i++)
        x[i] = bench_random_f32(seed, 0, (uint64_t)i);
    double cold = reduce_once(x, y, n);
    for (int r = 0; r < warm; r++)
        tw[r] = reduce_once(x, y, n);
    int rc = 0;
    int64_t bad = first_wrong(y, x, n, size);
    if (bad >= 0) {
        fprintf(stderr, "allreduce_base: rank %d: y[%lld] is %g, expected %g\n", rank,
                (long long)bad, (double)y[bad], (double)(x[bad] * (float)size));
        rc = 1;
    }
    if (rank == 0) {
        double total = cold;
        for (int r = 0; r < warm; r++)
            total += tw[r];
        double med = warm > 0 ? bench_median(tw, warm) : cold; /* sorts tw */
        printf("base cold %.3f ms warm %.3f ms total %.3f ms min %.3f ms max %.3f ms\n", cold, med, total,
               warm > 0 ? tw[0] : cold, warm > 0 ? tw[warm - 1] : cold);
        int64_t m = 0;
        float *t = check ? bench_read_npy_f32(check, &m) : NULL;
        if (check && (!t || m != n)) {
            fprintf(stderr, "allreduce_base: %s: expected %lld elements\n", check, (long long)n);
            rc = 1;
        } else if (t && (bad = first_wrong(t, x, n, size)) >= 0) {
            fprintf(stderr, "allreduce_base: tessel's y[%lld] is %g, expected %g\n", (long long)bad,
                    (double)t[bad], (double)(x[bad] * (float)size));
            rc = 1;
        }
        free(t);
    }
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(x);
    free(y);
    free(tw);
    MPI_Finalize();
    return any;
}
