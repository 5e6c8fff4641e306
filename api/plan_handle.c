/*
 * plan_handle.c: TsPlan: a module compiled by compile/ (keeping the module,
 * for the reference run) or a plan file loaded back; saving it, dumping it,
 * changing its host layout, and describing its inputs and outputs.
 */
#include "api_internal.h"

#include <ctype.h>
#include <nettle/sha2.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The module whose entry parameters are the program's inputs: the host
 * program, or (no host work) one built from cluster 0's logical shapes. */
static IrStatus make_signature(TsPlan *p, IrDiag *d)
{
    if (p->r.prog.host || p->r.prog.ncluster == 0)
        return IR_OK;
    p->signature = rt_signature_module(&p->r.prog.cluster[0]);
    return p->signature ? IR_OK : ir_oom(d, NULL);
}

static const IrModule *signature(const TsPlan *p)
{
    return p->r.prog.host ? p->r.prog.host : p->signature;
}

/* Every custom-call target of the program runs here (checked before
 * anything runs, for a model and for a plan alike). */
static IrStatus check_targets(const PlanProgram *prog, IrDiag *d)
{
    IrStatus st = prog->host ? rt_check_custom_calls(prog->host, d) : IR_OK;
    for (int32_t k = 0; st == IR_OK && k < prog->ncluster; k++)
        st = rt_check_custom_calls(prog->cluster[k].spmd, d);
    return st;
}

static TsStatus finish(TsPlan *p, IrStatus st, TsPlan **out, IrDiag *id, TsDiag *d)
{
    if (st == IR_OK)
        st = make_signature(p, id);
    if (st != IR_OK) {
        ts_plan_free(p);
        return api_give(st, id, d);
    }
    *out = p;
    return TS_OK;
}

/* ---- --dump-dir: the module after each pass ---- */

/* Where the dumps go and how many were written (their numbers are the
 * pass order, as XLA's --xla_dump_to numbers its files). */
typedef struct DumpDir {
    const char *dir;
    char module[128];        /* the module's name, made safe for a file name */
    int32_t n;
} DumpDir;

static IrStatus dump_open(DumpDir *dd, const char *dir, const char *module, IrDiag *d)
{
    dd->dir = dir;
    dd->n = 0;
    size_t k = 0;
    for (const char *c = module && *module ? module : "module"; *c && k + 1 < sizeof dd->module; c++)
        dd->module[k++] = (isalnum((unsigned char)*c) || *c == '_' || *c == '-' || *c == '.') ? *c : '_';
    dd->module[k] = 0;
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? IR_OK : ir_error(d, IR_EINPUT, dir, NULL, (IrPos){0, 0}, "--dump-dir: not a directory");
    if (mkdir(dir, 0777) != 0)
        return ir_error(d, IR_ERUNTIME, dir, NULL, (IrPos){0, 0}, "--dump-dir: cannot create the directory: %s",
                        strerror(errno));
    return IR_OK;
}

/* DIR/NNNN.MODULE.WHAT.EXT holding text (NULL: out of memory). */
static IrStatus dump_text(DumpDir *dd, const char *what, const char *ext, char *text, IrDiag *d)
{
    if (!text)
        return ir_oom(d, NULL);
    char *path = ts_malloc(strlen(dd->dir) + strlen(dd->module) + strlen(what) + strlen(ext) + 16);
    if (!path) {
        ts_free(text);
        return ir_oom(d, NULL);
    }
    sprintf(path, "%s/%04d.%s.%s.%s", dd->dir, (int)++dd->n, dd->module, what, ext);
    TsDiag td = {0};
    TsStatus st = ts_write_text(path, text, &td);
    ts_free(text);
    ts_free(path);
    IrStatus r = IR_OK;
    if (st != TS_OK)
        r = ir_error(d, IR_ERUNTIME, td.file, NULL, (IrPos){0, 0}, "%s", td.msg ? td.msg : "cannot write a dump");
    ts_diag_clear(&td);
    return r;
}

static IrStatus dump_module(void *ctx, const char *what, const IrModule *m, IrDiag *d)
{
    return dump_text(ctx, what, "hlo", ir_print_module(m), d);
}

