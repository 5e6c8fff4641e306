/*
 * test_reducer.c: the simple reducers' algebra (device/reducer.c) that the
 * kernels, the in-process collectives and the MPI operations share.
 * Expected values are worked out by hand in the comments: f16 = 1 sign,
 * 5 exponent (bias 15), 10 mantissa bits; bf16 = the top 16 bits of f32.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "device/device.h"

static DevAcc id_of(IrType t, IrOpcode op)
{
    DevRedDom d;
    assert_true(dev_red_dom(t, &d));
    return dev_red_identity(d, t, op);
}

static DevAcc f(double x)
{
    return (DevAcc){.f = x};
}

static double fcomb(IrOpcode op, double a, double b)
{
    return dev_red_combine(DEV_RED_F, op, f(a), f(b)).f;
}

static uint64_t f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double bits_f64(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The rows of ir/hlo_op_sem.def hold together, and say what XLA says:
 * the seven simple reducers (and nothing else) have an identity and an MPI
 * operation; a fixed-arity op's minimum is its arity; a vector op is
 * unary or binary; the called-computation counts of XLA's ops. */
static void test_op_semantics_table(void **state)
{
    (void)state;
    int nreducers = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        IrOpcode o = (IrOpcode)op;
        assert_int_equal(ir_op_identity(o) != IR_ID_NONE, ir_op_mpi(o) != IR_MPI_NONE);
        nreducers += ir_op_is_reducer(o);
        if (ir_op_arity(o) >= 0)
            assert_int_equal(ir_op_min_arity(o), ir_op_arity(o));
        if (ir_op_vector(o))
            assert_true(ir_op_kind(o) == IR_K_UNARY || ir_op_kind(o) == IR_K_BINARY);
    }
    assert_int_equal(nreducers, 7);
    assert_int_equal(ir_op_mpi(OP_ADD), IR_MPI_SUM);
    assert_int_equal(ir_op_mpi(OP_MINIMUM), IR_MPI_MIN);
    assert_int_equal(ir_op_mpi(OP_XOR), IR_MPI_BXOR);
    assert_int_equal(ir_op_identity(OP_AND), IR_ID_ALL_ONES);
    assert_false(ir_op_is_reducer(OP_SUBTRACT));
    assert_int_equal(ir_op_ncalled(OP_WHILE), 2);
    assert_int_equal(ir_op_ncalled(OP_SELECT_AND_SCATTER), 2);
    assert_int_equal(ir_op_ncalled(OP_REDUCE), 1);
    assert_int_equal(ir_op_ncalled(OP_ADD), 0);
    assert_int_equal(ir_op_ncalled(OP_CONDITIONAL), -1);
    assert_int_equal(ir_op_min_arity(OP_SCATTER), 3);
    assert_int_equal(ir_op_min_arity(OP_TUPLE), 0);
    assert_true(ir_op_talks_to_host(OP_INFEED));
    assert_false(ir_op_talks_to_host(OP_DOT));
    assert_true(ir_op_vector(OP_MAXIMUM));
    assert_false(ir_op_vector(OP_AND));
}

static void test_domains(void **state)
{
    (void)state;
    DevRedDom d;
    assert_true(dev_red_dom(IR_BF16, &d) && d == DEV_RED_F);
    assert_true(dev_red_dom(IR_S8, &d) && d == DEV_RED_S);
    assert_true(dev_red_dom(IR_U64, &d) && d == DEV_RED_U);
    assert_true(dev_red_dom(IR_PRED, &d) && d == DEV_RED_P);
    assert_false(dev_red_dom(IR_C64, &d)); /* complex: the general path */
    assert_true(dev_red_has(DEV_RED_F, OP_MAXIMUM));
    assert_false(dev_red_has(DEV_RED_F, OP_XOR)); /* no bitwise ops on floats */
    assert_true(dev_red_has(DEV_RED_P, OP_XOR));
    assert_false(dev_red_has(DEV_RED_S, OP_SUBTRACT)); /* not a reducer */
}

