/*
 * expand_scan.c: every scan becomes a while loop before propagation, as
 * XLA's ScanExpander does, so that the while's rules (propagation through
 * the loop state, the partitioned body) partition it: the dims a scan does
 * not scan stay partitioned, its body is partitioned like any loop body,
 * and its scanned dim, when tiled, is sliced by the dynamic-slice and
 * dynamic-update-slice rules (spmd_ops.c), which keep the other dims
 * partitioned.
 *
 *   s = (f32[L,K], f32[K]) scan(x, c0), dimensions={0}, num_carries=1, to_apply=F
 *
 * becomes s = call(x, c0), to_apply=E, keeping the name, shape and sharding:
 *
 *   E(x, c0):  w = while((0, x, c0, zeros f32[L,K])), condition=C, body=B
 *              ROOT (gte(w, 3), gte(w, 2))               // outputs, carries
 *   C(st):     ROOT compare(gte(st, 0), L), direction=LT
 *   B(st):     i = gte(st, 0); j = i (is_reverse: L - 1 - i)
 *              r = call(reshape(dynamic-slice(x, j, 0), sizes {1,K}) -> f32[K], c), to_apply=F
 *              ROOT (i + 1, x, gte(r, 1),
 *                    dynamic-update-slice(acc, reshape(gte(r, 0)) -> f32[1,K], j, 0))
 *
 * The reference still runs scan itself (device/k_control.c), so the oracle
 * compares this expansion with an independent kernel.
 */
#include "partition.h"

#include <string.h>

typedef struct Ex {
    IrModule *m;
    IrComputation *c;
    IrDiag *d;
} Ex;

static IrStatus ex_oom(Ex *x)
{
    return ir_oom(x->d, "while expanding scans");
}

/* Append an instruction; its shape from shape inference (`shape` is the
 * hint parameters, constants and reshapes need). -1 on error (recorded). */
static int32_t emit(Ex *x, IrOpcode op, const IrShape *shape, int32_t n, const int32_t *opnd, const IrAttrs *a,
                    int32_t ncalled, const int32_t *called)
{
    if (x->d->status != IR_OK)
        return -1;
    for (int32_t k = 0; k < n; k++)
        if (opnd[k] < 0)
            return -1;
    IrArena *ar = x->m->arena;
    IrInstr ins = {.a.x = &ir_no_attrs_x, .op = op, .nopnd = n, .ncalled = ncalled};
    if (a)
        ins.a = *a;
    if (shape && ir_shape_copy(ar, &ins.shape, shape) != IR_OK)
        return ex_oom(x), -1;
    ins.name = ir_unique_name(x->m, ir_op_name(op));
    ins.opnd = ir_alloc_array(ar, (size_t)(n > 0 ? n : 1), sizeof(int32_t));
    ins.called = ir_alloc_array(ar, (size_t)(ncalled > 0 ? ncalled : 1), sizeof(int32_t));
    if (!ins.name || !ins.opnd || !ins.called)
        return ex_oom(x), -1;
    if (n > 0)
        memcpy(ins.opnd, opnd, (size_t)n * sizeof(int32_t));
    if (ncalled > 0)
        memcpy(ins.called, called, (size_t)ncalled * sizeof(int32_t));
    IrShape out;
    IrDiag d = {0};
    if (ir_infer_shape(x->m, x->c, &ins, &out, ar, &d) != IR_OK) {
        ir_error(x->d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "expanding a scan: %s: %s", ir_op_name(op),
                 d.msg ? d.msg : "shape inference failed");
        ir_diag_clear(&d);
        return -1;
    }
    ins.shape = out;
    int32_t r = ir_add_instr(x->m, x->c, &ins);
    if (r < 0)
        ex_oom(x);
    return r;
}

static int32_t param(Ex *x, int64_t number, const IrShape *shape)
{
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.parameter_number = number;
    return emit(x, OP_PARAMETER, shape, 0, NULL, &a, 0, NULL);
}

/* T[] zero (all bits 0 is zero in every type), or s32[] v. */
static int32_t scalar(Ex *x, IrType t, int32_t v)
{
    size_t n = ir_type_size(t);
    uint8_t *lit = ir_alloc(x->m->arena, n > 0 ? n : 1);
    if (!lit)
        return ex_oom(x), -1;
    memset(lit, 0, n > 0 ? n : 1);
    if (t == IR_S32)
        memcpy(lit, &v, sizeof v);
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.literal = lit;
    a.literal_bytes = (int64_t)n;
    IrShape s = {.type = t};
    return emit(x, OP_CONSTANT, &s, 0, NULL, &a, 0, NULL);
}

