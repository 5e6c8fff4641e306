/* ir/verify.c: placeholder until its owner lands it. */
#include "ir.h"

IrStatus ir_verify(const IrModule *m, const IrLimits *lim, IrDiag *d)
{
    (void)m;
    (void)lim;
    (void)d;
    return IR_EUNSUPPORTED;
}

