/*
 * driver.c: the compile pipeline, one for every module. A module is a host
 * program that calls device clusters; a module without host work is the
 * host program that calls one cluster, its entry (PlanProgram.host NULL).
 *
 * The passes, in order (compile_module):
 *
 *   1. parse, verify       (ir/, before compile_module: src is verified)
 *   2. devices             N and R from the options or the module header;
 *                          N x R within max_devices. With N > 1 and no
 *                          sharding on any value: one warning
 *                          (CompileOptions.warn) naming what was not read.
 *   2b. callbacks          one warning when JAX's Python callbacks without
 *                          results (jax.debug.print) are in the module:
 *                          they run as no-ops (ir_resultless_callback).
 *   3a. auto-shard         with CompileOptions.auto_shard: auto_shard
 *                          gives every value of the entry computation the
 *                          user left unsharded a sharding chosen by the
 *                          cost model over the mesh (auto/). Needs a
 *                          verified module; establishes annotations only.
 *                          Under a memory limit that the partitioned plan
 *                          passes at 5c, the whole pipeline runs again on
 *                          a copy of the module kept before 3a, the
 *                          auto-sharder's own limit lowered (at most 3
 *                          times: compile_module).
 *   3. propagate           scans made while loops first (shd_expand_scans;
 *                          verified after when there was one), then
 *                          shd_propagate once over the whole module. Needs
 *                          a verified module; establishes a sharding on
 *                          every instruction the partitioner visits. It
 *                          runs before outlining so that every value cut
 *                          between host and devices carries one (a cluster
 *                          parameter takes the sharding of what it gets).
 *   4. place, form clusters, outline
 *                          clu_extract, when some instruction runs on the
 *                          host. Needs shardings; establishes the host
 *                          program and one computation per cluster, each
 *                          with the shardings of the values it holds.
 *                          Verified after (it rewrote the module).
 *   5. partition           spmd_partition of each cluster (its shardings
 *                          are those of step 3: no second propagation).
 *                          Establishes one SPMD program per cluster,
 *                          per-device shapes, collectives. Verified after.
 *   5b. donate            plan_donate pairs the cluster's buffer donors
 *                          (the module's buffer_donor, JAX's
 *                          donate_argnums; clu_cluster_module maps them to
 *                          a cluster's parameters) with outputs of the same
 *                          shard, and with CompileOptions.donate_auto any
 *                          parameter where safe (the SPMD program's
 *                          input_output_alias grows); again after 5c when
 *                          the fit reordered the program.
 *   5c. fit memory         with CompileOptions.memory_limit: each SPMD
 *                          program whose estimated peak per device (with
 *                          what the host program holds, the donated
 *                          parameters freed at their last read) is over it
 *                          is reordered, then values are recomputed
 *                          (compile_fit_memory, memfit.c); verified after;
 *                          IR_EINPUT naming the smallest peak reached when
 *                          nothing fits. Breaks nothing: same results.
 *   5d. host pairs         with a host program, clu_host_pairs adds each
 *                          cluster's pairs from 5b to the host module's
 *                          input_output_alias where the host hands the
 *                          cluster a whole parameter and returns its
 *                          output (flags kept), so that `run --steps`
 *                          feeds them as the module's own.
 *   6. split/concat trees, device assignment, islands
 *                          device_layout_build per cluster for H hosts x L devices.
 *
 * With CompileOptions.dump the module is handed over after passes 3, 4
 * (the host program, then each cluster's module) and 5 (each cluster's
 * SPMD program), in that order: --dump-dir writes them as XLA's
 * --xla_dump_to does.
 *
 * The verifier after the rewriting passes (3's scan expansion, 4, 5) runs
 * in every build (debug builds also assert the invariants the comments
 * state, SQLite's tiers; release builds compile the asserts out); a
 * failure there is a bug of the pass: IR_EINTERNAL naming the pass and
 * what the verifier found. CompileOptions.no_verify skips it.
 */
#include "compile.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* Does any computation of m hold an instruction of opcode op? */
static bool has_op(const IrModule *m, IrOpcode op)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            if (m->comp[c]->instr[i].op == op)
                return true;
    return false;
}

