/*
 * k_reduce.c: reduce, reduce-window and select-and-scatter.
 *
 * Each op has a general path that calls the HLO computation (reducer,
 * select, scatter) once per element through dev_call, with scalar values as
 * arguments, exactly in XLA's evaluator's order, and a fast path for the
 * common computations, recognised by ir_simple_reducer (add, multiply,
 * maximum, minimum, and, or, xor over two scalar parameters) or, for
 * select, a single compare of the two parameters. A reducer that only
 * compares and picks (ir_select_reducer: argmax, argmin, and the
 * partitioner's lifted form of them) is a table looked up per element
 * (reduce_select.c); one of a few exact scalar ops over 64 outputs or
 * more runs over blocks of outputs (reduce_columns.c).
 *
 * Fast paths accumulate in a 64-bit "domain" picked from the element type
 * (the reducer algebra of reducer.c, shared with the collectives):
 *   floats (f16, bf16, f32, f64) -> double, rounded once at the end;
 *   signed ints -> int64, unsigned -> uint64 (add and multiply wrap in
 *   64 bits; truncating at the end gives the narrow type's wrapped result);
 *   pred -> 0/1 with add = or, multiply = and, max = or, min = and.
 * maximum/minimum propagate NaN (a NaN operand gives NaN), as XLA does.
 * Complex types and mixed-type reducers take the general path.
 *
 * Reduction order (fast and general paths alike): every output element
 * starts from its init value and combines the input elements it reduces in
 * increasing row-major order of the input; except that the fast path folds
 * a reduced innermost run of f32 or f64 (a row) in 8 interleaved partial
 * results (reducer.c's dev_red_fold_lanes, as a fused row group does), so
 * a float sum's last bits may differ from the sequential fold's. Windows skip padding and
 * base-dilation holes (the init value is applied once, not per padded
 * position), which is what XLA's evaluator and CPU backend do; with an
 * identity init this equals "padding with the init value".
 */
#include "device.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Small shared helpers                                                */
/* ------------------------------------------------------------------ */

static bool is_scalar_value(const DevValue *v)
{
    return dev_value_is_array(v) && v->shape.rank == 0;
}

/* Shape of result leaf i (the instruction's shape when not a tuple). */
static const IrShape *result_leaf(const DevKernelArgs *k, int32_t i)
{
    const IrShape *s = &k->ins->shape;
    return s->type == IR_TUPLE ? &s->tuple[i] : s;
}

/* Result arrays for n leaves (uninitialised) into a new array *pres; false
 * on OOM, nothing kept. */
static bool new_results(const DevKernelArgs *k, int32_t n, DevValue ***pres)
{
    DevValue **res = *pres = ts_calloc((size_t)n, sizeof *res);
    if (!res)
        return false;
    for (int32_t i = 0; i < n; i++)
        if (!(res[i] = dev_value_new_uninit(result_leaf(k, i)))) {
            for (int32_t j = 0; j < i; j++)
                dev_value_unref(res[j]);
            ts_free(res);
            *pres = NULL;
            return false;
        }
    return true;
}

static void drop_results(int32_t n, DevValue **res)
{
    for (int32_t i = 0; i < n; i++)
        dev_value_unref(res[i]);
    ts_free(res);
}

/* *out = the single result, or a tuple of the n results (references are
 * consumed either way). */
static IrStatus finish_results(const DevKernelArgs *k, int32_t n, DevValue **res, DevValue **out)
{
    if (k->ins->shape.type != IR_TUPLE) {
        *out = res[0];
        ts_free(res);
        return IR_OK;
    }
    *out = dev_value_tuple(&k->ins->shape, n, res);
    ts_free(res);
    return *out ? IR_OK : dev_kernel_oom(k, NULL);
}

/* Is the instruction's shape n arrays (a tuple of n when tuple)? */
static bool result_has_leaves(const DevKernelArgs *k, int32_t n)
{
    const IrShape *s = &k->ins->shape;
    if (s->type != IR_TUPLE)
        return n == 1 && ir_type_is_array(s->type);
    if (s->ntuple != n)
        return false;
    for (int32_t i = 0; i < n; i++)
        if (s->tuple[i].type == IR_TUPLE || !ir_type_is_array(s->tuple[i].type))
            return false;
    return true;
}

/* Element i of a value's data, as a pointer. */
static const uint8_t *elem_ptr(const DevValue *v, int64_t i)
{
    return v->data + (size_t)i * ir_type_size(v->shape.type);
}

/* ------------------------------------------------------------------ */
/* Scalar slots for calling computations element by element            */
/* ------------------------------------------------------------------ */

/* n scalar values used as dev_call arguments; their bytes are rewritten
 * before each call (the call borrows them). `tmp` stages a call's results
 * before they are written back, since a result may alias an argument. */
typedef struct Slots {
    int32_t n;
    DevValue **v;
    uint8_t *tmp;
} Slots;

static void slots_free(Slots *s)
{
    if (s->v)
        for (int32_t i = 0; i < s->n; i++)
            dev_value_unref(s->v[i]);
    ts_free(s->v);
    ts_free(s->tmp);
    memset(s, 0, sizeof *s);
}

/* n empty slots; false on OOM. Fill each with slot_make. */
static bool slots_alloc(Slots *s, int32_t n)
{
    memset(s, 0, sizeof *s);
    size_t m = (size_t)(n > 0 ? n : 1);
    s->v = ts_calloc(m, sizeof *s->v);
    s->tmp = ts_malloc(m * 16);
    if (!s->v || !s->tmp) {
        slots_free(s);
        return false;
    }
    s->n = n;
    return true;
}

static bool slot_make(Slots *s, int32_t i, IrType t)
{
    IrShape sh = {.type = t};
    return (s->v[i] = dev_value_new(&sh)) != NULL;
}

/* Slots for a reducer over n inputs: (accumulators..., inputs...), the
 * accumulators typed like the inits. False on OOM (nothing kept). */
