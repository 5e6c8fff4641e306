/*
 * test_verify.c: the verifier (ir/verify.c) and topological order
 * (ir/topo.c).
 *
 *   bad modules   a table of HLO texts with one defect each, the fragment
 *                 of the message the verifier must give and its line:col;
 *                 parsed without verification, then verified
 *   hand-built    defects the parser refuses to build (missing root,
 *                 duplicate names, out-of-range references, overflowing
 *                 shapes, bad shardings, wrong literal sizes), built by
 *                 editing a parsed module
 *   good modules  pass, from a minimal module to control flow, collectives
 *                 and shardings
 *   topo order    stable order, control edges, cycles, a 100k-deep chain
 *   failure       every allocation of the verifier failed in turn: an
 *   injection     error (never a crash or a leak)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attrs_test.h"
#include "ir/ir.h"

static IrModule *parse(const char *text)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("t.hlo", text, strlen(text), &o, &m, &d) != IR_OK) {
        char msg[1024];
        char *s = ir_diag_format(&d, "parse");
        snprintf(msg, sizeof msg, "%s", s ? s : "?");
        ts_free(s);
        ir_diag_clear(&d);
        fail_msg("the test module does not parse:\n%s", msg);
    }
    return m;
}

/* Verify and expect an error containing `frag` at line:col. */
static void expect_error_at(IrModule *m, const IrLimits *lim, const char *frag, int line, int col)
{
    IrDiag d = {0};
    IrStatus st = ir_verify(m, lim, &d);
    if (st == IR_OK)
        fail_msg("verified, expected an error containing '%s'", frag);
    assert_int_equal(st, IR_EINPUT);
    if (!d.msg || !strstr(d.msg, frag))
        fail_msg("message '%s' lacks '%s'", d.msg ? d.msg : "(none)", frag);
    if (d.pos.line != line || d.pos.col != col)
        fail_msg("'%s' reported at %d:%d, expected %d:%d", d.msg, (int)d.pos.line,
                 (int)d.pos.col, line, col);
    if (line > 0) {
        assert_non_null(d.file);
        assert_string_equal(d.file, "t.hlo");
        assert_non_null(d.line_text); /* the source line, for the caret */
    }
    ir_diag_clear(&d);
}

static void expect_ok(IrModule *m)
{
    IrDiag d = {0};
    if (ir_verify(m, NULL, &d) != IR_OK)
        fail_msg("expected to verify: %s at %d:%d", d.msg ? d.msg : "?", (int)d.pos.line,
                 (int)d.pos.col);
    ir_diag_clear(&d);
}

/* ------------------------------------------------------------------ */
/* the table of bad modules                                            */
/* ------------------------------------------------------------------ */

#define REDUCERS                                                             \
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"            \
    "  ROOT s = f32[] add(a, b)\n}\n"                                        \
    "iadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"           \
    "  ROOT s = s32[] add(a, b)\n}\n"

