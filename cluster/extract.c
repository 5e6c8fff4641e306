/*
 * extract.c: cluster formation and outlining: the host program and its
 * device computations.
 *
 * For each host computation (the entry, then every computation host
 * control flow runs), in three steps.
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
 *    on a cycle. So the level sets are the fewest clusters possible, and
 *    each is as large as possible.
 *
 *    Then, walking backwards, an instruction moves up towards the
 *    instructions that read it (ALAP), as far as its device users allow,
 *    when it has device users: `iota -> add` where add sits at level 2
 *    puts the iota at level 2, in add's cluster, rather than sending its
 *    value from cluster 0. Instructions read only by the host stay where
 *    they are. Every edge rule above still holds.
 *
 *      p = parameter(0)               level / pass
 *      a = add(p, p)                  0
 *      h = custom-call(a) "tessel_print"   pass 1
 *      b = multiply(a, h)             1          (a -> b directly and
 *      ROOT t = tuple(b)                          a -> h -> b: two clusters)
 *
 * 2. Formation. Every merge of a device instruction into its level's
 *    cluster goes through CluCycles (cycles.c): the graph of the
 *    computation, contracted as clusters grow, whose dynamic topological
 *    order refuses any merge that would close a cycle. By the argument above
 *    no merge is refused; if one were, that is a bug (IR_EINTERNAL), never
 *    a wrong program. The contracted graph then gives the host program's
 *    order: Kahn's algorithm over its nodes (host instructions and
 *    clusters), the ready node whose first instruction comes first in the
 *    source's topological order going first.
 *
 * 3. Outlining. Each cluster becomes `cluster_N`: one parameter per value
 *    flowing in (in the order of the defining instruction's index), its
 *    instructions in topological order with small constants cloned in
 *    front of their first user, and a root tuple of the values flowing out
 *    (read by host instructions, by other clusters or by the root; same
 *    order). The host computation calls it with
 *    `call(...), to_apply=cluster_N, frontend_attributes={_tessel_cluster="N"}`
 *    and takes the results apart with get-tuple-element instructions named
 *    after the values they stand for. Control edges between a cluster and
 *    the rest become control edges of its call. Shardings: parameters take
 *    the sharding of the value they receive; the root tuple and the call a
 *    flat tuple sharding of the values flowing out (when all have one).
 *
 * Clusters are numbered in the order the host program runs them; the
 * output module lists the cluster computations (each after the
 * computations it calls), then every other computation the source has,
 * then the host computations, callees first and the entry last.
 */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host control flow nested deeper than this is refused (the passes
 * recurse once per level of nesting). */
#define MAX_NESTING 256

/* ------------------------------------------------------------------ */
/* small containers                                                    */
/* ------------------------------------------------------------------ */

/* A set of borrowed strings (open addressing, at most half full). */
typedef struct StrSet {
    const char **slot;
    size_t cap, n;
} StrSet;

static size_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

static bool strset_has(const StrSet *s, const char *k)
{
    if (!s->cap)
        return false;
    for (size_t i = str_hash(k) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slot[i], k) == 0)
            return true;
    return false;
}

static bool strset_add(StrSet *s, const char *k)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        const char **slot = ts_calloc(cap, sizeof *slot);
        if (!slot)
            return false;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t j = str_hash(s->slot[i]) & (cap - 1);
                while (slot[j])
                    j = (j + 1) & (cap - 1);
                slot[j] = s->slot[i];
            }
        ts_free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t i = str_hash(k) & (s->cap - 1);
    for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slot[i], k) == 0)
            return true;
    s->slot[i] = k;
    s->n++;
    return true;
}

/* A growable array of fixed-size records (ts_realloc). */
typedef struct Vec {
    void *v;
    int32_t n, cap;
    size_t elem;
} Vec;

static void *vec_push(Vec *v)
{
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 16;
        void *nv = ts_realloc(v->v, (size_t)cap * v->elem);
        if (!nv)
            return NULL;
        v->v = nv;
        v->cap = cap;
    }
    void *p = (char *)v->v + (size_t)v->n++ * v->elem;
    memset(p, 0, v->elem);
    return p;
}

/* A binary min-heap of distinct int32 keys. */
typedef struct Heap {
    int32_t *v;
    int32_t n;
} Heap;

