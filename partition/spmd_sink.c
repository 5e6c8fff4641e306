/*
 * spmd_sink.c: transposes moved before the all-reduces they read, where
 * that lets the executor fold them into a dot.
 *
 * A dot whose contracted dims the partitioner cut leaves partial sums
 * that one all-reduce finishes (spmd_partial.c); JAX writes weight
 * gradients as transpose(dot(g, x)), so the partitioned program reads
 * transpose(all-reduce(dot)): the dot's result, summed, then copied
 * transposed, an array the size of a weight (block-dp's MLP gradients:
 * two f32[3072,768] a step). An all-reduce is elementwise over its
 * operand, so transpose(all-reduce(x)) = all-reduce(transpose(x)); with x
 * a dot whose free dims the transpose swaps, transpose(dot) is a pair the
 * executor runs as one GEMM writing the transposed result
 * (ir_dot_transpose_swaps, device/fusion.c), and no copy is left.
 *
 * Rule: transpose t reads all-reduce r (an array), t is r's one use, r is
 * dot x's one use, ir_dot_transpose_swaps holds for t read from x, and no
 * control edge touches t or r. The two instructions trade places: r's slot
 * becomes t's transpose of x, t's slot r's all-reduce of it, in t's
 * shape; each keeps its own name, attributes and position, t's users now
 * read the all-reduce (the same value), and operands still come before
 * their users.
 */
#include "spmd_internal.h"

#include <stdbool.h>

static bool sinks(const IrComputation *c, const int32_t *uses, const bool *ctrl, int32_t t)
{
    const IrInstr *ti = &c->instr[t];
    if (ti->op != OP_TRANSPOSE || ti->nopnd != 1 || ctrl[t] || ti->a.x->control_predecessors.n > 0)
        return false;
    int32_t r = ti->opnd[0];
    const IrInstr *ri = &c->instr[r];
    if (r < 0 || r >= t || ri->op != OP_ALL_REDUCE || ri->nopnd != 1 || !ir_shape_is_array(&ri->shape) ||
        uses[r] != 1 || r == c->root || ctrl[r] || ri->a.x->control_predecessors.n > 0)
        return false;
    int32_t x = ri->opnd[0];
    if (x < 0 || x >= r || c->instr[x].op != OP_DOT || uses[x] != 1 || x == c->root)
        return false;
    IrInstr from_x = *ti;
    from_x.opnd = &x;
    return ir_dot_transpose_swaps(c, &from_x);
}

IrStatus spmd_sink_transposes(IrComputation *c, int32_t *moved)
{
    int32_t n = c->ninstr;
    *moved = 0;
    int32_t *uses = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *uses);
    bool *ctrl = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *ctrl);
    if (!uses || !ctrl) {
        ts_free(uses);
        ts_free(ctrl);
        return IR_ENOMEM;
    }
    for (int32_t i = 0; i < n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < n)
                uses[ins->opnd[j]]++;
        const IrI64List *cp = &ins->a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                ctrl[cp->v[j]] = true;
    }
    for (int32_t t = 0; t < n; t++) {
        if (!sinks(c, uses, ctrl, t))
            continue;
        int32_t r = c->instr[t].opnd[0], x = c->instr[r].opnd[0];
        IrInstr tr = c->instr[t], ar = c->instr[r];
        c->instr[r] = tr;
        c->instr[r].opnd[0] = x;
        c->instr[t] = ar;
        c->instr[t].shape = tr.shape;
        c->instr[t].opnd[0] = r;
        (*moved)++;
    }
    ts_free(uses);
    ts_free(ctrl);
    return IR_OK;
}
