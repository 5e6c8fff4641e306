/*
 * partition.h: layer `partition/`: shardings as values to compute with,
 * sharding propagation, the SPMD partitioner, split/concat trees, device
 * assignment, replica islands and the compiled program's data.
 *
 * Files of this layer:
 *   shd_ops.c     building and transforming shardings (transpose, dropping
 *                 and inserting dims, replication), shard shapes and offsets
 *   shd_text.c    shardings in words and in one canonical text
 *   propagate.c   sharding propagation: a worklist over the module, a
 *                 table from op family to its rules
 *   prop_*.c      the forward and backward rules of one op family side by
 *                 side (prop_internal.h); prop_custom.c also the identity
 *                 custom-calls (shd_identity_custom_call)
 *   expand_scan.c every scan made a while loop before propagation
 *   spmd.c        the partitioner driver: one pass over each computation
 *   spmd_*.c      the builders and the handlers, one file per op family,
 *                 rule above each (listed in spmd_internal.h)
 *   reshard.c     resharding between any two shardings with collectives
 *   reshard_cache.c  each (value, target sharding) resharded once in a
 *                 computation, as XLA's reshard cache
 *   device_layout.c  a compiled program's device layout (DeviceLayout): split-node
 *                 and concat trees, device assignment, replica islands,
 *                 per-device shapes, the compile result lines; what the
 *                 plan views show
 *   program.c     the compiled program the runtime executes (PlanCluster,
 *                 PlanProgram: the host program and its device clusters):
 *                 data, no pass
 *   memory.c      the memory a device needs: live bytes at each step of a
 *                 computation's execution order, the peak and what is live
 *                 there (mem_estimate)
 *   donate.c      input_output_alias pairs inferred (--donate auto)
 *
 * "Plan" means four things in tessel, each with its own name: the plan
 * file (compile/plan_file.c, what `tessel compile` writes; TsPlan is its
 * handle, api/plan_handle.c), the compiled program (program.c), its
 * device layout (device_layout.c, the type DeviceLayout) and the plan views
 * (compile/view*.c, what `tessel plan` prints).
 *
 * Depends on ir/ only; never executes anything. (The plan views are
 * compile/view.c's.)
 */
#ifndef TESSEL_PARTITION_H
#define TESSEL_PARTITION_H

#include "../ir/ir.h"

/* ------------------------------------------------------------------ */
/* shd_ops.c                                                           */
/* ------------------------------------------------------------------ */

/* Constructors. All results are allocated in arena `a` and normalised:
 * a tiled sharding whose data tiles are all 1 and whose subgroups are all
 * REPLICATED becomes SHD_REPLICATED; subgroup dims of size 1 are dropped;
 * several REPLICATED subgroup dims are merged into one. NULL on OOM. */
IrSharding *shd_replicated(IrArena *a);
IrSharding *shd_manual(IrArena *a);
/* A tiled sharding: `ntile` tile dims of which the last `nrepl` (0 or 1)
 * is a REPLICATED subgroup; `devices` row-major over `tile`. */
IrSharding *shd_tiled(IrArena *a, int32_t ntile, const int64_t *tile, const int64_t *devices,
                      int32_t nrepl);
/* A tuple sharding of n LEAF shardings (copied). As in XLA, a tuple
 * sharding is flat: one entry per leaf of the tuple shape, depth first, so
 * `((f32[2], f32[2]), f32[2])` has three entries. */
IrSharding *shd_tuple(IrArena *a, int32_t n, IrSharding *const *elems);
/* Normalised copy (see above). */
IrSharding *shd_normalize(IrArena *a, const IrSharding *s);

/* Queries. */
bool shd_is_replicated(const IrSharding *s);   /* replicated, or tiled with all data tiles 1 and only REPLICATED subgroups */
bool shd_is_manual(const IrSharding *s);       /* manual, or all-manual subgroups */
bool shd_has_manual_subgroup(const IrSharding *s);
/* Tiles along data dim d (1 when not tiled or not a tiled sharding). */
int64_t shd_tiles(const IrSharding *s, int32_t d);
/* Product of data tiles (1 for replicated/maximal/manual). */
int64_t shd_total_tiles(const IrSharding *s);
/* Sharding of leaf `leaf` (depth first) of a value of shape `shape`; for a
 * non-tuple sharding on a tuple shape, the sharding itself (XLA applies it to
 * every leaf). */