/* Keep a copy of the signing key in p; false when out of memory. */
static bool set_key(TsPlan *p, const void *key, size_t len)
{
    p->key = ts_malloc(len);
    if (!p->key)
        return false;
    memcpy(p->key, key, len);
    p->keylen = len;
    return true;
}

/* The options of --auto-shard: the mesh (else one axis over the
 * partitions), which sets N when the options do not; the profile; the
 * memory limit per device. */
static IrStatus auto_options(const IrModule *src, const TsCompileOptions *o, CompileOptions *co, AutoOptions *ao,
                             IrDiag *d)
{
    memset(ao, 0, sizeof *ao);
    if (!o->auto_shard)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "--mesh, --profile and --host-cores choose shardings: give them with --auto-shard");
    if (o->spmd)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "--auto-shard chooses shardings for a module; an SPMD program (--spmd) has its own");
    int64_t n = o->num_partitions ? o->num_partitions : (src->num_partitions > 0 ? src->num_partitions : 1);
    char one[32];
    snprintf(one, sizeof one, "x=%lld", (long long)n);
    IrStatus st = auto_mesh_parse(o->mesh ? o->mesh : one, &ao->mesh, d);
    if (st != IR_OK)
        return st;
    if (!o->num_partitions)
        co->num_partitions = ao->mesh.ndevices;
    int64_t profile_cores = 0;
    if (o->profile && (st = api_profile_load(o->profile, &ao->cost, &profile_cores, d)) != IR_OK)
        return st;
    int64_t nr = (co->num_partitions ? co->num_partitions : n) * (o->num_replicas ? o->num_replicas : 1);
    int64_t hosts = o->hosts > 0 ? o->hosts : 1;
    ao->local_devices = o->local_devices > 0 ? o->local_devices : (nr / hosts > 0 ? nr / hosts : 1);
    ao->link_gbps = o->link_gbps;
    ao->host_cores = o->host_cores > 0 ? o->host_cores : profile_cores;
    ao->donate_auto = o->donate == TS_DONATE_AUTO;
    if (o->limits && o->limits->memory_bytes > 0)
        ao->mem_limit = o->limits->memory_bytes; /* per device, as compile's fitting reads it */
    return IR_OK;
}

/* Compile `src` (taken), keeping `reference` (taken, may be NULL) for
 * ts_plan_run_reference. */
static TsStatus compile_taken(IrModule *src, IrModule *reference, const TsCompileOptions *o, TsPlan **out,
                              TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    TsPlan *p = ts_calloc(1, sizeof *p);
    if (!p) {
        ir_module_free(src);
        ir_module_free(reference);
        return api_give(ir_oom(&id, NULL), &id, d);
    }
    TsCompileOptions none = {0};
    if (!o)
        o = &none;
    if (o->donate != TS_DONATE_DECLARED && o->donate != TS_DONATE_AUTO) {
        ir_module_free(src);
        ir_module_free(reference);
        ts_free(p);
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "donate must be TS_DONATE_DECLARED or TS_DONATE_AUTO, not %d", (int)o->donate),
                        &id, d);
    }
    if (!(o->link_gbps >= 0 && o->link_gbps <= 1e6)) { /* NaN too */
        ir_module_free(src);
        ir_module_free(reference);
        ts_free(p);
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "link_gbps must be 0 (the default, 10) or a bandwidth in Gb/s up to 1000000"),
                        &id, d);
    }
    if (o->host_cores < 0) {
        ir_module_free(src);
        ir_module_free(reference);
        ts_free(p);
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "host_cores must be 0 (a core per device) or a count of cores, not %lld",
                                 (long long)o->host_cores),
                        &id, d);
    }
    if (src->src) /* the model's text, for the outputs' manifest */
        compile_sha256_hex(src->src, strlen(src->src), p->sha256);
    if (o->sign_key && (o->sign_key_len == 0 || !set_key(p, o->sign_key, o->sign_key_len))) {
        ir_module_free(src);
        ir_module_free(reference);
        ts_free(p);
        return api_give(o->sign_key_len ? ir_oom(&id, NULL)
                                        : ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                                   "sign_key is empty (sign_key_len 0): a key needs bytes"),
                        &id, d);
    }
    int64_t maxdev = 0;
    (void)api_limits(o->limits, &maxdev);
    CompileOptions co = {.num_partitions = o->num_partitions, .num_replicas = o->num_replicas, .hosts = o->hosts,
                         .local_devices = o->local_devices, .max_devices = maxdev, .no_verify = o->no_verify,
                         .link_gbps = o->link_gbps, .warn = o->on_warning, .warn_ctx = o->warning_ctx,
                         .donate_auto = o->donate == TS_DONATE_AUTO,
                         .memory_limit = o->limits && o->limits->memory_bytes > 0 ? o->limits->memory_bytes : 0};
    p->reference = reference;
    DumpDir dd;
    AutoOptions ao;
    IrStatus st = rt_check_custom_calls(src, &id);
    if (st == IR_OK && (o->auto_shard || o->mesh || o->profile || o->host_cores)) {
        st = auto_options(src, o, &co, &ao, &id);
        co.auto_shard = &ao;
    }
    if (st == IR_OK && o->dump_dir) {
        co.dump = dump_module;
        co.dump_ctx = &dd;
        st = dump_open(&dd, o->dump_dir, src->name, &id);
        if (st == IR_OK)
            st = dump_module(&dd, o->spmd ? "as_given" : "after_parse", src, &id);
    }
    if (st == IR_OK)
        st = o->spmd ? compile_spmd_program(src, &co, &p->r, &id) : compile_module(src, &co, &p->r, &id);
    else
        ir_module_free(src);
    if (st == IR_OK && o->dump_dir)
        st = dump_text(&dd, "plan", "json", compile_plan_json(&p->r), &id);
    return finish(p, st, out, &id, d);
}

