/*
 * k_control.c: ops that wrap a computation or a value without computing
 * elements of their own: fusion, the async wrappers, copy-start/copy-done,
 * scan, and the one-member forms of ragged-all-to-all. Each has XLA's
 * meaning on one device, run at the start; with a collective runtime the
 * collective pairs (and an async-start wrapping one collective) run
 * asynchronously instead (exec.c, schedule.c).
 *
 *   fusion(x...), calls=F            = call F(x...)
 *   async-start(x...), calls=F       = ((x...), F(x...), context...)
 *       XLA's async tuple: element 0 the operands, 1 the result, then any
 *       context elements the shape declares (u32[] or s32[] handles, zero)
 *   async-update(s)                  = s
 *   async-done(s)                    = s{1}
 *   copy-start(x)                    = (x, x, u32[] 0)   (dst, src, context)
 *   copy-done(s)                     = s{0}
 *   scan(in..., init...), dimensions={d}, num_carries=C, is_reverse, to_apply=F
 *       for i in 0..N-1 (N = in[0].dims[d]; reversed: j = N-1-i, else j = i):
 *           (out_j..., carry...) = F(in...[j along d], carry...)
 *       result (out..., carry...): each out stacks its out_j along d; a
 *       non-tuple shape is the single element. (XLA's ScanExpander.)
 */
#include "device.h"

#include <string.h>

/* A tuple of new references to vals[0..n), with shape `s` (may be NULL). */
static DevValue *tuple_of(const IrShape *s, int32_t n, DevValue **vals)
{
    DevValue **el = ts_malloc((size_t)(n ? n : 1) * sizeof *el);
    if (!el)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        el[i] = dev_value_ref(vals[i]);
    DevValue *v = dev_value_tuple(s, n, el);
    ts_free(el);
    return v;
}

static IrStatus need_callee(const DevKernelArgs *k)
{
    if (k->ins->ncalled < 1)
        return dev_kernel_error(k, IR_EINPUT, "%s needs a called computation (calls=)",
                                ir_op_name(k->ins->op));
    return IR_OK;
}

IrStatus dev_k_fusion(const DevKernelArgs *k, DevValue **out)
{
    IrStatus st = need_callee(k);
    return st != IR_OK ? st : dev_call(k, k->ins->called[0], k->nopnd, k->opnd, out);
}

DevValue *dev_async_operands(const DevKernelArgs *k)
{
    const IrShape *s = &k->ins->shape;
    /* One operand of array shape stands for itself (all-gather-start). */
    if (k->nopnd == 1 && s->type == IR_TUPLE && s->ntuple >= 1 && s->tuple[0].type != IR_TUPLE)
        return dev_value_ref(k->opnd[0]);
    return tuple_of(s->type == IR_TUPLE && s->ntuple >= 1 ? &s->tuple[0] : NULL, k->nopnd, k->opnd);
}

IrStatus dev_async_assemble(const DevKernelArgs *k, DevValue *el0, DevValue *result, DevValue **out)
{
    const IrShape *s = &k->ins->shape;
    if (s->type != IR_TUPLE || s->ntuple < 2) {
        dev_value_unref(el0);
        dev_value_unref(result);
        return dev_kernel_error(k, IR_EINPUT, "%s must have the shape ((operands), result, "
                                "context...)", ir_op_name(k->ins->op));
    }
    int32_t n = s->ntuple;
    DevValue **el = ts_calloc((size_t)n, sizeof *el);
    if (!el) {
        dev_value_unref(el0);
        dev_value_unref(result);
        return IR_ENOMEM;
    }
    el[0] = el0;
    el[1] = result;
    bool ok = el[0] != NULL && el[1] != NULL;
    for (int32_t i = 2; i < n && ok; i++)
        ok = (el[i] = dev_value_zeros(&s->tuple[i])) != NULL;
    if (!ok) {
        for (int32_t i = 0; i < n; i++)
            dev_value_unref(el[i]);
        ts_free(el);
        return IR_ENOMEM;
    }
    *out = dev_value_tuple(s, n, el);
    ts_free(el);
    return *out ? IR_OK : IR_ENOMEM;
}

IrStatus dev_async_tuple(const DevKernelArgs *k, DevValue *result, DevValue **out)
{
    const IrShape *s = &k->ins->shape;
    DevValue *el0 = s->type == IR_TUPLE && s->ntuple >= 2 ? dev_async_operands(k) : NULL;
    if (s->type == IR_TUPLE && s->ntuple >= 2 && !el0) {
        dev_value_unref(result);
        return IR_ENOMEM;
    }
    return dev_async_assemble(k, el0, result, out);
}

