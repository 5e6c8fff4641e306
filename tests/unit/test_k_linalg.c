/*
 * test_k_linalg.c: cholesky and triangular-solve (device/k_linalg.c),
 * called directly on instructions built here.
 *
 * Expected values: small cases by hand (derivations in the comments); the
 * others by the defining property, which determines the answer uniquely:
 * a Cholesky factor is the only triangular matrix with a real positive
 * diagonal and L L^H = A, and a triangular system with a non-zero diagonal
 * has one solution. The tests rebuild A or b from the result in double
 * precision here and compare.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "attrs_test.h"
#include "device/device.h"
#include "kernel_call.h"
#include "kernel_test.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>

/* Element i of a f32/f64/c64/c128 array as a double complex. */
static double complex get(const DevValue *v, int64_t i)
{
    switch (v->shape.type) {
    case IR_F32: return ((const float *)v->data)[i];
    case IR_F64: return ((const double *)v->data)[i];
    case IR_C64: return ((const float complex *)v->data)[i];
    default: return ((const double complex *)v->data)[i];
    }
}

static void set(DevValue *v, int64_t i, double complex x)
{
    switch (v->shape.type) {
    case IR_F32: ((float *)v->data)[i] = (float)creal(x); break;
    case IR_F64: ((double *)v->data)[i] = creal(x); break;
    case IR_C64: ((float complex *)v->data)[i] = (float complex)x; break;
    default: ((double complex *)v->data)[i] = x; break;
    }
}

static uint64_t seed = 12345;

static double rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(seed >> 11) / 9007199254740992.0 * 2 - 1;
}

static double tol_of(IrType t)
{
    return (t == IR_F32 || t == IR_C64) ? 2e-4 : 1e-11;
}

/* A batch of Hermitian positive definite n x n matrices: B B^H + n I. */
static DevValue *spd(IrType t, int64_t batch, int64_t n)
{
    int64_t dims[3] = {batch, n, n};
    DevValue *a = val(t, 3, dims, NULL);
    bool cplx = ir_type_is_complex(t);
    for (int64_t b = 0; b < batch; b++) {
        double complex B[64];
        for (int64_t i = 0; i < n * n; i++)
            B[i] = rnd() + (cplx ? I * rnd() : 0);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double complex s = i == j ? (double)n : 0;
                for (int64_t p = 0; p < n; p++)
                    s += B[i * n + p] * conj(B[j * n + p]);
                set(a, b * n * n + i * n + j, s);
            }
    }
    return a;
}

/* ------------------------------------------------------------------ */
/* cholesky                                                            */
/* ------------------------------------------------------------------ */

static DevValue *run_cholesky(DevValue *a, bool lower, IrStatus want)
{
    KCall kc;
    kc_init(&kc, OP_CHOLESKY, a->shape.type, a->shape.rank, a->shape.dims);
    test_x(&kc.ins.a)->lower = lower;
    DevValue *r = NULL;
    IrStatus st = kc_run(&kc, dev_k_cholesky, 1, &a, &r);
    if (st != want)
        print_message("cholesky: status %d, %s\n", st, kc.d.msg ? kc.d.msg : "");
    assert_int_equal(st, want);
    kc_free(&kc);
    return r;
}

/* L from the result (lower) or U (upper): triangular, real positive
 * diagonal, and L L^H (or U^H U) equal to A. */
static void check_factor(const DevValue *a, const DevValue *r, bool lower)
{
    int64_t n = a->shape.dims[a->shape.rank - 1], nb = dev_value_elements(a) / (n * n);
    double tol = tol_of(a->shape.type) * (double)n;
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * n * n;
        for (int64_t i = 0; i < n; i++) {
            double complex dii = get(r, o + i * n + i);
            assert_true(creal(dii) > 0 && cimag(dii) == 0);
            for (int64_t j = 0; j < n; j++) {
                if (lower ? j > i : j < i)
                    assert_true(get(r, o + i * n + j) == 0);
                double complex s = 0;
                for (int64_t p = 0; p < n; p++)
                    s += lower ? get(r, o + i * n + p) * conj(get(r, o + j * n + p))
                               : conj(get(r, o + p * n + i)) * get(r, o + p * n + j);
                if (cabs(s - get(a, o + i * n + j)) > tol) {
                    print_message("batch %lld (%lld,%lld): rebuilt %g%+gi, A %g%+gi\n",
                                  (long long)b, (long long)i, (long long)j, creal(s), cimag(s),
                                  creal(get(a, o + i * n + j)), cimag(get(a, o + i * n + j)));
                    fail();
                }
            }
        }
    }
}

