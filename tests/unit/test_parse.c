/*
 * test_parse.c: the HLO text parser (ir/parse.c, ir/lex.c). Module headers
 * and aliases, computations in any order with both signature forms, ROOT
 * and ENTRY rules, operand forms, comments, shapes and layouts, every
 * attribute kind into its IrAttrs field, constants, shapes XLA lets the
 * text omit, a table of bad inputs with message and line:col, limits,
 * files, unterminated buffers, linear time on big inputs, and failure
 * injection. Modules are parsed with verify = false (the verifier is
 * tested in test_verify.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attrs_test.h"
#include "ir/ir.h"

static IrParseOptions opts(void)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    return o;
}

static IrModule *parse_ok(const char *text)
{
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &o, &m, &d);
    if (st != IR_OK) {
        char *f = ir_diag_format(&d, "test");
        fail_msg("parse failed:\n%s", f ? f : "?");
    }
    assert_non_null(m);
    ir_diag_clear(&d);
    return m;
}

static void parse_err_opt(const char *text, const IrParseOptions *o, const char *fragment, int line, int col)
{
    IrModule *m = (IrModule *)1;
    IrDiag d = {0};
    IrStatus st = ir_parse("bad.hlo", text, strlen(text), o, &m, &d);
    if (st != IR_EINPUT)
        fail_msg("expected an input error for:\n%s\n(status %d)", text, (int)st);
    assert_null(m);
    if (!d.msg || !strstr(d.msg, fragment))
        fail_msg("message '%s' lacks '%s' for:\n%s", d.msg ? d.msg : "(none)", fragment, text);
    if (d.pos.line != line || d.pos.col != col)
        fail_msg("error '%s' at %d:%d, expected %d:%d for:\n%s", d.msg, (int)d.pos.line, (int)d.pos.col, line, col,
                 text);
    assert_string_equal(d.file, "bad.hlo");
    ir_diag_clear(&d);
}

static void parse_err(const char *text, const char *fragment, int line, int col)
{
    IrParseOptions o = opts();
    parse_err_opt(text, &o, fragment, line, col);
}

static IrComputation *comp(IrModule *m, const char *name)
{
    int32_t i = ir_find_computation(m, name);
    if (i < 0)
        fail_msg("no computation %s", name);
    return m->comp[i];
}

static IrInstr *instr(IrModule *m, const char *cname, const char *name)
{
    IrComputation *c = comp(m, cname);
    int32_t i = ir_find_instr(c, name);
    if (i < 0)
        fail_msg("no instruction %s in %s", name, cname);
    return &c->instr[i];
}

static int32_t idx(IrModule *m, const char *cname, const char *name)
{
    return ir_find_instr(comp(m, cname), name);
}

static void assert_list(const IrI64List *l, const int64_t *want, int32_t n)
{
    assert_int_equal(l->n, n);
    for (int32_t i = 0; i < n; i++)
        if (l->v[i] != want[i])
            fail_msg("entry %d is %lld, expected %lld", (int)i, (long long)l->v[i], (long long)want[i]);
}

#define LIST(...) (int64_t[]){__VA_ARGS__}, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static void assert_shape(const IrShape *s, const char *want)
{
    char *t = ir_shape_str(s, true);
    assert_non_null(t);
    assert_string_equal(t, want);
    free(t);
}

/* ---- module header ---- */

static void test_header(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule my_module, is_scheduled=true, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, f32[2]{0})},\n"
        "  input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {0}, must-alias), {}: (2, {}) },\n"
        "  num_partitions=4, replica_count=2, frontend_attributes={a=\"b\"},\n"
        "  allow_spmd_sharding_propagation_to_output={true}, allow_spmd_sharding_propagation_to_parameters={false,true},\n"
        "  alias_passthrough_params=true\n"
        "\n"
        "ENTRY e {\n"
        "  p = f32[2] parameter(0)\n"
        "  ROOT t = (f32[2], f32[2]) tuple(p, p)\n"
        "}\n");
    assert_string_equal(m->name, "my_module");
    assert_true(m->is_scheduled);
    assert_string_equal(m->entry_computation_layout, "(f32[2]{0})->(f32[2]{0}, f32[2]{0})");
    assert_int_equal(m->num_partitions, 4);
    assert_int_equal(m->replica_count, 2);
    assert_int_equal(m->nalias, 3);
    assert_list(&m->alias[0].output_index, LIST(0));
    assert_int_equal(m->alias[0].param_number, 0);
    assert_int_equal(m->alias[0].param_index.n, 0);
    assert_false(m->alias[0].must_alias);
    assert_list(&m->alias[1].output_index, LIST(1));
    assert_int_equal(m->alias[1].param_number, 1);
    assert_list(&m->alias[1].param_index, LIST(0));
    assert_true(m->alias[1].must_alias);
    assert_int_equal(m->alias[2].output_index.n, 0);
    assert_int_equal(m->alias[2].param_number, 2);
    assert_false(m->alias[2].must_alias);
    assert_int_equal(m->nheader_attr, 4);
    const char *keys[] = {"frontend_attributes", "allow_spmd_sharding_propagation_to_output",
                          "allow_spmd_sharding_propagation_to_parameters", "alias_passthrough_params"};
    const char *vals[] = {"{a=\"b\"}", "{true}", "{false,true}", "true"};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(m->header_attr[i].key, keys[i]);
        assert_string_equal(m->header_attr[i].value, vals[i]);
    }
    assert_string_equal(m->file, "t.hlo");
    assert_non_null(m->src);
    assert_non_null(strstr(m->src, "my_module"));
    ir_module_free(m);

    /* without a header, XLA names the module after its entry */
    m = parse_ok("e {\n  ROOT c = f32[] constant(1)\n}\n");
    assert_string_equal(m->name, "module_e");
    assert_int_equal(m->num_partitions, 0);
    assert_int_equal(m->replica_count, 0);
    assert_false(m->is_scheduled);
    assert_null(m->entry_computation_layout);
    ir_module_free(m);

    parse_err("HloModule m, bogus=1\nENTRY e { ROOT c = f32[] constant(1) }", "unknown module attribute 'bogus'", 1, 14);
    parse_err("HloModule m, num_partitions=2, num_partitions=2\nENTRY e { ROOT c = f32[] constant(1) }",
              "duplicate module attribute 'num_partitions'", 1, 32);
    parse_err("HloModule m, num_partitions=0\nENTRY e { ROOT c = f32[] constant(1) }", "num_partitions must be >= 1", 1, 29);
    parse_err("HloModule m, input_output_alias={ {0}: (0, {}, maybe) }\nENTRY e { ROOT c = f32[] constant(1) }",
              "expected may-alias or must-alias, found 'maybe'", 1, 48);
    parse_err("HloModule m\n", "expected a computation after the module header, found end of input", 2, 1);
    parse_err("", "expected HloModule or a computation, found end of input", 1, 1);
}

/* buffer_donor (JAX's donate_argnums where it leaves the output shardings
 * open): each (parameter, {index}) kept with its position; one that names
 * no parameter or leaf, twice, or also aliased is an error at its '('. */
static void test_buffer_donor(void **state)
{
    (void)state;
    const char *body = "ENTRY e {\n  p = f32[2] parameter(0)\n  q = (f32[2], s32[]) parameter(1)\n"
                       "  ROOT t = (f32[2], f32[2]) tuple(p, p)\n}\n";
    char text[512];
    snprintf(text, sizeof text, "HloModule m, buffer_donor={ (0, {}), (1, {1}) }\n%s", body);
    IrModule *m = parse_ok(text);
    assert_int_equal(m->ndonor, 2);
    assert_int_equal(m->donor[0].param_number, 0);
    assert_int_equal(m->donor[0].param_index.n, 0);
    assert_int_equal(m->donor[0].pos.line, 1);
    assert_int_equal(m->donor[0].pos.col, 29);
    assert_int_equal(m->donor[1].param_number, 1);
    assert_list(&m->donor[1].param_index, LIST(1));
    assert_int_equal(m->nheader_attr, 0); /* not kept raw: printed from donor[] */
    ir_module_free(m);
    m = parse_ok("HloModule m, buffer_donor={}\nENTRY e { ROOT c = f32[] constant(1) }");
    assert_int_equal(m->ndonor, 0);
    ir_module_free(m);
    snprintf(text, sizeof text, "HloModule m, buffer_donor={ (0, {}), (2, {}) }\n%s", body);
    parse_err(text, "buffer_donor: the entry computation e has no parameter 2 (it has 2)", 1, 38);
    snprintf(text, sizeof text, "HloModule m, buffer_donor={ (1, {2}) }\n%s", body);
    parse_err(text, "buffer_donor: parameter 1 has no leaf at index 2", 1, 29);
    snprintf(text, sizeof text, "HloModule m, buffer_donor={ (0, {0}) }\n%s", body);
    parse_err(text, "buffer_donor: parameter 0 has no leaf at index 0", 1, 29);
    snprintf(text, sizeof text, "HloModule m, buffer_donor={ (0, {}), (0, {}) }\n%s", body);
    parse_err(text, "buffer_donor: parameter 0 is named twice", 1, 38);
    snprintf(text, sizeof text, "HloModule m, input_output_alias={ {0}: (0, {}) }, buffer_donor={ (0, {}) }\n%s",
             body);
    parse_err(text, "buffer_donor: parameter 0 is also in input_output_alias", 1, 66);
    parse_err("HloModule m, buffer_donor={ 0 }\nENTRY e { ROOT c = f32[] constant(1) }",
              "expected '(' to start a buffer donor (parameter, {index}), found '0'", 1, 29);
    parse_err("HloModule m, buffer_donor={ (0) }\nENTRY e { ROOT c = f32[] constant(1) }",
              "expected ',' after the parameter number, found ')'", 1, 31);
    parse_err("HloModule m, buffer_donor={ (0, {}) \nENTRY e { ROOT c = f32[] constant(1) }",
              "expected '}' to end buffer_donor", 2, 1);
    parse_err("HloModule m, buffer_donor={ (x, {}) }\nENTRY e { ROOT c = f32[] constant(1) }",
              "expected parameter number, found 'x'", 1, 30);
}

/* ---- computations ---- */

static const char *ORDER_TEXT =
    "HloModule order\n"
    "\n"
    "%main (p: f32[2], q: (f32[], s32[])) -> f32[2] {\n"
    "  %p = f32[2] parameter(0)\n"
    "  %q = (f32[], s32[]) parameter(1)\n"
    "  ROOT %r = f32[2] call(%p), to_apply=%callee\n"
    "}\n"
    "\n"
    "ENTRY %entry.1 {\n"
    "  a = f32[2] parameter(0)\n"
    "  b = (f32[], s32[]) parameter(1)\n"
    "  ROOT c = f32[2] call(a, b), to_apply=main\n"
    "}, execution_thread=\"main\"\n"
    "\n"
    "callee {\n"
    "  x = f32[2] parameter(0)\n"
    "  ROOT y = f32[2] negate(x)\n"
    "}\n";