/* The verifier after `pass` rewrote m: a failure is tessel's bug. */
static IrStatus verify_after(const char *pass, const IrModule *m, const CompileOptions *opt, IrDiag *d)
{
    if (opt->no_verify)
        return IR_OK;
    IrLimits lim = ir_default_limits();
    /* The pass's output may legitimately be larger than a user may
     * declare (limits are for input): only structure is checked. */
    lim.max_elements = INT64_MAX;
    lim.max_tuple = INT32_MAX;
    lim.max_call_depth = INT32_MAX;
    lim.max_instructions = INT64_MAX;
    IrDiag vd = {0};
    IrStatus st = ir_verify(m, &lim, &vd);
    if (st == IR_OK)
        return IR_OK;
    if (st == IR_ENOMEM) {
        ir_diag_clear(&vd);
        return ir_oom(d, NULL);
    }
    st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                  "internal error: the module after %s does not verify (module %s): %s", pass,
                  m->name ? m->name : "?", vd.msg ? vd.msg : "?");
    ir_diag_clear(&vd);
    return st;
}

static bool has_host_work(const IrModule *m)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            if (clu_is_host_instr(&m->comp[c]->instr[i], NULL))
                return true;
    return false;
}

/* The module after a pass, to the dump callback (if any). `k` >= 0 names
 * cluster k. */
static IrStatus dump(const CompileOptions *o, int32_t k, const char *pass, const IrModule *m, IrDiag *d)
{
    if (!o->dump)
        return IR_OK;
    char what[64];
    if (k >= 0)
        snprintf(what, sizeof what, "cluster_%d.%s", (int)k, pass);
    else
        snprintf(what, sizeof what, "%s", pass);
    return o->dump(o->dump_ctx, what, m, d);
}

/* Step 5b for cluster k: its SPMD program within `limit` bytes per
 * device, what the host program holds (`host` bytes) taken off. */
static IrStatus fit_memory(PlanCluster *c, const CompileOptions *opt, int64_t host, int32_t k, CompileFit *fit,
                           int64_t *over, IrDiag *d)
{
    int64_t limit = opt->memory_limit - host;
    IrStatus st = compile_fit_memory(c->spmd, limit > 0 ? limit : 1, fit, d);
    if (st == IR_OK && fit->scheduled)
        st = verify_after("memory fitting", c->spmd, opt, d);
    if (st != IR_OK || fit->after <= limit)
        return st;
    char held[96] = "";
    if (host > 0)
        snprintf(held, sizeof held, " with the %lld bytes its host program holds", (long long)host);
    /* The proof, or what tessel can prove when it is under the limit. */
    IrStrBuf why = {0};
    if (fit->floor > limit)
        ir_sb_printf(&why, "; its parameters alone (optimizer state included) hold %lld bytes per device before "
                           "the first step, so no order or recomputation can fit",
                     (long long)(fit->floor + host));
    if (fit->bound > limit && fit->bound_at) {
        ir_sb_puts(&why, "; ");
        compile_fit_bound(&why, fit, host);
        ir_sb_puts(&why, "; so no order or recomputation can fit");
    } else if (fit->bound <= limit) {
        ir_sb_printf(&why, "; the least peak tessel can prove is %lld bytes per device (%s%s), under the limit: "
                           "an order or recomputation it did not find may fit",
                     (long long)(fit->bound + host), fit->bound_at ? "at " : "the parameters alone",
                     fit->bound_at ? fit->bound_at : "");
    }
    if (over)
        *over = fit->least + host;
    st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                  "cluster %d needs at least %lld bytes per device%s, more than --limit memory=%lld: the "
                  "smallest estimated peak that reordering and rematerialization reached (%lld before)%s; "
                  "nothing was compiled (raise the limit or shard more)",
                  (int)k, (long long)(fit->least + host), held, (long long)opt->memory_limit,
                  (long long)(fit->before + host), why.s ? why.s : "");
    ts_free(why.s);
    return st;
}

/* Steps 5 and 6 for one cluster module (taken). */
static IrStatus partition_cluster(IrModule *cm, const CompileOptions *opt, int64_t n, int64_t r, PlanCluster *c,
                                  int32_t k, int64_t host, CompileFit *fit, int64_t *over, IrDiag *d)
{
    assert(cm && ir_entry(cm) && n >= 1 && r >= 1);
    memset(c, 0, sizeof *c);
    c->src = cm;
    c->num_partitions = n;
    c->num_replicas = r;
    SpmdOptions sopt = {.num_partitions = n, .num_replicas = r, .link_gbps = opt->link_gbps};
    IrStatus st = spmd_partition(cm, &sopt, &c->spmd, &c->report, d);
    if (st == IR_OK)
        st = verify_after("spmd-partitioning", c->spmd, opt, d);
    if (st == IR_OK)
        st = plan_cluster_record_io(c, d);
    /* Donation first: the fit counts a donated parameter as freed at its
     * last read (as the run does); pairs its new order makes safe are
     * added after it. */
    int32_t added = 0;
    if (st == IR_OK)
        st = plan_donate(c, opt->donate_auto, &added, d);
    if (st == IR_OK && fit)
        st = fit_memory(c, opt, host, k, fit, over, d);
    if (st == IR_OK && fit && fit->scheduled)
        st = plan_donate(c, opt->donate_auto, &added, d);
    if (st == IR_OK)
        st = dump(opt, k, "after_spmd_partition", c->spmd, d);
    return st;
}

