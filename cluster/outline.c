/*
 * outline.c: the output module: each cluster as a computation of its
 * own, and the host computations that call them.
 *
 * Each cluster becomes `cluster_N`: one parameter per value flowing in,
 * named after it and carrying its sharding; its instructions in
 * topological order, small constants cloned in front of their first
 * reader, control edges inside the cluster kept; and a root tuple of the
 * values flowing out with their flat tuple sharding (one entry per array
 * leaf, as XLA's tuple shardings are; none when a value has none). The
 * host computation keeps its host instructions and calls each cluster
 * where the order of form.c puts it:
 *
 *   cluster_0.call = (f32[4]) call(p), to_apply=cluster_0,
 *                    frontend_attributes={_tessel_cluster="0"}
 *   a = f32[4] get-tuple-element(cluster_0.call), index=0
 *
 * The get-tuple-elements are named after the values they stand for, so
 * the host program reads like the source. Control edges between a cluster
 * and the rest become control edges of its call. Computations that device
 * instructions call are cloned once (shared by every cluster that calls
 * them); computations that host control flow runs are rebuilt the same
 * way, callees before callers.
 *
 * Order of the output: the clusters by number (each after the
 * computations it calls), every other computation of the source, then the
 * host computations, the entry last.
 */
#include "cluster_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- copying instructions ---- */

/* A name not used in the output module nor anywhere in the source (so a
 * source instruction copied later never meets it). */
static const char *fresh_name(Extract *x, const char *base)
{
    for (;;) {
        const char *r = ir_unique_name(x->out, base);
        if (!r || !clu_strset_has(&x->srcnames, r))
            return r;
    }
}

static bool copy_sharding(IrArena *a, IrSharding **dst, const IrSharding *src)
{
    *dst = NULL;
    if (!src)
        return true;
    IrSharding *s = ir_alloc(a, sizeof *s);
    if (!s || ir_sharding_copy(a, s, src) != IR_OK)
        return false;
    *dst = s;
    return true;
}

/* Deep copy of a source instruction into the output's arena, with room
 * for its operands and callees (the caller fills them) and no control
 * predecessors (the caller maps them). */
static IrStatus copy_instr(Extract *x, const IrInstr *s, IrInstr *t)
{
    IrArena *a = x->out->arena;
    *t = *s;
    t->name = ir_strdup(a, s->name);
    t->opnd = s->nopnd > 0 ? ir_alloc_array(a, (size_t)s->nopnd, sizeof(int32_t)) : NULL;
    t->called = s->ncalled > 0 ? ir_alloc_array(a, (size_t)s->ncalled, sizeof(int32_t)) : NULL;
    if (!t->name || (s->nopnd > 0 && !t->opnd) || (s->ncalled > 0 && !t->called) ||
        ir_shape_copy(a, &t->shape, &s->shape) != IR_OK ||
        ir_attrs_copy(a, &t->a, &s->a) != IR_OK || !copy_sharding(a, &t->sharding, s->sharding))
        return clu_nomem(x);
    if (t->a.x->control_predecessors.n > 0) {
        IrAttrsX *tx = ir_attrs_x_edit(a, &t->a);
        if (!tx)
            return clu_nomem(x);
        tx->control_predecessors = (IrI64List){0};
    }
    return IR_OK;
}

/* Add `idx` to a control predecessor list unless it is there. */
static bool add_ctrl(IrArena *a, IrI64List *l, int32_t idx, int32_t cap)
{
    if (ir_list_has(l, idx))
        return true;
    if (!l->v && !(l->v = ir_alloc_array(a, (size_t)(cap > 0 ? cap : 1), sizeof(int64_t))))
        return false;
    l->v[l->n++] = idx;
    return true;
}

/* The flat tuple sharding of values `vals` (one entry per array leaf, as
 * XLA's tuple shardings are), or NULL in *out when one of them has none. */
