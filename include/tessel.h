/*
 * tessel.h: the public API of libtessel, the whole pipeline as a library:
 * parse and verify HLO modules, compile them for N partitions x R
 * replicas on H hosts into a plan, save and load plan files, dump plans as
 * text, JSON or DOT, bind inputs from memory or .npy files, run on
 * in-process devices or under MPI on the caller's communicator, read the
 * outputs back. The command line `tessel` is a client of this header and
 * of nothing else; the layers' own headers are internal.
 *
 * Conventions (as SQLite's and Lua's): opaque handles; every function that
 * can fail returns a TsStatus and, when given a TsDiag, records the first
 * error in it (file, line, column, the source line, a message). Nothing
 * here prints or exits; no global state ties two modules or plans together
 * (a process-wide cache of the machine's topology and of device memory is
 * released by ts_shutdown). Strings and objects returned to you are yours
 * to free with the function named in their comment; arguments are
 * borrowed for the call.
 *
 * NULL, one rule for every function: a pointer argument is required
 * unless its comment says it may be NULL (every TsDiag *d may; options
 * and limits structs may, meaning the defaults). A required one that is
 * NULL is TS_EINPUT with "FUNCTION: ARG is NULL" in d, and a function
 * that hands out a result through `out` sets *out = NULL first whenever
 * `out` itself is not NULL. A function that returns a value rather than a
 * status returns 0, false or NULL for a NULL handle (ts_mpi_size 1,
 * ts_outputs_stats ""); ts_free, ts_diag_clear, every *_free and close,
 * ts_outputs_remove and ts_mpi_finalize do nothing with NULL. In
 * TsRunOptions, `inputs` (`infeeds`) may be NULL only when ninputs
 * (ninfeeds) is 0, and each TsInput needs a key and exactly one of path
 * and array (TS_EINPUT naming the field). TsLimits fields set directly
 * are clamped to the bounds ts_limits_set allows wherever they enter
 * (depth to 200). tests/unit/test_api_null.c calls every function so.
 *
 *     TsDiag d = {0};
 *     TsModule *m = NULL;
 *     TsPlan *plan = NULL;
 *     TsOutputs *out = NULL;
 *     TsCompileOptions co = {.num_partitions = 2};
 *     float x[8 * 16];                          // the model's parameter 0
 *     for (int i = 0; i < 8 * 16; i++)
 *         x[i] = (float)i / 128;
 *     int64_t dims[] = {8, 16};
 *     TsArray xa = {.dtype = "<f4", .rank = 2, .dims = dims, .data = x, .nbytes = sizeof x};
 *     TsInput in[] = {{.key = "x", .array = &xa}};
 *     TsRunOptions ro = {.ninputs = 1, .inputs = in, .random = true, .seed = 1};
 *     if (ts_module_load("examples/mlp.hlo", &m, &d) != TS_OK ||
 *         ts_compile(m, &co, &plan, &d) != TS_OK ||
 *         ts_plan_save(plan, "mlp.plan", &d) != TS_OK ||
 *         ts_plan_run(plan, &ro, &out, &d) != TS_OK) {
 *         char *s = ts_diag_format(&d);         // "tessel: mlp.hlo:3:7: error: ..."
 *         fputs(s ? s : "tessel: out of memory\n", stderr);
 *         ts_free(s);
 *     } else {
 *         float y[8 * 8];                       // output 0: f32[8,8]
 *         ts_outputs_read(out, 0, y, sizeof y, &d);
 *     }
 *     ts_outputs_free(out);
 *     ts_plan_free(plan);
 *     ts_module_free(m);
 *     ts_diag_clear(&d);
 *     ts_shutdown();
 *
 * (tests/unit/test_api_example.c compiles and runs exactly this.)
 */
#ifndef TESSEL_H
#define TESSEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; ts_version() gives the library's. */
#define TS_VERSION "0.2.0"

/* The highest array rank tessel handles (TsArrayInfo.dims). */
#define TS_MAX_RANK 64

/* Results. The command line maps them to exit statuses: TS_EINPUT and
 * TS_EUNSUPPORTED to 2, the others to 1. */
typedef enum TsStatus {
    TS_OK = 0,
    TS_EINPUT,       /* bad input: syntax, semantics, a bad or missing .npy, a bad option */
    TS_ENOMEM,       /* out of memory */
    TS_EUNSUPPORTED, /* valid input that tessel cannot handle (yet) */
    TS_EINTERNAL,    /* a bug in tessel */
    TS_ERUNTIME,     /* a failure while running (I/O, a kernel, MPI) */
} TsStatus;

/* The first error of a call. `file` is NULL when the error is not about a
 * file; line/col are 0 when unknown; `line_text` is the source line (no
 * newline) or NULL. Strings belong to the diag: ts_diag_clear frees them.
 * Initialise with {0} before the first use. */
typedef struct TsDiag {
    TsStatus status;
    char *file;
    int32_t line, col;
    char *line_text;
    char *msg;
} TsDiag;

/* Format a diag as the command line prints it:
 * "tessel: FILE:LINE:COL: error: MESSAGE\n  LINE\n  ^\n". Heap string
 * (ts_free) or NULL when out of memory. */
char *ts_diag_format(const TsDiag *d);
/* Free the strings of a diag and reset it to {0}. */
void ts_diag_clear(TsDiag *d);
/* Free memory the library returned (strings). */
void ts_free(void *p);
/* Write text to `path` atomically: to a temporary name in the same
 * directory (created exclusively, unpredictable), then renamed; a path
 * that exists and is not a regular file (a pipe, /dev/null) is written in
 * place; a FIFO that no process reads is refused rather than waited on.
 * TS_ERUNTIME naming the path. */
TsStatus ts_write_text(const char *path, const char *text, TsDiag *d);
/* Read a whole regular file of at most max_bytes into *text (ts_free;
 * NUL-terminated, *len bytes before the NUL). A FIFO, a socket, a device
 * or a directory is refused before it is opened (reading one could wait
 * forever, or act on the device). TS_EINPUT naming the path. */
