/*
 * host_program.c: running the host program of a compiled program. The
 * module is split by cluster/ into a host program and device clusters;
 * every cluster is partitioned on its own and, when the host program
 * reaches its call, run on the devices: the call's operands are cut by the
 * cluster's split trees, its results put back together by its concat trees.
 * Host custom-calls run here.
 *
 * Where the host program runs: in the process that runs the devices (one
 * process, or every rank under MPI: the host program is deterministic, so
 * every rank computes the same host values and reaches the same cluster
 * calls in the same order, and no broadcast of host values is needed; only
 * rank 0 prints or saves).
 */
#include <assert.h>
#include "program.h"
#include "run_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- host targets ---- */

/* The backend_config of tessel_save is the name, quoted or bare, with or
 * without ".npy" (NAME and NAME.npy both write NAME.npy): [start, start +
 * len) of b. */
static void save_name_span(const char *b, size_t *start, size_t *len)
{
    size_t n = strlen(b);
    *start = 0;
    if (n >= 2 && b[0] == '"' && b[n - 1] == '"') {
        *start = 1;
        n -= 2;
    }
    if (n > 4 && memcmp(b + *start + n - 4, ".npy", 4) == 0)
        n -= 4;
    *len = n;
}

const char *rt_save_name_problem(const char *name, size_t len)
{
    if (len == 0)
        return "the name is empty";
    if (len > 200)
        return "the name is longer than 200 bytes";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == 0)
            return "the name holds a NUL byte";
        if (c < 0x20 || c == 0x7f)
            return "the name holds a control character";
        if (c == '/' || c == '\\')
            return "the name holds a path separator";
    }
    if (memmem(name, len, "..", 2))
        return "the name holds '..'";
    if (name[0] == '.')
        return "the name starts with '.' (hidden files are the run's own: its lock and temporaries)";
    /* output_<i>, outfeed_<i> and outputs.json are the run's own files. */
    static const char *const reserved[] = {"output_", "outfeed_"};
    for (size_t k = 0; k < sizeof reserved / sizeof *reserved; k++)
        if (len >= strlen(reserved[k]) && memcmp(name, reserved[k], strlen(reserved[k])) == 0)
            return "output_* and outfeed_* are the names of the run's outputs";
    if (len == 7 && memcmp(name, "outputs", 7) == 0)
        return "outputs is the name of the run's manifest";
    return NULL;
}

void rt_saves_free(RtSaves *s)
{
    for (int32_t i = 0; i < s->n; i++) {
        ts_free(s->names[i]);
        dev_value_unref(s->values[i]);
    }
    ts_free(s->names);
    ts_free(s->values);
    memset(s, 0, sizeof *s);
}

/* Keep v under `name` (len bytes): a later save of the same name replaces
 * the earlier value (a save in a loop body keeps the last step's). */
static IrStatus keep_save(RtSaves *s, const char *name, size_t len, DevValue *v)
{
    for (int32_t i = 0; i < s->n; i++)
        if (strlen(s->names[i]) == len && memcmp(s->names[i], name, len) == 0) {
            dev_value_unref(s->values[i]);
            s->values[i] = dev_value_ref(v);
            return IR_OK;
        }
    if (s->n == s->cap) {
        int32_t cap = s->cap ? 2 * s->cap : 4;
        char **nn = ts_realloc(s->names, (size_t)cap * sizeof *nn);
        if (nn)
            s->names = nn;
        DevValue **nv = nn ? ts_realloc(s->values, (size_t)cap * sizeof *nv) : NULL;
        if (!nv)
            return IR_ENOMEM;
        s->values = nv;
        s->cap = cap;
    }
    char *c = ts_malloc(len + 1);
    if (!c)
        return IR_ENOMEM;
    memcpy(c, name, len);
    c[len] = 0;
    s->names[s->n] = c;
    s->values[s->n++] = dev_value_ref(v);
    return IR_OK;
}

