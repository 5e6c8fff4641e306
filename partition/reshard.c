/*
 * reshard.c: moving a value from one sharding to another with collectives,
 * as XLA's PartitionedHlo::Reshard does.
 *
 * Cases, cheapest first:
 *   same sharding                          nothing
 *   replicated -> tiled                    pad to a multiple of the tiles, then
 *                                          dynamic-slice at this partition's
 *                                          offsets (no communication)
 *   tiled -> tiled, same tiles, other      collective-permute (each device
 *     device order                         sends its shard to the device that
 *                                          needs it)
 *   tiled -> coarser (some dims untiled)   all-gather along the dims that stop
 *                                          being tiled, then slice the padding
 *   tiled -> finer, each device's new     dynamic-slice of the local shard (no
 *     tile inside its old one              communication; see refine below)
 *   t tiles along dim a -> t tiles along   all-to-all (even shapes only; see
 *     dim b, each device in its place      swapped_dim and all_to_all below)
 *   anything else                          all-gather to replicated, then
 *                                          dynamic-slice to the target
 * Maximal shardings are treated as replicated: the partitioned program
 * computes a maximal value on every device (correct, not minimal).
 *
 * Example: f32[7] on {devices=[2]0,1} holds shards of 4 (device 1's last
 * element is padding). To replicate: all-gather along 0 gives f32[8] on
 * both devices; slice [0:7] drops the padding.
 */
#include "spmd_internal.h"

#include <string.h>

static bool is_repl(const IrSharding *s)
{
    return shd_is_replicated(s) || s->kind == SHD_MAXIMAL;
}

static bool same(const IrSharding *a, const IrSharding *b)
{
    if (is_repl(a) && is_repl(b))
        return true;
    return ir_sharding_equal(a, b);
}

static int32_t fail(PComp *pc, IrStatus st, const char *what)
{
    ir_error(pc->sp->d, st, NULL, NULL, (IrPos){0, 0}, "reshard: %s", what);
    return -1;
}

/* The sharding's data tiles and per-dim offsets as s32[] scalars. */
static bool offsets(PComp *pc, const IrSharding *s, const IrShape *full, int32_t *starts)
{
    for (int32_t d = 0; d < full->rank; d++) {
        starts[d] = spmd_emit_offset(pc, s, full, d);
        if (starts[d] < 0)
            return false;
    }
    return true;
}

/* Replicated value (full shape) -> shard under tiled `to`. Where a dim
 * does not divide, the shard is cut from the value itself (dynamic-slice
 * clamps the last tiles' starts to dim - size), padded with one shard's
 * zeros and moved to its place by a second dynamic-slice (by how far its
 * start was clamped): the padding a device holds is one shard's, not the
 * whole value's. Example: f32[4,4,12,12] (a bias broadcast replicated)
 * to {devices=[8,1,1,1]}: device 5's start 5 is clamped to 3, its
 * f32[1,4,12,12] padded to f32[2,...] and sliced at 2: zeros, where a pad
 * of the value to f32[8,4,12,12] was the step's peak (t5_attn of
 * tests/jax/test_auto_heldout46.py on 8 devices, 18432 bytes). */
static int32_t slice_to(PComp *pc, int32_t v, const IrShape *full, const IrSharding *to)
{
    int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK] = {0}, size[IR_MAX_RANK] = {0};
    bool padded = false;
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t t = shd_tiles(to, d);
        size[d] = shd_shard_size(full->dims[d], t);
        lo[d] = 0;
        hi[d] = size[d] * t > full->dims[d] ? size[d] : 0;
        padded |= hi[d] != 0;
    }
    int32_t starts[IR_MAX_RANK] = {0};
    if (!offsets(pc, to, full, starts))
        return -1;
    v = spmd_emit_dynamic_slice(pc, v, starts, size);
    if (!padded || v < 0)
        return v;
    v = spmd_emit_pad(pc, v, spmd_emit_scalar_const(pc, full->type, 0), lo, hi);
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t *tab = hi[d] ? shd_offset_table(pc, to, full, d) : NULL;
        if (hi[d] && !tab)
            return fail(pc, IR_ENOMEM, "out of memory");
        for (int64_t p = 0; tab && p < pc->sp->n; p++)
            tab[p] = tab[p] > full->dims[d] - size[d] ? tab[p] - (full->dims[d] - size[d]) : 0;
        if ((starts[d] = tab ? spmd_emit_table_lookup(pc, tab) : spmd_emit_s32(pc, 0)) < 0)
            return -1;
    }
    return spmd_emit_dynamic_slice(pc, v, starts, size);
}

