/*
 * cycles.c: incremental cycle detection with edge contraction, the
 * structure TensorFlow's clustering uses (GraphCycles), written for
 * tessel's cluster formation.
 *
 * The graph keeps a topological order: rank[] is a permutation of 0..n-1
 * with rank[x] < rank[y] for every edge x->y. Pearce and Kelly's dynamic
 * topological sort ("A dynamic topological sort algorithm for directed
 * acyclic graphs", JEA 2006) restores it after an insertion x->y that
 * breaks it (rank[x] > rank[y]), touching only the nodes whose ranks lie
 * between the two:
 *
 *   deltaF = nodes reachable from y with rank < rank[x]  (meeting x: cycle)
 *   deltaB = nodes reaching x with rank > rank[y]
 *   the ranks of deltaB and deltaF, pooled and sorted, are handed out
 *   again: first to deltaB (in their old order), then to deltaF.
 *
 *   Example: ranks a0 b1 c2 d3, edges a->b, c->d; insert d->b.
 *   deltaF = {b} (rank 1 < 3), deltaB = {c, d} (ranks > 1): pool {1,2,3}
 *   gives c1 d2 b3: a0 c1 d2 b3, and every edge goes up again.
 *
 * Contracting an edge a->b merges b into a. It is allowed only when a->b is
 * the only path from a to b: another path a->x->b would leave x both after
 * and before the merged node, a cycle. The check removes the edge and asks
 * whether b is still reachable, with a search bounded by the two ranks (it
 * runs from whichever end has fewer edges). Merging then moves the edges of
 * the node with fewer edges onto the other (small to large) and re-inserts
 * them with the insertion above, which can no longer fail.
 *
 * Edges live twice, in each node's successor and predecessor lists, and
 * once in an open-addressing index (x, y) -> (position in succ[x], position
 * in pred[y]), so has_edge is O(1) and removal is a swap with the last
 * element. All scratch space (search stack, the two delta lists, sort keys)
 * is allocated with the graph, so queries never allocate.
 */
#include "cluster.h"

#include <stdlib.h>
#include <string.h>

typedef struct NodeList {
    int32_t *v;
    int32_t n;
    int64_t cap;
} NodeList;

/* One slot of the edge index; x < 0: empty. */
typedef struct EdgeSlot {
    int32_t x, y;
    int32_t opos; /* index of y in succ[x] */
    int32_t ipos; /* index of x in pred[y] */
} EdgeSlot;

struct CluCycles {
    int32_t n;
    int32_t *rank;
    uint8_t *alive;
    uint8_t *visited;
    NodeList *succ, *pred;
    EdgeSlot *tab;
    size_t cap, count;      /* edge index capacity (power of 2) and size */
    int32_t *stack;         /* search stack, n entries */
    int32_t *deltaf, *deltab;
    int32_t nf, nb;
    int64_t *keys;          /* sort keys (rank << 32 | node), n entries */
    int32_t *pool;          /* pooled ranks, n entries */
    int32_t *buf1, *buf2;   /* neighbours of a node being merged */
};

/* ---- the edge index ---- */

static size_t edge_hash(int32_t x, int32_t y)
{
    uint64_t z = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (size_t)(z ^ (z >> 31));
}

static int64_t slot_find(const CluCycles *g, int32_t x, int32_t y)
{
    if (g->cap == 0)
        return -1;
    size_t mask = g->cap - 1;
    for (size_t i = edge_hash(x, y) & mask; g->tab[i].x >= 0; i = (i + 1) & mask)
        if (g->tab[i].x == x && g->tab[i].y == y)
            return (int64_t)i;
    return -1;
}

static void slot_put(EdgeSlot *tab, size_t cap, EdgeSlot e)
{
    size_t i = edge_hash(e.x, e.y) & (cap - 1);
    while (tab[i].x >= 0)
        i = (i + 1) & (cap - 1);
    tab[i] = e;
}

/* Make room for one more edge (load at most 1/2). */
static bool index_reserve(CluCycles *g)
{
    if (2 * (g->count + 1) <= g->cap)
        return true;
    size_t cap = g->cap ? g->cap * 2 : 64;
    EdgeSlot *tab = ts_malloc(cap * sizeof *tab);
    if (!tab)
        return false;
    for (size_t i = 0; i < cap; i++)
        tab[i].x = -1;
    for (size_t i = 0; i < g->cap; i++)
        if (g->tab[i].x >= 0)
            slot_put(tab, cap, g->tab[i]);
    ts_free(g->tab);
    g->tab = tab;
    g->cap = cap;
    return true;
}

/* Linear probing deletion by backward shift: later entries of the probe
 * run move into the hole unless their home lies cyclically in (hole, j]. */
