/*
 * api.c: include/tessel.h, the public API, as thin wrappers over the
 * layers: ts_module_load is ir_parse_file with verification, and
 * ts_run_reference is runtime/inputs.c's bind, run, write. A TsDiag is an
 * IrDiag with public field names; errors move from one to the other.
 */
#include "tessel.h"
#include "runtime.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The public types mirror internal ones field for field. */
_Static_assert(sizeof(TsInput) == sizeof(RtInput) && offsetof(TsInput, path) == offsetof(RtInput, path),
               "TsInput must match RtInput");
_Static_assert((int)TS_ERUNTIME == (int)IR_ERUNTIME && (int)TS_EINPUT == (int)IR_EINPUT,
               "TsStatus must match IrStatus");

struct TsModule {
    IrModule *ir;
};

const char *ts_version(void)
{
    return TS_VERSION;
}

/* Move the first error of `from` into `to` (keeping an earlier one). */
static TsStatus give(IrStatus st, IrDiag *from, TsDiag *to)
{
    if (from->status == IR_OK && st != IR_OK)
        ir_error(from, st, NULL, NULL, (IrPos){0, 0}, "failed (status %d)", (int)st);
    if (to && to->status == TS_OK && st != IR_OK) {
        to->status = (TsStatus)from->status;
        to->file = from->file;
        to->line = from->pos.line;
        to->col = from->pos.col;
        to->line_text = from->line_text;
        to->msg = from->msg;
        memset(from, 0, sizeof *from);
    }
    ir_diag_clear(from);
    return (TsStatus)st;
}

TsStatus ts_module_load(const char *path, TsModule **out, TsDiag *d)
{
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    IrDiag id = {0};
    *out = NULL;
    TsModule *m = ts_calloc(1, sizeof *m);
    if (!m)
        return give(ir_error(&id, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory"), &id,
                    d);
    IrStatus st = ir_parse_file(path, &po, &m->ir, &id);
    if (st != IR_OK) {
        ts_free(m);
        return give(st, &id, d);
    }
    *out = m;
    return TS_OK;
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
    return m->ir->name;
}

int32_t ts_module_num_parameters(const TsModule *m)
{
    const IrComputation *c = ir_entry(m->ir);
    return c ? c->nparam : 0;
}

/* One summary line per leaf of the result, joined into a heap string. */
static IrStatus summarise(DevValue *result, char **summary, IrDiag *d)
{
    int32_t n = ir_shape_leaf_count(&result->shape);
    size_t len = 0;
    char *all = ts_strdup("");
    for (int32_t i = 0; all && i < n; i++) {
        char *s = rt_value_summary(dev_value_leaf(result, i));
        char *grown = s ? ts_realloc(all, len + strlen(s) + 32) : NULL;
        if (grown) {
            all = grown;
            len += (size_t)sprintf(all + len, "output %d: %s\n", (int)i, s);
        } else {
            ts_free(all);
            all = NULL;
        }
        ts_free(s);
    }
    if (!all)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    *summary = all;
    return IR_OK;
}

TsStatus ts_run_reference(const TsModule *m, const TsRunOptions *opt, char **summary,
                          TsDiag *d)
{
    IrDiag id = {0};
    RtBindOptions bo = {opt->ninputs, (const RtInput *)opt->inputs, opt->random, opt->seed};
    RtArgs args = {0};
    DevValue *result = NULL;
    if (summary)
        *summary = NULL;
    IrStatus st = rt_bind_inputs(m->ir, &bo, &args, &id);
    if (st == IR_OK)
        st = rt_run_reference(m->ir, &args, &result, &id);
    if (st == IR_OK && opt->output_dir)
        st = rt_write_outputs(result, opt->output_dir, NULL, &id);
    if (st == IR_OK && summary)
        st = summarise(result, summary, &id);
    dev_value_unref(result);
    rt_args_free(&args);
    return give(st, &id, d);
}

char *ts_diag_format(const TsDiag *d)
{
    IrDiag id = {(IrStatus)d->status, d->file, {d->line, d->col}, d->line_text, d->msg};
    return ir_diag_format(&id, "tessel");
}

void ts_diag_clear(TsDiag *d)
{
    ts_free(d->file);
    ts_free(d->line_text);
    ts_free(d->msg);
    memset(d, 0, sizeof *d);
}
