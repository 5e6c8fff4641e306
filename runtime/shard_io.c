/*
 * shard_io.c: per-host input reads. A host binds the inputs of its own
 * devices only: for every leaf of every entry parameter it computes the
 * box its partition holds (rt_shard_box, the same box math that cuts a
 * whole value in shards.c) and reads just that box from the .npy file
 * (rt_npy_read_box seeks to it) or draws just those elements of the
 * deterministic random input (rt_random_fill_box numbers elements by their
 * index in the whole leaf). No host ever holds a whole sharded input, and
 * the shards equal rt_shard_value of the whole input bit for bit.
 *
 * Local devices that hold the same box of a leaf (a replicated input, or
 * the devices along a replicated dim of a partially replicated one) share
 * one read-only value: a replicated embedding table of 2 GiB is read or
 * drawn once per host, not once per device. Kernels update a value in
 * place only when they hold its only reference, so sharing is safe. A
 * donated input (input_output_alias) is not shared: each device gets its
 * own, as from the second step on (the outputs fed back are its own), so
 * its output can take its buffer at its last read, as the plan's memory
 * estimate counts (a momentum MLP on 4 devices measured 1.021 of its
 * fitted estimate with the parameters shared).
 *
 * Keys are resolved by inputs.c (rt_resolve_inputs), so --input means the
 * same here as for the reference run. Every file is opened, and its header
 * checked against its parameter, by every host that reads it, so a file
 * that is missing or wrong on one host fails on that host.
 */
#include "run_internal.h"

#include <stdio.h>
#include <string.h>

/* A box of a leaf some local device read already, and its value. */
typedef struct ReadBox {
    int64_t off[IR_MAX_RANK], ext[IR_MAX_RANK];
    DevValue *v;               /* one reference, released with the reader */
    int64_t next;              /* the leaf's previous box, -1 */
} ReadBox;

typedef struct Reader {
    const PlanCluster *c;
    const IrModule *sig;
    const RtBindOptions *opt;
    const RtLeafBinding *lb;
    RtReadStats *rs;
    IrArena *arena;            /* tuple shardings and shard shapes */
    ReadBox *boxes;            /* boxes read so far, for the devices after */
    int64_t nboxes, capboxes;
    int64_t *head;             /* per leaf: its last box, -1 */
    int64_t first, nlocal;     /* this host's devices (process-local arrays) */
    bool *donated;             /* per parameter: handed over to the program (never shared) */
} Reader;

/* Elements of a box; 0 if any extent is 0. */
static int64_t box_elems(int32_t rank, const int64_t *ext)
{
    int64_t n = 1;
    for (int32_t k = 0; k < rank; k++)
        n *= ext[k];
    return n;
}

/* The box [lo, hi) of an input whose array holds this host's part only
 * (TsRunOptions.process_local): each dimension of the array is the host's
 * part of it (rt_local_layout) or the whole dimension. */
static IrStatus read_local_box(const Reader *r, const RtArray *a, const IrShape *full, const IrSharding *s,
                               const char *what, const int64_t *lo, const int64_t *hi, void *out, IrDiag *d)
{
    RtLocalLayout l;
    IrStatus st = rt_local_layout(full, s, r->first, r->nlocal, r->c->num_partitions, &l, d);
    if (st != IR_OK)
        return st;
    bool fits = a->rank == full->rank && (a->rank == 0 || a->dims);
    for (int32_t k = 0; fits && k < full->rank; k++) {
        if (a->dims[k] == full->dims[k] && a->dims[k] != l.dims[k]) { /* given whole */
            l.n[k] = 1;
            l.off[k][0] = 0;
            l.ext[k][0] = l.dims[k] = full->dims[k];
        }
        fits = a->dims[k] == l.dims[k];
    }
    int64_t llo[IR_MAX_RANK], lhi[IR_MAX_RANK];
    if (!fits) {
        char want[96];
        rt_dims_text(want, sizeof want, full->rank, l.dims);
        st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                      "%s: this process's part of the input has the shape %s (process-local data)", what, want);
    } else if (!rt_local_offset(&l, lo, llo)) {
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "%s: a box outside this process's part", what);
    } else {
        for (int32_t k = 0; k < full->rank; k++)
            lhi[k] = llo[k] + hi[k] - lo[k];
        IrShape ls = *full;
        ls.dims = l.dims;
        ls.has_layout = false;
        st = rt_array_read_box(a, &ls, what, llo, lhi, out, d);
    }
    rt_local_layout_free(&l);
    return st;
}