/* All-gather the tiled dims `dims` of v (sharded by `from`); the result is
 * sharded by `from` with those dims replicated, padding included. */
static int32_t gather_dims(PComp *pc, int32_t v, const IrSharding *from, int32_t ndims,
                           const int64_t *dims)
{
    for (int32_t k = 0; k < ndims && v >= 0; k++) {
        int32_t ng, size;
        int64_t *groups;
        if (!shd_groups_along(pc, from, 1, &dims[k], &ng, &size, &groups))
            return fail(pc, IR_ENOMEM, "out of memory");
        v = spmd_emit_all_gather(pc, v, dims[k], ng, size, groups);
    }
    return v;
}

/* Cut the padding of gathered dims (dims whose size now exceeds `full`). */
static int32_t unpad(PComp *pc, int32_t v, const IrShape *full, const IrSharding *keep)
{
    if (v < 0)
        return -1;
    const IrShape *s = spmd_val_shape(pc, v);
    int64_t start[IR_MAX_RANK], limit[IR_MAX_RANK];
    for (int32_t d = 0; d < s->rank; d++) {
        start[d] = 0;
        limit[d] = shd_tiles(keep, d) > 1 ? s->dims[d] : full->dims[d];
    }
    return spmd_emit_slice(pc, v, start, limit);
}

static int32_t to_replicated(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from)
{
    int64_t dims[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t d = 0; d < full->rank; d++)
        if (shd_tiles(from, d) > 1)
            dims[n++] = d;
    v = gather_dims(pc, v, from, n, dims);
    IrSharding repl = {.kind = SHD_REPLICATED};
    return unpad(pc, v, full, &repl);
}

/* Same data tiles, other device order: each device receives the shard of
 * its tile from a device that holds that tile under `from`. Replication
 * subgroups must match in size; the j-th receiver of a tile (in device
 * order) gets it from the j-th holder, so no device sends twice (XLA's
 * verifier, and plan files, reject a collective-permute whose source
 * appears twice). Example: from {devices=[2,2]0,1,2,3 last_tile_dim_
 * replicate} (tile 0 on 0,1; tile 1 on 2,3) to [2,2]0,2,1,3 (tile 0 on
 * 0,2; tile 1 on 1,3): pairs {0,0},{2,1},{1,2},{3,3}. */