TsStatus ts_read_file(const char *path, size_t max_bytes, char **text, size_t *len, TsDiag *d);
/* "Did you mean": of names[0..n) (NULL entries skipped) the one nearest
 * to key by edit distance when it is a slip away (at most a third of the
 * key's bytes, at least one, and not key itself), else NULL. The rule the
 * library's own hints (opcodes, attributes, input names) follow. */
const char *ts_nearest_name(const char *key, const char *const *names, int32_t n);
/* The library version, e.g. "0.2.0". Static string. */
const char *ts_version(void);
/* Release the process-wide caches (the machine's topology, device
 * allocators, and the freed device buffers they keep between runs for
 * the next run's reuse: up to each device's peak). Safe to call at any
 * time no run is in progress. */
void ts_shutdown(void);

/* ------------------------------------------------------------------ */
/* Modules                                                             */
/* ------------------------------------------------------------------ */

/* What a model may declare; larger is refused (TS_EINPUT) before anything
 * is allocated for it. Zero fields take the defaults (ts_limits_default). */
typedef struct TsLimits {
    int64_t elements;        /* per array (default 2^34) */
    int32_t rank;            /* default 64 */
    int32_t tuple;           /* tuple width (default 65536) */
    int32_t depth;           /* nesting of tuples, literals, braces, and of computation
                              * calls (a call, while, conditional, to_apply... inside a
                              * computation another one calls), in levels (default 64) */
    int64_t name;            /* bytes of a name (default 4096) */
    int64_t devices;         /* partitions x replicas (default 4096) */
    /* What a run may do (TsRunOptions.limits). */
    int64_t trips;           /* trips of every while loop (0: unbounded, the default) */
    int64_t memory_bytes;    /* estimated peak bytes of one process's devices (0: the host's
                              * available memory, /proc/meminfo MemAvailable) */
    /* What a model may declare: instructions of a module, all computations
     * (default 4194304 = 2^22; after the run's limits so that the layout
     * of the fields before it stays). */
    int64_t instructions;
} TsLimits;

/* The defaults above. */
TsLimits ts_limits_default(void);
/* Set one limit from "NAME=VALUE" text (NAME: elements, rank, tuple,
 * depth, name, devices, trips, memory, instructions; VALUE a decimal
 * integer >= 1, for memory with an optional K, M or G suffix, powers of
 * 1024). TS_EINPUT with a message saying what was expected. */
TsStatus ts_limits_set(TsLimits *l, const char *name_eq_value, TsDiag *d);

/* An HLO module, parsed and verified. */
typedef struct TsModule TsModule;

/* Parse and verify HLO text (`name` names it in diagnostics; the text
 * need not be NUL-terminated). `lim` may be NULL (defaults). */
TsStatus ts_module_parse(const char *name, const char *text, size_t len, const TsLimits *lim, TsModule **out,
                         TsDiag *d);
/* Read, parse and verify the HLO text file at `path` (a regular file). On
 * success *out is a new module (ts_module_free); on failure *out is NULL
 * and d says why with FILE:LINE:COL. */
TsStatus ts_module_load(const char *path, TsModule **out, TsDiag *d);
TsStatus ts_module_load_ex(const char *path, const TsLimits *lim, TsModule **out, TsDiag *d);
void ts_module_free(TsModule *m);

/* The module's name (owned by the module) and its number of entry parameters. */
const char *ts_module_name(const TsModule *m);
int32_t ts_module_num_parameters(const TsModule *m);
/* One line on what the module holds, e.g. "module mlp, 3 computations, 27
 * instructions, entry main (2 parameters -> f32[4,8]), num_partitions=1
 * replica_count=1". Heap string (ts_free), NULL on OOM. */
char *ts_module_summary(const TsModule *m);
/* The module's collectives name only devices of num_partitions x
 * num_replicas (each 0: the module's header's; a count given by neither is
 * not known, and what it numbers is not checked: compiling checks it with
 * the counts it compiles for): every id of a replica_groups or a
 * collective-permute's pairs in range, the check compiling runs first
 * with the counts it compiles for, with its error (`tessel check`).
 * TS_EINPUT naming the instruction, or for a NULL m or a negative count. */
TsStatus ts_module_check_devices(const TsModule *m, int64_t num_partitions, int64_t num_replicas, TsDiag *d);
/* True when the module's text is a plan file (a module with // TesselPlan
 * lines): it holds a partitioned program, not a model. */
bool ts_module_is_plan(const TsModule *m);
/* The module as HLO text that parses back to the same module. Heap string
 * (ts_free), NULL on OOM. */
char *ts_module_text(const TsModule *m);

/* Gradients (the layer grad/), in the spirit of TensorFlow's
 * TF_AddGradients: a new module that returns the forward outputs, then the
 * gradient of a scalar loss with respect to each chosen entry parameter
 * (its shape and sharding), or, with sgd/adam, a training step whose
 * outputs are the updated parameters aliased to them (input_output_alias).
 * docs/cli.md (`tessel grad`) says what is written. */
typedef struct TsGradOptions {
    const char *wrt;         /* "0,w1": parameter numbers or names; NULL = every floating one */
    const char *loss;        /* root tuple element (number or name); NULL = the root, a scalar */
    bool jvp;                /* forward mode: tangent parameters appended, outputs then tangents */
    double sgd;              /* > 0: SGD step with this learning rate */
    double adam;             /* > 0: Adam step (moments and a step counter appended as parameters) */
    /* Reverse mode: the checkpoint policy of the forward values the
     * backward reads (jax.checkpoint's): "dots" saves dot outputs, "nothing"
     * only the parameters, "names=a,b" those instructions; the rest is
     * recomputed in the backward (copies NAME.remat). NULL: all saved. */
    const char *remat;
} TsGradOptions;

/* On success *out is a new, verified module (ts_module_free). TS_EINPUT for
 * bad options or a loss that is not a floating scalar; TS_EUNSUPPORTED
 * naming the op and its FILE:LINE:COL when an op the loss depends on has no
 * gradient rule. `o` may be NULL (defaults). */
TsStatus ts_add_gradients(const TsModule *m, const TsGradOptions *o, TsModule **out, TsDiag *d);

/* ------------------------------------------------------------------ */
/* Plans                                                               */
/* ------------------------------------------------------------------ */

