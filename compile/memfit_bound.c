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
 * Their sum is a bound at X; the same holds at a dot or a convolution.
 * Three more kinds of value are counted where they are proved live: the
 * least link of a chain from another dot to an instruction that reads
 * both (pairs, below), a donated parameter's state chain (its buffer
 * passed on to an output: state_chains), and a value made from a
 * collective that ran before and read after (carried, below). A while
 * loop is a place too (the fit recomputes no control flow: each loop
 * runs once): when it ends, the leaves its body made and those it passes
 * through from another loop's result coexist, with the other loops'
 * results made before it and read after (a scan's stacked residuals,
 * which its backward scan reads: loop_bytes). The largest over the places (and the parameters alone, before the first
 * step) is the bound of the program.
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
/* Links followed back along a chain (pairs, state chains). */
#define CHAIN_DEPTH 8

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

/* Is ins a scatter of one array (device/k_gather.c)? Every run reads its
 * indices and updates whole while it writes its result, which may be its
 * operand 0's buffer updated in place (partition/memory.c's
 * reused_operand): its result, indices and updates coexist. Its updates
 * exist even as a broadcast (JAX's embedding gradient broadcasts the
 * rows' gradient over the bag): ir/fusion_find.c runs a broadcast inside
 * elementwise readers only, and no fused group takes a scatter in. */
static bool scatters(const IrInstr *ins)
{
    return ins->op == OP_SCATTER && ir_shape_is_array(&ins->shape) && ins->nopnd == 3;
}

/* May ins be a link of a chain: pass on a buffer made from its operand,
 * whatever else it reads (an elementwise op, a reshape, bitcast or
 * transpose)? */
