/*
 * rules_elementwise.c: the gradients of elementwise ops. For y = f(x) the
 * adjoint of x is g * f'(x) (g the adjoint of y); for y = f(x1, x2) each
 * operand gets g * df/dxk. Each case below writes f' in terms of x and of
 * y (the forward value, reused rather than recomputed where that is
 * cheaper: exp' = exp = y).
 *
 * Ties of maximum and minimum: at x1 == x2 the function has no derivative;
 * the rule splits g in halves between the operands (the mean of the two
 * one-sided derivatives, as JAX does), and reduce max/min split it evenly
 * between all the tied elements (rules_reduce.c). Select, clamp and the
 * masks made with compare route g to the operand that was chosen; the
 * predicate itself has no gradient.
 *
 * A zero adjoint contributes zero, even through an infinite derivative
 * factor (adj_mul): reverse mode meets the expansions JAX lowers its
 * primitives to (logistic as 1 / (1 + e^-x), erf_inv's select of x * inf,
 * xlogy's where), whose branches a select throws away can be infinite
 * (e^100 in sigmoid(-100)) and whose adjoint there is a select's zero. JAX
 * differentiates the primitive and gets a finite gradient; the chain rule
 * on the expansion gets 0 * inf = NaN, and the NaN reaches every element
 * it is summed into. So a product g * f where g == 0 and f is infinite is
 * g. A NaN factor still gives NaN (a NaN forward value propagates, as in
 * JAX). What this changes beyond JAX's answer: a select written around a
 * singular branch in user code, where(x > 0, sqrt(x), 0) at 0, is 0 here
 * and NaN in JAX (its documented "where" pitfall).
 *
 * abs at 0: g, as JAX's rule select(x >= 0, g, -g) (-0 included), except
 * in logaddexp's expansion, max(a, b) + log1p(e^-|a - b|) (jnp.logaddexp
 * is a custom_jvp function lowered inline): there |a - b| at a == b takes
 * 0, the mean of its one-sided derivatives, which with the tie's halves of
 * max gives JAX's rule, e^(a - out) = 1/2 each (abs_in_logaddexp).
 */
#include "grad.h"

#include <math.h>
#include <string.h>

/* g * v, with v broadcast when it is a scalar constant. */
static int32_t mul(GB *b, int32_t g, int32_t v)
{
    return gb_bin(b, OP_MULTIPLY, g, v);
}

/* Whether v is a constant, or a broadcast of one, all of whose elements
 * are finite: a factor that needs no guard. */
static bool finite_constant(GB *b, int32_t v)
{
    const IrInstr *in = &b->c->instr[v];
    if (in->op == OP_BROADCAST && in->nopnd == 1)
        in = &b->c->instr[in->opnd[0]];
    if (in->op != OP_CONSTANT || !in->a.literal || !ir_type_is_float(in->shape.type))
        return false;
    int64_t n = ir_shape_elements(&in->shape);
    for (int64_t k = 0; k < n; k++) {
        double x;
        if (in->shape.type == IR_F32) {
            float f;
            memcpy(&f, in->a.literal + 4 * k, 4);
            x = f;
        } else if (in->shape.type == IR_F64) {
            memcpy(&x, in->a.literal + 8 * k, 8);
        } else {
            return false;   /* bf16, f16, f8: guarded, rather than decoded here */
        }
        if (!isfinite(x))
            return false;
    }
    return true;
}

/* Whether v can be infinite while the entry's parameters are finite: only
 * then does a product with it need the guard (adj_mul). A constant with an
 * infinity, or an op that overflows or divides (exp, divide, power, log,
 * rsqrt, sinh, cosh, tan, ...), can; tanh, the logistic, sine, cosine,
 * sign, compares, parameters, dots and reductions of finite values are
 * taken as finite (a sum that overflows is not what the guard is for);
 * data movement and +, -, *, max, min, select follow their operands, to
 * `depth` levels (past that: can). */
