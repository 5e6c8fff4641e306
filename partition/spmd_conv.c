/*
 * spmd_conv.c: the convolution handler, and the halo exchange it shares
 * with reduce-window (spmd_window.c).
 *
 * A convolution's iteration space has one dim for the batch (B), one for
 * the output feature (O), one for the input feature (I, contracted) and one
 * per spatial dim (S0, S1, ...). A tiling of that space fixes how each
 * operand must be sharded for a local convolution, as for a dot:
 *   input  takes (B, I, S...), replicated over O;
 *   kernel takes (O, I), replicated over B and S (its spatial dims are the
 *          window: never tiled);
 *   output takes (B, O, S...); where I is tiled the local results are
 *          partial sums completed by an all-reduce over the I tiles.
 * Tiled spatial dims need a halo exchange (spmd_halo below). Candidate
 * tilings come from the output's, the input's and the kernel's sharding;
 * the cheapest by spmd_reshard_cost wins (ties: output, input, kernel).
 *
 * Example (2 devices): x f32[4,9,9,2] {devices=[2,1,1,1]0,1} (batch), kernel
 * replicated, output {devices=[2,1,1,1]0,1}: from the output, the input
 * keeps its tiles and the kernel stays replicated: a local convolution of
 * f32[2,9,9,2], no communication.
 *
 * Grouped convolutions: feature_group_count > 1 ties input features to
 * output features group by group, so only B and spatial dims may be tiled;
 * batch_group_count > 1 ties batch to output features: fallback.
 */
#include "spmd_internal.h"

#include <string.h>

static int64_t dflt1(int64_t v)
{
    return v > 0 ? v : 1;
}

/* ---- halo exchange ---- */

/* Halo plan along one dim of a windowed op (convolution, reduce-window).
 *
 * Rule: with `t` tiles, input shards of si = ceil(In/t) and output shards of
 * so = ceil(Out/t), output position o reads input positions
 * o*stride - pad_lo + k*rhs_dilate, k in [0, size). Device j (tile
 * coordinate j) therefore needs the input range [a_j, a_j + L) with
 * a_j = j*so*stride - pad_lo and L = (so-1)*stride + (size-1)*rhs_dilate + 1,
 * while it holds [j*si, (j+1)*si). It extends its shard by lo rows on the
 * left and hi on the right (the maxima over devices that hold some valid
 * output), exchanging at most one shard's worth with each neighbour and
 * padding the rest; then it masks every row whose global index is outside
 * [0, In) with the padding value (the window's padding at the true edges,
 * and the padding of uneven shards), and slices L rows at a_j - (j*si - lo).
 * The windowed op then runs with no padding on that dim.
 *
 * Example: In = Out = 8, size 3, pad 1_1, stride 1, t = 2: si = so = 4,
 * L = 6, a_0 = -1, a_1 = 3: lo = 1, hi = 1; device 0 builds rows
 * [-1, 5) (row -1 masked to 0), device 1 rows [3, 9) (row 8 masked): both
 * slice at offset 0. Valid outputs must never need data beyond a neighbour
 * shard (checked: else the caller falls back), and base dilation is not
 * supported. */
