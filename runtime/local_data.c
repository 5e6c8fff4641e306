/*
 * local_data.c: a host's part of a sharded array ("process-local data",
 * TsRunOptions.process_local): what jax.make_array_from_process_local_data
 * takes from each process and what each rank gets back of an output.
 *
 * Along each dimension, the distinct intervals that the host's devices'
 * shards cover, in order, laid end to end. Example: f32[8,6] tiled
 * devices=[4,1]0,1,2,3 on 2 hosts of 2 devices: host 1 holds rows [4,6)
 * and [6,8), so its part is f32[4,6], rows 4..7; tiled devices=[2,2]0,1,2,3
 * (host 1: devices 2, 3 = rows [4,8) x cols [0,3) and [3,6)) its part is
 * f32[4,6] too. A dimension where the host's intervals overlap without
 * being equal (a "non-uniform" one in JAX's words) has no compact part:
 * it stays whole. Replicated dimensions are whole as well.
 */
#include "run_internal.h"

#include <stdlib.h>
#include <string.h>

void rt_local_layout_free(RtLocalLayout *l)
{
    ts_free(l->buf);
    memset(l, 0, sizeof *l);
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* Dimension k's intervals: sort the starts (ext[] follows each start
 * through the pairs), drop duplicates, check they do not overlap. */
static void layout_dim(RtLocalLayout *l, int32_t k, int64_t full, int64_t *pairs, int64_t n)
{
    qsort(pairs, (size_t)n, 2 * sizeof(int64_t), cmp_i64);
    int64_t m = 0;
    bool uniform = true;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = pairs[2 * i], ext = pairs[2 * i + 1];
        if (ext == 0)
            continue; /* a tile wholly in the padding holds nothing */
        if (m > 0 && l->off[k][m - 1] == off && l->ext[k][m - 1] == ext)
            continue;
        if (m > 0 && off < l->off[k][m - 1] + l->ext[k][m - 1])
            uniform = false;
        l->off[k][m] = off;
        l->ext[k][m] = ext;
        m++;
    }
    if (!uniform) { /* whole: one interval [0, full) */
        m = 1;
        l->off[k][0] = 0;
        l->ext[k][0] = full;
    }
    l->n[k] = (int32_t)m;
    l->dims[k] = 0;
    for (int64_t i = 0; i < m; i++)
        l->dims[k] += l->ext[k][i];
}

IrStatus rt_local_layout(const IrShape *full, const IrSharding *s, int64_t first, int64_t nlocal, int64_t nparts,
                         RtLocalLayout *l, IrDiag *d)
{
    memset(l, 0, sizeof *l);
    l->rank = full->rank;
    size_t per = (size_t)(nlocal > 0 ? nlocal : 1);
    l->buf = ts_malloc(((size_t)full->rank * 2 + 2) * per * sizeof(int64_t) + 1);
    int64_t *pairs = ts_malloc(2 * per * (size_t)(full->rank > 0 ? full->rank : 1) * sizeof(int64_t));
    if (!l->buf || !pairs) {
        ts_free(pairs);
        rt_local_layout_free(l);
        return ir_oom(d, NULL);
    }
    for (int32_t k = 0; k < full->rank; k++) {
        l->off[k] = l->buf + (size_t)(2 * k) * per;
        l->ext[k] = l->buf + (size_t)(2 * k + 1) * per;
    }
    for (int64_t j = 0; j < nlocal; j++) {
        int64_t off[IR_MAX_RANK], ext[IR_MAX_RANK], size[IR_MAX_RANK];
        rt_shard_box(full, s, (first + j) % nparts, off, ext, size);
        for (int32_t k = 0; k < full->rank; k++) {
            pairs[((size_t)k * per + (size_t)j) * 2] = off[k] < full->dims[k] ? off[k] : full->dims[k];
            pairs[((size_t)k * per + (size_t)j) * 2 + 1] = ext[k];
        }
    }
    for (int32_t k = 0; k < full->rank; k++)
        layout_dim(l, k, full->dims[k], pairs + (size_t)k * per * 2, nlocal);
    ts_free(pairs);
    return IR_OK;
}

bool rt_local_offset(const RtLocalLayout *l, const int64_t *off, int64_t *loff)
{
    for (int32_t k = 0; k < l->rank; k++) {
        int64_t at = 0;
        int32_t i = 0;
        /* the interval holding off[k] (the whole dim's, for a non-uniform one) */
        while (i < l->n[k] && !(off[k] >= l->off[k][i] && off[k] < l->off[k][i] + l->ext[k][i]))
            at += l->ext[k][i++];
        if (i == l->n[k])
            return false;
        loff[k] = at + off[k] - l->off[k][i];
    }
    return true;
}

