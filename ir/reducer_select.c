/*
 * reducer_select.c: reducers that only compare their parameters and pick
 * among them, as JAX writes argmax and argmin (a variadic reduce of
 * (value, index) pairs) and a maximum that propagates NaN through a
 * select. JAX's argmax over (acc value av, acc index ai, input bv, bi):
 *
 *   gt  = compare(av, bv), direction=GT
 *   nan = compare(av, av), direction=NE          (av is NaN)
 *   pv  = or(gt, nan)
 *   v   = select(pv, av, bv)
 *   tie = and(compare(av, bv), direction=EQ, compare(ai, bi), direction=LT)
 *   i   = select(or(pv, tie), ai, bi)
 *   ROOT tuple(v, i)
 *
 * Such a reducer's results are parameters, and which ones depends only on
 * how each accumulator relates to its input: less, equal, greater, or,
 * for floats, which of them is NaN (six relations), three for integers,
 * and for a pred slot which of the two is true (four). The partitioner's
 * lifted reducer (partition/spmd_reduce.c: the values and a pred "valid",
 * calling the original reducer) is one too. Evaluated symbolically, once,
 * over every combination of the slots' relations at a time (a bit mask of
 * the combinations where a pred is true, or where a value is parameter p),
 * the reducer becomes a table that the executor's kernels
 * (device/reduce_select.c) look up per element instead of interpreting
 * the computation, with the interpreter's exact results: ties (equal
 * values: +0 and -0 too) and NaNs pick what the computation picks.
 * Anything else in the reducer (arithmetic, constants, a compare of a
 * value with an index, a total-order compare) is not such a reducer.
 */
#include "ir.h"

#include <string.h>

/* Relations of one float slot's accumulator a and input b; integers have
 * the first three; a pred slot's relation is 2a + b. */
enum { REL_LT, REL_EQ, REL_GT, REL_A_NAN, REL_B_NAN, REL_BOTH_NAN };

/* A set of combinations, one bit each. */
#define MASK_WORDS (IR_SELECT_REDUCER_COMBS / 64)
typedef struct Mask {
    uint64_t w[MASK_WORDS];
} Mask;

/* What an instruction is over all combinations: where it is true (pred
 * values), where it is parameter p (values that are parameters), or, for
 * a call's tuple, its elements (in the analysis's pool). */
typedef struct SymVal {
    bool known, is_value, has_truth;
    Mask truth;
    Mask as[2 * IR_SELECT_REDUCER_MAX];
    int32_t elems, nelems; /* a tuple: pool[elems .. elems + nelems) */
} SymVal;

enum { POOL = 64, MAX_DEPTH = 4 };

typedef struct Sym {
    const IrModule *m;
    IrSelectReducer *r;
    Mask all;
    SymVal pool[POOL];
    int32_t npool;
} Sym;

static Mask mask_op(Mask a, Mask b, IrOpcode op)
{
    for (int32_t i = 0; i < MASK_WORDS; i++)
        a.w[i] = op == OP_AND ? a.w[i] & b.w[i] : op == OP_OR ? a.w[i] | b.w[i] : a.w[i] ^ b.w[i];
    return a;
}

/* (p & t) | (~p & f) */
static Mask mask_blend(Mask p, Mask t, Mask f)
{
    for (int32_t i = 0; i < MASK_WORDS; i++)
        t.w[i] = (p.w[i] & t.w[i]) | (~p.w[i] & f.w[i]);
    return t;
}

static bool mask_any(Mask a)
{
    for (int32_t i = 0; i < MASK_WORDS; i++)
        if (a.w[i])
            return true;
    return false;
}

static bool mask_bit(Mask a, int32_t c)
{
    return a.w[c / 64] >> (c % 64) & 1;
}

static void mask_set(Mask *a, int32_t c)
{
    a->w[c / 64] |= 1ull << (c % 64);
}

