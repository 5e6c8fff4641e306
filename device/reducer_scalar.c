/*
 * reducer_scalar.c: a reducer (or select, or scatter) computation of
 * scalar elementwise ops run element by element without the interpreter.
 * dev_call runs a computation through the executor: a value allocated,
 * charged to the device and freed for every scalar instruction, each
 * call (perf on an (add, max) tuple reduce of f32[16,10]: most of the
 * time in shape_dup, calloc and free). Here each instruction has a fixed
 * scalar view whose bytes live in the program; a step writes the
 * arguments' bytes into the parameters' views and runs each instruction's
 * elementwise kernel (dev_k_elementwise_range, the interpreter's own) on
 * one element. Same kernels, same order: the interpreter's bits.
 *
 * A computation qualifies when ir_scalar_computation says so: every
 * instruction a scalar parameter, constant, copy, or an op of the
 * elementwise kernel, its root such a value or a tuple of them.
 */
#include "device.h"

#include <string.h>

void dev_scalar_prog_free(DevScalarProg *p)
{
    ts_free(p->order);
    ts_free(p->val);
    ts_free(p->store);
    memset(p, 0, sizeof *p);
}

/* The constants' bytes, once. */
static bool load_constants(DevScalarProg *p, const DevKernelArgs *k)
{
    const IrComputation *c = p->c;
    for (int32_t q = 0; q < p->norder; q++) {
        const IrInstr *x = &c->instr[p->order[q]];
        if (x->op != OP_CONSTANT)
            continue;
        DevKernelArgs kk = {k->m, c, x, 0, NULL, k->opt, k->d};
        DevValue *v = NULL;
        bool ok = dev_k_constant(&kk, &v) == IR_OK && v->nbytes == p->val[p->order[q]].nbytes;
        if (ok)
            memcpy(p->store[p->order[q]], v->data, (size_t)v->nbytes);
        dev_value_unref(v);
        if (!ok)
            return false;
    }
    return true;
}

bool dev_scalar_prog_init(DevScalarProg *p, const DevKernelArgs *k, int32_t comp)
{
    memset(p, 0, sizeof *p);
    if (comp < 0 || comp >= k->m->ncomp || !k->m->comp[comp])
        return false;
    const IrComputation *c = k->m->comp[comp];
    if (c->root < 0 || c->root >= c->ninstr || c->ninstr < 1)
        return false;
    const IrInstr *root = &c->instr[c->root];
    if (!ir_scalar_computation(k->m, comp))
        return false;
    p->c = c;
    p->k = k;
    p->order = ts_malloc((size_t)c->ninstr * sizeof *p->order);
    p->val = ts_calloc((size_t)c->ninstr, sizeof *p->val);
    p->store = ts_calloc((size_t)c->ninstr, sizeof *p->store);
    IrExecOrderError e;
    if (!p->order || !p->val || !p->store || ir_exec_order(c, p->order, &p->norder, &e) != IR_OK) {
        dev_scalar_prog_free(p);
        return false;
    }
    for (int32_t i = 0; i < c->ninstr; i++) {
        DevValue *v = &p->val[i];
        v->shape = (IrShape){.type = c->instr[i].shape.type};
        v->data = p->store[i];
        v->nbytes = (int64_t)ir_type_size(v->shape.type);
        v->refs = 1;
    }
    for (int32_t j = 0; root->op == OP_TUPLE && j < root->nopnd; j++)
        if (root->opnd[j] < 0 || root->opnd[j] >= c->ninstr || root->opnd[j] == c->root) {
            dev_scalar_prog_free(p);
            return false;
        }
    if (!load_constants(p, k)) {
        dev_scalar_prog_free(p);
        return false;
    }
    return true;
}

int32_t dev_scalar_prog_results(const DevScalarProg *p)
{
    const IrInstr *root = &p->c->instr[p->c->root];
    return root->op == OP_TUPLE ? root->nopnd : 1;
}

const DevValue *dev_scalar_prog_result(const DevScalarProg *p, int32_t j)
{
    const IrInstr *root = &p->c->instr[p->c->root];
    return &p->val[root->op == OP_TUPLE ? root->opnd[j] : p->c->root];
}

IrStatus dev_scalar_prog_run(DevScalarProg *p, int32_t nargs, const DevValue *const *args)
{
    const IrComputation *c = p->c;
    const DevKernelArgs *k = p->k;
    for (int32_t q = 0; q < p->norder; q++) {
        int32_t i = p->order[q];
        const IrInstr *x = &c->instr[i];
        DevValue *v = &p->val[i];
        switch (x->op) {
        case OP_CONSTANT:
            continue;
        case OP_PARAMETER: {
            int64_t pn = x->a.parameter_number;
            if (pn < 0 || pn >= nargs || args[pn]->shape.type != v->shape.type || args[pn]->shape.rank != 0)
                return dev_kernel_error(k, IR_EINPUT, "%s: computation %s's parameter(%lld) does not fit",
                                        ir_op_name(k->ins->op), c->name, (long long)pn);
            memcpy(v->data, args[pn]->data, (size_t)v->nbytes);
            continue;
        }
        case OP_TUPLE:
            continue; /* the root: its elements are read by the caller */
        case OP_COPY:
            if (x->nopnd != 1 || p->val[x->opnd[0]].shape.type != v->shape.type)
                return dev_kernel_error(k, IR_EINPUT, "%s: copy changes the type", x->name);
            memcpy(v->data, p->val[x->opnd[0]].data, (size_t)v->nbytes);
            continue;
        default: {
            DevValue *opnd[3];
            for (int32_t j = 0; j < x->nopnd; j++)
                opnd[j] = &p->val[x->opnd[j]];
            DevKernelArgs kk = {k->m, c, x, x->nopnd, opnd, k->opt, k->d};
            IrStatus st = dev_k_elementwise_check(&kk);
            if (st == IR_OK)
                st = dev_k_elementwise_range(&kk, 1, v);
            if (st != IR_OK)
                return st;
        }
        }
    }
    return IR_OK;
}
