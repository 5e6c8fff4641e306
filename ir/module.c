/*
 * module.c: building and copying modules. Instructions are appended to
 * their computation's array and referred to by index; every array an
 * instruction points to lives in the module's arena.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

/* ---- the set of names in use (open addressing, grows at 1/2 load) ---- */

/* Each slot keeps its name's hash: probes compare hashes before strings,
 * and growing does not hash every name again. */
typedef struct NameSlot {
    const char *s;   /* NULL: empty */
    uint64_t h;
} NameSlot;

typedef struct IrNameSet {
    size_t cap, n;
    NameSlot *slot;
} IrNameSet;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ^ (h >> 29);
}

static bool nameset_has(const IrNameSet *ns, const char *s)
{
    size_t mask = ns->cap - 1;
    uint64_t h = hash_str(s);
    for (size_t i = h & mask; ns->slot[i].s; i = (i + 1) & mask)
        if (ns->slot[i].h == h && strcmp(ns->slot[i].s, s) == 0)
            return true;
    return false;
}

static bool nameset_grow(IrNameSet *ns)
{
    size_t cap = ns->cap ? ns->cap * 2 : 256;
    /* A partitioned module's set reaches megabytes: a big block (huge
     * pages) for what every name lookup touches at random. */
    NameSlot *slot = ir_big_alloc(cap * sizeof *slot);
    if (!slot)
        return false;
    memset(slot, 0, cap * sizeof *slot);
    for (size_t i = 0; i < ns->cap; i++) {
        if (!ns->slot[i].s)
            continue;
        size_t j = ns->slot[i].h & (cap - 1);
        while (slot[j].s)
            j = (j + 1) & (cap - 1);
        slot[j] = ns->slot[i];
    }
    ir_big_free(ns->slot);
    ns->slot = slot;
    ns->cap = cap;
    return true;
}

static bool nameset_add(IrNameSet *ns, const char *s)
{
    if (2 * (ns->n + 1) > ns->cap && !nameset_grow(ns))
        return false;
    size_t mask = ns->cap - 1;
    uint64_t h = hash_str(s);
    size_t i = h & mask;
    for (; ns->slot[i].s; i = (i + 1) & mask)
        if (ns->slot[i].h == h && strcmp(ns->slot[i].s, s) == 0)
            return true;
    ns->slot[i] = (NameSlot){s, h};
    ns->n++;
    return true;
}

static void nameset_free(IrNameSet *ns)
{
    if (ns) {
        ir_big_free(ns->slot);
        ts_free(ns);
    }
}

/* Build the name set from the module the first time it is needed. */
static bool names_ready(IrModule *m)
{
    if (m->names)
        return true;
    IrNameSet *ns = ts_calloc(1, sizeof *ns);
    if (!ns || !nameset_grow(ns)) {
        ts_free(ns);
        return false;
    }
    /* Sized for every name at once: no regrowth while it is filled. */
    size_t total = (size_t)m->ncomp;
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        total += (size_t)m->comp[ci]->ninstr;
    while (2 * (total + 1) > ns->cap)
        if (!nameset_grow(ns))
            goto oom;
    for (int32_t ci = 0; ci < m->ncomp; ci++) {
        IrComputation *c = m->comp[ci];
        if (!nameset_add(ns, c->name))
            goto oom;
        for (int32_t i = 0; i < c->ninstr; i++)
            if (!nameset_add(ns, c->instr[i].name))
                goto oom;
    }
    m->names = ns;
    return true;
oom:
    nameset_free(ns);
    return false;
}

/* ---- modules ---- */

enum { BIG_ARRAY = 2 << 20 };

/* Is c's array an ir_big_alloc block (else a ts_realloc one)? */
static bool big_array(const IrComputation *c)
{
    return (size_t)c->cap * sizeof(IrInstr) >= BIG_ARRAY;
}


IrModule *ir_module_new(const char *name)
{
    IrArena *a = ir_arena_new();
    if (!a)
        return NULL;
    IrModule *m = ir_alloc(a, sizeof *m);
    if (!m || !(m->name = ir_strdup(a, name ? name : "module"))) {
        ir_arena_free(a);
        return NULL;
    }
    m->arena = a;
    m->entry = -1;
    return m;
}

void ir_module_free(IrModule *m)
{
    if (!m)
        return;
    nameset_free(m->names);
    for (int32_t i = 0; i < m->ncomp; i++) {
        if (big_array(m->comp[i]))
            ir_big_free(m->comp[i]->instr);
        else
            ts_free(m->comp[i]->instr);
    }
    ts_free(m->comp);
    /* The module struct lives in its arena: the taken text goes first. */
    ir_big_free(m->src_owned);
    ir_arena_free(m->arena);
}

