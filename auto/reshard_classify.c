/*
 * reshard_classify.c: what partition/reshard.c emits to turn an array held under
 * one spec into another (auto_reshard_classify), in its order:
 *
 *   none         the same, cut out of a whole value, or a cut of each
 *                device's shard (axes added minor to those on a dim)
 *   permute      the same tiles on other devices: a collective-permute
 *   all-to-all   one dim's axes moved whole to an untiled dim, both
 *                divisible: one all-to-all
 *   gather       some dims stop being tiled, the rest as it was: one
 *                all-gather per such dim over every axis on it at once
 *   whole        anything else: every tiled dim gathered (the whole
 *                value), the target sliced out of it
 *
 * with the collectives (what cost.c prices: auto_reshard_seconds) and the
 * bytes held beside the operand's shard while it runs (what graph.c
 * charges to the memory row: reshard_bytes). One classifier for both: the
 * price followed partition/reshard.c's cases while the memory row had a case
 * analysis of its own, which charged a permute as the whole value
 * gathered and a gather in an order the partitioner does not run as
 * a gather.
 */
#include "auto.h"

/* Bytes of one shard of `shape` under s, its largest (padded) tile; dims
 * of `ext` elements (NULL: the shape's): a dim gathered keeps the padding
 * of its tiles until the reshard slices it off. */
static double shard_bytes(const AutoMesh *m, const IrShape *shape, const AutoSpec *s, const int64_t *ext)
{
    int64_t n = ir_shape_elements(shape);
    if (n <= 0)
        return 0;
    double b = (double)ir_shape_bytes(shape) / (double)n;
    for (int32_t d = 0; d < shape->rank; d++) {
        int64_t t = auto_spec_tiles(m, s, d), e = ext ? ext[d] : shape->dims[d];
        b *= (double)((e + t - 1) / t);
    }
    return b;
}

/* The bytes of `shape` held whole with each dim padded to a multiple of
 * its tiles under s (the shards of s gathered). */
static double padded_bytes(const AutoMesh *m, const IrShape *shape, const AutoSpec *s)
{
    int64_t ext[IR_MAX_RANK];
    AutoSpec whole = auto_spec_replicated();
    for (int32_t d = 0; d < shape->rank; d++) {
        int64_t t = auto_spec_tiles(m, s, d);
        ext[d] = (shape->dims[d] + t - 1) / t * t;
    }
    return shard_bytes(m, shape, &whole, ext);
}

/* The spec with the axes of size 1 dropped: they tile nothing, and the
 * sharding of a spec never shows them. */
static AutoSpec effective(const AutoMesh *m, const AutoSpec *s)
{
    AutoSpec e = *s;
    for (int32_t a = 0; a < m->naxes; a++)
        if (m->size[a] < 2)
            e.dim[a] = -1;
    return e;
}

/* The axes (bit mask) on dim d under s. */
static unsigned axes_on(const AutoMesh *m, const AutoSpec *s, int32_t d)
{
    unsigned axes = 0;
    for (int32_t a = 0; a < m->naxes; a++)
        if (s->dim[a] == d)
            axes |= 1u << a;
    return axes;
}

/* `to` cuts each device's shard of `from` into its own (reshard.c's
 * refines: no communication): every axis of `from` stays on its dim, and
 * an axis added to a dim is minor to the axes already there (the device's
 * new tile inside its old one); a dim tiled further cuts its old shard in
 * whole pieces. */
static bool refines(const AutoMesh *m, const IrShape *shape, const AutoSpec *from, const AutoSpec *to)
{
    for (int32_t a = 0; a < m->naxes; a++) {
        if (from->dim[a] >= 0 && to->dim[a] != from->dim[a])
            return false;
        if (from->dim[a] < 0 && to->dim[a] >= 0)
            for (int32_t b = a + 1; b < m->naxes; b++)
                if (from->dim[b] == to->dim[a])
                    return false;
    }
    for (int32_t d = 0; d < shape->rank; d++) {
        int64_t tf = auto_spec_tiles(m, from, d), tt = auto_spec_tiles(m, to, d), n = shape->dims[d];
        if (tf > 1 && tt > tf && (n + tt - 1) / tt * (tt / tf) != (n + tf - 1) / tf)
            return false;
    }
    return true;
}

/* The axes on dim a under `from` are on dim b under `to`, dim b untiled
 * before and dim a after, everything else alike, and both dims divisible
 * by the tiles: reshard.c's swapped_dim, one all-to-all over those axes.
 * (A dim between a and b may be tiled: its axes, on it under both specs,
 * give each device the same coordinate along it under both, which is
 * what swapped_dim checks.) The moving axes into *axes, their tiles into
 * *t. */
static bool swapped(const AutoMesh *m, const IrShape *shape, const AutoSpec *from, const AutoSpec *to,
                    unsigned *axes, int64_t *t)
{
    int32_t da = -1, db = -1;
    *axes = 0;
    for (int32_t a = 0; a < m->naxes; a++) {
        if (from->dim[a] == to->dim[a])
            continue;
        if (from->dim[a] < 0 || to->dim[a] < 0 || (da >= 0 && (from->dim[a] != da || to->dim[a] != db)))
            return false;
        da = from->dim[a];
        db = to->dim[a];
        *axes |= 1u << a;
    }
    if (da < 0 || axes_on(m, from, da) != *axes || axes_on(m, to, db) != *axes || axes_on(m, from, db) ||
        axes_on(m, to, da))
        return false;
    *t = auto_spec_tiles(m, from, da);
    return shape->dims[da] % *t == 0 && shape->dims[db] % *t == 0;
}