const IrInstr *dev_async_wrapped_collective(const DevKernelArgs *k, int32_t *arg, int32_t max)
{
    if (k->ins->op != OP_ASYNC_START || k->ins->ncalled < 1 || k->ins->called[0] < 0 ||
        k->ins->called[0] >= k->m->ncomp)
        return NULL;
    const IrComputation *c = k->m->comp[k->ins->called[0]];
    if (c->root < 0 || c->root >= c->ninstr)
        return NULL;
    const IrInstr *r = &c->instr[c->root];
    switch (r->op) {
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL:
    case OP_COLLECTIVE_PERMUTE: break;
    default: return NULL;
    }
    if (r->nopnd > max || r->a.x->control_predecessors.n > 0)
        return NULL;
    for (int32_t j = 0; j < r->nopnd; j++) {
        int32_t o = r->opnd[j];
        if (o < 0 || o >= c->ninstr || c->instr[o].op != OP_PARAMETER)
            return NULL;
        int64_t pn = c->instr[o].a.parameter_number;
        if (pn < 0 || pn >= k->nopnd || !ir_shape_equal(&k->opnd[pn]->shape, &c->instr[o].shape))
            return NULL;
        arg[j] = (int32_t)pn;
    }
    return r;
}

IrStatus dev_k_async_start(const DevKernelArgs *k, DevValue **out)
{
    IrStatus st = need_callee(k);
    DevValue *r = NULL;
    if (st == IR_OK)
        st = dev_call(k, k->ins->called[0], k->nopnd, k->opnd, &r);
    return st != IR_OK ? st : dev_async_tuple(k, r, out);
}

/* Element `i` of the tuple operand (async-done, copy-done). */
IrStatus dev_k_tuple_part(const DevKernelArgs *k, int32_t i, DevValue **out)
{
    DevValue *t = k->nopnd == 1 ? k->opnd[0] : NULL;
    if (!t || t->shape.type != IR_TUPLE || t->nelems <= i)
        return dev_kernel_error(k, IR_EINPUT, "%s needs the tuple its -start made",
                                ir_op_name(k->ins->op));
    *out = dev_value_ref(t->elems[i]);
    return IR_OK;
}

IrStatus dev_k_copy_start(const DevKernelArgs *k, DevValue **out)
{
    const IrShape *s = &k->ins->shape;
    if (k->nopnd != 1 || s->type != IR_TUPLE || s->ntuple != 3)
        return dev_kernel_error(k, IR_EINPUT, "copy-start must have the shape (dst, src, u32[])");
    /* Values are immutable while shared (kernels write in place only into
     * sole owners), so dst can share src's buffer. */
    DevValue *el[3] = {dev_value_ref(k->opnd[0]), dev_value_ref(k->opnd[0]),
                       dev_value_zeros(&s->tuple[2])};
    *out = dev_value_tuple(s, 3, el);
    return *out ? IR_OK : IR_ENOMEM;
}

/* ---- scan ---- */

/* Bytes of one step of `v` along dimension d: the product of the later
 * dims times the element size (the inner block), and the count of outer
 * blocks before d. */
static void step_blocks(const IrShape *s, int64_t d, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = (int64_t)ir_type_size(s->type);
    for (int32_t i = 0; i < s->rank; i++) {
        if (i < d)
            *outer *= s->dims[i];
        else if (i > d)
            *inner *= s->dims[i];
    }
}

/* Copy step j of `big` (dimension d) to or from `small` (big without d). */
static void step_copy(DevValue *big, DevValue *small, int64_t d, int64_t j, bool to_small)
{
    int64_t outer, inner;
    step_blocks(&big->shape, d, &outer, &inner);
    int64_t n = big->shape.dims[d];
    for (int64_t o = 0; o < outer && inner > 0; o++) {
        uint8_t *b = big->data + (o * n + j) * inner, *s = small->data + o * inner;
        memcpy(to_small ? s : b, to_small ? b : s, (size_t)inner);
    }
}

/* A zeroed array of `s` without dimension d (one step's slice). */
static DevValue *step_value(const IrShape *s, int64_t d)
{
    int64_t dims[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < s->rank; i++)
        if (i != d)
            dims[r++] = s->dims[i];
    IrShape t = {.type = s->type, .rank = r, .dims = dims};
    return dev_value_new(&t);
}

