/*
 * test_literal.c: constant literals (ir/literal.c). Each type's bytes
 * (expected bit patterns worked out by hand from IEEE 754 and two's
 * complement), nesting and counts, special and hex floats, f16/bf16
 * round-to-nearest-even corners, range errors with positions, tuples,
 * unterminated buffers and failure injection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static IrArena *arena;

static int setup(void **state)
{
    (void)state;
    arena = ir_arena_new();
    return arena ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_arena_free(arena);
    return 0;
}

static IrShape shape(IrType t, int32_t rank, const int64_t *dims)
{
    IrShape s;
    assert_int_equal(ir_shape_make(arena, &s, t, rank, dims), IR_OK);
    return s;
}

static IrShape scalar(IrType t)
{
    return shape(t, 0, NULL);
}

/* Parse, checking success, and return the bytes. */
static const uint8_t *lit_ok(const IrShape *s, const char *text, int64_t want_bytes)
{
    uint8_t *data = NULL;
    int64_t n = -1;
    IrDiag d = {0};
    IrStatus st = ir_literal_parse(arena, s, text, strlen(text), &data, &n, &d);
    if (st != IR_OK)
        fail_msg("literal '%s' failed: %s at %d:%d", text, d.msg ? d.msg : "?", (int)d.pos.line, (int)d.pos.col);
    assert_int_equal(n, want_bytes);
    return data;
}

static void lit_err(const IrShape *s, const char *text, const char *fragment, int line, int col)
{
    uint8_t *data = NULL;
    int64_t n = -1;
    IrDiag d = {0};
    IrStatus st = ir_literal_parse(arena, s, text, strlen(text), &data, &n, &d);
    if (st != IR_EINPUT)
        fail_msg("literal '%s' parsed (status %d)", text, (int)st);
    if (!d.msg || !strstr(d.msg, fragment))
        fail_msg("literal '%s': message '%s' lacks '%s'", text, d.msg ? d.msg : "(none)", fragment);
    if (d.pos.line != line || d.pos.col != col)
        fail_msg("literal '%s': error at %d:%d, expected %d:%d (%s)", text, (int)d.pos.line, (int)d.pos.col, line,
                 col, d.msg);
    ir_diag_clear(&d);
}

static uint16_t u16_of(const char *text, IrType t)
{
    IrShape s = scalar(t);
    uint16_t v;
    memcpy(&v, lit_ok(&s, text, 2), 2);
    return v;
}

static uint32_t f32_bits(const char *text)
{
    IrShape s = scalar(IR_F32);
    uint32_t v;
    memcpy(&v, lit_ok(&s, text, 4), 4);
    return v;
}

static uint64_t f64_bits(const char *text)
{
    IrShape s = scalar(IR_F64);
    uint64_t v;
    memcpy(&v, lit_ok(&s, text, 8), 8);
    return v;
}