static void test_identities(void **state)
{
    (void)state;
    assert_true(id_of(IR_F32, OP_ADD).f == 0 && !signbit(id_of(IR_F32, OP_ADD).f));
    assert_true(id_of(IR_F64, OP_MULTIPLY).f == 1);
    assert_true(id_of(IR_F32, OP_MAXIMUM).f == -INFINITY);
    assert_true(id_of(IR_BF16, OP_MINIMUM).f == INFINITY);
    /* s8: max starts at -2^7 = -128, min at 2^7 - 1 = 127, and at all ones. */
    assert_int_equal(id_of(IR_S8, OP_MAXIMUM).s, -128);
    assert_int_equal(id_of(IR_S8, OP_MINIMUM).s, 127);
    assert_int_equal(id_of(IR_S8, OP_AND).s, -1);
    assert_true(id_of(IR_S64, OP_MAXIMUM).s == INT64_MIN);
    assert_true(id_of(IR_S64, OP_MINIMUM).s == INT64_MAX);
    /* u16: min and and start at 2^16 - 1 = 65535, max at 0. */
    assert_true(id_of(IR_U16, OP_MINIMUM).u == 65535);
    assert_true(id_of(IR_U16, OP_AND).u == 65535);
    assert_true(id_of(IR_U16, OP_MAXIMUM).u == 0);
    assert_true(id_of(IR_U64, OP_MINIMUM).u == UINT64_MAX);
    assert_true(id_of(IR_U32, OP_XOR).u == 0);
    /* pred: true for multiply/min/and (and-like), false for add/max/or/xor. */
    assert_true(id_of(IR_PRED, OP_MULTIPLY).u == 1);
    assert_true(id_of(IR_PRED, OP_MINIMUM).u == 1);
    assert_true(id_of(IR_PRED, OP_AND).u == 1);
    assert_true(id_of(IR_PRED, OP_ADD).u == 0);
    assert_true(id_of(IR_PRED, OP_MAXIMUM).u == 0);
    assert_true(id_of(IR_PRED, OP_OR).u == 0);
}

static void test_float_nan_and_zeros(void **state)
{
    (void)state;
    assert_true(isnan(fcomb(OP_MAXIMUM, NAN, 1)));
    assert_true(isnan(fcomb(OP_MAXIMUM, 1, NAN)));
    assert_true(isnan(fcomb(OP_MINIMUM, -INFINITY, NAN)));
    /* Both NaN: the lhs payload survives (quiet NaNs 0x7ff8...01, ...02). */
    double n1 = bits_f64(0x7ff8000000000001ull), n2 = bits_f64(0x7ff8000000000002ull);
    assert_true(f64_bits(fcomb(OP_MAXIMUM, n1, n2)) == 0x7ff8000000000001ull);
    assert_true(f64_bits(fcomb(OP_MINIMUM, n2, n1)) == 0x7ff8000000000002ull);
    /* -0.0 == +0.0 is a tie: the lhs is kept (XLA's CPU rule). */
    assert_true(signbit(fcomb(OP_MAXIMUM, -0.0, 0.0)));
    assert_false(signbit(fcomb(OP_MAXIMUM, 0.0, -0.0)));
    assert_true(signbit(fcomb(OP_MINIMUM, -0.0, 0.0)));
    assert_false(signbit(fcomb(OP_MINIMUM, 0.0, -0.0)));
    /* IEEE sums: -0 + -0 = -0, -0 + +0 = +0 (round to nearest). */
    assert_true(signbit(fcomb(OP_ADD, -0.0, -0.0)));
    assert_false(signbit(fcomb(OP_ADD, -0.0, 0.0)));
    assert_true(fcomb(OP_MAXIMUM, -INFINITY, -5) == -5);
    assert_true(fcomb(OP_MULTIPLY, 3, -0.5) == -1.5);
}

