/*
 * spmd_internal.h: what the partitioner's files share: the partitioning
 * context, the instruction builders (spmd_emit.c), resharding (reshard.c)
 * and the op-family handlers (spmd_*.c). Not part of the layer's API.
 *
 * Files:
 *   spmd.c          the driver: one pass over each computation
 *   spmd_emit.c     the instruction builders (spmd_emit_*), the collectives in
 *                   XLA's syntax, spmd_oom
 *   reshard.c       resharding between any two shardings
 *   reshard_cache.c a value resharded once per target in a computation
 *   spmd_why.c      why each collective is there (Spmd.why, the plan's reasons)
 *   spmd_why_need.c what an op does with the operand dim it cannot take split
 *   spmd_partial.c  partial results finished: all-reduce, or reduce-scatter
 *                   where the result ends sharded
 *   spmd_sink.c     transpose(all-reduce(dot)) made all-reduce(transpose(dot)),
 *                   which the executor runs as one GEMM and the all-reduce
 *   spmd_swap.c     a dot read only through transposes, its operands swapped
 *                   where both were transposed GEMM operands (q/k/v)
 *   spmd_ops.c      elementwise ops, parameters, constants, iota, tuples,
 *                   the data-movement ops (broadcast ... sort), bitcast-convert
 *   spmd_dot.c      dot
 *   spmd_conv.c     convolution, and the halo exchange reduce-window shares
 *   spmd_window.c   reduce-window, select-and-scatter
 *   spmd_reduce.c   reduce
 *   spmd_gather.c   gather, scatter
 *   spmd_local.c    fft, topk, cholesky, triangular-solve (trailing dims whole)
 *   spmd_norm.c     batch-norm-training, -inference, -grad
 *   spmd_ragged.c   ragged-dot
 *   spmd_rng.c      rng-bit-generator
 *   spmd_control.c  while, conditional, call; the sharding custom-calls
 *   spmd_async.c    async-start/-update/-done and the sugared OP-start forms
 *
 * The partitioned program is built instruction by instruction into a new
 * module. Each source instruction i of a computation being partitioned gets
 * one value in the new computation, val[i], which holds this device's shard
 * of i under shd[i] (the sharding propagation gave it): a per-device shape
 * whose tiled dims are ceil(D/t). Shards at the end of an uneven dimension
 * are padded, and the padding holds arbitrary values: every handler whose
 * result could depend on padding (reductions, contractions) masks it first.
 */
#ifndef TESSEL_SPMD_INTERNAL_H
#define TESSEL_SPMD_INTERNAL_H

#include "partition.h"

typedef struct Spmd Spmd;
typedef struct SpmdReshardCache SpmdReshardCache;

/* One computation being partitioned (the entry, or a while/conditional/call
 * body partitioned for its call site). */
typedef struct PComp {
    Spmd *sp;
    const IrComputation *sc;   /* source */
    IrComputation *dc;         /* destination */
    int32_t *val;              /* source instr -> destination instr (-1: not yet) */
    const IrSharding **shd;    /* effective sharding of each source instr */
    int32_t pid;               /* s32[] partition id in dc, -1 until first use */
    int32_t cur;               /* source instr being partitioned (the root when finishing), -1 before */
    SpmdReshardCache *reshards; /* operands resharded so far (reshard_cache.c), NULL until one */
} PComp;

/* The groups shd_groups_along computed for a sharding whose devices are the
 * shared iota table, and the replica groups set_groups built from them.
 * Every collective that asks again (each of a 50-layer MLP's all-reduces)
 * gets the same read-only arrays, so the partitioner's cost grows with the
 * collectives plus the devices, not their product. */
typedef struct SpmdGroupsMemo {
    int32_t ntile, ndims;
    int64_t tile[IR_MAX_RANK + 2], dims[IR_MAX_RANK + 2];
    int64_t ndevices;
    int32_t ngroups, size;
    int64_t *groups;           /* ngroups*size, in the destination arena */
    IrReplicaGroups rg;        /* rg.present once set_groups built it */
} SpmdGroupsMemo;