/* The natural compare of type t, or an explicit type= that agrees. */
static bool plain_compare(IrType t, IrCmpType ct)
{
    if (ir_type_is_float(t))
        return ct == CMPT_DEFAULT || ct == CMPT_FLOAT;
    if (ir_type_is_signed_int(t))
        return ct == CMPT_DEFAULT || ct == CMPT_SIGNED;
    return ir_type_is_unsigned_int(t) && (ct == CMPT_DEFAULT || ct == CMPT_UNSIGNED);
}

/* The relation of slot s in combination `comb` (mixed radix over slots). */
static int32_t relation_of(const IrSelectReducer *r, int32_t comb, int32_t s)
{
    for (int32_t j = 0; j < s; j++)
        comb /= r->nrel[j];
    return comb % r->nrel[s];
}

/* The answer of compare(p, q), p and q parameters of one slot, when that
 * slot's accumulator and input stand in relation rel. */
static bool compare_answer(const IrSelectReducer *r, int32_t p, int32_t q, int32_t rel, IrCmpDir dir)
{
    int32_t n = r->n;
    int c; /* -1, 0, 1; 2 unordered */
    bool pnan = p < n ? rel == REL_A_NAN || rel == REL_BOTH_NAN : rel == REL_B_NAN || rel == REL_BOTH_NAN;
    if (p == q)
        c = pnan ? 2 : 0;
    else if (rel >= REL_A_NAN)
        c = 2;
    else {
        c = rel == REL_LT ? -1 : rel == REL_EQ ? 0 : 1; /* a against b */
        if (p >= n)
            c = -c; /* compare(b, a) */
    }
    switch (dir) {
    case CMP_EQ: return c == 0;
    case CMP_NE: return c != 0;
    case CMP_LT: return c == -1;
    case CMP_LE: return c == -1 || c == 0;
    case CMP_GT: return c == 1;
    case CMP_GE: return c == 1 || c == 0;
    default: return false;
    }
}

/* The combinations where compare(p, q) (parameters of one slot) is true. */
static Mask compare_mask(const IrSelectReducer *r, int32_t p, int32_t q, IrCmpDir dir)
{
    Mask m = {{0}};
    for (int32_t comb = 0; comb < r->ncomb; comb++)
        if (compare_answer(r, p, q, relation_of(r, comb, p % r->n), dir))
            mask_set(&m, comb);
    return m;
}

/* The combinations where pred parameter p is true. */
static Mask pred_param_mask(const IrSelectReducer *r, int32_t p)
{
    Mask m = {{0}};
    for (int32_t comb = 0; comb < r->ncomb; comb++) {
        int32_t rel = relation_of(r, comb, p % r->n);
        if (p < r->n ? rel >> 1 : rel & 1)
            mask_set(&m, comb);
    }
    return m;
}

static bool eval_comp(Sym *y, const IrComputation *c, const SymVal *args, int32_t nargs, int32_t depth, SymVal *out);

static bool eval_compare(Sym *y, const IrInstr *x, const SymVal *a, const SymVal *b, SymVal *out)
{
    const IrSelectReducer *r = y->r;
    int32_t np = 2 * r->n;
    if (x->nopnd != 2 || !a->is_value || !b->is_value || x->a.direction == CMP_NONE)
        return false;
    out->has_truth = true;
    for (int32_t p = 0; p < np; p++)
        for (int32_t q = 0; q < np; q++) {
            Mask both = mask_op(a->as[p], b->as[q], OP_AND);
            if (!mask_any(both))
                continue;
            if (p % r->n != q % r->n || !plain_compare(r->type[p % r->n], x->a.cmp_type))
                return false; /* a value against an index, not IEEE's order, or preds */
            out->truth = mask_op(out->truth, mask_op(both, compare_mask(r, p, q, x->a.direction), OP_AND), OP_OR);
        }
    return true;
}

