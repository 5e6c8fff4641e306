/*
 * test_parse_inline.c: two pieces of XLA's HLO text that name nothing
 * (ir/parse.c): inline computations (`to_apply={ ... }` for any callee
 * attribute, lists included) and nested operand instructions
 * (`add(x, s32[] constant(1))`). Each text is parsed, printed (the inline
 * computations as top-level ones with generated names, the nested
 * instructions as instructions of their own), and the printed text must
 * equal the one written here by hand and parse and print to itself again.
 *
 *   inline      to_apply, condition/body, branch lists, inline in inline,
 *               a call whose shape comes from its inline callee's root
 *   nested      nested operands, nested in nested, without a shape
 *   naming      generated names avoid names written later in the text
 *   entry       without ENTRY the last written computation is the entry
 *   errors      inside an inline body or a nested operand: the real line:col
 *   oom         every allocation failing in turn: ENOMEM, nothing leaked
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

static IrModule *parse_ok(const char *text)
{
    IrParseOptions opt = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &opt, &m, &d);
    if (st != IR_OK)
        fail_msg("parse failed: %s at %d:%d\n%s", d.msg ? d.msg : "?", (int)d.pos.line, (int)d.pos.col, text);
    ir_diag_clear(&d);
    return m;
}

/* parse(text) prints as `want`, and `want` parses and prints as itself. */
static void roundtrip(const char *text, const char *want)
{
    IrModule *m = parse_ok(text);
    char *p1 = ir_print_module(m);
    assert_non_null(p1);
    if (strcmp(p1, want) != 0)
        fail_msg("printed:\n%s\nwanted:\n%s", p1, want);
    IrModule *m2 = parse_ok(p1);
    char *p2 = ir_print_module(m2);
    assert_non_null(p2);
    assert_string_equal(p1, p2);
    ts_free(p1);
    ts_free(p2);
    ir_module_free(m);
    ir_module_free(m2);
}

/* The text fails with an input error at line:col whose message has `msg`. */
static void parse_err(const char *text, int line, int col, const char *msg)
{
    IrParseOptions opt = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &opt, &m, &d);
    assert_int_equal(st, IR_EINPUT);
    assert_null(m);
    assert_non_null(d.msg);
    if ((int)d.pos.line != line || (int)d.pos.col != col || !strstr(d.msg, msg))
        fail_msg("got %d:%d %s, wanted %d:%d ...%s...", (int)d.pos.line, (int)d.pos.col, d.msg, line, col, msg);
    ir_diag_clear(&d);
}

static const IrComputation *comp(const IrModule *m, const char *name)
{
    int32_t ci = ir_find_computation(m, name);
    if (ci < 0)
        fail_msg("no computation '%s'", name);
    return m->comp[ci];
}

static const IrInstr *instr(const IrComputation *c, const char *name)
{
    int32_t i = ir_find_instr(c, name);
    if (i < 0)
        fail_msg("no instruction '%s' in '%s'", name, c->name);
    return &c->instr[i];
}

/* to_apply={...} on a call (its shape left to inference from the inline
 * root, itself inferred) and on a reduce; the callee is the computation
 * added for the body, named after the instruction and attribute. */
static void test_inline_to_apply(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\n"
        "ENTRY e {\n"
        "  p = f32[4] parameter(0)\n"
        "  z = f32[] constant(0)\n"
        "  r = f32[] reduce(p, z), dimensions={0}, to_apply={\n"
        "    a = f32[] parameter(0)\n"
        "    b = f32[] parameter(1)\n"
        "    ROOT s = f32[] add(a, b)\n"
        "  }\n"
        "  ROOT c = call(p, r), to_apply={ x = f32[4] parameter(0) y = f32[] parameter(1)\n"
        "    ROOT t = tuple(x, y) }\n"
        "}\n";
    const char *want =
        "HloModule m\n\n"
        "r.to_apply {\n"
        "  a = f32[] parameter(0)\n"
        "  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n"
        "}\n\n"
        "c.to_apply {\n"
        "  x = f32[4] parameter(0)\n"
        "  y = f32[] parameter(1)\n"
        "  ROOT t = (f32[4], f32[]) tuple(x, y)\n"
        "}\n\n"
        "ENTRY e {\n"
        "  p = f32[4] parameter(0)\n"
        "  z = f32[] constant(0)\n"
        "  r = f32[] reduce(p, z), dimensions={0}, to_apply=r.to_apply\n"
        "  ROOT c = (f32[4], f32[]) call(p, r), to_apply=c.to_apply\n"
        "}\n";
    roundtrip(src, want);
    IrModule *m = parse_ok(src);
    const IrComputation *e = ir_entry(m);
    assert_string_equal(e->name, "e");
    assert_int_equal(instr(e, "r")->called[0], ir_find_computation(m, "r.to_apply"));
    assert_int_equal(instr(e, "c")->called[0], ir_find_computation(m, "c.to_apply"));
    /* the inline body keeps its own positions */
    assert_int_equal(instr(comp(m, "r.to_apply"), "s")->pos.line, 9);
    assert_int_equal(instr(comp(m, "c.to_apply"), "y")->pos.line, 11);
    assert_int_equal(instr(comp(m, "c.to_apply"), "y")->pos.col, 59);
    ir_module_free(m);
}

