/*
 * compare.c: the oracle's comparison of a partitioned result with the
 * reference result, leaf by leaf (DESIGN.md, "The oracle"): integers, pred
 * and other exact types bit-equal; floating leaves within a tolerance of
 * the reference's largest finite magnitude that depends on the type's
 * precision, since a partitioned reduction adds partial sums in another
 * order and each partial sum is rounded to the type: 1e-5 (f64), 1e-4
 * (f32), 2e-3 (f16), 2e-2 (bf16, the f8 and f4 kinds). Complex leaves are
 * compared component by component, at their component type's tolerance.
 */
#include "runtime.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <stdio.h>

static char *describe(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *describe(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ts_strdup(buf);
}

double rt_float_tolerance(IrType t)
{
    switch (t) {
    case IR_F64: return 1e-5;
    case IR_F32: return 1e-4;
    case IR_F16: return 2e-3;
    default: return 2e-2; /* bf16 (8 significant bits) and the f8/f4 kinds */
    }
}

static bool leaf_match(const DevValue *ref, const DevValue *got, int32_t leaf, char **why)
{
    if (!ir_shape_equal(&ref->shape, &got->shape)) {
        if (why) {
            char *a = ir_shape_str(&ref->shape, false), *b = ir_shape_str(&got->shape, false);
            *why = describe("output leaf %d: shape %s, reference %s", (int)leaf, b ? b : "?", a ? a : "?");
            ts_free(a);
            ts_free(b);
        }
        return false;
    }
    IrType t = ref->shape.type;
    int64_t n = dev_value_elements(ref);
    if (ir_type_is_complex(t)) {
        /* c64 is two f32, c128 two f64: compare the components. */
        t = t == IR_C64 ? IR_F32 : IR_F64;
        n *= 2;
    } else if (!ir_type_is_float(t)) {
        size_t es = ir_type_size(t);
        for (int64_t i = 0; i < n; i++)
            if (memcmp(ref->data + i * (int64_t)es, got->data + i * (int64_t)es, es) != 0) {
                if (why)
                    *why = describe("output leaf %d element %lld: %lld, reference %lld", (int)leaf,
                                    (long long)i, (long long)dev_load_i64(t, got->data, i),
                                    (long long)dev_load_i64(t, ref->data, i));
                return false;
            }
        return true;
    }
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(dev_load_f64(t, ref->data, i));
        if (isfinite(v) && v > scale)
            scale = v;
    }
    double tol = rt_float_tolerance(t) * scale;
    for (int64_t i = 0; i < n; i++) {
        double a = dev_load_f64(t, ref->data, i), b = dev_load_f64(t, got->data, i);
        bool ok;
        if (isnan(a))
            ok = isnan(b);
        else if (isinf(a))
            ok = a == b;
        else
            ok = !isnan(b) && fabs(a - b) <= tol;
        if (!ok) {
            if (why)
                *why = describe("output leaf %d element %lld: %.9g, reference %.9g (tolerance %.3g)",
                                (int)leaf, (long long)i, b, a, tol);
            return false;
        }
    }
    return true;
}

bool rt_values_match(const DevValue *ref, const DevValue *got, char **why)
{
    if (why)
        *why = NULL;
    int32_t n = ir_shape_leaf_count(&ref->shape);
    if (n != ir_shape_leaf_count(&got->shape)) {
        if (why)
            *why = describe("result has %d leaves, reference %d", (int)ir_shape_leaf_count(&got->shape), (int)n);
        return false;
    }
    for (int32_t k = 0; k < n; k++)
        if (!leaf_match(dev_value_leaf((DevValue *)ref, k), dev_value_leaf((DevValue *)got, k), k, why))
            return false;
    return true;
}
