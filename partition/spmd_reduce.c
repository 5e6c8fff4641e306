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
 * Other reducers (any computation, and variadic reduces such as argmax's
 * (value, index) pairs), whose init need not be an identity and whose
 * padding has no identity to become: the reducer is lifted to carry a
 * pred "valid" with each value, (a,fa).(b,fb) = (fa&&fb ? f(a,b) : fa ? a
 * : b, fa||fb), whose identity is (anything, false). Each device reduces
 * its shard with the lifted reducer (padding not valid; the init valid on
 * the first device of each group only), then every partial result and
 * flag is all-gathered along a new leading dim and reduced over it again:
 * the group's partial results move, not its inputs, and every element and
 * the init are combined once, as in the unpartitioned reduce (in element
 * order when one dim is tiled).
 * Reduces whose inputs are not tiled, or have different shapes, gather the
 * reduced dims first (reshard to a sharding that leaves them untiled), then
 * reduce locally; the sharding is input 0's, or another input's or the
 * result's where that moves fewer bytes (gathered_sharding). Example:
 * argmax over dim 0 of v f32[16,6] {replicated} with its iota
 * s32[16,6] {devices=[1,4]0,1,2,3} into a result {devices=[4]0,1,2,3}:
 * each device slices its 2 columns of v and reduces them with its iota's,
 * no collective (input 0's rule all-gathered the iota).
 */
#include "spmd_internal.h"

#include <string.h>

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* pred[]: true on the device whose coordinates along `dims` are all 0. */
static int32_t first_in_group(PComp *pc, const IrSharding *s, int32_t ndims, const int64_t *dims)
{
    int64_t n = pc->sp->n;
    int64_t *tab = ir_alloc_array(spmd_arena(pc), (size_t)n, sizeof(int64_t));
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
    int32_t v = spmd_emit_table_lookup(pc, tab);
    return spmd_emit_compare(pc, v, spmd_emit_s32(pc, 1), CMP_EQ);
}

/* Bytes a device receives to run the reduce on inputs under `keep` (the
 * reduced dims whole): every input resharded to it, and each result from
 * keep's kept dims to the result's sharding. */
static int64_t gathered_cost(PComp *pc, int32_t i, const IrSharding *keep)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t n = ins->nopnd / 2;
    IrSharding *out = shd_remove_dims(spmd_tmp(pc), keep, ins->a.dimensions.n, ins->a.dimensions.v);
    if (!out)
        return -1;
    int64_t cost = 0;
    for (int32_t k = 0; k < n; k++) {
        const IrShape *rs = n > 1 ? &ins->shape.tuple[k] : &ins->shape;
        cost += spmd_reshard_cost(&pc->sc->instr[ins->opnd[k]].shape, pc->shd[ins->opnd[k]], keep) +
                spmd_reshard_cost(rs, out, shd_leaf(pc->shd[i], &ins->shape, k));
    }
    return cost;
}

/* The sharding of the inputs a reduce that gathers its reduced dims runs
 * on: input 0's with those dims whole, unless another input's or the
 * result's moves fewer bytes (spmd_reshard_cost; ties: input 0's). An
 * argmax's (value, index) reduce whose values arrive replicated and whose
 * iota arrives tiled on the kept dim, its result tiled alike (the auto
 * plan of tests/jax/test_auto_heldout45.py's lowp on 4 devices), slices
 * the values where input 0's rule all-gathered the iota (384 bytes). A
 * manual subgroup keeps input 0's. NULL on OOM. */
static IrSharding *gathered_sharding(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    int32_t n = ins->nopnd / 2;
    const IrI64List *dims = &ins->a.dimensions;
    const IrSharding *in0 = pc->shd[ins->opnd[0]];
    IrSharding *best = shd_replicate_dims(a, in0->kind == SHD_TILED ? in0 : &repl_sharding, dims->n, dims->v);
    if (!best || (in0->kind == SHD_TILED && shd_has_manual_subgroup(in0)))
        return best;
    const IrShape *ishape = &pc->sc->instr[ins->opnd[0]].shape;
    int64_t kept[IR_MAX_RANK];
    for (int32_t d = 0, o = 0; d < ishape->rank; d++)
        if (!ir_list_has(dims, d))
            kept[o++] = d;
    int64_t best_cost = gathered_cost(pc, i, best);
    for (int32_t c = 1; c <= n && best_cost > 0; c++) {
        const IrSharding *s = c < n ? pc->shd[ins->opnd[c]] : shd_leaf(pc->shd[i], &ins->shape, 0);
        if (s->kind != SHD_TILED || shd_has_manual_subgroup(s))
            continue;
        IrSharding *cand = c < n ? shd_replicate_dims(a, s, dims->n, dims->v)
                                 : shd_insert_dims(a, s, ishape->rank, kept);
        int64_t cost = cand ? gathered_cost(pc, i, cand) : -1;
        if (cost < 0)
            return NULL;
        if (cost < best_cost) {
            best = cand;
            best_cost = cost;
        }
    }
    return best_cost < 0 ? NULL : best;
}

