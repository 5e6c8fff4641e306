/*
 * test_spmd_conv.c: the partitioner's convolution, reduce-window and
 * select-and-scatter handlers (partition/spmd_conv.c, spmd_window.c).
 *
 * The oracle model files (tests/models/conv_*.hlo, window_*.hlo) check
 * that partitioned runs equal the reference; here: the halo plan's numbers
 * worked out by hand, which cases are handled and which fall back (the
 * plan's fallback list), what collectives they insert, and out-of-memory at
 * every allocation of a halo partitioning (an error, never a crash, and
 * never a program that fails to verify).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "partition/spmd_internal.h"

/* ---- spmd_halo_plan ---- */

static IrWindowDim wdim(int64_t size, int64_t stride, int64_t lo, int64_t hi, int64_t ld, int64_t rd)
{
    return (IrWindowDim){.size = size, .stride = stride, .pad_lo = lo, .pad_hi = hi,
                         .lhs_dilate = ld, .rhs_dilate = rd};
}

/* In = Out = 8, size 3, pad 1_1, 2 tiles: shards of 4 rows, each output
 * shard reads 6 rows: a_0 = -1, a_1 = 3; one row from each side. */
static void test_plan_same_conv(void **state)
{
    (void)state;
    IrWindowDim w = wdim(3, 1, 1, 1, 1, 1);
    SpmdHalo h;
    assert_true(spmd_halo_plan(8, 8, 2, &w, &h));
    assert_int_equal(h.si, 4);
    assert_int_equal(h.so, 4);
    assert_int_equal(h.L, 6);
    assert_int_equal(h.lo, 1);
    assert_int_equal(h.hi, 1);
    assert_int_equal(h.lo_ex, 1);
    assert_int_equal(h.hi_ex, 1);
}

/* In = 15, size 3, stride 2, pad 1_1: Out = (15+2-3)/2+1 = 8; 3 tiles:
 * si = 5, so = 3, L = 2*2+3 = 7. a_j = 6j-1, own start 5j:
 *   j=0: left 0-(-1) = 1, right -1+7-5 = 1
 *   j=1: left 5-5 = 0,    right 5+7-10 = 2
 *   j=2: left 10-11 < 0,  right 11+7-15 = 3 (its 2 valid outputs read up
 *        to row 11+2+3 = 16, clipped to 15: within its own shard). */
static void test_plan_strided_uneven(void **state)
{
    (void)state;
    IrWindowDim w = wdim(3, 2, 1, 1, 1, 1);
    SpmdHalo h;
    assert_true(spmd_halo_plan(15, 8, 3, &w, &h));
    assert_int_equal(h.si, 5);
    assert_int_equal(h.so, 3);
    assert_int_equal(h.L, 7);
    assert_int_equal(h.lo, 1);
    assert_int_equal(h.hi, 3);
    assert_int_equal(h.lo_ex, 1);
    assert_int_equal(h.hi_ex, 3);
}

/* Negative padding: In = 10, size 3, pad -1_-1: Out = 10-2-3+1 = 6; 2
 * tiles: si = 5, so = 3, L = 5; a_0 = 1 (needs nothing on the left),
 * right 1+5-5 = 1; a_1 = 4, left 5-4 = 1, right 4+5-10 < 0. */
static void test_plan_negative_padding(void **state)
{
    (void)state;
    IrWindowDim w = wdim(3, 1, -1, -1, 1, 1);
    SpmdHalo h;
    assert_true(spmd_halo_plan(10, 6, 2, &w, &h));
    assert_int_equal(h.L, 5);
    assert_int_equal(h.lo, 1);
    assert_int_equal(h.hi, 1);
}

/* Padding wider than a shard: In = 4, size 1, pad 3_0 → Out = 7; 2 tiles:
 * si = 2, so = 4, L = 4; a_0 = -3: 3 rows on the left, of which only 2
 * can come from a neighbour (there is none: they are padding); a_1 = 1,
 * own 2: left 1, right 1+4-4 = 1. lo = 3, exchanged 2. */
static void test_plan_wide_padding(void **state)
{
    (void)state;
    IrWindowDim w = wdim(1, 1, 3, 0, 1, 1);
    SpmdHalo h;
    assert_true(spmd_halo_plan(4, 7, 2, &w, &h));
    assert_int_equal(h.lo, 3);
    assert_int_equal(h.lo_ex, 2);
    assert_int_equal(h.hi, 1);
    assert_int_equal(h.hi_ex, 1);
}

/* Not possible: base dilation; a window of 7 over shards of 2 (device 2
 * of 4 reads rows from 1 to 7, three rows left of its shard [4, 6)); one
 * tile (nothing to exchange). */
