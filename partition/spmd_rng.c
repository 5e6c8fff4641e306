/*
 * spmd_rng.c: the rng-bit-generator handler.
 *
 * Rule: the state is replicated (every device holds the same key and
 * counter, and the new state is the whole output's: counter + the blocks
 * of the whole shape), and each device's bits are its shard of the bits
 * the unpartitioned op draws, bit for bit. Each device runs the op on the
 * replicated state for the whole output shape and cuts its shard out
 * (dynamic-slice at its partition's offsets, no communication).
 *
 * Why not a per-device counter offset: the counter layout of device/k_rng.c
 * ties elements to counters in ways a shard does not keep. Philox draws
 * 128-bit blocks of four 32-bit words in row-major order, so only a shard
 * that is one contiguous row-major range starting on a block boundary
 * (dim 0 tiled alone, shard size a multiple of 4 words) maps to a counter
 * offset; ThreeFry's 32-bit layout pairs elements 2j, 2j+1 of the first
 * even dimension of the *whole* shape, which a shard's shape may not share
 * (f32[3,5]'s cut dim is 1, a [2,5] shard's would be 0). Those layouts
 * would need the whole output anyway; computing it on every device is the
 * one rule that is exact for all of them (a counter-offset fast path for
 * the contiguous layouts is left for later).
 * Example (2 devices): (u64[2], u32[7,4]) rng-bit-generator(s) with bits
 * {devices=[2,1]0,1}: each device draws u32[7,4] from s, device 0 keeps
 * rows 0-3, device 1 rows 4-6 (and a padding row); the state output is
 * replicated, equal on every device.
 */
#include "spmd_internal.h"

static const IrSharding repl_sharding = {.kind = SHD_REPLICATED};

IrStatus spmd_rng_bit_generator(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (ins->nopnd != 1)
        return spmd_fallback(pc, i);
    int32_t st = operand_as(pc, i, 0, &repl_sharding);
    int32_t v = emit_clone(pc, ins, &ins->shape, 1, &st, 0, NULL);
    return set_val(pc, i, reshard(pc, v, &ins->shape, &repl_sharding, pc->shd[i]));
}
