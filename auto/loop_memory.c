/*
 * loop_memory.c: a loop's memory under a limit, at the shardings chosen
 * for it.
 *
 * partition/memory.c's estimate of the unsharded entry counts a while as
 * two amounts: the state its result makes afresh (the while's own bytes,
 * live from the while to the state's last read) and what its body holds
 * beyond that while it runs (the callee's part of the peak, counted once:
 * the body's values die each iteration). Charged whole, a loop cost the
 * same whatever was chosen for it, so a limit only a sharded loop meets
 * was refused. Here each amount is spread over the nodes that hold it in
 * the view (loop.c), so each is charged at the per-device bytes of the
 * strategy chosen for that node, and the replicated plan is charged
 * exactly what the estimate says:
 *   - the state: the while's own bytes over the elements the body makes
 *     afresh (an element passed through unchanged stays in the operand's
 *     buffer, charged where that is), in proportion to their bytes, each
 *     at its state node;
 *   - the body: its part of the peak over the body's values live at the
 *     body's own peak (its state parameter apart: that is the state), in
 *     proportion to their bytes, each at its node in the view.
 */
#include "auto.h"

#include <string.h>

void auto_graph_charge(AutoGraph *g, int32_t i, double bytes)
{
    const AutoNode *v = &g->node[i];
    double full = (double)ir_shape_bytes(&g->comp->instr[i].shape);
    if (v->group < 0 || full <= 0) {
        g->mem_fixed += bytes;
        return;
    }
    for (int32_t s = 0; s < v->nstrat; s++)
        g->group[v->group].mem[s] += (double)v->strat[s].bytes * (bytes / full);
}

const AutoLoop *auto_loop_of(const AutoGraph *g, int32_t entry_instr)
{
    for (int32_t l = 0; l < g->view.nloop; l++)
        if (g->view.loop[l].instr == entry_instr)
            return &g->view.loop[l];
    return NULL;
}

bool auto_loop_passed_through(const IrComputation *body, int32_t k)
{
    const IrInstr *root = &body->instr[body->root];
    if (root->op != OP_TUPLE || k >= root->nopnd)
        return false;
    const IrInstr *x = &body->instr[root->opnd[k]];
    return x->op == OP_GET_TUPLE_ELEMENT && x->opnd[0] == body->param[0] && x->a.tuple_index == k;
}

void auto_loop_charge_state(AutoGraph *g, const IrModule *m, const AutoLoop *L, double own)
{
    const IrInstr *w = &ir_entry(m)->instr[L->instr];
    const IrComputation *body = m->comp[w->called[1]];
    double fresh = 0;
    for (int32_t k = 0; k < L->nstate; k++)
        if (!auto_loop_passed_through(body, k))
            fresh += (double)ir_shape_bytes(&w->shape.tuple[k]);
    if (fresh <= 0) {
        g->mem_fixed += own;
        return;
    }
    for (int32_t k = 0; k < L->nstate; k++)
        if (!auto_loop_passed_through(body, k))
            auto_graph_charge(g, L->first_state + k, own * (double)ir_shape_bytes(&w->shape.tuple[k]) / fresh);
}

IrStatus auto_loop_charge_body(AutoGraph *g, const IrModule *m, const AutoLoop *L, double held, IrDiag *d)
{
    const IrInstr *w = &ir_entry(m)->instr[L->instr];
    int32_t b = w->called[1];
    const IrComputation *body = m->comp[b];
    if (held <= 0) {
        g->mem_fixed += held;
        return IR_OK;
    }
    /* The body as the estimate runs it: its state handed over. */
    bool donated[1] = {true};
    MemOptions o = {.donated = donated, .nparams = 1};
    MemEstimate e;
    IrStatus st = mem_estimate(m, b, &o, &e, d);
    if (st != IR_OK)
        return st;
    int32_t first = L->first_state + L->nstate, ps = e.peak_step;
    double total = 0;
    for (int32_t pass = 0; pass < 2; pass++)
        for (int32_t s = 0; s <= ps && s < e.n; s++) {
            int32_t i = e.order[s];
            if (body->instr[i].op == OP_PARAMETER || e.own[i] <= 0 || e.end[i] < ps)
                continue;
            if (pass == 0)
                total += (double)e.own[i];
            else
                auto_graph_charge(g, first + i, held * (double)e.own[i] / total);
        }
    if (total <= 0)
        g->mem_fixed += held;
    mem_estimate_free(&e);
    return IR_OK;
}

IrStatus auto_loop_charge_pairs(AutoGraph *g, const IrModule *m, const AutoLoop *L, IrDiag *d)
{
    const IrComputation *entry = ir_entry(m);
    const IrInstr *w = &entry->instr[L->instr];
    const IrComputation *body = m->comp[w->called[1]];
    const IrInstr *init = &entry->instr[w->opnd[0]];
    for (int32_t k = 0; init->op == OP_TUPLE && k < init->nopnd && k < L->nstate; k++)
        if (auto_loop_passed_through(body, k)) {
            IrStatus st = auto_graph_charge_pair(g, init->opnd[k], L->first_state + k, d);
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}
