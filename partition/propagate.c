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
 * opt-barrier move slots around unchanged; every other op has a rule (below,
 * one per family) that turns the sharding of one value into a candidate for
 * another. Slots that must hold one sharding (a while's state in the loop,
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
#include "partition.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */

/* Interned shardings: one copy of each distinct value (see intern()). */
typedef struct Intern {
    IrSharding **slot;
    size_t cap, n;
} Intern;

/* A candidate sharding for slot `leaf` of the instruction being visited. */
typedef struct Cand {
    int32_t leaf;
    int32_t cls;           /* manual class, see cls() */
    int64_t tiles;         /* data tiles */
    int64_t bytes;         /* size of the value it comes from */
    int32_t order;         /* emission order: operands, users, links */
    const IrSharding *s;
} Cand;

typedef struct Prop {
    IrModule *m;
    IrDiag *d;
    int64_t ndev;          /* for validation; <= 0 skips the device check */
    int phase;             /* 0: no forward through broadcast; 1: all rules */
    IrArena *keep;         /* values chosen for slots, interned in `kept` */
    Intern kept;
    IrArena *tmp;          /* scratch of the current visit (reset per visit) */
    const IrSharding *manual;

    /* Reached computations: rc[i] is a module computation index. */
    int32_t nrc;
    int32_t *rc, *rcof;    /* rcof: module index -> reached index or -1 */
    int32_t *ibase;        /* first global instruction id of each, nrc + 1 */
    int32_t n;             /* instructions (global ids 0..n) */
    int32_t *gcomp;        /* global id -> reached index */

    /* Slots. */
    int32_t *sbase;        /* global id -> first slot, n + 1 entries */
    int32_t nslot;
    const IrShape **lshape;
    int32_t *rep;          /* union-find, fully compressed after setup */
    const IrSharding **val;/* per representative slot */
    bool *fixed;           /* per representative slot: a user annotation */
    int32_t *mstart, *mlist; /* instructions sharing a representative slot */

    int32_t *tstart, *toff;  /* leaf offsets of tuple elements per instruction */
    int32_t *ustart, *ulist, *upos; /* users (global id, operand position) */
    int32_t *sstart, *slist; /* call sites (global ids) per reached computation */

    int32_t *q;            /* ring buffer of global ids */
    int32_t qhead, qlen;
    bool *inq;
    uint32_t *stamp;
    uint32_t visit;

    Cand *cand;
    int32_t ncand, capcand;
} Prop;

static IrStatus oom(Prop *p)
{
    return ir_error(p->d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0},
                    "out of memory during sharding propagation");
}

#define NEED(x)                                                                                    \
    do {                                                                                           \
        if (!(x))                                                                                  \
            return oom(p);                                                                         \
    } while (0)