/* The dims of `from` that `to` coarsens: gather[d] where `to` drops
 * every axis of dim d and keeps the others as they are, no axis added,
 * and the devices of each replication group in `to`'s order (the
 * gathered axes, dim by dim, become major to the replicated ones:
 * shd_replicate_dims, where `to` orders them by axis). False: not a
 * coarsening (the partitioner gathers the whole value). */
static bool coarsens(const AutoMesh *m, const IrShape *shape, const AutoSpec *from, const AutoSpec *to,
                     bool *gather)
{
    bool ok = true;
    for (int32_t d = 0; d < shape->rank; d++)
        gather[d] = auto_spec_tiles(m, from, d) > 1 && auto_spec_tiles(m, to, d) == 1;
    for (int32_t a = 0; a < m->naxes && ok; a++)
        ok = from->dim[a] < 0 ? to->dim[a] < 0 : to->dim[a] == (gather[from->dim[a]] ? -1 : from->dim[a]);
    if (ok && auto_spec_replication(m, to) < m->ndevices) {
        int32_t last = -1;
        for (int32_t d = 0; d <= shape->rank && ok; d++)
            for (int32_t a = 0; a < m->naxes && ok; a++)
                if (d < shape->rank ? gather[d] && from->dim[a] == d : from->dim[a] < 0 && m->size[a] > 1) {
                    ok = a > last;
                    last = a;
                }
    }
    return ok;
}

/* All-gathers of the dims of `from` marked in `gather`, in dim order,
 * one a dim over the group of the axes on it (partition/reshard.c's
 * gather_dims), into r->coll: each moves (n-1)/n of its result, the
 * shard with that dim whole (its tiles' padding kept). Returns the bytes
 * of the last result. */
static double gather_dims(const AutoMesh *m, const IrShape *shape, const AutoSpec *from, const bool *gather,
                          AutoReshard *r)
{
    AutoSpec cur = *from;
    int64_t ext[IR_MAX_RANK];
    double last = shard_bytes(m, shape, from, NULL);
    for (int32_t d = 0; d < shape->rank; d++)
        ext[d] = shape->dims[d];
    for (int32_t d = 0; d < shape->rank; d++) {
        unsigned axes = gather[d] ? axes_on(m, &cur, d) : 0;
        if (!axes)
            continue;
        int64_t n = auto_spec_tiles(m, &cur, d);
        ext[d] = (ext[d] + n - 1) / n * n;
        for (int32_t a = 0; a < m->naxes; a++)
            if (axes & (1u << a))
                cur.dim[a] = -1;
        last = shard_bytes(m, shape, &cur, ext);
        r->coll[r->ncoll++] = (AutoReshardColl){AUTO_ALL_GATHER, n, axes, last};
    }
    return last;
}

void auto_reshard_classify(const AutoMesh *m, const IrShape *shape, const AutoSpec *from_spec,
                           const AutoSpec *to_spec, AutoReshard *r)
{
    AutoSpec from = effective(m, from_spec), to = effective(m, to_spec);
    r->ncoll = 0;
    r->held = 0;
    r->kind = AUTO_RESHARD_NONE;
    if (auto_spec_equal(&from, &to) || auto_spec_replication(m, &from) == m->ndevices)
        return; /* the same, or cut out of a whole value */
    double shard = shard_bytes(m, shape, &to, NULL);
    bool same_tiles = auto_spec_replication(m, &from) == auto_spec_replication(m, &to);
    for (int32_t d = 0; d < shape->rank && same_tiles; d++)
        same_tiles = auto_spec_tiles(m, &from, d) == auto_spec_tiles(m, &to, d);
    if (same_tiles) {
        /* Each device sends its shard once and holds the one it receives
         * (priced at the all-to-all's rates, alpha + bytes x beta, as a
         * halo is). */
        unsigned moved = 0;
        for (int32_t a = 0; a < m->naxes; a++)
            if (from.dim[a] != to.dim[a])
                moved |= 1u << a;
        r->kind = AUTO_RESHARD_PERMUTE;
        r->coll[r->ncoll++] = (AutoReshardColl){AUTO_ALL_TO_ALL, 2, moved, 2 * shard_bytes(m, shape, &from, NULL)};
        r->held = shard;
        return;
    }
    if (refines(m, shape, &from, &to))
        return; /* a cut of the shard */
    unsigned axes;
    int64_t t;
    if (swapped(m, shape, &from, &to, &axes, &t)) {
        r->kind = AUTO_RESHARD_ALL_TO_ALL;
        r->coll[r->ncoll++] = (AutoReshardColl){AUTO_ALL_TO_ALL, t, axes, shard_bytes(m, shape, &from, NULL)};
        r->held = shard;
        return;
    }
    bool gather[IR_MAX_RANK];
    if (coarsens(m, shape, &from, &to, gather)) {
        /* The gathered shard, and where its tiles were padded the slice
         * that drops the padding. */
        double gathered = gather_dims(m, shape, &from, gather, r);
        r->kind = AUTO_RESHARD_GATHER;
        r->held = gathered + (gathered > shard ? shard : 0);
        return;
    }
    for (int32_t d = 0; d < shape->rank; d++)
        gather[d] = auto_spec_tiles(m, &from, d) > 1;
    gather_dims(m, shape, &from, gather, r);
    r->kind = AUTO_RESHARD_WHOLE;
    /* The whole value gathered (padded), sliced, padded to the new tiles
     * and cut: the most two of these hold at once. */
    double full = (double)ir_shape_bytes(shape), gathered = padded_bytes(m, shape, &from),
           cut = padded_bytes(m, shape, &to);
    double held = gathered > full ? gathered + full : full; /* the gather and its slice */
    if (cut > full && full + cut > held)                    /* the slice and its padded copy */
        held = full + cut;
    double last = (cut > full ? cut : full) + shard;        /* the whole value and the cut */
    r->held = last > held ? last : held;
}