struct Spmd {
    const IrModule *src;
    IrModule *dst;
    int64_t n;                 /* partitions */
    int64_t r;                 /* replicas */
    double link_bytes_us;      /* SpmdOptions.link_gbps in bytes a microsecond */
    IrDiag *d;
    int32_t *scalar_comp;      /* src comp -> dst clone for reducers etc., -1 until cloned */
    int64_t next_channel;
    int32_t reducer[OP_COUNT][IR_NTYPES]; /* cached scalar reducer computations, -1 */
    SpmdReport *report;
    IrArena *tmp;              /* scratch of one entry instruction, see spmd_tmp */
    int32_t depth;             /* computations being partitioned (1: the entry) */
    SpmdSite site;             /* what is being partitioned, for the report */
    SpmdWhy why;               /* why the collectives emitted now are (spmd_why.c; texts in tmp) */
    SpmdGroupsMemo *memo;      /* in the destination arena */
    int32_t nmemo;
    int64_t capmemo;
};

/* ---- spmd_emit.c: building instructions in a destination computation ---- */

/* Record "out of memory while partitioning" in pc's diag: spmd_oom returns
 * IR_ENOMEM (for handlers), spmd_oom_value -1 (for emitters, which return
 * an instruction index). */
IrStatus spmd_oom(PComp *pc);
int32_t spmd_oom_value(PComp *pc);

IrArena *spmd_arena(PComp *pc);
/* The site with its names copied into arena a (the report's). */
SpmdSite spmd_site_copy(IrArena *a, const SpmdSite *s);
/* Scratch memory for what lives while one instruction is partitioned:
 * shardings a handler computes (operand targets, iteration tilings) and
 * shapes handed to spmd_emit* (which copy them). Reset after each instruction of
 * the entry computation (a nested computation, partitioned inside its call
 * site's handler, shares its call site's scratch), so a large module does
 * not keep every intermediate sharding. Never for anything an emitted
 * instruction points to (literals, attribute lists, replica groups). */
IrArena *spmd_tmp(PComp *pc);
/* Generic: an instruction with opcode, shape, operands; attributes zeroed
 * (group counts 1). Returns its index or -1 (OOM recorded in sp->d). */
int32_t spmd_emit(PComp *pc, IrOpcode op, const IrShape *shape, int32_t nopnd, const int32_t *opnd);
/* Emit a copy of a source instruction with new operands and shape; called
 * computations are mapped with `called` (may be NULL to keep none). */
int32_t spmd_emit_clone(PComp *pc, const IrInstr *src, const IrShape *shape, int32_t nopnd,
                   const int32_t *opnd, int32_t ncalled, const int32_t *called);
const IrShape *spmd_val_shape(PComp *pc, int32_t v);
int32_t spmd_emit_s32(PComp *pc, int64_t value);                    /* s32[] constant */
int32_t spmd_emit_scalar_const(PComp *pc, IrType t, double value);   /* T[] constant */
/* T[] constant: the identity of the simple reducer op (ir_identity_*),
 * exact in every type (u64 all-ones included). */
int32_t spmd_emit_identity_const(PComp *pc, IrType t, IrOpcode op);
int32_t spmd_emit_const_bytes(PComp *pc, const IrShape *shape, const void *bytes, int64_t nbytes);
int32_t spmd_emit_partition_id(PComp *pc);                          /* s32[] */
/* s32[] value of table[partition id] (a constant table indexed by partition). */
int32_t spmd_emit_table_lookup(PComp *pc, const int64_t *table);
int32_t spmd_emit_broadcast(PComp *pc, int32_t v, const IrShape *shape, int32_t ndims, const int64_t *dims);
int32_t spmd_emit_reshape(PComp *pc, int32_t v, const IrShape *shape);
int32_t spmd_emit_convert(PComp *pc, int32_t v, IrType t);
int32_t spmd_emit_binary(PComp *pc, IrOpcode op, int32_t a, int32_t b);
int32_t spmd_emit_unary(PComp *pc, IrOpcode op, int32_t a);
int32_t spmd_emit_compare(PComp *pc, int32_t a, int32_t b, IrCmpDir dir);
/* reduce of v over `dims` with the simple reducer `red`, init its identity. */
int32_t spmd_emit_reduce(PComp *pc, int32_t v, IrOpcode red, int32_t ndims, const int64_t *dims);
int32_t spmd_emit_select(PComp *pc, int32_t p, int32_t a, int32_t b);
int32_t spmd_emit_iota(PComp *pc, const IrShape *shape, int64_t dim);
int32_t spmd_emit_slice(PComp *pc, int32_t v, const int64_t *start, const int64_t *limit);
int32_t spmd_emit_pad(PComp *pc, int32_t v, int32_t padval, const int64_t *lo, const int64_t *hi);
/* dynamic-slice of v at scalar s32 start values (one per dim) to sizes. */
int32_t spmd_emit_dynamic_slice(PComp *pc, int32_t v, const int32_t *starts, const int64_t *sizes);
int32_t spmd_emit_gte(PComp *pc, int32_t v, int32_t index);
int32_t spmd_emit_tuple(PComp *pc, int32_t n, const int32_t *vals);
/* Scalar reducer computation (add, max, ...) of type t in the destination. */
int32_t spmd_reducer(Spmd *sp, IrOpcode op, IrType t);
/* Destination index of a source scalar computation (cloned on first use). */
int32_t spmd_scalar_comp(Spmd *sp, int32_t src_comp);

