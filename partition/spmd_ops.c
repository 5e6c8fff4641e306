/*
 * spmd_ops.c: handlers for elementwise ops, parameters, constants, iota,
 * tuples and the data-movement ops (broadcast, transpose, reshape, slice,
 * pad, concatenate, reverse, dynamic-slice, dynamic-update-slice, sort,
 * bitcast-convert).
 *
 * The common rule: find the operand sharding under which the op can run on
 * each device's shard alone, reshard the operands to it, emit the op with
 * per-device shapes; where no such sharding exists for the result's
 * sharding (e.g. a slice across a sharded dimension), fall back.
 */
#include "spmd_internal.h"

#include <string.h>

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* Per-device shape of source instr i under its sharding, in arena a:
 * spmd_tmp for a shape handed to spmd_emit* (which copies it), spmd_arena for one
 * an emitted instruction keeps. */
static bool local_shape(PComp *pc, IrArena *a, int32_t i, IrShape *out)
{
    return shd_shard_shape(a, &pc->sc->instr[i].shape, pc->shd[i], out) == IR_OK;
}

/* Emit source instruction i with operands ops and its per-device shape. */
static IrStatus emit_local(PComp *pc, int32_t i, const int32_t *ops)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrShape ls;
    if (!local_shape(pc, spmd_tmp(pc), i, &ls))
        return spmd_oom(pc);
    int32_t called[ins->ncalled > 0 ? ins->ncalled : 1];
    for (int32_t k = 0; k < ins->ncalled; k++)
        if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
            return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_emit_clone(pc, ins, &ls, ins->nopnd, ops, ins->ncalled, called));
}

/* Elementwise (incl. compare, select, clamp, convert): every operand
 * resharded to the result's sharding; scalar operands of select/clamp
 * replicated. Example: add(x {devices=[2,1]0,1}, y {replicated}) with
 * result [2,1]: y is sliced locally (no communication), then a local add. */
IrStatus spmd_elementwise(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++) {
        const IrShape *os = &pc->sc->instr[ins->opnd[k]].shape;
        bool scalar = os->rank == 0 && ins->shape.rank > 0;
        ops[k] = spmd_operand_as(pc, i, k, scalar ? &repl_sharding : pc->shd[i]);
    }
    return emit_local(pc, i, ops);
}

/* Parameters take their shard directly: the runtime (or the caller's
 * reshard) provides the per-device piece. */
IrStatus spmd_parameter(PComp *pc, int32_t i)
{
    return emit_local(pc, i, NULL);
}

/* Constants: the whole literal, then sliced to this device's shard. */
IrStatus spmd_constant(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t v = spmd_emit_clone(pc, ins, &ins->shape, 0, NULL, 0, NULL);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, &repl_sharding, pc->shd[i]));
}

/* iota: a local iota of the shard's shape, plus this device's offset along
 * the iota dimension when that dimension is tiled. */
IrStatus spmd_iota(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int64_t dim = ins->a.iota_dimension;
    IrShape ls;
    if (!local_shape(pc, spmd_arena(pc), i, &ls))
        return spmd_oom(pc);
    int32_t v = spmd_emit_iota(pc, &ls, dim);
    if (shd_tiles(pc->shd[i], (int32_t)dim) > 1) {
        int32_t off = spmd_emit_convert(pc, spmd_emit_offset(pc, pc->shd[i], &ins->shape, (int32_t)dim), ls.type);
        v = spmd_emit_binary(pc, OP_ADD, v, spmd_emit_broadcast(pc, off, &ls, 0, NULL));
    }
    return spmd_set_val(pc, i, v);
}

/* tuple: operands resharded to the element shardings; get-tuple-element:
 * the element of the operand's shard, resharded to the result's sharding;
 * opt-barrier: identity on the resharded operand. */