/* Gather the reduced dims, then reduce locally. */
static IrStatus reduce_gathered(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    int32_t n = ins->nopnd / 2;
    IrSharding *keep = gathered_sharding(pc, i);
    IrSharding *out = keep ? shd_remove_dims(a, keep, ins->a.dimensions.n, ins->a.dimensions.v) : NULL;
    IrSharding *outs = out ? shd_broadcast_to_shape(a, out, &ins->shape) : NULL;
    if (!outs)
        return spmd_oom(pc);
    int32_t ops[ins->nopnd];
    /* Inits: replicated (within manual groups, when the input has them). */
    int64_t all[IR_MAX_RANK];
    for (int32_t d = 0; d < ir_sharding_data_rank(keep); d++)
        all[d] = d;
    const IrSharding *init_s = keep->kind == SHD_TILED && shd_has_manual_subgroup(keep)
                                   ? shd_replicate_dims(a, keep, ir_sharding_data_rank(keep), all)
                                   : &repl_sharding;
    if (!init_s)
        return spmd_oom(pc);
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, k < n ? keep : init_s);
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, outs, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t called = spmd_scalar_comp(pc->sp, ins->called[0]);
    if (called < 0)
        return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, 1, &called);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, outs, pc->shd[i]));
}

/* The reduced dims that s tiles (into tiled) and the other dims. */
static void split_dims(const IrSharding *s, const IrShape *shape, const IrI64List *dims, int64_t *tiled, int32_t *nt,
                       int64_t *other, int32_t *no)
{
    *nt = *no = 0;
    for (int32_t d = 0; d < shape->rank; d++) {
        bool reduced = false;
        for (int32_t k = 0; k < dims->n; k++)
            reduced |= dims->v[k] == d;
        if (reduced && shd_tiles(s, d) > 1)
            tiled[(*nt)++] = d;
        else
            other[(*no)++] = d;
    }
}

/* All-gather partial result v (this device's f[...]) of a group of `size`
 * along a new leading dim: f[size, ...]. */
static int32_t gather_partials(PComp *pc, int32_t v, int32_t ng, int32_t size, const int64_t *groups)
{
    if (v < 0)
        return -1;
    const IrShape *s = spmd_val_shape(pc, v);
    int64_t dims[IR_MAX_RANK + 1];
    dims[0] = 1;
    memcpy(dims + 1, s->dims, (size_t)s->rank * sizeof(int64_t));
    IrShape one;
    if (ir_shape_make(spmd_tmp(pc), &one, s->type, s->rank + 1, dims) != IR_OK) {
        spmd_oom(pc);
        return -1;
    }
    return spmd_emit_all_gather(pc, spmd_emit_reshape(pc, v, &one), 0, ng, size, groups);
}

/* Parameter `number` of computation c, a scalar of type t. */
static int32_t lift_param(IrModule *m, IrComputation *c, IrType t, int64_t number)
{
    IrInstr p = {.a.x = &ir_no_attrs_x, .op = OP_PARAMETER, .shape = {.type = t}, .name = ir_unique_name(m, "p")};
    p.a.parameter_number = number; /* before adding: it files the parameter */
    return p.name ? ir_add_instr(m, c, &p) : -1;
}

/* The reducer f of n operands of types t[], lifted to n + 1 operands:
 * the values and a pred "valid", with
 *   (a, fa) . (b, fb) = (fa && fb ? f(a, b) : fa ? a : b, fa || fb).
 * (anything, false) is its identity, whatever f is: padding, and the
 * devices that must not apply the reduce's init, use it, so every init
 * and element is combined once, as in the unpartitioned reduce (XLA's
 * contract, init an identity of f, is then not needed). -1 on OOM. */
