/*
 * test_syntax.c: the module, shape, type and literal level of the HLO text
 * (ir/parse.c, ir/print.c, ir/shape.c, ir/literal.c): each text below is
 * parsed, printed, and the printed text must equal the expected one
 * written by hand (XLA's spelling), and parse and print to itself again.
 *
 *   dynamic    f32[<=8,4] and f32[?,784]: flags kept, copied, compared
 *   layouts    tiles, element size, memory space kept and printed back
 *   literals   every element type; f8/f4 bytes checked against codes
 *              worked out by hand from each type's bit layout
 *   header     every module attribute XLA prints, stack-frame sections,
 *              computation execution threads, elided constants, unreduced
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
    opt.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &opt, &m, &d);
    if (st != IR_OK)
        fail_msg("parse failed: %s at %d:%d\n%s", d.msg ? d.msg : "?", (int)d.pos.line,
                 (int)d.pos.col, text);
    ir_diag_clear(&d);
    if (st == IR_OK && opt.verify) {
        IrLimits lim = ir_default_limits();
        if (ir_verify(m, &lim, &d) != IR_OK)
            fail_msg("verify failed: %s", d.msg ? d.msg : "?");
        ir_diag_clear(&d);
    }
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

static const IrInstr *find(const IrModule *m, const char *name)
{
    const IrComputation *c = ir_entry(m);
    int32_t i = ir_find_instr(c, name);
    assert_true(i >= 0);
    return &c->instr[i];
}

static void test_dynamic_dims(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\nENTRY e {\n"
        "  p = f32[<=8, 4] parameter(0)\n"
        "  q = f32[?,784] parameter(1)\n"
        "  a = f32[<=8,4] abs(p)\n"
        "  ROOT t = (f32[<=8,4], f32[?,784]) tuple(a, q)\n}\n";
    const char *want =
        "HloModule m\n\nENTRY e {\n"
        "  p = f32[<=8,4] parameter(0)\n"
        "  q = f32[?,784] parameter(1)\n"
        "  a = f32[<=8,4] abs(p)\n"
        "  ROOT t = (f32[<=8,4], f32[?,784]) tuple(a, q)\n}\n";
    roundtrip(src, want);

    IrModule *m = parse_ok(src);
    const IrShape *p = &find(m, "p")->shape, *q = &find(m, "q")->shape;
    assert_true(ir_shape_dim_dynamic(p, 0));
    assert_false(ir_shape_dim_dynamic(p, 1));
    assert_int_equal(p->dims[0], 8); /* the bound: the value is laid out at it */
    assert_int_equal(q->dims[0], IR_DIM_UNBOUNDED);
    assert_int_equal(ir_shape_elements(q), -1);
    assert_true(ir_shape_is_dynamic(&find(m, "t")->shape));

    /* copy keeps the flags; equal sees them, compatible does not */
    IrArena *a = ir_arena_new();
    IrShape c, st;
    assert_int_equal(ir_shape_copy(a, &c, p), IR_OK);
    assert_true(c.dynamic != p->dynamic && ir_shape_dim_dynamic(&c, 0));
    assert_true(ir_shape_equal(&c, p));
    int64_t dims[2] = {8, 4};
    assert_int_equal(ir_shape_make(a, &st, IR_F32, 2, dims), IR_OK);
    assert_false(ir_shape_equal(&st, p));
    assert_true(ir_shape_compatible(&st, p));
    char *s = ir_shape_str(p, false);
    assert_string_equal(s, "f32[<=8,4]");
    ts_free(s);
    ir_arena_free(a);

    /* cloning a module keeps them */
    IrModule *k = ir_module_clone(m);
    assert_non_null(k);
    assert_true(ir_shape_dim_dynamic(&find(k, "a")->shape, 0));
    ir_module_free(k);
    ir_module_free(m);
}

