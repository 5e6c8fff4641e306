/*
 * run_mpi.c: runs under MPI. ts_plan_run_mpi runs one rank's part of a plan
 * on the caller's communicator (tessel talks on a duplicate of it, never on
 * MPI_COMM_WORLD behind the caller's back); TsMpiWorld is the MPI of a
 * program that has none of its own (the command line under mpirun).
 *
 * The protocol, so that no rank ever waits for one that failed:
 *   0. the ranks agree that they run the same thing (agree.c: plan,
 *      model, inputs, seed, steps, options; one all-gather): if not, every
 *      rank returns the same error naming what differs and where, said at
 *      step 1's agreement, and nothing is read; if so, the caller's
 *      on_agreed runs (a command line's output directory is made there);
 *   1. each rank prepares (its shards of every input; the host program's
 *      inputs whole), then every rank agrees: if any failed, all return an
 *      error (the failing rank's own, said first through on_error);
 *   2. the devices run; a failure now ends the job (MPI_Abort), since the
 *      other ranks may be waiting for this one inside a collective; the
 *      results travel to rank 0 (the same), or with process_local each
 *      rank keeps its own part of them (local_data.c);
 *   3. tessel's MPI objects are freed and every rank agrees once more: a
 *      rank that failed there makes every rank return an error, so no
 *      output is written for a run some rank did not finish cleanly.
 */
#include "api_internal.h"
#include "../coll/mpi_layer.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct TsMpiWorld {
    CollMpi *t;          /* coll_mpi_init's: owns MPI */
    MPI_Comm world;          /* MPI_COMM_WORLD, as an object with an address */
    TsRunOptions say;        /* on_error / on_error_ctx for ts_mpi_finalize */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Put "rank R: " in front of a diagnostic's message (unless it is there). */
static void name_rank(IrDiag *d, int rank)
{
    char prefix[32];
    int np = snprintf(prefix, sizeof prefix, "rank %d: ", rank);
    if (d->msg && strncmp(d->msg, prefix, (size_t)np) == 0)
        return;
    size_t n = (d->msg ? strlen(d->msg) : 13) + 32;
    char *m = ts_malloc(n);
    if (!m)
        return;
    snprintf(m, n, "%s%s", prefix, d->msg ? d->msg : "out of memory");
    ts_free(d->msg);
    d->msg = m;
}

/* Tell the caller (on_error) before anyone else can end the job. */
static void say(const TsRunOptions *o, IrDiag *d, int rank)
{
    name_rank(d, rank);
    if (o->on_error) {
        TsDiag td = {(TsStatus)d->status, d->file, d->pos.line, d->pos.col, d->line_text, d->msg};
        o->on_error(o->on_error_ctx, &td);
    }
}

/* This rank failed where the others may wait for it: end the job. */
static void abort_job(const TsRunOptions *o, CollMpi *t, IrDiag *d)
{
    say(o, d, coll_mpi_rank(t));
    char *msg = o->on_error ? NULL : ir_diag_format(d, "tessel");
    coll_mpi_abort(t, msg ? msg : (o->on_error ? NULL : "tessel: a rank failed\n"));
}

/* Step 1's and 3's agreement: IR_OK when every rank is fine; else this
 * rank's error (or one naming the failing rank), the same status class on
 * every rank. */
static IrStatus agree(const TsRunOptions *o, CollMpi *t, IrStatus st, IrDiag *d, const char *when)
{
    int rank = coll_mpi_rank(t);
    if (st != IR_OK)
        say(o, d, rank);
    int failed = coll_mpi_agree(t, st == IR_OK);
    int worst = coll_mpi_max(t, (int)st);
    if (failed < 0)
        return IR_OK;
    if (st != IR_OK)
        return st;
    return ir_error(d, worst > 0 ? (IrStatus)worst : IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                    "rank %d failed %s; every rank stops", failed, when);
}

/* The caller's on_agreed (the ranks agreed): its error as this rank's. */
static IrStatus on_agreed(const TsRunOptions *o, IrDiag *d)
{
    if (!o->on_agreed)
        return IR_OK;
    TsDiag td = {0};
    TsStatus ts = o->on_agreed(o->on_agreed_ctx, &td);
    if (ts == TS_OK) {
        ts_diag_clear(&td);
        return IR_OK;
    }
    if (!td.msg) {
        ts_diag_clear(&td);
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "the caller's on_agreed failed (status %d)",
                        (int)ts);
    }
    ir_diag_clear(d);
    *d = (IrDiag){.status = td.status != TS_OK ? (IrStatus)td.status : (IrStatus)ts, .file = td.file,
                  .pos = {td.line, td.col}, .line_text = td.line_text, .msg = td.msg};
    return d->status;
}

