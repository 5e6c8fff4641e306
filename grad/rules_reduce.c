/*
 * rules_reduce.c: gradients of reductions, contractions and sorts.
 *
 *   reduce add       every reduced element gets g (broadcast back)
 *   reduce max/min   the elements equal to the result share g evenly
 *                    (mask / count of the tied ones)
 *   reduce multiply  each element gets g times the product of the others
 *                    (those before it times those after it: zeros welcome)
 *   variadic reduce  per output: a sum of its operand (as reduce add), or
 *                    a selection of one of its elements (argmax's value):
 *                    g to the element chosen, found by the same reduce with
 *                    a linear iota that follows the same choice
 *   reduce-window add  the transposed window: g dilated by the stride
 *                    (interior padding), padded by (window - 1 - pad_lo) in
 *                    front, then a window sum of stride 1 (the derivation
 *                    is above rule_window_add)
 *   reduce-window max  select-and-scatter: g goes to the first maximum of
 *                    each window (select a >= b), summed where windows meet
 *   reduce-window with base dilation, max with window dilation, min: one
 *                    window offset at a time (strided slices of the padded
 *                    operand; ties share g), rule_window_offsets
 *   reduce-window logaddexp  (lax.cumlogsumexp) one window offset at a time,
 *                    each element's share g e^(x - y)
 *   reduce-window multiply  window sums transposed of g y / x, the zeros
 *                    counted apart (jnp.cumprod with zeros), rule_window_mul
 *   select-and-scatter  the source gets g at the selected elements (a
 *                    reduce-window over (operand, g) pairs)
 *   dot              dx = g . y contracted over y's free dimensions, and
 *                    transposed back to x's order; dy the same way
 *   convolution      the input gradient is a convolution of g with the
 *                    reversed kernel (in and out features swapped), the
 *                    forward's strides becoming lhs dilation; the kernel
 *                    gradient a convolution of x with g (batch and features
 *                    swapped), the forward's strides becoming rhs dilation
 *   sort             the values go back through the permutation: sort the
 *                    operands again with an iota, then sort (perm, g) by perm
 *   topk             the values' adjoint goes to the elements the indices
 *                    name (a mask [..., k, n] summed over k)
 *   batch-norm-training  batch-norm-grad for the normalised output, plus
 *                    the terms of the mean and variance outputs when used
 *   batch-norm-inference  the derivative of (x - m) rsqrt(v + eps) s + o in
 *                    each operand
 */
#include "grad.h"

#include <math.h>
#include <string.h>

/* The dimensions of `rank` not in l, ascending. */
static int32_t others(int32_t rank, const IrI64List *l, const IrI64List *l2, int64_t *out)
{
    int32_t n = 0;
    for (int32_t d = 0; d < rank; d++)
        if (!ir_list_has(l, d) && !(l2 && ir_list_has(l2, d)))
            out[n++] = d;
    return n;
}

/* ---- variadic reduce ---- */

int32_t grad_linear_iota(GB *b, const IrShape *s)
{
    int64_t n = ir_shape_elements(s);
    IrShape is;
    if (ir_shape_make(b->g->m->arena, &is, IR_S32, 1, &n) != IR_OK)
        return gb_oom(b->g), -1;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.iota_dimension = 0;
    return gb_reshape(b, gb_emit(b, OP_IOTA, &is, 0, NULL, &a, 0, NULL), s->rank, s->dims);
}

/* Is instruction v of c parameter(p)? */
static bool is_param(const IrComputation *c, int32_t v, int64_t p)
{
    return c->instr[v].op == OP_PARAMETER && c->instr[v].a.parameter_number == p;
}

/* Output k of a variadic reduce (n operands) whose reducer (acc_0..acc_n-1,
 * in_0..in_n-1) -> (r_0..r_n-1) has
 *   r_k = add(acc_k, in_k): GRAD_RSUM, a sum of operand k alone;
 *   r_k = select(p, acc_k, in_k) or select(p, in_k, acc_k): GRAD_RSELECT,
 *       one of operand k's elements (argmax's value). *idx receives the s32
 *       array (of the output's shape) of the linear index in operand k of
 *       the element chosen, -1 where init stayed: the same reduce with a
 *       linear iota added whose reducer makes the same choice for it.
 * Anything else: GRAD_ROTHER. */
int32_t grad_reduce_kind(GB *b, const IrInstr *ins, int32_t k, int32_t *idx)
{
    Grad *g = b->g;
    int32_t n = ins->nopnd / 2;
    const IrComputation *c = g->m->comp[ins->called[0]];
    const IrInstr *root = &c->instr[c->root];
    if (root->op != OP_TUPLE || root->nopnd != n)
        return GRAD_ROTHER;
    const IrInstr *rk = &c->instr[root->opnd[k]];
    if (rk->op == OP_ADD && ((is_param(c, rk->opnd[0], k) && is_param(c, rk->opnd[1], n + k)) ||
                             (is_param(c, rk->opnd[1], k) && is_param(c, rk->opnd[0], n + k))))
        return GRAD_RSUM;
    if (rk->op != OP_SELECT)
        return GRAD_ROTHER;
    bool acc_first = is_param(c, rk->opnd[1], k) && is_param(c, rk->opnd[2], n + k);
    if (!acc_first && !(is_param(c, rk->opnd[2], k) && is_param(c, rk->opnd[1], n + k)))
        return GRAD_ROTHER;
    if (!idx)
        return GRAD_RSELECT;
    /* The reducer with an index pair: (acc..., acc_idx, in..., in_idx). */
    int32_t ci = gb_new_comp(g, "grad_argsel");
    if (ci < 0)
        return *idx = -1, GRAD_RSELECT;
    GB rb = {g, g->m->comp[ci]};
    int32_t p[2 * 64 + 2], map_n = c->ninstr;
    int32_t *map = ts_malloc((size_t)(map_n > 0 ? map_n : 1) * sizeof(int32_t));
    if (!map)
        return gb_oom(g), *idx = -1, GRAD_RSELECT;
    for (int32_t j = 0; j < 2 * n + 2; j++) {
        int32_t src = j < n ? j : j == n ? -1 : j < 2 * n + 1 ? j - 1 : -1;
        IrShape s = src >= 0 ? c->instr[c->param[src]].shape : (IrShape){.type = IR_S32};
        p[j] = gb_parameter(&rb, j, &s);
    }
    int32_t args[2 * 64];
    for (int32_t j = 0; j < 2 * n; j++)
        args[j] = p[j < n ? j : j + 1];
    int32_t rr = gb_inline(&rb, ins->called[0], args, map);
    int32_t e[65];
    if (rr >= 0) {
        int32_t sel = map[root->opnd[k]];
        int32_t pred = rb.c->instr[sel].opnd[0];
        for (int32_t j = 0; j < n; j++)
            e[j] = gb_gte(&rb, rr, j);
        e[n] = acc_first ? gb_select(&rb, pred, p[n], p[2 * n + 1]) : gb_select(&rb, pred, p[2 * n + 1], p[n]);
        rb.c->root = gb_tuple(&rb, n + 1, e);
    }
    ts_free(map);
    int32_t o[2 * 64 + 2];
    for (int32_t j = 0; j < n; j++) {
        o[j] = ins->opnd[j];
        o[n + 1 + j] = ins->opnd[n + j];
    }
    IrShape xs = *gb_shape(b, ins->opnd[k]);
    o[n] = grad_linear_iota(b, &xs);
    o[2 * n + 1] = gb_const(b, IR_S32, -1);
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.dimensions = ins->a.dimensions;
    a.has_dimensions = true;
    *idx = gb_gte(b, gb_emit(b, OP_REDUCE, NULL, 2 * n + 2, o, &a, 1, &ci), n);
    return GRAD_RSELECT;
}

