/*
 * propagate.c: sharding propagation, what XLA's ShardingPropagation does.
 *
 * From the shardings the user wrote (on parameters, on any instruction, on
 * the root, on `custom-call`s to `Sharding`), give every instruction of the
 * entry computation, and of every computation it reaches through call, while
 * and conditional, a sharding: forward (operands -> user) and backward
 * (user -> operands), until nothing changes.
 *
 * The unit of propagation is a *slot*: one array leaf of one instruction
 * (an array-shaped instruction has one slot, a tuple-shaped one a slot per
 * leaf, depth first). Tuple, get-tuple-element, while, call, conditional and
 * opt-barrier move slots around unchanged; every other op has a rule (one
 * file per family, prop_*.c, forward and backward side by side, mapped from
 * the op family below) that turns the sharding of one value into a
 * candidate for another. Slots that must hold one sharding (a while's state in the loop,
 * its body and its condition; a conditional's result and its branch roots;
 * XLA's shard_as / shard_like groups) are merged with a union-find and share
 * one value.
 *
 * The driver is a worklist of instructions. Visiting an instruction collects
 * the candidates for each of its slots from its operands, its users and the
 * computations it is linked to, picks one by the conflict rule (see
 * `decide`), and, when a slot changed, pushes the instructions that read it.
 * A slot only ever moves up a finite lattice (nothing -> a sharding ->
 * shardings that split strictly more -> manual), so the loop ends; user
 * lists are precomputed and each visit costs the instruction's degree, so
 * the whole pass is linear in the module size times the lattice height
 * (about log2(devices)). It runs twice: a first round without forward
 * propagation through broadcast (so that a broadcast result prefers the
 * sharding its users want, as XLA's aggressiveness levels do), then a round
 * with every rule. Order is definition order, so the result is
 * deterministic.
 *
 * Decisions (documented where XLA leaves a choice):
 *   - maximal shardings stay where the user put them and never spread; a
 *     value whose only sources are maximal ends replicated;
 *   - manual spreads through any op to its array results and back to
 *     operands (a manual region), except across SPMDFullToShardShape
 *     (operand side is not manual) and SPMDShardToFullShape (result side is
 *     not manual); it never replaces a user annotation;
 *   - scalars take only manual shardings (a scalar inside a manual region
 *     differs per device); otherwise they end replicated;
 *   - tokens end replicated;
 *   - tuple shardings are flat lists of leaf shardings (XLA's form, the one
 *     shd_leaf reads); a non-tuple annotation on a tuple-shaped instruction
 *     is expanded to one element per leaf (same meaning);
 *   - `{unknown}` annotations are not annotations: propagation fills them;
 *     shard_as and shard_like groups are both read as "one sharding for the
 *     group" and the group marker is not kept on the shardings produced;
 *   - a `Sharding` custom-call is an annotation on itself and passes its
 *     sharding to its operand and users like a copy (its unspecified_dims,
 *     XLA's partial annotations, are not read);
 *   - a dot or convolution operand takes the result's batch and free tiles
 *     with its contracting dims untiled; the other operand's contracting
 *     tiles are not copied across (XLA does, at higher aggressiveness);
 *   - reverse keeps the sharding as it is (XLA also reverses the device
 *     order along reversed dims; tessel's partitioner reshards instead).
 */
#include "prop_internal.h"

#include <stdlib.h>
#include <string.h>

/* The rules report OOM through NEED (prop_internal.h) with this error. */
IrStatus prop_oom(Prop *p)
{
    return ir_oom(p->d, "during sharding propagation");
}

/* ------------------------------------------------------------------ */
/* Slots a sharding may go to                                          */
/* ------------------------------------------------------------------ */

static int32_t data_rank(const IrSharding *s)
{
    return s->kind == SHD_TILED ? s->ntile - s->nsubgroup : 0;
}

/* Manual class: 2 fully manual, 1 tiled with a manual subgroup, 0 other.
 * A higher class wins over a lower one: a manual region is a hard fact. */
static int cls(const IrSharding *s)
{
    if (s->kind == SHD_MANUAL)
        return 2;
    if (s->kind == SHD_TILED) {
        if (shd_is_manual(s))
            return 2;
        if (shd_has_manual_subgroup(s))
            return 1;
    }
    return 0;
}

/* A sharding a transform can read for a value of array shape `sh`. */
static bool usable(const IrSharding *s, const IrShape *sh)
{
    if (!s || !ir_type_is_array(sh->type))
        return false;
    switch (s->kind) {
    case SHD_REPLICATED:
    case SHD_MANUAL:
        return true;
    case SHD_TILED:
        return data_rank(s) == sh->rank;
    default:
        return false;   /* maximal never spreads; tuples are read leaf by leaf */
    }
}

/* May `s` be given to a slot of shape `sh`? Scalars take only manual forms. */
static bool fits(const IrSharding *s, const IrShape *sh)
{
    if (!usable(s, sh))
        return false;
    if (sh->rank == 0 && s->kind == SHD_TILED)
        return shd_has_manual_subgroup(s);
    return true;
}

/* ------------------------------------------------------------------ */
/* Candidates                                                          */
/* ------------------------------------------------------------------ */

IrStatus prop_emit(Prop *p, int32_t g, int32_t leaf, const IrSharding *s, const IrShape *src)
{
    if (!s || leaf < 0 || leaf >= prop_nleaf(p, g))
        return IR_OK;
    int32_t slot = p->sbase[g] + leaf;
    if (p->fixed[p->rep[slot]] || !fits(s, p->lshape[slot]))
        return IR_OK;
    NEED(IR_GROW(p->cand, p->capcand, (int64_t)p->ncand + 1));
    int64_t bytes = src ? ir_shape_bytes(src) : 0;
    p->cand[p->ncand] = (Cand){.leaf = leaf, .cls = cls(s), .tiles = shd_total_tiles(s),
                               .bytes = bytes, .order = p->ncand, .s = s};
    p->ncand++;
    return IR_OK;
}

