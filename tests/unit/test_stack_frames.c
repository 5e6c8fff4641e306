/*
 * test_stack_frames.c: an instruction's source in the program that wrote
 * the module (ir/stack_frames.c), from its metadata's stack_frame_id and
 * the FileNames / FunctionNames / FileLocations / StackFrames tables JAX's
 * compiled modules carry, worked out by hand from the tables below; and a
 * run-time error at such an instruction names it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "device/device.h"

/* Frame 3 is location 3: file 1, function 2, line 6, column 28. Frame 2
 * is location 2: line 6, column 37. Frame 4 has no location 9. */
static const char *const TEXT =
    "HloModule m\n"
    "\n"
    "FileNames\n1 \"model.py\"\n2 \"other.py\"\n\n"
    "FunctionNames\n1 \"<module>\"\n2 \"mlp\"\n\n"
    "FileLocations\n"
    "1 {file_name_id=1 function_name_id=1 line=7 end_line=7 column=5 end_column=5}\n"
    "2 {file_name_id=1 function_name_id=2 line=6 end_line=6 column=37 end_column=37}\n"
    "3 {file_name_id=2 function_name_id=2 line=16 end_line=16 column=28 end_column=30}\n\n"
    "StackFrames\n"
    "1 {file_location_id=1 parent_frame_id=1}\n"
    "2 {file_location_id=2 parent_frame_id=2}\n"
    "3 {file_location_id=3 parent_frame_id=2}\n"
    "4 {file_location_id=9 parent_frame_id=2}\n\n"
    "ENTRY e {\n"
    "  x = f32[4] parameter(0), metadata={op_name=\"x\"}\n"
    "  a = f32[4] tanh(x), metadata={op_name=\"jit(mlp)/tanh\" stack_frame_id=2}\n"
    "  b = f32[4] negate(a), metadata={op_name=\"jit(mlp)/neg\" stack_frame_id=3}\n"
    "  c = f32[4] abs(b), metadata={op_name=\"abs\" stack_frame_id=4}\n"
    "  ROOT s = f32[2] custom-call(c), custom_call_target=\"Sharding\", metadata={stack_frame_id=3}\n"
    "}\n";

static IrModule *parse(const char *text)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("t.hlo", text, strlen(text), &o, &m, &d) != IR_OK)
        fail_msg("%s", d.msg ? d.msg : "?");
    return m;
}

static const IrInstr *named(const IrModule *m, const char *name)
{
    const IrComputation *c = m->comp[m->entry];
    for (int32_t i = 0; i < c->ninstr; i++)
        if (strcmp(c->instr[i].name, name) == 0)
            return &c->instr[i];
    fail_msg("no %s", name);
    return NULL;
}

static void test_origin(void **state)
{
    (void)state;
    IrModule *m = parse(TEXT);
    char buf[128];
    assert_true(ir_instr_origin(m, named(m, "a"), buf, sizeof buf));
    assert_string_equal(buf, "model.py:6:37 in mlp");
    assert_true(ir_instr_origin(m, named(m, "b"), buf, sizeof buf));
    assert_string_equal(buf, "other.py:16:28 in mlp");
    assert_false(ir_instr_origin(m, named(m, "x"), buf, sizeof buf)); /* no stack_frame_id */
    assert_string_equal(buf, "");
    assert_false(ir_instr_origin(m, named(m, "c"), buf, sizeof buf)); /* location 9 is absent */
    /* Truncated to the buffer. */
    char small[6];
    assert_true(ir_instr_origin(m, named(m, "a"), small, sizeof small));
    assert_string_equal(small, "model");
    ir_module_free(m);
    /* A module without the tables. */
    m = parse("HloModule m\nENTRY e {\n  ROOT x = f32[4] parameter(0), metadata={stack_frame_id=1}\n}\n");
    assert_false(ir_instr_origin(m, named(m, "x"), buf, sizeof buf));
    ir_module_free(m);
}

/* The Sharding custom-call changes the shape on one device: a run-time
 * error at line 27, which names where s comes from. */
static void test_error_names_origin(void **state)
{
    (void)state;
    IrModule *m = parse(TEXT);
    int64_t dims[1] = {4};
    IrShape s = {.type = IR_F32, .rank = 1, .dims = dims};
    DevValue *x = dev_value_new(&s), *r = NULL;
    DevExecOptions opt = {0};
    IrDiag d = {0};
    assert_int_not_equal(dev_execute(m, m->entry, 1, &x, &opt, &r, &d), IR_OK);
    assert_non_null(strstr(d.msg, "changes the shape"));
    assert_non_null(strstr(d.msg, "(from other.py:16:28 in mlp)"));
    assert_int_equal(d.pos.line, 27);
    ir_diag_clear(&d);
    dev_value_unref(x);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_origin),
        cmocka_unit_test(test_error_names_origin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
