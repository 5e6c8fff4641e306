/*
 * cli.h: the `tessel` command line. One file per command (cmd_*.c), each
 * exporting a CliCommand; main.c lists them in one table, so adding a
 * command is one row there plus its file. options.c parses the options
 * every command shares and checks that a command accepts each one.
 *
 * tools/ is a client of the public API (tessel.h) and of nothing else.
 * Only tools/ prints and exits. Exit status: 0 success, 1 a failure while
 * running, 2 bad usage or bad input.
 */
#ifndef TESSEL_CLI_H
#define TESSEL_CLI_H

#include "tessel.h"

#include <stdio.h>

enum {
    CLI_OK = 0,
    CLI_FAIL = 1,   /* a failure while running */
    CLI_USAGE = 2,  /* bad usage or bad input */
};

/* Options, as bits a command sets in CliCommand.accepts. */
enum {
    OPT_INPUT = 1u << 0,          /* --input INDEX_OR_NAME=FILE.npy (repeatable) */
    OPT_RANDOM = 1u << 1,         /* --random-inputs SEED */
    OPT_OUTPUT_DIR = 1u << 2,     /* --output-dir DIR */
    OPT_REFERENCE = 1u << 3,      /* --reference */
    OPT_PARTITIONS = 1u << 4,     /* --num-partitions N */
    OPT_REPLICAS = 1u << 5,       /* --num-replicas R */
    OPT_HOSTS = 1u << 6,          /* --hosts H */
    OPT_LOCAL_DEVICES = 1u << 7,  /* --local-devices L */
    OPT_STEPS = 1u << 8,          /* --steps K */
    OPT_STATS = 1u << 9,          /* --stats */
    OPT_FORMAT = 1u << 10,        /* --format text|json|dot */
    OPT_OUT = 1u << 11,           /* -o FILE */
    OPT_LIMIT = 1u << 12,         /* --limit NAME=VALUE (repeatable) */
    OPT_PRINT = 1u << 13,         /* --print (check: print the parsed module) */
    OPT_INFEED = 1u << 14,        /* --infeed FILE.npy (repeatable, in order) */
    OPT_NO_VERIFY = 1u << 15,     /* --no-verify (skip the verifier after compile passes) */
    OPT_SPMD = 1u << 16,          /* --spmd (replay an SPMD program as it is) */
    OPT_PER_DEVICE = 1u << 17,    /* --per-device (replays: each device its own random inputs) */
    OPT_OUTPUT_DEVICE = 1u << 18, /* --output-device D (replays: device D's outputs alone) */
    OPT_TIMEOUT = 1u << 19,       /* --timeout SECONDS (run: the whole run's bound) */
    OPT_HEARTBEAT = 1u << 20,     /* --heartbeat SECONDS (run under mpirun: silent rank bound) */
    OPT_CHECKPOINT_EVERY = 1u << 21, /* --checkpoint-every M (run: steps between checkpoints) */
    OPT_CHECKPOINT_DIR = 1u << 22,   /* --checkpoint-dir DIR */
    OPT_RESUME = 1u << 23,        /* --resume DIR (continue from its last checkpoint) */
};

/* Everything a command line said. Numbers are 0 when not given (the
 * module header or 1 then decides). */
typedef struct CliOptions {
    int npos;
    char **pos;              /* positional arguments (borrowed from argv) */
    int32_t ninputs;
    TsInput *inputs;         /* heap; keys point into a heap copy, see options.c */
    bool random;
    uint64_t seed;
    int32_t ninfeeds;
    const char **infeeds;    /* heap array; the paths are borrowed from argv */
    const char *output_dir;
    bool reference;
    int64_t num_partitions, num_replicas, hosts, local_devices, steps;
    bool stats;
    bool print;              /* --print */
    bool no_verify;          /* --no-verify */
    bool spmd, per_device;   /* --spmd, --per-device */
    int64_t output_device;   /* --output-device D (given: OPT_OUTPUT_DEVICE) */
    const char *format;
    const char *out;
    TsLimits limits;         /* what a model may declare: ts_limits_default(), then --limit */
    double timeout;          /* --timeout SECONDS (0: none) */
    double heartbeat;        /* --heartbeat SECONDS (0: the library's 60) */
    int64_t checkpoint_every;/* --checkpoint-every M (0: no checkpoints) */
    const char *checkpoint_dir, *resume; /* --checkpoint-dir DIR, --resume DIR */
    unsigned given;          /* OPT_* bits of the options present */
} CliOptions;

typedef struct CliCommand {
    const char *name;
    const char *summary;     /* one line for `tessel --help` */
    const char *help;        /* the whole text of `tessel NAME --help` */
    unsigned accepts;        /* OPT_* bits */
    int (*run)(const CliOptions *o);
} CliCommand;

/* The commands (one file each). */
extern const CliCommand cli_cmd_check;
extern const CliCommand cli_cmd_run;
extern const CliCommand cli_cmd_devices;
extern const CliCommand cli_cmd_compile;
extern const CliCommand cli_cmd_plan;

/* checkpoint.c: --checkpoint-every, --checkpoint-dir, --resume */

typedef struct CliCkpt {
    const char *dir;         /* where checkpoints go; NULL: none are written */
    int64_t every, steps;    /* M and K */
    int64_t done;            /* steps done so far (from --resume, then per chunk) */
    char digest[65];         /* the plan's SHA-256 */
    int32_t nalias;
    int32_t *leaf, *param;   /* alias k: output leaf -> parameter */
    char last[4096];         /* the newest checkpoint directory ("" before one) */
    char **paths;            /* [nalias]: its files the next chunk reads (heap) */
    int32_t ninputs;
    TsInput *inputs;         /* the next chunk's inputs (keys heap) */
    int32_t nwritten;        /* checkpoints written, and their time */
    double write_seconds;
} CliCkpt;

/* Check the options against the plan, find the aliases and the digest,
 * and with --resume the last complete checkpoint of this plan. CLI_OK or
 * the exit status after printing why. */
int cli_ckpt_setup(const CliOptions *o, const TsPlan *p, CliCkpt *c);
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
/* Seconds on a monotonic clock, for --stats. */
double cli_now(void);
/* Write text to `path` atomically, or to stdout when NULL or "-". */
int cli_write_text(const char *path, const char *text);

#endif /* TESSEL_CLI_H */