static bool slots_for_reducer(Slots *s, const DevKernelArgs *k, int32_t n)
{
    if (!slots_alloc(s, 2 * n))
        return false;
    for (int32_t i = 0; i < n; i++)
        if (!slot_make(s, i, k->opnd[n + i]->shape.type) ||
            !slot_make(s, n + i, k->opnd[i]->shape.type)) {
            slots_free(s);
            return false;
        }
    return true;
}

static void slot_set(Slots *s, int32_t i, const void *src)
{
    memcpy(s->v[i]->data, src, ir_type_size(s->v[i]->shape.type));
}

/* Call computation `comp` on args; copy the result's leaves into the first
 * `nres` slots of `dst` (types must match). */
static IrStatus call_into(const DevKernelArgs *k, int32_t comp, int32_t nargs, DevValue **args,
                          Slots *dst, int32_t nres)
{
    DevValue *r = NULL;
    IrStatus st = dev_call(k, comp, nargs, args, &r);
    if (st != IR_OK)
        return st;
    bool ok = r != NULL;
    for (int32_t i = 0; ok && i < nres; i++) {
        DevValue *leaf = nres == 1 && r->shape.type != IR_TUPLE ? r
                         : r->shape.type == IR_TUPLE && r->nelems == nres ? r->elems[i] : NULL;
        ok = leaf && is_scalar_value(leaf) && leaf->shape.type == dst->v[i]->shape.type;
        if (ok)
            memcpy(dst->tmp + 16 * i, leaf->data, ir_type_size(leaf->shape.type));
    }
    dev_value_unref(r);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "%s: computation %s returns the wrong shape",
                                ir_op_name(k->ins->op), k->m->comp[comp]->name);
    for (int32_t i = 0; i < nres; i++)
        slot_set(dst, i, dst->tmp + 16 * i);
    return IR_OK;
}

/* A scalar program for the reducer when it qualifies and returns nres
 * results (reducer_scalar.c); p->c stays NULL otherwise. */
static void reducer_prog(const DevKernelArgs *k, int32_t comp, int32_t nres, DevScalarProg *p)
{
    if (dev_scalar_prog_init(p, k, comp) &&
        (dev_scalar_prog_results(p) != nres || (nres == 1 && p->c->instr[p->c->root].op == OP_TUPLE)))
        dev_scalar_prog_free(p);
}

/* call_into, through the scalar program p when there is one. */
static IrStatus step_into(const DevKernelArgs *k, DevScalarProg *p, int32_t comp, int32_t nargs, DevValue **args,
                          Slots *dst, int32_t nres)
{
    if (!p->c)
        return call_into(k, comp, nargs, args, dst, nres);
    IrStatus st = dev_scalar_prog_run(p, nargs, (const DevValue *const *)args);
    for (int32_t i = 0; st == IR_OK && i < nres; i++) {
        const DevValue *r = dev_scalar_prog_result(p, i);
        if (r->shape.type != dst->v[i]->shape.type)
            return dev_kernel_error(k, IR_EINPUT, "%s: computation %s returns the wrong shape",
                                    ir_op_name(k->ins->op), k->m->comp[comp]->name);
        slot_set(dst, i, r->data); /* the program's bytes, not an argument's */
    }
    return st;
}

/* Call a computation returning one pred scalar. */
static IrStatus call_pred(const DevKernelArgs *k, int32_t comp, int32_t nargs, DevValue **args,
                          bool *res)
{
    DevValue *r = NULL;
    IrStatus st = dev_call(k, comp, nargs, args, &r);
    if (st != IR_OK)
        return st;
    bool ok = r && is_scalar_value(r) && r->shape.type == IR_PRED;
    if (ok)
        *res = r->data[0] != 0;
    dev_value_unref(r);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "%s: computation %s must return pred[]",
                                ir_op_name(k->ins->op), k->m->comp[comp]->name);
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* reduce                                                              */
/* ------------------------------------------------------------------ */

/* The reduced-dims mask of a reduce; false if `dimensions` is invalid. */
static bool reduce_mask(const IrShape *in, const IrI64List *dims, bool *red)
{
    for (int32_t d = 0; d < in->rank; d++)
        red[d] = false;
    for (int32_t i = 0; i < dims->n; i++) {
        int64_t d = dims->v[i];
        if (d < 0 || d >= in->rank || red[d])
            return false;
        red[d] = true;
    }
    return true;
}

/* Check operands and result shapes of a reduce with n inputs. */
static IrStatus reduce_check(const DevKernelArgs *k, int32_t n, const bool *red)
{
    const IrShape *in = &k->opnd[0]->shape;
    for (int32_t i = 0; i < n; i++) {
        const DevValue *x = k->opnd[i], *init = k->opnd[n + i];
        if (!dev_value_is_array(x) || x->shape.rank != in->rank ||
            !ir_dims_equal(x->shape.dims, in->dims, in->rank) ||
            !is_scalar_value(init) || init->shape.type != result_leaf(k, i)->type)
            return dev_kernel_error(k, IR_EINPUT, "reduce: operand %d does not fit", (int)i);
        const IrShape *rs = result_leaf(k, i);
        int32_t r = 0;
        for (int32_t d = 0; d < in->rank; d++)
            if (!red[d] && (r >= rs->rank || rs->dims[r++] != in->dims[d]))
                return dev_kernel_error(k, IR_EINPUT, "reduce: result shape does not match");
        if (r != rs->rank)
            return dev_kernel_error(k, IR_EINPUT, "reduce: result shape does not match");
    }
    return IR_OK;
}

/* The fast path: one input, a simple reducer. Walks the input once in
 * row-major order; dims of size 1 are dropped and neighbouring dims of the
 * same kind (kept or reduced) merged, so the inner loop is as long as
 * possible. Example: f32[4,5,6] reducing {1,2} is [4 kept][30 reduced]:
 * four runs of 30 folded into one accumulator each. With the kept dims
 * innermost the rows of the reduced dim before them are column folds:
 * f32[16,32,32,32] reducing {0,1,2} (batch norm's sums over NHWC) is
 * [16384 reduced][32 kept], 16384 rows of 32 added into the same 32
 * accumulators by dev_red_fold_cols, each still in its input order. */
