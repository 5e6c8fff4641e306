/*
 * coll.h: layer `coll/`: the collectives, apart from the devices that run
 * them (runtime/local.c's threads) and the programs that call them. One
 * file per collective, each with its in-host step (the devices of one
 * host, in shared memory) and its across-hosts step (hierarchical: the
 * host's devices combined locally, one transport call a host, spread
 * locally), a comment drawing the data at each step; under them the
 * CollTransport interface with two implementations: MPI (mpi_*.c, one rank
 * a host) and the loopback (loopback.c, simulated hosts for tests).
 * This header reads as a table of contents, one section per file:
 *
 *   tuning.c          the tuning of a run (CollTuning) with its defaults; the one
 *                     file of the library that reads the environment (the MPI
 *                     launcher's variables only)
 *   (transport)       CollTransport, the interface to the other hosts
 *   steps.c           a host's devices at one collective (CollHost, CollDevice):
 *                     publish, barriers, the leader's across-hosts step, shared
 *                     results, the hooks a device's executor calls; the checks
 *                     of the direct path across hosts (one device a host)
 *   group.c           each device's group (replica_groups, modes), module checks
 *   result.c          one device's result from its group's operands; the split
 *                     path of a group wholly on the host
 *   allreduce.c       all-reduce, collective-reduce
 *   allgather.c       all-gather; every operand to the color's hosts (the
 *                     fallback of the others)
 *   reduce_scatter.c  reduce-scatter
 *   alltoall.c        all-to-all (dimension, tuple, ragged)
 *   permute.c         collective-permute
 *   broadcast.c       collective-broadcast
 *   p2p.c             point to point: operands to the hosts that read them;
 *                     send and recv between devices
 *   kernels.c         the loops: combine, copy, streaming stores and their probe
 *   async.c           a device's -start/-done collectives on a thread of its own
 *   loopback.c        the loopback transport: simulated hosts as threads
 *   (the MPI transport: the last section; its files share mpi_internal.h)
 *   mpi_world.c       the world: init (or attach to the caller's communicator),
 *                     end, the tuning from rank 0, agreement on failures,
 *                     statistics across ranks, ending the job
 *   mpi_transport.c   CollTransport over MPI: group communicators, all-gather,
 *                     all-reduce (built-in and any reducer), reduce-scatter,
 *                     point to point, gathers of any size
 *   mpi_pipeline.c    large buffers point to point in chunks
 *   mpi_shm.c         the all-reduce through shared memory where every rank
 *                     is on one host
 *   mpi_heartbeat.c   the heartbeat, check-ins, the polling wait of every
 *                     collective (watching calls stuck in MPI), a watchdog
 *   mpi_layer.c       every MPI call through one door, with failure injection
 *                     (mpi_layer.h)
 *
 * The trip of one all-reduce from ts_plan_run (the others differ only in
 * their file and transport function), in three places: the runtime's
 * call site, the collective's file, the transport; between them steps.c
 * (what every collective shares) and result.c (the in-host dispatch):
 *
 *   api/run.c ts_plan_run (api/run_mpi.c under mpirun, which passes
 *     coll_mpi_transport) -> runtime/local.c rt_run_devices (directly,
 *     or at each cluster call of runtime/host_program.c): one thread a
 *     local device (device_main), each running dev_execute with the
 *     hooks of coll_device_start (its DevExecOptions.coll)
 *   the executor meets the all-reduce -> steps.c run_collective ->
 *     coll_collective: publish the operands, barrier (every local device
 *     is in the same collective)
 *   only when the group spans hosts, the host's leader device:
 *     steps.c leader_exchange -> allreduce.c coll_allreduce_across
 *     (combine the host's members, then one transport call a host) ->
 *     CollTransport.allreduce_into / allreduce_in / allreduce_any_in:
 *     mpi_pipeline.c cmpi_allreduce_into, mpi_transport.c cmpi_allreduce_in
 *     (under mpirun; loopback.c in tests); barrier
 *   every device: steps.c group_result -> result.c coll_result ->
 *     allreduce.c coll_allreduce_part (the loops of kernels.c), or the
 *     split path when the whole group is on the host; a last barrier
 *     before the operands may be freed
 *
 * Library code: never prints, never exits (but coll_mpi_abort, which
 * ends the job); errors are IrStatus with an IrDiag. May use ir/ and
 * device/ (values, reducers); MPI in the mpi_*.c files only (the
 * collectives reach other hosts through CollTransport, the runtime
 * through the MPI transport's section below).
 */
#ifndef TESSEL_COLL_COLL_H
#define TESSEL_COLL_COLL_H

#include "../device/device.h"
#include "../ir/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* tuning.c                                                           */
/* ------------------------------------------------------------------ */

/* The tuning of a run: TsTuning (include/tessel.h) field for field, which
 * says what each does. All zero: the defaults. */
enum { COLL_STREAM_MEASURE = 0, COLL_STREAM_ON = 1, COLL_STREAM_OFF = 2 };
enum { COLL_FUSION_DEFAULT = 0, COLL_FUSION_OFF = 1, COLL_FUSION_ALL = 2 };
typedef struct CollTuning {
    int64_t piece_bytes, chunk_bytes, pipeline_bytes, copies_bytes;
    int32_t stream_bound;      /* COLL_STREAM_* */
    int32_t fusion;            /* COLL_FUSION_* */
    int32_t fusion_block;
    int64_t fail_mpi_after, skip_collective_after;
    bool fail_one_rank;
    int32_t fail_rank;
} CollTuning;

