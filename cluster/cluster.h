/*
 * cluster.h: layer `cluster/`: host/device placement, cycle-free device
 * clusters, and outlining each cluster into a device computation called
 * from a host program (what TensorFlow's bridge does to its graphs).
 *
 * The pipeline, for the entry computation and, in turn, for every
 * computation a host-side while / conditional / call runs:
 *
 *   place     every instruction is host work (a host op, host control flow,
 *             glue that only shuffles host values, the parameters), a small
 *             constant (cloned wherever it is used), or device work;
 *   form      device instructions are grouped into the fewest clusters that
 *             keep the graph acyclic once each cluster is contracted to one
 *             node; every merge goes through an incremental cycle detector
 *             (Pearce-Kelly dynamic topological order, TF's GraphCycles);
 *   outline   each cluster becomes a computation `cluster_N` (parameters:
 *             the values flowing in; root: a tuple of the values flowing
 *             out), called from the host computation by
 *             `call(...), to_apply=cluster_N,
 *              frontend_attributes={_tessel_cluster="N"}`
 *             whose results are taken apart with get-tuple-element.
 *
 * How the rest of tessel uses it:
 *   - the compile pipeline runs shardings propagation on the whole module,
 *     then clu_extract; each CluCluster's computation (or the standalone
 *     module clu_cluster_module builds) is what the partitioner compiles;
 *   - the runtime runs the host program (the entry of *out) and, at each
 *     `call` that carries `_tessel_cluster="N"`, launches cluster N on the
 *     devices: parameter j of the cluster is call operand j
 *     (CluInput.operand), results come back as the root tuple's elements
 *     (CluOutput.index);
 *   - the plan views print CluResult: the clusters, what went into each,
 *     their inputs and outputs, the host instructions and the cut values.
 *
 * Files of this layer (the header reads as a table of contents):
 *   cycles.c    CluCycles: incremental cycle detection with edge contraction
 *   place.c     host/device placement of the instructions of a computation
 *   extract.c   clu_extract: the driver, CluResult
 *   form.c      levels, cluster formation, the host program's order
 *   outline.c   cluster computations and host computations
 *   host_pairs.c a cluster's donation pairs made the host program's (--steps)
 * (cluster_internal.h: the state the last three share.)
 *
 * Depends on ir/ only; never executes anything.
 */
#ifndef TESSEL_CLUSTER_H
#define TESSEL_CLUSTER_H

#include "../ir/ir.h"

/* ------------------------------------------------------------------ */
/* cycles.c: incremental cycle detection (TF's GraphCycles)            */
/* ------------------------------------------------------------------ */

/* A directed acyclic graph over nodes 0..n-1 that stays acyclic: every
 * node has a rank and every edge x->y has rank[x] < rank[y] (a topological
 * order, maintained incrementally by Pearce and Kelly's algorithm). An
 * insertion that would close a cycle is refused; contracting an edge or
 * merging two nodes is refused when another path joins them (the merged
 * node would lie on a cycle). Each query costs the part of the graph
 * between the two ranks involved, not the whole graph. Node ids are
 * stable: a contraction keeps one of the two ids (the survivor) and the
 * other one dies. Initially rank[x] = x, so numbering nodes in a
 * topological order makes building the graph free of reordering. */
typedef struct CluCycles CluCycles;

/* A graph of n isolated nodes; NULL on OOM or n < 0. */
CluCycles *clu_cycles_new(int32_t n);
void clu_cycles_free(CluCycles *g);
/* Add x->y. Returns 1 when the edge is present afterwards (also when it
 * already was), 0 when it would close a cycle (the graph is unchanged;
 * x == y counts as a cycle), -1 on OOM (unchanged). */
int clu_cycles_insert_edge(CluCycles *g, int32_t x, int32_t y);
/* Remove x->y if present. Never fails. */
void clu_cycles_remove_edge(CluCycles *g, int32_t x, int32_t y);
bool clu_cycles_has_edge(const CluCycles *g, int32_t x, int32_t y);
/* Is there a path from x to y (x == y: true)? */
bool clu_cycles_is_reachable(CluCycles *g, int32_t x, int32_t y);
/* May the edge a->b be contracted, i.e. is it the only path from a to b?
 * False when there is no edge a->b. */
