/*
 * shd_ops.c: shardings as values to compute with.
 *
 * A tiled sharding is an array of device ids whose leading dims tile the
 * data dims and whose trailing dims are subgroups (REPLICATED, then MANUAL,
 * XLA's canonical order). Every transform here is one operation, shd_project:
 * choose, for each result dim, an operand data dim (or none), transpose the
 * device array so that the chosen dims come first, the unchosen data dims
 * next, the subgroups last, and read the same row-major device list with a
 * new tile shape in which the unchosen dims are merged into the replication
 * subgroup.
 *
 * Example: {devices=[2,3]0,1,2,3,4,5} projected to rank 1 keeping dim 1
 * (a reduce over dim 0): device array [[0,1,2],[3,4,5]] transposed to
 * [[0,3],[1,4],[2,5]] gives {devices=[3,2]0,3,1,4,2,5 last_tile_dim_replicate}:
 * devices 0 and 3 hold the same column block of the result.
 */
#include "partition.h"

#include <string.h>

/* ---- constructors ---- */

static IrSharding *new_sharding(IrArena *a, IrShardingKind kind)
{
    IrSharding *s = ir_alloc(a, sizeof *s);
    if (s)
        s->kind = kind;
    return s;
}

IrSharding *shd_replicated(IrArena *a)
{
    return new_sharding(a, SHD_REPLICATED);
}

IrSharding *shd_manual(IrArena *a)
{
    return new_sharding(a, SHD_MANUAL);
}

/* Build a tiled sharding from parts (copied) and normalise it. */
static IrSharding *normalize(IrArena *a, const IrSharding *s, int64_t *adopt);

/* devices is copied unless `adopt` (then it is an array of `a` that the
 * result takes over: see normalize). */
static IrSharding *make_tiled(IrArena *a, int32_t ntile, const int64_t *tile, const int64_t *devices,
                              int32_t nsub, const IrSubgroupType *sub, bool adopt)
{
    IrSharding t = {0};
    t.kind = SHD_TILED;
    t.ntile = ntile;
    t.tile = (int64_t *)tile;
    t.ndevices = 1;
    for (int32_t i = 0; i < ntile; i++)
        t.ndevices *= tile[i];
    t.devices = (int64_t *)devices;
    t.nsubgroup = nsub;
    t.subgroup = (IrSubgroupType *)sub;
    return normalize(a, &t, adopt ? (int64_t *)devices : NULL);
}

IrSharding *shd_tiled(IrArena *a, int32_t ntile, const int64_t *tile, const int64_t *devices,
                      int32_t nrepl)
{
    IrSubgroupType r = SUBGROUP_REPLICATED;
    return make_tiled(a, ntile, tile, devices, nrepl > 0 ? 1 : 0, &r, false);
}

IrSharding *shd_tuple(IrArena *a, int32_t n, IrSharding *const *elems)
{
    IrSharding *s = new_sharding(a, SHD_TUPLE);
    if (!s)
        return NULL;
    s->ntuple = n;
    if (n > 0) {
        s->tuple = ir_alloc_array(a, (size_t)n, sizeof(IrSharding));
        if (!s->tuple)
            return NULL;
        for (int32_t i = 0; i < n; i++)
            if (ir_sharding_copy(a, &s->tuple[i], elems[i]) != IR_OK)
                return NULL;
    }
    return s;
}

/* Normal form of a tiled sharding (see partition.h). Subgroup dims of size 1
 * are dropped and REPLICATED subgroups merged: the merge is a reshape only
 * when they are adjacent, which holds in canonical order (REPLICATED first). */
IrSharding *shd_normalize(IrArena *a, const IrSharding *s)
{
    return normalize(a, s, NULL);
}

/* A MANUAL subgroup dim before a REPLICATED one (XLA writes
 * last_tile_dims={manual, replicated}, Shardy's export too) is put in
 * canonical order, REPLICATED first, with the devices transposed along:
 * {devices=[1,2,2]<=[4] last_tile_dims={manual, replicated}} is
 * {devices=[1,2,2]0,2,1,3 last_tile_dims={replicated, manual}}. NULL when
 * already in order (or on OOM, *oom set). */