static bool link_op(const IrInstr *ins)
{
    return ir_shape_is_array(&ins->shape) &&
           ((ir_op_is_elementwise(ins->op) && ins->op != OP_MAP) || ins->op == OP_RESHAPE ||
            ins->op == OP_BITCAST || ins->op == OP_TRANSPOSE);
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

enum { AFTER = 1, BEFORE = 2, OPERAND = 4, DESC = 8, ANC = 16, OTHERS = 32 };

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
/* A donated parameter's state chain: links from it to a leaf of the
 * entry's result (state_chains). */
typedef struct StateChain {
    int32_t n;             /* 0: none */
    int32_t link[CHAIN_DEPTH];
    int64_t least;         /* the bytes of its least link */
} StateChain;

typedef struct Facts {
    const IrModule *m;     /* the module (a while's body) */
    const bool *donated;   /* by parameter number */
    const StateChain *state; /* by parameter number */
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

/* Is v a donated parameter or an image of one (passes_on, link by link
 * back)? Its bytes may be the parameter's own buffer (an elementwise op
 * or a reshape at the parameter's last read takes it over), which the
 * parameter's line counts: as an operand of a place it is not counted
 * again. */
static bool donated_image(const IrComputation *c, const Facts *f, int32_t v, int depth)
{
    const IrInstr *ins = &c->instr[v];
    int64_t pn = ins->a.parameter_number;
    if (ins->op == OP_PARAMETER)
        return pn >= 0 && pn < c->nparam && f->donated[pn];
    for (int32_t j = 0; depth < CHAIN_DEPTH && j < ins->nopnd; j++)
        if (f->dep[ins->opnd[j]] && passes_on(c, f, ins->opnd[j], v) &&
            donated_image(c, f, ins->opnd[j], depth + 1))
            return true;
    return false;
}

/* Is no link of state chain ch instruction x (< 0: none) or an operand
 * of it, which are counted as such? */
static bool clear_of(const IrComputation *c, const StateChain *ch, int32_t x)
{
    for (int32_t k = 0; x >= 0 && k < ch->n; k++) {
        if (ch->link[k] == x)
            return false;
        for (int32_t j = 0; j < c->instr[x].nopnd; j++)
            if (c->instr[x].opnd[j] == ch->link[k])
                return false;
    }
    return true;
}

/* State chains. A donated parameter p whose buffer is passed on, link by
 * link (link_op), to a leaf o of the entry's result holds at every step
 * one link of that chain: p is live from before the first step until
 * the link made from it is, each link until the next is made from it
 * (recomputed or not: every copy reads a copy of the one before), and o
 * to the end. So where p itself is not read after a place, the chain
 * still holds its least link there (an Adam step's w, m and v: written
 * over by w', m' and v' or not, three buffers a layer throughout). The
 * chains share no link; none is a collective or a collective's operand
 * (counted as such), nor, for a place, its instruction or an operand of
 * it (clear_of). Found back from each leaf of the result, the first to
 * reach a donated parameter that has none yet. */
static bool state_back(const IrComputation *c, const Facts *f, int32_t v, uint8_t *used, StateChain *cur,
                       StateChain *state)
{
    const IrInstr *ins = &c->instr[v];
    if (used[v] || cur->n >= CHAIN_DEPTH || !ir_shape_is_array(&ins->shape) || f->feeds[v] ||
        ir_op_family(ins->op) == FAM_COLLECTIVE)
        return false;
    int64_t pn = ins->a.parameter_number, b = ir_shape_bytes(&ins->shape);
    cur->link[cur->n++] = v;
    int64_t least = cur->least;
    if (cur->n == 1 || b < cur->least)
        cur->least = b;
    bool found = false;
    if (ins->op == OP_PARAMETER) {
        found = pn >= 0 && pn < c->nparam && f->donated[pn] && state[pn].n == 0;
        if (found) {
            state[pn] = *cur;
            for (int32_t k = 0; k < cur->n; k++)
                used[cur->link[k]] = 1;
        }
    } else if (link_op(ins)) {
        for (int32_t j = 0; j < ins->nopnd && !found; j++)
            found = state_back(c, f, ins->opnd[j], used, cur, state);
    }
    cur->n--;
    cur->least = least;
    return found;
}

static void state_chains(const IrComputation *c, const Facts *f, uint8_t *used, StateChain *state)
{
    if (c->root < 0)
        return;
    const IrInstr *r = &c->instr[c->root];
    int32_t n = r->op == OP_TUPLE ? r->nopnd : 1;
    for (int32_t k = 0; k < n; k++) {
        StateChain cur = {0};
        state_back(c, f, r->op == OP_TUPLE ? r->opnd[k] : c->root, used, &cur, state);
    }
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

/* Is value v of computation b a buffer of its own, made there: an
 * array instruction that refers to no other (not a parameter,
 * broadcast, constant, iota or collective, which may be no buffer of
 * their own or counted apart), or a get-tuple-element of a call whose
 * callee's root tuple names such a value there? A key for it (equal
 * keys: one buffer), or -1: not known to be. */
static int64_t made_in(const IrModule *m, const IrComputation *b, int32_t v)
{
    const IrInstr *i = &b->instr[v];
    if (i->op == OP_GET_TUPLE_ELEMENT && i->nopnd == 1 && b->instr[i->opnd[0]].op == OP_CALL) {
        const IrInstr *call = &b->instr[i->opnd[0]];
        int32_t k = call->ncalled == 1 ? call->called[0] : -1;
        const IrComputation *f = k >= 0 && k < m->ncomp ? m->comp[k] : NULL;
        if (!f || f->root < 0 || f->instr[f->root].op != OP_TUPLE || i->a.tuple_index < 0 ||
            i->a.tuple_index >= f->instr[f->root].nopnd)
            return -1;
        int32_t e = f->instr[f->root].opnd[i->a.tuple_index];
        const IrInstr *ei = &f->instr[e];
        if (ei->op == OP_PARAMETER || mf_refers(ei->op) || ei->op == OP_BROADCAST || ei->op == OP_CONSTANT ||
            ei->op == OP_IOTA || ir_op_family(ei->op) == FAM_COLLECTIVE || !ir_shape_is_array(&ei->shape))
            return -1;
        return ((int64_t)i->opnd[0] + 1) << 32 | e; /* the call's element e (one buffer however named) */
    }
    if (i->op == OP_PARAMETER || mf_refers(i->op) || i->op == OP_BROADCAST || i->op == OP_CONSTANT ||
        i->op == OP_IOTA || ir_op_family(i->op) == FAM_COLLECTIVE || !ir_shape_is_array(&i->shape))
        return -1;
    return v;
}

/* The buffer leaf k of while loop x's result is, when the loop makes it
 * (a value its body makes: made_in) or passes it through unchanged (its
 * body's root operand k is get-tuple-element(parameter, k), the leaf
 * stays in the initial state's buffer) from a leaf another loop made,
 * as a scan's stacked residuals reach the backward scan: that loop and
 * the key made_in gives in its body, equal for one buffer. False: not
 * known to be such a leaf (a parameter's, a collective's, a broadcast's
 * or anything else: counted apart, or not counted). */
static bool loop_leaf(const IrModule *m, const IrComputation *c, int32_t x, int32_t k, int depth, int32_t *loop,
                      int64_t *key)
{
    const IrInstr *w = &c->instr[x];
    if (depth > CHAIN_DEPTH || w->op != OP_WHILE || w->ncalled < 2 || w->nopnd != 1 || w->shape.type != IR_TUPLE ||
        w->called[1] < 0 || w->called[1] >= m->ncomp || !m->comp[w->called[1]] || k < 0 || k >= w->shape.ntuple ||
        !ir_shape_is_array(&w->shape.tuple[k]))
        return false;
    const IrComputation *b = m->comp[w->called[1]];
    const IrInstr *init = &c->instr[w->opnd[0]];
    if (b->root < 0 || b->instr[b->root].op != OP_TUPLE || b->instr[b->root].nopnd != w->shape.ntuple)
        return false;
    const IrInstr *v = &b->instr[b->instr[b->root].opnd[k]];
    if (v->op == OP_GET_TUPLE_ELEMENT && v->a.tuple_index == k && b->instr[v->opnd[0]].op == OP_PARAMETER) {
        if (init->op != OP_TUPLE || init->nopnd != w->shape.ntuple)
            return false;
        const IrInstr *g = &c->instr[init->opnd[k]];
        return g->op == OP_GET_TUPLE_ELEMENT && g->nopnd == 1 &&
               loop_leaf(m, c, g->opnd[0], (int32_t)g->a.tuple_index, depth + 1, loop, key);
    }
    *key = made_in(m, b, b->instr[b->root].opnd[k]);
    *loop = x;
    return *key >= 0;
}

/* The loops' buffers counted at one place, each once. */
#define LOOP_LEAVES 256
typedef struct LoopLeaves {
    int32_t n;
    int32_t loop[LOOP_LEAVES];
    int64_t key[LOOP_LEAVES];
} LoopLeaves;

/* Note leaf k of loop x: true when it is such a buffer, not noted yet
 * (and there is room: fewer only lowers the bound). */
static bool loop_note(const IrModule *m, const IrComputation *c, int32_t x, int32_t k, LoopLeaves *seen)
{
    int32_t loop;
    int64_t key;
    if (!loop_leaf(m, c, x, k, 0, &loop, &key) || seen->n >= LOOP_LEAVES)
        return false;
    for (int32_t j = 0; j < seen->n; j++)
        if (seen->loop[j] == loop && seen->key[j] == key)
            return false;
    seen->loop[seen->n] = loop;
    seen->key[seen->n++] = key;
    return true;
}

/* The bytes a while loop x of the entry holds when its last iteration
 * ends (each loop runs once: the fit never recomputes control flow): the
 * leaves of its result that are buffers loops make (loop_leaf), each
 * once. */
static int64_t loop_bytes(const IrModule *m, const IrComputation *c, int32_t x, LoopLeaves *seen)
{
    const IrInstr *w = &c->instr[x];
    int64_t bytes = 0;
    for (int32_t k = 0; w->op == OP_WHILE && w->shape.type == IR_TUPLE && k < w->shape.ntuple; k++)
        if (loop_note(m, c, x, k, seen))
            bytes += ir_shape_bytes(&w->shape.tuple[k]);
    return bytes;
}

/* The values that coexist at collective x (mark: AFTER over x and what
 * depends on it, BEFORE over what x depends on); donated[] by parameter
 * number. x < 0: at the first to run of a set of collectives (mark:
 * AFTER over them and what depends on them), whose least result and
 * operands are instruction -x - 1's. */
static void at_collective(const IrComputation *c, const Users *u, const uint8_t *mark, const Facts *f,
                          int32_t x, Sum *s)
{
    LoopLeaves loops = {0}, *seen = &loops;
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
            else if (f->state[pn].n > 0 && clear_of(c, &f->state[pn], x))
                add(s, ins, f->state[pn].least, "donated, or the output made from it: one of them is live");
        } else if (i == x && ins->op == OP_WHILE) {
            add(s, ins, loop_bytes(f->m, c, i, seen), "the loop's state when it ends: what its body makes, and "
                "another loop's results it passes through (a loop runs once)");
        } else if (i == x) {
            add(s, ins, bytes, "its result");
        } else if (x < 0 && i == -x - 1) {
            add(s, ins, own_bytes(c, i), "the first one's result and operands, at least");
        } else if (mark[i] & OPERAND && x >= 0 && scatters(&c->instr[x])) {
            const IrInstr *sc = &c->instr[x];
            bool own = i != sc->opnd[0] && ins->op == OP_BROADCAST && ir_shape_is_array(&ins->shape);
            bool apart = i != sc->opnd[0] && !donated_image(c, f, i, 0);
            add(s, ins, !apart ? 0 : own ? bytes : operand_bytes(ins), "its operand");
        } else if (mark[i] & OPERAND && x >= 0 && !donated_image(c, f, i, 0)) {
            add(s, ins, operand_bytes(ins), "its operand");
        } else if (x >= 0 && own_collective(ins) && mark[i] & BEFORE && read_after(c, u, mark, i, 0)) {
            add(s, ins, bytes, "a collective's result, made before it, read after");
        }
    }
    for (int32_t i = 0; x >= 0 && c->instr[x].op == OP_WHILE && i < c->ninstr; i++) {
        if (i == x || c->instr[i].op != OP_WHILE || !(mark[i] & BEFORE))
            continue;
        int64_t bytes = 0;
        for (int32_t e = u->first[i]; e < u->first[i + 1]; e++) {
            const IrInstr *g = &c->instr[u->user[e]];
            if (g->op == OP_GET_TUPLE_ELEMENT && read_after(c, u, mark, u->user[e], 0) &&
                loop_note(f->m, c, i, (int32_t)g->a.tuple_index, seen))
                bytes += ir_shape_bytes(&g->shape);
        }
        add(s, &c->instr[i], bytes, "a loop's results, made before it, read after (a loop runs once)");
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
    int32_t user;       /* a pair (pair_place): the instruction reading both values; -1: none */
    int32_t other;      /* its other dot */
    int32_t link;       /* the least link of the other's chain, live at `at` */
    int64_t link_bytes;
} Place;

typedef struct Work {
    const IrComputation *c;
    Users u;
    uint8_t *mark;
    int32_t *stack;
    Facts f;
    int64_t *cost;     /* own_bytes of each own collective (else -1) */
    const uint8_t *in_state; /* a link of a state chain (state_chains) */
    int64_t edges;     /* visited so far */
    int32_t *pos;      /* each instruction's place in an execution order */
    int64_t *width;    /* carried(): the widest line from C to each value */
    int64_t *keys;     /* scratch: (place << 32 | instruction) to sort by */
} Work;

/* mark[] for place p; the instruction argument of at_collective. */
static int32_t mark_place(Work *w, Place p)
{
    const IrComputation *c = w->c;
    memset(w->mark, 0, (size_t)c->ninstr);
    if (p.user >= 0) { /* a pair: "after" is at or after the reader's first run, and the dot itself */
        w->edges += flood(c, &w->u, p.user, 1, AFTER, w->mark, w->stack);
        w->mark[p.at] |= AFTER;
        w->edges += flood(c, &w->u, p.at, 0, BEFORE, w->mark, w->stack);
        for (int32_t j = 0; j < c->instr[p.at].nopnd; j++)
            w->mark[c->instr[p.at].opnd[j]] |= OPERAND;
        return p.at;
    }
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

/* ---- a collective's result, carried across the place ----
 *
 * A collective C that the place's instruction X depends on ran once,
 * before X; an instruction R that runs after X (marked AFTER) and reads
 * a value v made from C reads, on every run, an instance made from C's
 * one result through the values between C and v (those made from C that
 * v is made from: S, C and v included). Along that line of instances one
 * was made before X ran and is read after: a value of S is live at X.
 * It is a buffer apart from every other counted value when S holds
 * none of them: nothing marked AFTER (v not AFTER: none of S is, and so
 * X's result is not in S), no operand of X, nothing made from the pair's
 * other dot (its live link), no other collective (counted on its own),
 * no link of a state chain, and C is not counted itself (read after X)
 * and depends on a donated parameter (so no image of one, counted as
 * "donated, read after it", is made from C). Then S's least value is
 * live at X beside the rest: the largest such over the collectives and
 * their values v is added (one, so nothing is counted twice).
 *
 * Example, the Adam step of a transformer block with its heads and its
 * MLP split over 2 devices: the MLP's all-reduce feeds the loss's
 * gradient g, which the backward reads twice: at the MLP's second dot
 * (g W2^T) and at the residual sum after the MLP's backward all-reduce.
 * Where the MLP's two f32[4,32,128] values meet (its pair), g or a value
 * between the all-reduce and g is live too: 32768 bytes more. */

static int by_key(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x != y ? (x < y ? -1 : 1) : 0;
}

/* Mark S (ANC) from v back over the values made from C (DESC); is it
 * clear of everything counted (see above)? *least: its least bytes. */
static bool cut_clear(Work *w, int32_t cut_of, int32_t v, int64_t *least, int32_t *least_at, int32_t *nlist)
{
    const IrComputation *c = w->c;
    int32_t top = 0, n = 0;
    bool clear = true;
    *least = -1;
    w->mark[v] |= ANC;
    w->stack[top++] = v;
    while (top > 0) {
        int32_t i = w->stack[--top];
        const IrInstr *ins = &c->instr[i];
        w->f.list[n++] = i;
        uint8_t m = w->mark[i];
        if ((m & (AFTER | OPERAND | OTHERS)) || w->in_state[i] || !ir_shape_is_array(&ins->shape) ||
            (i != cut_of && own_collective(ins)))
            clear = false;
        w->edges += ins->nopnd;
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j];
            if ((w->mark[o] & DESC) && !(w->mark[o] & ANC)) {
                w->mark[o] |= ANC;
                w->stack[top++] = o;
            }
        }
    }
    *nlist = n;
    if (!clear)
        return false;
    /* Any one line from C to v holds a live value, so the widest line
     * bounds it: each value's width is the least of its bytes and its
     * widest operand's in S (operands first, by execution order). */
    for (int32_t k = 0; k < n; k++)
        w->keys[k] = (int64_t)w->pos[w->f.list[k]] << 32 | w->f.list[k];
    qsort(w->keys, (size_t)n, sizeof *w->keys, by_key);
    for (int32_t k = 0; k < n; k++)
        w->f.list[k] = (int32_t)(w->keys[k] & 0xffffffff);
    w->edges += n;
    for (int32_t k = 0; k < n; k++) {
        int32_t i = w->f.list[k];
        const IrInstr *ins = &c->instr[i];
        int64_t in = i == cut_of ? INT64_MAX : 0;
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (w->mark[ins->opnd[j]] & ANC && w->width[ins->opnd[j]] > in)
                in = w->width[ins->opnd[j]];
        int64_t b = ir_shape_bytes(&ins->shape);
        w->width[i] = b < in ? b : in;
    }
    *least = w->width[v];
    *least_at = v;
    return true;
}

/* The largest carried value at place p (marked; x: at_collective's
 * argument), its bytes (0: none) and the value into *at. */
static int64_t carried(Work *w, Place p, int32_t x, int32_t *at)
{
    const IrComputation *c = w->c;
    int64_t top = 0;
    if (x < 0 || c->instr[x].op == OP_WHILE) /* a loop's leaves may be such values: not counted twice */
        return 0;
    if (p.user >= 0)
        w->edges += flood(c, &w->u, p.other, 1, OTHERS, w->mark, w->stack);
    for (int32_t k = 0; k < c->ninstr && w->edges < BOUND_WORK; k++) {
        const IrInstr *ck = &c->instr[k];
        if (!own_collective(ck) || !(w->mark[k] & BEFORE) || !w->f.dep[k] || (w->mark[k] & OPERAND) ||
            read_after(c, &w->u, w->mark, k, 0))
            continue;
        for (int32_t i = 0; i < c->ninstr; i++)
            w->mark[i] &= (uint8_t)~DESC;
        w->edges += flood(c, &w->u, k, 1, DESC, w->mark, w->stack) + c->ninstr;
        for (int32_t v = 0; v < c->ninstr && w->edges < BOUND_WORK; v++) {
            if (!(w->mark[v] & DESC) || (w->mark[v] & AFTER) || !read_after(c, &w->u, w->mark, v, 0) ||
                v == c->root)
                continue;
            int64_t least;
            int32_t least_at = -1, nlist = 0;
            bool clear = cut_clear(w, k, v, &least, &least_at, &nlist);
            for (int32_t j = 0; j < nlist; j++)
                w->mark[w->f.list[j]] &= (uint8_t)~ANC;
            if (clear && least > top)
                top = least, *at = least_at;
        }
    }
    for (int32_t i = 0; i < c->ninstr; i++)
        w->mark[i] &= (uint8_t)~(DESC | OTHERS);
    return top;
}

static int64_t place_bytes(Work *w, Place p)
{
    Sum s = {0};
    int32_t x = mark_place(w, p), at = -1;
    at_collective(w->c, &w->u, w->mark, &w->f, x, &s);
    w->edges += w->c->ninstr;
    return s.bytes + (p.user >= 0 ? p.link_bytes : 0) + carried(w, p, x, &at);
}

/* ---- two values one instruction reads ----
 *
 * An instruction U that reads two values, each made from a dot or a
 * convolution through a chain of links that pass a buffer on
 * (elementwise ops, reshapes, bitcasts, transposes): A from dot a, B
 * from dot b. Every run of U reads a copy of each, made by a run of a
 * and a run of b before it; from that run of b to U's, some link of B's
 * chain is live (each lives until the next is made from it, or its
 * buffer becomes the next's). Take U's first run and the runs of a and
 * b that fed it: at whichever of the two came later, say a's, B's chain
 * holds at least its least link, beside what coexists at any run of a
 * before U's first: a's result and operands, the parameters held, the
 * donated ones read by a or by U or anything depending on U (all of
 * whose runs come after U's first), and the collectives a depends on
 * (run once, before it) read by U or after it. The bound of the pair is
 * the lesser of the two ways round; what the two chains hold is counted
 * once each (their links share nothing, and none is an operand of the
 * other dot: each live link is a buffer of its own).
 *
 * Example, an SGD step of a 3-layer tanh MLP: U = (dL/dh3) * (1 - h3^2)
 * reads dot12 = dL/dh3 (a dot of the next layer's gradient) and h3 =
 * tanh(dot9). Keeping dot12 while h3 is remade holds it at dot9, beside
 * dot9's operand h2 and x; keeping h3 holds it at dot12, beside its
 * operand and x: four activations either way, where one dot sees three. */

#define CHAINS_MAX 8    /* chains kept per operand */

typedef struct Chain {
    int32_t root;       /* the dot or convolution it starts from */
    int32_t n;
    int32_t link[CHAIN_DEPTH];
    int32_t least;      /* its link of least bytes */
    int64_t least_bytes;
} Chain;

/* The chains back from value v (cur: the links so far), into out. */
static void chains_of(const IrComputation *c, int32_t v, Chain *cur, Chain *out, int32_t *nout)
{
    const IrInstr *ins = &c->instr[v];
    if (*nout >= CHAINS_MAX || cur->n >= CHAIN_DEPTH || !ir_shape_is_array(&ins->shape))
        return;
    Chain saved = *cur;
    int64_t b = ir_shape_bytes(&ins->shape);
    cur->link[cur->n++] = v;
    if (cur->least < 0 || b < cur->least_bytes)
        cur->least = v, cur->least_bytes = b;
    if (makes_whole(ins)) {
        cur->root = v;
        out[(*nout)++] = *cur;
    } else if (link_op(ins)) {
        for (int32_t j = 0; j < ins->nopnd; j++)
            chains_of(c, ins->opnd[j], cur, out, nout);
    }
    *cur = saved;
}

/* Is a link of chain ch one of a state chain (state_chains)? The link
 * live on the chain may then be the one the state chain's line counts:
 * an update written over its donated weight (w - lr * g, the output),
 * made from the dot's gradient. Not a pair (counting both was no bound:
 * bf16 matmuls on f32 weights over 4 devices, 80384 bytes "proved"
 * where a plan of 77935 ran). */
static bool stateful(const Work *w, const Chain *ch)
{
    for (int32_t k = 0; k < ch->n; k++)
        if (w->in_state[ch->link[k]])
            return true;
    return false;
}

static bool in_chain(const Chain *ch, int32_t v)
{
    for (int32_t k = 0; k < ch->n; k++)
        if (ch->link[k] == v)
            return true;
    return false;
}

/* Do chains a and b share no link, and is neither's link an operand of
 * the other's dot? */
static bool apart(const IrComputation *c, const Chain *a, const Chain *b)
{
    for (int32_t k = 0; k < a->n; k++)
        if (in_chain(b, a->link[k]))
            return false;
    for (int32_t j = 0; j < c->instr[a->root].nopnd; j++)
        if (in_chain(b, c->instr[a->root].opnd[j]))
            return false;
    for (int32_t j = 0; j < c->instr[b->root].nopnd; j++)
        if (in_chain(a, c->instr[b->root].opnd[j]))
            return false;
    return true;
}

/* The pair place of U reading chains a and b: the lesser way round. */
static Place pair_place(Work *w, int32_t u, const Chain *a, const Chain *b, int64_t *bytes)
{
    Place pa = {a->root, 0, u, b->root, b->least, b->least_bytes};
    Place pb = {b->root, 0, u, a->root, a->least, a->least_bytes};
    int64_t ba = place_bytes(w, pa), bb = place_bytes(w, pb);
    *bytes = ba < bb ? ba : bb;
    return ba < bb ? pa : pb;
}

/* Every instruction reading two such values: the largest pair bound
 * into *best when it beats top. */
static int64_t best_pair(Work *w, int64_t top, Place *best)
{
    const IrComputation *c = w->c;
    Chain ca[CHAINS_MAX], cb[CHAINS_MAX];
    for (int32_t u = 0; u < c->ninstr && w->edges < BOUND_WORK; u++) {
        const IrInstr *ui = &c->instr[u];
        for (int32_t p = 0; p < ui->nopnd; p++)
            for (int32_t q = p + 1; q < ui->nopnd; q++) {
                if (ui->opnd[p] == ui->opnd[q])
                    continue;
                int32_t na = 0, nb = 0;
                Chain cur = {-1, 0, {0}, -1, 0};
                chains_of(c, ui->opnd[p], &cur, ca, &na);
                chains_of(c, ui->opnd[q], &cur, cb, &nb);
                for (int32_t i = 0; i < na; i++)
                    for (int32_t j = 0; j < nb && w->edges < BOUND_WORK; j++) {
                        if (ca[i].root == cb[j].root || !apart(c, &ca[i], &cb[j]) || stateful(w, &ca[i]) ||
                            stateful(w, &cb[j]))
                            continue;
                        int64_t b;
                        Place pl = pair_place(w, u, &ca[i], &cb[j], &b);
                        if (b > top)
                            top = b, *best = pl;
                    }
            }
    }
    return top;
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
        Place p = {-1, sizes[k], -1, -1, -1, 0};
        int64_t b = place_bytes(w, p);
        if (b > top)
            top = b, *best = p;
    }
    for (int32_t x = 0; x < c->ninstr && w->edges < BOUND_WORK; x++) {
        if (w->cost[x] < 0 && !makes_whole(&c->instr[x]) && !scatters(&c->instr[x]) &&
            c->instr[x].op != OP_WHILE)
            continue;
        Place p = {x, 0, -1, -1, -1, 0};
        int64_t b = place_bytes(w, p);
        if (b > top)
            top = b, *best = p;
    }
    ts_free(sizes);
    return best_pair(w, top, best);
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
    w.pos = ts_malloc((size_t)n * sizeof *w.pos);
    w.width = ts_malloc((size_t)n * sizeof *w.width);
    w.keys = ts_malloc((size_t)n * sizeof *w.keys);
    bool *donated = ts_calloc((size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *donated);
    uint8_t *dep = ts_calloc((size_t)n, 1), *feeds = ts_calloc((size_t)n, 1), *seen = ts_calloc((size_t)n, 1);
    int32_t *list = ts_malloc((size_t)n * sizeof *list), norder = 0;
    StateChain *state = ts_calloc((size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *state);
    uint8_t *in_state = ts_calloc((size_t)n, 1);
    w.f = (Facts){m, donated, state, dep, feeds, seen, list};
    w.in_state = in_state;
    bool ok = w.mark && w.stack && w.cost && w.pos && w.width && w.keys && donated && dep && feeds && seen && list &&
              state && in_state && users_build(c, &w.u);
    IrExecOrderError e;
    ok = ok && ir_exec_order_of(m, c, w.stack, &norder, &e) == IR_OK;
    if (ok)
        ir_alias_donated(m, donated, c->nparam);
    for (int32_t i = 0; ok && i < n; i++)
        w.pos[i] = n; /* not in the order: after all */
    for (int32_t k = 0; ok && k < norder; k++)
        w.pos[w.stack[k]] = k;
    for (int32_t k = 0; ok && k < norder; k++) {  /* operands first */
        const IrInstr *ins = &c->instr[w.stack[k]];
        int64_t pn = ins->a.parameter_number;
        dep[w.stack[k]] = ins->op == OP_PARAMETER && pn >= 0 && pn < c->nparam && donated[pn];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            dep[w.stack[k]] |= dep[ins->opnd[j]];
            feeds[ins->opnd[j]] |= own_collective(ins);
        }
    }
    if (ok)
        state_chains(c, &w.f, in_state, state);
    Place best = {-1, -1, -1, -1, -1, 0};
    int64_t top = ok ? best_place(&w, fit->floor, &best) : -1;
    ok = top >= 0;
    if (ok && (best.at >= 0 || best.least >= 0)) {
        Sum s = {0};
        int32_t x = mark_place(&w, best);
        at_collective(c, &w.u, w.mark, &w.f, x, &s);
        int32_t carried_at = -1;
        int64_t carried_bytes = carried(&w, best, x, &carried_at);
        s.n += (best.user >= 0) + (carried_bytes > 0);
        s.v = ir_alloc_array(ar, (size_t)s.n, sizeof *s.v);
        char where[256];
        if (best.user >= 0) {
            snprintf(where, sizeof where,
                     "instruction %s or %s, whichever runs later (%s reads a value made from each, so the other's "
                     "is live then; the lesser way round)",
                     c->instr[best.at].name, c->instr[best.other].name, c->instr[best.user].name);
        } else if (best.at >= 0) {
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
            if (best.user >= 0) { /* the other chain's least link */
                char why[256];
                if (best.link == best.other)
                    snprintf(why, sizeof why, "the other dot's result, read by %s: it or a value made from it is live",
                             c->instr[best.user].name);
                else
                    snprintf(why, sizeof why, "made from %s, read by %s: it or a value between them is live",
                             c->instr[best.other].name, c->instr[best.user].name);
                const char *text = ir_strdup(ar, why);
                ok = text != NULL;
                if (ok)
                    add(&s, &c->instr[best.link], best.link_bytes, text);
            }
            if (ok && carried_bytes > 0)
                add(&s, &c->instr[carried_at], carried_bytes,
                    "made from a collective that ran before, read after: it or a value between them is live");
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
    ts_free(w.pos);
    ts_free(w.width);
    ts_free(w.keys);
    ts_free(donated);
    ts_free(dep);
    ts_free(feeds);
    ts_free(seen);
    ts_free(list);
    ts_free(state);
    ts_free(in_state);
    return ok;
}
