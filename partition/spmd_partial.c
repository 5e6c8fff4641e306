/*
 * spmd_partial.c: finishing partial results, with reduce-scatters where
 * the result ends sharded.
 *
 * A handler that cuts a reduction across devices (a dot's or a
 * convolution's contracting dims, a reduce's reduced dims, a gather's or a
 * scatter's indexed dims, a ragged dot's groups) leaves each device a
 * partial value of its tile under `partial`: the members of each reduction
 * group hold partial values of the same tile, to be combined with the
 * reducer. Where the value ends replicated over the group, one all-reduce
 * does it. Where it ends sharded more finely (the target `to` cuts each
 * group's tile among its members), an all-reduce and a slice would move
 * twice the bytes of a reduce-scatter (a ring all-reduce is a
 * reduce-scatter and an all-gather, and the slice throws the all-gather's
 * work away). XLA's partitioner emits the all-reduce and the dynamic-slice
 * and its ReduceScatterCreator pass fuses them; tessel emits the
 * reduce-scatter straight away.
 *
 * Rule. Device p holds tile cp under `partial` and tile ct under `to`.
 * `to` cuts partial's dim d into k_d = tiles(to, d) / tiles(partial, d)
 * pieces; p's piece is f_d(p) = ct_d mod k_d, and ct_d div k_d must be cp_d
 * (p's new tile lies in the tile it holds). The pieces must fit the old
 * shard exactly: ceil(D/tt) * k_d == ceil(D/tp), or partial leaves d
 * untiled and the value is padded to ceil(D/tt) * tt first. With K the
 * product of the k_d, every reduction group (s members) must hold each
 * piece vector f = (f_d) the same number of times, R = s / K; member p is
 * copy r(p) of its piece, counting in group order. Then one reduce-scatter
 * per cut dim d, along d, over the members that agree in everything but f_d
 * (ordered by f_d), and, where R > 1, one all-reduce over the R copies of
 * each piece. By induction, after the reduce-scatter of the i-th cut dim
 * p holds its piece along the first i cut dims, summed over the members
 * that agree with it in r and in the pieces of the later cut dims; after
 * the last, summed over the members of copy r(p); the all-reduce adds the
 * copies. Anything else (to not finer than partial, the pieces spread
 * unevenly over a group) is an all-reduce and then a reshard.
 *
 * Example: y[8,8] = a[8,16] . b[16,8] on 2 devices, the contracting dim
 * tiled, y {devices=[2,1]0,1}: partial is replicated, each device holds
 * f32[8,8] partial sums (256 bytes), group {0,1}; k_0 = 2, f_0 = 0, 1,
 * R = 1: reduce-scatter(dimensions={0}, replica_groups={{0,1}}) gives each
 * device its f32[4,8] rows, receiving 128 bytes (the all-reduce: 256).
 * Example (partial replication): a group {0,1,2,3} (the contracting dim in
 * 4 tiles) and `to` cutting dim 0 in 2 with f_0 = 0, 1, 0, 1: K = 2, R = 2,
 * r = 0, 0, 1, 1: reduce-scatter over {0,1} and {2,3}, then all-reduce
 * over {0,2} and {1,3}.
 */
#include "spmd_internal.h"

#include <string.h>

typedef struct PartialPlan {
    int32_t ncut;                  /* cut dims, in dim order */
    int64_t cut[IR_MAX_RANK], k[IR_MAX_RANK];
    int64_t K, R;
    int64_t pad_hi[IR_MAX_RANK];   /* padding before the first reduce-scatter */
    bool padded;
    int32_t ng;
    int64_t *slot;                 /* slot[(g * R + r) * K + f]: the partition id */
} PartialPlan;

/* The data coords of device p under s; all 0 for a value every device
 * holds whole. */
static bool coords_of(const IrSharding *s, int64_t p, int64_t *c)
{
    if (s->kind != SHD_TILED) {
        memset(c, 0, sizeof(int64_t) * (IR_MAX_RANK + 2));
        return true;
    }
    return shd_device_coords(s, p, c);
}

/* The cut dims of partial -> to and the padding they need; false when `to`
 * does not cut partial's tiles into whole pieces. */
