/*
 * layernorm_base.c: the baseline of the `layernorm` benchmark: layer norm
 * over the rows of x f32[N,D] with scale gamma f32[D] and bias beta f32[D]
 * (y = (x - mean) / sqrt(var + 1e-5) * gamma + beta, the variance of the
 * centred row), as a programmer writes it by hand: one thread, three
 * passes over each row (sum; centred squares; normalise). It also checks
 * tessel's result of bench/gen.py's layernorm module.
 *
 * `layernorm_base N D REPS` fills x, gamma, beta with `--random-inputs 7`
 * leaves 0, 1, 2 (bench_common.h), runs one warm-up and REPS timed layer
 * norms into an output touched before timing, checks its own result, and
 * prints `base layernorm M ms` (the median).
 *
 * `layernorm_base N D --check SEED FILE.npy` checks tessel's output
 * against a double-precision recomputation from the same random inputs.
 *
 * Both checks require every element within 1e-4 of the output's largest
 * magnitude (the oracle's f32 rule). Exit 1 otherwise.
 */
#include "bench_common.h"

#include <math.h>

#define EPS 1e-5f

static void layernorm(const float *x, const float *g, const float *b, float *y, int64_t n, int64_t d)
{
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float s = 0;
        for (int64_t j = 0; j < d; j++)
            s += xr[j];
        float mu = s / (float)d, v = 0;
        for (int64_t j = 0; j < d; j++) {
            float c = xr[j] - mu;
            v += c * c;
        }
        float rs = 1.0f / sqrtf(v / (float)d + EPS);
        for (int64_t j = 0; j < d; j++)
            yr[j] = (xr[j] - mu) * rs * g[j] + b[j];
    }
}

/* Compare y against the layer norm computed in double. */
static int check(const float *y, int64_t n, int64_t d, uint64_t seed, const char *who)
{
    double *ref = malloc((size_t)(n * d) * sizeof *ref), top = 0;
    if (!ref)
        return 1;
    for (int64_t r = 0; r < n; r++) {
        double s = 0, v = 0, *rr = ref + r * d;
        for (int64_t j = 0; j < d; j++)
            s += rr[j] = bench_random_f32(seed, 0, (uint64_t)(r * d + j));
        double mu = s / (double)d;
        for (int64_t j = 0; j < d; j++)
            v += (rr[j] - mu) * (rr[j] - mu);
        double rs = 1 / sqrt(v / (double)d + (double)EPS);
        for (int64_t j = 0; j < d; j++) {
            rr[j] = (rr[j] - mu) * rs * bench_random_f32(seed, 1, (uint64_t)j) + bench_random_f32(seed, 2, (uint64_t)j);
            top = fmax(top, fabs(rr[j]));
        }
    }
    for (int64_t i = 0; i < n * d; i++)
        if (!(fabs(y[i] - ref[i]) <= 1e-4 * top)) {
            fprintf(stderr, "layernorm_base: %s element [%lld,%lld] is %.9g, expected %.9g\n", who,
                    (long long)(i / d), (long long)(i % d), (double)y[i], ref[i]);
            free(ref);
            return 1;
        }
    free(ref);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t n = argc >= 4 ? atoll(argv[1]) : 0, d = argc >= 4 ? atoll(argv[2]) : 0;
    if (n < 1 || d < 1) {
        fprintf(stderr, "usage: layernorm_base N D REPS | N D --check SEED FILE.npy\n");
        return 2;
    }
    if (!strcmp(argv[3], "--check") && argc == 6) {
        float *t = bench_read_npy_f32_n(argv[5], n * d, "layernorm_base");
        int bad = !t || check(t, n, d, strtoull(argv[4], NULL, 0), "tessel's");
        free(t);
        return bad;
    }
    int reps = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
    float *x = malloc((size_t)(n * d) * sizeof *x), *y = malloc((size_t)(n * d) * sizeof *y);
    float *g = malloc((size_t)d * sizeof *g), *b = malloc((size_t)d * sizeof *b);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!x || !y || !g || !b || !t) {
        fprintf(stderr, "layernorm_base: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n * d; i++)
        x[i] = bench_random_f32(7, 0, (uint64_t)i), y[i] = 0;
    for (int64_t j = 0; j < d; j++)
        g[j] = bench_random_f32(7, 1, (uint64_t)j), b[j] = bench_random_f32(7, 2, (uint64_t)j);
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now_ms();
        layernorm(x, g, b, y, n, d);
        if (r >= 0)
            t[r] = bench_now_ms() - t0;
    }
    if (check(y, n, d, 7, "the baseline's"))
        return 1;
    printf("base layernorm %.3f ms\n", bench_median(t, reps));
    free(x);
    free(y);
    free(g);
    free(b);
    free(t);
    return 0;
}
