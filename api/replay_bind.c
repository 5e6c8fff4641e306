/*
 * replay_bind.c: replays of SPMD programs (TsCompileOptions.spmd): each
 * device binds its own inputs to the module's entry parameters (its
 * per-device shapes) and keeps its own outputs. The runs themselves are
 * run.c's and run_mpi.c's; this file is what differs from a partitioned
 * run.
 */
#include "api_internal.h"
#include "../coll/coll.h"

#include <string.h>

/* Device g's bind options in a replay of plan p (rt_device_bind_options
 * of the run's). */
static IrStatus api_device_bind(const TsPlan *p, const TsRunOptions *o, int64_t g, RtBindOptions *out, IrDiag *d)
{
    RtBindOptions all = api_bind_options(o);
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    return rt_device_bind_options(&all, g, ndev, o->per_device, out, d);
}

IrStatus api_bind_devices(const TsPlan *p, const TsRunOptions *o, int64_t first, int64_t n, RtArgs *args, IrDiag *d)
{
    const IrModule *m = p->r.prog.cluster[0].spmd;
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    IrStatus st = IR_OK;
    if (o->one_device && (o->output_device < 0 || o->output_device >= ndev))
        st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "--output-device %lld: the program runs on devices 0 to %lld",
                      (long long)o->output_device, (long long)(ndev - 1));
    CollWorld cw = {.n = p->r.prog.num_partitions, .r = p->r.prog.num_replicas};
    if (st == IR_OK)
        st = coll_check_module(m, &cw, d);
    /* Every device's keys are checked, also on ranks that run none of
     * them: a bad KEY@D is the same error everywhere. */
    for (int64_t g = 0; st == IR_OK && g < ndev; g++) {
        RtBindOptions bo;
        st = api_device_bind(p, o, g, &bo, d);
        if (st == IR_OK && g >= first && g < first + n)
            st = rt_bind_inputs(m, &bo, &args[g - first], d);
        if (st == IR_OK)
            rt_device_bind_free(&bo);
    }
    if (st != IR_OK)
        for (int64_t k = 0; k < n; k++)
            rt_args_free(&args[k]);
    return st;
}

IrStatus api_replay_outputs(const TsPlan *p, const TsRunOptions *o, DevValue **res, DevValue **result,
                            int64_t *ndevices, IrDiag *d)
{
    int64_t ndev = p->r.prog.num_partitions * p->r.prog.num_replicas;
    *result = NULL;
    *ndevices = 0;
    if (o->one_device) {
        *result = res[o->output_device];
        res[o->output_device] = NULL;
        return IR_OK;
    }
    /* A tuple whose element g is device g's result (the references move
     * into it, or are released when it cannot be made). */
    *result = dev_value_tuple(NULL, (int32_t)ndev, res);
    memset(res, 0, (size_t)ndev * sizeof *res);
    if (!*result)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    *ndevices = ndev;
    return IR_OK;
}
