/*
 * inputs.c: the reference run without the command line. Binds user inputs
 * (.npy files by parameter index, INDEX.LEAF or name; deterministic random
 * fills for the rest) to the entry parameters, runs the entry computation
 * on one device (steps feeding aliased outputs back), and summarises the
 * outputs (api/outdir.c writes them).
 *
 * Leaves are the unit everywhere: parameter p with a tuple shape has
 * ir_shape_leaf_count leaves, depth first, and each leaf is one .npy file
 * or one random fill; leaf k of the random inputs counts across all
 * parameters in order (DESIGN.md).
 */
#include <assert.h>
#include "program.h"
#include "run_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static IrStatus fail(IrDiag *d, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static IrStatus fail(IrDiag *d, IrStatus st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ir_verror(d, st, NULL, NULL, (IrPos){0, 0}, fmt, ap);
    va_end(ap);
    return st;
}

/* The shape of entry parameter p, or NULL when the entry has no
 * parameter(p) instruction. */
static const IrShape *param_shape(const IrComputation *c, int32_t p)
{
    if (p < 0 || p >= c->nparam || c->param[p] < 0 || c->param[p] >= c->ninstr)
        return NULL;
    return &c->instr[c->param[p]].shape;
}

int64_t rt_entry_leaf_count(const IrModule *m)
{
    const IrComputation *c = m ? ir_entry(m) : NULL;
    if (!c)
        return -1;
    int64_t n = 0;
    for (int32_t p = 0; p < c->nparam; p++) {
        const IrShape *s = param_shape(c, p);
        n += s ? ir_shape_leaf_count(s) : 0;
    }
    return n;
}

/* Where each parameter's leaves start in the flat leaf numbering, and
 * the file bound to each leaf (run_internal.h). */
typedef RtLeafBinding Leaves;

static void leaves_free(Leaves *l)
{
    ts_free(l->first);
    ts_free((void *)l->path);
    ts_free((void *)l->array);
    ts_free((void *)l->shape);
    ts_free(l->zero);
    l->zero = NULL;
    l->first = NULL;
    l->path = NULL;
    l->array = NULL;
    l->shape = NULL;
}

static IrStatus leaves_init(const IrComputation *c, Leaves *l, IrDiag *d)
{
    l->nparam = c->nparam;
    l->first = ts_calloc((size_t)c->nparam + 1, sizeof *l->first);
    if (!l->first)
        return fail(d, IR_ENOMEM, "out of memory");
    for (int32_t p = 0; p < c->nparam; p++) {
        const IrShape *s = param_shape(c, p);
        if (!s)
            return fail(d, IR_EINPUT, "the entry computation has no parameter(%d)", (int)p);
        l->first[p + 1] = l->first[p] + ir_shape_leaf_count(s);
    }
    l->path = ts_calloc((size_t)l->first[c->nparam] + 1, sizeof *l->path);
    l->array = ts_calloc((size_t)l->first[c->nparam] + 1, sizeof *l->array);
    l->shape = ts_calloc((size_t)l->first[c->nparam] + 1, sizeof *l->shape);
    l->zero = ts_calloc((size_t)l->first[c->nparam] + 1, sizeof *l->zero);
    if (!l->path || !l->array || !l->shape || !l->zero)
        return fail(d, IR_ENOMEM, "out of memory");
    for (int32_t p = 0; p < c->nparam; p++)
        ir_shape_leaves(param_shape(c, p), l->shape + l->first[p]);
    return IR_OK;
}

/* Resolve an input key to (parameter, leaf) by the rule of input_names.c
 * (an exact HLO name, INDEX or INDEX.LEAF, the name JAX records, NAME.LEAF),
 * then check the leaf against the parameter's shape.
 * Example: parameters "x" and "p.1" (a tuple of 2): "p.1" is parameter 1
 * (and an error: it needs a leaf), "1.0" its first leaf, "p.1.1" its
 * second, "x" parameter 0. */
static IrStatus resolve_key(const IrComputation *c, const Leaves *l, const char *key,
                            int32_t *param, int64_t *leaf, IrDiag *d)
{
    int64_t p = -1, lf = -1;
    IrStatus st = rt_input_key_resolve(c, key, &p, &lf, d);
    if (st != IR_OK)
        return st;
    if (p >= c->nparam)
        return fail(d, IR_EINPUT, "input %s: the entry computation has %d parameter%s", key,
                    (int)c->nparam, c->nparam == 1 ? "" : "s");
    int64_t nleaf = l->first[p + 1] - l->first[p];
    bool tuple = param_shape(c, (int32_t)p)->type == IR_TUPLE;
    if (lf < 0 && tuple)
        return fail(d, IR_EINPUT, "input %s: parameter %d is a tuple of %lld leaves; bind "
                    "each leaf as %d.LEAF", key, (int)p, (long long)nleaf, (int)p);
    if (lf < 0)
        lf = 0;
    if (lf >= nleaf)
        return fail(d, IR_EINPUT, "input %s: parameter %d has %lld lea%s", key, (int)p,
                    (long long)nleaf, nleaf == 1 ? "f" : "ves");
    *param = (int32_t)p;
    *leaf = lf;
    return IR_OK;
}

