/*
 * k_topk.c: topk, and the custom-call target TopK that XLA's tests use.
 *
 * topk(x), k=K, largest=B gives (values, indices): along the last
 * dimension of x, the K largest elements in descending order (largest=true,
 * XLA's default) or the K smallest ascending, and their positions as s32.
 * Ties keep index order (the smaller index first), as the stable sort XLA's
 * TopkDecomposer expands topk into. Floats compare in XLA's total order
 * (that sort's comparator is TOTALORDER): -NaN < -inf < ... < -0 < +0 <
 * ... < +inf < +NaN, so a NaN is the largest value when positive.
 *
 * The custom-call `(T[..., K], s32[..., K]) custom-call(T[..., N] x),
 * custom_call_target="TopK"` is the same with K read from the result
 * shape; its comparator (called_computations, XLA writes `compare(p0.lhs,
 * p0.rhs), direction=GT, type=TOTALORDER`) says the order: GT/GE the
 * largest, LT/LE the smallest (operands swapped: the other way); none: the
 * largest. Any other comparator (XLA's CPU pipeline writes the total
 * order out in it) is run as sort runs it, on the values and their
 * indices, stably.
 *
 * Each row sorts (key, index) pairs with qsort: the index in the key makes
 * the order total, so qsort's instability cannot show.
 */
#include "device.h"

#include <stdlib.h>
#include <string.h>

typedef struct Item {
    int64_t key;    /* order-preserving: larger key, larger element */
    int64_t idx;
} Item;

/* Total-order key of element i: floats by their (double) bit pattern with
 * the negatives' magnitude bits flipped, so that signed integer order is
 * the total order; unsigned integers shifted into the signed range. */
static int64_t key_of(IrType t, const void *base, int64_t i)
{
    if (ir_type_is_float(t)) {
        double d = dev_load_f64(t, base, i);
        int64_t s;
        memcpy(&s, &d, sizeof s);
        return s ^ (int64_t)((uint64_t)(s >> 63) >> 1);
    }
    if (ir_type_is_unsigned_int(t))
        return (int64_t)(dev_load_u64(t, base, i) ^ (UINT64_C(1) << 63));
    return dev_load_i64(t, base, i);
}