static bool may_be_infinite(GB *b, int32_t v, int depth)
{
    const IrInstr *in = &b->c->instr[v];
    switch (in->op) {
    case OP_CONSTANT: return !finite_constant(b, v);
    case OP_PARAMETER: case OP_IOTA: case OP_TANH: case OP_LOGISTIC: case OP_SINE: case OP_COSINE:
    case OP_SIGN: case OP_ERF: case OP_ATAN: case OP_COMPARE: case OP_DOT: case OP_REDUCE:
        return false;
    case OP_BROADCAST: case OP_RESHAPE: case OP_TRANSPOSE: case OP_CONVERT: case OP_COPY: case OP_NEGATE:
    case OP_ABS: case OP_SLICE: case OP_CONCATENATE: case OP_SELECT: case OP_ADD: case OP_SUBTRACT:
    case OP_MULTIPLY: case OP_MAXIMUM: case OP_MINIMUM: case OP_CLAMP: case OP_FLOOR: case OP_CEIL:
    case OP_ROUND_AFZ: case OP_ROUND_EVEN:
        if (depth <= 0)
            return true;
        for (int32_t k = in->op == OP_SELECT ? 1 : 0; k < in->nopnd; k++)
            if (may_be_infinite(b, in->opnd[k], depth - 1))
                return true;
        return false;
    default:
        return true;
    }
}

/* c (an adjoint contribution made from g), except g itself where g is zero
 * and `inf_when` holds: the file's header, "a zero adjoint contributes
 * zero". */
static int32_t zero_absorbs(GB *b, int32_t g, int32_t inf_when, int32_t c)
{
    int32_t gz = gb_cmp(b, g, gb_full_like(b, g, 0), CMP_EQ);
    return gb_select(b, gb_bin(b, OP_AND, gz, inf_when), g, c);
}

/* |v| == inf, elementwise. */
static int32_t is_inf(GB *b, int32_t v)
{
    return gb_cmp(b, gb_un(b, OP_ABS, v), gb_full_like(b, v, INFINITY), CMP_EQ);
}

/* g * f, where g == 0 gives g even when f is infinite (the header); no
 * guard where f cannot be (may_be_infinite). */
static int32_t adj_mul(GB *b, int32_t g, int32_t f)
{
    if (f < 0 || g < 0)
        return -1;
    int32_t c = mul(b, g, f);
    return may_be_infinite(b, f, 8) ? zero_absorbs(b, g, is_inf(b, f), c) : c;
}

/* Whether abs(x) is logaddexp's |a - b|: x = subtract(a, b) and the
 * computation takes maximum(a, b) (either order) too. */
static bool abs_in_logaddexp(GB *b, int32_t x)
{
    const IrInstr *sub = &b->c->instr[x];
    if (sub->op != OP_SUBTRACT)
        return false;
    int32_t a = sub->opnd[0], c = sub->opnd[1];
    for (int32_t k = 0; k < b->c->ninstr; k++) {
        const IrInstr *in = &b->c->instr[k];
        if (in->op == OP_MAXIMUM && ((in->opnd[0] == a && in->opnd[1] == c) || (in->opnd[0] == c && in->opnd[1] == a)))
            return true;
    }
    return false;
}

/* The derivative factor of unary op `op` at x (y = op(x)), or -2 when the
 * op has no rule (shared with forward mode, forward.c). */
