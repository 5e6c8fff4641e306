/*
 * test_fusion_rows.c: row groups (device/fusion_rows.c): reductions over
 * the minor dims fused with their elementwise producers and the
 * broadcast consumers of the reduced row. Which instructions form a row
 * group (softmax, also as JAX writes it with reshapes to [..,1] and
 * back, layer norm, several minor dims, a group that ends in a reduce, a
 * transpose of a small operand, outer values with dims of size 1, the
 * softmax backward's reduce over such a dim) and
 * which must not (a reduce over a major dim, a reducer that is not
 * associative, a transpose of the outer dims); the values a
 * fused run gives against naive loops in double (rows not a multiple of
 * the vector width, rows of length 1 and 0, max/min/add reducers, f32 and
 * f64); JAX's layer norm, whose repeated nodes run once, and a row's
 * scalar read in place of its spread, bit for bit the unfused run; a
 * row's max and min (dev_fusion_fold_f32) bit for bit a scalar fold where
 * no order can change them; and clean allocation failures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "device/fusion.h"
#include "kernel_test.h"
#include "fusion_test.h"

#define REDUCERS                                                                        \
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n" \
    "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n" \
    "min {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] minimum(a, b)\n}\n" \
    "add64 {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n  ROOT s = f64[] add(a, b)\n}\n"

/* Run the entry fused (arrays of any size) or unfused. */
static DevValue *run(const IrModule *m, int n, DevValue **args, bool fuse)
{
    DevExecOptions opt = {.no_fusion = !fuse, .fuse_small = true};
    DevValue *out = NULL;
    IrDiag d = {0};
    IrStatus st = dev_execute(m, m->entry, n, args, &opt, &out, &d);
    if (st != IR_OK)
        fail_msg("run: %s", d.msg ? d.msg : "?");
    return out;
}

/* Deterministic values in [-4, 4). */
static void fill(DevValue *v, uint32_t seed)
{
    int64_t n = ir_shape_elements(&v->shape);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        double x = (double)(seed >> 8) / (double)(1 << 24) * 8 - 4;
        if (v->shape.type == IR_F32)
            ((float *)v->data)[i] = (float)x;
        else
            ((double *)v->data)[i] = x;
    }
}

static double at(const DevValue *v, int64_t i)
{
    return v->shape.type == IR_F32 ? ((const float *)v->data)[i] : ((const double *)v->data)[i];
}

/* Every element of got within tol (relative to max(1, |want|)). */
static void assert_near(const DevValue *got, const double *want, int64_t n, double tol)
{
    assert_int_equal(ir_shape_elements(&got->shape), n);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(at(got, i) - want[i]) <= tol * fmax(1, fabs(want[i]))))
            fail_msg("element %lld: %.17g, expected %.17g", (long long)i, at(got, i), want[i]);
}

/* The single row group of m (fusion_block 1: rows of any length). */
static const DevFusionGroup *row_group(DevFusion *f, const IrModule *m, const char *root)
{
    *f = find(m, 1);
    for (int32_t g = 0; g < f->ngroups; g++)
        if (f->groups[g].root == instr_named(m, root)) {
            assert_true(f->groups[g].nouter >= 0);
            return &f->groups[g];
        }
    fail_msg("no group rooted at %s", root);
    return NULL;
}

/* Softmax of x[rows, len] in double. */
static void softmax_ref(const DevValue *x, int64_t rows, int64_t len, double *want)
{
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++)
            m = fmax(m, at(x, r * len + j));
        for (int64_t j = 0; j < len; j++)
            s += want[r * len + j] = exp(at(x, r * len + j) - m);
        for (int64_t j = 0; j < len; j++)
            want[r * len + j] /= s;
    }
}

static char *softmax_hlo(int64_t rows, int64_t len)
{
    char *t = ts_malloc(2048);
    snprintf(t, 2048,
             "HloModule sm\n" REDUCERS
             "ENTRY main {\n"
             "  x = f32[%1$lld,%2$lld] parameter(0)\n"
             "  ninf = f32[] constant(-inf)\n"
             "  m = f32[%1$lld] reduce(x, ninf), dimensions={1}, to_apply=max\n"
             "  mb = f32[%1$lld,%2$lld] broadcast(m), dimensions={0}\n"
             "  xm = f32[%1$lld,%2$lld] subtract(x, mb)\n"
             "  e = f32[%1$lld,%2$lld] exponential(xm)\n"
             "  zero = f32[] constant(0)\n"
             "  z = f32[%1$lld] reduce(e, zero), dimensions={1}, to_apply=add\n"
             "  zb = f32[%1$lld,%2$lld] broadcast(z), dimensions={0}\n"
             "  ROOT p = f32[%1$lld,%2$lld] divide(e, zb)\n"
             "}\n",
             (long long)rows, (long long)len);
    return t;
}

/* Softmax is one row group of all 7 instructions; rows of 37 (not a
 * multiple of any vector width), 16, 1; against double. */
