/*
 * test_k_elementwise.c: the elementwise kernels (device/k_elementwise.c)
 * against values worked out by hand: integer wrap, division by zero,
 * INT_MIN / -1, shifts past the width, integer power, NaN and -0.0 in
 * max/min/sign/compare, total order, saturating converts, f16/bf16
 * rounding, reduce-precision, bitcast-convert and map.
 *
 * Kernels are called directly with a hand-made instruction; map, which
 * calls a computation, gets a small module built with the ir/ builders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "attrs_test.h"
#include "device/device.h"

/* ---- helpers ---- */

static IrModule *mod;

static int setup(void **state)
{
    (void)state;
    mod = ir_module_new("t");
    return mod ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(mod);
    return 0;
}

/* A value of type t with dims (rank entries) and data copied from `data`. */
static DevValue *val(IrType t, int32_t rank, const int64_t *dims, const void *data)
{
    IrShape s = {.type = t, .rank = rank, .dims = (int64_t *)dims};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    if (data && v->nbytes)
        memcpy(v->data, data, (size_t)v->nbytes);
    return v;
}

static DevValue *vec(IrType t, int64_t n, const void *data)
{
    return val(t, 1, &n, data);
}

/* Run the elementwise kernel for `op` with result type rt and the shape of
 * operand 0 (or `dims` when given). Operands are released. */
static IrStatus run(IrOpcode op, IrType rt, const IrAttrs *attrs, int32_t n, DevValue **opnd,
                    DevValue **out, IrDiag *d)
{
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = op;
    ins.name = "x";
    ins.pos = (IrPos){4, 7};
    if (attrs)
        ins.a = *attrs;
    /* The result takes the dims of the largest-rank operand. */
    const IrShape *big = &opnd[0]->shape;
    for (int32_t i = 1; i < n; i++)
        if (opnd[i]->shape.rank > big->rank)
            big = &opnd[i]->shape;
    ins.shape = (IrShape){.type = rt, .rank = big->rank, .dims = big->dims};
    DevExecOptions opt = {0};
    DevKernelArgs k = {mod, NULL, &ins, n, opnd, &opt, d};
    IrStatus st = op == OP_BITCAST_CONVERT ? dev_k_bitcast_convert(&k, out)
                                           : dev_k_elementwise(&k, out);
    for (int32_t i = 0; i < n; i++)
        dev_value_unref(opnd[i]);
    return st;
}

static DevValue *run_ok(IrOpcode op, IrType rt, const IrAttrs *attrs, int32_t n, DevValue **opnd)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = run(op, rt, attrs, n, opnd, &out, &d);
    if (st != IR_OK)
        fail_msg("%s failed: %s", ir_op_name(op), d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return out;
}

static DevValue *bin(IrOpcode op, IrType t, int64_t n, const void *a, const void *b)
{
    DevValue *o[2] = {vec(t, n, a), vec(t, n, b)};
    return run_ok(op, t, NULL, 2, o);
}

static DevValue *un(IrOpcode op, IrType t, IrType rt, int64_t n, const void *a)
{
    DevValue *o[1] = {vec(t, n, a)};
    return run_ok(op, rt, NULL, 1, o);
}

#define CHECK_S32(v, ...)                                                    \
    do {                                                                     \
        DevValue *v_ = (v);                                                  \
        const int32_t want_[] = {__VA_ARGS__};                               \
        int64_t n_ = (int64_t)(sizeof want_ / sizeof *want_);                \
        assert_int_equal(dev_value_elements(v_), n_);                         \
        for (int64_t i_ = 0; i_ < n_; i_++)                                  \
            if (((int32_t *)v_->data)[i_] != want_[i_])                     \
                fail_msg("element %d: got %d, want %d", (int)i_,             \
                         ((int32_t *)v_->data)[i_], want_[i_]);             \
        dev_value_unref(v_);                                                  \
    } while (0)

#define CHECK_U8(v, ...)                                                     \
    do {                                                                     \
        DevValue *v_ = (v);                                                  \
        const uint8_t want_[] = {__VA_ARGS__};                               \
        int64_t n_ = (int64_t)(sizeof want_ / sizeof *want_);                \
        assert_int_equal(dev_value_elements(v_), n_);                         \
        for (int64_t i_ = 0; i_ < n_; i_++)                                  \
            if (((uint8_t *)v_->data)[i_] != want_[i_])                     \
                fail_msg("element %d: got %d, want %d", (int)i_,             \
                         ((uint8_t *)v_->data)[i_], want_[i_]);             \
        dev_value_unref(v_);                                                  \
    } while (0)

/* Floats compared bit for bit, except that any NaN matches any NaN. */
#define CHECK_F32(v, ...)                                                    \
    do {                                                                     \
        DevValue *v_ = (v);                                                  \
        const float want_[] = {__VA_ARGS__};                                 \
        int64_t n_ = (int64_t)(sizeof want_ / sizeof *want_);                \
        assert_int_equal(dev_value_elements(v_), n_);                         \
        for (int64_t i_ = 0; i_ < n_; i_++) {                                \
            float g_ = ((float *)v_->data)[i_];                             \
            bool ok_ = isnan(want_[i_]) ? isnan(g_)                          \
                                        : memcmp(&g_, &want_[i_], 4) == 0;   \
            if (!ok_)                                                        \
                fail_msg("element %d: got %a, want %a", (int)i_, g_,         \
                         want_[i_]);                                         \
        }                                                                    \
        dev_value_unref(v_);                                                  \
    } while (0)

static bool close_rel(double got, double want, double tol)
{
    return fabs(got - want) <= tol * fabs(want);
}

/* ---- integers ---- */

