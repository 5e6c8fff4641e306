/*
 * spmd_gather.c: the gather and scatter handlers.
 *
 * Both are planned like the dot (spmd_dot.c): an iteration space whose
 * tiling fixes how every operand must be sharded for a purely local op.
 *
 * Gather: the iteration space has one dim per output dim plus one per
 * "trivially indexed" operand dim (in start_index_map with slice size 1).
 * An output dim may be tiled when it is
 *   - a batch dim (it runs over an indices dim): the indices take its
 *     tiles, each device gathers its own indices (index passthrough);
 *   - an offset dim whose operand dim is a passthrough dim (slice size =
 *     the whole dim, so its start is 0 even when indexed): the operand
 *     takes its tiles and the local slice size becomes the shard size
 *     (operand passthrough).
 * A tiled trivially indexed dim (an embedding table sharded by rows) is
 * like a contracting dim: each device gathers from its rows only, masks the
 * rows it does not hold to zero, and an all-reduce adds the devices of that
 * dim (exactly one of them holds each row).
 * Candidate tilings come from the output's, the operand's and the
 * indices' shardings; the cheapest (bytes moved) wins, ties to the output.
 *
 * Scatter: the iteration space is the operand's dims plus one per indices
 * batch dim; an operand dim may be tiled when it is a passthrough dim
 * (updates' window takes the same tiles) or a trivially indexed dim (window
 * size 1: each device shifts the indices into its shard and scatter's own
 * out-of-bounds rule drops the updates that land elsewhere; any combiner).
 * Tiled batch dims (indices and updates split by scatter position) need a
 * simple combiner: partial results, merged by an all-reduce.
 *
 * Batching dims (operand_batching_dims / start_indices_batching_dims of a
 * gather, input_batching_dims / scatter_indices_batching_dims of a
 * scatter: what JAX lowers take_along_axis, vmap'd indexing and their
 * gradients to) pair an operand dim with an indices dim (and an updates
 * dim): position b of the indices reads or writes position b of the
 * operand. Tiled alike in all of them, each device runs the op on its own
 * positions with no collective, as XLA's partitioner does: a gather's
 * batch dim carries the operand dim too (the output dim's tiles go to
 * both), a scatter's indices and updates dims join the operand dim's
 * iteration dim. Uneven tiles line up: padding positions read or write
 * only padding.
 *
 * Dims that fit none of these are resharded to replicated for the local
 * op; partially manual shardings go through the fallback.
 */
#include "spmd_internal.h"

#include <string.h>

/* Only tiled (no manual subgroup) and replicated shardings are planned. */
static bool plannable(const IrSharding *s)
{
    if (s->kind == SHD_TUPLE) {
        for (int32_t k = 0; k < s->ntuple; k++)
            if (!plannable(&s->tuple[k]))
                return false;
        return true;
    }
    return shd_is_replicated(s) || (s->kind == SHD_TILED && !shd_has_manual_subgroup(s));
}

/* ---- index arithmetic shared by both handlers ---- */

/* Index values are read as signed 64-bit (k_gather.c); narrow signed and
 * unsigned types fit in s32, the rest are widened to s64 so that
 * subtracting an offset cannot wrap. */
static IrType wide_index_type(IrType t)
{
    switch (t) {
    case IR_S8: case IR_S16: case IR_S32: case IR_U8: case IR_U16: return IR_S32;
    default: return IR_S64;
    }
}

/* A constant vector [m] of type t. */
static int32_t emit_vector(PComp *pc, IrType t, int64_t m, const int64_t *vals)
{
    IrShape s;
    if (ir_shape_make(spmd_arena(pc), &s, t, 1, &m) != IR_OK)
        return spmd_oom(pc), -1;
    size_t es = t == IR_S32 ? 4 : 8;
    void *b = ts_malloc((size_t)(m > 0 ? m : 1) * es);
    if (!b)
        return spmd_oom(pc), -1;
    for (int64_t k = 0; k < m; k++) {
        if (t == IR_S32)
            ((int32_t *)b)[k] = (int32_t)vals[k];
        else
            ((int64_t *)b)[k] = vals[k];
    }
    int32_t r = spmd_emit_const_bytes(pc, &s, b, m * (int64_t)es);
    ts_free(b);
    return r;
}

/* Row `partition id` of a constant table [n, m] of type t, as a vector [m]:
 * the per-device offsets of every index component at once. */
