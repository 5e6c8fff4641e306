/*
 * run.c: running a plan on the devices of this process, and the
 * reference; TsOutputs and what can be done with them (read into the
 * caller's buffers, write as .npy, summarise); the measurements of
 * TsRunOptions.stats as the command line prints them.
 */
#include "api_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

IrStatus api_check_run(const TsRunOptions *o, IrDiag *d)
{
    if (!o)
        return IR_OK;
    const char *bad = o->ninputs < 0                     ? "ninputs is negative"
                      : o->ninputs > 0 && !o->inputs     ? "inputs is NULL with ninputs > 0"
                      : o->ninfeeds < 0                  ? "ninfeeds is negative"
                      : o->ninfeeds > 0 && !o->infeeds   ? "infeeds is NULL with ninfeeds > 0"
                      : o->steps < 0                     ? "steps is negative (0 or 1: one step)"
                      : o->steps > TS_MAX_STEPS          ? "steps is too large"
                      : !api_heartbeat_ok(o->heartbeat_seconds) ? "heartbeat_seconds is below the minimum"
                      : o->nagree < 0 || o->nagree > TS_AGREE_MAX ? "nagree is outside [0, TS_AGREE_MAX]"
                      : o->nagree > 0 && !o->agree                ? "agree is NULL with nagree > 0"
                      : o->tuning.sgemm < TS_SGEMM_PROBE || o->tuning.sgemm > TS_SGEMM_AVX512
                          ? "tuning.sgemm is not a TsSgemm"
                      : o->stats_ops < 0 ? "stats_ops is negative (0: no per-instruction times)"
                                                                  : NULL;
    for (int32_t i = 0; !bad && i < o->ninputs; i++)
        if (!o->inputs[i].key || !o->inputs[i].path == !o->inputs[i].array)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "run options: input %d needs a key and exactly one of path and array", (int)i);
    for (int32_t i = 0; !bad && i < o->nagree; i++)
        if (!o->agree[i].what || !o->agree[i].value)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "run options: agree %d needs what and value",
                            (int)i);
    for (int32_t i = 0; !bad && i < o->ninfeeds; i++)
        if (!o->infeeds[i])
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "run options: infeed %d is NULL", (int)i);
    if (bad && o->steps < 0)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "run options: steps must be >= 0 (0: one step), "
                        "not %lld", (long long)o->steps);
    if (bad && o->steps > TS_MAX_STEPS)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "run options: steps %lld is too large: the largest "
                        "is %lld", (long long)o->steps, (long long)TS_MAX_STEPS);
    if (bad && !api_heartbeat_ok(o->heartbeat_seconds))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "run options: heartbeat_seconds must be 0 (60 s), negative (none) or from %g to %g "
                        "seconds, not %g", TS_HEARTBEAT_MIN_SECONDS, TS_HEARTBEAT_MAX_SECONDS, o->heartbeat_seconds);
    return bad ? ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "run options: %s", bad) : IR_OK;
}

int api_sgemm_lib(int32_t sgemm)
{
    switch (sgemm) {
    case TS_SGEMM_OPENBLAS: return DEV_SGEMM_OPENBLAS;
    case TS_SGEMM_BLIS: return DEV_SGEMM_BLIS;
    case TS_SGEMM_ONEDNN: return DEV_SGEMM_ONEDNN;
    case TS_SGEMM_AMX_BF16X3: return DEV_SGEMM_AMX_BF16X3;
    case TS_SGEMM_AVX512: return DEV_SGEMM_AVX512;
    default: return DEV_SGEMM_PROBE;
    }
}

/* The largest f32 dot of m (every computation), in multiply-adds: the
 * result's elements times the lhs's contracted sizes. */
static int64_t largest_f32_dot(const IrModule *m)
{
    int64_t most = 0;
    for (int32_t c = 0; m && c < m->ncomp; c++) {
        const IrComputation *comp = m->comp[c];
        for (int32_t i = 0; i < comp->ninstr; i++) {
            const IrInstr *ins = &comp->instr[i];
            if (ins->op != OP_DOT || ins->shape.type != IR_F32 || ins->nopnd < 1)
                continue;
            const IrShape *lhs = &comp->instr[ins->opnd[0]].shape;
            int64_t macs = ir_shape_elements(&ins->shape);
            const IrI64List *con = &ins->a.dot.lhs_contracting;
            for (int32_t k = 0; k < con->n && macs > 0; k++) {
                int64_t dim = con->v[k];
                int64_t size = dim >= 0 && dim < lhs->rank ? lhs->dims[dim] : 1;
                macs = size > 0 && macs <= INT64_MAX / size ? macs * size : INT64_MAX;
            }
            if (macs > most)
                most = macs;
        }
    }
    return most;
}

/* The f32 dots of m that are one row-major GEMM (matrices, no batch
 * dimensions, one contracting dimension each: as device/k_dot.c calls
 * them, A transposed where its contracting dimension is the first, B
 * where it is the second), their library chosen now where the probe
 * chooses per shape (dev_blas_sgemm_prepare_shape), in the form the
 * program runs them: B kept packed where it is a parameter of the entry
 * computation (k_dot.c's steady operand; a donated one is not kept, which
 * the timing does not know), beside a second device's product where m
 * runs on `devices`. Another dot's shape is chosen at its first product. */
