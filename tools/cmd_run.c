/*
 * cmd_run.c: `tessel run MODEL.hlo|PLAN [--reference] [inputs] [--steps K]
 * [--output-dir DIR]`: bind inputs, execute (on one device with
 * --reference, else partitioned over N x R devices: threads of this
 * process, or one MPI rank per host under mpirun), and write
 * DIR/output_<i>.npy or print a summary per output. Partitioned runs read
 * only the shards of their own devices (runtime/shard_io.c). The work is in
 * runtime/; this file parses, checks the combination of options, handles
 * SIGINT/SIGTERM, times the phases and prints.
 *
 * Signals: SIGINT or SIGTERM end the run with status 128+signal and no
 * output file. Before outputs are written nothing is on disk, so the
 * handler ends the process at once (_exit: the executor cannot be
 * interrupted mid-kernel, and no state needs saving). While outputs are
 * written (temporaries, then renames) the handler only records the signal;
 * the writer finishes, then removes every output and exits.
 */
#include "cli.h"
#include "runtime/mpi_layer.h"
#include "runtime/transport.h"

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
    "                          depth (64), name (4096 bytes); repeatable\n"
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

/* Write the outputs (or print them) with signals deferred; a signal that
 * arrived meanwhile removes them all and ends the process. */
static IrStatus write_or_print(const CliOptions *o, DevValue *result, const RtFeed *feed,
                               IrDiag *d);

/* ---- statistics ---- */

/* What one process measured: the phases, then collectives and input bytes. */
enum { PH_LOAD, PH_READ, PH_EXEC, PH_WRITE, PH_COLL, PH_BYTES, NPH };

static void print_binding(const RtRunStats *rs)
{
    fprintf(stderr, "tessel: stats: devices: %d, executor threads bound to their cores: %d%s%s%s\n",
            (int)rs->ndevices, (int)rs->nbound, rs->bind_note ? " (" : "", rs->bind_note ? rs->bind_note : "",
            rs->bind_note ? ")" : "");
    /* Tensors themselves come from ts_malloc, first touched by the bound
     * executor thread; the device allocator is what binds explicitly. */
    if (rs->membind)
        fprintf(stderr, "tessel: stats: memory: device allocators bind to NUMA nodes (device 0: node %d)\n",
                (int)rs->numa_node);
    else
        fprintf(stderr, "tessel: stats: memory: binding fell back to unbound memory (%s)\n",
                rs->membind_errno ? strerror(rs->membind_errno) : "hwloc cannot bind memory here");
    fprintf(stderr, "tessel: stats: BLAS threads: %d; collective calls per device: %lld\n", rs->blas_threads,
            (long long)rs->coll_calls);
    /* The first step pays for first touches of fresh memory; later steps
     * reuse the buffers the first one freed. */
    if (rs->nsteps > 1)
        fprintf(stderr, "tessel: stats: steps: first %.3f ms, then median %.3f ms a step (%d timed)\n",
                rs->first_step_seconds * 1e3, rs->warm_step_seconds * 1e3, (int)rs->nsteps);
}

static void print_summaries(DevValue *result, const char *what)
{
    int32_t n = ir_shape_leaf_count(&result->shape);
    for (int32_t i = 0; i < n; i++) {
        char *s = rt_value_summary(dev_value_leaf(result, i));
        printf("%s %d: %s\n", what, (int)i, s ? s : "(out of memory)");
        ts_free(s);
    }
}

/* Outputs, then the values the program gave the host (outfeed_<i>.npy):
 * all or nothing, so a failure writing outfeeds removes the outputs. */
static IrStatus write_or_print(const CliOptions *o, DevValue *result, const RtFeed *feed,
                               IrDiag *d)
{
    DevValue *outf = feed && feed->nkept ? rt_feed_outfeeds(feed) : NULL;
    if (feed && feed->nkept && !outf)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    if (!o->output_dir) {
        print_summaries(result, "output");
        if (outf)
            print_summaries(outf, "outfeed");
        dev_value_unref(outf);
        return IR_OK;
    }
    struct stat sb;
    bool existed = stat(o->output_dir, &sb) == 0;
    g_writing = 1;
    IrStatus st = rt_write_outputs(result, o->output_dir, NULL, d);
    if (st == IR_OK && outf && (st = rt_write_values(outf, o->output_dir, "outfeed", d)) != IR_OK)
        rt_remove_outputs(result, o->output_dir);
    g_writing = 0;
    if (g_signal) {
        if (outf)
            rt_remove_values(outf, o->output_dir, "outfeed");
        rt_remove_outputs(result, o->output_dir);
        if (!existed)
            rmdir(o->output_dir);
        on_signal(g_signal);
    }
    dev_value_unref(outf);
    return st;
}

