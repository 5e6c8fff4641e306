/*
 * compile.h: layer `compile/`: the compile driver, one pipeline from a
 * verified module to a plan, and the plan on disk and in dumps.
 *
 *   driver.c     compile_module: the passes in order (see its comment)
 *   plan_file.c  plan files: written, and loaded back with every line checked
 *   digest.c     SHA-256 (nettle) and the framing lines of a plan file
 *   view.c       the plan views (what `tessel plan` prints): text, JSON, DOT
 *   view_grid.c  sharding grids: how an array is cut over the devices
 *   view_html.c  the plan view as one self-contained HTML page
 *   view_memory.c  its memory section: the peak broken down, the live
 *                bytes over the execution order (inline SVG), the donated
 *                pairs and where each comes from
 *   view_why.c   why each collective is there: the text view's lines, --why
 *   view_colour.c the graph's colours by meaning, and their legend
 *   memfit.c     compile_fit_memory: fit a memory limit (the driver of the
 *                two below, memfit.h), compile_remat_list, what a fit did
 *   memfit_bound.c     the bytes no order or recomputation goes below, and
 *                      the values that must coexist there (a refusal's proof)
 *   memfit_schedule.c  an order with a lower peak (a list scheduler)
 *   memfit_remat.c     rematerialization to a limit; FLOPs of an instruction
 *   memfit_mask.c      masks kept apart: a comparison out of its reader's
 *                      fused group, so its wider operand may die early
 *   memfit_merge.c     instructions computing the same value merged (CSE)
 *                      before a fit that failed searches again
 *   memfit_ckpt.c      the dots checkpoint: the copies `tessel grad --remat
 *                      dots` would make, the last start of a failed fit
 *   memfit_prune.c     a fitted order's recomputations it no longer needs,
 *                      dropped
 *
 * May use ir/, auto/, cluster/ and partition/ (DESIGN.md's layer table); never
 * executes anything. What it produces, PlanProgram (partition/partition.h),
 * is what the runtime executes.
 *
 * Library code: never prints, never exits; errors are IrStatus with the
 * first error in an IrDiag.
 */
#ifndef TESSEL_COMPILE_H
#define TESSEL_COMPILE_H

#include "../auto/auto.h"
#include "../cluster/cluster.h"
#include "../ir/ir.h"
#include "../partition/partition.h"

/* The default of N x R (CompileOptions.max_devices raises or lowers it). */
#define COMPILE_DEFAULT_MAX_DEVICES 4096

typedef struct CompileOptions {
    int64_t num_partitions;  /* 0: the module header's num_partitions, else 1 */
    int64_t num_replicas;    /* 0: the module header's replica_count, else 1 */
    int64_t hosts;           /* 0: 1 host */
    int64_t local_devices;   /* 0: N*R/hosts */
    int64_t max_devices;     /* 0: COMPILE_DEFAULT_MAX_DEVICES */
    bool no_verify;          /* skip the verifier after the rewriting passes */
    double link_gbps;        /* links between hosts, Gb/s (the cost model); 0: 10 */
    /* Shardings chosen for the values the module leaves unsharded
     * (auto/, before propagation); NULL: none. */
    const AutoOptions *auto_shard;
    /* Pair parameters with outputs where safe (partition/donate.c,
     * plan_donate) after partitioning each cluster; a module's buffer_donor
     * is paired without it. */
    bool donate_auto;
    /* > 0: fit each cluster's estimated peak per device (with what the
     * host program holds) within this many bytes (compile_fit_memory);
     * IR_EINPUT naming the smallest peak reached when nothing fits. */
    int64_t memory_limit;
    /* Called with the module after each pass (--dump-dir): `what` names
     * it ("after_propagate", "after_outline", "cluster_0.after_spmd_partition",
     * ...). A failure (the callback's, in d) ends the compile. May be NULL. */
    IrStatus (*dump)(void *ctx, const char *what, const IrModule *m, IrDiag *d);
    void *dump_ctx;
    /* Called with a warning's text (no "warning:" prefix, no newline):
     * today, once, when a compile for several partitions partitions
     * nothing: no sharding on any value, or shardings that split none
     * (all replicated or maximal; driver.c). May be NULL. */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
} CompileOptions;

/* A value that coexists with the others at the bound (CompileFit.bound_v). */
typedef struct CompileBoundValue {
    const char *name;        /* the instruction (the module's string) */
    const char *why;         /* why it must be live there ("its operand", ...) */
    int64_t bytes;
} CompileBoundValue;