static const struct {
    const char *what;
    const char *text;
    const char *frag;
    int line, col;
} bad[] = {
    {"wrong arity",
     "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT n = f32[2] negate(x, x)\n}\n",
     "negate: expects 1 operand, got 2", 4, 8},
    {"wrong operand type",
     "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  y = s32[2] parameter(1)\n"
     "  ROOT a = f32[2] add(x, y)\n}\n",
     "add: operands must have the same element type, got f32 and s32", 5, 8},
    {"wrong operand class",
     "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT a = f32[2] and(x, x)\n}\n",
     "and: operands must have a pred or integer element type, got f32", 4, 8},
    {"repeated dimension",
     "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
     "  ROOT t = f32[2,3] transpose(x), dimensions={0,0}\n}\n",
     "dimensions={0,0}: dimension 0 appears twice", 4, 8},
    {"dimension out of range",
     "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
     "  ROOT r = f32[2,3] reverse(x), dimensions={2}\n}\n",
     "dimension 2 is out of range for rank 2", 4, 8},
    {"declared shape differs from the inferred one",
     "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  y = f32[2] parameter(1)\n"
     "  ROOT a = f32[3] add(x, y)\n}\n",
     "a: declared shape f32[3] does not match the inferred shape f32[2]", 5, 8},
    {"dot contracting sizes",
     "HloModule m\nENTRY e {\n  x = f32[3,4] parameter(0)\n  y = f32[5,6] parameter(1)\n"
     "  ROOT d = f32[3,6] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
     "dot: lhs contracting dimension 1 has size 4, rhs contracting dimension 0 has size 5", 5, 8},
    {"slice out of bounds",
     "HloModule m\nENTRY e {\n  x = f32[8] parameter(0)\n"
     "  ROOT s = f32[4] slice(x), slice={[6:10]}\n}\n",
     "slice [6:10] of dimension 0 is out of bounds [0:8]", 4, 8},
    {"broadcast dimension sizes",
     "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n"
     "  ROOT b = f32[3,2] broadcast(x), dimensions={1}\n}\n",
     "operand dimension 0 has size 3 but result dimension 1 has size 2", 4, 8},
    {"tuple index out of range",
     "HloModule m\nENTRY e {\n  x = (f32[2], s32[]) parameter(0)\n"
     "  ROOT g = s32[] get-tuple-element(x), index=2\n}\n",
     "index=2 is out of range for a tuple of 2 elements", 4, 8},
    {"bad reducer signature",
     "HloModule m\n" REDUCERS "ENTRY e {\n  x = f32[4,5] parameter(0)\n"
     "  z = f32[] constant(0)\n"
     "  ROOT r = f32[4] reduce(x, z), dimensions={1}, to_apply=iadd\n}\n",
     "reduction computation iadd: parameter 0 must be f32[], got s32[]", 15, 8},
    {"reducer returning the wrong type",
     "HloModule m\nmix {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
     "  ROOT c = s32[] convert(a)\n}\nENTRY e {\n  x = f32[4] parameter(0)\n"
     "  z = f32[] constant(0)\n  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=mix\n}\n",
     "reduction computation mix must return f32[], it returns s32[]", 10, 8},
    {"while condition not returning pred",
     "HloModule m\ncond {\n  p = s32[] parameter(0)\n  ROOT q = s32[] add(p, p)\n}\n"
     "body {\n  p = s32[] parameter(0)\n  ROOT q = s32[] add(p, p)\n}\n"
     "ENTRY e {\n  i = s32[] parameter(0)\n  ROOT w = s32[] while(i), condition=cond, body=body\n}\n",
     "condition computation cond must return pred[], it returns s32[]", 12, 8},
    {"conditional branch parameter",
     "HloModule m\nb0 {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n"
     "b1 {\n  p = s32[] parameter(0)\n  ROOT c = f32[2] constant({1, 2})\n}\n"
     "ENTRY e {\n  k = s32[] parameter(0)\n  x = f32[2] parameter(1)\n"
     "  ROOT c = f32[2] conditional(k, x, x), branch_computations={b0, b1}\n}\n",
     "branch computation b1 takes s32[] but is given f32[2]", 13, 8},
    {"sort comparator",
     "HloModule m\n" REDUCERS "ENTRY e {\n  x = f32[8] parameter(0)\n"
     "  ROOT s = f32[8] sort(x), dimensions={0}, to_apply=add\n}\n",
     "comparator computation add must return pred[], it returns f32[]", 14, 8},
    {"cycle through operands",
     "HloModule m\nENTRY e {\n  a = f32[] negate(b)\n  ROOT b = f32[] negate(a)\n}\n",
     "cycle in computation e: instruction a", 3, 3},
    {"cycle through a control predecessor",
     "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n"
     "  ROOT n = f32[2] negate(x), control-predecessors={m}\n  m = f32[2] negate(n)\n}\n",
     "cycle in computation e: instruction n", 4, 8},
    {"recursion",
     "HloModule m\nf {\n  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=f\n}\n"
     "ENTRY e {\n  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=f\n}\n",
     "computation f calls f, which is recursive", 4, 8},
    {"entry parameter against entry_computation_layout",
     "HloModule m, entry_computation_layout={(f32[3]{0})->f32[2]{0}}\nENTRY e {\n"
     "  x = f32[2] parameter(0)\n  ROOT n = f32[2] negate(x)\n}\n",
     "parameter 0 of the entry computation is f32[2] but entry_computation_layout says f32[3]",
     3, 3},
    {"entry root against entry_computation_layout",
     "HloModule m, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, s32[])}\nENTRY e {\n"
     "  x = f32[2] parameter(0)\n  ROOT n = f32[2] negate(x)\n}\n",
     "the entry computation returns f32[2] but entry_computation_layout says (f32[2], s32[])",
     4, 8},
    {"entry parameter count against entry_computation_layout",
     "HloModule m, entry_computation_layout={(f32[2]{0}, f32[2]{0})->f32[2]{0}}\nENTRY e {\n"
     "  x = f32[2] parameter(0)\n  ROOT n = f32[2] negate(x)\n}\n",
     "entry computation e has 1 parameters but entry_computation_layout lists 2", 2, 7},
    {"all-gather size against its groups",
     "HloModule m\nENTRY e {\n  x = f32[2,4] parameter(0)\n"
     "  ROOT g = f32[6,4] all-gather(x), replica_groups={{0,1,2,3}}, dimensions={0}\n}\n",
     "g: declared shape f32[6,4] does not match the inferred shape f32[8,4]", 4, 8},
    {"all-reduce across manual subgroups",
     "HloModule m\n" REDUCERS "ENTRY e {\n"
     "  p = f32[2,2] parameter(0), sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n"
     "  ROOT r = f32[2,2] all-reduce(p), to_apply=add, replica_groups={{1,0},{2,3}},\n"
     "    use_global_device_ids=true, channel_id=1,\n"
     "    sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n}\n",
     "replica group 0 combines devices 1 and 0, which belong to different manual subgroups",
     14, 8},
    {"custom-call SPMD marker changing rank",
     "HloModule m\nENTRY e {\n  x = f32[8,4] parameter(0)\n"
     "  ROOT c = f32[32] custom-call(x), custom_call_target=\"SPMDFullToShardShape\"\n}\n",
     "keeps the element type and rank of f32[8,4], declared f32[32]", 4, 8},
};

