/*
 * rules_data.c: gradients of the ops that move data. Each of them is
 * linear in its data operand, so its adjoint is the transposed map applied
 * to g (the adjoint of the result):
 *
 *   broadcast        sum g over the new dimensions (and over size-1
 *                    dimensions that were stretched), reshape back
 *   reshape          reshape g back;  transpose: transpose by the inverse
 *   slice            pad g with zeros back to the operand: low = start,
 *                    interior = stride - 1, high = what is left
 *   pad              slice g at the operand's positions (after undoing
 *                    negative padding with a zero pad); the padding value
 *                    gets sum(g) - sum(of what went to the operand)
 *   concatenate      each operand gets its slice of g
 *   reverse          reverse g the same way
 *   dynamic-slice    g written into zeros at the same (clamped) start
 *   dynamic-update-slice  the operand gets g with the window zeroed, the
 *                    update gets g's window (dynamic-slice)
 *   gather           scatter-add g into zeros (the gather's dimension
 *                    numbers read as a scatter's) at the indices clamped
 *                    as gather clamps them (scatter would drop what is out
 *                    of bounds: jnp.take(mode="clip") and XLA's default)
 *   scatter (add)    the operand gets g, the updates gather g back (0 for
 *                    an update the scatter skipped: out of bounds);
 *   scatter (overwrite: the combiner returns the update) the operand gets g
 *                    with the written positions zeroed, the updates gather
 *                    g (indices assumed unique, as the forward needs them)
 *   scatter (multiply) the operand gets g times the scatter of the updates
 *                    into ones, the updates gather g * x (unique indices)
 *   scatter (max, min) g shared evenly by the updates and the operand that
 *                    hold each element's value (JAX's rule)
 */
#include "grad.h"

#include <string.h>

static IrStatus rule_broadcast(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    const IrShape *os = &ins->shape;
    const IrI64List *bd = &ins->a.dimensions;
    int64_t sum[IR_MAX_RANK];
    int32_t nsum = 0;
    bool mapped[IR_MAX_RANK] = {0};
    for (int32_t k = 0; k < bd->n; k++)
        mapped[bd->v[k]] = xs.dims[k] == os->dims[bd->v[k]];
    for (int32_t d = 0; d < os->rank; d++)
        if (!mapped[d])
            sum[nsum++] = d;
    int32_t s = gb_sum(b, g, nsum, sum);
    /* The kept dimensions come in output order; put them in the operand's. */
    int64_t kx[IR_MAX_RANK], perm[IR_MAX_RANK], kdims[IR_MAX_RANK];
    int32_t nk = 0;
    for (int32_t d = 0; d < os->rank; d++)
        for (int32_t k = 0; k < bd->n; k++)
            if (bd->v[k] == d && mapped[d])
                kx[nk++] = k;
    for (int32_t p = 0, q = 0; p < xs.rank; p++)
        for (int32_t j = 0; j < nk; j++)
            if (kx[j] == p) {
                perm[q] = j;
                kdims[q++] = xs.dims[p];
            }
    s = gb_transpose(b, s, perm);
    (void)kdims;
    (void)i;
    return rev_acc(r, x, 0, gb_reshape(b, s, xs.rank, xs.dims));
}

static IrStatus rule_slice(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrShape xs = *gb_shape(b, x);
    int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], in[IR_MAX_RANK];
    for (int32_t d = 0; d < xs.rank; d++) {
        int64_t n = ins->shape.dims[d], st = ins->a.x->slice_start.v[d];
        int64_t str = ins->a.x->slice_stride.n ? ins->a.x->slice_stride.v[d] : 1;
        if (n == 0)
            return IR_OK; /* an empty slice reads nothing */
        lo[d] = st;
        in[d] = n > 1 ? str - 1 : 0; /* one element: the stride (maybe near INT64_MAX) plays no part */
        hi[d] = xs.dims[d] - (st + (n - 1) * str + 1);
    }
    return rev_acc(r, x, 0, gb_pad0(b, g, lo, hi, in));
}

