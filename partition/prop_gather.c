/*
 * prop_gather.c: sharding propagation through gather and scatter.
 *
 *   gather: the result's offset dims from the operand's passthrough dims
 *     and its batch dims from the indices (gather_maps), both ways, like a
 *     dot (prop_dot.c);
 *   scatter: the result (each result of a variadic scatter) and the
 *     operands alike; an update's passthrough window dims take the
 *     result's tiles and give theirs to it, and so do the indices' and the
 *     updates' batching dims (scatter_indices_batching_dims and the
 *     updates dims along them) with the operand's input_batching_dims.
 */
#include "prop_internal.h"

/* Gather: result dims are offset dims (offset_dims, the kept slice dims of
 * the operand in order) and batch dims (the rest, in order, one per
 * indices dim other than index_vector_dim). from_op[r]: the operand dim of
 * a passthrough offset dim (slice size = whole operand dim) or of an
 * operand batching dim; from_idx[r]: the indices dim of a batch dim.
 * Example: operand f32[8,16], indices s32[4,1], offset_dims={1},
 * collapsed_slice_dims={0}, slice_sizes={1,16}: out f32[4,16]; out dim 0
 * <- indices dim 0, out dim 1 <- operand dim 1 (16 = 16, passthrough). */
static bool gather_maps(const IrInstr *x, const IrShape *op, const IrShape *idx, int64_t *from_op,
                        int64_t *from_idx)
{
    const IrGatherDnums *g = &x->a.x->gather;
    int32_t r = x->shape.rank;
    for (int32_t i = 0; i < r; i++)
        from_op[i] = from_idx[i] = -1;
    int64_t bdim_of_idx[IR_MAX_RANK + 1];
    for (int32_t i = 0; i <= IR_MAX_RANK; i++)
        bdim_of_idx[i] = -1;
    int32_t ii = 0;
    for (int32_t o = 0; o < r; o++) {
        if (prop_has(&g->offset_dims, o))
            continue;
        while (ii < idx->rank && ii == g->index_vector_dim)
            ii++;
        if (ii >= idx->rank)
            return false;
        from_idx[o] = ii;
        bdim_of_idx[ii] = o;
        ii++;
    }
    int32_t j = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        if (prop_has(&g->collapsed_slice_dims, d) || prop_has(&g->operand_batching_dims, d))
            continue;
        if (j >= g->offset_dims.n)
            return false;
        int64_t o = g->offset_dims.v[j++];
        if (o < 0 || o >= r)
            return false;
        if (d < x->a.x->slice_sizes.n && x->a.x->slice_sizes.v[d] == op->dims[d])
            from_op[o] = d;
    }
    for (int32_t i = 0; i < g->operand_batching_dims.n && i < g->start_indices_batching_dims.n;
         i++) {
        int64_t id = g->start_indices_batching_dims.v[i];
        if (id >= 0 && id < idx->rank && bdim_of_idx[id] >= 0)
            from_op[bdim_of_idx[id]] = g->operand_batching_dims.v[i];
    }
    return true;
}

/* Scatter: indices dim -> operand dim for the batching dims
 * (scatter_indices_batching_dims[k] runs along input_batching_dims[k]);
 * false when there are none (the indices then give and take nothing). */
static bool scatter_indices_map(const IrInstr *x, const IrShape *op, const IrShape *idx, int64_t *idx_to_op)
{
    const IrScatterDnums *sd = &x->a.x->scatter;
    for (int32_t i = 0; i < idx->rank; i++)
        idx_to_op[i] = -1;
    for (int32_t k = 0; k < sd->scatter_indices_batching_dims.n && k < sd->input_batching_dims.n; k++) {
        int64_t i = sd->scatter_indices_batching_dims.v[k], d = sd->input_batching_dims.v[k];
        if (i >= 0 && i < idx->rank && d >= 0 && d < op->rank)
            idx_to_op[i] = d;
    }
    return sd->scatter_indices_batching_dims.n > 0;
}

/* Scatter: update dim u -> operand dim for passthrough window dims
 * (update_window_dims in order match the operand dims that are neither
 * inserted nor batching, and the sizes are equal) and for the scatter dims
 * along a batching dim (the k-th scatter dim of the updates is the k-th
 * indices dim other than index_vector_dim). Example (take_along_axis's
 * gradient): operand f32[8,10], indices s32[8,1,1], updates f32[8,1],
 * update_window_dims={}, input_batching_dims={0},
 * scatter_indices_batching_dims={0}, index_vector_dim=2: updates dim 0 is
 * indices dim 0, so operand dim 0. */