/* Step 1 for cluster 0 alone: this rank's shards of every input. */
static IrStatus prepare_cluster(const TsPlan *p, const TsRunOptions *o, int64_t first, int64_t l, RtArgs **shards,
                                RtReadStats *rs, IrDiag *d)
{
    RtBindOptions bo = api_bind_options(o);
    *shards = ts_calloc((size_t)(l > 0 ? l : 1), sizeof **shards);
    if (!*shards)
        return ir_oom(d, NULL);
    return rt_read_shards(&p->r.prog.cluster[0], p->signature, &bo, first, l, *shards, rs, d);
}

/* A rank's measured peak with its rank in one double, so that the
 * gathered maximum names the rank it is from: peak x ranks + rank (exact
 * while the product stays below 2^53: 8 PiB over 8 ranks). */
static double peak_key(int64_t peak, int rank, int ranks)
{
    return (double)peak * ranks + rank;
}

/* The line of every rank's measured peak (rank 0 prints it): the largest
 * with its rank, the median and the smallest (keys from peak_key). */
static void stats_peaks(IrStrBuf *s, double mn, double md, double mx, int ranks, int64_t estimate)
{
    int64_t top = (int64_t)mx / ranks, at = (int64_t)mx % ranks;
    ir_sb_printf(s, "tessel: stats: memory per rank: measured peak largest %lld bytes (rank %lld), median %lld, "
                    "smallest %lld over %d ranks (largest/estimate %.3f)\n",
                 (long long)top, (long long)at, (long long)(md / ranks), (long long)((int64_t)mn / ranks), ranks,
                 estimate > 0 ? (double)top / (double)estimate : 0);
}

/* mine: the 6 phases, then this rank's bytes sent and received per
 * collective kind (coll_mpi_bytes): 2 x COLL_XK_COUNT more, then its
 * devices' largest measured peak (peak_key). */
static void stats_lines(IrStrBuf *s, CollMpi *t, const double *mine, const RtRunStats *run, int64_t estimate)
{
    enum { NPH = 7 + 2 * COLL_XK_COUNT };
    double mn[NPH], md[NPH], mx[NPH];
    static const char *const names[6] = {"load+compile", "read inputs", "execute", "write outputs",
                                         "collectives"};
    int hosts = coll_mpi_size(t);
    bool gathered = coll_mpi_phase_stats(t, mine, NPH, mn, md, mx);
    if (gathered && coll_mpi_rank(t) == 0) {
        for (int k = 0; k < 5; k++)
            if (k != 3)
                ir_sb_printf(s, "tessel: stats: %-14s min %.3f ms  median %.3f ms  max %.3f ms  (%d ranks)\n",
                            names[k], mn[k] * 1e3, md[k] * 1e3, mx[k] * 1e3, hosts);
        ir_sb_printf(s, "tessel: stats: %-14s min %.0f  median %.0f  max %.0f bytes per rank (files)\n",
                    "input read", mn[5], md[5], mx[5]);
        /* Collective data between hosts, by kind (kinds that moved none are left out). */
        for (int k = 0; k < COLL_XK_COUNT; k++)
            for (int dir = 0; dir < 2; dir++) {
                int j = 6 + 2 * k + dir;
                if (mx[j] > 0)
                    ir_sb_printf(s, "tessel: stats: %-8s %-14s min %.0f  median %.0f  max %.0f bytes per rank\n",
                                dir ? "received" : "sent", coll_xfer_kind_name((CollXferKind)k), mn[j], md[j], mx[j]);
            }
    }
    if (coll_mpi_rank(t) == 0) {
        api_stats_binding(s, run);
        api_stats_memory(s, run, estimate, 0);
        if (gathered && hosts > 1)
            stats_peaks(s, mn[NPH - 1], md[NPH - 1], mx[NPH - 1], hosts, estimate);
        if (hosts > 1)
            ir_sb_printf(s, "tessel: stats: all-reduces through shared memory (every rank on one host): %lld on "
                            "rank 0\n", (long long)coll_mpi_shm_calls(t));
    }
}