static void test_plan_refused(void **state)
{
    (void)state;
    SpmdHalo h;
    IrWindowDim dil = wdim(3, 1, 1, 1, 2, 1);
    assert_false(spmd_halo_plan(8, 17, 2, &dil, &h));
    IrWindowDim wide = wdim(7, 1, 3, 3, 1, 1);
    assert_false(spmd_halo_plan(8, 8, 4, &wide, &h));
    assert_true(spmd_halo_plan(8, 8, 2, &wide, &h)); /* shards of 4 reach far enough */
    IrWindowDim w = wdim(3, 1, 1, 1, 1, 1);
    assert_false(spmd_halo_plan(8, 8, 1, &w, &h));
}

/* ---- handled or fallback: the plan's fallback list ---- */

typedef struct Outcome {
    IrStatus st;
    int32_t nfallback;
    int32_t permutes, gathers, reduces;
} Outcome;

static Outcome partition(const char *text, int64_t n)
{
    Outcome o = {0};
    IrDiag d = {0};
    IrModule *m = NULL;
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    if ((o.st = ir_parse("t.hlo", text, strlen(text), &po, &m, &d)) != IR_OK) {
        char *msg = ir_diag_format(&d, "t");
        print_message("%s", msg ? msg : "?");
        ts_free(msg);
        ir_diag_clear(&d);
        return o;
    }
    SpmdOptions opt = {.num_partitions = n, .num_replicas = 1};
    SpmdReport rep = {0};
    IrModule *out = NULL;
    o.st = spmd_partition(m, &opt, &out, &rep, &d);
    if (o.st == IR_OK) {
        o.nfallback = rep.nfallback;
        for (int32_t k = 0; k < rep.ncoll; k++) {
            o.permutes += rep.coll[k].op == OP_COLLECTIVE_PERMUTE;
            o.gathers += rep.coll[k].op == OP_ALL_GATHER;
            o.reduces += rep.coll[k].op == OP_ALL_REDUCE;
        }
        IrLimits lim = ir_default_limits();
        assert_int_equal(ir_verify(out, &lim, &d), IR_OK);
    }
    ir_diag_clear(&d);
    spmd_report_free(&rep);
    ir_module_free(out);
    ir_module_free(m);
    return o;
}

static void test_conv_batch_local(void **state)
{
    (void)state;
    Outcome o = partition(
        "HloModule m, num_partitions=2\n"
        "ENTRY e {\n"
        "  x = f32[4,9,9,2] parameter(0), sharding={devices=[2,1,1,1]0,1}\n"
        "  k = f32[3,3,2,3] parameter(1), sharding={replicated}\n"
        "  ROOT c = f32[4,9,9,3] convolution(x, k), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f, sharding={devices=[2,1,1,1]0,1}\n"
        "}\n", 2);
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.permutes + o.gathers + o.reduces, 0);
}

static void test_conv_spatial_halo(void **state)
{
    (void)state;
    Outcome o = partition(
        "HloModule m, num_partitions=2\n"
        "ENTRY e {\n"
        "  x = f32[1,8,4,1] parameter(0), sharding={devices=[1,2,1,1]0,1}\n"
        "  k = f32[3,3,1,1] parameter(1), sharding={replicated}\n"
        "  ROOT c = f32[1,8,4,1] convolution(x, k), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f, sharding={devices=[1,2,1,1]0,1}\n"
        "}\n", 2);
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.permutes, 2);
    assert_int_equal(o.gathers, 0);
}

/* Base dilation on the tiled dim: the convolution falls back. */
static void test_conv_base_dilation_falls_back(void **state)
{
    (void)state;
    Outcome o = partition(
        "HloModule m, num_partitions=2\n"
        "ENTRY e {\n"
        "  x = f32[1,8,2] parameter(0), sharding={devices=[1,2,1]0,1}\n"
        "  k = f32[3,2,2] parameter(1), sharding={replicated}\n"
        "  ROOT c = f32[1,17,2] convolution(x, k), window={size=3 pad=2_2 lhs_dilate=2}, "
        "dim_labels=b0f_0io->b0f, sharding={devices=[1,2,1]0,1}\n"
        "}\n", 2);
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 1);
}

static const char *const WINDOW_COMPS =
    "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
    "ge {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
    " ROOT c = pred[] compare(a, b), direction=GE\n}\n"
    /* Not a simple reducer: a + 2b (its identity is unknown). */
    "odd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n t = f32[] add(b, b)\n"
    " ROOT s = f32[] add(a, t)\n}\n";

