/*
 * reducer_comp.c: any reducer computation applied elementwise, for the
 * collectives whose to_apply is not one of the simple reducers of
 * reducer.c (an all-reduce of `multiply(a, b) + (a + b)`, of "the first
 * operand", ...): the in-process collectives (runtime/coll.c) and the
 * MPI user operation of coll/mpi_world.c combine with it, so that a run
 * across hosts computes what one process does.
 *
 * The combination is the computation run as a `map` over the two arrays
 * (k_elementwise.c: one elementwise kernel when the root is an
 * elementwise op of the parameters, else a call per element).
 */
#include "device.h"

#include <string.h>

IrStatus dev_red_call(const IrModule *m, int32_t comp, IrType t, void *out, const void *lhs, const void *rhs,
                      int64_t n, IrDiag *d)
{
    if (comp < 0 || comp >= m->ncomp)
        return ir_error(d, IR_EINPUT, m->file, m->src, (IrPos){0, 0}, "reducer computation %d does not exist",
                        (int)comp);
    const IrComputation *c = m->comp[comp];
    if (c->nparam != 2)
        return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, (IrPos){0, 0},
                        "reducer %s takes %d parameters: only two-parameter (one-operand) reducers combine "
                        "collectives", c->name, (int)c->nparam);
    if (n <= 0)
        return IR_OK;
    int64_t dims[1] = {n};
    IrShape s = {.type = t, .rank = 1, .dims = dims};
    DevValue *a = dev_value_new_uninit(&s), *b = dev_value_new_uninit(&s), *r = NULL;
    IrStatus st = a && b ? IR_OK : ir_oom(d, NULL);
    if (st == IR_OK) {
        memcpy(a->data, lhs, (size_t)a->nbytes);
        memcpy(b->data, rhs, (size_t)b->nbytes);
        /* A map instruction of the reducer over [n]: what XLA's all-reduce
         * computes elementwise. */
        int32_t called[1] = {comp};
        IrInstr ins = {.a.x = &ir_no_attrs_x, .op = OP_MAP, .name = c->name, .shape = s, .ncalled = 1, .called = called,
                       .pos = c->ninstr > 0 ? c->instr[0].pos : (IrPos){0, 0}};
        DevValue *opnd[2] = {a, b};
        DevKernelArgs k = {.m = m, .c = c, .ins = &ins, .nopnd = 2, .opnd = opnd, .d = d};
        st = dev_k_map(&k, &r);
    }
    if (st == IR_OK && (r->shape.type != t || r->nbytes != a->nbytes))
        st = ir_error(d, IR_EINPUT, m->file, m->src, (IrPos){0, 0}, "reducer %s must return a %s scalar",
                      c->name, ir_type_name(t));
    if (st == IR_OK)
        memcpy(out, r->data, (size_t)r->nbytes);
    dev_value_unref(r);
    dev_value_unref(a);
    dev_value_unref(b);
    return st;
}

/* ---- commutativity, proven or not ----
 *
 * comp(a, b) == comp(b, a) is shown structurally: the expression with
 * the parameters swapped is the same expression up to the operand order
 * of commutative ops. Only attribute-free elementwise ops (and the
 * parameters) are compared; anything else, or an expression too large
 * to compare within the budget, is "not proven" (the caller then asks MPI
 * for rank order, which is always right). */

/* The commutative ops are the simple reducers (ir/hlo_op_sem.def). */
static bool commutative_op(IrOpcode op)
{
    return ir_op_is_reducer(op);
}

static bool plain_op(IrOpcode op)
{
    if (ir_op_is_reducer(op))
        return true;
    switch (op) {
    case OP_SUBTRACT: case OP_DIVIDE: case OP_NEGATE: case OP_ABS: case OP_NOT: case OP_COPY:
        return true;
    default:
        return false;
    }
}

/* Is instruction i (parameters as they are) the same expression as j with
 * parameters 0 and 1 swapped? */
static bool same_swapped(const IrComputation *c, int32_t i, int32_t j, int *budget)
{
    if (--*budget < 0 || i < 0 || j < 0 || i >= c->ninstr || j >= c->ninstr)
        return false;
    const IrInstr *x = &c->instr[i], *y = &c->instr[j];
    if (x->op != y->op || x->shape.type != y->shape.type || x->shape.rank != 0 || y->shape.rank != 0)
        return false;
    if (x->op == OP_PARAMETER)
        return x->a.parameter_number + y->a.parameter_number == 1;
    if (!plain_op(x->op) || x->nopnd != y->nopnd || x->nopnd < 1 || x->nopnd > 2)
        return false;
    if (x->nopnd == 1)
        return same_swapped(c, x->opnd[0], y->opnd[0], budget);
    if (same_swapped(c, x->opnd[0], y->opnd[0], budget) && same_swapped(c, x->opnd[1], y->opnd[1], budget))
        return true;
    return commutative_op(x->op) && same_swapped(c, x->opnd[0], y->opnd[1], budget) &&
           same_swapped(c, x->opnd[1], y->opnd[0], budget);
}

bool dev_red_commutes(const IrModule *m, int32_t comp)
{
    if (comp < 0 || comp >= m->ncomp)
        return false;
    if (ir_simple_reducer(m, comp) != OP_COUNT)
        return true;
    const IrComputation *c = m->comp[comp];
    int budget = 4096;
    return c->nparam == 2 && c->root >= 0 && same_swapped(c, c->root, c->root, &budget);
}
