/*
 * memory.c: the memory a device needs to run one computation, by liveness
 * over the order the executor runs it in (ir_exec_order, or an order a
 * scheduler proposes), and what is live at the peak. This is the estimate
 * `tessel plan` prints and `--limit memory` holds a run to; the runtime's
 * measured peak (`tessel run --stats`) counts the same bytes: every array
 * value a device holds.
 *
 * The model follows the executor (device/exec.c) value for value:
 *  - parameters are live before the first step; the caller holds them to
 *    the end unless donated (MemOptions.donated), then they die at their
 *    last use;
 *  - every other instruction's result is allocated at its step and freed
 *    after the step of its last use (an unused one right after its own
 *    step); the root's leaves live to the end (the result);
 *  - tuple, get-tuple-element, copy, optimization-barrier, domain,
 *    add-dependency and the -done halves hold no bytes of their own: they
 *    refer to their operands' buffers, which then live as long as they do;
 *  - reshape and bitcast of an operand at its last use, and
 *    dynamic-update-slice into one, reuse its buffer (no new bytes), as the
 *    executor does when it holds the only reference (not a parameter the
 *    caller keeps);
 *  - a while's state leaves that its body passes through unchanged stay
 *    in the initial state's buffers (which then live as long as the
 *    result); the others are new;
 *  - a called computation (while body, call, branch, fusion, reducer)
 *    adds, while its caller's step runs, its own peak beyond its
 *    parameters and its result.
 * Not modelled: the executor's run-time fusion of large elementwise
 * chains (their interior values never exist: the estimate is then above
 * the run), buffers the collectives stage outside values (MPI transfers).
 *
 * Example, p0 = f32[4] parameter(0); a = exp(p0); b = add(a, p0); ROOT
 * c = negate(b): before step 0: 16 bytes (p0); step a: 32; step b: 48 (a
 * dies after it); step c: 48 (b dies after it); peak 48 at b.
 */
#include "partition.h"

#include <stdlib.h>
#include <string.h>

/* Does instruction i refer to its operands' buffers instead of making its
 * own? */
static bool refers(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_TUPLE: case OP_GET_TUPLE_ELEMENT: case OP_COPY: case OP_OPTIMIZATION_BARRIER:
    case OP_DOMAIN: case OP_ADD_DEPENDENCY: case OP_ASYNC_UPDATE: case OP_ALL_REDUCE_DONE:
        return true;
    default:
        return false;
    }
}

/* Does instruction ins reuse operand 0's buffer when it is the operand's
 * last use and nobody else holds it? */
static bool reuses(const IrInstr *ins)
{
    return (ins->op == OP_RESHAPE || ins->op == OP_BITCAST || ins->op == OP_DYNAMIC_UPDATE_SLICE) &&
           ins->nopnd >= 1 && ins->shape.type != IR_TUPLE;
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
    int64_t *own;       /* per instruction: bytes it allocates */
    int64_t *callee;    /* per step: a called computation's bytes beyond its inputs and result */
    int64_t *peak_of;   /* per module computation: its peak beyond parameters and result, -1 not yet */
    int32_t depth;
} Est;

static IrStatus estimate(const IrModule *m, int32_t comp, const MemOptions *o, int64_t *peak_of,
                         int32_t depth, MemEstimate *out, IrDiag *d);

/* The peak of computation k beyond its parameters and its result (what it
 * adds while its caller's step runs). */
static IrStatus callee_extra(Est *e, int32_t k, int64_t *extra, IrDiag *d)
{
    *extra = 0;
    if (k < 0 || k >= e->m->ncomp || e->depth >= 64)
        return IR_OK; /* a bad callee or runaway nesting: the executor refuses it */
    if (e->peak_of[k] < 0) {
        MemEstimate sub;
        e->peak_of[k] = 0; /* a computation reached again inside itself adds nothing more */
        IrStatus st = estimate(e->m, k, NULL, e->peak_of, e->depth + 1, &sub, d);
        if (st != IR_OK)
            return st;
        int64_t x = sub.peak - sub.param_bytes - sub.output_bytes;
        e->peak_of[k] = x > 0 ? x : 0;
        mem_estimate_free(&sub);
    }
    *extra = e->peak_of[k];
    return IR_OK;
}

