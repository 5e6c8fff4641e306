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

/* Can a reduce-window with a simple reducer tile its dim d `t` ways with
 * a halo exchange (the shapes divided evenly)? */
static bool halo_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t, int64_t *lo, int64_t *hi)
{
    int64_t in = c->instr[x->opnd[0]].shape.dims[d], out = x->shape.dims[d];
    return in % t == 0 && out % t == 0 && spmd_halo_rows(in, out, t, &x->a.x->window.dim[d], lo, hi);
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

double auto_window_halo_seconds(const AutoMesh *m, const AutoCost *cost, int64_t local, const IrComputation *c,
                                const IrInstr *x, const AutoSpec *out)
{
    const IrShape *in = &c->instr[x->opnd[0]].shape;
    double shard = (double)ir_shape_bytes(in);
    for (int32_t d = 0; d < in->rank; d++)
        shard /= (double)auto_spec_tiles(m, out, d);
    double t = 0;
    for (int32_t d = 0; d < in->rank; d++) {
        int64_t tiles = auto_spec_tiles(m, out, d), lo, hi;
        if (tiles <= 1 || one_row(&x->a.x->window.dim[d]) || !halo_ok(c, x, d, tiles, &lo, &hi))
            continue;
        unsigned axes = 0;
        for (int32_t a = 0; a < m->naxes; a++)
            if (out->dim[a] == d)
                axes |= 1u << a;
        int scope = auto_axes_scope(m, axes, local);
        double row = shard / (double)(in->dims[d] / tiles);
        /* One collective-permute each way: alpha + bytes x beta (the
         * all-to-all's rates over 2 devices move half their buffer). */
        if (lo > 0)
            t += auto_coll_seconds(cost, AUTO_ALL_TO_ALL, 2, scope, 2 * row * (double)lo);
        if (hi > 0)
            t += auto_coll_seconds(cost, AUTO_ALL_TO_ALL, 2, scope, 2 * row * (double)hi);
    }
    return t;
}