IrStatus compile_replan(CompileResult *r, int64_t hosts, int64_t local_devices, IrDiag *d)
{
    int32_t n = r->prog.ncluster;
    DeviceLayout **layouts = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *layouts);
    if (!layouts)
        return ir_oom(d, NULL);
    IrStatus st = IR_OK;
    for (int32_t k = 0; st == IR_OK && k < n; k++) {
        const PlanCluster *c = &r->prog.cluster[k];
        PlanIo io = {c->nparam, c->param_shape, c->param_sharding, &c->out_shape, c->out_sharding};
        st = device_layout_build(c->src, c->spmd, &c->report, &io, hosts, local_devices, &layouts[k], d);
    }
    if (st != IR_OK) {
        for (int32_t k = 0; k < n; k++)
            device_layout_free(layouts[k]);
        ts_free(layouts);
        return st;
    }
    for (int32_t k = 0; r->layouts && k < n; k++)
        device_layout_free(r->layouts[k]);
    ts_free(r->layouts);
    r->layouts = layouts;
    r->prog.hosts = n > 0 ? layouts[0]->hosts : hosts;
    r->prog.local_devices = n > 0 ? layouts[0]->local_devices : local_devices;
    return IR_OK;
}

/* Add `key` to the list `b` of ignored names (n so far) unless there. */
static void note_key(IrStrBuf *b, int *n, const char *key, size_t len)
{
    if (*n >= 8 || len == 0 || len > 100)
        return;
    char k[104];
    memcpy(k, key, len);
    k[len] = 0;
    for (const char *p = b->s ? strstr(b->s, k) : NULL; p; p = strstr(p + 1, k))
        if ((p == b->s || p[-1] == ' ') && (p[len] == ',' || p[len] == 0))
            return;
    ir_sb_printf(b, "%s%s", *n ? ", " : "", k);
    (*n)++;
}

/* Step 2b: a compile for several partitions where no value carries a
 * sharding partitions nothing: said once, naming the frontend attributes
 * (of the module and its instructions) tessel did not read, which is where
 * a sharding in a form it does not know would be. */
static bool warn_unsharded(const IrModule *m, int64_t n, const CompileOptions *o)
{
    if (!o->warn || n <= 1)
        return false;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            if (m->comp[c]->instr[i].sharding && !m->comp[c]->instr[i].sharding->unknown)
                return false;
    IrStrBuf b = {0};
    int k = 0;
    for (int32_t h = 0; h < m->nheader_attr; h++)
        if (strcmp(m->header_attr[h].key, "frontend_attributes") == 0) {
            /* top-level keys of {k=v, k2={...}} */
            const char *v = m->header_attr[h].value;
            int depth = 0;
            for (const char *p = v; *p; p++) {
                if (*p == '{' || *p == '[' || *p == '<')
                    depth++;
                else if (*p == '}' || *p == ']' || *p == '>')
                    depth--;
                else if (depth == 1 && (p[-1] == '{' || p[-1] == ',' || p[-1] == ' ') && *p != ' ') {
                    const char *e = strchr(p, '=');
                    if (e)
                        note_key(&b, &k, p, (size_t)(e - p));
                    p = e ? e : p + strlen(p) - 1;
                }
            }
        }
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            for (int32_t f = 0; f < m->comp[c]->instr[i].a.nfrontend; f++) {
                const char *key = m->comp[c]->instr[i].a.frontend[f].key;
                note_key(&b, &k, key, strlen(key));
            }
    char *msg = NULL;
    IrStrBuf w = {0};
    ir_sb_printf(&w,
                 "no value of module %s carries a sharding tessel read, so it runs replicated on all %lld "
                 "partitions (%s%s); the forms tessel reads are in docs/hlo-text.md",
                 m->name ? m->name : "?", (long long)n, k ? "not read: frontend attributes " : "no sharding=",
                 k ? b.s : " or xla.sdy.sharding attribute anywhere");
    msg = ir_sb_take(&w);
    if (msg)
        o->warn(o->warn_ctx, msg);
    ts_free(msg);
    ir_sb_free(&b);
    return true;
}

/* Step 2b: JAX's Python callbacks without results (jax.debug.print,
 * jax.debug.callback) run as no-ops (ir_resultless_callback): said once,
 * with how many and the first one's name. */
