/*
 * infer.c: shape inference, one rule per op of hlo_ops.def.
 *
 * Each rule reads the operand shapes, the attributes and the called
 * computations of one instruction and computes the result shape the way
 * XLA's shape_inference.cc does; it checks operand counts, operand types,
 * attribute ranges and callee signatures on the way, and says what it
 * expected when something is wrong ("dot: lhs contracting dimension 1 has
 * size 4, rhs contracting dimension 0 has size 5"). Where the result cannot
 * be derived from the operands (broadcast's new dimensions, iota, constants,
 * parameters, custom-calls, a convert's target type) the declared shape
 * supplies the missing part and the rule checks the rest. Inferred shapes
 * carry no layout. The verifier compares them with the declared shapes.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

/* Everything a rule needs. */
typedef struct Ctx {
    const IrModule *m;
    const IrComputation *c;
    const IrInstr *ins;
    IrArena *a;
    IrDiag *d;
} Ctx;

/* ------------------------------------------------------------------ */
/* errors and small helpers                                            */
/* ------------------------------------------------------------------ */

/* Record "OPNAME: message" at the instruction's position. */
__attribute__((format(printf, 2, 3)))
static IrStatus fail(Ctx *x, const char *fmt, ...)
{
    char f[512];
    const IrAttrs *a = &x->ins->a;
    if (a->async_sugar) /* the opcode as written: abs-start */
        snprintf(f, sizeof f, "%s-%s: %s", ir_op_name(a->async_wrapped_op),
                 x->ins->op == OP_ASYNC_START ? "start" : x->ins->op == OP_ASYNC_UPDATE ? "update" : "done", fmt);
    else
        snprintf(f, sizeof f, "%s: %s", ir_op_name(x->ins->op), fmt);
    va_list ap;
    va_start(ap, fmt);
    ir_verror(x->d, IR_EINPUT, x->m->file, x->m->src, x->ins->pos, f, ap);
    va_end(ap);
    return IR_EINPUT;
}

static IrStatus oom(Ctx *x)
{
    return ir_error(x->d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

/* Shape text for messages, kept in the arena so callers need not free it. */
static const char *sstr(Ctx *x, const IrShape *s)
{
    char *h = ir_shape_str(s, false);
    if (!h)
        return "?";
    char *r = ir_strdup(x->a, h);
    ts_free(h);
    return r ? r : "?";
}

/* "{1,2,3}" for messages. */
static const char *lstr(Ctx *x, const IrI64List *l)
{
    size_t cap = 3 + (size_t)l->n * 21;
    char *s = ir_alloc(x->a, cap);
    if (!s)
        return "?";
    size_t k = 0;
    s[k++] = '{';
    for (int32_t i = 0; i < l->n; i++)
        k += (size_t)snprintf(s + k, cap - k, i ? ",%lld" : "%lld", (long long)l->v[i]);
    s[k++] = '}';
    s[k] = 0;
    return s;
}

static const IrShape *opnd(Ctx *x, int32_t i)
{
    return &x->c->instr[x->ins->opnd[i]].shape;
}

static const char *opnd_name(Ctx *x, int32_t i)
{
    return x->c->instr[x->ins->opnd[i]].name;
}

static bool is_array(const IrShape *s)
{
    return ir_type_is_array(s->type);
}

static bool is_scalar(const IrShape *s)
{
    return is_array(s) && s->rank == 0;
}

static bool same_dims(const IrShape *a, const IrShape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

static IrStatus expect_array(Ctx *x, int32_t i, const char *what)
{
    if (!is_array(opnd(x, i)))
        return fail(x, "%s (operand %d, %s) must be an array, got %s", what, (int)i,
                    opnd_name(x, i), sstr(x, opnd(x, i)));
    return IR_OK;
}

static IrStatus expect_scalar(Ctx *x, int32_t i, const char *what)
{
    if (!is_scalar(opnd(x, i)))
        return fail(x, "%s (operand %d, %s) must be a scalar, got %s", what, (int)i,
                    opnd_name(x, i), sstr(x, opnd(x, i)));
    return IR_OK;
}

/* Deep copy without layouts. */
static IrStatus copy_shape(Ctx *x, IrShape *dst, const IrShape *src)
{
    if (src->type == IR_TUPLE) {
        memset(dst, 0, sizeof *dst);
        dst->type = IR_TUPLE;
        dst->ntuple = src->ntuple;
        if (src->ntuple > 0) {
            dst->tuple = ir_alloc_array(x->a, (size_t)src->ntuple, sizeof(IrShape));
            if (!dst->tuple)
                return oom(x);
            for (int32_t i = 0; i < src->ntuple; i++)
                if (copy_shape(x, &dst->tuple[i], &src->tuple[i]) != IR_OK)
                    return IR_ENOMEM;
        }
        return IR_OK;
    }
    return ir_shape_make(x->a, dst, src->type, src->rank, src->dims) == IR_OK ? IR_OK : oom(x);
}

static IrStatus make_array(Ctx *x, IrShape *dst, IrType t, int32_t rank, const int64_t *dims)
{
    return ir_shape_make(x->a, dst, t, rank, dims) == IR_OK ? IR_OK : oom(x);
}

static IrStatus make_scalar(Ctx *x, IrShape *dst, IrType t)
{
    return make_array(x, dst, t, 0, NULL);
}

/* A scratch array of n int64 in the arena (n may be 0). */
static int64_t *scratch(Ctx *x, int64_t n)
{
    return ir_alloc_array(x->a, (size_t)(n > 0 ? n : 1), sizeof(int64_t));
}

static bool list_has(const IrI64List *l, int64_t v)
{
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return true;
    return false;
}

/* Check a list of dimension numbers: each in [0, rank), no repeats, and
 * ascending when `sorted`. Quadratic in the list length, which is bounded by
 * the rank (<= 64), never by the module size. */
static IrStatus check_dim_list(Ctx *x, const IrI64List *l, int64_t rank, const char *what,
                               bool sorted)
{
    for (int32_t i = 0; i < l->n; i++) {
        if (l->v[i] < 0 || l->v[i] >= rank)
            return fail(x, "%s=%s: dimension %lld is out of range for rank %lld", what,
                        lstr(x, l), (long long)l->v[i], (long long)rank);
        for (int32_t j = 0; j < i; j++)
            if (l->v[j] == l->v[i])
                return fail(x, "%s=%s: dimension %lld appears twice", what, lstr(x, l),
                            (long long)l->v[i]);
        if (sorted && i > 0 && l->v[i - 1] > l->v[i])
            return fail(x, "%s=%s must be in ascending order", what, lstr(x, l));
    }
    return IR_OK;
}

static bool add_ovf(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

static bool mul_ovf(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

static IrType component_type(IrType t)
{
    return t == IR_C64 ? IR_F32 : t == IR_C128 ? IR_F64 : t;
}

/* ------------------------------------------------------------------ */
/* called computations                                                 */
/* ------------------------------------------------------------------ */

static const IrComputation *callee(Ctx *x, int32_t k)
{
    return x->m->comp[x->ins->called[k]];
}

/* The shape of parameter i of `comp`, or NULL (with an error) if absent. */
static const IrShape *callee_param(Ctx *x, const IrComputation *comp, int32_t i)
{
    if (i >= comp->nparam || comp->param[i] < 0 || comp->param[i] >= comp->ninstr) {
        fail(x, "called computation %s has no parameter %d", comp->name, (int)i);
        return NULL;
    }
    return &comp->instr[comp->param[i]].shape;
}

static const IrShape *callee_root(Ctx *x, const IrComputation *comp)
{
    if (comp->root < 0 || comp->root >= comp->ninstr) {
        fail(x, "called computation %s has no root instruction", comp->name);
        return NULL;
    }
    return &comp->instr[comp->root].shape;
}

static IrStatus expect_nparams(Ctx *x, const IrComputation *comp, const char *role, int32_t n)
{
    if (comp->nparam != n)
        return fail(x, "%s computation %s must take %d parameters, it takes %d", role, comp->name,
                    (int)n, (int)comp->nparam);
    return IR_OK;
}

/* Check that `comp` takes scalar parameters of types ptypes[0..np) and
 * returns scalars of types rtypes[0..nr) (a tuple of them when nr > 1).
 * This is the signature of reducers, comparators and map functions. */
static IrStatus check_scalar_comp(Ctx *x, const IrComputation *comp, const char *role, int32_t np,
                                  const IrType *ptypes, int32_t nr, const IrType *rtypes)
{
    IrStatus st = expect_nparams(x, comp, role, np);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < np; i++) {
        const IrShape *p = callee_param(x, comp, i);
        if (!p)
            return IR_EINPUT;
        if (!is_scalar(p) || p->type != ptypes[i])
            return fail(x, "%s computation %s: parameter %d must be %s[], got %s", role,
                        comp->name, (int)i, ir_type_name(ptypes[i]), sstr(x, p));
    }
    const IrShape *r = callee_root(x, comp);
    if (!r)
        return IR_EINPUT;
    if (nr == 1) {
        if (!is_scalar(r) || r->type != rtypes[0])
            return fail(x, "%s computation %s must return %s[], it returns %s", role, comp->name,
                        ir_type_name(rtypes[0]), sstr(x, r));
        return IR_OK;
    }
    bool ok = r->type == IR_TUPLE && r->ntuple == nr;
    for (int32_t i = 0; ok && i < nr; i++)
        ok = is_scalar(&r->tuple[i]) && r->tuple[i].type == rtypes[i];
    if (!ok)
        return fail(x, "%s computation %s must return a tuple of %d scalars, it returns %s", role,
                    comp->name, (int)nr, sstr(x, r));
    return IR_OK;
}

/* A reducer over n values: (acc_0..acc_{n-1}, x_0..x_{n-1}) -> (acc...),
 * accumulators of the init types, inputs of the operand types. */
/* A float type where the reducer has another float type: XLA compares a
 * reducer's shapes with its inputs' ignoring floating-point precision
 * (VerifyReducerShape: CompatibleIgnoringFpPrecision), so an f16 reduce may
 * start from an f32 init, and the accumulator is the reducer's type. */
static IrType reducer_param_type(Ctx *x, const IrComputation *comp, int32_t i, IrType t)
{
    if (!comp || i >= comp->nparam || comp->param[i] < 0 || !ir_type_is_float(t))
        return t;
    const IrShape *p = callee_param(x, comp, i);
    return p && is_scalar(p) && ir_type_is_float(p->type) ? p->type : t;
}

/* `acc` is updated to the reducer's accumulator types (see above): the
 * caller's result types. */
static IrStatus check_reducer(Ctx *x, const IrComputation *comp, int32_t n, IrType *acc,
                              const IrType *in)
{
    IrType *pt = ir_alloc_array(x->a, (size_t)(2 * n), sizeof(IrType));
    if (!pt)
        return oom(x);
    for (int32_t i = 0; i < n; i++) {
        acc[i] = reducer_param_type(x, comp, i, acc[i]);
        pt[i] = acc[i];
        pt[n + i] = reducer_param_type(x, comp, n + i, in[i]);
    }
    return check_scalar_comp(x, comp, "reduction", 2 * n, pt, n, acc);
}

/* ------------------------------------------------------------------ */
/* operand and callee counts                                           */
/* ------------------------------------------------------------------ */

static IrStatus check_arity(Ctx *x)
{
    IrOpcode op = x->ins->op;
    int32_t n = x->ins->nopnd;
    int ar = ir_op_arity(op);
    if (ar >= 0) {
        if (n != ar)
            return fail(x, "expects %d operand%s, got %d", ar, ar == 1 ? "" : "s", (int)n);
        return IR_OK;
    }
    int min = 0;
    switch (op) {
    case OP_CONDITIONAL: case OP_MAP: case OP_CONCATENATE: case OP_SORT:
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL:
    case OP_ALL_REDUCE_START: case OP_ALL_GATHER_START: case OP_COLLECTIVE_PERMUTE:
    case OP_COLLECTIVE_PERMUTE_START: case OP_COLLECTIVE_BROADCAST: case OP_COLLECTIVE_REDUCE:
    case OP_ASYNC_UPDATE: case OP_DYNAMIC_RESHAPE: case OP_SCAN:
        min = 1;
        break;
    case OP_DYNAMIC_SLICE:
        min = 2;
        break;
    case OP_DYNAMIC_UPDATE_SLICE: case OP_SCATTER:
        min = 3;
        break;
    case OP_REDUCE: case OP_REDUCE_WINDOW:
        min = 2;
        break;
    default:
        break;
    }
    if (n < min)
        return fail(x, "expects at least %d operand%s, got %d", min, min == 1 ? "" : "s", (int)n);
    if ((op == OP_REDUCE || op == OP_REDUCE_WINDOW) && n % 2 != 0)
        return fail(x, "expects an even number of operands (inputs then init values), got %d",
                    (int)n);
    if (op == OP_SCATTER && n % 2 != 1)
        return fail(x, "expects 2N+1 operands (N inputs, indices, N updates), got %d", (int)n);
    return IR_OK;
}

/* How many computations an op calls; -1 when any number is allowed. */
static int expected_ncalled(IrOpcode op)
{
    switch (op) {
    case OP_REDUCE: case OP_REDUCE_WINDOW: case OP_MAP: case OP_ALL_REDUCE:
    case OP_REDUCE_SCATTER: case OP_SCATTER: case OP_SORT: case OP_CALL:
    case OP_FUSION: case OP_ASYNC_START: case OP_ALL_REDUCE_START: case OP_SCAN:
    case OP_COLLECTIVE_REDUCE:
        return 1;
    case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
        return -1; /* 0 (sugared) or the start's computation */
    case OP_WHILE: case OP_SELECT_AND_SCATTER:
        return 2;
    case OP_CONDITIONAL: case OP_CUSTOM_CALL:
        return -1;
    default:
        return 0;
    }
}

static IrStatus check_refs(Ctx *x)
{
    const IrInstr *ins = x->ins;
    for (int32_t i = 0; i < ins->nopnd; i++)
        if (ins->opnd[i] < 0 || ins->opnd[i] >= x->c->ninstr)
            return fail(x, "operand %d refers to instruction index %d, out of range", (int)i,
                        (int)ins->opnd[i]);
    for (int32_t k = 0; k < ins->ncalled; k++)
        if (ins->called[k] < 0 || ins->called[k] >= x->m->ncomp)
            return fail(x, "called computation %d has index %d, out of range", (int)k,
                        (int)ins->called[k]);
    int want = expected_ncalled(ins->op);
    if (want >= 0 && ins->ncalled != want)
        return fail(x, "expects %d called computation%s, got %d", want, want == 1 ? "" : "s",
                    (int)ins->ncalled);
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* elementwise                                                         */
/* ------------------------------------------------------------------ */

/* Operand type classes accepted by unary ops, as in XLA. */
static IrStatus unary_type_ok(Ctx *x, IrType t)
{
    bool ok;
    const char *want;
    switch (x->ins->op) {
    case OP_ABS: case OP_SIGN:
        ok = ir_type_is_signed_int(t) || ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a signed integer, floating-point or complex";
        break;
    case OP_NEGATE:
        ok = ir_type_is_int(t) || ir_type_is_float(t) || ir_type_is_complex(t);
        want = "an integer, floating-point or complex";
        break;
    case OP_FLOOR: case OP_CEIL: case OP_ROUND_AFZ: case OP_ROUND_EVEN: case OP_IS_FINITE:
    case OP_ERF: case OP_REDUCE_PRECISION:
        ok = ir_type_is_float(t);
        want = "a floating-point";
        break;
    case OP_EXP: case OP_EXPM1: case OP_LOG: case OP_LOG1P: case OP_LOGISTIC: case OP_SQRT:
    case OP_RSQRT: case OP_CBRT: case OP_TANH: case OP_SINE: case OP_COSINE: case OP_TAN:
    case OP_ACOS: case OP_ACOSH: case OP_ASIN: case OP_ASINH: case OP_ATAN: case OP_ATANH:
    case OP_COSH: case OP_SINH:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a floating-point or complex";
        break;
    case OP_POPCNT: case OP_CLZ:
        ok = ir_type_is_int(t);
        want = "an integer";
        break;
    case OP_NOT:
        ok = ir_type_is_int(t) || t == IR_PRED;
        want = "a pred or integer";
        break;
    case OP_REAL: case OP_IMAG:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a complex or floating-point";
        break;
    default:
        ok = true;
        want = "";
        break;
    }
    if (!ok)
        return fail(x, "operand must have %s element type, got %s", want, ir_type_name(t));
    return IR_OK;
}

static IrStatus infer_unary(Ctx *x, IrShape *out)
{
    const IrShape *s = opnd(x, 0);
    IrOpcode op = x->ins->op;
    if (op == OP_COPY)
        return copy_shape(x, out, s); /* copy also takes tuples */
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK || (st = unary_type_ok(x, s->type)) != IR_OK)
        return st;
    IrType t = s->type;
    switch (op) {
    case OP_ABS: case OP_REAL: case OP_IMAG:
        t = component_type(t);
        break;
    case OP_IS_FINITE:
        t = IR_PRED;
        break;
    case OP_CONVERT:
        t = x->ins->shape.type;
        if (!ir_type_is_array(t))
            return fail(x, "result must be an array type, got %s", sstr(x, &x->ins->shape));
        if (ir_type_is_complex(s->type) && !ir_type_is_complex(t))
            return fail(x, "cannot convert complex %s to non-complex %s (use real or imag)",
                        ir_type_name(s->type), ir_type_name(t));
        break;
    case OP_REDUCE_PRECISION:
        if (x->ins->a.exponent_bits < 1 || x->ins->a.mantissa_bits < 0)
            return fail(x, "needs exponent_bits >= 1 and mantissa_bits >= 0, got %lld and %lld",
                        (long long)x->ins->a.exponent_bits, (long long)x->ins->a.mantissa_bits);
        break;
    default:
        break;
    }
    return make_array(x, out, t, s->rank, s->dims);
}

/* bitcast-convert: same bit width keeps the dimensions; to a narrower type
 * adds a minor dimension of in_bits/out_bits (s32[4] -> s8[4,4]); to a wider
 * type removes a minor dimension that must be out_bits/in_bits
 * (u8[4,2] -> u16[4]). */
static IrStatus infer_bitcast_convert(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    IrType t = x->ins->shape.type;
    if (!ir_type_is_array(t))
        return fail(x, "result must be an array type, got %s", sstr(x, &x->ins->shape));
    if (s->type == IR_PRED || t == IR_PRED)
        return fail(x, "cannot bitcast from or to pred");
    int ib = ir_type_bits(s->type), ob = ir_type_bits(t);
    if (ib == ob)
        return make_array(x, out, t, s->rank, s->dims);
    if (ib > ob) {
        int64_t *dims = scratch(x, s->rank + 1);
        if (!dims)
            return oom(x);
        if (s->rank > 0)
            memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
        dims[s->rank] = ib / ob;
        return make_array(x, out, t, s->rank + 1, dims);
    }
    if (s->rank == 0 || s->dims[s->rank - 1] != ob / ib)
        return fail(x, "converting %s to the wider %s needs a minor dimension of size %d, got %s",
                    ir_type_name(s->type), ir_type_name(t), ob / ib, sstr(x, s));
    return make_array(x, out, t, s->rank - 1, s->dims);
}

static IrStatus binary_type_ok(Ctx *x, IrType t)
{
    bool ok = true;
    const char *want = "";
    switch (x->ins->op) {
    case OP_AND: case OP_OR: case OP_XOR:
        ok = t == IR_PRED || ir_type_is_int(t);
        want = "a pred or integer";
        break;
    case OP_SHL: case OP_SHRA: case OP_SHRL: case OP_MULHI:
        ok = ir_type_is_int(t);
        want = "an integer";
        break;
    case OP_ATAN2:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        want = "a floating-point or complex";
        break;
    case OP_COMPLEX:
        ok = t == IR_F32 || t == IR_F64;
        want = "an f32 or f64";
        break;
    default:
        break;
    }
    if (!ok)
        return fail(x, "operands must have %s element type, got %s", want, ir_type_name(t));
    return IR_OK;
}

static IrStatus check_compare(Ctx *x, IrType t)
{
    const IrAttrs *at = &x->ins->a;
    if (at->direction == CMP_NONE)
        return fail(x, "needs a direction= attribute (EQ, NE, LT, LE, GT or GE)");
    bool ok = true;
    switch (at->cmp_type) {
    case CMPT_FLOAT: case CMPT_TOTALORDER:
        ok = ir_type_is_float(t) || ir_type_is_complex(t);
        break;
    case CMPT_SIGNED:
        ok = ir_type_is_signed_int(t);
        break;
    case CMPT_UNSIGNED:
        ok = ir_type_is_unsigned_int(t) || t == IR_PRED;
        break;
    default:
        break;
    }
    if (!ok)
        return fail(x, "comparison type does not fit element type %s", ir_type_name(t));
    return IR_OK;
}

static IrStatus infer_binary(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "lhs")) != IR_OK || (st = expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = opnd(x, 0), *r = opnd(x, 1);
    if (!same_dims(l, r))
        return fail(x, "operands must have the same dimensions, got %s and %s", sstr(x, l),
                    sstr(x, r));
    if (l->type != r->type)
        return fail(x, "operands must have the same element type, got %s and %s",
                    ir_type_name(l->type), ir_type_name(r->type));
    if ((st = binary_type_ok(x, l->type)) != IR_OK)
        return st;
    IrType t = l->type;
    if (x->ins->op == OP_COMPARE) {
        if ((st = check_compare(x, t)) != IR_OK)
            return st;
        t = IR_PRED;
    } else if (x->ins->op == OP_COMPLEX) {
        t = t == IR_F32 ? IR_C64 : IR_C128;
    }
    return make_array(x, out, t, l->rank, l->dims);
}

static IrStatus infer_select(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 3; i++)
        if ((st = expect_array(x, i, i == 0 ? "predicate" : i == 1 ? "on_true" : "on_false")) != IR_OK)
            return st;
    const IrShape *p = opnd(x, 0), *t = opnd(x, 1), *f = opnd(x, 2);
    if (p->type != IR_PRED)
        return fail(x, "predicate must be pred, got %s", sstr(x, p));
    if (!ir_shape_equal(t, f))
        return fail(x, "on_true and on_false must have the same shape, got %s and %s", sstr(x, t),
                    sstr(x, f));
    if (!same_dims(p, t))
        return fail(x, "predicate %s must have the dimensions of on_true %s", sstr(x, p),
                    sstr(x, t));
    return copy_shape(x, out, t);
}

static IrStatus infer_clamp(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 3; i++)
        if ((st = expect_array(x, i, i == 0 ? "min" : i == 1 ? "operand" : "max")) != IR_OK)
            return st;
    const IrShape *v = opnd(x, 1);
    for (int32_t i = 0; i < 3; i += 2) {
        const IrShape *b = opnd(x, i);
        if (b->type != v->type || (b->rank != 0 && !same_dims(b, v)))
            return fail(x, "%s %s must be a %s scalar or have the operand's shape %s",
                        i == 0 ? "min" : "max", sstr(x, b), ir_type_name(v->type), sstr(x, v));
    }
    return copy_shape(x, out, v);
}

/* map: operands of one shape, to_apply takes one scalar of each operand's
 * type and returns a scalar; the result has the operands' dimensions and
 * the scalar's type. */
static IrStatus infer_map(Ctx *x, IrShape *out)
{
    const IrInstr *ins = x->ins;
    const IrShape *s0 = opnd(x, 0);
    IrType *pt = ir_alloc_array(x->a, (size_t)ins->nopnd, sizeof(IrType));
    if (!pt)
        return oom(x);
    for (int32_t i = 0; i < ins->nopnd; i++) {
        IrStatus st = expect_array(x, i, "operand");
        if (st != IR_OK)
            return st;
        if (!same_dims(opnd(x, i), s0))
            return fail(x, "operands must have the same dimensions, got %s and %s", sstr(x, s0),
                        sstr(x, opnd(x, i)));
        pt[i] = opnd(x, i)->type;
    }
    const IrI64List *dl = &ins->a.dimensions;
    for (int32_t i = 0; i < dl->n; i++)
        if (dl->n != s0->rank || dl->v[i] != i)
            return fail(x, "dimensions=%s must list every dimension in order", lstr(x, dl));
    const IrComputation *f = callee(x, 0);
    IrStatus st = expect_nparams(x, f, "mapped", ins->nopnd);
    if (st != IR_OK)
        return st;
    const IrShape *r = callee_root(x, f);
    if (!r)
        return IR_EINPUT;
    if (!is_scalar(r))
        return fail(x, "mapped computation %s must return a scalar, it returns %s", f->name,
                    sstr(x, r));
    if ((st = check_scalar_comp(x, f, "mapped", ins->nopnd, pt, 1, &r->type)) != IR_OK)
        return st;
    return make_array(x, out, r->type, s0->rank, s0->dims);
}

/* ------------------------------------------------------------------ */
/* values, tuples and control flow                                     */
/* ------------------------------------------------------------------ */

static IrStatus infer_declared(Ctx *x, IrShape *out)
{
    return copy_shape(x, out, &x->ins->shape);
}

static IrStatus infer_iota(Ctx *x, IrShape *out)
{
    const IrShape *s = &x->ins->shape;
    if (!is_array(s) || s->rank == 0)
        return fail(x, "result must be an array of rank >= 1, got %s", sstr(x, s));
    if (s->type == IR_PRED)
        return fail(x, "result cannot be pred");
    if (x->ins->a.iota_dimension < 0 || x->ins->a.iota_dimension >= s->rank)
        return fail(x, "iota_dimension=%lld is out of range for rank %d",
                    (long long)x->ins->a.iota_dimension, (int)s->rank);
    return copy_shape(x, out, s);
}

static IrStatus infer_tuple(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    if (n == 0)
        return IR_OK;
    out->tuple = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!out->tuple)
        return oom(x);
    for (int32_t i = 0; i < n; i++)
        if (copy_shape(x, &out->tuple[i], opnd(x, i)) != IR_OK)
            return IR_ENOMEM;
    return IR_OK;
}

