/*
 * test_fusion.c: fused elementwise loops (device/fusion.c). Which
 * instructions form a group, the values a fused run gives (worked out by
 * hand, with blocks that do not divide the array), that they equal the
 * unfused path bit for bit on larger random arrays, that a broadcast read
 * by several groups runs inside each of them, that a group read by
 * another runs inside it as an extra output (Adam's m' and v'), that a
 * dying operand lends its buffer (to each output its own), that errors name the same instruction as unfused,
 * that a reduce over major dims takes in the elementwise tree that makes
 * its input (a column group: hand-worked values, the unfused pair's bits
 * on uneven shapes, a plain double loop's sums), that broadcasts read in
 * place from their repeated pattern give the unfused bits, and that every
 * allocation failure is clean.
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

/* Run the entry with fusion (block elements per block; 0: the default
 * choice) or without it. */
static IrStatus run(const IrModule *m, int n, DevValue **args, bool fuse, int32_t block, DevValue **out,
                    IrDiag *d)
{
    DevExecOptions opt = {.no_fusion = !fuse, .fusion_block = block};
    return dev_execute(m, m->entry, n, args, &opt, out, d);
}

/* Fused with the default paths (the f32 chunk interpreter where it
 * applies), arrays of any size. */
static IrStatus run_chunked(const IrModule *m, int n, DevValue **args, DevValue **out, IrDiag *d)
{
    DevExecOptions opt = {.fuse_small = true};
    return dev_execute(m, m->entry, n, args, &opt, out, d);
}

static void assert_f32(const DevValue *v, const float *want, int64_t n)
{
    assert_int_equal(v->nbytes, n * 4);
    for (int64_t i = 0; i < n; i++)
        if (((const float *)v->data)[i] != want[i])
            fail_msg("element %lld: %g, expected %g", (long long)i, ((const float *)v->data)[i], want[i]);
}

/* The module is one group of nnodes nodes that the chunk interpreter
 * (or the register path) runs. */
static void assert_one_chunked_group(const IrModule *m, int32_t nnodes)
{
    DevFusion f = find(m, 0);
    assert_int_equal(f.ngroups, 1);
    assert_true(dev_fusion_chunked(ir_entry(m), &f.groups[0]));
    assert_int_equal(f.groups[0].nnodes, nnodes);
    ir_fusion_free(&f);
}

/* f32 arrays a and b the same bits, where any NaN equals any NaN: which
 * operand's NaN an operation on two NaNs returns is the instruction's
 * (x86: the first source's), and the compiler may swap a commutative
 * operation's operands, differently in two loops of one expression (on
 * an AVX2 machine register_math_equal_unfused's NaN input came out +NaN
 * fused and -NaN unfused). */
static void assert_same_f32(const DevValue *a, const DevValue *b)
{
    assert_int_equal(a->nbytes, b->nbytes);
    const float *x = (const float *)a->data, *y = (const float *)b->data;
    for (int64_t i = 0; i < a->nbytes / 4; i++)
        if (!(isnan(x[i]) && isnan(y[i])) && memcmp(&x[i], &y[i], 4) != 0)
            fail_msg("element %lld: %.9g (0x%08x), unfused %.9g (0x%08x)", (long long)i, x[i],
                     (unsigned)((const uint32_t *)a->data)[i], y[i], (unsigned)((const uint32_t *)b->data)[i]);
}

/* The entry fused (the default paths: `chunked` for arrays of any size,
 * then again with the register path's AVX2 form where the CPU would run
 * AVX-512's) against unfused, bit for bit (f32: any NaN for a NaN); the
 * results and the n arguments are released. */
static void assert_fused_is_unfused(const IrModule *m, int n, DevValue **args, bool chunked)
{
    DevValue *fused = NULL, *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, n, args, false, 0, &plain, &d), IR_OK);
    for (int avx2 = 0; avx2 < (chunked ? 2 : 1); avx2++) {
        DevExecOptions opt = {.fuse_small = true, .no_avx512 = avx2 == 1};
        assert_int_equal(chunked ? dev_execute(m, m->entry, n, args, &opt, &fused, &d)
                                 : run(m, n, args, true, 0, &fused, &d),
                         IR_OK);
        assert_int_equal(fused->nbytes, plain->nbytes);
        if (plain->shape.type == IR_F32)
            assert_same_f32(fused, plain);
        else
            assert_memory_equal(fused->data, plain->data, (size_t)plain->nbytes);
        dev_value_unref(fused);
    }
    dev_value_unref(plain);
    for (int a = 0; a < n; a++)
        dev_value_unref(args[a]);
}

/* The benchmark's chain of 8 ops over 7 elements, blocks of 3 (3 + 3 + 1). */
static const char *chain_hlo =
    "HloModule chain\n"
    "ENTRY main {\n"
    "  x = f32[7] parameter(0)\n"
    "  y = f32[7] parameter(1)\n"
    "  t1 = f32[7] add(x, y)\n"
    "  t2 = f32[7] multiply(t1, x)\n"
    "  t3 = f32[7] subtract(t2, y)\n"
    "  t4 = f32[7] maximum(t3, x)\n"
    "  t5 = f32[7] multiply(t4, t4)\n"
    "  t6 = f32[7] add(t5, y)\n"
    "  t7 = f32[7] negate(t6)\n"
    "  ROOT t8 = f32[7] abs(t7)\n"
    "}\n";

static void chain_is_one_group(void **state)
{
    (void)state;
    IrModule *m = parse_ok(chain_hlo);
    DevFusion f = find(m, 3);
    assert_int_equal(f.ngroups, 1);
    const DevFusionGroup *g = &f.groups[0];
    assert_int_equal(g->root, instr_named(m, "t8"));
    assert_int_equal(g->nnodes, 8); /* t1..t8; t4 is read twice by t5, both inside */
    assert_int_equal(g->nleaves, 2);
    assert_int_equal(g->leaves[0], instr_named(m, "x"));
    assert_int_equal(g->leaf_refs[0], 3); /* t1, t2, t4 */
    assert_int_equal(g->leaves[1], instr_named(m, "y"));
    assert_int_equal(g->leaf_refs[1], 3); /* t1, t3, t6 */
    assert_int_equal(f.group_of[instr_named(m, "x")], -1);
    assert_int_equal(f.group_of[instr_named(m, "t4")], 0);
    assert_true(dev_fusion_chunked(ir_entry(m), g)); /* all f32, ops of float_ops.h */
    ir_fusion_free(&f);
    ir_module_free(m);
}

static void chain_values(void **state)
{
    (void)state;
    IrModule *m = parse_ok(chain_hlo);
    int64_t dims[] = {7};
    float xs[] = {1, -2, 0.5f, 3, -1, 0, 2};
    float ys[] = {2, 1, -0.5f, -4, 1, 3, -2};
    /* t1 = x+y, t2 = t1*x, t3 = t2-y, t4 = max(t3,x), t6 = t4^2+y, t8 = |-t6|:
     *   x=1,  y=2:    t1=3,   t2=3,    t3=1,    t4=1,    t6=3       -> 3
     *   x=-2, y=1:    t1=-1,  t2=2,    t3=1,    t4=1,    t6=2       -> 2
     *   x=.5, y=-.5:  t1=0,   t2=0,    t3=.5,   t4=.5,   t6=-.25    -> .25
     *   x=3,  y=-4:   t1=-1,  t2=-3,   t3=1,    t4=3,    t6=5       -> 5
     *   x=-1, y=1:    t1=0,   t2=-0,   t3=-1,   t4=-1,   t6=2       -> 2
     *   x=0,  y=3:    t1=3,   t2=0,    t3=-3,   t4=0,    t6=3       -> 3
     *   x=2,  y=-2:   t1=0,   t2=0,    t3=2,    t4=2,    t6=2       -> 2 */
    float want[] = {3, 2, 0.25f, 5, 2, 3, 2};
    DevValue *args[2] = {val(IR_F32, 1, dims, xs), val(IR_F32, 1, dims, ys)};
    int32_t blocks[] = {1, 3, 7, 8, 0};
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
        DevValue *out = NULL;
        IrDiag d = {0};
        assert_int_equal(run(m, 2, args, true, blocks[b], &out, &d), IR_OK);
        assert_f32(out, want, 7);
        dev_value_unref(out);
    }
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, 2, args, false, 0, &out, &d), IR_OK);
    assert_f32(out, want, 7);
    dev_value_unref(out);
    assert_int_equal(run_chunked(m, 2, args, &out, &d), IR_OK); /* one partial chunk */
    assert_f32(out, want, 7);
    dev_value_unref(out);
    /* The arguments are borrowed: untouched. */
    assert_true(args[0]->refs == 1 && ((float *)args[0]->data)[1] == -2);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* Broadcasts feeding the chain: along the last dimension (a bias), along
 * the first, and of a scalar; blocks of 4 cross the rows of [3,5]. */
static const char *bcast_hlo =
    "HloModule bcast\n"
    "ENTRY main {\n"
    "  x = f32[3,5] parameter(0)\n"
    "  bias = f32[5] parameter(1)\n"
    "  row = f32[3] parameter(2)\n"
    "  b1 = f32[3,5] broadcast(bias), dimensions={1}\n"
    "  b2 = f32[3,5] broadcast(row), dimensions={0}\n"
    "  c = f32[] constant(10)\n"
    "  b3 = f32[3,5] broadcast(c), dimensions={}\n"
    "  a1 = f32[3,5] add(x, b1)\n"
    "  a2 = f32[3,5] multiply(a1, b2)\n"
    "  ROOT a3 = f32[3,5] add(a2, b3)\n"
    "}\n";

static void broadcasts_fuse(void **state)
{
    (void)state;
    IrModule *m = parse_ok(bcast_hlo);
    DevFusion f = find(m, 4);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.groups[0].nnodes, 6); /* b1, b2, b3, a1, a2, a3 */
    assert_int_equal(f.groups[0].nleaves, 4); /* x, bias, row, c */
    for (int32_t l = 0; l < f.groups[0].nleaves; l++)
        assert_int_equal(f.groups[0].leaf_direct[l], f.groups[0].leaves[l] == instr_named(m, "x"));
    assert_true(dev_fusion_chunked(ir_entry(m), &f.groups[0]));
    ir_fusion_free(&f);

    int64_t xd[] = {3, 5}, bd[] = {5}, rd[] = {3};
    float xs[15], bias[] = {0, 1, 2, 3, 4}, row[] = {1, -1, 2};
    for (int i = 0; i < 15; i++)
        xs[i] = (float)i; /* x[r][c] = 5r + c */
    /* (x[r][c] + bias[c]) * row[r] + 10 = (5r + 2c) * row[r] + 10 */
    float want[15];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            want[r * 5 + c] = (float)(5 * r + 2 * c) * row[r] + 10;
    DevValue *args[3] = {val(IR_F32, 2, xd, xs), val(IR_F32, 1, bd, bias), val(IR_F32, 1, rd, row)};
    int32_t blocks[] = {1, 4, 5, 6, 15, 16};
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
        DevValue *out = NULL;
        IrDiag d = {0};
        assert_int_equal(run(m, 3, args, true, blocks[b], &out, &d), IR_OK);
        assert_f32(out, want, 15);
        dev_value_unref(out);
    }
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run_chunked(m, 3, args, &out, &d), IR_OK);
    assert_f32(out, want, 15);
    dev_value_unref(out);
    for (int i = 0; i < 3; i++)
        dev_value_unref(args[i]);
    ir_module_free(m);
}