/* Read or draw the box [lo, lo+ext) of leaf `leaf` (flat number, parameter
 * p, leaf li of it) of logical shape `full` into `out` (packed, ext dims). */
static IrStatus fill_box(const Reader *r, int32_t p, int64_t li, int64_t leaf, const IrShape *full,
                         const IrSharding *s, const int64_t *lo, const int64_t *ext, void *out, IrDiag *d)
{
    int64_t hi[IR_MAX_RANK];
    for (int32_t k = 0; k < full->rank; k++)
        hi[k] = lo[k] + ext[k];
    const char *path = r->lb->path[leaf];
    const RtArray *array = r->lb->array[leaf];
    if (r->lb->zero[leaf]) {
        memset(out, 0, (size_t)(box_elems(full->rank, ext) * (int64_t)ir_type_size(full->type)));
        return IR_OK;
    }
    if (!path && !array) {
        if (r->rs)
            r->rs->random_elems += box_elems(full->rank, ext);
        return rt_random_fill_box(r->opt->seed, (uint64_t)leaf, full, lo, hi, out, d);
    }
    char *what = rt_input_leaf_desc(r->sig, p, li);
    if (!what)
        return ir_oom(d, NULL);
    IrStatus st = path                    ? rt_npy_read_box(path, full, what, lo, hi, out, d)
                  : r->opt->process_local ? read_local_box(r, array, full, s, what, lo, hi, out, d)
                                          : rt_array_read_box(array, full, what, lo, hi, out, d);
    ts_free(what);
    if (st == IR_OK && path && r->rs) {
        IrType disk = full->type == IR_BF16 ? IR_F32 : full->type; /* bf16 travels as <f4 */
        r->rs->file_bytes += box_elems(full->rank, ext) * (int64_t)ir_type_size(disk);
    }
    return st;
}

/* Whether devices may share boxes of a leaf under s: some of them hold the
 * same data (fewer data tiles than partitions). Fully tiled leaves give
 * every device its own box and skip the search. */
static bool shares_boxes(const Reader *r, const IrSharding *s)
{
    return shd_total_tiles(s) < r->c->num_partitions;
}

/* The value of a box of `leaf` a local device read already, or NULL.
 * The shard's padded size follows from the sharding, the same for every
 * device of the leaf, so the offset and extent name the box. */
static DevValue *box_seen(const Reader *r, int64_t leaf, int32_t rank, const int64_t *off,
                          const int64_t *ext)
{
    size_t n = (size_t)rank * sizeof(int64_t);
    for (int64_t k = r->head[leaf]; k >= 0; k = r->boxes[k].next) {
        const ReadBox *b = &r->boxes[k];
        if (memcmp(b->off, off, n) == 0 && memcmp(b->ext, ext, n) == 0)
            return b->v;
    }
    return NULL;
}

/* Remember a box read for a device (a new reference to v). */
static IrStatus box_keep(Reader *r, int64_t leaf, int32_t rank, const int64_t *off,
                         const int64_t *ext, DevValue *v, IrDiag *d)
{
    if (r->nboxes == r->capboxes) {
        int64_t cap = r->capboxes ? 2 * r->capboxes : 16;
        ReadBox *nb = ts_realloc(r->boxes, (size_t)cap * sizeof *nb);
        if (!nb)
            return ir_oom(d, NULL);
        r->boxes = nb;
        r->capboxes = cap;
    }
    ReadBox *b = &r->boxes[r->nboxes];
    b->next = r->head[leaf];
    r->head[leaf] = r->nboxes++;
    memcpy(b->off, off, (size_t)rank * sizeof(int64_t));
    memcpy(b->ext, ext, (size_t)rank * sizeof(int64_t));
    b->v = dev_value_ref(v);
    return IR_OK;
}