static void test_computations(void **state)
{
    (void)state;
    IrModule *m = parse_ok(ORDER_TEXT);
    assert_int_equal(m->ncomp, 3);
    IrComputation *mainc = comp(m, "main"), *entry = comp(m, "entry.1"), *callee = comp(m, "callee");
    assert_int_equal(m->entry, ir_find_computation(m, "entry.1"));
    assert_true(entry->is_entry);
    assert_false(mainc->is_entry);
    assert_false(callee->is_entry);
    assert_true(mainc->has_signature);
    assert_false(entry->has_signature);
    assert_int_equal(mainc->pos.line, 3);
    assert_int_equal(mainc->pos.col, 1);
    assert_int_equal(entry->pos.line, 9);
    assert_int_equal(entry->pos.col, 7);
    /* callees resolved in any order: main calls callee (defined later) */
    IrInstr *r = instr(m, "main", "r");
    assert_int_equal(r->ncalled, 1);
    assert_int_equal(r->called[0], ir_find_computation(m, "callee"));
    IrInstr *c = instr(m, "entry.1", "c");
    assert_int_equal(c->called[0], ir_find_computation(m, "main"));
    assert_int_equal(mainc->nparam, 2);
    assert_int_equal(mainc->param[1], idx(m, "main", "q"));
    assert_shape(&instr(m, "main", "q")->shape, "(f32[], s32[])");
    ir_module_free(m);

    /* without ENTRY the last computation is the entry */
    m = parse_ok("HloModule m\nf {\n ROOT x = f32[] constant(1)\n}\ng {\n ROOT y = f32[] constant(2)\n}\n");
    assert_int_equal(m->entry, 1);
    assert_true(m->comp[1]->is_entry);
    assert_false(m->comp[0]->is_entry);
    ir_module_free(m);

    /* a signature whose parameter shapes disagree is informative only
     * (as in XLA), but the result shape must match the root */
    m = parse_ok("HloModule m\nENTRY e (a: ()) -> f32[2] {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n");
    ir_module_free(m);
    parse_err("HloModule m\nENTRY e (a: f32[2]) -> f32[3] {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n",
              "computation 'e' is declared to return f32[3] but its root 'n' is f32[2]", 2, 9);
    parse_err("HloModule m\nENTRY e {\n ROOT x = f32[] constant(1)\n}\nENTRY f {\n ROOT y = f32[] constant(2)\n}\n",
              "more than one ENTRY computation ('e' and 'f')", 5, 1);
    parse_err("HloModule m\nf {\n ROOT x = f32[] constant(1)\n}\nf {\n ROOT y = f32[] constant(2)\n}\n",
              "duplicate computation name 'f'", 5, 1);
    parse_err("HloModule m\nENTRY e {\n}\n", "computation 'e' has no instructions", 2, 7);
    parse_err("HloModule m\nENTRY e {\n ROOT x = f32[] constant(1)\n}, execution_thread=1\n",
              "expected string after execution_thread=, found '1'", 4, 21);
}

static void test_root_rules(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule m\nENTRY e {\n  a = f32[] constant(1)\n  ROOT b = f32[] negate(a)\n"
                           "  c = f32[] negate(b)\n}\n");
    assert_int_equal(comp(m, "e")->root, 1);
    ir_module_free(m);
    m = parse_ok("HloModule m\nENTRY e {\n  a = f32[] constant(1)\n  b = f32[] negate(a)\n}\n");
    assert_int_equal(comp(m, "e")->root, 1); /* the last instruction */
    ir_module_free(m);
    parse_err("HloModule m\nENTRY e {\n  ROOT a = f32[] constant(1)\n  ROOT b = f32[] negate(a)\n}\n",
              "computation 'e' has more than one ROOT", 4, 3);
}

/* ---- instructions, operands, comments ---- */

static void test_operands_and_comments(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m // a comment\n"
        "/* a block\n   comment */\n"
        "ENTRY %e {\n"
        "  ROOT %sum = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %y) // forward references\n"
        "  %x = f32[4]{0} parameter(0)\n"
        "  y = f32[4] /* inline */ parameter(1)\n"
        "  d = f32[4] dynamic-update-slice(x, y, s, s, /*index=4*/s,\n"
        "        s), sharding={replicated},\n"
        "      metadata={op_name=\"d\"}\n"
        "  s = s32[] constant(0)\n"
        "}\n");
    IrInstr *sum = instr(m, "e", "sum");
    assert_int_equal(sum->op, OP_ADD);
    assert_int_equal(sum->nopnd, 2);
    assert_int_equal(sum->opnd[0], idx(m, "e", "x"));
    assert_int_equal(sum->opnd[1], idx(m, "e", "y"));
    assert_int_equal(sum->pos.line, 5);
    assert_int_equal(sum->pos.col, 8); /* where the name starts, after ROOT */
    assert_int_equal(instr(m, "e", "y")->pos.col, 3);
    assert_int_equal(comp(m, "e")->root, 0);
    IrInstr *d = instr(m, "e", "d");
    assert_int_equal(d->nopnd, 6);
    for (int i = 2; i < 6; i++)
        assert_int_equal(d->opnd[i], idx(m, "e", "s"));
    assert_int_equal(d->sharding->kind, SHD_REPLICATED);
    assert_string_equal(d->a.metadata, "op_name=\"d\"");
    assert_int_equal(instr(m, "e", "x")->a.parameter_number, 0);
    assert_int_equal(instr(m, "e", "y")->a.parameter_number, 1);
    ir_module_free(m);

    parse_err("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(f32[5] x)\n}\n",
              "operand 'x' is written as f32[5] but is f32[4]", 4, 33);
    parse_err("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x y)\n}\n",
              "expected ',' or ')' after an operand, found 'y'", 4, 28);
}

/* A UTF-8 byte order mark at the start is skipped; positions count from
 * the first character after it, as an editor shows them. A non-ASCII
 * character where a name goes is quoted whole. */
static void test_byte_order_mark(void **state)
{
    (void)state;
    IrModule *m = parse_ok("\xef\xbb\xbfHloModule m\nENTRY e {\n  ROOT x = f32[4] parameter(0)\n}\n");
    assert_string_equal(m->name, "m");
    ir_module_free(m);
    parse_err("\xef\xbb\xbfHloModul m\n", "found 'HloModul'; did you mean HloModule?", 1, 1);
    /* a character outside names is quoted whole, not its first byte */
    parse_err("HloModule m\nENTRY e {\n  \xc3\xa9 = f32[4] parameter(0)\n}\n", "found '\xc3\xa9'", 3, 3);
    /* a name with a non-ASCII letter is quoted whole, at its start (it was
     * "expected '=' after the instruction name, found 'é'" at the é) */
    parse_err("HloModule m\nENTRY e {\n  x\xc3\xa9 = f32[4] parameter(0)\n}\n",
              "expected instruction name or '}', found 'x\xc3\xa9': a name holds ASCII letters, digits, '_', '.' and '-'",
              3, 3);
}

static void test_shapes(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "ENTRY e {\n"
        "  a = pred[2] parameter(0)\n  b = s8[2] parameter(1)\n  c = s16[2] parameter(2)\n"
        "  d = s32[2] parameter(3)\n  e = s64[2] parameter(4)\n  f = u8[2] parameter(5)\n"
        "  g = u16[2] parameter(6)\n  h = u32[2] parameter(7)\n  i = u64[2] parameter(8)\n"
        "  j = f16[2] parameter(9)\n  k = bf16[2] parameter(10)\n  l = f32[] parameter(11)\n"
        "  n = f64[8,16]{1,0} parameter(12)\n  o = c64[2] parameter(13)\n  q = c128[2] parameter(14)\n"
        "  r = token[] parameter(15)\n"
        "  s = f32[8,128]{1,0:T(8,128)(2,1)} parameter(16)\n"
        "  t = f32[]{:T(256)} parameter(17)\n"
        "  u = ((f32[2], s32[]), token[], ()) parameter(18)\n"
        "  v = f32[0,3]{0,1} parameter(19)\n"
        "  ROOT w = () tuple()\n"
        "}\n");
    const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "n", "o", "q", "r", "s", "t",
                           "u", "v", "w"};
    const char *want[] = {"pred[2]", "s8[2]", "s16[2]", "s32[2]", "s64[2]", "u8[2]", "u16[2]", "u32[2]",
                          "u64[2]", "f16[2]", "bf16[2]", "f32[]", "f64[8,16]{1,0}", "c64[2]", "c128[2]",
                          "token[]", "f32[8,128]{1,0:T(8,128)(2,1)}", "f32[]{:T(256)}",
                          "((f32[2], s32[]), token[], ())", "f32[0,3]{0,1}", "()"};
    for (int i = 0; i < 21; i++)
        assert_shape(&instr(m, "e", names[i])->shape, want[i]);
    IrInstr *s = instr(m, "e", "s");
    assert_true(s->shape.has_layout);
    assert_int_equal(s->shape.minor_to_major[0], 1);
    assert_string_equal(s->shape.layout_tail, "T(8,128)(2,1)");
    assert_int_equal(instr(m, "e", "w")->shape.ntuple, 0);
    ir_module_free(m);
}

/* ---- attributes ---- */

static void test_attributes_data(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "ENTRY e {\n"
        "  p = f32[4,8] parameter(0)\n"
        "  s = f32[] parameter(1)\n"
        "  i = s32[] parameter(2)\n"
        "  bc = f32[2,4,8] broadcast(p), dimensions={1,2}\n"
        "  tr = f32[8,4] transpose(p), dimensions={1,0}\n"
        "  rv = f32[4,8] reverse(p), dimensions={0}\n"
        "  cc = f32[8,8] concatenate(p, p), dimensions={0}\n"
        "  io = s32[4] iota(), iota_dimension=0\n"
        "  sl = f32[2,3] slice(p), slice={[0:4:2], [2:8:2]}\n"
        "  s2 = f32[4,6] slice(p), slice={[0:4], [2:8]}\n"
        "  ds = f32[2,2] dynamic-slice(p, i, i), dynamic_slice_sizes={2,2}\n"
        "  pd = f32[5,12] pad(p, s), padding=0_1_0x-1_2_1\n"
        "  p2 = f32[4,9] pad(p, s), padding=0_0x1_0\n"
        "  tp = (f32[4,8], f32[]) tuple(p, s)\n"
        "  gt = f32[] get-tuple-element(tp), index=1\n"
        "  rs = f32[32] reshape(p), inferred_dimension=0\n"
        "  rp = f32[4,8] reduce-precision(p), exponent_bits=5, mantissa_bits=10\n"
        "  ex = f32[4,8] exponential(p), result_accuracy={mode=highest}\n"
        "  gd = s32[] get-dimension-size(p), dimensions={1}\n"
        "  cm = pred[4,8] compare(p, p), direction=LT, type=TOTALORDER\n"
        "  c2 = pred[4,8] compare(p, p), direction=GE\n"
        "  ROOT out = f32[4,8] copy(p)\n"
        "}\n");
    assert_list(&instr(m, "e", "bc")->a.dimensions, LIST(1, 2));
    assert_true(instr(m, "e", "bc")->a.has_dimensions);
    assert_false(instr(m, "e", "p")->a.has_dimensions);
    assert_list(&instr(m, "e", "tr")->a.dimensions, LIST(1, 0));
    assert_list(&instr(m, "e", "rv")->a.dimensions, LIST(0));
    assert_list(&instr(m, "e", "cc")->a.dimensions, LIST(0));
    assert_int_equal(instr(m, "e", "io")->a.iota_dimension, 0);
    IrAttrs *a = &instr(m, "e", "sl")->a;
    assert_list(&a->x->slice_start, LIST(0, 2));
    assert_list(&a->x->slice_limit, LIST(4, 8));
    assert_list(&a->x->slice_stride, LIST(2, 2));
    a = &instr(m, "e", "s2")->a;
    assert_list(&a->x->slice_stride, LIST(1, 1));
    assert_list(&instr(m, "e", "ds")->a.x->dynamic_slice_sizes, LIST(2, 2));
    a = &instr(m, "e", "pd")->a;
    assert_list(&a->x->pad_lo, LIST(0, -1));
    assert_list(&a->x->pad_hi, LIST(1, 2));
    assert_list(&a->x->pad_interior, LIST(0, 1));
    a = &instr(m, "e", "p2")->a;
    assert_list(&a->x->pad_lo, LIST(0, 1));
    assert_list(&a->x->pad_hi, LIST(0, 0));
    assert_list(&a->x->pad_interior, LIST(0, 0));
    assert_int_equal(instr(m, "e", "gt")->a.tuple_index, 1);
    assert_int_equal(instr(m, "e", "rp")->a.x->exponent_bits, 5);
    assert_int_equal(instr(m, "e", "rp")->a.x->mantissa_bits, 10);
    assert_list(&instr(m, "e", "gd")->a.dimensions, LIST(1));
    assert_int_equal(instr(m, "e", "cm")->a.direction, CMP_LT);
    assert_int_equal(instr(m, "e", "cm")->a.cmp_type, CMPT_TOTALORDER);
    assert_int_equal(instr(m, "e", "c2")->a.direction, CMP_GE);
    assert_int_equal(instr(m, "e", "c2")->a.cmp_type, CMPT_DEFAULT);
    /* An instruction with none of the rarer attributes shares the empty
     * IrAttrsX (group counts 0: read as 1); one with some has its own. */
    assert_ptr_equal(instr(m, "e", "out")->a.x, &ir_no_attrs_x);
    assert_int_equal(instr(m, "e", "out")->a.x->feature_group_count, 0);
    assert_ptr_not_equal(instr(m, "e", "sl")->a.x, &ir_no_attrs_x);
    assert_ptr_not_equal(instr(m, "e", "sl")->a.x, instr(m, "e", "s2")->a.x);
    ir_module_free(m);
}

