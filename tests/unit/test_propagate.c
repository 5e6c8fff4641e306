/*
 * test_propagate.c: sharding propagation (partition/propagate.c), one test
 * per rule, written as HLO text with a few annotations. Every expected
 * sharding was worked out by hand from the rule in propagate.c (the device
 * arithmetic is written next to the non-obvious ones), never printed by the
 * code under test. Also: conflicts, user annotations, determinism, a
 * 10,000-instruction chain, failure injection, and every module of XLA's
 * SPMD partitioner tests (skipped when ../shared is absent).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"

/* ---- helpers ---- */

static IrModule *parse(const char *text)
{
    IrParseOptions o = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("test.hlo", text, strlen(text), &o, &m, &d);
    if (st != IR_OK) {
        char *msg = ir_diag_format(&d, "test");
        print_error("%s\n", msg ? msg : "parse failed");
        ts_free(msg);
    }
    ir_diag_clear(&d);
    assert_int_equal(st, IR_OK);
    return m;
}

static IrStatus propagate(IrModule *m, int64_t ndev, IrDiag *d)
{
    ShdPropagateOptions o = {.num_devices = ndev};
    return shd_propagate(m, &o, d);
}

/* Parse, propagate on ndev devices, expect success. */
static IrModule *run(const char *text, int64_t ndev)
{
    IrModule *m = parse(text);
    IrDiag d = {0};
    IrStatus st = propagate(m, ndev, &d);
    if (st != IR_OK)
        print_error("propagate: %s\n", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    assert_int_equal(st, IR_OK);
    return m;
}

static IrInstr *find(IrModule *m, const char *name)
{
    for (int32_t c = 0; c < m->ncomp; c++) {
        int32_t i = ir_find_instr(m->comp[c], name);
        if (i >= 0)
            return &m->comp[c]->instr[i];
    }
    print_error("no instruction named %s\n", name);
    fail();
    return NULL;
}

/* Assert the sharding text of instruction `name`. */
static void expect(IrModule *m, const char *name, const char *want)
{
    IrInstr *x = find(m, name);
    assert_non_null(x->sharding);
    char *got = ir_sharding_str(x->sharding);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        print_error("%s: got %s, want %s\n", name, got, want);
    assert_string_equal(got, want);
    ts_free(got);
}

#define REPL "{replicated}"

/* ---- elementwise ---- */

static void test_elementwise_forward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  q = f32[8,4] parameter(1)\n"
                      "  n = f32[8,4] negate(p)\n"
                      "  x = f32[8,4] exponential(n)\n"
                      "  c = f32[8,4] convert(x)\n"
                      "  y = f32[8,4] copy(c)\n"
                      "  ROOT a = f32[8,4] add(y, q)\n"
                      "}\n",
                      2);
    expect(m, "p", "{devices=[2,1]0,1}");
    expect(m, "n", "{devices=[2,1]0,1}");
    expect(m, "x", "{devices=[2,1]0,1}");
    expect(m, "c", "{devices=[2,1]0,1}");
    expect(m, "y", "{devices=[2,1]0,1}");
    expect(m, "a", "{devices=[2,1]0,1}");
    expect(m, "q", "{devices=[2,1]0,1}"); /* backward from the add */
    ir_module_free(m);
}

static void test_elementwise_backward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0)\n"
                      "  q = f32[8,4] parameter(1)\n"
                      "  n = f32[8,4] negate(p)\n"
                      "  m = f32[8,4] multiply(n, q)\n"
                      "  ROOT t = f32[8,4] tanh(m), sharding={devices=[1,2]0,1}\n"
                      "}\n",
                      2);
    expect(m, "p", "{devices=[1,2]0,1}");
    expect(m, "q", "{devices=[1,2]0,1}");
    expect(m, "n", "{devices=[1,2]0,1}");
    expect(m, "m", "{devices=[1,2]0,1}");
    ir_module_free(m);
}

/* Scalar operands of a broadcasted clamp stay replicated (XLA's select
 * needs a predicate of the full shape; it is elementwise like the rest). */
static void test_select_clamp_scalars(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  pr = pred[8] parameter(0)\n"
                      "  a = f32[8] parameter(1), sharding={devices=[2]0,1}\n"
                      "  b = f32[8] parameter(2)\n"
                      "  lo = f32[] parameter(3)\n"
                      "  hi = f32[] parameter(4)\n"
                      "  s = f32[8] select(pr, a, b)\n"
                      "  ROOT c = f32[8] clamp(lo, s, hi)\n"
                      "}\n",
                      2);
    expect(m, "s", "{devices=[2]0,1}");
    expect(m, "c", "{devices=[2]0,1}");
    expect(m, "b", "{devices=[2]0,1}");
    expect(m, "pr", "{devices=[2]0,1}");
    expect(m, "lo", REPL);
    expect(m, "hi", REPL);
    ir_module_free(m);
}

/* ---- broadcast ---- */

static void test_broadcast_forward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8] parameter(0), sharding={devices=[2]0,1}\n"
                      "  b = f32[8,4] broadcast(p), dimensions={0}\n"
                      "  ROOT n = f32[8,4] negate(b)\n"
                      "}\n",
                      2);
    expect(m, "b", "{devices=[2,1]0,1}");
    expect(m, "n", "{devices=[2,1]0,1}");
    ir_module_free(m);
}

/* Backward: result [2,2] over {0,1 | 2,3}; the operand keeps result dim 1:
 * device array transposed to [[0,2],[1,3]], the dropped dim 0 becomes the
 * replication: {devices=[2,2]0,2,1,3 last_tile_dim_replicate}. */
static void test_broadcast_backward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "ENTRY e {\n"
                      "  p = f32[4] parameter(0)\n"
                      "  ROOT b = f32[8,4] broadcast(p), dimensions={1}, sharding={devices=[2,2]0,1,2,3}\n"
                      "}\n",
                      4);
    expect(m, "p", "{devices=[2,2]0,2,1,3 last_tile_dim_replicate}");
    ir_module_free(m);
}

/* A broadcast result prefers what its users want over its operand (round 0
 * has no forward through broadcast): b takes q's [1,2], not p's [2,1]. */
static void test_broadcast_prefers_users(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[4] parameter(0), sharding={devices=[2]0,1}\n"
                      "  q = f32[4,8] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  b = f32[4,8] broadcast(p), dimensions={0}\n"
                      "  ROOT a = f32[4,8] add(b, q)\n"
                      "}\n",
                      2);
    expect(m, "b", "{devices=[1,2]0,1}");
    expect(m, "a", "{devices=[1,2]0,1}");
    ir_module_free(m);
}

/* ---- transpose, reverse, reshape ---- */

static void test_transpose(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  t = f32[4,8] transpose(p), dimensions={1,0}\n"
                      "  r = f32[4,8] reverse(t), dimensions={1}\n"
                      "  q = f32[2,3,4] parameter(1)\n"
                      "  u = f32[4,2,3] transpose(q), dimensions={2,0,1}, sharding={devices=[2,1,1]0,1}\n"
                      "  ROOT o = (f32[4,8], f32[4,2,3]) tuple(r, u)\n"
                      "}\n",
                      2);
    expect(m, "t", "{devices=[1,2]0,1}");
    expect(m, "r", "{devices=[1,2]0,1}");
    /* u dim 0 is q dim 2. */
    expect(m, "q", "{devices=[1,1,2]0,1}");
    ir_module_free(m);
}

