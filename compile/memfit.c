/*
 * memfit.c: fit a memory limit (`--limit memory=BYTES`, docs/plan.md,
 * "Fitting a memory limit"). After partitioning, an SPMD program whose
 * estimated peak per device is over the limit is first reordered to
 * lower its peak (memfit_schedule.c), then values are recomputed near
 * their late uses instead of being kept (memfit_remat.c), as XLA's
 * memory-minimising schedulers and HloRematerialization do; once an
 * order fits, the copies it no longer needs are dropped
 * (memfit_prune.c). The result
 * is written back into the module in its new order, marked
 * is_scheduled=true so that the executor runs that order (device/exec.c);
 * each recomputation is a copy of its instruction named NAME.remat with
 * the frontend attribute _tessel_remat="NAME", so a plan file says what
 * was recomputed (compile_remat_list) without anything beside it.
 *
 * When nothing fits, the search is made again with the instructions that
 * compute the same value merged (memfit_merge.c) and a recomputable
 * call's tuple elements recomputed, then with masks kept apart
 * (memfit_mask.c), then from the dots checkpoint (memfit_ckpt.c: the
 * copies `tessel grad --remat dots` would make, all at once, where the
 * remat step's one at a time pay only together).
 *
 * Example: y = exp(x) used at once and again at the end, with a large
 * temporary between: y's copy runs just before the late use, y itself
 * dies after the first, and the temporary's peak no longer holds y.
 *
 * Only the entry computation is fitted (a loop body's values are not in
 * the estimate). Nothing changes when the peak is within the limit.
 */
#include "memfit.h"

#include <stdio.h>
#include <string.h>

/* The attribute a recomputation carries: the name of what it recomputes. */
#define REMAT_ATTR "_tessel_remat"

/* Bytes of the array leaves of s (tokens: 0). */
static int64_t shape_bytes(const IrShape *s)
{
    if (s->type == IR_TUPLE) {
        int64_t b = 0;
        for (int32_t k = 0; k < s->ntuple; k++)
            b += shape_bytes(&s->tuple[k]);
        return b;
    }
    int64_t b = s->type == IR_TOKEN ? 0 : ir_shape_bytes(s);
    return b > 0 ? b : 0;
}

int64_t mf_value_bytes(const IrInstr *ins)
{
    return mf_refers(ins->op) ? 0 : shape_bytes(&ins->shape);
}

bool mf_refers(IrOpcode op)
{
    switch (op) {
    case OP_TUPLE: case OP_GET_TUPLE_ELEMENT: case OP_COPY: case OP_OPTIMIZATION_BARRIER:
    case OP_DOMAIN: case OP_ADD_DEPENDENCY: case OP_ASYNC_UPDATE: case OP_ALL_REDUCE_DONE:
        return true;
    default:
        return false;
    }
}

bool mf_ordered(IrOpcode op)
{
    switch (op) {
    case OP_SEND: case OP_SEND_DONE: case OP_RECV: case OP_RECV_DONE: case OP_INFEED: case OP_OUTFEED:
    case OP_CUSTOM_CALL: case OP_RNG: case OP_RNG_GET_AND_UPDATE_STATE: case OP_ASYNC_START:
    case OP_ASYNC_UPDATE: case OP_ASYNC_DONE: case OP_COPY_START: case OP_COPY_DONE: case OP_AFTER_ALL:
        return true;
    default:
        return ir_op_family(op) == FAM_COLLECTIVE;
    }
}

bool mf_sequenced(IrOpcode op)
{
    return mf_ordered(op) && ir_op_family(op) != FAM_COLLECTIVE;
}

/* The bytes node x at position k takes from an operand of its own size
 * that dies there (last[] its last user's position): an elementwise
 * result written over that operand, as the executor's fused groups and
 * the estimate's model do; 0 when none. A held parameter is no candidate
 * (the caller keeps it). */
static int64_t reused_bytes(const MfGraph *g, const MfNode *x, int32_t k, const int32_t *last,
                            const uint8_t *interior)
{
    if (!ir_op_is_elementwise(g->c->instr[x->src].op) || x->bytes == 0)
        return 0;
    for (int32_t j = 0; j < x->nopnd; j++) {
        const MfNode *o = &g->node[x->opnd[j]];
        if (last[x->opnd[j]] == k && !o->held && !interior[x->opnd[j]] && o->bytes == x->bytes &&
            !mf_refers(g->c->instr[o->src].op))
            return x->bytes;
    }
    return 0;
}

/* May ins be a member of one of the executor's fused elementwise groups
 * (ir/fusion_find.c, whose groups partition/memory.c counts; a quick
 * approximation of them here, on the graph's remat clones too): an
 * elementwise op of one to three operands, a broadcast, a small
 * transpose? */
static bool fusable(const IrInstr *ins, bool as_root)
{
    if (!ir_shape_is_array(&ins->shape) || ins->a.x->control_predecessors.n > 0)
        return false;
    if (!as_root && ins->op == OP_BROADCAST)
        return ins->nopnd == 1;
    if (!as_root && ins->op == OP_TRANSPOSE)
        return ins->nopnd == 1 && ir_shape_elements(&ins->shape) <= 1 << 16;
    return ir_op_is_elementwise(ins->op) && ins->op != OP_COPY && ins->op != OP_MAP && ins->nopnd >= 1 &&
           ins->nopnd <= 3 && (!as_root || ir_shape_elements(&ins->shape) >= 1024);
}

