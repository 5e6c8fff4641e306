/*
 * cmd_run.c: `tessel run MODEL.hlo|PLAN [--reference] [inputs] [--steps K]
 * [--output-dir DIR]`: bind inputs, execute (on one device with
 * --reference, else partitioned over N x R devices: threads of this
 * process, or one MPI rank per host under mpirun), and write
 * DIR/output_<i>.npy or print a summary per output. Partitioned runs read
 * only the shards of their own devices (runtime/shard_io.c). The work is in
 * runtime/; this file parses, checks the combination of options, handles
 * SIGINT/SIGTERM, times the phases and prints; the work is the library's
 * (tessel.h: ts_plan_run, ts_plan_run_mpi, ts_run_reference).
 *
 * Signals: SIGINT or SIGTERM end the run with status 128+signal and no
 * output file. Before outputs are written nothing is on disk, so the
 * handler ends the process at once (_exit: the executor cannot be
 * interrupted mid-kernel, and no state needs saving). While outputs are
 * written (temporaries, then renames) the handler only records the signal;
 * the writer finishes, then removes every output and exits.
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char HELP[] =
    "Usage: tessel run MODEL.hlo|PLAN [--reference] [--input INDEX_OR_NAME=FILE.npy ...]\n"
    "                  [--random-inputs SEED] [--output-dir DIR] [--stats]\n"
    "                  [--num-partitions N] [--num-replicas R] [--hosts H]\n"
    "                  [--local-devices L] [--steps K] [--infeed FILE.npy ...]\n"
    "                  [--spmd [--per-device] [--output-device D]]\n"
    "\n"
    "Execute a module (or a plan from `tessel compile`). The module is\n"
    "partitioned for N partitions x R replicas and run on N*R devices, each a\n"
    "thread of this process (under `mpirun -np H`, H processes). With\n"
    "--reference the unpartitioned module runs on one device: the oracle that\n"
    "partitioned runs are checked against; both give the same results.\n"
    "\n"
    "Inputs (every leaf of every entry parameter must be bound):\n"
    "  --input KEY=FILE.npy    bind a .npy file; KEY is the parameter's index\n"
    "                          (0), its instruction name (x), or for a tuple\n"
    "                          parameter INDEX.LEAF / NAME.LEAF with the leaf\n"
    "                          counted depth first (0.1). Repeatable.\n"
    "  --random-inputs SEED    fill every unbound leaf with tessel's\n"
    "                          deterministic random values (docs/cli.md)\n"
    "  --infeed FILE.npy       a value for infeed / recv from the host, one\n"
    "                          file per array leaf, taken in order;\n"
    "                          repeatable (--reference or one device)\n"
    "Outputs:\n"
    "  --output-dir DIR        write DIR/output_<i>.npy, one per leaf of the\n"
    "                          result, depth first (DIR is created if missing;\n"
    "                          a failed run leaves no output file). Without it,\n"
    "                          print min/max/mean and the first values of each.\n"
    "                          Values the program gives the host (outfeed,\n"
    "                          send to host) go to DIR/outfeed_<i>.npy.\n"
    "Execution:\n"
    "  --reference             run the unpartitioned module on one device\n"
    "  --num-partitions N      partitions (default: the module's num_partitions, else 1)\n"
    "  --num-replicas R        replicas (default: the module's replica_count, else 1)\n"
    "  --hosts H, --local-devices L\n"
    "                          hosts and devices per host; without mpirun one\n"
    "                          process runs every device (H = 1)\n"
    "  --steps K               run the program K times; outputs the module\n"
    "                          aliases to parameters (input_output_alias)\n"
    "                          are the next step's parameters (default 1)\n"
    "  --limit NAME=VALUE      refuse models declaring more: NAME elements (per\n"
    "                          array, default 2^34), rank (64), tuple (65536),\n"
    "                          depth (64: nesting of tuples and braces, and of\n"
    "                          calls), name (4096 bytes), instructions (2^22);\n"
    "                          repeatable (docs/cli.md, Limits)\n"
    "  --spmd                  the module is already an SPMD program (XLA's dump\n"
    "                          after spmd-partitioning, or a plan's text): replay\n"
    "                          it as it is on N*R devices, each with its own\n"
    "                          inputs (--input KEY@D=FILE binds device D only)\n"
    "                          and outputs (DIR/output_<i>.device_<d>.npy)\n"
    "  --per-device            with --spmd and --random-inputs: each device\n"
    "                          draws its own values (docs/cli.md); without it\n"
    "                          every device gets the same\n"
    "  --output-device D       with --spmd: only device D's outputs, written as\n"
    "                          DIR/output_<i>.npy\n"
    "  --no-verify             skip the verifier after the compile passes\n"
    "                          that rewrite the module (about 5% of compile time)\n"
    "  --stats                 print the time of each phase, of collectives,\n"
    "                          the bytes of input read and the device binding\n"
    "                          (to stderr)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad\n"
    "input (syntax or verifier error, bad or missing .npy, unbound parameter);\n"
    "130 / 143 interrupted by SIGINT / SIGTERM (no output file is left).\n";

/* ---- signals ---- */