/* What fitting a memory limit did to one cluster's SPMD program. */
typedef struct CompileFit {
    int64_t limit;           /* bytes per device asked for the cluster (0: no limit) */
    int64_t before, after;   /* estimated peak per device before fitting, after */
    int64_t least;           /* the least estimate of the orders tried (<= after) */
    int64_t floor;           /* the entry's parameters' bytes, all live before the first
                              * step: no order or recomputation goes below it */
    /* A proof that no order or recomputation goes below `bound` (>= floor;
     * memfit_bound.c): at instruction bound_at (NULL: before the first
     * step, the parameters alone) the nbound values of bound_v (largest
     * first; the module's arena) coexist under every schedule. Set when
     * the estimate was over the limit. */
    int64_t bound;
    const char *bound_at;
    int32_t nbound;
    CompileBoundValue *bound_v;
    bool scheduled;          /* reordered (the module is is_scheduled=true) */
    int32_t nremat;          /* instructions recomputed */
    int64_t flops;           /* FLOPs the recomputations add per device per run */
} CompileFit;

/* One recomputation in an SPMD program (compile_remat_list). */
typedef struct CompileRemat {
    const char *name, *of;   /* the copy, the instruction it recomputes */
    int64_t bytes, flops;    /* its value per device; its FLOPs per run */
} CompileRemat;

/* A compiled program and what the passes decided, for dumps. */
typedef struct CompileResult {
    PlanProgram prog;        /* what the runtime executes */
    CluResult res;           /* clusters, host instructions, cuts (empty without host work) */
    DeviceLayout **layouts;  /* prog.ncluster entries: each cluster's devices, hosts, islands */
    bool from_plan;          /* loaded from a plan file */
    AutoReport autoshard;    /* what --auto-shard chose and why (explain NULL: not run) */
    CompileFit *fit;         /* prog.ncluster entries when compiled with a memory limit, else NULL */
} CompileResult;

/* Compile `src` (a verified module; taken, also on failure): the passes
 * of driver.c, for the options' N x R devices on H hosts. On failure *out
 * is empty; when a pass broke an invariant the error is IR_EINTERNAL
 * naming the pass and the instruction. */
IrStatus compile_module(IrModule *src, const CompileOptions *opt, CompileResult *out, IrDiag *d);
void compile_result_free(CompileResult *r);

/* The other way in: `m` (verified; taken, also on failure) is already an
 * SPMD program, one program per device as XLA prints it after
 * spmd-partitioning. No pass rewrites it: cluster 0 is m itself, replayed
 * (PlanCluster.replay) on the options' N x R devices (else the header's),
 * with the device layouts of the host layout. */
IrStatus compile_spmd_program(IrModule *m, const CompileOptions *opt, CompileResult *out, IrDiag *d);

/* Rebuild the device layouts of r for another host layout (hosts >= 1; local 0:
 * N*R/hosts). IR_EINPUT when N*R is not hosts x local. */
IrStatus compile_replan(CompileResult *r, int64_t hosts, int64_t local_devices, IrDiag *d);

/* ---- memfit.c ---- */

/* Fit the estimated peak per device of spmd's entry (plan_peak_bytes)
 * within `limit` bytes (> 0): when over it, reorder the entry to lower
 * the peak, then recompute values before their late uses (each copy an
 * instruction NAME.remat with frontend attribute _tessel_remat="NAME"),
 * and mark the module is_scheduled; results are unchanged (no
 * reassociation). *fit says what it did; fit->after > limit when nothing
 * fits (not an error here: the driver refuses). IR_ENOMEM, or IR_EINPUT
 * for an entry with a cycle. */
IrStatus compile_fit_memory(IrModule *spmd, int64_t limit, CompileFit *fit, IrDiag *d);
/* The recomputations of spmd's entry (marked as above), in order: up to
 * cap into out; returns how many there are. Can't fail. */
int32_t compile_remat_list(const IrModule *spmd, CompileRemat *out, int32_t cap);
/* The memory fit of cluster k of r as the plan text prints it (lines
 * starting with `indent`): the limit and the peak before and after (a
 * fresh compile with a limit), whether the order is scheduled, and each
 * recomputation with its bytes and FLOPs. Nothing for a cluster neither
 * fitted nor scheduled. OOM is the buffer's. */
void compile_fit_describe(IrStrBuf *o, const CompileResult *r, int32_t k, const char *indent);
/* What fitting the limit did to each cluster it changed, for stderr
 * (compile_fit_describe's lines after "cluster K "); NULL when it changed
 * none (or on OOM). Heap text (ts_free). */
char *compile_fit_summary(const CompileResult *r);
/* f's lower bound (f->bound > 0) in words, `host` bytes added: "no plan
 * under N bytes per device: at instruction X, these must coexist: NAME
 * BYTES (WHY), ..." (the largest eight), or the parameters alone. */
void compile_fit_bound(IrStrBuf *o, const CompileFit *f, int64_t host);