static void test_attributes_contractions(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
        "ge {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = pred[] compare(x, y), direction=GE\n}\n"
        "ENTRY e {\n"
        "  l = f32[2,3,4] parameter(0)\n"
        "  r = f32[2,4,5] parameter(1)\n"
        "  z = f32[] constant(0)\n"
        "  dt = f32[2,3,5] dot(l, r), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2},\n"
        "    rhs_contracting_dims={1}, operand_precision={high,highest}, algorithm=dot_bf16_bf16_f32\n"
        "  in = f32[1,8,8,3] parameter(2)\n"
        "  k = f32[3,3,3,16] parameter(3)\n"
        "  cv = f32[1,4,4,16] convolution(in, k), window={size=3x3 stride=2x2 pad=1_1x1_-1 lhs_dilate=1x1\n"
        "    rhs_dilate=2x1 rhs_reversal=0x1}, dim_labels=b01f_01io->b01f, feature_group_count=1,\n"
        "    batch_group_count=1, convolution_kind=fprop\n"
        "  c1 = f32[128,256,8] convolution(l, r), window={size=1}, dim_labels=0bf_io0->0bf, feature_group_count=2\n"
        "  rd = f32[2] reduce(l, z), dimensions={1,2}, to_apply=add\n"
        "  rw = f32[2,3,4] reduce-window(l, z), window={size=1x1x2 pad=0_0x0_0x1_0}, to_apply=add\n"
        "  ss = f32[2,3,4] select-and-scatter(l, l, z), window={size=1x1x1}, select=ge, scatter=add\n"
        "  so = f32[2,3,4] sort(l), dimensions={2}, is_stable=true, to_apply=ge\n"
        "  mp = f32[2,3,4] map(l, l), dimensions={0,1,2}, to_apply=add\n"
        "  ROOT t = () tuple()\n"
        "}\n");
    IrAttrs *a = &instr(m, "e", "dt")->a;
    assert_list(&a->dot.lhs_batch, LIST(0));
    assert_list(&a->dot.rhs_batch, LIST(0));
    assert_list(&a->dot.lhs_contracting, LIST(2));
    assert_list(&a->dot.rhs_contracting, LIST(1));
    assert_string_equal(a->precision_config, "{high,highest}");
    assert_string_equal(a->x->algorithm, "dot_bf16_bf16_f32");
    a = &instr(m, "e", "cv")->a;
    assert_int_equal(a->x->window.rank, 2);
    IrWindowDim *w = a->x->window.dim;
    assert_int_equal(w[0].size, 3);
    assert_int_equal(w[0].stride, 2);
    assert_int_equal(w[0].pad_lo, 1);
    assert_int_equal(w[0].pad_hi, 1);
    assert_int_equal(w[1].pad_lo, 1);
    assert_int_equal(w[1].pad_hi, -1);
    assert_int_equal(w[0].lhs_dilate, 1);
    assert_int_equal(w[0].rhs_dilate, 2);
    assert_int_equal(w[1].rhs_dilate, 1);
    assert_false(w[0].reversal);
    assert_true(w[1].reversal);
    /* b01f_01io->b01f */
    const IrConvDnums *c = &a->x->conv;
    assert_true(c->present);
    assert_int_equal(c->nspatial, 2);
    assert_int_equal(c->in_batch, 0);
    assert_int_equal(c->in_feature, 3);
    assert_int_equal(c->in_spatial[0], 1);
    assert_int_equal(c->in_spatial[1], 2);
    assert_int_equal(c->k_spatial[0], 0);
    assert_int_equal(c->k_spatial[1], 1);
    assert_int_equal(c->k_in_feature, 2);
    assert_int_equal(c->k_out_feature, 3);
    assert_int_equal(c->out_batch, 0);
    assert_int_equal(c->out_feature, 3);
    assert_int_equal(c->out_spatial[1], 2);
    /* 0bf_io0->0bf: spatial first */
    a = &instr(m, "e", "c1")->a;
    assert_int_equal(a->x->window.rank, 1);
    assert_int_equal(a->x->window.dim[0].size, 1);
    assert_int_equal(a->x->window.dim[0].stride, 1);
    assert_int_equal(a->x->window.dim[0].lhs_dilate, 1);
    assert_int_equal(a->x->conv.in_spatial[0], 0);
    assert_int_equal(a->x->conv.in_batch, 1);
    assert_int_equal(a->x->conv.in_feature, 2);
    assert_int_equal(a->x->conv.k_in_feature, 0);
    assert_int_equal(a->x->conv.k_out_feature, 1);
    assert_int_equal(a->x->conv.k_spatial[0], 2);
    assert_int_equal(a->x->feature_group_count, 2);
    assert_int_equal(a->x->batch_group_count, 1);
    int32_t add = ir_find_computation(m, "add"), ge = ir_find_computation(m, "ge");
    IrInstr *rd = instr(m, "e", "rd");
    assert_int_equal(rd->ncalled, 1);
    assert_int_equal(rd->called[0], add);
    assert_list(&rd->a.dimensions, LIST(1, 2));
    IrInstr *rw = instr(m, "e", "rw");
    assert_int_equal(rw->a.x->window.rank, 3);
    assert_int_equal(rw->a.x->window.dim[2].size, 2);
    assert_int_equal(rw->a.x->window.dim[2].pad_lo, 1);
    IrInstr *ss = instr(m, "e", "ss");
    assert_int_equal(ss->ncalled, 2);
    assert_int_equal(ss->called[0], ge); /* [select, scatter] */
    assert_int_equal(ss->called[1], add);
    IrInstr *so = instr(m, "e", "so");
    assert_true(so->a.x->is_stable);
    assert_int_equal(so->called[0], ge);
    assert_int_equal(instr(m, "e", "mp")->called[0], add);
    ir_module_free(m);
}

static void test_attributes_gather_scatter(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
        "ENTRY e {\n"
        "  o = f32[3,4] parameter(0)\n"
        "  i = s32[2,1] parameter(1)\n"
        "  u = f32[2,4] parameter(2)\n"
        "  g = f32[2,4] gather(o, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},\n"
        "    index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true, operand_batching_dims={},\n"
        "    start_indices_batching_dims={}\n"
        "  ROOT s = f32[3,4] scatter(o, i, u), update_window_dims={1}, inserted_window_dims={0},\n"
        "    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add, unique_indices=true,\n"
        "    input_batching_dims={}, scatter_indices_batching_dims={}, indices_are_sorted=false\n"
        "}\n");
    IrAttrs *g = &instr(m, "e", "g")->a;
    assert_list(&g->x->gather.offset_dims, LIST(1));
    assert_list(&g->x->gather.collapsed_slice_dims, LIST(0));
    assert_list(&g->x->gather.start_index_map, LIST(0));
    assert_int_equal(g->x->gather.index_vector_dim, 1);
    assert_list(&g->x->slice_sizes, LIST(1, 4));
    assert_true(g->x->indices_are_sorted);
    assert_int_equal(g->x->gather.operand_batching_dims.n, 0);
    IrInstr *s = instr(m, "e", "s");
    assert_list(&s->a.x->scatter.update_window_dims, LIST(1));
    assert_list(&s->a.x->scatter.inserted_window_dims, LIST(0));
    assert_list(&s->a.x->scatter.scatter_dims_to_operand_dims, LIST(0));
    assert_int_equal(s->a.x->scatter.index_vector_dim, 1);
    assert_true(s->a.x->unique_indices);
    assert_false(s->a.x->indices_are_sorted);
    assert_int_equal(s->called[0], ir_find_computation(m, "add"));
    ir_module_free(m);
}

static void test_attributes_control(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "cond {\n  p = (s32[], f32[]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(3)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
        "body {\n  ROOT p = (s32[], f32[]) parameter(0)\n}\n"
        "b0 {\n  ROOT x = f32[] parameter(0)\n}\n"
        "b1 {\n  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x)\n}\n"
        "ENTRY e {\n"
        "  init = (s32[], f32[]) parameter(0)\n"
        "  w = (s32[], f32[]) while(init), condition=cond, body=body\n"
        "  k = s32[] parameter(1)\n"
        "  f = f32[] parameter(2)\n"
        "  c = f32[] conditional(k, f, f), branch_computations={b1, b0}\n"
        "  b = pred[] parameter(3)\n"
        "  c2 = f32[] conditional(b, f, f), false_computation=b0, true_computation=b1\n"
        "  cl = f32[] call(f), to_apply=b1, is_composite=true\n"
        "  ROOT t = () tuple()\n"
        "}\n");
    int32_t cond = ir_find_computation(m, "cond"), body = ir_find_computation(m, "body");
    int32_t b0 = ir_find_computation(m, "b0"), b1 = ir_find_computation(m, "b1");
    IrInstr *w = instr(m, "e", "w");
    assert_int_equal(w->ncalled, 2);
    assert_int_equal(w->called[0], cond);
    assert_int_equal(w->called[1], body);
    IrInstr *c = instr(m, "e", "c");
    assert_int_equal(c->ncalled, 2);
    assert_int_equal(c->called[0], b1);
    assert_int_equal(c->called[1], b0);
    assert_false(c->cond_pred_form);
    IrInstr *c2 = instr(m, "e", "c2");
    assert_true(c2->cond_pred_form);
    assert_int_equal(c2->called[0], b1); /* [true, false] whatever the text order */
    assert_int_equal(c2->called[1], b0);
    assert_int_equal(instr(m, "e", "cl")->called[0], b1);
    ir_module_free(m);
}