static int32_t lifted_reducer(Spmd *sp, int32_t f, int32_t n, const IrType *t)
{
    IrModule *m = sp->dst;
    const char *name = ir_unique_name(m, "valid_or");
    int32_t ci = name ? ir_add_computation(m, name) : -1;
    if (ci < 0)
        return -1;
    IrComputation *c = m->comp[ci];
    int32_t a[n + 1], b[n + 1], call_ops[2 * n], out[n + 1];
    for (int32_t k = 0; k <= n; k++) {
        IrType tk = k < n ? t[k] : IR_PRED;
        if ((a[k] = lift_param(m, c, tk, k)) < 0 || (b[k] = lift_param(m, c, tk, n + 1 + k)) < 0)
            return -1;
    }
    for (int32_t k = 0; k < n; k++) {
        call_ops[k] = a[k];
        call_ops[n + k] = b[k];
    }
    IrShape el[n], res = {.type = t[0]};
    for (int32_t k = 0; k < n; k++)
        el[k] = (IrShape){.type = t[k]};
    if (n > 1 && ir_shape_make_tuple(m->arena, &res, n, el) != IR_OK)
        return -1;
    int32_t call = ir_add_simple(m, c, OP_CALL, &res, 2 * n, call_ops, NULL);
    int32_t *called = call >= 0 ? ir_alloc(m->arena, sizeof(int32_t)) : NULL;
    if (!called)
        return -1;
    *called = f;
    c->instr[call].ncalled = 1;
    c->instr[call].called = called;
    IrShape pred = {.type = IR_PRED};
    int32_t both_ops[2] = {a[n], b[n]};
    int32_t both = ir_add_simple(m, c, OP_AND, &pred, 2, both_ops, NULL);
    if (both < 0 || (out[n] = ir_add_simple(m, c, OP_OR, &pred, 2, both_ops, NULL)) < 0)
        return -1;
    for (int32_t k = 0; k < n; k++) {
        int32_t fk = call;
        if (n > 1) {
            if ((fk = ir_add_simple(m, c, OP_GET_TUPLE_ELEMENT, &el[k], 1, &call, NULL)) < 0)
                return -1;
            c->instr[fk].a.tuple_index = k;
        }
        int32_t ab_ops[3] = {a[n], a[k], b[k]};
        int32_t ab = ir_add_simple(m, c, OP_SELECT, &el[k], 3, ab_ops, NULL);
        int32_t sel_ops[3] = {both, fk, ab};
        if (ab < 0 || (out[k] = ir_add_simple(m, c, OP_SELECT, &el[k], 3, sel_ops, NULL)) < 0)
            return -1;
    }
    IrShape el1[n + 1], tup;
    for (int32_t k = 0; k <= n; k++)
        el1[k] = (IrShape){.type = k < n ? t[k] : IR_PRED};
    if (ir_shape_make_tuple(m->arena, &tup, n + 1, el1) != IR_OK)
        return -1;
    c->root = ir_add_simple(m, c, OP_TUPLE, &tup, n + 1, out, NULL);
    return c->root < 0 ? -1 : ci;
}

/* A reduce of operands ops (n values, n inits, then... see below) with the
 * lifted reducer: shape (values..., pred) of the value shape `vs` of each
 * output (types t[]), over dims. */
static int32_t emit_lifted_reduce(PComp *pc, int32_t lifted, int32_t n, const int32_t *ops, const IrShape *vs,
                                  const IrType *t, const IrI64List *dims)
{
    IrShape el[n + 1], tup;
    for (int32_t k = 0; k <= n; k++)
        if (ir_shape_make(spmd_tmp(pc), &el[k], k < n ? t[k] : IR_PRED, vs->rank, vs->dims) != IR_OK) {
            spmd_oom(pc);
            return -1;
        }
    if (ir_shape_make_tuple(spmd_tmp(pc), &tup, n + 1, el) != IR_OK) {
        spmd_oom(pc);
        return -1;
    }
    int32_t r = spmd_emit(pc, OP_REDUCE, &tup, 2 * (n + 1), ops);
    int64_t *d = r >= 0 ? ir_alloc_array(spmd_arena(pc), (size_t)dims->n, sizeof(int64_t)) : NULL;
    int32_t *called = d ? ir_alloc(spmd_arena(pc), sizeof(int32_t)) : NULL;
    if (!called) {
        if (r >= 0)
            spmd_oom(pc);
        return -1;
    }
    memcpy(d, dims->v, (size_t)dims->n * sizeof(int64_t));
    *called = lifted;
    IrInstr *ri = &pc->dc->instr[r];
    ri->a.dimensions = (IrI64List){.n = dims->n, .v = d};
    ri->ncalled = 1;
    ri->called = called;
    return r;
}

