/*
 * cli.h: the `tessel` command line. One file per command (cmd_*.c), each
 * exporting a CliCommand; main.c lists them in one table, so adding a
 * command is one row there plus its file. options.c parses the options
 * every command shares and checks that a command accepts each one.
 *
 *
 *   main.c         the command table, --help, --version
 *   options.c      the shared options, parsed and checked per command
 *   cmd_check.c    tessel check
 *   cmd_compile.c  tessel compile
 *   cmd_plan.c     tessel plan
 *   cmd_run.c      tessel run (alone or under mpirun)
 *   cmd_devices.c  tessel devices
 *   cmd_grad.c     tessel grad
 *   cmd_profile.c  tessel profile (the rates of --auto-shard's cost model)
 *   profile_*.c    its measuring programs and statistics (profile.h)
 *   checkpoint.c   run --checkpoint: steps resumed from a saved state
 *   tuning_env.c   the TESSEL_* tuning variables, read once into the run's options
 *
 * tools/ is a client of the public API (tessel.h) and of nothing else.
 * Only tools/ prints and exits. Exit status: 0 success, 1 a failure while
 * running, 2 bad usage or bad input.
 */
#ifndef TESSEL_CLI_H
#define TESSEL_CLI_H

#include "tessel.h"

#include <stdint.h>
#include <stdio.h>

enum {
    CLI_OK = 0,
    CLI_FAIL = 1,   /* a failure while running */
    CLI_USAGE = 2,  /* bad usage or bad input */
};

/* The help text of --donate, which compile, plan and run take alike. */
#define CLI_HELP_DONATE                                                              \
    "  --donate auto           pair each parameter with an output of its shape,\n"   \
    "                          type and sharding written no earlier than its last\n" \
    "                          read (input_output_alias; the module's own pairs\n"   \
    "                          are kept): the run frees it at its last read and\n"   \
    "                          the output may take its buffer (docs/plan.md,\n"      \
    "                          Donation); --donate declared (default): the\n"        \
    "                          module's pairs, and each buffer_donor parameter\n"    \
    "                          paired with an output of its shape, type and\n"       \
    "                          sharding\n"