static bool flat_sharding(Extract *x, const IrComputation *c, const int32_t *vals, int32_t n,
                          IrSharding **out)
{
    IrArena *a = x->out->arena;
    int32_t leaves = 0;
    *out = NULL;
    for (int32_t j = 0; j < n; j++) {
        const IrInstr *ins = &c->instr[vals[j]];
        int32_t l = ir_shape_leaf_count(&ins->shape);
        if (!ins->sharding || (ins->sharding->kind == SHD_TUPLE && ins->sharding->ntuple != l))
            return true;
        leaves += l;
    }
    if (leaves == 0)
        return true;
    IrSharding *t = ir_alloc(a, sizeof *t);
    if (!t || !(t->tuple = ir_alloc_array(a, (size_t)leaves, sizeof(IrSharding))))
        return false;
    t->kind = SHD_TUPLE;
    for (int32_t j = 0; j < n; j++) {
        const IrInstr *ins = &c->instr[vals[j]];
        int32_t l = ir_shape_leaf_count(&ins->shape);
        for (int32_t e = 0; e < l; e++) {
            const IrSharding *s = ins->sharding->kind == SHD_TUPLE ? &ins->sharding->tuple[e]
                                                                   : ins->sharding;
            if (ir_sharding_copy(a, &t->tuple[t->ntuple++], s) != IR_OK)
                return false;
        }
    }
    *out = t;
    return true;
}

static IrStatus clone_callees(Extract *x, const IrInstr *ins)
{
    for (int32_t k = 0; k < ins->ncalled; k++)
        if (ir_clone_computation(x->out, x->in, ins->called[k], x->devmap) < 0)
            return clu_nomem(x);
    return IR_OK;
}

static int32_t add(Extract *x, IrComputation *c, const IrInstr *ins)
{
    int32_t r = ir_add_instr(x->out, c, ins);
    if (r < 0)
        clu_nomem(x);
    return r;
}

/* A copy of source instruction i whose operands come from map[] (all of
 * them mapped) and whose callees are plain clones. */
static int32_t add_mapped(Extract *x, IrComputation *oc, const IrInstr *s, const int32_t *map)
{
    IrInstr t;
    if (copy_instr(x, s, &t) != IR_OK)
        return -1;
    for (int32_t k = 0; k < s->nopnd; k++)
        t.opnd[k] = map[s->opnd[k]];
    for (int32_t k = 0; k < s->ncalled; k++)
        t.called[k] = x->devmap[s->called[k]];
    return add(x, oc, &t);
}

/* ---- cluster computations ---- */

static IrStatus cluster_params(Extract *x, HostComp *h, Clu *cl, IrComputation *kc)
{
    const IrComputation *c = clu_src(x, h);
    IrArena *a = x->out->arena;
    /* Size the parameter table once: ir_add_instr grows it one parameter
     * at a time otherwise, quadratic for a cluster with many inputs. */
    if (cl->nin > 0 && !(kc->param = ir_alloc_array(a, (size_t)cl->nin, sizeof(int32_t))))
        return clu_nomem(x);
    for (int32_t j = 0; j < cl->nin; j++)
        kc->param[j] = -1;
    kc->nparam = cl->nin;
    for (int32_t j = 0; j < cl->nin; j++) {
        const IrInstr *v = &c->instr[cl->in[j]];
        IrInstr p = {.a.x = &ir_no_attrs_x};
        p.op = OP_PARAMETER;
        p.name = ir_strdup(a, v->name);
        p.a.parameter_number = j;
        p.pos = v->pos;
        if (!p.name || ir_shape_copy(a, &p.shape, &v->shape) != IR_OK ||
            !copy_sharding(a, &p.sharding, v->sharding))
            return clu_nomem(x);
        if ((h->lmap[cl->in[j]] = add(x, kc, &p)) < 0)
            return clu_failed(x);
    }
    return IR_OK;
}

/* A call outlined by an earlier extraction is plain device work now:
 * only the host program's calls carry _tessel_cluster, so the runtime
 * finds each cluster once. */
static void drop_cluster_mark(IrAttrs *a)
{
    int32_t n = 0;
    for (int32_t i = 0; i < a->nfrontend; i++)
        if (strcmp(a->frontend[i].key, "_tessel_cluster") != 0)
            a->frontend[n++] = a->frontend[i];
    a->nfrontend = n;
}

/* A member, with its constants cloned in front of it on first use and its
 * control predecessors inside the cluster kept. */