static IrStatus infer_gte(Ctx *x, IrShape *out)
{
    const IrShape *s = opnd(x, 0);
    int64_t k = x->ins->a.tuple_index;
    if (s->type != IR_TUPLE)
        return fail(x, "operand %s must be a tuple, got %s", opnd_name(x, 0), sstr(x, s));
    if (k < 0 || k >= s->ntuple)
        return fail(x, "index=%lld is out of range for a tuple of %d elements", (long long)k,
                    (int)s->ntuple);
    return copy_shape(x, out, &s->tuple[k]);
}

static IrStatus infer_call(Ctx *x, IrShape *out)
{
    const IrComputation *f = callee(x, 0);
    IrStatus st = expect_nparams(x, f, "called", x->ins->nopnd);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < x->ins->nopnd; i++) {
        const IrShape *p = callee_param(x, f, i);
        if (!p)
            return IR_EINPUT;
        if (!ir_shape_equal(p, opnd(x, i)))
            return fail(x, "operand %d is %s but parameter %d of %s is %s", (int)i,
                        sstr(x, opnd(x, i)), (int)i, f->name, sstr(x, p));
    }
    const IrShape *r = callee_root(x, f);
    return r ? copy_shape(x, out, r) : IR_EINPUT;
}

/* A computation taking exactly one parameter of shape `s`. */
static IrStatus check_unary_comp(Ctx *x, const IrComputation *f, const char *role,
                                 const IrShape *s)
{
    IrStatus st = expect_nparams(x, f, role, 1);
    if (st != IR_OK)
        return st;
    const IrShape *p = callee_param(x, f, 0);
    if (!p)
        return IR_EINPUT;
    if (!ir_shape_equal(p, s))
        return fail(x, "%s computation %s takes %s but is given %s", role, f->name, sstr(x, p),
                    sstr(x, s));
    return IR_OK;
}

/* while: condition (T) -> pred[], body (T) -> T, result T. */
static IrStatus infer_while(Ctx *x, IrShape *out)
{
    const IrShape *init = opnd(x, 0);
    const IrComputation *cond = callee(x, 0), *body = callee(x, 1);
    IrStatus st;
    if ((st = check_unary_comp(x, cond, "condition", init)) != IR_OK ||
        (st = check_unary_comp(x, body, "body", init)) != IR_OK)
        return st;
    const IrShape *cr = callee_root(x, cond), *br = callee_root(x, body);
    if (!cr || !br)
        return IR_EINPUT;
    if (!is_scalar(cr) || cr->type != IR_PRED)
        return fail(x, "condition computation %s must return pred[], it returns %s", cond->name,
                    sstr(x, cr));
    if (!ir_shape_equal(br, init))
        return fail(x, "body computation %s must return the loop shape %s, it returns %s",
                    body->name, sstr(x, init), sstr(x, br));
    return copy_shape(x, out, init);
}

/* conditional: pred[] selects between two branches (true, false); s32[]
 * selects among N branches (out of range -> the last). Branch k takes
 * operand k+1; all branches return the same shape. */