/* A broadcast read by two groups (Adam's constants, GELU backward's):
 * b is used by u (a group with v) and by w (a lone multiply): it runs
 * inside both, never as an array of its own, and w, which gathered nobody
 * else, runs fused with it. (Were w to read v, v's group would run inside
 * w's: multi_output.) */
static const char *shared_hlo =
    "HloModule shared\n"
    "ENTRY main {\n"
    "  x = f32[2,5] parameter(0)\n"
    "  c = f32[] constant(0.5)\n"
    "  b = f32[2,5] broadcast(c), dimensions={}\n"
    "  u = f32[2,5] multiply(x, b)\n"
    "  v = f32[2,5] add(u, x)\n"
    "  w = f32[2,5] multiply(x, b)\n"
    "  ROOT r = (f32[2,5], f32[2,5]) tuple(v, w)\n"
    "}\n";

static void shared_broadcast(void **state)
{
    (void)state;
    IrModule *m = parse_ok(shared_hlo);
    DevFusion f = find(m, 4);
    int32_t b = instr_named(m, "b"), c = instr_named(m, "c");
    assert_int_equal(f.ngroups, 2);
    for (int32_t g = 0; g < 2; g++) {
        const DevFusionGroup *grp = &f.groups[g];
        assert_int_equal(grp->root, instr_named(m, g == 0 ? "v" : "w"));
        assert_int_equal(grp->nnodes, g == 0 ? 3 : 2); /* b u v; b w */
        assert_int_equal(grp->nodes[0], b);            /* before its readers */
        assert_true(ir_fusion_node_index(grp, b) >= 0);
        assert_int_equal(ir_fusion_leaf_index(grp, b), -1);
        assert_true(ir_fusion_leaf_index(grp, c) >= 0);
    }
    assert_int_equal(f.group_of[b], 0); /* skipped by the executor */
    ir_fusion_free(&f);

    int64_t d[] = {2, 5};
    float xs[10];
    for (int i = 0; i < 10; i++)
        xs[i] = (float)i - 4; /* v = 1.5 x, w = 0.5 x: exact */
    float wv[10], ww[10];
    for (int i = 0; i < 10; i++) {
        wv[i] = 1.5f * xs[i];
        ww[i] = 0.5f * xs[i];
    }
    DevValue *args[1] = {val(IR_F32, 2, d, xs)};
    int32_t blocks[] = {3, 10, 0};
    for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++) {
        DevValue *out = NULL;
        IrDiag dg = {0};
        assert_int_equal(blocks[k] ? run(m, 1, args, true, blocks[k], &out, &dg) : run_chunked(m, 1, args, &out, &dg),
                         IR_OK);
        assert_f32(out->elems[0], wv, 10);
        assert_f32(out->elems[1], ww, 10);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    ir_module_free(m);

    /* A reader outside every group (a dot) keeps the broadcast an array. */
    m = parse_ok("HloModule kept\n"
                 "ENTRY main {\n"
                 "  x = f32[4,4] parameter(0)\n"
                 "  c = f32[] constant(2)\n"
                 "  b = f32[4,4] broadcast(c), dimensions={}\n"
                 "  u = f32[4,4] multiply(x, b)\n"
                 "  v = f32[4,4] add(u, x)\n"
                 "  t = f32[4,4] dot(b, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  ROOT r = (f32[4,4], f32[4,4]) tuple(v, t)\n"
                 "}\n");
    f = find(m, 4);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.group_of[instr_named(m, "b")], -1);
    assert_true(ir_fusion_leaf_index(&f.groups[0], instr_named(m, "b")) >= 0);
    ir_fusion_free(&f);
    ir_module_free(m);
}

/* compare, select (with a broadcast predicate), clamp with scalar bounds
 * (scalar leaves), convert between types: s32 in, f32 out. */
static const char *mixed_hlo =
    "HloModule mixed\n"
    "ENTRY main {\n"
    "  x = s32[6] parameter(0)\n"
    "  flag = pred[] parameter(1)\n"
    "  two = s32[] constant(2)\n"
    "  b2 = s32[6] broadcast(two), dimensions={}\n"
    "  gt = pred[6] compare(x, b2), direction=GT\n"
    "  neg = s32[6] negate(x)\n"
    "  s1 = s32[6] select(gt, x, neg)\n"
    "  bf = pred[6] broadcast(flag), dimensions={}\n"
    "  s2 = s32[6] select(bf, s1, x)\n"
    "  lo = s32[] constant(0)\n"
    "  hi = s32[] constant(4)\n"
    "  cl = s32[6] clamp(lo, s2, hi)\n"
    "  f = f32[6] convert(cl)\n"
    "  half = f32[] constant(0.5)\n"
    "  bh = f32[6] broadcast(half), dimensions={}\n"
    "  ROOT r = f32[6] multiply(f, bh)\n"
    "}\n";

static void mixed_types(void **state)
{
    (void)state;
    IrModule *m = parse_ok(mixed_hlo);
    DevFusion f = find(m, 4);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.groups[0].nnodes, 10); /* b2 gt neg s1 bf s2 cl f bh r */
    assert_false(dev_fusion_chunked(ir_entry(m), &f.groups[0]));
    ir_fusion_free(&f);

    int64_t d6[] = {6};
    int32_t xs[] = {-3, 0, 1, 2, 3, 7};
    uint8_t yes = 1, no = 0;
    /* flag true: s1 = x > 2 ? x : -x = {3, 0, -1, -2, 3, 7}; clamp to [0,4]
     * = {3, 0, 0, 0, 3, 4}; * 0.5. flag false: clamp(x) = {0,0,1,2,3,4}. */
    float want_yes[] = {1.5f, 0, 0, 0, 1.5f, 2}, want_no[] = {0, 0, 0.5f, 1, 1.5f, 2};
    DevValue *args[2] = {val(IR_S32, 1, d6, xs), val(IR_PRED, 0, NULL, &yes)};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            memcpy(args[1]->data, &no, 1);
        DevValue *out = NULL;
        IrDiag d = {0};
        assert_int_equal(run(m, 2, args, true, 4, &out, &d), IR_OK);
        assert_f32(out, pass == 0 ? want_yes : want_no, 6);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* What stays out: a value also used outside the chain, the root of the
 * computation, an op with a control predecessor, a different shape, copy,
 * and arrays below the default size when no block is given. */
static void boundaries(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule b\n"
                           "ENTRY main {\n"
                           "  x = f32[4] parameter(0)\n"
                           "  t = f32[4] add(x, x)\n"
                           "  u = f32[4] multiply(t, t)\n"
                           "  v = f32[4] negate(u)\n"
                           "  w = f32[4] copy(v)\n"
                           "  e = f32[4] exponential(w)\n"
                           "  ROOT r = (f32[4], f32[4]) tuple(e, t)\n"
                           "}\n");
    /* t is used by u and by the tuple: a leaf of {u, v}; w (copy) is not
     * fused, so e stands alone. */
    DevFusion f = find(m, 2);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.groups[0].root, instr_named(m, "v"));
    assert_int_equal(f.groups[0].nnodes, 2);
    assert_int_equal(f.groups[0].nleaves, 1);
    assert_int_equal(f.groups[0].leaves[0], instr_named(m, "t"));
    assert_int_equal(f.groups[0].leaf_refs[0], 2);
    ir_fusion_free(&f);
    /* Default options: 4 elements are below IR_FUSION_MIN_ELEMENTS. */
    f = find(m, 0);
    assert_int_equal(f.ngroups, 0);
    assert_null(f.group_of);
    ir_module_free(m);

    m = parse_ok("HloModule c\n"
                 "ENTRY main {\n"
                 "  x = f32[4] parameter(0)\n"
                 "  t = f32[4] add(x, x)\n"
                 "  u = f32[4] multiply(t, t), control-predecessors={x}\n"
                 "  s = f32[2] slice(u), slice={[0:2]}\n"
                 "  ROOT n = f32[2] negate(s)\n"
                 "}\n");
    f = find(m, 2);
    assert_int_equal(f.ngroups, 0);
    ir_module_free(m);
}

/* A dot whose one use is a transpose swapping its free dims pairs with
 * it (JAX's weight gradients, transpose(dot(g, x))); other transposes of
 * dots do not. */
static void dot_transpose_pairs(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule p\n"
                           "ENTRY main {\n"
                           "  g = f32[4,3] parameter(0)\n"
                           "  x = f32[4,5] parameter(1)\n"
                           "  d = f32[3,5] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                           "  ROOT t = f32[5,3] transpose(d), dimensions={1,0}\n"
                           "}\n");
    DevFusion f = find(m, 0);
    assert_int_equal(f.ngroups, 1);
    const DevFusionGroup *g = &f.groups[0];
    assert_true(g->dot_transposed);
    assert_false(dev_fusion_chunked(ir_entry(m), g));
    assert_int_equal(g->root, instr_named(m, "t"));
    assert_int_equal(g->nnodes, 2);
    assert_int_equal(g->nodes[0], instr_named(m, "d"));
    assert_int_equal(g->nleaves, 2);
    assert_int_equal(g->leaves[0], instr_named(m, "g"));
    assert_int_equal(g->leaves[1], instr_named(m, "x"));
    ir_fusion_free(&f);
    ir_module_free(m);
    /* Not paired: the dot has another use; a batched dot's transpose
     * that moves the batch dim; with no_fusion. */
    m = parse_ok("HloModule q\n"
                 "ENTRY main {\n"
                 "  a = f32[3,4] parameter(0)\n"
                 "  b = f32[4,5] parameter(1)\n"
                 "  d = f32[3,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  t = f32[5,3] transpose(d), dimensions={1,0}\n"
                 "  ROOT r = (f32[5,3], f32[3,5]) tuple(t, d)\n"
                 "}\n");
    f = find(m, 0);
    assert_int_equal(f.ngroups, 0);
    ir_module_free(m);
    m = parse_ok("HloModule q\n"
                 "ENTRY main {\n"
                 "  a = f32[2,3,4] parameter(0)\n"
                 "  b = f32[2,4,5] parameter(1)\n"
                 "  d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n"
                 "  ROOT t = f32[5,3,2] transpose(d), dimensions={2,1,0}\n"
                 "}\n");
    f = find(m, 0);
    assert_int_equal(f.ngroups, 0);
    DevExecOptions opt = {.no_fusion = true};
    const IrComputation *c = ir_entry(m);
    int32_t order[4] = {0, 1, 2, 3};
    IrDiag d = {0};
    assert_int_equal(dev_fusion_find(m, c, order, 4, &opt, &f, &d), IR_OK);
    assert_int_equal(f.ngroups, 0);
    ir_module_free(m);
}