static bool eval_select(const Sym *y, const IrInstr *x, const SymVal *p, const SymVal *t, const SymVal *f,
                        SymVal *out)
{
    if (!p->has_truth || (x->shape.type != IR_PRED && (!t->is_value || !f->is_value)))
        return false;
    if (x->shape.type == IR_PRED) {
        if (!t->has_truth || !f->has_truth)
            return false;
        out->has_truth = true;
        out->truth = mask_blend(p->truth, t->truth, f->truth);
    }
    out->is_value = t->is_value && f->is_value;
    for (int32_t q = 0; out->is_value && q < 2 * y->r->n; q++) {
        out->as[q] = mask_blend(p->truth, t->as[q], f->as[q]);
        if (mask_any(out->as[q]) && y->r->type[q % y->r->n] != x->shape.type)
            return false;
    }
    return true;
}

/* Instruction i of c over every combination, its operands in v; false if
 * it is not of the kind this file handles. */
static bool eval_instr(Sym *y, const IrComputation *c, SymVal *v, const SymVal *args, int32_t nargs, int32_t depth,
                       int32_t i)
{
    const IrInstr *x = &c->instr[i];
    SymVal *out = &v[i];
    memset(out, 0, sizeof *out);
    out->known = true;
    for (int32_t j = 0; j < x->nopnd; j++)
        if (x->opnd[j] < 0 || x->opnd[j] >= c->ninstr || !v[x->opnd[j]].known)
            return false;
    const SymVal *a = x->nopnd > 0 ? &v[x->opnd[0]] : NULL, *b = x->nopnd > 1 ? &v[x->opnd[1]] : NULL;
    if (x->op == OP_CALL) {
        if (x->ncalled != 1 || x->called[0] < 0 || x->called[0] >= y->m->ncomp || x->nopnd > 4 * IR_SELECT_REDUCER_MAX)
            return false;
        SymVal in[4 * IR_SELECT_REDUCER_MAX];
        for (int32_t j = 0; j < x->nopnd; j++)
            in[j] = v[x->opnd[j]];
        return eval_comp(y, y->m->comp[x->called[0]], in, x->nopnd, depth + 1, out);
    }
    if (x->op == OP_GET_TUPLE_ELEMENT) {
        if (x->nopnd != 1 || x->a.tuple_index < 0 || x->a.tuple_index >= a->nelems)
            return false;
        *out = y->pool[a->elems + x->a.tuple_index];
        return true;
    }
    if (x->shape.rank != 0 || x->shape.type == IR_TUPLE || x->ncalled > 0)
        return false;
    switch (x->op) {
    case OP_PARAMETER:
        if (x->a.parameter_number < 0 || x->a.parameter_number >= nargs)
            return false;
        *out = args[x->a.parameter_number];
        return !out->nelems;
    case OP_COMPARE:
        return eval_compare(y, x, a, b, out);
    case OP_AND: case OP_OR: case OP_XOR:
        if (x->nopnd != 2 || !a->has_truth || !b->has_truth || x->shape.type != IR_PRED)
            return false;
        out->has_truth = true;
        out->truth = mask_op(a->truth, b->truth, x->op);
        return true;
    case OP_NOT:
        if (x->nopnd != 1 || !a->has_truth || x->shape.type != IR_PRED)
            return false;
        out->has_truth = true;
        out->truth = mask_op(a->truth, y->all, OP_XOR);
        return true;
    case OP_SELECT:
        return x->nopnd == 3 && eval_select(y, x, a, b, &v[x->opnd[2]], out);
    default:
        return false;
    }
}

/* Computation c with its parameters args: *out is its root (a tuple's
 * elements go to the pool). */
static bool eval_comp(Sym *y, const IrComputation *c, const SymVal *args, int32_t nargs, int32_t depth, SymVal *out)
{
    if (depth > MAX_DEPTH || c->nparam != nargs || c->root < 0 || c->root >= c->ninstr ||
        c->ninstr > IR_SELECT_REDUCER_INSTRS)
        return false;
    int32_t order[IR_SELECT_REDUCER_INSTRS], norder = 0;
    IrExecOrderError e;
    if (ir_exec_order(c, order, &norder, &e) != IR_OK)
        return false;
    SymVal v[IR_SELECT_REDUCER_INSTRS];
    memset(v, 0, sizeof v);
    const IrInstr *root = &c->instr[c->root];
    for (int32_t q = 0; q < norder; q++) {
        int32_t i = order[q];
        if (i == c->root && root->op == OP_TUPLE)
            continue; /* its elements are read below */
        if (!eval_instr(y, c, v, args, nargs, depth, i))
            return false;
    }
    memset(out, 0, sizeof *out);
    out->known = true;
    if (root->op != OP_TUPLE) {
        *out = v[c->root];
        return true;
    }
    if (y->npool + root->nopnd > POOL)
        return false;
    out->elems = y->npool;
    out->nelems = root->nopnd;
    y->npool += root->nopnd;
    for (int32_t j = 0; j < root->nopnd; j++) {
        int32_t o = root->opnd[j];
        if (o < 0 || o >= c->ninstr || !v[o].known || v[o].nelems)
            return false;
        y->pool[out->elems + j] = v[o];
    }
    return true;
}

