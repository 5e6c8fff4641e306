/*
 * memfit_schedule.c: an order of a computation's instructions with a
 * lower peak of live bytes (the first step of fitting a memory limit,
 * memfit.c), a list scheduler as XLA's memory-minimising ones.
 *
 * Kahn's algorithm over three kinds of edges: operands, control
 * predecessors, and the sequence of the ordered instructions (mf_ordered:
 * collectives, their -start/-done, send/recv, feeds, custom-calls,
 * stateful rng) in their original order, so that the collectives keep
 * the relative order the partitioner gave them (every device runs the
 * same program, so every rank issues them alike). Parameters come first
 * (the caller holds them from the start anyway). Then, of the ready
 * instructions, the one whose run adds the fewest bytes: its value less
 * the values it is the last user of; ties go to the earlier in the
 * original order, so the result depends on the computation alone.
 *
 * Example: a = big(p); b = small(p); c = use(a); d = use(b), in that
 * order, holds a and b together; the scheduler runs b, d before a, c
 * when d frees b (or a, c first when c frees more), never both live.
 */
#include "memfit.h"

#include <string.h>

#define MAX_DEPTH 8  /* the longest look ahead (greedy's priority) */

typedef struct Sched {
    const MfGraph *g;
    int32_t n;
    int32_t *start, *users;   /* users of node i: users[start[i] .. start[i+1]) */
    int32_t *indeg;           /* unscheduled predecessors (edges, with repeats) */
    int32_t *remaining;       /* operand references by unscheduled nodes */
    int32_t *rank;            /* position in the original order */
    int32_t *ready;
    int32_t nready;
    uint8_t *runs;            /* in g->seq (the others are not scheduled) */
} Sched;

/* The predecessor edges p -> x of node x: its operands, its control
 * predecessors, and the previous ordered node prev_ordered[x] (-1: none). */
static int32_t npreds(const MfGraph *g, const int32_t *prev_ordered, int32_t x)
{
    const IrInstr *ins = &g->c->instr[g->node[x].src];
    return g->node[x].nopnd + (int32_t)ins->a.x->control_predecessors.n + (prev_ordered[x] >= 0);
}

static int32_t pred_at(const MfGraph *g, const int32_t *prev_ordered, int32_t x, int32_t k)
{
    const MfNode *nd = &g->node[x];
    if (k < nd->nopnd)
        return nd->opnd[k];
    k -= nd->nopnd;
    const IrI64List *cp = &g->c->instr[nd->src].a.x->control_predecessors;
    return k < cp->n ? (int32_t)cp->v[k] : prev_ordered[x];
}

/* References to o by the nodes chain[0..n). */
static int32_t refs_in(const MfGraph *g, int32_t o, const int32_t *chain, int32_t n)
{
    int32_t r = 0;
    for (int32_t c = 0; c < n; c++)
        for (int32_t j = 0; j < g->node[chain[c]].nopnd; j++)
            r += g->node[chain[c]].opnd[j] == o;
    return r;
}

/* Bytes freed by running x after chain[0..n) (which have not run yet):
 * operands (each once) whose every remaining reference is x's, the
 * root's value excepted. */
static int64_t freed_by(const Sched *s, int32_t x, const int32_t *chain, int32_t n)
{
    const MfNode *nd = &s->g->node[x];
    int64_t f = 0;
    for (int32_t j = 0; j < nd->nopnd; j++) {
        int32_t o = nd->opnd[j], refs = 0;
        bool first = true;
        for (int32_t k = 0; k < nd->nopnd; k++) {
            refs += nd->opnd[k] == o;
            first = first && !(k < j && nd->opnd[k] == o);
        }
        if (first && o != s->g->root && s->remaining[o] - refs_in(s->g, o, chain, n) == refs)
            f += s->g->node[o].bytes;
    }
    return f;
}