/* The transposed dot against dot then transpose, bit for bit (small
 * integers: every sum exact in every type and GEMM): plain and
 * transposed operands, batch dims with several free dims each, f64,
 * s32 (the loops), f16 (computed in f32 and converted back); and one
 * product by hand. */
static void dot_transposed_equals_unfused(void **state)
{
    (void)state;
    static const struct {
        const char *hlo;
        IrType t[2];
        int32_t rank[2];
        int64_t dims[2][4];
    } cases[] = {
        {"HloModule a\nENTRY main {\n  g = f32[37,19] parameter(0)\n  x = f32[37,23] parameter(1)\n"
         "  d = f32[19,23] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
         "  ROOT t = f32[23,19] transpose(d), dimensions={1,0}\n}\n",
         {IR_F32, IR_F32}, {2, 2}, {{37, 19}, {37, 23}}},
        {"HloModule b\nENTRY main {\n  a = f32[19,37] parameter(0)\n  b = f32[23,37] parameter(1)\n"
         "  d = f32[19,23] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
         "  ROOT t = f32[23,19] transpose(d), dimensions={1,0}\n}\n",
         {IR_F32, IR_F32}, {2, 2}, {{19, 37}, {23, 37}}},
        {"HloModule c\nENTRY main {\n  a = f64[2,3,4,5] parameter(0)\n  b = f64[2,5,6] parameter(1)\n"
         "  d = f64[2,3,4,6] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n"
         "  ROOT t = f64[2,6,3,4] transpose(d), dimensions={0,3,1,2}\n}\n",
         {IR_F64, IR_F64}, {4, 3}, {{2, 3, 4, 5}, {2, 5, 6}}},
        {"HloModule d\nENTRY main {\n  a = s32[3,7,2] parameter(0)\n  b = s32[7,5] parameter(1)\n"
         "  d = s32[3,2,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
         "  ROOT t = s32[5,3,2] transpose(d), dimensions={2,0,1}\n}\n",
         {IR_S32, IR_S32}, {3, 2}, {{3, 7, 2}, {7, 5}}},
        {"HloModule e\nENTRY main {\n  a = f16[9,6] parameter(0)\n  b = f16[6,11] parameter(1)\n"
         "  d = f16[9,11] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
         "  ROOT t = f16[11,9] transpose(d), dimensions={1,0}\n}\n",
         {IR_F16, IR_F16}, {2, 2}, {{9, 6}, {6, 11}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        IrModule *m = parse_ok(cases[i].hlo);
        DevFusion f = find(m, 0);
        assert_int_equal(f.ngroups, 1);
        assert_true(f.groups[0].dot_transposed);
        ir_fusion_free(&f);
        DevValue *args[2];
        uint32_t s = 777u + (uint32_t)i;
        for (int a = 0; a < 2; a++) {
            args[a] = val(cases[i].t[a], cases[i].rank[a], cases[i].dims[a], NULL);
            int64_t n = ir_shape_elements(&args[a]->shape);
            for (int64_t e = 0; e < n; e++) {
                s = s * 1664525u + 1013904223u;
                int v = (int)(s >> 28) - 8; /* -8..7 */
                dev_store_f64(cases[i].t[a], args[a]->data, e, v);
            }
        }
        assert_fused_is_unfused(m, 2, args, false);
        ir_module_free(m);
    }
    /* By hand: g = [[1,2],[3,4]] (k x m), x = [[5,6,7],[8,9,10]] (k x n);
     * d = g^T x = [[29,33,37],[42,48,54]]; t = d^T. */
    IrModule *m = parse_ok("HloModule h\nENTRY main {\n  g = f32[2,2] parameter(0)\n"
                           "  x = f32[2,3] parameter(1)\n"
                           "  d = f32[2,3] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                           "  ROOT t = f32[3,2] transpose(d), dimensions={1,0}\n}\n");
    int64_t d22[] = {2, 2}, d23[] = {2, 3};
    float gv[] = {1, 2, 3, 4}, xv[] = {5, 6, 7, 8, 9, 10}, want[] = {29, 42, 33, 48, 37, 54};
    DevValue *args[2] = {val(IR_F32, 2, d22, gv), val(IR_F32, 2, d23, xv)}, *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, 2, args, true, 0, &out, &d), IR_OK);
    assert_f32(out, want, 6);
    dev_value_unref(out);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* A transpose read only by dots runs inside each of them (JAX's
 * attention: q and k, [H,D,B,S] from their projections, transposed to
 * [B,H,S,D] for the scores' batched dot, v for the second dot); one with
 * another reader does not, one read by two dots is a node of both, and a
 * dot-transpose pair's dot takes one in too. */
static void transposes_into_dots(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule a\n"
                           "ENTRY main {\n"
                           "  q = f32[3,4,2,5] parameter(0)\n"
                           "  k = f32[3,4,2,5] parameter(1)\n"
                           "  v = f32[3,4,2,5] parameter(2)\n"
                           "  tq = f32[2,3,5,4] transpose(q), dimensions={2,0,3,1}\n"
                           "  tk = f32[2,3,5,4] transpose(k), dimensions={2,0,3,1}\n"
                           "  s = f32[2,3,5,5] dot(tq, tk), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
                           "  tv = f32[2,3,5,4] transpose(v), dimensions={2,0,3,1}\n"
                           "  ROOT o = f32[2,3,5,4] dot(s, tv), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
                           "}\n");
    DevFusion f = find(m, 0);
    assert_int_equal(f.ngroups, 2);
    const DevFusionGroup *g = &f.groups[0];
    assert_int_equal(g->root, instr_named(m, "s"));
    assert_false(g->dot_transposed);
    assert_false(dev_fusion_chunked(ir_entry(m), g));
    assert_int_equal(g->nnodes, 3);
    assert_int_equal(g->nodes[0], instr_named(m, "tq"));
    assert_int_equal(g->nodes[1], instr_named(m, "tk"));
    assert_int_equal(g->dot, 2);
    assert_int_equal(g->nleaves, 2);
    assert_int_equal(g->leaves[0], instr_named(m, "q"));
    assert_int_equal(g->leaves[1], instr_named(m, "k"));
    g = &f.groups[1];
    assert_int_equal(g->root, instr_named(m, "o"));
    assert_int_equal(g->nnodes, 2);
    assert_int_equal(g->nodes[0], instr_named(m, "tv"));
    assert_int_equal(g->nleaves, 2);
    assert_int_equal(g->leaves[0], instr_named(m, "v"));
    assert_int_equal(g->leaves[1], instr_named(m, "s"));
    ir_fusion_free(&f);
    ir_module_free(m);
    /* tb also feeds a negate: stays; ta feeds two dots: a node of both. */
    m = parse_ok("HloModule b\n"
                 "ENTRY main {\n"
                 "  a = f32[4,3] parameter(0)\n"
                 "  b = f32[5,4] parameter(1)\n"
                 "  ta = f32[3,4] transpose(a), dimensions={1,0}\n"
                 "  tb = f32[4,5] transpose(b), dimensions={1,0}\n"
                 "  d1 = f32[3,5] dot(ta, tb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  d2 = f32[3,3] dot(ta, ta), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
                 "  n = f32[4,5] negate(tb)\n"
                 "  ROOT r = (f32[3,5], f32[3,3], f32[4,5]) tuple(d1, d2, n)\n"
                 "}\n");
    f = find(m, 0);
    assert_int_equal(f.ngroups, 2);
    for (int32_t i = 0; i < 2; i++) {
        g = &f.groups[i];
        assert_int_equal(g->root, instr_named(m, i == 0 ? "d1" : "d2"));
        assert_int_equal(g->nnodes, 2);
        assert_int_equal(g->nodes[0], instr_named(m, "ta"));
        assert_int_equal(g->leaves[0], instr_named(m, "a"));
        assert_int_equal(g->nleaves, i == 0 ? 2 : 1);
    }
    assert_int_equal(f.groups[0].leaves[1], instr_named(m, "tb"));
    assert_int_equal(f.group_of[instr_named(m, "tb")], -1);
    ir_fusion_free(&f);
    ir_module_free(m);
    /* A transposed lhs into a dot whose result is transposed: one group. */
    m = parse_ok("HloModule c\n"
                 "ENTRY main {\n"
                 "  a = f32[4,3] parameter(0)\n"
                 "  b = f32[4,5] parameter(1)\n"
                 "  ta = f32[3,4] transpose(a), dimensions={1,0}\n"
                 "  d = f32[3,5] dot(ta, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  ROOT t = f32[5,3] transpose(d), dimensions={1,0}\n"
                 "}\n");
    f = find(m, 0);
    assert_int_equal(f.ngroups, 1);
    g = &f.groups[0];
    assert_true(g->dot_transposed);
    assert_int_equal(g->nnodes, 3);
    assert_int_equal(g->nodes[0], instr_named(m, "ta"));
    assert_int_equal(g->nodes[g->dot], instr_named(m, "d"));
    assert_int_equal(g->root, instr_named(m, "t"));
    ir_fusion_free(&f);
    ir_module_free(m);
}

/* Dots reading transposes in place against the transposes made first, bit
 * for bit (small integers: every sum exact): the attention's heads (f32,
 * in place through strides: a batch dim between the rows), the same in
 * f64, f16 and s32 (packed, converted; the loops), a transpose whose
 * contracted dims are not one run (packed), one read by two dots, one
 * into a transposed result; and one by hand. */
static void transposed_operands_equal_unfused(void **state)
{
    (void)state;
    static const char *const hlo[] = {
        "HloModule a\nENTRY main {\n  q = f32[3,8,2,5] parameter(0)\n  k = f32[3,8,2,5] parameter(1)\n"
        "  tq = f32[2,3,5,8] transpose(q), dimensions={2,0,3,1}\n"
        "  tk = f32[2,3,5,8] transpose(k), dimensions={2,0,3,1}\n"
        "  s = f32[2,3,5,5] dot(tq, tk), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
        "  tv = f32[2,3,5,8] transpose(k), dimensions={2,0,3,1}\n"
        "  ROOT o = f32[2,3,5,8] dot(s, tv), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n",
        "HloModule b\nENTRY main {\n  q = f64[3,8,2,5] parameter(0)\n  k = f64[3,8,2,5] parameter(1)\n"
        "  tq = f64[2,3,5,8] transpose(q), dimensions={2,0,3,1}\n"
        "  ROOT s = f64[2,3,5,5] dot(tq, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={2,0}, rhs_contracting_dims={1}\n}\n",
        "HloModule c\nENTRY main {\n  q = f16[3,8,2,5] parameter(0)\n  k = f16[3,8,2,5] parameter(1)\n"
        "  tq = f16[2,3,5,8] transpose(q), dimensions={2,0,3,1}\n"
        "  tk = f16[2,3,5,8] transpose(k), dimensions={2,0,3,1}\n"
        "  ROOT s = f16[2,3,5,5] dot(tq, tk), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n}\n",
        "HloModule d\nENTRY main {\n  q = s32[3,8,2,5] parameter(0)\n  k = s32[3,8,2,5] parameter(1)\n"
        "  tq = s32[2,3,5,8] transpose(q), dimensions={2,0,3,1}\n"
        "  tk = s32[2,3,5,8] transpose(k), dimensions={2,0,3,1}\n"
        "  ROOT s = s32[2,3,5,5] dot(tq, tk), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n}\n",
        "HloModule e\nENTRY main {\n  a = f32[6,7,4] parameter(0)\n  b = f32[4,6,7] parameter(1)\n"
        "  ta = f32[4,7,6] transpose(a), dimensions={2,1,0}\n"
        "  ROOT d = f32[4,4] dot(ta, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={2,1}\n}\n",
        "HloModule f\nENTRY main {\n  a = f32[9,6] parameter(0)\n  b = f32[6,9] parameter(1)\n"
        "  ta = f32[6,9] transpose(a), dimensions={1,0}\n"
        "  d1 = f32[6,6] dot(ta, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
        "  d2 = f32[9,9] dot(ta, ta), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  ROOT r = (f32[6,6], f32[9,9]) tuple(d1, d2)\n}\n",
        "HloModule g\nENTRY main {\n  a = f32[7,3,4] parameter(0)\n  b = f32[3,4,5] parameter(1)\n"
        "  ta = f32[3,7,4] transpose(a), dimensions={1,0,2}\n"
        "  d = f32[3,7,5] dot(ta, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n"
        "  ROOT t = f32[3,5,7] transpose(d), dimensions={0,2,1}\n}\n",
    };
    for (size_t i = 0; i < sizeof hlo / sizeof *hlo; i++) {
        IrModule *m = parse_ok(hlo[i]);
        DevFusion f = find(m, 0);
        assert_true(f.ngroups >= 1);
        for (int32_t j = 0; j < f.ngroups; j++)
            assert_true(f.groups[j].dot >= 0);
        ir_fusion_free(&f);
        const IrComputation *c = ir_entry(m);
        DevValue *args[2];
        uint32_t s = 4242u + (uint32_t)i;
        for (int a = 0; a < 2; a++) {
            const IrShape *ps = &c->instr[c->param[a]].shape;
            args[a] = val(ps->type, ps->rank, ps->dims, NULL);
            int64_t n = ir_shape_elements(ps);
            for (int64_t e = 0; e < n; e++) {
                s = s * 1664525u + 1013904223u;
                dev_store_f64(ps->type, args[a]->data, e, (int)(s >> 29) - 4); /* -4..3 */
            }
        }
        assert_fused_is_unfused(m, 2, args, false);
        ir_module_free(m);
    }
    /* By hand: a = [[1,2,3],[4,5,6]] (f32[2,3]), ta = a^T (f32[3,2]);
     * dot(ta, b) with b = [[1,0],[0,1]] contracting ta's dim 1: ta. */
    IrModule *m = parse_ok("HloModule h\nENTRY main {\n  a = f32[2,3] parameter(0)\n"
                           "  b = f32[2,2] parameter(1)\n"
                           "  ta = f32[3,2] transpose(a), dimensions={1,0}\n"
                           "  ROOT d = f32[3,2] dot(ta, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
    int64_t d23[] = {2, 3}, d22[] = {2, 2};
    float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {1, 0, 0, 1}, want[] = {1, 4, 2, 5, 3, 6};
    DevValue *args[2] = {val(IR_F32, 2, d23, av), val(IR_F32, 2, d22, bv)}, *out = NULL;
    IrDiag d = {0};
    for (int blas = 0; blas < 2; blas++) {
        DevExecOptions opt = {.no_blas = !blas};
        assert_int_equal(dev_execute(m, m->entry, 2, args, &opt, &out, &d), IR_OK);
        assert_f32(out, want, 6);
        dev_value_unref(out);
    }
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* A dying, solely owned operand lends its buffer to the result. */
static void in_place(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule ip\n"
                           "ENTRY main {\n"
                           "  x = s32[5] parameter(0)\n"
                           "  r = s32[5] reverse(x), dimensions={0}\n"
                           "  a = s32[5] add(r, x)\n"
                           "  ROOT m = f32[5] convert(a)\n"
                           "}\n");
    const IrComputation *c = ir_entry(m);
    DevFusion f = find(m, 2);
    assert_int_equal(f.ngroups, 1);
    const DevFusionGroup *g = &f.groups[0];
    int64_t d5[] = {5};
    int32_t xs[] = {1, 2, 3, 4, 5}, rs[] = {5, 4, 3, 2, 1};
    DevValue *vals[8] = {0};
    int32_t rem[8] = {0};
    int32_t xi = instr_named(m, "x"), ri = instr_named(m, "r");
    vals[xi] = val(IR_S32, 1, d5, xs);
    vals[ri] = val(IR_S32, 1, d5, rs);
    rem[xi] = 1;
    rem[ri] = 1;
    uint8_t *lent = vals[ri]->data;
    DevExecOptions opt = {.fusion_block = 2};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_fusion_run(m, c, g, &opt, &d, vals, rem, &out), IR_OK);
    float want[] = {6, 6, 6, 6, 6};
    assert_f32(out, want, 5);
    assert_ptr_equal(out->data, lent);  /* r's buffer */
    assert_null(vals[ri]);
    assert_int_equal(rem[ri], 0);
    assert_int_equal(out->shape.type, IR_F32);
    dev_value_unref(out);
    /* x is still needed elsewhere (rem 2): it keeps its buffer; r is
     * shared (refs 2): a fresh buffer. */
    vals[ri] = val(IR_S32, 1, d5, rs);
    rem[ri] = 1;
    rem[xi] = 2;
    DevValue *extra = dev_value_ref(vals[ri]);
    assert_int_equal(dev_fusion_run(m, c, g, &opt, &d, vals, rem, &out), IR_OK);
    assert_f32(out, want, 5);
    assert_ptr_not_equal(out->data, vals[ri]->data);
    assert_ptr_not_equal(out->data, vals[xi]->data);
    assert_int_equal(((int32_t *)vals[ri]->data)[0], 5);
    dev_value_unref(out);
    dev_value_unref(extra);
    dev_value_unref(vals[ri]);
    dev_value_unref(vals[xi]);
    ir_fusion_free(&f);

    /* Through the executor: the reverse dies in the group. */
    DevValue *arg = val(IR_S32, 1, d5, xs);
    assert_int_equal(run(m, 1, &arg, true, 2, &out, &d), IR_OK);
    assert_f32(out, want, 5);
    dev_value_unref(out);
    dev_value_unref(arg);
    ir_module_free(m);
}

/* A kernel error inside a group names the same instruction with the same
 * message as the unfused run. (Parsed without the verifier: it would
 * reject the module first.) */
static void errors_as_unfused(void **state)
{
    (void)state;
    const char *txt = "HloModule e\n"
                      "ENTRY main {\n"
                      "  x = f32[3] parameter(0)\n"
                      "  y = s32[3] parameter(1)\n"
                      "  n = f32[3] negate(x)\n"
                      "  bad = f32[3] add(n, y)\n"
                      "  ROOT a = f32[3] abs(bad)\n"
                      "}\n";
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("e.hlo", txt, strlen(txt), &o, &m, &d), IR_OK);
    int64_t d3[] = {3};
    DevValue *args[2] = {val(IR_F32, 1, d3, NULL), val(IR_S32, 1, d3, NULL)};
    char *msg[2];
    for (int fuse = 0; fuse < 2; fuse++) {
        DevValue *out = NULL;
        IrDiag e = {0};
        assert_int_equal(run(m, 2, args, fuse, 2, &out, &e), IR_EINPUT);
        assert_null(out);
        assert_non_null(strstr(e.msg, "bad"));
        msg[fuse] = ts_strdup(e.msg);
        assert_int_equal(e.pos.line, 6);
        ir_diag_clear(&e);
    }
    assert_string_equal(msg[0], msg[1]);
    ts_free(msg[0]);
    ts_free(msg[1]);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* Adam's update (multi-output): m' and v' are returned and read by the
 * parameter's update, so their groups run inside the update's, one group
 * with two extra outputs; r reads m' before the update's root, which
 * keeps m2's group apart. */
static const char *adam_hlo =
    "HloModule adam\n"
    "ENTRY main {\n"
    "  g = f32[3,300] parameter(0)\n"
    "  m = f32[3,300] parameter(1)\n"
    "  v = f32[3,300] parameter(2)\n"
    "  w = f32[3,300] parameter(3)\n"
    "  c = f32[] constant(0.9)\n"
    "  b = f32[3,300] broadcast(c), dimensions={}\n"
    "  m1 = f32[3,300] multiply(m, b)\n"
    "  mn = f32[3,300] add(m1, g)\n"
    "  g2 = f32[3,300] multiply(g, g)\n"
    "  vn = f32[3,300] add(v, g2)\n"
    "  sq = f32[3,300] sqrt(vn)\n"
    "  q = f32[3,300] divide(mn, sq)\n"
    "  wn = f32[3,300] subtract(w, q)\n"
    "  m2 = f32[3,300] multiply(w, b)\n"
    "  n2 = f32[3,300] add(m2, g)\n"
    "  r = f32[3,300] reverse(n2), dimensions={0}\n"
    "  u = f32[3,300] multiply(r, n2)\n"
    "  ROOT t = (f32[3,300], f32[3,300], f32[3,300], f32[3,300]) tuple(wn, mn, vn, u)\n"
    "}\n";

static void adam_args(DevValue **args)
{
    int64_t d2[] = {3, 300};
    uint32_t s = 7;
    for (int a = 0; a < 4; a++) {
        args[a] = val(IR_F32, 2, d2, NULL);
        for (int64_t i = 0; i < 900; i++) {
            s = s * 1664525u + 1013904223u;
            float x = (float)((int32_t)s >> 8) / (float)(1 << 20);
            ((float *)args[a]->data)[i] = i % 17 == 0 ? NAN : x; /* v < 0 too: sqrt's NaN */
        }
    }
}

static void multi_output(void **state)
{
    (void)state;
    IrModule *m = parse_ok(adam_hlo);
    DevFusion f = find(m, 4); /* a block: arrays of any size fuse */
    int32_t wn = instr_named(m, "wn"), g = f.group_of[wn];
    assert_true(g >= 0);
    const DevFusionGroup *grp = &f.groups[g];
    assert_int_equal(grp->root, wn);
    assert_int_equal(grp->nnodes, 8); /* b m1 mn g2 vn sq q wn */
    assert_int_equal(grp->nextra, 2);
    assert_int_equal(grp->extra[0], instr_named(m, "mn"));
    assert_int_equal(grp->extra[1], instr_named(m, "vn"));
    assert_int_equal(f.group_of[instr_named(m, "mn")], g);
    assert_int_equal(f.group_of[instr_named(m, "m1")], g);
    assert_int_equal(ir_fusion_leaf_index(grp, instr_named(m, "mn")), -1);
    assert_true(ir_fusion_leaf_index(grp, instr_named(m, "g")) >= 0);
    assert_int_equal(grp->nleaves, 5); /* g m v w c */
    assert_true(dev_fusion_chunked(ir_entry(m), grp));
    /* n2 is read by r, outside and before u: it stays its own root. */
    int32_t n2 = instr_named(m, "n2");
    assert_true(f.group_of[n2] >= 0);
    assert_int_equal(f.groups[f.group_of[n2]].root, n2);
    assert_int_equal(f.groups[f.group_of[n2]].nextra, 0);
    ir_fusion_free(&f);

    /* Every output bit for bit the unfused run's: the register path
     * (full chunks), the interpreter (the last, partial one) and blocks. */
    DevValue *args[4];
    adam_args(args);
    DevValue *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, 4, args, false, 0, &plain, &d), IR_OK);
    for (int32_t block = -1; block <= 7; block += 4) {
        DevValue *fused = NULL;
        assert_int_equal(block < 0 ? run_chunked(m, 4, args, &fused, &d) : run(m, 4, args, true, block, &fused, &d),
                         IR_OK);
        for (int e = 0; e < 4; e++)
            assert_memory_equal(fused->elems[e]->data, plain->elems[e]->data, 900 * 4);
        dev_value_unref(fused);
    }
    dev_value_unref(plain);
    for (int a = 0; a < 4; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* The extra outputs, as the root, take the buffers of leaves that die in
 * the group (m' m's, v' v's: Adam's state donated), each a different one;
 * the values are the unfused run's. */
static void multi_output_in_place(void **state)
{
    (void)state;
    IrModule *m = parse_ok(adam_hlo);
    const IrComputation *c = ir_entry(m);
    DevFusion f = find(m, 4);
    const DevFusionGroup *g = &f.groups[f.group_of[instr_named(m, "wn")]];
    DevValue *args[4], *plain = NULL;
    adam_args(args);
    IrDiag d = {0};
    assert_int_equal(run(m, 4, args, false, 0, &plain, &d), IR_OK);
    DevValue *vals[32] = {0};
    int32_t rem[32] = {0};
    assert_true(c->ninstr <= 32);
    const char *leaf[] = {"g", "m", "v", "w"};
    uint8_t *data[4];
    for (int a = 0; a < 4; a++) {
        int32_t i = instr_named(m, leaf[a]);
        vals[i] = dev_value_ref(args[a]);
        data[a] = args[a]->data;
        rem[i] = ir_fusion_leaf_index(g, i) >= 0 ? g->leaf_refs[ir_fusion_leaf_index(g, i)] : 1;
    }
    rem[instr_named(m, "g")] += 1; /* g is read by n2's group later: not lent */
    int32_t ci = instr_named(m, "c");
    vals[ci] = dev_value_new_uninit(&c->instr[ci].shape);
    *(float *)vals[ci]->data = 0.9f;
    rem[ci] = 2;
    for (int a = 1; a < 4; a++) /* m, v, w: the group's references are the only ones */
        dev_value_unref(args[a]);
    DevExecOptions opt = {.fuse_small = true};
    DevValue *out = NULL;
    assert_int_equal(dev_fusion_run(m, c, g, &opt, &d, vals, rem, &out), IR_OK);
    DevValue *mn = vals[instr_named(m, "mn")], *vn = vals[instr_named(m, "vn")];
    assert_non_null(mn);
    assert_non_null(vn);
    /* Three outputs in the three dying leaves' buffers, each its own. */
    uint8_t *got[3] = {out->data, mn->data, vn->data};
    for (int k = 0; k < 3; k++) {
        int hits = 0;
        for (int a = 1; a < 4; a++)
            hits += got[k] == data[a];
        assert_int_equal(hits, 1);
        for (int j = 0; j < k; j++)
            assert_ptr_not_equal(got[j], got[k]);
    }
    assert_null(vals[instr_named(m, "m")]);
    assert_int_equal(rem[instr_named(m, "v")], 0);
    assert_non_null(vals[instr_named(m, "g")]);
    assert_memory_equal(out->data, plain->elems[0]->data, 900 * 4);
    assert_memory_equal(mn->data, plain->elems[1]->data, 900 * 4);
    assert_memory_equal(vn->data, plain->elems[2]->data, 900 * 4);
    dev_value_unref(out);
    dev_value_unref(mn);
    dev_value_unref(vn);
    dev_value_unref(vals[instr_named(m, "g")]);
    dev_value_unref(vals[ci]);
    dev_value_unref(args[0]);
    dev_value_unref(plain);
    ir_fusion_free(&f);
    ir_module_free(m);
}

/* Larger arrays with the default block: every op family the range
 * kernels have, fused and unfused, bit for bit (uneven size, NaNs and
 * zeros included). */
static void random_equals_unfused(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule r\n"
                           "ENTRY main {\n"
                           "  x = f32[3,3337] parameter(0)\n"
                           "  y = f32[3,3337] parameter(1)\n"
                           "  v = f32[3337] parameter(2)\n"
                           "  bv = f32[3,3337] broadcast(v), dimensions={1}\n"
                           "  a = f32[3,3337] add(x, bv)\n"
                           "  t = f32[3,3337] tanh(a)\n"
                           "  d = f32[3,3337] divide(t, y)\n"
                           "  e = f32[3,3337] exponential(d)\n"
                           "  mx = f32[3,3337] maximum(e, x)\n"
                           "  c = pred[3,3337] compare(mx, y), direction=LT\n"
                           "  s = f32[3,3337] select(c, mx, y)\n"
                           "  h = f16[3,3337] convert(s)\n"
                           "  hs = f16[3,3337] sqrt(h)\n"
                           "  ROOT o = f64[3,3337] convert(hs)\n"
                           "}\n");
    /* mx is read by c and s, both members: it is a member too. */
    DevFusion f = find(m, 0);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.groups[0].nnodes, 11);
    ir_fusion_free(&f);
    int64_t d2[] = {3, 3337}, d1[] = {3337};
    DevValue *args[3] = {val(IR_F32, 2, d2, NULL), val(IR_F32, 2, d2, NULL), val(IR_F32, 1, d1, NULL)};
    uint32_t s = 12345;
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < args[a]->nbytes / 4; i++) {
            s = s * 1664525u + 1013904223u;
            float v = (float)((int32_t)s >> 8) / (float)(1 << 20);
            if (i % 97 == 0)
                v = NAN;
            else if (i % 89 == 0)
                v = 0;
            ((float *)args[a]->data)[i] = v;
        }
    DevValue *fused = NULL, *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, 3, args, true, 0, &fused, &d), IR_OK);
    assert_int_equal(run(m, 3, args, false, 0, &plain, &d), IR_OK);
    assert_int_equal(fused->nbytes, 3 * 3337 * 8);
    assert_memory_equal(fused->data, plain->data, (size_t)plain->nbytes);
    dev_value_unref(fused);
    dev_value_unref(plain);
    for (int a = 0; a < 3; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

/* The chunk interpreter against the unfused kernels on an f32 group
 * with every kind of node it runs: unary and binary ops of float_ops.h,
 * a scalar broadcast (filled once), broadcasts along either dimension
 * (cut per chunk, rows of 400 are not a multiple of the 256-element
 * chunk), NaNs, infinities and zeros; 3x400 is 4 chunks and a partial
 * one. */
static void chunks_equal_unfused(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule ch\n"
                           "ENTRY main {\n"
                           "  x = f32[3,400] parameter(0)\n"
                           "  y = f32[3,400] parameter(1)\n"
                           "  v = f32[400] parameter(2)\n"
                           "  w = f32[3] parameter(3)\n"
                           "  rx = f32[3,400] reverse(x), dimensions={1}\n"
                           "  bv = f32[3,400] broadcast(v), dimensions={1}\n"
                           "  bw = f32[3,400] broadcast(w), dimensions={0}\n"
                           "  k = f32[] constant(0.25)\n"
                           "  bk = f32[3,400] broadcast(k), dimensions={}\n"
                           "  a = f32[3,400] add(rx, bv)\n"
                           "  t = f32[3,400] tanh(a)\n"
                           "  d = f32[3,400] divide(t, y)\n"
                           "  e = f32[3,400] exponential(d)\n"
                           "  mx = f32[3,400] maximum(e, bw)\n"
                           "  mn = f32[3,400] minimum(mx, y)\n"
                           "  p = f32[3,400] power(mn, bk)\n"
                           "  s = f32[3,400] sign(p)\n"
                           "  l = f32[3,400] logistic(mn)\n"
                           "  ROOT o = f32[3,400] atan2(l, s)\n"
                           "}\n");
    assert_one_chunked_group(m, 13);
    int64_t d2[] = {3, 400}, dv[] = {400}, dw[] = {3};
    DevValue *args[4] = {val(IR_F32, 2, d2, NULL), val(IR_F32, 2, d2, NULL), val(IR_F32, 1, dv, NULL),
                         val(IR_F32, 1, dw, NULL)};
    uint32_t s = 777;
    for (int a = 0; a < 4; a++)
        for (int64_t i = 0; i < args[a]->nbytes / 4; i++) {
            s = s * 1664525u + 1013904223u;
            float v = (float)((int32_t)s >> 8) / (float)(1 << 19);
            if (i % 61 == 0)
                v = NAN;
            else if (i % 53 == 0)
                v = 0;
            else if (i % 47 == 0)
                v = -INFINITY;
            ((float *)args[a]->data)[i] = v;
        }
    /* (The reverse dies in the group: its buffer became the result, the
     * chunks written through a buffer of their own; chain_values covers
     * the root writing straight into a fresh result.) */
    assert_fused_is_unfused(m, 4, args, true);
    ir_module_free(m);
}