static void warn_callbacks(const IrModule *m, const CompileOptions *o)
{
    if (!o->warn)
        return;
    int64_t n = 0;
    const IrInstr *first = NULL;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            if (ir_resultless_callback(&m->comp[c]->instr[i])) {
                first = first ? first : &m->comp[c]->instr[i];
                n++;
            }
    if (!n)
        return;
    IrStrBuf w = {0};
    ir_sb_printf(&w, "module %s: %lld JAX Python callback%s without results (jax.debug.print, jax.debug.callback; "
                 "the first %s) skipped: tessel runs no Python, and no value depends on %s",
                 m->name ? m->name : "?", (long long)n, n == 1 ? "" : "s", first->name ? first->name : "?",
                 n == 1 ? "it" : "them");
    char *msg = ir_sb_take(&w);
    if (msg)
        o->warn(o->warn_ctx, msg);
    ts_free(msg);
}

/* Does s (a leaf, or every leaf of a tuple) split a value or hand it to
 * the user's own code (manual)? */
static bool splits(const IrSharding *s)
{
    if (!s)
        return false;
    if (s->kind == SHD_TUPLE) {
        for (int32_t k = 0; k < s->ntuple; k++)
            if (splits(&s->tuple[k]))
                return true;
        return false;
    }
    return shd_is_manual(s) || shd_has_manual_subgroup(s) || shd_total_tiles(s) > 1;
}

/* What the user's shardings were, counted before the passes take the
 * module (for warn_unsplit). */
typedef struct GivenShardings {
    int64_t given, maximal;
    bool split;              /* some given sharding splits a value */
    char *module;            /* heap copy of the module's name */
} GivenShardings;

static void count_given(const IrModule *src, GivenShardings *g)
{
    *g = (GivenShardings){0};
    for (int32_t c = 0; c < src->ncomp; c++)
        for (int32_t i = 0; i < src->comp[c]->ninstr; i++) {
            const IrSharding *s = src->comp[c]->instr[i].sharding;
            if (!s || s->unknown)
                continue;
            g->given++;
            g->maximal += s->kind == SHD_MAXIMAL;
            g->split |= splits(s);
        }
    g->module = ts_strdup(src->name ? src->name : "?");
}

/* Step 6b: shardings were given (warn_unsharded was silent) but no value
 * of any cluster is split after propagation: every one replicated or on
 * one device (maximal), or the split ones on the host. Said once, naming
 * why and what to write instead. */
static void warn_unsplit(const GivenShardings *g, const PlanProgram *p, int64_t n, const CompileOptions *o)
{
    if (!o->warn || n <= 1 || g->given == 0)
        return;
    for (int32_t k = 0; k < p->ncluster; k++) {
        const IrModule *m = p->cluster[k].src;
        for (int32_t c = 0; m && c < m->ncomp; c++)
            for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
                if (splits(m->comp[c]->instr[i].sharding))
                    return;
    }
    IrStrBuf w = {0};
    ir_sb_printf(&w, "module %s: %lld value%s carr%s a sharding, but %s, so nothing is partitioned: each of the %lld "
                 "partitions computes the whole module; a tiled sharding such as {devices=[%lld,1]<=[%lld]} splits "
                 "a value (docs/hlo-text.md, Shardings)",
                 g->module ? g->module : "?", (long long)g->given, g->given == 1 ? "" : "s",
                 g->given == 1 ? "ies" : "y",
                 g->split ? "the split ones are all host work, outside every device cluster"
                 : g->maximal == g->given ? "every one puts its value whole on one device ({maximal})"
                 : g->maximal ? "every one is replicated or puts its value whole on one device ({maximal})"
                              : "every one is {replicated}",
                 (long long)n, (long long)n, (long long)n);
    char *msg = ir_sb_take(&w);
    if (msg)
        o->warn(o->warn_ctx, msg);
    ts_free(msg);
}

/* Step 2a: a module whose header names no partition count (JAX's lowered
 * text leaves it to the compile options) and no option gives one, but whose
 * shardings name devices: say what to pass rather than fail later, on the
 * first sharding, with "device 1 is out of range [0, 1)". */
static IrStatus check_count_given(const IrModule *src, const CompileOptions *o, IrDiag *d)
{
    if (!o->num_partitions && src->num_partitions <= 0)
        for (int32_t c = 0; c < src->ncomp; c++)
            for (int32_t i = 0; i < src->comp[c]->ninstr; i++) {
                const IrInstr *ins = &src->comp[c]->instr[i];
                int64_t k = ir_sharding_width(ins->sharding);
                if (k > 1)
                    return ir_error(d, IR_EINPUT, src->file, NULL, ins->pos,
                                    "the sharding of %s names %lld devices but module %s sets no num_partitions: "
                                    "pass --num-partitions %lld (or the device count it was lowered for)",
                                    ins->name, (long long)k, src->name ? src->name : "?", (long long)k);
            }
    return IR_OK;
}