IrStatus prop_emit_all(Prop *p, int32_t g, const IrSharding *s, const IrShape *src)
{
    for (int32_t l = 0; l < prop_nleaf(p, g); l++)
        TRY(prop_emit(p, g, l, s, src));
    return IR_OK;
}

IrStatus prop_emit_slots(Prop *p, int32_t g, int32_t to, int32_t src, int32_t from, int32_t n)
{
    if (to < 0 || from < 0)
        return IR_OK;
    for (int32_t l = 0; l < n; l++) {
        if (from + l >= prop_nleaf(p, src) || to + l >= prop_nleaf(p, g))
            break;
        TRY(prop_emit(p, g, to + l, prop_get(p, src, from + l), prop_lshape(p, src, from + l)));
    }
    return IR_OK;
}

static bool any_manual(const Prop *p, int32_t g)
{
    for (int32_t l = 0; l < prop_nleaf(p, g); l++) {
        const IrSharding *s = prop_get(p, g, l);
        if (s && cls(s) == 2)
            return true;
    }
    return false;
}

/* ------------------------------------------------------------------ */
/* The rules of the families (prop_*.c)                                */
/* ------------------------------------------------------------------ */

/* Families without an entry (parameters, constants, iota, collectives,
 * the fallback ops) have no rule: nothing crosses them. */
static const PropRule *const rules[] = {
    [FAM_ELEMENTWISE] = &prop_rule_elementwise,
    [FAM_TUPLE] = &prop_rule_control,
    [FAM_CONTROL] = &prop_rule_control,
    [FAM_BROADCAST] = &prop_rule_broadcast,
    [FAM_RESHAPE] = &prop_rule_reshape,
    [FAM_TRANSPOSE] = &prop_rule_transpose,
    [FAM_BITCAST_CONVERT] = &prop_rule_bitcast_convert,
    [FAM_SLICE] = &prop_rule_slice,
    [FAM_DYNAMIC_SLICE] = &prop_rule_slice,
    [FAM_PAD] = &prop_rule_slice,
    [FAM_CONCATENATE] = &prop_rule_slice,
    [FAM_REVERSE] = &prop_rule_elementwise, /* reverse keeps the sharding as it is */
    [FAM_GATHER] = &prop_rule_gather,
    [FAM_SCATTER] = &prop_rule_scatter,
    [FAM_SORT] = &prop_rule_sort,
    [FAM_DOT] = &prop_rule_dot,
    [FAM_CONVOLUTION] = &prop_rule_convolution,
    [FAM_REDUCE] = &prop_rule_reduce,
    [FAM_REDUCE_WINDOW] = &prop_rule_window,
    [FAM_CUSTOM_CALL] = &prop_rule_custom_call,
    [FAM_FFT] = &prop_rule_local,
    [FAM_TOPK] = &prop_rule_local,
    [FAM_LINALG] = &prop_rule_local,
    [FAM_BATCH_NORM] = &prop_rule_batch_norm,
    [FAM_FUSION] = &prop_rule_control,
    [FAM_RAGGED_DOT] = &prop_rule_ragged_dot,
    [FAM_ASYNC] = &prop_rule_control,
};

static const PropRule no_rule = {0};

static const PropRule *rule_of(const Prop *p, int32_t g)
{
    IrOpFamily f = (IrOpFamily)p->gfam[g];
    return (size_t)f < sizeof rules / sizeof *rules && rules[f] ? rules[f] : &no_rule;
}

/* Forward: the result of g from its operand k. A manual operand makes
 * the result manual whatever the op; otherwise the family's array rule
 * turns the operand's sharding into a candidate. */
static IrStatus fwd(Prop *p, int32_t g, int32_t k)
{
    const PropRule *r = rule_of(p, g);
    int32_t o = prop_opnd(p, g, k);
    if (r->fwd_first) {
        bool done = false;
        IrStatus st = r->fwd_first(p, g, k, &done);
        if (done || st != IR_OK)
            return st;
    }
    if (any_manual(p, o))
        TRY(prop_emit_all(p, g, p->manual, NULL));
    const IrShape *os = prop_lshape(p, o, 0);
    const IrSharding *s = prop_nleaf(p, o) == 1 ? prop_get(p, o, 0) : NULL;
    if (!usable(s, os) || !r->fwd)
        return IR_OK;
    return r->fwd(p, g, k, s, os);
}

/* The slot of user u that operand position k corresponds to: 0 for a
 * single result, the family's map for ops with several (-1: none). */
static int32_t user_slot(const Prop *p, int32_t u, int32_t k, const PropRule *r)
{
    if (prop_nleaf(p, u) == 1)
        return 0;
    return r->slot ? r->slot(p, u, k) : -1;
}

/* Backward: operand g (position k of user u) from u. */
static IrStatus bwd(Prop *p, int32_t u, int32_t k, int32_t g)
{
    const PropRule *r = rule_of(p, u);
    if (r->bwd_first) {
        bool done = false;
        IrStatus st = r->bwd_first(p, u, k, g, &done);
        if (done || st != IR_OK)
            return st;
    }
    if (any_manual(p, u))
        TRY(prop_emit_all(p, g, p->manual, NULL));
    int32_t l = user_slot(p, u, k, r);
    if (l < 0)
        return IR_OK;
    const IrSharding *s = prop_get(p, u, l);
    const IrShape *us = prop_lshape(p, u, l);
    if (!usable(s, us) || !ir_shape_is_array(&prop_ins(p, g)->shape) || !r->bwd)
        return IR_OK;
    return r->bwd(p, u, k, g, s, us);
}

/* ------------------------------------------------------------------ */
/* The conflict rule                                                   */
/* ------------------------------------------------------------------ */