/* The f32 arguments args[0..n): pseudo-random values over `scale` from
 * `seed`, every 13th a NaN, an infinity, a signed zero or 1; with `ties`,
 * every 7th (offset by the argument) a small integer instead, so that
 * maximum and minimum meet equal operands. */
static void fill_specials(DevValue **args, int n, uint32_t seed, int32_t scale, bool ties)
{
    static const float special[] = {NAN, 1.0f, INFINITY, -INFINITY, 0.0f, -0.0f};
    uint32_t s = seed;
    for (int a = 0; a < n; a++)
        for (int64_t i = 0; i < args[a]->nbytes / 4; i++) {
            s = s * 1664525u + 1013904223u;
            float v = (float)((int32_t)s >> 8) / (float)scale;
            if (ties && i % 7 == a)
                v = (float)(i % 3);
            else if (i % 13 == 0)
                v = special[(i / 13 + a) % 6];
            ((float *)args[a]->data)[i] = v;
        }
}

/* The register path (fusion.c, AVX-512 where the CPU has it) against
 * the unfused kernels: every op it runs (add, subtract, multiply, divide,
 * maximum, minimum, negate, abs, sqrt: of negatives too), every operand kind (the value just
 * computed on either side or both, a leaf, a broadcast, an earlier node
 * read again, which must have been stored), NaNs, infinities and signed
 * zeros; 3x400 is 4 full chunks and a partial one (the interpreter's). */