/* interior[x]: is node x inside a fused group (its one user an
 * elementwise op of its dims, which reads it as it runs): its value never
 * exists, its operands are read when that user runs. sole: scratch. */
static void fused_interior(const MfGraph *g, int32_t *sole, uint8_t *interior)
{
    for (int32_t x = 0; x < g->nnode; x++) {
        sole[x] = -1;
        interior[x] = 0;
    }
    for (int32_t k = 0; k < g->nseq; k++) {
        int32_t u = g->seq[k];
        for (int32_t j = 0; j < g->node[u].nopnd; j++) {
            int32_t o = g->node[u].opnd[j];
            sole[o] = sole[o] == -1 || sole[o] == u ? u : -2;
        }
    }
    for (int32_t k = 0; k < g->nseq; k++) {
        int32_t x = g->seq[k], u = sole[x];
        const IrInstr *xi = &g->c->instr[g->node[x].src];
        if (u < 0 || x == g->root || g->node[x].held || xi->op == OP_PARAMETER || !fusable(xi, false))
            continue;
        const IrInstr *ui = &g->c->instr[g->node[u].src];
        interior[x] = fusable(ui, true) && ir_shape_same_dims(&xi->shape, &ui->shape);
    }
}

bool mf_profile(const MfGraph *g, MfProfile *p, int32_t *pos, int32_t *last)
{
    int32_t n = g->nnode;
    int32_t *ps = pos ? pos : ts_malloc((size_t)(n ? n : 1) * sizeof *ps);
    int32_t *ls = last ? last : ts_malloc((size_t)(n ? n : 1) * sizeof *ls);
    int64_t *freed = ts_calloc((size_t)g->nseq + 1, sizeof *freed);
    int32_t *sole = ts_malloc((size_t)(n ? n : 1) * sizeof *sole);
    uint8_t *interior = ts_malloc((size_t)(n ? n : 1));
    bool ok = ps && ls && freed && sole && interior;
    if (ok) {
        fused_interior(g, sole, interior);
        if (!g->fusion)
            memset(interior, 0, (size_t)n);
        for (int32_t k = 0; k < g->nseq; k++)
            ps[g->seq[k]] = ls[g->seq[k]] = k;
        ls[g->root] = g->nseq;
        /* Backwards: a referring user, or one inside a fused group, keeps
         * its operands as long as itself. */
        for (int32_t k = g->nseq - 1; k >= 0; k--) {
            const MfNode *x = &g->node[g->seq[k]];
            bool refers = mf_refers(g->c->instr[x->src].op) || interior[g->seq[k]];
            int32_t until = refers ? ls[g->seq[k]] : k;
            for (int32_t j = 0; j < x->nopnd; j++)
                if (ls[x->opnd[j]] < until)
                    ls[x->opnd[j]] = until;
        }
        int64_t live = g->start_bytes;
        *p = (MfProfile){live, -1, 1};
        for (int32_t k = 0; k < g->nseq; k++) {
            const MfNode *x = &g->node[g->seq[k]];
            int64_t bytes = interior[g->seq[k]] ? 0 : x->bytes;
            int64_t reused = reused_bytes(g, x, k, ls, interior);
            live += bytes - reused;
            if (live > p->peak)
                *p = (MfProfile){live, k, 0};
            if (live == p->peak)
                p->npeak++;
            freed[ls[g->seq[k]]] += bytes;
            live -= freed[k] - reused;
        }
    }
    if (!pos)
        ts_free(ps);
    if (!last)
        ts_free(ls);
    ts_free(freed);
    ts_free(sole);
    ts_free(interior);
    return ok;
}

/* The graph of c: a node per instruction, seq the executor's order
 * (instructions it does not run are nodes outside seq). Parameters hold
 * no bytes of their own: the caller holds them throughout (start_bytes),
 * but for those its input_output_alias pairs donate, which die at their
 * last read like any value. IR_OK, the order's IR_EINPUT (in d), or
 * IR_ENOMEM (not in d). */
