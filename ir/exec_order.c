/*
 * exec_order.c: the order in which the executor (device/exec.c) runs the
 * instructions of one computation, so that the memory estimate
 * (partition/memory.c) and a scheduler can reason about the same order the
 * run takes.
 *
 * The order is a depth-first post-order over operands and control
 * predecessors: first from each instruction with a side effect (in
 * definition order: custom-calls, feeds, send/recv, rng state), then from
 * the root. Only instructions reached run; each comes after its operands.
 * Example: root = add(p0, mul(p0, p1)) gives p0, p1, mul, add; an unused
 * instruction is not in the order.
 *
 * A module marked is_scheduled=true (XLA's scheduled modules, and what
 * fitting a memory limit writes, compile/memfit.c) runs the same
 * instructions in the order its text lists them (ir_exec_order_of).
 *
 * In either order a parameter's get-tuple-elements run right after the
 * parameter (hoist_parameter_reads): the parameter's tuple then dies at
 * once and each element has one owner, its get-tuple-element. A while
 * body's parameter is the loop's state; were a get-tuple-element of one
 * buffer reached only after a dynamic-update-slice of another, the tuple
 * would still hold the updated buffer and the update would copy it in
 * every iteration (a scan filling two buffers: O(N^2)). Reading an
 * element earlier holds no byte the tuple did not hold already.
 */
#include "ir.h"

#include <string.h>

bool ir_op_has_side_effect(IrOpcode op)
{
    switch (op) {
    case OP_CUSTOM_CALL: case OP_OUTFEED: case OP_INFEED: case OP_SEND: case OP_SEND_DONE:
    case OP_RECV: case OP_RECV_DONE: case OP_RNG_GET_AND_UPDATE_STATE:
        return true;
    default:
        return false;
    }
}

/* Post-order from `start` (iterative: computations can be 100k deep).
 * state: 0 new, 1 on the path, 2 done. */
static IrStatus post_order(const IrComputation *c, int32_t start, uint8_t *state, int32_t *stack,
                           int32_t *next, int32_t *order, int32_t *n, IrExecOrderError *err)
{
    if (state[start] == 2)
        return IR_OK;
    int32_t sp = 0;
    stack[sp++] = start;
    next[start] = 0;
    state[start] = 1;
    while (sp > 0) {
        int32_t i = stack[sp - 1];
        const IrInstr *ins = &c->instr[i];
        int32_t k = next[i]++;
        int32_t ncp = ins->a.x->control_predecessors.n;
        if (k < ins->nopnd + ncp) {
            int64_t o = k < ins->nopnd ? ins->opnd[k] : ins->a.x->control_predecessors.v[k - ins->nopnd];
            if (o < 0 || o >= c->ninstr || state[o] == 1) {
                *err = (IrExecOrderError){i, k, o < 0 || o >= c->ninstr ? -1 : (int32_t)o};
                return IR_EINPUT;
            }
            if (state[o] == 0) {
                state[o] = 1;
                next[o] = 0;
                stack[sp++] = (int32_t)o;
            }
            continue;
        }
        state[i] = 2;
        order[(*n)++] = i;
        sp--;
    }
    return IR_OK;
}

IrStatus ir_exec_order(const IrComputation *c, int32_t *order, int32_t *n, IrExecOrderError *err)
{
    *n = 0;
    size_t cnt = (size_t)(c->ninstr > 0 ? c->ninstr : 1);
    uint8_t *state = ts_calloc(cnt, 1);
    int32_t *stack = ts_malloc(cnt * sizeof *stack);
    int32_t *next = ts_malloc(cnt * sizeof *next);
    IrStatus st = state && stack && next ? IR_OK : IR_ENOMEM;
    for (int32_t i = 0; i < c->ninstr && st == IR_OK; i++)
        if (ir_op_has_side_effect(c->instr[i].op))
            st = post_order(c, i, state, stack, next, order, n, err);
    if (st == IR_OK && c->root >= 0 && c->root < c->ninstr)
        st = post_order(c, c->root, state, stack, next, order, n, err);
    ts_free(state);
    ts_free(stack);
    ts_free(next);
    return st;
}

/* A get-tuple-element of a parameter, with no other predecessor: it can
 * run as soon as the parameter has. */
static bool parameter_read(const IrComputation *c, int32_t i)
{
    const IrInstr *ins = &c->instr[i];
    return ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 && ins->a.x->control_predecessors.n == 0 &&
           ins->opnd[0] >= 0 && ins->opnd[0] < c->ninstr && c->instr[ins->opnd[0]].op == OP_PARAMETER;
}

/* Move each parameter's get-tuple-elements (those of order) right after
 * the parameter, keeping their relative order and everything else's. */
static IrStatus hoist_parameter_reads(const IrComputation *c, int32_t *order, int32_t n)
{
    int32_t nread = 0;
    for (int32_t k = 0; k < n; k++)
        nread += parameter_read(c, order[k]);
    if (nread == 0)
        return IR_OK;
    /* first[p]: p's first read in order; next[i]: the read after i. */
    size_t cnt = (size_t)c->ninstr;
    int32_t *first = ts_malloc(cnt * sizeof *first), *next = ts_malloc(cnt * sizeof *next);
    int32_t *out = ts_malloc((size_t)n * sizeof *out);
    IrStatus st = first && next && out ? IR_OK : IR_ENOMEM;
    if (st == IR_OK) {
        for (int32_t k = 0; k < n; k++)
            first[order[k]] = -1;
        for (int32_t k = n - 1; k >= 0; k--)
            if (parameter_read(c, order[k])) {
                int32_t p = (int32_t)c->instr[order[k]].opnd[0];
                next[order[k]] = first[p];
                first[p] = order[k];
            }
        int32_t m = 0;
        for (int32_t k = 0; k < n; k++) {
            int32_t i = order[k];
            if (parameter_read(c, i))
                continue;
            out[m++] = i;
            if (c->instr[i].op == OP_PARAMETER)
                for (int32_t r = first[i]; r >= 0; r = next[r])
                    out[m++] = r;
        }
        memcpy(order, out, (size_t)n * sizeof *order);
    }
    ts_free(first);
    ts_free(next);
    ts_free(out);
    return st;
}

static IrStatus exec_order_of(const IrModule *m, const IrComputation *c, int32_t *order, int32_t *n,
                          IrExecOrderError *err)
{
    IrStatus st = ir_exec_order(c, order, n, err);
    if (st != IR_OK || !m || !m->is_scheduled)
        return st;
    int32_t *topo = NULL;
    IrDiag d = {0};
    uint8_t *ran = ts_calloc((size_t)(c->ninstr > 0 ? c->ninstr : 1), 1);
    st = ran ? ir_topo_order(m, c, &topo, &d) : IR_ENOMEM;
    ir_diag_clear(&d);
    if (st == IR_OK) {
        for (int32_t k = 0; k < *n; k++)
            ran[order[k]] = 1;
        int32_t j = 0;
        for (int32_t k = 0; k < c->ninstr; k++)
            if (ran[topo[k]])
                order[j++] = topo[k];
    }
    ts_free(topo);
    ts_free(ran);
    /* A cycle among instructions that do not run: the post-order stands. */
    return st == IR_ENOMEM ? st : IR_OK;
}

IrStatus ir_exec_order_of(const IrModule *m, const IrComputation *c, int32_t *order, int32_t *n,
                          IrExecOrderError *err)
{
    IrStatus st = exec_order_of(m, c, order, n, err);
    return st == IR_OK ? hoist_parameter_reads(c, order, *n) : st;
}