static void registers_equal_unfused(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule rg\n"
                           "ENTRY main {\n"
                           "  x = f32[3,400] parameter(0)\n"
                           "  y = f32[3,400] parameter(1)\n"
                           "  v = f32[400] parameter(2)\n"
                           "  bv = f32[3,400] broadcast(v), dimensions={1}\n"
                           "  k = f32[] constant(0.5)\n"
                           "  bk = f32[3,400] broadcast(k), dimensions={}\n"
                           "  a = f32[3,400] add(x, bv)\n"
                           "  sq = f32[3,400] multiply(a, a)\n"
                           "  s = f32[3,400] subtract(y, sq)\n"
                           "  d = f32[3,400] divide(s, bk)\n"
                           "  mx = f32[3,400] maximum(d, x)\n"
                           "  mn = f32[3,400] minimum(y, mx)\n"
                           "  n = f32[3,400] negate(a)\n"
                           "  ab = f32[3,400] abs(n)\n"
                           "  p = f32[3,400] add(mn, ab)\n"
                           "  sr = f32[3,400] sqrt(s)\n"
                           "  q = f32[3,400] maximum(p, sr)\n"
                           "  ny = f32[3,400] negate(y)\n"
                           "  w = f32[3,400] minimum(q, ny)\n"
                           "  ROOT r = f32[3,400] minimum(w, n)\n"
                           "}\n");
    assert_one_chunked_group(m, 16);
    int64_t d2[] = {3, 400}, dv[] = {400};
    DevValue *args[3] = {val(IR_F32, 2, d2, NULL), val(IR_F32, 2, d2, NULL), val(IR_F32, 1, dv, NULL)};
    fill_specials(args, 3, 99, 1 << 19, true);
    assert_fused_is_unfused(m, 3, args, true);
    ir_module_free(m);
}