/* Size classes of the streaming-store probe (16-32 MiB, 32 MiB and more). */
#define COLL_PROBE_CLASSES 2

/* An in-host all-reduce/all-gather's own result copies, at most (coll_copies_bytes's default). */
#define COLL_COPIES_BYTES ((int64_t)256 << 20)

/* The values in effect (t may be NULL: the defaults): the largest MPI
 * message (1 GiB default and most); a pipelined chunk (512 KiB where
 * chunks are combined, else a piece; at most a piece, at least 1); the
 * smallest buffer that goes pipelined (256 KiB; at most a piece); the
 * bytes of result copies an in-host group may make (256 MiB). */
size_t coll_piece_bytes(const CollTuning *t);
size_t coll_chunk_bytes(const CollTuning *t, bool combine);
size_t coll_pipeline_bytes(const CollTuning *t);
int64_t coll_copies_bytes(const CollTuning *t);

/* True when this process was started by an MPI launcher (Open MPI, PMI,
 * PMIx variables). */
bool coll_launched(void);
/* This process's rank as its launcher says (OMPI_COMM_WORLD_RANK,
 * PMIX_RANK, PMI_RANK), -1 when none is set: for messages before
 * MPI_Comm_rank has answered, and for fail_one_rank. */
int coll_launcher_rank(void);

/* ------------------------------------------------------------------ */
/* The transport: how a host's collectives reach the other hosts       */
/* ------------------------------------------------------------------ */

/* A collective's replica groups seen from the hosts: color[h] for every
 * host h (hosts of the same color hold members of a common group, -1 a
 * host whose groups are all its own: coll_host_colors). Every host calls
 * each function below at the same collective with the same color array
 * (so that every host checks in: the MPI transport's heartbeat compares
 * them); data moves only among the hosts of one color. `kind` names the
 * collective for the byte counters; `what` (the same on every host) is
 * what a check-in compares. The host's leader device calls them, one at
 * a time. A failure is returned; the caller must then end the job, since
 * the other hosts may wait in the same collective.
 *
 * Two implementations: MPI (mpi_transport.c: one rank a host, pipelined
 * point to point for large buffers, a heartbeat) and the loopback
 * (coll/loopback.c: simulated hosts as threads of one process, for tests). */
typedef enum CollXferKind {
    COLL_XK_ALL_REDUCE, COLL_XK_ALL_GATHER, COLL_XK_REDUCE_SCATTER, COLL_XK_ALL_TO_ALL, COLL_XK_PERMUTE,
    COLL_XK_BROADCAST, COLL_XK_OTHER, COLL_XK_COUNT
} CollXferKind;
/* "all-reduce", ... (static text). */
const char *coll_xfer_kind_name(CollXferKind k);

/* A reducer computation of any kind (an HLO to_apply), for all-reduces
 * no built-in operation fits (dev_red_call combines). */
typedef struct CollReducer {
    const IrModule *m;
    int32_t comp;
    bool commute;            /* dev_red_commutes: else hosts combine in host order */
} CollReducer;

/* One block to or from one host. */
typedef struct CollXfer {
    int host;
    void *buf;
    size_t bytes;
} CollXfer;

typedef struct CollTransport CollTransport;
struct CollTransport {
    /* Every host of the color contributes `bytes`; recv gets k * bytes
     * for the k hosts of the color, in host order (nothing moves for a
     * host of color -1). */
    IrStatus (*allgather_in)(CollTransport *t, const int32_t *color, CollXferKind kind, const void *send,
                             size_t bytes, void *recv, IrDiag *d);
    /* In place: buf[i] = op over the color's hosts (in host order) of
     * buf[i], count elements of ty; op a simple reducer builtin_op takes.
     * count may differ between colors. */
    IrStatus (*allreduce_in)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what, void *buf,
                             int64_t count, IrType ty, IrOpcode op, IrDiag *d);
    /* Reduce-scatter with a simple reducer: every host's `send` holds one
     * segment per host of the color, in host order, counts[h] elements
     * for host h (every host of the world; 0 outside the color); recv gets
     * this host's segment combined over the color's hosts in host order. */
    IrStatus (*reduce_scatter_in)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                  const void *send, const int64_t *counts, void *recv, IrType ty, IrOpcode op,
                                  IrDiag *d);
    /* Does the transport combine simple reducer op on ty itself? (MPI: not
     * the f8 types, complex, sub-byte integers; those take
     * allreduce_any_in.) */
    bool (*builtin_op)(CollTransport *t, IrType ty, IrOpcode op);
    /* allreduce_in with any reducer: buf holds nslice slices of count
     * elements (one per group); present[j] false where this host holds no
     * member of slice j's group (no identity to fill in: such a slice
     * takes the others' value). Combined as comp(lower hosts, higher). */
    IrStatus (*allreduce_any_in)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                 void *buf, int64_t nslice, int64_t count, const bool *present, IrType ty,
                                 const CollReducer *r, IrDiag *d);
    /* One buffer into a result of its own, no staging: dst[i] = op over
     * the color's hosts, in host order, of (op over src[0..nsrc) in order:
     * this host's devices), i < count; dst is not a source. Every host
     * ends with the same bits. */
    IrStatus (*allreduce_into)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                               const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                               IrOpcode op, IrDiag *d);
    /* Reduce-scatter of one device a host: src holds count elements, k
     * blocks of count / k for the k hosts of the color in host order; dst
     * receives block q (this host's place among them) of op over the
     * hosts, combined in host order. */
    IrStatus (*reduce_scatter_into)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                    const void *src, void *dst, int64_t count, IrType ty, IrOpcode op, IrDiag *d);
    /* allgather_in straight into the result; stream: recv may take
     * streaming stores (coll_stream_into). */
    IrStatus (*allgather_into)(CollTransport *t, const int32_t *color, CollXferKind kind, const void *send,
                               size_t bytes, void *recv, bool stream, IrDiag *d);
    /* All-to-all of one device a host: send holds bytes, k blocks for the
     * k hosts of the color in host order (bytes divisible by k); block j
     * of recv receives host j's block q (this host's place). */
    IrStatus (*alltoall_in)(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                            const void *send, void *recv, size_t bytes, bool stream, IrDiag *d);
    /* Point to point: every send and receive of this host at one
     * collective (the peers post the matching ones), any size. */
    IrStatus (*exchange)(CollTransport *t, CollXferKind kind, int64_t what, const CollXfer *sends, int32_t nsend,
                         const CollXfer *recvs, int32_t nrecv, IrDiag *d);
};

