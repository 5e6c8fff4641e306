/*
 * causal.c: is a dot's result read only on and below the diagonal of its
 * last two dims? Then the executor computes only those tiles (k_dot.c).
 *
 * Causal attention masks its scores: JAX writes
 *     s = dot(q, k) / 8;  s = select(causal, s, -1e9)
 *     causal = compare(iota [S,S] dim 0, iota [S,S] dim 1), direction=GE
 * (often inside a call to `_where`, the mask broadcast over batch and
 * heads), so a score above the diagonal (key after query) is never read:
 * the select takes its on-false value there. ir_dot_reads_lower proves it
 * on the IR by following the dot's value to every reader:
 *   - an elementwise op of the same dims passes each position through
 *     (divide by 8, convert): its own readers are followed in turn;
 *   - a call passes it to its callee's parameter, followed inside; where
 *     it reaches the callee's root, the call's readers are followed;
 *   - select(mask, value, other) ends the path when mask is false at
 *     every position whose column (last dim) is after its row (the one
 *     before): a compare of two iotas (or broadcasts of one, the
 *     positions' own indices) by GE or GT (LE, LT with the operands
 *     swapped), or an `and` with one such operand (a sliding window keeps
 *     fewer), broadcast to the value's dims, through call parameters;
 *   - any other reader, or the value being the program's result, fails.
 * A mask with an offset (iota + k), an arbitrary mask (a parameter, a
 * constant) or one that keeps a position above the diagonal is not
 * recognised: that dot is computed whole.
 */
#include "ir.h"

/* Calls followed into (nesting), and readers visited, before giving up. */
#define CAUSAL_DEPTH 8
#define CAUSAL_STEPS 256

typedef struct Frame {
    const IrComputation *c;
    int32_t call; /* the call instruction in the frame below (-1 at the bottom) */
} Frame;

typedef struct Walk {
    const IrModule *m;
    Frame f[CAUSAL_DEPTH];
    int32_t steps;
} Walk;

enum { READS_OTHER, READS_LOWER, ESCAPES };

/* Parameter i of the computation at depth > 0: its call's operand. */
static bool caller_operand(const Walk *w, int32_t depth, int32_t i, int32_t *o)
{
    const IrInstr *ins = &w->f[depth].c->instr[i];
    if (depth == 0 || ins->a.parameter_number < 0)
        return false;
    const IrInstr *call = &w->f[depth - 1].c->instr[w->f[depth].call];
    if (ins->a.parameter_number >= call->nopnd)
        return false;
    *o = call->opnd[ins->a.parameter_number];
    return true;
}

/* The dim d for which value i at position p is p[d] (an integer iota, or
 * a broadcast of one), else -1. */
static int32_t index_dim(const Walk *w, int32_t depth, int32_t i)
{
    const IrInstr *ins = &w->f[depth].c->instr[i];
    int32_t d, o;
    switch (ins->op) {
    case OP_IOTA:
        if (!ir_type_is_signed_int(ins->shape.type) && !ir_type_is_unsigned_int(ins->shape.type))
            return -1;
        return ins->a.iota_dimension >= 0 && ins->a.iota_dimension < ins->shape.rank ? (int32_t)ins->a.iota_dimension
                                                                                       : -1;
    case OP_BROADCAST:
        d = ins->nopnd == 1 ? index_dim(w, depth, ins->opnd[0]) : -1;
        return d >= 0 && d < ins->a.dimensions.n ? (int32_t)ins->a.dimensions.v[d] : -1;
    case OP_PARAMETER:
        return caller_operand(w, depth, i, &o) ? index_dim(w, depth - 1, o) : -1;
    default:
        return -1;
    }
}