/* "parameter 1 (w: f32[16,32])" or "parameter 0 leaf 1 (p: s32[])" into a
 * heap string. */
static char *leaf_desc(const IrComputation *c, int32_t p, int64_t leaf, bool with_shape)
{
    const IrShape *s = param_shape(c, p);
    const IrShape *ls = ir_shape_leaf(s, (int32_t)leaf);
    char *ss = with_shape ? ir_shape_str(ls, false) : NULL;
    char buf[512];
    const char *name = c->instr[c->param[p]].name;
    if (s->type == IR_TUPLE)
        snprintf(buf, sizeof buf, "parameter %d leaf %lld", (int)p, (long long)leaf);
    else
        snprintf(buf, sizeof buf, "parameter %d", (int)p);
    if (with_shape) {
        size_t k = strlen(buf);
        snprintf(buf + k, sizeof buf - k, " (%s: %s)", name ? name : "?", ss ? ss : "?");
    }
    ts_free(ss);
    return ts_strdup(buf);
}

/* Whether parameter p is optimizer state that starts at zero (tessel
 * grad --adam's m_P, v_P, t). */
static bool is_state(const IrComputation *c, int32_t p)
{
    const char *v = ir_frontend_attr(&c->instr[c->param[p]], "tessel_state");
    return v && strcmp(v, "zeros") == 0;
}

/* Error listing every unbound, non-token leaf: the model's inputs, then
 * the optimizer state (whose remedy is another: it starts at zero). */
static IrStatus report_missing(const IrComputation *c, const Leaves *l, IrDiag *d)
{
    IrStrBuf msg[2] = {{0}, {0}};
    int count[2] = {0, 0};
    for (int32_t p = 0; p < c->nparam; p++) {
        int s = is_state(c, p);
        for (int64_t k = l->first[p]; k < l->first[p + 1]; k++) {
            const IrShape *ls = l->shape[k];
            if (l->path[k] || l->array[k] || l->zero[k] || ls->type == IR_TOKEN)
                continue;
            ir_sb_puts(&msg[s], count[s]++ ? ", " : "");
            ir_sb_put_owned(&msg[s], leaf_desc(c, p, k - l->first[p], true));
        }
    }
    char *names = ir_sb_take(&msg[0]), *state = ir_sb_take(&msg[1]);
    IrStatus st = IR_OK;
    if ((count[0] && !names) || (count[1] && !state))
        st = fail(d, IR_ENOMEM, "out of memory");
    else if (count[0])
        st = fail(d, IR_EINPUT, "no input for %s; bind %s with --input INDEX_OR_NAME=FILE.npy or use "
                  "--random-inputs SEED%s%s%s", names, count[0] == 1 ? "it" : "them",
                  count[1] ? " (the optimizer state " : "", count[1] ? state : "",
                  count[1] ? " starts at zero with --init-state zeros)" : "");
    else if (count[1])
        st = fail(d, IR_EINPUT, "no input for the optimizer state %s; start it at zero with --init-state "
                  "zeros (as an optimizer starts), or bind it with --input NAME=FILE.npy (a checkpoint's)",
                  state);
    ts_free(names);
    ts_free(state);
    return st;
}

/* --init-state zeros: the unbound leaves of the optimizer state. */
static void mark_zero_state(const IrComputation *c, Leaves *l)
{
    for (int32_t p = 0; p < c->nparam; p++)
        for (int64_t k = l->first[p]; is_state(c, p) && k < l->first[p + 1]; k++)
            l->zero[k] = !l->path[k] && !l->array[k];
}

/* The value of one leaf: from its file, random, or an empty token. */
static IrStatus load_leaf(const IrComputation *c, const Leaves *l, int32_t p, int64_t k,
                          const RtBindOptions *opt, DevValue **out, IrDiag *d)
{
    const IrShape *ls = l->shape[k];
    DevValue *v = ls->type == IR_TOKEN || l->zero[k] ? dev_value_new(ls) : dev_value_new_uninit(ls);
    if (!v)
        return fail(d, IR_ENOMEM, "out of memory for %s", ir_type_name(ls->type));
    IrStatus st = IR_OK;
    if (l->zero[k]) {
        /* optimizer state at zero: dev_value_new's */
    } else if (ls->type != IR_TOKEN && (l->path[k] || l->array[k])) {
        char *what = leaf_desc(c, p, k - l->first[p], false);
        int64_t zero[IR_MAX_RANK] = {0};
        st = !what       ? fail(d, IR_ENOMEM, "out of memory")
             : l->path[k] ? rt_npy_read(l->path[k], ls, what, v->data, d)
                          : rt_array_read_box(l->array[k], ls, what, zero, ls->dims, v->data, d);
        ts_free(what);
    } else if (ls->type != IR_TOKEN) {
        st = rt_random_fill(opt->seed, (uint64_t)k, ls, v->data, d);
    }
    if (st != IR_OK) {
        dev_value_unref(v);
        return st;
    }
    *out = v;
    return IR_OK;
}

