/*
 * schedule_overlap.c: the order in which a computation with asynchronous pairs
 * runs, so that their communication overlaps independent work.
 *
 * The executor's plain order is a depth-first post-order from the root:
 * done(start(x)) is reached as one chain, so the -done would wait right
 * after its -start and nothing would run in between. Here the same
 * instructions are list-scheduled (Kahn's algorithm over operands and
 * control predecessors) with three priorities: a ready -start is issued
 * at once, an ordinary instruction next, a -done (or async-update) only
 * when nothing else is ready. Ties go to the earlier post-order position,
 * so an order without pairs is unchanged and memory use stays near the
 * post-order's. Example: root = tuple(done(start(dot(a, b))), dot(c, d))
 * posts as dot1, start, done, dot2, tuple and is scheduled as dot1,
 * start, dot2, done, tuple: dot2 runs while the collective progresses.
 *
 * Instructions with side effects (custom-calls, feeds, send/recv, rng
 * state) keep their post-order sequence among themselves: each depends on
 * the one before it. The schedule depends only on the computation, so
 * every device of an SPMD program issues its collectives in one order,
 * which the runtime's collectives need.
 */
#include "ir.h"

#include <string.h>

bool ir_async_start_op(IrOpcode op)
{
    return op == OP_ALL_REDUCE_START || op == OP_ALL_GATHER_START || op == OP_COLLECTIVE_PERMUTE_START ||
           op == OP_ASYNC_START;
}

bool ir_async_done_op(IrOpcode op)
{
    return op == OP_ALL_REDUCE_DONE || op == OP_ALL_GATHER_DONE || op == OP_COLLECTIVE_PERMUTE_DONE ||
           op == OP_ASYNC_DONE || op == OP_ASYNC_UPDATE;
}

/* Edges: every predecessor of order[r] among the scheduled instructions
 * (operands, control predecessors, the previous side effect), as ranks. */
static int32_t preds_of(const IrComputation *c, const int32_t *rank, int32_t r, const int32_t *order,
                        int32_t prev_effect, int32_t *out)
{
    const IrInstr *ins = &c->instr[order[r]];
    int32_t n = 0;
    for (int32_t j = 0; j < ins->nopnd; j++)
        out[n++] = rank[ins->opnd[j]];
    for (int32_t j = 0; j < ins->a.x->control_predecessors.n; j++)
        out[n++] = rank[ins->a.x->control_predecessors.v[j]];
    if (ir_op_has_side_effect(ins->op) && prev_effect >= 0)
        out[n++] = prev_effect;
    return n;
}

IrStatus ir_schedule_overlap(const IrComputation *c, int32_t *order, int32_t n)
{
    int32_t nasync = 0;
    for (int32_t r = 0; r < n; r++)
        nasync += ir_async_start_op(c->instr[order[r]].op);
    if (nasync == 0)
        return IR_OK;
    int64_t nedge = 0;
    for (int32_t r = 0; r < n; r++)
        nedge += c->instr[order[r]].nopnd + c->instr[order[r]].a.x->control_predecessors.n + 1;
    int32_t *rank = ts_malloc((size_t)c->ninstr * sizeof *rank), *indeg = ts_calloc((size_t)n, sizeof *indeg);
    int32_t *first = ts_calloc((size_t)n + 1, sizeof *first), *succ = ts_malloc((size_t)nedge * sizeof *succ);
    int32_t *tmp = ts_malloc((size_t)nedge * sizeof *tmp), *out = ts_malloc((size_t)n * sizeof *out);
    /* Ready instructions keyed class * n + rank (class 0 starts, 1 the
     * rest, 2 dones): starts as early and dones as late as they can go. */
    IrHeap h = {ts_malloc((size_t)n * sizeof *h.k), 0};
    IrStatus st = rank && indeg && first && succ && tmp && out && h.k ? IR_OK : IR_ENOMEM;
    if (st != IR_OK)
        goto done;
    for (int32_t r = 0; r < n; r++)
        rank[order[r]] = r;
    /* Count successors per predecessor, then fill (CSR). */
    int32_t prev = -1, *p = tmp;
    for (int32_t r = 0; r < n; r++) {
        int32_t k = preds_of(c, rank, r, order, prev, p);
        indeg[r] = k;
        for (int32_t j = 0; j < k; j++)
            first[p[j] + 1]++;
        p += k;
        if (ir_op_has_side_effect(c->instr[order[r]].op))
            prev = r;
    }
    for (int32_t r = 0; r < n; r++)
        first[r + 1] += first[r];
    int32_t *fill = out; /* borrowed as a cursor per predecessor */
    memcpy(fill, first, (size_t)n * sizeof *fill);
    p = tmp;
    for (int32_t r = 0; r < n; r++)
        for (int32_t j = 0; j < indeg[r]; j++)
            succ[fill[*p++]++] = r;
    for (int32_t r = 0; r < n; r++) {
        IrOpcode op = c->instr[order[r]].op;
        int64_t cls = ir_async_start_op(op) ? 0 : ir_async_done_op(op) ? 2 : 1;
        if (indeg[r] == 0)
            ir_heap_push(&h, cls * n + r);
    }
    int32_t m = 0;
    while (h.n > 0) {
        int32_t r = (int32_t)(ir_heap_pop(&h) % n);
        out[m++] = order[r];
        for (int32_t e = first[r]; e < first[r + 1]; e++) {
            int32_t s = succ[e];
            IrOpcode op = c->instr[order[s]].op;
            int64_t cls = ir_async_start_op(op) ? 0 : ir_async_done_op(op) ? 2 : 1;
            if (--indeg[s] == 0)
                ir_heap_push(&h, cls * n + s);
        }
    }
    /* The post-order is a topological order, so every instruction is
     * reached. */
    if (m == n)
        memcpy(order, out, (size_t)n * sizeof *order);
done:
    ts_free(rank);
    ts_free(indeg);
    ts_free(first);
    ts_free(succ);
    ts_free(tmp);
    ts_free(out);
    ts_free(h.k);
    return st;
}