static void test_layouts(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\nENTRY e {\n"
        "  p = f32[8,128]{1,0:T(8,128)(2,1)E(4)S(1)} parameter(0)\n"
        "  s = s4[256]{0:T(1024)(128)(2,1)E(4)} parameter(1)\n"
        "  c = f32[] parameter(2)\n"
        "  ROOT t = (f32[8,128]{0,1:T(8,128)S(5)}, s4[256]{0:E(4)}, f32[]{:T(256)}) tuple(p, s, c)\n}\n";
    const char *want =
        "HloModule m\n\nENTRY e {\n"
        "  p = f32[8,128]{1,0:T(8,128)(2,1)E(4)S(1)} parameter(0)\n"
        "  s = s4[256]{0:T(1024)(128)(2,1)E(4)} parameter(1)\n"
        "  c = f32[] parameter(2)\n"
        "  ROOT t = (f32[8,128]{0,1:T(8,128)S(5)}, s4[256]{0:E(4)}, f32[]{:T(256)}) tuple(p, s, c)\n}\n";
    roundtrip(src, want);
}

/* Codes by hand from each type's layout (sign, exponent with bias, mantissa):
 *   f8e4m3fn  1.5 = 1.1b*2^0: 0 0111 100 = 0x3c; -448 = -1.75*2^8: 1 1111 110
 *             = 0xfe; 2^-9 = the smallest subnormal 0x01; nan = 0x7f
 *   f8e5m2    inf = 0 11111 00 = 0x7c; -57344 = -1.75*2^15 = 0xfb; 0.1 lies
 *             between 0.09375 = 1.5*2^-4 (0 01011 10 = 0x2e) and 0.125:
 *             nearer the first
 *   f4e2m1fn  0.5 = subnormal 0x1; -6 = 1 11 1 = 0xf; 2.9 -> 3 = 1.5*2^1 =
 *             0 10 1 = 0x5
 *   f8e8m0fnu 1 = 2^0: code 127; 0.25: 125
 *   s4 -8 is the byte 0xf8; u4 15 is 0x0f; s2 -2 is 0xfe */
static void test_literals(void **state)
{
    (void)state;
    const char *src =
        "HloModule m\n\nENTRY e {\n"
        "  a = f8e4m3fn[4] constant({1.5, -448, 0.001953125, nan})\n"
        "  b = f8e5m2[3] constant({inf, -57344, 0.1})\n"
        "  c = f4e2m1fn[3] constant({0.5, -6, 2.9})\n"
        "  d = s4[3] constant({-8, 7, 0})\n"
        "  f = u4[2] constant({15, 3})\n"
        "  g = s2[2] constant({-2, 1})\n"
        "  h = u2[2] constant({3, 0})\n"
        "  i = f8e8m0fnu[2] constant({1, 0.25})\n"
        "  j = c64[2] constant({(1, -2), (0.5, inf)})\n"
        "  k = f8e4m3b11fnuz[] constant(30)\n"
        "  l = f8e3m4[] constant(15.5)\n"
        "  n = f8e4m3[] constant(-240)\n"
        "  o = f8e5m2fnuz[] constant(57344)\n"
        "  q = f8e4m3fnuz[] constant(-0.5)\n"
        "  r = c128[] constant((1.25, 3))\n"
        "  ROOT t = (f8e4m3fn[4], f8e5m2[3], f4e2m1fn[3], s4[3], u4[2], s2[2], u2[2], f8e8m0fnu[2]) "
        "tuple(a, b, c, d, f, g, h, i)\n}\n";
    const char *want =
        "HloModule m\n\nENTRY e {\n"
        "  a = f8e4m3fn[4] constant({1.5, -448, 0.001953125, nan})\n"
        "  b = f8e5m2[3] constant({inf, -57344, 0.09375})\n"
        "  c = f4e2m1fn[3] constant({0.5, -6, 3})\n"
        "  d = s4[3] constant({-8, 7, 0})\n"
        "  f = u4[2] constant({15, 3})\n"
        "  g = s2[2] constant({-2, 1})\n"
        "  h = u2[2] constant({3, 0})\n"
        "  i = f8e8m0fnu[2] constant({1, 0.25})\n"
        "  j = c64[2] constant({(1, -2), (0.5, inf)})\n"
        "  k = f8e4m3b11fnuz[] constant(30)\n"
        "  l = f8e3m4[] constant(15.5)\n"
        "  n = f8e4m3[] constant(-240)\n"
        "  o = f8e5m2fnuz[] constant(57344)\n"
        "  q = f8e4m3fnuz[] constant(-0.5)\n"
        "  r = c128[] constant((1.25, 3))\n"
        "  ROOT t = (f8e4m3fn[4], f8e5m2[3], f4e2m1fn[3], s4[3], u4[2], s2[2], u2[2], f8e8m0fnu[2]) "
        "tuple(a, b, c, d, f, g, h, i)\n}\n";
    roundtrip(src, want);
    IrModule *m = parse_ok(src);
    static const struct {
        const char *name;
        int n;
        uint8_t code[4];
    } want_codes[] = {
        {"a", 4, {0x3c, 0xfe, 0x01, 0x7f}}, {"b", 3, {0x7c, 0xfb, 0x2e}},
        {"c", 3, {0x1, 0xf, 0x5}},          {"d", 3, {0xf8, 0x07, 0x00}},
        {"f", 2, {0x0f, 0x03}},             {"g", 2, {0xfe, 0x01}},
        {"h", 2, {0x03, 0x00}},             {"i", 2, {127, 125}},
    };
    for (size_t k = 0; k < sizeof want_codes / sizeof want_codes[0]; k++) {
        const IrInstr *ins = find(m, want_codes[k].name);
        assert_int_equal(ins->a.literal_bytes, want_codes[k].n);
        assert_memory_equal(ins->a.literal, want_codes[k].code, (size_t)want_codes[k].n);
    }
    ir_module_free(m);
}

static void expect_error(const char *text, const char *msg)
{
    IrParseOptions opt = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &opt, &m, &d), IR_EINPUT);
    assert_null(m);
    if (!d.msg || !strstr(d.msg, msg))
        fail_msg("error '%s', wanted '%s'", d.msg ? d.msg : "", msg);
    assert_true(d.pos.line > 0 && d.pos.col > 0);
    ir_diag_clear(&d);
}

