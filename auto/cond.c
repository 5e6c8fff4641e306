/*
 * cond.c: conditionals made part of the graph (the view the solver sees).
 *
 * JAX lowers lax.cond and lax.switch as a conditional whose operands are
 * one tuple per branch (or one array) and whose branches read their tuple
 * parameter by get-tuple-element. Opaque, a conditional was held whole:
 * nothing inside its branches had a choice, and what fed it was priced as
 * taking any sharding (a lax.switch's layer moved 24576 bytes on 2
 * devices where data parallel moves none; a lax.cond in a scan's body
 * 49152 where it moves 24).
 *
 * Taken in, after the loops (loop.c), for each conditional of the view
 * (of the entry, of a loop body taken in, of a branch taken in):
 *   - one *result* node per element of its result (a parameter-like leaf
 *     whose strategies are every spec of the element): the conditional's
 *     get-tuple-elements in its computation (for an array result, the
 *     conditional itself) become identities of it (graph.c: followers,
 *     one choice), and each branch's root element is resharded into it (a
 *     link), as the partitioner ends every branch's root in the
 *     conditional's sharding (partition/spmd_control.c);
 *   - per branch, one *parameter* node per element of its tuple
 *     parameter: the branch's get-tuple-elements of it become identities,
 *     and the operand tuple's element is resharded into it each time the
 *     conditional runs (a link), as the partitioner reshards every
 *     branch's operand to that branch's parameter sharding before it
 *     branches, whichever branch runs; an array parameter is a node of
 *     its own, its operand resharded into it;
 *   - the branches' instructions, with strategies as the entry's (their
 *     calls inlined: inline.c); a branch's parameter writes nothing (it
 *     is its operand's buffer), so its nodes weigh 0;
 *   - the branches' whiles, as loop.c takes in the entry's (the same
 *     conditions, their trips, their state nodes and bodies), their
 *     bodies run the conditional's weight times their trips: held whole,
 *     a fori_loop in a lax.cond ran its layers replicated or was left to
 *     propagation (tests/jax/test_auto_quality.py's fori_cond moved
 *     294,912 bytes a device on 4 where data parallel moves 0).
 * Cost: every branch is priced as if it ran each time the conditional
 * runs (the conditional's weight), so the objective holds the sum over
 * the branches: the most expensive branch where the others pass their
 * values through (a skipped update, a skip layer), above it otherwise.
 * The maximum itself is no sum over groups and pairs; the mean (each
 * branch 1/n) priced the work inside a branch below what surrounds it,
 * and a lax.cond in a scan of 6 layers gathered its weights in the branch
 * every iteration: 98304 bytes on 2 devices against data parallel's 24
 * (tests/jax/test_auto_quality.py's cond_scan; 24 with the sum).
 * Annotated (auto_cond_annotate): the conditional and each branch's root
 * with the result nodes' specs (propagation holds them one: an array
 * root chosen otherwise computes in the result's), each branch's tuple
 * parameter with its parameter nodes'; the instructions inside as any
 * node. A conditional whose branches are shared or called elsewhere,
 * user-sharded, have side effects, or take or return something else
 * stays held whole (propagation shards it, as before).
 */
#include "auto.h"

#include <stdio.h>
#include <string.h>

/* Conditionals taken in at most (a bound on the scan; each branch is
 * called once, so nesting cannot recur). */
#define MAX_CONDS 4096

static bool user_sharded(const IrInstr *x)
{
    return x->sharding && !x->sharding->unknown;
}

static bool tuple_of_arrays(const IrShape *s)
{
    if (s->type != IR_TUPLE)
        return false;
    for (int32_t k = 0; k < s->ntuple; k++)
        if (!ir_type_is_array(s->tuple[k].type))
            return false;
    return true;
}

