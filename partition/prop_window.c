/*
 * prop_window.c: sharding propagation through reduce-window and
 * select-and-scatter.
 *
 * The same sharding both ways between the result (each result of a
 * variadic reduce-window) and the operands (select-and-scatter: operand
 * 0), when the window is not dilated: the partitioner exchanges halos
 * along tiled windowed dims. The init values and the source take
 * nothing.
 */
#include "prop_internal.h"

static bool window_dilated(const IrInstr *x)
{
    for (int32_t i = 0; i < x->a.x->window.rank; i++)
        if (x->a.x->window.dim[i].lhs_dilate > 1 || x->a.x->window.dim[i].rhs_dilate > 1)
            return true;
    return false;
}

static IrStatus window_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    if (window_dilated(x))
        return IR_OK;
    if (x->op == OP_REDUCE_WINDOW && k < x->nopnd / 2)
        return prop_emit(p, g, ir_shape_is_array(&x->shape) ? 0 : k, s, os);
    if (x->op == OP_SELECT_AND_SCATTER && k == 0)
        return prop_emit(p, g, 0, s, os);
    return IR_OK;
}

static IrStatus window_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                           const IrShape *us)
{
    IrInstr *x = prop_ins(p, u);
    if (window_dilated(x) || us->rank != prop_ins(p, g)->shape.rank)
        return IR_OK;
    if ((x->op == OP_REDUCE_WINDOW && k < x->nopnd / 2) || (x->op == OP_SELECT_AND_SCATTER && k == 0))
        return prop_emit(p, g, 0, s, us);
    return IR_OK;
}

/* Input i of a variadic reduce-window corresponds to output i. */
static int32_t window_slot(const Prop *p, int32_t u, int32_t k)
{
    IrInstr *x = prop_ins(p, u);
    return x->op == OP_REDUCE_WINDOW && k < x->nopnd / 2 ? k : -1;
}

const PropRule prop_rule_window = {.fwd = window_fwd, .bwd = window_bwd, .slot = window_slot};