/* Is pred value i false wherever p[*col] > p[*row]? Sets row and col. */
static bool causal_pred(const Walk *w, int32_t depth, int32_t i, int32_t *row, int32_t *col)
{
    const IrInstr *ins = &w->f[depth].c->instr[i];
    int32_t a, b, o;
    if (ins->shape.type != IR_PRED)
        return false;
    switch (ins->op) {
    case OP_BROADCAST:
        if (ins->nopnd != 1 || !causal_pred(w, depth, ins->opnd[0], &a, &b) || a >= ins->a.dimensions.n ||
            b >= ins->a.dimensions.n)
            return false;
        *row = (int32_t)ins->a.dimensions.v[a];
        *col = (int32_t)ins->a.dimensions.v[b];
        return true;
    case OP_PARAMETER:
        return caller_operand(w, depth, i, &o) && causal_pred(w, depth - 1, o, row, col);
    case OP_AND:
        return ins->nopnd == 2 &&
               (causal_pred(w, depth, ins->opnd[0], row, col) || causal_pred(w, depth, ins->opnd[1], row, col));
    case OP_COMPARE:
        if (ins->nopnd != 2 || (a = index_dim(w, depth, ins->opnd[0])) < 0 ||
            (b = index_dim(w, depth, ins->opnd[1])) < 0 || a == b)
            return false;
        if (ins->a.direction == CMP_GE || ins->a.direction == CMP_GT) {
            *row = a;
            *col = b;
            return true;
        }
        if (ins->a.direction == CMP_LE || ins->a.direction == CMP_LT) {
            *row = b;
            *col = a;
            return true;
        }
        return false;
    default:
        return false;
    }
}

/* How value v (at depth) is read: only where p[col] <= p[row]
 * (READS_LOWER), also elsewhere (READS_OTHER), or only so but it also
 * reaches its computation's root at depth > 0 (ESCAPES: the call's
 * readers decide). */
static int reads(Walk *w, int32_t depth, int32_t v, int32_t row, int32_t col)
{
    const IrComputation *c = w->f[depth].c;
    const IrShape *vs = &c->instr[v].shape;
    bool escapes = v == c->root;
    if (++w->steps > CAUSAL_STEPS || (escapes && depth == 0))
        return READS_OTHER;
    for (int32_t u = 0; u < c->ninstr; u++) {
        const IrInstr *ui = &c->instr[u];
        for (int32_t j = 0; j < ui->nopnd; j++) {
            if (ui->opnd[j] != v)
                continue;
            int32_t r, k, res;
            if (ui->op == OP_SELECT && ui->nopnd == 3 && j == 1 && ui->opnd[0] != v && ui->opnd[2] != v &&
                causal_pred(w, depth, ui->opnd[0], &r, &k) && r == row && k == col)
                break;
            if (ui->op == OP_CALL && ui->ncalled == 1 && depth + 1 < CAUSAL_DEPTH) {
                const IrComputation *callee = w->m->comp[ui->called[0]];
                if (j >= callee->nparam || callee->param[j] < 0)
                    return READS_OTHER;
                w->f[depth + 1] = (Frame){callee, u};
                res = reads(w, depth + 1, callee->param[j], row, col);
                if (res == ESCAPES)
                    res = ir_shape_is_array(&ui->shape) && ir_shape_same_dims(&ui->shape, vs)
                              ? reads(w, depth, u, row, col) : READS_OTHER;
                if (res == READS_OTHER)
                    return READS_OTHER;
                escapes = escapes || res == ESCAPES;
                continue;
            }
            if (!ir_op_is_elementwise(ui->op) || !ir_shape_is_array(&ui->shape) ||
                !ir_shape_same_dims(&ui->shape, vs))
                return READS_OTHER;
            if ((res = reads(w, depth, u, row, col)) == READS_OTHER)
                return READS_OTHER;
            escapes = escapes || res == ESCAPES;
            break;
        }
    }
    return escapes ? ESCAPES : READS_LOWER;
}

bool ir_dot_reads_lower(const IrModule *m, const IrComputation *c, int32_t dot)
{
    const IrInstr *ins = &c->instr[dot];
    if (ins->op != OP_DOT || ins->nopnd != 2 || !ir_shape_is_array(&ins->shape) || ins->shape.rank < 2)
        return false;
    const IrDotDnums *dn = &ins->a.dot;
    const IrShape *ls = &c->instr[ins->opnd[0]].shape, *rs = &c->instr[ins->opnd[1]].shape;
    /* One free dim each: the result's last two are the GEMM's rows and columns. */
    if (ls->rank - dn->lhs_batch.n - dn->lhs_contracting.n != 1 ||
        rs->rank - dn->rhs_batch.n - dn->rhs_contracting.n != 1)
        return false;
    Walk w = {.m = m};
    w.f[0] = (Frame){c, -1};
    return reads(&w, 0, dot, ins->shape.rank - 2, ins->shape.rank - 1) == READS_LOWER;
}
