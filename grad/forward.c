/*
 * forward.c: forward mode (`tessel grad --jvp`, JAX's jvp). For a
 * computation whose forward part is instructions [0, n0), it appends the
 * tangents: walking the forward instructions in topological order, every
 * instruction with a tangent on some operand gets the tangent of its result
 * from its family's rule, t_y = sum_k (dy/dx_k) t_k, the directional
 * derivative of y along the operands' tangents. As in reverse mode
 * (reverse.c) tangents are kept per leaf (-1 meaning zero), so nothing is
 * materialised until a rule needs it, and integer, pred, iota, rng results
 * carry none (the rule is never asked).
 *
 * The rules, each derived where it is written:
 *   linear ops (broadcast, reshape, transpose, slice, pad, concatenate,
 *       reverse, dynamic-slice, dynamic-update-slice, gather, scatter that
 *       adds or overwrites, reduce add, reduce-window add, select-and-scatter
 *       in its source): the same op applied to the tangents of the data
 *       operands, index operands kept
 *   bilinear ops (dot, convolution, multiply): op(t_x, y) + op(x, t_y)
 *   elementwise: t * f'(x), with f' shared with reverse mode
 *   reduce max/min, reduce-window max/min: the tangent of the chosen
 *       element (ties of reduce share it evenly, as the reverse rule)
 *   sort: the tangents sorted along with the operands (extra operands the
 *       comparator ignores), so they follow the same permutation
 *   batch-norm-training: the derivative of (x - mean) rsqrt(var + eps) s + o
 *   call, conditional, while: a callee that returns (result, tangent) for
 *       (arguments, tangents): the loop's state becomes (S, tangent of S)
 */
#include "grad.h"

#include <stdio.h>
#include <string.h>

/* ---- the driver's helpers ---- */

static int32_t tan_leaf(const Fwd *f, int32_t x, int32_t leaf)
{
    if (x < 0 || x >= f->n0)
        return -1;
    return f->tan[f->base[x] + leaf];
}

/* The tangent of array instruction x, or -1 (zero). */
static int32_t tan_of(const Fwd *f, int32_t x)
{
    return tan_leaf(f, x, 0);
}

/* The tangent of array instruction x, zeros when it has none. */
static int32_t tan_z(Fwd *f, int32_t x)
{
    int32_t t = tan_of(f, x);
    if (t >= 0)
        return t;
    IrShape s = *gb_shape(&f->b, x);
    return gb_zeros(&f->b, &s);
}

static bool has_tan(const Fwd *f, int32_t x)
{
    if (x < 0 || x >= f->n0)
        return false;
    for (int32_t l = f->base[x]; l < f->base[x + 1]; l++)
        if (f->tan[l] >= 0)
            return true;
    return false;
}

/* Set the tangent of leaf `leaf` of instruction x to v (floating leaves only). */
static IrStatus set_leaf(Fwd *f, int32_t x, int32_t leaf, int32_t v)
{
    if (f->g->d->status != IR_OK)
        return f->g->d->status;
    if (v < 0)
        return gb_bug(f->g, "a tangent was not built");
    const IrShape *ls = ir_shape_leaf(&f->b.c->instr[x].shape, leaf);
    if (!ir_type_is_float(ls->type))
        return IR_OK;
    v = gb_convert(&f->b, v, ls->type);
    if (v >= 0 && !ir_shape_same_dims(gb_shape(&f->b, v), ls))
        return gb_bug(f->g, "the tangent of %s has the wrong shape", f->b.c->instr[x].name);
    f->tan[f->base[x] + leaf] = v;
    return f->g->d->status;
}

static IrStatus set_tan(Fwd *f, int32_t x, int32_t v)
{
    return set_leaf(f, x, 0, v);
}

/* Set the tangents of x's leaves from v, a value of x's shape. */
static void set_full_from(Fwd *f, int32_t x, int32_t v, const IrShape *s, int32_t *leaf)
{
    if (s->type != IR_TUPLE) {
        if (ir_type_is_float(s->type))
            set_leaf(f, x, *leaf, v);
        (*leaf)++;
        return;
    }
    for (int32_t k = 0; k < s->ntuple; k++)
        set_full_from(f, x, gb_gte(&f->b, v, k), &s->tuple[k], leaf);
}

static IrStatus set_full(Fwd *f, int32_t x, int32_t v)
{
    IrShape s = f->b.c->instr[x].shape;
    int32_t leaf = 0;
    set_full_from(f, x, v, &s, &leaf);
    return f->g->d->status;
}

static int32_t full_of(Fwd *f, int32_t x, const IrShape *s, int32_t *leaf)
{
    if (s->type != IR_TUPLE) {
        int32_t v = f->tan[f->base[x] + (*leaf)++];
        return v >= 0 ? v : gb_zeros(&f->b, s);
    }
    int32_t e[s->ntuple > 0 ? s->ntuple : 1];
    for (int32_t k = 0; k < s->ntuple; k++)
        e[k] = full_of(f, x, &s->tuple[k], leaf);
    return gb_tuple(&f->b, s->ntuple, e);
}

int32_t fwd_full(Fwd *f, int32_t x)
{
    IrShape s = f->b.c->instr[x].shape;
    int32_t leaf = 0;
    return full_of(f, x, &s, &leaf);
}

static IrStatus no_rule(Fwd *f, int32_t i, const char *why)
{
    const IrInstr *ins = &f->b.c->instr[i];
    IrModule *m = f->g->m;
    if (!why)
        why = grad_why_none(ins);
    return ir_error(f->g->d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                    "grad: no forward-mode (jvp) rule for %s (instruction %s)%s%s", ir_op_name(ins->op),
                    ins->name, why ? ": " : "", why ? why : "");
}

