/*
 * cost.c: the cost model of the auto-sharder, in seconds of one step.
 *
 *   compute      FLOPs / flops rate + bytes written / bytes rate (per
 *                device: the work its shard holds)
 *   collective   alpha + factor x bytes x beta, per kind and scope (in a
 *                host, across hosts), where for a group of n devices
 *                all-reduce moves 2(n-1)/n of its buffer, all-gather
 *                (n-1)/n of its result, reduce-scatter (n-1)/n of its
 *                operand and all-to-all (n-1)/n of its buffer
 *   reshard      from one spec to another, as partition/reshard.c runs
 *                it (auto_reshard_seconds): a cut of the shard free, a
 *                permute, one all-to-all, one all-gather per dim gathered
 *                (over every axis on it at once), or the whole value
 *                gathered and sliced. Priced axis by axis before (an
 *                axis moved an all-to-all, one dropped an all-gather), a
 *                layer tiled over both axes of a 2x2 mesh cost two
 *                gathers where one ran, and [x*y,-] -> [x,y] on 2x4 an
 *                all-to-all where the stack was gathered whole
 *
 * The rates come from a profile (`tessel profile`, api/profile.c) or the
 * defaults below, which are this project's own measurements rounded on a
 * 2-core x86 container (docs/auto-shard.md): the ILP compares plans, so
 * the ratios matter more than the absolute values.
 */
#include "auto.h"

#include <math.h>

#define DEFAULT_FLOPS 20e9
#define DEFAULT_BYTES 5e9
#define DEFAULT_ALPHA_LOCAL 20e-6
#define DEFAULT_ALPHA_REMOTE 50e-6
#define DEFAULT_BETA_LOCAL (1.0 / 4e9)

AutoCost auto_cost_default(double link_gbps)
{
    AutoCost c = {0};
    auto_cost_fill(&c, link_gbps);
    return c;
}

void auto_cost_fill(AutoCost *c, double link_gbps)
{
    double gbps = link_gbps > 0 ? link_gbps : SPMD_LINK_GBPS;
    if (!(c->flops > 0))
        c->flops = DEFAULT_FLOPS;
    if (!(c->bytes > 0))
        c->bytes = DEFAULT_BYTES;
    for (int k = 0; k < AUTO_NCOLL; k++) {
        if (!(c->alpha[k][0] > 0))
            c->alpha[k][0] = DEFAULT_ALPHA_LOCAL;
        if (!(c->alpha[k][1] > 0))
            c->alpha[k][1] = DEFAULT_ALPHA_REMOTE;
        if (!(c->beta[k][0] > 0))
            c->beta[k][0] = DEFAULT_BETA_LOCAL;
        if (!(c->beta[k][1] > 0))
            c->beta[k][1] = 8.0 / (gbps * 1e9);
    }
}

double auto_coll_seconds(const AutoCost *c, AutoColl k, int64_t n, int scope, double bytes)
{
    if (n < 2)
        return 0;
    double f = (double)(n - 1) / (double)n;
    if (k == AUTO_ALL_REDUCE)
        f *= 2;
    scope = scope ? 1 : 0;
    return c->alpha[k][scope] + f * bytes * c->beta[k][scope];
}

int auto_axes_scope(const AutoMesh *m, unsigned axes, int64_t local)
{
    if (local <= 0 || local >= m->ndevices)
        return 0;
    /* The group of device 0: its largest member decides (hosts own
     * consecutive devices). */
    int64_t stride = 1, last = 0;
    for (int32_t a = m->naxes - 1; a >= 0; a--) {
        if (axes & (1u << a))
            last += (m->size[a] - 1) * stride;
        stride *= m->size[a];
    }
    return last >= local;
}

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

/* All-gathers of the dims of *cur marked in `gather`, in dim order, one a
 * dim over the group of the axes on it (partition/reshard.c's
 * gather_dims): each moves (n-1)/n of its result, the shard with that dim
 * whole. *cur becomes the spec gathered. */
