/*
 * test_parse_ops.c: the opcodes of XLA's full HLO_OPCODE_LIST at the
 * instruction level (ir/parse.c attributes, ir/infer.c rules, ir/print.c).
 *
 *   round trip  for each opcode family a small module that parses and
 *               verifies, prints, and parses back to the same printed text;
 *               the printed text holds every attribute XLA prints for it
 *               (checked by substring), and the fields a later layer reads
 *               (topk_k, epsilon, the sugared async wrapper) hold the values
 *               written
 *   shapes      the inferred shapes that XLA's shape_inference.cc derives
 *               (derivations in the comments), compared through the
 *               verifier: a wrong declared shape is an error
 *   errors      wrong operand counts and types, missing and unknown
 *               attributes, each reported at its LINE:COL
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

static IrModule *parse_verified(const char *text)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("t.hlo", text, strlen(text), &o, &m, &d) != IR_OK) {
        char *f = ir_diag_format(&d, "test");
        fail_msg("parse failed:\n%s\nfor:\n%s", f ? f : "?", text);
    }
    ir_diag_clear(&d);
    return m;
}

/* Parse and verify `text`, print it, parse and verify the print, print
 * again: both prints are equal and hold each of the NULL-terminated
 * `want` fragments. Returns the first module (caller frees). */
static IrModule *round_trip(const char *text, const char *const *want)
{
    IrModule *m = parse_verified(text);
    char *p1 = ir_print_module(m);
    assert_non_null(p1);
    IrModule *m2 = parse_verified(p1);
    char *p2 = ir_print_module(m2);
    assert_non_null(p2);
    if (strcmp(p1, p2) != 0)
        fail_msg("printed texts differ:\n%s\n----\n%s", p1, p2);
    for (int i = 0; want && want[i]; i++)
        if (!strstr(p1, want[i]))
            fail_msg("printed text lacks '%s':\n%s", want[i], p1);
    ts_free(p1);
    ts_free(p2);
    ir_module_free(m2);
    return m;
}

static void round_trip_free(const char *text, const char *const *want)
{
    ir_module_free(round_trip(text, want));
}

/* Parsing with verification fails at line:col with `fragment`. */
static void expect_error(const char *text, const char *fragment, int line, int col)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("bad.hlo", text, strlen(text), &o, &m, &d);
    if (st != IR_EINPUT)
        fail_msg("expected an input error (status %d) for:\n%s", (int)st, text);
    assert_null(m);
    if (!d.msg || !strstr(d.msg, fragment))
        fail_msg("message '%s' lacks '%s' for:\n%s", d.msg ? d.msg : "(none)", fragment, text);
    if (d.pos.line != line || d.pos.col != col)
        fail_msg("error '%s' at %d:%d, expected %d:%d for:\n%s", d.msg, (int)d.pos.line, (int)d.pos.col,
                 line, col, text);
    ir_diag_clear(&d);
}

static const IrInstr *find(const IrModule *m, const char *name)
{
    for (int32_t c = 0; c < m->ncomp; c++) {
        int32_t i = ir_find_instr(m->comp[c], name);
        if (i >= 0)
            return &m->comp[c]->instr[i];
    }
    fail_msg("no instruction %s", name);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* fusion and async                                                    */
/* ------------------------------------------------------------------ */

static void test_fusion(void **state)
{
    (void)state;
    static const char *const want[] = {
        "f = f32[4] fusion(x, y), kind=kLoop, calls=fused, output_to_operand_aliasing={{}: (0, {})}",
        "g = f32[4] fusion(f, y), kind=kOutput, calls=fused", NULL};
    IrModule *m = round_trip("HloModule m\n"
                             "fused {\n  a = f32[4] parameter(0)\n  b = f32[4] parameter(1)\n"
                             "  ROOT s = f32[4] add(a, b)\n}\n"
                             "ENTRY e {\n  x = f32[4] parameter(0)\n  y = f32[4] parameter(1)\n"
                             "  f = f32[4] fusion(x, y), kind=kLoop, calls=fused, "
                             "output_to_operand_aliasing={{}: (0, {})}\n"
                             "  ROOT g = f32[4] fusion(f, y), kind=kOutput, calls=fused\n}\n",
                             want);
    assert_string_equal(find(m, "f")->a.x->fusion_kind, "kLoop");
    assert_int_equal(find(m, "f")->ncalled, 1);
    ir_module_free(m);
    /* the callee returns f32[4], the declared result is f32[5] */
    expect_error("fused {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n"
                 "ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT f = f32[5] fusion(x), kind=kLoop, calls=fused\n}\n",
                 "inferred shape f32[4]", 7, 8);
    expect_error("fused {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n"
                 "ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT f = f32[4] fusion(x), calls=fused\n}\n",
                 "missing attribute 'kind'", 7, 8);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT f = f32[4] fusion(x), kind=kSideways, calls=e\n}\n",
                 "fusion kind", 3, 35);
}