/* Compatible merge of two tiled shardings: the sharding tiled on the dims
 * of both, when each device's tile in it agrees with its tile in x and in y.
 * Example on 4 devices: x = {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
 * (dim 0 tiles: {0,1} | {2,3}), y = {devices=[1,2,2]0,2,1,3
 * last_tile_dim_replicate} (dim 1 tiles: {0,2} | {1,3}): the device at
 * merged tile (i,j) is the one in x's tile i and in y's tile j, so (0,0)=0,
 * (0,1)=1, (1,0)=2, (1,1)=3: {devices=[2,2]0,1,2,3}. With y =
 * {devices=[1,2,2]0,1,2,3 last_tile_dim_replicate} instead (dim 1 tiles
 * {0,1} | {2,3}, the same groups as x's dim 0) no device set fits and the
 * merge fails. NULL when not compatible (a dim tiled differently, device
 * sets that differ, a manual subgroup) or on OOM (*oom set). Device order
 * within a merged tile follows x. */
typedef struct DevPos {
    int64_t dev, pos;
} DevPos;

static int cmp_devpos(const void *a, const void *b)
{
    const DevPos *x = a, *y = b;
    return x->dev < y->dev ? -1 : x->dev > y->dev ? 1 : 0;
}

/* Data coordinates of position `pos` of a tiled sharding's device array. */
static void coords_of(const IrSharding *s, int64_t pos, int64_t *c)
{
    for (int32_t d = s->ntile - 1; d >= 0; d--) {
        int64_t v = pos % s->tile[d];
        pos /= s->tile[d];
        if (d < data_rank(s))
            c[d] = v;
    }
}

static const IrSharding *merge(IrArena *a, const IrSharding *x, const IrSharding *y, bool *oom)
{
    if (x->kind != SHD_TILED || y->kind != SHD_TILED || shd_has_manual_subgroup(x) ||
        shd_has_manual_subgroup(y))
        return NULL;
    int32_t r = data_rank(x);
    if (r != data_rank(y) || x->ndevices != y->ndevices || r > IR_MAX_RANK)
        return NULL;
    int64_t tile[IR_MAX_RANK + 1], total = 1, n = x->ndevices;
    for (int32_t d = 0; d < r; d++) {
        int64_t tx = x->tile[d], ty = y->tile[d];
        if (tx != ty && tx != 1 && ty != 1)
            return NULL;
        tile[d] = tx > ty ? tx : ty;
        total *= tile[d];
    }
    if (total <= shd_total_tiles(x) || total <= shd_total_tiles(y) || n % total != 0)
        return NULL;
    int64_t rep = n / total;
    DevPos *px = ir_alloc_array(a, (size_t)n, sizeof *px);
    DevPos *py = ir_alloc_array(a, (size_t)n, sizeof *py);
    int64_t *mt = ir_alloc_array(a, (size_t)n, sizeof *mt);
    int64_t *fill = ir_alloc_array(a, (size_t)total, sizeof *fill);
    int64_t *dev = ir_alloc_array(a, (size_t)n, sizeof *dev);
    if (!px || !py || !mt || !fill || !dev) {
        *oom = true;
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        px[i] = (DevPos){x->devices[i], i};
        py[i] = (DevPos){y->devices[i], i};
    }
    qsort(px, (size_t)n, sizeof *px, cmp_devpos);
    qsort(py, (size_t)n, sizeof *py, cmp_devpos);
    for (int64_t i = 0; i < n; i++) {
        if (px[i].dev != py[i].dev || (i > 0 && px[i].dev == px[i - 1].dev))
            return NULL;
        int64_t cx[IR_MAX_RANK + 2], cy[IR_MAX_RANK + 2], lin = 0;
        coords_of(x, px[i].pos, cx);
        coords_of(y, py[i].pos, cy);
        for (int32_t d = 0; d < r; d++) {
            if (x->tile[d] > 1 && y->tile[d] > 1 && cx[d] != cy[d])
                return NULL;
            lin = lin * tile[d] + (x->tile[d] > 1 ? cx[d] : cy[d]);
        }
        if (++fill[lin] > rep)
            return NULL;
        mt[px[i].pos] = lin;
    }
    memset(fill, 0, (size_t)total * sizeof *fill);
    for (int64_t i = 0; i < n; i++)
        dev[mt[i] * rep + fill[mt[i]]++] = x->devices[i];
    tile[r] = rep;
    IrSharding *m = shd_tiled(a, r + (rep > 1), tile, dev, rep > 1);
    if (!m)
        *oom = true;
    return m;
}

static int cmp_cand(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->leaf != y->leaf)
        return x->leaf < y->leaf ? -1 : 1;
    if (x->cls != y->cls)
        return x->cls > y->cls ? -1 : 1;
    if (x->tiles != y->tiles)
        return x->tiles > y->tiles ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order ? 1 : 0;
}

/* ---- one copy of each sharding ---- */

/* A model has a handful of distinct shardings shared by thousands of
 * instructions: the values chosen for slots (keep arena) and the final
 * array shardings (module arena) are interned, one copy of each. Slot
 * values are never changed in place (a slot takes a new value), so they
 * can be shared. Normalised shardings with equal contents are the same
 * value in every field (shd_normalize fills no metadata, iota form or
 * group), so ir_sharding_equal is the identity. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    return (h ^ v) * 1099511628211ull;
}

static uint64_t shd_hash(const IrSharding *s)
{
    uint64_t h = mix(1469598103934665603ull, (uint64_t)s->kind);
    h = mix(h, (uint64_t)s->device);
    if (s->kind != SHD_TILED)
        return h;
    for (int32_t i = 0; i < s->ntile; i++)
        h = mix(h, (uint64_t)s->tile[i]);
    /* A prefix of the devices: equal shardings still hash alike, and a
     * sharding of 65,536 devices costs what one of 64 does (the tile
     * dims and the prefix separate all but shardings that differ late in
     * an explicit device list, which the equality test then tells). */
    h = mix(h, (uint64_t)s->ndevices);
    for (int64_t i = 0; i < s->ndevices && i < 64; i++)
        h = mix(h, (uint64_t)s->devices[i]);
    for (int32_t i = 0; i < s->nsubgroup; i++)
        h = mix(h, (uint64_t)s->subgroup[i]);
    return h;
}