/* ------------------------------------------------------------------ */
/* steps.c                                                            */
/* ------------------------------------------------------------------ */

/* The devices of one run: N partitions x R replicas, and how results
 * take streaming stores (CollTuning.stream_bound). */
typedef struct CollWorld {
    int64_t n, r;
    int32_t stream_bound;
} CollWorld;

/* A collective's groups seen from the hosts (coll_host_colors), kept for
 * the run: a loop meets the same collective every trip. */
typedef struct CollHostGroups {
    const char *name;          /* the instruction's (its pointer is the key) */
    IrOpcode op;
    int32_t *color;            /* [hosts] */
    int64_t *src;              /* [devices], permute and broadcast: the device each reads (-1 none); else NULL */
    bool any;                  /* some group spans hosts */
    bool ordered;              /* every group's members on strictly increasing hosts */
} CollHostGroups;

/* A host's devices at their collectives: devices [first, first + nlocal)
 * of n x r, this host's threads; made by coll_host_init, its barrier and
 * abort given by the caller (runtime/local.c's world). */
typedef struct CollHost {
    int64_t ndev, n, r;        /* all devices; partitions; replicas */
    int64_t first, nlocal;     /* this host's devices */
    CollTransport *t;          /* NULL: this process runs every device */
    CollTuning tune;
    /* Every local device waits until all have arrived; false when the run
     * was aborted. abort ends the run on every device (wakes them). */
    bool (*barrier)(void *ctx);
    void (*abort)(void *ctx);
    void *ctx;
    bool stray;                /* set by the caller: aborted because devices finished while others waited */
    const char **at;           /* the collective each local device is in (its instruction's name) */
    DevValue ***ops;           /* the current collective's operands of each device (global ids) */
    DevValue **addend;         /* the current collective's addend of each device (an all-reduce
                                * taking in its add, DevCollectives.run_add), NULL: none */
    int32_t nops;              /* how many each */
    DevValue ***remote;        /* other hosts' operands, copied in by the leader (owned by it) */
    int32_t nremote;           /* operands of each remote[g] */
    DevValue **reduced;        /* across hosts: each local member's result, when the step gives it */
    DevValue **shared;         /* a group-identical collective's result, by its group's first local member */
    IrStatus leader_status;    /* what the leader's step returned */
    CollHostGroups *hg;        /* the groups of each collective met so far (the leader's) */
    int32_t nhg;
    IrDiag leader_diag;
} CollHost;

typedef struct CollAsync CollAsync;
/* One device's collectives: its id, its background queue, what --stats
 * counts, and the data it sent to other devices (p2p.c). Zero it, set w
 * and id. */
typedef struct CollDevice {
    CollHost *w;
    int64_t id;                /* global device id: replica * n + partition */
    CollAsync *async;          /* -start collectives (async.c); NULL: none */
    double coll_seconds;       /* time inside collectives, summed */
    double wait_seconds;       /*   of it, waiting: for the host's other devices to arrive at a
                                *   collective, and for an asynchronous one in a -done */
    int64_t coll_calls;
    int32_t nsent;             /* sends between devices not yet received: */
    const IrInstr **sent_by;   /*   the send instructions */
    DevValue **sent;           /*   and their data (owned) */
} CollDevice;

/* Set up w for devices [first, first + nlocal) of n x r (t NULL: one
 * process runs them all; tune NULL: the defaults). The caller then sets
 * barrier, abort and ctx. IR_ENOMEM; coll_host_free in every case. */
IrStatus coll_host_init(CollHost *w, int64_t n, int64_t r, int64_t first, int64_t nlocal, CollTransport *t,
                        const CollTuning *tune, IrDiag *d);