/* [[4, 2], [2, 5]] = L L^T with L = [[2, 0], [1, 2]]: l00 = sqrt(4) = 2,
 * l10 = 2 / 2 = 1, l11 = sqrt(5 - 1*1) = 2. The upper factor is L^T. The
 * unused triangle holds junk (99) that must not be read. */
static void test_cholesky_by_hand(void **state)
{
    (void)state;
    int64_t dims[2] = {2, 2};
    const double lo_in[4] = {4, 99, 2, 5}, up_in[4] = {4, 2, 99, 5};
    const double lo_want[4] = {2, 0, 1, 2}, up_want[4] = {2, 1, 0, 2};
    DevValue *a = val(IR_F64, 2, dims, lo_in);
    DevValue *r = run_cholesky(a, true, IR_OK);
    assert_memory_equal(r->data, lo_want, sizeof lo_want);
    dev_value_unref(r);
    dev_value_unref(a);
    a = val(IR_F64, 2, dims, up_in);
    r = run_cholesky(a, false, IR_OK);
    assert_memory_equal(r->data, up_want, sizeof up_want);
    dev_value_unref(r);
    dev_value_unref(a);
}

/* Every type, both triangles, batches of uneven sizes (1, 5, 7). */
static void test_cholesky_types(void **state)
{
    (void)state;
    const IrType types[4] = {IR_F32, IR_F64, IR_C64, IR_C128};
    const int64_t sizes[3] = {1, 5, 7};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++)
            for (int lower = 0; lower < 2; lower++) {
                DevValue *a = spd(types[t], 3, sizes[s]);
                dev_value_ref(a);   /* keep a: no in-place reuse */
                DevValue *r = run_cholesky(a, lower, IR_OK);
                assert_ptr_not_equal(r, a);
                check_factor(a, r, lower);
                dev_value_unref(r);
                dev_value_unref(a);
                dev_value_unref(a);
            }
}

/* XLA's CholeskyExpander: a matrix that is not positive definite comes out
 * all NaN, the others of the batch are unaffected. Batch 0 is [[1, 2],
 * [2, 1]] (eigenvalues 3 and -1), batch 1 the hand case above. At its last
 * use the operand's buffer is reused. */
static void test_cholesky_not_pd(void **state)
{
    (void)state;
    int64_t dims[3] = {2, 2, 2};
    const float in[8] = {1, 2, 2, 1, 4, 2, 2, 5};
    DevValue *a = val(IR_F32, 3, dims, in);
    DevValue *r = run_cholesky(a, true, IR_OK);
    assert_ptr_equal(r, a);
    const float *x = (const float *)r->data;
    for (int i = 0; i < 4; i++)
        assert_true(isnan(x[i]));
    const float want[4] = {2, 0, 1, 2};
    assert_memory_equal(x + 4, want, sizeof want);
    dev_value_unref(r);   /* the kernel's new reference */
    dev_value_unref(a);   /* the operand's, as the executor drops it */
}

static void test_cholesky_refuses(void **state)
{
    (void)state;
    int64_t sq[2] = {3, 3}, rect[2] = {3, 4};
    DevValue *a = val(IR_F16, 2, sq, NULL);
    KCall kc;
    kc_init(&kc, OP_CHOLESKY, IR_F16, 2, sq);
    DevValue *r;
    assert_int_equal(kc_run(&kc, dev_k_cholesky, 1, &a, &r), IR_EUNSUPPORTED);
    assert_non_null(strstr(kc.d.msg, "cholesky of f16 is not supported"));
    assert_int_equal(kc.d.pos.line, 3);
    assert_int_equal(kc.d.pos.col, 7);
    kc_free(&kc);
    dev_value_unref(a);
    a = val(IR_F32, 2, rect, NULL);
    kc_init(&kc, OP_CHOLESKY, IR_F32, 2, rect);
    assert_int_equal(kc_run(&kc, dev_k_cholesky, 1, &a, &r), IR_EINPUT);
    kc_free(&kc);
    dev_value_unref(a);
}