static void test_bad_modules(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        print_message("  %s\n", bad[i].what);
        IrModule *m = parse(bad[i].text);
        expect_error_at(m, NULL, bad[i].frag, bad[i].line, bad[i].col);
        ir_module_free(m);
    }
}

/* ------------------------------------------------------------------ */
/* limits                                                              */
/* ------------------------------------------------------------------ */

static const char *big_text = "HloModule m\nENTRY e {\n  x = f32[11,10] parameter(0)\n"
                              "  ROOT n = f32[11,10] negate(x)\n}\n";

static void test_limits(void **state)
{
    (void)state;
    IrModule *m = parse(big_text);
    IrLimits lim = ir_default_limits();
    expect_ok(m);
    lim.max_elements = 100; /* 110 elements */
    expect_error_at(m, &lim, "f32[11,10] has 110 elements, more than the limit of 100", 3, 3);
    lim = ir_default_limits();
    lim.max_rank = 1;
    expect_error_at(m, &lim, "rank 2 exceeds the limit of 1", 3, 3);
    lim = ir_default_limits();
    lim.max_name = 0;
    expect_error_at(m, &lim, "computation name is longer than the limit of 0 characters", 2, 7);
    /* element counts that overflow int64: 2^32 * 2^32 * 4 (built by hand,
     * the parser refuses such a shape) */
    IrShape *s = &m->comp[m->entry]->instr[0].shape;
    int64_t *dims = ir_alloc_array(m->arena, 3, sizeof *dims);
    dims[0] = dims[1] = (int64_t)1 << 32;
    dims[2] = 4;
    s->dims = dims;
    s->rank = 3;
    expect_error_at(m, NULL, "x: the element count of f32[4294967296,4294967296,4] overflows "
                             "int64", 3, 3);
    ir_module_free(m);
    /* tuple width */
    m = parse("HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n"
              "  ROOT t = (f32[], f32[], f32[]) tuple(a, a, a)\n}\n");
    lim = ir_default_limits();
    lim.max_tuple = 2;
    expect_error_at(m, &lim, "tuple of 3 elements exceeds the limit of 2", 4, 8);
    ir_module_free(m);
}

/* ------------------------------------------------------------------ */
/* defects built by hand                                               */
/* ------------------------------------------------------------------ */

static const char *small = "HloModule m\n"
                           "ENTRY e {\n"
                           "  x = f32[2] parameter(0)\n"
                           "  y = f32[2] negate(x)\n"
                           "  ROOT z = f32[2] exponential(y)\n"
                           "}\n";

