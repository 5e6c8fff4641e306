/*
 * strategy_window.c: the roles of reduce-window and select-and-scatter,
 * as partition/spmd_window.c runs them sharded.
 *
 * Both slide a window over every dim of their operand, output dim d
 * computed from operand dim d. A dim whose window is one row (size 1,
 * stride 1, no padding, no dilation: a pooling's batch and feature dims)
 * is tiled like an elementwise op's, nothing exchanged. A dim with a real
 * window (a spatial dim) is tiled for reduce-window where the reducer is
 * a simple op (add, max, ...: the halo's padding rows take its identity)
 * and the partitioner's halo plan works for that many tiles: each device
 * takes the rows its windows reach from its neighbours (a
 * collective-permute each way), priced as alpha + bytes x beta per
 * direction (the all-to-all's rates over 2 devices). A max-pool
 * f32[8,32,32,16] window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}
 * with its rows (dim 1) over 4 devices: each device pools its 8 rows and
 * one row of its left neighbour's (the window's first row at 2j - 1),
 * 1 x 32 x 16 floats, 2 KB a device. Select-and-scatter tiles only the
 * dims with one-row windows (the partitioner falls back otherwise).
 *
 * A convolution's spatial dims take the same halo (partition/spmd_conv.c
 * plans both): output spatial dim k computed from input spatial dim k
 * under window dim k, tiled where the halo plan exists (no base dilation,
 * no window reaching past a neighbour's rows), unequal tiles too (the
 * partitioner masks the padding rows): conv_spatial_stride's 15 rows,
 * stride 2, over 8 devices, each device's 2 rows and the one its left
 * neighbour holds.
 */
#include "strategy_internal.h"

static int64_t dflt1(int64_t v)
{
    return v > 0 ? v : 1;
}

static bool one_row(const IrWindowDim *w)
{
    return w->size == 1 && dflt1(w->stride) == 1 && w->pad_lo == 0 && w->pad_hi == 0 && dflt1(w->lhs_dilate) == 1 &&
           dflt1(w->rhs_dilate) == 1;
}

/* Output dim d of windowed op x: the input dim it is computed from and
 * its window (false: no spatial dim of a convolution, whose batch and
 * features have no window). */
static bool window_of(const IrInstr *x, int32_t d, int32_t *in_dim, const IrWindowDim **w)
{
    if (x->op != OP_CONVOLUTION) {
        *in_dim = d;
        *w = &x->a.x->window.dim[d];
        return d < x->a.x->window.rank;
    }
    const IrConvDnums *cd = &x->a.x->conv;
    for (int32_t k = 0; k < cd->nspatial && k < x->a.x->window.rank; k++)
        if (cd->out_spatial[k] == d) {
            *in_dim = (int32_t)cd->in_spatial[k];
            *w = &x->a.x->window.dim[k];
            return true;
        }
    return false;
}

/* Can reduce-window (a simple reducer: the shapes divided evenly) or
 * convolution x tile its output dim d `t` ways with a halo exchange? */
static bool halo_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t, int64_t *lo, int64_t *hi)
{
    int32_t id;
    const IrWindowDim *w;
    if (!window_of(x, d, &id, &w))
        return false;
    int64_t in = c->instr[x->opnd[0]].shape.dims[id], out = x->shape.dims[d];
    return (x->op == OP_CONVOLUTION || (in % t == 0 && out % t == 0)) && spmd_halo_rows(in, out, t, w, lo, hi);
}

bool auto_window_roles(Roles *r, const IrModule *mod, const IrComputation *c, const IrInstr *x)
{
    bool sas = x->op == OP_SELECT_AND_SCATTER;
    const IrShape *in = x->nopnd ? &c->instr[x->opnd[0]].shape : NULL;
    if (x->nopnd != (sas ? 3 : 2) || !x->a.x || x->a.x->window.rank != x->shape.rank || in->rank != x->shape.rank ||
        x->ncalled != (sas ? 2 : 1) || !mod)
        return false;
    const IrShape *windows = sas ? &c->instr[x->opnd[1]].shape : &x->shape;
    bool simple = !sas && ir_simple_reducer(mod, x->called[0]) != OP_COUNT;
    double volume = 1;
    for (int32_t d = 0; d < x->shape.rank; d++) {
        const IrWindowDim *w = &x->a.x->window.dim[d];
        r->map[0][d] = (int8_t)d;
        if (sas)
            r->map[1][d] = (int8_t)d;
        r->tileable[d] = one_row(w) || simple;
        volume *= (double)dflt1(w->size);
    }
    r->uneven = true; /* one-row dims only: auto_window_tiles_ok */
    r->flops = (double)ir_shape_elements(windows) * volume;
    return true;
}

