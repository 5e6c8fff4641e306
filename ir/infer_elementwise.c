/*
 * infer_elementwise.c: shape rules of the elementwise ops: unary ops (with
 * convert and reduce-precision), bitcast-convert, stochastic-convert, binary
 * ops (with compare and complex), select and clamp. The result has the
 * operands' dimensions; the rules check the element types XLA accepts.
 */
#include "infer_internal.h"

#include <string.h>

/* Operand type classes accepted by unary ops, as in XLA. */
static IrStatus unary_type_ok(Ctx *x, IrType t)
{
    bool ok;
    const char *want;
    switch (x->ins->op) {
    case OP_ABS: case OP_SIGN:
        ok = ir_type_is_signed_int(t) || ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a signed integer, floating-point or complex";
        break;
    case OP_NEGATE:
        ok = ir_type_is_int(t) || ir_type_is_float(t) || ir_type_is_complex(t);
        want = "an integer, floating-point or complex";
        break;
    case OP_FLOOR: case OP_CEIL: case OP_ROUND_AFZ: case OP_ROUND_EVEN: case OP_IS_FINITE:
    case OP_ERF: case OP_REDUCE_PRECISION:
        ok = ir_type_is_float(t);
        want = "a floating-point";
        break;
    case OP_EXP: case OP_EXPM1: case OP_LOG: case OP_LOG1P: case OP_LOGISTIC: case OP_SQRT:
    case OP_RSQRT: case OP_CBRT: case OP_TANH: case OP_SINE: case OP_COSINE: case OP_TAN:
    case OP_ACOS: case OP_ACOSH: case OP_ASIN: case OP_ASINH: case OP_ATAN: case OP_ATANH:
    case OP_COSH: case OP_SINH:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a floating-point or complex";
        break;
    case OP_POPCNT: case OP_CLZ:
        ok = ir_type_is_int(t);
        want = "an integer";
        break;
    case OP_NOT:
        ok = ir_type_is_int(t) || t == IR_PRED;
        want = "a pred or integer";
        break;
    case OP_REAL: case OP_IMAG:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a complex or floating-point";
        break;
    default:
        ok = true;
        want = "";
        break;
    }
    if (!ok)
        return infer_fail(x, "operand must have %s element type, got %s", want, ir_type_name(t));
    return IR_OK;
}

IrStatus infer_unary(Ctx *x, IrShape *out)
{
    const IrShape *s = infer_opnd(x, 0);
    IrOpcode op = x->ins->op;
    if (op == OP_COPY)
        return infer_copy_shape(x, out, s); /* copy also takes tuples */
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK || (st = unary_type_ok(x, s->type)) != IR_OK)
        return st;
    IrType t = s->type;
    switch (op) {
    case OP_ABS: case OP_REAL: case OP_IMAG:
        t = infer_component_type(t);
        break;
    case OP_IS_FINITE:
        t = IR_PRED;
        break;
    case OP_CONVERT:
        t = x->ins->shape.type;
        if (!ir_type_is_array(t))
            return infer_fail(x, "result must be an array type, got %s", infer_sstr(x, &x->ins->shape));
        if (ir_type_is_complex(s->type) && !ir_type_is_complex(t))
            return infer_fail(x, "cannot convert complex %s to non-complex %s (use real or imag)",
                        ir_type_name(s->type), ir_type_name(t));
        break;
    case OP_REDUCE_PRECISION:
        if (x->ins->a.x->exponent_bits < 1 || x->ins->a.x->mantissa_bits < 0)
            return infer_fail(x, "needs exponent_bits >= 1 and mantissa_bits >= 0, got %lld and %lld",
                        (long long)x->ins->a.x->exponent_bits, (long long)x->ins->a.x->mantissa_bits);
        break;
    default:
        break;
    }
    return infer_make_array(x, out, t, s->rank, s->dims);
}

/* bitcast-convert: same bit width keeps the dimensions; to a narrower type
 * adds a minor dimension of in_bits/out_bits (s32[4] -> s8[4,4]); to a wider
 * type removes a minor dimension that must be out_bits/in_bits
 * (u8[4,2] -> u16[4]). */
IrStatus infer_bitcast_convert(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    IrType t = x->ins->shape.type;
    if (!ir_type_is_array(t))
        return infer_fail(x, "result must be an array type, got %s", infer_sstr(x, &x->ins->shape));
    if (s->type == IR_PRED || t == IR_PRED)
        return infer_fail(x, "cannot bitcast from or to pred");
    int ib = ir_type_bits(s->type), ob = ir_type_bits(t);
    if (ib == ob)
        return infer_make_array(x, out, t, s->rank, s->dims);
    if (ib > ob) {
        int64_t *dims = infer_scratch(x, s->rank + 1);
        if (!dims)
            return infer_oom(x);
        if (s->rank > 0)
            memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
        dims[s->rank] = ib / ob;
        return infer_make_array(x, out, t, s->rank + 1, dims);
    }
    if (s->rank == 0 || s->dims[s->rank - 1] != ob / ib)
        return infer_fail(x, "converting %s to the wider %s needs a minor dimension of size %d, got %s",
                    ir_type_name(s->type), ir_type_name(t), ob / ib, infer_sstr(x, s));
    return infer_make_array(x, out, t, s->rank - 1, s->dims);
}