void ir_drop_computations(IrModule *m, const bool *drop)
{
    int32_t *renum = ts_malloc((size_t)(m->ncomp > 0 ? m->ncomp : 1) * sizeof *renum);
    /* The renumbered called[] lists go into new arrays: copies of an
     * instruction (a callee inlined twice, a value recomputed) share one
     * list, which renumbered in place would be renumbered once a copy
     * (a cumsum's add turned into a cumprod's multiply). */
    size_t ncalled = 0;
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; (!drop[k] || k == m->entry) && i < m->comp[k]->ninstr; i++)
            ncalled += (size_t)m->comp[k]->instr[i].ncalled;
    int32_t *called = ncalled ? ir_alloc_array(m->arena, ncalled, sizeof *called) : NULL;
    /* Without room for the renumbering nothing is dropped: the module
     * stays as it was, only larger. */
    if (!renum || (ncalled && !called)) {
        ts_free(renum);
        return;
    }
    int32_t n = 0;
    for (int32_t k = 0; k < m->ncomp; k++) {
        IrComputation *c = m->comp[k];
        renum[k] = drop[k] && k != m->entry ? -1 : n;
        if (renum[k] >= 0) {
            m->comp[n++] = c;
            continue;
        }
        if (big_array(c))
            ir_big_free(c->instr);
        else
            ts_free(c->instr);
        c->instr = NULL;
        c->ninstr = c->cap = 0;
    }
    for (int32_t k = 0; k < n; k++) {
        IrComputation *c = m->comp[k];
        for (int32_t i = 0; i < c->ninstr; i++) {
            IrInstr *x = &c->instr[i];
            for (int32_t j = 0; j < x->ncalled; j++)
                called[j] = x->called[j] >= 0 && x->called[j] < m->ncomp ? renum[x->called[j]] : x->called[j];
            if (x->ncalled) {
                x->called = called;
                called += x->ncalled;
            }
        }
    }
    if (m->entry >= 0)
        m->entry = renum[m->entry];
    m->ncomp = n;
    ts_free(renum);
}

int32_t ir_add_computation(IrModule *m, const char *name)
{
    if (!IR_GROW(m->comp, m->capcomp, m->ncomp + 1))
        return -1;
    IrComputation *c = ir_alloc(m->arena, sizeof *c);
    if (!c || !(c->name = ir_strdup(m->arena, name)))
        return -1;
    c->root = -1;
    if (m->names && !nameset_add(m->names, c->name))
        return -1;
    m->comp[m->ncomp] = c;
    return m->ncomp++;
}

/* Give c room for cap instructions (cap >= c->ninstr). Instruction arrays
 * are heap-allocated (not arena) because they grow; ir_module_free releases
 * them. An IrInstr is about 1 KiB, so a large computation's array is tens
 * of MiB: from 2 MiB up it is an ir_big_alloc block (huge pages), moved by
 * copying rather than realloc'd (a realloc of a mapping moves its pages to
 * new addresses, which splits huge pages and costs a fault per 4 KiB page
 * again on the next touch). Which kind an array is follows from c->cap. */
static bool instr_room(IrComputation *c, int32_t cap)
{
    size_t bytes = (size_t)cap * sizeof(IrInstr);
    IrInstr *ni;
    if (bytes < BIG_ARRAY) {
        ni = ts_realloc(c->instr, bytes);
        if (!ni)
            return false;
    } else {
        ni = ir_big_alloc(bytes);
        if (!ni)
            return false;
        if (c->ninstr > 0)
            memcpy(ni, c->instr, (size_t)c->ninstr * sizeof(IrInstr));
        if (big_array(c))
            ir_big_free(c->instr);
        else
            ts_free(c->instr);
    }
    c->instr = ni;
    c->cap = cap;
    return true;
}

IrStatus ir_reserve_instrs(IrComputation *c, int32_t n)
{
    if (n <= c->cap)
        return IR_OK;
    if ((size_t)n > SIZE_MAX / sizeof(IrInstr))
        return IR_ENOMEM;
    return instr_room(c, n) ? IR_OK : IR_ENOMEM;
}

/* The next capacity of a full array of cap instructions. Small arrays
 * double. A big one grows eightfold: its pages are faulted in (zeroed by
 * the kernel, the dearest part of building a large module) only where
 * instructions are written, so the unused tail costs address space, not
 * memory, while each move copies every instruction into fresh pages;
 * growing by 8 touches 8/7 of the final array in all where doubling
 * touches twice it. */
static int32_t next_cap(int32_t cap)
{
    /* Up to 1 GiB of address space at once (a smaller machine or a
     * sanitizer's allocator may refuse more); doubling beyond. */
    size_t bytes = (size_t)cap * sizeof(IrInstr);
    int64_t want = cap == 0                                 ? 16
                   : bytes < BIG_ARRAY || bytes > (1u << 27) ? (int64_t)cap * 2
                                                             : (int64_t)cap * 8;
    return want > INT32_MAX ? INT32_MAX : (int32_t)want;
}