static void test_attributes_collectives(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m, num_partitions=4\n"
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
        "ENTRY e {\n"
        "  p = f32[4] parameter(0)\n"
        "  a0 = f32[4] all-reduce(p), replica_groups={}, to_apply=add\n"
        "  a1 = f32[4] all-reduce(p), replica_groups={{0,1},{2,3}}, channel_id=5, use_global_device_ids=true,\n"
        "    to_apply=add, constrain_layout=false\n"
        "  a2 = f32[4] all-reduce(p), replica_groups=[2,2]<=[4], to_apply=add\n"
        "  a3 = f32[4] all-reduce(p), replica_groups=[2,2]<=[2,2]T(1,0), to_apply=add, mode=cross_replica\n"
        "  ag = f32[16] all-gather(p), dimensions={0}, replica_groups={{0,1,2,3}}\n"
        "  rs = f32[1] reduce-scatter(p), dimensions={0}, replica_groups=[1,4]<=[4], to_apply=add\n"
        "  aa = f32[4] all-to-all(p), dimensions={0}, replica_groups={{0,1,2,3}}\n"
        "  cp = f32[4] collective-permute(p), source_target_pairs={{0,1},{1,2},{3,0}}, channel_id=2\n"
        "  pid = u32[] partition-id()\n"
        "  rid = u32[] replica-id()\n"
        "  ROOT t = () tuple()\n"
        "}\n");
    IrReplicaGroups *g = &test_x(&instr(m, "e", "a0")->a)->replica_groups;
    assert_true(g->present);
    assert_int_equal(g->ngroups, 0);
    assert_false(instr(m, "e", "p")->a.x->replica_groups.present);
    IrInstr *a1 = instr(m, "e", "a1");
    g = &test_x(&a1->a)->replica_groups;
    assert_int_equal(g->ngroups, 2);
    assert_int_equal(g->group_size[0], 2);
    assert_int_equal(g->groups[1][0], 2);
    assert_int_equal(g->groups[1][1], 3);
    assert_false(g->iota);
    assert_int_equal(a1->a.channel_id, 5);
    assert_true(a1->a.use_global_device_ids);
    assert_false(a1->a.x->constrain_layout);
    g = &test_x(&instr(m, "e", "a2")->a)->replica_groups;
    assert_true(g->iota);
    assert_int_equal(g->ngroups, 2);
    assert_int_equal(g->groups[0][0], 0);
    assert_int_equal(g->groups[0][1], 1);
    assert_int_equal(g->groups[1][0], 2);
    assert_int_equal(g->groups[1][1], 3);
    assert_list(&g->iota_shape, LIST(2, 2));
    assert_list(&g->iota_reshape, LIST(4));
    assert_null(g->iota_perm);
    /* [2,2]<=[2,2]T(1,0): T[j0,j1] = A[j1,j0] = 2*j1+j0 -> 0,2 | 1,3 */
    g = &test_x(&instr(m, "e", "a3")->a)->replica_groups;
    assert_int_equal(g->groups[0][0], 0);
    assert_int_equal(g->groups[0][1], 2);
    assert_int_equal(g->groups[1][0], 1);
    assert_int_equal(g->groups[1][1], 3);
    assert_int_equal(g->niota_perm, 2);
    assert_int_equal(g->iota_perm[0], 1);
    assert_int_equal(g->iota_perm[1], 0);
    g = &test_x(&instr(m, "e", "rs")->a)->replica_groups;
    assert_int_equal(g->ngroups, 1);
    assert_int_equal(g->group_size[0], 4);
    assert_int_equal(g->groups[0][3], 3);
    assert_list(&instr(m, "e", "ag")->a.dimensions, LIST(0));
    assert_list(&instr(m, "e", "cp")->a.x->source_target_pairs, LIST(0, 1, 1, 2, 3, 0));
    assert_int_equal(instr(m, "e", "cp")->a.channel_id, 2);
    ir_module_free(m);
}

static void test_attributes_misc(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m, num_partitions=2\n"
        "f {\n  ROOT x = f32[2] parameter(0)\n}\n"
        "ENTRY e {\n"
        "  p = f32[2]{0} parameter(0), sharding={devices=[2]0,1}, parameter_replication={false}\n"
        "  c1 = f32[2]{0} custom-call(p), custom_call_target=\"Sharding\", backend_config=\"a\\\"b\",\n"
        "    api_version=API_VERSION_STATUS_RETURNING, custom_call_has_side_effect=true,\n"
        "    operand_layout_constraints={f32[2]{0}}, schedule=SCHEDULE_LATEST,\n"
        "    output_to_operand_aliasing={{}: (0, {})}\n"
        "  c2 = f32[2] custom-call(p), custom_call_target=\"x\", to_apply=f, backend_config={\"k\": {\"v\": 1}}\n"
        "  c3 = f32[2] custom-call(p), custom_call_target=\"y\", called_computations={f, f}\n"
        "  r = f32[2] rng(p, p), distribution=rng_normal\n"
        "  s = u64[2] parameter(1)\n"
        "  rb = (u64[2], u32[4]) rng-bit-generator(s), algorithm=rng_philox\n"
        "  c = c64[8] parameter(2)\n"
        "  ff = c64[8] fft(c), fft_type=IFFT, fft_length={8}\n"
        "  tok = token[] after-all()\n"
        "  in = ((f32[2]), token[]) infeed(tok), infeed_config=\"cfg\"\n"
        "  out = token[] outfeed(p, tok), outfeed_config=\"oc\", outfeed_shape=f32[2]{0}\n"
        "  n1 = f32[2] negate(p), frontend_attributes={_xla_compute_type=\"host\", k=\"v\"},\n"
        "    metadata={op_type=\"Neg\" op_name=\"a/b\" source_file=\"x.py\" source_line=3},\n"
        "    statistics={visualizing_index=1,stat-1=0.5}, origin={{\"n1\"}}\n"
        "  ROOT n2 = f32[2] negate(n1), control-predecessors={c1, %c3}\n"
        "}\n");
    IrInstr *p = instr(m, "e", "p");
    assert_non_null(p->sharding);
    assert_int_equal(p->sharding->kind, SHD_TILED);
    IrInstr *c1 = instr(m, "e", "c1");
    assert_string_equal(c1->a.x->custom_call_target, "Sharding");
    assert_string_equal(c1->a.x->backend_config, "\"a\\\"b\"");
    assert_string_equal(c1->a.x->api_version, "API_VERSION_STATUS_RETURNING");
    assert_true(c1->a.x->custom_call_has_side_effect);
    assert_int_equal(c1->a.x->noperand_layouts, 1);
    assert_shape(&c1->a.x->operand_layout_constraints[0], "f32[2]{0}");
    assert_int_equal(c1->ncalled, 0);
    IrInstr *c2 = instr(m, "e", "c2");
    assert_true(c2->custom_to_apply);
    assert_int_equal(c2->ncalled, 1);
    assert_string_equal(c2->a.x->backend_config, "{\"k\": {\"v\": 1}}");
    IrInstr *c3 = instr(m, "e", "c3");
    assert_false(c3->custom_to_apply);
    assert_int_equal(c3->ncalled, 2);
    assert_int_equal(c3->called[1], ir_find_computation(m, "f"));
    assert_string_equal(instr(m, "e", "r")->a.x->distribution, "rng_normal");
    assert_string_equal(instr(m, "e", "rb")->a.x->rng_algorithm, "rng_philox");
    assert_null(instr(m, "e", "rb")->a.x->algorithm);
    assert_string_equal(instr(m, "e", "ff")->a.x->fft_type, "IFFT");
    assert_list(&instr(m, "e", "ff")->a.x->fft_length, LIST(8));
    assert_string_equal(instr(m, "e", "in")->a.x->infeed_config, "cfg");
    IrInstr *out = instr(m, "e", "out");
    assert_string_equal(out->a.x->outfeed_config, "oc");
    assert_true(out->a.x->has_outfeed_shape);
    assert_shape(&out->a.x->outfeed_shape, "f32[2]{0}");
    IrInstr *n1 = instr(m, "e", "n1");
    assert_int_equal(n1->a.nfrontend, 2);
    assert_string_equal(ir_frontend_attr(n1, "_xla_compute_type"), "host");
    assert_string_equal(ir_frontend_attr(n1, "k"), "v");
    assert_string_equal(n1->a.metadata, "op_type=\"Neg\" op_name=\"a/b\" source_file=\"x.py\" source_line=3");
    assert_string_equal(n1->a.x->statistics_viz, "{visualizing_index=1,stat-1=0.5}");
    assert_string_equal(n1->a.x->origin, "{{\"n1\"}}");
    IrInstr *n2 = instr(m, "e", "n2");
    assert_list(&n2->a.x->control_predecessors, LIST(idx(m, "e", "c1"), idx(m, "e", "c3")));
    ir_module_free(m);
}

/* ---- constants ---- */

static void test_constants(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n"
        "ENTRY e {\n"
        "  a = f32[] constant(1.5)\n"
        "  b = s32[2,2]{1,0} constant({ {1, 2}, {3, 4} })\n"
        "  c = (f32[2], pred[]) constant(( {0.5, -inf}, true ))\n"
        "  d = bf16[2] constant(bf16[2] {1, 2})\n"
        "  e = pred[] constant(false), sharding={replicated}\n"
        "  ROOT f = c64[] constant((1, -1))\n"
        "}\n");
    IrInstr *a = instr(m, "e", "a");
    assert_int_equal(a->a.literal_bytes, 4);
    float f;
    memcpy(&f, a->a.literal, 4);
    assert_true(f == 1.5f);
    IrInstr *b = instr(m, "e", "b");
    int32_t v[4];
    memcpy(v, b->a.literal, 16);
    assert_true(v[0] == 1 && v[3] == 4);
    IrInstr *c = instr(m, "e", "c");
    assert_int_equal(c->a.literal_bytes, 9);
    float cv[2];
    memcpy(cv, c->a.literal, 8);
    assert_true(cv[0] == 0.5f && cv[1] < -1e38f);
    assert_int_equal(c->a.literal[8], 1);
    uint16_t h[2];
    memcpy(h, instr(m, "e", "d")->a.literal, 4);
    assert_int_equal(h[0], 0x3F80);
    assert_int_equal(h[1], 0x4000);
    assert_int_equal(instr(m, "e", "e")->a.literal[0], 0);
    ir_module_free(m);

    parse_err("HloModule m\nENTRY e {\n  ROOT a = s32[3] constant({1, 2})\n}\n",
              "expected 3 entries in dimension 0 of the literal, found 2", 3, 33);
    parse_err("HloModule m\nENTRY e {\n  ROOT a = s8[] constant(300)\n}\n", "value '300' is out of range for s8", 3, 26);
    parse_err("HloModule m\nENTRY e {\n  ROOT a = f32[2] constant(f32[3] {1, 2, 3})\n}\n",
              "the literal's shape differs", 3, 28);
    parse_err("HloModule m\nENTRY e {\n  ROOT a = f32[] constant({...})\n}\n", "a rank-0 literal has no braces", 3, 27);
}

/* ---- shapes the text omits ---- */