/* A compiled program: the host program and each device cluster's SPMD
 * program, with its split and concat trees, device assignment and host
 * layout. Compiled in this process (then it also holds the unpartitioned
 * module, for ts_plan_run_reference) or loaded from a plan file. */
typedef struct TsPlan TsPlan;

typedef struct TsCompileOptions {
    int64_t num_partitions;  /* 0: the module header's num_partitions, else 1 */
    int64_t num_replicas;    /* 0: the module header's replica_count, else 1 */
    int64_t hosts;           /* hosts (MPI ranks) the plan is for; 0: 1 */
    int64_t local_devices;   /* devices per host; 0: N*R/hosts */
    const TsLimits *limits;  /* NULL: defaults (devices bounds N x R) */
    bool no_verify;          /* skip the verifier after the rewriting passes */
    /* The module is already an SPMD program (one program per device, as
     * XLA prints it after spmd-partitioning, or a plan's own text): no
     * propagation or partitioning; every device runs it as it is, with
     * its own inputs and outputs (TsRunOptions.per_device,
     * ts_outputs_num_devices). ts_plan_open then reads a plan file as
     * the module it is. */
    bool spmd;
    /* A directory (created if missing) that receives the module after
     * each pass, as XLA's --xla_dump_to: NNNN.MODULE.after_parse.hlo,
     * .after_propagate, .after_outline (host work only),
     * .cluster_K.after_spmd_partition, then NNNN.MODULE.plan.json, numbered
     * in pass order; every .hlo parses back (docs/plan.md). NULL: none. */
    const char *dump_dir;
    /* The bandwidth of the links between hosts, in Gb/s, for the
     * partitioner's cost model (whether a dot is windowed: docs/cli.md,
     * "Windowed dots"); 0: 10. */
    double link_gbps;
    /* Called with each warning of the compile (the text alone: no
     * "warning:" prefix, no newline; valid during the call): today, once,
     * when a compile for several partitions partitions nothing: no
     * sharding it reads on any value, or shardings that split none (all
     * replicated or maximal, or splitting host work only). The library
     * prints nothing. NULL: warnings are dropped. */
    void (*on_warning)(void *ctx, const char *msg);
    void *warning_ctx;
    /* Shardings chosen for you (docs/auto-shard.md): every value of the
     * entry computation the module leaves unsharded gets the sharding that
     * minimises the estimated step time over the device mesh `mesh`
     * ("2x4" or "data=2,model=4"; NULL: one axis over all partitions),
     * under limits->memory_bytes shared by a host's devices when set; the
     * module's own shardings are constraints. num_partitions 0 takes the
     * mesh's device count; any other must equal it. `profile` names a
     * profile file (`tessel profile`) with the cost model's rates; NULL:
     * the documented defaults. ts_plan_explain says what was chosen and
     * why. */
    bool auto_shard;
    const char *mesh;
    const char *profile;
    /* Donation (docs/plan.md "Donation"): TS_DONATE_DECLARED (0) keeps the
     * module's input_output_alias pairs and pairs each of its buffer_donor
     * parameters with an output of the same shape, type and sharding (JAX's
     * donate_argnums with the output shardings left open); TS_DONATE_AUTO
     * adds pairs
     * inferred where safe: an entry parameter whose last read comes no
     * later than the writing of an output of the same shape, type and
     * sharding is aliased to it (the module's own pairs are kept). A run
     * hands every aliased parameter over: it is freed at its last read,
     * and the output may take its buffer. */
    int32_t donate;
    /* A key (sign_key_len bytes, at least 1; NULL: none) for the plan's
     * keyed signature (docs/plan.md, "Digest and signature"): a plan
     * compiled with it is saved signed (HMAC-SHA256 under the key), and a
     * plan file opened with it (ts_plan_open) must carry that key's
     * signature. Opened without a key, a signed plan is refused
     * (TS_EINPUT): it cannot be checked. The key is copied. */
    const void *sign_key;
    size_t sign_key_len;
    /* The cores of a host, for --auto-shard (docs/auto-shard.md, "Ties"):
     * where a host's devices outnumber them (4 devices on 2 cores), the
     * tie-break toward less communication is off (the plans it took there,
     * estimated a few tenths of a percent slower, ran 11-16% slower).
     * 0: the profile's "host_cores" (`tessel profile` writes the cores its
     * devices shared), else a core per device. */
    int64_t host_cores;
} TsCompileOptions;

enum { TS_DONATE_DECLARED = 0, TS_DONATE_AUTO = 1 };

/* Compile a module (not modified; `o` may be NULL): place, cluster,
 * outline, propagate shardings, partition each cluster, trees, devices,
 * islands (with o->spmd: none of them, a replay). Custom-call targets
 * tessel cannot run are refused here. */
TsStatus ts_compile(const TsModule *m, const TsCompileOptions *o, TsPlan **out, TsDiag *d);
/* Load a plan file (everything is checked; a truncated or altered plan is
 * TS_EINPUT naming the line). */
TsStatus ts_plan_load(const char *path, const TsLimits *lim, TsPlan **out, TsDiag *d);
TsStatus ts_plan_parse(const char *name, const char *text, size_t len, const TsLimits *lim, TsPlan **out,
                       TsDiag *d);
/* What the command line does with MODEL.hlo|PLAN: a plan file is loaded
 * (N and R in `o`, when set, must be the plan's), anything else parsed,
 * verified and compiled with `o`. */
TsStatus ts_plan_open(const char *path, const TsCompileOptions *o, TsPlan **out, TsDiag *d);
void ts_plan_free(TsPlan *p);
/* Why the plan's shardings are what they are, when it was compiled with
 * auto_shard: for each chosen sharding the alternatives and their
 * estimated costs (heap text, ts_free). NULL otherwise (or on OOM). */
char *ts_plan_explain(const TsPlan *p);
/* The same as one JSON object (docs/auto-shard.md): every chosen sharding
 * with all its alternatives and their estimated seconds (heap text,
 * ts_free). NULL as ts_plan_explain. */
char *ts_plan_explain_json(const TsPlan *p);

/* Rebuild the host layout (hosts >= 1; local_devices 0: N*R/hosts).
 * TS_EINPUT when N*R is not hosts x local_devices. */