const IrSharding *shd_leaf(const IrSharding *s, const IrShape *shape, int32_t leaf);
/* Sharding of tuple element i of a value of shape `shape`. */
IrSharding *shd_tuple_element(IrArena *a, const IrSharding *s, const IrShape *shape, int32_t i);
/* The same, given the leaf index where element i starts (the leaves of
 * elements 0..i-1): callers walking every element stay linear. */
IrSharding *shd_tuple_element_at(IrArena *a, const IrSharding *s, const IrShape *shape, int32_t i, int32_t first);
/* A tuple sharding giving every leaf of `shape` the sharding `s` (s for arrays). */
IrSharding *shd_broadcast_to_shape(IrArena *a, const IrSharding *s, const IrShape *shape);

/* Transforms of tiled shardings. Non-tiled inputs (replicated, maximal,
 * manual) are returned as they are (copied). */

/* Result dim i takes operand dim perm[i] (transpose). */
IrSharding *shd_transpose(IrArena *a, const IrSharding *s, const int64_t *perm);
/* Remove data dims `dims` (reduce); their tiles join the replication subgroup
 * (the devices along them then hold the same result). */
IrSharding *shd_remove_dims(IrArena *a, const IrSharding *s, int32_t ndims, const int64_t *dims);
/* Keep the rank but stop tiling data dims `dims`: their tiles join the
 * replication subgroup. */
IrSharding *shd_replicate_dims(IrArena *a, const IrSharding *s, int32_t ndims, const int64_t *dims);
/* Insert untiled data dims: the result has rank `rank`; operand dim i goes to
 * result dim `map[i]` (increasing), other result dims get tile 1 (broadcast). */
IrSharding *shd_insert_dims(IrArena *a, const IrSharding *s, int32_t rank, const int64_t *map);
/* Project onto a subset of dims: result dim i takes tiles of operand dim
 * map[i] (map[i] == -1: untiled); operand dims not mapped join replication
 * (broadcast backward, slicing dims, dot operand from result). */
IrSharding *shd_project(IrArena *a, const IrSharding *s, int32_t rank, const int64_t *map);

/* Shapes and offsets. Shards of an uneven dimension are padded: a dim of
 * size D in t tiles has shards of ceil(D/t); tile j holds [j*s, min(D,(j+1)*s)). */
int64_t shd_shard_size(int64_t dim, int64_t tiles);
/* Per-device shape of a value (tuples leaf by leaf). */
IrStatus shd_shard_shape(IrArena *a, const IrShape *shape, const IrSharding *s, IrShape *out);
/* Tile coordinates (one per tile dim including subgroups) of `device` in a
 * tiled sharding; false when the device is not in the assignment. */
bool shd_device_coords(const IrSharding *s, int64_t device, int64_t *coords);
/* Device at tile coordinates. */
int64_t shd_device_at(const IrSharding *s, const int64_t *coords);

/* ------------------------------------------------------------------ */
/* shd_text.c                                                          */
/* ------------------------------------------------------------------ */

/* Append sharding s (NULL: replicated) in words to b: "replicated",
 * "tiled on dim 1 over 2 devices", "tiled on dims 0 and 1 (2x4) over 8
 * devices, each tile on 2 devices", "whole on device 3 only (maximal)",
 * "manual (each device holds its own value)"; a device order other than
 * 0..n-1 is named; tuples as "(leaf; leaf)". Out of memory sets b->oom. */
void shd_describe(IrStrBuf *b, const IrSharding *s);
/* The same as a heap string (ts_free), NULL on OOM. */
char *shd_describe_str(const IrSharding *s);
/* The XLA text of s's normalised form with the devices listed (no iota
 * form, metadata, shard group or {unknown}): two shardings that mean the
 * same get the same text. NULL (s) is {replicated}. Heap string, NULL on
 * OOM. */
