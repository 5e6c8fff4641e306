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
 * within the duality gap of it.
 *
 * Then memory: plans equal in time and communication were told apart by
 * nothing (the first found was kept). Among the plans within the time
 * bound whose communication is within NEAR of the kept plan's, the one
 * that holds least at the peak (auto_graph_mem, the memory row of a
 * limit):
 *
 *   minimise mem   subject to   time <= (1 + NEAR) T*,  comm <= (1 + NEAR) C
 *
 * by the same Lagrangian with lambda x mem added to the kept plan's
 * objective (its mu), lambda from the price at which its memory is worth
 * NEAR of the step, doubled while within both bounds, then bisected. The
 * transformer block's SGD step on 2x4: 429,064 bytes at the peak for
 * 445,448, with the same communication. Under a memory limit only plans
 * that fit are kept. Deterministic.
 */
#include "auto.h"

#include <string.h>

#define NEAR 0.02    /* plans within 2% of the fastest estimate are ties */
#define DOUBLINGS 12 /* mu up to 4096 x mu0: communication alone, in effect */
#define HALVINGS 8
#define MEMORY_HALVINGS 4 /* lambda to within 1/16 of the bracket: each solve costs a whole elimination */

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

/* Solve time + mu x comm + lambda x mem into sv->cur (the costs put
 * back after): 1, 0 too wide, -1 out of memory. */
static int solve_at(AutoGraph *g, const Saved *sv, double mu, double lambda)
{
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++)
            g->group[k].unary[s] = sv->unary[off + s] + mu * sv->comm[off + s] + lambda * g->group[k].mem[s];
    for (int32_t e = 0; e < g->nedge; e++) {
        size_t n = edge_cells(g, &g->edge[e]);
        const double *mem = g->edge[e].mem;
        for (size_t j = 0; j < n; j++)
            g->edge[e].cost[j] = g->edge[e].cost[j] * (1 + mu) + (mem ? lambda * mem[j] : 0);
    }
    int r = auto_elim_solve(g, sv->cur);
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        memcpy(g->group[k].unary, sv->unary + off, (size_t)g->group[k].nstrat * sizeof *sv->unary);
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        memcpy(g->edge[e].cost, sv->edge + off, edge_cells(g, &g->edge[e]) * sizeof *sv->edge);
    return r;
}

/* The plan kept so far and the weight of communication in the solve
 * that found it. */
typedef struct Best {
    double comm, time, mem, mu;
} Best;

/* Is sv->cur within the time bound and the memory limit, and does it
 * communicate less than the best so far (or as much in less time)? Then
 * it becomes the best (found at weight mu). Returns whether it was
 * within. */
static bool consider(const AutoGraph *g, const Saved *sv, double bound, double mem_limit, double mu, int32_t *best,
                     Best *b)
{
    double t = auto_graph_cost(g, sv->cur), c = comm_of(g, sv, sv->cur);
    if (t > bound || (mem_limit > 0 && auto_graph_mem(g, sv->cur) > mem_limit))
        return false;
    if (c < b->comm || (c == b->comm && t < b->time)) {
        memcpy(best, sv->cur, (size_t)g->ngroup * sizeof *best);
        b->comm = c;
        b->time = t;
        b->mu = mu;
    }
    return true;
}

/* Is sv->cur within the time bound, the communication bound and the
 * memory limit, and does it hold less at the peak than the best so far
 * (or as much and communicates less)? Then it becomes the best. Returns
 * whether it was within. */
static bool consider_memory(const AutoGraph *g, const Saved *sv, double bound, double comm_bound, double mem_limit,
                            int32_t *best, Best *b)
{
    double t = auto_graph_cost(g, sv->cur), c = comm_of(g, sv, sv->cur), m = auto_graph_mem(g, sv->cur);
    if (t > bound || c > comm_bound || (mem_limit > 0 && m > mem_limit))
        return false;
    if (m < b->mem || (m == b->mem && c < b->comm)) {
        memcpy(best, sv->cur, (size_t)g->ngroup * sizeof *best);
        b->comm = c;
        b->time = t;
        b->mem = m;
    }
    return true;
}

/* The plan of least communication within the time bound (the file
 * comment) into choice[]. 1, 0 too wide, -1 out of memory. */
static int least_communication(AutoGraph *g, const Saved *sv, double t0, double bound, double mem_limit,
                               int32_t *choice, Best *b)
{
    int r = 1;
    double lo = NEAR * t0 / b->comm, hi = 0;
    /* Up while within the bound, then bisect [lo, hi). */
    for (int k = 0; k < DOUBLINGS; k++) {
        double mu = k == 0 ? lo : 2 * lo;
        if ((r = solve_at(g, sv, mu, 0)) <= 0)
            return r;
        if (!consider(g, sv, bound, mem_limit, mu, choice, b)) {
            hi = mu;
            break;
        }
        lo = mu;
        if (comm_of(g, sv, sv->cur) <= 0)
            break;
    }
    for (int k = 0; k < HALVINGS && hi > 0; k++) {
        double mu = (lo + hi) / 2;
        if ((r = solve_at(g, sv, mu, 0)) <= 0)
            return r;
        if (consider(g, sv, bound, mem_limit, mu, choice, b))
            lo = mu;
        else
            hi = mu;
    }
    return r;
}

/* Among the plans within the time bound that communicate no more than
 * the kept one (within NEAR of it), the one that holds least at the
 * peak, into choice[]: time + mu x comm + lambda x mem solved (mu the
 * kept plan's weight) from lambda0, at which the kept plan's memory is
 * worth NEAR of the step, lambda doubled while the plan stays within
 * both bounds, then bisected. 1, 0 too wide, -1 out of memory. */
static int least_memory(AutoGraph *g, const Saved *sv, double t0, double bound, double mem_limit, int32_t *choice,
                        Best *b)
{
    int r = 1;
    double comm_bound = b->comm * (1 + NEAR), lambda = NEAR * t0 / b->mem, lo = 0, hi = 0;
    /* Up while within both bounds, then bisect [lo, hi) (lo 0: the kept
     * plan). */
    for (int k = 0; k < DOUBLINGS; k++, lambda *= 2) {
        if ((r = solve_at(g, sv, b->mu, lambda)) <= 0)
            return r;
        if (!consider_memory(g, sv, bound, comm_bound, mem_limit, choice, b)) {
            hi = lambda;
            break;
        }
        lo = lambda;
    }
    for (int k = 0; k < MEMORY_HALVINGS && hi > 0; k++) {
        double lambda = (lo + hi) / 2;
        if ((r = solve_at(g, sv, b->mu, lambda)) <= 0)
            return r;
        if (consider_memory(g, sv, bound, comm_bound, mem_limit, choice, b))
            lo = lambda;
        else
            hi = lambda;
    }
    return r;
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
    double t0 = r > 0 ? auto_graph_cost(g, choice) : 0;
    /* Too wide for elimination (0): the plan found so far stays. */
    if (r > 0 && t0 > 0) {
        double bound = (1 + NEAR) * t0;
        Best b = {comm_of(g, &sv, choice), t0, 0, 0};
        if (b.comm > 0)
            r = least_communication(g, &sv, t0, bound, mem_limit, choice, &b);
        b.mem = auto_graph_mem(g, choice);
        if (r > 0 && b.mem > 0)
            r = least_memory(g, &sv, t0, bound, mem_limit, choice, &b);
    }
    ts_free(sv.unary);
    ts_free(sv.comm);
    ts_free(sv.edge);
    ts_free(sv.cur);
    return r < 0 ? -1 : 1;
}
