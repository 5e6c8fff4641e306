/*
 * softmax_base.c: the baseline of the `softmax` benchmark: softmax over
 * the rows of x f32[N,D] as a programmer writes it by hand, one thread,
 * three passes over each row (max; exp and sum; scale), and the check of
 * tessel's result of bench/gen.py's softmax module.
 *
 * `softmax_base N D REPS` fills x with `--random-inputs 7` leaf 0
 * (bench_common.h), runs one warm-up softmax and REPS timed ones into an
 * output touched before timing, checks its own result, and prints
 * `base softmax M ms` (the median).
 *
 * `softmax_base N D --check SEED FILE.npy` checks tessel's output against
 * a double-precision recomputation from the same random inputs.
 *
 * Both checks require every element within 1e-5 of its row's largest
 * value (the rows sum to 1; f32 exp and a sum of D terms in f32 stay well
 * inside that). Exit 1 otherwise.
 */
#include "bench_common.h"

#include <math.h>

static void softmax(const float *x, float *y, int64_t n, int64_t d)
{
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float m = -INFINITY;
        for (int64_t j = 0; j < d; j++)
            m = xr[j] > m ? xr[j] : m;
        float s = 0;
        for (int64_t j = 0; j < d; j++) {
            float e = expf(xr[j] - m);
            yr[j] = e;
            s += e;
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < d; j++)
            yr[j] *= inv;
    }
}

/* Compare y against softmax computed in double from seed's leaf 0. */
static int check(const float *y, int64_t n, int64_t d, uint64_t seed, const char *who)
{
    double *ref = malloc((size_t)d * sizeof *ref);
    if (!ref)
        return 1;
    for (int64_t r = 0; r < n; r++) {
        double m = -INFINITY, s = 0, top = 0;
        for (int64_t j = 0; j < d; j++) {
            ref[j] = bench_random_f32(seed, 0, (uint64_t)(r * d + j));
            m = ref[j] > m ? ref[j] : m;
        }
        for (int64_t j = 0; j < d; j++)
            s += ref[j] = exp(ref[j] - m);
        for (int64_t j = 0; j < d; j++)
            top = fmax(top, ref[j] /= s);
        for (int64_t j = 0; j < d; j++)
            if (!(fabs(y[r * d + j] - ref[j]) <= 1e-5 * top)) {
                fprintf(stderr, "softmax_base: %s element [%lld,%lld] is %.9g, expected %.9g\n", who,
                        (long long)r, (long long)j, (double)y[r * d + j], ref[j]);
                free(ref);
                return 1;
            }
    }
    free(ref);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t n = argc >= 4 ? atoll(argv[1]) : 0, d = argc >= 4 ? atoll(argv[2]) : 0;
    if (n < 1 || d < 1) {
        fprintf(stderr, "usage: softmax_base N D REPS | N D --check SEED FILE.npy\n");
        return 2;
    }
    if (!strcmp(argv[3], "--check") && argc == 6) {
        float *t = bench_read_npy_f32_n(argv[5], n * d, "softmax_base");
        int bad = !t || check(t, n, d, strtoull(argv[4], NULL, 0), "tessel's");
        free(t);
        return bad;
    }
    int reps = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
    float *x = malloc((size_t)(n * d) * sizeof *x), *y = malloc((size_t)(n * d) * sizeof *y);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!x || !y || !t) {
        fprintf(stderr, "softmax_base: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n * d; i++)
        x[i] = bench_random_f32(7, 0, (uint64_t)i), y[i] = 0;
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now_ms();
        softmax(x, y, n, d);
        if (r >= 0)
            t[r] = bench_now_ms() - t0;
    }
    if (check(y, n, d, 7, "the baseline's"))
        return 1;
    printf("base softmax %.3f ms\n", bench_median(t, reps));
    free(x);
    free(y);
    free(t);
    return 0;
}
