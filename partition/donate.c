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

#include <stdio.h>

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

/* What one call pairs: the estimate of the entry with every candidate
 * donated (so end[] of a parameter is its last read) and its order. */
typedef struct Pairing {
    PlanCluster *c;
    IrModule *m;
    const IrComputation *e;
    int32_t np, nout;
    bool tuple;
    MemEstimate est;
    int32_t *wstep;       /* [nout] the step writing output k; -1: not a buffer of its own */
    IrArena *a;           /* scratch shardings */
    int32_t added;
} Pairing;

/* Pair each output (in order) with the first parameter `allowed` of the
 * same kind, not yet taken, read last at or before the output is written
 * (`any_order`: read at any step; the run then keeps the output apart and
 * still frees the parameter at its last read). */
static IrStatus pair_round(Pairing *g, const bool *allowed, bool any_order, bool from_donor, IrDiag *d)
{
    for (int32_t k = 0; k < g->nout; k++) {
        if (g->wstep[k] < 0 || output_taken(g->m, k, g->tuple))
            continue;
        for (int32_t p = 0; p < g->np; p++) {
            int32_t pi = g->e->param[p];
            if (!allowed[p] || pi < 0 || param_taken(g->m, p) ||
                (!any_order && g->est.last_read[pi] > g->wstep[k]) || !same_kind(g->a, g->c, p, k, g->tuple))
                continue;
            if (ir_add_alias(g->m, p, g->tuple ? k : -1, !from_donor, from_donor) != IR_OK)
                return ir_oom(d, NULL);
            g->added++;
            break;
        }
    }
    return IR_OK;
}

static IrStatus pairing_start(Pairing *g, PlanCluster *c, bool *all, IrDiag *d)
{
    g->c = c;
    g->m = c->spmd;
    g->e = ir_entry(g->m);
    g->np = g->e->nparam < c->nparam ? g->e->nparam : c->nparam;
    g->tuple = c->out_shape.type == IR_TUPLE;
    g->nout = g->tuple ? c->out_shape.ntuple : 1;
    g->wstep = ts_calloc((size_t)(g->nout > 0 ? g->nout : 1), sizeof *g->wstep);
    g->a = ir_arena_new();
    if (!g->wstep || !g->a)
        return ir_oom(d, NULL);
    for (int32_t p = 0; p < g->np; p++)
        all[p] = true; /* every parameter dies at its last read: end[] is that read */
    MemOptions o = {.donated = all, .nparams = g->np};
    IrStatus st = mem_estimate(g->m, g->m->entry, &o, &g->est, d);
    for (int32_t k = 0; st == IR_OK && k < g->nout; k++) {
        int32_t w = writer(g->e, k, g->tuple);
        g->wstep[k] = -1;
        if (w < 0 || g->est.end[w] < 0 || !writes(&g->e->instr[w]))
            continue; /* not written here as a buffer of its own */
        g->wstep[k] = g->est.made[w]; /* a fused extra output is made at its group's root */
    }
    return st;
}

/* c->spmd's buffer_donor: the donors of c->src no pair took, for the plan
 * to say why (plan_donor_unpaired) and the plan file to keep. */
static IrStatus keep_unpaired(const PlanCluster *c, IrDiag *d)
{
    const IrModule *src = c->src;
    IrDonor *v = ts_calloc((size_t)src->ndonor + 1, sizeof *v);
    if (!v)
        return ir_oom(d, NULL);
    int32_t n = 0;
    for (int32_t k = 0; k < src->ndonor; k++)
        if (src->donor[k].param_index.n > 0 || !param_taken(c->spmd, src->donor[k].param_number))
            v[n++] = src->donor[k];
    IrStatus st = ir_set_donors(c->spmd, v, n);
    ts_free(v);
    return st == IR_OK ? IR_OK : ir_oom(d, NULL);
}

IrStatus plan_donate(PlanCluster *c, bool auto_all, int32_t *added, IrDiag *d)
{
    *added = 0;
    const IrComputation *e = ir_entry(c->spmd);
    bool donors = c->src && c->src->ndonor > 0;
    if (!e || e->root < 0 || c->replay || (!auto_all && !donors))
        return IR_OK;
    int32_t np = e->nparam < c->nparam ? e->nparam : c->nparam;
    bool *all = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *all);
    bool *donor = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *donor);
    Pairing g = {0};
    IrStatus st = all && donor ? pairing_start(&g, c, all, d) : ir_oom(d, NULL);
    for (int32_t k = 0; donors && k < c->src->ndonor; k++) {
        const IrDonor *dn = &c->src->donor[k];
        if (dn->param_index.n == 0 && dn->param_number >= 0 && dn->param_number < np)
            donor[dn->param_number] = true;
    }
    /* The module's donors first (its caller asked), those read before
     * their output is written, then the rest in any order (as XLA honours
     * a donation whatever the order); then --donate auto's. */
    if (st == IR_OK && donors)
        st = pair_round(&g, donor, false, true, d);
    if (st == IR_OK && donors)
        st = pair_round(&g, donor, true, true, d);
    if (st == IR_OK && auto_all)
        st = pair_round(&g, all, false, false, d);
    if (st == IR_OK && donors)
        st = keep_unpaired(c, d);
    *added = g.added;
    mem_estimate_free(&g.est);
    ts_free(g.wstep);
    ir_arena_free(g.a);
    ts_free(all);
    ts_free(donor);
    return st;
}

/* The output pair_round would look at for donor dn, and why none took it. */
void plan_donor_unpaired(const PlanCluster *c, const IrDonor *dn, char *buf, size_t n)
{
    const IrComputation *e = ir_entry(c->spmd);
    int64_t p = dn->param_number;
    if (dn->param_index.n > 0 || !e || p < 0 || p >= c->nparam || p >= e->nparam) {
        snprintf(buf, n, "a leaf inside a tuple parameter: tessel pairs whole parameters");
        return;
    }
    bool tuple = c->out_shape.type == IR_TUPLE;
    int32_t nout = tuple ? c->out_shape.ntuple : 1, shaped = -1, sharded = -1;
    IrArena *a = ir_arena_new();
    const IrShape *ps = &c->param_shape[p];
    for (int32_t k = 0; a && k < nout; k++) {
        const IrShape *os = tuple ? &c->out_shape.tuple[k] : &c->out_shape;
        if (os->type != ps->type || os->rank != ps->rank || !ir_dims_equal(os->dims, ps->dims, ps->rank))
            continue;
        if (shaped < 0)
            shaped = k;
        if (sharded < 0 && same_kind(a, c, (int32_t)p, k, tuple))
            sharded = k;
    }
    ir_arena_free(a);
    char *sh = ir_shape_str(ps, false);
    if (shaped < 0)
        snprintf(buf, n, "no output is a %s", sh ? sh : "value of its shape and type");
    else if (sharded < 0)
        snprintf(buf, n, "output %d is a %s but sharded otherwise (another shard per device)", (int)shaped,
                 sh ? sh : "value of its shape and type");
    else
        snprintf(buf, n, "every output of its shape, type and sharding (output %d first) is another "
                 "parameter's or not a buffer of its own", (int)sharded);
    ts_free(sh);
}