static IrStatus rule_reduce_variadic(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    int32_t n = ins->nopnd / 2;
    if (n > 64)
        return rev_no_rule(r, i, "a reduce of more than 64 operands");
    for (int32_t k = 0; k < n; k++) {
        int32_t gk = rev_leaf(r, i, k), x = ins->opnd[k], init = ins->opnd[n + k];
        if (gk < 0 || (!rev_on(r, x) && !rev_on(r, init)))
            continue;
        IrShape xs = *gb_shape(b, x);
        int64_t kept[IR_MAX_RANK];
        int32_t nk = others(xs.rank, &ins->a.dimensions, NULL, kept);
        int32_t idx = -1;
        int32_t kind = grad_reduce_kind(b, ins, k, &idx);
        if (kind == GRAD_ROTHER)
            return rev_no_rule(r, i, "an output of a variadic reduce must be a sum (add(acc, x)) or a "
                                     "selection (select(p, acc, x)) of its own operand");
        gk = gb_convert(b, gk, xs.type);
        if (kind == GRAD_RSUM) {
            if (rev_on(r, init))
                rev_acc(r, init, 0, gb_sum_all(b, gk));
            if (rev_on(r, x))
                rev_acc(r, x, 0, gb_bcast(b, gk, xs.type, xs.rank, xs.dims, nk, kept));
            continue;
        }
        /* The chosen element gets g; init gets it where nothing was chosen. */
        if (rev_on(r, x)) {
            int32_t at = gb_cmp(b, grad_linear_iota(b, &xs), gb_bcast(b, idx, IR_S32, xs.rank, xs.dims, nk, kept),
                                CMP_EQ);
            rev_acc(r, x, 0, gb_select(b, at, gb_bcast(b, gk, xs.type, xs.rank, xs.dims, nk, kept),
                                       gb_full_like(b, x, 0)));
        }
        if (rev_on(r, init)) {
            int32_t none = gb_cmp(b, idx, gb_full_like(b, idx, -1), CMP_EQ);
            rev_acc(r, init, 0, gb_sum_all(b, gb_select(b, none, gk, gb_full_like(b, gk, 0))));
        }
    }
    return r->g->d->status;
}

/* Products of x2 [k, n] along its dimension 1 in windows of n (the
 * reducer `comp`, init 1) over x2 padded with n ones in front (front) or
 * behind: n + 1 outputs, output j the product of x2[:, j - n .. j) of the
 * padded row, sliced to [from, from + n). front, from 0: prod_{t < j};
 * behind, from 1: prod_{t > j}. */
static int32_t window_products(GB *b, int32_t x2, int32_t comp, bool front, int64_t from)
{
    const IrShape *s = gb_shape(b, x2);
    int64_t k = s->dims[0], n = s->dims[1];
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.window.rank = 2;
    ax.window.dim = ir_alloc_array(b->g->m->arena, 2, sizeof(IrWindowDim));
    if (!ax.window.dim)
        return gb_oom(b->g), -1;
    ax.window.dim[0] = (IrWindowDim){.size = 1, .stride = 1, .lhs_dilate = 1, .rhs_dilate = 1};
    ax.window.dim[1] = (IrWindowDim){.size = n, .stride = 1, .lhs_dilate = 1, .rhs_dilate = 1,
                                     .pad_lo = front ? n : 0, .pad_hi = front ? 0 : n};
    int32_t o[2] = {x2, gb_const(b, s->type, 1)};
    int32_t w = gb_emit(b, OP_REDUCE_WINDOW, NULL, 2, o, &a, 1, &comp);
    int64_t start[2] = {0, from}, limit[2] = {k, from + n}, stride[2] = {1, 1};
    return gb_slice(b, w, start, limit, stride);
}

/* reduce multiply: d prod / d x_j = prod of the others (not prod / x_j,
 * which a zero makes 0/0): the kept dimensions first and the reduced ones
 * flattened into one of n, the product of the elements before j times
 * that of the elements after it (window_products), back in x's order. What
 * JAX's rule computes too; O(n^2) multiplies a row. Shared with forward
 * mode (the tangent: the sum over the reduced dimensions of t times it). */
int32_t grad_prod_others(GB *b, const IrInstr *ins)
{
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK], tdims[IR_MAX_RANK], k = 1, n = 1;
    int32_t nk = others(xs.rank, &ins->a.dimensions, NULL, perm);
    for (int32_t d = 0; d < nk; d++)
        k *= xs.dims[perm[d]];
    for (int32_t d = 0; d < ins->a.dimensions.n; d++) {
        perm[nk + d] = ins->a.dimensions.v[d];
        n *= xs.dims[ins->a.dimensions.v[d]];
    }
    for (int32_t d = 0; d < xs.rank; d++) {
        inv[perm[d]] = d;
        tdims[d] = xs.dims[perm[d]];
    }
    int64_t flat[2] = {k, n};
    int32_t x2 = gb_reshape(b, gb_transpose(b, x, perm), 2, flat);
    int32_t before = window_products(b, x2, ins->called[0], true, 0);
    int32_t after = window_products(b, x2, ins->called[0], false, 1);
    return gb_transpose(b, gb_reshape(b, gb_bin(b, OP_MULTIPLY, before, after), xs.rank, tdims), inv);
}

static IrStatus rule_reduce_mul(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    if (rev_on(r, ins->opnd[1]))
        return rev_no_rule(r, i, "the initial value of a product reduction must not depend on the parameters");
    int64_t kept[IR_MAX_RANK];
    int32_t nk = others(xs.rank, &ins->a.dimensions, NULL, kept);
    int32_t gb = gb_bcast(b, gb_convert(b, g, xs.type), xs.type, xs.rank, xs.dims, nk, kept);
    return rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, gb, grad_prod_others(b, ins)));
}

static IrStatus rule_reduce(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0], init = ins->opnd[1];
    IrShape xs = *gb_shape(b, x);
    int64_t kept[IR_MAX_RANK];
    int32_t nk = others(xs.rank, &ins->a.dimensions, NULL, kept);
    IrOpcode red = ir_simple_reducer(r->g->m, ins->called[0]);
    int32_t gb = gb_bcast(b, g, xs.type, xs.rank, xs.dims, nk, kept);
    if (red == OP_ADD) {
        if (rev_on(r, init))
            rev_acc(r, init, 0, gb_sum_all(b, g));
        return rev_acc(r, x, 0, gb);
    }
    if (red == OP_MULTIPLY)
        return rule_reduce_mul(r, i, ins, g);
    if (red != OP_MAXIMUM && red != OP_MINIMUM)
        return rev_no_rule(r, i, "only reductions by add, multiply, maximum and minimum have one");
    if (rev_on(r, init))
        return rev_no_rule(r, i, "the initial value of a max/min reduction must not depend on the parameters");
    int32_t yb = gb_bcast(b, i, xs.type, xs.rank, xs.dims, nk, kept);
    int32_t mask = gb_cmp(b, x, yb, CMP_EQ);
    int32_t ones = gb_select(b, mask, gb_full_like(b, x, 1), gb_full_like(b, x, 0));
    int32_t cnt = gb_sum(b, ones, ins->a.dimensions.n, ins->a.dimensions.v);
    int32_t share = gb_bin(b, OP_DIVIDE, g, cnt);
    return rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, ones, gb_bcast(b, share, xs.type, xs.rank, xs.dims, nk, kept)));
}

static int64_t dilated(int64_t n, int64_t d)
{
    return n == 0 ? 0 : 1 + d * (n - 1);
}

/* Reduce-window add, per dimension: y[j] = sum_t x[j s - pl + t wd] (size
 * k, stride s, low pad pl, window dilation wd). So dx[i] = sum of g[j]
 * over j s - pl + t wd = i. Put g[j] at p = pb + j s (interior padding
 * s - 1, low padding pb = kd - pl - 1, kd = 1 + wd (k - 1)); a window sum
 * of stride 1 and dilation wd at i reads p = i + t wd, i.e. j s = i - pl +
 * (k - 1 - t) wd: every (j, t') with j s - pl + t' wd = i once. The high
 * padding makes the length n + kd - 1, so the sum has the operand's n. */