/* Replica groups: `ngroups` groups of `size` partition ids; emitted with
 * use_global_device_ids=true, so repeated for every replica with offset
 * replica * n. */
int32_t spmd_emit_all_gather(PComp *pc, int32_t v, int64_t dim, int32_t ngroups, int32_t size,
                        const int64_t *groups);
int32_t spmd_emit_all_reduce(PComp *pc, int32_t v, IrOpcode reducer, int32_t ngroups, int32_t size,
                        const int64_t *groups);
/* Reduce-scatter of v along `dim` (its size a multiple of `size`): member j
 * of each group gets the j-th block of the group's combination. */
int32_t spmd_emit_reduce_scatter(PComp *pc, int32_t v, IrOpcode reducer, int64_t dim, int32_t ngroups, int32_t size,
                            const int64_t *groups);
int32_t spmd_emit_all_to_all(PComp *pc, int32_t v, int64_t split_dim, int64_t concat_dim,
                        int32_t ngroups, int32_t size, const int64_t *groups);
int32_t spmd_emit_collective_permute(PComp *pc, int32_t v, int32_t npairs, const int64_t *pairs);

/* Groups of a tiled sharding along data dims `dims`: devices that share all
 * other tile coordinates, each group in row-major order over `dims`.
 * Allocates *groups (ngroups*size) in the destination arena, or returns the
 * memoized groups (read-only) when the devices are the iota table. */
bool shd_groups_along(PComp *pc, const IrSharding *s, int32_t ndims, const int64_t *dims,
                      int32_t *ngroups, int32_t *size, int64_t **groups);
/* Table over partition ids: the offset of the device's shard along data dim d. */
int64_t *shd_offset_table(PComp *pc, const IrSharding *s, const IrShape *full, int32_t d);
/* This device's offset in dim d of `full` under s, as an s32[] scalar:
 * spmd_emit_table_lookup of shd_offset_table, or, for devices listed 0..n-1
 * (ir_iota_table), the arithmetic on partition-id straight away, in
 * O(1) rather than a pass over every device. */
int32_t spmd_emit_offset(PComp *pc, const IrSharding *s, const IrShape *full, int32_t d);

/* ---- reshard.c ---- */

/* The value `v` holds a shard of a value of logical shape `full` under
 * `from`; return a value holding its shard under `to` (v itself when they
 * are the same). Tuples are resharded leaf by leaf. -1 on error. */
int32_t spmd_reshard(PComp *pc, int32_t v, const IrShape *full, const IrSharding *from,
                const IrSharding *to);
/* Estimated bytes a device receives to reshard `full` from `from` to `to`. */
int64_t spmd_reshard_cost(const IrShape *full, const IrSharding *from, const IrSharding *to);
/* The source operand `k` of source instruction `i`, resharded to `to`:
 * the value an earlier operand of this computation resharded to `to`
 * already, where one did (reshard_cache.c). */
int32_t spmd_operand_as(PComp *pc, int32_t i, int32_t k, const IrSharding *to);
/* Replace padding of a tiled value along tiled dims with the scalar value
 * `fill` (a dst instr of the element type): needed before reductions. */
int32_t spmd_mask_padding(PComp *pc, int32_t v, const IrShape *full, const IrSharding *s, int32_t fill);
/* Identity element of a simple reducer for type t (sum 0, max -inf, ...). */

/* ---- reshard_cache.c: one reshard per (value, target) in a computation ---- */

/* The destination value source instr o was resharded to `to` as, or -1. */
int32_t spmd_reshard_cached(const PComp *pc, int32_t o, const IrSharding *to);
/* Remember that o resharded to `to` is `result` (nothing for result < 0). */
void spmd_reshard_remember(PComp *pc, int32_t o, const IrSharding *to, int32_t result);
void spmd_reshard_cache_free(PComp *pc);