static bool same_data_tile(const int64_t *a, const int64_t *b, int32_t k)
{
    for (int32_t d = 0; d < k; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

static int32_t permute(PComp *pc, int32_t v, const IrSharding *from, const IrSharding *to)
{
    int64_t n = pc->sp->n;
    int64_t *pairs = ts_malloc((size_t)(2 * n) * sizeof(int64_t));
    if (!pairs)
        return fail(pc, IR_ENOMEM, "out of memory");
    int32_t np = 0;
    int64_t c[IR_MAX_RANK + 2], oc[IR_MAX_RANK + 2], sc[IR_MAX_RANK + 2];
    int32_t k = ir_sharding_data_rank(to);
    for (int64_t dev = 0; dev < n; dev++) {
        if (!shd_device_coords(to, dev, c))
            continue;
        /* This device is receiver number j of its tile. */
        int64_t j = 0;
        for (int64_t o = 0; o < dev; o++)
            j += shd_device_coords(to, o, oc) && same_data_tile(oc, c, k);
        /* Its source: holder number j of the tile under `from` (the first
         * holder again if there are fewer holders than receivers). */
        int64_t src = -1, first = -1, seen = 0;
        for (int64_t s = 0; s < n && src < 0; s++) {
            if (!shd_device_coords(from, s, sc) || !same_data_tile(sc, c, k))
                continue;
            if (first < 0)
                first = s;
            if (seen++ == j)
                src = s;
        }
        if (src < 0)
            src = first;
        if (src < 0)
            continue;
        pairs[2 * np] = src;
        pairs[2 * np + 1] = dev;
        np++;
    }
    int32_t r = spmd_emit_collective_permute(pc, v, np, pairs);
    ts_free(pairs);
    return r;
}

static bool same_tiles(const IrSharding *a, const IrSharding *b)
{
    int32_t k = ir_sharding_data_rank(a);
    if (k != ir_sharding_data_rank(b) || a->ntile != b->ntile || a->nsubgroup != b->nsubgroup)
        return false;
    for (int32_t d = 0; d < a->ntile; d++)
        if (a->tile[d] != b->tile[d])
            return false;
    return !shd_has_manual_subgroup(a) && !shd_has_manual_subgroup(b);
}

/* Each device's coordinates under `from` and `to` agree on every tile dim
 * but a and b, and its coordinate along a under `from` is its coordinate
 * along b under `to` (both device lists hold 0..ndevices-1 once each, the
 * verifier's rule; one pass over the positions, not a search per device). */
static bool same_places(const IrSharding *from, const IrSharding *to, int32_t a, int32_t b)
{
    int64_t n = from->ndevices;
    int64_t *pos = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!pos)
        return false; /* then all-gathers: correct, not cheapest */
    for (int64_t i = 0; i < n; i++)
        pos[i] = -1;
    bool ok = true;
    for (int64_t j = 0; j < n && ok; j++) {
        int64_t dev = to->devices[j];
        ok = dev >= 0 && dev < n && pos[dev] < 0;
        if (ok)
            pos[dev] = j;
    }
    int64_t cf[IR_MAX_RANK + 2], ct[IR_MAX_RANK + 2];
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t dev = from->devices[i];
        ok = dev >= 0 && dev < n && pos[dev] >= 0;
        for (int64_t ri = i, rj = ok ? pos[dev] : 0, d = from->ntile - 1; ok && d >= 0; d--) {
            cf[d] = ri % from->tile[d];
            ct[d] = rj % to->tile[d];
            ri /= from->tile[d];
            rj /= to->tile[d];
        }
        for (int32_t d = 0; d < from->ntile && ok; d++)
            ok = d == a ? cf[a] == ct[b] : d == b || cf[d] == ct[d];
    }
    ts_free(pos);
    return ok;
}

/* True when `from` tiles data dim *a by t and `to` tiles data dim *b by
 * the same t, every other tile dim and the subgroups alike, and each device
 * keeps its place: its coordinate along a under `from` is its coordinate
 * along b under `to`, and its coordinates along every other dim are the
 * same under both. Then one all-to-all among the devices that differ only
 * along a moves the tiling (all_to_all below). The device lists need not
 * be equal: f32[8,8,16] from {devices=[2,2,1]<=[2,2]T(1,0)} (dim 0 over a
 * mesh's y, dim 1 over its x: devices 0,2,1,3) to {devices=[1,2,2]<=[4]}
 * (dim 1 over x, dim 2 over y) keeps x on dim 1 and moves y from dim 0 to
 * dim 2; device 2 is (0,1,0) under `from` and (0,1,0) under `to` with its
 * y coordinate 0 on dim 0 then dim 2 (a lax.scan over xs sharded on its
 * scanned dim: two all-gathers of 3,072 bytes a device, where XLA's
 * all-to-all moves 512). Not so for f32[8,16,4] from [2,2,1] to [1,2,2]
 * over 0,1,2,3: device 1 is dim 1's tile 1 under `from`, dim 2's tile 1
 * under `to`, so its dim 1 coordinate changes: the exchange along dim 0
 * would leave it the wrong tile of dim 1. */
