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
 *   reshard      from one spec to another, the collectives
 *                partition/reshard.c runs for it (reshard.c's classifier:
 *                a cut of the shard free, a permute, one all-to-all, one
 *                all-gather per dim gathered over every axis on it at
 *                once, or the whole value gathered and sliced). Priced
 *                axis by axis before (an axis moved an all-to-all, one
 *                dropped an all-gather), a layer tiled over both axes of
 *                a 2x2 mesh cost two gathers where one ran, and
 *                [x*y,-] -> [x,y] on 2x4 an all-to-all where the stack
 *                was gathered whole
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

double auto_reshard_seconds(const AutoCost *c, const AutoMesh *m, int64_t local, const IrShape *shape,
                            const AutoSpec *from, const AutoSpec *to)
{
    AutoReshard r;
    auto_reshard_classify(m, shape, from, to, &r);
    double t = 0;
    for (int32_t k = 0; k < r.ncoll; k++)
        t += auto_coll_seconds(c, r.coll[k].kind, r.coll[k].n, auto_axes_scope(m, r.coll[k].axes, local),
                               r.coll[k].bytes);
    return t;
}