static int cmp_desc(const void *pa, const void *pb)
{
    const Item *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key > b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_asc(const void *pa, const void *pb)
{
    const Item *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* The result must be (x's type [..., K], s32 [..., K]) with x's leading
 * dims; gives K. */
static IrStatus topk_shape(const DevKernelArgs *k, const IrShape *xs, int64_t *kk)
{
    const IrShape *rs = &k->ins->shape;
    if (xs->type == IR_TUPLE || xs->rank < 1)
        return dev_kernel_error(k, IR_EINPUT, "topk needs an array of rank >= 1");
    IrType t = xs->type;
    if (!ir_type_is_float(t) && !ir_type_is_int(t))
        return dev_kernel_error(k, IR_EUNSUPPORTED, "topk of %s is not supported (integers and floats)",
                                ir_type_name(t));
    bool ok = rs->type == IR_TUPLE && rs->ntuple == 2 && rs->tuple[0].type == t &&
              rs->tuple[1].type == IR_S32 && ir_shape_same_dims(&rs->tuple[0], &rs->tuple[1]) &&
              rs->tuple[0].rank == xs->rank && ir_dims_equal(rs->tuple[0].dims, xs->dims, xs->rank - 1);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "topk's result must be (%s[..., k], s32[..., k])",
                                ir_type_name(t));
    *kk = rs->tuple[0].dims[xs->rank - 1];
    int64_t n = xs->dims[xs->rank - 1];
    bool custom = k->ins->op == OP_CUSTOM_CALL;
    if (*kk > n || (!custom && *kk != k->ins->a.x->topk_k))
        return dev_kernel_error(k, IR_EINPUT, "k=%lld does not fit a last dimension of %lld",
                                (long long)*kk, (long long)n);
    if (n > INT32_MAX)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "topk over %lld elements: indices are s32",
                                (long long)n);
    return IR_OK;
}

/* The order the TopK custom-call's comparator asks for, when it is a
 * plain compare of the two values (*simple); else *simple is false and the
 * comparator itself is run (topk_by_sort). */
static IrStatus custom_order(const DevKernelArgs *k, bool *largest, bool *simple)
{
    *largest = true;
    *simple = true;
    if (k->ins->ncalled == 0)
        return IR_OK;
    const IrComputation *c = k->m->comp[k->ins->called[0]];
    const IrInstr *r = c->root >= 0 ? &c->instr[c->root] : NULL;
    int64_t p[2] = {-1, -1};
    for (int i = 0; r && r->op == OP_COMPARE && r->nopnd == 2 && i < 2; i++)
        if (c->instr[r->opnd[i]].op == OP_PARAMETER)
            p[i] = c->instr[r->opnd[i]].a.parameter_number;
    bool straight = p[0] == 0 && p[1] == 1, swapped = p[0] == 1 && p[1] == 0;
    IrCmpDir d = r ? r->a.direction : CMP_NONE;
    if ((!straight && !swapped) || (d != CMP_GT && d != CMP_GE && d != CMP_LT && d != CMP_LE)) {
        *simple = false;
        return IR_OK;
    }
    *largest = (d == CMP_GT || d == CMP_GE) == straight;
    return IR_OK;
}

/* The first kk of each row of a (values, indices) tuple sorted along
 * the last dimension: topk's result. */
static IrStatus first_k(const DevKernelArgs *k, const DevValue *sorted, int64_t n, int64_t kk, DevValue **out)
{
    DevValue *el[2] = {dev_value_new(&k->ins->shape.tuple[0]), dev_value_new(&k->ins->shape.tuple[1])};
    if (!el[0] || !el[1]) {
        dev_value_unref(el[0]);
        dev_value_unref(el[1]);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in topk");
    }
    int64_t rows = n ? dev_value_elements(sorted->elems[0]) / n : 0;
    for (int e = 0; e < 2; e++) {
        size_t esz = ir_type_size(sorted->elems[e]->shape.type);
        for (int64_t r = 0; r < rows && kk > 0; r++)
            memcpy(el[e]->data + (size_t)(r * kk) * esz, sorted->elems[e]->data + (size_t)(r * n) * esz,
                   (size_t)kk * esz);
    }
    *out = dev_value_tuple(&k->ins->shape, 2, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in topk");
}

/* TopK with any other comparator (XLA's CPU pipeline writes the total
 * order out: bitcast to s32, flip the negatives, compare GT): the values
 * and their indices (an s32 iota) sorted together, stably, by the
 * comparator (its parameters: value lhs, rhs, index lhs, rhs), as sort
 * does; the first kk of each row. */
static IrStatus topk_by_sort(const DevKernelArgs *k, int64_t kk, DevValue **out)
{
    const DevValue *x = k->opnd[0];
    int32_t rank = x->shape.rank;
    int64_t n = x->shape.dims[rank - 1];
    IrShape parts[2] = {x->shape, x->shape};
    parts[1].type = IR_S32;
    parts[1].has_layout = false;
    DevValue *iota = dev_value_new(&parts[1]);
    if (!iota)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in topk");
    int32_t *ix = (int32_t *)iota->data;
    for (int64_t i = 0, e = dev_value_elements(iota); i < e; i++)
        ix[i] = (int32_t)(i % n);
    int64_t dim = rank - 1;
    IrInstr sort = *k->ins;
    sort.op = OP_SORT;
    sort.nopnd = 2;
    sort.shape = (IrShape){.type = IR_TUPLE, .ntuple = 2, .tuple = parts};
    sort.a.has_dimensions = true;
    sort.a.dimensions = (IrI64List){.n = 1, .v = &dim};
    DevValue *opnd[2] = {(DevValue *)x, iota}, *sorted = NULL;
    DevKernelArgs ks = *k;
    ks.ins = &sort;
    ks.nopnd = 2;
    ks.opnd = opnd;
    IrStatus st = dev_k_sort(&ks, &sorted);
    dev_value_unref(iota);
    if (st == IR_OK)
        st = first_k(k, sorted, n, kk, out);
    dev_value_unref(sorted);
    return st;
}

IrStatus dev_k_topk(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 1)
        return dev_kernel_error(k, IR_EINPUT, "topk takes one operand");
    const DevValue *x = k->opnd[0];
    int64_t kk = 0;
    IrStatus st = topk_shape(k, &x->shape, &kk);
    if (st != IR_OK)
        return st;
    bool largest = !k->ins->a.x->has_topk_largest || k->ins->a.x->topk_largest;
    bool simple = true;
    if (k->ins->op == OP_CUSTOM_CALL && (st = custom_order(k, &largest, &simple)) != IR_OK)
        return st;
    if (!simple)
        return topk_by_sort(k, kk, out);
    int64_t n = x->shape.dims[x->shape.rank - 1], rows = n ? dev_value_elements(x) / n : 0;
    size_t esz = ir_type_size(x->shape.type);
    DevValue *el[2] = {dev_value_new(&k->ins->shape.tuple[0]), dev_value_new(&k->ins->shape.tuple[1])};
    Item *it = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *it);
    if (!el[0] || !el[1] || !it) {
        dev_value_unref(el[0]);
        dev_value_unref(el[1]);
        ts_free(it);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in topk");
    }
    int32_t *idx = (int32_t *)el[1]->data;
    for (int64_t r = 0; r < rows && kk > 0; r++) {
        for (int64_t i = 0; i < n; i++)
            it[i] = (Item){key_of(x->shape.type, x->data, r * n + i), i};
        qsort(it, (size_t)n, sizeof *it, largest ? cmp_desc : cmp_asc);
        for (int64_t j = 0; j < kk; j++) {
            memcpy(el[0]->data + (size_t)(r * kk + j) * esz,
                   x->data + (size_t)(r * n + it[j].idx) * esz, esz);
            idx[r * kk + j] = (int32_t)it[j].idx;
        }
    }
    ts_free(it);
    *out = dev_value_tuple(&k->ins->shape, 2, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in topk");
}
