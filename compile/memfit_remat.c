/*
 * memfit_remat.c: rematerialization, the second step of fitting a memory
 * limit (memfit.c), as XLA's HloRematerialization: a value live across
 * the peak but not used there is not kept; a copy of its instruction
 * runs again just before its first later use, and every later use reads
 * the copy.
 *
 * One value at a time, at the order's (first) peak position P:
 *   candidates  values defined before P, used after P, not used at P,
 *               neither the root nor of an instruction that must not run
 *               twice (can_remat: parameters, collectives and the other
 *               ordered instructions, random draws, control flow, calls
 *               but those of computations recomputable throughout
 *               (whose result may be a tuple; with g->elements, a
 *               get-tuple-element of one too, with its call),
 *               custom-calls, tuples);
 *   operands    each operand of the copy must be live at the copy's
 *               place, or a parameter (held anyway; a donated one read
 *               after its update is kept to the copy: the run then gives
 *               the update a buffer of its own), or itself
 *               recomputed there (the same rule, up to MAX_CHAIN deep),
 *               or kept alive to it (keepable: a collective's result,
 *               which cannot run twice, or a value MAX_CHAIN down);
 *               A value two of the copies read is copied for each (each
 *               reader's own, which the run fuses into it where it can);
 *               a value whose copies would pass MAX_COPIES so is no
 *               candidate (a chain of diamonds, each layer's input read
 *               four ways and joined again, has 4^k paths down k layers);
 *   choice      cheapest first: (FLOPs + elements of the copies) per
 *               byte saved at P (the value less the parameters and kept
 *               values whose lives the copy extends across P); the first of the
 *               cheapest few that lowers the peak, or keeps it and
 *               lowers the number of positions at it, is kept.
 * Where no candidate lowers the model's peak, the candidates at the
 * estimate's own peak are tried (the model leaves out the executor's
 * fusion and buffer reuse, so the two peaks can fall at different
 * steps: a tensor-parallel block's at the MLP's all-reduce, the
 * model's in the backward), each kept when the estimate falls.
 * It stops when the order fits the limit by the plan's own estimate
 * (fits) or neither lowers its peak.
 *
 * Worked example (f32[1024] = 4 KiB each): p; a = exp(p); t = big temp
 * 16 KiB from p; u = reduce(t); out = a * broadcast(u). At t's peak a is
 * live (4 KiB) for its use at the end: a's copy exp(p) runs after u, and
 * the peak at t falls by 4 KiB for 1024 extra FLOPs.
 */
#include "memfit.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CHAIN 64 /* operands recomputed with a value, levels deep (a chain
                      * back to a checkpoint over many layers) */
#define MAX_TRIES 24 /* candidates tried per step, cheapest first */
#define MAX_COPIES (1 << 14) /* copies one recomputation may make (below) */

int64_t mf_flops(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (ins->op == OP_CALL) {
        /* (HLO's calls form no cycle: this ends) */
        int64_t f = 0;
        for (int32_t k = 0; k < ins->ncalled; k++) {
            const IrComputation *callee =
                ins->called[k] >= 0 && ins->called[k] < m->ncomp ? m->comp[ins->called[k]] : NULL;
            for (int32_t i = 0; callee && i < callee->ninstr; i++)
                f += mf_flops(m, callee, &callee->instr[i]);
        }
        return f;
    }
    int64_t out = ir_shape_elements(&ins->shape);
    if (out < 0)
        return 0;
    const IrShape *a = ins->nopnd > 0 ? &c->instr[ins->opnd[0]].shape : NULL;
    const IrShape *b = ins->nopnd > 1 ? &c->instr[ins->opnd[1]].shape : NULL;
    if (ins->op == OP_DOT && a) {
        int64_t k = 1;
        for (int32_t j = 0; j < ins->a.dot.lhs_contracting.n; j++) {
            int64_t dim = ins->a.dot.lhs_contracting.v[j];
            k *= dim >= 0 && dim < a->rank ? a->dims[dim] : 1;
        }
        return 2 * out * k;
    }
    if (ins->op == OP_CONVOLUTION && b) {
        const IrConvDnums *cv = &ins->a.x->conv;
        int64_t k = cv->k_in_feature >= 0 && cv->k_in_feature < b->rank ? b->dims[cv->k_in_feature] : 1;
        for (int32_t j = 0; j < cv->nspatial; j++)
            k *= cv->k_spatial[j] >= 0 && cv->k_spatial[j] < b->rank ? b->dims[cv->k_spatial[j]] : 1;
        return 2 * out * k;
    }
    if (ir_op_is_elementwise(ins->op))
        return out;
    if ((ins->op == OP_REDUCE || ins->op == OP_REDUCE_WINDOW) && a) {
        int64_t in = ir_shape_elements(a);
        return in > 0 ? in : 0;
    }
    return 0;
}

