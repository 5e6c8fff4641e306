/*
 * tiebreak.c: among the plans as fast as the fastest, the one that
 * communicates least.
 *
 * The objective is estimated step time, from rates good to tens of
 * percent; plans whose estimates differ by less than that are ties the
 * model cannot order. Where such a tie pits a plan that moves more bytes
 * against one that moves fewer (the language model's output projection:
 * tiled on the vocabulary, its SGD update on half a weight and a second
 * all-gather, against the weight whole and one all-reduce, 0.08% apart),
 * the one that moves fewer is the one to keep: bytes on the wire are what
 * grows with the cluster (across hosts a byte costs 3x to 30x what it
 * does in one) and what the estimate of compute does not see.
 *
 * With T* the optimum's seconds and C* its communication seconds (the
 * collectives and reshards: every edge, and each unary cost less its
 * members' compute), elimination solves again
 *
 *   minimise  time + mu x comm,   mu = NEAR x T* / C*
 *
 * whose optimum P satisfies time(P) + mu comm(P) <= T* + mu C*, so
 * time(P) <= (1 + NEAR) T* and comm(P) <= C*: never slower than NEAR
 * over the fastest, never communicating more than it. Under a memory
 * limit P is kept only where it fits. Deterministic.
 */
#include "auto.h"

#include <string.h>

#define NEAR 0.02 /* plans within 2% of the fastest estimate are ties */

static size_t edge_cells(const AutoGraph *g, const AutoEdge *e)
{
    return (size_t)g->group[e->from].nstrat * (size_t)g->group[e->to].nstrat;
}

int auto_tiebreak_solve(AutoGraph *g, double mem_limit, int32_t *choice)
{
    size_t nu = 0, ne = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        nu += (size_t)g->group[k].nstrat;
    for (int32_t e = 0; e < g->nedge; e++)
        ne += edge_cells(g, &g->edge[e]);
    double *unary0 = ts_calloc(nu ? nu : 1, sizeof *unary0);
    double *comm = ts_calloc(nu ? nu : 1, sizeof *comm);
    double *edge0 = ts_calloc(ne ? ne : 1, sizeof *edge0);
    int32_t *cur = ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *cur);
    int32_t *first = ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *first); /* group -> offset */
    if (!unary0 || !comm || !edge0 || !cur || !first) {
        ts_free(unary0);
        ts_free(comm);
        ts_free(edge0);
        ts_free(cur);
        ts_free(first);
        return -1;
    }
    /* A strategy's communication: its unary cost less its members'
     * compute (one pass over the nodes gathers the compute). */
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        first[k] = off;
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        const AutoNode *v = &g->node[i];
        for (int32_t s = 0; v->group >= 0 && s < g->group[v->group].nstrat; s++)
            comm[first[v->group] + s] -= v->strat[s].compute;
    }
    ts_free(first);
    double t0 = 0, c0 = 0;
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++) {
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            unary0[off + s] = g->group[k].unary[s];
            comm[off + s] += g->group[k].unary[s];
            if (comm[off + s] < 0)
                comm[off + s] = 0;
        }
        t0 += g->group[k].unary[choice[k]];
        c0 += comm[off + choice[k]];
    }
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++) {
        const AutoEdge *ed = &g->edge[e];
        memcpy(edge0 + off, ed->cost, edge_cells(g, ed) * sizeof *edge0);
        double c = ed->cost[(size_t)choice[ed->from] * (size_t)g->group[ed->to].nstrat + (size_t)choice[ed->to]];
        t0 += c;
        c0 += c;
    }
    int r = 1;
    if (c0 > 0 && t0 > 0) {
        double mu = NEAR * t0 / c0;
        for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
            for (int32_t s = 0; s < g->group[k].nstrat; s++)
                g->group[k].unary[s] = unary0[off + s] + mu * comm[off + s];
        for (int32_t e = 0; e < g->nedge; e++) {
            size_t n = edge_cells(g, &g->edge[e]);
            for (size_t j = 0; j < n; j++)
                g->edge[e].cost[j] *= 1 + mu;
        }
        r = auto_elim_solve(g, cur);
        for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
            memcpy(g->group[k].unary, unary0 + off, (size_t)g->group[k].nstrat * sizeof *unary0);
        for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
            memcpy(g->edge[e].cost, edge0 + off, edge_cells(g, &g->edge[e]) * sizeof *edge0);
        /* Too wide for elimination (0): the optimum stays. */
        if (r > 0 && (mem_limit <= 0 || auto_graph_mem(g, cur) <= mem_limit))
            memcpy(choice, cur, (size_t)g->ngroup * sizeof *choice);
    }
    ts_free(unary0);
    ts_free(comm);
    ts_free(edge0);
    ts_free(cur);
    return r < 0 ? -1 : 1;
}