static void test_omitted_shapes(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m, num_partitions=2\n"
        "min {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = minimum(a, b)\n}\n"
        "ENTRY e {\n"
        "  ROOT t = tuple(c, x, g)\n"
        "  c = compare(x, y), direction=LT, sharding={devices=[2,1]0,1}\n"
        "  x = f32[4,2]{0,1} parameter(0)\n"
        "  y = f32[4,2] parameter(1)\n"
        "  z = c64[4,2] parameter(2)\n"
        "  r = real(z)\n"
        "  s = select(c, x, n)\n"
        "  n = negate(x)\n"
        "  g = get-tuple-element(t2), index=1\n"
        "  t2 = tuple(x, z)\n"
        "  pid = partition-id()\n"
        "  tk = after-all()\n"
        "}\n");
    assert_shape(&instr(m, "min", "m")->shape, "f32[]");
    assert_shape(&instr(m, "e", "c")->shape, "pred[4,2]{0,1}");
    assert_shape(&instr(m, "e", "r")->shape, "f32[4,2]");
    assert_shape(&instr(m, "e", "s")->shape, "f32[4,2]{0,1}");
    assert_shape(&instr(m, "e", "n")->shape, "f32[4,2]{0,1}");
    assert_shape(&instr(m, "e", "g")->shape, "c64[4,2]");
    assert_shape(&instr(m, "e", "t")->shape, "(pred[4,2]{0,1}, f32[4,2]{0,1}, c64[4,2])");
    assert_shape(&instr(m, "e", "pid")->shape, "u32[]");
    assert_shape(&instr(m, "e", "tk")->shape, "token[]");
    ir_module_free(m);

    parse_err("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT c = convert(x)\n}\n",
              "'convert' needs an explicit shape", 4, 12);
    /* replica_count alone does not bound the devices a sharding names */
    m = parse_ok("HloModule m, replica_count=2\nENTRY e {\n  ROOT p = f32[8] parameter(0), sharding={devices=[4]0,1,2,3}\n}\n");
    ir_module_free(m);
    /* a sharding on an inferred shape is validated once the shape is known */
    parse_err("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT n = negate(x), sharding={devices=[2,1]0,1}\n}\n",
              "tiles 2 dimensions but shape f32[4] has rank 1", 4, 23);
    parse_err("HloModule m\nENTRY e {\n  a = negate(b)\n  ROOT b = negate(a)\n}\n",
              "cannot infer the shape of 'a': its operands form a cycle", 3, 3);
}

/* Less common forms: the stack-frame tables newer XLA prints, shapes left
 * to ir_infer_shape, compare order=, string escapes. */
static void test_more_forms(void **state)
{
    (void)state;
    IrModule *m = parse_ok(
        "HloModule m\n\n"
        "FileNames\n1 \"a.py\"\n2 \"b.py\"\n\n"
        "FunctionNames\n1 \"f\"\n\n"
        "FileLocations\n1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=5}\n\n"
        "StackFrames\n1 {file_location_id=1 parent_frame_id=0}\n\n"
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
        "ENTRY e {\n"
        "  a = f32[2,3] parameter(0), metadata={op_name=\"x\" stack_frame_id=1}\n"
        "  b = f32[3,4] parameter(1)\n"
        "  z = f32[] constant(0)\n"
        "  d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  r = reduce(a, z), dimensions={1}, to_apply=add\n"
        "  o = opt-barrier(a)\n"
        "  cx = complex(a, a)\n"
        "  cm = pred[2,3] compare(a, a), direction=EQ, order=TOTALORDER\n"
        "  ROOT cc = f32[2,3] custom-call(a), custom_call_target=\"a\\tb\\x41\\101\\\"\\\\\\q\"\n"
        "}\n");
    assert_shape(&instr(m, "e", "d")->shape, "f32[2,4]");
    assert_shape(&instr(m, "e", "r")->shape, "f32[2]");
    assert_shape(&instr(m, "e", "o")->shape, "f32[2,3]");
    assert_shape(&instr(m, "e", "cx")->shape, "c64[2,3]");
    assert_int_equal(instr(m, "e", "cm")->a.cmp_type, CMPT_TOTALORDER);
    assert_string_equal(instr(m, "e", "cc")->a.x->custom_call_target, "a\tbAA\"\\q");
    ir_module_free(m);

    parse_err("HloModule m\nENTRY e {\n  a = f32[2,3] parameter(0)\n  ROOT t = transpose(a), dimensions={0,0}\n}\n",
              "cannot infer the shape of 't' (transpose)", 4, 8);
    parse_err("HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT c = pred[2] compare(a, a), direction=EQ, type=FLOAT, "
              "order=TOTALORDER\n}\n",
              "compare cannot have both type= and order=", 4, 61);
    parse_err("HloModule m\nFileNames\n1 \"a.py\"\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "expected FunctionNames, found 'ENTRY'", 4, 1);
    parse_err("HloModule m\nb {\n  ROOT x = f32[] parameter(0)\n}\nENTRY e {\n  k = pred[] parameter(0)\n"
              "  ROOT c = f32[] conditional(k, k, k), true_computation=b, false_computation=b, branch_computations={b, b}\n}\n",
              "conditional has both branch_computations and true/false_computation", 7, 8);
    parse_err("HloModule m\nb {\n  ROOT x = f32[] parameter(0)\n}\nENTRY e {\n  k = f32[] parameter(0)\n"
              "  ROOT c = f32[] custom-call(k), custom_call_target=\"t\", to_apply=b, called_computations={b}\n}\n",
              "custom-call cannot have both to_apply and called_computations", 7, 8);
    parse_err("HloModule m\nENTRY e {\n  ROOT p = f32[2] %parameter(0)\n}\n", "expected opcode, found '%parameter'", 3, 19);
    parse_err("HloModule m\nENTRY e {\n  ROOT p = f32[2]{5} parameter(0)\n}\n", "layout entry 5 is out of range [0, 1)", 3, 18);
    parse_err("HloModule m\nENTRY e {\n  i = f32[1,3] parameter(0)\n  ROOT r = f32[1,3] reduce-window(i, i), "
              "window={size=1x1 pad=0_0x0_0 pad=0_0x0_0}, to_apply=e\n}\n",
              "duplicate window pad=", 4, 71);
    parse_err("HloModule m\nENTRY e {\n  i = f32[1,3] parameter(0)\n  ROOT r = f32[1,3] reduce-window(i, i), "
              "window={size=1x1 rhs_reversal=0x2}, to_apply=e\n}\n",
              "rhs_reversal= entries must be 0 or 1", 4, 49);
    parse_err("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), "
              "an_attribute_name_far_too_long_to_quote_whole_in_an_error_message_for_sure_yes=1\n}\n",
              "unknown attribute 'an_attribute_name_far_too_long_to_quote_whole_in_an_error_message_for_su...' for parameter", 3, 33);
}

/* A pipe is read in chunks (no size known beforehand). */
static void test_pipe_input(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        FILE *w = fdopen(fds[1], "w");
        fprintf(w, "HloModule piped\nENTRY e {\n  ROOT p = f32[2] parameter(0)");
        for (int i = 0; i < 20000; i++) /* ~200 KB of comment: several chunks */
            fprintf(w, " /* pad %05d */", i);
        fprintf(w, "\n}\n");
        fclose(w);
        _exit(0);
    }
    close(fds[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse_file(path, &o, &m, &d);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    if (st != IR_OK)
        fail_msg("pipe: %s", d.msg ? d.msg : "?");
    assert_string_equal(m->name, "piped");
    ir_module_free(m);
}

/* ---- the table of bad inputs ---- */

static void test_error_table(void **state)
{
    (void)state;
    static const struct {
        const char *text, *fragment;
        int line, col;
    } cases[] = {
        /* truncated text */
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n", "expected '}' to end computation 'e', found end of input", 4, 1},
        {"HloModule m\nENTRY e {\n  p = f32[2] negate", "expected '(' to start the operands of negate, found end of input", 3, 20},
        {"HloModule m\nENTRY e {\n  p = f32[2] param", "unknown opcode 'param'", 3, 14},
        {"HloModule m\nENTRY e {\n  p = f32[2", "expected ']' after dimensions, found end of input", 3, 12},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), sharding={devices=[2]0,", "expected device id, found end of input", 3, 51},
        /* unknown opcode, attributes */
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] foo(p)\n}\n", "unknown opcode 'foo'", 4, 19},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] add(p, p), bar=1\n}\n", "unknown attribute 'bar' for add", 4, 30},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] add(p, p), dimensions={0}\n}\n",
         "attribute 'dimensions' does not apply to add", 4, 30},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] negate(p), metadata={}, metadata={}\n}\n",
         "duplicate attribute 'metadata'", 4, 43},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = pred[2] compare(p, p)\n}\n",
         "missing attribute 'direction' for compare", 4, 8},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = pred[2] compare(p, p), direction=XX\n}\n",
         "expected comparison direction EQ, NE, LT, LE, GT or GE, found 'XX'", 4, 45},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] negate(p), sharding={devices=[2,1]0,1}\n}\n",
         "tiles 2 dimensions but shape f32[2] has rank 1", 4, 30},
        {"HloModule m, num_partitions=4\nENTRY e {\n  ROOT p = f32[2] parameter(0), sharding={devices=[2]0,1}\n}\n",
         "uses 2 devices but there are 4", 3, 33},
        /* shardings name partitions (every replica runs the same program):
         * the device count is num_partitions, whatever replica_count says */
        {"HloModule m, num_partitions=2, replica_count=2\nENTRY e {\n  ROOT p = f32[2] parameter(0), sharding={maximal device=2}\n}\n",
         "device 2 is out of range [0, 2)", 3, 33},
        /* bad shapes */
        {"HloModule m\nENTRY e {\n  ROOT p = f33[2] parameter(0)\n}\n", "expected shape, found 'f33'", 3, 12},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2,-1] parameter(0)\n}\n", "dimension size -1 is negative", 3, 18},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2]{0,1} parameter(0)\n}\n", "layout has 2 entries but the shape has rank 1", 3, 18},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2,2]{0,0} parameter(0)\n}\n", "layout is not a permutation", 3, 20},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[<=-4] parameter(0)\n}\n", "dimension size -4 is negative", 3, 18},
        {"HloModule m\nENTRY e {\n  ROOT p = token[2] parameter(0)\n}\n", "token[] takes no dimensions", 3, 12},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[4294967296,4294967296,4294967296] parameter(0)\n}\n",
         "the element count of this shape overflows 64 bits", 3, 12},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[262144,262144] parameter(0)\n}\n", "more than the limit of 17179869184", 3, 12},
        /* names */
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  p = f32[2] parameter(1)\n}\n", "duplicate instruction name 'p'", 4, 3},
        {"HloModule m\nENTRY e {\n  ROOT x = f32[2] negate(%q)\n}\n", "undefined operand 'q'", 3, 26},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] negate(p), control-predecessors={zz}\n}\n",
         "undefined control predecessor 'zz'", 4, 52},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] call(p), to_apply=nowhere\n}\n",
         "undefined computation 'nowhere'", 4, 37},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  q = f32[2] parameter(0)\n}\n", "parameter number 0 is already used by 'p'", 4, 24},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(-1)\n}\n", "parameter number -1 is negative", 3, 29},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT q = f32[2] parameter(2)\n}\n",
         "parameter number 2 is out of range: computation 'e' has 2 parameters", 4, 29},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(9223372036854775807)\n}\n",
         "parameter number 9223372036854775807 is out of range: computation 'e' has 1 parameters", 3, 29},
        /* syntax */
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0) x\n}\n", "expected '=' after the instruction name, found '}'", 4, 1},
        {"HloModule m\nENTRY e {\n  ROOT p f32[2] parameter(0)\n}\n", "expected '=' after the instruction name, found 'f32'", 3, 10},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), backend_config=\"x\n}\n", "unterminated string", 3, 48},
        {"HloModule m\nENTRY e {\n  /* never closed\n  ROOT p = f32[2] parameter(0)\n}\n", "unterminated comment", 3, 3},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_name=\"a\"\n}\n",
         "expected '}' to end computation 'e', found end of input", 5, 1}, /* the '}' closed the metadata */
        {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_name=\"a\"\n",
         "unbalanced '{': no matching close before end of input", 3, 42},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), dim_labels=b01f_01oi->bxf\n}\n",
         "dim_labels 'b01f_01oi->bxf': 'x' is not a label of the output", 4, 55},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), dim_labels=b01f_01io->b0f\n}\n",
         "input, kernel and output have 2, 2, 1 spatial dimensions", 4, 55},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), dim_labels=b00f_01io->b01f\n}\n",
         "names '0' twice in the input", 4, 55},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), dim_labels=b01f01io->b01f\n}\n",
         "expected lhs_rhs->out", 4, 55},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), window={size=3 foo=1}, dim_labels=b01f_01io->b01f\n}\n",
         "unknown window field 'foo'", 4, 59},
        {"HloModule m\nENTRY e {\n  i = f32[1,3,3,1] parameter(0)\n  ROOT c = f32[1,3,3,1] convolution(i, i), window={size=3x3 stride=1}, dim_labels=b01f_01io->b01f\n}\n",
         "window stride= has 1 entries but size= has 2", 4, 51},
        {"HloModule m\nadd {\n  x = f32[] parameter(0)\n  ROOT y = f32[] add(x, x)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n"
         "  ROOT a = f32[2] all-reduce(p), replica_groups=[2,2]<=[3], to_apply=add\n}\n",
         "iota size 3 does not match the tile assignment size 4", 8, 49},
        {"HloModule m\nadd {\n  x = f32[] parameter(0)\n  ROOT y = f32[] add(x, x)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n"
         "  ROOT a = f32[2] all-reduce(p), replica_groups=[4]<=[4], to_apply=add\n}\n",
         "iota replica groups need [groups,size], found 1 numbers", 8, 49},
        {"HloModule m\nadd {\n  x = f32[] parameter(0)\n  ROOT y = f32[] add(x, x)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n"
         "  ROOT a = f32[2] all-reduce(p), replica_groups=0, to_apply=add\n}\n",
         "expected '{', '[' or mesh[...] to start replica_groups, found '0'", 8, 49},
        {"HloModule m\nadd {\n  x = f32[] parameter(0)\n  ROOT y = f32[] add(x, x)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n"
         "  ROOT a = f32[2] all-reduce(p), replica_groups={{0,1},{2,}}, to_apply=add\n}\n",
         "expected integer in replica group, found '}'", 8, 59},
        {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] pad(p, p), padding=1_2_3_4\n}\n",
         "each dimension is lo_hi or lo_hi_interior", 4, 38},
        {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT x = f32[2] slice(p), slice={[0:2:1:1]}\n}\n",
         "expected [start:limit] or [start:limit:stride], found 4 numbers", 4, 36},
        {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT x = f32[4] collective-permute(p), source_target_pairs={{0,1,2}}\n}\n",
         "a source-target pair has 2 entries, found 3", 4, 63},
        {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT x = f32[4] negate(p), frontend_attributes={a=1}\n}\n",
         "expected string or {...} value, found '1'", 4, 53},
        {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT x = f32[4] call(p), to_apply={ROOT y = f32[4] negate(p)}\n}\n",
         "undefined operand 'p'", 4, 61}, /* an inline body sees only its own names */
        {"HloModule m\nb {\n  ROOT x = f32[] parameter(0)\n}\nENTRY e {\n  k = pred[] parameter(0)\n  ROOT c = f32[] conditional(k, k, k), true_computation=b\n}\n",
         "missing attribute 'false_computation' for conditional", 7, 8},
        {"HloModule m\nENTRY e {\n  \x01 = f32[] parameter(0)\n}\n", "expected instruction name or '}', found '?'", 3, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].line == 0) {
            /* position not pinned: only the status and that there is a message */
            IrParseOptions o = opts();
            IrModule *m = NULL;
            IrDiag d = {0};
            assert_int_equal(ir_parse("bad.hlo", cases[i].text, strlen(cases[i].text), &o, &m, &d), IR_EINPUT);
            assert_null(m);
            ir_diag_clear(&d);
            continue;
        }
        parse_err(cases[i].text, cases[i].fragment, cases[i].line, cases[i].col);
    }
}