static void test_int_divide_remainder(void **state)
{
    (void)state;
    int32_t a[] = {7, -7, 7, INT32_MIN, 5, 0, -7};
    int32_t b[] = {2, 2, 0, -1, -3, 0, -2};
    /* C truncates toward zero; x/0 = -1; INT_MIN/-1 = INT_MIN. */
    CHECK_S32(bin(OP_DIVIDE, IR_S32, 7, a, b), 3, -3, -1, INT32_MIN, -1, -1, 3);
    /* x%0 = x; INT_MIN%-1 = 0; sign follows the dividend. */
    CHECK_S32(bin(OP_REMAINDER, IR_S32, 7, a, b), 1, -1, 7, 0, 2, 0, -1);

    uint32_t ua[] = {7, 5}, ub[] = {0, 2};
    DevValue *q = bin(OP_DIVIDE, IR_U32, 2, ua, ub);
    assert_true(((uint32_t *)q->data)[0] == UINT32_MAX && ((uint32_t *)q->data)[1] == 2);
    dev_value_unref(q);
    DevValue *r = bin(OP_REMAINDER, IR_U32, 2, ua, ub);
    assert_true(((uint32_t *)r->data)[0] == 7 && ((uint32_t *)r->data)[1] == 1);
    dev_value_unref(r);

    int8_t sa[] = {-128, 100}, sb[] = {-1, 0};
    DevValue *q8 = bin(OP_DIVIDE, IR_S8, 2, sa, sb);
    assert_int_equal(((int8_t *)q8->data)[0], -128);
    assert_int_equal(((int8_t *)q8->data)[1], -1);
    dev_value_unref(q8);
    int64_t la[] = {INT64_MIN}, lb[] = {-1};
    DevValue *r64 = bin(OP_REMAINDER, IR_S64, 1, la, lb);
    assert_true(((int64_t *)r64->data)[0] == 0);
    dev_value_unref(r64);
}

static void test_int_wrap(void **state)
{
    (void)state;
    int8_t a[] = {127, 16, -128}, b[] = {1, 16, 1};
    DevValue *s = bin(OP_ADD, IR_S8, 3, a, b);
    assert_int_equal(((int8_t *)s->data)[0], -128);
    dev_value_unref(s);
    DevValue *m = bin(OP_MULTIPLY, IR_S8, 3, a, b);
    assert_int_equal(((int8_t *)m->data)[1], 0); /* 256 wraps to 0 */
    dev_value_unref(m);
    DevValue *d = bin(OP_SUBTRACT, IR_S8, 3, a, b);
    assert_int_equal(((int8_t *)d->data)[2], 127); /* -129 wraps */
    dev_value_unref(d);
    /* (2^16-1)^2 = 2^32 - 2^17 + 1 = 1 mod 2^16 (and no int overflow inside). */
    uint16_t ua[] = {65535}, ub[] = {65535};
    DevValue *um = bin(OP_MULTIPLY, IR_U16, 1, ua, ub);
    assert_int_equal(((uint16_t *)um->data)[0], 1);
    dev_value_unref(um);
    int32_t x[] = {INT32_MIN, -5, 0, 7};
    CHECK_S32(un(OP_ABS, IR_S32, IR_S32, 4, x), INT32_MIN, 5, 0, 7);
    CHECK_S32(un(OP_NEGATE, IR_S32, IR_S32, 4, x), INT32_MIN, 5, 0, -7);
    CHECK_S32(un(OP_SIGN, IR_S32, IR_S32, 4, x), -1, -1, 0, 1);
    int32_t big[] = {INT32_MAX, INT32_MIN}, one[] = {1, -1};
    CHECK_S32(bin(OP_ADD, IR_S32, 2, big, one), INT32_MIN, INT32_MAX);
}

static void test_shifts(void **state)
{
    (void)state;
    int32_t one[] = {1, 1, 1, 1, 1}, by[] = {0, 31, 32, 33, -1};
    CHECK_S32(bin(OP_SHL, IR_S32, 5, one, by), 1, INT32_MIN, 0, 0, 0);
    int32_t m8[] = {-8, -8, -8, -8, -8, 8}, sb[] = {1, 31, 32, 100, -1, 32};
    CHECK_S32(bin(OP_SHRA, IR_S32, 6, m8, sb), -4, -1, -1, -1, -1, 0);
    CHECK_S32(bin(OP_SHRL, IR_S32, 6, m8, sb), 2147483644, 1, 0, 0, 0, 0);
    uint8_t u[] = {0x80, 0x81, 0x80}, ub[] = {1, 1, 8};
    DevValue *a = bin(OP_SHRA, IR_U8, 3, u, ub);
    CHECK_U8(a, 0xc0, 0xc0, 0xff); /* sign fill of the 8-bit pattern */
    DevValue *l = bin(OP_SHL, IR_U8, 3, u, ub);
    CHECK_U8(l, 0x00, 0x02, 0x00);
    DevValue *r = bin(OP_SHRL, IR_U8, 3, u, ub);
    CHECK_U8(r, 0x40, 0x40, 0x00);
    uint64_t w[] = {1}, wb[] = {63};
    DevValue *w64 = bin(OP_SHL, IR_U64, 1, w, wb);
    assert_true(((uint64_t *)w64->data)[0] == 1ull << 63);
    dev_value_unref(w64);
}

static void test_int_power_bits(void **state)
{
    (void)state;
    int32_t b[] = {2, 2, 1, -1, -1, 3, 0, 0, -2};
    int32_t e[] = {10, -1, -5, -1, 2, 0, 0, 3, 3};
    /* x^0 = 1 (0^0 too), 1^y = 1, a negative exponent gives 0 otherwise. */
    CHECK_S32(bin(OP_POWER, IR_S32, 9, b, e), 1024, 0, 1, 0, 1, 1, 1, 0, -8);
    uint8_t ub[] = {3, 2}, ue[] = {5, 9};
    CHECK_U8(bin(OP_POWER, IR_U8, 2, ub, ue), 243, 0); /* 2^9 = 512 wraps to 0 */
    int32_t x[] = {0, -1, 7, 0x00010000};
    CHECK_S32(un(OP_POPCNT, IR_S32, IR_S32, 4, x), 0, 32, 3, 1);
    CHECK_S32(un(OP_CLZ, IR_S32, IR_S32, 4, x), 32, 0, 29, 15);
    CHECK_S32(un(OP_NOT, IR_S32, IR_S32, 4, x), -1, 0, -8, ~0x00010000);
    uint8_t y[] = {0, 1, 0x80, 0xff};
    CHECK_U8(un(OP_CLZ, IR_U8, IR_U8, 4, y), 8, 7, 0, 0);
    CHECK_U8(un(OP_POPCNT, IR_U8, IR_U8, 4, y), 0, 1, 1, 8);
    int32_t p[] = {12, 12}, q[] = {10, -3};
    CHECK_S32(bin(OP_AND, IR_S32, 2, p, q), 8, 12);
    CHECK_S32(bin(OP_OR, IR_S32, 2, p, q), 14, -3);
    CHECK_S32(bin(OP_XOR, IR_S32, 2, p, q), 6, -15);
    CHECK_S32(bin(OP_MAXIMUM, IR_S32, 2, p, q), 12, 12);
    CHECK_S32(bin(OP_MINIMUM, IR_S32, 2, p, q), 10, -3);
}

