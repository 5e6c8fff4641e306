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
 * how each accumulator relates to its input (less, equal, greater, or,
 * for floats, which of them is NaN): six relations for a float operand,
 * three for an integer one. Evaluated once per combination of relations
 * (symbolically: each compare's answer follows from the relation, each
 * select yields a parameter), the reducer becomes a table that the
 * executor's kernels (device/reduce_select.c) look up per element instead
 * of interpreting the computation, with the interpreter's exact results:
 * ties (equal values: +0 and -0 too) and NaNs pick what the computation
 * picks. Anything else in the reducer (arithmetic, constants, a compare
 * of a value with an index, a total-order compare) is not such a reducer.
 */
#include "ir.h"

#include <string.h>

/* Relations of one operand slot's accumulator a and input b. */
enum { REL_LT, REL_EQ, REL_GT, REL_A_NAN, REL_B_NAN, REL_BOTH_NAN };

/* Per instruction, over all combinations of relations at once (bit c
 * of a mask: combination c): where it is true (compares, logic), or
 * where it is parameter p (parameters, selects). One pass over the
 * reducer instead of one per combination. */
typedef struct SymVal {
    bool known, is_value;
    uint64_t truth;
    uint64_t as[2 * IR_SELECT_REDUCER_MAX];
} SymVal;