/* async-start's shape is ((operands...), result, context...): XLA's
 * HloAsyncStartInstruction; async-done returns element 1. */
static void test_async_explicit(void **state)
{
    (void)state;
    static const char *const want[] = {
        "s = ((f32[10]), f32[20], s32[]) async-start(p), async_execution_thread=\"parallel_thread\", calls=op",
        "u = ((f32[10]), f32[20], s32[]) async-update(s), async_execution_thread=\"parallel_thread\", calls=op",
        "ROOT d = f32[20] async-done(u), async_execution_thread=\"parallel_thread\", calls=op", NULL};
    round_trip_free("HloModule m\n"
                    "op {\n  a = f32[10] parameter(0)\n  ROOT c = f32[20] concatenate(a, a), dimensions={0}\n}\n"
                    "ENTRY e {\n  p = f32[10] parameter(0)\n"
                    "  s = ((f32[10]), f32[20], s32[]) async-start(p), async_execution_thread=\"parallel_thread\", calls=op\n"
                    "  u = ((f32[10]), f32[20], s32[]) async-update(s), async_execution_thread=\"parallel_thread\", calls=op\n"
                    "  ROOT d = f32[20] async-done(u), async_execution_thread=\"parallel_thread\", calls=op\n}\n",
                    want);
    /* async-done must continue an async op */
    expect_error("ENTRY e {\n  p = ((f32[2]), f32[2], s32[]) parameter(0)\n  ROOT d = f32[2] async-done(p)\n}\n",
                 "must be an async-start or async-update", 3, 8);
    expect_error("ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT s = ((f32[2]), f32[2]) async-start(p)\n}\n",
                 "missing attribute 'calls'", 3, 8);
}

/* The sugared forms read as an async-start whose computation wraps the op
 * (XLA's parser) and print back as written, the wrapper hidden. */