int32_t ir_add_instr(IrModule *m, IrComputation *c, const IrInstr *ins)
{
    if (c->ninstr == c->cap) {
        if (c->cap == INT32_MAX || (size_t)next_cap(c->cap) > SIZE_MAX / sizeof(IrInstr))
            return -1;
        if (!instr_room(c, next_cap(c->cap)))
            return -1;
    }
    if (m->names && !nameset_add(m->names, ins->name))
        return -1;
    c->instr[c->ninstr] = *ins;
    if (!ins->a.x)
        c->instr[c->ninstr].a.x = &ir_no_attrs_x;
    if (ins->op == OP_PARAMETER) {
        int64_t pn = ins->a.parameter_number;
        if (pn >= 0 && pn < (1 << 24) && pn >= c->nparam) {
            int32_t n = (int32_t)pn + 1;
            if (n > c->capparam || !c->param) {
                /* Doubling: adding k parameters in order costs O(k), not
                 * O(k^2) (the arena keeps the old arrays until the end). */
                int32_t cap = c->capparam > 0 && c->param ? c->capparam : 4;
                while (cap < n)
                    cap *= 2;
                int32_t *np = ir_alloc_array(m->arena, (size_t)cap, sizeof(int32_t));
                if (!np)
                    return -1;
                for (int32_t i = 0; i < cap; i++)
                    np[i] = i < c->nparam ? c->param[i] : -1;
                c->param = np;
                c->capparam = cap;
            }
            for (int32_t i = c->nparam; i < n; i++)
                c->param[i] = -1;
            c->nparam = n;
        }
        if (pn >= 0 && pn < c->nparam && c->param[pn] < 0)
            c->param[pn] = c->ninstr;
    }
    return c->ninstr++;
}

const char *ir_unique_name(IrModule *m, const char *base)
{
    if (!names_ready(m))
        return NULL;
    /* Strip a trailing ".N" so "add.3" gives "add.17", not "add.3.17". */
    size_t len = strlen(base), n = len;
    size_t k = n;
    while (k > 0 && base[k - 1] >= '0' && base[k - 1] <= '9')
        k--;
    if (k > 0 && k < n && base[k - 1] == '.')
        n = k - 1;
    if (n == len && !nameset_has(m->names, base)) {
        char *r = ir_strndup(m->arena, base, len);
        return r && nameset_add(m->names, r) ? r : NULL;
    }
    /* Candidates "BASE.ID" are built on the stack (no printf, nothing left
     * in the arena for a taken one); very long bases take the slow way. */
    char buf[256];
    for (;;) {
        long long id = ++m->next_name_id;
        char num[24], *e = num + sizeof num, *d = e;
        for (unsigned long long u = (unsigned long long)id; d == e || u; u /= 10)
            *--d = (char)('0' + u % 10);
        size_t nd = (size_t)(e - d);
        if (n + nd + 2 > sizeof buf) {
            char *r = ir_sprintf(m->arena, "%.*s.%lld", (int)n, base, id);
            if (!r)
                return NULL;
            if (!nameset_has(m->names, r))
                return nameset_add(m->names, r) ? r : NULL;
            continue;
        }
        memcpy(buf, base, n);
        buf[n] = '.';
        memcpy(buf + n + 1, d, nd);
        buf[n + 1 + nd] = 0;
        if (nameset_has(m->names, buf))
            continue;
        char *r = ir_strndup(m->arena, buf, n + 1 + nd);
        return r && nameset_add(m->names, r) ? r : NULL;
    }
}

const char *ir_keep_name(IrModule *m, const char *name)
{
    if (!names_ready(m))
        return NULL;
    if (nameset_has(m->names, name))
        return ir_unique_name(m, name);
    char *r = ir_strndup(m->arena, name, strlen(name));
    return r && nameset_add(m->names, r) ? r : NULL;
}

int32_t ir_add_simple(IrModule *m, IrComputation *c, IrOpcode op, const IrShape *shape,
                      int32_t nopnd, const int32_t *opnd, const char *name)
{
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = op;
    ins.name = ir_unique_name(m, name ? name : ir_op_name(op));
    if (!ins.name || ir_shape_copy(m->arena, &ins.shape, shape) != IR_OK)
        return -1;
    ins.nopnd = nopnd;
    if (nopnd > 0) {
        ins.opnd = ir_alloc_array(m->arena, (size_t)nopnd, sizeof(int32_t));
        if (!ins.opnd)
            return -1;
        memcpy(ins.opnd, opnd, (size_t)nopnd * sizeof(int32_t));
    }
    return ir_add_instr(m, c, &ins);
}

int32_t ir_find_computation(const IrModule *m, const char *name)
{
    for (int32_t i = 0; i < m->ncomp; i++)
        if (strcmp(m->comp[i]->name, name) == 0)
            return i;
    return -1;
}

int32_t ir_find_instr(const IrComputation *c, const char *name)
{
    for (int32_t i = 0; i < c->ninstr; i++)
        if (strcmp(c->instr[i].name, name) == 0)
            return i;
    return -1;
}

void ir_alias_donated(const IrModule *m, bool *donated, int32_t nparam)
{
    for (int32_t p = 0; p < nparam; p++)
        donated[p] = false;
    for (int32_t k = 0; k < m->nalias; k++) {
        const IrAlias *al = &m->alias[k];
        if (al->param_number >= 0 && al->param_number < nparam)
            donated[al->param_number] = true;
    }
}