static void prepare_dot_shapes(const IrModule *m, int64_t devices)
{
    for (int32_t c = 0; m && c < m->ncomp; c++) {
        const IrComputation *comp = m->comp[c];
        for (int32_t i = 0; i < comp->ninstr; i++) {
            const IrInstr *ins = &comp->instr[i];
            if (ins->op != OP_DOT || ins->shape.type != IR_F32 || ins->nopnd != 2 || ins->a.dot.lhs_batch.n != 0 ||
                ins->a.dot.lhs_contracting.n != 1 || ins->a.dot.rhs_contracting.n != 1)
                continue;
            const IrInstr *b = &comp->instr[ins->opnd[1]];
            const IrShape *lhs = &comp->instr[ins->opnd[0]].shape, *rhs = &b->shape;
            int64_t lc = ins->a.dot.lhs_contracting.v[0], rc = ins->a.dot.rhs_contracting.v[0];
            if (lhs->rank != 2 || rhs->rank != 2 || lc < 0 || lc > 1 || rc < 0 || rc > 1)
                continue;
            bool kept = b->op == OP_PARAMETER && m->entry >= 0 && comp == m->comp[m->entry];
            dev_blas_sgemm_prepare_shape(lc == 0, rc == 1, lhs->dims[1 - lc], rhs->dims[1 - rc], lhs->dims[lc], kept,
                                         (int)devices);
        }
    }
}

void api_sgemm_prepare(const PlanProgram *prog, const IrModule *m)
{
    int64_t most = largest_f32_dot(m);
    for (int32_t k = 0; prog && k < prog->ncluster; k++) {
        int64_t c = largest_f32_dot(prog->cluster[k].spmd);
        if (c > most)
            most = c;
    }
    dev_blas_sgemm_prepare(most);
    prepare_dot_shapes(m, 1);
    for (int32_t k = 0; prog && k < prog->ncluster; k++) {
        const PlanCluster *pc = &prog->cluster[k];
        prepare_dot_shapes(pc->spmd, pc->local_devices > 0 ? pc->local_devices : pc->num_partitions * pc->num_replicas);
    }
}

int64_t api_allreduce_bytes(const PlanProgram *prog)
{
    int64_t sum = 0;
    for (int32_t k = 0; prog && k < prog->ncluster; k++) {
        const IrModule *m = prog->cluster[k].spmd;
        for (int32_t c = 0; m && c < m->ncomp; c++) {
            const IrComputation *comp = m->comp[c];
            for (int32_t i = 0; i < comp->ninstr; i++) {
                const IrInstr *ins = &comp->instr[i];
                bool reduces = ins->op == OP_ALL_REDUCE || ins->op == OP_ALL_REDUCE_START;
                int64_t b = reduces ? ir_shape_bytes(&ins->shape) : 0;
                sum = b < 0 || sum > INT64_MAX - b ? INT64_MAX : sum + b;
            }
        }
    }
    return sum;
}

bool api_heartbeat_ok(double s)
{
    return s <= 0 || (s >= TS_HEARTBEAT_MIN_SECONDS && s <= TS_HEARTBEAT_MAX_SECONDS);
}

RtBindOptions api_bind_options(const TsRunOptions *o)
{
    return (RtBindOptions){.ninputs = o->ninputs, .inputs = (const RtInput *)o->inputs, .random = o->random,
                           .seed = o->seed, .zero_state = o->zero_state, .process_local = o->process_local};
}

CollTuning api_tuning(const TsRunOptions *o)
{
    const TsTuning *t = &o->tuning;
    return (CollTuning){.piece_bytes = t->piece_bytes, .chunk_bytes = t->chunk_bytes,
                        .pipeline_bytes = t->pipeline_bytes, .copies_bytes = t->copies_bytes,
                        .stream_bound = t->stream_bound, .fusion = t->fusion, .fusion_block = t->fusion_block,
                        .fail_mpi_after = t->fail_mpi_after, .skip_collective_after = t->skip_collective_after,
                        .fail_one_rank = t->fail_one_rank, .fail_rank = t->fail_rank};
}

int64_t api_max_trips(const TsRunOptions *o)
{
    return o->limits && o->limits->trips > 0 ? o->limits->trips : 0;
}

/* The host's available memory in bytes: MemAvailable of /proc/meminfo
 * (what the kernel can give without swapping), else free pages from
 * sysconf; -1 when neither answers (then nothing is refused). */
static int64_t available_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb >= 0)
        return (int64_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : -1;
}

/* `need` bytes (what `what` needs) against the run's memory limit. */
static IrStatus check_limit(int64_t need, const char *what, const char *tail, const TsRunOptions *o, IrDiag *d)
{
    bool given = o->limits && o->limits->memory_bytes > 0;
    int64_t limit = given ? o->limits->memory_bytes : available_memory();
    if (limit < 0 || need <= limit)
        return IR_OK;
    return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                    "%s needs an estimated %lld bytes of memory%s, more than %s of %lld bytes; nothing was run "
                    "(raise it with --limit memory=BYTES)",
                    what, (long long)need, tail, given ? "--limit memory" : "the host's available memory (MemAvailable)",
                    (long long)limit);
}

