/*
 * coll.h: what each collective computes, apart from how the operands
 * travel (runtime-internal). local.c publishes every device's operands
 * (its own devices' in shared memory, other hosts' copied in by the
 * host's leader) and calls these to compute one device's result; they
 * are pure functions of the operands, so the unit tests check them
 * against values worked out by hand (tests/unit/test_coll.c).
 *
 * Groups follow XLA's CollectiveOpGroupMode (ir_group_mode, ir/ir.h); an
 * empty replica_groups is everyone of the mode's domain.
 */
#ifndef TESSEL_COLL_H
#define TESSEL_COLL_H

#include "runtime.h"

/* The devices of one run: N partitions x R replicas. */
typedef struct RtCollWorld {
    int64_t n, r;
    int32_t stream_bound;      /* CollTuning.stream_bound: how results take streaming stores */
} RtCollWorld;

/* The members (global device ids, in group order) of device `me`'s group
 * for collective `ins`, and me's index in it. `members` has room for
 * n * r ids. IR_EINPUT at the instruction when a group names an id out of
 * the mode's range or names `me`'s id twice; a device that no group lists
 * is a group of its own. */
IrStatus rt_coll_group(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, int64_t me, int64_t *members,
                       int32_t *size, int32_t *my_index, IrDiag *d);

/* Every collective of m checked before a replay runs on w's devices:
 * group and pair ids in range and named once, result shapes that fit
 * the group size (IR_EINPUT at the instruction). A replayed program is
 * the user's: what would fail on every device at run time (under mpirun,
 * ending the job) is refused before anything runs. */
IrStatus rt_coll_check_module(const IrModule *m, const RtCollWorld *w, IrDiag *d);

/* The global id device `me` receives from in collective-permute `ins`
 * (source_target_pairs in the mode's ids), or -1 when no pair targets it
 * (its result is then zeros). */
int64_t rt_coll_permute_source(const IrInstr *ins, const RtCollWorld *w, int64_t me);

/* Device `me`'s result of collective `ins` (all-reduce, all-gather,
 * reduce-scatter, all-to-all, collective-permute, collective-broadcast,
 * collective-reduce, ragged-all-to-all; the -start forms are given as
 * their base op with the base op's shape). ops[g] are device g's nopnd
 * operands for every g this device reads (its group's members, the
 * permute source); `reduced` (may be NULL) is an all-reduce's result
 * already combined across hosts for a one-operand all-reduce. Shapes are
 * checked against the group size: a mismatch is IR_EINPUT at the
 * instruction. *out is a new value (a tuple for several operands). */
IrStatus rt_coll_result(const IrModule *m, const IrInstr *ins, const RtCollWorld *w, int64_t me,
                        DevValue *const *const *ops, int32_t nopnd, DevValue *reduced, DevValue **out, IrDiag *d);

/* ---- a group's result computed by all its members at once ----
 *
 * An all-reduce or all-gather of one array operand gives every member
 * of its group the same array, so its members can share the work: member
 * j computes part j (all-reduce: the j-th slice of the elements, reduced
 * over every member's operand in group order; all-gather: member j's
 * block) and writes it into every member's result (or into the one
 * result they share). local.c runs this when the whole group is on the
 * host. */

/* Does the split path apply to `ins` over this group (members in group
 * order, their operands in ops)? One array operand of the same shape on
 * every member, a result shape the group gives, and for an all-reduce a
 * simple reducer rt_coll_combine runs (*op). false: the ordinary path
 * (rt_coll_result, which names what is wrong). */
bool rt_coll_split_ok(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops, const int64_t *members,
                      int32_t size, int32_t nopnd, IrOpcode *op);
/* Part `part` of `size` of the result (rt_coll_split_ok held) written
 * into each of out[0..nout) (arrays of ins's shape); stream: stores
 * around the caches (rt_coll_stream). scratch has room for size + nout
 * pointers. All-reduce parts are slices of whole 64-byte lines (but the
 * last): members never write the same line. Can't fail. */
void rt_coll_split_part(const IrInstr *ins, DevValue *const *const *ops, const int64_t *members, int32_t size,
                        IrOpcode op, int32_t part, DevValue *const *out, int32_t nout, void **scratch, bool stream);

/* ---- the loops (coll_kernels.c) ---- */

/* Collectives that write at least this many bytes store them around the
 * caches (non-temporal stores): half the last-level cache of a typical
 * host, so that what stays cached is what the next kernel reads. */
#define RT_COLL_STREAM_BYTES ((int64_t)16 << 20)
bool rt_coll_stream(int64_t bytes);
/* rt_coll_stream for results out[0..nout); where one of them is from a
 * device's NUMA-binding allocator (DevValue.alloc), only if streaming
 * stores into such memory are at least as fast as ordinary ones on this
 * machine at this size (measured once a process and size class,
 * coll_kernels.c: on one VM of BENCHMARKS.md they ran 10 times slower,
 * on another 2.5 times faster), unless `mode` (CollTuning.stream_bound:
 * COLL_STREAM_ON or _OFF) decides instead. */
bool rt_coll_stream_into(int mode, DevValue *const *out, int32_t nout, int64_t bytes);
/* What the probe decided so far for each size class (16-32 MiB, 32 MiB
 * and more): 1 streams, -1 does not, 0 not measured. */
#define RT_COLL_PROBE_CLASSES COLL_PROBE_CLASSES
void rt_coll_stream_verdicts(int8_t verdict[RT_COLL_PROBE_CLASSES]);
/* rt_coll_combine supports reducer op on type t (dev_red_combine_array's
 * types and ops). */
bool rt_coll_can_combine(IrOpcode op, IrType t);
/* dst[k][doff + i] = src[0][soff + i] op src[1][soff + i] op ... (in
 * order, rounded to t at each step, the bits of dev_red_combine_array)
 * for i < count and every destination k. A destination may be a source
 * at the same offset. false when op on t is unsupported (nsrc > 1) or no
 * source or destination is given. */
bool rt_coll_combine(IrOpcode op, IrType t, void *const *dst, int32_t ndst, int64_t doff, const void *const *src,
                     int32_t nsrc, int64_t soff, int64_t count, bool stream);
/* bytes from src to dst[k] + doff for every destination k (the source
 * read once). */
void rt_coll_copy(void *const *dst, int32_t ndst, size_t doff, const void *src, size_t bytes, bool stream);

/* ---- coll_async.c: a device's collectives in the background ---- */

/* A collective as local.c runs it for device ctx (blocking). */
typedef IrStatus (*RtCollFn)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                             DevValue **out, IrDiag *d);
typedef struct RtAsync RtAsync;
/* One device's queue of started collectives, run by fn(ctx, ...) on a
 * thread of its own made at the first start; NULL on OOM. */
RtAsync *rt_async_new(RtCollFn fn, void *ctx);
/* DevCollectives.start and .wait (device.h) over the queue: start copies
 * ins and takes references to the operands; wait gives the result (or
 * the collective's error, copied into d) and frees the handle. */
IrStatus rt_async_start(RtAsync *a, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                        void **handle, IrDiag *d);
IrStatus rt_async_wait(RtAsync *a, void *handle, DevValue **out, IrDiag *d);
/* Wait until every started collective is done (before a blocking one
 * runs on the executor thread). NULL: nothing. */
void rt_async_drain(RtAsync *a);
/* Stop and join the thread; every handle must have been waited for. */
void rt_async_free(RtAsync *a);

#endif /* TESSEL_COLL_H */
