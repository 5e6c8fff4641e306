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
 * largest. Any other comparator is refused.
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

/* The order the TopK custom-call's comparator asks for. */
static IrStatus custom_order(const DevKernelArgs *k, bool *largest)
{
    *largest = true;
    if (k->ins->ncalled == 0)
        return IR_OK;
    const IrComputation *c = k->m->comp[k->ins->called[0]];
    const IrInstr *r = c->root >= 0 ? &c->instr[c->root] : NULL;
    int64_t p[2] = {-1, -1};
    for (int i = 0; r && r->op == OP_COMPARE && r->nopnd == 2 && i < 2; i++)
        if (c->instr[r->opnd[i]].op == OP_PARAMETER)
            p[i] = c->instr[r->opnd[i]].a.parameter_number;
    bool straight = p[0] == 0 && p[1] == 1, swapped = p[0] == 1 && p[1] == 0;
    if (!straight && !swapped)
        return dev_kernel_error(k, IR_EUNSUPPORTED,
                                "TopK's comparator must be compare(parameter(0), parameter(1))");
    IrCmpDir d = r->a.direction;
    if (d != CMP_GT && d != CMP_GE && d != CMP_LT && d != CMP_LE)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "TopK's comparator must be GT, GE, LT or LE");
    *largest = (d == CMP_GT || d == CMP_GE) == straight;
    return IR_OK;
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
    if (k->ins->op == OP_CUSTOM_CALL && (st = custom_order(k, &largest)) != IR_OK)
        return st;
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