char *shd_canonical_str(const IrSharding *s);

/* ------------------------------------------------------------------ */
/* propagate.c                                                         */
/* ------------------------------------------------------------------ */

typedef struct ShdPropagateOptions {
    int64_t num_devices;     /* partitions (devices per replica) */
} ShdPropagateOptions;

/* Propagate shardings through the module, forward and backward, until
 * nothing changes. Afterwards every instruction of the entry computation and
 * of every computation it reaches through call/while/conditional has a
 * sharding (tuple shardings for tuple shapes); scalar sub-computations
 * (reducers, comparators, map/scatter/select bodies) are left alone. User
 * annotations (shardings present on entry) are never changed. Deterministic
 * and linear in the module size (a worklist). Rules and the tie-breaking rule
 * are documented in propagate.c. Errors: IR_ENOMEM, or IR_EINPUT for
 * annotations that contradict each other where no reshard is possible. */
IrStatus shd_propagate(IrModule *m, const ShdPropagateOptions *opt, IrDiag *d);
/* Rewrite every scan as a call of a while loop that computes it
 * (expand_scan.c), so that propagation and the partitioner treat it as a
 * loop: run before shd_propagate. IR_ENOMEM / IR_EINTERNAL only. */
IrStatus shd_expand_scans(IrModule *m, IrDiag *d);

/* XLA's annotation custom-calls that return their one operand unchanged
 * (the executor runs them as identities, device/k_markers.c; docs/cli.md
 * lists them): annotate_device_placement, MoveToHost, MoveToDevice,
 * PinToDevice, PinToDeviceSram, Pin, Unpin, ShardBarrierFrom,
 * ShardBarrierTo, xla.sdy.FuncResultSharding, xla.sdy.PropagationBarrier,
 * SetBound. True when `ins` is one of them with one array operand of its
 * own shape; *passthrough then says whether shardings propagate through
 * it, as XLA's sharding propagation does for the memory annotations
 * (IsPassthroughCustomOps), and as Shardy does for a function's result
 * sharding (back to the value returned: FuncResultSharding), never for
 * the barriers. The SPMD partitioner moves the operand's shards through
 * them. Can't fail. */
bool shd_identity_custom_call(const IrInstr *ins, bool *passthrough);
/* prop_ragged.c: the dims of ragged-dot x's result that may be tiled as
 * an operand's: from_lhs[r] / from_rhs[r] is the lhs / rhs dim result dim
 * r comes from, -1 where none or where a tile would split a group (the
 * ragged dim, and lhs dims when group_sizes is not one-dimensional). False
 * when the ragged dim is a contracting dim (the groups cut the sum) or
 * the attributes give no map. Can't fail. */
bool shd_ragged_dot_maps(const IrInstr *x, const IrShape *lhs, const IrShape *rhs, const IrShape *groups,
                         int64_t *from_lhs, int64_t *from_rhs);

/* ------------------------------------------------------------------ */
/* spmd.c: the SPMD partitioner                                        */
/* ------------------------------------------------------------------ */

/* The links between hosts the cost model assumes when not told. */
#define SPMD_LINK_GBPS 10.0

/* spmd_dot.c: what one multiply-add of a device's local dot weighs in the
 * bytes the dot's cost model counts, over links of link_gbps Gb/s (0:
 * SPMD_LINK_GBPS): 1/40 byte at 10 Gb/s. The auto-sharder's mirror of
 * the dot's choice (auto/strategy.c) uses it too. Can't fail. */
double spmd_dot_mac_bytes(double link_gbps);

/* spmd_conv.c: the rows a device takes from its neighbours when a
 * windowed op's dim (input size `in`, output `out`) is tiled `t` ways
 * under window dim w, as the partitioner's halo exchange runs it: *lo
 * from the left, *hi from the right (one collective-permute each where
 * not 0). False where no halo does it (base dilation, a window wider
 * than a neighbour's shard). The auto-sharder prices reduce-window's
 * tiled windows with it (auto/strategy_window.c). Can't fail. */
bool spmd_halo_rows(int64_t in, int64_t out, int64_t t, const IrWindowDim *w, int64_t *lo, int64_t *hi);

