/*
 * infer_reduce.c: shape rules of the ops that apply a called scalar
 * computation over arrays: map, sort (a comparator), reduce, reduce-window,
 * select-and-scatter and scan. The callee signatures are checked with
 * check_scalar_comp and check_reducer (infer.c).
 */
#include "infer_internal.h"

#include <string.h>

/* map: operands of one shape, to_apply takes one scalar of each operand's
 * type and returns a scalar; the result has the operands' dimensions and
 * the scalar's type. */
IrStatus infer_map(Ctx *x, IrShape *out)
{
    const IrInstr *ins = x->ins;
    const IrShape *s0 = infer_opnd(x, 0);
    IrType *pt = ir_alloc_array(x->a, (size_t)ins->nopnd, sizeof(IrType));
    if (!pt)
        return infer_oom(x);
    for (int32_t i = 0; i < ins->nopnd; i++) {
        IrStatus st = infer_expect_array(x, i, "operand");
        if (st != IR_OK)
            return st;
        if (!infer_same_dims(infer_opnd(x, i), s0))
            return infer_fail(x, "operands must have the same dimensions, got %s and %s", infer_sstr(x, s0),
                        infer_sstr(x, infer_opnd(x, i)));
        pt[i] = infer_opnd(x, i)->type;
    }
    const IrI64List *dl = &ins->a.dimensions;
    for (int32_t i = 0; i < dl->n; i++)
        if (dl->n != s0->rank || dl->v[i] != i)
            return infer_fail(x, "dimensions=%s must list every dimension in order", infer_lstr(x, dl));
    const IrComputation *f = infer_callee(x, 0);
    IrStatus st = infer_expect_nparams(x, f, "mapped", ins->nopnd);
    if (st != IR_OK)
        return st;
    const IrShape *r = infer_callee_root(x, f);
    if (!r)
        return IR_EINPUT;
    if (!infer_is_scalar(r))
        return infer_fail(x, "mapped computation %s must return a scalar, it returns %s", f->name,
                    infer_sstr(x, r));
    if ((st = infer_check_scalar_comp(x, f, "mapped", ins->nopnd, pt, 1, &r->type)) != IR_OK)
        return st;
    return infer_make_array(x, out, r->type, s0->rank, s0->dims);
}

/* sort: N operands of one set of dimensions, sorted along dimensions={d};
 * the comparator takes 2N scalars (lhs and rhs of operand i at 2i, 2i+1)
 * and returns pred[]. */
IrStatus infer_sort(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    const IrShape *s0 = infer_opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    IrType *pt = ir_alloc_array(x->a, (size_t)(2 * n), sizeof(IrType));
    if (!pt)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++) {
        IrStatus st = infer_expect_array(x, i, "operand");
        if (st != IR_OK)
            return st;
        if (!infer_same_dims(infer_opnd(x, i), s0))
            return infer_fail(x, "operands must have the same dimensions, got %s and %s", infer_sstr(x, s0),
                        infer_sstr(x, infer_opnd(x, i)));
        pt[2 * i] = pt[2 * i + 1] = infer_opnd(x, i)->type;
    }
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= (s0->rank > 0 ? s0->rank : 1))
        return infer_fail(x, "dimensions=%s must name one dimension of the rank-%d operands",
                    infer_lstr(x, dl), (int)s0->rank);
    IrType pred = IR_PRED;
    IrStatus st = infer_check_scalar_comp(x, infer_callee(x, 0), "comparator", 2 * n, pt, 1, &pred);
    if (st != IR_OK)
        return st;
    if (n == 1)
        return infer_copy_shape(x, out, s0);
    return infer_tuple(x, out);
}

/* The N inputs and N scalar inits of a reduce or reduce-window: inputs of
 * one set of dimensions; their element types into in[], the inits' into
 * acc[] (arena arrays of N). */
