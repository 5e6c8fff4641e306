/*
 * prop_elementwise.c: sharding propagation through elementwise ops (and
 * map, convert, copy: every FAM_ELEMENTWISE op of hlo_ops.def).
 *
 * The result and each operand of the same rank take the same sharding,
 * forward and backward: add(f32[8] {devices=[2]0,1}, f32[8]) gives
 * f32[8] {devices=[2]0,1}, and back. A scalar operand (select's or
 * clamp's) maps to nothing. Reverse keeps the sharding as it is too and
 * takes this rule (see prop_slice.c).
 */
#include "prop_internal.h"

static IrStatus elementwise_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    if (ir_shape_is_array(&x->shape) && os->rank == x->shape.rank)
        return prop_emit(p, g, 0, s, os);
    return IR_OK;
}

static IrStatus elementwise_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                                const IrShape *us)
{
    (void)u;
    (void)k;
    return us->rank == prop_ins(p, g)->shape.rank ? prop_emit(p, g, 0, s, us) : IR_OK;
}

const PropRule prop_rule_elementwise = {.fwd = elementwise_fwd, .bwd = elementwise_bwd};
