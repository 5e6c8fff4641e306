/*
 * test_vmath.c: the vector math functions (device/vmath.c) against libm in
 * a wider type: every f32 op against the double function rounded to
 * float, every f64 op against the long double one, within glibc's stated
 * 4 ulp for libmvec; the special values (NaN, infinities, signed zeros,
 * subnormals, poles and the ends of the domains) against C's Annex F; and
 * the property the oracle depends on: an element's bits depend on its
 * value alone, not on its position, the array's length or a result
 * written over its operand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "device/vmath.h"

typedef struct VmCase {
    IrOpcode op;
    const char *name;
    double (*ref32)(double);           /* the f32 op's reference, in double */
    long double (*ref64)(long double); /* the f64 op's, in long double */
    double lo, hi;                     /* the sampled domain */
} VmCase;

static double logistic_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static long double logistic_l(long double x) { return 1.0L / (1.0L + expl(-x)); }

static const VmCase cases[] = {
    {OP_EXP, "exp", exp, expl, -100, 90},
    {OP_EXPM1, "expm1", expm1, expm1l, -30, 80},
    {OP_LOG, "log", log, logl, 0, 1e30},
    {OP_LOG1P, "log1p", log1p, log1pl, -1, 1e10},
    {OP_LOGISTIC, "logistic", logistic_d, logistic_l, -80, 80},
    {OP_TANH, "tanh", tanh, tanhl, -12, 12},
    {OP_SINE, "sine", sin, sinl, -1e4, 1e4},
    {OP_COSINE, "cosine", cos, cosl, -1e4, 1e4},
    {OP_TAN, "tan", tan, tanl, -1e3, 1e3},
    {OP_ERF, "erf", erf, erfl, -5, 5},
    {OP_ACOS, "acos", acos, acosl, -1, 1},
    {OP_ACOSH, "acosh", acosh, acoshl, 1, 1e20},
    {OP_ASIN, "asin", asin, asinl, -1, 1},
    {OP_ASINH, "asinh", asinh, asinhl, -1e20, 1e20},
    {OP_ATAN, "atan", atan, atanl, -1e6, 1e6},
    {OP_ATANH, "atanh", atanh, atanhl, -1, 1},
    {OP_COSH, "cosh", cosh, coshl, -80, 80},
    {OP_SINH, "sinh", sinh, sinhl, -80, 80},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* The distance in units in the last place between two finite floats of
 * the same sign class: their ordered integer images differ by that much. */
static int64_t ord32(float f)
{
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}
static int64_t ord64(double f)
{
    int64_t i;
    memcpy(&i, &f, 8);
    return i < 0 ? INT64_MIN - i : i;
}
static int64_t ulps32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    int64_t d = ord32(a) - ord32(b);
    return d < 0 ? -d : d;
}
static int64_t ulps64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    int64_t x = ord64(a), y = ord64(b);
    return x > y ? x - y : y - x;
}

/* Samples of [lo, hi]: evenly spaced, then denser near 0 and near the ends
 * (a geometric sweep), n of them. */
static void samples(double lo, double hi, double *x, int n)
{
    for (int i = 0; i < n / 2; i++)
        x[i] = lo + (hi - lo) * (i + 0.5) / (n / 2);
    for (int i = n / 2; i < n; i++) {
        double t = pow(1e-12, (double)(i - n / 2) / (n - n / 2)); /* 1 down to 1e-12 */
        x[i] = (i & 1) ? lo + (hi - lo) * t * 0.5 : hi - (hi - lo) * t * 0.5;
    }
}

#define NS 20000

static void test_accuracy_f32(void **state)
{
    (void)state;
    if (!dev_vmath_has(OP_TANH))
        skip();
    static double xd[NS];
    static float a[NS], r[NS];
    for (size_t c = 0; c < NCASES; c++) {
        samples(cases[c].lo, cases[c].hi, xd, NS);
        for (int i = 0; i < NS; i++)
            a[i] = (float)xd[i];
        assert_true(dev_vmath_f32(cases[c].op, a, r, NS));
        int64_t worst = 0;
        for (int i = 0; i < NS; i++) {
            float want = (float)cases[c].ref32((double)a[i]);
            int64_t u = ulps32(r[i], want);
            if (u > worst)
                worst = u;
            if (u > 4)
                fail_msg("%s(%a) = %a, want %a (%lld ulp)", cases[c].name, (double)a[i], (double)r[i],
                         (double)want, (long long)u);
        }
        print_message("f32 %-8s worst %lld ulp\n", cases[c].name, (long long)worst);
    }
}

