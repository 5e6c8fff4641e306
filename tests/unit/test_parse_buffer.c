/*
 * test_parse_buffer.c: XLA's buffer shape `b(f32[2,4])` (ir/parse_shape.c),
 * as JAX lowers its pinned values (custom-calls Pin, Unpin, CreateBuffer):
 * read as the array it holds with the buffer mark, on results, operands
 * and tuple leaves, printed back as written, and computed as the array:
 * Pin and Unpin pass the values through, CreateBuffer gives zeros. Shapes
 * XLA refuses inside b(...) (a tuple, a token, a buffer) are refused with
 * their line and column.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"

static const char *const TEXT =
    "HloModule m\n"
    "ENTRY e {\n"
    "  x = f32[2,2]{1,0} parameter(0)\n"
    "  p = b(f32[2,2]{1,0}) custom-call(x), custom_call_target=\"Pin\", output_to_operand_aliasing={{}: (0, {})}\n"
    "  u = f32[2,2]{1,0} custom-call(b(f32[2,2]{1,0}) p), custom_call_target=\"Unpin\"\n"
    "  c = b(f32[2,2]) custom-call(), custom_call_target=\"CreateBuffer\"\n"
    "  z = f32[2,2] custom-call(c), custom_call_target=\"Unpin\"\n"
    "  ROOT t = (f32[2,2], (b(f32[2,2]), f32[2,2])) tuple(u, (b(f32[2,2]), f32[2,2]) tuple(p, z))\n"
    "}\n";

static IrModule *parse(const char *text, IrDiag *d)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    IrModule *m = NULL;
    return ir_parse("t.hlo", text, strlen(text), &o, &m, d) == IR_OK ? m : NULL;
}

static const IrInstr *named(const IrModule *m, const char *name)
{
    const IrComputation *c = m->comp[m->entry];
    for (int32_t i = 0; i < c->ninstr; i++)
        if (strcmp(c->instr[i].name, name) == 0)
            return &c->instr[i];
    fail_msg("no instruction %s", name);
    return NULL;
}

static void test_read_print(void **state)
{
    (void)state;
    IrDiag d = {0};
    IrModule *m = parse(TEXT, &d);
    if (!m)
        fail_msg("%s", d.msg ? d.msg : "?");
    const IrShape *p = &named(m, "p")->shape;
    assert_true(p->buffer);
    assert_int_equal(p->type, IR_F32);
    assert_int_equal(p->rank, 2);
    assert_true(p->has_layout);
    assert_false(named(m, "u")->shape.buffer);
    assert_true(named(m, "t")->shape.tuple[1].tuple[0].buffer);
    assert_false(named(m, "t")->shape.tuple[1].tuple[1].buffer);
    char *out = ir_print_module(m);
    assert_non_null(out);
    assert_non_null(strstr(out, "p = b(f32[2,2]{1,0}) custom-call(x), custom_call_target=\"Pin\""));
    assert_non_null(strstr(out, "c = b(f32[2,2]) custom-call(), custom_call_target=\"CreateBuffer\""));
    assert_non_null(strstr(out, "ROOT t = (f32[2,2], (b(f32[2,2]), f32[2,2])) tuple("));
    IrModule *m2 = parse(out, &d);
    assert_non_null(m2);
    char *out2 = ir_print_module(m2);
    assert_string_equal(out, out2);
    free(out2);
    free(out);
    ir_module_free(m2);
    ir_module_free(m);
}

/* x = {1, 2, 3, 4}: u and the pinned value are x, the created buffer 0. */
static void test_run(void **state)
{
    (void)state;
    IrDiag d = {0};
    IrModule *m = parse(TEXT, &d);
    assert_non_null(m);
    int64_t dims[2] = {2, 2};
    IrShape s = {.type = IR_F32, .rank = 2, .dims = dims};
    DevValue *x = dev_value_new(&s), *r = NULL;
    assert_non_null(x);
    const float xv[4] = {1, 2, 3, 4}, zero[4] = {0};
    memcpy(x->data, xv, sizeof xv);
    DevExecOptions opt = {0};
    assert_int_equal(dev_execute(m, m->entry, 1, &x, &opt, &r, &d), IR_OK);
    assert_memory_equal(r->elems[0]->data, xv, sizeof xv);
    assert_memory_equal(r->elems[1]->elems[0]->data, xv, sizeof xv);
    assert_memory_equal(r->elems[1]->elems[1]->data, zero, sizeof zero);
    dev_value_unref(r);
    dev_value_unref(x);
    ir_module_free(m);
}

static void test_refused(void **state)
{
    (void)state;
    static const struct {
        const char *shape, *msg;
        int col;
    } bad[] = {
        {"b((f32[2]))", "holds an array shape", 14},
        {"b(token[])", "holds an array shape", 14},
        {"b(b(f32[2]))", "holds an array shape", 14},
        {"b(f32[2]", "')' to end the buffer shape", 21},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char text[256];
        snprintf(text, sizeof text, "HloModule m\nENTRY e {\n  ROOT c = %s custom-call(), custom_call_target=\"X\"\n}\n",
                 bad[k].shape);
        IrDiag d = {0};
        assert_null(parse(text, &d));
        if (!d.msg || !strstr(d.msg, bad[k].msg))
            fail_msg("%s: message '%s' lacks '%s'", bad[k].shape, d.msg ? d.msg : "", bad[k].msg);
        if (d.pos.line != 3 || d.pos.col != bad[k].col)
            fail_msg("%s: error at %d:%d, want 3:%d", bad[k].shape, (int)d.pos.line, (int)d.pos.col, bad[k].col);
        ir_diag_clear(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_print),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
