/*
 * form.c: which instructions of a host computation form which cluster,
 * and in which order the host program runs them.
 *
 * A host computation is the entry, or a computation that host control
 * flow (a while / conditional / call with host ops inside) runs. For each:
 *
 * 1. Levels. Walking a topological order, every device instruction gets
 *    the number of host crossings that must come before it:
 *
 *      device v:  level(v) = max over predecessors u of
 *                   level(u)   when u is device work
 *                   pass(u)    when u is host work
 *      host h:    pass(h)  = max over predecessors u of
 *                   level(u) + 1  when u is device work  (a crossing)
 *                   pass(u)       when u is host work
 *
 *    (predecessors are operands and control predecessors; small constants
 *    are left out, they are cloned wherever they are used). Along every
 *    edge the level never decreases, and it grows by at least one across
 *    any host instruction fed by device work. So contracting each set of
 *    device instructions of one level into one node leaves the graph
 *    acyclic: a cycle would have to leave a level through a host node and
 *    come back to it. And no two of these sets can be merged: the longest
 *    chain device -> host -> device -> ... -> device has one instruction at
 *    every level, and merging two levels would put the chain's middle part
 *    on a cycle. So the level sets are the fewest clusters possible (any
 *    clustering needs one per instruction of that chain), and each is as
 *    large as possible. (TF's greedy edge contraction can do worse: merging
 *    a -> b early can push a third instruction behind a host op.)
 *
 *    Then, walking backwards, an instruction with device users moves up
 *    towards them (ALAP), as far as all its users allow: `iota -> add`
 *    where add sits at level 2 puts the iota at level 2, in add's cluster,
 *    rather than sending its value from cluster 0. Instructions read only
 *    by the host stay where they are. Every edge rule above still holds,
 *    and the longest chain stays put, so the argument still holds.
 *
 *      p = parameter(0)                         level / pass
 *      a = add(p, p)                            0
 *      h = custom-call(a) "tessel_print"        pass 1
 *      b = multiply(a, h)                       1   (a -> b directly and
 *      ROOT t = tuple(b)                             a -> h -> b: two clusters)
 *
 * 2. Formation. Every merge of an instruction into its cluster goes
 *    through CluCycles (cycles.c), the computation's graph contracted as
 *    clusters grow, whose dynamic topological order refuses any merge that
 *    would close a cycle. By the argument above none is refused; if one
 *    were, that is a bug (IR_EINTERNAL), never a wrong program. The graph's
 *    nodes are numbered in a topological order of the planned contraction,
 *    each cluster's instructions side by side, so merges never reorder and
 *    their cycle checks stay local (linear overall). The contracted graph
 *    then gives the host program's order: Kahn's algorithm over its nodes
 *    (host instructions and clusters), the ready node whose first
 *    instruction comes first in the source's topological order going first.
 *
 * 3. Inputs and outputs. A cluster's inputs are the values its members
 *    read from outside it (small constants aside, they are cloned), its
 *    outputs the members read outside it (by host instructions, other
 *    clusters or as the root); both ordered by instruction index.
 *
 * Clusters are then numbered in the order the host program runs them: a
 * computation's in its unit order, with those of a computation its host
 * control flow runs numbered where that instruction runs.
 */
#include "cluster_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* 1. placement, users and levels                                      */
/* ------------------------------------------------------------------ */

static IrStatus build_users(Extract *x, HostComp *h)
{
    const IrComputation *c = clu_src(x, h);
    int32_t total = 0;
    if (!(h->uoff = clu_salloc(x, h->n + 1, sizeof(int32_t))))
        return clu_nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        for (int32_t k = 0; k < clu_npred(&c->instr[i]); k++)
            h->uoff[clu_pred_at(&c->instr[i], k) + 1]++;
    for (int32_t i = 0; i < h->n; i++)
        h->uoff[i + 1] += h->uoff[i];
    total = h->uoff[h->n];
    int32_t *fill = clu_salloc(x, h->n, sizeof(int32_t));
    h->use = clu_salloc(x, total, sizeof(int32_t));
    h->uctrl = clu_salloc(x, total, 1);
    if (!fill || !h->use || !h->uctrl)
        return clu_nomem(x);
    for (int32_t i = 0; i < h->n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < clu_npred(ins); k++) {
            int32_t u = clu_pred_at(ins, k);
            int32_t at = h->uoff[u] + fill[u]++;
            h->use[at] = i;
            h->uctrl[at] = k >= ins->nopnd;
        }
    }
    return IR_OK;
}