#define TRY(x)                                                                                     \
    do {                                                                                           \
        IrStatus st_ = (x);                                                                        \
        if (st_ != IR_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

static IrComputation *comp_of(const Prop *p, int32_t g)
{
    return p->m->comp[p->rc[p->gcomp[g]]];
}

static IrInstr *ins(const Prop *p, int32_t g)
{
    return &comp_of(p, g)->instr[g - p->ibase[p->gcomp[g]]];
}

static int32_t local(const Prop *p, int32_t g)
{
    return g - p->ibase[p->gcomp[g]];
}

static int32_t opnd_gid(const Prop *p, int32_t g, int32_t k)
{
    return p->ibase[p->gcomp[g]] + ins(p, g)->opnd[k];
}

static int32_t nleaf(const Prop *p, int32_t g)
{
    return p->sbase[g + 1] - p->sbase[g];
}

static const IrSharding *get(const Prop *p, int32_t g, int32_t leaf)
{
    return p->val[p->rep[p->sbase[g] + leaf]];
}

static const IrShape *lshape(const Prop *p, int32_t g, int32_t leaf)
{
    return p->lshape[p->sbase[g] + leaf];
}

/* Leaf offset of tuple element e of instruction g's shape (0 for arrays). */
static int32_t toff(const Prop *p, int32_t g, int64_t e)
{
    int32_t n = p->tstart[g + 1] - p->tstart[g];
    if (e < 0 || e >= n)
        return -1;
    return p->toff[p->tstart[g] + e];
}

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

static bool is_custom(const IrInstr *x, const char *target)
{
    return x->op == OP_CUSTOM_CALL && x->a.custom_call_target &&
           strcmp(x->a.custom_call_target, target) == 0;
}

bool shd_identity_custom_call(const IrInstr *ins, bool *passthrough)
{
    /* `through`: XLA's IsPassthroughCustomOps (annotate_device_placement
     * becomes MoveToHost/MoveToDevice in XLA before it matters). */
    static const struct {
        const char *name;
        bool through;
    } id[] = {
        {"annotate_device_placement", true}, {"MoveToHost", true}, {"MoveToDevice", true},
        {"PinToDevice", true}, {"PinToDeviceSram", true}, {"Pin", false}, {"Unpin", false},
        {"ShardBarrierFrom", false}, {"ShardBarrierTo", false},
        {"xla.sdy.FuncResultSharding", false}, {"SetBound", false},
    };
    const char *t = ins->a.custom_call_target;
    if (ins->op != OP_CUSTOM_CALL || !t || ins->nopnd != 1 || !ir_shape_is_array(&ins->shape))
        return false;
    for (size_t i = 0; i < sizeof id / sizeof id[0]; i++)
        if (strcmp(id[i].name, t) == 0) {
            if (passthrough)
                *passthrough = id[i].through;
            return true;
        }
    return false;
}

/* Sharding, and the identity annotations sharding passes through. */
static bool passes_sharding(const IrInstr *x)
{
    bool through = false;
    return is_custom(x, "Sharding") || (shd_identity_custom_call(x, &through) && through);
}

static bool has(const IrI64List *l, int64_t v)
{
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return true;
    return false;
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

/* Offer `s` (derived from a value of shape `src`) for slot `leaf` of g. */
static IrStatus emit(Prop *p, int32_t g, int32_t leaf, const IrSharding *s, const IrShape *src)
{
    if (!s || leaf < 0 || leaf >= nleaf(p, g))
        return IR_OK;
    int32_t slot = p->sbase[g] + leaf;
    if (p->fixed[p->rep[slot]] || !fits(s, p->lshape[slot]))
        return IR_OK;
    if (p->ncand == p->capcand) {
        int32_t cap = p->capcand ? 2 * p->capcand : 64;
        Cand *c = ts_realloc(p->cand, (size_t)cap * sizeof *c);
        NEED(c);
        p->cand = c;
        p->capcand = cap;
    }
    int64_t bytes = src ? ir_shape_bytes(src) : 0;
    p->cand[p->ncand] = (Cand){.leaf = leaf, .cls = cls(s), .tiles = shd_total_tiles(s),
                               .bytes = bytes, .order = p->ncand, .s = s};
    p->ncand++;
    return IR_OK;
}

/* Offer `s` to every slot of g. */
static IrStatus emit_all(Prop *p, int32_t g, const IrSharding *s, const IrShape *src)
{
    for (int32_t l = 0; l < nleaf(p, g); l++)
        TRY(emit(p, g, l, s, src));
    return IR_OK;
}

/* Offer slots [from, from+n) of instruction `src` to slots [to, to+n) of g. */
static IrStatus emit_slots(Prop *p, int32_t g, int32_t to, int32_t src, int32_t from, int32_t n)
{
    if (to < 0 || from < 0)
        return IR_OK;
    for (int32_t l = 0; l < n; l++) {
        if (from + l >= nleaf(p, src) || to + l >= nleaf(p, g))
            break;
        TRY(emit(p, g, to + l, get(p, src, from + l), lshape(p, src, from + l)));
    }
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* Dimension maps of the op families                                   */
/* ------------------------------------------------------------------ */

/* Reshape: which dim of `from` each dim of `to` inherits its tiles from
 * (map[j] = i, or -1). The dims are cut into groups of equal products:
 * [4,6] -> [24] is one group (a merge), [24] -> [4,6] one group (a split),
 * [8,6] -> [8,2,3] two groups ([8]->[8] unchanged, [6]->[2,3] a split).
 * A tiled dim crosses when its group is one dim to one dim (unchanged), or
 * when it is the major dim of its group and its tile count t divides both
 * that dim and the major dim on the other side: then the t contiguous
 * blocks are the same elements on both sides. [4,6]{2,1} -> [24] gives {2};
 * [4,6]{1,2} -> [24] crosses nothing (the minor dim of a merge); [24]{3} ->
 * [4,6] crosses nothing (3 does not divide 4). Size-1 dims never carry
 * tiles. Uncrossed tiles join the replication (shd_project). */
static void reshape_map(const IrShape *from, const IrShape *to, const IrSharding *s, int64_t *map)
{
    for (int32_t j = 0; j < to->rank; j++)
        map[j] = -1;
    if (s->kind != SHD_TILED || ir_shape_elements(from) != ir_shape_elements(to) ||
        ir_shape_elements(from) <= 0)
        return;
    int32_t i = 0, j = 0;
    for (;;) {
        while (i < from->rank && from->dims[i] == 1)
            i++;
        while (j < to->rank && to->dims[j] == 1)
            j++;
        if (i >= from->rank || j >= to->rank)
            return;
        int32_t i0 = i++, j0 = j++;
        int64_t pa = from->dims[i0], pb = to->dims[j0];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= from->rank)
                    return;
                pa *= from->dims[i++];
            } else {
                if (j >= to->rank)
                    return;
                pb *= to->dims[j++];
            }
        }
        int64_t t = shd_tiles(s, i0);
        if (i - i0 == 1 && j - j0 == 1)
            map[j0] = i0;
        else if (t > 1 && from->dims[i0] % t == 0 && to->dims[j0] % t == 0)
            map[j0] = i0;
    }
}

/* Invert a dim map: inv[map[i]] = i for mapped dims. */
static void invert(const int64_t *map, int32_t n, int64_t *inv, int32_t ninv)
{
    for (int32_t i = 0; i < ninv; i++)
        inv[i] = -1;
    for (int32_t i = 0; i < n; i++)
        if (map[i] >= 0 && map[i] < ninv)
            inv[map[i]] = i;
}

/* Dot: result dims in order are the batch dims, lhs free dims, rhs free
 * dims. out_from[side][r] is the operand dim result dim r comes from (-1
 * for the other side's dims). Contracting dims map nowhere: forward their
 * tiles become replication of the result, backward they stay untiled.
 * Example: lhs f32[8,16]{1,2 tiles} x rhs f32[16,4] (contract 1 with 0):
 * out f32[8,4] from lhs is {1,1,2 replicated} = replicated (Megatron's
 * second matmul needs an all-reduce); from rhs {devices=[1,2]} (column
 * parallel) rhs dim 1 -> out dim 1. */
static bool dot_maps(const IrInstr *x, const IrShape *lhs, const IrShape *rhs, int64_t *from_lhs,
                     int64_t *from_rhs)
{
    const IrDotDnums *dn = &x->a.dot;
    int32_t r = x->shape.rank, o = 0;
    if (dn->lhs_batch.n != dn->rhs_batch.n)
        return false;
    for (int32_t i = 0; i < r; i++)
        from_lhs[i] = from_rhs[i] = -1;
    for (int32_t i = 0; i < dn->lhs_batch.n && o < r; i++, o++) {
        from_lhs[o] = dn->lhs_batch.v[i];
        from_rhs[o] = dn->rhs_batch.v[i];
    }
    for (int32_t d = 0; d < lhs->rank; d++)
        if (!has(&dn->lhs_batch, d) && !has(&dn->lhs_contracting, d)) {
            if (o >= r)
                return false;
            from_lhs[o++] = d;
        }
    for (int32_t d = 0; d < rhs->rank; d++)
        if (!has(&dn->rhs_batch, d) && !has(&dn->rhs_contracting, d)) {
            if (o >= r)
                return false;
            from_rhs[o++] = d;
        }
    return o == r;
}

/* Convolution, mapped like a dot: batch <-> batch and spatial <-> spatial
 * (input side), kernel output feature <-> output feature (kernel side);
 * input feature and kernel input feature are contracted. Grouped
 * convolutions keep only the spatial map (their feature and batch dims mix
 * groups). */
static bool conv_maps(const IrInstr *x, const IrShape *in, const IrShape *k, int64_t *from_in,
                      int64_t *from_k)
{
    const IrConvDnums *c = &x->a.conv;
    int32_t r = x->shape.rank;
    if (!c->present || in->rank != r || k->rank != r)
        return false;
    for (int32_t i = 0; i < r; i++)
        from_in[i] = from_k[i] = -1;
    bool grouped = x->a.feature_group_count > 1 || x->a.batch_group_count > 1;
    if (c->out_batch < 0 || c->out_batch >= r || c->out_feature < 0 || c->out_feature >= r)
        return false;
    if (!grouped) {
        from_in[c->out_batch] = c->in_batch;
        from_k[c->out_feature] = c->k_out_feature;
    }
    for (int32_t s = 0; s < c->nspatial; s++)
        if (c->out_spatial[s] >= 0 && c->out_spatial[s] < r)
            from_in[c->out_spatial[s]] = c->in_spatial[s];
    return true;
}

/* Gather: result dims are offset dims (offset_dims, the kept slice dims of
 * the operand in order) and batch dims (the rest, in order, one per
 * indices dim other than index_vector_dim). from_op[r]: the operand dim of
 * a passthrough offset dim (slice size = whole operand dim) or of an
 * operand batching dim; from_idx[r]: the indices dim of a batch dim.
 * Example: operand f32[8,16], indices s32[4,1], offset_dims={1},
 * collapsed_slice_dims={0}, slice_sizes={1,16}: out f32[4,16]; out dim 0
 * <- indices dim 0, out dim 1 <- operand dim 1 (16 = 16, passthrough). */
static bool gather_maps(const IrInstr *x, const IrShape *op, const IrShape *idx, int64_t *from_op,
                        int64_t *from_idx)
{
    const IrGatherDnums *g = &x->a.gather;
    int32_t r = x->shape.rank;
    for (int32_t i = 0; i < r; i++)
        from_op[i] = from_idx[i] = -1;
    int64_t bdim_of_idx[IR_MAX_RANK + 1];
    for (int32_t i = 0; i <= IR_MAX_RANK; i++)
        bdim_of_idx[i] = -1;
    int32_t ii = 0;
    for (int32_t o = 0; o < r; o++) {
        if (has(&g->offset_dims, o))
            continue;
        while (ii < idx->rank && ii == g->index_vector_dim)
            ii++;
        if (ii >= idx->rank)
            return false;
        from_idx[o] = ii;
        bdim_of_idx[ii] = o;
        ii++;
    }
    int32_t j = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        if (has(&g->collapsed_slice_dims, d) || has(&g->operand_batching_dims, d))
            continue;
        if (j >= g->offset_dims.n)
            return false;
        int64_t o = g->offset_dims.v[j++];
        if (o < 0 || o >= r)
            return false;
        if (d < x->a.slice_sizes.n && x->a.slice_sizes.v[d] == op->dims[d])
            from_op[o] = d;
    }
    for (int32_t i = 0; i < g->operand_batching_dims.n && i < g->start_indices_batching_dims.n;
         i++) {
        int64_t id = g->start_indices_batching_dims.v[i];
        if (id >= 0 && id < idx->rank && bdim_of_idx[id] >= 0)
            from_op[bdim_of_idx[id]] = g->operand_batching_dims.v[i];
    }
    return true;
}

