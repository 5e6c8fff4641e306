/*
 * test_spmd_partial.c: partial results finished with reduce-scatters
 * (partition/spmd_partial.c).
 *
 * Hand-made modules whose partial sums (a dot's sharded contracting dim, a
 * reduce over a sharded dim) end sharded: the plan's collectives, their
 * kinds, replica groups and bytes per device, each worked out by hand in
 * the comment above its test; the cases that stay an all-reduce; the
 * dot's choice between gathering its operands and summing partials; and
 * a transpose of a finished dot moved before its all-reduce
 * (spmd_sink.c), and a dot read only through transposes with its operands
 * swapped (spmd_swap.c). The
 * oracle runs of the same shapes (partitioned equals --reference, on 2 to 8
 * devices and under mpirun) are tests/e2e/reduce_scatter.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "partition/spmd_internal.h"

#define MAXC 8

typedef struct Coll {
    IrOpcode op;
    char groups[256];
    int64_t bytes;
} Coll;

typedef struct Outcome {
    IrStatus st;
    int32_t ncoll;
    Coll c[MAXC];
    int32_t nfallback;
} Outcome;

/* Parse, propagate, partition for n partitions; the collectives in order. */
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
    ShdPropagateOptions popt = {.num_devices = n};
    SpmdOptions opt = {.num_partitions = n, .num_replicas = 1};
    SpmdReport rep = {0};
    IrModule *out = NULL;
    o.st = shd_propagate(m, &popt, &d);
    if (o.st == IR_OK)
        o.st = spmd_partition(m, &opt, &out, &rep, &d);
    if (o.st == IR_OK) {
        o.nfallback = rep.nfallback;
        o.ncoll = rep.ncoll;
        for (int32_t k = 0; k < rep.ncoll && k < MAXC; k++) {
            o.c[k].op = rep.coll[k].op;
            snprintf(o.c[k].groups, sizeof o.c[k].groups, "%s", rep.coll[k].replica_groups);
            o.c[k].bytes = rep.coll[k].bytes_per_device;
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

static void expect(const Outcome *o, int32_t k, IrOpcode op, const char *groups, int64_t bytes)
{
    assert_true(k < o->ncoll);
    assert_int_equal(o->c[k].op, op);
    assert_string_equal(o->c[k].groups, groups);
    assert_int_equal(o->c[k].bytes, bytes);
}

/* y[r,c] = a[r,k] . b[k,c] on n partitions, with the three shardings. */
static Outcome dot(int64_t n, int64_t r, int64_t k, int64_t c, const char *as, const char *bs, const char *ys)
{
    char text[1024];
    snprintf(text, sizeof text,
             "HloModule m, num_partitions=%lld\n"
             "ENTRY e {\n"
             "  a = f32[%lld,%lld] parameter(0), sharding=%s\n"
             "  b = f32[%lld,%lld] parameter(1), sharding=%s\n"
             "  ROOT y = f32[%lld,%lld] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
             "sharding=%s\n"
             "}\n",
             (long long)n, (long long)r, (long long)k, as, (long long)k, (long long)c, bs, (long long)r,
             (long long)c, ys);
    return partition(text, n);
}

/* The dot: y[8,8] = a[8,16] . b[16,8], the contracting dim in 2,
 * y in rows. Each device's partial sums are f32[8,8] = 256 bytes; one
 * reduce-scatter along dim 0 over {0,1} receives half: 128 (the all-reduce
 * and slice it replaces: 2 * 256 * 1/2 = 256). */
static void test_dot_contracting_to_rows(void **state)
{
    (void)state;
    Outcome o = dot(2, 8, 16, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]0,1}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,1}}", 128);
}

/* Device order reversed in the result: y {devices=[2,1]1,0}: device 1
 * gets rows 0-3, so the group lists it first: {1,0}. */
static void test_dot_reversed_order(void **state)
{
    (void)state;
    Outcome o = dot(2, 8, 16, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]1,0}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{1,0}}", 128);
}

/* A 2-D mesh (data 2 x model 4, devices row-major): x[16,32] tiles batch
 * on data and the contracting dim on model, w[32,24] the contracting dim
 * on model (replicated over data), y[16,24] batch on data and columns on
 * model. The partial sums f32[8,24] (768 bytes) of the model groups
 * {0,1,2,3}, {4,5,6,7} are cut in 4 column blocks, device p's block p % 4:
 * one reduce-scatter along dim 1, 768 * 3/4 = 576 bytes. */
