/*
 * build.c: the instruction builders of the gradient transform. Every new
 * instruction goes through gb_emit, which lets ir_infer_shape compute its
 * shape from its operands and attributes (the same rules the verifier
 * checks), so a rule only says what it means, never a shape by hand; a
 * rule that builds something ill-formed fails here as an internal error
 * naming the op, not later in the verifier.
 */
#include "grad.h"

#include <stdio.h>
#include <string.h>

IrStatus gb_oom(Grad *g)
{
    return ir_oom(g->d, "while writing gradients");
}

IrStatus gb_bug(Grad *g, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_error(g->d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "grad: internal error: %s", msg);
}

int64_t *gb_list(Grad *g, int32_t n, const int64_t *v)
{
    int64_t *l = ir_alloc_array(g->m->arena, (size_t)(n > 0 ? n : 1), sizeof(int64_t));
    if (!l) {
        gb_oom(g);
        return NULL;
    }
    if (n > 0 && v)
        memcpy(l, v, (size_t)n * sizeof(int64_t));
    return l;
}

IrI64List gb_ilist(Grad *g, int32_t n, const int64_t *v)
{
    return (IrI64List){n, gb_list(g, n, v)};
}

const IrShape *gb_shape(const GB *b, int32_t v)
{
    return &b->c->instr[v].shape;
}

int32_t gb_emit(GB *b, IrOpcode op, const IrShape *hint, int32_t nopnd, const int32_t *opnd,
                const IrAttrs *a, int32_t ncalled, const int32_t *called)
{
    Grad *g = b->g;
    IrArena *ar = g->m->arena;
    if (g->d->status != IR_OK)
        return -1;
    for (int32_t k = 0; k < nopnd; k++)
        if (opnd[k] < 0)
            return -1;
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = op;
    if (a)
        ins.a = *a;
    /* A builder's IrAttrsX is usually its own stack variable: the module
     * keeps a copy. */
    if (ins.a.x && ins.a.x != &ir_no_attrs_x) {
        IrAttrsX *x = ir_attrs_x_edit(ar, &ins.a);
        if (!x)
            return gb_oom(g), -1;
    }
    if (hint)
        ins.shape = *hint;
    ins.name = ir_unique_name(g->m, ir_op_name(op));
    ins.nopnd = nopnd;
    ins.opnd = ir_alloc_array(ar, (size_t)(nopnd > 0 ? nopnd : 1), sizeof(int32_t));
    ins.ncalled = ncalled;
    ins.called = ir_alloc_array(ar, (size_t)(ncalled > 0 ? ncalled : 1), sizeof(int32_t));
    if (!ins.name || !ins.opnd || !ins.called)
        return gb_oom(g), -1;
    if (nopnd > 0)
        memcpy(ins.opnd, opnd, (size_t)nopnd * sizeof(int32_t));
    if (ncalled > 0)
        memcpy(ins.called, called, (size_t)ncalled * sizeof(int32_t));
    IrShape out;
    IrDiag d = {0};
    if (ir_infer_shape(g->m, b->c, &ins, &out, ar, &d) != IR_OK) {
        gb_bug(g, "building %s: %s", ir_op_name(op), d.msg ? d.msg : "shape inference failed");
        ir_diag_clear(&d);
        return -1;
    }
    ins.shape = out;
    int32_t r = ir_add_instr(g->m, b->c, &ins);
    if (r < 0)
        gb_oom(g);
    return r;
}

int32_t gb_un(GB *b, IrOpcode op, int32_t x)
{
    return gb_emit(b, op, NULL, 1, &x, NULL, 0, NULL);
}

int32_t gb_bin(GB *b, IrOpcode op, int32_t x, int32_t y)
{
    int32_t o[2] = {x, y};
    return gb_emit(b, op, NULL, 2, o, NULL, 0, NULL);
}

/* A scalar constant of type t holding v. f32 and f64 literals are stored
 * as they are; the other floating kinds (f16, bf16, f8) go through a
 * convert of an f32 constant, so no bit layout is written here. */
