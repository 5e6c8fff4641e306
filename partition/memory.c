/*
 * memory.c: the memory a device needs to run one computation, by liveness
 * over the order the executor runs it in (ir_exec_order_of, or an order a
 * scheduler proposes), and what is live at the peak. This is the estimate
 * `tessel plan` prints and `--limit memory` holds a run to; the runtime's
 * measured peak (`tessel run --stats`) counts the same bytes: every array
 * value a device holds.
 *
 * The model follows the executor (device/exec.c) value for value:
 *  - parameters (read or not) are live before the first step; the caller
 *    holds them to the end unless donated (MemOptions.donated), then they
 *    die at their last use;
 *  - every other instruction's result is allocated at its step and freed
 *    after the step of its last use (an unused one right after its own
 *    step); the root's leaves live to the end (the result);
 *  - tuple, get-tuple-element, copy, optimization-barrier, domain,
 *    add-dependency and the -done halves hold no bytes of their own: they
 *    refer to their operands' buffers, which then live as long as they do;
 *    a -start's tuple refers to its operands and makes only its result
 *    and context elements; its context elements die at its -done (the
 *    executor's -done takes the result element out of the tuple, which
 *    then dies), its result lives as long as the -done's value; a
 *    collective over groups of one device each (alone) is the identity:
 *    its result is its operands' buffers;
 *  - reshape and bitcast of an operand at its last use, and
 *    dynamic-update-slice into one, cholesky of one and triangular-solve
 *    for one (b), reuse its buffer (no new bytes), as the
 *    executor does when it holds the only reference (not a parameter the
 *    caller keeps);
 *  - a while's state leaves that its body passes through unchanged, at
 *    any tuple depth (through_at), stay in the initial state's buffers
 *    (which then live as long as the result); the others are new; at
 *    its operand's last use the loop takes the initial state over, down
 *    the tuples made for it alone (state_held);
 *  - a called computation (call, branch, fusion, reducer, while
 *    condition) adds, while its caller's step runs, its own peak beyond
 *    its parameters and its result; a call at its operands' last use
 *    takes them over (call_moved_extra: the callee runs with them
 *    donated, its relu writing into its operand's buffer; an operand may
 *    be an element of a donated tuple parameter only it holds, a while
 *    body's state: moved_element); a while body (while_body_extra) adds
 *    the larger of its first iteration's peak (the initial state shared
 *    with the caller) and a later one's (the state handed over: each
 *    element dies at its last use, as the executor's run_while consumes
 *    it), less the while's result, which the caller counts.
 *  - the executor's run-time fusion (below: the groups ir/fusion_find.c
 *    finds for device/, elementwise chains, row groups such as softmax
 *    and layer norm, multi-output groups such as Adam's update, dots
 *    writing transposed): a group's interior values never exist, its
 *    extra outputs are made at its root's step, an elementwise group's
 *    outputs may take dying leaves' buffers; an elementwise op outside
 *    any group writes over an operand of its size that dies there
 *    (lone_lends).
 *  - the values a kernel makes beside its result while it runs:
 *    operands converted (a mixed-precision reduce's, scaled-dot's
 *    dequantized ones) and a reducer's scalar arguments and results when
 *    it is called element by element (calls_per_element), a sort's
 *    per-element keys (sort_keys_bytes).
 * Not modelled: buffers the kernels and the collectives use outside
 * values (fusion's scratch rows and blocks, MPI staging).
 *
 * Example, p0 = f32[4] parameter(0); a = exp(p0); b = add(a, p0); ROOT
 * c = negate(b): before step 0: 16 bytes (p0); step a: 32; step b: 48 (a
 * dies after it); step c: 48 (b dies after it); peak 48 at b.
 */
#include "partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does instruction i refer to its operands' buffers instead of making its
 * own? */
static bool refers(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_TUPLE: case OP_GET_TUPLE_ELEMENT: case OP_COPY: case OP_OPTIMIZATION_BARRIER:
    case OP_DOMAIN: case OP_ADD_DEPENDENCY: case OP_ASYNC_UPDATE: case OP_ALL_REDUCE_DONE:
    case OP_ALL_GATHER_DONE: case OP_COLLECTIVE_PERMUTE_DONE: case OP_ASYNC_DONE: case OP_COPY_DONE:
        return true;
    default:
        return false;
    }
}

static int64_t leaf_bytes(const IrShape *s);

/* The bytes a tuple-shaped -start makes afresh: its element 0 refers to
 * the operands (copy-start's element 1 too: a copy is a reference); the
 * result and context elements are new. -1: not such a -start. */
static int64_t start_fresh(const IrInstr *ins)
{
    const IrShape *s = &ins->shape;
    switch (ins->op) {
    case OP_ALL_GATHER_START: case OP_COLLECTIVE_PERMUTE_START: case OP_ASYNC_START:
        return s->type == IR_TUPLE && s->ntuple >= 2 ? leaf_bytes(s) - leaf_bytes(&s->tuple[0]) : -1;
    case OP_COPY_START:
        return s->type == IR_TUPLE && s->ntuple == 3 ? leaf_bytes(&s->tuple[2]) : -1;
    default:
        return -1;
    }
}

/* Of a -start's fresh bytes (start_fresh), those of its context elements
 * (all but the result element, which its -done hands on): copy-start's
 * u32[] context, the others' elements after the result (element 1). */
static int64_t start_context(const IrInstr *ins)
{
    int64_t fresh = start_fresh(ins);
    if (fresh < 0)
        return 0;
    if (ins->op == OP_COPY_START)
        return fresh;
    int64_t c = fresh - leaf_bytes(&ins->shape.tuple[1]);
    return c > 0 ? c : 0;
}

/* The operand whose buffer instruction ins reuses when it is that
 * operand's last use and nobody else holds it, or -1: reshape, bitcast,
 * dynamic-update-slice and a scatter of one array (k_gather.c) take
 * operand 0's; the linalg kernels write their result over the matrix
 * they factor or solve for (k_linalg.c's writable_copy): cholesky's
 * operand 0, triangular-solve's b (1). */
static int32_t reused_operand(const IrInstr *ins)
{
    if (ins->shape.type == IR_TUPLE)
        return -1;
    switch (ins->op) {
    case OP_RESHAPE: case OP_BITCAST: case OP_DYNAMIC_UPDATE_SLICE: case OP_CHOLESKY:
        return ins->nopnd >= 1 ? 0 : -1;
    case OP_SCATTER: /* read again as its indices or updates, it is copied */
        return ins->nopnd == 3 && ins->opnd[1] != ins->opnd[0] && ins->opnd[2] != ins->opnd[0] ? 0 : -1;
    case OP_TRIANGULAR_SOLVE:
        return ins->nopnd == 2 ? 1 : -1;
    default:
        return -1;
    }
}

static bool collective(IrOpcode op)
{
    switch (op) {
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL:
    case OP_COLLECTIVE_PERMUTE: case OP_COLLECTIVE_BROADCAST: case OP_COLLECTIVE_REDUCE:
    case OP_RAGGED_ALL_TO_ALL: case OP_ALL_REDUCE_START: case OP_ALL_GATHER_START:
    case OP_COLLECTIVE_PERMUTE_START: case OP_ALL_GATHER_DONE: case OP_COLLECTIVE_PERMUTE_DONE:
        return true;
    default:
        return false;
    }
}

/* Is ins a collective over groups of one device each (replica_groups
 * all of one member, or collective-permute pairs all from a device to
 * itself)? The executor runs it as the identity: its result is its
 * operands' buffers (a -start's context elements aside). */
static bool alone(const IrInstr *ins)
{
    if (!collective(ins->op) || ins->op == OP_ALL_GATHER_DONE || ins->op == OP_COLLECTIVE_PERMUTE_DONE)
        return false;
    if (ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_PERMUTE_START) {
        const IrI64List *p = &ins->a.x->source_target_pairs;
        if (p->n < 2 || p->n % 2)
            return false;
        for (int32_t k = 0; k < p->n; k += 2)
            if (p->v[k] != p->v[k + 1])
                return false;
        return true;
    }
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if (!g->present || g->ngroups < 1 || !g->group_size)
        return false;
    for (int32_t k = 0; k < g->ngroups; k++)
        if (g->group_size[k] != 1)
            return false;
    return true;
}

/* Bytes of the array leaves of s (tokens and tuples of nothing: 0). */
static int64_t leaf_bytes(const IrShape *s)
{
    if (s->type == IR_TUPLE) {
        int64_t b = 0;
        for (int32_t k = 0; k < s->ntuple; k++)
            b += leaf_bytes(&s->tuple[k]);
        return b;
    }
    if (s->type == IR_TOKEN)
        return 0;
    int64_t b = ir_shape_bytes(s);
    return b > 0 ? b : 0;
}

/* The work of one estimate. */
typedef struct Est {
    const IrModule *m;
    const IrComputation *c;
    int32_t n;          /* steps */
    int32_t *order;     /* instruction at each step */
    int32_t *step;      /* per instruction: its step, -1 not run */
    int32_t *end;       /* per instruction: the last step it is live in (n: to the end) */
    int32_t *tie;       /* per instruction: the last step it holds what it refers to */
    int32_t *last_read; /* per instruction: its last reader's step (MemEstimate.last_read) */
    IrFusion fusion;    /* the groups the executor runs fused (fuse) */
    int32_t *group;     /* per instruction: the fused group's root it is inside of, or -1 */
    bool *whole;        /* per instruction: an extra output of its group (made whole) */
    int64_t *own;       /* per instruction: bytes it allocates */
    int64_t *ctx;       /* per instruction: of own, a -start's context bytes (start_context) */
    int32_t *ctx_end;   /* per instruction: the last step its context lives in (-1: none) */
    int32_t *eoff;      /* per instruction: a fresh tuple's first element in eend (split), else -1 */
    int32_t *eend;      /* per element of a split tuple: the last step a get-tuple-element holds it */
    int64_t *callee;    /* per step: a called computation's bytes beyond its inputs and result */
    int64_t *peak_of;   /* per module computation k: [3k] its peak beyond its parameters (-1 not
                         * yet), [3k+1] its result's bytes, [3k+2] its peak beyond its parameters
                         * when they are donated (call_moved_extra; -1 not yet) */
    const MemOptions *opt; /* the options estimated with (donated parameters), or NULL */
    int32_t depth;
} Est;