TsStatus ts_compile(const TsModule *m, const TsCompileOptions *o, TsPlan **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(m, d);
    API_NEED(out, d);
    IrModule *src = ir_module_clone(m->ir), *ref = src ? ir_module_clone(m->ir) : NULL;
    if (!ref) {
        IrDiag id = {0};
        *out = NULL;
        ir_module_free(src);
        return api_give(ir_oom(&id, NULL), &id, d);
    }
    return compile_taken(src, ref, o, out, d);
}

/* A plan from its text, its signature checked against key (NULL: none;
 * compile_plan_check_signature), the key kept for saving it again. */
static TsStatus plan_parse(const char *name, const char *text, size_t len, const TsLimits *lim, const void *key,
                           size_t keylen, TsPlan **out, TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    TsPlan *p = ts_calloc(1, sizeof *p);
    if (!p)
        return api_give(ir_oom(&id, NULL), &id, d);
    int64_t maxdev = 0;
    IrLimits il = api_limits(lim, &maxdev);
    compile_sha256_hex(text, len, p->sha256);
    IrStatus st = compile_plan_load(name, text, len, &il, &p->r, &id);
    if (st == IR_OK)
        st = compile_plan_check_signature(name, text, len, key, keylen, &id);
    if (st == IR_OK && key && !set_key(p, key, keylen))
        st = ir_oom(&id, NULL);
    if (st == IR_OK)
        st = check_targets(&p->r.prog, &id);
    return finish(p, st, out, &id, d);
}

TsStatus ts_plan_parse(const char *name, const char *text, size_t len, const TsLimits *lim, TsPlan **out,
                       TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(text, d);
    API_NEED(out, d);
    return plan_parse(name, text, len, lim, NULL, 0, out, d);
}

static TsStatus parse_any(const char *name, const char *text, size_t len, const TsLimits *lim, void **out,
                          TsDiag *d)
{
    TsPlan *p = NULL;
    TsStatus st = ts_plan_parse(name, text, len, lim, &p, d);
    *out = p;
    return st;
}

TsStatus ts_plan_load(const char *path, const TsLimits *lim, TsPlan **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(path, d);
    API_NEED(out, d);
    void *p = NULL;
    TsStatus st = api_parse_file(path, lim, parse_any, &p, d);
    *out = p;
    return st;
}

/* --dump-dir of a plan file: nothing is compiled; its modules as loaded
 * and its plan JSON. */
