/*
 * allreduce_add.c: the all-reduces that take in the add reading their
 * result (device/exec.c runs each pair as one collective,
 * DevCollectives.run_add), found on the IR alone.
 *
 * A tensor-parallel layer's partial sums are all-reduced and the sum is
 * added at once to the residual stream:
 *
 *     s = all-reduce(p), to_apply=add        (p: this device's partial sum)
 *     y = add(x, s)                          (x: the residual, same shape)
 *
 * Run apart, the all-reduce writes s and the add reads it back. Taken in,
 * the all-reduce's own pass writes y = (p0 + p1 + ...) + x, each element
 * summed in group order and then added to x: the bits of the two run
 * apart (the add of two floats commutes, bit for bit). Each device adds
 * its own x (it need not be replicated).
 *
 * A pair qualifies when: the all-reduce has one array operand, reducer
 * add, and type f32 or f64 (the in-host combine rounds each sum to the
 * type, as the add then does; narrower floats accumulate wider); its one
 * use in c is the add (not the root, no control edges on either); the
 * add's other operand is another value of the add's shape that runs
 * before the all-reduce in `order`; neither runs inside a fusion group.
 */
#include "ir.h"

/* Is instruction i free of control edges (it has no control predecessor
 * and is none)? ctrl_succ: marked control predecessors. */
static bool no_control(const IrComputation *c, const bool *ctrl_succ, int32_t i)
{
    return c->instr[i].a.x->control_predecessors.n == 0 && !ctrl_succ[i];
}

/* The add that all-reduce ar takes in (its sole reader), or -1. */
static int32_t add_of(const IrModule *m, const IrComputation *c, const int32_t *nuse, const int32_t *reader,
                      const int32_t *pos, const int32_t *group_of, const bool *ctrl_succ, int32_t ar)
{
    const IrInstr *s = &c->instr[ar];
    if (s->op != OP_ALL_REDUCE || s->nopnd != 1 || s->ncalled < 1 || !ir_shape_is_array(&s->shape) ||
        (s->shape.type != IR_F32 && s->shape.type != IR_F64) || ir_simple_reducer(m, s->called[0]) != OP_ADD ||
        nuse[ar] != 1 || c->root == ar || pos[ar] < 0 || (group_of && group_of[ar] >= 0) ||
        !no_control(c, ctrl_succ, ar))
        return -1;
    int32_t a = reader[ar];
    const IrInstr *y = &c->instr[a];
    if (y->op != OP_ADD || y->nopnd != 2 || pos[a] < 0 || (group_of && group_of[a] >= 0) ||
        !no_control(c, ctrl_succ, a) || y->shape.type != s->shape.type || !ir_shape_same_dims(&y->shape, &s->shape))
        return -1;
    int32_t x = y->opnd[0] == ar ? y->opnd[1] : y->opnd[0];
    const IrInstr *xi = &c->instr[x];
    if (x == ar || pos[x] < 0 || pos[x] > pos[ar] || xi->shape.type != y->shape.type ||
        !ir_shape_same_dims(&xi->shape, &y->shape))
        return -1;
    return a;
}

int32_t ir_allreduce_adds(const IrModule *m, const IrComputation *c, const int32_t *order, int32_t norder,
                          const int32_t *group_of, int32_t *fold)
{
    int32_t n = c->ninstr, nfold = 0;
    int32_t *nuse = ts_calloc((size_t)n, sizeof *nuse), *reader = ts_malloc((size_t)n * sizeof *reader);
    int32_t *pos = ts_malloc((size_t)n * sizeof *pos);
    bool *ctrl_succ = ts_calloc((size_t)n, sizeof *ctrl_succ);
    for (int32_t i = 0; i < n; i++)
        fold[i] = -1;
    if (!nuse || !reader || !pos || !ctrl_succ)
        goto done;
    for (int32_t i = 0; i < n; i++) {
        const IrInstr *ins = &c->instr[i];
        pos[i] = -1;
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < n) {
                nuse[ins->opnd[j]]++;
                reader[ins->opnd[j]] = i;
            }
        const IrI64List *cp = &ins->a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                ctrl_succ[cp->v[j]] = true;
    }
    for (int32_t k = 0; k < norder; k++)
        pos[order[k]] = k;
    for (int32_t k = 0; k < norder; k++) {
        int32_t ar = order[k], a = add_of(m, c, nuse, reader, pos, group_of, ctrl_succ, ar);
        if (a >= 0) {
            fold[ar] = a;
            nfold++;
        }
    }
done:
    ts_free(nuse);
    ts_free(reader);
    ts_free(pos);
    ts_free(ctrl_succ);
    return nfold;
}
