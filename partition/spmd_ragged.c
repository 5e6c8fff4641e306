/*
 * spmd_ragged.c: the ragged-dot handler, as dot over its group dimension.
 *
 * Rule (the ragged dim a free or batch dim of lhs; shd_ragged_dot_maps):
 *   - contracting dim tiled on lhs (one contracting dim): lhs and rhs keep
 *     only their contracting tiles, padding of an uneven contracting dim
 *     zeroed on both, each device computes the partial ragged-dot of its
 *     slice of the sum (the groups run along the ragged rows, which every
 *     device holds whole) and an all-reduce over the contracting tiles adds
 *     the partials: the result is then replicated and sliced to its
 *     sharding;
 *   - otherwise the result's tiles on the dims the map allows (rhs free
 *     dims; batch and lhs free dims but the ragged one when group_sizes is
 *     one-dimensional) stay local: lhs and rhs take those tiles, the group
 *     and contracting dims whole, group_sizes replicated; the result's
 *     other tiles are cut from the local result afterwards.
 * Example (2 devices): r = f32[7,4] ragged-dot(l f32[7,5], w f32[3,5,4],
 * g s32[3]), lhs_contracting_dims={1}, rhs_contracting_dims={1},
 * lhs_ragged_dims={0}, rhs_group_dims={0}:
 *   w {devices=[1,1,2]0,1}, r {devices=[1,2]0,1}: l replicated, each device
 *     multiplies by its two columns of every group's matrix: local;
 *   l {devices=[1,2]0,1} (contracting, 5 = 3 + 2 and a padding column):
 *     w {devices=[1,2,1]0,1}, local partials f32[7,4], all-reduce {{0,1}}.
 * The ragged dim contracting (groups along the sum): fallback.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* inv[map[r]] = r for mapped r, -1 elsewhere (ninv entries). */
static void invert(const int64_t *map, int32_t n, int64_t *inv, int32_t ninv)
{
    for (int32_t d = 0; d < ninv; d++)
        inv[d] = -1;
    for (int32_t r = 0; r < n; r++)
        if (map[r] >= 0 && map[r] < ninv)
            inv[map[r]] = r;
}

/* Zero the padding of v (operand k's shard under s) along its contracting
 * dim c. */
static int32_t mask_dim(PComp *pc, int32_t i, int32_t k, int32_t v, const IrSharding *s, int64_t c)
{
    const IrShape *full = &pc->sc->instr[pc->sc->instr[i].opnd[k]].shape;
    if (shd_tiles(s, (int32_t)c) <= 1 || full->dims[c] % shd_tiles(s, (int32_t)c) == 0)
        return v;
    return spmd_mask_padding(pc, v, full, s, spmd_emit_scalar_const(pc, full->type, 0));
}

/* The contracting case: lhs tiled along its one contracting dim. */
static IrStatus contracting(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    const IrDotDnums *dn = &ins->a.dot;
    const IrShape *ls = &pc->sc->instr[ins->opnd[0]].shape, *rs = &pc->sc->instr[ins->opnd[1]].shape;
    int64_t lc = dn->lhs_contracting.v[0], rc = dn->rhs_contracting.v[0];
    int64_t keep[IR_MAX_RANK], rmap[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t d = 0; d < ls->rank; d++)
        if (d != lc)
            keep[n++] = d;
    for (int32_t d = 0; d < rs->rank; d++)
        rmap[d] = d == rc ? lc : -1;
    IrSharding *lsh = shd_replicate_dims(a, pc->shd[ins->opnd[0]], n, keep);
    IrSharding *rsh = lsh ? shd_project(a, lsh, rs->rank, rmap) : NULL;
    if (!lsh || !rsh)
        return spmd_oom(pc);
    int32_t ops[3] = {mask_dim(pc, i, 0, spmd_operand_as(pc, i, 0, lsh), lsh, lc),
                      mask_dim(pc, i, 1, spmd_operand_as(pc, i, 1, rsh), rsh, rc),
                      spmd_operand_as(pc, i, 2, &repl_sharding)};
    int32_t v = spmd_emit_clone(pc, ins, &ins->shape, 3, ops, 0, NULL);
    int32_t ng, size;
    int64_t *groups;
    if (!shd_groups_along(pc, lsh, 1, &lc, &ng, &size, &groups))
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_finish_partial(pc, v, &ins->shape, &repl_sharding, OP_ADD, ng, size, groups, pc->shd[i]));
}

IrStatus spmd_ragged_dot(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    if (ins->nopnd != 3 || ins->shape.type == IR_TUPLE)
        return spmd_fallback(pc, i);
    const IrShape *ls = &pc->sc->instr[ins->opnd[0]].shape, *rs = &pc->sc->instr[ins->opnd[1]].shape;
    const IrShape *gs = &pc->sc->instr[ins->opnd[2]].shape;
    int64_t fl[IR_MAX_RANK], fr[IR_MAX_RANK];
    if (ins->shape.rank > IR_MAX_RANK || !shd_ragged_dot_maps(ins, ls, rs, gs, fl, fr))
        return spmd_fallback(pc, i);
    const IrSharding *lsh = pc->shd[ins->opnd[0]];
    const IrDotDnums *dn = &ins->a.dot;
    if (dn->lhs_contracting.n == 1 && lsh->kind == SHD_TILED &&
        shd_tiles(lsh, (int32_t)dn->lhs_contracting.v[0]) > 1 && !shd_has_manual_subgroup(lsh))
        return contracting(pc, i);
    /* The result's tiles on the dims that may stay local. */
    const IrSharding *out = pc->shd[i]->kind == SHD_TILED ? pc->shd[i] : &repl_sharding;
    int64_t off[IR_MAX_RANK], inv_l[IR_MAX_RANK], inv_r[IR_MAX_RANK];
    int32_t noff = 0;
    for (int32_t r = 0; r < ins->shape.rank; r++)
        if (fl[r] < 0 && fr[r] < 0)
            off[noff++] = r;
    IrSharding *it = shd_replicate_dims(a, out, noff, off);
    if (!it)
        return spmd_oom(pc);
    invert(fl, ins->shape.rank, inv_l, ls->rank);
    invert(fr, ins->shape.rank, inv_r, rs->rank);
    IrSharding *l_t = shd_project(a, it, ls->rank, inv_l), *r_t = shd_project(a, it, rs->rank, inv_r);
    IrShape local;
    if (!l_t || !r_t || shd_shard_shape(a, &ins->shape, it, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t ops[3] = {spmd_operand_as(pc, i, 0, l_t), spmd_operand_as(pc, i, 1, r_t), spmd_operand_as(pc, i, 2, &repl_sharding)};
    int32_t v = spmd_emit_clone(pc, ins, &local, 3, ops, 0, NULL);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, it, pc->shd[i]));
}
