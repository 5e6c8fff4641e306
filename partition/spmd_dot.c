/*
 * spmd_dot.c: the dot handler.
 *
 * A dot's iteration space has one dim per result dim (batch, lhs free, rhs
 * free, in that order) plus one per contracting dim. A tiling of the
 * iteration space (a sharding of rank out_rank + ncontracting) fixes how
 * each operand must be sharded for a purely local dot:
 *   lhs takes the tiles of (batch, lhs free, contracting), replicated over
 *   rhs free; rhs takes (batch, contracting, rhs free), replicated over lhs
 *   free. The local dot gives partial sums over the contracting tiles; an
 *   all-reduce over the devices that differ only in contracting tiles
 *   completes them (the result then holds the batch/free tiles), or, where
 *   the result ends cut finer among those devices, a reduce-scatter
 *   (spmd_partial.c: half the bytes).
 * Candidate tilings come from the result's sharding, from the lhs's and
 * from the rhs's; the handler picks the one whose resharding and
 * all-reduce move the fewest bytes, with the local dot's multiply-adds
 * counted in bytes too (work_cost: a tiling that computes the whole dot
 * on every device pays for it), ties: result, lhs, rhs.
 *
 * Example (Megatron MLP, 2 devices): h = x . W1 with x replicated, W1
 * {devices=[1,2]0,1}, h {devices=[1,2]0,1}: from the result, lhs is
 * replicated and rhs keeps its tiles: a local dot, no communication.
 * y = h . W2 with W2 {devices=[2,1]0,1}, y replicated: from lhs, the
 * contracting dim is tiled on both sides: a local dot and one all-reduce.
 *
 * Uneven contracting dims: the padding of the lhs shard is zeroed first so
 * it adds nothing to the partial sums.
 *
 * Windowed einsum (XLA's collective matmul): when the local dot's partial
 * sums are all-reduced (not reduce-scattered), the dot may be cut along the first lhs free dim
 * into chunks, each all-reduced with its own all-reduce-start/-done pair,
 * and the dones concatenated: the executor (ir/schedule_overlap.c) starts
 * chunk i's all-reduce before it runs chunk i+1's dot, so the
 * communication of all chunks but the last overlaps the compute. Example
 * (2 devices, 3 chunks): y[7,4] = a[7,8] . w[8,4] with the contracting
 * dim tiled: a is cut into rows [0,3) [3,6) [6,7), each chunk's dot
 * f32[3,4], f32[3,4], f32[1,4] is all-reduce-started, y the concatenate of
 * the three dones. The sums are the same as one all-reduce's, element by
 * element. It is chosen where the cost model below says it pays
 * (window_chunks): the all-reduce it hides costs more than the chunks'
 * extra work; or asked for on the dot with
 * frontend_attributes={_tessel_window_chunks="K"} (K = 1: never).
 */
#include "spmd_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct DotDims {
    int32_t nb, nlf, nrf, nc;      /* batch, lhs free, rhs free, contracting */
    int32_t out_rank, iter_rank;
    int64_t lhs_to_iter[IR_MAX_RANK];
    int64_t rhs_to_iter[IR_MAX_RANK];
} DotDims;

