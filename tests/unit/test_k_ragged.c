/*
 * test_k_ragged.c: ragged-dot and scaled-dot (device/k_ragged.c) through
 * dev_execute, on cases worked out by hand in the comments, and the
 * modes and types it refuses (at the instruction's position).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/device.h"
#include "kernel_test.h"

#include <stdio.h>

static DevValue *run2(const char *txt, DevValue *a, DevValue *b, IrStatus want, IrDiag *keep)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL, *args[2] = {a, b};
    IrStatus st = exec_module(m, 2, args, &out, &d);
    if (st != want)
        print_message("status %d: %s\n", st, d.msg ? d.msg : "");
    assert_int_equal(st, want);
    if (keep)
        *keep = d;
    else
        ir_diag_clear(&d);
    ir_module_free(m);
    return out;
}

/* lhs f32[4,1] = {1, 2, 3, 4}, rhs f32[2,1,1] = {10, 100}, groups {1, 2}:
 * row 0 in group 0 (x10), rows 1-2 in group 1 (x100), row 3 in none (0):
 * {10, 200, 300, 0}. In bf16 (8 significant bits) the same values are
 * exact. */
static void test_noncontracting_by_hand(void **state)
{
    (void)state;
    const char *fmt = "HloModule t\nENTRY e {\n  l = %s[4,1] parameter(0)\n  r = %s[2,1,1] parameter(1)\n"
                      "  g = s32[2] constant({1, 2})\n"
                      "  ROOT d = %s[4,1] ragged-dot(l, r, g), lhs_contracting_dims={1}, "
                      "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n";
    const char *tys[2] = {"f32", "bf16"};
    IrType ts[2] = {IR_F32, IR_BF16};
    const double lv[4] = {1, 2, 3, 4}, rv[2] = {10, 100}, want[4] = {10, 200, 300, 0};
    for (int t = 0; t < 2; t++) {
        char txt[512];
        snprintf(txt, sizeof txt, fmt, tys[t], tys[t], tys[t]);
        int64_t ld[2] = {4, 1}, rd[3] = {2, 1, 1};
        DevValue *a = val(ts[t], 2, ld, NULL), *b = val(ts[t], 3, rd, NULL);
        for (int i = 0; i < 4; i++)
            dev_store_f64(ts[t], a->data, i, lv[i]);
        for (int i = 0; i < 2; i++)
            dev_store_f64(ts[t], b->data, i, rv[i]);
        DevValue *r = run2(txt, a, b, IR_OK, NULL);
        for (int i = 0; i < 4; i++)
            assert_true(dev_load_f64(ts[t], r->data, i) == want[i]);
        dev_value_unref(r);
        dev_value_unref(a);
        dev_value_unref(b);
    }
}

/* Contracting mode, lhs f32[1,3] = {1, 2, 3}, rhs f32[3,1] = {1, 1, 1},
 * groups {2, 1}: out[0] = 1 + 2 = 3, out[1] = 3. */
static void test_contracting_by_hand(void **state)
{
    (void)state;
    int64_t ld[2] = {1, 3}, rd[2] = {3, 1};
    const float lv[3] = {1, 2, 3}, rv[3] = {1, 1, 1};
    DevValue *a = val(IR_F32, 2, ld, lv), *b = val(IR_F32, 2, rd, rv);
    DevValue *r = run2("HloModule t\nENTRY e {\n  l = f32[1,3] parameter(0)\n  r = f32[3,1] parameter(1)\n"
                       "  g = s32[2] constant({2, 1})\n"
                       "  ROOT d = f32[2,1,1] ragged-dot(l, r, g), lhs_contracting_dims={1}, "
                       "rhs_contracting_dims={0}, lhs_ragged_dims={1}\n}\n", a, b, IR_OK, NULL);
    const float want[2] = {3, 3};
    assert_memory_equal(r->data, want, sizeof want);
    dev_value_unref(r);
    dev_value_unref(a);
    dev_value_unref(b);
}

/* Complex ragged-dot is refused at its line (6). */
static void test_refuses_complex(void **state)
{
    (void)state;
    int64_t ld[2] = {2, 1}, rd[3] = {1, 1, 1};
    DevValue *a = val(IR_C64, 2, ld, NULL), *b = val(IR_C64, 3, rd, NULL);
    IrDiag d;
    assert_null(run2("HloModule t\nENTRY e {\n  l = c64[2,1] parameter(0)\n  r = c64[1,1,1] parameter(1)\n"
                     "  g = s32[1] constant({2})\n"
                     "  ROOT d = c64[2,1] ragged-dot(l, r, g), lhs_contracting_dims={1}, "
                     "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n",
                     a, b, IR_EUNSUPPORTED, &d));
    assert_non_null(strstr(d.msg, "ragged-dot of c64 x c64 -> c64 is not supported"));
    assert_int_equal(d.pos.line, 6);
    ir_diag_clear(&d);
    dev_value_unref(a);
    dev_value_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noncontracting_by_hand),
        cmocka_unit_test(test_contracting_by_hand),
        cmocka_unit_test(test_refuses_complex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
