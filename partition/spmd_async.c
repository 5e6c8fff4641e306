/*
 * spmd_async.c: the async wrappers (async-start / -update / -done and the
 * sugared OP-start / OP-done forms): the wrapped op's rule applies.
 *
 * async-start(x...), calls=F is partitioned as a call of F: each operand
 * keeps the sharding F's parameter asks for (its own when F's parameters
 * carry none), F is partitioned for this site with its root ending in the
 * sharding of the async tuple's element 1, so whatever rule F's op has
 * (elementwise, dot, fft, ...) runs inside F. The async tuple
 * ((operands...), result, context...) then holds the operands' shards in
 * element 0 (the shapes async-start's shape rule asks for), the result's
 * shard in element 1 and a replicated context; -update passes it on and
 * -done takes element 1, resharded to the done's own sharding. Nothing is
 * resharded between a start and its done: they must stay a chain.
 * Example (2 devices): s = ((f32[8,4]), f32[8,4], s32[]) abs-start(f) with
 * f {devices=[2,1]0,1}: the wrapper computation becomes p = f32[4,4]
 * parameter(0), abs(p); s is ((f32[4,4]), f32[4,4], s32[]) on each device.
 * A sugared OP-start stays sugared when its partitioned wrapper is still
 * the op alone over its parameters; otherwise (the op's rule emitted
 * collectives or offsets around it) the start and done are printed in the
 * explicit form, calls= naming the partitioned wrapper.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* The sharding callee parameter p asks for, else `fallback`. */
static const IrSharding *param_or(PComp *pc, int32_t comp, int32_t p, const IrSharding *fallback)
{
    const IrComputation *c = pc->sp->src->comp[comp];
    if (p < c->nparam && c->param[p] >= 0 && c->instr[c->param[p]].sharding)
        return c->instr[c->param[p]].sharding;
    return fallback;
}

/* True when computation c is its parameters and one op over them. */
static bool op_alone(const IrComputation *c)
{
    if (c->root < 0 || c->ninstr != c->nparam + 1)
        return false;
    const IrInstr *r = &c->instr[c->root];
    if (r->op == OP_PARAMETER)
        return false;
    for (int32_t k = 0; k < r->nopnd; k++)
        if (c->instr[r->opnd[k]].op != OP_PARAMETER)
            return false;
    return true;
}

/* The async tuple's sharding: operand leaves under ps, the result's under
 * root_s, the context replicated (flat leaves, persistent arena). */
static IrSharding *async_sharding(PComp *pc, const IrInstr *ins, const IrSharding *const *ps,
                                  const IrSharding *root_s)
{
    const IrShape *sh = &ins->shape;
    int32_t nl = ir_shape_leaf_count(sh), at = 0;
    IrSharding **leaf = ir_alloc_array(spmd_tmp(pc), (size_t)(nl > 0 ? nl : 1), sizeof *leaf);
    if (!leaf)
        return NULL;
    for (int32_t k = 0; k < ins->nopnd; k++) {
        const IrShape *os = &pc->sc->instr[ins->opnd[k]].shape;
        for (int32_t l = 0, n = ir_shape_leaf_count(os); l < n; l++)
            leaf[at++] = (IrSharding *)shd_leaf(ps[k], os, l);
    }
    for (int32_t l = 0, n = ir_shape_leaf_count(&sh->tuple[1]); l < n; l++)
        leaf[at++] = (IrSharding *)shd_leaf(root_s, &sh->tuple[1], l);
    while (at < nl)
        leaf[at++] = (IrSharding *)&repl_sharding;
    return shd_tuple(spmd_arena(pc), nl, leaf);
}

/* The destination instruction's sugar flag, which its clone copied from the
 * source: changed only where the destination cannot print the sugared form. */
static bool set_async_sugar(PComp *pc, int32_t v, bool sugar)
{
    IrAttrs *a = &pc->dc->instr[v].a;
    if (a->x->async_sugar == sugar)
        return true;
    IrAttrsX *x = ir_attrs_x_edit(spmd_arena(pc), a);
    if (x)
        x->async_sugar = sugar;
    return x != NULL;
}

