/*
 * donate.c: input_output_alias pairs inferred for a compiled cluster
 * (`--donate auto`), as TensorFlow's MarkInputOutputAliasesPass pairs a
 * resource variable's read with its assignment: an entry parameter whose
 * last read comes no later than the step that writes an output of the
 * same logical shape, element type and sharding is aliased to that output.
 * The run then hands the parameter over (runtime/local.c): the executor
 * frees it at its last read, where the output may take its buffer, and
 * `--steps` feeds the output back in its place.
 *
 * Safe because the parameter is not read after the output is written (the
 * executor's order, ir_exec_order, the one the run takes) and the output
 * is a buffer of its own (not the parameter itself, nor a reference to
 * another value). The module's own pairs are kept as they are; a
 * parameter or output they name is not paired again. Outputs are taken
 * in order, each with the first parameter that fits.
 *
 * Example, an SGD step: ROOT (loss, w_new) with w_new = w - lr * g(w, x):
 * w's last read is the subtract that writes w_new, so w -> output {1}; x
 * (no output of its shape) stays the caller's.
 */
#include "partition.h"

#include <string.h>

/* The instruction that writes output leaf `k` of the root (the root
 * itself for an array root), or -1 for a nested tuple. */
static int32_t writer(const IrComputation *c, int32_t k, bool tuple)
{
    if (!tuple)
        return c->root;
    const IrInstr *r = &c->instr[c->root];
    if (r->op != OP_TUPLE || k >= r->nopnd)
        return -1;
    return r->opnd[k];
}

/* Does ins write a value (not pass on a parameter or another value by
 * reference)? With the parameter donated its buffer may be the one
 * written: that is the point. */
static bool writes(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_PARAMETER: case OP_GET_TUPLE_ELEMENT: case OP_TUPLE: case OP_COPY: case OP_OPTIMIZATION_BARRIER:
    case OP_DOMAIN: case OP_ADD_DEPENDENCY:
        return false;
    default:
        return true;
    }
}

/* Is output k or parameter p already named by a pair of m? */
static bool output_taken(const IrModule *m, int32_t k, bool tuple)
{
    for (int32_t j = 0; j < m->nalias; j++) {
        const IrShapeIndex *o = &m->alias[j].output_index;
        if (tuple ? o->n >= 1 && o->v[0] == k : o->n == 0)
            return true;
    }
    return false;
}

static bool param_taken(const IrModule *m, int64_t p)
{
    for (int32_t j = 0; j < m->nalias; j++)
        if (m->alias[j].param_number == p)
            return true;
    return false;
}

/* The logical shape and sharding of output k agree with parameter p's. */
static bool same_kind(IrArena *a, const PlanCluster *c, int32_t p, int32_t k, bool tuple)
{
    const IrShape *ps = &c->param_shape[p], *os = tuple ? &c->out_shape.tuple[k] : &c->out_shape;
    if (ps->type == IR_TUPLE || os->type == IR_TUPLE || ps->type != os->type || ps->rank != os->rank ||
        !ir_dims_equal(ps->dims, os->dims, ps->rank))
        return false;
    const IrSharding *osh = plan_root_sharding(c);
    if (tuple && !(osh = shd_tuple_element(a, osh, &c->out_shape, k)))
        return false;
    return ir_sharding_equal(plan_param_sharding(c, p), osh);
}

static IrStatus add_pair(IrModule *m, int64_t p, int32_t k, bool tuple)
{
    IrAlias *al = ir_alloc_array(m->arena, (size_t)m->nalias + 1, sizeof *al);
    int64_t *idx = tuple ? ir_alloc_array(m->arena, 1, sizeof *idx) : NULL;
    if (!al || (tuple && !idx))
        return IR_ENOMEM;
    if (m->nalias > 0)
        memcpy(al, m->alias, (size_t)m->nalias * sizeof *al);
    if (idx)
        idx[0] = k;
    al[m->nalias] = (IrAlias){.output_index = {.n = tuple ? 1 : 0, .v = idx}, .param_number = p, .inferred = true};
    m->alias = al;
    m->nalias++;
    return IR_OK;
}

IrStatus plan_donate_auto(PlanCluster *c, int32_t *added, IrDiag *d)
{
    *added = 0;
    IrModule *m = c->spmd;
    const IrComputation *e = ir_entry(m);
    if (!e || e->root < 0 || c->replay)
        return IR_OK;
    int32_t np = e->nparam < c->nparam ? e->nparam : c->nparam;
    bool *all = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *all);
    IrArena *a = ir_arena_new();
    if (!all || !a) {
        ts_free(all);
        ir_arena_free(a);
        return ir_oom(d, NULL);
    }
    for (int32_t p = 0; p < np; p++)
        all[p] = true; /* every parameter dies at its last read: end[] is that read */
    MemOptions o = {.donated = all, .nparams = np};
    MemEstimate est;
    IrStatus st = mem_estimate(m, m->entry, &o, &est, d);
    if (st != IR_OK) {
        ts_free(all);
        ir_arena_free(a);
        return st;
    }
    bool tuple = c->out_shape.type == IR_TUPLE;
    int32_t nout = tuple ? c->out_shape.ntuple : 1;
    for (int32_t k = 0; st == IR_OK && k < nout; k++) {
        int32_t w = writer(e, k, tuple);
        if (w < 0 || est.end[w] < 0 || !writes(&e->instr[w]) || output_taken(m, k, tuple))
            continue; /* not written here as a buffer of its own */
        int32_t wstep = -1;
        for (int32_t s = 0; s < est.n && wstep < 0; s++)
            if (est.order[s] == w)
                wstep = s;
        for (int32_t p = 0; p < np; p++) {
            int32_t pi = e->param[p];
            if (pi < 0 || param_taken(m, p) || est.last_read[pi] > wstep || !same_kind(a, c, p, k, tuple))
                continue;
            if ((st = add_pair(m, p, k, tuple)) == IR_ENOMEM)
                st = ir_oom(d, NULL);
            else
                (*added)++;
            break;
        }
    }
    mem_estimate_free(&est);
    ts_free(all);
    ir_arena_free(a);
    return st;
}