/* ---- spmd_why.c: why each collective is there ---- */

/* Each sets Spmd.why for the collectives emitted next (texts in the
 * scratch arena) and returns the reason it replaces: the caller puts it
 * back with spmd_why_restore when done. Out of memory leaves a reason
 * without text (the plan then says less; the program is the same).
 * spmd_why_operand: operand o of source instr i resharded to `to`;
 * spmd_why_output: the root moved from `from` to the result sharding
 * `to`; spmd_why_result: the handler's result of pc->cur moved from
 * `from` to its sharding `to` (set only where no reason is set). */
SpmdWhy spmd_why_operand(PComp *pc, int32_t i, int32_t o, const IrSharding *to);
SpmdWhy spmd_why_output(PComp *pc, int32_t root, const IrSharding *from, const IrSharding *to);
SpmdWhy spmd_why_result(PComp *pc, const IrSharding *from, const IrSharding *to);
void spmd_why_restore(PComp *pc, SpmdWhy old);
/* Append to b, in parentheses, what source instr ins does with the dim of
 * its operand o (a source instr index) that pc->shd[o] splits and `to`
 * does not: " (it sorts along dim 1, which is tiled over 4 devices)";
 * nothing where the shardings are tuples or the operand a scalar
 * (spmd_why_need.c). */
void spmd_why_need(const PComp *pc, IrStrBuf *b, const IrInstr *ins, int32_t o, const IrSharding *to);
/* The reason of collective `coll` just emitted, moving `bytes` per device,
 * with its texts in `arena`: Spmd.why finished with what the collective
 * does, or where none is set the rule of pc->cur (partial results
 * combined, a halo, a gather). */
SpmdWhy spmd_why_of(PComp *pc, const IrInstr *coll, int64_t bytes, IrArena *arena);

/* ---- spmd_sink.c: transposes before the all-reduces they read ---- */

/* In computation c of the partitioned module, each transpose whose
 * operand is an all-reduce (its one use) of a dot (its one use) whose
 * free dims it swaps trades places with the all-reduce (*moved: how many);
 * IR_ENOMEM. */
IrStatus spmd_sink_transposes(IrComputation *c, int32_t *moved);

/* ---- spmd_swap.c: dots read only through transposes, operands swapped ---- */

/* In computation c of the partitioned module (arena: its module's), each
 * dot whose every use is a transpose and whose GEMM would read both
 * operands transposed computes dot(rhs, lhs) instead, its users' permutations
 * composed with the swap (*swapped: how many); IR_ENOMEM. */
IrStatus spmd_swap_dots(IrArena *arena, IrComputation *c, int32_t *swapped);

/* ---- spmd_partial.c: finishing partial results ---- */

/* v holds this device's partial value of a value of logical shape `full`
 * (its shard under `partial`); the members of each of the `ng` groups of
 * `size` partition ids hold partial values of one tile, combined with the
 * simple reducer `red`. Returns the combined value's shard under `to`:
 * reduce-scatters (and an all-reduce over copies) where `to` cuts each
 * group's tile among its members, else an all-reduce and a reshard. -1 on
 * error (recorded). */
int32_t spmd_finish_partial(PComp *pc, int32_t v, const IrShape *full, const IrSharding *partial, IrOpcode red,
                       int32_t ng, int32_t size, const int64_t *groups, const IrSharding *to);
/* Would spmd_finish_partial use reduce-scatters? */
bool spmd_finish_partial_scatters(PComp *pc, const IrShape *full, const IrSharding *partial, int32_t ng, int32_t size,
                             const int64_t *groups, const IrSharding *to);
/* Estimated bytes a device receives in spmd_finish_partial: exact for the
 * reduce-scatters; an all-reduce counts 2x its buffer, plus spmd_reshard_cost. */
int64_t spmd_finish_partial_cost(PComp *pc, const IrShape *full, const IrSharding *partial, int32_t ng, int32_t size,
                            const int64_t *groups, const IrSharding *to);

/* ---- spmd_reduce.c ---- */

/* f16, bf16 and the f8/f4 kinds: sums of them (a reduce with add, a dot
 * whose contracting dims are tiled) carry each device's partial and the
 * all-reduce in f32, and round to the type once. */
bool spmd_narrow_float(IrType t);