bool auto_window_tiles_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t)
{
    int64_t lo, hi;
    return t <= 1 || one_row(&x->a.x->window.dim[d]) ||
           (x->op == OP_REDUCE_WINDOW && halo_ok(c, x, d, t, &lo, &hi));
}

bool auto_conv_tiles_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t)
{
    int32_t id;
    const IrWindowDim *w;
    int64_t lo, hi;
    return t <= 1 || !window_of(x, d, &id, &w) || halo_ok(c, x, d, t, &lo, &hi);
}

/* The bytes of x's input shard under output spec `out`: its dims tiled
 * as the output dims they give (a convolution's batch and spatial dims;
 * its features are no output dim of the input's, replicated over the
 * output features), each its largest (padded) tile. */
static double input_shard(const AutoMesh *m, const IrComputation *c, const IrInstr *x, const AutoSpec *out)
{
    const IrShape *in = &c->instr[x->opnd[0]].shape;
    double shard = (double)ir_shape_bytes(in);
    for (int32_t d = 0; d < x->shape.rank; d++) {
        int32_t id;
        const IrWindowDim *w;
        if (x->op == OP_CONVOLUTION && d == x->a.x->conv.out_batch)
            id = (int32_t)x->a.x->conv.in_batch;
        else if (!window_of(x, d, &id, &w))
            continue;
        int64_t t = auto_spec_tiles(m, out, d);
        if (t > 1 && in->dims[id] > 0)
            shard *= (double)((in->dims[id] + t - 1) / t) / (double)in->dims[id];
    }
    return shard;
}

/* Elementwise passes over the input's shard that mask its rows outside
 * the dim (partition/spmd_conv.c's mask_rows, for every tiled spatial
 * dim, halo or none: an iota, its offset, two compares, an and, a
 * select). */
#define MASK_PASSES 6

double auto_conv_mask_seconds(const AutoMesh *m, const AutoCost *cost, const IrComputation *c, const IrInstr *x,
                              const AutoSpec *out)
{
    if (x->op != OP_CONVOLUTION)
        return 0;
    int32_t id;
    const IrWindowDim *w;
    int32_t tiled = 0;
    for (int32_t d = 0; d < x->shape.rank; d++)
        tiled += auto_spec_tiles(m, out, d) > 1 && window_of(x, d, &id, &w);
    return tiled * MASK_PASSES * input_shard(m, c, x, out) / cost->bytes;
}

double auto_window_halo_seconds(const AutoMesh *m, const AutoCost *cost, int64_t local, const IrComputation *c,
                                const IrInstr *x, const AutoSpec *out)
{
    const IrShape *in = &c->instr[x->opnd[0]].shape;
    double shard = input_shard(m, c, x, out);
    double t = 0;
    for (int32_t d = 0; d < x->shape.rank; d++) {
        int64_t tiles = auto_spec_tiles(m, out, d), lo, hi;
        int32_t id;
        const IrWindowDim *w;
        if (tiles <= 1 || !window_of(x, d, &id, &w) || one_row(w) || !halo_ok(c, x, d, tiles, &lo, &hi))
            continue;
        unsigned axes = 0;
        for (int32_t a = 0; a < m->naxes; a++)
            if (out->dim[a] == d)
                axes |= 1u << a;
        int scope = auto_axes_scope(m, axes, local);
        double row = shard / (double)((in->dims[id] + tiles - 1) / tiles);
        /* One collective-permute each way: alpha + bytes x beta (the
         * all-to-all's rates over 2 devices move half their buffer). */
        if (lo > 0)
            t += auto_coll_seconds(cost, AUTO_ALL_TO_ALL, 2, scope, 2 * row * (double)lo);
        if (hi > 0)
            t += auto_coll_seconds(cost, AUTO_ALL_TO_ALL, 2, scope, 2 * row * (double)hi);
    }
    return t;
}