/* The op of instruction ins again, over operands o (same attributes,
 * callees and result shape). */
static int32_t same_op(Fwd *f, const IrInstr *ins, const int32_t *o)
{
    IrShape hint = ins->shape;
    return gb_emit(&f->b, ins->op, &hint, ins->nopnd, o, &ins->a, ins->ncalled, ins->called);
}

/* The op again with operand k replaced by its tangent (zeros when none)
 * for every k with data[k], the others kept: the tangent of an op linear
 * in its data operands. */
static int32_t linear(Fwd *f, const IrInstr *ins, const bool *data)
{
    int32_t o[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        o[k] = data[k] ? tan_z(f, ins->opnd[k]) : ins->opnd[k];
    return same_op(f, ins, o);
}

/* The tangent of a bilinear op(x, y): op(t_x, y) + op(x, t_y), a term
 * left out when its tangent is zero. */
static int32_t bilinear(Fwd *f, const IrInstr *ins)
{
    int32_t x = ins->opnd[0], y = ins->opnd[1], tx = tan_of(f, x), ty = tan_of(f, y);
    int32_t a = -1, b = -1;
    if (tx >= 0) {
        int32_t o[2] = {tx, y};
        a = same_op(f, ins, o);
    }
    if (ty >= 0) {
        int32_t o[2] = {x, ty};
        b = same_op(f, ins, o);
    }
    return a < 0 ? b : b < 0 ? a : gb_bin(&f->b, OP_ADD, a, b);
}

static int32_t add_opt(GB *b, int32_t x, int32_t y)
{
    return x < 0 ? y : y < 0 ? x : gb_bin(b, OP_ADD, x, y);
}

/* ---- elementwise ---- */

/* clamp(lo, x, hi) = min(max(x, lo), hi): the tangent of the operand the
 * reverse rule routes the adjoint to (grad_clamp_masks: JAX's clamp jvp,
 * strict, so 0 at a tie with a bound). */
static IrStatus fwd_clamp(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t lo = ins->opnd[0], x = ins->opnd[1], hi = ins->opnd[2];
    bool slo = gb_shape(b, lo)->rank == 0 && gb_shape(b, x)->rank > 0;
    bool shi = gb_shape(b, hi)->rank == 0 && gb_shape(b, x)->rank > 0;
    int32_t lob = slo ? gb_bcast_like(b, lo, x) : lo, hib = shi ? gb_bcast_like(b, hi, x) : hi;
    int32_t tlo = tan_z(f, lo), thi = tan_z(f, hi), tx = tan_z(f, x), mask[3];
    if (slo)
        tlo = gb_bcast_like(b, tlo, x);
    if (shi)
        thi = gb_bcast_like(b, thi, x);
    grad_clamp_masks(b, lob, x, hib, mask);
    int32_t zero = gb_full_like(b, tx, 0);
    return set_tan(f, i, gb_select(b, mask[2], thi, gb_select(b, mask[0], tlo, gb_select(b, mask[1], tx, zero))));
}

static IrStatus fwd_binary(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t x = ins->opnd[0], y = ins->opnd[1], tx = tan_of(f, x), ty = tan_of(f, y);
    int32_t t = -1;
    switch (ins->op) {
    case OP_ADD: t = add_opt(b, tx, ty); break;
    case OP_SUBTRACT: t = add_opt(b, tx, ty >= 0 ? gb_un(b, OP_NEGATE, ty) : -1); break;
    case OP_MULTIPLY: t = bilinear(f, ins); break;              /* y dx + x dy */
    case OP_DIVIDE:                                             /* dx/y - (x/y) dy/y */
        t = add_opt(b, tx >= 0 ? gb_bin(b, OP_DIVIDE, tx, y) : -1,
                    ty >= 0 ? gb_un(b, OP_NEGATE, gb_bin(b, OP_DIVIDE, gb_bin(b, OP_MULTIPLY, ty, i), y)) : -1);
        break;
    case OP_REMAINDER:                                          /* x - trunc(x/y) y, trunc(x/y) = (x - r)/y */
        t = add_opt(b, tx, ty >= 0 ? gb_un(b, OP_NEGATE, gb_bin(b, OP_MULTIPLY, ty,
                                                                gb_bin(b, OP_DIVIDE, gb_bin(b, OP_SUBTRACT, x, i), y)))
                                   : -1);
        break;
    case OP_POWER:                                              /* y x^(y-1) dx + x^y ln x dy */
        t = add_opt(b,
                    tx >= 0 ? gb_bin(b, OP_MULTIPLY, tx, gb_bin(b, OP_MULTIPLY, y,
                                     gb_bin(b, OP_POWER, x, gb_bin(b, OP_SUBTRACT, y, gb_full_like(b, y, 1)))))
                            : -1,
                    ty >= 0 ? gb_bin(b, OP_MULTIPLY, ty, gb_bin(b, OP_MULTIPLY, i, gb_un(b, OP_LOG, x))) : -1);
        break;
    case OP_ATAN2: {                                            /* (y dx - x dy) / (x^2 + y^2) */
        int32_t den = gb_bin(b, OP_ADD, gb_bin(b, OP_MULTIPLY, x, x), gb_bin(b, OP_MULTIPLY, y, y));
        int32_t num = add_opt(b, tx >= 0 ? gb_bin(b, OP_MULTIPLY, tx, y) : -1,
                              ty >= 0 ? gb_un(b, OP_NEGATE, gb_bin(b, OP_MULTIPLY, ty, x)) : -1);
        t = gb_bin(b, OP_DIVIDE, num, den);
        break;
    }
    case OP_MAXIMUM: case OP_MINIMUM: {                         /* the winner's; half each on a tie */
        IrCmpDir win = ins->op == OP_MAXIMUM ? CMP_GT : CMP_LT;
        int32_t tie = gb_cmp(b, x, y, CMP_EQ);
        t = add_opt(b, tx >= 0 ? gb_bin(b, OP_MULTIPLY, tx, grad_tie_share(b, gb_cmp(b, x, y, win), tie, x)) : -1,
                    ty >= 0 ? gb_bin(b, OP_MULTIPLY, ty, grad_tie_share(b, gb_cmp(b, y, x, win), tie, y)) : -1);
        break;
    }
    default: return no_rule(f, i, NULL);
    }
    return set_tan(f, i, t);
}

static IrStatus fwd_elementwise(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    if (!ir_type_is_float(ins->shape.type))
        return ir_type_is_complex(ins->shape.type) ? no_rule(f, i, "complex values are not differentiated")
                                                   : IR_OK;
    for (int32_t k = 0; k < ins->nopnd; k++)
        if (ir_type_is_complex(gb_shape(b, ins->opnd[k])->type))
            return no_rule(f, i, "complex values are not differentiated");
    switch (ins->op) {
    case OP_COPY: case OP_REDUCE_PRECISION: case OP_CONVERT:
        /* the identity (a change of precision is one to first order) */
        return set_tan(f, i, tan_of(f, ins->opnd[0]));
    case OP_NEGATE: return set_tan(f, i, gb_un(b, OP_NEGATE, tan_of(f, ins->opnd[0])));
    case OP_CUSTOM_CALL: { /* an annotation: the tangent is annotated the same way */
        bool d[1] = {true};
        return set_tan(f, i, linear(f, ins, d));
    }
    case OP_SELECT: {
        int32_t p = ins->opnd[0];
        if (gb_shape(b, p)->rank == 0 && ins->shape.rank > 0)
            p = gb_bcast_like(b, p, i);
        return set_tan(f, i, gb_select(b, p, tan_z(f, ins->opnd[1]), tan_z(f, ins->opnd[2])));
    }
    case OP_CLAMP: return fwd_clamp(f, i, ins);
    default: break;
    }
    if (ins->nopnd == 2)
        return fwd_binary(f, i, ins);
    if (ins->nopnd != 1)
        return no_rule(f, i, NULL);
    int32_t fac = grad_unary_factor(b, ins->op, ins->opnd[0], i);
    if (fac == -2)
        return no_rule(f, i, NULL);
    return set_tan(f, i, gb_bin(b, OP_MULTIPLY, tan_of(f, ins->opnd[0]), fac));
}

/* scatter by maximum or minimum: the shares of grad_scatter_extremal
 * (JAX's rule), t_y = t_x * share + the updates' tangents times theirs,
 * scattered by add. */
static IrStatus fwd_scatter_extremal(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t part[2];
    grad_scatter_extremal(b, ins, i, part);
    int32_t t = gb_bin(b, OP_MULTIPLY, tan_z(f, ins->opnd[0]), part[0]);
    if (tan_of(f, ins->opnd[2]) >= 0) {
        int32_t add = gb_sum_comp(f->g, gb_shape(b, i)->type);
        if (add < 0)
            return f->g->d->status;
        int32_t o[3] = {gb_full_like(b, i, 0), ins->opnd[1], gb_bin(b, OP_MULTIPLY, tan_of(f, ins->opnd[2]), part[1])};
        t = gb_bin(b, OP_ADD, t, gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, &add));
    }
    return set_tan(f, i, t);
}