/* ---- spmd_conv.c: halo exchange along a windowed dim ---- */

/* How one tiled dim of a windowed op's input is extended with its
 * neighbours' rows (see spmd_conv.c for the rule and an example). */
typedef struct SpmdHalo {
    int64_t t, in, si, so;     /* tiles, input size, input/output shard sizes */
    int64_t L;                 /* rows the local op reads per device */
    int64_t lo, hi;            /* rows added on the left / right */
    int64_t lo_ex, hi_ex;      /* of which exchanged with the neighbours */
    int64_t stride, pad_lo;
    bool gathered;             /* the whole dim is gathered first (spmd_conv.c: wide windows) */
    int64_t pad_hi;            /* gathered: rows padded after the input */
} SpmdHalo;
/* Plan the halo of an input dim of size `in` (output size `out`, `t`
 * tiles) under window dim `w`; false when it cannot be done (base
 * dilation, or valid outputs needing data beyond a neighbour's shard). */
bool spmd_halo_plan(int64_t in, int64_t out, int64_t t, const IrWindowDim *w, SpmdHalo *h);
/* Extend v (this device's shard under s, tiled on data dim d) by its halo,
 * rows outside the logical input set to the scalar `padval`, and slice the
 * L rows this device's output shard reads: run the op with no padding on d
 * afterwards. -1 on error (recorded). */
int32_t spmd_halo(PComp *pc, int32_t v, const IrSharding *s, int32_t d, const SpmdHalo *h,
                  int32_t padval);

/* ---- handlers (spmd_*.c): partition source instruction i ---- */

IrStatus spmd_fallback(PComp *pc, int32_t i);
IrStatus spmd_elementwise(PComp *pc, int32_t i);
IrStatus spmd_parameter(PComp *pc, int32_t i);
IrStatus spmd_constant(PComp *pc, int32_t i);
IrStatus spmd_iota(PComp *pc, int32_t i);
IrStatus spmd_tuple(PComp *pc, int32_t i);
IrStatus spmd_broadcast(PComp *pc, int32_t i);
IrStatus spmd_transpose(PComp *pc, int32_t i);
IrStatus spmd_reshape(PComp *pc, int32_t i);
IrStatus spmd_bitcast_convert(PComp *pc, int32_t i);
IrStatus spmd_slice(PComp *pc, int32_t i);
IrStatus spmd_pad(PComp *pc, int32_t i);
IrStatus spmd_concatenate(PComp *pc, int32_t i);
IrStatus spmd_reverse(PComp *pc, int32_t i);
IrStatus spmd_dynamic_slice(PComp *pc, int32_t i);
IrStatus spmd_dot(PComp *pc, int32_t i);
IrStatus spmd_convolution(PComp *pc, int32_t i);
IrStatus spmd_reduce_window(PComp *pc, int32_t i);
IrStatus spmd_reduce(PComp *pc, int32_t i);
IrStatus spmd_sort(PComp *pc, int32_t i);
IrStatus spmd_control(PComp *pc, int32_t i);
IrStatus spmd_custom_call(PComp *pc, int32_t i);
IrStatus spmd_gather(PComp *pc, int32_t i);    /* spmd_gather.c */
IrStatus spmd_scatter(PComp *pc, int32_t i);
IrStatus spmd_local_batch(PComp *pc, int32_t i); /* spmd_local.c: fft, topk, linalg */
IrStatus spmd_local_batch_custom(PComp *pc, int32_t i); /* spmd_local.c: QR, LU custom-calls */
IrStatus spmd_batch_norm(PComp *pc, int32_t i);  /* spmd_norm.c */
IrStatus spmd_async(PComp *pc, int32_t i);       /* spmd_async.c */
IrStatus spmd_ragged_dot(PComp *pc, int32_t i);  /* spmd_ragged.c */
IrStatus spmd_rng_bit_generator(PComp *pc, int32_t i); /* spmd_rng.c */
/* Partition computation `comp` of the source for a call site whose
 * parameters have shardings `param_shd` and whose root must end with
 * `root_shd`; returns the destination computation index or -1. */
int32_t spmd_partition_computation(Spmd *sp, int32_t comp, const IrSharding *const *param_shd,
                                   const IrSharding *root_shd);

/* Record the result of source instr i (the value under shd[i]). */
IrStatus spmd_set_val(PComp *pc, int32_t i, int32_t v);

#endif /* TESSEL_SPMD_INTERNAL_H */