bool clu_cycles_can_contract_edge(CluCycles *g, int32_t a, int32_t b);
/* Contract a->b into one node. Returns the surviving id (a or b: the one
 * with more edges, so the work is small-to-large), -1 when it may not be
 * contracted (no such edge, or another path a->...->b; unchanged), -2 on
 * OOM (the graph is then unusable: free it). */
int32_t clu_cycles_contract_edge(CluCycles *g, int32_t a, int32_t b);
/* Merge any two live nodes into one: an edge between them is contracted;
 * with no edge, they merge when neither reaches the other. Same returns as
 * clu_cycles_contract_edge; a == b returns a. */
int32_t clu_cycles_merge(CluCycles *g, int32_t a, int32_t b);
bool clu_cycles_alive(const CluCycles *g, int32_t x);
int32_t clu_cycles_rank(const CluCycles *g, int32_t x);
/* Successors / predecessors of live node x (borrowed; valid until the next
 * change). */
const int32_t *clu_cycles_succ(const CluCycles *g, int32_t x, int32_t *n);
const int32_t *clu_cycles_pred(const CluCycles *g, int32_t x, int32_t *n);
/* Check every invariant (ranks a permutation, rank order along edges, the
 * edge index consistent with the lists); for tests. */
bool clu_cycles_check(const CluCycles *g);

/* ------------------------------------------------------------------ */
/* place.c: host / device placement                                    */
/* ------------------------------------------------------------------ */

/* The custom-call targets the runtime runs on the host by default:
 * tessel_print (prints a summary of its operand, returns it) and
 * tessel_save (writes its operand to the .npy file its backend_config
 * names, returns it). NULL-terminated. */
extern const char *const clu_default_host_targets[];

/* Where an instruction of a host computation runs. */
typedef enum CluPlace {
    CLU_DEVICE,    /* device work: goes into a cluster */
    CLU_HOST_OP,   /* a host op: _xla_compute_type="host" or a host custom-call target */
    CLU_HOST_FLOW, /* call / while / conditional with host ops inside: host control flow */
    CLU_HOST_GLUE, /* a parameter; a tuple or get-tuple-element that shuffles host values;
                    * the root tuple */
    CLU_CONST,     /* a small constant: cloned into each cluster (and the host) that uses it */
} CluPlace;

/* Is `ins` a host op: it carries frontend_attributes={_xla_compute_type="host"},
 * or it is a custom-call whose target is one of `host_targets` (a
 * NULL-terminated list; NULL means clu_default_host_targets)? Can't fail. */
bool clu_is_host_instr(const IrInstr *ins, const char *const *host_targets);

/* For every computation of m, whether it contains a host op, directly or
 * through any computation it calls. has_host has m->ncomp entries. Fails
 * only with IR_ENOMEM. */
IrStatus clu_host_computations(const IrModule *m, const char *const *host_targets,
                               bool *has_host, IrDiag *d);

/* Place every instruction of computation `ci`, run as host code (the entry,
 * or a computation host control flow calls); `has_host` comes from
 * clu_host_computations; constants with at most `max_const_elements`
 * elements (negative: none) and no control edges are CLU_CONST. place has
 * ninstr entries. Rules, in order:
 *   host op                                        -> CLU_HOST_OP
 *   call / while / conditional calling host work   -> CLU_HOST_FLOW
 *   parameter                                      -> CLU_HOST_GLUE
 *   small constant                                 -> CLU_CONST
 *   get-tuple-element of a host value              -> CLU_HOST_GLUE
 *   tuple of host values and constants, the root
 *   tuple, or a tuple whose users are all host ops
 *   or host control flow                           -> CLU_HOST_GLUE
 *   anything else                                  -> CLU_DEVICE
 * Errors: IR_EUNSUPPORTED when a device instruction other than call /
 * while / conditional (a reduce, a map, a sort, ...) calls a computation
 * with host ops inside (reported at its position); IR_EINPUT for a cycle;
 * IR_ENOMEM. */