static IrStatus estimate(const IrModule *m, int32_t comp, const MemOptions *o, int64_t *peak_of,
                         int32_t depth, MemEstimate *out, IrDiag *d);

/* The peak of computation k beyond its parameters and its result (what it
 * adds while its caller's step runs). A while body (`body`): its peak
 * beyond its parameters, its result included (while_body_extra goes on
 * from there). */
static IrStatus callee_extra(Est *e, int32_t k, bool body, int64_t *extra, IrDiag *d)
{
    *extra = 0;
    if (k < 0 || k >= e->m->ncomp || e->depth >= 64)
        return IR_OK; /* a bad callee or runaway nesting: the executor refuses it */
    int64_t *beyond = &e->peak_of[3 * k], *out = &e->peak_of[3 * k + 1];
    if (*beyond < 0) {
        MemEstimate sub;
        *beyond = *out = 0; /* a computation reached again inside itself adds nothing more */
        IrStatus st = estimate(e->m, k, NULL, e->peak_of, e->depth + 1, &sub, d);
        if (st != IR_OK)
            return st;
        *beyond = sub.peak - sub.param_bytes > 0 ? sub.peak - sub.param_bytes : 0;
        *out = sub.output_bytes;
        mem_estimate_free(&sub);
    }
    *extra = body ? *beyond : *beyond - *out > 0 ? *beyond - *out : 0;
    return IR_OK;
}

/* Is o, read last at step s, an array element of a tuple that only o
 * holds then: o is get-tuple-element(p, k) of a parameter the caller
 * hands over (a while body's state from its second iteration, a moved
 * call's) or of a tuple of buffers of its own (splits: a call's result,
 * its element k made by the callee, as tessel grad's calls hand a
 * gradient on), p is read by get-tuple-elements alone, all read last by
 * step s, and no other of them takes element k. The executor drops p's
 * reference at its last get-tuple-element, so a call moving o
 * (call_moves) holds the element's one reference: its callee frees it
 * at its last read there. */
static bool splits(const Est *e, int32_t i);
static int32_t passed(const Est *e, int32_t i, int32_t k);
static int32_t same_as(const Est *e, int32_t i, int32_t k);
static bool moved_element(const Est *e, int32_t s, int32_t o, const int32_t *last_use)
{
    const IrInstr *g = &e->c->instr[o];
    if (g->op != OP_GET_TUPLE_ELEMENT || g->nopnd != 1 || o == e->c->root || !ir_shape_is_array(&g->shape))
        return false;
    int32_t p = g->opnd[0], k = (int32_t)g->a.tuple_index;
    const IrInstr *pi = &e->c->instr[p];
    int64_t pn = pi->a.parameter_number;
    bool given = pi->op == OP_PARAMETER && e->opt && e->opt->donated && pn >= 0 && pn < e->opt->nparams &&
                 e->opt->donated[pn];
    bool made = pi->op != OP_PARAMETER && splits(e, p) && k >= 0 && k < pi->shape.ntuple && passed(e, p, k) < 0 &&
                same_as(e, p, k) < 0;
    if ((!given && !made) || p == e->c->root)
        return false;
    for (int32_t i = 0; i < e->c->ninstr; i++) {
        const IrInstr *r = &e->c->instr[i];
        for (int32_t k = 0; k < r->nopnd; k++) {
            if (r->opnd[k] != p)
                continue;
            if (r->op != OP_GET_TUPLE_ELEMENT || last_use[i] > s || (i != o && r->a.tuple_index == g->a.tuple_index))
                return false;
        }
    }
    return true;
}

/* A call (not a device cluster's) each of whose operands is at its last
 * use there and nobody else's (an array the caller made: not a parameter,
 * the root, a reference to another value's buffer or a call's result,
 * which may be one) moves them into its callee's parameters
 * (device/exec.c's call_moves): the callee runs with them donated, its
 * kernels may write into them (JAX's jit_relu_ then runs in place). What
 * the call adds beyond the caller's count of its operands and its result,
 * which may be negative: the callee's donated peak beyond its parameters
 * less the result bytes the caller counts. False: it does not apply
 * (*extra untouched), or *st is an error. last_use: per instruction, its
 * last reader's step. */
static bool call_moved_extra(Est *e, int32_t s, const IrInstr *ins, const int32_t *last_use, int64_t *extra,
                             IrStatus *st, IrDiag *d)
{
    *st = IR_OK;
    int32_t k = ins->ncalled == 1 ? ins->called[0] : -1;
    if (ins->op != OP_CALL || k < 0 || k >= e->m->ncomp || e->depth >= 64 || ins->nopnd < 1 ||
        ir_frontend_attr(ins, "_tessel_cluster") || e->m->comp[k]->nparam != ins->nopnd)
        return false;
    for (int32_t j = 0; j < ins->nopnd; j++) {
        int32_t o = ins->opnd[j];
        const IrInstr *oi = &e->c->instr[o];
        if (last_use[o] == s && moved_element(e, s, o, last_use))
            continue;
        if (last_use[o] != s || o == e->c->root || oi->op == OP_PARAMETER || refers(oi) ||
            oi->op == OP_CALL || !ir_shape_is_array(&oi->shape) || e->own[o] != leaf_bytes(&oi->shape))
            return false;
        for (int32_t i = 0; i < j; i++)
            if (ins->opnd[i] == o)
                return false; /* read twice: not moved */
    }
    int64_t *moved = &e->peak_of[3 * k + 2];
    if (*moved < 0) {
        bool stack[8];
        bool *donated = ins->nopnd <= 8 ? stack : ts_malloc((size_t)ins->nopnd * sizeof *donated);
        if (!donated) {
            *st = ir_oom(d, NULL);
            return false;
        }
        for (int32_t j = 0; j < ins->nopnd; j++)
            donated[j] = true;
        MemOptions o = {.donated = donated, .nparams = ins->nopnd};
        MemEstimate sub;
        *moved = 0; /* reached again inside itself: adds nothing more */
        *st = estimate(e->m, k, &o, e->peak_of, e->depth + 1, &sub, d);
        if (donated != stack)
            ts_free(donated);
        if (*st != IR_OK)
            return false;
        *moved = sub.peak - sub.param_bytes > 0 ? sub.peak - sub.param_bytes : 0;
        mem_estimate_free(&sub);
    }
    *extra = *moved - e->own[e->order[s]];
    return true;
}

static int64_t while_fresh(const IrModule *m, const IrInstr *ins, bool *through);
static bool while_takes_state(const Est *e, int32_t s, const IrInstr *ins, int64_t *held, int64_t *held_through);
static int64_t through_at(const IrModule *m, const IrInstr *ins, int32_t *path, int32_t n, const IrShape *s);

/* The type operand i of reduce or reduce-window ins is converted to
 * before its kernel runs (k_reduce.c's mixed precision: a float operand
 * feeding a reducer parameter of another float type takes the
 * parameter's), or IR_TUPLE: none. */
static IrType converted_to(const IrModule *m, const IrComputation *c, const IrInstr *ins, int32_t i)
{
    int32_t n = ins->nopnd / 2, k = ins->ncalled >= 1 ? ins->called[0] : -1;
    if ((ins->op != OP_REDUCE && ins->op != OP_REDUCE_WINDOW) || ins->nopnd < 2 || ins->nopnd % 2 || k < 0 ||
        k >= m->ncomp)
        return IR_TUPLE;
    const IrComputation *r = m->comp[k];
    int32_t p = i < n ? n + i : i - n;
    if (p >= r->nparam || r->param[p] < 0 || r->param[p] >= r->ninstr)
        return IR_TUPLE;
    const IrShape *ps = &r->instr[r->param[p]].shape, *v = &c->instr[ins->opnd[i]].shape;
    if (ps->type == IR_TUPLE || ps->rank != 0 || !ir_shape_is_array(v) || ps->type == v->type ||
        !ir_type_is_float(ps->type) || !ir_type_is_float(v->type))
        return IR_TUPLE;
    return ps->type;
}

/* The bytes of ins's operands converted for its kernel while it runs:
 * a reduce's mixed-precision operands (converted_to), scaled-dot's lhs
 * and rhs dequantized to f32 (k_ragged.c). */
static int64_t converted_bytes(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    int64_t b = 0;
    if (ins->op == OP_SCALED_DOT && ins->nopnd == 4)
        for (int32_t i = 0; i < 2; i++)
            if (ir_shape_is_array(&c->instr[ins->opnd[i]].shape))
                b += ir_shape_elements(&c->instr[ins->opnd[i]].shape) * (int64_t)ir_type_size(IR_F32);
    for (int32_t i = 0; i < ins->nopnd; i++) {
        IrType t = converted_to(m, c, ins, i);
        if (t != IR_TUPLE)
            b += ir_shape_elements(&c->instr[ins->opnd[i]].shape) * (int64_t)ir_type_size(t);
    }
    return b;
}

/* Does the kernel of reduce or reduce-window ins call its reducer element
 * by element with scalar values of its own (k_reduce.c's general path:
 * argument slots for the accumulators and inputs, and each call's
 * result)? Not when it takes the fast path: one input of its result's
 * type (once converted: converted_to), a simple reducer
 * (ir_simple_reducer) the type's accumulator domain has (bitwise ones not
 * on floats; nor on complex types, which have no domain). */
static bool calls_per_element(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if ((ins->op != OP_REDUCE && ins->op != OP_REDUCE_WINDOW) || ins->ncalled < 1 || ins->nopnd < 2)
        return false;
    if (ins->nopnd != 2 || ins->shape.type == IR_TUPLE)
        return true; /* several inputs */
    IrType t = converted_to(m, c, ins, 0);
    t = t != IR_TUPLE ? t : c->instr[ins->opnd[0]].shape.type;
    return t != ins->shape.type || !ir_reducer_folds(t, ir_simple_reducer(m, ins->called[0]));
}

/* What a reduce or reduce-window that calls its reducer holds beside its
 * operands and results: nothing when the reducer compares and picks
 * (ir_select_reducer: device/reduce_select.c looks it up in a table, on
 * the operands' types as its kernel receives them: converted_to); the
 * block arrays of device/reduce_columns.c when it runs blockwise
 * (ir_reduce_is_blockwise); else k_reduce.c's general path: its argument
 * slots (`slots`), and, unless the reducer runs as a scalar program
 * (ir_scalar_computation: device/reducer_scalar.c, its values outside the
 * device's memory), one call's values: `per_call` with the slots. */
