/*
 * spmd_why.c: why each collective is there. The partitioner keeps a
 * reason (Spmd.why) while it emits collectives: resharding an operand for
 * its user (spmd_operand_as), moving a computation's root to its result
 * sharding, or a handler's result to the value's sharding (spmd_reshard).
 * When a collective is recorded for the plan (note_collective) its
 * reason is that one, finished with what the collective does to the
 * value; a collective emitted with no reason set is the op's own rule:
 * partial results combined (all-reduce, reduce-scatter), a halo exchanged
 * (collective-permute under a windowed op), or a value gathered. An
 * operand's reason says what its user does with the dim it cannot take
 * split (spmd_why_need.c); the "avoid" line is costed by the same bytes
 * model for every op: 0 bytes on the edge a resharded operand, result or
 * output would not need, and for partial results the bytes of keeping the
 * reduced dims whole (spmd_reshard_cost), given only where that is below
 * the collective's.
 *
 * Example, Megatron's MLP with w1 tiled on dim 1 and w2 on dim 0 over 2
 * devices: dot.2 contracts dim 1 of h, which is tiled over 2 devices, so
 * each device holds a partial sum of f32[8,16] and the all-reduce moves
 * 2(n-1)/n of its 512 bytes: "dot dot.2 contracts dim 1 of h, which is
 * tiled over 2 devices: partial sums are all-reduced".
 */
#include "spmd_internal.h"

#include <string.h>

static const char *const KIND_NAMES[] = {
    [SPMD_WHY_UNKNOWN] = "unknown", [SPMD_WHY_OPERAND] = "operand", [SPMD_WHY_PARTIAL] = "partial",
    [SPMD_WHY_RESULT] = "result",   [SPMD_WHY_OUTPUT] = "output",   [SPMD_WHY_HALO] = "halo",
    [SPMD_WHY_RULE] = "rule",
};

const char *spmd_why_kind_name(SpmdWhyKind k)
{
    return (unsigned)k < sizeof KIND_NAMES / sizeof *KIND_NAMES ? KIND_NAMES[k] : "unknown";
}

bool spmd_why_kind_from_name(const char *s, size_t n, SpmdWhyKind *k)
{
    for (size_t j = 0; j < sizeof KIND_NAMES / sizeof *KIND_NAMES; j++)
        if (strlen(KIND_NAMES[j]) == n && memcmp(KIND_NAMES[j], s, n) == 0) {
            *k = (SpmdWhyKind)j;
            return true;
        }
    *k = SPMD_WHY_UNKNOWN;
    return false;
}

/* b's text in the scratch arena (NULL on OOM; b emptied). */
static const char *scratch_text(PComp *pc, IrStrBuf *b)
{
    char *t = ir_sb_take(b);
    const char *r = t ? ir_strdup(spmd_tmp(pc), t) : NULL;
    ts_free(t);
    return r;
}

/* Install a reason; the previous one is returned for the caller to put back. */
static SpmdWhy install(PComp *pc, SpmdWhyKind k, IrStrBuf *text, IrStrBuf *avoid)
{
    SpmdWhy old = pc->sp->why;
    pc->sp->why = (SpmdWhy){.kind = k, .text = scratch_text(pc, text), .avoid = avoid ? scratch_text(pc, avoid) : NULL};
    return old;
}

static void instr_words(IrStrBuf *b, const IrInstr *ins)
{
    ir_sb_printf(b, "%s %s", ir_op_name(ins->op), ins->name);
}

SpmdWhy spmd_why_operand(PComp *pc, int32_t i, int32_t o, const IrSharding *to)
{
    const IrInstr *ins = &pc->sc->instr[i], *op = &pc->sc->instr[o];
    IrStrBuf t = {0}, a = {0};
    ir_sb_printf(&t, "operand %s is ", op->name);
    shd_describe(&t, pc->shd[o]);
    ir_sb_puts(&t, " but ");
    instr_words(&t, ins);
    ir_sb_puts(&t, " needs it ");
    shd_describe(&t, to);
    spmd_why_need(pc, &t, ins, o, to);
    char *c = shd_canonical_str(to);
    ir_sb_printf(&a, "%s with sharding=%s would make this edge local", op->name, c ? c : "?");
    if (op->op == OP_PARAMETER)
        ir_sb_printf(&a, " (a parameter: the caller can pass it so)");
    else if (op->op == OP_CONSTANT || op->op == OP_IOTA)
        ir_sb_printf(&a, " (%s %s: built so at no cost)", op->op == OP_IOTA ? "an" : "a", ir_op_name(op->op));
    else
        ir_sb_printf(&a, " (if %s %s can compute it so)", ir_op_name(op->op), op->name);
    ts_free(c);
    return install(pc, SPMD_WHY_OPERAND, &t, &a);
}

