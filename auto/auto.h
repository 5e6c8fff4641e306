/*
 * auto.h: layer `auto/`: shardings chosen for the user (--auto-shard). A
 * pass over a verified module, before propagation, that gives every value
 * of the entry computation without a sharding one chosen to minimise the
 * estimated step time over a device mesh; what it writes are ordinary
 * sharding annotations, so the propagation and the SPMD partitioner of
 * partition/ do the rest (and the oracle holds as for any sharding).
 *
 * Files of this layer:
 *   inline.c    the entry's calls inlined first (JAX lowers take,
 *               log_softmax and their gradients as calls), and those of
 *               the loop bodies and branches in the graph: the graph
 *               prices and shards what they compute
 *   bcast_clone.c  a broadcast of a scalar and an iota of the entry read
 *               by several instructions copied for each reader (XLA's
 *               HloConstantSplitter): shared across layers they joined
 *               every layer in the graph
 *   loop.c      while loops in the graph: each state element one choice
 *               (the while, its body's parameter and root, its
 *               condition's parameter, its result), the body's
 *               instructions priced per iteration times the trip count
 *   loop_memory.c  a loop's memory under a limit: its state and its
 *               body's part of the peak charged at their chosen shardings,
 *               a state resharded from its operand with both buffers
 *   cond.c      conditionals in the graph: each element of a branch's
 *               parameter and of the result one choice, the branches'
 *               instructions priced as if each ran (their sum)
 *   mesh.c      the mesh (`2x4`, `data=2,model=4`); a spec (mesh axis ->
 *               tensor dim) made an IrSharding
 *   cost.c      the cost model: compute from FLOPs and bytes at rates,
 *               collectives alpha-beta per kind and group size, resharding
 *               between two specs; its documented defaults
 *   reshard_classify.c  what a reshard between two specs emits (none, a
 *               permute, an all-to-all, all-gathers, the whole value
 *               gathered): its collectives, priced by cost.c, and the bytes
 *               it holds, charged by graph.c
 *   strategy.c  the strategies of one instruction: every assignment of the
 *               mesh axes to its output dims and contracted dims that the
 *               shapes divide, with operand specs and costs; the roles
 *               of some op families in files of their own, which
 *               strategy_internal.h lists (reduce-window, fft,
 *               ragged-dot, ...)
 *   graph.c     the graph the solver sees: instructions made nodes,
 *               elementwise followers merged into their leader's group,
 *               edges with resharding cost matrices
 *   prune.c     dominated strategies removed (exactly: an optimum stays)
 *   elim.c      the exact minimum by variable elimination where the
 *               graph is narrow enough (no memory limit)
 *   lagrange.c  a memory limit over elimination: the memory row priced
 *               into the objective, the least price whose plan fits
 *   tiebreak.c  among plans within 2% of the fastest estimate, the one
 *               that communicates least, then of those as communicating
 *               the one that holds least at the peak
 *   ilp.c       the integer program over the groups, solved with GLPK
 *   explain.c   why: per chosen sharding the alternatives and their costs
 *   per_device.c  what is already per-device (partition-id, a collective
 *               between partitions, outside a manual region): held
 *               replicated where that keeps device 0's answer, else refused
 *   shard.c     auto_shard, the pass: graph, solve, annotate, explain
 *
 * May use ir/, partition/ (shardings as values) and GLPK; never executes
 * anything. Library code: never prints, never exits.
 */
#ifndef TESSEL_AUTO_H
#define TESSEL_AUTO_H

#include "../ir/ir.h"
#include "../partition/partition.h"

#define AUTO_MAX_AXES 4

/* ---- per_device.c ---- */

/* Where m holds, outside a manual region, an instruction whose value is
 * each device's own on n partitions: a collective between partitions whose
 * value reaches its computation's result is IR_EINPUT at it (the answer
 * would depend on the device count: no sharding makes it equal the
 * one-device reference); what partition-id reaches in the entry is held
 * replicated (device 0's answer, the reference's), else IR_EINPUT. */
IrStatus auto_per_device(IrModule *m, int64_t n, IrDiag *d);

/* ---- bcast_clone.c ---- */

/* In m's entry computation, each reader of a broadcast of a scalar or of
 * an iota after its first reads a copy of its own (named anew, at the
 * same source position); shared are only those with the user's sharding
 * or in control dependencies. Values unchanged. *nclone: the copies
 * made. IR_ENOMEM only (the module then may hold copies not yet read). */
IrStatus auto_clone_broadcasts(IrModule *m, int32_t *nclone, IrDiag *d);

/* ---- inline.c ---- */

/* Inline the calls of m's entry computation (and the calls inside what is
 * inlined) whose callee has no side effects, where nothing carries control
 * predecessors and the call no sharding of the user's; a get-tuple-element
 * of a tuple becomes its operand, inlined values nothing uses go, and so
 * do the inlined callees nothing calls any more (computations renumbered);
 * the same in the bodies of the loops and the branches of the
 * conditionals the graph takes in (each called once: changed in place).
 * *ninlined: the calls inlined. IR_ENOMEM (the module is then unusable),
 * IR_EINPUT (a cycle). */
