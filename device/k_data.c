/* device/k_data.c: placeholder until its owner lands it. */
#include "device.h"

IrStatus dev_k_constant(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_iota(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_broadcast(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_reshape(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_transpose(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_slice(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_dynamic_slice(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_dynamic_update_slice(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_pad(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_concatenate(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

IrStatus dev_k_reverse(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

