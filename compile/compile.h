/*
 * compile.h: layer `compile/`: the compile driver, one pipeline from a
 * verified module to a plan, and the plan on disk and in dumps.
 *
 *   driver.c     compile_module: the passes in order (see its comment)
 *   plan_file.c  plan files: written, and loaded back with every line checked
 *   plan_dump.c  the plan as text, JSON and DOT
 *
 * May use ir/, cluster/ and partition/ (DESIGN.md's layer table); never
 * executes anything. What it produces, PlanProgram (partition/partition.h),
 * is what the runtime executes.
 *
 * Library code: never prints, never exits; errors are IrStatus with the
 * first error in an IrDiag.
 */
#ifndef TESSEL_COMPILE_H
#define TESSEL_COMPILE_H

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
} CompileOptions;

/* A compiled program and what the passes decided, for dumps. */
typedef struct CompileResult {
    PlanProgram prog;        /* what the runtime executes */
    CluResult res;           /* clusters, host instructions, cuts (empty without host work) */
    Plan **plans;            /* prog.ncluster entries: trees, devices, islands */
    bool from_plan;          /* loaded from a plan file */
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
 * with the plans of the host layout. */
IrStatus compile_spmd_program(IrModule *m, const CompileOptions *opt, CompileResult *out, IrDiag *d);

/* Rebuild the plans of r for another host layout (hosts >= 1; local 0:
 * N*R/hosts). IR_EINPUT when N*R is not hosts x local. */
IrStatus compile_replan(CompileResult *r, int64_t hosts, int64_t local_devices, IrDiag *d);

/* ---- plan_file.c ---- */

/* The plan file of r: valid HLO text (docs/plan.md). Without host work,
 * the SPMD module followed by its compile result lines; with host work,
 * the host program first (a module of its own, with its // TesselHost
 * lines), then each cluster's SPMD module and lines. Heap text (ts_free)
 * or NULL on OOM. */
char *compile_plan_file_text(const CompileResult *r);
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
/* The SHA-256 of the whole file open at fd (read with pread from offset
 * 0, the file offset untouched); false on a read error. */
bool compile_sha256_fd(int fd, char out[65]);
/* body framed as a plan file: the header line, body, then the digest
 * line. Heap text (ts_free) or NULL on OOM. */
char *compile_plan_frame(const char *body);
/* Check the frame of a plan file before anything of it is parsed: the
 * header with a version this tessel reads, the digest line last, and the
 * digest right. IR_EINPUT naming the line; *body_len: the bytes before
 * the digest line. */
IrStatus compile_plan_check_frame(const char *path, const char *text, size_t len, size_t *body_len, IrDiag *d);
/* The kind of a host instruction as plan files and dumps spell it
 * ("host-op", "host-control-flow", "host-glue", "constant"). Can't fail. */
const char *compile_place_name(CluPlace p);

/* ---- plan_dump.c ---- */

/* The plan of r for people, programs (docs/plan.md) and Graphviz. Heap
 * strings (ts_free); NULL on OOM. */
char *compile_plan_text(const CompileResult *r);
char *compile_plan_json(const CompileResult *r);
char *compile_plan_dot(const CompileResult *r);

#endif /* TESSEL_COMPILE_H */