/* Branch b of view conditional x (the view's computation c) one the view
 * can take in: called by x alone, its parameter a tuple of arrays read
 * only by get-tuple-element and fed by a tuple instruction, or an array;
 * its root of x's result's shape (a tuple instruction where that is a
 * tuple). */
static bool branch_ok(const IrModule *m, const IrComputation *c, const IrInstr *x, int32_t b, const int32_t *calls)
{
    int32_t k = x->called[b];
    if (k < 0 || k >= m->ncomp || calls[k] != 1)
        return false;
    const IrComputation *br = m->comp[k];
    if (br->nparam != 1 || br->param[0] < 0 || br->root < 0)
        return false;
    const IrInstr *p = &br->instr[br->param[0]], *root = &br->instr[br->root];
    const IrInstr *opnd = &c->instr[x->opnd[b + 1]];
    bool tuple = p->shape.type == IR_TUPLE;
    if (user_sharded(p) || user_sharded(root) || (tuple && (!tuple_of_arrays(&p->shape) || opnd->op != OP_TUPLE ||
                                                            opnd->nopnd != p->shape.ntuple)) ||
        (!tuple && !ir_type_is_array(p->shape.type)))
        return false;
    if (x->shape.type == IR_TUPLE ? root->op != OP_TUPLE || root->nopnd != x->shape.ntuple : root->shape.type == IR_TUPLE)
        return false;
    for (int32_t i = 0; i < br->ninstr; i++) {
        const IrInstr *y = &br->instr[i];
        if (ir_op_has_side_effect(y->op) || ir_attrs_x(&y->a)->custom_call_has_side_effect ||
            ir_attrs_x(&y->a)->control_predecessors.n > 0)
            return false;
        for (int32_t o = 0; tuple && o < y->nopnd; o++)
            if (y->opnd[o] == br->param[0] && (y->op != OP_GET_TUPLE_ELEMENT || y->a.tuple_index < 0 ||
                                               y->a.tuple_index >= p->shape.ntuple))
                return false;
    }
    return !tuple || br->root != br->param[0];
}

/* Is view instruction i a conditional the view takes in? */
static bool takes(const IrModule *m, const AutoView *v, int32_t i, const int32_t *calls)
{
    const IrInstr *x = &v->comp.instr[i];
    if (x->op != OP_CONDITIONAL || v->where_comp[i] < 0 || user_sharded(x) || x->ncalled < 1 ||
        x->nopnd != x->ncalled + 1 || (!tuple_of_arrays(&x->shape) && !ir_type_is_array(x->shape.type)))
        return false;
    for (int32_t b = 0; b < x->ncalled; b++)
        if (!branch_ok(m, &v->comp, x, b, calls))
            return false;
    return true;
}

/* The view's arrays grown as loop.c grows them (cap, lcap: what they
 * hold). */
typedef struct Builder {
    IrArena *a;
    AutoView *v;
    int32_t cap, lcap;
    IrDiag *d;
} Builder;

static IrStatus append(Builder *bd, const IrInstr *x, int32_t comp, int32_t instr, double weight)
{
    return auto_view_append(bd->a, bd->v, &bd->cap, x, comp, instr, weight, bd->d);
}

static IrStatus link(Builder *bd, int32_t from, int32_t to, double weight)
{
    return auto_view_link(bd->a, bd->v, &bd->lcap, from, to, weight, bd->d);
}

static IrStatus identity_of(Builder *bd, IrInstr *x, int32_t s)
{
    return auto_view_identity(bd->a, x, s, bd->d);
}

/* State nodes (parameter-like leaves, run `weight` times a step) of the
 * elements of tuple `shape`, named after conditional x with `what`;
 * *first the first's index. */