bool spmd_halo_plan(int64_t in, int64_t out, int64_t t, const IrWindowDim *w, SpmdHalo *h)
{
    memset(h, 0, sizeof *h);
    int64_t stride = dflt1(w->stride), rd = dflt1(w->rhs_dilate);
    if (dflt1(w->lhs_dilate) != 1 || t < 2 || in < 1 || out < 1 || w->size < 1)
        return false;
    h->t = t;
    h->in = in;
    h->si = shd_shard_size(in, t);
    h->so = shd_shard_size(out, t);
    h->L = (h->so - 1) * stride + (w->size - 1) * rd + 1;
    int64_t lo = 0, hi = 0;
    for (int64_t j = 0; j < t; j++) {
        int64_t valid = out - j * h->so;
        if (valid <= 0)
            continue; /* outputs all padding: any data will do */
        if (valid > h->so)
            valid = h->so;
        int64_t a = j * h->so * stride - w->pad_lo;
        int64_t own = j * h->si;
        if (own - a > lo)
            lo = own - a;
        if (a + h->L - (own + h->si) > hi)
            hi = a + h->L - (own + h->si);
        /* The data that valid outputs read must lie within the neighbours. */
        int64_t b = a + (valid - 1) * stride + (w->size - 1) * rd + 1;
        int64_t da = a > 0 ? a : 0, db = b < in ? b : in;
        if (da < db && (own - da > h->si || db - (own + h->si) > h->si))
            return false;
    }
    h->lo = lo;
    h->hi = hi;
    h->lo_ex = lo < h->si ? lo : h->si;
    h->hi_ex = hi < h->si ? hi : h->si;
    h->stride = stride;
    h->pad_lo = w->pad_lo;
    return true;
}

bool spmd_halo_rows(int64_t in, int64_t out, int64_t t, const IrWindowDim *w, int64_t *lo, int64_t *hi)
{
    SpmdHalo h;
    *lo = *hi = 0;
    if (!spmd_halo_plan(in, out, t, w, &h))
        return false;
    *lo = h.lo_ex;
    *hi = h.hi_ex;
    return true;
}

/* A window wider than a neighbour's shard (a halo plan fails: rhs
 * dilation, large padding): gather the whole dim, pad it by the window's
 * padding (and enough rows after it that every device's rows exist), and
 * let device j slice the L rows its outputs read, at j*so*stride of the
 * padded dim. Each device then computes only its own outputs, so the work
 * is split as for a halo; only the gather costs more.
 * Example (PaddedConvReshard, 4 tiles of 256 columns): size 3, pad
 * 128_128, rhs_dilate 128: so = 64, L = 63 + 256 + 1 = 320; the gathered
 * 256 columns padded to 128 + 256 + 128 (no more needed: the last device
 * ends at 192 + 320 = 512), device j slices [64j, 64j + 320). */
static bool halo_plan_gathered(int64_t in, int64_t out, int64_t t, const IrWindowDim *w, SpmdHalo *h)
{
    memset(h, 0, sizeof *h);
    int64_t stride = dflt1(w->stride), rd = dflt1(w->rhs_dilate);
    if (dflt1(w->lhs_dilate) != 1 || t < 2 || in < 1 || out < 1 || w->size < 1 || w->pad_lo < 0 ||
        w->pad_hi < 0)
        return false;
    h->gathered = true;
    h->t = t;
    h->in = in;
    h->so = shd_shard_size(out, t);
    h->L = (h->so - 1) * stride + (w->size - 1) * rd + 1;
    h->stride = stride;
    h->pad_lo = w->pad_lo;
    int64_t end = (t - 1) * h->so * stride + h->L;
    h->pad_hi = end > in + w->pad_lo ? end - in - w->pad_lo : 0;
    return true;
}

/* The L rows of gathered dim d of v that this device's outputs read (its
 * tile coordinate along iteration dim it_dim of iter). */