static IrStatus reduce_fast(const DevKernelArgs *k, DevRedDom d, IrOpcode op, const bool *red,
                            DevValue *res)
{
    const DevValue *x = k->opnd[0];
    const IrShape *in = &x->shape;
    int64_t nout = ir_shape_elements(&res->shape), nin = ir_shape_elements(in);
    DevAcc *acc = ts_malloc((size_t)(nout > 0 ? nout : 1) * sizeof *acc);
    if (!acc)
        return dev_kernel_oom(k, NULL);
    DevAcc init = dev_acc_load(d, k->opnd[1]->shape.type, k->opnd[1]->data, 0);
    for (int64_t i = 0; i < nout; i++)
        acc[i] = init;
    /* Merged dims: size, reduced?, output stride. */
    int64_t md[IR_MAX_RANK], ostr[IR_MAX_RANK];
    bool mr[IR_MAX_RANK];
    int32_t nm = 0;
    for (int32_t i = 0; i < in->rank; i++) {
        if (in->dims[i] == 1)
            continue;
        if (nm > 0 && mr[nm - 1] == red[i])
            md[nm - 1] *= in->dims[i];
        else
            md[nm] = in->dims[i], mr[nm++] = red[i];
    }
    for (int32_t i = nm - 1, s = 1; i >= 0; i--) {
        ostr[i] = mr[i] ? 0 : s;
        if (!mr[i])
            s *= md[i];
    }
    int64_t inner = nm > 0 ? md[nm - 1] : 1, istr = nm > 0 ? ostr[nm - 1] : 0;
    /* Kept dims innermost (then the merged dim before them is reduced):
     * its rows fold into the same accumulators, a block at a time. */
    int64_t rows = nm >= 2 && istr == 1 ? md[nm - 2] : 1;
    int32_t outer = rows > 1 ? nm - 3 : nm - 2;
    int64_t idx[IR_MAX_RANK] = {0}, ooff = 0;
    DevAcc buf[256];
    for (int64_t off = 0; nin > 0 && off < nin; off += inner * rows) {
        if (rows > 1)
            dev_red_fold_cols(d, op, in->type, x->data, off, rows, inner, acc + ooff);
        /* A reduced innermost run of f32 or f64 (a row: softmax's sums)
         * folds in lanes, not through one accumulator's chain of adds. */
        bool lanes = rows == 1 && istr == 0 && d == DEV_RED_F &&
                     dev_red_fold_lanes(op, in->type, x->data, off, inner, &acc[ooff].f);
        for (int64_t j = 0; rows == 1 && !lanes && j < inner; j += 256) {
            int64_t len = inner - j < 256 ? inner - j : 256;
            dev_red_load_run(d, in->type, x->data, off + j, len, buf);
            dev_red_fold_run(d, op, acc + ooff + j * istr, istr, buf, len);
        }
        for (int32_t i = outer; i >= 0; i--) {
            ooff += ostr[i];
            if (++idx[i] < md[i])
                break;
            ooff -= md[i] * ostr[i];
            idx[i] = 0;
        }
    }
    dev_acc_store_run(d, res->shape.type, res->data, acc, nout);
    ts_free(acc);
    return IR_OK;
}

/* An odometer over an index space with strides: walks offsets in
 * row-major order of `dims`. */
typedef struct Odo {
    int32_t n;
    int64_t dims[IR_MAX_RANK], stride[IR_MAX_RANK], idx[IR_MAX_RANK];
    int64_t off;
} Odo;

static void odo_reset(Odo *o)
{
    memset(o->idx, 0, sizeof o->idx);
    o->off = 0;
}

/* Step to the next index; false after the last one. */
static bool odo_next(Odo *o)
{
    for (int32_t i = o->n - 1; i >= 0; i--) {
        o->off += o->stride[i];
        if (++o->idx[i] < o->dims[i])
            return true;
        o->off -= o->dims[i] * o->stride[i];
        o->idx[i] = 0;
    }
    return false;
}

static int64_t odo_count(const Odo *o)
{
    int64_t n = 1;
    for (int32_t i = 0; i < o->n; i++)
        n *= o->dims[i];
    return n;
}

/* The input's dims as two odometers: those kept (the output's, row-major)
 * and those reduced (red), each with the input's strides. */
static void split_dims(const IrShape *in, const bool *red, Odo *kept, Odo *rd)
{
    int64_t st[IR_MAX_RANK];
    ir_shape_strides(in, st);
    *kept = (Odo){0};
    *rd = (Odo){0};
    for (int32_t d = 0; d < in->rank; d++) {
        Odo *o = red[d] ? rd : kept;
        o->dims[o->n] = in->dims[d];
        o->stride[o->n++] = st[d];
    }
}

/* The general path: for each output element (row-major), start from the
 * inits and call the reducer on (accumulators..., inputs...) for each
 * reduced element in row-major order. */
static IrStatus reduce_general(const DevKernelArgs *k, int32_t n, const bool *red, DevValue **res)
{
    Odo kept, rd;
    split_dims(&k->opnd[0]->shape, red, &kept, &rd);
    Slots s;
    if (!slots_for_reducer(&s, k, n))
        return dev_kernel_oom(k, NULL);
    DevScalarProg prog;
    reducer_prog(k, k->ins->called[0], n, &prog);
    IrStatus st2 = IR_OK;
    int64_t nout = odo_count(&kept), nred = odo_count(&rd);
    odo_reset(&kept);
    for (int64_t o = 0; o < nout && st2 == IR_OK; o++, odo_next(&kept)) {
        for (int32_t i = 0; i < n; i++)
            slot_set(&s, i, k->opnd[n + i]->data);
        odo_reset(&rd);
        for (int64_t r = 0; r < nred && st2 == IR_OK; r++, odo_next(&rd)) {
            for (int32_t i = 0; i < n; i++)
                slot_set(&s, n + i, elem_ptr(k->opnd[i], kept.off + rd.off));
            st2 = step_into(k, &prog, k->ins->called[0], 2 * n, s.v, &s, n);
        }
        for (int32_t i = 0; i < n && st2 == IR_OK; i++)
            memcpy(res[i]->data + (size_t)o * ir_type_size(res[i]->shape.type), s.v[i]->data,
                   ir_type_size(res[i]->shape.type));
    }
    dev_scalar_prog_free(&prog);
    slots_free(&s);
    return st2;
}

