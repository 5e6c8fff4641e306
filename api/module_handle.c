/*
 * module_handle.c: TsModule, a parsed and verified HLO module: from text or
 * a file, its one-line summary (what `tessel check` prints) and its text.
 */
#include "api_internal.h"

#include <stdio.h>
#include <string.h>

static TsStatus wrap(IrStatus st, IrModule *ir, TsModule **out, IrDiag *id, TsDiag *d)
{
    if (st == IR_OK && !(*out = ts_calloc(1, sizeof **out)))
        st = ir_oom(id, NULL);
    if (st != IR_OK) {
        ir_module_free(ir);
        return api_give(st, id, d);
    }
    (*out)->ir = ir;
    return TS_OK;
}

static IrParseOptions module_options(const TsLimits *lim)
{
    int64_t maxdev;
    IrParseOptions po = ir_default_parse_options();
    po.limits = api_limits(lim, &maxdev);
    po.verify = true;
    return po;
}

/* Parse `text` as a module: copied (ir_parse), or taken (`owned`, an
 * ir_big_alloc block: ir_parse_take, which frees it on failure). A plan's
 * frame is checked before its text is parsed (`check PLAN`, replays of a
 * plan). */
static TsStatus module_from(const char *name, char *owned, const char *text, size_t len, const TsLimits *lim,
                            TsModule **out, TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    IrParseOptions po = module_options(lim);
    IrModule *ir = NULL;
    size_t body = 0;
    IrStatus st = compile_is_plan_text(text, len) ? compile_plan_check_frame(name, text, len, &body, &id) : IR_OK;
    if (st == IR_OK)
        st = owned ? ir_parse_take(name, owned, len, &po, &ir, &id) : ir_parse(name, text, len, &po, &ir, &id);
    else
        ir_big_free(owned);
    return wrap(st, ir, out, &id, d);
}

TsStatus ts_module_parse(const char *name, const char *text, size_t len, const TsLimits *lim, TsModule **out,
                         TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(text, d);
    API_NEED(out, d);
    return module_from(name, NULL, text, len, lim, out, d);
}

/* A file is parsed in the block it was read into (ir_parse_take): no copy
 * of a model of megabytes, nor the fresh pages the copy would fill. */
TsStatus ts_module_load_ex(const char *path, const TsLimits *lim, TsModule **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(path, d);
    API_NEED(out, d);
    IrDiag id = {0};
    *out = NULL;
    size_t len = 0;
    char *text = api_read_file_big(path, &len, &id);
    if (!text)
        return api_give(id.status, &id, d);
    return module_from(path, text, text, len, lim, out, d);
}

TsStatus ts_module_load(const char *path, TsModule **out, TsDiag *d)
{
    return ts_module_load_ex(path, NULL, out, d);
}

void ts_module_free(TsModule *m)
{
    if (!m)
        return;
    ir_module_free(m->ir);
    ts_free(m);
}

const char *ts_module_name(const TsModule *m)
{
    if (!m)
        return NULL;
    return m->ir->name;
}

int32_t ts_module_num_parameters(const TsModule *m)
{
    if (!m)
        return 0;
    const IrComputation *c = ir_entry(m->ir);
    return c ? c->nparam : 0;
}

char *ts_module_summary(const TsModule *mod)
{
    if (!mod)
        return NULL;
    const IrModule *m = mod->ir;
    int64_t ninstr = 0;
    for (int32_t i = 0; i < m->ncomp; i++)
        ninstr += m->comp[i]->ninstr;
    const IrComputation *e = ir_entry(m);
    char *rs = e && e->root >= 0 ? ir_shape_str(&e->instr[e->root].shape, false) : NULL;
    const char *fmt = "module %s, %d computation%s, %lld instruction%s, entry %s (%d parameter%s -> %s), "
                      "num_partitions=%lld replica_count=%lld";
#define SUMMARY_ARGS                                                                                          \
    m->name ? m->name : "?", (int)m->ncomp, m->ncomp == 1 ? "" : "s", (long long)ninstr, ninstr == 1 ? "" : "s", \
        e && e->name ? e->name : "?", e ? (int)e->nparam : 0, e && e->nparam == 1 ? "" : "s", rs ? rs : "?",     \
        (long long)(m->num_partitions > 0 ? m->num_partitions : 1),                                              \
        (long long)(m->replica_count > 0 ? m->replica_count : 1)
    int n = snprintf(NULL, 0, fmt, SUMMARY_ARGS);
    char *s = n >= 0 ? ts_malloc((size_t)n + 1) : NULL;
    if (s)
        snprintf(s, (size_t)n + 1, fmt, SUMMARY_ARGS);
#undef SUMMARY_ARGS
    ts_free(rs);
    return s;
}

TsStatus ts_module_check_devices(const TsModule *mod, int64_t num_partitions, int64_t num_replicas, TsDiag *d)
{
    API_NEED(mod, d);
    IrDiag id = {0};
    const IrModule *m = mod->ir;
    if (num_partitions < 0 || num_replicas < 0)
        return api_give(ir_error(&id, IR_EINPUT, m->file, NULL, (IrPos){0, 0},
                                 "%s must be 1 or more (0: the module's), not %lld",
                                 num_partitions < 0 ? "num_partitions" : "num_replicas",
                                 (long long)(num_partitions < 0 ? num_partitions : num_replicas)),
                        &id, d);
    /* A count neither the call nor the header gives is not known yet (XLA's
     * test strings and PyTorch/XLA's dumps leave them to the compile
     * options, and a header's num_partitions=1 may be run on 2 replicas):
     * what it numbers is not checked here; compiling checks it. */
    int64_t n = num_partitions ? num_partitions : m->num_partitions > 0 ? m->num_partitions : 0;
    int64_t r = num_replicas ? num_replicas : m->replica_count > 0 ? m->replica_count : 0;
    if (ir_verify_groups(m, n, r, &id) != IR_OK)
        return api_give(id.status, &id, d);
    return TS_OK;
}

char *ts_module_text(const TsModule *m)
{
    if (!m)
        return NULL;
    return ir_print_module(m->ir);
}

bool ts_module_is_plan(const TsModule *m)
{
    if (!m)
        return false;
    return m->ir->src && compile_is_plan_text(m->ir->src, strlen(m->ir->src));
}
