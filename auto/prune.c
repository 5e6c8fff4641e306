/*
 * prune.c: dominated strategies removed before the integer program.
 *
 * Strategy s of a group is dominated by s' when, whatever its neighbours
 * choose, s costs at least as much:
 *
 *   unary[s] - unary[s'] >= Σ_edges max_t (cost[s'][t] - cost[s][t])
 *
 * (and, with memory, mem[s] - mem[s'] >= Σ_edges max_t (edge mem[s'][t] -
 * edge mem[s][t]): it holds no more either), and its communication
 * alone (unary less the members' compute, and the edges) costs at least
 * as much too, and its bytes where the graph has them (wire[]): so s is
 * dominated under time + mu x comm for every mu >= 0, the tie-break's
 * objectives (tiebreak.c), and not only under time. (With
 * time alone the language model's replicated tied table, 1.2% slower and
 * communicating less, was removed before the tie-break could weigh it.)
 * Removing s keeps an
 * optimum (the relation is transitive; of two equal strategies the first
 * stays), and each removal shrinks the edges' matrices, which is what the
 * program's size grows with: rows x columns edge variables per edge. A
 * dot's strategies that leave one mesh axis idle compute twice as long as
 * those that use it, and where no reshard can pay that back they go.
 * Rounds repeat until nothing changes (a neighbour's removals narrow the
 * max_t). Deterministic.
 */
#include "auto.h"

#include <string.h>

/* The edges of each group: inc[first[k] .. first[k+1]). */
typedef struct Incidence {
    int32_t *first, *inc;
} Incidence;

static IrStatus incidence(const AutoGraph *g, Incidence *in, IrDiag *d)
{
    in->first = ts_calloc((size_t)g->ngroup + 2, sizeof *in->first);
    in->inc = ts_calloc(2 * (size_t)g->nedge + 1, sizeof *in->inc);
    if (!in->first || !in->inc)
        return ir_oom(d, NULL);
    for (int32_t e = 0; e < g->nedge; e++) {
        in->first[g->edge[e].from + 2]++;
        in->first[g->edge[e].to + 2]++;
    }
    for (int32_t k = 0; k < g->ngroup; k++)
        in->first[k + 2] += in->first[k + 1];
    for (int32_t e = 0; e < g->nedge; e++) {
        in->inc[in->first[g->edge[e].from + 1]++] = e;
        in->inc[in->first[g->edge[e].to + 1]++] = e;
    }
    return IR_OK;
}

/* Which cells of an edge worst_gain reads. */
typedef enum Cells { CELL_COST, CELL_MEM, CELL_WIRE } Cells;

/* max_t (cell[b][t] - cell[a][t]) summed over the edges of group k, of
 * their costs, their memory or their bytes (an edge without: 0). */
static double worst_gain(const AutoGraph *g, const Incidence *in, int32_t k, int32_t a, int32_t b, Cells which)
{
    double sum = 0;
    for (int32_t j = in->first[k]; j < in->first[k + 1]; j++) {
        const AutoEdge *ed = &g->edge[in->inc[j]];
        const double *cell = which == CELL_MEM ? ed->mem : which == CELL_WIRE ? ed->wire : ed->cost;
        if (!cell)
            continue;
        size_t nt = (size_t)g->group[ed->to].nstrat;
        double mx = -1e300;
        if (ed->from == k) {
            for (size_t t = 0; t < nt; t++) {
                double v = cell[(size_t)b * nt + t] - cell[(size_t)a * nt + t];
                mx = v > mx ? v : mx;
            }
        } else if (ed->to == k) {
            size_t ns = (size_t)g->group[ed->from].nstrat;
            for (size_t s = 0; s < ns; s++) {
                double v = cell[s * nt + (size_t)b] - cell[s * nt + (size_t)a];
                mx = v > mx ? v : mx;
            }
        } else {
            continue;
        }
        sum += mx;
    }
    return sum;
}

/* Does b dominate a in group k? */
static bool dominates(const AutoGraph *g, const Incidence *in, int32_t k, int32_t a, int32_t b, bool memory)
{
    const AutoGroup *gr = &g->group[k];
    if (memory && gr->mem[a] - gr->mem[b] < worst_gain(g, in, k, a, b, CELL_MEM))
        return false;
    /* The bytes too, where the graph has them (the tie-break's order). */
    if (gr->wire && gr->wire[a] - gr->wire[b] < worst_gain(g, in, k, a, b, CELL_WIRE))
        return false;
    double gain = worst_gain(g, in, k, a, b, CELL_COST) - 1e-15;
    double comm_gap = (gr->unary[a] - gr->compute[a]) - (gr->unary[b] - gr->compute[b]);
    return gr->unary[a] - gr->unary[b] >= gain && comm_gap >= gain;
}

