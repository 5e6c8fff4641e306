/*
 * k_sort.c: sort, XLA's variadic sort along one dimension.
 *
 * All operands have the same dims; each "row" along `dimensions={d}` is
 * sorted by the comparator computation (parameters: lhs and rhs of operand
 * 0, lhs and rhs of operand 1, ...; it returns pred[] "lhs before rhs"),
 * and every operand is permuted the same way. The result is one array, or a
 * tuple when there are several operands.
 *
 * The sort is a bottom-up merge sort of a permutation, so it is always
 * stable (is_stable=true or not): on a tie the element that came first
 * stays first. A comparator that is a single `compare` of parameters 0 and
 * 1 with direction LT or GT (either argument order) is evaluated directly
 * on the keys of operand 0 (fast path); any other comparator is called
 * through dev_call for each comparison.
 *
 * Compare types (fast path): for floats, the default and FLOAT are IEEE
 * comparisons (anything compared with NaN is false, so NaNs stay where the
 * merge leaves them); TOTALORDER orders
 * -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN. Integers compare by
 * their own signedness, pred as 0 < 1 (a compare type that reinterprets an
 * integer's signedness takes the general path).
 */
#include "device.h"

#include <math.h>
#include <string.h>

static IrStatus oom(const DevKernelArgs *k)
{
    return dev_kernel_error(k, IR_ENOMEM, "out of memory in sort");
}

/* Equal dims, rank entries each (rank-0 shapes may have NULL dims). */
static bool same_dims(const int64_t *a, const int64_t *b, int32_t rank)
{
    return rank == 0 || memcmp(a, b, (size_t)rank * sizeof *a) == 0;
}

static bool is_array_value(const DevValue *v)
{
    return v && v->shape.type != IR_TUPLE && ir_type_is_array(v->shape.type);
}

/* ------------------------------------------------------------------ */
/* Comparators                                                         */
/* ------------------------------------------------------------------ */

typedef enum KeyKind { KEY_F64, KEY_I64, KEY_U64 } KeyKind;

/* A float's position in IEEE totalOrder as a signed integer: negative
 * values have their magnitude bits flipped so larger magnitudes sort lower.
 * E.g. f32 -0.0 (0x80000000) -> -1, +0.0 -> 0, -1.0 -> -0x3f800001. */
static int64_t total_order_key(IrType t, const void *base, int64_t i)
{
    int64_t v;
    int bits;
    switch (t) {
    case IR_F16: case IR_BF16: v = ((const int16_t *)base)[i]; bits = 16; break;
    case IR_F32: v = ((const int32_t *)base)[i]; bits = 32; break;
    default: v = ((const int64_t *)base)[i]; bits = 64; break;
    }
    int64_t mag = bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    return v < 0 ? v ^ mag : v;
}

/* The state of one sort: operands, the current row, the comparator. */
typedef struct SortRun {
    const DevKernelArgs *k;
    int32_t n;                /* operands */
    int64_t len, stride;      /* row length and element stride along d */
    int64_t base;             /* first element of the current row */
    /* Fast path. */
    bool fast;
    KeyKind kind;
    bool total;               /* floats by total order */
    bool greater;             /* "a before b" is key(a) > key(b) */
    union { double f; int64_t s; uint64_t u; } *key;   /* keys of the current row */
    /* General path. */
    DevValue **slot;          /* 2n scalar arguments */
    IrStatus st;              /* first comparator failure */
} SortRun;

/* Recognise `ROOT compare(p0, p1), direction=LT|GT` (or p1, p0). */
static bool fast_comparator(SortRun *r)
{
    const IrModule *m = r->k->m;
    const IrComputation *c = m->comp[r->k->ins->called[0]];
    IrType t = r->k->opnd[0]->shape.type;
    if (c->nparam != 2 * r->n || c->root < 0 || c->param[0] < 0 || c->param[1] < 0)
        return false;
    const IrInstr *root = &c->instr[c->root];
    if (root->op != OP_COMPARE || root->nopnd != 2 ||
        (root->a.direction != CMP_LT && root->a.direction != CMP_GT))
        return false;
    bool lt = root->a.direction == CMP_LT;
    if (root->opnd[0] == c->param[0] && root->opnd[1] == c->param[1])
        r->greater = !lt;
    else if (root->opnd[0] == c->param[1] && root->opnd[1] == c->param[0])
        r->greater = lt;
    else
        return false;
    IrCmpType ct = root->a.cmp_type;
    r->total = false;
    if (ir_type_is_float(t)) {
        if (ct == CMPT_SIGNED || ct == CMPT_UNSIGNED)
            return false;
        r->total = ct == CMPT_TOTALORDER;
        r->kind = r->total ? KEY_I64 : KEY_F64;
    } else if (ir_type_is_signed_int(t)) {
        /* An explicit type other than SIGNED reinterprets bits: general path. */
        if (ct != CMPT_DEFAULT && ct != CMPT_SIGNED && ct != CMPT_TOTALORDER)
            return false;
        r->kind = KEY_I64;
    } else if (ir_type_is_unsigned_int(t) || t == IR_PRED) {
        if (ct != CMPT_DEFAULT && ct != CMPT_UNSIGNED && ct != CMPT_TOTALORDER)
            return false;
        r->kind = KEY_U64;
    } else {
        return false;
    }
    return true;
}