typedef struct Scan {
    int64_t d, n;
    int32_t nin, ncarry, nout;
    DevValue **arg;   /* nin step slices, then ncarry carries */
    DevValue **outs;  /* nout stacked outputs */
} Scan;

static IrStatus scan_check(const DevKernelArgs *k, Scan *sc)
{
    const IrInstr *ins = k->ins;
    sc->ncarry = (int32_t)ins->a.x->num_carries;
    sc->nin = k->nopnd - sc->ncarry;
    sc->d = ins->a.dimensions.n == 1 ? ins->a.dimensions.v[0] : -1;
    int32_t nres = ins->shape.type == IR_TUPLE ? ins->shape.ntuple : 1;
    sc->nout = nres - sc->ncarry;
    if (sc->ncarry < 0 || sc->nin < 1 || sc->nout < 0 || ins->ncalled < 1)
        return dev_kernel_error(k, IR_EINPUT, "scan needs inputs, num_carries <= its results "
                                "and to_apply");
    for (int32_t i = 0; i < sc->nin; i++) {
        const IrShape *s = &k->opnd[i]->shape;
        if (s->type == IR_TUPLE || sc->d < 0 || sc->d >= s->rank ||
            s->dims[sc->d] != k->opnd[0]->shape.dims[sc->d])
            return dev_kernel_error(k, IR_EINPUT, "scan input %d has no dimension %lld of the "
                                    "scan's length", (int)i, (long long)sc->d);
    }
    sc->n = k->opnd[0]->shape.dims[sc->d];
    for (int32_t i = 0; i < sc->nout; i++) {
        const IrShape *s = nres == 1 ? &ins->shape : &ins->shape.tuple[i];
        if (s->type == IR_TUPLE || s->rank <= sc->d || s->dims[sc->d] != sc->n)
            return dev_kernel_error(k, IR_EINPUT, "scan output %d has no dimension %lld of "
                                    "length %lld", (int)i, (long long)sc->d, (long long)sc->n);
    }
    return IR_OK;
}

/* One step: call F on the slices and carries, store its outputs at step j
 * and take its carries. */
static IrStatus scan_step(const DevKernelArgs *k, Scan *sc, int64_t j)
{
    for (int32_t i = 0; i < sc->nin; i++)
        step_copy(k->opnd[i], sc->arg[i], sc->d, j, true);
    DevValue *r = NULL;
    IrStatus st = dev_call(k, k->ins->called[0], sc->nin + sc->ncarry, sc->arg, &r);
    if (st != IR_OK)
        return st;
    int32_t nres = sc->nout + sc->ncarry;
    bool tup = r->shape.type == IR_TUPLE;
    if ((tup && r->nelems != nres) || (!tup && nres != 1)) {
        dev_value_unref(r);
        return dev_kernel_error(k, IR_EINPUT, "to_apply returns %d values, the scan has %d",
                                tup ? (int)r->nelems : 1, (int)nres);
    }
    for (int32_t i = 0; i < nres && st == IR_OK; i++) {
        DevValue *e = tup ? r->elems[i] : r;
        if (i < sc->nout) {
            DevValue *o = sc->outs[i];
            if (e->shape.type != o->shape.type || e->nbytes * sc->n != o->nbytes)
                st = dev_kernel_error(k, IR_EINPUT, "to_apply output %d does not fit the scan "
                                      "output", (int)i);
            else
                step_copy(o, e, sc->d, j, false);
        } else {
            DevValue **c = &sc->arg[sc->nin + i - sc->nout];
            dev_value_unref(*c);
            *c = dev_value_ref(e);
        }
    }
    dev_value_unref(r);
    return st;
}

static IrStatus scan_result(const DevKernelArgs *k, Scan *sc, DevValue **out)
{
    int32_t nres = sc->nout + sc->ncarry;
    DevValue *el[64];
    if (nres > 64)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "scan with more than 64 results");
    for (int32_t i = 0; i < sc->nout; i++) {
        el[i] = sc->outs[i];
        sc->outs[i] = NULL;
    }
    for (int32_t i = 0; i < sc->ncarry; i++) {
        el[sc->nout + i] = sc->arg[sc->nin + i];
        sc->arg[sc->nin + i] = NULL;
    }
    if (k->ins->shape.type != IR_TUPLE) {
        *out = el[0];
        return IR_OK;
    }
    *out = dev_value_tuple(&k->ins->shape, nres, el);
    return *out ? IR_OK : IR_ENOMEM;
}