static bool swapped_dim(const IrSharding *from, const IrSharding *to, int32_t *a, int32_t *b)
{
    if (from->kind != SHD_TILED || to->kind != SHD_TILED || from->ntile != to->ntile ||
        from->nsubgroup != to->nsubgroup || from->ndevices != to->ndevices)
        return false;
    int32_t k = ir_sharding_data_rank(from);
    for (int32_t s = 0; s < from->nsubgroup; s++)
        if (from->subgroup[s] != to->subgroup[s])
            return false;
    *a = *b = -1;
    for (int32_t d = 0; d < from->ntile; d++) {
        if (from->tile[d] == to->tile[d])
            continue;
        if (d >= k)
            return false;
        if (from->tile[d] > 1 && to->tile[d] == 1 && *a < 0)
            *a = d;
        else if (from->tile[d] == 1 && to->tile[d] > 1 && *b < 0)
            *b = d;
        else
            return false;
    }
    if (*a < 0 || *b < 0 || from->tile[*a] != to->tile[*b])
        return false;
    return same_places(from, to, *a, *b);
}

static int32_t emit_transpose(PComp *pc, int32_t v, const int64_t *perm)
{
    if (v < 0)
        return -1;
    IrShape in = *spmd_val_shape(pc, v), out;
    int64_t dims[IR_MAX_RANK + 1];
    for (int32_t d = 0; d < in.rank; d++)
        dims[d] = in.dims[perm[d]];
    if (ir_shape_make(spmd_arena(pc), &out, in.type, in.rank, dims) != IR_OK)
        return fail(pc, IR_ENOMEM, "out of memory");
    int32_t r = spmd_emit(pc, OP_TRANSPOSE, &out, 1, &v);
    if (r < 0)
        return -1;
    IrI64List *l = &pc->dc->instr[r].a.dimensions;
    l->v = ir_alloc_array(spmd_arena(pc), (size_t)in.rank, sizeof(int64_t));
    if (!l->v)
        return fail(pc, IR_ENOMEM, "out of memory");
    memcpy(l->v, perm, (size_t)in.rank * sizeof(int64_t));
    l->n = in.rank;
    pc->dc->instr[r].a.has_dimensions = true;
    return r;
}

/* t tiles along dim a -> t tiles along dim b (swapped_dim), when the full
 * dims a and b are multiples of t. The local shard x has A/t rows along a
 * and all B along b. Rule:
 *   1. reshape dim b into [t, B/t] (the t-dim sits at position b);
 *   2. all-to-all along the t-dim over the devices that differ only in
 *      their a coordinate (in that order): member j receives chunk j (its
 *      own b block) of everyone, and keeps them in member order, so the
 *      t-dim now counts a blocks;
 *   3. transpose the t-dim to just before dim a and merge [t, A/t] into A.
 * Example: f32[4,6] {devices=[2,1]0,1} -> {devices=[1,2]0,1}: device 0
 * holds rows 0-1, reshaped to [2,2,3]; after the all-to-all device 0 holds
 * [[rows 0-1, cols 0-2], [rows 2-3, cols 0-2]], i.e. [2 (a block),2,3],
 * transposed to [2,2,3] (a block, row, col) and reshaped to f32[4,3]. */
