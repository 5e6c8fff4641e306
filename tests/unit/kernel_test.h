/*
 * kernel_test.h: what the kernel tests (test_k_*.c) share: parse a module
 * that must be valid, make an array value, run a module on one device.
 * Include after <cmocka.h> and "device/device.h".
 */
#ifndef TESSEL_KERNEL_TEST_H
#define TESSEL_KERNEL_TEST_H

#include <string.h>

/* Parse and verify HLO text; fails the test (printing why) when invalid. */
static inline IrModule *parse_ok(const char *txt)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("test.hlo", txt, strlen(txt), &o, &m, &d);
    if (st != IR_OK)
        print_message("parse failed: %s\n%s\n", d.msg ? d.msg : "?", txt);
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    return m;
}

/* An array value of type t and dims, filled from data (NULL: zeros). */
static inline DevValue *val(IrType t, int32_t rank, const int64_t *dims, const void *data)
{
    IrShape s = {.type = t, .rank = rank, .dims = (int64_t *)dims};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    if (data && v->nbytes > 0)
        memcpy(v->data, data, (size_t)v->nbytes);
    return v;
}

/* Fill an f32 value with uniform draws in [-1, 1) from the LCG state *rng;
 * f32_uniform: a new [r, c] f32 value so filled. */
static inline void fill_uniform(DevValue *v, uint64_t *rng)
{
    for (int64_t i = 0; i < dev_value_elements(v); i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        ((float *)v->data)[i] = (float)((double)(*rng >> 11) * 0x1p-53 * 2 - 1);
    }
}

static inline DevValue *f32_uniform(int64_t r, int64_t c, uint64_t *rng)
{
    const int64_t dims[2] = {r, c};
    DevValue *v = val(IR_F32, 2, dims, NULL);
    fill_uniform(v, rng);
    return v;
}

/* Run the entry of m on one device with n borrowed arguments. */
static inline IrStatus exec_module(const IrModule *m, int n, DevValue **args, DevValue **out, IrDiag *d)
{
    DevExecOptions opt = {0};
    return dev_execute(m, m->entry, n, args, &opt, out, d);
}

#endif /* TESSEL_KERNEL_TEST_H */