static void test_scalars_every_type(void **state)
{
    (void)state;
    IrShape s;
    s = scalar(IR_PRED);
    assert_int_equal(lit_ok(&s, "true", 1)[0], 1);
    assert_int_equal(lit_ok(&s, "false", 1)[0], 0);
    assert_int_equal(lit_ok(&s, "1", 1)[0], 1);
    assert_int_equal(lit_ok(&s, "0", 1)[0], 0);

    int8_t i8;
    s = scalar(IR_S8);
    memcpy(&i8, lit_ok(&s, "-128", 1), 1);
    assert_int_equal(i8, -128);
    memcpy(&i8, lit_ok(&s, "127", 1), 1);
    assert_int_equal(i8, 127);
    int16_t i16;
    s = scalar(IR_S16);
    memcpy(&i16, lit_ok(&s, "-32768", 2), 2);
    assert_int_equal(i16, -32768);
    int32_t i32;
    s = scalar(IR_S32);
    memcpy(&i32, lit_ok(&s, "2147483647", 4), 4);
    assert_int_equal(i32, 2147483647);
    memcpy(&i32, lit_ok(&s, "-0", 4), 4);
    assert_int_equal(i32, 0);
    int64_t i64;
    s = scalar(IR_S64);
    memcpy(&i64, lit_ok(&s, "-9223372036854775808", 8), 8);
    assert_true(i64 == INT64_MIN);
    uint8_t u8;
    s = scalar(IR_U8);
    memcpy(&u8, lit_ok(&s, "255", 1), 1);
    assert_int_equal(u8, 255);
    uint16_t u16;
    s = scalar(IR_U16);
    memcpy(&u16, lit_ok(&s, "65535", 2), 2);
    assert_int_equal(u16, 65535);
    uint32_t u32;
    s = scalar(IR_U32);
    memcpy(&u32, lit_ok(&s, "4294967295", 4), 4);
    assert_true(u32 == 4294967295u);
    uint64_t u64;
    s = scalar(IR_U64);
    memcpy(&u64, lit_ok(&s, "18446744073709551615", 8), 8);
    assert_true(u64 == UINT64_MAX);

    /* 1.5 = 1.1b x 2^0: f16 0 01111 1000000000, bf16 0 01111111 1000000 */
    assert_int_equal(u16_of("1.5", IR_F16), 0x3E00);
    assert_int_equal(u16_of("1.5", IR_BF16), 0x3FC0);
    assert_int_equal(f32_bits("1.5"), 0x3FC00000);
    assert_true(f64_bits("0.1") == 0x3FB999999999999Aull);
    assert_true(f64_bits("-2") == 0xC000000000000000ull); /* integers are fine for floats */
    assert_int_equal(f32_bits("1e3"), 0x447A0000);        /* 1000 */
    assert_int_equal(f32_bits("-2.5E-1"), 0xBE800000);    /* -0.25 */

    float c64[2];
    s = scalar(IR_C64);
    memcpy(c64, lit_ok(&s, "(1, 2)", 8), 8);
    assert_true(c64[0] == 1.0f && c64[1] == 2.0f);
    double c128[2];
    s = scalar(IR_C128);
    memcpy(c128, lit_ok(&s, "(1.5, -2)", 16), 16);
    assert_true(c128[0] == 1.5 && c128[1] == -2.0);
}

static void test_nested(void **state)
{
    (void)state;
    IrShape s = shape(IR_S32, 2, (int64_t[]){2, 2});
    int32_t v[4];
    memcpy(v, lit_ok(&s, "{ {1, 2}, {3, 4} }", 16), 16);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);

    /* row-major: {{0,1,2},{3,4,5}} */
    s = shape(IR_F32, 2, (int64_t[]){2, 3});
    float f[6];
    memcpy(f, lit_ok(&s, "{{0, 1, 2}, {3, 4, 5}}", 24), 24);
    for (int i = 0; i < 6; i++)
        assert_true(f[i] == (float)i);

    s = shape(IR_U8, 3, (int64_t[]){2, 1, 2});
    const uint8_t *b = lit_ok(&s, "{ { {1, 2} }, { {3, 4} } }", 4);
    assert_true(b[0] == 1 && b[1] == 2 && b[2] == 3 && b[3] == 4);

    s = shape(IR_PRED, 1, (int64_t[]){4});
    b = lit_ok(&s, "{true, 0, 1, false}", 4);
    assert_true(b[0] == 1 && b[1] == 0 && b[2] == 1 && b[3] == 0);

    s = shape(IR_C64, 1, (int64_t[]){2});
    float c[4];
    memcpy(c, lit_ok(&s, "{(1, 2), (3.5, -1)}", 16), 16);
    assert_true(c[0] == 1 && c[1] == 2 && c[2] == 3.5f && c[3] == -1);

    /* empty arrays */
    s = shape(IR_F32, 1, (int64_t[]){0});
    lit_ok(&s, "{}", 0);
    s = shape(IR_F32, 2, (int64_t[]){2, 0});
    lit_ok(&s, "{ {}, {} }", 0);
    s = shape(IR_F32, 2, (int64_t[]){0, 3});
    lit_ok(&s, "{}", 0);

    /* comments and line breaks anywhere */
    s = shape(IR_S16, 1, (int64_t[]){3});
    int16_t h[3];
    memcpy(h, lit_ok(&s, "{ /* first */ 7, // second\n -8,\n\t9 }", 6), 6);
    assert_true(h[0] == 7 && h[1] == -8 && h[2] == 9);
}