int32_t gb_const(GB *b, IrType t, double v)
{
    IrShape s = {.type = t};
    uint8_t buf[8] = {0};
    int64_t n = (int64_t)ir_type_size(t);
    switch (t) {
    case IR_F64: memcpy(buf, &v, 8); break;
    case IR_F32: { float f = (float)v; memcpy(buf, &f, 4); break; }
    case IR_S32: { int32_t x = (int32_t)v; memcpy(buf, &x, 4); break; }
    case IR_S64: { int64_t x = (int64_t)v; memcpy(buf, &x, 8); break; }
    case IR_U32: { uint32_t x = (uint32_t)v; memcpy(buf, &x, 4); break; }
    case IR_PRED: buf[0] = v != 0; break;
    default:
        if (ir_type_is_float(t))
            return gb_convert(b, gb_const(b, IR_F32, v), t);
        if (ir_type_is_int(t))
            return gb_convert(b, gb_const(b, IR_S64, v), t);
        gb_bug(b->g, "a constant of type %s", ir_type_name(t));
        return -1;
    }
    uint8_t *lit = ir_alloc(b->g->m->arena, (size_t)n);
    if (!lit)
        return gb_oom(b->g), -1;
    memcpy(lit, buf, (size_t)n);
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.literal = lit;
    a.literal_bytes = n;
    return gb_emit(b, OP_CONSTANT, &s, 0, NULL, &a, 0, NULL);
}

int32_t gb_bcast(GB *b, int32_t x, IrType t, int32_t rank, const int64_t *dims, int32_t ndims,
                 const int64_t *bdims)
{
    IrShape s;
    if (ir_shape_make(b->g->m->arena, &s, t, rank, dims) != IR_OK)
        return gb_oom(b->g), -1;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.dimensions = gb_ilist(b->g, ndims, bdims);
    a.has_dimensions = true;
    if (!a.dimensions.v)
        return -1;
    return gb_emit(b, OP_BROADCAST, &s, 1, &x, &a, 0, NULL);
}

int32_t gb_full(GB *b, const IrShape *shape, double v)
{
    IrShape s = *shape;
    int32_t c = gb_const(b, s.type, v);
    if (s.rank == 0)
        return c;
    return gb_bcast(b, c, s.type, s.rank, s.dims, 0, NULL);
}

int32_t gb_full_like(GB *b, int32_t x, double v)
{
    if (x < 0)
        return -1;
    IrShape s = *gb_shape(b, x);
    return gb_full(b, &s, v);
}

int32_t gb_bcast_like(GB *b, int32_t scalar, int32_t x)
{
    if (x < 0 || scalar < 0)
        return -1;
    IrShape s = *gb_shape(b, x);
    if (s.rank == 0)
        return scalar;
    return gb_bcast(b, scalar, s.type, s.rank, s.dims, 0, NULL);
}

int32_t gb_scale(GB *b, int32_t x, double v)
{
    if (x < 0)
        return -1;
    return gb_bin(b, OP_MULTIPLY, x, gb_full_like(b, x, v));
}

int32_t gb_reshape(GB *b, int32_t x, int32_t rank, const int64_t *dims)
{
    if (x < 0)
        return -1;
    IrShape s;
    if (ir_shape_make(b->g->m->arena, &s, gb_shape(b, x)->type, rank, dims) != IR_OK)
        return gb_oom(b->g), -1;
    if (ir_shape_equal(&s, gb_shape(b, x)))
        return x;
    return gb_emit(b, OP_RESHAPE, &s, 1, &x, NULL, 0, NULL);
}

int32_t gb_transpose(GB *b, int32_t x, const int64_t *perm)
{
    if (x < 0)
        return -1;
    int32_t rank = gb_shape(b, x)->rank;
    bool id = true;
    for (int32_t k = 0; k < rank; k++)
        id &= perm[k] == k;
    if (id)
        return x;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.dimensions = gb_ilist(b->g, rank, perm);
    a.has_dimensions = true;
    if (!a.dimensions.v)
        return -1;
    return gb_emit(b, OP_TRANSPOSE, NULL, 1, &x, &a, 0, NULL);
}

int32_t gb_convert(GB *b, int32_t x, IrType t)
{
    if (x < 0)
        return -1;
    IrShape s = *gb_shape(b, x);
    if (s.type == t)
        return x;
    s.type = t;
    s.has_layout = false;
    return gb_emit(b, OP_CONVERT, &s, 1, &x, NULL, 0, NULL);
}

int32_t gb_cmp(GB *b, int32_t x, int32_t y, IrCmpDir dir)
{
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.direction = dir;
    int32_t o[2] = {x, y};
    return gb_emit(b, OP_COMPARE, NULL, 2, o, &a, 0, NULL);
}

int32_t gb_select(GB *b, int32_t p, int32_t x, int32_t y)
{
    int32_t o[3] = {p, x, y};
    return gb_emit(b, OP_SELECT, NULL, 3, o, NULL, 0, NULL);
}

int32_t gb_new_comp(Grad *g, const char *base)
{
    const char *name = ir_unique_name(g->m, base);
    int32_t ci = name ? ir_add_computation(g->m, name) : -1;
    if (ci < 0)
        gb_oom(g);
    return ci;
}