IrStatus dev_k_scan(const DevKernelArgs *k, DevValue **out)
{
    Scan sc = {0};
    IrStatus st = scan_check(k, &sc);
    if (st != IR_OK)
        return st;
    sc.arg = ts_calloc((size_t)(sc.nin + sc.ncarry), sizeof *sc.arg);
    sc.outs = ts_calloc((size_t)(sc.nout ? sc.nout : 1), sizeof *sc.outs);
    st = sc.arg && sc.outs ? IR_OK : IR_ENOMEM;
    for (int32_t i = 0; i < sc.nin && st == IR_OK; i++)
        if (!(sc.arg[i] = step_value(&k->opnd[i]->shape, sc.d)))
            st = IR_ENOMEM;
    for (int32_t i = 0; i < sc.ncarry && st == IR_OK; i++)
        sc.arg[sc.nin + i] = dev_value_ref(k->opnd[sc.nin + i]);
    for (int32_t i = 0; i < sc.nout && st == IR_OK; i++) {
        const IrShape *s = k->ins->shape.type == IR_TUPLE ? &k->ins->shape.tuple[i]
                                                          : &k->ins->shape;
        if (!(sc.outs[i] = dev_value_new(s)))
            st = IR_ENOMEM;
    }
    for (int64_t i = 0; i < sc.n && st == IR_OK; i++)
        st = scan_step(k, &sc, k->ins->a.x->is_reverse ? sc.n - 1 - i : i);
    if (st == IR_OK)
        st = scan_result(k, &sc, out);
    for (int32_t i = 0; sc.arg && i < sc.nin + sc.ncarry; i++)
        dev_value_unref(sc.arg[i]);
    for (int32_t i = 0; sc.outs && i < sc.nout; i++)
        dev_value_unref(sc.outs[i]);
    ts_free(sc.arg);
    ts_free(sc.outs);
    return st;
}

/* ---- ragged-all-to-all within a one-member group ---- */

/* ragged-all-to-all(input, output, input_offsets, send_sizes,
 * output_offsets, recv_sizes): every chunk e goes to this device itself,
 * so output rows [output_offsets[e], + send_sizes[e]) become input rows
 * [input_offsets[e], + send_sizes[e]) (rows: along dimension 0); the rest
 * of `output` is kept. Example: input [a b c d], output [0 0 0 0 0],
 * input_offsets {1}, send_sizes {2}, output_offsets {3}: [0 0 0 b c]. */
IrStatus dev_k_ragged_all_to_all_self(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 6)
        return dev_kernel_error(k, IR_EINPUT, "ragged-all-to-all takes 6 operands");
    DevValue *in = k->opnd[0], *o = k->opnd[1], *ioff = k->opnd[2], *size = k->opnd[3],
             *ooff = k->opnd[4];
    if (in->shape.type == IR_TUPLE || o->shape.type != in->shape.type || in->shape.rank < 1 ||
        o->shape.rank != in->shape.rank ||
        !ir_dims_equal(in->shape.dims + 1, o->shape.dims + 1, in->shape.rank - 1))
        return dev_kernel_error(k, IR_EINPUT, "ragged-all-to-all input and output must be "
                                "arrays of one type with rows of one shape");
    int64_t n = dev_value_elements(ioff);
    if (dev_value_elements(size) != n || dev_value_elements(ooff) != n)
        return dev_kernel_error(k, IR_EINPUT, "offsets and sizes must have one length");
    int64_t row = in->shape.dims[0] ? in->nbytes / in->shape.dims[0] : 0;
    DevValue *r = dev_value_clone(o);
    if (!r)
        return IR_ENOMEM;
    for (int64_t e = 0; e < n; e++) {
        int64_t a = dev_load_i64(ioff->shape.type, ioff->data, e);
        int64_t c = dev_load_i64(size->shape.type, size->data, e);
        int64_t b = dev_load_i64(ooff->shape.type, ooff->data, e);
        if (a < 0 || c < 0 || b < 0 || c > in->shape.dims[0] - a || c > o->shape.dims[0] - b) {
            dev_value_unref(r);
            return dev_kernel_error(k, IR_EINPUT, "chunk %lld (offset %lld, size %lld, to %lld) "
                                    "is out of bounds", (long long)e, (long long)a, (long long)c,
                                    (long long)b);
        }
        if (c > 0)
            memcpy(r->data + b * row, in->data + a * row, (size_t)(c * row));
    }
    *out = r;
    return IR_OK;
}