static void test_special_floats(void **state)
{
    (void)state;
    assert_int_equal(f32_bits("inf"), 0x7F800000);
    assert_int_equal(f32_bits("-inf"), 0xFF800000);
    uint32_t n = f32_bits("nan");
    assert_true((n & 0x7F800000) == 0x7F800000 && (n & 0x7FFFFF) != 0 && !(n >> 31));
    n = f32_bits("-nan");
    assert_true((n & 0x7F800000) == 0x7F800000 && (n & 0x7FFFFF) != 0 && (n >> 31));
    assert_int_equal(f32_bits("-0"), 0x80000000u);
    assert_int_equal(f32_bits("-0.0"), 0x80000000u);
    assert_true(f64_bits("inf") == 0x7FF0000000000000ull);
    assert_true(f64_bits("-inf") == 0xFFF0000000000000ull);
    double dn;
    uint64_t bits = f64_bits("-nan");
    memcpy(&dn, &bits, 8);
    assert_true(isnan(dn) && signbit(dn));

    assert_int_equal(u16_of("inf", IR_F16), 0x7C00);
    assert_int_equal(u16_of("-inf", IR_F16), 0xFC00);
    assert_int_equal(u16_of("nan", IR_F16), 0x7E00);
    assert_int_equal(u16_of("-nan", IR_F16), 0xFE00);
    assert_int_equal(u16_of("inf", IR_BF16), 0x7F80);
    assert_int_equal(u16_of("-inf", IR_BF16), 0xFF80);
    assert_int_equal(u16_of("nan", IR_BF16), 0x7FC0);
    assert_int_equal(u16_of("-nan", IR_BF16), 0xFFC0);

    IrShape s = shape(IR_F32, 1, (int64_t[]){4});
    uint32_t v[4];
    memcpy(v, lit_ok(&s, "{inf, -inf, 0, -nan}", 16), 16);
    assert_int_equal(v[0], 0x7F800000);
    assert_int_equal(v[1], 0xFF800000);
    assert_int_equal(v[2], 0);
    assert_true((v[3] >> 31) && (v[3] & 0x7FFFFF));
}

static void test_hex_floats(void **state)
{
    (void)state;
    assert_int_equal(f32_bits("0x1p-3"), 0x3E000000);     /* 0.125 */
    assert_int_equal(f32_bits("-0x1.8p1"), 0xC0400000);   /* -3 */
    assert_int_equal(f32_bits("0X1.0P+0"), 0x3F800000);   /* 1 */
    assert_true(f64_bits("0x1.fffffffffffffp+1023") == 0x7FEFFFFFFFFFFFFFull); /* DBL_MAX */
    /* a 300-digit decimal: exact reading, whatever its length */
    char longnum[320] = "1.";
    memset(longnum + 2, '0', 296);
    strcpy(longnum + 298, "1");
    assert_true(f64_bits(longnum) == 0x3FF0000000000000ull); /* rounds to 1.0 */
    assert_int_equal(u16_of("0x1p-14", IR_F16), 0x0400); /* smallest normal half */
    assert_int_equal(u16_of("0x1p-24", IR_F16), 0x0001); /* smallest subnormal half */
}

