/*
 * prop_custom.c: sharding propagation through custom-calls.
 *
 *   a `Sharding` custom-call is an annotation on itself (propagate.c loads
 *     it) and passes its sharding to its operand and users like a copy
 *     (its unspecified_dims, XLA's partial annotations, are not read); so
 *     do the memory annotations XLA propagates through
 *     (shd_identity_custom_call) and xla.sdy.FuncResultSharding (Shardy
 *     propagates a function's result sharding back into its body: a dot
 *     whose partial sums are returned sharded is then reduce-scattered,
 *     not all-reduced and sliced by the reshard of the result);
 *   SPMDFullToShardShape and SPMDShardToFullShape are the edges of a
 *     manual region: manual spreads through any op to its results and back
 *     to its operands, but not to the full-shape side of these two (the
 *     operand of FullToShard, the result of ShardToFull), and nothing else
 *     crosses them;
 *   any other custom-call: nothing crosses it.
 */
#include "prop_internal.h"

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
        {"xla.sdy.FuncResultSharding", true}, {"SetBound", false},
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

static IrStatus custom_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    if (passes_sharding(x) && ir_shape_is_array(&x->shape) && os->rank == x->shape.rank && k == 0)
        return prop_emit(p, g, 0, s, os);
    return IR_OK;
}

static IrStatus custom_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                           const IrShape *us)
{
    if (passes_sharding(prop_ins(p, u)) && k == 0 && us->rank == prop_ins(p, g)->shape.rank)
        return prop_emit(p, g, 0, s, us);
    return IR_OK;
}

const PropRule prop_rule_custom_call = {.fwd_first = custom_fwd_first,
                                        .bwd_first = custom_bwd_first,
                                        .fwd = custom_fwd,
                                        .bwd = custom_bwd};