/* ------------------------------------------------------------------ */
/* triangular-solve                                                    */
/* ------------------------------------------------------------------ */

typedef struct Opts {
    bool left, lower, unit;
    const char *tr;
} Opts;

static DevValue *run_trsm(DevValue *a, DevValue *b, const Opts *o, IrStatus want, KCall *keep)
{
    KCall kc;
    kc_init(&kc, OP_TRIANGULAR_SOLVE, b->shape.type, b->shape.rank, b->shape.dims);
    test_x(&kc.ins.a)->left_side = o->left;
    test_x(&kc.ins.a)->lower = o->lower;
    test_x(&kc.ins.a)->unit_diagonal = o->unit;
    test_x(&kc.ins.a)->transpose_a = o->tr;
    DevValue *ops[2] = {a, b}, *r = NULL;
    IrStatus st = kc_run(&kc, dev_k_triangular_solve, 2, ops, &r);
    if (st != want)
        print_message("triangular-solve: status %d, %s\n", st, kc.d.msg ? kc.d.msg : "");
    assert_int_equal(st, want);
    if (keep)
        *keep = kc;
    else
        kc_free(&kc);
    return r;
}

/* op(a)[i][j] as triangular-solve reads it: only the chosen triangle, ones
 * on the diagonal when unit. */
static double complex op_a(const DevValue *a, int64_t o, int64_t n, int64_t i, int64_t j,
                           const Opts *p)
{
    bool tr = p->tr && strcmp(p->tr, "NO_TRANSPOSE") != 0;
    bool adj = p->tr && strcmp(p->tr, "ADJOINT") == 0;
    int64_t r = tr ? j : i, c = tr ? i : j;
    if (r == c && p->unit)
        return 1;
    if (p->lower ? c > r : c < r)
        return 0;
    double complex x = get(a, o + r * n + c);
    return adj ? conj(x) : x;
}

/* op(a) x = b (left) or x op(a) = b, rebuilt from x. */
static void check_solution(const DevValue *a, const DevValue *b, const DevValue *x, const Opts *p)
{
    int32_t rk = b->shape.rank;
    int64_t m = b->shape.dims[rk - 2], n = b->shape.dims[rk - 1], na = p->left ? m : n;
    int64_t nb = dev_value_elements(b) / (m * n);
    double tol = tol_of(b->shape.type) * 50;
    for (int64_t q = 0; q < nb; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double complex s = 0;
                for (int64_t t = 0; t < na; t++)
                    s += p->left ? op_a(a, q * na * na, na, i, t, p) * get(x, q * m * n + t * n + j)
                                 : get(x, q * m * n + i * n + t) * op_a(a, q * na * na, na, t, j, p);
                double complex want = get(b, q * m * n + i * n + j);
                if (cabs(s - want) > tol * (1 + cabs(want))) {
                    print_message("batch %lld (%lld,%lld): rebuilt %g, b %g (left %d lower %d "
                                  "unit %d %s)\n", (long long)q, (long long)i, (long long)j,
                                  creal(s), creal(want), p->left, p->lower, p->unit,
                                  p->tr ? p->tr : "-");
                    fail();
                }
            }
}

/* Solve [[2, 0], [1, 4]] x = [3, 5]^T (lower, left): x0 = 3/2,
 * x1 = (5 - 1.5) / 4 = 0.875. With TRANSPOSE the system is [[2, 1],
 * [0, 4]] x = b: x1 = 5/4, x0 = (3 - 1.25) / 2 = 0.875. The 7 above the
 * diagonal is never read. */