/* Step 2b: shardings over more devices than the run's N partitions. When
 * one was made from a Shardy mesh that wide, say so in the user's terms
 * (the mesh, its devices, the partitions and where N came from) rather
 * than as the first sharding's "device 4 is out of range [0, 4)". */
static IrStatus check_meshes_fit(const IrModule *src, const CompileOptions *o, int64_t n, IrDiag *d)
{
    int64_t used = 0;
    for (int32_t c = 0; c < src->ncomp; c++)
        for (int32_t i = 0; i < src->comp[c]->ninstr; i++) {
            int64_t k = ir_sharding_width(src->comp[c]->instr[i].sharding);
            used = k > used ? k : used;
        }
    return ir_sdy_check_mesh_fits(src, n, used, !o->num_partitions, d);
}

/* Step 2: N and R from the options, else the header; within the bound. */
static IrStatus devices(const IrModule *src, const CompileOptions *o, int64_t *n, int64_t *r, IrDiag *d)
{
    *n = o->num_partitions ? o->num_partitions : (src->num_partitions > 0 ? src->num_partitions : 1);
    *r = o->num_replicas ? o->num_replicas : (src->replica_count > 0 ? src->replica_count : 1);
    int64_t maxdev = o->max_devices > 0 ? o->max_devices : COMPILE_DEFAULT_MAX_DEVICES;
    if (o->num_partitions < 0 || o->num_replicas < 0)
        return ir_error(d, IR_EINPUT, src->file, NULL, (IrPos){0, 0},
                        "%s must be 1 or more (0: the module's), not %lld",
                        o->num_partitions < 0 ? "num_partitions" : "num_replicas",
                        (long long)(o->num_partitions < 0 ? o->num_partitions : o->num_replicas));
    if (*n < 1 || *r < 1 || *n > maxdev || *r > maxdev || *n * *r > maxdev)
        return ir_error(d, IR_EINPUT, src->file, NULL, (IrPos){0, 0},
                        "%lld partitions x %lld replicas: at most %lld devices (--limit devices=N)", (long long)*n,
                        (long long)*r, (long long)maxdev);
    return IR_OK;
}

/* The fewest devices an SPMD program's collectives name, for a replay of
 * a module whose header and options do not say (most of XLA's test
 * modules): partitions and replicas past the largest id each group mode
 * lists (ir_group_mode), and, for empty groups, the group size that a
 * gather's or scatter's shapes imply. *g: global ids (N x R). */
static void devices_named(const IrModule *m, int64_t *n, int64_t *r, int64_t *g)
{
    *n = *r = *g = 1;
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            IrGroupMode mode = ir_group_mode(ins);
            int64_t *need = mode == IR_GROUPS_GLOBAL ? g : mode == IR_GROUPS_PARTITION ? n : r;
            if ((ins->op == OP_SEND || ins->op == OP_RECV) && !ins->a.x->is_host_transfer) {
                int64_t pairs[256];
                int32_t np = 0;
                if (ir_send_recv_pairs(ins, pairs, 256, &np))
                    for (int32_t k = 0; k < np; k++)
                        *need = pairs[k] + 1 > *need ? pairs[k] + 1 : *need;
                continue;
            }
            if (ir_op_family(ins->op) != FAM_COLLECTIVE)
                continue;
            const IrReplicaGroups *rg = &ins->a.x->replica_groups;
            for (int32_t k = 0; k < rg->ngroups; k++)
                for (int32_t j = 0; j < rg->group_size[k]; j++)
                    *need = rg->groups[k][j] + 1 > *need ? rg->groups[k][j] + 1 : *need;
            const IrI64List *pairs = &ins->a.x->source_target_pairs;
            for (int32_t k = 0; k < pairs->n; k++)
                *need = pairs->v[k] + 1 > *need ? pairs->v[k] + 1 : *need;
            /* Empty groups: everyone of the domain, as many as the shapes say. */
            bool gather = ins->op == OP_ALL_GATHER || ins->op == OP_ALL_GATHER_START;
            bool scatter = ins->op == OP_REDUCE_SCATTER;
            if (rg->ngroups > 0 || !(gather || scatter) || ins->nopnd < 1 || ins->a.dimensions.n != 1)
                continue;
            /* Operand 0 and its result: all-gather-start is (operands,
             * results); several operands give a tuple of results. */
            const IrShape *ps = &m->comp[c]->instr[ins->opnd[0]].shape, *rs = &ins->shape;
            if (ins->op == OP_ALL_GATHER_START && rs->type == IR_TUPLE && rs->ntuple == 2)
                rs = &rs->tuple[1];
            if (rs->type == IR_TUPLE && rs->ntuple >= 1)
                rs = &rs->tuple[0];
            int64_t dim = ins->a.dimensions.v[0];
            if (ps->type == IR_TUPLE || rs->type == IR_TUPLE || dim < 0 || dim >= ps->rank || dim >= rs->rank)
                continue;
            int64_t a = gather ? rs->dims[dim] : ps->dims[dim], b = gather ? ps->dims[dim] : rs->dims[dim];
            int64_t size = b > 0 && a % b == 0 ? a / b : 1;
            need = mode == IR_GROUPS_REPLICA_AND_PARTITION ? g : need;
            *need = size > *need ? size : *need;
        }
}