/* May ins of module m run a second time with the same result and
 * nothing else? A call does when every instruction of its callee does
 * (`depth` calls deep at most: JAX outlines relu as a call), a tuple of
 * results too (jnp.where's JVP: the selected values and the mask its
 * backward reads); with `elements`, a get-tuple-element of such a call
 * of the entry, recomputed with it (the softmax's exp, made from the
 * where's values: the attention's scores are then made again in the
 * backward instead of kept across it). */
static bool can_remat(const IrModule *m, const IrInstr *ins, int depth, bool elements)
{
    bool tuple = ins->shape.type == IR_TUPLE && ins->op != OP_CALL;
    if (mf_ordered(ins->op) || tuple || ins->a.x->control_predecessors.n > 0 || ir_op_has_side_effect(ins->op))
        return false;
    if (ins->op == OP_CALL) {
        if (depth >= 4 || ins->ncalled != 1 || ins->called[0] < 0 || ins->called[0] >= m->ncomp)
            return false;
        const IrComputation *c = m->comp[ins->called[0]];
        for (int32_t i = 0; i < c->ninstr; i++) {
            const IrInstr *x = &c->instr[i];
            bool inner = x->op == OP_PARAMETER || (x->op == OP_TUPLE && i == c->root) ||
                         (x->shape.type != IR_TUPLE && can_remat(m, x, depth + 1, false));
            if (!inner)
                return false;
        }
        return true;
    }
    if (ins->op == OP_GET_TUPLE_ELEMENT && depth == 0 && elements) {
        /* of the entry's call recomputable throughout: a reference into
         * the call's copy (jnp.where's JVP, values and mask) */
        const IrComputation *e = ir_entry(m);
        const IrInstr *t = ins->nopnd == 1 && ins->opnd[0] >= 0 && ins->opnd[0] < e->ninstr ? &e->instr[ins->opnd[0]]
                                                                                         : NULL;
        return t && t->op == OP_CALL && can_remat(m, t, 0, false);
    }
    switch (ir_op_family(ins->op)) {
    case FAM_PARAMETER: case FAM_TUPLE: case FAM_CONTROL: case FAM_CUSTOM_CALL: case FAM_RNG_BIT_GENERATOR:
    case FAM_FUSION: case FAM_ASYNC: case FAM_SCAN: case FAM_COLLECTIVE:
        return false;
    case FAM_FALLBACK:
        return ins->op == OP_PARTITION_ID || ins->op == OP_REPLICA_ID;
    default:
        return true;
    }
}

bool mf_can_remat(const IrModule *m, const IrInstr *ins)
{
    return can_remat(m, ins, 0, true);
}

typedef struct Cand {
    int32_t node;
    double price;  /* cost per byte saved */
    int32_t pos;
} Cand;

/* Answers of one recursive walk (reachable, kept_bytes, cost_at, copies_at) per
 * (node, depth) for one query: they depend on nothing else while the
 * query's copy position stays, and the walks go down every path of a DAG
 * of operands: without them a 12-layer attention stack's fit (each layer's
 * input read by q, k, v and the residual) took 206 s on mesh 2x4, the
 * same paths walked again and again. stamp[] == gen marks an answer of
 * the current query; stamp NULL (no memory): none kept, each walked. */
typedef struct Memo {
    uint32_t *stamp;
    double *val;
    int64_t cap; /* entries: nodes x (MAX_CHAIN + 1) */
    uint32_t gen;
} Memo;