/* Is y ready once chain[0..n) has run? */
static bool ready_after(const Sched *s, const int32_t *prev, int32_t y, const int32_t *chain, int32_t n)
{
    int32_t left = s->indeg[y];
    for (int32_t k = 0; k < npreds(s->g, prev, y); k++) {
        int32_t p = pred_at(s->g, prev, y, k);
        for (int32_t c = 0; c < n; c++)
            left -= chain[c] == p;
    }
    return left == 0;
}

/* The priority of ready node x: the lowest running total of bytes added
 * over x and up to `depth` - 1 of what it makes ready, each step the
 * user of the last that adds least (a chain such as broadcast, multiply,
 * subtract that frees two values only at its end is worth starting). */
static int64_t priority(const Sched *s, const int32_t *prev, int32_t x, int depth)
{
    int32_t chain[MAX_DEPTH];
    chain[0] = x;
    int64_t total = s->g->node[x].bytes - freed_by(s, x, chain, 0), best = total;
    for (int32_t n = 1; n < depth; n++) {
        int32_t last = chain[n - 1], pick = -1;
        int64_t pd = 0;
        for (int32_t k = s->start[last]; k < s->start[last + 1]; k++) {
            int32_t y = s->users[k];
            if (!ready_after(s, prev, y, chain, n))
                continue;
            int64_t dy = s->g->node[y].bytes - freed_by(s, y, chain, n);
            if (pick < 0 || dy < pd) {
                pick = y;
                pd = dy;
            }
        }
        if (pick < 0)
            break;
        chain[n] = pick;
        total += pd;
        best = total < best ? total : best;
    }
    return best;
}

/* Run node x: its users' counts fall; those left with none are ready. */
static void run(Sched *s, int32_t x, int32_t *out, int32_t *nout)
{
    out[(*nout)++] = x;
    const MfNode *nd = &s->g->node[x];
    for (int32_t j = 0; j < nd->nopnd; j++)
        s->remaining[nd->opnd[j]]--;
    for (int32_t k = s->start[x]; k < s->start[x + 1]; k++)
        if (--s->indeg[s->users[k]] == 0)
            s->ready[s->nready++] = s->users[k];
}

/* The greedy order of g->seq's nodes into out, looking `depth` steps
 * ahead; false on a cycle. Consumes s's counts. */
static bool greedy(Sched *s, const int32_t *prev, int depth, bool gains_only, int32_t *out)
{
    const MfGraph *g = s->g;
    int32_t nout = 0;
    /* Parameters first, in their original order. */
    for (int32_t k = 0; k < g->nseq; k++) {
        int32_t x = g->seq[k];
        if (g->c->instr[g->node[x].src].op == OP_PARAMETER && s->indeg[x] == 0) {
            for (int32_t r = 0; r < s->nready; r++)
                if (s->ready[r] == x)
                    s->ready[r] = s->ready[--s->nready];
            run(s, x, out, &nout);
        }
    }
    while (s->nready > 0) {
        int32_t best = 0;
        int64_t bd = 0;
        for (int32_t r = 0; r < s->nready; r++) {
            int32_t x = s->ready[r];
            int64_t dlt = priority(s, prev, x, depth);
            if (gains_only && dlt > 0)
                dlt = 0;
            if (r == 0 || dlt < bd || (dlt == bd && s->rank[x] < s->rank[s->ready[best]])) {
                best = r;
                bd = dlt;
            }
        }
        int32_t x = s->ready[best];
        s->ready[best] = s->ready[--s->nready];
        run(s, x, out, &nout);
    }
    return nout == g->nseq;
}

/* Counts of s afresh for a new greedy pass. */
static void reset(Sched *s, const int32_t *prev)
{
    const MfGraph *g = s->g;
    memset(s->remaining, 0, (size_t)s->n * sizeof *s->remaining);
    for (int32_t x = 0; x < s->n; x++) {
        if (!s->runs[x])
            continue;
        s->indeg[x] = npreds(g, prev, x);
        for (int32_t j = 0; j < g->node[x].nopnd; j++)
            s->remaining[g->node[x].opnd[j]]++;
    }
    s->nready = 0;
    for (int32_t k = 0; k < g->nseq; k++)
        if (s->indeg[g->seq[k]] == 0)
            s->ready[s->nready++] = g->seq[k];
}

