/*
 * extract.c: clu_extract, the driver of the layer: it prepares the state
 * of one extraction, runs the passes (form.c: analyse every host
 * computation and number the clusters; outline.c: build the output
 * module), and turns what they decided into a CluResult. Also the small
 * containers the passes share (a string set, a growable array)
 * and their error helpers.
 *
 * Memory: the analysis lives in one scratch arena freed at the end; the
 * output module in its own arena; the result in a third, so it outlives
 * both. Every failure returns the first error recorded, frees everything
 * and leaves *out NULL and the result empty.
 */
#include "cluster_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* small containers                                                    */
/* ------------------------------------------------------------------ */

static size_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

bool clu_strset_has(const CluStrSet *s, const char *k)
{
    if (!s->cap)
        return false;
    for (size_t i = str_hash(k) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slot[i], k) == 0)
            return true;
    return false;
}

/* Add k to s; false on OOM. */
static bool clu_strset_add(CluStrSet *s, const char *k)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        const char **slot = ts_calloc(cap, sizeof *slot);
        if (!slot)
            return false;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t j = str_hash(s->slot[i]) & (cap - 1);
                while (slot[j])
                    j = (j + 1) & (cap - 1);
                slot[j] = s->slot[i];
            }
        ts_free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t i = str_hash(k) & (s->cap - 1);
    for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slot[i], k) == 0)
            return true;
    s->slot[i] = k;
    s->n++;
    return true;
}


void *clu_vec_push(CluVec *v)
{
    if (!ir_grow_(&v->v, &v->cap, v->n + 1, v->elem)) /* elem known at run time only */
        return NULL;
    void *p = (char *)v->v + (size_t)v->n++ * v->elem;
    memset(p, 0, v->elem);
    return p;
}


int clu_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ---- errors and scratch ---- */

IrStatus clu_nomem(Extract *x)
{
    if (x->st == IR_OK)
        x->st = IR_ENOMEM;
    return ir_oom(x->d, NULL);
}

IrStatus clu_internal(Extract *x, const char *what, const char *comp)
{
    if (x->st == IR_OK)
        x->st = IR_EINTERNAL;
    return ir_error(x->d, IR_EINTERNAL, x->in->file, NULL, (IrPos){0, 0},
                    "cluster extraction: %s in computation %s", what, comp);
}

IrStatus clu_failed(const Extract *x)
{
    return x->st != IR_OK ? x->st : IR_ENOMEM;
}

void *clu_salloc(Extract *x, int32_t n, size_t elem)
{
    return ir_alloc_array(x->scratch, n > 0 ? (size_t)n : 1, elem);
}

/* ------------------------------------------------------------------ */
/* the module and the result                                           */
/* ------------------------------------------------------------------ */

static bool dup_list(IrArena *a, IrI64List *l)
{
    if (l->n <= 0 || !l->v)
        return true;
    int64_t *v = ir_alloc_array(a, (size_t)l->n, sizeof *v);
    if (v)
        memcpy(v, l->v, (size_t)l->n * sizeof *v);
    l->v = v;
    return v != NULL;
}

static bool dup_str(IrArena *a, const char **s)
{
    return !*s || (*s = ir_strdup(a, *s)) != NULL;
}

/* The module header: what the source says about partitions, replicas,
 * the entry's layout, aliasing, and its file and text for diagnostics. */
static IrStatus copy_header(Extract *x)
{
    const IrModule *in = x->in;
    IrModule *o = x->out;
    IrArena *a = o->arena;
    o->num_partitions = in->num_partitions;
    o->replica_count = in->replica_count;
    o->entry_computation_layout = in->entry_computation_layout;
    o->file = in->file;
    o->src = in->src;
    if (!dup_str(a, &o->entry_computation_layout) || !dup_str(a, &o->file) || !dup_str(a, &o->src))
        return clu_nomem(x);
    if (in->nalias > 0 && !(o->alias = ir_alloc_array(a, (size_t)in->nalias, sizeof(IrAlias))))
        return clu_nomem(x);
    for (int32_t i = 0; i < in->nalias; i++) {
        o->alias[i] = in->alias[i];
        if (!dup_list(a, &o->alias[i].output_index) || !dup_list(a, &o->alias[i].param_index))
            return clu_nomem(x);
    }
    o->nalias = in->nalias;
    if (ir_set_donors(o, in->donor, in->ndonor) != IR_OK)
        return clu_nomem(x);
    if (in->nheader_attr > 0 &&
        !(o->header_attr = ir_alloc_array(a, (size_t)in->nheader_attr, sizeof(IrKeyValue))))
        return clu_nomem(x);
    for (int32_t i = 0; i < in->nheader_attr; i++) {
        o->header_attr[i] = in->header_attr[i];
        if (!dup_str(a, &o->header_attr[i].key) || !dup_str(a, &o->header_attr[i].value))
            return clu_nomem(x);
    }
    o->nheader_attr = in->nheader_attr;
    return IR_OK;
}