/* stochastic-convert(operand, random): random is unsigned, of the
 * operand's dimensions and bit width; the result has the declared
 * (narrower) type and the operand's dimensions. */
IrStatus infer_stochastic_convert(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK || (st = infer_expect_array(x, 1, "random")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *r = infer_opnd(x, 1), *o = &x->ins->shape;
    if (!ir_type_is_float(s->type))
        return infer_fail(x, "operand must be floating-point, got %s", infer_sstr(x, s));
    if (!ir_type_is_unsigned_int(r->type) || ir_type_bits(r->type) != ir_type_bits(s->type) ||
        !infer_same_dims(s, r))
        return infer_fail(x, "random must be u%d with the operand's dimensions, got %s",
                    ir_type_bits(s->type), infer_sstr(x, r));
    if (!infer_is_array(o))
        return infer_fail(x, "result must be an array, got %s", infer_sstr(x, o));
    return infer_make_array(x, out, o->type, s->rank, s->dims);
}

static IrStatus binary_type_ok(Ctx *x, IrType t)
{
    bool ok = true;
    const char *want = "";
    switch (x->ins->op) {
    case OP_AND: case OP_OR: case OP_XOR:
        ok = t == IR_PRED || ir_type_is_int(t);
        want = "a pred or integer";
        break;
    case OP_SHL: case OP_SHRA: case OP_SHRL: case OP_MULHI:
        ok = ir_type_is_int(t);
        want = "an integer";
        break;
    case OP_ATAN2:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a floating-point or complex";
        break;
    case OP_COMPLEX:
        ok = t == IR_F32 || t == IR_F64;
        want = "an f32 or f64";
        break;
    default:
        break;
    }
    if (!ok)
        return infer_fail(x, "operands must have %s element type, got %s", want, ir_type_name(t));
    return IR_OK;
}

static IrStatus check_compare(Ctx *x, IrType t)
{
    const IrAttrs *at = &x->ins->a;
    if (at->direction == CMP_NONE)
        return infer_fail(x, "needs a direction= attribute (EQ, NE, LT, LE, GT or GE)");
    bool ok = true;
    switch (at->cmp_type) {
    case CMPT_FLOAT: case CMPT_TOTALORDER:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        break;
    case CMPT_SIGNED:
        ok = ir_type_is_signed_int(t);
        break;
    case CMPT_UNSIGNED:
        ok = ir_type_is_unsigned_int(t) || t == IR_PRED;
        break;
    default:
        break;
    }
    if (!ok)
        return infer_fail(x, "comparison type does not fit element type %s", ir_type_name(t));
    return IR_OK;
}

IrStatus infer_binary(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "lhs")) != IR_OK || (st = infer_expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = infer_opnd(x, 0), *r = infer_opnd(x, 1);
    if (!infer_same_dims(l, r))
        return infer_fail(x, "operands must have the same dimensions, got %s and %s", infer_sstr(x, l),
                    infer_sstr(x, r));
    if (l->type != r->type)
        return infer_fail(x, "operands must have the same element type, got %s and %s",
                    ir_type_name(l->type), ir_type_name(r->type));
    if ((st = binary_type_ok(x, l->type)) != IR_OK)
        return st;
    IrType t = l->type;
    if (x->ins->op == OP_COMPARE) {
        if ((st = check_compare(x, t)) != IR_OK)
            return st;
        t = IR_PRED;
    } else if (x->ins->op == OP_COMPLEX) {
        t = t == IR_F32 ? IR_C64 : IR_C128;
    }
    return infer_make_array(x, out, t, l->rank, l->dims);
}

IrStatus infer_select(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 3; i++)
        if ((st = infer_expect_array(x, i, i == 0 ? "predicate" : i == 1 ? "on_true" : "on_false")) != IR_OK)
            return st;
    const IrShape *p = infer_opnd(x, 0), *t = infer_opnd(x, 1), *f = infer_opnd(x, 2);
    if (p->type != IR_PRED)
        return infer_fail(x, "predicate must be pred, got %s", infer_sstr(x, p));
    if (!ir_shape_equal(t, f))
        return infer_fail(x, "on_true and on_false must have the same shape, got %s and %s", infer_sstr(x, t),
                    infer_sstr(x, f));
    if (!infer_same_dims(p, t))
        return infer_fail(x, "predicate %s must have the dimensions of on_true %s", infer_sstr(x, p),
                    infer_sstr(x, t));
    return infer_copy_shape(x, out, t);
}

IrStatus infer_clamp(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 3; i++)
        if ((st = infer_expect_array(x, i, i == 0 ? "min" : i == 1 ? "operand" : "max")) != IR_OK)
            return st;
    const IrShape *v = infer_opnd(x, 1);
    for (int32_t i = 0; i < 3; i += 2) {
        const IrShape *b = infer_opnd(x, i);
        if (b->type != v->type || (b->rank != 0 && !infer_same_dims(b, v)))
            return infer_fail(x, "%s %s must be a %s scalar or have the operand's shape %s",
                        i == 0 ? "min" : "max", infer_sstr(x, b), ir_type_name(v->type), infer_sstr(x, v));
    }
    return infer_copy_shape(x, out, v);
}