static IrStatus graph_build(MfGraph *g, const IrModule *m, const IrComputation *c, IrDiag *d)
{
    memset(g, 0, sizeof *g);
    g->m = m;
    g->c = c;
    int32_t n = c->ninstr;
    g->arena = ir_arena_new();
    g->capnode = n + 16;
    g->node = g->arena ? ir_alloc_array(g->arena, (size_t)g->capnode, sizeof *g->node) : NULL;
    g->seq = g->arena ? ir_alloc_array(g->arena, (size_t)g->capnode, sizeof *g->seq) : NULL;
    if (!g->node || !g->seq)
        return IR_ENOMEM;
    IrExecOrderError e;
    IrStatus st = ir_exec_order_of(m, c, g->seq, &g->nseq, &e);
    if (st == IR_EINPUT)
        return ir_error(d, st, m->file, m->src, c->instr[e.at].pos, "%s: a cycle or a bad operand",
                        c->instr[e.at].name);
    if (st != IR_OK)
        return st;
    bool *donated = ts_calloc((size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *donated);
    if (!donated)
        return IR_ENOMEM;
    if (c == ir_entry(m))
        ir_alias_donated(m, donated, c->nparam);
    for (int32_t i = 0; i < n; i++) {
        const IrInstr *ins = &c->instr[i];
        MfNode *x = &g->node[i];
        int64_t pn = ins->a.parameter_number;
        bool param = ins->op == OP_PARAMETER;
        bool held = param && !(pn >= 0 && pn < c->nparam && donated[pn]);
        int64_t bytes = held ? 0 : param ? shape_bytes(&ins->shape) : mf_value_bytes(ins);
        *x = (MfNode){.src = i, .nopnd = ins->nopnd, .bytes = bytes, .held = held};
        g->start_bytes += held ? shape_bytes(&ins->shape) : 0;
        x->opnd = ir_alloc_array(g->arena, (size_t)(ins->nopnd ? ins->nopnd : 1), sizeof *x->opnd);
        if (!x->opnd) {
            ts_free(donated);
            return IR_ENOMEM;
        }
        if (ins->nopnd > 0)
            memcpy(x->opnd, ins->opnd, (size_t)ins->nopnd * sizeof *x->opnd);
    }
    ts_free(donated);
    g->nnode = n;
    g->root = c->root;
    return IR_OK;
}

bool mf_mark(IrArena *ar, IrAttrs *a, const char *key, const char *value)
{
    IrKeyValue *kv = ir_alloc_array(ar, (size_t)a->nfrontend + 1, sizeof *kv);
    if (!kv)
        return false;
    int32_t n = 0;
    for (int32_t k = 0; k < a->nfrontend; k++)
        if (strcmp(a->frontend[k].key, key) != 0)
            kv[n++] = a->frontend[k];
    kv[n].key = key;
    kv[n].value = ir_strdup(ar, value);
    a->frontend = kv;
    a->nfrontend = n + 1;
    return kv[n].value != NULL;
}

bool mf_redirect(MfGraph *g, int32_t from, int32_t old, int32_t nw, int32_t *undo_node, int32_t **undo_opnd,
                 int32_t *nundo)
{
    for (int32_t k = from; k < g->nseq; k++) {
        MfNode *x = &g->node[g->seq[k]];
        bool reads = false;
        for (int32_t j = 0; j < x->nopnd; j++)
            reads = reads || x->opnd[j] == old;
        if (!reads)
            continue;
        int32_t *no = ir_alloc_array(g->arena, (size_t)x->nopnd, sizeof *no);
        if (!no)
            return false;
        for (int32_t j = 0; j < x->nopnd; j++)
            no[j] = x->opnd[j] == old ? nw : x->opnd[j];
        undo_node[*nundo] = g->seq[k];
        undo_opnd[(*nundo)++] = x->opnd;
        x->opnd = no;
    }
    return true;
}

void mf_restore(MfGraph *g, const int32_t *undo_node, int32_t *const *undo_opnd, int32_t nundo, const int32_t *seq0,
                int32_t nseq0)
{
    for (int32_t k = 0; k < nundo; k++)
        g->node[undo_node[k]].opnd = undo_opnd[k];
    g->nseq = nseq0;
    memcpy(g->seq, seq0, (size_t)nseq0 * sizeof *g->seq);
}

/* The instructions of a computation of ninstr written from g: list[k]
 * the node at place k (seq, then the instructions that do not run, in
 * their own order: the stable topological order then lists seq first,
 * the executor's order of the module marked is_scheduled,
 * ir_exec_order_of), at[x] node x's place (nnode entries each). The
 * number of places. */
static int32_t graph_places(const MfGraph *g, int32_t ninstr, int32_t *at, int32_t *list)
{
    int32_t n = g->nseq;
    for (int32_t x = 0; x < g->nnode; x++)
        at[x] = -1;
    for (int32_t k = 0; k < g->nseq; k++)
        at[list[k] = g->seq[k]] = k;
    for (int32_t i = 0; i < ninstr; i++)
        if (at[i] < 0)
            at[list[n] = i] = n, n++;
    return n;
}

/* Write g back into its computation c: instructions in g's order, each
 * recomputation a renamed copy. false when out of memory (c may then be
 * half written: the caller drops the module). */
static bool graph_commit(const MfGraph *g, IrModule *m, IrComputation *c)
{
    int32_t *at = ts_malloc((size_t)g->nnode * sizeof *at);
    int32_t *list = ts_malloc((size_t)g->nnode * sizeof *list);
    bool ok = at && list;
    int32_t n = ok ? graph_places(g, c->ninstr, at, list) : 0;
    IrInstr *out = ok ? ts_malloc((size_t)n * sizeof *out) : NULL;
    ok = ok && out;
    for (int32_t k = 0; ok && k < n; k++) {
        const MfNode *x = &g->node[list[k]];
        IrInstr ni = c->instr[x->src];
        ni.opnd = ir_alloc_array(m->arena, (size_t)(x->nopnd ? x->nopnd : 1), sizeof *ni.opnd);
        ok = ni.opnd != NULL;
        for (int32_t j = 0; ok && j < x->nopnd; j++)
            ni.opnd[j] = at[x->opnd[j]];
        const IrI64List *cp = &ni.a.x->control_predecessors;
        if (ok && cp->n > 0) {
            IrAttrsX *ax = ir_attrs_x_edit(m->arena, &ni.a);
            int64_t *v = ax ? ir_alloc_array(m->arena, (size_t)cp->n, sizeof *v) : NULL;
            ok = v != NULL;
            for (int32_t j = 0; ok && j < cp->n; j++)
                v[j] = at[cp->v[j]];
            if (ok)
                ax->control_predecessors.v = v;
        }
        if (ok && x->clone) {
            char base[512];
            snprintf(base, sizeof base, "%s.remat", c->instr[x->src].name);
            ni.name = ir_unique_name(m, base);
            ok = ni.name && mf_mark(m->arena, &ni.a, REMAT_ATTR, c->instr[x->src].name);
        }
        if (ok)
            out[k] = ni;
    }
    if (ok)
        ok = ir_reserve_instrs(c, n) == IR_OK;
    if (ok) {
        memcpy(c->instr, out, (size_t)n * sizeof *out);
        c->ninstr = n;
        c->root = at[g->root];
        for (int32_t i = 0; i < c->nparam; i++)
            if (c->param[i] >= 0)
                c->param[i] = at[c->param[i]];
    }
    ts_free(at);
    ts_free(list);
    ts_free(out);
    return ok;
}

/* An order of the graph as the estimate reads it, without a copy of the
 * module: a shallow copy of it (its computations shared) whose entry is
 * a computation of its own, rewritten for each order tried in buffers
 * kept from one to the next. Its instructions are the entry's, their
 * operands and control predecessors renumbered; a recomputation keeps
 * the name and attributes of what it recomputes (the estimate reads
 * neither; graph_commit names it). */
typedef struct Trial {
    IrModule m;
    IrComputation c;
    IrComputation **comp;   /* m's: the module's, but the entry c */
    const IrComputation *src; /* the module's entry */
    int32_t cap;            /* entries of instr, at, list */
    IrInstr *instr;
    int32_t *at, *list;
    int64_t capopnd;
    int32_t *opnd;          /* every instruction's operands, one after another */
    int32_t *param;
    IrAttrsX **cpx;         /* per instruction of src with control
                             * predecessors: its attributes, renumbered */
    /* The last order estimated: per place its instruction (2 src +
     * clone), operand count and operands' places, then the root's place
     * (nkey entries), and its estimate; a trial equal to it is not
     * estimated again (a step kept by the estimate is what the next
     * step's check sees). */
    int64_t nkey, capkey;
    int32_t *key, *key2;
    int64_t peak;
    int32_t peak_at;
} Trial;

static void trial_free(Trial *t)
{
    for (int32_t i = 0; t->cpx && i < t->src->ninstr; i++)
        if (t->cpx[i]) {
            ts_free(t->cpx[i]->control_predecessors.v);
            ts_free(t->cpx[i]);
        }
    ts_free(t->cpx);
    ts_free(t->comp);
    ts_free(t->instr);
    ts_free(t->at);
    ts_free(t->list);
    ts_free(t->opnd);
    ts_free(t->param);
    ts_free(t->key);
    ts_free(t->key2);
    memset(t, 0, sizeof *t);
}

/* t set up for the module m (its entry as it is now); false when out of
 * memory (t then empty). */
static bool trial_init(Trial *t, const IrModule *m)
{
    const IrComputation *c = ir_entry(m);
    memset(t, 0, sizeof *t);
    t->m = *m;
    t->c = *c;
    t->src = c;
    t->comp = ts_malloc((size_t)m->ncomp * sizeof *t->comp);
    t->param = ts_malloc((size_t)(c->nparam > 0 ? c->nparam : 1) * sizeof *t->param);
    t->cpx = ts_calloc((size_t)(c->ninstr > 0 ? c->ninstr : 1), sizeof *t->cpx);
    if (!t->comp || !t->param || !t->cpx) {
        trial_free(t);
        return false;
    }
    memcpy(t->comp, m->comp, (size_t)m->ncomp * sizeof *t->comp);
    t->comp[m->entry] = &t->c;
    t->m.comp = t->comp;
    t->m.is_scheduled = true;
    t->c.param = t->param;
    t->c.capparam = c->nparam;
    return true;
}

/* g's order written into t's entry; *same: it is the last order
 * written (t's entry then left as it was). false when out of memory. */
static bool trial_write(Trial *t, const MfGraph *g, bool *same)
{
    const IrComputation *src = t->src;
    *same = false;
    if (g->nnode > t->cap) {
        int32_t cap = g->nnode * 2;
        IrInstr *ni = ts_realloc(t->instr, (size_t)cap * sizeof *ni);
        t->instr = ni ? ni : t->instr;
        int32_t *na = ni ? ts_realloc(t->at, (size_t)cap * sizeof *na) : NULL;
        t->at = na ? na : t->at;
        int32_t *nl = na ? ts_realloc(t->list, (size_t)cap * sizeof *nl) : NULL;
        t->list = nl ? nl : t->list;
        if (!nl)
            return false;
        t->cap = cap;
    }
    int32_t n = graph_places(g, src->ninstr, t->at, t->list);
    int64_t nop = 0;
    for (int32_t k = 0; k < n; k++)
        nop += g->node[t->list[k]].nopnd;
    int64_t nkey = 2 * (int64_t)n + nop + 1;
    if (nkey > t->capkey) {
        int32_t *k1 = ts_realloc(t->key, (size_t)(2 * nkey) * sizeof *k1);
        t->key = k1 ? k1 : t->key;
        int32_t *k2 = k1 ? ts_realloc(t->key2, (size_t)(2 * nkey) * sizeof *k2) : NULL;
        t->key2 = k2 ? k2 : t->key2;
        if (!k2)
            return false;
        t->capkey = 2 * nkey;
    }
    int32_t *key = t->key2, *kp = key;
    for (int32_t k = 0; k < n; k++) {
        const MfNode *x = &g->node[t->list[k]];
        *kp++ = 2 * x->src + x->clone;
        *kp++ = x->nopnd;
        for (int32_t j = 0; j < x->nopnd; j++)
            *kp++ = t->at[x->opnd[j]];
    }
    *kp = t->at[g->root];
    *same = t->nkey == nkey && memcmp(t->key, key, (size_t)nkey * sizeof *key) == 0;
    if (*same)
        return true;
    t->key2 = t->key;
    t->key = key;
    t->nkey = nkey;
    if (nop > t->capopnd) {
        int32_t *no = ts_realloc(t->opnd, (size_t)(2 * nop) * sizeof *no);
        if (!no)
            return false;
        t->opnd = no;
        t->capopnd = 2 * nop;
    }
    int32_t *op = t->opnd;
    for (int32_t k = 0; k < n; k++) {
        const MfNode *x = &g->node[t->list[k]];
        IrInstr *ni = &t->instr[k];
        *ni = src->instr[x->src];
        ni->opnd = op;
        for (int32_t j = 0; j < x->nopnd; j++)
            *op++ = t->at[x->opnd[j]];
        const IrI64List *cp = &src->instr[x->src].a.x->control_predecessors;
        if (cp->n > 0) {
            IrAttrsX *ax = t->cpx[x->src];
            if (!ax) {
                ax = ts_malloc(sizeof *ax);
                int64_t *v = ax ? ts_malloc((size_t)cp->n * sizeof *v) : NULL;
                if (!v) {
                    ts_free(ax);
                    return false;
                }
                *ax = *src->instr[x->src].a.x;
                ax->control_predecessors.v = v;
                t->cpx[x->src] = ax;
            }
            for (int32_t j = 0; j < cp->n; j++)
                ax->control_predecessors.v[j] = t->at[cp->v[j]];
            ni->a.x = ax;
        }
    }
    t->c.instr = t->instr;
    t->c.ninstr = t->c.cap = n;
    t->c.root = t->at[g->root];
    for (int32_t i = 0; i < src->nparam; i++)
        t->param[i] = src->param[i] >= 0 ? t->at[src->param[i]] : -1;
    return true;
}

/* The verdict of the plan's estimate on an order of the graph. */
typedef struct Verdict {
    const IrModule *spmd;
    int64_t limit;
    int failed;      /* out of memory once: -1 from then on */
    int64_t least;   /* the least estimate of the orders tried (-1: none) */
    int64_t last;    /* the estimate of the last order tried */
    Trial trial;     /* set up at the first order tried (trial.src) */
} Verdict;

/* The estimated peak of m's entry with the parameters its
 * input_output_alias pairs donate freed at their last read, as the run
 * does and the plan prints (plan_memory): what the fit holds to the
 * limit. *at (may be NULL) receives the entry's instruction running at
 * it (-1: before the first step). -1 when out of memory. */
static int64_t fit_peak_at(const IrModule *m, int32_t *at)
{
    const IrComputation *c = ir_entry(m);
    int32_t np = c ? c->nparam : 0;
    if (at)
        *at = -1;
    if (!c)
        return 0;
    bool *donated = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *donated);
    if (!donated)
        return -1;
    ir_alias_donated(m, donated, np);
    MemOptions o = {.donated = donated, .nparams = np};
    MemEstimate e;
    IrDiag d = {0};
    IrStatus st = mem_estimate(m, m->entry, &o, &e, &d);
    ir_diag_clear(&d);
    ts_free(donated);
    if (st != IR_OK)
        return st == IR_ENOMEM ? -1 : 0;
    int64_t p = e.peak;
    if (at && e.peak_step >= 0 && e.peak_step < e.n)
        *at = e.order[e.peak_step];
    mem_estimate_free(&e);
    return p;
}