/* Scatter: update dim u -> operand dim for passthrough window dims
 * (update_window_dims in order match the operand dims that are neither
 * inserted nor batching, and the sizes are equal). */
static bool scatter_update_map(const IrInstr *x, const IrShape *op, const IrShape *upd,
                               int64_t *upd_to_op)
{
    const IrScatterDnums *sd = &x->a.scatter;
    for (int32_t i = 0; i < upd->rank; i++)
        upd_to_op[i] = -1;
    int32_t j = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        if (has(&sd->inserted_window_dims, d) || has(&sd->input_batching_dims, d))
            continue;
        if (j >= sd->update_window_dims.n)
            return false;
        int64_t u = sd->update_window_dims.v[j++];
        if (u < 0 || u >= upd->rank)
            return false;
        if (upd->dims[u] == op->dims[d])
            upd_to_op[u] = d;
    }
    return true;
}

/* Dims of `big` whose size differs in `small` (sliced, padded, updated). */
static int32_t changed_dims(const IrShape *a, const IrShape *b, int64_t *dims)
{
    int32_t n = 0;
    for (int32_t i = 0; i < a->rank && i < b->rank; i++)
        if (a->dims[i] != b->dims[i])
            dims[n++] = i;
    return n;
}

/* Pad: dims with any padding (also negative or interior). */
static int32_t padded_dims(const IrInstr *x, const IrShape *opnd, int64_t *dims)
{
    int32_t n = 0;
    for (int32_t i = 0; i < opnd->rank && i < x->shape.rank; i++) {
        bool p = opnd->dims[i] != x->shape.dims[i];
        p |= i < x->a.pad_lo.n && x->a.pad_lo.v[i] != 0;
        p |= i < x->a.pad_hi.n && x->a.pad_hi.v[i] != 0;
        p |= i < x->a.pad_interior.n && x->a.pad_interior.v[i] != 0;
        if (p)
            dims[n++] = i;
    }
    return n;
}

