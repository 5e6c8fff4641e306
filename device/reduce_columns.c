/*
 * reduce_columns.c: a reduce whose reducer is not one of the simple ones
 * (k_reduce.c's fast path) but a small expression of exact scalar
 * operations, run over a block of outputs at once instead of one call of
 * the reducer per element. JAX's argmax is the common case: two inputs
 * (values, iota), a reducer of compares, ands, ors and selects:
 *
 *   reduce(f32[1024,4] x, s32[1024,4] iota, -inf, 0), dimensions={1}
 *
 * k_reduce.c's general path calls it 4096 times through the interpreter
 * (a value allocated per scalar instruction); here each of the reducer's
 * instructions runs once a reduced position on arrays of up to IR_REDUCER_BLOCK
 * outputs (its elementwise kernel), with the accumulators as arrays:
 *
 *   acc = inits (broadcast over the block)
 *   for r in the reduced positions (row-major):
 *       acc = reducer(acc, x[block, r], iota[block, r])      elementwise
 *
 * Each output still starts from its init and folds its elements in
 * row-major order, and every operation allowed is exactly rounded in IEEE
 * arithmetic (or not arithmetic at all), so the results are the general
 * path's bit for bit. A reducer with anything else (a transcendental
 * function, whose vector and scalar kernels may round differently; a
 * call; a non-scalar value) is left to the general path.
 */
#include "device.h"

#include <string.h>

/* A value of type t over the block, every element the scalar at src. */
static DevValue *splat(IrType t, int64_t *dims, const void *src)
{
    IrShape s = {.type = t, .rank = 1, .dims = dims};
    DevValue *v = dev_value_new_uninit(&s);
    size_t es = ir_type_size(t);
    for (int64_t i = 0; v && i < dims[0]; i++)
        memcpy(v->data + (size_t)i * es, src, es);
    return v;
}

typedef struct Columns {
    const DevKernelArgs *k;
    const IrComputation *c;
    int32_t n;
    int32_t *order, norder;
    DevValue **val;          /* per instruction of c: its value over the block */
    int64_t dims[1];         /* the block's outputs */
} Columns;

/* Each instruction of the reducer once over the block: the parameters are
 * acc (n) then in (n); the new accumulators replace acc. */
static IrStatus step(Columns *cl, DevValue **acc, DevValue **in)
{
    const IrComputation *c = cl->c;
    IrStatus st = IR_OK;
    for (int32_t q = 0; q < cl->norder && st == IR_OK; q++) {
        int32_t i = cl->order[q];
        const IrInstr *ins = &c->instr[i];
        if (ins->op == OP_CONSTANT || ins->op == OP_TUPLE)
            continue; /* constants splatted once; the root tuple is read below */
        dev_value_unref(cl->val[i]);
        cl->val[i] = NULL;
        if (ins->op == OP_PARAMETER) {
            int64_t p = ins->a.parameter_number;
            cl->val[i] = dev_value_ref(p < cl->n ? acc[p] : in[p - cl->n]);
            continue;
        }
        IrInstr wide = *ins;
        wide.shape = (IrShape){.type = ins->shape.type, .rank = 1, .dims = cl->dims};
        /* Operands pinned: a kernel may write into an operand it holds
         * the only reference to, and another instruction may read it. */
        DevValue *opnd[3];
        int32_t no = ins->nopnd < 3 ? ins->nopnd : 3;
        for (int32_t j = 0; j < no; j++)
            opnd[j] = dev_value_ref(cl->val[ins->opnd[j]]);
        DevKernelArgs kk = {cl->k->m, c, &wide, no, opnd, cl->k->opt, cl->k->d};
        st = dev_k_elementwise(&kk, &cl->val[i]);
        for (int32_t j = 0; j < no; j++)
            dev_value_unref(opnd[j]);
    }
    const IrInstr *root = &c->instr[c->root];
    for (int32_t j = 0; j < cl->n && st == IR_OK; j++) {
        DevValue *v = cl->val[root->op == OP_TUPLE ? root->opnd[j] : c->root];
        dev_value_unref(acc[j]);
        acc[j] = dev_value_ref(v);
    }
    return st;
}

/* The outputs [first, first + cl->dims[0]) of the reduce: kept[o] is
 * output o's offset in the inputs, rd[r] reduced position r's. */
static IrStatus block(Columns *cl, const int64_t *kept, const int64_t *rd, int64_t nred, DevValue **res, int64_t first)
{
    const DevKernelArgs *k = cl->k;
    int32_t n = cl->n;
    int64_t b = cl->dims[0];
    DevValue *acc[2 * IR_MAX_RANK] = {0}, *in[2 * IR_MAX_RANK] = {0};
    IrStatus st = IR_OK;
    for (int32_t j = 0; j < n && st == IR_OK; j++) {
        IrShape s = {.type = k->opnd[j]->shape.type, .rank = 1, .dims = cl->dims};
        acc[j] = splat(k->opnd[n + j]->shape.type, cl->dims, k->opnd[n + j]->data);
        in[j] = dev_value_new_uninit(&s);
        st = acc[j] && in[j] ? IR_OK : IR_ENOMEM;
    }
    for (int64_t r = 0; r < nred && st == IR_OK; r++) {
        for (int32_t j = 0; j < n; j++) {
            size_t es = ir_type_size(in[j]->shape.type);
            const uint8_t *src = k->opnd[j]->data + (size_t)rd[r] * es;
            for (int64_t o = 0; o < b; o++)
                memcpy(in[j]->data + (size_t)o * es, src + (size_t)kept[o] * es, es);
        }
        st = step(cl, acc, in);
    }
    for (int32_t j = 0; j < n && st == IR_OK; j++) {
        size_t es = ir_type_size(res[j]->shape.type);
        memcpy(res[j]->data + (size_t)first * es, acc[j]->data, (size_t)b * es);
    }
    for (int32_t j = 0; j < n; j++) {
        dev_value_unref(acc[j]);
        dev_value_unref(in[j]);
    }
    return st;
}