static IrStatus rule_pad(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0], pv = ins->opnd[1];
    IrShape xs = *gb_shape(b, x);
    int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], zero[IR_MAX_RANK] = {0};
    int64_t st[IR_MAX_RANK], lim[IR_MAX_RANK], str[IR_MAX_RANK];
    for (int32_t d = 0; d < xs.rank; d++) {
        if (xs.dims[d] == 0)
            return IR_OK;
        int64_t l = ins->a.x->pad_lo.v[d], h = ins->a.x->pad_hi.v[d], it = ins->a.x->pad_interior.v[d];
        /* Negative padding cut operand elements off: pad g by as much so
         * that every operand element has a place, then x[i] is at
         * max(l, 0) + i * (it + 1). */
        lo[d] = l < 0 ? -l : 0;
        hi[d] = h < 0 ? -h : 0;
        st[d] = l > 0 ? l : 0;
        str[d] = it + 1;
        lim[d] = st[d] + (xs.dims[d] - 1) * str[d] + 1;
    }
    int32_t gx = gb_slice(b, gb_pad0(b, g, lo, hi, zero), st, lim, str);
    if (rev_on(r, pv))
        rev_acc(r, pv, 0, gb_bin(b, OP_SUBTRACT, gb_sum_all(b, g), gb_sum_all(b, gx)));
    return rev_acc(r, x, 0, gx);
}

static IrStatus rule_concat(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int64_t dim = ins->a.dimensions.v[0], off = 0;
    int32_t rank = ins->shape.rank;
    for (int32_t k = 0; k < ins->nopnd; k++) {
        int32_t x = ins->opnd[k];
        int64_t n = gb_shape(b, x)->dims[dim];
        int64_t st[IR_MAX_RANK], lim[IR_MAX_RANK], str[IR_MAX_RANK];
        for (int32_t d = 0; d < rank; d++) {
            st[d] = d == dim ? off : 0;
            lim[d] = d == dim ? off + n : ins->shape.dims[d];
            str[d] = 1;
        }
        if (rev_on(r, x) && n > 0)
            rev_acc(r, x, 0, gb_slice(b, g, st, lim, str));
        off += n;
    }
    return r->g->d->status;
}

static IrStatus rule_dynamic(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    if (ins->op == OP_DYNAMIC_SLICE) {
        /* dynamic-update-slice clamps the start as dynamic-slice did (the
         * update has the slice's size), so g lands where the slice came from. */
        int32_t o[2 + IR_MAX_RANK];
        o[0] = gb_full_like(b, x, 0);
        o[1] = g;
        for (int32_t k = 1; k < ins->nopnd; k++)
            o[1 + k] = ins->opnd[k];
        return rev_acc(r, x, 0, gb_emit(b, OP_DYNAMIC_UPDATE_SLICE, NULL, ins->nopnd + 1, o, NULL, 0, NULL));
    }
    int32_t u = ins->opnd[1];
    int32_t o[2 + IR_MAX_RANK];
    memcpy(o, ins->opnd, (size_t)ins->nopnd * sizeof(int32_t));
    if (rev_on(r, x)) {
        o[0] = g;
        o[1] = gb_full_like(b, u, 0);
        rev_acc(r, x, 0, gb_emit(b, OP_DYNAMIC_UPDATE_SLICE, NULL, ins->nopnd, o, NULL, 0, NULL));
    }
    if (rev_on(r, u)) {
        IrShape us = *gb_shape(b, u);
        IrAttrsX ax = {0};
        IrAttrs a = {.x = &ax};
        ax.dynamic_slice_sizes = gb_ilist(r->g, us.rank, us.dims);
        o[1] = g;
        rev_acc(r, u, 0, gb_emit(b, OP_DYNAMIC_SLICE, NULL, ins->nopnd - 1, o + 1, &a, 0, NULL));
    }
    return r->g->d->status;
}

static IrScatterDnums scatter_of(const IrGatherDnums *gd)
{
    return (IrScatterDnums){.update_window_dims = gd->offset_dims,
                            .inserted_window_dims = gd->collapsed_slice_dims,
                            .scatter_dims_to_operand_dims = gd->start_index_map,
                            .input_batching_dims = gd->operand_batching_dims,
                            .scatter_indices_batching_dims = gd->start_indices_batching_dims,
                            .index_vector_dim = gd->index_vector_dim};
}

/* Start indices idx as a gather with dimension numbers gd and slice
 * sizes `sizes` reads them from `operand`: each component c clamped to
 * [0, operand dim - slice size] of the dimension start_index_map[c] names
 * (XLA's gather semantics), so that the scatter-add of the gradient lands
 * where the gather read. */