static int32_t gte(Ex *x, int32_t v, int64_t index)
{
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.tuple_index = index;
    return emit(x, OP_GET_TUPLE_ELEMENT, NULL, 1, &v, &a, 0, NULL);
}

static int32_t binary(Ex *x, IrOpcode op, int32_t l, int32_t r)
{
    int32_t o[2] = {l, r};
    return emit(x, op, NULL, 2, o, NULL, 0, NULL);
}

/* `s` with dim d removed (keep = false) or set to 1 (keep = true). */
static IrStatus step_shape(Ex *x, const IrShape *s, int64_t d, bool keep, IrShape *out)
{
    int64_t dims[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < s->rank; i++)
        if (i != d)
            dims[r++] = s->dims[i];
        else if (keep)
            dims[r++] = 1;
    return ir_shape_make(x->m->arena, out, s->type, r, dims) == IR_OK ? IR_OK : ex_oom(x);
}

/* The start indices of a step: j along d, 0 elsewhere (rank values). */
static void step_starts(int32_t rank, int64_t d, int32_t j, int32_t zero, int32_t *starts)
{
    for (int32_t i = 0; i < rank; i++)
        starts[i] = i == d ? j : zero;
}

typedef struct ScanInfo {
    int32_t nin, ncarry, nout;
    int64_t d, len;
    const IrShape *in, *carry, *out; /* operand shapes; result element shapes */
} ScanInfo;

/* C(state): i < len. */
static int32_t build_cond(Ex *x, const IrShape *state, const ScanInfo *s)
{
    const char *name = ir_unique_name(x->m, "scan_cond");
    int32_t ci = name ? ir_add_computation(x->m, name) : -1;
    if (ci < 0)
        return ex_oom(x), -1;
    x->c = x->m->comp[ci];
    int32_t st = param(x, 0, state);
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.direction = CMP_LT;
    int32_t o[2] = {gte(x, st, 0), scalar(x, IR_S32, (int32_t)s->len)};
    int32_t r = emit(x, OP_COMPARE, NULL, 2, o, &a, 0, NULL);
    x->c->root = r;
    return r < 0 ? -1 : ci;
}

/* B(state): one step, as in the file comment. State: (i, inputs...,
 * carries..., outputs so far...). */