static void test_limits(void **state)
{
    (void)state;
    IrParseOptions o = opts();
    /* tuple shapes nested deeper than max_depth */
    char text[1024];
    int n = snprintf(text, sizeof text, "HloModule m\nENTRY e {\n  ROOT p = ");
    for (int i = 0; i < 70; i++)
        text[n++] = '(';
    n += snprintf(text + n, sizeof text - (size_t)n, "f32[]");
    for (int i = 0; i < 70; i++)
        text[n++] = ')';
    snprintf(text + n, sizeof text - (size_t)n, " parameter(0)\n}\n");
    parse_err_opt(text, &o, "nesting too deep (limit 64)", 3, 76);

    /* rank above the limit */
    n = snprintf(text, sizeof text, "HloModule m\nENTRY e {\n  ROOT p = f32[");
    for (int i = 0; i < 65; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, i ? ",1" : "1");
    snprintf(text + n, sizeof text - (size_t)n, "] parameter(0)\n}\n");
    parse_err_opt(text, &o, "rank exceeds the limit of 64", 3, 144);

    /* smaller limits from the caller */
    o.limits.max_name = 4;
    parse_err_opt("HloModule m\nENTRY e {\n  ROOT abcdef = f32[] parameter(0)\n}\n", &o, "name longer than 4 bytes", 3, 8);
    o = opts();
    o.limits.max_tuple = 2;
    parse_err_opt("HloModule m\nENTRY e {\n  ROOT p = (f32[], f32[], f32[]) parameter(0)\n}\n", &o,
                  "tuple wider than 2 elements", 3, 27);
    o = opts();
    o.limits.max_elements = 100;
    parse_err_opt("HloModule m\nENTRY e {\n  ROOT p = f32[10,11] parameter(0)\n}\n", &o,
                  "shape has 110 elements, more than the limit of 100", 3, 12);
    o.limits.max_elements = 110;
    IrModule *m = NULL;
    IrDiag d = {0};
    const char *ok = "HloModule m\nENTRY e {\n  ROOT p = f32[10,11] parameter(0)\n}\n";
    assert_int_equal(ir_parse(NULL, ok, strlen(ok), &o, &m, &d), IR_OK);
    assert_null(m->file);
    ir_module_free(m);
    /* zeroed limits mean the defaults */
    IrParseOptions zero = {0};
    const char *deep = "HloModule m\nENTRY e {\n  ROOT p = ((((f32[1,2,3])))) parameter(0)\n}\n";
    assert_int_equal(ir_parse(NULL, deep, strlen(deep), &zero, &m, &d), IR_OK);
    ir_module_free(m);
    o = opts();
    o.limits.max_rank = 2;
    parse_err_opt("HloModule m\nENTRY e {\n  ROOT p = f32[1,1,1] parameter(0)\n}\n", &o, "rank exceeds the limit of 2", 3, 20);
}

/* The input need not be NUL-terminated; nothing past len is read. */
static void test_unterminated_input(void **state)
{
    (void)state;
    const char *src = "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}";
    size_t len = strlen(src);
    char *buf = malloc(len);
    memcpy(buf, src, len);
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("u.hlo", buf, len, &o, &m, &d), IR_OK);
    assert_int_equal(comp(m, "e")->ninstr, 1);
    ir_module_free(m);
    /* cut before the closing brace: an error at the end, with the line shown */
    assert_int_equal(ir_parse("u.hlo", buf, len - 1, &o, &m, &d), IR_EINPUT);
    assert_null(m);
    assert_int_equal(d.pos.line, 4);
    assert_int_equal(d.pos.col, 1);
    assert_non_null(strstr(d.msg, "expected '}' to end computation 'e'"));
    ir_diag_clear(&d);
    /* a cut inside a token */
    assert_int_equal(ir_parse("u.hlo", buf, 30, &o, &m, &d), IR_EINPUT);
    assert_int_equal(d.pos.line, 3);
    ir_diag_clear(&d);
    /* NUL bytes inside the text are errors, not terminators */
    char nul[] = "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\0\n}";
    assert_int_equal(ir_parse("u.hlo", nul, sizeof nul - 1, &o, &m, &d), IR_EINPUT);
    assert_int_equal(d.pos.line, 3);
    assert_int_equal(d.pos.col, 31);
    ir_diag_clear(&d);
    free(buf);
}

static void test_files(void **state)
{
    (void)state;
    char path[] = "/tmp/tessel_test_parse_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "HloModule file_mod\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse_file(path, &o, &m, &d), IR_OK);
    assert_string_equal(m->name, "file_mod");
    assert_string_equal(m->file, path);
    /* with verify on, the result is what the verifier says of the module */
    IrStatus vst = ir_verify(m, &o.limits, &d);
    ir_diag_clear(&d);
    ir_module_free(m);
    IrParseOptions dflt = ir_default_parse_options();
    assert_true(dflt.verify);
    assert_int_equal(dflt.limits.max_rank, ir_default_limits().max_rank);
    IrStatus st = ir_parse_file(path, &dflt, &m, &d);
    assert_int_equal(st, vst);
    if (st == IR_OK)
        ir_module_free(m);
    else
        assert_null(m);
    ir_diag_clear(&d);
    assert_int_equal(ir_parse_file(path, NULL, &m, &d), vst); /* NULL options: the defaults */
    ir_module_free(m);
    ir_diag_clear(&d);

    /* an error in a file names the file */
    FILE *f = fopen(path, "w");
    fputs("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameterx(0)\n}\n", f);
    fclose(f);
    assert_int_equal(ir_parse_file(path, &o, &m, &d), IR_EINPUT);
    assert_string_equal(d.file, path);
    assert_int_equal(d.pos.line, 3);
    assert_int_equal(d.pos.col, 19);
    char *msg = ir_diag_format(&d, "tessel");
    assert_non_null(strstr(msg, ":3:19: error: unknown opcode 'parameterx'"));
    assert_non_null(strstr(msg, "  ROOT p = f32[2] parameterx(0)\n"));
    free(msg);
    ir_diag_clear(&d);
    unlink(path);

    assert_int_equal(ir_parse_file(path, &o, &m, &d), IR_EINPUT);
    assert_null(m);
    assert_non_null(strstr(d.msg, "cannot open"));
    ir_diag_clear(&d);
}

/* "Did you mean": an unknown opcode or attribute a slip away from a known
 * one names it (the nearest by edit distance, worked out by hand);
 * nothing near, no hint. */
/* A control byte in the line, the message or the file name is shown as
 * \xNN (a hostile file or key must not reach a terminal as an escape
 * sequence); the caret still sits under its column. */