static void test_trsm_by_hand(void **state)
{
    (void)state;
    int64_t ad[2] = {2, 2}, bd[2] = {2, 1};
    const double av[4] = {2, 7, 1, 4}, bv[2] = {3, 5};
    const double want1[2] = {1.5, 0.875}, want2[2] = {0.875, 1.25};
    DevValue *a = val(IR_F64, 2, ad, av), *b = val(IR_F64, 2, bd, bv);
    Opts o = {true, true, false, NULL};
    dev_value_ref(b);
    DevValue *x = run_trsm(a, b, &o, IR_OK, NULL);
    assert_memory_equal(x->data, want1, sizeof want1);
    dev_value_unref(x);
    o.tr = "TRANSPOSE";
    x = run_trsm(a, b, &o, IR_OK, NULL);
    assert_memory_equal(x->data, want2, sizeof want2);
    dev_value_unref(x);
    dev_value_unref(b);
    dev_value_unref(b);
    dev_value_unref(a);
}

/* Every option and type on batches of 2 with uneven sizes: a is made
 * well conditioned (diagonal 4 + |noise|), junk in the unused triangle. */
static void test_trsm_options(void **state)
{
    (void)state;
    const IrType types[4] = {IR_F32, IR_F64, IR_C64, IR_C128};
    const char *trs[4] = {NULL, "NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
    for (int t = 0; t < 4; t++)
        for (int mask = 0; mask < 8; mask++)
            for (int ti = 0; ti < 4; ti++) {
                Opts o = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, trs[ti]};
                int64_t m = 5, n = 3, na = o.left ? m : n;
                int64_t ad[3] = {2, na, na}, bd[3] = {2, m, n};
                DevValue *a = val(types[t], 3, ad, NULL), *b = val(types[t], 3, bd, NULL);
                bool cplx = ir_type_is_complex(types[t]);
                for (int64_t i = 0; i < 2 * na * na; i++)
                    set(a, i, rnd() + (cplx ? I * rnd() : 0));
                for (int64_t q = 0; q < 2; q++)
                    for (int64_t i = 0; i < na; i++)
                        set(a, q * na * na + i * na + i, 4 + fabs(rnd()) + (cplx ? I * rnd() : 0));
                for (int64_t i = 0; i < 2 * m * n; i++)
                    set(b, i, rnd() + (cplx ? I * rnd() : 0));
                dev_value_ref(b);
                DevValue *x = run_trsm(a, b, &o, IR_OK, NULL);
                check_solution(a, b, x, &o);
                dev_value_unref(x);
                dev_value_unref(b);
                dev_value_unref(b);
                dev_value_unref(a);
            }
}

static void test_trsm_refuses(void **state)
{
    (void)state;
    int64_t ad[2] = {3, 3}, bd[2] = {4, 2};
    DevValue *a = val(IR_F32, 2, ad, NULL), *b = val(IR_F32, 2, bd, NULL);
    Opts o = {true, true, false, NULL};
    KCall kc;
    /* left_side: a must be 4 x 4 for b's 4 rows. */
    assert_null(run_trsm(a, b, &o, IR_EINPUT, &kc));
    assert_non_null(strstr(kc.d.msg, "a is 3x3 but b is 4x2"));
    kc_free(&kc);
    o.left = false;
    o.tr = "CONJUGATE";
    assert_null(run_trsm(a, b, &o, IR_EINPUT, &kc));
    kc_free(&kc);
    dev_value_unref(a);
    dev_value_unref(b);
    a = val(IR_S32, 2, ad, NULL);
    b = val(IR_S32, 2, ad, NULL);
    o.tr = NULL;
    assert_null(run_trsm(a, b, &o, IR_EUNSUPPORTED, &kc));
    assert_non_null(strstr(kc.d.msg, "of s32 is not supported"));
    kc_free(&kc);
    dev_value_unref(a);
    dev_value_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cholesky_by_hand),
        cmocka_unit_test(test_cholesky_types),
        cmocka_unit_test(test_cholesky_not_pd),
        cmocka_unit_test(test_cholesky_refuses),
        cmocka_unit_test(test_trsm_by_hand),
        cmocka_unit_test(test_trsm_options),
        cmocka_unit_test(test_trsm_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
