/*
 * control.c: gradients through tuples and control flow.
 *
 *   tuple, get-tuple-element, optimization-barrier: adjoints move leaf by
 *       leaf (a tuple's leaves are its elements' leaves in order)
 *   call: a backward computation takes the call's arguments and the
 *       adjoint of its result, runs the callee again (inlined) and returns
 *       the arguments' adjoints; the caller calls it
 *   conditional: a backward conditional on the same index; branch k takes
 *       (operand k, adjoint of the result), runs branch k again and returns
 *       the adjoints of every operand (zeros but for operand k)
 *   while: a forward loop with a counter of its own saves the state
 *       before each iteration on a stack (an [N, ...] array per leaf,
 *       written at the counter with dynamic-update-slice) and counts its
 *       trips; a backward loop counts from trips - 1 down to 0, reads the
 *       state of that iteration back and runs the body's backward pass (the
 *       body inlined and differentiated) on the adjoint of the state. N is
 *       the trip count when it is known when the gradient is written (a
 *       counter from a constant, compared with a constant, stepped by one;
 *       or known_trip_count in backend_config); otherwise (a condition on
 *       data) the trips are counted at run time and N is a bound:
 *       frontend_attributes={tessel_max_trips="B"} on the while, or
 *       GRAD_MAX_TRIPS. The saving loop stops when the stack is full; a
 *       loop that would have run longer (a bound too small, a wrong
 *       known_trip_count) gets a NaN gradient, never a silently wrong one. The forward loop runs twice (once as written
 *       for the outputs, once with the stack).
 */
#include "grad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Leaf offset of element `index` of a tuple shape. */
static int32_t leaf_offset(const IrShape *s, int64_t index)
{
    int32_t off = 0;
    for (int64_t k = 0; k < index; k++)
        off += ir_shape_leaf_count(&s->tuple[k]);
    return off;
}

/* Add the full adjoint v (of x's shape) to x leaf by leaf. */
static void acc_full(Rev *r, int32_t x, int32_t v, const IrShape *s, int32_t *leaf)
{
    if (s->type != IR_TUPLE) {
        if (ir_type_is_float(s->type))
            rev_acc(r, x, *leaf, v);
        (*leaf)++;
        return;
    }
    for (int32_t k = 0; k < s->ntuple; k++)
        acc_full(r, x, gb_gte(&r->b, v, k), &s->tuple[k], leaf);
}

static void acc_value(Rev *r, int32_t x, int32_t v)
{
    if (!rev_on(r, x))
        return;
    IrShape s = r->b.c->instr[x].shape;
    int32_t leaf = 0;
    acc_full(r, x, v, &s, &leaf);
}

/* The leaves of value v (of shape s) into out[*n...]: gte chains. */
static void leaves_of(GB *b, int32_t v, const IrShape *s, int32_t *out, int32_t *n)
{
    if (s->type != IR_TUPLE) {
        out[(*n)++] = v;
        return;
    }
    for (int32_t k = 0; k < s->ntuple; k++)
        leaves_of(b, gb_gte(b, v, k), &s->tuple[k], out, n);
}

/* Differentiate, inside computation ci (whose instructions so far are its
 * forward part), value `root` with the adjoint `adj` (a value of root's
 * shape), against sources[0..n); out[k] receives source k's full adjoint. */
static IrStatus backprop_in(Grad *g, int32_t ci, int32_t root, int32_t adj, int32_t n, const int32_t *sources,
                            int32_t *out)
{
    GB b = {g, g->m->comp[ci]};
    IrShape rs = *gb_shape(&b, root);
    int32_t nl = ir_shape_leaf_count(&rs);
    int32_t *seed = ts_malloc((size_t)(nl > 0 ? nl : 1) * sizeof(int32_t));
    if (!seed)
        return gb_oom(g);
    int32_t k = 0;
    leaves_of(&b, adj, &rs, seed, &k);
    /* Integer leaves carry no adjoint. */
    for (int32_t l = 0; l < nl; l++)
        if (!ir_type_is_float(ir_shape_leaf(&rs, l)->type))
            seed[l] = -1;
    Rev r;
    IrStatus st = rev_run(&r, g, ci, n, sources, root, seed);
    ts_free(seed);
    for (int32_t s = 0; s < n && st == IR_OK; s++)
        out[s] = rev_full(&r, sources[s]);
    rev_free(&r);
    return g->d->status;
}