/* A copy of ix in m's arena (the empty index: no array). */
static bool index_copy(IrModule *m, const IrShapeIndex *ix, IrShapeIndex *out)
{
    *out = (IrShapeIndex){0};
    if (!ix || ix->n <= 0)
        return true;
    if (!(out->v = ir_alloc_array(m->arena, (size_t)ix->n, sizeof *out->v)))
        return false;
    memcpy(out->v, ix->v, (size_t)ix->n * sizeof *out->v);
    out->n = ix->n;
    return true;
}

IrStatus ir_add_alias_at(IrModule *m, int64_t param, const IrShapeIndex *param_index,
                         const IrShapeIndex *output_index, bool inferred, bool from_donor)
{
    IrAlias *al = ir_alloc_array(m->arena, (size_t)m->nalias + 1, sizeof *al);
    IrShapeIndex o, pi;
    if (!al || !index_copy(m, output_index, &o) || !index_copy(m, param_index, &pi))
        return IR_ENOMEM;
    if (m->nalias > 0)
        memcpy(al, m->alias, (size_t)m->nalias * sizeof *al);
    al[m->nalias] = (IrAlias){.output_index = o, .param_number = param, .param_index = pi,
                              .inferred = inferred, .from_donor = from_donor};
    m->alias = al;
    m->nalias++;
    return IR_OK;
}

IrStatus ir_add_alias(IrModule *m, int64_t param, int64_t output, bool inferred, bool from_donor)
{
    IrShapeIndex o = {.n = output >= 0 ? 1 : 0, .v = &output};
    return ir_add_alias_at(m, param, NULL, &o, inferred, from_donor);
}

IrStatus ir_set_donors(IrModule *m, const IrDonor *v, int32_t n)
{
    IrDonor *d = n > 0 ? ir_alloc_array(m->arena, (size_t)n, sizeof *d) : NULL;
    if (n > 0 && !d)
        return IR_ENOMEM;
    for (int32_t k = 0; k < n; k++) {
        d[k] = v[k];
        if (d[k].param_index.n > 0) {
            int64_t *ix = ir_alloc_array(m->arena, (size_t)d[k].param_index.n, sizeof *ix);
            if (!ix)
                return IR_ENOMEM;
            memcpy(ix, v[k].param_index.v, (size_t)d[k].param_index.n * sizeof *ix);
            d[k].param_index.v = ix;
        }
    }
    m->donor = d;
    m->ndonor = n;
    return IR_OK;
}

IrComputation *ir_entry(const IrModule *m)
{
    return m->entry >= 0 ? m->comp[m->entry] : NULL;
}

const char *ir_frontend_attr(const IrInstr *ins, const char *key)
{
    for (int32_t i = 0; i < ins->a.nfrontend; i++)
        if (strcmp(ins->a.frontend[i].key, key) == 0)
            return ins->a.frontend[i].value;
    return NULL;
}

bool ir_send_recv_pairs(const IrInstr *ins, int64_t *v, int32_t cap, int32_t *n)
{
    const char *t = ir_frontend_attr(ins, "_xla_send_recv_source_target_pairs");
    *n = 0;
    if (!t)
        return false;
    /* {{a,b},{c,d},...}: numbers in pairs, nothing but braces, commas and
     * spaces around them. */
    int depth = 0, in_pair = 0;
    for (const char *p = t; *p; p++) {
        if (*p == '{') {
            if (++depth > 2)
                return false;
            in_pair = 0;
        } else if (*p == '}') {
            if (depth-- == 2 && in_pair != 2)
                return false;
        } else if (*p >= '0' && *p <= '9') {
            if (depth != 2 || in_pair == 2 || *n >= cap)
                return false;
            int64_t x = 0;
            for (; *p >= '0' && *p <= '9'; p++)
                x = x > (INT64_MAX - 9) / 10 ? INT64_MAX : x * 10 + (*p - '0');
            p--;
            v[(*n)++] = x;
            in_pair++;
        } else if (*p != ',' && *p != ' ') {
            return false;
        }
    }
    return depth == 0 && *n % 2 == 0;
}

/* ---- deep copies ---- */

/* Copy helpers return false on OOM. */
static bool dup_i64(IrArena *a, IrI64List *l)
{
    if (l->n <= 0 || !l->v)
        return true;
    int64_t *v = ir_alloc_array(a, (size_t)l->n, sizeof *v);
    if (!v)
        return false;
    memcpy(v, l->v, (size_t)l->n * sizeof *v);
    l->v = v;
    return true;
}

static bool dup_mem(IrArena *a, void **p, size_t n)
{
    if (!*p || n == 0)
        return true;
    void *q = ir_alloc(a, n);
    if (!q)
        return false;
    memcpy(q, *p, n);
    *p = q;
    return true;
}

static bool dup_str(IrArena *a, const char **s)
{
    if (!*s)
        return true;
    char *r = ir_strdup(a, *s);
    *s = r;
    return r != NULL;
}