IrStatus auto_inline_calls(IrModule *m, int32_t *ninlined, IrDiag *d);

/* ---- mesh.c ---- */

/* Named axes, major to minor, over devices 0..ndevices-1 in row-major
 * order (device = sum of coordinate x stride). */
typedef struct AutoMesh {
    int32_t naxes;
    int64_t size[AUTO_MAX_AXES];
    char name[AUTO_MAX_AXES][24];
    int64_t ndevices;
} AutoMesh;

/* Where each mesh axis goes in one array: dim[a] is the tensor dim axis a
 * tiles, -1 when the array is replicated along it. Axes on one dim tile it
 * major to minor in axis order. */
typedef struct AutoSpec {
    int8_t dim[AUTO_MAX_AXES];
} AutoSpec;

/* Parse SPEC: `2x4` (axes named x, y, z, w) or `data=2,model=4`. Sizes >= 1,
 * at most AUTO_MAX_AXES axes, names distinct. IR_EINPUT naming what is
 * wrong (the message starts "--mesh"). */
IrStatus auto_mesh_parse(const char *spec, AutoMesh *out, IrDiag *d);
/* "data=2,model=4" into buf (always terminated). */
void auto_mesh_text(const AutoMesh *m, char *buf, size_t cap);
/* The replicated spec (every axis -1). */
AutoSpec auto_spec_replicated(void);
/* Tiles of dim `d` under s (product of the sizes of the axes on it). */
int64_t auto_spec_tiles(const AutoMesh *m, const AutoSpec *s, int32_t d);
/* Devices sharing one shard under s (product of the unused axes). */
int64_t auto_spec_replication(const AutoMesh *m, const AutoSpec *s);
bool auto_spec_equal(const AutoSpec *a, const AutoSpec *b);
/* The sharding of an array of `rank` dims under s, in arena a (NULL on
 * OOM). */
IrSharding *auto_spec_sharding(IrArena *a, const AutoMesh *m, const AutoSpec *s, int32_t rank);
/* The same with the axes on one dim (and the replicated ones) combined
 * major to minor in `order` (naxes axis indices) instead of axis order:
 * the shardings a mesh expresses when its axes are taken in any order. */
IrSharding *auto_spec_sharding_order(IrArena *a, const AutoMesh *m, const AutoSpec *s, int32_t rank,
                                     const int32_t *order);
/* "[data,-]": per tensor dim its axes ("-": none), then "+model" for
 * the axes it is replicated along; into buf (always terminated). */
void auto_spec_text(const AutoMesh *m, const AutoSpec *s, int32_t rank, char *buf, size_t cap);

/* ---- cost.c ---- */

/* Kinds of collective the cost model prices. */
typedef enum AutoColl {
    AUTO_ALL_REDUCE,     /* 2(n-1)/n of the buffer */
    AUTO_ALL_GATHER,     /* (n-1)/n of the result */
    AUTO_REDUCE_SCATTER, /* (n-1)/n of the operand */
    AUTO_ALL_TO_ALL,     /* (n-1)/n of the buffer */
    AUTO_NCOLL
} AutoColl;

/* Rates of the cost model; scope 0 is a group inside one host, 1 one
 * that crosses hosts. Zero fields take the defaults of auto_cost_default
 * (auto_cost_fill). */
typedef struct AutoCost {
    double flops;                        /* dot FLOP/s of one device */
    double bytes;                        /* bytes/s one device reads and writes elementwise */
    double alpha[AUTO_NCOLL][2];         /* seconds per collective */
    double beta[AUTO_NCOLL][2];          /* seconds per byte each device moves */
} AutoCost;

/* The documented defaults (docs/auto-shard.md): 20 GFLOP/s, 5 GB/s,
 * alpha 20 us in a host and 50 us across, beta 1/(4 GB/s) in a host and
 * 8/link_gbps ns per byte across (link_gbps 0: 10). */
AutoCost auto_cost_default(double link_gbps);
/* Zero fields of c from the defaults. */
void auto_cost_fill(AutoCost *c, double link_gbps);
/* Seconds of collective k over a group of n devices (scope 0/1) moving
 * `bytes` (the buffer as the comment of AutoColl counts it). 0 for n < 2. */
double auto_coll_seconds(const AutoCost *c, AutoColl k, int64_t n, int scope, double bytes);
/* Does the group of mesh axes `axes` (bit mask) span more than one host
 * of `local` devices each? */
int auto_axes_scope(const AutoMesh *m, unsigned axes, int64_t local);
/* Seconds to turn an array of `shape` held under `from` into `to`: the
 * collectives of auto_reshard_classify at c's rates. */