static void test_reshape(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[4,6] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  merged = f32[24] reshape(p)\n"
                      "  split = f32[2,12] reshape(merged)\n"
                      "  q = f32[4,6] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  minor = f32[24] reshape(q)\n"
                      "  r = f32[8,6] parameter(2), sharding={devices=[2,1]0,1}\n"
                      "  kept = f32[8,2,3] reshape(r)\n"
                      "  s = f32[6,4] parameter(3), sharding={devices=[2,1]0,1}\n"
                      "  general = f32[4,6] reshape(s)\n"
                      "  ROOT o = (f32[2,12], f32[24], f32[8,2,3], f32[4,6]) tuple(split, minor, kept, general)\n"
                      "}\n",
                      2);
    expect(m, "merged", "{devices=[2]0,1}");        /* major dim of a merge, 2 | 4 */
    expect(m, "split", "{devices=[2,1]0,1}");       /* major dim of a split, 2 | 2 */
    expect(m, "minor", REPL);                       /* minor dim of a merge */
    expect(m, "kept", "{devices=[2,1,1]0,1}");      /* dim 0 survives unchanged */
    expect(m, "general", "{devices=[2,1]0,1}");     /* [6,4]->[4,6]: 2 | 6 and 2 | 4 */
    ir_module_free(m);
}

/* A tile count that does not divide the new major dim does not cross:
 * f32[24] in 3 -> f32[4,6] (3 does not divide 4); backward likewise. */
static void test_reshape_no_crossing(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=3\n"
                      "ENTRY e {\n"
                      "  p = f32[24] parameter(0), sharding={devices=[3]0,1,2}\n"
                      "  r = f32[4,6] reshape(p)\n"
                      "  q = f32[24] parameter(1)\n"
                      "  s = f32[3,8] reshape(q), sharding={devices=[3,1]0,1,2}\n"
                      "  ROOT o = (f32[4,6], f32[3,8]) tuple(r, s)\n"
                      "}\n",
                      3);
    expect(m, "r", REPL);
    expect(m, "q", "{devices=[3]0,1,2}");           /* split backward: 3 | 3 and 3 | 24 */
    ir_module_free(m);
}

/* ---- reduce ---- */

/* p [2,2] over {0,1 | 2,3}; reducing dim 1 moves its tiles into the
 * replication: {devices=[2,2]0,1,2,3 last_tile_dim_replicate}. */
static void test_reduce_forward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
                      "  z = f32[] constant(0)\n"
                      "  r = f32[8] reduce(p, z), dimensions={1}, to_apply=add\n"
                      "  ROOT all = f32[] reduce(p, z), dimensions={0,1}, to_apply=add\n"
                      "}\n",
                      4);
    expect(m, "r", "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
    expect(m, "z", REPL);
    expect(m, "all", REPL);
    /* The reducer is a scalar sub-computation: left alone. */
    assert_null(find(m, "a")->sharding);
    assert_null(find(m, "s")->sharding);
    ir_module_free(m);
}

static void test_reduce_backward_and_variadic(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "mm {\n"
                      "  a0 = f32[] parameter(0)\n"
                      "  a1 = f32[] parameter(1)\n"
                      "  b0 = f32[] parameter(2)\n"
                      "  b1 = f32[] parameter(3)\n"
                      "  x = f32[] maximum(a0, b0)\n"
                      "  y = f32[] minimum(a1, b1)\n"
                      "  ROOT t = (f32[], f32[]) tuple(x, y)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0)\n"
                      "  z = f32[] constant(0)\n"
                      "  r = f32[8] reduce(p, z), dimensions={1}, to_apply=add, sharding={devices=[2]0,1}\n"
                      "  p0 = f32[8,4] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  p1 = f32[8,4] parameter(2)\n"
                      "  v = (f32[4], f32[4]) reduce(p0, p1, z, z), dimensions={0}, to_apply=mm\n"
                      "  ROOT o = (f32[8], (f32[4], f32[4])) tuple(r, v)\n"
                      "}\n",
                      2);
    expect(m, "p", "{devices=[2,1]0,1}");    /* reduced dim 1 inserted untiled */
    /* Every output of a variadic reduce alike; p1 takes it back. */
    expect(m, "v", "{{devices=[2]0,1}, {devices=[2]0,1}}");
    expect(m, "p1", "{devices=[1,2]0,1}");
    expect(m, "o", "{{devices=[2]0,1}, {devices=[2]0,1}, {devices=[2]0,1}}");
    ir_module_free(m);
}

/* ---- dot ---- */

/* Megatron: x replicated, W1 column-parallel -> h column-parallel; h and
 * W2 row-parallel contract their tiled dims -> out replicated (after the
 * partitioner's all-reduce). */
static void test_dot_megatron(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  x = f32[4,16] parameter(0), sharding={replicated}\n"
                      "  w1 = f32[16,8] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  w2 = f32[8,16] parameter(2), sharding={devices=[2,1]0,1}\n"
                      "  h = f32[4,8] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                      "  g = f32[4,8] tanh(h)\n"
                      "  ROOT out = f32[4,16] dot(g, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                      "}\n",
                      2);
    expect(m, "h", "{devices=[1,2]0,1}");
    expect(m, "g", "{devices=[1,2]0,1}");
    expect(m, "out", REPL);
    ir_module_free(m);
}

/* Backward: out [2,1] -> lhs free dim 0 takes the tiles; rhs has only its
 * contracting dim and out dim 1 (untiled): replicated. */
static void test_dot_backward_and_batch(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  x = f32[4,16] parameter(0)\n"
                      "  w = f32[16,8] parameter(1)\n"
                      "  d = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}\n"
                      "  a = f32[3,4,5] parameter(2), sharding={devices=[2,1,1]0,1}\n"
                      "  b = f32[3,5,6] parameter(3)\n"
                      "  bd = f32[3,4,6] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}\n"
                      "  ROOT o = (f32[4,8], f32[3,4,6]) tuple(d, bd)\n"
                      "}\n",
                      2);
    expect(m, "x", "{devices=[2,1]0,1}");
    expect(m, "w", REPL);
    expect(m, "bd", "{devices=[2,1,1]0,1}");      /* batch dim from lhs */
    expect(m, "b", "{devices=[2,1,1]0,1}");       /* batch dim back to rhs */
    ir_module_free(m);
}

/* Both operands partially tiled on different free dims over the same 4
 * devices: x dim 0 tiles {0,1 | 2,3}, w dim 1 tiles {0,2 | 1,3}; the merged
 * result has at (i,j) the device in x's tile i and w's tile j:
 * (0,0)=0 (0,1)=1 (1,0)=2 (1,1)=3. */
static void test_dot_merges_operands(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "ENTRY e {\n"
                      "  x = f32[4,16] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  w = f32[16,8] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
                      "  ROOT d = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                      "}\n",
                      4);
    expect(m, "d", "{devices=[2,2]0,1,2,3}");
    ir_module_free(m);
}

/* ---- convolution ---- */

