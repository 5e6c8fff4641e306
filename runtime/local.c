/*
 * local.c: a host's devices as threads of one process: the world (a
 * barrier over the host's devices, abort, the devices that finished), the
 * device threads (bound to their cores by device/, or plain threads), and
 * a run of the SPMD program on them, step after step. Every collective a
 * device's executor meets goes to coll/ (coll_device_start's hooks: the
 * collective's file, and through the CollTransport to the other hosts);
 * without a transport one process runs all N x R devices (the embedded
 * default: no MPI launcher needed).
 *
 * Failure: a device whose execution fails marks the world aborted and wakes
 * every waiter; a device waiting in a barrier, or arriving at one later,
 * returns an error instead of waiting. No thread waits forever.
 */
#include "run_internal.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPUs the barrier tells apart (sched_getcpu); a thread on a higher one
 * never spins. */
#define WORLD_CPUS 256
/* The longest a waiter spins before it sleeps (barrier(); 20 us and 2 ms
 * measured alike on the auto-shard bench's models). */
#define SPIN_SECONDS 100e-6

typedef struct World {
    CollHost coll;             /* the collectives' view of this host (coll.h); its barrier is ours */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t arrived, generation;
    int64_t finished;          /* local devices done with their program */
    bool aborted;
    int64_t first_failed;      /* the device whose own failure aborted the world, -1 none */
    /* The barrier's spin (barrier()): per CPU, the local device threads
     * that run on it and those of them waiting in the barrier now. */
    int32_t on_cpu[WORLD_CPUS];
    int32_t waiting_on[WORLD_CPUS];
} World;

/* Steps whose times --stats keeps (the first one and the median of the
 * others are reported). */
#define STEP_SAMPLES 256

typedef struct Device {
    CollDevice cd;             /* its collectives (coll.h): cd.id is the global device id */
    World *w;
    const PlanCluster *c;
    DevValue **args;           /* this device's shards of the arguments (owned) */
    int32_t nargs;
    int64_t steps;             /* runs of the program, aliased outputs fed back */
    int64_t max_trips;         /* while loop bound (0: none) */
    const DevHostTransfers *host; /* infeed/outfeed: on a run of one device only */
    const RtStepHook *on_step; /* device 0 only */
    DevValue *result;
    IrDiag diag;
    IrStatus status;
    int64_t peak;              /* the most bytes of values it held (its allocator's value_peak) */
    DevAllocStats buf_before, buf_after; /* its allocator around the run (kept buffers, reuse) */
    int32_t nstep_seconds;     /* the first STEP_SAMPLES steps' wall times */
    double step_seconds[STEP_SAMPLES];
    RtOpTimes *ops;            /* RtRunOptions.op_times: its per-instruction times; else NULL */
    int32_t packed_weights;    /* device/packed.c's figures over its steps */
    size_t packed_bytes;
    int64_t packed_runs;
} Device;

/* Device `id` failed on its own (-1: the world is aborted for another
 * reason): the first such device is the run's root cause, not the
 * devices that then saw "aborted: another device failed". */