/* The interned copy in arena a (the one t holds values of) of the normal
 * form of the array sharding v, computed in scratch first; NULL on OOM. */
static IrSharding *intern(Prop *p, Intern *t, IrArena *a, const IrSharding *v)
{
    IrSharding *nv = shd_normalize(p->tmp, v);
    if (!nv)
        return NULL;
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        IrSharding **slot = ts_calloc(cap, sizeof *slot);
        if (!slot)
            return NULL;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slot[i])
                continue;
            size_t j = shd_hash(t->slot[i]) & (cap - 1);
            while (slot[j])
                j = (j + 1) & (cap - 1);
            slot[j] = t->slot[i];
        }
        ts_free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t i = shd_hash(nv) & (t->cap - 1);
    for (; t->slot[i]; i = (i + 1) & (t->cap - 1))
        if (ir_sharding_equal(t->slot[i], nv))
            return t->slot[i];
    IrSharding *keep = ir_alloc(a, sizeof *keep);
    if (!keep || ir_sharding_copy(a, keep, nv) != IR_OK)
        return NULL;
    t->slot[i] = keep;
    t->n++;
    return keep;
}

/* The conflict rule. User annotations are never overridden (fixed slots
 * take no candidates). Among the candidates for a slot:
 *   1. a manual one beats a partly manual one beats any other (a value
 *      inside a manual region is manual);
 *   2. then the one that splits more (more data tiles);
 *   3. then the one that moves fewer bytes: the one derived from the larger
 *      value (resharding the smaller side is cheaper);
 *   4. then the earlier source: operands in order, then users in
 *      definition order, then callee links (determinism).
 * The winner is then merged with every other candidate that is compatible
 * with it (tiles on different dims over the same devices, as XLA's
 * MergeSharding does), so dot(lhs {2,1,2 repl}, rhs {1,2,2 repl}) gets both.
 * Refinement: a slot that already has a sharding from propagation takes the
 * new one only if it splits strictly more (or is its compatible merge with
 * the old one, which does, or is of a higher manual class); full manual is
 * final. Each slot therefore changes at most about log2(devices) + 3
 * times, which ends the worklist.
 * Example (2 devices): add(a {devices=[2,1]0,1}, b {devices=[1,2]0,1}) of
 * equal shapes: both split in 2 and weigh the same, a comes first: the add
 * gets {devices=[2,1]0,1}; b keeps its annotation and is resharded. */