static void softmax_rows(void **state)
{
    (void)state;
    int64_t lens[] = {37, 16, 1, 300};
    for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
        int64_t rows = 5, len = lens[c];
        char *txt = softmax_hlo(rows, len);
        IrModule *m = parse_ok(txt);
        ts_free(txt);
        DevFusion f;
        const DevFusionGroup *g = row_group(&f, m, "p");
        assert_int_equal(g->nnodes, 7); /* m, mb, xm, e, z, zb, p */
        assert_int_equal(g->nouter, 1);
        assert_int_equal(g->nleaves, 3); /* x, ninf, zero */
        assert_false(dev_fusion_chunked(ir_entry(m), g));
        ir_fusion_free(&f);
        int64_t dims[] = {rows, len};
        DevValue *x = val(IR_F32, 2, dims, NULL);
        fill(x, (uint32_t)len);
        double *want = ts_malloc((size_t)(rows * len) * sizeof *want);
        softmax_ref(x, rows, len, want);
        DevValue *got = run(m, 1, &x, true), *plain = run(m, 1, &x, false);
        assert_near(got, want, rows * len, 1e-6);
        assert_near(plain, want, rows * len, 1e-6);
        if (len == 1)
            for (int64_t r = 0; r < rows; r++)
                assert_true(at(got, r) == 1.0);
        ts_free(want);
        dev_value_unref(got);
        dev_value_unref(plain);
        dev_value_unref(x);
        ir_module_free(m);
    }
}

/* Softmax as JAX writes it: the max through maximum(m, -inf), and both
 * reduced rows reshaped to [2,3,1], broadcast to the same shape and
 * reshaped back before the broadcast over the rows. The copies join as
 * outer nodes: one row group of 15 nodes; against double. */
static void jax_softmax_rows(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule jsm\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[2,3,40] parameter(0)\n"
                           "  ninf = f32[] constant(-inf)\n"
                           "  m = f32[2,3] reduce(x, ninf), dimensions={2}, to_apply=max\n"
                           "  nb = f32[2,3] broadcast(ninf), dimensions={}\n"
                           "  mm = f32[2,3] maximum(m, nb)\n"
                           "  m1 = f32[2,3,1] reshape(mm)\n"
                           "  m2 = f32[2,3,1] broadcast(m1), dimensions={0,1,2}\n"
                           "  m3 = f32[2,3] reshape(m2)\n"
                           "  mb = f32[2,3,40] broadcast(m3), dimensions={0,1}\n"
                           "  xm = f32[2,3,40] subtract(x, mb)\n"
                           "  e = f32[2,3,40] exponential(xm)\n"
                           "  zero = f32[] constant(0)\n"
                           "  z = f32[2,3] reduce(e, zero), dimensions={2}, to_apply=add\n"
                           "  z1 = f32[2,3,1] reshape(z)\n"
                           "  z2 = f32[2,3,1] broadcast(z1), dimensions={0,1,2}\n"
                           "  z3 = f32[2,3] reshape(z2)\n"
                           "  zb = f32[2,3,40] broadcast(z3), dimensions={0,1}\n"
                           "  ROOT p = f32[2,3,40] divide(e, zb)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "p");
    assert_int_equal(g->nnodes, 15); /* all but x and the two constants */
    assert_int_equal(g->nouter, 2);
    assert_int_equal(g->nleaves, 3);
    ir_fusion_free(&f);
    int64_t dims[] = {2, 3, 40};
    DevValue *x = val(IR_F32, 3, dims, NULL);
    fill(x, 31);
    double want[240];
    softmax_ref(x, 6, 40, want);
    DevValue *got = run(m, 1, &x, true), *plain = run(m, 1, &x, false);
    assert_near(got, want, 240, 1e-6);
    assert_near(plain, want, 240, 1e-6);
    dev_value_unref(got);
    dev_value_unref(plain);
    dev_value_unref(x);
    ir_module_free(m);
}

/* Outer values with a dim of size 1 from outside the group: a per-row
 * divisor n f32[2,3,1] (a leaf read one element a row) and a per-row
 * shift t f32[2,3] reshaped inside the group (a copy of a leaf's
 * element); y = x - (sum(x)/n * t) over rows of 50; against double. */