static IrSharding *reorder_subgroups(IrArena *a, const IrSharding *s, bool *oom)
{
    int32_t k = s->ntile - s->nsubgroup, perm[IR_MAX_RANK + 4], n = 0;
    bool seen_manual = false, out_of_order = false;
    for (int32_t i = k; i < s->ntile; i++) {
        if (s->tile[i] == 1)
            continue;
        seen_manual |= s->subgroup[i - k] == SUBGROUP_MANUAL;
        out_of_order |= seen_manual && s->subgroup[i - k] == SUBGROUP_REPLICATED;
    }
    if (!out_of_order || s->ntile > IR_MAX_RANK + 4)
        return NULL;
    for (int32_t i = 0; i < k; i++)
        perm[n++] = i;
    for (int32_t pass = 0; pass < 2; pass++)
        for (int32_t i = k; i < s->ntile; i++)
            if ((s->subgroup[i - k] == SUBGROUP_REPLICATED) == (pass == 0))
                perm[n++] = i;
    IrSharding *t = new_sharding(a, SHD_TILED);
    int64_t *tile = ir_alloc_array(a, (size_t)n, sizeof(int64_t));
    IrSubgroupType *sub = ir_alloc_array(a, (size_t)s->nsubgroup, sizeof(IrSubgroupType));
    int64_t *dev = ir_alloc_array(a, (size_t)s->ndevices, sizeof(int64_t));
    if (!t || !tile || !sub || !dev) {
        *oom = true;
        return NULL;
    }
    int64_t stride[IR_MAX_RANK + 4], idx[IR_MAX_RANK + 4], st = 1;
    for (int32_t i = n - 1; i >= 0; i--) {
        stride[i] = st;
        st *= s->tile[i];
    }
    for (int32_t i = 0; i < n; i++) {
        tile[i] = s->tile[perm[i]];
        idx[i] = 0;
        if (i >= k)
            sub[i - k] = s->subgroup[perm[i] - k];
    }
    for (int64_t e = 0; e < s->ndevices; e++) {
        int64_t src = 0;
        for (int32_t i = 0; i < n; i++)
            src += idx[i] * stride[perm[i]];
        dev[e] = s->devices[src];
        for (int32_t i = n - 1; i >= 0; i--) {
            if (++idx[i] < tile[i])
                break;
            idx[i] = 0;
        }
    }
    t->ntile = n;
    t->tile = tile;
    t->ndevices = s->ndevices;
    t->devices = dev;
    t->nsubgroup = s->nsubgroup;
    t->subgroup = sub;
    return t;
}

/* adopt: s->devices when the caller made that array in `a` for this
 * sharding alone (it becomes the result's, not copied: at thousands of
 * devices the copy is what a projection costs); NULL to copy. */