static int64_t blockwise_bytes(const IrModule *m, const IrComputation *c, const IrInstr *ins, int64_t per_call,
                               int64_t slots)
{
    int64_t general = ir_scalar_computation(m, ins->called[0]) ? slots : per_call;
    IrType types[4 * IR_MAX_RANK];
    if (ins->nopnd > 4 * IR_MAX_RANK || ins->nopnd % 2)
        return general;
    for (int32_t i = 0; i < ins->nopnd; i++) {
        IrType t = converted_to(m, c, ins, i);
        types[i] = t != IR_TUPLE ? t : c->instr[ins->opnd[i]].shape.type;
    }
    IrSelectReducer sel;
    if (ir_select_reducer(m, ins->called[0], ins->nopnd / 2, types, &sel))
        return 0;
    if (ins->op == OP_REDUCE && ir_reduce_is_blockwise(m, ins, types))
        return ir_reduce_block_bytes(m, ins, types);
    return general;
}

/* The peak of a sort's nested run of its keys op by op (sort_keys_bytes):
 * the lifted values of k (IR_SORT_LIFT), the leaves (IR_SORT_LEAF) held
 * to the end. */
static int64_t sort_keys_unfused(const IrComputation *cc, const IrSortKeys *k, int64_t elems)
{
    int32_t n = cc->ninstr, *last = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *last);
    if (!last)
        return 0;
    const int32_t *order = k->order;
    const uint8_t *role = k->role;
    for (int32_t j = 0; j < n; j++)
        last[order[j]] = -1;
    for (int32_t j = 0; j < n; j++)
        for (int32_t o = 0; (role[order[j]] & IR_SORT_LIFT) && o < cc->instr[order[j]].nopnd; o++)
            last[cc->instr[order[j]].opnd[o]] = j;
    int64_t live = 0, peak = 0;
    for (int32_t j = 0; j < n; j++) {
        const IrInstr *x = &cc->instr[order[j]];
        if (!(role[order[j]] & IR_SORT_LIFT) || x->op == OP_PARAMETER)
            continue;
        int32_t lender = -1; /* an operand whose buffer it writes over: its bytes go on as its */
        for (int32_t o = 0; x->op != OP_CONSTANT && o < x->nopnd && lender < 0; o++) {
            const IrInstr *y = &cc->instr[x->opnd[o]];
            if (last[x->opnd[o]] == j && !(role[x->opnd[o]] & IR_SORT_LEAF) && y->op != OP_PARAMETER &&
                y->op != OP_CONSTANT && y->shape.type == x->shape.type)
                lender = x->opnd[o];
        }
        if (lender < 0)
            live += elems * (int64_t)ir_type_size(x->shape.type);
        peak = live > peak ? live : peak;
        for (int32_t o = 0; o < x->nopnd; o++) {
            int32_t p = x->opnd[o];
            bool first = p != lender; /* an operand read twice is freed once */
            for (int32_t q = 0; q < o; q++)
                first = first && x->opnd[q] != p;
            if (first && last[p] == j && !(role[p] & IR_SORT_LEAF) && cc->instr[p].op != OP_PARAMETER)
                live -= elems * (int64_t)ir_type_size(cc->instr[p].shape.type);
        }
    }
    ts_free(last);
    return peak;
}

/* The keys a sort's comparator computes per element (device/k_sort.c,
 * its native path): every value of the comparator that depends on one
 * side's parameters only and feeds a compare, select or logical op that
 * mixes the sides is computed once for the whole operand by a nested run
 * of the executor (its elementwise chains fused, so only those leaves are
 * made), and the leaves live while the sort runs: JAX's comparators
 * (NaN and -0 canonicalised by selects before a TOTALORDER compare) make
 * one a side. Which they are is the kernel's own classification
 * (ir_sort_keys); 0 where the sort takes the general path (a comparator
 * call per comparison, scalars only). */
static int64_t sort_keys_bytes(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (ins->op != OP_SORT || ins->ncalled < 1 || ins->nopnd < 1 || ins->called[0] < 0 ||
        ins->called[0] >= m->ncomp || !m->comp[ins->called[0]])
        return 0;
    const IrComputation *cc = m->comp[ins->called[0]];
    IrSortKeys k;
    IrDiag d = {0};
    if (ir_sort_keys(m, cc, ins->nopnd, &k, &d) != IR_OK || !k.native) {
        ir_diag_clear(&d);
        ir_sort_keys_free(&k);
        return 0;
    }
    int64_t bytes = 0, elems = ir_shape_elements(&c->instr[ins->opnd[0]].shape);
    for (int32_t i = 0; i < cc->ninstr; i++)
        if ((k.role[i] & IR_SORT_LEAF) && (k.role[i] & IR_SORT_LIFT))
            bytes += elems * (int64_t)ir_type_size(cc->instr[i].shape.type);
    /* Arrays of fusion's size: the nested run's chains are fused groups
     * whose roots are the leaves. Smaller ones run op by op: every lifted
     * value (a constant as its broadcast) is made in the comparator's
     * order and freed after its last use, the leaves held to the end, and
     * an op writes over an operand of its type that dies there and is no
     * leaf or parameter (the executor's lending, as lone_lends). */
    if (elems < IR_FUSION_MIN_ELEMENTS)
        bytes = sort_keys_unfused(cc, &k, elems);
    ir_sort_keys_free(&k);
    return bytes;
}

/* The bytes of computation k's parameters. */
static int64_t param_bytes_of(const IrModule *m, int32_t k)
{
    int64_t b = 0;
    for (int32_t i = 0; i < m->comp[k]->ninstr; i++)
        if (m->comp[k]->instr[i].op == OP_PARAMETER)
            b += leaf_bytes(&m->comp[k]->instr[i].shape);
    return b;
}

/* What the while `ins` (at step s) adds at its step beyond the caller's
 * live values and the while's fresh result bytes (while_fresh). When the
 * caller holds the initial state through the loop, the first
 * iteration's body reads it: it adds its peak beyond its parameters
 * (`beyond`, with the new state). A later iteration's state is the last
 * one's result, handed over to the body: its estimate with the parameter
 * donated, less the leaves passed through (they are the initial state's
 * buffers, counted by the caller). When the loop takes the initial state
 * over (while_takes_state) every iteration is a later one and only the
 * initial leaves others keep are held beside it: the caller's count of the operand and the
 * fresh result is then more than the loop holds, and the extra can be
 * negative (down to -fresh): `cond` is the condition's peak beyond its
 * parameter, run on the state alone. */
static IrStatus while_body_extra(Est *e, int32_t s, const IrInstr *ins, int64_t beyond, int64_t cond,
                                 int64_t *extra, IrDiag *d)
{
    int32_t k = ins->called[1];
    bool through;
    int64_t fresh = while_fresh(e->m, ins, &through), all = leaf_bytes(&ins->shape);
    bool donated[1] = {true};
    MemOptions o = {.donated = donated, .nparams = 1};
    MemEstimate sub;
    IrStatus st = estimate(e->m, k, &o, e->peak_of, e->depth + 1, &sub, d);
    if (st != IR_OK)
        return st;
    int64_t later = sub.peak - (all - fresh), held = sub.peak - all;
    mem_estimate_free(&sub);
    int64_t kept, kept_through;
    if (while_takes_state(e, s, ins, &kept, &kept_through)) {
        /* the loop holds the larger of the state with the condition's
         * values and the body's donated peak beside the leaves others keep */
        int64_t body = held + kept - kept_through;
        *extra = (cond > body ? cond : body) - fresh;
        return IR_OK;
    }
    int64_t x = (beyond > later ? beyond : later) - fresh;
    *extra = x > cond ? x : cond;
    return IR_OK;
}

/* The deepest state path the estimate follows (IrLimits' default depth). */
#define STATE_DEPTH 64

/* The bytes of a while's result it makes afresh: a leaf of the state the
 * body passes through unchanged (through_at: at any tuple depth, a scan's
 * inputs inside the carried tuple of a gradient's forward loop) stays in
 * the initial state's buffer. *through: some leaf does. */
static int64_t while_fresh(const IrModule *m, const IrInstr *ins, bool *through)
{
    int32_t path[STATE_DEPTH];
    int64_t kept = through_at(m, ins, path, 0, &ins->shape);
    *through = kept > 0;
    return leaf_bytes(&ins->shape) - kept;
}

/* Is value v of body computation b its parameter's element at path[0..n)
 * (get-tuple-elements down that path, the parameter itself for n 0)? */
static bool param_path(const IrComputation *b, int32_t v, const int32_t *path, int32_t n)
{
    for (int32_t j = n - 1; j >= 0; j--) {
        const IrInstr *g = &b->instr[v];
        if (g->op != OP_GET_TUPLE_ELEMENT || g->nopnd != 1 || g->a.tuple_index != path[j])
            return false;
        v = g->opnd[0];
    }
    return b->instr[v].op == OP_PARAMETER;
}

/* The bytes of the leaves of while ins's state under path[0..n) (shape
 * s there) that its body passes through unchanged: the body's root,
 * followed down the path through its tuples, is the parameter's element
 * there (get-tuple-elements of the parameter along the path), or a tuple
 * some of whose elements are. The executor's tuples hold references, so
 * the body hands back the very buffers it got, at any depth (tessel
 * grad's forward loop carries the scan's state as a tuple inside its own,
 * its xs and weights passed through one level down). */
static int64_t through_at(const IrModule *m, const IrInstr *ins, int32_t *path, int32_t n, const IrShape *s)
{
    if (ins->op != OP_WHILE || ins->ncalled < 2 || ins->called[1] < 0 || ins->called[1] >= m->ncomp ||
        n > STATE_DEPTH)
        return 0;
    const IrComputation *b = m->comp[ins->called[1]];
    if (b->root < 0 || b->root >= b->ninstr)
        return 0;
    int32_t v = b->root, j = 0;
    while (j < n && b->instr[v].op == OP_TUPLE && path[j] >= 0 && path[j] < b->instr[v].nopnd)
        v = b->instr[v].opnd[path[j++]];
    if (param_path(b, v, path, j))
        return leaf_bytes(s); /* the whole element at path[0..j), so this part of it */
    const IrInstr *t = &b->instr[v];
    if (j < n || n >= STATE_DEPTH || t->op != OP_TUPLE || s->type != IR_TUPLE || t->nopnd != s->ntuple)
        return 0;
    int64_t x = 0;
    for (int32_t k = 0; k < s->ntuple; k++) {
        path[n] = k;
        x += through_at(m, ins, path, n + 1, &s->tuple[k]);
    }
    return x;
}