/* The bytes of a while's result it makes afresh: a leaf of the state the
 * body passes through unchanged (root tuple operand k is
 * get-tuple-element(parameter, k)) stays in the initial state's buffer.
 * *through: some leaf does. */
static int64_t while_fresh(const IrModule *m, const IrInstr *ins, bool *through)
{
    *through = false;
    int64_t all = leaf_bytes(&ins->shape);
    if (ins->op != OP_WHILE || ins->ncalled < 2 || ins->shape.type != IR_TUPLE)
        return all;
    int32_t bi = ins->called[1];
    if (bi < 0 || bi >= m->ncomp)
        return all;
    const IrComputation *b = m->comp[bi];
    if (b->root < 0 || b->instr[b->root].op != OP_TUPLE || b->instr[b->root].nopnd != ins->shape.ntuple)
        return all;
    const IrInstr *root = &b->instr[b->root];
    for (int32_t k = 0; k < root->nopnd; k++) {
        const IrInstr *g = &b->instr[root->opnd[k]];
        if (g->op == OP_GET_TUPLE_ELEMENT && g->a.tuple_index == k && b->instr[g->opnd[0]].op == OP_PARAMETER) {
            all -= leaf_bytes(&ins->shape.tuple[k]);
            *through = true;
        }
    }
    return all;
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
        for (int32_t k = 0; k < ins->nopnd; k++)
            if (e->end[ins->opnd[k]] < s)
                e->end[ins->opnd[k]] = s;
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
    for (int32_t s = e->n - 1; s >= 0; s--) {
        int32_t i = e->order[s];
        const IrInstr *ins = &c->instr[i];
        if (refers(ins)) {
            e->own[i] = 0;
            int32_t from = 0, to = ins->nopnd;
            if (ins->op == OP_GET_TUPLE_ELEMENT && ins->nopnd == 1 &&
                c->instr[ins->opnd[0]].op == OP_TUPLE) { /* gte(tuple(a, b)), 1: just b */
                const IrInstr *t = &c->instr[ins->opnd[0]];
                int64_t x = ins->a.tuple_index;
                if (x >= 0 && x < t->nopnd) {
                    if (e->end[t->opnd[x]] < e->end[i])
                        e->end[t->opnd[x]] = e->end[i];
                    continue;
                }
            }
            if (ins->op != OP_TUPLE)
                to = ins->nopnd > 0 ? 1 : 0;
            for (int32_t k = from; k < to; k++)
                if (e->end[ins->opnd[k]] < e->end[i])
                    e->end[ins->opnd[k]] = e->end[i];
        } else if (ins->op == OP_WHILE && ins->nopnd == 1) {
            bool through;
            e->own[i] = while_fresh(e->m, ins, &through);
            if (through && e->end[ins->opnd[0]] < e->end[i])
                e->end[ins->opnd[0]] = e->end[i];
        } else if (reuses(ins)) {
            int32_t op = ins->opnd[0];
            /* The operand's last use is here and it is nobody else's. */
            if (e->end[op] == s && e->own[op] == leaf_bytes(&ins->shape) && e->own[op] > 0) {
                e->own[i] = 0;
                e->end[op] = e->end[i];
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
    e->own = ts_calloc(ni, sizeof *e->own);
    e->callee = ts_calloc(ni, sizeof *e->callee);
    if (!e->order || !e->step || !e->end || !e->own || !e->callee)
        return ir_oom(d, NULL);
    if (o && o->order) {
        if (o->norder < 0 || o->norder > c->ninstr)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "an order of %d steps for %d instructions",
                            (int)o->norder, (int)c->ninstr);
        memcpy(e->order, o->order, (size_t)o->norder * sizeof *e->order);
        e->n = o->norder;
    } else {
        IrExecOrderError oe;
        IrStatus st = ir_exec_order(c, e->order, &e->n, &oe);
        if (st == IR_ENOMEM)
            return ir_oom(d, NULL);
        if (st != IR_OK)
            return ir_error(d, st, m->file, m->src, c->instr[oe.at].pos, "%s: a cycle or a bad operand",
                            c->instr[oe.at].name);
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
    ts_free(e->own);
    ts_free(e->callee);
    e->step = e->end = NULL;
    e->own = e->callee = NULL;
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
    if (e->end[i] == e->n)
        return MEM_OUTPUT;
    return collective(ins->op) ? MEM_COLLECTIVE : MEM_TEMPORARY;
}

/* Does instruction i hold bytes while step s runs (s = -1: before the
 * first step)? */
static bool live_at(const Est *e, int32_t i, int32_t s)
{
    bool param = e->c->instr[i].op == OP_PARAMETER;
    return e->step[i] >= 0 && e->own[i] > 0 && (param || e->step[i] <= s) && e->end[i] >= s;
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
        if (e->step[i] >= 0 && c->instr[i].op == OP_PARAMETER) {
            live += e->own[i];
            out->param_bytes += e->own[i];
            if (e->end[i] < e->n)
                freed[e->end[i]] += e->own[i];
        }
    out->start_bytes = out->peak = live;
    out->peak_step = -1;
    for (int32_t s = 0; s < e->n; s++) {
        int32_t i = e->order[s];
        if (c->instr[i].op != OP_PARAMETER) {
            live += e->own[i];
            if (e->end[i] < e->n)
                freed[e->end[i]] += e->own[i];
            else
                out->output_bytes += e->own[i];
        }
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
        out->at_peak[out->nat_peak++] = (MemValue){i, e->own[i], kind_of(e, i)};
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
    Est e = {.peak_of = peak_of, .depth = depth};
    IrStatus st = setup(&e, m, comp, o, d);
    for (int32_t s = 0; st == IR_OK && s < e.n; s++) {
        const IrInstr *ins = &e.c->instr[e.order[s]];
        for (int32_t k = 0; st == IR_OK && k < ins->ncalled; k++) {
            int64_t x = 0;
            st = callee_extra(&e, ins->called[k], &x, d);
            if (x > e.callee[s])
                e.callee[s] = x;
        }
    }
    if (st == IR_OK) {
        lifetimes(&e, o);
        st = sweep(&e, out, d);
    }
    out->n = e.n;
    out->order = e.order;
    out->end = e.end;
    out->own = e.own;
    e.end = NULL;
    e.own = NULL;
    est_free(&e);
    if (st != IR_OK)
        mem_estimate_free(out);
    return st;
}

IrStatus mem_estimate(const IrModule *m, int32_t comp, const MemOptions *o, MemEstimate *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    int64_t *peak_of = ts_malloc((size_t)(m->ncomp > 0 ? m->ncomp : 1) * sizeof *peak_of);
    if (!peak_of)
        return ir_oom(d, NULL);
    for (int32_t k = 0; k < m->ncomp; k++)
        peak_of[k] = k == comp ? 0 : -1; /* a computation calling itself adds nothing more */
    IrStatus st = estimate(m, comp, o, peak_of, 0, out, d);
    ts_free(peak_of);
    return st;
}

void mem_estimate_free(MemEstimate *e)
{
    ts_free(e->order);
    ts_free(e->end);
    ts_free(e->own);
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

IrStatus plan_memory(IrArena *a, const IrModule *spmd, PlanMemory *out)
{
    memset(out, 0, sizeof *out);
    out->peak_step = -1;
    const IrComputation *c = ir_entry(spmd);
    if (!c)
        return IR_OK;
    MemEstimate e;
    IrDiag d = {0};
    IrStatus st = mem_estimate(spmd, spmd->entry, NULL, &e, &d);
    ir_diag_clear(&d);
    if (st != IR_OK) /* a module the executor refuses: it will say why when run */
        return st == IR_ENOMEM ? IR_ENOMEM : IR_OK;
    st = fill(a, c, &e, out);
    mem_estimate_free(&e);
    return st;
}