static void test_literal_range(void **state)
{
    (void)state;
    expect_error("HloModule m\nENTRY e {\n  ROOT a = s4[] constant(8)\n}\n", "out of range for s4");
    expect_error("HloModule m\nENTRY e {\n  ROOT a = u2[] constant(4)\n}\n", "out of range for u2");
    expect_error("HloModule m\nENTRY e {\n  ROOT a = f8e4m3fn[] constant(500)\n}\n", "out of range");
    expect_error("HloModule m\nENTRY e {\n  ROOT a = f4e2m1fn[] constant(7)\n}\n", "out of range");
    expect_error("HloModule m\nENTRY e {\n  ROOT a = f8e8m0fnu[] constant(0)\n}\n", "out of range");
}

static void test_layout_errors(void **state)
{
    (void)state;
    expect_error("HloModule m\nENTRY e {\n  ROOT p = f32[8]{0:Q(1)} parameter(0)\n}\n",
                 "unknown layout part 'Q(1)'");
    expect_error("HloModule m\nENTRY e {\n  ROOT p = f32[8]{0:T(8} parameter(0)\n}\n",
                 "expected ')'");
    expect_error("HloModule m\nENTRY e {\n  ROOT p = f32[8]{0:T(8)junk} parameter(0)\n}\n",
                 "unknown layout part 'junk'");
}