static void test_async_sugar(void **state)
{
    (void)state;
    static const char *const want[] = {
        "s = ((f32[4]), f32[4], s32[]) abs-start(x), async_execution_thread=\"parallel_thread\"",
        "d = f32[4] abs-done(s)",
        "cs = ((s32[8], s32[8]), (s32[8], s32[8]), u32[]) call-start(x8, x8), to_apply=pair",
        "cu = ((s32[8], s32[8]), (s32[8], s32[8]), u32[]) call-update(cs)",
        "sl = ((f32[16]), f32[4], s32[]) slice-start(y), slice={[2:6]}",
        "rs = ((f32[8]), f32[4], s32[]) reduce-scatter-start(z), replica_groups={{0,1}}, dimensions={0}, to_apply=add",
        "cc = ((f32[4]), f32[4], s32[]) custom-call-start(x), custom_call_target=\"foo\"", NULL};
    const char *text = "HloModule m, replica_count=2\n"
                       "pair {\n  a = s32[8] parameter(0)\n  b = s32[8] parameter(1)\n"
                       "  ROOT t = (s32[8], s32[8]) tuple(b, a)\n}\n"
                       "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
                       "ENTRY e {\n  x = f32[4] parameter(0)\n  x8 = s32[8] parameter(1)\n"
                       "  y = f32[16] parameter(2)\n  z = f32[8] parameter(3)\n"
                       "  s = ((f32[4]), f32[4], s32[]) abs-start(x), async_execution_thread=\"parallel_thread\"\n"
                       "  d = f32[4] abs-done(s)\n"
                       "  cs = ((s32[8], s32[8]), (s32[8], s32[8]), u32[]) call-start(x8, x8), to_apply=pair\n"
                       "  cu = ((s32[8], s32[8]), (s32[8], s32[8]), u32[]) call-update(cs)\n"
                       "  cd = (s32[8], s32[8]) call-done(cu)\n"
                       "  sl = ((f32[16]), f32[4], s32[]) slice-start(y), slice={[2:6]}\n"
                       "  sd = f32[4] slice-done(sl)\n"
                       "  rs = ((f32[8]), f32[4], s32[]) reduce-scatter-start(z), replica_groups={{0,1}}, dimensions={0}, "
                       "to_apply=add\n"
                       "  rd = f32[4] reduce-scatter-done(rs)\n"
                       "  cc = ((f32[4]), f32[4], s32[]) custom-call-start(x), custom_call_target=\"foo\"\n"
                       "  ccd = f32[4] custom-call-done(cc)\n"
                       "  ROOT t = (f32[4], (s32[8], s32[8]), f32[4], f32[4], f32[4]) tuple(d, cd, sd, rd, ccd)\n}\n";
    IrModule *m = round_trip(text, want);
    /* The start calls a wrapper: parameters of the operand shapes and a
     * root of the wrapped op with its attributes and callee. */
    const IrInstr *cs = find(m, "cs");
    assert_int_equal(cs->op, OP_ASYNC_START);
    assert_true(cs->a.x->async_sugar);
    assert_int_equal(cs->a.x->async_wrapped_op, OP_CALL);
    assert_int_equal(cs->ncalled, 1);
    const IrComputation *w = m->comp[cs->called[0]];
    assert_true(w->async_wrapper);
    assert_int_equal(w->nparam, 2);
    const IrInstr *root = &w->instr[w->root];
    assert_int_equal(root->op, OP_CALL);
    assert_int_equal(root->ncalled, 1);
    assert_string_equal(m->comp[root->called[0]]->name, "pair");
    const IrInstr *sl = &m->comp[find(m, "sl")->called[0]]->instr[m->comp[find(m, "sl")->called[0]]->root];
    assert_int_equal(sl->op, OP_SLICE);
    assert_int_equal(sl->a.x->slice_start.v[0], 2);
    assert_int_equal(find(m, "cd")->op, OP_ASYNC_DONE);
    /* the wrapper is printed inside the start, never on its own */
    char *p = ir_print_module(m);
    assert_null(strstr(p, ".wrapped"));
    ts_free(p);
    ir_module_free(m);
    /* a module without ENTRY keeps its last written computation as entry */
    IrModule *m2 = parse_verified("e {\n  x = f32[4] parameter(0)\n"
                                  "  s = ((f32[4]), f32[4], s32[]) abs-start(x)\n  ROOT d = f32[4] abs-done(s)\n}\n");
    assert_string_equal(ir_entry(m2)->name, "e");
    ir_module_free(m2);
    /* the wrapped op's attributes apply; others do not */
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT s = ((f32[4]), f32[2], s32[]) abs-start(x), slice={[0:2]}\n}\n",
                 "attribute 'slice' does not apply to abs-start", 3, 52);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT s = ((f32[4]), f32[2], s32[]) slice-start(x)\n}\n",
                 "missing attribute 'slice' for slice-start", 3, 8);
    /* the wrapped op's shape rule holds: abs of f32[4] is not f32[5] */
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  s = ((f32[4]), f32[5], s32[]) abs-start(x)\n"
                 "  ROOT d = f32[5] abs-done(s)\n}\n",
                 "declared shape f32[5] does not match the inferred shape f32[4]", 3, 3);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT s = (f32[4], f32[4]) abs-start(x)\n}\n",
                 "shape must be ((operand shapes...), result, context...)", 3, 8);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  s = ((f32[4]), f32[4], s32[]) abs-start(x)\n"
                 "  ROOT d = f32[4] negate-done(s)\n}\n",
                 "wraps abs, not negate", 4, 8);
}

/* ------------------------------------------------------------------ */
/* collectives, point to point, copies                                 */
/* ------------------------------------------------------------------ */

