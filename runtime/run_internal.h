/*
 * run_internal.h: what runtime/'s files share with each other and with
 * api/ beyond runtime.h (runtime-internal): running a host's devices
 * (local.c), the user's inputs resolved against a module (inputs.c,
 * input_names.c), a host's part of a sharded array (local_data.c) and
 * per-host input reads (shard_io.c). The MPI transport is coll/'s
 * (coll/coll.h, "The MPI transport").
 */
#ifndef TESSEL_RUN_INTERNAL_H
#define TESSEL_RUN_INTERNAL_H

#include "runtime.h"

/* ---- local.c: a host's devices ---- */

/* How to run: `steps` runs of the program (< 2: one), each step's aliased
 * outputs (the module's input_output_alias) moved into the next step's
 * parameters; `no_bind` leaves executor threads unbound. */
typedef struct RtRunOptions {
    int64_t steps;
    bool no_bind;
    int64_t max_trips;         /* trips of every while loop (0: unbounded; --limit trips) */
    /* infeed/outfeed and host send/recv (feed.c). With several devices
     * device 0's outfeeds and sends are the run's (the others hold the
     * same whole values: the partitioner gathers them) and infeeds are
     * refused (one feed cannot serve several). NULL: refused. */
    const DevHostTransfers *host;
    const RtStepHook *on_step;     /* may be NULL */
    const CollTuning *tune;        /* NULL: the defaults */
    bool op_times;                 /* time every instruction (RtRunStats.ops; --stats=ops) */
} RtRunOptions;

/* One device's per-instruction times (RtRunOptions.op_times): the steps
 * after the first (the first pays for first touches; with one step, that
 * one), and what those steps took on this device in all. */
typedef struct RtOpTimes {
    DevOpTimes times;
    int64_t steps;
    double seconds;
} RtOpTimes;

/* What a host's run measured, for --stats. */
#define RT_STATS_DEVICES 64

typedef struct RtRunStats {
    double coll_seconds;       /* the most time one local device spent inside collectives */
    int64_t coll_calls;        /* collective calls per device (summed over steps) */
    int32_t ndevices;          /* local devices */
    int32_t nbound;            /* of them, executor threads bound to their cpusets */
    const char *bind_note;     /* why one is not bound (static text), or NULL */
    bool membind;              /* device 0's allocator binds its memory to a NUMA node */
    int32_t numa_node;         /* that node (OS index), -1 when not bound */
    int membind_errno;         /* binding memory was wanted but fell back: why; else 0 */
    int blas_threads;          /* OpenBLAS threads set for the devices (0: untouched) */
    int32_t nsteps;            /* steps timed (the first 256 at most) */
    double first_step_seconds; /* the first step (the slowest local device's time) */
    double warm_step_seconds;  /* median of the other timed steps; 0 with one step */
    int32_t stream_bound;      /* the run's CollTuning.stream_bound */
    int8_t stream_verdict[COLL_PROBE_CLASSES]; /* what the probe decided (coll_stream_verdicts) */
    /* Measured: the most bytes of values each local device held at once
     * (its allocator's value_peak over the run, arguments included; the
     * figure partition/memory.c estimates), the first RT_STATS_DEVICES
     * devices apiece and the largest of all. */
    int64_t device_peak[RT_STATS_DEVICES];
    int64_t peak_max;
    /* The local devices' allocators over their runs, summed (device/alloc.c):
     * buffers handed out, of them freed ones reused, and at each device's
     * end the bytes live and kept for reuse. */
    int64_t buf_allocs, buf_reused, buf_live_bytes, buf_kept_bytes;
    /* Weights kept packed for the GEMM across steps (device/packed.c),
     * summed over the local devices: how many, their bytes (not in the
     * peaks above), the products run from them. */
    int64_t packed_weights, packed_bytes, packed_runs;
    /* RtRunOptions.op_times: each local device's (nops of them; heap,
     * rt_run_stats_free), else NULL. */
    RtOpTimes *ops;
    int32_t nops;
} RtRunStats;

/* Free what a run left in s (its op times); s is then empty. NULL: nothing. */
void rt_run_stats_free(RtRunStats *s);