static int32_t emit_vector_lookup(PComp *pc, IrType t, int64_t m, const int64_t *table)
{
    int64_t n = pc->sp->n;
    int32_t tab = emit_vector(pc, t, n * m, table);
    int64_t dims[2] = {n, m}, one_m[2] = {1, m};
    IrShape s2, s1;
    if (ir_shape_make(spmd_arena(pc), &s2, t, 2, dims) != IR_OK ||
        ir_shape_make(spmd_arena(pc), &s1, t, 1, &m) != IR_OK)
        return spmd_oom(pc), -1;
    int32_t starts[2] = {spmd_emit_partition_id(pc), spmd_emit_s32(pc, 0)};
    int32_t ds = spmd_emit_dynamic_slice(pc, spmd_emit_reshape(pc, tab, &s2), starts, one_m);
    return spmd_emit_reshape(pc, ds, &s1);
}

/* Broadcast a vector [m] along dim `ivd` of `like`'s shape. */
static int32_t along(PComp *pc, int32_t vec, int32_t like, int64_t ivd)
{
    if (vec < 0 || like < 0)
        return -1;
    IrShape s = *spmd_val_shape(pc, like);
    return spmd_emit_broadcast(pc, vec, &s, 1, &ivd);
}

/* u64 indices of 2^63 and above, which XLA clamps to the operand's last
 * start, would turn negative (so clamp to 0) in s64: they are first
 * saturated at INT64_MAX, which still clamps to the last start. E.g.
 * 2^64-1 into f32[8,4] rows gives row 7, as the reference does. Other
 * types are returned as they are. */
static int32_t saturate_u64(PComp *pc, int32_t iv)
{
    if (iv < 0 || spmd_val_shape(pc, iv)->type != IR_U64)
        return iv;
    IrShape full = *spmd_val_shape(pc, iv), sc;
    uint64_t most = INT64_MAX;
    if (ir_shape_make(spmd_arena(pc), &sc, IR_U64, 0, NULL) != IR_OK)
        return spmd_oom(pc), -1;
    int32_t c = spmd_emit_const_bytes(pc, &sc, &most, sizeof most);
    return spmd_emit_binary(pc, OP_MINIMUM, iv, c < 0 ? -1 : spmd_emit_broadcast(pc, c, &full, 0, NULL));
}

/* Indices with an explicit index vector dim: when index_vector_dim equals
 * the rank the vector is an implicit trailing dim of size 1; make it
 * explicit (same meaning for gather/scatter with the same
 * index_vector_dim). Also widened to wide_index_type. */
static int32_t explicit_indices(PComp *pc, int32_t iv, int64_t ivd)
{
    if (iv < 0)
        return -1;
    const IrShape *s = spmd_val_shape(pc, iv); /* read before any emit */
    if (ivd == s->rank) {
        int64_t dims[IR_MAX_RANK + 1];
        if (s->rank + 1 > IR_MAX_RANK)
            return -1;
        memcpy(dims, s->dims, (size_t)s->rank * sizeof(int64_t));
        dims[s->rank] = 1;
        IrShape r;
        if (ir_shape_make(spmd_arena(pc), &r, s->type, s->rank + 1, dims) != IR_OK)
            return spmd_oom(pc), -1;
        iv = spmd_emit_reshape(pc, iv, &r);
    }
    return spmd_emit_convert(pc, saturate_u64(pc, iv), wide_index_type(spmd_val_shape(pc, iv)->type));
}

/* Index component k (slice along ivd), as an array of the batch shape. */
static int32_t component(PComp *pc, int32_t iv, int64_t ivd, int64_t k)
{
    if (iv < 0)
        return -1;
    const IrShape *s = spmd_val_shape(pc, iv); /* read before any emit */
    int64_t start[IR_MAX_RANK], limit[IR_MAX_RANK], dims[IR_MAX_RANK];
    int32_t nb = 0;
    for (int32_t d = 0; d < s->rank; d++) {
        start[d] = d == ivd ? k : 0;
        limit[d] = d == ivd ? k + 1 : s->dims[d];
        if (d != ivd)
            dims[nb++] = s->dims[d];
    }
    IrShape b;
    IrType t = s->type;
    if (ir_shape_make(spmd_arena(pc), &b, t, nb, dims) != IR_OK)
        return spmd_oom(pc), -1;
    return spmd_emit_reshape(pc, spmd_emit_slice(pc, iv, start, limit), &b);
}