/* Options, as bits a command sets in CliCommand.accepts. */
#define OPT_INPUT          (UINT64_C(1) << 0) /* --input INDEX_OR_NAME=FILE.npy (repeatable) */
#define OPT_RANDOM         (UINT64_C(1) << 1) /* --random-inputs SEED */
#define OPT_OUTPUT_DIR     (UINT64_C(1) << 2) /* --output-dir DIR */
#define OPT_REFERENCE      (UINT64_C(1) << 3) /* --reference */
#define OPT_PARTITIONS     (UINT64_C(1) << 4) /* --num-partitions N */
#define OPT_REPLICAS       (UINT64_C(1) << 5) /* --num-replicas R */
#define OPT_HOSTS          (UINT64_C(1) << 6) /* --hosts H */
#define OPT_LOCAL_DEVICES  (UINT64_C(1) << 7) /* --local-devices L */
#define OPT_STEPS          (UINT64_C(1) << 8) /* --steps K */
#define OPT_STATS          (UINT64_C(1) << 9) /* --stats */
#define OPT_FORMAT         (UINT64_C(1) << 10) /* --format text|json|dot */
#define OPT_OUT            (UINT64_C(1) << 11) /* -o FILE */
#define OPT_LIMIT          (UINT64_C(1) << 12) /* --limit NAME=VALUE (repeatable) */
#define OPT_PRINT          (UINT64_C(1) << 13) /* --print (check: print the parsed module) */
#define OPT_INFEED         (UINT64_C(1) << 14) /* --infeed FILE.npy (repeatable, in order) */
#define OPT_NO_VERIFY      (UINT64_C(1) << 15) /* --no-verify (skip the verifier after compile passes) */
#define OPT_SPMD           (UINT64_C(1) << 16) /* --spmd (replay an SPMD program as it is) */
#define OPT_PER_DEVICE     (UINT64_C(1) << 17) /* --per-device (replays: each device its own random inputs) */
#define OPT_OUTPUT_DEVICE  (UINT64_C(1) << 18) /* --output-device D (replays: device D's outputs alone) */
#define OPT_WRT            (UINT64_C(1) << 19) /* --wrt PARAMS (grad) */
#define OPT_LOSS           (UINT64_C(1) << 20) /* --loss OUTPUT (grad) */
#define OPT_SGD            (UINT64_C(1) << 21) /* --sgd LR (grad) */
#define OPT_ADAM           (UINT64_C(1) << 22) /* --adam LR (grad) */
#define OPT_JVP            (UINT64_C(1) << 23) /* --jvp (grad: forward mode) */
#define OPT_SHOW           (UINT64_C(1) << 24) /* --show NAME (plan: a sharding grid; repeatable) */
#define OPT_ASCII          (UINT64_C(1) << 25) /* --ascii (plan: grids in + - | only) */
#define OPT_EXPAND         (UINT64_C(1) << 26) /* --expand NAME (plan: draw a called computation whole; repeatable) */
#define OPT_DUMP_DIR       (UINT64_C(1) << 27) /* --dump-dir DIR (the module after each compile pass) */
#define OPT_WATCH          (UINT64_C(1) << 28) /* --watch NAME (run: an output shown on the progress line) */
#define OPT_PROGRESS       (UINT64_C(1) << 29) /* --progress (run: a progress line per step, also off a terminal) */
#define OPT_TIMEOUT        (UINT64_C(1) << 30) /* --timeout SECONDS (run: the whole run's bound) */
#define OPT_HEARTBEAT      (UINT64_C(1) << 31) /* --heartbeat SECONDS (run under mpirun: silent rank bound) */
#define OPT_CHECKPOINT_EVERY (UINT64_C(1) << 32) /* --checkpoint-every M (run: steps between checkpoints) */
#define OPT_CHECKPOINT_DIR (UINT64_C(1) << 33) /* --checkpoint-dir DIR */
#define OPT_RESUME         (UINT64_C(1) << 34) /* --resume DIR (continue from its last checkpoint) */
#define OPT_LINK_GBPS      (UINT64_C(1) << 35) /* --link-gbps G (the cost model's links between hosts) */
#define OPT_AUTO_SHARD     (UINT64_C(1) << 36) /* --auto-shard (shardings chosen by the cost model) */
#define OPT_MESH           (UINT64_C(1) << 37) /* --mesh SPEC (2x4, data=2,model=4) */
#define OPT_PROFILE        (UINT64_C(1) << 38) /* --profile FILE (the cost model's rates) */
#define OPT_EXPLAIN        (UINT64_C(1) << 39) /* --explain (plan: why each chosen sharding) */
#define OPT_INIT_STATE     (UINT64_C(1) << 41) /* --init-state zeros (run: optimizer state starts at zero) */
/* The options of automatic sharding, for compile, plan and run. */
#define OPT_AUTO (OPT_AUTO_SHARD | OPT_MESH | OPT_PROFILE | OPT_HOST_CORES)
#define OPT_WHY            (UINT64_C(1) << 40) /* --why NAME (plan: the collectives of one value and why) */
#define OPT_SIGN_KEY       (UINT64_C(1) << 42) /* --sign-key FILE (compile: sign the plan; run/plan: verify it) */
#define OPT_REMAT          (UINT64_C(1) << 43) /* --remat POLICY (grad: what the backward recomputes) */
#define OPT_DONATE         (UINT64_C(1) << 44) /* --donate auto|declared (input_output_alias pairs inferred) */
#define OPT_SGEMM          (UINT64_C(1) << 45) /* --sgemm openblas|blis|onednn|avx512|amx-bf16x3|probe (run: the f32 GEMM's library) */
#define OPT_HOST_CORES     (UINT64_C(1) << 46) /* --host-cores C (--auto-shard: cores a host's devices share) */

/* Everything a command line said. Numbers are 0 when not given (the
 * module header or 1 then decides). */