enum { MEMO_REACH, MEMO_KEPT, MEMO_COST, MEMO_COUNT, NMEMO };

typedef struct Remat {
    MfGraph *g;
    Memo memo[NMEMO];               /* the walks' answers for the current query */
    int32_t cap;                    /* entries of pos, last, next */
    int32_t *pos, *last, *next;     /* next: first use after the peak (-1) */
    int32_t *ins;                   /* copies to insert, in order */
    int32_t nins;
    /* undo */
    int32_t nnode0, nseq0;
    int32_t *seq0;
    int32_t nundo;
    int32_t *undo_node;
    int32_t **undo_opnd;
} Remat;

static const IrInstr *src_of(const MfGraph *g, int32_t x)
{
    return &g->c->instr[g->node[x].src];
}

/* May o, dead before a copy that reads it, be kept alive to it instead of
 * recomputed: a value that must run once (a collective's result, a random
 * draw) or one at the end of the chain's depth, never a referring
 * instruction (its buffer is another's; parameters: read_as_is)? A batch norm's statistics, all-reduced over
 * the batch: the normalized activation is made again from the
 * convolution and the kept mean, as XLA's rematerialization keeps a
 * collective's output while recomputing across it. */
static bool keepable(const MfGraph *g, int32_t o)
{
    const IrInstr *ins = src_of(g, o);
    return ins->shape.type != IR_TUPLE && !mf_refers(ins->op);
}

/* A new query over nnode nodes: the answers kept so far forgotten. */
static void memo_begin(Memo *m, int32_t nnode)
{
    int64_t need = (int64_t)nnode * (MAX_CHAIN + 1);
    if (need > m->cap) {
        need *= 2; /* the copies the fit adds grow the graph: room for as many again */
        ts_free(m->stamp);
        ts_free(m->val);
        m->stamp = ts_calloc((size_t)need, sizeof *m->stamp);
        m->val = ts_malloc((size_t)need * sizeof *m->val);
        if (!m->stamp || !m->val) {
            ts_free(m->stamp);
            ts_free(m->val);
            *m = (Memo){0};
            return;
        }
        m->cap = need;
        m->gen = 0;
    }
    if (++m->gen == 0) { /* wrapped: every stamp is stale again */
        memset(m->stamp, 0, (size_t)m->cap * sizeof *m->stamp);
        m->gen = 1;
    }
}

static bool memo_get(const Memo *m, int32_t o, int depth, double *v)
{
    int64_t k = (int64_t)o * (MAX_CHAIN + 1) + depth;
    if (!m->stamp || depth > MAX_CHAIN || k >= m->cap || m->stamp[k] != m->gen)
        return false;
    *v = m->val[k];
    return true;
}

static void memo_put(Memo *m, int32_t o, int depth, double v)
{
    int64_t k = (int64_t)o * (MAX_CHAIN + 1) + depth;
    if (m->stamp && depth <= MAX_CHAIN && k < m->cap) {
        m->stamp[k] = m->gen;
        m->val[k] = v;
    }
}

/* Is o read as it is by a copy placed just before position u (live there,
 * held, or kept alive to it), not recomputed (depth levels so far)? A
 * donated parameter past its last read is kept alive to the copy, even
 * past the update that writes its output over it: the run writes over a
 * buffer only when it holds the one reference (device/exec.c), so the
 * update then takes a buffer of its own and the copy reads the parameter
 * as it was (the estimate counts both; the plan says "read after: the run
 * keeps a copy"). A relu MLP's momentum step makes its first layer's
 * activation again from x and the first weight for the weight gradient
 * of the layer above, after the first weight's update (0.52 P -> 0.50 P
 * on 1 device). */
static bool read_as_is(const Remat *r, int32_t o, int32_t u, int depth)
{
    if (r->last[o] >= u || r->g->node[o].held || src_of(r->g, o)->op == OP_PARAMETER)
        return true;
    return (depth >= MAX_CHAIN || !can_remat(r->g->m, src_of(r->g, o), 0, r->g->elements)) && keepable(r->g, o);
}