IrStatus compile_spmd_program(IrModule *m, const CompileOptions *opt, CompileResult *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    CompileOptions o = opt ? *opt : (CompileOptions){0};
    PlanProgram *p = &out->prog;
    /* N and R as for any module; where neither the options nor the header
     * say, the fewest devices the program's collectives name. */
    int64_t gn, gr, gg;
    devices_named(m, &gn, &gr, &gg);
    bool n_free = !o.num_partitions && m->num_partitions <= 0;
    if (n_free)
        o.num_partitions = gn;
    if (!o.num_replicas && m->replica_count <= 0)
        o.num_replicas = gr;
    int64_t r_eff = o.num_replicas ? o.num_replicas : m->replica_count;
    if (n_free && o.num_partitions * r_eff < gg)
        o.num_partitions = (gg + r_eff - 1) / r_eff;
    int64_t n = 1, r = 1;
    IrStatus st = devices(m, &o, &n, &r, d);
    if (st == IR_OK && !(p->cluster = ts_calloc(1, sizeof *p->cluster)))
        st = ir_oom(d, NULL);
    if (st != IR_OK) {
        ir_module_free(m);
        return st;
    }
    m->num_partitions = n;
    m->replica_count = r;
    p->num_partitions = n;
    p->num_replicas = r;
    p->ncluster = 1;
    PlanCluster *c = &p->cluster[0];
    *c = (PlanCluster){.replay = true, .spmd = m, .num_partitions = n, .num_replicas = r};
    if (!(c->report.arena = ir_arena_new()))
        st = ir_oom(d, NULL);
    if (st == IR_OK)
        st = plan_cluster_record_io(c, d);
    if (st == IR_OK)
        st = compile_replan(out, o.hosts ? o.hosts : 1, o.local_devices, d);
    if (st != IR_OK)
        compile_result_free(out);
    return st;
}

/* What compile_once tells compile_module's retry where step 5c found no
 * order that fits the memory limit. */
typedef struct FitMiss {
    int64_t over;            /* the least peak it reached, with the host program's bytes */
    int64_t host;            /* the host program's bytes */
    double auto_mem;         /* the auto-sharder's estimate of its plan's peak */
    bool search_failed;      /* step 3a, the auto-sharder, failed (its error in d) */
} FitMiss;

/* The pipeline once (compile_module); *miss (NULL: not asked) filled
 * where step 5c found no order that fits, else left as it is. */