typedef struct CliOptions {
    int npos;
    char **pos;              /* positional arguments (borrowed from argv) */
    int32_t ninputs;
    TsInput *inputs;         /* heap; keys point into a heap copy, see options.c */
    bool random;
    uint64_t seed;
    bool zero_state;         /* --init-state zeros */
    int32_t ninfeeds;
    const char **infeeds;    /* heap array; the paths are borrowed from argv */
    const char *output_dir;
    bool reference;
    int64_t num_partitions, num_replicas, hosts, local_devices, steps;
    bool stats;
    int32_t stats_ops;       /* --stats=ops: CLI_STATS_OPS (the rows a device's table shows); else 0 */
    bool print;              /* --print */
    bool no_verify;          /* --no-verify */
    bool spmd, per_device;   /* --spmd, --per-device */
    int64_t output_device;   /* --output-device D (given: OPT_OUTPUT_DEVICE) */
    const char *format;
    const char *out;
    const char *wrt, *loss;  /* --wrt, --loss (grad) */
    double sgd, adam;        /* --sgd LR, --adam LR (grad; 0 when not given) */
    bool jvp;                /* --jvp (grad) */
    const char *remat;       /* --remat POLICY (grad) */
    int32_t nshow, nexpand;
    const char **show;       /* --show NAMEs (heap array, borrowed strings) */
    const char **expand;     /* --expand NAMEs (heap array, borrowed strings) */
    bool ascii, progress;    /* --ascii, --progress */
    const char *dump_dir;    /* --dump-dir DIR */
    uint8_t *sign_key;       /* --sign-key FILE: its bytes (heap), or NULL */
    size_t sign_key_len;
    const char *watch;       /* --watch NAME */
    const char *why;         /* --why NAME (plan) */
    TsLimits limits;         /* what a model may declare: ts_limits_default(), then --limit */
    const char *limit_given[16]; /* each --limit NAME=VALUE taken (a NAME once: argv's strings) */
    int32_t nlimit_given;
    double timeout;          /* --timeout SECONDS (0: none) */
    double heartbeat;        /* --heartbeat SECONDS (0: the library's 60) */
    double link_gbps;        /* --link-gbps G (0: the cost model's 10) */
    int32_t donate;          /* --donate: TS_DONATE_DECLARED (default) or TS_DONATE_AUTO */
    int32_t sgemm;           /* --sgemm: a TsSgemm (given: OPT_SGEMM) */
    bool auto_shard;         /* --auto-shard */
    const char *mesh;        /* --mesh SPEC */
    const char *profile;     /* --profile FILE */
    int64_t host_cores;      /* --host-cores C (0: a core per device) */
    bool explain;            /* --explain (plan) */
    int64_t checkpoint_every;/* --checkpoint-every M (0: no checkpoints) */
    const char *checkpoint_dir, *resume; /* --checkpoint-dir DIR, --resume DIR */
    uint64_t given;          /* OPT_* bits of the options present */
    TsTuning tuning;         /* run: from the environment (tuning_env.c) */
} CliOptions;

typedef struct CliCommand {
    const char *name;
    const char *summary;     /* one line for `tessel --help` */
    const char *help;        /* the whole text of `tessel NAME --help` */
    uint64_t accepts;        /* OPT_* bits */
    int (*run)(const CliOptions *o);
} CliCommand;

/* The commands (one file each). */
extern const CliCommand cli_cmd_check;
extern const CliCommand cli_cmd_run;
extern const CliCommand cli_cmd_devices;
extern const CliCommand cli_cmd_compile;
extern const CliCommand cli_cmd_plan;
extern const CliCommand cli_cmd_grad;
extern const CliCommand cli_cmd_profile;

/* checkpoint.c: --checkpoint-every, --checkpoint-dir, --resume */

typedef struct CliCkpt {
    const char *dir;         /* where checkpoints go; NULL: none are written */
    int64_t every, steps;    /* M and K */
    int64_t done;            /* steps done so far (from --resume, then per chunk) */
    int64_t final_step;      /* --resume found step K (the run's last) checkpointed: the
                              * steps after the checkpoint before it run again for the
                              * outputs, and step-K is not written again (0: not so) */
    char digest[65];         /* the plan's SHA-256 */
    char *taken_with;        /* what the inputs were (checkpoint.json's "random_inputs"
                              * and "inputs" members; heap): a resume must give the same */
    int32_t nalias;          /* the leaves the aliases move (a tuple's each) */
    int32_t *leaf, *param;   /* leaf k: output leaf -> parameter */
    int32_t *pleaf;          /* ... its leaf there (-1: an array parameter, whole) */
    char last[4096];         /* the newest checkpoint directory ("" before one) */
    char **paths;            /* [nalias]: its files the next chunk reads (heap) */
    int32_t ninputs;
    TsInput *inputs;         /* the next chunk's inputs (keys heap) */
    int32_t nwritten;        /* checkpoints written, and their time */
    double write_seconds;
    TsOutputDir *held;       /* dir, locked while this process writes there
                              * (from the setup, or the first checkpoint
                              * where dir was missing): one run at a time */
    bool in_output_dir;      /* dir is --output-dir, which cmd_run.c holds */
    bool made;               /* ... and the first checkpoint made it */
} CliCkpt;

