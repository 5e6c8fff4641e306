/*
 * ops.c: the opcode tables, all generated from hlo_ops.def.
 */
#include "ir.h"

#include <string.h>

static const struct {
    const char *name;
    int arity;
    IrOpKind kind;
    IrOpFamily family;
} op_info[OP_COUNT] = {
#define OP(e, name, arity, kind, fam) [OP_##e] = {name, arity, kind, fam},
#include "hlo_ops.def"
#undef OP
};

const char *ir_op_name(IrOpcode op)
{
    return op < OP_COUNT ? op_info[op].name : "invalid";
}

int ir_op_arity(IrOpcode op)
{
    return op_info[op].arity;
}

IrOpKind ir_op_kind(IrOpcode op)
{
    return op_info[op].kind;
}

IrOpFamily ir_op_family(IrOpcode op)
{
    return op_info[op].family;
}

bool ir_op_is_elementwise(IrOpcode op)
{
    return op_info[op].kind != IR_K_OTHER;
}

IrOpcode ir_op_from_name(const char *s, size_t n)
{
    for (int op = 0; op < OP_COUNT; op++)
        if (strlen(op_info[op].name) == n && memcmp(op_info[op].name, s, n) == 0)
            return (IrOpcode)op;
    return OP_COUNT;
}