static void test_diag_control_bytes(void **state)
{
    (void)state;
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    const char *text = "HloModule m\nENTRY e {\n  x = f32[4] p\x1b[2Jx(0)\n}\n";
    assert_int_equal(ir_parse("a\x07.hlo", text, strlen(text), &o, &m, &d), IR_EINPUT);
    char *f = ir_diag_format(&d, "tessel");
    assert_non_null(f);
    assert_null(strchr(f, 0x1b));
    assert_null(strchr(f, 0x07));
    assert_non_null(strstr(f, "tessel: a\\x07.hlo:3:14: error: unknown opcode 'p"));
    assert_non_null(strstr(f, "\n    x = f32[4] p\\x1b[2Jx(0)\n"));
    /* the caret under column 14 ('p'): 2 + 13 spaces */
    assert_non_null(strstr(f, "(0)\n               ^\n"));
    ts_free(f);
    ir_diag_clear(&d);
    /* past a shown byte the caret moves by the 4 characters it takes */
    IrDiag e = {IR_EINPUT, NULL, {1, 4}, ts_strdup("a\x01" "bc"), ts_strdup("tab\tand\nline\x1b")};
    f = ir_diag_format(&e, "t");
    assert_string_equal(f, "t: :1:4: error: tab\tand\nline\\x1b\n  a\\x01bc\n        ^\n");
    ts_free(f);
    ir_diag_clear(&e);
}

static const char *list_at(void *ctx, int32_t i)
{
    return ((const char *const *)ctx)[i];
}

static void test_did_you_mean(void **state)
{
    (void)state;
    parse_err("HloModule m\nENTRY e {\n  p = f32[2] paramter(0)\n}\n",
              "unknown opcode 'paramter'; did you mean parameter?", 3, 14);
    parse_err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] ad(p, p)\n}\n",
              "unknown opcode 'ad'; did you mean add?", 4, 19);
    parse_err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] all-reduc(p)\n}\n",
              "unknown opcode 'all-reduc'; did you mean all-reduce?", 4, 19);
    parse_err("HloModule m\nENTRY e {\n  p = f32[4,2] parameter(0)\n"
              "  ROOT x = f32[2,4] transpose(p), dimension={1,0}\n}\n",
              "unknown attribute 'dimension' for transpose; did you mean dimensions?", 4, 35);
    parse_err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] frobnicate(p)\n}\n",
              "unknown opcode 'frobnicate'", 4, 19);
    IrModule *m = (IrModule *)1;
    IrDiag d = {0};
    const char *t = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] frobnicate(p)\n}\n";
    assert_int_equal(ir_parse("bad.hlo", t, strlen(t), NULL, &m, &d), IR_EINPUT);
    assert_null(strstr(d.msg, "did you mean"));
    ir_diag_clear(&d);
    /* the helper itself: Levenshtein distances by hand */
    assert_int_equal(ir_edit_distance("kitten", 6, "sitting", 7), 3);
    assert_int_equal(ir_edit_distance("", 0, "abc", 3), 3);
    assert_int_equal(ir_edit_distance("dot", 3, "dot", 3), 0);
    /* a swap of neighbours is one edit (Levenshtein would count two):
     * "tahn" -> tanh 1 (swap), -> tan 1 (delete h): a tie, which the hint
     * breaks for the name of the same length; "ca" -> "abc" is 3 (optimal
     * string alignment edits no substring twice) */
    assert_int_equal(ir_edit_distance("tahn", 4, "tanh", 4), 1);
    assert_int_equal(ir_edit_distance("tahn", 4, "tan", 3), 1);
    assert_int_equal(ir_edit_distance("ab", 2, "ba", 2), 1);
    assert_int_equal(ir_edit_distance("ca", 2, "abc", 3), 3);
    parse_err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] tahn(p)\n}\n",
              "unknown opcode 'tahn'; did you mean tanh?", 4, 19);
    /* ties, by hand (each one edit away): the name starting as the word
     * wins ('w': w1, not x, which came first), then the one as long as it,
     * then of one length the one ending as it does (LTE: LE, not LT) */
    const char *const names[] = {"x", "w1", "w2"}, *const dirs[] = {"LT", "LE"}, *const ops[] = {"m_w", "m_w.1"};
    assert_string_equal(ir_nearest("w", 1, 3, list_at, (void *)names), "w1");
    assert_string_equal(ir_nearest("LTE", 3, 2, list_at, (void *)dirs), "LE");
    assert_string_equal(ir_nearest("m_w1", 4, 2, list_at, (void *)ops), "m_w");
    /* a non-ASCII letter is one edit; other case is always near */
    assert_string_equal(ir_nearest("d\xc3\xb3t", 4, 1, list_at, (void *)(const char *const[]){"dot"}), "dot");
    assert_string_equal(ir_nearest("ENTRY", 5, 1, list_at, (void *)(const char *const[]){"entry"}), "entry");
}

/* Every closed set of words the parser takes names the word a slip is of
 * (worked out by hand: one or two edits, a non-ASCII letter one edit, a
 * word in other case the word), where the slip is, with the whole word
 * quoted: an opcode with a non-ASCII letter was "unknown opcode 'n'". */
static void test_did_you_mean_words(void **state)
{
    (void)state;
    const char *head = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n";
    char t[512];
#define BODY(line) (snprintf(t, sizeof t, "%s%s\n}\n", head, line), t)
    parse_err(BODY("  ROOT x = f32[2] n\xc3\xa9gate(p)"), "unknown opcode 'n\xc3\xa9gate'; did you mean negate?", 4, 19);
    parse_err(BODY("  ROOT x = f32[2] \xc3\xb1" "egate(p)"), "unknown opcode '\xc3\xb1" "egate'; did you mean negate?", 4, 19);
    parse_err(BODY("  ROOT x = f32[2] negat\xc3\xa9(p)"), "unknown opcode 'negat\xc3\xa9'; did you mean negate?", 4, 19);
    parse_err(BODY("  ROOT x = f32[2] d\xc3\xb3t(p, p)"), "unknown opcode 'd\xc3\xb3t'; did you mean dot?", 4, 19);
    parse_err("HloModul m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "expected HloModule or a computation, found 'HloModul'; did you mean HloModule?", 1, 1);
    parse_err("hlomodule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n", "did you mean HloModule?", 1, 1);
    parse_err("HloModule m\nENTYR e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "expected ENTRY or a computation, found 'ENTYR'; did you mean ENTRY?", 2, 1);
    parse_err(BODY("  ROOOT x = f32[2] negate(p)"), "expected ROOT or an instruction name, found 'ROOOT'; did you mean ROOT?",
              4, 3);
    parse_err(BODY("  root x = f32[2] negate(p)"), "found 'root'; did you mean ROOT?", 4, 3);
    parse_err(BODY("  ROOT x = pred[2] compare(p, p), direction=LTE"),
              "expected comparison direction EQ, NE, LT, LE, GT or GE, found 'LTE'; did you mean LE?", 4, 45);
    parse_err(BODY("  ROOT x = pred[2] compare(p, p), direction=GTE"), "found 'GTE'; did you mean GE?", 4, 45);
    parse_err(BODY("  ROOT x = pred[2] compare(p, p), direction=lt"), "found 'lt'; did you mean LT?", 4, 45);
    parse_err(BODY("  ROOT x = pred[2] compare(p, p), direction=LT, type=FLAOT"), "found 'FLAOT'; did you mean FLOAT?", 4,
              54);
    parse_err(BODY("  ROOT x = pred[2] compare(p, p), direction=LT, order=TOTALORDR"),
              "found 'TOTALORDR'; did you mean TOTALORDER?", 4, 55);
    parse_err(BODY("  ROOT x = fp32[2] negate(p)"), "expected shape, found 'fp32'; did you mean f32?", 4, 12);
    parse_err(BODY("  ROOT x = bf61[2] negate(p)"), "found 'bf61'; did you mean bf16?", 4, 12);
    parse_err(BODY("  ROOT x = F32[2] negate(p)"), "found 'F32'; did you mean f32?", 4, 12);
    parse_err(BODY("  ROOT x = f32[2]{0:t(128)} negate(p)"), "unknown layout part 't(128)' (expected T(...), E(...), "
              "S(...), ...); did you mean T(...)?", 4, 21);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={replicate}"),
              "unknown word 'replicate' in sharding; did you mean replicated?", 4, 40);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={maximall device=0}"), "did you mean maximal?", 4, 40);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={maximal devic=0}"),
              "unknown attribute 'devic' in sharding; did you mean device?", 4, 48);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={devices=[2,2]0,1,2,3 last_tile_dim_replicat}"),
              "did you mean last_tile_dim_replicate?", 4, 61);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={devices=[2,2]0,1,2,3 last_tile_dims={replicatd}}"),
              "found 'replicatd'; did you mean replicated?", 4, 77);
    parse_err(BODY("  ROOT x = f32[2] negate(p), sharding={devices [2]0,1}"),
              "expected '=' after devices in sharding (devices=...)", 4, 48);
    parse_err("HloModule m, num_partition=2\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "unknown module attribute 'num_partition'; did you mean num_partitions?", 1, 14);
    parse_err("HloModule m, input_output_alias={ {}: (0, {}, may-alais) }\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "found 'may-alais'; did you mean may-alias?", 1, 47);
    parse_err("HloModule m\nENTRY e {\n  p = f32[1,4,4,1] parameter(0)\n  k = f32[3,3,1,1] parameter(1)\n"
              "  ROOT c = f32[1,2,2,1] convolution(p, k), window={size=3x3 strid=2x2}, dim_labels=b01f_01io->b01f\n}\n",
              "unknown window field 'strid'; did you mean stride?", 5, 61);
    parse_err(BODY("  ROOT x = (u64[2], u32[2]) rng-bit-generator(p), algorithm=rng_philx"),
              "found 'rng_philx'; did you mean rng_philox?", 4, 61);
    parse_err(BODY("  ROOT x = f32[2] fusion(p), kind=kLop, calls=c"), "found 'kLop'; did you mean kLoop?", 4, 35);
    /* a slip in operand_precision was kept raw and read as not "highest":
     * the dot ran inexact without a word */
    parse_err(BODY("  ROOT x = f32[] dot(p, p), lhs_contracting_dims={0}, rhs_contracting_dims={0}, "
                   "operand_precision={highest,higest}"),
              "unknown operand precision 'higest' (expected default, high, highest or packed_nibble); did you mean "
              "highest?", 4, 108);
    parse_err(BODY("  ROOT x = f32[] dot(p, p), lhs_contracting_dims={0}, rhs_contracting_dims={0}, "
                   "operand_precision={HIHGEST,DEFAULT}"), "did you mean highest?", 4, 100);
    /* names a slip away: operands, computations; words in literals */
    parse_err(BODY("  ROOT x = f32[2] add(p, pp)"), "undefined operand 'pp'; did you mean p?", 4, 26);
    parse_err(BODY("  z = f32[] constant(0)\n  ROOT x = f32[] reduce(p, z), dimensions={0}, to_apply=ad\n}\n"
                   "ad2 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)"),
              "undefined computation 'ad'; did you mean ad2?", 5, 57);
    parse_err(BODY("  ROOT c = pred[2] constant({true, flase})"),
              "expected true, false, 0 or 1 for pred, found 'flase'; did you mean false?", 4, 36);
    parse_err(BODY("  ROOT c = f32[2] constant({1, nann})"), "expected floating-point value, found 'nann'; did you mean nan?",
              4, 32);
    /* an escaped quote pasted from the quoted form into braces: said where
     * it is (it was an unterminated string at the next quoted value) */
    parse_err("HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\\\"x\\\"=2]>}}\n"
              "ENTRY e {\n  ROOT p = f32[2] parameter(0), frontend_attributes={k=\"v\"}\n}\n",
              "'\\\"' outside a string: an escaped quote belongs inside", 1, 69);
    /* a missing ',' between attributes, a missing '=' after one: said
     * there (they were "missing attribute 'to_apply'" at the instruction,
     * "expected attribute name=value, found 'dimensions'") */
    parse_err(BODY("  z = f32[] constant(0)\n  ROOT x = f32[] reduce(p, z), dimensions={0} to_apply=a"), "expected ',' before attribute 'to_apply'", 5, 47);
    parse_err(BODY("  z = f32[] constant(0)\n  ROOT x = f32[] reduce(p, z), dimensions {0}, to_apply=a"), "expected '=' after attribute 'dimensions'", 5, 43);
    /* a NUL inside a name makes it no name: it was "unknown opcode 'neg'" */
    static const char nul[] = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] neg\0ate(p)\n}\n";
    IrParseOptions po = opts();
    IrModule *m = (IrModule *)1;
    IrDiag d = {0};
    assert_int_equal(ir_parse("bad.hlo", nul, sizeof nul - 1, &po, &m, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "unknown opcode 'neg?ate'; did you mean negate?"));
    ir_diag_clear(&d);
    /* HloModule without a name: ENTRY was the module's name, silently */
    parse_err("HloModule\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
              "expected the module name after HloModule, found 'ENTRY'", 2, 1);
    /* a bare word where a string goes: what to write */
    parse_err(BODY("  ROOT c = f32[2] custom-call(p), custom_call_target=Sharding"),
              "expected a string in quotes, found 'Sharding': write \"Sharding\"", 4, 54);
    /* far from every word: no hint */
    BODY("  ROOT x = pred[2] compare(p, p), direction=XYZZY");
    assert_int_equal(ir_parse("bad.hlo", t, strlen(t), NULL, &m, &d), IR_EINPUT);
    assert_null(strstr(d.msg, "did you mean"));
    ir_diag_clear(&d);
