/*
 * api_internal.h: layer `api/`, the library behind include/tessel.h. The
 * public handles are thin boxes around the layers' types; a TsDiag is an
 * IrDiag with public field names. May use every layer (DESIGN.md).
 *
 *   common.c         what every file shares: diagnostics, versions, limits,
 *                    ts_free, ts_shutdown
 *   module_handle.c  TsModule: parse, verify, summary, print
 *   plan_handle.c    TsPlan, the handle on a compiled program (compiled
 *                    here or loaded from a plan file): compile, load, save,
 *                    view (`tessel plan`), host layout, inputs/outputs
 *   run.c            TsOutputs; runs in process and of the reference
 *   replay_bind.c    replays of SPMD programs: each device's inputs and outputs
 *   run_mpi.c        runs under MPI on the caller's communicator; TsMpiWorld
 *   agree.c          what the ranks of an MPI run agree on before any step
 *   device_report.c  the local devices as text or JSON (`tessel devices`)
 *   outdir.c         the output directory of a run: locked, all or nothing
 *   grad.c           ts_add_gradients, the public face of grad/
 *   profile.c        the cost model's rates read from a profile file (--profile)
 *   stats_ops.c      the per-instruction times of a run as --stats=ops prints them
 */
#ifndef TESSEL_API_INTERNAL_H
#define TESSEL_API_INTERNAL_H

#include "../compile/compile.h"
#include "../runtime/program.h"
#include "../runtime/run_internal.h"
#include "tessel.h"

struct TsModule {
    IrModule *ir;
};

struct TsPlan {
    CompileResult r;
    IrModule *reference;     /* the unpartitioned module (compiled in this process), or NULL */
    /* Or, for a plan compiled from a model file, that file's text, parsed
     * again by ts_plan_run_reference: a copy of the parsed module kept for
     * a reference run that compile and most runs never make cost as much
     * memory (first touched, so time) as the parse itself. */
    char *ref_text;          /* heap, or NULL */
    size_t ref_len;
    char *ref_name;          /* heap: the file's name for diagnostics */
    IrLimits ref_limits;
    IrModule *signature;     /* the program's logical parameters (rt_bind_inputs binds to it) */
    char sha256[65];         /* SHA-256 of the model's or plan file's text ("" unknown) */
    uint8_t *key;            /* TsCompileOptions.sign_key (heap copy) or NULL: plan files are signed with it */
    size_t keylen;
};

/* A file's identity (st_dev, st_ino). */
typedef struct ApiFileId {
    uint64_t dev, ino;
} ApiFileId;

struct TsOutputs {
    DevValue *result;        /* the root value (a tuple or an array) */
    DevValue *outfeeds;      /* a tuple of what the program gave the host, or NULL */
    char *stats;             /* "tessel: stats: ..." lines, "" without stats */
    int64_t ndevices;        /* replays of every device: result is a tuple of their results; else 0 */
    RtSaves saves;           /* what tessel_save named: written as NAME.npy with the outputs */
    char model_sha256[65];   /* of the model or plan run, for the manifest ("" unknown) */
    ApiFileId *reads;        /* the files the run read (its --input and --infeed files): */
    int32_t nreads;          /* cleaning up an output directory never removes them */
};

/* Note in o the files run options `ro` name (inputs, infeeds) that
 * exist, so that writing o into a directory never removes them. Out of
 * memory leaves the list shorter: false. */
bool api_outputs_note_reads(TsOutputs *o, const TsRunOptions *ro);
/* The C API's one rule for NULL (tessel.h, "NULL"): a required pointer
 * argument that is NULL is TS_EINPUT, "FUNCTION: ARG is NULL" in d (when
 * d is not NULL), with the function's outputs cleared first. */