static IrSharding *normalize(IrArena *a, const IrSharding *s, int64_t *adopt)
{
    if (s->kind == SHD_TILED) {
        bool oom = false;
        IrSharding *r = reorder_subgroups(a, s, &oom);
        if (oom)
            return NULL;
        if (r) {
            s = r;
            adopt = r->devices;
        }
    }
    if (s->kind == SHD_TUPLE) {
        IrSharding *t = new_sharding(a, SHD_TUPLE);
        if (!t)
            return NULL;
        t->ntuple = s->ntuple;
        t->tuple = ir_alloc_array(a, (size_t)(s->ntuple > 0 ? s->ntuple : 1), sizeof(IrSharding));
        if (!t->tuple)
            return NULL;
        for (int32_t i = 0; i < s->ntuple; i++) {
            IrSharding *e = shd_normalize(a, &s->tuple[i]);
            if (!e)
                return NULL;
            t->tuple[i] = *e;
        }
        return t;
    }
    if (s->kind != SHD_TILED) {
        IrSharding *t = new_sharding(a, s->kind);
        if (t)
            t->device = s->device;
        return t;
    }
    int32_t k = s->ntile - s->nsubgroup;
    int32_t cap = s->ntile + 1;
    int64_t *tile = ir_alloc_array(a, (size_t)cap, sizeof(int64_t));
    IrSubgroupType *sub = ir_alloc_array(a, (size_t)cap, sizeof(IrSubgroupType));
    if (!tile || !sub)
        return NULL;
    int32_t n = 0;
    bool data_tiled = false;
    for (int32_t i = 0; i < k; i++) {
        tile[n++] = s->tile[i];
        data_tiled |= s->tile[i] > 1;
    }
    int64_t repl = 1;
    bool manual = false;
    int32_t nsub = 0;
    for (int32_t i = k; i < s->ntile; i++)
        if (s->subgroup[i - k] == SUBGROUP_REPLICATED)
            repl *= s->tile[i];
    if (repl > 1) {
        tile[n++] = repl;
        sub[nsub++] = SUBGROUP_REPLICATED;
    }
    for (int32_t i = k; i < s->ntile; i++)
        if (s->subgroup[i - k] == SUBGROUP_MANUAL && s->tile[i] > 1) {
            tile[n++] = s->tile[i];
            sub[nsub++] = SUBGROUP_MANUAL;
            manual = true;
        }
    if (!data_tiled && !manual)
        return new_sharding(a, SHD_REPLICATED);
    int64_t *dev = adopt;
    if (!dev && ir_devices_are_iota(s->devices))
        dev = s->devices; /* shared, never written (ir.h) */
    if (!dev) {
        dev = ir_alloc_array(a, (size_t)s->ndevices, sizeof(int64_t));
        if (!dev)
            return NULL;
        memcpy(dev, s->devices, (size_t)s->ndevices * sizeof(int64_t));
    }
    IrSharding *t = new_sharding(a, SHD_TILED);
    if (!t)
        return NULL;
    t->ntile = n;
    t->tile = tile;
    t->ndevices = s->ndevices;
    t->devices = dev;
    t->nsubgroup = nsub;
    t->subgroup = sub;
    t->last_tile_dim_replicate = nsub == 1 && sub[0] == SUBGROUP_REPLICATED;
    return t;
}

/* ---- queries ---- */

static int32_t data_rank(const IrSharding *s)
{
    return s->kind == SHD_TILED ? s->ntile - s->nsubgroup : 0;
}

bool shd_is_replicated(const IrSharding *s)
{
    if (s->kind == SHD_REPLICATED)
        return true;
    if (s->kind != SHD_TILED)
        return false;
    for (int32_t i = 0; i < s->ntile; i++) {
        bool sub = i >= data_rank(s);
        if (s->tile[i] > 1 && (!sub || s->subgroup[i - data_rank(s)] != SUBGROUP_REPLICATED))
            return false;
    }
    return true;
}

bool shd_is_manual(const IrSharding *s)
{
    if (s->kind == SHD_MANUAL)
        return true;
    if (s->kind != SHD_TILED)
        return false;
    for (int32_t i = 0; i < s->ntile; i++) {
        bool sub = i >= data_rank(s);
        if (s->tile[i] > 1 && (!sub || s->subgroup[i - data_rank(s)] != SUBGROUP_MANUAL))
            return false;
    }
    return true;
}

bool shd_has_manual_subgroup(const IrSharding *s)
{
    if (s->kind != SHD_TILED)
        return false;
    for (int32_t i = 0; i < s->nsubgroup; i++)
        if (s->subgroup[i] == SUBGROUP_MANUAL)
            return true;
    return false;
}

int64_t shd_tiles(const IrSharding *s, int32_t d)
{
    if (s->kind != SHD_TILED || d < 0 || d >= data_rank(s))
        return 1;
    return s->tile[d];
}

int64_t shd_total_tiles(const IrSharding *s)
{
    int64_t n = 1;
    for (int32_t i = 0; i < data_rank(s); i++)
        n *= s->tile[i];
    return n;
}

const IrSharding *shd_leaf(const IrSharding *s, const IrShape *shape, int32_t leaf)
{
    (void)shape;
    if (s->kind != SHD_TUPLE)
        return s;
    return leaf >= 0 && leaf < s->ntuple ? &s->tuple[leaf] : NULL;
}

IrSharding *shd_tuple_element(IrArena *a, const IrSharding *s, const IrShape *shape, int32_t i)
{
    if (shape->type != IR_TUPLE || i < 0 || i >= shape->ntuple)
        return NULL;
    int32_t first = 0;
    for (int32_t k = 0; s->kind == SHD_TUPLE && k < i; k++)
        first += ir_shape_leaf_count(&shape->tuple[k]);
    return shd_tuple_element_at(a, s, shape, i, first);
}