/* The math functions in the register path (tanh, exp, logistic: run on
 * their node's chunk between register nodes) against the unfused
 * kernels: GELU's tanh form on the value just computed, a function of a
 * leaf as the first node, one whose value is read again later (stored),
 * one as the root; NaNs, infinities and signed zeros; 3x400 is 4 full
 * chunks and a partial one. */
static void register_math_equal_unfused(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule rgm\n"
                           "ENTRY main {\n"
                           "  x = f32[3,400] parameter(0)\n"
                           "  y = f32[3,400] parameter(1)\n"
                           "  e = f32[3,400] exponential(y)\n"
                           "  c = f32[] constant(0.044715)\n"
                           "  bc = f32[3,400] broadcast(c), dimensions={}\n"
                           "  h = f32[] constant(0.5)\n"
                           "  bh = f32[3,400] broadcast(h), dimensions={}\n"
                           "  x2 = f32[3,400] multiply(x, x)\n"
                           "  x3 = f32[3,400] multiply(x2, x)\n"
                           "  cx3 = f32[3,400] multiply(x3, bc)\n"
                           "  in = f32[3,400] add(x, cx3)\n"
                           "  t = f32[3,400] tanh(in)\n"
                           "  t1 = f32[3,400] add(t, e)\n"
                           "  g = f32[3,400] multiply(t1, bh)\n"
                           "  lg = f32[3,400] logistic(g)\n"
                           "  u = f32[3,400] multiply(lg, t)\n"
                           "  ROOT r = f32[3,400] tanh(u)\n"
                           "}\n");
    assert_one_chunked_group(m, 13);
    int64_t d2[] = {3, 400};
    DevValue *args[2] = {val(IR_F32, 2, d2, NULL), val(IR_F32, 2, d2, NULL)};
    fill_specials(args, 2, 7, 1 << 20, false);
    assert_fused_is_unfused(m, 2, args, true);
    ir_module_free(m);
}

/* A run's tail of half a chunk (128 elements) in the register path, and
 * the register path's root written straight into a result that is a
 * leaf's buffer (fusion.c, chunks_range), against the unfused kernels bit
 * for bit, in AVX-512's form and AVX2's: 128 (the half alone), 384 (the
 * GEMM's strips of 384 columns: 256 + 128), 640 and, for the interpreter,
 * 200 and 144; each with x a parameter (the root into a fresh result) and
 * with x reversed first (the reverse dies in the group and lends its
 * buffer, which the chunks read and overwrite). A math function (tanh)
 * on the value just computed, a leaf read again after it. */
static void half_chunks_equal_unfused(void **state)
{
    (void)state;
    static const int sizes[] = {128, 384, 640, 200, 144};
    static const char *const lhs[] = {"x", "rx"};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
        for (int v = 0; v < 2; v++) {
            int n = sizes[z];
            char hlo[1024];
            snprintf(hlo, sizeof hlo,
                     "HloModule hc\n"
                     "ENTRY main {\n"
                     "  x = f32[%d] parameter(0)\n"
                     "  y = f32[%d] parameter(1)\n"
                     "  rx = f32[%d] reverse(x), dimensions={0}\n"
                     "  a = f32[%d] add(%s, y)\n"
                     "  sq = f32[%d] multiply(a, a)\n"
                     "  t = f32[%d] tanh(sq)\n"
                     "  s = f32[%d] subtract(t, y)\n"
                     "  mx = f32[%d] maximum(s, a)\n"
                     "  ROOT r = f32[%d] negate(mx)\n"
                     "}\n",
                     n, n, n, n, lhs[v], n, n, n, n, n);
            IrModule *m = parse_ok(hlo);
            int64_t dims[] = {n};
            DevValue *args[2] = {val(IR_F32, 1, dims, NULL), val(IR_F32, 1, dims, NULL)};
            fill_specials(args, 2, 31 + (uint32_t)n, 1 << 20, true);
            assert_fused_is_unfused(m, 2, args, true);
            ir_module_free(m);
        }
}

/* A result of at least 32 MiB goes out with non-temporal stores
 * (fusion.c, STREAM_CAP): the benchmark's chain over 8M + 37 elements
 * (32 MiB and a partial chunk), fused against unfused, bit for bit, with
 * NaNs, infinities and signed zeros for maximum, negate and abs. Twice:
 * with x a parameter the root streams straight into a fresh result;
 * with x reversed first, the reverse dies in the group and lends its
 * buffer, which the chunks then stream over. */
#define STREAMED 8388645 /* 8M + 37 */

static void streamed_equals_unfused(void **state)
{
    (void)state;
    static const char *const lhs[] = {"x", "rx"};
    for (int v = 0; v < 2; v++) {
        char hlo[1024];
        snprintf(hlo, sizeof hlo,
                 "HloModule st\n"
                 "ENTRY main {\n"
                 "  x = f32[%d] parameter(0)\n"
                 "  y = f32[%d] parameter(1)\n"
                 "  rx = f32[%d] reverse(x), dimensions={0}\n"
                 "  t1 = f32[%d] add(%s, y)\n"
                 "  t2 = f32[%d] multiply(t1, y)\n"
                 "  t3 = f32[%d] subtract(t2, y)\n"
                 "  t4 = f32[%d] maximum(t3, y)\n"
                 "  t5 = f32[%d] multiply(t4, t4)\n"
                 "  t6 = f32[%d] add(t5, y)\n"
                 "  t7 = f32[%d] negate(t6)\n"
                 "  ROOT t8 = f32[%d] abs(t7)\n"
                 "}\n",
                 STREAMED, STREAMED, STREAMED, STREAMED, lhs[v], STREAMED, STREAMED, STREAMED, STREAMED,
                 STREAMED, STREAMED, STREAMED);
        IrModule *m = parse_ok(hlo);
        int64_t dims[] = {STREAMED};
        DevValue *args[2] = {val(IR_F32, 1, dims, NULL), val(IR_F32, 1, dims, NULL)};
        uint32_t s = 4242;
        for (int a = 0; a < 2; a++)
            for (int64_t i = 0; i < STREAMED; i++) {
                s = s * 1664525u + 1013904223u;
                float x = (float)((int32_t)s >> 8) / (float)(1 << 21);
                if (i % 101 == 0)
                    x = NAN;
                else if (i % 67 == 0)
                    x = i % 2 ? INFINITY : -INFINITY;
                else if (i % 59 == 0)
                    x = i % 2 ? 0.0f : -0.0f;
                ((float *)args[a]->data)[i] = x;
            }
        assert_fused_is_unfused(m, 2, args, false);
        ir_module_free(m);
    }
}