double auto_reshard_seconds(const AutoCost *c, const AutoMesh *m, int64_t local, const IrShape *shape,
                            const AutoSpec *from, const AutoSpec *to);

/* ---- reshard_classify.c ---- */

/* What partition/reshard.c emits for a pair of shardings, in its order. */
typedef enum AutoReshardKind {
    AUTO_RESHARD_NONE,       /* the same, or a cut of each device's shard (or of the whole value) */
    AUTO_RESHARD_PERMUTE,    /* the same tiles on other devices: a collective-permute */
    AUTO_RESHARD_ALL_TO_ALL, /* one dim's axes moved whole to an untiled dim */
    AUTO_RESHARD_GATHER,     /* an all-gather per dim no longer tiled, the rest kept */
    AUTO_RESHARD_WHOLE       /* every tiled dim gathered, the target sliced out */
} AutoReshardKind;

/* One collective of a reshard, as cost.c prices it. */
typedef struct AutoReshardColl {
    AutoColl kind; /* the rates it is priced at (a permute: the all-to-all's) */
    int64_t n;     /* devices in its group */
    unsigned axes; /* the mesh axes of the group (bit mask) */
    double bytes;  /* its buffer, as AutoColl counts it */
} AutoReshardColl;

typedef struct AutoReshard {
    AutoReshardKind kind;
    int32_t ncoll;
    AutoReshardColl coll[AUTO_MAX_AXES]; /* in the order emitted (a gather: one a dim, each on an axis) */
    double held; /* bytes it holds beside the operand's shard while it runs (graph.c's memory row) */
} AutoReshard;

/* How an array of `shape` held under `from` becomes `to`: the kind, its
 * collectives and the bytes it holds (reshard_classify.c's comment: one
 * classifier for the price and the memory row). */
void auto_reshard_classify(const AutoMesh *m, const IrShape *shape, const AutoSpec *from, const AutoSpec *to,
                           AutoReshard *r);

/* ---- strategy.c ---- */

/* One way to compute an instruction: its output spec, the spec each
 * operand must arrive in (in[], nopnd entries; NULL for a leaf) and the
 * estimated seconds of compute and of its own collectives. */
typedef struct AutoStrategy {
    AutoSpec out;
    AutoSpec *in;
    double compute, comm;
    int64_t bytes;           /* per-device bytes of the output */
} AutoStrategy;

/* The strategies of instruction `i` of entry computation c of module mod
 * (its callees: a scatter's combiner), in arena a.
 * *n 0: the instruction is opaque to the auto-sharder (left to
 * propagation; its operands are priced as arriving replicated). The
 * order is deterministic (replicated first). IR_ENOMEM only. */
IrStatus auto_strategies(IrArena *a, const AutoMesh *m, const AutoCost *cost, int64_t local, const IrModule *mod,
                         const IrComputation *c, int32_t i, AutoStrategy **out, int32_t *n, IrDiag *d);
/* The strategy of follower `i` (auto_follows) whose operand `opnd`
 * arrives as `in`: each mesh axis on the output dim that operand dim
 * becomes, dropped where there is none or the shape does not divide.
 * IR_ENOMEM only. */
IrStatus auto_follow(IrArena *a, const AutoMesh *m, const AutoCost *cost, const IrComputation *c, int32_t i,
                     int32_t opnd, const AutoSpec *in, AutoStrategy *s, IrDiag *d);
/* The array whose dims stand for x's result (strategy_tuple.c): x's own
 * shape, or, for a reduce of several inputs (a tuple of arrays of one
 * dims), its first element, an rng-bit-generator's bits, a
 * batch-norm-training's or -grad's first element (x's dims); NULL for
 * another tuple. */
const IrShape *auto_result_dims(const IrInstr *x);
/* The sharding of x's result with `spec` on its dims (every element of a
 * tuple of one dims; an rng-bit-generator's bits, its state replicated;
 * a batch-norm's first element, its vectors on the feature dim's axes),
 * in arena a (NULL on OOM). */
IrSharding *auto_result_sharding(IrArena *a, const AutoMesh *m, const IrInstr *x, const AutoSpec *spec);
/* Does get-tuple-element x of c read an element its tuple's `spec` does
 * not stand for as it is: an rng-bit-generator's state (replicated
 * whatever the spec), a batch-norm-training's or -grad's per-feature
 * vector (the spec's axes on the feature dim alone)? Then *elem is the
 * element's spec in the tuple's dims and *shape (its dims in `dims`, at
 * least IR_MAX_RANK) a shape of those dims with the element's bytes. */
bool auto_element_spec(const IrComputation *c, const IrInstr *x, const AutoSpec *spec, AutoSpec *elem,
                       IrShape *shape, int64_t *dims);
/* The operand instruction i may follow (share its choice with): an
 * elementwise op's first computed operand of its dims (never a
 * parameter), a reshape's, transpose's or broadcast's operand
 * (not a broadcast of a parameter that adds dims); -1: none (i chooses for itself). */
int32_t auto_follows(const IrComputation *c, int32_t i);