static int64_t fit_peak(const IrModule *m)
{
    return fit_peak_at(m, NULL);
}

/* Does g's order, written into a copy of the module, fit the limit by
 * the estimate itself (partition/memory.c, whose run-time fusion and
 * buffer reuse the graph's model leaves out)? 1 yes, 0 no, -1 out of
 * memory; *peak receives the estimate, *at the position in g->seq of the
 * step at it (-1 none: the written module lists seq first, so an
 * instruction's index there is its position). */
static int estimate_fits(void *ctx, const MfGraph *g, int64_t *peak_out, int32_t *at)
{
    Verdict *v = ctx;
    *at = -1;
    *peak_out = -1;
    if (v->failed)
        return -1;
    int r = -1;
    bool same = false;
    if ((v->trial.src || trial_init(&v->trial, v->spmd)) && trial_write(&v->trial, g, &same)) {
        int32_t i = v->trial.peak_at;
        int64_t peak = same ? v->trial.peak : fit_peak_at(&v->trial.m, &i);
        v->trial.peak = peak;
        v->trial.peak_at = i;
        r = peak < 0 ? -1 : peak <= v->limit;
        v->last = *peak_out = peak;
        *at = i >= 0 && i < g->nseq ? i : -1;
        if (peak >= 0 && (v->least < 0 || peak < v->least))
            v->least = peak;
    }
    if (r < 0)
        v->failed = -1;
    return r;
}