static void test_conv(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  in = f32[8,16,16,3] parameter(0), sharding={devices=[2,1,1,1]0,1}\n"
                      "  k = f32[3,3,3,4] parameter(1), sharding={replicated}\n"
                      "  c = f32[8,16,16,4] convolution(in, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
                      "  in2 = f32[8,16,16,3] parameter(2), sharding={replicated}\n"
                      "  k2 = f32[3,3,3,4] parameter(3), sharding={devices=[1,1,1,2]0,1}\n"
                      "  c2 = f32[8,16,16,4] convolution(in2, k2), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
                      "  in3 = f32[8,16,16,3] parameter(4)\n"
                      "  k3 = f32[3,3,3,4] parameter(5)\n"
                      "  c3 = f32[8,16,16,4] convolution(in3, k3), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, sharding={devices=[2,1,1,1]0,1}\n"
                      "  ROOT o = (f32[8,16,16,4], f32[8,16,16,4], f32[8,16,16,4]) tuple(c, c2, c3)\n"
                      "}\n",
                      2);
    expect(m, "c", "{devices=[2,1,1,1]0,1}");     /* batch from the input */
    expect(m, "c2", "{devices=[1,1,1,2]0,1}");    /* output feature from the kernel */
    expect(m, "in3", "{devices=[2,1,1,1]0,1}");   /* batch back to the input */
    expect(m, "k3", REPL);
    ir_module_free(m);
}

/* A depthwise convolution (feature groups) keeps the batch map, each
 * image its own, forward and back; its features stay whole (an output
 * feature reads its group's input features). */
static void test_conv_grouped(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  in = f32[8,10,10,6] parameter(0), sharding={devices=[2,1,1,1]0,1}\n"
                      "  k = f32[3,3,1,6] parameter(1), sharding={replicated}\n"
                      "  c = f32[8,10,10,6] convolution(in, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=6\n"
                      "  in2 = f32[8,10,10,6] parameter(2)\n"
                      "  k2 = f32[3,3,1,6] parameter(3)\n"
                      "  c2 = f32[8,10,10,6] convolution(in2, k2), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=6, sharding={devices=[2,1,1,1]0,1}\n"
                      "  in3 = f32[8,10,10,6] parameter(4), sharding={devices=[1,1,1,2]0,1}\n"
                      "  k3 = f32[3,3,1,6] parameter(5), sharding={replicated}\n"
                      "  c3 = f32[8,10,10,6] convolution(in3, k3), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=6\n"
                      "  ROOT o = (f32[8,10,10,6], f32[8,10,10,6], f32[8,10,10,6]) tuple(c, c2, c3)\n"
                      "}\n",
                      2);
    expect(m, "c", "{devices=[2,1,1,1]0,1}");   /* batch from the input */
    expect(m, "in2", "{devices=[2,1,1,1]0,1}"); /* batch back to the input */
    expect(m, "c3", REPL);                      /* no feature map under groups */
    ir_module_free(m);
}

/* ---- gather / scatter ---- */

static void test_gather(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  op = f32[8,16] parameter(0)\n"
                      "  ix = s32[4,1] parameter(1), sharding={devices=[2,1]0,1}\n"
                      "  g = f32[4,16] gather(op, ix), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}\n"
                      "  op2 = f32[8,16] parameter(2), sharding={devices=[1,2]0,1}\n"
                      "  ix2 = s32[4,1] parameter(3)\n"
                      "  g2 = f32[4,16] gather(op2, ix2), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}\n"
                      "  ROOT o = (f32[4,16], f32[4,16]) tuple(g, g2)\n"
                      "}\n",
                      2);
    expect(m, "g", "{devices=[2,1]0,1}");   /* indices batch dim -> result batch dim */
    expect(m, "op", REPL);                  /* result batch tiles do not reach the operand */
    expect(m, "g2", "{devices=[1,2]0,1}");  /* passthrough offset dim (16 = 16) */
    expect(m, "ix2", REPL);
    ir_module_free(m);
}

/* Indices {0,1 | 2,3} on the batch dim and operand {0,2 | 1,3} on the
 * passthrough dim merge into {devices=[2,2]0,1,2,3}. */
static void test_gather_merge(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "ENTRY e {\n"
                      "  op = f32[8,16] parameter(0), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
                      "  ix = s32[4,1] parameter(1), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  ROOT g = f32[4,16] gather(op, ix), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}\n"
                      "}\n",
                      4);
    expect(m, "g", "{devices=[2,2]0,1,2,3}");
    ir_module_free(m);
}

static void test_scatter(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  op = f32[8,16] parameter(0), sharding={devices=[1,2]0,1}\n"
                      "  ix = s32[4,1] parameter(1)\n"
                      "  up = f32[4,16] parameter(2)\n"
                      "  ROOT sc = f32[8,16] scatter(op, ix, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
                      "}\n",
                      2);
    expect(m, "sc", "{devices=[1,2]0,1}");  /* result = operand */
    expect(m, "up", "{devices=[1,2]0,1}");  /* window dim 1 passes through (16 = 16) */
    expect(m, "ix", REPL);
    ir_module_free(m);
}

/* Batching dims (take_along_axis and its gradient): operand dim 0 and
 * indices dim 0 are one batch, so a tiling of either, or of the result,
 * reaches the other two; the gathered (collapsed) dim 1 takes none. */
static void test_gather_batching(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  lp = f32[8,10] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  lb = s32[8,1,1] parameter(1)\n"
                      "  g = f32[8,1] gather(lp, lb), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n"
                      "  lp2 = f32[10,8] parameter(2)\n"
                      "  lb2 = s32[8,1] parameter(3)\n"
                      "  g2 = f32[8] gather(lp2, lb2), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0}, operand_batching_dims={1}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1}, sharding={devices=[2]0,1}\n"
                      "  ROOT o = (f32[8,1], f32[8]) tuple(g, g2)\n"
                      "}\n",
                      2);
    expect(m, "g", "{devices=[2,1]0,1}");   /* operand batching dim -> result batch dim */
    expect(m, "lb", "{devices=[2,1,1]0,1}"); /* and on to the indices' batching dim */
    expect(m, "lp2", "{devices=[1,2]0,1}"); /* result -> operand batching dim 1 */
    expect(m, "lb2", "{devices=[2,1]0,1}");
    ir_module_free(m);
}

static void test_scatter_batching(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  z = f32[] constant(0)\n"
                      "  op = f32[8,10] broadcast(z), dimensions={}\n"
                      "  ix = s32[8,1,1] parameter(0), sharding={devices=[2,1,1]0,1}\n"
                      "  up = f32[8,1] parameter(1)\n"
                      "  sc = f32[8,10] scatter(op, ix, up), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add\n"
                      "  op2 = f32[10,8] parameter(2)\n"
                      "  ix2 = s32[8,1] parameter(3)\n"
                      "  up2 = f32[8] parameter(4), sharding={devices=[2]0,1}\n"
                      "  sc2 = f32[10,8] scatter(op2, ix2, up2), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, input_batching_dims={1}, scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=add\n"
                      "  op3 = f32[10,8] parameter(5)\n"
                      "  ix3 = s32[8,1] parameter(6)\n"
                      "  up3 = f32[8] parameter(7)\n"
                      "  sc3 = f32[10,8] scatter(op3, ix3, up3), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, input_batching_dims={1}, scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=add, sharding={devices=[1,2]0,1}\n"
                      "  ROOT o = (f32[8,10], f32[10,8], f32[10,8]) tuple(sc, sc2, sc3)\n"
                      "}\n",
                      2);
    expect(m, "sc", "{devices=[2,1]0,1}");   /* indices batching dim -> result's */
    expect(m, "up", "{devices=[2,1]0,1}");   /* and back to the updates' */
    expect(m, "sc2", "{devices=[1,2]0,1}");  /* updates' scatter dim along operand dim 1 */
    expect(m, "ix2", "{devices=[2,1]0,1}");
    expect(m, "op3", "{devices=[1,2]0,1}");  /* the result's tiles reach all three */
    expect(m, "ix3", "{devices=[2,1]0,1}");
    expect(m, "up3", "{devices=[2]0,1}");
    ir_module_free(m);
}