static TsStatus dump_loaded(const TsPlan *p, const char *dir, TsDiag *d)
{
    IrDiag id = {0};
    DumpDir dd;
    const PlanProgram *prog = &p->r.prog;
    const IrModule *first = prog->host ? prog->host : prog->ncluster ? prog->cluster[0].spmd : NULL;
    IrStatus st = dump_open(&dd, dir, first ? first->name : "plan", &id);
    if (st == IR_OK && prog->host)
        st = dump_module(&dd, "host.after_load", prog->host, &id);
    for (int32_t k = 0; st == IR_OK && k < prog->ncluster; k++) {
        char what[48];
        snprintf(what, sizeof what, "cluster_%d.after_load", (int)k);
        st = dump_module(&dd, what, prog->cluster[k].spmd, &id);
    }
    if (st == IR_OK && prog->ncluster)
        st = dump_text(&dd, "plan", "json", compile_plan_json(&p->r), &id);
    return api_give(st, &id, d);
}

TsStatus ts_plan_open(const char *path, const TsCompileOptions *o, TsPlan **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(path, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    TsCompileOptions none = {0};
    if (!o)
        o = &none;
    size_t len = 0;
    char *text = api_read_file(path, &len, &id);
    if (!text)
        return api_give(id.status, &id, d);
    TsStatus st;
    size_t body = 0;
    if (o->sign_key && !o->sign_key_len) {
        ts_free(text);
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "sign_key is empty (sign_key_len 0): a key needs bytes"),
                        &id, d);
    }
    if (compile_is_plan_text(text, len) &&
        (compile_plan_check_frame(path, text, len, &body, &id) != IR_OK ||
         compile_plan_check_signature(path, text, len, o->sign_key, o->sign_key_len, &id) != IR_OK)) {
        /* Refused before anything else reads it, replays too. */
        ts_free(text);
        return api_give(id.status, &id, d);
    }
    if (o->spmd && compile_is_plan_text(text, len) && memmem(text, len, "// TesselHost", 13)) {
        /* Several modules: the host program and each cluster's. */
        ts_free(text);
        return api_give(ir_error(&id, IR_EINPUT, path, NULL, (IrPos){0, 0},
                                 "a plan with host work holds the host program and each cluster's SPMD program; "
                                 "--spmd replays one SPMD program: run this plan without --spmd"),
                        &id, d);
    }
    if (!o->spmd && compile_is_plan_text(text, len)) {
        st = plan_parse(path, text, len, o->limits, o->sign_key, o->sign_key_len, out, d);
        const TsPlan *p = *out;
        if (st == TS_OK && ((o->num_partitions && o->num_partitions != p->r.prog.num_partitions) ||
                            (o->num_replicas && o->num_replicas != p->r.prog.num_replicas))) {
            ir_error(&id, IR_EINPUT, path, NULL, (IrPos){0, 0},
                     "the plan was compiled for %lld partitions x %lld replicas; recompile to change them",
                     (long long)p->r.prog.num_partitions, (long long)p->r.prog.num_replicas);
            ts_plan_free(*out);
            *out = NULL;
            st = api_give(IR_EINPUT, &id, d);
        } else if (st == TS_OK && (o->auto_shard || o->mesh)) {
            /* options that choose the shardings of a compile: a plan's
             * are chosen (they were ignored without a word) */
            ir_error(&id, IR_EINPUT, path, NULL, (IrPos){0, 0},
                     "%s chooses the shardings when a model is compiled, and this plan is compiled: give the "
                     "model, or leave %s out",
                     o->auto_shard ? "--auto-shard" : "--mesh", o->auto_shard ? "--auto-shard" : "--mesh");
            ts_plan_free(*out);
            *out = NULL;
            st = api_give(IR_EINPUT, &id, d);
        } else if (st == TS_OK && (o->hosts || o->local_devices)) {
            st = ts_plan_set_layout(*out, o->hosts ? o->hosts : 1, o->local_devices, d);
            if (st != TS_OK) {
                ts_plan_free(*out);
                *out = NULL;
            }
        }
        if (st == TS_OK && o->dump_dir && (st = dump_loaded(*out, o->dump_dir, d)) != TS_OK) {
            ts_plan_free(*out);
            *out = NULL;
        }
    } else {
        /* The parsed module is compiled; its text stays for the reference
         * (ts_plan_run_reference parses it again). */
        TsModule *m = NULL;
        st = ts_module_parse(path, text, len, o->limits, &m, d);
        if (st == TS_OK) {
            IrModule *src = m->ir;
            m->ir = NULL;
            st = compile_taken(src, NULL, o, out, d);
        }
        ts_module_free(m);
        char *name = st == TS_OK ? ts_strdup(path) : NULL;
        if (st == TS_OK && !name) {
            ts_plan_free(*out);
            *out = NULL;
            st = api_give(ir_oom(&id, NULL), &id, d);
        }
        if (st == TS_OK) {
            int64_t maxdev = 0;
            (*out)->ref_text = text;
            (*out)->ref_len = len;
            (*out)->ref_name = name;
            (*out)->ref_limits = api_limits(o->limits, &maxdev);
            text = NULL;
        }
    }
    ts_free(text);
    return st;
}

