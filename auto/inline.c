/*
 * inline.c: the entry computation's calls inlined before the auto-sharder
 * builds its graph.
 *
 * JAX lowers every jnp.take, log_softmax, take_along_axis and their
 * transposes as a `call` of a small computation; the graph sees only the
 * entry computation, where a call is opaque: its operands were priced as
 * arriving replicated and nothing inside it (the gather of an embedding
 * lookup, the reduces of a softmax, the scatter-add of its gradient) had a
 * choice. XLA runs its CallInliner before SPMD partitioning for the same
 * reason. Inlined, the callee's instructions are entry instructions like
 * any other: priced by their sharded contents, and given shardings.
 *
 * A call is inlined when neither it nor its callee says otherwise: no
 * sharding on the call (the user's constraint on its result stays where
 * it was written), no instruction with side effects or control
 * predecessors in the callee, and none in the entry with control
 * predecessors (they name instruction indices this renumbers). Calls
 * inside an inlined callee are inlined too. A get-tuple-element of a tuple
 * (the callee's tuple root, read by the caller) becomes the tuple's
 * operand; an inlined instruction nothing uses is dropped. A callee
 * inlined that nothing calls any more (from the entry, directly or
 * through what it calls) is removed from the module: the plan and the
 * module printed hold only what runs; one still called elsewhere (a
 * reduce's to_apply, a call left whole) stays.
 *
 * The bodies of the entry's loops and the branches of its conditionals
 * (called once each), and theirs, have their calls inlined the same way:
 * the graph takes them in too (loop.c, cond.c).
 *
 * Requires a verified module; keeps it verified and its values: the same
 * instructions compute the same results, renamed where names clash.
 */
#include "auto.h"

#include <string.h>

/* Nesting of calls inside inlined callees followed at most (the verifier
 * rules out cycles; this bounds the C stack). */
#define MAX_DEPTH 64

typedef struct Inliner {
    IrModule *m;
    IrInstr *out;     /* the new entry, in topological order */
    bool *inlined;    /* out[k] came from a callee (droppable when unused) */
    int32_t n;
    int64_t cap, capb;
    int32_t ninlined; /* calls inlined */
    bool *callee;     /* per computation: some call of it was inlined */
    IrDiag *d;
} Inliner;

static bool has_control_predecessors(const IrComputation *c)
{
    for (int32_t i = 0; i < c->ninstr; i++)
        if (ir_attrs_x(&c->instr[i].a)->control_predecessors.n > 0)
            return true;
    return false;
}

static bool user_sharded(const IrInstr *x)
{
    return x->sharding && !x->sharding->unknown;
}

/* The async-start an async-done reads in the new entry (through its
 * async-updates), where no step of the chain carries the user's
 * sharding; -1 otherwise. */
static int32_t async_start_of(const Inliner *in, int32_t v)
{
    for (int32_t hops = 0; v >= 0 && hops < 64; hops++) {
        const IrInstr *y = &in->out[v];
        if (user_sharded(y))
            return -1;
        if (y->op == OP_ASYNC_START)
            return v;
        if (y->op != OP_ASYNC_UPDATE || y->nopnd != 1)
            return -1;
        v = y->opnd[0];
    }
    return -1;
}

/* A call, a fusion, or an async-done (its start's wrapped computation run
 * where the done is: an async pair is a call split in two) whose callee
 * may be inlined. */
static bool callee_inlinable(const IrModule *m, int32_t k);

static bool inlinable(const IrModule *m, const IrInstr *x)
{
    if ((x->op != OP_CALL && x->op != OP_FUSION && x->op != OP_ASYNC_DONE) || x->ncalled != 1 || user_sharded(x))
        return false;
    return callee_inlinable(m, x->called[0]);
}

/* Computation k: no side effects, no control predecessors, a root. */
static bool callee_inlinable(const IrModule *m, int32_t k)
{
    if (k < 0 || k >= m->ncomp)
        return false;
    const IrComputation *callee = m->comp[k];
    if (callee->root < 0 || has_control_predecessors(callee))
        return false;
    for (int32_t i = 0; i < callee->ninstr; i++) {
        const IrInstr *y = &callee->instr[i];
        if (ir_op_has_side_effect(y->op) || ir_attrs_x(&y->a)->custom_call_has_side_effect)
            return false;
    }
    return true;
}

