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
 * A conditional at the entry's peak holds what its largest branch holds
 * beyond its operands and result (the estimate's part of the peak for
 * it): spread the same way over that branch's values live at the
 * branch's own peak, a loop taken in there charged as an entry loop is
 * (its fresh state at its state nodes, its body's part at its body's
 * values). Charged whole, a fori_loop in a lax.cond branch cost its
 * replicated bytes whatever was chosen, and a limit only the sharded
 * loop meets was refused (tests/jax/test_auto_quality.py's fori_cond on
 * 8 under 1.1x FSDP's peak: "the smallest estimate is 278,532 bytes").
 */
#include "auto.h"

#include <string.h>

/* The while of loop L (of the entry, a body or a branch taken in) and the
 * view index of its computation's instruction 0 (*first: its operands'
 * nodes are first + operand). */
static const IrInstr *loop_while(const AutoGraph *g, const IrModule *m, const AutoLoop *L, int32_t *first)
{
    int32_t wi = g->view.where_instr[L->instr];
    if (first)
        *first = L->instr - wi;
    return &m->comp[g->view.where_comp[L->instr]]->instr[wi];
}

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

const AutoLoop *auto_loop_of(const AutoGraph *g, int32_t i)
{
    for (int32_t l = 0; l < g->view.nloop; l++)
        if (g->view.loop[l].instr == i)
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
    const IrInstr *w = loop_while(g, m, L, NULL);
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
    const IrInstr *w = loop_while(g, m, L, NULL);
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
    int32_t first;
    const IrInstr *w = loop_while(g, m, L, &first);
    const IrComputation *body = m->comp[w->called[1]];
    const IrInstr *init = &m->comp[g->view.where_comp[L->instr]]->instr[w->opnd[0]];
    for (int32_t k = 0; init->op == OP_TUPLE && k < init->nopnd && k < L->nstate; k++)
        if (auto_loop_passed_through(body, k)) {
            IrStatus st = auto_graph_charge_pair(g, first + init->opnd[k], L->first_state + k, d);
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}

IrStatus auto_cond_charge_branch(AutoGraph *g, const IrModule *m, const AutoCond *C, double held, IrDiag *d)
{
    const IrInstr *x = &m->comp[g->view.where_comp[C->instr]]->instr[g->view.where_instr[C->instr]];
    /* The branch the estimate charges (partition/memory.c callee_extra:
     * the most any branch holds beyond its parameter and its result). */
    MemEstimate e = {0};
    int32_t b = -1;
    double most = 0;
    for (int32_t k = 0; k < C->nbranch && k < x->ncalled; k++) {
        MemEstimate t;
        IrStatus st = mem_estimate(m, x->called[k], NULL, &t, d);
        if (st != IR_OK) {
            if (b >= 0)
                mem_estimate_free(&e);
            return st;
        }
        double extra = (double)(t.peak - t.param_bytes - t.output_bytes);
        if (b < 0 || extra > most) {
            if (b >= 0)
                mem_estimate_free(&e);
            e = t;
            b = k;
            most = extra;
        } else {
            mem_estimate_free(&t);
        }
    }
    int32_t ps = b >= 0 ? e.peak_step : -1;
    if (ps < 0 || held <= 0) {
        g->mem_fixed += held;
        if (b >= 0)
            mem_estimate_free(&e);
        return IR_OK;
    }
    const IrComputation *br = m->comp[x->called[b]];
    int32_t first = C->first_instr[b];
    /* A loop run at the branch's peak: its body's part of it too. */
    const AutoLoop *inside = auto_loop_of(g, first + e.order[ps]);
    double body = inside && e.callee_at_peak > 0 ? (double)e.callee_at_peak : 0;
    double total = body;
    for (int32_t s = 0; s <= ps && s < e.n; s++) {
        int32_t i = e.order[s];
        if (br->instr[i].op != OP_PARAMETER && e.own[i] > 0 && e.end[i] >= ps)
            total += (double)e.own[i];
    }
    IrStatus st = IR_OK;
    if (total <= 0)
        g->mem_fixed += held;
    for (int32_t s = 0; total > 0 && st == IR_OK && s <= ps && s < e.n; s++) {
        int32_t i = e.order[s];
        if (br->instr[i].op == OP_PARAMETER || e.own[i] <= 0 || e.end[i] < ps)
            continue;
        double part = held * (double)e.own[i] / total;
        const AutoLoop *L = auto_loop_of(g, first + i);
        if (L) {
            auto_loop_charge_state(g, m, L, part);
            st = auto_loop_charge_pairs(g, m, L, d);
        } else {
            auto_graph_charge(g, first + i, part);
        }
    }
    if (st == IR_OK && total > 0 && body > 0)
        st = auto_loop_charge_body(g, m, inside, held * body / total, d);
    mem_estimate_free(&e);
    return st;
}
