/*
 * compile.c: the compile pipeline: propagate shardings over the whole
 * module, then partition the entry computation into one SPMD program.
 */
#include "runtime.h"

#include <string.h>

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
    if (st != IR_OK) {
        rt_compiled_free(out);
        return st;
    }
    /* requires shardings; builds the per-device program */
    SpmdOptions sopt = {.num_partitions = num_partitions, .num_replicas = num_replicas};
    st = spmd_partition(src, &sopt, &out->spmd, &out->report, d);
    if (st != IR_OK) {
        rt_compiled_free(out);
        return st;
    }
    return IR_OK;
}

void rt_compiled_free(RtCompiled *c)
{
    ir_module_free(c->src);
    ir_module_free(c->spmd);
    spmd_report_free(&c->report);
    memset(c, 0, sizeof *c);
}

static const IrSharding replicated = {.kind = SHD_REPLICATED};

const IrSharding *rt_param_sharding(const RtCompiled *c, int32_t p)
{
    const IrComputation *e = ir_entry(c->src);
    if (!e || p < 0 || p >= e->nparam || e->param[p] < 0 || !e->instr[e->param[p]].sharding)
        return &replicated;
    return e->instr[e->param[p]].sharding;
}

const IrSharding *rt_root_sharding(const RtCompiled *c)
{
    const IrComputation *e = ir_entry(c->src);
    if (!e || e->root < 0 || !e->instr[e->root].sharding)
        return &replicated;
    return e->instr[e->root].sharding;
}