/* Subtract from every index component k this device's offset along operand
 * dim map[k] under `s` (0 where that dim is not tiled or is a passthrough
 * dim: `pass`, whose only start is 0 and stays 0). */
static int32_t shift_indices(PComp *pc, int32_t iv, int64_t ivd, const IrI64List *map,
                             const IrSharding *s, const IrShape *operand, const bool *pass)
{
    if (iv < 0)
        return -1;
    int64_t m = map->n, n = pc->sp->n;
    IrType t = spmd_val_shape(pc, iv)->type;
    int64_t *tab = ir_alloc_array(spmd_arena(pc), (size_t)(n * m > 0 ? n * m : 1), sizeof(int64_t));
    if (!tab)
        return spmd_oom(pc), -1;
    for (int64_t k = 0; k < m; k++) {
        int64_t *off = shd_offset_table(pc, s, operand, (int32_t)map->v[k]);
        if (!off)
            return spmd_oom(pc), -1;
        for (int64_t p = 0; p < n; p++)
            tab[p * m + k] = pass[map->v[k]] ? 0 : off[p];
    }
    int32_t offv = emit_vector_lookup(pc, t, m, tab);
    return spmd_emit_binary(pc, OP_SUBTRACT, iv, along(pc, offv, iv, ivd));
}

/* ---- gather ---- */

typedef struct GatherDims {
    int32_t orank, irank, outrank, nx;
    int64_t ivd;
    int64_t op_to_out[IR_MAX_RANK]; /* operand dim -> output offset dim, -1 */
    int64_t ix_to_out[IR_MAX_RANK]; /* indices dim -> output batch dim, -1 for ivd */
    int64_t out_to_ix[IR_MAX_RANK]; /* output batch dim -> indices dim, -1 */
    /* output offset dim -> passthrough operand dim, output batch dim ->
     * operand batching dim, -1 */
    int64_t out_to_op[IR_MAX_RANK];
    int64_t op_to_batch[IR_MAX_RANK]; /* operand batching dim -> output batch dim, -1 */
    bool pass[IR_MAX_RANK];           /* operand dim is passthrough (sliced whole) */
    int64_t xdim[IR_MAX_RANK];      /* trivially indexed operand dims (iteration dims outrank+k) */
} GatherDims;

static bool gather_dims(const IrInstr *ins, const IrShape *op, const IrShape *ix, GatherDims *g)
{
    const IrGatherDnums *dn = &ins->a.x->gather;
    if (dn->operand_batching_dims.n != dn->start_indices_batching_dims.n || op->rank > IR_MAX_RANK ||
        ix->rank > IR_MAX_RANK ||
        ins->shape.rank > IR_MAX_RANK || ins->a.x->slice_sizes.n != op->rank ||
        (dn->index_vector_dim == ix->rank && ix->rank + 1 > IR_MAX_RANK)) /* explicit_indices */
        return false;
    g->orank = op->rank;
    g->irank = ix->rank;
    g->outrank = ins->shape.rank;
    g->ivd = dn->index_vector_dim;
    for (int32_t d = 0; d < g->outrank; d++)
        g->out_to_ix[d] = g->out_to_op[d] = -1;
    int32_t w = 0;
    g->nx = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        g->op_to_out[d] = g->op_to_batch[d] = -1;
        g->pass[d] = false;
        bool indexed = ir_list_index(&dn->start_index_map, d) >= 0;
        if (ir_list_index(&dn->collapsed_slice_dims, d) < 0 && ir_list_index(&dn->operand_batching_dims, d) < 0) {
            if (w >= dn->offset_dims.n)
                return false;
            g->op_to_out[d] = dn->offset_dims.v[w++];
        }
        int64_t size = ins->a.x->slice_sizes.v[d];
        /* Sliced whole: its start clamps to 0 even when indexed. */
        if (g->op_to_out[d] >= 0 && size == op->dims[d]) {
            g->pass[d] = true;
            g->out_to_op[g->op_to_out[d]] = d;
        }
        if (indexed && size == 1 && !g->pass[d])
            g->xdim[g->nx++] = d;
    }
    int32_t b = 0;
    for (int32_t d = 0; d < ix->rank; d++) {
        g->ix_to_out[d] = -1;
        if (d == g->ivd)
            continue;
        while (b < g->outrank && ir_list_index(&dn->offset_dims, b) >= 0)
            b++;
        if (b >= g->outrank)
            return false;
        g->ix_to_out[d] = b;
        g->out_to_ix[b++] = d;
    }
    /* Operand batching dim k runs along indices dim k (its output batch
     * dim); the verifier has checked the two lists. */
    for (int32_t k = 0; k < dn->operand_batching_dims.n; k++) {
        int64_t od = dn->operand_batching_dims.v[k], id = dn->start_indices_batching_dims.v[k];
        if (od < 0 || od >= op->rank || id < 0 || id >= ix->rank || g->ix_to_out[id] < 0)
            return false;
        g->op_to_batch[od] = g->ix_to_out[id];
        g->out_to_op[g->ix_to_out[id]] = od;
    }
    return g->outrank + g->nx <= IR_MAX_RANK;
}

