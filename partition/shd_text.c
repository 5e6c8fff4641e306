/*
 * shd_text.c: shardings for people: in words ("tiled on dim 1 over 2
 * devices", "replicated"), and in one canonical text, so that equal
 * shardings written differently ({devices=[1,2]<=[2]} and
 * {devices=[1,2]0,1}; last_tile_dim_replicate and last_tile_dims=
 * {replicated}; a tiling of all ones and {replicated}) read the same. The
 * plan's reasons for its collectives and the colours of its graph are
 * built from these.
 */
#include "partition.h"

#include <string.h>

/* True when devices are 0, 1, ..., n-1 in order. */
static bool in_order(const IrSharding *s)
{
    for (int64_t k = 0; k < s->ndevices; k++)
        if (s->devices[k] != k)
            return false;
    return true;
}

/* One leaf (not a tuple), already normalised. */
static void describe_leaf(IrStrBuf *b, const IrSharding *s)
{
    if (s->kind == SHD_MAXIMAL) {
        ir_sb_printf(b, "whole on device %lld only (maximal)", (long long)s->device);
        return;
    }
    if (s->kind == SHD_MANUAL || shd_is_manual(s)) {
        ir_sb_puts(b, "manual (each device holds its own value)");
        return;
    }
    if (s->kind != SHD_TILED || shd_is_replicated(s)) {
        ir_sb_puts(b, "replicated");
        return;
    }
    int32_t rank = s->ntile - s->nsubgroup, ndims = 0;
    int64_t tiles = 1, repl = 1, manual = 1;
    for (int32_t d = 0; d < rank; d++)
        if (s->tile[d] > 1) {
            ndims++;
            tiles *= s->tile[d];
        }
    for (int32_t k = 0; k < s->nsubgroup; k++)
        *(s->subgroup[k] == SUBGROUP_MANUAL ? &manual : &repl) *= s->tile[rank + k];
    ir_sb_puts(b, ndims > 1 ? "tiled on dims " : "tiled on dim ");
    int32_t seen = 0;
    for (int32_t d = 0; d < rank; d++)
        if (s->tile[d] > 1) {
            ir_sb_printf(b, "%s%d", seen == 0 ? "" : seen == ndims - 1 ? " and " : ", ", (int)d);
            seen++;
        }
    if (ndims > 1) {
        ir_sb_puts(b, " (");
        seen = 0;
        for (int32_t d = 0; d < rank; d++)
            if (s->tile[d] > 1)
                ir_sb_printf(b, "%s%lld", seen++ ? "x" : "", (long long)s->tile[d]);
        ir_sb_puts(b, ")");
    }
    ir_sb_printf(b, " over %lld devices", (long long)tiles);
    if (repl > 1)
        ir_sb_printf(b, ", each tile on %lld devices", (long long)repl);
    if (manual > 1)
        ir_sb_printf(b, ", in %lld manual groups", (long long)manual);
    if (!in_order(s)) {
        ir_sb_puts(b, ", devices in the order ");
        for (int64_t k = 0; k < s->ndevices && k < 8; k++)
            ir_sb_printf(b, "%s%lld", k ? "," : "", (long long)s->devices[k]);
        if (s->ndevices > 8)
            ir_sb_puts(b, ",...");
    }
}

void shd_describe(IrStrBuf *b, const IrSharding *s)
{
    if (!s) {
        ir_sb_puts(b, "replicated");
        return;
    }
    IrArena *a = ir_arena_new();
    IrSharding *n = a ? shd_normalize(a, s) : NULL;
    if (!n) {
        b->oom = true;
        ir_arena_free(a);
        return;
    }
    if (n->kind == SHD_TUPLE) {
        ir_sb_puts(b, "(");
        for (int32_t k = 0; k < n->ntuple; k++) {
            ir_sb_puts(b, k ? "; " : "");
            describe_leaf(b, &n->tuple[k]);
        }
        ir_sb_puts(b, ")");
    } else {
        describe_leaf(b, n);
    }
    ir_arena_free(a);
}

char *shd_describe_str(const IrSharding *s)
{
    IrStrBuf b = {0};
    shd_describe(&b, s);
    return ir_sb_take(&b);
}

/* What the printer should not distinguish: the iota form, metadata, shard
 * groups, {unknown}; one spelling of a replicated subgroup. */
static void plain(IrSharding *s)
{
    s->iota = false;
    s->metadata = NULL;
    s->shard_group = 0;
    s->unknown = false;
    if (s->kind == SHD_TILED)
        s->last_tile_dim_replicate = s->nsubgroup == 1 && s->subgroup[0] == SUBGROUP_REPLICATED;
    for (int32_t k = 0; s->kind == SHD_TUPLE && k < s->ntuple; k++)
        plain(&s->tuple[k]);
}

char *shd_canonical_str(const IrSharding *s)
{
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    IrArena *a = ir_arena_new();
    IrSharding *n = a ? shd_normalize(a, s ? s : &repl) : NULL;
    char *t = NULL;
    if (n) {
        if (n->kind == SHD_TILED && shd_is_replicated(n) && !shd_is_manual(n))
            n = shd_replicated(a);
        if (n) {
            plain(n);
            t = ir_sharding_str(n);
        }
    }
    ir_arena_free(a);
    return t;
}