/* One attempt: g built afresh, ordered by schedule variant `variant`
 * (modulo MF_SCHEDULES; the first MF_SCHEDULES with the model of fused
 * groups, the others without: the two models of the estimate lead the
 * search apart, and either may come lower), then recomputed until it
 * fits; v->last receives its estimate. false
 * when out of memory. IR_EINPUT of the order goes to d (*st). */
static bool attempt(MfGraph *g, IrModule *spmd, int32_t variant, bool masks, bool elements, bool ckpt, Verdict *v,
                    IrStatus *st, IrDiag *d)
{
    *st = graph_build(g, spmd, ir_entry(spmd), d);
    if (*st != IR_OK)
        return *st != IR_ENOMEM;
    g->fusion = variant < MF_SCHEDULES;
    g->elements = elements;
    int64_t peak;
    int32_t at;
    bool ordered = (!ckpt || mf_checkpoint_dots(g)) && mf_schedule(g, variant % MF_SCHEDULES) &&
                   (!masks || mf_hoist_masks(g));
    int fits = ordered ? estimate_fits(v, g, &peak, &at) : -1;
    if (fits == 0 && (!mf_remat(g, estimate_fits, v) || !mf_sink_writers(g, estimate_fits, v) ||
                      (fits = estimate_fits(v, g, &peak, &at)) < 0))
        return false;
    /* fitted: the recomputations it no longer needs dropped (v->last then
     * the estimate of what is kept) */
    if (fits > 0 && (!mf_prune(g, estimate_fits, v) || (fits = estimate_fits(v, g, &peak, &at)) < 0))
        return false;
    return fits >= 0;
}