static void test_accuracy_f64(void **state)
{
    (void)state;
    if (!dev_vmath_has(OP_TANH))
        skip();
    static double a[NS], r[NS];
    for (size_t c = 0; c < NCASES; c++) {
        samples(cases[c].lo, cases[c].hi, a, NS);
        assert_true(dev_vmath_f64(cases[c].op, a, r, NS));
        int64_t worst = 0;
        for (int i = 0; i < NS; i++) {
            double want = (double)cases[c].ref64((long double)a[i]);
            int64_t u = ulps64(r[i], want);
            if (u > worst)
                worst = u;
            if (u > 4)
                fail_msg("%s(%a) = %a, want %a (%lld ulp)", cases[c].name, a[i], r[i], want, (long long)u);
        }
        print_message("f64 %-8s worst %lld ulp\n", cases[c].name, (long long)worst);
    }
}

/* Annex F's special cases, f32 and f64 alike: one row per op and input. */
typedef struct Special {
    IrOpcode op;
    double in, want; /* want NAN: any NaN */
} Special;

static const Special specials[] = {
    {OP_EXP, -INFINITY, 0}, {OP_EXP, INFINITY, INFINITY}, {OP_EXP, 0.0, 1}, {OP_EXP, -0.0, 1},
    {OP_EXP, NAN, NAN}, {OP_EXP, 1000, INFINITY}, {OP_EXP, -1000, 0},
    {OP_EXPM1, -0.0, -0.0}, {OP_EXPM1, -INFINITY, -1}, {OP_EXPM1, INFINITY, INFINITY},
    {OP_LOG, 0.0, -INFINITY}, {OP_LOG, -0.0, -INFINITY}, {OP_LOG, 1, 0}, {OP_LOG, -1, NAN},
    {OP_LOG, INFINITY, INFINITY},
    {OP_LOG1P, -1, -INFINITY}, {OP_LOG1P, -0.0, -0.0}, {OP_LOG1P, -2, NAN},
    {OP_LOGISTIC, INFINITY, 1}, {OP_LOGISTIC, -INFINITY, 0}, {OP_LOGISTIC, 0, 0.5}, {OP_LOGISTIC, NAN, NAN},
    {OP_TANH, -0.0, -0.0}, {OP_TANH, INFINITY, 1}, {OP_TANH, -INFINITY, -1}, {OP_TANH, 1e30, 1},
    {OP_TANH, NAN, NAN},
    {OP_SINE, -0.0, -0.0}, {OP_SINE, INFINITY, NAN}, {OP_COSINE, 0, 1}, {OP_COSINE, -INFINITY, NAN},
    {OP_TAN, -0.0, -0.0}, {OP_TAN, INFINITY, NAN},
    {OP_ERF, -0.0, -0.0}, {OP_ERF, INFINITY, 1}, {OP_ERF, -INFINITY, -1},
    {OP_ACOS, 1, 0}, {OP_ACOS, 2, NAN}, {OP_ASIN, -0.0, -0.0}, {OP_ASIN, -2, NAN},
    {OP_ACOSH, 1, 0}, {OP_ACOSH, 0.5, NAN}, {OP_ACOSH, INFINITY, INFINITY},
    {OP_ASINH, -0.0, -0.0}, {OP_ASINH, -INFINITY, -INFINITY},
    {OP_ATAN, -0.0, -0.0}, {OP_ATANH, 1, INFINITY}, {OP_ATANH, -1, -INFINITY}, {OP_ATANH, 2, NAN},
    {OP_ATANH, -0.0, -0.0},
    {OP_COSH, -INFINITY, INFINITY}, {OP_COSH, 0, 1}, {OP_SINH, -0.0, -0.0}, {OP_SINH, -INFINITY, -INFINITY},
};

static void test_specials(void **state)
{
    (void)state;
    if (!dev_vmath_has(OP_TANH))
        skip();
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        const Special *s = &specials[k];
        float a = (float)s->in, r;
        double ad = s->in, rd;
        assert_true(dev_vmath_f32(s->op, &a, &r, 1));
        assert_true(dev_vmath_f64(s->op, &ad, &rd, 1));
        if (isnan(s->want)) {
            if (!isnan(r) || !isnan(rd))
                fail_msg("op %d of %g: %g and %g, want NaN", (int)s->op, s->in, (double)r, rd);
            continue;
        }
        /* Exact, the sign of zero included. */
        bool neg = signbit(s->want) != 0;
        if (r != (float)s->want || (signbit(r) != 0) != neg || rd != s->want || (signbit(rd) != 0) != neg)
            fail_msg("op %d of %g: %a and %a, want %a", (int)s->op, s->in, (double)r, rd, s->want);
    }
    /* Subnormal inputs of the odd functions come back as themselves. */
    float tiny = -0x1p-140f, r;
    assert_true(dev_vmath_f32(OP_TANH, &tiny, &r, 1));
    assert_true(r == tiny);
}

/* Every value at every offset of arrays of length 1 to 40 (whole vectors,
 * a partial one, both) gives the bits it gives alone; in place as well. */