/* Check tessel_save's name at `ins`: IR_EINPUT at its position. */
static IrStatus check_save(const IrModule *m, const IrInstr *ins, size_t *start, size_t *len, IrDiag *d)
{
    const char *b = ins->a.x->backend_config;
    if (!b)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos,
                        "%s: tessel_save needs the output's name in backend_config (it writes NAME.npy "
                        "inside --output-dir)", ins->name);
    save_name_span(b, start, len);
    const char *why = rt_save_name_problem(b + *start, *len);
    if (why)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos,
                        "%s: tessel_save names an output, NAME for NAME.npy inside --output-dir, never a "
                        "path: %s", ins->name, why);
    return IR_OK;
}

/* ctx: an RtHostCtx. Under MPI every rank runs the host program; only the
 * rank that speaks prints. Saves are kept on every rank (the same values;
 * rank 0's are the run's outputs). */
static IrStatus host_call(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                          DevValue **out, IrDiag *d)
{
    const RtHostCtx *hc = ctx;
    const char *t = ins->a.x->custom_call_target ? ins->a.x->custom_call_target : "";
    bool print = strcmp(t, "tessel_print") == 0, save = strcmp(t, "tessel_save") == 0;
    if (!print && !save)
        return IR_EUNSUPPORTED;
    if (nopnd != 1 || operands[0]->shape.type == IR_TUPLE)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos, "%s: %s takes one array operand", ins->name, t);
    if (print && !hc->silent) {
        char *s = rt_value_summary(operands[0]);
        printf("%s: %s\n", ins->name, s ? s : "(out of memory)");
        fflush(stdout);
        ts_free(s);
    } else if (save) {
        size_t start, len;
        IrStatus st = check_save(m, ins, &start, &len, d);
        if (st != IR_OK)
            return st;
        if (hc->saves && keep_save(hc->saves, ins->a.x->backend_config + start, len, operands[0]) != IR_OK)
            return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    *out = dev_value_ref(operands[0]);
    return IR_OK;
}

DevCustomCalls rt_host_calls(RtHostCtx *ctx)
{
    return (DevCustomCalls){.ctx = ctx, .call = host_call};
}

static const char *host_target_at(void *ctx, int32_t i)
{
    (void)ctx;
    return clu_default_host_targets[i];
}

IrStatus rt_check_custom_calls(const IrModule *m, IrDiag *d)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            const char *t = ins->a.x->custom_call_target;
            if (ins->op == OP_CUSTOM_CALL && ir_python_callback(t) && !ir_resultless_callback(ins))
                return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                                "%s: custom-call target \"%s\" is a JAX Python callback with results "
                                "(jax.pure_callback, io_callback): tessel runs no Python, so it cannot compute "
                                "them (callbacks without results, such as jax.debug.print, are skipped)",
                                ins->name, t);
            if (ins->op != OP_CUSTOM_CALL || dev_builtin_target(t))
                continue;
            size_t start, len;
            if (t && strcmp(t, "tessel_save") == 0) {
                IrStatus st = check_save(m, ins, &start, &len, d);
                if (st != IR_OK)
                    return st;
            }
            char from[256];
            bool known = ir_instr_origin(m, ins, from, sizeof from);
            if (ir_str_index(t, clu_default_host_targets) < 0) {
                int32_t nhost = 0;
                while (clu_default_host_targets[nhost])
                    nhost++;
                const char *near = dev_builtin_target_nearest(t);
                if (!near && t)
                    near = ir_nearest(t, strlen(t), nhost, host_target_at, NULL);
                return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                                "%s: custom-call target \"%s\" is not registered (tessel runs XLA's "
                                "targets listed in docs/cli.md and its host targets tessel_print and "
                                "tessel_save)%s%s%s%s%s%s",
                                ins->name, t ? t : "", known ? " (from " : "", from, known ? ")" : "",
                                near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
            }
        }
    return IR_OK;
}

