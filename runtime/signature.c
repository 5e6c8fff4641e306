/*
 * signature.c: a module with a compiled program's logical parameters, so
 * that user inputs (--input keys by index or name, random fills) bind to
 * a plan exactly as they bind to the model it was compiled from (the
 * parameters keep their names and metadata: JAX's op_name is a name;
 * and their frontend attributes: tessel_state marks optimizer state).
 */
#include "runtime.h"

IrModule *rt_signature_module(const PlanCluster *c)
{
    IrModule *m = ir_module_new("signature");
    int32_t ci = m ? ir_add_computation(m, "main") : -1;
    if (ci < 0) {
        ir_module_free(m);
        return NULL;
    }
    IrComputation *e = m->comp[ci];
    m->entry = ci;
    e->is_entry = true;
    /* the logical cluster keeps the model's parameter names; the SPMD program may rename them */
    const IrComputation *pe = ir_entry(c->src ? c->src : c->spmd);
    int32_t *params = ts_malloc((size_t)(c->nparam > 0 ? c->nparam : 1) * sizeof(int32_t));
    if (!params)
        goto oom;
    for (int32_t p = 0; p < c->nparam; p++) {
        IrInstr ins = {.a.x = &ir_no_attrs_x};
        ins.op = OP_PARAMETER;
        ins.a.parameter_number = p;
        const IrInstr *src = pe && p < pe->nparam && pe->param[p] >= 0 ? &pe->instr[pe->param[p]] : NULL;
        const char *name = src ? src->name : "p";
        /* the metadata too: its op_name is a name the input binds by (input_names.c) */
        if (src && src->a.metadata && !(ins.a.metadata = ir_strdup(m->arena, src->a.metadata)))
            goto oom;
        /* and its frontend attributes: tessel_state marks optimizer state (--init-state) */
        if (src && src->a.nfrontend) {
            IrKeyValue *kv = ir_alloc_array(m->arena, (size_t)src->a.nfrontend, sizeof *kv);
            if (!kv)
                goto oom;
            for (int32_t k = 0; k < src->a.nfrontend; k++)
                if (!(kv[k].key = ir_strdup(m->arena, src->a.frontend[k].key)) ||
                    !(kv[k].value = ir_strdup(m->arena, src->a.frontend[k].value)))
                    goto oom;
            ins.a.frontend = kv;
            ins.a.nfrontend = src->a.nfrontend;
        }
        /* the name as it is (ir_unique_name would renumber x.1): the
         * parameters of one computation have distinct names already */
        if (!(ins.name = src ? ir_strdup(m->arena, name) : ir_unique_name(m, name)) || ir_shape_copy(m->arena, &ins.shape, &c->param_shape[p]) != IR_OK ||
            (params[p] = ir_add_instr(m, e, &ins)) < 0)
            goto oom;
    }
    IrShape t;
    IrShape *el = ir_alloc_array(m->arena, (size_t)(c->nparam > 0 ? c->nparam : 1), sizeof(IrShape));
    if (!el)
        goto oom;
    for (int32_t p = 0; p < c->nparam; p++)
        el[p] = c->param_shape[p];
    if (ir_shape_make_tuple(m->arena, &t, c->nparam, el) != IR_OK ||
        (e->root = ir_add_simple(m, e, OP_TUPLE, &t, c->nparam, params, "signature")) < 0)
        goto oom;
    ts_free(params);
    return m;
oom:
    ts_free(params);
    ir_module_free(m);
    return NULL;
}
