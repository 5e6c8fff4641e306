/*
 * kernels_bench.c: tessel's fft, cholesky and triangular-solve kernels
 * against calling FFTW / LAPACK / BLAS directly on the same data.
 *
 *   kernels_bench fft|cholesky|triangular-solve [--quick] [--reps R]
 *
 * Each case is a one-instruction module run with dev_execute (parse once;
 * each run allocates its result, as every real run does), timed
 * interleaved with the direct call (2 warm-up rounds, then R timed rounds,
 * default 7, the side that runs first alternating), medians reported:
 *     bench NAME: tessel X ms direct Y ms (CASE, median of R) ratio X/Y
 * The direct side does what the op must do with the same library:
 *   fft: fftwf_execute of a plan made once (FFTW_ESTIMATE) up front, into
 *        a preallocated buffer: c64[64,4096] FFT over the last dim (quick:
 *        c64[16,4096]); tessel plans on every call (k_fft.c), so the ratio
 *        includes that planning
 *   cholesky: memcpy of the input (potrf works in place, the op must keep
 *        its operand) + dpotrf_, f64[768,768] SPD (quick: 384)
 *   triangular-solve: memcpy of b + cblas_dtrsm, left, lower, f64 a
 *        [768,768] and b [768,768] (quick: 384)
 * Validation: tessel's result must equal the direct one (within 1e-5 of
 * the largest magnitude for fft, 1e-12 for the f64 cases: the same library
 * routine runs on the same data), and the direct one must be right
 * (fft: 8 bins against a double DFT; cholesky: L L^T against A on 8
 * entries; triangular-solve: a x against b on 8 entries). A failed
 * validation prints `bench NAME: FAILED ...` and exits 1.
 */
#include "device/device.h"

#include <cblas.h>
#include <complex.h>
#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t len);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t seed = 42;

static double rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(seed >> 11) / 9007199254740992.0 * 2 - 1;
}

/* One benchmark case: the module, its arguments, the direct call. */
typedef struct Case {
    const char *name;
    char what[96];
    IrModule *m;
    int nargs;
    DevValue *args[2];
    void (*direct)(struct Case *c);
    void *ctx;                  /* the direct side's plan / buffers */
    double *dout;               /* its result, as doubles (re, im interleaved for fft) */
    int64_t nout;               /* doubles in dout */
    double tol;                 /* relative to the largest magnitude */
    int (*check)(struct Case *c);
} Case;

static IrModule *parse(const char *txt)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("bench.hlo", txt, strlen(txt), &o, &m, &d) != IR_OK) {
        fprintf(stderr, "kernels_bench: %s\n", d.msg ? d.msg : "parse failed");
        exit(1);
    }
    return m;
}

static DevValue *array(IrType t, int32_t rank, const int64_t *dims)
{
    IrShape s = {.type = t, .rank = rank, .dims = (int64_t *)dims};
    DevValue *v = dev_value_new_uninit(&s);
    if (!v) {
        fprintf(stderr, "kernels_bench: out of memory\n");
        exit(1);
    }
    return v;
}

/* ---- fft ---- */

typedef struct FftCtx {
    fftwf_plan plan;
    float complex *in, *out;
    int64_t rows, n;
} FftCtx;

static void fft_direct(Case *c)
{
    FftCtx *f = c->ctx;
    fftwf_execute(f->plan);
}

static int fft_check(Case *c)
{
    FftCtx *f = c->ctx;
    for (int t = 0; t < 8; t++) {   /* bin k of row r by a double DFT */
        int64_t r = (t * 7) % f->rows, k = (t * 977) % f->n;
        double complex s = 0;
        for (int64_t j = 0; j < f->n; j++)
            s += f->in[r * f->n + j] * cexp(-2 * M_PI * I * (double)((k * j) % f->n) / (double)f->n);
        if (cabs(s - f->out[r * f->n + k]) > 1e-3 * (1 + cabs(s)))
            return 0;
    }
    for (int64_t i = 0; i < c->nout / 2; i++) {
        c->dout[2 * i] = crealf(f->out[i]);
        c->dout[2 * i + 1] = cimagf(f->out[i]);
    }
    return 1;
}