static void test_collective_pairs(void **state)
{
    (void)state;
    static const char *const want[] = {
        "ars = f32[4] all-reduce-start(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, "
        "to_apply=add",
        "ard = f32[4] all-reduce-done(ars)",
        "ags = (f32[4], f32[8]) all-gather-start(x), channel_id=2, replica_groups={{0,1}}, dimensions={0}, "
        "use_global_device_ids=true",
        "cps = (f32[4], f32[4], u32[], u32[]) collective-permute-start(x), channel_id=3, "
        "source_target_pairs={{0,1},{1,0}}",
        "cb = f32[4] collective-broadcast(x), channel_id=4, replica_groups={{0,1}}",
        "ra = f32[8] ragged-all-to-all(x8, o8, i, i, i, i), replica_groups={{0,1}}", NULL};
    round_trip_free("HloModule m, replica_count=1, num_partitions=2\n"
                    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
                    "ENTRY e {\n  x = f32[4] parameter(0)\n  x8 = f32[8] parameter(1)\n  o8 = f32[8] parameter(2)\n"
                    "  i = s32[2] parameter(3)\n"
                    "  ars = f32[4] all-reduce-start(x), channel_id=1, replica_groups={{0,1}}, "
                    "use_global_device_ids=true, to_apply=add\n"
                    "  ard = f32[4] all-reduce-done(ars)\n"
                    "  ags = (f32[4], f32[8]) all-gather-start(x), channel_id=2, replica_groups={{0,1}}, dimensions={0}, "
                    "use_global_device_ids=true\n"
                    "  agd = f32[8] all-gather-done(ags)\n"
                    "  cps = (f32[4], f32[4], u32[], u32[]) collective-permute-start(x), channel_id=3, "
                    "source_target_pairs={{0,1},{1,0}}\n"
                    "  cpd = f32[4] collective-permute-done(cps)\n"
                    "  cb = f32[4] collective-broadcast(x), channel_id=4, replica_groups={{0,1}}\n"
                    "  ra = f32[8] ragged-all-to-all(x8, o8, i, i, i, i), replica_groups={{0,1}}\n"
                    "  ROOT t = (f32[4], f32[8], f32[4], f32[4], f32[8]) tuple(ard, agd, cpd, cb, ra)\n}\n",
                    want);
    /* the combined form permutes each operand; the in-place form updates
     * its output operand (operand 1) */
    static const char *const want_cp[] = {
        "c = (f32[4], s32[2]) collective-permute(x, i), channel_id=1, source_target_pairs={{0,1},{1,0}}",
        "ip = f32[8] collective-permute(x8, o8, i, i), channel_id=2, source_target_pairs={{0,1},{1,0}}, "
        "slice_sizes={{4}}", NULL};
    round_trip_free("HloModule m, num_partitions=2\n"
                    "ENTRY e {\n  x = f32[4] parameter(0)\n  x8 = f32[8] parameter(1)\n  o8 = f32[8] parameter(2)\n"
                    "  i = s32[2] parameter(3)\n"
                    "  c = (f32[4], s32[2]) collective-permute(x, i), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
                    "  ROOT ip = f32[8] collective-permute(x8, o8, i, i), channel_id=2, "
                    "source_target_pairs={{0,1},{1,0}}, slice_sizes={{4}}\n}\n",
                    want_cp);
    expect_error("HloModule m, num_partitions=2\nENTRY e {\n  x = f32[4] parameter(0)\n"
                 "  ROOT c = f32[4] collective-permute(x, x), channel_id=1, source_target_pairs={{0,1}}\n}\n",
                 "inferred shape (f32[4], f32[4])", 4, 8);
    /* all-gather-start over groups of 2 gathers f32[4] into f32[8] */
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n"
                 "  ROOT s = (f32[4], f32[12]) all-gather-start(x), replica_groups={{0,1}}, dimensions={0}\n}\n",
                 "inferred shape (f32[4], f32[8])", 3, 8);
    /* all-gather-done gives element 1 of the start: f32[8], not f32[4] */
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n"
                 "  s = (f32[4], f32[8]) all-gather-start(x), replica_groups={}, dimensions={0}\n"
                 "  ROOT d = f32[4] all-gather-done(s)\n}\n",
                 "inferred shape f32[8]", 4, 8);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT r = f32[4] ragged-all-to-all(x, x, x, x, x)\n}\n",
                 "expects 6 operands, got 5", 3, 8);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n"
                 "  ROOT s = (f32[4], f32[4], u32[], u32[]) collective-permute-start(x)\n}\n",
                 "missing attribute 'source_target_pairs'", 3, 8);
}