/* --stats=ops under mpirun: every rank's device tables (stats_ops.c), in
 * rank order, to rank 0's stats (a rank's devices are numbered from its
 * first global device, so each table names its device). A rank that
 * waits in a collective is waiting for another, and that one's table is
 * where its time went. The texts are gathered padded to the longest: its
 * length first (an all-gather, so every rank knows it), then, if every
 * rank has the room (an agreement), the texts; otherwise rank 0 says the
 * others' tables are missing and why. Every rank makes the same calls
 * whatever its own text. */
static void stats_ops_gathered(IrStrBuf *s, CollMpi *t, const RtRunStats *run, int32_t rows, int64_t first)
{
    int rank = coll_mpi_rank(t), size = coll_mpi_size(t);
    IrStrBuf mine = {0};
    api_stats_ops(&mine, run, rows, first);
    int64_t len = mine.oom || !mine.s ? 0 : (int64_t)mine.n;
    int64_t *lens = ts_calloc((size_t)size, sizeof *lens);
    char *pad = NULL, *all = NULL;
    size_t width = 1; /* the longest text + 1: a rank with none still sends a byte */
    IrDiag d = {0};
    bool ok = coll_mpi_agree(t, lens != NULL) < 0 && coll_mpi_allgather(t, &len, sizeof len, lens, &d) == IR_OK;
    if (ok) {
        for (int r = 0; r < size; r++)
            if (lens[r] >= (int64_t)width)
                width = (size_t)lens[r] + 1;
        pad = ts_calloc(width, 1);
        all = rank == 0 && width <= SIZE_MAX / (size_t)size ? ts_malloc((size_t)size * width) : NULL;
        ok = coll_mpi_agree(t, pad && (rank != 0 || all)) < 0;
    }
    if (ok) {
        if (len > 0)
            memcpy(pad, mine.s, (size_t)len);
        ok = coll_mpi_gather(t, pad, width, all, 0, &d) == IR_OK;
    }
    if (rank == 0 && ok) {
        for (int r = 0; r < size; r++)
            ir_sb_putn(s, all + (size_t)r * width, (size_t)lens[r]);
    } else if (rank == 0) {
        if (len > 0)
            ir_sb_putn(s, mine.s, (size_t)len);
        ir_sb_printf(s, "tessel: stats: ops of the other ranks' devices: not gathered (%s)\n",
                     d.msg ? d.msg : "a rank had no memory for them");
    }
    ir_diag_clear(&d);
    ts_free(all);
    ts_free(pad);
    ts_free(lens);
    ir_sb_free(&mine);
}

/* ts_plan_run_mpi (its arguments checked), with step 0 (the agreement)
 * when agree_first. */