/* The plan's estimate against the limit: the largest cluster's peak per
 * device plus the peak of what the host program holds (its values stay
 * while the clusters run). Not times the devices of this process: those
 * share the result of every all-gather, all-reduce and broadcast of one
 * group (runtime/local.c), which the per-device estimate counts on each,
 * so peak x devices overstates a run by up to the group size (a
 * replicated 1.6 GB output on 8 devices is 13 GB estimated, 1.6 GB held).
 * Before, the host program was left out: a 100M limit let a run whose
 * host program held 3 GB between clusters go ahead. */
IrStatus api_check_memory(const TsPlan *p, const TsRunOptions *o, int64_t local, IrDiag *d)
{
    (void)local;
    int64_t peak = 0;
    for (int32_t k = 0; p->r.layouts && k < p->r.prog.ncluster; k++)
        if (p->r.layouts[k] && p->r.layouts[k]->peak_bytes_per_device > peak)
            peak = p->r.layouts[k]->peak_bytes_per_device;
    int64_t host = p->r.prog.host ? plan_peak_bytes(p->r.prog.host) : 0;
    if (host < 0)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    return check_limit(peak > INT64_MAX - host ? INT64_MAX : peak + host,
                       "the plan", host ? " per device with what its host program holds" : " per device", o, d);
}

/* The reference run of m against the limit: its entry's peak. */
static IrStatus check_reference_memory(const IrModule *m, const TsRunOptions *o, IrDiag *d)
{
    int64_t need = plan_peak_bytes(m);
    if (need < 0)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    return check_limit(need, "the reference run", "", o, d);
}

TsOutputs *api_outputs_new(DevValue *result, DevValue *outfeeds, char *stats)
{
    TsOutputs *o = ts_calloc(1, sizeof *o);
    if (!stats)
        stats = ts_strdup("");
    if (!o || !stats) {
        ts_free(o);
        ts_free(stats);
        return NULL;
    }
    o->result = dev_value_ref(result);
    o->outfeeds = outfeeds ? dev_value_ref(outfeeds) : NULL;
    o->stats = stats;
    return o;
}

void api_outputs_adopt(TsOutputs *o, RtSaves *saves, const char *model_sha256)
{
    rt_saves_free(&o->saves);
    o->saves = *saves;
    memset(saves, 0, sizeof *saves);
    snprintf(o->model_sha256, sizeof o->model_sha256, "%s", model_sha256 ? model_sha256 : "");
}

static bool note_file(TsOutputs *o, const char *path)
{
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return true;
    ApiFileId *r = ts_realloc(o->reads, (size_t)(o->nreads + 1) * sizeof *r);
    if (!r)
        return false;
    o->reads = r;
    o->reads[o->nreads++] = (ApiFileId){(uint64_t)sb.st_dev, (uint64_t)sb.st_ino};
    return true;
}

bool api_outputs_note_reads(TsOutputs *o, const TsRunOptions *ro)
{
    bool ok = true;
    for (int32_t i = 0; ro && ro->inputs && i < ro->ninputs; i++)
        ok = note_file(o, ro->inputs[i].path) && ok;
    for (int32_t i = 0; ro && ro->infeeds && i < ro->ninfeeds; i++)
        ok = note_file(o, ro->infeeds[i]) && ok;
    return ok;
}

/* ---- statistics ---- */

void api_stats_binding(IrStrBuf *s, const RtRunStats *rs)
{
    ir_sb_printf(s, "tessel: stats: devices: %d, executor threads bound to their cores: %d%s%s%s\n", (int)rs->ndevices,
          (int)rs->nbound, rs->bind_note ? " (" : "", rs->bind_note ? rs->bind_note : "", rs->bind_note ? ")" : "");
    /* A device's large tensors come from its allocator (device/value.c,
     * alloc.c), which binds them to its NUMA node; small ones from malloc,
     * first touched by the bound executor thread. */
    if (rs->membind)
        ir_sb_printf(s, "tessel: stats: memory: device allocators bind to NUMA nodes (device 0: node %d)\n",
              (int)rs->numa_node);
    else
        ir_sb_printf(s, "tessel: stats: memory: binding fell back to unbound memory (%s)\n",
              rs->membind_errno ? strerror(rs->membind_errno) : "hwloc cannot bind memory here");
    ir_sb_printf(s, "tessel: stats: BLAS threads: %d; collective calls per device: %lld\n", rs->blas_threads,
          (long long)rs->coll_calls);
    ir_sb_printf(s, "tessel: stats: f32 GEMM: %s\n", dev_blas_sgemm_verdict());
    /* The streaming-store probe decides by timing (coll_kernels.c): say
     * what it decided, or that the tuning fixed it. */
    if (rs->stream_bound == COLL_STREAM_ON || rs->stream_bound == COLL_STREAM_OFF) {
        ir_sb_printf(s, "tessel: stats: streaming stores into bound memory: %s (tuning)\n",
                     rs->stream_bound == COLL_STREAM_ON ? "on" : "off");
    } else {
        static const char *const cls[COLL_PROBE_CLASSES] = {"16-32 MiB", "32 MiB and more"};
        ir_sb_printf(s, "tessel: stats: streaming stores into bound memory: measured:");
        for (int c = 0; c < COLL_PROBE_CLASSES; c++)
            ir_sb_printf(s, "%s %s %s", c ? "," : "", cls[c],
                         rs->stream_verdict[c] > 0 ? "on" : rs->stream_verdict[c] < 0 ? "off" : "not probed");
        ir_sb_printf(s, "\n");
    }
    /* The first step pays for first touches of fresh memory; later steps
     * reuse the buffers the first one freed. */
    if (rs->nsteps > 1)
        ir_sb_printf(s, "tessel: stats: steps: first %.3f ms, then median %.3f ms a step (of the %lld after it)\n",
              rs->first_step_seconds * 1e3, rs->warm_step_seconds * 1e3, (long long)rs->nsteps - 1);
}

