/*
 * memfit_bound.c: a lower bound on the estimated peak per device that no
 * order and no recomputation of the fit (memfit_schedule.c,
 * memfit_remat.c) can go under, with the values that make it: the proof
 * a refusal of `--limit memory` gives (docs/plan.md, "Fitting a memory
 * limit").
 *
 * Some values exist exactly once under every schedule: the parameters
 * (never recomputed) and the results of collectives over groups of two
 * or more devices (never recomputed, each its own buffer). At a
 * collective X, whenever it runs, these coexist:
 *  - X's result and its operands (a collective writes a new buffer and
 *    reads its operands whole; the executor fuses nothing into it);
 *  - the parameters the caller holds (not donated): live throughout;
 *  - a donated parameter read by X or by an instruction that depends on
 *    X: it was live before the first step and is read after X runs (a
 *    recomputed reader still reads it);
 *  - a collective's result that X depends on and that X, an instruction
 *    depending on X, or the entry's result reads: it ran before X (its
 *    one run) and is read after.
 * Their sum is a bound at X; the largest over the collectives (and the
 * parameters alone, before the first step) is the bound of the program.
 * What is left out (values that may be recomputed, buffers a referring
 * instruction passes on, async collectives, control edges) only lowers
 * it, so it stays a proof.
 *
 * Example: the SGD step of a 10-layer MLP, batch split over 2 devices,
 * its 256x256 weights donated: the first weight gradient's all-reduce
 * runs before any update (each update reads its all-reduced gradient),
 * so all ten weights, x, the all-reduce's operand and its result
 * coexist: 10 x 262144 + 131072 + 2 x 262144 bytes.
 */
#include "memfit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work above this many visited edges is not started (the bound is then
 * the largest of the collectives reached so far: still a bound). */
#define BOUND_WORK (1 << 26)

/* Is ins a collective whose result is a buffer of its own, run once: a
 * synchronous one of an array, over groups all of two devices or more
 * (a group of one is the identity, its result its operand's buffer)? */
static bool own_collective(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL:
        break;
    default:
        return false;
    }
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if (ins->shape.type == IR_TUPLE || !g->present || g->ngroups < 1 || !g->group_size)
        return false;
    for (int32_t k = 0; k < g->ngroups; k++)
        if (g->group_size[k] < 2)
            return false;
    return true;
}

/* Does ins read its operands whole while writing a new result, its first
 * run before anything that depends on it (a dot or convolution: no
 * fused group takes it, its result takes no operand's buffer)? Its
 * operands and result coexist, whether it is recomputed or not. */
static bool makes_whole(const IrInstr *ins)
{
    return (ins->op == OP_DOT || ins->op == OP_CONVOLUTION) && ir_shape_is_array(&ins->shape) &&
           ins->a.x->control_predecessors.n == 0;
}

/* The users of each instruction, as one array (CSR: user[first[i] ..
 * first[i + 1]]). */
typedef struct Users {
    int32_t *first, *user;
} Users;

static bool users_build(const IrComputation *c, Users *u)
{
    int32_t n = c->ninstr;
    int64_t e = 0;
    for (int32_t i = 0; i < n; i++)
        e += c->instr[i].nopnd;
    u->first = ts_calloc((size_t)n + 1, sizeof *u->first);
    u->user = ts_malloc((size_t)(e > 0 ? e : 1) * sizeof *u->user);
    int32_t *fill = ts_calloc((size_t)n + 1, sizeof *fill);
    bool ok = u->first && u->user && fill;
    for (int32_t i = 0; ok && i < n; i++)
        for (int32_t j = 0; j < c->instr[i].nopnd; j++)
            u->first[c->instr[i].opnd[j] + 1]++;
    for (int32_t i = 0; ok && i < n; i++)
        u->first[i + 1] += u->first[i];
    for (int32_t i = 0; ok && i < n; i++)
        for (int32_t j = 0; j < c->instr[i].nopnd; j++) {
            int32_t o = c->instr[i].opnd[j];
            u->user[u->first[o] + fill[o]++] = i;
        }
    ts_free(fill);
    return ok;
}

/* mark[] |= bit over what reaches from x (itself included) along users
 * (dir 1) or operands (dir 0); stack: scratch. The edges visited. */
static int64_t flood(const IrComputation *c, const Users *u, int32_t x, int dir, uint8_t bit, uint8_t *mark,
                     int32_t *stack)
{
    int32_t top = 0;
    int64_t work = 0;
    mark[x] |= bit;
    stack[top++] = x;
    while (top > 0) {
        int32_t i = stack[--top];
        int32_t n = dir ? u->first[i + 1] - u->first[i] : c->instr[i].nopnd;
        const int32_t *next = dir ? &u->user[u->first[i]] : c->instr[i].opnd;
        work += n;
        for (int32_t k = 0; k < n; k++)
            if (!(mark[next[k]] & bit)) {
                mark[next[k]] |= bit;
                stack[top++] = next[k];
            }
    }
    return work;
}