static IrStatus reduce_operands(Ctx *x, int32_t n, IrType **acc, IrType **in)
{
    const IrShape *s0 = infer_opnd(x, 0);
    *acc = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    *in = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    if (!*acc || !*in)
        return infer_oom(x);
    IrStatus st;
    for (int32_t i = 0; i < n; i++) {
        if ((st = infer_expect_array(x, i, "input")) != IR_OK ||
            (st = infer_expect_scalar(x, n + i, "init value")) != IR_OK)
            return st;
        if (!infer_same_dims(infer_opnd(x, i), s0))
            return infer_fail(x, "inputs must have the same dimensions, got %s and %s",
                              infer_sstr(x, s0), infer_sstr(x, infer_opnd(x, i)));
        (*in)[i] = infer_opnd(x, i)->type;
        (*acc)[i] = infer_opnd(x, n + i)->type;
    }
    return IR_OK;
}

/* The result of N reductions to `dims`: an array of acc[0] for N = 1,
 * else a tuple of N arrays. */
static IrStatus reduce_result(Ctx *x, IrShape *out, int32_t n, const IrType *acc, int32_t rank,
                              const int64_t *dims)
{
    if (n == 1)
        return infer_make_array(x, out, acc[0], rank, dims);
    IrShape *el = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!el)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++)
        if (infer_make_array(x, &el[i], acc[i], rank, dims) != IR_OK)
            return IR_ENOMEM;
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    out->tuple = el;
    return IR_OK;
}

/* reduce: N inputs (one set of dimensions), N scalar inits; the result
 * drops `dimensions` and has the init types (a tuple when N > 1). */
IrStatus infer_reduce(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd / 2;
    const IrShape *s0 = infer_opnd(x, 0);
    IrType *acc, *in;
    IrStatus st = reduce_operands(x, n, &acc, &in);
    if (st != IR_OK)
        return st;
    const IrI64List *dl = &x->ins->a.dimensions;
    if ((st = infer_check_dim_list(x, dl, s0->rank, "dimensions", false)) != IR_OK)
        return st;
    if ((st = infer_check_reducer(x, infer_callee(x, 0), n, acc, in)) != IR_OK)
        return st;
    int64_t *dims = infer_scratch(x, s0->rank);
    if (!dims)
        return infer_oom(x);
    int32_t k = 0;
    for (int32_t i = 0; i < s0->rank; i++)
        if (!ir_list_has(dl, i))
            dims[k++] = s0->dims[i];
    return reduce_result(x, out, n, acc, k, dims);
}

IrStatus infer_reduce_window(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd / 2;
    const IrShape *s0 = infer_opnd(x, 0);
    IrType *acc, *in;
    IrStatus st = reduce_operands(x, n, &acc, &in);
    if (st != IR_OK)
        return st;
    int64_t *dims;
    if ((st = infer_window_shape(x, s0, &dims)) != IR_OK ||
        (st = infer_check_reducer(x, infer_callee(x, 0), n, acc, in)) != IR_OK)
        return st;
    return reduce_result(x, out, n, acc, s0->rank, dims);
}

/* select-and-scatter: select (T, T) -> pred[], scatter (T, T) -> T; the
 * source has the shape of the windowed operand; the result is the
 * operand's shape. */