/* spmd_reduce.c: the element type in which the partitioner combines
 * the partial sums of x across the devices that tile its contracting or
 * reduced dims: f32 for a dot or convolution of f16, bf16 or an f8/f4
 * kind whose operands are of x's type, and for a reduce with add of one
 * such input to its own type (summed in f32, rounded once: as the
 * reference computes them); x's type otherwise. m holds x's reducer
 * (NULL: a reduce's type). The auto-sharder prices those all-reduces and
 * reduce-scatters with it (auto/strategy.c). Can't fail. */
IrType spmd_partial_type(const IrModule *m, const IrComputation *c, const IrInstr *x);

typedef struct SpmdOptions {
    int64_t num_partitions;  /* N >= 1 */
    int64_t num_replicas;    /* R >= 1 */
    double link_gbps;        /* links between hosts, Gb/s, for the cost model (spmd_dot.c); 0: 10 */
} SpmdOptions;

/* What the partitioner decided, for the plan views. Arrays are in the
 * report's own arena (freed by spmd_report_free). */
/* Where a collective or a reshard sits in the source, for the graph of
 * the plan: emitted while partitioning instruction `source` of source
 * computation `comp`, to reshard its operand `operand` (the edge operand
 * -> source), or (operand NULL) to finish source's own value (the edges
 * from source to its users; `output`: the root's value resharded to the
 * computation's result sharding). NULL names: unknown (a loaded plan). */
typedef struct SpmdSite {
    const char *comp, *source, *operand;
    bool output;
    IrPos pos;                 /* source's position in the model (line 0: unknown) */
} SpmdSite;

/* Why a collective is there (the plan's reasons, docs/plan.md). */
typedef enum SpmdWhyKind {
    SPMD_WHY_UNKNOWN,          /* not recorded (a plan file without reasons) */
    SPMD_WHY_OPERAND,          /* an operand's sharding is not what its user's rule needs */
    SPMD_WHY_PARTIAL,          /* partial results of a sum (or max, ...) over a tiled dim combined */
    SPMD_WHY_RESULT,           /* the rule computes the result under another sharding than the value's */
    SPMD_WHY_OUTPUT,           /* a computation's root moved to the sharding its result must have */
    SPMD_WHY_HALO,             /* a window reads rows of the neighbouring devices' shards */
    SPMD_WHY_RULE,             /* the op's own rule needs it (a sort or scan along a tiled dim, ...) */
} SpmdWhyKind;

typedef struct SpmdWhy {
    SpmdWhyKind kind;
    const char *text;          /* the sharding conflict in words, ending in what the collective does */
    const char *avoid;         /* the change that would make it local, or NULL where none is cheaper */
} SpmdWhy;

/* The name of a kind as the plan's JSON and plan files spell it
 * ("operand", "partial", ...; "unknown"), and back (SPMD_WHY_UNKNOWN and
 * false for a name that is none). */
const char *spmd_why_kind_name(SpmdWhyKind k);
bool spmd_why_kind_from_name(const char *s, size_t n, SpmdWhyKind *k);

typedef struct SpmdCollective {
    const char *name;          /* instruction name in the partitioned module */
    IrOpcode op;
    const char *replica_groups;/* XLA text, e.g. "{{0,1},{2,3}}" */
    int64_t bytes_per_device;  /* bytes each device receives */
    SpmdSite site;
    SpmdWhy why;
} SpmdCollective;

/* An operand whose sharding is not what its user needs (spmd_operand_as). */
typedef struct SpmdReshard {
    SpmdSite site;             /* operand set */
    const char *from, *to;     /* sharding texts */
} SpmdReshard;

typedef struct SpmdReport {
    IrArena *arena;
    const char *file;          /* the model's path, for the sites' positions (NULL: unknown) */
    int32_t nfallback;
    const char **fallback;     /* source instruction names computed by the fallback */
    int32_t ncoll;
    int64_t capcoll;
    SpmdCollective *coll;
    int32_t nreshard;
    int64_t capreshard;
    SpmdReshard *reshard;
} SpmdReport;