SpmdWhy spmd_why_output(PComp *pc, int32_t root, const IrSharding *from, const IrSharding *to)
{
    const IrInstr *ins = &pc->sc->instr[root];
    IrStrBuf t = {0}, a = {0};
    ir_sb_printf(&t, "%s's result %s is ", pc->sc->name, ins->name);
    shd_describe(&t, from);
    ir_sb_puts(&t, " but the result must be ");
    shd_describe(&t, to);
    char *c = shd_canonical_str(to);
    ir_sb_printf(&a, "%s with sharding=%s would make the result local", ins->name, c ? c : "?");
    ts_free(c);
    return install(pc, SPMD_WHY_OUTPUT, &t, &a);
}

SpmdWhy spmd_why_result(PComp *pc, const IrSharding *from, const IrSharding *to)
{
    SpmdWhy old = pc->sp->why;
    if (old.kind != SPMD_WHY_UNKNOWN || pc->cur < 0)
        return old;
    const IrInstr *ins = &pc->sc->instr[pc->cur];
    IrStrBuf t = {0}, a = {0};
    ir_sb_puts(&t, "the rule of ");
    instr_words(&t, ins);
    ir_sb_puts(&t, " computes it ");
    shd_describe(&t, from);
    ir_sb_puts(&t, " but its sharding is ");
    shd_describe(&t, to);
    char *c = shd_canonical_str(from);
    ir_sb_printf(&a, "%s with sharding=%s would keep it local (if its users take it so)", ins->name,
                 c ? c : "?");
    ts_free(c);
    return install(pc, SPMD_WHY_RESULT, &t, &a);
}

void spmd_why_restore(PComp *pc, SpmdWhy old)
{
    pc->sp->why = old;
}

static bool combining(IrOpcode op)
{
    return op == OP_ALL_REDUCE || op == OP_ALL_REDUCE_START || op == OP_REDUCE_SCATTER;
}

static bool windowed(IrOpcode op)
{
    return op == OP_CONVOLUTION || op == OP_REDUCE_WINDOW || op == OP_SELECT_AND_SCATTER;
}

/* The first of `dims` of source operand k of ins that its sharding tiles:
 * *d and *t set, or false. */
static bool tiled_dim(PComp *pc, const IrInstr *ins, int32_t k, const IrI64List *dims, int64_t *d, int64_t *t)
{
    if (k >= ins->nopnd)
        return false;
    const IrSharding *s = pc->shd[ins->opnd[k]];
    for (int64_t j = 0; s && j < dims->n; j++)
        if (shd_tiles(s, (int32_t)dims->v[j]) > 1) {
            *d = dims->v[j];
            *t = shd_tiles(s, (int32_t)dims->v[j]);
            return true;
        }
    return false;
}

/* The dims whose tiling leaves a gather or scatter partial results: the
 * operand's indexed dims (operand 0), or the updates' scatter dims that
 * are not along a batching dim (operand ins->nopnd - 1); a batching dim
 * tiled alike everywhere is local (spmd_gather.c). */
static const IrI64List *partial_dims(PComp *pc, const IrInstr *ins, bool updates)
{
    if (!ins->a.x)
        return NULL;
    if (!updates)
        return ins->op == OP_GATHER ? &ins->a.x->gather.start_index_map
                                    : &ins->a.x->scatter.scatter_dims_to_operand_dims;
    const IrScatterDnums *dn = &ins->a.x->scatter;
    int32_t r = pc->sc->instr[ins->opnd[ins->nopnd - 1]].shape.rank;
    IrI64List *l = ir_alloc(spmd_tmp(pc), sizeof *l);
    int64_t *v = r ? ir_alloc_array(spmd_tmp(pc), (size_t)r, sizeof *v) : NULL;
    if (!l || (r && !v))
        return NULL;
    l->n = 0;
    l->v = v;
    int64_t ix = 0; /* the k-th scatter dim of the updates runs along the k-th indices dim but index_vector_dim */
    for (int32_t u = 0; u < r; u++) {
        if (ir_list_index(&dn->update_window_dims, u) >= 0)
            continue;
        if (ix == dn->index_vector_dim)
            ix++;
        if (ir_list_index(&dn->scatter_indices_batching_dims, ix++) < 0)
            l->v[l->n++] = u;
    }
    return l;
}