typedef struct GatherPlan {
    IrSharding *iter, *op, *ix, *partial;
    bool reduce;
    int64_t cost;
} GatherPlan;

static bool gather_plan(PComp *pc, int32_t i, const GatherDims *g, IrSharding *iter, GatherPlan *p)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrInstr *o = &pc->sc->instr[ins->opnd[0]], *x = &pc->sc->instr[ins->opnd[1]];
    IrArena *a = spmd_arena(pc);
    if (!iter)
        return false;
    int64_t om[IR_MAX_RANK], xm[IR_MAX_RANK], ident[IR_MAX_RANK];
    for (int32_t d = 0; d < g->orank; d++)
        om[d] = g->pass[d] ? g->op_to_out[d] : g->op_to_batch[d];
    for (int32_t k = 0; k < g->nx; k++)
        om[g->xdim[k]] = g->outrank + k;
    for (int32_t d = 0; d < g->irank; d++)
        xm[d] = g->ix_to_out[d];
    for (int32_t d = 0; d < g->outrank; d++)
        ident[d] = d;
    p->iter = iter;
    p->op = shd_project(a, iter, g->orank, om);
    p->ix = shd_project(a, iter, g->irank, xm);
    p->partial = shd_project(a, iter, g->outrank, ident);
    if (!p->op || !p->ix || !p->partial)
        return false;
    p->reduce = false;
    for (int32_t k = 0; k < g->nx; k++)
        p->reduce |= shd_tiles(iter, g->outrank + k) > 1;
    IrShape local;
    int64_t out_bytes = 0;
    if (shd_shard_shape(a, &ins->shape, p->partial, &local) == IR_OK)
        out_bytes = ir_shape_bytes(&local);
    p->cost = spmd_reshard_cost(&o->shape, pc->shd[ins->opnd[0]], p->op) +
              spmd_reshard_cost(&x->shape, pc->shd[ins->opnd[1]], p->ix) + (p->reduce ? 2 * out_bytes : 0) +
              spmd_reshard_cost(&ins->shape, p->partial, pc->shd[i]);
    return true;
}

/* pred (batch shape): every tiled indexed component of the shifted indices
 * falls inside this device's shard [0, shard size). */
static int32_t in_shard(PComp *pc, int32_t iv, const GatherDims *g, const IrI64List *sim,
                        const IrSharding *os, const IrShape *operand)
{
    int32_t ok = -1;
    for (int32_t k = 0; k < sim->n; k++) {
        int32_t d = (int32_t)sim->v[k];
        int64_t t = shd_tiles(os, d);
        if (t <= 1 || g->pass[d])
            continue;
        int32_t c = component(pc, iv, g->ivd, k);
        if (c < 0)
            return -1;
        /* A copy: emitting may move the instruction array. */
        IrShape cs = *spmd_val_shape(pc, c);
        int32_t lo = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, cs.type, 0), &cs, 0, NULL);
        int32_t hi = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, cs.type, (double)shd_shard_size(operand->dims[d], t)),
                                    &cs, 0, NULL);
        int32_t here = spmd_emit_binary(pc, OP_AND, spmd_emit_compare(pc, c, lo, CMP_GE), spmd_emit_compare(pc, c, hi, CMP_LT));
        ok = ok < 0 ? here : spmd_emit_binary(pc, OP_AND, ok, here);
        if (ok < 0)
            return -1;
    }
    return ok;
}