/* Does the body of while ins pass element k of its state through
 * unchanged, all of it (through_at)? */
static bool passes_through(const IrModule *m, const IrInstr *ins, int32_t k)
{
    if (ins->shape.type != IR_TUPLE || k < 0 || k >= ins->shape.ntuple)
        return false;
    int32_t path[STATE_DEPTH] = {k};
    int64_t b = leaf_bytes(&ins->shape.tuple[k]);
    return b > 0 && through_at(m, ins, path, 1, &ins->shape.tuple[k]) == b;
}

/* Is value v held by somebody after step s: the root, a parameter (the
 * caller's), or read by a later step? */
static bool held_after(const Est *e, int32_t v, int32_t s)
{
    const IrComputation *c = e->c;
    if (v == c->root || c->instr[v].op == OP_PARAMETER)
        return true;
    for (int32_t t = s + 1; t < e->n; t++) {
        const IrInstr *r = &c->instr[e->order[t]];
        for (int32_t k = 0; k < r->nopnd; k++)
            if (r->opnd[k] == v)
                return true;
    }
    return false;
}

/* The initial state's part v (at path[0..n) of while w's state, shape
 * sh), taken over at step s (while_takes_state): a tuple made here that
 * nobody else holds hands its elements over too (the executor's tuple
 * holds the only references to them: a gradient's backward loop gets its
 * cotangent carry as a tuple inside its state), so they are looked at one
 * by one; another part is held by somebody else (*held, of which
 * *held_through the body passes through) when it is a parameter, read
 * after s, a reference to another value's buffer, a call's result or a
 * tuple of anything else. */
static void state_held(const Est *e, int32_t s, const IrInstr *w, int32_t v, const IrShape *sh, int32_t *path,
                       int32_t n, int64_t *held, int64_t *held_through)
{
    const IrInstr *t = &e->c->instr[v];
    if (t->op == OP_TUPLE && sh->type == IR_TUPLE && t->nopnd == sh->ntuple && n < STATE_DEPTH &&
        !held_after(e, v, s)) {
        for (int32_t k = 0; k < t->nopnd; k++) {
            path[n] = k;
            state_held(e, s, w, t->opnd[k], &sh->tuple[k], path, n + 1, held, held_through);
        }
        return;
    }
    if (held_after(e, v, s) || refers(t) || t->op == OP_CALL || sh->type == IR_TUPLE) {
        *held += leaf_bytes(sh);
        *held_through += through_at(e->m, w, path, n, sh);
    }
}

/* Does the while ins at step s take its state over? The executor hands
 * the loop its reference at the operand's last use (device/exec.c's
 * run_one), so the leaves of the initial state that nobody else holds
 * die inside the first iteration as a later state's do, instead of
 * being kept beside the loop. *held: the bytes of the leaves somebody
 * else does hold (state_held: a parameter, a value read after s, a
 * reference to another value's buffer), which stay; *held_through: of
 * those, the leaves the body passes through (the loop's state then
 * shares them). */
static bool while_takes_state(const Est *e, int32_t s, const IrInstr *ins, int64_t *held, int64_t *held_through)
{
    *held = *held_through = 0;
    if (ins->op != OP_WHILE || ins->nopnd != 1 || held_after(e, ins->opnd[0], s))
        return false;
    const IrInstr *o = &e->c->instr[ins->opnd[0]];
    if (o->op != OP_TUPLE)
        return !refers(o) && o->op != OP_CALL;
    if (o->nopnd != ins->shape.ntuple)
        return false;
    int32_t path[STATE_DEPTH];
    state_held(e, s, ins, ins->opnd[0], &ins->shape, path, 0, held, held_through);
    return true;
}

/* ---- the executor's run-time fusion, as far as memory goes ----
 *
 * The executor runs groups of instructions fused (ir/fusion_find.c finds
 * them, device/fusion.c and fusion_rows.c run them); the estimate takes
 * the same groups from the same finder over the same order:
 *  - a group's nodes run at its root's step, reading its leaves there;
 *    their values never exist (own 0), save a multi-output group's extra
 *    outputs (Adam's m' and v' beside w'), made whole at the root's step
 *    and living to their last readers;
 *  - an elementwise group's root, then each extra output in turn, takes
 *    the buffer of a leaf that dies there, that nobody else holds, read
 *    element for element (leaf_direct) and as wide as the output
 *    (device/fusion.c's in_place_leaf), one leaf an output;
 *  - a row group (softmax, layer norm: reductions over the minor dims
 *    with their producers) and a dot's group (a dot-transpose pair, a
 *    transpose read in place by dots) write a new buffer; a row group's
 *    scratch rows are not values.
 * A node run inside several groups (a broadcast shared by them, a
 * transpose read by several dots) is read by each: its operands live to
 * the last of their steps. */

/* e->fusion: the groups; e->group[i]: the root of the group node i runs
 * inside of (the last to run, for a node of several groups), -1 for a
 * root or an unfused instruction; e->whole[i]: i is an extra output. */
static IrStatus fuse(Est *e, IrDiag *d)
{
    const IrComputation *c = e->c;
    IrFusionOptions fo = {0}; /* the run's defaults (runtime/local.c) */
    IrStatus st = ir_fusion_find(e->m, c, e->order, e->n, &fo, &e->fusion, d);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < c->ninstr; i++) {
        e->group[i] = -1;
        e->whole[i] = false;
    }
    for (int32_t k = 0; k < e->fusion.ngroups; k++) {
        const IrFusionGroup *g = &e->fusion.groups[k];
        for (int32_t j = 0; j < g->nnodes; j++) {
            int32_t x = g->nodes[j];
            if (x != g->root && (e->group[x] < 0 || e->step[g->root] > e->step[e->group[x]]))
                e->group[x] = g->root;
        }
        for (int32_t j = 0; j < g->nextra; j++)
            e->whole[g->extra[j]] = true;
    }
    return IR_OK;
}

/* The step an instruction's operand reads happen at, and an extra
 * output is made at: its group root's for a member of a group. */
static int32_t read_step(const Est *e, int32_t i)
{
    return e->group[i] >= 0 ? e->step[e->group[i]] : e->step[i];
}

/* The group whose root is i, or NULL. */
static const IrFusionGroup *group_rooted_at(const Est *e, int32_t i)
{
    int32_t k = e->fusion.group_of ? e->fusion.group_of[i] : -1;
    return k >= 0 && e->fusion.groups[k].root == i ? &e->fusion.groups[k] : NULL;
}

static void extend(Est *e, int32_t t, int32_t to, bool full);

/* Is instruction i a tuple whose elements are buffers of its own, each
 * freed on its own (the executor's tuple value holds a reference to each
 * element; a get-tuple-element takes one, and an element nobody took dies
 * with the tuple): an rng-bit-generator's state and bits, a sort's or a
 * reduce's several results, a tuple parameter (a while body's state: the
 * executor reads its elements first, ir_exec_order_of, so a donated one
 * dies at once and each element lives as long as its reads). Referring
 * ones, -starts and whiles (parts of their state are their operands')
 * are not. */
static bool splits(const Est *e, int32_t i)
{
    const IrInstr *ins = &e->c->instr[i];
    return ins->shape.type == IR_TUPLE && ins->shape.ntuple > 0 && ins->op != OP_WHILE && !refers(ins) && start_fresh(ins) < 0 && !alone(ins) &&
           e->own[i] == leaf_bytes(&ins->shape);
}

/* The operand whose buffer element k of a call's tuple i is (its
 * callee's root tuple hands back that parameter: the executor passes the
 * caller's value through), or -1: an element of its own. */
static int32_t passed(const Est *e, int32_t i, int32_t k)
{
    const IrInstr *ins = &e->c->instr[i];
    if (ins->op != OP_CALL || ins->ncalled < 1 || ins->called[0] < 0 || ins->called[0] >= e->m->ncomp)
        return -1;
    const IrComputation *b = e->m->comp[ins->called[0]];
    if (b->root < 0 || b->instr[b->root].op != OP_TUPLE || b->instr[b->root].nopnd != ins->shape.ntuple)
        return -1;
    const IrInstr *r = &b->instr[b->instr[b->root].opnd[k]];
    int64_t pn = r->a.parameter_number;
    return r->op == OP_PARAMETER && pn >= 0 && pn < ins->nopnd ? (int32_t)pn : -1;
}

/* The earlier element of a call's tuple i that element k is the same
 * buffer as (its callee's root tuple names one value twice: the executor
 * hands back two references to it), or -1. */
static int32_t same_as(const Est *e, int32_t i, int32_t k)
{
    const IrInstr *ins = &e->c->instr[i];
    if (ins->op != OP_CALL || ins->ncalled < 1 || ins->called[0] < 0 || ins->called[0] >= e->m->ncomp)
        return -1;
    const IrComputation *b = e->m->comp[ins->called[0]];
    if (b->root < 0 || b->instr[b->root].op != OP_TUPLE || b->instr[b->root].nopnd != ins->shape.ntuple)
        return -1;
    const IrInstr *r = &b->instr[b->root];
    for (int32_t j = 0; j < k; j++)
        if (r->opnd[j] == r->opnd[k])
            return j;
    return -1;
}

/* The bytes element k of split tuple i makes (0: passed through, or the
 * same buffer as an earlier element). */
static int64_t elem_bytes(const Est *e, int32_t i, int32_t k)
{
    return passed(e, i, k) >= 0 || same_as(e, i, k) >= 0 ? 0 : leaf_bytes(&e->c->instr[i].shape.tuple[k]);
}

/* The last step element k of tuple i lives in (held by any element that
 * is the same buffer). */
static int32_t elem_end(const Est *e, int32_t i, int32_t k)
{
    int32_t x = e->end[i] > e->eend[e->eoff[i] + k] ? e->end[i] : e->eend[e->eoff[i] + k];
    if (e->c->instr[i].op != OP_CALL)
        return x; /* only a call's elements can be one buffer (same_as): no scan of the others */
    for (int32_t j = k + 1; j < e->c->instr[i].shape.ntuple; j++)
        if (same_as(e, i, j) == k && e->eend[e->eoff[i] + j] > x)
            x = e->eend[e->eoff[i] + j];
    return x;
}

/* The last step any of instruction i's bytes live in: its elements' own
 * ends are enough (an element sharing another's buffer ends no later than
 * the buffer's last holder, which is itself an element). */