int32_t grad_unary_factor(GB *b, IrOpcode op, int32_t x, int32_t y)
{
    switch (op) {
    case OP_EXP: return y;                                                  /* e^x */
    case OP_EXPM1: return gb_bin(b, OP_ADD, y, gb_full_like(b, y, 1));      /* e^x = y + 1 */
    case OP_LOG: return gb_bin(b, OP_DIVIDE, gb_full_like(b, x, 1), x);     /* 1/x */
    case OP_LOG1P:                                                          /* 1/(1+x) */
        return gb_bin(b, OP_DIVIDE, gb_full_like(b, x, 1), gb_bin(b, OP_ADD, x, gb_full_like(b, x, 1)));
    case OP_SQRT: return gb_bin(b, OP_DIVIDE, gb_full_like(b, y, 0.5), y);  /* 1/(2 sqrt x) */
    case OP_RSQRT:                                                          /* -x^-3/2 / 2 = -y/(2x) */
        return gb_bin(b, OP_DIVIDE, gb_scale(b, y, -0.5), x);
    case OP_CBRT:                                                           /* x^-2/3 / 3 = y/(3x) */
        return gb_bin(b, OP_DIVIDE, y, gb_scale(b, x, 3));
    case OP_TANH:                                                           /* 1 - y^2 */
        return gb_bin(b, OP_SUBTRACT, gb_full_like(b, y, 1), gb_bin(b, OP_MULTIPLY, y, y));
    case OP_LOGISTIC:                                                       /* y (1 - y) */
        return gb_bin(b, OP_MULTIPLY, y, gb_bin(b, OP_SUBTRACT, gb_full_like(b, y, 1), y));
    case OP_SINE: return gb_un(b, OP_COSINE, x);
    case OP_COSINE: return gb_un(b, OP_NEGATE, gb_un(b, OP_SINE, x));
    case OP_TAN:                                                            /* 1 + y^2 */
        return gb_bin(b, OP_ADD, gb_full_like(b, y, 1), gb_bin(b, OP_MULTIPLY, y, y));
    case OP_ABS:                                                            /* 1 at +-0, as JAX */
        if (abs_in_logaddexp(b, x))
            return gb_un(b, OP_SIGN, x);
        return gb_select(b, gb_cmp(b, x, gb_full_like(b, x, 0), CMP_GE), gb_full_like(b, x, 1),
                         gb_full_like(b, x, -1));
    case OP_ERF:                                                            /* 2/sqrt(pi) e^-x^2 */
        return gb_scale(b, gb_un(b, OP_EXP, gb_un(b, OP_NEGATE, gb_bin(b, OP_MULTIPLY, x, x))),
                        1.1283791670955126 /* 2/sqrt(pi) */);
    case OP_ATAN:                                                           /* 1/(1+x^2) */
        return gb_bin(b, OP_DIVIDE, gb_full_like(b, x, 1),
                      gb_bin(b, OP_ADD, gb_full_like(b, x, 1), gb_bin(b, OP_MULTIPLY, x, x)));
    case OP_SINH: return gb_un(b, OP_COSH, x);
    case OP_COSH: return gb_un(b, OP_SINH, x);
    case OP_ASIN: case OP_ACOS: {                                           /* +-1/sqrt(1-x^2) */
        int32_t f = gb_un(b, OP_RSQRT, gb_bin(b, OP_SUBTRACT, gb_full_like(b, x, 1), gb_bin(b, OP_MULTIPLY, x, x)));
        return op == OP_ACOS ? gb_un(b, OP_NEGATE, f) : f;
    }
    case OP_ASINH:                                                          /* 1/sqrt(x^2+1) */
        return gb_un(b, OP_RSQRT, gb_bin(b, OP_ADD, gb_bin(b, OP_MULTIPLY, x, x), gb_full_like(b, x, 1)));
    case OP_ACOSH:                                                          /* 1/sqrt(x^2-1) */
        return gb_un(b, OP_RSQRT, gb_bin(b, OP_SUBTRACT, gb_bin(b, OP_MULTIPLY, x, x), gb_full_like(b, x, 1)));
    case OP_ATANH:                                                          /* 1/(1-x^2) */
        return gb_bin(b, OP_DIVIDE, gb_full_like(b, x, 1),
                      gb_bin(b, OP_SUBTRACT, gb_full_like(b, x, 1), gb_bin(b, OP_MULTIPLY, x, x)));
    default: return -2;
    }
}

/* 1 where p, 0.5 where t (a tie), else 0: the share of g of an operand of
 * maximum/minimum (p: it won strictly; t: it tied). */
int32_t grad_tie_share(GB *b, int32_t p, int32_t t, int32_t like)
{
    int32_t one = gb_full_like(b, like, 1), half = gb_full_like(b, like, 0.5), zero = gb_full_like(b, like, 0);
    return gb_select(b, p, one, gb_select(b, t, half, zero));
}