static void test_int_wrap(void **state)
{
    (void)state;
    /* s8: 100 + 100 = 200 = 200 - 256 = -56; 16 * 16 = 256 = 0 (mod 256). */
    int8_t s8[2] = {100, 16}, s8b[2] = {100, 16};
    assert_true(dev_red_combine_array(OP_ADD, IR_S8, s8, s8b, 1));
    assert_int_equal(s8[0], -56);
    assert_true(dev_red_combine_array(OP_MULTIPLY, IR_S8, s8 + 1, s8b + 1, 1));
    assert_int_equal(s8[1], 0);
    /* s32: INT32_MAX + 1 wraps to INT32_MIN. */
    int32_t a = INT32_MAX, one = 1;
    assert_true(dev_red_combine_array(OP_ADD, IR_S32, &a, &one, 1));
    assert_true(a == INT32_MIN);
    /* s64: INT64_MAX + 1 = INT64_MIN, in uint64 (no signed overflow). */
    DevAcc r = dev_red_combine(DEV_RED_S, OP_ADD, (DevAcc){.s = INT64_MAX}, (DevAcc){.s = 1});
    assert_true(r.s == INT64_MIN);
    /* Signed and unsigned compare: max(-1, 1) = 1 in s8, max(255, 1) = 255 in u8. */
    int8_t m1 = -1, p1 = 1;
    assert_true(dev_red_combine_array(OP_MAXIMUM, IR_S8, &m1, &p1, 1));
    assert_int_equal(m1, 1);
    uint8_t u = 255, u1 = 1;
    assert_true(dev_red_combine_array(OP_MAXIMUM, IR_U8, &u, &u1, 1));
    assert_int_equal(u, 255);
    assert_true(dev_red_combine_array(OP_MINIMUM, IR_U8, &u, &u1, 1));
    assert_int_equal(u, 1);
    /* u16 xor: 0xff00 ^ 0x0ff0 = 0xf0f0. */
    uint16_t x = 0xff00, y = 0x0ff0;
    assert_true(dev_red_combine_array(OP_XOR, IR_U16, &x, &y, 1));
    assert_int_equal(x, 0xf0f0);
}

static void test_pred(void **state)
{
    (void)state;
    /* add/max = or, multiply/min = and, xor: rows (1,1), (1,0), (0,0). */
    uint8_t o[3] = {1, 1, 0}, in[3] = {1, 0, 0};
    assert_true(dev_red_combine_array(OP_ADD, IR_PRED, o, in, 3));
    assert_memory_equal(o, ((uint8_t[]){1, 1, 0}), 3); /* 1 + 1 is true, never 2 */
    uint8_t m[3] = {1, 1, 0};
    assert_true(dev_red_combine_array(OP_MULTIPLY, IR_PRED, m, in, 3));
    assert_memory_equal(m, ((uint8_t[]){1, 0, 0}), 3);
    uint8_t x[3] = {1, 1, 0};
    assert_true(dev_red_combine_array(OP_XOR, IR_PRED, x, in, 3));
    assert_memory_equal(x, ((uint8_t[]){0, 1, 0}), 3);
    assert_int_equal(dev_red_canonical(IR_PRED, OP_ADD), OP_OR);
    assert_int_equal(dev_red_canonical(IR_PRED, OP_MINIMUM), OP_AND);
    assert_int_equal(dev_red_canonical(IR_S32, OP_ADD), OP_ADD);
}