/* ---- slice, pad, concatenate, dynamic slices, sort ---- */

/* p [2,2] over {0,1 | 2,3}: untiling dim 1 keeps the device order and
 * moves its 2 into the replication. */
static void test_slicing_ops(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "lt {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT c = pred[] compare(a, b), direction=LT\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,16] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
                      "  i = s32[] parameter(1)\n"
                      "  sl = f32[8,8] slice(p), slice={[0:8], [0:8]}\n"
                      "  z = f32[] constant(0)\n"
                      "  pd = f32[8,18] pad(p, z), padding=0_0x1_1\n"
                      "  ds = f32[8,4] dynamic-slice(p, i, i), dynamic_slice_sizes={8,4}\n"
                      "  cc = f32[8,32] concatenate(p, p), dimensions={1}\n"
                      "  cr = f32[16,16] concatenate(p, p), dimensions={0}\n"
                      "  so = f32[8,16] sort(p), dimensions={1}, to_apply=lt\n"
                      "  u = f32[8,4] parameter(2)\n"
                      "  du = f32[8,16] dynamic-update-slice(p, u, i, i)\n"
                      "  ROOT o = (f32[8,8], f32[8,18], f32[8,4], f32[8,32], f32[16,16], f32[8,16], f32[8,16]) tuple(sl, pd, ds, cc, cr, so, du)\n"
                      "}\n",
                      4);
    const char *dim1 = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}";
    const char *dim0 = "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}";
    expect(m, "sl", dim1);
    expect(m, "pd", dim1);
    expect(m, "ds", dim1);
    expect(m, "cc", dim1);
    /* concat on dim 0: dim 0 untiled; the kept dim 1 goes first in the
     * device array: [[0,1],[2,3]] transposed -> 0,2,1,3. */
    expect(m, "cr", dim0);
    expect(m, "so", dim1);
    /* The update covers 4 of 16 along dim 1: untiled on both sides. */
    expect(m, "du", dim1);
    expect(m, "u", dim1);
    expect(m, "i", REPL);
    expect(m, "z", REPL);
    ir_module_free(m);
}

/* ---- iota, constant ---- */

static void test_iota_constant_backward(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  io = f32[8,4] iota(), iota_dimension=0\n"
                      "  k = f32[2] constant({1, 2})\n"
                      "  kb = f32[8,2] broadcast(k), dimensions={1}\n"
                      "  q = f32[8,2] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  m = f32[8,2] multiply(kb, q)\n"
                      "  a = f32[8,4] add(p, io)\n"
                      "  ROOT o = (f32[8,4], f32[8,2]) tuple(a, m)\n"
                      "}\n",
                      2);
    expect(m, "io", "{devices=[2,1]0,1}");
    expect(m, "kb", "{devices=[1,2]0,1}");
    expect(m, "k", "{devices=[2]0,1}");
    ir_module_free(m);
}

/* ---- while, conditional, call, tuples ---- */

static const char *WHILE_HLO =
    "HloModule w, num_partitions=2\n"
    "cond {\n"
    "  cp = (s32[], f32[8,4]) parameter(0)\n"
    "  ci = s32[] get-tuple-element(cp), index=0\n"
    "  lim = s32[] constant(10)\n"
    "  ROOT lt = pred[] compare(ci, lim), direction=LT\n"
    "}\n"
    "body {\n"
    "  bp = (s32[], f32[8,4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(bp), index=0\n"
    "  one = s32[] constant(1)\n"
    "  i1 = s32[] add(i, one)\n"
    "  x = f32[8,4] get-tuple-element(bp), index=1\n"
    "  x1 = f32[8,4] add(x, x)\n"
    "  ROOT bt = (s32[], f32[8,4]) tuple(i1, x1)\n"
    "}\n"
    "ENTRY e {\n"
    "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
    "  z = s32[] constant(0)\n"
    "  init = (s32[], f32[8,4]) tuple(z, p)\n"
    "  w = (s32[], f32[8,4]) while(init), condition=cond, body=body\n"
    "  ROOT r = f32[8,4] get-tuple-element(w), index=1\n"
    "}\n";

static void test_while(void **state)
{
    (void)state;
    IrModule *m = run(WHILE_HLO, 2);
    const char *state_shd = "{{replicated}, {devices=[2,1]0,1}}";
    expect(m, "init", state_shd);
    expect(m, "w", state_shd);
    expect(m, "bp", state_shd);
    expect(m, "bt", state_shd);
    expect(m, "cp", state_shd);
    expect(m, "x", "{devices=[2,1]0,1}");
    expect(m, "x1", "{devices=[2,1]0,1}");
    expect(m, "r", "{devices=[2,1]0,1}");
    expect(m, "lt", REPL);
    expect(m, "i1", REPL);
    ir_module_free(m);
}

/* An annotation inside the body decides the loop state when nothing
 * outside says otherwise; the init then takes it backward. */
static void test_while_from_body(void **state)
{
    (void)state;
    IrModule *m = run("HloModule w, num_partitions=2\n"
                      "cond {\n"
                      "  cp = (f32[8,4]) parameter(0)\n"
                      "  ROOT t = pred[] constant(false)\n"
                      "}\n"
                      "body {\n"
                      "  bp = (f32[8,4]) parameter(0)\n"
                      "  x = f32[8,4] get-tuple-element(bp), index=0\n"
                      "  x1 = f32[8,4] negate(x), sharding={devices=[1,2]0,1}\n"
                      "  ROOT bt = (f32[8,4]) tuple(x1)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0)\n"
                      "  init = (f32[8,4]) tuple(p)\n"
                      "  ROOT w = (f32[8,4]) while(init), condition=cond, body=body\n"
                      "}\n",
                      2);
    expect(m, "w", "{{devices=[1,2]0,1}}");
    expect(m, "bp", "{{devices=[1,2]0,1}}");
    expect(m, "cp", "{{devices=[1,2]0,1}}");
    expect(m, "p", "{devices=[1,2]0,1}");
    ir_module_free(m);
}

static void test_while_conflicting_annotations(void **state)
{
    (void)state;
    IrModule *m = parse("HloModule w, num_partitions=2\n"
                        "cond {\n"
                        "  cp = (f32[8,4]) parameter(0)\n"
                        "  ROOT t = pred[] constant(false)\n"
                        "}\n"
                        "body {\n"
                        "  bp = (f32[8,4]) parameter(0), sharding={{devices=[1,2]0,1}}\n"
                        "  x = f32[8,4] get-tuple-element(bp), index=0\n"
                        "  ROOT bt = (f32[8,4]) tuple(x)\n"
                        "}\n"
                        "ENTRY e {\n"
                        "  p = f32[8,4] parameter(0)\n"
                        "  init = (f32[8,4]) tuple(p)\n"
                        "  ROOT w = (f32[8,4]) while(init), condition=cond, body=body, sharding={{devices=[2,1]0,1}}\n"
                        "}\n");
    IrDiag d = {0};
    assert_int_equal(propagate(m, 2, &d), IR_EINPUT);
    assert_non_null(d.msg);
    assert_non_null(strstr(d.msg, "contradicts"));
    assert_true(d.pos.line > 0);
    /* Nothing was assigned. */
    assert_null(find(m, "x")->sharding);
    ir_diag_clear(&d);
    ir_module_free(m);
}