static int32_t all_to_all(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from,
                          int32_t a, int32_t b)
{
    int64_t t = from->tile[a];
    int32_t rank = full->rank;
    if (rank + 1 > IR_MAX_RANK)
        return -2;
    IrShape loc = *spmd_val_shape(pc, v);
    int64_t split[IR_MAX_RANK + 1], perm[IR_MAX_RANK + 1], done[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t d = 0; d < rank; d++) {
        if (d == b) {
            split[n++] = t;
            split[n++] = loc.dims[d] / t;
        } else {
            split[n++] = loc.dims[d];
        }
        done[d] = d == a ? full->dims[d] : d == b ? loc.dims[d] / t : loc.dims[d];
    }
    /* Position of original dim d in the split shape; the t-dim is at b. */
    n = 0;
    for (int32_t d = 0; d < rank; d++) {
        int32_t pos = d < b ? d : d + 1;
        if (d == a)
            perm[n++] = b;
        perm[n++] = pos;
    }
    IrShape s1, s2;
    if (ir_shape_make(spmd_arena(pc), &s1, loc.type, rank + 1, split) != IR_OK ||
        ir_shape_make(spmd_arena(pc), &s2, loc.type, rank, done) != IR_OK)
        return fail(pc, IR_ENOMEM, "out of memory");
    int32_t ng, size;
    int64_t *groups;
    int64_t ad = a;
    if (!shd_groups_along(pc, from, 1, &ad, &ng, &size, &groups))
        return fail(pc, IR_ENOMEM, "out of memory");
    int32_t r = spmd_emit_reshape(pc, v, &s1);
    r = spmd_emit_all_to_all(pc, r, b, b, ng, size, groups);
    r = emit_transpose(pc, r, perm);
    return spmd_emit_reshape(pc, r, &s2);
}

/* The manual subgroup coordinate of `device`: devices with equal keys are
 * in the same manual group. -1 when the sharding has no manual subgroup. */
static int64_t manual_key(const IrSharding *s, int64_t device)
{
    int64_t c[IR_MAX_RANK + 2], key = 0;
    if (!shd_has_manual_subgroup(s) || !shd_device_coords(s, device, c))
        return -1;
    int32_t k = ir_sharding_data_rank(s);
    for (int32_t g = 0; g < s->nsubgroup; g++)
        if (s->subgroup[g] == SUBGROUP_MANUAL)
            key = key * s->tile[k + g] + c[k + g];
    return key;
}

/* Partially manual shardings (last_tile_dims={manual}) reshard only among
 * shardings that put the devices in the same manual groups: each manual
 * group then reshards within itself, as the groups along data dims never
 * cross a manual coordinate (shd_groups_along). */
static bool same_manual_groups(PComp *pc, const IrSharding *a, const IrSharding *b)
{
    for (int64_t x = 0; x < pc->sp->n; x++)
        for (int64_t y = x + 1; y < pc->sp->n; y++)
            if ((manual_key(a, x) == manual_key(a, y)) != (manual_key(b, x) == manual_key(b, y)))
                return false;
    return true;
}

/* `to` refines `from` when every data dim's tiles are a multiple of the
 * old ones (tt = k * tf), the old shard is exactly k new shards
 * (ceil(D/tt) * k == ceil(D/tf)), and each device's new tile lies inside
 * the tile it holds (its coordinate under `to` divided by k is its
 * coordinate under `from`). Then each device cuts its new shard out of its
 * own: no communication.
 * Example: f32[16,68] {devices=[2,1,4]0..7 last_tile_dim_replicate} (dim 0
 * in halves, each half on 4 devices) to {devices=[2,4]0..7}: device 5 holds
 * rows 8..15 and keeps its columns 17..33 (k = 4 along dim 1, offset
 * (5 % 4) * 17). The partial sums of a contraction become tiles this way
 * after their all-reduce, instead of an all-gather and a slice. */
static bool refines_among(int64_t ndevices, const IrShape *full, const IrSharding *from, const IrSharding *to)
{
    if (from->kind != SHD_TILED || to->kind != SHD_TILED || ir_sharding_data_rank(from) != full->rank ||
        ir_sharding_data_rank(to) != full->rank)
        return false;
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t tf = shd_tiles(from, d), tt = shd_tiles(to, d);
        /* An untiled dim is padded to the new tiles first (refine). */
        if (tt % tf != 0 ||
            (tf > 1 && shd_shard_size(full->dims[d], tt) * (tt / tf) != shd_shard_size(full->dims[d], tf)))
            return false;
    }
    int64_t cf[IR_MAX_RANK + 2], ct[IR_MAX_RANK + 2];
    for (int64_t p = 0; p < ndevices; p++) {
        if (!shd_device_coords(from, p, cf) || !shd_device_coords(to, p, ct))
            return false;
        for (int32_t d = 0; d < full->rank; d++)
            if (ct[d] / (shd_tiles(to, d) / shd_tiles(from, d)) != cf[d])
                return false;
    }
    return true;
}