static void test_dot_2d_mesh(void **state)
{
    (void)state;
    Outcome o = dot(8, 16, 32, 24, "{devices=[2,4]<=[8]}",
                    "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}", "{devices=[2,4]<=[8]}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,1,2,3},{4,5,6,7}}", 576);
}

/* Partial replication in the result: the contracting dim in 4 (group
 * {0,1,2,3}), y {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}: rows
 * 0-3 on {0,1}, rows 4-7 on {2,3}. K = 2 pieces, R = 2 copies: pieces
 * f = 0,0,1,1, copies r = 0,1,0,1. Reduce-scatter along dim 0 over the
 * members of one copy, {0,2} and {1,3}: f32[8,8] (256 bytes) * 1/2 = 128;
 * then all-reduce of f32[4,8] (128 bytes) over the copies of one piece,
 * {0,1} and {2,3}: 2 * 128 * 1/2 = 128. 256 in all, where the all-reduce
 * of the whole group moved 2 * 256 * 3/4 = 384. */
static void test_dot_partially_replicated_result(void **state)
{
    (void)state;
    Outcome o = dot(4, 8, 16, 8, "{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}",
                    "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 2);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,2},{1,3}}", 128);
    expect(&o, 1, OP_ALL_REDUCE, "{{0,1},{2,3}}", 128);
}

/* A batched dot whose lhs holds a batch dim whole (replicated over the
 * mesh's second axis) and whose rhs and result tile it over that axis
 * (Mamba's scan output h [B,T,E,N] . C [B,T,N] on 2x4): the result's
 * tiling cuts the lhs's shard locally, no collective. Priced as an
 * all-gather, the cut lost to gathering the rhs (64 bytes) and slicing
 * the result. */
static void test_dot_cuts_replicated_operand(void **state)
{
    (void)state;
    Outcome o = partition(
        "HloModule m\n"
        "ENTRY e {\n"
        "  a = f32[4,8,16,4] parameter(0), sharding={devices=[4,1,1,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}\n"
        "  b = f32[4,8,4] parameter(1), sharding={devices=[4,2,1]0,4,1,5,2,6,3,7}\n"
        "  ROOT d = f32[4,8,16] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1},"
        " rhs_contracting_dims={2}, sharding={devices=[4,2,1]0,4,1,5,2,6,3,7}\n"
        "}\n",
        8);
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.ncoll, 0);
}

/* Two cut dims: the contracting dim in 4, y {devices=[2,2]0,1,2,3}:
 * device p holds block (p / 2, p % 2), piece f = p. Reduce-scatter along
 * dim 0 over the members agreeing in f_1: {0,2}, {1,3}: 256 * 1/2 = 128;
 * then along dim 1 over those agreeing in f_0: {0,1}, {2,3}: f32[4,8]
 * (128 bytes) * 1/2 = 64. 192 = 256 * 3/4, one reduce-scatter's worth. */
static void test_dot_two_cut_dims(void **state)
{
    (void)state;
    Outcome o = dot(4, 8, 16, 8, "{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{devices=[2,2]0,1,2,3}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 2);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,2},{1,3}}", 128);
    expect(&o, 1, OP_REDUCE_SCATTER, "{{0,1},{2,3}}", 64);
}

/* Uneven: y[7,8] in 2 row tiles of 4 (the last with a row of padding).
 * The partial sums f32[7,8] are padded to f32[8,8] (256 bytes) and
 * reduce-scattered: 128. On 3 devices, rows 7 in 3 tiles of 3: padded to
 * f32[9,8] (288 bytes), 288 * 2/3 = 192. */
static void test_dot_uneven(void **state)
{
    (void)state;
    Outcome o = dot(2, 7, 16, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]0,1}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,1}}", 128);
    o = dot(3, 7, 15, 8, "{devices=[1,3]0,1,2}", "{devices=[3,1]0,1,2}", "{devices=[3,1]0,1,2}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,1,2}}", 192);
}

/* A reduce over a sharded dim whose result is sharded finer: x[8,16]
 * {devices=[2,2]0,1,2,3}, sum over dim 1, result f32[8] {devices=[4]}:
 * the partial sums f32[4] (16 bytes) of the groups {0,1}, {2,3} (dim 1's
 * tiles) are cut in 2, device p's piece p % 2: reduce-scatter along dim 0,
 * 16 * 1/2 = 8. */
