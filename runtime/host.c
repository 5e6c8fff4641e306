/*
 * host.c: programs with host work. The module is split by cluster/ into a
 * host program and device clusters; every cluster is partitioned on its own
 * and, when the host program reaches its call, run on the devices: the
 * call's operands are cut by the cluster's split trees, its results put
 * back together by its concat trees. Host custom-calls run here.
 *
 * Where the host program runs: in the process that runs the devices (one
 * process, or every rank under MPI: the host program is deterministic, so
 * every rank computes the same host values and reaches the same cluster
 * calls in the same order, and no broadcast of host values is needed; only
 * rank 0 prints or saves).
 */
#include <assert.h>
#include "program.h"
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- host targets ---- */

/* The backend_config of tessel_save is the file name, quoted or bare. */
static char *save_path(const IrInstr *ins)
{
    const char *b = ins->a.backend_config;
    if (!b)
        return NULL;
    size_t n = strlen(b);
    if (n >= 2 && b[0] == '"' && b[n - 1] == '"') {
        b++;
        n -= 2;
    }
    char *p = ts_malloc(n + 1);
    if (p) {
        memcpy(p, b, n);
        p[n] = 0;
    }
    return p;
}

/* ctx: NULL, or a bool that is false on the ranks that must stay silent
 * (under MPI every rank runs the host program; only rank 0 prints and
 * saves). */
static IrStatus host_call(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                          DevValue **out, IrDiag *d)
{
    bool speak = !ctx || *(const bool *)ctx;
    const char *t = ins->a.custom_call_target ? ins->a.custom_call_target : "";
    bool print = strcmp(t, "tessel_print") == 0, save = strcmp(t, "tessel_save") == 0;
    if (!print && !save)
        return IR_EUNSUPPORTED;
    if (nopnd != 1 || operands[0]->shape.type == IR_TUPLE)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos, "%s: %s takes one array operand", ins->name, t);
    if (!speak) {
        /* silent rank: same result, no output */
    } else if (print) {
        char *s = rt_value_summary(operands[0]);
        printf("%s: %s\n", ins->name, s ? s : "(out of memory)");
        fflush(stdout);
        ts_free(s);
    } else {
        char *path = save_path(ins);
        if (!path || !*path) {
            ts_free(path);
            return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos,
                            "%s: tessel_save needs the file name in backend_config", ins->name);
        }
        IrStatus st = rt_npy_write(path, &operands[0]->shape, operands[0]->data, d);
        ts_free(path);
        if (st != IR_OK)
            return st;
    }
    *out = dev_value_ref(operands[0]);
    return IR_OK;
}

static const DevCustomCalls host_targets = {.ctx = NULL, .call = host_call};

const DevCustomCalls *rt_host_targets(void)
{
    return &host_targets;
}

IrStatus rt_check_custom_calls(const IrModule *m, IrDiag *d)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            const char *t = ins->a.custom_call_target;
            if (ins->op != OP_CUSTOM_CALL || dev_builtin_target(t))
                continue;
            if (ir_str_index(t, clu_default_host_targets) < 0)
                return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                                "%s: custom-call target \"%s\" is not registered (tessel runs XLA's "
                                "targets listed in docs/cli.md and its host targets tessel_print and "
                                "tessel_save)",
                                ins->name, t ? t : "");
        }
    return IR_OK;
}

/* ---- running ---- */

/* How the host program reaches the devices: all in this process (t NULL),
 * or this rank's devices [first, first + nlocal) with the transport. */
typedef struct HostRun {
    const PlanProgram *p;
    RtTransport *t;
    int64_t first, nlocal;
    int64_t max_trips;       /* while loop bound of every cluster run (0: none) */
} HostRun;

/* Every rank's root shards to every rank (the host program continues on
 * each), then the full value from partitions 0..N-1 (replica 0). */