/* The bytes of the values a copy placed before u keeps alive past their
 * last use (read_as_is), not live at position `at` now (the peak). */
static int64_t kept_bytes(const Remat *r, int32_t o, int32_t u, int32_t at, int depth)
{
    if (r->last[o] >= u || r->g->node[o].held)
        return 0;
    if (read_as_is(r, o, u, depth))
        return r->last[o] < at ? r->g->node[o].bytes : 0;
    double v;
    Memo *m = (Memo *)&r->memo[MEMO_KEPT];
    if (memo_get(m, o, depth, &v))
        return (int64_t)v;
    int64_t b = 0;
    for (int32_t j = 0; j < r->g->node[o].nopnd; j++)
        b += kept_bytes(r, r->g->node[o].opnd[j], u, at, depth + 1);
    memo_put(m, o, depth, (double)b);
    return b;
}

/* Can operand o be read by a copy placed just before position u, as it
 * is, or recomputed there (depth levels so far)? */
static bool reachable(const Remat *r, int32_t o, int32_t u, int depth)
{
    const IrInstr *ins = src_of(r->g, o);
    if (read_as_is(r, o, u, depth))
        return true;
    if (depth >= MAX_CHAIN || !can_remat(r->g->m, ins, 0, r->g->elements))
        return false;
    double v;
    Memo *m = (Memo *)&r->memo[MEMO_REACH];
    if (memo_get(m, o, depth, &v))
        return v != 0;
    bool ok = true;
    for (int32_t j = 0; ok && j < r->g->node[o].nopnd; j++)
        ok = reachable(r, r->g->node[o].opnd[j], u, depth + 1);
    memo_put(m, o, depth, ok);
    return ok;
}

/* FLOPs + elements of recomputing o before u (0 when o is read as is). */
static double cost_at(const Remat *r, int32_t o, int32_t u, int depth)
{
    const IrInstr *ins = src_of(r->g, o);
    if (depth > 0 && read_as_is(r, o, u, depth))
        return 0;
    double v;
    Memo *m = (Memo *)&r->memo[MEMO_COST];
    if (memo_get(m, o, depth, &v))
        return v;
    int64_t e = ir_shape_elements(&ins->shape);
    double c = (double)mf_flops(r->g->m, r->g->c, ins) + (double)(e > 0 ? e : 0);
    for (int32_t j = 0; j < r->g->node[o].nopnd; j++)
        c += cost_at(r, r->g->node[o].opnd[j], u, depth + 1);
    memo_put(m, o, depth, c);
    return c;
}

/* The copies a recomputation of o before u makes (0 when o is read as
 * is), counted no further than past MAX_COPIES: one per path down to
 * each value copied (copy_for). A 6-layer chain of diamonds at 0.3 of
 * its peak made 4 million for one candidate, and its fit took 157 s; with
 * no candidate past MAX_COPIES, 0.2 s, the same plan. */
static double copies_at(const Remat *r, int32_t o, int32_t u, int depth)
{
    if (depth > 0 && read_as_is(r, o, u, depth))
        return 0;
    double v;
    Memo *m = (Memo *)&r->memo[MEMO_COUNT];
    if (memo_get(m, o, depth, &v))
        return v;
    double c = 1;
    for (int32_t j = 0; j < r->g->node[o].nopnd && c <= MAX_COPIES; j++)
        c += copies_at(r, r->g->node[o].opnd[j], u, depth + 1);
    memo_put(m, o, depth, c);
    return c;
}

/* *p reallocated to n elements of `size` bytes; false (p kept) on OOM. */
static bool grow(void **p, int32_t n, size_t size)
{
    void *q = ts_realloc(*p, (size_t)n * size);
    if (q)
        *p = q;
    return q != NULL;
}

