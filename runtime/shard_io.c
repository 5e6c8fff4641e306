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
 * Keys are resolved by inputs.c (rt_resolve_inputs), so --input means the
 * same here as for the reference run. Every file is opened, and its header
 * checked against its parameter, by every device that reads it, so a file
 * that is missing or wrong on one host fails on that host.
 */
#include "transport.h"

#include <string.h>

typedef struct Reader {
    const PlanCluster *c;
    const IrModule *sig;
    const RtBindOptions *opt;
    const RtLeafBinding *lb;
    RtReadStats *rs;
    IrArena *arena;            /* tuple shardings and shard shapes */
} Reader;

static IrStatus oom(IrDiag *d)
{
    return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

/* Elements of a box; 0 if any extent is 0. */
static int64_t box_elems(int32_t rank, const int64_t *ext)
{
    int64_t n = 1;
    for (int32_t k = 0; k < rank; k++)
        n *= ext[k];
    return n;
}

/* Read or draw the box [lo, lo+ext) of leaf `leaf` (flat number, parameter
 * p, leaf li of it) of logical shape `full` into `out` (packed, ext dims). */
static IrStatus fill_box(const Reader *r, int32_t p, int64_t li, int64_t leaf, const IrShape *full,
                         const int64_t *lo, const int64_t *ext, void *out, IrDiag *d)
{
    int64_t hi[IR_MAX_RANK];
    for (int32_t k = 0; k < full->rank; k++)
        hi[k] = lo[k] + ext[k];
    const char *path = r->lb->path[leaf];
    const RtArray *array = r->lb->array[leaf];
    if (!path && !array) {
        if (r->rs)
            r->rs->random_elems += box_elems(full->rank, ext);
        return rt_random_fill_box(r->opt->seed, (uint64_t)leaf, full, lo, hi, out, d);
    }
    char *what = rt_input_leaf_desc(r->sig, p, li);
    if (!what)
        return oom(d);
    IrStatus st = path ? rt_npy_read_box(path, full, what, lo, hi, out, d)
                       : rt_array_read_box(array, full, what, lo, hi, out, d);
    ts_free(what);
    if (st == IR_OK && path && r->rs) {
        IrType disk = full->type == IR_BF16 ? IR_F32 : full->type; /* bf16 travels as <f4 */
        r->rs->file_bytes += box_elems(full->rank, ext) * (int64_t)ir_type_size(disk);
    }
    return st;
}

/* Partition `part`'s shard of array leaf `leaf` of logical shape `full`
 * under sharding `s`. */
static IrStatus read_leaf(const Reader *r, int32_t p, int64_t li, int64_t leaf, const IrShape *full,
                          const IrSharding *s, int64_t part, DevValue **out, IrDiag *d)
{
    if (full->type == IR_TOKEN) {
        *out = dev_value_new(full);
        return *out ? IR_OK : oom(d);
    }
    int64_t off[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK] = {0}, size[IR_MAX_RANK] = {0};
    rt_shard_box(full, s, part, off, ext, size);
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
        return oom(d);
    IrStatus st;
    if (!padded) {
        st = fill_box(r, p, li, leaf, full, off, ext, v->data, d);
    } else {
        /* Read the valid part packed, then place it at the shard's origin. */
        IrShape bs = *full;
        bs.dims = ext;
        bs.has_layout = false;
        DevValue *b = dev_value_new_uninit(&bs);
        st = b ? fill_box(r, p, li, leaf, full, off, ext, b->data, d) : oom(d);
        int64_t zero[IR_MAX_RANK] = {0};
        if (st == IR_OK && box_elems(full->rank, ext) > 0)
            rt_copy_box(ir_type_size(full->type), full->rank, b->data, ext, zero, v->data, size, zero, ext);
        dev_value_unref(b);
    }
    if (st != IR_OK) {
        dev_value_unref(v);
        return st;
    }
    *out = v;
    return IR_OK;
}

/* The shard of a value of logical shape `full` (a parameter or a tuple
 * element of one), leaves numbered from *leaf on. */
static IrStatus read_value(const Reader *r, int32_t p, int64_t *leaf, const IrShape *full, const IrSharding *s,
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
    IrStatus st = el && shapes ? IR_OK : oom(d);
    for (int32_t k = 0; st == IR_OK && k < n; k++) {
        IrSharding *es = shd_tuple_element(r->arena, s, full, k);
        st = es ? read_value(r, p, leaf, &full->tuple[k], es, part, &el[k], d) : oom(d);
        if (st == IR_OK)
            shapes[k] = el[k]->shape;
    }
    IrShape ts;
    if (st == IR_OK && ir_shape_make_tuple(r->arena, &ts, n, shapes) != IR_OK)
        st = oom(d);
    if (st == IR_OK && !(*out = dev_value_tuple(&ts, n, el)))
        st = oom(d); /* dev_value_tuple released the elements */
    else if (st != IR_OK)
        for (int32_t k = 0; el && k < n; k++)
            dev_value_unref(el[k]);
    ts_free(el);
    return st;
}

static IrStatus read_device(const Reader *r, int64_t part, RtArgs *a, IrDiag *d)
{
    int32_t np = r->c->nparam;
    a->args = ts_calloc((size_t)(np > 0 ? np : 1), sizeof *a->args);
    if (!a->args)
        return oom(d);
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
    Reader r = {c, sig, opt, &lb, rs, NULL};
    if (st == IR_OK && !(r.arena = ir_arena_new()))
        st = oom(d);
    for (int64_t k = 0; st == IR_OK && k < nlocal; k++)
        st = read_device(&r, (first + k) % c->num_partitions, &shards[k], d);
    if (st != IR_OK)
        for (int64_t k = 0; k < nlocal; k++)
            rt_args_free(&shards[k]);
    ir_arena_free(r.arena);
    rt_leaf_binding_free(&lb);
    return st;
}
