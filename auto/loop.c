/*
 * loop.c: while loops made part of the graph (the view the solver sees).
 *
 * JAX lowers lax.scan and fori_loop (a stack of layers, a training loop)
 * as a while whose state is a tuple: a counter, the carried activations,
 * the stacked weights [L, ...] the body slices one layer of, the stacked
 * outputs it writes one layer into. Opaque, such a loop was priced as
 * taking its state replicated and its body had no choice at all: a
 * scan-over-layers model planned replicated.
 *
 * The view is one computation: the entry's instructions at their own
 * indices, then, for each while of the entry whose state is a flat tuple
 * of arrays (read in its body only by get-tuple-element) and whose body
 * and condition no other instruction calls, one *state* node per element
 * (a parameter-like leaf whose strategies are every spec of the element)
 * and the body's instructions. A get-tuple-element of the body's
 * parameter and one of the while's result become identities of their
 * state node (graph.c: followers, one choice), so each element's sharding
 * is one choice shared by the while's operand element (resharded into
 * it), the body's parameter and root (the root's element resharded into
 * it at every iteration), the condition's parameter and the while's
 * result. These two reshards are links (a value's spec to a state's),
 * priced as edges. The body's instructions have strategies as the
 * entry's do, their costs and reshards multiplied by the trip count: the
 * while's known_trip_count (XLA's backend config) or the pattern JAX
 * emits (the condition compares an element with a constant, LT, the body
 * adds 1 to it, the while starts it at a constant); otherwise once. The
 * condition stays out of the view: its counter is a scalar (replicated).
 * A body's own whiles are taken in the same way (nested loops: JAX's scans
 * inside a fori_loop), their bodies weighted by both trip counts, their
 * operand's reshards by the outer one's; so are a conditional's branch's
 * (cond.c calls auto_view_add_loops as it takes the branch in: a fori_loop
 * in a lax.cond, a scan in a lax.switch), weighted by the conditional's
 * runs, so loops and conditionals nest in any order.
 */
#include "auto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loops nested deeper than this stay opaque (a bound on the recursion). */
#define MAX_LOOP_DEPTH 8

static bool user_sharded(const IrInstr *x)
{
    return x->sharding && !x->sharding->unknown;
}

/* The value of a scalar integer constant. */
static bool scalar_int(const IrInstr *x, int64_t *v)
{
    if (x->op != OP_CONSTANT || x->shape.rank != 0 || !x->a.literal)
        return false;
    switch (x->shape.type) {
    case IR_S32: {
        int32_t t;
        memcpy(&t, x->a.literal, sizeof t);
        *v = t;
        return true;
    }
    case IR_S64:
        memcpy(v, x->a.literal, sizeof *v);
        return true;
    case IR_U32: {
        uint32_t t;
        memcpy(&t, x->a.literal, sizeof t);
        *v = t;
        return true;
    }
    default:
        return false;
    }
}

/* known_trip_count={"n":"4"} in the while's backend config. */
static bool known_trip_count(const IrInstr *w, int64_t *n)
{
    const char *b = ir_attrs_x(&w->a)->backend_config;
    const char *k = b ? strstr(b, "known_trip_count") : NULL;
    const char *p = k ? strstr(k, "\"n\"") : NULL;
    if (!p)
        return false;
    p += 3;
    while (*p == ':' || *p == ' ' || *p == '"')
        p++;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0)
        return false;
    *n = v;
    return true;
}

/* Element k of the tuple `t` of computation c reads parameter p's element
 * k unchanged plus `add` (a constant)? */
static bool gte_of(const IrComputation *c, int32_t t, int32_t param, int32_t k)
{
    const IrInstr *x = &c->instr[t];
    return x->op == OP_GET_TUPLE_ELEMENT && x->opnd[0] == param && x->a.tuple_index == k;
}

/* The pattern JAX emits for a counted loop: cond root `compare(gte(p, k),
 * constant N), direction=LT`, the body's root element k `add(gte(p, k),
 * constant 1)`, the while's operand (in `parent`, the computation holding
 * the while) a tuple whose element k is a constant S: N - S iterations. */