void coll_host_free(CollHost *w);
/* The hooks device dev's executor calls (DevExecOptions.coll): blocking
 * collectives, -start/-done pairs on a thread of the device's (made at
 * the first start), send and recv. coll_device_stop joins that thread
 * (after the device's program); coll_device_free frees the rest. */
DevCollectives coll_device_start(CollDevice *dev);
void coll_device_stop(CollDevice *dev);
void coll_device_free(CollDevice *dev);
/* One collective of device dev (all of the steps in steps.c's header).
 * Errors name the instruction; a failure aborts the host's run. */
IrStatus coll_collective(CollDevice *dev, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                         DevValue **operands, DevValue **out, IrDiag *d);

/* ---- shared by coll's files ---- */

bool coll_barrier(CollHost *w);
void coll_abort(CollHost *w);
bool coll_on_host(const CollHost *w, int64_t g);
int64_t coll_host_of(const CollHost *w, int64_t g);
IrStatus coll_oom(IrDiag *d);
/* "INS: msg" at the instruction. */
IrStatus coll_error(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *msg);
/* The byte counters' name for ins. */
CollXferKind coll_xfer_kind(const IrInstr *ins);
/* The simple reducer of ins the transport runs itself, or OP_COUNT. */
IrOpcode coll_transport_op(const CollHost *w, const IrModule *m, const IrInstr *ins);
/* The groups of ins that span hosts of this host's color, by their first
 * member (cross[], in order; ndev entries of room, members too). */
IrStatus coll_cross_groups(CollHost *w, const IrModule *m, const IrInstr *ins, const int32_t *color, int64_t *members,
                           int64_t *cross, int64_t *ncross, IrDiag *d);
/* The direct path across hosts (steps.c): one device a host and every
 * group on increasing hosts, an all-gather, reduce-scatter or all-to-all
 * of one array whose blocks are contiguous moves straight between the
 * operand and the result (reduced[first]), as MPI_Allgather /
 * _Reduce_scatter_block / _Alltoall do; each collective's file runs its
 * own transfer. */
typedef struct CollDirect {
    const DevValue *x;       /* the host's one operand */
    const IrShape *ps, *rs;  /* its shape, the result's */
    int64_t dim;             /* the collective's dimension */
    int32_t size;            /* the group's size (coll_direct_group) */
} CollDirect;
/* Whether ins may take the direct path as far as the layout of devices
 * and the shapes tell (fills c but its size). Can't fail. */
bool coll_direct_operand(const CollHost *w, const IrInstr *ins, const CollHostGroups *hg, CollDirect *c);
/* c->size: the size of this host's device's group. */
IrStatus coll_direct_group(CollHost *w, const IrModule *m, const IrInstr *ins, CollDirect *c, IrDiag *d);
/* The result is the operand's shape with `want` along the dimension. */
bool coll_direct_fits(const CollDirect *c, int64_t want);
/* The transfer into v ended with st: on success v is the host device's
 * result (reduced[first]) and *done is set; else v is released. Returns st. */
IrStatus coll_direct_done(CollHost *w, DevValue *v, IrStatus st, bool *done);
/* The scatter dimension of a one-operand reduce-scatter or all-to-all
 * whose groups (all of `size`) cut v evenly, or -1. */
int64_t coll_even_dim(const IrInstr *ins, const DevValue *v, int32_t size);
/* The size every group of ins has, or 0 when they differ (the same on
 * every host). members has room for ndev. */
IrStatus coll_uniform_size(CollHost *w, const IrModule *m, const IrInstr *ins, int64_t *members, int32_t *size,
                           IrDiag *d);
/* Block i (of `size` along dim) of array src (shape s) to dst. */
void coll_copy_block(const IrShape *s, const uint8_t *src, int64_t dim, int32_t size, int32_t i, uint8_t *dst);

/* ------------------------------------------------------------------ */
/* group.c                                                            */
/* ------------------------------------------------------------------ */

/* The members (global device ids, in group order) of device `me`'s group
 * for collective `ins`, and me's index in it. `members` has room for
 * n * r ids. IR_EINPUT at the instruction when a group names an id out of
 * the mode's range or names `me`'s id twice; a device that no group lists
 * is a group of its own. */
IrStatus coll_group(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me, int64_t *members,
                       int32_t *size, int32_t *my_index, IrDiag *d);

/* Every collective of m checked before a replay runs on w's devices:
 * group and pair ids in range and named once, result shapes that fit
 * the group size (IR_EINPUT at the instruction). A replayed program is
 * the user's: what would fail on every device at run time (under mpirun,
 * ending the job) is refused before anything runs. */
IrStatus coll_check_module(const IrModule *m, const CollWorld *w, IrDiag *d);

/* Every collective of m checked before a replay runs on w's devices:
 * group and pair ids in range and named once, result shapes that fit
 * the group size (IR_EINPUT at the instruction). */
IrStatus coll_check_module(const IrModule *m, const CollWorld *w, IrDiag *d);

/* ------------------------------------------------------------------ */
/* result.c                                                           */
/* ------------------------------------------------------------------ */

