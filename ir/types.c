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
    [IR_S2] = {"s2", 1, 2},       [IR_S4] = {"s4", 1, 4},
    [IR_U2] = {"u2", 1, 2},       [IR_U4] = {"u4", 1, 4},
    [IR_F8E5M2] = {"f8e5m2", 1, 8},
    [IR_F8E4M3] = {"f8e4m3", 1, 8},
    [IR_F8E4M3FN] = {"f8e4m3fn", 1, 8},
    [IR_F8E4M3B11FNUZ] = {"f8e4m3b11fnuz", 1, 8},
    [IR_F8E5M2FNUZ] = {"f8e5m2fnuz", 1, 8},
    [IR_F8E4M3FNUZ] = {"f8e4m3fnuz", 1, 8},
    [IR_F8E3M4] = {"f8e3m4", 1, 8},
    [IR_F8E8M0FNU] = {"f8e8m0fnu", 1, 8},
    [IR_F4E2M1FN] = {"f4e2m1fn", 1, 4},
    [IR_TOKEN] = {"token", 0, 0},
    [IR_OPAQUE] = {"opaque", 0, 0},
    [IR_TUPLE] = {"tuple", 0, 0},
};

const char *ir_type_name(IrType t)
{
    return (t >= 0 && t < IR_NTYPES) ? type_info[t].name : "invalid";
}

/* The names of almost every array in a module, without a scan: two or
 * three bytes, a class letter and the bit width (f32, s64, u8, bf16 is
 * not one of them and takes the scan). IR_INVALID when not of that form. */
static IrType common_type(const char *s, size_t n)
{
    int bits = n == 2 && s[1] >= '0' && s[1] <= '9'   ? s[1] - '0'
               : n == 3 && s[1] >= '1' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
                   ? (s[1] - '0') * 10 + (s[2] - '0')
                   : -1;
    switch (s[0]) {
    case 'f': return bits == 16 ? IR_F16 : bits == 32 ? IR_F32 : bits == 64 ? IR_F64 : IR_INVALID;
    case 's':
        return bits == 8 ? IR_S8 : bits == 16 ? IR_S16 : bits == 32 ? IR_S32 : bits == 64 ? IR_S64
               : bits == 2 ? IR_S2 : bits == 4 ? IR_S4 : IR_INVALID;
    case 'u':
        return bits == 8 ? IR_U8 : bits == 16 ? IR_U16 : bits == 32 ? IR_U32 : bits == 64 ? IR_U64
               : bits == 2 ? IR_U2 : bits == 4 ? IR_U4 : IR_INVALID;
    case 'c': return bits == 64 ? IR_C64 : IR_INVALID;
    default: return IR_INVALID;
    }
}

/* Could s[0, n) be one of the other names (pred, bf16, c128, the f8 and f4
 * types, token, opaque)? Most names asked about are instruction names
 * (every operand is asked whether it starts a shape), and this turns them
 * away without the scan. tests/unit/test_types checks every name. */
static bool rare_type_start(const char *s, size_t n)
{
    switch (s[0]) {
    case 'p': case 'b': case 'c': return n == 4;
    case 't': return n == 5;
    case 'o': return n == 6;
    case 'f': return n >= 6 && s[2] == 'e';
    default: return false;
    }
}

IrType ir_type_from_name(const char *s, size_t n)
{
    if (n == 0)
        return IR_INVALID;
    IrType c = common_type(s, n);
    if (c != IR_INVALID || !rare_type_start(s, n))
        return c;
    for (int t = IR_PRED; t <= IR_OPAQUE; t++)
        if (type_info[t].name[0] == s[0] && strncmp(type_info[t].name, s, n) == 0 && type_info[t].name[n] == 0)
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
    return t == IR_F16 || t == IR_BF16 || t == IR_F32 || t == IR_F64 || ir_type_is_lowp_float(t);
}

bool ir_type_is_lowp_float(IrType t)
{
    return t >= IR_F8E5M2 && t <= IR_F4E2M1FN;
}

bool ir_type_is_complex(IrType t)
{
    return t == IR_C64 || t == IR_C128;
}

bool ir_type_is_signed_int(IrType t)
{
    return (t >= IR_S8 && t <= IR_S64) || t == IR_S2 || t == IR_S4;
}

bool ir_type_is_unsigned_int(IrType t)
{
    return (t >= IR_U8 && t <= IR_U64) || t == IR_U2 || t == IR_U4;
}

bool ir_type_is_int(IrType t)
{
    return ir_type_is_signed_int(t) || ir_type_is_unsigned_int(t);
}

bool ir_type_is_array(IrType t)
{
    return t > IR_INVALID && t < IR_TOKEN;
}