static bool counted(const IrModule *m, const IrComputation *parent, const IrInstr *w, int64_t *n)
{
    const IrComputation *cond = m->comp[w->called[0]], *body = m->comp[w->called[1]];
    const IrInstr *cmp = &cond->instr[cond->root];
    const IrInstr *init = &parent->instr[w->opnd[0]];
    const IrInstr *root = &body->instr[body->root];
    if (cmp->op != OP_COMPARE || cmp->a.direction != CMP_LT || cond->nparam != 1 || body->nparam != 1 ||
        init->op != OP_TUPLE || root->op != OP_TUPLE)
        return false;
    const IrInstr *ctr = &cond->instr[cmp->opnd[0]];
    int64_t limit, start, step;
    if (ctr->op != OP_GET_TUPLE_ELEMENT || ctr->opnd[0] != cond->param[0] ||
        !scalar_int(&cond->instr[cmp->opnd[1]], &limit))
        return false;
    int32_t k = (int32_t)ctr->a.tuple_index;
    if (k < 0 || k >= init->nopnd || k >= root->nopnd || !scalar_int(&parent->instr[init->opnd[k]], &start))
        return false;
    const IrInstr *inc = &body->instr[root->opnd[k]];
    if (inc->op != OP_ADD)
        return false;
    int32_t p = body->param[0];
    bool ok = (gte_of(body, inc->opnd[0], p, k) && scalar_int(&body->instr[inc->opnd[1]], &step)) ||
              (gte_of(body, inc->opnd[1], p, k) && scalar_int(&body->instr[inc->opnd[0]], &step));
    if (!ok || step != 1)
        return false;
    *n = limit > start ? limit - start : 0;
    return true;
}

/* A custom-call the partitioner runs as an identity or as the topk op
 * (XLA's memory annotations: a scan that offloads its saved activations
 * writes annotate_device_placement in its body), without the flag of
 * side effects: no more a side effect than a copy. */
static bool pure_custom_call(const IrInstr *x)
{
    return x->op == OP_CUSTOM_CALL && !x->a.x->custom_call_has_side_effect &&
           (shd_identity_custom_call(x, NULL) || ir_is_topk(x));
}

/* Is while w (of `parent`: the entry, or the body of a loop taken in)
 * one the view takes in? */
static bool takes(const IrModule *m, const IrComputation *parent, const IrInstr *w, const int32_t *calls)
{
    if (w->op != OP_WHILE || w->nopnd != 1 || w->ncalled != 2 || w->shape.type != IR_TUPLE ||
        user_sharded(w) || user_sharded(&parent->instr[w->opnd[0]]))
        return false;
    for (int32_t j = 0; j < 2; j++)
        if (w->called[j] < 0 || w->called[j] >= m->ncomp || calls[w->called[j]] != 1)
            return false;
    for (int32_t k = 0; k < w->shape.ntuple; k++)
        if (!ir_type_is_array(w->shape.tuple[k].type))
            return false;
    const IrComputation *body = m->comp[w->called[1]], *cond = m->comp[w->called[0]];
    if (body->nparam != 1 || body->param[0] < 0 || body->root < 0 || cond->nparam != 1 || cond->param[0] < 0)
        return false;
    const IrInstr *root = &body->instr[body->root];
    if (user_sharded(&body->instr[body->param[0]]) || user_sharded(root) || user_sharded(&cond->instr[cond->param[0]]))
        return false;
    for (int32_t i = 0; i < body->ninstr; i++) {
        const IrInstr *x = &body->instr[i];
        if ((ir_op_has_side_effect(x->op) && !pure_custom_call(x)) ||
            ir_attrs_x(&x->a)->custom_call_has_side_effect || ir_attrs_x(&x->a)->control_predecessors.n > 0)
            return false;
        for (int32_t o = 0; o < x->nopnd; o++)
            if (x->opnd[o] == body->param[0] && x->op != OP_GET_TUPLE_ELEMENT)
                return false;
    }
    return true;
}

/* Append instruction x (a copy) to the view; *at its index. */
static IrStatus append(IrArena *a, AutoView *v, int32_t *cap, const IrInstr *x, int32_t comp, int32_t instr,
                       double weight, IrDiag *d)
{
    if (v->comp.ninstr == *cap) {
        int32_t nc = *cap * 2 + 16;
        IrInstr *ni = ir_alloc_array(a, (size_t)nc, sizeof *ni);
        int32_t *wc = ir_alloc_array(a, (size_t)nc, sizeof *wc), *wi = ir_alloc_array(a, (size_t)nc, sizeof *wi);
        double *w = ir_alloc_array(a, (size_t)nc, sizeof *w);
        if (!ni || !wc || !wi || !w)
            return ir_oom(d, NULL);
        if (v->comp.ninstr) {
            memcpy(ni, v->comp.instr, (size_t)v->comp.ninstr * sizeof *ni);
            memcpy(wc, v->where_comp, (size_t)v->comp.ninstr * sizeof *wc);
            memcpy(wi, v->where_instr, (size_t)v->comp.ninstr * sizeof *wi);
            memcpy(w, v->weight, (size_t)v->comp.ninstr * sizeof *w);
        }
        v->comp.instr = ni;
        v->where_comp = wc;
        v->where_instr = wi;
        v->weight = w;
        *cap = nc;
    }
    int32_t k = v->comp.ninstr++;
    v->comp.instr[k] = *x;
    v->where_comp[k] = comp;
    v->where_instr[k] = instr;
    v->weight[k] = weight;
    return IR_OK;
}

