/*
 * mlp_base.c: the hand-written baseline of the `mlp` benchmark: one
 * Megatron MLP step with MPI + OpenBLAS, the same shapes, sharding and
 * inputs as `mpirun -np P tessel run mlp.hlo --random-inputs SEED`
 * (bench/gen.py mlp B D F).
 *
 * Rank r holds x[B,D] whole, the column block r of W1[D,F] and the row block
 * r of W2[F,D] (F/P each), and computes
 *     h = x . W1[:, r]   (sgemm)     a = tanh(h)
 *     y_r = a . W2[r, :] (sgemm)     y = sum over ranks of y_r (MPI_Allreduce)
 * exactly what tessel's partitioner emits for that module. OpenBLAS gets as
 * many threads as the rank has cores in its binding (tessel does the same).
 *
 * Timing: the first step of the process (cold: first touch of h and y,
 * BLAS threads starting, as in a `tessel run` process, which runs one step)
 * and the median of --warm K further steps; a step is timed from a barrier
 * to the end of the all-reduce, the figure is the slowest rank's. Rank 0
 * prints `base cold MS warm MS total MS` (total: the cold step and the K warm
 * ones, what `tessel run --steps K+1` times).
 *
 * Validation (--check FILE.npy: tessel's output): tessel's y and this y
 * agree within 1e-4 of max|y|, and 4 sampled entries of y match a double
 * precision product computed here from the inputs. Exit 1 on a mismatch.
 *
 * usage: mpirun -np P mlp_base B D F SEED [--warm K] [--check FILE.npy]
 */
#include "bench_common.h"

#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>

void openblas_set_num_threads(int n);

/* Input leaves of the mlp module: 0 x[B,D], 1 W1[D,F], 2 W2[F,D]. */
static void fill_block(float *out, uint64_t seed, uint64_t leaf, int64_t cols, int64_t r0,
                       int64_t nr, int64_t c0, int64_t nc)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            out[r * nc + c] = bench_random_f32(seed, leaf, (uint64_t)((r0 + r) * cols + c0 + c));
}

static double step(const float *x, const float *w1, const float *w2, int64_t b, int64_t d,
                   int64_t fs, float **h, float **y)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    free(*h);
    free(*y);
    *h = malloc((size_t)(b * fs) * sizeof **h); /* a fresh result per step, as tessel's */
    *y = malloc((size_t)(b * d) * sizeof **y);
    if (!*h || !*y)
        MPI_Abort(MPI_COMM_WORLD, 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)fs, (int)d, 1.0f, x, (int)d,
                w1, (int)fs, 0.0f, *h, (int)fs);
    for (int64_t i = 0; i < b * fs; i++)
        (*h)[i] = tanhf((*h)[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)d, (int)fs, 1.0f, *h,
                (int)fs, w2, (int)d, 0.0f, *y, (int)d);
    MPI_Allreduce(MPI_IN_PLACE, *y, (int)(b * d), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = bench_now_ms() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* y against tessel's output and against sampled double-precision entries. */
static int validate(const float *y, const char *check, uint64_t seed, int64_t b, int64_t d,
                    int64_t f)
{
    double maxabs = 0;
    for (int64_t i = 0; i < b * d; i++)
        maxabs = fmax(maxabs, fabs(y[i]));
    double tol = 1e-4 * (maxabs > 1 ? maxabs : 1);
    int64_t n = 0;
    float *t = bench_read_npy_f32(check, &n);
    if (!t)
        return 1;
    if (n != b * d) {
        fprintf(stderr, "mlp_base: %s has %lld elements, expected %lld\n", check, (long long)n,
                (long long)(b * d));
        free(t);
        return 1;
    }
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)t[i] - y[i]) <= tol)) {
            fprintf(stderr, "mlp_base: tessel's y[%lld] is %g, MPI+BLAS's %g\n", (long long)i,
                    (double)t[i], (double)y[i]);
            free(t);
            return 1;
        }
    free(t);
    for (int s = 0; s < 4; s++) {
        int64_t i = (s * 7919) % b, j = (s * 104729) % d;
        double ref = 0;
        for (int64_t k = 0; k < f; k++) {
            double hk = 0;
            for (int64_t q = 0; q < d; q++)
                hk += (double)bench_random_f32(seed, 0, (uint64_t)(i * d + q)) *
                      bench_random_f32(seed, 1, (uint64_t)(q * f + k));
            ref += tanh(hk) * bench_random_f32(seed, 2, (uint64_t)(k * d + j));
        }
        if (fabs(ref - y[i * d + j]) > tol) {
            fprintf(stderr, "mlp_base: y[%lld,%lld] is %g, expected %g\n", (long long)i,
                    (long long)j, (double)y[i * d + j], ref);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P mlp_base B D F SEED [--warm K] [--check FILE.npy]\n");
        MPI_Finalize();
        return 2;
    }
    int64_t b = atoll(argv[1]), d = atoll(argv[2]), f = atoll(argv[3]);
    uint64_t seed = strtoull(argv[4], NULL, 0);
    int warm = 5;
    const char *check = NULL;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc)
            check = argv[++i];
    }
    if (b < 1 || d < 1 || f < 1 || f % size != 0 || warm < 0) {
        if (rank == 0)
            fprintf(stderr, "mlp_base: bad sizes (F must divide among %d ranks)\n", size);
        MPI_Finalize();
        return 2;
    }
    cpu_set_t cs;
    int cores = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 1;
    openblas_set_num_threads(cores > 0 ? cores : 1);
    int64_t fs = f / size;
    float *x = malloc((size_t)(b * d) * sizeof *x), *w1 = malloc((size_t)(d * fs) * sizeof *w1),
          *w2 = malloc((size_t)(fs * d) * sizeof *w2), *h = NULL, *y = NULL;
    double *tw = malloc((size_t)(warm + 1) * sizeof *tw);
    if (!x || !w1 || !w2 || !tw)
        MPI_Abort(MPI_COMM_WORLD, 1);
    fill_block(x, seed, 0, d, 0, b, 0, d);
    fill_block(w1, seed, 1, f, 0, d, rank * fs, fs);
    fill_block(w2, seed, 2, d, rank * fs, fs, 0, d);
    double cold = step(x, w1, w2, b, d, fs, &h, &y);
    for (int r = 0; r < warm; r++)
        tw[r] = step(x, w1, w2, b, d, fs, &h, &y);
    int rc = 0;
    if (rank == 0) {
        double total = cold;
        for (int r = 0; r < warm; r++)
            total += tw[r];
        printf("base cold %.3f ms warm %.3f ms total %.3f ms\n", cold,
               warm ? bench_median(tw, warm) : cold, total);
        if (check)
            rc = validate(y, check, seed, b, d, f);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(x);
    free(w1);
    free(w2);
    free(h);
    free(y);
    free(tw);
    MPI_Finalize();
    return rc;
}