static void unit_dim_leaves(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule ud\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[2,3,50] parameter(0)\n"
                           "  n = f32[2,3,1] parameter(1)\n"
                           "  t = f32[2,3] parameter(2)\n"
                           "  zero = f32[] constant(0)\n"
                           "  s = f32[2,3] reduce(x, zero), dimensions={2}, to_apply=add\n"
                           "  s1 = f32[2,3,1] reshape(s)\n"
                           "  mu = f32[2,3,1] divide(s1, n)\n"
                           "  t1 = f32[2,3,1] reshape(t)\n"
                           "  mt = f32[2,3,1] multiply(mu, t1)\n"
                           "  r = f32[2,3] reshape(mt)\n"
                           "  rb = f32[2,3,50] broadcast(r), dimensions={0,1}\n"
                           "  ROOT y = f32[2,3,50] subtract(x, rb)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "y");
    assert_int_equal(g->nnodes, 8); /* s, s1, mu, t1, mt, r, rb, y */
    assert_int_equal(g->nleaves, 4); /* x, n, t, zero */
    ir_fusion_free(&f);
    int64_t dx[] = {2, 3, 50}, dn[] = {2, 3, 1}, dt[] = {2, 3};
    DevValue *args[3] = {val(IR_F32, 3, dx, NULL), val(IR_F32, 3, dn, NULL), val(IR_F32, 2, dt, NULL)};
    for (int a = 0; a < 3; a++)
        fill(args[a], 11u + (uint32_t)a);
    double want[300];
    for (int r = 0; r < 6; r++) {
        double s = 0;
        for (int j = 0; j < 50; j++)
            s += at(args[0], r * 50 + j);
        double sh = s / at(args[1], r) * at(args[2], r);
        for (int j = 0; j < 50; j++)
            want[r * 50 + j] = at(args[0], r * 50 + j) - sh;
    }
    DevValue *got = run(m, 3, args, true);
    assert_near(got, want, 300, 1e-5);
    dev_value_unref(got);
    for (int a = 0; a < 3; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* The softmax backward as JAX's grad writes it: the row sum of dy * p
 * reshaped to [2,3,1], negated and summed over that dim of size 1 (an
 * outer reduce) before the broadcast back: y = p * (dy - sum(dy * p)),
 * one row group of 8 nodes; against double. */
static void outer_reduce(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule sb\n" REDUCERS
                           "ENTRY main {\n"
                           "  dy = f32[2,3,40] parameter(0)\n"
                           "  p = f32[2,3,40] parameter(1)\n"
                           "  zero = f32[] constant(0)\n"
                           "  m = f32[2,3,40] multiply(dy, p)\n"
                           "  s = f32[2,3] reduce(m, zero), dimensions={2}, to_apply=add\n"
                           "  s1 = f32[2,3,1] reshape(s)\n"
                           "  ns = f32[2,3,1] negate(s1)\n"
                           "  t = f32[2,3] reduce(ns, zero), dimensions={2}, to_apply=add\n"
                           "  tb = f32[2,3,40] broadcast(t), dimensions={0,1}\n"
                           "  a = f32[2,3,40] add(dy, tb)\n"
                           "  ROOT y = f32[2,3,40] multiply(a, p)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "y");
    assert_int_equal(g->nnodes, 8); /* m, s, s1, ns, t, tb, a, y */
    assert_int_equal(g->nleaves, 3);
    ir_fusion_free(&f);
    int64_t dims[] = {2, 3, 40};
    DevValue *args[2] = {val(IR_F32, 3, dims, NULL), val(IR_F32, 3, dims, NULL)};
    fill(args[0], 21);
    fill(args[1], 22);
    double want[240];
    for (int r = 0; r < 6; r++) {
        double s = 0;
        for (int j = 0; j < 40; j++)
            s += at(args[0], r * 40 + j) * at(args[1], r * 40 + j);
        for (int j = 0; j < 40; j++)
            want[r * 40 + j] = at(args[1], r * 40 + j) * (at(args[0], r * 40 + j) - s);
    }
    DevValue *got = run(m, 2, args, true), *plain = run(m, 2, args, false);
    assert_near(got, want, 240, 1e-5);
    assert_near(plain, want, 240, 1e-5);
    dev_value_unref(got);
    dev_value_unref(plain);
    for (int a = 0; a < 2; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* A transpose between two outer shapes (dims={1,0} of f32[3,3]) is no
 * copy: the reduce stays outside the row group. y[i,j,k] = x[i,j,k] -
 * sum_k x[j,i,k]; against double. */
static void permuted_outer(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule pb\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[3,3,20] parameter(0)\n"
                           "  zero = f32[] constant(0)\n"
                           "  s = f32[3,3] reduce(x, zero), dimensions={2}, to_apply=add\n"
                           "  st = f32[3,3] transpose(s), dimensions={1,0}\n"
                           "  sb = f32[3,3,20] broadcast(st), dimensions={0,1}\n"
                           "  ROOT y = f32[3,3,20] subtract(x, sb)\n"
                           "}\n");
    DevFusion f = find(m, 1);
    assert_int_equal(f.group_of[instr_named(m, "s")], -1);
    assert_int_equal(f.group_of[instr_named(m, "st")], -1);
    ir_fusion_free(&f);
    int64_t dims[] = {3, 3, 20};
    DevValue *x = val(IR_F32, 3, dims, NULL);
    fill(x, 3);
    double want[180];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 20; k++)
                s += at(x, (j * 3 + i) * 20 + k);
            for (int k = 0; k < 20; k++)
                want[(i * 3 + j) * 20 + k] = at(x, (i * 3 + j) * 20 + k) - s;
        }
    DevValue *got = run(m, 1, &x, true);
    assert_near(got, want, 180, 1e-5);
    dev_value_unref(got);
    dev_value_unref(x);
    ir_module_free(m);
}

/* Layer norm in f64 with scale and bias (broadcasts of small operands
 * along the row): two reduces, outer nodes between them (mean, variance,
 * rsqrt), rows of 33; against double. */
static void layernorm_rows_f64(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule ln\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f64[6,33] parameter(0)\n"
                           "  g = f64[33] parameter(1)\n"
                           "  b = f64[33] parameter(2)\n"
                           "  zero = f64[] constant(0)\n"
                           "  s = f64[6] reduce(x, zero), dimensions={1}, to_apply=add64\n"
                           "  c = f64[] constant(33)\n"
                           "  cb = f64[6] broadcast(c), dimensions={}\n"
                           "  mu = f64[6] divide(s, cb)\n"
                           "  mub = f64[6,33] broadcast(mu), dimensions={0}\n"
                           "  xc = f64[6,33] subtract(x, mub)\n"
                           "  sq = f64[6,33] multiply(xc, xc)\n"
                           "  v = f64[6] reduce(sq, zero), dimensions={1}, to_apply=add64\n"
                           "  var = f64[6] divide(v, cb)\n"
                           "  eps = f64[] constant(1e-5)\n"
                           "  epsb = f64[6] broadcast(eps), dimensions={}\n"
                           "  ve = f64[6] add(var, epsb)\n"
                           "  r = f64[6] rsqrt(ve)\n"
                           "  rb = f64[6,33] broadcast(r), dimensions={0}\n"
                           "  n = f64[6,33] multiply(xc, rb)\n"
                           "  gb = f64[6,33] broadcast(g), dimensions={1}\n"
                           "  bb = f64[6,33] broadcast(b), dimensions={1}\n"
                           "  ng = f64[6,33] multiply(n, gb)\n"
                           "  ROOT y = f64[6,33] add(ng, bb)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "y");
    assert_int_equal(g->nnodes, 17); /* everything but the parameters and constants */
    ir_fusion_free(&f);
    int64_t d2[] = {6, 33}, d1[] = {33};
    DevValue *args[3] = {val(IR_F64, 2, d2, NULL), val(IR_F64, 1, d1, NULL), val(IR_F64, 1, d1, NULL)};
    for (int a = 0; a < 3; a++)
        fill(args[a], 7u + (uint32_t)a);
    double want[6 * 33];
    for (int r = 0; r < 6; r++) {
        double s = 0, v = 0;
        for (int j = 0; j < 33; j++)
            s += at(args[0], r * 33 + j);
        double mu = s / 33;
        for (int j = 0; j < 33; j++)
            v += (at(args[0], r * 33 + j) - mu) * (at(args[0], r * 33 + j) - mu);
        double rs = 1 / sqrt(v / 33 + 1e-5);
        for (int j = 0; j < 33; j++)
            want[r * 33 + j] = (at(args[0], r * 33 + j) - mu) * rs * at(args[1], j) + at(args[2], j);
    }
    DevValue *got = run(m, 3, args, true);
    assert_near(got, want, 6 * 33, 1e-12);
    dev_value_unref(got);
    for (int a = 0; a < 3; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* A layer norm as JAX writes it: x - mean twice (sub1, sub2, each behind
 * its own broadcasts of the mean: nodes that compute what earlier ones
 * did read those nodes' rows), gamma and beta broadcast along the outer
 * dims (filled at the first block of rows, kept for the next: 150 rows
 * of 40 run as blocks of 102 and 48), a per-row shift t broadcast from a
 * leaf (its rows differ: filled each block) and a decoy that looks like
 * sub1 with its operands swapped (its own value). Fused bit for bit the
 * unfused run, and against double. */
static void jax_layernorm_same_nodes(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule jln\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[3,50,40] parameter(0)\n"
                           "  g = f32[40] parameter(1)\n"
                           "  b = f32[40] parameter(2)\n"
                           "  t = f32[3,50] parameter(3)\n"
                           "  zero = f32[] constant(0)\n"
                           "  s = f32[3,50] reduce(x, zero), dimensions={2}, to_apply=add\n"
                           "  s1 = f32[3,50,1] reshape(s)\n"
                           "  c = f32[] constant(40)\n"
                           "  cb = f32[3,50,1] broadcast(c), dimensions={}\n"
                           "  mu = f32[3,50,1] divide(s1, cb)\n"
                           "  ma = f32[3,50,1] broadcast(mu), dimensions={0,1,2}\n"
                           "  mb = f32[3,50] reshape(ma)\n"
                           "  mc = f32[3,50,40] broadcast(mb), dimensions={0,1}\n"
                           "  sub1 = f32[3,50,40] subtract(x, mc)\n"
                           "  na = f32[3,50,1] broadcast(mu), dimensions={0,1,2}\n"
                           "  nb = f32[3,50] reshape(na)\n"
                           "  nc = f32[3,50,40] broadcast(nb), dimensions={0,1}\n"
                           "  sub2 = f32[3,50,40] subtract(x, nc)\n"
                           "  decoy = f32[3,50,40] subtract(nc, x)\n"
                           "  sq = f32[3,50,40] multiply(sub2, sub2)\n"
                           "  v = f32[3,50] reduce(sq, zero), dimensions={2}, to_apply=add\n"
                           "  v1 = f32[3,50,1] reshape(v)\n"
                           "  var = f32[3,50,1] divide(v1, cb)\n"
                           "  eps = f32[] constant(1e-5)\n"
                           "  epsb = f32[3,50,1] broadcast(eps), dimensions={}\n"
                           "  ve = f32[3,50,1] add(var, epsb)\n"
                           "  r = f32[3,50,1] rsqrt(ve)\n"
                           "  r1 = f32[3,50] reshape(r)\n"
                           "  rb = f32[3,50,40] broadcast(r1), dimensions={0,1}\n"
                           "  n = f32[3,50,40] multiply(sub1, rb)\n"
                           "  gb = f32[3,50,40] broadcast(g), dimensions={2}\n"
                           "  ng = f32[3,50,40] multiply(n, gb)\n"
                           "  bb = f32[3,50,40] broadcast(b), dimensions={2}\n"
                           "  tb = f32[3,50,40] broadcast(t), dimensions={0,1}\n"
                           "  gb2 = f32[3,50,40] broadcast(g), dimensions={2}\n"
                           "  y0 = f32[3,50,40] add(ng, bb)\n"
                           "  y1 = f32[3,50,40] multiply(decoy, gb2)\n"
                           "  y2 = f32[3,50,40] add(y0, y1)\n"
                           "  ROOT y = f32[3,50,40] add(y2, tb)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "y");
    assert_int_equal(g->nnodes, 32); /* everything but the parameters and constants */
    assert_int_equal(g->nouter, 2);
    ir_fusion_free(&f);
    int64_t dx[] = {3, 50, 40}, dg[] = {40}, dt[] = {3, 50};
    DevValue *args[4] = {val(IR_F32, 3, dx, NULL), val(IR_F32, 1, dg, NULL), val(IR_F32, 1, dg, NULL),
                         val(IR_F32, 2, dt, NULL)};
    for (int a = 0; a < 4; a++)
        fill(args[a], 41u + (uint32_t)a);
    static double want[150 * 40];
    for (int r = 0; r < 150; r++) {
        double sum = 0, var = 0;
        for (int j = 0; j < 40; j++)
            sum += at(args[0], r * 40 + j);
        double mu = sum / 40;
        for (int j = 0; j < 40; j++)
            var += (at(args[0], r * 40 + j) - mu) * (at(args[0], r * 40 + j) - mu);
        double rs = 1 / sqrt(var / 40 + 1e-5);
        for (int j = 0; j < 40; j++) {
            double xc = at(args[0], r * 40 + j) - mu;
            want[r * 40 + j] = xc * rs * at(args[1], j) + at(args[2], j) - xc * at(args[1], j) + at(args[3], r);
        }
    }
    DevValue *got = run(m, 4, args, true), *plain = run(m, 4, args, false);
    assert_near(got, want, 150 * 40, 1e-5);
    assert_int_equal(got->nbytes, plain->nbytes);
    assert_memory_equal(got->data, plain->data, (size_t)got->nbytes);
    dev_value_unref(got);
    dev_value_unref(plain);
    for (int a = 0; a < 4; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* A spread read as a scalar by divides on either side (each row's element
 * taken in place of the filled row) and also by exp and by a multiply of
 * it with itself (so it is filled): fused bit for bit the unfused run,
 * 280 rows of 33 in blocks of 124, 124 and 32. */
static void spread_readers(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule sr\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[4,70,33] parameter(0)\n"
                           "  ninf = f32[] constant(-inf)\n"
                           "  mx = f32[4,70] reduce(x, ninf), dimensions={2}, to_apply=max\n"
                           "  mb = f32[4,70,33] broadcast(mx), dimensions={0,1}\n"
                           "  q = f32[4,70,33] divide(x, mb)\n"
                           "  p = f32[4,70,33] divide(mb, x)\n"
                           "  e = f32[4,70,33] exponential(mb)\n"
                           "  w = f32[4,70,33] multiply(mb, mb)\n"
                           "  a = f32[4,70,33] add(q, p)\n"
                           "  b = f32[4,70,33] add(a, e)\n"
                           "  ROOT y = f32[4,70,33] subtract(b, w)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "y");
    assert_int_equal(g->nnodes, 9); /* mx .. y */
    ir_fusion_free(&f);
    int64_t dx[] = {4, 70, 33};
    DevValue *x = val(IR_F32, 3, dx, NULL);
    fill(x, 53);
    static double want[4 * 70 * 33];
    for (int r = 0; r < 280; r++) {
        double mxr = -INFINITY;
        for (int j = 0; j < 33; j++)
            mxr = fmax(mxr, at(x, r * 33 + j));
        for (int j = 0; j < 33; j++) {
            double v = at(x, r * 33 + j);
            want[r * 33 + j] = v / mxr + mxr / v + exp(mxr) - mxr * mxr;
        }
    }
    DevValue *got = run(m, 1, &x, true), *plain = run(m, 1, &x, false);
    assert_near(got, want, 4 * 70 * 33, 1e-4);
    assert_int_equal(got->nbytes, plain->nbytes);
    assert_memory_equal(got->data, plain->data, (size_t)got->nbytes);
    dev_value_unref(got);
    dev_value_unref(plain);
    dev_value_unref(x);
    ir_module_free(m);
}

/* A reduce over two minor dims ({1,2} of [3,4,5]: rows of 20) with max,
 * min and add, its broadcast consumer x - max, and a group that ends in
 * the reduction (sum of exp, root the reduce); against double. */
static void several_minor_dims(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule md\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[3,4,5] parameter(0)\n"
                           "  ninf = f32[] constant(-inf)\n"
                           "  inf = f32[] constant(inf)\n"
                           "  zero = f32[] constant(0)\n"
                           "  mx = f32[3] reduce(x, ninf), dimensions={2,1}, to_apply=max\n"
                           "  mxb = f32[3,4,5] broadcast(mx), dimensions={0}\n"
                           "  d = f32[3,4,5] subtract(x, mxb)\n"
                           "  a = f32[3,4,5] abs(x)\n"
                           "  mn = f32[3] reduce(a, inf), dimensions={1,2}, to_apply=min\n"
                           "  mnb = f32[3,4,5] broadcast(mn), dimensions={0}\n"
                           "  out_d = f32[3,4,5] add(d, mnb)\n"
                           "  e = f32[3,4,5] exponential(x)\n"
                           "  s = f32[3] reduce(e, zero), dimensions={1,2}, to_apply=add\n"
                           "  ROOT t = (f32[3,4,5], f32[3]) tuple(out_d, s)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "out_d");
    assert_int_equal(g->nnodes, 7); /* mx, mxb, d, a, mn, mnb, out_d */
    assert_int_equal(g->nouter, 1);
    ir_fusion_free(&f);
    g = row_group(&f, m, "s");
    assert_int_equal(g->nnodes, 2); /* e, s: ends in the reduction */
    assert_int_equal(f.group_of[instr_named(m, "e")], f.group_of[instr_named(m, "s")]);
    ir_fusion_free(&f);
    int64_t dims[] = {3, 4, 5};
    DevValue *x = val(IR_F32, 3, dims, NULL);
    fill(x, 99);
    double want0[60], want1[3];
    for (int r = 0; r < 3; r++) {
        double mx = -INFINITY, mn = INFINITY, s = 0;
        for (int j = 0; j < 20; j++) {
            double v = at(x, r * 20 + j);
            mx = fmax(mx, v), mn = fmin(mn, fabs(v)), s += exp(v);
        }
        for (int j = 0; j < 20; j++)
            want0[r * 20 + j] = at(x, r * 20 + j) - mx + mn;
        want1[r] = s;
    }
    DevValue *got = run(m, 1, &x, true);
    assert_near(got->elems[0], want0, 60, 1e-6);
    assert_near(got->elems[1], want1, 3, 1e-6);
    dev_value_unref(got);
    dev_value_unref(x);
    ir_module_free(m);
}

/* What must not join a row group: a reduce over the major dim (its
 * broadcast back is along dim 1, not the leading dims), and a reducer
 * that is not associative (subtract: only the general reduce path knows
 * its order). Both still compute the right values. */
static void not_fused(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule nf\n" REDUCERS
                           "sub {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                           "  ROOT s = f32[] subtract(a, b)\n}\n"
                           "ENTRY main {\n"
                           "  x = f32[4,24] parameter(0)\n"
                           "  zero = f32[] constant(0)\n"
                           "  e = f32[4,24] exponential(x)\n"
                           "  c = f32[24] reduce(e, zero), dimensions={0}, to_apply=add\n"
                           "  cb = f32[4,24] broadcast(c), dimensions={1}\n"
                           "  q = f32[4,24] divide(e, cb)\n"
                           "  n = f32[4,24] negate(x)\n"
                           "  k = f32[4] reduce(n, zero), dimensions={1}, to_apply=sub\n"
                           "  ROOT t = (f32[4,24], f32[4]) tuple(q, k)\n"
                           "}\n");
    DevFusion f = find(m, 1);
    for (int32_t g = 0; g < f.ngroups; g++)
        assert_int_equal(f.groups[g].nouter, -1);
    assert_int_equal(f.group_of[instr_named(m, "c")], -1);
    assert_int_equal(f.group_of[instr_named(m, "k")], -1);
    ir_fusion_free(&f);
    int64_t dims[] = {4, 24};
    DevValue *x = val(IR_F32, 2, dims, NULL);
    fill(x, 5);
    double want0[96], want1[4];
    for (int j = 0; j < 24; j++) {
        double s = 0;
        for (int r = 0; r < 4; r++)
            s += (float)exp(at(x, r * 24 + j));
        for (int r = 0; r < 4; r++)
            want0[r * 24 + j] = (float)exp(at(x, r * 24 + j)) / s;
    }
    for (int r = 0; r < 4; r++) {
        double k = 0; /* ((0 - n0) - n1) - ... in element order */
        for (int j = 0; j < 24; j++)
            k = (float)(k - (-at(x, r * 24 + j)));
        want1[r] = k;
    }
    DevValue *got = run(m, 1, &x, true);
    assert_near(got->elems[0], want0, 96, 1e-6);
    assert_near(got->elems[1], want1, 4, 1e-6);
    dev_value_unref(got);
    dev_value_unref(x);
    ir_module_free(m);
}

/* A transpose of a small operand joins as a strided read, in an
 * elementwise group (the chunk interpreter) and in a row group; a
 * square transposed leaf must not lend its buffer to the result. */
static void transposes(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule tr\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[20,20] parameter(0)\n"
                           "  w = f32[20,20] parameter(1)\n"
                           "  wt = f32[20,20] transpose(w), dimensions={1,0}\n"
                           "  a = f32[20,20] add(x, wt)\n"
                           "  zero = f32[] constant(0)\n"
                           "  s = f32[20] reduce(a, zero), dimensions={1}, to_apply=add\n"
                           "  sb = f32[20,20] broadcast(s), dimensions={0}\n"
                           "  ROOT o = f32[20,20] subtract(a, sb)\n"
                           "}\n");
    DevFusion f;
    const DevFusionGroup *g = row_group(&f, m, "o");
    assert_int_equal(g->nnodes, 5); /* wt, a, s, sb, o */
    ir_fusion_free(&f);
    int64_t dims[] = {20, 20};
    DevValue *args[2] = {val(IR_F32, 2, dims, NULL), val(IR_F32, 2, dims, NULL)};
    fill(args[0], 1);
    fill(args[1], 2);
    double want[400];
    for (int r = 0; r < 20; r++) {
        double s = 0;
        for (int j = 0; j < 20; j++)
            s += want[r * 20 + j] = (float)(at(args[0], r * 20 + j) + at(args[1], j * 20 + r));
        for (int j = 0; j < 20; j++)
            want[r * 20 + j] -= (float)s;
    }
    DevValue *got = run(m, 2, args, true);
    assert_near(got, want, 400, 1e-6);
    dev_value_unref(got);
    ir_module_free(m);
    /* Elementwise only: the transposed w dies here, square, but is read
     * through strides: it must not become the result. */
    m = parse_ok("HloModule tr2\n"
                 "ENTRY main {\n"
                 "  x = f32[20,20] parameter(0)\n"
                 "  w = f32[20,20] parameter(1)\n"
                 "  wn = f32[20,20] negate(w)\n"
                 "  wt = f32[20,20] transpose(wn), dimensions={1,0}\n"
                 "  ROOT a = f32[20,20] add(x, wt)\n"
                 "}\n");
    f = find(m, 0);
    assert_int_equal(f.ngroups, 0); /* 400 elements: under the default size */
    ir_fusion_free(&f);
    f = find(m, 1);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.groups[0].nnodes, 2); /* wt, a (wn is a leaf: read through strides) */
    assert_true(dev_fusion_chunked(ir_entry(m), &f.groups[0]));
    ir_fusion_free(&f);
    for (int k = 0; k < 400; k++)
        want[k] = at(args[0], k) - at(args[1], (k % 20) * 20 + k / 20);
    got = run(m, 2, args, true);
    assert_near(got, want, 400, 0);
    dev_value_unref(got);
    for (int a = 0; a < 2; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* Rows of length 0 (too empty to fuse): a reduce gives its init for every
 * row. */
static void empty_rows(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule er\n" REDUCERS
                           "ENTRY main {\n"
                           "  x = f32[3,0] parameter(0)\n"
                           "  e = f32[3,0] exponential(x)\n"
                           "  one = f32[] constant(1.5)\n"
                           "  ROOT s = f32[3] reduce(e, one), dimensions={1}, to_apply=add\n"
                           "}\n");
    int64_t dims[] = {3, 0};
    DevValue *x = val(IR_F32, 2, dims, NULL);
    DevValue *got = run(m, 1, &x, true);
    double want[] = {1.5, 1.5, 1.5};
    assert_near(got, want, 3, 0);
    dev_value_unref(got);
    dev_value_unref(x);
    ir_module_free(m);
}

/* Allocation n fails, n = 1, 2, ...: IR_ENOMEM with a message, nothing
 * leaked (the sanitizer build checks), until a run completes. */
static void allocation_failures(void **state)
{
    (void)state;
    char *txt = softmax_hlo(3, 20);
    IrModule *m = parse_ok(txt);
    ts_free(txt);
    int64_t dims[] = {3, 20};
    DevValue *x = val(IR_F32, 2, dims, NULL);
    int failures = 0;
    for (long n = 1; n < 1000; n++) {
        DevValue *out = NULL;
        IrDiag d = {0};
        DevExecOptions opt = {.fuse_small = true};
        ts_fail_alloc_after(n);
        IrStatus st = dev_execute(m, m->entry, 1, &x, &opt, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            dev_value_unref(out);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_null(out);
        assert_non_null(d.msg);
        ir_diag_clear(&d);
        failures++;
    }
    assert_true(failures > 5);
    dev_value_unref(x);
    ir_module_free(m);
}

/* dev_fusion_fold_f32's max and min (fold_row: AVX-512 where the result
 * cannot depend on the order, else extreme_f32, else the lanes) against a
 * scalar fold in element order: the same bits for rows of 0 to 70
 * elements (tails of every length) with the extreme anywhere, negative
 * rows, an infinite init or element; a NaN anywhere (or as init) gives a
 * NaN; rows whose extreme is a zero or a subnormal give the value a scalar
 * fold gives, the sign of a zero aside. */
static float scalar_extreme(bool max, float init, const float *x, int n)
{
    float a = init;
    for (int i = 0; i < n; i++)
        a = max ? (a != a || a >= x[i] ? a : x[i]) : (a != a || a <= x[i] ? a : x[i]);
    return a;
}

static void fold_extremes(void **state)
{
    (void)state;
    float x[80];
    uint32_t z = 5;
    for (int n = 0; n <= 70; n++)
        for (int at = 0; at < (n ? n : 1); at += n > 20 ? 7 : 1)
            for (int mx = 0; mx < 2; mx++)
                for (int sign = 0; sign < 2; sign++) {
                    for (int i = 0; i < n; i++) {
                        z = z * 1664525u + 1013904223u;
                        x[i] = (sign ? -1.0f : 1.0f) * (1.0f + (float)(z >> 8) * 0x1p-24f);
                    }
                    if (n)
                        x[at] = mx ? 7.5f : -7.5f; /* the extreme, anywhere */
                    float init = mx ? -INFINITY : INFINITY;
                    IrOpcode op = mx ? OP_MAXIMUM : OP_MINIMUM;
                    float want = scalar_extreme(mx, init, x, n), got = dev_fusion_fold_f32(op, init, x, n);
                    assert_memory_equal(&got, &want, sizeof got);
                    if (n) { /* an infinite element, then a finite init above it all */
                        x[n / 2] = mx ? INFINITY : -INFINITY;
                        want = scalar_extreme(mx, init, x, n);
                        got = dev_fusion_fold_f32(op, init, x, n);
                        assert_memory_equal(&got, &want, sizeof got);
                        x[n / 2] = 1.0f;
                        float big = mx ? 100.0f : -100.0f;
                        got = dev_fusion_fold_f32(op, big, x, n);
                        assert_true(got == big);
                        x[at] = NAN;
                        assert_true(isnan(dev_fusion_fold_f32(op, init, x, n)));
                    }
                }
    assert_true(isnan(dev_fusion_fold_f32(OP_MAXIMUM, NAN, x, 40)));
    /* extremes that are zeros or subnormals: the value (a zero's sign
     * depends on the order) */
    for (int n = 1; n <= 40; n++) {
        for (int i = 0; i < n; i++)
            x[i] = -1.0f - (float)i;
        x[n - 1] = 0x1p-140f; /* subnormal */
        float got = dev_fusion_fold_f32(OP_MAXIMUM, -INFINITY, x, n);
        assert_true(got == 0x1p-140f || got == 0.0f); /* a flushed mode may compare it as zero */
        x[n - 1] = -0.0f;
        x[0] = 0.0f;
        got = dev_fusion_fold_f32(OP_MAXIMUM, -INFINITY, x, n);
        assert_true(got == 0.0f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(softmax_rows),
        cmocka_unit_test(jax_softmax_rows),
        cmocka_unit_test(unit_dim_leaves),
        cmocka_unit_test(outer_reduce),
        cmocka_unit_test(permuted_outer),
        cmocka_unit_test(layernorm_rows_f64),
        cmocka_unit_test(jax_layernorm_same_nodes),
        cmocka_unit_test(spread_readers),
        cmocka_unit_test(several_minor_dims),
        cmocka_unit_test(not_fused),
        cmocka_unit_test(transposes),
        cmocka_unit_test(empty_rows),
        cmocka_unit_test(fold_extremes),
        cmocka_unit_test(allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