static void setup_fft(Case *c, bool quick)
{
    int64_t rows = quick ? 16 : 64, n = 4096, dims[2] = {rows, n};
    char txt[256];
    snprintf(txt, sizeof txt, "HloModule b\nENTRY main {\n  x = c64[%lld,%lld] parameter(0)\n"
             "  ROOT f = c64[%lld,%lld] fft(x), fft_type=FFT, fft_length={%lld}\n}\n",
             (long long)rows, (long long)n, (long long)rows, (long long)n, (long long)n);
    c->m = parse(txt);
    c->nargs = 1;
    c->args[0] = array(IR_C64, 2, dims);
    FftCtx *f = calloc(1, sizeof *f);
    f->rows = rows, f->n = n;
    f->in = (float complex *)c->args[0]->data;
    for (int64_t i = 0; i < rows * n; i++)
        f->in[i] = (float)rnd() + I * (float)rnd();
    f->out = fftwf_malloc(sizeof(float complex) * (size_t)(rows * n));
    int nn = (int)n;
    /* ESTIMATE does not touch the arrays: the input stays as written. */
    f->plan = fftwf_plan_many_dft(1, &nn, (int)rows, (fftwf_complex *)f->in, NULL, 1, nn,
                                  (fftwf_complex *)f->out, NULL, 1, nn, FFTW_FORWARD, FFTW_ESTIMATE);
    c->ctx = f;
    c->direct = fft_direct;
    c->nout = 2 * rows * n;
    c->tol = 1e-5;
    c->check = fft_check;
    snprintf(c->what, sizeof c->what, "c64[%lld,%lld] FFT", (long long)rows, (long long)n);
}

/* ---- cholesky and triangular-solve (f64, square n) ---- */

typedef struct LaCtx {
    int64_t n;
    const double *a, *b;        /* inputs (b: trsm only) */
    double *work;               /* the direct side's result */
} LaCtx;

static void chol_direct(Case *c)
{
    LaCtx *l = c->ctx;
    int n = (int)l->n, info = 0;
    memcpy(l->work, l->a, sizeof(double) * (size_t)(l->n * l->n));
    dpotrf_("U", &n, l->work, &n, &info, 1);   /* row-major lower = column-major upper */
}

static void trsm_direct(Case *c)
{
    LaCtx *l = c->ctx;
    int n = (int)l->n;
    memcpy(l->work, l->b, sizeof(double) * (size_t)(l->n * l->n));
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, n, 1.0, l->a,
                n, l->work, n);
}

/* The direct result, with the triangle the op zeroes zeroed (cholesky). */
static int la_check(Case *c)
{
    LaCtx *l = c->ctx;
    int64_t n = l->n;
    bool chol = c->direct == chol_direct;
    for (int t = 0; t < 8; t++) {
        int64_t i = (t * 131) % n, j = (t * 71) % n;
        double s = 0, want;
        if (chol) {            /* (L L^T)[i][j] = A[i][j] */
            for (int64_t p = 0; p <= (i < j ? i : j); p++)
                s += l->work[i * n + p] * l->work[j * n + p];
            want = l->a[i * n + j];
        } else {               /* (tril(a) x)[i][j] = b[i][j] */
            for (int64_t p = 0; p <= i; p++)
                s += l->a[i * n + p] * l->work[p * n + j];
            want = l->b[i * n + j];
        }
        if (fabs(s - want) > 1e-8 * (1 + fabs(want)))
            return 0;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            c->dout[i * n + j] = chol && j > i ? 0 : l->work[i * n + j];
    return 1;
}

static void setup_la(Case *c, bool quick, bool chol)
{
    int64_t n = quick ? 384 : 768, dims[2] = {n, n};
    char txt[320];
    if (chol)
        snprintf(txt, sizeof txt, "HloModule b\nENTRY main {\n  a = f64[%lld,%lld] parameter(0)\n"
                 "  ROOT l = f64[%lld,%lld] cholesky(a), lower=true\n}\n",
                 (long long)n, (long long)n, (long long)n, (long long)n);
    else
        snprintf(txt, sizeof txt, "HloModule b\nENTRY main {\n  a = f64[%lld,%lld] parameter(0)\n"
                 "  b = f64[%lld,%lld] parameter(1)\n  ROOT x = f64[%lld,%lld] triangular-solve(a, b), "
                 "left_side=true, lower=true, transpose_a=NO_TRANSPOSE\n}\n", (long long)n,
                 (long long)n, (long long)n, (long long)n, (long long)n, (long long)n);
    c->m = parse(txt);
    c->nargs = chol ? 1 : 2;
    for (int i = 0; i < c->nargs; i++)
        c->args[i] = array(IR_F64, 2, dims);
    double *a = (double *)c->args[0]->data;
    if (chol) {                /* A = B B^T / n + I: well conditioned, SPD */
        double *b = malloc(sizeof(double) * (size_t)(n * n));
        for (int64_t i = 0; i < n * n; i++)
            b[i] = rnd();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)n, 1.0 / (double)n,
                    b, (int)n, b, (int)n, 0.0, a, (int)n);
        for (int64_t i = 0; i < n; i++)
            a[i * n + i] += 1;
        free(b);
    } else {                   /* diagonal 2..3: a stable solve */
        for (int64_t i = 0; i < n * n; i++)
            a[i] = rnd() / (double)n;
        for (int64_t i = 0; i < n; i++)
            a[i * n + i] = 2.5 + rnd() / 2;
        double *b = (double *)c->args[1]->data;
        for (int64_t i = 0; i < n * n; i++)
            b[i] = rnd();
    }
    LaCtx *l = calloc(1, sizeof *l);
    l->n = n;
    l->a = a;
    l->b = chol ? NULL : (const double *)c->args[1]->data;
    l->work = malloc(sizeof(double) * (size_t)(n * n));
    c->ctx = l;
    c->direct = chol ? chol_direct : trsm_direct;
    c->nout = n * n;
    c->tol = 1e-12;
    c->check = la_check;
    snprintf(c->what, sizeof c->what, "f64[%lld,%lld]%s", (long long)n, (long long)n,
             chol ? " lower" : " x f64 b, left lower");
}