static volatile sig_atomic_t g_writing; /* outputs are being written: defer */
static volatile sig_atomic_t g_signal;  /* the signal received while writing */

static void on_signal(int sig)
{
    if (g_writing) {
        g_signal = sig;
        return;
    }
    static const char m_int[] = "tessel: interrupted (SIGINT); no output written\n";
    static const char m_term[] = "tessel: terminated (SIGTERM); no output written\n";
    ssize_t w = sig == SIGINT ? write(2, m_int, sizeof m_int - 1) : write(2, m_term, sizeof m_term - 1);
    (void)w;
    _exit(128 + sig);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- outputs ---- */

/* The output directory, held (locked) from before the run until the
 * process ends, so that two runs into one directory cannot mix: the second
 * fails at once. NULL without --output-dir (and on ranks other than 0). */
static TsOutputDir *g_outdir;

/* Hold --output-dir for this run (ts_output_dir_open); CLI_OK or the
 * status of the error, printed. */
static int hold_output_dir(const CliOptions *o)
{
    if (!o->output_dir)
        return CLI_OK;
    TsDiag d = {0};
    TsStatus st = ts_output_dir_open(o->output_dir, &g_outdir, &d);
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

static void release_output_dir(void)
{
    ts_output_dir_close(g_outdir);
    g_outdir = NULL;
}

/* Write the outputs (or print them) with signals deferred; a signal that
 * arrived meanwhile removes them all and ends the process. */
static int write_or_print(const CliOptions *o, const TsOutputs *out)
{
    if (!o->output_dir) {
        char *s = ts_outputs_summary(out);
        if (!s) {
            fputs("tessel: error: out of memory\n", stderr);
            return CLI_FAIL;
        }
        fputs(s, stdout);
        ts_free(s);
        return CLI_OK;
    }
    TsDiag d = {0};
    g_writing = 1;
    TsStatus st = g_outdir ? ts_outputs_write_to(out, g_outdir, &d) : ts_outputs_write(out, o->output_dir, &d);
    g_writing = 0;
    if (g_signal) {
        ts_outputs_remove(out, o->output_dir);
        release_output_dir(); /* removes the directory if this run made it */
        on_signal(g_signal);
    }
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

static TsRunOptions run_options(const CliOptions *o, double load_seconds)
{
    return (TsRunOptions){.ninputs = o->ninputs, .inputs = o->inputs, .random = o->random, .seed = o->seed,
                          .steps = o->steps, .ninfeeds = o->ninfeeds, .infeeds = o->infeeds,
                          .stats = o->stats, .load_seconds = load_seconds, .per_device = o->per_device,
                          .one_device = (o->given & OPT_OUTPUT_DEVICE) != 0, .output_device = o->output_device};
}

/* After a run in this process: the error, or the stats, the outputs
 * written or printed, the write time; `out` is freed. */
static int finish(const CliOptions *o, TsStatus st, TsOutputs *out, TsDiag *d)
{
    int rc = CLI_OK;
    if (st != TS_OK) {
        rc = cli_report(st, d);
    } else {
        if (o->stats)
            fputs(ts_outputs_stats(out), stderr);
        double t0 = cli_now();
        rc = write_or_print(o, out);
        if (o->stats && rc == CLI_OK)
            fprintf(stderr, "tessel: stats: write outputs %.3f ms\n", (cli_now() - t0) * 1e3);
    }
    ts_outputs_free(out);
    return rc;
}

/* ---- in this process ---- */

static int run_reference(const CliOptions *o, double t0)
{
    if (o->hosts > 1 || o->local_devices > 1)
        return cli_usage_error(&cli_cmd_run, "--reference runs on one device; --hosts and "
                               "--local-devices do not apply");
    TsModule *m = NULL;
    int rc = cli_load_model(o, o->pos[0], &m);
    if (rc == CLI_OK)
        rc = hold_output_dir(o);
    if (rc == CLI_OK && ts_module_is_plan(m))
        rc = cli_usage_error(&cli_cmd_run, "--reference needs the model, not a plan (a plan holds the "
                             "partitioned program)");
    if (rc == CLI_OK) {
        TsOutputs *out = NULL;
        TsDiag d = {0};
        TsRunOptions ro = run_options(o, cli_now() - t0);
        TsStatus st = ts_run_reference(m, &ro, &out, &d);
        rc = finish(o, st, out, &d);
    }
    ts_module_free(m);
    return rc;
}

/* --infeed feeds one executor: the reference or a run of one device. */
static int refuse_infeed(const char *why)
{
    return cli_usage_error(&cli_cmd_run, "--infeed feeds one device: run with --reference or "
                           "--num-partitions 1 --num-replicas 1 (%s)", why);
}

static int run_alone(const CliOptions *o, double t0)
{
    TsPlan *p = NULL;
    int rc = cli_open(o, o->pos[0], &p);
    if (rc == CLI_OK)
        rc = hold_output_dir(o);
    if (rc != CLI_OK) {
        ts_plan_free(p);
        return rc;
    }
    int64_t ndev = ts_plan_num_partitions(p) * ts_plan_num_replicas(p);
    int64_t hosts = o->hosts ? o->hosts : 1;
    if (o->ninfeeds && ndev != 1) {
        rc = refuse_infeed("each of the devices would consume the feed");
    } else if (hosts != 1 || (o->local_devices && o->local_devices != ndev)) {
        rc = cli_usage_error(&cli_cmd_run, "without mpirun one process runs all %lld devices: --hosts 1 "
                             "--local-devices %lld (run under `mpirun -np H` for H hosts)",
                             (long long)ndev, (long long)ndev);
    } else {
        TsOutputs *out = NULL;
        TsDiag d = {0};
        TsRunOptions ro = run_options(o, cli_now() - t0);
        TsStatus st = ts_plan_run(p, &ro, &out, &d);
        rc = finish(o, st, out, &d);
    }
    ts_plan_free(p);
    return rc;
}

/* ---- under mpirun: this process is one host ---- */

/* The library calls this on a failing rank before the others learn of
 * it: the message must be out before mpirun may end this process. ctx is
 * a bool set once this rank has said its own error. */
static void say_error(void *ctx, const TsDiag *d)
{
    *(bool *)ctx = true;
    cli_print_diag(d);
}

/* Before the plan exists: every rank learns whether any failed to load or
 * compile (all stop, the failing rank says why first). -1 when all are
 * fine, else the exit status (the failing rank's, on every rank). */
static int agree_loaded(TsMpiWorld *w, int rc)
{
    int worst = 0;
    int failed = ts_mpi_agree(w, rc == CLI_OK, rc, &worst);
    if (failed < 0)
        return -1;
    if (rc == CLI_OK && ts_mpi_rank(w) == 0)
        fprintf(stderr, "tessel: error: rank %d failed before running; every rank stops\n", failed);
    return worst ? worst : CLI_FAIL;
}

/* One rank of `mpirun -np H tessel run`: host `rank` runs devices
 * [rank*L, (rank+1)*L) of the plan (ts_plan_run_mpi says how no rank ever
 * waits for a failed one); MPI ends before rank 0 writes, so a failure of
 * any rank at any MPI call leaves no output. */
static int run_mpi(const CliOptions *o, double t0)
{
    if (o->ninfeeds)
        return refuse_infeed("under mpirun every host would read the feed");
    TsMpiWorld *w = NULL;
    TsDiag d = {0};
    TsStatus st = ts_mpi_init(&w, &d);
    if (st != TS_OK) {
        /* Without MPI (MPI_Init_thread failed) this process just exits
         * non-zero, which makes mpirun end the job; with it, abort. */
        int rc = cli_report(st, &d);
        if (w)
            ts_mpi_abort(w, NULL);
        return rc;
    }
    bool said = false; /* this rank's own error is out (say_error) */
    ts_mpi_on_error(w, say_error, &said);
    int rank = ts_mpi_rank(w), size = ts_mpi_size(w);
    t0 = cli_now(); /* phases start after MPI_Init */
    TsPlan *p = NULL;
    TsCompileOptions co = cli_compile_options(o);
    co.hosts = co.local_devices = 0;
    st = ts_plan_open(o->pos[0], &co, &p, &d);
    int rc = CLI_OK;
    if (st == TS_OK && !ts_plan_from_file(p)) {
        /* A model compiled here: its layout is mpirun's unless --hosts says */
        int64_t hosts = o->hosts ? o->hosts : size;
        if (hosts != size) {
            fprintf(stderr, "tessel: error: rank %d: --hosts asks for %lld hosts, but mpirun started %d\n", rank,
                    (long long)hosts, size);
            rc = CLI_USAGE;
        } else {
            st = ts_plan_set_layout(p, hosts, o->local_devices, &d);
        }
    } else if (st == TS_OK && (o->hosts || o->local_devices)) {
        st = ts_plan_set_layout(p, o->hosts ? o->hosts : ts_plan_hosts(p), o->local_devices, &d);
    }
    if (st != TS_OK) {
        cli_print_ranked(&d, rank);
        rc = cli_exit_status(st);
        ts_diag_clear(&d);
    }
    /* Rank 0 writes the outputs: it holds the directory for the run, and
     * a directory another run holds stops every rank before running. */
    if (rc == CLI_OK && rank == 0 && o->output_dir && ts_output_dir_open(o->output_dir, &g_outdir, &d) != TS_OK) {
        cli_print_ranked(&d, rank);
        rc = cli_exit_status(d.status);
        ts_diag_clear(&d);
    }
    int stop = agree_loaded(w, rc);
    if (stop >= 0) {
        ts_plan_free(p);
        ts_mpi_finalize(w, false, &d);
        ts_diag_clear(&d);
        return stop;
    }
    TsRunOptions ro = run_options(o, cli_now() - t0);
    ro.on_error = say_error;
    ro.on_error_ctx = &said;
    TsOutputs *out = NULL;
    st = ts_plan_run_mpi(p, ts_mpi_comm(w), &ro, &out, &d);
    /* The failing rank said its error (say_error); the others return one
     * naming that rank, printed by rank 0 only. */
    if (st != TS_OK) {
        rc = cli_exit_status(st);
        if (rank == 0 && !said)
            cli_print_diag(&d);
        ts_diag_clear(&d);
    }
    TsStatus fin = ts_mpi_finalize(w, st == TS_OK, &d);
    if (st == TS_OK && fin != TS_OK) {
        /* As above: another rank's failure is said once, by rank 0. */
        if (rank == 0 && !said)
            cli_print_diag(&d);
        rc = cli_exit_status(fin);
    }
    ts_diag_clear(&d);
    if (st == TS_OK && fin == TS_OK && rank == 0) {
        if (o->stats)
            fputs(ts_outputs_stats(out), stderr);
        double t1 = cli_now();
        rc = write_or_print(o, out);
        if (o->stats && rc == CLI_OK) {
            fprintf(stderr, "tessel: stats: %-14s %.3f ms (rank 0 alone, after the others finished)\n",
                    "write outputs", (cli_now() - t1) * 1e3);
            /* Every rank makes the same calls: the count a failure-injection
             * walk (TESSEL_FAIL_MPI_AFTER) must cover. */
            fprintf(stderr, "tessel: stats: %-14s %ld on rank 0\n", "MPI calls", ts_mpi_calls());
        }
    }
    ts_outputs_free(out);
    ts_plan_free(p);
    return rc;
}

static int run_run(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_run, o->npos ? "run takes one MODEL.hlo or PLAN"
                                                     : "missing MODEL.hlo");
    if (o->spmd && o->reference)
        return cli_usage_error(&cli_cmd_run, "--spmd replays the program on its devices; --reference runs a model "
                               "on one device: choose one");
    if (!o->spmd && (o->given & (OPT_PER_DEVICE | OPT_OUTPUT_DEVICE)))
        return cli_usage_error(&cli_cmd_run, "%s applies to replays: add --spmd",
                               o->given & OPT_PER_DEVICE ? "--per-device" : "--output-device");
    for (int32_t i = 0; !o->spmd && i < o->ninputs; i++)
        if (strchr(o->inputs[i].key, '@'))
            return cli_usage_error(&cli_cmd_run, "--input %s: KEY@DEVICE binds one device of a replay: add --spmd",
                                   o->inputs[i].key);
    install_signals();
    double t0 = cli_now();
    int rc = o->reference ? run_reference(o, t0) : ts_mpi_launched() ? run_mpi(o, t0) : run_alone(o, t0);
    release_output_dir();
    /* Release the cached topology and allocators (nothing leaks). */
    ts_shutdown();
    return rc;
}

const CliCommand cli_cmd_run = {
    .name = "run",
    .summary = "execute a module (--reference: unpartitioned, on one device)",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_INPUT | OPT_RANDOM | OPT_OUTPUT_DIR | OPT_REFERENCE | OPT_PARTITIONS |
               OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_STEPS | OPT_STATS | OPT_INFEED | OPT_NO_VERIFY |
               OPT_SPMD | OPT_PER_DEVICE | OPT_OUTPUT_DEVICE,
    .run = run_run,
};
