/*
 * k_dynamic.c: bounded dynamic dimensions at run time. A value of
 * f32[<=8] is held at its bound (8 elements) with its run-time size beside
 * it (DevValue.sizes), as XLA's CPU backend holds it.
 *
 *   set-dimension-size(x, n), dimensions={d}: x's data, with dimension d's
 *       run-time size n (0 <= n <= bound; else an error naming n)
 *   dynamic-reshape(x, s_0, ..., s_{r-1}): the elements of x within its
 *       run-time sizes, in row-major order, laid out in the result's
 *       bounds with run-time sizes s_i (their product must be x's
 *       run-time element count); the rest of the result is zero.
 * Example: x = f32[<=6] [1 2 3 4 5 6] with size 4, dynamic-reshape to
 * f32[<=3,<=2] with sizes (2, 2): [[1 2] [3 4] [0 0]], sizes (2, 2).
 */
#include "device.h"

#include <string.h>

static int64_t scalar_arg(const DevValue *v, bool *ok)
{
    *ok = v->shape.type != IR_TUPLE && v->shape.rank == 0 && ir_type_is_int(v->shape.type);
    return *ok ? dev_load_i64(v->shape.type, v->data, 0) : 0;
}

IrStatus dev_k_set_dimension_size(const DevKernelArgs *k, DevValue **out)
{
    const IrInstr *ins = k->ins;
    DevValue *x = k->nopnd == 2 ? k->opnd[0] : NULL;
    int64_t d = ins->a.dimensions.n == 1 ? ins->a.dimensions.v[0] : -1;
    bool ok = false;
    int64_t n = x ? scalar_arg(k->opnd[1], &ok) : 0;
    if (!x || !ok || x->shape.type == IR_TUPLE || d < 0 || d >= x->shape.rank ||
        ins->shape.type == IR_TUPLE || ins->shape.rank != x->shape.rank)
        return dev_kernel_error(k, IR_EINPUT, "set-dimension-size needs an array, an integer "
                                "scalar size and dimensions={d} of the array");
    if (n < 0 || n > x->shape.dims[d])
        return dev_kernel_error(k, IR_EINPUT, "size %lld is outside [0, %lld] of dimension %lld",
                                (long long)n, (long long)x->shape.dims[d], (long long)d);
    int64_t sizes[IR_MAX_RANK];
    for (int32_t i = 0; i < x->shape.rank; i++)
        sizes[i] = dev_value_dim_size(x, i);
    sizes[d] = n;
    DevValue *r = dev_value_new_uninit(&ins->shape);
    if (!r)
        return IR_ENOMEM;
    if (r->nbytes != x->nbytes) {
        dev_value_unref(r);
        return dev_kernel_error(k, IR_EINPUT, "the result's bounds are not the operand's");
    }
    if (r->nbytes > 0)
        memcpy(r->data, x->data, (size_t)r->nbytes);
    IrStatus st = dev_value_set_sizes(r, sizes);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

IrStatus dev_k_dynamic_reshape(const DevKernelArgs *k, DevValue **out)
{
    const IrInstr *ins = k->ins;
    const IrShape *rs = &ins->shape;
    DevValue *x = k->nopnd >= 1 ? k->opnd[0] : NULL;
    if (!x || x->shape.type == IR_TUPLE || rs->type != x->shape.type ||
        k->nopnd != 1 + rs->rank)
        return dev_kernel_error(k, IR_EINPUT, "dynamic-reshape takes an array and one size per "
                                "result dimension");
    int64_t sizes[IR_MAX_RANK], in_n = 1, out_n = 1;
    for (int32_t i = 0; i < x->shape.rank; i++)
        in_n *= dev_value_dim_size(x, i);
    for (int32_t i = 0; i < rs->rank; i++) {
        bool ok;
        sizes[i] = scalar_arg(k->opnd[1 + i], &ok);
        if (!ok || sizes[i] < 0 || sizes[i] > rs->dims[i])
            return dev_kernel_error(k, IR_EINPUT, "size %lld of dimension %d is outside [0, %lld]",
                                    (long long)sizes[i], (int)i, (long long)rs->dims[i]);
        out_n *= sizes[i];
    }
    if (in_n != out_n)
        return dev_kernel_error(k, IR_EINPUT, "%lld elements cannot be reshaped into %lld",
                                (long long)in_n, (long long)out_n);
    DevValue *packed = dev_value_trimmed(x), *r = dev_value_new(rs);
    IrStatus st = packed && r ? dev_value_set_sizes(r, sizes) : IR_ENOMEM;
    if (st == IR_OK)
        dev_copy_box(ir_type_size(rs->type), rs->rank, packed->data, sizes, r->data, rs->dims,
                     sizes);
    dev_value_unref(packed);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}