/* Iteration dims: [batch][lhs free][rhs free][contracting]. */
static void dot_dims(const IrInstr *ins, const IrShape *lhs, const IrShape *rhs, DotDims *dd)
{
    const IrDotDnums *dn = &ins->a.dot;
    dd->nb = dn->lhs_batch.n;
    dd->nc = dn->lhs_contracting.n;
    dd->nlf = lhs->rank - dd->nb - dd->nc;
    dd->nrf = rhs->rank - dd->nb - dd->nc;
    dd->out_rank = dd->nb + dd->nlf + dd->nrf;
    dd->iter_rank = dd->out_rank + dd->nc;
    int32_t f = 0;
    for (int32_t d = 0; d < lhs->rank; d++) {
        int32_t k;
        if ((k = ir_list_index(&dn->lhs_batch, d)) >= 0)
            dd->lhs_to_iter[d] = k;
        else if ((k = ir_list_index(&dn->lhs_contracting, d)) >= 0)
            dd->lhs_to_iter[d] = dd->out_rank + k;
        else
            dd->lhs_to_iter[d] = dd->nb + f++;
    }
    f = 0;
    for (int32_t d = 0; d < rhs->rank; d++) {
        int32_t k;
        if ((k = ir_list_index(&dn->rhs_batch, d)) >= 0)
            dd->rhs_to_iter[d] = k;
        else if ((k = ir_list_index(&dn->rhs_contracting, d)) >= 0)
            dd->rhs_to_iter[d] = dd->out_rank + k;
        else
            dd->rhs_to_iter[d] = dd->nb + dd->nlf + f++;
    }
}

/* The iteration tiling implied by an operand's sharding: map iteration dim
 * -> operand dim (-1 where the operand has no such dim). */
static IrSharding *iter_from_operand(IrArena *a, const IrSharding *s, const DotDims *dd,
                                     const int64_t *to_iter, int32_t rank)
{
    int64_t map[IR_MAX_RANK * 2];
    for (int32_t k = 0; k < dd->iter_rank; k++)
        map[k] = -1;
    for (int32_t d = 0; d < rank; d++)
        map[to_iter[d]] = d;
    return shd_project(a, s, dd->iter_rank, map);
}

/* Operand sharding required by an iteration tiling. */
static IrSharding *operand_from_iter(IrArena *a, const IrSharding *it, const int64_t *to_iter,
                                     int32_t rank)
{
    return shd_project(a, it, rank, to_iter);
}

typedef struct DotPlan {
    IrSharding *iter, *lhs, *rhs, *partial; /* partial: result tiling before the all-reduce */
    bool reduce;                            /* contracting dims tiled */
    int64_t cost;
} DotPlan;

/* The multiply-adds of one device's local dot under iteration tiling
 * `iter`: the product of the iteration dims' extents, each divided
 * (rounded up) by its tiles. */
static double local_macs(const IrInstr *ins, const IrShape *lhs, const DotDims *dd, const IrSharding *iter)
{
    double macs = 1;
    for (int32_t k = 0; k < dd->iter_rank; k++) {
        int64_t extent = k < dd->out_rank ? ins->shape.dims[k]
                                           : lhs->dims[ins->a.dot.lhs_contracting.v[k - dd->out_rank]];
        int64_t t = shd_tiles(iter, k);
        macs *= (double)((extent + t - 1) / (t > 0 ? t : 1));
    }
    return macs;
}

/* The local dot's work in the unit of the plans' cost, bytes moved: a
 * multiply-add weighs what the link moves while a device does one at
 * DOT_MACS_US. Without it the byte count alone prefers gathering both
 * operands of a dot whose contracted dim both tile (and computing the
 * whole dot on every device) to one all-reduce of a result about as large
 * as the operands: the out-projection of attention with the heads
 * sharded (f32[2,12,512,64] . f32[12,64,768] contracting heads and head
 * dim: operands of 3 and 2.4 MB, a result of 3 MB; 0.3 G multiply-adds
 * more a device), and a data-parallel weight gradient (f32[2,512,3072] .
 * f32[2,512,768] contracting the batch, which both tile: operands of 12.6
 * and 3.1 MB, a result of 9.4 MB; 1.2 G more). The rate is high on
 * purpose (50 G multiply-adds a second, above one core's sgemm on the
 * machines of BENCHMARKS.md), so that work counts only where it is far
 * more than the bytes: at the default 10 Gb/s a multiply-add weighs 1/40
 * byte, and the extra work of those two dots 7.5 MB and 30 MB. */
#define DOT_MACS_US 50000.0