/* Bytes per device to make `dims` of operand k of ins whole (replicate
 * them), by spmd_reshard_cost; -1 out of memory or no such operand. */
static int64_t whole_cost(PComp *pc, const IrInstr *ins, int32_t k, const IrI64List *dims)
{
    if (k >= ins->nopnd)
        return -1;
    const IrSharding *s = pc->shd[ins->opnd[k]];
    IrSharding *whole = shd_replicate_dims(spmd_tmp(pc), s, (int32_t)dims->n, dims->v);
    return whole ? spmd_reshard_cost(&pc->sc->instr[ins->opnd[k]].shape, s, whole) : -1;
}

/* All dims of operand k of ins but `keep` (-1: all), in pc's scratch. */
static const IrI64List *dims_but(PComp *pc, const IrInstr *ins, int32_t k, int64_t keep)
{
    IrI64List *l = ir_alloc(spmd_tmp(pc), sizeof *l);
    int32_t r = k < ins->nopnd ? pc->sc->instr[ins->opnd[k]].shape.rank : 0;
    int64_t *v = r ? ir_alloc_array(spmd_tmp(pc), (size_t)r, sizeof *v) : NULL;
    if (!l || (r && !v))
        return NULL;
    l->n = 0;
    l->v = v;
    for (int32_t d = 0; d < r; d++)
        if (d != keep)
            v[l->n++] = d;
    return l;
}

/* A dot's partial sums: which contracted dim is tiled, and whether
 * gathering the contracted dims of both operands would move fewer bytes
 * than `bytes` (then that is the cheaper form). */
static void why_dot(PComp *pc, IrStrBuf *t, IrStrBuf *a, const IrInstr *ins, int64_t size, int64_t bytes)
{
    const IrDotDnums *dd = &ins->a.dot;
    int64_t d = 0, n = 0;
    int32_t k = tiled_dim(pc, ins, 0, &dd->lhs_contracting, &d, &n) ? 0
                : tiled_dim(pc, ins, 1, &dd->rhs_contracting, &d, &n) ? 1 : -1;
    instr_words(t, ins);
    if (k >= 0)
        ir_sb_printf(t, " contracts dim %lld of %s, which is tiled over %lld devices", (long long)d,
                     pc->sc->instr[ins->opnd[k]].name, (long long)n);
    else
        ir_sb_printf(t, " contracts dims split over %lld devices", (long long)size);
    int64_t alt = whole_cost(pc, ins, 0, &dd->lhs_contracting);
    int64_t alt1 = ins->nopnd > 1 ? whole_cost(pc, ins, 1, &dd->rhs_contracting) : 0;
    if (alt < 0 || alt1 < 0)
        return;
    alt += alt1;
    if (k >= 0 && alt < bytes)
        ir_sb_printf(a, "keeping the contracted dims of %s and %s whole would make the %s local and move %lld "
                        "bytes per device instead of %lld",
                     pc->sc->instr[ins->opnd[0]].name, pc->sc->instr[ins->opnd[1]].name, ir_op_name(ins->op),
                     (long long)alt, (long long)bytes);
}

/* "keeping DIMS of X whole would make OP local ..." when that moves
 * fewer bytes than the collective's `bytes`. */
static void avoid_whole(PComp *pc, IrStrBuf *a, const IrInstr *ins, int32_t k, const IrI64List *dims,
                        const char *what, int64_t bytes)
{
    int64_t alt = whole_cost(pc, ins, k, dims);
    if (alt >= 0 && alt < bytes)
        ir_sb_printf(a, "keeping %s of %s whole would make %s %s local and move %lld bytes per device instead of "
                        "%lld",
                     what, pc->sc->instr[ins->opnd[k]].name, ir_op_name(ins->op), ins->name, (long long)alt,
                     (long long)bytes);
}