/* Check the options against the plan, find the aliases and the digest,
 * and with --resume the last complete checkpoint of this plan. CLI_OK or
 * the exit status after printing why. */
/* Refuse (usage, before anything is opened) an --output-dir that is, or
 * is inside, a step directory of --checkpoint-dir or --resume: the run
 * would overwrite that checkpoint. */
int cli_ckpt_check_output(const CliOptions *o);
/* writer: this process writes the checkpoints (rank 0 under mpirun): it
 * refuses a checkpoint directory that already holds a step this run would
 * write, and holds the directory (its lock) for the run. */
int cli_ckpt_setup(const CliOptions *o, const TsPlan *p, CliCkpt *c, bool writer);
void cli_ckpt_free(CliCkpt *c);
/* Steps of the next chunk: up to the next checkpoint, or the rest. */
int64_t cli_ckpt_chunk(const CliCkpt *c);
/* The next chunk's inputs into ro: the user's, with the aliased
 * parameters bound to the last checkpoint's files once there is one. */
int cli_ckpt_inputs(const CliOptions *o, const TsPlan *p, CliCkpt *c, TsRunOptions *ro);
/* After a chunk (c->done advanced): a checkpoint is due. */
bool cli_ckpt_due(const CliCkpt *c);
/* Write DIR/step-<done> from the chunk's outputs, atomically. */
int cli_ckpt_write(CliCkpt *c, const TsOutputs *out);
/* Under mpirun, on the ranks that do not write: where rank 0 wrote it
 * (the directory must be shared: every rank reads its shards of it). */
int cli_ckpt_mark(CliCkpt *c);

/* options.c */

/* Parse argv[0..argc) (the arguments after the command name). Returns
 * CLI_OK, CLI_USAGE after printing the error, or -1 after printing the
 * command's help (--help: exit 0). */
int cli_parse(const CliCommand *cmd, int argc, char **argv, CliOptions *o);
void cli_options_free(CliOptions *o);
/* Print `tessel: error: MSG` and a hint to --help; returns CLI_USAGE. */
int cli_usage_error(const CliCommand *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print a diagnostic (`tessel: FILE:LINE:COL: error: ...`, the line, a
 * caret), clear it, and return the exit status for its status. `st` is
 * what the failing call returned (used when it left d empty). */
int cli_report(TsStatus st, TsDiag *d);
/* Print a diagnostic as cli_report does, keeping it. */
void cli_print_diag(const TsDiag *d);
/* A line on stderr: `lead` as given (a terminal's control sequence, the
 * "tessel: " prefix), then the formatted text with its control bytes (but
 * tab) shown as \xNN, as errors show them: a path or name the user gave
 * is echoed as text, never as a terminal's escape sequence. */
void cli_say(const char *lead, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with "rank R: " in front of the message (unless it is there). */
void cli_print_ranked(const TsDiag *d, int rank);
/* Exit status for a library status. */
int cli_exit_status(TsStatus st);
/* Parse and verify the model at `path` into *m; on failure print the
 * diagnostic and return its exit status. */
int cli_load_model(const CliOptions *o, const char *path, TsModule **m);
/* The compile options the command line gave. */
TsCompileOptions cli_compile_options(const CliOptions *o);
/* Load PLAN or compile MODEL.hlo (N, R and limits from the options); on
 * failure print the diagnostic and return its exit status. */
int cli_open(const CliOptions *o, const char *path, TsPlan **p);
/* Apply --hosts / --local-devices to the plan's layout (a loaded plan
 * keeps its own when neither is given). */
int cli_layout(const CliOptions *o, TsPlan *p);
/* The instructions of each device `--stats=ops` lists (the rest in one line). */
#define CLI_STATS_OPS 20

/* Seconds on a monotonic clock, for --stats. */
double cli_now(void);
/* tuning_env.c: TESSEL_* tuning variables read once into *t (zeroed
 * first); a malformed one is reported (exit status CLI_USAGE). */
int cli_tuning_from_env(TsTuning *t);
/* The TsSgemm that "openblas", "blis", "onednn" or "probe" names (--sgemm,
 * TESSEL_SGEMM), or -1. */
int cli_sgemm_parse(const char *v);
/* Write text to `path` atomically, or to stdout when NULL or "-". */
int cli_write_text(const char *path, const char *text);

#endif /* TESSEL_CLI_H */