/* Keep the strategies keep[0..n) marks in group k (nkeep of them). */
static IrStatus compress(AutoGraph *g, const Incidence *in, int32_t k, const bool *keep, int32_t nkeep, IrDiag *d)
{
    AutoGroup *gr = &g->group[k];
    int32_t n = gr->nstrat;
    int32_t *map = ir_alloc_array(g->arena, (size_t)n, sizeof *map);
    if (!map)
        return ir_oom(d, NULL);
    for (int32_t s = 0, j = 0; s < n; s++)
        map[s] = keep[s] ? j++ : -1;
    for (int32_t j = in->first[k]; j < in->first[k + 1]; j++) {
        AutoEdge *ed = &g->edge[in->inc[j]];
        size_t ns = (size_t)g->group[ed->from].nstrat, nt = (size_t)g->group[ed->to].nstrat;
        size_t ms = ed->from == k ? (size_t)nkeep : ns, mt = ed->to == k ? (size_t)nkeep : nt;
        double *c = ir_alloc_array(g->arena, ms * mt, sizeof *c);
        double *mem = ed->mem ? ir_alloc_array(g->arena, ms * mt, sizeof *mem) : NULL;
        double *wire = ed->wire ? ir_alloc_array(g->arena, ms * mt, sizeof *wire) : NULL;
        if (!c || (ed->mem && !mem) || (ed->wire && !wire))
            return ir_oom(d, NULL);
        for (size_t s = 0; s < ns; s++)
            for (size_t t = 0; t < nt; t++) {
                long rs = ed->from == k ? map[s] : (long)s, rt = ed->to == k ? map[t] : (long)t;
                if (rs >= 0 && rt >= 0) {
                    c[(size_t)rs * mt + (size_t)rt] = ed->cost[s * nt + t];
                    if (mem)
                        mem[(size_t)rs * mt + (size_t)rt] = ed->mem[s * nt + t];
                    if (wire)
                        wire[(size_t)rs * mt + (size_t)rt] = ed->wire[s * nt + t];
                }
            }
        ed->cost = c;
        ed->mem = mem;
        ed->wire = wire;
    }
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        AutoNode *v = &g->node[i];
        if (v->group != k)
            continue;
        for (int32_t s = 0; s < n; s++)
            if (map[s] >= 0)
                v->strat[map[s]] = v->strat[s];
        v->nstrat = nkeep;
    }
    for (int32_t s = 0; s < n; s++)
        if (map[s] >= 0) {
            gr->unary[map[s]] = gr->unary[s];
            gr->mem[map[s]] = gr->mem[s];
            gr->compute[map[s]] = gr->compute[s];
            if (gr->wire)
                gr->wire[map[s]] = gr->wire[s];
        }
    gr->npruned += n - nkeep;
    gr->nstrat = nkeep;
    return IR_OK;
}

IrStatus auto_graph_prune(AutoGraph *g, bool memory, IrDiag *d)
{
    bool *keep = NULL;
    int32_t maxs = 1;
    for (int32_t k = 0; k < g->ngroup; k++)
        maxs = g->group[k].nstrat > maxs ? g->group[k].nstrat : maxs;
    Incidence in = {0};
    IrStatus st = incidence(g, &in, d);
    if (st == IR_OK && !(keep = ts_calloc((size_t)maxs, sizeof *keep)))
        st = ir_oom(d, NULL);
    for (bool changed = true; changed && st == IR_OK;) {
        changed = false;
        for (int32_t k = 0; k < g->ngroup && st == IR_OK; k++) {
            int32_t n = g->group[k].nstrat, nkeep = n;
            for (int32_t s = 0; s < n; s++)
                keep[s] = true;
            for (int32_t a = 0; a < n; a++)
                for (int32_t b = 0; b < n && keep[a]; b++) {
                    if (b == a || !keep[b] || !dominates(g, &in, k, a, b, memory))
                        continue;
                    /* Equal both ways: the first stays. */
                    if (b > a && dominates(g, &in, k, b, a, memory))
                        continue;
                    keep[a] = false;
                    nkeep--;
                }
            if (nkeep < n) {
                st = compress(g, &in, k, keep, nkeep, d);
                changed = true;
            }
        }
    }
    ts_free(keep);
    ts_free(in.first);
    ts_free(in.inc);
    return st;
}