static void test_hand_built(void **state)
{
    (void)state;
    IrModule *m = parse(small);
    IrComputation *c = m->comp[m->entry];
    expect_ok(m);

    c->root = -1;
    expect_error_at(m, NULL, "computation e has no ROOT instruction", 2, 7);
    c->root = 2;

    const char *name = c->instr[2].name;
    c->instr[2].name = c->instr[1].name;
    expect_error_at(m, NULL, "duplicate instruction name y in computation e (first defined at "
                             "4:3)", 5, 8);
    c->instr[2].name = name;

    c->instr[1].opnd[0] = 7;
    expect_error_at(m, NULL, "operand 0 refers to instruction index 7, out of range", 4, 3);
    c->instr[1].opnd[0] = 0;

    /* an undefined callee: a call to computation index 5 */
    c->instr[2].op = OP_CALL;
    c->instr[2].ncalled = 1;
    c->instr[2].called = ir_alloc(m->arena, sizeof(int32_t));
    c->instr[2].called[0] = 5;
    expect_error_at(m, NULL, "called computation 0 has index 5, out of range", 5, 8);
    c->instr[2].op = OP_EXP;
    c->instr[2].ncalled = 0;
    expect_ok(m);

    c->instr[1].shape.dims[0] = -1;
    expect_error_at(m, NULL, "y: dimension 0 has negative size -1", 4, 3);
    c->instr[1].shape.dims[0] = 2;

    c->instr[1].shape.type = IR_INVALID;
    expect_error_at(m, NULL, "y: invalid element type", 4, 3);
    c->instr[1].shape.type = IR_F32;

    int32_t ci = ir_add_computation(m, "e");
    assert_true(ci >= 0);
    expect_error_at(m, NULL, "duplicate computation name e", 0, 0);
    m->comp[ci]->name = "f";
    expect_error_at(m, NULL, "computation f has no ROOT instruction", 0, 0);
    m->ncomp--; /* drop it again (the arena keeps the memory) */

    int32_t entry = m->entry;
    m->entry = -1;
    expect_error_at(m, NULL, "module m has no ENTRY computation", 0, 0);
    m->entry = entry;
    expect_ok(m);
    ir_module_free(m);
}

static void test_hand_built_params_and_layouts(void **state)
{
    (void)state;
    IrModule *m = parse("HloModule m\nENTRY e {\n  x = f32[2,3]{1,0} parameter(0)\n"
                        "  y = f32[2,3]{1,0} parameter(1)\n  ROOT a = f32[2,3] add(x, y)\n}\n");
    IrComputation *c = m->comp[m->entry];
    expect_ok(m);
    c->instr[1].a.parameter_number = 0;
    expect_error_at(m, NULL, "y: parameter number 0 is already used by x", 4, 3);
    c->instr[1].a.parameter_number = -1;
    expect_error_at(m, NULL, "y: parameter number -1 is out of range", 4, 3);
    c->instr[1].a.parameter_number = 2;
    expect_error_at(m, NULL, "y: parameter number 2 is out of range: computation e has 2 "
                             "parameters, numbered 0 to 1", 4, 3);
    c->instr[1].a.parameter_number = 1;
    c->instr[0].shape.minor_to_major[0] = 0; /* {0,0} */
    expect_error_at(m, NULL, "x: layout of f32[2,3] is not a permutation of its 2 dimensions",
                    3, 3);
    c->instr[0].shape.minor_to_major[0] = 1;
    expect_ok(m);
    ir_module_free(m);
}