static bool dup_replica_groups(IrArena *a, IrReplicaGroups *g)
{
    int32_t *sizes = g->group_size;
    int64_t **groups = g->groups;
    if (!dup_mem(a, (void **)&g->group_size, (size_t)g->ngroups * sizeof(int32_t)))
        return false;
    if (g->ngroups > 0 && groups) {
        g->groups = ir_alloc_array(a, (size_t)g->ngroups, sizeof(int64_t *));
        if (!g->groups)
            return false;
        for (int32_t i = 0; i < g->ngroups; i++) {
            g->groups[i] = groups[i];
            if (!dup_mem(a, (void **)&g->groups[i], (size_t)sizes[i] * sizeof(int64_t)))
                return false;
        }
    }
    return dup_str(a, &g->mesh) && dup_i64(a, &g->iota_shape) && dup_i64(a, &g->iota_reshape) &&
           dup_mem(a, (void **)&g->iota_perm, (size_t)g->niota_perm * sizeof(int32_t));
}

/* A key/value list and its strings, copied into a. */
static bool dup_kvs(IrArena *a, IrKeyValue **kvs, int32_t n)
{
    if (n <= 0)
        return true;
    IrKeyValue *src = *kvs;
    *kvs = ir_alloc_array(a, (size_t)n, sizeof(IrKeyValue));
    if (!*kvs)
        return false;
    for (int32_t i = 0; i < n; i++) {
        (*kvs)[i] = src[i];
        if (!dup_str(a, &(*kvs)[i].key) || !dup_str(a, &(*kvs)[i].value))
            return false;
    }
    return true;
}

const IrAttrsX ir_no_attrs_x;

IrAttrsX *ir_attrs_x_edit(IrArena *ar, IrAttrs *a)
{
    IrAttrsX *x = ir_alloc(ar, sizeof *x);
    if (!x)
        return NULL;
    *x = *ir_attrs_x(a);
    a->x = x;
    return x;
}

static bool dup_attrs_x(IrArena *a, IrAttrsX *x);

static bool dup_attrs(IrArena *a, IrAttrs *h)
{
    IrI64List *hot_lists[] = {
        &h->dimensions, &h->dot.lhs_batch, &h->dot.rhs_batch, &h->dot.lhs_contracting,
        &h->dot.rhs_contracting,
    };
    for (size_t i = 0; i < sizeof hot_lists / sizeof *hot_lists; i++)
        if (!dup_i64(a, hot_lists[i]))
            return false;
    if (!dup_str(a, &h->precision_config) || !dup_str(a, &h->metadata) ||
        !dup_mem(a, (void **)&h->literal, (size_t)h->literal_bytes) ||
        !dup_kvs(a, &h->frontend, h->nfrontend))
        return false;
    if (!h->x || h->x == &ir_no_attrs_x) {
        h->x = &ir_no_attrs_x;
        return true;
    }
    IrAttrsX *x = ir_attrs_x_edit(a, h);
    return x && dup_attrs_x(a, x);
}

static bool dup_attrs_x(IrArena *a, IrAttrsX *x)
{
    IrI64List *lists[] = {
        &x->slice_start, &x->slice_limit, &x->slice_stride,
        &x->dynamic_slice_sizes, &x->pad_lo, &x->pad_hi, &x->pad_interior,
        &x->gather.offset_dims, &x->gather.collapsed_slice_dims, &x->gather.start_index_map,
        &x->gather.operand_batching_dims, &x->gather.start_indices_batching_dims,
        &x->slice_sizes,
        &x->scatter.update_window_dims, &x->scatter.inserted_window_dims,
        &x->scatter.scatter_dims_to_operand_dims, &x->scatter.input_batching_dims,
        &x->scatter.scatter_indices_batching_dims,
        &x->source_target_pairs, &x->fft_length, &x->control_predecessors,
        &x->lhs_ragged_dims, &x->rhs_group_dims,
    };
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (!dup_i64(a, lists[i]))
            return false;
    const char **strs[] = {
        &x->algorithm, &x->custom_call_target, &x->backend_config,
        &x->api_version, &x->distribution, &x->rng_algorithm, &x->fft_type,
        &x->infeed_config, &x->outfeed_config, &x->statistics_viz, &x->origin,
        &x->fusion_kind, &x->output_to_operand_aliasing, &x->async_execution_thread,
        &x->custom_call_schedule, &x->domain, &x->transpose_a, &x->permute_slice_sizes,
    };
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (!dup_str(a, strs[i]))
            return false;
    if (!dup_mem(a, (void **)&x->window.dim, (size_t)x->window.rank * sizeof(IrWindowDim)))
        return false;
    size_t ns = (size_t)x->conv.nspatial * sizeof(int64_t);
    if (!dup_mem(a, (void **)&x->conv.in_spatial, ns) ||
        !dup_mem(a, (void **)&x->conv.k_spatial, ns) ||
        !dup_mem(a, (void **)&x->conv.out_spatial, ns))
        return false;
    if (!dup_replica_groups(a, &x->replica_groups))
        return false;
    if (x->noperand_layouts > 0) {
        IrShape *src = x->operand_layout_constraints;
        x->operand_layout_constraints = ir_alloc_array(a, (size_t)x->noperand_layouts, sizeof(IrShape));
        if (!x->operand_layout_constraints)
            return false;
        for (int32_t i = 0; i < x->noperand_layouts; i++)
            if (ir_shape_copy(a, &x->operand_layout_constraints[i], &src[i]) != IR_OK)
                return false;
    }
    if (x->has_outfeed_shape && ir_shape_copy(a, &x->outfeed_shape, &x->outfeed_shape) != IR_OK)
        return false;
    return dup_kvs(a, &x->kept, x->nkept);
}