static void test_reduce_to_finer(void **state)
{
    (void)state;
    Outcome o = partition("HloModule m, num_partitions=4\n"
                          "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
                          "ENTRY e {\n"
                          "  x = f32[8,16] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
                          "  z = f32[] constant(0)\n"
                          "  ROOT r = f32[8] reduce(x, z), dimensions={1}, to_apply=add, "
                          "sharding={devices=[4]0,1,2,3}\n"
                          "}\n",
                          4);
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.nfallback, 0);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_REDUCE_SCATTER, "{{0,1},{2,3}}", 8);
}

/* Stays an all-reduce: the result replicated (Megatron's second matmul),
 * and a result whose tiles do not nest in the partial's (y[10,8] partial
 * in 2 row tiles of 5, wanted in 4 of 3: tile 1, rows 3-5, straddles). */
static void test_stays_all_reduce(void **state)
{
    (void)state;
    Outcome o = dot(2, 8, 16, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{replicated}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_ALL_REDUCE, "{{0,1}}", 256);
    o = dot(4, 10, 16, 8, "{devices=[2,2]0,1,2,3}", "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}",
            "{devices=[4,1]0,1,2,3}");
    assert_int_equal(o.st, IR_OK);
    assert_true(o.ncoll >= 1);
    for (int32_t k = 0; k < o.ncoll; k++)
        assert_int_not_equal(o.c[k].op, OP_REDUCE_SCATTER);
}

/* The local dot's work counts (spmd_dot.c, work_cost). y[512,512] =
 * a[512,384] . b[384,512], the contracted dim tiled on both sides, y
 * replicated: gathering both operands moves 786,432 + 786,432 bytes and
 * computes all of y on each device (100.7 M multiply-adds); the local dot
 * (50.3 M) and one all-reduce of its 1 MiB partial sums cost 2 MiB, less
 * once the 50.3 M multiply-adds saved weigh 1.26 MB (1/40 byte each at 10
 * Gb/s). Bytes alone chose the gathers. A small dot keeps them:
 * y[64,64] = a[64,32] . b[32,64], gathers of 16 KiB against an
 * all-reduce of 32 KiB, 65,536 multiply-adds weighing 1.6 KB. */
static void test_dot_work_counts(void **state)
{
    (void)state;
    Outcome o = dot(2, 512, 384, 512, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{replicated}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 1);
    expect(&o, 0, OP_ALL_REDUCE, "{{0,1}}", 512 * 512 * 4);
    o = dot(2, 64, 32, 64, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{replicated}");
    assert_int_equal(o.st, IR_OK);
    assert_int_equal(o.ncoll, 2);
    assert_int_equal(o.c[0].op, OP_ALL_GATHER);
    assert_int_equal(o.c[1].op, OP_ALL_GATHER);
}

/* The entry of text partitioned for 2 devices; the opcodes of the root's
 * operand `leaf` (the root itself when -1) and the chain of first
 * operands below it, into ops[0..3). */
/* text parsed into *m and partitioned on 2 devices into *out (verified). */
static const IrComputation *partition2(const char *text, IrModule **m, IrModule **out)
{
    IrDiag d = {0};
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &po, m, &d), IR_OK);
    ShdPropagateOptions popt = {.num_devices = 2};
    SpmdOptions opt = {.num_partitions = 2, .num_replicas = 1};
    assert_int_equal(shd_propagate(*m, &popt, &d), IR_OK);
    assert_int_equal(spmd_partition(*m, &opt, out, NULL, &d), IR_OK);
    IrLimits lim = ir_default_limits();
    assert_int_equal(ir_verify(*out, &lim, &d), IR_OK);
    ir_diag_clear(&d);
    return ir_entry(*out);
}

static void chain_below(const char *text, int32_t leaf, IrOpcode ops[3])
{
    IrModule *m = NULL, *out = NULL;
    const IrComputation *c = partition2(text, &m, &out);
    int32_t i = leaf < 0 ? c->root : c->instr[c->root].opnd[leaf];
    for (int k = 0; k < 3; k++) {
        ops[k] = c->instr[i].op;
        i = c->instr[i].nopnd > 0 ? c->instr[i].opnd[0] : i;
    }
    ir_module_free(out);
    ir_module_free(m);
}

/* JAX's weight gradient transpose(dot(g, x)) with the batch (contracted)
 * sharded: the all-reduce of the partial sums comes after the transpose
 * (spmd_sink.c), so the executor runs transpose(dot) as one GEMM. Not when
 * the dot is used again (the transpose would not fold) or the transpose
 * does not swap the dot's free dims. */
