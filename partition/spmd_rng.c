/*
 * spmd_rng.c: the rng-bit-generator handler.
 *
 * Rule: the state is replicated (every device holds the same key and
 * counter, and the new state is the whole output's: counter + the blocks
 * of the whole shape), and each device's bits are its shard of the bits
 * the unpartitioned op draws, bit for bit.
 *
 * Where the bits are tiled along dim 0 alone, a device's shard is one
 * contiguous range of the counter stream (device/k_rng.c's layouts), so it
 * draws only that range: the op runs on the state with its counter moved
 * to the shard's first block, for a shape no larger than the shard:
 *   - Philox: word w of the output is word w % 4 of block w / 4, row-major
 *     whatever the shape. The device draws a flat run of its elements plus
 *     up to one block's worth before them (its start may fall inside a
 *     block) from counter + start_block (a 128-bit add: a u64[2] state,
 *     whose high counter word is the key, is given as u64[3] {key, lo, hi}
 *     so the carry lands where the whole draw puts it) and cuts its run out.
 *   - ThreeFry, 64-bit elements: element i is threefry(counter + i): the
 *     device draws its elements from counter + its first element.
 *   - ThreeFry, narrower elements: pairs of elements along the whole
 *     shape's first even dim c share one counter. c = 0: a shard of an even
 *     row count starts on a pair and has the same layout (its first even
 *     dim is 0 too). c > 0 (dims before c odd): a row of dim 0 is a
 *     contiguous run of counters, and the device draws its rows with dim 0
 *     made odd (one extra row when its row count is even) so that c stays
 *     the cut, then drops the extra row.
 * Every other layout (tiled beyond dim 0, ThreeFry shapes without an even
 * dim, offsets past 2^31) draws the whole output on each device and cuts
 * its shard out (dynamic-slice at its offsets), which is exact for all.
 * Example (2 devices): (u64[2], u32[8,4]) rng-bit-generator(s),
 * algorithm=rng_philox, bits {devices=[2,1]0,1}: device 1's rows start at
 * word 16, block 4: it draws u32[16 + 3] from {key, lo + 4, key + carry},
 * takes words [0, 16) (its skip is 0) and reshapes them to [4,4]; the new
 * state {key, lo + 8} is computed on every device. Nothing is exchanged.
 */
#include "spmd_internal.h"

#include <string.h>

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

/* How a device draws its shard (see the file comment). */
typedef struct RngPlan {
    int64_t *ctr;        /* per partition: counter offset of its first draw */
    int64_t *skip;       /* per partition: elements drawn before its shard (Philox) */
    IrShape draw;        /* the local op's bits shape */
    int64_t rows;        /* ThreeFry c > 0: rows of the shard kept from the draw */
    bool flat;           /* draw is 1-D: dynamic-slice at skip, reshape to the shard */
} RngPlan;

static bool fits_s32(int64_t v)
{
    return v >= 0 && v <= INT32_MAX;
}

/* The plan for bits `full` under tiled sharding `bs`, or false. */
static bool rng_plan(PComp *pc, bool philox, const IrShape *full, const IrSharding *bs, RngPlan *rp)
{
    IrArena *a = spmd_arena(pc);
    int64_t n = pc->sp->n;
    if (bs->kind != SHD_TILED || shd_has_manual_subgroup(bs) || full->rank < 1 || shd_tiles(bs, 0) < 2)
        return false;
    for (int32_t d = 1; d < full->rank; d++)
        if (shd_tiles(bs, d) > 1)
            return false;
    int64_t rowel = 1;
    for (int32_t d = 1; d < full->rank; d++)
        rowel *= full->dims[d];
    int64_t rs = shd_shard_size(full->dims[0], shd_tiles(bs, 0));
    int64_t *r0 = shd_offset_table(pc, bs, full, 0);
    rp->ctr = ir_alloc_array(a, (size_t)n, sizeof(int64_t));
    rp->skip = ir_alloc_array(a, (size_t)n, sizeof(int64_t));
    if (!r0 || !rp->ctr || !rp->skip)
        return false;
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, full->dims, (size_t)full->rank * sizeof(int64_t));
    dims[0] = rs;
    rp->rows = rs;
    rp->flat = false;
    bool wide = ir_type_size(full->type) == 8;
    if (philox) {
        /* Elements per 128-bit block: 4 words. */
        int64_t per = wide ? 2 : 4, shard = rs * rowel;
        for (int64_t p = 0; p < n; p++) {
            int64_t first = r0[p] * rowel;
            rp->ctr[p] = first / per;
            rp->skip[p] = first % per;
            if (!fits_s32(rp->ctr[p]) || !fits_s32(first))
                return false;
        }
        int64_t len = shard + per - 1;
        rp->flat = true;
        return ir_shape_make(a, &rp->draw, full->type, 1, &len) == IR_OK;
    }
    if (wide) {
        for (int64_t p = 0; p < n; p++) {
            rp->ctr[p] = r0[p] * rowel;
            rp->skip[p] = 0;
            if (!fits_s32(rp->ctr[p]))
                return false;
        }
        return ir_shape_make(a, &rp->draw, full->type, full->rank, dims) == IR_OK;
    }
    int32_t cut = -1;
    for (int32_t d = 0; d < full->rank && cut < 0; d++)
        if (full->dims[d] % 2 == 0)
            cut = d;
    if (cut < 0 || (cut == 0 && rs % 2 != 0))
        return false;
    /* Counters per row of dim 0: the pairs of dim `cut` times the rest. */
    int64_t per_row = 1;
    for (int32_t d = 1; d < full->rank; d++)
        per_row *= d == cut ? full->dims[d] / 2 : full->dims[d];
    if (cut == 0)
        per_row = rowel; /* a pair of rows per rowel counters: r0 / 2 pairs */
    for (int64_t p = 0; p < n; p++) {
        rp->ctr[p] = cut == 0 ? r0[p] / 2 * per_row : r0[p] * per_row;
        rp->skip[p] = 0;
        if (!fits_s32(rp->ctr[p]))
            return false;
    }
    if (cut > 0 && rs % 2 == 0)
        dims[0] = rs + 1;
    return ir_shape_make(a, &rp->draw, full->type, full->rank, dims) == IR_OK;
}

