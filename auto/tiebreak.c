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
 * Communication is counted in bytes a device moves (the collectives and
 * reshards of each strategy and edge cell, wire[], measured by
 * auto_tiebreak_wire on a second graph priced with no latency and a
 * second a byte), not in seconds: at 20 us a collective and 0.25 ns a
 * byte, seconds count collectives and the bytes decided nothing
 * (tests/jax/test_auto_heldout45.py: plans of as many collectives moving
 * 1.2x to 2.3x the hand plan's bytes). Where the graph has no bytes, its
 * communication seconds (each unary cost less its members' compute, and
 * every edge).
 *
 * With T* the optimum's seconds and C* its communication, the plan
 * wanted is
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
 * 445,448, with the same communication.
 *
 * A reshard's bytes are the partitioner's, as its price is (cost.c
 * follows partition/reshard.c's cases): priced axis by axis, JAX's SGD
 * step of the wide scan on 2x2 took a plan that gathers its stacked
 * activations whole where the model saw one all-to-all of one axis,
 * 2.65x data parallelism's bytes.
 *
 * Under a memory limit only plans that fit are kept. On small graphs
 * (AUTO_EXACT_COLUMNS) with bytes both searches are the integer program's
 * (ilp.c: least bytes subject to the time bound and the limit, then least
 * memory subject to those and bytes within NEAR), exact: with a price of
 * memory in every solve the plans of the hand plan's bytes were the
 * optimum of no (mu, lambda) (tests/jax/test_auto_heldout45.py, uneven_sgd
 * on 2: 844 bytes against Megatron's 688; the program finds 480). Else
 * each solve is at the least price of memory whose plan fits (solve_fit).
 * Without a limit the search stays: the program's plan of least bytes for
 * the tied language model on 2 (tests/e2e/auto_shard.py) peaked at 7.2 MB
 * where the memory row, charged at one step, said 5.1 and the search's
 * plan holds 5.1. Deterministic.
 */
#include "auto.h"

#include <string.h>

#define NEAR 0.02    /* plans within 2% of the fastest estimate are ties */
#define DOUBLINGS 12 /* mu up to 4096 x mu0: communication alone, in effect */
#define HALVINGS 8
#define MEMORY_HALVINGS 4 /* lambda to within 1/16 of the bracket: each solve costs a whole elimination */
#define FIT_STEPS 8       /* a price of memory that fits: up to 4^7 times the Lagrangian's */
#define FIT_HALVINGS 6
#define EXACT_NODES 200    /* its subproblems of branch and bound, at most */

static size_t edge_cells(const AutoGraph *g, const AutoEdge *e)
{
    return (size_t)g->group[e->from].nstrat * (size_t)g->group[e->to].nstrat;
}

/* The group costs as they came (unary, edges), per strategy and per
 * edge cell the communication alone (bytes a device moves where the graph
 * has them, wire[], else seconds), and the plans tried. */
typedef struct Saved {
    double *unary, *comm, *edge, *ecomm;
    int32_t *cur, *fit;
    double limit; /* the memory limit (0: none) */
    double price; /* where solve_fit's search for a price of memory starts */
} Saved;

/* The communication of plan x (bytes, or seconds where the graph has no
 * bytes). */
static double comm_of(const AutoGraph *g, const Saved *sv, const int32_t *x)
{
    double c = 0;
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        c += sv->comm[off + x[k]];
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++) {
        const AutoEdge *ed = &g->edge[e];
        c += sv->ecomm[off + (size_t)x[ed->from] * (size_t)g->group[ed->to].nstrat + (size_t)x[ed->to]];
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
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++) {
        size_t n = edge_cells(g, &g->edge[e]);
        const double *mem = g->edge[e].mem;
        for (size_t j = 0; j < n; j++)
            g->edge[e].cost[j] += mu * sv->ecomm[off + j] + (mem ? lambda * mem[j] : 0);
    }
    int r = auto_elim_solve(g, sv->cur);
    for (int32_t k = 0, off = 0; k < g->ngroup; off += g->group[k].nstrat, k++)
        memcpy(g->group[k].unary, sv->unary + off, (size_t)g->group[k].nstrat * sizeof *sv->unary);
    for (size_t e = 0, off = 0; e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++)
        memcpy(g->edge[e].cost, sv->edge + off, edge_cells(g, &g->edge[e]) * sizeof *sv->edge);
    return r;
}

static bool fits(const AutoGraph *g, const Saved *sv, const int32_t *x)
{
    return sv->limit <= 0 || auto_graph_mem(g, x) <= sv->limit;
}

/* Under a memory limit: solve time + mu x comm + lambda x mem at the
 * least lambda whose plan fits (0 where that plan fits; else bracketed
 * from sv->price, times 4 up or halved down, then bisected: lagrange.c's
 * search at this mu) into sv->cur, *lambda that price. Where no lambda
 * tried fits, the plan of the last (it does not fit). 1, 0 too wide, -1
 * out of memory. */
static int solve_fit(AutoGraph *g, Saved *sv, double mu, double *lambda)
{
    *lambda = 0;
    int r = solve_at(g, sv, mu, 0);
    if (r <= 0 || fits(g, sv, sv->cur))
        return r;
    size_t bytes = (size_t)g->ngroup * sizeof *sv->cur;
    double lo = 0, hi = sv->price;
    bool found = false;
    /* Bracket [lo, hi): lo does not fit, hi does. */
    for (int k = 0; k < FIT_STEPS && r > 0 && !found; k++) {
        if ((r = solve_at(g, sv, mu, hi)) <= 0)
            return r;
        if (fits(g, sv, sv->cur)) {
            found = true;
            memcpy(sv->fit, sv->cur, bytes);
        } else {
            lo = hi;
            hi *= 4;
        }
    }
    if (!found)
        return r;
    for (int k = 0; k < FIT_HALVINGS; k++) {
        double mid = (lo + hi) / 2;
        if ((r = solve_at(g, sv, mu, mid)) <= 0)
            return r;
        if (fits(g, sv, sv->cur)) {
            hi = mid;
            memcpy(sv->fit, sv->cur, bytes);
        } else {
            lo = mid;
        }
    }
    memcpy(sv->cur, sv->fit, bytes);
    *lambda = hi;
    return r;
}

/* The plan kept so far, the weight of communication and the price of
 * memory in the solve that found it. */
typedef struct Best {
    double comm, time, mem, mu, lambda;
} Best;

/* Is sv->cur within the time bound and the memory limit, and does it
 * communicate less than the best so far (or as much in less time)? Then
 * it becomes the best (found at weight mu). Returns whether it was
 * within. */
static bool consider(const AutoGraph *g, const Saved *sv, double bound, double mu, double lambda, int32_t *best,
                     Best *b)
{
    double t = auto_graph_cost(g, sv->cur), c = comm_of(g, sv, sv->cur);
    if (t > bound || !fits(g, sv, sv->cur))
        return false;
    if (c < b->comm || (c == b->comm && t < b->time)) {
        memcpy(best, sv->cur, (size_t)g->ngroup * sizeof *best);
        b->comm = c;
        b->time = t;
        b->mu = mu;
        b->lambda = lambda;
    }
    return true;
}

/* Is sv->cur within the time bound, the communication bound and the
 * memory limit, and does it hold less at the peak than the best so far
 * (or as much and communicates less)? Then it becomes the best. Returns
 * whether it was within. */
static bool consider_memory(const AutoGraph *g, const Saved *sv, double bound, double comm_bound, int32_t *best,
                            Best *b)
{
    double t = auto_graph_cost(g, sv->cur), c = comm_of(g, sv, sv->cur), m = auto_graph_mem(g, sv->cur);
    if (t > bound || c > comm_bound || !fits(g, sv, sv->cur))
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
static int least_communication(AutoGraph *g, Saved *sv, double t0, double bound, int32_t *choice, Best *b)
{
    int r = 1;
    double lo = NEAR * t0 / b->comm, hi = 0, lambda;
    /* Up while within the bound, then bisect [lo, hi). */
    for (int k = 0; k < DOUBLINGS; k++) {
        double mu = k == 0 ? lo : 2 * lo;
        if ((r = solve_fit(g, sv, mu, &lambda)) <= 0)
            return r;
        if (!consider(g, sv, bound, mu, lambda, choice, b)) {
            hi = mu;
            break;
        }
        lo = mu;
        if (comm_of(g, sv, sv->cur) <= 0)
            break;
    }
    for (int k = 0; k < HALVINGS && hi > 0; k++) {
        double mu = (lo + hi) / 2;
        if ((r = solve_fit(g, sv, mu, &lambda)) <= 0)
            return r;
        if (consider(g, sv, bound, mu, lambda, choice, b))
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
static int least_memory(AutoGraph *g, const Saved *sv, double t0, double bound, int32_t *choice, Best *b)
{
    int r = 1;
    double comm_bound = b->comm * (1 + NEAR), lambda = NEAR * t0 / b->mem, lo = 0, hi = 0;
    /* Up while within both bounds, then bisect [lo, hi) (lo 0: the kept
     * plan). */
    for (int k = 0; k < DOUBLINGS; k++, lambda *= 2) {
        if ((r = solve_at(g, sv, b->mu, b->lambda + lambda)) <= 0)
            return r;
        if (!consider_memory(g, sv, bound, comm_bound, choice, b)) {
            hi = lambda;
            break;
        }
        lo = lambda;
    }
    for (int k = 0; k < MEMORY_HALVINGS && hi > 0; k++) {
        double lambda = (lo + hi) / 2;
        if ((r = solve_at(g, sv, b->mu, b->lambda + lambda)) <= 0)
            return r;
        if (consider_memory(g, sv, bound, comm_bound, choice, b))
            lo = lambda;
        else
            hi = lambda;
    }
    return r;
}

/* Is x within the time bound and the limit (and, comm_bound > 0, within
 * it too)? */
static bool within(const AutoGraph *g, const Saved *sv, const int32_t *x, double bound, double comm_bound)
{
    return auto_graph_cost(g, x) <= bound * (1 + 1e-9) && fits(g, sv, x) &&
           (comm_bound <= 0 || comm_of(g, sv, x) <= comm_bound * (1 + 1e-9));
}

/* Small graphs (AUTO_EXACT_COLUMNS), where bytes decide: by the integer
 * program, exact (ilp.c): the plan of least bytes within the time bound
 * and the limit, then the one that holds least among those within NEAR of
 * its bytes too. Into choice[] where better than b's. 1 solved, 0 not
 * (the program found no plan: the Lagrangian's search then), -1 out of
 * memory. */
static int exact(AutoGraph *g, const Saved *sv, double bound, int32_t *choice, Best *b)
{
    IrDiag none = {0};
    double lim[AUTO_NTERMS] = {bound, 0, sv->limit};
    IrStatus st = auto_ilp_least(g, AUTO_TERM_WIRE, lim, EXACT_NODES, sv->fit, NULL, &none);
    ir_diag_clear(&none);
    if (st == IR_ENOMEM)
        return -1;
    if (st != IR_OK || !within(g, sv, sv->fit, bound, 0))
        return 0;
    size_t bytes = (size_t)g->ngroup * sizeof *choice;
    double c = comm_of(g, sv, sv->fit);
    if (c < b->comm) {
        memcpy(choice, sv->fit, bytes);
        b->comm = c;
    }
    b->mem = auto_graph_mem(g, choice);
    /* Bytes within NEAR of the least (a byte more where that is none). */
    lim[AUTO_TERM_WIRE] = b->comm > 0 ? b->comm * (1 + NEAR) : 1;
    st = auto_ilp_least(g, AUTO_TERM_MEM, lim, EXACT_NODES, sv->fit, NULL, &none);
    ir_diag_clear(&none);
    if (st == IR_ENOMEM)
        return -1;
    if (st == IR_OK && within(g, sv, sv->fit, bound, lim[AUTO_TERM_WIRE]) && auto_graph_mem(g, sv->fit) < b->mem)
        memcpy(choice, sv->fit, bytes);
    return 1;
}

int auto_tiebreak_solve(AutoGraph *g, double mem_limit, double price, int32_t *choice)
{
    size_t nu = 0, ne = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        nu += (size_t)g->group[k].nstrat;
    for (int32_t e = 0; e < g->nedge; e++)
        ne += edge_cells(g, &g->edge[e]);
    Saved sv = {ts_calloc(nu ? nu : 1, sizeof *sv.unary), ts_calloc(nu ? nu : 1, sizeof *sv.comm),
                ts_calloc(ne ? ne : 1, sizeof *sv.edge), ts_calloc(ne ? ne : 1, sizeof *sv.ecomm),
                ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *sv.cur),
                ts_calloc((size_t)(g->ngroup > 0 ? g->ngroup : 1), sizeof *sv.fit), mem_limit, price};
    int r = sv.unary && sv.comm && sv.edge && sv.ecomm && sv.cur && sv.fit ? 1 : -1;
    /* Bytes where every group and edge has them (auto_tiebreak_wire),
     * else communication seconds. */
    bool bytes = g->ngroup > 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        bytes &= g->group[k].wire != NULL;
    for (int32_t e = 0; e < g->nedge; e++)
        bytes &= g->edge[e].wire != NULL;
    for (int32_t k = 0, off = 0; r > 0 && k < g->ngroup; off += g->group[k].nstrat, k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            sv.unary[off + s] = g->group[k].unary[s];
            double c = bytes ? g->group[k].wire[s] : g->group[k].unary[s] - g->group[k].compute[s];
            sv.comm[off + s] = c > 0 ? c : 0;
        }
    for (size_t e = 0, off = 0; r > 0 && e < (size_t)g->nedge; off += edge_cells(g, &g->edge[e]), e++) {
        memcpy(sv.edge + off, g->edge[e].cost, edge_cells(g, &g->edge[e]) * sizeof *sv.edge);
        memcpy(sv.ecomm + off, bytes ? g->edge[e].wire : g->edge[e].cost, edge_cells(g, &g->edge[e]) * sizeof *sv.ecomm);
    }
    double t0 = r > 0 ? auto_graph_cost(g, choice) : 0;
    /* Too wide for elimination (0): the plan found so far stays. */
    if (r > 0 && t0 > 0) {
        double bound = (1 + NEAR) * t0;
        /* The search for a price of memory that fits starts at the
         * Lagrangian's, or where the plan's memory is worth NEAR of its
         * step. */
        double m0 = auto_graph_mem(g, choice);
        if (!(sv.price > 0))
            sv.price = m0 > 0 ? NEAR * t0 / m0 : 1e-12;
        Best b = {comm_of(g, &sv, choice), t0, 0, 0, price};
        /* Under a limit the Lagrangian's search meets its duality gap (the
         * plans of the hand plan's bytes were on no (mu, lambda)'s
         * optimum: tests/jax/test_auto_heldout45.py); without one it is
         * kept (the integer program's plan of least bytes for the tied
         * language model on 2 held 7.2 MB at its peak for the estimate's
         * 5.1, where the search's holds 5.1). */
        int done = bytes && sv.limit > 0 && nu + ne <= AUTO_EXACT_COLUMNS ? exact(g, &sv, bound, choice, &b) : 0;
        if (done < 0)
            r = -1;
        if (!done && b.comm > 0)
            r = least_communication(g, &sv, t0, bound, choice, &b);
        b.mem = auto_graph_mem(g, choice);
        if (!done && r > 0 && b.mem > 0)
            r = least_memory(g, &sv, t0, bound, choice, &b);
    }
    ts_free(sv.unary);
    ts_free(sv.comm);
    ts_free(sv.edge);
    ts_free(sv.ecomm);
    ts_free(sv.cur);
    ts_free(sv.fit);
    return r < 0 ? -1 : 1;
}

IrStatus auto_tiebreak_wire(AutoGraph *g, const IrModule *m, const AutoCost *cost, bool donate_auto,
                            AutoOnHost on_host, IrDiag *d)
{
    /* A latency of nothing (auto_cost_fill keeps a positive one) and a
     * second a byte: the communication of a strategy is its bytes. */
    AutoCost c = *cost;
    for (int k = 0; k < AUTO_NCOLL; k++)
        for (int s = 0; s < 2; s++) {
            c.alpha[k][s] = 1e-300;
            c.beta[k][s] = 1;
        }
    AutoGraph w;
    IrStatus st = auto_graph_build(m, &g->mesh, &c, g->local, donate_auto, on_host, &w, d);
    if (st != IR_OK)
        return st;
    bool same = w.ngroup == g->ngroup && w.nedge == g->nedge;
    for (int32_t k = 0; same && k < g->ngroup; k++)
        same = w.group[k].leader == g->group[k].leader && w.group[k].nstrat == g->group[k].nstrat;
    for (int32_t e = 0; same && e < g->nedge; e++)
        same = w.edge[e].from == g->edge[e].from && w.edge[e].to == g->edge[e].to;
    for (int32_t k = 0; same && st == IR_OK && k < g->ngroup; k++) {
        AutoGroup *gr = &g->group[k];
        if (!(gr->wire = ir_alloc_array(g->arena, (size_t)(gr->nstrat > 0 ? gr->nstrat : 1), sizeof *gr->wire)))
            st = ir_oom(d, NULL);
        for (int32_t s = 0; st == IR_OK && s < gr->nstrat; s++) {
            double b = w.group[k].unary[s] - w.group[k].compute[s];
            gr->wire[s] = b > 0 ? b : 0;
        }
    }
    for (int32_t e = 0; same && st == IR_OK && e < g->nedge; e++) {
        size_t n = edge_cells(g, &g->edge[e]);
        if (!(g->edge[e].wire = ir_alloc_array(g->arena, n ? n : 1, sizeof *g->edge[e].wire)))
            st = ir_oom(d, NULL);
        else
            memcpy(g->edge[e].wire, w.edge[e].cost, n * sizeof *g->edge[e].wire);
    }
    auto_graph_free(&w);
    return st;
}
