/*
 * literal.c: constant literals as XLA writes them, parsed into bytes.
 *
 *   f32[]        1.5            scalars bare; inf -inf nan -nan, hex floats 0x1p-3
 *   s32[2,2]     { {1, 2}, {3, 4} }   nested braces, one level per dimension
 *   pred[3]      {true, false, 1}
 *   c64[2]       {(1, 2), (3.5, -1)}  complex as (real, imaginary)
 *   (f32[2], s32[])  ( {1, 2}, 3 )    tuples: leaves depth first
 *
 * The bytes are the IrAttrs.literal form: leaves depth first, each
 * row-major in its type's in-memory form (pred as uint8 0/1, f16/bf16 as raw
 * uint16, little endian as the host). Every count must match the shape
 * exactly; values out of the type's range are errors (as in XLA); f16 and
 * bf16 round to nearest even from f32, as XLA (Eigen) converts. XLA's `...`
 * elision is printed output only and is refused.
 */
#include "lex.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- half-precision rounding (round to nearest, ties to even) ---- */

/* f32 -> IEEE f16. Example: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 and
 * goes to the even mantissa, 1.0 (0x3C00); 65520 and above become inf. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) /* inf, nan (quiet, top payload bits kept) */
        return sign | 0x7c00 | (ax > 0x7f800000 ? (uint16_t)(0x200 | ((ax >> 13) & 0x3ff)) : 0);
    if (ax >= 0x477ff000) /* >= 65520: rounds past the largest half, 65504 */
        return sign | 0x7c00;
    if (ax < 0x33000000) /* <= 2^-25 (exactly 2^-25 ties to even: 0) */
        return sign;
    if (ax < 0x38800000) { /* below 2^-14: a half subnormal, unit 2^-24 */
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        int e = (int)(ax >> 23);   /* value = m * 2^(e - 150) */
        int shift = 126 - e;       /* value / 2^-24 = m >> shift */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = ax - 0x38000000; /* rebias the exponent from 127 to 15 */
    uint32_t rem = r & 0x1fff;
    r >>= 13;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
        r++;
    return sign | (uint16_t)r;
}

/* f32 -> bfloat16: the top 16 bits, rounded to nearest even. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40); /* quiet nan, sign kept */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

/* ---- scalars ---- */

static void store(uint8_t *dst, const void *v, size_t n)
{
    memcpy(dst, v, n);
}

/* An integer of `t` from the current INT token, range-checked. */
static bool parse_int_value(Lexer *L, IrType t, uint8_t *dst)
{
    char buf[64];
    bool neg = false;
    uint64_t mag = 0;
    int bits = ir_type_bits(t);
    if (!lx_parse_uint(lx_text(L), lx_tlen(L), &neg, &mag))
        return lx_fail(L, L->tok.pos, "integer %s does not fit in 64 bits", lx_describe(L, buf, sizeof buf));
    if (neg && mag == 0)
        neg = false;
    if (ir_type_is_unsigned_int(t)) {
        uint64_t max = bits == 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
        if (neg || mag > max)
            return lx_fail(L, L->tok.pos, "value %s is out of range for %s [0, %llu]",
                           lx_describe(L, buf, sizeof buf), ir_type_name(t), (unsigned long long)max);
        /* By the element's size: u2/u4 are one zero-extended byte. */
        switch (ir_type_size(t)) {
        case 1: { uint8_t v = (uint8_t)mag; store(dst, &v, 1); break; }
        case 2: { uint16_t v = (uint16_t)mag; store(dst, &v, 2); break; }
        case 4: { uint32_t v = (uint32_t)mag; store(dst, &v, 4); break; }
        default: store(dst, &mag, 8); break;
        }
    } else {
        uint64_t max = ((uint64_t)1 << (bits - 1)) - 1; /* 127 for s8 */
        if (mag > max + (neg ? 1 : 0))
            return lx_fail(L, L->tok.pos, "value %s is out of range for %s [%lld, %llu]",
                           lx_describe(L, buf, sizeof buf), ir_type_name(t), -(long long)max - 1,
                           (unsigned long long)max);
        int64_t v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        /* By the element's size: s2/s4 are one sign-extended byte. */
        switch (ir_type_size(t)) {
        case 1: { int8_t w = (int8_t)v; store(dst, &w, 1); break; }
        case 2: { int16_t w = (int16_t)v; store(dst, &w, 2); break; }
        case 4: { int32_t w = (int32_t)v; store(dst, &w, 4); break; }
        default: store(dst, &v, 8); break;
        }
    }
    lx_next(L);
    return true;
}