/* Deep copy of an instruction into arena `a` (operand and callee indices
 * unchanged; the caller renumbers callees). */
static bool dup_instr(IrArena *a, IrInstr *ins)
{
    if (!dup_str(a, &ins->name) || ir_shape_copy(a, &ins->shape, &ins->shape) != IR_OK)
        return false;
    if (!dup_mem(a, (void **)&ins->opnd, (size_t)ins->nopnd * sizeof(int32_t)) ||
        !dup_mem(a, (void **)&ins->called, (size_t)ins->ncalled * sizeof(int32_t)))
        return false;
    if (!dup_attrs(a, &ins->a))
        return false;
    if (ins->sharding) {
        IrSharding *s = ir_alloc(a, sizeof *s);
        if (!s || ir_sharding_copy(a, s, ins->sharding) != IR_OK)
            return false;
        ins->sharding = s;
    }
    return true;
}

int32_t ir_clone_computation(IrModule *dst, const IrModule *src, int32_t ci, int32_t *map)
{
    if (map[ci] >= 0)
        return map[ci];
    const IrComputation *sc = src->comp[ci];
    /* Callees first, so their indices are known. */
    for (int32_t i = 0; i < sc->ninstr; i++)
        for (int32_t k = 0; k < sc->instr[i].ncalled; k++)
            if (ir_clone_computation(dst, src, sc->instr[i].called[k], map) < 0)
                return -1;
    const char *name = sc->name;
    if (dst->names || dst->ncomp > 0) {
        if (ir_find_computation(dst, name) >= 0 && !(name = ir_unique_name(dst, name)))
            return -1;
    }
    int32_t di = ir_add_computation(dst, name);
    if (di < 0)
        return -1;
    IrComputation *dc = dst->comp[di];
    if (ir_reserve_instrs(dc, sc->ninstr) != IR_OK)
        return -1;
    dc->root = sc->root;
    dc->has_signature = sc->has_signature;
    if (sc->execution_thread && !(dc->execution_thread = ir_strdup(dst->arena, sc->execution_thread)))
        return -1;
    dc->async_wrapper = sc->async_wrapper;
    dc->pos = sc->pos;
    for (int32_t i = 0; i < sc->ninstr; i++) {
        IrInstr ins = sc->instr[i];
        if (!dup_instr(dst->arena, &ins))
            return -1;
        for (int32_t k = 0; k < ins.ncalled; k++)
            ins.called[k] = map[ins.called[k]];
        if (ir_add_instr(dst, dc, &ins) < 0)
            return -1;
    }
    map[ci] = di;
    return di;
}

IrModule *ir_module_clone(const IrModule *m)
{
    IrModule *d = ir_module_new(m->name);
    if (!d)
        return NULL;
    int32_t *map = ts_malloc((size_t)(m->ncomp > 0 ? m->ncomp : 1) * sizeof(int32_t));
    if (!map)
        goto oom;
    for (int32_t i = 0; i < m->ncomp; i++)
        map[i] = -1;
    /* Keep the original computation order: clone in index order. */
    for (int32_t i = 0; i < m->ncomp; i++)
        if (ir_clone_computation(d, m, i, map) < 0)
            goto oom;
    d->entry = m->entry >= 0 ? map[m->entry] : -1;
    if (d->entry >= 0)
        d->comp[d->entry]->is_entry = true;
    ts_free(map);
    d->num_partitions = m->num_partitions;
    d->replica_count = m->replica_count;
    d->is_scheduled = m->is_scheduled;
    d->entry_computation_layout = m->entry_computation_layout;
    d->stack_frames = m->stack_frames;
    if (!dup_str(d->arena, &d->stack_frames))
        goto oom;
    if (!dup_str(d->arena, &d->entry_computation_layout))
        goto oom;
    d->nalias = m->nalias;
    if (m->nalias > 0) {
        d->alias = ir_alloc_array(d->arena, (size_t)m->nalias, sizeof(IrAlias));
        if (!d->alias)
            goto oom;
        for (int32_t i = 0; i < m->nalias; i++) {
            d->alias[i] = m->alias[i];
            if (!dup_i64(d->arena, &d->alias[i].output_index) ||
                !dup_i64(d->arena, &d->alias[i].param_index))
                goto oom;
        }
    }
    if (ir_set_donors(d, m->donor, m->ndonor) != IR_OK)
        goto oom;
    d->nheader_attr = m->nheader_attr;
    if (m->nheader_attr > 0) {
        d->header_attr = ir_alloc_array(d->arena, (size_t)m->nheader_attr, sizeof(IrKeyValue));
        if (!d->header_attr)
            goto oom;
        for (int32_t i = 0; i < m->nheader_attr; i++) {
            d->header_attr[i] = m->header_attr[i];
            if (!dup_str(d->arena, &d->header_attr[i].key) ||
                !dup_str(d->arena, &d->header_attr[i].value))
                goto oom;
        }
    }
    d->file = m->file;
    d->src = m->src;
    if (!dup_str(d->arena, &d->file) || !dup_str(d->arena, &d->src))
        goto oom;
    return d;
oom:
    ts_free(map);
    ir_module_free(d);
    return NULL;
}