/* The parameter result j (val) is under combination comb. A pred result
 * that is a truth, not a parameter, takes the parameter of its slot with
 * that truth (a pred's bits are its truth). */
static bool result_param(const IrSelectReducer *r, const SymVal *val, int32_t j, int32_t comb, int32_t *param)
{
    for (int32_t p = 0; val->is_value && p < 2 * r->n; p++)
        if (mask_bit(val->as[p], comb)) {
            *param = p;
            return r->type[p % r->n] == r->type[j];
        }
    if (r->type[j] != IR_PRED || !val->has_truth)
        return false;
    int32_t rel = relation_of(r, comb, j);
    bool want = mask_bit(val->truth, comb);
    if ((rel >> 1) == want)
        *param = j;
    else if ((rel & 1) == want)
        *param = r->n + j;
    else
        return false;
    return true;
}

bool ir_select_reducer(const IrModule *m, int32_t comp, int32_t n, const IrType *types, IrSelectReducer *r)
{
    memset(r, 0, sizeof *r);
    if (n < 1 || n > IR_SELECT_REDUCER_MAX || comp < 0 || comp >= m->ncomp || !m->comp[comp])
        return false;
    const IrComputation *c = m->comp[comp];
    r->n = n;
    r->ncomb = 1;
    for (int32_t s = 0; s < n; s++) {
        IrType t = types[s];
        bool ok = ir_type_is_float(t) || ir_type_is_signed_int(t) || ir_type_is_unsigned_int(t) || t == IR_PRED;
        if (types[n + s] != t || !ok)
            return false;
        r->type[s] = t;
        r->nrel[s] = ir_type_is_float(t) ? 6 : t == IR_PRED ? 4 : 3;
        r->ncomb *= r->nrel[s];
    }
    if (r->ncomb > IR_SELECT_REDUCER_COMBS)
        return false;
    Sym *y = ts_calloc(1, sizeof *y);
    if (!y)
        return false;
    y->m = m;
    y->r = r;
    for (int32_t comb = 0; comb < r->ncomb; comb++)
        mask_set(&y->all, comb);
    SymVal args[2 * IR_SELECT_REDUCER_MAX], root;
    memset(args, 0, sizeof args);
    bool ok = c->nparam == 2 * n;
    for (int32_t p = 0; ok && p < 2 * n; p++) {
        int32_t pi = c->param[p];
        ok = pi >= 0 && pi < c->ninstr && c->instr[pi].shape.type == r->type[p % n] && c->instr[pi].shape.rank == 0;
        args[p].known = args[p].is_value = true;
        args[p].as[p] = y->all;
        if (r->type[p % n] == IR_PRED) {
            args[p].has_truth = true;
            args[p].truth = pred_param_mask(r, p);
        }
    }
    ok = ok && eval_comp(y, c, args, 2 * n, 0, &root) && (n == 1 ? !root.nelems : root.nelems == n);
    for (int32_t comb = 0; ok && comb < r->ncomb; comb++)
        for (int32_t j = 0; ok && j < n; j++) {
            int32_t p = 0;
            ok = result_param(r, n == 1 ? &root : &y->pool[root.elems + j], j, comb, &p);
            r->pick[comb][j] = (uint8_t)p;
        }
    ts_free(y);
    return ok;
}
