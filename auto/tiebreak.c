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
 * members' compute), the plan wanted is
 *
 *   minimise comm   subject to   time <= (1 + NEAR) T*
 *
 * found by a Lagrangian over elimination, as lagrange.c does for memory:
 * elimination solves `time + mu x comm`, whose optimum P_mu satisfies
 * time(P) + mu comm(P) <= T* + mu C*; a higher mu never buys more
 * communication, so mu starts at NEAR x T* / C* (where P is within the
 * bound: time(P) <= (1 + NEAR) T*), doubles while P stays within it, and
 * is bisected between the last within and the first past; the plan that
 * communicates least of those within is kept (the least time among
 * equals). A scalar weight alone is not enough: at mu0 a plan 1.2% slower
 * that communicates 20% less (the tied language model's data parallelism
 * on 8 devices: 8.19 ms against 8.10, 0.70 ms of communication against
 * 0.88) loses to the optimum, mu0 x 0.18 ms being less than 0.09 ms.
 * It is the constrained optimum where the bound binds at some mu, else
 * within the duality gap of it. Under a memory limit only plans that fit
 * are kept. Deterministic.
 */
#include "auto.h"

#include <string.h>

#define NEAR 0.02    /* plans within 2% of the fastest estimate are ties */
#define DOUBLINGS 12 /* mu up to 4096 x mu0: communication alone, in effect */
#define HALVINGS 8

static size_t edge_cells(const AutoGraph *g, const AutoEdge *e)
{
    return (size_t)g->group[e->from].nstrat * (size_t)g->group[e->to].nstrat;
}

/* The group costs as they came (unary, edges), per strategy the
 * communication alone, and the plans tried. */
typedef struct Saved {
    double *unary, *comm, *edge;
    int32_t *cur;
} Saved;

/* The communication seconds of plan x. */
static double comm_of(const AutoGraph *g, const Saved *sv, const int32_t *x)
{
    double c = 0;
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        c += sv->comm[off + x[k]];
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        c += ed->cost[(size_t)x[ed->from] * (size_t)g->group[ed->to].nstrat + (size_t)x[ed->to]];
    }
    return c;
}

/* Solve time + mu x comm into sv->cur (the costs put back after): 1, 0
 * too wide, -1 out of memory. */
static int solve_at(AutoGraph *g, const Saved *sv, double mu)
{
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++)
            g->group[k].unary[s] = sv->unary[off + s] + mu * sv->comm[off + s];
    for (int32_t e = 0; e < g->nedge; e++) {
        size_t n = edge_cells(g, &g->edge[e]);
        for (size_t j = 0; j < n; j++)
            g->edge[e].cost[j] *= 1 + mu;
    }
    int r = auto_elim_solve(g, sv->cur);
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        memcpy(g->group[k].unary, sv->unary + off, (size_t)g->group[k].nstrat * sizeof *sv->unary);
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        memcpy(g->edge[e].cost, sv->edge + off, edge_cells(g, &g->edge[e]) * sizeof *sv->edge);
    return r;
}

/* Is sv->cur within the time bound and the memory limit, and does it
 * communicate less than the best so far (or as much in less time)? Then
 * it becomes the best. Returns whether it was within. */
static bool consider(const AutoGraph *g, const Saved *sv, double bound, double mem_limit, int32_t *best,
                     double *best_comm, double *best_time)
{
    double t = auto_graph_cost(g, sv->cur), c = comm_of(g, sv, sv->cur);
    if (t > bound || (mem_limit > 0 && auto_graph_mem(g, sv->cur) > mem_limit))
        return false;
    if (c < *best_comm || (c == *best_comm && t < *best_time)) {
        memcpy(best, sv->cur, (size_t)g->ngroup * sizeof *best);
        *best_comm = c;
        *best_time = t;
    }
    return true;
}

int auto_tiebreak_solve(AutoGraph *g, double mem_limit, int32_t *choice)
{
    size_t nu = 0, ne = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        nu += (size_t)g->group[k].nstrat;
    for (int32_t e = 0; e < g->nedge; e++)
        ne += edge_cells(g, &g->edge[e]);
    Saved sv = {ts_calloc(nu ? nu : 1, sizeof *sv.unary), ts_calloc(nu ? nu : 1, sizeof *sv.comm),
                ts_calloc(ne ? ne : 1, sizeof *sv.edge),
                ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *sv.cur)};
    int r = sv.unary && sv.comm && sv.edge && sv.cur ? 1 : -1;
    for (int32_t k = 0, off = 0; r > 0 && k < g->ngroup; off += g->group[k].nstrat, k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            sv.unary[off + s] = g->group[k].unary[s];
            double c = g->group[k].unary[s] - g->group[k].compute[s];
            sv.comm[off + s] = c > 0 ? c : 0;
        }
    for (size_t e = 0, off = 0; r > 0 && e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        memcpy(sv.edge + off, g->edge[e].cost, edge_cells(g, &g->edge[e]) * sizeof *sv.edge);
    double t0 = r > 0 ? auto_graph_cost(g, choice) : 0, c0 = r > 0 ? comm_of(g, &sv, choice) : 0;
    if (r > 0 && c0 > 0 && t0 > 0) {
        double bound = (1 + NEAR) * t0, best_comm = c0, best_time = t0;
        double lo = NEAR * t0 / c0, hi = 0;
        /* Up while within the bound, then bisect [lo, hi). Too wide for
         * elimination (0): the optimum stays. */
        for (int k = 0; k < DOUBLINGS && r > 0; k++) {
            double mu = k == 0 ? lo : 2 * lo;
            if ((r = solve_at(g, &sv, mu)) <= 0)
                break;
            if (!consider(g, &sv, bound, mem_limit, choice, &best_comm, &best_time)) {
                hi = mu;
                break;
            }
            lo = mu;
            if (comm_of(g, &sv, sv.cur) <= 0)
                break;
        }
        for (int k = 0; k < HALVINGS && r > 0 && hi > 0; k++) {
            double mu = (lo + hi) / 2;
            if ((r = solve_at(g, &sv, mu)) <= 0)
                break;
            if (consider(g, &sv, bound, mem_limit, choice, &best_comm, &best_time))
                lo = mu;
            else
                hi = mu;
        }
    }
    ts_free(sv.unary);
    ts_free(sv.comm);
    ts_free(sv.edge);
    ts_free(sv.cur);
    return r < 0 ? -1 : 1;
}