static void test_send_recv_copy(void **state)
{
    (void)state;
    static const char *const want[] = {
        "s = (f32[2], u32[], token[]) send(x, t), channel_id=5, is_host_transfer=true, "
        "frontend_attributes={_xla_host_transfer_handler_name=\"h\"}",
        "sd = token[] send-done(s), channel_id=5, is_host_transfer=true",
        "r = (f32[2], u32[], token[]) recv(t), channel_id=0",
        "rd = (f32[2], token[]) recv-done(r), channel_id=0",
        "cs = (f32[2], f32[2], u32[]) copy-start(x), cross_program_prefetch_index=0",
        "cd = f32[2] copy-done(cs)",
        "dm = f32[2] domain(x), domain={kind=\"sharding\", entry={maximal device=1}, exit={}}", NULL};
    IrModule *m = round_trip(
        "ENTRY e {\n  x = f32[2] parameter(0)\n  t = token[] after-all()\n"
        "  s = (f32[2], u32[], token[]) send(x, t), channel_id=5, is_host_transfer=true, "
        "frontend_attributes={_xla_host_transfer_handler_name=\"h\"}\n"
        "  sd = token[] send-done(s), channel_id=5, is_host_transfer=true\n"
        "  r = (f32[2], u32[], token[]) recv(t), channel_id=0\n"
        "  rd = (f32[2], token[]) recv-done(r), channel_id=0\n"
        "  cs = (f32[2], f32[2], u32[]) copy-start(x), cross_program_prefetch_index=0\n"
        "  cd = f32[2] copy-done(cs)\n"
        "  dm = f32[2] domain(x), domain={kind=\"sharding\", entry={maximal device=1}, exit={}}\n"
        "  ROOT o = (token[], (f32[2], token[]), f32[2], f32[2]) tuple(sd, rd, cd, dm)\n}\n",
        want);
    assert_true(find(m, "s")->a.x->is_host_transfer);
    assert_true(find(m, "cs")->a.x->has_cross_program_prefetch);
    ir_module_free(m);
    expect_error("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT s = (f32[2], u32[], token[]) send(x, x)\n}\n",
                 "operand 1 must be a token", 3, 8);
    expect_error("ENTRY e {\n  t = token[] after-all()\n  ROOT r = (f32[2], token[]) recv(t)\n}\n",
                 "(data, u32[], token[])", 3, 8);
}

/* ------------------------------------------------------------------ */
/* the other ops of the full list                                      */
/* ------------------------------------------------------------------ */

/* topk(f32[6,16]) k=8 -> (f32[6,8], s32[6,8]); cholesky and
 * triangular-solve keep a's and b's shapes; batch-norm-training of
 * f32[8,4] feature_index=1 -> (f32[8,4], f32[4], f32[4]). */
static void test_linalg_norm_topk(void **state)
{
    (void)state;
    static const char *const want[] = {
        "tk = (f32[6,8], s32[6,8]) topk(x), k=8, largest=true",
        "ch = f32[3,3] cholesky(a), lower=true",
        "ts = f32[3,5] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=false, "
        "transpose_a=ADJOINT",
        "bt = (f32[8,4], f32[4], f32[4]) batch-norm-training(n, sc, of), epsilon=0.00100000005, feature_index=1",
        "bi = f32[8,4] batch-norm-inference(n, sc, of, sc, of), epsilon=9.99999975e-06, feature_index=1",
        "bg = (f32[8,4], f32[4], f32[4]) batch-norm-grad(n, sc, sc, of, n), epsilon=0.5, feature_index=1", NULL};
    IrModule *m = round_trip(
        "ENTRY e {\n  x = f32[6,16] parameter(0)\n  a = f32[3,3] parameter(1)\n  b = f32[3,5] parameter(2)\n"
        "  n = f32[8,4] parameter(3)\n  sc = f32[4] parameter(4)\n  of = f32[4] parameter(5)\n"
        "  tk = (f32[6,8], s32[6,8]) topk(x), k=8, largest=true\n"
        "  ch = f32[3,3] cholesky(a), lower=true\n"
        "  ts = f32[3,5] triangular-solve(a, b), left_side=true, lower=true, transpose_a=ADJOINT\n"
        "  bt = (f32[8,4], f32[4], f32[4]) batch-norm-training(n, sc, of), epsilon=0.001, feature_index=1\n"
        "  bi = f32[8,4] batch-norm-inference(n, sc, of, sc, of), epsilon=1e-05, feature_index=1\n"
        "  bg = (f32[8,4], f32[4], f32[4]) batch-norm-grad(n, sc, sc, of, n), epsilon=0.5, feature_index=1\n"
        "  ROOT t = ((f32[6,8], s32[6,8]), f32[3,3], f32[3,5], f32[8,4]) tuple(tk, ch, ts, bi)\n}\n",
        want);
    assert_int_equal(find(m, "tk")->a.x->topk_k, 8);
    assert_true(find(m, "tk")->a.x->topk_largest);
    assert_true(find(m, "ts")->a.x->left_side);
    assert_string_equal(find(m, "ts")->a.x->transpose_a, "ADJOINT");
    assert_true(find(m, "bt")->a.x->epsilon == 0.001f);
    ir_module_free(m);
    expect_error("ENTRY e {\n  x = f32[6,16] parameter(0)\n  ROOT tk = (f32[6,8], s32[6,8]) topk(x), k=8, largest=true, "
                 "smallest=true\n}\n",
                 "unknown attribute 'smallest' for topk", 3, 62);
    expect_error("ENTRY e {\n  x = f32[6,16] parameter(0)\n  ROOT tk = (f32[6,17], s32[6,17]) topk(x), k=17\n}\n",
                 "k=17 must be in [0, 16]", 3, 8);
    expect_error("ENTRY e {\n  a = f32[3,4] parameter(0)\n  ROOT c = f32[3,4] cholesky(a)\n}\n",
                 "square matrices", 3, 8);
    /* b f32[4,5] with left_side: its rows must match a's 3 */
    expect_error("ENTRY e {\n  a = f32[3,3] parameter(0)\n  b = f32[4,5] parameter(1)\n"
                 "  ROOT s = f32[4,5] triangular-solve(a, b), left_side=true\n}\n",
                 "must have 3 in its second-to-last dimension", 4, 8);
    expect_error("ENTRY e {\n  n = f32[8,4] parameter(0)\n  s = f32[3] parameter(1)\n"
                 "  ROOT b = (f32[8,4], f32[4], f32[4]) batch-norm-training(n, s, s), epsilon=1, feature_index=1\n}\n",
                 "must be f32[4], got f32[3]", 4, 8);
    expect_error("ENTRY e {\n  n = f32[8,4] parameter(0)\n"
                 "  ROOT b = f32[8,4] batch-norm-inference(n, n, n, n), epsilon=1, feature_index=1\n}\n",
                 "expects 5 operands, got 4", 3, 8);
    expect_error("ENTRY e {\n  n = f32[8,4] parameter(0)\n  s = f32[4] parameter(1)\n"
                 "  ROOT b = (f32[8,4], f32[4], f32[4]) batch-norm-training(n, s, s), epsilon=1\n}\n",
                 "missing attribute 'feature_index'", 4, 8);
}