int64_t api_plan_estimate(const TsPlan *p)
{
    if (p->r.prog.ncluster < 1)
        return 0;
    if (p->r.layouts && p->r.layouts[0])
        return p->r.layouts[0]->peak_bytes_per_device;
    return plan_peak_bytes(p->r.prog.cluster[0].spmd);
}

void api_stats_memory(IrStrBuf *s, const RtRunStats *rs, int64_t estimate, int64_t first)
{
    ir_sb_printf(s, "tessel: stats: memory per device: plan estimate %lld bytes; measured peak", (long long)estimate);
    int32_t n = rs->ndevices < RT_STATS_DEVICES ? rs->ndevices : RT_STATS_DEVICES;
    for (int32_t k = 0; k < n && k < 8; k++)
        ir_sb_printf(s, "%s device %lld %lld", k ? "," : "", (long long)(first + k), (long long)rs->device_peak[k]);
    if (rs->ndevices > 8)
        ir_sb_printf(s, ", ... (largest %lld)", (long long)rs->peak_max);
    double ratio = estimate > 0 ? (double)rs->peak_max / (double)estimate : 0;
    ir_sb_printf(s, " bytes (largest/estimate %.3f)\n", ratio);
    /* The allocators' own figures: kept buffers are not live (not in the
     * peaks above) but are memory the process holds. */
    ir_sb_printf(s, "tessel: stats: device buffers: %lld handed out, %lld of them freed ones reused; "
                    "at the end %lld bytes live, %lld bytes kept for reuse\n",
                 (long long)rs->buf_allocs, (long long)rs->buf_reused, (long long)rs->buf_live_bytes,
                 (long long)rs->buf_kept_bytes);
    if (rs->packed_weights > 0)
        ir_sb_printf(s, "tessel: stats: f32 weights packed once for %s, kept across the steps: %lld "
                        "(%lld bytes beyond the devices' measured memory), %lld products run from them\n",
                     dev_blas_sgemm_shapes() > 0 ? "each product shape's library (oneDNN's matmul or tessel's own GEMM's panels)"
                     : dev_blas_sgemm_current() == DEV_SGEMM_AMX_BF16X3 ? "AMX's tiles (bf16 copies)"
                     : dev_blas_sgemm_current() == DEV_SGEMM_AVX512  ? "tessel's own GEMM (its panels)"
                                                                     : "oneDNN's matmul",
                     (long long)rs->packed_weights, (long long)rs->packed_bytes, (long long)rs->packed_runs);
    /* The rest of the process: code, libraries, the host's whole inputs
     * and outputs, the threads' buffer caches, collective staging. */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        int64_t rss = (int64_t)ru.ru_maxrss * 1024, held = 0;
        for (int32_t k = 0; k < n; k++)
            held += rs->device_peak[k];
        ir_sb_printf(s, "tessel: stats: process peak RSS %lld bytes: %lld beyond the devices' measured peaks "
                        "(code, libraries, host-side inputs and outputs, buffer caches)\n",
                     (long long)rss, (long long)(rss > held ? rss - held : 0));
    }
}

/* ---- progress: a hook per step ---- */

static void step_fn(void *ctx, int64_t step, int64_t steps, double seconds, const DevValue *result)
{
    const ApiSteps *a = ctx;
    TsStepInfo info = {.step = step, .steps = steps, .seconds = seconds, .has_watched = a->leaf >= 0,
                       .watched = __builtin_nan("")};
    if (a->leaf >= 0 && result) {
        const DevValue *v = dev_value_leaf((DevValue *)result, a->leaf);
        if (v && v->data && v->shape.type != IR_TUPLE && dev_value_elements(v) >= 1)
            info.watched = dev_load_f64(v->shape.type, v->data, 0);
    }
    a->o->on_step(a->o->on_step_ctx, &info);
}

/* A leaf named by number or by the instruction that is it. */
static int32_t watch_leaf(const char *name, const IrComputation *e, const IrShape *out)
{
    int32_t n = ir_shape_leaf_count(out);
    if (*name && strspn(name, "0123456789") == strlen(name)) {
        long v = strtol(name, NULL, 10);
        return v < n ? (int32_t)v : -1;
    }
    if (!e || e->root < 0)
        return -1;
    const IrInstr *root = &e->instr[e->root];
    if (strcmp(root->name, name) == 0 && out->type != IR_TUPLE)
        return 0;
    if (root->op != OP_TUPLE)
        return -1;
    int32_t first = 0;
    for (int32_t k = 0; k < root->nopnd; k++) {
        const IrInstr *op = &e->instr[root->opnd[k]];
        if (strcmp(op->name, name) == 0 && op->shape.type != IR_TUPLE)
            return first;
        first += ir_shape_leaf_count(&op->shape);
    }
    return -1;
}

