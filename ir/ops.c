/*
 * ops.c: the opcode tables, all generated from hlo_ops.def.
 */
#include "ir.h"

#include <string.h>

static const struct {
    const char *name;
    size_t len;            /* strlen(name), so lookups compare lengths first */
    int arity;
    IrOpKind kind;
    IrOpFamily family;
} op_info[OP_COUNT] = {
#define OP(e, name, arity, kind, fam) [OP_##e] = {name, sizeof(name) - 1, arity, kind, fam},
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

/* A linear scan of ~90 names, called a few times per parsed instruction:
 * the length and first byte reject almost every entry without a memcmp. */
IrOpcode ir_op_from_name(const char *s, size_t n)
{
    if (n == 0)
        return OP_COUNT;
    for (int op = 0; op < OP_COUNT; op++)
        if (op_info[op].len == n && op_info[op].name[0] == s[0] && memcmp(op_info[op].name, s, n) == 0)
            return (IrOpcode)op;
    return OP_COUNT;
}