TsStatus ts_plan_set_layout(TsPlan *p, int64_t hosts, int64_t local_devices, TsDiag *d);
int64_t ts_plan_num_partitions(const TsPlan *p);
int64_t ts_plan_num_replicas(const TsPlan *p);
int64_t ts_plan_hosts(const TsPlan *p);
int64_t ts_plan_local_devices(const TsPlan *p);
/* Device clusters (0 for a module without device work). */
int32_t ts_plan_num_clusters(const TsPlan *p);
/* True when the plan was loaded from a plan file. */
bool ts_plan_from_file(const TsPlan *p);

/* The input_output_alias that --steps follows (the host program's, else
 * the device program's): alias k moves output leaf *output_leaf (depth
 * first) into entry parameter *param for the next step. TS_EINPUT for no
 * such alias; TS_EUNSUPPORTED when it moves a tuple or a leaf of a tuple
 * parameter (ts_plan_alias_leaves, below, gives every alias as leaves). */
int32_t ts_plan_num_aliases(const TsPlan *p);
TsStatus ts_plan_alias(const TsPlan *p, int32_t k, int32_t *output_leaf, int32_t *param, TsDiag *d);
/* Alias k as the leaves it moves, whatever it names (an array parameter,
 * a leaf or a sub-tuple of a tuple parameter, `{0}: (0, {1})`): output
 * leaves [*output_leaf, *output_leaf + *count) (depth first) go into
 * parameter *param's leaves from *param_leaf on (depth first inside it;
 * -1 when the parameter is an array, its one leaf). TS_EINPUT for no
 * such alias, a parameter or index the program lacks, or an output of
 * another leaf count. */
TsStatus ts_plan_alias_leaves(const TsPlan *p, int32_t k, int32_t *output_leaf, int32_t *param, int32_t *param_leaf,
                              int32_t *count, TsDiag *d);
/* What an input key (TsInput.key; docs/cli.md, "Input names") binds:
 * parameter *param and, in a tuple parameter, leaf *leaf (-1 for an
 * array parameter). TS_EINPUT for a key nothing answers to (listing the
 * names that work), two parameters answer to, or that names a tuple
 * whole or a leaf the parameter lacks. */
TsStatus ts_plan_input_key(const TsPlan *p, const char *key, int32_t *param, int32_t *leaf, TsDiag *d);
/* The SHA-256 of the plan file text, 64 lowercase hex digits and a NUL:
 * names the program a checkpoint belongs to. TS_ENOMEM only. */
TsStatus ts_plan_digest(const TsPlan *p, char out[65], TsDiag *d);
/* The plan file text (valid HLO text; docs/plan.md). Heap string (ts_free),
 * NULL on OOM. */
char *ts_plan_file_text(const TsPlan *p);
/* What compiling to a memory limit (TsCompileOptions.limits->memory_bytes)
 * changed, one line per cluster it reordered, followed by a line per
 * value it recomputes with its bytes and FLOPs (docs/plan.md, "Fitting a
 * memory limit"): for the command line to print on stderr. NULL when the
 * compile changed nothing (no limit, the peak already within it, a plan
 * loaded from a file). Heap string (ts_free). */
char *ts_plan_memory_fit(const TsPlan *p);
/* Write the plan file to `path` atomically (a temporary name in the same
 * directory, then rename; a path that exists and is not a regular file, a
 * pipe or /dev/null, is written in place). TS_ERUNTIME naming the path. */
TsStatus ts_plan_save(const TsPlan *p, const char *path, TsDiag *d);
/* The plan for people ("text"), programs ("json", docs/plan.md) or
 * Graphviz ("dot") into *out (ts_free). TS_EINPUT for another format. */
TsStatus ts_plan_dump(const TsPlan *p, const char *format, char **out, TsDiag *d);

/* How an array is cut over the devices, drawn as a grid of boxes (one per
 * tile, sized in proportion, holding the ids of the devices that hold it;
 * docs/plan.md "Sharding grids"). `name` is an instruction of a compiled
 * plan, an entry parameter's name, "input K", "output K", or "all" (every
 * input and output). Flags: TS_SHOW_ASCII draws with + - | only,
 * TS_SHOW_COLOUR adds ANSI background colours (for a terminal). *out is
 * heap text (ts_free); TS_EINPUT when nothing has that name. */
enum { TS_SHOW_ASCII = 1u, TS_SHOW_COLOUR = 2u };
TsStatus ts_plan_show(const TsPlan *p, const char *name, unsigned flags, char **out, TsDiag *d);

/* Why the collectives that produce or consume the value `name` (an
 * instruction of a compiled plan's clusters, or a collective's own name)
 * are there: each with its bytes per device, the instruction whose rule
 * asked for it and that instruction's FILE:LINE:COL, the sharding
 * conflict in words and, where one exists, the change that would make it
 * local (docs/plan.md "Why a collective is there"). *out is heap text
 * (ts_free); TS_EINPUT when the plan has nothing of that name. */
TsStatus ts_plan_why(const TsPlan *p, const char *name, char **out, TsDiag *d);

/* ts_plan_dump with more to say: `format` as there, or "html" (one
 * self-contained page: the graph, the instructions, collectives, sharding
 * grids, memory, split and concat trees; docs/plan.md). `expand` names
 * computations (or the instructions calling them: while, call,
 * conditional, fusion) that the graph draws whole instead of as one node.
 * `graph_svg`, for "html": the graph as SVG (what `dot -Tsvg` made of the
 * "dot" dump); NULL draws it with tessel's own layout. */
typedef struct TsDumpOptions {
    const char *format;
    int32_t nexpand;
    const char *const *expand;
    const char *graph_svg;
} TsDumpOptions;
TsStatus ts_plan_dump_ex(const TsPlan *p, const TsDumpOptions *o, char **out, TsDiag *d);

/* ------------------------------------------------------------------ */
/* Arrays, inputs, outputs                                             */
/* ------------------------------------------------------------------ */