/* Offsets of the index space dims[0..nd) with strides str, row-major. */
static void offsets(int32_t nd, const int64_t *dims, const int64_t *str, int64_t count, int64_t *out)
{
    int64_t idx[IR_MAX_RANK] = {0}, off = 0;
    for (int64_t q = 0; q < count; q++) {
        out[q] = off;
        for (int32_t i = nd - 1; i >= 0; i--) {
            off += str[i];
            if (++idx[i] < dims[i])
                break;
            off -= dims[i] * str[i];
            idx[i] = 0;
        }
    }
}

/* The splatted constants of the reducer, once for every block. */
static IrStatus constants(Columns *cl)
{
    const IrComputation *c = cl->c;
    for (int32_t i = 0; i < c->ninstr; i++) {
        if (c->instr[i].op != OP_CONSTANT)
            continue;
        DevKernelArgs kk = {cl->k->m, c, &c->instr[i], 0, NULL, cl->k->opt, cl->k->d};
        DevValue *s = NULL;
        IrStatus st = dev_k_constant(&kk, &s);
        if (st == IR_OK && !(cl->val[i] = splat(s->shape.type, cl->dims, s->data)))
            st = IR_ENOMEM;
        dev_value_unref(s);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

bool dev_reduce_columns_fit(const DevKernelArgs *k, int32_t n)
{
    if (n < 1 || n > 2 * IR_MAX_RANK || k->nopnd != 2 * n)
        return false;
    IrType types[4 * IR_MAX_RANK];
    for (int32_t i = 0; i < 2 * n; i++)
        types[i] = k->opnd[i]->shape.type;
    return ir_reduce_is_blockwise(k->m, k->ins, types);
}

IrStatus dev_reduce_columns(const DevKernelArgs *k, int32_t n, const bool *red, DevValue **res)
{
    const IrShape *in = &k->opnd[0]->shape;
    int64_t st_[IR_MAX_RANK], kd[IR_MAX_RANK], ks[IR_MAX_RANK], rdims[IR_MAX_RANK], rs[IR_MAX_RANK];
    ir_shape_strides(in, st_);
    int32_t nk = 0, nr = 0;
    int64_t nout = 1, nred = 1;
    for (int32_t d = 0; d < in->rank; d++) {
        if (red[d]) {
            rdims[nr] = in->dims[d], rs[nr++] = st_[d], nred *= in->dims[d];
        } else {
            kd[nk] = in->dims[d], ks[nk++] = st_[d], nout *= in->dims[d];
        }
    }
    const IrComputation *c = k->m->comp[k->ins->called[0]];
    Columns cl = {k, c, n, NULL, 0, NULL, {0}};
    int64_t *kept = ts_malloc((size_t)(nout > 0 ? nout : 1) * sizeof *kept);
    int64_t *rd = ts_malloc((size_t)(nred > 0 ? nred : 1) * sizeof *rd);
    cl.order = ts_malloc((size_t)(c->ninstr > 0 ? c->ninstr : 1) * sizeof *cl.order);
    cl.val = ts_calloc((size_t)(c->ninstr > 0 ? c->ninstr : 1), sizeof *cl.val);
    IrStatus st = kept && rd && cl.order && cl.val ? IR_OK : IR_ENOMEM;
    IrExecOrderError e;
    if (st == IR_OK && (st = ir_exec_order(c, cl.order, &cl.norder, &e)) == IR_EINPUT)
        st = dev_kernel_error(k, IR_EINPUT, "reduce: the reducer %s has no order (a cycle)", c->name);
    if (st == IR_OK) {
        offsets(nk, kd, ks, nout, kept);
        offsets(nr, rdims, rs, nred, rd);
    }
    for (int64_t first = 0; st == IR_OK && first < nout; first += IR_REDUCER_BLOCK) {
        int64_t b = nout - first < IR_REDUCER_BLOCK ? nout - first : IR_REDUCER_BLOCK;
        if (b != cl.dims[0]) { /* the first block, or the last shorter one: constants of its size */
            for (int32_t i = 0; i < c->ninstr; i++) {
                dev_value_unref(cl.val[i]);
                cl.val[i] = NULL;
            }
            cl.dims[0] = b;
            st = constants(&cl);
        }
        if (st == IR_OK)
            st = block(&cl, kept + first, rd, nred, res, first);
    }
    for (int32_t i = 0; cl.val && i < c->ninstr; i++)
        dev_value_unref(cl.val[i]);
    ts_free(cl.val);
    ts_free(cl.order);
    ts_free(kept);
    ts_free(rd);
    return st == IR_ENOMEM && k->d->status == IR_OK ? dev_kernel_oom(k, NULL) : st;
}
