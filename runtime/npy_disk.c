/*
 * npy_disk.c: how each element type travels in a .npy file (DESIGN.md
 * "Tensors on disk"). numpy has no bf16, f8, f4 or sub-byte integers, so
 *     bf16, the f8 kinds, f4e2m1fn   travel as <f4 (float32)
 *     s4, s2                          travel as |i1 (int8)
 *     u4, u2                          travel as |u1 (uint8)
 *     c64, c128                       are <c8, <c16 (numpy's complex64/128:
 *                                     real then imaginary part, as in memory)
 * and every other type is itself. On read a value must be exactly what
 * the type holds after rounding: floats round to nearest even, and a value
 * outside the type's range (|x| above its largest finite value, an
 * infinity or NaN it cannot hold, an integer out of [-8, 7] for s4) is an
 * error naming the file and the element, never a silent saturation.
 * (The f8/f4 codec is ir/lowp.c's, the one convert uses.)
 * Example: 0.3 read into f8e4m3fn is 0.3125 (0x2a); 500.0 is an error
 * (its largest finite is 448); 9 into s4 is an error.
 */
#include "runtime.h"

#include <math.h>
#include <string.h>

IrType rt_npy_disk_type(IrType t)
{
    if (t == IR_BF16 || ir_type_is_lowp_float(t))
        return IR_F32;
    if (t == IR_S4 || t == IR_S2)
        return IR_S8;
    if (t == IR_U4 || t == IR_U2)
        return IR_U8;
    return t;
}

/* Integer range of the sub-byte types. */
static void int_range(IrType t, int lo_hi[2])
{
    switch (t) {
    case IR_S4: lo_hi[0] = -8; lo_hi[1] = 7; break;
    case IR_S2: lo_hi[0] = -2; lo_hi[1] = 1; break;
    case IR_U4: lo_hi[0] = 0; lo_hi[1] = 15; break;
    default: lo_hi[0] = 0; lo_hi[1] = 3; break; /* u2 */
    }
}

static IrStatus out_of_range(const char *path, IrType t, int64_t at, double v, IrDiag *d)
{
    return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                    "element %lld (%.9g) is outside the range of %s", (long long)at, v,
                    ir_type_name(t));
}

/* The largest finite value of a low-precision kind (scanning its codes). */
static double lowp_max(IrType t)
{
    double m = 0;
    for (int c = 0; c < (t == IR_F4E2M1FN ? 16 : 256); c++) {
        double v = ir_lowp_to_double(t, (uint8_t)c);
        if (isfinite(v) && v > m)
            m = v;
    }
    return m;
}

/* One float32 from disk into a low-precision float, or false when the
 * type cannot hold it: a finite value beyond +-max (no saturation, which
 * would hide a wrong file), a NaN or infinity the kind lacks, or a value
 * the kind has no code near (f8e8m0fnu: zero and negatives). Within the
 * range the codec rounds to nearest even. */
static bool lowp_in(IrType t, float f, double max, uint8_t *out)
{
    uint8_t b = ir_lowp_from_double(t, (double)f);
    double back = ir_lowp_to_double(t, b);
    bool ok;
    if (isnan(f))
        ok = isnan(back);
    else if (isinf(f))
        ok = isinf(back) && signbit(back) == signbit(f);
    else
        ok = fabs((double)f) <= max && isfinite(back);
    *out = b;
    return ok;
}

IrStatus rt_npy_from_disk(IrType t, const void *disk, int64_t n, void *out, int64_t first,
                          const char *path, IrDiag *d)
{
    const float *fs = disk;
    const int8_t *is = disk;
    const uint8_t *us = disk;
    uint8_t *o8 = out;
    int r[2];
    double max = ir_type_is_lowp_float(t) ? lowp_max(t) : 0;
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case IR_BF16:
            ((uint16_t *)out)[i] = dev_f32_to_bf16(fs[i]);
            break;
        case IR_S4: case IR_S2:
            int_range(t, r);
            if (is[i] < r[0] || is[i] > r[1])
                return out_of_range(path, t, first + i, is[i], d);
            o8[i] = (uint8_t)is[i];
            break;
        case IR_U4: case IR_U2:
            int_range(t, r);
            if (us[i] > r[1])
                return out_of_range(path, t, first + i, us[i], d);
            o8[i] = us[i];
            break;
        default:
            if (!ir_type_is_lowp_float(t))
                return ir_error(d, IR_EINTERNAL, path, NULL, (IrPos){0, 0},
                                "no disk conversion for %s", ir_type_name(t));
            if (!lowp_in(t, fs[i], max, &o8[i]))
                return out_of_range(path, t, first + i, fs[i], d);
        }
    }
    return IR_OK;
}

void rt_npy_to_disk(IrType t, const void *mem, int64_t n, void *disk)
{
    const uint8_t *m8 = mem;
    for (int64_t i = 0; i < n; i++) {
        if (t == IR_BF16)
            ((float *)disk)[i] = dev_bf16_to_f32(((const uint16_t *)mem)[i]);
        else if (ir_type_is_lowp_float(t))
            ((float *)disk)[i] = ir_lowp_to_float(t, m8[i]);
        else /* the sub-byte integers are held extended in a byte already */
            ((uint8_t *)disk)[i] = m8[i];
    }
}