/* ---- data movement: linear in the data operands ---- */

/* scatter by multiply, y = x * M (M the scatter of the updates into ones):
 * t_y = t_x * M + x * (the updates' tangents scattered by add into zeros),
 * the second term exact for unique indices, the only case JAX (and the
 * reverse rule, rules_data.c) differentiates in the updates. */
static IrStatus fwd_scatter_mul(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t x = ins->opnd[0], idx = ins->opnd[1], u = ins->opnd[2], tx = tan_of(f, x), tu = tan_of(f, u), t = -1;
    if (tu >= 0 && !ins->a.x->unique_indices)
        return no_rule(f, i, "a scatter by multiply is differentiated in its updates only with unique_indices=true");
    if (tx >= 0) {
        int32_t o[3] = {gb_full_like(b, x, 1), idx, u};
        t = gb_bin(b, OP_MULTIPLY, tx, gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, ins->called));
    }
    if (tu >= 0) {
        int32_t add = gb_sum_comp(f->g, gb_shape(b, x)->type);
        if (add < 0)
            return f->g->d->status;
        int32_t o[3] = {gb_full_like(b, x, 0), idx, tu};
        int32_t su = gb_bin(b, OP_MULTIPLY, x, gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, &add));
        t = t < 0 ? su : gb_bin(b, OP_ADD, t, su);
    }
    return set_tan(f, i, t < 0 ? gb_full_like(b, i, 0) : t);
}