static IrStatus rule_window_add(Rev *r, int32_t i, const IrInstr *ins, int32_t g, int32_t *gx)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    const IrWindow *w = &ins->a.x->window;
    int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], in[IR_MAX_RANK];
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.window.rank = w->rank;
    ax.window.dim = ir_alloc_array(r->g->m->arena, (size_t)(w->rank > 0 ? w->rank : 1), sizeof(IrWindowDim));
    if (!ax.window.dim)
        return gb_oom(r->g);
    for (int32_t d = 0; d < w->rank; d++) {
        const IrWindowDim *wd = &w->dim[d];
        if (wd->lhs_dilate > 1)
            return rev_no_rule(r, i, "a reduce-window with base dilation");
        int64_t kd = dilated(wd->size, wd->rhs_dilate), od = dilated(ins->shape.dims[d], wd->stride);
        lo[d] = kd - wd->pad_lo - 1;
        hi[d] = xs.dims[d] + kd - 1 - od - lo[d];
        in[d] = wd->stride - 1;
        ax.window.dim[d] = (IrWindowDim){.size = wd->size, .stride = 1, .lhs_dilate = 1,
                                        .rhs_dilate = wd->rhs_dilate};
    }
    int32_t comp = gb_sum_comp(r->g, xs.type);
    int32_t o[2] = {gb_pad0(b, gb_convert(b, g, xs.type), lo, hi, in), gb_const(b, xs.type, 0)};
    if (comp < 0)
        return r->g->d->status;
    *gx = gb_emit(b, OP_REDUCE_WINDOW, NULL, 2, o, &a, 1, &comp);
    return r->g->d->status;
}

static IrStatus rule_select_scatter(Rev *r, int32_t i, const IrInstr *ins, int32_t g);

/* The strided slice [st, lim) step str of a window-padded operand that
 * window offset t reads for every output (y's dims ys): st = t D,
 * stride S, one element per output (rule_window_offsets). */
static void offset_slice(const IrWindow *w, const IrShape *ys, const int64_t *t, int64_t *st, int64_t *lim,
                         int64_t *str)
{
    for (int32_t d = 0; d < ys->rank; d++) {
        const IrWindowDim *wd = &w->dim[d];
        int64_t S = wd->stride > 0 ? wd->stride : 1, D = wd->rhs_dilate > 1 ? wd->rhs_dilate : 1;
        st[d] = t[d] * D;
        str[d] = S;
        lim[d] = st[d] + (ys->dims[d] - 1) * S + 1;
    }
}

/* Step window offset t to the next, row-major. */
static void next_offset(const IrWindow *w, int64_t *t)
{
    for (int32_t d = w->rank - 1; d >= 0; d--) {
        if (++t[d] < w->dim[d].size)
            return;
        t[d] = 0;
    }
}

/* Reduce-window by add, max or min with any padding and dilation, one
 * window offset at a time. Let xp be x with the window's padding and base
 * dilation written out (pad(x, init), interior = lhs_dilate - 1; XLA skips
 * those positions, which for add, max and min is the same as reading init
 * there when init is the reducer's identity, and otherwise only changes
 * what ties with init). Window offset t (a position in the window, K of them)
 * reads, for output w, xp[w S + t D] (stride S, window dilation D): the
 * strided slice s_t of xp of y's shape. Add: y = sum_t s_t, so xp's
 * adjoint is sum_t pad0(g) put back where s_t came from (low t D,
 * interior S - 1). Max/min: y = s_t where s_t == y; the elements equal to
 * y share g evenly (as reduce max does), g / count at each. Logaddexp
 * (lse: JAX's cumlogsumexp, y = log sum_t e^s_t): s_t's share is
 * g e^(s_t - y), at most g, so nothing overflows. x's adjoint is
 * then xp's at x's positions (pad's rule: low pad_lo, stride lhs_dilate,
 * negative padding undone first). K windows positions at most 1024. */
static IrStatus rule_window_offsets(Rev *r, int32_t i, const IrInstr *ins, int32_t g, IrOpcode red, bool lse,
                                    int32_t *gx)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x), ys = ins->shape;
    const IrWindow *w = &ins->a.x->window;
    int32_t rank = xs.rank;
    int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], in[IR_MAX_RANK], np[IR_MAX_RANK], K = 1;
    for (int32_t d = 0; d < rank; d++) {
        const IrWindowDim *wd = &w->dim[d];
        lo[d] = wd->pad_lo;
        hi[d] = wd->pad_hi;
        in[d] = (wd->lhs_dilate > 1 ? wd->lhs_dilate : 1) - 1;
        np[d] = lo[d] + hi[d] + dilated(xs.dims[d], in[d] + 1);
        K *= wd->size;
        if (ys.dims[d] == 0 || xs.dims[d] == 0) {
            *gx = gb_full_like(b, x, 0); /* nothing is read */
            return r->g->d->status;
        }
    }
    if (K > 1024)
        return rev_no_rule(r, i, "a window of more than 1024 positions where it is taken one position at a time "
                                 "(dilated, min or logaddexp pooling)");
    bool pick = red == OP_MAXIMUM || red == OP_MINIMUM;
    int32_t xp = -1, share = -1;
    int32_t *eq = NULL;
    if (pick || lse) {
        IrAttrsX pax = {0};
        IrAttrs pa = {.x = &pax};
        pax.pad_lo = gb_ilist(r->g, rank, lo);
        pax.pad_hi = gb_ilist(r->g, rank, hi);
        pax.pad_interior = gb_ilist(r->g, rank, in);
        int32_t po[2] = {x, ins->opnd[1]};
        xp = gb_emit(b, OP_PAD, NULL, 2, po, &pa, 0, NULL);
        if (pick && !(eq = ts_malloc((size_t)K * sizeof(int32_t))))
            return gb_oom(r->g);
    }
    /* logaddexp: where a window holds only -inf (y = -inf) nothing gets g. */
    int32_t dead = lse ? gb_cmp(b, i, gb_full_like(b, i, -INFINITY), CMP_EQ) : -1;
    int64_t t[IR_MAX_RANK] = {0}, st[IR_MAX_RANK], lim[IR_MAX_RANK], str[IR_MAX_RANK], plo[IR_MAX_RANK],
            phi[IR_MAX_RANK], pin[IR_MAX_RANK];
    /* Pass 0 (max/min): the masks and their count; pass 1: the adjoint. */
    int32_t gxp = -1, cnt = -1;
    for (int32_t pass = !pick; pass < 2 && r->g->d->status == IR_OK; pass++) {
        for (int32_t d = 0; d < rank; d++)
            t[d] = 0;
        for (int64_t k = 0; k < K && r->g->d->status == IR_OK; k++) {
            offset_slice(w, &ys, t, st, lim, str);
            for (int32_t d = 0; d < rank; d++) {
                plo[d] = st[d];
                pin[d] = str[d] - 1;
                phi[d] = np[d] - lim[d];
            }
            if (pass == 0) {
                eq[k] = gb_cmp(b, gb_slice(b, xp, st, lim, str), i, CMP_EQ);
                int32_t one = gb_select(b, eq[k], gb_full_like(b, i, 1), gb_full_like(b, i, 0));
                cnt = cnt < 0 ? one : gb_bin(b, OP_ADD, cnt, one);
            } else {
                int32_t c = pick ? gb_select(b, eq[k], share, gb_full_like(b, g, 0)) : g;
                if (lse) /* d y / d x = e^(x - y) <= 1 */
                    c = gb_select(b, dead, gb_full_like(b, g, 0),
                                  gb_bin(b, OP_MULTIPLY, g,
                                         gb_un(b, OP_EXP, gb_bin(b, OP_SUBTRACT, gb_slice(b, xp, st, lim, str), i))));
                int32_t p = gb_pad0(b, c, plo, phi, pin);
                gxp = gxp < 0 ? p : gb_bin(b, OP_ADD, gxp, p);
            }
            next_offset(w, t);
        }
        if (pass == 0)
            share = gb_bin(b, OP_DIVIDE, gb_convert(b, g, ys.type), cnt);
    }
    ts_free(eq);
    /* Back to x: undo negative padding, then x[j] sits at max(lo, 0) + j (in + 1). */
    int64_t ulo[IR_MAX_RANK], uhi[IR_MAX_RANK], zero[IR_MAX_RANK] = {0}, s0[IR_MAX_RANK], l0[IR_MAX_RANK],
            r0[IR_MAX_RANK];
    for (int32_t d = 0; d < rank; d++) {
        ulo[d] = lo[d] < 0 ? -lo[d] : 0;
        uhi[d] = hi[d] < 0 ? -hi[d] : 0;
        s0[d] = lo[d] > 0 ? lo[d] : 0;
        r0[d] = in[d] + 1;
        l0[d] = s0[d] + (xs.dims[d] - 1) * r0[d] + 1;
    }
    *gx = gb_slice(b, gb_pad0(b, gxp, ulo, uhi, zero), s0, l0, r0);
    return r->g->d->status;
}