/* The reason of a combining collective emitted by ins's own rule. */
static void why_partial(PComp *pc, IrStrBuf *t, IrStrBuf *a, const IrInstr *ins, int64_t size, int64_t bytes)
{
    int64_t d = 0, n = 0;
    const IrI64List *dl = NULL;
    if (ins->op == OP_DOT || ins->op == OP_RAGGED_DOT) {
        why_dot(pc, t, a, ins, size, bytes);
    } else if (ins->op == OP_REDUCE && tiled_dim(pc, ins, 0, &ins->a.dimensions, &d, &n)) {
        instr_words(t, ins);
        ir_sb_printf(t, " reduces dim %lld of %s, which is tiled over %lld devices", (long long)d,
                     pc->sc->instr[ins->opnd[0]].name, (long long)n);
        avoid_whole(pc, a, ins, 0, &ins->a.dimensions, "the reduced dims", bytes);
    } else if (ins->op == OP_CONVOLUTION && ins->a.x) {
        const IrConvDnums *dn = &ins->a.x->conv;
        int64_t f = shd_tiles(pc->shd[ins->opnd[0]], (int32_t)dn->in_feature);
        instr_words(t, ins);
        ir_sb_printf(t, " sums over input feature dim %lld of %s, which is tiled over %lld devices",
                     (long long)dn->in_feature, pc->sc->instr[ins->opnd[0]].name,
                     (long long)(f > 1 ? f : size));
        IrI64List l0 = {.n = 1, .v = (int64_t *)&dn->in_feature}, l1 = {.n = 1, .v = (int64_t *)&dn->k_in_feature};
        int64_t alt = whole_cost(pc, ins, 0, &l0), alt1 = whole_cost(pc, ins, 1, &l1);
        if (alt >= 0 && alt1 >= 0 && alt + alt1 < bytes)
            ir_sb_printf(a, "keeping the input feature dims of %s and %s whole would make the convolution local "
                            "and move %lld bytes per device instead of %lld",
                         pc->sc->instr[ins->opnd[0]].name, pc->sc->instr[ins->opnd[1]].name,
                         (long long)(alt + alt1), (long long)bytes);
    } else if ((ins->op == OP_GATHER || ins->op == OP_SCATTER) && (dl = partial_dims(pc, ins, false)) &&
               tiled_dim(pc, ins, 0, dl, &d, &n)) {
        instr_words(t, ins);
        ir_sb_printf(t, " %s operand %s, which is tiled on dim %lld over %lld devices (each device %s the part it "
                        "holds)",
                     ins->op == OP_GATHER ? "reads from" : "writes into", pc->sc->instr[ins->opnd[0]].name,
                     (long long)d, (long long)n, ins->op == OP_GATHER ? "gathers from" : "scatters into");
        const IrI64List *all = dims_but(pc, ins, 0, -1);
        if (all)
            avoid_whole(pc, a, ins, 0, all, "all dims", bytes);
    } else if (ins->op == OP_SCATTER && ins->nopnd >= 3 && (dl = partial_dims(pc, ins, true)) &&
               tiled_dim(pc, ins, ins->nopnd - 1, dl, &d, &n)) {
        instr_words(t, ins);
        ir_sb_printf(t, " writes updates %s, tiled on dim %lld over %lld devices, into a whole operand (each device "
                        "scatters its part of the updates)",
                     pc->sc->instr[ins->opnd[ins->nopnd - 1]].name, (long long)d, (long long)n);
        const IrI64List *all = dims_but(pc, ins, ins->nopnd - 1, -1);
        if (all)
            avoid_whole(pc, a, ins, ins->nopnd - 1, all, "all dims", bytes);
    } else if ((ins->op == OP_BATCH_NORM_TRAINING || ins->op == OP_BATCH_NORM_GRAD) && ins->a.x) {
        const IrI64List *rest = dims_but(pc, ins, 0, ins->a.x->feature_index);
        instr_words(t, ins);
        if (rest && tiled_dim(pc, ins, 0, rest, &d, &n))
            ir_sb_printf(t, " sums its statistics over dim %lld of %s, which is tiled over %lld devices",
                         (long long)d, pc->sc->instr[ins->opnd[0]].name, (long long)n);
        else
            ir_sb_printf(t, " sums its statistics over dims split over %lld devices", (long long)size);
        if (rest)
            avoid_whole(pc, a, ins, 0, rest, "the dims but the feature dim", bytes);
    } else {
        instr_words(t, ins);
        ir_sb_printf(t, " leaves a partial result on each of %lld devices", (long long)size);
    }
}

