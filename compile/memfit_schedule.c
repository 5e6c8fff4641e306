/*
 * memfit_schedule.c: an order of a computation's instructions with a
 * lower peak of live bytes (the first step of fitting a memory limit,
 * memfit.c), as XLA's memory-minimising schedulers: a list scheduler
 * (variant 0) and two depth-first post-orders (variants 1, 2).
 *
 * The edges: operands, control predecessors, the sequence of the
 * instructions that keep their place (mf_sequenced: send/recv, feeds,
 * custom-calls, stateful rng, -start/-done of async ops) in their
 * original order, and each donated parameter's other readers before the
 * output that writes over it (donated_edges). Collectives are free to
 * move: every device runs the one scheduled program, so every rank still
 * issues them alike.
 *
 * The list scheduler is Kahn's algorithm over them. Parameters come first
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

/* Edges beside operands and control predecessors (npreds, pred_at). */
typedef struct Preds {
    int32_t *prev;            /* the previous sequenced node (mf_sequenced; -1: none) */
    int32_t *mstart, *more;   /* readers of a donated parameter before its writer */
} Preds;

/* The predecessor edges p -> x of node x: its operands, its control
 * predecessors, the previous sequenced node prev[x] (-1: none), and the
 * other readers of a donated parameter x writes over (more[mstart[x] ..
 * mstart[x + 1])). */
static int32_t npreds(const MfGraph *g, const Preds *pe, int32_t x)
{
    const IrInstr *ins = &g->c->instr[g->node[x].src];
    return g->node[x].nopnd + (int32_t)ins->a.x->control_predecessors.n + (pe->prev[x] >= 0) +
           pe->mstart[x + 1] - pe->mstart[x];
}