double spmd_dot_mac_bytes(double link_gbps)
{
    return (link_gbps > 0 ? link_gbps : SPMD_LINK_GBPS) * 125.0 / DOT_MACS_US;
}

static int64_t work_cost(const PComp *pc, double macs)
{
    return (int64_t)(macs * pc->sp->link_bytes_us / DOT_MACS_US);
}

/* The groups of devices that differ only in their contracting tiles. */
static bool contracting_groups(PComp *pc, const IrSharding *iter, const DotDims *dd, int32_t *ng, int32_t *size,
                               int64_t **groups)
{
    int64_t cdims[IR_MAX_RANK];
    for (int32_t k = 0; k < dd->nc; k++)
        cdims[k] = dd->out_rank + k;
    return shd_groups_along(pc, iter, dd->nc, cdims, ng, size, groups);
}

static bool plan_for(PComp *pc, int32_t i, const DotDims *dd, IrSharding *iter, DotPlan *p)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    const IrInstr *l = &pc->sc->instr[ins->opnd[0]], *r = &pc->sc->instr[ins->opnd[1]];
    if (!iter)
        return false;
    p->iter = iter;
    p->lhs = operand_from_iter(a, iter, dd->lhs_to_iter, l->shape.rank);
    p->rhs = operand_from_iter(a, iter, dd->rhs_to_iter, r->shape.rank);
    int64_t ident[IR_MAX_RANK];
    for (int32_t k = 0; k < dd->out_rank; k++)
        ident[k] = k;
    p->partial = shd_project(a, iter, dd->out_rank, ident);
    if (!p->lhs || !p->rhs || !p->partial)
        return false;
    p->reduce = false;
    for (int32_t k = 0; k < dd->nc; k++)
        p->reduce |= shd_tiles(iter, dd->out_rank + k) > 1;
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL;
    if (p->reduce && !contracting_groups(pc, iter, dd, &ng, &size, &groups))
        return false;
    /* Partial sums in the type wide_dot moves them in (f32 for f16). */
    IrShape sums = ins->shape;
    if (p->reduce)
        sums.type = spmd_partial_type(pc->sp->src, pc->sc, ins);
    p->cost = spmd_reshard_cost(&l->shape, pc->shd[ins->opnd[0]], p->lhs) +
              spmd_reshard_cost(&r->shape, pc->shd[ins->opnd[1]], p->rhs) +
              spmd_finish_partial_cost(pc, &sums, p->partial, ng, size, groups, pc->shd[i]) +
              work_cost(pc, local_macs(ins, &l->shape, dd, iter));
    return true;
}

/* Zero the padding of the lhs shard along tiled contracting dims. */
static int32_t mask_contracting(PComp *pc, int32_t v, const IrShape *full, const IrSharding *s,
                                const IrDotDnums *dn)
{
    int64_t dims[IR_MAX_RANK];
    int32_t n = 0;
    for (int32_t d = 0; d < full->rank; d++)
        if (!ir_list_has(&dn->lhs_contracting, d))
            dims[n++] = d;
    /* Only contracting dims need clean padding: mask with a sharding that
     * tiles just those. */
    IrSharding *only = shd_replicate_dims(spmd_tmp(pc), s, n, dims);
    if (!only)
        return -1;
    return spmd_mask_padding(pc, v, full, only, spmd_emit_scalar_const(pc, full->type, 0));
}