/* Partition the entry computation of `src` (whose instructions carry the
 * shardings shd_propagate gave them) into one SPMD program for N partitions
 * (each of R replicas runs the same program). *out is a new module: its
 * entry takes each parameter's shard (the per-device shape of
 * shd_shard_shape) and returns the root's shard under the root's sharding;
 * collectives use channel_id and global device ids (replica * N + partition).
 * `report` (may be NULL) receives what the plan shows. */
IrStatus spmd_partition(const IrModule *src, const SpmdOptions *opt, IrModule **out,
                        SpmdReport *report, IrDiag *d);
void spmd_report_free(SpmdReport *r);

/* ------------------------------------------------------------------ */
/* memory.c: per-device memory by liveness over the execution order     */
/* ------------------------------------------------------------------ */

/*
 * The contract (a scheduler may call this for every candidate order):
 * a computation's steps are its instructions in the order they run;
 * while step s runs, live[s] bytes are held: every parameter not donated
 * (from before step 0 to the end), every result from its step to the
 * step of its last use inclusive (the root's to the end), buffers shared
 * by reference (tuple, get-tuple-element, copy, ...) counted once, and
 * the peak of a computation the step calls beyond its parameters and
 * result. The peak is the largest live[s] (or the parameters alone,
 * before step 0). Bytes are of the module's shapes as they are: for an
 * SPMD module, per device. See memory.c for the model.
 */
typedef enum MemKind {
    MEM_PARAMETER,   /* an entry parameter (the caller's, or donated) */
    MEM_OUTPUT,      /* part of the computation's result */
    MEM_COLLECTIVE,  /* the result of a collective */
    MEM_TEMPORARY,   /* any other intermediate value */
} MemKind;

typedef struct MemValue {
    int32_t instr;   /* the instruction that made the buffer */
    int64_t bytes;
    MemKind kind;
} MemValue;

typedef struct MemOptions {
    /* The order to estimate: norder instruction indices, each after its
     * operands, each at most once (instructions left out do not run).
     * NULL: the executor's order (ir_exec_order). */
    const int32_t *order;
    int32_t norder;
    /* Per parameter number (nparams entries): the caller hands it over, so
     * it dies at its last use instead of living to the end. NULL: none. */
    const bool *donated;
    int32_t nparams;
} MemOptions;

typedef struct MemEstimate {
    int32_t comp;         /* the computation estimated */
    int32_t n;            /* steps */
    int32_t *order;       /* [n] the instruction run at each step */
    int64_t *live;        /* [n] bytes live while step s runs */
    int32_t *end;         /* [ninstr] last step each instruction's buffer lives in
                           * (n: to the end; -1: does not run) */
    int64_t *own;         /* [ninstr] bytes each instruction allocates (0: refers
                           * to or reuses an operand's buffer) */
    int32_t *last_read;   /* [ninstr] the step of the last read of each instruction's
                           * value (a fused member's reads happen at its group's
                           * root); its own step when unread; -1 does not run */
    int32_t *made;        /* [ninstr] the step each instruction's value is made at: its
                           * own, or its fusion group root's for a fused member (an
                           * extra output such as Adam's m' beside w'); -1 does not run */
    int64_t start_bytes;  /* live before step 0 (the parameters) */
    int64_t peak;         /* max(start_bytes, live[s]) */
    int32_t peak_step;    /* the first step reaching it; -1 before step 0 */
    int64_t param_bytes;  /* all parameters */
    int64_t output_bytes; /* results living to the end (root leaves), parameters apart */
    int32_t nat_peak;
    MemValue *at_peak;    /* [nat_peak] buffers live at the peak, largest first */
    int64_t callee_at_peak; /* of the peak: a called computation's own values */
} MemEstimate;

/* The memory of a plan, per device (every device of an SPMD program runs
 * the same shapes), for the dumps: the estimate's peak broken down. */
typedef struct PlanMemValue {
    const char *name;     /* the instruction that made the buffer */
    const char *opcode;
    int64_t bytes;
    MemKind kind;
} PlanMemValue;