/* ---- driver ---- */

static DevValue *run_tessel(Case *c)
{
    DevExecOptions opt = {0};
    DevValue *out = NULL;
    IrDiag d = {0};
    if (dev_execute(c->m, c->m->entry, c->nargs, c->args, &opt, &out, &d) != IR_OK) {
        printf("bench %s: FAILED: %s\n", c->name, d.msg ? d.msg : "?");
        exit(1);
    }
    return out;
}

static int validate(Case *c, DevValue *out)
{
    if (!c->check(c)) {
        printf("bench %s: FAILED: the direct result is wrong\n", c->name);
        return 0;
    }
    double scale = 0, err = 0;
    const double *t64 = (const double *)out->data;
    const float *t32 = (const float *)out->data;
    bool f32 = out->shape.type == IR_C64;
    for (int64_t i = 0; i < c->nout; i++) {
        double t = f32 ? t32[i] : t64[i];
        scale = fmax(scale, fabs(c->dout[i]));
        err = fmax(err, fabs(t - c->dout[i]));
    }
    if (!(err <= c->tol * scale)) {
        printf("bench %s: FAILED: tessel differs from the direct call by %g (scale %g)\n", c->name,
               err, scale);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    bool quick = false;
    int reps = 7;
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!name && argv[i][0] != '-')
            name = argv[i];
        else {
            fprintf(stderr, "usage: kernels_bench fft|cholesky|triangular-solve [--quick] [--reps R]\n");
            return 2;
        }
    }
    if (!name || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: kernels_bench fft|cholesky|triangular-solve [--quick] [--reps R]\n");
        return 2;
    }
    Case c = {.name = name};
    if (strcmp(name, "fft") == 0)
        setup_fft(&c, quick);
    else if (strcmp(name, "cholesky") == 0 || strcmp(name, "triangular-solve") == 0)
        setup_la(&c, quick, name[0] == 'c');
    else {
        fprintf(stderr, "kernels_bench: unknown case '%s'\n", name);
        return 2;
    }
    c.dout = malloc(sizeof(double) * (size_t)c.nout);
    double *tt = malloc(sizeof(double) * (size_t)reps), *td = malloc(sizeof(double) * (size_t)reps);
    int ok = 1;
    for (int r = -2; r < reps; r++) {
        double t0, t1, t2;
        DevValue *out;
        if (r % 2 == 0) {
            t0 = now_ms(); out = run_tessel(&c); t1 = now_ms(); c.direct(&c); t2 = now_ms();
            if (r >= 0)
                tt[r] = t1 - t0, td[r] = t2 - t1;
        } else {
            t0 = now_ms(); c.direct(&c); t1 = now_ms(); out = run_tessel(&c); t2 = now_ms();
            if (r >= 0)
                td[r] = t1 - t0, tt[r] = t2 - t1;
        }
        if (r == -2)
            ok = validate(&c, out);
        dev_value_unref(out);
        if (!ok)
            return 1;
    }
    double mt = median(tt, reps), md = median(td, reps);
    printf("bench %s: tessel %.3f ms direct %.3f ms (%s, median of %d) ratio %.3f\n", name, mt, md,
           c.what, reps, mt / md);
    return 0;
}