/* ---- graph.c ---- */

/* Groups of instructions that share one choice (an elementwise follower
 * takes its leader's strategy index), with a unary cost per strategy and
 * pairwise edges between groups. */
typedef struct AutoEdge {
    int32_t from, to;        /* groups */
    double *cost;            /* [nstrat(from) x nstrat(to)], row-major */
    double *mem;             /* NULL, or the same cells: per-device bytes the pair of choices
                                holds at the peak beyond the groups' own (a loop's state
                                resharded from its operand holds both buffers) */
    double *wire;            /* NULL, or the same cells: bytes a device moves in the pair's reshards
                                (auto_tiebreak_wire) */
} AutoEdge;

typedef struct AutoNode {
    int32_t group;           /* -1: opaque or a tuple (not solved) */
    AutoStrategy *strat;     /* the node's own strategies (nstrat of its group) */
    int32_t nstrat;
    bool fixed;              /* carries the user's sharding */
} AutoNode;

typedef struct AutoGroup {
    int32_t leader;          /* instruction index */
    int32_t nstrat;
    double *unary;           /* nstrat: compute, own collectives, reshards inside the group */
    double *compute;         /* nstrat: the members' compute alone (unary less it: communication) */
    double *mem;             /* nstrat: per-device bytes counted against the memory limit */
    double *wire;            /* NULL, or nstrat: bytes a device moves in the collectives and reshards
                                of the unary cost (auto_tiebreak_wire) */
    int32_t npruned;         /* dominated strategies removed (prune.c) */
} AutoGroup;

/* ---- loop.c (the view) ---- */

/* A reshard the graph prices besides operands: value `from`'s output spec
 * into state node `to`'s, `weight` times a step. */
typedef struct AutoLink {
    int32_t from, to;
    double weight;
} AutoLink;

/* A while taken into the view (of the entry, of a body or of a branch taken in). */
typedef struct AutoLoop {
    int32_t instr;           /* the while, a view index (an entry's: its entry index) */
    int32_t first_state;     /* view index of its state element 0 */
    int32_t nstate;
    double trips;            /* iterations (1 where not known) */
    bool trips_known;
} AutoLoop;

/* The computation the graph is built over: the entry's instructions at
 * their own indices, then per loop its state nodes (parameter-like
 * leaves) and its body's instructions; get-tuple-elements of a body's
 * parameter and of the while's result made copies of their state node. */
/* A conditional taken into the view (cond.c). */
typedef struct AutoCond {
    int32_t instr;           /* the conditional, a view index */
    int32_t first_out;       /* view index of its result's element 0 */
    int32_t nout;
    int32_t nbranch;
    int32_t *first_param;    /* nbranch: view index of branch b's parameter element 0 */
    int32_t *nparam;         /* nbranch: branch b's parameter elements */
    int32_t *first_instr;    /* nbranch: view index of branch b's instruction 0 (its
                                instruction j at first_instr[b] + j) */
} AutoCond;

typedef struct AutoView {
    IrComputation comp;
    int32_t nentry;
    int32_t *where_comp, *where_instr; /* the real instruction; -1: a state node */
    double *weight;          /* times it runs in a step (a body's: the trips) */
    AutoLink *link;
    int32_t nlink;
    AutoLoop *loop;
    int32_t nloop;
    AutoCond *cond;
    int32_t ncond;
} AutoView;

/* Does entry instruction x run on the host (compile/ places it: a host op
 * such as a tessel_print custom-call)? */
typedef bool (*AutoOnHost)(const IrInstr *x);

typedef struct AutoGraph {
    IrArena *arena;
    AutoView view;
    const IrComputation *comp; /* &view.comp */
    const char *file, *src; /* the module's, for errors */
    AutoMesh mesh;
    int64_t local;           /* devices per host */
    AutoNode *node;          /* comp->ninstr entries */
    int32_t ngroup, nedge;
    AutoGroup *group;
    AutoEdge *edge;
    double mem_fixed;        /* bytes of the memory estimate no choice changes */
    AutoOnHost on_host;      /* NULL: every instruction on the devices */
    int32_t edge_cap;        /* edge[] entries allocated */
    /* Elimination's work over all the solves of this graph (elim.c):
     * the most (0: no bound), spent so far, and whether a solve was
     * refused for it (the searches then keep the plan they have). */
    int64_t elim_budget, elim_spent;
    bool elim_out;
    int64_t mem_asked;       /* AutoOptions.mem_asked, for the messages */
} AutoGraph;

/* Build the graph of m's entry computation (strategies, groups, edges).
 * on_host (NULL: none) says which entry instructions run on the host:
 * their values are the host program's, not charged against the memory
 * limit as the clusters' (charge_memory).
 * User shardings are constraints: a node that carries one keeps only the
 * strategies giving it; one whose sharding names another device count
 * than the mesh, is no tiling over the mesh's axes (in any order), or
 * cuts a dim into more tiles than it has elements is IR_EINPUT, at the
 * instruction. IR_ENOMEM, IR_EINPUT. */