/* Device `me`'s result of collective `ins` (all-reduce, all-gather,
 * reduce-scatter, all-to-all, collective-permute, collective-broadcast,
 * collective-reduce, ragged-all-to-all; the -start forms are given as
 * their base op with the base op's shape). ops[g] are device g's nopnd
 * operands for every g this device reads (its group's members, the
 * permute source); `reduced` (may be NULL) is an all-reduce's result
 * already combined across hosts for a one-operand all-reduce. Shapes are
 * checked against the group size: a mismatch is IR_EINPUT at the
 * instruction. *out is a new value (a tuple for several operands). */
IrStatus coll_result(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me,
                        DevValue *const *const *ops, int32_t nopnd, DevValue *reduced, DevValue **out, IrDiag *d);

/* ---- a group's result computed by all its members at once ----
 *
 * An all-reduce or all-gather of one array operand gives every member
 * of its group the same array, so its members can share the work: member
 * j computes part j (all-reduce: the j-th slice of the elements, reduced
 * over every member's operand in group order; all-gather: member j's
 * block) and writes it into every member's result (or into the one
 * result they share). steps.c runs this when the whole group is on the
 * host. */

/* Does the split path apply to `ins` over this group (members in group
 * order, their operands in ops)? One array operand of the same shape on
 * every member, a result shape the group gives, and for an all-reduce a
 * simple reducer coll_combine runs (*op). false: the ordinary path
 * (coll_result, which names what is wrong). */
bool coll_split_ok(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops, const int64_t *members,
                      int32_t size, int32_t nopnd, IrOpcode *op);
/* Part `part` of `size` of the result (coll_split_ok held) written
 * into each of out[0..nout) (arrays of ins's shape); stream: stores
 * around the caches (coll_stream). scratch has room for size + nout
 * pointers. All-reduce parts are slices of whole 64-byte lines (but the
 * last): members never write the same line. Can't fail. */
void coll_split_part(const IrInstr *ins, DevValue *const *const *ops, const int64_t *members, int32_t size,
                        IrOpcode op, int32_t part, DevValue *const *out, int32_t nout, void **scratch, bool stream);
/* An all-reduce (reducer add, f32 or f64) taking in its add
 * (ir_allreduce_adds): part `part` of every member's result, each with
 * its own addend: out[j] = sum in group order + add[j] over the slice,
 * for every member j (size results, one each). scratch has room for
 * 3 * size pointers. Can't fail. */
void coll_split_part_add(DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t part,
                         DevValue *const *out, DevValue *const *add, void **scratch, bool stream);

/* Shared by the collectives' in-host steps: an error at the instruction
 * (printf-style); the operand/result shape mismatch for a group size;
 * dims equal; have's dim is `times` want's (the others equal); the
 * dimension of ins checked against ps's rank; the runs of a box along
 * dim (outer runs of inner elements). */
IrStatus coll_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
IrStatus coll_shape_fail(const IrModule *m, const IrInstr *ins, IrDiag *d, const IrShape *ps, const IrShape *rs,
                         int32_t size);
bool coll_dims_equal(const IrShape *a, const IrShape *b);
bool coll_scaled(const IrShape *have, const IrShape *want, int64_t dim, int64_t times);
IrStatus coll_op_dim(const IrModule *m, const IrInstr *ins, const IrShape *ps, int64_t *dim, IrDiag *d);
void coll_runs_of(const IrShape *s, int64_t dim, int64_t *outer, int64_t *inner);
/* Pointer lists for the loops: a small one on the caller's stack, a long
 * one on the heap (coll_ptrs_free). coll_member_data: operand k of every
 * member, in group order; NULL on OOM. */
enum { COLL_PTRS_ON_STACK = 64 };
typedef struct CollPtrs {
    void **p;
    void *stack[COLL_PTRS_ON_STACK];
} CollPtrs;
void coll_ptrs_free(CollPtrs *l);
const void *const *coll_member_data(CollPtrs *l, DevValue *const *const *ops, const int64_t *members, int32_t size,
                                    int32_t k);

/* ---- each collective's steps: `part` in a host (this device's result
 * part k, shape rs, from operand shape ps; the shapes are checked here),
 * `across` between hosts (the leader's, among the hosts hg joins). ---- */

/* ------------------------------------------------------------------ */
/* allreduce.c                                                        */
/* ------------------------------------------------------------------ */

/* The reducer over operand k of every member, in group order. */
IrStatus coll_reduce_members(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, DevValue **out, IrDiag *d);
IrStatus coll_allreduce_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d);
IrStatus coll_allreduce_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                               IrDiag *d);

/* ------------------------------------------------------------------ */
/* allgather.c                                                        */
/* ------------------------------------------------------------------ */

/* Member j's block of opnd written at place j (of size along dim) of
 * out[0..nout). */
void coll_gather_block(const DevValue *opnd, int32_t j, int32_t size, int64_t dim, DevValue *const *out, int32_t nout,
                       bool stream);
IrStatus coll_allgather_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d);
IrStatus coll_allgather_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                               IrDiag *d);
/* Every operand of every host of this host's color into ops[] (one
 * allgather_in); an error for tuple operands. The bytes of one device's
 * operands; remote device g's installed from bytes; device g's packed at
 * buf + *o. */