IrStatus spmd_tuple(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    if (ins->op == OP_GET_TUPLE_ELEMENT) {
        int32_t o = ins->opnd[0];
        const IrShape *os = &pc->sc->instr[o].shape;
        int32_t idx = (int32_t)ins->a.tuple_index;
        IrSharding *e = shd_tuple_element(a, pc->shd[o], os, idx);
        if (!e)
            return spmd_oom(pc);
        int32_t g = spmd_emit_gte(pc, pc->val[o], idx);
        int32_t r = spmd_reshard(pc, g, &ins->shape, e, pc->shd[i]);
        if (r >= 0 && r == g) { /* the model's element, as it is: its name too (a plan keeps names) */
            const char *name = ir_keep_name(pc->sp->dst, ins->name);
            if (!name)
                return spmd_oom(pc);
            pc->dc->instr[g].name = name;
        }
        return spmd_set_val(pc, i, r);
    }
    if (ins->op == OP_OPTIMIZATION_BARRIER) {
        int32_t v = spmd_operand_as(pc, i, 0, pc->shd[i]);
        return spmd_set_val(pc, i, v);
    }
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++) {
        IrSharding *e = shd_tuple_element(a, pc->shd[i], &ins->shape, k);
        if (!e)
            return spmd_oom(pc);
        ops[k] = spmd_operand_as(pc, i, k, e);
    }
    return emit_local(pc, i, ops);
}

/* broadcast: the operand takes the tiles of the result dims it maps to;
 * tiles of the new dims become replication of the operand. Example:
 * f32[8] -> f32[4,8] dimensions={1} with result {devices=[2,2]0,1,2,3}:
 * operand {devices=[2,2]0,2,1,3 last_tile_dim_replicate}. */
IrStatus spmd_broadcast(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *s = pc->shd[i];
    const IrInstr *op = &pc->sc->instr[ins->opnd[0]];
    IrSharding *os = shd_project(spmd_tmp(pc), s, op->shape.rank, ins->a.dimensions.v);
    if (!os)
        return spmd_oom(pc);
    int32_t v = spmd_operand_as(pc, i, 0, os);
    return emit_local(pc, i, &v);
}

/* transpose: the operand's dim perm[j] takes the tiles of result dim j. */
IrStatus spmd_transpose(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t rank = ins->shape.rank;
    int64_t inv[IR_MAX_RANK];
    for (int32_t j = 0; j < rank; j++)
        inv[ins->a.dimensions.v[j]] = j;
    IrSharding *os = shd_project(spmd_tmp(pc), pc->shd[i], rank, inv);
    if (!os)
        return spmd_oom(pc);
    int32_t v = spmd_operand_as(pc, i, 0, os);
    return emit_local(pc, i, &v);
}

/* reshape: decompose into groups of operand dims and result dims with equal
 * products. A tiled result dim keeps its tiling on the operand when its
 * group is 1:1, or when it is the major dim of its group and the tile count
 * divides both it and the operand group's major dim (so every shard is a
 * contiguous, unpadded block). Example: f32[8,6] -> f32[48] with result
 * {devices=[2]0,1}: operand {devices=[2,1]0,1}, a local reshape [4,6]->[24].
 * Otherwise: fall back. */
IrStatus spmd_reshape(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *s = pc->shd[i];
    const IrShape *in = &pc->sc->instr[ins->opnd[0]].shape;
    const IrShape *out = &ins->shape;
    if (shd_is_replicated(s) || s->kind != SHD_TILED) {
        int32_t v = spmd_operand_as(pc, i, 0, s);
        return emit_local(pc, i, &v);
    }
    int64_t map[IR_MAX_RANK]; /* operand dim -> result dim whose tiles it takes */
    for (int32_t d = 0; d < in->rank; d++)
        map[d] = -1;
    int32_t a = 0, b = 0;
    bool ok = true;
    while ((a < in->rank || b < out->rank) && ok) {
        /* Skip size-1 dims that belong to no group. */
        if (a < in->rank && in->dims[a] == 1 && (b >= out->rank || out->dims[b] != 1)) {
            a++;
            continue;
        }
        if (b < out->rank && out->dims[b] == 1 && (a >= in->rank || in->dims[a] != 1)) {
            ok = shd_tiles(s, b) == 1;
            b++;
            continue;
        }
        if (a >= in->rank || b >= out->rank) {
            ok = false;
            break;
        }
        int32_t a0 = a, b0 = b;
        int64_t pa = in->dims[a++], pb = out->dims[b++];
        while (pa != pb) {
            if (pa < pb && a < in->rank)
                pa *= in->dims[a++];
            else if (pb < pa && b < out->rank)
                pb *= out->dims[b++];
            else
                break;
        }
        if (pa != pb) {
            ok = false;
            break;
        }
        /* Only the major result dim of the group may be tiled. */
        for (int32_t k = b0 + 1; k < b; k++)
            ok &= shd_tiles(s, k) == 1;
        int64_t t = shd_tiles(s, b0);
        if (t > 1) {
            /* A group of one dim on each side is the same dim: any tiling,
             * uneven included, keeps its shards (and their padding). */
            ok &= (a == a0 + 1 && b == b0 + 1) || (in->dims[a0] % t == 0 && out->dims[b0] % t == 0);
            map[a0] = b0;
        }
    }
    if (!ok)
        return spmd_fallback(pc, i);
    IrSharding *os = shd_project(spmd_tmp(pc), s, in->rank, map);
    if (!os)
        return spmd_oom(pc);
    int32_t v = spmd_operand_as(pc, i, 0, os);
    return emit_local(pc, i, &v);
}