/* u64[] element k of the state vector v (u64[ns]). */
static int32_t state_word(PComp *pc, int32_t v, int64_t k)
{
    int64_t lo = k, hi = k + 1;
    IrShape s = {.type = IR_U64};
    return spmd_emit_reshape(pc, spmd_emit_slice(pc, v, &lo, &hi), &s);
}

/* A u64[len] vector, zero but for the u64[] value x at index k. */
static int32_t at_index(PComp *pc, int32_t x, int64_t k, int64_t len)
{
    int64_t one = 1, lo = k, hi = len - k - 1;
    IrShape s;
    if (ir_shape_make(spmd_arena(pc), &s, IR_U64, 1, &one) != IR_OK)
        return -1;
    return spmd_emit_pad(pc, spmd_emit_reshape(pc, x, &s), spmd_emit_scalar_const(pc, IR_U64, 0), &lo, &hi);
}

/* state + (0, add_lo, carry...): the counter moved by add_lo (u64[]),
 * with Philox's 128-bit carry into word 2 when `carry`; a u64[2] state of
 * Philox is widened to u64[3] {key, lo, key + carry} (the file comment). */
static int32_t moved_state(PComp *pc, int32_t st, int64_t ns, int32_t add_lo, bool philox, bool widen)
{
    int32_t lo = state_word(pc, st, 1);
    int32_t nlo = spmd_emit_binary(pc, OP_ADD, lo, add_lo);
    int64_t len = widen ? 3 : ns;
    int32_t v = st;
    if (widen) {
        int64_t z = 0, one = 1;
        v = spmd_emit_pad(pc, st, spmd_emit_scalar_const(pc, IR_U64, 0), &z, &one);
        /* word 2 (0 after the pad) becomes the key: the high counter word */
        v = spmd_emit_binary(pc, OP_ADD, v, at_index(pc, state_word(pc, st, 0), 2, 3));
    }
    v = spmd_emit_binary(pc, OP_ADD, v, at_index(pc, add_lo, 1, len));
    if (philox && len >= 3) {
        int32_t carry = spmd_emit_convert(pc, spmd_emit_compare(pc, nlo, lo, CMP_LT), IR_U64);
        v = spmd_emit_binary(pc, OP_ADD, v, at_index(pc, carry, 2, len));
    }
    return v;
}

/* The whole op's new state, as device/k_rng.c writes it: counter + the
 * counters the whole output used (Philox: its blocks, 128-bit). */
static int32_t whole_new_state(PComp *pc, int32_t st, int64_t ns, bool philox, const IrShape *full)
{
    int64_t e = ir_shape_elements(full), used;
    bool wide = ir_type_size(full->type) == 8;
    if (philox) {
        used = ((wide ? 2 * e : e) + 3) / 4;
    } else if (wide) {
        used = e;
    } else {
        int32_t cut = 0;
        while (cut < full->rank && full->dims[cut] % 2 != 0)
            cut++;
        used = e / full->dims[cut] * ((full->dims[cut] + 1) / 2);
    }
    /* u64 from s32 constants: used = q * 2^30 + r. */
    int64_t unit = (int64_t)1 << 30;
    int32_t q = spmd_emit_convert(pc, spmd_emit_s32(pc, used / unit), IR_U64);
    int32_t add = spmd_emit_binary(pc, OP_ADD, spmd_emit_binary(pc, OP_MULTIPLY, q, spmd_emit_convert(pc, spmd_emit_s32(pc, unit), IR_U64)),
                              spmd_emit_convert(pc, spmd_emit_s32(pc, used % unit), IR_U64));
    return moved_state(pc, st, ns, add, philox, false);
}