static IrStatus infer_conditional(Ctx *x, IrShape *out)
{
    const IrInstr *ins = x->ins;
    const IrShape *sel = opnd(x, 0);
    if (!is_scalar(sel) || (sel->type != IR_PRED && sel->type != IR_S32))
        return fail(x, "branch selector must be pred[] or s32[], got %s", sstr(x, sel));
    if (sel->type == IR_PRED && ins->ncalled != 2)
        return fail(x, "a pred selector needs 2 branch computations, got %d", (int)ins->ncalled);
    if (ins->ncalled < 1)
        return fail(x, "needs at least one branch computation");
    if (ins->nopnd != ins->ncalled + 1)
        return fail(x, "%d branch computations need %d operands, got %d", (int)ins->ncalled,
                    (int)ins->ncalled + 1, (int)ins->nopnd);
    const IrShape *r0 = NULL;
    for (int32_t k = 0; k < ins->ncalled; k++) {
        const IrComputation *b = callee(x, k);
        IrStatus st = check_unary_comp(x, b, "branch", opnd(x, k + 1));
        if (st != IR_OK)
            return st;
        const IrShape *r = callee_root(x, b);
        if (!r)
            return IR_EINPUT;
        if (r0 && !ir_shape_equal(r, r0))
            return fail(x, "branch %s returns %s but branch %s returns %s", b->name, sstr(x, r),
                        callee(x, 0)->name, sstr(x, r0));
        r0 = r;
    }
    return copy_shape(x, out, r0);
}

static IrStatus infer_after_all(Ctx *x, IrShape *out)
{
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if (opnd(x, i)->type != IR_TOKEN)
            return fail(x, "operand %d (%s) must be a token, got %s", (int)i, opnd_name(x, i),
                        sstr(x, opnd(x, i)));
    memset(out, 0, sizeof *out);
    out->type = IR_TOKEN;
    return IR_OK;
}

static IrStatus infer_add_dependency(Ctx *x, IrShape *out)
{
    if (opnd(x, 1)->type != IR_TOKEN)
        return fail(x, "operand 1 (%s) must be a token, got %s", opnd_name(x, 1),
                    sstr(x, opnd(x, 1)));
    return copy_shape(x, out, opnd(x, 0));
}

/* ------------------------------------------------------------------ */
/* data movement                                                       */
/* ------------------------------------------------------------------ */

/* broadcast: operand dimension i becomes result dimension dimensions[i]
 * (ascending, sizes equal); the other result dimensions come from the
 * declared shape. f32[3] dimensions={1} -> f32[2,3]. */
static IrStatus infer_broadcast(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *o = &x->ins->shape;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (!is_array(o))
        return fail(x, "result must be an array, got %s", sstr(x, o));
    if (dl->n != s->rank)
        return fail(x, "dimensions=%s must have one entry per operand dimension (%d)",
                    lstr(x, dl), (int)s->rank);
    if (o->rank < s->rank)
        return fail(x, "result rank %d is smaller than operand rank %d", (int)o->rank,
                    (int)s->rank);
    if ((st = check_dim_list(x, dl, o->rank, "dimensions", true)) != IR_OK)
        return st;
    for (int32_t i = 0; i < s->rank; i++)
        if (o->dims[dl->v[i]] != s->dims[i])
            return fail(x, "operand dimension %d has size %lld but result dimension %lld has "
                        "size %lld", (int)i, (long long)s->dims[i], (long long)dl->v[i],
                        (long long)o->dims[dl->v[i]]);
    return make_array(x, out, s->type, o->rank, o->dims);
}

static IrStatus infer_reshape(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *o = &x->ins->shape;
    if (!is_array(o))
        return fail(x, "result must be an array, got %s", sstr(x, o));
    int64_t ne = ir_shape_elements(s), no = ir_shape_elements(o);
    if (x->ins->op == OP_BITCAST) {
        int64_t bs = ir_shape_bytes(s), bo = ir_shape_bytes(o);
        if (bs != bo)
            return fail(x, "cannot bitcast %s (%lld bytes) to %s (%lld bytes)", sstr(x, s),
                        (long long)bs, sstr(x, o), (long long)bo);
        return make_array(x, out, o->type, o->rank, o->dims);
    }
    if (ne != no)
        return fail(x, "cannot reshape %s (%lld elements) to %s (%lld elements)", sstr(x, s),
                    (long long)ne, sstr(x, o), (long long)no);
    return make_array(x, out, s->type, o->rank, o->dims);
}

/* transpose: result dimension i is operand dimension dimensions[i]. */
static IrStatus infer_transpose(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    if (dl->n != s->rank)
        return fail(x, "dimensions=%s must be a permutation of the %d operand dimensions",
                    lstr(x, dl), (int)s->rank);
    if ((st = check_dim_list(x, dl, s->rank, "dimensions", false)) != IR_OK)
        return st;
    int64_t *dims = scratch(x, s->rank);
    if (!dims)
        return oom(x);
    for (int32_t i = 0; i < s->rank; i++)
        dims[i] = s->dims[dl->v[i]];
    return make_array(x, out, s->type, s->rank, dims);
}

/* slice: per dimension [start:limit:stride] with 0 <= start <= limit <=
 * size and stride >= 1; the result has ceil((limit - start) / stride). */
static IrStatus infer_slice(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    const IrAttrs *at = &x->ins->a;
    if (at->slice_start.n != s->rank || at->slice_limit.n != s->rank ||
        (at->slice_stride.n != 0 && at->slice_stride.n != s->rank))
        return fail(x, "slice= has %d dimensions but the operand %s has rank %d",
                    (int)at->slice_start.n, sstr(x, s), (int)s->rank);
    int64_t *dims = scratch(x, s->rank);
    if (!dims)
        return oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        int64_t b = at->slice_start.v[i], e = at->slice_limit.v[i];
        int64_t k = at->slice_stride.n ? at->slice_stride.v[i] : 1;
        if (k < 1)
            return fail(x, "stride %lld of dimension %d must be positive", (long long)k, (int)i);
        if (b < 0 || b > e || e > s->dims[i])
            return fail(x, "slice [%lld:%lld] of dimension %d is out of bounds [0:%lld]",
                        (long long)b, (long long)e, (int)i, (long long)s->dims[i]);
        dims[i] = (e - b + k - 1) / k;
    }
    return make_array(x, out, s->type, s->rank, dims);
}

/* The start indices of dynamic-slice / dynamic-update-slice from operand
 * `first`: one integer scalar per dimension, all of one type (or the legacy
 * single rank-1 vector). */
static IrStatus check_start_indices(Ctx *x, int32_t first, int32_t rank)
{
    int32_t n = x->ins->nopnd - first;
    const IrShape *i0 = opnd(x, first);
    if (n == 1 && is_array(i0) && i0->rank == 1) {
        if (!ir_type_is_int(i0->type) || i0->dims[0] != rank)
            return fail(x, "start index vector must be an integer vector of %d elements, got %s",
                        (int)rank, sstr(x, i0));
        return IR_OK;
    }
    if (n != rank)
        return fail(x, "needs %d start indices (one per dimension), got %d", (int)rank, (int)n);
    for (int32_t i = 0; i < n; i++) {
        const IrShape *s = opnd(x, first + i);
        if (!is_scalar(s) || !ir_type_is_int(s->type))
            return fail(x, "start index %d (%s) must be an integer scalar, got %s", (int)i,
                        opnd_name(x, first + i), sstr(x, s));
        if (s->type != i0->type)
            return fail(x, "start indices must all have one type, got %s and %s",
                        ir_type_name(i0->type), ir_type_name(s->type));
    }
    return IR_OK;
}

static IrStatus infer_dynamic_slice(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    const IrI64List *sz = &x->ins->a.dynamic_slice_sizes;
    if ((st = check_start_indices(x, 1, s->rank)) != IR_OK)
        return st;
    if (sz->n != s->rank)
        return fail(x, "dynamic_slice_sizes=%s must have one entry per operand dimension (%d)",
                    lstr(x, sz), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++)
        if (sz->v[i] < 0 || sz->v[i] > s->dims[i])
            return fail(x, "slice size %lld of dimension %d is out of range [0, %lld]",
                        (long long)sz->v[i], (int)i, (long long)s->dims[i]);
    return make_array(x, out, s->type, s->rank, sz->v);
}