/* The automatic choice, a cost model in bytes and microseconds. A ring
 * all-reduce of R result bytes over n members moves B = 2 R (n-1)/n bytes
 * a member. K chunks hide at most (K-1)/K of its time, and only the part
 * spent waiting on the link: the copies and sums of an all-reduce run on
 * the host's cores, which the dots keep busy (every core runs a device),
 * so that part of each chunk's all-reduce delays the next chunk's dot
 * instead of overlapping it. Hidden: (K-1)/K (B / LINK - B / COMM_CPU)
 * where positive. Extra: what K smaller dots cost beyond one (BLAS packs
 * the rhs of W bytes once a call: K-1 more packings at PACK), the
 * concatenate's copy of R bytes, and about CHUNK_US a chunk for its
 * slice, start and done. Windowed only where the hidden time is larger,
 * with a result shard of at least WINDOW_MIN_BYTES and chunks of at least
 * WINDOW_MIN_ROWS rows (smaller sgemm calls lose BLAS speed).
 *
 * LINK is the links' bandwidth the compile was told (`--link-gbps G`,
 * TsCompileOptions.link_gbps), SPMD_LINK_GBPS by default.
 * PACK, COMM_CPU and CHUNK were measured on the Intel VM of BENCHMARKS.md
 * (2 ranks on 2 cores, shared memory and TCP alike): four sgemm of 128 x
 * 2048 x 1024 took 2.4 ms more than one of 512 rows (three more packings
 * of the 8 MiB rhs: 10 GB/s); with K = 4 forced, the mlp step (bench/gen.py
 * mlp B D F) took 6.5, 11.5 and 15.5 ms more than the plain one at R = 2,
 * 8 and 16 MiB (W = 8, 8 and 4 MiB): beyond the packing and the copy,
 * about 1 ns an all-reduced byte. So on such hosts the model windows only
 * over links slower than COMM_CPU (8 Gb/s), where waiting dominates; the
 * explicit attribute windows anywhere. */
#define WINDOW_CHUNKS 4
#define WINDOW_MIN_BYTES ((int64_t)1 << 20)
#define WINDOW_MIN_ROWS 64
#define COMM_CPU_BYTES_US 1000.0
#define PACK_BYTES_US 10000.0
#define CHUNK_US 50.0

static bool window_pays(double link_bytes_us, int64_t k, int64_t result_bytes, int64_t rhs_bytes, int32_t members)
{
    double r = (double)result_bytes, n = members;
    double moved = 2.0 * r * (n - 1.0) / n;
    double waiting = moved / link_bytes_us - moved / COMM_CPU_BYTES_US;
    double hidden = waiting > 0 ? (double)(k - 1) / (double)k * waiting : 0;
    double extra = ((double)(k - 1) * (double)rhs_bytes + r) / PACK_BYTES_US + (double)k * CHUNK_US;
    return hidden > extra;
}

/* Chunks for the windowed form of a dot whose local result `local` is
 * all-reduced over groups of `members` and whose first lhs free dim is
 * result dim `dim` (-1: none); rhs_bytes: the local rhs. 1: no
 * windowing. */
static int64_t window_chunks(const PComp *pc, const IrInstr *ins, const IrShape *local, int32_t dim,
                             int64_t rhs_bytes, int32_t members)
{
    if (dim < 0)
        return 1;
    int64_t rows = local->dims[dim];
    const char *ask = ir_frontend_attr(ins, "_tessel_window_chunks");
    if (ask) {
        char *end = NULL;
        long long k = strtoll(ask, &end, 10);
        if (end == ask || *end || k < 1)
            return 1;
        return k < rows ? k : rows;
    }
    if (ir_shape_bytes(local) < WINDOW_MIN_BYTES || rows < WINDOW_CHUNKS * WINDOW_MIN_ROWS || members < 2 ||
        !window_pays(pc->sp->link_bytes_us, WINDOW_CHUNKS, ir_shape_bytes(local), rhs_bytes, members))
        return 1;
    return WINDOW_CHUNKS;
}

/* The windowed dot (see the top of the file): k chunks of ceil(rows/k)
 * rows of lhs dim `ldim` (result dim `dim`), the last one shorter when k
 * does not divide the rows, each dotted with rv and all-reduced
 * asynchronously, then concatenated. */