static IrStatus link(IrArena *a, AutoView *v, int32_t *cap, int32_t from, int32_t to, double weight, IrDiag *d)
{
    if (v->nlink == *cap) {
        int32_t nc = *cap * 2 + 8;
        AutoLink *nl = ir_alloc_array(a, (size_t)nc, sizeof *nl);
        if (!nl)
            return ir_oom(d, NULL);
        if (v->nlink)
            memcpy(nl, v->link, (size_t)v->nlink * sizeof *nl);
        v->link = nl;
        *cap = nc;
    }
    v->link[v->nlink++] = (AutoLink){from, to, weight};
    return IR_OK;
}

/* An identity (copy) of state node s in place of a get-tuple-element. */
static IrStatus identity_of(IrArena *a, IrInstr *x, int32_t s, IrDiag *d)
{
    int32_t *op = ir_alloc_array(a, 1, sizeof *op);
    if (!op)
        return ir_oom(d, NULL);
    op[0] = s;
    x->op = OP_COPY;
    x->opnd = op;
    x->nopnd = 1;
    return IR_OK;
}

/* The view builders above, for cond.c's conditionals. */
IrStatus auto_view_append(IrArena *a, AutoView *v, int32_t *cap, const IrInstr *x, int32_t comp, int32_t instr,
                          double weight, IrDiag *d)
{
    return append(a, v, cap, x, comp, instr, weight, d);
}

IrStatus auto_view_link(IrArena *a, AutoView *v, int32_t *cap, int32_t from, int32_t to, double weight, IrDiag *d)
{
    return link(a, v, cap, from, to, weight, d);
}

IrStatus auto_view_identity(IrArena *a, IrInstr *x, int32_t s, IrDiag *d)
{
    return identity_of(a, x, s, d);
}

/* The loops the view takes in within computation c: its whiles taken in
 * and, in their bodies, theirs (nested loops). */
static int32_t count_loops(const IrModule *m, const IrComputation *c, const int32_t *calls, int32_t depth)
{
    int32_t n = 0;
    for (int32_t i = 0; depth < MAX_LOOP_DEPTH && i < c->ninstr; i++)
        if (takes(m, c, &c->instr[i], calls))
            n += 1 + count_loops(m, m->comp[c->instr[i].called[1]], calls, depth + 1);
    return n;
}

static IrStatus add_loops(IrArena *a, const IrModule *m, AutoView *v, int32_t c, int32_t first, double weight,
                          const int32_t *calls, int32_t depth, int32_t *cap, int32_t *lcap, IrDiag *d);

/* While wi of computation `pc` (its instructions at view indices pfirst
 * on, each run `outer` times a step) into the view: its state nodes, its
 * body (each instruction run outer x trips times), and the whiles the
 * body holds, the same way. */
