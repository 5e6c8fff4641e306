/*
 * coll_base.c: the baselines of the `allgather`, `reduce-scatter` and
 * `alltoall` benchmarks: the raw MPI call on the buffers that `mpirun -np
 * P tessel run KIND.hlo --spmd --per-device --random-inputs SEED`
 * exchanges (bench/gen.py allgather|reducescatter|alltoall N: one f32[N]
 * operand per device, rank d's drawn as tessel draws device d's):
 *   allgather      MPI_Allgather of N floats into P * N
 *   reducescatter  MPI_Reduce_scatter_block (sum) of N into N / P
 *   alltoall       MPI_Alltoall of N / P floats to each rank
 *
 * Timing as allreduce_base.c: the result buffer allocated once (huge
 * pages asked for), the first call cold, K warm calls after it, each from
 * a barrier and timed as the slowest rank; rank 0 prints `base cold MS
 * warm MS total MS min MS max MS`.
 *
 * Validation: every rank's result equals the one computed here from every
 * rank's operand (exactly: copies, and for P = 2 one f32 add, which every
 * order rounds alike; for P > 2 the sum in rank order, within 1e-6 of the
 * largest operand); with --check FILE.npy rank 0 checks tessel's output of
 * device 0 the same way. Without MPI (--devices P --device D --check
 * FILE) only the file is checked: tessel's device D of P devices run in
 * one process. Exit 1 on a mismatch.
 *
 * usage: mpirun -np P coll_base KIND N SEED [--warm K] [--check FILE.npy]
 *        coll_base KIND N SEED --devices P --device D --check FILE.npy
 */
#include "bench_common.h"

#include <math.h>
#include <mpi.h>
#include <stdbool.h>

enum { ALLGATHER, REDUCESCATTER, ALLTOALL };

static const char *const KINDS[] = {"allgather", "reducescatter", "alltoall"};

/* Device d's operand element i. */
static float opnd(uint64_t seed, int d, int64_t i)
{
    return bench_random_f32(bench_device_seed(seed, (uint64_t)d), 0, (uint64_t)i);
}

static int64_t result_len(int kind, int64_t n, int p)
{
    return kind == ALLGATHER ? n * p : kind == REDUCESCATTER ? n / p : n;
}

/* Device d's expected result element i (of P devices). */
static float expect(int kind, uint64_t seed, int64_t n, int p, int d, int64_t i)
{
    int64_t b = n / p;
    switch (kind) {
    case ALLGATHER:
        return opnd(seed, (int)(i / n), i % n);
    case REDUCESCATTER: {
        float s = opnd(seed, 0, d * b + i);
        for (int j = 1; j < p; j++)
            s += opnd(seed, j, d * b + i);
        return s;
    }
    default: /* block j of the result: device j's block d */
        return opnd(seed, (int)(i / b), d * b + i % b);
    }
}

/* The first element of got (len of them) that is not device d's result,
 * or -1; exact but for sums of more than two. */
static int64_t first_wrong(int kind, const float *got, int64_t len, uint64_t seed, int64_t n, int p, int d)
{
    for (int64_t i = 0; i < len; i++) {
        float want = expect(kind, seed, n, p, d, i);
        bool ok = kind == REDUCESCATTER && p > 2 ? fabsf(got[i] - want) <= 1e-6f * (float)p : got[i] == want;
        if (!ok)
            return i;
    }
    return -1;
}

static int check_file(int kind, const char *path, uint64_t seed, int64_t n, int p, int d)
{
    int64_t m = 0;
    float *t = bench_read_npy_f32(path, &m);
    int64_t len = result_len(kind, n, p), bad;
    int rc = 0;
    if (!t || m != len) {
        fprintf(stderr, "coll_base: %s: expected %lld elements\n", path, (long long)len);
        rc = 1;
    } else if ((bad = first_wrong(kind, t, len, seed, n, p, d)) >= 0) {
        fprintf(stderr, "coll_base: tessel's %s result of device %d: [%lld] is %g, expected %g\n", KINDS[kind], d,
                (long long)bad, (double)t[bad], (double)expect(kind, seed, n, p, d, bad));
        rc = 1;
    }
    free(t);
    return rc;
}

static double call_once(int kind, const float *x, float *y, int64_t n, int p)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    if (kind == ALLGATHER)
        MPI_Allgather(x, (int)n, MPI_FLOAT, y, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    else if (kind == REDUCESCATTER)
        MPI_Reduce_scatter_block(x, y, (int)(n / p), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else
        MPI_Alltoall(x, (int)(n / p), MPI_FLOAT, y, (int)(n / p), MPI_FLOAT, MPI_COMM_WORLD);
    double mine = bench_now_ms() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv)
{
    int kind = -1;
    for (int k = 0; argc >= 2 && k < 3; k++)
        if (!strcmp(argv[1], KINDS[k]))
            kind = k;
    int64_t n = argc >= 4 ? atoll(argv[2]) : 0;
    int warm = 5, devices = 0, device = 0;
    const char *check = NULL;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc)
            check = argv[++i];
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc)
            devices = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
    }
    if (kind < 0 || n < 1 || n > (1ll << 31) - 1) {
        fprintf(stderr, "usage: mpirun -np P coll_base allgather|reducescatter|alltoall N SEED [--warm K] "
                        "[--check FILE.npy]\n       coll_base KIND N SEED --devices P --device D --check FILE.npy\n");
        return 2;
    }
    uint64_t seed = strtoull(argv[3], NULL, 0);
    if (devices > 0) {
        if (!check || n % devices || device < 0 || device >= devices) {
            fprintf(stderr, "coll_base: --devices needs --check, N divisible by P and 0 <= D < P\n");
            return 2;
        }
        return check_file(kind, check, seed, n, devices, device);
    }
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (n % p) {
        if (rank == 0)
            fprintf(stderr, "coll_base: N (%lld) must divide among %d ranks\n", (long long)n, p);
        MPI_Finalize();
        return 2;
    }
    int64_t len = result_len(kind, n, p);
    float *x = bench_alloc_f32(n), *y = bench_alloc_f32(len);
    double *tw = malloc((size_t)(warm > 0 ? warm : 1) * sizeof *tw);
    if (!x || !y || !tw)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int64_t i = 0; i < n; i++)
        x[i] = opnd(seed, rank, i);
    double cold = call_once(kind, x, y, n, p);
    for (int r = 0; r < warm; r++)
        tw[r] = call_once(kind, x, y, n, p);
    int rc = 0;
    int64_t bad = first_wrong(kind, y, len, seed, n, p, rank);
    if (bad >= 0) {
        fprintf(stderr, "coll_base: rank %d: %s result [%lld] is %g, expected %g\n", rank, KINDS[kind],
                (long long)bad, (double)y[bad], (double)expect(kind, seed, n, p, rank, bad));
        rc = 1;
    }
    if (rank == 0) {
        double total = cold;
        for (int r = 0; r < warm; r++)
            total += tw[r];
        double med = warm > 0 ? bench_median(tw, warm) : cold; /* sorts tw */
        printf("base cold %.3f ms warm %.3f ms total %.3f ms min %.3f ms max %.3f ms\n", cold, med, total,
               warm > 0 ? tw[0] : cold, warm > 0 ? tw[warm - 1] : cold);
        if (check)
            rc |= check_file(kind, check, seed, n, p, 0);
    }
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(x);
    free(y);
    free(tw);
    MPI_Finalize();
    return any;
}