static int32_t windowed_dot(PComp *pc, const IrInstr *ins, int32_t lv, int32_t rv, const IrShape *local,
                            int32_t ldim, int32_t dim, int64_t k, int32_t ng, int32_t size, const int64_t *groups)
{
    IrArena *a = spmd_tmp(pc);
    const IrShape *ls = spmd_val_shape(pc, lv);
    int64_t rows = ls->dims[ldim], step = (rows + k - 1) / k;
    int32_t *done = ir_alloc(a, (size_t)k * sizeof *done);
    if (!done)
        return -1;
    int32_t n = 0;
    for (int64_t lo = 0; lo < rows; lo += step) {
        int64_t hi = lo + step < rows ? lo + step : rows;
        int64_t start[IR_MAX_RANK], limit[IR_MAX_RANK];
        ls = spmd_val_shape(pc, lv); /* emitting may move the shapes */
        for (int32_t d = 0; d < ls->rank; d++) {
            start[d] = d == ldim ? lo : 0;
            limit[d] = d == ldim ? hi : ls->dims[d];
        }
        int32_t piece = spmd_emit_slice(pc, lv, start, limit);
        IrShape cs;
        if (piece < 0 || ir_shape_copy(a, &cs, local) != IR_OK)
            return -1;
        cs.dims[dim] = hi - lo;
        int32_t ops[2] = {piece, rv};
        int32_t c = spmd_emit_clone(pc, ins, &cs, 2, ops, 0, NULL);
        int32_t r = spmd_emit_all_reduce(pc, c, OP_ADD, ng, size, groups);
        if (r < 0)
            return -1;
        pc->dc->instr[r].op = OP_ALL_REDUCE_START;
        if ((done[n++] = spmd_emit_unary(pc, OP_ALL_REDUCE_DONE, r)) < 0)
            return -1;
    }
    int32_t v = spmd_emit(pc, OP_CONCATENATE, local, n, done);
    if (v < 0)
        return -1;
    IrI64List *dl = &pc->dc->instr[v].a.dimensions;
    if (!(dl->v = ir_alloc(spmd_arena(pc), sizeof *dl->v)))
        return -1;
    dl->v[0] = dim;
    dl->n = 1;
    return v;
}

/* The lhs dim of the first lhs free dim (result dim dd->nb), or -1. */
static int32_t first_lhs_free(const DotDims *dd, int32_t lhs_rank)
{
    for (int32_t d = 0; dd->nlf > 0 && d < lhs_rank; d++)
        if (dd->lhs_to_iter[d] == dd->nb)
            return d;
    return -1;
}

/* A dot of a narrow float type (f16 ...) whose contracting dims are
 * tiled: each device's partial is a dot of its operands widened to f32
 * (exact), the partials are summed in f32 and the result rounded to the
 * type once, as the reference computes the whole dot (device/k_dot.c: f16
 * and bf16 accumulate in f32) and XLA's CPU backend does (it upcasts f16
 * dots to f32). Partials rounded to f16 on each device could overflow
 * where the whole dot does not: x f16[1,4] = [60000, 60000, -60000,
 * -60000] . ones over 2 devices was inf + -inf = NaN partitioned, 0 in
 * the reference. Not windowed. Returns the result under shd[i]. */
static int32_t wide_dot(PComp *pc, int32_t i, const int32_t ops[2], const IrShape *local, const IrSharding *partial,
                        int32_t ng, int32_t size, const int64_t *groups)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrShape wl, wide;
    if (ir_shape_copy(spmd_tmp(pc), &wl, local) != IR_OK || ir_shape_copy(spmd_tmp(pc), &wide, &ins->shape) != IR_OK)
        return spmd_oom_value(pc);
    wl.type = wide.type = IR_F32;
    int32_t w[2] = {spmd_emit_convert(pc, ops[0], IR_F32), spmd_emit_convert(pc, ops[1], IR_F32)};
    int32_t v = spmd_emit_clone(pc, ins, &wl, 2, w, 0, NULL);
    v = spmd_finish_partial(pc, v, &wide, partial, OP_ADD, ng, size, groups, pc->shd[i]);
    return v < 0 ? v : spmd_emit_convert(pc, v, ins->shape.type);
}

