/*
 * blas_shapes.c: the probe's choice of f32 GEMM library made per product
 * shape, on the program's own products (issue 34, gemm49).
 *
 * The probe (blas_choice.c) times one 384^3 product. On the machine this
 * project runs on, oneDNN and tessel's own kernel (avx512) are within its
 * noise there (one run read 120.5 against 138.8 GFLOP/s, another 175.2
 * against 176.6), while on the program's products one or the other is
 * 3-9 % faster depending on the shape (BENCHMARKS.md, gemm48 and gemm49:
 * 512 x 2048 x 1024 oneDNN, 512 x 1024 x 2048 avx512). So at one BLAS
 * thread a device the probe only ranks the libraries, and the first call
 * of each large product shape (row-major m, n, k and both transposes) runs
 * the two fastest of the probe on that call's own operands, in turns
 * (SHAPE_ROUNDS each, alternating A B B A A B so that neither always goes
 * first), by every device that reaches the shape before it is decided
 * (at once, as they run it), in each thread's CPU time (a competing
 * process that takes a core away is not counted against either); the
 * best time of all their calls decides, and the faster keeps that shape
 * for the rest of the process (a run's own dots are timed before its
 * clock, in the program's form: B kept, beside a second device's
 * product; blas_choice.c). A shape is decided once,
 * before any of its products is computed, so every product of a shape has
 * one library's bits in every step of a run.
 *
 * Pure bookkeeping on times handed in, so the tests drive it with made-up
 * times (tests/unit/test_blas_sgemm.c); blas_choice.c calls it under its
 * lock and does the timing.
 */
#include "blas.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const shape_lib[SGEMM_LIBS] = {"openblas", "blis", "onednn", "avx512"};

static bool same_shape(const SgemmShape *x, const SgemmShape *y)
{
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k;
}

int sgemm_shapes_find(const SgemmShapes *t, SgemmShape s)
{
    for (int i = 0; i < t->n; i++)
        if (same_shape(&t->e[i].shape, &s))
            return t->e[i].lib;
    return -1;
}

int sgemm_shapes_candidates(const double probed[SGEMM_LIBS], int cand[2])
{
    int n = 0;
    cand[0] = cand[1] = -1;
    for (int i = 0; i < SGEMM_LIBS; i++) {
        if (!(probed[i] > 0))
            continue;
        if (cand[0] < 0 || probed[i] > probed[cand[0]]) {
            cand[1] = cand[0];
            cand[0] = i;
        } else if (cand[1] < 0 || probed[i] > probed[cand[1]]) {
            cand[1] = i;
        }
    }
    for (int i = 0; i < 2; i++)
        n += cand[i] >= 0;
    return n;
}

/* The index of tessel's own kernel (avx512) among the libraries, and how
 * much slower than the fastest its timed product may be and still keep a
 * shape whose B is not kept packed. Why there: the timing runs the bare
 * product, which cannot see what only tessel's kernel gives such a call in
 * the program: it allocates nothing per call where oneDNN's dnnl_sgemm
 * allocates its packing buffers each call (about 800 page faults a warm
 * step), and the weight gradients' SGD updates run in its epilogue.
 * Measured (BENCHMARKS.md, "Stop 49: the per-shape choice and tessel's
 * own kernel"): the weight-gradient shapes, which oneDNN won in the timing
 * by 1-11 %, ran as fast or faster in avx512 in the program. Where B is
 * kept, both run from packed weights with no per-call buffers and the
 * timing sees the program's call, so the faster wins: on the AMD machine
 * oneDNN's kept matmul led avx512's by 5-10 % on the block's shapes and
 * the 12 % rule cost block-infer 4-6 % (BENCHMARKS.md, "Stop 50"). */
enum { OWN_KERNEL = 3 };
#define OWN_KERNEL_MARGIN 1.12

int sgemm_shapes_add(SgemmShapes *t, SgemmShape s, const double seconds[SGEMM_LIBS], bool kept)
{
    int win = -1;
    for (int i = 0; i < SGEMM_LIBS; i++)
        if (seconds[i] > 0 && (win < 0 || seconds[i] < seconds[win]))
            win = i;
    if (win >= 0 && !kept && seconds[OWN_KERNEL] > 0 && seconds[OWN_KERNEL] <= OWN_KERNEL_MARGIN * seconds[win])
        win = OWN_KERNEL;
    if (win < 0 || t->n == SHAPE_MAX)
        return win;
    t->e[t->n].shape = s;
    t->e[t->n].lib = win;
    memcpy(t->e[t->n].seconds, seconds, sizeof t->e[t->n].seconds);
    t->e[t->n].kept = kept;
    t->e[t->n].timed_beside = false;
    t->e[t->n].beside = 0;
    t->n++;
    return win;
}

/* snprintf at buf's end (len its size), truncating quietly. */
static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

void sgemm_shapes_note(const SgemmShapes *t, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (t->n == 0)
        return;
    append(buf, len, "; per product shape (M x K x N: GFLOP/s in thread CPU time):");
    for (int i = 0; i < t->n; i++) {
        const SgemmShape *s = &t->e[i].shape;
        double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        append(buf, len, "%s %lldx%lldx%lld%s%s %s (", i ? "," : "", (long long)s->m, (long long)s->k,
               (long long)s->n, s->ta ? " A^T" : "", s->tb ? " B^T" : "", shape_lib[t->e[i].lib]);
        const char *sep = "";
        for (int l = 0; l < SGEMM_LIBS; l++)
            if (t->e[i].seconds[l] > 0) {
                append(buf, len, "%s%s %.1f", sep, shape_lib[l], flops / t->e[i].seconds[l] * 1e-9);
                sep = " ";
            }
        append(buf, len, "%s", t->e[i].kept ? "; B kept" : "");
        if (t->e[i].timed_beside)
            append(buf, len, "; beside a second %.2f of the time", t->e[i].beside);
        append(buf, len, ")");
    }
}