/* Broadcasts that repeat a pattern (fusion.c's periods: read in place
 * from a buffer of the pattern repeated, not cut per chunk or block),
 * against the unfused kernels bit for bit: a pattern of 24 (no divisor of
 * a 256-element chunk) over the whole array, a new one every 40*24 = 960
 * elements for each of the 5*7 (i, j) (runs across chunk and block
 * edges), a fill of p = 1 a run, a pattern of 960 across a size-1 dim, a
 * pred pattern (the block path's other types); in the chunk interpreter
 * (no select), in blocks of 300 and of the default size (a select), and
 * as a column group's tree. (No zeros in x: 0/0's NaN is negative, and
 * the column sums add NaNs of either sign in another order than the
 * unfused reduce, which changes the sign of the sum's NaN.) */
static const char *periods_hlo =
    "HloModule per\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[5,7,40,1,24] parameter(0)\n"
    "  v = f32[24] parameter(1)\n"
    "  w = f32[5,7,24] parameter(2)\n"
    "  u = f32[5] parameter(3)\n"
    "  q = f32[40,1,24] parameter(4)\n"
    "  k = pred[24] parameter(5)\n"
    "  bv = f32[5,7,40,1,24] broadcast(v), dimensions={4}\n"
    "  bw = f32[5,7,40,1,24] broadcast(w), dimensions={0,1,4}\n"
    "  bu = f32[5,7,40,1,24] broadcast(u), dimensions={0}\n"
    "  bq = f32[5,7,40,1,24] broadcast(q), dimensions={2,3,4}\n"
    "  a = f32[5,7,40,1,24] add(x, bv)\n"
    "  b = f32[5,7,40,1,24] multiply(a, bw)\n"
    "  c = f32[5,7,40,1,24] subtract(b, bu)\n"
    "  d = f32[5,7,40,1,24] divide(c, bq)\n"
    "%s"
    "}\n";

static void periods_equal_unfused(void **state)
{
    (void)state;
    static const char *const roots[] = {
        "  ROOT e = f32[5,7,40,1,24] maximum(d, bw)\n",
        "  bk = pred[5,7,40,1,24] broadcast(k), dimensions={4}\n"
        "  ROOT e = f32[5,7,40,1,24] select(bk, d, bu)\n",
        "  z = f32[] constant(0)\n"
        "  ROOT e = f32[40,1,24] reduce(d, z), dimensions={0,1}, to_apply=add\n",
    };
    int64_t dx[] = {5, 7, 40, 1, 24}, dv[] = {24}, dw[] = {5, 7, 24}, du[] = {5}, dq[] = {40, 1, 24};
    for (int v = 0; v < 3; v++) {
        char hlo[2048];
        snprintf(hlo, sizeof hlo, periods_hlo, roots[v]);
        IrModule *m = parse_ok(hlo);
        DevFusion f = find(m, 0);
        assert_int_equal(f.ngroups, 1);
        ir_fusion_free(&f);
        for (int32_t block = -1; block <= 300; block += 301) { /* the default paths, then blocks of 300 */
            DevValue *args[6] = {val(IR_F32, 5, dx, NULL), val(IR_F32, 1, dv, NULL), val(IR_F32, 3, dw, NULL),
                                 val(IR_F32, 1, du, NULL), val(IR_F32, 3, dq, NULL), val(IR_PRED, 1, dv, NULL)};
            uint32_t s = 99;
            for (int a = 0; a < 5; a++)
                for (int64_t i = 0; i < args[a]->nbytes / 4; i++) {
                    s = s * 1664525u + 1013904223u;
                    float x = (float)((int32_t)s >> 8) / (float)(1 << 20);
                    ((float *)args[a]->data)[i] = i % 43 == 5 ? NAN : x;
                }
            for (int64_t i = 0; i < 24; i++)
                args[5]->data[i] = i % 3 != 1;
            DevValue *fused = NULL, *plain = NULL;
            IrDiag d = {0};
            assert_int_equal(block < 0 ? run_chunked(m, 6, args, &fused, &d) : run(m, 6, args, true, block, &fused, &d),
                             IR_OK);
            assert_int_equal(run(m, 6, args, false, 0, &plain, &d), IR_OK);
            assert_int_equal(fused->nbytes, plain->nbytes);
            assert_memory_equal(fused->data, plain->data, (size_t)plain->nbytes);
            dev_value_unref(fused);
            dev_value_unref(plain);
            for (int a = 0; a < 6; a++)
                dev_value_unref(args[a]);
        }
        ir_module_free(m);
    }
}

/* Empty arrays fuse to an empty result. */
/* ---- column groups: a reduce over major dims and its input's tree ---- */

/* Batch norm's sums over N, H, W of NHWC: the variance's input and the
 * backward's negated product. c has two readers in two groups: a leaf of
 * both. */
static const char *bn_hlo =
    "HloModule bn\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "ENTRY main {\n"
    "  x = f32[%s] parameter(0)\n"
    "  g = f32[%s] parameter(1)\n"
    "  m = f32[%s] parameter(2)\n"
    "  z = f32[] constant(0)\n"
    "  bm = f32[%s] broadcast(m), dimensions={%s}\n"
    "  c = f32[%s] subtract(x, bm)\n"
    "  sq = f32[%s] multiply(c, c)\n"
    "  v = f32[%s] reduce(sq, z), dimensions={%s}, to_apply=add\n"
    "  gc = f32[%s] multiply(g, c)\n"
    "  ng = f32[%s] negate(gc)\n"
    "  w = f32[%s] reduce(ng, z), dimensions={%s}, to_apply=add\n"
    "  ROOT t = (f32[%s], f32[%s]) tuple(v, w)\n"
    "}\n";

/* bn_hlo with input dims `in`, kept dims `out` (m's, where bm puts them:
 * `bdims`), reducing `red`. */
static IrModule *bn_module(const char *in, const char *out, const char *bdims, const char *red)
{
    char txt[2048];
    snprintf(txt, sizeof txt, bn_hlo, in, in, out, in, bdims, in, in, out, red, in, in, out, red, out, out);
    return parse_ok(txt);
}

static void column_groups(void **state)
{
    (void)state;
    IrModule *m = bn_module("4,3,5", "5", "2", "0,1");
    DevFusion f = find(m, 2);
    assert_int_equal(f.ngroups, 3); /* {bm, c}, {sq, v}, {gc, ng, w} */
    const DevFusionGroup *gv = &f.groups[f.group_of[instr_named(m, "v")]];
    const DevFusionGroup *gw = &f.groups[f.group_of[instr_named(m, "w")]];
    assert_true(gv->columns && gw->columns);
    assert_int_equal(gv->root, instr_named(m, "v"));
    assert_int_equal(gv->nnodes, 2);
    assert_int_equal(gw->nnodes, 3);
    assert_int_equal(gw->nouter, -1);
    assert_int_not_equal(ir_fusion_leaf_index(gw, instr_named(m, "c")), -1);
    assert_int_not_equal(ir_fusion_leaf_index(gw, instr_named(m, "z")), -1);
    assert_false(f.groups[f.group_of[instr_named(m, "c")]].columns);
    ir_fusion_free(&f);
    /* Default options: 60 elements are below IR_FUSION_MIN_ELEMENTS. */
    f = find(m, 0);
    assert_int_equal(f.ngroups, 0);
    ir_module_free(m);
    /* Kept dims on both sides of the reduced one: still columns. */
    m = bn_module("4,3,5", "4,5", "0,2", "1");
    f = find(m, 2);
    assert_true(f.groups[f.group_of[instr_named(m, "w")]].columns);
    ir_fusion_free(&f);
    ir_module_free(m);
    /* Over the minor dims it is a row group's reduce, not columns; the
     * reduced dim of size 1 dropped, [4,1,5] over {0,1} is columns. */
    m = bn_module("4,3,5", "4", "0", "1,2");
    f = find(m, 2);
    int32_t k = f.group_of[instr_named(m, "w")];
    assert_true(k < 0 || !f.groups[k].columns);
    ir_fusion_free(&f);
    ir_module_free(m);
    m = bn_module("4,1,5", "5", "2", "0,1");
    const IrComputation *c = ir_entry(m);
    assert_true(ir_fusion_column_reduce(m, c, &c->instr[instr_named(m, "w")]));
    ir_module_free(m);
    m = bn_module("1,4,5", "5", "2", "0,1"); /* only the 4 reduced: [4][5] */
    c = ir_entry(m);
    assert_true(ir_fusion_column_reduce(m, c, &c->instr[instr_named(m, "w")]));
    ir_module_free(m);
    m = bn_module("4,5,1", "4,1", "0,2", "1"); /* [4][5 reduced], the kept 1 dropped: a row */
    c = ir_entry(m);
    assert_false(ir_fusion_column_reduce(m, c, &c->instr[instr_named(m, "w")]));
    ir_module_free(m);
}

/* Run bn_hlo fused (block elements a block; 0: the chunk interpreter,
 * fuse_small) and unfused on x = 1..n, g = 2 - x / 8, m = 0.5 k: the two
 * results of each, bit for bit, and v against want (when given). */
static void bn_run(IrModule *m, int32_t block, const int64_t *din, int32_t rin, const int64_t *dout, int32_t rout,
                   const float *want)
{
    DevValue *args[3] = {val(IR_F32, rin, din, NULL), val(IR_F32, rin, din, NULL), val(IR_F32, rout, dout, NULL)};
    for (int64_t i = 0; i < args[0]->nbytes / 4; i++) {
        ((float *)args[0]->data)[i] = (float)(i + 1);
        ((float *)args[1]->data)[i] = 2.0f - (float)(i + 1) / 8;
    }
    for (int64_t i = 0; i < args[2]->nbytes / 4; i++)
        ((float *)args[2]->data)[i] = 0.5f * (float)i;
    DevValue *fused = NULL, *plain = NULL;
    IrDiag d = {0};
    DevExecOptions opt = {.fuse_small = true, .fusion_block = block};
    assert_int_equal(dev_execute(m, m->entry, 3, args, &opt, &fused, &d), IR_OK);
    assert_int_equal(run(m, 3, args, false, 0, &plain, &d), IR_OK);
    for (int32_t j = 0; j < 2; j++) {
        const DevValue *a = fused->elems[j], *b = plain->elems[j];
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, (size_t)b->nbytes);
    }
    if (want)
        assert_f32(fused->elems[0], want, fused->elems[0]->nbytes / 4);
    dev_value_unref(fused);
    dev_value_unref(plain);
    for (int a = 0; a < 3; a++)
        dev_value_unref(args[a]);
}

/* By hand: x [2,3,2] = 1..12, m = {0, 0.5}: v[j] = the sum over the
 * rows of (x - m[j])^2 (every value exact in f32). Blocks of 5 cut the
 * rows of 2 (a row split at every other block's edge). */
