/*
 * partition.h: layer `partition/`: shardings as values to compute with,
 * sharding propagation, the SPMD partitioner, split/concat trees, device
 * assignment, replica islands and the compiled program's data.
 *
 * Files of this layer:
 *   shd_ops.c     building and transforming shardings (transpose, dropping
 *                 and inserting dims, replication), shard shapes and offsets
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
 *   device_layout.c  a compiled program's device layout (Plan): split-node
 *                 and concat trees, device assignment, replica islands,
 *                 per-device shapes, the compile result lines; what the
 *                 plan views show
 *   program.c     the compiled program the runtime executes (PlanCluster,
 *                 PlanProgram: the host program and its device clusters):
 *                 data, no pass
 *
 * "Plan" means four things in tessel, each with its own name: the plan
 * file (compile/plan_file.c, what `tessel compile` writes; TsPlan is its
 * handle, api/plan_handle.c), the compiled program (program.c), its
 * device layout (device_layout.c, the type Plan) and the plan views
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
} SpmdSite;

typedef struct SpmdCollective {
    const char *name;          /* instruction name in the partitioned module */
    IrOpcode op;
    const char *replica_groups;/* XLA text, e.g. "{{0,1},{2,3}}" */
    int64_t bytes_per_device;  /* bytes each device receives */
    SpmdSite site;
} SpmdCollective;

/* An operand whose sharding is not what its user needs (spmd_operand_as). */
typedef struct SpmdReshard {
    SpmdSite site;             /* operand set */
    const char *from, *to;     /* sharding texts */
} SpmdReshard;

typedef struct SpmdReport {
    IrArena *arena;
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

typedef struct Plan {
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
    int64_t peak_bytes_per_device;
} Plan;

/* Build the split tree of a value of `shape` under sharding `s` (NULL for
 * a tuple or when out of memory). A plan keeps no trees: one has a leaf
 * per tile, so the dumps build each value's tree when they print it, in
 * an arena of their own, and compiling stays independent of the device
 * count. */
PlanTree *plan_split_tree(IrArena *a, const IrShape *shape, const IrSharding *s);
/* The peak of live bytes over m's entry computation in definition order
 * (a value lives from its definition to its last use, the root to the
 * end; tuples and get-tuple-element hold nothing of their own): what a
 * plan's peak_bytes_per_device is of its SPMD module, and what --limit
 * memory holds a host program and a reference run to. -1 when out of
 * memory. */
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
IrStatus plan_build(const IrModule *src, const IrModule *spmd, const SpmdReport *rep, const PlanIo *io,
                    int64_t hosts, int64_t local_devices, Plan **out, IrDiag *d);
void plan_free(Plan *p);
/* The compile result lines of DESIGN.md ("// InputMapping {0, 1}", one
 * "// XlaInputShape" per parameter, "// XlaOutputShape (...)"), heap text. */
char *plan_compile_result(const Plan *p);

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