static bool refines(PComp *pc, const IrShape *full, const IrSharding *from, const IrSharding *to)
{
    return refines_among(pc->sp->n, full, from, to);
}

static int32_t refine(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from,
                      const IrSharding *to)
{
    int32_t starts[IR_MAX_RANK];
    int64_t size[IR_MAX_RANK], ct[IR_MAX_RANK + 2], lo[IR_MAX_RANK], hi[IR_MAX_RANK];
    bool padded = false;
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t tt = shd_tiles(to, d);
        lo[d] = 0;
        hi[d] = shd_tiles(from, d) == 1 ? shd_shard_size(full->dims[d], tt) * tt - full->dims[d] : 0;
        padded |= hi[d] != 0;
    }
    if (padded)
        v = spmd_emit_pad(pc, v, spmd_emit_scalar_const(pc, full->type, 0), lo, hi);
    int64_t *tab = ir_alloc_array(spmd_arena(pc), (size_t)pc->sp->n, sizeof(int64_t));
    if (!tab)
        return fail(pc, IR_ENOMEM, "out of memory");
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t k = shd_tiles(to, d) / shd_tiles(from, d);
        size[d] = shd_shard_size(full->dims[d], shd_tiles(to, d));
        for (int64_t p = 0; p < pc->sp->n; p++)
            tab[p] = shd_device_coords(to, p, ct) ? (ct[d] % k) * size[d] : 0;
        if ((starts[d] = k > 1 ? spmd_emit_table_lookup(pc, tab) : spmd_emit_s32(pc, 0)) < 0)
            return -1;
    }
    return spmd_emit_dynamic_slice(pc, v, starts, size);
}

/* No data dim tiled: replicated, maximal, or replicated within manual
 * groups. */
static bool data_replicated(const IrSharding *s)
{
    return is_repl(s) || (s->kind == SHD_TILED && shd_total_tiles(s) == 1);
}

static int32_t reshard_array(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from,
                             const IrSharding *to)
{
    if (same(from, to))
        return v;
    if (from->kind == SHD_MANUAL || to->kind == SHD_MANUAL)
        return fail(pc, IR_EUNSUPPORTED, "cannot reshard between manual and non-manual shardings");
    /* A value every device holds whole can be cut to anything, manual
     * groups included. */
    if (is_repl(from))
        return slice_to(pc, v, full, to);
    bool manual = shd_has_manual_subgroup(from) || shd_has_manual_subgroup(to);
    if (manual && (!shd_has_manual_subgroup(from) || !shd_has_manual_subgroup(to) ||
                   !same_manual_groups(pc, from, to)))
        return fail(pc, IR_EUNSUPPORTED, "cannot reshard between different manual groups");
    if (data_replicated(from))
        return slice_to(pc, v, full, to);
    if (!manual && same_tiles(from, to))
        return permute(pc, v, from, to);
    if (!manual && refines(pc, full, from, to))
        return refine(pc, v, full, from, to);
    int32_t da, db;
    if (!manual && swapped_dim(from, to, &da, &db) && full->dims[da] % from->tile[da] == 0 &&
        full->dims[db] % from->tile[da] == 0) {
        int32_t r = all_to_all(pc, v, full, from, da, db);
        if (r != -2)
            return r;
    }
    /* Coarsening: all-gather exactly the dims `to` stops tiling, when the
     * result then equals `to`. */
    {
        int64_t dims[IR_MAX_RANK];
        int32_t n = 0;
        bool ok = true;
        for (int32_t d = 0; d < full->rank; d++) {
            int64_t tf = shd_tiles(from, d), tt = shd_tiles(to, d);
            if (tf > 1 && tt == 1)
                dims[n++] = d;
            else if (tf != tt)
                ok = false;
        }
        if (ok && n > 0) {
            IrSharding *g = shd_replicate_dims(spmd_tmp(pc), from, n, dims);
            if (!g)
                return fail(pc, IR_ENOMEM, "out of memory");
            if (same(g, to)) {
                int32_t r = gather_dims(pc, v, from, n, dims);
                return unpad(pc, r, full, to);
            }
        }
    }
    if (data_replicated(to))
        return to_replicated(pc, v, full, from);
    int32_t full_v = to_replicated(pc, v, full, from);
    return slice_to(pc, full_v, full, to);
}