static void test_transpose_before_all_reduce(void **state)
{
    (void)state;
    IrOpcode ops[3];
    chain_below("HloModule m\nENTRY e {\n"
                "  g = f32[256,12] parameter(0), sharding={devices=[2,1]0,1}\n"
                "  x = f32[256,16] parameter(1), sharding={devices=[2,1]0,1}\n"
                "  dw = f32[12,16] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                "  ROOT tw = f32[16,12] transpose(dw), dimensions={1,0}, sharding={replicated}\n}\n",
                -1, ops);
    assert_int_equal(ops[0], OP_ALL_REDUCE);
    assert_int_equal(ops[1], OP_TRANSPOSE);
    assert_int_equal(ops[2], OP_DOT);
    chain_below("HloModule m\nENTRY e {\n"
                "  g = f32[256,12] parameter(0), sharding={devices=[2,1]0,1}\n"
                "  x = f32[256,16] parameter(1), sharding={devices=[2,1]0,1}\n"
                "  dw = f32[12,16] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                "  tw = f32[16,12] transpose(dw), dimensions={1,0}\n"
                "  ROOT r = (f32[16,12], f32[12,16]) tuple(tw, dw), sharding={{replicated}, {replicated}}\n}\n",
                0, ops);
    assert_int_equal(ops[0], OP_TRANSPOSE);
    assert_int_equal(ops[1], OP_ALL_REDUCE);
    assert_int_equal(ops[2], OP_DOT);
    chain_below("HloModule m\nENTRY e {\n"
                "  g = f32[256,2,6] parameter(0), sharding={devices=[2,1,1]0,1}\n"
                "  x = f32[256,16] parameter(1), sharding={devices=[2,1]0,1}\n"
                "  dw = f32[2,6,16] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                "  ROOT tw = f32[6,2,16] transpose(dw), dimensions={1,0,2}, sharding={replicated}\n}\n",
                -1, ops);
    assert_int_equal(ops[0], OP_TRANSPOSE);
    assert_int_equal(ops[1], OP_ALL_REDUCE);
}

/* Partition text on 2 devices; in the entry, the instruction named `name`
 * copied out (its operands' names in opnd[2], its dims in dims, its
 * dimensions= list in perm; ranks at most 4). */
typedef struct Seen {
    IrOpcode op;
    char opnd[2][32];
    int32_t rank, nperm;
    int64_t dims[4], perm[4];
} Seen;

static void seen_after(const char *text, const char *const names[], int32_t n, Seen *out)
{
    IrModule *m = NULL, *res = NULL;
    const IrComputation *c = partition2(text, &m, &res);
    for (int32_t k = 0; k < n; k++) {
        int32_t i = 0;
        while (i < c->ninstr && strcmp(c->instr[i].name, names[k]) != 0)
            i++;
        assert_true(i < c->ninstr);
        const IrInstr *ins = &c->instr[i];
        Seen *s = &out[k];
        memset(s, 0, sizeof *s);
        s->op = ins->op;
        for (int32_t j = 0; j < ins->nopnd && j < 2; j++)
            snprintf(s->opnd[j], sizeof s->opnd[j], "%s", c->instr[ins->opnd[j]].name);
        assert_true(ins->shape.rank <= 4 && ins->a.dimensions.n <= 4);
        s->rank = ins->shape.rank;
        memcpy(s->dims, ins->shape.dims, (size_t)s->rank * sizeof *s->dims);
        s->nperm = ins->a.dimensions.n;
        if (s->nperm > 0)
            memcpy(s->perm, ins->a.dimensions.v, (size_t)s->nperm * sizeof *s->perm);
    }
    ir_module_free(res);
    ir_module_free(m);
}

/* JAX's q projection, dot(wq[D,H,Dh], x[B,S,D]) to [H,Dh,B,S] read by a
 * transpose to [B,H,S,Dh], heads sharded: both GEMM operands would be
 * transposed, so the dot computes dot(x, wq) to [B,S,H/2,Dh] and the
 * transpose's {2,0,3,1} becomes {0,2,1,3} (spmd_swap.c). Not when the dot
 * is also read whole, nor when its GEMM reads x plain (x's contracted dim
 * not its innermost), nor when a transpose swaps its free dims. */
