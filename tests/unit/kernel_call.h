/*
 * kernel_call.h: call one kernel of device/ directly on an instruction
 * built here (for ops whose attributes the parser does not read yet, and
 * for error paths the verifier would stop first). Include after
 * <cmocka.h> and "device/device.h".
 */
#ifndef TESSEL_KERNEL_CALL_H
#define TESSEL_KERNEL_CALL_H

#include <string.h>

typedef IrStatus (*KernelFn)(const DevKernelArgs *k, DevValue **out);

/* A module that owns the instruction's arrays, the instruction, a diag. */
typedef struct KCall {
    IrModule *m;
    IrInstr ins;
    IrDiag d;
} KCall;

/* An instruction `op` at 3:7 of "kernel.hlo" with an array result. */
static inline void kc_init(KCall *kc, IrOpcode op, IrType t, int32_t rank, const int64_t *dims)
{
    memset(kc, 0, sizeof *kc);
    kc->m = ir_module_new("kc");
    assert_non_null(kc->m);
    kc->m->file = "kernel.hlo";
    kc->ins.op = op;
    kc->ins.name = "k";
    kc->ins.pos = (IrPos){3, 7};
    assert_int_equal(ir_shape_make(kc->m->arena, &kc->ins.shape, t, rank, dims), IR_OK);
}

/* A tuple result of n arrays (types t[i], ranks r[i], dims d[i]). */
static inline void kc_tuple(KCall *kc, int n, const IrType *t, const int32_t *r,
                            const int64_t *const *d)
{
    IrShape el[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++)
        assert_int_equal(ir_shape_make(kc->m->arena, &el[i], t[i], r[i], d[i]), IR_OK);
    assert_int_equal(ir_shape_make_tuple(kc->m->arena, &kc->ins.shape, n, el), IR_OK);
}

/* An I64 list in the module's arena. */
static inline IrI64List kc_list(KCall *kc, int n, const int64_t *v)
{
    IrI64List l = {n, ir_alloc_array(kc->m->arena, (size_t)(n ? n : 1), sizeof(int64_t))};
    assert_non_null(l.v);
    memcpy(l.v, v, (size_t)n * sizeof(int64_t));
    return l;
}

/* Run fn on n borrowed operands. */
static inline IrStatus kc_run(KCall *kc, KernelFn fn, int n, DevValue **opnd, DevValue **out)
{
    DevExecOptions opt = {0};
    kc->ins.nopnd = n;
    DevKernelArgs k = {kc->m, NULL, &kc->ins, n, opnd, &opt, &kc->d};
    *out = NULL;
    return fn(&k, out);
}

static inline void kc_free(KCall *kc)
{
    ir_diag_clear(&kc->d);
    ir_module_free(kc->m);
}

#endif /* TESSEL_KERNEL_CALL_H */
