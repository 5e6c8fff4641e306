/*
 * train_base.c: the hand-written baseline of the `train` benchmark: one SGD
 * training step of the Megatron MLP with MPI + OpenBLAS, the same shapes,
 * sharding, inputs and learning rate as `mpirun -np P tessel run step.hlo
 * --random-inputs SEED`, where step.hlo is `tessel grad train.hlo --wrt
 * w1,w2 --sgd LR` of bench/gen.py train B D F.
 *
 * Rank r holds x[B,D] whole, the column block r of W1[D,F] and the row block
 * r of W2[F,D] (F/P each). The loss is L = sum(y^2) / 2, so dL/dy = y:
 *     h = x . W1_r            a = tanh(h)
 *     y = sum over ranks of a . W2_r            (MPI_Allreduce)
 *     L = sum(y^2) / 2 (every rank has y)
 *     da = y . W2_r^T         dh = da (1 - a^2)
 *     W2_r -= LR a^T . y      W1_r -= LR x^T . dh
 * the updates in place (sgemm with beta = 1), after da has read the old
 * W2_r: no collective beyond the forward one, as tessel's partitioner emits
 * it (the weight gradients stay sharded with the weights). h, y and da are
 * fresh each step, as tessel's results are (mlp_base.c does the same).
 *
 * Timing as mlp_base.c: the first step (cold) and the median of --warm K
 * further ones, each from a barrier to the end of the updates, the slowest
 * rank's; rank 0 prints `base cold MS warm MS total MS`.
 *
 * Validation (--check DIR/output_0.npy: tessel's last step): tessel's loss
 * (output 0, computed before its last update) equals this one's last within
 * 1e-4 relative (a sum of B x D f32 squares: tessel's in f32), and tessel's updated W2 (output 2) equals rank 0's block
 * within 1e-4 of its largest entry. Exit 1 on a mismatch.
 *
 * usage: mpirun -np P train_base B D F SEED LR [--warm K] [--check FILE.npy]
 */
#include "bench_common.h"

#include <cblas.h>
#include <libgen.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>

void openblas_set_num_threads(int n);

static void fill_block(float *out, uint64_t seed, uint64_t leaf, int64_t cols, int64_t r0, int64_t nr,
                       int64_t c0, int64_t nc)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            out[r * nc + c] = bench_random_f32(seed, leaf, (uint64_t)((r0 + r) * cols + c0 + c));
}

typedef struct Net {
    int64_t b, d, fs;
    float lr;
    float *x, *w1, *w2;
    double loss;
} Net;

static float *fresh(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p)
        MPI_Abort(MPI_COMM_WORLD, 1);
    return p;
}

static double step(Net *n)
{
    int B = (int)n->b, D = (int)n->d, Fs = (int)n->fs;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    float *a = fresh((size_t)B * Fs), *y = fresh((size_t)B * D), *da = fresh((size_t)B * Fs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, Fs, D, 1.0f, n->x, D, n->w1, Fs, 0.0f, a, Fs);
    for (int64_t i = 0; i < (int64_t)B * Fs; i++)
        a[i] = tanhf(a[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, D, Fs, 1.0f, a, Fs, n->w2, D, 0.0f, y, D);
    MPI_Allreduce(MPI_IN_PLACE, y, B * D, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double loss = 0; /* in double: the check compares it with tessel's */
    for (int64_t i = 0; i < (int64_t)B * D; i++)
        loss += (double)y[i] * y[i];
    n->loss = 0.5 * loss;
    /* da = dy . W2_r^T with dy = y, before W2_r changes */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, Fs, D, 1.0f, y, D, n->w2, D, 0.0f, da, Fs);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Fs, D, B, -n->lr, a, Fs, y, D, 1.0f, n->w2, D);
    for (int64_t i = 0; i < (int64_t)B * Fs; i++)
        da[i] *= 1.0f - a[i] * a[i];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, Fs, B, -n->lr, n->x, D, da, Fs, 1.0f, n->w1, Fs);
    free(a);
    free(y);
    free(da);
    double mine = bench_now_ms() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static int validate(const Net *n, const char *check)
{
    char *dup = strdup(check);
    if (!dup)
        return 1;
    char *dir = dirname(dup), path[4096];
    int64_t cnt = 0;
    float *l = bench_read_npy_f32(check, &cnt);
    int rc = 0;
    if (!l || cnt != 1 || !(fabs(l[0] - n->loss) <= 1e-4 * fabs(n->loss))) {
        fprintf(stderr, "train_base: tessel's loss is %g, MPI+BLAS's %g\n", l ? (double)l[0] : NAN, n->loss);
        rc = 1;
    }
    free(l);
    snprintf(path, sizeof path, "%s/output_2.npy", dir);
    float *w = rc ? NULL : bench_read_npy_f32(path, &cnt);
    if (!rc && (!w || cnt < n->fs * n->d)) {
        fprintf(stderr, "train_base: %s is missing or too small\n", path);
        rc = 1;
    }
    double maxabs = 0;
    for (int64_t i = 0; !rc && i < n->fs * n->d; i++)
        maxabs = fmax(maxabs, fabs(n->w2[i]));
    for (int64_t i = 0; !rc && i < n->fs * n->d; i++)
        if (!(fabs((double)w[i] - n->w2[i]) <= 1e-4 * maxabs)) {
            fprintf(stderr, "train_base: tessel's W2[%lld] is %g, MPI+BLAS's %g\n", (long long)i, (double)w[i],
                    (double)n->w2[i]);
            rc = 1;
        }
    free(w);
    free(dup);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P train_base B D F SEED LR [--warm K] [--check FILE.npy]\n");
        MPI_Finalize();
        return 2;
    }
    int64_t b = atoll(argv[1]), d = atoll(argv[2]), f = atoll(argv[3]);
    uint64_t seed = strtoull(argv[4], NULL, 0);
    float lr = strtof(argv[5], NULL);
    int warm = 5;
    const char *check = NULL;
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc)
            check = argv[++i];
    }
    if (b < 1 || d < 1 || f < 1 || f % size != 0 || warm < 0 || !(lr > 0)) {
        if (rank == 0)
            fprintf(stderr, "train_base: bad sizes (F must divide among %d ranks) or learning rate\n", size);
        MPI_Finalize();
        return 2;
    }
    cpu_set_t cs;
    int cores = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 1;
    openblas_set_num_threads(cores > 0 ? cores : 1);
    Net n = {.b = b, .d = d, .fs = f / size, .lr = lr};
    n.x = fresh((size_t)(b * d));
    n.w1 = fresh((size_t)(d * n.fs));
    n.w2 = fresh((size_t)(n.fs * d));
    double *tw = malloc((size_t)(warm + 1) * sizeof *tw);
    if (!tw)
        MPI_Abort(MPI_COMM_WORLD, 1);
    fill_block(n.x, seed, 0, d, 0, b, 0, d);
    fill_block(n.w1, seed, 1, f, 0, d, rank * n.fs, n.fs);
    fill_block(n.w2, seed, 2, d, rank * n.fs, n.fs, 0, d);
    double cold = step(&n);
    for (int r = 0; r < warm; r++)
        tw[r] = step(&n);
    int rc = 0;
    if (rank == 0) {
        double total = cold;
        for (int r = 0; r < warm; r++)
            total += tw[r];
        printf("base cold %.3f ms warm %.3f ms total %.3f ms\n", cold, warm ? bench_median(tw, warm) : cold, total);
        if (check)
            rc = validate(&n, check);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(n.x);
    free(n.w1);
    free(n.w2);
    free(tw);
    MPI_Finalize();
    return rc;
}