/* An array in memory, C order. `dtype` is NumPy's type string as .npy
 * files spell it: "<f4", "<f8", "<f2", "<i1".."<i8", "|u1".."<u8", "|b1"
 * (pred), "<c8", "<c16"; bf16, the f8 kinds and f4 travel as "<f4", s2/s4
 * as "|i1", u2/u4 as "|u1" (converted exactly, as .npy files are). */
typedef struct TsArray {
    const char *dtype;
    int32_t rank;
    const int64_t *dims;
    const void *data;
    size_t nbytes;           /* must be the elements times the dtype's size */
} TsArray;

/* A description of an input or output leaf (dims valid up to rank). */
typedef struct TsArrayInfo {
    const char *name;        /* parameter name (inputs), NULL for outputs; owned by the plan */
    char dtype[8];           /* as TsArray.dtype */
    char type[16];           /* tessel's element type ("f32", "bf16", ...) */
    int32_t rank;
    int64_t dims[TS_MAX_RANK];
    size_t nbytes;           /* bytes in TsArray form */
} TsArrayInfo;

/* The program's input leaves (entry parameters, tuple parameters depth
 * first) and output leaves, with their logical (full) shapes. */
int32_t ts_plan_num_inputs(const TsPlan *p);
int32_t ts_plan_num_outputs(const TsPlan *p);
TsStatus ts_plan_input_info(const TsPlan *p, int32_t leaf, TsArrayInfo *info, TsDiag *d);
TsStatus ts_plan_output_info(const TsPlan *p, int32_t leaf, TsArrayInfo *info, TsDiag *d);

/* One input: `key` names an entry parameter by index ("0"), by instruction
 * name ("x.1"), by the name JAX records for it ("x", "params['w1']"), or a
 * leaf of a tuple parameter ("0.1", "p.1"): the rule of docs/cli.md "Input
 * names" (a key nothing answers to is TS_EINPUT listing the names that
 * work, nearest first; a name two parameters answer to is TS_EINPUT); the value is
 * the .npy file `path` or the array `array` (exactly one of them). In a
 * replay (TsCompileOptions.spmd) "KEY@D" binds KEY on device D only
 * (D = replica * N + partition); KEY alone binds it on every device. */
typedef struct TsInput {
    const char *key;
    const char *path;
    const TsArray *array;
} TsInput;

/* The SHA-256 of one input's value, 64 lowercase hex digits and a NUL: its
 * dtype, dims and bytes, from a .npy file (read whole) or an array alike,
 * so a file and the same array give one digest (the key is not part of
 * it; a file that is not a readable .npy array digests as such). A
 * checkpoint records the inputs it was taken with by it, so a resume with
 * other inputs is refused. TS_EINPUT for a NULL in, key or out, or an
 * input with neither path nor array. */
TsStatus ts_input_sha256(const TsInput *in, char out[65], TsDiag *d);
/* The SHA-256 of n bytes (bytes may be NULL when n is 0), 64 lowercase
 * hex digits and a NUL. TS_EINPUT for a NULL out or bytes. */
TsStatus ts_sha256(const void *bytes, size_t n, char out[65], TsDiag *d);

/* What TsRunOptions.on_step receives. */
typedef struct TsStepInfo {
    int64_t step;            /* 1..steps */
    int64_t steps;
    double seconds;          /* this step (device 0's time on a device run) */
    bool has_watched;        /* TsRunOptions.watch was given */
    double watched;          /* its value after this step */
} TsStepInfo;

/* Tuning of a run (TsRunOptions.tuning): every knob that changes how a run
 * moves data or fuses work, never its results. All zero: the defaults. The
 * library reads no environment variable; the command line fills this from
 * TESSEL_* variables once (docs/cli.md, "Environment"). Under MPI the
 * values that shape messages between hosts (piece_bytes, chunk_bytes,
 * pipeline_bytes) are rank 0's on every rank: ts_plan_run_mpi sends them
 * from rank 0 before anything moves, so ranks given different values
 * cannot disagree on a message. */
typedef enum TsStreamBound {
    TS_STREAM_MEASURE = 0,   /* streaming stores into NUMA-bound memory where a timed probe says
                              * they are as fast (once a process and size class; --stats says) */
    TS_STREAM_ON = 1,        /* always (for results of at least 16 MiB) */
    TS_STREAM_OFF = 2,       /* never into bound memory */
} TsStreamBound;
typedef enum TsFusionMode {
    TS_FUSION_DEFAULT = 0,   /* fused loops where the executor's defaults say */
    TS_FUSION_OFF = 1,       /* every instruction on its own */
    TS_FUSION_ALL = 2,       /* arrays of any size fused */
} TsFusionMode;
/* The library of the f32 GEMMs (tessel's f32 dots). TS_SGEMM_PROBE: at the
 * process's first f32 GEMM, each library present is timed on one product
 * and the fastest kept (a missing one is skipped; --stats says what was
 * measured and chosen). A fixed library gives the same bits in every
 * process; the probe's choice may differ between runs where two libraries
 * are close. A fixed library that cannot be loaded fails the run. The
 * first run of a process decides for the process. */