static IrStatus infer_dynamic_update_slice(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK ||
        (st = expect_array(x, 1, "update")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *u = opnd(x, 1);
    if ((st = check_start_indices(x, 2, s->rank)) != IR_OK)
        return st;
    if (u->type != s->type)
        return fail(x, "update type %s differs from operand type %s", ir_type_name(u->type),
                    ir_type_name(s->type));
    if (u->rank != s->rank)
        return fail(x, "update %s must have the operand's rank %d", sstr(x, u), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++)
        if (u->dims[i] > s->dims[i])
            return fail(x, "update dimension %d has size %lld, larger than the operand's %lld",
                        (int)i, (long long)u->dims[i], (long long)s->dims[i]);
    return copy_shape(x, out, s);
}

/* pad: size = lo + hi + n + (n-1) * interior per dimension; lo and hi may
 * be negative (they cut), interior may not. f32[3] padding=1_2_1 -> f32[8]. */
static IrStatus infer_pad(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK ||
        (st = expect_scalar(x, 1, "padding value")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *v = opnd(x, 1);
    const IrAttrs *at = &x->ins->a;
    if (v->type != s->type)
        return fail(x, "padding value type %s differs from operand type %s",
                    ir_type_name(v->type), ir_type_name(s->type));
    if (at->pad_lo.n != s->rank || at->pad_hi.n != s->rank ||
        (at->pad_interior.n != 0 && at->pad_interior.n != s->rank))
        return fail(x, "padding= has %d dimensions but the operand %s has rank %d",
                    (int)at->pad_lo.n, sstr(x, s), (int)s->rank);
    int64_t *dims = scratch(x, s->rank);
    if (!dims)
        return oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        int64_t in = at->pad_interior.n ? at->pad_interior.v[i] : 0, n = s->dims[i], r;
        if (in < 0)
            return fail(x, "interior padding %lld of dimension %d is negative", (long long)in,
                        (int)i);
        if (mul_ovf(n > 0 ? n - 1 : 0, in, &r) || add_ovf(r, n, &r) ||
            add_ovf(r, at->pad_lo.v[i], &r) || add_ovf(r, at->pad_hi.v[i], &r))
            return fail(x, "padded size of dimension %d overflows", (int)i);
        if (r < 0)
            return fail(x, "padding of dimension %d gives a negative size %lld", (int)i,
                        (long long)r);
        dims[i] = r;
    }
    return make_array(x, out, s->type, s->rank, dims);
}

static IrStatus infer_concatenate(Ctx *x, IrShape *out)
{
    const IrShape *s0 = opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    if (dl->n != 1)
        return fail(x, "needs dimensions={d} with exactly one dimension, got %s", lstr(x, dl));
    int64_t d = dl->v[0];
    if (d < 0 || d >= s0->rank)
        return fail(x, "dimension %lld is out of range for rank %d", (long long)d, (int)s0->rank);
    int64_t *dims = scratch(x, s0->rank);
    if (!dims)
        return oom(x);
    memcpy(dims, s0->dims, (size_t)s0->rank * sizeof *dims);
    for (int32_t i = 1; i < x->ins->nopnd; i++) {
        const IrShape *s = opnd(x, i);
        if ((st = expect_array(x, i, "operand")) != IR_OK)
            return st;
        if (s->type != s0->type)
            return fail(x, "operand %d has type %s, operand 0 has %s", (int)i,
                        ir_type_name(s->type), ir_type_name(s0->type));
        if (s->rank != s0->rank)
            return fail(x, "operand %d %s has a different rank from operand 0 %s", (int)i,
                        sstr(x, s), sstr(x, s0));
        for (int32_t k = 0; k < s0->rank; k++)
            if (k != d && s->dims[k] != s0->dims[k])
                return fail(x, "operand %d %s and operand 0 %s differ in dimension %d", (int)i,
                            sstr(x, s), sstr(x, s0), (int)k);
        if (add_ovf(dims[d], s->dims[d], &dims[d]))
            return fail(x, "concatenated size overflows");
    }
    return make_array(x, out, s0->type, s0->rank, dims);
}

static IrStatus infer_reverse(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    if ((st = check_dim_list(x, &x->ins->a.dimensions, s->rank, "dimensions", false)) != IR_OK)
        return st;
    return copy_shape(x, out, s);
}

/* The start indices with index_vector_dim == rank treated as a trailing
 * dimension of size 1 (XLA's "expanded" indices). */
static IrStatus expand_indices(Ctx *x, const IrShape *ix, int64_t ivd, int64_t **dims,
                               int32_t *rank)
{
    if (ivd < 0 || ivd > ix->rank)
        return fail(x, "index_vector_dim=%lld is out of range [0, %d]", (long long)ivd,
                    (int)ix->rank);
    int32_t r = ix->rank + (ivd == ix->rank ? 1 : 0);
    int64_t *v = scratch(x, r);
    if (!v)
        return oom(x);
    if (ix->rank > 0)
        memcpy(v, ix->dims, (size_t)ix->rank * sizeof *v);
    if (r > ix->rank)
        v[ix->rank] = 1;
    *dims = v;
    *rank = r;
    return IR_OK;
}

/* Batching dimensions of gather/scatter: operand dims (sorted, unique, not
 * collapsed) paired with index dims (unique, not index_vector_dim) of equal
 * size. */
static IrStatus check_batching(Ctx *x, const IrShape *s, const IrI64List *ob, const char *obname,
                               const IrI64List *ib, const char *ibname, const int64_t *idims,
                               int32_t irank, int64_t ivd, const IrI64List *collapsed)
{
    IrStatus st;
    if ((st = check_dim_list(x, ob, s->rank, obname, true)) != IR_OK ||
        (st = check_dim_list(x, ib, irank, ibname, false)) != IR_OK)
        return st;
    if (ob->n != ib->n)
        return fail(x, "%s=%s and %s=%s must have the same length", obname, lstr(x, ob), ibname,
                    lstr(x, ib));
    for (int32_t i = 0; i < ob->n; i++) {
        if (list_has(collapsed, ob->v[i]))
            return fail(x, "dimension %lld is both collapsed and a batching dimension",
                        (long long)ob->v[i]);
        if (ib->v[i] == ivd)
            return fail(x, "%s cannot contain index_vector_dim %lld", ibname, (long long)ivd);
        if (s->dims[ob->v[i]] != idims[ib->v[i]])
            return fail(x, "operand batching dimension %lld has size %lld but index batching "
                        "dimension %lld has size %lld", (long long)ob->v[i],
                        (long long)s->dims[ob->v[i]], (long long)ib->v[i],
                        (long long)idims[ib->v[i]]);
    }
    return IR_OK;
}

/* The index-to-operand map (start_index_map / scatter_dims_to_operand_dims):
 * one entry per element of the index vector, unique, in range, not a
 * batching dimension. */
static IrStatus check_index_map(Ctx *x, const IrI64List *map, const char *name, int64_t rank,
                                int64_t nvec, const IrI64List *batching)
{
    IrStatus st = check_dim_list(x, map, rank, name, false);
    if (st != IR_OK)
        return st;
    if (map->n != nvec)
        return fail(x, "%s=%s has %d entries but the index vector has %lld", name, lstr(x, map),
                    (int)map->n, (long long)nvec);
    for (int32_t i = 0; i < map->n; i++)
        if (list_has(batching, map->v[i]))
            return fail(x, "%s cannot contain batching dimension %lld", name,
                        (long long)map->v[i]);
    return IR_OK;
}

/* gather: the result has offset dimensions (slice sizes of the operand
 * dimensions neither collapsed nor batching, at positions offset_dims) and
 * batch dimensions (the index dimensions except index_vector_dim, in the
 * other positions). Operand f32[5,4], indices s32[3,1], offset_dims={1},
 * collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1,
 * slice_sizes={1,4} -> f32[3,4]. */
static IrStatus infer_gather(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK ||
        (st = expect_array(x, 1, "start indices")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *ix = opnd(x, 1);
    const IrGatherDnums *g = &x->ins->a.gather;
    const IrI64List *ss = &x->ins->a.slice_sizes;
    if (!ir_type_is_int(ix->type))
        return fail(x, "start indices must be integers, got %s", sstr(x, ix));
    int64_t *idims;
    int32_t irank;
    if ((st = expand_indices(x, ix, g->index_vector_dim, &idims, &irank)) != IR_OK)
        return st;
    int32_t orank = g->offset_dims.n + irank - 1;
    if ((st = check_dim_list(x, &g->offset_dims, orank, "offset_dims", true)) != IR_OK ||
        (st = check_dim_list(x, &g->collapsed_slice_dims, s->rank, "collapsed_slice_dims",
                             true)) != IR_OK ||
        (st = check_batching(x, s, &g->operand_batching_dims, "operand_batching_dims",
                             &g->start_indices_batching_dims, "start_indices_batching_dims",
                             idims, irank, g->index_vector_dim, &g->collapsed_slice_dims)) != IR_OK ||
        (st = check_index_map(x, &g->start_index_map, "start_index_map", s->rank,
                              idims[g->index_vector_dim], &g->operand_batching_dims)) != IR_OK)
        return st;
    if (g->offset_dims.n + g->collapsed_slice_dims.n + g->operand_batching_dims.n != s->rank)
        return fail(x, "offset_dims (%d), collapsed_slice_dims (%d) and operand_batching_dims "
                    "(%d) must add up to the operand rank %d", (int)g->offset_dims.n,
                    (int)g->collapsed_slice_dims.n, (int)g->operand_batching_dims.n,
                    (int)s->rank);
    if (ss->n != s->rank)
        return fail(x, "slice_sizes=%s must have one entry per operand dimension (%d)",
                    lstr(x, ss), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++) {
        if (ss->v[i] < 0 || ss->v[i] > s->dims[i])
            return fail(x, "slice size %lld of dimension %d is out of range [0, %lld]",
                        (long long)ss->v[i], (int)i, (long long)s->dims[i]);
        if ((list_has(&g->collapsed_slice_dims, i) || list_has(&g->operand_batching_dims, i)) &&
            ss->v[i] > 1)
            return fail(x, "collapsed or batching dimension %d must have slice size 0 or 1, "
                        "got %lld", (int)i, (long long)ss->v[i]);
    }
    int64_t *dims = scratch(x, orank);
    if (!dims)
        return oom(x);
    int32_t od = 0, bd = 0;
    for (int32_t i = 0; i < orank; i++) {
        if (list_has(&g->offset_dims, i)) {
            while (list_has(&g->collapsed_slice_dims, od) ||
                   list_has(&g->operand_batching_dims, od))
                od++;
            dims[i] = ss->v[od++];
        } else {
            if (bd == g->index_vector_dim)
                bd++;
            dims[i] = idims[bd++];
        }
    }
    return make_array(x, out, s->type, orank, dims);
}

/* scatter: N inputs of one shape, indices, N updates; the update window
 * dimensions fit inside the operand dimensions that are neither inserted
 * nor batching, the other update dimensions are the index dimensions
 * without index_vector_dim. The result is the inputs' shape. */
static IrStatus check_scatter_updates(Ctx *x, const IrShape *s, const IrShape *u,
                                      const int64_t *idims, int32_t irank)
{
    const IrScatterDnums *g = &x->ins->a.scatter;
    int32_t want = g->update_window_dims.n + irank - 1;
    if (u->rank != want)
        return fail(x, "updates %s must have rank %d (%d window dimensions + %d scatter "
                    "dimensions)", sstr(x, u), (int)want, (int)g->update_window_dims.n,
                    (int)irank - 1);
    IrStatus st = check_dim_list(x, &g->update_window_dims, u->rank, "update_window_dims", true);
    if (st != IR_OK)
        return st;
    int32_t od = 0, sd = 0;
    for (int32_t i = 0; i < u->rank; i++) {
        if (list_has(&g->update_window_dims, i)) {
            while (list_has(&g->inserted_window_dims, od) || list_has(&g->input_batching_dims, od))
                od++;
            if (u->dims[i] > s->dims[od])
                return fail(x, "update window dimension %d has size %lld, larger than operand "
                            "dimension %d (%lld)", (int)i, (long long)u->dims[i], (int)od,
                            (long long)s->dims[od]);
            od++;
        } else {
            if (sd == g->index_vector_dim)
                sd++;
            if (u->dims[i] != idims[sd])
                return fail(x, "update scatter dimension %d has size %lld but index dimension "
                            "%d has size %lld", (int)i, (long long)u->dims[i], (int)sd,
                            (long long)idims[sd]);
            sd++;
        }
    }
    return IR_OK;
}

static IrStatus infer_scatter(Ctx *x, IrShape *out)
{
    int32_t n = (x->ins->nopnd - 1) / 2;
    const IrShape *s = opnd(x, 0), *ix = opnd(x, n);
    const IrScatterDnums *g = &x->ins->a.scatter;
    IrStatus st;
    IrType *tin = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    if (!tin)
        return oom(x);
    for (int32_t i = 0; i < n; i++) {
        if ((st = expect_array(x, i, "input")) != IR_OK ||
            (st = expect_array(x, n + 1 + i, "updates")) != IR_OK)
            return st;
        if (!same_dims(opnd(x, i), s))
            return fail(x, "inputs must have the same dimensions, got %s and %s", sstr(x, s),
                        sstr(x, opnd(x, i)));
        if (opnd(x, n + 1 + i)->type != opnd(x, i)->type)
            return fail(x, "updates %d type %s differs from input %d type %s", (int)i,
                        ir_type_name(opnd(x, n + 1 + i)->type), (int)i,
                        ir_type_name(opnd(x, i)->type));
        tin[i] = opnd(x, i)->type;
    }
    if ((st = expect_array(x, n, "scatter indices")) != IR_OK)
        return st;
    if (!ir_type_is_int(ix->type))
        return fail(x, "scatter indices must be integers, got %s", sstr(x, ix));
    int64_t *idims;
    int32_t irank;
    if ((st = expand_indices(x, ix, g->index_vector_dim, &idims, &irank)) != IR_OK)
        return st;
    if ((st = check_dim_list(x, &g->inserted_window_dims, s->rank, "inserted_window_dims",
                             true)) != IR_OK ||
        (st = check_batching(x, s, &g->input_batching_dims, "input_batching_dims",
                             &g->scatter_indices_batching_dims, "scatter_indices_batching_dims",
                             idims, irank, g->index_vector_dim, &g->inserted_window_dims)) != IR_OK ||
        (st = check_index_map(x, &g->scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims",
                              s->rank, idims[g->index_vector_dim], &g->input_batching_dims)) != IR_OK)
        return st;
    if (g->update_window_dims.n + g->inserted_window_dims.n + g->input_batching_dims.n != s->rank)
        return fail(x, "update_window_dims (%d), inserted_window_dims (%d) and "
                    "input_batching_dims (%d) must add up to the operand rank %d",
                    (int)g->update_window_dims.n, (int)g->inserted_window_dims.n,
                    (int)g->input_batching_dims.n, (int)s->rank);
    for (int32_t i = 0; i < n; i++)
        if ((st = check_scatter_updates(x, s, opnd(x, n + 1 + i), idims, irank)) != IR_OK)
            return st;
    if ((st = check_reducer(x, callee(x, 0), n, tin, tin)) != IR_OK)
        return st;
    if (n == 1)
        return copy_shape(x, out, s);
    IrShape *el = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!el)
        return oom(x);
    for (int32_t i = 0; i < n; i++)
        el[i] = *opnd(x, i);
    IrShape t = {.type = IR_TUPLE, .ntuple = n, .tuple = el};
    return copy_shape(x, out, &t);
}

/* sort: N operands of one set of dimensions, sorted along dimensions={d};
 * the comparator takes 2N scalars (lhs and rhs of operand i at 2i, 2i+1)
 * and returns pred[]. */
static IrStatus infer_sort(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    const IrShape *s0 = opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    IrType *pt = ir_alloc_array(x->a, (size_t)(2 * n), sizeof(IrType));
    if (!pt)
        return oom(x);
    for (int32_t i = 0; i < n; i++) {
        IrStatus st = expect_array(x, i, "operand");
        if (st != IR_OK)
            return st;
        if (!same_dims(opnd(x, i), s0))
            return fail(x, "operands must have the same dimensions, got %s and %s", sstr(x, s0),
                        sstr(x, opnd(x, i)));
        pt[2 * i] = pt[2 * i + 1] = opnd(x, i)->type;
    }
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= (s0->rank > 0 ? s0->rank : 1))
        return fail(x, "dimensions=%s must name one dimension of the rank-%d operands",
                    lstr(x, dl), (int)s0->rank);
    IrType pred = IR_PRED;
    IrStatus st = check_scalar_comp(x, callee(x, 0), "comparator", 2 * n, pt, 1, &pred);
    if (st != IR_OK)
        return st;
    if (n == 1)
        return copy_shape(x, out, s0);
    return infer_tuple(x, out);
}

/* ------------------------------------------------------------------ */
/* contractions and reductions                                         */
/* ------------------------------------------------------------------ */

/* The result element type of dot/convolution: the declared one (XLA's
 * preferred_element_type) when it is of the operands' kind, else theirs. */
static IrStatus contraction_type(Ctx *x, IrType lt, IrType rt, IrType *out)
{
    bool lf = ir_type_is_float(lt), rf = ir_type_is_float(rt);
    bool li = ir_type_is_int(lt) || lt == IR_PRED, ri = ir_type_is_int(rt) || rt == IR_PRED;
    bool lc = ir_type_is_complex(lt), rc = ir_type_is_complex(rt);
    if (!((lf && rf) || (li && ri) || (lc && rc)))
        return fail(x, "lhs type %s and rhs type %s are of different kinds", ir_type_name(lt),
                    ir_type_name(rt));
    IrType t = x->ins->shape.type;
    bool ok = (lf && (ir_type_is_float(t) || ir_type_is_complex(t))) ||
              (li && (ir_type_is_int(t) || t == IR_PRED || ir_type_is_float(t))) ||
              (lc && ir_type_is_complex(t));
    *out = ok ? t : lt;
    return IR_OK;
}

/* dot: result dimensions are the batch dimensions (lhs order), then the lhs
 * free dimensions, then the rhs free dimensions. f32[2,3,4] x f32[2,4,5]
 * lhs_batch_dims={0} lhs_contracting_dims={2} rhs_batch_dims={0}
 * rhs_contracting_dims={1} -> f32[2,3,5]. */
static IrStatus infer_dot(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "lhs")) != IR_OK || (st = expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = opnd(x, 0), *r = opnd(x, 1);
    const IrDotDnums *dn = &x->ins->a.dot;
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if ((st = check_dim_list(x, &dn->lhs_batch, l->rank, "lhs_batch_dims", false)) != IR_OK ||
        (st = check_dim_list(x, &dn->rhs_batch, r->rank, "rhs_batch_dims", false)) != IR_OK ||
        (st = check_dim_list(x, &dn->lhs_contracting, l->rank, "lhs_contracting_dims",
                             false)) != IR_OK ||
        (st = check_dim_list(x, &dn->rhs_contracting, r->rank, "rhs_contracting_dims",
                             false)) != IR_OK)
        return st;
    if (dn->lhs_batch.n != dn->rhs_batch.n)
        return fail(x, "lhs has %d batch dimensions, rhs has %d", (int)dn->lhs_batch.n,
                    (int)dn->rhs_batch.n);
    if (dn->lhs_contracting.n != dn->rhs_contracting.n)
        return fail(x, "lhs has %d contracting dimensions, rhs has %d", (int)dn->lhs_contracting.n,
                    (int)dn->rhs_contracting.n);
    for (int32_t i = 0; i < dn->lhs_batch.n; i++) {
        int64_t a = dn->lhs_batch.v[i], b = dn->rhs_batch.v[i];
        if (list_has(&dn->lhs_contracting, a) || list_has(&dn->rhs_contracting, b))
            return fail(x, "a dimension cannot be both batch and contracting");
        if (l->dims[a] != r->dims[b])
            return fail(x, "lhs batch dimension %lld has size %lld, rhs batch dimension %lld has "
                        "size %lld", (long long)a, (long long)l->dims[a], (long long)b,
                        (long long)r->dims[b]);
    }
    for (int32_t i = 0; i < dn->lhs_contracting.n; i++) {
        int64_t a = dn->lhs_contracting.v[i], b = dn->rhs_contracting.v[i];
        if (l->dims[a] != r->dims[b])
            return fail(x, "lhs contracting dimension %lld has size %lld, rhs contracting "
                        "dimension %lld has size %lld", (long long)a, (long long)l->dims[a],
                        (long long)b, (long long)r->dims[b]);
    }
    int64_t *dims = scratch(x, l->rank + r->rank);
    if (!dims)
        return oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < dn->lhs_batch.n; i++)
        dims[k++] = l->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < l->rank; i++)
        if (!list_has(&dn->lhs_batch, i) && !list_has(&dn->lhs_contracting, i))
            dims[k++] = l->dims[i];
    for (int32_t i = 0; i < r->rank; i++)
        if (!list_has(&dn->rhs_batch, i) && !list_has(&dn->rhs_contracting, i))
            dims[k++] = r->dims[i];
    return make_array(x, out, t, k, dims);
}

static int64_t dflt1(int64_t v)
{
    return v == 0 ? 1 : v;
}

/* Output size of one windowed dimension (XLA's window arithmetic):
 * base dilated to (n-1)*lhs_dilate+1, padded by lo and hi, window dilated
 * to (size-1)*rhs_dilate+1; then floor((padded - window) / stride) + 1, or
 * 0 when the window does not fit. n=5, size=3, stride=2, pad 1_1 -> 3. */