static IrStatus cluster_member(Extract *x, HostComp *h, int32_t k, int32_t m, IrComputation *kc)
{
    const IrComputation *c = clu_src(x, h);
    const IrInstr *s = &c->instr[m];
    for (int32_t o = 0; o < s->nopnd; o++) {
        int32_t u = s->opnd[o];
        if (h->lmap[u] < 0 && h->place[u] == CLU_CONST &&
            (h->lmap[u] = add_mapped(x, kc, &c->instr[u], h->lmap)) < 0)
            return clu_failed(x);
    }
    IrInstr t;
    IrStatus st = copy_instr(x, s, &t);
    if (st != IR_OK || (st = clone_callees(x, s)) != IR_OK)
        return st;
    drop_cluster_mark(&t.a);
    for (int32_t o = 0; o < s->nopnd; o++)
        t.opnd[o] = h->lmap[s->opnd[o]];
    for (int32_t o = 0; o < s->ncalled; o++)
        t.called[o] = x->devmap[s->called[o]];
    const IrI64List *cp = &s->a.x->control_predecessors;
    IrAttrsX *tx = cp->n > 0 ? ir_attrs_x_edit(x->out->arena, &t.a) : NULL;
    if (cp->n > 0 && !tx)
        return clu_nomem(x);
    for (int32_t o = 0; o < cp->n; o++)
        if (h->cl[cp->v[o]] == k && !add_ctrl(x->out->arena, &tx->control_predecessors,
                                              h->lmap[cp->v[o]], cp->n))
            return clu_nomem(x);
    return (h->lmap[m] = add(x, kc, &t)) < 0 ? clu_failed(x) : IR_OK;
}

static IrStatus cluster_root(Extract *x, HostComp *h, Clu *cl, IrComputation *kc, const char *name)
{
    const IrComputation *c = clu_src(x, h);
    IrArena *a = x->out->arena;
    IrInstr t = {.a.x = &ir_no_attrs_x};
    IrShape *el = clu_salloc(x, cl->nout, sizeof(IrShape));
    char *base = ir_sprintf(x->scratch, "%s.out", name);
    t.op = OP_TUPLE;
    t.nopnd = cl->nout;
    t.opnd = cl->nout > 0 ? ir_alloc_array(a, (size_t)cl->nout, sizeof(int32_t)) : NULL;
    t.pos = c->instr[cl->mem[0]].pos;
    if (!el || !base || (cl->nout > 0 && !t.opnd) || !(t.name = fresh_name(x, base)))
        return clu_nomem(x);
    for (int32_t j = 0; j < cl->nout; j++) {
        t.opnd[j] = h->lmap[cl->outv[j]];
        el[j] = c->instr[cl->outv[j]].shape;
    }
    if (ir_shape_make_tuple(a, &t.shape, cl->nout, el) != IR_OK ||
        !flat_sharding(x, c, cl->outv, cl->nout, &t.sharding))
        return clu_nomem(x);
    return (kc->root = add(x, kc, &t)) < 0 ? clu_failed(x) : IR_OK;
}

static IrStatus emit_cluster(Extract *x, HostComp *h, int32_t k)
{
    const IrComputation *c = clu_src(x, h);
    Clu *cl = &h->cls[k];
    for (int32_t j = 0; j < cl->nmem; j++) {
        IrStatus st = clone_callees(x, &c->instr[cl->mem[j]]);
        if (st != IR_OK)
            return st;
    }
    char *base = ir_sprintf(x->scratch, "cluster_%d", (int)cl->number);
    const char *name = base ? fresh_name(x, base) : NULL;
    if (!name || (cl->comp = ir_add_computation(x->out, name)) < 0)
        return clu_nomem(x);
    IrComputation *kc = x->out->comp[cl->comp];
    kc->pos = c->instr[cl->mem[0]].pos;
    IrStatus st = cluster_params(x, h, cl, kc);
    for (int32_t j = 0; j < cl->nmem && st == IR_OK; j++)
        st = cluster_member(x, h, k, cl->mem[j], kc);
    if (st == IR_OK)
        st = cluster_root(x, h, cl, kc, name);
    for (int32_t j = 0; j < cl->nin; j++)
        h->lmap[cl->in[j]] = -1;
    for (int32_t j = 0; j < cl->nconst; j++)
        h->lmap[cl->consts[j]] = -1;
    for (int32_t j = 0; j < cl->nmem; j++)
        h->lmap[cl->mem[j]] = -1;
    return st;
}

/* ---- the host program ---- */