/* Any reducer, any number of inputs, input 0 tiled along some reduced dim
 * (the header's rule). */
static IrStatus reduce_any(PComp *pc, int32_t i, const int64_t *tiled, int32_t nt, const int64_t *other, int32_t no)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    int32_t n = ins->nopnd / 2;
    const IrSharding *in = pc->shd[ins->opnd[0]];
    const IrShape *ishape = &pc->sc->instr[ins->opnd[0]].shape;
    IrSharding *partial = shd_remove_dims(a, in, ins->a.dimensions.n, ins->a.dimensions.v);
    IrSharding *partials = partial ? shd_broadcast_to_shape(a, partial, &ins->shape) : NULL;
    IrSharding *only = shd_replicate_dims(a, in, no, other);
    int64_t all[IR_MAX_RANK];
    for (int32_t d = 0; d < ir_sharding_data_rank(in); d++)
        all[d] = d;
    const IrSharding *init_s = shd_has_manual_subgroup(in) ? shd_replicate_dims(a, in, ir_sharding_data_rank(in), all)
                                                           : &repl_sharding;
    if (!partials || !only || !init_s)
        return spmd_oom(pc);
    /* The reducer's accumulator types: a reduce may take inputs and inits
     * of another precision (reduce_mixed_precision.hlo). */
    const IrComputation *fc = pc->sp->src->comp[ins->called[0]];
    IrType t[n];
    for (int32_t k = 0; k < n; k++)
        t[k] = fc->instr[fc->param[k]].shape.type;
    int32_t f = spmd_scalar_comp(pc->sp, ins->called[0]);
    int32_t lifted = f < 0 ? -1 : lifted_reducer(pc->sp, f, n, t);
    if (lifted < 0)
        return spmd_oom(pc);
    /* Local: each device's shard, valid where it is not padding; the init
     * valid on the first device of each group only. */
    int32_t ops[2 * (n + 1)];
    for (int32_t k = 0; k < n; k++) {
        ops[k] = spmd_operand_as(pc, i, k, in);
        ops[n + 1 + k] = spmd_operand_as(pc, i, n + k, init_s);
    }
    const IrShape *ls = ops[0] >= 0 ? spmd_val_shape(pc, ops[0]) : NULL;
    IrShape lp;
    if (!ls || ir_shape_make(a, &lp, IR_PRED, ls->rank, ls->dims) != IR_OK)
        return ls ? spmd_oom(pc) : spmd_set_val(pc, i, -1);
    int32_t no_pad = spmd_emit_broadcast(pc, spmd_emit_scalar_const(pc, IR_PRED, 1), &lp, 0, NULL);
    ops[n] = spmd_mask_padding(pc, no_pad, ishape, only, spmd_emit_scalar_const(pc, IR_PRED, 0));
    ops[2 * n + 1] = first_in_group(pc, in, nt, tiled);
    for (int32_t k = 0; k < 2 * (n + 1); k++)
        if (ops[k] < 0)
            return spmd_set_val(pc, i, -1);
    IrShape local;
    const IrSharding *p0 = partials->kind == SHD_TUPLE ? &partials->tuple[0] : partials;
    if (shd_shard_shape(a, n > 1 ? &ins->shape.tuple[0] : &ins->shape, p0, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t r = emit_lifted_reduce(pc, lifted, n, ops, &local, t, &ins->a.dimensions);
    /* Across the group: every device's partial results and flags, reduced
     * again over the gathered dim with inits that are not valid. */
    int32_t ng, size;
    int64_t *groups;
    if (r < 0 || !shd_groups_along(pc, in, nt, tiled, &ng, &size, &groups))
        return r < 0 ? spmd_set_val(pc, i, -1) : spmd_oom(pc);
    int32_t fin[2 * (n + 1)];
    for (int32_t k = 0; k <= n; k++) {
        fin[k] = gather_partials(pc, spmd_emit_gte(pc, r, k), ng, size, groups);
        fin[n + 1 + k] = k < n ? ops[n + 1 + k] : spmd_emit_scalar_const(pc, IR_PRED, 0);
        if (fin[k] < 0 || fin[n + 1 + k] < 0)
            return spmd_set_val(pc, i, -1);
    }
    int64_t zero = 0;
    int32_t g = emit_lifted_reduce(pc, lifted, n, fin, &local, t, &(IrI64List){.n = 1, .v = &zero});
    int32_t res[n];
    for (int32_t k = 0; k < n; k++)
        if ((res[k] = spmd_emit_gte(pc, g, k)) < 0)
            return spmd_set_val(pc, i, -1);
    int32_t v = n > 1 ? spmd_emit_tuple(pc, n, res) : res[0];
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, partials, pc->shd[i]));
}