static void test_half_rounding(void **state)
{
    (void)state;
    /* f16: 1 + 2^-11 lies halfway between 1 (0x3C00) and 1 + 2^-10
     * (0x3C01): ties go to the even mantissa, 0x3C00. 1 + 3*2^-11 lies
     * halfway between 0x3C01 and 0x3C02: even is 0x3C02. */
    assert_int_equal(u16_of("1.00048828125", IR_F16), 0x3C00);
    assert_int_equal(u16_of("1.00146484375", IR_F16), 0x3C02);
    assert_int_equal(u16_of("1.0009765625", IR_F16), 0x3C01); /* exact 1 + 2^-10 */
    assert_int_equal(u16_of("0.1", IR_F16), 0x2E66);
    assert_int_equal(u16_of("-0.0", IR_F16), 0x8000);
    assert_int_equal(u16_of("65504", IR_F16), 0x7BFF); /* largest half */
    assert_int_equal(u16_of("65519", IR_F16), 0x7BFF); /* below the 65520 midpoint */
    /* subnormals: unit 2^-24; 2^-25 ties to 0 (even), 3*2^-25 ties to 2 */
    assert_int_equal(u16_of("5.9604644775390625e-08", IR_F16), 0x0001);
    assert_int_equal(u16_of("2.98023223876953125e-08", IR_F16), 0x0000);
    assert_int_equal(u16_of("8.94069671630859375e-08", IR_F16), 0x0002);
    assert_int_equal(u16_of("3.5762786865234375e-07", IR_F16), 0x0006); /* 6 * 2^-24, exact */
    assert_int_equal(u16_of("6.097555160522461e-05", IR_F16), 0x03FF);  /* largest subnormal 1023*2^-24 */

    /* bf16: 1 + 2^-8 is halfway between 0x3F80 and 0x3F81: even 0x3F80;
     * 1 + 3*2^-8 halfway between 0x3F81 and 0x3F82: even 0x3F82. */
    assert_int_equal(u16_of("1.00390625", IR_BF16), 0x3F80);
    assert_int_equal(u16_of("1.01171875", IR_BF16), 0x3F82);
    assert_int_equal(u16_of("3", IR_BF16), 0x4040);
    assert_int_equal(u16_of("0.1", IR_BF16), 0x3DCD); /* f32 0x3DCCCCCD rounds up */
    assert_int_equal(u16_of("3.39e38", IR_BF16), 0x7F7F); /* rounds down to the largest bf16 */
}

static void test_range_errors(void **state)
{
    (void)state;
    IrShape s;
    s = scalar(IR_S8);
    lit_err(&s, "128", "value '128' is out of range for s8 [-128, 127]", 1, 1);
    lit_err(&s, "-129", "out of range for s8", 1, 1);
    s = scalar(IR_U8);
    lit_err(&s, "256", "out of range for u8 [0, 255]", 1, 1);
    lit_err(&s, "-1", "out of range for u8", 1, 1);
    s = scalar(IR_U32);
    lit_err(&s, "4294967296", "out of range for u32", 1, 1);
    s = scalar(IR_S64);
    lit_err(&s, "9223372036854775808", "out of range for s64", 1, 1);
    s = scalar(IR_U64);
    lit_err(&s, "18446744073709551616", "does not fit in 64 bits", 1, 1);
    s = scalar(IR_PRED);
    lit_err(&s, "2", "expected true, false, 0 or 1 for pred", 1, 1);
    s = scalar(IR_S32);
    lit_err(&s, "1.5", "expected integer for s32, found '1.5'", 1, 1);
    lit_err(&s, "true", "expected integer for s32", 1, 1);
    s = scalar(IR_F32);
    lit_err(&s, "3.5e38", "out of range for f32", 1, 1);
    lit_ok(&s, "3.4028235e38", 4); /* rounds to FLT_MAX */
    lit_err(&s, "x", "expected floating-point value, found 'x'", 1, 1);
    s = scalar(IR_F64);
    lit_err(&s, "1e400", "out of range for f64", 1, 1);
    s = scalar(IR_F16);
    lit_err(&s, "65520", "out of range for f16", 1, 1);
    lit_err(&s, "-1e5", "out of range for f16", 1, 1);
    s = scalar(IR_BF16);
    lit_err(&s, "3.4e38", "out of range for bf16", 1, 1);
    s = scalar(IR_C64);
    lit_err(&s, "(1, 1e39)", "out of range", 1, 5);
    lit_err(&s, "1", "expected '(' to start a complex value", 1, 1);
    lit_err(&s, "(1 2)", "expected ',' between the real and imaginary parts", 1, 4);
    /* a range error inside an array points at the element */
    s = shape(IR_S8, 2, (int64_t[]){2, 2});
    lit_err(&s, "{\n  {1, 2},\n  {3, 400}\n}", "out of range for s8", 3, 7);
}

