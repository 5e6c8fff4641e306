/*
 * test_fpmode.c: device/fpmode.c, XLA's CPU floating-point mode. While
 * dev_execute runs, a subnormal operand reads as zero and a subnormal
 * result is zero (XLA's ScopedFlushDenormal), while conversions on bits
 * keep them; the caller's thread computes with subnormals again after.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "device/device.h"

static float mul(float a, float b)
{
    volatile float x = a, y = b; /* computed now, on this thread's mode */
    return x * y;
}

static void test_enter_restore(void **state)
{
    (void)state;
    assert_true(mul(1e-20f, 1e-20f) > 0.0f); /* gradual underflow by default */
    DevFpMode m = dev_fp_flush_enter();
#if defined(__x86_64__) || defined(__aarch64__)
    assert_true(mul(1e-20f, 1e-20f) == 0.0f);
    assert_true(mul(1e-40f, 1e30f) == 0.0f); /* the operand too */
#endif
    DevFpMode inner = dev_fp_flush_enter(); /* nested: a no-op, restored to flushing */
    dev_fp_restore(inner);
#if defined(__x86_64__) || defined(__aarch64__)
    assert_true(mul(1e-20f, 1e-20f) == 0.0f);
#endif
    dev_fp_restore(m);
    assert_true(mul(1e-20f, 1e-20f) > 0.0f);
}

static IrModule *parse_text(const char *text)
{
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("test.hlo", text, strlen(text), &po, &m, &d) != IR_OK)
        fail_msg("parse: %s", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return m;
}

/* x != 0, x * 2^100, and x to bf16 and f8e8m0fnu and back (bits kept). */
static void test_execute_flushes(void **state)
{
    (void)state;
    const char *text = "HloModule t\n"
                       "ENTRY e {\n"
                       "  x = f32[3] parameter(0)\n"
                       "  z = f32[3] broadcast(f32[] constant(0)), dimensions={}\n"
                       "  ne = pred[3] compare(x, z), direction=NE\n"
                       "  big = f32[3] broadcast(f32[] constant(1.2676506e+30)), dimensions={}\n"
                       "  m = f32[3] multiply(x, big)\n"
                       "  b = f32[3] convert(bf16[3] convert(x))\n"
                       "  c = u8[3] bitcast-convert(f8e8m0fnu[3] convert(x))\n"
                       "  ROOT r = (pred[3], f32[3], f32[3], u8[3]) tuple(ne, m, b, c)\n"
                       "}\n";
    IrModule *mod = parse_text(text);
    int64_t n = 3;
    IrShape s = {.type = IR_F32, .rank = 1, .dims = &n};
    DevValue *x = dev_value_new(&s);
    assert_non_null(x);
    const float in[3] = {1e-40f, 3e-39f, 1.0f};
    memcpy(x->data, in, sizeof in);
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_execute(mod, mod->entry, 1, &x, NULL, &out, &d), IR_OK);
    const uint8_t *ne = out->elems[0]->data, *c = out->elems[3]->data;
    const float *m = (const float *)out->elems[1]->data, *b = (const float *)out->elems[2]->data;
#if defined(__x86_64__) || defined(__aarch64__)
    assert_int_equal(ne[0], 0);
    assert_int_equal(ne[1], 0);
    assert_true(m[0] == 0.0f && m[1] == 0.0f);
#endif
    assert_int_equal(ne[2], 1);
    assert_true(b[1] > 2.9e-39f && b[1] < 3.1e-39f); /* bf16 keeps the subnormal */
    assert_int_equal(c[0], 0x00);                    /* below 2^-127: 2^-127's code */
    assert_int_equal(c[1], 0x00);
    assert_int_equal(c[2], 127);
    assert_true(mul(1e-20f, 1e-20f) > 0.0f); /* the caller's mode is back */
    dev_value_unref(out);
    dev_value_unref(x);
    ir_module_free(mod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enter_restore),
        cmocka_unit_test(test_execute_flushes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
