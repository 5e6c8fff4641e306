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
