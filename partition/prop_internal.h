/*
 * prop_internal.h: what the parts of sharding propagation share, private
 * to them (propagate.c and the prop_*.c rule files); partition.h stays the
 * layer's public header.
 *
 * propagate.c is the worklist: the state (Prop), the slots, the candidates
 * the rules offer (prop_emit*) and the conflict rule that picks one. Each
 * prop_FAMILY.c holds the forward (operands -> result) and backward
 * (result -> operands) rules of one op family side by side, with the
 * dimension maps they share, and exports one PropRule; propagate.c maps
 * each IrOpFamily (hlo_ops.def) to its rule.
 *
 * Files:
 *   prop_elementwise.c  elementwise ops and reverse: the same sharding both ways
 *   prop_reshape.c      broadcast, reshape/bitcast, transpose, bitcast-convert
 *   prop_slice.c        slice, dynamic-slice/-update-slice, pad, concatenate
 *   prop_dot.c          dot, and the two-operand rules dot, convolution and gather share
 *   prop_conv.c         convolution
 *   prop_reduce.c       reduce
 *   prop_window.c       reduce-window, select-and-scatter
 *   prop_gather.c       gather, scatter
 *   prop_sort.c         sort
 *   prop_local.c        fft, topk, cholesky, triangular-solve: trailing dims whole
 *   prop_norm.c         batch-norm-training, -inference, -grad
 *   prop_ragged.c       ragged-dot (and shd_ragged_dot_maps, which spmd_ragged.c uses)
 *   prop_control.c      tuple, get-tuple-element, opt-barrier, while, call, conditional
 *   prop_custom.c       custom-calls (Sharding, the SPMD shape ops, the identity annotations)
 * Collectives and the fallback ops have no rule: nothing crosses them.
 */
#ifndef TESSEL_PARTITION_PROP_INTERNAL_H
#define TESSEL_PARTITION_PROP_INTERNAL_H

#include "partition.h"

#include <string.h>

/* ---- the state (propagate.c) ---- */

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
    uint8_t *gfam;         /* global id -> IrOpFamily of its op: a visit picks the rule
                            * of every user by it without loading the user's IrInstr */

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
    int32_t ncand;
    int64_t capcand;
} Prop;

#define NEED(x)                                                                                    \
    do {                                                                                           \
        if (!(x))                                                                                  \
            return prop_oom(p);                                                                    \
    } while (0)

