/*
 * exec.c: the reference executor. It interprets one computation on one
 * device: instructions run in a topological order (operands first; in a
 * module marked is_scheduled=true, the order its text lists them), each
 * result is kept by instruction index, and a value is released as soon as
 * its last user has run (a count of remaining uses per instruction). The
 * root's value is the result.
 *
 * Data kernels live in k_*.c and are reached through one switch
 * (run_instr). Handled here: parameter, tuple, get-tuple-element, call,
 * while, conditional, partition-id/replica-id, opt-barrier, domain,
 * after-all, add-dependency, rng-get-and-update-state, collectives and
 * their -start/-done pairs (through DevExecOptions.coll, else their
 * one-device meaning), the one-member collectives, and custom-calls
 * (tessel's own sharding markers, then DevExecOptions.custom). fusion,
 * async, copy-start, scan: k_control.c; infeed/outfeed/send/recv: k_host.c.
 *
 * The executor does not rely on the verifier having run: operand indices,
 * callee indices, cycles and the shapes of parameters and results are
 * checked as it goes, so a kernel can trust that each operand has the shape
 * its producing instruction declares.
 *
 * With a collective runtime that can run collectives in the background
 * (DevCollectives.start/.wait), the -start/-done pairs overlap: the order
 * is rescheduled (schedule.c) so that each -start runs early and each
 * -done late, a -start hands its collective over and leaves its value
 * pending, and the first instruction that reads the value waits for it
 * ("asynchronous pairs" below).
 *
 * An all-reduce whose one reader is an add (ir_allreduce_adds) runs with
 * the add taken in, where the collectives' runtime offers it
 * (DevCollectives.run_add) and fusion is on: the add leaves the order, the
 * all-reduce reads the add's other operand too and gives the add's value.
 *
 * Plans (execution order and use counts) are built once per computation
 * per dev_execute and cached, so dev_call, which kernels call per element
 * on their slow paths (reducers, comparators), costs little more than the
 * callee's instructions themselves.
 */
#include "device.h"
#include "fusion.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Nesting of call/while/conditional/dev_call before we call it runaway
 * recursion (a computation that calls itself). */
#define MAX_DEPTH 200

/* How one computation runs: the instructions to execute, operands first,
 * and how many times each instruction's value is used by them (the root
 * counts one more: its value is the result). Instructions inside a fusion
 * group are not in the order: the group runs at its root, and the root's
 * uses are the group's leaves (fusion.h). */
typedef struct CompOrder {
    int32_t n;
    int32_t *order;
    int32_t *uses;
    int32_t nasync;  /* -start instructions in the order (schedule.c) */
    DevFusion fusion;
    int32_t *fold;   /* per instruction: the add an all-reduce takes in
                      * (ir_allreduce_adds; the add is not in the order),
                      * else -1; NULL: none */
} CompOrder;

/* A -start whose collective is in flight (DevCollectives.start): its
 * value is made when its first user (usually the -done) runs. */
typedef struct Pending {
    void *handle;    /* NULL: nothing in flight */
    DevValue *el0;   /* element 0 of the async tuple; NULL for all-reduce-start */
} Pending;

/* The state of one rng-get-and-update-state instruction: XLA's CPU
 * backend keeps a 128-bit counter per instruction, starting at 0x7012395,
 * returns it as u64[2] (low, high) and adds delta. Here it starts afresh
 * with each run (dev_execute). */
typedef struct RngState {
    const IrInstr *ins;
    uint64_t lo, hi;
    struct RngState *next;
} RngState;

typedef struct Exec {
    const IrModule *m;
    const DevExecOptions *opt;
    IrDiag *d;
    CompOrder **orders; /* m->ncomp entries, built on demand */
    int32_t depth;
    RngState *rng;
    int32_t untimed;    /* > 0: inside a computation a kernel runs (dev_call): not timed */
} Exec;

/* The executor running on this thread, so that dev_call (which only gets
 * the kernel's arguments) finds the orders built so far. Nested dev_execute calls
 * save and restore it. */
static _Thread_local Exec *current;

static const DevExecOptions default_options;

/* ---- errors ---- */