static void slot_delete(CluCycles *g, size_t i)
{
    size_t mask = g->cap - 1;
    g->tab[i].x = -1;
    for (size_t j = (i + 1) & mask; g->tab[j].x >= 0; j = (j + 1) & mask) {
        size_t k = edge_hash(g->tab[j].x, g->tab[j].y) & mask;
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        g->tab[i] = g->tab[j];
        g->tab[j].x = -1;
        i = j;
    }
    g->count--;
}

/* ---- node lists ---- */

static bool list_reserve(NodeList *l)
{
    return IR_GROW(l->v, l->cap, l->n + 1);
}

/* Add x->y to the lists and the index (no rank check). False on OOM, with
 * nothing changed. */
static bool edge_link(CluCycles *g, int32_t x, int32_t y)
{
    if (!list_reserve(&g->succ[x]) || !list_reserve(&g->pred[y]) || !index_reserve(g))
        return false;
    EdgeSlot e = {x, y, g->succ[x].n, g->pred[y].n};
    g->succ[x].v[g->succ[x].n++] = y;
    g->pred[y].v[g->pred[y].n++] = x;
    slot_put(g->tab, g->cap, e);
    g->count++;
    return true;
}

/* Remove x->y (present) from the lists and the index. */
static void edge_unlink(CluCycles *g, int32_t x, int32_t y)
{
    size_t s = (size_t)slot_find(g, x, y);
    int32_t opos = g->tab[s].opos, ipos = g->tab[s].ipos;
    NodeList *o = &g->succ[x], *in = &g->pred[y];
    int32_t last = o->v[--o->n];
    if (opos != o->n) {
        o->v[opos] = last;
        g->tab[slot_find(g, x, last)].opos = opos;
    }
    last = in->v[--in->n];
    if (ipos != in->n) {
        in->v[ipos] = last;
        g->tab[slot_find(g, last, y)].ipos = ipos;
    }
    slot_delete(g, (size_t)slot_find(g, x, y));
}

/* ---- construction ---- */