/* A real value from the current token: INT, FLOAT (decimal or hex), or the
 * words inf / nan (signed forms are FLOAT tokens). */
static bool parse_real(Lexer *L, double *out, IrType t)
{
    char buf[128];
    const char *s = lx_text(L);
    size_t n = lx_tlen(L);
    bool neg = n > 0 && s[0] == '-';
    const char *w = neg ? s + 1 : s;
    size_t wn = neg ? n - 1 : n;
    if ((lx_is(L, LX_NAME) || lx_is(L, LX_FLOAT)) && wn == 3 && (memcmp(w, "inf", 3) == 0 || memcmp(w, "nan", 3) == 0)) {
        double v = memcmp(w, "inf", 3) == 0 ? INFINITY : NAN;
        *out = neg ? -v : v; /* -nan keeps its sign bit */
        if (isnan(v))
            *out = copysign(NAN, neg ? -1.0 : 1.0);
        lx_next(L);
        return true;
    }
    if (!lx_is(L, LX_INT) && !lx_is(L, LX_FLOAT))
        return lx_expected_word(L, t == IR_INVALID ? "number" : "floating-point value",
                                (const char *const[]){"inf", "nan", NULL});
    char *tmp = n < sizeof buf ? buf : ts_malloc(n + 1);
    if (!tmp)
        return lx_nomem(L);
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    char *end;
    double v = strtod(tmp, &end);
    bool bad = end != tmp + n;
    bool range = errno == ERANGE && isinf(v);
    if (tmp != buf)
        ts_free(tmp);
    if (bad)
        return lx_fail(L, L->tok.pos, "malformed number %s", lx_describe(L, buf, sizeof buf));
    if (range)
        return lx_fail(L, L->tok.pos, "value %s is out of range for f64", lx_describe(L, buf, sizeof buf));
    *out = v;
    lx_next(L);
    return true;
}

/* Store a real value as float type t; finite values that round to
 * infinity in t are out of range (XLA's rule). */
static bool store_real(Lexer *L, IrPos pos, double v, IrType t, uint8_t *dst)
{
    float f = (float)v;
    bool overflow = false;
    switch (t) {
    case IR_F64:
        store(dst, &v, 8);
        return true;
    case IR_F32:
    case IR_C64:
        overflow = isinf(f) && !isinf(v);
        store(dst, &f, 4);
        break;
    case IR_F16: {
        uint16_t h = f32_to_f16(f);
        overflow = (h & 0x7fff) == 0x7c00 && !isinf(v);
        store(dst, &h, 2);
        break;
    }
    case IR_BF16: {
        uint16_t h = f32_to_bf16(f);
        overflow = (h & 0x7fff) == 0x7f80 && !isinf(v);
        store(dst, &h, 2);
        break;
    }
    default:
        if (!ir_type_is_lowp_float(t))
            return lx_fail(L, pos, "internal: %s is not a floating-point type", ir_type_name(t));
        /* f8/f4: the type's own code, rounded to nearest even from the
         * decimal's double (lowp.c). XLA's parser refuses a finite value
         * that does not fit; here that is one the convert would send to
         * inf or NaN, or (f4e2m1fn, e8m0fnu) saturate or reject. */
        *dst = ir_lowp_from_double(t, v);
        overflow = isfinite(v) && !isfinite(ir_lowp_to_double(t, *dst));
        if (t == IR_F4E2M1FN && fabs(v) > 6.0)
            overflow = true;
        if (t == IR_F8E8M0FNU && (v == 0 || v < 0))
            overflow = true;
        break;
    }
    if (overflow)
        return lx_fail(L, pos, "value %g is out of range for %s", v, ir_type_name(t));
    return true;
}