IrStatus coll_allgather_operands(CollHost *w, const IrInstr *ins, const int32_t *color, IrDiag *d);
IrStatus coll_operand_bytes(CollHost *w, size_t *b, IrDiag *d);
IrStatus coll_install_remote(CollHost *w, int64_t g, const uint8_t *bytes, IrDiag *d);
void coll_pack_operands(const CollHost *w, int64_t g, uint8_t *buf, size_t *o);

/* ------------------------------------------------------------------ */
/* reduce_scatter.c                                                   */
/* ------------------------------------------------------------------ */

IrStatus coll_reduce_scatter_part(const IrModule *m, const IrInstr *ins, const CollWorld *w,
                                  DevValue *const *const *ops, const int64_t *members, int32_t size, int32_t mine,
                                  int32_t k, const IrShape *ps, const IrShape *rs, DevValue **out, IrDiag *d);
IrStatus coll_reduce_scatter_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                                    IrDiag *d);

/* ------------------------------------------------------------------ */
/* alltoall.c                                                         */
/* ------------------------------------------------------------------ */

IrStatus coll_alltoall_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, DevValue *const *const *ops,
                            const int64_t *members, int32_t size, int32_t mine, int32_t k, const IrShape *ps,
                            const IrShape *rs, DevValue **out, IrDiag *d);
/* Without a dimension: operand j of every member to member j (a tuple). */
IrStatus coll_alltoall_tuple(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t mine, int32_t nopnd, DevValue **out,
                             IrDiag *d);
/* ragged-all-to-all's six operands: each member's updates into this
 * device's output rows. */
IrStatus coll_alltoall_ragged(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                              const int64_t *members, int32_t size, int32_t mine, int32_t nopnd, int64_t me,
                              DevValue **out, IrDiag *d);
IrStatus coll_alltoall_across(CollHost *w, const IrModule *m, const IrInstr *ins, const CollHostGroups *hg,
                              IrDiag *d);

/* ------------------------------------------------------------------ */
/* permute.c                                                          */
/* ------------------------------------------------------------------ */

/* The global id device `me` receives from in collective-permute `ins`
 * (source_target_pairs in the mode's ids), or -1 when no pair targets it
 * (its result is then zeros). */
int64_t coll_permute_source(const IrInstr *ins, const CollWorld *w, int64_t me);

IrStatus coll_permute_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me,
                           DevValue *const *const *ops, int32_t size, int32_t k, const IrShape *rs, DevValue **out,
                           IrDiag *d);
IrStatus coll_permute_across(CollHost *w, const IrInstr *ins, const CollHostGroups *hg, IrDiag *d);

/* ------------------------------------------------------------------ */
/* broadcast.c                                                        */
/* ------------------------------------------------------------------ */

IrStatus coll_broadcast_part(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d);
IrStatus coll_broadcast_across(CollHost *w, const IrInstr *ins, const CollHostGroups *hg, IrDiag *d);

/* ------------------------------------------------------------------ */
/* p2p.c                                                              */
/* ------------------------------------------------------------------ */

/* Permute and broadcast across hosts: each host sends each other host,
 * in one message, the operands of its devices that the other's devices
 * read (src[g]: the device g reads, -1 none). */
IrStatus coll_p2p_operands(CollHost *w, const IrInstr *ins, const int64_t *src, IrDiag *d);
/* DevCollectives.p2p: send, send-done, recv, recv-done between devices
 * (ctx: the CollDevice). */
IrStatus coll_p2p_run(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                      DevValue **out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* kernels.c                                                          */
/* ------------------------------------------------------------------ */

/* Copy the box of extents `ext` at offset `soff` of the row-major array
 * `src` (dims sdims) to offset `doff` of `dst` (dims ddims); esize bytes
 * per element. */
void coll_copy_box(size_t esize, int32_t rank, const uint8_t *src, const int64_t *sdims, const int64_t *soff,
                   uint8_t *dst, const int64_t *ddims, const int64_t *doff, const int64_t *ext);
/* Collectives that write at least this many bytes store them around the
 * caches (non-temporal stores): half the last-level cache of a typical
 * host, so that what stays cached is what the next kernel reads. */
#define COLL_STREAM_BYTES ((int64_t)16 << 20)
bool coll_stream(int64_t bytes);
/* coll_stream for results out[0..nout); where one of them is from a
 * device's NUMA-binding allocator (DevValue.alloc), only if streaming
 * stores into such memory are at least as fast as ordinary ones on this
 * machine at this size (measured once a process and size class,
 * kernels.c: on one VM of BENCHMARKS.md they ran 10 times slower,
 * on another 2.5 times faster), unless `mode` (CollTuning.stream_bound:
 * COLL_STREAM_ON or _OFF) decides instead. */
bool coll_stream_into(int mode, DevValue *const *out, int32_t nout, int64_t bytes);
/* What the probe decided so far for each size class (16-32 MiB, 32 MiB
 * and more): 1 streams, -1 does not, 0 not measured. */
void coll_stream_verdicts(int8_t verdict[COLL_PROBE_CLASSES]);
/* coll_combine supports reducer op on type t (dev_red_combine_array's
 * types and ops). */
bool coll_can_combine(IrOpcode op, IrType t);
/* dst[k][doff + i] = src[0][soff + i] op src[1][soff + i] op ... (in
 * order, rounded to t at each step, the bits of dev_red_combine_array)
 * for i < count and every destination k. A destination may be a source
 * at the same offset. false when op on t is unsupported (nsrc > 1) or no
 * source or destination is given. */
bool coll_combine(IrOpcode op, IrType t, void *const *dst, int32_t ndst, int64_t doff, const void *const *src,
                     int32_t nsrc, int64_t soff, int64_t count, bool stream);
/* coll_combine with reducer add, then each destination's own addend:
 * dst[k][doff + i] = (src[0][soff + i] + ... + src[nsrc-1][soff + i]) +
 * add[k][doff + i], the sum in order and rounded to t at each step, then
 * the add: the bits of the all-reduce followed by the add (an all-reduce
 * taking in its add, ir_allreduce_adds). f32 and f64 (else false, as
 * without a source or destination). No destination is a source or an
 * addend. */
bool coll_combine_add(IrType t, void *const *dst, int32_t ndst, int64_t doff, const void *const *src, int32_t nsrc,
                      int64_t soff, const void *const *add, int64_t count, bool stream);
/* bytes from src to dst[k] + doff for every destination k (the source
 * read once). */
void coll_copy(void *const *dst, int32_t ndst, size_t doff, const void *src, size_t bytes, bool stream);

/* ------------------------------------------------------------------ */
/* async.c                                                            */
/* ------------------------------------------------------------------ */

/* A collective as steps.c runs it for device ctx (blocking). */
typedef IrStatus (*CollFn)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                             DevValue **out, IrDiag *d);
typedef struct CollAsync CollAsync;
/* One device's queue of started collectives, run by fn(ctx, ...) on a
 * thread of its own made at the first start; NULL on OOM. */