static void test_pred_logic(void **state)
{
    (void)state;
    uint8_t a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
    CHECK_U8(bin(OP_AND, IR_PRED, 4, a, b), 0, 0, 0, 1);
    CHECK_U8(bin(OP_OR, IR_PRED, 4, a, b), 0, 1, 1, 1);
    CHECK_U8(bin(OP_XOR, IR_PRED, 4, a, b), 0, 1, 1, 0);
    CHECK_U8(un(OP_NOT, IR_PRED, IR_PRED, 4, a), 1, 1, 0, 0); /* logical, not ~ */
    /* Arithmetic on pred is not defined. */
    DevValue *o[2] = {vec(IR_PRED, 4, a), vec(IR_PRED, 4, b)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(OP_ADD, IR_PRED, NULL, 2, o, &out, &d), IR_EINPUT);
    assert_null(out);
    assert_non_null(strstr(d.msg, "add is not defined for pred"));
    ir_diag_clear(&d);
}

/* ---- floats ---- */

static void test_float_nan_zero(void **state)
{
    (void)state;
    float a[] = {1, NAN, 2, 5}, b[] = {NAN, 1, 3, -1};
    CHECK_F32(bin(OP_MAXIMUM, IR_F32, 4, a, b), NAN, NAN, 3, 5);
    CHECK_F32(bin(OP_MINIMUM, IR_F32, 4, a, b), NAN, NAN, 2, -1);
    float r1[] = {5.5f, -5.5f, 1, INFINITY, 3}, r2[] = {2, 2, 0, 1, INFINITY};
    CHECK_F32(bin(OP_REMAINDER, IR_F32, 5, r1, r2), 1.5f, -1.5f, NAN, NAN, 3);
    float s[] = {-2, -0.0f, 0.0f, 3, NAN, -INFINITY};
    CHECK_F32(un(OP_SIGN, IR_F32, IR_F32, 6, s), -1, -0.0f, 0.0f, 1, NAN, -1);
    CHECK_F32(un(OP_ABS, IR_F32, IR_F32, 6, s), 2, 0.0f, 0.0f, 3, NAN, INFINITY);
    CHECK_F32(un(OP_NEGATE, IR_F32, IR_F32, 6, s), 2, 0.0f, -0.0f, -3, NAN, INFINITY);
    float rd[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.4f};
    CHECK_F32(un(OP_ROUND_AFZ, IR_F32, IR_F32, 6, rd), 1, 2, 3, -1, -3, 2);
    CHECK_F32(un(OP_ROUND_EVEN, IR_F32, IR_F32, 6, rd), 0, 2, 2, -0.0f, -2, 2);
    CHECK_F32(un(OP_FLOOR, IR_F32, IR_F32, 6, rd), 0, 1, 2, -1, -3, 2);
    CHECK_F32(un(OP_CEIL, IR_F32, IR_F32, 6, rd), 1, 2, 3, -0.0f, -2, 3);
    float fin[] = {1, INFINITY, -INFINITY, NAN};
    CHECK_U8(un(OP_IS_FINITE, IR_F32, IR_PRED, 4, fin), 1, 0, 0, 0);
    double dz[] = {-0.0, 1.0}, dn[] = {NAN, -1.0};
    DevValue *mx = bin(OP_MAXIMUM, IR_F64, 2, dz, dn);
    assert_true(isnan(((double *)mx->data)[0]) && ((double *)mx->data)[1] == 1.0);
    dev_value_unref(mx);
}

static void test_float_math(void **state)
{
    (void)state;
    float l[] = {0, -1000, 1000};
    CHECK_F32(un(OP_LOGISTIC, IR_F32, IR_F32, 3, l), 0.5f, 0.0f, 1.0f);
    /* expm1/log1p keep tiny values that exp(x)-1 and log(1+x) lose in f32. */
    float tiny[] = {1e-10f};
    DevValue *e = un(OP_EXPM1, IR_F32, IR_F32, 1, tiny);
    assert_true(close_rel(((float *)e->data)[0], 1e-10, 1e-6));
    dev_value_unref(e);
    DevValue *lp = un(OP_LOG1P, IR_F32, IR_F32, 1, tiny);
    assert_true(close_rel(((float *)lp->data)[0], 1e-10, 1e-6));
    dev_value_unref(lp);
    float c[] = {-27, 8};
    CHECK_F32(un(OP_CBRT, IR_F32, IR_F32, 2, c), -3, 2);
    float r[] = {4, 0};
    CHECK_F32(un(OP_RSQRT, IR_F32, IR_F32, 2, r), 0.5f, INFINITY);
    double y[] = {1, -0.0, 0.0}, x[] = {-1, -1, -1};
    DevValue *at = bin(OP_ATAN2, IR_F64, 3, y, x);
    double *ad = (double *)at->data;
    assert_true(close_rel(ad[0], 2.356194490192345, 1e-15)); /* 3*pi/4 */
    assert_true(close_rel(ad[1], -3.141592653589793, 1e-15)); /* -pi: the sign of -0.0 */
    assert_true(close_rel(ad[2], 3.141592653589793, 1e-15));
    dev_value_unref(at);
    float pb[] = {2, -8, 0}, pe[] = {0.5f, 1.0f / 3, -1};
    DevValue *pw = bin(OP_POWER, IR_F32, 3, pb, pe);
    assert_true(close_rel(((float *)pw->data)[0], 1.41421356, 1e-6));
    assert_true(isnan(((float *)pw->data)[1]));
    assert_true(isinf(((float *)pw->data)[2]));
    dev_value_unref(pw);
    double ex[] = {1.0};
    DevValue *ee = un(OP_EXP, IR_F64, IR_F64, 1, ex);
    assert_true(close_rel(((double *)ee->data)[0], 2.718281828459045, 1e-15));
    dev_value_unref(ee);
    float tr[] = {0.5f};
    DevValue *th = un(OP_TANH, IR_F32, IR_F32, 1, tr);
    assert_true(close_rel(((float *)th->data)[0], 0.46211715726, 1e-6));
    dev_value_unref(th);
    DevValue *er = un(OP_ERF, IR_F32, IR_F32, 1, tr);
    assert_true(close_rel(((float *)er->data)[0], 0.52049987781, 1e-6));
    dev_value_unref(er);
    /* Math on integers is an error. */
    int32_t i[] = {1};
    DevValue *o[1] = {vec(IR_S32, 1, i)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(OP_EXP, IR_S32, NULL, 1, o, &out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "exponential is not defined for s32"));
    assert_int_equal(d.pos.line, 4);
    assert_int_equal(d.pos.col, 7);
    ir_diag_clear(&d);
}