static void columns_values(void **state)
{
    (void)state;
    IrModule *m = bn_module("2,3,2", "2", "2", "0,1");
    int64_t din[] = {2, 3, 2}, dout[] = {2};
    /* column 0: 1, 3, ..., 11 -> 1 + 9 + 25 + 49 + 81 + 121 = 286;
     * column 1: 1.5, 3.5, ..., 11.5 -> 2.25 + 12.25 + 30.25 + 56.25 +
     * 90.25 + 132.25 = 323.5 */
    const float want[] = {286.0f, 323.5f};
    bn_run(m, 0, din, 3, dout, 1, want);
    bn_run(m, 5, din, 3, dout, 1, want);
    ir_module_free(m);
    /* [2][3 reduced][2] keeping dims 0 and 2, m [2,2] = {0, .5, 1, 1.5}
     * over them: out[a][j] = sum_r (x[a][r][j] - m[a][j])^2:
     * [0][0] 1 3 5 -> 35; [0][1] 1.5 3.5 5.5 -> 44.75;
     * [1][0] 6 8 10 -> 200; [1][1] 6.5 8.5 10.5 -> 224.75 */
    m = bn_module("2,3,2", "2,2", "0,2", "1");
    int64_t dout2[] = {2, 2};
    const float want2[] = {35.0f, 44.75f, 200.0f, 224.75f};
    bn_run(m, 0, din, 3, dout2, 2, want2);
    bn_run(m, 5, din, 3, dout2, 2, want2);
    ir_module_free(m);
}

/* Uneven shapes, random values with NaNs and zeros, fused against
 * unfused bit for bit (the chunk interpreter's blocks of 8192 cut the
 * rows of 13 and 17; blocks of 100 through the range kernels), and the
 * variance's sums against a plain double loop over the same f32 squares
 * in the input's order (what NumPy's float64 sum of each column gives). */
static void columns_equal_unfused(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out, *bdims, *red;
        int64_t din[4], dout[2];
        int32_t rin, rout;
    } cases[] = {
        {"5,37,41,13", "13", "3", "0,1,2", {5, 37, 41, 13}, {13}, 4, 1},
        {"3,333,17", "3,17", "0,2", "1", {3, 333, 17}, {3, 17}, 3, 2},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        IrModule *m = bn_module(cases[t].in, cases[t].out, cases[t].bdims, cases[t].red);
        for (int32_t block = 0; block <= 100; block += 100) {
            DevValue *args[3] = {val(IR_F32, cases[t].rin, cases[t].din, NULL),
                                 val(IR_F32, cases[t].rin, cases[t].din, NULL),
                                 val(IR_F32, cases[t].rout, cases[t].dout, NULL)};
            uint32_t s = 4242;
            for (int a = 0; a < 3; a++)
                for (int64_t i = 0; i < args[a]->nbytes / 4; i++) {
                    s = s * 1664525u + 1013904223u;
                    float v = (float)((int32_t)s >> 8) / (float)(1 << 21);
                    if (a == 1 && i % 997 == 0)
                        v = NAN;
                    else if (i % 89 == 0)
                        v = 0;
                    ((float *)args[a]->data)[i] = v;
                }
            /* The reference: v[o] = sum over the reduced positions, in
             * order, of (x - m)^2 rounded to f32 each, added in double. */
            int64_t nout = args[2]->nbytes / 4, nin = args[0]->nbytes / 4;
            int64_t inner = cases[t].din[cases[t].rin - 1], rows = cases[t].din[cases[t].rin - 2];
            double ref[64] = {0};
            assert_true(nout <= 64);
            for (int64_t i = 0; i < nin; i++) {
                int64_t o = i / (inner * rows) * inner * (nout > inner) + i % inner;
                float c = ((const float *)args[0]->data)[i] - ((const float *)args[2]->data)[o];
                ref[o] += (double)(c * c);
            }
            DevValue *fused = NULL, *plain = NULL;
            IrDiag d = {0};
            DevExecOptions opt = {.fuse_small = true, .fusion_block = block};
            assert_int_equal(dev_execute(m, m->entry, 3, args, &opt, &fused, &d), IR_OK);
            assert_int_equal(run(m, 3, args, false, 0, &plain, &d), IR_OK);
            for (int32_t j = 0; j < 2; j++)
                assert_memory_equal(fused->elems[j]->data, plain->elems[j]->data, (size_t)plain->elems[j]->nbytes);
            for (int64_t o = 0; o < nout; o++)
                assert_true(((const float *)fused->elems[0]->data)[o] == (float)ref[o]);
            dev_value_unref(fused);
            dev_value_unref(plain);
            for (int a = 0; a < 3; a++)
                dev_value_unref(args[a]);
        }
        ir_module_free(m);
    }
}

/* Other types and reducers: an s32 sum and an f64 maximum of a product
 * (range kernels, not the chunk interpreter), fused as unfused. */
static void columns_other_types(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule ct\n"
                           "add {\n"
                           "  a = s32[] parameter(0)\n"
                           "  b = s32[] parameter(1)\n"
                           "  ROOT s = s32[] add(a, b)\n"
                           "}\n"
                           "max {\n"
                           "  a = f64[] parameter(0)\n"
                           "  b = f64[] parameter(1)\n"
                           "  ROOT s = f64[] maximum(a, b)\n"
                           "}\n"
                           "ENTRY main {\n"
                           "  i = s32[7,9,5] parameter(0)\n"
                           "  x = f64[7,9,5] parameter(1)\n"
                           "  zi = s32[] constant(3)\n"
                           "  zx = f64[] constant(-1e300)\n"
                           "  ii = s32[7,9,5] multiply(i, i)\n"
                           "  si = s32[5] reduce(ii, zi), dimensions={0,1}, to_apply=add\n"
                           "  xx = f64[7,9,5] multiply(x, x)\n"
                           "  nx = f64[7,9,5] negate(xx)\n"
                           "  sx = f64[7,5] reduce(nx, zx), dimensions={1}, to_apply=max\n"
                           "  ROOT t = (s32[5], f64[7,5]) tuple(si, sx)\n"
                           "}\n");
    DevFusion f = find(m, 2);
    assert_int_equal(f.ngroups, 2);
    assert_true(f.groups[0].columns && f.groups[1].columns);
    ir_fusion_free(&f);
    int64_t dims[] = {7, 9, 5};
    for (int32_t block = 0; block <= 7; block += 7) {
        DevValue *args[2] = {val(IR_S32, 3, dims, NULL), val(IR_F64, 3, dims, NULL)};
        for (int64_t e = 0; e < 315; e++) {
            ((int32_t *)args[0]->data)[e] = (int32_t)(e * 7919 % 2001) - 1000;
            ((double *)args[1]->data)[e] = (double)(e * 31 % 17) / 3 - 2;
        }
        DevValue *fused = NULL, *plain = NULL;
        IrDiag d = {0};
        DevExecOptions opt = {.fuse_small = true, .fusion_block = block};
        assert_int_equal(dev_execute(m, m->entry, 2, args, &opt, &fused, &d), IR_OK);
        assert_int_equal(run(m, 2, args, false, 0, &plain, &d), IR_OK);
        for (int32_t j = 0; j < 2; j++)
            assert_memory_equal(fused->elems[j]->data, plain->elems[j]->data, (size_t)plain->elems[j]->nbytes);
        dev_value_unref(fused);
        dev_value_unref(plain);
        for (int a = 0; a < 2; a++)
            dev_value_unref(args[a]);
    }
    ir_module_free(m);
}

static void empty(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule z\n"
                           "ENTRY main {\n"
                           "  x = f32[0,3] parameter(0)\n"
                           "  n = f32[0,3] negate(x)\n"
                           "  ROOT a = f32[0,3] abs(n)\n"
                           "}\n");
    int64_t dz[] = {0, 3};
    DevValue *arg = val(IR_F32, 2, dz, NULL), *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(m, 1, &arg, true, 2, &out, &d), IR_OK);
    assert_int_equal(out->nbytes, 0);
    dev_value_unref(out);
    dev_value_unref(arg);
    ir_module_free(m);
}

/* Allocation n fails, n = 1, 2, ...: IR_ENOMEM with a message, nothing
 * leaked (the sanitizer build checks), until a run completes. */
static void allocation_failures(void **state)
{
    (void)state;
    IrModule *m = parse_ok(bcast_hlo);
    int64_t xd[] = {3, 5}, bd[] = {5}, rd[] = {3};
    DevValue *args[3] = {val(IR_F32, 2, xd, NULL), val(IR_F32, 1, bd, NULL), val(IR_F32, 1, rd, NULL)};
    int failures = 0;
    for (long n = 1; n < 1000; n++) {
        DevValue *out = NULL;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = run(m, 3, args, true, 4, &out, &d);
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
    for (int i = 0; i < 3; i++)
        dev_value_unref(args[i]);
    ir_module_free(m);

    /* A multi-output group: merge_outputs' lists, the extra outputs. */
    m = parse_ok(adam_hlo);
    DevValue *adam[4];
    adam_args(adam);
    failures = 0;
    for (long n = 1; n < 2000; n++) {
        DevValue *out = NULL;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = run(m, 4, adam, true, 4, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            dev_value_unref(out);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_null(out);
        ir_diag_clear(&d);
        failures++;
    }
    assert_true(failures > 10);
    for (int i = 0; i < 4; i++)
        dev_value_unref(adam[i]);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chain_is_one_group),
        cmocka_unit_test(chain_values),
        cmocka_unit_test(broadcasts_fuse),
        cmocka_unit_test(shared_broadcast),
        cmocka_unit_test(mixed_types),
        cmocka_unit_test(boundaries),
        cmocka_unit_test(dot_transpose_pairs),
        cmocka_unit_test(dot_transposed_equals_unfused),
        cmocka_unit_test(transposes_into_dots),
        cmocka_unit_test(transposed_operands_equal_unfused),
        cmocka_unit_test(in_place),
        cmocka_unit_test(multi_output),
        cmocka_unit_test(multi_output_in_place),
        cmocka_unit_test(errors_as_unfused),
        cmocka_unit_test(random_equals_unfused),
        cmocka_unit_test(chunks_equal_unfused),
        cmocka_unit_test(registers_equal_unfused),
        cmocka_unit_test(register_math_equal_unfused),
        cmocka_unit_test(half_chunks_equal_unfused),
        cmocka_unit_test(streamed_equals_unfused),
        cmocka_unit_test(periods_equal_unfused),
        cmocka_unit_test(column_groups),
        cmocka_unit_test(columns_values),
        cmocka_unit_test(columns_equal_unfused),
        cmocka_unit_test(columns_other_types),
        cmocka_unit_test(empty),
        cmocka_unit_test(allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