/* Assemble the value of shape `s` from leaves[*next ...] (taking their
 * references), recursively for nested tuples. */
static DevValue *assemble(const IrShape *s, DevValue **leaves, int64_t *next)
{
    if (s->type != IR_TUPLE) {
        DevValue *v = leaves[*next];
        leaves[(*next)++] = NULL;
        return v;
    }
    DevValue **elems = ts_calloc((size_t)s->ntuple + 1, sizeof *elems);
    bool ok = elems != NULL;
    for (int32_t i = 0; i < s->ntuple; i++) {
        DevValue *e = assemble(&s->tuple[i], leaves, next);
        if (ok && !(elems[i] = e))
            ok = false;
        else if (!ok)
            dev_value_unref(e);
    }
    if (!ok) {
        for (int32_t i = 0; elems && i < s->ntuple; i++)
            dev_value_unref(elems[i]);
        ts_free(elems);
        return NULL;
    }
    DevValue *t = dev_value_tuple(s, s->ntuple, elems);
    ts_free(elems);
    return t;
}

/* Record the user inputs in l->path, rejecting unknown keys and leaves
 * bound twice. */
static IrStatus bind_keys(const IrComputation *c, Leaves *l, const RtBindOptions *opt,
                          IrDiag *d)
{
    for (int32_t i = 0; i < opt->ninputs; i++) {
        int32_t p = 0;
        int64_t leaf = 0;
        IrStatus st = resolve_key(c, l, opt->inputs[i].key, &p, &leaf, d);
        if (st != IR_OK)
            return st;
        int64_t k = l->first[p] + leaf;
        const RtInput *in = &opt->inputs[i];
        if (!in->path == !in->array)
            return fail(d, IR_EINPUT, "input %s: give a .npy file or an array, %s", in->key,
                        in->path ? "not both" : "not neither");
        if (l->path[k] || l->array[k])
            return fail(d, IR_EINPUT, "input %s: parameter %d%s is bound twice (%s and %s)", in->key, (int)p,
                        param_shape(c, p)->type == IR_TUPLE ? " leaf" : "",
                        l->path[k] ? l->path[k] : "an array", in->path ? in->path : "an array");
        l->path[k] = in->path;
        l->array[k] = in->array;
    }
    return IR_OK;
}

void rt_args_free(RtArgs *a)
{
    for (int32_t i = 0; a->args && i < a->nargs; i++)
        dev_value_unref(a->args[i]);
    ts_free(a->args);
    a->args = NULL;
    a->nargs = 0;
}

/* Load every leaf, then assemble the parameters. */
/* Every file bound to a leaf, checked against it (header, dtype, shape,
 * size) before any leaf is allocated: a header declaring 16 GB over 16
 * bytes of data is "truncated", not an allocation of the 16 GB. */
static IrStatus check_files(const IrComputation *c, const Leaves *l, IrDiag *d)
{
    IrStatus st = IR_OK;
    for (int32_t p = 0; st == IR_OK && p < c->nparam; p++)
        for (int64_t k = l->first[p]; st == IR_OK && k < l->first[p + 1]; k++) {
            if (!l->path[k] || l->zero[k] || l->shape[k]->type == IR_TOKEN)
                continue;
            char *what = leaf_desc(c, p, k - l->first[p], false);
            st = what ? rt_npy_check(l->path[k], l->shape[k], what, d) : fail(d, IR_ENOMEM, "out of memory");
            ts_free(what);
        }
    return st;
}