static IrStatus window_dim(Ctx *x, int32_t i, const IrWindowDim *w, int64_t n, int64_t *out)
{
    int64_t stride = dflt1(w->stride), ld = dflt1(w->lhs_dilate), rd = dflt1(w->rhs_dilate);
    if (w->size < 0 || stride < 1 || ld < 1 || rd < 1)
        return fail(x, "window dimension %d needs size >= 0 and stride and dilations >= 1",
                    (int)i);
    int64_t base, win, padded;
    if (mul_ovf(n > 0 ? n - 1 : 0, ld, &base) || add_ovf(base, n > 0 ? 1 : 0, &base) ||
        add_ovf(base, w->pad_lo, &padded) || add_ovf(padded, w->pad_hi, &padded) ||
        mul_ovf(w->size > 0 ? w->size - 1 : 0, rd, &win) || add_ovf(win, w->size > 0, &win))
        return fail(x, "window dimension %d overflows", (int)i);
    *out = (win > padded) ? 0 : (padded - win) / stride + 1;
    return IR_OK;
}

/* Apply a whole window (one entry per dimension of `s`). */
static IrStatus window_shape(Ctx *x, const IrShape *s, int64_t **dims)
{
    const IrWindow *w = &x->ins->a.window;
    if (w->rank != s->rank)
        return fail(x, "window has %d dimensions but the operand %s has rank %d", (int)w->rank,
                    sstr(x, s), (int)s->rank);
    int64_t *v = scratch(x, s->rank);
    if (!v)
        return oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        IrStatus st = window_dim(x, i, &w->dim[i], s->dims[i], &v[i]);
        if (st != IR_OK)
            return st;
    }
    *dims = v;
    return IR_OK;
}

/* Distinct dimension numbers in range: the dims of one dim_labels side. */
static IrStatus check_labels(Ctx *x, const char *side, int32_t rank, int64_t a, int64_t b,
                             const int64_t *sp, int32_t nsp)
{
    if (nsp + 2 != rank)
        return fail(x, "dim_labels %s has %d dimensions but the shape has rank %d", side,
                    (int)nsp + 2, (int)rank);
    uint64_t seen = 0;
    for (int32_t i = -2; i < nsp; i++) {
        int64_t v = i == -2 ? a : i == -1 ? b : sp[i];
        if (v < 0 || v >= rank || (seen >> v & 1))
            return fail(x, "dim_labels %s names dimension %lld twice or out of range", side,
                        (long long)v);
        seen |= (uint64_t)1 << v;
    }
    return IR_OK;
}

/* convolution: output batch = input batch / batch_group_count, output
 * feature = kernel output features, spatial dimensions by the window.
 * f32[1,5,5,2] b01f x f32[3,3,2,4] 01io, window size=3x3 pad=1_1x1_1 ->
 * f32[1,5,5,4] b01f. */
static IrStatus infer_convolution(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "lhs")) != IR_OK || (st = expect_array(x, 1, "rhs")) != IR_OK)
        return st;
    const IrShape *l = opnd(x, 0), *r = opnd(x, 1);
    const IrConvDnums *cd = &x->ins->a.conv;
    const IrWindow *w = &x->ins->a.window;
    int64_t fgc = dflt1(x->ins->a.feature_group_count), bgc = dflt1(x->ins->a.batch_group_count);
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if (!cd->present)
        return fail(x, "needs a dim_labels= attribute");
    if (l->rank != r->rank)
        return fail(x, "lhs %s and rhs %s must have the same rank", sstr(x, l), sstr(x, r));
    if (l->rank > 64)
        return fail(x, "rank %d is too large", (int)l->rank);
    if ((st = check_labels(x, "input", l->rank, cd->in_batch, cd->in_feature, cd->in_spatial,
                           cd->nspatial)) != IR_OK ||
        (st = check_labels(x, "kernel", r->rank, cd->k_in_feature, cd->k_out_feature,
                           cd->k_spatial, cd->nspatial)) != IR_OK ||
        (st = check_labels(x, "output", l->rank, cd->out_batch, cd->out_feature,
                           cd->out_spatial, cd->nspatial)) != IR_OK)
        return st;
    if (w->rank != cd->nspatial)
        return fail(x, "window has %d dimensions but the convolution has %d spatial dimensions",
                    (int)w->rank, (int)cd->nspatial);
    if (fgc < 1 || bgc < 1)
        return fail(x, "feature_group_count and batch_group_count must be positive");
    if (fgc > 1 && bgc > 1)
        return fail(x, "feature_group_count and batch_group_count cannot both be above 1");
    int64_t batch = l->dims[cd->in_batch], feat = l->dims[cd->in_feature];
    int64_t kin = r->dims[cd->k_in_feature], kout = r->dims[cd->k_out_feature];
    if (feat % fgc != 0)
        return fail(x, "input feature dimension size %lld is not a multiple of "
                    "feature_group_count %lld", (long long)feat, (long long)fgc);
    if (feat / fgc != kin)
        return fail(x, "input feature dimension size %lld / feature_group_count %lld must equal "
                    "the kernel input feature size %lld", (long long)feat, (long long)fgc,
                    (long long)kin);
    if (kout % fgc != 0)
        return fail(x, "kernel output feature size %lld is not a multiple of "
                    "feature_group_count %lld", (long long)kout, (long long)fgc);
    if (batch % bgc != 0)
        return fail(x, "input batch size %lld is not a multiple of batch_group_count %lld",
                    (long long)batch, (long long)bgc);
    if (kout % bgc != 0)
        return fail(x, "kernel output feature size %lld is not a multiple of "
                    "batch_group_count %lld", (long long)kout, (long long)bgc);
    int64_t *dims = scratch(x, l->rank);
    if (!dims)
        return oom(x);
    dims[cd->out_batch] = batch / bgc;
    dims[cd->out_feature] = kout;
    for (int32_t i = 0; i < cd->nspatial; i++) {
        if (w->dim[i].size != r->dims[cd->k_spatial[i]])
            return fail(x, "window dimension %d has size %lld but kernel spatial dimension %lld "
                        "has size %lld", (int)i, (long long)w->dim[i].size,
                        (long long)cd->k_spatial[i], (long long)r->dims[cd->k_spatial[i]]);
        if ((st = window_dim(x, i, &w->dim[i], l->dims[cd->in_spatial[i]],
                             &dims[cd->out_spatial[i]])) != IR_OK)
            return st;
    }
    return make_array(x, out, t, l->rank, dims);
}

/* reduce: N inputs (one set of dimensions), N scalar inits; the result
 * drops `dimensions` and has the init types (a tuple when N > 1). */
static IrStatus infer_reduce(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd / 2;
    const IrShape *s0 = opnd(x, 0);
    IrType *acc = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    IrType *in = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    if (!acc || !in)
        return oom(x);
    IrStatus st;
    for (int32_t i = 0; i < n; i++) {
        if ((st = expect_array(x, i, "input")) != IR_OK ||
            (st = expect_scalar(x, n + i, "init value")) != IR_OK)
            return st;
        if (!same_dims(opnd(x, i), s0))
            return fail(x, "inputs must have the same dimensions, got %s and %s", sstr(x, s0),
                        sstr(x, opnd(x, i)));
        in[i] = opnd(x, i)->type;
        acc[i] = opnd(x, n + i)->type;
    }
    const IrI64List *dl = &x->ins->a.dimensions;
    if ((st = check_dim_list(x, dl, s0->rank, "dimensions", false)) != IR_OK)
        return st;
    if ((st = check_reducer(x, callee(x, 0), n, acc, in)) != IR_OK)
        return st;
    int64_t *dims = scratch(x, s0->rank);
    if (!dims)
        return oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < s0->rank; i++)
        if (!list_has(dl, i))
            dims[k++] = s0->dims[i];
    if (n == 1)
        return make_array(x, out, acc[0], k, dims);
    IrShape *el = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!el)
        return oom(x);
    for (int32_t i = 0; i < n; i++)
        if (make_array(x, &el[i], acc[i], k, dims) != IR_OK)
            return IR_ENOMEM;
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    out->tuple = el;
    return IR_OK;
}

static IrStatus infer_reduce_window(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd / 2;
    const IrShape *s0 = opnd(x, 0);
    IrType *acc = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    IrType *in = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    if (!acc || !in)
        return oom(x);
    IrStatus st;
    for (int32_t i = 0; i < n; i++) {
        if ((st = expect_array(x, i, "input")) != IR_OK ||
            (st = expect_scalar(x, n + i, "init value")) != IR_OK)
            return st;
        if (!same_dims(opnd(x, i), s0))
            return fail(x, "inputs must have the same dimensions, got %s and %s", sstr(x, s0),
                        sstr(x, opnd(x, i)));
        in[i] = opnd(x, i)->type;
        acc[i] = opnd(x, n + i)->type;
    }
    int64_t *dims;
    if ((st = window_shape(x, s0, &dims)) != IR_OK ||
        (st = check_reducer(x, callee(x, 0), n, acc, in)) != IR_OK)
        return st;
    if (n == 1)
        return make_array(x, out, acc[0], s0->rank, dims);
    IrShape *el = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!el)
        return oom(x);
    for (int32_t i = 0; i < n; i++)
        if (make_array(x, &el[i], acc[i], s0->rank, dims) != IR_OK)
            return IR_ENOMEM;
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    out->tuple = el;
    return IR_OK;
}

/* select-and-scatter: select (T, T) -> pred[], scatter (T, T) -> T; the
 * source has the shape of the windowed operand; the result is the
 * operand's shape. */