static int32_t clamp_starts(GB *b, const IrGatherDnums *gd, const IrI64List *sizes, int32_t operand, int32_t idx)
{
    const IrShape *os = gb_shape(b, operand), *is = gb_shape(b, idx);
    int64_t hi_of[IR_MAX_RANK];
    for (int32_t c = 0; c < gd->start_index_map.n; c++) {
        int64_t d = gd->start_index_map.v[c];
        hi_of[c] = os->dims[d] - (sizes->n > d ? sizes->v[d] : 1);
    }
    int32_t hi;
    if (gd->index_vector_dim >= is->rank || gd->start_index_map.n == 1) {
        hi = gb_full_like(b, idx, (double)hi_of[0]);
    } else {   /* component c of the index vector: its own bound */
        IrShape ps = *is;
        IrAttrs a = {.x = &ir_no_attrs_x};
        a.iota_dimension = gd->index_vector_dim;
        int32_t comp = gb_emit(b, OP_IOTA, &ps, 0, NULL, &a, 0, NULL);
        hi = gb_full_like(b, idx, (double)hi_of[gd->start_index_map.n - 1]);
        for (int32_t c = (int32_t)gd->start_index_map.n - 2; c >= 0; c--)
            hi = gb_select(b, gb_cmp(b, comp, gb_full_like(b, comp, c), CMP_EQ), gb_full_like(b, idx, (double)hi_of[c]),
                           hi);
    }
    int32_t lo = gb_full_like(b, idx, 0);
    return gb_bin(b, OP_MAXIMUM, gb_bin(b, OP_MINIMUM, idx, hi), lo);
}

static int32_t clamped_starts(GB *b, const IrInstr *ins)
{
    return clamp_starts(b, &ins->a.x->gather, &ins->a.x->slice_sizes, ins->opnd[0], ins->opnd[1]);
}

static IrStatus rule_gather(Rev *r, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0];
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.scatter = scatter_of(&ins->a.x->gather);
    ax.indices_are_sorted = ins->a.x->indices_are_sorted;
    int32_t comp = gb_sum_comp(r->g, gb_shape(b, x)->type);
    int32_t o[3] = {gb_full_like(b, x, 0), clamped_starts(b, ins), g};
    if (comp < 0)
        return r->g->d->status;
    return rev_acc(r, x, 0, gb_emit(b, OP_SCATTER, NULL, 3, o, &a, 1, &comp));
}

/* Is computation ci `ROOT parameter(1)` (a scatter that overwrites)? */
static bool overwrites(const IrModule *m, int32_t ci)
{
    const IrComputation *c = m->comp[ci];
    const IrInstr *root = &c->instr[c->root];
    return root->op == OP_PARAMETER && root->a.parameter_number == 1;
}

/* v (of the scatter's operand shape) read back at the positions each
 * update of scatter `ins` went to: a gather with the scatter's dimension
 * numbers, of the updates' shape. *inb receives the pred mask (updates'
 * shape) of the updates the scatter applied: it skips an update whose
 * window is not wholly inside the operand (XLA's semantics; JAX's .at[i]
 * with i out of range, its default "drop" mode), where the gather reads
 * at the clamped start instead. In bounds: every index equal to its clamp. */