enum { AFTER = 1, BEFORE = 2, OPERAND = 4 };

/* The bytes of an operand of a collective that are its own (not a
 * parameter's, counted apart, nor a buffer another instruction makes or
 * one the executor may never make: referring instructions, broadcasts,
 * constants, iotas, a collective over groups of one). */
static int64_t operand_bytes(const IrInstr *o)
{
    if (o->op == OP_PARAMETER || mf_refers(o->op) || o->op == OP_BROADCAST || o->op == OP_CONSTANT ||
        o->op == OP_IOTA || (ir_op_family(o->op) == FAM_COLLECTIVE && !own_collective(o)) ||
        !ir_shape_is_array(&o->shape))
        return 0;
    return ir_shape_bytes(&o->shape);
}

/* A collective's result and its operands (operand_bytes), each once. */
static int64_t own_bytes(const IrComputation *c, int32_t x)
{
    const IrInstr *ins = &c->instr[x];
    int64_t b = ir_shape_bytes(&ins->shape);
    for (int32_t j = 0; j < ins->nopnd; j++) {
        bool again = false;
        for (int32_t k = 0; k < j; k++)
            again = again || ins->opnd[k] == ins->opnd[j];
        b += again ? 0 : operand_bytes(&c->instr[ins->opnd[j]]);
    }
    return b;
}

/* Is the buffer of v read at or after the collective (mark AFTER), or is
 * it the entry's result? Through referring users (tuple,
 * get-tuple-element, ...), whose readers read it. */
static bool read_after(const IrComputation *c, const Users *u, const uint8_t *mark, int32_t v, int depth)
{
    if (v == c->root)
        return true;
    for (int32_t k = u->first[v]; k < u->first[v + 1]; k++) {
        int32_t r = u->user[k];
        if (mark[r] & AFTER)
            return true;
        if (depth < 8 && mf_refers(c->instr[r].op) && read_after(c, u, mark, r, depth + 1))
            return true;
    }
    return false;
}

/* What at_collective reads beside the marks. */
typedef struct Facts {
    const bool *donated;   /* by parameter number */
    const uint8_t *dep;    /* dep[i]: i is a donated parameter or depends on one */
    const uint8_t *feeds;  /* feeds[i]: i is an operand of a collective over groups */
    uint8_t *seen;         /* scratch, all 0 between calls */
    int32_t *list;         /* scratch: what seen[] marks */
} Facts;

/* May u pass on the bytes of v (its operand) unchanged in size, reading
 * nothing else that depends on a donated parameter: an elementwise op, a
 * reshape, bitcast, copy, transpose or convert of v's bytes (0.9 * m of
 * Adam's first moment; its image of m and of nothing else)? */
static bool passes_on(const IrComputation *c, const Facts *f, int32_t v, int32_t u)
{
    const IrInstr *ui = &c->instr[u];
    bool kind = ir_op_is_elementwise(ui->op) || ui->op == OP_RESHAPE || ui->op == OP_BITCAST ||
                ui->op == OP_COPY || ui->op == OP_TRANSPOSE || ui->op == OP_CONVERT;
    if (!kind || !ir_shape_is_array(&ui->shape) || f->feeds[u] ||
        ir_shape_bytes(&ui->shape) != ir_shape_bytes(&c->instr[v].shape))
        return false;
    for (int32_t j = 0; j < ui->nopnd; j++)
        if (ui->opnd[j] != v && f->dep[ui->opnd[j]])
            return false;
    return true;
}

/* Is donated parameter p needed at or after the collective (mark AFTER)
 * so that p's bytes are live there: p, or an image of p that only p
 * makes (passes_on, as deep as it goes), read by an instruction at or
 * after it or in the entry's result? At the collective one of them is
 * live (the later ones are made from the earlier, p at the start; a
 * recomputation of one needs an earlier one), and none is another
 * parameter's image. An image that is a collective's operand (counted
 * there) ends the chain. */
