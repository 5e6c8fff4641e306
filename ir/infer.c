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
 *
 * This file holds what every rule uses (the helpers declared in
 * infer_internal.h), the operand and callee counts and the dispatcher
 * ir_infer_shape. The rules live by op family in infer_elementwise.c,
 * infer_data.c, infer_reduce.c, infer_contract.c, infer_collective.c and
 * infer_control.c.
 */
#include "infer_internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* errors and small helpers                                            */
/* ------------------------------------------------------------------ */

/* Record "OPNAME: message" at the instruction's position. */
__attribute__((format(printf, 2, 3)))
IrStatus infer_fail(Ctx *x, const char *fmt, ...)
{
    char f[512];
    const IrAttrs *a = &x->ins->a;
    if (a->x->async_sugar) /* the opcode as written: abs-start */
        snprintf(f, sizeof f, "%s-%s: %s", ir_op_name(a->x->async_wrapped_op),
                 x->ins->op == OP_ASYNC_START ? "start" : x->ins->op == OP_ASYNC_UPDATE ? "update" : "done", fmt);
    else
        snprintf(f, sizeof f, "%s: %s", ir_op_name(x->ins->op), fmt);
    va_list ap;
    va_start(ap, fmt);
    ir_verror(x->d, IR_EINPUT, x->m->file, x->m->src, x->ins->pos, f, ap);
    va_end(ap);
    return IR_EINPUT;
}

IrStatus infer_oom(Ctx *x)
{
    return ir_oom(x->d, NULL);
}

/* Shape text for messages, kept in the arena so callers need not free it. */
const char *infer_sstr(Ctx *x, const IrShape *s)
{
    char *h = ir_shape_str(s, false);
    if (!h)
        return "?";
    char *r = ir_strdup(x->a, h);
    ts_free(h);
    return r ? r : "?";
}

/* "{1,2,3}" for messages. */
const char *infer_lstr(Ctx *x, const IrI64List *l)
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

const IrShape *infer_opnd(Ctx *x, int32_t i)
{
    return &x->c->instr[x->ins->opnd[i]].shape;
}

const char *infer_opnd_name(Ctx *x, int32_t i)
{
    return x->c->instr[x->ins->opnd[i]].name;
}

bool infer_is_array(const IrShape *s)
{
    return ir_type_is_array(s->type);
}

bool infer_is_scalar(const IrShape *s)
{
    return infer_is_array(s) && s->rank == 0;
}