static int32_t gather_at(GB *b, const IrInstr *ins, int32_t v, int32_t *inb)
{
    const IrScatterDnums *sd = &ins->a.x->scatter;
    IrShape xs = *gb_shape(b, ins->opnd[0]), us = *gb_shape(b, ins->opnd[2]);
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.gather = (IrGatherDnums){.offset_dims = sd->update_window_dims,
                               .collapsed_slice_dims = sd->inserted_window_dims,
                               .start_index_map = sd->scatter_dims_to_operand_dims,
                               .operand_batching_dims = sd->input_batching_dims,
                               .start_indices_batching_dims = sd->scatter_indices_batching_dims,
                               .index_vector_dim = sd->index_vector_dim};
    /* slice sizes: 1 on inserted and batching dimensions, the update
     * window's size on the others, in order. */
    int64_t sizes[IR_MAX_RANK];
    for (int32_t d = 0, w = 0; d < xs.rank; d++)
        sizes[d] = ir_list_has(&sd->inserted_window_dims, d) || ir_list_has(&sd->input_batching_dims, d)
                       ? 1 : us.dims[sd->update_window_dims.v[w++]];
    ax.slice_sizes = gb_ilist(b->g, xs.rank, sizes);
    int32_t idx = ins->opnd[1], o[2] = {v, idx};
    int32_t got = gb_emit(b, OP_GATHER, NULL, 2, o, &a, 0, NULL);
    IrShape is = *gb_shape(b, idx);
    int64_t ivd = sd->index_vector_dim;
    int32_t in = gb_cmp(b, clamp_starts(b, &ax.gather, &ax.slice_sizes, ins->opnd[0], idx), idx, CMP_EQ);
    if (ivd < is.rank) {
        int32_t ones = gb_select(b, in, gb_full_like(b, idx, 1), gb_full_like(b, idx, 0));
        in = gb_sum(b, ones, 1, &ivd);
        in = gb_cmp(b, in, gb_full_like(b, in, (double)is.dims[ivd]), CMP_EQ);
    }
    /* in's dims are the updates' scatter dims (those not in the window), in order. */
    int64_t sdims[IR_MAX_RANK];
    int32_t ns = 0;
    for (int32_t d = 0; d < us.rank; d++)
        if (!ir_list_has(&sd->update_window_dims, d))
            sdims[ns++] = d;
    *inb = gb_bcast(b, in, IR_PRED, us.rank, us.dims, ns, sdims);
    return got;
}

/* gather_at, 0 at the updates the scatter skipped (their gradient: JAX's
 * transpose gathers in FILL_OR_DROP mode). */
static int32_t gather_updates(Rev *r, const IrInstr *ins, int32_t v)
{
    GB *b = &r->b;
    int32_t inb, got = gather_at(b, ins, v, &inb);
    return gb_select(b, inb, got, gb_full_like(b, got, 0));
}

/* The scatter of v (updates' shape) by add with ins's dimension numbers
 * into zeros of the operand's shape. */
static int32_t scatter_add_like(GB *b, const IrInstr *ins, int32_t v)
{
    int32_t add = gb_sum_comp(b->g, gb_shape(b, v)->type);
    if (add < 0)
        return -1;
    int32_t o[3] = {gb_full_like(b, ins->opnd[0], 0), ins->opnd[1], v};
    return gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, &add);
}

/* scatter by maximum or minimum (jax.ops.segment_max, x.at[i].max(u)),
 * JAX's rule (_scatter_extremal_jvp): at an element e of y, the updates
 * that landed there with y's value (S of them) and the operand when it
 * equals y (r = 1, else 0) share the derivative evenly, 1/(S + r) each; an
 * element no update reached is the operand's. Returns in part[0] the
 * operand's share (its shape) and in part[1] each update's (the updates'
 * shape: 1/(S + r) where it is one of S, else 0, skipped updates too).
 * Shared with forward mode (forward.c). */
void grad_scatter_extremal(GB *b, const IrInstr *ins, int32_t self, int32_t part[2])
{
    int32_t x = ins->opnd[0], u = ins->opnd[2], inb;
    int32_t at = gather_at(b, ins, self, &inb);
    int32_t one_u = gb_full_like(b, u, 1), zero_u = gb_full_like(b, u, 0);
    int32_t succ = gb_bin(b, OP_AND, inb, gb_cmp(b, u, at, CMP_EQ));
    int32_t cnt = scatter_add_like(b, ins, gb_select(b, succ, one_u, zero_u));
    int32_t refs = scatter_add_like(b, ins, one_u);
    int32_t zero_x = gb_full_like(b, x, 0), one_x = gb_full_like(b, x, 1);
    int32_t r = gb_select(b, gb_cmp(b, x, self, CMP_EQ), one_x, zero_x);
    int32_t den = gb_bin(b, OP_ADD, cnt, r);
    int32_t inv = gb_select(b, gb_cmp(b, den, zero_x, CMP_GT), gb_bin(b, OP_DIVIDE, one_x, den), zero_x);
    part[0] = gb_select(b, gb_cmp(b, refs, zero_x, CMP_EQ), one_x, gb_bin(b, OP_MULTIPLY, r, inv));
    int32_t inb2;
    part[1] = gb_select(b, succ, gather_at(b, ins, inv, &inb2), zero_u);
}