/* ragged-dot f32[16,8] x f32[3,8,5] (ragged lhs dim 0, group dim 0,
 * contracting 1 and 1) -> f32[16,5]; scaled-dot is dot on operands 0 and 1:
 * [2,16] x [16,4] -> [2,4]. */
static void test_dots(void **state)
{
    (void)state;
    static const char *const want[] = {
        "rd = f32[16,5] ragged-dot(l, r, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
        "lhs_ragged_dims={0}, rhs_group_dims={0}",
        "sd = bf16[2,4] scaled-dot(a, b, as, bs), lhs_contracting_dims={1}, rhs_contracting_dims={0}", NULL};
    round_trip_free("ENTRY e {\n  l = f32[16,8] parameter(0)\n  r = f32[3,8,5] parameter(1)\n  g = s32[3] parameter(2)\n"
                    "  a = f8e4m3fn[2,16] parameter(3)\n  b = f8e4m3fn[16,4] parameter(4)\n"
                    "  as = f8e8m0fnu[2,1] parameter(5)\n  bs = f8e8m0fnu[1,4] parameter(6)\n"
                    "  rd = f32[16,5] ragged-dot(l, r, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
                    "lhs_ragged_dims={0}, rhs_group_dims={0}\n"
                    "  sd = bf16[2,4] scaled-dot(a, b, as, bs), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                    "  ROOT t = (f32[16,5], bf16[2,4]) tuple(rd, sd)\n}\n",
                    want);
    expect_error("ENTRY e {\n  l = f32[16,8] parameter(0)\n  r = f32[3,8,5] parameter(1)\n  g = s32[3] parameter(2)\n"
                 "  ROOT rd = f32[16,3] ragged-dot(l, r, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
                 "lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n",
                 "inferred shape f32[16,5]", 5, 8);
    expect_error("ENTRY e {\n  a = f32[2,16] parameter(0)\n"
                 "  ROOT sd = f32[2,2] scaled-dot(a, a, a), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n",
                 "expects 4 operands, got 3", 3, 8);
}

/* rng-bit-generator: (state, output) or the output alone (XLA's verifier);
 * rng-get-and-update-state -> u64[2]; stochastic-convert keeps the
 * dimensions; set-dimension-size makes a dimension dynamic. */