static void test_position_independent(void **state)
{
    (void)state;
    if (!dev_vmath_has(OP_TANH))
        skip();
    const IrOpcode ops[] = {OP_TANH, OP_EXP, OP_LOGISTIC, OP_LOG1P, OP_SINE};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        float a[40], r[40], alone[40], inplace[40];
        double ad[40], rd[40], aloned[40];
        for (int i = 0; i < 40; i++) {
            a[i] = (float)(0.37 * i - 5.1);
            ad[i] = 0.37 * i - 5.1;
            assert_true(dev_vmath_f32(ops[o], &a[i], &alone[i], 1));
            assert_true(dev_vmath_f64(ops[o], &ad[i], &aloned[i], 1));
        }
        for (int n = 1; n <= 40; n++)
            for (int off = 0; off + n <= 40; off += 7) {
                memset(r, 0xff, sizeof r);
                assert_true(dev_vmath_f32(ops[o], a + off, r, n));
                assert_true(dev_vmath_f64(ops[o], ad + off, rd, n));
                memcpy(inplace, a + off, (size_t)n * sizeof(float));
                assert_true(dev_vmath_f32(ops[o], inplace, inplace, n));
                assert_memory_equal(r, alone + off, (size_t)n * sizeof(float));
                assert_memory_equal(inplace, alone + off, (size_t)n * sizeof(float));
                assert_memory_equal(rd, aloned + off, (size_t)n * sizeof(double));
                /* Nothing past n is written. */
                uint32_t past;
                if (n < 40) {
                    memcpy(&past, &r[n], 4);
                    assert_int_equal(past, 0xffffffffu);
                }
            }
    }
}

/* exp's arguments far below its range (a causal mask's -1e9 minus a row's
 * maximum) among ordinary ones, in whole and partial vectors: below the
 * underflow bound (f32 -103.98, f64 -745.14) exactly +0 (Annex F: the
 * correctly rounded result underflows to zero), between that bound and
 * libmvec's range libm's own bits (libmvec's lanes out of range are libm's
 * scalar calls), the others within 4 ulp of the wider type's exp, and the
 * logistic of +-1e9 exactly 1 and 0. */
static void test_exp_underflow(void **state)
{
    (void)state;
    if (!dev_vmath_has(OP_EXP))
        skip();
    const double xs[] = {-1e9, -1e30, -INFINITY, -104.5, -104.0, -103.99, -103.9, -100.0, -95.0, -88.0,
                         -87.5, 1.0, -3.0, 0.5, -200.0, 2.0, -1e9, -0.25, 10.0, -1e9, -746.5, -745.0,
                         -720.0, -1e9, 3.5, -1e9, -1e9, -20.0, -1e9, -1e9, -1e9, -1e9, -1e9, 7.0, -1e9};
    enum { NX = sizeof xs / sizeof xs[0] };
    float a[NX], r[NX];
    double ad[NX], rd[NX];
    for (int i = 0; i < NX; i++) {
        a[i] = (float)xs[i];
        ad[i] = xs[i];
    }
    for (int n = 1; n <= NX; n += 17 - (n % 5)) {
        assert_true(dev_vmath_f32(OP_EXP, a, r, n));
        assert_true(dev_vmath_f64(OP_EXP, ad, rd, n));
        for (int i = 0; i < n; i++) {
            if (a[i] < -103.98f) {
                assert_true(r[i] == 0.0f && !signbit(r[i]));
            } else if (a[i] < -87.4f) {
                float want = expf(a[i]);
                assert_memory_equal(&r[i], &want, sizeof want);
            } else {
                assert_true(ulps32(r[i], (float)exp((double)a[i])) <= 4);
            }
            if (ad[i] < -745.14) {
                assert_true(rd[i] == 0.0 && !signbit(rd[i]));
            } else if (ad[i] < -708.5) {
                double want = exp(ad[i]);
                assert_memory_equal(&rd[i], &want, sizeof want);
            }
        }
    }
    float big[3] = {1e9f, -1e9f, 200.0f}, lg[3];
    assert_true(dev_vmath_f32(OP_LOGISTIC, big, lg, 3));
    assert_true(lg[0] == 1.0f && lg[1] == 0.0f && lg[2] == 1.0f);
}

/* Ops without a vector function are refused and leave the result alone. */
static void test_refused(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, r[3] = {7, 7, 7};
    assert_false(dev_vmath_has(OP_ADD));
    assert_false(dev_vmath_has(OP_SQRT)); /* correctly rounded already: the compiler's sqrt */
    assert_false(dev_vmath_has(OP_CBRT)); /* libm's is exact on cubes, libmvec's is not */
    assert_false(dev_vmath_f32(OP_SQRT, a, r, 3));
    assert_false(dev_vmath_f32(OP_NEGATE, a, r, 3));
    assert_true(r[0] == 7 && r[1] == 7 && r[2] == 7);
    /* n = 0 touches nothing. */
    if (dev_vmath_has(OP_EXP))
        assert_true(dev_vmath_f32(OP_EXP, a, r, 0));
    assert_true(r[0] == 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy_f32),       cmocka_unit_test(test_accuracy_f64),
        cmocka_unit_test(test_specials),           cmocka_unit_test(test_position_independent),
        cmocka_unit_test(test_refused),            cmocka_unit_test(test_exp_underflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