/* while with inline condition= and body=, conditional with an inline
 * item in branch_computations, and an inline body inside an inline body
 * (numbered in text order when two share a base name). */
static void test_inline_while_branches_nested(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\n"
        "one {\n"
        "  q = s32[] parameter(0)\n"
        "  ROOT k = s32[] constant(1)\n"
        "}\n\n"
        "ENTRY e {\n"
        "  i = s32[] parameter(0)\n"
        "  w = s32[] while(i), condition={\n"
        "    c = s32[] parameter(0)\n"
        "    n = s32[] constant(10)\n"
        "    ROOT lt = pred[] compare(c, n), direction=LT\n"
        "  }, body={\n"
        "    b = s32[] parameter(0)\n"
        "    ROOT inc = s32[] call(b), to_apply={\n"
        "      v = s32[] parameter(0)\n"
        "      ROOT inc = s32[] call(v), to_apply={\n"
        "        u = s32[] parameter(0)\n"
        "        o = s32[] constant(1)\n"
        "        ROOT s = s32[] add(u, o)\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "  x = pred[] parameter(1)\n"
        "  ix = s32[] convert(x)\n"
        "  ROOT r = s32[] conditional(ix, w, w), branch_computations={one, {\n"
        "    y = s32[] parameter(0)\n"
        "    ROOT ny = s32[] negate(y)\n"
        "  }}\n"
        "}\n";
    const char *want =
        "HloModule m\n\n"
        "one {\n"
        "  q = s32[] parameter(0)\n"
        "  ROOT k = s32[] constant(1)\n"
        "}\n\n"
        "w.condition {\n"
        "  c = s32[] parameter(0)\n"
        "  n = s32[] constant(10)\n"
        "  ROOT lt = pred[] compare(c, n), direction=LT\n"
        "}\n\n"
        "inc.to_apply.1 {\n"
        "  u = s32[] parameter(0)\n"
        "  o = s32[] constant(1)\n"
        "  ROOT s = s32[] add(u, o)\n"
        "}\n\n"
        "inc.to_apply {\n"
        "  v = s32[] parameter(0)\n"
        "  ROOT inc = s32[] call(v), to_apply=inc.to_apply.1\n"
        "}\n\n"
        "w.body {\n"
        "  b = s32[] parameter(0)\n"
        "  ROOT inc = s32[] call(b), to_apply=inc.to_apply\n"
        "}\n\n"
        "r.branch_computations.1 {\n"
        "  y = s32[] parameter(0)\n"
        "  ROOT ny = s32[] negate(y)\n"
        "}\n\n"
        "ENTRY e {\n"
        "  i = s32[] parameter(0)\n"
        "  w = s32[] while(i), condition=w.condition, body=w.body\n"
        "  x = pred[] parameter(1)\n"
        "  ix = s32[] convert(x)\n"
        "  ROOT r = s32[] conditional(ix, w, w), branch_computations={one, r.branch_computations.1}\n"
        "}\n";
    roundtrip(src, want);
    IrModule *m = parse_ok(src);
    const IrInstr *w = instr(ir_entry(m), "w");
    assert_int_equal(w->ncalled, 2);
    assert_int_equal(w->called[0], ir_find_computation(m, "w.condition"));
    assert_int_equal(w->called[1], ir_find_computation(m, "w.body"));
    const IrInstr *r = instr(ir_entry(m), "r");
    assert_int_equal(r->called[0], ir_find_computation(m, "one"));
    assert_int_equal(r->called[1], ir_find_computation(m, "r.branch_computations.1"));
    ir_module_free(m);
}

