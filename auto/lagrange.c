/*
 * lagrange.c: a memory limit over the exact elimination, by a Lagrangian.
 *
 * The memory row is the one constraint variable elimination (elim.c)
 * cannot hold: its factors are local, the row sums over every group. Moved
 * into the objective with a price lambda (seconds per byte),
 *
 *   minimise  Σ unary[g][k] + lambda x mem[g][k]  +  Σ edges (+ lambda x
 *             the memory of an edge's pair: a loop state and its operand)
 *
 * is again a sum of local factors, solved exactly by elimination for any
 * lambda. The plan of a lambda uses no more memory than that of a smaller
 * one (a larger price never buys memory back), so the least lambda whose
 * plan fits the limit is found by bracketing (lambda times 4 from the
 * price at which the memory of the unconstrained optimum costs as much as
 * its step) and then halving the bracket, keeping the cheapest fitting
 * plan seen by the true objective. That plan fits the limit; it is the
 * optimum of the program whenever the limit binds exactly at a lambda
 * (no duality gap), and otherwise within the gap of it: a heuristic with
 * a bound, in milliseconds per solve where GLPK's simplex over the whole
 * program takes minutes on a 24-layer transformer. Deterministic.
 */
#include "auto.h"

#include <string.h>

#define BRACKET_STEPS 24 /* lambda up to 4^24 times the first price */
#define HALVINGS 16

static size_t edge_cells(const AutoGraph *g, const AutoEdge *e)
{
    return (size_t)g->group[e->from].nstrat * (size_t)g->group[e->to].nstrat;
}

/* Elimination with lambda x mem added to each cost (unary, and the
 * edges that hold memory: a loop state's pair, auto_graph_charge_pair);
 * 1 solved, 0 too wide, -1 OOM. The costs put back after. */
static int solve_at(AutoGraph *g, const double *unary0, const double *edge0, double lambda, int32_t *choice)
{
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++)
            g->group[k].unary[s] = unary0[off + s] + lambda * g->group[k].mem[s];
    for (int32_t e = 0; e < g->nedge; e++)
        for (size_t j = 0, n = edge_cells(g, &g->edge[e]); g->edge[e].mem && j < n; j++)
            g->edge[e].cost[j] += lambda * g->edge[e].mem[j];
    int r = auto_elim_solve(g, choice);
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        memcpy(g->group[k].unary, unary0 + off, (size_t)g->group[k].nstrat * sizeof *unary0);
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        if (g->edge[e].mem)
            memcpy(g->edge[e].cost, edge0 + off, edge_cells(g, &g->edge[e]) * sizeof *edge0);
    return r;
}

/* Keep choice as *best when it fits and costs less. */
static void keep(const AutoGraph *g, double limit, const int32_t *choice, int32_t *best, double *best_cost)
{
    if (auto_graph_mem(g, choice) > limit)
        return;
    double c = auto_graph_cost(g, choice);
    if (*best_cost < 0 || c < *best_cost) {
        *best_cost = c;
        memcpy(best, choice, (size_t)g->ngroup * sizeof *best);
    }
}

int auto_lagrange_solve(AutoGraph *g, double mem_limit, int32_t *choice)
{
    size_t n = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        n += (size_t)g->group[k].nstrat;
    size_t ne = 0;
    for (int32_t e = 0; e < g->nedge; e++)
        ne += edge_cells(g, &g->edge[e]);
    double *unary0 = ts_calloc(n ? n : 1, sizeof *unary0), *edge0 = ts_calloc(ne ? ne : 1, sizeof *edge0);
    int32_t *cur = ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *cur);
    if (!unary0 || !edge0 || !cur) {
        ts_free(unary0);
        ts_free(edge0);
        ts_free(cur);
        return -1;
    }
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        memcpy(edge0 + off, g->edge[e].cost, edge_cells(g, &g->edge[e]) * sizeof *edge0);
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        memcpy(unary0 + off, g->group[k].unary, (size_t)g->group[k].nstrat * sizeof *unary0);
    double best_cost = -1;
    int r = solve_at(g, unary0, edge0, 0, cur);
    double mem0 = r > 0 ? auto_graph_mem(g, cur) : 0, cost0 = r > 0 ? auto_graph_cost(g, cur) : 0;
    if (r > 0)
        keep(g, mem_limit, cur, choice, &best_cost);
    /* Bracket: lo does not fit, hi does. */
    double lo = 0, hi = mem0 > 0 && cost0 > 0 ? cost0 / mem0 : 1e-12;
    bool fits = best_cost >= 0;
    for (int32_t step = 0; r > 0 && !fits && step < BRACKET_STEPS; step++) {
        if ((r = solve_at(g, unary0, edge0, hi, cur)) <= 0)
            break;
        if (auto_graph_mem(g, cur) <= mem_limit) {
            keep(g, mem_limit, cur, choice, &best_cost);
            fits = true;
        } else {
            lo = hi;
            hi *= 4;
        }
    }
    for (int32_t step = 0; r > 0 && fits && lo > 0 && step < HALVINGS; step++) {
        double mid = (lo + hi) / 2;
        if ((r = solve_at(g, unary0, edge0, mid, cur)) <= 0)
            break;
        if (auto_graph_mem(g, cur) <= mem_limit) {
            keep(g, mem_limit, cur, choice, &best_cost);
            hi = mid;
        } else {
            lo = mid;
        }
    }
    ts_free(unary0);
    ts_free(edge0);
    ts_free(cur);
    if (r < 0)
        return -1;
    return best_cost >= 0 ? 1 : 0;
}