IrStatus auto_graph_build(const IrModule *m, const AutoMesh *mesh, const AutoCost *cost, int64_t local,
                          bool donate_auto, AutoOnHost on_host, AutoGraph *g, IrDiag *d);
void auto_graph_free(AutoGraph *g);
/* Charge the pair of value u and node i (a loop's state element and the
 * operand it is resharded from): while the loop runs both are held, so
 * where i's spec differs from u's, i's per-device bytes more (on the
 * edge between their groups, or on one group's memory where the other
 * has one strategy or they share one). IR_ENOMEM. */
IrStatus auto_graph_charge_pair(AutoGraph *g, int32_t u, int32_t i, IrDiag *d);
/* The memory rows charged afresh at step `step` of e (mem_estimate of m's
 * entry, m the module g was built from; -1: its peak, as
 * auto_graph_build charges them): the values live while that step runs,
 * and the reshards of the instruction run there. IR_ENOMEM. */
IrStatus auto_graph_charge_at(AutoGraph *g, const IrModule *m, const MemEstimate *e, int32_t step, IrDiag *d);
/* Does step `step` of e run an instruction of the entry with strategies
 * whose operands the partitioner reshards to its strategy's (not a
 * reduce: it reduces the shard it has; not a loop)? Their reshards'
 * buffers are charged there. */
bool auto_graph_reshards_at(const AutoGraph *g, const MemEstimate *e, int32_t step);
/* Does it under choice[] hold more than its operands for them: one
 * gathered, exchanged, or padded to be cut (graph.c reshard_bytes)? A
 * contraction's step always counts (its live values may pass the peak's
 * where nothing is gathered: mlp_megatron on 2). */
bool auto_graph_gathers_at(const AutoGraph *g, const MemEstimate *e, int32_t step, const int32_t *choice);
/* A memory row kept apart: the bytes charged at one step, a limit for
 * the integer program besides the graph's own row (auto_ilp_solve_rows). */
typedef struct AutoMemRow {
    double fixed;            /* AutoGraph.mem_fixed */
    double *cell;            /* heap: each group's mem[] in order, then each edge's cells (0 where it has none) */
} AutoMemRow;
/* The graph's row as charged now into *r. IR_ENOMEM. */
IrStatus auto_graph_row_take(const AutoGraph *g, AutoMemRow *r, IrDiag *d);
void auto_mem_row_free(AutoMemRow *r);
/* The estimated per-device bytes of choice[] against the memory limit. */
double auto_graph_mem(const AutoGraph *g, const int32_t *choice);
/* The estimated seconds of choice[] (one strategy per group). */
double auto_graph_cost(const AutoGraph *g, const int32_t *choice);

/* ---- loop.c ---- */

/* The view of m (its entry and the loops it takes in: a while of the
 * entry, or of a body taken in, whose state is a flat tuple of arrays its
 * body reads only by get-tuple-element, whose body and condition nothing
 * else calls, with no sharding of the user's on the state; cond.c adds a
 * branch's with auto_view_add_loops), in arena a. IR_ENOMEM only. */
IrStatus auto_loop_view(IrArena *a, const IrModule *m, AutoView *v, IrDiag *d);
/* Per computation of m, the instructions that call it (heap, ts_free;
 * NULL on OOM). */
int32_t *auto_call_counts(const IrModule *m);
/* The view grown by instruction x (a copy; where it comes from: comp and
 * instr, -1 for a state node; run `weight` times a step), *cap the
 * entries its arrays hold; a link from value `from` to state node `to`,
 * *cap likewise; x made an identity (a copy) of state node s. In arena
 * a. IR_ENOMEM only. */
IrStatus auto_view_append(IrArena *a, AutoView *v, int32_t *cap, const IrInstr *x, int32_t comp, int32_t instr,
                          double weight, IrDiag *d);
IrStatus auto_view_link(IrArena *a, AutoView *v, int32_t *cap, int32_t from, int32_t to, double weight, IrDiag *d);
IrStatus auto_view_identity(IrArena *a, IrInstr *x, int32_t s, IrDiag *d);
/* The whiles of computation c of m the view takes in (as the entry's:
 * see auto_loop_view), c's instructions at view indices first on and run
 * `weight` times a step, appended to v with their state nodes, bodies
 * (run weight x trips) and links, and the whiles of those bodies; calls:
 * auto_call_counts(m); *cap and *lcap as auto_view_append's and
 * auto_view_link's. cond.c takes in a branch's whiles with it. IR_ENOMEM
 * only. */
IrStatus auto_view_add_loops(IrArena *a, const IrModule *m, AutoView *v, int32_t c, int32_t first, double weight,
                             const int32_t *calls, int32_t *cap, int32_t *lcap, IrDiag *d);