typedef enum TsSgemm {
    TS_SGEMM_PROBE = 0,      /* measured (the default) */
    TS_SGEMM_OPENBLAS = 1,   /* OpenBLAS's cblas_sgemm */
    TS_SGEMM_BLIS = 2,       /* BLIS (libblis.so.4) */
    TS_SGEMM_ONEDNN = 3,     /* oneDNN (libdnnl.so.2) */
    TS_SGEMM_AMX_BF16X3 = 4, /* Intel AMX's bf16 tiles, three products a product (bf16x3): within a
                              * few f32 roundings of the f32 product, not its bits; small products
                              * and dots with operand_precision HIGHEST in OpenBLAS; fails the
                              * run on a CPU without AMX */
    TS_SGEMM_AVX512 = 5,     /* tessel's own AVX-512 f32 kernel, one thread a call (f32 FMAs: the
                              * products of the others, summed in its own order); fails the run on
                              * a CPU without AVX-512F */
} TsSgemm;
typedef struct TsTuning {
    int64_t piece_bytes;     /* largest MPI message of a collective (0: 1 GiB, the most) */
    int64_t chunk_bytes;     /* chunks of a pipelined transfer (0: 512 KiB where combined, else a
                              * piece) */
    int64_t pipeline_bytes;  /* buffers of at least this go pipelined point to point (0: 256 KiB;
                              * < 0: every buffer) */
    int64_t copies_bytes;    /* an in-host all-reduce/all-gather gives each member its own result
                              * while the extra copies cost at most this (0: 256 MiB; < 0: none,
                              * the members share one) */
    int32_t stream_bound;    /* TsStreamBound */
    int32_t fusion;          /* TsFusionMode */
    int32_t fusion_block;    /* > 0: fuse arrays of any size in blocks of this many elements */
    /* Failure injection, for tests (ts_mpi_init_ex reads these): the
     * fail_mpi_after-th MPI call fails (1: MPI_Init_thread itself); the
     * skip_collective_after-th collective is skipped (a rank that took
     * another path). 0: none. With fail_one_rank only launcher rank
     * fail_rank injects. */
    int64_t fail_mpi_after;
    int64_t skip_collective_after;
    bool fail_one_rank;
    int32_t fail_rank;
    /* OPENBLAS_NUM_THREADS is not set in this process's environment (the
     * caller looked: the command line does, once; the library reads no
     * variable). tessel may then set it while it loads OpenBLAS (once a
     * process, at the first run), so that OpenBLAS's constructor starts
     * only the threads the devices use (none beyond the caller's where
     * devices share cores), and removes it again. false: the environment
     * is left alone and OpenBLAS starts its own default pool (a thread a
     * core, spinning ~0.1 s before it sleeps); the devices set the count
     * afterwards either way. */
    bool openblas_num_threads_unset;
    int32_t sgemm;           /* TsSgemm */
} TsTuning;

/* A value every rank of an MPI run must share (TsRunOptions.agree): what
 * it is, for the message ("--output-dir"), and its text on this rank. */
typedef struct TsAgreeItem {
    const char *what;
    const char *value;
} TsAgreeItem;
/* The most TsRunOptions.agree may hold. */
#define TS_AGREE_MAX 8

typedef struct TsRunOptions {
    int32_t ninputs;
    const TsInput *inputs;
    bool random;             /* fill unbound leaves with the deterministic random inputs */
    uint64_t seed;
    int64_t steps;           /* run K times, aliased outputs fed back (input_output_alias); 0: 1;
                              * negative or over TS_MAX_STEPS: TS_EINPUT */
    int32_t ninfeeds;        /* .npy files for infeed / recv from the host, in order (one device) */
    const char *const *infeeds;
    bool stats;              /* measure (ts_outputs_stats) */
    double load_seconds;     /* the caller's load+compile time, for the stats */
    /* Under MPI: called on a failing rank with its error before the
     * other ranks learn of it (they may end the job at once, so this is
     * the last moment the error is sure to get out). May be NULL. */
    void (*on_error)(void *ctx, const TsDiag *d);
    void *on_error_ctx;
    /* Replays only. per_device: every device draws its own random inputs
     * (device d from the seed splitmix64(seed ^ splitmix64(d)), docs/cli.md);
     * else every device gets the same. one_device: the outputs are device
     * output_device's alone (as a run's outputs); else every device's. */
    bool per_device;
    bool one_device;
    int64_t output_device;
    /* Progress: called after each step (every run, one step too) by the
     * process that holds device 0 (rank 0 under MPI), from the thread
     * running device 0; it must be quick and must not call the library.
     * `watch` names an output whose value it reports (TsStepInfo.watched):
     * an output leaf number ("1") or the name of the instruction the
     * result (or the root tuple's operand) is; it must have one element
     * (a loss). TS_EINPUT before anything runs when no output has that
     * name or it has more than one element. May be NULL. */
    void (*on_step)(void *ctx, const TsStepInfo *s);
    void *on_step_ctx;
    const char *watch;
    /* trips and memory_bytes of these limits bound the run (NULL: the
     * defaults: unbounded loops, the host's available memory). A plan
     * whose estimated peak memory per device exceeds memory_bytes is
     * refused before it runs
     * (TS_EINPUT); a while loop that would run more than `trips` trips
     * fails the run (TS_ERUNTIME naming the loop). */
    const TsLimits *limits;
    /* Under MPI: a rank not heard from for this long (a stopped or lost
     * process) ends the job on every other rank, naming it (0: 60 s;
     * < 0: no heartbeat; else from TS_HEARTBEAT_MIN_SECONDS to
     * TS_HEARTBEAT_MAX_SECONDS: a shorter one would name ranks that are
     * merely busy, and is TS_EINPUT). RELIABILITY.md. */
    double heartbeat_seconds;
    /* How data moves (above); all zero: the defaults. */
    TsTuning tuning;
    /* Under MPI (ts_plan_run_mpi): each rank binds only its own part of
     * every array input and gets its own part of every output, on every
     * rank (rank 0 no longer gathers them). A rank's part of an array is
     * what its devices' shards cover: along each dimension the distinct
     * intervals of those shards, in order, laid end to end, as
     * jax.make_array_from_process_local_data takes it (f32[8,6] split
     * in 4 row blocks over 2 ranks of 2 devices: rows 4..7 on rank 1, an
     * f32[4,6]). An input dimension may also be given whole; one whose
     * intervals overlap unequally is always whole. .npy inputs stay whole
     * files (each rank reads its boxes). In one process (ts_plan_run) the
     * part is the whole array: nothing changes. TS_EUNSUPPORTED for a
     * program with host work or a replay. */
    bool process_local;
    /* Optimizer state starts at zero, as optimizers start: the unbound
     * leaves of the parameters a training step marks as its state
     * (`tessel grad --adam`'s m_P, v_P and t, marked
     * frontend_attributes={tessel_state="zeros"}) are zeros; `random`
     * fills what is still unbound. Without it such a leaf is unbound like
     * any other (TS_EINPUT naming it and this option). */
    bool zero_state;
    /* Under MPI (ts_plan_run_mpi): before any step the ranks agree, in one
     * all-gather, that they run the same thing: the plan and the model's
     * SHA-256, the layout, the inputs (keys; files by the SHA-256 of their
     * content, each rank reading each file once more for it, above 64 MiB
     * of a 1 MiB sample; arrays by their bytes unless process_local), the random seed, the steps and the options above
     * that change what runs or moves (tuning travels from rank 0 instead:
     * every rank takes rank 0's). `agree` adds the caller's own values
     * (at most TS_AGREE_MAX; e.g. a command line's output directory). A
     * difference is TS_EINPUT on every rank, nothing run, its message
     * naming the first field that differs and the rank ("rank 1's random
     * inputs' seed is \"8\", rank 0's is \"7\""). */
    int32_t nagree;
    const TsAgreeItem *agree;
    /* Under MPI (ts_plan_run_mpi): called on every rank once the ranks
     * agreed (above), before anything is read or run; not called when
     * they do not. Its failure (a status other than TS_OK, its error in
     * *d) is that rank's error at the agreement that follows: every rank
     * stops before running. For what must not be touched by ranks that
     * disagree, e.g. a command line's output directory, created and
     * locked here. May be NULL; not called by ts_plan_run. */
    TsStatus (*on_agreed)(void *ctx, TsDiag *d);
    void *on_agreed_ctx;
    /* With stats, on a partitioned program or a replay (not the
     * reference, nor a program with host work): every instruction each
     * device runs is timed with a monotonic clock over the steps after
     * the first (with one step, that one), and the stats end with, per
     * device (under MPI every rank's, gathered to rank 0 in rank order),
     * the stats_ops instructions that took the most time: name, opcode,
     * shape, calls, total ms, share of the steps' time, and of a
     * collective the ms it waited (docs/cli.md, `--stats=ops`). 0: none, and no clock is read per instruction. */
    int32_t stats_ops;
} TsRunOptions;