char *ts_plan_explain(const TsPlan *p)
{
    return p && p->r.autoshard.explain ? ts_strdup(p->r.autoshard.explain) : NULL;
}

char *ts_plan_explain_json(const TsPlan *p)
{
    return p && p->r.autoshard.explain_json ? ts_strdup(p->r.autoshard.explain_json) : NULL;
}

void ts_plan_free(TsPlan *p)
{
    if (!p)
        return;
    compile_result_free(&p->r);
    ir_module_free(p->reference);
    ts_free(p->ref_text);
    ts_free(p->ref_name);
    ir_module_free(p->signature);
    ts_free(p->key);
    ts_free(p);
}

TsStatus ts_plan_set_layout(TsPlan *p, int64_t hosts, int64_t local_devices, TsDiag *d)
{
    API_NEED(p, d);
    IrDiag id = {0};
    if (hosts < 1 || local_devices < 0)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "hosts must be at least 1 and local devices at least 0"),
                        &id, d);
    return api_give(compile_replan(&p->r, hosts, local_devices, &id), &id, d);
}

int64_t ts_plan_num_partitions(const TsPlan *p) { return p ? p->r.prog.num_partitions : 0; }
int64_t ts_plan_num_replicas(const TsPlan *p) { return p ? p->r.prog.num_replicas : 0; }
int64_t ts_plan_hosts(const TsPlan *p) { return !p ? 0 : p->r.prog.hosts > 0 ? p->r.prog.hosts : 1; }
int32_t ts_plan_num_clusters(const TsPlan *p) { return p ? p->r.prog.ncluster : 0; }
bool ts_plan_from_file(const TsPlan *p) { return p && p->r.from_plan; }

int64_t ts_plan_local_devices(const TsPlan *p)
{
    if (!p)
        return 0;
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    return p->r.prog.local_devices > 0 ? p->r.prog.local_devices : ndev / ts_plan_hosts(p);
}

char *ts_plan_file_text(const TsPlan *p)
{
    if (!p)
        return NULL;
    return compile_plan_file_text_signed(&p->r, p->key, p->keylen);
}

char *ts_plan_memory_fit(const TsPlan *p)
{
    return p ? compile_fit_summary(&p->r) : NULL;
}

TsStatus ts_plan_save(const TsPlan *p, const char *path, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(path, d);
    IrDiag id = {0};
    if (p->r.prog.ncluster == 1 && p->r.prog.cluster[0].replay)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "a replayed SPMD program has no plan file: the module is its own program"),
                        &id, d);
    char *text = ts_plan_file_text(p);
    if (!text)
        return api_give(ir_oom(&id, NULL), &id, d);
    TsStatus st = ts_write_text(path, text, d);
    ts_free(text);
    return st;
}

TsStatus ts_plan_dump(const TsPlan *p, const char *format, char **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(out, d);
    TsDumpOptions o = {.format = format};
    return ts_plan_dump_ex(p, &o, out, d);
}

/* Does `name` name a computation or an instruction of a cluster's logical
 * module (what --expand can open)? */
static bool names_something(const TsPlan *p, const char *name)
{
    for (int32_t k = 0; k < p->r.prog.ncluster; k++) {
        const IrModule *m = p->r.prog.cluster[k].src;
        for (int32_t c = 0; m && c < m->ncomp; c++) {
            if (strcmp(m->comp[c]->name, name) == 0)
                return true;
            for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
                if (strcmp(m->comp[c]->instr[i].name, name) == 0)
                    return true;
        }
    }
    return false;
}