static IrStatus source_names(Extract *x)
{
    for (int32_t ci = 0; ci < x->in->ncomp; ci++) {
        const IrComputation *c = x->in->comp[ci];
        if (!clu_strset_add(&x->srcnames, c->name))
            return clu_nomem(x);
        for (int32_t i = 0; i < c->ninstr; i++)
            if (!clu_strset_add(&x->srcnames, c->instr[i].name))
                return clu_nomem(x);
    }
    return IR_OK;
}

/* ---- CluResult ---- */

static const char **names_of(IrArena *a, const IrComputation *c, const int32_t *idx, int32_t n)
{
    const char **r = ir_alloc_array(a, n > 0 ? (size_t)n : 1, sizeof *r);
    for (int32_t j = 0; r && j < n; j++)
        if (!(r[j] = ir_strdup(a, c->instr[idx[j]].name)))
            return NULL;
    return r;
}

static int32_t output_index(const Clu *cl, int32_t v)
{
    const int32_t *p = bsearch(&v, cl->outv, (size_t)cl->nout, sizeof v, clu_cmp_i32);
    return p ? (int32_t)(p - cl->outv) : -1;
}

static bool result_inputs(IrArena *a, const HostComp *h, const IrComputation *c, const Clu *cl,
                          CluCluster *r)
{
    if (!(r->inputs = ir_alloc_array(a, cl->nin > 0 ? (size_t)cl->nin : 1, sizeof(CluInput))))
        return false;
    r->ninputs = cl->nin;
    for (int32_t j = 0; j < cl->nin; j++) {
        int32_t u = cl->in[j];
        CluInput *in = &r->inputs[j];
        in->operand = j;
        in->from_cluster = in->from_output = -1;
        in->host_param = c->instr[u].op == OP_PARAMETER ? c->instr[u].a.parameter_number : -1;
        in->bytes = ir_shape_bytes(&c->instr[u].shape);
        if (h->place[u] == CLU_DEVICE) {
            const Clu *p = &h->cls[h->cl[u]];
            in->from_cluster = p->number;
            in->from_output = output_index(p, u);
        }
        if (!(in->value = ir_strdup(a, c->instr[u].name)))
            return false;
    }
    return true;
}

static bool result_outputs(IrArena *a, const IrModule *out, const HostComp *h,
                           const IrComputation *c, const Clu *cl, CluCluster *r)
{
    const IrComputation *oc = out->comp[h->outc];
    if (!(r->outputs = ir_alloc_array(a, cl->nout > 0 ? (size_t)cl->nout : 1, sizeof(CluOutput))))
        return false;
    r->noutputs = cl->nout;
    for (int32_t j = 0; j < cl->nout; j++) {
        int32_t v = cl->outv[j];
        CluOutput *o = &r->outputs[j];
        o->index = j;
        o->bytes = ir_shape_bytes(&c->instr[v].shape);
        if (!(o->value = ir_strdup(a, c->instr[v].name)) ||
            !(o->host_name = ir_strdup(a, oc->instr[h->gteof[v]].name)))
            return false;
    }
    return true;
}

static bool result_cluster(Extract *x, IrArena *a, const CluRef *ref, CluCluster *r)
{
    const HostComp *h = ref->h;
    const Clu *cl = &h->cls[ref->k];
    const IrComputation *c = clu_src(x, h);
    r->number = cl->number;
    r->comp = cl->comp;
    r->host_comp = h->outc;
    r->ninstrs = cl->nmem;
    r->nconsts = cl->nconst;
    return (r->name = ir_strdup(a, x->out->comp[cl->comp]->name)) &&
           (r->source_comp = ir_strdup(a, c->name)) &&
           (r->call = ir_strdup(a, x->out->comp[h->outc]->instr[cl->call].name)) &&
           (r->instrs = names_of(a, c, cl->mem, cl->nmem)) &&
           (r->consts = names_of(a, c, cl->consts, cl->nconst)) &&
           result_inputs(a, h, c, cl, r) && result_outputs(a, x->out, h, c, cl, r);
}