/* f16/bf16 compute in f32 and round back once. */
static void test_half_arith(void **state)
{
    (void)state;
    /* f16: 2^-11 = 0x1000 (exponent 4), 3*2^-11 = 1.5*2^-10 = 0x1600.
     * 1.0 + 2^-11 is a tie, to even 1.0; 1.0 + 3*2^-11 is a tie above the
     * odd 0x3c01, so it rounds up to 0x3c02. */
    uint16_t a[] = {0x3c00, 0x3c00, 0x7bff, 0x3c00};
    uint16_t b[] = {0x1000, 0x1600, 0x5000, 0x8000}; /* 2^-11, 3*2^-11, 32, -0 */
    DevValue *s = bin(OP_ADD, IR_F16, 4, a, b);
    uint16_t *h = (uint16_t *)s->data;
    assert_int_equal(h[0], 0x3c00);
    assert_int_equal(h[1], 0x3c02);
    assert_int_equal(h[2], 0x7c00); /* 65504 + 32 = 65536 > 65520: inf */
    assert_int_equal(h[3], 0x3c00);
    dev_value_unref(s);
    /* bf16: 1 + 2^-8 is a tie, to even 1.0; 2 * 3 = 6. */
    uint16_t c[] = {0x3f80, 0x4000}, e[] = {0x3b80, 0x4040};
    DevValue *bs = bin(OP_ADD, IR_BF16, 2, c, e);
    assert_int_equal(((uint16_t *)bs->data)[0], 0x3f80);
    dev_value_unref(bs);
    DevValue *bm = bin(OP_MULTIPLY, IR_BF16, 2, c, e);
    assert_int_equal(((uint16_t *)bm->data)[1], 0x40c0);
    dev_value_unref(bm);
    /* Large f16 arrays cross the f32 chunk boundary. */
    enum { N = 1500 };
    static uint16_t x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = dev_f32_to_f16((float)i);
        y[i] = 0x3c00;
    }
    DevValue *big = bin(OP_SUBTRACT, IR_F16, N, x, y);
    for (int i = 0; i < N; i++)
        assert_true(dev_f16_to_f32(((uint16_t *)big->data)[i]) == (float)(i - 1));
    dev_value_unref(big);
    uint16_t nn[] = {0x7e00, 0xfc00, 0x3c00};
    CHECK_U8(un(OP_IS_FINITE, IR_F16, IR_PRED, 3, nn), 0, 0, 1);
}

/* ---- compare ---- */

static DevValue *cmp(IrType t, IrCmpDir dir, IrCmpType ct, int64_t n, const void *a,
                     const void *b)
{
    IrAttrs at = {.x = &ir_no_attrs_x};
    at.direction = dir;
    at.cmp_type = ct;
    DevValue *o[2] = {vec(t, n, a), vec(t, n, b)};
    return run_ok(OP_COMPARE, IR_PRED, &at, 2, o);
}

static void test_compare(void **state)
{
    (void)state;
    float a[] = {1, NAN, -0.0f, 1, 2}, b[] = {1, NAN, 0.0f, NAN, 1};
    CHECK_U8(cmp(IR_F32, CMP_EQ, CMPT_DEFAULT, 5, a, b), 1, 0, 1, 0, 0);
    CHECK_U8(cmp(IR_F32, CMP_NE, CMPT_DEFAULT, 5, a, b), 0, 1, 0, 1, 1);
    CHECK_U8(cmp(IR_F32, CMP_LT, CMPT_DEFAULT, 5, a, b), 0, 0, 0, 0, 0);
    CHECK_U8(cmp(IR_F32, CMP_GE, CMPT_DEFAULT, 5, a, b), 1, 0, 1, 0, 1);
    /* Total order: -NaN < -inf < -1 < -0 < 0 < 1 < inf < NaN. */
    float lo[] = {-NAN, -INFINITY, -1, -0.0f, 0.0f, 1, INFINITY};
    float hi[] = {-INFINITY, -1, -0.0f, 0.0f, 1, INFINITY, NAN};
    CHECK_U8(cmp(IR_F32, CMP_LT, CMPT_TOTALORDER, 7, lo, hi), 1, 1, 1, 1, 1, 1, 1);
    CHECK_U8(cmp(IR_F32, CMP_GT, CMPT_TOTALORDER, 7, lo, hi), 0, 0, 0, 0, 0, 0, 0);
    float z1[] = {-0.0f, NAN}, z2[] = {0.0f, NAN};
    CHECK_U8(cmp(IR_F32, CMP_EQ, CMPT_TOTALORDER, 2, z1, z2), 0, 1);
    double dlo[] = {-NAN, -0.0}, dhi[] = {-INFINITY, 0.0};
    CHECK_U8(cmp(IR_F64, CMP_LT, CMPT_TOTALORDER, 2, dlo, dhi), 1, 1);
    uint16_t hlo[] = {0x8000, 0xfe00}, hhi[] = {0x0000, 0xfc00}; /* -0 < 0; -NaN < -inf */
    CHECK_U8(cmp(IR_F16, CMP_LT, CMPT_TOTALORDER, 2, hlo, hhi), 1, 1);
    uint16_t ba[] = {0x4000, 0x7fc0}, bb[] = {0x3f80, 0x3f80}; /* 2 > 1; NaN > 1 false */
    CHECK_U8(cmp(IR_BF16, CMP_GT, CMPT_DEFAULT, 2, ba, bb), 1, 0);
    int32_t s1[] = {-1, 5}, s2[] = {1, 5};
    CHECK_U8(cmp(IR_S32, CMP_LT, CMPT_DEFAULT, 2, s1, s2), 1, 0);
    CHECK_U8(cmp(IR_S32, CMP_LT, CMPT_UNSIGNED, 2, s1, s2), 0, 0); /* 0xffffffff > 1 */
    CHECK_U8(cmp(IR_S32, CMP_LE, CMPT_DEFAULT, 2, s1, s2), 1, 1);
    uint32_t u1[] = {0xffffffffu}, u2[] = {1};
    CHECK_U8(cmp(IR_U32, CMP_LT, CMPT_DEFAULT, 1, u1, u2), 0);
    int8_t c1[] = {-128, 127}, c2[] = {127, -128};
    CHECK_U8(cmp(IR_S8, CMP_GT, CMPT_DEFAULT, 2, c1, c2), 0, 1);
    uint8_t p1[] = {0, 1}, p2[] = {1, 1};
    CHECK_U8(cmp(IR_PRED, CMP_LT, CMPT_DEFAULT, 2, p1, p2), 1, 0);
    int64_t l1[] = {INT64_MIN}, l2[] = {INT64_MAX};
    CHECK_U8(cmp(IR_S64, CMP_NE, CMPT_DEFAULT, 1, l1, l2), 1);
}

