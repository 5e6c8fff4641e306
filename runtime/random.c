/*
 * random.c: the deterministic random inputs of DESIGN.md, so that every
 * run, tool and host draws the same inputs for `--random-inputs SEED`.
 *
 * Leaf k (entry parameters in order, tuple leaves depth first) element i
 * (row-major in the leaf's whole logical shape) gets the 64 bits
 *     h = splitmix64(splitmix64(splitmix64(SEED) ^ k) ^ i)
 * and from them a value by type:
 *     floats   ((h >> 11) * 2^-53) * 2 - 1, rounded to nearest even in the
 *              type directly from that double (never through f32 for f16 or
 *              bf16: rounding twice can differ by one ulp)
 *     signed   (h mod 17) - 8          unsigned  h mod 17
 *     s4, s2   (h mod 16) - 8, (h mod 4) - 2    u4, u2  h mod 16, h mod 4
 *     pred     h & 1
 *     complex  element i's real part is the floating draw of index 2i,
 *              its imaginary part that of index 2i+1, in the component
 *              type (f32 for c64, f64 for c128)
 * (f8 and f4 kinds round the same double with ir/lowp.c's codec.)
 * Because i is the index in the whole shape, a host that fills only its
 * shard's box draws exactly the elements the whole fill would.
 */
#include "runtime.h"

#include <math.h>
#include <string.h>

uint64_t rt_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The double in [-1, 1) drawn for floating types: ((h >> 11) * 2^-53) * 2 - 1. */
static double rt_random_unit(uint64_t h)
{
    /* (h >> 11) has 53 bits, so the product and the affine map are exact. */
    return ((double)(h >> 11) * 0x1p-53) * 2.0 - 1.0;
}

/* Round v to the nearest value (ties to even) with `mant` explicit
 * mantissa bits and normal exponents >= emin (smaller values become
 * subnormal with the spacing of 2^(emin - mant)). Exponent overflow cannot
 * happen here: |v| <= 1.
 * Example (f16: mant 10, emin -14): v = 1 + 2^-11 is a tie between 1 and
 * 1 + 2^-10; nearbyint(2^10 + 0.5) = 1024 (even) gives 1. */
static double round_to_format(double v, int mant, int emin)
{
    if (v == 0.0)
        return v;
    /* Normal in the format (every bf16 draw, most f16 ones): round the
     * double's bits at the format's last mantissa bit, ties to even; a
     * carry out of the mantissa bumps the exponent, as it should. The
     * same result as the general path below, without frexp and ldexp,
     * which took most of the time to draw a 2 GiB input. */
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    if ((int)((u >> 52) & 0x7ff) - 1023 >= emin) {
        int shift = 52 - mant;
        uint64_t half = (uint64_t)1 << (shift - 1), lsb = (u >> shift) & 1;
        u = (u + half - 1 + lsb) & ~(((uint64_t)1 << shift) - 1);
        memcpy(&v, &u, sizeof v);
        return v;
    }
    int e;
    frexp(v, &e);
    e -= 1; /* 2^e <= |v| < 2^(e+1) */
    if (e < emin)
        e = emin;
    /* nearbyint rounds to nearest even in the default rounding mode. */
    return ldexp(nearbyint(ldexp(v, mant - e)), e - mant);
}

/* IEEE binary16 bits of a double that is exactly representable in it. */
static uint16_t f16_bits_exact(double r)
{
    uint16_t sign = signbit(r) ? 0x8000 : 0;
    double a = fabs(r);
    if (a == 0.0)
        return sign;
    int e;
    frexp(a, &e);
    e -= 1;
    if (e < -14) /* subnormal: a = m * 2^-24 */
        return (uint16_t)(sign | (uint16_t)ldexp(a, 24));
    uint16_t m = (uint16_t)(ldexp(a, 10 - e) - 1024.0);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | m);
}

/* bfloat16 bits of a double exactly representable in bf16: the top half
 * of its (exact) float bits. */