static bool window_dilated(const IrInstr *x)
{
    for (int32_t i = 0; i < x->a.window.rank; i++)
        if (x->a.window.dim[i].lhs_dilate > 1 || x->a.window.dim[i].rhs_dilate > 1)
            return true;
    return false;
}

static bool any_manual(const Prop *p, int32_t g)
{
    for (int32_t l = 0; l < nleaf(p, g); l++) {
        const IrSharding *s = get(p, g, l);
        if (s && cls(s) == 2)
            return true;
    }
    return false;
}

/* ------------------------------------------------------------------ */
/* Forward: result of g from its operand k                             */
/* ------------------------------------------------------------------ */

/* Array rules. `s` is operand k's sharding, `os` its shape. The rule of
 * each family, with a small example (2 devices):
 *   elementwise, copy, convert, map, Sharding custom-call: same sharding
 *     (a scalar operand of select/clamp maps to nothing);
 *   broadcast f32[8] {devices=[2]0,1} dimensions={0} -> f32[8,4]:
 *     {devices=[2,1]0,1} (new dims untiled; only in round 1);
 *   transpose dimensions={1,0} of {devices=[2,1]0,1}: {devices=[1,2]0,1};
 *   reverse: same; reshape: reshape_map;
 *   slice / dynamic-slice / pad / concatenate: same on the dims kept whole,
 *     the others untiled (their tiles join the replication);
 *   dynamic-update-slice: base, update and result alike, with the dims the
 *     update does not cover whole untiled (what the partitioner needs to
 *     update each shard locally);
 *   reduce f32[8,4]{devices=[2,1]} dimensions={0}: f32[4] replicated
 *     ({devices=[1,2]0,1 last_tile_dim_replicate} normalised), for every
 *     output of a variadic reduce;
 *   sort: same on all outputs, sort dim untiled;
 *   dot / convolution / gather / scatter: the maps above;
 *   reduce-window / select-and-scatter: same (not with dilation). */
