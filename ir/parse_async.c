/*
 * parse_async.c: XLA's sugared async forms in the HLO text parser (see
 * parse.c): `OP-start`, `OP-update`, `OP-done` read as async ops wrapping
 * OP, and, once the module is read, the computation each sugared
 * async-start calls, built as XLA's parser builds it.
 */
#include "parse_internal.h"

#include <string.h>

/* ---- sugared async ops ---- */

/* XLA's sugared async forms: `OP-start`, `OP-update`, `OP-done` for any op
 * OP that is not itself asynchronous (`abs-start`, `fusion-done`, ...) read
 * as async-start/-update/-done wrapping OP. The dedicated opcodes
 * (all-reduce-start, copy-done, send-done, ...) are found by name before
 * this is tried. False when the name is no such form. */
bool prs_async_sugar(const char *s, size_t n, struct InstrCtx *x)
{
    static const struct {
        const char *suffix;
        IrOpcode op;
    } forms[] = {{"-start", OP_ASYNC_START}, {"-update", OP_ASYNC_UPDATE}, {"-done", OP_ASYNC_DONE}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        size_t k = strlen(forms[i].suffix);
        if (n <= k || memcmp(s + n - k, forms[i].suffix, k) != 0)
            continue;
        IrOpcode w = ir_op_from_name(s, n - k);
        if (w == OP_COUNT || w == OP_ASYNC_START || w == OP_ASYNC_UPDATE || w == OP_ASYNC_DONE ||
            w == OP_PARAMETER)
            return false;
        x->ins.op = forms[i].op;
        prs_x(x)->async_sugar = true;
        prs_x(x)->async_wrapped_op = w;
        return true;
    }
    return false;
}

/* A fresh computation name "BASE.wrapped", "BASE.wrapped.1", ... */
static char *wrapper_name(Parser *P, const char *base)
{
    for (int k = 0;; k++) {
        char *n = k ? ir_sprintf(P->m->arena, "%s.wrapped.%d", base, k) : ir_sprintf(P->m->arena, "%s.wrapped", base);
        if (!n || prs_map_find(&P->comps, n, strlen(n)) < 0)
            return n;
    }
}

/* The attributes an async op keeps for itself when its op-specific ones
 * move to the wrapped instruction. */
static bool async_own_attrs(IrArena *ar, IrAttrs *g, const IrAttrs *a)
{
    *g = (IrAttrs){.x = &ir_no_attrs_x};
    g->frontend = a->frontend;
    g->nfrontend = a->nfrontend;
    g->metadata = a->metadata;
    IrAttrsX *gx = ir_attrs_x_edit(ar, g);
    if (!gx)
        return false;
    gx->backend_config = a->x->backend_config;
    gx->statistics_viz = a->x->statistics_viz;
    gx->origin = a->x->origin;
    gx->control_predecessors = a->x->control_predecessors;
    gx->async_sugar = a->x->async_sugar;
    gx->async_wrapped_op = a->x->async_wrapped_op;
    gx->async_execution_thread = a->x->async_execution_thread;
    return true;
}

/* Build, as XLA's parser does, the computation a sugared `OP-start` calls:
 * parameters of the operand shapes (element 0 of the start's shape) and a
 * root OP of the result shape (element 1), carrying the op's attributes and
 * callees. The start keeps its generic attributes and calls the wrapper. */
static bool wrap_async_op(Parser *P, int32_t ci, int32_t ii)
{
    IrModule *m = P->m;
    IrInstr *st = &m->comp[ci]->instr[ii];
    const IrShape *sh = &st->shape;
    char opbuf[64];
    if (sh->type != IR_TUPLE || sh->ntuple < 2 || sh->tuple[0].type != IR_TUPLE ||
        sh->tuple[0].ntuple != st->nopnd)
        return lx_fail(&P->L, st->pos, "%s: shape must be ((operand shapes...), result, context...) with %d "
                       "operand shape%s", op_text(st, opbuf, sizeof opbuf), (int)st->nopnd, st->nopnd == 1 ? "" : "s");
    char *name = wrapper_name(P, st->name);
    if (!name)
        return lx_nomem(&P->L);
    int32_t wi = ir_add_computation(m, name);
    if (wi < 0 || !prs_map_put(&P->comps, m->comp[wi]->name, strlen(name), wi))
        return lx_nomem(&P->L);
    IrComputation *w = m->comp[wi];
    st = &m->comp[ci]->instr[ii];
    w->async_wrapper = true;
    w->pos = st->pos;
    int32_t *opnd = ir_alloc_array(m->arena, (size_t)(st->nopnd > 0 ? st->nopnd : 1), sizeof(int32_t));
    int32_t *called = ir_alloc(m->arena, sizeof(int32_t));
    if (!opnd || !called || ir_reserve_instrs(w, st->nopnd + 1) != IR_OK)
        return lx_nomem(&P->L);
    for (int32_t k = 0; k < st->nopnd; k++) {
        IrInstr p = {.a.x = &ir_no_attrs_x, .op = OP_PARAMETER, .shape = sh->tuple[0].tuple[k], .pos = st->pos};
        p.a.parameter_number = k;
        p.name = ir_sprintf(m->arena, "%s.param.%d", st->name, (int)k);
        if (!p.name || (opnd[k] = ir_add_instr(m, w, &p)) < 0)
            return lx_nomem(&P->L);
    }
    IrInstr op = *st;
    op.op = st->a.x->async_wrapped_op;
    op.shape = sh->tuple[1];
    op.opnd = opnd;
    op.sharding = NULL;
    op.a.nfrontend = 0;
    op.a.frontend = NULL;
    op.a.metadata = NULL;
    IrAttrsX *ox = ir_attrs_x_edit(m->arena, &op.a);
    if (!ox)
        return lx_nomem(&P->L);
    ox->backend_config = ox->statistics_viz = ox->origin = NULL;
    ox->control_predecessors = (IrI64List){0};
    ox->async_sugar = false;
    ox->async_execution_thread = NULL;
    if (!(op.name = ir_sprintf(m->arena, "%s.wrapped_op", st->name)) || (w->root = ir_add_instr(m, w, &op)) < 0)
        return lx_nomem(&P->L);
    st = &m->comp[ci]->instr[ii];
    IrAttrs own;
    if (!async_own_attrs(m->arena, &own, &st->a))
        return lx_nomem(&P->L);
    st->a = own;
    called[0] = wi;
    st->called = called;
    st->ncalled = 1;
    st->custom_to_apply = false;
    st->cond_pred_form = false;
    return true;
}

/* Every sugared async-start of the module, once callee names are resolved
 * (the wrapped op takes its callees over) and the entry is known (the
 * wrappers come after every written computation). */
bool prs_wrap_async_ops(Parser *P)
{
    int32_t n = P->m->ncomp;
    for (int32_t ci = 0; ci < n && P->nasync_sugar > 0; ci++) {
        int32_t ni = P->m->comp[ci]->ninstr;
        for (int32_t i = 0; i < ni; i++) {
            const IrInstr *ins = &P->m->comp[ci]->instr[i];
            if (ins->op == OP_ASYNC_START && ins->a.x->async_sugar && !wrap_async_op(P, ci, i))
                return false;
        }
    }
    return true;
}