/* ---- plan_file.c ---- */

/* The plan file of r: valid HLO text (docs/plan.md). Without host work,
 * the SPMD module followed by its compile result lines; with host work,
 * the host program first (a module of its own, with its // TesselHost
 * lines), then each cluster's SPMD module and lines. Heap text (ts_free)
 * or NULL on OOM. */
char *compile_plan_file_text(const CompileResult *r);
/* The same, signed with key when it is not NULL (compile_plan_frame_signed). */
char *compile_plan_file_text_signed(const CompileResult *r, const void *key, size_t keylen);
/* Load and check a plan file (every line, shape, sharding and count
 * against the modules it carries; a truncated or altered plan is IR_EINPUT
 * naming the line, never a crash; the frame, compile_plan_check_frame,
 * first). Its modules are checked against `lim` (NULL: the defaults). */
IrStatus compile_plan_load(const char *path, const char *text, size_t len, const IrLimits *lim,
                           CompileResult *out, IrDiag *d);
/* ---- digest.c ---- */

/* True when text is a plan file: it starts with the plan header line or
 * ends with a digest line (docs/plan.md). Decided by those two lines
 * alone: a model whose comments mention // TesselPlan is a model. */
bool compile_is_plan_text(const char *text, size_t len);
/* The SHA-256 of data[0, len) as 64 lowercase hex digits and a NUL. */
void compile_sha256_hex(const void *data, size_t len, char out[65]);
/* 32 bytes of digest (nettle's) as 64 lowercase hex digits and a NUL. */
void compile_digest_hex(const uint8_t dg[32], char out[65]);
/* The SHA-256 of the whole file open at fd (read with pread from offset
 * 0, the file offset untouched); false on a read error. */
bool compile_sha256_fd(int fd, char out[65]);
/* body framed as a plan file: the header line, body, then the digest
 * line. Heap text (ts_free) or NULL on OOM. */
char *compile_plan_frame(const char *body);
/* The same, signed when key is not NULL: a // TesselSignature line (the
 * HMAC-SHA256 under key of every byte before it) before the digest line. */
char *compile_plan_frame_signed(const char *body, const void *key, size_t keylen);
/* HMAC-SHA256 (RFC 2104, nettle's) of data[0, len) under key, as 64
 * lowercase hex digits and a NUL. Can't fail. */
void compile_hmac_sha256_hex(const void *key, size_t keylen, const void *data, size_t len, char out[65]);
/* The signature of a plan whose frame checked (compile_plan_check_frame):
 * with key NULL, IR_EINPUT when the plan is signed; with a key, IR_EINPUT
 * unless it is signed and its signature is that key's (compared in
 * constant time). The error names the line. */
IrStatus compile_plan_check_signature(const char *path, const char *text, size_t len, const void *key,
                                      size_t keylen, IrDiag *d);
/* Check the frame of a plan file before anything of it is parsed: the
 * header with a version this tessel reads, the digest line last, and the
 * digest right. IR_EINPUT naming the line; *body_len: the bytes before the signature line (if any) or
 * the digest line. */
IrStatus compile_plan_check_frame(const char *path, const char *text, size_t len, size_t *body_len, IrDiag *d);
/* The kind of a host instruction as plan files and dumps spell it
 * ("host-op", "host-control-flow", "host-glue", "constant"). Can't fail. */
const char *compile_place_name(CluPlace p);

/* ---- view.c ---- */

/* What the graph of a dump draws: computations drawn whole (by name, or
 * the name of an instruction calling them) instead of folded into their
 * caller's node; for HTML, the graph as SVG (NULL: tessel's own layout). */
typedef struct PlanView {
    int32_t nexpand;
    const char *const *expand;
    const char *graph_svg;
} PlanView;

/* The plan of r for people, programs (docs/plan.md) and Graphviz (`v`
 * may be NULL). Heap strings (ts_free); NULL on OOM. */
char *compile_plan_text(const CompileResult *r);
char *compile_plan_json(const CompileResult *r);
char *compile_plan_dot(const CompileResult *r, const PlanView *v);
/* "leaf devices {0,1} offset [0,8] shape [4,8]": a tree leaf as the text
 * dump prints it (no newline). */
void compile_tree_leaf(IrStrBuf *o, const PlanTree *t);

/* ---- view_why.c ---- */

/* "FILE:LINE:COL" of a site (file may be NULL), or "an unknown position". */
void compile_site_pos(IrStrBuf *o, const SpmdSite *s, const char *file);
/* The reason of collective c as lines ("why: asked for by NAME at
 * FILE:LINE:COL: TEXT", then "avoid: ..." where a change would make it
 * local), each starting with `indent`; positions in `file`. */