static void test_hand_built_constants_and_shardings(void **state)
{
    (void)state;
    IrModule *m = parse("HloModule m, num_partitions=4\nENTRY e {\n"
                        "  k = f32[2] constant({1, 2})\n"
                        "  x = f32[8] parameter(0), sharding={devices=[4]0,1,2,3}\n"
                        "  ROOT t = (f32[2], f32[8]) tuple(k, x)\n}\n");
    IrComputation *c = m->comp[m->entry];
    expect_ok(m);
    c->instr[0].a.literal_bytes = 4;
    expect_error_at(m, NULL, "k: literal has 4 bytes but f32[2] needs 8", 3, 3);
    c->instr[0].a.literal_bytes = 8;
    uint8_t *lit = c->instr[0].a.literal;
    c->instr[0].a.literal = NULL;
    expect_error_at(m, NULL, "k: constant has no literal", 3, 3);
    c->instr[0].a.literal = lit;
    expect_ok(m);
    /* shardings name partitions: checked against num_partitions, and
     * replicas (which run the same partitioned program) do not change it */
    m->num_partitions = 2;
    expect_error_at(m, NULL, "out of range", 4, 3);
    m->num_partitions = 8;
    expect_error_at(m, NULL, "uses 4 devices but there are 8", 4, 3);
    m->num_partitions = 4;
    m->replica_count = 2;
    expect_ok(m);
    m->replica_count = 1;
    expect_ok(m);
    /* and against the shape: a rank-1 tiling on a rank-2 shape */
    IrShape *s = &c->instr[1].shape;
    int64_t *dims = ir_alloc_array(m->arena, 2, sizeof *dims);
    dims[0] = dims[1] = 8;
    s->dims = dims;
    s->rank = 2;
    c->instr[2].shape.tuple[1] = *s;
    expect_error_at(m, NULL, "rank 2", 4, 3);
    ir_module_free(m);
}

/* ------------------------------------------------------------------ */
/* good modules                                                        */
/* ------------------------------------------------------------------ */

static const char *const good[] = {
    "HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0)\n}\n",
    /* control flow, reducers, names scoped per computation */
    "HloModule m\n" REDUCERS
    "cond {\n  p = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
    "  n = s32[] constant(10)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  p = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
    "  v = f32[4] get-tuple-element(p), index=1\n  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n  w = f32[4] add(v, v)\n  ROOT t = (s32[], f32[4]) tuple(j, w)\n}\n"
    "neg {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n"
    "ENTRY e {\n  x = f32[4] parameter(0)\n  z = s32[] constant(0)\n"
    "  t = (s32[], f32[4]) tuple(z, x)\n  w = (s32[], f32[4]) while(t), condition=cond, body=body\n"
    "  v = f32[4] get-tuple-element(w), index=1\n  c = f32[4] call(v), to_apply=neg\n"
    "  p = pred[] parameter(1)\n"
    "  k = f32[4] conditional(p, c, v), true_computation=neg, false_computation=neg\n"
    "  zero = f32[] constant(0)\n  ROOT r = f32[] reduce(k, zero), dimensions={0}, to_apply=add\n}\n",
    /* data movement and contractions */
    "HloModule m\nENTRY e {\n  a = f32[2,3,4] parameter(0)\n  b = f32[2,4,5] parameter(1)\n"
    "  d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
    "rhs_batch_dims={0}, rhs_contracting_dims={1}\n"
    "  t = f32[5,2,3] transpose(d), dimensions={2,0,1}\n  r = f32[30] reshape(t)\n"
    "  s = f32[10] slice(r), slice={[0:30:3]}\n  z = f32[] constant(0)\n"
    "  p = f32[14] pad(s, z), padding=2_2\n"
    "  i = s32[] constant(1)\n  ds = f32[4] dynamic-slice(p, i), dynamic_slice_sizes={4}\n"
    "  ROOT c = f32[18] concatenate(ds, p), dimensions={0}\n}\n",
    /* collectives and shardings with the header's counts */
    "HloModule m, num_partitions=4, replica_count=1\n" REDUCERS
    "ENTRY e {\n  x = f32[2,4] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
    "  ag = f32[8,4] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
    "use_global_device_ids=true\n"
    "  ar = f32[8,4] all-reduce(ag), channel_id=2, replica_groups=[2,2]<=[4], "
    "use_global_device_ids=true, to_apply=add\n"
    "  rs = f32[4,4] reduce-scatter(ar), channel_id=3, replica_groups={{0,1},{2,3}}, "
    "dimensions={0}, use_global_device_ids=true, to_apply=add\n"
    "  cp = f32[4,4] collective-permute(rs), channel_id=4, source_target_pairs={{0,1},{1,0}}\n"
    "  pid = u32[] partition-id()\n"
    "  ROOT t = (f32[4,4], u32[]) tuple(cp, pid), sharding={{replicated}, {maximal device=0}}\n}\n",
    /* all-reduce within manual subgroups: {2,0} and {1,3} */
    "HloModule m\n" REDUCERS "ENTRY e {\n"
    "  p = f32[2,2] parameter(0), sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n"
    "  ROOT r = f32[2,2] all-reduce(p), to_apply=add, replica_groups={{2,0},{1,3}},\n"
    "    use_global_device_ids=true, channel_id=1,\n"
    "    sharding={devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}\n}\n",
    /* an entry layout that matches */
    "HloModule m, entry_computation_layout={(f32[2,3]{1,0}, (s32[], token[]))->f32[2,3]{0,1}}\n"
    "ENTRY e {\n  x = f32[2,3] parameter(0)\n  t = (s32[], token[]) parameter(1)\n"
    "  ROOT n = f32[2,3]{0,1} negate(x)\n}\n",
};

