/*
 * reduce_select.c: the per-element step of a reduce or reduce-window whose
 * reducer compares and picks (ir_select_reducer: JAX's argmax and argmin
 * over (value, index), a NaN-propagating max written with a select). The
 * reducer is a table from the relations of each accumulator to its input
 * (less, equal, greater, which is NaN) to the parameter each new
 * accumulator is; a step loads the inputs, finds the relations and copies
 * the picked elements' bits. No call of the computation, no value
 * allocated: JAX's argmax of f32[16,10] took 1.16 ms a call through the
 * interpreter (a value for each of the reducer's 13 scalar instructions,
 * 160 times), about 3 us here, most of it the table's making. The
 * partitioner's lifted reducer (a pred "valid" slot, the argmax called
 * inside) is such a reducer too. The bits are the interpreter's: a
 * select copies its operand, and so does the table.
 */
#include "device.h"

#include <math.h>
#include <string.h>

bool dev_select_fold_init(const DevKernelArgs *k, int32_t n, DevSelectFold *f)
{
    if (k->ins->ncalled < 1 || k->nopnd != 2 * n || n > IR_SELECT_REDUCER_MAX)
        return false;
    IrType types[2 * IR_SELECT_REDUCER_MAX];
    for (int32_t i = 0; i < 2 * n; i++) {
        if (!dev_value_is_array(k->opnd[i]))
            return false;
        types[i] = k->opnd[i]->shape.type;
    }
    if (!ir_select_reducer(k->m, k->ins->called[0], n, types, &f->r))
        return false;
    for (int32_t s = 0; s < n; s++) {
        if (!dev_red_dom(types[s], &f->dom[s]) || ir_type_size(types[s]) > 8)
            return false;
        f->size[s] = ir_type_size(types[s]);
    }
    return true;
}

/* Slot s's element i of base: its value to compare and its bits. f32 and
 * s32 (argmax's values and indices) load inline, without dev_acc_load's
 * call and switch. */
static void load(const DevSelectFold *f, int32_t s, const uint8_t *base, int64_t i, DevAcc *v, uint64_t *bits)
{
    IrType t = f->r.type[s];
    if (t == IR_F32 || t == IR_S32) {
        uint32_t b;
        memcpy(&b, base + (size_t)i * 4, 4);
        *bits = b;
        if (t == IR_F32) {
            float x;
            memcpy(&x, &b, 4);
            v->f = x;
        } else {
            v->s = (int32_t)b;
        }
        return;
    }
    *v = dev_acc_load(f->dom[s], t, base, i);
    *bits = 0;
    memcpy(bits, base + (size_t)i * f->size[s], f->size[s]);
}

void dev_select_acc_init(const DevSelectFold *f, const DevKernelArgs *k, DevSelectAcc *acc)
{
    for (int32_t s = 0; s < f->r.n; s++)
        load(f, s, k->opnd[f->r.n + s]->data, 0, &acc->v[s], &acc->bits[s]);
}

/* The relation of a to b, numbered as ir_select_reducer's table is. */
static int32_t relation(DevRedDom d, DevAcc a, DevAcc b)
{
    if (d == DEV_RED_F) {
        if (a.f < b.f)
            return 0;
        if (a.f == b.f)
            return 1;
        if (a.f > b.f)
            return 2;
        return isnan(a.f) ? (isnan(b.f) ? 5 : 3) : 4;
    }
    if (d == DEV_RED_S)
        return a.s < b.s ? 0 : a.s == b.s ? 1 : 2;
    if (d == DEV_RED_P) /* the partitioner's "valid" flags */
        return (a.u ? 2 : 0) + (b.u ? 1 : 0);
    return a.u < b.u ? 0 : a.u == b.u ? 1 : 2;
}

void dev_select_fold(const DevSelectFold *f, DevSelectAcc *acc, const DevValue *const *x, int64_t off)
{
    int32_t n = f->r.n, comb = 0, radix = 1;
    DevSelectAcc in;
    for (int32_t s = 0; s < n; s++) {
        load(f, s, x[s]->data, off, &in.v[s], &in.bits[s]);
        comb += radix * relation(f->dom[s], acc->v[s], in.v[s]);
        radix *= f->r.nrel[s];
    }
    const uint8_t *pick = f->r.pick[comb];
    DevSelectAcc old = *acc;
    for (int32_t j = 0; j < n; j++) {
        const DevSelectAcc *from = pick[j] < n ? &old : &in;
        int32_t s = pick[j] % n;
        acc->v[j] = from->v[s];
        acc->bits[j] = from->bits[s];
    }
}

void dev_select_acc_store(const DevSelectFold *f, const DevSelectAcc *acc, DevValue **res, int64_t o)
{
    for (int32_t j = 0; j < f->r.n; j++)
        memcpy(res[j]->data + (size_t)o * f->size[j], &acc->bits[j], f->size[j]);
}