/* Each loop's state sharding (its state nodes' chosen specs, replicated
 * where a node has no strategy) written on the while, its operand tuple,
 * its body's parameter and root, its condition's parameter. */
IrStatus auto_loop_annotate(IrModule *m, const AutoGraph *g, const int32_t *choice, IrDiag *d);

/* ---- cond.c ---- */

/* The conditionals of the view (the entry's, a loop body's taken in, a
 * branch's taken in) appended to it: a conditional whose result is an
 * array or a tuple of arrays, each branch called by it alone, with one
 * parameter (an array, or a tuple of arrays its branch reads only by
 * get-tuple-element, fed by a tuple instruction), a root of the result's
 * shape (a tuple instruction for a tuple), no side effects, no sharding
 * of the user's on it, its branches' parameters or roots. IR_ENOMEM
 * only. */
IrStatus auto_cond_view(IrArena *a, const IrModule *m, AutoView *v, IrDiag *d);
/* The conditional of the view at view index i; NULL: none. */
const AutoCond *auto_cond_of(const AutoGraph *g, int32_t i);
/* What state node i (where_comp < 0) of a conditional is ("conditional
 * result", "branch parameter"); NULL: not a conditional's. */
const char *auto_cond_state_text(const AutoGraph *g, int32_t i);
/* The `own` bytes of C's result charged at its elements' chosen specs. */
void auto_cond_charge_result(AutoGraph *g, const AutoCond *C, double own);
/* Each conditional's result sharding (its result nodes' chosen specs) on
 * the conditional and its branches' roots, each branch's tuple
 * parameter's elements' on its parameter. IR_ENOMEM. */
IrStatus auto_cond_annotate(IrModule *m, const AutoGraph *g, const int32_t *choice, IrDiag *d);

/* ---- loop_memory.c ---- */

/* `bytes` of view node i's value (whole, unsharded) charged at the
 * per-device bytes of each of its strategies; whole (mem_fixed) where it
 * has none. */
void auto_graph_charge(AutoGraph *g, int32_t i, double bytes);
/* The loop of the view whose while is view instruction i (an entry's: its
 * entry index); NULL: none. */
const AutoLoop *auto_loop_of(const AutoGraph *g, int32_t i);
/* Does the loop body pass its state element k through unchanged (its
 * root's operand k is get-tuple-element(parameter, k): a scan's stacked
 * weights)? */
bool auto_loop_passed_through(const IrComputation *body, int32_t k);
/* The `own` bytes of loop L's state (the while's result made afresh, live
 * at the peak) charged at each fresh state element's chosen sharding. */
void auto_loop_charge_state(AutoGraph *g, const IrModule *m, const AutoLoop *L, double own);
/* What L's body holds at the peak beyond its state (`held`, counted once,
 * not per iteration) charged at the chosen shardings of the body's values
 * live at the body's own peak. IR_ENOMEM. */
IrStatus auto_loop_charge_body(AutoGraph *g, const IrModule *m, const AutoLoop *L, double held, IrDiag *d);
/* What conditional C holds at the peak beyond its operands and result
 * (`held`: partition/memory.c's part of the peak for the branch that
 * holds most) charged at the chosen shardings of that branch's values
 * live at the branch's own peak; a loop taken in there charged as an
 * entry loop is (its fresh state at its state nodes, its body's part at
 * its body's values). IR_ENOMEM. */
IrStatus auto_cond_charge_branch(AutoGraph *g, const IrModule *m, const AutoCond *C, double held, IrDiag *d);
/* Each state element of L the body passes through unchanged (its buffer
 * the operand's where their shardings agree) charged as a pair with its
 * operand (auto_graph_charge_pair): resharded, the loop holds both.
 * IR_ENOMEM. */
IrStatus auto_loop_charge_pairs(AutoGraph *g, const IrModule *m, const AutoLoop *L, IrDiag *d);

/* ---- prune.c ---- */

/* Remove every strategy another one dominates (costs no more whatever the
 * neighbours choose, and communicates no more either: with `memory`, needs
 * no more memory too), in rounds until none is left: the optimum of the
 * program is kept, and so is the tie-break's (tiebreak.c).
 * IR_ENOMEM only. */
IrStatus auto_graph_prune(AutoGraph *g, bool memory, IrDiag *d);

/* ---- elim.c ---- */

/* The work of all the solves of one graph at most (g->elim_budget, set by
 * auto_shard): 2^32 sums, about 20 s of CPU. A search (lagrange.c,
 * tiebreak.c, shard.c's rounds of a memory limit) solves again and again
 * on one graph, each solve up to 2^27: the held-out VAE step on 2x2
 * (tests/jax/test_auto_heldout47.py, 124M a solve) under a limit of 1.1x
 * its hand plan's peak ran over 350 solves, minutes of CPU. */
#define AUTO_ELIM_GRAPH_WORK (INT64_C(1) << 32)