static TsStatus run_mpi(const TsPlan *p, const void *mpi_comm, const TsRunOptions *o, TsOutputs **out, TsDiag *d,
                        bool agree_first)
{
    IrDiag id = {0};
    *out = NULL;
    TsRunOptions none = {0};
    if (!o)
        o = &none;
    if (api_check_run(o, &id) != IR_OK)
        return api_give(id.status, &id, d);
    dev_blas_choose_sgemm(api_sgemm_lib(o->tuning.sgemm));
    dev_blas_preload(o->tuning.openblas_num_threads_unset); /* before the clock starts, as a linked BLAS was */
    api_sgemm_prepare(&p->r.prog, NULL);
    double t0 = now(), t1 = t0, t2 = t0;
    CollMpi *t = NULL;
    IrStatus st = coll_mpi_attach(mpi_comm, &t, &id);
    if (st != IR_OK) {
        if (!t) { /* MPI is not there at all: nobody waits for this rank */
            say(o, &id, coll_launcher_rank());
            return api_give(st, &id, d);
        }
        abort_job(o, t, &id); /* the others may be inside the same MPI_Comm_dup */
    }
    int rank = coll_mpi_rank(t), size = coll_mpi_size(t);
    /* Rank 0's tuning on every rank, before anything moves. */
    CollTuning tune = api_tuning(o);
    if (coll_mpi_tune(t, &tune, &id) != IR_OK)
        abort_job(o, t, &id); /* the others may be inside the same exchange */
    /* The shared-memory all-reduce's question to MPI, before the clock. */
    if (coll_mpi_shm_prepare(t, api_allreduce_bytes(&p->r.prog), &id) != IR_OK)
        abort_job(o, t, &id);
    /* From here no rank waits forever for a silent or diverging one. */
    st = coll_mpi_heartbeat_start(t, api_heartbeat_seconds(o->heartbeat_seconds), &id);
    const PlanProgram *prog = &p->r.prog;
    int64_t ndev = prog->num_partitions * prog->num_replicas, hosts = ts_plan_hosts(p);
    int64_t l = ts_plan_local_devices(p), first = (int64_t)rank * l;
    RtArgs *shards = NULL, args = {0};
    RtReadStats rs = {0};
    RtRunStats run = {0};
    DevValue **local = NULL, *result = NULL, *outfeeds = NULL;
    RtFeed feed;
    rt_feed_init(&feed, 0, NULL);
    RtSaves saves = {0};
    args.saves = &saves;
    int64_t ndevices = 0;
    IrStrBuf stats = {0};

    /* 0. every rank runs the same thing, or none does (agree.c): every
     * rank takes part (one whose heartbeat failed too), reaches the same
     * verdict and, when the ranks differ, says it at step 1's agreement,
     * before anything is read. */
    if (agree_first) {
        IrDiag ad = {0};
        IrStatus ast = api_agree(p, o, t, &ad);
        if (ast != IR_OK && ast != IR_EINPUT)
            abort_job(o, t, &ad); /* this rank could not take part: the others may be in the gather */
        if (st == IR_OK && ast != IR_OK) {
            st = ast;
            id = ad;
        } else {
            ir_diag_clear(&ad);
        }
    }

    /* 1. prepare, agree (the caller's on_agreed first: the ranks agreed) */
    if (st == IR_OK)
        st = on_agreed(o, &id);
    if (st != IR_OK)
        ; /* the heartbeat did not start, the ranks differ or on_agreed failed: said at the agreement */
    else if (hosts != size)
        st = ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                      p->r.from_plan ? "the plan was compiled for %lld hosts, but mpirun started %d: run it "
                                       "with `mpirun -np %lld`, or compile it again with `tessel compile --hosts %d`"
                                     : "the plan is for %lld hosts, but the communicator has %d ranks: run it on "
                                       "%lld ranks, or set its layout to %d hosts (ts_plan_set_layout)",
                      (long long)hosts, size, (long long)hosts, size);
    else if (l * hosts != ndev)
        st = ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                      "%lld devices (%lld partitions x %lld replicas) do not split into %d hosts x %lld local "
                      "devices", (long long)ndev, (long long)prog->num_partitions, (long long)prog->num_replicas,
                      size, (long long)l);
    else if (api_check_memory(p, o, l, &id) != IR_OK)
        st = IR_EINPUT;
    else if (o->ninfeeds)
        st = ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                      "infeed files feed one device: under mpirun every host would read the feed");
    else if (o->process_local && (prog->host || prog->ncluster != 1 || prog->cluster[0].replay))
        st = ir_error(&id, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                      "process-local inputs and outputs need a program of one device cluster without host work, "
                      "not a replay");
    else if (prog->host) {
        RtBindOptions bo = api_bind_options(o);
        st = rt_bind_inputs(prog->host, &bo, &args, &id);
    } else if (prog->ncluster == 1 && prog->cluster[0].replay) {
        shards = ts_calloc((size_t)(l > 0 ? l : 1), sizeof *shards);
        st = shards ? api_bind_devices(p, o, first, l, shards, &id)
                    : ir_oom(&id, NULL);
    } else if (prog->ncluster == 1) {
        st = prepare_cluster(p, o, first, l, &shards, &rs, &id);
    }
    ApiSteps sc;
    RtStepHook hook = {0};
    if (st == IR_OK)
        st = api_plan_step_hook(p, o, &sc, &hook, &id);
    t1 = now();
    st = agree(o, t, st, &id, "before running");

    /* 2. run; failures end the job */
    if (st == IR_OK && prog->host) {
        if (rt_run_program_mpi(prog, &args, o->steps, api_max_trips(o), &hook, &tune, t, first, l, &result, &id) !=
            IR_OK)
            abort_job(o, t, &id);
        t2 = now();
        if (rank != 0) {
            dev_value_unref(result);
            result = NULL;
        }
    } else if (st == IR_OK) {
        /* Device 0 (on rank 0) gives the run its outfeeds (local.c). */
        RtRunOptions ro = {.steps = o->steps, .host = &feed.hooks, .on_step = &hook, .max_trips = api_max_trips(o),
                           .tune = &tune, .op_times = o->stats && o->stats_ops > 0};
        local = ts_calloc((size_t)(l > 0 ? l : 1), sizeof *local);
        if (!local)
            ir_oom(&id, NULL);
        coll_mpi_checkin(t, 0);
        if (!local || rt_run_devices(&prog->cluster[0], shards, first, l, coll_mpi_transport(t), &ro, &run, local, &id) != IR_OK)
            abort_job(o, t, &id);
        t2 = now();
        if (prog->cluster[0].replay) {
            /* Every device's outputs to rank 0, as they are. */
            DevValue **all = rank == 0 ? ts_calloc((size_t)ndev, sizeof *all) : NULL;
            if ((rank == 0 && !all) || rt_mpi_gather_devices(t, l, local, NULL, all, &id) != IR_OK ||
                (rank == 0 && api_replay_outputs(p, o, all, &result, &ndevices, &id) != IR_OK))
                abort_job(o, t, &id); /* the others may be waiting in the gather */
            for (int64_t g = 0; all && g < ndev; g++)
                dev_value_unref(all[g]);
            ts_free(all);
        } else if (o->process_local) {
            /* every rank keeps its own part: nobody waits for it */
            if (rt_local_results(&prog->cluster[0], first, l, local, &result, &id) != IR_OK)
                abort_job(o, t, &id);
        } else if (rt_mpi_gather_results(t, &prog->cluster[0], l, local, &result, &id) != IR_OK) {
            abort_job(o, t, &id); /* rank 0 may be waiting in the gather */
        }
        if (o->stats) {
            double mine[7 + 2 * COLL_XK_COUNT] = {o->load_seconds, t1 - t0, t2 - t1, 0, run.coll_seconds,
                                                (double)rs.file_bytes};
            mine[6 + 2 * COLL_XK_COUNT] = peak_key(run.peak_max, rank, size);
            for (int k = 0; k < COLL_XK_COUNT; k++) {
                int64_t sent = 0, received = 0;
                coll_mpi_bytes(t, (CollXferKind)k, &sent, &received);
                mine[6 + 2 * k] = (double)sent;
                mine[7 + 2 * k] = (double)received;
            }
            stats_lines(&stats, t, mine, &run, api_plan_estimate(p));
            if (o->stats_ops > 0)
                stats_ops_gathered(&stats, t, &run, o->stats_ops, first);
        }
    }

    /* 3. free tessel's MPI objects, agree that every rank is fine */
    if (st == IR_OK) {
        IrStatus rel = coll_mpi_release(t, &id);
        st = agree(o, t, rel, &id, "while finishing; no output written");
    }
    IrDiag ed = {0};
    IrStatus end = coll_mpi_end(t, &ed);
    if (st == IR_OK && end != IR_OK) {
        /* After the last agreement: this rank alone knows (the caller's
         * own agreement, e.g. ts_mpi_finalize's, must carry it on). */
        st = end;
        ir_diag_clear(&id);
        id = ed;
        say(o, &id, rank);
    } else {
        ir_diag_clear(&ed);
    }
    for (int64_t k = 0; local && k < l; k++)
        dev_value_unref(local[k]);
    ts_free(local);
    for (int64_t k = 0; shards && k < l; k++)
        rt_args_free(&shards[k]);
    ts_free(shards);
    rt_args_free(&args);
    if (st == IR_OK && rank == 0 && feed.nkept && !(outfeeds = rt_feed_outfeeds(&feed)))
        st = ir_oom(&id, NULL);
    bool mine = rank == 0 || (o->process_local && result); /* outputs on this rank */
    if (st == IR_OK && mine && !(*out = api_outputs_new(result, outfeeds, ir_sb_take(&stats))))
        st = ir_oom(&id, NULL);
    else if (st == IR_OK && rank == 0) {
        (*out)->ndevices = ndevices;
        api_outputs_adopt(*out, &saves, p->sha256);
        if (!api_outputs_note_reads(*out, o)) {
            ts_outputs_free(*out);
            *out = NULL;
            st = ir_oom(&id, NULL);
        }
    }
    rt_saves_free(&saves);
    dev_value_unref(outfeeds);
    rt_feed_free(&feed);
    ir_sb_free(&stats);
    rt_run_stats_free(&run);
    dev_value_unref(result);
    return api_give(st, &id, d);
}