static IrStatus add_loop(IrArena *a, const IrModule *m, AutoView *v, int32_t pc, int32_t pfirst, int32_t wi,
                         double outer, const int32_t *calls, int32_t depth, int32_t *cap, int32_t *lcap,
                         IrDiag *d)
{
    const IrComputation *parent = m->comp[pc];
    const IrInstr *w = &parent->instr[wi];
    const IrComputation *body = m->comp[w->called[1]];
    AutoLoop *L = &v->loop[v->nloop++];
    L->instr = pfirst + wi;
    L->trips = 1;
    int64_t n;
    L->trips_known = known_trip_count(w, &n) || counted(m, parent, w, &n);
    if (L->trips_known)
        L->trips = (double)n;
    L->nstate = w->shape.ntuple;
    L->first_state = v->comp.ninstr;
    double trips = (L->trips > 0 ? L->trips : 0) * outer;
    for (int32_t k = 0; k < L->nstate; k++) {
        IrInstr s;
        memset(&s, 0, sizeof s);
        s.op = OP_PARAMETER;
        s.a = w->a;
        s.a.parameter_number = -1; /* no entry parameter: never aliased */
        s.shape = w->shape.tuple[k];
        s.pos = w->pos;
        char *name = ir_alloc_array(a, strlen(w->name) + 24, 1);
        if (!name)
            return ir_oom(d, NULL);
        snprintf(name, strlen(w->name) + 24, "%s.state[%d]", w->name, (int)k);
        s.name = name;
        /* An element the body passes through unchanged (a scan's stacked
         * weights) writes nothing: the while hands the body its operand's
         * buffer by reference (device/exec.c's run_while) and the body
         * hands it back, so its state node weighs 0. Charged its bytes
         * once, the stack held whole cost a copy the runtime never makes
         * (ws[6,128,128] on 4 devices: 0.059 ms of a 1.3 ms step), and
         * the plan sliced the weights and gathered the activations every
         * layer (663,588 bytes a device where data parallel moves 36). */
        double sw = auto_loop_passed_through(body, k) ? 0 : 1;
        IrStatus st = append(a, v, cap, &s, -1, -1, sw, d);
        if (st != IR_OK)
            return st;
    }
    /* The while's operand's elements reshard into the state once each
     * time the while runs. */
    const IrInstr *init = &parent->instr[w->opnd[0]];
    for (int32_t k = 0; init->op == OP_TUPLE && k < init->nopnd && k < L->nstate; k++) {
        IrStatus st = link(a, v, lcap, pfirst + init->opnd[k], L->first_state + k, outer, d);
        if (st != IR_OK)
            return st;
    }
    int32_t first = v->comp.ninstr, param = body->param[0];
    for (int32_t i = 0; i < body->ninstr; i++) {
        IrInstr x = body->instr[i];
        int32_t *op = x.nopnd ? ir_alloc_array(a, (size_t)x.nopnd, sizeof *op) : NULL;
        if (x.nopnd && !op)
            return ir_oom(d, NULL);
        for (int32_t o = 0; o < x.nopnd; o++)
            op[o] = first + x.opnd[o];
        x.opnd = op;
        x.a.parameter_number = x.op == OP_PARAMETER ? -1 : x.a.parameter_number;
        IrStatus st = IR_OK;
        if (x.op == OP_GET_TUPLE_ELEMENT && body->instr[i].opnd[0] == param && x.a.tuple_index >= 0 &&
            x.a.tuple_index < L->nstate && !user_sharded(&x))
            st = identity_of(a, &x, L->first_state + (int32_t)x.a.tuple_index, d);
        if (st == IR_OK)
            st = append(a, v, cap, &x, w->called[1], i, trips, d);
        if (st != IR_OK)
            return st;
    }
    /* The body's root elements reshard into the state every iteration. */
    const IrInstr *root = &body->instr[body->root];
    for (int32_t k = 0; root->op == OP_TUPLE && k < root->nopnd && k < L->nstate; k++) {
        IrStatus st = link(a, v, lcap, first + root->opnd[k], L->first_state + k, trips, d);
        if (st != IR_OK)
            return st;
    }
    /* The while's result: its elements are the state's. */
    for (int32_t i = pfirst; i < pfirst + parent->ninstr; i++) {
        IrInstr *x = &v->comp.instr[i];
        if (x->op == OP_GET_TUPLE_ELEMENT && x->opnd[0] == pfirst + wi && !user_sharded(x) &&
            x->a.tuple_index >= 0 && x->a.tuple_index < L->nstate) {
            IrStatus st = identity_of(a, x, L->first_state + (int32_t)x->a.tuple_index, d);
            if (st != IR_OK)
                return st;
        }
    }
    /* Loops in the body (a scan inside a fori_loop). */
    return add_loops(a, m, v, w->called[1], first, trips, calls, depth + 1, cap, lcap, d);
}

/* The whiles of computation c (its instructions at view indices first
 * on, each run `weight` times a step) taken in, and theirs. */