/* Load the keys of the current row (fast path). */
static void load_keys(SortRun *r)
{
    const DevValue *x = r->k->opnd[0];
    IrType t = x->shape.type;
    for (int64_t j = 0; j < r->len; j++) {
        int64_t i = r->base + j * r->stride;
        if (r->total)
            r->key[j].s = total_order_key(t, x->data, i);
        else if (r->kind == KEY_F64)
            r->key[j].f = dev_load_f64(t, x->data, i);
        else if (r->kind == KEY_I64)
            r->key[j].s = dev_load_i64(t, x->data, i);
        else
            r->key[j].u = dev_load_u64(t, x->data, i);
    }
}

/* Does row element a come strictly before row element b? Records the first
 * comparator failure in r->st (and then answers false). */
static bool before(SortRun *r, int64_t a, int64_t b)
{
    if (r->fast) {
        if (r->greater) {
            int64_t t = a;
            a = b;
            b = t;
        }
        switch (r->kind) {
        case KEY_F64: return r->key[a].f < r->key[b].f;
        case KEY_I64: return r->key[a].s < r->key[b].s;
        case KEY_U64: return r->key[a].u < r->key[b].u;
        }
        return false;
    }
    if (r->st != IR_OK)
        return false;
    for (int32_t i = 0; i < r->n; i++) {
        const DevValue *x = r->k->opnd[i];
        size_t esz = ir_type_size(x->shape.type);
        memcpy(r->slot[2 * i]->data, x->data + (size_t)(r->base + a * r->stride) * esz, esz);
        memcpy(r->slot[2 * i + 1]->data, x->data + (size_t)(r->base + b * r->stride) * esz, esz);
    }
    DevValue *v = NULL;
    r->st = dev_call(r->k, r->k->ins->called[0], 2 * r->n, r->slot, &v);
    bool res = false;
    if (r->st == IR_OK) {
        if (v && v->shape.type == IR_PRED && v->shape.rank == 0)
            res = v->data[0] != 0;
        else
            r->st = dev_kernel_error(r->k, IR_EINPUT, "sort: comparator must return pred[]");
    }
    dev_value_unref(v);
    return res;
}

/* ------------------------------------------------------------------ */
/* Merge sort of a permutation                                         */
/* ------------------------------------------------------------------ */

/* Stable bottom-up merge sort of perm[0..n) (row positions) with `before`;
 * tmp has n entries. On each merge the right run's head goes first only
 * when it is strictly before the left run's head.
 * Example: keys {2, 1, 2', 1'}: width 1 -> {1, 2, 1', 2'}; width 2 ->
 * {1, 1', 2, 2'} (equal keys keep their order). */
static void merge_sort(SortRun *r, int64_t *perm, int64_t *tmp, int64_t n)
{
    int64_t *src = perm, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = before(r, src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != perm)
        memcpy(perm, src, (size_t)n * sizeof *perm);
}

/* ------------------------------------------------------------------ */
/* sort                                                                */
/* ------------------------------------------------------------------ */

static IrStatus sort_check(const DevKernelArgs *k, int32_t n, int64_t *dim)
{
    const IrShape *s0 = &k->opnd[0]->shape, *rs = &k->ins->shape;
    if (k->ins->ncalled < 1 || !k->ins->a.has_dimensions || k->ins->a.dimensions.n != 1 ||
        (rs->type == IR_TUPLE ? rs->ntuple != n : n != 1))
        return dev_kernel_error(k, IR_EINPUT, "sort: bad operands or attributes");
    *dim = k->ins->a.dimensions.v[0];
    if (*dim < 0 || *dim >= s0->rank)
        return dev_kernel_error(k, IR_EINPUT, "sort: dimension out of range");
    for (int32_t i = 0; i < n; i++) {
        const DevValue *x = k->opnd[i];
        const IrShape *ri = rs->type == IR_TUPLE ? &rs->tuple[i] : rs;
        if (!is_array_value(x) || x->shape.rank != s0->rank ||
            !same_dims(x->shape.dims, s0->dims, s0->rank) ||
            !ir_shape_equal(&x->shape, ri))
            return dev_kernel_error(k, IR_EINPUT, "sort: operand %d does not match", (int)i);
    }
    return IR_OK;
}