static const char *verb(IrOpcode op, bool partial, bool sum)
{
    switch (op) {
    case OP_ALL_GATHER:
    case OP_ALL_GATHER_START: return "all-gathered";
    case OP_ALL_REDUCE:
    case OP_ALL_REDUCE_START:
        return !partial ? "all-reduced" : sum ? "partial sums are all-reduced" : "partial results are all-reduced";
    case OP_REDUCE_SCATTER:
        return sum ? "partial sums are reduce-scattered" : "partial results are reduce-scattered";
    case OP_ALL_TO_ALL: return "exchanged by all-to-all";
    case OP_COLLECTIVE_PERMUTE:
    case OP_COLLECTIVE_PERMUTE_START: return "moved by collective-permute";
    default: return "moved";
    }
}

SpmdWhy spmd_why_of(PComp *pc, const IrInstr *coll, int64_t bytes, IrArena *arena)
{
    SpmdWhy w = pc->sp->why;
    const IrInstr *ins = pc->cur >= 0 ? &pc->sc->instr[pc->cur] : NULL;
    IrStrBuf t = {0}, a = {0};
    const IrReplicaGroups *g = coll->a.x ? &coll->a.x->replica_groups : NULL;
    int64_t size = g && g->ngroups > 0 && g->group_size ? g->group_size[0]
                   : g && g->iota && g->iota_shape.n == 2 ? g->iota_shape.v[1] : 0;
    /* partial sums, or partial maxima, products, ...: the reducer's root */
    const IrComputation *red = coll->ncalled > 0 ? pc->sp->dst->comp[coll->called[0]] : NULL;
    bool sum = red && red->root >= 0 && red->instr[red->root].op == OP_ADD;
    if (combining(coll->op) && ins && (w.kind == SPMD_WHY_UNKNOWN || w.kind == SPMD_WHY_RESULT)) {
        why_partial(pc, &t, &a, ins, size, bytes);
        w.kind = SPMD_WHY_PARTIAL;
    } else if (w.kind != SPMD_WHY_UNKNOWN) {
        ir_sb_puts(&t, w.text ? w.text : "?");
        if (w.avoid)
            ir_sb_printf(&a, "%s: 0 bytes per device here instead of %lld", w.avoid, (long long)bytes);
    } else if (ins && windowed(ins->op) && (coll->op == OP_COLLECTIVE_PERMUTE)) {
        instr_words(&t, ins);
        ir_sb_puts(&t, "'s window reads rows of the neighbouring devices' shards (halo)");
        w.kind = SPMD_WHY_HALO;
    } else if (ins && ins->op == OP_REDUCE && coll->op == OP_ALL_GATHER) {
        int64_t d = 0, n = 0;
        instr_words(&t, ins);
        if (tiled_dim(pc, ins, 0, &ins->a.dimensions, &d, &n)) {
            ir_sb_printf(&t, " reduces dim %lld of %s, which is tiled over %lld devices, with a reducer of several "
                             "values (every device reduces all the partial results again)",
                         (long long)d, pc->sc->instr[ins->opnd[0]].name, (long long)n);
            avoid_whole(pc, &a, ins, 0, &ins->a.dimensions, "the reduced dims", bytes);
        } else
            ir_sb_puts(&t, " reduces a tiled dim with a reducer of several values (every device reduces all the "
                           "partial results again)");
        w.kind = SPMD_WHY_RULE;
    } else if (ins) {
        ir_sb_puts(&t, "the rule of ");
        instr_words(&t, ins);
        ir_sb_puts(&t, " needs it (");
        if (ins->nopnd > 0) {
            ir_sb_printf(&t, "operand %s is ", pc->sc->instr[ins->opnd[0]].name);
            shd_describe(&t, pc->shd[ins->opnd[0]]);
            ir_sb_puts(&t, ", ");
        }
        ir_sb_puts(&t, "its result ");
        shd_describe(&t, pc->shd[pc->cur]);
        ir_sb_puts(&t, ")");
        w.kind = SPMD_WHY_RULE;
    } else {
        ir_sb_puts(&t, "the partitioner needs it");
        w.kind = SPMD_WHY_RULE;
    }
    ir_sb_printf(&t, ": %s", verb(coll->op, w.kind == SPMD_WHY_PARTIAL, sum));
    char *text = ir_sb_take(&t), *avoid = ir_sb_take(&a);
    w.text = text ? ir_strdup(arena, text) : NULL;
    w.avoid = avoid && *avoid ? ir_strdup(arena, avoid) : NULL;
    ts_free(text);
    ts_free(avoid);
    return w;
}