/* Append x (its operands already new indices) to the new entry. */
static IrStatus emit(Inliner *in, const IrInstr *x, bool inlined, int32_t *at)
{
    if (!IR_GROW(in->out, in->cap, in->n + 1) || !IR_GROW(in->inlined, in->capb, in->n + 1))
        return ir_oom(in->d, NULL);
    in->out[in->n] = *x;
    in->inlined[in->n] = inlined;
    *at = in->n++;
    return IR_OK;
}

/* Computation c's instructions into the new entry, with map[] (c->ninstr
 * entries) taking c's indices to the new ones; a callee's parameters are
 * args[]. */
static IrStatus copy_computation(Inliner *in, const IrComputation *c, const int32_t *args, int32_t *map,
                                 int depth);

/* Computation k called with args (new indices) inlined: *at is the new
 * index of its root. A call's, a fusion's, an async pair's wrapper. */
static IrStatus inline_callee(Inliner *in, int32_t k, const int32_t *args, int depth, int32_t *at)
{
    const IrComputation *callee = in->m->comp[k];
    in->callee[k] = true;
    int32_t *map = ts_malloc((size_t)callee->ninstr * sizeof *map);
    if (!map)
        return ir_oom(in->d, NULL);
    IrStatus st = copy_computation(in, callee, args, map, depth + 1);
    if (st == IR_OK)
        *at = map[callee->root];
    ts_free(map);
    in->ninlined++;
    return st;
}

static IrStatus copy_computation(Inliner *in, const IrComputation *c, const int32_t *args, int32_t *map,
                                 int depth)
{
    int32_t *order = NULL;
    IrStatus st = ir_topo_order(in->m, c, &order, in->d);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < c->ninstr; i++)
        map[i] = -1;
    for (int32_t k = 0; st == IR_OK && k < c->ninstr; k++) {
        int32_t i = order[k];
        const IrInstr *x = &c->instr[i];
        if (args && x->op == OP_PARAMETER) {
            map[i] = args[x->a.parameter_number];
            continue;
        }
        int32_t *opnd = x->nopnd ? ir_alloc_array(in->m->arena, (size_t)x->nopnd, sizeof *opnd) : NULL;
        if (x->nopnd && !opnd) {
            st = ir_oom(in->d, NULL);
            break;
        }
        for (int32_t o = 0; o < x->nopnd; o++)
            opnd[o] = map[x->opnd[o]];
        const IrInstr *src = x->nopnd ? &in->out[opnd[0]] : NULL;
        if (x->op == OP_GET_TUPLE_ELEMENT && src->op == OP_TUPLE && !(x->sharding && !x->sharding->unknown) &&
            x->a.tuple_index >= 0 && x->a.tuple_index < src->nopnd) {
            map[i] = src->opnd[x->a.tuple_index];
            continue;
        }
        if (depth < MAX_DEPTH && inlinable(in->m, x) && x->op != OP_ASYNC_DONE) {
            st = inline_callee(in, x->called[0], opnd, depth, &map[i]);
            continue;
        }
        /* A sugared OP-done names no computation: its start's wrapper. */
        int32_t start = x->op == OP_ASYNC_DONE && x->nopnd == 1 && !user_sharded(x) ? async_start_of(in, opnd[0]) : -1;
        int32_t wrapped = start >= 0 && in->out[start].ncalled == 1 ? in->out[start].called[0] : -1;
        if (depth < MAX_DEPTH && wrapped >= 0 && (x->ncalled == 0 || x->called[0] == wrapped) &&
            callee_inlinable(in->m, wrapped)) {
            /* The start and its updates go where nothing else reads
             * them (install drops them). */
            for (int32_t v = opnd[0]; v != start; v = in->out[v].opnd[0])
                in->inlined[v] = true;
            in->inlined[start] = true;
            st = inline_callee(in, wrapped, in->out[start].opnd, depth, &map[i]);
            continue;
        }
        IrInstr y = *x;
        y.opnd = opnd;
        if (args && !(y.name = ir_unique_name(in->m, x->name))) {
            st = ir_oom(in->d, NULL);
            break;
        }
        st = emit(in, &y, args != NULL, &map[i]);
    }
    ts_free(order);
    return st;
}