static void heap_push(Heap *h, int32_t x)
{
    int32_t i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static int32_t heap_pop(Heap *h)
{
    int32_t top = h->v[0], x = h->v[--h->n], i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = x;
    return top;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------ */
/* the state of one extraction                                         */
/* ------------------------------------------------------------------ */

/* A cluster of one host computation. Instruction indices are the source
 * computation's. */
typedef struct Clu {
    int32_t level;
    int32_t first;           /* topological position of its first instruction */
    int32_t nmem, nin, nout, nconst;
    int32_t *mem;            /* members, topological order */
    int32_t *in;             /* values flowing in, by index */
    int32_t *outv;           /* values flowing out, by index */
    int32_t *consts;         /* small constants cloned into it */
    int32_t number;          /* global number, -1 until numbered */
    int32_t comp;            /* its computation in the output */
    int32_t call;            /* its call in the host computation */
} Clu;

/* The analysis of one host computation. Arrays of n entries are indexed
 * by source instruction index unless named by position. */
typedef struct HostComp {
    int32_t src, n;
    CluPlace *place;
    int32_t *order, *pos;    /* topological order and its inverse */
    int32_t *node, *inv;     /* graph node of an instruction and its inverse */
    int32_t *uoff, *use;     /* users (data and control) in CSR form */
    uint8_t *uctrl;          /* use[k] is a control successor */
    int32_t *lv;             /* device: level; host: pass */
    int32_t *cl;             /* cluster of a device instruction, else -1 */
    int32_t ncl;
    Clu *cls;
    int32_t nunit;
    int32_t *unit;           /* host program order: >= 0 a host instruction, -(k+1) cluster k */
    bool numbered;
    int32_t outc;            /* its computation in the output, -1 until emitted */
    int32_t *vmap;           /* host instruction -> index in the output computation */
    int32_t *gteof;          /* device value read outside its cluster -> its get-tuple-element */
    int32_t *lmap;           /* scratch of the cluster being outlined */
    uint8_t *cut_host;       /* value already recorded as cut towards the host */
} HostComp;

typedef struct CluRef {
    HostComp *h;
    int32_t k;
} CluRef;

typedef struct HostRec {
    int32_t comp, instr;
    CluPlace place;
} HostRec;

typedef struct CutRec {
    int32_t comp, instr, from, to;
} CutRec;

typedef struct Extract {
    const IrModule *in;
    IrModule *out;
    const char *const *targets;
    int64_t max_const;
    IrDiag *d;
    IrArena *scratch;        /* everything of the analysis, freed at once */
    bool *has_host;
    HostComp **hc;           /* per source computation; NULL: not run as host code */
    int32_t *devmap;         /* ir_clone_computation map for device callees */
    StrSet srcnames;         /* every name of the source, which new names avoid */
    Vec all;                 /* CluRef in number order */
    Vec hostrec, cutrec;
    IrStatus st;             /* the first error (also when d is NULL) */
} Extract;

static IrStatus nomem(Extract *x)
{
    if (x->st == IR_OK)
        x->st = IR_ENOMEM;
    return ir_error(x->d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

static IrStatus internal(Extract *x, const char *what, const char *comp)
{
    if (x->st == IR_OK)
        x->st = IR_EINTERNAL;
    return ir_error(x->d, IR_EINTERNAL, x->in->file, NULL, (IrPos){0, 0},
                    "cluster extraction: %s in computation %s", what, comp);
}

/* The status of the error already recorded by a helper that returned -1. */
static IrStatus failed(const Extract *x)
{
    return x->st != IR_OK ? x->st : IR_ENOMEM;
}

static void *salloc(Extract *x, int32_t n, size_t elem)
{
    return ir_alloc_array(x->scratch, n > 0 ? (size_t)n : 1, elem);
}

static const IrComputation *src_comp(const Extract *x, const HostComp *h)
{
    return x->in->comp[h->src];
}

static bool is_device(const HostComp *h, int32_t i)
{
    return h->place[i] == CLU_DEVICE;
}

/* Predecessors of instruction i: operands, then control predecessors. */
static int32_t npred(const IrInstr *ins)
{
    return ins->nopnd + ins->a.control_predecessors.n;
}

static int32_t pred_at(const IrInstr *ins, int32_t k)
{
    return k < ins->nopnd ? ins->opnd[k] : (int32_t)ins->a.control_predecessors.v[k - ins->nopnd];
}

/* ------------------------------------------------------------------ */
/* 1. placement, users and levels                                      */
/* ------------------------------------------------------------------ */

static IrStatus build_users(Extract *x, HostComp *h)
{
    const IrComputation *c = src_comp(x, h);
    int32_t total = 0;
    if (!(h->uoff = salloc(x, h->n + 1, sizeof(int32_t))))
        return nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        for (int32_t k = 0; k < npred(&c->instr[i]); k++)
            h->uoff[pred_at(&c->instr[i], k) + 1]++;
    for (int32_t i = 0; i < h->n; i++)
        h->uoff[i + 1] += h->uoff[i];
    total = h->uoff[h->n];
    int32_t *fill = salloc(x, h->n, sizeof(int32_t));
    h->use = salloc(x, total, sizeof(int32_t));
    h->uctrl = salloc(x, total, 1);
    if (!fill || !h->use || !h->uctrl)
        return nomem(x);
    for (int32_t i = 0; i < h->n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < npred(ins); k++) {
            int32_t u = pred_at(ins, k);
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
        int32_t m = 0, up = is_device(h, i) ? 0 : 1;
        for (int32_t k = 0; k < npred(&c->instr[i]); k++) {
            int32_t u = pred_at(&c->instr[i], k);
            if (h->place[u] == CLU_CONST)
                continue;
            int32_t v = is_device(h, u) ? h->lv[u] + up : h->lv[u];
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
    int32_t *lim = salloc(x, h->n, sizeof(int32_t));
    if (!lim)
        return false;
    for (int32_t p = h->n - 1; p >= 0; p--) {
        int32_t i = h->order[p];
        if (h->place[i] == CLU_CONST)
            continue;
        int32_t hi = INT32_MAX;
        bool dev_user = false;
        for (int32_t k = h->uoff[i]; k < h->uoff[i + 1]; k++) {
            int32_t u = h->use[k];
            if (is_device(h, u)) {
                dev_user = true;
                if (h->lv[u] < hi)
                    hi = h->lv[u];
            } else if (lim[u] != INT32_MAX && lim[u] - (is_device(h, i) ? 1 : 0) < hi) {
                hi = lim[u] - (is_device(h, i) ? 1 : 0);
            }
        }
        if (!is_device(h, i))
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
    int32_t *of_level = salloc(x, maxlv + 1, sizeof(int32_t));
    if (!of_level || !(h->cls = salloc(x, h->n, sizeof(Clu))))
        return nomem(x);
    for (int32_t l = 0; l <= maxlv; l++)
        of_level[l] = -1;
    for (int32_t p = 0; p < h->n; p++) {
        int32_t i = h->order[p];
        h->cl[i] = -1;
        if (!is_device(h, i))
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
        if (!(h->cls[k].mem = salloc(x, h->cls[k].nmem, sizeof(int32_t))))
            return nomem(x);
        h->cls[k].nmem = 0;
    }
    for (int32_t p = 0; p < h->n; p++) {
        int32_t i = h->order[p];
        if (is_device(h, i))
            h->cls[h->cl[i]].mem[h->cls[h->cl[i]].nmem++] = i;
    }
    return IR_OK;
}

/* The unit of instruction i in the planned contraction: itself when host
 * work, n + its cluster when device work. */
static int32_t plan_unit(const HostComp *h, int32_t i)
{
    return is_device(h, i) ? h->n + h->cl[i] : i;
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
    const IrComputation *c = src_comp(x, h);
    int32_t n = h->n, nu = n + h->ncl, next = 0;
    int32_t *indeg = salloc(x, nu, sizeof(int32_t));
    int32_t *unit_at = salloc(x, n, sizeof(int32_t)); /* key -> unit */
    Heap heap = {salloc(x, nu, sizeof(int32_t)), 0};
    h->node = salloc(x, n, sizeof(int32_t));
    h->inv = salloc(x, n, sizeof(int32_t));
    if (!indeg || !unit_at || !heap.v || !h->node || !h->inv)
        return nomem(x);
    for (int32_t i = 0; i < n; i++) {
        if (h->place[i] == CLU_CONST)
            continue;
        unit_at[plan_key(h, plan_unit(h, i))] = plan_unit(h, i);
        for (int32_t k = 0; k < npred(&c->instr[i]); k++) {
            int32_t u = pred_at(&c->instr[i], k);
            if (h->place[u] != CLU_CONST && plan_unit(h, u) != plan_unit(h, i))
                indeg[plan_unit(h, i)]++;
        }
    }
    for (int32_t p = 0; p < n; p++) {
        int32_t i = h->order[p];
        if (h->place[i] != CLU_CONST && indeg[plan_unit(h, i)] == 0 &&
            plan_key(h, plan_unit(h, i)) == p)
            heap_push(&heap, p);
    }
    while (heap.n > 0) {
        int32_t un = unit_at[heap_pop(&heap)];
        const int32_t *mem = un < n ? &un : h->cls[un - n].mem;
        int32_t nmem = un < n ? 1 : h->cls[un - n].nmem;
        for (int32_t j = 0; j < nmem; j++) {
            int32_t i = mem[j];
            h->inv[next] = i;
            h->node[i] = next++;
            for (int32_t k = h->uoff[i]; k < h->uoff[i + 1]; k++) {
                int32_t w = plan_unit(h, h->use[k]);
                if (w != un && --indeg[w] == 0)
                    heap_push(&heap, plan_key(h, w));
            }
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (h->place[i] == CLU_CONST) {
            h->inv[next] = i;
            h->node[i] = next++;
        }
    return next == n ? IR_OK : internal(x, "the planned clusters form a cycle", c->name);
}

static IrStatus build_graph(Extract *x, HostComp *h, CluCycles *g)
{
    const IrComputation *c = src_comp(x, h);
    for (int32_t i = 0; i < h->n; i++) {
        const IrInstr *ins = &c->instr[i];
        if (h->place[i] == CLU_CONST)
            continue;
        for (int32_t k = 0; k < npred(ins); k++) {
            int32_t u = pred_at(ins, k);
            if (h->place[u] == CLU_CONST)
                continue;
            int r = clu_cycles_insert_edge(g, h->node[u], h->node[i]);
            if (r < 0)
                return nomem(x);
            if (r == 0)
                return internal(x, "an edge closes a cycle", c->name);
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
                return nomem(x);
            if (s < 0)
                return internal(x, "a merge would close a cycle", src_comp(x, h)->name);
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
    int32_t *node_at = salloc(x, n, sizeof(int32_t)); /* key -> node */
    int32_t *key = salloc(x, n, sizeof(int32_t));     /* node -> key, -1: not a unit */
    int32_t *unit = salloc(x, n, sizeof(int32_t));    /* node -> h->unit entry */
    int32_t *indeg = salloc(x, n, sizeof(int32_t));
    Heap heap = {salloc(x, n, sizeof(int32_t)), 0};
    h->unit = salloc(x, n, sizeof(int32_t));
    if (!node_at || !key || !unit || !indeg || !heap.v || !h->unit)
        return nomem(x);
    for (int32_t v = 0; v < n; v++)
        key[v] = -1;
    for (int32_t i = 0; i < n; i++)
        if (h->place[i] != CLU_CONST && !is_device(h, i)) {
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
            heap_push(&heap, key[v]);
    }
    while (heap.n > 0) {
        int32_t v = node_at[heap_pop(&heap)], ns;
        h->unit[h->nunit++] = unit[v];
        const int32_t *succ = clu_cycles_succ(g, v, &ns);
        for (int32_t k = 0; k < ns; k++)
            if (--indeg[succ[k]] == 0)
                heap_push(&heap, key[succ[k]]);
    }
    if (h->nunit != expect)
        return internal(x, "the contracted graph has a cycle", src_comp(x, h)->name);
    return IR_OK;
}

static IrStatus form(Extract *x, HostComp *h)
{
    int32_t maxlv = 0;
    for (int32_t i = 0; i < h->n; i++)
        if (is_device(h, i) && h->lv[i] > maxlv)
            maxlv = h->lv[i];
    IrStatus st = make_clusters(x, h, maxlv);
    if (st != IR_OK || (st = plan_nodes(x, h)) != IR_OK)
        return st;
    int32_t *node_of = salloc(x, h->ncl, sizeof(int32_t));
    CluCycles *g = node_of ? clu_cycles_new(h->n) : NULL;
    if (!g)
        return nomem(x);
    if ((st = build_graph(x, h, g)) == IR_OK && (st = merge_clusters(x, h, g, node_of)) == IR_OK)
        st = order_units(x, h, g, node_of);
    clu_cycles_free(g);
    return st;
}

/* Values flowing in (operands outside the cluster, constants aside),
 * constants to clone, values flowing out (read outside, or the root). */
static IrStatus cluster_io(Extract *x, HostComp *h, int32_t k, int32_t *mark, int32_t *buf,
                           int32_t *cbuf)
{
    const IrComputation *c = src_comp(x, h);
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
    qsort(buf, (size_t)nin, sizeof *buf, cmp_i32);
    cl->in = salloc(x, nin, sizeof(int32_t));
    cl->consts = salloc(x, nc, sizeof(int32_t));
    if (!cl->in || !cl->consts)
        return nomem(x);
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
    qsort(buf, (size_t)nout, sizeof *buf, cmp_i32);
    if (!(cl->outv = salloc(x, nout, sizeof(int32_t))))
        return nomem(x);
    memcpy(cl->outv, buf, (size_t)nout * sizeof *buf);
    cl->nout = nout;
    return IR_OK;
}

static IrStatus all_io(Extract *x, HostComp *h)
{
    int32_t *mark = salloc(x, h->n, sizeof(int32_t));
    int32_t *buf = salloc(x, h->n, sizeof(int32_t));
    int32_t *cbuf = salloc(x, h->n, sizeof(int32_t));
    if (!mark || !buf || !cbuf)
        return nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        mark[i] = -1;
    for (int32_t k = 0; k < h->ncl; k++) {
        IrStatus st = cluster_io(x, h, k, mark, buf, cbuf);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

static IrStatus analyze(Extract *x, int32_t ci, int depth);

/* Analyse the computations the host control flow of h runs. */
static IrStatus analyze_callees(Extract *x, HostComp *h, int depth)
{
    const IrComputation *c = src_comp(x, h);
    for (int32_t u = 0; u < h->nunit; u++) {
        if (h->unit[u] < 0 || h->place[h->unit[u]] != CLU_HOST_FLOW)
            continue;
        const IrInstr *ins = &c->instr[h->unit[u]];
        for (int32_t k = 0; k < ins->ncalled; k++) {
            IrStatus st = analyze(x, ins->called[k], depth + 1);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

static IrStatus analyze(Extract *x, int32_t ci, int depth)
{
    if (x->hc[ci])
        return IR_OK;
    const IrComputation *c = x->in->comp[ci];
    if (depth > MAX_NESTING)
        return ir_error(x->d, IR_EUNSUPPORTED, x->in->file, x->in->src, c->pos,
                        "host control flow nested more than %d deep (computation %s)",
                        MAX_NESTING, c->name);
    HostComp *h = salloc(x, 1, sizeof *h);
    if (!h)
        return nomem(x);
    x->hc[ci] = h;
    h->src = ci;
    h->n = c->ninstr;
    h->outc = -1;
    h->place = salloc(x, h->n, sizeof(CluPlace));
    h->pos = salloc(x, h->n, sizeof(int32_t));
    h->lv = salloc(x, h->n, sizeof(int32_t));
    h->cl = salloc(x, h->n, sizeof(int32_t));
    h->order = salloc(x, h->n, sizeof(int32_t));
    if (!h->place || !h->pos || !h->lv || !h->cl || !h->order)
        return nomem(x);
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
        return nomem(x);
    if ((st = form(x, h)) != IR_OK || (st = all_io(x, h)) != IR_OK)
        return st;
    return analyze_callees(x, h, depth);
}

/* Number clusters in the order the host program runs them: those of h in
 * unit order, and those of a computation host control flow runs where
 * that instruction is. */
static IrStatus number(Extract *x, HostComp *h)
{
    const IrComputation *c = src_comp(x, h);
    h->numbered = true;
    for (int32_t u = 0; u < h->nunit; u++) {
        int32_t v = h->unit[u];
        if (v < 0) {
            CluRef *r = vec_push(&x->all);
            if (!r)
                return nomem(x);
            h->cls[-v - 1].number = x->all.n - 1;
            r->h = h;
            r->k = -v - 1;
            continue;
        }
        if (h->place[v] != CLU_HOST_FLOW)
            continue;
        for (int32_t k = 0; k < c->instr[v].ncalled; k++) {
            HostComp *callee = x->hc[c->instr[v].called[k]];
            IrStatus st = callee && !callee->numbered ? number(x, callee) : IR_OK;
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* 3. outlining                                                        */
/* ------------------------------------------------------------------ */

/* A name not used in the output module nor anywhere in the source (so a
 * source instruction copied later never meets it). */
static const char *fresh_name(Extract *x, const char *base)
{
    for (;;) {
        const char *r = ir_unique_name(x->out, base);
        if (!r || !strset_has(&x->srcnames, r))
            return r;
    }
}

static bool copy_sharding(IrArena *a, IrSharding **dst, const IrSharding *src)
{
    *dst = NULL;
    if (!src)
        return true;
    IrSharding *s = ir_alloc(a, sizeof *s);
    if (!s || ir_sharding_copy(a, s, src) != IR_OK)
        return false;
    *dst = s;
    return true;
}

/* Deep copy of a source instruction into the output's arena, with room
 * for its operands and callees (the caller fills them) and no control
 * predecessors (the caller maps them). */
static IrStatus copy_instr(Extract *x, const IrInstr *s, IrInstr *t)
{
    IrArena *a = x->out->arena;
    *t = *s;
    t->name = ir_strdup(a, s->name);
    t->opnd = s->nopnd > 0 ? ir_alloc_array(a, (size_t)s->nopnd, sizeof(int32_t)) : NULL;
    t->called = s->ncalled > 0 ? ir_alloc_array(a, (size_t)s->ncalled, sizeof(int32_t)) : NULL;
    if (!t->name || (s->nopnd > 0 && !t->opnd) || (s->ncalled > 0 && !t->called) ||
        ir_shape_copy(a, &t->shape, &s->shape) != IR_OK ||
        ir_attrs_copy(a, &t->a, &s->a) != IR_OK || !copy_sharding(a, &t->sharding, s->sharding))
        return nomem(x);
    t->a.control_predecessors.n = 0;
    t->a.control_predecessors.v = NULL;
    return IR_OK;
}

/* Add `idx` to a control predecessor list unless it is there. */
static bool add_ctrl(IrArena *a, IrI64List *l, int32_t idx, int32_t cap)
{
    for (int32_t k = 0; k < l->n; k++)
        if (l->v[k] == idx)
            return true;
    if (!l->v && !(l->v = ir_alloc_array(a, (size_t)(cap > 0 ? cap : 1), sizeof(int64_t))))
        return false;
    l->v[l->n++] = idx;
    return true;
}

/* The flat tuple sharding of values `vals` (one entry per array leaf, as
 * XLA's tuple shardings are), or NULL in *out when one of them has none. */
static bool flat_sharding(Extract *x, const IrComputation *c, const int32_t *vals, int32_t n,
                          IrSharding **out)
{
    IrArena *a = x->out->arena;
    int32_t leaves = 0;
    *out = NULL;
    for (int32_t j = 0; j < n; j++) {
        const IrInstr *ins = &c->instr[vals[j]];
        int32_t l = ir_shape_leaf_count(&ins->shape);
        if (!ins->sharding || (ins->sharding->kind == SHD_TUPLE && ins->sharding->ntuple != l))
            return true;
        leaves += l;
    }
    if (leaves == 0)
        return true;
    IrSharding *t = ir_alloc(a, sizeof *t);
    if (!t || !(t->tuple = ir_alloc_array(a, (size_t)leaves, sizeof(IrSharding))))
        return false;
    t->kind = SHD_TUPLE;
    for (int32_t j = 0; j < n; j++) {
        const IrInstr *ins = &c->instr[vals[j]];
        int32_t l = ir_shape_leaf_count(&ins->shape);
        for (int32_t e = 0; e < l; e++) {
            const IrSharding *s = ins->sharding->kind == SHD_TUPLE ? &ins->sharding->tuple[e]
                                                                   : ins->sharding;
            if (ir_sharding_copy(a, &t->tuple[t->ntuple++], s) != IR_OK)
                return false;
        }
    }
    *out = t;
    return true;
}

static IrStatus clone_callees(Extract *x, const IrInstr *ins)
{
    for (int32_t k = 0; k < ins->ncalled; k++)
        if (ir_clone_computation(x->out, x->in, ins->called[k], x->devmap) < 0)
            return nomem(x);
    return IR_OK;
}

static int32_t add(Extract *x, IrComputation *c, const IrInstr *ins)
{
    int32_t r = ir_add_instr(x->out, c, ins);
    if (r < 0)
        nomem(x);
    return r;
}

/* A copy of source instruction i whose operands come from map[] (all of
 * them mapped) and whose callees are plain clones. */
static int32_t add_mapped(Extract *x, IrComputation *oc, const IrInstr *s, const int32_t *map)
{
    IrInstr t;
    if (copy_instr(x, s, &t) != IR_OK)
        return -1;
    for (int32_t k = 0; k < s->nopnd; k++)
        t.opnd[k] = map[s->opnd[k]];
    for (int32_t k = 0; k < s->ncalled; k++)
        t.called[k] = x->devmap[s->called[k]];
    return add(x, oc, &t);
}

static IrStatus cluster_params(Extract *x, HostComp *h, Clu *cl, IrComputation *kc)
{
    const IrComputation *c = src_comp(x, h);
    IrArena *a = x->out->arena;
    /* Size the parameter table once: ir_add_instr grows it one parameter
     * at a time otherwise, quadratic for a cluster with many inputs. */
    if (cl->nin > 0 && !(kc->param = ir_alloc_array(a, (size_t)cl->nin, sizeof(int32_t))))
        return nomem(x);
    for (int32_t j = 0; j < cl->nin; j++)
        kc->param[j] = -1;
    kc->nparam = cl->nin;
    for (int32_t j = 0; j < cl->nin; j++) {
        const IrInstr *v = &c->instr[cl->in[j]];
        IrInstr p = {0};
        p.op = OP_PARAMETER;
        p.name = ir_strdup(a, v->name);
        p.a.parameter_number = j;
        p.a.feature_group_count = p.a.batch_group_count = 1;
        p.pos = v->pos;
        if (!p.name || ir_shape_copy(a, &p.shape, &v->shape) != IR_OK ||
            !copy_sharding(a, &p.sharding, v->sharding))
            return nomem(x);
        if ((h->lmap[cl->in[j]] = add(x, kc, &p)) < 0)
            return failed(x);
    }
    return IR_OK;
}

/* A member, with its constants cloned in front of it on first use and its
 * control predecessors inside the cluster kept. */
static IrStatus cluster_member(Extract *x, HostComp *h, int32_t k, int32_t m, IrComputation *kc)
{
    const IrComputation *c = src_comp(x, h);
    const IrInstr *s = &c->instr[m];
    for (int32_t o = 0; o < s->nopnd; o++) {
        int32_t u = s->opnd[o];
        if (h->lmap[u] < 0 && h->place[u] == CLU_CONST &&
            (h->lmap[u] = add_mapped(x, kc, &c->instr[u], h->lmap)) < 0)
            return failed(x);
    }
    IrInstr t;
    IrStatus st = copy_instr(x, s, &t);
    if (st != IR_OK || (st = clone_callees(x, s)) != IR_OK)
        return st;
    for (int32_t o = 0; o < s->nopnd; o++)
        t.opnd[o] = h->lmap[s->opnd[o]];
    for (int32_t o = 0; o < s->ncalled; o++)
        t.called[o] = x->devmap[s->called[o]];
    const IrI64List *cp = &s->a.control_predecessors;
    for (int32_t o = 0; o < cp->n; o++)
        if (h->cl[cp->v[o]] == k && !add_ctrl(x->out->arena, &t.a.control_predecessors,
                                              h->lmap[cp->v[o]], cp->n))
            return nomem(x);
    return (h->lmap[m] = add(x, kc, &t)) < 0 ? failed(x) : IR_OK;
}

static IrStatus cluster_root(Extract *x, HostComp *h, Clu *cl, IrComputation *kc, const char *name)
{
    const IrComputation *c = src_comp(x, h);
    IrArena *a = x->out->arena;
    IrInstr t = {0};
    IrShape *el = salloc(x, cl->nout, sizeof(IrShape));
    char *base = ir_sprintf(x->scratch, "%s.out", name);
    t.op = OP_TUPLE;
    t.nopnd = cl->nout;
    t.opnd = cl->nout > 0 ? ir_alloc_array(a, (size_t)cl->nout, sizeof(int32_t)) : NULL;
    t.a.feature_group_count = t.a.batch_group_count = 1;
    t.pos = c->instr[cl->mem[0]].pos;
    if (!el || !base || (cl->nout > 0 && !t.opnd) || !(t.name = fresh_name(x, base)))
        return nomem(x);
    for (int32_t j = 0; j < cl->nout; j++) {
        t.opnd[j] = h->lmap[cl->outv[j]];
        el[j] = c->instr[cl->outv[j]].shape;
    }
    if (ir_shape_make_tuple(a, &t.shape, cl->nout, el) != IR_OK ||
        !flat_sharding(x, c, cl->outv, cl->nout, &t.sharding))
        return nomem(x);
    return (kc->root = add(x, kc, &t)) < 0 ? failed(x) : IR_OK;
}

static IrStatus emit_cluster(Extract *x, HostComp *h, int32_t k)
{
    const IrComputation *c = src_comp(x, h);
    Clu *cl = &h->cls[k];
    for (int32_t j = 0; j < cl->nmem; j++) {
        IrStatus st = clone_callees(x, &c->instr[cl->mem[j]]);
        if (st != IR_OK)
            return st;
    }
    char *base = ir_sprintf(x->scratch, "cluster_%d", (int)cl->number);
    const char *name = base ? fresh_name(x, base) : NULL;
    if (!name || (cl->comp = ir_add_computation(x->out, name)) < 0)
        return nomem(x);
    IrComputation *kc = x->out->comp[cl->comp];
    kc->pos = c->instr[cl->mem[0]].pos;
    IrStatus st = cluster_params(x, h, cl, kc);
    for (int32_t j = 0; j < cl->nmem && st == IR_OK; j++)
        st = cluster_member(x, h, k, cl->mem[j], kc);
    if (st == IR_OK)
        st = cluster_root(x, h, cl, kc, name);
    for (int32_t j = 0; j < cl->nin; j++)
        h->lmap[cl->in[j]] = -1;
    for (int32_t j = 0; j < cl->nconst; j++)
        h->lmap[cl->consts[j]] = -1;
    for (int32_t j = 0; j < cl->nmem; j++)
        h->lmap[cl->mem[j]] = -1;
    return st;
}

/* ---- the host program ---- */

static bool record_host(Extract *x, HostComp *h, int32_t i)
{
    HostRec *r = vec_push(&x->hostrec);
    if (r) {
        r->comp = h->src;
        r->instr = i;
        r->place = h->place[i];
    }
    return r != NULL;
}

static bool record_cut(Extract *x, HostComp *h, int32_t v, int32_t from, int32_t to)
{
    CutRec *r = vec_push(&x->cutrec);
    if (r) {
        r->comp = h->src;
        r->instr = v;
        r->from = from;
        r->to = to;
    }
    return r != NULL;
}

/* The host program's index for source value u: a host instruction, a
 * constant (copied on first use) or the get-tuple-element of a device
 * value. -1 after recording an error. */
static int32_t host_value(Extract *x, HostComp *h, IrComputation *oc, int32_t u)
{
    if (h->place[u] == CLU_DEVICE) {
        if (h->gteof[u] < 0)
            internal(x, "a value is read before its cluster runs", src_comp(x, h)->name);
        return h->gteof[u];
    }
    if (h->place[u] == CLU_CONST && h->vmap[u] < 0) {
        if ((h->vmap[u] = add_mapped(x, oc, &src_comp(x, h)->instr[u], h->vmap)) < 0)
            return -1;
        if (!record_host(x, h, u)) {
            nomem(x);
            return -1;
        }
    }
    return h->vmap[u];
}

/* Control predecessor p of something in the host program: a host
 * instruction, or the call of p's cluster. */
static int32_t host_ctrl(const HostComp *h, int32_t p)
{
    return is_device(h, p) ? h->cls[h->cl[p]].call : h->vmap[p];
}

static IrStatus cut_to_host(Extract *x, HostComp *h, int32_t u)
{
    if (!is_device(h, u) || h->cut_host[u])
        return IR_OK;
    h->cut_host[u] = 1;
    return record_cut(x, h, u, h->cls[h->cl[u]].number, -1) ? IR_OK : nomem(x);
}

static IrStatus emit_host_instr(Extract *x, HostComp *h, IrComputation *oc, int32_t i)
{
    const IrComputation *c = src_comp(x, h);
    const IrInstr *s = &c->instr[i];
    IrInstr t;
    IrStatus st = copy_instr(x, s, &t);
    if (st != IR_OK)
        return st;
    for (int32_t k = 0; k < s->nopnd; k++) {
        if ((t.opnd[k] = host_value(x, h, oc, s->opnd[k])) < 0)
            return failed(x);
        if ((st = cut_to_host(x, h, s->opnd[k])) != IR_OK)
            return st;
    }
    if (h->place[i] != CLU_HOST_FLOW && (st = clone_callees(x, s)) != IR_OK)
        return st;
    for (int32_t k = 0; k < s->ncalled; k++)
        t.called[k] = h->place[i] == CLU_HOST_FLOW ? x->hc[s->called[k]]->outc
                                                   : x->devmap[s->called[k]];
    const IrI64List *cp = &s->a.control_predecessors;
    for (int32_t k = 0; k < cp->n; k++)
        if (!add_ctrl(x->out->arena, &t.a.control_predecessors, host_ctrl(h, (int32_t)cp->v[k]),
                      cp->n))
            return nomem(x);
    if ((h->vmap[i] = add(x, oc, &t)) < 0)
        return failed(x);
    return record_host(x, h, i) ? IR_OK : nomem(x);
}

/* Control predecessors of cluster k's call: those of its members that
 * lie outside it. */
static IrStatus call_ctrl(Extract *x, HostComp *h, int32_t k, IrI64List *l)
{
    const IrComputation *c = src_comp(x, h);
    Clu *cl = &h->cls[k];
    int32_t cap = 0;
    for (int32_t j = 0; j < cl->nmem; j++)
        cap += c->instr[cl->mem[j]].a.control_predecessors.n;
    for (int32_t j = 0; j < cl->nmem; j++) {
        const IrI64List *cp = &c->instr[cl->mem[j]].a.control_predecessors;
        for (int32_t o = 0; o < cp->n; o++)
            if (h->cl[cp->v[o]] != k &&
                !add_ctrl(x->out->arena, l, host_ctrl(h, (int32_t)cp->v[o]), cap))
                return nomem(x);
    }
    return IR_OK;
}

static IrStatus emit_call(Extract *x, HostComp *h, IrComputation *oc, int32_t k)
{
    const IrComputation *c = src_comp(x, h);
    IrArena *a = x->out->arena;
    Clu *cl = &h->cls[k];
    const IrComputation *kc = x->out->comp[cl->comp];
    IrInstr t = {0};
    IrKeyValue *kv = ir_alloc(a, sizeof *kv);
    char *base = ir_sprintf(x->scratch, "%s.call", kc->name);
    t.op = OP_CALL;
    t.nopnd = cl->nin;
    t.opnd = cl->nin > 0 ? ir_alloc_array(a, (size_t)cl->nin, sizeof(int32_t)) : NULL;
    t.ncalled = 1;
    t.called = ir_alloc(a, sizeof(int32_t));
    t.a.feature_group_count = t.a.batch_group_count = 1;
    t.pos = c->instr[cl->mem[0]].pos;
    if (!kv || !base || (cl->nin > 0 && !t.opnd) || !t.called || !(t.name = fresh_name(x, base)) ||
        !(kv->key = ir_strdup(a, "_tessel_cluster")) ||
        !(kv->value = ir_sprintf(a, "%d", (int)cl->number)) ||
        ir_shape_copy(a, &t.shape, &kc->instr[kc->root].shape) != IR_OK ||
        !copy_sharding(a, &t.sharding, kc->instr[kc->root].sharding))
        return nomem(x);
    t.called[0] = cl->comp;
    t.a.nfrontend = 1;
    t.a.frontend = kv;
    for (int32_t j = 0; j < cl->nin; j++) {
        int32_t u = cl->in[j];
        t.opnd[j] = host_value(x, h, oc, u);
        int32_t from = is_device(h, u) ? h->cls[h->cl[u]].number : -1;
        if (t.opnd[j] < 0)
            return failed(x);
        if (!record_cut(x, h, u, from, cl->number))
            return nomem(x);
    }
    IrStatus st = call_ctrl(x, h, k, &t.a.control_predecessors);
    if (st != IR_OK || (cl->call = add(x, oc, &t)) < 0)
        return failed(x);
    for (int32_t j = 0; j < cl->nout; j++) {
        const IrInstr *v = &c->instr[cl->outv[j]];
        IrInstr g = {0};
        g.op = OP_GET_TUPLE_ELEMENT;
        g.name = ir_strdup(a, v->name);
        g.nopnd = 1;
        g.opnd = ir_alloc(a, sizeof(int32_t));
        g.a.tuple_index = j;
        g.a.feature_group_count = g.a.batch_group_count = 1;
        g.pos = v->pos;
        if (!g.name || !g.opnd || ir_shape_copy(a, &g.shape, &v->shape) != IR_OK ||
            !copy_sharding(a, &g.sharding, v->sharding))
            return nomem(x);
        g.opnd[0] = cl->call;
        if ((h->gteof[cl->outv[j]] = add(x, oc, &g)) < 0)
            return failed(x);
    }
    return IR_OK;
}

static IrStatus emit_host(Extract *x, HostComp *h);

static IrStatus emit_host_callees(Extract *x, HostComp *h)
{
    const IrComputation *c = src_comp(x, h);
    for (int32_t u = 0; u < h->nunit; u++) {
        int32_t v = h->unit[u];
        if (v < 0 || h->place[v] != CLU_HOST_FLOW)
            continue;
        for (int32_t k = 0; k < c->instr[v].ncalled; k++) {
            IrStatus st = emit_host(x, x->hc[c->instr[v].called[k]]);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

static IrStatus host_arrays(Extract *x, HostComp *h)
{
    h->vmap = salloc(x, h->n, sizeof(int32_t));
    h->gteof = salloc(x, h->n, sizeof(int32_t));
    h->lmap = salloc(x, h->n, sizeof(int32_t));
    h->cut_host = salloc(x, h->n, 1);
    if (!h->vmap || !h->gteof || !h->lmap || !h->cut_host)
        return nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        h->vmap[i] = h->gteof[i] = h->lmap[i] = -1;
    return IR_OK;
}

static IrStatus emit_host(Extract *x, HostComp *h)
{
    if (h->outc >= 0)
        return IR_OK;
    const IrComputation *c = src_comp(x, h);
    IrStatus st = emit_host_callees(x, h);
    if (st != IR_OK)
        return st;
    const char *name = ir_find_computation(x->out, c->name) < 0 ? c->name : fresh_name(x, c->name);
    int32_t oi = name ? ir_add_computation(x->out, name) : -1;
    if (oi < 0)
        return nomem(x);
    IrComputation *oc = x->out->comp[oi];
    oc->has_signature = c->has_signature;
    oc->pos = c->pos;
    for (int32_t u = 0; u < h->nunit && st == IR_OK; u++)
        st = h->unit[u] >= 0 ? emit_host_instr(x, h, oc, h->unit[u])
                             : emit_call(x, h, oc, -h->unit[u] - 1);
    if (st != IR_OK)
        return st;
    if ((oc->root = host_value(x, h, oc, c->root)) < 0)
        return failed(x);
    if ((st = cut_to_host(x, h, c->root)) != IR_OK)
        return st;
    h->outc = oi;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* the module and the result                                           */
/* ------------------------------------------------------------------ */

static bool dup_list(IrArena *a, IrI64List *l)
{
    if (l->n <= 0 || !l->v)
        return true;
    int64_t *v = ir_alloc_array(a, (size_t)l->n, sizeof *v);
    if (v)
        memcpy(v, l->v, (size_t)l->n * sizeof *v);
    l->v = v;
    return v != NULL;
}

static bool dup_str(IrArena *a, const char **s)
{
    return !*s || (*s = ir_strdup(a, *s)) != NULL;
}

/* The module header: what the source says about partitions, replicas,
 * the entry's layout, aliasing, and its file and text for diagnostics. */
static IrStatus copy_header(Extract *x)
{
    const IrModule *in = x->in;
    IrModule *o = x->out;
    IrArena *a = o->arena;
    o->num_partitions = in->num_partitions;
    o->replica_count = in->replica_count;
    o->entry_computation_layout = in->entry_computation_layout;
    o->file = in->file;
    o->src = in->src;
    if (!dup_str(a, &o->entry_computation_layout) || !dup_str(a, &o->file) || !dup_str(a, &o->src))
        return nomem(x);
    if (in->nalias > 0 && !(o->alias = ir_alloc_array(a, (size_t)in->nalias, sizeof(IrAlias))))
        return nomem(x);
    for (int32_t i = 0; i < in->nalias; i++) {
        o->alias[i] = in->alias[i];
        if (!dup_list(a, &o->alias[i].output_index) || !dup_list(a, &o->alias[i].param_index))
            return nomem(x);
    }
    o->nalias = in->nalias;
    if (in->nheader_attr > 0 &&
        !(o->header_attr = ir_alloc_array(a, (size_t)in->nheader_attr, sizeof(IrKeyValue))))
        return nomem(x);
    for (int32_t i = 0; i < in->nheader_attr; i++) {
        o->header_attr[i] = in->header_attr[i];
        if (!dup_str(a, &o->header_attr[i].key) || !dup_str(a, &o->header_attr[i].value))
            return nomem(x);
    }
    o->nheader_attr = in->nheader_attr;
    return IR_OK;
}

static IrStatus source_names(Extract *x)
{
    for (int32_t ci = 0; ci < x->in->ncomp; ci++) {
        const IrComputation *c = x->in->comp[ci];
        if (!strset_add(&x->srcnames, c->name))
            return nomem(x);
        for (int32_t i = 0; i < c->ninstr; i++)
            if (!strset_add(&x->srcnames, c->instr[i].name))
                return nomem(x);
    }
    return IR_OK;
}

/* Emit every cluster (numbered), every other computation, then the host
 * computations (callees first, the entry last). */
static IrStatus emit_all(Extract *x)
{
    for (int32_t ci = 0; ci < x->in->ncomp; ci++)
        if (x->hc[ci]) {
            IrStatus st = host_arrays(x, x->hc[ci]);
            if (st != IR_OK)
                return st;
        }
    CluRef *all = x->all.v;
    for (int32_t j = 0; j < x->all.n; j++) {
        IrStatus st = emit_cluster(x, all[j].h, all[j].k);
        if (st != IR_OK)
            return st;
    }
    for (int32_t ci = 0; ci < x->in->ncomp; ci++)
        if (!x->hc[ci] && x->devmap[ci] < 0 && ir_clone_computation(x->out, x->in, ci, x->devmap) < 0)
            return nomem(x);
    IrStatus st = emit_host(x, x->hc[x->in->entry]);
    if (st != IR_OK)
        return st;
    x->out->entry = x->hc[x->in->entry]->outc;
    x->out->comp[x->out->entry]->is_entry = true;
    return IR_OK;
}

/* ---- CluResult ---- */

static const char **names_of(IrArena *a, const IrComputation *c, const int32_t *idx, int32_t n)
{
    const char **r = ir_alloc_array(a, n > 0 ? (size_t)n : 1, sizeof *r);
    for (int32_t j = 0; r && j < n; j++)
        if (!(r[j] = ir_strdup(a, c->instr[idx[j]].name)))
            return NULL;
    return r;
}

static int32_t output_index(const Clu *cl, int32_t v)
{
    const int32_t *p = bsearch(&v, cl->outv, (size_t)cl->nout, sizeof v, cmp_i32);
    return p ? (int32_t)(p - cl->outv) : -1;
}

static bool result_inputs(IrArena *a, const HostComp *h, const IrComputation *c, const Clu *cl,
                          CluCluster *r)
{
    if (!(r->inputs = ir_alloc_array(a, cl->nin > 0 ? (size_t)cl->nin : 1, sizeof(CluInput))))
        return false;
    r->ninputs = cl->nin;
    for (int32_t j = 0; j < cl->nin; j++) {
        int32_t u = cl->in[j];
        CluInput *in = &r->inputs[j];
        in->operand = j;
        in->from_cluster = in->from_output = -1;
        in->host_param = c->instr[u].op == OP_PARAMETER ? c->instr[u].a.parameter_number : -1;
        in->bytes = ir_shape_bytes(&c->instr[u].shape);
        if (h->place[u] == CLU_DEVICE) {
            const Clu *p = &h->cls[h->cl[u]];
            in->from_cluster = p->number;
            in->from_output = output_index(p, u);
        }
        if (!(in->value = ir_strdup(a, c->instr[u].name)))
            return false;
    }
    return true;
}

static bool result_outputs(IrArena *a, const IrModule *out, const HostComp *h,
                           const IrComputation *c, const Clu *cl, CluCluster *r)
{
    const IrComputation *oc = out->comp[h->outc];
    if (!(r->outputs = ir_alloc_array(a, cl->nout > 0 ? (size_t)cl->nout : 1, sizeof(CluOutput))))
        return false;
    r->noutputs = cl->nout;
    for (int32_t j = 0; j < cl->nout; j++) {
        int32_t v = cl->outv[j];
        CluOutput *o = &r->outputs[j];
        o->index = j;
        o->bytes = ir_shape_bytes(&c->instr[v].shape);
        if (!(o->value = ir_strdup(a, c->instr[v].name)) ||
            !(o->host_name = ir_strdup(a, oc->instr[h->gteof[v]].name)))
            return false;
    }
    return true;
}

static bool result_cluster(Extract *x, IrArena *a, const CluRef *ref, CluCluster *r)
{
    const HostComp *h = ref->h;
    const Clu *cl = &h->cls[ref->k];
    const IrComputation *c = src_comp(x, h);
    r->number = cl->number;
    r->comp = cl->comp;
    r->host_comp = h->outc;
    r->ninstrs = cl->nmem;
    r->nconsts = cl->nconst;
    return (r->name = ir_strdup(a, x->out->comp[cl->comp]->name)) &&
           (r->source_comp = ir_strdup(a, c->name)) &&
           (r->call = ir_strdup(a, x->out->comp[h->outc]->instr[cl->call].name)) &&
           (r->instrs = names_of(a, c, cl->mem, cl->nmem)) &&
           (r->consts = names_of(a, c, cl->consts, cl->nconst)) &&
           result_inputs(a, h, c, cl, r) && result_outputs(a, x->out, h, c, cl, r);
}

static bool result_lists(Extract *x, CluResult *res)
{
    IrArena *a = res->arena;
    const HostRec *hr = x->hostrec.v;
    const CutRec *cr = x->cutrec.v;
    res->host = ir_alloc_array(a, x->hostrec.n > 0 ? (size_t)x->hostrec.n : 1, sizeof(CluHostInstr));
    res->cuts = ir_alloc_array(a, x->cutrec.n > 0 ? (size_t)x->cutrec.n : 1, sizeof(CluCut));
    if (!res->host || !res->cuts)
        return false;
    for (int32_t j = 0; j < x->hostrec.n; j++) {
        const IrComputation *c = x->in->comp[hr[j].comp];
        CluHostInstr *o = &res->host[res->nhost++];
        o->place = hr[j].place;
        if (!(o->comp = ir_strdup(a, c->name)) || !(o->name = ir_strdup(a, c->instr[hr[j].instr].name)))
            return false;
    }
    for (int32_t j = 0; j < x->cutrec.n; j++) {
        const IrComputation *c = x->in->comp[cr[j].comp];
        CluCut *o = &res->cuts[res->ncuts++];
        o->from = cr[j].from;
        o->to = cr[j].to;
        o->bytes = ir_shape_bytes(&c->instr[cr[j].instr].shape);
        if (!(o->comp = ir_strdup(a, c->name)) || !(o->value = ir_strdup(a, c->instr[cr[j].instr].name)))
            return false;
    }
    return true;
}

static IrStatus build_result(Extract *x, CluResult *res)
{
    if (!(res->arena = ir_arena_new()))
        return nomem(x);
    const CluRef *all = x->all.v;
    res->clusters = ir_alloc_array(res->arena, x->all.n > 0 ? (size_t)x->all.n : 1, sizeof(CluCluster));
    if (!res->clusters)
        return nomem(x);
    for (int32_t j = 0; j < x->all.n; j++) {
        if (!result_cluster(x, res->arena, &all[j], &res->clusters[j]))
            return nomem(x);
        res->nclusters++;
    }
    return result_lists(x, res) ? IR_OK : nomem(x);
}

/* ------------------------------------------------------------------ */
/* entry points                                                        */
/* ------------------------------------------------------------------ */

CluOptions clu_default_options(void)
{
    CluOptions o = {NULL, 64};
    return o;
}

void clu_result_free(CluResult *res)
{
    if (!res)
        return;
    ir_arena_free(res->arena);
    memset(res, 0, sizeof *res);
}

static IrStatus prepare(Extract *x)
{
    int32_t n = x->in->ncomp;
    x->scratch = ir_arena_new();
    x->has_host = ts_calloc((size_t)n, sizeof *x->has_host);
    x->hc = ts_calloc((size_t)n, sizeof *x->hc);
    x->devmap = ts_malloc((size_t)n * sizeof *x->devmap);
    x->out = ir_module_new(x->in->name);
    if (!x->scratch || !x->has_host || !x->hc || !x->devmap || !x->out)
        return nomem(x);
    for (int32_t i = 0; i < n; i++)
        x->devmap[i] = -1;
    IrStatus st = copy_header(x);
    if (st == IR_OK)
        st = source_names(x);
    if (st == IR_OK)
        st = clu_host_computations(x->in, x->targets, x->has_host, x->d);
    return st;
}

static void release(Extract *x)
{
    ir_arena_free(x->scratch);
    ts_free(x->has_host);
    ts_free(x->hc);
    ts_free(x->devmap);
    ts_free(x->srcnames.slot);
    ts_free(x->all.v);
    ts_free(x->hostrec.v);
    ts_free(x->cutrec.v);
}

IrStatus clu_extract(const IrModule *in, const CluOptions *opt, IrModule **out, CluResult *res,
                     IrDiag *d)
{
    CluOptions o = opt ? *opt : clu_default_options();
    *out = NULL;
    if (res)
        memset(res, 0, sizeof *res);
    if (!in || in->entry < 0 || in->entry >= in->ncomp)
        return ir_error(d, IR_EINPUT, in ? in->file : NULL, NULL, (IrPos){0, 0},
                        "module %s has no ENTRY computation", in ? in->name : "(null)");
    Extract x = {0};
    x.in = in;
    x.targets = o.host_targets ? o.host_targets : clu_default_host_targets;
    x.max_const = o.max_const_elements;
    x.d = d;
    x.all.elem = sizeof(CluRef);
    x.hostrec.elem = sizeof(HostRec);
    x.cutrec.elem = sizeof(CutRec);
    IrStatus st = prepare(&x);
    if (st == IR_OK)
        st = analyze(&x, in->entry, 0);
    if (st == IR_OK)
        st = number(&x, x.hc[in->entry]);
    if (st == IR_OK)
        st = emit_all(&x);
    if (st == IR_OK && res)
        st = build_result(&x, res);
    release(&x);
    if (st != IR_OK) {
        ir_module_free(x.out);
        clu_result_free(res);
        return st;
    }
    *out = x.out;
    return IR_OK;
}

IrStatus clu_cluster_module(const IrModule *out, const CluResult *res, int32_t k, IrModule **mod,
                            IrDiag *d)
{
    *mod = NULL;
    if (!out || !res || k < 0 || k >= res->nclusters || res->clusters[k].comp < 0 ||
        res->clusters[k].comp >= out->ncomp)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no cluster %d", (int)k);
    IrModule *m = ir_module_new(res->clusters[k].name);
    int32_t *map = ts_malloc((size_t)out->ncomp * sizeof *map);
    int32_t ci = -1;
    if (m && map) {
        for (int32_t i = 0; i < out->ncomp; i++)
            map[i] = -1;
        ci = ir_clone_computation(m, out, res->clusters[k].comp, map);
    }
    ts_free(map);
    if (ci < 0) {
        ir_module_free(m);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    m->entry = ci;
    m->comp[ci]->is_entry = true;
    m->num_partitions = out->num_partitions;
    m->replica_count = out->replica_count;
    *mod = m;
    return IR_OK;
}
