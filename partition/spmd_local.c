/*
 * spmd_local.c: handlers for the ops that work on whole trailing
 * dimensions and treat every leading index alone: fft, topk (the op and
 * XLA's TopK custom-call), cholesky and triangular-solve, and the matrix
 * factorizations' custom-calls (QR, LU: spmd_local_batch_custom).
 *
 * The common rule: the op's "whole" dims (the transformed dims of an fft,
 * the last dim of a topk, the two matrix dims of cholesky and
 * triangular-solve) must not be tiled; every other dim is a batch dim and
 * may stay tiled as it is. The handler takes the result's sharding (its
 * first element for topk's tuple), stops tiling the whole dims (their tiles
 * become replication), reshards every operand to that sharding (all
 * operands have the result's rank, and their batch dims are the result's),
 * runs the op on the per-device shapes and reshards the result back to the
 * sharding propagation gave it. Padding of an uneven batch dim stays in
 * rows of its own: no value of a valid row depends on it.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* The result's sharding (element 0 of a tuple), with data dims
 * [first, rank) untiled; NULL on OOM. */
static IrSharding *batch_only(PComp *pc, int32_t i, int32_t first)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    const IrShape *el = ins->shape.type == IR_TUPLE ? &ins->shape.tuple[0] : &ins->shape;
    const IrSharding *s = pc->shd[i];
    if (ins->shape.type == IR_TUPLE && !(s = shd_tuple_element(a, s, &ins->shape, 0)))
        return NULL;
    if (s->kind != SHD_TILED)
        s = &repl_sharding;
    int64_t dims[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t d = first < 0 ? 0 : first; d < el->rank; d++)
        dims[n++] = d;
    return shd_replicate_dims(a, s, n, dims);
}

/* Run i locally with every operand under `t` (a tuple result takes `t` on
 * every element), then reshard to the result's sharding. */
static IrStatus run_local(PComp *pc, int32_t i, const IrSharding *t)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    IrSharding *rs = shd_broadcast_to_shape(a, t, &ins->shape);
    IrShape local;
    if (!rs || shd_shard_shape(a, &ins->shape, rs, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    int32_t called[ins->ncalled > 0 ? ins->ncalled : 1]; /* a TopK custom-call's comparator */
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, t);
    for (int32_t k = 0; k < ins->ncalled; k++)
        if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
            return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, ins->ncalled, called);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, rs, pc->shd[i]));
}

/* The first whole dim of i (see the top of the file). */
static int32_t first_whole_dim(const IrInstr *ins)
{
    const IrShape *s = ins->shape.type == IR_TUPLE ? &ins->shape.tuple[0] : &ins->shape;
    if (ir_is_topk(ins))
        return s->rank - 1;
    return ins->op == OP_FFT ? s->rank - ins->a.x->fft_length.n : s->rank - 2; /* cholesky, triangular-solve */
}

/* fft: the last fft_length dims whole, leading dims local. Example:
 *   f = c64[6,5,8] fft(c), fft_type=FFT, fft_length={8}
 * with c and f {devices=[2,2,1]0,1,2,3}: dim 1 stops being tiled
 * ({devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}, an all-gather of c
 * along dim 1), each device transforms its c64[3,5,8], and the result is
 * sliced back to [2,2,1] (no communication). With f {devices=[1,1,2]0,1}
 * (the transformed dim tiled) c is gathered to replicated and each device
 * transforms the whole array before taking its slice.
 * topk: the last dim whole (values and indices of a row stay together):
 *   t = (f32[7,3], s32[7,3]) topk(x), k=3 with x f32[7,16] {devices=[3,1]0,1,2}
 * runs on each device's f32[3,16] rows (7 rows: the last device's third
 * row is padding, its top-k is never read).
 * cholesky / triangular-solve: the matrix (last two) dims whole, batch
 * dims local: l = f32[5,4,4] cholesky(a) with a {devices=[2,1,1]0,1} is a
 * cholesky of each device's f32[3,4,4]; a matrix dim tiled is gathered
 * first. triangular-solve's a [..,m,m] and b [..,m,n] take the same
 * sharding (their batch dims are the same). */
IrStatus spmd_local_batch(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (ins->shape.type == IR_TUPLE && ins->shape.ntuple < 1)
        return spmd_fallback(pc, i);
    IrSharding *t = batch_only(pc, i, first_whole_dim(ins));
    if (!t)
        return spmd_oom(pc);
    return run_local(pc, i, t);
}

/* The matrix factorizations' custom-calls (ir_batch_custom_call: Qr, the
 * Householder product, LU, the pivots' permutation): every index of the
 * leading `batch` dims alone, as cholesky's, but their operands and
 * results differ in rank (LU: (lu [..., m, n], pivots [..., p], info
 * [...]) of a [..., m, n]), so each gets the result's batch tiling on its
 * own leading dims, its other dims whole. A padded batch row (an uneven
 * batch dim) is factored like any other and never read. */
IrStatus spmd_local_batch_custom(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t batch = ir_batch_custom_call(ins);
    const IrShape *el = ins->shape.type == IR_TUPLE ? &ins->shape.tuple[0] : &ins->shape;
    IrSharding *t0 = batch_only(pc, i, batch);
    if (!t0)
        return spmd_oom(pc);
    IrArena *a = spmd_tmp(pc);
    int64_t map[IR_MAX_RANK];
    for (int32_t d = 0; d < IR_MAX_RANK; d++)
        map[d] = d < batch ? d : -1;
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++) {
        const IrShape *ks = &pc->sc->instr[ins->opnd[k]].shape;
        if (!ir_shape_is_array(ks) || ks->rank < batch)
            return spmd_fallback(pc, i);
        IrSharding *tk = shd_project(a, t0, ks->rank, map);
        if (!tk)
            return spmd_oom(pc);
        ops[k] = spmd_operand_as(pc, i, k, tk);
    }
    IrSharding *rs;
    if (ins->shape.type == IR_TUPLE) {
        IrSharding *elems[ins->shape.ntuple > 0 ? ins->shape.ntuple : 1];
        for (int32_t l = 0; l < ins->shape.ntuple; l++)
            if (!(elems[l] = shd_project(a, t0, ins->shape.tuple[l].rank, map)))
                return spmd_oom(pc);
        rs = shd_tuple(a, ins->shape.ntuple, elems);
    } else {
        rs = shd_project(a, t0, el->rank, map);
    }
    IrShape local;
    if (!rs || shd_shard_shape(a, &ins->shape, rs, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, 0, NULL);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, rs, pc->shd[i]));
}