/* The exact minimum of the objective (no memory row) by variable
 * elimination into choice[]: 1 solved; 0 the graph is too wide for it
 * (a factor past 8M cells, or the work of the elimination, counted before
 * it runs, past its budget: solve with auto_ilp_solve), or its work would
 * pass what is left of g->elim_budget (g->elim_out set, choice[] as it
 * was); -1 out of memory. Deterministic. */
int auto_elim_solve(AutoGraph *g, int32_t *choice);

/* ---- lagrange.c ---- */

typedef struct AutoIlpInfo AutoIlpInfo; /* ilp.c's, below */

/* A plan within mem_limit by a Lagrangian on the memory row over
 * auto_elim_solve (the least price of memory whose optimum fits, the
 * cheapest fitting plan seen), and its bound (the largest Lagrangian dual
 * of the prices tried): where the plan is more than 2% above it, the
 * integer program with the memory row (auto_ilp_solve, at most
 * AUTO_EXACT_COLUMNS columns) whose plan is kept where it is more than 2%
 * cheaper. 1 found, into choice[], and (how not NULL) whose plan it is,
 * its bound and gap; 0 none (too wide
 * for elimination, or nothing it tried fits: solve with auto_ilp_solve);
 * -1 out of memory. The unary costs of g are as they were on return.
 * Deterministic. */
int auto_lagrange_solve(AutoGraph *g, double mem_limit, int32_t *choice, AutoIlpInfo *how);

/* ---- tiebreak.c ---- */

/* choice[] an optimum of g by elimination: replace it with the plan of
 * least communication (bytes a device moves where the graph has wire[],
 * else seconds) among those whose estimated seconds are within 2%
 * of it (time + mu x communication solved again, mu from the one making
 * the optimum's communication worth 2% of its step, doubled while the
 * plan stays within 2%, then bisected: a Lagrangian, exact where the
 * bound binds at some mu), then with the plan that holds least at the
 * peak (auto_graph_mem) among those within 2% of the optimum's seconds
 * and of that plan's communication (lambda x memory added likewise). Under mem_limit (> 0) only plans that fit:
 * where the graph is small (5,000 strategies and edge cells) and has
 * bytes, both by the integer program (auto_ilp_least), exact; else each
 * solve at the least price of memory whose plan fits, searched from
 * price (0: where the plan's memory is worth 2% of its step). 1 done (choice[]
 * unchanged where elimination is too wide); -1 out of memory. The costs
 * of g are as they were on return. Deterministic. */
int auto_tiebreak_solve(AutoGraph *g, double mem_limit, double price, int32_t *choice);
/* The bytes a device moves, per strategy of each group of g and per cell
 * of each edge (wire[]), from a second graph of m built with a latency of
 * nothing and a second a byte (the same strategies, groups and edges: the
 * costs do not shape the graph); the tie-break then orders plans by bytes,
 * not by communication seconds, which a collective's latency dominates.
 * Before pruning (prune.c keeps the plans of least bytes too). Where the
 * second graph differs in shape (never, by construction) wire[] stays
 * NULL. IR_ENOMEM, or what auto_graph_build returns. */
IrStatus auto_tiebreak_wire(AutoGraph *g, const IrModule *m, const AutoCost *cost, bool donate_auto,
                            AutoOnHost on_host, IrDiag *d);

/* ---- ilp.c ---- */

/* How a solve ended (auto/shard.c fills it for the plan it keeps, the
 * explanation says it): optimal (proven, within GLPK's gap of 1e-6), or
 * not: branch and bound stopped at its bound of subproblems with the best
 * plan found, or the Lagrangian's plan (lagrange.c) above its dual bound;
 * gap the plan's relative distance to the bound (0.01: the optimum is at
 * most 1% cheaper); nodes: the subproblems branch and bound made (0: the
 * relaxation was integral, or no program). */
typedef enum AutoSolver {
    AUTO_BY_ELIM,     /* variable elimination (elim.c), exact */
    AUTO_BY_LAGRANGE, /* the Lagrangian on memory over it (lagrange.c) */
    AUTO_BY_ILP,      /* the integer program (ilp.c) */
} AutoSolver;

typedef struct AutoIlpInfo {
    bool optimal;
    double gap;
    int32_t nodes;
    AutoSolver by;    /* whose plan it is (auto_ilp_solve: AUTO_BY_ILP) */
    double bound;     /* not optimal: seconds no plan (within the limit) is
                         cheaper than, whence gap; -INFINITY: none known */
    int32_t node_limit; /* the integer program's bound of subproblems (0: none ran) */
} AutoIlpInfo;

/* Choose one strategy per group minimising unary plus edge costs with
 * Σ mem <= mem_limit (0: none), by an integer program (GLPK):
 * deterministic (bounded by a count of subproblems, not a clock); how it
 * ended into *info (may be NULL). IR_EINPUT when nothing fits the limit
 * (the message says the smallest estimate) or no plan was found within
 * the bound; IR_EINTERNAL when the solver fails. */