/* The names --watch takes (the root's, or its tuple operands'), for "did
 * you mean". */
static const char *watch_name(void *ctx, int32_t k)
{
    const IrComputation *e = ctx;
    const IrInstr *root = &e->instr[e->root];
    if (root->op != OP_TUPLE)
        return k == 0 ? root->name : NULL;
    return e->instr[root->opnd[k]].name;
}

IrStatus api_step_hook(const TsRunOptions *o, const IrComputation *e, const IrShape *out_shape, ApiSteps *ctx,
                       RtStepHook *hook, IrDiag *d)
{
    *hook = (RtStepHook){0};
    *ctx = (ApiSteps){.o = o, .leaf = -1};
    if (o->watch) {
        int32_t leaf = watch_leaf(o->watch, e, out_shape);
        if (leaf < 0) {
            const IrInstr *root = e && e->root >= 0 ? &e->instr[e->root] : NULL;
            int32_t count = !root ? 0 : root->op == OP_TUPLE ? root->nopnd : 1;
            const char *near = ir_nearest(o->watch, strlen(o->watch), count, watch_name, (void *)e);
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "--watch %s: no output has that name (name an output leaf 0..%d, or the instruction "
                            "the result or a root tuple operand is)%s%s%s",
                            o->watch, (int)ir_shape_leaf_count(out_shape) - 1, near ? "; did you mean " : "",
                            near ? near : "", near ? "?" : "");
        }
        const IrShape *ls = ir_shape_leaf(out_shape, leaf);
        if (ir_shape_elements(ls) != 1) {
            char *t = ir_shape_str(ls, false);
            ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                     "--watch %s: output %d is %s; a watched output has one element (a loss)", o->watch,
                     (int)leaf, t ? t : "?");
            ts_free(t);
            return IR_EINPUT;
        }
        ctx->leaf = leaf;
    }
    if (o->on_step)
        *hook = (RtStepHook){.fn = step_fn, .ctx = ctx};
    return IR_OK;
}

IrStatus api_plan_step_hook(const TsPlan *p, const TsRunOptions *o, ApiSteps *ctx, RtStepHook *hook, IrDiag *d)
{
    const PlanProgram *prog = &p->r.prog;
    if (prog->host) {
        const IrComputation *e = ir_entry(prog->host);
        return api_step_hook(o, e, &e->instr[e->root].shape, ctx, hook, d);
    }
    const PlanCluster *c = &prog->cluster[0];
    const IrModule *m = c->src ? c->src : c->spmd;
    /* A replay's outputs are each device's: the program's own root. */
    const IrComputation *e = ir_entry(m);
    return api_step_hook(o, e, c->replay ? &e->instr[e->root].shape : &c->out_shape, ctx, hook, d);
}

/* ---- in process ---- */

/* Cluster 0 alone (no host work): each device gets only its shards of
 * every input, read or drawn for it (shard_io.c). */
static IrStatus run_cluster_local(const TsPlan *p, const TsRunOptions *o, RtFeed *feed, double *t,
                                  RtRunStats *run, RtReadStats *rs, DevValue **result, IrDiag *d)
{
    const PlanCluster *c = &p->r.prog.cluster[0];
    int64_t ndev = c->num_partitions * c->num_replicas;
    RtBindOptions bo = api_bind_options(o);
    RtArgs *shards = ts_calloc((size_t)ndev, sizeof *shards);
    DevValue **res = ts_calloc((size_t)ndev, sizeof *res);
    IrStatus st = shards && res ? rt_read_shards(c, p->signature, &bo, 0, ndev, shards, rs, d)
                                : ir_oom(d, NULL);
    t[1] = now();
    ApiSteps sc;
    RtStepHook hook;
    if (st == IR_OK)
        st = api_plan_step_hook(p, o, &sc, &hook, d);
    CollTuning tune = api_tuning(o);
    RtRunOptions ro = {.steps = o->steps, .host = &feed->hooks, .on_step = &hook, .max_trips = api_max_trips(o),
                       .tune = &tune, .op_times = o->stats && o->stats_ops > 0};
    if (st == IR_OK)
        st = rt_run_devices(c, shards, 0, ndev, NULL, &ro, run, res, d);
    /* Replica 0's partitions hold the result. */
    if (st == IR_OK)
        st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, res, result, d);
    for (int64_t k = 0; k < ndev; k++) {
        if (shards)
            rt_args_free(&shards[k]);
        if (res)
            dev_value_unref(res[k]);
    }
    ts_free(shards);
    ts_free(res);
    return st;
}