static bool result_lists(Extract *x, CluResult *res)
{
    IrArena *a = res->arena;
    const HostRec *hr = x->hostrec.v;
    const CutRec *cr = x->cutrec.v;
    res->host = ir_alloc_array(a, x->hostrec.n > 0 ? (size_t)x->hostrec.n : 1, sizeof(CluHostInstr));
    res->cuts = ir_alloc_array(a, x->cutrec.n > 0 ? (size_t)x->cutrec.n : 1, sizeof(CluCut));
    if (!res->host || !res->cuts)
        return false;
    for (int32_t j = 0; j < x->hostrec.n; j++) {
        const IrComputation *c = x->in->comp[hr[j].comp];
        CluHostInstr *o = &res->host[res->nhost++];
        o->place = hr[j].place;
        if (!(o->comp = ir_strdup(a, c->name)) || !(o->name = ir_strdup(a, c->instr[hr[j].instr].name)))
            return false;
    }
    for (int32_t j = 0; j < x->cutrec.n; j++) {
        const IrComputation *c = x->in->comp[cr[j].comp];
        CluCut *o = &res->cuts[res->ncuts++];
        o->from = cr[j].from;
        o->to = cr[j].to;
        o->bytes = ir_shape_bytes(&c->instr[cr[j].instr].shape);
        if (!(o->comp = ir_strdup(a, c->name)) || !(o->value = ir_strdup(a, c->instr[cr[j].instr].name)))
            return false;
    }
    return true;
}

static IrStatus build_result(Extract *x, CluResult *res)
{
    if (!(res->arena = ir_arena_new()))
        return clu_nomem(x);
    const CluRef *all = x->all.v;
    res->clusters = ir_alloc_array(res->arena, x->all.n > 0 ? (size_t)x->all.n : 1, sizeof(CluCluster));
    if (!res->clusters)
        return clu_nomem(x);
    for (int32_t j = 0; j < x->all.n; j++) {
        if (!result_cluster(x, res->arena, &all[j], &res->clusters[j]))
            return clu_nomem(x);
        res->nclusters++;
    }
    return result_lists(x, res) ? IR_OK : clu_nomem(x);
}

/* ------------------------------------------------------------------ */
/* entry points                                                        */
/* ------------------------------------------------------------------ */

CluOptions clu_default_options(void)
{
    CluOptions o = {NULL, 64};
    return o;
}

void clu_result_free(CluResult *res)
{
    if (!res)
        return;
    ir_arena_free(res->arena);
    memset(res, 0, sizeof *res);
}

static IrStatus prepare(Extract *x)
{
    int32_t n = x->in->ncomp;
    x->scratch = ir_arena_new();
    x->has_host = ts_calloc((size_t)n, sizeof *x->has_host);
    x->hc = ts_calloc((size_t)n, sizeof *x->hc);
    x->devmap = ts_malloc((size_t)n * sizeof *x->devmap);
    x->out = ir_module_new(x->in->name);
    if (!x->scratch || !x->has_host || !x->hc || !x->devmap || !x->out)
        return clu_nomem(x);
    for (int32_t i = 0; i < n; i++)
        x->devmap[i] = -1;
    IrStatus st = copy_header(x);
    if (st == IR_OK)
        st = source_names(x);
    if (st == IR_OK)
        st = clu_host_computations(x->in, x->targets, x->has_host, x->d);
    return st;
}

static void release(Extract *x)
{
    ir_arena_free(x->scratch);
    ts_free(x->has_host);
    ts_free(x->hc);
    ts_free(x->devmap);
    ts_free(x->srcnames.slot);
    ts_free(x->all.v);
    ts_free(x->hostrec.v);
    ts_free(x->cutrec.v);
}

IrStatus clu_extract(const IrModule *in, const CluOptions *opt, IrModule **out, CluResult *res,
                     IrDiag *d)
{
    CluOptions o = opt ? *opt : clu_default_options();
    *out = NULL;
    if (res)
        memset(res, 0, sizeof *res);
    if (!in || in->entry < 0 || in->entry >= in->ncomp)
        return ir_error(d, IR_EINPUT, in ? in->file : NULL, NULL, (IrPos){0, 0},
                        "module %s has no ENTRY computation", in ? in->name : "(null)");
    Extract x = {0};
    x.in = in;
    x.targets = o.host_targets ? o.host_targets : clu_default_host_targets;
    x.max_const = o.max_const_elements;
    x.d = d;
    x.all.elem = sizeof(CluRef);
    x.hostrec.elem = sizeof(HostRec);
    x.cutrec.elem = sizeof(CutRec);
    IrStatus st = prepare(&x);
    if (st == IR_OK)
        st = clu_analyze(&x, in->entry, 0);
    if (st == IR_OK)
        st = clu_number(&x, x.hc[in->entry]);
    if (st == IR_OK)
        st = clu_outline(&x);
    if (st == IR_OK && res)
        st = build_result(&x, res);
    release(&x);
    if (st != IR_OK) {
        ir_module_free(x.out);
        clu_result_free(res);
        return st;
    }
    *out = x.out;
    return IR_OK;
}