bool spmd_narrow_float(IrType t)
{
    return t == IR_F16 || t == IR_BF16 || ir_type_is_lowp_float(t);
}

IrType spmd_partial_type(const IrModule *m, const IrComputation *c, const IrInstr *x)
{
    IrType t = x->shape.type;
    if (!spmd_narrow_float(t) || x->nopnd < 2)
        return t;
    const IrShape *a = &c->instr[x->opnd[0]].shape, *b = &c->instr[x->opnd[1]].shape;
    if ((x->op == OP_DOT || x->op == OP_CONVOLUTION) && a->type == t && b->type == t)
        return IR_F32;
    if (x->op == OP_REDUCE && x->nopnd == 2 && x->ncalled == 1 && m && a->type == t &&
        ir_simple_reducer(m, x->called[0]) == OP_ADD)
        return IR_F32;
    return t;
}

/* A sum of a narrow float type (f16 ...) over tiled dims: each device's
 * partial sum and the all-reduce (or reduce-scatter, spmd_partial.c) of
 * the partials are f32, the init is added once and the result rounded to
 * the type once; a reshard after an all-reduce moves the narrow type. The
 * reference accumulates in double and rounds once (device/k_reduce.c);
 * partials rounded to f16 on each device could overflow where the whole
 * sum does not: f16 [60000, 60000, -60000, -60000] over 2 devices was
 * inf + -inf = NaN partitioned, 0 in the reference. (XLA's CPU backend
 * sums in the type itself, so XLA gives inf on one device and NaN
 * partitioned.) Returns the result under shd[i]. */
static int32_t wide_sum(PComp *pc, int32_t i, int32_t v, int32_t init, const int64_t *tiled, int32_t nt,
                        int32_t no, const int64_t *other, const IrSharding *partial)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *in = pc->shd[ins->opnd[0]];
    const IrShape *ishape = &pc->sc->instr[ins->opnd[0]].shape;
    IrType t = ishape->type;
    IrSharding *only = shd_replicate_dims(spmd_tmp(pc), in, no, other);
    int32_t zero = spmd_emit_identity_const(pc, t, OP_ADD);
    IrShape wide, local;
    if (!only || ir_shape_copy(spmd_tmp(pc), &wide, &ins->shape) != IR_OK)
        return spmd_oom_value(pc);
    wide.type = IR_F32;
    v = spmd_emit_convert(pc, spmd_mask_padding(pc, v, ishape, only, zero), IR_F32);
    int32_t r = spmd_emit_reduce(pc, v, OP_ADD, (int32_t)ins->a.dimensions.n, ins->a.dimensions.v);
    int32_t ng, size;
    int64_t *groups;
    if (!shd_groups_along(pc, in, nt, tiled, &ng, &size, &groups))
        return spmd_oom_value(pc);
    bool scatter = spmd_finish_partial_scatters(pc, &wide, partial, ng, size, groups, pc->shd[i]);
    r = scatter ? spmd_finish_partial(pc, r, &wide, partial, OP_ADD, ng, size, groups, pc->shd[i])
                : spmd_emit_all_reduce(pc, r, OP_ADD, ng, size, groups);
    if (r < 0 || ir_shape_copy(spmd_tmp(pc), &local, spmd_val_shape(pc, r)) != IR_OK)
        return r < 0 ? -1 : spmd_oom_value(pc);
    int32_t i32 = spmd_emit_broadcast(pc, spmd_emit_convert(pc, init, IR_F32), &local, 0, NULL);
    r = spmd_emit_convert(pc, spmd_emit_binary(pc, OP_ADD, r, i32), t);
    return scatter ? r : spmd_reshard(pc, r, &ins->shape, partial, pc->shd[i]);
}