/* The new entry into c: inlined instructions nothing uses dropped. */
static IrStatus install(Inliner *in, IrComputation *c, int32_t root)
{
    int32_t *uses = ts_calloc((size_t)in->n, sizeof *uses), *renum = ts_malloc((size_t)in->n * sizeof *renum);
    if (!uses || !renum) {
        ts_free(uses);
        ts_free(renum);
        return ir_oom(in->d, NULL);
    }
    uses[root]++;
    for (int32_t k = 0; k < in->n; k++)
        for (int32_t o = 0; o < in->out[k].nopnd; o++)
            uses[in->out[k].opnd[o]]++;
    /* Topological order: users come after their operands, so one pass
     * from the end frees whole dead chains. */
    for (int32_t k = in->n - 1; k >= 0; k--)
        if (in->inlined[k] && !uses[k]) {
            uses[k] = -1;
            for (int32_t o = 0; o < in->out[k].nopnd; o++)
                uses[in->out[k].opnd[o]]--;
        }
    c->ninstr = 0;
    c->nparam = 0;
    IrStatus st = IR_OK;
    for (int32_t k = 0; st == IR_OK && k < in->n; k++) {
        if (uses[k] < 0)
            continue;
        IrInstr *x = &in->out[k];
        for (int32_t o = 0; o < x->nopnd; o++)
            x->opnd[o] = renum[x->opnd[o]];
        if ((renum[k] = ir_add_instr(in->m, c, x)) < 0)
            st = ir_oom(in->d, NULL);
    }
    if (st == IR_OK)
        c->root = renum[root];
    ts_free(uses);
    ts_free(renum);
    return st;
}

/* Mark computation k and what it calls, transitively, in reached[]. */
static void reach(const IrModule *m, int32_t k, bool *reached, int32_t *stack)
{
    int32_t top = 0;
    reached[k] = true;
    stack[top++] = k;
    while (top > 0) {
        const IrComputation *c = m->comp[stack[--top]];
        for (int32_t i = 0; i < c->ninstr; i++)
            for (int32_t j = 0; j < c->instr[i].ncalled; j++) {
                int32_t t = c->instr[i].called[j];
                if (t >= 0 && t < m->ncomp && !reached[t]) {
                    reached[t] = true;
                    stack[top++] = t;
                }
            }
    }
}

/* The inlined callees nothing reaches from the entry taken out of m's
 * computations (ir_drop_computations renumbers the others). */
static IrStatus drop_inlined_callees(IrModule *m, const bool *callee, IrDiag *d)
{
    bool *reached = ts_calloc((size_t)m->ncomp, sizeof *reached);
    int32_t *stack = ts_malloc((size_t)m->ncomp * sizeof *stack);
    if (!reached || !stack) {
        ts_free(reached);
        ts_free(stack);
        return ir_oom(d, NULL);
    }
    reach(m, m->entry, reached, stack);
    for (int32_t k = 0; k < m->ncomp; k++)
        reached[k] = callee[k] && !reached[k]; /* now: drop k */
    ir_drop_computations(m, reached);
    ts_free(reached);
    ts_free(stack);
    return IR_OK;
}

/* The calls of computation c inlined into it (callee[] marks the callees
 * inlined; *ninlined counts the calls). */
static IrStatus inline_into(IrModule *m, IrComputation *c, bool *callee, int32_t *ninlined, IrDiag *d)
{
    bool any = false;
    for (int32_t i = 0; i < c->ninstr && !any; i++)
        any = inlinable(m, &c->instr[i]) || c->instr[i].op == OP_ASYNC_DONE;
    if (!any || has_control_predecessors(c))
        return IR_OK;
    Inliner in = {.m = m, .d = d, .callee = callee};
    int32_t *map = ts_malloc((size_t)c->ninstr * sizeof *map);
    IrStatus st = map ? copy_computation(&in, c, NULL, map, 0) : ir_oom(d, NULL);
    if (st == IR_OK)
        st = install(&in, c, map[c->root]);
    if (st == IR_OK)
        *ninlined += in.ninlined;
    ts_free(map);
    ts_free(in.out);
    ts_free(in.inlined);
    return st;
}