static bool needed_after(const IrComputation *c, const Users *u, const uint8_t *mark, const Facts *f, int32_t p)
{
    int32_t nseen = 0;
    bool need = false;
    f->seen[p] = 1;
    f->list[nseen++] = p;
    for (int32_t k = 0; k < nseen && !need; k++) {
        int32_t v = f->list[k];
        need = read_after(c, u, mark, v, 0);
        for (int32_t e = u->first[v]; e < u->first[v + 1]; e++) {
            int32_t r = u->user[e];
            if (!f->seen[r] && passes_on(c, f, v, r)) {
                f->seen[r] = 1;
                f->list[nseen++] = r;
            }
        }
    }
    for (int32_t k = 0; k < nseen; k++)
        f->seen[f->list[k]] = 0;
    return need;
}

typedef struct Sum {
    int64_t bytes;
    int32_t n;
    CompileBoundValue *v;  /* NULL: count only */
} Sum;

static void add(Sum *s, const IrInstr *ins, int64_t bytes, const char *why)
{
    if (bytes <= 0)
        return;
    if (s->v)
        s->v[s->n] = (CompileBoundValue){ins->name, why, bytes};
    s->n++;
    s->bytes += bytes;
}

/* The values that coexist at collective x (mark: AFTER over x and what
 * depends on it, BEFORE over what x depends on); donated[] by parameter
 * number. x < 0: at the first to run of a set of collectives (mark:
 * AFTER over them and what depends on them), whose least result and
 * operands are instruction -x - 1's. */
static void at_collective(const IrComputation *c, const Users *u, const uint8_t *mark, const Facts *f,
                          int32_t x, Sum *s)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        int64_t bytes = ir_shape_is_array(&ins->shape) ? ir_shape_bytes(&ins->shape) : 0;
        if (ins->op == OP_PARAMETER) {
            int64_t pn = ins->a.parameter_number;
            bool given = pn >= 0 && pn < c->nparam && f->donated[pn];
            if (!given)
                add(s, ins, bytes, "parameter, held");
            else if (needed_after(c, u, mark, f, i))
                add(s, ins, bytes, "donated, read after it");
        } else if (i == x) {
            add(s, ins, bytes, "its result");
        } else if (x < 0 && i == -x - 1) {
            add(s, ins, own_bytes(c, i), "the first one's result and operands, at least");
        } else if (mark[i] & OPERAND && x >= 0) {
            add(s, ins, operand_bytes(ins), "its operand");
        } else if (x >= 0 && own_collective(ins) && mark[i] & BEFORE && read_after(c, u, mark, i, 0)) {
            add(s, ins, bytes, "a collective's result, made before it, read after");
        }
    }
}