bool ir_is_topk(const IrInstr *ins)
{
    if (ins->op == OP_TOPK)
        return true;
    const char *t = ins->op == OP_CUSTOM_CALL ? ir_attrs_x(&ins->a)->custom_call_target : NULL;
    return t && strcmp(t, "TopK") == 0 && ins->nopnd == 1 && ins->shape.type == IR_TUPLE &&
           ins->shape.ntuple == 2;
}

int32_t ir_batch_custom_call(const IrInstr *ins)
{
    const char *t = ins->op == OP_CUSTOM_CALL ? ir_attrs_x(&ins->a)->custom_call_target : NULL;
    if (!t || ins->nopnd < 1)
        return -1;
    bool lapack = strncmp(t, "lapack_", 7) == 0 && t[7] && strchr("sdcz", t[7]);
    bool matrices = strcmp(t, "Qr") == 0 || strcmp(t, "ProductOfElementaryHouseholderReflectors") == 0 ||
                    (lapack && (strcmp(t + 8, "getrf_ffi") == 0 || strcmp(t + 8, "syevd_ffi") == 0 ||
                                strcmp(t + 8, "heevd_ffi") == 0 || strcmp(t + 8, "gesdd_ffi") == 0 ||
                                strcmp(t + 8, "gesvd_ffi") == 0 || strcmp(t + 8, "geev_ffi") == 0));
    bool vectors = strcmp(t, "tessel_lu_permutation") == 0;
    if (!matrices && !vectors)
        return -1;
    /* geev's first results are vectors; its eigenvectors (second to last) are matrices */
    int32_t first = lapack && strcmp(t + 8, "geev_ffi") == 0 ? ins->shape.ntuple - 2 : 0;
    int32_t b = ins->shape.type == IR_TUPLE ? (ins->shape.ntuple > first && first >= 0 ? ins->shape.tuple[first].rank : 0)
                                            : ins->shape.rank;
    b -= matrices ? 2 : 1;
    return b >= 0 ? b : -1;
}

IrOpcode ir_simple_reducer(const IrModule *m, int32_t comp)
{
    if (comp < 0 || comp >= m->ncomp)
        return OP_COUNT;
    const IrComputation *c = m->comp[comp];
    if (c->nparam != 2 || c->root < 0 || c->param[0] < 0 || c->param[1] < 0)
        return OP_COUNT;
    const IrInstr *r = &c->instr[c->root];
    /* JAX's psum under shard_map roots its reducer in a Sharding marker
     * (an identity): the op is what the marker passes on. */
    for (int32_t hops = 0; hops < c->ninstr && r->op == OP_CUSTOM_CALL && r->nopnd == 1 &&
                           ir_annotation_target(r->a.x->custom_call_target);
         hops++)
        r = &c->instr[r->opnd[0]];
    if (!ir_op_is_reducer(r->op))
        return OP_COUNT;
    if (r->nopnd != 2 || r->shape.type == IR_TUPLE || r->shape.rank != 0)
        return OP_COUNT;
    int32_t a = r->opnd[0], b = r->opnd[1];
    if ((a == c->param[0] && b == c->param[1]) || (a == c->param[1] && b == c->param[0]))
        return r->op;
    return OP_COUNT;
}

/* The ops whose elementwise kernel gives, on an array, exactly what it
 * gives on each scalar alone (exactly rounded, or no arithmetic at all). */
static bool exact_elementwise_op(IrOpcode op)
{
    switch (op) {
    case OP_COMPARE: case OP_SELECT: case OP_AND: case OP_OR: case OP_XOR: case OP_NOT:
    case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_MAXIMUM: case OP_MINIMUM:
    case OP_NEGATE: case OP_ABS: case OP_CONVERT: case OP_CLAMP:
        return true;
    default:
        return false;
    }
}

/* The reduce's output elements (its first result's, when a tuple). */
static int64_t reduce_outputs(const IrInstr *ins)
{
    const IrShape *r = ins->shape.type == IR_TUPLE ? (ins->shape.ntuple > 0 ? &ins->shape.tuple[0] : NULL) : &ins->shape;
    return r && r->type != IR_TUPLE ? ir_shape_elements(r) : -1;
}