/* An input_output_alias pair of the SPMD entry and why it is safe: the
 * parameter's last read comes at or before the step writing the output. */
typedef struct PlanDonation {
    int64_t param;            /* parameter number */
    const char *param_name;
    int64_t output;           /* output leaf, depth first (output_<K>.npy; 0 for an array root); -1 a tuple */
    const char *last_read;    /* the instruction reading the parameter last; NULL: never read */
    int32_t read_step;        /* its step (-1 none) */
    const char *written;      /* the instruction writing the output; NULL: not one of the root's */
    int32_t write_step;
    bool inferred;            /* --donate auto's, not the module's */
    bool from_donor;          /* the module's buffer_donor, paired by plan_donate */
    /* A leaf of a tuple parameter ("{1}"), as XLA's pairs may name (the
     * run hands the whole tuple over: ir_alias_donated; last_read is the
     * leaf's); NULL: the whole parameter. */
    const char *leaf;
} PlanDonation;

typedef struct PlanMemory {
    int64_t peak;
    const char *peak_instr;   /* the instruction running at the peak; NULL: before the first step */
    int32_t peak_step;
    /* Of the peak, by kind (MemKind) and a called computation's own values. */
    int64_t by_kind[4], callee;
    int32_t nvalues;
    PlanMemValue *values;     /* live at the peak, largest first */
    int32_t nsteps;
    int64_t *live;            /* [nsteps] live bytes at each step, in execution order */
    const char **step_instr;  /* [nsteps] the instruction of each step */
    int32_t ndonations;
    PlanDonation *donations;  /* every input_output_alias pair of the entry */
    /* The peak with nothing donated (the same order), where there are
     * pairs: peak less it is what the pairs save, the estimate's exact
     * drop (docs/plan.md, "Donation"); 0 without pairs. */
    int64_t undonated_peak;
    /* Why the pairs save what they save (docs/plan.md, "What donation can
     * save"), where there are pairs: the donated parameters' bytes D; the
     * first step at which one of them is last read, s0 (-1: none is read),
     * and that parameter and instruction; A, the most bytes live at a
     * step before s0 (or the parameters alone), and that step (-1: before
     * step 0). No donated buffer is freed before s0, so the pairs lower
     * the peak by at most min(U - A, D), U the undonated peak. */
    int64_t donated_bytes, held_before_first_read;
    int32_t first_read_step, held_before_step;
    const char *first_read_param, *first_read_instr, *held_before_instr;
} PlanMemory;

/* Why the pairs of pm lower the peak by less than the donated bytes, in
 * words (the text, JSON and HTML views print it): the peak falls before
 * any donated parameter is last read, or the steps before the first such
 * read hold A bytes already. Empty when the pairs save D or more, or
 * there are none. */
void plan_donation_why(const PlanMemory *pm, char *buf, size_t n);

/* Fill *out (in arena a) from the estimate of spmd's entry, its aliased
 * parameters donated, as the run hands them over (a module without an
 * entry: all zero). IR_ENOMEM. */
IrStatus plan_memory(IrArena *a, const IrModule *spmd, PlanMemory *out);

/* Estimate computation `comp` of m (o may be NULL: the executor's order,
 * nothing donated). On success *out owns its arrays (mem_estimate_free).
 * IR_EINPUT (in d) for an order that is not one of comp's (an index out of
 * range or repeated, a step before its operand's) or a cycle; IR_ENOMEM.
 * Called computations are estimated in the executor's order. */
IrStatus mem_estimate(const IrModule *m, int32_t comp, const MemOptions *o, MemEstimate *out, IrDiag *d);
void mem_estimate_free(MemEstimate *e);
/* The peak of m's entry (o as mem_estimate's); 0 without an entry or for a
 * module the executor refuses; -1 when out of memory. */
int64_t mem_peak(const IrModule *m, const MemOptions *o);
/* "parameter", "output", "collective", "temporary". */
const char *mem_kind_name(MemKind k);

/* ------------------------------------------------------------------ */
/* device_layout.c: split and concat trees, devices, hosts, islands  */
/* ------------------------------------------------------------------ */

