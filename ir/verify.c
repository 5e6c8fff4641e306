/*
 * verify.c: the verifier. It checks a whole module the way XLA's
 * HloVerifier does and reports the first problem at the position of the
 * instruction (or computation) it is about:
 *
 *   module       an entry computation; unique computation names; unique
 *                instruction names within each computation (names are
 *                scoped by computation, as in XLA's text); no recursion among
 *                computations; the entry's parameters and root match
 *                entry_computation_layout when the header gives one
 *   computation  a root; parameter numbers 0..n-1, each exactly once; no
 *                cycle through operands or control predecessors (topo.c)
 *   instruction  declared shape within the limits (rank, element count,
 *                int64 overflow, tuple width and depth) with a valid
 *                layout; operand counts, operand types, attributes and
 *                called computations (checked by shape inference, infer.c);
 *                the inferred shape equals the declared one (layouts
 *                ignored); constant literals of the right size; shardings
 *                valid for the shape and num_partitions;
 *                all-reduce in partly manual code within one manual subgroup
 *   groups       ir_verify_groups, for a given world (the compile driver's
 *                counts, `tessel check`'s): every id a collective's
 *                replica_groups or a permute's pairs name is in range
 *
 * Nothing is quadratic in the module size: names go through a hash set,
 * parameter numbers through a per-computation array, cycles through Kahn's
 * algorithm (O(n log n) for its stable order), recursion through one
 * depth-first walk of the call graph.
 */
#include "ir.h"

#include <pthread.h>

#include <string.h>

typedef struct Verifier {
    const IrModule *m;
    IrLimits lim;
    IrDiag *d;
    IrArena *scratch; /* inferred shapes and message strings */
    bool names_unique; /* skip the duplicate-name sets (ir_verify_names_unique) */
} Verifier;

