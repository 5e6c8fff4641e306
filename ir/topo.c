/*
 * topo.c: topological order of the instructions of one computation.
 *
 * Operands and control predecessors come before their users. The order is
 * stable: among the instructions that are ready (all their predecessors
 * placed), the one defined first goes first, so a computation whose array is
 * already in a valid order comes back unchanged (printers and passes rely on
 * that for round trips). The walk is iterative (Kahn's algorithm with a
 * binary min-heap of ready indices), because computations can be 100k
 * instructions deep; it costs O((n + e) log n) time and O(n + e) memory,
 * and O(n + e) with no heap when the definition order is already valid.
 */
#include "ir.h"

#include <string.h>

/* Number of predecessor edges of instruction i (operands + control). */
static int32_t npred(const IrInstr *ins)
{
    return ins->nopnd + ins->a.x->control_predecessors.n;
}

/* The k-th predecessor of ins: operands first, then control predecessors. */
static int64_t pred_at(const IrInstr *ins, int32_t k)
{
    return k < ins->nopnd ? ins->opnd[k] : ins->a.x->control_predecessors.v[k - ins->nopnd];
}

/* Check every edge is in range; report the first bad one. */
static IrStatus check_edges(const IrModule *m, const IrComputation *c, IrDiag *d, int64_t *nedge)
{
    int64_t e = 0;
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < npred(ins); k++) {
            int64_t p = pred_at(ins, k);
            if (p < 0 || p >= c->ninstr)
                return ir_error(d, IR_EINPUT, m ? m->file : NULL, m ? m->src : NULL, ins->pos,
                                "%s: %s %lld is out of range (computation %s has %d instructions)",
                                ins->name, k < ins->nopnd ? "operand index" : "control predecessor",
                                (long long)p, c->name, (int)c->ninstr);
        }
        e += npred(ins);
    }
    *nedge = e;
    return IR_OK;
}

/* Every instruction left unplaced has an unplaced predecessor (else it
 * would have become ready), so walking unplaced predecessors from any of
 * them must revisit a node: that node is on a cycle. */
static int32_t find_cycle_node(const IrComputation *c, const int32_t *indeg, uint8_t *seen)
{
    int32_t x = -1;
    for (int32_t i = 0; i < c->ninstr && x < 0; i++)
        if (indeg[i] > 0)
            x = i;
    while (x >= 0 && !seen[x]) {
        seen[x] = 1;
        const IrInstr *ins = &c->instr[x];
        int32_t next = -1;
        for (int32_t k = 0; k < npred(ins) && next < 0; k++) {
            int32_t p = (int32_t)pred_at(ins, k);
            if (indeg[p] > 0)
                next = p;
        }
        x = next;
    }
    return x;
}

/* True when every predecessor of every instruction is defined before it
 * (0 <= p < i): then the stable order is the definition order itself (by
 * induction, after 0..k-1 are placed, k is ready and is the smallest ready
 * index). Parsed and built modules nearly always are: one pass instead of
 * the heap walk. */
static bool in_definition_order(const IrComputation *c)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < ins->nopnd; k++)
            if (ins->opnd[k] < 0 || ins->opnd[k] >= i)
                return false;
        for (int32_t k = 0; k < ins->a.x->control_predecessors.n; k++)
            if (ins->a.x->control_predecessors.v[k] < 0 || ins->a.x->control_predecessors.v[k] >= i)
                return false;
    }
    return true;
}

/* The stable topological order of c into *order (ts_malloc, c->ninstr
 * entries, the caller frees it). On a cycle or an out-of-range edge:
 * IR_EINPUT in d and *order NULL; IR_ENOMEM likewise. m may be NULL (it
 * only supplies the file and source for messages). */
IrStatus ir_topo_order(const IrModule *m, const IrComputation *c, int32_t **order, IrDiag *d)
{
    *order = NULL;
    if (in_definition_order(c)) {
        size_t n = (size_t)c->ninstr;
        int32_t *out = ts_malloc((n ? n : 1) * sizeof *out);
        if (!out)
            return ir_oom(d, NULL);
        for (int32_t i = 0; i < c->ninstr; i++)
            out[i] = i;
        *order = out;
        return IR_OK;
    }
    int64_t nedge = 0;
    IrStatus st = check_edges(m, c, d, &nedge);
    if (st != IR_OK)
        return st;
    size_t n = (size_t)c->ninstr;
    int32_t *out = ts_malloc((n ? n : 1) * sizeof *out);
    int32_t *indeg = ts_calloc(n ? n : 1, sizeof *indeg);
    int32_t *start = ts_calloc(n + 1, sizeof *start);        /* users CSR offsets */
    int32_t *users = ts_malloc((size_t)(nedge ? nedge : 1) * sizeof *users);
    IrHeap h = {ts_malloc((n ? n : 1) * sizeof *h.k), 0};
    uint8_t *seen = NULL;
    if (!out || !indeg || !start || !users || !h.k) {
        st = ir_oom(d, NULL);
        goto done;
    }
    /* users[start[p] .. start[p+1]) lists the instructions that use p. */
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        indeg[i] = npred(ins);
        for (int32_t k = 0; k < npred(ins); k++)
            start[pred_at(ins, k) + 1]++;
    }
    for (size_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    int32_t *fill = out; /* borrowed as a cursor array until the walk fills it */
    memcpy(fill, start, n * sizeof *fill);
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < npred(ins); k++)
            users[fill[pred_at(ins, k)]++] = i;
    }
    for (int32_t i = 0; i < c->ninstr; i++)
        if (indeg[i] == 0)
            ir_heap_push(&h, i);
    size_t placed = 0;
    while (h.n > 0) {
        int32_t x = (int32_t)ir_heap_pop(&h);
        out[placed++] = x;
        for (int32_t k = start[x]; k < start[x + 1]; k++)
            if (--indeg[users[k]] == 0)
                ir_heap_push(&h, users[k]);
    }
    if (placed < n) {
        seen = ts_calloc(n, 1);
        if (!seen) {
            st = ir_oom(d, NULL);
            goto done;
        }
        int32_t x = find_cycle_node(c, indeg, seen);
        const IrInstr *ins = &c->instr[x >= 0 ? x : 0];
        st = ir_error(d, IR_EINPUT, m ? m->file : NULL, m ? m->src : NULL, ins->pos,
                      "cycle in computation %s: instruction %s depends on itself", c->name,
                      ins->name);
        goto done;
    }
    *order = out;
    out = NULL;
    st = IR_OK;
done:
    ts_free(out);
    ts_free(indeg);
    ts_free(start);
    ts_free(users);
    ts_free(h.k);
    ts_free(seen);
    return st;
}