TsStatus ts_plan_dump_ex(const TsPlan *p, const TsDumpOptions *o, char **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    const char *f = o && o->format ? o->format : "text";
    bool json = strcmp(f, "json") == 0, dot = strcmp(f, "dot") == 0, html = strcmp(f, "html") == 0;
    if (!json && !dot && !html && strcmp(f, "text") != 0)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--format must be text, json, dot or html, not '%s'", f),
                        &id, d);
    if (o && o->nexpand > 0 && !o->expand)
        return api_null(d, __func__, "o->expand");
    for (int32_t k = 0; o && k < o->nexpand; k++)
        if (!o->expand[k]) {
            char what[40];
            snprintf(what, sizeof what, "o->expand[%d]", (int)k);
            return api_null(d, __func__, what);
        } else if (!names_something(p, o->expand[k])) {
            const char *near = compile_plan_nearest_name(&p->r, o->expand[k], true);
            return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                     "--expand %s: no computation or instruction of that name%s%s%s%s", o->expand[k],
                                     p->r.from_plan ? " (a plan file keeps no logical module to expand)" : "",
                                     near ? "; did you mean " : "", near ? near : "", near ? "?" : ""),
                            &id, d);
        }
    PlanView view = {.nexpand = o ? o->nexpand : 0, .expand = o ? o->expand : NULL,
                     .graph_svg = o ? o->graph_svg : NULL};
    if (p->r.prog.ncluster == 0)
        *out = ts_strdup(json ? "{\"clusters\": []}\n"
                         : dot ? "digraph \"plan\" {\n}\n"
                         : html ? "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tessel plan</title>"
                                  "</head><body><p>No device work: nothing is partitioned.</p></body></html>\n"
                                : "no device work: nothing is partitioned\n");
    else if (html)
        *out = compile_plan_html(&p->r, &view);
    else
        *out = json ? compile_plan_json(&p->r) : dot ? compile_plan_dot(&p->r, &view) : compile_plan_text(&p->r);
    if (!*out)
        return api_give(ir_oom(&id, NULL), &id, d);
    return TS_OK;
}

/* ---- inputs and outputs ---- */

static void describe(const IrShape *s, const char *name, TsArrayInfo *info)
{
    memset(info, 0, sizeof *info);
    info->name = name;
    const char *descr = rt_npy_descr(s->type);
    snprintf(info->dtype, sizeof info->dtype, "%s", descr ? descr : "");
    snprintf(info->type, sizeof info->type, "%s", ir_type_name(s->type));
    info->rank = s->rank;
    for (int32_t k = 0; k < s->rank; k++)
        info->dims[k] = s->dims[k];
    int64_t n = ir_shape_elements(s);
    info->nbytes = descr && n >= 0 ? (size_t)n * ir_type_size(rt_npy_disk_type(s->type)) : 0;
}

int32_t ts_plan_num_inputs(const TsPlan *p)
{
    if (!p)
        return 0;
    const IrModule *sig = signature(p);
    int64_t n = sig ? rt_entry_leaf_count(sig) : 0;
    return n > 0 ? (int32_t)n : 0;
}

static const IrShape *root_shape(const TsPlan *p)
{
    if (p->r.prog.host) {
        const IrComputation *e = ir_entry(p->r.prog.host);
        return &e->instr[e->root].shape;
    }
    return p->r.prog.ncluster ? &p->r.prog.cluster[0].out_shape : NULL;
}

/* The module whose input_output_alias --steps follows: the host
 * program, else cluster 0's program. */
static const IrModule *alias_module(const TsPlan *p)
{
    return p->r.prog.host ? p->r.prog.host : p->r.prog.ncluster ? p->r.prog.cluster[0].spmd : NULL;
}

int32_t ts_plan_num_aliases(const TsPlan *p)
{
    if (!p)
        return 0;
    const IrModule *m = alias_module(p);
    return m ? m->nalias : 0;
}

/* Alias k (*al) and its output value, whose first leaf (depth first) is
 * *leaf: the leaves of the elements before it, at every level. NULL after
 * an error in id. */
