/*
 * types.c: XLA's primitive types: names as HLO text spells them, sizes and
 * classes.
 */
#include "ir.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int bits;
} type_info[IR_NTYPES] = {
    [IR_INVALID] = {"invalid", 0, 0},
    [IR_PRED] = {"pred", 1, 1},
    [IR_S8] = {"s8", 1, 8},       [IR_S16] = {"s16", 2, 16},
    [IR_S32] = {"s32", 4, 32},    [IR_S64] = {"s64", 8, 64},
    [IR_U8] = {"u8", 1, 8},       [IR_U16] = {"u16", 2, 16},
    [IR_U32] = {"u32", 4, 32},    [IR_U64] = {"u64", 8, 64},
    [IR_F16] = {"f16", 2, 16},    [IR_BF16] = {"bf16", 2, 16},
    [IR_F32] = {"f32", 4, 32},    [IR_F64] = {"f64", 8, 64},
    [IR_C64] = {"c64", 8, 64},    [IR_C128] = {"c128", 16, 128},
    [IR_TOKEN] = {"token", 0, 0},
    [IR_TUPLE] = {"tuple", 0, 0},
};

const char *ir_type_name(IrType t)
{
    return (t >= 0 && t < IR_NTYPES) ? type_info[t].name : "invalid";
}

IrType ir_type_from_name(const char *s, size_t n)
{
    if (n == 0)
        return IR_INVALID;
    for (int t = IR_PRED; t <= IR_TOKEN; t++)
        if (type_info[t].name[0] == s[0] && strlen(type_info[t].name) == n &&
            memcmp(type_info[t].name, s, n) == 0)
            return (IrType)t;
    return IR_INVALID;
}

size_t ir_type_size(IrType t)
{
    return (t >= 0 && t < IR_NTYPES) ? type_info[t].size : 0;
}

int ir_type_bits(IrType t)
{
    return (t >= 0 && t < IR_NTYPES) ? type_info[t].bits : 0;
}

bool ir_type_is_float(IrType t)
{
    return t == IR_F16 || t == IR_BF16 || t == IR_F32 || t == IR_F64;
}

bool ir_type_is_complex(IrType t)
{
    return t == IR_C64 || t == IR_C128;
}

bool ir_type_is_signed_int(IrType t)
{
    return t >= IR_S8 && t <= IR_S64;
}

bool ir_type_is_unsigned_int(IrType t)
{
    return t >= IR_U8 && t <= IR_U64;
}

bool ir_type_is_int(IrType t)
{
    return ir_type_is_signed_int(t) || ir_type_is_unsigned_int(t);
}

bool ir_type_is_array(IrType t)
{
    return t > IR_INVALID && t < IR_TOKEN;
}