static bool plan_cuts(const IrShape *full, const IrSharding *partial, const IrSharding *to, PartialPlan *pl)
{
    if (full->type == IR_TUPLE || full->type == IR_TOKEN || to->kind != SHD_TILED ||
        ir_sharding_data_rank(to) != full->rank ||
        !(partial->kind == SHD_TILED ? ir_sharding_data_rank(partial) == full->rank : shd_is_replicated(partial)))
        return false;
    pl->ncut = 0;
    pl->K = 1;
    pl->padded = false;
    for (int32_t d = 0; d < full->rank; d++) {
        int64_t tp = shd_tiles(partial, d), tt = shd_tiles(to, d), D = full->dims[d];
        pl->pad_hi[d] = 0;
        if (tt % tp != 0)
            return false;
        int64_t k = tt / tp;
        if (k == 1)
            continue;
        if (tp == 1)
            pl->pad_hi[d] = shd_shard_size(D, tt) * tt - D;
        else if (shd_shard_size(D, tt) * k != shd_shard_size(D, tp))
            return false;
        pl->padded |= pl->pad_hi[d] != 0;
        pl->cut[pl->ncut] = d;
        pl->k[pl->ncut++] = k;
        pl->K *= k;
    }
    return pl->K > 1;
}

/* Piece index f of device p (row-major over the cut dims), or -1 when its
 * tile under `to` is not inside its tile under `partial` or not that of
 * the group's first member `cp0`. */
static int64_t piece_of(const PartialPlan *pl, int32_t rank, const IrSharding *partial, const IrSharding *to,
                        int64_t p, const int64_t *cp0)
{
    int64_t cp[IR_MAX_RANK + 2], ct[IR_MAX_RANK + 2];
    if (!coords_of(partial, p, cp) || !coords_of(to, p, ct))
        return -1;
    int64_t f = 0;
    for (int32_t d = 0, i = 0; d < rank; d++) {
        int64_t k = i < pl->ncut && pl->cut[i] == d ? pl->k[i++] : 1;
        if (cp[d] != cp0[d] || ct[d] / k != cp[d])
            return -1;
        if (k > 1)
            f = f * k + ct[d] % k;
    }
    return f;
}

/* The whole plan (see the top of the file), slots in arena a; false when
 * the reduce-scatters do not apply. */
static bool plan_partial(IrArena *a, const IrShape *full, const IrSharding *partial, int32_t ng,
                         int32_t size, const int64_t *groups, const IrSharding *to, PartialPlan *pl)
{
    if (size <= 1 || !plan_cuts(full, partial, to, pl) || size % pl->K != 0)
        return false;
    pl->R = size / pl->K;
    pl->ng = ng;
    pl->slot = ir_alloc_array(a, (size_t)ng * (size_t)size, sizeof(int64_t));
    int64_t *count = ir_alloc_array(a, (size_t)pl->K, sizeof(int64_t));
    if (!pl->slot || !count)
        return false;
    for (int32_t g = 0; g < ng; g++) {
        const int64_t *m = groups + (int64_t)g * size;
        int64_t cp0[IR_MAX_RANK + 2];
        if (!coords_of(partial, m[0], cp0))
            return false;
        memset(count, 0, (size_t)pl->K * sizeof(int64_t));
        for (int32_t j = 0; j < size; j++) {
            int64_t f = piece_of(pl, full->rank, partial, to, m[j], cp0);
            if (f < 0 || count[f] == pl->R)
                return false;
            pl->slot[((int64_t)g * pl->R + count[f]++) * pl->K + f] = m[j];
        }
    }
    return true;
}

/* Bytes a device receives under the plan: each reduce-scatter (n-1)/n of
 * its operand, the all-reduce 2(n-1)/n (as the plan records them). */
static int64_t plan_bytes(const PartialPlan *pl, int64_t bytes)
{
    int64_t total = 0;
    for (int32_t i = 0; i < pl->ncut; i++) {
        total += bytes * (pl->k[i] - 1) / pl->k[i];
        bytes /= pl->k[i];
    }
    return total + (pl->R > 1 ? 2 * bytes * (pl->R - 1) / pl->R : 0);
}

