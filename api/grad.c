/*
 * grad.c: ts_add_gradients, the public face of the layer grad/. The new
 * module is printed and parsed back (and so verified) before it is handed
 * out: what the caller gets is exactly what `tessel grad` writes and what a
 * later `tessel check` reads.
 */
#include "../grad/grad.h"
#include "api_internal.h"

#include <string.h>

TsStatus ts_add_gradients(const TsModule *m, const TsGradOptions *o, TsModule **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(m, d);
    API_NEED(out, d);
    *out = NULL;
    TsGradOptions none = {0};
    if (!o)
        o = &none;
    GradOptions go = {.wrt = o->wrt, .loss = o->loss, .jvp = o->jvp, .sgd = o->sgd, .adam = o->adam,
                      .remat = o->remat};
    IrDiag id = {0};
    IrModule *g = NULL;
    IrStatus st = grad_module(m->ir, &go, &g, &id);
    if (st != IR_OK)
        return api_give(st, &id, d);
    char *text = ir_print_module(g);
    ir_module_free(g);
    if (!text)
        return api_give(ir_oom(&id, NULL), &id, d);
    TsStatus ts = ts_module_parse(m->ir->name, text, strlen(text), NULL, out, d);
    ts_free(text);
    if (ts != TS_OK && d && d->status == TS_EINPUT) {
        /* A module grad_module wrote that does not verify is a bug here. */
        d->status = TS_EINTERNAL;
    }
    return ts;
}