/* The file bound to leaf li of parameter p, checked against the leaf
 * (header, dtype, shape, size) without reading its data. */
static IrStatus check_file(const Reader *r, int32_t p, int64_t li, IrDiag *d)
{
    int64_t leaf = r->lb->first[p] + li;
    const char *path = r->lb->path[leaf];
    if (!path || r->lb->zero[leaf] || r->lb->shape[leaf]->type == IR_TOKEN)
        return IR_OK;
    char *what = rt_input_leaf_desc(r->sig, p, li);
    if (!what)
        return ir_oom(d, NULL);
    IrStatus st = rt_npy_check(path, r->lb->shape[leaf], what, d);
    ts_free(what);
    return st;
}

/* Partition `part`'s shard of array leaf `leaf` of logical shape `full`
 * under sharding `s`. */
static IrStatus read_leaf(Reader *r, int32_t p, int64_t li, int64_t leaf, const IrShape *full,
                          const IrSharding *s, int64_t part, DevValue **out, IrDiag *d)
{
    if (full->type == IR_TOKEN) {
        *out = dev_value_new(full);
        return *out ? IR_OK : ir_oom(d, NULL);
    }
    int64_t off[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK] = {0}, size[IR_MAX_RANK] = {0};
    rt_shard_box(full, s, part, off, ext, size);
    bool share = !r->donated[p] && shares_boxes(r, s);
    DevValue *seen = share ? box_seen(r, leaf, full->rank, off, ext) : NULL;
    if (seen) {
        *out = dev_value_ref(seen);
        return IR_OK;
    }
    bool padded = false;
    for (int32_t k = 0; k < full->rank; k++) {
        padded |= ext[k] != size[k];
        if (off[k] > full->dims[k]) /* a tile wholly in the padding */
            off[k] = full->dims[k];
    }
    IrShape ls = *full;
    ls.dims = size;
    ls.has_layout = false;
    /* Padding is zeros, so a padded shard starts zeroed. */
    DevValue *v = padded ? dev_value_new(&ls) : dev_value_new_uninit(&ls);
    if (!v)
        return ir_oom(d, NULL);
    IrStatus st;
    if (!padded) {
        st = fill_box(r, p, li, leaf, full, s, off, ext, v->data, d);
    } else {
        /* Read the valid part packed, then place it at the shard's origin. */
        IrShape bs = *full;
        bs.dims = ext;
        bs.has_layout = false;
        DevValue *b = dev_value_new_uninit(&bs);
        st = b ? fill_box(r, p, li, leaf, full, s, off, ext, b->data, d) : ir_oom(d, NULL);
        int64_t zero[IR_MAX_RANK] = {0};
        if (st == IR_OK && box_elems(full->rank, ext) > 0)
            coll_copy_box(ir_type_size(full->type), full->rank, b->data, ext, zero, v->data, size, zero, ext);
        dev_value_unref(b);
    }
    if (st == IR_OK && share)
        st = box_keep(r, leaf, full->rank, off, ext, v, d);
    if (st != IR_OK) {
        dev_value_unref(v);
        return st;
    }
    *out = v;
    return IR_OK;
}

/* The shard of a value of logical shape `full` (a parameter or a tuple
 * element of one), leaves numbered from *leaf on. */