static void test_good_modules(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        IrModule *m = parse(good[i]);
        expect_ok(m);
        ir_module_free(m);
    }
}

/* ------------------------------------------------------------------ */
/* topological order                                                   */
/* ------------------------------------------------------------------ */

static void add_raw(IrModule *m, IrComputation *c, IrOpcode op, const char *name, int32_t nop,
                    const int32_t *ops)
{
    IrShape s;
    int64_t two = 2;
    assert_int_equal(ir_shape_make(m->arena, &s, IR_F32, 1, &two), IR_OK);
    assert_true(ir_add_simple(m, c, op, &s, nop, ops, name) >= 0);
}

static void test_topo_stable(void **state)
{
    (void)state;
    IrModule *m = ir_module_new("t");
    int32_t ci = ir_add_computation(m, "c"); /* (m->comp moves as it grows) */
    IrComputation *c = m->comp[ci];
    /* 0: d = neg(3)  1: e = neg(2)  2: b = param  3: a = param
     * ready at the start: 2, 3 -> 2 first (definition order); then 1 is
     * ready and smaller than 3: 2, 1, 3, 0 */
    int32_t o3 = 3, o2 = 2;
    add_raw(m, c, OP_NEGATE, "d", 1, &o3);
    add_raw(m, c, OP_NEGATE, "e", 1, &o2);
    add_raw(m, c, OP_PARAMETER, "b", 0, NULL);
    add_raw(m, c, OP_PARAMETER, "a", 0, NULL);
    int32_t *order = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_OK);
    int32_t want[4] = {2, 1, 3, 0};
    assert_memory_equal(order, want, sizeof want);
    ts_free(order);
    /* a control edge d -> e (e after d) moves e to the end */
    IrI64List *cp = &test_x(&c->instr[1].a)->control_predecessors;
    cp->v = ir_alloc(m->arena, sizeof(int64_t));
    cp->v[0] = 0;
    cp->n = 1;
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_OK);
    int32_t want2[4] = {2, 3, 0, 1};
    assert_memory_equal(order, want2, sizeof want2);
    ts_free(order);
    /* an out-of-range control predecessor */
    cp->v[0] = 9;
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_EINPUT);
    assert_null(order);
    assert_non_null(strstr(d.msg, "control predecessor 9 is out of range"));
    ir_diag_clear(&d);
    ir_module_free(m);
}

static void test_topo_cycle_names_a_member(void **state)
{
    (void)state;
    IrModule *m = ir_module_new("t");
    int32_t ci = ir_add_computation(m, "c"); /* (m->comp moves as it grows) */
    IrComputation *c = m->comp[ci];
    /* 0: d = neg(a) is downstream of the cycle a <-> b; the error must name
     * a or b, not d */
    int32_t oa = 1, ob = 2;
    add_raw(m, c, OP_NEGATE, "d", 1, &oa);
    add_raw(m, c, OP_NEGATE, "a", 1, &ob);
    add_raw(m, c, OP_NEGATE, "b", 1, &oa);
    int32_t *order = (int32_t *)&oa;
    IrDiag d = {0};
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_EINPUT);
    assert_null(order);
    assert_non_null(strstr(d.msg, "instruction a depends on itself"));
    ir_diag_clear(&d);
    /* a self-loop */
    c->instr[0].opnd[0] = 0;
    c->instr[1].opnd[0] = 0;
    c->instr[2].opnd[0] = 0;
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "instruction d depends on itself"));
    ir_diag_clear(&d);
    ir_module_free(m);
}

/* 100k instructions in one chain, defined from the top down (each uses
 * the next one): the order is the reverse, found without recursion; the
 * verifier handles the module in linear time. */