static IrStatus compile_once(IrModule *src, const CompileOptions *opt, CompileResult *out, FitMiss *miss,
                             IrDiag *d)
{
    memset(out, 0, sizeof *out);
    CompileOptions o = opt ? *opt : (CompileOptions){0};
    PlanProgram *p = &out->prog;

    /* 2. devices */
    int64_t n = 1, r = 1;
    IrStatus st = check_count_given(src, &o, d);
    if (st == IR_OK)
        st = devices(src, &o, &n, &r, d);
    if (st == IR_OK)
        st = check_meshes_fit(src, &o, n, d);
    if (st == IR_OK)
        st = ir_verify_groups(src, n, r, d);
    if (st != IR_OK) {
        ir_module_free(src);
        return st;
    }
    /* (with --auto-shard the cost model chooses shardings: no warning) */
    GivenShardings given = {0};
    if (!o.auto_shard && !warn_unsharded(src, n, &o) && o.warn && n > 1)
        count_given(src, &given);
    warn_callbacks(src, &o);
    /* Shardings name partitions: a module annotated for 2 cannot run on 4
     * without rewriting its annotations. */
    src->num_partitions = n;
    src->replica_count = r;
    p->num_partitions = n;
    p->num_replicas = r;

    /* 3a. auto-shard */
    if (o.auto_shard) {
        st = auto_shard(src, o.auto_shard, &out->autoshard, d);
        if (st != IR_OK && miss)
            miss->search_failed = true;
    }

    /* 3. propagate (scans first become loops: the loop rules partition them) */
    ShdPropagateOptions popt = {.num_devices = n};
    bool scans = has_op(src, OP_SCAN);
    if (st == IR_OK)
        st = shd_expand_scans(src, d);
    if (st == IR_OK && scans)
        st = verify_after("scan-expansion", src, &o, d);
    if (st == IR_OK)
        st = shd_propagate(src, &popt, d);
    if (st == IR_OK)
        st = dump(&o, -1, "after_propagate", src, d);

    /* 4. place, form clusters, outline */
    IrModule **clusters = NULL;
    int32_t ncl = 0;
    if (st == IR_OK && has_host_work(src)) {
        st = clu_extract(src, NULL, &p->host, &out->res, d);
        if (st == IR_OK)
            st = verify_after("outlining", p->host, &o, d);
        if (st == IR_OK)
            st = dump(&o, -1, "after_outline", p->host, d);
        if (st == IR_OK) {
            p->host->num_partitions = n;
            p->host->replica_count = r;
            ncl = out->res.nclusters;
            clusters = ts_calloc((size_t)(ncl > 0 ? ncl : 1), sizeof *clusters);
            if (!clusters)
                st = ir_oom(d, NULL);
        }
        for (int32_t k = 0; st == IR_OK && k < ncl; k++) {
            st = clu_cluster_module(p->host, &out->res, k, &clusters[k], d);
            if (st == IR_OK)
                st = dump(&o, k, "after_outline", clusters[k], d);
        }
        ir_module_free(src);
    } else if (st == IR_OK) {
        /* No host work: the whole module is cluster 0. */
        clusters = ts_calloc(1, sizeof *clusters);
        if (!clusters) {
            st = ir_oom(d, NULL);
            ir_module_free(src);
        } else {
            clusters[0] = src;
            ncl = 1;
        }
    } else {
        ir_module_free(src);
    }

    /* 5. partition each cluster (taking its module); 5b. fit memory */
    int64_t host = 0;
    if (st == IR_OK) {
        p->cluster = ts_calloc((size_t)(ncl > 0 ? ncl : 1), sizeof *p->cluster);
        if (!p->cluster)
            st = ir_oom(d, NULL);
    }
    if (st == IR_OK && o.memory_limit > 0) {
        host = p->host ? plan_peak_bytes(p->host) : 0;
        if (miss)
            miss->host = host;
        out->fit = ts_calloc((size_t)(ncl > 0 ? ncl : 1), sizeof *out->fit);
        if (!out->fit || host < 0)
            st = ir_oom(d, NULL);
    }
    for (int32_t k = 0; k < ncl; k++) {
        if (st == IR_OK && p->cluster) {
            st = partition_cluster(clusters[k], &o, n, r, &p->cluster[k], k, host, out->fit ? &out->fit[k] : NULL,
                                   miss ? &miss->over : NULL, d);
            p->ncluster = k + 1;
        } else {
            ir_module_free(clusters[k]);
        }
    }
    ts_free(clusters);
    assert(st != IR_OK || p->host || p->ncluster == 1);
    /* 5d. the clusters' donation pairs made the host program's (--steps) */
    for (int32_t k = 0; st == IR_OK && p->host && k < p->ncluster; k++)
        if (clu_host_pairs(p->host, &out->res.clusters[k], p->cluster[k].spmd) != IR_OK)
            st = ir_oom(d, NULL);

    /* 6. trees, devices, islands */
    if (st == IR_OK)
        st = compile_replan(out, o.hosts ? o.hosts : 1, o.local_devices, d);
    if (st == IR_OK)
        warn_unsplit(&given, p, n, &o);
    ts_free(given.module);
    if (st != IR_OK && miss)
        miss->auto_mem = out->autoshard.mem;
    if (st != IR_OK)
        compile_result_free(out);
    return st;
}

/* The error of `from` into d (emptied), unless d holds one already (the
 * first error is the one kept); its status. */
static IrStatus hand_over(IrDiag *d, IrDiag *from)
{
    IrStatus st = from->status;
    if (d && d->status == IR_OK) {
        *d = *from;
        memset(from, 0, sizeof *from);
    }
    return st;
}

/* Is x a host op (cluster/: it runs on the host, its value the host
 * program's)? The auto-sharder's rule for the memory it charges. */
static bool on_host(const IrInstr *x)
{
    return clu_is_host_instr(x, NULL);
}

/* Plans the auto-sharder makes again under a lower limit of its own when
 * the partitioned program it chose does not fit (compile_module). */
#define AUTO_FIT_TRIES 3