static uint16_t bf16_bits_exact(double r)
{
    float f = (float)r;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

IrStatus rt_random_store(IrType t, uint64_t h, void *out, int64_t j)
{
    uint8_t *o = out;
    int64_t s = (int64_t)(h % 17) - 8;
    uint64_t u = h % 17;
    switch (t) {
    case IR_PRED: o[j] = (uint8_t)(h & 1); break;
    case IR_S8:  ((int8_t *)out)[j] = (int8_t)s; break;
    case IR_S16: ((int16_t *)out)[j] = (int16_t)s; break;
    case IR_S32: ((int32_t *)out)[j] = (int32_t)s; break;
    case IR_S64: ((int64_t *)out)[j] = s; break;
    case IR_U8:  o[j] = (uint8_t)u; break;
    case IR_U16: ((uint16_t *)out)[j] = (uint16_t)u; break;
    case IR_U32: ((uint32_t *)out)[j] = (uint32_t)u; break;
    case IR_U64: ((uint64_t *)out)[j] = u; break;
    case IR_F16:
        ((uint16_t *)out)[j] = f16_bits_exact(round_to_format(rt_random_unit(h), 10, -14));
        break;
    case IR_BF16:
        ((uint16_t *)out)[j] = bf16_bits_exact(round_to_format(rt_random_unit(h), 7, -126));
        break;
    case IR_F32: ((float *)out)[j] = (float)rt_random_unit(h); break;
    case IR_F64: ((double *)out)[j] = rt_random_unit(h); break;
    case IR_S4: o[j] = (uint8_t)(int8_t)((int)(h % 16) - 8); break;
    case IR_S2: o[j] = (uint8_t)(int8_t)((int)(h % 4) - 2); break;
    case IR_U4: o[j] = (uint8_t)(h % 16); break;
    case IR_U2: o[j] = (uint8_t)(h % 4); break;
    default:
        if (!ir_type_is_lowp_float(t))
            return IR_EUNSUPPORTED;
        o[j] = ir_lowp_from_double(t, rt_random_unit(h));
    }
    return IR_OK;
}

/* The component type of a complex type: real and imaginary parts. */
static IrType component_type(IrType t)
{
    return t == IR_C64 ? IR_F32 : IR_F64;
}

/* Element j of `out` from the draw for whole-shape index `flat`: complex
 * types take two draws (2 flat and 2 flat + 1, see the rule above). */
static void store_element(IrType t, uint64_t base, int64_t flat, void *out, int64_t j)
{
    if (!ir_type_is_complex(t)) {
        rt_random_store(t, rt_splitmix64(base ^ (uint64_t)flat), out, j);
        return;
    }
    IrType c = component_type(t);
    rt_random_store(c, rt_splitmix64(base ^ (uint64_t)(2 * flat)), out, 2 * j);
    rt_random_store(c, rt_splitmix64(base ^ (uint64_t)(2 * flat + 1)), out, 2 * j + 1);
}



/* Check an array shape and a box in it; the box's element count in *n. */
static IrStatus check_box(const IrShape *shape, const int64_t *lo, const int64_t *hi,
                          int64_t *n, IrDiag *d)
{
    if (!ir_shape_is_array(shape) || ir_shape_elements(shape) < 0)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "random inputs need an array shape of a valid size");
    if (rt_npy_descr(shape->type) == NULL)
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                        "random inputs of type %s are not supported", ir_type_name(shape->type));
    int64_t count = 1;
    for (int32_t k = 0; k < shape->rank; k++) {
        if (lo[k] < 0 || lo[k] > hi[k] || hi[k] > shape->dims[k])
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "box [%lld, %lld) is outside dimension %d of size %lld",
                            (long long)lo[k], (long long)hi[k], (int)k,
                            (long long)shape->dims[k]);
        count *= hi[k] - lo[k]; /* <= the whole count, which did not overflow */
    }
    *n = count;
    return IR_OK;
}

/* Rule: walk the box in row-major order with an index vector `idx` (like
 * an odometer, the last dimension fastest) and keep the flat index of the
 * whole shape in step with it.
 * Example: shape [3,4], box rows [1,3) cols [2,4): whole indices 6 7 10 11. */
IrStatus rt_random_fill_box(uint64_t seed, uint64_t leaf, const IrShape *shape,
                            const int64_t *lo, const int64_t *hi, void *out, IrDiag *d)
{
    int64_t n = 0;
    IrStatus st = check_box(shape, lo, hi, &n, d);
    if (st != IR_OK || n == 0)
        return st;
    int32_t rank = shape->rank;
    int64_t idx[IR_MAX_RANK], stride[IR_MAX_RANK];
    ir_shape_strides(shape, stride);
    uint64_t base = rt_splitmix64(rt_splitmix64(seed) ^ leaf);
    int64_t flat = 0;
    for (int32_t k = 0; k < rank; k++) {
        idx[k] = lo[k];
        flat += lo[k] * stride[k];
    }
    for (int64_t j = 0; j < n; j++) {
        store_element(shape->type, base, flat, out, j);
        for (int32_t k = rank - 1; k >= 0; k--) {
            if (++idx[k] < hi[k]) {
                flat += stride[k];
                break;
            }
            flat -= (idx[k] - 1 - lo[k]) * stride[k];
            idx[k] = lo[k];
        }
    }
    return IR_OK;
}

IrStatus rt_random_fill(uint64_t seed, uint64_t leaf, const IrShape *shape, void *out,
                        IrDiag *d)
{
    int64_t lo[IR_MAX_RANK] = {0};
    if (!ir_shape_is_array(shape) || shape->rank > IR_MAX_RANK)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "random inputs need an array shape");
    return rt_random_fill_box(seed, leaf, shape, lo, shape->dims, out, d);
}