static double gather_dims(const AutoCost *c, const AutoMesh *m, int64_t local, const IrShape *shape,
                          AutoSpec *cur, const bool *gather)
{
    double t = 0;
    int64_t ext[IR_MAX_RANK];
    for (int32_t d = 0; d < shape->rank; d++)
        ext[d] = shape->dims[d];
    for (int32_t d = 0; d < shape->rank; d++) {
        unsigned axes = gather[d] ? axes_on(m, cur, d) : 0;
        if (!axes)
            continue;
        int64_t n = auto_spec_tiles(m, cur, d);
        ext[d] = (ext[d] + n - 1) / n * n;
        for (int32_t a = 0; a < m->naxes; a++)
            if (axes & (1u << a))
                cur->dim[a] = -1;
        t += auto_coll_seconds(c, AUTO_ALL_GATHER, n, auto_axes_scope(m, axes, local),
                               shard_bytes(m, shape, cur, ext));
    }
    return t;
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
 * before and dim a after, everything else alike, no dim between a and b
 * tiled (the two shardings list the devices in one order) and both dims
 * divisible by the tiles: reshard.c's swapped_dim, one all-to-all over
 * those axes. The moving axes into *axes, their tiles into *t. */
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
    for (int32_t d = (da < db ? da : db) + 1; d < (da < db ? db : da); d++)
        if (auto_spec_tiles(m, from, d) > 1)
            return false;
    *t = auto_spec_tiles(m, from, da);
    return shape->dims[da] % *t == 0 && shape->dims[db] % *t == 0;
}

double auto_reshard_seconds(const AutoCost *c, const AutoMesh *m, int64_t local, const IrShape *shape,
                            const AutoSpec *from_spec, const AutoSpec *to_spec)
{
    /* The cases of partition/reshard.c's reshard_array, in its order. */
    AutoSpec from = effective(m, from_spec), to = effective(m, to_spec);
    if (auto_spec_equal(&from, &to) || auto_spec_replication(m, &from) == m->ndevices)
        return 0; /* the same, or cut out of a whole value */
    bool same_tiles = auto_spec_replication(m, &from) == auto_spec_replication(m, &to);
    for (int32_t d = 0; d < shape->rank && same_tiles; d++)
        same_tiles = auto_spec_tiles(m, &from, d) == auto_spec_tiles(m, &to, d);
    if (same_tiles) {
        /* The same tiles on other devices: a collective-permute, each
         * device sending its shard once (priced at the all-to-all's
         * rates, alpha + bytes x beta, as a halo is). */
        unsigned moved = 0;
        for (int32_t a = 0; a < m->naxes; a++)
            if (from.dim[a] != to.dim[a])
                moved |= 1u << a;
        return auto_coll_seconds(c, AUTO_ALL_TO_ALL, 2, auto_axes_scope(m, moved, local),
                                 2 * shard_bytes(m, shape, &from, NULL));
    }
    if (refines(m, shape, &from, &to))
        return 0;
    unsigned axes;
    int64_t t;
    if (swapped(m, shape, &from, &to, &axes, &t))
        return auto_coll_seconds(c, AUTO_ALL_TO_ALL, t, auto_axes_scope(m, axes, local),
                                 shard_bytes(m, shape, &from, NULL));
    /* Coarsening: `to` is `from` with some dims' axes all dropped; those
     * dims are gathered. Anything else gathers every tiled dim (to the
     * whole value) and slices `to` out of it. */
    bool gather[IR_MAX_RANK], coarsens = true;
    for (int32_t d = 0; d < shape->rank; d++)
        gather[d] = auto_spec_tiles(m, &from, d) > 1 && auto_spec_tiles(m, &to, d) == 1;
    for (int32_t a = 0; a < m->naxes && coarsens; a++)
        coarsens = from.dim[a] < 0 ? to.dim[a] < 0 : to.dim[a] == (gather[from.dim[a]] ? -1 : from.dim[a]);
    /* ... and the devices of each replication group in `to`'s order: the
     * gathered axes (dim by dim) become major to the replicated ones
     * (shd_replicate_dims), where `to` orders them by axis; else the
     * partitioner gathers everything (a mesh of 3 axes or more). */
    if (coarsens && auto_spec_replication(m, &to) < m->ndevices) {
        int32_t last = -1;
        for (int32_t d = 0; d <= shape->rank && coarsens; d++)
            for (int32_t a = 0; a < m->naxes && coarsens; a++)
                if (d < shape->rank ? gather[d] && from.dim[a] == d : from.dim[a] < 0 && m->size[a] > 1) {
                    coarsens = a > last;
                    last = a;
                }
    }
    if (!coarsens)
        for (int32_t d = 0; d < shape->rank; d++)
            gather[d] = auto_spec_tiles(m, &from, d) > 1;
    return gather_dims(c, m, local, shape, &from, gather);
}