/* A replay: each device binds its own inputs and keeps its outputs. */
static IrStatus run_replay_local(const TsPlan *p, const TsRunOptions *o, RtFeed *feed, double *t, RtRunStats *run,
                                 DevValue **result, int64_t *ndevices, IrDiag *d)
{
    const PlanCluster *c = &p->r.prog.cluster[0];
    int64_t ndev = c->num_partitions * c->num_replicas;
    RtArgs *args = ts_calloc((size_t)ndev, sizeof *args);
    DevValue **res = ts_calloc((size_t)ndev, sizeof *res);
    IrStatus st = args && res ? api_bind_devices(p, o, 0, ndev, args, d)
                              : ir_oom(d, NULL);
    t[1] = now();
    ApiSteps sc;
    RtStepHook hook;
    if (st == IR_OK)
        st = api_plan_step_hook(p, o, &sc, &hook, d);
    CollTuning tune = api_tuning(o);
    RtRunOptions ro = {.steps = o->steps, .host = &feed->hooks, .on_step = &hook, .max_trips = api_max_trips(o),
                       .tune = &tune, .op_times = o->stats && o->stats_ops > 0};
    if (st == IR_OK)
        st = rt_run_devices(c, args, 0, ndev, NULL, &ro, run, res, d);
    if (st == IR_OK)
        st = api_replay_outputs(p, o, res, result, ndevices, d);
    for (int64_t k = 0; k < ndev; k++) {
        if (args)
            rt_args_free(&args[k]);
        if (res)
            dev_value_unref(res[k]);
    }
    ts_free(args);
    ts_free(res);
    return st;
}

/* A host program: inputs bound whole (the host program reads them), the
 * host program run here, each cluster call on the N x R devices. */
static IrStatus run_host_local(const TsPlan *p, const TsRunOptions *o, double *t, RtSaves *saves, DevValue **result,
                               IrDiag *d)
{
    RtBindOptions bo = api_bind_options(o);
    RtArgs args = {.saves = saves};
    IrStatus st = rt_bind_inputs(p->r.prog.host, &bo, &args, d);
    t[1] = now();
    ApiSteps sc;
    RtStepHook hook;
    if (st == IR_OK)
        st = api_plan_step_hook(p, o, &sc, &hook, d);
    CollTuning tune = api_tuning(o);
    if (st == IR_OK)
        st = rt_run_program_local(&p->r.prog, &args, o->steps, api_max_trips(o), &hook, &tune, result, d);
    rt_args_free(&args);
    return st;
}

/* The feed of a run: --infeed files, outfeed values kept. One feed serves
 * one executor: a run of several devices gets none. */
static IrStatus check_feed(const TsPlan *p, const TsRunOptions *o, IrDiag *d)
{
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    if (o->ninfeeds && (p->r.prog.host || ndev != 1))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "infeed files feed one device: run the reference or one partition and one replica (%s)",
                        p->r.prog.host ? "this module has host work and device clusters"
                                       : "each of the devices would consume the feed");
    return IR_OK;
}

static TsStatus deliver(IrStatus st, DevValue *result, int64_t ndevices, const RtFeed *feed, RtSaves *saves,
                        const char *sha256, const TsRunOptions *ro, char *stats, TsOutputs **out, IrDiag *id,
                        TsDiag *d)
{
    DevValue *outf = NULL;
    if (st == IR_OK && feed && feed->nkept && !(outf = rt_feed_outfeeds(feed)))
        st = ir_oom(id, NULL);
    if (st == IR_OK && !(*out = api_outputs_new(result, outf, stats)))
        st = ir_oom(id, NULL);
    else if (st != IR_OK)
        ts_free(stats);
    if (st == IR_OK) {
        (*out)->ndevices = ndevices;
        api_outputs_adopt(*out, saves, sha256);
        if (!api_outputs_note_reads(*out, ro)) {
            ts_outputs_free(*out);
            *out = NULL;
            st = ir_oom(id, NULL);
        }
    }
    rt_saves_free(saves);
    dev_value_unref(outf);
    dev_value_unref(result);
    return api_give(st, id, d);
}