/* Gather, as in the file comment. Worked example (2 devices): table
 * f32[10,4] {devices=[2,1]0,1}, ids s32[6,1] replicated, start_index_map
 * {0}, slice {1,4}: the iteration tiling from the table tiles the extra
 * dim of table rows; device 1 holds rows 5..9 (offset 5). An id of 12 is
 * clamped to 9 (global semantics), shifted to 4: inside [0,5) on device 1,
 * -5 (masked) on device 0. Each device gathers f32[6,4] locally, zeroes
 * the masked rows, and all-reduce {{0,1}} adds the two. */
IrStatus spmd_gather(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    const IrInstr *o = &pc->sc->instr[ins->opnd[0]], *x = &pc->sc->instr[ins->opnd[1]];
    const IrSharding *osh = pc->shd[ins->opnd[0]], *xsh = pc->shd[ins->opnd[1]];
    GatherDims g;
    if (!plannable(osh) || !plannable(xsh) || !plannable(pc->shd[i]) ||
        !gather_dims(ins, &o->shape, &x->shape, &g))
        return spmd_fallback(pc, i);
    int32_t irank = g.outrank + g.nx;
    int64_t from_out[IR_MAX_RANK], from_op[IR_MAX_RANK], from_ix[IR_MAX_RANK];
    for (int32_t j = 0; j < irank; j++) {
        bool ok = j < g.outrank && (g.out_to_ix[j] >= 0 || g.out_to_op[j] >= 0);
        from_out[j] = ok ? j : -1;
        from_op[j] = j < g.outrank ? g.out_to_op[j] : g.xdim[j - g.outrank];
        from_ix[j] = j < g.outrank ? g.out_to_ix[j] : -1;
    }
    IrSharding *cand[3] = {
        shd_project(a, pc->shd[i], irank, from_out),
        shd_project(a, osh, irank, from_op),
        shd_project(a, xsh, irank, from_ix),
    };
    GatherPlan best = {0}, p;
    bool have = false;
    for (int32_t c = 0; c < 3; c++)
        if (gather_plan(pc, i, &g, cand[c], &p) && (!have || p.cost < best.cost)) {
            best = p;
            have = true;
        }
    if (!have)
        return spmd_oom(pc);

    int32_t ov = spmd_operand_as(pc, i, 0, best.op);
    int32_t iv = spmd_operand_as(pc, i, 1, best.ix);
    int32_t valid = -1;
    if (best.reduce) {
        /* Clamp as the global gather does, then shift into the shard. */
        const IrI64List *sim = &ins->a.x->gather.start_index_map;
        iv = explicit_indices(pc, iv, g.ivd);
        if (iv < 0)
            return spmd_set_val(pc, i, -1);
        IrShape is = *spmd_val_shape(pc, iv);
        IrType t = is.type;
        int64_t hi[IR_MAX_RANK];
        for (int32_t k = 0; k < sim->n; k++)
            hi[k] = o->shape.dims[sim->v[k]] - ins->a.x->slice_sizes.v[sim->v[k]];
        int32_t zero = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, t, 0), &is, 0, NULL);
        iv = spmd_emit_binary(pc, OP_MAXIMUM, iv, zero);
        iv = spmd_emit_binary(pc, OP_MINIMUM, iv, along(pc, emit_vector(pc, t, sim->n, hi), iv, g.ivd));
        iv = shift_indices(pc, iv, g.ivd, sim, best.op, &o->shape, g.pass);
        valid = in_shard(pc, iv, &g, sim, best.op, &o->shape);
        if (valid < 0)
            return spmd_set_val(pc, i, -1);
    }
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, best.partial, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t ops[2] = {ov, iv};
    int32_t v = spmd_emit_clone(pc, ins, &local, 2, ops, 0, NULL);
    if (v < 0)
        return spmd_set_val(pc, i, -1);
    /* Passthrough dims slice the whole local shard. */
    for (int32_t d = 0; d < g.orank; d++)
        if (g.pass[d])
            pc->dc->instr[v].a.x->slice_sizes.v[d] = spmd_val_shape(pc, ov)->dims[d];
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL;
    if (best.reduce) {
        int64_t bdims[IR_MAX_RANK], cdims[IR_MAX_RANK];
        int32_t nb = 0;
        for (int32_t d = 0; d < g.outrank; d++)
            if (g.out_to_ix[d] >= 0)
                bdims[nb++] = d;
        IrShape ps;
        if (ir_shape_make(a, &ps, IR_PRED, local.rank, local.dims) != IR_OK)
            return spmd_oom(pc);
        int32_t vb = spmd_emit_broadcast(pc, valid, &ps, nb, bdims);
        int32_t zb = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, local.type, 0), &local, 0, NULL);
        v = spmd_emit_select(pc, vb, v, zb);
        for (int32_t k = 0; k < g.nx; k++)
            cdims[k] = g.outrank + k;
        if (!shd_groups_along(pc, best.iter, g.nx, cdims, &ng, &size, &groups))
            return spmd_oom(pc);
    }
    return spmd_set_val(pc, i, spmd_finish_partial(pc, v, &ins->shape, best.partial, local.type == IR_PRED ? OP_OR : OP_ADD,
                                         ng, size, groups, pc->shd[i]));
}