int32_t spmd_reshard(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from,
                const IrSharding *to)
{
    if (v < 0)
        return -1;
    if (full->type != IR_TUPLE) {
        if (full->type == IR_TOKEN || same(from, to))
            return full->type == IR_TOKEN ? v : reshard_array(pc, v, full, from, to);
        SpmdWhy why = spmd_why_result(pc, from, to);
        int32_t r = reshard_array(pc, v, full, from, to);
        spmd_why_restore(pc, why);
        return r;
    }
    /* Tuples leaf by leaf, element by element. */
    bool all_same = true;
    for (int32_t l = 0, nl = ir_shape_leaf_count(full); l < nl && all_same; l++)
        all_same &= same(shd_leaf(from, full, l), shd_leaf(to, full, l));
    if (all_same)
        return v;
    int32_t n = full->ntuple;
    int32_t *el = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!el)
        return fail(pc, IR_ENOMEM, "out of memory");
    IrArena *a = spmd_tmp(pc);
    for (int32_t k = 0, first = 0; k < n; first += ir_shape_leaf_count(&full->tuple[k]), k++) {
        IrSharding *f = shd_tuple_element_at(a, from, full, k, first);
        IrSharding *t = shd_tuple_element_at(a, to, full, k, first);
        int32_t g = spmd_emit_gte(pc, v, k);
        el[k] = (f && t) ? spmd_reshard(pc, g, &full->tuple[k], f, t) : -1;
        if (el[k] < 0) {
            ts_free(el);
            return -1;
        }
    }
    int32_t r = spmd_emit_tuple(pc, n, el);
    ts_free(el);
    return r;
}

int64_t spmd_reshard_cost(const IrShape *full, const IrSharding *from, const IrSharding *to)
{
    if (same(from, to) || is_repl(from))
        return 0;
    int64_t bytes = ir_shape_bytes(full);
    if (bytes < 0)
        return INT64_MAX / 4;
    if (same_tiles(from, to))
        return bytes / shd_total_tiles(to);
    /* A cut of each device's own shard (reshard_array's slice_to and
     * refine) moves nothing: priced as an all-gather, the dot handler
     * all-gathered a batch-tiled operand to meet the other, replicated
     * along that dim, where cutting the other is free (Mamba's scan
     * output [B,T,E,N] . C [B,T,N] on 2x4, T tiled on one side: 64
     * bytes, auto/ had priced the cut). */
    if (!shd_has_manual_subgroup(from) && !shd_has_manual_subgroup(to) &&
        (data_replicated(from) || (from->ndevices == to->ndevices && refines_among(from->ndevices, full, from, to))))
        return 0;
    int32_t da, db;
    if (swapped_dim(from, to, &da, &db) && full->type != IR_TUPLE && da < full->rank && db < full->rank &&
        full->dims[da] % from->tile[da] == 0 && full->dims[db] % from->tile[da] == 0)
        /* all-to-all: a device keeps 1/t of its shard and receives the rest */
        return bytes / shd_total_tiles(from) - bytes / shd_total_tiles(from) / from->tile[da];
    /* All-gather to what `to` keeps tiled: a device receives the full value
     * divided by the target's tiles. */
    return bytes / (shd_total_tiles(to) > 0 ? shd_total_tiles(to) : 1) +
           (is_repl(to) ? 0 : bytes / 2);
}