static void test_rng_dynamic_misc(void **state)
{
    (void)state;
    static const char *const want[] = {
        "g = (u64[2], u32[4,4]) rng-bit-generator(st), algorithm=rng_philox",
        "g1 = u32[4] rng-bit-generator(st), algorithm=rng_three_fry",
        "ru = u64[2] rng-get-and-update-state(), delta=131072",
        "sc = s8[4,3] stochastic-convert(f, rnd)",
        "sds = s32[3,4] set-dimension-size(p, two), dimensions={0}",
        "gds = s32[] get-dimension-size(sds), dimensions={0}",
        "mh = s32[4] mulhi(i4, i4)", "ac = c64[2] acos(c)", "sh = f32[2] sinh(x2)",
        "r2 = f32[4] reshape(x4), inferred_dimension=0",
        "cc = f32[2] custom-call(x2), custom_call_target=\"foo\", custom_call_schedule=SCHEDULE_LATEST, "
        "api_version=API_VERSION_UNSPECIFIED",
        "cp = f32[2] call(x2), to_apply=neg, is_composite=true", NULL};
    IrModule *m = round_trip(
        "HloModule m\n"
        "neg {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\n"
        "ENTRY e {\n  st = u64[2] parameter(0)\n  f = f32[4,3] parameter(1)\n  rnd = u32[4,3] parameter(2)\n"
        "  p = s32[3,4] parameter(3)\n  i4 = s32[4] parameter(4)\n  c = c64[2] parameter(5)\n"
        "  x2 = f32[2] parameter(6)\n  x4 = f32[4] parameter(7)\n  two = s32[] constant(2)\n"
        "  g = (u64[2], u32[4,4]) rng-bit-generator(st), algorithm=rng_philox\n"
        "  g1 = u32[4] rng-bit-generator(st), algorithm=rng_three_fry\n"
        "  ru = u64[2] rng-get-and-update-state(), delta=131072\n"
        "  sc = s8[4,3] stochastic-convert(f, rnd)\n"
        "  sds = s32[3,4] set-dimension-size(p, two), dimensions={0}\n"
        "  gds = s32[] get-dimension-size(sds), dimensions={0}\n"
        "  mh = s32[4] mulhi(i4, i4)\n  ac = c64[2] acos(c)\n  sh = f32[2] sinh(x2)\n"
        "  r2 = f32[4] reshape(x4), inferred_dimension=0\n"
        "  cc = f32[2] custom-call(x2), custom_call_target=\"foo\", custom_call_schedule=SCHEDULE_LATEST, "
        "api_version=API_VERSION_UNSPECIFIED\n"
        "  cp = f32[2] call(x2), to_apply=neg, is_composite=true\n"
        "  ROOT t = (s8[4,3], s32[], s32[4], c64[2], f32[2]) tuple(sc, gds, mh, ac, sh)\n}\n",
        want);
    assert_int_equal(find(m, "ru")->a.x->rng_delta, 131072);
    ir_module_free(m);
    expect_error("ENTRY e {\n  st = u64[2] parameter(0)\n  ROOT g = (u64[3], u32[4]) rng-bit-generator(st), "
                 "algorithm=rng_default\n}\n",
                 "result state u64[3] must equal the operand state u64[2]", 3, 8);
    expect_error("ENTRY e {\n  f = f32[4] parameter(0)\n  r = u16[4] parameter(1)\n"
                 "  ROOT s = s8[4] stochastic-convert(f, r)\n}\n",
                 "random must be u32", 4, 8);
    expect_error("ENTRY e {\n  x = s32[4] parameter(0)\n  ROOT m = f32[4] mulhi(x, x)\n}\n",
                 "inferred shape s32[4]", 3, 8);
    expect_error("ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT m = f32[4] mulhi(x, x)\n}\n",
                 "must have an integer element type", 3, 8);
    expect_error("ENTRY e {\n  x = pred[4] parameter(0)\n  ROOT m = pred[4] acosh(x)\n}\n",
                 "floating-point or complex", 3, 8);
    expect_error("ENTRY e {\n  ROOT r = u64[2] rng-get-and-update-state()\n}\n",
                 "missing attribute 'delta'", 2, 8);
    expect_error("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT c = f32[2] custom-call(x), custom_call_target=\"f\", "
                 "custom_call_schedule=SCHEDULE_SOMETIME\n}\n",
                 "SCHEDULE_NONE, SCHEDULE_LATEST or SCHEDULE_EARLIEST", 3, 80);
}

/* scan of f32[4] along 0 with one carry f32[], to_apply (x, acc) ->
 * (x + acc, x + acc): result (f32[4], f32[]). */