/* A reducer that compares and picks (reduce_select.c: argmax, argmin):
 * the general path's walk, a table look-up per element instead of a call. */
static void reduce_select(const DevKernelArgs *k, const DevSelectFold *f, const bool *red, DevValue **res)
{
    Odo kept, rd;
    split_dims(&k->opnd[0]->shape, red, &kept, &rd);
    int64_t nout = odo_count(&kept), nred = odo_count(&rd);
    const DevValue *const *x = (const DevValue *const *)k->opnd;
    odo_reset(&kept);
    for (int64_t o = 0; o < nout; o++, odo_next(&kept)) {
        DevSelectAcc acc;
        dev_select_acc_init(f, k, &acc);
        odo_reset(&rd);
        for (int64_t r = 0; r < nred; r++, odo_next(&rd))
            dev_select_fold(f, &acc, x, kept.off + rd.off);
        dev_select_acc_store(f, &acc, res, o);
    }
}

/*
 * reduce: N inputs of equal dims and N scalar inits; `dimensions` lists the
 * reduced dims; the result keeps the others in order (a tuple when N > 1).
 * Example: reduce(f32[2,3] {{1,2,3},{4,5,6}}, 0), dimensions={1}, add
 * gives f32[2] {6, 15}.
 *
 * On success *out is a new value. Fails with IR_EINPUT on mismatched
 * operands, IR_ENOMEM, or whatever the reducer computation reports.
 */
static IrStatus reduce_impl(const DevKernelArgs *k, DevValue **out)
{
    int32_t n = k->nopnd / 2;
    if (k->nopnd < 2 || k->nopnd % 2 || k->ins->ncalled < 1 || !result_has_leaves(k, n) ||
        !dev_value_is_array(k->opnd[0]))
        return dev_kernel_error(k, IR_EINPUT, "reduce: bad operands or result shape");
    bool red[IR_MAX_RANK];
    if (!reduce_mask(&k->opnd[0]->shape, &k->ins->a.dimensions, red))
        return dev_kernel_error(k, IR_EINPUT, "reduce: bad dimensions");
    IrStatus st = reduce_check(k, n, red);
    if (st != IR_OK)
        return st;
    DevValue **res;
    if (!new_results(k, n, &res))
        return dev_kernel_oom(k, NULL);
    IrOpcode op = ir_simple_reducer(k->m, k->ins->called[0]);
    DevRedDom d;
    IrType t = k->opnd[0]->shape.type;
    DevSelectFold sf;
    if (n == 1 && op != OP_COUNT && t == res[0]->shape.type && dev_red_dom(t, &d) && dev_red_has(d, op))
        st = reduce_fast(k, d, op, red, res[0]);
    else if (dev_select_fold_init(k, n, &sf))
        reduce_select(k, &sf, red, res);
    else if (dev_reduce_columns_fit(k, n))
        st = dev_reduce_columns(k, n, red, res);
    else
        st = reduce_general(k, n, red, res);
    if (st != IR_OK) {
        drop_results(n, res);
        return st;
    }
    return finish_results(k, n, res, out);
}

/* ------------------------------------------------------------------ */
/* Windows                                                             */
/* ------------------------------------------------------------------ */

/* Per-dim tables of input coordinates: tab[d][o * wsz + w] is the input
 * coordinate that output position o reads at window position w, or -1 for
 * padding and base-dilation holes:
 *   u = o*stride - pad_lo + w*window_dilation; coordinate = u / base_dilation
 * Example: size 3, stride 2, pad 1_1, input 5: o=0 reads -1, 0, 1;
 * o=1 reads 1, 2, 3; o=2 reads 3, 4, -1. */
typedef struct WinTab {
    int32_t rank;
    int64_t wsz[IR_MAX_RANK], osz[IR_MAX_RANK];
    int64_t *tab[IR_MAX_RANK];
} WinTab;

static void wintab_free(WinTab *t)
{
    for (int32_t d = 0; d < t->rank; d++)
        ts_free(t->tab[d]);
}

/* Build the tables for input dims `in`, output dims `osz`. IR_EINPUT for a
 * bad window, IR_ENOMEM. */
static IrStatus wintab_new(const DevKernelArgs *k, WinTab *t, const IrShape *in, const int64_t *osz)
{
    const IrWindow *w = &k->ins->a.x->window;
    memset(t, 0, sizeof *t);
    if (w->rank != in->rank)
        return dev_kernel_error(k, IR_EINPUT, "%s: window rank %d does not match operand rank %d",
                                ir_op_name(k->ins->op), (int)w->rank, (int)in->rank);
    for (int32_t d = 0; d < in->rank; d++) {
        const IrWindowDim *wd = &w->dim[d];
        if (wd->size < 0 || wd->stride < 1 || wd->lhs_dilate < 1 || wd->rhs_dilate < 1)
            return dev_kernel_error(k, IR_EINPUT, "%s: bad window in dimension %d",
                                    ir_op_name(k->ins->op), (int)d);
        t->wsz[d] = wd->size;
        t->osz[d] = osz[d];
    }
    t->rank = in->rank;
    for (int32_t d = 0; d < in->rank; d++) {
        const IrWindowDim *wd = &w->dim[d];
        int64_t n;
        if (__builtin_mul_overflow(t->wsz[d], t->osz[d], &n) || (uint64_t)n > SIZE_MAX / 8 ||
            !(t->tab[d] = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t)))) {
            wintab_free(t);
            return dev_kernel_oom(k, NULL);
        }
        for (int64_t o = 0; o < t->osz[d]; o++)
            for (int64_t j = 0; j < t->wsz[d]; j++) {
                int64_t u = o * wd->stride - wd->pad_lo + j * wd->rhs_dilate, c = -1;
                if (wd->lhs_dilate == 1 || u % wd->lhs_dilate == 0) {
                    u /= wd->lhs_dilate;
                    c = u >= 0 && u < in->dims[d] ? u : -1;
                }
                t->tab[d][o * t->wsz[d] + j] = c;
            }
    }
    return IR_OK;
}