/* Instruction v of c when its opcode is op, else NULL. */
static const IrInstr *op_at(const IrComputation *c, int32_t v, IrOpcode op)
{
    return v >= 0 && v < c->ninstr && c->instr[v].op == op ? &c->instr[v] : NULL;
}

/* Whether binary instruction in takes parameters 0 and 1 of c, in either order. */
static bool of_params(const IrComputation *c, const IrInstr *in)
{
    return in && ((is_param(c, in->opnd[0], 0) && is_param(c, in->opnd[1], 1)) ||
                  (is_param(c, in->opnd[0], 1) && is_param(c, in->opnd[1], 0)));
}

/* Whether reducer computation ci is logaddexp as JAX writes it for
 * lax.cumlogsumexp: select(a - b != a - b, a + b, max(a, b) +
 * log1p(exp(-|a - b|))) (the first branch for inf - inf). */
bool grad_is_logaddexp(const IrModule *m, int32_t ci)
{
    const IrComputation *c = m->comp[ci];
    const IrInstr *sel = op_at(c, c->root, OP_SELECT), *ne, *sum;
    if (!sel || !(ne = op_at(c, sel->opnd[0], OP_COMPARE)) || ne->a.direction != CMP_NE ||
        ne->opnd[0] != ne->opnd[1] || !of_params(c, op_at(c, ne->opnd[0], OP_SUBTRACT)) ||
        !of_params(c, op_at(c, sel->opnd[1], OP_ADD)) || !(sum = op_at(c, sel->opnd[2], OP_ADD)))
        return false;
    for (int k = 0; k < 2; k++) {
        const IrInstr *l1p = op_at(c, sum->opnd[1 - k], OP_LOG1P), *e, *neg, *ab;
        if (of_params(c, op_at(c, sum->opnd[k], OP_MAXIMUM)) && l1p && (e = op_at(c, l1p->opnd[0], OP_EXP)) &&
            (neg = op_at(c, e->opnd[0], OP_NEGATE)) && (ab = op_at(c, neg->opnd[0], OP_ABS)) &&
            of_params(c, op_at(c, ab->opnd[0], OP_SUBTRACT)))
            return true;
    }
    return false;
}

/* Reduce-window by multiply (jnp.cumprod, a product pooling): y_w = init
 * times the product of window w. d y_w / d x_j is the product of the
 * others in w, which a zero in w makes more than y_w / x_j = 0/0. So, as
 * rule_reduce_mul avoids dividing for the whole-axis product, but in one
 * pass of window sums rather than prefix products (a cumulative window is
 * as long as the axis): with z = (x == 0), x1 = x where not z else 1,
 * P_w = the product of x1 over w (init included) and Z_w the zeros in w,
 * the others' product at j in w is P_w / x1_j where Z_w == 0 and x_j != 0,
 * P_w where Z_w == 1 and x_j == 0, else 0. Filled in by grad_window_mul:
 * part[0] = z, [1] = x1, [2] = P, [3] = Z (of y's type). Shared with
 * forward mode. */
void grad_window_mul(GB *b, const IrInstr *ins, int32_t part[4])
{
    int32_t x = ins->opnd[0];
    part[0] = gb_cmp(b, x, gb_full_like(b, x, 0), CMP_EQ);
    part[1] = gb_select(b, part[0], gb_full_like(b, x, 1), x);
    int32_t o[2] = {part[1], ins->opnd[1]};
    part[2] = gb_emit(b, OP_REDUCE_WINDOW, NULL, 2, o, &ins->a, 1, ins->called);
    part[3] = grad_window_sum(b, ins, gb_select(b, part[0], gb_full_like(b, x, 1), gb_full_like(b, x, 0)));
}

/* The reduce-window add of v with ins's window (padding reads 0). */
int32_t grad_window_sum(GB *b, const IrInstr *ins, int32_t v)
{
    int32_t comp = gb_sum_comp(b->g, gb_shape(b, v)->type);
    if (comp < 0)
        return -1;
    int32_t o[2] = {v, gb_const(b, gb_shape(b, v)->type, 0)};
    return gb_emit(b, OP_REDUCE_WINDOW, NULL, 2, o, &ins->a, 1, &comp);
}

/* x's adjoint: the window sums transposed (rule_window_add, or offset by
 * offset with base dilation) of g P where Z == 0, divided by x1, and of
 * g P where Z == 1 at the zeros. */
static IrStatus rule_window_mul(Rev *r, int32_t i, const IrInstr *ins, int32_t g, int32_t *gx)
{
    GB *b = &r->b;
    bool base = false;
    for (int32_t d = 0; d < ins->a.x->window.rank; d++)
        base |= ins->a.x->window.dim[d].lhs_dilate > 1;
    int32_t part[4], t[2];
    grad_window_mul(b, ins, part);
    int32_t gp = gb_bin(b, OP_MULTIPLY, gb_convert(b, g, ins->shape.type), part[2]), zero = gb_full_like(b, gp, 0);
    for (int k = 0; k < 2; k++) {
        int32_t a = gb_select(b, gb_cmp(b, part[3], gb_full_like(b, part[3], k), CMP_EQ), gp, zero);
        IrStatus st = base ? rule_window_offsets(r, i, ins, a, OP_ADD, false, &t[k]) : rule_window_add(r, i, ins, a, &t[k]);
        if (st != IR_OK)
            return st;
    }
    *gx = gb_select(b, part[0], t[1], gb_bin(b, OP_DIVIDE, t[0], part[1]));
    return r->g->d->status;
}

/* Forward mode of a logaddexp pooling (self = y): t_y = sum over the
 * window's offsets t of s_t(tangent) e^(s_t(x) - y), s_t the strided
 * slice of offset t (rule_window_offsets) of x padded with init and of the
 * tangent padded with 0; 0 where y = -inf. -1 when the window has more
 * than 1024 positions. */
int32_t grad_window_lse_tangent(GB *b, const IrInstr *ins, int32_t self, int32_t tx)
{
    const IrWindow *w = &ins->a.x->window;
    IrShape ys = ins->shape;
    int32_t rank = ys.rank;
    int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], in[IR_MAX_RANK], K = 1;
    for (int32_t d = 0; d < rank; d++) {
        lo[d] = w->dim[d].pad_lo;
        hi[d] = w->dim[d].pad_hi;
        in[d] = (w->dim[d].lhs_dilate > 1 ? w->dim[d].lhs_dilate : 1) - 1;
        K *= w->dim[d].size;
    }
    if (K > 1024 || ir_shape_elements(&ys) == 0)
        return K > 1024 ? -1 : gb_full_like(b, self, 0);
    IrAttrsX pax = {0};
    IrAttrs pa = {.x = &pax};
    pax.pad_lo = gb_ilist(b->g, rank, lo);
    pax.pad_hi = gb_ilist(b->g, rank, hi);
    pax.pad_interior = gb_ilist(b->g, rank, in);
    int32_t po[2] = {ins->opnd[0], ins->opnd[1]};
    int32_t xp = gb_emit(b, OP_PAD, NULL, 2, po, &pa, 0, NULL);
    int32_t to[2] = {tx, gb_const(b, ys.type, 0)};
    int32_t tp = gb_emit(b, OP_PAD, NULL, 2, to, &pa, 0, NULL);
    int64_t t[IR_MAX_RANK] = {0}, st[IR_MAX_RANK], lim[IR_MAX_RANK], str[IR_MAX_RANK];
    int32_t sum = -1;
    for (int64_t k = 0; k < K && b->g->d->status == IR_OK; k++) {
        offset_slice(w, &ys, t, st, lim, str);
        int32_t e = gb_un(b, OP_EXP, gb_bin(b, OP_SUBTRACT, gb_slice(b, xp, st, lim, str), self));
        int32_t c = gb_bin(b, OP_MULTIPLY, gb_slice(b, tp, st, lim, str), e);
        sum = sum < 0 ? c : gb_bin(b, OP_ADD, sum, c);
        next_offset(w, t);
    }
    int32_t dead = gb_cmp(b, self, gb_full_like(b, self, -INFINITY), CMP_EQ);
    return gb_select(b, dead, gb_full_like(b, self, 0), sum);
}

