/* ir/literal.c: placeholder until its owner lands it. */
#include "ir.h"

IrStatus ir_literal_parse(IrArena *a, const IrShape *shape, const char *text, size_t len, uint8_t **data, int64_t *nbytes, IrDiag *d)
{
    (void)a;
    (void)shape;
    (void)text;
    (void)len;
    (void)data;
    (void)nbytes;
    (void)d;
    return IR_EUNSUPPORTED;
}