/* The shard drawn on its own (rp), with the whole op's new state. */
static IrStatus draw_shard(PComp *pc, int32_t i, const RngPlan *rp, bool philox, const IrShape *full,
                           const IrSharding *bs)
{
    const IrInstr *ins = &pc->sc->instr[i];
    IrArena *a = spmd_arena(pc);
    bool bits_only = ins->shape.type != IR_TUPLE;
    int32_t st = spmd_operand_as(pc, i, 0, &repl_sharding);
    const IrShape *ss = &pc->sc->instr[ins->opnd[0]].shape;
    int64_t ns = ss->dims[0];
    bool widen = philox && ns == 2;
    int32_t ctr = spmd_emit_convert(pc, spmd_emit_table_lookup(pc, rp->ctr), IR_U64);
    int32_t local_state = moved_state(pc, st, ns, ctr, philox, widen);
    IrShape ls, shapes[2];
    int64_t lns = widen ? 3 : ns;
    if (ir_shape_make(a, &shapes[0], IR_U64, 1, &lns) != IR_OK)
        return IR_ENOMEM;
    shapes[1] = rp->draw;
    if (ir_shape_make_tuple(a, &ls, 2, shapes) != IR_OK)
        return IR_ENOMEM;
    int32_t r = spmd_emit_clone(pc, ins, &ls, 1, &local_state, 0, NULL);
    int32_t bits = spmd_emit_gte(pc, r, 1);
    IrShape shard;
    if (shd_shard_shape(a, full, bs, &shard) != IR_OK)
        return IR_ENOMEM;
    if (rp->flat) {
        int64_t len = ir_shape_elements(&shard);
        int32_t skip = spmd_emit_table_lookup(pc, rp->skip);
        bits = spmd_emit_reshape(pc, spmd_emit_dynamic_slice(pc, bits, &skip, &len), &shard);
    } else if (rp->draw.dims[0] != rp->rows) {
        int64_t lo[IR_MAX_RANK] = {0}, hi[IR_MAX_RANK];
        memcpy(hi, shard.dims, (size_t)shard.rank * sizeof(int64_t));
        bits = spmd_emit_slice(pc, bits, lo, hi);
    }
    if (bits_only)
        return spmd_set_val(pc, i, bits);
    int32_t el[2] = {whole_new_state(pc, st, ns, philox, full), bits};
    int32_t t = spmd_emit_tuple(pc, 2, el);
    IrSharding *have[2] = {(IrSharding *)&repl_sharding, (IrSharding *)bs};
    IrSharding *hs = shd_tuple(a, 2, have);
    return spmd_set_val(pc, i, hs ? spmd_reshard(pc, t, &ins->shape, hs, pc->shd[i]) : -1);
}

IrStatus spmd_rng_bit_generator(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (ins->nopnd != 1)
        return spmd_fallback(pc, i);
    const IrShape *ss = &pc->sc->instr[ins->opnd[0]].shape;
    bool bits_only = ins->shape.type != IR_TUPLE;
    const IrShape *full = bits_only ? &ins->shape : ins->shape.ntuple == 2 ? &ins->shape.tuple[1] : NULL;
    const IrSharding *bs = !full ? NULL : bits_only ? pc->shd[i]
                                     : shd_tuple_element(spmd_arena(pc), pc->shd[i], &ins->shape, 1);
    const char *alg = ins->a.x->rng_algorithm ? ins->a.x->rng_algorithm : "rng_default";
    bool philox = strcmp(alg, "rng_three_fry") != 0;
    RngPlan rp;
    if (full && bs && ss->type == IR_U64 && ss->rank == 1 && ss->dims[0] >= 2 && ir_shape_is_array(full) &&
        ir_type_size(full->type) >= 1 && rng_plan(pc, philox, full, bs, &rp))
        return draw_shard(pc, i, &rp, philox, full, bs);
    /* Whole output on every device, each cutting its shard out. */
    int32_t st = spmd_operand_as(pc, i, 0, &repl_sharding);
    int32_t v = spmd_emit_clone(pc, ins, &ins->shape, 1, &st, 0, NULL);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, &repl_sharding, pc->shd[i]));
}
