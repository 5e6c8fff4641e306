/* device/k_sort.c: placeholder until its owner lands it. */
#include "device.h"

IrStatus dev_k_sort(const DevKernelArgs *k, DevValue **out)
{
    (void)out;
    return dev_kernel_error(k, IR_EUNSUPPORTED, "%s is not built yet", ir_op_name(k->ins->op));
}