static int32_t pred_at(const MfGraph *g, const Preds *pe, int32_t x, int32_t k)
{
    const MfNode *nd = &g->node[x];
    if (k < nd->nopnd)
        return nd->opnd[k];
    k -= nd->nopnd;
    const IrI64List *cp = &g->c->instr[nd->src].a.x->control_predecessors;
    if (k < cp->n)
        return (int32_t)cp->v[k];
    k -= (int32_t)cp->n;
    if (pe->prev[x] >= 0 && k-- == 0)
        return pe->prev[x];
    return pe->more[pe->mstart[x] + k];
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
static bool ready_after(const Sched *s, const Preds *prev, int32_t y, const int32_t *chain, int32_t n)
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
static int64_t priority(const Sched *s, const Preds *prev, int32_t x, int depth)
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
static bool greedy(Sched *s, const Preds *prev, int depth, bool gains_only, int32_t *out)
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

/* The root's operand not made yet (state[] 2: run) with the fewest
 * instructions before it (left_only: that have not run), the first on
 * ties: the output post_order makes next when it picks them by cones. An output whose inputs exist is made
 * at once (an Adam step's root lists every parameter's update, then every
 * first moment's, then every second moment's: a layer's three come
 * together, the last layer's first, as its gradient comes first). */
static int32_t nearest_output(const MfGraph *g, const uint8_t *state, bool left_only, uint8_t *seen, int32_t *stack)
{
    const MfNode *r = &g->node[g->root];
    int32_t best = 0, least = -1;
    for (int32_t k = 0; k < r->nopnd; k++) {
        if (state[r->opnd[k]] == 2)
            continue;
        memset(seen, 0, (size_t)g->nnode);
        int32_t sp = 0, left = 0;
        stack[sp++] = r->opnd[k];
        seen[r->opnd[k]] = 1;
        while (sp > 0) {
            int32_t v = stack[--sp];
            left++;
            for (int32_t j = 0; j < g->node[v].nopnd; j++) {
                int32_t w = g->node[v].opnd[j];
                if (!seen[w] && (!left_only || state[w] != 2)) {
                    seen[w] = 1;
                    stack[sp++] = w;
                }
            }
        }
        if (least < 0 || left < least) {
            least = left;
            best = k;
        }
    }
    return best;
}

/* A depth-first post-order of g->seq's nodes into out, as XLA's
 * DFS/post-order memory schedulers: parameters first, then from the root
 * (then from every node of seq not reached, in order) each node after
 * its predecessors, a node's operands visited last to first when
 * `reverse`. A training step's root lists the updated parameters first
 * to last and the backward makes their gradients last to first: visiting
 * the root's operands in reverse runs each update as soon as its
 * gradient exists, before the backward goes on (the gradients do not pile
 * up, and a donated parameter's buffer is free for its update at once).
 * by_cone (1: whole cones, 2: what is left of them; 0: no): the root's
 * operands in the order nearest_output picks them.
 * false on a cycle (out undefined). */
static bool post_order(const Sched *s, const Preds *prev, bool reverse, int by_cone, int32_t *out,
                       int32_t *stack, int32_t *next, uint8_t *state)
{
    const MfGraph *g = s->g;
    int32_t nout = 0;
    int32_t *scratch = by_cone ? ts_malloc((size_t)s->n * sizeof *scratch) : NULL;
    uint8_t *seen = by_cone ? ts_malloc((size_t)s->n) : NULL;
    if (by_cone && (!scratch || !seen)) {
        ts_free(scratch);
        ts_free(seen);
        return false;
    }
    memset(state, 0, (size_t)s->n);
    for (int32_t k = 0; k < g->nseq; k++) {
        int32_t x = g->seq[k];
        if (g->c->instr[g->node[x].src].op == OP_PARAMETER && npreds(g, prev, x) == 0) {
            state[x] = 2;
            out[nout++] = x;
        }
    }
    for (int32_t k = -1; nout >= 0 && k < g->nseq; k++) {
        int32_t start = k < 0 ? g->root : g->seq[k];
        if (!s->runs[start] || state[start])
            continue;
        int32_t sp = 0;
        stack[sp++] = start;
        state[start] = 1;
        next[start] = 0;
        while (sp > 0) {
            int32_t x = stack[sp - 1], np = npreds(g, prev, x);
            if (next[x] < np) {
                int32_t j = next[x]++;
                if (j < g->node[x].nopnd)
                    j = x == g->root && by_cone ? nearest_output(g, state, by_cone == 2, seen, scratch)
                        : reverse ? g->node[x].nopnd - 1 - j : j;
                int32_t y = pred_at(g, prev, x, j);
                if (y < 0 || !s->runs[y] || state[y] == 2)
                    continue;
                if (state[y] == 1) {
                    nout = -1;
                    break;
                }
                state[y] = 1;
                next[y] = 0;
                stack[sp++] = y;
            } else {
                state[x] = 2;
                out[nout++] = x;
                sp--;
            }
        }
    }
    ts_free(scratch);
    ts_free(seen);
    return nout == g->nseq;
}

/* Counts of s afresh for a new greedy pass. */
static void reset(Sched *s, const Preds *prev)
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

/* Does y depend on x (a path of operand and control edges from x to y)?
 * seen: n bytes of scratch. */
static bool depends(const MfGraph *g, int32_t x, int32_t y, uint8_t *seen, int32_t *stack)
{
    memset(seen, 0, (size_t)g->nnode);
    int32_t sp = 0;
    stack[sp++] = y;
    seen[y] = 1;
    while (sp > 0) {
        int32_t v = stack[--sp];
        if (v == x)
            return true;
        const IrI64List *cp = &g->c->instr[g->node[v].src].a.x->control_predecessors;
        for (int32_t j = 0; j < g->node[v].nopnd + cp->n; j++) {
            int32_t w = j < g->node[v].nopnd ? g->node[v].opnd[j] : (int32_t)cp->v[j - g->node[v].nopnd];
            if (w >= 0 && w < g->nnode && !seen[w]) {
                seen[w] = 1;
                stack[sp++] = w;
            }
        }
    }
    return false;
}

/* The writer of donated parameter p: its reader that is an output (an
 * operand of the root tuple, or the root) of p's size, which the run
 * writes over p's buffer once every other reader is done; -1: none. */
static int32_t writer_of(const MfGraph *g, int32_t p, const uint8_t *runs)
{
    const MfNode *r = &g->node[g->root];
    bool tuple = g->c->instr[r->src].op == OP_TUPLE;
    for (int32_t k = 0; k < (tuple ? r->nopnd : 1); k++) {
        int32_t w = tuple ? r->opnd[k] : g->root;
        if (!runs[w] || g->node[w].bytes != g->node[p].bytes || !ir_op_is_elementwise(g->c->instr[g->node[w].src].op))
            continue;
        for (int32_t j = 0; j < g->node[w].nopnd; j++)
            if (g->node[w].opnd[j] == p)
                return w;
    }
    return -1;
}

/* pe->mstart, pe->more: for each donated parameter's writer, its other
 * readers run first (so that the writer is its last reader and takes its
 * buffer, as the estimate and the run do), unless one depends on the
 * writer. false when out of memory. */
static bool donated_edges(const MfGraph *g, const uint8_t *runs, Preds *pe)
{
    int32_t n = g->nnode;
    int32_t *writer = ts_malloc((size_t)n * sizeof *writer);
    int32_t *stack = ts_malloc((size_t)n * sizeof *stack);
    uint8_t *seen = ts_malloc((size_t)n);
    pe->mstart = ts_calloc((size_t)n + 1, sizeof *pe->mstart);
    bool ok = writer && stack && seen && pe->mstart;
    int32_t total = 0;
    for (int32_t x = 0; ok && x < n; x++) {
        const MfNode *nd = &g->node[x];
        writer[x] = -1;
        if (runs[x] && !nd->held && nd->bytes > 0 && g->c->instr[nd->src].op == OP_PARAMETER)
            writer[x] = writer_of(g, x, runs);
    }
    /* Two passes over the readers: count, then fill. */
    for (int pass = 0; ok && pass < 2; pass++) {
        if (pass == 1) {
            for (int32_t x = 0; x < n; x++)
                pe->mstart[x + 1] += pe->mstart[x];
            pe->more = ts_malloc((size_t)(total ? total : 1) * sizeof *pe->more);
            ok = pe->more != NULL;
        }
        for (int32_t k = 0; ok && k < g->nseq; k++) {
            int32_t u = g->seq[k];
            for (int32_t j = 0; j < g->node[u].nopnd; j++) {
                int32_t p = g->node[u].opnd[j], w = writer[p];
                bool first = true;
                for (int32_t i = 0; i < j; i++)
                    first = first && g->node[u].opnd[i] != p;
                if (w < 0 || w == u || !first || depends(g, w, u, seen, stack))
                    continue;
                if (pass == 0) {
                    pe->mstart[w + 1]++;
                    total++;
                } else {
                    pe->more[pe->mstart[w]++] = u;
                }
            }
        }
    }
    /* The fill advanced each start to the next one's: shift back. */
    if (ok) {
        for (int32_t x = n; x > 0; x--)
            pe->mstart[x] = pe->mstart[x - 1];
        pe->mstart[0] = 0;
    }
    ts_free(writer);
    ts_free(stack);
    ts_free(seen);
    return ok;
}

bool mf_schedule(MfGraph *g, int32_t variant)
{
    int32_t n = g->nnode;
    size_t sz = (size_t)(n ? n : 1);
    Sched s = {.g = g, .n = n};
    Preds pe = {0};
    int32_t *prev = pe.prev = ts_malloc(sz * sizeof *prev);
    int32_t *out = ts_malloc(sz * sizeof *out);
    int32_t *best = ts_malloc(sz * sizeof *best);
    s.start = ts_calloc(sz + 1, sizeof *s.start);
    s.indeg = ts_calloc(sz, sizeof *s.indeg);
    s.remaining = ts_calloc(sz, sizeof *s.remaining);
    s.rank = ts_malloc(sz * sizeof *s.rank);
    s.ready = ts_malloc(sz * sizeof *s.ready);
    s.runs = ts_calloc(2 * sz, 1); /* and post_order's states */
    bool ok = prev && out && best && s.start && s.indeg && s.remaining && s.rank && s.ready && s.runs;
    int64_t nedge = 0;
    for (int32_t x = 0; ok && x < n; x++)
        prev[x] = -1;
    for (int32_t k = 0, last = -1; ok && k < g->nseq; k++) {
        int32_t x = g->seq[k];
        s.rank[x] = k;
        s.runs[x] = 1;
        if (mf_sequenced(g->c->instr[g->node[x].src].op)) {
            prev[x] = last;
            last = x;
        }
    }
    ok = ok && donated_edges(g, s.runs, &pe);
    for (int32_t x = 0; ok && x < n; x++) {
        if (!s.runs[x])
            continue;
        for (int32_t k = 0; k < npreds(g, &pe, x); k++)
            s.start[pred_at(g, &pe, x, k) + 1]++;
        nedge += npreds(g, &pe, x);
    }
    s.users = ok ? ts_malloc((size_t)(nedge ? nedge : 1) * sizeof *s.users) : NULL;
    int32_t *fill = ok ? ts_malloc(sz * sizeof *fill) : NULL;
    ok = ok && s.users && fill;
    if (ok) {
        for (int32_t x = 0; x < n; x++)
            s.start[x + 1] += s.start[x];
        memcpy(fill, s.start, sz * sizeof *fill);
        for (int32_t x = 0; x < n; x++)
            for (int32_t k = 0; s.runs[x] && k < npreds(g, &pe, x); k++)
                s.users[fill[pred_at(g, &pe, x, k)]++] = x;
    }
    /* Variant 0: the original order, then each greedy depth: the lowest
     * peak wins (the earlier on ties). Variants 1, 2: the post-order. */
    MfProfile pr;
    ok = ok && mf_profile(g, &pr, NULL, NULL);
    int64_t low = pr.peak;
    bool better = false;
    static const int depths[] = {1, 2, 4, MAX_DEPTH};
    for (size_t v = 0; ok && variant == 0 && v < 2 * sizeof depths / sizeof *depths; v++) {
        reset(&s, &pe);
        if (!greedy(&s, &pe, depths[v / 2], v % 2 == 1, out))
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
    if (ok && variant > 0 && post_order(&s, &pe, variant != 2, variant >= 3 ? variant - 2 : 0, best, s.ready, s.indeg, s.runs + n))
        better = true;
    if (ok && better)
        memcpy(g->seq, best, (size_t)g->nseq * sizeof *best);
    ts_free(fill);
    ts_free(prev);
    ts_free(pe.mstart);
    ts_free(pe.more);
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

/* Move the writer at position wp, with what depends on it up to position
 * `after` and what only it reads (its update's scaled step, which the run
 * fuses into it), to just after `after` (their order kept); false when
 * that cannot be (`after` depends on it, or an instruction that keeps its
 * place would move). mark: nnode bytes; tmp: nseq ids; refs, moved:
 * nnode counts (scratch). */
static bool sink(MfGraph *g, int32_t wp, int32_t after, uint8_t *mark, int32_t *tmp, int32_t *refs, int32_t *moved)
{
    memset(mark, 0, (size_t)g->nnode);
    memset(refs, 0, (size_t)g->nnode * sizeof *refs);
    memset(moved, 0, (size_t)g->nnode * sizeof *moved);
    for (int32_t k = 0; k < g->nseq; k++)
        for (int32_t j = 0; j < g->node[g->seq[k]].nopnd; j++)
            refs[g->node[g->seq[k]].opnd[j]]++;
    int32_t w = g->seq[wp], first = wp;
    mark[w] = 1;
    for (int32_t j = 0; j < g->node[w].nopnd; j++)
        moved[g->node[w].opnd[j]]++;
    /* Back from the writer: a value read only by what moves moves too. */
    for (int32_t k = wp - 1; k >= 0; k--) {
        int32_t x = g->seq[k];
        const IrInstr *ins = &g->c->instr[g->node[x].src];
        if (refs[x] == 0 || moved[x] < refs[x] || ins->op == OP_PARAMETER || mf_ordered(ins->op) ||
            ins->a.x->control_predecessors.n > 0)
            continue;
        mark[x] = 1;
        first = k;
        for (int32_t j = 0; j < g->node[x].nopnd; j++)
            moved[g->node[x].opnd[j]]++;
    }
    int32_t nmove = 0, nstay = 0;
    for (int32_t k = first; k <= after; k++) {
        int32_t x = g->seq[k];
        const IrInstr *ins = &g->c->instr[g->node[x].src];
        for (int32_t j = 0; k > wp && j < g->node[x].nopnd; j++)
            mark[x] = mark[x] | mark[g->node[x].opnd[j]];
        if (mark[x] && (k == after || mf_ordered(ins->op) || ins->a.x->control_predecessors.n > 0))
            return false;
        if (!mark[x])
            g->seq[first + nstay++] = x;
        else
            tmp[nmove++] = x;
    }
    memcpy(g->seq + first + nstay, tmp, (size_t)nmove * sizeof *tmp);
    return true;
}

bool mf_sink_writers(MfGraph *g, MfFits fits, void *ctx)
{
    int32_t n = g->nnode;
    size_t sz = (size_t)(n ? n : 1);
    uint8_t *runs = ts_calloc(sz, 1), *mark = ts_malloc(sz);
    int32_t *refs = ts_malloc(sz * sizeof *refs), *moved = ts_malloc(sz * sizeof *moved);
    int32_t *tmp = ts_malloc(sz * sizeof *tmp);
    int32_t *saved = ts_malloc((size_t)(g->nseq ? g->nseq : 1) * sizeof *saved);
    bool ok = runs && mark && refs && moved && tmp && saved;
    int64_t peak = -1;
    int32_t at;
    int f = 0;
    for (int32_t k = 0; ok && k < g->nseq; k++)
        runs[g->seq[k]] = 1;
    for (int32_t p = 0; ok && f == 0 && p < n; p++) {
        const MfNode *nd = &g->node[p];
        if (!runs[p] || nd->held || nd->bytes == 0 || g->c->instr[nd->src].op != OP_PARAMETER)
            continue;
        int32_t w = writer_of(g, p, runs);
        if (w < 0)
            continue;
        /* The last reader of p but the root, and the writer's place. */
        int32_t last = -1, wp = -1;
        for (int32_t k = 0; k < g->nseq; k++) {
            int32_t x = g->seq[k];
            for (int32_t j = 0; x != g->root && j < g->node[x].nopnd; j++)
                last = g->node[x].opnd[j] == p ? k : last;
            wp = x == w ? k : wp;
        }
        if (wp < 0 || last <= wp)
            continue;
        if (peak < 0) { /* the estimate as it is, once there is a move to weigh */
            f = fits(ctx, g, &peak, &at);
            ok = f >= 0;
            if (f != 0)
                break;
        }
        memcpy(saved, g->seq, (size_t)g->nseq * sizeof *saved);
        int64_t now = peak;
        if (sink(g, wp, last, mark, tmp, refs, moved)) {
            f = fits(ctx, g, &now, &at);
            ok = f >= 0;
        }
        if (ok && now < peak)
            peak = now;
        else
            memcpy(g->seq, saved, (size_t)g->nseq * sizeof *saved);
    }
    ts_free(runs);
    ts_free(mark);
    ts_free(refs);
    ts_free(moved);
    ts_free(tmp);
    ts_free(saved);
    return ok;
}