static int32_t last_end(const Est *e, int32_t i)
{
    int32_t to = e->end[i];
    for (int32_t k = 0; e->eoff[i] >= 0 && k < e->c->instr[i].shape.ntuple; k++)
        if (e->eend[e->eoff[i] + k] > to)
            to = e->eend[e->eoff[i] + k];
    return to;
}

/* The bytes instruction i holds while step s runs (its elements alive
 * then, for a split tuple). */
static int64_t bytes_at(const Est *e, int32_t i, int32_t s)
{
    if (e->eoff[i] < 0)
        return e->own[i];
    int64_t b = 0;
    for (int32_t k = 0; k < e->c->instr[i].shape.ntuple; k++)
        if (elem_end(e, i, k) >= s)
            b += elem_bytes(e, i, k);
    return b;
}

/* The value a chain of copies starting at i copies (i itself if i is no
 * copy): a copy is a reference to it (device/exec.c). */
static int32_t copied(const IrComputation *c, int32_t i)
{
    while (c->instr[i].op == OP_COPY && c->instr[i].nopnd == 1)
        i = c->instr[i].opnd[0];
    return i;
}

/* Does o, read last at step s, hand the run a buffer of `bytes` nobody
 * else holds after s (the executor writes over it only then:
 * dev_value_sole)? Its own; for a copy (a reference, owning nothing) the
 * buffer of the value it copies, when that value and every other copy of
 * it are read last before s; for a get-tuple-element of a split tuple
 * (splits) its element's, when the tuple and every other taker of the
 * element are done before s. Other references lend nothing: their own
 * bytes are 0 before the walk reaches them (lifetimes), so a reference to
 * a value still live after s (an output, or read later) is never counted
 * as a free buffer (a copy of a momentum output read by the update
 * written over it measured 106496 bytes against 98304 estimated). */
/* get-tuple-element o (dying at step s) of a while's result: the
 * element is the body's own last value (while_fresh counts it fresh, not
 * one it passes through from the initial state), and the loop's tuple is
 * held by nobody else at s (every other reader of it done before): the
 * executor's reference is then the element's only one, and a writer at s
 * takes its buffer (a scan's carried activations squared in place). */
static bool while_element_lendable(const Est *e, int32_t o, int32_t s, int64_t bytes)
{
    const IrComputation *c = e->c;
    int32_t t = c->instr[o].opnd[0];
    const IrInstr *w = &c->instr[t];
    int64_t k = c->instr[o].a.tuple_index;
    if (t == c->root || w->shape.type != IR_TUPLE || k < 0 || k >= w->shape.ntuple ||
        leaf_bytes(&w->shape.tuple[k]) != bytes || passes_through(e->m, w, (int32_t)k))
        return false;
    for (int32_t j = 0; j < c->ninstr; j++) {
        if (j == o)
            continue;
        const IrInstr *r = &c->instr[j];
        for (int32_t q = 0; q < r->nopnd; q++)
            if (r->opnd[q] == t && e->end[j] >= s)
                return false;
    }
    return true;
}

static bool lendable(const Est *e, int32_t o, int32_t s, int64_t bytes)
{
    const IrComputation *c = e->c;
    const IrInstr *ins = &c->instr[o];
    if (e->end[o] != s || bytes <= 0)
        return false;
    if (ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 && e->eoff[ins->opnd[0]] >= 0) {
        int32_t t = ins->opnd[0];
        int64_t k = ins->a.tuple_index;
        if (k < 0 || k >= c->instr[t].shape.ntuple || elem_bytes(e, t, (int32_t)k) != bytes || e->end[t] >= s ||
            e->eend[e->eoff[t] + k] >= s)
            return false;
        for (int32_t q = e->step[t] + 1; q < s; q++) { /* a taker after s reads t: end[t] said so */
            const IrInstr *j = &c->instr[e->order[q]];
            if (e->order[q] != o && j->op == OP_GET_TUPLE_ELEMENT && j->nopnd == 1 && j->opnd[0] == t &&
                j->a.tuple_index == k && e->end[e->order[q]] >= s)
                return false;
        }
        return true;
    }
    if (ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 && c->instr[ins->opnd[0]].op == OP_WHILE)
        return while_element_lendable(e, o, s, bytes);
    if (ins->op != OP_COPY)
        return e->own[o] == bytes;
    int32_t b = copied(c, o);
    if (e->own[b] != bytes || e->end[b] >= s || !ir_shape_is_array(&c->instr[b].shape))
        return false;
    for (int32_t q = e->step[b] + 1; q < s; q++) { /* a copy after s reads the chain: end[b] or one above */
        int32_t j = e->order[q];
        if (j != o && c->instr[j].op == OP_COPY && e->end[j] >= s && copied(c, j) == b)
            return false;
    }
    return true;
}

/* Output x of group g (its root or an extra output) takes the buffer of
 * a leaf that dies at step s, nobody else's, read element for element
 * and as wide as x, not taken by another output (device/fusion.c's
 * in_place_leaf): own 0, the leaf's buffer lives as long as x. */
static void output_takes_leaf(Est *e, const IrFusionGroup *g, int32_t x, int32_t s, bool *taken)
{
    int64_t bytes = leaf_bytes(&e->c->instr[x].shape);
    for (int32_t l = 0; bytes > 0 && l < g->nleaves; l++) {
        int32_t o = g->leaves[l];
        if (!taken[l] && g->leaf_direct[l] && lendable(e, o, s, bytes) && ir_shape_is_array(&e->c->instr[o].shape)) {
            taken[l] = true;
            e->own[x] = 0;
            extend(e, o, e->end[x], true);
            return;
        }
    }
}

/* Root i (at step s) of a fused group: an elementwise group's outputs
 * take dying leaves' buffers (output_takes_leaf), the root's first; a row
 * group's or a dot's root makes its own. False: i is no group's root. */
static bool fused_root(Est *e, int32_t i, int32_t s)
{
    const IrFusionGroup *g = group_rooted_at(e, i);
    if (!g)
        return false;
    if (g->nouter >= 0 || g->dot >= 0)
        return true;
    bool taken[IR_FUSION_MAX_NODES * 3] = {false};
    if (g->nleaves > IR_FUSION_MAX_NODES * 3)
        return true;
    output_takes_leaf(e, g, i, s, taken);
    for (int32_t j = 0; j < g->nextra; j++)
        output_takes_leaf(e, g, g->extra[j], s, taken);
    return true;
}

/* A lone elementwise op i (in no fused group; at step s) of
 * IR_FUSION_MIN_ELEMENTS or more elements writes its result over an operand of
 * its dims and bytes that dies here and that nobody else holds
 * (device/exec.c's elementwise_in_place, as XLA's buffer assignment
 * shares a dying operand's buffer): own 0, the operand's buffer lives as
 * long as the result. A parameter the caller holds lives to the end, so
 * never dies here. Example: d = dot(x, w); t = tanh(d); r = dot(t, w2):
 * d and t are one buffer, at t and at r. */
static bool lone_lends(Est *e, int32_t i, int32_t s)
{
    const IrComputation *c = e->c;
    const IrInstr *ins = &c->instr[i];
    int64_t bytes = leaf_bytes(&ins->shape);
    if (!ir_op_is_elementwise(ins->op) || ins->op == OP_COPY || ins->op == OP_MAP || ins->nopnd > 3 ||
        !ir_shape_is_array(&ins->shape) || e->group[i] >= 0 || group_rooted_at(e, i) || bytes <= 0 ||
        ir_shape_elements(&ins->shape) < IR_FUSION_MIN_ELEMENTS)
        return false;
    for (int32_t k = 0; k < ins->nopnd; k++) {
        int32_t o = ins->opnd[k];
        if (lendable(e, o, s, bytes) && ir_shape_is_array(&c->instr[o].shape) &&
            ir_shape_same_dims(&c->instr[o].shape, &ins->shape)) {
            e->own[i] = 0;
            extend(e, o, e->end[i], true);
            return true;
        }
    }
    return false;
}

/* Keep instruction t's buffer to step `to`; with `full` also what t
 * refers to (tie: the step to which t holds its references). */
static void extend(Est *e, int32_t t, int32_t to, bool full)
{
    if (e->end[t] < to)
        e->end[t] = to;
    if (full && e->tie[t] < to)
        e->tie[t] = to;
}

/* The initial state's part v (at path[0..n) of while w's state, shape
 * sh) lives to step `to` where the body passes it through (through_at):
 * just the leaves passed through, down the tuples the caller made, at any
 * depth; a part of another kind whole. */
static void extend_through(Est *e, const IrInstr *w, int32_t v, const IrShape *sh, int32_t *path, int32_t n,
                           int32_t to)
{
    int64_t kept = through_at(e->m, w, path, n, sh);
    if (kept <= 0)
        return;
    const IrInstr *t = &e->c->instr[v];
    if (kept == leaf_bytes(sh) || t->op != OP_TUPLE || sh->type != IR_TUPLE || t->nopnd != sh->ntuple ||
        n >= STATE_DEPTH) {
        extend(e, v, to, true);
        return;
    }
    for (int32_t k = 0; k < t->nopnd; k++) {
        path[n] = k;
        extend_through(e, w, t->opnd[k], &sh->tuple[k], path, n + 1, to);
    }
}

/* Last steps: each value's last use; referring instructions keep their
 * sources alive as long as they are (walked backwards, so chains of
 * references carry through); reusing ones take their operand's buffer. */
