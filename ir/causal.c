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
 *
 * A value's readers come from an index of each computation's readers
 * (IrCausal), built once and kept across the dots asked about: scanning
 * the computation for them at every step made the fusion finder
 * quadratic in the program's length (test_compile_speed's 2400-layer
 * pipeline took 30x its 300 layers' time).
 */
#include "ir.h"

#include <string.h>

/* Calls followed into (nesting), and readers visited, before giving up. */
#define CAUSAL_DEPTH 8
#define CAUSAL_STEPS 256

typedef struct Frame {
    const IrComputation *c;
    int32_t call; /* the call instruction in the frame below (-1 at the bottom) */
} Frame;

/* The readers of each value of one computation: (user[e], slot[e]) for e
 * in [first[v], first[v + 1]), in the order of user, then operand slot. */
typedef struct Readers {
    const IrComputation *c;
    int32_t *first, *user, *slot;
} Readers;

struct IrCausal {
    const IrModule *m;
    Readers **r; /* the computations indexed so far (each its own block:
                  * a walk holds one while a callee's is added) */
    int32_t nr, capr;
};

typedef struct Walk {
    IrCausal *k;
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

static void readers_free(Readers *rd)
{
    if (!rd)
        return;
    ts_free(rd->first);
    ts_free(rd->user);
    ts_free(rd->slot);
    ts_free(rd);
}

/* c's readers index, built at its first use; NULL where memory ran out
 * (the walk then gives up: the dot is computed whole). */
static const Readers *readers_of(IrCausal *k, const IrComputation *c)
{
    for (int32_t i = 0; i < k->nr; i++)
        if (k->r[i]->c == c)
            return k->r[i];
    if (k->nr == k->capr) {
        int32_t cap = k->capr ? 2 * k->capr : 4;
        Readers **r = ts_realloc(k->r, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        k->r = r;
        k->capr = cap;
    }
    int64_t n = 0;
    for (int32_t u = 0; u < c->ninstr; u++)
        n += c->instr[u].nopnd;
    Readers *rd = ts_calloc(1, sizeof *rd);
    int32_t *fill = ts_malloc(((size_t)c->ninstr + 1) * sizeof *fill);
    if (rd) {
        rd->c = c;
        rd->first = ts_calloc((size_t)c->ninstr + 1, sizeof *rd->first);
        rd->user = ts_malloc((size_t)(n ? n : 1) * sizeof *rd->user);
        rd->slot = ts_malloc((size_t)(n ? n : 1) * sizeof *rd->slot);
    }
    if (!rd || !fill || !rd->first || !rd->user || !rd->slot) {
        readers_free(rd);
        ts_free(fill);
        return NULL;
    }
    for (int32_t u = 0; u < c->ninstr; u++)
        for (int32_t j = 0; j < c->instr[u].nopnd; j++) {
            int32_t o = c->instr[u].opnd[j];
            if (o >= 0 && o < c->ninstr)
                rd->first[o + 1]++;
        }
    for (int32_t v = 0; v < c->ninstr; v++)
        rd->first[v + 1] += rd->first[v];
    memcpy(fill, rd->first, ((size_t)c->ninstr + 1) * sizeof *fill);
    for (int32_t u = 0; u < c->ninstr; u++)
        for (int32_t j = 0; j < c->instr[u].nopnd; j++) {
            int32_t o = c->instr[u].opnd[j];
            if (o >= 0 && o < c->ninstr) {
                rd->user[fill[o]] = u;
                rd->slot[fill[o]++] = j;
            }
        }
    ts_free(fill);
    k->r[k->nr++] = rd;
    return rd;
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
    const Readers *rd = readers_of(w->k, c);
    if (!rd)
        return READS_OTHER;
    int32_t done = -1; /* a reader whose other slots reading v are settled */
    for (int32_t e = rd->first[v]; e < rd->first[v + 1]; e++) {
        int32_t u = rd->user[e], j = rd->slot[e];
        const IrInstr *ui = &c->instr[u];
        if (u == done)
            continue;
        int32_t r, k, res;
        if (ui->op == OP_SELECT && ui->nopnd == 3 && j == 1 && ui->opnd[0] != v && ui->opnd[2] != v &&
            causal_pred(w, depth, ui->opnd[0], &r, &k) && r == row && k == col) {
            done = u;
            continue;
        }
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
        done = u;
    }
    return escapes ? ESCAPES : READS_LOWER;
}

IrCausal *ir_causal_new(const IrModule *m)
{
    IrCausal *k = ts_calloc(1, sizeof *k);
    if (k)
        k->m = m;
    return k;
}

void ir_causal_free(IrCausal *k)
{
    if (!k)
        return;
    for (int32_t i = 0; i < k->nr; i++)
        readers_free(k->r[i]);
    ts_free(k->r);
    ts_free(k);
}

bool ir_dot_reads_lower(const IrModule *m, const IrComputation *c, int32_t dot)
{
    IrCausal *k = ir_causal_new(m);
    bool lower = k && ir_causal_dot_reads_lower(k, c, dot);
    ir_causal_free(k);
    return lower;
}

bool ir_causal_dot_reads_lower(IrCausal *k, const IrComputation *c, int32_t dot)
{
    const IrModule *m = k->m;
    const IrInstr *ins = &c->instr[dot];
    if (ins->op != OP_DOT || ins->nopnd != 2 || !ir_shape_is_array(&ins->shape) || ins->shape.rank < 2)
        return false;
    const IrDotDnums *dn = &ins->a.dot;
    const IrShape *ls = &c->instr[ins->opnd[0]].shape, *rs = &c->instr[ins->opnd[1]].shape;
    /* One free dim each: the result's last two are the GEMM's rows and columns. */
    if (ls->rank - dn->lhs_batch.n - dn->lhs_contracting.n != 1 ||
        rs->rank - dn->rhs_batch.n - dn->rhs_contracting.n != 1)
        return false;
    Walk w = {.k = k, .m = m};
    w.f[0] = (Frame){c, -1};
    return reads(&w, 0, dot, ins->shape.rank - 2, ins->shape.rank - 1) == READS_LOWER;
}