static IrStatus rule_window(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    if (ins->op == OP_SELECT_AND_SCATTER)
        return rule_select_scatter(r, i, ins, g);
    if (ins->op != OP_REDUCE_WINDOW || ins->nopnd != 2)
        return rev_no_rule(r, i, "a reduce-window of several operands");
    IrOpcode red = ir_simple_reducer(r->g->m, ins->called[0]);
    int32_t x = ins->opnd[0], init = ins->opnd[1];
    if (rev_on(r, init) && red != OP_ADD)
        return rev_no_rule(r, i, "the initial value of a max, min or product pooling must not depend on the parameters");
    if (red == OP_MULTIPLY || (red == OP_COUNT && grad_is_logaddexp(r->g->m, ins->called[0]))) {
        if (rev_on(r, init))
            return rev_no_rule(r, i, "the initial value of a logaddexp pooling must not depend on the parameters");
        int32_t gx = -1;
        IrStatus st = red == OP_MULTIPLY ? rule_window_mul(r, i, ins, g, &gx)
                                         : rule_window_offsets(r, i, ins, g, OP_ADD, true, &gx);
        return st != IR_OK ? st : rev_acc(r, x, 0, gx);
    }
    if (red != OP_ADD && red != OP_MAXIMUM && red != OP_MINIMUM)
        return rev_no_rule(r, i, "only add, multiply, max, min and logaddexp pooling have one");
    bool dilated_any = false;
    for (int32_t d = 0; d < ins->a.x->window.rank; d++)
        dilated_any |= ins->a.x->window.dim[d].lhs_dilate > 1 || ins->a.x->window.dim[d].rhs_dilate > 1;
    if (red == OP_ADD || dilated_any || red == OP_MINIMUM) {
        bool base = false;
        for (int32_t d = 0; d < ins->a.x->window.rank; d++)
            base |= ins->a.x->window.dim[d].lhs_dilate > 1;
        int32_t gx = -1;
        IrStatus st = red == OP_ADD && !base ? rule_window_add(r, i, ins, g, &gx)
                                             : rule_window_offsets(r, i, ins, g, red, false, &gx);
        if (st != IR_OK)
            return st;
        if (rev_on(r, x))
            rev_acc(r, x, 0, gx);
        if (rev_on(r, init)) /* init enters each output once (padding and holes are skipped) */
            rev_acc(r, init, 0, gb_sum_all(b, g));
        return r->g->d->status;
    }
    IrType t = gb_shape(b, x)->type;
    int32_t called[2] = {gb_ge_comp(r->g, t), gb_sum_comp(r->g, t)};
    if (called[0] < 0 || called[1] < 0)
        return r->g->d->status;
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.window = ins->a.x->window;
    int32_t o[3] = {x, g, gb_const(b, t, 0)};
    return rev_acc(r, x, 0, gb_emit(b, OP_SELECT_AND_SCATTER, NULL, 3, o, &a, 2, called));
}

/* select-and-scatter(x, src, init) with scatter add: y = init + the sum
 * of src[w] at the element window w selects. It is linear in (src, init)
 * and piecewise constant in x (no adjoint to x). Transposed: src[w] gets
 * g at the element w selected, which is a reduce-window over (x, g)
 * keeping the pair whose x wins the select (compare(a, b, DIR) of its
 * parameters), padding reading (-inf or +inf, 0) so that it never wins
 * (select-and-scatter never selects padding); init gets sum(g) (every
 * element of y starts at init once). */
static IrStatus rule_select_scatter(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    const IrComputation *sel = r->g->m->comp[ins->called[0]];
    const IrInstr *sr = &sel->instr[sel->root];
    if (ir_simple_reducer(r->g->m, ins->called[1]) != OP_ADD)
        return rev_no_rule(r, i, "only a select-and-scatter that adds has one");
    if (sr->op != OP_COMPARE || sel->instr[sr->opnd[0]].op != OP_PARAMETER ||
        sel->instr[sr->opnd[1]].op != OP_PARAMETER || sel->instr[sr->opnd[0]].a.parameter_number != 0 ||
        (sr->a.direction != CMP_GE && sr->a.direction != CMP_GT && sr->a.direction != CMP_LE &&
         sr->a.direction != CMP_LT))
        return rev_no_rule(r, i, "its select must be compare(p0, p1) with GE, GT, LE or LT");
    int32_t x = ins->opnd[0], src = ins->opnd[1], init = ins->opnd[2];
    IrType t = gb_shape(b, x)->type;
    bool up = sr->a.direction == CMP_GE || sr->a.direction == CMP_GT;
    if (rev_on(r, init))
        rev_acc(r, init, 0, gb_sum_all(b, g));
    if (!rev_on(r, src))
        return r->g->d->status;
    int32_t comp = gb_pick_comp(r->g, t, sr->a.direction);
    if (comp < 0)
        return r->g->d->status;
    int32_t o[4] = {x, gb_convert(b, g, t), gb_const(b, t, up ? -INFINITY : INFINITY), gb_const(b, t, 0)};
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.window = ins->a.x->window;
    int32_t rw = gb_emit(b, OP_REDUCE_WINDOW, NULL, 4, o, &a, 1, &comp);
    return rev_acc(r, src, 0, gb_gte(b, rw, 1));
}

/* Position of v in the ascending sort of l's values. */
static int32_t rank_in(const IrI64List *l, int64_t v)
{
    int32_t n = 0;
    for (int32_t k = 0; k < l->n; k++)
        n += l->v[k] < v;
    return n;
}

/* The adjoint of one dot operand. `mine`/`other` are the dimension
 * numbers of this operand and of the other one (batch, contracting); the
 * result of dot(g, other) is [batch, my free dims (from g), other's
 * remaining dims = its contracting dims, ascending], transposed back to my
 * order: my batch dim j from j, my free dim j from nb + j, my contracting
 * dim c_k from nb + nfree + (rank of the other's c_k). */
static int32_t dot_adjoint(GB *b, int32_t g, int32_t me, int32_t other, const IrI64List *mb, const IrI64List *mc,
                           const IrI64List *ob, const IrI64List *oc, bool me_first)
{
    IrShape ms = *gb_shape(b, me), os = *gb_shape(b, other);
    int64_t mfree[IR_MAX_RANK], ofree[IR_MAX_RANK];
    int32_t nmf = others(ms.rank, mb, mc, mfree), nof = others(os.rank, ob, oc, ofree);
    int32_t nb = mb->n;
    /* g's dims: batch, lhs free, rhs free. */
    int64_t gbatch[IR_MAX_RANK], gcon[IR_MAX_RANK];
    for (int32_t k = 0; k < nb; k++)
        gbatch[k] = k;
    for (int32_t k = 0; k < nof; k++)
        gcon[k] = me_first ? nb + nmf + k : nb + k;
    int64_t perm[IR_MAX_RANK], perm2[IR_MAX_RANK];
    bool id2 = true;
    for (int32_t k = 0; k < nb; k++)
        perm[mb->v[k]] = perm2[mb->v[k]] = k;
    for (int32_t k = 0; k < nmf; k++) {
        perm[mfree[k]] = nb + k;
        perm2[mfree[k]] = nb + mc->n + k;
    }
    for (int32_t k = 0; k < mc->n; k++) {
        perm[mc->v[k]] = nb + nmf + rank_in(oc, oc->v[k]);
        perm2[mc->v[k]] = nb + rank_in(oc, oc->v[k]);
    }
    for (int32_t k = 0; k < ms.rank; k++)
        id2 &= perm2[k] == k;
    /* dot(other, g) gives [batch, other's contracting dims, my free dims]:
     * when that is my order already (x^T g for a weight), no transpose. */
    IrAttrs a = {.x = &ir_no_attrs_x};
    IrI64List gb_ = gb_ilist(b->g, nb, gbatch), gc_ = gb_ilist(b->g, nof, gcon), of_ = gb_ilist(b->g, nof, ofree);
    a.dot.lhs_batch = id2 ? *ob : gb_;
    a.dot.rhs_batch = id2 ? gb_ : *ob;
    a.dot.lhs_contracting = id2 ? of_ : gc_;
    a.dot.rhs_contracting = id2 ? gc_ : of_;
    int32_t gg = gb_convert(b, g, os.type);
    int32_t o[2] = {id2 ? other : gg, id2 ? gg : other};
    int32_t d = gb_emit(b, OP_DOT, NULL, 2, o, &a, 0, NULL);
    if (id2)
        return d;
    return gb_transpose(b, d, perm);
}