/* The FLOPs g's recomputations add to a run (the clones it runs). */
static int64_t graph_flops(const MfGraph *g)
{
    int64_t f = 0;
    for (int32_t k = 0; k < g->nseq; k++) {
        const MfNode *n = &g->node[g->seq[k]];
        if (n->clone && n->src >= 0 && n->src < g->c->ninstr)
            f += mf_flops(g->m, g->c, &g->c->instr[n->src]);
    }
    return f;
}

/* Each order the scheduler proposes for m, recomputed on top: of those
 * that fit, the one that recomputes least (its FLOPs; then the lower
 * peak), so that a looser limit never costs more than a stricter one
 * would (the first order that fitted could recompute 8 times the values
 * a later one needed: a 6-layer MLP step at 300,000 bytes ran 1.5x
 * its unlimited step, at 299,000 1.05x); where none fits, the one whose
 * estimate came lowest. Into *best (its arena the caller's) and
 * *best_peak. false when out of memory; an IR_EINPUT of the order into
 * *st and d. */
static bool search(IrModule *m, bool masks, bool elements, bool ckpt, Verdict *v, MfGraph *best, int64_t *best_peak,
                   IrStatus *st, IrDiag *d)
{
    bool ok = true;
    int64_t best_flops = -1;
    /* The orders of the fused-group model first: where one of them fits,
     * the others (without that model) are not tried (they cost as much
     * again and came no cheaper in the cases measured); from the dots
     * checkpoint (a last try, after every other has failed) those alone:
     * it adds a third to the time of a refusal, not two thirds, and the
     * steps it fits fit with them. */
    for (int32_t variant = 0;
         ok && variant < (ckpt ? 1 : 2) * MF_SCHEDULES && best_flops != 0 &&
         !(variant == MF_SCHEDULES && best_flops > 0);
         variant++) {
        MfGraph g;
        ok = attempt(&g, m, variant, masks, elements, ckpt, v, st, d);
        bool keep = false;
        int64_t flops = -1;
        if (ok && *st == IR_OK) {
            bool fits = v->last <= v->limit, best_fits = *best_peak >= 0 && *best_peak <= v->limit;
            flops = fits ? graph_flops(&g) : -1;
            keep = *best_peak < 0 || (fits && !best_fits) ||
                   (fits && (flops < best_flops || (flops == best_flops && v->last < *best_peak))) ||
                   (!fits && !best_fits && v->last < *best_peak);
        }
        if (keep) {
            ir_arena_free(best->arena);
            *best = g;
            *best_peak = v->last;
            best_flops = flops;
        } else {
            ir_arena_free(g.arena);
        }
        ok = ok && *st == IR_OK;
    }
    trial_free(&v->trial); /* (m may change after: set up again at the next search) */
    return ok;
}