/* ---- running ---- */

/* How the host program reaches the devices: all in this process (t NULL),
 * or this rank's devices [first, first + nlocal) with the transport. */
typedef struct HostRun {
    const PlanProgram *p;
    CollMpi *t;
    int64_t first, nlocal;
    int64_t max_trips;       /* while loop bound of every cluster run (0: none) */
    const CollTuning *tune;  /* the run's (NULL: defaults) */
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
        st = coll_mpi_allgather(h->t, send, b * (size_t)h->nlocal, recv, d);
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
        st = rt_run_devices(c, shards, h->first, h->nlocal, coll_mpi_transport(h->t), o, NULL, local, d);
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
    RtRunOptions o = {.max_trips = h->max_trips, .tune = h->tune};
    if (!h->t) {
        RtArgs args = {.nargs = nopnd, .args = operands};
        return rt_run_local(&p->cluster[k], &args, &o, NULL, out, d);
    }
    coll_mpi_checkin(h->t, k);
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
    RtKept kept = {0};
    for (int64_t s = 0; st == IR_OK && s < steps; s++) {
        DevValue *r = NULL;
        if (s + 1 < steps)
            st = rt_keep_unaliased(p->host, cur, args->nargs, &kept, d);
        double t0 = seconds_now();
        if (st == IR_OK)
            st = dev_execute(p->host, p->host->entry, args->nargs, cur, opt, &r, d);
        if (st == IR_OK && hook && hook->fn)
            hook->fn(hook->ctx, s + 1, steps, seconds_now() - t0, r);
        if (st == IR_OK && s + 1 < steps)
            st = rt_feed_aliases(p->host, r, cur, &kept, d);
        else
            *out = r;
    }
    rt_kept_release(&kept);
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
                              const RtStepHook *hook, const CollTuning *tune, DevValue **out, IrDiag *d)
{
    if (!p->host) { /* no host work: the program is cluster 0 */
        RtRunOptions o = {.steps = steps, .max_trips = max_trips, .on_step = hook, .tune = tune};
        return rt_run_local(&p->cluster[0], args, &o, NULL, out, d);
    }
    HostRun h = {.p = p, .max_trips = max_trips, .tune = tune};
    RtHostCtx hc = {.silent = false, .saves = args->saves};
    DevCustomCalls host = rt_host_calls(&hc);
    DevCustomCalls clusters = {.ctx = &h, .call = cluster_call};
    DevExecOptions opt = {.custom = &host, .cluster_calls = &clusters, .max_while_iterations = max_trips};
    return run_host_steps(p, args, steps, hook, &opt, out, d);
}

IrStatus rt_run_program_mpi(const PlanProgram *p, const RtArgs *args, int64_t steps, int64_t max_trips,
                            const RtStepHook *hook, const CollTuning *tune,
                            CollMpi *t, int64_t first, int64_t nlocal, DevValue **out, IrDiag *d)
{
    HostRun h = {.p = p, .t = t, .first = first, .nlocal = nlocal, .max_trips = max_trips, .tune = tune};
    if (!p->host) {
        RtRunOptions o = {.steps = steps, .max_trips = max_trips, .on_step = hook, .tune = tune};
        return run_cluster_here(&h, &p->cluster[0], args->nargs, args->args, &o, out, d);
    }
    RtHostCtx hc = {.silent = coll_mpi_rank(t) != 0, .saves = args->saves};
    DevCustomCalls host = rt_host_calls(&hc);
    DevCustomCalls clusters = {.ctx = &h, .call = cluster_call};
    DevExecOptions opt = {.custom = &host, .cluster_calls = &clusters, .max_while_iterations = max_trips};
    /* Every rank runs the host program; rank 0 alone reports its steps. */
    return run_host_steps(p, args, steps, hc.silent ? NULL : hook, &opt, out, d);
}