/* Bind, execute, write or print: the phases of a run in this process.
 * `sig` is a module whose entry has the program's logical parameters
 * (the model itself for --reference); `p` the partitioned program or NULL. */
static int execute(const CliOptions *o, const IrModule *sig, const CliProgram *p, double *t)
{
    RtArgs args = {0}, *shards = NULL;
    DevValue *result = NULL, **res = NULL;
    IrDiag d = {0};
    RtBindOptions bo = {o->ninputs, o->inputs, o->random, o->seed};
    RtReadStats rs = {0};
    RtRunStats run = {0};
    int64_t ndev = p ? p->r.prog.num_partitions * p->r.prog.num_replicas : 0;
    /* Host transfers: files for infeed/recv, outfeed/send values kept. A
     * partitioned run of several devices gets none (each device would
     * consume the one feed), so those ops are refused there. */
    RtFeed feed;
    rt_feed_init(&feed, o->ninfeeds, o->infeeds);
    RtRunOptions ro = {.steps = o->steps, .host = &feed.hooks};
    IrStatus st;
    if (!p) {
        st = rt_bind_inputs(sig, &bo, &args, &d);
    } else {
        shards = ts_calloc((size_t)ndev, sizeof *shards);
        res = ts_calloc((size_t)ndev, sizeof *res);
        st = shards && res ? rt_read_shards(&p->r.prog.cluster[0], sig, &bo, 0, ndev, shards, &rs, &d)
                           : ir_error(&d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    t[2] = cli_now();
    if (st == IR_OK && !p)
        st = rt_run_reference_steps(sig, &args, o->steps, &feed.hooks, &result, &d);
    else if (st == IR_OK)
        st = rt_run_devices(&p->r.prog.cluster[0], shards, 0, ndev, NULL, &ro, &run, res, &d);
    /* Replica 0's partitions hold the result. */
    if (st == IR_OK && p)
        st = rt_unshard_value(&p->r.prog.cluster[0].out_shape, plan_root_sharding(&p->r.prog.cluster[0]), p->r.prog.num_partitions, res, &result, &d);
    t[3] = cli_now();
    if (st == IR_OK)
        st = write_or_print(o, result, &feed, &d);
    t[4] = cli_now();
    rt_feed_free(&feed);
    if (o->stats && st == IR_OK) {
        fprintf(stderr, "tessel: stats: load+compile %.3f ms, read inputs %.3f ms, execute "
                "%.3f ms, write outputs %.3f ms\n", (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3,
                (t[3] - t[2]) * 1e3, (t[4] - t[3]) * 1e3);
        if (p) {
            fprintf(stderr, "tessel: stats: collectives %.3f ms (the most of any device); input read "
                    "%lld bytes from files, %lld random elements\n", run.coll_seconds * 1e3,
                    (long long)rs.file_bytes, (long long)rs.random_elems);
            print_binding(&run);
        }
    }
    for (int64_t k = 0; k < ndev; k++) {
        if (shards)
            rt_args_free(&shards[k]);
        if (res)
            dev_value_unref(res[k]);
    }
    ts_free(shards);
    ts_free(res);
    dev_value_unref(result);
    rt_args_free(&args);
    return st == IR_OK ? CLI_OK : cli_report(st, &d);
}

static int run_reference(const CliOptions *o, double *t)
{
    if (o->hosts > 1 || o->local_devices > 1)
        return cli_usage_error(&cli_cmd_run, "--reference runs on one device; --hosts and "
                               "--local-devices do not apply");
    IrModule *m = NULL;
    int rc = cli_load_model(o, o->pos[0], &m);
    if (rc == CLI_OK) {
        IrDiag d = {0};
        IrStatus st = rt_check_custom_calls(m, &d);
        if (st != IR_OK)
            rc = cli_report(st, &d);
    }
    t[1] = cli_now();
    if (rc == CLI_OK && m && compile_is_plan_text(m->src ? m->src : "", m->src ? strlen(m->src) : 0))
        rc = cli_usage_error(&cli_cmd_run, "--reference needs the model, not a plan (a plan holds the "
                             "partitioned program)");
    if (rc == CLI_OK)
        rc = execute(o, m, NULL, t);
    ir_module_free(m);
    return rc;
}

/* Put "rank R: " in front of a diagnostic's message (unless the runtime
 * already named the rank). */
static void name_rank(IrDiag *d, int rank)
{
    char *msg = d->msg;
    char prefix[32];
    int np = snprintf(prefix, sizeof prefix, "rank %d: ", rank);
    if (msg && strncmp(msg, prefix, (size_t)np) == 0)
        return;
    size_t n = (msg ? strlen(msg) : 13) + 32;
    char *m = ts_malloc(n);
    if (!m)
        return;
    snprintf(m, n, "%s%s", prefix, msg ? msg : "out of memory");
    ts_free(msg);
    d->msg = m;
}

/* This rank failed where the others may be waiting for it in a collective
 * (while running, while gathering the result): say why and end the job
 * (MPI_Abort; never returns). */
static void abort_job(RtTransport *tr, IrDiag *d)
{
    name_rank(d, rt_mpi_rank(tr));
    char *msg = ir_diag_format(d, "tessel");
    rt_transport_abort(tr, msg ? msg : "tessel: a rank failed\n");
}

/* Before running: every rank learns whether any failed (all stop, the
 * failing rank says why, every rank exits with its status). Returns -1
 * when all are fine, else the exit status. */
static int agree_before_run(RtTransport *tr, IrStatus st, IrDiag *d)
{
    int rank = rt_mpi_rank(tr);
    int mine = st == IR_OK ? CLI_OK : cli_exit_status(st);
    /* The failing rank says why first: once the others know, the job
     * ends, and mpirun may stop this rank before it could print. */
    if (st != IR_OK) {
        name_rank(d, rank);
        cli_report(st, d);
    }
    int failed = rt_mpi_agree(tr, st == IR_OK);
    /* Every rank exits with the failing rank's status, whichever rank
     * mpirun reports first. */
    int code = rt_mpi_max(tr, mine);
    if (failed < 0)
        return -1;
    if (st == IR_OK && rank == 0) {
        fprintf(stderr, "tessel: error: rank %d failed before running; every rank stops\n", failed);
    }
    return code ? code : CLI_FAIL;
}

/* The end of a successful run under mpirun (tr is ended, also on
 * failure), ordered so that a failure of any rank at any MPI call leaves
 * no output: free MPI's objects, agree that every rank is fine, finalize
 * MPI, and only then does rank 0 write (or print) `result`. Open MPI's
 * MPI_Finalize waits for every rank, so a rank that fails before or in
 * its finalize ends the job (mpirun kills the rest) before rank 0 writes.
 * `*write_s` receives rank 0's write time. */
static int finish_mpi(const CliOptions *o, RtTransport *tr, DevValue *result, IrDiag *d, double *write_s)
{
    int rank = rt_mpi_rank(tr);
    IrStatus st = rt_mpi_release(tr, d);
    /* Say why before agreeing: once the others learn of the failure the
     * job ends, and mpirun may stop this rank before it could print. */
    int rc = st == IR_OK ? CLI_OK : (name_rank(d, rank), cli_report(st, d));
    int failed = rt_mpi_agree(tr, st == IR_OK);
    IrDiag fd = {0};
    IrStatus fin = rt_mpi_end(tr, &fd);
    if (st == IR_OK && fin != IR_OK) {
        name_rank(&fd, rank);
        return cli_report(fin, &fd);
    }
    ir_diag_clear(&fd);
    if (st != IR_OK)
        return rc;
    if (failed >= 0) {
        if (rank == 0)
            fprintf(stderr, "tessel: error: rank %d failed; no output written\n", failed);
        return CLI_FAIL;
    }
    if (rank != 0)
        return CLI_OK;
    double t0 = cli_now();
    st = write_or_print(o, result, NULL, d);
    *write_s = cli_now() - t0;
    return st == IR_OK ? CLI_OK : cli_report(st, d);
}

/* One rank of `mpirun -np H tessel run`: this process is host `rank` and
 * runs devices [rank*L, (rank+1)*L). Failures found before execution are
 * agreed on by every rank (all stop, the failing rank says why); a failure
 * during execution or while gathering aborts the job (MPI_Abort), so no
 * rank waits for one that failed. Only rank 0 writes outputs, last
 * (finish_mpi). */
/* A module with host work under mpirun: every rank binds the inputs and
 * runs the host program; each cluster call runs on this rank's devices
 * [rank*l, (rank+1)*l) and its results come to every rank; rank 0 prints,
 * saves and writes the outputs. `st`/`d`: how preparing went. Ends MPI
 * (tr) before returning. */
static int run_mpi_program(const CliOptions *o, double *t, RtTransport *tr, const CliProgram *p, int64_t l,
                           IrStatus st, IrDiag *d)
{
    int rank = rt_mpi_rank(tr);
    RtArgs args = {0};
    DevValue *result = NULL;
    if (st == IR_OK) {
        RtBindOptions bo = {o->ninputs, o->inputs, o->random, o->seed};
        st = rt_bind_inputs(p->reference ? p->reference : p->r.prog.host, &bo, &args, d);
    }
    t[2] = cli_now();
    int rc = agree_before_run(tr, st, d);
    if (rc >= 0) {
        rt_args_free(&args);
        rt_mpi_finalize(tr);
        return rc;
    }
    st = rt_run_program_mpi(&p->r.prog, &args, o->steps, tr, (int64_t)rank * l, l, &result, d);
    t[3] = cli_now();
    if (st != IR_OK)
        abort_job(tr, d); /* the other ranks may be waiting in a collective */
    double write_s = 0;
    rc = finish_mpi(o, tr, result, d, &write_s);
    t[4] = t[3] + write_s;
    if (o->stats && rc == CLI_OK && rank == 0)
        fprintf(stderr, "tessel: stats: %-14s %ld on rank 0\n", "MPI calls", rt_mpi_call_count());
    dev_value_unref(result);
    rt_args_free(&args);
    return rc;
}

/* --stats under mpirun: min / median / max over ranks of each phase up to
 * the gathered result (rank 0 prints; outputs are written later, by rank 0
 * alone, and timed there). */
static void print_mpi_stats(RtTransport *tr, const double *t, const RtRunStats *run, const RtReadStats *rs)
{
    int rank = rt_mpi_rank(tr), hosts = rt_mpi_size(tr);
    double mine[NPH] = {t[1] - t[0], t[2] - t[1], t[3] - t[2], 0, run->coll_seconds, (double)rs->file_bytes};
    double mn[NPH], md[NPH], mx[NPH];
    static const char *const names[NPH] = {"load+compile", "read inputs", "execute", "write outputs",
                                           "collectives"};
    if (rt_mpi_phase_stats(tr, mine, NPH, mn, md, mx) && rank == 0) {
        for (int k = 0; k < PH_BYTES; k++)
            if (k != PH_WRITE)
                fprintf(stderr, "tessel: stats: %-14s min %.3f ms  median %.3f ms  max %.3f ms  (%d ranks)\n",
                        names[k], mn[k] * 1e3, md[k] * 1e3, mx[k] * 1e3, hosts);
        fprintf(stderr, "tessel: stats: %-14s min %.0f  median %.0f  max %.0f bytes per rank (files)\n",
                "input read", mn[PH_BYTES], md[PH_BYTES], mx[PH_BYTES]);
    }
    if (rank == 0)
        print_binding(run);
}

static int run_mpi(const CliOptions *o, double *t)
{
    RtTransport *tr = NULL;
    IrDiag d = {0};
    IrStatus st = rt_mpi_init(NULL, NULL, &tr, &d);
    if (st != IR_OK) {
        /* Without MPI (MPI_Init_thread failed) this process just exits
         * non-zero, which makes mpirun end the job; with it, abort. */
        int rc = cli_report(st, &d);
        if (tr)
            rt_transport_abort(tr, NULL);
        return rc;
    }
    int rank = rt_mpi_rank(tr), hosts = rt_mpi_size(tr);
    t[0] = cli_now(); /* phases start after MPI_Init */
    CliProgram p = {0};
    RtArgs *shards = NULL;
    RtReadStats rs = {0};
    RtRunStats run = {0};
    RtRunOptions ro = {.steps = o->steps};
    IrModule *sig = NULL;
    DevValue **local = NULL, *result = NULL;
    int64_t l = 0;
    st = cli_prepare_diag(o, o->pos[0], &p, &d);
    t[1] = cli_now();
    if (st == IR_OK) {
        int64_t ndev = (p.r.prog.host != NULL) ? p.r.prog.num_partitions * p.r.prog.num_replicas
                                  : p.r.prog.num_partitions * p.r.prog.num_replicas;
        int64_t want = p.from_plan ? p.r.prog.hosts : (o->hosts ? o->hosts : hosts);
        l = o->local_devices ? o->local_devices : (p.from_plan ? p.r.prog.local_devices : ndev / hosts);
        if (want != hosts)
            st = ir_error(&d, IR_EINPUT, o->pos[0], NULL, (IrPos){0, 0},
                          "%s for %lld hosts, but mpirun started %d", p.from_plan ? "the plan was compiled" : "--hosts asks",
                          (long long)want, hosts);
        else if (ndev % hosts != 0 || l * hosts != ndev)
            st = ir_error(&d, IR_EINPUT, o->pos[0], NULL, (IrPos){0, 0},
                          "%lld devices (%lld partitions x %lld replicas) do not split into %d hosts x %lld local devices",
                          (long long)ndev, (long long)p.r.prog.num_partitions, (long long)p.r.prog.num_replicas, hosts,
                          (long long)l);
    }
    if ((p.r.prog.host != NULL)) {
        int rc = run_mpi_program(o, t, tr, &p, l, st, &d);
        cli_program_free(&p);
        ir_diag_clear(&d);
        return rc;
    }
    if (st == IR_OK && !(sig = rt_signature_module(&p.r.prog.cluster[0])))
        st = ir_error(&d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    if (st == IR_OK) {
        /* Only this host's shards of each input are read or drawn. */
        RtBindOptions bo = {o->ninputs, o->inputs, o->random, o->seed};
        shards = ts_calloc((size_t)l, sizeof *shards);
        st = shards ? rt_read_shards(&p.r.prog.cluster[0], sig, &bo, (int64_t)rank * l, l, shards, &rs, &d)
                    : ir_error(&d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    t[2] = cli_now();
    int rc = agree_before_run(tr, st, &d);
    if (rc >= 0)
        goto done;
    local = ts_calloc((size_t)l, sizeof *local);
    st = local ? rt_run_devices(&p.r.prog.cluster[0], shards, (int64_t)rank * l, l, tr, &ro, &run, local, &d)
               : ir_error(&d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    t[3] = cli_now();
    if (st != IR_OK)
        abort_job(tr, &d); /* the other ranks may be waiting in a collective */
    st = rt_mpi_gather_results(tr, &p.r.prog.cluster[0], l, local, &result, &d);
    if (st != IR_OK)
        abort_job(tr, &d); /* rank 0 may be waiting in the gather */
    if (o->stats)
        print_mpi_stats(tr, t, &run, &rs);
    double write_s = 0;
    rc = finish_mpi(o, tr, result, &d, &write_s);
    tr = NULL;
    if (o->stats && rc == CLI_OK && rank == 0) {
        fprintf(stderr, "tessel: stats: %-14s %.3f ms (rank 0 alone, after the others finished)\n",
                "write outputs", write_s * 1e3);
        /* Every rank makes the same calls: the count a failure-injection
         * walk (TESSEL_FAIL_MPI_AFTER) must cover. */
        fprintf(stderr, "tessel: stats: %-14s %ld on rank 0\n", "MPI calls", rt_mpi_call_count());
    }
done:
    for (int64_t k = 0; local && k < l; k++)
        dev_value_unref(local[k]);
    ts_free(local);
    for (int64_t k = 0; shards && k < l; k++)
        rt_args_free(&shards[k]);
    ts_free(shards);
    dev_value_unref(result);
    ir_module_free(sig);
    cli_program_free(&p);
    ir_diag_clear(&d);
    rt_mpi_finalize(tr);
    return rc;
}

/* A module with host work: the host program runs here and launches each
 * device cluster, partitioned on its own, on the N x R in-process devices. */
static int run_program(const CliOptions *o, const CliProgram *p, double *t)
{
    RtArgs args = {0};
    DevValue *result = NULL;
    IrDiag d = {0};
    RtBindOptions bo = {o->ninputs, o->inputs, o->random, o->seed};
    IrStatus st = rt_bind_inputs(p->reference ? p->reference : p->r.prog.host, &bo, &args, &d);
    t[2] = cli_now();
    if (st == IR_OK)
        st = rt_run_program_local(&p->r.prog, &args, o->steps, &result, &d);
    t[3] = cli_now();
    if (st == IR_OK)
        st = write_or_print(o, result, NULL, &d);
    t[4] = cli_now();
    dev_value_unref(result);
    rt_args_free(&args);
    return st == IR_OK ? CLI_OK : cli_report(st, &d);
}

/* --infeed feeds one executor: the reference or a run of one device. */
static int refuse_infeed(const char *why)
{
    return cli_usage_error(&cli_cmd_run, "--infeed feeds one device: run with --reference or "
                           "--num-partitions 1 --num-replicas 1 (%s)", why);
}

static int run_partitioned(const CliOptions *o, double *t)
{
    if (rt_mpi_launched())
        return o->ninfeeds ? refuse_infeed("under mpirun every host would read the feed")
                           : run_mpi(o, t);
    CliProgram p;
    int rc = cli_prepare(o, o->pos[0], &p);
    t[1] = cli_now();
    if (rc != CLI_OK)
        return rc;
    int64_t ndev = p.r.prog.num_partitions * p.r.prog.num_replicas;
    if (o->ninfeeds && ((p.r.prog.host != NULL) || ndev != 1)) {
        rc = refuse_infeed((p.r.prog.host != NULL) ? "this module has host work and device clusters"
                                      : "each of the devices would consume the feed");
        cli_program_free(&p);
        return rc;
    }
    if ((p.r.prog.host != NULL)) {
        rc = run_program(o, &p, t);
        cli_program_free(&p);
        return rc;
    }
    int64_t hosts = o->hosts ? o->hosts : 1;
    if (hosts != 1 || (o->local_devices && o->local_devices != ndev)) {
        rc = cli_usage_error(&cli_cmd_run, "without mpirun one process runs all %lld devices: --hosts 1 "
                             "--local-devices %lld (run under `mpirun -np H` for H hosts)",
                             (long long)ndev, (long long)ndev);
    } else {
        IrModule *sig = rt_signature_module(&p.r.prog.cluster[0]);
        if (!sig) {
            fprintf(stderr, "tessel: error: out of memory\n");
            rc = CLI_FAIL;
        } else {
            rc = execute(o, sig, &p, t);
        }
        ir_module_free(sig);
    }
    cli_program_free(&p);
    return rc;
}

static int run_run(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_run, o->npos ? "run takes one MODEL.hlo or PLAN"
                                                     : "missing MODEL.hlo");
    install_signals();
    double t[5];
    t[0] = t[1] = t[2] = t[3] = t[4] = cli_now();
    int rc = o->reference ? run_reference(o, t) : run_partitioned(o, t);
    /* Release the cached topology and allocators (nothing leaks). */
    IrDiag d = {0};
    dev_shutdown(&d);
    ir_diag_clear(&d);
    return rc;
}

const CliCommand cli_cmd_run = {
    .name = "run",
    .summary = "execute a module (--reference: unpartitioned, on one device)",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_INPUT | OPT_RANDOM | OPT_OUTPUT_DIR | OPT_REFERENCE | OPT_PARTITIONS |
               OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_STEPS | OPT_STATS | OPT_INFEED,
    .run = run_run,
};