/* This host's part of output leaf `full` under `s` from its devices'
 * shards (each a padded shard; its valid box goes to its place). */
static IrStatus local_leaf(const IrShape *full, const IrSharding *s, int64_t first, int64_t nlocal, int64_t nparts,
                           DevValue *const *shards, DevValue **out, IrDiag *d)
{
    RtLocalLayout l;
    IrStatus st = rt_local_layout(full, s, first, nlocal, nparts, &l, d);
    if (st != IR_OK)
        return st;
    IrShape ls = *full;
    ls.dims = l.dims;
    ls.has_layout = false;
    DevValue *v = dev_value_new(&ls);
    if (!v) {
        rt_local_layout_free(&l);
        return ir_oom(d, NULL);
    }
    size_t esize = ir_type_size(full->type);
    for (int64_t j = 0; j < nlocal; j++) {
        int64_t off[IR_MAX_RANK], ext[IR_MAX_RANK], size[IR_MAX_RANK], loff[IR_MAX_RANK], zero[IR_MAX_RANK] = {0};
        rt_shard_box(full, s, (first + j) % nparts, off, ext, size);
        bool empty = false;
        for (int32_t k = 0; k < full->rank; k++)
            empty |= ext[k] == 0;
        if (empty)
            continue;
        if (!rt_local_offset(&l, off, loff)) {
            st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "a local shard outside the host's part");
            break;
        }
        coll_copy_box(esize, full->rank, shards[j]->data, size, zero, v->data, l.dims, loff, ext);
    }
    rt_local_layout_free(&l);
    if (st != IR_OK) {
        dev_value_unref(v);
        return st;
    }
    *out = v;
    return IR_OK;
}

/* The host's part of a value of shape `full` (tuples element by element),
 * shards[j] being device first+j's shard of it. */
static IrStatus local_value(IrArena *a, const IrShape *full, const IrSharding *s, int64_t first, int64_t nlocal,
                            int64_t nparts, DevValue *const *shards, DevValue **out, IrDiag *d)
{
    if (full->type != IR_TUPLE)
        return local_leaf(full, s, first, nlocal, nparts, shards, out, d);
    int32_t n = full->ntuple;
    DevValue **el = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *el);
    DevValue **sub = ts_calloc((size_t)(nlocal > 0 ? nlocal : 1), sizeof *sub);
    IrShape *shapes = ir_alloc_array(a, (size_t)(n > 0 ? n : 1), sizeof(IrShape));
    IrStatus st = el && sub && shapes ? IR_OK : ir_oom(d, NULL);
    for (int32_t k = 0, leaf = 0; st == IR_OK && k < n; leaf += ir_shape_leaf_count(&full->tuple[k]), k++) {
        IrSharding *es = shd_tuple_element_at(a, s, full, k, leaf);
        for (int64_t j = 0; j < nlocal; j++)
            sub[j] = shards[j]->elems[k];
        st = es ? local_value(a, &full->tuple[k], es, first, nlocal, nparts, sub, &el[k], d) : ir_oom(d, NULL);
        if (st == IR_OK)
            shapes[k] = el[k]->shape;
    }
    IrShape ts;
    if (st == IR_OK && ir_shape_make_tuple(a, &ts, n, shapes) != IR_OK)
        st = ir_oom(d, NULL);
    if (st == IR_OK && !(*out = dev_value_tuple(&ts, n, el)))
        st = ir_oom(d, NULL); /* dev_value_tuple released the elements */
    else if (st != IR_OK)
        for (int32_t k = 0; el && k < n; k++)
            dev_value_unref(el[k]);
    ts_free(el);
    ts_free(sub);
    return st;
}

IrStatus rt_local_results(const PlanCluster *c, int64_t first, int64_t nlocal, DevValue *const *local,
                          DevValue **out, IrDiag *d)
{
    *out = NULL;
    IrArena *a = ir_arena_new();
    if (!a)
        return ir_oom(d, NULL);
    IrStatus st = local_value(a, &c->out_shape, plan_root_sharding(c), first, nlocal, c->num_partitions, local, out,
                              d);
    ir_arena_free(a);
    return st;
}