static IrStatus fwd_array(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = ins(p, g);
    IrArena *a = p->tmp;
    int64_t map[IR_MAX_RANK], map2[IR_MAX_RANK], dims[IR_MAX_RANK];
    int32_t r = x->shape.rank, nd;
    const IrSharding *t = NULL;
    bool out_array = ir_shape_is_array(&x->shape);

    switch (ir_op_family(x->op)) {
    case FAM_ELEMENTWISE:
        if (out_array && os->rank == r)
            return emit(p, g, 0, s, os);
        return IR_OK;
    case FAM_CUSTOM_CALL:
        if (passes_sharding(x) && out_array && os->rank == r && k == 0)
            return emit(p, g, 0, s, os);
        return IR_OK;
    case FAM_BROADCAST:
        if (p->phase == 0 || !out_array || x->a.dimensions.n != os->rank)
            return IR_OK;
        for (int32_t i = 0; i < os->rank; i++)
            if (x->a.dimensions.v[i] < 0 || x->a.dimensions.v[i] >= r)
                return IR_OK;
        NEED(t = shd_insert_dims(a, s, r, x->a.dimensions.v));
        return emit(p, g, 0, t, os);
    case FAM_RESHAPE:
        if (!out_array)
            return IR_OK;
        reshape_map(os, &x->shape, s, map);
        NEED(t = shd_project(a, s, r, map));
        return emit(p, g, 0, t, os);
    case FAM_TRANSPOSE:
        if (!out_array || x->a.dimensions.n != r || os->rank != r)
            return IR_OK;
        NEED(t = shd_transpose(a, s, x->a.dimensions.v));
        return emit(p, g, 0, t, os);
    case FAM_REVERSE:
        return out_array && os->rank == r ? emit(p, g, 0, s, os) : IR_OK;
    case FAM_SLICE:
    case FAM_CONCATENATE:
    case FAM_PAD:
    case FAM_DYNAMIC_SLICE:
        if (!out_array || os->rank != r)
            return IR_OK;
        if (x->op == OP_PAD) {
            if (k != 0)
                return IR_OK;
            nd = padded_dims(x, os, dims);
        } else if (x->op == OP_CONCATENATE) {
            if (x->a.dimensions.n != 1)
                return IR_OK;
            dims[0] = x->a.dimensions.v[0];
            nd = 1;
        } else if (x->op == OP_DYNAMIC_UPDATE_SLICE) {
            if (k > 1 || x->nopnd < 2)
                return IR_OK;
            nd = changed_dims(&x->shape, &ins(p, opnd_gid(p, g, 1))->shape, dims);
        } else {
            if (k != 0)
                return IR_OK;
            nd = changed_dims(&x->shape, os, dims);
        }
        if (nd > 0)
            NEED(t = shd_replicate_dims(a, s, nd, dims));
        return emit(p, g, 0, nd > 0 ? t : s, os);
    case FAM_REDUCE: {
        if (x->op != OP_REDUCE || k >= x->nopnd / 2)
            return IR_OK;
        NEED(t = shd_remove_dims(a, s, x->a.dimensions.n, x->a.dimensions.v));
        return emit_all(p, g, t, os);
    }
    case FAM_REDUCE_WINDOW:
        if (window_dilated(x))
            return IR_OK;
        if (x->op == OP_REDUCE_WINDOW && k < x->nopnd / 2)
            return emit(p, g, out_array ? 0 : k, s, os);
        if (x->op == OP_SELECT_AND_SCATTER && k == 0)
            return emit(p, g, 0, s, os);
        return IR_OK;
    case FAM_SORT: {
        if (x->a.dimensions.n < 1)
            return IR_OK;
        NEED(t = shd_replicate_dims(a, s, 1, x->a.dimensions.v));
        return emit_all(p, g, t, os);
    }
    case FAM_DOT: {
        const IrShape *l = &ins(p, opnd_gid(p, g, 0))->shape, *rr = &ins(p, opnd_gid(p, g, 1))->shape;
        if (!out_array || !dot_maps(x, l, rr, map, map2))
            return IR_OK;
        NEED(t = shd_project(a, s, r, k == 0 ? map : map2));
        return emit(p, g, 0, t, os);
    }
    case FAM_CONVOLUTION: {
        const IrShape *l = &ins(p, opnd_gid(p, g, 0))->shape, *rr = &ins(p, opnd_gid(p, g, 1))->shape;
        if (!out_array || !conv_maps(x, l, rr, map, map2))
            return IR_OK;
        NEED(t = shd_project(a, s, r, k == 0 ? map : map2));
        return emit(p, g, 0, t, os);
    }
    case FAM_GATHER: {
        const IrShape *op0 = &ins(p, opnd_gid(p, g, 0))->shape, *ix = &ins(p, opnd_gid(p, g, 1))->shape;
        if (!out_array || !gather_maps(x, op0, ix, map, map2))
            return IR_OK;
        NEED(t = shd_project(a, s, r, k == 0 ? map : map2));
        return emit(p, g, 0, t, os);
    }
    case FAM_SCATTER: {
        int32_t n = (x->nopnd - 1) / 2;
        if (k < n)
            return emit(p, g, out_array ? 0 : k, s, os);
        if (k <= n || k > 2 * n)
            return IR_OK;
        int32_t j = k - n - 1;
        const IrShape *base = &ins(p, opnd_gid(p, g, j))->shape;
        if (!scatter_update_map(x, base, os, map))
            return IR_OK;
        invert(map, os->rank, map2, base->rank);
        NEED(t = shd_project(a, s, base->rank, map2));
        return emit(p, g, out_array ? 0 : j, t, os);
    }
    default:
        return IR_OK;   /* collectives, fallback ops, other custom-calls */
    }
}

static IrStatus fwd(Prop *p, int32_t g, int32_t k)
{
    IrInstr *x = ins(p, g);
    int32_t o = opnd_gid(p, g, k);
    switch (x->op) {
    case OP_TUPLE:
        return emit_slots(p, g, toff(p, g, k), o, 0, nleaf(p, o));
    case OP_GET_TUPLE_ELEMENT:
        return emit_slots(p, g, 0, o, toff(p, o, x->a.tuple_index), nleaf(p, g));
    case OP_OPTIMIZATION_BARRIER:
    case OP_WHILE:
        return k == 0 ? emit_slots(p, g, 0, o, 0, nleaf(p, g)) : IR_OK;
    case OP_CALL:
    case OP_CONDITIONAL:
        return IR_OK;   /* through the callee: links() */
    default:
        break;
    }
    if (is_custom(x, "SPMDShardToFullShape") || is_custom(x, "SPMDFullToShardShape"))
        return IR_OK;
    if (any_manual(p, o))
        TRY(emit_all(p, g, p->manual, NULL));
    const IrShape *os = lshape(p, o, 0);
    const IrSharding *s = nleaf(p, o) == 1 ? get(p, o, 0) : NULL;
    if (!usable(s, os))
        return IR_OK;
    return fwd_array(p, g, k, s, os);
}

/* ------------------------------------------------------------------ */
/* Backward: operand g (position k of user u) from u                   */
/* ------------------------------------------------------------------ */

/* Array rules, the inverse of the forward ones: broadcast projects (the new
 * dims' tiles join the replication), reduce inserts the reduced dims
 * untiled, a dot/convolution operand takes the result's batch and free
 * tiles with the contracting dims untiled, a gather operand its
 * passthrough dims and the indices the batch dims, a scatter update its
 * passthrough window dims from the result. `s` is u's sharding of the
 * slot that corresponds to operand k. */