static int by_bytes(const void *a, const void *b)
{
    const CompileBoundValue *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_cost_down(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x != y ? (x > y ? -1 : 1) : 0;
}

/* Where a bound holds: at collective `at` (>= 0), or at the first to run
 * of the collectives whose result and operands (own_bytes) hold `least`
 * bytes or more (at < 0). */
typedef struct Place {
    int32_t at;
    int64_t least;
} Place;

typedef struct Work {
    const IrComputation *c;
    Users u;
    uint8_t *mark;
    int32_t *stack;
    Facts f;
    int64_t *cost;     /* own_bytes of each own collective (else -1) */
    int64_t edges;     /* visited so far */
} Work;

/* mark[] for place p; the instruction argument of at_collective. */
static int32_t mark_place(Work *w, Place p)
{
    const IrComputation *c = w->c;
    memset(w->mark, 0, (size_t)c->ninstr);
    if (p.at >= 0) {
        w->edges += flood(c, &w->u, p.at, 1, AFTER, w->mark, w->stack);
        w->edges += flood(c, &w->u, p.at, 0, BEFORE, w->mark, w->stack);
        for (int32_t j = 0; j < c->instr[p.at].nopnd; j++)
            w->mark[c->instr[p.at].opnd[j]] |= OPERAND;
        return p.at;
    }
    int32_t least = -1;
    for (int32_t x = 0; x < c->ninstr; x++)
        if (w->cost[x] >= p.least) {
            if (!(w->mark[x] & AFTER))
                w->edges += flood(c, &w->u, x, 1, AFTER, w->mark, w->stack);
            if (least < 0 || w->cost[x] < w->cost[least])
                least = x;
        }
    return -least - 1;
}

static int64_t place_bytes(Work *w, Place p)
{
    Sum s = {0};
    int32_t x = mark_place(w, p);
    at_collective(w->c, &w->u, w->mark, &w->f, x, &s);
    w->edges += w->c->ninstr;
    return s.bytes;
}

/* Every place: each collective alone, and the first to run of those of
 * each size and up (a training step's weight gradients: no update can
 * run before the first of their all-reduces, so every parameter is live
 * there). The largest bound into *best (beyond `floor`). */
static int64_t best_place(Work *w, int64_t floor, Place *best)
{
    const IrComputation *c = w->c;
    int32_t ncost = 0;
    int64_t *sizes = ts_malloc((size_t)c->ninstr * sizeof *sizes);
    if (!sizes)
        return -1;
    for (int32_t x = 0; x < c->ninstr; x++) {
        w->cost[x] = own_collective(&c->instr[x]) ? own_bytes(c, x) : -1;
        if (w->cost[x] >= 0)
            sizes[ncost++] = w->cost[x];
    }
    qsort(sizes, (size_t)ncost, sizeof *sizes, by_cost_down);
    int64_t top = floor;
    for (int32_t k = 0; k < ncost && w->edges < BOUND_WORK; k++) {
        if (k > 0 && sizes[k] == sizes[k - 1])
            continue;
        Place p = {-1, sizes[k]};
        int64_t b = place_bytes(w, p);
        if (b > top)
            top = b, *best = p;
    }
    for (int32_t x = 0; x < c->ninstr && w->edges < BOUND_WORK; x++) {
        if (w->cost[x] < 0 && !makes_whole(&c->instr[x]))
            continue;
        Place p = {x, 0};
        int64_t b = place_bytes(w, p);
        if (b > top)
            top = b, *best = p;
    }
    ts_free(sizes);
    return top;
}

bool mf_bound(const IrModule *m, IrArena *ar, CompileFit *fit)
{
    const IrComputation *c = ir_entry(m);
    fit->bound = fit->floor;
    fit->bound_at = NULL;
    fit->nbound = 0;
    fit->bound_v = NULL;
    int32_t n = c ? c->ninstr : 0;
    if (n == 0)
        return true;
    Work w = {.c = c};
    w.mark = ts_malloc((size_t)n);
    w.stack = ts_malloc((size_t)n * sizeof *w.stack);
    w.cost = ts_malloc((size_t)n * sizeof *w.cost);
    bool *donated = ts_calloc((size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *donated);
    uint8_t *dep = ts_calloc((size_t)n, 1), *feeds = ts_calloc((size_t)n, 1), *seen = ts_calloc((size_t)n, 1);
    int32_t *list = ts_malloc((size_t)n * sizeof *list), norder = 0;
    w.f = (Facts){donated, dep, feeds, seen, list};
    bool ok = w.mark && w.stack && w.cost && donated && dep && feeds && seen && list && users_build(c, &w.u);
    IrExecOrderError e;
    ok = ok && ir_exec_order_of(m, c, w.stack, &norder, &e) == IR_OK;
    if (ok)
        ir_alias_donated(m, donated, c->nparam);
    for (int32_t k = 0; ok && k < norder; k++) {  /* operands first */
        const IrInstr *ins = &c->instr[w.stack[k]];
        int64_t pn = ins->a.parameter_number;
        dep[w.stack[k]] = ins->op == OP_PARAMETER && pn >= 0 && pn < c->nparam && donated[pn];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            dep[w.stack[k]] |= dep[ins->opnd[j]];
            feeds[ins->opnd[j]] |= own_collective(ins);
        }
    }
    Place best = {-1, -1};
    int64_t top = ok ? best_place(&w, fit->floor, &best) : -1;
    ok = top >= 0;
    if (ok && (best.at >= 0 || best.least >= 0)) {
        Sum s = {0};
        int32_t x = mark_place(&w, best);
        at_collective(c, &w.u, w.mark, &w.f, x, &s);
        s.v = ir_alloc_array(ar, (size_t)s.n, sizeof *s.v);
        char where[256];
        if (best.at >= 0) {
            snprintf(where, sizeof where, "instruction %s", c->instr[best.at].name);
        } else {
            int32_t nk = 0;
            for (int32_t i = 0; i < n; i++)
                nk += w.cost[i] >= best.least;
            snprintf(where, sizeof where,
                     "whichever runs first of the %d collectives whose result and operands hold %lld bytes or more "
                     "(each parameter below is read after one of them)",
                     (int)nk, (long long)best.least);
        }
        fit->bound_at = ir_strdup(ar, where);
        ok = s.v && fit->bound_at;
        if (ok) {
            s.n = 0;
            s.bytes = 0;
            at_collective(c, &w.u, w.mark, &w.f, x, &s);
            qsort(s.v, (size_t)s.n, sizeof *s.v, by_bytes);
            fit->bound = s.bytes;
            fit->nbound = s.n;
            fit->bound_v = s.v;
        }
    }
    ts_free(w.u.first);
    ts_free(w.u.user);
    ts_free(w.mark);
    ts_free(w.stack);
    ts_free(w.cost);
    ts_free(donated);
    ts_free(dep);
    ts_free(feeds);
    ts_free(seen);
    ts_free(list);
    return ok;
}