/* complex ::= '(' real ',' real ')' */
static bool parse_complex_value(Lexer *L, IrType t, uint8_t *dst)
{
    size_t half = t == IR_C64 ? 4 : 8;
    IrType part = t == IR_C64 ? IR_C64 : IR_F64;
    double re = 0, im = 0;
    if (!lx_expect(L, LX_LPAREN, "'(' to start a complex value"))
        return false;
    IrPos p1 = L->tok.pos;
    if (!parse_real(L, &re, part) || !store_real(L, p1, re, part, dst) ||
        !lx_expect(L, LX_COMMA, "',' between the real and imaginary parts"))
        return false;
    IrPos p2 = L->tok.pos;
    return parse_real(L, &im, part) && store_real(L, p2, im, part, dst + half) &&
           lx_expect(L, LX_RPAREN, "')' to end a complex value");
}

/* One element of type t at the current token. */
static bool parse_scalar(Lexer *L, IrType t, uint8_t *dst)
{
    IrPos pos = L->tok.pos;
    if (t == IR_PRED) {
        uint8_t v;
        if (lx_is_word(L, "true") || lx_is_word(L, "false")) {
            v = lx_is_word(L, "true");
        } else if (lx_is(L, LX_INT) && (lx_text_is(L, "0") || lx_text_is(L, "1"))) {
            v = lx_text_is(L, "1");
        } else {
            return lx_expected_word(L, "true, false, 0 or 1 for pred", (const char *const[]){"true", "false", NULL});
        }
        store(dst, &v, 1);
        lx_next(L);
        return true;
    }
    if (ir_type_is_int(t)) {
        if (!lx_is(L, LX_INT)) {
            char what[48];
            snprintf(what, sizeof what, "integer for %s", ir_type_name(t));
            return lx_expected(L, what);
        }
        return parse_int_value(L, t, dst);
    }
    if (ir_type_is_complex(t))
        return parse_complex_value(L, t, dst);
    double v = 0;
    return parse_real(L, &v, t) && store_real(L, pos, v, t, dst);
}

/* ---- arrays and tuples ---- */

/* dense ::= scalar                       (rank 0)
 *         | '{' (dense_r-1 (',' ...)*)? '}'  (rank r, one level per dim)
 * Counting as XLA does: seen[k] counts the entries of dimension k inside
 * the innermost open brace of level k; a '}' at level k checks it equals
 * dims[k]. Example, s32[2,3]: {{1,2,3},{4,5,6}} -- after the first '}'
 * seen[1] == 3, after the last seen[0] == 2. */
static bool parse_dense(Lexer *L, const IrShape *shape, uint8_t *dst)
{
    int32_t rank = shape->rank;
    size_t size = ir_type_size(shape->type);
    if (rank == 0) {
        if (lx_is(L, LX_LBRACE))
            return lx_expected(L, "a scalar value (a rank-0 literal has no braces)");
        return parse_scalar(L, shape->type, dst);
    }
    int64_t *seen = ts_calloc((size_t)rank, sizeof(int64_t));
    if (!seen)
        return lx_nomem(L);
    int32_t level = 0;
    int64_t index = 0;
    bool ok = true;
    do {
        IrPos pos = L->tok.pos;
        switch (L->tok.kind) {
        case LX_LBRACE:
            if (level >= rank) {
                ok = lx_fail(L, pos, "too many '{': the literal has rank %d", (int)rank);
                break;
            }
            if (level >= L->lim.max_depth) {
                ok = lx_fail(L, pos, "nesting too deep (limit %d)", (int)L->lim.max_depth);
                break;
            }
            if (level > 0 && ++seen[level - 1] > shape->dims[level - 1]) {
                ok = lx_fail(L, pos, "too many entries in dimension %d: expected %lld", (int)level - 1,
                             (long long)shape->dims[level - 1]);
                break;
            }
            level++;
            lx_next(L);
            break;
        case LX_RBRACE:
            if (level == 0) {
                ok = lx_expected(L, "'{' to start the literal");
                break;
            }
            level--;
            if (seen[level] != shape->dims[level]) {
                ok = lx_fail(L, pos, "expected %lld entries in dimension %d of the literal, found %lld",
                             (long long)shape->dims[level], (int)level, (long long)seen[level]);
                break;
            }
            seen[level] = 0;
            lx_next(L);
            break;
        case LX_COMMA:
            lx_next(L);
            break;
        case LX_DOTS:
            ok = lx_fail(L, pos, "an elided literal '...' is not valid input; the values must be written out");
            break;
        case LX_INT:
        case LX_FLOAT:
        case LX_NAME:
        case LX_LPAREN:
            if (level != rank) {
                ok = level == 0 ? lx_expected(L, "'{' to start the literal")
                                : lx_fail(L, pos, "expected '{': a value at depth %d of a rank-%d literal",
                                          (int)level, (int)rank);
                break;
            }
            if (++seen[rank - 1] > shape->dims[rank - 1]) {
                ok = lx_fail(L, pos, "too many entries in dimension %d: expected %lld", (int)rank - 1,
                             (long long)shape->dims[rank - 1]);
                break;
            }
            ok = parse_scalar(L, shape->type, dst + (size_t)index * size);
            index++;
            break;
        default:
            ok = lx_expected(L, level == 0 ? "'{' to start the literal" : "a value or '}' in the literal");
            break;
        }
    } while (ok && level > 0);
    ts_free(seen);
    return ok;
}