static IrStatus infer_select_and_scatter(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK ||
        (st = expect_array(x, 1, "source")) != IR_OK ||
        (st = expect_scalar(x, 2, "init value")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *src = opnd(x, 1), *init = opnd(x, 2);
    if (src->type != s->type || init->type != s->type)
        return fail(x, "source %s and init value %s must have the operand's type %s",
                    sstr(x, src), sstr(x, init), ir_type_name(s->type));
    int64_t *dims;
    if ((st = window_shape(x, s, &dims)) != IR_OK)
        return st;
    IrShape want = {.type = s->type, .rank = s->rank, .dims = dims};
    if (!same_dims(src, &want))
        return fail(x, "source %s must have the windowed operand's shape %s", sstr(x, src),
                    sstr(x, &want));
    IrType tt[2] = {s->type, s->type}, pred = IR_PRED;
    if ((st = check_scalar_comp(x, callee(x, 0), "select", 2, tt, 1, &pred)) != IR_OK ||
        (st = check_scalar_comp(x, callee(x, 1), "scatter", 2, tt, 1, &s->type)) != IR_OK)
        return st;
    return copy_shape(x, out, s);
}

/* fft: FFT/IFFT keep a complex shape; RFFT takes f32/f64 to c64/c128 and
 * halves the last dimension (n/2+1); IRFFT does the reverse. The last
 * len(fft_length) dimensions are transformed. */
static IrStatus infer_fft(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    const IrI64List *fl = &x->ins->a.fft_length;
    const char *ty = x->ins->a.fft_type ? x->ins->a.fft_type : "";
    int32_t n = fl->n;
    if (n < 1 || n > 3 || n > s->rank)
        return fail(x, "fft_length=%s must have 1 to 3 entries, at most the rank %d",
                    lstr(x, fl), (int)s->rank);
    int64_t *dims = scratch(x, s->rank);
    if (!dims)
        return oom(x);
    memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
    int32_t base = s->rank - n;
    IrType t;
    if (strcmp(ty, "FFT") == 0 || strcmp(ty, "IFFT") == 0) {
        if (!ir_type_is_complex(s->type))
            return fail(x, "%s needs a complex operand, got %s", ty, sstr(x, s));
        for (int32_t i = 0; i < n; i++)
            if (s->dims[base + i] != fl->v[i])
                return fail(x, "operand dimension %d is %lld but fft_length says %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)fl->v[i]);
        t = s->type;
    } else if (strcmp(ty, "RFFT") == 0) {
        if (s->type != IR_F32 && s->type != IR_F64)
            return fail(x, "RFFT needs an f32 or f64 operand, got %s", sstr(x, s));
        for (int32_t i = 0; i < n; i++)
            if (s->dims[base + i] != fl->v[i])
                return fail(x, "operand dimension %d is %lld but fft_length says %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)fl->v[i]);
        dims[s->rank - 1] = fl->v[n - 1] == 0 ? 0 : fl->v[n - 1] / 2 + 1;
        t = s->type == IR_F32 ? IR_C64 : IR_C128;
    } else if (strcmp(ty, "IRFFT") == 0) {
        if (!ir_type_is_complex(s->type))
            return fail(x, "IRFFT needs a complex operand, got %s", sstr(x, s));
        for (int32_t i = 0; i < n; i++) {
            int64_t want = i == n - 1 ? (fl->v[i] == 0 ? 0 : fl->v[i] / 2 + 1) : fl->v[i];
            if (s->dims[base + i] != want)
                return fail(x, "operand dimension %d is %lld but fft_length needs %lld",
                            (int)(base + i), (long long)s->dims[base + i], (long long)want);
        }
        dims[s->rank - 1] = fl->v[n - 1];
        t = component_type(s->type);
    } else {
        return fail(x, "fft_type must be FFT, IFFT, RFFT or IRFFT, got '%s'", ty);
    }
    return make_array(x, out, t, s->rank, dims);
}

/* ------------------------------------------------------------------ */
/* collectives                                                         */
/* ------------------------------------------------------------------ */

/* The number of participants in each group, as XLA counts it:
 * no channel_id: replicas (groups list replicas); channel_id without
 * use_global_device_ids: replicas in a group times all partitions
 * (all-to-all and collective-permute: partitions); use_global_device_ids:
 * the group as listed. Returns 0 when unknown (empty groups and no counts
 * in the module header). */
static IrStatus group_size(Ctx *x, int64_t *size)
{
    const IrAttrs *at = &x->ins->a;
    const IrReplicaGroups *g = &at->replica_groups;
    int64_t R = x->m->replica_count, P = x->m->num_partitions;
    int64_t gs = 0;
    for (int32_t i = 0; i < g->ngroups; i++) {
        if (i > 0 && g->group_size[i] != gs)
            return fail(x, "replica groups must all have the same size, got %lld and %d",
                        (long long)gs, (int)g->group_size[i]);
        gs = g->group_size[i];
    }
    bool cross_partition = x->ins->op == OP_ALL_TO_ALL || x->ins->op == OP_COLLECTIVE_PERMUTE;
    int64_t listed = g->ngroups ? gs : -1; /* -1: empty groups, everyone takes part */
    if (at->channel_id == 0)
        *size = listed >= 0 ? listed : R;
    else if (cross_partition)
        *size = listed >= 0 ? listed : P;
    else if (at->use_global_device_ids)
        *size = listed >= 0 ? listed : (R > 0 && P > 0 ? R * P : 0);
    else
        *size = (listed >= 0 ? listed : R) * P;
    if (*size < 0)
        *size = 0;
    return IR_OK;
}

/* The shape of an element of a collective's result: element i when the
 * result is a tuple of N operands, else the result itself. */
static const IrShape *declared_part(Ctx *x, int32_t i)
{
    const IrShape *s = &x->ins->shape;
    if (x->ins->op == OP_ALL_GATHER_START) { /* (inputs, gathered) */
        if (s->type != IR_TUPLE || s->ntuple != 2)
            return NULL;
        s = &s->tuple[1];
    }
    if (x->ins->nopnd > 1 && s->type == IR_TUPLE)
        return i < s->ntuple ? &s->tuple[i] : NULL;
    return s;
}

/* Build a result from N per-operand array shapes (a tuple when N > 1). */
static IrStatus collective_result(Ctx *x, IrShape *out, IrShape *parts)
{
    int32_t n = x->ins->nopnd;
    if (n == 1) {
        *out = parts[0];
        return IR_OK;
    }
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    out->tuple = parts;
    return IR_OK;
}

static IrStatus check_collective_reducer(Ctx *x)
{
    const IrShape *s = opnd(x, 0);
    const IrShape *leaf = s->type == IR_TUPLE ? ir_shape_leaf(s, 0) : s;
    if (!leaf)
        return fail(x, "operand has no array elements");
    /* Floats of another precision than the reducer's are accepted, as for
     * reduce (reducer_param_type): XLA's mixed-precision all-reduce. */
    const IrComputation *comp = callee(x, 0);
    IrType t = reducer_param_type(x, comp, 0, leaf->type);
    IrType tt[2] = {t, t};
    return check_scalar_comp(x, comp, "reduction", 2, tt, 1, &t);
}

static IrStatus infer_all_reduce(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    IrStatus st;
    if (n == 1 && opnd(x, 0)->type == IR_TUPLE) {
        /* Older form: one tuple operand, reduced element by element. */
        const IrShape *s = opnd(x, 0);
        for (int32_t i = 0; i < s->ntuple; i++)
            if (!is_array(&s->tuple[i]))
                return fail(x, "tuple operand elements must be arrays, got %s", sstr(x, s));
    } else {
        for (int32_t i = 0; i < n; i++)
            if ((st = expect_array(x, i, "operand")) != IR_OK)
                return st;
    }
    /* No group-size check: XLA's verifier lets an all-reduce's replica
     * groups differ in size ({0},{1,2},{3}), and its shape does not depend
     * on them. */
    if ((st = check_collective_reducer(x)) != IR_OK)
        return st;
    if (n == 1)
        return copy_shape(x, out, opnd(x, 0));
    return infer_tuple(x, out);
}

/* all-gather multiplies dimensions={d} by the group size; reduce-scatter
 * divides it. When the group size is unknown (empty groups, no counts in
 * the module header) it is read off the declared shape, as XLA does. */
static IrStatus infer_gather_scatter_collective(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    bool gather = x->ins->op == OP_ALL_GATHER || x->ins->op == OP_ALL_GATHER_START;
    const IrI64List *dl = &x->ins->a.dimensions;
    IrStatus st;
    int64_t gs;
    if ((st = group_size(x, &gs)) != IR_OK)
        return st;
    if (!gather && (st = check_collective_reducer(x)) != IR_OK)
        return st;
    if (dl->n != 1)
        return fail(x, "needs dimensions={d} with one dimension, got %s", lstr(x, dl));
    int64_t d = dl->v[0];
    IrShape *parts = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!parts)
        return oom(x);
    for (int32_t i = 0; i < n; i++) {
        if ((st = expect_array(x, i, "operand")) != IR_OK)
            return st;
        const IrShape *s = opnd(x, i);
        if (d < 0 || d >= s->rank)
            return fail(x, "dimension %lld is out of range for operand %s", (long long)d,
                        sstr(x, s));
        int64_t k = gs;
        const IrShape *decl = declared_part(x, i);
        if (k == 0 && decl && is_array(decl) && decl->rank == s->rank) {
            int64_t a = gather ? decl->dims[d] : s->dims[d];
            int64_t b = gather ? s->dims[d] : decl->dims[d];
            k = b > 0 ? (a + b - 1) / b : 1;
            if (k < 1)
                k = 1;
        }
        if (k < 1)
            k = 1;
        int64_t *dims = scratch(x, s->rank);
        if (!dims)
            return oom(x);
        memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
        if (gather) {
            if (mul_ovf(dims[d], k, &dims[d]))
                return fail(x, "gathered size overflows");
        } else {
            if (dims[d] % k != 0)
                return fail(x, "dimension %lld of size %lld is not divisible by the group size "
                            "%lld", (long long)d, (long long)dims[d], (long long)k);
            dims[d] /= k;
        }
        if ((st = make_array(x, &parts[i], s->type, s->rank, dims)) != IR_OK)
            return st;
    }
    return collective_result(x, out, parts);
}

/* all-to-all: the array form (dimensions={d}) splits d into group-size
 * pieces and concatenates them back along d: same shape, d divisible by the
 * group size. The tuple form exchanges whole operands: same shapes. */
static IrStatus infer_all_to_all(Ctx *x, IrShape *out)
{
    IrStatus st;
    const IrI64List *dl = &x->ins->a.dimensions;
    int64_t gs;
    if ((st = group_size(x, &gs)) != IR_OK)
        return st;
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if ((st = expect_array(x, i, "operand")) != IR_OK)
            return st;
    if (dl->n > 0) {
        const IrShape *s = opnd(x, 0);
        if (x->ins->nopnd != 1)
            return fail(x, "the dimensions= form takes one operand, got %d", (int)x->ins->nopnd);
        if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= s->rank)
            return fail(x, "dimensions=%s must name one dimension of %s", lstr(x, dl),
                        sstr(x, s));
        if (gs > 0 && s->dims[dl->v[0]] % gs != 0)
            return fail(x, "split dimension %lld of size %lld is not divisible by the group "
                        "size %lld", (long long)dl->v[0], (long long)s->dims[dl->v[0]],
                        (long long)gs);
        return copy_shape(x, out, s);
    }
    /* The tuple form sends operand i to participant i of the group. */
    if (x->ins->nopnd > 1 && gs > 0 && gs != x->ins->nopnd)
        return fail(x, "the tuple form with %d operands needs groups of %d participants, "
                    "got %lld", (int)x->ins->nopnd, (int)x->ins->nopnd, (long long)gs);
    if (x->ins->nopnd == 1)
        return copy_shape(x, out, opnd(x, 0));
    return infer_tuple(x, out);
}

static IrStatus infer_collective_permute(Ctx *x, IrShape *out)
{
    const IrI64List *p = &x->ins->a.source_target_pairs;
    if (p->n % 2 != 0)
        return fail(x, "source_target_pairs must hold {source,target} pairs");
    int64_t P = x->m->num_partitions > 0 ? x->m->num_partitions : 0;
    int64_t R = x->m->replica_count > 0 ? x->m->replica_count : 0;
    int64_t limit = x->ins->a.channel_id ? P : R;
    /* Sources unique and targets unique. Pairs are few (one per device). */
    for (int32_t i = 0; i < p->n; i++) {
        if (p->v[i] < 0 || (limit > 0 && p->v[i] >= limit))
            return fail(x, "source_target_pairs: id %lld is out of range", (long long)p->v[i]);
        for (int32_t j = i % 2; j < i; j += 2)
            if (p->v[j] == p->v[i])
                return fail(x, "source_target_pairs: %s %lld appears twice",
                            i % 2 ? "target" : "source", (long long)p->v[i]);
    }
    if (x->ins->a.permute_slice_sizes) {
        /* In place: (input, output, input_start_indices,
         * output_start_indices) with slice_sizes; the result is output. */
        if (x->ins->nopnd != 4)
            return fail(x, "the slice_sizes= form takes 4 operands (input, output, input and output start "
                        "indices), got %d", (int)x->ins->nopnd);
        return copy_shape(x, out, opnd(x, 1));
    }
    /* The combined form permutes each operand: the tuple of their shapes. */
    if (x->ins->nopnd > 1 && x->ins->op == OP_COLLECTIVE_PERMUTE)
        return infer_tuple(x, out);
    return copy_shape(x, out, opnd(x, 0));
}

/* ------------------------------------------------------------------ */
/* host interaction, randomness, custom calls                          */
/* ------------------------------------------------------------------ */

/* custom-call has no general rule: the declared shape stands. The SPMD
 * markers keep the element type and rank (Sharding keeps the shape). */
static IrStatus infer_custom_call(Ctx *x, IrShape *out)
{
    const char *t = x->ins->a.custom_call_target ? x->ins->a.custom_call_target : "";
    const IrShape *o = &x->ins->shape;
    bool full = strcmp(t, "SPMDFullToShardShape") == 0, shard = strcmp(t, "SPMDShardToFullShape") == 0;
    bool sharding = strcmp(t, "Sharding") == 0;
    if (full || shard || sharding) {
        if (x->ins->nopnd != 1)
            return fail(x, "custom_call_target=\"%s\" takes one operand, got %d", t,
                        (int)x->ins->nopnd);
        const IrShape *s = opnd(x, 0);
        if (sharding && !ir_shape_equal(s, o))
            return fail(x, "Sharding keeps the operand shape %s, declared %s", sstr(x, s),
                        sstr(x, o));
        if (is_array(s) && (!is_array(o) || o->type != s->type || o->rank != s->rank))
            return fail(x, "%s keeps the element type and rank of %s, declared %s", t,
                        sstr(x, s), sstr(x, o));
    }
    return copy_shape(x, out, o);
}

static IrStatus infer_infeed(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    if (opnd(x, 0)->type != IR_TOKEN)
        return fail(x, "operand must be a token, got %s", sstr(x, opnd(x, 0)));
    if (o->type != IR_TUPLE || o->ntuple != 2 || o->tuple[1].type != IR_TOKEN)
        return fail(x, "result must be a (data, token[]) tuple, got %s", sstr(x, o));
    return copy_shape(x, out, o);
}

static IrStatus infer_outfeed(Ctx *x, IrShape *out)
{
    if (opnd(x, 1)->type != IR_TOKEN)
        return fail(x, "operand 1 must be a token, got %s", sstr(x, opnd(x, 1)));
    if (x->ins->a.has_outfeed_shape && !ir_shape_equal(&x->ins->a.outfeed_shape, opnd(x, 0)))
        return fail(x, "outfeed_shape=%s differs from the operand %s",
                    sstr(x, &x->ins->a.outfeed_shape), sstr(x, opnd(x, 0)));
    memset(out, 0, sizeof *out);
    out->type = IR_TOKEN;
    return IR_OK;
}

static IrStatus infer_rng(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_scalar(x, 0, "a")) != IR_OK || (st = expect_scalar(x, 1, "b")) != IR_OK)
        return st;
    const IrShape *a = opnd(x, 0), *b = opnd(x, 1), *o = &x->ins->shape;
    const char *dist = x->ins->a.distribution ? x->ins->a.distribution : "";
    if (a->type != b->type)
        return fail(x, "parameters must have one type, got %s and %s", ir_type_name(a->type),
                    ir_type_name(b->type));
    if (strcmp(dist, "rng_uniform") == 0) {
        if (!ir_type_is_float(a->type) && !ir_type_is_int(a->type))
            return fail(x, "rng_uniform needs integer or floating-point parameters, got %s",
                        ir_type_name(a->type));
    } else if (strcmp(dist, "rng_normal") == 0) {
        if (!ir_type_is_float(a->type))
            return fail(x, "rng_normal needs floating-point parameters, got %s",
                        ir_type_name(a->type));
    } else {
        return fail(x, "distribution must be rng_uniform or rng_normal, got '%s'", dist);
    }
    if (!is_array(o))
        return fail(x, "result must be an array, got %s", sstr(x, o));
    return make_array(x, out, a->type, o->rank, o->dims);
}

static IrStatus infer_get_dimension_size(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= opnd(x, 0)->rank)
        return fail(x, "dimensions=%s must name one dimension of %s", lstr(x, dl),
                    sstr(x, opnd(x, 0)));
    return make_scalar(x, out, IR_S32);
}

/* partition-id and replica-id are u32[]; XLA's own tests also declare
 * them s32[] (ManualPartitionId), which names the same small count, so any
 * declared integer scalar is taken as is. */
static IrStatus infer_id(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    return make_scalar(x, out, is_scalar(o) && ir_type_is_int(o->type) ? o->type : IR_U32);
}

/* ------------------------------------------------------------------ */
/* fusion, async wrappers and the -start/-done pairs                   */
/* ------------------------------------------------------------------ */

/* The operands match `f`'s parameters and `f` returns `result`. */
static IrStatus check_call_sig(Ctx *x, const IrComputation *f, const IrShape *result)
{
    IrStatus st = expect_nparams(x, f, "called", x->ins->nopnd);
    for (int32_t i = 0; i < x->ins->nopnd && st == IR_OK; i++) {
        const IrShape *p = callee_param(x, f, i);
        if (!p)
            return IR_EINPUT;
        if (!ir_shape_equal(p, opnd(x, i)))
            return fail(x, "operand %d is %s but parameter %d of %s is %s", (int)i,
                        sstr(x, opnd(x, i)), (int)i, f->name, sstr(x, p));
    }
    const IrShape *r = st == IR_OK ? callee_root(x, f) : NULL;
    if (st == IR_OK && !r)
        return IR_EINPUT;
    if (st == IR_OK && !ir_shape_equal(r, result))
        return fail(x, "called computation %s returns %s, the result is %s", f->name, sstr(x, r),
                    sstr(x, result));
    return st;
}

/* The declared shape, a tuple of at least n elements. */
static IrStatus expect_tuple_result(Ctx *x, int32_t n, const char *form)
{
    const IrShape *o = &x->ins->shape;
    if (o->type != IR_TUPLE || o->ntuple < n)
        return fail(x, "result must be a tuple %s, got %s", form, sstr(x, o));
    return IR_OK;
}

/* async-start: ((operands...), result, context...); its computation takes
 * the operands and returns element 1. */