/* Grow the graph's node and sequence arrays for `more` nodes. */
static bool room(Remat *r, int32_t more)
{
    MfGraph *g = r->g;
    if (g->nnode + more > g->capnode) {
        int32_t cap = (g->nnode + more) * 2;
        MfNode *nn = ir_alloc_array(g->arena, (size_t)cap, sizeof *nn);
        int32_t *ns = ir_alloc_array(g->arena, (size_t)cap, sizeof *ns);
        if (!nn || !ns)
            return false;
        memcpy(nn, g->node, (size_t)g->nnode * sizeof *nn);
        memcpy(ns, g->seq, (size_t)g->nseq * sizeof *ns);
        g->node = nn;
        g->seq = ns;
        g->capnode = cap;
    }
    if (g->nnode + more > r->cap) {
        int32_t cap = (g->nnode + more) * 2;
        if (!grow((void **)&r->pos, cap, sizeof *r->pos) || !grow((void **)&r->last, cap, sizeof *r->last) ||
            !grow((void **)&r->next, cap, sizeof *r->next) || !grow((void **)&r->ins, cap, sizeof *r->ins) ||
            !grow((void **)&r->undo_node, cap, sizeof *r->undo_node) ||
            !grow((void **)&r->undo_opnd, cap, sizeof *r->undo_opnd) ||
            !grow((void **)&r->seq0, cap, sizeof *r->seq0))
            return false;
        r->cap = cap;
    }
    return true;
}

/* The node a copy placed before u reads for o: o itself, or a new copy
 * of o (appended to r->ins after the copies of its operands); -1 on OOM. */
static int32_t copy_for(Remat *r, int32_t o, int32_t u, int depth)
{
    MfGraph *g = r->g;
    if (depth > 0 && read_as_is(r, o, u, depth))
        return o;
    int32_t n = g->node[o].nopnd;
    int32_t *opnd = ir_alloc_array(g->arena, (size_t)(n ? n : 1), sizeof *opnd);
    if (!opnd || !room(r, 1))
        return -1;
    for (int32_t j = 0; j < n; j++)
        if ((opnd[j] = copy_for(r, g->node[o].opnd[j], u, depth + 1)) < 0)
            return -1;
    if (!room(r, 1))
        return -1;
    int32_t x = g->nnode++;
    g->node[x] = (MfNode){.src = g->node[o].src, .nopnd = n, .opnd = opnd, .bytes = g->node[o].bytes,
                          .clone = true};
    r->ins[r->nins++] = x;
    return x;
}

/* Recompute v before its first use after the peak; false on OOM. */
static bool apply(Remat *r, int32_t v)
{
    MfGraph *g = r->g;
    int32_t u = r->next[v];
    r->nnode0 = g->nnode;
    r->nseq0 = g->nseq;
    r->nundo = 0;
    r->nins = 0;
    memcpy(r->seq0, g->seq, (size_t)g->nseq * sizeof *g->seq);
    int32_t nv = copy_for(r, v, u, 0);
    if (nv < 0 || !room(r, 0))
        return false;
    /* Every later user reads the copy. */
    if (!mf_redirect(g, u, v, nv, r->undo_node, r->undo_opnd, &r->nundo))
        return false;
    memmove(g->seq + u + r->nins, g->seq + u, (size_t)(g->nseq - u) * sizeof *g->seq);
    memcpy(g->seq + u, r->ins, (size_t)r->nins * sizeof *g->seq);
    g->nseq += r->nins;
    return true;
}

static void undo(Remat *r)
{
    r->g->nnode = r->nnode0;
    mf_restore(r->g, r->undo_node, r->undo_opnd, r->nundo, r->seq0, r->nseq0);
}

static int by_price(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->price != y->price)
        return x->price < y->price ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The candidates at the peak position `at`, cheapest first; -1 on OOM. */