static IrStatus rule_call(Rev *r, int32_t i, const IrInstr *ins)
{
    Grad *g = r->g;
    int32_t callee = ins->called[0], n = ins->nopnd;
    int32_t jax = grad_jax_call_factor(&r->b, ins, i);
    if (jax >= 0 || g->d->status != IR_OK) {
        int32_t gi = rev_full(r, i);
        return jax < 0 ? g->d->status : rev_acc(r, ins->opnd[0], 0, gb_bin(&r->b, OP_MULTIPLY, gi, jax));
    }
    int32_t ci = gb_new_comp(g, "grad_call");
    if (ci < 0)
        return g->d->status;
    GB b = {g, g->m->comp[ci]};
    int32_t *p = ts_malloc(((size_t)n + 1) * 2 * sizeof(int32_t));
    if (!p)
        return gb_oom(g);
    int32_t *out = p + n + 1;
    for (int32_t k = 0; k < n; k++) {
        IrShape s = *gb_shape(&r->b, ins->opnd[k]);
        p[k] = gb_parameter(&b, k, &s);
    }
    IrShape os = ins->shape;
    p[n] = gb_parameter(&b, n, &os);
    int32_t root = gb_inline(&b, callee, p, NULL);
    if (root >= 0 && backprop_in(g, ci, root, p[n], n, p, out) == IR_OK) {
        b.c->root = gb_tuple(&b, n, out);
        int32_t o[64 + 1];
        if (n > 64) {
            ts_free(p);
            return rev_no_rule(r, i, "a call of more than 64 arguments");
        }
        memcpy(o, ins->opnd, (size_t)n * sizeof(int32_t));
        o[n] = rev_full(r, i);
        int32_t bw = gb_emit(&r->b, OP_CALL, NULL, n + 1, o, NULL, 1, &ci);
        for (int32_t k = 0; k < n; k++)
            if (rev_on(r, ins->opnd[k]))
                acc_value(r, ins->opnd[k], gb_gte(&r->b, bw, k));
    }
    ts_free(p);
    return g->d->status;
}

static IrStatus rule_conditional(Rev *r, int32_t i, const IrInstr *ins)
{
    Grad *g = r->g;
    int32_t nb = ins->ncalled;
    if (nb > 64)
        return rev_no_rule(r, i, "a conditional of more than 64 branches");
    int32_t branches[64], o[65], out[64];
    IrShape os = ins->shape;
    int32_t G = rev_full(r, i);
    for (int32_t k = 0; k < nb; k++) {
        int32_t ci = gb_new_comp(g, "grad_branch");
        if (ci < 0)
            return g->d->status;
        GB b = {g, g->m->comp[ci]};
        IrShape pair[2] = {*gb_shape(&r->b, ins->opnd[k + 1]), os};
        IrShape ps;
        if (ir_shape_make_tuple(g->m->arena, &ps, 2, pair) != IR_OK)
            return gb_oom(g);
        int32_t P = gb_parameter(&b, 0, &ps);
        int32_t x = gb_gte(&b, P, 0), gy = gb_gte(&b, P, 1);
        int32_t root = gb_inline(&b, ins->called[k], &x, NULL);
        int32_t dx;
        if (root < 0 || backprop_in(g, ci, root, gy, 1, &x, &dx) != IR_OK)
            return g->d->status;
        for (int32_t j = 0; j < nb; j++) {
            IrShape js = *gb_shape(&r->b, ins->opnd[j + 1]);
            out[j] = j == k ? dx : gb_zeros(&b, &js);
        }
        b.c->root = gb_tuple(&b, nb, out);
        branches[k] = ci;
        int32_t po[2] = {ins->opnd[k + 1], G};
        o[k + 1] = gb_tuple(&r->b, 2, po);
    }
    o[0] = ins->opnd[0];
    int32_t bw = gb_emit(&r->b, OP_CONDITIONAL, NULL, nb + 1, o, NULL, nb, branches);
    if (bw < 0)
        return g->d->status;
    r->b.c->instr[bw].cond_pred_form = ins->cond_pred_form;
    for (int32_t j = 0; j < nb; j++)
        if (rev_on(r, ins->opnd[j + 1]))
            acc_value(r, ins->opnd[j + 1], gb_gte(&r->b, bw, j));
    return g->d->status;
}

/* ---- while ---- */