/* The most steps a run takes (TsRunOptions.steps, `--steps`): 10^12, a
 * count no run reaches (the fastest step, a scalar add, takes ~1 us:
 * 10^12 of them are 11 days), so 2^63-1 is a typo refused, not a run
 * that never ends. */
#define TS_MAX_STEPS 1000000000000LL

/* The bounds of TsRunOptions.heartbeat_seconds and ts_mpi_heartbeat. */
#define TS_HEARTBEAT_MIN_SECONDS 1.0
#define TS_HEARTBEAT_MAX_SECONDS (366.0 * 86400)

/* The results of a run: the output leaves (depth first), and the values
 * the program gave the host (outfeed, send to the host: on several
 * devices, device 0's, which hold the whole values the partitioner
 * gathered; under MPI on rank 0). */
typedef struct TsOutputs TsOutputs;

/* The output leaves. In a replay that returns every device's outputs,
 * leaf i is leaf i % K of device i / K (K = ts_outputs_count /
 * ts_outputs_num_devices), and ts_outputs_write names the files
 * output_<leaf>.device_<d>.npy. */
int32_t ts_outputs_count(const TsOutputs *o);
/* 0 when the outputs are the program's (logical) outputs; the number of
 * devices whose outputs they are in a replay of every device. */
int64_t ts_outputs_num_devices(const TsOutputs *o);
TsStatus ts_outputs_info(const TsOutputs *o, int32_t i, TsArrayInfo *info, TsDiag *d);
/* Copy output i in TsArray form into buf (nbytes must be its size). */
TsStatus ts_outputs_read(const TsOutputs *o, int32_t i, void *buf, size_t nbytes, TsDiag *d);
/* An output directory held for one run: DIR/.tessel.lock locked (flock)
 * until ts_output_dir_close, so that a second run into DIR fails at once
 * (TS_ERUNTIME naming the first one's pid) instead of mixing its files
 * with the first one's; the lock goes with the process. An existing DIR
 * is locked here: hold it from before the run to after the write. A
 * missing DIR is made and locked by ts_outputs_write_to (a run that fails
 * before leaves no directory); here it is only checked that it can be
 * made (its parent a directory this process may write into, TS_ERUNTIME
 * otherwise), so that a run fails before its work, not after it. */
typedef struct TsOutputDir TsOutputDir;
TsStatus ts_output_dir_open(const char *dir, TsOutputDir **out, TsDiag *d);
/* ts_output_dir_open, but a missing DIR is made and locked now (a
 * directory that receives files at several points of a run, such as
 * checkpoints: it is held from the first). */
TsStatus ts_output_dir_make(const char *dir, TsOutputDir **out, TsDiag *d);
/* Release the lock; a directory that open made and that stayed empty is
 * removed. NULL: nothing. */
void ts_output_dir_close(TsOutputDir *od);
/* cancelled(ctx) is asked by ts_outputs_write_to once every file is
 * complete, before the first rename: true gives up the write (its
 * temporaries removed, DIR as it was, an earlier run's outputs kept;
 * TS_ERUNTIME saying so). A caller that defers SIGINT/SIGTERM while
 * outputs are written uses it so that a signal leaves the earlier outputs,
 * not none. NULL cancelled: never. NULL od: nothing. */
void ts_output_dir_on_cancel(TsOutputDir *od, bool (*cancelled)(void *ctx), void *ctx);
/* Write DIR/output_<i>.npy, DIR/outfeed_<i>.npy, DIR/NAME.npy (each
 * tessel_save) and the manifest DIR/outputs.json (the run's id, the
 * model's SHA-256, each file's kind, dtype, shape and SHA-256) all or
 * nothing: every file to a temporary created O_CREAT|O_EXCL|O_NOFOLLOW
 * under an unpredictable name in DIR, renamed when every one is complete,
 * the manifest last; then the files an earlier run left there and this
 * one did not rewrite are removed: tessel's own output names, and the
 * files an earlier manifest lists, when that manifest is tessel's (format,
 * version and digest checked: ts_outputs_verify) and each file's bytes
 * still have the SHA-256 it gives. Never removed: other files of DIR, the
 * model the run ran, and any file the run read (TsRunOptions.inputs and
 * infeeds). */
TsStatus ts_outputs_write_to(const TsOutputs *o, TsOutputDir *od, TsDiag *d);
/* Is DIR/outputs.json a manifest tessel wrote (its "format", "version"
 * and "manifest_sha256", the SHA-256 of the rest of it, right), and does
 * every file it lists still hold the bytes whose SHA-256 it gives? TS_OK
 * and, when manifest_sha256 is not NULL, the manifest's own digest (64 hex
 * digits and a NUL, "" on failure); else TS_EINPUT naming the file and
 * what differs. What a resume checks of a checkpoint (docs/cli.md). */