/* With --auto-shard under --limit memory the auto-sharder chooses by its
 * own estimate of each plan's peak (auto/graph.c's memory rows), which
 * may be under the partitioner's (partition/memory.c, step 5c): a plan it
 * takes to fit may not. Then it plans again with its limit lowered by the
 * ratio of the limit to the peak that was reached (at most AUTO_FIT_TRIES
 * times), as a plan under the lower estimate holds less where the
 * estimates differ alike; where none fits, the first plan's error is the
 * one reported. tests/models/conv_in_feature.hlo on 8 devices under 1.1x
 * its hand plan's peak: the first plan estimated under the limit needed
 * 1.8x it. */
IrStatus compile_module(IrModule *src, const CompileOptions *opt, CompileResult *out, IrDiag *d)
{
    if (!opt || !opt->auto_shard || opt->memory_limit <= 0 || opt->auto_shard->mem_limit <= 0)
        return compile_once(src, opt, out, NULL, d);
    CompileOptions o = *opt;
    AutoOptions ao = *opt->auto_shard;
    if (!ao.on_host)
        ao.on_host = on_host;
    o.auto_shard = &ao;
    IrDiag first = {0}, refused = {0};
    bool unlimited = false;
    for (int32_t tries = 0;; tries++) {
        IrModule *again = tries < AUTO_FIT_TRIES || (!unlimited && ao.mem_limit > 0) ? ir_module_clone(src) : NULL;
        FitMiss miss = {0};
        IrDiag mine = {0};
        IrStatus st = compile_once(src, &o, out, &miss, &mine);
        int64_t over = miss.over, host = miss.host;
        if (st == IR_EINPUT && miss.search_failed && !unlimited && again) {
            /* The search refused the limit: its memory row counts no
             * recomputation, and the fit (step 5c) may meet with
             * recomputed values a limit no sharding meets without.
             * Planned once more with no limit in the search (its fastest
             * plan), the fit alone holds the limit; where it cannot,
             * both errors are said. */
            refused = mine;
            ao.mem_limit = 0;
            unlimited = true;
            src = again;
            continue;
        }
        if (unlimited && st != IR_OK && mine.status != IR_OK && !miss.search_failed) {
            ir_module_free(again);
            ir_error(d, st, mine.file, NULL, mine.pos, "%s (the search counts no recomputation); its fastest "
                     "sharding without the limit, fitted by recomputing values: %s",
                     refused.msg ? refused.msg : "no sharding fits the memory limit",
                     mine.msg ? mine.msg : "does not fit");
            ir_diag_clear(&first);
            ir_diag_clear(&refused);
            ir_diag_clear(&mine);
            return st;
        }
        if (unlimited && st != IR_OK) {
            /* The search failed without the limit too: its refusal is the
             * error (the first try's, where there was one before it). */
            ir_diag_clear(&mine);
            mine = refused;
            refused = (IrDiag){0};
        }
        if (st == IR_OK || over <= host || !again || host >= opt->memory_limit || unlimited) {
            ir_module_free(again);
            if (st != IR_OK && (first.status != IR_OK || mine.status != IR_OK))
                st = hand_over(d, first.status != IR_OK ? &first : &mine);
            ir_diag_clear(&first);
            ir_diag_clear(&refused);
            ir_diag_clear(&mine);
            return st;
        }
        if (first.status == IR_OK)
            first = mine;
        else
            ir_diag_clear(&mine);
        /* The auto-sharder's estimate is of the clusters alone (on_host:
         * the host program's values are not charged), so its limit is
         * what the host program leaves, lowered by the ratio of that to
         * the clusters' peak reached. */
        double room = (double)(opt->memory_limit - host);
        double own = (double)ao.mem_limit < room ? (double)ao.mem_limit : room;
        if ((double)ao.mem_limit > room && miss.auto_mem > room)
            ao.mem_limit = (int64_t)room; /* the plan was not asked to fit the clusters' room */
        else
            ao.mem_limit = (int64_t)((miss.auto_mem > 0 && miss.auto_mem < own ? miss.auto_mem : own) * room /
                                     (double)(over - host));
        if (ao.mem_limit < 1)
            ao.mem_limit = 1;
        ao.mem_asked = opt->memory_limit;
        src = again;
    }
}

void compile_result_free(CompileResult *r)
{
    for (int32_t k = 0; r->layouts && k < r->prog.ncluster; k++)
        device_layout_free(r->layouts[k]);
    ts_free(r->layouts);
    ts_free(r->fit);
    plan_program_free(&r->prog);
    clu_result_free(&r->res);
    auto_report_free(&r->autoshard);
    memset(r, 0, sizeof *r);
}