static void test_rounding_per_step(void **state)
{
    (void)state;
    /* f16 1.0 = 0x3c00, 2^-11 = exponent 4: 0x1000. 1 + 2^-11 is half an
     * ulp of 1 (2^-10): a tie, to even: 1.0. 0x3c01 (1 + 2^-10) + 2^-11 =
     * 1 + 3 * 2^-11, a tie between mantissas 1 and 2: even, 0x3c02. */
    uint16_t h[2] = {0x3c00, 0x3c01}, e[2] = {0x1000, 0x1000};
    assert_true(dev_red_combine_array(OP_ADD, IR_F16, h, e, 2));
    assert_int_equal(h[0], 0x3c00);
    assert_int_equal(h[1], 0x3c02);
    /* f32: 1 + 2^-24 ties to 1; 1 + 3 * 2^-24 rounds up to 1 + 2^-22. */
    float s[2] = {1.0f, 1.0f}, t[2] = {0x1p-24f, 0x3p-24f};
    assert_true(dev_red_combine_array(OP_ADD, IR_F32, s, t, 2));
    assert_true(s[0] == 1.0f);
    assert_true(s[1] == 1.0f + 0x1p-22f);
    /* bf16 max with a NaN (0x7fc0) on either side gives that NaN. */
    uint16_t b[2] = {0x7fc0, 0x3f80}, c[2] = {0x3f80, 0x7fc0}; /* 0x3f80 = 1.0 */
    assert_true(dev_red_combine_array(OP_MAXIMUM, IR_BF16, b, c, 2));
    assert_int_equal(b[0], 0x7fc0);
    assert_int_equal(b[1], 0x7fc0);
}

static void test_fill_and_unsupported(void **state)
{
    (void)state;
    /* -inf: f16 0xfc00 (sign, exponent all ones), bf16 0xff80. */
    uint16_t h[300];
    assert_true(dev_red_fill_identity(OP_MAXIMUM, IR_F16, h, 300)); /* more than one chunk */
    assert_int_equal(h[0], 0xfc00);
    assert_int_equal(h[299], 0xfc00);
    assert_true(dev_red_fill_identity(OP_MAXIMUM, IR_BF16, h, 1));
    assert_int_equal(h[0], 0xff80);
    int16_t s[2];
    assert_true(dev_red_fill_identity(OP_MINIMUM, IR_S16, s, 2));
    assert_int_equal(s[1], 32767);
    float x = 1, y = 2;
    assert_false(dev_red_combine_array(OP_AND, IR_F32, &x, &y, 1)); /* nothing written */
    assert_true(x == 1);
    float c[2] = {0};
    assert_false(dev_red_fill_identity(OP_ADD, IR_C64, c, 1));
}

static void test_folds_in_order(void **state)
{
    (void)state;
    /* 1e16 + 1 + 1 + ... in order: each 1 is lost (ulp of 1e16 is 2), so
     * the sum stays 1e16; the other order would give 1e16 + 4. */
    DevAcc x[4] = {f(1), f(1), f(1), f(1)};
    assert_true(dev_red_fold_one(DEV_RED_F, OP_ADD, f(1e16), x, 4).f == 1e16);
    DevAcc acc[2] = {f(1), f(NAN)}, y[2] = {f(2), f(3)};
    dev_red_fold_run(DEV_RED_F, OP_MAXIMUM, acc, 1, y, 2);
    assert_true(acc[0].f == 2 && isnan(acc[1].f));
    /* s32 run loaded then folded: 5 + (-7) = -2. */
    int32_t v[1] = {-7};
    DevAcc z[1], a = {.s = 5};
    dev_red_load_run(DEV_RED_S, IR_S32, (const uint8_t *)v, 0, 1, z);
    assert_true(dev_red_fold_one(DEV_RED_S, OP_ADD, a, z, 1).s == -2);
}

/* ---- reducer computations (reducer_comp.c) ---- */

static const char REDUCERS[] =
    "HloModule r\n"
    "mix {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ab = s32[] multiply(a, b)\n"
    "  s = s32[] add(b, a)\n  ROOT r = s32[] add(ab, s)\n}\n"
    "mix_chain {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ab = s32[] multiply(a, b)\n"
    "  s = s32[] add(ab, a)\n  ROOT r = s32[] add(s, b)\n}\n"
    "first {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] copy(a)\n}\n"
    "lin {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  bb = s32[] add(b, b)\n"
    "  ROOT r = s32[] add(a, bb)\n}\n"
    "sub {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] subtract(a, b)\n}\n"
    "maxf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(b, a)\n}\n"
    "three {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  c = s32[] parameter(2)\n"
    "  ROOT r = s32[] add(a, b)\n}\n"
    "ENTRY main {\n  ROOT x = s32[] parameter(0)\n}\n";