/* How many times the entry's instruction i is an operand (the root counts
 * once more: the caller gets it). */
static int32_t uses(const IrComputation *e, int32_t i)
{
    int32_t n = e->root == i;
    for (int32_t j = 0; j < e->ninstr; j++)
        for (int32_t o = 0; o < e->instr[j].nopnd; o++)
            n += e->instr[j].opnd[o] == i;
    return n;
}

const char *clu_donor_held(const IrModule *out, const IrDonor *dn)
{
    const IrComputation *e = ir_entry(out);
    int64_t p = dn->param_number;
    if (dn->param_index.n > 0)
        return "a leaf inside a tuple parameter: tessel pairs whole parameters";
    if (!e || p < 0 || p >= e->nparam || e->param[p] < 0)
        return "no parameter of the entry";
    int32_t pi = e->param[p], n = uses(e, pi);
    for (int32_t j = 0; n == 1 && j < e->ninstr; j++)
        for (int32_t o = 0; o < e->instr[j].nopnd; o++)
            if (e->instr[j].opnd[o] == pi)
                return e->instr[j].op == OP_CALL && ir_frontend_attr(&e->instr[j], "_tessel_cluster")
                           ? NULL
                           : "read by a host instruction, not handed to a cluster";
    return n == 0 ? "never read" : "read more than once in the host program";
}

/* Cluster k's buffer donors (into mod): its parameter j is one when the
 * call in the entry of `out` hands it entry parameter p whole, p is a
 * buffer_donor of `out`, and nothing else in the host program reads p (the
 * cluster may then write over it: clu_donor_held is NULL). A cluster
 * called from host control flow gets none of it. */
static IrStatus map_donors(const IrModule *out, const CluCluster *cl, IrModule *mod)
{
    const IrComputation *e = ir_entry(out);
    int32_t call = e && cl->host_comp == out->entry && cl->call ? ir_find_instr(e, cl->call) : -1;
    if (call < 0 || out->ndonor == 0)
        return IR_OK;
    const IrInstr *ci = &e->instr[call];
    IrDonor *v = ts_calloc((size_t)ci->nopnd + 1, sizeof *v);
    if (!v)
        return IR_ENOMEM;
    int32_t n = 0;
    for (int32_t j = 0; j < ci->nopnd; j++) {
        const IrInstr *op = &e->instr[ci->opnd[j]];
        if (op->op != OP_PARAMETER)
            continue;
        for (int32_t k = 0; k < out->ndonor; k++)
            if (out->donor[k].param_number == op->a.parameter_number && !clu_donor_held(out, &out->donor[k]))
                v[n++] = (IrDonor){.param_number = j, .pos = out->donor[k].pos};
    }
    IrStatus st = ir_set_donors(mod, v, n);
    ts_free(v);
    return st;
}

IrStatus clu_cluster_module(const IrModule *out, const CluResult *res, int32_t k, IrModule **mod,
                            IrDiag *d)
{
    *mod = NULL;
    if (!out || !res || k < 0 || k >= res->nclusters || res->clusters[k].comp < 0 ||
        res->clusters[k].comp >= out->ncomp)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no cluster %d", (int)k);
    IrModule *m = ir_module_new(res->clusters[k].name);
    int32_t *map = ts_malloc((size_t)out->ncomp * sizeof *map);
    int32_t ci = -1;
    if (m && map) {
        for (int32_t i = 0; i < out->ncomp; i++)
            map[i] = -1;
        ci = ir_clone_computation(m, out, res->clusters[k].comp, map);
    }
    ts_free(map);
    if (ci < 0) {
        ir_module_free(m);
        return ir_oom(d, NULL);
    }
    m->entry = ci;
    m->comp[ci]->is_entry = true;
    m->num_partitions = out->num_partitions;
    m->replica_count = out->replica_count;
    if (map_donors(out, &res->clusters[k], m) != IR_OK) {
        ir_module_free(m);
        return ir_oom(d, NULL);
    }
    *mod = m;
    return IR_OK;
}