CluCycles *clu_cycles_new(int32_t n)
{
    if (n < 0)
        return NULL;
    size_t k = n > 0 ? (size_t)n : 1;
    CluCycles *g = ts_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->n = n;
    g->rank = ts_malloc(k * sizeof *g->rank);
    g->alive = ts_malloc(k);
    g->visited = ts_calloc(k, 1);
    g->succ = ts_calloc(k, sizeof *g->succ);
    g->pred = ts_calloc(k, sizeof *g->pred);
    g->stack = ts_malloc(k * sizeof *g->stack);
    g->deltaf = ts_malloc(k * sizeof *g->deltaf);
    g->deltab = ts_malloc(k * sizeof *g->deltab);
    g->keys = ts_malloc(k * sizeof *g->keys);
    g->pool = ts_malloc(k * sizeof *g->pool);
    g->buf1 = ts_malloc(k * sizeof *g->buf1);
    g->buf2 = ts_malloc(k * sizeof *g->buf2);
    if (!g->rank || !g->alive || !g->visited || !g->succ || !g->pred || !g->stack ||
        !g->deltaf || !g->deltab || !g->keys || !g->pool || !g->buf1 || !g->buf2) {
        clu_cycles_free(g);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        g->rank[i] = i;
    memset(g->alive, 1, k);
    return g;
}

void clu_cycles_free(CluCycles *g)
{
    if (!g)
        return;
    if (g->succ && g->pred)
        for (int32_t i = 0; i < g->n; i++) {
            ts_free(g->succ[i].v);
            ts_free(g->pred[i].v);
        }
    void *arrays[] = {g->rank, g->alive, g->visited, g->succ, g->pred, g->tab, g->stack,
                      g->deltaf, g->deltab, g->keys, g->pool, g->buf1, g->buf2};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        ts_free(arrays[i]);
    ts_free(g);
}

static bool valid(const CluCycles *g, int32_t x)
{
    return x >= 0 && x < g->n && g->alive[x];
}

bool clu_cycles_has_edge(const CluCycles *g, int32_t x, int32_t y)
{
    return valid(g, x) && valid(g, y) && slot_find(g, x, y) >= 0;
}

bool clu_cycles_alive(const CluCycles *g, int32_t x)
{
    return valid(g, x);
}

int32_t clu_cycles_rank(const CluCycles *g, int32_t x)
{
    return x >= 0 && x < g->n ? g->rank[x] : -1;
}

const int32_t *clu_cycles_succ(const CluCycles *g, int32_t x, int32_t *n)
{
    *n = valid(g, x) ? g->succ[x].n : 0;
    return valid(g, x) ? g->succ[x].v : NULL;
}

const int32_t *clu_cycles_pred(const CluCycles *g, int32_t x, int32_t *n)
{
    *n = valid(g, x) ? g->pred[x].n : 0;
    return valid(g, x) ? g->pred[x].v : NULL;
}

/* ---- Pearce-Kelly ---- */

/* Nodes reachable from `start` with rank < upper go to deltaf (visited
 * set). Returns false as soon as it meets the node of rank `upper` (the
 * insertion would close a cycle). */
static bool forward_search(CluCycles *g, int32_t start, int32_t upper)
{
    int32_t sp = 0;
    g->nf = 0;
    g->stack[sp++] = start;
    g->visited[start] = 1;
    g->deltaf[g->nf++] = start;
    while (sp > 0) {
        NodeList *o = &g->succ[g->stack[--sp]];
        for (int32_t k = 0; k < o->n; k++) {
            int32_t w = o->v[k];
            if (g->rank[w] == upper)
                return false;
            if (!g->visited[w] && g->rank[w] < upper) {
                g->visited[w] = 1;
                g->deltaf[g->nf++] = w;
                g->stack[sp++] = w;
            }
        }
    }
    return true;
}

/* Nodes reaching `start` with rank > lower go to deltab. */
static void backward_search(CluCycles *g, int32_t start, int32_t lower)
{
    int32_t sp = 0;
    g->nb = 0;
    g->stack[sp++] = start;
    g->visited[start] = 1;
    g->deltab[g->nb++] = start;
    while (sp > 0) {
        NodeList *in = &g->pred[g->stack[--sp]];
        for (int32_t k = 0; k < in->n; k++) {
            int32_t w = in->v[k];
            if (!g->visited[w] && g->rank[w] > lower) {
                g->visited[w] = 1;
                g->deltab[g->nb++] = w;
                g->stack[sp++] = w;
            }
        }
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort nodes by rank (ranks are distinct), through the key buffer. */
static void sort_by_rank(CluCycles *g, int32_t *nodes, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        g->keys[i] = (int64_t)g->rank[nodes[i]] << 32 | (uint32_t)nodes[i];
    qsort(g->keys, (size_t)n, sizeof *g->keys, cmp_i64);
    for (int32_t i = 0; i < n; i++)
        nodes[i] = (int32_t)(g->keys[i] & 0xffffffff);
}

static void clear_visited(CluCycles *g, const int32_t *nodes, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        g->visited[nodes[i]] = 0;
}

/* Hand the pooled ranks of deltab and deltaf out again, deltab first. */
static void reorder(CluCycles *g)
{
    sort_by_rank(g, g->deltab, g->nb);
    sort_by_rank(g, g->deltaf, g->nf);
    int32_t i = 0, j = 0, k = 0;
    while (i < g->nb || j < g->nf) {
        int32_t rb = i < g->nb ? g->rank[g->deltab[i]] : INT32_MAX;
        int32_t rf = j < g->nf ? g->rank[g->deltaf[j]] : INT32_MAX;
        if (rb < rf) {
            g->pool[k++] = rb;
            i++;
        } else {
            g->pool[k++] = rf;
            j++;
        }
    }
    for (i = 0; i < g->nb; i++)
        g->rank[g->deltab[i]] = g->pool[i];
    for (j = 0; j < g->nf; j++)
        g->rank[g->deltaf[j]] = g->pool[g->nb + j];
    clear_visited(g, g->deltab, g->nb);
    clear_visited(g, g->deltaf, g->nf);
}

int clu_cycles_insert_edge(CluCycles *g, int32_t x, int32_t y)
{
    if (!valid(g, x) || !valid(g, y) || x == y)
        return 0;
    if (slot_find(g, x, y) >= 0)
        return 1;
    if (!edge_link(g, x, y))
        return -1;
    if (g->rank[x] < g->rank[y])
        return 1;
    if (!forward_search(g, y, g->rank[x])) {
        clear_visited(g, g->deltaf, g->nf);
        edge_unlink(g, x, y);
        return 0;
    }
    backward_search(g, x, g->rank[y]);
    reorder(g);
    return 1;
}

void clu_cycles_remove_edge(CluCycles *g, int32_t x, int32_t y)
{
    if (clu_cycles_has_edge(g, x, y))
        edge_unlink(g, x, y);
}

/* Search from x towards y (rank[x] < rank[y]) through nodes whose ranks
 * lie between theirs: forward along successors or backward along
 * predecessors, from the end with fewer edges. */
static bool reachable(CluCycles *g, int32_t x, int32_t y)
{
    if (x == y)
        return true;
    if (g->rank[x] > g->rank[y])
        return false;
    bool fwd = g->succ[x].n <= g->pred[y].n;
    int32_t start = fwd ? x : y, goal = fwd ? y : x;
    int32_t lo = g->rank[x], hi = g->rank[y];
    int32_t sp = 0, nv = 0;
    bool found = false;
    g->stack[sp++] = start;
    g->visited[start] = 1;
    g->deltaf[nv++] = start;
    while (sp > 0 && !found) {
        NodeList *l = fwd ? &g->succ[g->stack[--sp]] : &g->pred[g->stack[--sp]];
        for (int32_t k = 0; k < l->n; k++) {
            int32_t w = l->v[k];
            if (w == goal) {
                found = true;
                break;
            }
            bool inside = g->rank[w] > lo && g->rank[w] < hi;
            if (inside && !g->visited[w]) {
                g->visited[w] = 1;
                g->deltaf[nv++] = w;
                g->stack[sp++] = w;
            }
        }
    }
    clear_visited(g, g->deltaf, nv);
    return found;
}

bool clu_cycles_is_reachable(CluCycles *g, int32_t x, int32_t y)
{
    return valid(g, x) && valid(g, y) && reachable(g, x, y);
}

bool clu_cycles_can_contract_edge(CluCycles *g, int32_t a, int32_t b)
{
    if (!clu_cycles_has_edge(g, a, b))
        return false;
    edge_unlink(g, a, b);
    bool other = reachable(g, a, b);
    /* The lists and the index just shrank by one, so this cannot fail. */
    edge_link(g, a, b);
    return !other;
}

/* Merge two live nodes with no edge and no path between them: the node
 * with fewer edges gives its edges to the other and dies. */
static int32_t merge_nodes(CluCycles *g, int32_t a, int32_t b)
{
    if (g->succ[b].n + g->pred[b].n > g->succ[a].n + g->pred[a].n) {
        int32_t t = a;
        a = b;
        b = t;
    }
    int32_t no = 0, ni = 0;
    while (g->succ[b].n > 0) {
        int32_t y = g->succ[b].v[g->succ[b].n - 1];
        edge_unlink(g, b, y);
        g->buf1[no++] = y;
    }
    while (g->pred[b].n > 0) {
        int32_t w = g->pred[b].v[g->pred[b].n - 1];
        edge_unlink(g, w, b);
        g->buf2[ni++] = w;
    }
    g->alive[b] = 0;
    for (int32_t k = 0; k < no; k++)
        if (clu_cycles_insert_edge(g, a, g->buf1[k]) != 1)
            return -2;
    for (int32_t k = 0; k < ni; k++)
        if (clu_cycles_insert_edge(g, g->buf2[k], a) != 1)
            return -2;
    return a;
}

int32_t clu_cycles_contract_edge(CluCycles *g, int32_t a, int32_t b)
{
    if (!clu_cycles_has_edge(g, a, b))
        return -1;
    edge_unlink(g, a, b);
    if (reachable(g, a, b)) {
        edge_link(g, a, b); /* cannot fail: room was just freed */
        return -1;
    }
    return merge_nodes(g, a, b);
}

int32_t clu_cycles_merge(CluCycles *g, int32_t a, int32_t b)
{
    if (!valid(g, a) || !valid(g, b))
        return -1;
    if (a == b)
        return a;
    if (slot_find(g, a, b) >= 0)
        return clu_cycles_contract_edge(g, a, b);
    if (slot_find(g, b, a) >= 0)
        return clu_cycles_contract_edge(g, b, a);
    if (g->rank[a] > g->rank[b]) {
        int32_t t = a;
        a = b;
        b = t;
    }
    if (reachable(g, a, b))
        return -1;
    return merge_nodes(g, a, b);
}

/* ---- invariants ---- */

static bool check_lists(const CluCycles *g, size_t *edges)
{
    for (int32_t x = 0; x < g->n; x++) {
        const NodeList *o = &g->succ[x], *in = &g->pred[x];
        if (!g->alive[x] && (o->n || in->n))
            return false;
        for (int32_t k = 0; k < o->n; k++) {
            int32_t y = o->v[k];
            int64_t s = slot_find(g, x, y);
            if (y < 0 || y >= g->n || !g->alive[y] || g->rank[x] >= g->rank[y] || s < 0 ||
                g->tab[s].opos != k || g->pred[y].v[g->tab[s].ipos] != x)
                return false;
        }
        for (int32_t k = 0; k < in->n; k++) {
            int64_t s = slot_find(g, in->v[k], x);
            if (s < 0 || g->tab[s].ipos != k)
                return false;
        }
        *edges += (size_t)o->n;
    }
    return true;
}

bool clu_cycles_check(const CluCycles *g)
{
    uint8_t *seen = ts_calloc(g->n > 0 ? (size_t)g->n : 1, 1);
    if (!seen)
        return false;
    bool ok = true;
    for (int32_t x = 0; x < g->n && ok; x++) {
        int32_t r = g->rank[x];
        ok = r >= 0 && r < g->n && !seen[r] && !g->visited[x];
        if (ok)
            seen[r] = 1;
    }
    ts_free(seen);
    size_t edges = 0;
    return ok && check_lists(g, &edges) && edges == g->count;
}