void compile_why_lines(IrStrBuf *o, const SpmdCollective *c, const char *file, const char *indent);
/* `tessel plan --why NAME`: the collectives of r that produce or consume
 * the value NAME (an instruction of a cluster, or a collective's own
 * name), each with its reason. Heap text; NULL with IR_EINPUT when r has
 * nothing of that name, or IR_ENOMEM, in d. */
char *compile_plan_why(const CompileResult *r, const char *name, IrDiag *d);
/* "Did you mean": the instruction or collective name of the plan (and
 * computation name, with `computations`) that `name` is a slip of
 * (ir_nearest), for --why, --show and --expand; NULL for none. The name
 * lives as long as the plan. */
const char *compile_plan_nearest_name(const CompileResult *r, const char *name, bool computations);

/* ---- view_colour.c ---- */

typedef struct PlanColour {
    char *key;               /* canonical sharding text (shd_canonical_str) */
    char *words;             /* what it means (shd_describe) */
    const char *colour;      /* "#rrggbb" */
} PlanColour;

typedef struct PlanColours {
    int32_t n;
    PlanColour *e;           /* sorted by key */
} PlanColours;

/* The colour table of every sharding in r's logical clusters (empty for a
 * loaded plan). False on OOM (c empty). Free with plan_colours_free. */
bool plan_colours_build(const CompileResult *r, PlanColours *c);
void plan_colours_free(PlanColours *c);
/* The colour of s (NULL, or not in the table: the replicated grey). */
const char *plan_colour(const PlanColours *c, const IrSharding *s);

/* ---- view_html.c ---- */

/* The plan as one self-contained HTML page (no network, no external
 * script: docs/plan.md). Heap text, NULL on OOM. */
char *compile_plan_html(const CompileResult *r, const PlanView *v);
/* s with <, >, & and " escaped for HTML text and attributes (NULL: nothing). */
void compile_html_esc(IrStrBuf *o, const char *s);

/* ---- view_memory.c ---- */

/* The memory section of a cluster (its estimate pm): the peak broken down,
 * the values live there and an inline SVG of the live bytes per step. */
void compile_memory_html(IrStrBuf *o, const PlanMemory *pm);
/* Where donation pair pd comes from, a phrase: --donate auto's, a paired
 * buffer_donor, or the module's own input_output_alias. */
const char *compile_donation_source(const PlanDonation *pd);

/* ---- view_grid.c ---- */

/* The 2-D view of an array's tiles: rows are tiles of dim `rowdim`,
 * columns of `coldim` (-1: one track), one page per tile of the further
 * sharded dims extra[]; rext/cext the extent of each row/column tile. */
typedef struct GridView {
    int32_t rank, rowdim, coldim;
    int32_t nextra;
    int32_t extra[IR_MAX_RANK];
    int64_t npages, nrows, ncols;
    int64_t *rext, *cext;
} GridView;

/* Flags of grid_text / compile_plan_show. */
enum { GRID_ASCII = 1u, GRID_COLOUR = 2u };

/* The view of an array shape (not a tuple) under s (NULL: replicated).
 * IR_ENOMEM only; free with grid_view_free. */
IrStatus grid_view(const IrShape *shape, const IrSharding *s, GridView *g);
void grid_view_free(GridView *g);
/* The devices (partition ids) holding box (row, col) of page `page`, in
 * tile-assignment order, at most cap of them; returns their count. */
int64_t grid_cell_devices(const GridView *g, const IrSharding *s, int64_t ndevices, int64_t page, int64_t row,
                          int64_t col, int64_t *out, int64_t cap);
/* "0,1" / "0-3": a box's devices, heap text (ts_free), NULL on OOM. */
char *grid_device_label(const int64_t *dev, int64_t n);
/* What the grid shows, as lines: the dims on rows and columns with their
 * tiles, the dims not shown, replication. */
void grid_caption(IrStrBuf *o, const GridView *g, const IrShape *shape, const IrSharding *s, int64_t ndevices);
/* The titled grid (a tuple: one per leaf) of a value over `ndevices`
 * partitions, box-drawing characters (GRID_ASCII: + - |; GRID_COLOUR:
 * ANSI backgrounds per box). IR_ENOMEM only. */
IrStatus grid_text(IrStrBuf *o, const char *title, const IrShape *shape, const IrSharding *s, int64_t ndevices,
                   unsigned flags);
/* The grids of the value `name` names in r (an instruction, an input by
 * name or "input K", "output K"; "all": every input and output). Heap
 * text; NULL with IR_EINPUT (no such name) or IR_ENOMEM in d. */
char *compile_plan_show(const CompileResult *r, const char *name, unsigned flags, IrDiag *d);

#endif /* TESSEL_COMPILE_H */