static bool record_host(Extract *x, HostComp *h, int32_t i)
{
    HostRec *r = clu_vec_push(&x->hostrec);
    if (r) {
        r->comp = h->src;
        r->instr = i;
        r->place = h->place[i];
    }
    return r != NULL;
}

static bool record_cut(Extract *x, HostComp *h, int32_t v, int32_t from, int32_t to)
{
    CutRec *r = clu_vec_push(&x->cutrec);
    if (r) {
        r->comp = h->src;
        r->instr = v;
        r->from = from;
        r->to = to;
    }
    return r != NULL;
}

/* The host program's index for source value u: a host instruction, a
 * constant (copied on first use) or the get-tuple-element of a device
 * value. -1 after recording an error. */
static int32_t host_value(Extract *x, HostComp *h, IrComputation *oc, int32_t u)
{
    if (h->place[u] == CLU_DEVICE) {
        if (h->gteof[u] < 0)
            clu_internal(x, "a value is read before its cluster runs", clu_src(x, h)->name);
        return h->gteof[u];
    }
    if (h->place[u] == CLU_CONST && h->vmap[u] < 0) {
        if ((h->vmap[u] = add_mapped(x, oc, &clu_src(x, h)->instr[u], h->vmap)) < 0)
            return -1;
        if (!record_host(x, h, u)) {
            clu_nomem(x);
            return -1;
        }
    }
    return h->vmap[u];
}

/* Control predecessor p of something in the host program: a host
 * instruction, or the call of p's cluster. */
static int32_t host_ctrl(const HostComp *h, int32_t p)
{
    return clu_is_device(h, p) ? h->cls[h->cl[p]].call : h->vmap[p];
}

static IrStatus cut_to_host(Extract *x, HostComp *h, int32_t u)
{
    if (!clu_is_device(h, u) || h->cut_host[u])
        return IR_OK;
    h->cut_host[u] = 1;
    return record_cut(x, h, u, h->cls[h->cl[u]].number, -1) ? IR_OK : clu_nomem(x);
}

static IrStatus emit_host_instr(Extract *x, HostComp *h, IrComputation *oc, int32_t i)
{
    const IrComputation *c = clu_src(x, h);
    const IrInstr *s = &c->instr[i];
    IrInstr t;
    IrStatus st = copy_instr(x, s, &t);
    if (st != IR_OK)
        return st;
    for (int32_t k = 0; k < s->nopnd; k++) {
        if ((t.opnd[k] = host_value(x, h, oc, s->opnd[k])) < 0)
            return clu_failed(x);
        if ((st = cut_to_host(x, h, s->opnd[k])) != IR_OK)
            return st;
    }
    if (h->place[i] != CLU_HOST_FLOW && (st = clone_callees(x, s)) != IR_OK)
        return st;
    for (int32_t k = 0; k < s->ncalled; k++)
        t.called[k] = h->place[i] == CLU_HOST_FLOW ? x->hc[s->called[k]]->outc
                                                   : x->devmap[s->called[k]];
    const IrI64List *cp = &s->a.x->control_predecessors;
    IrAttrsX *tx = cp->n > 0 ? ir_attrs_x_edit(x->out->arena, &t.a) : NULL;
    if (cp->n > 0 && !tx)
        return clu_nomem(x);
    for (int32_t k = 0; k < cp->n; k++)
        if (!add_ctrl(x->out->arena, &tx->control_predecessors, host_ctrl(h, (int32_t)cp->v[k]),
                      cp->n))
            return clu_nomem(x);
    if ((h->vmap[i] = add(x, oc, &t)) < 0)
        return clu_failed(x);
    return record_host(x, h, i) ? IR_OK : clu_nomem(x);
}

/* Control predecessors of cluster k's call: those of its members that
 * lie outside it. */
static IrStatus call_ctrl(Extract *x, HostComp *h, int32_t k, IrI64List *l)
{
    const IrComputation *c = clu_src(x, h);
    Clu *cl = &h->cls[k];
    int32_t cap = 0;
    for (int32_t j = 0; j < cl->nmem; j++)
        cap += c->instr[cl->mem[j]].a.x->control_predecessors.n;
    for (int32_t j = 0; j < cl->nmem; j++) {
        const IrI64List *cp = &c->instr[cl->mem[j]].a.x->control_predecessors;
        for (int32_t o = 0; o < cp->n; o++)
            if (h->cl[cp->v[o]] != k &&
                !add_ctrl(x->out->arena, l, host_ctrl(h, (int32_t)cp->v[o]), cap))
                return clu_nomem(x);
    }
    return IR_OK;
}