static IrStatus allgather_results(const HostRun *h, const PlanCluster *c, DevValue **local, DevValue **out,
                                  IrDiag *d)
{
    int32_t nleaf = ir_shape_leaf_count(&local[0]->shape);
    size_t b = 0;
    for (int32_t l = 0; l < nleaf; l++)
        b += (size_t)dev_value_leaf(local[0], l)->nbytes;
    int64_t ndev = c->num_partitions * c->num_replicas;
    uint8_t *send = ts_malloc(b * (size_t)h->nlocal + 1), *recv = ts_malloc(b * (size_t)ndev + 1);
    DevValue **parts = ts_calloc((size_t)c->num_partitions, sizeof *parts);
    IrStatus st = send && recv && parts ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    size_t o = 0;
    for (int64_t k = 0; st == IR_OK && k < h->nlocal; k++)
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(local[k], l);
            if (v->nbytes)
                memcpy(send + o, v->data, (size_t)v->nbytes);
            o += (size_t)v->nbytes;
        }
    if (st == IR_OK)
        st = rt_transport_allgather(h->t, send, b * (size_t)h->nlocal, recv, d);
    for (int64_t q = 0; st == IR_OK && q < c->num_partitions; q++) {
        if (!(parts[q] = dev_value_clone(local[0]))) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        size_t off = (size_t)q * b;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(parts[q], l);
            if (v->nbytes)
                memcpy(v->data, recv + off, (size_t)v->nbytes);
            off += (size_t)v->nbytes;
        }
    }
    if (st == IR_OK)
        st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, parts, out, d);
    for (int64_t q = 0; parts && q < c->num_partitions; q++)
        dev_value_unref(parts[q]);
    ts_free(parts);
    ts_free(send);
    ts_free(recv);
    return st;
}

/* A cluster on this rank's devices: cut the call's operands into the local
 * devices' shards, run, and bring the full results to every rank. */
static IrStatus run_cluster_here(const HostRun *h, const PlanCluster *c, int32_t nopnd, DevValue **operands,
                                 const RtRunOptions *o, DevValue **out, IrDiag *d)
{
    /* the host program was verified with the cluster computation as the
     * call's to_apply: one operand per cluster parameter */
    assert(nopnd == c->nparam);
    RtArgs *shards = ts_calloc((size_t)h->nlocal, sizeof *shards);
    DevValue **local = ts_calloc((size_t)h->nlocal, sizeof *local);
    IrStatus st = shards && local ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int64_t k = 0; st == IR_OK && k < h->nlocal; k++) {
        shards[k].nargs = nopnd;
        shards[k].args = ts_calloc((size_t)(nopnd > 0 ? nopnd : 1), sizeof(DevValue *));
        if (!shards[k].args) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        for (int32_t a = 0; st == IR_OK && a < nopnd; a++)
            st = rt_shard_value(operands[a], plan_param_sharding(c, a), (h->first + k) % c->num_partitions,
                                &shards[k].args[a], d);
    }
    if (st == IR_OK)
        st = rt_run_devices(c, shards, h->first, h->nlocal, h->t, o, NULL, local, d);
    if (st == IR_OK)
        st = allgather_results(h, c, local, out, d);
    for (int64_t k = 0; shards && k < h->nlocal; k++)
        rt_args_free(&shards[k]);
    for (int64_t k = 0; local && k < h->nlocal; k++)
        dev_value_unref(local[k]);
    ts_free(shards);
    ts_free(local);
    return st;
}

static IrStatus cluster_call(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                             DevValue **out, IrDiag *d)
{
    const HostRun *h = ctx;
    const PlanProgram *p = h->p;
    const char *num = ir_frontend_attr(ins, "_tessel_cluster");
    char *end;
    long k = num ? strtol(num[0] == '"' ? num + 1 : num, &end, 10) : -1;
    if (k < 0 || k >= p->ncluster)
        return ir_error(d, IR_EINTERNAL, m->file, m->src, ins->pos, "%s: no cluster %s", ins->name, num ? num : "?");
    RtRunOptions o = {.max_trips = h->max_trips};
    if (!h->t) {
        RtArgs args = {.nargs = nopnd, .args = operands};
        return rt_run_local_ex(&p->cluster[k], &args, &o, NULL, out, d);
    }
    rt_transport_checkin(h->t, k);
    return run_cluster_here(h, &p->cluster[k], nopnd, operands, &o, out, d);
}