static IrStatus infer_async_start(Ctx *x, IrShape *out)
{
    IrStatus st = expect_tuple_result(x, 2, "((operands...), result, context...)");
    if (st != IR_OK)
        return st;
    const IrShape *o = &x->ins->shape;
    if (o->tuple[0].type != IR_TUPLE || o->tuple[0].ntuple != x->ins->nopnd)
        return fail(x, "element 0 of the result must be the tuple of its %d operand shapes, got %s",
                    (int)x->ins->nopnd, sstr(x, &o->tuple[0]));
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if (!ir_shape_equal(&o->tuple[0].tuple[i], opnd(x, i)))
            return fail(x, "element {0,%d} of the result is %s but operand %d is %s", (int)i,
                        sstr(x, &o->tuple[0].tuple[i]), (int)i, sstr(x, opnd(x, i)));
    if ((st = check_call_sig(x, callee(x, 0), &o->tuple[1])) != IR_OK)
        return st;
    return copy_shape(x, out, o);
}

/* async-update and async-done take the async-start (or -update) they
 * continue: update keeps its shape, done gives its element 1. A sugared
 * OP-done continues an OP-start. */
static IrStatus infer_async_next(Ctx *x, IrShape *out)
{
    if (x->ins->nopnd != 1)
        return fail(x, "expects 1 operand, got %d", (int)x->ins->nopnd);
    const IrInstr *prev = &x->c->instr[x->ins->opnd[0]];
    const IrShape *s = opnd(x, 0);
    if (prev->op != OP_ASYNC_START && prev->op != OP_ASYNC_UPDATE)
        return fail(x, "operand %s must be an async-start or async-update, got %s", prev->name,
                    ir_op_name(prev->op));
    if (x->ins->a.async_sugar && prev->a.async_sugar &&
        prev->a.async_wrapped_op != x->ins->a.async_wrapped_op)
        return fail(x, "operand %s wraps %s, not %s", prev->name,
                    ir_op_name(prev->a.async_wrapped_op), ir_op_name(x->ins->a.async_wrapped_op));
    if (x->ins->ncalled > 1 || (x->ins->ncalled == 1 && prev->ncalled == 1 &&
                                x->ins->called[0] != prev->called[0]))
        return fail(x, "calls a different computation than its operand %s", prev->name);
    if (s->type != IR_TUPLE || s->ntuple < 2)
        return fail(x, "operand %s must be an async tuple, got %s", prev->name, sstr(x, s));
    return copy_shape(x, out, x->ins->op == OP_ASYNC_UPDATE ? s : &s->tuple[1]);
}

/* The -done of a (operand, result, ...) start tuple: element k of it. */
static IrStatus infer_done_element(Ctx *x, IrShape *out, int32_t k)
{
    const IrShape *s = opnd(x, 0);
    if (s->type != IR_TUPLE || s->ntuple <= k)
        return fail(x, "operand %s must be the tuple a -start returns, got %s", opnd_name(x, 0),
                    sstr(x, s));
    return copy_shape(x, out, &s->tuple[k]);
}

/* Element k of the declared tuple has operand i's type and dimensions
 * (a memory space or layout may differ). */
static IrStatus expect_like_operand(Ctx *x, int32_t k, int32_t i)
{
    const IrShape *e = &x->ins->shape.tuple[k], *s = opnd(x, i);
    if (!ir_shape_equal(e, s))
        return fail(x, "element %d of the result is %s but operand %d is %s", (int)k, sstr(x, e),
                    (int)i, sstr(x, s));
    return IR_OK;
}

/* all-gather-start: (input, gathered) as XLA's InferAllGatherStartShape
 * builds it, the input being the operand or the tuple of the operands and
 * `gathered` what all-gather would return: f32[4] dimensions={0} over 2
 * -> (f32[4], f32[8]). */
static IrStatus infer_all_gather_start(Ctx *x, IrShape *out)
{
    IrShape parts[2];
    IrStatus st = infer_gather_scatter_collective(x, &parts[1]);
    if (st != IR_OK)
        return st;
    if (x->ins->nopnd == 1)
        st = copy_shape(x, &parts[0], opnd(x, 0));
    else
        st = infer_tuple(x, &parts[0]);
    if (st != IR_OK)
        return st;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : oom(x);
}

/* collective-permute-start: (operand, result, u32[], u32[]). */
static IrStatus infer_permute_start(Ctx *x, IrShape *out)
{
    IrShape tmp;
    IrStatus st = expect_tuple_result(x, 2, "(operand, result, context...)");
    if (st != IR_OK || (st = infer_collective_permute(x, &tmp)) != IR_OK)
        return st;
    if (x->ins->nopnd == 1 && (st = expect_like_operand(x, 0, 0)) != IR_OK)
        return st;
    return copy_shape(x, out, &x->ins->shape);
}

/* copy-start: (destination, source, u32[] context), both like the operand. */
static IrStatus infer_copy_start(Ctx *x, IrShape *out)
{
    IrStatus st = expect_tuple_result(x, 2, "(destination, source, context)");
    if (st != IR_OK || (st = expect_like_operand(x, 0, 0)) != IR_OK ||
        (st = expect_like_operand(x, 1, 0)) != IR_OK)
        return st;
    return copy_shape(x, out, &x->ins->shape);
}

/* send(data, token) and recv(token): (data, u32[] context, token[]);
 * send-done: token[]; recv-done: (data, token[]). */
static IrStatus infer_send_recv(Ctx *x, IrShape *out)
{
    bool send = x->ins->op == OP_SEND;
    int32_t tok = send ? 1 : 0;
    if (opnd(x, tok)->type != IR_TOKEN)
        return fail(x, "operand %d must be a token, got %s", (int)tok, sstr(x, opnd(x, tok)));
    const IrShape *o = &x->ins->shape;
    IrStatus st = expect_tuple_result(x, 3, "(data, u32[], token[])");
    if (st != IR_OK)
        return st;
    /* The context is u32[]; XLA's own tests also write s32[]. */
    if (o->ntuple != 3 || o->tuple[2].type != IR_TOKEN || !is_scalar(&o->tuple[1]) ||
        !ir_type_is_int(o->tuple[1].type))
        return fail(x, "result must be a tuple (data, u32[], token[]), got %s", sstr(x, o));
    if (send && (st = expect_like_operand(x, 0, 0)) != IR_OK)
        return st;
    return copy_shape(x, out, o);
}

static IrStatus infer_send_recv_done(Ctx *x, IrShape *out)
{
    const IrShape *s = opnd(x, 0);
    if (s->type != IR_TUPLE || s->ntuple != 3 || s->tuple[2].type != IR_TOKEN)
        return fail(x, "operand %s must be the (data, u32[], token[]) of a %s, got %s",
                    opnd_name(x, 0), x->ins->op == OP_SEND_DONE ? "send" : "recv", sstr(x, s));
    memset(out, 0, sizeof *out);
    if (x->ins->op == OP_SEND_DONE) {
        out->type = IR_TOKEN;
        return IR_OK;
    }
    IrShape parts[2];
    memset(parts, 0, sizeof parts);
    parts[0] = s->tuple[0];
    parts[1].type = IR_TOKEN;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : oom(x);
}

/* ------------------------------------------------------------------ */
/* the ops of XLA's full list: linear algebra, norms, top-k, ...       */
/* ------------------------------------------------------------------ */

/* topk: the k largest (or smallest) along the last dimension, values and
 * their s32 indices. f32[6,16] k=8 -> (f32[6,8], s32[6,8]). */
static IrStatus infer_topk(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    int64_t k = x->ins->a.topk_k;
    if (s->rank < 1)
        return fail(x, "operand must have rank >= 1, got %s", sstr(x, s));
    if (k < 0 || k > s->dims[s->rank - 1])
        return fail(x, "k=%lld must be in [0, %lld]", (long long)k, (long long)s->dims[s->rank - 1]);
    int64_t *dims = scratch(x, s->rank);
    IrShape parts[2];
    if (!dims)
        return oom(x);
    memcpy(dims, s->dims, (size_t)s->rank * sizeof *dims);
    dims[s->rank - 1] = k;
    if ((st = make_array(x, &parts[0], s->type, s->rank, dims)) != IR_OK ||
        (st = make_array(x, &parts[1], IR_S32, s->rank, dims)) != IR_OK)
        return st;
    return ir_shape_make_tuple(x->a, out, 2, parts) == IR_OK ? IR_OK : oom(x);
}

/* The last two dimensions of operand i form a square matrix. */
static IrStatus expect_matrices(Ctx *x, int32_t i, const char *what)
{
    IrStatus st = expect_array(x, i, what);
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, i);
    if (!ir_type_is_float(s->type) && !ir_type_is_complex(s->type))
        return fail(x, "%s must be floating-point or complex, got %s", what, sstr(x, s));
    if (s->rank < 2 || s->dims[s->rank - 1] != s->dims[s->rank - 2])
        return fail(x, "%s must be square matrices [..., n, n], got %s", what, sstr(x, s));
    return IR_OK;
}

static IrStatus infer_cholesky(Ctx *x, IrShape *out)
{
    IrStatus st = expect_matrices(x, 0, "a");
    return st != IR_OK ? st : copy_shape(x, out, opnd(x, 0));
}

/* triangular-solve(a [..., m, m], b): b is [..., m, n] when left_side (solve
 * op(a) x = b), else [..., n, m] (x op(a) = b); the result is b's shape. */
static IrStatus infer_triangular_solve(Ctx *x, IrShape *out)
{
    IrStatus st = expect_matrices(x, 0, "a");
    if (st != IR_OK || (st = expect_array(x, 1, "b")) != IR_OK)
        return st;
    const IrShape *a = opnd(x, 0), *b = opnd(x, 1);
    if (a->type != b->type || a->rank != b->rank)
        return fail(x, "a %s and b %s must have one element type and rank", sstr(x, a), sstr(x, b));
    if (!ir_dims_equal(a->dims, b->dims, a->rank - 2))
        return fail(x, "a %s and b %s must have the same batch dimensions", sstr(x, a), sstr(x, b));
    int64_t m = a->dims[a->rank - 1];
    int64_t bm = b->dims[b->rank - (x->ins->a.left_side ? 2 : 1)];
    if (bm != m)
        return fail(x, "b %s must have %lld in its %s dimension to match a %s", sstr(x, b),
                    (long long)m, x->ins->a.left_side ? "second-to-last" : "last", sstr(x, a));
    return copy_shape(x, out, b);
}

/* Operand i is a feature vector: rank 1, the size of the feature dimension. */
static IrStatus expect_feature_vector(Ctx *x, int32_t i, const char *what)
{
    const IrShape *s = opnd(x, 0), *v = opnd(x, i);
    int64_t f = x->ins->a.feature_index;
    if (!is_array(v) || v->rank != 1 || v->dims[0] != s->dims[f] || v->type != s->type)
        return fail(x, "%s (operand %d) must be %s[%lld], got %s", what, (int)i, ir_type_name(s->type),
                    (long long)s->dims[f], sstr(x, v));
    return IR_OK;
}

/* batch-norm-training(operand, scale, offset) -> (normalized, mean, var);
 * -inference(operand, scale, offset, mean, var) -> normalized;
 * -grad(operand, scale, mean, var, grad_output) -> (grad_operand,
 * grad_scale, grad_offset). Feature vectors have the size of dimension
 * feature_index. */
static IrStatus infer_batch_norm(Ctx *x, IrShape *out)
{
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    int64_t f = x->ins->a.feature_index;
    if (!ir_type_is_float(s->type))
        return fail(x, "operand must be floating-point, got %s", sstr(x, s));
    if (f < 0 || f >= s->rank)
        return fail(x, "feature_index=%lld is out of range for %s", (long long)f, sstr(x, s));
    bool grad = x->ins->op == OP_BATCH_NORM_GRAD;
    for (int32_t i = 1; i < x->ins->nopnd; i++) {
        if (grad && i == 4) {
            if (!ir_shape_equal(opnd(x, 4), s))
                return fail(x, "grad_output (operand 4) must be %s, got %s", sstr(x, s),
                            sstr(x, opnd(x, 4)));
        } else if ((st = expect_feature_vector(x, i, "feature vector")) != IR_OK) {
            return st;
        }
    }
    if (x->ins->op == OP_BATCH_NORM_INFERENCE)
        return copy_shape(x, out, s);
    IrShape parts[3];
    parts[0] = *s;
    parts[1] = parts[2] = *opnd(x, 1);
    return ir_shape_make_tuple(x->a, out, 3, parts) == IR_OK ? IR_OK : oom(x);
}

/* ragged-dot(lhs, rhs, group_sizes): lhs_ragged_dims names the lhs
 * dimension cut into groups, rhs_group_dims the rhs dimension that picks
 * one rhs per group. With the ragged dimension free in lhs (the common
 * mode, [m, k] x [g, k, n] -> [m, n]), the result is the dot of lhs with
 * one rhs. Other modes are taken as declared. */
static IrStatus infer_ragged_dot(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "lhs")) != IR_OK || (st = expect_array(x, 1, "rhs")) != IR_OK ||
        (st = expect_array(x, 2, "group_sizes")) != IR_OK)
        return st;
    const IrShape *l = opnd(x, 0), *r = opnd(x, 1), *g = opnd(x, 2);
    const IrAttrs *a = &x->ins->a;
    IrType t;
    if ((st = contraction_type(x, l->type, r->type, &t)) != IR_OK)
        return st;
    if (!ir_type_is_int(g->type))
        return fail(x, "group_sizes must be integers, got %s", sstr(x, g));
    if (a->lhs_ragged_dims.n != 1 || a->rhs_group_dims.n > 1)
        return fail(x, "needs one lhs_ragged_dims and at most one rhs_group_dims");
    if ((st = check_dim_list(x, &a->lhs_ragged_dims, l->rank, "lhs_ragged_dims", false)) != IR_OK ||
        (st = check_dim_list(x, &a->rhs_group_dims, r->rank, "rhs_group_dims", false)) != IR_OK)
        return st;
    int64_t rd = a->lhs_ragged_dims.v[0];
    const IrDotDnums *dn = &a->dot;
    if (list_has(&dn->lhs_contracting, rd) || list_has(&dn->lhs_batch, rd) || a->rhs_group_dims.n == 0)
        return copy_shape(x, out, &x->ins->shape);
    int64_t gd = a->rhs_group_dims.v[0];
    int64_t *dims = scratch(x, l->rank + r->rank);
    if (!dims)
        return oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < dn->lhs_batch.n; i++)
        dims[k++] = l->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < l->rank; i++)
        if (!list_has(&dn->lhs_batch, i) && !list_has(&dn->lhs_contracting, i))
            dims[k++] = l->dims[i];
    for (int32_t i = 0; i < r->rank; i++)
        if (i != gd && !list_has(&dn->rhs_batch, i) && !list_has(&dn->rhs_contracting, i))
            dims[k++] = r->dims[i];
    return make_array(x, out, t, k, dims);
}

/* stochastic-convert(operand, random): random is unsigned, of the
 * operand's dimensions and bit width; the result has the declared
 * (narrower) type and the operand's dimensions. */