static void world_abort_by(World *w, int64_t id)
{
    pthread_mutex_lock(&w->mu);
    if (!w->aborted && id >= 0)
        w->first_failed = id;
    __atomic_store_n(&w->aborted, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void world_abort(World *w)
{
    pthread_mutex_lock(&w->mu);
    __atomic_store_n(&w->aborted, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU the calling thread runs on, as an index of on_cpu (-1: none). */
static int world_cpu(void)
{
    int cpu = sched_getcpu();
    return cpu >= 0 && cpu < WORLD_CPUS ? cpu : -1;
}

/* Wait, without the lock, until barrier generation gen is over or the
 * world aborted, for at most SPIN_SECONDS: true when it is over. */
static bool spin_wait(World *w, int64_t gen)
{
    double until = now_seconds() + SPIN_SECONDS;
    for (int k = 1;; k++) {
        if (__atomic_load_n(&w->generation, __ATOMIC_ACQUIRE) != gen || __atomic_load_n(&w->aborted, __ATOMIC_ACQUIRE))
            return true;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (k % 64 == 0 && now_seconds() > until)
            return false;
    }
}

/* false when the world was aborted (by this or another device).
 *
 * A waiter whose CPU has no device thread of this run left to run (the
 * devices bound to it are all waiting here too) spins for up to
 * SPIN_SECONDS before it sleeps: a thread that sleeps gives its CPU away,
 * to another process or to the halt of an idle vCPU, and a step of a
 * small model meets a barrier every few tens of microseconds, each wake
 * then paying to get the CPU back. A waiter whose CPU still has a device
 * computing sleeps at once, giving it the CPU. Measured (BENCHMARKS.md,
 * "The auto-shard line's method"): 2 devices on 2 cores under load run
 * the auto-shard models' steps 13-46 % faster; 4 devices on 2 cores,
 * every process's step time within half the spread it had. */
static bool barrier(World *w)
{
    int cpu = world_cpu();
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pthread_mutex_unlock(&w->mu);
        return false;
    }
    int64_t gen = w->generation;
    if (++w->arrived == w->coll.nlocal) {
        w->arrived = 0;
        memset(w->waiting_on, 0, sizeof w->waiting_on);
        __atomic_store_n(&w->generation, gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w->cv);
    } else if (w->arrived + w->finished >= w->coll.nlocal) {
        /* The others are done: nobody else will arrive. stray is
         * written before the release of aborted: a spinning waiter reads
         * it, without the lock, after it sees aborted. */
        w->coll.stray = true;
        __atomic_store_n(&w->aborted, true, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w->cv);
    } else {
        if (cpu >= 0 && w->on_cpu[cpu] > 0 && ++w->waiting_on[cpu] >= w->on_cpu[cpu]) {
            pthread_mutex_unlock(&w->mu);
            if (spin_wait(w, gen))
                return !__atomic_load_n(&w->aborted, __ATOMIC_ACQUIRE);
            pthread_mutex_lock(&w->mu);
        }
        while (gen == w->generation && !w->aborted)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    bool ok = !w->aborted;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* A device thread bound to its CPU starts (+1) or stops (-1) running
 * there. Only a world of every device (no transport) counts them: across
 * processes a barrier also waits for the leader's exchange with the other
 * hosts, whose ranks may share this machine's CPUs. */
static void world_on_cpu(World *w, int cpu, int32_t delta)
{
    if (cpu < 0 || w->coll.t)
        return;
    pthread_mutex_lock(&w->mu);
    w->on_cpu[cpu] += delta;
    pthread_mutex_unlock(&w->mu);
}

/* A device is done with its program: devices still waiting in a
 * collective for it never get their peer (in an SPMD program every
 * device reaches every collective; one that took another branch or loop
 * trip count did not). */
static void device_finished(World *w)
{
    pthread_mutex_lock(&w->mu);
    w->finished++;
    if (w->arrived > 0 && w->arrived + w->finished >= w->coll.nlocal) {
        w->coll.stray = true; /* before aborted: as in barrier() */
        __atomic_store_n(&w->aborted, true, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

/* The world as coll/ calls it (CollHost.barrier, .abort). */
static bool world_barrier(void *ctx)
{
    return barrier(ctx);
}

static void world_abort_cb(void *ctx)
{
    world_abort(ctx);
}

/* ---- host transfers of a run of several devices ---- */

/* The partitioned program's outfeed (and send to the host) gives every
 * device the whole value: the partitioner has no rule for them and
 * gathers the operand first (the replicate fallback). So device 0's
 * values are the run's and the other devices' copies are dropped (a
 * replay: device 0's own). An infeed cannot be split between devices:
 * refused. */
static IrStatus feed_refused(void *ctx, const IrModule *m, const IrInstr *ins, const IrShape *shape, DevValue **out,
                             IrDiag *d)
{
    (void)ctx;
    (void)shape;
    *out = NULL;
    char msg[200];
    snprintf(msg, sizeof msg, "%s talks to the host, and a value from the host feeds one device: run the reference "
             "or one partition and one replica with --infeed", ir_op_name(ins->op));
    return coll_error(m, ins, d, IR_EUNSUPPORTED, msg);
}

static IrStatus take_dropped(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *v, IrDiag *d)
{
    (void)ctx;
    (void)m;
    (void)ins;
    (void)v;
    (void)d;
    return IR_OK;
}

/* The tuning's fusion: COLL_FUSION_OFF runs every instruction on its own
 * (no fused loops), COLL_FUSION_ALL fuses arrays of any size, and
 * fusion_block N fuses arrays of any size in blocks of N elements through
 * the range kernels (tests use small uneven blocks and `all` so that
 * small models exercise both fused paths). Zero: the executor's
 * defaults. */
static void fusion_from_tuning(const CollTuning *t, DevExecOptions *opt)
{
    if (t->fusion == COLL_FUSION_OFF)
        opt->no_fusion = true;
    if (t->fusion == COLL_FUSION_ALL)
        opt->fuse_small = true;
    if (t->fusion_block > 0 && t->fusion_block <= (1 << 20))
        opt->fusion_block = t->fusion_block;
}

/* Every step runs the SPMD program on the device's shards; between steps
 * the aliased outputs replace their parameters (moved, rt_feed_aliases). */
static void device_main(Device *dev)
{
    DevCollectives coll = coll_device_start(&dev->cd);
    DevExecOptions opt = {
        .partition_id = dev->cd.id % dev->w->coll.n,
        .replica_id = dev->cd.id / dev->w->coll.n,
        .coll = &coll,
        .host = dev->host,
        .max_while_iterations = dev->max_trips,
    };
    fusion_from_tuning(&dev->w->coll.tune, &opt);
    const IrModule *m = dev->c->spmd;
    /* The aliased parameters are handed over (docs/plan.md "Donation"):
     * the executor frees each at its last use, where the output can take
     * its buffer; between steps the output comes back in its place. */
    bool *donated = ts_calloc((size_t)(dev->nargs > 0 ? dev->nargs : 1), sizeof *donated);
    if (donated) {
        ir_alias_donated(m, donated, dev->nargs);
        opt.donated = donated;
        opt.ndonated = dev->nargs;
    }
    int64_t steps = dev->steps > 1 ? dev->steps : 1;
    /* Steps feed the unaliased arguments again unchanged: a weight's
     * packed form for the GEMM serves them all (device/packed.c). */
    if (steps > 1)
        opt.packed = dev_packed_new();
    if (dev->ops) {
        opt.op_times = &dev->ops->times;
        dev->ops->times.waited = &dev->cd.wait_seconds;
    }
    dev->status = IR_OK;
    RtKept kept = {0};
    for (int64_t s = 0; dev->status == IR_OK && s < steps; s++) {
        DevValue *r = NULL;
        if (s + 1 < steps && (dev->status = rt_keep_unaliased(m, dev->args, dev->nargs, &kept, &dev->diag)) != IR_OK)
            break;
        /* The first step pays for first touches: timed only when alone. */
        bool timed = dev->ops && (s > 0 || steps == 1);
        if (dev->ops)
            dev->ops->times.on = timed;
        double t0 = now_seconds();
        dev->status = dev_execute(m, m->entry, dev->nargs, dev->args, &opt, &r, &dev->diag);
        double t1 = now_seconds();
        if (timed) {
            dev->ops->steps++;
            dev->ops->seconds += t1 - t0;
        }
        if (dev->nstep_seconds < STEP_SAMPLES)
            dev->step_seconds[dev->nstep_seconds++] = t1 - t0;
        if (dev->status == IR_OK && dev->on_step && dev->on_step->fn)
            dev->on_step->fn(dev->on_step->ctx, s + 1, steps, t1 - t0, r);
        if (dev->status == IR_OK && s + 1 < steps)
            dev->status = rt_feed_aliases(m, r, dev->args, &kept, &dev->diag);
        else
            dev->result = r;
    }
    rt_kept_release(&kept);
    dev_packed_stats(opt.packed, &dev->packed_weights, &dev->packed_bytes, &dev->packed_runs);
    dev_packed_free(opt.packed);
    ts_free(donated);
    coll_device_stop(&dev->cd);
    if (dev->status != IR_OK)
        world_abort_by(dev->w, dev->cd.id);
    else
        device_finished(dev->w);
}

/* Run the device with allocator al (NULL: none could be had) counting
 * what it holds: its arguments from the start (a replicated one, which
 * the devices share, as a share of its own: dev_value_hold), every value
 * it makes; the most at once is its measured peak. */
static void device_counted(Device *dev, DevAllocator *al)
{
    DevAllocStats before = {0}, after = {0};
    if (al) {
        dev_allocator_stats(al, &before);
        dev_alloc_reset_peak(al);
        for (int32_t k = 0; k < dev->nargs; k++)
            dev_value_hold(&dev->args[k], al);
    }
    dev_alloc_use(al);
    device_main(dev);
    dev_alloc_use(NULL);
    if (al) {
        dev_allocator_stats(al, &after);
        dev->peak = after.value_peak - before.value_bytes;
    }
    dev->buf_before = before;
    dev->buf_after = after;
}

/* A plain thread (no hwloc devices): an unbound allocator of its own
 * ordinal still counts what the device holds. */
static void *device_thread(void *arg)
{
    Device *dev = arg;
    DevAllocator *al = NULL;
    IrDiag quiet = {0};
    if (dev_allocator_get("cpu", (int32_t)(dev->cd.id - dev->w->coll.first), &al, &quiet) != IR_OK)
        al = NULL;
    ir_diag_clear(&quiet);
    device_counted(dev, al);
    return NULL;
}

static IrStatus device_job(DevDevice *dd, void *arg, IrDiag *d)
{
    /* The device's large tensors on its NUMA node (device/alloc.c); an
     * allocator that cannot be had leaves them to malloc (first touch on
     * the bound thread), which is still correct. */
    DevAllocator *al = NULL;
    IrDiag quiet = {0};
    if (dev_device_allocator(dd, "cpu", &al, &quiet) != IR_OK)
        al = NULL;
    ir_diag_clear(&quiet);
    (void)d;
    Device *dev = arg;
    int cpu = dd->bound && dd->npus == 1 ? world_cpu() : -1; /* pinned to one CPU */
    world_on_cpu(dev->w, cpu, 1);
    device_counted(dev, al);
    world_on_cpu(dev->w, cpu, -1);
    return IR_OK; /* the device's own status is read from Device */
}

/* Cut every argument into the shards of partition p. */
static IrStatus shard_args(const PlanCluster *c, const RtArgs *args, int64_t p, RtArgs *out, IrDiag *d)
{
    out->nargs = args->nargs;
    out->args = ts_calloc((size_t)(args->nargs > 0 ? args->nargs : 1), sizeof(DevValue *));
    if (!out->args)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int32_t k = 0; k < args->nargs; k++) {
        IrStatus st = rt_shard_value(args->args[k], plan_param_sharding(c, k), p, &out->args[k], d);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* The sharding of the value at idx inside a value of `shape` sharded sh
 * (NULL: no such value, *valid false; or OOM, *valid true). */
static const IrSharding *sharding_at(IrArena *a, const IrSharding *sh, const IrShape *shape, const IrShapeIndex *idx,
                                     bool *valid)
{
    *valid = true;
    for (int32_t j = 0; sh && j < idx->n; j++) {
        int64_t e = idx->v[j];
        if (!(*valid = shape->type == IR_TUPLE && e >= 0 && e < shape->ntuple))
            return NULL;
        sh = shd_tuple_element(a, sh, shape, (int32_t)e);
        shape = &shape->tuple[e];
    }
    return sh;
}

/* --steps: the SPMD module's aliases must be moveable shard for shard:
 * shapes checked by rt_check_aliases on the per-device program, shardings
 * here (an output sharded unlike its parameter, or the value inside a
 * tuple parameter it names, would need a reshard through the whole value:
 * refused, naming both). */
static IrStatus check_step_aliases(const PlanCluster *c, IrDiag *d)
{
    IrArena *a = ir_arena_new();
    IrStatus st = a ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    /* The logical shapes first (the module's own, when the plan has it),
     * then the shardings: a mismatch also makes the shard shapes differ,
     * and the shardings say why. Bad indices are left to rt_check_aliases. */
    if (st == IR_OK && c->src)
        st = rt_check_aliases(c->src, d);
    for (int32_t k = 0; st == IR_OK && k < c->spmd->nalias; k++) {
        const IrAlias *al = &c->spmd->alias[k];
        bool valid = al->param_number >= 0 && al->param_number < c->nparam, pvalid = valid;
        if (!valid || !c->param_shape)
            continue;
        const IrSharding *os = sharding_at(a, plan_root_sharding(c), &c->out_shape, &al->output_index, &valid);
        const IrSharding *ps = sharding_at(a, plan_param_sharding(c, (int32_t)al->param_number),
                                           &c->param_shape[al->param_number], &al->param_index, &pvalid);
        if (!valid || !pvalid)
            continue;
        if (!os || !ps) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        } else if (!ir_sharding_equal(os, ps)) {
            char *x = ir_sharding_str(os), *y = ir_sharding_str(ps);
            bool placed = al->pos.line > 0; /* at the alias in the header, when parsed */
            st = ir_error(d, IR_EUNSUPPORTED, placed ? c->spmd->file : NULL, placed ? c->spmd->src : NULL,
                          placed ? al->pos : (IrPos){0, 0},
                          "--steps: the output aliased to parameter %lld%s is sharded %s but the parameter %s; "
                          "the partitioned program cannot feed it to the next step without a reshard",
                          (long long)al->param_number, al->param_index.n ? " (a value inside it)" : "",
                          x ? x : "?", y ? y : "?");
            ts_free(x);
            ts_free(y);
        }
    }
    ir_arena_free(a);
    return st == IR_OK ? rt_check_aliases(c->spmd, d) : st;
}

/* Run every local device: on executor threads bound to their cores
 * (device.h), or on plain threads when hwloc gives no devices. */
static IrStatus start_devices(World *w, Device *devs, const RtRunOptions *o, RtRunStats *stats, IrDiag *d)
{
    DevTopology *topo = NULL;
    DevDevices *set = NULL;
    IrDiag hd = {0};
    DevDevicesOptions dopt = {.no_bind = o && o->no_bind};
    bool have = w->coll.nlocal <= DEV_MAX_LOCAL_DEVICES && dev_topology_load(&topo, &hd) == IR_OK &&
                dev_devices_create(topo, (int32_t)w->coll.nlocal, &dopt, &set, &hd) == IR_OK;
    if (stats) {
        stats->ndevices = (int32_t)w->coll.nlocal;
        stats->bind_note = have ? NULL : "hwloc gave no devices; plain threads";
    }
    if (have) {
        void **args = ts_calloc((size_t)w->coll.nlocal, sizeof *args);
        IrStatus st = args ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        for (int64_t k = 0; args && k < w->coll.nlocal; k++)
            args[k] = &devs[k];
        if (st == IR_OK)
            st = dev_devices_run_all(set, device_job, args, d);
        for (int32_t k = 0; stats && k < set->n; k++) {
            DevDevice *dd = &set->dev[k];
            stats->nbound += dd->bound;
            if (!dd->bound && !stats->bind_note)
                stats->bind_note = dd->bind_note;
            DevAllocator *al = NULL;
            if (k == 0 && dev_device_allocator(dd, "cpu", &al, &hd) == IR_OK) {
                DevAllocStats as;
                dev_allocator_stats(al, &as);
                stats->membind = as.membind;
                stats->numa_node = as.numa_node;
                stats->membind_errno = as.membind_errno;
            }
        }
        if (stats)
            stats->blas_threads = set->blas_threads;
        ts_free(args);
        dev_devices_free(set);
        ir_diag_clear(&hd);
        return st;
    }
    ir_diag_clear(&hd);
    pthread_t *th = ts_calloc((size_t)w->coll.nlocal, sizeof *th);
    if (!th)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    IrStatus st = IR_OK;
    int64_t started = 0;
    for (; started < w->coll.nlocal; started++)
        if (pthread_create(&th[started], NULL, device_thread, &devs[started]) != 0) {
            world_abort(w);
            st = ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "cannot start device thread");
            break;
        }
    for (int64_t k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    ts_free(th);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A step lasts as long as its slowest local device: the first step's
 * time, and the median of the next ones (warm: buffers reused). */
static void step_stats(const Device *devs, int64_t nlocal, RtRunStats *stats)
{
    double slow[STEP_SAMPLES];
    int32_t n = devs[0].nstep_seconds;
    for (int32_t s = 0; s < n; s++) {
        slow[s] = 0;
        for (int64_t k = 0; k < nlocal; k++)
            if (s < devs[k].nstep_seconds && devs[k].step_seconds[s] > slow[s])
                slow[s] = devs[k].step_seconds[s];
    }
    stats->nsteps = n;
    stats->stream_bound = devs[0].w->coll.tune.stream_bound;
    coll_stream_verdicts(stats->stream_verdict);
    stats->first_step_seconds = n > 0 ? slow[0] : 0;
    if (n > 1) {
        qsort(slow + 1, (size_t)(n - 1), sizeof *slow, cmp_double);
        stats->warm_step_seconds = (n - 1) % 2 ? slow[1 + (n - 1) / 2]
                                               : (slow[(n - 1) / 2] + slow[(n - 1) / 2 + 1]) / 2;
    }
}

/* RtRunOptions.op_times: a table per local device, owned by the stats
 * (the devices fill them). */
static IrStatus op_tables(const PlanCluster *c, Device *devs, int64_t nlocal, RtRunStats *stats, IrDiag *d)
{
    if (!(stats->ops = ts_calloc((size_t)nlocal, sizeof *stats->ops)))
        return ir_oom(d, NULL);
    stats->nops = (int32_t)nlocal;
    for (int64_t k = 0; k < nlocal; k++) {
        if (dev_op_times_init(&stats->ops[k].times, c->spmd) != IR_OK)
            return ir_oom(d, NULL);
        devs[k].ops = &stats->ops[k];
    }
    return IR_OK;
}

void rt_run_stats_free(RtRunStats *s)
{
    for (int32_t k = 0; s && k < s->nops; k++)
        dev_op_times_free(&s->ops[k].times);
    if (s) {
        ts_free(s->ops);
        s->ops = NULL;
        s->nops = 0;
    }
}

static void free_device(Device *dev)
{
    for (int32_t k = 0; k < dev->nargs && dev->args; k++)
        dev_value_unref(dev->args[k]);
    ts_free(dev->args);
    coll_device_free(&dev->cd);
    dev_value_unref(dev->result);
    ir_diag_clear(&dev->diag);
}

IrStatus rt_run_devices(const PlanCluster *c, RtArgs *shards, int64_t first, int64_t nlocal, CollTransport *t,
                        const RtRunOptions *o, RtRunStats *stats, DevValue **results, IrDiag *d)
{
    World w = {.first_failed = -1};
    int64_t n = c->num_partitions, ndev = c->num_partitions * c->num_replicas;
    int64_t steps = o && o->steps > 1 ? o->steps : 1;
    if (stats)
        *stats = (RtRunStats){0};
    IrStatus st = IR_OK;
    if (o && o->op_times && !stats)
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "op times asked for without stats to hold them");
    else if (ndev < 1 || ndev > IR_MAX_DEVICES || nlocal < 1 || first < 0 || first + nlocal > ndev ||
        (!t && nlocal != ndev))
        st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "devices [%lld, %lld) of %lld: out of range",
                      (long long)first, (long long)(first + nlocal), (long long)ndev);
    if (st == IR_OK && steps > 1)
        st = check_step_aliases(c, d);
    Device *devs = st == IR_OK ? ts_calloc((size_t)nlocal, sizeof *devs) : NULL;
    if (st == IR_OK && !devs)
        st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    if (st == IR_OK)
        st = coll_host_init(&w.coll, n, c->num_replicas, first, nlocal, t, o ? o->tune : NULL, d);
    w.coll.barrier = world_barrier;
    w.coll.abort = world_abort_cb;
    w.coll.ctx = &w;
    /* Several devices: device 0 gives the run its outfeeds (above). */
    DevHostTransfers lead = {0}, other = {.feed = feed_refused, .take = take_dropped};
    if (o && o->host)
        lead = (DevHostTransfers){.ctx = o->host->ctx, .feed = feed_refused, .take = o->host->take};
    /* The devices take the shards (also on failure: freed with them). */
    for (int64_t k = 0; devs && k < nlocal; k++) {
        const DevHostTransfers *host = !o || !o->host ? NULL : ndev == 1 ? o->host : first + k == 0 ? &lead : &other;
        devs[k] = (Device){.cd = {.w = &w.coll, .id = first + k}, .w = &w, .c = c, .steps = steps, .host = host,
                           .on_step = o && first + k == 0 ? o->on_step : NULL,
                           .max_trips = o ? o->max_trips : 0,
                           .args = shards[k].args, .nargs = shards[k].nargs};
        shards[k] = (RtArgs){0};
    }
    for (int64_t k = 0; !devs && k < nlocal; k++)
        rt_args_free(&shards[k]);
    if (st == IR_OK && o && o->op_times && stats)
        st = op_tables(c, devs, nlocal, stats, d);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    if (st == IR_OK)
        st = start_devices(&w, devs, o, stats, d);
    /* The first failing device's error, named; a root cause is preferred
     * over "aborted: another device failed". */
    int64_t pick = -1;
    if (st == IR_OK && w.first_failed >= first && w.first_failed < first + nlocal &&
        devs[w.first_failed - first].status != IR_OK)
        pick = w.first_failed - first;
    bool root_known = pick >= 0;
    for (int64_t k = 0; st == IR_OK && !root_known && k < nlocal; k++)
        if (devs[k].status != IR_OK && (pick < 0 || (devs[pick].status == IR_ERUNTIME && devs[k].status != IR_ERUNTIME)))
            pick = k;
    if (pick >= 0) {
        IrDiag *e = &devs[pick].diag;
        int64_t id = devs[pick].cd.id;
        st = ir_error(d, devs[pick].status, e->file, NULL, e->pos, "device %lld (replica %lld, partition %lld): %s",
                      (long long)id, (long long)(id / n), (long long)(id % n), e->msg ? e->msg : "failed");
        if (e->line_text && d->line_text == NULL)
            d->line_text = ts_strdup(e->line_text);
    }
    for (int64_t k = 0; st == IR_OK && k < nlocal; k++) {
        results[k] = devs[k].result;
        devs[k].result = NULL;
        if (stats) {
            if (devs[k].cd.coll_seconds > stats->coll_seconds)
                stats->coll_seconds = devs[k].cd.coll_seconds;
            stats->coll_calls = devs[k].cd.coll_calls;
            if (k < RT_STATS_DEVICES)
                stats->device_peak[k] = devs[k].peak;
            if (devs[k].peak > stats->peak_max)
                stats->peak_max = devs[k].peak;
            const DevAllocStats *b = &devs[k].buf_before, *e = &devs[k].buf_after;
            stats->buf_allocs += e->nallocs - b->nallocs;
            stats->buf_reused += e->nreused - b->nreused;
            stats->buf_live_bytes += e->live_bytes;
            stats->buf_kept_bytes += e->kept_bytes;
            stats->packed_weights += devs[k].packed_weights;
            stats->packed_bytes += (int64_t)devs[k].packed_bytes;
            stats->packed_runs += devs[k].packed_runs;
        }
    }
    if (st == IR_OK && stats && devs)
        step_stats(devs, nlocal, stats);
    for (int64_t k = 0; devs && k < nlocal; k++)
        free_device(&devs[k]);
    coll_host_free(&w.coll);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    ts_free(devs);
    return st;
}

IrStatus rt_run_local(const PlanCluster *c, const RtArgs *args, const RtRunOptions *o, RtRunStats *stats,
                      DevValue **out, IrDiag *d)
{
    *out = NULL;
    int64_t ndev = c->num_partitions * c->num_replicas;
    if (ndev < 1 || ndev > IR_MAX_DEVICES)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "device count %lld out of range", (long long)ndev);
    DevValue **res = ts_calloc((size_t)ndev, sizeof *res);
    RtArgs *shards = ts_calloc((size_t)ndev, sizeof *shards);
    IrStatus st = res && shards ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int64_t k = 0; st == IR_OK && k < ndev; k++)
        st = shard_args(c, args, k % c->num_partitions, &shards[k], d);
    if (st == IR_OK)
        st = rt_run_devices(c, shards, 0, ndev, NULL, o, stats, res, d);
    /* Replica 0's partitions hold the result; the others are equal. */
    if (st == IR_OK)
        st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, res, out, d);
    for (int64_t k = 0; k < ndev; k++) {
        if (res)
            dev_value_unref(res[k]);
        if (shards)
            rt_args_free(&shards[k]);
    }
    ts_free(res);
    ts_free(shards);
    return st;
}