static void test_count_errors(void **state)
{
    (void)state;
    IrShape s = shape(IR_S32, 1, (int64_t[]){2});
    lit_err(&s, "{1, 2, 3}", "too many entries in dimension 0: expected 2", 1, 8);
    s = shape(IR_S32, 1, (int64_t[]){3});
    lit_err(&s, "{1, 2}", "expected 3 entries in dimension 0 of the literal, found 2", 1, 6);
    s = shape(IR_S32, 2, (int64_t[]){2, 2});
    lit_err(&s, "{1, 2}", "a value at depth 1 of a rank-2 literal", 1, 2);
    lit_err(&s, "{{1,2},{3,4},{5,6}}", "too many entries in dimension 0", 1, 14);
    lit_err(&s, "{{1,2},{3}}", "expected 2 entries in dimension 1 of the literal, found 1", 1, 10);
    lit_err(&s, "{{{1}}}", "too many '{'", 1, 3);
    lit_err(&s, "1", "the literal needs 4 values but the text is shorter", 1, 1);
    s = shape(IR_S32, 2, (int64_t[]){1, 1});
    lit_err(&s, "1", "expected '{' to start the literal, found '1'", 1, 1);
    s = scalar(IR_F32);
    lit_err(&s, "{1}", "a rank-0 literal has no braces", 1, 1);
    s = shape(IR_F32, 1, (int64_t[]){4});
    lit_err(&s, "{...}", "elided literal", 1, 2);
    lit_err(&s, "{1, 2, 3, 4} 5", "expected end of literal, found '5'", 1, 14);
    /* a huge shape with a short text fails before any allocation */
    s = shape(IR_F32, 1, (int64_t[]){1000000000});
    lit_err(&s, "{1}", "needs 1000000000 values", 1, 1);
    /* truncated input */
    s = shape(IR_F32, 1, (int64_t[]){2});
    lit_err(&s, "{1, 2", "expected a value or '}' in the literal, found end of input", 1, 6);
    s = scalar(IR_TOKEN);
    lit_err(&s, "0", "a literal cannot have type token", 1, 1);
}

static void test_tuples(void **state)
{
    (void)state;
    IrShape v2 = shape(IR_F32, 1, (int64_t[]){2}), sc = scalar(IR_S32);
    IrShape t;
    assert_int_equal(ir_shape_make_tuple(arena, &t, 2, (IrShape[]){v2, sc}), IR_OK);
    const uint8_t *b = lit_ok(&t, "( {1, 2}, 3 )", 12);
    float f[2];
    int32_t i;
    memcpy(f, b, 8);
    memcpy(&i, b + 8, 4);
    assert_true(f[0] == 1 && f[1] == 2 && i == 3);

    /* ((pred[], s8[2]), u16[]): leaves depth first: 1 | 1, -1 | 7 */
    IrShape p = scalar(IR_PRED), s8 = shape(IR_S8, 1, (int64_t[]){2}), u16 = scalar(IR_U16), inner, outer;
    assert_int_equal(ir_shape_make_tuple(arena, &inner, 2, (IrShape[]){p, s8}), IR_OK);
    assert_int_equal(ir_shape_make_tuple(arena, &outer, 2, (IrShape[]){inner, u16}), IR_OK);
    b = lit_ok(&outer, "((true, {1, -1}), 7)", 5);
    assert_int_equal(b[0], 1);
    assert_int_equal((int8_t)b[1], 1);
    assert_int_equal((int8_t)b[2], -1);
    uint16_t u;
    memcpy(&u, b + 3, 2);
    assert_int_equal(u, 7);

    IrShape empty;
    assert_int_equal(ir_shape_make_tuple(arena, &empty, 0, NULL), IR_OK);
    lit_ok(&empty, "()", 0);

    lit_err(&t, "( {1, 2} )", "expected ',' between tuple literal elements", 1, 10);
    lit_err(&t, "{1, 2}, 3", "expected '(' to start a tuple literal", 1, 1);
    lit_err(&t, "( {1, 2}, 3, 4 )", "expected ')' to end the tuple literal", 1, 12);
}