static IrStatus rule_dot(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    const IrDotDnums *dn = &ins->a.dot;
    int32_t x = ins->opnd[0], y = ins->opnd[1];
    if (rev_on(r, x))
        rev_acc(r, x, 0, dot_adjoint(b, g, x, y, &dn->lhs_batch, &dn->lhs_contracting, &dn->rhs_batch,
                                     &dn->rhs_contracting, true));
    if (rev_on(r, y))
        rev_acc(r, y, 0, dot_adjoint(b, g, y, x, &dn->rhs_batch, &dn->rhs_contracting, &dn->lhs_batch,
                                     &dn->lhs_contracting, false));
    return r->g->d->status;
}

/* ---- convolution ---- */

static IrStatus conv_emit(GB *b, int32_t *out, int32_t lhs, int32_t rhs, const IrConvDnums *cd, IrWindowDim *wd,
                          int32_t ns, int64_t fgc, int64_t bgc)
{
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.conv = *cd;
    ax.conv.present = true;
    ax.window.rank = ns;
    ax.window.dim = wd;
    ax.feature_group_count = fgc;
    ax.batch_group_count = bgc;
    int32_t o[2] = {lhs, rhs};
    *out = gb_emit(b, OP_CONVOLUTION, NULL, 2, o, &a, 0, NULL);
    return b->g->d->status;
}

/* The kernel of the input gradient with G feature groups: the forward
 * kernel K[spatial, I, O = G x Og] (group gi's outputs are O's block gi)
 * becomes K'[spatial, Og, G x I]: the transposed convolution has G groups
 * of Og inputs, each producing its group's I features. Built in the order
 * spatial..., in, out, then split, transposed and merged. */
static int32_t group_kernel(GB *b, int32_t k, const IrConvDnums *cd, int64_t G, IrConvDnums *nd)
{
    IrShape ks = *gb_shape(b, k);
    int32_t ns = cd->nspatial;
    int64_t perm[IR_MAX_RANK], dims[IR_MAX_RANK];
    for (int32_t s = 0; s < ns; s++)
        perm[s] = cd->k_spatial[s];
    perm[ns] = cd->k_in_feature;
    perm[ns + 1] = cd->k_out_feature;
    int32_t t = gb_transpose(b, k, perm);
    for (int32_t s = 0; s < ns; s++)
        dims[s] = ks.dims[cd->k_spatial[s]];
    int64_t I = ks.dims[cd->k_in_feature], Og = ks.dims[cd->k_out_feature] / G;
    dims[ns] = I;
    dims[ns + 1] = G;
    dims[ns + 2] = Og;
    t = gb_reshape(b, t, ns + 3, dims);
    for (int32_t s = 0; s < ns; s++)
        perm[s] = s;
    perm[ns] = ns + 2;
    perm[ns + 1] = ns + 1;
    perm[ns + 2] = ns;
    t = gb_transpose(b, t, perm);  /* [spatial, Og, G, I] */
    dims[ns] = Og;
    dims[ns + 1] = G * I;
    t = gb_reshape(b, t, ns + 2, dims);
    nd->k_spatial = gb_list(b->g, ns, NULL);
    if (!nd->k_spatial)
        return -1;
    for (int32_t s = 0; s < ns; s++)
        nd->k_spatial[s] = s;
    /* in = Og (the gradient's features of a group), out = G x I */
    nd->k_in_feature = ns;
    nd->k_out_feature = ns + 1;
    return t;
}

/* The grouped input gradient d (x's dimension order, batch Nb, features
 * B x I, group-major) as x's shape [B x Nb, I]: features and batch to the
 * front, split, the groups swapped in front of the batch, merged, and put
 * back in x's order. */
static int32_t batch_groups_back(GB *b, int32_t d, const IrConvDnums *cd, int64_t B)
{
    IrShape ds = *gb_shape(b, d);
    int32_t rank = ds.rank, nr = 0;
    int64_t perm[IR_MAX_RANK + 1], dims[IR_MAX_RANK + 1], rest[IR_MAX_RANK];
    for (int32_t k = 0; k < rank; k++)
        if (k != cd->in_batch && k != cd->in_feature)
            rest[nr++] = k;
    int64_t Nb = ds.dims[cd->in_batch], I = ds.dims[cd->in_feature] / B;
    perm[0] = cd->in_feature;
    perm[1] = cd->in_batch;
    for (int32_t k = 0; k < nr; k++)
        perm[2 + k] = rest[k];
    int32_t t = gb_transpose(b, d, perm);              /* [B x I, Nb, rest] */
    dims[0] = B;
    dims[1] = I;
    dims[2] = Nb;
    for (int32_t k = 0; k < nr; k++)
        dims[3 + k] = ds.dims[rest[k]];
    t = gb_reshape(b, t, rank + 1, dims);              /* [B, I, Nb, rest] */
    for (int32_t k = 0; k < rank + 1; k++)
        perm[k] = k;
    perm[1] = 2;
    perm[2] = 1;
    t = gb_transpose(b, t, perm);                      /* [B, Nb, I, rest] */
    dims[0] = B * Nb;
    dims[1] = I;
    for (int32_t k = 0; k < nr; k++)
        dims[2 + k] = ds.dims[rest[k]];
    t = gb_reshape(b, t, rank, dims);                  /* [B x Nb, I, rest] */
    perm[cd->in_batch] = 0;
    perm[cd->in_feature] = 1;
    for (int32_t k = 0; k < nr; k++)
        perm[rest[k]] = 2 + k;
    return gb_transpose(b, t, perm);
}