/* The value of a scalar integer constant instruction, if it is one. */
static bool int_const(const IrInstr *c, int64_t *v)
{
    if (c->op != OP_CONSTANT || c->shape.rank != 0 || !c->a.literal)
        return false;
    switch (c->shape.type) {
    case IR_S32: { int32_t x; memcpy(&x, c->a.literal, 4); *v = x; return true; }
    case IR_S64: { int64_t x; memcpy(&x, c->a.literal, 8); *v = x; return true; }
    case IR_U32: { uint32_t x; memcpy(&x, c->a.literal, 4); *v = x; return true; }
    default: return false;
    }
}

/* Is instruction x of c `get-tuple-element(parameter(0)), index=k`? */
static bool param_elem(const IrComputation *c, int32_t x, int64_t *k)
{
    const IrInstr *ins = &c->instr[x];
    if (ins->op != OP_GET_TUPLE_ELEMENT || c->instr[ins->opnd[0]].op != OP_PARAMETER)
        return false;
    *k = ins->a.tuple_index;
    return true;
}

/* The trip count of while instruction w of computation c: backend_config's
 * known_trip_count, or the pattern init[k] = c0, condition
 * compare(state[k], c1, LT|LE) (or the mirror GT|GE), body state[k] + 1. */
static bool trip_count(const IrModule *m, const IrComputation *c, const IrInstr *w, int64_t *n)
{
    const char *bc = w->a.x->backend_config;
    const char *kt = bc ? strstr(bc, "known_trip_count") : NULL;
    if (kt) {
        const char *q = strstr(kt, "\"n\"");
        if (q && (q = strchr(q + 3, ':'))) {
            while (*q == ':' || *q == ' ' || *q == '"' || *q == '\\')
                q++;
            *n = strtoll(q, NULL, 10);
            return *n >= 0;
        }
    }
    const IrComputation *cc = m->comp[w->called[0]], *bc2 = m->comp[w->called[1]];
    const IrInstr *cr = &cc->instr[cc->root];
    if (cr->op != OP_COMPARE)
        return false;
    int64_t k, lim;
    int32_t a = cr->opnd[0], b = cr->opnd[1];
    IrCmpDir dir = cr->a.direction;
    if (!param_elem(cc, a, &k)) { /* c1 > state[k]: mirror */
        int32_t t = a;
        a = b;
        b = t;
        dir = dir == CMP_GT ? CMP_LT : dir == CMP_GE ? CMP_LE : CMP_NONE;
    }
    if (!param_elem(cc, a, &k) || !int_const(&cc->instr[b], &lim) || (dir != CMP_LT && dir != CMP_LE))
        return false;
    const IrInstr *init = &c->instr[w->opnd[0]];
    int64_t c0, one;
    if (init->op != OP_TUPLE || k >= init->nopnd || !int_const(&c->instr[init->opnd[k]], &c0))
        return false;
    const IrInstr *br = &bc2->instr[bc2->root];
    if (br->op != OP_TUPLE || k >= br->nopnd)
        return false;
    const IrInstr *step = &bc2->instr[br->opnd[k]];
    int64_t kk;
    if (step->op != OP_ADD || !param_elem(bc2, step->opnd[0], &kk) || kk != k ||
        !int_const(&bc2->instr[step->opnd[1]], &one) || one != 1)
        return false;
    *n = lim - c0 + (dir == CMP_LE);
    if (*n < 0)
        *n = 0;
    return true;
}

/* Stack shape [N, dims of leaf]. */
static IrStatus stack_shape(Grad *g, const IrShape *leaf, int64_t N, IrShape *out)
{
    int64_t dims[IR_MAX_RANK + 1];
    dims[0] = N;
    for (int32_t d = 0; d < leaf->rank; d++)
        dims[d + 1] = leaf->dims[d];
    return ir_shape_make(g->m->arena, out, leaf->type, leaf->rank + 1, dims) == IR_OK ? IR_OK : gb_oom(g);
}

/* Rebuild a value of shape s from its leaves (consumed from *k on). */
static int32_t build_of(GB *b, const IrShape *s, const int32_t *leaves, int32_t *k)
{
    if (s->type != IR_TUPLE)
        return leaves[(*k)++];
    int32_t e[s->ntuple > 0 ? s->ntuple : 1];
    for (int32_t j = 0; j < s->ntuple; j++)
        e[j] = build_of(b, &s->tuple[j], leaves, k);
    return gb_tuple(b, s->ntuple, e);
}