/* ---- scatter ---- */

typedef struct ScatterDims {
    int32_t orank, urank, irank, nb;
    int64_t ivd;
    int64_t op_to_upd[IR_MAX_RANK]; /* operand window dim -> updates dim, -1 */
    bool pass[IR_MAX_RANK];         /* passthrough operand dim */
    bool trivial[IR_MAX_RANK];      /* indexed operand dim with window size 1 */
    bool batching[IR_MAX_RANK];     /* operand batching dim (input_batching_dims) */
    /* Iteration dims: the operand's dims, then one per indices batch dim
     * other than a batching dim (that one runs along its operand dim). */
    int64_t upd_to_it[IR_MAX_RANK]; /* updates dim -> iteration dim, -1 */
    int64_t ix_to_it[IR_MAX_RANK];  /* indices dim -> iteration dim, -1 for ivd */
} ScatterDims;

static bool scatter_dims(const IrInstr *ins, const IrShape *op, const IrShape *ix, const IrShape *upd,
                         ScatterDims *s)
{
    const IrScatterDnums *dn = &ins->a.x->scatter;
    if (dn->input_batching_dims.n != dn->scatter_indices_batching_dims.n || op->rank > IR_MAX_RANK ||
        upd->rank > IR_MAX_RANK ||
        ix->rank > IR_MAX_RANK || (dn->index_vector_dim == ix->rank && ix->rank + 1 > IR_MAX_RANK))
        return false;
    s->orank = op->rank;
    s->urank = upd->rank;
    s->irank = ix->rank;
    s->ivd = dn->index_vector_dim;
    for (int32_t d = 0; d < upd->rank; d++)
        s->upd_to_it[d] = -1;
    int32_t w = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        s->op_to_upd[d] = -1;
        s->batching[d] = ir_list_index(&dn->input_batching_dims, d) >= 0;
        if (ir_list_index(&dn->inserted_window_dims, d) < 0 && !s->batching[d]) {
            if (w >= dn->update_window_dims.n)
                return false;
            s->op_to_upd[d] = dn->update_window_dims.v[w++];
        }
        int64_t size = s->op_to_upd[d] >= 0 ? upd->dims[s->op_to_upd[d]] : 1;
        bool indexed = ir_list_index(&dn->scatter_dims_to_operand_dims, d) >= 0;
        /* A window spanning the whole dim fits only at start 0, on the
         * shard as globally: passthrough even when indexed. */
        s->pass[d] = s->op_to_upd[d] >= 0 && size == op->dims[d];
        s->trivial[d] = indexed && size == 1 && !s->pass[d];
        if (s->pass[d])
            s->upd_to_it[s->op_to_upd[d]] = d;
    }
    /* k-th indices batch dim <-> k-th updates scatter dim; a batching one
     * <-> its operand dim too. */
    s->nb = 0;
    int32_t u = 0;
    for (int32_t d = 0; d < ix->rank; d++) {
        s->ix_to_it[d] = -1;
        if (d == s->ivd)
            continue;
        while (u < upd->rank && ir_list_index(&dn->update_window_dims, u) >= 0)
            u++;
        if (u >= upd->rank)
            return false;
        int64_t k = ir_list_index(&dn->scatter_indices_batching_dims, d);
        int64_t od = k >= 0 ? dn->input_batching_dims.v[k] : -1;
        if (k >= 0 && (od < 0 || od >= op->rank))
            return false;
        s->ix_to_it[d] = s->upd_to_it[u++] = k >= 0 ? od : s->orank + s->nb++;
    }
    return s->orank + s->nb <= IR_MAX_RANK;
}

typedef struct ScatterPlan {
    IrSharding *iter, *op, *ix, *upd, *partial;
    bool reduce; /* indices batch dims tiled: partial results */
    int64_t cost;
} ScatterPlan;