static IrStatus rule_conv(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    const IrConvDnums *cd = &ins->a.x->conv;
    int32_t x = ins->opnd[0], k = ins->opnd[1];
    int32_t ns = cd->nspatial;
    int64_t G = ins->a.x->feature_group_count > 1 ? ins->a.x->feature_group_count : 1;
    int64_t B = ins->a.x->batch_group_count > 1 ? ins->a.x->batch_group_count : 1;
    if (B > 1 && G > 1)
        return rev_no_rule(r, i, "a convolution with both feature and batch groups");
    IrShape xs = *gb_shape(b, x), ks = *gb_shape(b, k);
    const IrWindow *w = &ins->a.x->window;
    for (int32_t s = 0; s < w->rank; s++)
        if (w->dim[s].reversal)
            return rev_no_rule(r, i, "a convolution with window reversal");
    IrArena *ar = r->g->m->arena;
    IrWindowDim *wi = ir_alloc_array(ar, (size_t)(ns > 0 ? ns : 1), sizeof *wi);
    IrWindowDim *wk = ir_alloc_array(ar, (size_t)(ns > 0 ? ns : 1), sizeof *wk);
    if (!wi || !wk)
        return gb_oom(r->g);
    int64_t rdims[IR_MAX_RANK];
    for (int32_t s = 0; s < ns; s++) {
        IrWindowDim f = w->rank ? w->dim[s] : (IrWindowDim){.size = ks.dims[cd->k_spatial[s]]};
        int64_t st = f.stride ? f.stride : 1, ld = f.lhs_dilate ? f.lhs_dilate : 1;
        int64_t rd = f.rhs_dilate ? f.rhs_dilate : 1;
        int64_t n = xs.dims[cd->in_spatial[s]], kn = ks.dims[cd->k_spatial[s]];
        int64_t m = ins->shape.dims[cd->out_spatial[s]];
        int64_t nd = dilated(n, ld), kd = dilated(kn, rd), od = dilated(m, st);
        /* input gradient: full correlation of g (dilated by the stride)
         * with the reversed kernel; the size works out to n (see header). */
        int64_t pb = kd - f.pad_lo - 1;
        wi[s] = (IrWindowDim){.size = kn, .stride = ld, .pad_lo = pb, .pad_hi = nd + kd - 1 - od - pb,
                              .lhs_dilate = st, .rhs_dilate = rd};
        /* kernel gradient: x correlated with g dilated by the stride, the
         * window (g) dilated by st; high padding to land on kn. */
        wk[s] = (IrWindowDim){.size = m, .stride = rd, .pad_lo = f.pad_lo,
                              .pad_hi = od - nd + kd - f.pad_lo - 1, .lhs_dilate = ld, .rhs_dilate = st};
        rdims[s] = cd->k_spatial[s];
    }
    int32_t gx = gb_convert(b, g, xs.type);
    if (rev_on(r, x)) {
        IrConvDnums nd = {.present = true, .in_batch = cd->out_batch, .in_feature = cd->out_feature,
                          .k_in_feature = cd->k_out_feature, .k_out_feature = cd->k_in_feature,
                          .out_batch = cd->in_batch, .out_feature = cd->in_feature, .nspatial = ns,
                          .in_spatial = cd->out_spatial, .k_spatial = cd->k_spatial, .out_spatial = cd->in_spatial};
        IrAttrs ra = {.x = &ir_no_attrs_x};
        ra.dimensions = gb_ilist(r->g, ns, rdims);
        ra.has_dimensions = true;
        /* Batch groups: out[n, bg*Og + o] reads x[n + bg*Nb, :] and kernel
         * outputs block bg only, so x's batch block bg gets the input
         * gradient of the bg-th group of outputs: the feature-grouped
         * input gradient with B groups (the same kernel K', group bg's
         * gradient features in, its I features out), whose [Nb, B x I]
         * result is then moved to [B x Nb, I] (batch_groups_back). */
        int64_t GG = B > 1 ? B : G;
        int32_t kk = k;
        if (GG > 1)
            kk = group_kernel(b, k, cd, GG, &nd);
        if (GG > 1) {
            int64_t sp[IR_MAX_RANK];
            for (int32_t s = 0; s < ns; s++)
                sp[s] = s;
            ra.dimensions = gb_ilist(r->g, ns, sp);
        }
        int32_t rk = gb_emit(b, OP_REVERSE, NULL, 1, &kk, &ra, 0, NULL);
        int32_t dx;
        if (conv_emit(b, &dx, gx, rk, &nd, wi, ns, GG, 1) == IR_OK)
            rev_acc(r, x, 0, B > 1 ? batch_groups_back(b, dx, cd, B) : dx);
    }
    if (rev_on(r, k)) {
        IrConvDnums nd = {.present = true, .in_batch = cd->in_feature, .in_feature = cd->in_batch,
                          .k_in_feature = cd->out_batch, .k_out_feature = cd->out_feature,
                          .out_batch = cd->k_in_feature, .out_feature = cd->k_out_feature, .nspatial = ns,
                          .in_spatial = cd->in_spatial, .k_spatial = cd->out_spatial, .out_spatial = cd->k_spatial};
        /* Feature groups of the forward are batch groups here (each group
         * of inputs meets only its group of gradients), and the reverse. */
        int32_t dk;
        if (conv_emit(b, &dk, x, gx, &nd, wk, ns, B, G) == IR_OK)
            rev_acc(r, k, 0, dk);
    }
    return r->g->d->status;
}

/* ---- sort ---- */

/* A comparator over `n` pairs of scalar parameters of types t[0..n) whose
 * root is compare(p0, p1, LT) (types[0] s32: the permutation), or, when
 * src >= 0, src's root over the first n - 1 pairs (an s32 pair added last). */
static int32_t comparator(Grad *g, int32_t src, int32_t n, const IrType *t)
{
    int32_t ci = gb_new_comp(g, "grad_cmp");
    if (ci < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    int32_t p[2 * 16];
    for (int32_t k = 0; k < 2 * n; k++) {
        IrShape s = {.type = t[k / 2]};
        p[k] = gb_parameter(&b, k, &s);
    }
    b.c->root = src >= 0 ? gb_inline(&b, src, p, NULL) : gb_cmp(&b, p[0], p[1], CMP_LT);
    return b.c->root < 0 ? -1 : ci;
}

static IrStatus rule_sort(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    int32_t n = ins->nopnd;
    if (n > 15)
        return rev_no_rule(r, i, "a sort of more than 15 operands");
    int64_t dim = ins->a.dimensions.v[0];
    IrShape s0 = *gb_shape(b, ins->opnd[0]);
    IrType t[16];
    for (int32_t k = 0; k < n; k++)
        t[k] = gb_shape(b, ins->opnd[k])->type;
    t[n] = IR_S32;
    int32_t cmp = comparator(r->g, ins->called[0], n + 1, t);
    IrShape is;
    if (ir_shape_make(r->g->m->arena, &is, IR_S32, s0.rank, s0.dims) != IR_OK)
        return gb_oom(r->g);
    IrAttrs ia = {.x = &ir_no_attrs_x};
    ia.iota_dimension = dim;
    int32_t iota = gb_emit(b, OP_IOTA, &is, 0, NULL, &ia, 0, NULL);
    int32_t o[17];
    memcpy(o, ins->opnd, (size_t)n * sizeof(int32_t));
    o[n] = iota;
    IrAttrs sa = ins->a;
    if (cmp < 0)
        return r->g->d->status;
    int32_t sorted = gb_emit(b, OP_SORT, NULL, n + 1, o, &sa, 1, &cmp);
    int32_t perm = gb_gte(b, sorted, n);
    for (int32_t k = 0; k < n; k++) {
        int32_t gk = rev_leaf(r, i, k);
        if (gk < 0 || !rev_on(r, ins->opnd[k]))
            continue;
        /* Sorting (perm, g) by perm puts g[j] at perm[j]: the inverse. */
        IrType pt[2] = {IR_S32, t[k]};
        int32_t back = comparator(r->g, -1, 2, pt);
        int32_t po[2] = {perm, gk};
        IrAttrs ba = {.x = &ir_no_attrs_x};
        ba.dimensions = ins->a.dimensions;
        ba.has_dimensions = true;
        if (back < 0)
            return r->g->d->status;
        rev_acc(r, ins->opnd[k], 0, gb_gte(b, gb_emit(b, OP_SORT, NULL, 2, po, &ba, 1, &back), 1));
    }
    return r->g->d->status;
}

/* ---- batch-norm-training ---- */

/* y = (x - mean) / sqrt(var + eps) * scale + offset per feature, mean and
 * var (biased) over the other dimensions (N elements each). batch-norm-grad
 * gives x's, scale's and offset's adjoints for y's. The mean output adds
 * g_mean / N to every x of its feature; the variance output adds
 * g_var * 2 (x - mean) / N (the mean's own change cancels: its terms sum
 * to zero). */
/* batch-norm-inference(x, s, o, m, v): with r = rsqrt(v + eps) and
 * c = x - m per feature, y = c r s + o, so (sums over the non-feature
 * dimensions) dx = g r s, ds = sum(g c) r, do = sum(g), dm = -sum(g) r s,
 * dv = sum(g c) s dr/dv with dr/dv = -r^3 / 2. */
static IrStatus rule_batch_norm_inference(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    int32_t g = rev_leaf(r, i, 0);
    int32_t x = ins->opnd[0], s = ins->opnd[1], o = ins->opnd[2], m = ins->opnd[3], v = ins->opnd[4];
    IrShape xs = *gb_shape(b, x);
    int64_t f = ins->a.x->feature_index, fd[1] = {f}, red[IR_MAX_RANK];
    int32_t nr = 0;
    for (int32_t d = 0; d < xs.rank; d++)
        if (d != f)
            red[nr++] = d;
    g = gb_convert(b, g, xs.type);
    int32_t rr = gb_un(b, OP_RSQRT, gb_bin(b, OP_ADD, v, gb_full_like(b, v, ins->a.x->epsilon)));
    int32_t rs = gb_bin(b, OP_MULTIPLY, rr, s);
    int32_t c = gb_bin(b, OP_SUBTRACT, x, gb_bcast(b, m, xs.type, xs.rank, xs.dims, 1, fd));
    int32_t sg = gb_sum(b, g, nr, red);
    int32_t sgc = rev_on(r, s) || rev_on(r, v) ? gb_sum(b, gb_bin(b, OP_MULTIPLY, g, c), nr, red) : -1;
    if (rev_on(r, x))
        rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, g, gb_bcast(b, rs, xs.type, xs.rank, xs.dims, 1, fd)));
    if (rev_on(r, s))
        rev_acc(r, s, 0, gb_bin(b, OP_MULTIPLY, sgc, rr));
    if (rev_on(r, o))
        rev_acc(r, o, 0, sg);
    if (rev_on(r, m))
        rev_acc(r, m, 0, gb_un(b, OP_NEGATE, gb_bin(b, OP_MULTIPLY, sg, rs)));
    if (rev_on(r, v)) {
        int32_t r3 = gb_bin(b, OP_MULTIPLY, rr, gb_bin(b, OP_MULTIPLY, rr, rr));
        rev_acc(r, v, 0, gb_bin(b, OP_MULTIPLY, gb_bin(b, OP_MULTIPLY, sgc, s), gb_scale(b, r3, -0.5)));
    }
    return r->g->d->status;
}