static void test_scan(void **state)
{
    (void)state;
    static const char *const want[] = {
        "ROOT scan = (f32[4], f32[]) scan(input, init), dimensions={0}, num_carries=1, is_reverse=false, to_apply=add",
        NULL};
    const char *scan = "add {\n  input = f32[] parameter(0)\n  acc = f32[] parameter(1)\n"
                       "  add = f32[] add(acc, input)\n  ROOT t = (f32[], f32[]) tuple(add, add)\n}\n"
                       "ENTRY Scan {\n  input = f32[4] parameter(0)\n  init = f32[] constant(0)\n"
                       "  ROOT scan = (f32[4], f32[]) scan(input, init), dimensions={0}, num_carries=1, "
                       "is_reverse=false, to_apply=add\n}\n";
    round_trip_free(scan, want);
    expect_error("add {\n  input = f32[] parameter(0)\n  acc = f32[] parameter(1)\n"
                 "  add = f32[] add(acc, input)\n  ROOT t = (f32[], f32[]) tuple(add, add)\n}\n"
                 "ENTRY Scan {\n  input = f32[4] parameter(0)\n  init = f32[] constant(0)\n"
                 "  ROOT scan = (f32[5], f32[]) scan(input, init), dimensions={0}, num_carries=1, to_apply=add\n}\n",
                 "inferred shape (f32[4], f32[])", 10, 8);
}

/* ------------------------------------------------------------------ */
/* control predecessors, kept attributes, errors                       */
/* ------------------------------------------------------------------ */

static void test_control_and_kept(void **state)
{
    (void)state;
    static const char *const want[] = {
        "b = f32[2] negate(x), control-predecessors={a}",
        "s = ((f32[2]), f32[2], s32[]) negate-start(x), control-predecessors={b}",
        "p = f32[2] parameter(0), parameter_replication={true}",
        "e = f32[2] exponential(x), result_accuracy={tolerance={atol=0,rtol=0,ulps=1}}", NULL};
    round_trip_free("ENTRY m {\n  x = f32[2] parameter(1)\n  p = f32[2] parameter(0), parameter_replication={true}\n"
                    "  a = f32[2] abs(x)\n  b = f32[2] negate(x), control-predecessors={a}\n"
                    "  s = ((f32[2]), f32[2], s32[]) negate-start(x), control-predecessors={b}\n"
                    "  d = f32[2] negate-done(s)\n"
                    "  e = f32[2] exponential(x), result_accuracy={tolerance={atol=0,rtol=0,ulps=1}}\n"
                    "  ROOT t = (f32[2], f32[2], f32[2]) tuple(d, e, p)\n}\n",
                    want);
    expect_error("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] cholesky(x), lower=true, upper=false\n}\n",
                 "unknown attribute 'upper' for cholesky", 3, 44);
    expect_error("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] domain(x)\n}\n",
                 "missing attribute 'domain'", 3, 8);
    expect_error("ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] frobnicate-start(x)\n}\n",
                 "unknown opcode 'frobnicate-start'", 3, 19);
}

/* Every allocation of parsing, wrapping and verifying a sugared async
 * module may fail: the parse then reports out of memory (and leaks
 * nothing, which the asan build checks), until enough succeed. */
static void test_failure_injection(void **state)
{
    (void)state;
    const char *text = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
                       "ENTRY e {\n  x = f32[4] parameter(0), parameter_replication={false}\n"
                       "  s = ((f32[4]), f32[4], s32[]) abs-start(x), async_execution_thread=\"t\"\n"
                       "  d = f32[4] abs-done(s)\n"
                       "  r = ((f32[4], f32[]), f32[], s32[]) reduce-start(d, c), dimensions={0}, to_apply=add\n"
                       "  c = f32[] constant(0)\n"
                       "  ROOT rd = f32[] reduce-done(r)\n}\n";
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    bool done = false;
    for (long n = 1; n < 2000 && !done; n++) {
        IrModule *m = NULL;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = ir_parse("f.hlo", text, strlen(text), &o, &m, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            done = true;
            ir_module_free(m);
        } else {
            if (st != IR_ENOMEM)
                fail_msg("allocation %ld failing gave status %d: %s", n, (int)st, d.msg ? d.msg : "");
            assert_null(m);
        }
        ir_diag_clear(&d);
    }
    assert_true(done);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fusion),
        cmocka_unit_test(test_async_explicit),
        cmocka_unit_test(test_async_sugar),
        cmocka_unit_test(test_collective_pairs),
        cmocka_unit_test(test_send_recv_copy),
        cmocka_unit_test(test_linalg_norm_topk),
        cmocka_unit_test(test_dots),
        cmocka_unit_test(test_rng_dynamic_misc),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_control_and_kept),
        cmocka_unit_test(test_failure_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