IrSharding *shd_tuple_element_at(IrArena *a, const IrSharding *s, const IrShape *shape, int32_t i, int32_t first)
{
    if (shape->type != IR_TUPLE || i < 0 || i >= shape->ntuple)
        return NULL;
    const IrShape *el = &shape->tuple[i];
    if (s->kind != SHD_TUPLE)
        return shd_broadcast_to_shape(a, s, el);
    int32_t n = ir_shape_leaf_count(el);
    if (first + n > s->ntuple)
        return NULL;
    if (el->type != IR_TUPLE) {
        IrSharding *r = ir_alloc(a, sizeof *r);
        if (!r || ir_sharding_copy(a, r, &s->tuple[first]) != IR_OK)
            return NULL;
        return r;
    }
    IrSharding *t = new_sharding(a, SHD_TUPLE);
    if (!t)
        return NULL;
    t->ntuple = n;
    t->tuple = ir_alloc_array(a, (size_t)(n > 0 ? n : 1), sizeof(IrSharding));
    if (!t->tuple)
        return NULL;
    for (int32_t k = 0; k < n; k++)
        if (ir_sharding_copy(a, &t->tuple[k], &s->tuple[first + k]) != IR_OK)
            return NULL;
    return t;
}

IrSharding *shd_broadcast_to_shape(IrArena *a, const IrSharding *s, const IrShape *shape)
{
    if (shape->type != IR_TUPLE) {
        IrSharding *r = ir_alloc(a, sizeof *r);
        if (!r || ir_sharding_copy(a, r, s) != IR_OK)
            return NULL;
        return r;
    }
    IrSharding *t = new_sharding(a, SHD_TUPLE);
    if (!t)
        return NULL;
    t->ntuple = ir_shape_leaf_count(shape);
    t->tuple = ir_alloc_array(a, (size_t)(t->ntuple > 0 ? t->ntuple : 1), sizeof(IrSharding));
    if (!t->tuple)
        return NULL;
    for (int32_t k = 0; k < t->ntuple; k++)
        if (ir_sharding_copy(a, &t->tuple[k], s->kind == SHD_TUPLE ? shd_leaf(s, shape, k) : s) != IR_OK)
            return NULL;
    return t;
}

/* ---- the one transform ---- */

/* Transpose a row-major array `src` of dims `dims` (n of them) so that
 * result dim i is source dim perm[i]. */
/* Whether transposing by perm keeps the order of the elements: the dims
 * of size > 1 stay in order. */
static bool keeps_order(int32_t n, const int64_t *dims, const int32_t *perm)
{
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++)
        if (dims[perm[i]] > 1) {
            if (perm[i] < last)
                return false;
            last = perm[i];
        }
    return true;
}

static void transpose_devices(const int64_t *src, int64_t *dst, int32_t n, const int64_t *dims,
                              const int32_t *perm)
{
    /* Dims of size 1 do not order anything: squeeze them out first, so
     * that a permutation moving only those (a projection onto a dot's
     * operand, most often) is the identity copy below. */
    int64_t sq_dims[IR_MAX_RANK + 2];
    int32_t sq_perm[IR_MAX_RANK + 2], rank_of[IR_MAX_RANK + 2], m0 = 0;
    for (int32_t i = 0, r = 0; i < n; i++)
        rank_of[i] = dims[i] > 1 ? r++ : -1;
    for (int32_t i = 0; i < n; i++)
        if (dims[perm[i]] > 1) {
            sq_perm[m0] = rank_of[perm[i]];
            sq_dims[rank_of[perm[i]]] = dims[perm[i]];
            m0++;
        }
    n = m0;
    dims = sq_dims;
    perm = sq_perm;
    int64_t total = 1, sstride[IR_MAX_RANK + 2], idx[IR_MAX_RANK + 2];
    for (int32_t i = n - 1; i >= 0; i--) {
        sstride[i] = total;
        total *= dims[i];
    }
    /* The trailing dims the permutation leaves in place are contiguous in
     * both: they move as one block (all of it for the identity, the common
     * case), so the cost per device is a copy, not an index walk. */
    int32_t m = n;
    int64_t block = 1;
    while (m > 0 && perm[m - 1] == m - 1) {
        m--;
        block *= dims[m];
    }
    if (m == 0) {
        memcpy(dst, src, (size_t)total * sizeof *dst);
        return;
    }
    for (int32_t i = 0; i < m; i++)
        idx[i] = 0;
    for (int64_t o = 0; o < total; o += block) {
        int64_t off = 0;
        for (int32_t i = 0; i < m; i++)
            off += idx[i] * sstride[perm[i]];
        memcpy(dst + o, src + off, (size_t)block * sizeof *dst);
        for (int32_t i = m - 1; i >= 0; i--) {
            if (++idx[i] < dims[perm[i]])
                break;
            idx[i] = 0;
        }
    }
}