IrStatus clu_place(const IrModule *m, int32_t ci, const bool *has_host,
                   const char *const *host_targets, int64_t max_const_elements, CluPlace *place,
                   IrDiag *d);

/* ------------------------------------------------------------------ */
/* extract.c (with form.c, outline.c): clusters and the host program   */
/* ------------------------------------------------------------------ */

typedef struct CluOptions {
    const char *const *host_targets; /* NULL-terminated; NULL: clu_default_host_targets */
    int64_t max_const_elements;      /* clone constants up to this many elements
                                      * (default 64); negative: never clone */
} CluOptions;
CluOptions clu_default_options(void);

/* One value flowing into a cluster: parameter `operand` of the cluster
 * computation, which is operand `operand` of its call. */
typedef struct CluInput {
    const char *value;     /* source instruction name */
    int32_t operand;       /* call operand index = cluster parameter number */
    int32_t from_cluster;  /* index of the cluster that produces it, -1: a host value */
    int32_t from_output;   /* its output index in that cluster, -1 */
    int64_t host_param;    /* parameter_number when the value is a parameter of the
                            * calling host computation, else -1 (TF's InputMapping
                            * for clusters fed straight from the arguments) */
    int64_t bytes;         /* ir_shape_bytes of the value */
} CluInput;

/* One value flowing out: element `index` of the cluster's root tuple,
 * which the host program names `host_name` (a get-tuple-element). */
typedef struct CluOutput {
    const char *value;     /* source instruction name */
    int32_t index;
    const char *host_name;
    int64_t bytes;
} CluOutput;

typedef struct CluCluster {
    const char *name;        /* computation name in *out: "cluster_N" (a suffix is added
                              * only if the input module already uses that name) */
    int32_t number;          /* N of _tessel_cluster="N"; the index in CluResult.clusters */
    int32_t comp;            /* index of the cluster computation in *out */
    int32_t host_comp;       /* index in *out of the host computation that calls it */
    const char *source_comp; /* name of the source computation its instructions come from */
    const char *call;        /* name of the call instruction in the host computation */
    int32_t ninstrs;
    const char **instrs;     /* source instructions outlined into it, topological order */
    int32_t nconsts;
    const char **consts;     /* small constants cloned into it */
    int32_t ninputs;
    CluInput *inputs;        /* in parameter order: by defining instruction's index */
    int32_t noutputs;
    CluOutput *outputs;      /* in root tuple order: by defining instruction's index */
} CluCluster;

/* A source instruction that stays on the host (CLU_CONST: a small
 * constant the host reads, copied into the host computation). */
typedef struct CluHostInstr {
    const char *comp;        /* source computation name */
    const char *name;        /* source instruction name */
    CluPlace place;          /* CLU_HOST_OP, CLU_HOST_FLOW, CLU_HOST_GLUE or CLU_CONST */
} CluHostInstr;

/* A value cut between host and devices (or between two clusters, through
 * the host program): produced on one side, used on the other. One entry
 * per (value, consumer side). */
typedef struct CluCut {
    const char *comp;        /* source computation name */
    const char *value;       /* source instruction name */
    int32_t from;            /* producing cluster, -1: the host */
    int32_t to;              /* consuming cluster, -1: the host (a host op or the root) */
    int64_t bytes;           /* ir_shape_bytes of the value */
} CluCut;

/* What clu_extract decided, for the plan views and the runtime. Every
 * string and array lives in `arena` (freed by clu_result_free), so the
 * result outlives both modules. Orders are deterministic: clusters by
 * number; host instructions and cuts host computation by host computation
 * in the order they are built (those that host control flow runs before
 * the computation that runs them, the entry last), each in program
 * order. */
