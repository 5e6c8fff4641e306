/*
 * array_in.c: inputs that come from the caller's memory (the library's
 * TsArray) instead of .npy files. They are held to the rules of a .npy
 * file: the dtype string must be the one the parameter's type travels as,
 * the dims the parameter's, and the bytes exactly elements x dtype size;
 * the elements are converted as the .npy reader converts them, so an
 * array and the same array saved with numpy.save bind to the same value.
 */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

void rt_dims_text(char *buf, size_t cap, int32_t rank, const int64_t *dims)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int32_t k = 0; k < rank && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k ? ", " : "", (long long)dims[k]);
    if (n < cap)
        snprintf(buf + n, cap - n, "%s)", rank == 1 ? "," : "");
}

static IrStatus check_array(const RtArray *a, const IrShape *expect, const char *what, IrDiag *d)
{
    const char *want = rt_npy_descr(expect->type);
    char got[96], exp[96];
    if (!want)
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "%s: %s values cannot come from an array",
                        what, ir_type_name(expect->type));
    if (!a->dtype || strcmp(a->dtype, want) != 0)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "%s: array of dtype %s, expected %s", what,
                        a->dtype ? a->dtype : "(none)", want);
    bool same = a->rank == expect->rank && (a->rank == 0 || a->dims);
    for (int32_t k = 0; same && k < a->rank; k++)
        same = a->dims[k] == expect->dims[k];
    if (!same) {
        rt_dims_text(got, sizeof got, a->rank > 0 && a->rank <= IR_MAX_RANK && a->dims ? a->rank : 0, a->dims);
        rt_dims_text(exp, sizeof exp, expect->rank, expect->dims);
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "%s: array of shape %s, expected %s", what, got,
                        exp);
    }
    int64_t n = ir_shape_elements(expect);
    size_t esize = ir_type_size(rt_npy_disk_type(expect->type));
    if (n < 0 || a->nbytes != (size_t)n * esize || (n > 0 && !a->data))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "%s: array of %zu bytes, expected %lld elements of %zu bytes", what, a->nbytes,
                        (long long)n, esize);
    return IR_OK;
}

IrStatus rt_array_read_box(const RtArray *a, const IrShape *expect, const char *what, const int64_t *lo,
                           const int64_t *hi, void *out, IrDiag *d)
{
    IrStatus st = check_array(a, expect, what, d);
    if (st != IR_OK)
        return st;
    int32_t rank = expect->rank;
    int64_t ext[IR_MAX_RANK], count = 1;
    for (int32_t k = 0; k < rank; k++) {
        if (lo[k] < 0 || lo[k] > hi[k] || hi[k] > expect->dims[k])
            return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "%s: bad box", what);
        ext[k] = hi[k] - lo[k];
        count *= ext[k];
    }
    if (count == 0)
        return IR_OK;
    /* Runs along the innermost dim, converted one run at a time (the
     * source is in disk form, the destination in memory form). */
    size_t dsize = ir_type_size(rt_npy_disk_type(expect->type)), msize = ir_type_size(expect->type);
    int64_t run = rank > 0 ? ext[rank - 1] : 1, idx[IR_MAX_RANK] = {0};
    uint8_t *dst = out;
    for (int64_t done = 0; done < count; done += run) {
        int64_t flat = 0;
        for (int32_t k = 0; k < rank; k++)
            flat = flat * expect->dims[k] + lo[k] + (k == rank - 1 ? 0 : idx[k]);
        const uint8_t *src = (const uint8_t *)a->data + (size_t)flat * dsize;
        if (expect->type == IR_PRED)
            for (int64_t k = 0; k < run; k++) /* as the .npy reader: any non-zero byte is true */
                dst[k] = src[k] != 0;
        else if (dsize == msize && rt_npy_disk_type(expect->type) == expect->type)
            memcpy(dst, src, (size_t)run * msize);
        else if ((st = rt_npy_from_disk(expect->type, src, run, dst, flat, what, d)) != IR_OK)
            return st;
        dst += (size_t)run * msize;
        for (int32_t k = rank - 2; k >= 0; k--) { /* next run: odometer over the outer dims */
            if (++idx[k] < ext[k])
                break;
            idx[k] = 0;
        }
    }
    return IR_OK;
}