static void test_dot_swapped_for_transposes(void **state)
{
    (void)state;
    static const char *const names[] = {"q", "tq"};
    Seen s[2];
    seen_after("HloModule m\nENTRY e {\n"
               "  x = f32[2,8,16] parameter(0), sharding={replicated}\n"
               "  wq = f32[16,4,4] parameter(1), sharding={devices=[1,2,1]0,1}\n"
               "  q = f32[4,4,2,8] dot(wq, x), lhs_contracting_dims={0}, rhs_contracting_dims={2}\n"
               "  ROOT tq = f32[2,4,8,4] transpose(q), dimensions={2,0,3,1}, sharding={devices=[1,2,1,1]0,1}\n}\n",
               names, 2, s);
    assert_int_equal(s[0].op, OP_DOT);
    assert_string_equal(s[0].opnd[0], "x");
    assert_string_equal(s[0].opnd[1], "wq");
    assert_int_equal(s[0].rank, 4);
    const int64_t dims[4] = {2, 8, 2, 4}, perm[4] = {0, 2, 1, 3};
    assert_memory_equal(s[0].dims, dims, sizeof dims);
    assert_int_equal(s[1].op, OP_TRANSPOSE);
    assert_int_equal(s[1].nperm, 4);
    assert_memory_equal(s[1].perm, perm, sizeof perm);
    /* Read whole too: unchanged. */
    seen_after("HloModule m\nENTRY e {\n"
               "  x = f32[2,8,16] parameter(0), sharding={replicated}\n"
               "  wq = f32[16,4,4] parameter(1), sharding={replicated}\n"
               "  q = f32[4,4,2,8] dot(wq, x), lhs_contracting_dims={0}, rhs_contracting_dims={2}\n"
               "  tq = f32[2,4,8,4] transpose(q), dimensions={2,0,3,1}\n"
               "  ROOT r = (f32[2,4,8,4], f32[4,4,2,8]) tuple(tq, q), sharding={{replicated}, {replicated}}\n}\n",
               names, 2, s);
    assert_string_equal(s[0].opnd[0], "wq");
    const int64_t perm0[4] = {2, 0, 3, 1};
    assert_memory_equal(s[1].perm, perm0, sizeof perm0);
    /* x read as x^T [16, 2*8] (contracted dim first): the GEMM's rhs is
     * plain, so nothing is gained by swapping. */
    seen_after("HloModule m\nENTRY e {\n"
               "  x = f32[16,2,8] parameter(0), sharding={replicated}\n"
               "  wq = f32[16,4,4] parameter(1), sharding={replicated}\n"
               "  q = f32[4,4,2,8] dot(wq, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
               "  ROOT tq = f32[2,4,8,4] transpose(q), dimensions={2,0,3,1}, sharding={replicated}\n}\n",
               names, 2, s);
    assert_string_equal(s[0].opnd[0], "wq");
    assert_memory_equal(s[1].perm, perm0, sizeof perm0);
    /* A transpose that swaps the free dims: the executor's dot-transpose
     * pair runs it as the swapped GEMM already; unchanged. */
    seen_after("HloModule m\nENTRY e {\n"
               "  x = f32[2,8,16] parameter(0), sharding={replicated}\n"
               "  wq = f32[16,4,4] parameter(1), sharding={replicated}\n"
               "  q = f32[4,4,2,8] dot(wq, x), lhs_contracting_dims={0}, rhs_contracting_dims={2}\n"
               "  ROOT tq = f32[2,8,4,4] transpose(q), dimensions={2,3,0,1}, sharding={replicated}\n}\n",
               names, 2, s);
    assert_string_equal(s[0].opnd[0], "wq");
    const int64_t pair[4] = {2, 3, 0, 1};
    assert_memory_equal(s[1].perm, pair, sizeof pair);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_contracting_to_rows),
        cmocka_unit_test(test_dot_swapped_for_transposes),
        cmocka_unit_test(test_dot_reversed_order),
        cmocka_unit_test(test_dot_2d_mesh),
        cmocka_unit_test(test_dot_partially_replicated_result),
        cmocka_unit_test(test_dot_two_cut_dims),
        cmocka_unit_test(test_dot_cuts_replicated_operand),
        cmocka_unit_test(test_dot_uneven),
        cmocka_unit_test(test_reduce_to_finer),
        cmocka_unit_test(test_stays_all_reduce),
        cmocka_unit_test(test_dot_work_counts),
        cmocka_unit_test(test_transpose_before_all_reduce),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