CollAsync *coll_async_new(CollFn fn, void *ctx);
/* DevCollectives.start and .wait (device.h) over the queue: start copies
 * ins and takes references to the operands; wait gives the result (or
 * the collective's error, copied into d) and frees the handle. */
IrStatus coll_async_start(CollAsync *a, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                        void **handle, IrDiag *d);
IrStatus coll_async_wait(CollAsync *a, void *handle, DevValue **out, IrDiag *d);
/* Wait until every started collective is done (before a blocking one
 * runs on the executor thread). NULL: nothing. */
void coll_async_drain(CollAsync *a);
/* Stop and join the thread; every handle must have been waited for. */
void coll_async_free(CollAsync *a);

/* ------------------------------------------------------------------ */
/* loopback.c                                                         */
/* ------------------------------------------------------------------ */

/* `hosts` simulated hosts (1 to COLL_LOOPBACK_MAX_HOSTS) of one process,
 * host h's CollTransport from coll_loopback_host (its thread drives that
 * host's devices: runtime's rt_run_devices with the transport). NULL on
 * OOM or a bad count. coll_loopback_abort: a host failed; every waiting
 * and later call returns IR_ERUNTIME. Free after every host is done. */
#define COLL_LOOPBACK_MAX_HOSTS 64
typedef struct CollLoopback CollLoopback;
CollLoopback *coll_loopback_new(int hosts);
CollTransport *coll_loopback_host(CollLoopback *lb, int host);
void coll_loopback_abort(CollLoopback *lb);
void coll_loopback_free(CollLoopback *lb);

/* ------------------------------------------------------------------ */
/* The MPI transport: mpi_world.c, mpi_transport.c, mpi_pipeline.c,    */
/* mpi_shm.c, mpi_heartbeat.c, mpi_layer.c (mpi_internal.h, mpi_layer.h) */
/* ------------------------------------------------------------------ */

/* One MPI rank a host: tessel's communicator (a duplicate of the world's
 * or the caller's), its reduction ops, its heartbeat, its byte counters.
 * The only code of the library that calls MPI (every call through
 * mpi_layer.h's door, where a test can make the Nth one fail). A failure
 * is returned to the caller, which must then end the job
 * (coll_mpi_abort), since the other hosts may be waiting in the same
 * collective; the agreements (coll_mpi_agree, _max, _phase_stats) end it
 * themselves. */
typedef struct CollMpi CollMpi;

/* MPI_Init_thread(SERIALIZED), errors returned, then coll_mpi_attach to
 * MPI_COMM_WORLD; coll_mpi_end finalizes MPI. The failure injection of
 * `tune` (may be NULL) is armed first (mpi_layer.h). *out may be set on failure
 * (then end the job with coll_mpi_abort). */
IrStatus coll_mpi_init(int *argc, char ***argv, const CollTuning *tune, CollMpi **out, IrDiag *d);
/* A transport on the caller's communicator (MPI already initialised with
 * at least MPI_THREAD_SERIALIZED): tessel duplicates it and talks only on
 * the duplicate, never on MPI_COMM_WORLD; coll_mpi_end frees the duplicate
 * and leaves MPI running. `comm` is an MPI_Comm (mpi.h is kept out of
 * this header: pass its address). */