/* True when no tiled dim of s is touched by the op on that dim. */
static bool tiled_dims_untouched(const IrSharding *s, int32_t rank, const bool *touched)
{
    for (int32_t d = 0; d < rank; d++)
        if (touched[d] && shd_tiles(s, d) > 1)
            return false;
    return true;
}

/* An op that is local unless it touches a tiled dim (slice, pad,
 * concatenate, reverse, dynamic-slice and -update-slice) runs as
 * `handler` under i's sharding with the touched dims replicated (their
 * tiles join the replication), then is resharded to i's sharding, which is
 * a local slice: the dims it leaves alone stay partitioned, as XLA keeps
 * the non-sliced dims partitioned. When every tiled dim is touched this is
 * the replicate fallback itself.
 * Example (4 devices): dynamic-update-slice of u bf16[16,128,...] into
 * x bf16[16,512,...] {devices=[2,2,...]} at row 192 of dim 1: x and u are
 * gathered along dim 1 only (each device holds 8 of the 16 batch rows,
 * whole in dim 1), updated locally, and each device keeps its quarter. */
static IrStatus keep_untouched_partitioned(PComp *pc, int32_t i, const bool *touched,
                                           IrStatus (*handler)(PComp *, int32_t))
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *want = pc->shd[i];
    if (want->kind != SHD_TILED || shd_has_manual_subgroup(want) || ins->shape.type == IR_TUPLE)
        return spmd_fallback(pc, i);
    int64_t dims[IR_MAX_RANK];
    int32_t nd = 0;
    bool kept = false;
    for (int32_t d = 0; d < ins->shape.rank; d++) {
        if (touched[d])
            dims[nd++] = d;
        else
            kept |= shd_tiles(want, d) > 1;
    }
    IrSharding *loose = kept ? shd_replicate_dims(spmd_arena(pc), want, nd, dims) : NULL;
    if (!loose)
        return spmd_fallback(pc, i);
    pc->shd[i] = loose;
    IrStatus st = handler(pc, i);
    pc->shd[i] = want;
    if (st != IR_OK)
        return st;
    return spmd_set_val(pc, i, spmd_reshard(pc, pc->val[i], &ins->shape, loose, want));
}

/* slice: local when every tiled dim is taken whole (start 0, full limit,
 * stride 1); the other dims are sliced on each device. Else the touched
 * dims are replicated first (keep_untouched_partitioned). */
IrStatus spmd_slice(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrShape *in = &pc->sc->instr[ins->opnd[0]].shape;
    bool touched[IR_MAX_RANK];
    for (int32_t d = 0; d < in->rank; d++)
        touched[d] = ins->a.x->slice_start.v[d] != 0 || ins->a.x->slice_limit.v[d] != in->dims[d] ||
                     (ins->a.x->slice_stride.n > d && ins->a.x->slice_stride.v[d] != 1);
    if (!tiled_dims_untouched(pc->shd[i], in->rank, touched))
        return keep_untouched_partitioned(pc, i, touched, spmd_slice);
    int32_t v = spmd_operand_as(pc, i, 0, pc->shd[i]);
    if (v < 0)
        return spmd_set_val(pc, i, v);
    /* Tiled dims are untouched: their local limit is the shard size. A
     * copy of the shape: emitting moves the array spmd_val_shape points into. */
    IrShape lsc;
    if (ir_shape_copy(spmd_arena(pc), &lsc, spmd_val_shape(pc, v)) != IR_OK)
        return spmd_oom(pc);
    const IrShape *ls = &lsc;
    int32_t r = spmd_emit_clone(pc, ins, ls, 1, &v, 0, NULL);
    if (r < 0)
        return spmd_set_val(pc, i, r);
    IrInstr *di = &pc->dc->instr[r];
    for (int32_t d = 0; d < in->rank; d++)
        if (!touched[d])
            di->a.x->slice_limit.v[d] = ls->dims[d];
    IrShape out;
    if (!local_shape(pc, spmd_arena(pc), i, &out))
        return spmd_oom(pc);
    di->shape = out;
    return spmd_set_val(pc, i, r);
}