static IrStatus states(Builder *bd, const IrInstr *x, const IrShape *shape, const char *what, double weight,
                       int32_t *first)
{
    *first = bd->v->comp.ninstr;
    int32_t n = shape->type == IR_TUPLE ? shape->ntuple : 1;
    for (int32_t k = 0; k < n; k++) {
        IrInstr s;
        memset(&s, 0, sizeof s);
        s.op = OP_PARAMETER;
        s.a = x->a;
        s.a.parameter_number = -1; /* no entry parameter: never aliased */
        s.shape = shape->type == IR_TUPLE ? shape->tuple[k] : *shape;
        s.pos = x->pos;
        size_t len = strlen(x->name) + strlen(what) + 24;
        char *name = ir_alloc_array(bd->a, len, 1);
        if (!name)
            return ir_oom(bd->d, NULL);
        snprintf(name, len, "%s.%s[%d]", x->name, what, (int)k);
        s.name = name;
        IrStatus st = append(bd, &s, -1, -1, weight);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* Conditional i of the view into it (C filled), and the whiles of its
 * branches (calls: auto_call_counts). */
static IrStatus add_cond(Builder *bd, const IrModule *m, int32_t i, const int32_t *calls, AutoCond *C)
{
    AutoView *v = bd->v;
    const IrInstr x = v->comp.instr[i]; /* a copy: append moves the array */
    int32_t pc = v->where_comp[i];
    double w = v->weight[i], wb = w;
    C->instr = i;
    C->nout = x.shape.type == IR_TUPLE ? x.shape.ntuple : 1;
    C->nbranch = x.ncalled;
    C->first_param = ir_alloc_array(bd->a, (size_t)x.ncalled, sizeof *C->first_param);
    C->nparam = ir_alloc_array(bd->a, (size_t)x.ncalled, sizeof *C->nparam);
    C->first_instr = ir_alloc_array(bd->a, (size_t)x.ncalled, sizeof *C->first_instr);
    if (!C->first_param || !C->nparam || !C->first_instr)
        return ir_oom(bd->d, NULL);
    IrStatus st = states(bd, &x, &x.shape, "result", w, &C->first_out);
    /* An array result: the conditional is its identity. A tuple: the
     * conditional reads its branch index alone (its operands' reshards
     * are the links below, not an opaque user's gathers). */
    if (st == IR_OK && x.shape.type != IR_TUPLE)
        st = identity_of(bd, &v->comp.instr[i], C->first_out);
    else
        v->comp.instr[i].nopnd = 1;
    /* The conditional's get-tuple-elements in its computation: the
     * result's elements. */
    for (int32_t j = 0; st == IR_OK && j < v->comp.ninstr; j++) {
        IrInstr *y = &v->comp.instr[j];
        if (v->where_comp[j] == pc && y->op == OP_GET_TUPLE_ELEMENT && y->nopnd == 1 && y->opnd[0] == i &&
            !user_sharded(y) && y->a.tuple_index >= 0 && y->a.tuple_index < C->nout)
            st = identity_of(bd, y, C->first_out + (int32_t)y->a.tuple_index);
    }
    for (int32_t b = 0; st == IR_OK && b < x.ncalled; b++) {
        const IrComputation *br = m->comp[x.called[b]];
        const IrShape *ps = &br->instr[br->param[0]].shape;
        int32_t first = -1;
        if (ps->type == IR_TUPLE) {
            /* Its elements' nodes; the operand tuple's elements reshard
             * into them before the conditional branches. */
            C->nparam[b] = ps->ntuple;
            char what[32];
            snprintf(what, sizeof what, "branch%d", (int)b);
            st = states(bd, &x, ps, what, 0, &C->first_param[b]);
            const IrInstr *opnd = &v->comp.instr[x.opnd[b + 1]];
            for (int32_t k = 0; st == IR_OK && k < opnd->nopnd; k++)
                st = link(bd, opnd->opnd[k], C->first_param[b] + k, w);
            first = v->comp.ninstr;
        } else {
            /* An array: the parameter is its own node, the operand
             * resharded into it. */
            first = v->comp.ninstr;
            C->nparam[b] = 1;
            C->first_param[b] = first + br->param[0];
            st = link(bd, x.opnd[b + 1], C->first_param[b], w);
        }
        C->first_instr[b] = first;
        for (int32_t j = 0; st == IR_OK && j < br->ninstr; j++) {
            IrInstr y = br->instr[j];
            int32_t *op = y.nopnd ? ir_alloc_array(bd->a, (size_t)y.nopnd, sizeof *op) : NULL;
            if (y.nopnd && !op)
                return ir_oom(bd->d, NULL);
            for (int32_t o = 0; o < y.nopnd; o++)
                op[o] = first + y.opnd[o];
            y.opnd = op;
            y.a.parameter_number = y.op == OP_PARAMETER ? -1 : y.a.parameter_number;
            if (ps->type == IR_TUPLE && y.op == OP_GET_TUPLE_ELEMENT && br->instr[j].opnd[0] == br->param[0] &&
                !user_sharded(&y))
                st = identity_of(bd, &y, C->first_param[b] + (int32_t)y.a.tuple_index);
            /* A branch's parameter (its nodes above, or an array one
             * here) weighs 0, as a loop's passed-through state does
             * (loop.c): the branch gets its operand's buffer by reference
             * (device/exec.c's run_conditional), so its bytes are no
             * write. Charged them, a replicated stack of weights cost a
             * copy the runtime never makes, and a fori_loop in a
             * lax.cond branch sliced its weights and gathered each layer
             * (294,912 bytes a device on 4 where data parallel moves 0:
             * tests/jax/test_auto_quality.py's fori_cond). */
            if (st == IR_OK)
                st = append(bd, &y, x.called[b], j, y.op == OP_PARAMETER ? 0 : wb);
        }
        /* The root's elements reshard into the result's. */
        const IrInstr *root = &br->instr[br->root];
        if (x.shape.type != IR_TUPLE && st == IR_OK)
            st = link(bd, first + br->root, C->first_out, wb);
        for (int32_t k = 0; x.shape.type == IR_TUPLE && st == IR_OK && k < root->nopnd; k++)
            st = link(bd, first + root->opnd[k], C->first_out + k, wb);
        /* Its whiles (a fori_loop in a lax.cond, a scan in a lax.switch),
         * as loop.c takes in the entry's: their bodies run wb x trips. */
        if (st == IR_OK)
            st = auto_view_add_loops(bd->a, m, v, x.called[b], first, wb, calls, &bd->cap, &bd->lcap, bd->d);
    }
    return st;
}

IrStatus auto_cond_view(IrArena *a, const IrModule *m, AutoView *v, IrDiag *d)
{
    int32_t *calls = auto_call_counts(m);
    if (!calls)
        return ir_oom(d, NULL);
    int32_t n = 0;
    for (int32_t i = 0; i < v->comp.ninstr; i++)
        n += takes(m, v, i, calls);
    /* Branches may hold conditionals of their own: grown as they come. */
    Builder bd = {.a = a, .v = v, .cap = v->comp.ninstr, .lcap = v->nlink, .d = d};
    int32_t ccap = n;
    IrStatus st = IR_OK;
    if (n && !(v->cond = ir_alloc_array(a, (size_t)ccap, sizeof *v->cond)))
        st = ir_oom(d, NULL);
    for (int32_t i = 0; st == IR_OK && i < v->comp.ninstr && v->ncond < MAX_CONDS; i++) {
        if (!takes(m, v, i, calls))
            continue;
        if (v->ncond == ccap) {
            int32_t nc = ccap * 2 + 4;
            AutoCond *ncs = ir_alloc_array(a, (size_t)nc, sizeof *ncs);
            if (!ncs) {
                st = ir_oom(d, NULL);
                break;
            }
            if (v->ncond)
                memcpy(ncs, v->cond, (size_t)v->ncond * sizeof *ncs);
            v->cond = ncs;
            ccap = nc;
        }
        st = add_cond(&bd, m, i, calls, &v->cond[v->ncond++]);
    }
    ts_free(calls);
    return st;
}

const AutoCond *auto_cond_of(const AutoGraph *g, int32_t i)
{
    for (int32_t c = 0; c < g->view.ncond; c++)
        if (g->view.cond[c].instr == i)
            return &g->view.cond[c];
    return NULL;
}

const char *auto_cond_state_text(const AutoGraph *g, int32_t i)
{
    for (int32_t c = 0; c < g->view.ncond; c++) {
        const AutoCond *C = &g->view.cond[c];
        if (i >= C->first_out && i < C->first_out + C->nout)
            return "conditional result";
        for (int32_t b = 0; b < C->nbranch; b++)
            if (i >= C->first_param[b] && i < C->first_param[b] + C->nparam[b])
                return "branch parameter";
    }
    return NULL;
}

void auto_cond_charge_result(AutoGraph *g, const AutoCond *C, double own)
{
    double total = 0;
    for (int32_t k = 0; k < C->nout; k++)
        total += (double)ir_shape_bytes(&g->comp->instr[C->first_out + k].shape);
    if (total <= 0) {
        g->mem_fixed += own;
        return;
    }
    for (int32_t k = 0; k < C->nout; k++)
        auto_graph_charge(g, C->first_out + k,
                          own * (double)ir_shape_bytes(&g->comp->instr[C->first_out + k].shape) / total);
}

/* The sharding of view node i under the plan (replicated without a
 * strategy). NULL on OOM. */
static IrSharding *node_sharding(IrArena *a, const AutoGraph *g, const int32_t *choice, int32_t i)
{
    AutoSpec rep = auto_spec_replicated();
    const AutoNode *s = &g->node[i];
    const AutoSpec *spec = s->group >= 0 ? &s->strat[choice[s->group]].out : &rep;
    return auto_spec_sharding(a, &g->mesh, spec, g->comp->instr[i].shape.rank);
}

/* The sharding of a value of `shape` held by the n nodes from `first`:
 * a tuple's of their shardings, an array's its node's. NULL on OOM. */
static IrSharding *states_sharding(IrArena *a, const AutoGraph *g, const int32_t *choice, const IrShape *shape,
                                   int32_t first, int32_t n)
{
    if (shape->type != IR_TUPLE)
        return node_sharding(a, g, choice, first);
    IrSharding **el = ir_alloc_array(a, (size_t)(n > 0 ? n : 1), sizeof *el);
    if (!el)
        return NULL;
    for (int32_t k = 0; k < n; k++)
        if (!(el[k] = node_sharding(a, g, choice, first + k)))
            return NULL;
    return shd_tuple(a, n, el);
}

IrStatus auto_cond_annotate(IrModule *m, const AutoGraph *g, const int32_t *choice, IrDiag *d)
{
    const AutoView *v = &g->view;
    for (int32_t c = 0; c < v->ncond; c++) {
        const AutoCond *C = &v->cond[c];
        IrInstr *x = &m->comp[v->where_comp[C->instr]]->instr[v->where_instr[C->instr]];
        IrSharding *out = states_sharding(m->arena, g, choice, &x->shape, C->first_out, C->nout);
        if (!out)
            return ir_oom(d, NULL);
        x->sharding = out;
        for (int32_t b = 0; b < C->nbranch; b++) {
            IrComputation *br = m->comp[x->called[b]];
            IrInstr *p = &br->instr[br->param[0]];
            IrSharding *ps = states_sharding(m->arena, g, choice, &p->shape, C->first_param[b], C->nparam[b]);
            if (!ps)
                return ir_oom(d, NULL);
            p->sharding = ps;
            /* The root shares the result's sharding (propagation holds
             * them one: partition/propagate.c); an array root chosen
             * otherwise computes in the result's, its reshard into it
             * priced by its link. */
            br->instr[br->root].sharding = out;
        }
    }
    return IR_OK;
}