IrStatus spmd_dot(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_tmp(pc);
    const IrInstr *l = &pc->sc->instr[ins->opnd[0]], *r = &pc->sc->instr[ins->opnd[1]];
    const IrSharding *ls = pc->shd[ins->opnd[0]], *rs = pc->shd[ins->opnd[1]];
    if (ls->kind == SHD_MANUAL || rs->kind == SHD_MANUAL || l->shape.rank > IR_MAX_RANK / 2 ||
        r->shape.rank > IR_MAX_RANK / 2)
        return spmd_fallback(pc, i);
    DotDims dd;
    dot_dims(ins, &l->shape, &r->shape, &dd);

    int64_t out_to_iter[IR_MAX_RANK];
    for (int32_t k = 0; k < dd.out_rank; k++)
        out_to_iter[k] = k;
    IrSharding *cand[3] = {
        iter_from_operand(a, pc->shd[i], &dd, out_to_iter, dd.out_rank),
        iter_from_operand(a, ls, &dd, dd.lhs_to_iter, l->shape.rank),
        iter_from_operand(a, rs, &dd, dd.rhs_to_iter, r->shape.rank),
    };
    DotPlan best = {0}, p;
    bool have = false;
    for (int32_t c = 0; c < 3; c++)
        if (plan_for(pc, i, &dd, cand[c], &p) && (!have || p.cost < best.cost)) {
            best = p;
            have = true;
        }
    if (!have)
        return spmd_fallback(pc, i);

    int32_t lv = spmd_operand_as(pc, i, 0, best.lhs);
    int32_t rv = spmd_operand_as(pc, i, 1, best.rhs);
    if (best.reduce)
        lv = mask_contracting(pc, lv, &l->shape, best.lhs, &ins->a.dot);
    IrShape local;
    if (shd_shard_shape(a, &ins->shape, best.partial, &local) != IR_OK)
        return spmd_set_val(pc, i, -1);
    int32_t ng = 0, size = 1;
    int64_t *groups = NULL;
    if (best.reduce && !contracting_groups(pc, best.iter, &dd, &ng, &size, &groups))
        return spmd_set_val(pc, i, -1);
    if (best.reduce && spmd_partial_type(pc->sp->src, pc->sc, ins) != ins->shape.type) {
        int32_t ops[2] = {lv, rv};
        return spmd_set_val(pc, i, wide_dot(pc, i, ops, &local, best.partial, ng, size, groups));
    }
    /* Partial sums that end sharded are reduce-scattered, not windowed
     * (unless asked): half the bytes of the all-reduce windowing hides. */
    bool scatter = best.reduce && !ir_frontend_attr(ins, "_tessel_window_chunks") &&
                   spmd_finish_partial_scatters(pc, &ins->shape, best.partial, ng, size, groups, pc->shd[i]);
    int32_t ldim = best.reduce && !scatter ? first_lhs_free(&dd, l->shape.rank) : -1;
    int64_t rhs_bytes = rv >= 0 ? ir_shape_bytes(&pc->dc->instr[rv].shape) : 0;
    int64_t chunks = window_chunks(pc, ins, &local, ldim >= 0 ? dd.nb : -1, rhs_bytes, size);
    if (chunks > 1) {
        int32_t v = windowed_dot(pc, ins, lv, rv, &local, ldim, dd.nb, chunks, ng, size, groups);
        return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, best.partial, pc->shd[i]));
    }
    int32_t ops[2] = {lv, rv};
    int32_t v = spmd_emit_clone(pc, ins, &local, 2, ops, 0, NULL);
    return spmd_set_val(pc, i, spmd_finish_partial(pc, v, &ins->shape, best.partial, OP_ADD, best.reduce ? ng : 0,
                                         best.reduce ? size : 1, groups, pc->shd[i]));
}