/* Walks the valid input elements of one window. */
typedef struct WinIter {
    const WinTab *t;
    int64_t istr[IR_MAX_RANK];
    int64_t o[IR_MAX_RANK];   /* output position */
    int64_t w[IR_MAX_RANK];   /* window position */
    bool started, done;
} WinIter;

static void winiter_init(WinIter *it, const WinTab *t, const IrShape *in)
{
    memset(it, 0, sizeof *it);
    it->t = t;
    ir_shape_strides(in, it->istr);
}

static void winiter_start(WinIter *it)
{
    memset(it->w, 0, sizeof it->w);
    it->started = false;
    it->done = false;
    for (int32_t d = 0; d < it->t->rank; d++)
        if (it->t->wsz[d] == 0)
            it->done = true;
}

/* Next valid input offset of the window at it->o, in row-major order of the
 * window positions; false when the window is exhausted. */
static bool winiter_next(WinIter *it, int64_t *off)
{
    const WinTab *t = it->t;
    while (!it->done) {
        if (it->started) {
            int32_t d = t->rank - 1;
            for (; d >= 0; d--) {
                if (++it->w[d] < t->wsz[d])
                    break;
                it->w[d] = 0;
            }
            if (d < 0) {
                it->done = true;
                return false;
            }
        }
        it->started = true;
        int64_t sum = 0;
        int32_t d = 0;
        for (; d < t->rank; d++) {
            int64_t c = t->tab[d][it->o[d] * t->wsz[d] + it->w[d]];
            if (c < 0)
                break;
            sum += c * it->istr[d];
        }
        if (d == t->rank) {
            *off = sum;
            return true;
        }
    }
    return false;
}

/* Advance the output position (row-major over t->osz). */
static void winiter_next_output(WinIter *it)
{
    for (int32_t d = it->t->rank - 1; d >= 0; d--) {
        if (++it->o[d] < it->t->osz[d])
            return;
        it->o[d] = 0;
    }
}

/* ------------------------------------------------------------------ */
/* reduce-window                                                       */
/* ------------------------------------------------------------------ */

static IrStatus reduce_window_check(const DevKernelArgs *k, int32_t n)
{
    const IrShape *in = &k->opnd[0]->shape, *r0 = result_leaf(k, 0);
    for (int32_t i = 0; i < n; i++) {
        const DevValue *x = k->opnd[i], *init = k->opnd[n + i];
        const IrShape *rs = result_leaf(k, i);
        if (!dev_value_is_array(x) || x->shape.rank != in->rank ||
            !ir_dims_equal(x->shape.dims, in->dims, in->rank) ||
            !is_scalar_value(init) || init->shape.type != rs->type || rs->rank != in->rank ||
            !ir_dims_equal(rs->dims, r0->dims, in->rank))
            return dev_kernel_error(k, IR_EINPUT, "reduce-window: operand %d does not fit", (int)i);
    }
    return IR_OK;
}

/* Gather the valid elements of one window of x (type t) into buf, in
 * row-major window order: rows[d] is the coordinate row of output position
 * o[d] in dim d (tab[d] + o[d]*wsz[d]). The innermost dim is a typed loop
 * (one switch per window row). Returns the count. */
static int64_t gather_window(const WinIter *it, const int64_t *const *rows, IrType t, DevRedDom d,
                             const uint8_t *x, DevAcc *buf)
{
    const WinTab *tb = it->t;
    int32_t r = tb->rank, last = r - 1;
    int64_t n = 0, w[IR_MAX_RANK] = {0};
    for (int32_t i = 0; i < r; i++)
        if (tb->wsz[i] == 0)
            return 0;
    for (;;) {
        int64_t base = 0;
        bool ok = true;
        for (int32_t i = 0; i < last && ok; i++) {
            int64_t c = rows[i][w[i]];
            ok = c >= 0;
            base += c * it->istr[i];
        }
        if (ok && r == 0) {
            buf[n++] = dev_acc_load(d, t, x, 0);
        } else if (ok) {
            const int64_t *cr = rows[last];
            int64_t wl = tb->wsz[last], sl = it->istr[last];
#define ROW(FIELD, T, EXPR)                                  \
    do {                                                     \
        const T *p = (const T *)x + base;                    \
        for (int64_t j = 0; j < wl; j++)                     \
            if (cr[j] >= 0)                                  \
                buf[n++].FIELD = EXPR(p[cr[j] * sl]);        \
    } while (0)
#define ID(v) (v)
            switch (t) {
            case IR_F32: ROW(f, float, ID); break;
            case IR_F64: ROW(f, double, ID); break;
            case IR_F16: ROW(f, uint16_t, dev_f16_to_f32); break;
            case IR_BF16: ROW(f, uint16_t, dev_bf16_to_f32); break;
            case IR_S32: ROW(s, int32_t, ID); break;
            case IR_S64: ROW(s, int64_t, ID); break;
            case IR_U32: ROW(u, uint32_t, ID); break;
            case IR_U64: ROW(u, uint64_t, ID); break;
            default:
                for (int64_t j = 0; j < wl; j++)
                    if (cr[j] >= 0)
                        buf[n++] = dev_acc_load(d, t, x, base + cr[j] * sl);
            }
#undef ROW
#undef ID
        }
        int32_t i = last - 1;
        for (; i >= 0; i--) {
            if (++w[i] < tb->wsz[i])
                break;
            w[i] = 0;
        }
        if (i < 0)
            return n;
    }
}

/* The fast path: per output, gather the window's valid elements (typed
 * loads), then fold them in order from the init (one tight loop). */