/* clamp(lo, x, hi) = min(max(x, lo), hi), XLA's order of operands. The
 * shares are JAX's clamp rule, strict on every side: x gets g where
 * lo < x < hi, lo where x < lo < hi, hi where hi < x. At a tie (x == lo or
 * x == hi) no operand gets it: lax.clamp's gradient at its bounds is 0, not
 * split as maximum/minimum's (jnp.clip, written with those, splits). When
 * lo > hi the result is hi (XLA's min of the max), so lo never gets g then.
 * A scalar bound gets the sum of its share. grad_clamp_masks is shared with
 * the forward rule (forward.c) so both modes route alike. */
void grad_clamp_masks(GB *b, int32_t lob, int32_t x, int32_t hib, int32_t mask[3])
{
    mask[0] = gb_bin(b, OP_AND, gb_cmp(b, lob, x, CMP_GT), gb_cmp(b, lob, hib, CMP_LT));
    mask[1] = gb_bin(b, OP_AND, gb_cmp(b, x, lob, CMP_GT), gb_cmp(b, x, hib, CMP_LT));
    mask[2] = gb_cmp(b, hib, x, CMP_LT);
}

static IrStatus rule_clamp(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t lo = ins->opnd[0], x = ins->opnd[1], hi = ins->opnd[2];
    int32_t lob = gb_shape(b, lo)->rank == 0 ? gb_bcast_like(b, lo, x) : lo;
    int32_t hib = gb_shape(b, hi)->rank == 0 ? gb_bcast_like(b, hi, x) : hi;
    int32_t zero = gb_full_like(b, x, 0), mask[3];
    grad_clamp_masks(b, lob, x, hib, mask);
    int32_t glo = gb_select(b, mask[0], g, zero);
    int32_t gx = gb_select(b, mask[1], g, zero);
    int32_t ghi = gb_select(b, mask[2], g, zero);
    if (rev_on(r, x))
        rev_acc(r, x, 0, gx);
    if (rev_on(r, lo))
        rev_acc(r, lo, 0, gb_shape(b, lo)->rank == 0 && gb_shape(b, x)->rank > 0 ? gb_sum_all(b, glo) : glo);
    if (rev_on(r, hi))
        rev_acc(r, hi, 0, gb_shape(b, hi)->rank == 0 && gb_shape(b, x)->rank > 0 ? gb_sum_all(b, ghi) : ghi);
    (void)i;
    return r->g->d->status;
}