static IrStatus emit_call(Extract *x, HostComp *h, IrComputation *oc, int32_t k)
{
    const IrComputation *c = clu_src(x, h);
    IrArena *a = x->out->arena;
    Clu *cl = &h->cls[k];
    const IrComputation *kc = x->out->comp[cl->comp];
    IrInstr t = {.a.x = &ir_no_attrs_x};
    IrKeyValue *kv = ir_alloc(a, sizeof *kv);
    char *base = ir_sprintf(x->scratch, "%s.call", kc->name);
    t.op = OP_CALL;
    t.nopnd = cl->nin;
    t.opnd = cl->nin > 0 ? ir_alloc_array(a, (size_t)cl->nin, sizeof(int32_t)) : NULL;
    t.ncalled = 1;
    t.called = ir_alloc(a, sizeof(int32_t));
    t.pos = c->instr[cl->mem[0]].pos;
    if (!kv || !base || (cl->nin > 0 && !t.opnd) || !t.called || !(t.name = fresh_name(x, base)) ||
        !(kv->key = ir_strdup(a, "_tessel_cluster")) ||
        !(kv->value = ir_sprintf(a, "%d", (int)cl->number)) ||
        ir_shape_copy(a, &t.shape, &kc->instr[kc->root].shape) != IR_OK ||
        !copy_sharding(a, &t.sharding, kc->instr[kc->root].sharding))
        return clu_nomem(x);
    t.called[0] = cl->comp;
    t.a.nfrontend = 1;
    t.a.frontend = kv;
    for (int32_t j = 0; j < cl->nin; j++) {
        int32_t u = cl->in[j];
        t.opnd[j] = host_value(x, h, oc, u);
        int32_t from = clu_is_device(h, u) ? h->cls[h->cl[u]].number : -1;
        if (t.opnd[j] < 0)
            return clu_failed(x);
        if (!record_cut(x, h, u, from, cl->number))
            return clu_nomem(x);
    }
    IrAttrsX *tx = ir_attrs_x_edit(x->out->arena, &t.a);
    if (!tx)
        return clu_nomem(x);
    IrStatus st = call_ctrl(x, h, k, &tx->control_predecessors);
    if (st != IR_OK || (cl->call = add(x, oc, &t)) < 0)
        return clu_failed(x);
    for (int32_t j = 0; j < cl->nout; j++) {
        const IrInstr *v = &c->instr[cl->outv[j]];
        IrInstr g = {.a.x = &ir_no_attrs_x};
        g.op = OP_GET_TUPLE_ELEMENT;
        g.name = ir_strdup(a, v->name);
        g.nopnd = 1;
        g.opnd = ir_alloc(a, sizeof(int32_t));
        g.a.tuple_index = j;
        g.pos = v->pos;
        if (!g.name || !g.opnd || ir_shape_copy(a, &g.shape, &v->shape) != IR_OK ||
            !copy_sharding(a, &g.sharding, v->sharding))
            return clu_nomem(x);
        g.opnd[0] = cl->call;
        if ((h->gteof[cl->outv[j]] = add(x, oc, &g)) < 0)
            return clu_failed(x);
    }
    return IR_OK;
}

static IrStatus emit_host(Extract *x, HostComp *h);