/* scatter by multiply (JAX's x.at[i].mul(u)): y = x * M, M the same
 * scatter of the updates into ones (the product of the updates that land
 * on each element, 1 elsewhere), so x gets g * M whatever the indices. An
 * update gets g * x at its element times the other updates there, which
 * with unique indices is gather(g * x); JAX differentiates only that case
 * (`unique_indices=True`), and so does this rule. */
static IrStatus rule_scatter_mul(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t x = ins->opnd[0], u = ins->opnd[2];
    if (rev_on(r, u) && !ins->a.x->unique_indices)
        return rev_no_rule(r, i, "a scatter by multiply has a gradient for its updates only with "
                                 "unique_indices=true (JAX's x.at[i].mul(u, unique_indices=True))");
    if (rev_on(r, x)) {
        int32_t o[3] = {gb_full_like(b, x, 1), ins->opnd[1], u};
        rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, g, gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, ins->called)));
    }
    if (rev_on(r, u))
        rev_acc(r, u, 0, gather_updates(r, ins, gb_bin(b, OP_MULTIPLY, g, x)));
    return r->g->d->status;
}

static IrStatus rule_scatter(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    if (ins->nopnd != 3)
        return rev_no_rule(r, i, "a scatter of several operands");
    int32_t x = ins->opnd[0], idx = ins->opnd[1], u = ins->opnd[2];
    IrOpcode red = ir_simple_reducer(r->g->m, ins->called[0]);
    if (red == OP_MULTIPLY)
        return rule_scatter_mul(r, i, ins, g);
    if (red == OP_MAXIMUM || red == OP_MINIMUM) {
        int32_t part[2];
        grad_scatter_extremal(b, ins, i, part);
        if (rev_on(r, x))
            rev_acc(r, x, 0, gb_bin(b, OP_MULTIPLY, g, part[0]));
        if (rev_on(r, u)) {
            int32_t inb;
            rev_acc(r, u, 0, gb_bin(b, OP_MULTIPLY, gather_at(b, ins, g, &inb), part[1]));
        }
        return r->g->d->status;
    }
    bool add = red == OP_ADD;
    if (!add && !overwrites(r->g->m, ins->called[0]))
        return rev_no_rule(r, i, "only scatters that add, multiply, overwrite or take the maximum or minimum have one");
    if (rev_on(r, x)) {
        int32_t gx = g;
        if (!add) {
            int32_t o[3] = {g, idx, gb_full_like(b, u, 0)};
            gx = gb_emit(b, OP_SCATTER, NULL, 3, o, &ins->a, 1, ins->called);
        }
        rev_acc(r, x, 0, gx);
    }
    if (rev_on(r, u))
        rev_acc(r, u, 0, gather_updates(r, ins, g));
    return r->g->d->status;
}

IrStatus rev_data(Rev *r, int32_t i, const IrInstr *ins)
{
    GB *b = &r->b;
    int32_t g = rev_leaf(r, i, 0);
    if (g < 0)
        return IR_OK;
    int32_t x = ins->opnd[0];
    switch (ins->op) {
    case OP_BROADCAST: return rule_broadcast(r, i, ins, g);
    case OP_RESHAPE: case OP_BITCAST: {
        IrShape xs = *gb_shape(b, x);
        return rev_acc(r, x, 0, gb_reshape(b, g, xs.rank, xs.dims));
    }
    case OP_TRANSPOSE: {
        int64_t inv[IR_MAX_RANK];
        for (int32_t k = 0; k < ins->a.dimensions.n; k++)
            inv[ins->a.dimensions.v[k]] = k;
        return rev_acc(r, x, 0, gb_transpose(b, g, inv));
    }
    case OP_SLICE: return rule_slice(r, ins, g);
    case OP_PAD: return rule_pad(r, ins, g);
    case OP_CONCATENATE: return rule_concat(r, ins, g);
    case OP_REVERSE: {
        IrAttrs a = {.x = &ir_no_attrs_x};
        a.dimensions = ins->a.dimensions;
        a.has_dimensions = true;
        return rev_acc(r, x, 0, gb_emit(b, OP_REVERSE, NULL, 1, &g, &a, 0, NULL));
    }
    case OP_DYNAMIC_SLICE: case OP_DYNAMIC_UPDATE_SLICE: return rule_dynamic(r, ins, g);
    case OP_GATHER: return rule_gather(r, ins, g);
    case OP_SCATTER: return rule_scatter(r, i, ins, g);
    default: return rev_no_rule(r, i, NULL);
    }
}