/* Forward: levels of device work, passes of host work (file comment). */
static void levels_forward(const IrComputation *c, HostComp *h)
{
    for (int32_t p = 0; p < h->n; p++) {
        int32_t i = h->order[p];
        if (h->place[i] == CLU_CONST)
            continue;
        int32_t m = 0, up = clu_is_device(h, i) ? 0 : 1;
        for (int32_t k = 0; k < clu_npred(&c->instr[i]); k++) {
            int32_t u = clu_pred_at(&c->instr[i], k);
            if (h->place[u] == CLU_CONST)
                continue;
            int32_t v = clu_is_device(h, u) ? h->lv[u] + up : h->lv[u];
            if (v > m)
                m = v;
        }
        h->lv[i] = m;
    }
}

/* Backward: a device instruction with device users moves up to the
 * highest level its users allow (lim of a host instruction: the lowest
 * level of device work it feeds, directly or through host work). */
static bool levels_backward(Extract *x, HostComp *h)
{
    int32_t *lim = clu_salloc(x, h->n, sizeof(int32_t));
    if (!lim)
        return false;
    for (int32_t p = h->n - 1; p >= 0; p--) {
        int32_t i = h->order[p];
        if (h->place[i] == CLU_CONST)
            continue;
        /* Device work must stay strictly below what a host user feeds. */
        int32_t hi = INT32_MAX, cross = clu_is_device(h, i) ? 1 : 0;
        bool dev_user = false;
        for (int32_t k = h->uoff[i]; k < h->uoff[i + 1]; k++) {
            int32_t u = h->use[k];
            if (clu_is_device(h, u)) {
                dev_user = true;
                if (h->lv[u] < hi)
                    hi = h->lv[u];
            } else if (lim[u] != INT32_MAX && lim[u] - cross < hi) {
                hi = lim[u] - cross;
            }
        }
        if (!clu_is_device(h, i))
            lim[i] = hi;
        else if (dev_user && hi > h->lv[i])
            h->lv[i] = hi;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* 2. formation                                                        */
/* ------------------------------------------------------------------ */

/* Cluster membership from levels: clusters are numbered locally by their
 * first instruction. */
static IrStatus make_clusters(Extract *x, HostComp *h, int32_t maxlv)
{
    int32_t *of_level = clu_salloc(x, maxlv + 1, sizeof(int32_t));
    if (!of_level || !(h->cls = clu_salloc(x, h->n, sizeof(Clu))))
        return clu_nomem(x);
    for (int32_t l = 0; l <= maxlv; l++)
        of_level[l] = -1;
    for (int32_t p = 0; p < h->n; p++) {
        int32_t i = h->order[p];
        h->cl[i] = -1;
        if (!clu_is_device(h, i))
            continue;
        int32_t l = h->lv[i];
        if (of_level[l] < 0) {
            of_level[l] = h->ncl;
            h->cls[h->ncl].first = p;
            h->cls[h->ncl].level = l;
            h->cls[h->ncl++].number = -1;
        }
        h->cl[i] = of_level[l];
        h->cls[h->cl[i]].nmem++;
    }
    for (int32_t k = 0; k < h->ncl; k++) {
        if (!(h->cls[k].mem = clu_salloc(x, h->cls[k].nmem, sizeof(int32_t))))
            return clu_nomem(x);
        h->cls[k].nmem = 0;
    }
    for (int32_t p = 0; p < h->n; p++) {
        int32_t i = h->order[p];
        if (clu_is_device(h, i))
            h->cls[h->cl[i]].mem[h->cls[h->cl[i]].nmem++] = i;
    }
    return IR_OK;
}

/* The unit of instruction i in the planned contraction: itself when host
 * work, n + its cluster when device work. */
static int32_t plan_unit(const HostComp *h, int32_t i)
{
    return clu_is_device(h, i) ? h->n + h->cl[i] : i;
}

/* The key that orders units: the topological position of the unit's
 * first instruction (distinct for distinct units). */
static int32_t plan_key(const HostComp *h, int32_t unit)
{
    return unit < h->n ? h->pos[unit] : h->cls[unit - h->n].first;
}

/* Graph node ids. The planned contraction is acyclic (file comment), so
 * Kahn's algorithm over its units gives a topological order in which each
 * cluster's instructions sit side by side; numbering the graph's nodes in
 * that order makes every later merge free of reordering (a cluster's
 * predecessors all rank below it, its successors above) and its cycle
 * check cheap (no live node ranks between two members). Constants, outside
 * the graph, come last. */
static IrStatus plan_nodes(Extract *x, HostComp *h)
{
    const IrComputation *c = clu_src(x, h);
    int32_t n = h->n, nu = n + h->ncl, next = 0;
    int32_t *indeg = clu_salloc(x, nu, sizeof(int32_t));
    int32_t *unit_at = clu_salloc(x, n, sizeof(int32_t)); /* key -> unit */
    IrHeap heap = {clu_salloc(x, nu, sizeof(int64_t)), 0};
    h->node = clu_salloc(x, n, sizeof(int32_t));
    if (!indeg || !unit_at || !heap.k || !h->node)
        return clu_nomem(x);
    for (int32_t i = 0; i < n; i++) {
        if (h->place[i] == CLU_CONST)
            continue;
        unit_at[plan_key(h, plan_unit(h, i))] = plan_unit(h, i);
        for (int32_t k = 0; k < clu_npred(&c->instr[i]); k++) {
            int32_t u = clu_pred_at(&c->instr[i], k);
            if (h->place[u] != CLU_CONST && plan_unit(h, u) != plan_unit(h, i))
                indeg[plan_unit(h, i)]++;
        }
    }
    for (int32_t p = 0; p < n; p++) {
        int32_t i = h->order[p];
        if (h->place[i] != CLU_CONST && indeg[plan_unit(h, i)] == 0 &&
            plan_key(h, plan_unit(h, i)) == p)
            ir_heap_push(&heap, p);
    }
    while (heap.n > 0) {
        int32_t un = unit_at[ir_heap_pop(&heap)];
        const int32_t *mem = un < n ? &un : h->cls[un - n].mem;
        int32_t nmem = un < n ? 1 : h->cls[un - n].nmem;
        for (int32_t j = 0; j < nmem; j++) {
            int32_t i = mem[j];
            h->node[i] = next++;
            for (int32_t k = h->uoff[i]; k < h->uoff[i + 1]; k++) {
                int32_t w = plan_unit(h, h->use[k]);
                if (w != un && --indeg[w] == 0)
                    ir_heap_push(&heap, plan_key(h, w));
            }
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (h->place[i] == CLU_CONST)
            h->node[i] = next++;
    return next == n ? IR_OK : clu_internal(x, "the planned clusters form a cycle", c->name);
}

static IrStatus build_graph(Extract *x, HostComp *h, CluCycles *g)
{
    const IrComputation *c = clu_src(x, h);
    for (int32_t i = 0; i < h->n; i++) {
        const IrInstr *ins = &c->instr[i];
        if (h->place[i] == CLU_CONST)
            continue;
        for (int32_t k = 0; k < clu_npred(ins); k++) {
            int32_t u = clu_pred_at(ins, k);
            if (h->place[u] == CLU_CONST)
                continue;
            int r = clu_cycles_insert_edge(g, h->node[u], h->node[i]);
            if (r < 0)
                return clu_nomem(x);
            if (r == 0)
                return clu_internal(x, "an edge closes a cycle", c->name);
        }
    }
    return IR_OK;
}

/* Merge every device instruction into its cluster, member after member.
 * node_of[k] is cluster k's current graph node. */
static IrStatus merge_clusters(Extract *x, HostComp *h, CluCycles *g, int32_t *node_of)
{
    for (int32_t k = 0; k < h->ncl; k++) {
        Clu *cl = &h->cls[k];
        node_of[k] = h->node[cl->mem[0]];
        for (int32_t j = 1; j < cl->nmem; j++) {
            int32_t s = clu_cycles_merge(g, node_of[k], h->node[cl->mem[j]]);
            if (s == -2)
                return clu_nomem(x);
            if (s < 0)
                return clu_internal(x, "a merge would close a cycle", clu_src(x, h)->name);
            node_of[k] = s;
        }
    }
    return IR_OK;
}

/* Host program order: Kahn's algorithm over the contracted graph, keyed
 * like the plan (the topological position of each node's first
 * instruction). */
static IrStatus order_units(Extract *x, HostComp *h, CluCycles *g, const int32_t *node_of)
{
    int32_t n = h->n, expect = 0;
    int32_t *node_at = clu_salloc(x, n, sizeof(int32_t)); /* key -> node */
    int32_t *key = clu_salloc(x, n, sizeof(int32_t));     /* node -> key, -1: not a unit */
    int32_t *unit = clu_salloc(x, n, sizeof(int32_t));    /* node -> h->unit entry */
    int32_t *indeg = clu_salloc(x, n, sizeof(int32_t));
    IrHeap heap = {clu_salloc(x, n, sizeof(int64_t)), 0};
    h->unit = clu_salloc(x, n, sizeof(int32_t));
    if (!node_at || !key || !unit || !indeg || !heap.k || !h->unit)
        return clu_nomem(x);
    for (int32_t v = 0; v < n; v++)
        key[v] = -1;
    for (int32_t i = 0; i < n; i++)
        if (h->place[i] != CLU_CONST && !clu_is_device(h, i)) {
            key[h->node[i]] = h->pos[i];
            unit[h->node[i]] = i;
        }
    for (int32_t k = 0; k < h->ncl; k++) {
        key[node_of[k]] = h->cls[k].first;
        unit[node_of[k]] = -(k + 1);
    }
    for (int32_t v = 0; v < n; v++) {
        if (key[v] < 0)
            continue;
        expect++;
        node_at[key[v]] = v;
        clu_cycles_pred(g, v, &indeg[v]);
        if (indeg[v] == 0)
            ir_heap_push(&heap, key[v]);
    }
    while (heap.n > 0) {
        int32_t v = node_at[ir_heap_pop(&heap)], ns;
        h->unit[h->nunit++] = unit[v];
        const int32_t *succ = clu_cycles_succ(g, v, &ns);
        for (int32_t k = 0; k < ns; k++)
            if (--indeg[succ[k]] == 0)
                ir_heap_push(&heap, key[succ[k]]);
    }
    if (h->nunit != expect)
        return clu_internal(x, "the contracted graph has a cycle", clu_src(x, h)->name);
    return IR_OK;
}

static IrStatus form(Extract *x, HostComp *h)
{
    int32_t maxlv = 0;
    for (int32_t i = 0; i < h->n; i++)
        if (clu_is_device(h, i) && h->lv[i] > maxlv)
            maxlv = h->lv[i];
    IrStatus st = make_clusters(x, h, maxlv);
    if (st != IR_OK || (st = plan_nodes(x, h)) != IR_OK)
        return st;
    int32_t *node_of = clu_salloc(x, h->ncl, sizeof(int32_t));
    CluCycles *g = node_of ? clu_cycles_new(h->n) : NULL;
    if (!g)
        return clu_nomem(x);
    if ((st = build_graph(x, h, g)) == IR_OK && (st = merge_clusters(x, h, g, node_of)) == IR_OK)
        st = order_units(x, h, g, node_of);
    clu_cycles_free(g);
    return st;
}

/* ------------------------------------------------------------------ */
/* 3. inputs and outputs; the driver                                   */
/* ------------------------------------------------------------------ */

/* Values flowing in (operands outside the cluster, constants aside),
 * constants to clone, values flowing out (read outside, or the root). */
static IrStatus cluster_io(Extract *x, HostComp *h, int32_t k, int32_t *mark, int32_t *buf,
                           int32_t *cbuf)
{
    const IrComputation *c = clu_src(x, h);
    Clu *cl = &h->cls[k];
    int32_t nin = 0, nc = 0, nout = 0;
    for (int32_t j = 0; j < cl->nmem; j++) {
        const IrInstr *ins = &c->instr[cl->mem[j]];
        for (int32_t o = 0; o < ins->nopnd; o++) {
            int32_t u = ins->opnd[o];
            if (mark[u] == k || h->cl[u] == k)
                continue;
            mark[u] = k;
            if (h->place[u] == CLU_CONST)
                cbuf[nc++] = u;
            else
                buf[nin++] = u;
        }
    }
    qsort(buf, (size_t)nin, sizeof *buf, clu_cmp_i32);
    cl->in = clu_salloc(x, nin, sizeof(int32_t));
    cl->consts = clu_salloc(x, nc, sizeof(int32_t));
    if (!cl->in || !cl->consts)
        return clu_nomem(x);
    memcpy(cl->in, buf, (size_t)nin * sizeof *buf);
    memcpy(cl->consts, cbuf, (size_t)nc * sizeof *cbuf);
    cl->nin = nin;
    cl->nconst = nc;
    for (int32_t j = 0; j < cl->nmem; j++) {
        int32_t m = cl->mem[j];
        bool out = m == c->root;
        for (int32_t u = h->uoff[m]; u < h->uoff[m + 1] && !out; u++)
            out = !h->uctrl[u] && h->cl[h->use[u]] != k;
        if (out)
            buf[nout++] = m;
    }
    qsort(buf, (size_t)nout, sizeof *buf, clu_cmp_i32);
    if (!(cl->outv = clu_salloc(x, nout, sizeof(int32_t))))
        return clu_nomem(x);
    memcpy(cl->outv, buf, (size_t)nout * sizeof *buf);
    cl->nout = nout;
    return IR_OK;
}

static IrStatus all_io(Extract *x, HostComp *h)
{
    int32_t *mark = clu_salloc(x, h->n, sizeof(int32_t));
    int32_t *buf = clu_salloc(x, h->n, sizeof(int32_t));
    int32_t *cbuf = clu_salloc(x, h->n, sizeof(int32_t));
    if (!mark || !buf || !cbuf)
        return clu_nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        mark[i] = -1;
    for (int32_t k = 0; k < h->ncl; k++) {
        IrStatus st = cluster_io(x, h, k, mark, buf, cbuf);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* Analyse the computations the host control flow of h runs. */
static IrStatus analyze_callees(Extract *x, HostComp *h, int depth)
{
    const IrComputation *c = clu_src(x, h);
    for (int32_t u = 0; u < h->nunit; u++) {
        if (h->unit[u] < 0 || h->place[h->unit[u]] != CLU_HOST_FLOW)
            continue;
        const IrInstr *ins = &c->instr[h->unit[u]];
        for (int32_t k = 0; k < ins->ncalled; k++) {
            IrStatus st = clu_analyze(x, ins->called[k], depth + 1);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

IrStatus clu_analyze(Extract *x, int32_t ci, int depth)
{
    if (x->hc[ci])
        return IR_OK;
    const IrComputation *c = x->in->comp[ci];
    if (depth > CLU_MAX_NESTING)
        return ir_error(x->d, IR_EUNSUPPORTED, x->in->file, x->in->src, c->pos,
                        "host control flow nested more than %d deep (computation %s)",
                        CLU_MAX_NESTING, c->name);
    HostComp *h = clu_salloc(x, 1, sizeof *h);
    if (!h)
        return clu_nomem(x);
    x->hc[ci] = h;
    h->src = ci;
    h->n = c->ninstr;
    h->outc = -1;
    h->place = clu_salloc(x, h->n, sizeof(CluPlace));
    h->pos = clu_salloc(x, h->n, sizeof(int32_t));
    h->lv = clu_salloc(x, h->n, sizeof(int32_t));
    h->cl = clu_salloc(x, h->n, sizeof(int32_t));
    h->order = clu_salloc(x, h->n, sizeof(int32_t));
    if (!h->place || !h->pos || !h->lv || !h->cl || !h->order)
        return clu_nomem(x);
    int32_t *order = NULL;
    IrStatus st = clu_place(x->in, ci, x->has_host, x->targets, x->max_const, h->place, x->d);
    if (st == IR_OK && (st = ir_topo_order(x->in, c, &order, x->d)) == IR_OK) {
        memcpy(h->order, order, (size_t)h->n * sizeof *order);
        for (int32_t p = 0; p < h->n; p++)
            h->pos[h->order[p]] = p;
    }
    ts_free(order);
    if (st != IR_OK || (st = build_users(x, h)) != IR_OK)
        return st;
    levels_forward(c, h);
    if (!levels_backward(x, h))
        return clu_nomem(x);
    if ((st = form(x, h)) != IR_OK || (st = all_io(x, h)) != IR_OK)
        return st;
    return analyze_callees(x, h, depth);
}

IrStatus clu_number(Extract *x, HostComp *h)
{
    const IrComputation *c = clu_src(x, h);
    h->numbered = true;
    for (int32_t u = 0; u < h->nunit; u++) {
        int32_t v = h->unit[u];
        if (v < 0) {
            CluRef *r = clu_vec_push(&x->all);
            if (!r)
                return clu_nomem(x);
            h->cls[-v - 1].number = x->all.n - 1;
            r->h = h;
            r->k = -v - 1;
            continue;
        }
        if (h->place[v] != CLU_HOST_FLOW)
            continue;
        for (int32_t k = 0; k < c->instr[v].ncalled; k++) {
            HostComp *callee = x->hc[c->instr[v].called[k]];
            IrStatus st = callee && !callee->numbered ? clu_number(x, callee) : IR_OK;
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}