/* The reduce-scatter of cut i: groups of the members agreeing in all but
 * f_i, ordered by f_i. */
static int32_t scatter_cut(PComp *pc, int32_t v, IrOpcode red, const PartialPlan *pl, int32_t i)
{
    int64_t stride = 1;
    for (int32_t j = i + 1; j < pl->ncut; j++)
        stride *= pl->k[j];
    int64_t k = pl->k[i], n = (int64_t)pl->ng * pl->R * pl->K;
    int64_t *groups = ir_alloc_array(spmd_tmp(pc), (size_t)n, sizeof(int64_t));
    if (!groups)
        return -1;
    int64_t o = 0;
    for (int64_t base = 0; base < n; base += pl->K)       /* one (g, r) */
        for (int64_t f = 0; f < pl->K; f++)
            if ((f / stride) % k == 0)
                for (int64_t j = 0; j < k; j++)
                    groups[o++] = pl->slot[base + f + j * stride];
    return spmd_emit_reduce_scatter(pc, v, red, pl->cut[i], (int32_t)(n / k), (int32_t)k, groups);
}

/* The all-reduce over the R copies of each piece. */
static int32_t add_copies(PComp *pc, int32_t v, IrOpcode red, const PartialPlan *pl)
{
    int64_t n = (int64_t)pl->ng * pl->R * pl->K, o = 0;
    int64_t *groups = ir_alloc_array(spmd_tmp(pc), (size_t)n, sizeof(int64_t));
    if (!groups)
        return -1;
    for (int32_t g = 0; g < pl->ng; g++)
        for (int64_t f = 0; f < pl->K; f++)
            for (int64_t r = 0; r < pl->R; r++)
                groups[o++] = pl->slot[((int64_t)g * pl->R + r) * pl->K + f];
    return spmd_emit_all_reduce(pc, v, red, (int32_t)(pl->ng * pl->K), (int32_t)pl->R, groups);
}

int32_t spmd_finish_partial(PComp *pc, int32_t v, const IrShape *full, const IrSharding *partial, IrOpcode red,
                       int32_t ng, int32_t size, const int64_t *groups, const IrSharding *to)
{
    if (v < 0)
        return -1;
    PartialPlan pl;
    if (size <= 1)
        return spmd_reshard(pc, v, full, partial, to);
    if (!plan_partial(spmd_tmp(pc), full, partial, ng, size, groups, to, &pl))
        return spmd_reshard(pc, spmd_emit_all_reduce(pc, v, red, ng, size, groups), full, partial, to);
    if (pl.padded) {
        int64_t lo[IR_MAX_RANK] = {0};
        v = spmd_emit_pad(pc, v, spmd_emit_identity_const(pc, full->type, red), lo, pl.pad_hi);
    }
    for (int32_t i = 0; i < pl.ncut && v >= 0; i++)
        v = scatter_cut(pc, v, red, &pl, i);
    return pl.R > 1 && v >= 0 ? add_copies(pc, v, red, &pl) : v;
}

bool spmd_finish_partial_scatters(PComp *pc, const IrShape *full, const IrSharding *partial, int32_t ng, int32_t size,
                             const int64_t *groups, const IrSharding *to)
{
    PartialPlan pl;
    return plan_partial(spmd_tmp(pc), full, partial, ng, size, groups, to, &pl);
}

int64_t spmd_finish_partial_cost(PComp *pc, const IrShape *full, const IrSharding *partial, int32_t ng, int32_t size,
                            const int64_t *groups, const IrSharding *to)
{
    IrShape local;
    PartialPlan pl;
    if (shd_shard_shape(spmd_tmp(pc), full, partial, &local) != IR_OK)
        return INT64_MAX / 4;
    if (size > 1 && plan_partial(spmd_tmp(pc), full, partial, ng, size, groups, to, &pl)) {
        /* The padding the cuts add moves too. */
        for (int32_t i = 0; i < pl.ncut; i++)
            local.dims[pl.cut[i]] += pl.pad_hi[pl.cut[i]];
        return plan_bytes(&pl, ir_shape_bytes(&local));
    }
    return (size > 1 ? 2 * ir_shape_bytes(&local) : 0) + spmd_reshard_cost(full, partial, to);
}