/* Starts (ctr, 0, 0, ...) for dynamic slices of a stack of rank rank+1. */
static void starts(GB *b, int32_t ctr, int32_t rank, int32_t *o)
{
    o[0] = ctr;
    for (int32_t d = 0; d < rank; d++)
        o[1 + d] = gb_const(b, IR_S32, 0);
}

typedef struct Loop {
    int64_t N;           /* the stacks' length: the trip count or its bound */
    IrShape S;           /* the state's shape */
    int32_t nl;          /* its leaves */
    const IrShape **leaf;
    IrShape *stack;      /* per leaf [N, ...] */
    IrShape aug;         /* (S, s32, stacks...) */
    IrShape bws;         /* (S, s32, stacks...) of the backward loop: adjoint first */
} Loop;

/* The forward loop with a stack: body saves every leaf of the state at the
 * counter, then runs the body; the condition is the original one. */
static int32_t aug_loop(Grad *g, const IrInstr *w, const Loop *L, int32_t *cond_out)
{
    int32_t ci = gb_new_comp(g, "grad_fwd_body");
    int32_t cc = gb_new_comp(g, "grad_fwd_cond");
    if (ci < 0 || cc < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    int32_t P = gb_parameter(&b, 0, &L->aug);
    int32_t s = gb_gte(&b, P, 0), ctr = gb_gte(&b, P, 1);
    int32_t *lv = ts_malloc((size_t)(2 * L->nl + 2) * sizeof(int32_t));
    if (!lv)
        return gb_oom(g), -1;
    int32_t n = 0;
    leaves_of(&b, s, &L->S, lv, &n);
    int32_t *e = lv + L->nl;
    e[1] = gb_bin(&b, OP_ADD, ctr, gb_const(&b, IR_S32, 1));
    for (int32_t l = 0; l < L->nl; l++) {
        const IrShape *ls = L->leaf[l];
        int64_t dims[IR_MAX_RANK + 1] = {1};
        if (ls->rank > 0)
            memcpy(dims + 1, ls->dims, (size_t)ls->rank * sizeof(int64_t));
        int32_t o[IR_MAX_RANK + 3];
        o[0] = gb_gte(&b, P, 2 + l);
        o[1] = gb_reshape(&b, lv[l], ls->rank + 1, dims);
        starts(&b, ctr, ls->rank, o + 2);
        e[2 + l] = gb_emit(&b, OP_DYNAMIC_UPDATE_SLICE, NULL, ls->rank + 3, o, NULL, 0, NULL);
    }
    e[0] = gb_inline(&b, w->called[1], &s, NULL);
    b.c->root = gb_tuple(&b, L->nl + 2, e);
    ts_free(lv);
    GB bc = {g, g->m->comp[cc]};
    int32_t Pc = gb_parameter(&bc, 0, &L->aug);
    int32_t sc = gb_gte(&bc, Pc, 0);
    /* and ctr < the stack's length: a loop that would run longer stops
     * here (rule_while turns its gradient into NaN). */
    int32_t room = gb_cmp(&bc, gb_gte(&bc, Pc, 1), gb_const(&bc, IR_S32, (double)L->N), CMP_LT);
    bc.c->root = gb_bin(&bc, OP_AND, gb_inline(&bc, w->called[0], &sc, NULL), room);
    *cond_out = cc;
    return g->d->status == IR_OK ? ci : -1;
}

/* The backward loop: state (adjoint of S, counter, stacks); the body
 * reads iteration ctr's state from the stacks, differentiates the body at
 * it against the adjoint, and steps the counter down; runs while ctr >= 0. */
static int32_t bw_loop(Grad *g, const IrInstr *w, const Loop *L, int32_t *cond_out)
{
    int32_t ci = gb_new_comp(g, "grad_bwd_body");
    int32_t cc = gb_new_comp(g, "grad_bwd_cond");
    if (ci < 0 || cc < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    int32_t P = gb_parameter(&b, 0, &L->bws);
    int32_t a = gb_gte(&b, P, 0), ctr = gb_gte(&b, P, 1);
    int32_t *lv = ts_malloc((size_t)(2 * L->nl + 2) * sizeof(int32_t));
    if (!lv)
        return gb_oom(g), -1;
    int32_t *e = lv + L->nl;
    for (int32_t l = 0; l < L->nl; l++) {
        const IrShape *ls = L->leaf[l];
        int32_t o[IR_MAX_RANK + 2];
        e[2 + l] = o[0] = gb_gte(&b, P, 2 + l);
        starts(&b, ctr, ls->rank, o + 1);
        int64_t sizes[IR_MAX_RANK + 1] = {1};
        if (ls->rank > 0)
            memcpy(sizes + 1, ls->dims, (size_t)ls->rank * sizeof(int64_t));
        IrAttrsX dax = {0};
        IrAttrs da = {.x = &dax};
        dax.dynamic_slice_sizes = gb_ilist(g, ls->rank + 1, sizes);
        int32_t sl = gb_emit(&b, OP_DYNAMIC_SLICE, NULL, ls->rank + 2, o, &da, 0, NULL);
        lv[l] = gb_reshape(&b, sl, ls->rank, ls->dims);
    }
    int32_t k = 0;
    int32_t x = build_of(&b, &L->S, lv, &k);
    int32_t y = gb_inline(&b, w->called[1], &x, NULL);
    int32_t dx = -1;
    if (y >= 0)
        backprop_in(g, ci, y, a, 1, &x, &dx);
    e[0] = dx;
    e[1] = gb_bin(&b, OP_SUBTRACT, ctr, gb_const(&b, IR_S32, 1));
    b.c->root = gb_tuple(&b, L->nl + 2, e);
    ts_free(lv);
    GB bc = {g, g->m->comp[cc]};
    int32_t Pc = gb_parameter(&bc, 0, &L->bws);
    bc.c->root = gb_cmp(&bc, gb_gte(&bc, Pc, 1), gb_const(&bc, IR_S32, 0), CMP_GE);
    *cond_out = cc;
    return g->d->status == IR_OK ? ci : -1;
}

/* The stack length of a loop whose trip count is only known at run time:
 * frontend_attributes={tessel_max_trips="B"} on the while, else
 * GRAD_MAX_TRIPS; -1 with an error for a bad value. */
static int64_t max_trips(Rev *r, int32_t i, const IrInstr *w)
{
    const char *v = grad_custom_name(w, "tessel_max_trips");
    if (!v)
        return GRAD_MAX_TRIPS;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end || end == v || n < 1 || n > (1LL << 30))
        return rev_no_rule(r, i, "tessel_max_trips must be a number of trips from 1 to 2^30"), -1;
    return n;
}

/* The saving loop stops when its stack is full; if its
 * condition still held then (it would have run more trips than the bound)
 * every floating leaf of the adjoint becomes NaN, so the gradient is
 * never silently wrong. */
static int32_t nan_if_overflow(GB *b, const IrInstr *w, const Loop *L, int32_t fw, int32_t adj)
{
    int32_t st = gb_gte(b, fw, 0);
    int32_t more = gb_inline(b, w->called[0], &st, NULL);
    int32_t full = gb_cmp(b, gb_gte(b, fw, 1), gb_const(b, IR_S32, (double)L->N), CMP_GE);
    int32_t over = gb_bin(b, OP_AND, more, full);
    int32_t *lv = ts_malloc((size_t)(L->nl > 0 ? L->nl : 1) * sizeof(int32_t));
    if (!lv)
        return gb_oom(b->g), -1;
    int32_t n = 0;
    leaves_of(b, adj, &L->S, lv, &n);
    for (int32_t l = 0; l < L->nl; l++) {
        IrShape ls = *L->leaf[l];
        if (!ir_type_is_float(ls.type))
            continue;
        int32_t p = ls.rank ? gb_bcast(b, over, IR_PRED, ls.rank, ls.dims, 0, NULL) : over;
        lv[l] = gb_select(b, p, gb_full(b, &ls, NAN), lv[l]);
    }
    int32_t k = 0;
    int32_t r = build_of(b, &L->S, lv, &k);
    ts_free(lv);
    return r;
}

static IrStatus rule_while(Rev *r, int32_t i, const IrInstr *w)
{
    Grad *g = r->g;
    GB *b = &r->b;
    int64_t N;
    bool known = trip_count(g->m, r->b.c, w, &N);
    if (!known && (N = max_trips(r, i, w)) < 0)
        return g->d->status;
    Loop L = {.S = w->shape, .N = N > 0 ? N : 1};
    L.nl = ir_shape_leaf_count(&L.S);
    L.leaf = ir_alloc_array(g->m->arena, (size_t)(L.nl > 0 ? L.nl : 1), sizeof *L.leaf);
    L.stack = ir_alloc_array(g->m->arena, (size_t)L.nl + 2, sizeof(IrShape));
    if (!L.leaf || !L.stack)
        return gb_oom(g);
    L.stack[0] = L.S;
    L.stack[1] = (IrShape){.type = IR_S32};
    for (int32_t l = 0; l < L.nl; l++) {
        L.leaf[l] = ir_shape_leaf(&L.S, l);
        if (!ir_type_is_array(L.leaf[l]->type))
            return rev_no_rule(r, i, "a loop state with a token");
        if (stack_shape(g, L.leaf[l], N > 0 ? N : 1, &L.stack[2 + l]) != IR_OK)
            return g->d->status;
    }
    if (ir_shape_make_tuple(g->m->arena, &L.aug, L.nl + 2, L.stack) != IR_OK)
        return gb_oom(g);
    L.bws = L.aug;
    if (N == 0)
        return acc_value(r, w->opnd[0], rev_full(r, i)), g->d->status; /* the state passes through */
    int32_t fc, bcnd;
    int32_t fb = aug_loop(g, w, &L, &fc);
    int32_t bb = fb >= 0 ? bw_loop(g, w, &L, &bcnd) : -1;
    if (bb < 0)
        return g->d->status;
    int32_t *e = ts_malloc(((size_t)L.nl + 2) * sizeof(int32_t));
    if (!e)
        return gb_oom(g);
    e[0] = w->opnd[0];
    e[1] = gb_const(b, IR_S32, 0);
    for (int32_t l = 0; l < L.nl; l++)
        e[2 + l] = gb_zeros(b, &L.stack[2 + l]);
    int32_t fcalled[2] = {fc, fb};
    int32_t init = gb_tuple(b, L.nl + 2, e);
    int32_t fw = gb_emit(b, OP_WHILE, NULL, 1, &init, NULL, 2, fcalled);
    e[0] = rev_full(r, i);
    /* The backward loop runs as many trips as the forward one counted. */
    e[1] = gb_bin(b, OP_SUBTRACT, gb_gte(b, fw, 1), gb_const(b, IR_S32, 1));
    for (int32_t l = 0; l < L.nl; l++)
        e[2 + l] = gb_gte(b, fw, 2 + l);
    int32_t bcalled[2] = {bcnd, bb};
    int32_t binit = gb_tuple(b, L.nl + 2, e);
    int32_t bw = gb_emit(b, OP_WHILE, NULL, 1, &binit, NULL, 2, bcalled);
    ts_free(e);
    /* Also when the count was known: a known_trip_count that is wrong
     * gives NaN, not a gradient of fewer trips. */
    int32_t adj = nan_if_overflow(b, w, &L, fw, gb_gte(b, bw, 0));
    acc_value(r, w->opnd[0], adj);
    return g->d->status;
}

IrStatus rev_control(Rev *r, int32_t i, const IrInstr *ins)
{
    switch (ins->op) {
    case OP_TUPLE: {
        int32_t off = 0;
        for (int32_t k = 0; k < ins->nopnd; k++) {
            int32_t x = ins->opnd[k];
            int32_t nl = ir_shape_leaf_count(&r->b.c->instr[x].shape);
            for (int32_t l = 0; l < nl; l++)
                if (rev_leaf(r, i, off + l) >= 0 && rev_on(r, x))
                    rev_acc(r, x, l, rev_leaf(r, i, off + l));
            off += nl;
        }
        return r->g->d->status;
    }
    case OP_GET_TUPLE_ELEMENT: {
        int32_t t = ins->opnd[0];
        int32_t off = leaf_offset(&r->b.c->instr[t].shape, ins->a.tuple_index);
        int32_t nl = ir_shape_leaf_count(&ins->shape);
        for (int32_t l = 0; l < nl; l++)
            if (rev_leaf(r, i, l) >= 0)
                rev_acc(r, t, off + l, rev_leaf(r, i, l));
        return r->g->d->status;
    }
    case OP_OPTIMIZATION_BARRIER: case OP_ADD_DEPENDENCY: case OP_DOMAIN: {
        int32_t nl = ir_shape_leaf_count(&ins->shape);
        for (int32_t l = 0; l < nl; l++)
            if (rev_leaf(r, i, l) >= 0)
                rev_acc(r, ins->opnd[0], l, rev_leaf(r, i, l));
        return r->g->d->status;
    }
    case OP_CALL: return rule_call(r, i, ins);
    case OP_CONDITIONAL: return rule_conditional(r, i, ins);
    case OP_WHILE: return rule_while(r, i, ins);
    default: return rev_no_rule(r, i, NULL);
    }
}