static void lifetimes(Est *e, const MemOptions *o)
{
    const IrComputation *c = e->c;
    for (int32_t i = 0; i < c->ninstr; i++)
        e->end[i] = e->step[i];
    for (int32_t s = 0; s < e->n; s++) {
        const IrInstr *ins = &c->instr[e->order[s]];
        int32_t at = read_step(e, e->order[s]);
        for (int32_t k = 0; k < ins->nopnd; k++)
            if (e->end[ins->opnd[k]] < at)
                e->end[ins->opnd[k]] = at;
    }
    for (int32_t i = 0; i < c->ninstr; i++) {
        e->last_read[i] = e->end[i];
        if (e->group[i] >= 0 && !e->whole[i])
            e->own[i] = 0; /* inside a fused group: never made */
        if (refers(&c->instr[i]) || (alone(&c->instr[i]) && start_fresh(&c->instr[i]) < 0))
            e->own[i] = 0; /* another value's buffer: its readers, walked first below, take none of it */
    }
    if (c->root >= 0 && e->step[c->root] >= 0)
        e->end[c->root] = e->n;
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        if (ins->op != OP_PARAMETER || e->step[i] < 0)
            continue;
        int64_t pn = ins->a.parameter_number;
        bool donated = o && o->donated && pn >= 0 && pn < o->nparams && o->donated[pn];
        if (!donated)
            e->end[i] = e->n;
    }
    int32_t *tie = e->tie;
    for (int32_t i = 0; i < c->ninstr; i++)
        tie[i] = e->end[i];
    for (int32_t i = 0, at = 0; i < c->ninstr; i++) {
        e->eoff[i] = e->step[i] >= 0 && splits(e, i) ? at : -1;
        for (int32_t k = 0; e->eoff[i] >= 0 && k < c->instr[i].shape.ntuple; k++)
            e->eend[at++] = -1;
    }
    for (int32_t s = e->n - 1; s >= 0; s--) {
        int32_t i = e->order[s];
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; e->eoff[i] >= 0 && k < ins->shape.ntuple; k++)
            if (passed(e, i, k) >= 0) { /* the caller's operand, held as long as the element */
                e->own[i] -= leaf_bytes(&ins->shape.tuple[k]);
                extend(e, ins->opnd[passed(e, i, k)], elem_end(e, i, k), true);
            } else if (same_as(e, i, k) >= 0) {
                e->own[i] -= leaf_bytes(&ins->shape.tuple[k]); /* an earlier element's buffer */
            }
        if (refers(ins)) {
            e->own[i] = 0;
            if (ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 &&
                c->instr[ins->opnd[0]].op == OP_TUPLE) { /* gte(tuple(a, b)), 1: just b */
                const IrInstr *t = &c->instr[ins->opnd[0]];
                int64_t x = ins->a.tuple_index;
                if (x >= 0 && x < t->nopnd) {
                    extend(e, t->opnd[x], e->end[i], true);
                    continue;
                }
            }
            if (ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 && e->eoff[ins->opnd[0]] >= 0) {
                int64_t x = ins->a.tuple_index; /* just the element taken */
                int32_t *ee = &e->eend[e->eoff[ins->opnd[0]]];
                if (x >= 0 && x < c->instr[ins->opnd[0]].shape.ntuple && ee[x] < e->end[i])
                    ee[x] = e->end[i];
                continue;
            }
            /* A -done keeps its -start's result alive, not what the
             * -start refers to (copy-done's element is the operand). */
            if (ins->nopnd == 0)
                continue; /* tuple(): refers to nothing */
            const IrInstr *st = &c->instr[ins->opnd[0]];
            bool part = ins->op != OP_COPY_DONE && start_fresh(st) >= 0 && !alone(st);
            if (ins->op == OP_ASYNC_UPDATE && e->ctx_end[ins->opnd[0]] < e->last_read[i])
                e->ctx_end[ins->opnd[0]] = e->last_read[i]; /* the context lives to the -done */
            int32_t to = ins->op == OP_TUPLE ? ins->nopnd : ins->nopnd > 0 ? 1 : 0;
            for (int32_t k = 0; k < to; k++)
                extend(e, ins->opnd[k], e->end[i], !part);
        } else if (alone(ins) && start_fresh(ins) < 0) {
            e->own[i] = 0; /* the identity: its operands' buffers */
            for (int32_t k = 0; k < ins->nopnd; k++)
                extend(e, ins->opnd[k], e->end[i], true);
        } else if (start_fresh(ins) >= 0) {
            e->own[i] = alone(ins) ? start_context(ins) : start_fresh(ins);
            e->ctx[i] = start_context(ins);
            if (e->ctx_end[i] < e->last_read[i])
                e->ctx_end[i] = e->last_read[i];
            for (int32_t k = 0; k < ins->nopnd; k++)
                extend(e, ins->opnd[k], tie[i], true);
        } else if (ins->op == OP_WHILE && ins->nopnd == 1) {
            bool through;
            e->own[i] = while_fresh(e->m, ins, &through);
            int32_t path[STATE_DEPTH];
            if (through)
                extend_through(e, ins, ins->opnd[0], &ins->shape, path, 0, e->end[i]);
        } else if (fused_root(e, i, s)) {
            /* a fused group's outputs took dying leaves' buffers, or made their own */
        } else if (lone_lends(e, i, s)) {
            /* a lone elementwise op wrote over a dying operand */
        } else if (reused_operand(ins) >= 0) {
            int32_t op = ins->opnd[reused_operand(ins)];
            /* The operand's last use is here and it is nobody else's. */
            if (lendable(e, op, s, leaf_bytes(&ins->shape))) {
                e->own[i] = 0;
                extend(e, op, e->end[i], true);
            }
        }
    }
}

static IrStatus setup(Est *e, const IrModule *m, int32_t comp, const MemOptions *o, IrDiag *d)
{
    const IrComputation *c = m->comp[comp];
    size_t ni = (size_t)(c->ninstr > 0 ? c->ninstr : 1);
    e->m = m;
    e->c = c;
    e->order = ts_malloc(ni * sizeof *e->order);
    e->step = ts_malloc(ni * sizeof *e->step);
    e->end = ts_malloc(ni * sizeof *e->end);
    e->tie = ts_malloc(ni * sizeof *e->tie);
    e->last_read = ts_malloc(ni * sizeof *e->last_read);
    e->group = ts_malloc(ni * sizeof *e->group);
    e->whole = ts_malloc(ni * sizeof *e->whole);
    e->own = ts_calloc(ni, sizeof *e->own);
    e->callee = ts_calloc(ni, sizeof *e->callee);
    e->ctx = ts_calloc(ni, sizeof *e->ctx);
    e->ctx_end = ts_malloc(ni * sizeof *e->ctx_end);
    e->eoff = ts_malloc(ni * sizeof *e->eoff);
    size_t nel = 1;
    for (int32_t i = 0; i < c->ninstr; i++)
        nel += c->instr[i].shape.type == IR_TUPLE && c->instr[i].shape.ntuple > 0 ? (size_t)c->instr[i].shape.ntuple : 0;
    e->eend = ts_malloc(nel * sizeof *e->eend);
    if (!e->ctx || !e->ctx_end || !e->eoff || !e->eend)
        return ir_oom(d, NULL);
    for (size_t i = 0; i < ni; i++)
        e->ctx_end[i] = e->eoff[i] = -1;
    if (!e->order || !e->step || !e->end || !e->tie || !e->last_read || !e->group || !e->whole ||
        !e->own || !e->callee)
        return ir_oom(d, NULL);
    if (o && o->order) {
        if (o->norder < 0 || o->norder > c->ninstr)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "an order of %d steps for %d instructions",
                            (int)o->norder, (int)c->ninstr);
        memcpy(e->order, o->order, (size_t)o->norder * sizeof *e->order);
        e->n = o->norder;
    } else {
        IrExecOrderError oe;
        IrStatus st = ir_exec_order_of(m, c, e->order, &e->n, &oe);
        if (st != IR_OK && st != IR_ENOMEM)
            return ir_error(d, st, m->file, m->src, c->instr[oe.at].pos, "%s: a cycle or a bad operand",
                            c->instr[oe.at].name);
        /* A run with collectives issues each -start early and each -done
         * late (device/exec.c): a -start's context lives across the work
         * between them, as an abs-start's s32[] does across a topk's
         * gather (fusion_async_sharded: 4 bytes over the estimate). */
        if (st == IR_OK && !m->is_scheduled)
            st = ir_schedule_overlap(c, e->order, e->n);
        if (st == IR_ENOMEM)
            return ir_oom(d, NULL);
    }
    for (int32_t i = 0; i < c->ninstr; i++)
        e->step[i] = -1;
    for (int32_t s = 0; s < e->n; s++) {
        int32_t i = e->order[s];
        if (i < 0 || i >= c->ninstr || e->step[i] >= 0)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "step %d of the order: instruction %d %s",
                            (int)s, (int)i, i < 0 || i >= c->ninstr ? "does not exist" : "comes twice");
        e->step[i] = s;
    }
    for (int32_t s = 0; s < e->n; s++) {
        const IrInstr *ins = &c->instr[e->order[s]];
        for (int32_t k = 0; k < ins->nopnd; k++) {
            int32_t p = ins->opnd[k];
            if (p < 0 || p >= c->ninstr || e->step[p] < 0 || e->step[p] > s)
                return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                "step %d of the order: %s runs before its operand %d", (int)s, ins->name, (int)k);
        }
        e->own[e->order[s]] = leaf_bytes(&ins->shape);
    }
    return IR_OK;
}

static void est_free(Est *e)
{
    ts_free(e->step);
    ts_free(e->end);
    ts_free(e->tie);
    ts_free(e->group);
    ts_free(e->whole);
    ir_fusion_free(&e->fusion);
    ts_free(e->own);
    ts_free(e->callee);
    ts_free(e->ctx);
    ts_free(e->ctx_end);
    ts_free(e->eoff);
    ts_free(e->eend);
    e->eoff = e->eend = NULL;
    e->ctx = NULL;
    e->ctx_end = NULL;
    e->step = e->end = NULL;
    e->own = e->callee = NULL;
    ts_free(e->last_read);
}

static int cmp_value(const void *a, const void *b)
{
    const MemValue *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->instr > y->instr) - (x->instr < y->instr);
}

static MemKind kind_of(const Est *e, int32_t i)
{
    const IrInstr *ins = &e->c->instr[i];
    if (ins->op == OP_PARAMETER)
        return MEM_PARAMETER;
    if (last_end(e, i) == e->n)
        return MEM_OUTPUT;
    return collective(ins->op) ? MEM_COLLECTIVE : MEM_TEMPORARY;
}

/* Does instruction i hold bytes while step s runs (s = -1: before the
 * first step)? */
static bool live_at(const Est *e, int32_t i, int32_t s)
{
    bool param = e->c->instr[i].op == OP_PARAMETER;
    return e->step[i] >= 0 && bytes_at(e, i, s) > 0 && (param || read_step(e, i) <= s) &&
           (e->end[i] >= s || e->eoff[i] >= 0);
}

/* The bytes instruction i makes at its step; when they are freed goes
 * into freed[] (per step), what lives to the end into the output bytes. */