/* pad: local when tiled dims have no padding (the pad value is a
 * replicated scalar). */
IrStatus spmd_pad(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t rank = ins->shape.rank;
    bool touched[IR_MAX_RANK];
    for (int32_t d = 0; d < rank; d++)
        touched[d] = ins->a.x->pad_lo.v[d] != 0 || ins->a.x->pad_hi.v[d] != 0 ||
                     (ins->a.x->pad_interior.n > d && ins->a.x->pad_interior.v[d] != 0);
    if (!tiled_dims_untouched(pc->shd[i], rank, touched))
        return keep_untouched_partitioned(pc, i, touched, spmd_pad);
    int32_t ops[2] = {spmd_operand_as(pc, i, 0, pc->shd[i]), spmd_operand_as(pc, i, 1, &repl_sharding)};
    return emit_local(pc, i, ops);
}

/* bitcast-convert: each device converts its shard. At equal widths it is
 * elementwise (any tiling, uneven included: a padded shard's padding is
 * bits like any other). To a narrower type the result gains a minor dim
 * (f32[8,6] -> u8[8,6,4]) and to a wider one the operand loses it
 * (u8[8,6,4] -> f32[8,6]): that dim is the bytes of one element, so it is
 * computed whole (where the result's is tiled, the op runs with it
 * replicated and each device keeps its part); the other dims keep their
 * tiles. Example on 2 devices: u8[8,6,4] {devices=[2,1,1]0,1} ->
 * f32[8,6] {devices=[2,1]0,1}: each device turns its u8[4,6,4] into
 * f32[4,6], no communication. */
IrStatus spmd_bitcast_convert(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *s = pc->shd[i];
    const IrShape *in = &pc->sc->instr[ins->opnd[0]].shape;
    int32_t rank = ins->shape.rank;
    if (s->kind != SHD_TILED || in->rank == rank)
        return spmd_elementwise(pc, i);
    if (in->rank > rank + 1 || rank > in->rank + 1 || shd_has_manual_subgroup(s))
        return spmd_fallback(pc, i);
    bool touched[IR_MAX_RANK] = {0};
    touched[rank - 1] = rank > in->rank; /* the narrower result's new minor dim */
    if (!tiled_dims_untouched(s, rank, touched))
        return keep_untouched_partitioned(pc, i, touched, spmd_bitcast_convert);
    int64_t map[IR_MAX_RANK];
    for (int32_t d = 0; d < IR_MAX_RANK; d++)
        map[d] = d;
    IrSharding *os = rank > in->rank ? shd_project(spmd_tmp(pc), s, in->rank, map)
                                     : shd_insert_dims(spmd_tmp(pc), s, in->rank, map);
    if (!os)
        return spmd_oom(pc);
    int32_t v = spmd_operand_as(pc, i, 0, os);
    return emit_local(pc, i, &v);
}

/* concatenate: local when the concatenated dim is not tiled. */
IrStatus spmd_concatenate(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (shd_tiles(pc->shd[i], (int32_t)ins->a.dimensions.v[0]) > 1) {
        bool touched[IR_MAX_RANK] = {false};
        touched[ins->a.dimensions.v[0]] = true;
        return keep_untouched_partitioned(pc, i, touched, spmd_concatenate);
    }
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, pc->shd[i]);
    return emit_local(pc, i, ops);
}

/* reverse: local when the reversed dims are not tiled. */
IrStatus spmd_reverse(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    bool touched[IR_MAX_RANK] = {false};
    for (int32_t k = 0; k < ins->a.dimensions.n; k++)
        touched[ins->a.dimensions.v[k]] = true;
    if (!tiled_dims_untouched(pc->shd[i], ins->shape.rank, touched))
        return keep_untouched_partitioned(pc, i, touched, spmd_reverse);
    int32_t v = spmd_operand_as(pc, i, 0, pc->shd[i]);
    return emit_local(pc, i, &v);
}

/* dynamic-slice / dynamic-update-slice: local when every tiled dim is
 * taken whole (slice size == operand size there: its start index clamps to
 * 0 both globally and on the shard); start indices replicated scalars. */