static int32_t gathered_window(PComp *pc, int32_t v, int32_t d, const SpmdHalo *h, const IrSharding *iter,
                               int32_t it_dim, int32_t padval)
{
    if (v < 0 || padval < 0)
        return -1;
    int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK] = {0};
    lo[d] = h->pad_lo;
    hi[d] = h->pad_hi;
    int32_t padded = spmd_emit_pad(pc, v, padval, lo, hi);
    if (padded < 0)
        return -1;
    int64_t n = pc->sp->n;
    int64_t *off = ir_alloc_array(spmd_arena(pc), (size_t)n, sizeof(int64_t));
    if (!off)
        return spmd_oom_value(pc);
    int64_t c[IR_MAX_RANK + 2];
    for (int64_t p = 0; p < n; p++)
        off[p] = shd_device_coords(iter, p, c) ? c[it_dim] * h->so * h->stride : 0;
    const IrShape *ps = spmd_val_shape(pc, padded);
    int32_t rank = ps->rank;
    int32_t starts[IR_MAX_RANK];
    int64_t sizes[IR_MAX_RANK];
    for (int32_t k = 0; k < rank; k++)
        sizes[k] = ps->dims[k];
    int32_t zero = spmd_emit_s32(pc, 0);
    for (int32_t k = 0; k < rank; k++)
        starts[k] = zero;
    starts[d] = spmd_emit_table_lookup(pc, off);
    sizes[d] = h->L;
    return spmd_emit_dynamic_slice(pc, padded, starts, sizes);
}

/* Concatenate a, b, c (any may be -1 = absent, b present) along dim d. */
static int32_t concat3(PComp *pc, int32_t a, int32_t b, int32_t c, int32_t d)
{
    int32_t ops[3], n = 0;
    if (a >= 0)
        ops[n++] = a;
    ops[n++] = b;
    if (c >= 0)
        ops[n++] = c;
    if (n == 1)
        return b;
    IrShape s;
    const IrShape *bs = spmd_val_shape(pc, b);
    if (ir_shape_make(spmd_arena(pc), &s, bs->type, bs->rank, bs->dims) != IR_OK)
        return spmd_oom_value(pc);
    s.dims[d] = 0;
    for (int32_t k = 0; k < n; k++)
        s.dims[d] += spmd_val_shape(pc, ops[k])->dims[d];
    int32_t r = spmd_emit(pc, OP_CONCATENATE, &s, n, ops);
    if (r < 0)
        return -1;
    int64_t *dim = ir_alloc(spmd_arena(pc), sizeof(int64_t));
    if (!dim)
        return spmd_oom_value(pc);
    *dim = d;
    IrAttrs *at = &pc->dc->instr[r].a;
    at->dimensions.n = 1;
    at->dimensions.v = dim;
    at->has_dimensions = true;
    return r;
}

/* Rows [from, to) of v along d. */
static int32_t rows(PComp *pc, int32_t v, int32_t d, int64_t from, int64_t to)
{
    const IrShape *s = spmd_val_shape(pc, v);
    int64_t start[IR_MAX_RANK], limit[IR_MAX_RANK];
    for (int32_t k = 0; k < s->rank; k++) {
        start[k] = 0;
        limit[k] = s->dims[k];
    }
    start[d] = from;
    limit[d] = to;
    return spmd_emit_slice(pc, v, start, limit);
}

/* Send `piece` to the neighbour at tile coordinate j+step along dim d of s
 * (devices at the far edge send nothing; those at the near edge receive
 * zeros, which the mask then replaces). */
static int32_t shift(PComp *pc, int32_t piece, const IrSharding *s, int32_t d, int64_t step)
{
    int64_t n = pc->sp->n;
    int64_t *pairs = ts_malloc((size_t)(2 * n) * sizeof(int64_t));
    if (!pairs)
        return spmd_oom_value(pc);
    int32_t np = 0;
    int64_t c[IR_MAX_RANK + 2];
    for (int64_t dev = 0; dev < n; dev++) {
        if (!shd_device_coords(s, dev, c))
            continue;
        c[d] += step;
        if (c[d] < 0 || c[d] >= s->tile[d])
            continue;
        pairs[2 * np] = dev;
        pairs[2 * np + 1] = shd_device_at(s, c);
        np++;
    }
    int32_t r = spmd_emit_collective_permute(pc, piece, np, pairs);
    ts_free(pairs);
    return r;
}

/* Keep rows whose global index (table[pid] + iota) is in [0, in); the
 * others become `padval`. */