static IrStatus verr(Verifier *v, IrPos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static IrStatus verr(Verifier *v, IrPos pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ir_verror(v->d, IR_EINPUT, v->m->file, v->m->src, pos, fmt, ap);
    va_end(ap);
    return IR_EINPUT;
}

static IrStatus vnomem(Verifier *v)
{
    return ir_oom(v->d, NULL);
}

/* Shape text for messages, in the scratch arena. */
static const char *shape_text(Verifier *v, const IrShape *s)
{
    char *h = ir_shape_str(s, false);
    if (!h)
        return "?";
    char *r = ir_strdup(v->scratch, h);
    ts_free(h);
    return r ? r : "?";
}

/* ------------------------------------------------------------------ */
/* names                                                               */
/* ------------------------------------------------------------------ */

/* An open-addressing set of names with the position of their first use.
 * `used` lists the occupied slots so the set can be emptied in time
 * proportional to what was put in it. */
typedef struct NameSet {
    size_t cap, nused;
    const char **name;
    IrPos *pos;
    size_t *used;
} NameSet;

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool nameset_init(NameSet *ns, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    ns->cap = cap;
    ns->nused = 0;
    /* Megabytes for a large module, probed at random: big blocks (huge
     * pages). Only `name` needs clearing (pos is read where name is set). */
    ns->name = ir_big_alloc(cap * sizeof *ns->name);
    ns->pos = ir_big_alloc(cap * sizeof *ns->pos);
    ns->used = ts_malloc(cap * sizeof *ns->used);
    if (ns->name)
        memset(ns->name, 0, cap * sizeof *ns->name);
    return ns->name && ns->pos && ns->used;
}

/* Empty the set (every entry goes, so no probe chain is left broken). */
static void nameset_clear(NameSet *ns)
{
    for (size_t i = 0; i < ns->nused; i++)
        ns->name[ns->used[i]] = NULL;
    ns->nused = 0;
}

static void nameset_free(NameSet *ns)
{
    ir_big_free(ns->name);
    ir_big_free(ns->pos);
    ts_free(ns->used);
}

/* Insert; returns the position of an existing equal name, or NULL if new.
 * The set never holds more than half its capacity (sized at init). */
static const IrPos *nameset_put(NameSet *ns, const char *s, IrPos pos)
{
    size_t mask = ns->cap - 1;
    size_t i = name_hash(s) & mask;
    for (; ns->name[i]; i = (i + 1) & mask)
        if (strcmp(ns->name[i], s) == 0)
            return &ns->pos[i];
    ns->name[i] = s;
    ns->pos[i] = pos;
    ns->used[ns->nused++] = i;
    return NULL;
}

static IrStatus check_name(Verifier *v, const char *name, IrPos pos, const char *what)
{
    if (!name || !*name)
        return verr(v, pos, "%s without a name", what);
    if ((int64_t)strlen(name) > v->lim.max_name)
        return verr(v, pos, "%s name is longer than the limit of %lld characters", what,
                    (long long)v->lim.max_name);
    return IR_OK;
}

/* Computation names are unique among computations; instruction names are
 * unique within their computation: names are scoped by computation, as in
 * XLA's text, so reducers `add` and `max` may both call their parameters
 * `a`. One set is reused (cleared) from computation to computation. */
static IrStatus check_name_lengths(Verifier *v)
{
    const IrModule *m = v->m;
    IrStatus st = IR_OK;
    for (int32_t ci = 0; ci < m->ncomp && st == IR_OK; ci++) {
        const IrComputation *c = m->comp[ci];
        st = check_name(v, c->name, c->pos, "computation");
        for (int32_t i = 0; i < c->ninstr && st == IR_OK; i++)
            st = check_name(v, c->instr[i].name, c->instr[i].pos, "instruction");
    }
    return st;
}

static IrStatus check_names(Verifier *v)
{
    const IrModule *m = v->m;
    if (v->names_unique)
        return check_name_lengths(v);
    size_t most = 0;
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        if ((size_t)m->comp[ci]->ninstr > most)
            most = (size_t)m->comp[ci]->ninstr;
    NameSet comps = {0}, instrs = {0};
    IrStatus st = IR_OK;
    if (!nameset_init(&comps, (size_t)m->ncomp) || !nameset_init(&instrs, most)) {
        st = vnomem(v);
        goto done;
    }
    for (int32_t ci = 0; ci < m->ncomp && st == IR_OK; ci++) {
        const IrComputation *c = m->comp[ci];
        if ((st = check_name(v, c->name, c->pos, "computation")) != IR_OK)
            break;
        const IrPos *first = nameset_put(&comps, c->name, c->pos);
        if (first) {
            st = verr(v, c->pos, "duplicate computation name %s (first defined at %d:%d)",
                      c->name, (int)first->line, (int)first->col);
            break;
        }
        nameset_clear(&instrs);
        for (int32_t i = 0; i < c->ninstr; i++) {
            const IrInstr *ins = &c->instr[i];
            if ((st = check_name(v, ins->name, ins->pos, "instruction")) != IR_OK)
                break;
            first = nameset_put(&instrs, ins->name, ins->pos);
            if (first) {
                st = verr(v, ins->pos, "duplicate instruction name %s in computation %s (first "
                          "defined at %d:%d)", ins->name, c->name, (int)first->line,
                          (int)first->col);
                break;
            }
        }
    }
done:
    nameset_free(&comps);
    nameset_free(&instrs);
    return st;
}

/* ------------------------------------------------------------------ */
/* shapes against the limits                                           */
/* ------------------------------------------------------------------ */

static IrStatus check_layout(Verifier *v, const IrInstr *ins, const IrShape *s)
{
    if (!s->has_layout || !s->minor_to_major || s->rank == 0)
        return IR_OK;
    uint64_t seen = 0;
    for (int32_t i = 0; i < s->rank; i++) {
        int32_t k = s->minor_to_major[i];
        if (k < 0 || k >= s->rank || (seen >> k & 1))
            return verr(v, ins->pos, "%s: layout of %s is not a permutation of its %d "
                        "dimensions", ins->name, shape_text(v, s), (int)s->rank);
        seen |= (uint64_t)1 << k;
    }
    return IR_OK;
}

static IrStatus check_shape_limits(Verifier *v, const IrInstr *ins, const IrShape *s, int depth)
{
    if (depth > v->lim.max_depth)
        return verr(v, ins->pos, "%s: tuple shape nested deeper than the limit of %d",
                    ins->name, (int)v->lim.max_depth);
    if (s->type == IR_TUPLE) {
        if (s->ntuple < 0 || s->ntuple > v->lim.max_tuple)
            return verr(v, ins->pos, "%s: tuple of %d elements exceeds the limit of %d",
                        ins->name, (int)s->ntuple, (int)v->lim.max_tuple);
        for (int32_t i = 0; i < s->ntuple; i++) {
            IrStatus st = check_shape_limits(v, ins, &s->tuple[i], depth + 1);
            if (st != IR_OK)
                return st;
        }
        return IR_OK;
    }
    if (s->type <= IR_INVALID || s->type >= IR_TUPLE)
        return verr(v, ins->pos, "%s: invalid element type", ins->name);
    if (s->type == IR_TOKEN)
        return IR_OK;
    int32_t max_rank = v->lim.max_rank < IR_MAX_RANK ? v->lim.max_rank : IR_MAX_RANK;
    if (s->rank < 0 || s->rank > max_rank)
        return verr(v, ins->pos, "%s: rank %d exceeds the limit of %d", ins->name, (int)s->rank,
                    (int)max_rank);
    bool unbounded = false;
    for (int32_t i = 0; i < s->rank; i++) {
        /* `?`: an unbounded dynamic dimension has no size to check */
        if (s->dims[i] == IR_DIM_UNBOUNDED && ir_shape_dim_dynamic(s, i)) {
            unbounded = true;
            continue;
        }
        if (s->dims[i] < 0)
            return verr(v, ins->pos, "%s: dimension %d has negative size %lld", ins->name,
                        (int)i, (long long)s->dims[i]);
    }
    if (unbounded)
        return check_layout(v, ins, s);
    int64_t n = ir_shape_elements(s);
    if (n < 0)
        return verr(v, ins->pos, "%s: the element count of %s overflows int64", ins->name,
                    shape_text(v, s));
    if (n > v->lim.max_elements)
        return verr(v, ins->pos, "%s: %s has %lld elements, more than the limit of %lld",
                    ins->name, shape_text(v, s), (long long)n, (long long)v->lim.max_elements);
    if (ir_shape_bytes(s) < 0)
        return verr(v, ins->pos, "%s: the byte size of %s overflows int64", ins->name,
                    shape_text(v, s));
    return check_layout(v, ins, s);
}

/* ------------------------------------------------------------------ */
/* instructions                                                        */
/* ------------------------------------------------------------------ */

static IrStatus check_constant(Verifier *v, const IrInstr *ins)
{
    int64_t want = ir_shape_bytes(&ins->shape);
    if (!ins->a.literal && want > 0 && !ins->a.literal_elided)
        return verr(v, ins->pos, "%s: constant has no literal", ins->name);
    if (ins->a.literal && ins->a.literal_bytes != want)
        return verr(v, ins->pos, "%s: literal has %lld bytes but %s needs %lld", ins->name,
                    (long long)ins->a.literal_bytes, shape_text(v, &ins->shape),
                    (long long)want);
    return IR_OK;
}

/* XLA's rule for all-reduce in partly manual code (a sharding with a
 * manual subgroup dimension, `last_tile_dims={manual}`): devices that share
 * the indices of the other tile dimensions form one manual subgroup, and a
 * cross-partition all-reduce may only combine devices of one subgroup. With
 * devices=[2,1,2]0,2,1,3 the subgroups are {0,2} and {1,3}, so
 * replica_groups={{2,0},{1,3}} is fine and {{1,0},{2,3}} is not. */
static IrStatus check_manual_all_reduce(Verifier *v, const IrInstr *ins)
{
    const IrSharding *s = ins->sharding;
    if (ins->op != OP_ALL_REDUCE || !ins->a.channel_id || !s || s->kind != SHD_TILED)
        return IR_OK;
    int32_t md = -1, base = s->ntile - s->nsubgroup;
    for (int32_t k = 0; k < s->nsubgroup; k++)
        if (s->subgroup[k] == SUBGROUP_MANUAL)
            md = base + k;
    if (md < 0)
        return IR_OK;
    if (!ins->a.use_global_device_ids)
        return verr(v, ins->pos, "%s: a cross-partition all-reduce in partly manual code must "
                    "use global device ids (use_global_device_ids=true)", ins->name);
    int64_t maxdev = -1;
    for (int64_t i = 0; i < s->ndevices; i++)
        maxdev = s->devices[i] > maxdev ? s->devices[i] : maxdev;
    int64_t *group = ts_malloc((size_t)(maxdev + 1 > 0 ? maxdev + 1 : 1) * sizeof *group);
    if (!group)
        return vnomem(v);
    for (int64_t i = 0; i <= maxdev; i++)
        group[i] = -1;
    /* Walk the tile assignment in row-major order; the subgroup id is the
     * mixed-radix number of every tile index but the manual one. */
    for (int64_t i = 0; i < s->ndevices; i++) {
        int64_t rest = i, id = 0, scale = 1;
        for (int32_t d = s->ntile - 1; d >= 0; d--) {
            int64_t idx = rest % s->tile[d];
            rest /= s->tile[d];
            if (d != md) {
                id += idx * scale;
                scale *= s->tile[d];
            }
        }
        if (s->devices[i] >= 0)
            group[s->devices[i]] = id;
    }
    IrStatus st = IR_OK;
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    for (int32_t k = 0; k < g->ngroups && st == IR_OK; k++) {
        int64_t first = -1, first_dev = -1;
        for (int32_t j = 0; j < g->group_size[k] && st == IR_OK; j++) {
            int64_t dev = g->groups[k][j];
            if (dev < 0 || dev > maxdev || group[dev] < 0)
                continue;
            if (first < 0) {
                first = group[dev];
                first_dev = dev;
            } else if (group[dev] != first) {
                st = verr(v, ins->pos, "%s: all-reduce replica group %d combines devices %lld "
                          "and %lld, which belong to different manual subgroups of the sharding",
                          ins->name, (int)k, (long long)first_dev, (long long)dev);
            }
        }
    }
    ts_free(group);
    return st;
}

/* Devices a sharding may name: shardings name partitions (every replica
 * runs the same partitioned program), so num_partitions, or 0 (do not
 * check) when the header does not give it. */
static int64_t num_devices(const IrModule *m)
{
    return m->num_partitions > 0 ? m->num_partitions : 0;
}

static IrStatus check_instr(Verifier *v, const IrComputation *c, const IrInstr *ins)
{
    IrStatus st = check_shape_limits(v, ins, &ins->shape, 0);
    if (st != IR_OK)
        return st;
    IrShape inferred;
    if ((st = ir_infer_shape(v->m, c, ins, &inferred, v->scratch, v->d)) != IR_OK)
        return st;
    if (!ir_shape_compatible(&inferred, &ins->shape))
        return verr(v, ins->pos, "%s: declared shape %s does not match the inferred shape %s",
                    ins->name, shape_text(v, &ins->shape), shape_text(v, &inferred));
    if (ins->op == OP_CONSTANT && (st = check_constant(v, ins)) != IR_OK)
        return st;
    if (ins->op == OP_PARAMETER && ins->a.parameter_number < 0)
        return verr(v, ins->pos, "%s: parameter number %lld is negative", ins->name,
                    (long long)ins->a.parameter_number);
    /* a Shardy mesh wider than the header's num_partitions is named as such */
    if (ins->sharding && num_devices(v->m) > 0 &&
        (st = ir_sdy_check_mesh_fits(v->m, num_devices(v->m), ir_sharding_width(ins->sharding), true, v->d)) != IR_OK)
        return st;
    if (ins->sharding &&
        (st = ir_sharding_validate(ins->sharding, &ins->shape, num_devices(v->m), v->d,
                                   v->m->file, v->m->src, ins->pos)) != IR_OK)
        return st;
    return check_manual_all_reduce(v, ins);
}

/* Parameter numbers 0..n-1, each exactly once, n = the number of
 * parameter instructions. */
static IrStatus check_params(Verifier *v, const IrComputation *c)
{
    int32_t n = 0;
    for (int32_t i = 0; i < c->ninstr; i++)
        n += c->instr[i].op == OP_PARAMETER;
    if (n == 0)
        return IR_OK;
    int32_t *at = ts_malloc((size_t)n * sizeof *at);
    if (!at)
        return vnomem(v);
    for (int32_t k = 0; k < n; k++)
        at[k] = -1;
    IrStatus st = IR_OK;
    for (int32_t i = 0; i < c->ninstr && st == IR_OK; i++) {
        const IrInstr *ins = &c->instr[i];
        if (ins->op != OP_PARAMETER)
            continue;
        int64_t pn = ins->a.parameter_number;
        if (pn < 0 || pn >= n)
            st = verr(v, ins->pos, "%s: parameter number %lld is out of range: computation %s "
                      "has %d parameters, numbered 0 to %d", ins->name, (long long)pn, c->name,
                      (int)n, (int)n - 1);
        else if (at[pn] >= 0)
            st = verr(v, ins->pos, "%s: parameter number %lld is already used by %s", ins->name,
                      (long long)pn, c->instr[at[pn]].name);
        else
            at[pn] = i;
    }
    ts_free(at);
    return st;
}

static IrStatus check_range(Verifier *v, const IrComputation *c, int32_t lo, int32_t hi)
{
    IrStatus st = IR_OK;
    for (int32_t i = lo; i < hi && st == IR_OK; i++) {
        st = check_instr(v, c, &c->instr[i]);
        /* The inferred shape is compared and dropped (an error's message
         * is copied into the diag): one scratch block, reused for every
         * instruction, stays in cache instead of megabytes of fresh pages. */
        if (st == IR_OK)
            ir_arena_reset(v->scratch);
    }
    return st;
}

/* The second half of a large computation, checked by a helper thread with
 * a verifier of its own (check_instr reads the module and writes only its
 * verifier's scratch and diag). */
typedef struct HalfCheck {
    Verifier v;
    IrDiag d;
    const IrComputation *c;
    int32_t lo, hi;
    IrStatus st;
} HalfCheck;

static void *half_main(void *arg)
{
    HalfCheck *h = arg;
    (void)pthread_setname_np(pthread_self(), "tessel-verify"); /* for perf and gdb */
    h->st = check_range(&h->v, h->c, h->lo, h->hi);
    return NULL;
}

/* Instructions from which a computation's checks are shared by two
 * threads. */
enum { VERIFY_SPLIT_MIN = 8192 };

/* Every instruction of c, in two halves at once when c is large. The
 * result is the sequential one: the first half's error if it has one,
 * else the second half is checked again here when the helper found an
 * error, so that the diag is the one its first error gives. */
static IrStatus check_instrs(Verifier *v, const IrComputation *c)
{
    int32_t n = c->ninstr, mid = n / 2;
    HalfCheck h = {.v = *v, .c = c, .lo = mid, .hi = n};
    h.v.d = &h.d;
    bool two = n >= VERIFY_SPLIT_MIN && (h.v.scratch = ir_arena_new()) != NULL;
    pthread_t t;
    if (two && pthread_create(&t, NULL, half_main, &h) != 0) {
        ir_arena_free(h.v.scratch);
        two = false;
    }
    IrStatus st = check_range(v, c, 0, two ? mid : n);
    if (two) {
        pthread_join(t, NULL);
        ir_arena_free(h.v.scratch);
        ir_diag_clear(&h.d);
        if (st == IR_OK && h.st != IR_OK)
            st = check_range(v, c, mid, n);
    }
    return st;
}

static IrStatus check_computation(Verifier *v, const IrComputation *c)
{
    if (c->root < 0 || c->root >= c->ninstr)
        return verr(v, c->pos, "computation %s has no ROOT instruction", c->name);
    IrStatus st = check_params(v, c);
    if (st == IR_OK)
        st = check_instrs(v, c);
    if (st != IR_OK)
        return st;
    int32_t *order = NULL;
    st = ir_topo_order(v->m, c, &order, v->d);
    ts_free(order);
    return st;
}

/* ------------------------------------------------------------------ */
/* the call graph                                                      */
/* ------------------------------------------------------------------ */

/* Raise caller's height to callee's + 1 (`ins` is the call); past
 * max_call_depth the nesting is refused at that call. */
static IrStatus raise_height(Verifier *v, int32_t *h, int32_t caller, int32_t callee, const IrInstr *ins)
{
    if (h[callee] + 1 > h[caller])
        h[caller] = h[callee] + 1;
    int32_t max = v->lim.max_call_depth > 0 ? v->lim.max_call_depth : ir_default_limits().max_call_depth;
    if (h[caller] <= max)
        return IR_OK;
    return verr(v, ins->pos, "%s: computation %s calls computations nested more than %d levels deep (--limit depth)",
                ins->name, v->m->comp[caller]->name, (int)max);
}

/* No computation may reach itself through calls, and calls nest at most
 * max_call_depth levels (the passes and the executor recurse on it). One
 * iterative depth-first walk with three colours: meeting a computation
 * that is still on the walk's stack (grey) closes a cycle; a finished
 * (black) computation's height (1 + its deepest callee's) is final, so
 * each computation and call is visited once. */
static IrStatus check_recursion(Verifier *v)
{
    const IrModule *m = v->m;
    int32_t n = m->ncomp;
    uint8_t *colour = ts_calloc((size_t)n, 1);
    int32_t *fc = ts_malloc((size_t)n * sizeof *fc); /* frame: computation */
    int32_t *fi = ts_malloc((size_t)n * sizeof *fi); /* frame: next instruction */
    int32_t *fk = ts_malloc((size_t)n * sizeof *fk); /* frame: next callee of it */
    int32_t *h = ts_malloc((size_t)n * sizeof *h);   /* levels of calls from each computation down */
    IrStatus st = IR_OK;
    if (!colour || !fc || !fi || !fk || !h) {
        st = vnomem(v);
        goto done;
    }
    for (int32_t s = 0; s < n && st == IR_OK; s++) {
        if (colour[s])
            continue;
        int32_t top = 0;
        fc[0] = s;
        fi[0] = fk[0] = 0;
        h[s] = 1;
        colour[s] = 1;
        while (top >= 0 && st == IR_OK) {
            const IrComputation *c = m->comp[fc[top]];
            if (fi[top] >= c->ninstr) {
                colour[fc[top--]] = 2;
                if (top >= 0)
                    st = raise_height(v, h, fc[top], fc[top + 1], &m->comp[fc[top]]->instr[fi[top]]);
                continue;
            }
            const IrInstr *ins = &c->instr[fi[top]];
            if (fk[top] >= ins->ncalled) {
                fi[top]++;
                fk[top] = 0;
                continue;
            }
            int32_t t = ins->called[fk[top]++];
            if (t < 0 || t >= n)
                continue; /* reported by shape inference */
            if (colour[t] == 1)
                st = verr(v, ins->pos, "%s: computation %s calls %s, which is recursive",
                          ins->name, c->name, m->comp[t]->name);
            else if (colour[t] == 2)
                st = raise_height(v, h, fc[top], t, ins);
            else {
                colour[t] = 1;
                h[t] = 1;
                top++;
                fc[top] = t;
                fi[top] = fk[top] = 0;
            }
        }
    }
done:
    ts_free(colour);
    ts_free(fc);
    ts_free(fi);
    ts_free(fk);
    ts_free(h);
    return st;
}

/* ------------------------------------------------------------------ */
/* the entry signature                                                 */
/* ------------------------------------------------------------------ */

/* A small reader for the shapes of entry_computation_layout, e.g.
 * "(f32[8,16]{1,0}, (s32[], token[]))->f32[8]{0}". Layouts (anything in
 * braces) are skipped; dynamic bounds "<=N" read as N. Returns false on
 * anything it does not understand; the check is then skipped. */
typedef struct Reader {
    const char *p;
    IrArena *a;
    int depth;
} Reader;

static void rd_space(Reader *r)
{
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')
        r->p++;
}

static bool rd_shape(Reader *r, IrShape *s);

static bool rd_tuple(Reader *r, IrShape *s)
{
    IrShape *el = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    r->p++; /* '(' */
    rd_space(r);
    while (*r->p != ')') {
        if (n >= (1 << 20) || !IR_ARENA_GROW(r->a, el, cap, n, n + 1))
            return false;
        if (!rd_shape(r, &el[n++]))
            return false;
        rd_space(r);
        if (*r->p == ',')
            r->p++;
        else if (*r->p != ')')
            return false;
        rd_space(r);
    }
    r->p++;
    memset(s, 0, sizeof *s);
    s->type = IR_TUPLE;
    s->ntuple = n;
    s->tuple = el;
    return true;
}

/* [d, <=d, ?, ...]: dyn[i] says whether dimension i is dynamic (bounded
 * `<=d` or unbounded `?`), as the parser reads them. */
static bool rd_dims(Reader *r, int64_t *dims, bool *dyn, int32_t *rank)
{
    r->p++; /* '[' */
    *rank = 0;
    while (*r->p != ']') {
        if (*rank == IR_MAX_RANK)
            return false;
        dyn[*rank] = false;
        if (r->p[0] == '?') {
            r->p++;
            dyn[*rank] = true;
            dims[(*rank)++] = IR_DIM_UNBOUNDED;
        } else {
            if (r->p[0] == '<' && r->p[1] == '=') {
                r->p += 2;
                dyn[*rank] = true;
            }
            if (*r->p < '0' || *r->p > '9')
                return false;
            int64_t d = 0;
            while (*r->p >= '0' && *r->p <= '9') {
                if (d > (INT64_MAX - 9) / 10)
                    return false;
                d = d * 10 + (*r->p++ - '0');
            }
            dims[(*rank)++] = d;
        }
        if (*r->p == ',')
            r->p++;
        else if (*r->p != ']')
            return false;
    }
    r->p++;
    return true;
}

static bool rd_shape(Reader *r, IrShape *s)
{
    if (++r->depth > 64)
        return false;
    rd_space(r);
    if (*r->p == '(') {
        bool ok = rd_tuple(r, s);
        r->depth--;
        return ok;
    }
    const char *b = r->p;
    while ((*r->p >= 'a' && *r->p <= 'z') || (*r->p >= '0' && *r->p <= '9'))
        r->p++;
    IrType t = ir_type_from_name(b, (size_t)(r->p - b));
    int64_t dims[IR_MAX_RANK];
    bool dyn[IR_MAX_RANK];
    int32_t rank = 0;
    if (t == IR_INVALID || *r->p != '[' || !rd_dims(r, dims, dyn, &rank))
        return false;
    if (*r->p == '{') { /* skip the layout, braces balanced */
        int lvl = 0;
        do {
            if (*r->p == '{')
                lvl++;
            else if (*r->p == '}')
                lvl--;
            else if (!*r->p)
                return false;
            r->p++;
        } while (lvl > 0);
    }
    r->depth--;
    if (t == IR_TOKEN) {
        memset(s, 0, sizeof *s);
        s->type = IR_TOKEN;
        return rank == 0;
    }
    if (ir_shape_make(r->a, s, t, rank, dims) != IR_OK)
        return false;
    bool any = false;
    for (int32_t i = 0; i < rank; i++)
        any |= dyn[i];
    if (any) {
        s->dynamic = ir_alloc_array(r->a, (size_t)rank, sizeof(bool));
        if (!s->dynamic)
            return false;
        memcpy(s->dynamic, dyn, (size_t)rank * sizeof(bool));
    }
    return true;
}

static IrStatus check_entry_layout(Verifier *v, const IrComputation *e)
{
    const char *text = v->m->entry_computation_layout;
    if (!text)
        return IR_OK;
    Reader r = {text, v->scratch, 0};
    IrShape params, result;
    rd_space(&r);
    if (*r.p != '(' || !rd_shape(&r, &params))
        return IR_OK;
    rd_space(&r);
    if (r.p[0] != '-' || r.p[1] != '>')
        return IR_OK;
    r.p += 2;
    if (!rd_shape(&r, &result))
        return IR_OK;
    if (params.ntuple != e->nparam)
        return verr(v, e->pos, "entry computation %s has %d parameters but "
                    "entry_computation_layout lists %d", e->name, (int)e->nparam,
                    (int)params.ntuple);
    for (int32_t i = 0; i < e->nparam; i++) {
        if (e->param[i] < 0)
            continue; /* reported by check_params */
        const IrShape *p = &e->instr[e->param[i]].shape;
        if (!ir_shape_equal(p, &params.tuple[i]))
            return verr(v, e->instr[e->param[i]].pos, "parameter %d of the entry computation is "
                        "%s but entry_computation_layout says %s", (int)i, shape_text(v, p),
                        shape_text(v, &params.tuple[i]));
    }
    const IrShape *root = &e->instr[e->root].shape;
    if (!ir_shape_equal(root, &result))
        return verr(v, e->instr[e->root].pos, "the entry computation returns %s but "
                    "entry_computation_layout says %s", shape_text(v, root),
                    shape_text(v, &result));
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* the module                                                          */
/* ------------------------------------------------------------------ */

/* Verify module m against lim (NULL: the defaults). Returns IR_OK, or
 * IR_EINPUT with the first problem in d at its FILE:LINE:COL, or IR_ENOMEM.
 * Reads m only; allocates nothing that outlives the call. */
/* n x r, INT64_MAX when it would overflow (counts from an API caller are
 * not bounded yet). */
static int64_t world_devices(int64_t n, int64_t r)
{
    int64_t g;
    return __builtin_mul_overflow(n, r, &g) ? INT64_MAX : g;
}

/* What a collective's groups (or a permute's pairs) number, in a world of
 * n partitions x r replicas (ir_group_mode), and what that is called. */
static int64_t group_domain(const IrInstr *ins, int64_t n, int64_t r, const char **what)
{
    IrGroupMode mode = ir_group_mode(ins);
    *what = mode == IR_GROUPS_GLOBAL ? "devices" : mode == IR_GROUPS_PARTITION ? "partitions" : "replicas";
    return mode == IR_GROUPS_GLOBAL ? (n > 0 && r > 0 ? world_devices(n, r) : 0) : mode == IR_GROUPS_PARTITION ? n : r;
}

static bool is_grouped_collective(IrOpcode op)
{
    return op == OP_ALL_REDUCE || op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER || op == OP_ALL_TO_ALL ||
           op == OP_COLLECTIVE_BROADCAST || op == OP_COLLECTIVE_REDUCE || op == OP_RAGGED_ALL_TO_ALL ||
           op == OP_ALL_REDUCE_START || op == OP_ALL_GATHER_START;
}

/* Who a collective's groups hold when the world is known, for its errors. */
static const char *groups_meaning(const IrInstr *ins)
{
    if (ins->a.x->replica_groups.ngroups)
        return "as its replica_groups list them";
    switch (ir_group_mode(ins)) {
    case IR_GROUPS_REPLICA:
        return "replica_groups={} with no channel_id is every replica (--num-replicas, else the header's "
               "replica_count, else 1)";
    case IR_GROUPS_PARTITION:
        return "replica_groups={} is every partition (--num-partitions, else the header's num_partitions, else 1)";
    case IR_GROUPS_GLOBAL: return "replica_groups={} is every device (partitions x replicas)";
    default:
        return "replica_groups={} with a channel_id is every replica times every partition (--num-replicas x "
               "--num-partitions, else the header's counts, else 1)";
    }
}

/* An all-gather multiplies dimensions={d} by its group size, a
 * reduce-scatter divides it, an all-to-all splits it: shape inference reads
 * a size the module header does not give off the declared shape (as XLA's
 * parser tests leave the counts to their config), so once the world is
 * known the shapes must agree with it, as XLA's verifier checks them with
 * the module's config (GetSubgroupSize). Else the partitioned program would
 * not verify. */
static IrStatus check_group_shapes(Verifier *v, const IrComputation *c, const IrInstr *ins, int64_t n, int64_t r)
{
    bool gather = ins->op == OP_ALL_GATHER || ins->op == OP_ALL_GATHER_START;
    if (!gather && ins->op != OP_REDUCE_SCATTER && ins->op != OP_ALL_TO_ALL)
        return IR_OK;
    int64_t gs = ir_group_size(ins, n, r);
    if (gs <= 0 || ins->a.dimensions.n != 1)
        return IR_OK;
    int64_t dim = ins->a.dimensions.v[0];
    const IrShape *res = &ins->shape;
    if (ins->op == OP_ALL_GATHER_START) { /* (inputs, gathered) */
        if (res->type != IR_TUPLE || res->ntuple != 2)
            return IR_OK;
        res = &res->tuple[1];
    }
    for (int32_t k = 0; k < ins->nopnd; k++) {
        const IrShape *in = &c->instr[ins->opnd[k]].shape;
        const IrShape *out = ins->nopnd > 1 && res->type == IR_TUPLE ? (k < res->ntuple ? &res->tuple[k] : NULL) : res;
        if (!out || !ir_shape_is_array(in) || !ir_shape_is_array(out) || in->rank != out->rank || dim < 0 ||
            dim >= in->rank)
            continue; /* shape inference reports these */
        int64_t a = in->dims[dim], b = out->dims[dim];
        if (ins->op == OP_ALL_TO_ALL) {
            if (a % gs != 0)
                return verr(v, ins->pos, "%s: all-to-all splits dimension %lld of size %lld among groups of %lld, "
                            "which do not divide it: %s", ins->name, (long long)dim, (long long)a, (long long)gs,
                            groups_meaning(ins));
            continue;
        }
        if (gather ? b == a * gs : a == b * gs)
            continue;
        int64_t says = gather ? (a > 0 ? b / a : 0) : (b > 0 ? a / b : 0);
        return verr(v, ins->pos, "%s: this %s's shapes say %lld take part (%s to %s along dimension %lld), but its "
                    "groups have %lld: %s", ins->name, ir_op_name(ins->op), (long long)says, shape_text(v, in),
                    shape_text(v, out), (long long)dim, (long long)gs, groups_meaning(ins));
    }
    return IR_OK;
}

/* ir_verify_groups, with v's scratch arena for its messages. */
static IrStatus check_groups(Verifier *v, int64_t n, int64_t r)
{
    const IrModule *m = v->m;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            const char *what;
            int64_t domain = group_domain(ins, n, r, &what);
            if (domain <= 0) /* a count not known yet (0) */
                continue;
            if (ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_PERMUTE_START) {
                /* coll/group.c's rule: partition-mode pairs may also be
                 * global ids (a permute across replicas). */
                const IrI64List *p = &ins->a.x->source_target_pairs;
                bool global_ok = ir_group_mode(ins) == IR_GROUPS_PARTITION;
                for (int32_t k = 0; k < p->n; k++)
                    if (p->v[k] < 0 || (p->v[k] >= domain && !(global_ok && (r <= 0 || p->v[k] < world_devices(n, r)))))
                        return verr(v, ins->pos, "%s: source_target_pairs: id %lld is out of range (there are %lld %s)",
                                    ir_op_name(ins->op), (long long)p->v[k], (long long)domain, what);
                continue;
            }
            if (!is_grouped_collective(ins->op))
                continue;
            const IrReplicaGroups *g = &ins->a.x->replica_groups;
            for (int32_t k = 0; g->present && k < g->ngroups; k++)
                for (int32_t j = 0; j < g->group_size[k]; j++) {
                    int64_t id = g->groups[k][j];
                    if (id < 0 || id >= domain)
                        return verr(v, ins->pos, "%s: replica_groups names %lld, but there are %lld %s%s", ins->name,
                                    (long long)id, (long long)domain, what,
                                    what[0] == 'r' ? " (--num-replicas, else the header's replica_count, else 1)"
                                    : what[0] == 'p' ? " (--num-partitions, else the header's num_partitions, else 1)"
                                                     : " (partitions x replicas)");
                }
            IrStatus st = check_group_shapes(v, m->comp[c], ins, n, r);
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}

IrStatus ir_verify_groups(const IrModule *m, int64_t n, int64_t r, IrDiag *d)
{
    Verifier v = {.m = m, .d = d, .scratch = ir_arena_new()};
    if (!v.scratch)
        return vnomem(&v);
    IrStatus st = check_groups(&v, n, r);
    ir_arena_free(v.scratch);
    return st;
}

IrStatus ir_verify(const IrModule *m, const IrLimits *lim, IrDiag *d)
{
    return ir_verify_names_unique(m, lim, d, false);
}

IrStatus ir_verify_names_unique(const IrModule *m, const IrLimits *lim, IrDiag *d, bool names_unique)
{
    Verifier v = {m, lim ? *lim : ir_default_limits(), d, NULL, names_unique};
    if (m->ncomp <= 0 || m->entry < 0 || m->entry >= m->ncomp)
        return verr(&v, (IrPos){0, 0}, "module %s has no ENTRY computation", m->name);
    v.scratch = ir_arena_new();
    if (!v.scratch)
        return vnomem(&v);
    IrStatus st = check_names(&v);
    for (int32_t ci = 0; ci < m->ncomp && st == IR_OK; ci++)
        st = check_computation(&v, m->comp[ci]);
    if (st == IR_OK)
        st = check_recursion(&v);
    if (st == IR_OK)
        st = check_entry_layout(&v, m->comp[m->entry]);
    ir_arena_free(v.scratch);
    return st;
}
