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
 * the writer gives up before its first rename (the directory as it was:
 * an earlier run's outputs stay whole) and the process exits; a signal
 * during the renames themselves leaves the new set complete and kept.
 */
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char HELP[] =
    "Usage: tessel run MODEL.hlo|PLAN [--reference] [--input INDEX_OR_NAME=FILE.npy ...]\n"
    "                  [--random-inputs SEED] [--init-state zeros]\n"
    "                  [--output-dir DIR] [--stats[=ops]]\n"
    "                  [--num-partitions N] [--num-replicas R] [--hosts H]\n"
    "                  [--local-devices L] [--steps K] [--infeed FILE.npy ...]\n"
    "                  [--spmd [--per-device] [--output-device D]]\n"
    "                  [--watch NAME] [--progress] [--dump-dir DIR]\n"
    "                  [--timeout S] [--heartbeat S] [--checkpoint-every M\n"
    "                  --checkpoint-dir DIR] [--resume DIR] [--link-gbps G]\n"
    "                  [--auto-shard [--mesh SPEC] [--profile FILE] [--host-cores C]]\n"
    "                  [--sgemm openblas|blis|onednn|avx512|amx-bf16x3|probe]\n"
    "\n"
    "Execute a module (or a plan from `tessel compile`). The module is\n"
    "partitioned for N partitions x R replicas and run on N*R devices, each a\n"
    "thread of this process (under `mpirun -np H`, H processes). With\n"
    "--reference the unpartitioned module runs on one device: the oracle that\n"
    "partitioned runs are checked against; both give the same results.\n"
    "\n"
    "Inputs (every leaf of every entry parameter must be bound):\n"
    "  --input KEY=FILE.npy    bind a .npy file; KEY is the parameter's index\n"
    "                          (0), its instruction name (x.1), the name JAX\n"
    "                          records (x, params['w1']), or for a tuple\n"
    "                          parameter INDEX.LEAF / NAME.LEAF with the leaf\n"
    "                          counted depth first (0.1). Repeatable. A wrong\n"
    "                          name lists the names that work (docs/cli.md,\n"
    "                          \"Input names\").\n"
    "  --random-inputs SEED    fill every unbound leaf with tessel's\n"
    "                          deterministic random values (docs/cli.md)\n"
    "  --init-state zeros      the optimizer state of a training step (`tessel\n"
    "                          grad --adam`'s m_P, v_P, t) starts at zero, as\n"
    "                          optimizers start, unless bound by --input\n"
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
    "                          repeatable (docs/cli.md, Limits).\n"
    "                          Run limits: trips (of every while loop, default\n"
    "                          unbounded: exit 1 at the loop), memory (bytes,\n"
    "                          K/M/G: the plan's estimated peak on this process,\n"
    "                          default the available memory: exit 2; a model\n"
    "                          is first compiled to fit it, reordered and with\n"
    "                          values recomputed, docs/plan.md)\n"
    "  --timeout SECONDS       end the run (every rank) after SECONDS: exit 1, no\n"
    "                          output (default: no timeout)\n"
    "  --heartbeat SECONDS     under mpirun: a rank not heard from for SECONDS\n"
    "                          ends the job, named (default 60, at least 1)\n"
    "  --checkpoint-every M, --checkpoint-dir DIR\n"
    "                          with --steps K: write the state the steps carry\n"
    "                          (input_output_alias) to DIR/step-S every M steps\n"
    "                          (S counts the run's steps; a line says each one)\n"
    "  --resume DIR            continue from DIR's last complete checkpoint;\n"
    "                          bit-identical to an uninterrupted run\n"
    "                          (with the same --sgemm library)\n"
    "  --sgemm LIB             the library of f32 dots: openblas, blis, onednn,\n"
    "                          avx512 (tessel's own kernel, one thread a dot),\n"
    "                          or probe (default; TESSEL_SGEMM): time the ones\n"
    "                          present at the first dot, keep the fastest\n"
    "                          (--stats says). A fixed one repeats the same bits\n"
    "                          in every process. amx-bf16x3: Intel AMX's bf16\n"
    "                          tiles, three bf16 products a dot (within a few\n"
    "                          f32 roundings of f32's result, not its bits);\n"
    "                          never chosen by the probe\n"
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
    "  --auto-shard, --mesh SPEC, --profile FILE, --host-cores C\n"
    "                          shardings chosen for you, as for `tessel compile`\n"
    CLI_HELP_DONATE
    "  --link-gbps G           the links between hosts, in Gb/s, for the\n"
    "                          compile's cost model (as `tessel compile`)\n"
    "  --sign-key FILE         the plan must be signed with the key in FILE\n"
    "                          (`tessel compile --sign-key`); a signed plan\n"
    "                          is refused without its key\n"
    "  --no-verify             skip the verifier after the compile passes\n"
    "                          that rewrite the module (about 5% of compile time)\n"
    "  --dump-dir DIR          write the module after each compile pass into DIR\n"
    "                          (as `tessel compile --dump-dir`)\n"
    "  --watch NAME            show output NAME (a leaf number, or the instruction\n"
    "                          that is the result or a root tuple operand; one\n"
    "                          element, a loss) on the progress line, with the\n"
    "                          step it is the value of; under mpirun (no rank\n"
    "                          sees the terminal) rank 0 prints it every step\n"
    "  --progress              a progress line per step on stderr also when it is\n"
    "                          not a terminal (on a terminal runs of several steps\n"
    "                          or of more than a second show one line, redrawn)\n"
    "  --stats                 print the time of each phase, of collectives,\n"
    "                          the bytes of input read and the device binding\n"
    "                          (to stderr); with --watch NAME, NAME after every\n"
    "                          step (a training step's loss)\n"
    "  --stats=ops             --stats, and per device (rank 0's under mpirun)\n"
    "                          the 20 instructions that took the most time over\n"
    "                          the steps after the first: name, opcode, shape,\n"
    "                          calls, total ms, share of the step; a\n"
    "                          collective's wait and transfer\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad\n"
    "input (syntax or verifier error, bad or missing .npy, unbound parameter);\n"
    "130 / 143 interrupted by SIGINT / SIGTERM (no output of the run is left:\n"
    "the output directory stays as it was, but for a signal that comes as the\n"
    "run's complete outputs are renamed into place, which keeps them).\n";

/* ---- signals ---- */

static volatile sig_atomic_t g_writing; /* outputs are being written: defer */
static volatile sig_atomic_t g_signal;  /* the signal received while writing */

static char g_timeout_msg[160]; /* what --timeout says when it ends the run */

static void on_signal(int sig)
{
    if (g_writing) {
        g_signal = sig;
        return;
    }
    static const char m_int[] = "tessel: interrupted (SIGINT); no output written\n";
    static const char m_term[] = "tessel: terminated (SIGTERM); no output written\n";
    const char *m = sig == SIGINT ? m_int : sig == SIGTERM ? m_term : g_timeout_msg;
    ssize_t w = write(2, m, strlen(m));
    (void)w;
    /* SIGALRM stands for --timeout: a failure while running. */
    _exit(sig == SIGALRM ? CLI_FAIL : 128 + sig);
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

/* ---- progress ---- */

/* The progress line of a run: on a terminal (stderr) one line redrawn in
 * place when the run has several steps or lasts more than a second (a
 * ticker thread redraws it while a step runs), ended by a summary line;
 * with --progress off a terminal, one line per step. The library calls
 * on_step from the thread running device 0; everything here is under mu. */
typedef struct Progress {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t ticker;
    bool ticking, stop;
    bool tty, lines;
    bool stats;              /* --stats with --watch: NAME after every step */
    char watch[80];          /* what the line calls the watched output */
    double start, step_start;
    int64_t step, steps;     /* steps done in this chunk, of the chunk's */
    int64_t base, total;     /* steps done before this chunk (checkpoints, --resume), of the run's K */
    int64_t nrun;            /* steps this process ran, over every chunk (the summary's mean) */
    double tsum;             /* and their seconds */
    double last;             /* the last step's seconds */
    bool has_w;
    double w;
    bool drawn;              /* a line is on the terminal */
    bool started;            /* a run is under way (its first chunk has begun) */
    double delay;            /* a run of one step shows its line after this long */
} Progress;

static Progress g_progress = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* "12.3 ms" / "1.24 s" */
static void fmt_seconds(char *buf, size_t n, double s)
{
    if (s < 0.01)
        snprintf(buf, n, "%.3f ms", s * 1e3);
    else if (s < 1)
        snprintf(buf, n, "%.1f ms", s * 1e3);
    else
        snprintf(buf, n, "%.2f s", s);
}

/* The line as it stands, drawn over the previous one (under mu): the
 * last step done, counted over the whole run (checkpointed chunks and
 * resumes included), with that step's watched value. */
static void progress_draw(Progress *p, double t)
{
    char a[32], b[32], w[256] = "";
    if (p->has_w && p->watch[0])
        snprintf(w, sizeof w, ", %s %.6g", p->watch, p->w);
    if (p->step < p->steps) {
        fmt_seconds(a, sizeof a, t - p->step_start);
        fmt_seconds(b, sizeof b, p->last);
        if (p->nrun == 0) /* nothing done yet: the first step is running */
            fprintf(stderr, "\r\033[Ktessel: step %lld of %lld, running %s", (long long)(p->base + 1),
                    (long long)p->total, a);
        else
            fprintf(stderr, "\r\033[Ktessel: step %lld of %lld, %s a step%s", (long long)(p->base + p->step),
                    (long long)p->total, b, w);
    }
    fflush(stderr);
    p->drawn = true;
}

static void *progress_ticker(void *arg)
{
    Progress *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        double t = cli_now();
        if (!p->stop && t - p->start > p->delay && p->step < p->steps)
            progress_draw(p, t);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void on_step(void *ctx, const TsStepInfo *s)
{
    Progress *p = ctx;
    pthread_mutex_lock(&p->mu);
    double t = cli_now();
    p->step = s->step;
    p->steps = s->steps;
    p->last = s->seconds;
    p->nrun++;
    p->tsum += s->seconds;
    p->step_start = t;
    p->has_w = s->has_watched;
    p->w = s->watched;
    long long g = (long long)(p->base + s->step), k = (long long)p->total; /* the run's step, of K */
    if (p->stats && s->has_watched && p->watch[0]) {
        /* A training step's loss, step by step (to 9 digits: a falling
         * loss is seen falling), above the redrawn line on a terminal. */
        fprintf(stderr, "%stessel: stats: step %lld of %lld: %s %.9g\n", p->drawn ? "\r\033[K" : "", g, k,
                p->watch, s->watched);
        p->drawn = false;
    }
    if (p->lines) {
        char a[32], w[256] = "";
        fmt_seconds(a, sizeof a, s->seconds);
        if (s->has_watched && p->watch[0])
            snprintf(w, sizeof w, ", %s %.6g", p->watch, s->watched);
        fprintf(stderr, "tessel: step %lld of %lld: %s%s\n", g, k, a, w);
    } else if (p->tty && (p->total > 1 || t - p->start > p->delay) && s->step < s->steps) {
        progress_draw(p, t);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Set up before a run of the steps base+1 .. base+ro->steps of the run's
 * `total` (speak: this process prints, rank 0 under MPI; mpi: under
 * mpirun, whose ranks never see the terminal: --watch prints a line per
 * step there, as --progress does). A checkpointed run calls this per
 * chunk; the counters and the line go on across chunks. */
static void progress_start(const CliOptions *o, bool speak, bool mpi, TsRunOptions *ro, int64_t base, int64_t total)
{
    Progress *p = &g_progress;
    bool first = !p->started;
    p->started = true;
    p->stop = false;
    p->step = 0;
    p->base = base;
    p->total = total > 1 ? total : 1;
    p->steps = ro->steps > 1 ? ro->steps : 1;
    const char *term = getenv("TERM");
    p->tty = speak && isatty(2) && !(term && strcmp(term, "dumb") == 0);
    p->lines = speak && !p->tty && (o->progress || (mpi && o->watch && !o->stats));
    p->stats = speak && o->stats && o->watch;
    if (o->watch)
        snprintf(p->watch, sizeof p->watch, "%s%.64s",
                 strspn(o->watch, "0123456789") == strlen(o->watch) ? "output " : "", o->watch);
    p->step_start = cli_now();
    if (first) {
        p->start = p->step_start;
        p->drawn = p->has_w = false;
        p->nrun = 0;
        p->tsum = 0;
    }
    /* TESSEL_PROGRESS_DELAY (seconds, default 1): when a long step's line
     * appears (docs/cli.md; the tests shorten it). */
    const char *dl = getenv("TESSEL_PROGRESS_DELAY");
    char *end = NULL;
    p->delay = dl ? strtod(dl, &end) : 1.0;
    if (!dl || end == dl || *end || p->delay < 0)
        p->delay = 1.0;
    if (!p->tty && !p->lines && !p->stats)
        return;
    ro->on_step = on_step;
    ro->on_step_ctx = p;
    if (p->tty)
        p->ticking = pthread_create(&p->ticker, NULL, progress_ticker, p) == 0;
}

/* A line of its own (a checkpoint written, a resume) on the speaking
 * rank, between chunks: over the redrawn line on a terminal, which the
 * next step draws again below it. */
static void progress_say(bool speak, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress_say(bool speak, const char *fmt, ...)
{
    if (!speak)
        return;
    Progress *p = &g_progress;
    pthread_mutex_lock(&p->mu);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cli_say(p->drawn ? "\r\033[Ktessel: " : "tessel: ", "%s", line);
    p->drawn = false;
    pthread_mutex_unlock(&p->mu);
}

/* After a chunk: the ticker stopped; at the run's end (the last chunk,
 * or a failure) on a terminal the line becomes the summary (steps, time
 * per step, the last watched value). */
static void progress_end(bool last)
{
    Progress *p = &g_progress;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->ticking)
        pthread_join(p->ticker, NULL);
    p->ticking = false;
    if (p->drawn && last) {
        char a[32], w[256] = "";
        fmt_seconds(a, sizeof a, p->nrun ? p->tsum / (double)p->nrun : 0);
        if (p->has_w && p->watch[0])
            snprintf(w, sizeof w, ", %s %.6g", p->watch, p->w);
        fprintf(stderr, "\r\033[Ktessel: %lld of %lld steps, %s a step%s\n", (long long)(p->base + p->step),
                (long long)p->total, a, w);
        p->drawn = false;
    }
    if (last)
        p->started = false;
}

/* ---- --timeout ---- */

/* While MPI is up: the world the timeout ends (every rank at once). */
static TsMpiWorld *_Atomic g_world;

/* A thread (not a signal: ending an MPI job is no async-signal-safe call)
 * sleeps until the deadline, then ends the run as SIGINT would, with exit
 * status 1: at once, or after the outputs being written are removed. */
static void *timeout_main(void *arg)
{
    double until = cli_now() + *(const double *)arg;
    for (double left; (left = until - cli_now()) > 0;) {
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    TsMpiWorld *w = atomic_load(&g_world);
    if (w)
        ts_mpi_abort(w, g_timeout_msg); /* every rank ends; never returns when MPI can */
    on_signal(SIGALRM);
    return NULL;
}

static void start_timeout(const CliOptions *o)
{
    static double seconds;
    if (o->timeout <= 0)
        return;
    seconds = o->timeout;
    snprintf(g_timeout_msg, sizeof g_timeout_msg,
             "tessel: error: the run took longer than --timeout %g s and was ended; no output written\n",
             o->timeout);
    pthread_t th;
    if (pthread_create(&th, NULL, timeout_main, &seconds) == 0)
        pthread_detach(th);
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

/* Under mpirun (TsRunOptions.on_agreed): rank 0 holds --output-dir once
 * the ranks agreed, so ranks that disagree neither create nor lock it; a
 * directory another run holds is rank 0's error at the agreement that
 * follows, and every rank stops before running. */
typedef struct HoldAgreed {
    const CliOptions *o;
    int rank;
} HoldAgreed;

static TsStatus hold_output_dir_agreed(void *ctx, TsDiag *d)
{
    const HoldAgreed *h = ctx;
    if (g_outdir || !h->o->output_dir || h->rank != 0)
        return TS_OK;
    return ts_output_dir_open(h->o->output_dir, &g_outdir, d);
}

static void release_output_dir(void)
{
    ts_output_dir_close(g_outdir);
    g_outdir = NULL;
}

/* ts_output_dir_on_cancel's question: a signal arrived while writing. */
static bool signalled(void *ctx)
{
    (void)ctx;
    return g_signal != 0;
}

/* Write the outputs (or print them) with signals deferred. A signal that
 * arrived before the write renamed anything cancels it there (signalled):
 * the directory stays as it was, an earlier run's outputs whole, and the
 * process ends. One that arrived during the renames finds the new set
 * complete: it is kept (removing it would leave neither set: the renames
 * replaced the earlier one's files), and the process ends saying so. */
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
    TsStatus st = g_outdir ? TS_OK : ts_output_dir_open(o->output_dir, &g_outdir, &d);
    ts_output_dir_on_cancel(g_outdir, signalled, NULL);
    g_writing = 1;
    if (st == TS_OK)
        st = ts_outputs_write_to(out, g_outdir, &d);
    g_writing = 0;
    if (g_signal == SIGALRM && st == TS_OK) /* --timeout as the run finished: it did */
        g_signal = 0;
    if (g_signal) {
        if (st == TS_OK) {
            static const char m[] = "tessel: %s while the outputs were renamed into place: they are complete "
                                    "(outputs.json); ended\n";
            fprintf(stderr, m, g_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
            release_output_dir();
            _exit(128 + g_signal);
        }
        /* A write that failed or was cancelled has undone its own files:
         * what the names lead to is an earlier run's set or, in a
         * directory replaced meanwhile, the user's files. */
        ts_diag_clear(&d);
        release_output_dir(); /* removes the directory if this run made it */
        on_signal(g_signal);
    }
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

static TsRunOptions run_options(const CliOptions *o, double load_seconds)
{
    return (TsRunOptions){.ninputs = o->ninputs, .inputs = o->inputs, .random = o->random, .seed = o->seed,
                          .zero_state = o->zero_state,
                          .steps = o->steps, .ninfeeds = o->ninfeeds, .infeeds = o->infeeds,
                          .stats = o->stats, .stats_ops = o->stats_ops, .load_seconds = load_seconds,
                          .per_device = o->per_device,
                          .one_device = (o->given & OPT_OUTPUT_DEVICE) != 0, .output_device = o->output_device,
                          .watch = o->watch, .limits = &o->limits, .heartbeat_seconds = o->heartbeat,
                          .tuning = o->tuning};
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

/* --stats: what the checkpoints cost. */
static void ckpt_stats(const CliOptions *o, const CliCkpt *ck)
{
    if (o->stats && ck->nwritten)
        fprintf(stderr, "tessel: stats: checkpoints: %d written, %.3f ms each\n", (int)ck->nwritten,
                ck->write_seconds * 1e3 / ck->nwritten);
}

/* The lines a checkpointed run says: where it resumed, each checkpoint. */
static void say_resumed(bool speak, const CliCkpt *ck)
{
    if (ck->final_step && ck->done)
        progress_say(speak, "step-%lld is the run's last checkpoint, kept: its outputs come from steps %lld to %lld "
                     "run again from %s", (long long)ck->final_step, (long long)ck->done + 1, (long long)ck->steps,
                     ck->last);
    else if (ck->final_step)
        progress_say(speak, "step-%lld is the run's last checkpoint, kept: its outputs come from the %lld steps run "
                     "again from the start (no checkpoint before it)", (long long)ck->final_step, (long long)ck->steps);
    else
        progress_say(speak, "resumed from %s (step %lld of %lld)", ck->last, (long long)ck->done,
                     (long long)ck->steps);
}

static void say_written(bool speak, const CliCkpt *ck)
{
    progress_say(speak, "checkpoint %s written (step %lld of %lld)", ck->last, (long long)ck->done,
                 (long long)ck->steps);
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
        progress_start(o, true, false, &ro, 0, ro.steps);
        TsStatus st = ts_run_reference(m, &ro, &out, &d);
        progress_end(true);
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
        /* One run of K steps, or chunks between checkpoints (checkpoint.c). */
        CliCkpt ck;
        TsOutputs *out = NULL;
        TsDiag d = {0};
        TsStatus st = TS_OK;
        rc = cli_ckpt_setup(o, p, &ck, true);
        if (rc == CLI_OK && (ck.done || ck.final_step))
            say_resumed(true, &ck);
        while (rc == CLI_OK) {
            TsRunOptions ro = run_options(o, cli_now() - t0);
            ro.steps = cli_ckpt_chunk(&ck);
            if ((rc = cli_ckpt_inputs(o, p, &ck, &ro)) != CLI_OK)
                break;
            progress_start(o, true, false, &ro, ck.done, ck.steps);
            st = ts_plan_run(p, &ro, &out, &d);
            progress_end(st != TS_OK || ck.done + ro.steps >= ck.steps);
            if (st != TS_OK)
                break;
            ck.done += ro.steps;
            if (cli_ckpt_due(&ck)) {
                if ((rc = cli_ckpt_write(&ck, out)) != CLI_OK)
                    break;
                say_written(true, &ck);
            }
            if (ck.done >= ck.steps)
                break;
            ts_outputs_free(out);
            out = NULL;
        }
        ckpt_stats(o, &ck);
        if (rc == CLI_OK)
            rc = finish(o, st, out, &d);
        else
            ts_outputs_free(out);
        cli_ckpt_free(&ck);
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
    TsStatus st = ts_mpi_init_ex(&o->tuning, &w, &d);
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
    atomic_store(&g_world, w);
    if ((st = ts_mpi_heartbeat(w, o->heartbeat, &d)) != TS_OK) {
        int rc = cli_report(st, &d);
        ts_mpi_abort(w, NULL);
        return rc;
    }
    int rank = ts_mpi_rank(w), size = ts_mpi_size(w);
    t0 = cli_now(); /* phases start after MPI_Init */
    TsPlan *p = NULL;
    TsCompileOptions co = cli_compile_options(o);
    co.hosts = co.local_devices = 0;
    if (rank != 0)
        co.on_warning = NULL; /* every rank compiles the same: rank 0 says its warnings once */
    st = ts_plan_open(o->pos[0], &co, &p, &d);
    int rc = CLI_OK;
    if (st == TS_OK && !ts_plan_from_file(p)) {
        /* A model compiled here: its layout is mpirun's unless --hosts says */
        int64_t hosts = o->hosts ? o->hosts : size;
        if (hosts != size) {
            fprintf(stderr, "tessel: error: rank %d: --hosts asks for %lld hosts, but mpirun started %d: run "
                    "`mpirun -np %lld`, or drop --hosts (mpirun's count is the default)\n", rank, (long long)hosts,
                    size, (long long)hosts);
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
    /* Rank 0 writes the outputs: it holds the directory for the run once
     * the ranks agreed (hold_output_dir_agreed), not before. */
    CliCkpt ck;
    memset(&ck, 0, sizeof ck);
    if (rc == CLI_OK)
        rc = cli_ckpt_setup(o, p, &ck, rank == 0);
    if (rc == CLI_OK && (ck.done || ck.final_step))
        say_resumed(rank == 0, &ck);
    int stop = agree_loaded(w, rc);
    if (stop >= 0) {
        cli_ckpt_free(&ck);
        ts_plan_free(p);
        atomic_store(&g_world, NULL);
        ts_mpi_finalize(w, false, &d);
        ts_diag_clear(&d);
        return stop;
    }
    TsOutputs *out = NULL;
    /* What every rank must share besides what the library compares. */
    char steps[32], every[32];
    snprintf(steps, sizeof steps, "%lld", (long long)o->steps);
    snprintf(every, sizeof every, "%lld", (long long)o->checkpoint_every);
    /* --output-dir as given: only rank 0 writes, so a rank naming another
     * directory (or none) would expect files that never come there. */
    const TsAgreeItem same[] = {{"--output-dir", o->output_dir ? o->output_dir : "not given"},
                                {"--steps of the whole run", steps},
                                {"--checkpoint-every", every},
                                {"--checkpoint-dir", o->checkpoint_dir ? o->checkpoint_dir : "none"},
                                {"--resume", o->resume ? o->resume : "none"}};
    HoldAgreed hold = {o, rank};
    /* One run, or chunks between checkpoints: rank 0 writes each, every
     * rank agrees it is there, then each reads its shards of it. */
    while (rc == CLI_OK) {
        TsRunOptions ro = run_options(o, cli_now() - t0);
        ro.on_error = say_error;
        ro.on_error_ctx = &said;
        ro.nagree = (int32_t)(sizeof same / sizeof same[0]);
        ro.agree = same;
        ro.on_agreed = hold_output_dir_agreed;
        ro.on_agreed_ctx = &hold;
        ro.steps = cli_ckpt_chunk(&ck);
        int irc = cli_ckpt_inputs(o, p, &ck, &ro);
        int failed = ts_mpi_agree(w, irc == CLI_OK, irc, &stop);
        if (failed >= 0) {
            rc = stop ? stop : CLI_FAIL;
            st = TS_ERUNTIME;
            break;
        }
        progress_start(o, rank == 0, true, &ro, ck.done, ck.steps);
        st = ts_plan_run_mpi(p, ts_mpi_comm(w), &ro, &out, &d);
        progress_end(st != TS_OK || ck.done + ro.steps >= ck.steps);
        /* The failing rank said its error (say_error); the others return one
         * naming that rank, printed by rank 0 only. */
        if (st != TS_OK) {
            rc = cli_exit_status(st);
            if (rank == 0 && !said)
                cli_print_diag(&d);
            ts_diag_clear(&d);
            break;
        }
        ck.done += ro.steps;
        if (cli_ckpt_due(&ck)) {
            int wrc = rank == 0 ? cli_ckpt_write(&ck, out) : cli_ckpt_mark(&ck);
            if ((failed = ts_mpi_agree(w, wrc == CLI_OK, wrc, &stop)) >= 0) {
                if (rank == 0 && wrc == CLI_OK)
                    fprintf(stderr, "tessel: error: rank %d failed writing a checkpoint; every rank stops\n", failed);
                rc = stop ? stop : CLI_FAIL;
                st = TS_ERUNTIME;
                break;
            }
            say_written(rank == 0, &ck);
        }
        if (ck.done >= ck.steps)
            break;
        ts_outputs_free(out);
        out = NULL;
    }
    if (rank == 0)
        ckpt_stats(o, &ck);
    cli_ckpt_free(&ck);
    atomic_store(&g_world, NULL); /* from here a timeout ends this process alone */
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
    if (o->dump_dir && o->reference)
        return cli_usage_error(&cli_cmd_run, "--dump-dir writes the compile passes; --reference compiles nothing");
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
    if (o->reference && (o->checkpoint_every || o->checkpoint_dir || o->resume))
        return cli_usage_error(&cli_cmd_run, "%s checkpoints a partitioned run; --reference runs the steps without "
                               "checkpoints", o->resume ? "--resume" : "--checkpoint-every/--checkpoint-dir");
    int crc = cli_ckpt_check_output(o);
    if (crc != CLI_OK)
        return crc;
    if (o->reference && o->stats_ops)
        return cli_usage_error(&cli_cmd_run, "--stats=ops times the devices of a partitioned run; --reference runs "
                               "unpartitioned: use --stats, or drop --reference");
    if (o->reference && (o->given & OPT_HEARTBEAT))
        return cli_usage_error(&cli_cmd_run, "--heartbeat watches the ranks of an mpirun job; --reference runs "
                               "alone");
    /* The environment's tuning, read once here (the library reads none). */
    CliOptions tuned = *o;
    int trc = cli_tuning_from_env(&tuned.tuning);
    if (trc != CLI_OK)
        return trc;
    if (o->given & OPT_SGEMM)
        tuned.tuning.sgemm = o->sgemm;
    o = &tuned;
    install_signals();
    start_timeout(o);
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
    .accepts = OPT_AUTO | OPT_DONATE | OPT_LIMIT | OPT_INPUT | OPT_RANDOM | OPT_OUTPUT_DIR | OPT_REFERENCE | OPT_PARTITIONS |
               OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_STEPS | OPT_STATS | OPT_INFEED | OPT_NO_VERIFY |
               OPT_SPMD | OPT_PER_DEVICE | OPT_OUTPUT_DEVICE | OPT_WATCH | OPT_PROGRESS | OPT_DUMP_DIR | OPT_TIMEOUT |
               OPT_HEARTBEAT | OPT_CHECKPOINT_EVERY | OPT_CHECKPOINT_DIR | OPT_RESUME | OPT_LINK_GBPS |
               OPT_INIT_STATE | OPT_SIGN_KEY | OPT_SGEMM,
    .run = run_run,
};