bool infer_same_dims(const IrShape *a, const IrShape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

IrStatus infer_expect_array(Ctx *x, int32_t i, const char *what)
{
    if (!infer_is_array(infer_opnd(x, i)))
        return infer_fail(x, "%s (operand %d, %s) must be an array, got %s", what, (int)i,
                    infer_opnd_name(x, i), infer_sstr(x, infer_opnd(x, i)));
    return IR_OK;
}

IrStatus infer_expect_scalar(Ctx *x, int32_t i, const char *what)
{
    if (!infer_is_scalar(infer_opnd(x, i)))
        return infer_fail(x, "%s (operand %d, %s) must be a scalar, got %s", what, (int)i,
                    infer_opnd_name(x, i), infer_sstr(x, infer_opnd(x, i)));
    return IR_OK;
}

/* Deep copy without layouts. */
IrStatus infer_copy_shape(Ctx *x, IrShape *dst, const IrShape *src)
{
    if (src->type == IR_TUPLE) {
        memset(dst, 0, sizeof *dst);
        dst->type = IR_TUPLE;
        dst->ntuple = src->ntuple;
        if (src->ntuple > 0) {
            dst->tuple = ir_alloc_array(x->a, (size_t)src->ntuple, sizeof(IrShape));
            if (!dst->tuple)
                return infer_oom(x);
            for (int32_t i = 0; i < src->ntuple; i++)
                if (infer_copy_shape(x, &dst->tuple[i], &src->tuple[i]) != IR_OK)
                    return IR_ENOMEM;
        }
        return IR_OK;
    }
    return ir_shape_make(x->a, dst, src->type, src->rank, src->dims) == IR_OK ? IR_OK : infer_oom(x);
}

IrStatus infer_make_array(Ctx *x, IrShape *dst, IrType t, int32_t rank, const int64_t *dims)
{
    return ir_shape_make(x->a, dst, t, rank, dims) == IR_OK ? IR_OK : infer_oom(x);
}

IrStatus infer_make_scalar(Ctx *x, IrShape *dst, IrType t)
{
    return infer_make_array(x, dst, t, 0, NULL);
}

/* A scratch array of n int64 in the arena (n may be 0). */
int64_t *infer_scratch(Ctx *x, int64_t n)
{
    return ir_alloc_array(x->a, (size_t)(n > 0 ? n : 1), sizeof(int64_t));
}

/* Check a list of dimension numbers: each in [0, rank), no repeats, and
 * ascending when `sorted`. Quadratic in the list length, which is bounded by
 * the rank (<= 64), never by the module size. */
IrStatus infer_check_dim_list(Ctx *x, const IrI64List *l, int64_t rank, const char *what,
                        bool sorted)
{
    for (int32_t i = 0; i < l->n; i++) {
        if (l->v[i] < 0 || l->v[i] >= rank)
            return infer_fail(x, "%s=%s: dimension %lld is out of range for rank %lld", what,
                        infer_lstr(x, l), (long long)l->v[i], (long long)rank);
        for (int32_t j = 0; j < i; j++)
            if (l->v[j] == l->v[i])
                return infer_fail(x, "%s=%s: dimension %lld appears twice", what, infer_lstr(x, l),
                            (long long)l->v[i]);
        if (sorted && i > 0 && l->v[i - 1] > l->v[i])
            return infer_fail(x, "%s=%s must be in ascending order", what, infer_lstr(x, l));
    }
    return IR_OK;
}

bool infer_add_ovf(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

bool infer_mul_ovf(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

IrType infer_component_type(IrType t)
{
    return t == IR_C64 ? IR_F32 : t == IR_C128 ? IR_F64 : t;
}

/* ------------------------------------------------------------------ */
/* called computations                                                 */
/* ------------------------------------------------------------------ */

const IrComputation *infer_callee(Ctx *x, int32_t k)
{
    return x->m->comp[x->ins->called[k]];
}

/* The shape of parameter i of `comp`, or NULL (with an error) if absent. */
const IrShape *infer_callee_param(Ctx *x, const IrComputation *comp, int32_t i)
{
    if (i >= comp->nparam || comp->param[i] < 0 || comp->param[i] >= comp->ninstr) {
        infer_fail(x, "called computation %s has no parameter %d", comp->name, (int)i);
        return NULL;
    }
    return &comp->instr[comp->param[i]].shape;
}

const IrShape *infer_callee_root(Ctx *x, const IrComputation *comp)
{
    if (comp->root < 0 || comp->root >= comp->ninstr) {
        infer_fail(x, "called computation %s has no root instruction", comp->name);
        return NULL;
    }
    return &comp->instr[comp->root].shape;
}

IrStatus infer_expect_nparams(Ctx *x, const IrComputation *comp, const char *role, int32_t n)
{
    if (comp->nparam != n)
        return infer_fail(x, "%s computation %s must take %d parameters, it takes %d", role, comp->name,
                    (int)n, (int)comp->nparam);
    return IR_OK;
}

/* Check that `comp` takes scalar parameters of types ptypes[0..np) and
 * returns scalars of types rtypes[0..nr) (a tuple of them when nr > 1).
 * This is the signature of reducers, comparators and map functions. */
IrStatus infer_check_scalar_comp(Ctx *x, const IrComputation *comp, const char *role, int32_t np,
                           const IrType *ptypes, int32_t nr, const IrType *rtypes)
{
    IrStatus st = infer_expect_nparams(x, comp, role, np);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < np; i++) {
        const IrShape *p = infer_callee_param(x, comp, i);
        if (!p)
            return IR_EINPUT;
        if (!infer_is_scalar(p) || p->type != ptypes[i])
            return infer_fail(x, "%s computation %s: parameter %d must be %s[], got %s", role,
                        comp->name, (int)i, ir_type_name(ptypes[i]), infer_sstr(x, p));
    }
    const IrShape *r = infer_callee_root(x, comp);
    if (!r)
        return IR_EINPUT;
    if (nr == 1) {
        if (!infer_is_scalar(r) || r->type != rtypes[0])
            return infer_fail(x, "%s computation %s must return %s[], it returns %s", role, comp->name,
                        ir_type_name(rtypes[0]), infer_sstr(x, r));
        return IR_OK;
    }
    bool ok = r->type == IR_TUPLE && r->ntuple == nr;
    for (int32_t i = 0; ok && i < nr; i++)
        ok = infer_is_scalar(&r->tuple[i]) && r->tuple[i].type == rtypes[i];
    if (!ok)
        return infer_fail(x, "%s computation %s must return a tuple of %d scalars, it returns %s", role,
                    comp->name, (int)nr, infer_sstr(x, r));
    return IR_OK;
}

/* A reducer over n values: (acc_0..acc_{n-1}, x_0..x_{n-1}) -> (acc...),
 * accumulators of the init types, inputs of the operand types. */
/* A float type where the reducer has another float type: XLA compares a
 * reducer's shapes with its inputs' ignoring floating-point precision
 * (VerifyReducerShape: CompatibleIgnoringFpPrecision), so an f16 reduce may
 * start from an f32 init, and the accumulator is the reducer's type. */
IrType infer_reducer_param_type(Ctx *x, const IrComputation *comp, int32_t i, IrType t)
{
    if (!comp || i >= comp->nparam || comp->param[i] < 0 || !ir_type_is_float(t))
        return t;
    const IrShape *p = infer_callee_param(x, comp, i);
    return p && infer_is_scalar(p) && ir_type_is_float(p->type) ? p->type : t;
}

/* `acc` is updated to the reducer's accumulator types (see above): the
 * caller's result types. */
IrStatus infer_check_reducer(Ctx *x, const IrComputation *comp, int32_t n, IrType *acc,
                       const IrType *in)
{
    IrType *pt = ir_alloc_array(x->a, (size_t)(2 * n), sizeof(IrType));
    if (!pt)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++) {
        acc[i] = infer_reducer_param_type(x, comp, i, acc[i]);
        pt[i] = acc[i];
        pt[n + i] = infer_reducer_param_type(x, comp, n + i, in[i]);
    }
    return infer_check_scalar_comp(x, comp, "reduction", 2 * n, pt, n, acc);
}

/* ------------------------------------------------------------------ */
/* windows (convolution, reduce-window, select-and-scatter)            */
/* ------------------------------------------------------------------ */

int64_t infer_dflt1(int64_t v)
{
    return v == 0 ? 1 : v;
}

/* Output size of one windowed dimension (XLA's window arithmetic):
 * base dilated to (n-1)*lhs_dilate+1, padded by lo and hi, window dilated
 * to (size-1)*rhs_dilate+1; then floor((padded - window) / stride) + 1, or
 * 0 when the window does not fit. n=5, size=3, stride=2, pad 1_1 -> 3. */
IrStatus infer_window_dim(Ctx *x, int32_t i, const IrWindowDim *w, int64_t n, int64_t *out)
{
    int64_t stride = infer_dflt1(w->stride), ld = infer_dflt1(w->lhs_dilate), rd = infer_dflt1(w->rhs_dilate);
    if (w->size < 0 || stride < 1 || ld < 1 || rd < 1)
        return infer_fail(x, "window dimension %d needs size >= 0 and stride and dilations >= 1",
                    (int)i);
    int64_t base, win, padded;
    if (infer_mul_ovf(n > 0 ? n - 1 : 0, ld, &base) || infer_add_ovf(base, n > 0 ? 1 : 0, &base) ||
        infer_add_ovf(base, w->pad_lo, &padded) || infer_add_ovf(padded, w->pad_hi, &padded) ||
        infer_mul_ovf(w->size > 0 ? w->size - 1 : 0, rd, &win) || infer_add_ovf(win, w->size > 0, &win))
        return infer_fail(x, "window dimension %d overflows", (int)i);
    *out = (win > padded) ? 0 : (padded - win) / stride + 1;
    return IR_OK;
}

/* Apply a whole window (one entry per dimension of `s`). */
IrStatus infer_window_shape(Ctx *x, const IrShape *s, int64_t **dims)
{
    const IrWindow *w = &x->ins->a.x->window;
    if (w->rank != s->rank)
        return infer_fail(x, "window has %d dimensions but the operand %s has rank %d", (int)w->rank,
                    infer_sstr(x, s), (int)s->rank);
    int64_t *v = infer_scratch(x, s->rank);
    if (!v)
        return infer_oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        IrStatus st = infer_window_dim(x, i, &w->dim[i], s->dims[i], &v[i]);
        if (st != IR_OK)
            return st;
    }
    *dims = v;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* the tuples -start ops return (async, collectives, copy, send/recv)  */
/* ------------------------------------------------------------------ */

/* The declared shape, a tuple of at least n elements. */
IrStatus infer_expect_tuple_result(Ctx *x, int32_t n, const char *form)
{
    const IrShape *o = &x->ins->shape;
    if (o->type != IR_TUPLE || o->ntuple < n)
        return infer_fail(x, "result must be a tuple %s, got %s", form, infer_sstr(x, o));
    return IR_OK;
}

/* Element k of the declared tuple has operand i's type and dimensions
 * (a memory space or layout may differ). */
IrStatus infer_expect_like_operand(Ctx *x, int32_t k, int32_t i)
{
    const IrShape *e = &x->ins->shape.tuple[k], *s = infer_opnd(x, i);
    if (!ir_shape_equal(e, s))
        return infer_fail(x, "element %d of the result is %s but operand %d is %s", (int)k, infer_sstr(x, e),
                    (int)i, infer_sstr(x, s));
    return IR_OK;
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
            return infer_fail(x, "expects %d operand%s, got %d", ar, ar == 1 ? "" : "s", (int)n);
        return IR_OK;
    }
    int min = ir_op_min_arity(op);
    if (n < min)
        return infer_fail(x, "expects at least %d operand%s, got %d", min, min == 1 ? "" : "s", (int)n);
    if ((op == OP_REDUCE || op == OP_REDUCE_WINDOW) && n % 2 != 0)
        return infer_fail(x, "expects an even number of operands (inputs then init values), got %d",
                    (int)n);
    if (op == OP_SCATTER && n % 2 != 1)
        return infer_fail(x, "expects 2N+1 operands (N inputs, indices, N updates), got %d", (int)n);
    return IR_OK;
}

static IrStatus check_refs(Ctx *x)
{
    const IrInstr *ins = x->ins;
    for (int32_t i = 0; i < ins->nopnd; i++)
        if (ins->opnd[i] < 0 || ins->opnd[i] >= x->c->ninstr)
            return infer_fail(x, "operand %d refers to instruction index %d, out of range", (int)i,
                        (int)ins->opnd[i]);
    for (int32_t k = 0; k < ins->ncalled; k++)
        if (ins->called[k] < 0 || ins->called[k] >= x->m->ncomp)
            return infer_fail(x, "called computation %d has index %d, out of range", (int)k,
                        (int)ins->called[k]);
    int want = ir_op_ncalled(ins->op);
    if (want >= 0 && ins->ncalled != want)
        return infer_fail(x, "expects %d called computation%s, got %d", want, want == 1 ? "" : "s",
                    (int)ins->ncalled);
    return IR_OK;
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
    case OP_OPTIMIZATION_BARRIER: return infer_copy_shape(x, out, infer_opnd(x, 0));
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
    case OP_ALL_REDUCE_DONE: return infer_copy_shape(x, out, infer_opnd(x, 0));
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
