/*
 * reshard_cache.c: a value resharded once per target sharding, as XLA's
 * partitioner keeps a reshard cache (PartitionedHlo::Reshard).
 *
 * Every user of a source value that needs it under the same sharding T
 * reads what the first such user's reshard emitted: one f32[8,32] tiled
 * on dim 1 over 2 devices, read replicated by three elementwise ops, is
 * all-gathered once, not three times (before, the checkpointed MLP of
 * tests/jax/test_auto_heldout47.py's remat_mom gathered one saved
 * activation seven times).
 *
 * Why this is safe: the cache belongs to one destination computation
 * (PComp). A while body or condition, a conditional branch, a called or
 * async computation, is partitioned into a destination computation of its
 * own with a PComp of its own (spmd_partition_computation), so what a
 * reshard emits there is never read outside it, where it would not
 * dominate the read; and inside one computation any instruction emitted
 * earlier may be read by any later one (an HLO computation is a graph
 * without scopes). Manual shardings are cached as any other: a reshard to
 * or from {manual} fails and is not cached, a manual value's own sharding
 * needs no reshard.
 *
 * The key: the source instruction and, to be sure the value has not been
 * replaced since, its destination value and sharding (PComp.val, .shd),
 * and the target (ir_sharding_equal, tuples leaf by leaf). A reused
 * reshard is one set of collectives: their reasons (spmd_why.c) name the
 * first user; the report's reshard list still names every edge.
 */
#include "spmd_internal.h"

typedef struct ReshardEntry {
    int32_t v;                 /* destination value resharded (PComp.val of the source) */
    const IrSharding *from;    /* its sharding (PComp.shd of the source) */
    const IrSharding *to;      /* the target, copied into the cache's arena */
    int32_t result;            /* the destination value under `to` */
    int32_t next;              /* the source's next entry, -1 */
} ReshardEntry;

struct SpmdReshardCache {
    IrArena *arena;            /* the targets (a handler's are scratch, spmd_tmp) */
    int32_t *head;             /* source instr -> its first entry, -1 */
    ReshardEntry *e;
    int32_t n, cap;
};

int32_t spmd_reshard_cached(const PComp *pc, int32_t o, const IrSharding *to)
{
    const SpmdReshardCache *c = pc->reshards;
    if (!c)
        return -1;
    for (int32_t k = c->head[o]; k >= 0; k = c->e[k].next) {
        const ReshardEntry *e = &c->e[k];
        if (e->v == pc->val[o] && e->from == pc->shd[o] && ir_sharding_equal(e->to, to))
            return e->result;
    }
    return -1;
}

/* Out of memory forgets the entry: the next user reshards again (the
 * program is as correct, with one more collective). */
void spmd_reshard_remember(PComp *pc, int32_t o, const IrSharding *to, int32_t result)
{
    SpmdReshardCache *c = pc->reshards;
    if (result < 0)
        return;
    if (!c) {
        int32_t n = pc->sc->ninstr > 0 ? pc->sc->ninstr : 1;
        if (!(c = ts_calloc(1, sizeof *c)))
            return;
        c->arena = ir_arena_new();
        c->head = ts_malloc((size_t)n * sizeof *c->head);
        if (!c->arena || !c->head) {
            ir_arena_free(c->arena);
            ts_free(c->head);
            ts_free(c);
            return;
        }
        for (int32_t i = 0; i < n; i++)
            c->head[i] = -1;
        pc->reshards = c;
    }
    if (c->n == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 16;
        ReshardEntry *e = ts_realloc(c->e, (size_t)cap * sizeof *e);
        if (!e)
            return;
        c->e = e;
        c->cap = cap;
    }
    IrSharding *copy = ir_alloc(c->arena, sizeof *copy);
    if (!copy || ir_sharding_copy(c->arena, copy, to) != IR_OK)
        return;
    c->e[c->n] = (ReshardEntry){.v = pc->val[o], .from = pc->shd[o], .to = copy, .result = result,
                                .next = c->head[o]};
    c->head[o] = c->n++;
}

void spmd_reshard_cache_free(PComp *pc)
{
    SpmdReshardCache *c = pc->reshards;
    if (!c)
        return;
    ir_arena_free(c->arena);
    ts_free(c->head);
    ts_free(c->e);
    ts_free(c);
    pc->reshards = NULL;
}
