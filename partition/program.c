/*
 * program.c: the compiled program's data (PlanCluster, PlanProgram):
 * freeing it and reading the shardings of its inputs and outputs. No
 * pass lives here: the compile driver (compile/) builds these, the
 * runtime executes them.
 */
#include <assert.h>
#include "partition.h"

#include <string.h>

static const IrSharding replicated = {.kind = SHD_REPLICATED};

IrStatus plan_cluster_record_io(PlanCluster *c, IrDiag *d)
{
    assert((c->src || (c->replay && c->spmd)) && !c->arena); /* once, after partitioning */
    const IrComputation *e = ir_entry(c->replay ? c->spmd : c->src);
    IrArena *a = c->arena = ir_arena_new();
    if (!a || !e)
        return ir_error(d, a ? IR_EINTERNAL : IR_ENOMEM, NULL, NULL, (IrPos){0, 0},
                        a ? "cluster without an entry computation" : "out of memory");
    c->nparam = e->nparam;
    size_t np = (size_t)(e->nparam > 0 ? e->nparam : 1);
    c->param_shape = ir_alloc_array(a, np, sizeof(IrShape));
    c->param_sharding = ir_alloc_array(a, np, sizeof(IrSharding *));
    if (!c->param_shape || !c->param_sharding)
        return ir_oom(d, NULL);
    for (int32_t p = 0; p < e->nparam; p++) {
        const IrInstr *pi = &e->instr[e->param[p]];
        c->param_sharding[p] = ir_alloc(a, sizeof(IrSharding));
        if (!c->param_sharding[p] || ir_shape_copy(a, &c->param_shape[p], &pi->shape) != IR_OK ||
            ir_sharding_copy(a, c->param_sharding[p], pi->sharding && !c->replay ? pi->sharding : &replicated) != IR_OK)
            return ir_oom(d, NULL);
    }
    const IrInstr *root = &e->instr[e->root];
    c->out_sharding = ir_alloc(a, sizeof(IrSharding));
    if (!c->out_sharding || ir_shape_copy(a, &c->out_shape, &root->shape) != IR_OK ||
        ir_sharding_copy(a, c->out_sharding, root->sharding && !c->replay ? root->sharding : &replicated) != IR_OK)
        return ir_oom(d, NULL);
    return IR_OK;
}

void plan_cluster_free(PlanCluster *c)
{
    ir_module_free(c->src);
    ir_module_free(c->spmd);
    spmd_report_free(&c->report);
    ir_arena_free(c->arena);
    memset(c, 0, sizeof *c);
}

const IrSharding *plan_param_sharding(const PlanCluster *c, int32_t p)
{
    if (p < 0 || p >= c->nparam || !c->param_sharding[p])
        return &replicated;
    return c->param_sharding[p];
}

const IrSharding *plan_root_sharding(const PlanCluster *c)
{
    return c->out_sharding ? c->out_sharding : &replicated;
}

void plan_program_free(PlanProgram *p)
{
    for (int32_t k = 0; p->cluster && k < p->ncluster; k++)
        plan_cluster_free(&p->cluster[k]);
    ts_free(p->cluster);
    ir_module_free(p->host);
    memset(p, 0, sizeof *p);
}