bool ir_reduce_is_blockwise(const IrModule *m, const IrInstr *ins, const IrType *types)
{
    int32_t n = ins->nopnd / 2;
    if (ins->op != OP_REDUCE || ins->ncalled < 1 || n < 1 || n > 2 * IR_MAX_RANK || ins->nopnd != 2 * n ||
        reduce_outputs(ins) < IR_REDUCER_MIN_OUTPUTS)
        return false;
    int32_t comp = ins->called[0];
    if (comp < 0 || comp >= m->ncomp || !m->comp[comp])
        return false;
    const IrComputation *c = m->comp[comp];
    if (c->nparam != 2 * n || c->root < 0)
        return false;
    /* parameters: the n accumulators (the inits' types), then the n inputs */
    for (int32_t p = 0; p < 2 * n; p++)
        if (c->param[p] < 0 || c->instr[c->param[p]].shape.type != types[p < n ? n + p : p - n])
            return false;
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *x = &c->instr[i];
        if (x->op == OP_TUPLE && i == c->root && n > 1 && x->nopnd == n) {
            for (int32_t j = 0; j < n; j++)
                if (c->instr[x->opnd[j]].shape.type != types[n + j] || c->instr[x->opnd[j]].shape.rank != 0)
                    return false;
            continue;
        }
        if (x->shape.type == IR_TUPLE || x->shape.rank != 0 || x->ncalled > 0)
            return false;
        if (x->op != OP_PARAMETER && x->op != OP_CONSTANT && !exact_elementwise_op(x->op))
            return false;
    }
    return n > 1 || c->instr[c->root].shape.type == types[1];
}

bool ir_scalar_computation(const IrModule *m, int32_t comp)
{
    if (comp < 0 || comp >= m->ncomp || !m->comp[comp])
        return false;
    const IrComputation *c = m->comp[comp];
    if (c->root < 0 || c->root >= c->ninstr)
        return false;
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *x = &c->instr[i];
        if (i == c->root && x->op == OP_TUPLE)
            continue;
        if (x->shape.rank != 0 || x->shape.type == IR_TUPLE || x->ncalled > 0 || x->nopnd > 3 ||
            ir_type_size(x->shape.type) > 16)
            return false;
        switch (x->op) {
        case OP_PARAMETER: case OP_CONSTANT: case OP_COPY:
            continue;
        case OP_MAP: case OP_BITCAST_CONVERT: case OP_RNG: case OP_STOCHASTIC_CONVERT:
            return false;
        default:
            if (!ir_op_is_elementwise(x->op))
                return false;
        }
    }
    return true;
}

int64_t ir_reduce_block_bytes(const IrModule *m, const IrInstr *ins, const IrType *types)
{
    const IrComputation *c = m->comp[ins->called[0]];
    int64_t per = 0, outputs = reduce_outputs(ins);
    for (int32_t j = 0; j < ins->nopnd; j++) /* the accumulators and the inputs' block */
        per += (int64_t)ir_type_size(types[j]);
    for (int32_t i = 0; i < c->ninstr; i++)
        if (c->instr[i].op != OP_PARAMETER && c->instr[i].op != OP_TUPLE)
            per += (int64_t)ir_type_size(c->instr[i].shape.type);
    return per * (outputs < IR_REDUCER_BLOCK ? outputs : IR_REDUCER_BLOCK);
}

IrStatus ir_attrs_copy(IrArena *a, IrAttrs *dst, const IrAttrs *src)
{
    *dst = *src;
    return dup_attrs(a, dst) ? IR_OK : IR_ENOMEM;
}

bool ir_dot_transpose_swaps(const IrComputation *c, const IrInstr *transpose)
{
    if (transpose->op != OP_TRANSPOSE || transpose->nopnd != 1 || transpose->opnd[0] < 0 ||
        transpose->opnd[0] >= c->ninstr)
        return false;
    const IrInstr *dot = &c->instr[transpose->opnd[0]];
    if (dot->op != OP_DOT || dot->nopnd != 2 || dot->opnd[0] < 0 || dot->opnd[0] >= c->ninstr ||
        !ir_shape_is_array(&dot->shape))
        return false;
    const IrDotDnums *dn = &dot->a.dot;
    const IrI64List *perm = &transpose->a.dimensions;
    int32_t rank = dot->shape.rank, nb = dn->lhs_batch.n;
    int32_t nlf = c->instr[dot->opnd[0]].shape.rank - nb - dn->lhs_contracting.n;
    int32_t nrf = rank - nb - nlf;
    if (perm->n != rank || nlf < 1 || nrf < 1)
        return false;
    /* [batch, lhs free, rhs free] -> [batch, rhs free, lhs free] */
    for (int32_t d = 0; d < rank; d++) {
        int64_t want = d < nb ? d : d < nb + nrf ? nb + nlf + (d - nb) : nb + (d - nb - nrf);
        if (perm->v[d] != want)
            return false;
    }
    return true;
}
