/*
 * compile.c: the compile pipeline: propagate shardings over the whole
 * module, then partition the entry computation into one SPMD program, and
 * record the logical shapes and shardings of the inputs and outputs.
 */
#include "runtime.h"

#include <string.h>

static const IrSharding replicated = {.kind = SHD_REPLICATED};

/* Copy the entry's parameter and root shapes and shardings. */
static IrStatus record_io(RtCompiled *c, IrDiag *d)
{
    const IrComputation *e = ir_entry(c->src);
    IrArena *a = c->arena = ir_arena_new();
    if (!a)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    c->nparam = e->nparam;
    c->param_shape = ir_alloc_array(a, (size_t)(e->nparam > 0 ? e->nparam : 1), sizeof(IrShape));
    c->param_sharding = ir_alloc_array(a, (size_t)(e->nparam > 0 ? e->nparam : 1), sizeof(IrSharding *));
    if (!c->param_shape || !c->param_sharding)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int32_t p = 0; p < e->nparam; p++) {
        const IrInstr *pi = &e->instr[e->param[p]];
        c->param_sharding[p] = ir_alloc(a, sizeof(IrSharding));
        if (!c->param_sharding[p] || ir_shape_copy(a, &c->param_shape[p], &pi->shape) != IR_OK ||
            ir_sharding_copy(a, c->param_sharding[p], pi->sharding ? pi->sharding : &replicated) != IR_OK)
            return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    const IrInstr *root = &e->instr[e->root];
    c->out_sharding = ir_alloc(a, sizeof(IrSharding));
    if (!c->out_sharding || ir_shape_copy(a, &c->out_shape, &root->shape) != IR_OK ||
        ir_sharding_copy(a, c->out_sharding, root->sharding ? root->sharding : &replicated) != IR_OK)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    return IR_OK;
}

IrStatus rt_compile(IrModule *src, int64_t num_partitions, int64_t num_replicas, RtCompiled *out,
                    IrDiag *d)
{
    memset(out, 0, sizeof *out);
    out->src = src;
    out->num_partitions = num_partitions;
    out->num_replicas = num_replicas;
    /* requires a verified module; establishes a sharding on every
     * instruction the partitioner visits */
    ShdPropagateOptions popt = {.num_devices = num_partitions};
    IrStatus st = shd_propagate(src, &popt, d);
    /* requires shardings; builds the per-device program */
    SpmdOptions sopt = {.num_partitions = num_partitions, .num_replicas = num_replicas};
    if (st == IR_OK)
        st = spmd_partition(src, &sopt, &out->spmd, &out->report, d);
    if (st == IR_OK)
        st = record_io(out, d);
    if (st != IR_OK)
        rt_compiled_free(out);
    return st;
}

void rt_compiled_free(RtCompiled *c)
{
    ir_module_free(c->src);
    ir_module_free(c->spmd);
    spmd_report_free(&c->report);
    ir_arena_free(c->arena);
    memset(c, 0, sizeof *c);
}

const IrSharding *rt_param_sharding(const RtCompiled *c, int32_t p)
{
    if (p < 0 || p >= c->nparam || !c->param_sharding[p])
        return &replicated;
    return c->param_sharding[p];
}

const IrSharding *rt_root_sharding(const RtCompiled *c)
{
    return c->out_sharding ? c->out_sharding : &replicated;
}

IrModule *rt_signature_module(const RtCompiled *c)
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
    const IrComputation *pe = ir_entry(c->spmd);
    int32_t *params = ts_malloc((size_t)(c->nparam > 0 ? c->nparam : 1) * sizeof(int32_t));
    if (!params)
        goto oom;
    for (int32_t p = 0; p < c->nparam; p++) {
        IrInstr ins = {0};
        ins.op = OP_PARAMETER;
        ins.a.parameter_number = p;
        ins.a.feature_group_count = ins.a.batch_group_count = 1;
        const char *name = pe && p < pe->nparam && pe->param[p] >= 0 ? pe->instr[pe->param[p]].name : "p";
        if (!(ins.name = ir_unique_name(m, name)) || ir_shape_copy(m->arena, &ins.shape, &c->param_shape[p]) != IR_OK ||
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