static int32_t mask_rows(PComp *pc, int32_t v, int32_t d, const int64_t *table, int64_t in,
                         int32_t padval)
{
    if (v < 0 || padval < 0)
        return -1;
    /* Copies: spmd_val_shape points into the instruction array, which every
     * emit may move. */
    const IrShape *ls = spmd_val_shape(pc, v);
    IrShape is, vs;
    if (ir_shape_make(spmd_arena(pc), &is, IR_S32, ls->rank, ls->dims) != IR_OK ||
        ir_shape_make(spmd_arena(pc), &vs, ls->type, ls->rank, ls->dims) != IR_OK)
        return spmd_oom_value(pc);
    int32_t io = spmd_emit_iota(pc, &is, d);
    int32_t off = spmd_emit_broadcast(pc, spmd_emit_table_lookup(pc, table), &is, 0, NULL);
    int32_t g = spmd_emit_binary(pc, OP_ADD, io, off);
    int32_t ge = spmd_emit_compare(pc, g, spmd_emit_broadcast(pc, spmd_emit_s32(pc, 0), &is, 0, NULL), CMP_GE);
    int32_t lt = spmd_emit_compare(pc, g, spmd_emit_broadcast(pc, spmd_emit_s32(pc, in), &is, 0, NULL), CMP_LT);
    int32_t ok = spmd_emit_binary(pc, OP_AND, ge, lt);
    return spmd_emit_select(pc, ok, v, spmd_emit_broadcast(pc, padval, &vs, 0, NULL));
}

int32_t spmd_halo(PComp *pc, int32_t v, const IrSharding *s, int32_t d, const SpmdHalo *h,
                  int32_t padval)
{
    if (v < 0 || padval < 0)
        return -1;
    int64_t si = h->si;
    int32_t left = -1, right = -1;
    if (h->lo_ex > 0)
        left = shift(pc, rows(pc, v, d, si - h->lo_ex, si), s, d, +1);
    if (h->hi_ex > 0)
        right = shift(pc, rows(pc, v, d, 0, h->hi_ex), s, d, -1);
    /* A failed piece must not pass for an absent one (concat3's -1). */
    if ((h->lo_ex > 0 && left < 0) || (h->hi_ex > 0 && right < 0))
        return -1;
    int32_t ext = concat3(pc, left, v, right, d);
    if (ext < 0)
        return -1;
    if (h->lo > h->lo_ex || h->hi > h->hi_ex) {
        int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK] = {0};
        lo[d] = h->lo - h->lo_ex;
        hi[d] = h->hi - h->hi_ex;
        ext = spmd_emit_pad(pc, ext, padval, lo, hi);
    }
    /* Per partition: global index of row 0 of ext, and the slice offset. */
    int64_t n = pc->sp->n;
    int64_t *base = ir_alloc_array(spmd_arena(pc), (size_t)n, sizeof(int64_t));
    int64_t *off = ir_alloc_array(spmd_arena(pc), (size_t)n, sizeof(int64_t));
    if (!base || !off)
        return spmd_oom_value(pc);
    int64_t c[IR_MAX_RANK + 2], room = si + h->lo + h->hi - h->L;
    bool same = true;
    for (int64_t p = 0; p < n; p++) {
        int64_t j = shd_device_coords(s, p, c) ? c[d] : 0;
        base[p] = j * si - h->lo;
        off[p] = j * h->so * h->stride - h->pad_lo - base[p];
        if (off[p] < 0)
            off[p] = 0;
        if (off[p] > room)
            off[p] = room; /* only devices whose outputs are all padding */
        same &= off[p] == off[0];
    }
    ext = mask_rows(pc, ext, d, base, h->in, padval);
    if (ext < 0)
        return -1;
    if (same)
        return rows(pc, ext, d, off[0], off[0] + h->L);
    int32_t rank = spmd_val_shape(pc, ext)->rank;
    int32_t starts[IR_MAX_RANK];
    int64_t sizes[IR_MAX_RANK];
    for (int32_t k = 0; k < rank; k++)
        sizes[k] = spmd_val_shape(pc, ext)->dims[k];
    int32_t zero = spmd_emit_s32(pc, 0);
    for (int32_t k = 0; k < rank; k++)
        starts[k] = zero;
    starts[d] = spmd_emit_table_lookup(pc, off);
    sizes[d] = h->L;
    return spmd_emit_dynamic_slice(pc, ext, starts, sizes);
}