static IrStatus instr_error(const Exec *x, const IrInstr *ins, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static IrStatus instr_error(const Exec *x, const IrInstr *ins, IrStatus st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char from[256];
    bool known = ir_instr_origin(x->m, ins, from, sizeof from);
    return ir_error(x->d, st, x->m->file, x->m->src, ins->pos, "%s: %s%s%s%s", ins->name, msg, known ? " (from " : "",
                    from, known ? ")" : "");
}

IrStatus dev_kernel_error(const DevKernelArgs *k, IrStatus st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char from[256];
    bool known = ir_instr_origin(k->m, k->ins, from, sizeof from);
    return ir_error(k->d, st, k->m->file, k->m->src, k->ins->pos, "%s: %s%s%s%s", k->ins->name, msg,
                    known ? " (from " : "", from, known ? ")" : "");
}

IrStatus dev_kernel_oom(const DevKernelArgs *k, const char *what)
{
    return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", what ? what : ir_op_name(k->ins->op));
}

/* Make sure a failing status has a diagnostic (kernels may return
 * IR_ENOMEM without recording one). */
static IrStatus ensure_diag(const Exec *x, const IrInstr *ins, IrStatus st)
{
    if (st != IR_OK && x->d && x->d->status == IR_OK) {
        if (st == IR_ENOMEM)
            return instr_error(x, ins, st, "out of memory");
        return instr_error(x, ins, st, "%s failed", ir_op_name(ins->op));
    }
    return st;
}

/* ---- shapes ---- */

/* Type and dims (tuples recursively); layouts do not matter at run time. */
static bool shape_matches(const IrShape *a, const IrShape *b)
{
    return ir_shape_equal(a, b);
}

static IrStatus shape_mismatch(const Exec *x, const IrInstr *ins, const char *what,
                               const IrShape *got, const IrShape *want)
{
    char *g = ir_shape_str(got, false), *w = ir_shape_str(want, false);
    IrStatus st = instr_error(x, ins, IR_EINPUT, "%s has shape %s, expected %s", what,
                              g ? g : "?", w ? w : "?");
    ts_free(g);
    ts_free(w);
    return st;
}

/* ---- each computation's order ---- */

static void comp_order_free(CompOrder *p)
{
    if (p) {
        ts_free(p->order);
        ts_free(p->uses);
        ts_free(p->fold);
        ir_fusion_free(&p->fusion);
        ts_free(p);
    }
}

/* The order (ir_exec_order_of: post-order from the side effects, then the
 * root; a scheduled module's own), its failures worded as the executor's. */
static IrStatus exec_order(const Exec *x, const IrComputation *c, CompOrder *p)
{
    IrExecOrderError e;
    IrStatus st = ir_exec_order_of(x->m, c, p->order, &p->n, &e);
    if (st != IR_EINPUT)
        return st;
    const IrInstr *ins = &c->instr[e.at];
    if (e.other < 0)
        return instr_error(x, ins, IR_EINPUT, "operand %d is not an instruction of %s", e.k, c->name);
    return instr_error(x, ins, IR_EINPUT, "cycle through %s", c->instr[e.other].name);
}

/* The operand of add `a` that is not all-reduce ar: what ar adds in. */
static int32_t fold_addend(const IrComputation *c, int32_t a, int32_t ar)
{
    const IrInstr *y = &c->instr[a];
    return y->opnd[0] == ar ? y->opnd[1] : y->opnd[0];
}

/* Operand references among the ordered instructions; a fusion group's
 * root reads the group's leaves, an all-reduce taking its add in reads
 * the add's other operand too. */
static void count_uses(const IrComputation *c, CompOrder *p)
{
    const DevFusion *f = &p->fusion;
    memset(p->uses, 0, (size_t)c->ninstr * sizeof *p->uses);
    for (int32_t k = 0; k < p->n; k++) {
        int32_t i = p->order[k];
        const IrInstr *ins = &c->instr[i];
        if (f->group_of && f->group_of[i] >= 0) {
            const DevFusionGroup *g = &f->groups[f->group_of[i]];
            for (int32_t l = 0; l < g->nleaves; l++)
                p->uses[g->leaves[l]] += g->leaf_refs[l];
            continue;
        }
        for (int32_t j = 0; j < ins->nopnd; j++)
            p->uses[ins->opnd[j]]++;
        if (p->fold && p->fold[i] >= 0)
            p->uses[fold_addend(c, p->fold[i], i)]++;
    }
    p->uses[c->root]++;
}

/* Drop the groups' interior instructions from the order (they run inside
 * their root's loop) and count uses again. */
static void fuse_order(const IrComputation *c, CompOrder *p)
{
    const DevFusion *f = &p->fusion;
    int32_t n = 0;
    for (int32_t k = 0; k < p->n; k++) {
        int32_t i = p->order[k], g = f->group_of[i];
        if (g < 0 || f->groups[g].root == i)
            p->order[n++] = i;
    }
    p->n = n;
    count_uses(c, p);
}

/* The all-reduces that take in the add reading their result, where the
 * collectives' runtime can (DevCollectives.run_add) and fusion is on:
 * the adds leave the order, and the uses are counted again. */
static IrStatus fold_adds(const Exec *x, const IrComputation *c, CompOrder *p)
{
    if (x->opt->no_fusion || !x->opt->coll || !x->opt->coll->run_add)
        return IR_OK;
    if (!(p->fold = ts_malloc((size_t)c->ninstr * sizeof *p->fold)))
        return IR_ENOMEM;
    if (ir_allreduce_adds(x->m, c, p->order, p->n, p->fusion.group_of, p->fold) == 0) {
        ts_free(p->fold);
        p->fold = NULL;
        return IR_OK;
    }
    bool *gone = ts_calloc((size_t)c->ninstr, sizeof *gone);
    if (!gone)
        return IR_ENOMEM;
    for (int32_t i = 0; i < c->ninstr; i++)
        if (p->fold[i] >= 0)
            gone[p->fold[i]] = true;
    int32_t n = 0;
    for (int32_t k = 0; k < p->n; k++)
        if (!gone[p->order[k]])
            p->order[n++] = p->order[k];
    p->n = n;
    ts_free(gone);
    count_uses(c, p);
    return IR_OK;
}

static IrStatus comp_order_build(const Exec *x, const IrComputation *c, CompOrder **out)
{
    int32_t n = c->ninstr;
    if (c->root < 0 || c->root >= n)
        return ir_error(x->d, IR_EINPUT, x->m->file, x->m->src, c->pos,
                        "computation %s has no root", c->name);
    CompOrder *p = ts_calloc(1, sizeof *p);
    IrStatus st = IR_ENOMEM;
    if (!p || !(p->order = ts_malloc((size_t)n * sizeof *p->order)) ||
        !(p->uses = ts_calloc((size_t)n, sizeof *p->uses)))
        goto done;
    if ((st = exec_order(x, c, p)) != IR_OK)
        goto done;
    for (int32_t k = 0; k < p->n; k++)
        p->nasync += ir_async_start_op(c->instr[p->order[k]].op);
    /* Overlap only where the collectives can run asynchronously, and
     * never against the order a scheduled module fixes. */
    if (p->nasync > 0 && !x->m->is_scheduled && x->opt->coll && x->opt->coll->start && x->opt->coll->wait &&
        (st = ir_schedule_overlap(c, p->order, p->n)) != IR_OK)
        goto done;
    count_uses(c, p);
    if ((st = dev_fusion_find(x->m, c, p->order, p->n, x->opt, &p->fusion, x->d)) != IR_OK)
        goto done;
    if (p->fusion.ngroups > 0)
        fuse_order(c, p);
    st = fold_adds(x, c, p);
done:
    if (st != IR_OK) {
        comp_order_free(p);
        return st == IR_ENOMEM ? ir_error(x->d, st, NULL, NULL, (IrPos){0, 0}, "out of memory") : st;
    }
    *out = p;
    return IR_OK;
}

static IrStatus comp_order_get(Exec *x, int32_t comp, const CompOrder **out)
{
    if (!x->orders) {
        x->orders = ts_calloc((size_t)x->m->ncomp, sizeof *x->orders);
        if (!x->orders)
            return ir_oom(x->d, NULL);
    }
    if (!x->orders[comp]) {
        IrStatus st = comp_order_build(x, x->m->comp[comp], &x->orders[comp]);
        if (st != IR_OK)
            return st;
    }
    *out = x->orders[comp];
    return IR_OK;
}

static void exec_release(Exec *x)
{
    while (x->rng) {
        RngState *n = x->rng->next;
        ts_free(x->rng);
        x->rng = n;
    }
    if (x->orders)
        for (int32_t i = 0; i < x->m->ncomp; i++)
            comp_order_free(x->orders[i]);
    ts_free(x->orders);
    x->orders = NULL;
}

/* ---- running a computation ---- */

static IrStatus run_comp(Exec *x, int32_t comp, int32_t nargs, DevValue **args, bool consume,
                         const bool *donated, DevValue **out);

/* Check a callee index given by `ins` and run it. With `consume` the
 * callee takes the references in args (see run_comp); donated[k] (NULL:
 * none) the same for argument k alone. */
static IrStatus run_callee_donating(Exec *x, const IrInstr *ins, int32_t which, int32_t nargs, DevValue **args,
                                    bool consume, const bool *donated, DevValue **out)
{
    IrStatus st = IR_OK;
    if (which >= ins->ncalled || ins->called[which] < 0 || ins->called[which] >= x->m->ncomp)
        st = instr_error(x, ins, IR_EINPUT, "missing called computation %d", which);
    else if (x->depth >= MAX_DEPTH)
        st = instr_error(x, ins, IR_EINPUT, "computations nest deeper than %d (recursion?)",
                         MAX_DEPTH);
    if (st != IR_OK) {
        for (int32_t i = 0; i < nargs; i++)
            if (consume || (donated && donated[i]))
                dev_value_unref(args[i]);
        return st;
    }
    x->depth++;
    st = run_comp(x, ins->called[which], nargs, args, consume, donated, out);
    x->depth--;
    return st;
}

static IrStatus run_callee(Exec *x, const IrInstr *ins, int32_t which, int32_t nargs,
                           DevValue **args, bool consume, DevValue **out)
{
    return run_callee_donating(x, ins, which, nargs, args, consume, NULL, out);
}

/* A scalar of type t from an int64. */
static IrStatus scalar_value(IrType t, int64_t v, DevValue **out)
{
    IrShape s = {.type = t};
    DevValue *r = dev_value_new(&s);
    if (!r)
        return IR_ENOMEM;
    dev_store_i64(t, r->data, 0, v);
    *out = r;
    return IR_OK;
}

/* Read a predicate or an integer scalar. */
static bool scalar_int(const DevValue *v, int64_t *out)
{
    if (v->shape.type == IR_TUPLE || v->shape.rank != 0 ||
        !(v->shape.type == IR_PRED || ir_type_is_int(v->shape.type)))
        return false;
    *out = dev_load_i64(v->shape.type, v->data, 0);
    return true;
}

/* while: state = init; while (cond(state)) state = body(state). The body
 * takes the state over (its parameter is then the only owner of the
 * tuple), so once the body has read the elements out, they have one owner
 * and a dynamic-update-slice on them works in place: a scan filling a
 * buffer costs O(N), not O(N^2). `state` is a reference run_while owns:
 * at the operand's last use it is the caller's own (run_one), so the
 * first iteration too works in place and the initial state is not held
 * beside the loop's (partition/memory.c's while_body_extra). */
static IrStatus run_while(Exec *x, const IrInstr *ins, DevValue *state, DevValue **out)
{
    int64_t max = x->opt->max_while_iterations;
    IrStatus st = IR_OK;
    for (int64_t it = 0;; it++) {
        DevValue *c = NULL;
        if ((st = run_callee(x, ins, 0, 1, &state, false, &c)) != IR_OK)
            break;
        int64_t go = 0;
        bool ok = c->shape.type == IR_PRED && scalar_int(c, &go);
        dev_value_unref(c);
        if (!ok) {
            st = instr_error(x, ins, IR_EINPUT, "condition does not return pred[]");
            break;
        }
        if (!go)
            break;
        if (max > 0 && it >= max) {
            st = instr_error(x, ins, IR_ERUNTIME, "while loop exceeded %lld iterations (--limit trips=%lld)",
                             (long long)max, (long long)max);
            break;
        }
        DevValue *next = NULL, *arg[1] = {state};
        state = NULL;
        if ((st = run_callee(x, ins, 1, 1, arg, true, &next)) != IR_OK)
            break;
        state = next;
    }
    if (st != IR_OK) {
        dev_value_unref(state);
        return st;
    }
    *out = state;
    return IR_OK;
}

/* conditional: pred form runs branch 0 when true, branch 1 when false; the
 * indexed form runs branch `index`, and the last branch when the index is
 * out of range (XLA). Branch b gets operand 1 + b. */
static IrStatus run_conditional(Exec *x, const IrInstr *ins, DevValue **opnd, DevValue **out)
{
    int64_t sel = 0;
    int32_t nb = ins->ncalled;
    if (!scalar_int(opnd[0], &sel) || (opnd[0]->shape.type != IR_PRED &&
                                       opnd[0]->shape.type != IR_S32))
        return instr_error(x, ins, IR_EINPUT, "branch selector must be pred[] or s32[]");
    if (nb < 1 || ins->nopnd != nb + 1)
        return instr_error(x, ins, IR_EINPUT, "%d branches but %d branch operands", nb,
                           ins->nopnd - 1);
    int32_t b;
    if (opnd[0]->shape.type == IR_PRED) {
        if (nb != 2)
            return instr_error(x, ins, IR_EINPUT, "a pred selector needs 2 branches, not %d", nb);
        b = sel ? 0 : 1;
    } else {
        b = (sel < 0 || sel >= nb) ? nb - 1 : (int32_t)sel;
    }
    return run_callee(x, ins, b, 1, &opnd[1 + b], false, out);
}

/* A tuple of references to the operands (multi-operand collectives on one
 * device), or the operand itself. */
static IrStatus identity_result(const Exec *x, const IrInstr *ins, int32_t n, DevValue **opnd,
                                DevValue **out)
{
    if (ins->shape.type != IR_TUPLE || n == 1) {
        if (n < 1)
            return instr_error(x, ins, IR_EINPUT, "needs an operand");
        *out = dev_value_ref(opnd[0]);
        return IR_OK;
    }
    DevValue *stack[16];
    DevValue **el = n <= 16 ? stack : ts_malloc((size_t)n * sizeof *el);
    if (!el)
        return IR_ENOMEM;
    for (int32_t i = 0; i < n; i++)
        el[i] = dev_value_ref(opnd[i]);
    *out = dev_value_tuple(&ins->shape, n, el);
    if (el != stack)
        ts_free(el);
    return *out ? IR_OK : IR_ENOMEM;
}

/* One device, no collective runtime: every collective over a group of one
 * is the identity. collective-permute: a self pair copies, no pair that
 * targets this device gives zeros. */
static IrStatus run_collective_alone(const Exec *x, const IrInstr *ins, int32_t n,
                                     DevValue **opnd, DevValue **out)
{
    if (ins->op == OP_COLLECTIVE_PERMUTE) {
        int64_t me = ins->a.channel_id ? x->opt->partition_id : x->opt->replica_id;
        const IrI64List *p = &ins->a.x->source_target_pairs;
        for (int32_t i = 0; i + 1 < p->n; i += 2) {
            if (p->v[i + 1] != me)
                continue;
            if (p->v[i] == me)
                return identity_result(x, ins, n, opnd, out);
            return instr_error(x, ins, IR_EUNSUPPORTED,
                               "receives from device %lld, but runs on one device without "
                               "collectives", (long long)p->v[i]);
        }
        if (ins->shape.type == IR_TUPLE)
            return instr_error(x, ins, IR_EUNSUPPORTED, "tuple collective-permute");
        *out = dev_value_new(&ins->shape);
        return *out ? IR_OK : IR_ENOMEM;
    }
    /* Explicit groups of several devices (SPMD code written by hand, as in
     * a manual region) exchange data between devices that one device alone
     * does not have: refused, never run as an identity that would give
     * another answer than the devices would. */
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    for (int32_t i = 0; g->present && i < g->ngroups; i++)
        if (g->group_size[i] > 1)
            return instr_error(x, ins, IR_EUNSUPPORTED,
                               "%s over more than one device (replica group %d has %d members) "
                               "exchanges data between devices: it runs on its devices (partitioned, "
                               "or replayed with --spmd), not on one", ir_op_name(ins->op), (int)i,
                               (int)g->group_size[i]);
    /* Identity only where each result has its operand's shape: a group
     * of one. (A tuple result has one element per operand.) */
    bool same = ins->shape.type == IR_TUPLE && n != 1
                    ? ins->shape.ntuple == n
                    : n == 1 && shape_matches(&opnd[0]->shape, &ins->shape);
    for (int32_t i = 0; same && ins->shape.type == IR_TUPLE && n != 1 && i < n; i++)
        same = shape_matches(&opnd[i]->shape, &ins->shape.tuple[i]);
    if (!same)
        return instr_error(x, ins, IR_EUNSUPPORTED,
                           "%s over more than one device needs a collective runtime",
                           ir_op_name(ins->op));
    return identity_result(x, ins, n, opnd, out);
}

/* The base collective of a -start op, as the collectives hook knows it:
 * all-reduce-start has the all-reduce's shape; all-gather-start and
 * collective-permute-start are (operands, result, context...), whose
 * element 1 is the base op's result. */
static IrStatus start_base(const Exec *x, const IrInstr *ins, IrInstr *base)
{
    *base = *ins;
    base->op = ins->op == OP_ALL_REDUCE_START ? OP_ALL_REDUCE
               : ins->op == OP_ALL_GATHER_START ? OP_ALL_GATHER : OP_COLLECTIVE_PERMUTE;
    if (ins->op != OP_ALL_REDUCE_START) {
        if (ins->shape.type != IR_TUPLE || ins->shape.ntuple < 2)
            return instr_error(x, ins, IR_EINPUT, "%s must have the shape (operands, result, "
                               "...)", ir_op_name(ins->op));
        base->shape = ins->shape.tuple[1];
    }
    return IR_OK;
}

static IrStatus run_collective_start(const Exec *x, const DevKernelArgs *k, DevValue **out)
{
    const IrInstr *ins = k->ins;
    IrInstr base;
    IrStatus st = start_base(x, ins, &base);
    if (st != IR_OK)
        return st;
    DevValue *r = NULL;
    if (x->opt->coll && x->opt->coll->run)
        st = x->opt->coll->run(x->opt->coll->ctx, x->m, &base, k->nopnd, k->opnd, &r, x->d);
    else
        st = run_collective_alone(x, &base, k->nopnd, k->opnd, &r);
    if (st != IR_OK || ins->op == OP_ALL_REDUCE_START) {
        *out = r;
        return st;
    }
    return dev_async_tuple(k, r, out);
}

/* collective-broadcast, collective-reduce, ragged-all-to-all without a
 * collective runtime (the reference): only where every group has one
 * member (the device itself), where they are the identity
 * (ragged-all-to-all: its self-exchange). Over several devices the
 * runtime's collectives run them (runtime/coll.c). */
static bool one_member_groups(const Exec *x, const IrInstr *ins)
{
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if (!g->present || g->ngroups == 0)
        return !x->opt->coll; /* all devices: one only when running alone */
    for (int32_t i = 0; i < g->ngroups; i++)
        if (g->group_size[i] != 1)
            return false;
    return true;
}

static IrStatus run_one_member_collective(const Exec *x, const DevKernelArgs *k, DevValue **out)
{
    const IrInstr *ins = k->ins;
    if (!one_member_groups(x, ins))
        return instr_error(x, ins, IR_EUNSUPPORTED, "%s over groups of more than one device is "
                           "not supported yet (groups of one member run)", ir_op_name(ins->op));
    if (ins->op == OP_RAGGED_ALL_TO_ALL)
        return dev_k_ragged_all_to_all_self(k, out);
    return identity_result(x, ins, k->nopnd, k->opnd, out);
}

/* rng-get-and-update-state: u64[2] (low, high) of this instruction's
 * counter, then counter += delta (see RngState). */
static IrStatus rng_get_and_update_state(Exec *x, const IrInstr *ins, DevValue **out)
{
    RngState *s = x->rng;
    while (s && s->ins != ins)
        s = s->next;
    if (!s) {
        if (!(s = ts_calloc(1, sizeof *s)))
            return IR_ENOMEM;
        *s = (RngState){ins, 0x7012395u, 0, x->rng};
        x->rng = s;
    }
    if (ins->shape.type != IR_U64 || ins->shape.rank != 1 || ins->shape.dims[0] != 2)
        return instr_error(x, ins, IR_EINPUT, "rng-get-and-update-state must be u64[2]");
    DevValue *r = dev_value_new(&ins->shape);
    if (!r)
        return IR_ENOMEM;
    uint64_t *v = (uint64_t *)(void *)r->data;
    v[0] = s->lo;
    v[1] = s->hi;
    uint64_t d = (uint64_t)ins->a.x->rng_delta, lo = s->lo + d;
    /* 128-bit add of a sign-extended int64 delta */
    s->hi += (ins->a.x->rng_delta < 0 ? UINT64_MAX : 0) + (lo < s->lo);
    s->lo = lo;
    *out = r;
    return IR_OK;
}

static IrStatus run_custom_call(const Exec *x, const IrInstr *ins, int32_t n, DevValue **opnd,
                                DevValue **out)
{
    const char *t = ins->a.x->custom_call_target ? ins->a.x->custom_call_target : "";
    /* The executor's own targets (k_markers.c's registry) first. */
    if (dev_builtin_target(t))
        return dev_k_builtin_custom_call(&(DevKernelArgs){x->m, NULL, ins, n, opnd, x->opt, x->d}, out);
    if (x->opt->custom && x->opt->custom->call) {
        IrStatus before = x->d ? x->d->status : IR_OK;
        IrStatus st = x->opt->custom->call(x->opt->custom->ctx, x->m, ins, n, opnd, out, x->d);
        if (st != IR_EUNSUPPORTED || (x->d && x->d->status != before))
            return st;
    }
    return instr_error(x, ins, IR_EUNSUPPORTED, "unknown custom-call target %s", t);
}

static IrStatus get_tuple_element(const Exec *x, const IrInstr *ins, DevValue *t, DevValue **out)
{
    int64_t i = ins->a.tuple_index;
    if (t->shape.type != IR_TUPLE || i < 0 || i >= t->nelems)
        return instr_error(x, ins, IR_EINPUT, "index %lld out of range of its operand",
                           (long long)i);
    *out = dev_value_ref(t->elems[i]);
    return IR_OK;
}

static IrStatus make_tuple(const Exec *x, const IrInstr *ins, int32_t n, DevValue **opnd,
                           DevValue **out)
{
    if (ins->shape.type != IR_TUPLE)
        return instr_error(x, ins, IR_EINPUT, "tuple has a non-tuple shape");
    DevValue *stack[16];
    DevValue **el = n <= 16 ? stack : ts_malloc((size_t)n * sizeof *el);
    if (!el)
        return IR_ENOMEM;
    for (int32_t i = 0; i < n; i++)
        el[i] = dev_value_ref(opnd[i]);
    *out = dev_value_tuple(&ins->shape, n, el);
    if (el != stack)
        ts_free(el);
    return *out ? IR_OK : IR_ENOMEM;
}

/* get-dimension-size: the run-time size of a bounded dynamic dimension
 * (DevValue.sizes, set by set-dimension-size), else the declared size. */
static IrStatus get_dimension_size(const Exec *x, const IrInstr *ins, DevValue *v, DevValue **out)
{
    int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : -1;
    if (v->shape.type == IR_TUPLE || dim < 0 || dim >= v->shape.rank)
        return instr_error(x, ins, IR_EINPUT, "dimension %lld out of range", (long long)dim);
    return scalar_value(IR_S32, dev_value_dim_size(v, (int32_t)dim), out);
}

/* partition-id / replica-id: u32[] in XLA; other integer scalars (XLA's
 * own tests write s32[]) get the same number. */
static IrStatus device_id(const Exec *x, const IrInstr *ins, DevValue **out)
{
    if (ins->shape.type == IR_TUPLE || ins->shape.rank != 0 || !ir_type_is_int(ins->shape.type))
        return instr_error(x, ins, IR_EINPUT, "%s must be an integer scalar",
                           ir_op_name(ins->op));
    return scalar_value(ins->shape.type, ins->op == OP_PARTITION_ID ? x->opt->partition_id
                                                                   : x->opt->replica_id, out);
}

/* The one switch over opcodes. */
static IrStatus run_instr(Exec *x, const IrComputation *c, const IrInstr *ins, DevValue **opnd,
                          DevValue **out)
{
    DevKernelArgs k = {x->m, c, ins, ins->nopnd, opnd, x->opt, x->d};
    int32_t n = ins->nopnd;
    switch (ins->op) {
    case OP_TUPLE: return make_tuple(x, ins, n, opnd, out);
    case OP_GET_TUPLE_ELEMENT: return get_tuple_element(x, ins, opnd[0], out);
    case OP_CALL:
        if (x->opt->cluster_calls && ir_frontend_attr(ins, "_tessel_cluster")) {
            IrStatus st = x->opt->cluster_calls->call(x->opt->cluster_calls->ctx, x->m, ins, n, opnd, out, x->d);
            if (st != IR_EUNSUPPORTED || x->d->status != IR_OK)
                return st;
        }
        return run_callee(x, ins, 0, n, opnd, false, out);
    case OP_WHILE: return run_while(x, ins, dev_value_ref(opnd[0]), out);
    case OP_CONDITIONAL: return n < 1 ? instr_error(x, ins, IR_EINPUT, "needs a selector")
                                      : run_conditional(x, ins, opnd, out);
    case OP_PARTITION_ID:
    case OP_REPLICA_ID: return device_id(x, ins, out);
    case OP_OPTIMIZATION_BARRIER:
    case OP_DOMAIN:
    case OP_ASYNC_UPDATE:
    case OP_ALL_REDUCE_DONE:
    case OP_ADD_DEPENDENCY:
        if (n < 1)
            return instr_error(x, ins, IR_EINPUT, "needs an operand");
        *out = dev_value_ref(opnd[0]);
        return IR_OK;
    case OP_AFTER_ALL: {
        IrShape tok = {.type = IR_TOKEN};
        *out = dev_value_new(&tok);
        return *out ? IR_OK : IR_ENOMEM;
    }
    case OP_GET_DIMENSION_SIZE: return get_dimension_size(x, ins, opnd[0], out);
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER:
    case OP_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE:
        if (x->opt->coll && x->opt->coll->run)
            return x->opt->coll->run(x->opt->coll->ctx, x->m, ins, n, opnd, out, x->d);
        return run_collective_alone(x, ins, n, opnd, out);
    case OP_ALL_REDUCE_START:
    case OP_ALL_GATHER_START:
    case OP_COLLECTIVE_PERMUTE_START: return run_collective_start(x, &k, out);
    case OP_ALL_GATHER_DONE:
    case OP_COLLECTIVE_PERMUTE_DONE:
    case OP_ASYNC_DONE: return dev_k_tuple_part(&k, 1, out);
    case OP_COLLECTIVE_BROADCAST:
    case OP_COLLECTIVE_REDUCE:
    case OP_RAGGED_ALL_TO_ALL:
        if (x->opt->coll && x->opt->coll->run)
            return x->opt->coll->run(x->opt->coll->ctx, x->m, ins, n, opnd, out, x->d);
        return run_one_member_collective(x, &k, out);
    case OP_RNG_GET_AND_UPDATE_STATE: return rng_get_and_update_state(x, ins, out);
    case OP_FUSION: return dev_k_fusion(&k, out);
    case OP_ASYNC_START: return dev_k_async_start(&k, out);
    case OP_COPY_START: return dev_k_copy_start(&k, out);
    case OP_COPY_DONE: return dev_k_tuple_part(&k, 0, out);
    case OP_SCAN: return dev_k_scan(&k, out);
    case OP_SET_DIMENSION_SIZE: return dev_k_set_dimension_size(&k, out);
    case OP_DYNAMIC_RESHAPE: return dev_k_dynamic_reshape(&k, out);
    case OP_SEND:
    case OP_SEND_DONE:
    case OP_RECV:
    case OP_RECV_DONE:
        if (!ins->a.x->is_host_transfer && x->opt->coll && x->opt->coll->p2p)
            return x->opt->coll->p2p(x->opt->coll->ctx, x->m, ins, n, opnd, out, x->d);
        return dev_k_host_transfer(&k, out);
    case OP_INFEED:
    case OP_OUTFEED: return dev_k_host_transfer(&k, out);
    case OP_CUSTOM_CALL: return run_custom_call(x, ins, n, opnd, out);
    case OP_BITCAST_CONVERT: return dev_k_bitcast_convert(&k, out);
    case OP_MAP: return dev_k_map(&k, out);
    case OP_CONSTANT: return dev_k_constant(&k, out);
    case OP_IOTA: return dev_k_iota(&k, out);
    case OP_BROADCAST: return dev_k_broadcast(&k, out);
    case OP_RESHAPE: case OP_BITCAST: return dev_k_reshape(&k, out);
    case OP_TRANSPOSE: return dev_k_transpose(&k, out);
    case OP_SLICE: return dev_k_slice(&k, out);
    case OP_DYNAMIC_SLICE: return dev_k_dynamic_slice(&k, out);
    case OP_DYNAMIC_UPDATE_SLICE: return dev_k_dynamic_update_slice(&k, out);
    case OP_PAD: return dev_k_pad(&k, out);
    case OP_CONCATENATE: return dev_k_concatenate(&k, out);
    case OP_REVERSE: return dev_k_reverse(&k, out);
    case OP_GATHER: return dev_k_gather(&k, out);
    case OP_SCATTER: return dev_k_scatter(&k, out);
    case OP_SORT: return dev_k_sort(&k, out);
    case OP_DOT: return dev_k_dot(&k, out);
    case OP_CONVOLUTION: return dev_k_convolution(&k, out);
    case OP_REDUCE: return dev_k_reduce(&k, out);
    case OP_REDUCE_WINDOW: return dev_k_reduce_window(&k, out);
    case OP_SELECT_AND_SCATTER: return dev_k_select_and_scatter(&k, out);
    case OP_FFT: return dev_k_fft(&k, out);
    case OP_CHOLESKY: return dev_k_cholesky(&k, out);
    case OP_TRIANGULAR_SOLVE: return dev_k_triangular_solve(&k, out);
    case OP_BATCH_NORM_TRAINING: return dev_k_batch_norm_training(&k, out);
    case OP_BATCH_NORM_INFERENCE: return dev_k_batch_norm_inference(&k, out);
    case OP_BATCH_NORM_GRAD: return dev_k_batch_norm_grad(&k, out);
    case OP_TOPK: return dev_k_topk(&k, out);
    case OP_RAGGED_DOT: return dev_k_ragged_dot(&k, out);
    case OP_SCALED_DOT: return dev_k_scaled_dot(&k, out);
    case OP_RNG_BIT_GENERATOR: return dev_k_rng_bit_generator(&k, out);
    case OP_RNG: return dev_k_rng(&k, out);
    case OP_STOCHASTIC_CONVERT: return dev_k_stochastic_convert(&k, out);
    default:
        if (ir_op_is_elementwise(ins->op))
            return dev_k_elementwise(&k, out);
        return instr_error(x, ins, IR_EUNSUPPORTED, "%s is not supported by the CPU backend",
                           ir_op_name(ins->op));
    }
}

/* The value of a parameter instruction, checked against its declaration.
 * With `consume` the argument's reference moves into the slot. */
static IrStatus bind_parameter(const Exec *x, const IrInstr *ins, int32_t nargs, DevValue **args,
                               bool consume, DevValue **out)
{
    int64_t pn = ins->a.parameter_number;
    if (pn < 0 || pn >= nargs || !args[pn])
        return instr_error(x, ins, IR_EINPUT, "parameter(%lld) not given (%d arguments)",
                           (long long)pn, nargs);
    if (!shape_matches(&args[pn]->shape, &ins->shape)) {
        char what[48];
        snprintf(what, sizeof what, "argument %lld", (long long)pn);
        return shape_mismatch(x, ins, what, &args[pn]->shape, &ins->shape);
    }
    *out = consume ? args[pn] : dev_value_ref(args[pn]);
    if (consume)
        args[pn] = NULL;
    return IR_OK;
}

/* Reshape and bitcast of a value used for the last time by its only owner
 * reuse its buffer (no copy). Returns false when it does not apply. */
static bool try_reshape_in_place(const IrInstr *ins, DevValue **vals, int32_t *rem,
                                 DevValue **out)
{
    if ((ins->op != OP_RESHAPE && ins->op != OP_BITCAST) || ins->nopnd != 1)
        return false;
    int32_t o = ins->opnd[0];
    DevValue *v = vals[o];
    if (rem[o] != 1 || !dev_value_sole(v) || v->shape.type == IR_TUPLE || ins->shape.type == IR_TUPLE)
        return false;
    /* A bitcast between different layouts permutes; leave it to the kernel. */
    if (ins->op == OP_BITCAST && (v->shape.has_layout || ins->shape.has_layout))
        return false;
    if (v->shape.type != ins->shape.type ||
        ir_shape_elements(&v->shape) != ir_shape_elements(&ins->shape))
        return false;
    *out = dev_value_reshaped(v, &ins->shape);
    vals[o] = NULL;
    rem[o] = 0;
    return true;
}

/* A lone elementwise op (a fusion group's root lends itself a dying
 * leaf: fusion.c's in_place_leaf) of IR_FUSION_MIN_ELEMENTS or more
 * elements, at the last use of an operand of its result's dims and bytes
 * that nobody else holds (not a parameter the caller keeps, not an
 * output, not another device's or value's too), writes its result over
 * that operand's buffer, as XLA's buffer assignment lets an elementwise
 * op share a dying operand's buffer: the two never coexist (a tanh
 * between two dots holds one activation, not two). partition/memory.c's
 * estimate models the same rule (lone_lends). The operand's index in
 * ins, or -1. */
static int32_t elementwise_in_place(const IrInstr *ins, DevValue **vals, const int32_t *rem)
{
    if (!ir_op_is_elementwise(ins->op) || ins->op == OP_COPY || ins->op == OP_MAP || ins->nopnd > 3 ||
        !ir_shape_is_array(&ins->shape))
        return -1;
    int64_t nbytes = ir_shape_bytes(&ins->shape);
    if (ir_shape_elements(&ins->shape) < IR_FUSION_MIN_ELEMENTS) /* as groups: small ones save nothing */
        return -1;
    for (int32_t j = 0; j < ins->nopnd && nbytes > 0; j++) {
        int32_t o = ins->opnd[j], reads = 0;
        for (int32_t q = 0; q < ins->nopnd; q++)
            reads += ins->opnd[q] == o;
        const DevValue *v = vals[o];
        if (v && rem[o] == reads && v->shape.type != IR_TUPLE && v->nbytes == nbytes &&
            ir_shape_same_dims(&v->shape, &ins->shape) && dev_value_sole(v))
            return j;
    }
    return -1;
}

/* Run ins over operand j's buffer (elementwise_in_place), which becomes
 * the result: the executor's reference moves to it. */
static IrStatus run_elementwise_over(const Exec *x, const IrComputation *c, const IrInstr *ins, int32_t j,
                                     DevValue **vals, int32_t *rem, DevValue **out)
{
    DevValue *opnd[3];
    for (int32_t q = 0; q < ins->nopnd; q++)
        opnd[q] = vals[ins->opnd[q]];
    DevKernelArgs k = {x->m, c, ins, ins->nopnd, opnd, x->opt, x->d};
    IrStatus st = dev_k_elementwise_over(&k, j);
    if (st != IR_OK)
        return st;
    int32_t o = ins->opnd[j];
    *out = dev_value_reshaped(vals[o], &ins->shape);
    vals[o] = NULL;
    rem[o] = 0;
    return *out ? IR_OK : IR_ENOMEM;
}

/* Kernels may update an operand in place when they hold its only
 * reference (refs == 1). That must mean "this is its last use", so an
 * operand that is used again later is pinned with an extra reference for
 * the duration of the call. */
static void pin_live_operands(const IrInstr *ins, DevValue **opnd, const int32_t *rem, bool pin)
{
    for (int32_t j = 0; j < ins->nopnd; j++)
        if (rem[ins->opnd[j]] != 1) {
            if (pin)
                dev_value_ref(opnd[j]);
            else
                dev_value_unref(opnd[j]);
        }
}

/* A fusion group at its root: run it, then release the leaves whose last
 * use it was (fusion may have taken one over for its result). */
static IrStatus run_group(Exec *x, const IrComputation *c, const DevFusionGroup *g, DevValue **vals,
                          int32_t *rem)
{
    DevValue *r = NULL;
    IrStatus st = dev_fusion_run(x->m, c, g, x->opt, x->d, vals, rem, &r);
    if (st != IR_OK)
        return ensure_diag(x, &c->instr[g->root], st);
    vals[g->root] = r;
    for (int32_t l = 0; l < g->nleaves; l++) {
        int32_t o = g->leaves[l];
        if (rem[o] > 0 && (rem[o] -= g->leaf_refs[l]) <= 0) {
            rem[o] = 0;
            dev_value_unref(vals[o]);
            vals[o] = NULL;
        }
    }
    return IR_OK;
}

/* Release the operands of ins whose last use this was. */
static void release_operands(const IrInstr *ins, DevValue **vals, int32_t *rem)
{
    for (int32_t j = 0; j < ins->nopnd; j++) {
        int32_t o = ins->opnd[j];
        if (rem[o] > 0 && --rem[o] == 0) {
            dev_value_unref(vals[o]);
            vals[o] = NULL;
        }
    }
}

/* A kernel's result r for ins, checked; released when it does not fit. */
static IrStatus check_result(const Exec *x, const IrInstr *ins, IrStatus st, DevValue *r)
{
    if (st == IR_OK && !r)
        st = instr_error(x, ins, IR_EINTERNAL, "kernel returned no value");
    if (st != IR_OK) {
        dev_value_unref(r);
        return ensure_diag(x, ins, st);
    }
    if (!shape_matches(&r->shape, &ins->shape)) {
        st = shape_mismatch(x, ins, "the result", &r->shape, &ins->shape);
        dev_value_unref(r);
        return st;
    }
    return IR_OK;
}

/* ---- asynchronous pairs (DevCollectives.start, schedule.c) ----
 *
 * A -start hands its collective to the runtime and leaves its value
 * pending; the first instruction that reads the value (the -done, or
 * anything else) waits for it and makes it: the result, or XLA's async
 * tuple around it. Between the two the device runs whatever the schedule
 * put there. */

/* Begin -start k->ins in the background. IR_EUNSUPPORTED, nothing done
 * and no diagnostic: it runs at once instead (an async-start whose
 * computation is not one collective over its parameters). */
static IrStatus async_begin(const Exec *x, const DevKernelArgs *k, Pending *pd)
{
    const IrInstr *ins = k->ins;
    IrInstr base;
    DevValue *stack[8], **opnd = k->opnd;
    int32_t nopnd = k->nopnd;
    IrStatus st = IR_OK;
    if (ins->op == OP_ASYNC_START) {
        int32_t arg[8];
        const IrInstr *w = dev_async_wrapped_collective(k, arg, 8);
        if (!w || ins->shape.type != IR_TUPLE || ins->shape.ntuple < 2 ||
            !ir_shape_equal(&w->shape, &ins->shape.tuple[1]))
            return IR_EUNSUPPORTED;
        base = *w;
        nopnd = w->nopnd;
        for (int32_t j = 0; j < nopnd; j++)
            stack[j] = k->opnd[arg[j]];
        opnd = stack;
    } else if ((st = start_base(x, ins, &base)) != IR_OK) {
        return st;
    }
    pd->el0 = NULL;
    if (ins->op != OP_ALL_REDUCE_START && !(pd->el0 = dev_async_operands(k)))
        return IR_ENOMEM;
    st = x->opt->coll->start(x->opt->coll->ctx, x->m, &base, nopnd, opnd, &pd->handle, x->d);
    if (st != IR_OK) {
        dev_value_unref(pd->el0);
        *pd = (Pending){0};
    }
    return st;
}

/* Wait for instruction i's collective and make its value in vals[i]. */
static IrStatus async_finish(const Exec *x, const IrComputation *c, int32_t i, Pending *pd, DevValue **vals)
{
    const IrInstr *ins = &c->instr[i];
    DevValue *r = NULL, *el0 = pd->el0;
    void *h = pd->handle;
    *pd = (Pending){0};
    IrStatus st = x->opt->coll->wait(x->opt->coll->ctx, h, &r, x->d);
    if (st != IR_OK) {
        dev_value_unref(el0);
        dev_value_unref(r);
        return ensure_diag(x, ins, st);
    }
    DevValue *v = r;
    if (ins->op != OP_ALL_REDUCE_START) {
        DevKernelArgs k = {x->m, c, ins, 0, NULL, x->opt, x->d};
        v = NULL;
        st = dev_async_assemble(&k, el0, r, &v);
    }
    if ((st = check_result(x, ins, st, v)) == IR_OK)
        vals[i] = v;
    return st;
}

/* Every pending value instruction i reads (a fusion group: its leaves). */
static IrStatus async_operands(const Exec *x, const IrComputation *c, const CompOrder *p, int32_t i, Pending *pend,
                               DevValue **vals)
{
    const IrInstr *ins = &c->instr[i];
    const DevFusionGroup *g = p->fusion.group_of && p->fusion.group_of[i] >= 0
                                  ? &p->fusion.groups[p->fusion.group_of[i]] : NULL;
    int32_t n = g ? g->nleaves : ins->nopnd;
    IrStatus st = IR_OK;
    for (int32_t j = 0; j < n && st == IR_OK; j++) {
        int32_t o = g ? g->leaves[j] : ins->opnd[j];
        if (pend[o].handle)
            st = async_finish(x, c, o, &pend[o], vals);
    }
    return st;
}

/* After a failure: every collective still in flight is waited for (its
 * peers may be in it; the runtime ends them when this device fails), its
 * result dropped. */
static void async_drain(const Exec *x, int32_t n, Pending *pend)
{
    for (int32_t i = 0; pend && i < n; i++)
        if (pend[i].handle) {
            IrDiag quiet = {0};
            DevValue *r = NULL;
            x->opt->coll->wait(x->opt->coll->ctx, pend[i].handle, &r, &quiet);
            dev_value_unref(r);
            dev_value_unref(pend[i].el0);
            ir_diag_clear(&quiet);
            pend[i] = (Pending){0};
        }
}

/* A -start run asynchronously: true when it was (st its status). */
static bool try_async_start(const Exec *x, const IrComputation *c, const IrInstr *ins, DevValue **opnd,
                            Pending *pd, IrStatus *st)
{
    if (!pd || !ir_async_start_op(ins->op))
        return false;
    DevKernelArgs k = {x->m, c, ins, ins->nopnd, opnd, x->opt, x->d};
    *st = async_begin(x, &k, pd);
    return *st != IR_EUNSUPPORTED || (x->d && x->d->status != IR_OK);
}

/* A call (not a device cluster's) with an operand at its last use: that
 * operand moves into the callee's parameter (donated), so the callee's
 * kernels may write into it. JAX wraps small functions in calls
 * (jit_relu_ around an expert dot's f32[2,2048,1536]): the relu then runs
 * in place instead of filling a second buffer the size of the dot's. */
static bool call_moves(const Exec *x, const IrInstr *ins, const int32_t *rem)
{
    if (ins->op != OP_CALL || (x->opt->cluster_calls && ir_frontend_attr(ins, "_tessel_cluster")))
        return false;
    for (int32_t j = 0; j < ins->nopnd; j++)
        if (rem[ins->opnd[j]] == 1)
            return true;
    return false;
}

static IrStatus run_call_moving(Exec *x, const IrInstr *ins, DevValue **opnd, DevValue **vals, int32_t *rem,
                                DevValue **out)
{
    bool stack[8];
    bool *donated = ins->nopnd <= 8 ? stack : ts_malloc((size_t)ins->nopnd * sizeof *donated);
    if (!donated)
        return IR_ENOMEM;
    for (int32_t j = 0; j < ins->nopnd; j++) {
        int32_t o = ins->opnd[j];
        if ((donated[j] = rem[o] == 1)) { /* the reference is the callee's now */
            vals[o] = NULL;
            rem[o] = 0;
        }
    }
    IrStatus st = run_callee_donating(x, ins, 0, ins->nopnd, opnd, false, donated, out);
    if (donated != stack)
        ts_free(donated);
    return st;
}

/* All-reduce ar with add `a` taken in (CompOrder.fold): the add's value
 * comes out of the collective (DevCollectives.run_add); the all-reduce's
 * own value never exists. */
static IrStatus run_allreduce_add(Exec *x, const IrComputation *c, int32_t ar, int32_t a, DevValue **vals,
                                  int32_t *rem, Pending *pend)
{
    const IrInstr *ins = &c->instr[ar];
    int32_t addend = fold_addend(c, a, ar);
    DevValue *r = NULL;
    /* The addend is read here, not at the add: a collective still in
     * flight that makes it is waited for now. */
    IrStatus st = pend && pend[addend].handle ? async_finish(x, c, addend, &pend[addend], vals) : IR_OK;
    if (st != IR_OK)
        return st;
    st = x->opt->coll->run_add(x->opt->coll->ctx, x->m, ins, vals[ins->opnd[0]], vals[addend], &r, x->d);
    if ((st = check_result(x, st == IR_OK ? &c->instr[a] : ins, st, r)) != IR_OK)
        return st;
    vals[a] = r;
    release_operands(ins, vals, rem);
    if (rem[addend] > 0 && --rem[addend] == 0) {
        dev_value_unref(vals[addend]);
        vals[addend] = NULL;
    }
    return IR_OK;
}

static IrStatus run_one(Exec *x, const IrComputation *c, const CompOrder *p, int32_t i, int32_t nargs,
                        DevValue **args, bool consume, const bool *donated, DevValue **vals, int32_t *rem,
                        Pending *pend)
{
    const IrInstr *ins = &c->instr[i];
    DevValue *r = NULL;
    IrStatus st;
    int32_t lend;
    if (pend && (st = async_operands(x, c, p, i, pend, vals)) != IR_OK)
        return st;
    if (ins->op == OP_PARAMETER) {
        int64_t pn = ins->a.parameter_number;
        bool mine = consume || (donated && pn >= 0 && pn < nargs && donated[pn]);
        return bind_parameter(x, ins, nargs, args, mine, &vals[i]);
    }
    if (p->fusion.group_of && p->fusion.group_of[i] >= 0)
        return run_group(x, c, &p->fusion.groups[p->fusion.group_of[i]], vals, rem);
    if (p->fold && p->fold[i] >= 0)
        return run_allreduce_add(x, c, i, p->fold[i], vals, rem, pend);
    if (try_reshape_in_place(ins, vals, rem, &r)) {
        st = r ? IR_OK : IR_ENOMEM;
    } else if ((lend = elementwise_in_place(ins, vals, rem)) >= 0) {
        st = run_elementwise_over(x, c, ins, lend, vals, rem, &r);
    } else if (ins->op == OP_WHILE && ins->nopnd == 1 && rem[ins->opnd[0]] == 1) {
        /* the operand's last use: the loop takes the executor's reference */
        DevValue *state = vals[ins->opnd[0]];
        vals[ins->opnd[0]] = NULL;
        rem[ins->opnd[0]] = 0;
        st = run_while(x, ins, state, &r);
    } else {
        DevValue *stack[8];
        DevValue **opnd = ins->nopnd <= 8 ? stack : ts_malloc((size_t)ins->nopnd * sizeof *opnd);
        if (!opnd)
            return ensure_diag(x, ins, IR_ENOMEM);
        for (int32_t j = 0; j < ins->nopnd; j++)
            opnd[j] = vals[ins->opnd[j]];
        bool moving = call_moves(x, ins, rem);
        bool async = !moving && try_async_start(x, c, ins, opnd, pend ? &pend[i] : NULL, &st);
        if (moving) {
            st = run_call_moving(x, ins, opnd, vals, rem, &r);
        } else if (!async) {
            pin_live_operands(ins, opnd, rem, true);
            st = run_instr(x, c, ins, opnd, &r);
            pin_live_operands(ins, opnd, rem, false);
        }
        if (opnd != stack)
            ts_free(opnd);
        if (async) {
            if (st != IR_OK)
                return ensure_diag(x, ins, st);
            release_operands(ins, vals, rem);
            return IR_OK;
        }
    }
    if ((st = check_result(x, ins, st, r)) != IR_OK)
        return st;
    vals[i] = r;
    release_operands(ins, vals, rem);
    return IR_OK;
}

/* ---- per-instruction times (DevOpTimes, device.h) ---- */

/* The table to fill now, or NULL: none, off, or inside a computation a
 * kernel runs per element (its time is the kernel's). */
static DevOpTimes *op_timing(const Exec *x)
{
    DevOpTimes *t = x->opt->op_times;
    return t && t->on && x->untimed == 0 && t->m == x->m ? t : NULL;
}

static double clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Where an instruction's timing starts: the clock, the collectives' wait
 * so far, and the callee time of the instruction around it (set aside:
 * this one's callees count afresh). */
typedef struct OpClock {
    double t0, w0, outer, outer_wait;
} OpClock;

static OpClock op_clock_start(DevOpTimes *t)
{
    OpClock c = {0, t->waited ? *t->waited : 0, t->nested, t->nested_wait};
    t->nested = t->nested_wait = 0;
    c.t0 = clock_seconds();
    return c;
}

/* Instruction i of comp ran since c: its self time (less its timed
 * callees') to its entry; its whole time to the instruction around it. */
static void op_clock_stop(DevOpTimes *t, const OpClock *c, const CompOrder *p, int32_t comp, int32_t i)
{
    double dt = clock_seconds() - c->t0, dw = t->waited ? *t->waited - c->w0 : 0;
    DevOpTime *e = dev_op_time(t, comp, i);
    e->fused = p->fusion.group_of && p->fusion.group_of[i] >= 0 ? p->fusion.groups[p->fusion.group_of[i]].nnodes : 0;
    e->calls++;
    e->seconds += dt - t->nested;
    e->wait_seconds += dw - t->nested_wait;
    t->nested = c->outer + dt;
    t->nested_wait = c->outer_wait + dw;
}

/* Run computation `comp` on `nargs` arguments. Without `consume` the
 * arguments are borrowed; with it, run_comp owns their references (moved
 * into the parameters' slots, released when unused or on failure);
 * donated[k] (NULL: none) does the same for argument k alone. */
static IrStatus run_comp(Exec *x, int32_t comp, int32_t nargs, DevValue **args, bool consume,
                         const bool *donated, DevValue **out)
{
    const CompOrder *p = NULL;
    IrStatus st = comp_order_get(x, comp, &p);
    if (st != IR_OK)
        goto release_args;
    const IrComputation *c = x->m->comp[comp];
    int32_t n = c->ninstr;
    /* Small computations (reducers, comparators) run without the heap. */
    DevValue *vstack[16];
    int32_t rstack[16];
    DevValue **vals = n <= 16 ? vstack : ts_calloc((size_t)n, sizeof *vals);
    int32_t *rem = n <= 16 ? rstack : ts_malloc((size_t)n * sizeof *rem);
    Pending *pend = NULL;
    if (!vals || !rem) {
        st = ir_error(x->d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
        goto done;
    }
    if (n <= 16)
        memset(vstack, 0, sizeof vstack);
    memcpy(rem, p->uses, (size_t)n * sizeof *rem);
    bool async = p->nasync > 0 && x->opt->coll && x->opt->coll->start && x->opt->coll->wait;
    if (async && !(pend = ts_calloc((size_t)n, sizeof *pend))) {
        st = ir_error(x->d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
        goto done;
    }
    DevOpTimes *times = op_timing(x);
    for (int32_t k = 0; k < p->n && st == IR_OK; k++) {
        int32_t i = p->order[k];
        OpClock clock = {0};
        if (times)
            clock = op_clock_start(times);
        st = run_one(x, c, p, i, nargs, args, consume, donated, vals, rem, pend);
        if (st == IR_OK && rem[i] == 0 && pend && pend[i].handle) /* a dead -start still completes */
            st = async_finish(x, c, i, &pend[i], vals);
        if (st == IR_OK && rem[i] == 0) { /* dead value */
            dev_value_unref(vals[i]);
            vals[i] = NULL;
        }
        if (times)
            op_clock_stop(times, &clock, p, comp, i);
    }
    if (st == IR_OK && pend && pend[c->root].handle)
        st = async_finish(x, c, c->root, &pend[c->root], vals);
    if (st == IR_OK) {
        *out = vals[c->root];
        vals[c->root] = NULL;
    }
done:
    async_drain(x, n, pend);
    ts_free(pend);
    if (vals)
        for (int32_t i = 0; i < n; i++)
            dev_value_unref(vals[i]);
    if (vals != vstack)
        ts_free(vals);
    if (rem != rstack)
        ts_free(rem);
release_args:
    for (int32_t i = 0; i < nargs; i++)
        if (consume || (donated && donated[i])) {
            dev_value_unref(args[i]);
            args[i] = NULL;
        }
    return st;
}

IrStatus dev_execute(const IrModule *m, int32_t comp, int32_t nargs, DevValue **args,
                     const DevExecOptions *opt, DevValue **out, IrDiag *d)
{
    *out = NULL;
    if (!m || comp < 0 || comp >= m->ncomp || nargs < 0 || (nargs > 0 && !args))
        return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                        "dev_execute: no computation %d", (int)comp);
    Exec x = {m, opt ? opt : &default_options, d, NULL, 0, NULL, 0};
    Exec *saved = current;
    current = &x;
    DevFpMode fp = dev_fp_flush_enter(); /* XLA's CPU mode (fpmode.c) */
    IrStatus st = run_comp(&x, comp, nargs, args, false, x.opt->ndonated >= nargs ? x.opt->donated : NULL, out);
    dev_fp_restore(fp);
    current = saved;
    exec_release(&x);
    return st;
}

IrStatus dev_call(const DevKernelArgs *k, int32_t comp, int32_t nargs, DevValue **args,
                  DevValue **out)
{
    *out = NULL;
    if (comp < 0 || comp >= k->m->ncomp)
        return dev_kernel_error(k, IR_EINPUT, "called computation %d does not exist", (int)comp);
    Exec *x = current;
    if (x && x->m == k->m && x->d == k->d) {
        if (x->depth >= MAX_DEPTH)
            return dev_kernel_error(k, IR_EINPUT, "computations nest deeper than %d", MAX_DEPTH);
        x->depth++;
        x->untimed++;
        IrStatus st = run_comp(x, comp, nargs, args, false, NULL, out);
        x->untimed--;
        x->depth--;
        return st;
    }
    /* Called outside dev_execute (a kernel test): a one-off executor. */
    Exec one = {k->m, k->opt ? k->opt : &default_options, k->d, NULL, 0, NULL, 1};
    Exec *saved = current;
    current = &one;
    IrStatus st = run_comp(&one, comp, nargs, args, false, NULL, out);
    current = saved;
    exec_release(&one);
    return st;
}