static IrStatus bwd_array(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                          const IrShape *us)
{
    IrInstr *x = ins(p, u);
    const IrShape *gs = &ins(p, g)->shape;
    IrArena *a = p->tmp;
    int64_t map[IR_MAX_RANK], map2[IR_MAX_RANK], inv[IR_MAX_RANK], dims[IR_MAX_RANK];
    int32_t gr = gs->rank, nd;
    const IrSharding *t = NULL;

    if (!ir_shape_is_array(gs))
        return IR_OK;
    switch (ir_op_family(x->op)) {
    case FAM_ELEMENTWISE:
        return us->rank == gr ? emit(p, g, 0, s, us) : IR_OK;
    case FAM_CUSTOM_CALL:
        if (passes_sharding(x) && k == 0 && us->rank == gr)
            return emit(p, g, 0, s, us);
        return IR_OK;
    case FAM_BROADCAST:
        if (x->a.dimensions.n != gr)
            return IR_OK;
        for (int32_t i = 0; i < gr; i++)
            if (x->a.dimensions.v[i] < 0 || x->a.dimensions.v[i] >= us->rank)
                return IR_OK;
        NEED(t = shd_project(a, s, gr, x->a.dimensions.v));
        return emit(p, g, 0, t, us);
    case FAM_RESHAPE:
        reshape_map(us, gs, s, map);
        NEED(t = shd_project(a, s, gr, map));
        return emit(p, g, 0, t, us);
    case FAM_TRANSPOSE:
        if (x->a.dimensions.n != gr || us->rank != gr)
            return IR_OK;
        invert(x->a.dimensions.v, gr, inv, gr);
        NEED(t = shd_transpose(a, s, inv));
        return emit(p, g, 0, t, us);
    case FAM_REVERSE:
        return us->rank == gr ? emit(p, g, 0, s, us) : IR_OK;
    case FAM_SLICE:
    case FAM_CONCATENATE:
    case FAM_PAD:
    case FAM_DYNAMIC_SLICE:
        if (us->rank != gr)
            return IR_OK;
        if (x->op == OP_PAD) {
            if (k != 0)
                return IR_OK;
            nd = padded_dims(x, gs, dims);
        } else if (x->op == OP_CONCATENATE) {
            if (x->a.dimensions.n != 1)
                return IR_OK;
            dims[0] = x->a.dimensions.v[0];
            nd = 1;
        } else if (x->op == OP_DYNAMIC_UPDATE_SLICE) {
            if (k > 1 || x->nopnd < 2)
                return IR_OK;
            nd = changed_dims(us, &ins(p, opnd_gid(p, u, 1))->shape, dims);
        } else {
            if (k != 0)
                return IR_OK;
            nd = changed_dims(us, gs, dims);
        }
        if (nd > 0)
            NEED(t = shd_replicate_dims(a, s, nd, dims));
        return emit(p, g, 0, nd > 0 ? t : s, us);
    case FAM_REDUCE: {
        if (x->op != OP_REDUCE || k >= x->nopnd / 2)
            return IR_OK;
        int32_t n = 0;
        for (int32_t d = 0; d < gr; d++)
            if (!has(&x->a.dimensions, d))
                map[n++] = d;
        if (n != us->rank)
            return IR_OK;
        NEED(t = shd_insert_dims(a, s, gr, map));
        return emit(p, g, 0, t, us);
    }
    case FAM_REDUCE_WINDOW:
        if (window_dilated(x) || us->rank != gr)
            return IR_OK;
        if ((x->op == OP_REDUCE_WINDOW && k < x->nopnd / 2) ||
            (x->op == OP_SELECT_AND_SCATTER && k == 0))
            return emit(p, g, 0, s, us);
        return IR_OK;
    case FAM_SORT:
        if (x->a.dimensions.n < 1 || us->rank != gr)
            return IR_OK;
        NEED(t = shd_replicate_dims(a, s, 1, x->a.dimensions.v));
        return emit(p, g, 0, t, us);
    case FAM_DOT:
    case FAM_CONVOLUTION: {
        const IrShape *l = &ins(p, opnd_gid(p, u, 0))->shape, *r = &ins(p, opnd_gid(p, u, 1))->shape;
        bool ok = x->op == OP_DOT ? dot_maps(x, l, r, map, map2) : conv_maps(x, l, r, map, map2);
        if (!ok || k > 1)
            return IR_OK;
        invert(k == 0 ? map : map2, us->rank, inv, gr);
        NEED(t = shd_project(a, s, gr, inv));
        return emit(p, g, 0, t, us);
    }
    case FAM_GATHER: {
        const IrShape *op0 = &ins(p, opnd_gid(p, u, 0))->shape, *ix = &ins(p, opnd_gid(p, u, 1))->shape;
        if (k > 1 || !gather_maps(x, op0, ix, map, map2))
            return IR_OK;
        invert(k == 0 ? map : map2, us->rank, inv, gr);
        NEED(t = shd_project(a, s, gr, inv));
        return emit(p, g, 0, t, us);
    }
    case FAM_SCATTER: {
        int32_t n = (x->nopnd - 1) / 2;
        if (k < n)
            return emit(p, g, 0, s, us);
        if (k <= n || k > 2 * n)
            return IR_OK;
        if (!scatter_update_map(x, us, gs, map))
            return IR_OK;
        NEED(t = shd_project(a, s, gr, map));
        return emit(p, g, 0, t, us);
    }
    default:
        return IR_OK;
    }
}