static IrStatus rule_batch_norm(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    if (ins->op == OP_BATCH_NORM_INFERENCE)
        return rev_leaf(r, i, 0) >= 0 ? rule_batch_norm_inference(r, i, ins) : IR_OK;
    if (ins->op != OP_BATCH_NORM_TRAINING)
        return rev_no_rule(r, i, NULL);
    int32_t x = ins->opnd[0], scale = ins->opnd[1], offset = ins->opnd[2];
    IrShape xs = *gb_shape(b, x);
    int64_t f = ins->a.x->feature_index;
    int64_t N = ir_shape_elements(&xs) / (xs.dims[f] > 0 ? xs.dims[f] : 1);
    int32_t mean = gb_gte(b, i, 1), var = gb_gte(b, i, 2);
    int32_t gy = rev_leaf(r, i, 0), gm = rev_leaf(r, i, 1), gv = rev_leaf(r, i, 2);
    if (gy >= 0) {
        IrAttrsX ax = {0};
        IrAttrs a = {.x = &ax};
        ax.epsilon = ins->a.x->epsilon;
        ax.feature_index = f;
        int32_t o[5] = {x, scale, mean, var, gy};
        int32_t bg = gb_emit(b, OP_BATCH_NORM_GRAD, NULL, 5, o, &a, 0, NULL);
        if (rev_on(r, x))
            rev_acc(r, x, 0, gb_gte(b, bg, 0));
        if (rev_on(r, scale))
            rev_acc(r, scale, 0, gb_gte(b, bg, 1));
        if (rev_on(r, offset))
            rev_acc(r, offset, 0, gb_gte(b, bg, 2));
    }
    int64_t fd[1] = {f};
    if (gm >= 0 && rev_on(r, x))
        rev_acc(r, x, 0, gb_bcast(b, gb_scale(b, gm, 1.0 / (double)N), xs.type, xs.rank, xs.dims, 1, fd));
    if (gv >= 0 && rev_on(r, x)) {
        int32_t c = gb_bin(b, OP_SUBTRACT, x, gb_bcast(b, mean, xs.type, xs.rank, xs.dims, 1, fd));
        int32_t gvb = gb_bcast(b, gb_scale(b, gv, 2.0 / (double)N), xs.type, xs.rank, xs.dims, 1, fd);
        rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, c, gvb));
    }
    return r->g->d->status;
}

/* ---- topk ---- */

/* pred [..., k, n] for topk i (operand [..., n], k results): true where
 * indices[..., j] == n. */
static int32_t topk_picks(GB *b, int32_t i)
{
    const IrShape *xs = gb_shape(b, b->c->instr[i].opnd[0]);
    int32_t r = xs->rank;
    int64_t k = b->c->instr[i].shape.tuple[1].dims[r - 1];
    int64_t dims[IR_MAX_RANK + 1], bdims[IR_MAX_RANK];
    memcpy(dims, xs->dims, (size_t)(r - 1) * sizeof dims[0]);
    dims[r - 1] = k;
    dims[r] = xs->dims[r - 1];
    for (int32_t d = 0; d < r; d++)
        bdims[d] = d;
    IrShape ms;
    if (ir_shape_make(b->g->m->arena, &ms, IR_S32, r + 1, dims) != IR_OK)
        return gb_oom(b->g), -1;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.iota_dimension = r;
    int32_t col = gb_emit(b, OP_IOTA, &ms, 0, NULL, &a, 0, NULL);
    int32_t idx = gb_bcast(b, gb_gte(b, i, 1), IR_S32, r + 1, dims, r, bdims);
    return gb_cmp(b, idx, col, CMP_EQ);
}

int32_t grad_topk_route(GB *b, int32_t i, int32_t v, bool to_operand)
{
    int32_t picks = topk_picks(b, i);
    if (picks < 0 || v < 0)
        return -1;
    const IrShape *ms = gb_shape(b, picks);
    int32_t rank = ms->rank;
    int64_t dims[IR_MAX_RANK + 1], bdims[IR_MAX_RANK];
    memcpy(dims, ms->dims, (size_t)rank * sizeof dims[0]);
    for (int32_t d = 0; d < rank - 2; d++)
        bdims[d] = d;
    bdims[rank - 2] = to_operand ? rank - 2 : rank - 1;   /* v's last dim: k, or the operand's n */
    int64_t summed = to_operand ? rank - 2 : rank - 1;
    IrType t = gb_shape(b, v)->type;
    int32_t vb = gb_bcast(b, v, t, rank, dims, rank - 1, bdims);
    int32_t zero = gb_bcast(b, gb_const(b, t, 0), t, rank, dims, 0, NULL);
    return gb_sum(b, gb_select(b, picks, vb, zero), 1, &summed);
}

/* topk (and XLA's TopK custom-call): the values' adjoint goes back to
 * the elements the indices name, as JAX's rule (a gather's transpose). */
static IrStatus rule_topk(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    int32_t x = ins->opnd[0];
    return rev_acc(r, x, 0, grad_topk_route(&r->b, i, gb_convert(&r->b, g, gb_shape(&r->b, x)->type), true));
}

IrStatus rev_reduce(Rev *r, int32_t i, const IrInstr *ins)
{
    int32_t g = rev_leaf(r, i, 0);
    switch (ins->op) {
    case OP_SORT: return rule_sort(r, i, ins);
    case OP_BATCH_NORM_TRAINING: case OP_BATCH_NORM_INFERENCE: case OP_BATCH_NORM_GRAD:
        return rule_batch_norm(r, i, ins);
    case OP_REDUCE:
        if (ins->nopnd != 2)
            return rule_reduce_variadic(r, i, ins);
        break;
    default: break;
    }
    if (g < 0)
        return IR_OK;
    switch (ins->op) {
    case OP_REDUCE: return rule_reduce(r, i, ins, g);
    case OP_REDUCE_WINDOW: case OP_SELECT_AND_SCATTER: return rule_window(r, i, ins, g);
    case OP_DOT: return rule_dot(r, ins, g);
    case OP_CONVOLUTION: return rule_conv(r, i, ins, g);
    default: return ir_is_topk(ins) ? rule_topk(r, i, ins, g) : rev_no_rule(r, i, NULL);
    }
}