IrStatus spmd_dynamic_slice(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrShape *in = &pc->sc->instr[ins->opnd[0]].shape;
    bool dus = ins->op == OP_DYNAMIC_UPDATE_SLICE;
    const IrShape *part = dus ? &pc->sc->instr[ins->opnd[1]].shape : &ins->shape;
    bool touched[IR_MAX_RANK];
    for (int32_t d = 0; d < in->rank; d++)
        touched[d] = part->dims[d] != in->dims[d];
    if (!tiled_dims_untouched(pc->shd[i], in->rank, touched))
        return keep_untouched_partitioned(pc, i, touched, spmd_dynamic_slice);
    int32_t first_index = dus ? 2 : 1;
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, k < first_index ? pc->shd[i] : &repl_sharding);
    if (dus)
        return emit_local(pc, i, ops);
    int32_t r = emit_local(pc, i, ops);
    if (r != IR_OK)
        return r;
    /* dynamic_slice_sizes follow the per-device shape. */
    IrInstr *di = &pc->dc->instr[pc->val[i]];
    for (int32_t d = 0; d < di->shape.rank && d < di->a.x->dynamic_slice_sizes.n; d++)
        di->a.x->dynamic_slice_sizes.v[d] = di->shape.dims[d];
    return IR_OK;
}

/* The sharding el with the tiles of the sort dim moved to another dim
 * that el leaves whole (the largest, preferring one the tiles divide), as
 * XLA's partitioner does: each device then sorts whole rows of its own,
 * instead of every device sorting every row. The device order is kept: a
 * dim of one tile does not change the row-major order. NULL when no dim
 * is free (or on OOM, which the caller's fallback then reports). */
static const IrSharding *sort_dim_moved(IrArena *a, const IrSharding *el, const IrShape *shape, int32_t dim)
{
    int64_t t = shd_tiles(el, dim);
    int32_t best = -1;
    for (int32_t d = 0; d < shape->rank; d++) {
        if (d == dim || shd_tiles(el, d) != 1 || shape->dims[d] < t)
            continue;
        bool even = shape->dims[d] % t == 0;
        bool best_even = best >= 0 && shape->dims[best] % t == 0;
        if (best < 0 || (even && !best_even) || (even == best_even && shape->dims[d] > shape->dims[best]))
            best = d;
    }
    IrSharding *m = best >= 0 ? ir_alloc(a, sizeof *m) : NULL;
    if (!m || ir_sharding_copy(a, m, el) != IR_OK)
        return NULL;
    m->tile[best] = t;
    m->tile[dim] = 1;
    m->metadata = NULL;
    return m;
}

/* sort: local when the sort dimension is not tiled (else its tiles move to
 * a free dim first, sort_dim_moved; where every other dim is tiled too,
 * the sort dim alone is gathered, the other dims stay tiled, and each
 * device cuts its tile back out of the sorted rows: f32[8,32] on
 * {devices=[2,2]<=[4]} sorted along dim 0 all-gathers dim 0 (256 bytes a
 * device) where the whole value was gathered (768), XLA's two all-to-alls
 * 256); all operands share the result's (element) sharding. */
IrStatus spmd_sort(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    const IrSharding *s = pc->shd[i];
    const IrSharding *el = s;
    if (ins->shape.type == IR_TUPLE && (el = shd_tuple_element(a, s, &ins->shape, 0)) == NULL)
        return spmd_oom(pc);
    const IrShape *es = ins->shape.type == IR_TUPLE ? &ins->shape.tuple[0] : &ins->shape;
    if (shd_tiles(el, (int32_t)dim) > 1) {
        const IrSharding *moved = sort_dim_moved(a, el, es, (int32_t)dim);
        el = moved ? moved : shd_replicate_dims(a, el, 1, &dim);
        if (!el)
            return spmd_fallback(pc, i);
    }
    /* Every operand takes the first element's sharding; the result is then
     * that sharding on every element. */
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, el);
    IrSharding *rs = shd_broadcast_to_shape(a, el, &ins->shape);
    if (!rs)
        return spmd_oom(pc);
    const IrSharding *keep = pc->shd[i];
    pc->shd[i] = rs;
    IrStatus st = emit_local(pc, i, ops);
    pc->shd[i] = keep;
    if (st != IR_OK)
        return st;
    return spmd_set_val(pc, i, spmd_reshard(pc, pc->val[i], &ins->shape, rs, keep));
}