static void test_topo_deep_chain(void **state)
{
    (void)state;
    enum { N = 100000 };
    IrModule *m = ir_module_new("deep");
    int32_t ci = ir_add_computation(m, "main");
    IrComputation *c = m->comp[ci];
    m->entry = ci;
    c->is_entry = true;
    for (int32_t i = 0; i < N - 1; i++) {
        int32_t next = i + 1;
        add_raw(m, c, OP_NEGATE, NULL, 1, &next);
    }
    add_raw(m, c, OP_PARAMETER, "p", 0, NULL);
    c->root = 0;
    int32_t *order = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_topo_order(m, c, &order, &d), IR_OK);
    for (int32_t i = 0; i < N; i++)
        if (order[i] != N - 1 - i)
            fail_msg("order[%d] = %d, expected %d", i, order[i], N - 1 - i);
    ts_free(order);
    expect_ok(m);
    ir_module_free(m);
}

/* ------------------------------------------------------------------ */
/* failure injection                                                   */
/* ------------------------------------------------------------------ */

static void test_verify_oom(void **state)
{
    (void)state;
    IrModule *m = parse(good[1]);
    int fails = 0;
    for (long k = 1;; k++) {
        IrDiag d = {0};
        ts_fail_alloc_after(k);
        IrStatus st = ir_verify(m, NULL, &d);
        ts_fail_alloc_after(0);
        ir_diag_clear(&d);
        if (st == IR_OK)
            break;
        assert_int_equal(st, IR_ENOMEM);
        fails++;
        assert_true(k < 100000);
    }
    assert_true(fails > 0);
    ir_module_free(m);
}

/* A computation of n instructions `vI = f32[4] negate(vI-1)`, where the
 * instructions listed in `bad` (ascending, -1 ends) are written with a
 * wrong shape (f32[5]): parsed with verify on, the error names the first
 * of them, at its line, whichever half of a large computation (checked by
 * two threads) it is in. */
static void verify_large(int n, const int *bad)
{
    size_t cap = (size_t)n * 48 + 256;
    char *t = malloc(cap);
    size_t k = (size_t)snprintf(t, cap, "HloModule big\nENTRY e {\n  v0 = f32[4] parameter(0)\n");
    const int *b = bad;
    for (int i = 1; i < n; i++) {
        bool wrong = *b == i;
        b += wrong;
        k += (size_t)snprintf(t + k, cap - k, "  v%d = f32[%d] negate(v%d)\n", i, wrong ? 5 : 4, i - 1);
    }
    k += (size_t)snprintf(t + k, cap - k, "}\n");
    IrParseOptions o = ir_default_parse_options();
    o.split_lines = -1;
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("big.hlo", t, k, &o, &m, &d);
    if (bad[0] < 0) {
        assert_int_equal(st, IR_OK);
        ir_module_free(m);
    } else {
        assert_int_equal(st, IR_EINPUT);
        assert_null(m);
        assert_int_equal(d.pos.line, bad[0] + 3); /* v0 is on line 3 */
        char want[32];
        snprintf(want, sizeof want, "v%d", bad[0]);
        assert_non_null(strstr(d.msg, want));
    }
    ir_diag_clear(&d);
    free(t);
}

static void test_large_halves(void **state)
{
    (void)state;
    const int n = 20000; /* past VERIFY_SPLIT_MIN: two threads */
    verify_large(n, (const int[]){-1});
    verify_large(n, (const int[]){15000, -1});          /* the second half only */
    verify_large(n, (const int[]){12000, 17000, -1});   /* the earlier of the second half's */
    verify_large(n, (const int[]){9000, 15000, -1});    /* the first half's, not the helper's */
    verify_large(n, (const int[]){9999, 10000, -1});    /* both sides of the middle */
    verify_large(n, (const int[]){10000, -1});
    verify_large(n, (const int[]){n - 1, -1});
    verify_large(100, (const int[]){70, -1});           /* small: one thread */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_modules),
        cmocka_unit_test(test_large_halves),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_hand_built),
        cmocka_unit_test(test_hand_built_params_and_layouts),
        cmocka_unit_test(test_hand_built_constants_and_shardings),
        cmocka_unit_test(test_good_modules),
        cmocka_unit_test(test_topo_stable),
        cmocka_unit_test(test_topo_cycle_names_a_member),
        cmocka_unit_test(test_topo_deep_chain),
        cmocka_unit_test(test_verify_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