/* Record for the plan that operand o of the instruction being partitioned
 * changes sharding (nothing is recorded when the report cannot grow: the
 * plan then shows the edge unmarked, the program is unchanged). */
static void note_reshard(PComp *pc, int32_t o, const IrSharding *to)
{
    SpmdReport *rep = pc->sp->report;
    if (!rep || ir_sharding_equal(pc->shd[o], to) ||
        !IR_ARENA_GROW(rep->arena, rep->reshard, rep->capreshard, rep->nreshard, rep->nreshard + 1))
        return;
    char *from = ir_sharding_str(pc->shd[o]), *tt = ir_sharding_str(to);
    SpmdReshard *r = &rep->reshard[rep->nreshard];
    r->site = spmd_site_copy(rep->arena, &pc->sp->site);
    r->from = from ? ir_strdup(rep->arena, from) : NULL;
    r->to = tt ? ir_strdup(rep->arena, tt) : NULL;
    ts_free(from);
    ts_free(tt);
    if (r->from && r->to)
        rep->nreshard++;
}

int32_t spmd_operand_as(PComp *pc, int32_t i, int32_t k, const IrSharding *to)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t o = ins->opnd[k];
    if (pc->val[o] < 0)
        return -1;
    /* Collectives emitted here serve the edge o -> i. */
    SpmdSite keep = pc->sp->site;
    pc->sp->site.operand = pc->sc->instr[o].name;
    note_reshard(pc, o, to);
    int32_t r = spmd_reshard_cached(pc, o, to);
    if (r >= 0) {
        pc->sp->site = keep;
        return r;
    }
    SpmdWhy why = ir_sharding_equal(pc->shd[o], to) ? pc->sp->why : spmd_why_operand(pc, i, o, to);
    r = spmd_reshard(pc, pc->val[o], &pc->sc->instr[o].shape, pc->shd[o], to);
    spmd_why_restore(pc, why);
    pc->sp->site = keep;
    if (r != pc->val[o])
        spmd_reshard_remember(pc, o, to, r);
    return r;
}

int32_t spmd_mask_padding(PComp *pc, int32_t v, const IrShape *full, const IrSharding *s, int32_t fill)
{
    if (v < 0 || fill < 0)
        return -1;
    /* A copy: emitting moves the instruction array spmd_val_shape points into. */
    IrShape lsc;
    if (ir_shape_copy(spmd_arena(pc), &lsc, spmd_val_shape(pc, v)) != IR_OK)
        return fail(pc, IR_ENOMEM, "out of memory");
    const IrShape *ls = &lsc;
    int32_t mask = -1;
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t t = shd_tiles(s, d);
        if (t <= 1 || full->dims[d] % t == 0)
            continue;
        /* valid where offset + iota < D */
        IrShape is;
        if (ir_shape_make(spmd_arena(pc), &is, IR_S32, ls->rank, ls->dims) != IR_OK)
            return fail(pc, IR_ENOMEM, "out of memory");
        int32_t io = spmd_emit_iota(pc, &is, d);
        int32_t off = spmd_emit_offset(pc, s, full, d);
        int32_t offb = spmd_emit_broadcast(pc, off, &is, 0, NULL);
        int32_t idx = spmd_emit_binary(pc, OP_ADD, io, offb);
        int32_t lim = spmd_emit_broadcast(pc, spmd_emit_s32(pc, full->dims[d]), &is, 0, NULL);
        int32_t ok = spmd_emit_compare(pc, idx, lim, CMP_LT);
        mask = mask < 0 ? ok : spmd_emit_binary(pc, OP_AND, mask, ok);
        if (mask < 0)
            return -1;
    }
    if (mask < 0)
        return v;
    int32_t fb = spmd_emit_broadcast(pc, fill, ls, 0, NULL);
    return spmd_emit_select(pc, mask, v, fb);
}