static IrStatus load_all(const IrComputation *c, const Leaves *l, const RtBindOptions *opt,
                         RtArgs *out, IrDiag *d)
{
    IrStatus checked = check_files(c, l, d);
    if (checked != IR_OK)
        return checked;
    int64_t nleaf = l->first[c->nparam];
    DevValue **leaves = ts_calloc((size_t)nleaf + 1, sizeof *leaves);
    out->args = ts_calloc((size_t)c->nparam + 1, sizeof *out->args);
    IrStatus st = leaves && out->args ? IR_OK : fail(d, IR_ENOMEM, "out of memory");
    for (int32_t p = 0; st == IR_OK && p < c->nparam; p++)
        for (int64_t k = l->first[p]; st == IR_OK && k < l->first[p + 1]; k++)
            st = load_leaf(c, l, p, k, opt, &leaves[k], d);
    int64_t next = 0;
    for (int32_t p = 0; st == IR_OK && p < c->nparam; p++) {
        out->args[p] = assemble(param_shape(c, p), leaves, &next);
        if (!out->args[p])
            st = fail(d, IR_ENOMEM, "out of memory");
        out->nargs = p + 1;
    }
    for (int64_t k = 0; leaves && k < nleaf; k++)
        dev_value_unref(leaves[k]);
    ts_free(leaves);
    if (st != IR_OK)
        rt_args_free(out);
    return st;
}

IrStatus rt_resolve_inputs(const IrModule *m, const RtBindOptions *opt, RtLeafBinding *out,
                           IrDiag *d)
{
    *out = (RtLeafBinding){0};
    const IrComputation *c = ir_entry(m);
    if (!c)
        return fail(d, IR_EINPUT, "the module has no entry computation");
    IrStatus st = leaves_init(c, out, d);
    if (st == IR_OK)
        st = bind_keys(c, out, opt, d);
    if (st == IR_OK && opt->zero_state)
        mark_zero_state(c, out);
    if (st == IR_OK && !opt->random)
        st = report_missing(c, out, d);
    if (st != IR_OK)
        leaves_free(out);
    return st;
}

void rt_leaf_binding_free(RtLeafBinding *b)
{
    leaves_free(b);
}

char *rt_input_leaf_desc(const IrModule *m, int32_t p, int64_t leaf)
{
    const IrComputation *c = ir_entry(m);
    if (!c || !param_shape(c, p))
        return NULL;
    return leaf_desc(c, p, leaf, false);
}

IrStatus rt_bind_inputs(const IrModule *m, const RtBindOptions *opt, RtArgs *out, IrDiag *d)
{
    out->nargs = 0;
    out->args = NULL;
    Leaves l = {0};
    IrStatus st = rt_resolve_inputs(m, opt, &l, d);
    if (st == IR_OK)
        st = load_all(ir_entry(m), &l, opt, out, d);
    leaves_free(&l);
    return st;
}

/* Does collective `ins` exchange data between devices of a module of
 * `ndev` devices? Groups absent or empty mean all of them; a
 * collective-permute moves data unless every pair is a device to itself. */
static bool crosses_devices(const IrInstr *ins, int64_t ndev)
{
    IrOpcode op = ins->op; /* an async form wraps its collective in a computation: seen there */
    if (ndev <= 1 || ir_op_family(op) != FAM_COLLECTIVE || op == OP_ALL_REDUCE_DONE || op == OP_ALL_GATHER_DONE ||
        op == OP_COLLECTIVE_PERMUTE_DONE)
        return false;
    if (op == OP_COLLECTIVE_PERMUTE || op == OP_COLLECTIVE_PERMUTE_START) {
        const IrI64List *p = &ins->a.x->source_target_pairs;
        for (int32_t i = 0; i + 1 < p->n; i += 2)
            if (p->v[i] != p->v[i + 1])
                return true;
        return false;
    }
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if (!g->present || g->ngroups == 0)
        return true;
    for (int32_t i = 0; i < g->ngroups; i++)
        if (g->group_size[i] > 1)
            return true;
    return false;
}

IrStatus rt_check_reference(const IrModule *m, IrDiag *d)
{
    int64_t np = m->num_partitions > 0 ? m->num_partitions : 1, nr = m->replica_count > 0 ? m->replica_count : 1;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            if (crosses_devices(ins, np * nr))
                return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                                "%s: --reference runs the module on one device, but this %s is a collective "
                                "over more than one device (the module's %lld: num_partitions=%lld, "
                                "replica_count=%lld): it exchanges data one device alone does not have, so the "
                                "answers would differ. Run it partitioned, or replay it as an SPMD program with "
                                "--spmd",
                                ins->name, ir_op_name(ins->op), (long long)(np * nr), (long long)np, (long long)nr);
        }
    return IR_OK;
}

static IrStatus run_reference(const IrModule *m, const RtArgs *args, int64_t max_trips,
                              const DevHostTransfers *host, DevValue **out, IrDiag *d)
{
    /* Host custom-calls (tessel_print, tessel_save) run in the reference
     * too: it is the whole module on one device and this host. It runs
     * unfused, one kernel call per instruction: the plainest path is the
     * one partitioned (fused) runs are checked against. */
    RtHostCtx hc = {.silent = false, .saves = args->saves};
    DevCustomCalls custom = rt_host_calls(&hc);
    DevExecOptions opt = {.custom = &custom, .no_fusion = true, .host = host, .max_while_iterations = max_trips};
    if (m->entry < 0)
        return fail(d, IR_EINPUT, "the module has no entry computation");
    return dev_execute(m, m->entry, args->nargs, args->args, &opt, out, d);
}