static int64_t allocated(const Est *e, int32_t i, int64_t *freed, MemEstimate *out)
{
    const IrComputation *c = e->c;
    int64_t ctx = e->ctx[i] > 0 && e->ctx_end[i] >= 0 && e->ctx_end[i] < e->end[i] ? e->ctx[i] : 0;
    if (ctx > 0)
        freed[e->ctx_end[i]] += ctx;
    int32_t nel = e->eoff[i] >= 0 ? c->instr[i].shape.ntuple : 1; /* a split tuple: each element */
    for (int32_t k = 0; k < nel; k++) {
        int64_t b = e->eoff[i] >= 0 ? elem_bytes(e, i, k) : e->own[i] - ctx;
        int32_t to = e->eoff[i] >= 0 ? elem_end(e, i, k) : e->end[i];
        if (to < e->n)
            freed[to] += b;
        else
            out->output_bytes += b;
    }
    return e->own[i];
}

/* The live bytes of every step, the peak, and what is live there. */
static IrStatus sweep(Est *e, MemEstimate *out, IrDiag *d)
{
    const IrComputation *c = e->c;
    out->live = ts_calloc((size_t)(e->n > 0 ? e->n : 1), sizeof *out->live);
    if (!out->live)
        return ir_oom(d, NULL);
    int64_t *freed = ts_calloc((size_t)e->n + 2, sizeof *freed);
    if (!freed)
        return ir_oom(d, NULL);
    int64_t live = 0;
    for (int32_t i = 0; i < c->ninstr; i++)
        if (e->step[i] < 0 && c->instr[i].op == OP_PARAMETER) {
            /* Nothing reads it, so the order leaves it out; but the
             * caller handed it over and the run holds it to the end (a
             * module with an unread weight measured its bytes over the
             * estimate). */
            live += leaf_bytes(&c->instr[i].shape);
            out->param_bytes += leaf_bytes(&c->instr[i].shape);
        } else if (e->step[i] >= 0 && c->instr[i].op == OP_PARAMETER) {
            live += e->own[i];
            out->param_bytes += e->own[i];
            int32_t nel = e->eoff[i] >= 0 ? c->instr[i].shape.ntuple : 1; /* a split tuple: each element */
            for (int32_t k = 0; k < nel; k++) {
                int64_t b = e->eoff[i] >= 0 ? elem_bytes(e, i, k) : e->own[i];
                int32_t to = e->eoff[i] >= 0 ? elem_end(e, i, k) : e->end[i];
                if (to < e->n)
                    freed[to] += b;
            }
        }
    out->start_bytes = out->peak = live;
    out->peak_step = -1;
    for (int32_t s = 0; s < e->n; s++) {
        int32_t i = e->order[s];
        if (c->instr[i].op != OP_PARAMETER && !e->whole[i])
            live += allocated(e, i, freed, out);
        const IrFusionGroup *g = group_rooted_at(e, i);
        for (int32_t x = 0; g && x < g->nextra; x++) /* made whole at the root's step */
            live += allocated(e, g->extra[x], freed, out);
        out->live[s] = live + e->callee[s];
        if (out->live[s] > out->peak) {
            out->peak = out->live[s];
            out->peak_step = s;
        }
        live -= freed[s];
    }
    ts_free(freed);
    /* What is live at the peak, largest first. */
    int32_t ps = out->peak_step, nv = 0;
    for (int32_t i = 0; i < c->ninstr; i++)
        nv += live_at(e, i, ps);
    out->at_peak = ts_calloc((size_t)(nv > 0 ? nv : 1), sizeof *out->at_peak);
    if (!out->at_peak)
        return ir_oom(d, NULL);
    for (int32_t i = 0; i < c->ninstr; i++) {
        if (!live_at(e, i, ps))
            continue;
        int64_t b = bytes_at(e, i, ps) - (e->ctx_end[i] >= 0 && ps > e->ctx_end[i] ? e->ctx[i] : 0);
        out->at_peak[out->nat_peak++] = (MemValue){i, b, kind_of(e, i)};
    }
    qsort(out->at_peak, (size_t)out->nat_peak, sizeof *out->at_peak, cmp_value);
    out->callee_at_peak = ps >= 0 ? e->callee[ps] : 0;
    return IR_OK;
}

static IrStatus estimate(const IrModule *m, int32_t comp, const MemOptions *o, int64_t *peak_of,
                         int32_t depth, MemEstimate *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    out->comp = comp;
    out->peak_step = -1;
    if (comp < 0 || comp >= m->ncomp || !m->comp[comp])
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no computation %d", (int)comp);
    Est e = {.peak_of = peak_of, .opt = o, .depth = depth};
    IrStatus st = setup(&e, m, comp, o, d);
    int32_t *last_use = st == IR_OK ? ts_malloc((size_t)(e.c->ninstr > 0 ? e.c->ninstr : 1) * sizeof *last_use) : NULL;
    if (st == IR_OK && !last_use)
        st = ir_oom(d, NULL);
    for (int32_t i = 0; st == IR_OK && i < e.c->ninstr; i++)
        last_use[i] = -1;
    for (int32_t s = 0; st == IR_OK && s < e.n; s++)
        for (int32_t j = 0; j < e.c->instr[e.order[s]].nopnd; j++)
            last_use[e.c->instr[e.order[s]].opnd[j]] = s;
    for (int32_t s = 0; st == IR_OK && s < e.n; s++) {
        const IrInstr *ins = &e.c->instr[e.order[s]];
        for (int32_t k = 0; st == IR_OK && k < ins->ncalled; k++) {
            int64_t x = 0;
            bool body = ins->op == OP_WHILE && k == 1;
            st = callee_extra(&e, ins->called[k], body, &x, d);
            if (st == IR_OK && k == 0 && calls_per_element(m, e.c, ins) && ins->called[0] >= 0 &&
                ins->called[0] < m->ncomp)
                x = blockwise_bytes(m, e.c, ins, e.peak_of[3 * ins->called[0]] + param_bytes_of(m, ins->called[0]),
                                    param_bytes_of(m, ins->called[0]));
            if (st == IR_OK && body && ins->nopnd == 1 && e.depth < 64 && ins->called[k] >= 0 &&
                ins->called[k] < m->ncomp) {
                st = while_body_extra(&e, s, ins, x, e.callee[s], &x, d);
                e.callee[s] = x; /* the condition's part is in it; it may be negative */
                continue;
            }
            if (x > e.callee[s])
                e.callee[s] = x;
        }
        int64_t moved;
        if (st == IR_OK && call_moved_extra(&e, s, ins, last_use, &moved, &st, d) && moved < e.callee[s])
            e.callee[s] = moved; /* its operands moved in: may be negative */
        e.callee[s] += converted_bytes(m, e.c, ins); /* its kernel's converted operands */
        e.callee[s] += sort_keys_bytes(m, e.c, ins);  /* a sort's per-element keys */
    }
    ts_free(last_use);
    if (st == IR_OK)
        st = fuse(&e, d);
    if (st == IR_OK) {
        lifetimes(&e, o);
        st = sweep(&e, out, d);
        for (int32_t i = 0; st == IR_OK && i < e.c->ninstr; i++)
            e.end[i] = last_end(&e, i); /* a split tuple's: its last element's */
    }
    out->n = e.n;
    out->order = e.order;
    out->end = e.end;
    out->own = e.own;
    out->last_read = e.last_read;
    if (st == IR_OK && !(out->made = ts_malloc((size_t)(e.c->ninstr > 0 ? e.c->ninstr : 1) * sizeof *out->made)))
        st = ir_oom(d, NULL);
    for (int32_t i = 0; st == IR_OK && i < e.c->ninstr; i++)
        out->made[i] = e.step[i] >= 0 ? read_step(&e, i) : -1;
    e.end = NULL;
    e.own = NULL;
    e.last_read = NULL;
    est_free(&e);
    if (st != IR_OK)
        mem_estimate_free(out);
    return st;
}

IrStatus mem_estimate(const IrModule *m, int32_t comp, const MemOptions *o, MemEstimate *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    int64_t *peak_of = ts_malloc((size_t)(m->ncomp > 0 ? 3 * m->ncomp : 1) * sizeof *peak_of);
    if (!peak_of)
        return ir_oom(d, NULL);
    for (int32_t k = 0; k < m->ncomp; k++)
        peak_of[3 * k] = peak_of[3 * k + 1] = peak_of[3 * k + 2] = k == comp ? 0 : -1; /* calling itself adds nothing more */
    IrStatus st = estimate(m, comp, o, peak_of, 0, out, d);
    ts_free(peak_of);
    return st;
}

void mem_estimate_free(MemEstimate *e)
{
    ts_free(e->order);
    ts_free(e->end);
    ts_free(e->own);
    ts_free(e->last_read);
    ts_free(e->made);
    ts_free(e->live);
    ts_free(e->at_peak);
    memset(e, 0, sizeof *e);
    e->peak_step = -1;
}

int64_t mem_peak(const IrModule *m, const MemOptions *o)
{
    const IrComputation *c = ir_entry(m);
    if (!c)
        return 0;
    MemEstimate e;
    IrDiag d = {0};
    IrStatus st = mem_estimate(m, m->entry, o, &e, &d);
    ir_diag_clear(&d);
    if (st != IR_OK)
        return st == IR_ENOMEM ? -1 : 0;
    int64_t p = e.peak;
    mem_estimate_free(&e);
    return p;
}

const char *mem_kind_name(MemKind k)
{
    switch (k) {
    case MEM_PARAMETER: return "parameter";
    case MEM_OUTPUT: return "output";
    case MEM_COLLECTIVE: return "collective";
    case MEM_TEMPORARY: return "temporary";
    }
    return "?";
}