typedef struct CluResult {
    IrArena *arena;
    int32_t nclusters;
    CluCluster *clusters;
    int32_t nhost;
    CluHostInstr *host;
    int32_t ncuts;
    CluCut *cuts;
} CluResult;

/* Separate host work from device work in `in` (a verified module, not
 * modified; shardings on its instructions are carried over) and outline
 * each device cluster. On success *out is a new module: its entry is the
 * host program (same name, parameters and result as the source entry;
 * input_output_alias and entry_computation_layout still hold), the cluster
 * computations are added, and every other computation is cloned; it passes
 * ir_verify. `opt` may be NULL (defaults); `res` may be NULL.
 *
 * Shardings: a cluster parameter carries the sharding of the value it
 * receives; the root tuple and the call the flat tuple sharding of the
 * values flowing out (one entry per array leaf, as XLA's tuple shardings
 * are; none unless every value has one); a get-tuple-element the sharding
 * of the value it stands for. A cluster whose only effect nobody reads (a
 * custom-call kept for its side effect) is still run: its call becomes a
 * control predecessor of the root.
 *
 * Clusters are numbered in the order the host program runs them (a
 * topological order of the contracted graph, ties broken by the position of
 * each cluster's first instruction in the source's topological order; the
 * clusters of a computation that host control flow runs are numbered where
 * that instruction runs). A module without host ops gives one cluster
 * holding all of the entry's device work; one without device work gives
 * none (the host program is then a copy of the entry, except that a small
 * constant moves next to its first reader and one nobody reads is
 * dropped).
 *
 * Errors: IR_EINPUT (no entry computation, a cycle), IR_EUNSUPPORTED (host
 * ops inside a computation that a non-control-flow op calls, or host
 * control flow nested more than 256 deep), IR_EINTERNAL (a broken
 * invariant), IR_ENOMEM. On failure *out is NULL, *res is empty and
 * nothing leaks. */
IrStatus clu_extract(const IrModule *in, const CluOptions *opt, IrModule **out, CluResult *res,
                     IrDiag *d);
void clu_result_free(CluResult *res);

/* A standalone module holding cluster `k` of `res` (computed from `out`):
 * its entry is a copy of the cluster computation (with the computations it
 * calls), its header num_partitions and replica_count those of `out`, its
 * buffer_donor the parameters that receive a donor of `out`'s entry which
 * the host program reads nowhere else (numbered as the cluster's). What
 * the partitioner takes. *mod is NULL on failure (IR_EINPUT for a bad k,
 * IR_ENOMEM). */
/* Why buffer donor dn of the host program `out` (clu_extract's) reaches
 * no cluster, a static phrase (a tuple leaf, read by a host instruction or
 * more than once), or NULL when the cluster its call hands it to takes it
 * as a donor of its own (clu_cluster_module). Can't fail. */
const char *clu_donor_held(const IrModule *out, const IrDonor *dn);
IrStatus clu_cluster_module(const IrModule *out, const CluResult *res, int32_t k, IrModule **mod,
                            IrDiag *d);

/* ---- host_pairs.c ---- */

/* The pairs cluster cl's SPMD program `spmd` made (IrAlias.from_donor,
 * .inferred: partition/donate.c) added to the host program `host` (the
 * entry of clu_extract's *out), each where the cluster's call hands it a
 * whole entry parameter and the host returns the cluster's output as it
 * came out, the flags kept; a host parameter or output already paired is
 * left alone, and a donor paired leaves host->donor. IR_ENOMEM only. */
IrStatus clu_host_pairs(IrModule *host, const CluCluster *cl, const IrModule *spmd);

/* Why pair al of the cluster whose computation in host is named `cluster`
 * (its SPMD program's pair: a paired buffer_donor or --donate auto's) is
 * not a pair of the host program, so `--steps` does not feed it, in
 * words; NULL when it is, or al is the cluster's declared pair. Reads the
 * host program alone (a plan read back gives the same). Can't fail. */
const char *clu_host_pair_why(const IrModule *host, const char *cluster, const IrAlias *al);

#endif /* TESSEL_CLUSTER_H */