IrStatus infer_select_and_scatter(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK ||
        (st = infer_expect_array(x, 1, "source")) != IR_OK ||
        (st = infer_expect_scalar(x, 2, "init value")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *src = infer_opnd(x, 1), *init = infer_opnd(x, 2);
    if (src->type != s->type || init->type != s->type)
        return infer_fail(x, "source %s and init value %s must have the operand's type %s",
                    infer_sstr(x, src), infer_sstr(x, init), ir_type_name(s->type));
    int64_t *dims;
    if ((st = infer_window_shape(x, s, &dims)) != IR_OK)
        return st;
    IrShape want = {.type = s->type, .rank = s->rank, .dims = dims};
    if (!infer_same_dims(src, &want))
        return infer_fail(x, "source %s must have the windowed operand's shape %s", infer_sstr(x, src),
                    infer_sstr(x, &want));
    IrType tt[2] = {s->type, s->type}, pred = IR_PRED;
    if ((st = infer_check_scalar_comp(x, infer_callee(x, 0), "select", 2, tt, 1, &pred)) != IR_OK ||
        (st = infer_check_scalar_comp(x, infer_callee(x, 1), "scatter", 2, tt, 1, &s->type)) != IR_OK)
        return st;
    return infer_copy_shape(x, out, s);
}

/* scan(inputs..., inits...) with num_carries inits: to_apply maps (one
 * slice of each input along dimensions={d}, carries...) to (outputs...,
 * carries...); the result stacks each output along d: (outputs..., carries...).
 * f32[4] scan with init f32[] and add -> (f32[4], f32[]). */
IrStatus infer_scan(Ctx *x, IrShape *out)
{
    int64_t nc = x->ins->a.x->num_carries;
    int32_t n = x->ins->nopnd;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (nc < 0 || nc > n)
        return infer_fail(x, "num_carries=%lld is out of range for %d operands", (long long)nc, (int)n);
    int32_t nin = n - (int32_t)nc;
    if (dl->n != 1)
        return infer_fail(x, "needs dimensions={d} with one dimension, got %s", infer_lstr(x, dl));
    int64_t d = dl->v[0], len = -1;
    for (int32_t i = 0; i < nin; i++) {
        const IrShape *s = infer_opnd(x, i);
        IrStatus st = infer_expect_array(x, i, "input");
        if (st != IR_OK)
            return st;
        if (d < 0 || d >= s->rank)
            return infer_fail(x, "dimension %lld is out of range for input %s", (long long)d, infer_sstr(x, s));
        if (len >= 0 && s->dims[d] != len)
            return infer_fail(x, "inputs must have one length along dimension %lld", (long long)d);
        len = s->dims[d];
    }
    const IrComputation *f = infer_callee(x, 0);
    IrStatus st = infer_expect_nparams(x, f, "scan", n);
    if (st != IR_OK)
        return st;
    const IrShape *r = infer_callee_root(x, f);
    if (!r)
        return IR_EINPUT;
    int32_t nr = r->type == IR_TUPLE ? r->ntuple : 1;
    if (nr < nc)
        return infer_fail(x, "to_apply %s returns %s, fewer than num_carries=%lld values", f->name,
                    infer_sstr(x, r), (long long)nc);
    IrShape *parts = ir_alloc_array(x->a, (size_t)(nr > 0 ? nr : 1), sizeof(IrShape));
    if (!parts)
        return infer_oom(x);
    for (int32_t k = 0; k < nr; k++) {
        const IrShape *e = r->type == IR_TUPLE ? &r->tuple[k] : r;
        if (k >= nr - nc) {
            const IrShape *init = infer_opnd(x, nin + (k - (nr - (int32_t)nc)));
            if (!ir_shape_equal(e, init))
                return infer_fail(x, "carry %d of %s is %s but its init is %s", (int)(k - (nr - nc)), f->name,
                            infer_sstr(x, e), infer_sstr(x, init));
            parts[k] = *init;
            continue;
        }
        if (!infer_is_array(e) || d > e->rank)
            return infer_fail(x, "output %d of %s must be an array of rank >= %lld, got %s", (int)k, f->name,
                        (long long)d, infer_sstr(x, e));
        int64_t *dims = infer_scratch(x, e->rank + 1);
        if (!dims)
            return infer_oom(x);
        for (int32_t j = 0, o = 0; j <= e->rank; j++)
            dims[j] = j == d ? (len >= 0 ? len : 0) : e->dims[o++];
        if ((st = infer_make_array(x, &parts[k], e->type, e->rank + 1, dims)) != IR_OK)
            return st;
    }
    return ir_shape_make_tuple(x->a, out, nr, parts) == IR_OK ? IR_OK : infer_oom(x);
}