static IrStatus infer_stochastic_convert(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK || (st = expect_array(x, 1, "random")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0), *r = opnd(x, 1), *o = &x->ins->shape;
    if (!ir_type_is_float(s->type))
        return fail(x, "operand must be floating-point, got %s", sstr(x, s));
    if (!ir_type_is_unsigned_int(r->type) || ir_type_bits(r->type) != ir_type_bits(s->type) ||
        !same_dims(s, r))
        return fail(x, "random must be u%d with the operand's dimensions, got %s",
                    ir_type_bits(s->type), sstr(x, r));
    if (!is_array(o))
        return fail(x, "result must be an array, got %s", sstr(x, o));
    return make_array(x, out, o->type, s->rank, s->dims);
}

/* set-dimension-size(operand, size s32[]): the operand, with dimension d
 * now dynamic (bounded by its size). */
static IrStatus infer_set_dimension_size(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = expect_array(x, 0, "operand")) != IR_OK || (st = expect_scalar(x, 1, "size")) != IR_OK)
        return st;
    const IrShape *s = opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    if (!ir_type_is_int(opnd(x, 1)->type))
        return fail(x, "size must be an integer scalar, got %s", sstr(x, opnd(x, 1)));
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= s->rank)
        return fail(x, "dimensions=%s must name one dimension of %s", lstr(x, dl), sstr(x, s));
    if ((st = make_array(x, out, s->type, s->rank, s->dims)) != IR_OK)
        return st;
    out->dynamic = ir_alloc_array(x->a, (size_t)s->rank, sizeof(bool));
    if (!out->dynamic)
        return oom(x);
    for (int32_t i = 0; i < s->rank; i++)
        out->dynamic[i] = (s->dynamic && s->dynamic[i]) || i == dl->v[0];
    return IR_OK;
}

/* dynamic-reshape(operand, size_0, ..., size_{r-1}): one integer scalar
 * per result dimension; the declared shape holds the bounds. */
static IrStatus infer_dynamic_reshape(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    IrStatus st = expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    if (!is_array(o) || x->ins->nopnd != o->rank + 1)
        return fail(x, "needs 1 + %d operands (the operand and a size per result dimension), got %d",
                    (int)o->rank, (int)x->ins->nopnd);
    for (int32_t i = 1; i < x->ins->nopnd; i++)
        if ((st = expect_scalar(x, i, "size")) != IR_OK)
            return st;
    if (o->type != opnd(x, 0)->type)
        return fail(x, "result type %s differs from the operand's %s", ir_type_name(o->type),
                    ir_type_name(opnd(x, 0)->type));
    return copy_shape(x, out, o);
}

/* rng-bit-generator(state): XLA's verifier takes the result as the output
 * alone, or as (new state, output) with the state's shape. */
static IrStatus infer_rng_bit_generator(Ctx *x, IrShape *out)
{
    const IrShape *s = opnd(x, 0), *o = &x->ins->shape;
    if (o->type == IR_TUPLE) {
        if (o->ntuple != 2 || !is_array(&o->tuple[1]))
            return fail(x, "result must be an output array or a (state, output) tuple, got %s", sstr(x, o));
        if (!ir_shape_equal(&o->tuple[0], s))
            return fail(x, "result state %s must equal the operand state %s", sstr(x, &o->tuple[0]),
                        sstr(x, s));
    } else if (!is_array(o)) {
        return fail(x, "result must be an output array or a (state, output) tuple, got %s", sstr(x, o));
    }
    return copy_shape(x, out, o);
}

static IrStatus infer_rng_state(Ctx *x, IrShape *out)
{
    int64_t two = 2;
    return make_array(x, out, IR_U64, 1, &two);
}

/* scan(inputs..., inits...) with num_carries inits: to_apply maps (one
 * slice of each input along dimensions={d}, carries...) to (outputs...,
 * carries...); the result stacks each output along d: (outputs..., carries...).
 * f32[4] scan with init f32[] and add -> (f32[4], f32[]). */
static IrStatus infer_scan(Ctx *x, IrShape *out)
{
    int64_t nc = x->ins->a.num_carries;
    int32_t n = x->ins->nopnd;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (nc < 0 || nc > n)
        return fail(x, "num_carries=%lld is out of range for %d operands", (long long)nc, (int)n);
    int32_t nin = n - (int32_t)nc;
    if (dl->n != 1)
        return fail(x, "needs dimensions={d} with one dimension, got %s", lstr(x, dl));
    int64_t d = dl->v[0], len = -1;
    for (int32_t i = 0; i < nin; i++) {
        const IrShape *s = opnd(x, i);
        IrStatus st = expect_array(x, i, "input");
        if (st != IR_OK)
            return st;
        if (d < 0 || d >= s->rank)
            return fail(x, "dimension %lld is out of range for input %s", (long long)d, sstr(x, s));
        if (len >= 0 && s->dims[d] != len)
            return fail(x, "inputs must have one length along dimension %lld", (long long)d);
        len = s->dims[d];
    }
    const IrComputation *f = callee(x, 0);
    IrStatus st = expect_nparams(x, f, "scan", n);
    if (st != IR_OK)
        return st;
    const IrShape *r = callee_root(x, f);
    if (!r)
        return IR_EINPUT;
    int32_t nr = r->type == IR_TUPLE ? r->ntuple : 1;
    if (nr < nc)
        return fail(x, "to_apply %s returns %s, fewer than num_carries=%lld values", f->name,
                    sstr(x, r), (long long)nc);
    IrShape *parts = ir_alloc_array(x->a, (size_t)(nr > 0 ? nr : 1), sizeof(IrShape));
    if (!parts)
        return oom(x);
    for (int32_t k = 0; k < nr; k++) {
        const IrShape *e = r->type == IR_TUPLE ? &r->tuple[k] : r;
        if (k >= nr - nc) {
            const IrShape *init = opnd(x, nin + (k - (nr - (int32_t)nc)));
            if (!ir_shape_equal(e, init))
                return fail(x, "carry %d of %s is %s but its init is %s", (int)(k - (nr - nc)), f->name,
                            sstr(x, e), sstr(x, init));
            parts[k] = *init;
            continue;
        }
        if (!is_array(e) || d > e->rank)
            return fail(x, "output %d of %s must be an array of rank >= %lld, got %s", (int)k, f->name,
                        (long long)d, sstr(x, e));
        int64_t *dims = scratch(x, e->rank + 1);
        if (!dims)
            return oom(x);
        for (int32_t j = 0, o = 0; j <= e->rank; j++)
            dims[j] = j == d ? (len >= 0 ? len : 0) : e->dims[o++];
        if ((st = make_array(x, &parts[k], e->type, e->rank + 1, dims)) != IR_OK)
            return st;
    }
    return ir_shape_make_tuple(x->a, out, nr, parts) == IR_OK ? IR_OK : oom(x);
}

/* ragged-all-to-all(input, output, input_offsets, send_sizes,
 * output_offsets, recv_sizes): the result is the updated output. */
static IrStatus infer_ragged_all_to_all(Ctx *x, IrShape *out)
{
    IrStatus st;
    for (int32_t i = 0; i < 6; i++)
        if ((st = expect_array(x, i, i < 2 ? "data" : "offsets or sizes")) != IR_OK)
            return st;
    for (int32_t i = 2; i < 6; i++)
        if (!ir_type_is_int(opnd(x, i)->type))
            return fail(x, "operand %d must hold integers, got %s", (int)i, sstr(x, opnd(x, i)));
    if (opnd(x, 0)->type != opnd(x, 1)->type)
        return fail(x, "input %s and output %s must have one element type", sstr(x, opnd(x, 0)),
                    sstr(x, opnd(x, 1)));
    return copy_shape(x, out, opnd(x, 1));
}

/* Ops whose result is their operand's shape (one operand) or the tuple of
 * their operands' shapes: domain, collective-broadcast, shuffle. */
static IrStatus infer_passthrough(Ctx *x, IrShape *out)
{
    if (x->ins->nopnd == 1)
        return copy_shape(x, out, opnd(x, 0));
    return infer_tuple(x, out);
}

/* ------------------------------------------------------------------ */
/* the dispatcher                                                      */
/* ------------------------------------------------------------------ */

static IrStatus infer_other(Ctx *x, IrShape *out)
{
    switch (x->ins->op) {
    case OP_BITCAST_CONVERT: return infer_bitcast_convert(x, out);
    case OP_PARAMETER: case OP_CONSTANT: return infer_declared(x, out);
    case OP_IOTA: return infer_iota(x, out);
    case OP_TUPLE: return infer_tuple(x, out);
    case OP_GET_TUPLE_ELEMENT: return infer_gte(x, out);
    case OP_CALL: return infer_call(x, out);
    case OP_WHILE: return infer_while(x, out);
    case OP_CONDITIONAL: return infer_conditional(x, out);
    case OP_MAP: return infer_map(x, out);
    case OP_PARTITION_ID: case OP_REPLICA_ID: return infer_id(x, out);
    case OP_OPTIMIZATION_BARRIER: return copy_shape(x, out, opnd(x, 0));
    case OP_AFTER_ALL: return infer_after_all(x, out);
    case OP_ADD_DEPENDENCY: return infer_add_dependency(x, out);
    case OP_BROADCAST: return infer_broadcast(x, out);
    case OP_RESHAPE: case OP_BITCAST: return infer_reshape(x, out);
    case OP_TRANSPOSE: return infer_transpose(x, out);
    case OP_SLICE: return infer_slice(x, out);
    case OP_DYNAMIC_SLICE: return infer_dynamic_slice(x, out);
    case OP_DYNAMIC_UPDATE_SLICE: return infer_dynamic_update_slice(x, out);
    case OP_PAD: return infer_pad(x, out);
    case OP_CONCATENATE: return infer_concatenate(x, out);
    case OP_REVERSE: return infer_reverse(x, out);
    case OP_GATHER: return infer_gather(x, out);
    case OP_SCATTER: return infer_scatter(x, out);
    case OP_SORT: return infer_sort(x, out);
    case OP_DOT: return infer_dot(x, out);
    case OP_CONVOLUTION: return infer_convolution(x, out);
    case OP_REDUCE: return infer_reduce(x, out);
    case OP_REDUCE_WINDOW: return infer_reduce_window(x, out);
    case OP_SELECT_AND_SCATTER: return infer_select_and_scatter(x, out);
    case OP_FFT: return infer_fft(x, out);
    case OP_ALL_REDUCE: return infer_all_reduce(x, out);
    case OP_ALL_GATHER: case OP_REDUCE_SCATTER: return infer_gather_scatter_collective(x, out);
    case OP_ALL_TO_ALL: return infer_all_to_all(x, out);
    case OP_COLLECTIVE_PERMUTE: return infer_collective_permute(x, out);
    case OP_CUSTOM_CALL: return infer_custom_call(x, out);
    case OP_INFEED: return infer_infeed(x, out);
    case OP_OUTFEED: return infer_outfeed(x, out);
    case OP_RNG: return infer_rng(x, out);
    case OP_RNG_BIT_GENERATOR: return infer_rng_bit_generator(x, out);
    case OP_GET_DIMENSION_SIZE: return infer_get_dimension_size(x, out);
    case OP_FUSION: return infer_call(x, out);
    case OP_ASYNC_START: return infer_async_start(x, out);
    case OP_ASYNC_UPDATE: case OP_ASYNC_DONE: return infer_async_next(x, out);
    case OP_ALL_REDUCE_START: case OP_COLLECTIVE_REDUCE: return infer_all_reduce(x, out);
    case OP_ALL_GATHER_START: return infer_all_gather_start(x, out);
    case OP_COLLECTIVE_PERMUTE_START: return infer_permute_start(x, out);
    case OP_ALL_REDUCE_DONE: return copy_shape(x, out, opnd(x, 0));
    case OP_ALL_GATHER_DONE: case OP_COLLECTIVE_PERMUTE_DONE: return infer_done_element(x, out, 1);
    case OP_COPY_START: return infer_copy_start(x, out);
    case OP_COPY_DONE: return infer_done_element(x, out, 0);
    case OP_SEND: case OP_RECV: return infer_send_recv(x, out);
    case OP_SEND_DONE: case OP_RECV_DONE: return infer_send_recv_done(x, out);
    case OP_DOMAIN: case OP_COLLECTIVE_BROADCAST: case OP_SHUFFLE: return infer_passthrough(x, out);
    case OP_TOPK: return infer_topk(x, out);
    case OP_CHOLESKY: return infer_cholesky(x, out);
    case OP_TRIANGULAR_SOLVE: return infer_triangular_solve(x, out);
    case OP_BATCH_NORM_TRAINING: case OP_BATCH_NORM_INFERENCE: case OP_BATCH_NORM_GRAD:
        return infer_batch_norm(x, out);
    case OP_RAGGED_DOT: return infer_ragged_dot(x, out);
    case OP_SCALED_DOT: return infer_dot(x, out);
    case OP_STOCHASTIC_CONVERT: return infer_stochastic_convert(x, out);
    case OP_SET_DIMENSION_SIZE: return infer_set_dimension_size(x, out);
    case OP_DYNAMIC_RESHAPE: return infer_dynamic_reshape(x, out);
    case OP_RNG_GET_AND_UPDATE_STATE: return infer_rng_state(x, out);
    case OP_SCAN: return infer_scan(x, out);
    case OP_RAGGED_ALL_TO_ALL: return infer_ragged_all_to_all(x, out);
    default:
        return ir_error(x->d, IR_EINTERNAL, x->m->file, x->m->src, x->ins->pos,
                        "no shape rule for opcode %d", (int)x->ins->op);
    }
}

/* Infer the shape of ins (an instruction of c in m) into *out, whose arrays
 * are allocated in arena a. IR_EINPUT with the reason in d (at ins->pos)
 * when the instruction is malformed, IR_ENOMEM when a allocation fails.
 * Reads m, c and ins only. */
IrStatus ir_infer_shape(const IrModule *m, const IrComputation *c, const IrInstr *ins,
                        IrShape *out, IrArena *a, IrDiag *d)
{
    Ctx x = {m, c, ins, a, d};
    memset(out, 0, sizeof *out);
    if ((unsigned)ins->op >= OP_COUNT)
        return ir_error(d, IR_EINPUT, m->file, m->src, ins->pos, "%s: invalid opcode %d",
                        ins->name ? ins->name : "?", (int)ins->op);
    IrStatus st = check_refs(&x);
    if (st != IR_OK || (st = check_arity(&x)) != IR_OK)
        return st;
    switch (ir_op_kind(ins->op)) {
    case IR_K_UNARY:
        return infer_unary(&x, out);
    case IR_K_BINARY:
        return infer_binary(&x, out);
    case IR_K_TERNARY:
        return ins->op == OP_SELECT ? infer_select(&x, out) : infer_clamp(&x, out);
    default:
        return infer_other(&x, out);
    }
}