static IrStatus fwd_data(Fwd *f, int32_t i, const IrInstr *ins)
{
    bool d[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        d[k] = false;
    switch (ins->op) {
    case OP_BROADCAST: case OP_RESHAPE: case OP_BITCAST: case OP_TRANSPOSE: case OP_SLICE: case OP_REVERSE:
    case OP_DYNAMIC_SLICE: case OP_GATHER:
        d[0] = true;       /* the start indices are integers */
        break;
    case OP_PAD:           /* pad(t_x, t_value): every element is one or the other */
        d[0] = d[1] = true;
        break;
    case OP_CONCATENATE:
        for (int32_t k = 0; k < ins->nopnd; k++)
            d[k] = true;
        break;
    case OP_DYNAMIC_UPDATE_SLICE:
        d[0] = d[1] = true;
        break;
    case OP_SCATTER: {
        /* Adding: y = x + scatter(u), linear. Overwriting: each element is
         * x's or one update's (indices unique, as the forward needs), so
         * the same scatter of the tangents picks the same ones. */
        if (ins->nopnd != 3)
            return no_rule(f, i, "a scatter of several operands");
        const IrComputation *c = f->g->m->comp[ins->called[0]];
        const IrInstr *root = &c->instr[c->root];
        bool over = root->op == OP_PARAMETER && root->a.parameter_number == 1;
        IrOpcode red = ir_simple_reducer(f->g->m, ins->called[0]);
        if (red == OP_MULTIPLY)
            return fwd_scatter_mul(f, i, ins);
        if (red == OP_MAXIMUM || red == OP_MINIMUM)
            return fwd_scatter_extremal(f, i, ins);
        if (red != OP_ADD && !over)
            return no_rule(f, i, "only scatters that add, multiply, overwrite or take the maximum or minimum have one");
        d[0] = d[2] = true;
        break;
    }
    default: return no_rule(f, i, NULL);
    }
    return set_tan(f, i, linear(f, ins, d));
}

/* ---- reductions ---- */

static int64_t others_of(int32_t rank, const IrI64List *l, int64_t *out)
{
    int32_t n = 0;
    for (int32_t d = 0; d < rank; d++)
        if (!ir_list_has(l, d))
            out[n++] = d;
    return n;
}

/* Variadic reduce, per output (grad_reduce_kind): a sum of its operand
 * has the sum of the tangents; a selection, the tangent of the element
 * chosen (init's where none was). */
static IrStatus fwd_reduce_variadic(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t n = ins->nopnd / 2;
    for (int32_t k = 0; k < n; k++) {
        int32_t x = ins->opnd[k], init = ins->opnd[n + k];
        if (!has_tan(f, x) && !has_tan(f, init))
            continue;
        IrShape xs = *gb_shape(b, x);
        const IrI64List *rd = &ins->a.dimensions;
        int64_t kept[IR_MAX_RANK];
        int32_t nk = (int32_t)others_of(xs.rank, rd, kept), idx = -1;
        int32_t kind = grad_reduce_kind(b, ins, k, &idx);
        if (kind == GRAD_ROTHER)
            return no_rule(f, i, "an output of a variadic reduce must be a sum (add(acc, x)) or a selection "
                                 "(select(p, acc, x)) of its own operand");
        int32_t tx = tan_z(f, x), ti = tan_z(f, init), t;
        if (kind == GRAD_RSUM) {
            t = gb_bin(b, OP_ADD, gb_sum(b, tx, rd->n, rd->v), gb_bcast_like(b, ti, gb_sum(b, tx, rd->n, rd->v)));
        } else {
            int32_t at = gb_cmp(b, grad_linear_iota(b, &xs), gb_bcast(b, idx, IR_S32, xs.rank, xs.dims, nk, kept),
                                CMP_EQ);
            int32_t picked = gb_sum(b, gb_select(b, at, tx, gb_full_like(b, tx, 0)), rd->n, rd->v);
            int32_t none = gb_cmp(b, idx, gb_full_like(b, idx, -1), CMP_EQ);
            t = gb_bin(b, OP_ADD, picked,
                       gb_select(b, none, gb_bcast_like(b, ti, picked), gb_full_like(b, picked, 0)));
        }
        set_leaf(f, i, k, t);
    }
    return f->g->d->status;
}

/* reduce add: linear in (x, init). reduce multiply: the sum of each
 * tangent times the product of the other elements. reduce max/min: the tangents of the
 * elements equal to the result, averaged over the ties (the reverse rule
 * splits the adjoint the same way, so jvp and vjp agree). */
static IrStatus fwd_reduce(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    if (ins->nopnd != 2)
        return fwd_reduce_variadic(f, i, ins);
    IrOpcode red = ir_simple_reducer(f->g->m, ins->called[0]);
    if (red == OP_ADD) {
        bool d[2] = {true, true};
        return set_tan(f, i, linear(f, ins, d));
    }
    if (red == OP_MULTIPLY) {
        if (has_tan(f, ins->opnd[1]))
            return no_rule(f, i, "the initial value of a product reduction must not depend on the parameters");
        int32_t t = gb_bin(b, OP_MULTIPLY, tan_z(f, ins->opnd[0]), grad_prod_others(b, ins));
        return set_tan(f, i, gb_sum(b, t, ins->a.dimensions.n, ins->a.dimensions.v));
    }
    if (red != OP_MAXIMUM && red != OP_MINIMUM)
        return no_rule(f, i, "only reductions by add, multiply, maximum and minimum have one");
    if (has_tan(f, ins->opnd[1]))
        return no_rule(f, i, "the initial value of a max/min reduction must not depend on the parameters");
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    int64_t kept[IR_MAX_RANK];
    int32_t nk = (int32_t)others_of(xs.rank, &ins->a.dimensions, kept);
    int32_t mask = gb_cmp(b, x, gb_bcast(b, i, xs.type, xs.rank, xs.dims, nk, kept), CMP_EQ);
    int32_t zero = gb_full_like(b, x, 0);
    int32_t cnt = gb_sum(b, gb_select(b, mask, gb_full_like(b, x, 1), zero), ins->a.dimensions.n, ins->a.dimensions.v);
    int32_t tsum = gb_sum(b, gb_select(b, mask, tan_z(f, x), zero), ins->a.dimensions.n, ins->a.dimensions.v);
    return set_tan(f, i, gb_bin(b, OP_DIVIDE, tsum, cnt));
}

/* Reduce-window by multiply: t_y_w = sum over j in w of t_j times the
 * product of the others (grad_window_mul's parts): P_w times the window
 * sum of t / x1 off the zeros where w has none, P_w times that of t at
 * the zeros where it has one, else 0. */
static IrStatus fwd_window_mul(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    if (has_tan(f, ins->opnd[1]))
        return no_rule(f, i, "the initial value of a product pooling must not depend on the parameters");
    int32_t part[4], tx = tan_z(f, ins->opnd[0]), zx = gb_full_like(b, tx, 0);
    grad_window_mul(b, ins, part);
    int32_t s0 = grad_window_sum(b, ins, gb_select(b, part[0], zx, gb_bin(b, OP_DIVIDE, tx, part[1])));
    int32_t s1 = grad_window_sum(b, ins, gb_select(b, part[0], tx, zx));
    int32_t zy = gb_full_like(b, i, 0);
    int32_t t0 = gb_select(b, gb_cmp(b, part[3], zy, CMP_EQ), s0, zy);
    int32_t t1 = gb_select(b, gb_cmp(b, part[3], gb_full_like(b, i, 1), CMP_EQ), s1, zy);
    return set_tan(f, i, gb_bin(b, OP_MULTIPLY, part[2], gb_bin(b, OP_ADD, t0, t1)));
}

static IrStatus fwd_window(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    if (ins->op == OP_SELECT_AND_SCATTER) {
        /* The selected positions depend on the operand only piecewise;
         * the scatter is linear in (source, init) when it adds. */
        if (ir_simple_reducer(f->g->m, ins->called[1]) != OP_ADD)
            return no_rule(f, i, "only a select-and-scatter that adds has one");
        bool d[3] = {false, true, true};
        return set_tan(f, i, linear(f, ins, d));
    }
    if (ins->nopnd != 2)
        return no_rule(f, i, "a reduce-window of several operands");
    IrOpcode red = ir_simple_reducer(f->g->m, ins->called[0]);
    if (red == OP_ADD) {
        /* y = sum of the window's elements, padding filled with init:
         * linear in (x, init) together. */
        bool d[2] = {true, true};
        return set_tan(f, i, linear(f, ins, d));
    }
    if (red == OP_MULTIPLY)
        return fwd_window_mul(f, i, ins);
    if (red == OP_COUNT && grad_is_logaddexp(f->g->m, ins->called[0])) {
        if (has_tan(f, ins->opnd[1]))
            return no_rule(f, i, "the initial value of a logaddexp pooling must not depend on the parameters");
        int32_t t = grad_window_lse_tangent(b, ins, i, tan_z(f, ins->opnd[0]));
        return t < 0 ? no_rule(f, i, "a logaddexp pooling window of more than 1024 positions") : set_tan(f, i, t);
    }
    if (red != OP_MAXIMUM && red != OP_MINIMUM)
        return no_rule(f, i, "only add, multiply, max, min and logaddexp pooling have one");
    if (has_tan(f, ins->opnd[1]))
        return no_rule(f, i, "the initial value of a max pooling must not depend on the parameters");
    /* A variadic reduce-window over (x, t_x) keeping the winner's pair:
     * the tangent of each window's maximum. Padding reads (init, 0). */
    int32_t x = ins->opnd[0];
    IrType t = gb_shape(b, x)->type;
    int32_t comp = gb_pick_comp(f->g, t, red == OP_MAXIMUM ? CMP_GE : CMP_LE);
    if (comp < 0)
        return f->g->d->status;
    int32_t o[4] = {x, tan_z(f, x), ins->opnd[1], gb_const(b, t, 0)};
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.window = ins->a.x->window;
    int32_t rw = gb_emit(b, OP_REDUCE_WINDOW, NULL, 4, o, &a, 1, &comp);
    return set_tan(f, i, gb_gte(b, rw, 1));
}

/* A comparator over n pairs of scalars of types t[0..n) whose root is
 * src's root over the first pairs, as many as src takes (the others
 * ignored). */
static int32_t ignore_comp(Grad *g, int32_t src, int32_t n, const IrType *t)
{
    int32_t ci = gb_new_comp(g, "grad_cmp");
    if (ci < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    int32_t p[2 * 32];
    for (int32_t k = 0; k < 2 * n; k++) {
        IrShape s = {.type = t[k / 2]};
        p[k] = gb_parameter(&b, k, &s);
    }
    b.c->root = gb_inline(&b, src, p, NULL);
    return b.c->root < 0 ? -1 : ci;
}

/* sort: the tangents are sorted with the operands (as extra operands the
 * comparator ignores), so each moves with its value. */
/* topk: the values' tangent is the operand's at the indices (JAX's rule). */
static IrStatus fwd_topk(Fwd *f, int32_t i, const IrInstr *ins)
{
    return set_leaf(f, i, 0, grad_topk_route(&f->b, i, tan_z(f, ins->opnd[0]), false));
}

static IrStatus fwd_sort(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t n = ins->nopnd, nt = 0, which[16];
    if (n > 15)
        return no_rule(f, i, "a sort of more than 15 operands");
    IrType t[32];
    int32_t o[32];
    for (int32_t k = 0; k < n; k++) {
        t[k] = gb_shape(b, ins->opnd[k])->type;
        o[k] = ins->opnd[k];
    }
    for (int32_t k = 0; k < n; k++)
        if (tan_of(f, ins->opnd[k]) >= 0) {
            which[nt] = k;
            t[n + nt] = t[k];
            o[n + nt++] = tan_of(f, ins->opnd[k]);
        }
    int32_t cmp = ignore_comp(f->g, ins->called[0], n + nt, t);
    if (cmp < 0)
        return f->g->d->status;
    IrAttrs sa = ins->a;
    int32_t s = gb_emit(b, OP_SORT, NULL, n + nt, o, &sa, 1, &cmp);
    for (int32_t k = 0; k < nt; k++)
        set_leaf(f, i, n == 1 ? 0 : which[k], gb_gte(b, s, n + k));
    return f->g->d->status;
}

/* batch-norm-training, per feature over the N other elements:
 *   m = mean x, v = mean (x - m)^2, r = rsqrt(v + eps), y = (x - m) r s + o
 *   dm = mean dx;  dv = mean 2 (x - m)(dx - dm) = 2 mean((x - m) dx)
 *   dr = -r^3 dv / 2
 *   dy = (dx - dm) r s + (x - m) dr s + (x - m) r ds + do */
/* batch-norm-inference(x, s, o, m, v), r = rsqrt(v + eps), c = x - m:
 *   dy = (dx - dm) r s + c dr s + c r ds + do,  dr = -r^3 dv / 2 */
static IrStatus fwd_batch_norm_inference(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    int32_t x = ins->opnd[0], s = ins->opnd[1], m = ins->opnd[3], v = ins->opnd[4];
    IrShape xs = *gb_shape(b, x);
    int64_t fd[1] = {ins->a.x->feature_index};
#define BC(u) gb_bcast(b, (u), xs.type, xs.rank, xs.dims, 1, fd)
    int32_t rr = gb_un(b, OP_RSQRT, gb_bin(b, OP_ADD, v, gb_full_like(b, v, ins->a.x->epsilon)));
    int32_t c = gb_bin(b, OP_SUBTRACT, x, BC(m));
    int32_t d = gb_bin(b, OP_SUBTRACT, tan_z(f, x), BC(tan_z(f, m)));
    int32_t t = gb_bin(b, OP_MULTIPLY, d, BC(gb_bin(b, OP_MULTIPLY, rr, s)));
    if (tan_of(f, v) >= 0) {
        int32_t r3 = gb_bin(b, OP_MULTIPLY, rr, gb_bin(b, OP_MULTIPLY, rr, rr));
        int32_t dr = gb_bin(b, OP_MULTIPLY, gb_scale(b, r3, -0.5), tan_of(f, v));
        t = gb_bin(b, OP_ADD, t, gb_bin(b, OP_MULTIPLY, c, BC(gb_bin(b, OP_MULTIPLY, dr, s))));
    }
    if (tan_of(f, s) >= 0)
        t = gb_bin(b, OP_ADD, t, gb_bin(b, OP_MULTIPLY, c, BC(gb_bin(b, OP_MULTIPLY, rr, tan_of(f, s)))));
    if (tan_of(f, ins->opnd[2]) >= 0)
        t = gb_bin(b, OP_ADD, t, BC(tan_of(f, ins->opnd[2])));
#undef BC
    return set_tan(f, i, t);
}

static IrStatus fwd_batch_norm(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    if (ins->op == OP_BATCH_NORM_INFERENCE)
        return fwd_batch_norm_inference(f, i, ins);
    if (ins->op != OP_BATCH_NORM_TRAINING)
        return no_rule(f, i, NULL);
    int32_t x = ins->opnd[0], s = ins->opnd[1];
    IrShape xs = *gb_shape(b, x);
    int64_t fi = ins->a.x->feature_index, fd[1] = {fi}, red[IR_MAX_RANK];
    int32_t nr = 0;
    for (int32_t d = 0; d < xs.rank; d++)
        if (d != fi)
            red[nr++] = d;
    double N = (double)(ir_shape_elements(&xs) / (xs.dims[fi] > 0 ? xs.dims[fi] : 1));
#define BC(v) gb_bcast(b, (v), xs.type, xs.rank, xs.dims, 1, fd)
    int32_t mean = gb_gte(b, i, 1), var = gb_gte(b, i, 2);
    int32_t rr = gb_un(b, OP_RSQRT, gb_bin(b, OP_ADD, var, gb_full_like(b, var, ins->a.x->epsilon)));
    int32_t c = gb_bin(b, OP_SUBTRACT, x, BC(mean));
    int32_t tx = tan_z(f, x);
    int32_t dm = gb_scale(b, gb_sum(b, tx, nr, red), 1.0 / N);
    int32_t dv = gb_scale(b, gb_sum(b, gb_bin(b, OP_MULTIPLY, c, tx), nr, red), 2.0 / N);
    int32_t dr = gb_bin(b, OP_MULTIPLY, gb_scale(b, dv, -0.5),
                        gb_bin(b, OP_MULTIPLY, rr, gb_bin(b, OP_MULTIPLY, rr, rr)));
    int32_t ty = gb_bin(b, OP_MULTIPLY, gb_bin(b, OP_SUBTRACT, tx, BC(dm)), BC(gb_bin(b, OP_MULTIPLY, rr, s)));
    ty = gb_bin(b, OP_ADD, ty, gb_bin(b, OP_MULTIPLY, c, BC(gb_bin(b, OP_MULTIPLY, dr, s))));
    if (tan_of(f, s) >= 0)
        ty = gb_bin(b, OP_ADD, ty, gb_bin(b, OP_MULTIPLY, c, BC(gb_bin(b, OP_MULTIPLY, rr, tan_of(f, s)))));
    if (tan_of(f, ins->opnd[2]) >= 0)
        ty = gb_bin(b, OP_ADD, ty, BC(tan_of(f, ins->opnd[2])));
#undef BC
    set_leaf(f, i, 0, ty);
    set_leaf(f, i, 1, dm);
    return set_leaf(f, i, 2, dv);
}

/* ---- tuples and control flow ---- */

static int32_t leaf_offset(const IrShape *s, int64_t index)
{
    int32_t off = 0;
    for (int64_t k = 0; k < index; k++)
        off += ir_shape_leaf_count(&s->tuple[k]);
    return off;
}

/* The jvp of computation src: a new computation taking `packed` ? one
 * tuple (args..., tangents...) : the parameters args..., tangents..., and
 * returning (result, tangent of the result). */
static int32_t jvp_comp(Grad *g, int32_t src, int32_t n, const IrShape *shapes, bool packed, const char *base)
{
    int32_t ci = gb_new_comp(g, base);
    if (ci < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    int32_t p[2 * 64];
    if (packed) {
        IrShape ts[2 * 64], tup;
        for (int32_t k = 0; k < n; k++)
            ts[k] = ts[n + k] = shapes[k];
        if (ir_shape_make_tuple(g->m->arena, &tup, 2 * n, ts) != IR_OK)
            return gb_oom(g), -1;
        int32_t P = gb_parameter(&b, 0, &tup);
        for (int32_t k = 0; k < 2 * n; k++)
            p[k] = gb_gte(&b, P, k);
    } else {
        for (int32_t k = 0; k < 2 * n; k++)
            p[k] = gb_parameter(&b, k, &shapes[k % n]);
    }
    int32_t root = gb_inline(&b, src, p, NULL);
    if (root < 0)
        return -1;
    Fwd f;
    if (fwd_run(&f, g, ci, n, p, p + n) == IR_OK) {
        int32_t e[2] = {root, fwd_full(&f, root)};
        b.c->root = gb_tuple(&b, 2, e);
    }
    fwd_free(&f);
    return g->d->status == IR_OK ? ci : -1;
}

/* triangular-solve, cholesky, JAX's LU: rules_linalg.c. */
static IrStatus fwd_linalg(Fwd *f, int32_t i, const IrInstr *ins)
{
    int32_t tan[2] = {-1, -1};
    for (int32_t k = 0; k < ins->nopnd && k < 2; k++)
        tan[k] = tan_z(f, ins->opnd[k]);
    int32_t t = grad_linalg_tangent(&f->b, ins, i, tan);
    if (t == -2)
        return no_rule(f, i, "the LU of a matrix that is not square");
    return set_leaf(f, i, 0, t);
}

static IrStatus fwd_control(Fwd *f, int32_t i, const IrInstr *ins)
{
    GB *b = &f->b;
    Grad *g = f->g;
    switch (ins->op) {
    case OP_TUPLE: {
        int32_t off = 0;
        for (int32_t k = 0; k < ins->nopnd; k++) {
            int32_t x = ins->opnd[k];
            int32_t nl = ir_shape_leaf_count(&b->c->instr[x].shape);
            for (int32_t l = 0; l < nl; l++)
                if (tan_leaf(f, x, l) >= 0)
                    set_leaf(f, i, off + l, tan_leaf(f, x, l));
            off += nl;
        }
        return g->d->status;
    }
    case OP_GET_TUPLE_ELEMENT: {
        int32_t t = ins->opnd[0];
        int32_t off = leaf_offset(&b->c->instr[t].shape, ins->a.tuple_index);
        for (int32_t l = 0; l < ir_shape_leaf_count(&ins->shape); l++)
            if (tan_leaf(f, t, off + l) >= 0)
                set_leaf(f, i, l, tan_leaf(f, t, off + l));
        return g->d->status;
    }
    case OP_OPTIMIZATION_BARRIER: case OP_ADD_DEPENDENCY: case OP_DOMAIN:
        for (int32_t l = 0; l < ir_shape_leaf_count(&ins->shape); l++)
            if (tan_leaf(f, ins->opnd[0], l) >= 0)
                set_leaf(f, i, l, tan_leaf(f, ins->opnd[0], l));
        return g->d->status;
    case OP_CALL: {
        int32_t n = ins->nopnd;
        int32_t jax = grad_jax_call_factor(b, ins, i);
        if (jax >= 0)
            return set_full(f, i, gb_bin(b, OP_MULTIPLY, fwd_full(f, ins->opnd[0]), jax));
        if (g->d->status != IR_OK)
            return g->d->status;
        if (n > 64)
            return no_rule(f, i, "a call of more than 64 arguments");
        IrShape sh[64];
        int32_t o[128];
        for (int32_t k = 0; k < n; k++) {
            sh[k] = *gb_shape(b, ins->opnd[k]);
            o[k] = ins->opnd[k];
        }
        int32_t ci = jvp_comp(g, ins->called[0], n, sh, false, "grad_jvp_call");
        if (ci < 0)
            return g->d->status;
        for (int32_t k = 0; k < n; k++)
            o[n + k] = fwd_full(f, ins->opnd[k]);
        return set_full(f, i, gb_gte(b, gb_emit(b, OP_CALL, NULL, 2 * n, o, NULL, 1, &ci), 1));
    }
    case OP_CONDITIONAL: {
        /* Branch k gets (operand k, its tangent) and returns (result,
         * tangent); the same index picks it. */
        int32_t nb = ins->ncalled;
        if (nb > 64)
            return no_rule(f, i, "a conditional of more than 64 branches");
        int32_t br[64], o[65];
        o[0] = ins->opnd[0];
        for (int32_t k = 0; k < nb; k++) {
            IrShape s = *gb_shape(b, ins->opnd[k + 1]);
            if ((br[k] = jvp_comp(g, ins->called[k], 1, &s, true, "grad_jvp_branch")) < 0)
                return g->d->status;
            int32_t e[2] = {ins->opnd[k + 1], fwd_full(f, ins->opnd[k + 1])};
            o[k + 1] = gb_tuple(b, 2, e);
        }
        int32_t c = gb_emit(b, OP_CONDITIONAL, NULL, nb + 1, o, NULL, nb, br);
        if (c < 0)
            return g->d->status;
        b->c->instr[c].cond_pred_form = ins->cond_pred_form;
        return set_full(f, i, gb_gte(b, c, 1));
    }
    case OP_WHILE: {
        /* The state S becomes (S, tangent of S): the body's jvp steps
         * both; the condition reads S. The trip count needs no knowing. */
        IrShape S = ins->shape;
        int32_t body = jvp_comp(g, ins->called[1], 1, &S, true, "grad_jvp_body");
        int32_t cc = gb_new_comp(g, "grad_jvp_cond");
        if (body < 0 || cc < 0)
            return g->d->status;
        GB bc = {g, g->m->comp[cc]};
        IrShape pair[2] = {S, S}, ps;
        if (ir_shape_make_tuple(g->m->arena, &ps, 2, pair) != IR_OK)
            return gb_oom(g);
        int32_t s0 = gb_gte(&bc, gb_parameter(&bc, 0, &ps), 0);
        bc.c->root = gb_inline(&bc, ins->called[0], &s0, NULL);
        if (bc.c->root < 0)
            return g->d->status;
        /* the jvp body returns ((S', T')) as a pair already */
        int32_t e[2] = {ins->opnd[0], fwd_full(f, ins->opnd[0])};
        int32_t init = gb_tuple(b, 2, e);
        int32_t called[2] = {cc, body};
        return set_full(f, i, gb_gte(b, gb_emit(b, OP_WHILE, NULL, 1, &init, NULL, 2, called), 1));
    }
    default: return no_rule(f, i, NULL);
    }
}

/* ---- the driver ---- */

static IrStatus dispatch(Fwd *f, int32_t i)
{
    IrInstr ins = f->b.c->instr[i];
    if (grad_custom_name(&ins, "tessel_tangent")) {
        int32_t t[64];
        for (int32_t k = 0; k < ins.nopnd && k < 64; k++)
            t[k] = fwd_full(f, ins.opnd[k]);
        return set_full(f, i, fwd_custom(f->g, &f->b, &ins, i, t));
    }
    switch (ir_op_family(ins.op)) {
    case FAM_ELEMENTWISE: return fwd_elementwise(f, i, &ins);
    case FAM_BROADCAST: case FAM_RESHAPE: case FAM_TRANSPOSE: case FAM_SLICE: case FAM_DYNAMIC_SLICE:
    case FAM_PAD: case FAM_CONCATENATE: case FAM_REVERSE: case FAM_GATHER: case FAM_SCATTER:
        return fwd_data(f, i, &ins);
    case FAM_REDUCE: return fwd_reduce(f, i, &ins);
    case FAM_REDUCE_WINDOW: return fwd_window(f, i, &ins);
    case FAM_SORT: return fwd_sort(f, i, &ins);
    case FAM_TOPK: return fwd_topk(f, i, &ins);
    case FAM_DOT: case FAM_CONVOLUTION: return set_tan(f, i, bilinear(f, &ins));
    case FAM_BATCH_NORM: return fwd_batch_norm(f, i, &ins);
    case FAM_TUPLE: case FAM_CONTROL: return fwd_control(f, i, &ins);
    default: break;
    }
    switch (ins.op) {
    case OP_OPTIMIZATION_BARRIER: case OP_ADD_DEPENDENCY: case OP_DOMAIN:
        return fwd_control(f, i, &ins);
    case OP_CHOLESKY: case OP_TRIANGULAR_SOLVE:
        return fwd_linalg(f, i, &ins);
    case OP_CUSTOM_CALL:
        if (ins.nopnd == 1 && ir_annotation_target(ins.a.x->custom_call_target))
            return fwd_elementwise(f, i, &ins);
        if (grad_is_getrf(&ins))
            return fwd_linalg(f, i, &ins);
        if (ir_is_topk(&ins))
            return fwd_topk(f, i, &ins);
        return no_rule(f, i, NULL);
    default:
        return no_rule(f, i, NULL);
    }
}

void fwd_free(Fwd *f)
{
    ts_free(f->base);
    ts_free(f->tan);
    memset(f, 0, sizeof *f);
}

IrStatus fwd_run(Fwd *f, Grad *g, int32_t ci, int32_t nsrc, const int32_t *src, const int32_t *seed_tan)
{
    memset(f, 0, sizeof *f);
    f->g = g;
    f->b = (GB){g, g->m->comp[ci]};
    IrComputation *c = f->b.c;
    int32_t n = f->n0 = c->ninstr;
    f->base = ts_malloc((size_t)(n + 1) * sizeof(int32_t));
    if (!f->base)
        return gb_oom(g);
    int32_t nleaf = 0;
    for (int32_t i = 0; i < n; i++) {
        f->base[i] = nleaf;
        nleaf += ir_shape_leaf_count(&c->instr[i].shape);
    }
    f->base[n] = nleaf;
    f->tan = ts_malloc((size_t)(nleaf > 0 ? nleaf : 1) * sizeof(int32_t));
    int32_t *order = NULL;
    IrDiag td = {0};
    if (!f->tan || ir_topo_order(g->m, c, &order, &td) != IR_OK) {
        ir_diag_clear(&td);
        return f->tan ? gb_bug(g, "a cycle in %s", c->name) : gb_oom(g);
    }
    for (int32_t k = 0; k < nleaf; k++)
        f->tan[k] = -1;
    for (int32_t k = 0; k < nsrc; k++)
        set_full(f, src[k], seed_tan[k]);
    for (int32_t k = 0; k < n && g->d->status == IR_OK; k++) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        if (ins->op == OP_PARAMETER ||
            (rev_is_constant_op(ins->op) && !grad_custom_name(ins, "tessel_tangent")))
            continue;
        bool any = false;
        for (int32_t o = 0; o < ins->nopnd && !any; o++)
            any = has_tan(f, ins->opnd[o]);
        if (any)
            dispatch(f, i);
    }
    ts_free(order);
    return g->d->status;
}