static bool scatter_plan(PComp *pc, int32_t i, const ScatterDims *s, IrSharding *iter, bool can_reduce,
                         ScatterPlan *p)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    int32_t n = (ins->nopnd - 1) / 2;
    if (!iter)
        return false;
    int64_t om[IR_MAX_RANK];
    for (int32_t d = 0; d < s->orank; d++)
        om[d] = s->pass[d] || s->trivial[d] || s->batching[d] ? d : -1;
    p->iter = iter;
    p->op = shd_project(a, iter, s->orank, om);
    p->ix = shd_project(a, iter, s->irank, s->ix_to_it);
    p->upd = shd_project(a, iter, s->urank, s->upd_to_it);
    p->partial = p->op ? shd_broadcast_to_shape(a, p->op, &ins->shape) : NULL;
    if (!p->op || !p->ix || !p->upd || !p->partial)
        return false;
    p->reduce = false;
    for (int32_t k = 0; k < s->nb; k++)
        p->reduce |= shd_tiles(iter, s->orank + k) > 1;
    if (p->reduce && !can_reduce)
        return false;
    IrShape local;
    int64_t out_bytes = 0;
    if (shd_shard_shape(a, &ins->shape, p->partial, &local) == IR_OK)
        out_bytes = ir_shape_bytes(&local);
    p->cost = spmd_reshard_cost(&ins->shape, p->partial, pc->shd[i]) + (p->reduce ? 2 * out_bytes : 0) +
              spmd_reshard_cost(&pc->sc->instr[ins->opnd[n]].shape, pc->shd[ins->opnd[n]], p->ix);
    for (int32_t k = 0; k < n; k++)
        p->cost += spmd_reshard_cost(&pc->sc->instr[ins->opnd[k]].shape, pc->shd[ins->opnd[k]], p->op) +
                   spmd_reshard_cost(&pc->sc->instr[ins->opnd[n + 1 + k]].shape, pc->shd[ins->opnd[n + 1 + k]], p->upd);
    return true;
}

/* pred[]: true on the device whose iteration coordinates along `dims` are
 * all 0 (the one device of its group that keeps the operand). */
static int32_t first_in_group(PComp *pc, const IrSharding *s, int32_t ndims, const int64_t *dims)
{
    int64_t n = pc->sp->n;
    int64_t *tab = ir_alloc_array(spmd_arena(pc), (size_t)n, sizeof(int64_t));
    if (!tab)
        return spmd_oom(pc), -1;
    int64_t c[IR_MAX_RANK + 2];
    for (int64_t p = 0; p < n; p++) {
        tab[p] = 1;
        if (shd_device_coords(s, p, c))
            for (int32_t k = 0; k < ndims; k++)
                if (c[dims[k]] != 0)
                    tab[p] = 0;
    }
    return spmd_emit_compare(pc, spmd_emit_table_lookup(pc, tab), spmd_emit_s32(pc, 1), CMP_EQ);
}

/* Scatter, as in the file comment, plus index passthrough: with indices
 * and updates tiled on the scatter (batch) dims and a simple combiner
 * (add, max, ...; one operand), each device scatters its own updates into
 * the operand (kept by the first device of each group, the combiner's
 * identity elsewhere) and an all-reduce with the combiner merges them.
 * Padding rows of uneven indices get index -1, out of bounds: dropped.
 * Worked example (2 devices): table f32[10,4] {devices=[2,1]0,1},
 * scatter-add of updates f32[6,4] at rows ids s32[6,1] (both replicated):
 * device 1 subtracts its offset 5 from every id, so id 7 becomes 2
 * (applied to its local row 2 = row 7) while id 3 becomes -2 and is dropped
 * as out of bounds; device 0 keeps ids as they are and drops id 7 (>= its 5
 * rows). No communication. */