static IrStatus read_value(Reader *r, int32_t p, int64_t *leaf, const IrShape *full, const IrSharding *s,
                           int64_t part, DevValue **out, IrDiag *d)
{
    *out = NULL;
    if (full->type != IR_TUPLE) {
        int64_t li = *leaf - r->lb->first[p];
        return read_leaf(r, p, li, (*leaf)++, full, s, part, out, d);
    }
    int32_t n = full->ntuple;
    DevValue **el = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *el);
    IrShape *shapes = ir_alloc_array(r->arena, (size_t)(n > 0 ? n : 1), sizeof(IrShape));
    IrStatus st = el && shapes ? IR_OK : ir_oom(d, NULL);
    for (int32_t k = 0, first = 0; st == IR_OK && k < n; first += ir_shape_leaf_count(&full->tuple[k]), k++) {
        IrSharding *es = shd_tuple_element_at(r->arena, s, full, k, first);
        st = es ? read_value(r, p, leaf, &full->tuple[k], es, part, &el[k], d) : ir_oom(d, NULL);
        if (st == IR_OK)
            shapes[k] = el[k]->shape;
    }
    IrShape ts;
    if (st == IR_OK && ir_shape_make_tuple(r->arena, &ts, n, shapes) != IR_OK)
        st = ir_oom(d, NULL);
    if (st == IR_OK && !(*out = dev_value_tuple(&ts, n, el)))
        st = ir_oom(d, NULL); /* dev_value_tuple released the elements */
    else if (st != IR_OK)
        for (int32_t k = 0; el && k < n; k++)
            dev_value_unref(el[k]);
    ts_free(el);
    return st;
}

static IrStatus read_device(Reader *r, int64_t part, RtArgs *a, IrDiag *d)
{
    int32_t np = r->c->nparam;
    a->args = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *a->args);
    if (!a->args)
        return ir_oom(d, NULL);
    a->nargs = np;
    for (int32_t p = 0; p < np; p++) {
        int64_t leaf = r->lb->first[p];
        IrStatus st = read_value(r, p, &leaf, &r->c->param_shape[p], plan_param_sharding(r->c, p), part,
                                 &a->args[p], d);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

IrStatus rt_read_shards(const PlanCluster *c, const IrModule *sig, const RtBindOptions *opt, int64_t first,
                        int64_t nlocal, RtArgs *shards, RtReadStats *rs, IrDiag *d)
{
    RtLeafBinding lb = {0};
    IrStatus st = rt_resolve_inputs(sig, opt, &lb, d);
    if (st == IR_OK && lb.nparam != c->nparam)
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                      "the signature has %d parameters, the program %d", (int)lb.nparam, (int)c->nparam);
    Reader r = {c, sig, opt, &lb, rs, NULL, NULL, 0, 0, NULL, first, nlocal, NULL};
    if (st == IR_OK && !(r.arena = ir_arena_new()))
        st = ir_oom(d, NULL);
    if (st == IR_OK && !(r.donated = ts_calloc((size_t)(c->nparam > 0 ? c->nparam : 1), sizeof *r.donated)))
        st = ir_oom(d, NULL);
    if (st == IR_OK && c->spmd)
        ir_alias_donated(c->spmd, r.donated, c->nparam);
    int64_t nleaves = st == IR_OK ? lb.first[lb.nparam] : 0;
    if (st == IR_OK && !(r.head = ts_malloc((size_t)(nleaves > 0 ? nleaves : 1) * sizeof *r.head)))
        st = ir_oom(d, NULL);
    for (int64_t k = 0; st == IR_OK && k < nleaves; k++)
        r.head[k] = -1;
    /* Every file against its leaf before any shard is allocated: a header
     * declaring 16 GB over 16 bytes of data is "truncated", not an
     * allocation of a shard of the 16 GB (out of memory, status 1). */
    for (int32_t p = 0; st == IR_OK && p < lb.nparam; p++)
        for (int64_t li = 0; st == IR_OK && li < lb.first[p + 1] - lb.first[p]; li++)
            st = check_file(&r, p, li, d);
    for (int64_t k = 0; st == IR_OK && k < nlocal; k++)
        st = read_device(&r, (first + k) % c->num_partitions, &shards[k], d);
    if (st != IR_OK)
        for (int64_t k = 0; k < nlocal; k++)
            rt_args_free(&shards[k]);
    for (int64_t k = 0; k < r.nboxes; k++)
        dev_value_unref(r.boxes[k].v);
    ts_free(r.boxes);
    ts_free(r.head);
    ts_free(r.donated);
    ir_arena_free(r.arena);
    rt_leaf_binding_free(&lb);
    return st;
}