/* The slot of user u that operand position k corresponds to, for ops with
 * several outputs (variadic reduce, sort, scatter, reduce-window). */
static int32_t user_slot(const Prop *p, int32_t u, int32_t k)
{
    IrInstr *x = ins(p, u);
    if (nleaf(p, u) == 1)
        return 0;
    switch (x->op) {
    case OP_REDUCE:
    case OP_REDUCE_WINDOW:
        return k < x->nopnd / 2 ? k : -1;
    case OP_SORT:
        return k;
    case OP_SCATTER: {
        int32_t n = (x->nopnd - 1) / 2;
        return k < n ? k : k > n ? k - n - 1 : -1;
    }
    default:
        return -1;
    }
}

static IrStatus bwd(Prop *p, int32_t u, int32_t k, int32_t g)
{
    IrInstr *x = ins(p, u);
    switch (x->op) {
    case OP_TUPLE:
        return emit_slots(p, g, 0, u, toff(p, u, k), nleaf(p, g));
    case OP_GET_TUPLE_ELEMENT:
        return emit_slots(p, g, toff(p, g, x->a.tuple_index), u, 0, nleaf(p, u));
    case OP_OPTIMIZATION_BARRIER:
    case OP_WHILE:
        return k == 0 ? emit_slots(p, g, 0, u, 0, nleaf(p, g)) : IR_OK;
    case OP_CALL:
    case OP_CONDITIONAL: {
        int32_t b = x->op == OP_CALL ? 0 : k - 1, pn = x->op == OP_CALL ? k : 0;
        if (b < 0 || b >= x->ncalled)
            return IR_OK;
        int32_t rci = p->rcof[x->called[b]];
        IrComputation *c = p->m->comp[x->called[b]];
        if (rci < 0 || pn >= c->nparam || c->param[pn] < 0)
            return IR_OK;
        return emit_slots(p, g, 0, p->ibase[rci] + c->param[pn], 0, nleaf(p, g));
    }
    default:
        break;
    }
    if (is_custom(x, "SPMDFullToShardShape"))
        return IR_OK;
    if (is_custom(x, "SPMDShardToFullShape"))
        return k == 0 ? emit_all(p, g, p->manual, NULL) : IR_OK;
    if (any_manual(p, u))
        TRY(emit_all(p, g, p->manual, NULL));
    int32_t l = user_slot(p, u, k);
    if (l < 0)
        return IR_OK;
    const IrSharding *s = get(p, u, l);
    const IrShape *us = lshape(p, u, l);
    if (!usable(s, us))
        return IR_OK;
    return bwd_array(p, u, k, g, s, us);
}

/* ------------------------------------------------------------------ */
/* Links between computations                                          */
/* ------------------------------------------------------------------ */

/* Call and conditional move values through their callees: a callee's
 * parameter takes the call site's operand (call: operand i -> parameter i;
 * conditional: operand b+1 -> branch b's parameter), a call's result takes
 * its callee's root and the callee's root the call's result. While state
 * and conditional results are shared slots (groups), not links. */
static IrStatus links(Prop *p, int32_t g)
{
    IrInstr *x = ins(p, g);
    IrComputation *c = comp_of(p, g);
    int32_t rci = p->gcomp[g];
    bool is_root = local(p, g) == c->root;
    if (x->op == OP_CALL && x->ncalled > 0 && p->rcof[x->called[0]] >= 0) {
        IrComputation *cc = p->m->comp[x->called[0]];
        if (cc->root >= 0)
            TRY(emit_slots(p, g, 0, p->ibase[p->rcof[x->called[0]]] + cc->root, 0, nleaf(p, g)));
    }
    if (x->op != OP_PARAMETER && !is_root)
        return IR_OK;
    for (int32_t i = p->sstart[rci]; i < p->sstart[rci + 1]; i++) {
        int32_t sg = p->slist[i];
        IrInstr *site = ins(p, sg);
        if (site->op == OP_CALL && x->op == OP_PARAMETER) {
            int64_t pn = x->a.parameter_number;
            if (pn >= 0 && pn < site->nopnd)
                TRY(emit_slots(p, g, 0, opnd_gid(p, sg, (int32_t)pn), 0, nleaf(p, g)));
        }
        if (site->op == OP_CALL && is_root)
            TRY(emit_slots(p, g, 0, sg, 0, nleaf(p, g)));
        if (site->op == OP_CONDITIONAL && x->op == OP_PARAMETER && x->a.parameter_number == 0)
            for (int32_t b = 0; b < site->ncalled; b++)
                if (site->called[b] == p->rc[rci] && b + 1 < site->nopnd)
                    TRY(emit_slots(p, g, 0, opnd_gid(p, sg, b + 1), 0, nleaf(p, g)));
    }
    return IR_OK;
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
    for (int64_t i = 0; i < s->ndevices; i++)
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
                return oom(p);
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
                return oom(p);
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
    IrInstr *x = ins(p, y);
    for (int32_t k = 0; k < x->nopnd; k++)
        push(p, opnd_gid(p, y, k));
    for (int32_t i = p->ustart[y]; i < p->ustart[y + 1]; i++) {
        int32_t u = p->ulist[i], k = p->upos[i];
        IrInstr *ux = ins(p, u);
        push(p, u);
        if (ux->op == OP_CALL && ux->ncalled > 0)
            push_param(p, ux->called[0], k);
        if (ux->op == OP_CONDITIONAL && k >= 1 && k - 1 < ux->ncalled)
            push_param(p, ux->called[k - 1], 0);
    }
    if (x->op == OP_CALL || x->op == OP_WHILE || x->op == OP_CONDITIONAL)
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
    IrComputation *c = comp_of(p, y);
    int32_t rci = p->gcomp[y];
    if (x->op == OP_PARAMETER || local(p, y) == c->root)
        for (int32_t i = p->sstart[rci]; i < p->sstart[rci + 1]; i++) {
            int32_t sg = p->slist[i];
            IrInstr *site = ins(p, sg);
            push(p, sg);
            if (x->op != OP_PARAMETER)
                continue;
            if (site->op == OP_CALL && x->a.parameter_number < site->nopnd)
                push(p, opnd_gid(p, sg, (int32_t)x->a.parameter_number));
            if (site->op == OP_CONDITIONAL)
                for (int32_t b = 0; b < site->ncalled; b++)
                    if (site->called[b] == p->rc[rci] && b + 1 < site->nopnd)
                        push(p, opnd_gid(p, sg, b + 1));
        }
}