TsStatus ts_plan_run(const TsPlan *p, const TsRunOptions *o, TsOutputs **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    TsRunOptions none = {0};
    if (!o)
        o = &none;
    dev_blas_choose_sgemm(api_sgemm_lib(o->tuning.sgemm));
    dev_blas_preload(o->tuning.openblas_num_threads_unset); /* before the clock starts, as a linked BLAS was */
    if (api_check_run(o, &id) != IR_OK)
        return api_give(id.status, &id, d);
    api_sgemm_prepare(&p->r.prog, NULL);
    double t[3] = {now(), 0, 0};
    RtRunStats run = {0};
    RtReadStats rs = {0};
    RtFeed feed;
    rt_feed_init(&feed, o->ninfeeds, o->infeeds);
    RtSaves saves = {0};
    DevValue *result = NULL;
    IrStatus st = check_feed(p, o, &id);
    if (st == IR_OK)
        st = api_check_memory(p, o, p->r.prog.num_partitions * p->r.prog.num_replicas, &id);
    if (st == IR_OK && p->r.prog.ncluster == 0 && !p->r.prog.host)
        st = ir_error(&id, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "a plan without a program");
    int64_t ndevices = 0;
    bool replay = p->r.prog.ncluster == 1 && p->r.prog.cluster[0].replay;
    if (st == IR_OK)
        st = p->r.prog.host ? run_host_local(p, o, t, &saves, &result, &id)
             : replay       ? run_replay_local(p, o, &feed, t, &run, &result, &ndevices, &id)
                            : run_cluster_local(p, o, &feed, t, &run, &rs, &result, &id);
    t[2] = now();
    IrStrBuf stats = {0};
    if (st == IR_OK && o->stats) {
        ir_sb_printf(&stats, "tessel: stats: load+compile %.3f ms, read inputs %.3f ms, execute %.3f ms\n",
              o->load_seconds * 1e3, (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3);
        if (!p->r.prog.host) {
            ir_sb_printf(&stats, "tessel: stats: collectives %.3f ms (the most of any device); input read %lld bytes "
                  "from files, %lld random elements\n", run.coll_seconds * 1e3, (long long)rs.file_bytes,
                  (long long)rs.random_elems);
            api_stats_binding(&stats, &run);
            api_stats_memory(&stats, &run, api_plan_estimate(p), 0);
            api_stats_ops(&stats, &run, o->stats_ops, 0);
        } else if (o->stats_ops > 0) {
            ir_sb_printf(&stats, "tessel: stats: ops: not timed (a program with host work: the per-instruction "
                         "times are of a partitioned program's devices)\n");
        }
    }
    rt_run_stats_free(&run);
    TsStatus ts = deliver(st, result, ndevices, &feed, &saves, p->sha256, o, ir_sb_take(&stats), out, &id, d);
    rt_feed_free(&feed);
    return ts;
}

static TsStatus run_reference(const IrModule *m, const char *sha256, const TsRunOptions *o, TsOutputs **out,
                              TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    TsRunOptions none = {0};
    if (!o)
        o = &none;
    dev_blas_choose_sgemm(api_sgemm_lib(o->tuning.sgemm));
    dev_blas_preload(o->tuning.openblas_num_threads_unset); /* before the clock starts, as a linked BLAS was */
    if (api_check_run(o, &id) != IR_OK)
        return api_give(id.status, &id, d);
    api_sgemm_prepare(NULL, m);
    double t[3] = {now(), 0, 0};
    RtFeed feed;
    rt_feed_init(&feed, o->ninfeeds, o->infeeds);
    RtBindOptions bo = api_bind_options(o);
    RtSaves saves = {0};
    RtArgs args = {.saves = &saves};
    DevValue *result = NULL;
    ApiSteps sc;
    RtStepHook hook;
    IrStatus st = rt_check_custom_calls(m, &id);
    if (st == IR_OK)
        st = check_reference_memory(m, o, &id);
    if (st == IR_OK)
        st = rt_bind_inputs(m, &bo, &args, &id);
    t[1] = now();
    if (st == IR_OK)
        st = api_step_hook(o, ir_entry(m), &ir_entry(m)->instr[ir_entry(m)->root].shape, &sc, &hook, &id);
    if (st == IR_OK)
        st = rt_run_reference_steps(m, &args, o->steps, api_max_trips(o), &feed.hooks, &hook, &result, &id);
    t[2] = now();
    IrStrBuf stats = {0};
    if (st == IR_OK && o->stats)
        ir_sb_printf(&stats, "tessel: stats: load+compile %.3f ms, read inputs %.3f ms, execute %.3f ms\n",
              o->load_seconds * 1e3, (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3);
    rt_args_free(&args);
    TsStatus ts = deliver(st, result, 0, &feed, &saves, sha256, o, ir_sb_take(&stats), out, &id, d);
    rt_feed_free(&feed);
    return ts;
}

TsStatus ts_run_reference(const TsModule *m, const TsRunOptions *o, TsOutputs **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(m, d);
    API_NEED(out, d);
    char sha[65] = "";
    if (m->ir->src)
        compile_sha256_hex(m->ir->src, strlen(m->ir->src), sha);
    return run_reference(m->ir, sha, o, out, d);
}

TsStatus ts_plan_run_reference(const TsPlan *p, const TsRunOptions *o, TsOutputs **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(out, d);
    if (!p->reference && p->ref_text) {
        /* The model's text, parsed again as it was for the compile (the
         * same limits: it cannot fail but for memory). */
        IrDiag id = {0};
        *out = NULL;
        IrParseOptions po = ir_default_parse_options();
        po.limits = p->ref_limits;
        po.verify = true;
        IrModule *ref = NULL;
        IrStatus st = ir_parse(p->ref_name, p->ref_text, p->ref_len, &po, &ref, &id);
        if (st != IR_OK)
            return api_give(st, &id, d);
        TsStatus ts = run_reference(ref, p->sha256, o, out, d);
        ir_module_free(ref);
        return ts;
    }
    if (!p->reference) {
        IrDiag id = {0};
        *out = NULL;
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "the reference needs the model, not a plan (a plan holds the partitioned "
                                 "program)"),
                        &id, d);
    }
    return run_reference(p->reference, p->sha256, o, out, d);
}

/* ---- outputs ---- */

int32_t ts_outputs_count(const TsOutputs *o)
{
    if (!o)
        return 0;
    return ir_shape_leaf_count(&o->result->shape);
}

int64_t ts_outputs_num_devices(const TsOutputs *o)
{
    if (!o)
        return 0;
    return o->ndevices;
}

/* Leaves per device of a replay's outputs (0: not per device). */
static int32_t per_device(const TsOutputs *o)
{
    return o->ndevices > 0 ? (int32_t)(ts_outputs_count(o) / o->ndevices) : 0;
}

static IrStatus leaf_of(const TsOutputs *o, int32_t i, const DevValue **v, IrDiag *d)
{
    if (i < 0 || i >= ts_outputs_count(o))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no output %d (there are %d)", (int)i,
                        (int)ts_outputs_count(o));
    *v = dev_value_leaf(o->result, i); /* borrowed */
    if (!rt_npy_descr((*v)->shape.type))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "output %d is a %s, not an array", (int)i,
                        ir_type_name((*v)->shape.type));
    return IR_OK;
}

