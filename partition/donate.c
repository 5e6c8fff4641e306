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
 * in order, each with the first parameter that fits. Both sides are
 * leaves: an array leaf of the result at any depth the root's tuple
 * instructions name (a step returning ((w1', w2'), loss)), and a whole
 * array parameter or an array element of a tuple parameter (the run hands
 * the tuple over and frees each element at its last read).
 *
 * Example, an SGD step: ROOT (loss, w_new) with w_new = w - lr * g(w, x):
 * w's last read is the subtract that writes w_new, so w -> output {1}; x
 * (no output of its shape) stays the caller's.
 */
#include "partition.h"

#include <stdio.h>

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

/* The deepest tuple nesting an output leaf is paired at. */
#define LEAF_DEPTH 8

/* An array leaf of the entry's result or of a parameter: its shape index
 * (n = 0: the value itself), its logical shape and sharding. Output leaf:
 * the step writing it (-1: not a buffer of its own, or not a leaf the
 * root's tuples name). Parameter leaf: its parameter and the step of its
 * last read. */
typedef struct Leaf {
    int64_t idx[LEAF_DEPTH];
    int32_t n;
    int32_t param;
    int32_t step;
    const IrShape *shape;
    const IrSharding *sharding;
} Leaf;

/* Do index a (an alias's) and leaf b name the same value or one inside
 * the other (one is a prefix of the other)? */
static bool overlaps(const IrShapeIndex *a, const Leaf *b)
{
    for (int32_t k = 0; k < a->n && k < b->n; k++)
        if (a->v[k] != b->idx[k])
            return false;
    return true;
}

/* Is output leaf o, or parameter leaf in, already named by a pair of m? */
static bool output_taken(const IrModule *m, const Leaf *o)
{
    for (int32_t j = 0; j < m->nalias; j++)
        if (overlaps(&m->alias[j].output_index, o))
            return true;
    return false;
}

static bool param_taken(const IrModule *m, const Leaf *in)
{
    for (int32_t j = 0; j < m->nalias; j++)
        if (m->alias[j].param_number == in->param && overlaps(&m->alias[j].param_index, in))
            return true;
    return false;
}

/* Does a pair of m name donor dn's parameter at dn's index, or inside
 * or around it? */
static bool donor_taken(const IrModule *m, const IrDonor *dn)
{
    for (int32_t j = 0; j < m->nalias; j++) {
        const IrAlias *al = &m->alias[j];
        bool same = al->param_number == dn->param_number;
        for (int32_t k = 0; same && k < al->param_index.n && k < dn->param_index.n; k++)
            same = al->param_index.v[k] == dn->param_index.v[k];
        if (same)
            return true;
    }
    return false;
}

/* The same logical shape, element type and sharding. */
static bool same_kind(const Leaf *in, const Leaf *out)
{
    const IrShape *ps = in->shape, *os = out->shape;
    return ps->type == os->type && ps->rank == os->rank && ir_dims_equal(ps->dims, os->dims, ps->rank) &&
           in->sharding && out->sharding && ir_sharding_equal(in->sharding, out->sharding);
}

/* What one call pairs: the estimate of the entry with every candidate
 * donated (so end[] of a parameter is its last read) and its order, the
 * output leaves and the parameter leaves. */
typedef struct Pairing {
    PlanCluster *c;
    IrModule *m;
    const IrComputation *e;
    int32_t np;
    MemEstimate est;
    Leaf *out, *in;
    int32_t nout, nin, cap_out, cap_in;
    IrArena *a;           /* scratch shardings */
    int32_t added;
} Pairing;

static Leaf *push(Leaf **v, int32_t *n, int32_t *cap)
{
    if (*n == *cap) {
        int32_t nc = *cap ? 2 * *cap : 16;
        Leaf *nv = ts_realloc(*v, (size_t)nc * sizeof *nv);
        if (!nv)
            return NULL;
        *v = nv;
        *cap = nc;
    }
    return &(*v)[(*n)++];
}

/* The output leaves under shape s (sharding sh) at index `at`, written by
 * instruction w (-1: not known here), depth first: an element of a tuple
 * instruction is its operand, so a nested root's leaves are found. */
