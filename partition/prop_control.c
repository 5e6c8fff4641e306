/*
 * prop_control.c: sharding propagation through the ops that move values
 * unchanged: tuple, get-tuple-element, opt-barrier, while, call,
 * conditional, fusion (a call) and the async wrappers (FAM_TUPLE,
 * FAM_CONTROL, FAM_FUSION, FAM_ASYNC): async-start's element 0 holds its
 * operands' slots and element 1 its callee root's, async-update passes its
 * operand's slots, async-done takes element 1's.
 *
 * They move slots, not shardings: a tuple's leaves are its operands'
 * slots, a get-tuple-element's slots those of its element, a while's and
 * an opt-barrier's slots those of its operand (the while state in the
 * loop, its body and its condition are one shared slot, a group set up by
 * propagate.c). Call and conditional pass values through their callees
 * (prop_links), not from operand to result directly.
 */
#include "prop_internal.h"

/* The first leaf of operand k of async-start g inside element 0 of its
 * async tuple ((operands...), result, context...). */
static int32_t async_operand_leaf(const Prop *p, int32_t g, int32_t k)
{
    int32_t at = prop_toff(p, g, 0);
    for (int32_t j = 0; j < k; j++)
        at += prop_nleaf(p, prop_opnd(p, g, j));
    return at;
}

/* Result of g from its operand k. */
static IrStatus move_fwd(Prop *p, int32_t g, int32_t k, bool *done)
{
    IrInstr *x = prop_ins(p, g);
    int32_t o = prop_opnd(p, g, k);
    *done = true;
    switch (x->op) {
    case OP_TUPLE:
        return prop_emit_slots(p, g, prop_toff(p, g, k), o, 0, prop_nleaf(p, o));
    case OP_GET_TUPLE_ELEMENT:
        return prop_emit_slots(p, g, 0, o, prop_toff(p, o, x->a.tuple_index), prop_nleaf(p, g));
    case OP_OPTIMIZATION_BARRIER:
    case OP_WHILE:
    case OP_ASYNC_UPDATE:
        return k == 0 ? prop_emit_slots(p, g, 0, o, 0, prop_nleaf(p, g)) : IR_OK;
    case OP_ASYNC_DONE:
        return k == 0 ? prop_emit_slots(p, g, 0, o, prop_toff(p, o, 1), prop_nleaf(p, g)) : IR_OK;
    case OP_ASYNC_START:
        /* element 0 holds the operands; the result comes through the callee */
        return prop_emit_slots(p, g, async_operand_leaf(p, g, k), o, 0, prop_nleaf(p, o));
    case OP_CALL:
    case OP_FUSION:
    case OP_CONDITIONAL:
        return IR_OK;   /* through the callee: prop_links() */
    default:
        *done = false;
        return IR_OK;
    }
}

/* Operand g from parameter pn of callee b of x. */
static IrStatus from_param(Prop *p, const IrInstr *x, int32_t b, int32_t pn, int32_t g)
{
    if (b < 0 || b >= x->ncalled)
        return IR_OK;
    int32_t rci = p->rcof[x->called[b]];
    IrComputation *c = p->m->comp[x->called[b]];
    if (rci < 0 || pn >= c->nparam || c->param[pn] < 0)
        return IR_OK;
    return prop_emit_slots(p, g, 0, p->ibase[rci] + c->param[pn], 0, prop_nleaf(p, g));
}

/* Operand g (position k of user u) from u; a call's or a conditional's
 * operand from the callee parameter it feeds (conditional: operand b+1 ->
 * branch b's parameter). */
static IrStatus move_bwd(Prop *p, int32_t u, int32_t k, int32_t g, bool *done)
{
    IrInstr *x = prop_ins(p, u);
    *done = true;
    switch (x->op) {
    case OP_TUPLE:
        return prop_emit_slots(p, g, 0, u, prop_toff(p, u, k), prop_nleaf(p, g));
    case OP_GET_TUPLE_ELEMENT:
        return prop_emit_slots(p, g, prop_toff(p, g, x->a.tuple_index), u, 0, prop_nleaf(p, u));
    case OP_OPTIMIZATION_BARRIER:
    case OP_WHILE:
    case OP_ASYNC_UPDATE:
        return k == 0 ? prop_emit_slots(p, g, 0, u, 0, prop_nleaf(p, g)) : IR_OK;
    case OP_ASYNC_DONE:
        return k == 0 ? prop_emit_slots(p, g, prop_toff(p, g, 1), u, 0, prop_nleaf(p, u)) : IR_OK;
    case OP_ASYNC_START:
        /* element 0's slots, and the callee's parameter as a call */
        TRY(prop_emit_slots(p, g, 0, u, async_operand_leaf(p, u, k), prop_nleaf(p, g)));
        return from_param(p, x, 0, k, g);
    case OP_CALL:
    case OP_FUSION:
        return from_param(p, x, 0, k, g);
    case OP_CONDITIONAL:
        return from_param(p, x, k - 1, 0, g);
    default:
        *done = false;
        return IR_OK;
    }
}

/* Call and conditional move values through their callees: a callee's
 * parameter takes the call site's operand (call: operand i -> parameter i;
 * conditional: operand b+1 -> branch b's parameter), a call's result takes
 * its callee's root and the callee's root the call's result. While state
 * and conditional results are shared slots (groups), not links. */
IrStatus prop_links(Prop *p, int32_t g)
{
    IrInstr *x = prop_ins(p, g);
    IrComputation *c = prop_comp_of(p, g);
    int32_t rci = p->gcomp[g];
    bool is_root = prop_local(p, g) == c->root;
    if (prop_call_like(x->op) && x->ncalled > 0 && p->rcof[x->called[0]] >= 0) {
        IrComputation *cc = p->m->comp[x->called[0]];
        int32_t at = x->op == OP_ASYNC_START ? prop_toff(p, g, 1) : 0;
        int32_t root = p->ibase[p->rcof[x->called[0]]] + cc->root;
        if (cc->root >= 0 && at >= 0)
            TRY(prop_emit_slots(p, g, at, root, 0, prop_nleaf(p, root)));
    }
    if (x->op != OP_PARAMETER && !is_root)
        return IR_OK;
    for (int32_t i = p->sstart[rci]; i < p->sstart[rci + 1]; i++) {
        int32_t sg = p->slist[i];
        IrInstr *site = prop_ins(p, sg);
        if (prop_call_like(site->op) && x->op == OP_PARAMETER) {
            int64_t pn = x->a.parameter_number;
            if (pn >= 0 && pn < site->nopnd)
                TRY(prop_emit_slots(p, g, 0, prop_opnd(p, sg, (int32_t)pn), 0, prop_nleaf(p, g)));
        }
        if (prop_call_like(site->op) && is_root) {
            int32_t at = site->op == OP_ASYNC_START ? prop_toff(p, sg, 1) : 0;
            if (at >= 0)
                TRY(prop_emit_slots(p, g, 0, sg, at, prop_nleaf(p, g)));
        }
        if (site->op == OP_CONDITIONAL && x->op == OP_PARAMETER && x->a.parameter_number == 0)
            for (int32_t b = 0; b < site->ncalled; b++)
                if (site->called[b] == p->rc[rci] && b + 1 < site->nopnd)
                    TRY(prop_emit_slots(p, g, 0, prop_opnd(p, sg, b + 1), 0, prop_nleaf(p, g)));
    }
    return IR_OK;
}

/* tuple, get-tuple-element, opt-barrier, while, call, conditional, fusion, async */
const PropRule prop_rule_control = {.fwd_first = move_fwd, .bwd_first = move_bwd};