int32_t gb_parameter(GB *b, int64_t number, const IrShape *shape)
{
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.parameter_number = number;
    IrShape s;
    if (ir_shape_copy(b->g->m->arena, &s, shape) != IR_OK)
        return gb_oom(b->g), -1;
    return gb_emit(b, OP_PARAMETER, &s, 0, NULL, &a, 0, NULL);
}

int32_t gb_parameter_named(GB *b, int64_t number, const IrShape *shape, const char *prefix, const char *of)
{
    int32_t i = gb_parameter(b, number, shape);
    if (i < 0)
        return -1;
    const char *want = ir_sprintf(b->g->m->arena, "%s%s", prefix, of ? of : "");
    const char *name = want ? ir_keep_name(b->g->m, want) : NULL;
    if (!name)
        return gb_oom(b->g), -1;
    b->c->instr[i].name = name;
    return i;
}

/* A computation (p0: T[], p1: T[]) -> OP(p0, p1) or compare(p0, p1), GE. */
static int32_t scalar_comp(Grad *g, IrType t, IrOpcode op, const char *base)
{
    int32_t ci = gb_new_comp(g, base);
    if (ci < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    IrShape s = {.type = t};
    int32_t p0 = gb_parameter(&b, 0, &s), p1 = gb_parameter(&b, 1, &s);
    int32_t r = op == OP_COMPARE ? gb_cmp(&b, p0, p1, CMP_GE) : gb_bin(&b, op, p0, p1);
    b.c->root = r;
    return r < 0 ? -1 : ci;
}

int32_t gb_sum_comp(Grad *g, IrType t)
{
    if (g->sum[t] < 0)
        g->sum[t] = scalar_comp(g, t, t == IR_PRED ? OP_OR : OP_ADD, "grad_add");
    return g->sum[t];
}

int32_t gb_ge_comp(Grad *g, IrType t)
{
    if (g->ge[t] < 0)
        g->ge[t] = scalar_comp(g, t, OP_COMPARE, "grad_ge");
    return g->ge[t];
}

int32_t gb_sum(GB *b, int32_t x, int32_t n, const int64_t *dims)
{
    if (x < 0)
        return -1;
    if (n == 0)
        return x;
    IrType t = gb_shape(b, x)->type;
    int32_t comp = gb_sum_comp(b->g, t);
    int32_t zero = gb_const(b, t, 0);
    if (comp < 0 || zero < 0)
        return -1;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.dimensions = gb_ilist(b->g, n, dims);
    a.has_dimensions = true;
    if (!a.dimensions.v)
        return -1;
    int32_t o[2] = {x, zero};
    return gb_emit(b, OP_REDUCE, NULL, 2, o, &a, 1, &comp);
}

int32_t gb_sum_all(GB *b, int32_t x)
{
    if (x < 0)
        return -1;
    int64_t dims[IR_MAX_RANK];
    int32_t rank = gb_shape(b, x)->rank;
    for (int32_t k = 0; k < rank; k++)
        dims[k] = k;
    return gb_sum(b, x, rank, dims);
}

int32_t gb_slice(GB *b, int32_t x, const int64_t *start, const int64_t *limit, const int64_t *stride)
{
    if (x < 0)
        return -1;
    int32_t rank = gb_shape(b, x)->rank;
    bool whole = true;
    for (int32_t k = 0; k < rank; k++)
        whole &= start[k] == 0 && limit[k] == gb_shape(b, x)->dims[k] && stride[k] == 1;
    if (whole)
        return x;
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.slice_start = gb_ilist(b->g, rank, start);
    ax.slice_limit = gb_ilist(b->g, rank, limit);
    ax.slice_stride = gb_ilist(b->g, rank, stride);
    if (!ax.slice_start.v || !ax.slice_limit.v || !ax.slice_stride.v)
        return -1;
    return gb_emit(b, OP_SLICE, NULL, 1, &x, &a, 0, NULL);
}

int32_t gb_pad0(GB *b, int32_t x, const int64_t *lo, const int64_t *hi, const int64_t *interior)
{
    if (x < 0)
        return -1;
    int32_t rank = gb_shape(b, x)->rank;
    bool none = true;
    for (int32_t k = 0; k < rank; k++)
        none &= lo[k] == 0 && hi[k] == 0 && interior[k] == 0;
    if (none)
        return x;
    IrAttrsX ax = {0};
    IrAttrs a = {.x = &ax};
    ax.pad_lo = gb_ilist(b->g, rank, lo);
    ax.pad_hi = gb_ilist(b->g, rank, hi);
    ax.pad_interior = gb_ilist(b->g, rank, interior);
    if (!ax.pad_lo.v || !ax.pad_hi.v || !ax.pad_interior.v)
        return -1;
    int32_t o[2] = {x, gb_const(b, gb_shape(b, x)->type, 0)};
    return gb_emit(b, OP_PAD, NULL, 2, o, &a, 0, NULL);
}

int32_t gb_tuple(GB *b, int32_t n, const int32_t *elems)
{
    return gb_emit(b, OP_TUPLE, NULL, n, elems, NULL, 0, NULL);
}

int32_t gb_gte(GB *b, int32_t t, int64_t index)
{
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.tuple_index = index;
    return gb_emit(b, OP_GET_TUPLE_ELEMENT, NULL, 1, &t, &a, 0, NULL);
}

int32_t gb_zeros(GB *b, const IrShape *s)
{
    if (s->type != IR_TUPLE) {
        if (!ir_type_is_array(s->type))
            return gb_bug(b->g, "zeros of a %s", ir_type_name(s->type)), -1;
        return gb_full(b, s, 0);
    }
    int32_t *e = ir_alloc_array(b->g->m->arena, (size_t)(s->ntuple > 0 ? s->ntuple : 1), sizeof(int32_t));
    if (!e)
        return gb_oom(b->g), -1;
    for (int32_t k = 0; k < s->ntuple; k++)
        if ((e[k] = gb_zeros(b, &s->tuple[k])) < 0)
            return -1;
    return gb_tuple(b, s->ntuple, e);
}

/* Instructions are copied in topological order (a callee's array need not
 * be), with fresh names; attributes and callees are shared with the source
 * (they live in the same arena and nothing changes them). */
int32_t gb_inline(GB *b, int32_t src, const int32_t *args, int32_t *map)
{
    Grad *g = b->g;
    const IrComputation *sc = g->m->comp[src];
    int32_t *order = NULL;
    IrDiag d = {0};
    if (ir_topo_order(g->m, sc, &order, &d) != IR_OK) {
        ir_diag_clear(&d);
        return gb_bug(g, "a cycle in %s", sc->name), -1;
    }
    int32_t n = sc->ninstr;
    int32_t *mine = map ? map : ts_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!mine) {
        ts_free(order);
        return gb_oom(g), -1;
    }
    int32_t root = -1;
    for (int32_t k = 0; k < n && g->d->status == IR_OK; k++) {
        int32_t i = order[k];
        IrInstr ins = sc->instr[i];
        if (ins.op == OP_PARAMETER) {
            mine[i] = args[ins.a.parameter_number];
            continue;
        }
        ins.name = ir_unique_name(g->m, ins.name);
        ins.opnd = ir_alloc_array(g->m->arena, (size_t)(ins.nopnd > 0 ? ins.nopnd : 1), sizeof(int32_t));
        if (!ins.name || !ins.opnd) {
            gb_oom(g);
            break;
        }
        for (int32_t o = 0; o < ins.nopnd; o++)
            ins.opnd[o] = mine[sc->instr[i].opnd[o]];
        ins.sharding = NULL;
        if (ins.a.x->control_predecessors.n > 0) {
            IrAttrsX *x = ir_attrs_x_edit(g->m->arena, &ins.a);
            if (!x) {
                gb_oom(g);
                break;
            }
            x->control_predecessors = (IrI64List){0, NULL};
        }
        if ((mine[i] = ir_add_instr(g->m, b->c, &ins)) < 0)
            gb_oom(g);
    }
    if (g->d->status == IR_OK)
        root = mine[sc->root];
    ts_free(order);
    if (!map)
        ts_free(mine);
    return root;
}

/* Pairs (a, ta), (c, tc) -> the pair whose value wins compare(a, c, dir),
 * a's when it holds (so GE keeps the first of equal maxima). */
int32_t gb_pick_comp(Grad *g, IrType t, IrCmpDir dir)
{
    int32_t ci = gb_new_comp(g, "grad_pick");
    if (ci < 0)
        return -1;
    GB b = {g, g->m->comp[ci]};
    IrShape s = {.type = t};
    int32_t a = gb_parameter(&b, 0, &s), ta = gb_parameter(&b, 1, &s);
    int32_t c = gb_parameter(&b, 2, &s), tc = gb_parameter(&b, 3, &s);
    int32_t win = gb_cmp(&b, a, c, dir);
    int32_t e[2] = {gb_select(&b, win, a, c), gb_select(&b, win, ta, tc)};
    b.c->root = gb_tuple(&b, 2, e);
    return b.c->root < 0 ? -1 : ci;
}