static IrModule *reducers(void)
{
    IrModule *m = NULL;
    IrDiag d = {0};
    IrParseOptions po = ir_default_parse_options();
    assert_int_equal(ir_parse("r.hlo", REDUCERS, strlen(REDUCERS), &po, &m, &d), IR_OK);
    return m;
}

/* Values worked out by hand: mix(a, b) = a*b + (a + b). */
static void test_reducer_call(void **state)
{
    (void)state;
    IrModule *m = reducers();
    IrDiag d = {0};
    int32_t lhs[4] = {1, 2, -3, 7}, rhs[4] = {4, 0, 5, -1}, out[4];
    assert_int_equal(dev_red_call(m, ir_find_computation(m, "mix"), IR_S32, out, lhs, rhs, 4, &d), IR_OK);
    int32_t want[4] = {9, 2, -13, -1};
    assert_memory_equal(out, want, sizeof want);
    /* in place, lhs is the left operand */
    assert_int_equal(dev_red_call(m, ir_find_computation(m, "first"), IR_S32, rhs, lhs, rhs, 4, &d), IR_OK);
    assert_memory_equal(rhs, lhs, sizeof lhs);
    float fa[3] = {5, 1, -2}, fb[3] = {2, 4, -2}, fo[3];
    assert_int_equal(dev_red_call(m, ir_find_computation(m, "sub"), IR_F32, fo, fa, fb, 3, &d), IR_OK);
    assert_true(fo[0] == 3 && fo[1] == -3 && fo[2] == 0);
    /* nothing to do */
    assert_int_equal(dev_red_call(m, ir_find_computation(m, "mix"), IR_S32, out, lhs, rhs, 0, &d), IR_OK);
    /* a reducer of three parameters, or none at all: refused with a message */
    assert_int_equal(dev_red_call(m, ir_find_computation(m, "three"), IR_S32, out, lhs, rhs, 4, &d),
                     IR_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "three"));
    ir_diag_clear(&d);
    assert_int_equal(dev_red_call(m, 99, IR_S32, out, lhs, rhs, 4, &d), IR_EINPUT);
    ir_diag_clear(&d);
    /* the computation's type is not the elements' */
    assert_int_not_equal(dev_red_call(m, ir_find_computation(m, "sub"), IR_S32, out, lhs, rhs, 4, &d), IR_OK);
    ir_diag_clear(&d);
    ir_module_free(m);
}

static void test_reducer_commutes(void **state)
{
    (void)state;
    IrModule *m = reducers();
    assert_true(dev_red_commutes(m, ir_find_computation(m, "mix")));
    assert_true(dev_red_commutes(m, ir_find_computation(m, "maxf")));  /* simple */
    /* commutative, but only by reassociation: not proven */
    assert_false(dev_red_commutes(m, ir_find_computation(m, "mix_chain")));
    assert_false(dev_red_commutes(m, ir_find_computation(m, "first")));
    assert_false(dev_red_commutes(m, ir_find_computation(m, "lin")));
    assert_false(dev_red_commutes(m, ir_find_computation(m, "sub")));
    assert_false(dev_red_commutes(m, ir_find_computation(m, "three")));
    assert_false(dev_red_commutes(m, -1));
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_semantics_table),
        cmocka_unit_test(test_domains),
        cmocka_unit_test(test_identities),
        cmocka_unit_test(test_float_nan_and_zeros),
        cmocka_unit_test(test_int_wrap),
        cmocka_unit_test(test_pred),
        cmocka_unit_test(test_rounding_per_step),
        cmocka_unit_test(test_fill_and_unsupported),
        cmocka_unit_test(test_folds_in_order),
        cmocka_unit_test(test_reducer_call),
        cmocka_unit_test(test_reducer_commutes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