/* ---- convolution ---- */

enum { IT_B, IT_O, IT_I, IT_S0 };

typedef struct ConvDims {
    int32_t ns, iter_rank;
    int64_t lhs_to_iter[IR_MAX_RANK], rhs_to_iter[IR_MAX_RANK], out_to_iter[IR_MAX_RANK];
    int32_t lhs_rank, rhs_rank, out_rank;
} ConvDims;

static bool conv_dims(const IrInstr *ins, const IrShape *l, const IrShape *r, ConvDims *cd)
{
    const IrConvDnums *dn = &ins->a.x->conv;
    if (!dn->present || dn->nspatial + 3 > IR_MAX_RANK || l->rank > IR_MAX_RANK ||
        r->rank > IR_MAX_RANK || ins->shape.rank > IR_MAX_RANK ||
        ins->a.x->window.rank != dn->nspatial)
        return false;
    cd->ns = dn->nspatial;
    cd->iter_rank = IT_S0 + cd->ns;
    cd->lhs_rank = l->rank;
    cd->rhs_rank = r->rank;
    cd->out_rank = ins->shape.rank;
    for (int32_t d = 0; d < IR_MAX_RANK; d++)
        cd->lhs_to_iter[d] = cd->rhs_to_iter[d] = cd->out_to_iter[d] = -1;
    cd->lhs_to_iter[dn->in_batch] = IT_B;
    cd->lhs_to_iter[dn->in_feature] = IT_I;
    cd->rhs_to_iter[dn->k_in_feature] = IT_I;
    cd->rhs_to_iter[dn->k_out_feature] = IT_O;
    cd->out_to_iter[dn->out_batch] = IT_B;
    cd->out_to_iter[dn->out_feature] = IT_O;
    for (int32_t k = 0; k < cd->ns; k++) {
        cd->lhs_to_iter[dn->in_spatial[k]] = IT_S0 + k;
        cd->out_to_iter[dn->out_spatial[k]] = IT_S0 + k;
    }
    return true;
}

/* Iteration tiling implied by an operand's sharding. */
static IrSharding *iter_from(IrArena *a, const IrSharding *s, const ConvDims *cd,
                             const int64_t *to_iter, int32_t rank)
{
    int64_t map[IR_MAX_RANK];
    for (int32_t k = 0; k < cd->iter_rank; k++)
        map[k] = -1;
    for (int32_t d = 0; d < rank; d++)
        if (to_iter[d] >= 0)
            map[to_iter[d]] = d;
    return shd_project(a, s, cd->iter_rank, map);
}

typedef struct ConvPlan {
    IrSharding *iter, *lhs, *rhs, *partial;
    bool reduce;
    SpmdHalo halo[IR_MAX_RANK];
    int64_t cost;
} ConvPlan;

/* Restrict a candidate to what the handler can do locally: no O/I tiles
 * for grouped convolutions; spatial tiles only where a halo plan exists. */