/* Copy the estimate e of c into out, in arena a. */
static IrStatus fill(IrArena *a, const IrComputation *c, const MemEstimate *e, PlanMemory *out)
{
    out->peak = e->peak;
    out->peak_step = e->peak_step;
    out->peak_instr = e->peak_step >= 0 ? c->instr[e->order[e->peak_step]].name : NULL;
    out->callee = e->callee_at_peak;
    out->nvalues = e->nat_peak;
    out->nsteps = e->n;
    out->values = ir_alloc_array(a, (size_t)(e->nat_peak > 0 ? e->nat_peak : 1), sizeof *out->values);
    out->live = ir_alloc_array(a, (size_t)(e->n > 0 ? e->n : 1), sizeof *out->live);
    out->step_instr = ir_alloc_array(a, (size_t)(e->n > 0 ? e->n : 1), sizeof *out->step_instr);
    if (!out->values || !out->live || !out->step_instr)
        return IR_ENOMEM;
    for (int32_t k = 0; k < e->nat_peak; k++) {
        const MemValue *v = &e->at_peak[k];
        const IrInstr *ins = &c->instr[v->instr];
        out->values[k] = (PlanMemValue){ir_strdup(a, ins->name), ir_op_name(ins->op), v->bytes, v->kind};
        if (!out->values[k].name)
            return IR_ENOMEM;
        out->by_kind[v->kind] += v->bytes;
    }
    for (int32_t s = 0; s < e->n; s++) {
        out->live[s] = e->live[s];
        if (!(out->step_instr[s] = ir_strdup(a, c->instr[e->order[s]].name)))
            return IR_ENOMEM;
    }
    if (out->peak_instr && !(out->peak_instr = ir_strdup(a, out->peak_instr)))
        return IR_ENOMEM;
    return IR_OK;
}

/* Does ins, through its operand o, read the leaf of tuple parameter pi
 * that al names: o is that leaf's get-tuple-element, or o is pi and ins
 * reads the tuple whole (not one of its get-tuple-elements)? A deeper
 * index counts every read of its outermost leaf. */
static bool reads_leaf(const IrComputation *c, const IrInstr *ins, int32_t o, int32_t pi, const IrAlias *al)
{
    if (o == pi)
        return ins->op != OP_GET_TUPLE_ELEMENT;
    const IrInstr *g = &c->instr[o];
    return g->op == OP_GET_TUPLE_ELEMENT && g->nopnd == 1 && g->opnd[0] == pi &&
           g->a.tuple_index == al->param_index.v[0];
}

/* "{1,0}": a parameter index as XLA's pairs write it, in arena a. */
static const char *leaf_text(IrArena *a, const IrShapeIndex *ix)
{
    char buf[160];
    size_t n = 0;
    buf[n++] = '{';
    for (int32_t k = 0; k < ix->n && n + 24 < sizeof buf; k++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", k ? "," : "", (long long)ix->v[k]);
    snprintf(buf + n, sizeof buf - n, "}");
    return ir_strdup(a, buf);
}

/* The instruction writing the output at index ix of c's root, following
 * the root's tuple instructions down (-1: a tuple, or an element no tuple
 * instruction names), and its leaf number depth first (output_<K>.npy;
 * -1 where ix names no array leaf). */
static int32_t output_writer(const IrComputation *c, const IrShapeIndex *ix, int64_t *leaf)
{
    const IrShape *s = &c->instr[c->root].shape;
    int32_t w = c->root;
    *leaf = 0;
    for (int32_t k = 0; k < ix->n; k++) {
        int64_t e = ix->v[k];
        if (s->type != IR_TUPLE || e < 0 || e >= s->ntuple) {
            *leaf = -1;
            return -1;
        }
        for (int64_t q = 0; q < e; q++)
            *leaf += ir_shape_leaf_count(&s->tuple[q]);
        const IrInstr *t = w >= 0 ? &c->instr[w] : NULL;
        w = t && t->op == OP_TUPLE && e < t->nopnd ? t->opnd[e] : -1;
        s = &s->tuple[e];
    }
    if (s->type == IR_TUPLE) {
        *leaf = -1;
        return -1;
    }
    return w;
}

/* Every input_output_alias pair of m's entry c, with the steps that make
 * it safe (e: estimated with the pairs' parameters donated, so a
 * parameter's end is its last read). */
static IrStatus donations(IrArena *a, const IrModule *m, const IrComputation *c, const MemEstimate *e,
                          PlanMemory *out)
{
    out->donations = ir_alloc_array(a, (size_t)(m->nalias > 0 ? m->nalias : 1), sizeof *out->donations);
    if (!out->donations)
        return IR_ENOMEM;
    int32_t *step = ir_alloc_array(a, (size_t)(c->ninstr > 0 ? c->ninstr : 1), sizeof *step);
    if (!step)
        return IR_ENOMEM;
    for (int32_t i = 0; i < c->ninstr; i++)
        step[i] = -1;
    for (int32_t s = 0; s < e->n; s++)
        step[e->order[s]] = s;
    const IrInstr *root = c->root >= 0 ? &c->instr[c->root] : NULL;
    for (int32_t k = 0; k < m->nalias; k++) {
        const IrAlias *al = &m->alias[k];
        PlanDonation *pd = &out->donations[out->ndonations++];
        *pd = (PlanDonation){.param = al->param_number, .output = -1, .read_step = -1, .write_step = -1,
                             .inferred = al->inferred, .from_donor = al->from_donor};
        if (al->param_index.n > 0 && !(pd->leaf = leaf_text(a, &al->param_index)))
            return IR_ENOMEM;
        int32_t pi = al->param_number >= 0 && al->param_number < c->nparam ? c->param[al->param_number] : -1;
        if (pi >= 0) {
            pd->param_name = c->instr[pi].name;
            /* the last reader: the latest step reading the parameter
             * (a leaf: reading its get-tuple-element, or the tuple whole) */
            for (int32_t s = e->n - 1; s >= 0 && !pd->last_read; s--) {
                const IrInstr *ins = &c->instr[e->order[s]];
                for (int32_t j = 0; j < ins->nopnd && !pd->last_read; j++)
                    if (al->param_index.n == 0 ? ins->opnd[j] == pi : reads_leaf(c, ins, ins->opnd[j], pi, al)) {
                        pd->last_read = ins->name;
                        pd->read_step = s;
                    }
            }
        }
        int32_t w = root ? output_writer(c, &al->output_index, &pd->output) : -1;
        if (w >= 0) {
            pd->written = c->instr[w].name;
            pd->write_step = step[w];
        }
    }
    return IR_OK;
}

/* The bound of what the pairs can save (PlanMemory.donated_bytes ..): D,
 * s0 and A over the donated estimate e (before s0 its live bytes are the
 * undonated ones: nothing donated is freed yet). */
static void donation_bound(const IrComputation *c, const MemEstimate *e, PlanMemory *out)
{
    out->first_read_step = out->held_before_step = -1;
    bool unread = false;
    for (int32_t k = 0; k < out->ndonations; k++) {
        const PlanDonation *pd = &out->donations[k];
        int32_t pi = pd->param >= 0 && pd->param < c->nparam ? c->param[pd->param] : -1;
        bool counted = false; /* a tuple with two leaves paired is handed over once */
        for (int32_t q = 0; q < k; q++)
            counted |= out->donations[q].param == pd->param;
        if (pi >= 0 && !counted)
            out->donated_bytes += e->own[pi];
        unread |= pi >= 0 && !pd->last_read;
        if (pd->last_read && (out->first_read_step < 0 || pd->read_step < out->first_read_step)) {
            out->first_read_step = pd->read_step;
            out->first_read_param = pd->param_name;
            out->first_read_instr = pd->last_read;
        }
    }
    if (unread) /* one is freed before step 0: no bound to explain */
        out->first_read_step = -1;
    int32_t s0 = out->first_read_step < 0 ? 0 : out->first_read_step;
    out->held_before_first_read = e->start_bytes;
    for (int32_t s = 0; s < s0; s++)
        if (e->live[s] > out->held_before_first_read) {
            out->held_before_first_read = e->live[s];
            out->held_before_step = s;
        }
    if (out->held_before_step >= 0)
        out->held_before_instr = out->step_instr[out->held_before_step];
}

void plan_donation_why(const PlanMemory *pm, char *buf, size_t n)
{
    buf[0] = 0;
    int64_t drop = pm->undonated_peak - pm->peak;
    if (pm->ndonations == 0 || pm->undonated_peak <= 0 || drop >= pm->donated_bytes)
        return;
    if (pm->first_read_step < 0)
        return;
    char held[200];
    if (pm->peak_step < pm->first_read_step)
        snprintf(held, sizeof held, "the donated peak itself falls before it (step %d, %s: %lld bytes)",
                 (int)pm->peak_step + 1, pm->peak_instr ? pm->peak_instr : "the parameters", (long long)pm->peak);
    else if (pm->held_before_step >= 0)
        snprintf(held, sizeof held, "a step before it (step %d, %s) holds %lld bytes already",
                 (int)pm->held_before_step + 1, pm->held_before_instr ? pm->held_before_instr : "?",
                 (long long)pm->held_before_first_read);
    else
        snprintf(held, sizeof held, "the parameters alone hold %lld bytes", (long long)pm->held_before_first_read);
    snprintf(buf, n,
             "of the %lld bytes donated at most %lld can come off (U - A): the run frees no donated buffer before "
             "step %d (%s), where the first donated parameter (%s) is last read, and %s",
             (long long)pm->donated_bytes, (long long)(pm->undonated_peak - pm->held_before_first_read),
             (int)pm->first_read_step + 1, pm->first_read_instr, pm->first_read_param ? pm->first_read_param : "?",
             held);
}

IrStatus plan_memory(IrArena *a, const IrModule *spmd, PlanMemory *out)
{
    memset(out, 0, sizeof *out);
    out->peak_step = -1;
    const IrComputation *c = ir_entry(spmd);
    if (!c)
        return IR_OK;
    /* The run hands the aliased parameters over (runtime/local.c). */
    bool *donated = ir_alloc_array(a, (size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *donated);
    if (!donated)
        return IR_ENOMEM;
    ir_alias_donated(spmd, donated, c->nparam);
    MemOptions o = {.donated = donated, .nparams = c->nparam};
    MemEstimate e;
    IrDiag d = {0};
    IrStatus st = mem_estimate(spmd, spmd->entry, &o, &e, &d);
    ir_diag_clear(&d);
    if (st != IR_OK) /* a module the executor refuses: it will say why when run */
        return st == IR_ENOMEM ? IR_ENOMEM : IR_OK;
    st = fill(a, c, &e, out);
    if (st == IR_OK)
        st = donations(a, spmd, c, &e, out);
    if (st == IR_OK)
        donation_bound(c, &e, out);
    mem_estimate_free(&e);
    if (st == IR_OK && out->ndonations > 0) {
        MemEstimate u;
        if ((st = mem_estimate(spmd, spmd->entry, NULL, &u, &d)) == IR_OK)
            out->undonated_peak = u.peak;
        ir_diag_clear(&d);
        mem_estimate_free(&u);
        st = st == IR_ENOMEM ? IR_ENOMEM : IR_OK;
    }
    return st;
}