static const IrShape *alias_output(const TsPlan *p, int32_t k, const IrAlias **al, int32_t *leaf, IrDiag *id)
{
    const IrModule *m = alias_module(p);
    const IrShape *s = root_shape(p);
    if (!m || k < 0 || k >= m->nalias || !s) {
        ir_error(id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no alias %d (there are %d)", (int)k,
                 (int)ts_plan_num_aliases(p));
        return NULL;
    }
    *al = &m->alias[k];
    *leaf = 0;
    for (int32_t j = 0; j < (*al)->output_index.n; j++) {
        int64_t e = (*al)->output_index.v[j];
        if (s->type != IR_TUPLE || e < 0 || e >= s->ntuple) {
            ir_error(id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "alias %d names no output of the program", (int)k);
            return NULL;
        }
        for (int64_t q = 0; q < e; q++)
            *leaf += ir_shape_leaf_count(&s->tuple[q]);
        s = &s->tuple[e];
    }
    return s;
}

TsStatus ts_plan_alias(const TsPlan *p, int32_t k, int32_t *output_leaf, int32_t *param, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(output_leaf, d);
    API_NEED(param, d);
    IrDiag id = {0};
    const IrAlias *al = NULL;
    int32_t leaf = 0;
    const IrShape *s = alias_output(p, k, &al, &leaf, &id);
    if (!s)
        return api_give(id.status, &id, d);
    if (s->type == IR_TUPLE || al->param_index.n)
        return api_give(ir_error(&id, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                                 "alias %d moves a tuple or a leaf of a tuple parameter, not one array "
                                 "parameter (ts_plan_alias_leaves gives its leaves)", (int)k),
                        &id, d);
    *output_leaf = leaf;
    *param = (int32_t)al->param_number;
    return TS_OK;
}

/* The shape of entry parameter `param` of the module m, or NULL when it
 * has none. */
static const IrShape *param_shape_of(const IrModule *m, int64_t param)
{
    const IrComputation *e = m ? ir_entry(m) : NULL;
    return e && param >= 0 && param < e->nparam ? &e->instr[e->param[param]].shape : NULL;
}

TsStatus ts_plan_alias_leaves(const TsPlan *p, int32_t k, int32_t *output_leaf, int32_t *param, int32_t *param_leaf,
                              int32_t *count, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(output_leaf, d);
    API_NEED(param, d);
    API_NEED(param_leaf, d);
    API_NEED(count, d);
    IrDiag id = {0};
    const IrAlias *al = NULL;
    int32_t leaf = 0;
    const IrShape *os = alias_output(p, k, &al, &leaf, &id);
    if (!os)
        return api_give(id.status, &id, d);
    /* the run's own check first: a bad pair is refused at its place in the
     * header (FILE:LINE:COL), as --steps refuses it */
    if (rt_check_aliases(alias_module(p), &id) != IR_OK)
        return api_give(id.status, &id, d);
    const IrShape *ps = param_shape_of(alias_module(p), al->param_number);
    if (!ps)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "alias %d names parameter %lld, which the program does not have", (int)k,
                                 (long long)al->param_number),
                        &id, d);
    bool tuple = ps->type == IR_TUPLE;
    int32_t first = 0;
    for (int32_t j = 0; j < al->param_index.n; j++) {
        int64_t e = al->param_index.v[j];
        if (ps->type != IR_TUPLE || e < 0 || e >= ps->ntuple)
            return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                     "alias %d names no value of parameter %lld", (int)k,
                                     (long long)al->param_number),
                            &id, d);
        for (int64_t q = 0; q < e; q++)
            first += ir_shape_leaf_count(&ps->tuple[q]);
        ps = &ps->tuple[e];
    }
    int32_t n = ir_shape_leaf_count(os);
    if (n != ir_shape_leaf_count(ps))
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "alias %d: its output has %d leaves, the value of parameter %lld it names %d",
                                 (int)k, (int)n, (long long)al->param_number, (int)ir_shape_leaf_count(ps)),
                        &id, d);
    *output_leaf = leaf;
    *param = (int32_t)al->param_number;
    *param_leaf = tuple ? first : -1;
    *count = n;
    return TS_OK;
}

