/*
 * spmd_control.c: handlers for while, conditional and call, and for the
 * custom-calls that carry sharding information.
 *
 * Control flow: the called computations are partitioned for this call site,
 * with the shardings of the values they carry:
 *   while: the init operand, the body's parameter and root, the condition's
 *     parameter and the while's result all have the while's sharding (the
 *     loop state keeps one sharding across iterations); the condition's
 *     pred is replicated;
 *   conditional: each branch's parameter takes the sharding propagation gave
 *     it (else its operand's), every branch root ends in the conditional's
 *     sharding; the predicate / branch index is replicated;
 *   call: parameters as the callee's parameters say (else the operands'),
 *     root as the call's sharding;
 *   fusion: a call (its fused computation partitioned with the operands'
 *     shardings, the fusion kind kept): r = f32[8,4] fusion(x, y),
 *     kind=kLoop, calls=f with x, y, r {devices=[2,1]0,1} calls a copy of f
 *     whose parameters and root are f32[4,4].
 * Custom-calls: `Sharding` is a reshard to its annotation;
 * `SPMDFullToShardShape` turns this device's shard of a tiled value into the
 * manual value it is; `SPMDShardToFullShape` the reverse. Other custom-calls
 * run per device in manual regions, else through the fallback.
 */
#include "spmd_internal.h"

#include <string.h>

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* Sharding for parameter p of computation `comp`, else `fallback`. */
static const IrSharding *param_sharding(PComp *pc, int32_t comp, int32_t p, const IrSharding *fallback)
{
    const IrComputation *c = pc->sp->src->comp[comp];
    if (p < c->nparam && c->param[p] >= 0 && c->instr[c->param[p]].sharding)
        return c->instr[c->param[p]].sharding;
    return fallback;
}

static IrStatus emit_control(PComp *pc, int32_t i, const int32_t *ops, const int32_t *called)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrShape local;
    if (shd_shard_shape(spmd_arena(pc), &ins->shape, pc->shd[i], &local) != IR_OK)
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, ins->ncalled, called));
}

IrStatus spmd_control(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    Spmd *sp = pc->sp;
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    int32_t called[ins->ncalled > 0 ? ins->ncalled : 1];
    const IrSharding *s = pc->shd[i];
    if (ins->op == OP_WHILE) {
        ops[0] = spmd_operand_as(pc, i, 0, s);
        called[0] = spmd_partition_computation(sp, ins->called[0], &s, &repl_sharding);
        called[1] = spmd_partition_computation(sp, ins->called[1], &s, s);
        if (called[0] < 0 || called[1] < 0)
            return spmd_set_val(pc, i, -1);
        return emit_control(pc, i, ops, called);
    }
    int32_t first = ins->op == OP_CONDITIONAL ? 1 : 0;
    if (first)
        ops[0] = spmd_operand_as(pc, i, 0, &repl_sharding);
    for (int32_t k = first; k < ins->nopnd; k++) {
        int32_t comp = ins->op == OP_CONDITIONAL ? ins->called[k - 1] : ins->called[0];
        int32_t pnum = ins->op == OP_CONDITIONAL ? 0 : k;
        const IrSharding *ps = param_sharding(pc, comp, pnum, pc->shd[ins->opnd[k]]);
        ops[k] = spmd_operand_as(pc, i, k, ps);
    }
    for (int32_t c = 0; c < ins->ncalled; c++) {
        int32_t comp = ins->called[c];
        const IrComputation *cc = sp->src->comp[comp];
        const IrSharding **ps = ts_malloc((size_t)(cc->nparam > 0 ? cc->nparam : 1) * sizeof *ps);
        if (!ps)
            return spmd_oom(pc);
        for (int32_t p = 0; p < cc->nparam; p++) {
            int32_t opk = ins->op == OP_CONDITIONAL ? c + 1 : p;
            ps[p] = param_sharding(pc, comp, p, opk < ins->nopnd ? pc->shd[ins->opnd[opk]] : &repl_sharding);
        }
        called[c] = spmd_partition_computation(sp, comp, ps, s);
        ts_free(ps);
        if (called[c] < 0)
            return spmd_set_val(pc, i, -1);
    }
    return emit_control(pc, i, ops, called);
}

static bool target_is(const IrInstr *ins, const char *name)
{
    return ins->a.x->custom_call_target && strcmp(ins->a.x->custom_call_target, name) == 0;
}

IrStatus spmd_custom_call(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    /* Identities: the operand's shards, resharded to the result's
     * sharding (none when propagation passed it through). */
    if ((target_is(ins, "Sharding") && ins->nopnd == 1) ||
        (shd_identity_custom_call(ins, NULL) &&
         ir_shape_equal(&pc->sc->instr[ins->opnd[0]].shape, &ins->shape)))
        return spmd_set_val(pc, i, spmd_operand_as(pc, i, 0, pc->shd[i]));
    if (target_is(ins, "SPMDFullToShardShape") && ins->nopnd == 1) {
        /* The operand's shard is the manual value; cut padding if the
         * declared shard shape is smaller. */
        int32_t o = ins->opnd[0];
        int32_t v = pc->val[o];
        if (v < 0)
            return spmd_set_val(pc, i, -1);
        const IrShape *vs = spmd_val_shape(pc, v);
        int64_t start[IR_MAX_RANK] = {0}, limit[IR_MAX_RANK];
        if (vs->rank != ins->shape.rank)
            return spmd_fallback(pc, i);
        for (int32_t d = 0; d < vs->rank; d++)
            limit[d] = ins->shape.dims[d] < vs->dims[d] ? ins->shape.dims[d] : vs->dims[d];
        return spmd_set_val(pc, i, spmd_emit_slice(pc, v, start, limit));
    }
    if (target_is(ins, "SPMDShardToFullShape") && ins->nopnd == 1) {
        int32_t v = pc->val[ins->opnd[0]];
        IrShape local;
        if (v < 0 || shd_shard_shape(a, &ins->shape, pc->shd[i], &local) != IR_OK)
            return spmd_set_val(pc, i, -1);
        const IrShape *vs = spmd_val_shape(pc, v);
        if (vs->rank != local.rank)
            return spmd_fallback(pc, i);
        int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK];
        for (int32_t d = 0; d < vs->rank; d++)
            hi[d] = local.dims[d] - vs->dims[d];
        return spmd_set_val(pc, i, spmd_emit_pad(pc, v, spmd_emit_scalar_const(pc, vs->type, 0), lo, hi));
    }
    const IrSharding *s = pc->shd[i];
    bool manual = s->kind == SHD_TUPLE ? (s->ntuple > 0 && shd_is_manual(&s->tuple[0])) : shd_is_manual(s);
    if (ir_is_topk(ins) && !manual)
        return spmd_local_batch(pc, i); /* XLA's TopK: as the topk op, rows on their devices */
    if (ir_batch_custom_call(ins) >= 0 && !manual)
        return spmd_local_batch_custom(pc, i); /* QR, LU: each device its own matrices */
    if (manual) {
        int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
        int32_t called[ins->ncalled > 0 ? ins->ncalled : 1];
        IrSharding *m = shd_manual(a);
        for (int32_t k = 0; k < ins->nopnd; k++)
            ops[k] = spmd_operand_as(pc, i, k, m);
        for (int32_t k = 0; k < ins->ncalled; k++)
            if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
                return spmd_oom(pc);
        return spmd_set_val(pc, i, spmd_emit_clone(pc, ins, &ins->shape, ins->nopnd, ops, ins->ncalled, called));
    }
    return spmd_fallback(pc, i);
}