static IrStatus visit(Prop *p, int32_t g)
{
    int32_t nl = nleaf(p, g);
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
    IrInstr *x = ins(p, g);
    p->ncand = 0;
    for (int32_t k = 0; k < x->nopnd; k++)
        TRY(fwd(p, g, k));
    for (int32_t i = p->ustart[g]; i < p->ustart[g + 1]; i++)
        TRY(bwd(p, p->ulist[i], p->upos[i], g));
    TRY(links(p, g));
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
            if (x->op != OP_CALL && x->op != OP_WHILE && x->op != OP_CONDITIONAL)
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
        IrInstr *x = ins(p, g);
        IrComputation *c = comp_of(p, g);
        for (int32_t k = 0; k < x->nopnd; k++) {
            if (x->opnd[k] < 0 || x->opnd[k] >= c->ninstr)
                return ir_error(p->d, IR_EINPUT, m->file, m->src, x->pos,
                                "instruction '%s' has an operand that does not exist", x->name);
            p->ustart[opnd_gid(p, g, k) + 1]++;
            nu++;
        }
        if (x->op == OP_CALL || x->op == OP_WHILE || x->op == OP_CONDITIONAL)
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
        return oom(p);
    }
    memcpy(ufill, p->ustart, nn * sizeof(int32_t));
    memcpy(sfill, p->sstart, ((size_t)p->nrc + 1) * sizeof(int32_t));
    for (int32_t g = 0; g < p->n; g++) {
        IrInstr *x = ins(p, g);
        for (int32_t k = 0; k < x->nopnd; k++) {
            int32_t o = opnd_gid(p, g, k);
            p->ulist[ufill[o]] = g;
            p->upos[ufill[o]++] = k;
        }
        if (x->op == OP_CALL || x->op == OP_WHILE || x->op == OP_CONDITIONAL)
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
    if (g < 0 || h < 0 || nleaf(p, g) != nleaf(p, h))
        return;
    for (int32_t l = 0; l < nleaf(p, g); l++)
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
        IrInstr *x = ins(p, g);
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
            IrInstr *x = ins(p, g);
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
        for (int32_t l = 0; l < nleaf(p, g); l++) {
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
        IrInstr *x = ins(p, g);
        if (!annotated(x)) {
            if (is_custom(x, "SPMDFullToShardShape"))
                for (int32_t l = 0; l < nleaf(p, g); l++)
                    if (ir_type_is_array(lshape(p, g, l)->type))
                        p->val[p->rep[p->sbase[g] + l]] = p->manual;
            continue;
        }
        const IrSharding *s = x->sharding;
        /* A tuple sharding that does not fit the shape (XLA's outfeed
         * carries the sharding of its data on a token) fixes no slot; the
         * final validation decides whether it is acceptable. */
        if (s->kind == SHD_TUPLE && (s->ntuple != nleaf(p, g) || x->shape.type != IR_TUPLE))
            continue;
        for (int32_t l = 0; l < nleaf(p, g); l++) {
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
        st = oom(p);
        goto done;
    }
    for (int32_t g = 0; g < p->n && st == IR_OK; g++) {
        IrInstr *x = ins(p, g);
        IrSharding *s;
        ir_arena_reset(p->tmp); /* scratch of one instruction */
        if (annotated(x)) {
            s = x->sharding;
            if (x->shape.type == IR_TUPLE && s->kind != SHD_TUPLE)
                s = shd_broadcast_to_shape(m->arena, s, &x->shape);
        } else if (x->shape.type == IR_TUPLE) {
            int32_t nl = nleaf(p, g), l = 0;
            for (; l < nl; l++) {
                const IrSharding *v = get(p, g, l);
                elems[l] = v ? shd_normalize(p->tmp, v) : shd_replicated(p->tmp);
                if (!elems[l])
                    break;
            }
            s = l == nl ? shd_tuple(m->arena, nl, elems) : NULL;
        } else {
            static const IrSharding repl = {.kind = SHD_REPLICATED};
            const IrSharding *v = get(p, g, 0);
            s = intern(p, &t, m->arena, v ? v : &repl);
        }
        if (!s) {
            st = oom(p);
            break;
        }
        out[g] = s;
        st = ir_sharding_validate(s, &x->shape, p->ndev, p->d, m->file, m->src, x->pos);
    }
    if (st == IR_OK)
        for (int32_t g = 0; g < p->n; g++)
            ins(p, g)->sharding = out[g];
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