/* Run devices [first, first + nlocal) of a compiled program on this host.
 * shards[k] holds device first+k's shards of the arguments; its
 * references are taken (shards[k] is left empty, also on failure).
 * results[k] receives device first+k's root value after the last step (a
 * new reference each). Each device runs on an executor thread of
 * dev_devices_create (bound to its cores) or, when hwloc cannot give
 * devices, on a plain thread. With t == NULL the devices must be all of
 * them (one process). `o` and `stats` may be NULL. Steps with aliases
 * need every aliased output sharded like its parameter (IR_EUNSUPPORTED
 * naming both shardings otherwise). */
IrStatus rt_run_devices(const PlanCluster *c, RtArgs *shards, int64_t first, int64_t nlocal, CollTransport *t,
                        const RtRunOptions *o, RtRunStats *stats, DevValue **results, IrDiag *d);

/* Run a compiled program on N x R devices, each a thread of this process,
 * with shared-memory collectives: the full arguments are cut into shards,
 * every device runs the SPMD program, the root's shards (of replica 0) are
 * put back together into *out. A failure on any device ends every device
 * (no thread waits forever) and is reported with the device that failed.
 * `o` and `stats` may be NULL. */
IrStatus rt_run_local(const PlanCluster *c, const RtArgs *args, const RtRunOptions *o, RtRunStats *stats,
                      DevValue **out, IrDiag *d);

/* ---- inputs.c: parts shared with shard_io.c ---- */

/* The user's inputs resolved against the entry parameters of a module:
 * leaf numbering (first[p] .. first[p+1]-1 are parameter p's leaves, depth
 * first) and the file bound to each leaf (NULL: random or token). */
typedef struct RtLeafBinding {
    int32_t nparam;
    int64_t *first;            /* nparam + 1 entries */
    const char **path;         /* per leaf; borrowed from the RtBindOptions */
    const RtArray **array;     /* per leaf, when bound to an array in memory */
    const IrShape **shape;     /* per leaf, its shape (borrowed from the module) */
    bool *zero;                /* per leaf: unbound optimizer state that starts at zero
                                * (RtBindOptions.zero_state) */
} RtLeafBinding;

/* Resolve opt's keys as rt_bind_inputs does (unknown keys, leaves bound
 * twice, and without opt->random unbound leaves are IR_EINPUT), reading
 * no file. On success *out is owned by the caller (rt_leaf_binding_free);
 * on failure it is empty. */
IrStatus rt_resolve_inputs(const IrModule *m, const RtBindOptions *opt, RtLeafBinding *out, IrDiag *d);
void rt_leaf_binding_free(RtLeafBinding *b);
/* "parameter 1" / "parameter 0 leaf 1", for messages; heap (ts_free), NULL
 * on OOM or a bad parameter. */
char *rt_input_leaf_desc(const IrModule *m, int32_t p, int64_t leaf);

/* The module's input_output_alias checked for --steps: each alias names an
 * existing parameter, whole or a value inside a tuple parameter ({1}), an
 * existing output of that value's shape, and no value twice (one alias at
 * {}, another at {1} of the same parameter: twice). IR_EINPUT at the
 * alias's place in the header (file:line:col when the parser saw it). */
IrStatus rt_check_aliases(const IrModule *m, IrDiag *d);
/* What a step may free that the next one needs again: a reference to each
 * leaf of a tuple parameter that no alias names, when another leaf of it
 * is aliased (a donated tuple is handed over whole; its unaliased leaves
 * are the same inputs at every step). leaf: one slot per parameter leaf,
 * depth first across the parameters, NULL where nothing is kept. */
typedef struct RtKept {
    DevValue **leaf;
    int32_t n;
} RtKept;
/* Before a step that rt_feed_aliases will follow: keep those leaves of
 * args (nargs entries) in k (zeroed at first, reused across steps).
 * IR_ENOMEM. Aliases must have passed rt_check_aliases. */
IrStatus rt_keep_unaliased(const IrModule *m, DevValue *const *args, int32_t nargs, RtKept *k, IrDiag *d);
/* Release what k holds (the step loop's end, or a failure). */
void rt_kept_release(RtKept *k);
/* Move the aliased outputs of `result` (consumed) into args (nparam
 * entries, references replaced) for the next step; a tuple parameter with
 * aliased leaves becomes a new tuple of those outputs and k's kept leaves
 * (moved out of k; k is empty after). Aliases must have passed
 * rt_check_aliases, k filled by rt_keep_unaliased before the step.
 * IR_ENOMEM (the parameter is then NULL). */