/* Nested operand instructions, one nested inside another and one without
 * a shape: instructions of their own, named after their opcode, and never
 * the root (without ROOT the last written instruction is). */
static void test_nested_operands(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\n"
        "%min {\n"
        "  ROOT %m = f16[] minimum(f16[] parameter(0), f16[] parameter(1))\n"
        "}\n\n"
        "ENTRY %e {\n"
        "  %p = s32[] parameter(0)\n"
        "  %lt = pred[] compare(%p, s32[] constant(16)), direction=LT\n"
        "  %s = s32[] add(%p, s32[] multiply(s32[] constant(2), negate(%p)))\n"
        "  %t = (pred[], s32[]) tuple(%lt, %s)\n"
        "}\n";
    const char *want =
        "HloModule m\n\n"
        "min {\n"
        "  parameter = f16[] parameter(0)\n"
        "  parameter.1 = f16[] parameter(1)\n"
        "  ROOT m = f16[] minimum(parameter, parameter.1)\n"
        "}\n\n"
        "ENTRY e {\n"
        "  p = s32[] parameter(0)\n"
        "  constant = s32[] constant(16)\n"
        "  lt = pred[] compare(p, constant), direction=LT\n"
        "  constant.1 = s32[] constant(2)\n"
        "  negate = s32[] negate(p)\n"
        "  multiply = s32[] multiply(constant.1, negate)\n"
        "  s = s32[] add(p, multiply)\n"
        "  ROOT t = (pred[], s32[]) tuple(lt, s)\n"
        "}\n";
    roundtrip(src, want);
    IrModule *m = parse_ok(src);
    const IrComputation *e = ir_entry(m);
    assert_string_equal(e->instr[e->root].name, "t");
    const IrComputation *mn = comp(m, "min");
    assert_int_equal(mn->nparam, 2);
    assert_string_equal(mn->instr[mn->param[1]].name, "parameter.1");
    /* the nested ones keep where they were written */
    assert_int_equal(instr(e, "multiply")->pos.line, 10);
    assert_int_equal(instr(e, "multiply")->pos.col, 22);
    assert_int_equal(instr(e, "negate")->pos.col, 56);
    ir_module_free(m);
}

/* Generated names skip names the text writes later: an inline base name
 * taken by a computation below, a nested name taken by an instruction
 * below. */
static void test_generated_names_avoid_later_ones(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\n"
        "ENTRY e {\n"
        "  p = f32[] parameter(0)\n"
        "  a = f32[] add(p, f32[] constant(1))\n"
        "  constant = f32[] constant(2)\n"
        "  ROOT c = f32[] call(a), to_apply={\n"
        "    x = f32[] parameter(0)\n"
        "    ROOT y = f32[] call(x), to_apply=c.to_apply\n"
        "  }\n"
        "}\n\n"
        "c.to_apply {\n"
        "  ROOT q = f32[] parameter(0)\n"
        "}\n";
    const char *want =
        "HloModule m\n\n"
        "c.to_apply {\n"
        "  ROOT q = f32[] parameter(0)\n"
        "}\n\n"
        "c.to_apply.1 {\n"
        "  x = f32[] parameter(0)\n"
        "  ROOT y = f32[] call(x), to_apply=c.to_apply\n"
        "}\n\n"
        "ENTRY e {\n"
        "  p = f32[] parameter(0)\n"
        "  constant.1 = f32[] constant(1)\n"
        "  a = f32[] add(p, constant.1)\n"
        "  constant = f32[] constant(2)\n"
        "  ROOT c = f32[] call(a), to_apply=c.to_apply.1\n"
        "}\n";
    roundtrip(src, want);
}

/* Without ENTRY the entry is the last computation written, not an inline
 * one read after it (nor one inline in it). */
static void test_no_entry_inline_last(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\n"
        "f {\n"
        "  ROOT c = f32[] constant(1)\n"
        "}\n\n"
        "g {\n"
        "  p = f32[] parameter(0)\n"
        "  ROOT c = f32[] call(p), to_apply={\n"
        "    x = f32[] parameter(0)\n"
        "    ROOT n = f32[] call(x), to_apply={ ROOT y = f32[] parameter(0) }\n"
        "  }\n"
        "}\n";
    IrModule *m = parse_ok(src);
    assert_int_equal(m->ncomp, 4);
    assert_string_equal(ir_entry(m)->name, "g");
    assert_true(ir_entry(m)->is_entry);
    ir_module_free(m);
    /* headerless: the module is named after that entry */
    m = parse_ok(src + strlen("HloModule m\n\n"));
    assert_string_equal(ir_entry(m)->name, "g");
    assert_string_equal(m->name, "module_g");
    ir_module_free(m);
}