TsStatus api_null(TsDiag *d, const char *fn, const char *arg);
#define API_NEED(x, d)                                                                                       \
    do {                                                                                                   \
        if (!(x))                                                                                          \
            return api_null((d), __func__, #x);                                                            \
    } while (0)
#define API_CLEAR(out)                                                                                       \
    do {                                                                                                   \
        if (out)                                                                                           \
            *(out) = NULL;                                                                                 \
    } while (0)
/* The deepest nesting a module may declare (TsLimits.depth is clamped to
 * it): what every pass and the device executor can recurse. */
#define API_MAX_DEPTH 200
/* What a run's options must be before anything runs (IR_EINPUT naming the
 * field): inputs present when ninputs > 0, each with a key and one of
 * path/array, infeeds likewise, steps >= 0, a heartbeat of 0, < 0 or at
 * least TS_HEARTBEAT_MIN_SECONDS, a known tuning.sgemm. NULL options are the defaults. */
IrStatus api_check_run(const TsRunOptions *o, IrDiag *d);
/* Is s a heartbeat a run can have (0, < 0, or within the public bounds;
 * NaN is not)? */
bool api_heartbeat_ok(double s);
/* TsTuning.sgemm (a TsSgemm) as device/'s DEV_SGEMM_* (the probe for an
 * unknown value, which api_check_run refuses). */
int api_sgemm_lib(int32_t sgemm);
/* Under the GEMM probe, measure the f32 GEMM libraries now, before a run's
 * clock starts, when the largest f32 dot of prog's device programs or of m
 * (either may be NULL) is one the probe times for (dev_blas_sgemm_prepare),
 * and where it then chooses per product shape, the shapes of their plain
 * matrix dots (dev_blas_sgemm_prepare_shape); call after dev_blas_preload. */
void api_sgemm_prepare(const PlanProgram *prog, const IrModule *m);
/* What prog's clusters all-reduce a step, in bytes: every all-reduce
 * instruction's result counted once (coll_mpi_shm_prepare's hint). */
int64_t api_allreduce_bytes(const PlanProgram *prog);
/* Move the first error of `from` into `to` (keeping an earlier one) and
 * return st as a TsStatus; `from` is cleared. */
TsStatus api_give(IrStatus st, IrDiag *from, TsDiag *to);
/* IrLimits from public limits (NULL: defaults); *max_devices receives the
 * device bound (0: the default). */
IrLimits api_limits(const TsLimits *l, int64_t *max_devices);
/* Read a whole regular file (at most 4 GiB; a FIFO or a device is refused
 * before it is opened for reading, so it cannot block). Heap text. */
char *api_read_file(const char *path, size_t *len, IrDiag *d);
/* The same in an ir_big_alloc block (huge pages for a large file), for a
 * text ir_parse_take keeps. */
char *api_read_file_big(const char *path, size_t *len, IrDiag *d);
/* fsync the directory `dir` (its entries: a rename into it is on the disk
 * once this returns true); false with errno set. */
bool api_sync_dir(const char *dir);
/* syncfs() of the file system holding `dir`: every file written there is
 * on the disk once this returns true; false with errno set. */
bool api_sync_fs(const char *dir);
/* The directory holding `path` ("a/b/" and "a/b": "a"; "b": "."; "/b":
 * "/") into out (cap bytes); false (ENAMETOOLONG) when it does not fit. */
bool api_parent(const char *path, char *out, size_t cap);
/* fsync the directory holding `path` (api_sync_dir of api_parent). */
bool api_sync_parent(const char *path);
/* ts_module_parse or ts_plan_parse: text (named `name`) to a handle. */
typedef TsStatus (*ApiParse)(const char *name, const char *text, size_t len, const TsLimits *lim, void **out,
                             TsDiag *d);
/* Read the file at `path` (api_read_file) and parse it with `parse`. */
TsStatus api_parse_file(const char *path, const TsLimits *lim, ApiParse parse, void **out, TsDiag *d);
/* profile.c: the rates of the profile file at `path` into *c (fields it
 * does not give stay 0: the defaults), and the cores its devices shared
 * into *host_cores (0: not given). IR_EINPUT naming the file and the
 * field. */
IrStatus api_profile_load(const char *path, AutoCost *c, int64_t *host_cores, IrDiag *d);
/* The heartbeat of a run: 0 means the default, 60 s; < 0 none. */
double api_heartbeat_seconds(double s);
/* The while loop bound of a run (--limit trips; 0: unbounded). */
int64_t api_max_trips(const TsRunOptions *o);
/* o->tuning in the collectives' form. */
CollTuning api_tuning(const TsRunOptions *o);
/* A plan whose estimated peak memory on this process (the largest
 * cluster's peak per device x `local` devices) exceeds the run's
 * memory_bytes (0: the host's available memory) is IR_EINPUT naming the
 * estimate and the limit. */
IrStatus api_check_memory(const TsPlan *p, const TsRunOptions *o, int64_t local, IrDiag *d);
/* The bind options of a run (inputs as RtInput, borrowed). */
RtBindOptions api_bind_options(const TsRunOptions *o);
/* A new TsOutputs holding a reference to result (and outfeeds); NULL on OOM. */
TsOutputs *api_outputs_new(DevValue *result, DevValue *outfeeds, char *stats);
/* Move *saves into o (saves is left empty) and note the model's digest. */
void api_outputs_adopt(TsOutputs *o, RtSaves *saves, const char *model_sha256);

/* agree.c: before any step of ts_plan_run_mpi, the ranks agree that they
 * run the same thing (tessel.h, TsRunOptions.agree): p's program and
 * model, the layout, the inputs and seed, the steps and options of o, and
 * o's own agree items, one all-gather (rt_mpi_agree_fields). IR_OK, or
 * the same IR_EINPUT on every rank naming the field and the rank; other
 * statuses: this rank could not take part (end the job). */
IrStatus api_agree(const TsPlan *p, const TsRunOptions *o, CollMpi *t, IrDiag *d);
/* run_mpi.c: ts_plan_run_mpi without the agreement, for the test of what
 * the collectives' check-ins catch when ranks run different programs
 * (tests/unit/mpi_unagreed_main.c). Not in tessel.h, not exported by the
 * shared library (tessel.map), reached by no option of the command line:
 * no user can turn the agreement off. */
TsStatus api_plan_run_mpi_unagreed(const TsPlan *p, const void *mpi_comm, const TsRunOptions *o, TsOutputs **out,
                                   TsDiag *d);

/* Bind the inputs of devices [first, first + n) of a replay into args[]. */
IrStatus api_bind_devices(const TsPlan *p, const TsRunOptions *o, int64_t first, int64_t n, RtArgs *args, IrDiag *d);
/* The outputs of a replay from every device's result (res[0..ndev),
 * references taken): a tuple of them, or device o->output_device's alone. */
IrStatus api_replay_outputs(const TsPlan *p, const TsRunOptions *o, DevValue **res, DevValue **result,
                            int64_t *ndevices, IrDiag *d);

/* What a run's step hook needs: the caller's callback and the output
 * leaf it watches (-1: none). */
typedef struct ApiSteps {
    const TsRunOptions *o;
    int32_t leaf;
    int64_t nleaves;         /* leaves of the root (1: the root is the value) */
} ApiSteps;
/* The step hook of a run whose result is `root` of computation e (whose
 * logical root shape is out_shape): TsRunOptions.watch resolved to a leaf
 * (IR_EINPUT naming what exists when it is not one, or has more than one
 * element). *hook stays empty without o->on_step. */
IrStatus api_step_hook(const TsRunOptions *o, const IrComputation *e, const IrShape *out_shape, ApiSteps *ctx,
                       RtStepHook *hook, IrDiag *d);
/* api_step_hook for a plan's program (host entry, else cluster 0). */
IrStatus api_plan_step_hook(const TsPlan *p, const TsRunOptions *o, ApiSteps *ctx, RtStepHook *hook, IrDiag *d);

/* The device binding and step lines of --stats. */
void api_stats_binding(IrStrBuf *s, const RtRunStats *rs);
/* The plan's per-device memory estimate (its first cluster's). */
int64_t api_plan_estimate(const TsPlan *p);
/* --stats: the estimate beside each local device's measured peak (devices
 * numbered from `first`), and the process's peak RSS beyond them. */
void api_stats_memory(IrStrBuf *s, const RtRunStats *rs, int64_t estimate, int64_t first);
/* TsRunOptions.stats_ops: each local device's table (devices numbered
 * from `first`), its `rows` costliest instructions, the rest in one line,
 * the time no instruction took in another. Nothing when the run kept no
 * tables. */
void api_stats_ops(IrStrBuf *s, const RtRunStats *rs, int32_t rows, int64_t first);

#endif /* TESSEL_API_INTERNAL_H */