/* A split-node tree cuts a tiled value into shards: each internal node
 * splits one data dim (row-major: the outermost tiled dim first) into
 * `pieces` children; a leaf is one tile, held by `ndevices` devices (more
 * than one under partial replication), covering [offset, offset+shape) of
 * the full value (its valid extent; the device's buffer is padded to the
 * shard shape). Leaves appear in row-major order of the tile assignment.
 * A concat tree is the same tree read upwards. */
typedef struct PlanTree {
    bool leaf;
    int32_t dim;             /* internal: the dim split */
    int64_t pieces;          /* internal: children count */
    struct PlanTree *child;
    int32_t ndevices;        /* leaf */
    int64_t *devices;        /* leaf: partition ids */
    int32_t rank;
    int64_t *offset;         /* leaf */
    int64_t *extent;         /* leaf: valid extent per dim */
} PlanTree;

typedef struct PlanValue {
    int32_t index;           /* parameter number / output leaf */
    const char *name;        /* parameter name (inputs) */
    IrShape shape;           /* logical (full) shape */
    const IrSharding *sharding;
    IrShape device_shape;    /* per-device (padded) shape */
} PlanValue;

typedef struct PlanInstr {
    const char *name, *opcode;
    IrShape shape, device_shape;
    const IrSharding *sharding;
    bool fallback;
} PlanInstr;

typedef struct PlanIsland {
    int64_t host, replica;
    int32_t ndevices;
    const int64_t *devices;  /* global device ids (read-only: may be ir_iota_table) */
} PlanIsland;

typedef struct DeviceLayout {
    IrArena *arena;
    const char *module;
    const char *cluster;     /* the device function's name */
    int64_t num_partitions, num_replicas, hosts, local_devices;
    const int64_t *device_assignment; /* [replica][partition] -> global device id (ir_iota_table) */
    int32_t nislands;
    PlanIsland *islands;
    int32_t ninputs, noutputs, ninstrs;
    PlanValue *inputs;       /* one per entry parameter leaf */
    PlanValue *outputs;      /* one per root leaf */
    PlanInstr *instrs;
    const SpmdReport *report;/* collectives and fallbacks (borrowed) */
    int64_t peak_bytes_per_device;  /* memory.peak */
    PlanMemory memory;       /* the per-device memory estimate of the SPMD entry */
} DeviceLayout;

/* Build the split tree of a value of `shape` under sharding `s` (NULL for
 * a tuple or when out of memory). A plan keeps no trees: one has a leaf
 * per tile, so the dumps build each value's tree when they print it, in
 * an arena of their own, and compiling stays independent of the device
 * count. */
PlanTree *plan_split_tree(IrArena *a, const IrShape *shape, const IrSharding *s);
/* The peak of m's entry by liveness over the executor's order (memory.c,
 * mem_peak, nothing donated): what a plan's peak_bytes_per_device is of
 * its SPMD module, and what --limit memory holds a host program and a
 * reference run to. -1 when out of memory. */
int64_t plan_peak_bytes(const IrModule *m);
/* The inputs and outputs of a compiled program: logical shapes and
 * shardings (names optional). */
typedef struct PlanIo {
    int32_t nparam;
    const IrShape *param_shape;
    IrSharding *const *param_sharding;
    const IrShape *out_shape;
    const IrSharding *out_sharding;
} PlanIo;

/* Describe a compiled program. `src` (may be NULL for a loaded plan)
 * carries the propagated shardings of the source instructions; `spmd` is
 * the partitioned module; `io` the inputs and outputs. hosts >= 1;
 * local_devices 0 means N*R/hosts. IR_EINPUT when N*R is not hosts x
 * local_devices. */
IrStatus device_layout_build(const IrModule *src, const IrModule *spmd, const SpmdReport *rep, const PlanIo *io,
                             int64_t hosts, int64_t local_devices, DeviceLayout **out, IrDiag *d);
void device_layout_free(DeviceLayout *p);
/* The compile result lines of DESIGN.md ("// InputMapping {0, 1}", one
 * "// XlaInputShape" per parameter, "// XlaOutputShape (...)"), heap text. */
char *device_layout_compile_result(const DeviceLayout *p);