/* literal ::= dense | '(' (literal (',' literal)*)? ')'   (tuple shapes) */
static bool parse_value(Lexer *L, const IrShape *shape, uint8_t *buf, int64_t *off)
{
    if (shape->type == IR_TUPLE) {
        if (!lx_enter(L) || !lx_expect(L, LX_LPAREN, "'(' to start a tuple literal"))
            return false;
        for (int32_t i = 0; i < shape->ntuple; i++) {
            if (i > 0 && !lx_expect(L, LX_COMMA, "',' between tuple literal elements"))
                return false;
            if (!parse_value(L, &shape->tuple[i], buf, off))
                return false;
        }
        if (!lx_expect(L, LX_RPAREN, "')' to end the tuple literal"))
            return false;
        lx_leave(L);
        return true;
    }
    if (shape->type == IR_TOKEN || !ir_type_is_array(shape->type))
        return lx_fail(L, L->tok.pos, "a literal cannot have type %s", ir_type_name(shape->type));
    int64_t bytes = ir_shape_bytes(shape);
    if (!parse_dense(L, shape, buf + *off))
        return false;
    *off += bytes;
    return true;
}

/* Element count over all leaves, -1 on overflow. */
static int64_t total_elements(const IrShape *s)
{
    if (s->type != IR_TUPLE)
        return ir_type_is_array(s->type) ? ir_shape_elements(s) : 0;
    int64_t n = 0;
    for (int32_t i = 0; i < s->ntuple; i++) {
        int64_t k = total_elements(&s->tuple[i]);
        if (k < 0 || n > INT64_MAX - k)
            return -1;
        n += k;
    }
    return n;
}

bool ir_lit_parse_lx(Lexer *L, const IrShape *shape, uint8_t **data, int64_t *nbytes)
{
    int64_t bytes = ir_shape_bytes(shape);
    int64_t elems = total_elements(shape);
    if (bytes < 0 || elems < 0)
        return lx_fail(L, L->tok.pos, "literal too large: its size overflows");
    /* Each value takes at least one byte of text: refuse before allocating
     * a buffer the text cannot possibly fill. */
    if ((uint64_t)elems > (uint64_t)(L->len - L->tok.start))
        return lx_fail(L, L->tok.pos, "the literal needs %lld values but the text is shorter than that",
                       (long long)elems);
    uint8_t *buf = ir_alloc(L->arena, (size_t)(bytes > 0 ? bytes : 1));
    if (!buf)
        return lx_nomem(L);
    int64_t off = 0;
    if (!parse_value(L, shape, buf, &off))
        return false;
    *data = buf;
    *nbytes = bytes;
    return true;
}

IrStatus ir_literal_parse(IrArena *a, const IrShape *shape, const char *text, size_t len,
                          uint8_t **data, int64_t *nbytes, IrDiag *d)
{
    Lexer L;
    lx_init(&L, NULL, text, len, NULL, a, d, NULL);
    if (!ir_lit_parse_lx(&L, shape, data, nbytes))
        return L.st;
    if (!lx_is(&L, LX_EOF)) {
        lx_expected(&L, "end of literal");
        return L.st;
    }
    return IR_OK;
}