static IrStatus decide(Prop *p, int32_t g, const Cand *c, int32_t nc, bool *changed)
{
    int32_t slot = p->sbase[g] + c[0].leaf, r = p->rep[slot];
    if (p->fixed[r])
        return IR_OK;
    bool oom_ = false;
    const IrSharding *best = c[0].s;
    int64_t bt = c[0].tiles;
    if (c[0].cls == 0)
        for (int32_t i = 1; i < nc; i++) {
            if (c[i].cls != 0)
                continue;
            const IrSharding *mg = merge(p->tmp, best, c[i].s, &oom_);
            if (oom_)
                return prop_oom(p);
            if (mg && shd_total_tiles(mg) > bt) {
                best = mg;
                bt = shd_total_tiles(mg);
            }
        }
    const IrSharding *cur = p->val[r], *next = NULL;
    if (!cur) {
        next = best;
    } else if (!ir_sharding_equal(cur, best)) {
        int cc = cls(cur), bc = c[0].cls;
        if (cc == 2 || bc < cc)
            return IR_OK;
        if (bc > cc) {
            next = best;
        } else {
            int64_t ct = shd_total_tiles(cur);
            const IrSharding *mg = cc == 0 ? merge(p->tmp, cur, best, &oom_) : NULL;
            if (oom_)
                return prop_oom(p);
            if (mg && shd_total_tiles(mg) > ct && shd_total_tiles(mg) >= bt)
                next = mg;
            else if (bt > ct)
                next = best;
        }
    }
    if (!next)
        return IR_OK;
    IrSharding *v = intern(p, &p->kept, p->keep, next);
    NEED(v);
    p->val[r] = v;
    *changed = true;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* Worklist                                                            */
/* ------------------------------------------------------------------ */

static void push(Prop *p, int32_t g)
{
    if (g < 0 || g >= p->n || p->inq[g])
        return;
    p->inq[g] = true;
    p->q[(p->qhead + p->qlen) % p->n] = g;
    p->qlen++;
}

static void push_param(Prop *p, int32_t comp, int32_t pn)
{
    int32_t rci = comp >= 0 && comp < p->m->ncomp ? p->rcof[comp] : -1;
    IrComputation *c = rci >= 0 ? p->m->comp[comp] : NULL;
    if (c && pn >= 0 && pn < c->nparam && c->param[pn] >= 0)
        push(p, p->ibase[rci] + c->param[pn]);
}

/* Push everything that reads a slot of y: its operands and users, and the
 * instructions linked to it across computations. */
static void notify(Prop *p, int32_t y)
{
    if (p->stamp[y] == p->visit)
        return;
    p->stamp[y] = p->visit;
    IrInstr *x = prop_ins(p, y);
    for (int32_t k = 0; k < x->nopnd; k++)
        push(p, prop_opnd(p, y, k));
    for (int32_t i = p->ustart[y]; i < p->ustart[y + 1]; i++) {
        int32_t u = p->ulist[i], k = p->upos[i];
        IrInstr *ux = prop_ins(p, u);
        push(p, u);
        if (prop_call_like(ux->op) && ux->ncalled > 0)
            push_param(p, ux->called[0], k);
        if (ux->op == OP_CONDITIONAL && k >= 1 && k - 1 < ux->ncalled)
            push_param(p, ux->called[k - 1], 0);
    }
    if (prop_links_callees(x->op))
        for (int32_t b = 0; b < x->ncalled; b++) {
            int32_t rci = p->rcof[x->called[b]];
            IrComputation *c = p->m->comp[x->called[b]];
            if (rci < 0)
                continue;
            for (int32_t i = 0; i < c->nparam; i++)
                push_param(p, x->called[b], i);
            if (c->root >= 0)
                push(p, p->ibase[rci] + c->root);
        }
    IrComputation *c = prop_comp_of(p, y);
    int32_t rci = p->gcomp[y];
    if (x->op == OP_PARAMETER || prop_local(p, y) == c->root)
        for (int32_t i = p->sstart[rci]; i < p->sstart[rci + 1]; i++) {
            int32_t sg = p->slist[i];
            IrInstr *site = prop_ins(p, sg);
            push(p, sg);
            if (x->op != OP_PARAMETER)
                continue;
            if (prop_call_like(site->op) && x->a.parameter_number < site->nopnd)
                push(p, prop_opnd(p, sg, (int32_t)x->a.parameter_number));
            if (site->op == OP_CONDITIONAL)
                for (int32_t b = 0; b < site->ncalled; b++)
                    if (site->called[b] == p->rc[rci] && b + 1 < site->nopnd)
                        push(p, prop_opnd(p, sg, b + 1));
        }
}

static IrStatus visit(Prop *p, int32_t g)
{
    int32_t nl = prop_nleaf(p, g);
    bool open = false;
    for (int32_t l = 0; l < nl && !open; l++) {
        int32_t r = p->rep[p->sbase[g] + l];
        open = !p->fixed[r] && !(p->val[r] && cls(p->val[r]) == 2);
    }
    if (!open)
        return IR_OK;
    /* Candidates live for one visit: their scratch memory is reused by
     * the next (and stays in the cache). */
    ir_arena_reset(p->tmp);
    IrInstr *x = prop_ins(p, g);
    p->ncand = 0;
    for (int32_t k = 0; k < x->nopnd; k++)
        TRY(fwd(p, g, k));
    for (int32_t i = p->ustart[g]; i < p->ustart[g + 1]; i++)
        TRY(bwd(p, p->ulist[i], p->upos[i], g));
    TRY(prop_links(p, g));
    if (p->ncand == 0)
        return IR_OK;
    qsort(p->cand, (size_t)p->ncand, sizeof *p->cand, cmp_cand);
    p->visit++;
    bool any = false;
    for (int32_t i = 0; i < p->ncand;) {
        int32_t j = i;
        while (j < p->ncand && p->cand[j].leaf == p->cand[i].leaf)
            j++;
        bool changed = false;
        TRY(decide(p, g, &p->cand[i], j - i, &changed));
        if (changed) {
            any = true;
            int32_t r = p->rep[p->sbase[g] + p->cand[i].leaf];
            for (int32_t k = p->mstart[r]; k < p->mstart[r + 1]; k++)
                notify(p, p->mlist[k]);
        }
        i = j;
    }
    if (any)
        notify(p, g);
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* Setup                                                               */
/* ------------------------------------------------------------------ */

/* The entry computation and, transitively, the computations called by
 * call, while and conditional; scalar sub-computations are not reached. */
static IrStatus find_reached(Prop *p)
{
    IrModule *m = p->m;
    NEED(p->rcof = ts_malloc((size_t)m->ncomp * sizeof(int32_t)));
    NEED(p->rc = ts_malloc((size_t)m->ncomp * sizeof(int32_t)));
    for (int32_t i = 0; i < m->ncomp; i++)
        p->rcof[i] = -1;
    p->rc[0] = m->entry;
    p->rcof[m->entry] = 0;
    p->nrc = 1;
    for (int32_t done = 0; done < p->nrc; done++) {
        IrComputation *c = m->comp[p->rc[done]];
        for (int32_t i = 0; i < c->ninstr; i++) {
            IrInstr *x = &c->instr[i];
            if (!prop_links_callees(x->op))
                continue;
            for (int32_t b = 0; b < x->ncalled; b++) {
                int32_t cc = x->called[b];
                if (cc < 0 || cc >= m->ncomp)
                    return ir_error(p->d, IR_EINPUT, m->file, m->src, x->pos,
                                    "instruction '%s' calls a computation that does not exist",
                                    x->name);
                if (p->rcof[cc] < 0) {
                    p->rcof[cc] = p->nrc;
                    p->rc[p->nrc++] = cc;
                }
            }
        }
    }
    return IR_OK;
}

static void fill_leaf_shapes(const IrShape *s, const IrShape **out, int32_t *n)
{
    if (s->type != IR_TUPLE) {
        out[(*n)++] = s;
        return;
    }
    for (int32_t i = 0; i < s->ntuple; i++)
        fill_leaf_shapes(&s->tuple[i], out, n);
}

/* Global ids, slots, leaf shapes, tuple element offsets. */
static IrStatus number(Prop *p)
{
    IrModule *m = p->m;
    NEED(p->ibase = ts_malloc((size_t)(p->nrc + 1) * sizeof(int32_t)));
    int64_t n = 0, ns = 0, nt = 0;
    for (int32_t i = 0; i < p->nrc; i++) {
        p->ibase[i] = (int32_t)n;
        IrComputation *c = m->comp[p->rc[i]];
        n += c->ninstr;
        for (int32_t j = 0; j < c->ninstr; j++) {
            ns += ir_shape_leaf_count(&c->instr[j].shape);
            if (c->instr[j].shape.type == IR_TUPLE)
                nt += c->instr[j].shape.ntuple + 1;
        }
        if (n > INT32_MAX / 2 || ns > INT32_MAX / 2 || nt > INT32_MAX / 2)
            return ir_error(p->d, IR_EUNSUPPORTED, m->file, NULL, (IrPos){0, 0},
                            "module too large for sharding propagation");
    }
    p->ibase[p->nrc] = (int32_t)n;
    p->n = (int32_t)n;
    p->nslot = (int32_t)ns;
    size_t nn = (size_t)n + 1, sn = (size_t)ns + 1;
    NEED(p->gcomp = ts_malloc(nn * sizeof(int32_t)));
    NEED(p->gfam = ts_malloc(nn));
    NEED(p->sbase = ts_malloc(nn * sizeof(int32_t)));
    NEED(p->tstart = ts_malloc(nn * sizeof(int32_t)));
    NEED(p->toff = ts_malloc(((size_t)nt + 1) * sizeof(int32_t)));
    NEED(p->lshape = ts_malloc(sn * sizeof(IrShape *)));
    NEED(p->rep = ts_malloc(sn * sizeof(int32_t)));
    NEED(p->val = ts_calloc(sn, sizeof(IrSharding *)));
    NEED(p->fixed = ts_calloc(sn, sizeof(bool)));
    NEED(p->q = ts_malloc(nn * sizeof(int32_t)));
    NEED(p->inq = ts_calloc(nn, sizeof(bool)));
    NEED(p->stamp = ts_calloc(nn, sizeof(uint32_t)));
    int32_t g = 0, s = 0, t = 0;
    for (int32_t i = 0; i < p->nrc; i++) {
        IrComputation *c = m->comp[p->rc[i]];
        for (int32_t j = 0; j < c->ninstr; j++, g++) {
            const IrShape *sh = &c->instr[j].shape;
            p->gcomp[g] = i;
            p->gfam[g] = (uint8_t)ir_op_family(c->instr[j].op);
            p->sbase[g] = s;
            p->tstart[g] = t;
            fill_leaf_shapes(sh, p->lshape, &s);
            if (sh->type == IR_TUPLE) {
                int32_t off = 0;
                for (int32_t e = 0; e < sh->ntuple; e++) {
                    p->toff[t++] = off;
                    off += ir_shape_leaf_count(&sh->tuple[e]);
                }
                p->toff[t++] = off;
            }
        }
    }
    p->sbase[g] = s;
    p->tstart[g] = t;
    for (int32_t i = 0; i < p->nslot; i++)
        p->rep[i] = i;
    return IR_OK;
}

/* Users as (user, operand position) pairs, and call sites per computation. */
static IrStatus link_users(Prop *p)
{
    IrModule *m = p->m;
    size_t nn = (size_t)p->n + 1;
    NEED(p->ustart = ts_calloc(nn + 1, sizeof(int32_t)));
    NEED(p->sstart = ts_calloc((size_t)p->nrc + 2, sizeof(int32_t)));
    int64_t nu = 0, nsite = 0;
    for (int32_t g = 0; g < p->n; g++) {
        IrInstr *x = prop_ins(p, g);
        IrComputation *c = prop_comp_of(p, g);
        for (int32_t k = 0; k < x->nopnd; k++) {
            if (x->opnd[k] < 0 || x->opnd[k] >= c->ninstr)
                return ir_error(p->d, IR_EINPUT, m->file, m->src, x->pos,
                                "instruction '%s' has an operand that does not exist", x->name);
            p->ustart[prop_opnd(p, g, k) + 1]++;
            nu++;
        }
        if (prop_links_callees(x->op))
            for (int32_t b = 0; b < x->ncalled; b++) {
                p->sstart[p->rcof[x->called[b]] + 1]++;
                nsite++;
            }
    }
    for (int32_t g = 0; g < p->n; g++)
        p->ustart[g + 1] += p->ustart[g];
    for (int32_t i = 0; i < p->nrc; i++)
        p->sstart[i + 1] += p->sstart[i];
    NEED(p->ulist = ts_malloc(((size_t)nu + 1) * sizeof(int32_t)));
    NEED(p->upos = ts_malloc(((size_t)nu + 1) * sizeof(int32_t)));
    NEED(p->slist = ts_malloc(((size_t)nsite + 1) * sizeof(int32_t)));
    int32_t *ufill = ts_malloc(nn * sizeof(int32_t)), *sfill = ts_malloc(((size_t)p->nrc + 1) * sizeof(int32_t));
    if (!ufill || !sfill) {
        ts_free(ufill);
        ts_free(sfill);
        return prop_oom(p);
    }
    memcpy(ufill, p->ustart, nn * sizeof(int32_t));
    memcpy(sfill, p->sstart, ((size_t)p->nrc + 1) * sizeof(int32_t));
    for (int32_t g = 0; g < p->n; g++) {
        IrInstr *x = prop_ins(p, g);
        for (int32_t k = 0; k < x->nopnd; k++) {
            int32_t o = prop_opnd(p, g, k);
            p->ulist[ufill[o]] = g;
            p->upos[ufill[o]++] = k;
        }
        if (prop_links_callees(x->op))
            for (int32_t b = 0; b < x->ncalled; b++) {
                int32_t rci = p->rcof[x->called[b]];
                /* A conditional naming one computation twice is one site. */
                if (sfill[rci] > p->sstart[rci] && p->slist[sfill[rci] - 1] == g)
                    continue;
                p->slist[sfill[rci]++] = g;
            }
    }
    /* Close the gaps left by duplicate sites (rare): shift in place. */
    int32_t w = 0;
    for (int32_t i = 0; i < p->nrc; i++) {
        int32_t from = p->sstart[i], to = sfill[i];
        p->sstart[i] = w;
        for (int32_t k = from; k < to; k++)
            p->slist[w++] = p->slist[k];
    }
    p->sstart[p->nrc] = w;
    ts_free(ufill);
    ts_free(sfill);
    return IR_OK;
}

static int32_t find(int32_t *rep, int32_t s)
{
    while (rep[s] != s) {
        rep[s] = rep[rep[s]];
        s = rep[s];
    }
    return s;
}

static void unite(Prop *p, int32_t a, int32_t b)
{
    a = find(p->rep, a);
    b = find(p->rep, b);
    if (a < b)
        p->rep[b] = a;
    else if (b < a)
        p->rep[a] = b;
}

/* Unite slot by slot two instructions of the same leaf structure. */
static void unite_instrs(Prop *p, int32_t g, int32_t h)
{
    if (g < 0 || h < 0 || prop_nleaf(p, g) != prop_nleaf(p, h))
        return;
    for (int32_t l = 0; l < prop_nleaf(p, g); l++)
        unite(p, p->sbase[g] + l, p->sbase[h] + l);
}

static int32_t param_gid(const Prop *p, int32_t comp, int32_t pn)
{
    int32_t rci = p->rcof[comp];
    IrComputation *c = p->m->comp[comp];
    if (rci < 0 || pn >= c->nparam || c->param[pn] < 0)
        return -1;
    return p->ibase[rci] + c->param[pn];
}

static int32_t root_gid(const Prop *p, int32_t comp)
{
    int32_t rci = p->rcof[comp];
    IrComputation *c = p->m->comp[comp];
    return rci < 0 || c->root < 0 ? -1 : p->ibase[rci] + c->root;
}

typedef struct GroupKey {
    int64_t id;
    int32_t g;
} GroupKey;

static int cmp_group(const void *a, const void *b)
{
    const GroupKey *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->g < y->g ? -1 : x->g > y->g ? 1 : 0;
}

/* Shared slots: a while's state (the while, its body's parameter and root,
 * its condition's parameter), a conditional's result and its branch roots,
 * and the members of one shard_as / shard_like group. */
static IrStatus make_groups(Prop *p)
{
    int32_t ngk = 0;
    for (int32_t g = 0; g < p->n; g++) {
        IrInstr *x = prop_ins(p, g);
        if (x->op == OP_WHILE && x->ncalled >= 2) {
            unite_instrs(p, g, param_gid(p, x->called[1], 0));
            unite_instrs(p, g, root_gid(p, x->called[1]));
            unite_instrs(p, g, param_gid(p, x->called[0], 0));
        }
        if (x->op == OP_CONDITIONAL)
            for (int32_t b = 0; b < x->ncalled; b++)
                unite_instrs(p, g, root_gid(p, x->called[b]));
        if (x->sharding && x->sharding->shard_group)
            ngk++;
    }
    if (ngk > 0) {
        GroupKey *k = ts_malloc((size_t)ngk * sizeof *k);
        NEED(k);
        int32_t n = 0;
        for (int32_t g = 0; g < p->n; g++) {
            IrInstr *x = prop_ins(p, g);
            if (x->sharding && x->sharding->shard_group)
                k[n++] = (GroupKey){x->sharding->shard_group_id, g};
        }
        qsort(k, (size_t)n, sizeof *k, cmp_group);
        for (int32_t i = 1; i < n; i++)
            if (k[i].id == k[i - 1].id)
                unite_instrs(p, k[i - 1].g, k[i].g);
        ts_free(k);
    }
    for (int32_t s = 0; s < p->nslot; s++)
        p->rep[s] = find(p->rep, s);
    /* Members of groups of more than one slot, by representative. */
    NEED(p->mstart = ts_calloc((size_t)p->nslot + 2, sizeof(int32_t)));
    for (int32_t s = 0; s < p->nslot; s++)
        p->mstart[p->rep[s] + 1]++;
    for (int32_t s = 0; s < p->nslot; s++)
        if (p->mstart[s + 1] == 1)
            p->mstart[s + 1] = 0;
    for (int32_t s = 0; s < p->nslot; s++)
        p->mstart[s + 1] += p->mstart[s];
    NEED(p->mlist = ts_malloc(((size_t)p->mstart[p->nslot] + 1) * sizeof(int32_t)));
    int32_t *fill = ts_malloc(((size_t)p->nslot + 1) * sizeof(int32_t));
    NEED(fill);
    memcpy(fill, p->mstart, ((size_t)p->nslot + 1) * sizeof(int32_t));
    for (int32_t g = 0; g < p->n; g++)
        for (int32_t l = 0; l < prop_nleaf(p, g); l++) {
            int32_t r = p->rep[p->sbase[g] + l];
            if (p->mstart[r + 1] > p->mstart[r])
                p->mlist[fill[r]++] = g;
        }
    ts_free(fill);
    return IR_OK;
}

static bool annotated(const IrInstr *x)
{
    return x->sharding && !x->sharding->unknown;
}

/* Load user annotations into their slots (fixed). Slots that share a group
 * must agree: a while's state annotated two different ways cannot be
 * resharded inside the loop, so that is an input error. An unannotated
 * SPMDFullToShardShape is manual by definition. */
static IrStatus load_annotations(Prop *p)
{
    IrModule *m = p->m;
    for (int32_t g = 0; g < p->n; g++) {
        IrInstr *x = prop_ins(p, g);
        if (!annotated(x)) {
            if (prop_is_custom(x, "SPMDFullToShardShape"))
                for (int32_t l = 0; l < prop_nleaf(p, g); l++)
                    if (ir_type_is_array(prop_lshape(p, g, l)->type))
                        p->val[p->rep[p->sbase[g] + l]] = p->manual;
            continue;
        }
        const IrSharding *s = x->sharding;
        /* A tuple sharding that does not fit the shape (XLA's outfeed
         * carries the sharding of its data on a token) fixes no slot; the
         * final validation decides whether it is acceptable. */
        if (s->kind == SHD_TUPLE && (s->ntuple != prop_nleaf(p, g) || x->shape.type != IR_TUPLE))
            continue;
        for (int32_t l = 0; l < prop_nleaf(p, g); l++) {
            const IrSharding *ls = shd_leaf(s, &x->shape, l);
            if (!ls || ls->kind == SHD_TUPLE)
                return ir_error(p->d, IR_EINPUT, m->file, m->src, x->pos,
                                "sharding of '%s' nests tuples; XLA lists tuple leaves flat",
                                x->name);
            int32_t r = p->rep[p->sbase[g] + l];
            if (p->fixed[r] && !ir_sharding_equal(p->val[r], ls)) {
                char *a = ir_sharding_str(p->val[r]), *b = ir_sharding_str(ls);
                IrStatus st = ir_error(p->d, IR_EINPUT, m->file, m->src, x->pos,
                                       "sharding %s of '%s' contradicts %s given to a value it "
                                       "must share (while loop state, conditional result or "
                                       "shard group)",
                                       b ? b : "?", x->name, a ? a : "?");
                ts_free(a);
                ts_free(b);
                return st;
            }
            p->val[r] = ls;
            p->fixed[r] = true;
        }
    }
    return IR_OK;
}

/* Build the final sharding of every instruction (arena of the module) and
 * validate it; assign only when all succeeded, so a failure leaves the
 * module as it was. */
static IrStatus finish(Prop *p)
{
    IrModule *m = p->m;
    IrSharding **out = ts_calloc((size_t)p->n + 1, sizeof *out);
    IrSharding **elems = ts_malloc(((size_t)p->nslot + 1) * sizeof *elems);
    Intern t = {0};
    IrStatus st = IR_OK;
    if (!out || !elems) {
        st = prop_oom(p);
        goto done;
    }
    for (int32_t g = 0; g < p->n && st == IR_OK; g++) {
        IrInstr *x = prop_ins(p, g);
        IrSharding *s;
        ir_arena_reset(p->tmp); /* scratch of one instruction */
        if (annotated(x)) {
            s = x->sharding;
            if (x->shape.type == IR_TUPLE && s->kind != SHD_TUPLE)
                s = shd_broadcast_to_shape(m->arena, s, &x->shape);
        } else if (x->shape.type == IR_TUPLE) {
            int32_t nl = prop_nleaf(p, g), l = 0;
            for (; l < nl; l++) {
                const IrSharding *v = prop_get(p, g, l);
                elems[l] = v ? shd_normalize(p->tmp, v) : shd_replicated(p->tmp);
                if (!elems[l])
                    break;
            }
            s = l == nl ? shd_tuple(m->arena, nl, elems) : NULL;
        } else {
            static const IrSharding repl = {.kind = SHD_REPLICATED};
            const IrSharding *v = prop_get(p, g, 0);
            s = intern(p, &t, m->arena, v ? v : &repl);
        }
        if (!s) {
            st = prop_oom(p);
            break;
        }
        out[g] = s;
        st = ir_sharding_validate(s, &x->shape, p->ndev, p->d, m->file, m->src, x->pos);
    }
    if (st == IR_OK)
        for (int32_t g = 0; g < p->n; g++)
            prop_ins(p, g)->sharding = out[g];
done:
    ts_free(out);
    ts_free(elems);
    ts_free(t.slot);
    return st;
}

static void prop_free(Prop *p)
{
    ts_free(p->kept.slot);
    ir_arena_free(p->keep);
    ir_arena_free(p->tmp);
    ts_free(p->rc);
    ts_free(p->rcof);
    ts_free(p->ibase);
    ts_free(p->gcomp);
    ts_free(p->gfam);
    ts_free(p->sbase);
    ts_free((void *)p->lshape);
    ts_free(p->rep);
    ts_free((void *)p->val);
    ts_free(p->fixed);
    ts_free(p->mstart);
    ts_free(p->mlist);
    ts_free(p->tstart);
    ts_free(p->toff);
    ts_free(p->ustart);
    ts_free(p->ulist);
    ts_free(p->upos);
    ts_free(p->sstart);
    ts_free(p->slist);
    ts_free(p->q);
    ts_free(p->inq);
    ts_free(p->stamp);
    ts_free(p->cand);
}

static IrStatus run(Prop *p)
{
    NEED(p->keep = ir_arena_new());
    NEED(p->tmp = ir_arena_new());
    NEED(p->manual = shd_manual(p->keep));
    TRY(find_reached(p));
    TRY(number(p));
    TRY(link_users(p));
    TRY(make_groups(p));
    TRY(load_annotations(p));
    for (p->phase = 0; p->phase < 2; p->phase++) {
        for (int32_t g = 0; g < p->n; g++)
            push(p, g);
        while (p->qlen > 0) {
            int32_t g = p->q[p->qhead];
            p->qhead = (p->qhead + 1) % p->n;
            p->qlen--;
            p->inq[g] = false;
            TRY(visit(p, g));
        }
    }
    return finish(p);
}

/* See partition.h. Fills every instruction's `sharding` of the reached
 * computations (module arena) or, on error, changes nothing: the status and
 * d say why (IR_ENOMEM, IR_EINPUT for contradicting group annotations or a
 * sharding that does not validate). opt may be NULL (num_partitions). */
IrStatus shd_propagate(IrModule *m, const ShdPropagateOptions *opt, IrDiag *d)
{
    if (!m || m->entry < 0 || m->entry >= m->ncomp)
        return ir_error(d, IR_EINPUT, m ? m->file : NULL, NULL, (IrPos){0, 0},
                        "sharding propagation needs a module with an entry computation");
    Prop p = {.m = m, .d = d};
    p.ndev = opt && opt->num_devices > 0 ? opt->num_devices : m->num_partitions;
    IrStatus st = run(&p);
    prop_free(&p);
    return st;
}