IrStatus rt_feed_aliases(const IrModule *m, DevValue *result, DevValue **args, RtKept *k, IrDiag *d);
/* Run the entry computation of `m` on one device with the reference executor
 * (dev_execute, unfused) `steps` times (< 2: once) with aliases fed between
 * steps, every while loop bounded by max_trips (0: unbounded); args->args are replaced by the fed values. */
IrStatus rt_run_reference_steps(const IrModule *m, RtArgs *args, int64_t steps, int64_t max_trips,
                                const DevHostTransfers *host, const RtStepHook *hook, DevValue **out, IrDiag *d);

/* ---- input_names.c: which parameter an input key names ---- */

/* The entry parameter of `c` that `key` names, by the rule of
 * docs/cli.md "Input names": its exact HLO name, INDEX or INDEX.LEAF, the
 * name JAX records for it (metadata op_name, the HLO name without its ".N",
 * JAX's spelling of a pytree path: params['w1'] for params__w1__.1), then
 * NAME.LEAF. *param gets the parameter (not checked against nparam for an
 * INDEX), *leaf the leaf or -1 when the key names none. IR_EINPUT for a
 * name two parameters answer to, naming both, and for a key nothing
 * accepts, listing the names that work, nearest first. */
IrStatus rt_input_key_resolve(const IrComputation *c, const char *key, int64_t *param, int64_t *leaf, IrDiag *d);

/* ---- local_data.c: a host's part of a sharded array ---- */

/* Per dimension k, the n[k] intervals [off, off+ext) of the logical shape
 * the host's devices hold, in order; laid end to end they are the host's
 * part, of dims[k] elements (the whole dimension where intervals overlap
 * unequally). */
typedef struct RtLocalLayout {
    int32_t rank;
    int64_t dims[IR_MAX_RANK];
    int32_t n[IR_MAX_RANK];
    int64_t *off[IR_MAX_RANK], *ext[IR_MAX_RANK];
    int64_t *buf;              /* owns off and ext */
} RtLocalLayout;

/* The part of an array of shape `full` under `s` that partitions (first +
 * j) % nparts, j < nlocal, hold. IR_ENOMEM only; free with
 * rt_local_layout_free. */
IrStatus rt_local_layout(const IrShape *full, const IrSharding *s, int64_t first, int64_t nlocal, int64_t nparts,
                         RtLocalLayout *l, IrDiag *d);
void rt_local_layout_free(RtLocalLayout *l);
/* Where the element at logical index off[] sits in the host's part
 * (loff[]); false when the host holds none of it. */
bool rt_local_offset(const RtLocalLayout *l, const int64_t *off, int64_t *loff);
/* This host's part of each output leaf (TsRunOptions.process_local):
 * local[j] is device first+j's root value; *out the root's shape with
 * every leaf cut to its rt_local_layout. */
IrStatus rt_local_results(const PlanCluster *c, int64_t first, int64_t nlocal, DevValue *const *local,
                          DevValue **out, IrDiag *d);

/* ---- shard_io.c: each host reads only its shards ---- */

/* Counters of one host's input reads. */
typedef struct RtReadStats {
    int64_t file_bytes;        /* array bytes read from .npy files (headers excluded) */
    int64_t random_elems;      /* elements drawn for random inputs */
} RtReadStats;

/* Bind the inputs of a compiled program for devices [first, first+nlocal)
 * without materialising any whole sharded input: the keys of `opt` are
 * resolved against `sig` (rt_signature_module(c)), every file's header is
 * checked against its parameter, and each device gets only the box of each
 * leaf its partition holds (rt_shard_box), read from the file
 * (rt_npy_read_box) or drawn (rt_random_fill_box); uneven shards are
 * padded with zeros. shards[k] (nlocal entries, empty on entry) receives
 * device first+k's arguments: equal to rt_shard_value of the bound whole
 * input. Errors as rt_bind_inputs; on failure every shards[k] is empty.
 * `rs` may be NULL. */
IrStatus rt_read_shards(const PlanCluster *c, const IrModule *sig, const RtBindOptions *opt, int64_t first,
                        int64_t nlocal, RtArgs *shards, RtReadStats *rs, IrDiag *d);

#endif /* TESSEL_RUN_INTERNAL_H */