static IrStatus async_start(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    Spmd *sp = pc->sp;
    if (ins->ncalled != 1 || ins->shape.type != IR_TUPLE || ins->shape.ntuple < 2)
        return spmd_fallback(pc, i);
    int32_t comp = ins->called[0];
    const IrSharding **ps = ir_alloc_array(spmd_tmp(pc), (size_t)(ins->nopnd > 0 ? ins->nopnd : 1), sizeof *ps);
    IrSharding *root_s = shd_tuple_element(spmd_tmp(pc), pc->shd[i], &ins->shape, 1);
    if (!ps || !root_s)
        return spmd_oom(pc);
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    for (int32_t k = 0; k < ins->nopnd; k++) {
        ps[k] = param_or(pc, comp, k, pc->shd[ins->opnd[k]]);
        ops[k] = spmd_operand_as(pc, i, k, ps[k]);
    }
    int32_t dst = spmd_partition_computation(sp, comp, ps, root_s);
    IrSharding *mine = async_sharding(pc, ins, ps, root_s);
    IrShape local;
    if (dst < 0)
        return spmd_set_val(pc, i, -1);
    if (!mine || shd_shard_shape(spmd_arena(pc), &ins->shape, mine, &local) != IR_OK)
        return spmd_oom(pc);
    const IrComputation *sc = sp->src->comp[comp];
    IrComputation *dc = sp->dst->comp[dst];
    if (sc->execution_thread && !(dc->execution_thread = ir_strdup(spmd_arena(pc), sc->execution_thread)))
        return spmd_oom(pc);
    int32_t v = spmd_emit_clone(pc, ins, &local, ins->nopnd, ops, 1, &dst);
    if (v < 0)
        return spmd_set_val(pc, i, v);
    bool sugar = ins->a.x->async_sugar && sc->async_wrapper && op_alone(dc);
    dc->async_wrapper = sugar;
    if (!set_async_sugar(pc, v, sugar))
        return spmd_oom(pc);
    pc->shd[i] = mine;
    return spmd_set_val(pc, i, v);
}

/* async-update / async-done: continue the destination start (or update)
 * of the operand, with its callee and its form. */
static IrStatus async_next(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t o = ins->opnd[0];
    int32_t v = pc->val[o];
    if (v < 0)
        return spmd_set_val(pc, i, -1);
    const IrInstr *prev = &pc->dc->instr[v];
    if (prev->op != OP_ASYNC_START && prev->op != OP_ASYNC_UPDATE)
        return spmd_fallback(pc, i);
    bool sugar = prev->a.x->async_sugar;
    int32_t called = prev->ncalled > 0 ? prev->called[0] : -1;
    const IrSharding *from = pc->shd[o];
    if (ins->op == OP_ASYNC_DONE &&
        !(from = shd_tuple_element(spmd_arena(pc), pc->shd[o], &pc->sc->instr[o].shape, 1)))
        return spmd_oom(pc);
    IrShape local;
    if (shd_shard_shape(spmd_arena(pc), &ins->shape, from, &local) != IR_OK)
        return spmd_oom(pc);
    int32_t r = spmd_emit_clone(pc, ins, &local, 1, &v, called >= 0 && ins->ncalled > 0 ? 1 : 0, &called);
    if (r < 0)
        return spmd_set_val(pc, i, r);
    if (!set_async_sugar(pc, r, sugar))
        return spmd_oom(pc);
    if (ins->op == OP_ASYNC_UPDATE) {
        pc->shd[i] = from;
        return spmd_set_val(pc, i, r);
    }
    return spmd_set_val(pc, i, spmd_reshard(pc, r, &ins->shape, from, pc->shd[i]));
}

IrStatus spmd_async(PComp *pc, int32_t i)
{
    return pc->sc->instr[i].op == OP_ASYNC_START ? async_start(pc, i) : async_next(pc, i);
}
