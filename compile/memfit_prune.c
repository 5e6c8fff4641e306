/*
 * memfit_prune.c: the last step of fitting a memory limit (memfit.c):
 * once an order fits, the recomputations it no longer needs are dropped.
 *
 * The steps before add copies one stage after another, each judged where
 * it was made: the dots checkpoint copies every forward value the
 * backward reads, the remat step one value at a time at the peak of the
 * moment, moving the peak elsewhere. A copy made early may stop paying
 * once later ones have lowered the peak around it (the peak it lowered is
 * now below the limit by other means), and a copy made for a value that a
 * later copy recomputes again is read by nothing that matters. Here each
 * copy in turn has its readers read the value it recomputes instead (the
 * original, which then lives to them); copies read by nothing more go too
 * (a chain made for it); the change is kept when the plan's estimate
 * still fits the limit. Most FLOPs first: what is kept last is cheap.
 *
 * Example: an attention step's SGD at half its peak, fitted from the dots
 * checkpoint (847 copies): the checkpoint's copies of values the backward
 * reads where the peak is no longer are dropped, the step still fits.
 */
#include "memfit.h"

#include <stdlib.h>
#include <string.h>

/* Copies tried at most, each an estimate of the whole program (the
 * estimate is linear in the program, so trying every copy was quadratic:
 * a 48-layer chain of diamonds at P/2 had 4283 to try, 8 s an order;
 * the attention step's 338 all stay within it). The most FLOPs first:
 * what is left untried is the cheapest. */
#define MAX_TRIALS 512

typedef struct Prune {
    MfGraph *g;
    int32_t *pos;       /* a node's position in seq (-1: does not run) */
    int32_t *refs;      /* references to a node by the nodes that run */
    uint8_t *gone;      /* dropped by the current trial */
    int32_t *stack;
    int32_t *seq0;      /* the order before the trial */
    int32_t nseq0;
    int32_t nundo;
    int32_t *undo_node; /* nodes whose operands the trial replaced, and */
    int32_t **undo_opnd; /* their operands before */
} Prune;

typedef struct Cand {
    int32_t node;
    int64_t flops;
} Cand;

static int by_flops(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->flops != y->flops)
        return x->flops > y->flops ? -1 : 1;
    return (x->node < y->node) - (x->node > y->node); /* later copies first */
}

/* pos and refs of g's order afresh. */
static void index_order(Prune *p)
{
    const MfGraph *g = p->g;
    for (int32_t x = 0; x < g->nnode; x++)
        p->pos[x] = -1, p->refs[x] = 0;
    for (int32_t k = 0; k < g->nseq; k++) {
        const MfNode *u = &g->node[g->seq[k]];
        p->pos[g->seq[k]] = k;
        for (int32_t j = 0; j < u->nopnd; j++)
            p->refs[u->opnd[j]]++;
    }
}

/* The node a copy x recomputes: the instruction's own node (graph_build
 * numbers them alike), which runs before every reader of x; -1 when not. */
static int32_t original_of(const Prune *p, int32_t x)
{
    const MfGraph *g = p->g;
    int32_t o = g->node[x].src;
    if (o < 0 || o >= g->nnode || g->node[o].clone || g->node[o].src != o || p->pos[o] < 0)
        return -1;
    for (int32_t k = 0; k <= p->pos[o]; k++) {
        const MfNode *u = &g->node[g->seq[k]];
        for (int32_t j = 0; j < u->nopnd; j++)
            if (u->opnd[j] == x)
                return -1; /* read before the original runs */
    }
    return o;
}

/* Drop copy x: its readers read o; copies left unread go too. false when
 * out of memory (the trial then undone by the caller). */
static bool drop(Prune *p, int32_t x, int32_t o)
{
    MfGraph *g = p->g;
    memcpy(p->seq0, g->seq, (size_t)g->nseq * sizeof *g->seq);
    p->nseq0 = g->nseq;
    p->nundo = 0;
    if (!mf_redirect(g, 0, x, o, p->undo_node, p->undo_opnd, &p->nundo))
        return false;
    memset(p->gone, 0, (size_t)g->nnode);
    int32_t sp = 0;
    p->gone[x] = 1;
    p->stack[sp++] = x;
    while (sp > 0) {
        const MfNode *d = &g->node[p->stack[--sp]];
        for (int32_t j = 0; j < d->nopnd; j++) {
            int32_t w = d->opnd[j];
            if (--p->refs[w] == 0 && g->node[w].clone && !p->gone[w] && w != g->root && p->pos[w] >= 0) {
                p->gone[w] = 1;
                p->stack[sp++] = w;
            }
        }
    }
    int32_t n = 0;
    for (int32_t k = 0; k < g->nseq; k++)
        if (!p->gone[g->seq[k]])
            g->seq[n++] = g->seq[k];
    g->nseq = n;
    return true;
}

static void undo(Prune *p)
{
    mf_restore(p->g, p->undo_node, p->undo_opnd, p->nundo, p->seq0, p->nseq0);
}

bool mf_prune(MfGraph *g, MfFits fits, void *ctx)
{
    size_t sz = (size_t)(g->nnode > 0 ? g->nnode : 1);
    Prune p = {.g = g};
    p.pos = ts_malloc(sz * sizeof *p.pos);
    p.refs = ts_malloc(sz * sizeof *p.refs);
    p.gone = ts_malloc(sz);
    p.stack = ts_malloc(sz * sizeof *p.stack);
    p.seq0 = ts_malloc((size_t)(g->nseq > 0 ? g->nseq : 1) * sizeof *p.seq0);
    p.undo_node = ts_malloc(sz * sizeof *p.undo_node);
    p.undo_opnd = ts_malloc(sz * sizeof *p.undo_opnd);
    Cand *c = ts_malloc((size_t)(g->nseq > 0 ? g->nseq : 1) * sizeof *c);
    bool ok = p.pos && p.refs && p.gone && p.stack && p.seq0 && p.undo_node && p.undo_opnd && c;
    int32_t n = 0;
    for (int32_t k = 0; ok && k < g->nseq; k++) {
        int32_t x = g->seq[k];
        if (g->node[x].clone)
            c[n++] = (Cand){x, mf_flops(g->m, g->c, &g->c->instr[g->node[x].src])};
    }
    if (ok)
        qsort(c, (size_t)n, sizeof *c, by_flops);
    for (int32_t i = 0, tried = 0; ok && i < n && tried < MAX_TRIALS; i++) {
        index_order(&p);
        int32_t x = c[i].node, o = p.pos[x] >= 0 ? original_of(&p, x) : -1;
        if (o < 0)
            continue;
        tried++;
        int64_t peak;
        int32_t at;
        int f = -1;
        ok = drop(&p, x, o) && (f = fits(ctx, g, &peak, &at)) >= 0;
        if (!ok || f == 0)
            undo(&p);
    }
    ts_free(p.pos);
    ts_free(p.refs);
    ts_free(p.gone);
    ts_free(p.stack);
    ts_free(p.seq0);
    ts_free(p.undo_node);
    ts_free(p.undo_opnd);
    ts_free(c);
    return ok;
}