bool mf_schedule(MfGraph *g)
{
    int32_t n = g->nnode;
    size_t sz = (size_t)(n ? n : 1);
    Sched s = {.g = g, .n = n};
    int32_t *prev = ts_malloc(sz * sizeof *prev);
    int32_t *out = ts_malloc(sz * sizeof *out);
    int32_t *best = ts_malloc(sz * sizeof *best);
    s.start = ts_calloc(sz + 1, sizeof *s.start);
    s.indeg = ts_calloc(sz, sizeof *s.indeg);
    s.remaining = ts_calloc(sz, sizeof *s.remaining);
    s.rank = ts_malloc(sz * sizeof *s.rank);
    s.ready = ts_malloc(sz * sizeof *s.ready);
    s.runs = ts_calloc(sz, 1);
    bool ok = prev && out && best && s.start && s.indeg && s.remaining && s.rank && s.ready && s.runs;
    int64_t nedge = 0;
    for (int32_t x = 0; ok && x < n; x++)
        prev[x] = -1;
    for (int32_t k = 0, last = -1; ok && k < g->nseq; k++) {
        int32_t x = g->seq[k];
        s.rank[x] = k;
        s.runs[x] = 1;
        if (mf_ordered(g->c->instr[g->node[x].src].op)) {
            prev[x] = last;
            last = x;
        }
    }
    for (int32_t x = 0; ok && x < n; x++) {
        if (!s.runs[x])
            continue;
        for (int32_t k = 0; k < npreds(g, prev, x); k++)
            s.start[pred_at(g, prev, x, k) + 1]++;
        nedge += npreds(g, prev, x);
    }
    s.users = ok ? ts_malloc((size_t)(nedge ? nedge : 1) * sizeof *s.users) : NULL;
    int32_t *fill = ok ? ts_malloc(sz * sizeof *fill) : NULL;
    ok = ok && s.users && fill;
    if (ok) {
        for (int32_t x = 0; x < n; x++)
            s.start[x + 1] += s.start[x];
        memcpy(fill, s.start, sz * sizeof *fill);
        for (int32_t x = 0; x < n; x++)
            for (int32_t k = 0; s.runs[x] && k < npreds(g, prev, x); k++)
                s.users[fill[pred_at(g, prev, x, k)]++] = x;
    }
    /* The original order, then each greedy depth: the lowest peak wins
     * (the earlier on ties). */
    MfProfile pr;
    ok = ok && mf_profile(g, &pr, NULL, NULL);
    int64_t low = pr.peak;
    bool better = false;
    static const int depths[] = {1, 2, 4, MAX_DEPTH};
    for (size_t v = 0; ok && v < 2 * sizeof depths / sizeof *depths; v++) {
        int depth = depths[v / 2];
        reset(&s, prev);
        if (!greedy(&s, prev, depth, v % 2 == 1, out))
            break; /* a cycle: the order stays */
        int32_t *orig = g->seq;
        g->seq = out;
        ok = mf_profile(g, &pr, NULL, NULL);
        g->seq = orig;
        if (ok && pr.peak < low) {
            low = pr.peak;
            better = true;
            memcpy(best, out, sz * sizeof *out);
        }
    }
    if (ok && better)
        memcpy(g->seq, best, (size_t)g->nseq * sizeof *best);
    ts_free(fill);
    ts_free(prev);
    ts_free(out);
    ts_free(best);
    ts_free(s.start);
    ts_free(s.users);
    ts_free(s.indeg);
    ts_free(s.remaining);
    ts_free(s.rank);
    ts_free(s.ready);
    ts_free(s.runs);
    return ok;
}