/* ---- steps: aliased outputs become the next step's parameters ---- */

/* The shape at `idx` inside `s` (tuple element by element), or NULL. */
static const IrShape *shape_at(const IrShape *s, const IrShapeIndex *idx)
{
    for (int32_t k = 0; s && k < idx->n; k++)
        s = s->type == IR_TUPLE && idx->v[k] >= 0 && idx->v[k] < s->ntuple ? &s->tuple[idx->v[k]] : NULL;
    return s;
}

/* Is a a prefix of b (or equal)? {1} is a prefix of {1,0} and of {1}. */
static bool index_prefix(const IrShapeIndex *a, const IrShapeIndex *b)
{
    if (a->n > b->n)
        return false;
    for (int32_t k = 0; k < a->n; k++)
        if (a->v[k] != b->v[k])
            return false;
    return true;
}

/* "{0,1}" into buf (cut short when it does not fit). */
static const char *index_str(const IrShapeIndex *ix, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "{");
    for (int32_t j = 0; j < ix->n && k < cap; j++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", j ? "," : "", (long long)ix->v[j]);
    if (k < cap)
        snprintf(buf + k, cap - k, "}");
    return buf;
}

/* An error at alias al: at its place in m's header when the parser saw it. */
static IrStatus alias_fail(IrDiag *d, const IrModule *m, const IrAlias *al, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static IrStatus alias_fail(IrDiag *d, const IrModule *m, const IrAlias *al, IrStatus st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool placed = al->pos.line > 0;
    ir_verror(d, st, placed ? m->file : NULL, placed ? m->src : NULL, placed ? al->pos : (IrPos){0, 0}, fmt, ap);
    va_end(ap);
    return st;
}

/* Rule (XLA's, for a tuple parameter): an alias may name the parameter
 * whole ({}) or a value inside it ({1}, {1,0}); the output at its index
 * has that value's shape, and no two aliases name one value or one inside
 * the other. Example: p = (w, m) with {0}: (0, {0}) and {1}: (0, {1}) is
 * well formed; {0}: (0, {}) beside {1}: (0, {1}) names m twice. */
IrStatus rt_check_aliases(const IrModule *m, IrDiag *d)
{
    const IrComputation *c = ir_entry(m);
    if (!c)
        return fail(d, IR_EINPUT, "the module has no entry computation");
    const IrShape *root = &c->instr[c->root].shape;
    for (int32_t k = 0; k < m->nalias; k++) {
        const IrAlias *al = &m->alias[k];
        int64_t p = al->param_number;
        const IrShape *ps = p >= 0 && p < c->nparam ? param_shape(c, (int32_t)p) : NULL;
        const IrShape *os = shape_at(root, &al->output_index);
        char pi[64], oi[64];
        index_str(&al->param_index, pi, sizeof pi);
        index_str(&al->output_index, oi, sizeof oi);
        if (!ps)
            return alias_fail(d, m, al, IR_EINPUT, "input_output_alias: parameter %lld does not exist", (long long)p);
        const IrShape *ls = shape_at(ps, &al->param_index);
        if (!ls) {
            char *b = ir_shape_str(ps, false);
            IrStatus st = alias_fail(d, m, al, IR_EINPUT, "input_output_alias: parameter %lld (%s) has no value at "
                                     "index %s", (long long)p, b ? b : "?", pi);
            ts_free(b);
            return st;
        }
        if (!os)
            return alias_fail(d, m, al, IR_EINPUT, "input_output_alias: the result has no output at index %s "
                              "(alias %d)", oi, (int)k);
        if (!ir_shape_equal(os, ls)) {
            char *a = ir_shape_str(os, false), *b = ir_shape_str(ls, false);
            IrStatus st = alias_fail(d, m, al, IR_EINPUT, "input_output_alias: the output at %s, of shape %s, "
                                     "cannot be parameter %lld%s%s, of shape %s, in the next step", oi,
                                     a ? a : "?", (long long)p, al->param_index.n ? " at " : "",
                                     al->param_index.n ? pi : "", b ? b : "?");
            ts_free(a);
            ts_free(b);
            return st;
        }
        for (int32_t j = 0; j < k; j++) {
            const IrAlias *bl = &m->alias[j];
            if (bl->param_number == p &&
                (index_prefix(&bl->param_index, &al->param_index) || index_prefix(&al->param_index, &bl->param_index)))
                return alias_fail(d, m, al, IR_EINPUT, "input_output_alias: parameter %lld is aliased twice "
                                  "(at %s, and by alias %d at %s)", (long long)p, pi, (int)j,
                                  index_str(&bl->param_index, oi, sizeof oi));
        }
    }
    return IR_OK;
}

/* Does an alias name a value inside parameter p (not p whole)? */
static bool has_leaf_alias(const IrModule *m, int64_t p)
{
    for (int32_t k = 0; k < m->nalias; k++)
        if (m->alias[k].param_number == p && m->alias[k].param_index.n > 0)
            return true;
    return false;
}

/* The alias naming parameter p at exactly `path` (-1: none); with
 * `within`, also one naming a value around it (a prefix of path). */
static int32_t alias_at(const IrModule *m, int64_t p, const IrShapeIndex *path, bool within)
{
    for (int32_t k = 0; k < m->nalias; k++) {
        const IrAlias *al = &m->alias[k];
        if (al->param_number == p && index_prefix(&al->param_index, path) &&
            (within || al->param_index.n == path->n))
            return k;
    }
    return -1;
}

static int32_t shape_depth(const IrShape *s)
{
    int32_t d = 0;
    for (int32_t i = 0; s->type == IR_TUPLE && i < s->ntuple; i++) {
        int32_t e = shape_depth(&s->tuple[i]);
        d = e > d ? e : d;
    }
    return s->type == IR_TUPLE ? d + 1 : 0;
}

/* Keep, in k->leaf[*at ..), a reference to each leaf of v (parameter p's
 * value at `path`, depth first) that no alias of p names. */
static void keep_leaves(const IrModule *m, int64_t p, DevValue *v, IrShapeIndex *path, RtKept *k, int32_t *at)
{
    if (v->shape.type != IR_TUPLE) {
        if (alias_at(m, p, path, true) < 0 && *at < k->n && !k->leaf[*at])
            k->leaf[*at] = dev_value_ref(v);
        (*at)++;
        return;
    }
    for (int32_t i = 0; i < v->nelems; i++) {
        path->v[path->n++] = i;
        keep_leaves(m, p, v->elems[i], path, k, at);
        path->n--;
    }
}

/* Rule (JAX's for a donated pytree, XLA's for a tuple parameter): the
 * leaves of a tuple parameter that no alias names are the same inputs at
 * every step. A donated tuple is handed over whole and the executor frees
 * each leaf at its last read, so the step loop keeps a reference to those
 * leaves before each step (which also keeps the executor from writing
 * into them) and rt_feed_aliases puts them back. */
IrStatus rt_keep_unaliased(const IrModule *m, DevValue *const *args, int32_t nargs, RtKept *k, IrDiag *d)
{
    const IrComputation *c = ir_entry(m);
    if (!c)
        return fail(d, IR_EINPUT, "the module has no entry computation");
    int32_t n = 0, depth = 0;
    bool any = false;
    for (int32_t p = 0; p < c->nparam && p < nargs; p++) {
        const IrShape *ps = param_shape(c, p);
        n += ps ? ir_shape_leaf_count(ps) : 1;
        if (ps && has_leaf_alias(m, p)) {
            any = true;
            int32_t e = shape_depth(ps);
            depth = e > depth ? e : depth;
        }
    }
    if (!any)
        return IR_OK;
    if (!k->leaf && !(k->leaf = ts_calloc((size_t)n, sizeof *k->leaf)))
        return ir_oom(d, NULL);
    k->n = n;
    int64_t *pv = ts_malloc((size_t)(depth > 0 ? depth : 1) * sizeof *pv);
    if (!pv)
        return ir_oom(d, NULL);
    int32_t at = 0;
    for (int32_t p = 0; p < c->nparam && p < nargs; p++) {
        const IrShape *ps = param_shape(c, p);
        int32_t nleaf = ps ? ir_shape_leaf_count(ps) : 1;
        IrShapeIndex path = {.n = 0, .v = pv};
        int32_t first = at;
        if (ps && args[p] && has_leaf_alias(m, p))
            keep_leaves(m, p, args[p], &path, k, &at);
        at = first + nleaf;
    }
    ts_free(pv);
    return IR_OK;
}

void rt_kept_release(RtKept *k)
{
    for (int32_t i = 0; k->leaf && i < k->n; i++)
        dev_value_unref(k->leaf[i]);
    ts_free(k->leaf);
    *k = (RtKept){0};
}

/* The value inside `v` at `idx` (rt_check_aliases proved it there). */
static DevValue *value_at(DevValue *v, const IrShapeIndex *idx)
{
    for (int32_t j = 0; j < idx->n; j++) {
        assert(v->shape.type == IR_TUPLE && idx->v[j] < v->nelems);
        v = v->elems[idx->v[j]];
    }
    return v;
}

/* Parameter p's value of shape s at `path` for the next step: the output
 * an alias names there, else a tuple of its elements so built, else the
 * leaf kept at k->leaf[*at] (moved out). NULL on OOM. */
static DevValue *next_value(const IrModule *m, int64_t p, const IrShape *s, IrShapeIndex *path, DevValue *result,
                            RtKept *k, int32_t *at)
{
    int32_t a = alias_at(m, p, path, false);
    if (a >= 0) {
        *at += ir_shape_leaf_count(s);
        return dev_value_ref(value_at(result, &m->alias[a].output_index));
    }
    if (s->type != IR_TUPLE) {
        assert(*at < k->n && k->leaf[*at]); /* rt_keep_unaliased kept it */
        DevValue *v = *at < k->n ? k->leaf[*at] : NULL;
        if (*at < k->n)
            k->leaf[*at] = NULL;
        (*at)++;
        return v;
    }
    DevValue **el = ts_calloc((size_t)(s->ntuple > 0 ? s->ntuple : 1), sizeof *el);
    if (!el)
        return NULL;
    for (int32_t i = 0; i < s->ntuple; i++) {
        path->v[path->n++] = i;
        el[i] = next_value(m, p, &s->tuple[i], path, result, k, at);
        path->n--;
    }
    DevValue *t = dev_value_tuple(s, s->ntuple, el); /* releases el's references on failure */
    ts_free(el);
    return t;
}

/* Rule: after step s, parameter p of step s+1 is the output aliased to it
 * (a new reference to the same buffer: moved, never copied); a tuple
 * parameter whose leaves are aliased is rebuilt from those outputs and its
 * kept leaves (rt_keep_unaliased); parameters without an alias keep their
 * values. Example: w' = w - 0.1*g(x, w) with {0}: (1, {}) runs step 2 on
 * (x, w'); p = (w, m, lr) with {0}: (0, {0}) and {1}: (0, {1}) runs step 2
 * on ((w', m', lr), x). */
IrStatus rt_feed_aliases(const IrModule *m, DevValue *result, DevValue **args, RtKept *k, IrDiag *d)
{
    const IrComputation *c = ir_entry(m);
    IrStatus st = IR_OK;
    for (int32_t j = 0; j < m->nalias; j++) {
        const IrAlias *al = &m->alias[j];
        /* rt_check_aliases proved every index in range */
        assert(al->param_number >= 0 && al->param_number < c->nparam);
        if (al->param_index.n > 0)
            continue;
        DevValue *moved = dev_value_ref(value_at(result, &al->output_index));
        dev_value_unref(args[al->param_number]);
        args[al->param_number] = moved;
    }
    int32_t at = 0;
    for (int32_t p = 0; p < c->nparam && st == IR_OK; p++) {
        const IrShape *ps = param_shape(c, p);
        int32_t first = at;
        if (ps && has_leaf_alias(m, p)) {
            int64_t *pv = ts_malloc((size_t)(shape_depth(ps) + 1) * sizeof *pv);
            IrShapeIndex path = {.n = 0, .v = pv};
            DevValue *v = pv ? next_value(m, p, ps, &path, result, k, &at) : NULL;
            ts_free(pv);
            if (!v)
                st = ir_oom(d, "feeding a tuple parameter to the next step");
            dev_value_unref(args[p]);
            args[p] = v;
        }
        at = first + (ps ? ir_shape_leaf_count(ps) : 1);
    }
    for (int32_t i = 0; k && k->leaf && i < k->n; i++) { /* what was kept and not fed (none when all went well) */
        dev_value_unref(k->leaf[i]);
        k->leaf[i] = NULL;
    }
    dev_value_unref(result);
    return st;
}

IrStatus rt_run_reference_steps(const IrModule *m, RtArgs *args, int64_t steps, int64_t max_trips,
                                const DevHostTransfers *host, const RtStepHook *hook, DevValue **out, IrDiag *d)
{
    *out = NULL;
    IrStatus st = rt_check_reference(m, d);
    if (st == IR_OK && steps > 1)
        st = rt_check_aliases(m, d);
    RtKept kept = {0};
    for (int64_t s = 0; st == IR_OK && s < (steps > 1 ? steps : 1); s++) {
        DevValue *r = NULL;
        struct timespec t0, t1;
        if (s + 1 < steps)
            st = rt_keep_unaliased(m, args->args, args->nargs, &kept, d);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (st == IR_OK)
            st = run_reference(m, args, max_trips, host, &r, d);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (st == IR_OK && hook && hook->fn)
            hook->fn(hook->ctx, s + 1, steps > 1 ? steps : 1,
                     (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, r);
        if (st == IR_OK && s + 1 < steps)
            st = rt_feed_aliases(m, r, args->args, &kept, d);
        else
            *out = r;
    }
    rt_kept_release(&kept);
    if (st != IR_OK) {
        dev_value_unref(*out);
        *out = NULL;
    }
    return st;
}

/* ---- summaries ---- */

/* Append a number: integers exactly, floats with 6 significant digits. */
static void put_num(char *buf, size_t cap, size_t *k, IrType t, const void *data, int64_t i)
{
    if (*k >= cap)
        return;
    if (ir_type_is_signed_int(t))
        *k += (size_t)snprintf(buf + *k, cap - *k, "%lld", (long long)dev_load_i64(t, data, i));
    else if (ir_type_is_unsigned_int(t) || t == IR_PRED)
        *k += (size_t)snprintf(buf + *k, cap - *k, "%llu",
                               (unsigned long long)dev_load_u64(t, data, i));
    else if (isnan(dev_load_f64(t, data, i)))
        *k += (size_t)snprintf(buf + *k, cap - *k, "nan"); /* not "-nan" */
    else
        *k += (size_t)snprintf(buf + *k, cap - *k, "%.6g", dev_load_f64(t, data, i));
}

static void put_dbl(char *buf, size_t cap, size_t *k, double v)
{
    if (*k < cap)
        *k += (size_t)snprintf(buf + *k, cap - *k, "%.6g", v);
}

/* Complex values: the mean and the first values, as numpy prints them
 * ("(1.5-2j)"); a complex array has no min or max. */
static char *complex_summary(char *buf, size_t cap, size_t k, const DevValue *v, int64_t n)
{
    bool c64 = v->shape.type == IR_C64;
    const float *f = (const float *)(const void *)v->data;
    const double *g = (const double *)(const void *)v->data;
    double sr = 0, si = 0;
    for (int64_t i = 0; i < n; i++) {
        sr += c64 ? f[2 * i] : g[2 * i];
        si += c64 ? f[2 * i + 1] : g[2 * i + 1];
    }
    if (k < cap)
        k += (size_t)snprintf(buf + k, cap - k, " mean (%.6g%+.6gj) first [", sr / (double)n,
                              si / (double)n);
    for (int64_t i = 0; i < n && i < 4 && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s(%.6g%+.6gj)", i ? ", " : "",
                              c64 ? f[2 * i] : g[2 * i], c64 ? f[2 * i + 1] : g[2 * i + 1]);
    if (k < cap)
        snprintf(buf + k, cap - k, n > 4 ? ", ...]" : "]");
    return ts_strdup(buf);
}

char *rt_value_summary(const DevValue *v)
{
    char buf[1024];
    size_t cap = sizeof buf, k = 0;
    char *ss = ir_shape_str(&v->shape, false);
    if (!ss)
        return NULL;
    k += (size_t)snprintf(buf, cap, "%s", ss);
    ts_free(ss);
    IrType t = v->shape.type;
    int64_t n = ir_shape_is_array(&v->shape) ? dev_value_elements(v) : 0;
    if (!ir_shape_is_array(&v->shape) || n == 0)
        return ts_strdup(buf);
    if (ir_type_is_complex(t))
        return complex_summary(buf, cap, k, v, n);
    /* min/max skip NaN; they are counted apart. */
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    int64_t nan = 0, imin = -1, imax = -1;
    for (int64_t i = 0; i < n; i++) {
        double x = dev_load_f64(t, v->data, i);
        if (isnan(x)) {
            nan++;
            continue;
        }
        if (x < lo || imin < 0)
            lo = x, imin = i;
        if (x > hi || imax < 0)
            hi = x, imax = i;
        sum += x;
    }
    if (imin >= 0) {
        k += (size_t)snprintf(buf + k, cap - k, " min ");
        put_num(buf, cap, &k, t, v->data, imin);
        if (k < cap)
            k += (size_t)snprintf(buf + k, cap - k, " max ");
        put_num(buf, cap, &k, t, v->data, imax);
        if (k < cap)
            k += (size_t)snprintf(buf + k, cap - k, " mean ");
        put_dbl(buf, cap, &k, sum / (double)(n - nan));
    }
    if (nan && k < cap)
        k += (size_t)snprintf(buf + k, cap - k, " nan %lld", (long long)nan);
    if (k < cap)
        k += (size_t)snprintf(buf + k, cap - k, " first [");
    for (int64_t i = 0; i < n && i < 4; i++) {
        if (i && k < cap)
            k += (size_t)snprintf(buf + k, cap - k, ", ");
        put_num(buf, cap, &k, t, v->data, i);
    }
    if (k < cap)
        snprintf(buf + k, cap - k, n > 4 ? ", ...]" : "]");
    return ts_strdup(buf);
}