static void test_conditional(void **state)
{
    (void)state;
    IrModule *m = run("HloModule c, num_partitions=2\n"
                      "tb {\n"
                      "  tp = f32[8] parameter(0)\n"
                      "  ROOT tn = f32[8] negate(tp)\n"
                      "}\n"
                      "fb {\n"
                      "  fp = f32[8] parameter(0)\n"
                      "  ROOT fe = f32[8] exponential(fp)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  pr = pred[] parameter(0)\n"
                      "  a = f32[8] parameter(1), sharding={devices=[2]0,1}\n"
                      "  b = f32[8] parameter(2)\n"
                      "  ROOT c = f32[8] conditional(pr, a, b), true_computation=tb, false_computation=fb\n"
                      "}\n",
                      2);
    const char *t = "{devices=[2]0,1}";
    expect(m, "tp", t);
    expect(m, "tn", t);
    expect(m, "c", t);
    expect(m, "fe", t);   /* branch roots share the result's sharding */
    expect(m, "fp", t);
    expect(m, "b", t);    /* and back to the false operand */
    expect(m, "pr", REPL);
    ir_module_free(m);
}

static void test_call(void **state)
{
    (void)state;
    IrModule *m = run("HloModule c, num_partitions=2\n"
                      "f {\n"
                      "  fp = f32[8] parameter(0)\n"
                      "  fq = f32[8] parameter(1)\n"
                      "  ROOT fa = f32[8] add(fp, fq)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8] parameter(0), sharding={devices=[2]0,1}\n"
                      "  q = f32[8] parameter(1)\n"
                      "  ROOT c = f32[8] call(p, q), to_apply=f\n"
                      "}\n",
                      2);
    expect(m, "fp", "{devices=[2]0,1}");
    expect(m, "fa", "{devices=[2]0,1}");
    expect(m, "fq", "{devices=[2]0,1}");
    expect(m, "c", "{devices=[2]0,1}");
    expect(m, "q", "{devices=[2]0,1}");
    ir_module_free(m);
}

static void test_tuples(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  a = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  b = f32[4] parameter(1)\n"
                      "  t = (f32[8,4], f32[4]) tuple(a, b)\n"
                      "  n = ((f32[8,4], f32[4]), f32[4]) tuple(t, b)\n"
                      "  g = (f32[8,4], f32[4]) get-tuple-element(n), index=0\n"
                      "  g0 = f32[8,4] get-tuple-element(g), index=0\n"
                      "  tp = (f32[2], f32[2]) parameter(2), sharding={devices=[2]0,1}\n"
                      "  e = f32[2] get-tuple-element(tp), index=1\n"
                      "  ROOT o = (f32[8,4], f32[2]) tuple(g0, e)\n"
                      "}\n",
                      2);
    expect(m, "t", "{{devices=[2,1]0,1}, {replicated}}");
    expect(m, "n", "{{devices=[2,1]0,1}, {replicated}, {replicated}}");
    expect(m, "g", "{{devices=[2,1]0,1}, {replicated}}");
    expect(m, "g0", "{devices=[2,1]0,1}");
    /* A single sharding on a tuple applies to every leaf (expanded). */
    expect(m, "tp", "{{devices=[2]0,1}, {devices=[2]0,1}}");
    expect(m, "e", "{devices=[2]0,1}");
    expect(m, "o", "{{devices=[2,1]0,1}, {devices=[2]0,1}}");
    ir_module_free(m);
}

/* ---- manual regions ---- */

static void test_manual_region(void **state)
{
    (void)state;
    IrModule *m = run("HloModule m, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  s = f32[8,4] custom-call(p), custom_call_target=\"Sharding\", sharding={devices=[2,1]0,1}\n"
                      "  fs = f32[4,4] custom-call(s), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
                      "  k = f32[] constant(1)\n"
                      "  kb = f32[4,4] broadcast(k), dimensions={}\n"
                      "  ad = f32[4,4] add(fs, kb)\n"
                      "  ng = f32[4,4] negate(ad)\n"
                      "  sf = f32[8,4] custom-call(ng), custom_call_target=\"SPMDShardToFullShape\", sharding={devices=[2,1]0,1}\n"
                      "  ROOT n = f32[8,4] negate(sf)\n"
                      "}\n",
                      2);
    expect(m, "s", "{devices=[2,1]0,1}");
    expect(m, "ad", "{manual}");
    expect(m, "ng", "{manual}");
    expect(m, "kb", "{manual}");
    expect(m, "k", "{manual}");   /* a scalar inside a manual region */
    expect(m, "n", "{devices=[2,1]0,1}");
    ir_module_free(m);
}

/* Manual never overrides a tiled annotation, and stops at the conversion
 * custom-calls; an unannotated SPMDFullToShardShape is manual. */
static void test_manual_boundaries(void **state)
{
    (void)state;
    IrModule *m = run("HloModule m, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0)\n"
                      "  fs = f32[4,4] custom-call(p), custom_call_target=\"SPMDFullToShardShape\"\n"
                      "  t = f32[4,4] parameter(1), sharding={devices=[2,1]0,1}\n"
                      "  ad = f32[4,4] add(fs, t)\n"
                      "  sf = f32[8,4] custom-call(ad), custom_call_target=\"SPMDShardToFullShape\"\n"
                      "  ROOT n = f32[8,4] negate(sf)\n"
                      "}\n",
                      2);
    expect(m, "fs", "{manual}");
    expect(m, "ad", "{manual}");
    expect(m, "t", "{devices=[2,1]0,1}");
    expect(m, "p", REPL);
    expect(m, "sf", REPL);
    expect(m, "n", REPL);
    ir_module_free(m);
}

/* ---- the conflict rule ---- */

static void test_conflict_order(void **state)
{
    (void)state;
    /* Same tiles, same bytes: the earlier operand wins. */
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  a = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  b = f32[8,4] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  ROOT s = f32[8,4] add(a, b)\n"
                      "}\n",
                      2);
    expect(m, "s", "{devices=[2,1]0,1}");
    expect(m, "b", "{devices=[1,2]0,1}");
    ir_module_free(m);
    m = run("HloModule t, num_partitions=2\n"
            "ENTRY e {\n"
            "  b = f32[8,4] parameter(0), sharding={devices=[1,2]0,1}\n"
            "  a = f32[8,4] parameter(1), sharding={devices=[2,1]0,1}\n"
            "  ROOT s = f32[8,4] add(b, a)\n"
            "}\n",
            2);
    expect(m, "s", "{devices=[1,2]0,1}");
    ir_module_free(m);
}

static void test_conflict_bytes(void **state)
{
    (void)state;
    /* pred (1 byte each) vs f32: the larger operand's sharding wins even
     * though it comes later. */
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  c = pred[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  a = f32[8,4] parameter(1), sharding={devices=[1,2]0,1}\n"
                      "  b = f32[8,4] parameter(2)\n"
                      "  ROOT s = f32[8,4] select(c, a, b)\n"
                      "}\n",
                      2);
    expect(m, "s", "{devices=[1,2]0,1}");
    ir_module_free(m);
}

