/*
 * plan.c: TsPlan: a module compiled by compile/ (keeping the module, for
 * the reference run) or a plan file loaded back; saving it, dumping it,
 * changing its host layout, and describing its inputs and outputs.
 */
#include "api_internal.h"

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
    return p->signature ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
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
        return api_give(ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory"), &id, d);
    }
    TsCompileOptions none = {0};
    if (!o)
        o = &none;
    if (src->src) /* the model's text, for the outputs' manifest */
        compile_sha256_hex(src->src, strlen(src->src), p->sha256);
    int64_t maxdev = 0;
    (void)api_limits(o->limits, &maxdev);
    CompileOptions co = {o->num_partitions, o->num_replicas, o->hosts, o->local_devices, maxdev, o->no_verify};
    p->reference = reference;
    IrStatus st = rt_check_custom_calls(src, &id);
    if (st == IR_OK)
        st = o->spmd ? compile_spmd_program(src, &co, &p->r, &id) : compile_module(src, &co, &p->r, &id);
    else
        ir_module_free(src);
    return finish(p, st, out, &id, d);
}

TsStatus ts_compile(const TsModule *m, const TsCompileOptions *o, TsPlan **out, TsDiag *d)
{
    IrModule *src = ir_module_clone(m->ir), *ref = src ? ir_module_clone(m->ir) : NULL;
    if (!ref) {
        IrDiag id = {0};
        *out = NULL;
        ir_module_free(src);
        return api_give(ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory"), &id, d);
    }
    return compile_taken(src, ref, o, out, d);
}

TsStatus ts_plan_parse(const char *name, const char *text, size_t len, const TsLimits *lim, TsPlan **out,
                       TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    TsPlan *p = ts_calloc(1, sizeof *p);
    if (!p)
        return api_give(ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory"), &id, d);
    int64_t maxdev = 0;
    IrLimits il = api_limits(lim, &maxdev);
    compile_sha256_hex(text, len, p->sha256);
    IrStatus st = compile_plan_load(name, text, len, &il, &p->r, &id);
    if (st == IR_OK)
        st = check_targets(&p->r.prog, &id);
    return finish(p, st, out, &id, d);
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
    void *p = NULL;
    TsStatus st = api_parse_file(path, lim, parse_any, &p, d);
    *out = p;
    return st;
}

TsStatus ts_plan_open(const char *path, const TsCompileOptions *o, TsPlan **out, TsDiag *d)
{
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
    if (compile_is_plan_text(text, len) && compile_plan_check_frame(path, text, len, &body, &id) != IR_OK) {
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
        st = ts_plan_parse(path, text, len, o->limits, out, d);
        const TsPlan *p = *out;
        if (st == TS_OK && ((o->num_partitions && o->num_partitions != p->r.prog.num_partitions) ||
                            (o->num_replicas && o->num_replicas != p->r.prog.num_replicas))) {
            ir_error(&id, IR_EINPUT, path, NULL, (IrPos){0, 0},
                     "the plan was compiled for %lld partitions x %lld replicas; recompile to change them",
                     (long long)p->r.prog.num_partitions, (long long)p->r.prog.num_replicas);
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
    } else {
        /* The parsed module is compiled; one copy stays for the reference. */
        TsModule *m = NULL;
        st = ts_module_parse(path, text, len, o->limits, &m, d);
        if (st == TS_OK) {
            IrModule *ref = ir_module_clone(m->ir);
            IrModule *src = m->ir;
            m->ir = NULL;
            if (!ref) {
                ir_module_free(src);
                ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
                st = api_give(IR_ENOMEM, &id, d);
            } else {
                st = compile_taken(src, ref, o, out, d);
            }
        }
        ts_module_free(m);
    }
    ts_free(text);
    return st;
}

void ts_plan_free(TsPlan *p)
{
    if (!p)
        return;
    compile_result_free(&p->r);
    ir_module_free(p->reference);
    ir_module_free(p->signature);
    ts_free(p);
}

TsStatus ts_plan_set_layout(TsPlan *p, int64_t hosts, int64_t local_devices, TsDiag *d)
{
    IrDiag id = {0};
    if (hosts < 1 || local_devices < 0)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "hosts must be at least 1 and local devices at least 0"),
                        &id, d);
    return api_give(compile_replan(&p->r, hosts, local_devices, &id), &id, d);
}

int64_t ts_plan_num_partitions(const TsPlan *p) { return p->r.prog.num_partitions; }
int64_t ts_plan_num_replicas(const TsPlan *p) { return p->r.prog.num_replicas; }
int64_t ts_plan_hosts(const TsPlan *p) { return p->r.prog.hosts > 0 ? p->r.prog.hosts : 1; }
int32_t ts_plan_num_clusters(const TsPlan *p) { return p->r.prog.ncluster; }
bool ts_plan_from_file(const TsPlan *p) { return p->r.from_plan; }

int64_t ts_plan_local_devices(const TsPlan *p)
{
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    return p->r.prog.local_devices > 0 ? p->r.prog.local_devices : ndev / ts_plan_hosts(p);
}

char *ts_plan_file_text(const TsPlan *p)
{
    return compile_plan_file_text(&p->r);
}

TsStatus ts_plan_save(const TsPlan *p, const char *path, TsDiag *d)
{
    IrDiag id = {0};
    if (p->r.prog.ncluster == 1 && p->r.prog.cluster[0].replay)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "a replayed SPMD program has no plan file: the module is its own program"),
                        &id, d);
    char *text = ts_plan_file_text(p);
    if (!text)
        return api_give(ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory"), &id, d);
    TsStatus st = ts_write_text(path, text, d);
    ts_free(text);
    return st;
}

TsStatus ts_plan_dump(const TsPlan *p, const char *format, char **out, TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    const char *f = format ? format : "text";
    bool json = strcmp(f, "json") == 0, dot = strcmp(f, "dot") == 0;
    if (!json && !dot && strcmp(f, "text") != 0)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--format must be text, json or dot, not '%s'", f),
                        &id, d);
    if (p->r.prog.ncluster == 0)
        *out = ts_strdup(json ? "{\"clusters\": []}\n" : dot ? "digraph \"plan\" {\n}\n"
                                                              : "no device work: nothing is partitioned\n");
    else
        *out = json ? compile_plan_json(&p->r) : dot ? compile_plan_dot(&p->r) : compile_plan_text(&p->r);
    if (!*out)
        return api_give(ir_error(&id, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory"), &id, d);
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

int32_t ts_plan_num_outputs(const TsPlan *p)
{
    const IrShape *s = root_shape(p);
    return s ? ir_shape_leaf_count(s) : 0;
}

TsStatus ts_plan_input_info(const TsPlan *p, int32_t leaf, TsArrayInfo *info, TsDiag *d)
{
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
    IrDiag id = {0};
    const IrShape *s = root_shape(p);
    if (!s || leaf < 0 || leaf >= ir_shape_leaf_count(s))
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "no output leaf %d (the plan has %d)",
                                 (int)leaf, (int)ts_plan_num_outputs(p)),
                        &id, d);
    describe(ir_shape_leaf(s, leaf), NULL, info);
    return TS_OK;
}