/* Do the reduce's inputs share one shape (a variadic reduce's may not, in
 * their element types only)? */
static bool inputs_alike(const PComp *pc, const IrInstr *ins)
{
    const IrShape *s0 = &pc->sc->instr[ins->opnd[0]].shape;
    for (int32_t k = 1; k < ins->nopnd / 2; k++) {
        const IrShape *s = &pc->sc->instr[ins->opnd[k]].shape;
        if (s->rank != s0->rank || memcmp(s->dims, s0->dims, (size_t)s->rank * sizeof(int64_t)))
            return false;
    }
    return true;
}

IrStatus spmd_reduce(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    IrOpcode red = ir_simple_reducer(pc->sp->src, ins->called[0]);
    const IrSharding *in = pc->shd[ins->opnd[0]];
    const IrShape *ishape = &pc->sc->instr[ins->opnd[0]].shape;
    if (in->kind != SHD_TILED || !inputs_alike(pc, ins))
        return reduce_gathered(pc, i);
    if (ins->nopnd != 2 || red == OP_COUNT) {
        int64_t tiled[IR_MAX_RANK], other[IR_MAX_RANK];
        int32_t nt, no;
        split_dims(in, ishape, &ins->a.dimensions, tiled, &nt, other, &no);
        return nt > 0 ? reduce_any(pc, i, tiled, nt, other, no) : reduce_gathered(pc, i);
    }
    const IrI64List *dims = &ins->a.dimensions;
    int64_t tiled[IR_MAX_RANK], other[IR_MAX_RANK];
    int32_t nt, no;
    split_dims(in, ishape, dims, tiled, &nt, other, &no);
    IrSharding *partial = shd_remove_dims(a, in, dims->n, dims->v);
    if (!partial)
        return spmd_oom(pc);
    IrType t = ishape->type;
    int32_t v = pc->val[ins->opnd[0]];
    int64_t all[IR_MAX_RANK];
    for (int32_t d = 0; d < ir_sharding_data_rank(in); d++)
        all[d] = d;
    const IrSharding *init_s = shd_has_manual_subgroup(in) ? shd_replicate_dims(a, in, ir_sharding_data_rank(in), all)
                                                           : &repl_sharding;
    if (!init_s)
        return spmd_oom(pc);
    int32_t init = spmd_operand_as(pc, i, 1, init_s);
    if (nt > 0 && spmd_partial_type(pc->sp->src, pc->sc, ins) != ins->shape.type)
        return spmd_set_val(pc, i, wide_sum(pc, i, v, init, tiled, nt, no, other, partial));
    if (nt > 0) {
        /* Padding along tiled reduced dims becomes the identity; the init
         * value is used by the first device of each group only. The init
         * may be of another float type than the input (a mixed-precision
         * reduce: infer_reducer_param_type), so each gets its own. */
        IrSharding *only = shd_replicate_dims(a, in, no, other);
        IrType init_t = pc->sc->instr[ins->opnd[1]].shape.type;
        int32_t ident = spmd_emit_identity_const(pc, t, red);
        int32_t init_ident = init_t == t ? ident : spmd_emit_identity_const(pc, init_t, red);
        if (!only)
            return spmd_oom(pc);
        v = spmd_mask_padding(pc, v, ishape, only, ident);
        init = spmd_emit_select(pc, first_in_group(pc, in, nt, tiled), init, init_ident);
    }
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, partial, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t called = spmd_scalar_comp(pc->sp, ins->called[0]);
    if (called < 0)
        return spmd_oom(pc);
    int32_t ops[2] = {v, init};
    int32_t r = spmd_emit_clone(pc, ins, &local, 2, ops, 1, &called);
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL;
    if (nt > 0 && !shd_groups_along(pc, in, nt, tiled, &ng, &size, &groups))
        return spmd_oom(pc);
    return spmd_set_val(pc, i, spmd_finish_partial(pc, r, &ins->shape, partial, red, ng, size, groups, pc->shd[i]));
}