static void test_conflict_more_tiles_and_merge(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "ENTRY e {\n"
                      "  a = f32[8,4] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  b = f32[8,4] parameter(1), sharding={devices=[2,2]0,1,2,3}\n"
                      "  s = f32[8,4] add(a, b)\n"
                      "  c = f32[8,4] parameter(2), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
                      "  d = f32[8,4] parameter(3), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  t = f32[8,4] add(c, d)\n"
                      "  x = f32[8,4] parameter(4), sharding={devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  y = f32[8,4] parameter(5), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
                      "  u = f32[8,4] add(x, y)\n"
                      "  ROOT o = (f32[8,4], f32[8,4], f32[8,4]) tuple(s, t, u)\n"
                      "}\n",
                      4);
    expect(m, "s", "{devices=[2,2]0,1,2,3}");  /* 4 tiles beat 2 */
    /* c: dim 1 tiles {0,2 | 1,3}; d: dim 0 tiles {0,1 | 2,3}: compatible,
     * merged (i,j) = d's tile i and c's tile j. Order of devices in the
     * merged tile: as in the winner (c, the earlier). */
    expect(m, "t", "{devices=[2,2]0,1,2,3}");
    /* x: dim 1 tiles {0,1 | 2,3}; y: dim 0 tiles {0,1 | 2,3}: the same
     * devices would need to hold two different tiles: not compatible, x
     * (earlier) wins. */
    expect(m, "u", "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}");
    ir_module_free(m);
}

/* Partly manual values (a manual subgroup) propagate like tiled ones; a
 * reduce over dim 0 of {devices=[2,1,2]0,1,2,3 last_tile_dims={manual}}
 * moves the 2 of dim 0 into a replicated subgroup before the manual one:
 * devices {0,2} still share manual group 0 and {1,3} group 1. */
static void test_partial_manual(void **state)
{
    (void)state;
    IrModule *m = run("HloModule m, num_partitions=4\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dims={manual}}\n"
                      "  q = f32[8,4] parameter(1), sharding={devices=[2,2]0,1,2,3}\n"
                      "  n = f32[8,4] add(p, q)\n"
                      "  z = f32[] constant(0)\n"
                      "  ROOT r = f32[4] reduce(n, z), dimensions={0}, to_apply=add\n"
                      "}\n",
                      4);
    /* The partly manual operand wins over the 4-tile one (a manual region
     * is a fact, not a preference). */
    expect(m, "n", "{devices=[2,1,2]0,1,2,3 last_tile_dims={manual}}");
    expect(m, "r", "{devices=[1,2,2]0,1,2,3 last_tile_dims={replicated, manual}}");
    ir_module_free(m);
}

/* shard_as: the members of one group share a sharding. */
static void test_shard_as(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  q = f32[8,4] parameter(1)\n"
                      "  a = f32[8,4] negate(p), sharding={unknown shard_as 0}\n"
                      "  b = f32[8,4] negate(q), sharding={unknown shard_as 0}\n"
                      "  ROOT o = (f32[8,4], f32[8,4]) tuple(a, b)\n"
                      "}\n",
                      2);
    expect(m, "a", "{devices=[2,1]0,1}");
    expect(m, "b", "{devices=[2,1]0,1}");
    expect(m, "q", "{devices=[2,1]0,1}");
    ir_module_free(m);
}

static void test_reduce_window_and_barrier(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  z = f32[] constant(0)\n"
                      "  rw = f32[8,4] reduce-window(p, z), window={size=1x2 pad=0_0x0_1}, to_apply=add\n"
                      "  q = f32[4] parameter(1), sharding={devices=[2]0,1}\n"
                      "  t = (f32[8,4], f32[4]) tuple(rw, q)\n"
                      "  ob = (f32[8,4], f32[4]) opt-barrier(t)\n"
                      "  ROOT g = f32[4] get-tuple-element(ob), index=1\n"
                      "}\n",
                      2);
    expect(m, "rw", "{devices=[2,1]0,1}");
    expect(m, "ob", "{{devices=[2,1]0,1}, {devices=[2]0,1}}");
    expect(m, "g", "{devices=[2]0,1}");
    ir_module_free(m);
}

/* Indexed conditional with tuple operands: each branch parameter takes its
 * operand's leaves, the roots share the result's sharding, and what a
 * branch learns flows back to its operand (q via y, a1 and t). */
static void test_conditional_indexed(void **state)
{
    (void)state;
    IrModule *m = run("HloModule c, num_partitions=2\n"
                      "b0 {\n"
                      "  a0 = (f32[8], f32[8]) parameter(0)\n"
                      "  x = f32[8] get-tuple-element(a0), index=0\n"
                      "  ROOT r0 = f32[8] negate(x)\n"
                      "}\n"
                      "b1 {\n"
                      "  a1 = (f32[8], f32[8]) parameter(0)\n"
                      "  y = f32[8] get-tuple-element(a1), index=1\n"
                      "  ROOT r1 = f32[8] exponential(y)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  i = s32[] parameter(0)\n"
                      "  p = f32[8] parameter(1), sharding={devices=[2]0,1}\n"
                      "  q = f32[8] parameter(2)\n"
                      "  t = (f32[8], f32[8]) tuple(p, q)\n"
                      "  ROOT c = f32[8] conditional(i, t, t), branch_computations={b0, b1}\n"
                      "}\n",
                      2);
    const char *t2 = "{devices=[2]0,1}", *tt = "{{devices=[2]0,1}, {devices=[2]0,1}}";
    expect(m, "r0", t2);
    expect(m, "c", t2);
    expect(m, "r1", t2);
    expect(m, "y", t2);
    expect(m, "a1", tt);
    expect(m, "a0", tt);
    expect(m, "t", tt);
    expect(m, "q", t2);
    expect(m, "i", REPL);
    ir_module_free(m);
}

static void test_sort_variadic(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=4\n"
                      "cmp {\n"
                      "  ka = f32[] parameter(0)\n"
                      "  kb = f32[] parameter(1)\n"
                      "  va = s32[] parameter(2)\n"
                      "  vb = s32[] parameter(3)\n"
                      "  ROOT lt = pred[] compare(ka, kb), direction=LT\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  k = f32[8,16] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
                      "  v = s32[8,16] parameter(1)\n"
                      "  ROOT s = (f32[8,16], s32[8,16]) sort(k, v), dimensions={1}, to_apply=cmp\n"
                      "}\n",
                      4);
    const char *d1 = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}";
    expect(m, "s", "{{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}, "
                   "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}}");
    expect(m, "v", d1);
    ir_module_free(m);
}

/* ---- annotations, defaults, maximal, opaque ops ---- */

static void test_annotations_kept(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
                      "  n = f32[8,4] negate(p), sharding={replicated}\n"
                      "  x = f32[8,4] exponential(n), sharding={devices=[1,2]0,1}\n"
                      "  ROOT y = f32[8,4] tanh(x), sharding={maximal device=1}\n"
                      "}\n",
                      2);
    expect(m, "p", "{devices=[2,1]0,1}");
    expect(m, "n", REPL);
    expect(m, "x", "{devices=[1,2]0,1}");
    expect(m, "y", "{maximal device=1}");
    ir_module_free(m);
}