/* The search again on a copy of spmd changed by `change` (the number of
 * changes it made; 0: none, nothing to search unless `elements`: the
 * attempts then recompute the elements of a recomputable call's tuple,
 * g->elements): when it comes lower than
 * *best, the same change is made to spmd itself (deterministic: the same
 * instructions, so best's nodes are spmd's) and its graph kept. With
 * `fit`, the bound of the changed program is taken when lower (a true
 * lower bound of either program), or no higher when that program is
 * kept (it names what runs). v->least takes the lesser least.
 * false when out of memory. */
static bool search_changed(IrModule *spmd, int32_t (*change)(IrModule *, IrComputation *), bool elements,
                           CompileFit *fit, Verdict *v, MfGraph *best, int64_t *best_peak, IrStatus *st, IrDiag *d)
{
    IrModule *alt = ir_module_clone(spmd);
    int32_t nchange = alt ? change(alt, ir_entry(alt)) : -1;
    bool ok = nchange >= 0;
    MfGraph best_alt = {0};
    int64_t alt_peak = -1;
    Verdict va = {.spmd = alt, .limit = v->limit, .least = -1, .last = -1};
    CompileFit fb = fit ? *fit : (CompileFit){0};
    if (ok && nchange > 0 && fit) {
        ok = mf_bound(alt, spmd->arena, &fb);
        for (int32_t k = 0; ok && k < fb.nbound; k++)
            ok = (fb.bound_v[k].name = ir_strdup(spmd->arena, fb.bound_v[k].name)) != NULL;
    }
    if (ok && (nchange > 0 || elements))
        ok = search(alt, change == mf_keep_masks, elements, false, &va, &best_alt, &alt_peak, st, d);
    bool adopt = ok && *st == IR_OK && alt_peak >= 0 && alt_peak < *best_peak;
    if (adopt) {
        ok = change(spmd, ir_entry(spmd)) == nchange;
        ir_arena_free(best->arena);
        *best = best_alt;
        *best_peak = alt_peak;
    } else {
        ir_arena_free(best_alt.arena);
    }
    /* the changed program's bound when it is kept (naming what runs) or
     * lower */
    if (ok && fit && nchange > 0 && (fb.bound < fit->bound || (adopt && fb.bound == fit->bound)))
        *fit = fb;
    if (va.least >= 0 && (v->least < 0 || va.least < v->least))
        v->least = va.least;
    ir_module_free(alt);
    return ok;
}

IrStatus compile_fit_memory(IrModule *spmd, int64_t limit, CompileFit *fit, IrDiag *d)
{
    IrComputation *c = ir_entry(spmd);
    *fit = (CompileFit){.limit = limit};
    fit->before = fit->after = fit->least = fit_peak(spmd);
    for (int32_t i = 0; c && i < c->nparam; i++)
        fit->floor += c->param[i] >= 0 ? shape_bytes(&c->instr[c->param[i]].shape) : 0;
    if (fit->before < 0)
        return ir_oom(d, NULL);
    if (limit <= 0 || !c || fit->before <= limit)
        return IR_OK;
    if (!mf_bound(spmd, spmd->arena, fit))
        return ir_oom(d, NULL);
    MfGraph best = {0};
    int64_t best_peak = -1;
    Verdict v = {.spmd = spmd, .limit = limit, .least = -1, .last = -1};
    IrStatus st = IR_OK;
    bool ok = search(spmd, false, false, false, &v, &best, &best_peak, &st, d);
    /* again with identical instructions merged and the elements of a
     * recomputable call's tuple recomputed, then with the masks kept apart
     * (each on the program the last kept), then from the dots checkpoint
     * of that program */
    if (ok && st == IR_OK && best_peak > limit)
        ok = search_changed(spmd, mf_merge_same, true, fit, &v, &best, &best_peak, &st, d);
    if (ok && st == IR_OK && best_peak > limit)
        ok = search_changed(spmd, mf_keep_masks, false, NULL, &v, &best, &best_peak, &st, d);
    if (ok && st == IR_OK && best_peak > limit)
        ok = search(spmd, false, false, true, &v, &best, &best_peak, &st, d);
    if (st != IR_OK && st != IR_ENOMEM) {
        ir_arena_free(best.arena);
        return st;
    }
    if (ok && best_peak >= fit->before) { /* no better than as it was: left as it was */
        ir_arena_free(best.arena);
        return IR_OK;
    }
    ok = ok && best_peak >= 0 && graph_commit(&best, spmd, c);
    ir_arena_free(best.arena);
    if (!ok)
        return ir_oom(d, NULL);
    spmd->is_scheduled = true;
    fit->scheduled = true;
    fit->after = fit_peak(spmd);
    if (fit->after < 0)
        return ir_oom(d, NULL);
    fit->least = v.least >= 0 && v.least < fit->after ? v.least : fit->after;
    for (int32_t i = 0; i < c->ninstr; i++)
        if (ir_frontend_attr(&c->instr[i], REMAT_ATTR)) {
            fit->nremat++;
            fit->flops += mf_flops(spmd, c, &c->instr[i]);
        }
    return IR_OK;
}