IrSharding *shd_project(IrArena *a, const IrSharding *s, int32_t rank, const int64_t *map)
{
    if (s->kind != SHD_TILED)
        return shd_normalize(a, s);
    int32_t k = data_rank(s);
    if (rank > IR_MAX_RANK || s->ntile > IR_MAX_RANK + 2)
        return NULL;
    int32_t perm[IR_MAX_RANK + 2];
    bool used[IR_MAX_RANK + 2] = {false};
    int32_t n = 0;
    for (int32_t i = 0; i < rank; i++)
        if (map[i] >= 0 && map[i] < k && !used[map[i]]) {
            perm[n++] = (int32_t)map[i];
            used[map[i]] = true;
        }
    int32_t nkept = n;
    int64_t dropped = 1;
    for (int32_t i = 0; i < k; i++)
        if (!used[i]) {
            perm[n++] = i;
            dropped *= s->tile[i];
        }
    /* replicated subgroups next to the dropped dims they merge with, then
     * the manual ones (an input may list them manual first) */
    for (int32_t pass = 0; pass < 2; pass++)
        for (int32_t i = k; i < s->ntile; i++)
            if ((s->subgroup[i - k] == SUBGROUP_REPLICATED) == (pass == 0))
                perm[n++] = i;
    (void)nkept;

    /* 0..n-1 kept in order stays the shared table: no array at all */
    bool shared = ir_devices_are_iota(s->devices) && keeps_order(s->ntile, s->tile, perm);
    int64_t *dev = shared ? s->devices : ir_alloc_array(a, (size_t)s->ndevices, sizeof(int64_t));
    int64_t *tile = ir_alloc_array(a, (size_t)rank + (size_t)s->nsubgroup + 2, sizeof(int64_t));
    IrSubgroupType *sub = ir_alloc_array(a, (size_t)s->nsubgroup + 2, sizeof(IrSubgroupType));
    if (!dev || !tile || !sub)
        return NULL;
    if (!shared)
        transpose_devices(s->devices, dev, s->ntile, s->tile, perm);

    /* New tile shape: chosen dims (1 where unmapped), one REPLICATED dim
     * (dropped data dims x old replication), then MANUAL subgroups. */
    bool taken[IR_MAX_RANK + 2] = {false};
    int32_t nt = 0;
    for (int32_t i = 0; i < rank; i++) {
        int64_t t = 1;
        if (map[i] >= 0 && map[i] < k && !taken[map[i]]) {
            t = s->tile[map[i]];
            taken[map[i]] = true;
        }
        tile[nt++] = t;
    }
    int64_t repl = dropped;
    for (int32_t i = k; i < s->ntile; i++)
        if (s->subgroup[i - k] == SUBGROUP_REPLICATED)
            repl *= s->tile[i];
    int32_t nsub = 0;
    if (repl > 1) {
        tile[nt++] = repl;
        sub[nsub++] = SUBGROUP_REPLICATED;
    }
    for (int32_t i = k; i < s->ntile; i++)
        if (s->subgroup[i - k] == SUBGROUP_MANUAL) {
            tile[nt++] = s->tile[i];
            sub[nsub++] = SUBGROUP_MANUAL;
        }
    return make_tiled(a, nt, tile, dev, nsub, sub, true);
}

IrSharding *shd_transpose(IrArena *a, const IrSharding *s, const int64_t *perm)
{
    return shd_project(a, s, data_rank(s) ? data_rank(s) : 0, perm);
}

