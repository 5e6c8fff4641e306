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
 * program takes minutes on a 24-layer transformer.
 *
 * The bound: each lambda's optimum, priced, less lambda x the limit, is
 * no more than any plan within the limit costs (the Lagrangian dual); the
 * largest seen is kept. The gap is real on small programs whose memory
 * comes in a few large steps: sort_loss on 4 (tests/jax/
 * test_auto_heldout45.py) under 3,093 bytes, the plans at the bracket's
 * ends hold 3,252 (over) and 1,284 bytes, and the data-parallel plan
 * (2,004 bytes, 0.0615 ms) lies above the line between them, on no
 * price's optimum: the plan kept was estimated 0.0815 ms, its bound
 * 0.0272 (a gap of 67%). Where the gap passes LAGRANGE_GAP and the integer
 * program has at most AUTO_EXACT_COLUMNS columns, GLPK solves it with the
 * memory row as a constraint (ilp.c): its plan is kept where it is more
 * than LAGRANGE_GAP cheaper (sort_loss on 4: 0.0424 ms, 2 collectives,
 * proven optimal), and its optimum (or bound) bounds the plan kept.
 * Deterministic.
 */
#include "auto.h"

#include <math.h>
#include <string.h>

#define BRACKET_STEPS 24 /* lambda up to 4^24 times the first price */
#define HALVINGS 16
/* The relative gap (the plan's estimate over its bound) past which the
 * integer program solves, and by which its plan must be cheaper to be
 * kept: within it the plans are ties (docs/auto-shard.md, "Ties"). */
#define LAGRANGE_GAP 0.02

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

/* The Lagrangian dual at lambda from choice, elimination's optimum
 * there: its priced cost less lambda x the limit, a lower bound on the
 * cost of every plan within the limit; *bound the largest seen. */
static void dual(const AutoGraph *g, double limit, double lambda, const int32_t *choice, double *bound)
{
    double b = auto_graph_cost(g, choice) + lambda * (auto_graph_mem(g, choice) - limit);
    *bound = b > *bound ? b : *bound;
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

/* How far above bound (seconds) a plan of `cost` seconds may be, relative
 * to it; 0 at or under it, INFINITY where no bound is known. */
static double rel_gap(double cost, double bound)
{
    if (!isfinite(bound))
        return INFINITY;
    return cost > 0 && bound < cost ? (cost - bound) / cost : 0;
}

/* choice[], the Lagrangian's plan within limit, and bound, its dual bound;
 * columns: the integer program's. Where the gap passes LAGRANGE_GAP and
 * the program is small, its plan where it is more than LAGRANGE_GAP
 * cheaper, and its optimum (or bound) the bound. *how: whose plan and how
 * far from the optimum. -1 out of memory, else 1. */
static int close_gap(const AutoGraph *g, double limit, double bound, size_t columns, int32_t *choice,
                     AutoIlpInfo *how)
{
    double c = auto_graph_cost(g, choice), gap = rel_gap(c, bound);
    *how = (AutoIlpInfo){.optimal = gap <= 1e-6, .gap = gap, .by = AUTO_BY_LAGRANGE, .bound = bound};
    if (gap <= LAGRANGE_GAP || columns > AUTO_EXACT_COLUMNS)
        return 1;
    int32_t *alt = ts_malloc((size_t)(g->ngroup > 0 ? g->ngroup : 1) * sizeof *alt);
    if (!alt)
        return -1;
    AutoIlpInfo info;
    IrDiag none = {0};
    IrStatus st = auto_ilp_solve(g, limit, alt, &info, &none);
    ir_diag_clear(&none);
    if (st == IR_OK && auto_graph_mem(g, alt) <= limit) {
        double a = auto_graph_cost(g, alt);
        /* The optimum, or the higher of the two bounds. */
        double b = info.optimal ? a : info.bound > bound ? info.bound : bound;
        if (a < c * (1 - LAGRANGE_GAP)) {
            memcpy(choice, alt, (size_t)g->ngroup * sizeof *alt);
            c = a;
            how->by = AUTO_BY_ILP;
        }
        how->bound = b;
        how->gap = rel_gap(c, b);
        how->optimal = how->gap <= 1e-6;
        how->nodes = info.nodes;
        how->node_limit = info.node_limit;
    }
    ts_free(alt);
    return st == IR_ENOMEM ? -1 : 1;
}

int auto_lagrange_solve(AutoGraph *g, double mem_limit, int32_t *choice, AutoIlpInfo *how)
{
    double lb = -INFINITY;
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
    if (r > 0) {
        dual(g, mem_limit, 0, cur, &lb);
        keep(g, mem_limit, cur, choice, &best_cost);
    }
    /* Bracket: lo does not fit, hi does. */
    double lo = 0, hi = mem0 > 0 && cost0 > 0 ? cost0 / mem0 : 1e-12;
    bool fits = best_cost >= 0;
    for (int32_t step = 0; r > 0 && !fits && step < BRACKET_STEPS; step++) {
        if ((r = solve_at(g, unary0, edge0, hi, cur)) <= 0)
            break;
        dual(g, mem_limit, hi, cur, &lb);
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
        dual(g, mem_limit, mid, cur, &lb);
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
    AutoIlpInfo info;
    if (best_cost >= 0 && close_gap(g, mem_limit, lb, n + ne, choice, &info) < 0)
        return -1;
    if (best_cost >= 0 && how)
        *how = info;
    return best_cost >= 0 ? 1 : 0;
}