IrStatus coll_mpi_attach(const void *comm, CollMpi **out, IrDiag *d);
/* Every rank calls it once after attaching, before any collective: the
 * tuning of `tune` (piece, chunk, pipeline and copies bytes, stream
 * bound, fusion and its block; NULL: the defaults) becomes rank 0's on
 * every rank, in *tune too (failure injection stays each rank's own), so
 * ranks whose callers (or environments) differ cut every message and run
 * every kernel alike. IR_ERUNTIME when the exchange fails (end the job:
 * the others may be in it). */
IrStatus coll_mpi_tune(CollMpi *t, CollTuning *tune, IrDiag *d);
/* Every rank calls it once after coll_mpi_tune, before the first step:
 * `bytes` is what the rank's program all-reduces a step (every all-reduce
 * counted once). Where the largest rank's answer reaches the pipeline's
 * sizes, whether every rank shares one host and MPI's shared memory is
 * allowed (mpi_shm.c) is asked now, not inside the first step's
 * all-reduce (asking MPI_T takes about 0.2 s). IR_ERUNTIME when the
 * exchange fails (end the job: the others may be in it). */
IrStatus coll_mpi_shm_prepare(CollMpi *t, int64_t bytes, IrDiag *d);
/* The all-reduces this rank ran through the shared-memory segment. */
int64_t coll_mpi_shm_calls(const CollMpi *t);
/* Free the reduction ops and datatype coll_mpi_init created (after the last
 * reduction; calling it twice is harmless). IR_ERUNTIME naming the rank
 * and the MPI call when one fails (the others are still freed). */
IrStatus coll_mpi_release(CollMpi *t, IrDiag *d);
/* Start t's heartbeat (mpi_heartbeat.c, RELIABILITY.md): a thread beats to every
 * peer and a peer silent for `seconds` ends the job naming it; every
 * collective becomes a check-in compared across ranks. seconds <= 0 or
 * one rank: nothing. IR_ENOMEM / IR_ERUNTIME when it cannot start.
 * coll_mpi_heartbeat_stop joins the thread (coll_mpi_end calls it). */
IrStatus coll_mpi_heartbeat_start(CollMpi *t, double seconds, IrDiag *d);
void coll_mpi_heartbeat_stop(CollMpi *t);
/* The end of a transport: coll_mpi_release, the
 * communicator freed, then MPI_Finalize when coll_mpi_init started MPI; t
 * is freed in every case (NULL: IR_OK). */
IrStatus coll_mpi_end(CollMpi *t, IrDiag *d);
int coll_mpi_rank(const CollMpi *t);
int coll_mpi_size(const CollMpi *t);
/* Every rank says whether it is fine; returns -1 when all are, else the
 * lowest failing rank (the same on every rank). Never hangs on a rank that
 * reached it; a rank that failed must still call it. When its MPI call
 * fails it prints why (naming the rank) and ends the job (MPI_Abort). */
int coll_mpi_agree(CollMpi *t, bool ok);
/* The largest `value` over ranks (e.g. exit statuses, so every rank of a
 * failed job exits with the failing rank's status). Ends the job as
 * coll_mpi_agree when its MPI call fails. */
int coll_mpi_max(CollMpi *t, int value);
/* min / median / max over ranks of each of nphase timings (rank 0 gets
 * them; false, on every rank, when rank 0 is out of memory). A failed
 * gather ends the job as coll_mpi_agree. */
bool coll_mpi_phase_stats(CollMpi *t, const double *mine, int nphase, double *min, double *median, double *max);
/* Every host contributes `bytes` bytes; `recv` receives hosts * bytes, in
 * host order. */
IrStatus coll_mpi_allgather(CollMpi *t, const void *send, size_t bytes, void *recv, IrDiag *d);
/* In place: buf[i] = op over hosts of buf[i], count elements of type ty.
 * op is a simple reducer (add, multiply, maximum, minimum, and, or, xor). */
IrStatus coll_mpi_allreduce(CollMpi *t, void *buf, int64_t count, IrType ty, IrOpcode op, IrDiag *d);
/* The collectives between hosts: the CollTransport of coll/coll.h, which
 * a CollMpi is (coll_mpi_transport). */
CollTransport *coll_mpi_transport(CollMpi *t);
/* Bytes this host sent and received in collectives of `kind` so far
 * (all-gathers: its block to each peer of its color and theirs;
 * all-reduces: 2 (k-1)/k of the buffer each way, what a bandwidth-optimal
 * all-reduce among k hosts moves; point to point: the blocks). */
void coll_mpi_bytes(const CollMpi *t, CollXferKind kind, int64_t *sent, int64_t *received);
/* This host reaches device call `cluster` (a check-in every peer compares
 * with its own; nothing without a heartbeat). Can't fail: a divergence
 * ends the job. */
void coll_mpi_checkin(CollMpi *t, int64_t cluster);
/* A device of this host failed: end the whole job (never returns when the
 * transport can stop the other hosts). */
void coll_mpi_abort(CollMpi *t, const char *msg);
/* Every rank's `bytes` (any size: cut in pieces) to rank `root`'s recv
 * (size x bytes, in rank order; untouched elsewhere), or to every rank's
 * with root -1 (an all-gather). A collective of the program: checked in,
 * watched by the heartbeat. */
IrStatus coll_mpi_gather(CollMpi *t, const void *send, size_t bytes, void *recv, int root, IrDiag *d);

#endif /* TESSEL_COLL_COLL_H */