static IrStatus sort_prepare(SortRun *r)
{
    r->fast = fast_comparator(r);
    if (r->fast) {
        r->key = ts_malloc((size_t)(r->len > 0 ? r->len : 1) * sizeof *r->key);
        return r->key ? IR_OK : oom(r->k);
    }
    if (!(r->slot = ts_calloc((size_t)(2 * r->n), sizeof *r->slot)))
        return oom(r->k);
    for (int32_t i = 0; i < 2 * r->n; i++) {
        IrShape sh = {.type = r->k->opnd[i / 2]->shape.type};
        if (!(r->slot[i] = dev_value_new(&sh)))
            return oom(r->k);
    }
    return IR_OK;
}

static void sort_run_free(SortRun *r)
{
    ts_free(r->key);
    if (r->slot)
        for (int32_t i = 0; i < 2 * r->n; i++)
            dev_value_unref(r->slot[i]);
    ts_free(r->slot);
}

/* Sort every row: rows are the index space without dim d, row-major. */
static IrStatus sort_rows(SortRun *r, int64_t d, DevValue **res)
{
    const IrShape *s = &r->k->opnd[0]->shape;
    int64_t st[IR_MAX_RANK], rows = 1;
    ir_shape_strides(s, st);
    for (int32_t i = 0; i < s->rank; i++)
        if (i != d)
            rows *= s->dims[i];
    int64_t *perm = ts_malloc((size_t)(r->len > 0 ? r->len : 1) * 2 * sizeof *perm);
    if (!perm)
        return oom(r->k);
    int64_t idx[IR_MAX_RANK] = {0};
    for (int64_t row = 0; row < rows && r->len > 0 && r->st == IR_OK; row++) {
        for (int64_t j = 0; j < r->len; j++)
            perm[j] = j;
        if (r->fast)
            load_keys(r);
        merge_sort(r, perm, perm + r->len, r->len);
        for (int32_t i = 0; i < r->n && r->st == IR_OK; i++) {
            const DevValue *x = r->k->opnd[i];
            size_t esz = ir_type_size(x->shape.type);
            for (int64_t j = 0; j < r->len; j++)
                memcpy(res[i]->data + (size_t)(r->base + j * r->stride) * esz,
                       x->data + (size_t)(r->base + perm[j] * r->stride) * esz, esz);
        }
        /* Next row: an odometer over the dims other than d. */
        for (int32_t i = s->rank - 1; i >= 0; i--) {
            if (i == d)
                continue;
            r->base += st[i];
            if (++idx[i] < s->dims[i])
                break;
            r->base -= s->dims[i] * st[i];
            idx[i] = 0;
        }
    }
    ts_free(perm);
    return r->st;
}

/*
 * sort: operands of equal dims, sorted together along dimensions={d} by
 * the comparator (called[0]). Example: keys f32[4] {3, 1, 2, 1} and values
 * s32[4] {10, 20, 30, 40} with compare(p0, p1), direction=LT give
 * ({1, 1, 2, 3}, {20, 40, 30, 10}).
 *
 * On success *out is a new value (a tuple when several operands). Fails
 * with IR_EINPUT on mismatched operands, IR_ENOMEM, or what the comparator
 * reports.
 */
IrStatus dev_k_sort(const DevKernelArgs *k, DevValue **out)
{
    int32_t n = k->nopnd;
    if (n < 1 || !is_array_value(k->opnd[0]))
        return dev_kernel_error(k, IR_EINPUT, "sort: bad operands");
    int64_t d;
    IrStatus st = sort_check(k, n, &d);
    if (st != IR_OK)
        return st;
    int64_t strides[IR_MAX_RANK];
    ir_shape_strides(&k->opnd[0]->shape, strides);
    SortRun r = {.k = k, .n = n, .len = k->opnd[0]->shape.dims[d], .stride = strides[d]};
    DevValue **res = ts_calloc((size_t)n, sizeof *res);
    if (!res)
        return oom(k);
    for (int32_t i = 0; i < n && st == IR_OK; i++)
        if (!(res[i] = dev_value_new_uninit(&k->opnd[i]->shape)))
            st = oom(k);
    if (st == IR_OK && (st = sort_prepare(&r)) == IR_OK)
        st = sort_rows(&r, d, res);
    sort_run_free(&r);
    if (st != IR_OK) {
        for (int32_t i = 0; i < n; i++)
            dev_value_unref(res[i]);
        ts_free(res);
        return st;
    }
    if (k->ins->shape.type != IR_TUPLE) {
        *out = res[0];
    } else if (!(*out = dev_value_tuple(&k->ins->shape, n, res))) {
        ts_free(res);
        return oom(k);
    }
    ts_free(res);
    return IR_OK;
}