static bool scatter_update_map(const IrInstr *x, const IrShape *op, const IrShape *upd,
                               int64_t *upd_to_op)
{
    const IrScatterDnums *sd = &x->a.x->scatter;
    for (int32_t i = 0; i < upd->rank; i++)
        upd_to_op[i] = -1;
    int64_t ix = 0;
    for (int32_t u = 0; u < upd->rank; u++) {
        if (prop_has(&sd->update_window_dims, u))
            continue;
        if (ix == sd->index_vector_dim)
            ix++;
        int32_t k = ir_list_index(&sd->scatter_indices_batching_dims, ix++);
        if (k >= 0 && k < sd->input_batching_dims.n && sd->input_batching_dims.v[k] >= 0 &&
            sd->input_batching_dims.v[k] < op->rank)
            upd_to_op[u] = sd->input_batching_dims.v[k];
    }
    int32_t j = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        if (prop_has(&sd->inserted_window_dims, d) || prop_has(&sd->input_batching_dims, d))
            continue;
        if (j >= sd->update_window_dims.n)
            return false;
        int64_t u = sd->update_window_dims.v[j++];
        if (u < 0 || u >= upd->rank)
            return false;
        if (upd->dims[u] == op->dims[d])
            upd_to_op[u] = d;
    }
    return true;
}

static IrStatus gather_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    return prop_maps_fwd(p, g, k, s, os, gather_maps);
}

static IrStatus gather_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us)
{
    return prop_maps_bwd(p, u, k, g, s, us, gather_maps);
}

/* Operands 0..n-1 are the bases, n the indices, n+1..2n the updates. */
static IrStatus scatter_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    int64_t map[IR_MAX_RANK], map2[IR_MAX_RANK];
    const IrSharding *t = NULL;
    bool out_array = ir_shape_is_array(&x->shape);
    int32_t n = (x->nopnd - 1) / 2;
    if (k < n)
        return prop_emit(p, g, out_array ? 0 : k, s, os);
    if (k == n) { /* the indices: every result along the batching dims */
        const IrShape *base = &prop_ins(p, prop_opnd(p, g, 0))->shape;
        if (!scatter_indices_map(x, base, os, map))
            return IR_OK;
        prop_invert(map, os->rank, map2, base->rank);
        NEED(t = shd_project(p->tmp, s, base->rank, map2));
        for (int32_t j = 0; j < n; j++)
            TRY(prop_emit(p, g, out_array ? 0 : j, t, os));
        return IR_OK;
    }
    if (k > 2 * n)
        return IR_OK;
    int32_t j = k - n - 1;
    const IrShape *base = &prop_ins(p, prop_opnd(p, g, j))->shape;
    if (!scatter_update_map(x, base, os, map))
        return IR_OK;
    prop_invert(map, os->rank, map2, base->rank);
    NEED(t = shd_project(p->tmp, s, base->rank, map2));
    return prop_emit(p, g, out_array ? 0 : j, t, os);
}

static IrStatus scatter_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                            const IrShape *us)
{
    IrInstr *x = prop_ins(p, u);
    const IrShape *gs = &prop_ins(p, g)->shape;
    int64_t map[IR_MAX_RANK];
    const IrSharding *t = NULL;
    int32_t n = (x->nopnd - 1) / 2;
    if (k < n)
        return prop_emit(p, g, 0, s, us);
    if (k == n) {
        if (!scatter_indices_map(x, us, gs, map))
            return IR_OK;
        NEED(t = shd_project(p->tmp, s, gs->rank, map));
        return prop_emit(p, g, 0, t, us);
    }
    if (k > 2 * n)
        return IR_OK;
    if (!scatter_update_map(x, us, gs, map))
        return IR_OK;
    NEED(t = shd_project(p->tmp, s, gs->rank, map));
    return prop_emit(p, g, 0, t, us);
}

/* Base i and update i correspond to result i; the indices to result 0
 * (every result has the same batching dims). */
static int32_t scatter_slot(const Prop *p, int32_t u, int32_t k)
{
    int32_t n = (prop_ins(p, u)->nopnd - 1) / 2;
    return k < n ? k : k > n ? k - n - 1 : 0;
}

const PropRule prop_rule_gather = {.fwd = gather_fwd, .bwd = gather_bwd};
const PropRule prop_rule_scatter = {.fwd = scatter_fwd, .bwd = scatter_bwd, .slot = scatter_slot};