static void test_unannotated_replicated(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t\n"
                      "ENTRY e {\n"
                      "  p = f32[8,4] parameter(0)\n"
                      "  n = f32[8,4] negate(p)\n"
                      "  t = (f32[8,4], f32[8,4]) tuple(p, n)\n"
                      "  ROOT tok = token[] after-all()\n"
                      "}\n",
                      2);
    expect(m, "p", REPL);
    expect(m, "n", REPL);
    expect(m, "t", "{{replicated}, {replicated}}");
    expect(m, "tok", REPL);
    ir_module_free(m);
}

static void test_maximal_does_not_spread(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8] parameter(0), sharding={maximal device=0}\n"
                      "  n = f32[8] negate(p)\n"
                      "  ROOT x = f32[8] exponential(n)\n"
                      "}\n",
                      2);
    expect(m, "p", "{maximal device=0}");
    expect(m, "n", REPL);
    expect(m, "x", REPL);
    ir_module_free(m);
}

static void test_opaque_ops_replicated(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "add {\n"
                      "  a = f32[] parameter(0)\n"
                      "  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n"
                      "}\n"
                      "ENTRY e {\n"
                      "  p = f32[8] parameter(0), sharding={devices=[2]0,1}\n"
                      "  cc = f32[8] custom-call(p), custom_call_target=\"foo\"\n"
                      "  n = f32[8] negate(cc)\n"
                      "  ar = f32[8] all-reduce(p), replica_groups={}, to_apply=add\n"
                      "  pid = u32[] partition-id()\n"
                      "  ROOT o = (f32[8], f32[8], u32[]) tuple(n, ar, pid)\n"
                      "}\n",
                      2);
    expect(m, "cc", REPL);
    expect(m, "n", REPL);
    expect(m, "ar", REPL);
    expect(m, "pid", REPL);
    ir_module_free(m);
}

static void test_unknown_is_filled(void **state)
{
    (void)state;
    IrModule *m = run("HloModule t, num_partitions=2\n"
                      "ENTRY e {\n"
                      "  p = f32[8] parameter(0), sharding={devices=[2]0,1}\n"
                      "  ROOT n = f32[8] negate(p), sharding={unknown}\n"
                      "}\n",
                      2);
    expect(m, "n", "{devices=[2]0,1}");
    ir_module_free(m);
}

/* ---- determinism, size, failures ---- */

static char *all_shardings(IrModule *m)
{
    size_t cap = 1024, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            IrInstr *x = &m->comp[c]->instr[i];
            char *s = x->sharding ? ir_sharding_str(x->sharding) : NULL;
            const char *t = s ? s : "-";
            size_t need = strlen(x->name) + strlen(t) + 3;
            if (n + need >= cap) {
                cap = 2 * (n + need);
                out = realloc(out, cap);
                assert_non_null(out);
            }
            n += (size_t)sprintf(out + n, "%s=%s;", x->name, t);
            ts_free(s);
        }
    return out;
}

static void test_deterministic(void **state)
{
    (void)state;
    IrModule *a = run(WHILE_HLO, 2), *b = run(WHILE_HLO, 2);
    char *sa = all_shardings(a), *sb = all_shardings(b);
    assert_string_equal(sa, sb);
    /* Running again on the result changes nothing (all now annotated). */
    IrDiag d = {0};
    assert_int_equal(propagate(a, 2, &d), IR_OK);
    char *sa2 = all_shardings(a);
    assert_string_equal(sa, sa2);
    free(sa);
    free(sb);
    free(sa2);
    ir_module_free(a);
    ir_module_free(b);
}

/* A 10,000-instruction chain, annotated at one end: forward from the
 * parameter, and (second module) backward from the root. */
static char *chain_text(int n, bool at_root)
{
    size_t cap = (size_t)n * 64 + 256;
    char *t = malloc(cap);
    assert_non_null(t);
    size_t k = (size_t)sprintf(t, "HloModule chain, num_partitions=2\nENTRY e {\n"
                                  "  n0 = f32[8,4] parameter(0)%s\n",
                               at_root ? "" : ", sharding={devices=[2,1]0,1}");
    for (int i = 1; i < n; i++)
        k += (size_t)sprintf(t + k, "  %sn%d = f32[8,4] %s(n%d)%s\n", i == n - 1 ? "ROOT " : "", i,
                             i % 2 ? "negate" : "exponential", i - 1,
                             i == n - 1 && at_root ? ", sharding={devices=[1,2]0,1}" : "");
    sprintf(t + k, "}\n");
    return t;
}

static void test_long_chain(void **state)
{
    (void)state;
    char *t = chain_text(10000, false);
    IrModule *m = run(t, 2);
    expect(m, "n9999", "{devices=[2,1]0,1}");
    expect(m, "n5000", "{devices=[2,1]0,1}");
    ir_module_free(m);
    free(t);
    t = chain_text(10000, true);
    m = run(t, 2);
    expect(m, "n0", "{devices=[1,2]0,1}");
    ir_module_free(m);
    free(t);
}

/* Fail the Nth allocation for every N until propagation succeeds: each
 * failure is IR_ENOMEM, leaves the module unchanged and leaks nothing
 * (checked by the sanitizer and valgrind runs). Modules that go through
 * the while groups, merging and manual regions. */
static void inject(const char *text, const char *probe, const char *want)
{
    IrModule *m = parse(text);
    IrStatus st = IR_ENOMEM;
    long n;
    for (n = 1; n < 100000 && st != IR_OK; n++) {
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        st = propagate(m, 4, &d);
        ts_fail_alloc_after(0);
        if (st != IR_OK) {
            assert_int_equal(st, IR_ENOMEM);
            assert_int_equal(d.status, IR_ENOMEM);
            assert_null(find(m, probe)->sharding);
        }
        ir_diag_clear(&d);
    }
    assert_int_equal(st, IR_OK);
    assert_true(n > 5);
    expect(m, probe, want);
    ir_module_free(m);
}

static void test_failure_injection(void **state)
{
    (void)state;
    inject("HloModule w, num_partitions=4\n"
           "cond {\n"
           "  cp = (s32[], f32[8,4]) parameter(0)\n"
           "  ROOT t = pred[] constant(false)\n"
           "}\n"
           "body {\n"
           "  bp = (s32[], f32[8,4]) parameter(0)\n"
           "  x = f32[8,4] get-tuple-element(bp), index=1\n"
           "  i = s32[] get-tuple-element(bp), index=0\n"
           "  x1 = f32[8,4] add(x, x)\n"
           "  ROOT bt = (s32[], f32[8,4]) tuple(i, x1)\n"
           "}\n"
           "ENTRY e {\n"
           "  p = f32[8,4] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
           "  z = s32[] constant(0)\n"
           "  init = (s32[], f32[8,4]) tuple(z, p)\n"
           "  ROOT w = (s32[], f32[8,4]) while(init), condition=cond, body=body\n"
           "}\n",
           "x1", "{devices=[4,1]0,1,2,3}");
    inject("HloModule t, num_partitions=4\n"
           "ENTRY e {\n"
           "  x = f32[4,16] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
           "  w = f32[16,8] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
           "  d = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           "  ROOT r = f32[8,4] transpose(d), dimensions={1,0}\n"
           "}\n",
           "d", "{devices=[2,2]0,1,2,3}");
    inject("HloModule m, num_partitions=4\n"
           "ENTRY e {\n"
           "  p = f32[8,4] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
           "  fs = f32[2,4] custom-call(p), custom_call_target=\"SPMDFullToShardShape\"\n"
           "  k = f32[] constant(1)\n"
           "  kb = f32[2,4] broadcast(k), dimensions={}\n"
           "  ad = f32[2,4] add(fs, kb)\n"
           "  ROOT sf = f32[8,4] custom-call(ad), custom_call_target=\"SPMDShardToFullShape\", sharding={devices=[4,1]0,1,2,3}\n"
           "}\n",
           "ad", "{manual}");
}