static int32_t candidates(Remat *r, int32_t at, Cand **out)
{
    MfGraph *g = r->g;
    for (int32_t x = 0; x < g->nnode; x++)
        r->next[x] = -1;
    for (int32_t k = g->nseq - 1; k > at; k--) {
        const MfNode *x = &g->node[g->seq[k]];
        for (int32_t j = 0; j < x->nopnd; j++)
            r->next[x->opnd[j]] = k;
    }
    const MfNode *here = &g->node[g->seq[at]];
    Cand *c = ts_malloc((size_t)g->nseq * sizeof *c);
    if (!c)
        return -1;
    int32_t n = 0;
    for (int32_t k = 0; k < at; k++) {
        int32_t v = g->seq[k];
        bool used_here = false;
        for (int32_t j = 0; j < here->nopnd; j++)
            used_here = used_here || here->opnd[j] == v;
        if (used_here || v == g->root || r->next[v] < 0 || g->node[v].bytes == 0 ||
            !can_remat(g->m, src_of(g, v), 0, g->elements))
            continue;
        int32_t u = r->next[v];
        for (int q = 0; q < NMEMO; q++)
            memo_begin(&r->memo[q], g->nnode); /* a new copy position u */
        int64_t saved = g->node[v].bytes;
        bool ok = true;
        for (int32_t j = 0; ok && j < g->node[v].nopnd; j++) {
            int32_t o = g->node[v].opnd[j];
            ok = reachable(r, o, u, 1);
            if (src_of(g, o)->op == OP_PARAMETER && !g->node[o].held && r->last[o] < at)
                saved -= g->node[o].bytes;
            else if (ok)
                saved -= kept_bytes(r, o, u, at, 1);
        }
        if (!ok || saved <= 0 || copies_at(r, v, u, 0) > MAX_COPIES)
            continue;
        c[n++] = (Cand){v, cost_at(r, v, u, 0) / (double)saved, k};
    }
    qsort(c, (size_t)n, sizeof *c, by_price);
    *out = c;
    return n;
}

/* One step at position `at`: the first of the cheapest candidates there
 * that lowers the model's peak (or its positions at it) or, by_estimate,
 * the estimate's own peak below `peak` (fits, ctx); *kept says whether
 * one was. false when out of memory. */
static bool step_at(Remat *r, int32_t at, const MfProfile *pr, bool by_estimate, int64_t peak, MfFits fits,
                    void *ctx, bool *kept)
{
    Cand *c = NULL;
    int32_t n = candidates(r, at, &c);
    bool ok = n >= 0;
    *kept = false;
    for (int32_t i = 0; ok && !*kept && i < n && i < MAX_TRIES; i++) {
        /* (undo restores what pos, last and next describe; the model's
         * profile is not needed where the estimate decides) */
        MfProfile np;
        ok = apply(r, c[i].node) && (by_estimate || mf_profile(r->g, &np, NULL, NULL));
        if (ok && by_estimate) {
            int64_t now;
            int32_t where;
            ok = fits(ctx, r->g, &now, &where) >= 0;
            *kept = ok && now < peak;
        } else if (ok) {
            *kept = np.peak < pr->peak || (np.peak == pr->peak && np.npeak < pr->npeak);
        }
        if (ok && !*kept)
            undo(r);
    }
    ts_free(c);
    return ok;
}

bool mf_remat(MfGraph *g, MfFits fits, void *ctx)
{
    Remat r = {.g = g};
    bool ok = room(&r, 1);
    int32_t steps = 4 * g->nnode + 64;
    while (ok && steps-- > 0) {
        MfProfile pr;
        int64_t peak;
        int32_t at;
        int f = fits(ctx, g, &peak, &at);
        ok = f >= 0 && room(&r, 0) && mf_profile(g, &pr, r.pos, r.last);
        if (!ok || f > 0)
            break;
        bool kept = false;
        ok = step_at(&r, pr.at, &pr, false, 0, fits, ctx, &kept);
        /* The model's peak is not the estimate's (it leaves out the
         * executor's fusion and buffer reuse): where the model has
         * nothing left to drop, the values across the estimate's own peak
         * are tried, each kept when the estimate falls. */
        if (ok && !kept && at >= 0 && at != pr.at && room(&r, 0) && mf_profile(g, &pr, r.pos, r.last))
            ok = step_at(&r, at, &pr, true, peak, fits, ctx, &kept);
        if (!kept)
            break;
    }
    ts_free(r.pos);
    ts_free(r.last);
    ts_free(r.next);
    ts_free(r.ins);
    ts_free(r.undo_node);
    ts_free(r.undo_opnd);
    ts_free(r.seq0);
    for (int q = 0; q < NMEMO; q++) {
        ts_free(r.memo[q].stamp);
        ts_free(r.memo[q].val);
    }
    return ok;
}