static IrStatus reduce_window_fast(const DevKernelArgs *k, DevRedDom d, IrOpcode op, WinIter *it,
                                   DevValue *res)
{
    const DevValue *x = k->opnd[0];
    const WinTab *tb = it->t;
    /* A window holds at most min(window size, input size) valid elements. */
    int64_t nout = ir_shape_elements(&res->shape), cap = ir_shape_elements(&x->shape), wall = 1;
    for (int32_t i = 0; i < tb->rank && wall <= cap; i++)
        wall = __builtin_mul_overflow(wall, tb->wsz[i], &wall) ? INT64_MAX : wall;
    cap = wall < cap ? wall : cap;
    DevAcc *buf = (uint64_t)cap < SIZE_MAX / sizeof(DevAcc) ? ts_malloc((size_t)(cap > 0 ? cap : 1) * sizeof(DevAcc)) : NULL;
    if (!buf)
        return dev_kernel_oom(k, NULL);
    DevAcc init = dev_acc_load(d, k->opnd[1]->shape.type, k->opnd[1]->data, 0);
    const int64_t *rows[IR_MAX_RANK];
    for (int64_t o = 0; o < nout; o++, winiter_next_output(it)) {
        for (int32_t i = 0; i < tb->rank; i++)
            rows[i] = tb->tab[i] + it->o[i] * tb->wsz[i];
        int64_t n = gather_window(it, rows, x->shape.type, d, x->data, buf);
        dev_acc_store(d, res->shape.type, res->data, o, dev_red_fold_one(d, op, init, buf, n));
    }
    ts_free(buf);
    return IR_OK;
}

/* A reducer that compares and picks (reduce_select.c), per window. */
static void reduce_window_select(const DevKernelArgs *k, const DevSelectFold *f, WinIter *it, DevValue **res)
{
    int64_t nout = ir_shape_elements(&res[0]->shape), off;
    const DevValue *const *x = (const DevValue *const *)k->opnd;
    for (int64_t o = 0; o < nout; o++, winiter_next_output(it)) {
        DevSelectAcc acc;
        dev_select_acc_init(f, k, &acc);
        winiter_start(it);
        while (winiter_next(it, &off))
            dev_select_fold(f, &acc, x, off);
        dev_select_acc_store(f, &acc, res, o);
    }
}

static IrStatus reduce_window_general(const DevKernelArgs *k, int32_t n, WinIter *it,
                                      DevValue **res)
{
    Slots s;
    if (!slots_for_reducer(&s, k, n))
        return dev_kernel_oom(k, NULL);
    DevScalarProg prog;
    reducer_prog(k, k->ins->called[0], n, &prog);
    IrStatus st = IR_OK;
    int64_t nout = ir_shape_elements(&res[0]->shape);
    for (int64_t o = 0; o < nout && st == IR_OK; o++, winiter_next_output(it)) {
        for (int32_t i = 0; i < n; i++)
            slot_set(&s, i, k->opnd[n + i]->data);
        int64_t off;
        winiter_start(it);
        while (st == IR_OK && winiter_next(it, &off)) {
            for (int32_t i = 0; i < n; i++)
                slot_set(&s, n + i, elem_ptr(k->opnd[i], off));
            st = step_into(k, &prog, k->ins->called[0], 2 * n, s.v, &s, n);
        }
        for (int32_t i = 0; i < n && st == IR_OK; i++)
            memcpy(res[i]->data + (size_t)o * ir_type_size(res[i]->shape.type), s.v[i]->data,
                   ir_type_size(res[i]->shape.type));
    }
    dev_scalar_prog_free(&prog);
    slots_free(&s);
    return st;
}

/*
 * reduce-window: N inputs, N scalar inits; for each output position the
 * window (size, stride, padding, base and window dilation per dim) is
 * reduced from the init. Example: f32[4] {1,2,3,4}, window size=2 stride=1
 * pad=0_1, add, init 0 gives f32[4] {3, 5, 7, 4} (the padded position is
 * skipped).
 *
 * On success *out is a new value. Fails with IR_EINPUT on a bad window or
 * mismatched operands, IR_ENOMEM, or what the reducer reports.
 */
static IrStatus reduce_window_impl(const DevKernelArgs *k, DevValue **out)
{
    int32_t n = k->nopnd / 2;
    if (k->nopnd < 2 || k->nopnd % 2 || k->ins->ncalled < 1 || !result_has_leaves(k, n) ||
        !dev_value_is_array(k->opnd[0]))
        return dev_kernel_error(k, IR_EINPUT, "reduce-window: bad operands or result shape");
    IrStatus st = reduce_window_check(k, n);
    if (st != IR_OK)
        return st;
    WinTab t;
    if ((st = wintab_new(k, &t, &k->opnd[0]->shape, result_leaf(k, 0)->dims)) != IR_OK)
        return st;
    DevValue **res;
    if (!new_results(k, n, &res)) {
        wintab_free(&t);
        return dev_kernel_oom(k, NULL);
    }
    WinIter it;
    winiter_init(&it, &t, &k->opnd[0]->shape);
    IrOpcode op = ir_simple_reducer(k->m, k->ins->called[0]);
    DevRedDom d;
    DevSelectFold sf;
    IrType ty = k->opnd[0]->shape.type;
    if (n == 1 && op != OP_COUNT && ty == res[0]->shape.type && dev_red_dom(ty, &d) &&
        dev_red_has(d, op))
        st = reduce_window_fast(k, d, op, &it, res[0]);
    else if (dev_select_fold_init(k, n, &sf))
        reduce_window_select(k, &sf, &it, res);
    else
        st = reduce_window_general(k, n, &it, res);
    wintab_free(&t);
    if (st != IR_OK) {
        drop_results(n, res);
        return st;
    }
    return finish_results(k, n, res, out);
}

/* ------------------------------------------------------------------ */
/* select-and-scatter                                                  */
/* ------------------------------------------------------------------ */


/* A select computation that is one compare of its two parameters. */
typedef struct FastSelect {
    IrCmpDir dir;
    bool swapped;   /* compare(p1, p0) */
    bool total;     /* floats in total order */
    DevRedDom d;
} FastSelect;