static void test_bad_input(void **state)
{
    (void)state;
    IrDiag d = {0};
    IrModule *m = ir_module_new("empty");
    assert_non_null(m);
    assert_int_equal(shd_propagate(m, NULL, &d), IR_EINPUT);
    ir_diag_clear(&d);
    ir_module_free(m);
    /* A tuple sharding with the wrong number of elements. */
    m = parse("HloModule t, num_partitions=2\n"
              "ENTRY e {\n"
              "  a = f32[8] parameter(0)\n"
              "  ROOT t = (f32[8], f32[8]) tuple(a, a), sharding={{replicated}, {replicated}}\n"
              "}\n");
    IrInstr *t = find(m, "t");
    t->sharding->ntuple = 3;  /* what a bad builder could produce */
    assert_int_equal(propagate(m, 2, &d), IR_EINPUT);
    t->sharding->ntuple = 2;
    ir_diag_clear(&d);
    ir_module_free(m);
}

/* ---- XLA's SPMD partitioner test modules ---- */

static bool reached_rec(const IrModule *m, int32_t c, bool *seen)
{
    if (seen[c])
        return true;
    seen[c] = true;
    const IrComputation *k = m->comp[c];
    for (int32_t i = 0; i < k->ninstr; i++) {
        const IrInstr *x = &k->instr[i];
        if (x->op == OP_CALL || x->op == OP_WHILE || x->op == OP_CONDITIONAL)
            for (int32_t b = 0; b < x->ncalled; b++)
                reached_rec(m, x->called[b], seen);
    }
    return true;
}

/* Propagate every module of the manifest; with `strip`, first drop every
 * annotation except those of entry parameters (the modules are nearly fully
 * annotated, so this is what drives the rules over XLA's real graphs). */
static void conformance(bool strip)
{
    const char *dir = TESSEL_SHARED_DIR "/conformance/xla_spmd";
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        skip();
    char line[8192];
    int nmod = 0, nparse_fail = 0, nrejected = 0;
    assert_non_null(fgets(line, sizeof line, f)); /* header */
    while (fgets(line, sizeof line, f)) {
        char file[1024], test[1024];
        long long ndev;
        if (sscanf(line, "%1023[^\t]\t%1023[^\t]\t%lld", file, test, &ndev) != 3)
            continue;
        snprintf(path, sizeof path, "%s/modules/%s", dir, file);
        IrParseOptions o = ir_default_parse_options();
        IrModule *m = NULL;
        IrDiag d = {0};
        if (ir_parse_file(path, &o, &m, &d) != IR_OK) {
            nparse_fail++;   /* the parser's business, not propagation's */
            ir_diag_clear(&d);
            continue;
        }
        nmod++;
        if (strip)
            for (int32_t c = 0; c < m->ncomp; c++)
                for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
                    IrInstr *x = &m->comp[c]->instr[i];
                    if (!(c == m->entry && x->op == OP_PARAMETER))
                        x->sharding = NULL;
                }
        ShdPropagateOptions po = {.num_devices = ndev};
        IrStatus st = shd_propagate(m, &po, &d);
        if (st != IR_OK && strcmp(test, "SubgroupIllegalManualAllReduce") == 0) {
            nrejected++;   /* meant to be rejected */
            ir_diag_clear(&d);
            ir_module_free(m);
            continue;
        }
        if (st != IR_OK)
            print_error("%s: %s\n", file, d.msg ? d.msg : "?");
        assert_int_equal(st, IR_OK);
        bool *seen = calloc((size_t)m->ncomp + 1, 1);
        assert_non_null(seen);
        reached_rec(m, m->entry, seen);
        for (int32_t c = 0; c < m->ncomp; c++) {
            if (!seen[c])
                continue;
            for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
                IrInstr *x = &m->comp[c]->instr[i];
                if (!x->sharding)
                    print_error("%s: %s has no sharding\n", file, x->name);
                assert_non_null(x->sharding);
                if (ir_sharding_validate(x->sharding, &x->shape, ndev, &d, NULL, NULL, x->pos) !=
                    IR_OK)
                    print_error("%s: %s: %s\n", file, x->name, d.msg ? d.msg : "?");
                assert_int_equal(d.status, IR_OK);
                if (x->shape.type == IR_TUPLE)
                    assert_int_equal(x->sharding->kind, SHD_TUPLE);
            }
        }
        free(seen);
        ir_diag_clear(&d);
        ir_module_free(m);
    }
    fclose(f);
    fprintf(stderr, "conformance%s: %d modules propagated, %d rejected as meant, %d not parsed\n",
            strip ? " (stripped)" : "", nmod, nrejected, nparse_fail);
    assert_true(nmod > 0);
}

static void test_conformance(void **state)
{
    (void)state;
    conformance(false);
}

static void test_conformance_stripped(void **state)
{
    (void)state;
    conformance(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_forward),
        cmocka_unit_test(test_elementwise_backward),
        cmocka_unit_test(test_select_clamp_scalars),
        cmocka_unit_test(test_broadcast_forward),
        cmocka_unit_test(test_broadcast_backward),
        cmocka_unit_test(test_broadcast_prefers_users),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_reshape_no_crossing),
        cmocka_unit_test(test_reduce_forward),
        cmocka_unit_test(test_reduce_backward_and_variadic),
        cmocka_unit_test(test_dot_megatron),
        cmocka_unit_test(test_dot_backward_and_batch),
        cmocka_unit_test(test_dot_merges_operands),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_grouped),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_gather_merge),
        cmocka_unit_test(test_scatter),
        cmocka_unit_test(test_gather_batching),
        cmocka_unit_test(test_scatter_batching),
        cmocka_unit_test(test_slicing_ops),
        cmocka_unit_test(test_iota_constant_backward),
        cmocka_unit_test(test_while),
        cmocka_unit_test(test_while_from_body),
        cmocka_unit_test(test_while_conflicting_annotations),
        cmocka_unit_test(test_conditional),
        cmocka_unit_test(test_call),
        cmocka_unit_test(test_tuples),
        cmocka_unit_test(test_manual_region),
        cmocka_unit_test(test_manual_boundaries),
        cmocka_unit_test(test_conflict_order),
        cmocka_unit_test(test_conflict_bytes),
        cmocka_unit_test(test_conflict_more_tiles_and_merge),
        cmocka_unit_test(test_partial_manual),
        cmocka_unit_test(test_shard_as),
        cmocka_unit_test(test_reduce_window_and_barrier),
        cmocka_unit_test(test_conditional_indexed),
        cmocka_unit_test(test_sort_variadic),
        cmocka_unit_test(test_annotations_kept),
        cmocka_unit_test(test_unannotated_replicated),
        cmocka_unit_test(test_maximal_does_not_spread),
        cmocka_unit_test(test_opaque_ops_replicated),
        cmocka_unit_test(test_unknown_is_filled),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_failure_injection),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_conformance_stripped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