/* The host program `steps` times (< 2: once). Rule (as rt_run_reference_steps):
 * after step s, the outputs the host module's input_output_alias names
 * become parameters of step s+1 (moved, not copied); the others keep their
 * values. Under MPI every rank feeds the same values: each has every
 * cluster's full results. The caller's args are left as they were. */
static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static IrStatus run_host_steps(const PlanProgram *p, const RtArgs *args, int64_t steps, const RtStepHook *hook,
                               const DevExecOptions *opt, DevValue **out, IrDiag *d)
{
    *out = NULL;
    if (steps < 2) {
        double t0 = seconds_now();
        IrStatus st = dev_execute(p->host, p->host->entry, args->nargs, args->args, opt, out, d);
        if (st == IR_OK && hook && hook->fn)
            hook->fn(hook->ctx, 1, 1, seconds_now() - t0, *out);
        return st;
    }
    IrStatus st = rt_check_aliases(p->host, d);
    if (st != IR_OK)
        return st;
    DevValue **cur = ts_calloc((size_t)(args->nargs > 0 ? args->nargs : 1), sizeof *cur);
    if (!cur)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int32_t k = 0; k < args->nargs; k++)
        cur[k] = dev_value_ref(args->args[k]);
    for (int64_t s = 0; st == IR_OK && s < steps; s++) {
        DevValue *r = NULL;
        double t0 = seconds_now();
        st = dev_execute(p->host, p->host->entry, args->nargs, cur, opt, &r, d);
        if (st == IR_OK && hook && hook->fn)
            hook->fn(hook->ctx, s + 1, steps, seconds_now() - t0, r);
        if (st == IR_OK && s + 1 < steps)
            rt_feed_aliases(p->host, r, cur);
        else
            *out = r;
    }
    for (int32_t k = 0; k < args->nargs; k++)
        dev_value_unref(cur[k]);
    ts_free(cur);
    if (st != IR_OK) {
        dev_value_unref(*out);
        *out = NULL;
    }
    return st;
}

IrStatus rt_run_program_local(const PlanProgram *p, const RtArgs *args, int64_t steps, int64_t max_trips,
                              const RtStepHook *hook, DevValue **out, IrDiag *d)
{
    if (!p->host) { /* no host work: the program is cluster 0 */
        RtRunOptions o = {.steps = steps, .max_trips = max_trips, .on_step = hook};
        return rt_run_local_ex(&p->cluster[0], args, &o, NULL, out, d);
    }
    HostRun h = {.p = p, .max_trips = max_trips};
    DevCustomCalls clusters = {.ctx = &h, .call = cluster_call};
    DevExecOptions opt = {.custom = rt_host_targets(), .cluster_calls = &clusters,
                          .max_while_iterations = max_trips};
    return run_host_steps(p, args, steps, hook, &opt, out, d);
}

IrStatus rt_run_program_mpi(const PlanProgram *p, const RtArgs *args, int64_t steps, int64_t max_trips,
                            const RtStepHook *hook,
                            RtTransport *t, int64_t first, int64_t nlocal, DevValue **out, IrDiag *d)
{
    HostRun h = {.p = p, .t = t, .first = first, .nlocal = nlocal, .max_trips = max_trips};
    if (!p->host) {
        RtRunOptions o = {.steps = steps, .max_trips = max_trips, .on_step = hook};
        return run_cluster_here(&h, &p->cluster[0], args->nargs, args->args, &o, out, d);
    }
    bool speak = rt_mpi_rank(t) == 0;
    DevCustomCalls host = {.ctx = &speak, .call = host_call};
    DevCustomCalls clusters = {.ctx = &h, .call = cluster_call};
    DevExecOptions opt = {.custom = &host, .cluster_calls = &clusters, .max_while_iterations = max_trips};
    /* Every rank runs the host program; rank 0 alone reports its steps. */
    return run_host_steps(p, args, steps, speak ? hook : NULL, &opt, out, d);
}