/* The natural compare of type t, or an explicit type= that agrees. */
static bool plain_compare(IrType t, IrCmpType ct)
{
    if (ir_type_is_float(t))
        return ct == CMPT_DEFAULT || ct == CMPT_FLOAT;
    if (ir_type_is_signed_int(t))
        return ct == CMPT_DEFAULT || ct == CMPT_SIGNED;
    return ir_type_is_unsigned_int(t) && (ct == CMPT_DEFAULT || ct == CMPT_UNSIGNED);
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

/* The relation of slot s in combination `comb` (mixed radix over slots). */
static int32_t relation_of(const IrSelectReducer *r, int32_t comb, int32_t s)
{
    for (int32_t j = 0; j < s; j++)
        comb /= r->nrel[j];
    return comb % r->nrel[s];
}

/* The combinations where compare(p, q) (parameters of slot s) is true. */
static uint64_t compare_mask(const IrSelectReducer *r, int32_t p, int32_t q, IrCmpDir dir)
{
    uint64_t m = 0;
    for (int32_t comb = 0; comb < r->ncomb; comb++)
        if (compare_answer(r, p, q, relation_of(r, comb, p % r->n), dir))
            m |= 1ull << comb;
    return m;
}

/* Evaluate instruction i of c over every combination; false if it is not
 * of the kind this file handles. */
static bool eval_instr(const IrComputation *c, const IrSelectReducer *r, SymVal *v, int32_t i)
{
    const IrInstr *x = &c->instr[i];
    SymVal *out = &v[i];
    int32_t np = 2 * r->n;
    uint64_t all = r->ncomb == 64 ? ~0ull : (1ull << r->ncomb) - 1;
    memset(out, 0, sizeof *out);
    out->known = true;
    if (x->shape.rank != 0 || x->shape.type == IR_TUPLE || x->ncalled > 0)
        return false;
    for (int32_t j = 0; j < x->nopnd; j++)
        if (x->opnd[j] < 0 || x->opnd[j] >= c->ninstr || !v[x->opnd[j]].known)
            return false;
    const SymVal *a = x->nopnd > 0 ? &v[x->opnd[0]] : NULL, *b = x->nopnd > 1 ? &v[x->opnd[1]] : NULL;
    bool logic = x->shape.type == IR_PRED && (!a || !a->is_value) && (!b || !b->is_value);
    switch (x->op) {
    case OP_PARAMETER:
        if (x->a.parameter_number < 0 || x->a.parameter_number >= np)
            return false;
        out->is_value = true;
        out->as[x->a.parameter_number] = all;
        return true;
    case OP_COMPARE:
        if (x->nopnd != 2 || !a->is_value || !b->is_value || x->a.direction == CMP_NONE)
            return false;
        for (int32_t p = 0; p < np; p++)
            for (int32_t q = 0; q < np; q++) {
                if (!(a->as[p] & b->as[q]))
                    continue;
                if (p % r->n != q % r->n || !plain_compare(r->type[p % r->n], x->a.cmp_type))
                    return false; /* a value against an index, or not IEEE's order */
                out->truth |= a->as[p] & b->as[q] & compare_mask(r, p, q, x->a.direction);
            }
        return true;
    case OP_AND: case OP_OR: case OP_XOR:
        if (x->nopnd != 2 || !logic)
            return false;
        out->truth = x->op == OP_AND ? a->truth & b->truth : x->op == OP_OR ? a->truth | b->truth
                                                                         : a->truth ^ b->truth;
        return true;
    case OP_NOT:
        if (x->nopnd != 1 || !logic)
            return false;
        out->truth = ~a->truth & all;
        return true;
    case OP_SELECT: {
        const SymVal *t = &v[x->opnd[1]], *f = x->nopnd == 3 ? &v[x->opnd[2]] : NULL;
        if (x->nopnd != 3 || a->is_value || !t->is_value || !f->is_value)
            return false;
        out->is_value = true;
        for (int32_t p = 0; p < np; p++) {
            out->as[p] = (a->truth & t->as[p]) | (~a->truth & f->as[p]);
            if (out->as[p] && r->type[p % r->n] != x->shape.type)
                return false;
        }
        return true;
    }
    default:
        return false;
    }
}

/* The parameter result j is under combination comb, from the root. */
static bool result_param(const IrComputation *c, const IrSelectReducer *r, const SymVal *v, int32_t j,
                         int32_t comb, int32_t *param)
{
    const IrInstr *root = &c->instr[c->root];
    int32_t i = c->root;
    if (r->n > 1) {
        if (root->op != OP_TUPLE || root->nopnd != r->n || root->opnd[j] < 0 || root->opnd[j] >= c->ninstr)
            return false;
        i = root->opnd[j];
    }
    if (!v[i].known || !v[i].is_value)
        return false;
    for (int32_t p = 0; p < 2 * r->n; p++)
        if (v[i].as[p] >> comb & 1) {
            *param = p;
            return r->type[p % r->n] == r->type[j];
        }
    return false;
}

bool ir_select_reducer(const IrModule *m, int32_t comp, int32_t n, const IrType *types, IrSelectReducer *r)
{
    memset(r, 0, sizeof *r);
    if (n < 1 || n > IR_SELECT_REDUCER_MAX || comp < 0 || comp >= m->ncomp || !m->comp[comp])
        return false;
    const IrComputation *c = m->comp[comp];
    if (c->nparam != 2 * n || c->root < 0 || c->root >= c->ninstr || c->ninstr > IR_SELECT_REDUCER_INSTRS)
        return false;
    r->n = n;
    r->ncomb = 1;
    for (int32_t s = 0; s < n; s++) {
        IrType t = types[s];
        if (types[n + s] != t || !(ir_type_is_float(t) || ir_type_is_signed_int(t) || ir_type_is_unsigned_int(t)))
            return false;
        r->type[s] = t;
        r->nrel[s] = ir_type_is_float(t) ? 6 : 3;
        r->ncomb *= r->nrel[s];
    }
    if (r->ncomb > 64)
        return false; /* one bit a combination in a 64-bit mask */
    for (int32_t p = 0; p < 2 * n; p++) {
        int32_t pi = c->param[p];
        if (pi < 0 || pi >= c->ninstr || c->instr[pi].shape.type != r->type[p % n] || c->instr[pi].shape.rank != 0)
            return false;
    }
    int32_t order[IR_SELECT_REDUCER_INSTRS], norder = 0;
    IrExecOrderError e;
    if (ir_exec_order(c, order, &norder, &e) != IR_OK)
        return false;
    SymVal v[IR_SELECT_REDUCER_INSTRS];
    memset(v, 0, sizeof v);
    for (int32_t q = 0; q < norder; q++) {
        int32_t i = order[q];
        if (i == c->root && n > 1 && c->instr[i].op == OP_TUPLE)
            continue; /* read by result_param */
        if (!eval_instr(c, r, v, i))
            return false;
    }
    for (int32_t comb = 0; comb < r->ncomb; comb++)
        for (int32_t j = 0; j < n; j++) {
            int32_t p;
            if (!result_param(c, r, v, j, comb, &p))
                return false;
            r->pick[comb][j] = (uint8_t)p;
        }
    return true;
}