static int32_t build_body(Ex *x, const IrShape *state, const ScanInfo *s, int32_t combiner, bool reverse)
{
    const char *name = ir_unique_name(x->m, "scan_body");
    int32_t ci = name ? ir_add_computation(x->m, name) : -1;
    if (ci < 0)
        return ex_oom(x), -1;
    x->c = x->m->comp[ci];
    int32_t n = 1 + s->nin + s->ncarry + s->nout;
    int32_t *v = ir_alloc_array(x->m->arena, (size_t)n, sizeof(int32_t));
    int32_t *args = ir_alloc_array(x->m->arena, (size_t)(s->nin + s->ncarry), sizeof(int32_t));
    int32_t *next = ir_alloc_array(x->m->arena, (size_t)n, sizeof(int32_t));
    if (!v || !args || !next)
        return ex_oom(x), -1;
    int32_t st = param(x, 0, state);
    for (int32_t k = 0; k < n; k++)
        v[k] = gte(x, st, k);
    int32_t i = v[0], zero = scalar(x, IR_S32, 0);
    int32_t j = reverse ? binary(x, OP_SUBTRACT, scalar(x, IR_S32, (int32_t)(s->len - 1)), i) : i;
    int32_t starts[IR_MAX_RANK + 1];
    for (int32_t k = 0; k < s->nin; k++) {
        const IrShape *in = &s->in[k];
        int64_t sizes[IR_MAX_RANK];
        for (int32_t e = 0; e < in->rank; e++)
            sizes[e] = e == s->d ? 1 : in->dims[e];
        IrAttrs a = {.x = &ir_no_attrs_x};
        IrAttrsX *ax = ir_attrs_x_edit(x->m->arena, &a);
        if (!ax)
            return ex_oom(x), -1;
        ax->dynamic_slice_sizes.n = in->rank;
        ax->dynamic_slice_sizes.v = ir_alloc_array(x->m->arena, (size_t)(in->rank > 0 ? in->rank : 1), sizeof(int64_t));
        if (!ax->dynamic_slice_sizes.v)
            return ex_oom(x), -1;
        memcpy(ax->dynamic_slice_sizes.v, sizes, (size_t)in->rank * sizeof(int64_t));
        starts[0] = v[1 + k];
        step_starts(in->rank, s->d, j, zero, starts + 1);
        int32_t ds = emit(x, OP_DYNAMIC_SLICE, NULL, 1 + in->rank, starts, &a, 0, NULL);
        IrShape ss;
        if (step_shape(x, in, s->d, false, &ss) != IR_OK)
            return -1;
        args[k] = emit(x, OP_RESHAPE, &ss, 1, &ds, NULL, 0, NULL);
    }
    for (int32_t k = 0; k < s->ncarry; k++)
        args[s->nin + k] = v[1 + s->nin + k];
    int32_t r = emit(x, OP_CALL, NULL, s->nin + s->ncarry, args, NULL, 1, &combiner);
    bool tup = r >= 0 && x->c->instr[r].shape.type == IR_TUPLE;
    next[0] = binary(x, OP_ADD, i, scalar(x, IR_S32, 1));
    for (int32_t k = 0; k < s->nin; k++)
        next[1 + k] = v[1 + k];
    for (int32_t k = 0; k < s->ncarry; k++)
        next[1 + s->nin + k] = tup ? gte(x, r, s->nout + k) : r;
    for (int32_t k = 0; k < s->nout; k++) {
        const IrShape *o = &s->out[k];
        IrShape us;
        if (step_shape(x, o, s->d, true, &us) != IR_OK)
            return -1;
        int32_t e = tup ? gte(x, r, k) : r;
        starts[0] = v[1 + s->nin + s->ncarry + k];
        starts[1] = emit(x, OP_RESHAPE, &us, 1, &e, NULL, 0, NULL);
        step_starts(o->rank, s->d, j, zero, starts + 2);
        next[1 + s->nin + s->ncarry + k] = emit(x, OP_DYNAMIC_UPDATE_SLICE, NULL, 2 + o->rank, starts, NULL, 0, NULL);
    }
    int32_t root = emit(x, OP_TUPLE, NULL, n, next, NULL, 0, NULL);
    x->c->root = root;
    return root < 0 ? -1 : ci;
}

/* E(operands...): the loop and the scan's result, as in the file comment. */
static int32_t build_expanded(Ex *x, const IrInstr *scan, const ScanInfo *s)
{
    int32_t n = 1 + s->nin + s->ncarry + s->nout;
    IrShape *es = ir_alloc_array(x->m->arena, (size_t)n, sizeof(IrShape));
    if (!es)
        return ex_oom(x), -1;
    es[0] = (IrShape){.type = IR_S32};
    for (int32_t k = 0; k < s->nin; k++)
        es[1 + k] = s->in[k];
    for (int32_t k = 0; k < s->ncarry; k++)
        es[1 + s->nin + k] = s->carry[k];
    for (int32_t k = 0; k < s->nout; k++)
        es[1 + s->nin + s->ncarry + k] = s->out[k];
    IrShape state;
    if (ir_shape_make_tuple(x->m->arena, &state, n, es) != IR_OK)
        return ex_oom(x), -1;
    int32_t called[2] = {build_cond(x, &state, s), build_body(x, &state, s, scan->called[0], scan->a.x->is_reverse)};
    if (called[0] < 0 || called[1] < 0)
        return -1;
    const char *name = ir_unique_name(x->m, "scan_expanded");
    int32_t ci = name ? ir_add_computation(x->m, name) : -1;
    if (ci < 0)
        return ex_oom(x), -1;
    x->c = x->m->comp[ci];
    int32_t *init = ir_alloc_array(x->m->arena, (size_t)n, sizeof(int32_t));
    int32_t *res = ir_alloc_array(x->m->arena, (size_t)(s->nout + s->ncarry), sizeof(int32_t));
    if (!init || !res)
        return ex_oom(x), -1;
    init[0] = scalar(x, IR_S32, 0);
    for (int32_t k = 0; k < s->nin + s->ncarry; k++)
        init[1 + k] = param(x, k, k < s->nin ? &s->in[k] : &s->carry[k - s->nin]);
    for (int32_t k = 0; k < s->nout; k++) {
        int32_t z = scalar(x, s->out[k].type, 0);
        IrAttrs a = {.x = &ir_no_attrs_x}; /* broadcast of a scalar: no dimensions */
        init[1 + s->nin + s->ncarry + k] = emit(x, OP_BROADCAST, &s->out[k], 1, &z, &a, 0, NULL);
    }
    int32_t t = emit(x, OP_TUPLE, NULL, n, init, NULL, 0, NULL);
    int32_t w = emit(x, OP_WHILE, NULL, 1, &t, NULL, 2, called);
    for (int32_t k = 0; k < s->nout; k++)
        res[k] = gte(x, w, 1 + s->nin + s->ncarry + k);
    for (int32_t k = 0; k < s->ncarry; k++)
        res[s->nout + k] = gte(x, w, 1 + s->nin + k);
    int32_t root = scan->shape.type == IR_TUPLE ? emit(x, OP_TUPLE, NULL, s->nout + s->ncarry, res, NULL, 0, NULL)
                                                : res[0];
    x->c->root = root;
    return root < 0 ? -1 : ci;
}

