/*
 * spmd_window.c: handlers for reduce-window and select-and-scatter.
 *
 * Both slide a window over every dim of their operand. A tiled dim whose
 * window is the identity (size 1, stride 1, no padding, no dilation) needs
 * nothing from other devices; a tiled dim with a real window needs the rows
 * of its neighbours (the halo exchange of spmd_conv.c, padding with the
 * init value). Dims that cannot be done that way are replicated and the
 * result resharded; select-and-scatter only runs locally when its tiled
 * dims have identity windows, else it falls back.
 */
#include "spmd_internal.h"

#include <string.h>

static int64_t dflt1(int64_t v)
{
    return v > 0 ? v : 1;
}

static bool identity_window(const IrWindowDim *w)
{
    return w->size == 1 && dflt1(w->stride) == 1 && w->pad_lo == 0 && w->pad_hi == 0 &&
           dflt1(w->lhs_dilate) == 1;
}

/* A candidate sharding for the operand and result (same rank, dims 1:1)
 * with the dims that neither have an identity window nor a halo plan
 * replicated; halo[d] filled for the dims that need one. */
static IrSharding *window_plan(PComp *pc, const IrInstr *ins, const IrShape *in,
                               const IrSharding *cand, bool can_halo, SpmdHalo *halo, bool *need)
{
    int64_t drop[IR_MAX_RANK];
    int32_t nd = 0;
    for (int32_t d = 0; d < in->rank; d++) {
        need[d] = false;
        int64_t t = shd_tiles(cand, d);
        const IrWindowDim *w = &ins->a.x->window.dim[d];
        if (t <= 1 || identity_window(w))
            continue;
        if (can_halo && spmd_halo_plan(in->dims[d], ins->shape.dims[d], t, w, &halo[d]))
            need[d] = true;
        else
            drop[nd++] = d;
    }
    if (nd == 0)
        return shd_normalize(spmd_arena(pc), cand);
    return shd_replicate_dims(spmd_arena(pc), cand, nd, drop);
}

/* reduce-window (one operand): the result's sharding, or the operand's if
 * cheaper, restricted by window_plan; operand resharded to it, init
 * replicated; halo dims extended and run without padding.
 *
 * The halo's padding rows must add nothing to a window: XLA's padding
 * positions are skipped, not combined, and the init enters each window once
 * (sum over a window with init 5 is 5 + the values, however much padding).
 * So they are filled with the reducer's identity (0 for add, -inf for max),
 * and halos are only used when the reducer is a simple op (add, max, ...).
 *
 * Example: max-pool f32[8] window={size=3 pad=1_1} on {devices=[2]0,1}:
 * each device receives one row from each neighbour (collective-permute),
 * pads the outer edge with -inf and pools its 6 rows into 4. */
static IrStatus reduce_window1(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrShape *in = &pc->sc->instr[ins->opnd[0]].shape;
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    if (in->rank > IR_MAX_RANK || ins->a.x->window.rank != in->rank || ins->shape.rank != in->rank)
        return spmd_fallback(pc, i);
    SpmdHalo *halo = ts_malloc(2 * (size_t)IR_MAX_RANK * sizeof(SpmdHalo));
    if (!halo)
        return spmd_oom(pc);
    bool need[2][IR_MAX_RANK];
    IrOpcode red = ins->ncalled == 1 ? ir_simple_reducer(pc->sp->src, ins->called[0]) : OP_COUNT;
    const IrSharding *cands[2] = {pc->shd[i], pc->shd[ins->opnd[0]]};
    IrSharding *best = NULL;
    int32_t bi = 0;
    int64_t best_cost = 0;
    for (int32_t c = 0; c < 2; c++) {
        if (cands[c]->kind != SHD_TILED || shd_has_manual_subgroup(cands[c]))
            continue;
        IrSharding *s = window_plan(pc, ins, in, cands[c], red != OP_COUNT, halo + c * IR_MAX_RANK, need[c]);
        if (!s) {
            ts_free(halo);
            return spmd_oom(pc);
        }
        int64_t cost = spmd_reshard_cost(in, pc->shd[ins->opnd[0]], s) +
                       spmd_reshard_cost(&ins->shape, s, pc->shd[i]);
        if (shd_total_tiles(s) > 1 && (!best || cost < best_cost)) {
            best = s;
            bi = c;
            best_cost = cost;
        }
    }
    if (!best) {
        ts_free(halo);
        return spmd_fallback(pc, i);
    }
    int32_t v = spmd_operand_as(pc, i, 0, best);
    int32_t init = spmd_operand_as(pc, i, 1, &repl);
    int32_t ident = -1;
    for (int32_t d = 0; d < in->rank && v >= 0; d++)
        if (need[bi][d]) {
            if (ident < 0)
                ident = spmd_emit_identity_const(pc, in->type, red);
            v = spmd_halo(pc, v, best, d, &halo[bi * IR_MAX_RANK + d], ident);
        }
    IrShape local;
    int32_t called[1] = {-1};
    int32_t r = -1;
    if (v >= 0 && init >= 0 && ins->ncalled == 1 &&
        (called[0] = spmd_scalar_comp(pc->sp, ins->called[0])) >= 0 &&
        shd_shard_shape(spmd_arena(pc), &ins->shape, best, &local) == IR_OK) {
        int32_t ops[2] = {v, init};
        r = spmd_emit_clone(pc, ins, &local, 2, ops, 1, called);
    }
    if (r >= 0)
        for (int32_t d = 0; d < in->rank; d++)
            if (need[bi][d]) {
                pc->dc->instr[r].a.x->window.dim[d].pad_lo = 0;
                pc->dc->instr[r].a.x->window.dim[d].pad_hi = 0;
            }
    ts_free(halo);
    return spmd_set_val(pc, i, spmd_reshard(pc, r, &ins->shape, best, pc->shd[i]));
}

/* select-and-scatter: local when every tiled dim of the result's sharding
 * has an identity window (operand and source then share the result's
 * tiles on those dims, the init is replicated). Example: window
 * {size=1x2 stride=1x2} over f32[4,8] on {devices=[2,1]0,1}: each device
 * scatters its two rows. Otherwise fall back. */
static IrStatus select_and_scatter(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *s = pc->shd[i];
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    if (s->kind != SHD_TILED || shd_has_manual_subgroup(s) || ins->a.x->window.rank != ins->shape.rank ||
        ins->ncalled != 2)
        return spmd_fallback(pc, i);
    for (int32_t d = 0; d < ins->shape.rank; d++)
        if (shd_tiles(s, d) > 1 && !identity_window(&ins->a.x->window.dim[d]))
            return spmd_fallback(pc, i);
    int32_t ops[3] = {spmd_operand_as(pc, i, 0, s), spmd_operand_as(pc, i, 1, s), spmd_operand_as(pc, i, 2, &repl)};
    int32_t called[2];
    for (int32_t k = 0; k < 2; k++)
        if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
            return spmd_oom(pc);
    IrShape local;
    if (shd_shard_shape(spmd_arena(pc), &ins->shape, s, &local) != IR_OK)
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_emit_clone(pc, ins, &local, 3, ops, 2, called));
}

IrStatus spmd_reduce_window(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (ins->op == OP_SELECT_AND_SCATTER)
        return select_and_scatter(pc, i);
    if (ins->nopnd != 2 || ins->shape.type == IR_TUPLE)
        return spmd_fallback(pc, i); /* variadic reduce-window */
    return reduce_window1(pc, i);
}
