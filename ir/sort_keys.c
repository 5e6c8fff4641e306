/*
 * sort_keys.c: which instructions of a sort's comparator are per-element
 * keys, the classification the sort kernel's native path runs on
 * (device/k_sort.c) and the memory estimate counts the keys of
 * (partition/memory.c): one function, so that the two never disagree on
 * whether a sort makes keys and which.
 *
 * The comparator's parameters are lhs and rhs of operand 0, lhs and rhs of
 * operand 1, ...: an even parameter is an lhs side, an odd one rhs. Each
 * instruction depends on sides (dep: 1 lhs, 2 rhs, 3 both). Of those the
 * root needs (IR_SORT_REACH):
 *   - one that depends on both is a mixed node (IR_SORT_NODE), evaluated
 *     per comparison: compare (with a direction), select, and, or, xor, not
 *     of scalars (and, or, xor, not of no float), no complex operand;
 *   - an operand of a node that depends on one side is a key leaf
 *     (IR_SORT_LEAF); a leaf that is not a parameter is lifted
 *     (IR_SORT_LIFT): computed once for the whole operand, and so is every
 *     operand it needs in turn, each of which must be a scalar elementwise
 *     op (no real, imag), a constant, a bitcast-convert or a parameter.
 * The root must be a node. Anything else: the general path (the
 * comparator called per comparison), `native` false.
 *
 * Example: JAX's jnp.sort comparator, ka = select(a == a ? ...) on each
 * side, then compare(ka, kb), type=TOTALORDER: the compare is the one
 * node, ka and kb the leaves, lifted with the selects, compares and
 * constants they read (a, b are parameters, lifted as they are).
 */
#include "ir.h"

#include <string.h>

/* May a lifted key contain ins (a scalar op, run on whole arrays)? */
static bool liftable(const IrInstr *ins)
{
    if (ins->ncalled > 0 || ins->shape.type == IR_TUPLE || ins->shape.rank != 0 ||
        ir_type_is_complex(ins->shape.type))
        return false;
    if (ins->op == OP_PARAMETER || ins->op == OP_CONSTANT)
        return true;
    if (ins->op == OP_BITCAST_CONVERT) /* scalars: the same bits, reinterpreted */
        return true;
    return ir_op_is_elementwise(ins->op) && ins->op != OP_REAL && ins->op != OP_IMAG;
}

/* Can the kernel evaluate ins per comparison (on scalars, no complex)? */
static bool evaluable(const IrComputation *c, const IrInstr *ins)
{
    if (ins->shape.type == IR_TUPLE || ins->shape.rank != 0 || ins->ncalled > 0)
        return false;
    for (int32_t i = 0; i < ins->nopnd; i++) {
        const IrShape *s = &c->instr[ins->opnd[i]].shape;
        if (s->type == IR_TUPLE || s->rank != 0 || !ir_type_is_array(s->type) || ir_type_is_complex(s->type))
            return false;
    }
    switch (ins->op) {
    case OP_COMPARE: return ins->nopnd == 2 && ins->a.direction != CMP_NONE;
    case OP_SELECT: return ins->nopnd == 3;
    case OP_AND: case OP_OR: case OP_XOR: return ins->nopnd == 2 && !ir_type_is_float(ins->shape.type);
    case OP_NOT: return ins->nopnd == 1 && !ir_type_is_float(ins->shape.type);
    default: return false;
    }
}

/* The roles of k's instructions; false when the comparator is not native. */
static bool classify(const IrComputation *c, IrSortKeys *k)
{
    int32_t n = c->ninstr;
    for (int32_t j = 0; j < n; j++) {
        int32_t i = k->order[j];
        const IrInstr *ins = &c->instr[i];
        if (ins->op == OP_PARAMETER)
            k->dep[i] = ins->a.parameter_number % 2 == 0 ? 1 : 2;
        for (int32_t o = 0; o < ins->nopnd; o++)
            k->dep[i] |= k->dep[ins->opnd[o]];
    }
    k->role[c->root] |= IR_SORT_REACH;
    for (int32_t j = n - 1; j >= 0; j--) {
        int32_t i = k->order[j];
        for (int32_t o = 0; (k->role[i] & IR_SORT_REACH) && o < c->instr[i].nopnd; o++)
            k->role[c->instr[i].opnd[o]] |= IR_SORT_REACH;
    }
    if (k->dep[c->root] != 3)
        return false;
    for (int32_t j = 0; j < n; j++) {
        int32_t i = k->order[j];
        const IrInstr *ins = &c->instr[i];
        if (!(k->role[i] & IR_SORT_REACH) || k->dep[i] != 3)
            continue;
        if (!evaluable(c, ins))
            return false;
        k->role[i] |= IR_SORT_NODE;
        for (int32_t o = 0; o < ins->nopnd; o++) {
            int32_t x = ins->opnd[o];
            if (k->dep[x] == 3)
                continue;
            k->role[x] |= IR_SORT_LEAF;
            if (c->instr[x].op != OP_PARAMETER)
                k->role[x] |= IR_SORT_LIFT;
        }
    }
    /* Close the lifted set over operands (reverse order: users first). */
    for (int32_t j = n - 1; j >= 0; j--) {
        int32_t i = k->order[j];
        if (!(k->role[i] & IR_SORT_LIFT))
            continue;
        if (!liftable(&c->instr[i]))
            return false;
        for (int32_t o = 0; o < c->instr[i].nopnd; o++)
            k->role[c->instr[i].opnd[o]] |= IR_SORT_LIFT;
    }
    return true;
}

IrStatus ir_sort_keys(const IrModule *m, const IrComputation *c, int32_t noperands, IrSortKeys *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    if (c->root < 0 || c->nparam != 2 * noperands)
        return IR_OK;
    for (int32_t p = 0; p < c->nparam; p++)
        if (c->param[p] < 0)
            return IR_OK;
    IrStatus st = ir_topo_order(m, c, &out->order, d);
    if (st != IR_OK)
        return st;
    out->n = c->ninstr;
    out->dep = ts_calloc((size_t)(c->ninstr > 0 ? c->ninstr : 1), 1);
    out->role = ts_calloc((size_t)(c->ninstr > 0 ? c->ninstr : 1), 1);
    if (!out->dep || !out->role) {
        ir_sort_keys_free(out);
        return IR_ENOMEM;
    }
    out->native = classify(c, out);
    return IR_OK;
}

void ir_sort_keys_free(IrSortKeys *k)
{
    ts_free(k->order);
    ts_free(k->dep);
    ts_free(k->role);
    memset(k, 0, sizeof *k);
}