static bool plan_for(PComp *pc, int32_t i, const ConvDims *cd, IrSharding *iter, ConvPlan *p)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrConvDnums *dn = &ins->a.x->conv;
    IrArena *a = spmd_arena(pc);
    const IrInstr *l = &pc->sc->instr[ins->opnd[0]], *r = &pc->sc->instr[ins->opnd[1]];
    if (!iter)
        return false;
    int64_t drop[IR_MAX_RANK];
    int32_t nd = 0;
    if (ins->a.x->feature_group_count > 1) {
        drop[nd++] = IT_O;
        drop[nd++] = IT_I;
    }
    int64_t whole[IR_MAX_RANK]; /* input dims gathered for a wide window */
    int32_t nw = 0;
    for (int32_t k = 0; k < cd->ns; k++) {
        int64_t t = shd_tiles(iter, IT_S0 + k);
        int64_t in = l->shape.dims[dn->in_spatial[k]], out = ins->shape.dims[dn->out_spatial[k]];
        if (t <= 1 || spmd_halo_plan(in, out, t, &ins->a.x->window.dim[k], &p->halo[k]))
            continue;
        if (halo_plan_gathered(in, out, t, &ins->a.x->window.dim[k], &p->halo[k]))
            whole[nw++] = dn->in_spatial[k];
        else
            drop[nd++] = IT_S0 + k;
    }
    if (nd > 0 && !(iter = shd_replicate_dims(a, iter, nd, drop)))
        return false;
    p->iter = iter;
    p->lhs = shd_project(a, iter, cd->lhs_rank, cd->lhs_to_iter);
    if (p->lhs && nw > 0)
        p->lhs = shd_replicate_dims(a, p->lhs, nw, whole);
    p->rhs = shd_project(a, iter, cd->rhs_rank, cd->rhs_to_iter);
    p->partial = shd_project(a, iter, cd->out_rank, cd->out_to_iter);
    if (!p->lhs || !p->rhs || !p->partial)
        return false;
    p->reduce = shd_tiles(iter, IT_I) > 1;
    IrShape local;
    int64_t out_bytes = 0;
    if (shd_shard_shape(a, &ins->shape, p->partial, &local) == IR_OK)
        out_bytes = ir_shape_bytes(&local);
    p->cost = spmd_reshard_cost(&l->shape, pc->shd[ins->opnd[0]], p->lhs) +
              spmd_reshard_cost(&r->shape, pc->shd[ins->opnd[1]], p->rhs) +
              (p->reduce ? 2 * out_bytes : 0) + spmd_reshard_cost(&ins->shape, p->partial, pc->shd[i]);
    return true;
}

/* Zero the padding of v along dim d only (uneven contracted features):
 * rows whose global index (shard offset + iota) is past the dim's size.
 * (mask_rows rather than spmd_mask_padding, which keeps a spmd_val_shape pointer
 * across emits.) */
static int32_t mask_dim(PComp *pc, int32_t v, const IrShape *full, const IrSharding *s, int64_t d)
{
    if (v < 0)
        return -1;
    int64_t t = shd_tiles(s, (int32_t)d);
    if (t <= 1 || full->dims[d] % t == 0)
        return v;
    int64_t *table = shd_offset_table(pc, s, full, (int32_t)d);
    if (!table)
        return spmd_oom_value(pc);
    return mask_rows(pc, v, (int32_t)d, table, full->dims[d], spmd_emit_scalar_const(pc, full->type, 0));
}