TsStatus ts_plan_input_key(const TsPlan *p, const char *key, int32_t *param, int32_t *leaf, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(key, d);
    API_NEED(param, d);
    API_NEED(leaf, d);
    IrDiag id = {0};
    const IrModule *sig = signature(p);
    const IrComputation *e = sig ? ir_entry(sig) : NULL;
    int64_t pn = -1, lf = -1;
    if (!e)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "the program has no entry"), &id, d);
    if (rt_input_key_resolve(e, key, &pn, &lf, &id) != IR_OK)
        return api_give(id.status, &id, d);
    const IrShape *ps = param_shape_of(sig, pn);
    int32_t n = ps ? ir_shape_leaf_count(ps) : 0;
    bool tuple = ps && ps->type == IR_TUPLE;
    if (!ps || (tuple && (lf < 0 || lf >= n)) || (!tuple && lf > 0))
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "input %s names no parameter or leaf of one", key),
                        &id, d);
    *param = (int32_t)pn;
    *leaf = tuple ? (int32_t)lf : -1;
    return TS_OK;
}

TsStatus ts_plan_digest(const TsPlan *p, char out[65], TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(out, d);
    IrDiag id = {0};
    char *text = ts_plan_file_text(p);
    if (!text)
        return api_give(ir_oom(&id, NULL), &id, d);
    struct sha256_ctx c;
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, strlen(text), (const uint8_t *)text);
    sha256_digest(&c, sizeof dg, dg);
    ts_free(text);
    compile_digest_hex(dg, out);
    return TS_OK;
}

int32_t ts_plan_num_outputs(const TsPlan *p)
{
    if (!p)
        return 0;
    const IrShape *s = root_shape(p);
    return s ? ir_shape_leaf_count(s) : 0;
}

TsStatus ts_plan_input_info(const TsPlan *p, int32_t leaf, TsArrayInfo *info, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(info, d);
    IrDiag id = {0};
    const IrModule *sig = signature(p);
    const IrComputation *e = sig ? ir_entry(sig) : NULL;
    int64_t first = 0;
    for (int32_t q = 0; e && q < e->nparam; q++) {
        const IrInstr *pi = &e->instr[e->param[q]];
        int32_t n = ir_shape_leaf_count(&pi->shape);
        if (leaf >= first && leaf < first + n) {
            describe(ir_shape_leaf(&pi->shape, (int32_t)(leaf - first)), pi->name, info);
            return TS_OK;
        }
        first += n;
    }
    return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no input leaf %d (the plan has %d)",
                             (int)leaf, (int)ts_plan_num_inputs(p)),
                    &id, d);
}

TsStatus ts_plan_output_info(const TsPlan *p, int32_t leaf, TsArrayInfo *info, TsDiag *d)
{
    API_NEED(p, d);
    API_NEED(info, d);
    IrDiag id = {0};
    const IrShape *s = root_shape(p);
    if (!s || leaf < 0 || leaf >= ir_shape_leaf_count(s))
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no output leaf %d (the plan has %d)",
                                 (int)leaf, (int)ts_plan_num_outputs(p)),
                        &id, d);
    describe(ir_shape_leaf(s, leaf), NULL, info);
    return TS_OK;
}

/* The error of --show and --why on a plan whose every instruction is host
 * work: nothing was partitioned, so there is nothing to show. */
static TsStatus no_device_work(const char *option, const char *name, TsDiag *d)
{
    IrDiag id = {0};
    return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                             "%s %s: no device work: nothing is partitioned", option, name),
                    &id, d);
}

TsStatus ts_plan_show(const TsPlan *p, const char *name, unsigned flags, char **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(name, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    if (p->r.prog.ncluster == 0)
        return no_device_work("--show", name, d);
    unsigned gf = (flags & TS_SHOW_ASCII ? GRID_ASCII : 0) | (flags & TS_SHOW_COLOUR ? GRID_COLOUR : 0);
    *out = compile_plan_show(&p->r, name, gf, &id);
    return *out ? TS_OK : api_give(id.status, &id, d);
}

TsStatus ts_plan_why(const TsPlan *p, const char *name, char **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(p, d);
    API_NEED(name, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    if (p->r.prog.ncluster == 0)
        return no_device_work("--why", name, d);
    *out = compile_plan_why(&p->r, name, &id);
    return *out ? TS_OK : api_give(id.status, &id, d);
}