static void test_depth_limit(void **state)
{
    (void)state;
    /* a tuple nested 70 deep exceeds the default depth limit of 64 */
    IrShape s = scalar(IR_S32);
    for (int k = 0; k < 70; k++) {
        IrShape t;
        assert_int_equal(ir_shape_make_tuple(arena, &t, 1, &s), IR_OK);
        s = t;
    }
    char text[256];
    int n = 0;
    for (int k = 0; k < 70; k++)
        text[n++] = '(';
    text[n++] = '1';
    for (int k = 0; k < 70; k++)
        text[n++] = ')';
    text[n] = 0;
    lit_err(&s, text, "nesting too deep (limit 64)", 1, 65);
}

/* The text need not be NUL-terminated: only `len` bytes are read. */
static void test_unterminated_buffer(void **state)
{
    (void)state;
    const char *src = "{7, 8}";
    char *buf = malloc(6);
    memcpy(buf, src, 6); /* no terminator */
    IrShape s = shape(IR_S32, 1, (int64_t[]){2});
    uint8_t *data;
    int64_t n;
    IrDiag d = {0};
    assert_int_equal(ir_literal_parse(arena, &s, buf, 6, &data, &n, &d), IR_OK);
    int32_t v[2];
    memcpy(v, data, 8);
    assert_true(v[0] == 7 && v[1] == 8);
    /* only the first 5 bytes: the literal is cut short */
    assert_int_equal(ir_literal_parse(arena, &s, buf, 5, &data, &n, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "found end of input"));
    assert_int_equal(d.pos.col, 6);
    assert_non_null(d.line_text);
    assert_string_equal(d.line_text, "{7, 8");
    ir_diag_clear(&d);
    free(buf);
}

static void test_failure_injection(void **state)
{
    (void)state;
    IrShape s = shape(IR_F32, 2, (int64_t[]){2, 2});
    bool ok = false;
    for (long k = 1; k < 50 && !ok; k++) {
        IrArena *a = ir_arena_new();
        assert_non_null(a);
        uint8_t *data;
        int64_t n;
        IrDiag d = {0};
        ts_fail_alloc_after(k);
        IrStatus st = ir_literal_parse(a, &s, "{{1, 2}, {3, 4.5}}", 18, &data, &n, &d);
        ts_fail_alloc_after(0);
        assert_true(st == IR_OK || st == IR_ENOMEM);
        ok = st == IR_OK;
        ir_diag_clear(&d);
        ir_arena_free(a);
    }
    assert_true(ok);
    /* an error path under failure injection: the temporary copy made for
     * the diagnostic may fail; the status stays IR_EINPUT */
    for (long k = 1; k < 10; k++) {
        IrArena *a = ir_arena_new();
        uint8_t *data;
        int64_t n;
        IrDiag d = {0};
        ts_fail_alloc_after(k);
        IrStatus st = ir_literal_parse(a, &s, "{{1, 2}, {3}}", 13, &data, &n, &d);
        ts_fail_alloc_after(0);
        assert_true(st == IR_EINPUT || st == IR_ENOMEM);
        ir_diag_clear(&d);
        ir_arena_free(a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scalars_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_floats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hex_floats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_rounding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_range_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tuples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_depth_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unterminated_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_injection, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