/* Errors inside an inline body or a nested operand point at the text. */
static void test_errors_where_written(void **state)
{
    (void)state;
    const char *head = "HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n";
    char buf[1024];
    /* an undefined operand in an inline body */
    snprintf(buf, sizeof buf, "%s%s", head,
             "  ROOT c = f32[] call(p), to_apply={\n"
             "    x = f32[] parameter(0)\n"
             "    ROOT y = f32[] add(x, nope)\n"
             "  }\n}\n");
    parse_err(buf, 7, 27, "undefined operand 'nope'");
    /* an unknown opcode in an inline body inside an inline body */
    snprintf(buf, sizeof buf, "%s%s", head,
             "  ROOT c = f32[] call(p), to_apply={\n"
             "    x = f32[] parameter(0)\n"
             "    ROOT y = f32[] call(x), to_apply={\n"
             "      z = f32[] parameter(0)\n"
             "      ROOT w = f32[] frobnicate(z)\n"
             "    }\n"
             "  }\n}\n");
    parse_err(buf, 9, 22, "unknown opcode 'frobnicate'");
    /* an inline body with no instructions */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT c = f32[] call(p), to_apply={ }\n}\n");
    parse_err(buf, 5, 36, "has no instructions");
    /* an unbalanced inline body */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT c = f32[] call(p), to_apply={\n    x = f32[] parameter(0)\n");
    parse_err(buf, 5, 36, "unbalanced '{'");
    /* a nested compare takes no attributes, so its direction is missing */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT s = pred[] and(pred[] compare(p, p), pred[] constant(true))\n}\n");
    parse_err(buf, 5, 23, "missing attribute 'direction'");
    /* an error inside a nested operand inside a nested operand */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT s = f32[] add(p, f32[] negate(f32[] constant(x)))\n}\n");
    parse_err(buf, 5, 53, "");
    /* an unknown opcode as a nested operand */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT s = f32[] add(p,\n    f32[] frob(p))\n}\n");
    parse_err(buf, 6, 11, "unknown opcode 'frob'");
    /* a nested parameter number used twice is reported with the generated name */
    snprintf(buf, sizeof buf, "%s%s", head, "  ROOT s = f32[] add(f32[] parameter(1), f32[] parameter(1))\n}\n");
    parse_err(buf, 5, 58, "already used by 'parameter'");
}

/* Every allocation of a parse with inline bodies and nested operands
 * fails in turn: each run ends in ENOMEM with nothing built (the asan
 * preset checks that nothing leaks), until one succeeds. */
static void test_out_of_memory(void **state)
{
    (void)state;
    const char *text =
        "HloModule m\n\n"
        "ENTRY e {\n"
        "  p = s32[] parameter(0)\n"
        "  w = s32[] while(p), condition={\n"
        "    c = s32[] parameter(0)\n"
        "    ROOT lt = pred[] compare(c, s32[] constant(10)), direction=LT\n"
        "  }, body={\n"
        "    b = s32[] parameter(0)\n"
        "    ROOT inc = call(b), to_apply={\n"
        "      v = s32[] parameter(0)\n"
        "      ROOT s = add(v, s32[] multiply(v, s32[] constant(2)))\n"
        "    }\n"
        "  }\n"
        "  ROOT t = tuple(w, s32[] negate(w))\n"
        "}\n";
    bool succeeded = false;
    long calls = 0;
    for (long n = 1; n < 5000 && !succeeded; n++) {
        IrParseOptions o = ir_default_parse_options();
        IrModule *m = NULL;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = ir_parse("oom.hlo", text, strlen(text), &o, &m, &d);
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
    assert_true(calls > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_to_apply),
        cmocka_unit_test(test_inline_while_branches_nested),
        cmocka_unit_test(test_nested_operands),
        cmocka_unit_test(test_generated_names_avoid_later_ones),
        cmocka_unit_test(test_no_entry_inline_last),
        cmocka_unit_test(test_errors_where_written),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
