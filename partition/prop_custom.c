/*
 * prop_custom.c: sharding propagation through custom-calls.
 *
 *   a `Sharding` custom-call is an annotation on itself (propagate.c loads
 *     it) and passes its sharding to its operand and users like a copy
 *     (its unspecified_dims, XLA's partial annotations, are not read); so
 *     do the memory annotations XLA propagates through
 *     (shd_identity_custom_call);
 *   xla.sdy.FuncResultSharding (Shardy's result sharding) passes its
 *     sharding on like Sharding; xla.sdy.PropagationBarrier only in the
 *     directions its xla.sdy.allowed_direction allows;
 *   SPMDFullToShardShape and SPMDShardToFullShape are the edges of a
 *     manual region: manual spreads through any op to its results and back
 *     to its operands, but not to the full-shape side of these two (the
 *     operand of FullToShard, the result of ShardToFull), and nothing else
 *     crosses them;
 *   TopK (ir_is_topk) is the topk op: its rows pass both ways, the last
 *     dim untiled (prop_local.c's rule);
 *   the matrix factorizations (ir_batch_custom_call: Qr, the Householder
 *     product, LU, the pivots' permutation) pass the tiling of their
 *     leading (batch) dims both ways, between operands and results of
 *     different ranks, every other dim untiled;
 *   any other custom-call: nothing crosses it.
 */
#include "prop_internal.h"

#include <stdlib.h>

bool shd_identity_custom_call(const IrInstr *ins, bool *passthrough)
{
    /* `through`: XLA's IsPassthroughCustomOps (annotate_device_placement
     * becomes MoveToHost/MoveToDevice in XLA before it matters). */
    static const struct {
        const char *name;
        bool through;
    } id[] = {
        {"annotate_device_placement", true}, {"MoveToHost", true}, {"MoveToDevice", true},
        {"PinToDevice", true}, {"PinToDeviceSram", true}, {"Pin", false}, {"Unpin", false},
        {"ShardBarrierFrom", false}, {"ShardBarrierTo", false},
        {"xla.sdy.FuncResultSharding", true}, {"xla.sdy.PropagationBarrier", false}, {"SetBound", false},
    };
    const char *t = ins->a.x->custom_call_target;
    if (ins->op != OP_CUSTOM_CALL || !t || ins->nopnd != 1 || !ir_shape_is_array(&ins->shape))
        return false;
    for (size_t i = 0; i < sizeof id / sizeof id[0]; i++)
        if (strcmp(id[i].name, t) == 0) {
            if (passthrough)
                *passthrough = id[i].through;
            return true;
        }
    return false;
}

/* Sharding, and the identity annotations sharding passes through. */
static bool passes_sharding(const IrInstr *x)
{
    bool through = false;
    return prop_is_custom(x, "Sharding") || (shd_identity_custom_call(x, &through) && through);
}

/* Shardy's propagation barrier lets shardings cross in the directions its
 * xla.sdy.allowed_direction says (sdy's PropagationDirection: "0 : i32"
 * none, 1 forward, 2 backward, 3 both; absent: none). */
static bool barrier_allows(const IrInstr *x, bool forward)
{
    if (!prop_is_custom(x, "xla.sdy.PropagationBarrier"))
        return false;
    const char *v = ir_frontend_attr(x, "xla.sdy.allowed_direction");
    int dir = v ? atoi(v) : 0;
    return (dir & (forward ? 1 : 2)) != 0;
}

/* Forward: nothing crosses the edges of a manual region. */
static IrStatus custom_fwd_first(Prop *p, int32_t g, int32_t k, bool *done)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    *done = prop_is_custom(x, "SPMDShardToFullShape") || prop_is_custom(x, "SPMDFullToShardShape");
    return IR_OK;
}

/* Backward: the operand of ShardToFull is manual (the region's inside),
 * that of FullToShard takes nothing. */
static IrStatus custom_bwd_first(Prop *p, int32_t u, int32_t k, int32_t g, bool *done)
{
    IrInstr *x = prop_ins(p, u);
    *done = true;
    if (prop_is_custom(x, "SPMDFullToShardShape"))
        return IR_OK;
    if (prop_is_custom(x, "SPMDShardToFullShape"))
        return k == 0 ? prop_emit_all(p, g, p->manual, NULL) : IR_OK;
    *done = false;
    return IR_OK;
}

/* s (of a value of rank `from`) on its leading `batch` dims only, for a
 * value of rank `to`: the other dims untiled. */
static const IrSharding *batch_part(Prop *p, const IrSharding *s, int32_t from, int32_t to, int32_t batch)
{
    int64_t map[IR_MAX_RANK];
    if (batch > from || batch > to)
        return NULL;
    for (int32_t i = 0; i < to; i++)
        map[i] = i < batch ? i : -1;
    return shd_project(p->tmp, s, to, map);
}

static IrStatus custom_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    if (ir_is_topk(x))
        return prop_rule_local.fwd(p, g, k, s, os);
    int32_t batch = ir_batch_custom_call(x);
    if (batch >= 0) {
        for (int32_t l = 0; l < prop_nleaf(p, g); l++) {
            const IrShape *ls = prop_lshape(p, g, l);
            TRY(prop_emit(p, g, l, batch_part(p, s, os->rank, ls->rank, batch), os));
        }
        return IR_OK;
    }
    if ((passes_sharding(x) || barrier_allows(x, true)) && ir_shape_is_array(&x->shape) &&
        os->rank == x->shape.rank && k == 0)
        return prop_emit(p, g, 0, s, os);
    return IR_OK;
}

static IrStatus custom_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                           const IrShape *us)
{
    const IrInstr *x = prop_ins(p, u);
    if (ir_is_topk(x))
        return prop_rule_local.bwd(p, u, k, g, s, us);
    int32_t batch = ir_batch_custom_call(x);
    if (batch >= 0) {
        const IrShape *gs = &prop_ins(p, g)->shape;
        return ir_shape_is_array(gs) ? prop_emit(p, g, 0, batch_part(p, s, us->rank, gs->rank, batch), us) : IR_OK;
    }
    if ((passes_sharding(x) || barrier_allows(x, false)) && k == 0 && us->rank == prop_ins(p, g)->shape.rank)
        return prop_emit(p, g, 0, s, us);
    return IR_OK;
}

/* A TopK's one operand corresponds to its values (slot 0); a matrix
 * factorization's operands to its first result (slot 0), whose batch
 * dims they share; no other custom-call of several results passes a
 * sharding back. */
static int32_t custom_slot(const Prop *p, int32_t u, int32_t k)
{
    if (ir_batch_custom_call(prop_ins(p, u)) >= 0)
        return 0;
    return ir_is_topk(prop_ins(p, u)) ? prop_rule_local.slot(p, u, k) : -1;
}

const PropRule prop_rule_custom_call = {.fwd_first = custom_fwd_first,
                                        .bwd_first = custom_bwd_first,
                                        .fwd = custom_fwd,
                                        .bwd = custom_bwd,
                                        .slot = custom_slot};