/* Scan `i` of computation `ci` as a call of its expansion. */
static IrStatus expand_one(Ex *x, int32_t ci, int32_t i)
{
    const IrInstr *scan = &x->m->comp[ci]->instr[i];
    ScanInfo s = {0};
    int32_t nres = scan->shape.type == IR_TUPLE ? scan->shape.ntuple : 1;
    s.ncarry = (int32_t)scan->a.x->num_carries;
    s.nin = scan->nopnd - s.ncarry;
    s.nout = nres - s.ncarry;
    s.d = scan->a.dimensions.n == 1 ? scan->a.dimensions.v[0] : -1;
    /* The verifier has checked the scan; what it let through unchecked
     * stays a scan (the kernel says what is wrong at run time). */
    if (s.nin < 1 || s.ncarry < 0 || s.nout < 0 || scan->ncalled != 1 || s.d < 0 ||
        s.nin + s.ncarry + s.nout + 1 > 4096)
        return IR_OK;
    IrShape *in = ir_alloc_array(x->m->arena, (size_t)(s.nin + s.ncarry), sizeof(IrShape));
    IrShape *out = ir_alloc_array(x->m->arena, (size_t)(s.nout > 0 ? s.nout : 1), sizeof(IrShape));
    if (!in || !out)
        return ex_oom(x);
    for (int32_t k = 0; k < s.nin + s.ncarry; k++)
        in[k] = x->m->comp[ci]->instr[scan->opnd[k]].shape;
    for (int32_t k = 0; k < s.nout; k++)
        out[k] = nres == 1 ? scan->shape : scan->shape.tuple[k];
    s.in = in;
    s.carry = in + s.nin;
    s.out = out;
    for (int32_t k = 0; k < s.nin; k++)
        if (in[k].type == IR_TUPLE || s.d >= in[k].rank)
            return IR_OK;
    s.len = in[0].dims[s.d];
    if (s.len > INT32_MAX)
        return IR_OK;
    int32_t e = build_expanded(x, scan, &s);
    if (e < 0)
        return x->d->status;
    int32_t *called = ir_alloc_array(x->m->arena, 1, sizeof(int32_t));
    if (!called)
        return ex_oom(x);
    called[0] = e;
    IrInstr *site = &x->m->comp[ci]->instr[i]; /* the array may have moved: only other computations grew */
    site->op = OP_CALL;
    site->ncalled = 1;
    site->called = called;
    site->a = (IrAttrs){.x = &ir_no_attrs_x};
    return IR_OK;
}

IrStatus shd_expand_scans(IrModule *m, IrDiag *d)
{
    Ex x = {.m = m, .d = d};
    int32_t ncomp = m->ncomp;
    for (int32_t ci = 0; ci < ncomp; ci++)
        for (int32_t i = 0; i < m->comp[ci]->ninstr; i++)
            if (m->comp[ci]->instr[i].op == OP_SCAN) {
                IrStatus st = expand_one(&x, ci, i);
                if (st != IR_OK)
                    return st;
            }
    return IR_OK;
}