TsStatus ts_plan_run_mpi(const TsPlan *p, const void *mpi_comm, const TsRunOptions *o, TsOutputs **out,
                         TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(mpi_comm, d);
    API_NEED(out, d);
    return run_mpi(p, mpi_comm, o, out, d, true);
}

TsStatus api_plan_run_mpi_unagreed(const TsPlan *p, const void *mpi_comm, const TsRunOptions *o, TsOutputs **out,
                                   TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(mpi_comm, d);
    API_NEED(out, d);
    return run_mpi(p, mpi_comm, o, out, d, false);
}

/* ---- the world of a program without MPI of its own ---- */

double api_heartbeat_seconds(double s)
{
    return s == 0 ? 60 : s;
}

TsStatus ts_mpi_heartbeat(TsMpiWorld *w, double seconds, TsDiag *d)
{
    API_NEED(w, d);
    IrDiag id = {0};
    if (!api_heartbeat_ok(seconds))
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "the heartbeat must be 0 (60 s), negative (none) or from %g to %g seconds, not %g",
                                 TS_HEARTBEAT_MIN_SECONDS, TS_HEARTBEAT_MAX_SECONDS, seconds),
                        &id, d);
    return api_give(coll_mpi_heartbeat_start(w->t, api_heartbeat_seconds(seconds), &id), &id, d);
}