static bool fast_select(const IrModule *m, int32_t comp, IrType t, FastSelect *fs)
{
    const IrComputation *c = m->comp[comp];
    if (c->nparam != 2 || c->root < 0 || c->param[0] < 0 || c->param[1] < 0 || !dev_red_dom(t, &fs->d))
        return false;
    const IrInstr *r = &c->instr[c->root];
    if (r->op != OP_COMPARE || r->nopnd != 2)
        return false;
    if (r->opnd[0] == c->param[0] && r->opnd[1] == c->param[1])
        fs->swapped = false;
    else if (r->opnd[0] == c->param[1] && r->opnd[1] == c->param[0])
        fs->swapped = true;
    else
        return false;
    IrCmpType ct = r->a.cmp_type;
    if ((ct == CMPT_SIGNED && fs->d != DEV_RED_S) || (ct == CMPT_UNSIGNED && fs->d == DEV_RED_S))
        return false;
    fs->dir = r->a.direction;
    fs->total = fs->d == DEV_RED_F && ct == CMPT_TOTALORDER;
    return fs->dir != CMP_NONE;
}

static bool cmp_keys(IrCmpDir dir, int c, bool unordered)
{
    if (unordered)
        return dir == CMP_NE;
    switch (dir) {
    case CMP_EQ: return c == 0;
    case CMP_NE: return c != 0;
    case CMP_LT: return c < 0;
    case CMP_LE: return c <= 0;
    case CMP_GT: return c > 0;
    case CMP_GE: return c >= 0;
    default: return false;
    }
}

/* select(operand[a], operand[b]) for a fast select. */
static bool fast_select_eval(const FastSelect *fs, const DevValue *x, int64_t a, int64_t b)
{
    if (fs->swapped) {
        int64_t t = a;
        a = b;
        b = t;
    }
    IrType t = x->shape.type;
    int c;
    bool unordered = false;
    if (fs->total) {
        int64_t ka = dev_total_order_key(t, x->data, a), kb = dev_total_order_key(t, x->data, b);
        c = (ka > kb) - (ka < kb);
    } else if (fs->d == DEV_RED_F) {
        double va = dev_load_f64(t, x->data, a), vb = dev_load_f64(t, x->data, b);
        unordered = isnan(va) || isnan(vb);
        c = (va > vb) - (va < vb);
    } else if (fs->d == DEV_RED_S) {
        int64_t va = dev_load_i64(t, x->data, a), vb = dev_load_i64(t, x->data, b);
        c = (va > vb) - (va < vb);
    } else {
        uint64_t va = dev_load_u64(t, x->data, a), vb = dev_load_u64(t, x->data, b);
        c = (va > vb) - (va < vb);
    }
    return cmp_keys(fs->dir, c, unordered);
}

/* The state of one select-and-scatter run. */
typedef struct SasRun {
    const DevKernelArgs *k;
    const DevValue *x, *src;
    DevValue *res;
    bool fast_sel, fast_scat;
    FastSelect fs;
    IrOpcode scat_op;
    DevRedDom scat_dom;
    Slots sel, scat;    /* general-path argument slots */
} SasRun;

/* Does select prefer the current choice a over candidate b? */
static IrStatus sas_select(SasRun *r, int64_t a, int64_t b, bool *keep)
{
    if (r->fast_sel) {
        *keep = fast_select_eval(&r->fs, r->x, a, b);
        return IR_OK;
    }
    slot_set(&r->sel, 0, elem_ptr(r->x, a));
    slot_set(&r->sel, 1, elem_ptr(r->x, b));
    return call_pred(r->k, r->k->ins->called[0], 2, r->sel.v, keep);
}

/* res[at] = scatter(res[at], source[s]). */
static IrStatus sas_scatter(SasRun *r, int64_t at, int64_t s)
{
    IrType t = r->res->shape.type;
    if (r->fast_scat) {
        DevAcc a = dev_acc_load(r->scat_dom, t, r->res->data, at);
        DevAcc b = dev_acc_load(r->scat_dom, r->src->shape.type, r->src->data, s);
        dev_acc_store(r->scat_dom, t, r->res->data, at, dev_red_combine(r->scat_dom, r->scat_op, a, b));
        return IR_OK;
    }
    slot_set(&r->scat, 0, elem_ptr(r->res, at));
    slot_set(&r->scat, 1, elem_ptr(r->src, s));
    IrStatus st = call_into(r->k, r->k->ins->called[1], 2, r->scat.v, &r->scat, 1);
    if (st == IR_OK)
        memcpy(r->res->data + (size_t)at * ir_type_size(t), r->scat.v[0]->data, ir_type_size(t));
    return st;
}