TsStatus ts_outputs_info(const TsOutputs *o, int32_t i, TsArrayInfo *info, TsDiag *d)
{
    API_NEED(o, d);
    API_NEED(info, d);
    IrDiag id = {0};
    const DevValue *v = NULL;
    IrStatus st = leaf_of(o, i, &v, &id);
    if (st != IR_OK)
        return api_give(st, &id, d);
    memset(info, 0, sizeof *info);
    snprintf(info->dtype, sizeof info->dtype, "%s", rt_npy_descr(v->shape.type));
    snprintf(info->type, sizeof info->type, "%s", ir_type_name(v->shape.type));
    /* Bounded dynamic dims: the run-time size, as the .npy writer writes it. */
    info->rank = v->shape.rank;
    int64_t n = 1;
    for (int32_t k = 0; k < v->shape.rank; k++)
        n *= info->dims[k] = v->sizes ? v->sizes[k] : v->shape.dims[k];
    info->nbytes = (size_t)n * ir_type_size(rt_npy_disk_type(v->shape.type));
    return TS_OK;
}

TsStatus ts_outputs_read(const TsOutputs *o, int32_t i, void *buf, size_t nbytes, TsDiag *d)
{
    API_NEED(o, d);
    API_NEED(buf, d);
    IrDiag id = {0};
    TsArrayInfo info;
    TsStatus ts = ts_outputs_info(o, i, &info, d);
    if (ts != TS_OK)
        return ts;
    if (nbytes != info.nbytes)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "output %d has %zu bytes as %s, not %zu", (int)i, info.nbytes, info.dtype, nbytes),
                        &id, d);
    const DevValue *v = dev_value_leaf(o->result, i); /* borrowed */
    IrType t = v->shape.type;
    size_t msize = ir_type_size(t), dsize = ir_type_size(rt_npy_disk_type(t));
    /* Row by row: run-time sizes of bounded dims cut rows out of the
     * layout at the bounds. stride[k]: elements per step of dim k there. */
    int32_t r = v->shape.rank;
    int64_t stride[TS_MAX_RANK], idx[TS_MAX_RANK] = {0}, count = 1;
    for (int32_t k = r - 1; k >= 0; k--)
        stride[k] = k == r - 1 ? 1 : stride[k + 1] * v->shape.dims[k + 1];
    for (int32_t k = 0; k < r; k++)
        count *= info.dims[k];
    int64_t inner = r ? info.dims[r - 1] : 1;
    uint8_t *dst = buf;
    for (int64_t done = 0; inner > 0 && done < count; done += inner) {
        int64_t src = 0;
        for (int32_t k = 0; k + 1 < r; k++)
            src += idx[k] * stride[k];
        if (rt_npy_disk_type(t) == t)
            memcpy(dst, v->data + (size_t)src * msize, (size_t)inner * msize);
        else
            rt_npy_to_disk(t, v->data + (size_t)src * msize, inner, dst);
        dst += (size_t)inner * dsize;
        for (int32_t k = r - 2; k >= 0; k--) {
            if (++idx[k] < info.dims[k])
                break;
            idx[k] = 0;
        }
    }
    return TS_OK;
}

/* One line per leaf; `per` > 0: leaves of devices, `per` each. */
static void summarise(IrStrBuf *s, const DevValue *v, const char *what, int32_t per)
{
    int32_t n = ir_shape_leaf_count(&v->shape);
    DevValue **leaves = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *leaves);
    if (!leaves) {
        ir_sb_puts(s, "(out of memory)\n");
        return;
    }
    dev_value_leaves((DevValue *)v, leaves);
    for (int32_t i = 0; i < n; i++) {
        char *line = rt_value_summary(leaves[i]);
        if (per)
            ir_sb_printf(s, "%s %d (device %d): %s\n", what, (int)(i % per), (int)(i / per),
                         line ? line : "(out of memory)");
        else
            ir_sb_printf(s, "%s %d: %s\n", what, (int)i, line ? line : "(out of memory)");
        ts_free(line);
    }
    ts_free(leaves);
}

char *ts_outputs_summary(const TsOutputs *o)
{
    if (!o)
        return NULL;
    IrStrBuf s = {0};
    summarise(&s, o->result, "output", per_device(o));
    if (o->outfeeds)
        summarise(&s, o->outfeeds, "outfeed", 0);
    for (int32_t i = 0; i < o->saves.n; i++) {
        char *line = rt_value_summary(o->saves.values[i]);
        ir_sb_printf(&s, "saved %s: %s\n", o->saves.names[i], line ? line : "(out of memory)");
        ts_free(line);
    }
    return ir_sb_take(&s);
}

const char *ts_outputs_stats(const TsOutputs *o)
{
    if (!o)
        return "";
    return o->stats;
}

void ts_outputs_free(TsOutputs *o)
{
    if (!o)
        return;
    dev_value_unref(o->result);
    dev_value_unref(o->outfeeds);
    rt_saves_free(&o->saves);
    ts_free(o->stats);
    ts_free(o->reads);
    ts_free(o);
}
