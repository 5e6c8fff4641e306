/*
 * shards.c: cutting a full value into the shard a partition holds, and
 * putting shards back together. A dim of size D in t tiles has shards of
 * s = ceil(D/t); tile j covers [j*s, min(D, (j+1)*s)) and the rest of its
 * shard is padding (zeros when cut here; dropped when put back).
 */
#include <assert.h>
#include "runtime.h"

#include <string.h>


/* Offset and valid extent of partition p's shard along each dim. */
static void shard_box(const IrShape *full, const IrSharding *s, int64_t p, int64_t *off,
                      int64_t *ext, int64_t *size)
{
    int64_t c[IR_MAX_RANK + 2];
    bool tiled = s->kind == SHD_TILED && shd_device_coords(s, p, c);
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t t = tiled ? shd_tiles(s, d) : 1;
        size[d] = shd_shard_size(full->dims[d], t);
        off[d] = t > 1 ? c[d] * size[d] : 0;
        int64_t e = full->dims[d] - off[d];
        ext[d] = e < 0 ? 0 : (e < size[d] ? e : size[d]);
    }
}

void rt_shard_box(const IrShape *full, const IrSharding *s, int64_t p, int64_t *off, int64_t *ext,
                  int64_t *size)
{
    shard_box(full, s, p, off, ext, size);
}

IrStatus rt_shard_value(const DevValue *full, const IrSharding *s, int64_t p, DevValue **out,
                        IrDiag *d)
{
    *out = NULL;
    const IrShape *fs = &full->shape;
    if (fs->type == IR_TUPLE) {
        DevValue **el = ts_calloc((size_t)(full->nelems > 0 ? full->nelems : 1), sizeof *el);
        if (!el)
            return ir_oom(d, NULL);
        IrArena *a = ir_arena_new();
        IrStatus st = a ? IR_OK : IR_ENOMEM;
        for (int32_t k = 0; k < full->nelems && st == IR_OK; k++) {
            IrSharding *es = shd_tuple_element(a, s, fs, k);
            st = es ? rt_shard_value(full->elems[k], es, p, &el[k], d) : IR_ENOMEM;
        }
        IrShape ts;
        if (st == IR_OK) {
            IrShape *shapes = ir_alloc_array(a, (size_t)(full->nelems > 0 ? full->nelems : 1), sizeof(IrShape));
            if (!shapes)
                st = IR_ENOMEM;
            for (int32_t k = 0; st == IR_OK && k < full->nelems; k++)
                shapes[k] = el[k]->shape;
            if (st == IR_OK && ir_shape_make_tuple(a, &ts, full->nelems, shapes) != IR_OK)
                st = IR_ENOMEM;
        }
        if (st == IR_OK && !(*out = dev_value_tuple(&ts, full->nelems, el)))
            st = IR_ENOMEM;
        if (st != IR_OK)
            for (int32_t k = 0; k < full->nelems; k++)
                dev_value_unref(el[k]);
        ts_free(el);
        ir_arena_free(a);
        return st == IR_ENOMEM ? ir_oom(d, NULL) : st;
    }
    if (fs->type == IR_TOKEN || s->kind != SHD_TILED) {
        *out = dev_value_clone(full);
        return *out ? IR_OK : ir_oom(d, NULL);
    }
    int64_t off[IR_MAX_RANK], ext[IR_MAX_RANK], size[IR_MAX_RANK], zero[IR_MAX_RANK] = {0};
    shard_box(fs, s, p, off, ext, size);
    IrShape ls = *fs;
    ls.dims = size;
    ls.has_layout = false;
    DevValue *v = dev_value_new(&ls);
    if (!v)
        return ir_oom(d, NULL);
    if (ls.rank > 0 && full->data)
        coll_copy_box(ir_type_size(fs->type), fs->rank, full->data, fs->dims, off, v->data, size, zero, ext);
    else if (full->data && v->data)
        memcpy(v->data, full->data, (size_t)v->nbytes);
    *out = v;
    return IR_OK;
}