/* ------------------------------------------------------------------ */
/* program.c: the compiled program, as the runtime receives it          */
/* ------------------------------------------------------------------ */

/* One device cluster compiled for N partitions x R replicas: the SPMD
 * program and the logical shapes and shardings of its inputs and outputs
 * (the split and concat trees follow from them). Compiled from a model
 * (src set) or loaded from a plan file (src the logical cluster the plan
 * carries, or NULL). */
typedef struct PlanCluster {
    /* A replayed SPMD program (compile_spmd_program): `spmd` is the
     * user's module, run as it is on every device; each device's inputs
     * and outputs are its own (per-device shapes, recorded {replicated}:
     * no split or concat tree cuts them). src is NULL. */
    bool replay;
    IrModule *src;          /* the cluster with propagated shardings (owned), or NULL */
    IrModule *spmd;         /* the partitioned SPMD program (owned) */
    SpmdReport report;      /* what the partitioner decided (as far as a plan file keeps it) */
    int64_t num_partitions, num_replicas;
    int64_t hosts, local_devices;     /* from a plan file; 0 when compiled in this run */
    IrArena *arena;         /* shapes and shardings below */
    int32_t nparam;
    IrShape *param_shape;   /* logical shape of each entry parameter */
    IrSharding **param_sharding;
    IrShape out_shape;      /* logical shape of the entry root */
    IrSharding *out_sharding;
} PlanCluster;

void plan_cluster_free(PlanCluster *c);
/* The sharding of entry parameter p / of the entry root ({replicated}
 * where none is recorded). */
const IrSharding *plan_param_sharding(const PlanCluster *c, int32_t p);
const IrSharding *plan_root_sharding(const PlanCluster *c);
/* Record the logical shapes and shardings of the entry parameters and the
 * root of c->src into c (c->arena is created); of c->spmd, every one
 * {replicated}, for a replay. IR_ENOMEM only. */
IrStatus plan_cluster_record_io(PlanCluster *c, IrDiag *d);

/* ---- donate.c: input_output_alias pairs for buffer donors and inferred (--donate auto) ---- */

/* Pair entry parameters of c's SPMD program with outputs of the same
 * logical shape, type and sharding (the same shard on every device) that
 * are written as a buffer of their own: first the donors of c->src
 * (buffer_donor, whole parameters; XLA's OptimizeInputOutputBufferAlias),
 * those read last no later than the output is written, then the others in
 * any order; then, with auto_all, any parameter read last no later than
 * the output is written (--donate auto). Pairs the module declares are
 * kept and their parameters and outputs not paired again. Adds the pairs
 * to c->spmd->alias (IrAlias.from_donor, .inferred) and leaves in
 * c->spmd->donor the donors no pair took; *added counts the pairs.
 * IR_ENOMEM, or the estimate's IR_EINPUT for a program the executor would
 * refuse. */
IrStatus plan_donate(PlanCluster *c, bool auto_all, int32_t *added, IrDiag *d);
/* Why plan_donate left donor dn of c unpaired, a phrase into buf (n
 * bytes). Can't fail (a shorter phrase when out of memory). */
void plan_donor_unpaired(const PlanCluster *c, const IrDonor *dn, char *buf, size_t n);

/* Every module is a host program calling one or more device clusters.
 * `host` is that program: its entry has the module's parameters and
 * result, and each `call` carrying frontend_attributes
 * {_tessel_cluster="K"} runs cluster K (its to_apply is the logical,
 * unpartitioned cluster computation). host == NULL is the host program of
 * a module without host work, spelled out by nothing: call cluster 0 with
 * the entry's parameters and return its result (ncluster is then 1). */
typedef struct PlanProgram {
    IrModule *host;          /* owned, or NULL (see above) */
    int32_t ncluster;
    PlanCluster *cluster;    /* owned, ncluster entries */
    int64_t num_partitions, num_replicas;
    int64_t hosts, local_devices;     /* the layout the plan is for (0: not fixed) */
} PlanProgram;

void plan_program_free(PlanProgram *p);

#endif /* TESSEL_PARTITION_H */