static IrStatus sas_loop(SasRun *r, WinIter *it)
{
    int64_t nsrc = ir_shape_elements(&r->src->shape);
    for (int64_t s = 0; s < nsrc; s++, winiter_next_output(it)) {
        int64_t sel = -1, off;
        winiter_start(it);
        while (winiter_next(it, &off)) {
            bool keep = false;
            IrStatus st = sel < 0 ? IR_OK : sas_select(r, sel, off, &keep);
            if (st != IR_OK)
                return st;
            if (sel < 0 || !keep)
                sel = off;
        }
        if (sel >= 0) {
            IrStatus st = sas_scatter(r, sel, s);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

/* Set up fast paths or argument slots. */
static IrStatus sas_prepare(SasRun *r)
{
    const DevKernelArgs *k = r->k;
    IrType xt = r->x->shape.type, rt = r->res->shape.type, st = r->src->shape.type;
    r->fast_sel = fast_select(k->m, k->ins->called[0], xt, &r->fs);
    r->scat_op = ir_simple_reducer(k->m, k->ins->called[1]);
    r->fast_scat = r->scat_op != OP_COUNT && rt == st && dev_red_dom(rt, &r->scat_dom) &&
                   dev_red_has(r->scat_dom, r->scat_op);
    if (!r->fast_sel &&
        (!slots_alloc(&r->sel, 2) || !slot_make(&r->sel, 0, xt) || !slot_make(&r->sel, 1, xt)))
        return dev_kernel_oom(k, NULL);
    if (!r->fast_scat &&
        (!slots_alloc(&r->scat, 2) || !slot_make(&r->scat, 0, rt) || !slot_make(&r->scat, 1, st)))
        return dev_kernel_oom(k, NULL);
    return IR_OK;
}

/*
 * select-and-scatter (XLA): operand, source (one element per window) and a
 * scalar init. The result, shaped like operand, starts as init; for each
 * window (row-major over source), `select` picks an element: the first
 * valid position in row-major window order is the initial choice, and each
 * later position replaces it when select(choice, candidate) is false (so a
 * `ge` select keeps the first of equal maxima). Then
 * result[choice] = scatter(result[choice], source[window]). Padding
 * positions are never selected.
 *
 * Example (1-D): operand {1,3,3,2}, window 2 stride 2, source {10,20},
 * select ge, scatter add, init 0: windows {1,3} and {3,2} pick index 1 and
 * index 2, giving {0,10,20,0}.
 *
 * On success *out is a new array. Fails with IR_EINPUT on mismatched
 * shapes or a bad window, IR_ENOMEM, or what the computations report.
 */
IrStatus dev_k_select_and_scatter(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 3 || k->ins->ncalled < 2 || !dev_value_is_array(k->opnd[0]) ||
        !dev_value_is_array(k->opnd[1]) || !is_scalar_value(k->opnd[2]) ||
        k->ins->shape.type != k->opnd[2]->shape.type || k->ins->shape.rank != k->opnd[0]->shape.rank ||
        k->opnd[1]->shape.rank != k->opnd[0]->shape.rank ||
        !ir_dims_equal(k->ins->shape.dims, k->opnd[0]->shape.dims, k->opnd[0]->shape.rank))
        return dev_kernel_error(k, IR_EINPUT, "select-and-scatter: bad operands or result shape");
    SasRun r = {.k = k, .x = k->opnd[0], .src = k->opnd[1]};
    WinTab t;
    IrStatus st = wintab_new(k, &t, &r.x->shape, r.src->shape.dims);
    if (st != IR_OK)
        return st;
    if (!(r.res = dev_value_new_uninit(&k->ins->shape))) {
        wintab_free(&t);
        return dev_kernel_oom(k, NULL);
    }
    size_t esz = ir_type_size(r.res->shape.type);
    int64_t nres = ir_shape_elements(&r.res->shape);
    for (int64_t i = 0; i < nres; i++)
        memcpy(r.res->data + (size_t)i * esz, k->opnd[2]->data, esz);
    WinIter it;
    winiter_init(&it, &t, &r.x->shape);
    if ((st = sas_prepare(&r)) == IR_OK)
        st = sas_loop(&r, &it);
    slots_free(&r.sel);
    slots_free(&r.scat);
    wintab_free(&t);
    if (st != IR_OK) {
        dev_value_unref(r.res);
        return st;
    }
    *out = r.res;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* Mixed precision                                                     */
/* ------------------------------------------------------------------ */

/* XLA compares a reducer with its inputs and init values ignoring
 * floating-point precision (ir/infer.c, reducer_param_type): an f16 reduce
 * may start from an f32 constant(0), a bf16 array may be summed by an f32
 * reducer; the accumulator, and so the result, has the reducer's type.
 * Operand i (inputs 0..n-1, inits n..2n-1) is converted once to the type of
 * the reducer's parameter it feeds (the reducer takes the n accumulators,
 * then the n inputs), so the kernels below see the reducer's types only.
 * Float to float only; NULL where nothing is converted. */
static const IrShape *reducer_param(const DevKernelArgs *k, int32_t n, int32_t i)
{
    if (k->ins->ncalled < 1 || k->ins->called[0] < 0 || k->ins->called[0] >= k->m->ncomp)
        return NULL;
    const IrComputation *c = k->m->comp[k->ins->called[0]];
    int32_t p = i < n ? n + i : i - n;
    if (p >= c->nparam || c->param[p] < 0 || c->param[p] >= c->ninstr)
        return NULL;
    const IrShape *ps = &c->instr[c->param[p]].shape;
    const DevValue *v = k->opnd[i];
    if (!dev_value_is_array(v) || ps->type == IR_TUPLE || ps->rank != 0 || ps->type == v->shape.type ||
        !ir_type_is_float(ps->type) || !ir_type_is_float(v->shape.type))
        return NULL;
    return ps;
}

static IrStatus with_converted_operands(const DevKernelArgs *k,
                                        IrStatus (*impl)(const DevKernelArgs *, DevValue **),
                                        DevValue **out)
{
    int32_t n = k->nopnd / 2;
    if (k->nopnd < 2 || k->nopnd % 2)
        return impl(k, out);
    bool mixed = false;
    for (int32_t i = 0; i < k->nopnd; i++)
        mixed |= reducer_param(k, n, i) != NULL;
    if (!mixed)
        return impl(k, out);
    DevValue **opnd = ts_calloc((size_t)k->nopnd, sizeof *opnd);
    if (!opnd)
        return dev_kernel_oom(k, NULL);
    IrStatus st = IR_OK;
    for (int32_t i = 0; i < k->nopnd && st == IR_OK; i++) {
        const DevValue *v = k->opnd[i];
        const IrShape *ps = reducer_param(k, n, i);
        if (!ps) {
            opnd[i] = dev_value_ref((DevValue *)v);
            continue;
        }
        IrShape conv = v->shape;
        conv.type = ps->type;
        conv.has_layout = false;
        opnd[i] = dev_value_new_uninit(&conv);
        if (!opnd[i]) {
            st = dev_kernel_oom(k, NULL);
            break;
        }
        int64_t ne = dev_value_elements(v);
        for (int64_t e = 0; e < ne; e++)
            dev_store_f64(ps->type, opnd[i]->data, e, dev_load_f64(v->shape.type, v->data, e));
    }
    if (st == IR_OK) {
        DevKernelArgs kk = *k;
        kk.opnd = opnd;
        st = impl(&kk, out);
    }
    for (int32_t i = 0; i < k->nopnd; i++)
        dev_value_unref(opnd[i]);
    ts_free(opnd);
    return st;
}

IrStatus dev_k_reduce(const DevKernelArgs *k, DevValue **out)
{
    return with_converted_operands(k, reduce_impl, out);
}

IrStatus dev_k_reduce_window(const DevKernelArgs *k, DevValue **out)
{
    return with_converted_operands(k, reduce_window_impl, out);
}
