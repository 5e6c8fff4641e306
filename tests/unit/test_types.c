/*
 * test_types.c: ir/types.c, the primitive types' names as XLA's HLO text
 * spells them (xla_data.proto's PrimitiveType, lower-cased), and the
 * quick rejection of the names that are not types (every operand name is
 * asked), which must not turn a type away.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* Written out here, not taken from types.c: name, type, bytes, bits. */
static const struct {
    const char *name;
    IrType t;
    size_t size;
    int bits;
} spelled[] = {
    {"pred", IR_PRED, 1, 1},         {"s8", IR_S8, 1, 8},
    {"s16", IR_S16, 2, 16},          {"s32", IR_S32, 4, 32},
    {"s64", IR_S64, 8, 64},          {"u8", IR_U8, 1, 8},
    {"u16", IR_U16, 2, 16},          {"u32", IR_U32, 4, 32},
    {"u64", IR_U64, 8, 64},          {"f16", IR_F16, 2, 16},
    {"bf16", IR_BF16, 2, 16},        {"f32", IR_F32, 4, 32},
    {"f64", IR_F64, 8, 64},          {"c64", IR_C64, 8, 64},
    {"c128", IR_C128, 16, 128},      {"s2", IR_S2, 1, 2},
    {"s4", IR_S4, 1, 4},             {"u2", IR_U2, 1, 2},
    {"u4", IR_U4, 1, 4},             {"f8e5m2", IR_F8E5M2, 1, 8},
    {"f8e4m3", IR_F8E4M3, 1, 8},     {"f8e4m3fn", IR_F8E4M3FN, 1, 8},
    {"f8e4m3b11fnuz", IR_F8E4M3B11FNUZ, 1, 8},
    {"f8e5m2fnuz", IR_F8E5M2FNUZ, 1, 8},
    {"f8e4m3fnuz", IR_F8E4M3FNUZ, 1, 8},
    {"f8e3m4", IR_F8E3M4, 1, 8},     {"f8e8m0fnu", IR_F8E8M0FNU, 1, 8},
    {"f4e2m1fn", IR_F4E2M1FN, 1, 4}, {"token", IR_TOKEN, 0, 0},
    {"opaque", IR_OPAQUE, 0, 0},
};

static void test_every_name_is_read(void **state)
{
    (void)state;
    size_t n = sizeof spelled / sizeof spelled[0];
    /* Every type but invalid and tuple (which has no name of its own in a
     * shape: tuples are written in parentheses) is in the list. */
    assert_int_equal(n, IR_NTYPES - 2);
    for (size_t i = 0; i < n; i++) {
        const char *s = spelled[i].name;
        assert_int_equal(ir_type_from_name(s, strlen(s)), spelled[i].t);
        assert_string_equal(ir_type_name(spelled[i].t), s);
        assert_int_equal(ir_type_size(spelled[i].t), spelled[i].size);
        assert_int_equal(ir_type_bits(spelled[i].t), spelled[i].bits);
        /* Only the name's own bytes count: a longer text is read by its
         * length, the rest of the buffer is not looked at. */
        char buf[32];
        snprintf(buf, sizeof buf, "%s[8]", s);
        assert_int_equal(ir_type_from_name(buf, strlen(s)), spelled[i].t);
    }
}

static void test_near_misses_are_not_types(void **state)
{
    (void)state;
    static const char *no[] = {
        "f", "f8", "f31", "f128", "s1", "s3", "s128", "u1", "c32", "c65", "c129",
        "pre", "predx", "Pred", "bf8", "bf16x", "tokens", "toke", "opaqu", "opaques",
        "f8e4m3f", "f8e4m3fnu", "f8e5m2fn", "f8e8m0", "f4e2m1", "f4e2m1fnx",
        "tuple", "invalid", "x0", "l0_sb", "param", "broadcast", "convert", "f32x",
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        assert_int_equal(ir_type_from_name(no[i], strlen(no[i])), IR_INVALID);
    assert_int_equal(ir_type_from_name("f32", 0), IR_INVALID);
    assert_int_equal(ir_type_from_name("f32", 2), IR_INVALID); /* "f3" */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_name_is_read),
        cmocka_unit_test(test_near_misses_are_not_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