/* ---- select, clamp ---- */

static void test_select_clamp(void **state)
{
    (void)state;
    uint8_t p[] = {1, 0, 1};
    int32_t t[] = {1, 2, 3}, f[] = {10, 20, 30};
    DevValue *o[3] = {vec(IR_PRED, 3, p), vec(IR_S32, 3, t), vec(IR_S32, 3, f)};
    CHECK_S32(run_ok(OP_SELECT, IR_S32, NULL, 3, o), 1, 20, 3);
    uint8_t ps[] = {0};
    DevValue *o2[3] = {val(IR_PRED, 0, NULL, ps), vec(IR_S32, 3, t), vec(IR_S32, 3, f)};
    CHECK_S32(run_ok(OP_SELECT, IR_S32, NULL, 3, o2), 10, 20, 30);
    uint16_t ht[] = {1, 2}, hf[] = {3, 4};
    uint8_t hp[] = {0, 1};
    DevValue *o3[3] = {vec(IR_PRED, 2, hp), vec(IR_F16, 2, ht), vec(IR_F16, 2, hf)};
    DevValue *hs = run_ok(OP_SELECT, IR_F16, NULL, 3, o3);
    assert_int_equal(((uint16_t *)hs->data)[0], 3);
    assert_int_equal(((uint16_t *)hs->data)[1], 2);
    dev_value_unref(hs);

    float lo[] = {0}, hi[] = {6}, x[] = {-1, 3, 7, NAN};
    DevValue *c[3] = {val(IR_F32, 0, NULL, lo), vec(IR_F32, 4, x), val(IR_F32, 0, NULL, hi)};
    CHECK_F32(run_ok(OP_CLAMP, IR_F32, NULL, 3, c), 0, 3, 6, NAN);
    int32_t alo[] = {0, 5, -3}, ahi[] = {2, 9, -1}, ax[] = {-7, 7, 100};
    DevValue *c2[3] = {vec(IR_S32, 3, alo), vec(IR_S32, 3, ax), vec(IR_S32, 3, ahi)};
    CHECK_S32(run_ok(OP_CLAMP, IR_S32, NULL, 3, c2), 0, 7, -1);
    /* A mismatched operand shape is an error. */
    int32_t two[] = {1, 2};
    DevValue *bad[3] = {vec(IR_S32, 2, two), vec(IR_S32, 3, ax), vec(IR_S32, 3, ahi)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(OP_CLAMP, IR_S32, NULL, 3, bad, &out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "operand 1 has shape s32[3], result s32[2]"));
    ir_diag_clear(&d);
}

/* ---- convert ---- */

static DevValue *conv(IrType from, IrType to, int64_t n, const void *a)
{
    return un(OP_CONVERT, from, to, n, a);
}

static void test_convert(void **state)
{
    (void)state;
    float f[] = {1e10f, -1e10f, NAN, 2.7f, -2.7f, INFINITY};
    CHECK_S32(conv(IR_F32, IR_S32, 6, f), INT32_MAX, INT32_MIN, 0, 2, -2, INT32_MAX);
    float g[] = {-1, 300, 255.9f, NAN};
    CHECK_U8(conv(IR_F32, IR_U8, 4, g), 0, 255, 255, 0);
    int32_t s[] = {200, -129, 127};
    DevValue *s8 = conv(IR_S32, IR_S8, 3, s);
    assert_int_equal(((int8_t *)s8->data)[0], -56);
    assert_int_equal(((int8_t *)s8->data)[1], 127);
    assert_int_equal(((int8_t *)s8->data)[2], 127);
    dev_value_unref(s8);
    int32_t pz[] = {0, 2, -1};
    CHECK_U8(conv(IR_S32, IR_PRED, 3, pz), 0, 1, 1);
    float pf[] = {NAN, -0.0f, 0.5f};
    CHECK_U8(conv(IR_F32, IR_PRED, 3, pf), 1, 0, 1);
    uint8_t pr[] = {0, 1};
    CHECK_F32(conv(IR_PRED, IR_F32, 2, pr), 0, 1);
    float h[] = {65520.0f, 1.0f + 0x1p-11f, -0.0f};
    DevValue *hv = conv(IR_F32, IR_F16, 3, h);
    assert_int_equal(((uint16_t *)hv->data)[0], 0x7c00);
    assert_int_equal(((uint16_t *)hv->data)[1], 0x3c00);
    assert_int_equal(((uint16_t *)hv->data)[2], 0x8000);
    dev_value_unref(hv);
    double big[] = {1e300, 0x1p-149};
    CHECK_F32(conv(IR_F64, IR_F32, 2, big), INFINITY, 0x1p-149f);
    int64_t l[] = {16777217};
    CHECK_F32(conv(IR_S64, IR_F32, 1, l), 16777216.0f);
    uint32_t u[] = {0xffffffffu};
    CHECK_S32(conv(IR_U32, IR_S32, 1, u), -1);
    int32_t m1[] = {-1};
    DevValue *u64 = conv(IR_S32, IR_U64, 1, m1);
    assert_true(((uint64_t *)u64->data)[0] == UINT64_MAX);
    dev_value_unref(u64);
    uint8_t u8[] = {255};
    CHECK_S32(conv(IR_U8, IR_S32, 1, u8), 255);
    uint16_t sub[] = {0x0001};
    CHECK_F32(conv(IR_F16, IR_F32, 1, sub), 0x1p-24f);
    uint16_t bf[] = {0x7fc0, 0xc0a0};
    DevValue *bh = conv(IR_BF16, IR_F16, 2, bf); /* NaN stays NaN; -5 = 0xc500 */
    assert_true((((uint16_t *)bh->data)[0] & 0x7c00) == 0x7c00 && (((uint16_t *)bh->data)[0] & 0x3ff));
    assert_int_equal(((uint16_t *)bh->data)[1], 0xc500);
    dev_value_unref(bh);
    double d[] = {-3.99, 4e9};
    DevValue *d16 = conv(IR_F64, IR_S16, 2, d);
    assert_int_equal(((int16_t *)d16->data)[0], -3);
    assert_int_equal(((int16_t *)d16->data)[1], INT16_MAX);
    dev_value_unref(d16);
    float cf[] = {1.5f};
    DevValue *cv = conv(IR_F32, IR_C64, 1, cf);
    assert_true(((float *)cv->data)[0] == 1.5f && ((float *)cv->data)[1] == 0.0f);
    dev_value_unref(cv);
}