#define TRY(x)                                                                                     \
    do {                                                                                           \
        IrStatus st_ = (x);                                                                        \
        if (st_ != IR_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

/* ---- instructions and slots by global id ---- */

static inline IrComputation *prop_comp_of(const Prop *p, int32_t g)
{
    return p->m->comp[p->rc[p->gcomp[g]]];
}

static inline IrInstr *prop_ins(const Prop *p, int32_t g)
{
    return &prop_comp_of(p, g)->instr[g - p->ibase[p->gcomp[g]]];
}

/* Index of g in its computation. */
static inline int32_t prop_local(const Prop *p, int32_t g)
{
    return g - p->ibase[p->gcomp[g]];
}

/* Global id of operand k of g. */
static inline int32_t prop_opnd(const Prop *p, int32_t g, int32_t k)
{
    return p->ibase[p->gcomp[g]] + prop_ins(p, g)->opnd[k];
}

static inline int32_t prop_nleaf(const Prop *p, int32_t g)
{
    return p->sbase[g + 1] - p->sbase[g];
}

/* The current sharding of slot `leaf` of g, or NULL. */
static inline const IrSharding *prop_get(const Prop *p, int32_t g, int32_t leaf)
{
    return p->val[p->rep[p->sbase[g] + leaf]];
}

static inline const IrShape *prop_lshape(const Prop *p, int32_t g, int32_t leaf)
{
    return p->lshape[p->sbase[g] + leaf];
}

/* Leaf offset of tuple element e of instruction g's shape (0 for arrays). */
static inline int32_t prop_toff(const Prop *p, int32_t g, int64_t e)
{
    int32_t n = p->tstart[g + 1] - p->tstart[g];
    if (e < 0 || e >= n)
        return -1;
    return p->toff[p->tstart[g] + e];
}

/* ---- small helpers of the rules ---- */

/* Ops whose operands feed their (first) callee's parameters in order and
 * whose callee root gives their result: call, fusion, async-start (root
 * -> element 1 of the async tuple). */
static inline bool prop_call_like(IrOpcode op)
{
    return op == OP_CALL || op == OP_FUSION || op == OP_ASYNC_START;
}

/* Ops with callees whose values are linked to the call site. */
static inline bool prop_links_callees(IrOpcode op)
{
    return prop_call_like(op) || op == OP_WHILE || op == OP_CONDITIONAL;
}

static inline bool prop_has(const IrI64List *l, int64_t v)
{
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return true;
    return false;
}

/* Invert a dim map: inv[map[i]] = i for mapped dims. */
static inline void prop_invert(const int64_t *map, int32_t n, int64_t *inv, int32_t ninv)
{
    for (int32_t i = 0; i < ninv; i++)
        inv[i] = -1;
    for (int32_t i = 0; i < n; i++)
        if (map[i] >= 0 && map[i] < ninv)
            inv[map[i]] = i;
}

static inline bool prop_is_custom(const IrInstr *x, const char *target)
{
    return x->op == OP_CUSTOM_CALL && x->a.x->custom_call_target &&
           strcmp(x->a.x->custom_call_target, target) == 0;
}

/* ---- propagate.c: candidates ---- */

/* The out-of-memory error of the pass. */
IrStatus prop_oom(Prop *p);
/* Offer `s` (derived from a value of shape `src`, NULL for none) for slot
 * `leaf` of g; ignored when the slot is fixed or `s` does not fit it. */
IrStatus prop_emit(Prop *p, int32_t g, int32_t leaf, const IrSharding *s, const IrShape *src);
/* Offer `s` to every slot of g. */
IrStatus prop_emit_all(Prop *p, int32_t g, const IrSharding *s, const IrShape *src);
/* Offer slots [from, from+n) of instruction `src` to slots [to, to+n) of g. */
IrStatus prop_emit_slots(Prop *p, int32_t g, int32_t to, int32_t src, int32_t from, int32_t n);

/* ---- the rules of a family ---- */

/* Forward: the result of g from its operand k, whose sharding `s` (usable
 * for its array shape `os`) is known. */
typedef IrStatus (*PropFwd)(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os);
/* Backward: operand g (position k of user u, an array) from u's sharding
 * `s` of the slot that corresponds to k, of shape `us`. */
typedef IrStatus (*PropBwd)(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                            const IrShape *us);

/* A family's rules; any may be NULL (no candidate). The `first` rules run
 * before everything else, on the whole value: they move tuple slots
 * unchanged (control flow) or stop manual shardings at the edge of a
 * manual region; *done says the array rules and the manual spread are not
 * to run. `slot` maps operand k of a multi-output user u to the slot of u
 * it corresponds to (-1: none). */
typedef struct PropRule {
    IrStatus (*fwd_first)(Prop *p, int32_t g, int32_t k, bool *done);
    IrStatus (*bwd_first)(Prop *p, int32_t u, int32_t k, int32_t g, bool *done);
    PropFwd fwd;
    PropBwd bwd;
    int32_t (*slot)(const Prop *p, int32_t u, int32_t k);
} PropRule;

/* prop_elementwise.c */
extern const PropRule prop_rule_elementwise;
/* prop_reshape.c */
extern const PropRule prop_rule_broadcast, prop_rule_reshape, prop_rule_transpose, prop_rule_bitcast_convert;
/* prop_slice.c */
extern const PropRule prop_rule_slice;
/* prop_dot.c */
extern const PropRule prop_rule_dot;
/* Dimension maps of a two-operand op: from_a[r] / from_b[r] is the dim of
 * operand 0 / 1 that result dim r comes from (-1: none); false when the
 * attributes do not give a map. */
typedef bool (*PropMaps)(const IrInstr *x, const IrShape *a, const IrShape *b, int64_t *from_a,
                         int64_t *from_b);
/* The forward and backward rules of dot, convolution and gather: operand
 * 0 and 1 project through their map. */
IrStatus prop_maps_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os, PropMaps maps);
IrStatus prop_maps_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s, const IrShape *us,
                       PropMaps maps);
/* prop_conv.c */
extern const PropRule prop_rule_convolution;
/* prop_reduce.c */
extern const PropRule prop_rule_reduce;
/* prop_window.c */
extern const PropRule prop_rule_window;
/* prop_gather.c */
extern const PropRule prop_rule_gather, prop_rule_scatter;
/* prop_sort.c */
extern const PropRule prop_rule_sort;
/* prop_local.c */
extern const PropRule prop_rule_local;
/* prop_norm.c */
extern const PropRule prop_rule_batch_norm;
/* prop_ragged.c */
extern const PropRule prop_rule_ragged_dot;
/* prop_control.c */
extern const PropRule prop_rule_control; /* FAM_TUPLE and FAM_CONTROL */
/* Call and conditional move values through their callees (see there). */
IrStatus prop_links(Prop *p, int32_t g);
/* prop_custom.c */
extern const PropRule prop_rule_custom_call;

#endif