IrSharding *shd_remove_dims(IrArena *a, const IrSharding *s, int32_t ndims, const int64_t *dims)
{
    int32_t k = data_rank(s);
    int64_t map[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t i = 0; i < k; i++) {
        bool removed = false;
        for (int32_t j = 0; j < ndims; j++)
            removed |= dims[j] == i;
        if (!removed)
            map[n++] = i;
    }
    return shd_project(a, s, n, map);
}

IrSharding *shd_replicate_dims(IrArena *a, const IrSharding *s, int32_t ndims, const int64_t *dims)
{
    int32_t k = data_rank(s);
    int64_t map[IR_MAX_RANK];
    for (int32_t i = 0; i < k; i++) {
        map[i] = i;
        for (int32_t j = 0; j < ndims; j++)
            if (dims[j] == i)
                map[i] = -1;
    }
    return shd_project(a, s, k, map);
}

IrSharding *shd_insert_dims(IrArena *a, const IrSharding *s, int32_t rank, const int64_t *map)
{
    int32_t k = data_rank(s);
    int64_t inv[IR_MAX_RANK];
    if (rank > IR_MAX_RANK)
        return NULL;
    for (int32_t i = 0; i < rank; i++)
        inv[i] = -1;
    for (int32_t i = 0; i < k; i++)
        if (map[i] >= 0 && map[i] < rank)
            inv[map[i]] = i;
    return shd_project(a, s, rank, inv);
}

/* ---- shapes and coordinates ---- */

int64_t shd_shard_size(int64_t dim, int64_t tiles)
{
    if (tiles <= 1)
        return dim;
    return dim / tiles + (dim % tiles != 0); /* ceil without dim + tiles - 1 overflowing near INT64_MAX */
}

IrStatus shd_shard_shape(IrArena *a, const IrShape *shape, const IrSharding *s, IrShape *out)
{
    if (shape->type == IR_TUPLE) {
        IrStatus st = ir_shape_copy(a, out, shape);
        if (st != IR_OK)
            return st;
        int32_t leaf = 0;
        /* Walk the copy's leaves in depth-first order, replacing each. */
        IrShape *stack[IR_MAX_RANK * 4];
        int32_t pos[IR_MAX_RANK * 4], sp = 0;
        stack[0] = out;
        pos[0] = 0;
        while (sp >= 0) {
            IrShape *t = stack[sp];
            if (pos[sp] >= t->ntuple) {
                sp--;
                continue;
            }
            IrShape *el = &t->tuple[pos[sp]++];
            if (el->type == IR_TUPLE) {
                if (sp + 1 >= (int32_t)(sizeof stack / sizeof *stack))
                    return IR_EUNSUPPORTED;
                stack[++sp] = el;
                pos[sp] = 0;
                continue;
            }
            const IrSharding *ls = shd_leaf(s, shape, leaf++);
            if (!ls)
                return IR_EINTERNAL;
            IrShape tmp = *el;
            if ((st = shd_shard_shape(a, &tmp, ls, el)) != IR_OK)
                return st;
        }
        return IR_OK;
    }
    IrStatus st = ir_shape_copy(a, out, shape);
    if (st != IR_OK || s->kind != SHD_TILED)
        return st;
    for (int32_t d = 0; d < shape->rank && d < data_rank(s); d++)
        out->dims[d] = shd_shard_size(shape->dims[d], s->tile[d]);
    return IR_OK;
}

bool shd_device_coords(const IrSharding *s, int64_t device, int64_t *coords)
{
    if (s->kind != SHD_TILED)
        return false;
    /* A device is listed once (the verifier's rule), and an iota
     * assignment without a transpose lists device i at i: found without
     * a pass over every device (per-device tables over N devices would
     * cost N^2). */
    int64_t first = device >= 0 && device < s->ndevices && s->devices[device] == device ? device : 0;
    for (int64_t i = first; i < s->ndevices; i++) {
        if (s->devices[i] != device)
            continue;
        int64_t r = i;
        for (int32_t d = s->ntile - 1; d >= 0; d--) {
            coords[d] = r % s->tile[d];
            r /= s->tile[d];
        }
        return true;
    }
    return false;
}

int64_t shd_device_at(const IrSharding *s, const int64_t *coords)
{
    int64_t off = 0;
    for (int32_t d = 0; d < s->ntile; d++)
        off = off * s->tile[d] + coords[d];
    return s->devices[off];
}