IrStatus spmd_scatter(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    int32_t n = (ins->nopnd - 1) / 2;
    if (n < 1 || ins->ncalled < 1)
        return spmd_fallback(pc, i);
    const IrInstr *o = &pc->sc->instr[ins->opnd[0]], *x = &pc->sc->instr[ins->opnd[n]],
                  *u = &pc->sc->instr[ins->opnd[n + 1]];
    ScatterDims s;
    for (int32_t k = 0; k < ins->nopnd; k++)
        if (!plannable(pc->shd[ins->opnd[k]]))
            return spmd_fallback(pc, i);
    if (!plannable(pc->shd[i]) || !scatter_dims(ins, &o->shape, &x->shape, &u->shape, &s))
        return spmd_fallback(pc, i);
    IrOpcode red = n == 1 ? ir_simple_reducer(pc->sp->src, ins->called[0]) : OP_COUNT;
    const IrSharding *out0 = pc->shd[i];
    if (ins->shape.type == IR_TUPLE && (out0 = shd_tuple_element(a, pc->shd[i], &ins->shape, 0)) == NULL)
        return spmd_oom(pc);
    int32_t it = s.orank + s.nb;
    int64_t from_out[IR_MAX_RANK], from_ix[IR_MAX_RANK], from_upd[IR_MAX_RANK];
    for (int32_t j = 0; j < it; j++) {
        from_out[j] = j < s.orank && (s.pass[j] || s.trivial[j] || s.batching[j]) ? j : -1;
        from_ix[j] = from_upd[j] = -1;
    }
    for (int32_t d = 0; d < s.irank; d++)
        if (s.ix_to_it[d] >= 0)
            from_ix[s.ix_to_it[d]] = d;
    for (int32_t d = 0; d < s.urank; d++)
        if (s.upd_to_it[d] >= 0)
            from_upd[s.upd_to_it[d]] = d;
    IrSharding *cand[4] = {
        shd_project(a, out0, it, from_out),
        shd_project(a, pc->shd[ins->opnd[0]], it, from_out),
        shd_project(a, pc->shd[ins->opnd[n + 1]], it, from_upd),
        shd_project(a, pc->shd[ins->opnd[n]], it, from_ix),
    };
    ScatterPlan best = {0}, p;
    bool have = false;
    for (int32_t c = 0; c < 4; c++)
        if (scatter_plan(pc, i, &s, cand[c], red != OP_COUNT, &p) && (!have || p.cost < best.cost)) {
            best = p;
            have = true;
        }
    if (!have) /* the output's candidate never needs a reduce: only OOM gets here */
        return spmd_oom(pc);

    int32_t ops[ins->nopnd];
    for (int32_t k = 0; k < n; k++) {
        ops[k] = spmd_operand_as(pc, i, k, best.op);
        ops[n + 1 + k] = spmd_operand_as(pc, i, n + 1 + k, best.upd);
    }
    int32_t iv = spmd_operand_as(pc, i, n, best.ix);
    bool shift = false;
    for (int32_t d = 0; d < s.orank; d++)
        shift |= s.trivial[d] && shd_tiles(best.op, d) > 1;
    int64_t bdims[IR_MAX_RANK];
    for (int32_t k = 0; k < s.nb; k++)
        bdims[k] = s.orank + k;
    if (shift || best.reduce)
        iv = explicit_indices(pc, iv, s.ivd);
    if (best.reduce) {
        /* Padding rows of the indices must not scatter anything. */
        IrType t = iv >= 0 ? spmd_val_shape(pc, iv)->type : IR_S32;
        iv = spmd_mask_padding(pc, iv, &x->shape, best.ix, spmd_emit_scalar_const(pc, t, -1));
        IrType ot = o->shape.type;
        int32_t keep = first_in_group(pc, best.iter, s.nb, bdims);
        IrShape os = ops[0] >= 0 ? *spmd_val_shape(pc, ops[0]) : o->shape;
        IrShape ps;
        if (ir_shape_make(a, &ps, IR_PRED, os.rank, os.dims) != IR_OK)
            return spmd_oom(pc);
        int32_t id = spmd_emit_broadcast(pc, spmd_emit_identity_const(pc, ot, red), &os, 0, NULL);
        ops[0] = spmd_emit_select(pc, spmd_emit_broadcast(pc, keep, &ps, 0, NULL), ops[0], id);
    }
    if (shift)
        iv = shift_indices(pc, iv, s.ivd, &ins->a.x->scatter.scatter_dims_to_operand_dims, best.op, &o->shape, s.pass);
    ops[n] = iv;
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, best.partial, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t called = spmd_scalar_comp(pc->sp, ins->called[0]);
    if (called < 0)
        return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, 1, &called);
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL;
    if (best.reduce && !shd_groups_along(pc, best.iter, s.nb, bdims, &ng, &size, &groups))
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_finish_partial(pc, v, &ins->shape, best.partial, red, ng, size, groups, pc->shd[i]));
}