static IrStatus add_loops(IrArena *a, const IrModule *m, AutoView *v, int32_t c, int32_t first, double weight,
                          const int32_t *calls, int32_t depth, int32_t *cap, int32_t *lcap, IrDiag *d)
{
    const IrComputation *comp = m->comp[c];
    for (int32_t i = 0; depth < MAX_LOOP_DEPTH && i < comp->ninstr; i++)
        if (takes(m, comp, &comp->instr[i], calls)) {
            IrStatus st = add_loop(a, m, v, c, first, i, weight, calls, depth, cap, lcap, d);
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}

IrStatus auto_view_add_loops(IrArena *a, const IrModule *m, AutoView *v, int32_t c, int32_t first, double weight,
                             const int32_t *calls, int32_t *cap, int32_t *lcap, IrDiag *d)
{
    /* v->loop holds exactly the loops taken so far: grown by all of c's
     * at once, so add_loop's pointer into it stays valid. */
    int32_t n = count_loops(m, m->comp[c], calls, 0);
    if (!n)
        return IR_OK;
    AutoLoop *nl = ir_alloc_array(a, (size_t)(v->nloop + n), sizeof *nl);
    if (!nl)
        return ir_oom(d, NULL);
    if (v->nloop)
        memcpy(nl, v->loop, (size_t)v->nloop * sizeof *nl);
    v->loop = nl;
    return add_loops(a, m, v, c, first, weight, calls, 0, cap, lcap, d);
}

int32_t *auto_call_counts(const IrModule *m)
{
    int32_t *calls = ts_calloc((size_t)(m->ncomp > 0 ? m->ncomp : 1), sizeof *calls);
    for (int32_t c = 0; calls && c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            for (int32_t j = 0; j < m->comp[c]->instr[i].ncalled; j++) {
                int32_t t = m->comp[c]->instr[i].called[j];
                if (t >= 0 && t < m->ncomp)
                    calls[t]++;
            }
    return calls;
}

IrStatus auto_loop_view(IrArena *a, const IrModule *m, AutoView *v, IrDiag *d)
{
    memset(v, 0, sizeof *v);
    const IrComputation *entry = ir_entry(m);
    v->comp = *entry;
    v->nentry = entry->ninstr;
    /* How often each computation is called (a body shared by two whiles,
     * or called elsewhere, stays opaque). */
    int32_t *calls = auto_call_counts(m);
    if (!calls)
        return ir_oom(d, NULL);
    int32_t cap = 0, lcap = 0;
    IrStatus st = IR_OK;
    /* The entry's instructions at their own indices (copied: the loops'
     * get-tuple-elements are rewritten in the view only). */
    v->comp.ninstr = 0;
    v->comp.instr = NULL;
    for (int32_t i = 0; st == IR_OK && i < entry->ninstr; i++)
        st = append(a, v, &cap, &entry->instr[i], m->entry, i, 1, d);
    if (st == IR_OK)
        st = auto_view_add_loops(a, m, v, m->entry, 0, 1, calls, &cap, &lcap, d);
    ts_free(calls);
    return st;
}

/* The sharding of element k of loop L under the plan: the state node's
 * chosen spec; replicated where it has no strategy. */
static IrSharding *state_sharding(IrArena *a, const AutoGraph *g, const int32_t *choice, const AutoLoop *L,
                                  int32_t k)
{
    const AutoNode *s = &g->node[L->first_state + k];
    const IrShape *shape = &g->comp->instr[L->first_state + k].shape;
    AutoSpec rep = auto_spec_replicated();
    const AutoSpec *spec = s->group >= 0 ? &s->strat[choice[s->group]].out : &rep;
    return auto_spec_sharding(a, &g->mesh, spec, shape->rank);
}

IrStatus auto_loop_annotate(IrModule *m, const AutoGraph *g, const int32_t *choice, IrDiag *d)
{
    const AutoView *v = &g->view;
    for (int32_t l = 0; l < v->nloop; l++) {
        const AutoLoop *L = &v->loop[l];
        IrComputation *parent = m->comp[v->where_comp[L->instr]];
        IrInstr *w = &parent->instr[v->where_instr[L->instr]];
        IrSharding **el = ir_alloc_array(m->arena, (size_t)(L->nstate > 0 ? L->nstate : 1), sizeof *el);
        if (!el)
            return ir_oom(d, NULL);
        for (int32_t k = 0; k < L->nstate; k++)
            if (!(el[k] = state_sharding(m->arena, g, choice, L, k)))
                return ir_oom(d, NULL);
        IrSharding *t = shd_tuple(m->arena, L->nstate, el);
        if (!t)
            return ir_oom(d, NULL);
        IrComputation *cond = m->comp[w->called[0]], *body = m->comp[w->called[1]];
        w->sharding = t;
        if (parent->instr[w->opnd[0]].op == OP_TUPLE)
            parent->instr[w->opnd[0]].sharding = t;
        body->instr[body->param[0]].sharding = t;
        body->instr[body->root].sharding = t;
        cond->instr[cond->param[0]].sharding = t;
    }
    return IR_OK;
}