static IrStatus emit_host_callees(Extract *x, HostComp *h)
{
    const IrComputation *c = clu_src(x, h);
    for (int32_t u = 0; u < h->nunit; u++) {
        int32_t v = h->unit[u];
        if (v < 0 || h->place[v] != CLU_HOST_FLOW)
            continue;
        for (int32_t k = 0; k < c->instr[v].ncalled; k++) {
            IrStatus st = emit_host(x, x->hc[c->instr[v].called[k]]);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

static IrStatus host_arrays(Extract *x, HostComp *h)
{
    h->vmap = clu_salloc(x, h->n, sizeof(int32_t));
    h->gteof = clu_salloc(x, h->n, sizeof(int32_t));
    h->lmap = clu_salloc(x, h->n, sizeof(int32_t));
    h->cut_host = clu_salloc(x, h->n, 1);
    if (!h->vmap || !h->gteof || !h->lmap || !h->cut_host)
        return clu_nomem(x);
    for (int32_t i = 0; i < h->n; i++)
        h->vmap[i] = h->gteof[i] = h->lmap[i] = -1;
    return IR_OK;
}

/* An instruction run for its effect even when nobody reads it (the
 * reference executor's rule). */
static bool has_effect(const IrInstr *ins)
{
    return ins->op == OP_CUSTOM_CALL || ins->op == OP_OUTFEED || ins->op == OP_INFEED;
}

/* Does cluster k hold an effect whose result nobody reads? Then nothing
 * reaches its call through data, and the call must still run. */
static bool runs_for_effect(const Extract *x, const HostComp *h, const Clu *cl)
{
    const IrComputation *c = clu_src(x, h);
    for (int32_t j = 0; j < cl->nmem; j++) {
        int32_t m = cl->mem[j];
        bool read = m == c->root;
        for (int32_t k = h->uoff[m]; k < h->uoff[m + 1] && !read; k++)
            read = !h->uctrl[k];
        if (!read && has_effect(&c->instr[m]))
            return true;
    }
    return false;
}

/* Such calls become control predecessors of the root, which every
 * executor reaches. */
static IrStatus keep_effects(Extract *x, HostComp *h, IrComputation *oc)
{
    IrAttrsX *rx = ir_attrs_x_edit(x->out->arena, &oc->instr[oc->root].a);
    if (!rx)
        return clu_nomem(x);
    IrI64List *l = &rx->control_predecessors;
    for (int32_t k = 0; k < h->ncl; k++) {
        if (!runs_for_effect(x, h, &h->cls[k]))
            continue;
        int64_t *v = ir_alloc_array(x->out->arena, (size_t)l->n + 1, sizeof *v);
        if (!v)
            return clu_nomem(x);
        if (l->n > 0)
            memcpy(v, l->v, (size_t)l->n * sizeof *v);
        v[l->n++] = h->cls[k].call;
        l->v = v;
    }
    return IR_OK;
}

static IrStatus emit_host(Extract *x, HostComp *h)
{
    if (h->outc >= 0)
        return IR_OK;
    const IrComputation *c = clu_src(x, h);
    IrStatus st = emit_host_callees(x, h);
    if (st != IR_OK)
        return st;
    const char *name = ir_find_computation(x->out, c->name) < 0 ? c->name : fresh_name(x, c->name);
    int32_t oi = name ? ir_add_computation(x->out, name) : -1;
    if (oi < 0)
        return clu_nomem(x);
    IrComputation *oc = x->out->comp[oi];
    oc->has_signature = c->has_signature;
    oc->pos = c->pos;
    for (int32_t u = 0; u < h->nunit && st == IR_OK; u++)
        st = h->unit[u] >= 0 ? emit_host_instr(x, h, oc, h->unit[u])
                             : emit_call(x, h, oc, -h->unit[u] - 1);
    if (st != IR_OK)
        return st;
    if ((oc->root = host_value(x, h, oc, c->root)) < 0)
        return clu_failed(x);
    if ((st = cut_to_host(x, h, c->root)) != IR_OK || (st = keep_effects(x, h, oc)) != IR_OK)
        return st;
    h->outc = oi;
    return IR_OK;
}

/* ---- the module ---- */

IrStatus clu_outline(Extract *x)
{
    for (int32_t ci = 0; ci < x->in->ncomp; ci++)
        if (x->hc[ci]) {
            IrStatus st = host_arrays(x, x->hc[ci]);
            if (st != IR_OK)
                return st;
        }
    CluRef *all = x->all.v;
    for (int32_t j = 0; j < x->all.n; j++) {
        IrStatus st = emit_cluster(x, all[j].h, all[j].k);
        if (st != IR_OK)
            return st;
    }
    for (int32_t ci = 0; ci < x->in->ncomp; ci++)
        if (!x->hc[ci] && x->devmap[ci] < 0 && ir_clone_computation(x->out, x->in, ci, x->devmap) < 0)
            return clu_nomem(x);
    IrStatus st = emit_host(x, x->hc[x->in->entry]);
    if (st != IR_OK)
        return st;
    x->out->entry = x->hc[x->in->entry]->outc;
    x->out->comp[x->out->entry]->is_entry = true;
    return IR_OK;
}