IrStatus spmd_convolution(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    const IrInstr *l = &pc->sc->instr[ins->opnd[0]], *r = &pc->sc->instr[ins->opnd[1]];
    const IrSharding *ls = pc->shd[ins->opnd[0]], *rs = pc->shd[ins->opnd[1]];
    ConvDims cd;
    if (ls->kind == SHD_MANUAL || rs->kind == SHD_MANUAL || pc->shd[i]->kind == SHD_TUPLE ||
        ins->a.x->batch_group_count > 1 || !conv_dims(ins, &l->shape, &r->shape, &cd))
        return spmd_fallback(pc, i);

    IrSharding *cand[3] = {
        iter_from(a, pc->shd[i], &cd, cd.out_to_iter, cd.out_rank),
        iter_from(a, ls, &cd, cd.lhs_to_iter, cd.lhs_rank),
        iter_from(a, rs, &cd, cd.rhs_to_iter, cd.rhs_rank),
    };
    ConvPlan *best = ts_malloc(2 * sizeof(ConvPlan));
    if (!best)
        return spmd_set_val(pc, i, spmd_oom_value(pc));
    ConvPlan *p = best + 1;
    bool have = false;
    for (int32_t c = 0; c < 3; c++)
        if (plan_for(pc, i, &cd, cand[c], p) && (!have || p->cost < best->cost)) {
            *best = *p;
            have = true;
        }
    if (!have || shd_total_tiles(best->iter) <= 1) {
        ts_free(best);
        return spmd_fallback(pc, i);
    }

    const IrConvDnums *dn = &ins->a.x->conv;
    int32_t lv = spmd_operand_as(pc, i, 0, best->lhs);
    int32_t rv = spmd_operand_as(pc, i, 1, best->rhs);
    if (best->reduce) {
        lv = mask_dim(pc, lv, &l->shape, best->lhs, dn->in_feature);
        rv = mask_dim(pc, rv, &r->shape, best->rhs, dn->k_in_feature);
    }
    bool halo[IR_MAX_RANK] = {false};
    for (int32_t k = 0; k < cd.ns && lv >= 0; k++)
        if (shd_tiles(best->iter, IT_S0 + k) > 1) {
            halo[k] = true;
            int32_t zero = spmd_emit_scalar_const(pc, l->shape.type, 0);
            lv = best->halo[k].gathered
                     ? gathered_window(pc, lv, (int32_t)dn->in_spatial[k], &best->halo[k], best->iter, IT_S0 + k, zero)
                     : spmd_halo(pc, lv, best->lhs, (int32_t)dn->in_spatial[k], &best->halo[k], zero);
        }
    /* A narrow float (f16 ...) contracted across devices: each device's
     * partial is the convolution of its operands widened to f32 (exact),
     * the partials are summed in f32 and the result rounded to the type
     * once, as the reference computes the whole convolution (device/k_conv.c
     * accumulates f16 and bf16 in f32). Partials rounded to f16 could
     * overflow where the whole sum does not: x f16[1,1,4] = [60000, 60000,
     * -60000, -60000] (features) convolved with ones over 2 devices was
     * inf + -inf = NaN partitioned, 0 in the reference. */
    bool wide = best->reduce && spmd_partial_type(pc->sp->src, pc->sc, ins) != ins->shape.type;
    IrShape local, full;
    int32_t v = -1;
    if (ir_shape_copy(a, &full, &ins->shape) != IR_OK)
        lv = spmd_oom_value(pc);
    if (lv >= 0 && rv >= 0 && shd_shard_shape(a, &ins->shape, best->partial, &local) == IR_OK) {
        if (wide) {
            lv = spmd_emit_convert(pc, lv, IR_F32);
            rv = spmd_emit_convert(pc, rv, IR_F32);
            local.type = full.type = IR_F32;
        }
        int32_t ops[2] = {lv, rv};
        v = lv >= 0 && rv >= 0 ? spmd_emit_clone(pc, ins, &local, 2, ops, 0, NULL) : -1;
    }
    if (v >= 0)
        for (int32_t k = 0; k < cd.ns; k++)
            if (halo[k]) {
                pc->dc->instr[v].a.x->window.dim[k].pad_lo = 0;
                pc->dc->instr[v].a.x->window.dim[k].pad_hi = 0;
            }
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL, idim = IT_I;
    if (v >= 0 && best->reduce && !shd_groups_along(pc, best->iter, 1, &idim, &ng, &size, &groups))
        v = spmd_oom_value(pc);
    IrSharding *partial = best->partial;
    ts_free(best);
    v = spmd_finish_partial(pc, v, &full, partial, OP_ADD, ng, size, groups, pc->shd[i]);
    return spmd_set_val(pc, i, wide && v >= 0 ? spmd_emit_convert(pc, v, ins->shape.type) : v);
}