int32_t compile_remat_list(const IrModule *spmd, CompileRemat *out, int32_t cap)
{
    const IrComputation *c = ir_entry(spmd);
    int32_t n = 0;
    for (int32_t i = 0; c && i < c->ninstr; i++) {
        const char *of = ir_frontend_attr(&c->instr[i], REMAT_ATTR);
        if (!of)
            continue;
        if (n < cap)
            out[n] = (CompileRemat){c->instr[i].name, of, mf_value_bytes(&c->instr[i]),
                                    mf_flops(spmd, c, &c->instr[i])};
        n++;
    }
    return n;
}

void compile_fit_describe(IrStrBuf *o, const CompileResult *r, int32_t k, const char *indent)
{
    const IrModule *spmd = r->prog.cluster[k].spmd;
    const CompileFit *f = r->fit ? &r->fit[k] : NULL;
    int32_t n = compile_remat_list(spmd, NULL, 0);
    if (!spmd->is_scheduled && n == 0 && !f)
        return;
    int64_t flops = 0;
    for (int32_t i = 0; i < ir_entry(spmd)->ninstr; i++)
        if (ir_frontend_attr(&ir_entry(spmd)->instr[i], REMAT_ATTR))
            flops += mf_flops(spmd, ir_entry(spmd), &ir_entry(spmd)->instr[i]);
    ir_sb_printf(o, "%smemory fit:", indent);
    if (f)
        ir_sb_printf(o, " limit %lld bytes per device for this cluster, estimated peak %lld -> %lld bytes;",
                     (long long)f->limit, (long long)f->before, (long long)f->after);
    ir_sb_printf(o, " %s; %d value%s recomputed, %lld extra FLOPs per device per run\n",
                 spmd->is_scheduled ? "order scheduled (is_scheduled=true)" : "order unchanged", (int)n,
                 n == 1 ? "" : "s", (long long)flops);
    const IrComputation *c = ir_entry(spmd);
    for (int32_t i = 0; i < c->ninstr; i++) {
        const char *of = ir_frontend_attr(&c->instr[i], REMAT_ATTR);
        if (of)
            ir_sb_printf(o, "%s  recomputed %s of %s: %lld bytes, %lld FLOPs\n", indent, c->instr[i].name, of,
                         (long long)mf_value_bytes(&c->instr[i]), (long long)mf_flops(spmd, c, &c->instr[i]));
    }
    for (int32_t i = 0; i < c->ninstr; i++) {
        const char *of = ir_frontend_attr(&c->instr[i], MF_APART_ATTR);
        if (of && !ir_frontend_attr(&c->instr[i], REMAT_ATTR))
            ir_sb_printf(o, "%s  kept apart: %s reads %s through a copy (no bytes), so %s is made at its own place, "
                         "not inside its reader's fused group\n", indent, c->instr[i].name, of, of);
    }
    for (int32_t i = 0; i < c->ninstr; i++) {
        const char *of = ir_frontend_attr(&c->instr[i], MF_SAME_ATTR);
        if (of)
            ir_sb_printf(o, "%s  merged: %s computes what %s does (the same instruction on the same operands); "
                            "its readers read %s, and it no longer runs\n", indent, c->instr[i].name, of, of);
    }
    if (f && f->bound > 0) {
        ir_sb_printf(o, "%s  lower bound: ", indent);
        compile_fit_bound(o, f, 0);
        ir_sb_puts(o, "\n");
    }
}

void compile_fit_bound(IrStrBuf *o, const CompileFit *f, int64_t host)
{
    if (!f->bound_at) {
        ir_sb_printf(o, "no plan under %lld bytes per device: its parameters alone (optimizer state included) "
                        "hold them before the first step", (long long)(f->bound + host));
        return;
    }
    ir_sb_printf(o, "no plan under %lld bytes per device: at %s, these must coexist:",
                 (long long)(f->bound + host), f->bound_at);
    int32_t shown = f->nbound < 8 ? f->nbound : 8;
    int64_t rest = f->bound;
    for (int32_t k = 0; k < shown; k++) {
        ir_sb_printf(o, "%s %s %lld (%s)", k ? "," : "", f->bound_v[k].name, (long long)f->bound_v[k].bytes,
                     f->bound_v[k].why);
        rest -= f->bound_v[k].bytes;
    }
    if (shown < f->nbound)
        ir_sb_printf(o, " and %d more of %lld bytes", (int)(f->nbound - shown), (long long)rest);
    if (host > 0)
        ir_sb_printf(o, ", with the %lld bytes its host program holds", (long long)host);
}

char *compile_fit_summary(const CompileResult *r)
{
    IrStrBuf o = {0};
    for (int32_t k = 0; r->fit && k < r->prog.ncluster; k++)
        if (r->fit[k].scheduled) {
            ir_sb_printf(&o, "cluster %d ", (int)k);
            compile_fit_describe(&o, r, k, "");
        }
    return o.s ? ir_sb_take(&o) : NULL;
}
