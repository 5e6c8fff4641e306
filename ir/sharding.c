/* ir/sharding.c: placeholder until its owner lands it. */
#include "ir.h"

int32_t ir_sharding_data_rank(const IrSharding *s)
{
    (void)s;
    return 0;
}

int64_t ir_sharding_replication(const IrSharding *s)
{
    (void)s;
    return 0;
}

int64_t ir_sharding_num_tiles(const IrSharding *s)
{
    (void)s;
    return 0;
}

bool ir_sharding_equal(const IrSharding *a, const IrSharding *b)
{
    (void)a;
    (void)b;
    return false;
}

IrStatus ir_sharding_validate(const IrSharding *s, const IrShape *shape, int64_t num_devices, IrDiag *d, const char *file, const char *src, IrPos pos)
{
    (void)s;
    (void)shape;
    (void)num_devices;
    (void)d;
    (void)file;
    (void)src;
    (void)pos;
    return IR_EUNSUPPORTED;
}

char *ir_sharding_str(const IrSharding *s)
{
    (void)s;
    return 0;
}

IrStatus ir_sharding_copy(IrArena *a, IrSharding *dst, const IrSharding *src)
{
    (void)a;
    (void)dst;
    (void)src;
    return IR_EUNSUPPORTED;
}

IrStatus ir_sharding_parse(IrArena *a, const char *text, IrSharding *out, IrDiag *d)
{
    (void)a;
    (void)text;
    (void)out;
    (void)d;
    return IR_EUNSUPPORTED;
}