IrStatus rt_unshard_needed(const IrShape *full, const IrSharding *s, int64_t n, bool *needed)
{
    if (n < 1)
        return IR_OK;
    if (full->type == IR_TUPLE) {
        IrArena *a = ir_arena_new();
        IrStatus st = a ? IR_OK : IR_ENOMEM;
        for (int32_t k = 0; k < full->ntuple && st == IR_OK; k++) {
            IrSharding *es = shd_tuple_element(a, s, full, k);
            st = es ? rt_unshard_needed(&full->tuple[k], es, n, needed) : IR_ENOMEM;
        }
        ir_arena_free(a);
        return st;
    }
    needed[0] = true; /* untiled leaves come from partition 0 */
    if (full->type == IR_TOKEN || s->kind != SHD_TILED)
        return IR_OK;
    /* A tile's first holder, by its data tile coordinates in row-major order. */
    int64_t ntiles = 1;
    for (int32_t d = 0; d < full->rank; d++)
        ntiles *= shd_tiles(s, d);
    bool *seen = ts_calloc((size_t)ntiles, sizeof *seen);
    if (!seen)
        return IR_ENOMEM;
    int64_t c[IR_MAX_RANK + 2];
    for (int64_t p = 0; p < n; p++) {
        if (!shd_device_coords(s, p, c))
            continue;
        int64_t t = 0;
        for (int32_t d = 0; d < full->rank; d++)
            t = t * shd_tiles(s, d) + c[d];
        if (!seen[t])
            seen[t] = needed[p] = true;
    }
    ts_free(seen);
    return IR_OK;
}

IrStatus rt_unshard_value(const IrShape *full, const IrSharding *s, int64_t n,
                          DevValue *const *shard, DevValue **out, IrDiag *d)
{
    *out = NULL;
    if (full->type == IR_TUPLE) {
        int32_t ne = full->ntuple;
        DevValue **el = ts_calloc((size_t)(ne > 0 ? ne : 1), sizeof *el);
        DevValue **parts = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *parts);
        IrArena *a = ir_arena_new();
        IrStatus st = (el && parts && a) ? IR_OK : IR_ENOMEM;
        for (int32_t k = 0; k < ne && st == IR_OK; k++) {
            IrSharding *es = shd_tuple_element(a, s, full, k);
            for (int64_t p = 0; p < n; p++)
                parts[p] = shard[p] ? shard[p]->elems[k] : NULL;
            st = es ? rt_unshard_value(&full->tuple[k], es, n, parts, &el[k], d) : IR_ENOMEM;
        }
        if (st == IR_OK && !(*out = dev_value_tuple(full, ne, el)))
            st = IR_ENOMEM;
        if (st != IR_OK && el)
            for (int32_t k = 0; k < ne; k++)
                dev_value_unref(el[k]);
        ts_free(el);
        ts_free(parts);
        ir_arena_free(a);
        return st == IR_ENOMEM ? ir_oom(d, NULL) : st;
    }
    if (full->type == IR_TOKEN || s->kind != SHD_TILED) {
        *out = dev_value_clone(shard[0]);
        return *out ? IR_OK : ir_oom(d, NULL);
    }
    DevValue *v = dev_value_new(full);
    if (!v)
        return ir_oom(d, NULL);
    /* Every tile is held by at least one partition; later holders of the
     * same tile overwrite with identical data. */
    int64_t off[IR_MAX_RANK], ext[IR_MAX_RANK], size[IR_MAX_RANK], zero[IR_MAX_RANK] = {0};
    for (int64_t p = 0; p < n; p++) {
        if (!shard[p]) /* a copy of an earlier partition's tile, not gathered */
            continue;
        shard_box(full, s, p, off, ext, size);
        if (full->rank > 0 && v->data)
            coll_copy_box(ir_type_size(full->type), full->rank, shard[p]->data, size, zero, v->data,
                        full->dims, off, ext);
    }
    *out = v;
    return IR_OK;
}