TsStatus ts_outputs_verify(const char *dir, char manifest_sha256[65], TsDiag *d);
/* ts_output_dir_open, ts_outputs_write_to, ts_output_dir_close. */
TsStatus ts_outputs_write(const TsOutputs *o, const char *dir, TsDiag *d);
/* Remove what ts_outputs_write wrote into DIR (its files and manifest). */
void ts_outputs_remove(const TsOutputs *o, const char *dir);
/* "output 0: f32[4,8] min ... max ... mean ... first [...]\n" per leaf,
 * then "outfeed 0: ..." lines, then "saved NAME: ..." per tessel_save. Heap string (ts_free), NULL on OOM. */
char *ts_outputs_summary(const TsOutputs *o);
/* With TsRunOptions.stats: the measurements, one "tessel: stats: ..." line
 * each (docs/cli.md); "" without. Owned by o. */
const char *ts_outputs_stats(const TsOutputs *o);
void ts_outputs_free(TsOutputs *o);

/* ------------------------------------------------------------------ */
/* Running                                                             */
/* ------------------------------------------------------------------ */

/* Run on N x R devices of this process (threads pinned to cores): every
 * device of the plan, whatever host layout it was compiled for. */
TsStatus ts_plan_run(const TsPlan *p, const TsRunOptions *o, TsOutputs **out, TsDiag *d);
/* The unpartitioned module on one device: the oracle partitioned runs are
 * checked against. A plan compiled in this process runs its module; a
 * loaded plan has none (TS_EINPUT). */
TsStatus ts_plan_run_reference(const TsPlan *p, const TsRunOptions *o, TsOutputs **out, TsDiag *d);
TsStatus ts_run_reference(const TsModule *m, const TsRunOptions *o, TsOutputs **out, TsDiag *d);

/* Under MPI: `mpi_comm` is the address of the caller's MPI_Comm (MPI
 * initialised with at least MPI_THREAD_SERIALIZED; from mpi4py,
 * MPI._addressof(comm)); its size must be the plan's hosts and its rank r
 * runs devices [r*L, (r+1)*L). Every rank calls; each reads only its
 * shards of every input. The library uses that communicator only, never
 * MPI_COMM_WORLD behind the caller's back. Failures found before the
 * devices run are agreed on: every rank returns an error (the failing
 * rank's message, "rank R: ..."). A failure while devices run ends the job
 * (MPI_Abort on the communicator), since the other ranks may be waiting
 * for this one in a collective. On rank 0 *out receives the outputs; on the
 * other ranks *out is NULL. */
TsStatus ts_plan_run_mpi(const TsPlan *p, const void *mpi_comm, const TsRunOptions *o, TsOutputs **out,
                         TsDiag *d);

/* The MPI world of a program that has no MPI of its own (the command line
 * under mpirun): MPI_Init_thread, errors returned. ts_mpi_init_ex first
 * arms the failure injection of `tune` (its fail_* and
 * skip_collective_after fields, RELIABILITY.md; NULL: none), so that
 * fail_mpi_after = 1 fails MPI_Init_thread itself. */
typedef struct TsMpiWorld TsMpiWorld;
/* True when this process was started by mpirun. */
bool ts_mpi_launched(void);
TsStatus ts_mpi_init(TsMpiWorld **out, TsDiag *d);
TsStatus ts_mpi_init_ex(const TsTuning *tune, TsMpiWorld **out, TsDiag *d);
/* Called by ts_mpi_finalize with this rank's error before the others
 * learn of it (as TsRunOptions.on_error). */
void ts_mpi_on_error(TsMpiWorld *w, void (*on_error)(void *ctx, const TsDiag *d), void *ctx);
/* Start the world's heartbeat (`seconds` as TsRunOptions.heartbeat_seconds:
 * 0 the default 60 s, < 0 none): from now on a rank silent that long, or
 * one that reaches another collective than its peers, ends the job on
 * every rank with a message naming it, in the world's agreements too
 * (ts_mpi_agree, ts_mpi_finalize). Stops in ts_mpi_finalize. */
TsStatus ts_mpi_heartbeat(TsMpiWorld *w, double seconds, TsDiag *d);
/* The address of its MPI_Comm (for ts_plan_run_mpi), its rank and size. */
const void *ts_mpi_comm(const TsMpiWorld *w);
int ts_mpi_rank(const TsMpiWorld *w);
int ts_mpi_size(const TsMpiWorld *w);
/* Every rank says whether it is fine; returns -1 when all are, else the
 * lowest failing rank (the same on every rank). *status_max (may be NULL)
 * receives the largest `status` over the ranks. */
int ts_mpi_agree(TsMpiWorld *w, bool ok, int status, int *status_max);
/* End MPI and free w: every rank says whether its work went well (`ok`)
 * and frees its MPI objects, all agree, then MPI_Finalize. TS_OK only when
 * every rank was fine, so a program may write its results after it
 * (Open MPI's MPI_Finalize waits for every rank: a rank that fails in it
 * ends the job first). Errors are TS_ERUNTIME naming the rank. NULL: TS_OK. */
TsStatus ts_mpi_finalize(TsMpiWorld *w, bool ok, TsDiag *d);
/* End the whole job (MPI_Abort), printing `msg` (may be NULL) first;
 * never returns when MPI can stop the other ranks. Not for a NULL world
 * before MPI is initialised. */
void ts_mpi_abort(TsMpiWorld *w, const char *msg);
/* MPI calls this process made so far (what a failure-injection walk covers). */
long ts_mpi_calls(void);

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

/* The local devices hwloc finds for `local_devices` devices (0: one per
 * core), their cpusets, cores and NUMA nodes, as "text" or "json". */
TsStatus ts_devices_describe(int32_t local_devices, const char *format, char **out, TsDiag *d);
/* The cores of this machine hwloc finds in the process's cpuset (PUs
 * where it finds no cores); 0 when it cannot tell. */
int32_t ts_host_cores(void);

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_H */
