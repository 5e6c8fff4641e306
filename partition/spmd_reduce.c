/*
 * spmd_reduce.c: the reduce handler.
 *
 * Rule: with one input and a reducer tessel recognises (add, multiply,
 * max, min, and, or, xor), each device reduces its own shard and an
 * all-reduce with the same reducer combines the devices that hold different
 * tiles of the reduced dims. Two details keep the result exact:
 *   - padding of uneven reduced dims is replaced by the reducer's identity;
 *   - the init value is applied by one device per group only (the others
 *     use the identity), so a non-identity init (sum with init 5) is counted
 *     once, as in the unpartitioned reduce.
 * Example: reduce(f32[8,6] {devices=[1,2]0,1}, 0), dimensions={1}, add:
 * each device sums its f32[8,3] over dim 1, then all-reduce {{0,1}} adds the
 * two f32[8] partial sums; the result is replicated.
 * Variadic reduces and other reducers: the reduced dims are gathered first
 * (reshard to a sharding that leaves them untiled), then a local reduce.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

static IrStatus oom(PComp *pc)
{
    return ir_error(pc->sp->d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory while partitioning");
}

/* pred[]: true on the device whose coordinates along `dims` are all 0. */
static int32_t first_in_group(PComp *pc, const IrSharding *s, int32_t ndims, const int64_t *dims)
{
    int64_t n = pc->sp->n;
    int64_t *tab = ir_alloc_array(pc_arena(pc), (size_t)n, sizeof(int64_t));
    if (!tab)
        return -1;
    int64_t c[IR_MAX_RANK + 2];
    for (int64_t p = 0; p < n; p++) {
        tab[p] = 1;
        if (shd_device_coords(s, p, c))
            for (int32_t k = 0; k < ndims; k++)
                if (c[dims[k]] != 0)
                    tab[p] = 0;
    }
    int32_t v = emit_table_lookup(pc, tab);
    return emit_compare(pc, v, emit_s32(pc, 1), CMP_EQ);
}

/* Gather the reduced dims, then reduce locally. */
static IrStatus reduce_gathered(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = pc_tmp(pc);
    int32_t n = ins->nopnd / 2;
    const IrSharding *in0 = pc->shd[ins->opnd[0]];
    if (in0->kind != SHD_TILED)
        in0 = &repl_sharding;
    IrSharding *keep = shd_replicate_dims(a, in0, ins->a.dimensions.n, ins->a.dimensions.v);
    IrSharding *out = keep ? shd_remove_dims(a, keep, ins->a.dimensions.n, ins->a.dimensions.v) : NULL;
    IrSharding *outs = out ? shd_broadcast_to_shape(a, out, &ins->shape) : NULL;
    if (!outs)
        return oom(pc);
    int32_t ops[ins->nopnd];
    /* Inits: replicated (within manual groups, when the input has them). */
    int64_t all[IR_MAX_RANK];
    for (int32_t d = 0; d < ir_sharding_data_rank(keep); d++)
        all[d] = d;
    const IrSharding *init_s = keep->kind == SHD_TILED && shd_has_manual_subgroup(keep)
                                   ? shd_replicate_dims(a, keep, ir_sharding_data_rank(keep), all)
                                   : &repl_sharding;
    if (!init_s)
        return oom(pc);
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = operand_as(pc, i, k, k < n ? keep : init_s);
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, outs, &local) != IR_OK)
        return oom(pc);
    int32_t called = spmd_scalar_comp(pc->sp, ins->called[0]);
    if (called < 0)
        return oom(pc);
    int32_t v = emit_clone(pc, ins, &local, ins->nopnd, ops, 1, &called);
    return set_val(pc, i, reshard(pc, v, &ins->shape, outs, pc->shd[i]));
}

IrStatus spmd_reduce(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = pc_tmp(pc);
    IrOpcode red = ir_simple_reducer(pc->sp->src, ins->called[0]);
    const IrSharding *in = pc->shd[ins->opnd[0]];
    const IrShape *ishape = &pc->sc->instr[ins->opnd[0]].shape;
    if (ins->nopnd != 2 || red == OP_COUNT || in->kind != SHD_TILED)
        return reduce_gathered(pc, i);
    const IrI64List *dims = &ins->a.dimensions;
    int64_t tiled[IR_MAX_RANK], other[IR_MAX_RANK];
    int32_t nt = 0, no = 0;
    for (int32_t d = 0; d < ishape->rank; d++) {
        bool reduced = false;
        for (int32_t k = 0; k < dims->n; k++)
            reduced |= dims->v[k] == d;
        if (reduced && shd_tiles(in, d) > 1)
            tiled[nt++] = d;
        else
            other[no++] = d;
    }
    IrSharding *partial = shd_remove_dims(a, in, dims->n, dims->v);
    if (!partial)
        return oom(pc);
    IrType t = ishape->type;
    int32_t v = pc->val[ins->opnd[0]];
    int64_t all[IR_MAX_RANK];
    for (int32_t d = 0; d < ir_sharding_data_rank(in); d++)
        all[d] = d;
    const IrSharding *init_s = shd_has_manual_subgroup(in) ? shd_replicate_dims(a, in, ir_sharding_data_rank(in), all)
                                                           : &repl_sharding;
    if (!init_s)
        return oom(pc);
    int32_t init = operand_as(pc, i, 1, init_s);
    if (nt > 0) {
        /* Padding along tiled reduced dims becomes the identity; the init
         * value is used by the first device of each group only. */
        IrSharding *only = shd_replicate_dims(a, in, no, other);
        int32_t ident = emit_identity_const(pc, t, red);
        if (!only)
            return oom(pc);
        v = mask_padding(pc, v, ishape, only, ident);
        init = emit_select(pc, first_in_group(pc, in, nt, tiled), init, ident);
    }
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, partial, &local) != IR_OK)
        return oom(pc);
    int32_t called = spmd_scalar_comp(pc->sp, ins->called[0]);
    if (called < 0)
        return oom(pc);
    int32_t ops[2] = {v, init};
    int32_t r = emit_clone(pc, ins, &local, 2, ops, 1, &called);
    if (nt > 0) {
        int32_t ng, size;
        int64_t *groups;
        if (!shd_groups_along(pc, in, nt, tiled, &ng, &size, &groups))
            return oom(pc);
        r = emit_all_reduce(pc, r, red, ng, size, groups);
    }
    return set_val(pc, i, reshard(pc, r, &ins->shape, partial, pc->shd[i]));
}