/* The j-th computation of x (of the entry, a loop's body or a branch)
 * that takes part in the graph and is called by nothing else (it is
 * changed in place): a while's body (auto/loop.c), a conditional's
 * branch (auto/cond.c); -1: none. */
static int32_t graph_callee(const IrModule *m, const IrInstr *x, const int32_t *calls, int32_t j)
{
    int32_t k = x->op == OP_WHILE && x->ncalled == 2 && j == 0 ? x->called[1]
                : x->op == OP_CONDITIONAL && j < x->ncalled ? x->called[j]
                                                             : -1;
    return k >= 0 && k < m->ncomp && calls[k] == 1 && m->comp[k]->root >= 0 ? k : -1;
}

/* The calls in the bodies of c's loops and in its conditionals' branches
 * inlined, and in theirs (a scan inside a fori_loop, a cond inside a
 * scan: auto/loop.c and auto/cond.c take them in). */
static IrStatus inline_loop_bodies(IrModule *m, int32_t c, bool *callee, int32_t *ninlined, const int32_t *calls,
                                   int32_t depth, IrDiag *d)
{
    IrStatus st = IR_OK;
    for (int32_t i = 0; st == IR_OK && depth < MAX_DEPTH && i < m->comp[c]->ninstr; i++) {
        const IrInstr *x = &m->comp[c]->instr[i];
        for (int32_t j = 0; st == IR_OK && j < x->ncalled; j++) {
            int32_t body = graph_callee(m, x, calls, j);
            if (body < 0)
                continue;
            st = inline_into(m, m->comp[body], callee, ninlined, d);
            if (st == IR_OK)
                st = inline_loop_bodies(m, body, callee, ninlined, calls, depth + 1, d);
            x = &m->comp[c]->instr[i]; /* inline_into rebuilt another computation: c's instructions stay */
        }
    }
    return st;
}

IrStatus auto_inline_calls(IrModule *m, int32_t *ninlined, IrDiag *d)
{
    *ninlined = 0;
    bool *callee = ts_calloc((size_t)m->ncomp, sizeof(bool));
    int32_t *calls = ts_calloc((size_t)m->ncomp, sizeof *calls);
    bool *reached = ts_calloc((size_t)m->ncomp, sizeof *reached);
    int32_t *stack = ts_malloc((size_t)m->ncomp * sizeof *stack);
    IrStatus st = callee && calls && reached && stack ? inline_into(m, ir_entry(m), callee, ninlined, d)
                                                      : ir_oom(d, NULL);
    /* Then the bodies of the entry's loops and of theirs, which the
     * graph sees too (JAX's scan bodies call their slicing and their
     * layer). Their calls counted from what the entry still reaches: a
     * callee inlined (a scan's expansion, whose while is now the entry's)
     * calls the same body until it is dropped. */
    if (st == IR_OK)
        reach(m, m->entry, reached, stack);
    for (int32_t k = 0; st == IR_OK && k < m->ncomp; k++)
        for (int32_t i = 0; reached[k] && i < m->comp[k]->ninstr; i++)
            for (int32_t j = 0; j < m->comp[k]->instr[i].ncalled; j++) {
                int32_t t = m->comp[k]->instr[i].called[j];
                if (t >= 0 && t < m->ncomp)
                    calls[t]++;
            }
    if (st == IR_OK)
        st = inline_loop_bodies(m, m->entry, callee, ninlined, calls, 0, d);
    if (st == IR_OK && *ninlined)
        st = drop_inlined_callees(m, callee, d);
    ts_free(callee);
    ts_free(calls);
    ts_free(reached);
    ts_free(stack);
    return st;
}