static IrStatus output_leaves(Pairing *g, const IrShape *s, const IrSharding *sh, int32_t w, Leaf at)
{
    if (s->type != IR_TUPLE) {
        Leaf *l = push(&g->out, &g->nout, &g->cap_out);
        if (!l)
            return IR_ENOMEM;
        at.shape = s;
        at.sharding = sh;
        at.step = w >= 0 && g->est.end && g->est.end[w] >= 0 && writes(&g->e->instr[w]) ? g->est.made[w] : -1;
        *l = at; /* a fused extra output is made at its group's root */
        return IR_OK;
    }
    if (at.n == LEAF_DEPTH)
        return IR_OK;
    const IrInstr *t = w >= 0 ? &g->e->instr[w] : NULL;
    for (int32_t k = 0; k < s->ntuple; k++) {
        Leaf sub = at;
        sub.idx[sub.n++] = k;
        const IrSharding *esh = sh ? shd_tuple_element(g->a, sh, s, k) : NULL;
        int32_t ew = t && t->op == OP_TUPLE && k < t->nopnd ? t->opnd[k] : -1;
        IrStatus st = output_leaves(g, &s->tuple[k], esh, ew, sub);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* The step of the last read of element i of tuple parameter instruction
 * pi: of its get-tuple-elements' values, or of the tuple read whole. */
static int32_t leaf_read(const Pairing *g, int32_t pi, int32_t i)
{
    int32_t read = -1;
    for (int32_t s = 0; s < g->est.n; s++) {
        int32_t j = g->est.order[s];
        const IrInstr *ins = &g->e->instr[j];
        for (int32_t k = 0; k < ins->nopnd; k++) {
            if (ins->opnd[k] != pi)
                continue;
            int32_t r = ins->op != OP_GET_TUPLE_ELEMENT ? s : ins->a.tuple_index == i ? g->est.last_read[j] : -1;
            read = r > read ? r : read;
        }
    }
    return read;
}

/* The parameters, whole, and the array elements of tuple parameters (one
 * level: the run hands the tuple over and frees each element at its last
 * read, ir_alias_donated). */
static IrStatus param_leaves(Pairing *g)
{
    for (int32_t p = 0; p < g->np; p++) {
        int32_t pi = g->e->param[p];
        const IrShape *ps = &g->c->param_shape[p];
        const IrSharding *sh = plan_param_sharding(g->c, p);
        if (pi < 0)
            continue;
        int32_t n = ps->type == IR_TUPLE ? ps->ntuple : 1;
        for (int32_t i = 0; i < n; i++) {
            const IrShape *ls = ps->type == IR_TUPLE ? &ps->tuple[i] : ps;
            if (ls->type == IR_TUPLE)
                continue;
            Leaf *l = push(&g->in, &g->nin, &g->cap_in);
            if (!l)
                return IR_ENOMEM;
            *l = (Leaf){.n = ps->type == IR_TUPLE, .param = p, .shape = ls};
            l->idx[0] = i;
            l->sharding = ps->type == IR_TUPLE ? (sh ? shd_tuple_element(g->a, sh, ps, i) : NULL) : sh;
            l->step = ps->type == IR_TUPLE ? leaf_read(g, pi, i) : g->est.last_read[pi];
        }
    }
    return IR_OK;
}

static IrStatus add_pair(Pairing *g, const Leaf *in, const Leaf *out, bool from_donor)
{
    IrShapeIndex pidx = {in->n, (int64_t *)in->idx}, oidx = {out->n, (int64_t *)out->idx};
    return ir_add_alias_at(g->m, in->param, &pidx, &oidx, !from_donor, from_donor);
}

/* Pair each output leaf (in order) with the first parameter leaf
 * `allowed` of the same kind, not yet taken, read last at or before the
 * output is written (`any_order`: read at any step; the run then keeps
 * the output apart and still frees the parameter at its last read). */
static IrStatus pair_round(Pairing *g, const bool *allowed, bool any_order, bool from_donor, IrDiag *d)
{
    for (int32_t k = 0; k < g->nout; k++) {
        const Leaf *o = &g->out[k];
        if (o->step < 0 || output_taken(g->m, o))
            continue;
        for (int32_t j = 0; j < g->nin; j++) {
            const Leaf *in = &g->in[j];
            if (!allowed[j] || param_taken(g->m, in) || (!any_order && in->step > o->step) || !same_kind(in, o))
                continue;
            if (add_pair(g, in, o, from_donor) != IR_OK)
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
    g->a = ir_arena_new();
    if (!g->a)
        return ir_oom(d, NULL);
    for (int32_t p = 0; p < g->np; p++)
        all[p] = true; /* every parameter dies at its last read: end[] is that read */
    MemOptions o = {.donated = all, .nparams = g->np};
    IrStatus st = mem_estimate(g->m, g->m->entry, &o, &g->est, d);
    if (st == IR_OK && (output_leaves(g, &c->out_shape, plan_root_sharding(c), g->e->root, (Leaf){0}) != IR_OK ||
                        param_leaves(g) != IR_OK))
        st = ir_oom(d, NULL);
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
        if (!donor_taken(c->spmd, &src->donor[k]))
            v[n++] = src->donor[k];
    IrStatus st = ir_set_donors(c->spmd, v, n);
    ts_free(v);
    return st == IR_OK ? IR_OK : ir_oom(d, NULL);
}

/* Does one of the module's buffer donors name parameter leaf in (the
 * leaf itself, or the parameter whole)? */
static bool donated_leaf(const IrModule *src, const Leaf *in)
{
    for (int32_t k = 0; k < src->ndonor; k++)
        if (src->donor[k].param_number == in->param && overlaps(&src->donor[k].param_index, in))
            return true;
    return false;
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
    Pairing g = {0};
    IrStatus st = all ? pairing_start(&g, c, all, d) : ir_oom(d, NULL);
    bool *any = NULL, *donor = NULL;
    if (st == IR_OK && (!(any = ts_calloc((size_t)g.nin + 1, sizeof *any)) ||
                        !(donor = ts_calloc((size_t)g.nin + 1, sizeof *donor))))
        st = ir_oom(d, NULL);
    for (int32_t j = 0; st == IR_OK && j < g.nin; j++) {
        any[j] = true;
        donor[j] = donors && donated_leaf(c->src, &g.in[j]);
    }
    /* The module's donors first (its caller asked), those read before
     * their output is written, then the rest in any order (as XLA honours
     * a donation whatever the order); then --donate auto's. */
    if (st == IR_OK && donors)
        st = pair_round(&g, donor, false, true, d);
    if (st == IR_OK && donors)
        st = pair_round(&g, donor, true, true, d);
    if (st == IR_OK && auto_all)
        st = pair_round(&g, any, false, false, d);
    if (st == IR_OK && donors)
        st = keep_unpaired(c, d);
    *added = g.added;
    mem_estimate_free(&g.est);
    ts_free(g.out);
    ts_free(g.in);
    ir_arena_free(g.a);
    ts_free(all);
    ts_free(any);
    ts_free(donor);
    return st;
}

/* The output pair_round would look at for donor dn, and why none took it. */
void plan_donor_unpaired(const PlanCluster *c, const IrDonor *dn, char *buf, size_t n)
{
    const IrComputation *e = ir_entry(c->spmd);
    int64_t p = dn->param_number;
    const IrShape *ps = e && p >= 0 && p < c->nparam && p < e->nparam ? &c->param_shape[p] : NULL;
    Pairing g = {.c = (PlanCluster *)c, .m = c->spmd, .e = e, .a = ir_arena_new()};
    Leaf in = {.n = dn->param_index.n, .param = (int32_t)p};
    if (ps && dn->param_index.n == 1 && ps->type == IR_TUPLE && dn->param_index.v[0] >= 0 &&
        dn->param_index.v[0] < ps->ntuple) {
        in.idx[0] = dn->param_index.v[0];
        in.shape = &ps->tuple[in.idx[0]];
        in.sharding = g.a ? shd_tuple_element(g.a, plan_param_sharding(c, (int32_t)p), ps, (int32_t)in.idx[0]) : NULL;
    } else if (ps && dn->param_index.n == 0) {
        in.shape = ps;
        in.sharding = plan_param_sharding(c, (int32_t)p);
    }
    if (!in.shape || in.shape->type == IR_TUPLE) {
        snprintf(buf, n, "a tuple, or a leaf nested deeper than one level: tessel pairs arrays and the "
                 "elements of tuple parameters");
        ir_arena_free(g.a);
        return;
    }
    int32_t shaped = -1, sharded = -1;
    if (g.a && output_leaves(&g, &c->out_shape, plan_root_sharding(c), -1, (Leaf){0}) == IR_OK)
        for (int32_t k = 0; k < g.nout; k++) {
            const IrShape *os = g.out[k].shape;
            if (os->type != in.shape->type || os->rank != in.shape->rank ||
                !ir_dims_equal(os->dims, in.shape->dims, os->rank))
                continue;
            if (shaped < 0)
                shaped = k;
            if (sharded < 0 && same_kind(&in, &g.out[k]))
                sharded = k;
        }
    ts_free(g.out);
    ir_arena_free(g.a);
    char *sh = ir_shape_str(in.shape, false);
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
