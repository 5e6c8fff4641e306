/* device/k_gather.c: placeholder until its owner lands it. */
#include "device.h"

IrStatus dev_k_gather(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_scatter(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