bool ts_mpi_launched(void)
{
    return coll_launched();
}

TsStatus ts_mpi_init(TsMpiWorld **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(out, d);
    return ts_mpi_init_ex(NULL, out, d);
}

TsStatus ts_mpi_init_ex(const TsTuning *tune, TsMpiWorld **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    TsMpiWorld *w = ts_calloc(1, sizeof *w);
    if (!w)
        return api_give(ir_oom(&id, NULL), &id, d);
    TsRunOptions ro = {0};
    if (tune)
        ro.tuning = *tune;
    CollTuning ct = api_tuning(&ro);
    IrStatus st = coll_mpi_init(NULL, NULL, tune ? &ct : NULL, &w->t, &id);
    w->world = MPI_COMM_WORLD;
    if (st != IR_OK && !w->t) {
        ts_free(w);
        return api_give(st, &id, d);
    }
    *out = w; /* on failure with MPI up, the caller ends the job (ts_mpi_abort) */
    return api_give(st, &id, d);
}

void ts_mpi_on_error(TsMpiWorld *w, void (*on_error)(void *ctx, const TsDiag *d), void *ctx)
{
    if (!w)
        return ;
    w->say.on_error = on_error;
    w->say.on_error_ctx = ctx;
}

const void *ts_mpi_comm(const TsMpiWorld *w)
{
    if (!w)
        return NULL;
    return &w->world;
}

int ts_mpi_rank(const TsMpiWorld *w)
{
    if (!w)
        return 0;
    return coll_mpi_rank(w->t);
}

int ts_mpi_size(const TsMpiWorld *w)
{
    if (!w)
        return 1;
    return coll_mpi_size(w->t);
}

int ts_mpi_agree(TsMpiWorld *w, bool ok, int status, int *status_max)
{
    if (!w) { /* no world: this process alone */
        if (status_max)
            *status_max = status;
        return ok ? -1 : 0;
    }
    int failed = coll_mpi_agree(w->t, ok);
    int m = coll_mpi_max(w->t, status);
    if (status_max)
        *status_max = m;
    return failed;
}

TsStatus ts_mpi_finalize(TsMpiWorld *w, bool ok, TsDiag *d)
{
    if (!w)
        return TS_OK;
    IrDiag id = {0};
    int rank = coll_mpi_rank(w->t);
    /* Free the objects, agree, then end: a rank that failed to free its
     * objects makes every rank fail before any finalizes (and so before
     * rank 0 writes). */
    IrStatus st = coll_mpi_release(w->t, &id);
    if (st != IR_OK)
        say(&w->say, &id, rank); /* before the others can end the job */
    int failed = coll_mpi_agree(w->t, ok && st == IR_OK);
    IrDiag ed = {0};
    IrStatus end = coll_mpi_end(w->t, &ed);
    TsRunOptions said = w->say;
    ts_free(w);
    if (st == IR_OK && failed >= 0 && ok)
        st = ir_error(&id, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                      "rank %d failed while finishing; no output written", failed);
    if (st == IR_OK && end != IR_OK) {
        st = end;
        id = ed;
        say(&said, &id, rank);
    } else {
        ir_diag_clear(&ed);
    }
    if (st != IR_OK)
        name_rank(&id, rank);
    else if (!ok)
        st = ir_error(&id, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "this rank failed");
    return api_give(st, &id, d);
}

void ts_mpi_abort(TsMpiWorld *w, const char *msg)
{
    coll_mpi_abort(w ? w->t : NULL, msg);
}

long ts_mpi_calls(void)
{
    return coll_mpi_call_count();
}