#undef BODY
}

/* Big inputs parse in time linear in their size: 200k instructions, each
 * referring to the one defined after it (forward references all the way),
 * and 20k small computations called from the entry. */
static void test_linear_time(void **state)
{
    (void)state;
    const int n = 200000;
    size_t cap = (size_t)n * 64 + 1024;
    char *text = malloc(cap);
    size_t k = (size_t)snprintf(text, cap, "HloModule big\nENTRY e {\n  ROOT v0 = f32[4] negate(v1)\n");
    for (int i = 1; i < n; i++)
        k += (size_t)snprintf(text + k, cap - k, "  v%d = f32[4] negate(v%d)\n", i, i + 1);
    k += (size_t)snprintf(text + k, cap - k, "  v%d = f32[4] parameter(0)\n}\n", n);
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    clock_t t0 = clock();
    assert_int_equal(ir_parse("big.hlo", text, k, &o, &m, &d), IR_OK);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    IrComputation *c = comp(m, "e");
    assert_int_equal(c->ninstr, n + 1);
    assert_int_equal(c->instr[0].opnd[0], 1);
    assert_int_equal(c->instr[n - 1].opnd[0], n);
    ir_module_free(m);
    /* quadratic behaviour would take minutes here */
    assert_true(secs < 30.0);

    const int nc = 20000;
    k = (size_t)snprintf(text, cap, "HloModule many\n");
    for (int i = 0; i < nc; i++)
        k += (size_t)snprintf(text + k, cap - k, "f%d {\n  ROOT x = f32[] parameter(0)\n}\n", i);
    k += (size_t)snprintf(text + k, cap - k, "ENTRY e {\n  p = f32[] parameter(0)\n");
    for (int i = 0; i < nc; i++)
        k += (size_t)snprintf(text + k, cap - k, "  c%d = f32[] call(p), to_apply=f%d\n", i, nc - 1 - i);
    k += (size_t)snprintf(text + k, cap - k, "}\n");
    t0 = clock();
    assert_int_equal(ir_parse("many.hlo", text, k, &o, &m, &d), IR_OK);
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    assert_int_equal(m->ncomp, nc + 1);
    assert_int_equal(comp(m, "e")->instr[1].called[0], nc - 1);
    ir_module_free(m);
    assert_true(secs < 30.0);
    free(text);
}

/* A text past a megabyte is parsed with the pages it fills populated by
 * another thread (ir/prefault.c), and a regular file is read straight into
 * the module: both give what the same text gives in memory, instruction
 * for instruction (printed), with computations large and small. */
static void test_large_file_equals_text(void **state)
{
    (void)state;
    const int n = 40000;
    size_t cap = (size_t)n * 96 + 4096;
    char *text = malloc(cap);
    size_t k = (size_t)snprintf(text, cap, "HloModule large\nadd {\n  a = f32[] parameter(0)\n"
                                           "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
                                           "ENTRY e {\n  p = f32[8,3] parameter(0)\n  z = f32[] constant(0)\n");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(text + k, cap - k,
                              i % 3 ? "  v%d = f32[8,3] multiply(%s, p), sharding={devices=[2,1]0,1}\n"
                                    : "  v%d = f32[8,3] negate(%s)\n",
                              i, i ? "PREV" : "p");
    /* operands: the instruction before (PREV is 4 bytes, as "v%d" is not:
     * rewrite them in a second pass) */
    char *t2 = malloc(cap + (size_t)n * 8);
    size_t k2 = 0;
    int line = 0;
    for (size_t i = 0; i < k; i++) {
        if (text[i] == '\n')
            line++;
        if (strncmp(text + i, "PREV", 4) == 0) {
            k2 += (size_t)sprintf(t2 + k2, "v%d", line - 10);
            i += 3;
        } else {
            t2[k2++] = text[i];
        }
    }
    k2 += (size_t)sprintf(t2 + k2, "  r = f32[8] reduce(v%d, z), dimensions={1}, to_apply=add\n"
                                  "  ROOT t = (f32[8], f32[8,3]) tuple(r, v0)\n}\n", n - 1);
    assert_true(k2 > (1u << 20));
    IrParseOptions o = opts();
    IrModule *a = NULL, *b = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("large.hlo", t2, k2, &o, &a, &d), IR_OK);
    char path[] = "/tmp/tessel_test_large_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, t2, k2), (ssize_t)k2);
    close(fd);
    assert_int_equal(ir_parse_file(path, &o, &b, &d), IR_OK);
    unlink(path);
    assert_int_equal(comp(a, "e")->ninstr, n + 4);
    assert_int_equal(comp(a, "e")->instr[n + 2].opnd[0], n + 1); /* r reduces v(n-1) */
    char *pa = ir_print_module(a), *pb = ir_print_module(b);
    assert_string_equal(pa, pb);
    assert_string_equal(b->src, t2); /* diagnostics quote the file's own text */
    free(pa);
    free(pb);
    ir_module_free(a);
    ir_module_free(b);
    free(text);
    free(t2);
}

/* ir_parse_take parses the caller's block in place and keeps it (the
 * module's src is that block), or frees it on any failure: a bad text, a
 * NULL out (leaks are ASan's and valgrind's to find). */
static void test_parse_take(void **state)
{
    (void)state;
    const char *text = "HloModule t\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n";
    size_t n = strlen(text);
    IrParseOptions o = opts();
    IrModule *m = NULL;
    IrDiag d = {0};
    char *blk = ir_big_alloc(n + 1);
    memcpy(blk, text, n); /* no NUL: ir_parse_take writes it */
    blk[n] = 'x';
    assert_int_equal(ir_parse_take("t.hlo", blk, n, &o, &m, &d), IR_OK);
    assert_ptr_equal(m->src, blk);
    assert_int_equal(blk[n], 0);
    assert_string_equal(m->name, "t");
    ir_module_free(m);

    blk = ir_big_alloc(n + 1);
    memcpy(blk, text, n);
    blk[n - 4] = '('; /* "parameter(0(": ')' expected on line 3, '(' found */
    assert_int_equal(ir_parse_take("t.hlo", blk, n, &o, &m, &d), IR_EINPUT);
    assert_null(m);
    assert_int_equal(d.pos.line, 3);
    assert_int_equal(d.pos.col, 30);
    ir_diag_clear(&d);

    blk = ir_big_alloc(n + 1);
    assert_int_equal(ir_parse_take("t.hlo", blk, n, &o, NULL, &d), IR_EINTERNAL);
    ir_diag_clear(&d);
    assert_int_equal(ir_parse_take("t.hlo", NULL, 0, &o, &m, &d), IR_EINTERNAL);
    ir_diag_clear(&d);
}

/* Every allocation failure gives IR_ENOMEM (or success), never a crash or
 * a leak (checked under ASan and valgrind). */
static void test_failure_injection(void **state)
{
    (void)state;
    const char *text = ORDER_TEXT;
    static const char *more =
        "HloModule fi, num_partitions=2, input_output_alias={ {0}: (0, {}, may-alias) }, frontend_attributes={a=\"b\"}\n"
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = add(x, y)\n}\n"
        "ENTRY e (p: f32[2]) -> (f32[2], f32[]) {\n"
        "  p = f32[2]{0} parameter(0), sharding={devices=[2]<=[2]}\n"
        "  z = f32[] constant(0)\n"
        "  c = s32[2,2] constant({{1,2},{3,4}})\n"
        "  r = f32[] reduce(p, z), dimensions={0}, to_apply=add, metadata={op_name=\"r\"}\n"
        "  a = f32[2] all-reduce(p), replica_groups=[1,2]<=[2], to_apply=add, frontend_attributes={k=\"v\"}\n"
        "  w = f32[1,2,2,1] parameter(1)\n"
        "  cv = f32[1,2,2,1] convolution(w, w), window={size=1x1 pad=0_0x0_0}, dim_labels=b01f_01io->b01f\n"
        "  ROOT t = tuple(a, r), sharding={{devices=[2]0,1}, {replicated}}\n"
        "}\n";
    const char *texts[] = {text, more};
    for (int t = 0; t < 2; t++) {
        bool succeeded = false;
        long calls = 0;
        for (long n = 1; n < 2000 && !succeeded; n++) {
            IrParseOptions o = opts();
            IrModule *m = NULL;
            IrDiag d = {0};
            ts_fail_alloc_after(n);
            IrStatus st = ir_parse("fi.hlo", texts[t], strlen(texts[t]), &o, &m, &d);
            ts_fail_alloc_after(0);
            if (st == IR_OK) {
                succeeded = true;
                assert_non_null(m);
                calls = n;
            } else {
                if (st != IR_ENOMEM)
                    fail_msg("allocation %ld failing gave status %d (%s)", n, (int)st, d.msg ? d.msg : "");
                assert_null(m);
            }
            ir_module_free(m);
            ir_diag_clear(&d);
        }
        assert_true(succeeded);
        assert_true(calls > 5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_buffer_donor),
        cmocka_unit_test(test_computations),
        cmocka_unit_test(test_root_rules),
        cmocka_unit_test(test_operands_and_comments),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_attributes_data),
        cmocka_unit_test(test_attributes_contractions),
        cmocka_unit_test(test_attributes_gather_scatter),
        cmocka_unit_test(test_attributes_control),
        cmocka_unit_test(test_attributes_collectives),
        cmocka_unit_test(test_attributes_misc),
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_omitted_shapes),
        cmocka_unit_test(test_more_forms),
        cmocka_unit_test(test_pipe_input),
        cmocka_unit_test(test_error_table),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_unterminated_input),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_linear_time),
        cmocka_unit_test(test_large_file_equals_text),
        cmocka_unit_test(test_parse_take),
        cmocka_unit_test(test_failure_injection),
        cmocka_unit_test(test_did_you_mean),
        cmocka_unit_test(test_did_you_mean_words),
        cmocka_unit_test(test_diag_control_bytes),
        cmocka_unit_test(test_byte_order_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