static Outcome window(const char *entry)
{
    char text[4096];
    snprintf(text, sizeof text, "HloModule m, num_partitions=2\n%sENTRY e {\n"
             "  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}\n"
             "  z = f32[] constant(0)\n%s}\n", WINDOW_COMPS, entry);
    return partition(text, 2);
}

static void test_window_handled_or_not(void **state)
{
    (void)state;
    /* Halo with a simple reducer: handled, one row from each side. */
    Outcome o = window("  ROOT r = f32[8,4] reduce-window(x, z), window={size=3x1 pad=1_1x0_0}, "
                       "to_apply=add, sharding={devices=[2,1]0,1}\n");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.permutes, 2);
    /* Same window, a reducer whose identity is unknown: fallback. */
    o = window("  ROOT r = f32[8,4] reduce-window(x, z), window={size=3x1 pad=1_1x0_0}, "
               "to_apply=odd, sharding={devices=[2,1]0,1}\n");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 1);
    /* Window on the untiled dim only, any reducer: local. */
    o = window("  ROOT r = f32[8,2] reduce-window(x, z), window={size=1x2 stride=1x2}, "
               "to_apply=odd, sharding={devices=[2,1]0,1}\n");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.permutes + o.gathers, 0);
    /* select-and-scatter: local when the tiled dim's window is 1, else
     * fallback. */
    o = window("  s = f32[8,2] parameter(1), sharding={devices=[2,1]0,1}\n"
               "  ROOT g = f32[8,4] select-and-scatter(x, s, z), window={size=1x2 stride=1x2}, "
               "select=ge, scatter=add, sharding={devices=[2,1]0,1}\n");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.permutes + o.gathers, 0);
    o = window("  s = f32[4,4] parameter(1), sharding={devices=[2,1]0,1}\n"
               "  ROOT g = f32[8,4] select-and-scatter(x, s, z), window={size=2x1 stride=2x1}, "
               "select=ge, scatter=add, sharding={devices=[2,1]0,1}\n");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 1);
}

/* Every allocation of partitioning a 2-D halo convolution and a pooling
 * fails in turn: each run returns IR_OK with a program that verifies or
 * IR_ENOMEM, and nothing leaks (valgrind/ASan runs of this test). */
static void test_out_of_memory(void **state)
{
    (void)state;
    const char *text =
        "HloModule m, num_partitions=4\n"
        "max {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b)\n}\n"
        "ENTRY e {\n"
        "  x = f32[1,7,9,2] parameter(0), sharding={devices=[1,2,2,1]0,1,2,3}\n"
        "  k = f32[3,3,2,1] parameter(1), sharding={replicated}\n"
        "  c = f32[1,7,9,1] convolution(x, k), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f, sharding={devices=[1,2,2,1]0,1,2,3}\n"
        "  n = f32[] constant(-inf)\n"
        "  ROOT p = f32[1,4,5,1] reduce-window(c, n), window={size=1x3x3x1 stride=1x2x2x1 "
        "pad=0_0x1_1x1_1x0_0}, to_apply=max, sharding={devices=[1,2,2,1]0,1,2,3}\n"
        "}\n";
    IrDiag d = {0};
    IrModule *m = NULL;
    IrParseOptions po = ir_default_parse_options();
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    SpmdOptions opt = {.num_partitions = 4, .num_replicas = 1};
    int failures = 0;
    for (long k = 1; k < 100000; k++) {
        IrModule *out = NULL;
        SpmdReport rep = {0};
        ts_fail_alloc_after(k);
        IrStatus st = spmd_partition(m, &opt, &out, &rep, &d);
        ts_fail_alloc_after(0);
        spmd_report_free(&rep);
        if (st == IR_OK) {
            IrLimits lim = ir_default_limits();
            IrDiag vd = {0};
            assert_int_equal(ir_verify(out, &lim, &vd), IR_OK);
            ir_diag_clear(&vd);
            ir_module_free(out);
            ir_diag_clear(&d);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_null(out);
        failures++;
        ir_diag_clear(&d);
    }
    print_message("out of memory at %d allocations handled\n", failures);
    assert_true(failures > 10); /* the loop did test something (arenas allocate in blocks) */
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_same_conv),
        cmocka_unit_test(test_plan_strided_uneven),
        cmocka_unit_test(test_plan_negative_padding),
        cmocka_unit_test(test_plan_wide_padding),
        cmocka_unit_test(test_plan_refused),
        cmocka_unit_test(test_conv_batch_local),
        cmocka_unit_test(test_conv_spatial_halo),
        cmocka_unit_test(test_conv_base_dilation_falls_back),
        cmocka_unit_test(test_window_handled_or_not),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
