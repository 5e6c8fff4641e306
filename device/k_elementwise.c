/* device/k_elementwise.c: placeholder until its owner lands it. */
#include "device.h"

IrStatus dev_k_elementwise(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_bitcast_convert(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_map(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