IrStatus auto_ilp_solve(const AutoGraph *g, double mem_limit, int32_t *choice, AutoIlpInfo *info, IrDiag *d);

/* Branch and bound's bound: subproblems (GLPK's nodes), not seconds. */
#define AUTO_ILP_NODE_LIMIT 2000
/* The program's columns (strategies and edge cells) up to which it solves
 * a memory limit besides the Lagrangian (GLPK takes milliseconds to a
 * fifth of a second there: 2,211 columns 0.18 s; 12,217 took 16 s). */
#define AUTO_EXACT_COLUMNS 5000
/* The most columns the integer program is given (ilp.c): past it the
 * simplex alone takes minutes to hours, so the compile is refused. */
#define AUTO_ILP_MAX_COLUMNS 250000

/* auto_ilp_solve with branch and bound stopped after node_limit
 * subproblems (tests). */
IrStatus auto_ilp_solve_bounded(const AutoGraph *g, double mem_limit, int32_t node_limit, int32_t *choice,
                                AutoIlpInfo *info, IrDiag *d);
/* auto_ilp_solve with the plan held under mem_limit by each of rows[]
 * too (memory charged at other steps: auto/shard.c fit_steps). */
IrStatus auto_ilp_solve_rows(const AutoGraph *g, double mem_limit, const AutoMemRow *rows, int32_t nrows,
                             int32_t *choice, AutoIlpInfo *info, IrDiag *d);

/* The terms of a plan an integer program can minimise or bound: its
 * estimated seconds (unary, cost), the bytes a device moves (wire[]) and
 * its memory row (mem[], with mem_fixed). */
typedef enum AutoTerm { AUTO_TERM_TIME, AUTO_TERM_WIRE, AUTO_TERM_MEM, AUTO_NTERMS } AutoTerm;

/* The integer program of auto_ilp_solve_bounded with `objective` for the
 * objective and each term t bounded by bound[t] (> 0; else free): the
 * tie-break's plan of least bytes within 2% of the fastest and the limit
 * (tiebreak.c). The same errors. */
IrStatus auto_ilp_least(const AutoGraph *g, AutoTerm objective, const double *bound, int32_t node_limit,
                        int32_t *choice, AutoIlpInfo *info, IrDiag *d);

/* ---- explain.c ---- */

/* For each group: the chosen strategy and every alternative with its
 * estimated seconds (its own costs and the edges to its neighbours'
 * choices), cheapest first; as text (heap, ts_free; NULL on OOM). how
 * (NULL: elimination's, exact): how the solve ended, said under the
 * first line where its plan is not proven optimal ("solver: ..."). */
char *auto_explain_text(const AutoGraph *g, const int32_t *choice, const char *module, const AutoIlpInfo *how);
/* The same as a JSON object: the mesh, the estimate, the solver (how: who
 * made the plan, optimal, its gap, GLPK's subproblems and their bound), its terms, and per
 * group its leader (name, op, line, column), followers, the chosen spec
 * and sharding with its seconds, and every other strategy with its
 * seconds, cheapest first (heap, ts_free; NULL on OOM). */
char *auto_explain_json(const AutoGraph *g, const int32_t *choice, const char *module, const AutoIlpInfo *how);

/* ---- shard.c ---- */

typedef struct AutoOptions {
    AutoMesh mesh;
    AutoCost cost;           /* zero fields: defaults */
    int64_t local_devices;   /* devices per host (0: all of them) */
    double link_gbps;        /* for the defaults */
    int64_t host_cores;      /* cores of a host (0: one per device): more devices share them */
    int64_t mem_limit;       /* bytes per device; 0 none (the clusters' alone: what the host
                                program holds is the caller's to take off) */
    int64_t mem_asked;       /* the user's --limit memory where mem_limit is a share of it
                                (compile/driver.c's later tries), for the messages; 0: the same */
    AutoOnHost on_host;      /* NULL: no instruction runs on the host (compile/driver.c
                                gives cluster/'s rule where a limit is given) */
    bool donate_auto;        /* --donate auto: every parameter may give its buffer to an update */
} AutoOptions;

typedef struct AutoReport {
    char *explain;           /* heap (ts_free) */
    char *explain_json;      /* the same as JSON (auto_explain_json); heap */
    double seconds;          /* the estimate of the chosen plan */
    double mem;              /* its per-device bytes by the memory row (auto_graph_mem) */
    int32_t ngroups, nnodes;
    double solve_seconds;
} AutoReport;

/* Choose shardings for m's entry computation over opt->mesh and write
 * them on its instructions (those the user annotated are kept). The mesh
 * must have m's partition count of devices (IR_EINPUT otherwise).
 * IR_ENOMEM, IR_EINPUT (see auto_graph_build, auto_ilp_solve). */
IrStatus auto_shard(IrModule *m, const AutoOptions *opt, AutoReport *rep, IrDiag *d);
void auto_report_free(AutoReport *r);

#endif /* TESSEL_AUTO_H */