static void test_header_and_structure(void **state)
{
    (void)state;
    const char *src =
        "HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, "
        "entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[4]{0})}, "
        "buffer_donor={ (1, {}) }, alias_passthrough_params=true, "
        "allow_spmd_sharding_propagation_to_parameters={true,false}, "
        "allow_spmd_sharding_propagation_to_output={true}, frontend_attributes={k=\"v\"}\n"
        "\n"
        "FileNames\n  1 \"a.py\"\nFunctionNames\n  1 \"f\"\n"
        "FileLocations\n  1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=2}\n"
        "StackFrames\n  1 {file_location_id=1 parent_frame_id=0}\n"
        "\n"
        "side {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}, execution_thread=\"other\"\n"
        "\n"
        "ENTRY e {\n  p = f32[4] parameter(0)\n  q = f32[4] parameter(1)\n"
        "  big = f32[2,3] constant({...})\n"
        "  u = f32[4] custom-call(p), custom_call_target=\"Sharding\", sharding={unreduced}\n"
        "  ROOT t = (f32[4], f32[4]) tuple(u, /*index=1*/q)\n}\n";
    /* buffer_donor where XLA prints it: after input_output_alias */
    const char *want =
        "HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, "
        "buffer_donor={ (1, {}) }, "
        "entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[4]{0})}, "
        "alias_passthrough_params=true, "
        "allow_spmd_sharding_propagation_to_parameters={true,false}, "
        "allow_spmd_sharding_propagation_to_output={true}, frontend_attributes={k=\"v\"}\n"
        "\n"
        "FileNames\n  1 \"a.py\"\nFunctionNames\n  1 \"f\"\n"
        "FileLocations\n  1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=2}\n"
        "StackFrames\n  1 {file_location_id=1 parent_frame_id=0}\n"
        "\n"
        "side {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}, execution_thread=\"other\"\n"
        "\n"
        "ENTRY e {\n  p = f32[4] parameter(0)\n  q = f32[4] parameter(1)\n"
        "  big = f32[2,3] constant({...})\n"
        "  u = f32[4] custom-call(p), custom_call_target=\"Sharding\", sharding={unreduced}\n"
        "  ROOT t = (f32[4], f32[4]) tuple(u, q)\n}\n";
    roundtrip(src, want);
    IrModule *m = parse_ok(src);
    assert_true(m->is_scheduled);
    assert_true(find(m, "big")->a.literal_elided);
    assert_null(find(m, "big")->a.literal);
    assert_true(find(m, "u")->sharding->unreduced);
    assert_int_equal(m->nalias, 1);
    IrModule *k = ir_module_clone(m);
    assert_non_null(k);
    assert_int_equal(k->ndonor, 1);
    assert_int_equal(k->donor[0].param_number, 1);
    assert_string_equal(k->stack_frames, m->stack_frames);
    assert_string_equal(k->comp[ir_find_computation(k, "side")]->execution_thread, "other");
    ir_module_free(k);
    ir_module_free(m);
}

/* No ENTRY: the last computation is the entry, and the module is named
 * after it. */
/* entry_computation_layout keeps the dynamic dimensions it writes: a
 * parameter f32[<=8,4] matches `f32[<=8,4]{1,0}` there, and not `f32[8,4]`
 * (the dimensions agree, the dynamic flag does not). */
static void test_entry_layout_dynamic(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule m, entry_computation_layout={(f32[<=8,4]{1,0}, f32[?])->f32[<=8,4]{1,0}}\n"
                           "ENTRY e {\n  p = f32[<=8,4] parameter(0)\n  q = f32[?] parameter(1)\n"
                           "  ROOT n = f32[<=8,4] negate(p)\n}\n");
    ir_module_free(m);
    IrParseOptions opt = ir_default_parse_options();
    opt.verify = true;
    const char *bad = "HloModule m, entry_computation_layout={(f32[8,4]{1,0})->f32[<=8,4]{1,0}}\n"
                      "ENTRY e {\n  p = f32[<=8,4] parameter(0)\n  ROOT n = f32[<=8,4] negate(p)\n}\n";
    IrDiag d = {0};
    IrModule *mb = NULL;
    IrStatus st = ir_parse("t.hlo", bad, strlen(bad), &opt, &mb, &d);
    if (st == IR_OK) {
        IrLimits lim = ir_default_limits();
        st = ir_verify(mb, &lim, &d);
        ir_module_free(mb);
    }
    assert_int_equal(st, IR_EINPUT);
    assert_non_null(strstr(d.msg, "entry_computation_layout says f32[8,4]"));
    assert_int_equal(d.pos.line, 3);
    ir_diag_clear(&d);
}

static void test_no_entry(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule m\nf {\n  ROOT c = f32[] constant(1)\n}\n"
                           "g {\n  ROOT c = f32[] constant(2)\n}\n");
    assert_string_equal(ir_entry(m)->name, "g");
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamic_dims),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_literals),
        cmocka_unit_test(test_literal_range),
        cmocka_unit_test(test_layout_errors),
        cmocka_unit_test(test_header_and_structure),
        cmocka_unit_test(test_no_entry),
        cmocka_unit_test(test_entry_layout_dynamic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