static IrStatus rule_binary(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0], y = ins->opnd[1];
    int32_t gx = -2, gy = -2;
    bool wx = rev_on(r, x), wy = rev_on(r, y);
    switch (ins->op) {
    case OP_ADD: gx = g; gy = g; break;
    case OP_SUBTRACT: gx = g; gy = wy ? gb_un(b, OP_NEGATE, g) : -1; break;
    case OP_MULTIPLY:                                  /* d(xy) = y dx + x dy */
        if (x == y && wx) /* d(x^2) = 2 x dx, one term */
            return rev_acc(r, x, 0, adj_mul(b, gb_scale(b, g, 2), x));
        gx = wx ? adj_mul(b, g, y) : -1;
        gy = wy ? adj_mul(b, g, x) : -1;
        break;
    case OP_DIVIDE:                                    /* d(x/y) = dx/y - (x/y) dy/y */
        gx = wx ? (finite_constant(b, y) ? gb_bin(b, OP_DIVIDE, g, y)
                   : zero_absorbs(b, g, gb_cmp(b, y, gb_full_like(b, y, 0), CMP_EQ), gb_bin(b, OP_DIVIDE, g, y)))
                : -1;
        gy = wy ? zero_absorbs(b, g, gb_bin(b, OP_OR, is_inf(b, i), gb_cmp(b, y, gb_full_like(b, y, 0), CMP_EQ)),
                               gb_un(b, OP_NEGATE, gb_bin(b, OP_DIVIDE, mul(b, g, i), y)))
                : -1;
        break;
    case OP_REMAINDER:                                 /* x - trunc(x/y) y; trunc(x/y) = (x - r)/y */
        gx = g;
        gy = wy ? gb_un(b, OP_NEGATE, adj_mul(b, g, gb_bin(b, OP_DIVIDE, gb_bin(b, OP_SUBTRACT, x, i), y))) : -1;
        break;
    case OP_POWER:                                     /* d x^y = y x^(y-1) dx + x^y ln x dy */
        gx = wx ? adj_mul(b, g, mul(b, y, gb_bin(b, OP_POWER, x, gb_bin(b, OP_SUBTRACT, y, gb_full_like(b, y, 1)))))
                : -1;
        gy = wy ? adj_mul(b, g, mul(b, i, gb_un(b, OP_LOG, x))) : -1;
        break;
    case OP_ATAN2: {                                   /* atan2(x, y): dx y/(x^2+y^2), dy -x/(x^2+y^2) */
        int32_t den = gb_bin(b, OP_ADD, gb_bin(b, OP_MULTIPLY, x, x), gb_bin(b, OP_MULTIPLY, y, y));
        gx = wx ? gb_bin(b, OP_DIVIDE, mul(b, g, y), den) : -1;
        gy = wy ? gb_un(b, OP_NEGATE, gb_bin(b, OP_DIVIDE, mul(b, g, x), den)) : -1;
        break;
    }
    case OP_MAXIMUM: case OP_MINIMUM: {
        IrCmpDir win = ins->op == OP_MAXIMUM ? CMP_GT : CMP_LT;
        int32_t tie = gb_cmp(b, x, y, CMP_EQ);
        gx = wx ? mul(b, g, grad_tie_share(b, gb_cmp(b, x, y, win), tie, x)) : -1;
        gy = wy ? mul(b, g, grad_tie_share(b, gb_cmp(b, y, x, win), tie, y)) : -1;
        break;
    }
    default: return rev_no_rule(r, i, NULL);
    }
    if (wx)
        rev_acc(r, x, 0, gx);
    if (wy)
        rev_acc(r, y, 0, gy);
    return r->g->d->status;
}

IrStatus rev_elementwise(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    int32_t g = rev_leaf(r, i, 0);
    if (g < 0)
        return IR_OK;
    switch (ins->op) {
    case OP_COPY: case OP_NEGATE: case OP_REDUCE_PRECISION: case OP_CUSTOM_CALL: /* an annotation (ir_annotation_target) */
        return rev_acc(r, ins->opnd[0], 0, ins->op == OP_NEGATE ? gb_un(b, OP_NEGATE, g) : g);
    case OP_CONVERT:
        /* The gradient of a change of precision is the change back
         * (rev_acc converts to the operand's type); integers stop it. */
        return rev_acc(r, ins->opnd[0], 0, g);
    case OP_SELECT: {
        int32_t p = ins->opnd[0];
        int32_t zero = gb_full_like(b, g, 0);
        if (gb_shape(b, p)->rank == 0 && gb_shape(b, g)->rank > 0)
            p = gb_bcast_like(b, p, g);
        if (rev_on(r, ins->opnd[1]))
            rev_acc(r, ins->opnd[1], 0, gb_select(b, p, g, zero));
        if (rev_on(r, ins->opnd[2]))
            rev_acc(r, ins->opnd[2], 0, gb_select(b, p, zero, g));
        return r->g->d->status;
    }
    case OP_CLAMP: return rule_clamp(r, i, ins, g);
    default: break;
    }
    if (ins->nopnd == 2)
        return rule_binary(r, i, ins, g);
    if (ins->nopnd != 1)
        return rev_no_rule(r, i, NULL);
    int32_t f = grad_unary_factor(b, ins->op, ins->opnd[0], i);
    if (f == -2)
        return rev_no_rule(r, i, NULL);
    switch (ins->op) {
    case OP_TANH: case OP_LOGISTIC: case OP_SINE: case OP_COSINE: case OP_ABS: case OP_ERF: case OP_ATAN:
    case OP_ASINH:   /* factors bounded where x is finite: no guard */
        return rev_acc(r, ins->opnd[0], 0, mul(b, g, f));
    default:
        return rev_acc(r, ins->opnd[0], 0, adj_mul(b, g, f));
    }
}