static void test_complex_parts(void **state)
{
    (void)state;
    float re[] = {1, 2}, im[] = {3, 4};
    DevValue *o[2] = {vec(IR_F32, 2, re), vec(IR_F32, 2, im)};
    DevValue *c = run_ok(OP_COMPLEX, IR_C64, NULL, 2, o);
    DevValue *o2[2] = {dev_value_ref(c), dev_value_ref(c)};
    DevValue *p = run_ok(OP_MULTIPLY, IR_C64, NULL, 2, o2); /* (1+3i)^2 = -8+6i */
    assert_true(((float *)p->data)[0] == -8 && ((float *)p->data)[1] == 6);
    DevValue *o3[1] = {p};
    CHECK_F32(run_ok(OP_IMAG, IR_F32, NULL, 1, o3), 6, 16); /* (2+4i)^2 = -12+16i */
    DevValue *o4[1] = {c};
    CHECK_F32(run_ok(OP_REAL, IR_F32, NULL, 1, o4), 1, 2);
    /* floor is not defined on complex (XLA: real types only). */
    float z[] = {0, 0};
    DevValue *o5[1] = {vec(IR_C64, 1, z)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(run(OP_FLOOR, IR_C64, NULL, 1, o5, &out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "not defined for c64"));
    ir_diag_clear(&d);
}

/* ---- reduce-precision ---- */

static void test_reduce_precision(void **state)
{
    (void)state;
    IrAttrs bf = {.x = &ir_no_attrs_x};
    test_x(&bf)->exponent_bits = 8;
    test_x(&bf)->mantissa_bits = 7;
    float x[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, NAN, -2.0f};
    DevValue *o[1] = {vec(IR_F32, 4, x)};
    CHECK_F32(run_ok(OP_REDUCE_PRECISION, IR_F32, &bf, 1, o), 1.0f, 1.0f + 0x1p-6f, NAN, -2.0f);
    IrAttrs h = {.x = &ir_no_attrs_x};
    test_x(&h)->exponent_bits = 5;
    test_x(&h)->mantissa_bits = 10;
    /* 65520 rounds to 2^16, past f16's range: inf. 1e-5 is below 2^-14:
     * flushed to zero (no subnormals). 65504 stays. */
    float y[] = {65520.0f, 1e-5f, -1e-5f, 65504.0f};
    DevValue *o2[1] = {vec(IR_F32, 4, y)};
    CHECK_F32(run_ok(OP_REDUCE_PRECISION, IR_F32, &h, 1, o2), INFINITY, 0.0f, -0.0f, 65504.0f);
    IrAttrs z = {.x = &ir_no_attrs_x};
    test_x(&z)->exponent_bits = 8;
    test_x(&z)->mantissa_bits = 0;
    /* mantissa_bits=0: a NaN stays that NaN, sign and payload (JAX's
     * jit gives 0xffc12345 back for 0xffc12345, where rounding alone
     * would make it -inf), as it does for any other mantissa_bits. */
    uint32_t nan_bits[] = {0xffc12345u, 0x7f800001u};
    float n[] = {0, 0, 1.75f};
    memcpy(n, nan_bits, sizeof nan_bits);
    DevValue *o3[1] = {vec(IR_F32, 3, n)};
    DevValue *rn = run_ok(OP_REDUCE_PRECISION, IR_F32, &z, 1, o3);
    assert_memory_equal(rn->data, nan_bits, sizeof nan_bits);
    assert_true(((float *)rn->data)[2] == 2.0f);
    dev_value_unref(rn);
    double dd[] = {1.0 + 0x1p-30};
    IrAttrs f = {.x = &ir_no_attrs_x};
    test_x(&f)->exponent_bits = 8;
    test_x(&f)->mantissa_bits = 23;
    DevValue *o4[1] = {vec(IR_F64, 1, dd)};
    DevValue *r = run_ok(OP_REDUCE_PRECISION, IR_F64, &f, 1, o4);
    assert_true(((double *)r->data)[0] == 1.0);
    dev_value_unref(r);
}

/* ---- narrow types and mulhi ---- */

/* mulhi at 64 bits, worked by hand: (2^63-1)^2 = 2^126 - 2^64 + 1, high
 * half 2^62 - 1; INT64_MIN^2 = 2^126, high half 2^62; INT64_MIN * 1 =
 * -2^63, high half -1 (the sign fill); (2^64-1)^2 = 2^128 - 2^65 + 1, high
 * half 2^64 - 2. */
static void test_mulhi_64(void **state)
{
    (void)state;
    int64_t a[3] = {INT64_MAX, INT64_MIN, INT64_MIN}, b[3] = {INT64_MAX, INT64_MIN, 1};
    DevValue *r = bin(OP_MULHI, IR_S64, 3, a, b);
    const int64_t *p = (const int64_t *)r->data;
    assert_true(p[0] == ((int64_t)1 << 62) - 1 && p[1] == (int64_t)1 << 62 && p[2] == -1);
    dev_value_unref(r);
    uint64_t c[2] = {UINT64_MAX, 0x100000000ull}, d[2] = {UINT64_MAX, 0x100000000ull};
    r = bin(OP_MULHI, IR_U64, 2, c, d);
    const uint64_t *q = (const uint64_t *)r->data;
    assert_true(q[0] == UINT64_MAX - 1 && q[1] == 1);
    dev_value_unref(r);
}

/* s4 wraps in 4 bits: 7 + 1 = -8, -8 * -1 = -8 (8 wraps), -8 / -1 = -8,
 * popcnt(-1) = 4 (0b1111), shift-right-logical(-8, 1) = 4 (0b1000 >> 1);
 * u4 clz(1) = 3, 0 - 1 = 15. Bytes stay canonical (sign-extended). */
static void test_subbyte_wrap(void **state)
{
    (void)state;
    int8_t a[3] = {7, -8, -8}, b[3] = {1, -1, -1};
    DevValue *r = bin(OP_ADD, IR_S4, 3, a, b);
    assert_int_equal(((int8_t *)r->data)[0], -8);
    dev_value_unref(r);
    r = bin(OP_MULTIPLY, IR_S4, 3, a, b);
    assert_int_equal(((int8_t *)r->data)[1], -8);
    dev_value_unref(r);
    r = bin(OP_DIVIDE, IR_S4, 3, a, b);
    assert_int_equal(((int8_t *)r->data)[2], -8);
    dev_value_unref(r);
    int8_t m1[1] = {-1}, m8[1] = {-8}, one[1] = {1};
    r = un(OP_POPCNT, IR_S4, IR_S4, 1, m1);
    assert_int_equal(((int8_t *)r->data)[0], 4);
    dev_value_unref(r);
    r = bin(OP_SHRL, IR_S4, 1, m8, one);
    assert_int_equal(((int8_t *)r->data)[0], 4);
    dev_value_unref(r);
    uint8_t u1[1] = {1}, u0[1] = {0};
    r = un(OP_CLZ, IR_U4, IR_U4, 1, u1);
    assert_int_equal(((uint8_t *)r->data)[0], 3);
    dev_value_unref(r);
    r = bin(OP_SUBTRACT, IR_U4, 1, u0, u1);
    assert_int_equal(((uint8_t *)r->data)[0], 15);
    dev_value_unref(r);
    /* float -> s4 saturates at -8..7; s32 -> u2 keeps the low 2 bits. */
    float f[3] = {7.9f, -100.0f, NAN};
    r = un(OP_CONVERT, IR_F32, IR_S4, 3, f);
    assert_true(((int8_t *)r->data)[0] == 7 && ((int8_t *)r->data)[1] == -8 && ((int8_t *)r->data)[2] == 0);
    dev_value_unref(r);
    int32_t iv[2] = {6, -1};
    r = un(OP_CONVERT, IR_S32, IR_U2, 2, iv);
    assert_true(((uint8_t *)r->data)[0] == 2 && ((uint8_t *)r->data)[1] == 3);
    dev_value_unref(r);
}

/* bitcast-convert by bit width: u8 0xb4 -> u4[1,2] {4, 11} (low nibble
 * first); s4[2] {-1, 1} -> u8 0x1f; u4 15 -> s4 -1 (same width). */
static void test_bitcast_subbyte(void **state)
{
    (void)state;
    uint8_t b[1] = {0xb4};
    DevValue *o[1] = {vec(IR_U8, 1, b)};
    IrInstr ins = {.a.x = &ir_no_attrs_x, .op = OP_BITCAST_CONVERT, .name = "x"};
    int64_t dims2[2] = {1, 2}, dims1[1] = {1};
    ins.shape = (IrShape){.type = IR_U4, .rank = 2, .dims = dims2};
    DevExecOptions opt = {0};
    IrDiag d = {0};
    DevKernelArgs k = {mod, NULL, &ins, 1, o, &opt, &d};
    DevValue *r = NULL;
    assert_int_equal(dev_k_bitcast_convert(&k, &r), IR_OK);
    assert_true(r->data[0] == 4 && r->data[1] == 11);
    dev_value_unref(r);
    dev_value_unref(o[0]);
    int8_t s[2] = {-1, 1};
    o[0] = val(IR_S4, 2, dims2, s);
    ins.shape = (IrShape){.type = IR_U8, .rank = 1, .dims = dims1};
    assert_int_equal(dev_k_bitcast_convert(&k, &r), IR_OK);
    assert_int_equal(r->data[0], 0x1f);
    dev_value_unref(r);
    dev_value_unref(o[0]);
    uint8_t f15[1] = {15};
    o[0] = vec(IR_U4, 1, f15);
    r = run_ok(OP_BITCAST_CONVERT, IR_S4, NULL, 1, o);
    assert_int_equal((int8_t)r->data[0], -1);
    dev_value_unref(r);
    ir_diag_clear(&d);
}

/* abs of c64 is f32: |3+4i| = 5; asking for c64 is an error. */
static void test_complex_abs(void **state)
{
    (void)state;
    float z[2] = {3, 4};
    DevValue *r = un(OP_ABS, IR_C64, IR_F32, 1, z);
    assert_true(((float *)r->data)[0] == 5);
    dev_value_unref(r);
    DevValue *o[1] = {vec(IR_C64, 1, z)};
    IrDiag d = {0};
    assert_int_equal(run(OP_ABS, IR_C64, NULL, 1, o, &r, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "abs of c64 returns f32"));
    ir_diag_clear(&d);
}

/* convert between narrow types, worked by hand. f8e4m3fn 0x3c is 1.5
 * (0 0111 100: 2^0 * 1.5): to s4 1 (toward zero), to f4e2m1fn 0x3 (0 01 1),
 * to f8e5m2 0x3e (0 01111 10), to bf16 0x3fc0, to c64 (1.5, 0). s4 -8 to
 * f8e4m3fn 0xd0 (1 1010 000), to u4 8 (wraps), to f4e2m1fn 0xf (-6: it
 * saturates). f4 0x7 (6 = 1.5 * 2^2) to f8e8m0fnu rounds to 2^3: 0x82. */
static void test_convert_narrow_pairs(void **state)
{
    (void)state;
    uint8_t c[1] = {0x3c};
    struct { IrType t; uint32_t want; } to[] = {
        {IR_S4, 1}, {IR_F4E2M1FN, 0x3}, {IR_F8E5M2, 0x3e}, {IR_BF16, 0x3fc0},
    };
    for (size_t i = 0; i < sizeof to / sizeof *to; i++) {
        DevValue *r = un(OP_CONVERT, IR_F8E4M3FN, to[i].t, 1, c);
        uint32_t got = to[i].t == IR_BF16 ? ((uint16_t *)r->data)[0] : r->data[0];
        assert_int_equal(got, to[i].want);
        dev_value_unref(r);
    }
    DevValue *r = un(OP_CONVERT, IR_F8E4M3FN, IR_C64, 1, c);
    assert_true(((float *)r->data)[0] == 1.5f && ((float *)r->data)[1] == 0);
    dev_value_unref(r);
    int8_t m8[1] = {-8};
    r = un(OP_CONVERT, IR_S4, IR_F8E4M3FN, 1, m8);
    assert_int_equal(r->data[0], 0xd0);
    dev_value_unref(r);
    r = un(OP_CONVERT, IR_S4, IR_U4, 1, m8);
    assert_int_equal(r->data[0], 8);
    dev_value_unref(r);
    r = un(OP_CONVERT, IR_S4, IR_F4E2M1FN, 1, m8);
    assert_int_equal(r->data[0] & 0xf, 0xf);
    dev_value_unref(r);
    uint8_t six[1] = {0x7};
    r = un(OP_CONVERT, IR_F4E2M1FN, IR_F8E8M0FNU, 1, six);
    assert_int_equal(r->data[0], 0x82);
    dev_value_unref(r);
}

/* ---- bitcast-convert ---- */

static void test_bitcast_convert(void **state)
{
    (void)state;
    float one[] = {1.0f, -2.0f};
    DevValue *o[1] = {vec(IR_F32, 2, one)};
    DevValue *u = run_ok(OP_BITCAST_CONVERT, IR_U32, NULL, 1, o);
    assert_true(((uint32_t *)u->data)[0] == 0x3f800000u && ((uint32_t *)u->data)[1] == 0xc0000000u);
    dev_value_unref(u);
    /* Narrower: f32[2] -> u8[2,4], little-endian bytes of 1.0 = 00 00 80 3f. */
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_BITCAST_CONVERT;
    ins.name = "bc";
    int64_t d24[] = {2, 4};
    ins.shape = (IrShape){.type = IR_U8, .rank = 2, .dims = d24};
    DevValue *opnd[1] = {vec(IR_F32, 2, one)};
    DevExecOptions opt = {0};
    IrDiag d = {0};
    DevKernelArgs k = {mod, NULL, &ins, 1, opnd, &opt, &d};
    DevValue *b = NULL;
    assert_int_equal(dev_k_bitcast_convert(&k, &b), IR_OK);
    uint8_t want[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0};
    assert_memory_equal(b->data, want, 8);
    dev_value_unref(b);
    dev_value_unref(opnd[0]);
    /* Wider: u16[2,2] -> u32[2]. */
    uint16_t w[] = {1, 2, 3, 4};
    int64_t d22[] = {2, 2}, d2[] = {2};
    opnd[0] = val(IR_U16, 2, d22, w);
    ins.shape = (IrShape){.type = IR_U32, .rank = 1, .dims = d2};
    assert_int_equal(dev_k_bitcast_convert(&k, &b), IR_OK);
    assert_true(((uint32_t *)b->data)[0] == 0x00020001u && ((uint32_t *)b->data)[1] == 0x00040003u);
    dev_value_unref(b);
    /* Wrong minor dim: u16[2,3] cannot become u32[2]. */
    int64_t d23[] = {2, 3};
    dev_value_unref(opnd[0]);
    uint16_t w6[6] = {0};
    opnd[0] = val(IR_U16, 2, d23, w6);
    assert_int_equal(dev_k_bitcast_convert(&k, &b), IR_EINPUT);
    assert_non_null(strstr(d.msg, "cannot bitcast-convert u16[2,3] to u32[2]"));
    ir_diag_clear(&d);
    dev_value_unref(opnd[0]);
}

/* ---- map ---- */

/* Builds computation `name`(p0: f32[], p1: f32[]) whose root is
 * `op(p0, p1)`, or with `nested`, multiply(add(p0, p1), p0). */
static int32_t scalar_comp(const char *name, IrOpcode op, bool nested)
{
    int32_t ci = ir_add_computation(mod, name);
    IrComputation *c = mod->comp[ci];
    IrShape s = {.type = IR_F32};
    int32_t p[2];
    for (int i = 0; i < 2; i++) {
        IrInstr in = {.a.x = &ir_no_attrs_x};
        in.op = OP_PARAMETER;
        in.name = ir_unique_name(mod, "p");
        in.shape = s;
        in.a.parameter_number = i;
        p[i] = ir_add_instr(mod, c, &in);
    }
    int32_t r = ir_add_simple(mod, c, op, &s, 2, p, NULL);
    if (nested) {
        int32_t q[2] = {r, p[0]};
        r = ir_add_simple(mod, c, OP_MULTIPLY, &s, 2, q, NULL);
    }
    c->root = r;
    return ci;
}

static DevValue *map_run(int32_t comp, const float *a, const float *b, int64_t n, IrStatus *st,
                         IrDiag *d)
{
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_MAP;
    ins.name = "map";
    int32_t called[1] = {comp};
    ins.called = called;
    ins.ncalled = 1;
    ins.shape = (IrShape){.type = IR_F32, .rank = 1, .dims = &n};
    DevValue *opnd[2] = {vec(IR_F32, n, a), vec(IR_F32, n, b)};
    DevExecOptions opt = {0};
    DevKernelArgs k = {mod, NULL, &ins, 2, opnd, &opt, d};
    DevValue *out = NULL;
    *st = dev_k_map(&k, &out);
    dev_value_unref(opnd[0]);
    dev_value_unref(opnd[1]);
    return out;
}

static void test_map(void **state)
{
    (void)state;
    float a[] = {1, 2, 3}, b[] = {10, 20, 30};
    IrDiag d = {0};
    IrStatus st;
    int32_t sub = scalar_comp("sub", OP_SUBTRACT, false);
    DevValue *r = map_run(sub, a, b, 3, &st, &d); /* fast path: one op */
    assert_int_equal(st, IR_OK);
    CHECK_F32(r, -9, -18, -27);
    int32_t nested = scalar_comp("nested", OP_ADD, true);
    r = map_run(nested, a, b, 3, &st, &d); /* (a + b) * a per element through dev_call */
    assert_int_equal(st, IR_OK);
    CHECK_F32(r, 11, 44, 99);
    /* The fast path keeps operand order: swap the parameters. */
    int32_t ci = ir_add_computation(mod, "rsub");
    IrComputation *c = mod->comp[ci];
    IrShape s = {.type = IR_F32};
    int32_t p[2];
    for (int i = 0; i < 2; i++) {
        IrInstr in = {.a.x = &ir_no_attrs_x};
        in.op = OP_PARAMETER;
        in.name = ir_unique_name(mod, "q");
        in.shape = s;
        in.a.parameter_number = i;
        p[i] = ir_add_instr(mod, c, &in);
    }
    int32_t sw[2] = {p[1], p[0]};
    c->root = ir_add_simple(mod, c, OP_SUBTRACT, &s, 2, sw, NULL);
    r = map_run(ci, a, b, 3, &st, &d);
    assert_int_equal(st, IR_OK);
    CHECK_F32(r, 9, 18, 27);
    ir_diag_clear(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_divide_remainder),
        cmocka_unit_test(test_int_wrap),
        cmocka_unit_test(test_shifts),
        cmocka_unit_test(test_int_power_bits),
        cmocka_unit_test(test_pred_logic),
        cmocka_unit_test(test_float_nan_zero),
        cmocka_unit_test(test_float_math),
        cmocka_unit_test(test_half_arith),
        cmocka_unit_test(test_compare),
        cmocka_unit_test(test_select_clamp),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_complex_parts),
        cmocka_unit_test(test_reduce_precision),
        cmocka_unit_test(test_bitcast_convert),
        cmocka_unit_test(test_mulhi_64),
        cmocka_unit_test(test_subbyte_wrap),
        cmocka_unit_test(test_bitcast_subbyte),
        cmocka_unit_test(test_complex_abs),
        cmocka_unit_test(test_convert_narrow_pairs),
        cmocka_unit_test(test_map),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
