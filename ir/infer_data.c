/*
 * infer_data.c: shape rules of the data-movement ops: broadcast, reshape and
 * bitcast, transpose, slice, dynamic-slice and dynamic-update-slice, pad,
 * concatenate, reverse, gather and scatter, and the ops on dynamic dimensions
 * (get-dimension-size, set-dimension-size, dynamic-reshape).
 */
#include "infer_internal.h"

#include <string.h>

/* broadcast: operand dimension i becomes result dimension dimensions[i]
 * (ascending, sizes equal); the other result dimensions come from the
 * declared shape. f32[3] dimensions={1} -> f32[2,3]. */
IrStatus infer_broadcast(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *o = &x->ins->shape;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (!infer_is_array(o))
        return infer_fail(x, "result must be an array, got %s", infer_sstr(x, o));
    if (dl->n != s->rank)
        return infer_fail(x, "dimensions=%s must have one entry per operand dimension (%d)",
                    infer_lstr(x, dl), (int)s->rank);
    if (o->rank < s->rank)
        return infer_fail(x, "result rank %d is smaller than operand rank %d", (int)o->rank,
                    (int)s->rank);
    if ((st = infer_check_dim_list(x, dl, o->rank, "dimensions", true)) != IR_OK)
        return st;
    for (int32_t i = 0; i < s->rank; i++)
        if (o->dims[dl->v[i]] != s->dims[i])
            return infer_fail(x, "operand dimension %d has size %lld but result dimension %lld has "
                        "size %lld", (int)i, (long long)s->dims[i], (long long)dl->v[i],
                        (long long)o->dims[dl->v[i]]);
    return infer_make_array(x, out, s->type, o->rank, o->dims);
}

IrStatus infer_reshape(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *o = &x->ins->shape;
    if (!infer_is_array(o))
        return infer_fail(x, "result must be an array, got %s", infer_sstr(x, o));
    int64_t ne = ir_shape_elements(s), no = ir_shape_elements(o);
    if (x->ins->op == OP_BITCAST) {
        int64_t bs = ir_shape_bytes(s), bo = ir_shape_bytes(o);
        if (bs != bo)
            return infer_fail(x, "cannot bitcast %s (%lld bytes) to %s (%lld bytes)", infer_sstr(x, s),
                        (long long)bs, infer_sstr(x, o), (long long)bo);
        return infer_make_array(x, out, o->type, o->rank, o->dims);
    }
    if (ne != no)
        return infer_fail(x, "cannot reshape %s (%lld elements) to %s (%lld elements)", infer_sstr(x, s),
                    (long long)ne, infer_sstr(x, o), (long long)no);
    return infer_make_array(x, out, s->type, o->rank, o->dims);
}

/* transpose: result dimension i is operand dimension dimensions[i]. */
IrStatus infer_transpose(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    if (dl->n != s->rank)
        return infer_fail(x, "dimensions=%s must be a permutation of the %d operand dimensions",
                    infer_lstr(x, dl), (int)s->rank);
    if ((st = infer_check_dim_list(x, dl, s->rank, "dimensions", false)) != IR_OK)
        return st;
    int64_t *dims = infer_scratch(x, s->rank);
    if (!dims)
        return infer_oom(x);
    for (int32_t i = 0; i < s->rank; i++)
        dims[i] = s->dims[dl->v[i]];
    return infer_make_array(x, out, s->type, s->rank, dims);
}

/* slice: per dimension [start:limit:stride] with 0 <= start <= limit <=
 * size and stride >= 1; the result has ceil((limit - start) / stride). */
IrStatus infer_slice(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    const IrAttrs *at = &x->ins->a;
    if (at->x->slice_start.n != s->rank || at->x->slice_limit.n != s->rank ||
        (at->x->slice_stride.n != 0 && at->x->slice_stride.n != s->rank))
        return infer_fail(x, "slice= has %d dimensions but the operand %s has rank %d",
                    (int)at->x->slice_start.n, infer_sstr(x, s), (int)s->rank);
    int64_t *dims = infer_scratch(x, s->rank);
    if (!dims)
        return infer_oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        int64_t b = at->x->slice_start.v[i], e = at->x->slice_limit.v[i];
        int64_t k = at->x->slice_stride.n ? at->x->slice_stride.v[i] : 1;
        if (k < 1)
            return infer_fail(x, "stride %lld of dimension %d must be positive", (long long)k, (int)i);
        if (b < 0 || b > e || e > s->dims[i])
            return infer_fail(x, "slice [%lld:%lld] of dimension %d is out of bounds [0:%lld]",
                        (long long)b, (long long)e, (int)i, (long long)s->dims[i]);
        dims[i] = e == b ? 0 : (e - b - 1) / k + 1; /* ceil without overflow: k may be near INT64_MAX */
    }
    return infer_make_array(x, out, s->type, s->rank, dims);
}

/* The start indices of dynamic-slice / dynamic-update-slice from operand
 * `first`: one integer scalar per dimension, all of one type (or the legacy
 * single rank-1 vector). */
static IrStatus check_start_indices(Ctx *x, int32_t first, int32_t rank)
{
    int32_t n = x->ins->nopnd - first;
    const IrShape *i0 = infer_opnd(x, first);
    if (n == 1 && infer_is_array(i0) && i0->rank == 1) {
        if (!ir_type_is_int(i0->type) || i0->dims[0] != rank)
            return infer_fail(x, "start index vector must be an integer vector of %d elements, got %s",
                        (int)rank, infer_sstr(x, i0));
        return IR_OK;
    }
    if (n != rank)
        return infer_fail(x, "needs %d start indices (one per dimension), got %d", (int)rank, (int)n);
    for (int32_t i = 0; i < n; i++) {
        const IrShape *s = infer_opnd(x, first + i);
        if (!infer_is_scalar(s) || !ir_type_is_int(s->type))
            return infer_fail(x, "start index %d (%s) must be an integer scalar, got %s", (int)i,
                        infer_opnd_name(x, first + i), infer_sstr(x, s));
        if (s->type != i0->type)
            return infer_fail(x, "start indices must all have one type, got %s and %s",
                        ir_type_name(i0->type), ir_type_name(s->type));
    }
    return IR_OK;
}

IrStatus infer_dynamic_slice(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    const IrI64List *sz = &x->ins->a.x->dynamic_slice_sizes;
    if ((st = check_start_indices(x, 1, s->rank)) != IR_OK)
        return st;
    if (sz->n != s->rank)
        return infer_fail(x, "dynamic_slice_sizes=%s must have one entry per operand dimension (%d)",
                    infer_lstr(x, sz), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++)
        if (sz->v[i] < 0 || sz->v[i] > s->dims[i])
            return infer_fail(x, "slice size %lld of dimension %d is out of range [0, %lld]",
                        (long long)sz->v[i], (int)i, (long long)s->dims[i]);
    return infer_make_array(x, out, s->type, s->rank, sz->v);
}

IrStatus infer_dynamic_update_slice(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK ||
        (st = infer_expect_array(x, 1, "update")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *u = infer_opnd(x, 1);
    if ((st = check_start_indices(x, 2, s->rank)) != IR_OK)
        return st;
    if (u->type != s->type)
        return infer_fail(x, "update type %s differs from operand type %s", ir_type_name(u->type),
                    ir_type_name(s->type));
    if (u->rank != s->rank)
        return infer_fail(x, "update %s must have the operand's rank %d", infer_sstr(x, u), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++)
        if (u->dims[i] > s->dims[i])
            return infer_fail(x, "update dimension %d has size %lld, larger than the operand's %lld",
                        (int)i, (long long)u->dims[i], (long long)s->dims[i]);
    return infer_copy_shape(x, out, s);
}

/* pad: size = lo + hi + n + (n-1) * interior per dimension; lo and hi may
 * be negative (they cut), interior may not. f32[3] padding=1_2_1 -> f32[8]. */
IrStatus infer_pad(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK ||
        (st = infer_expect_scalar(x, 1, "padding value")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *v = infer_opnd(x, 1);
    const IrAttrs *at = &x->ins->a;
    if (v->type != s->type)
        return infer_fail(x, "padding value type %s differs from operand type %s",
                    ir_type_name(v->type), ir_type_name(s->type));
    if (at->x->pad_lo.n != s->rank || at->x->pad_hi.n != s->rank ||
        (at->x->pad_interior.n != 0 && at->x->pad_interior.n != s->rank))
        return infer_fail(x, "padding= has %d dimensions but the operand %s has rank %d",
                    (int)at->x->pad_lo.n, infer_sstr(x, s), (int)s->rank);
    int64_t *dims = infer_scratch(x, s->rank);
    if (!dims)
        return infer_oom(x);
    for (int32_t i = 0; i < s->rank; i++) {
        int64_t in = at->x->pad_interior.n ? at->x->pad_interior.v[i] : 0, n = s->dims[i], r;
        if (in < 0)
            return infer_fail(x, "interior padding %lld of dimension %d is negative", (long long)in,
                        (int)i);
        if (infer_mul_ovf(n > 0 ? n - 1 : 0, in, &r) || infer_add_ovf(r, n, &r) ||
            infer_add_ovf(r, at->x->pad_lo.v[i], &r) || infer_add_ovf(r, at->x->pad_hi.v[i], &r))
            return infer_fail(x, "padded size of dimension %d overflows", (int)i);
        if (r < 0)
            return infer_fail(x, "padding of dimension %d gives a negative size %lld", (int)i,
                        (long long)r);
        dims[i] = r;
    }
    return infer_make_array(x, out, s->type, s->rank, dims);
}

IrStatus infer_concatenate(Ctx *x, IrShape *out)
{
    const IrShape *s0 = infer_opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    if (dl->n != 1)
        return infer_fail(x, "needs dimensions={d} with exactly one dimension, got %s", infer_lstr(x, dl));
    int64_t d = dl->v[0];
    if (d < 0 || d >= s0->rank)
        return infer_fail(x, "dimension %lld is out of range for rank %d", (long long)d, (int)s0->rank);
    int64_t *dims = infer_scratch(x, s0->rank);
    if (!dims)
        return infer_oom(x);
    memcpy(dims, s0->dims, (size_t)s0->rank * sizeof *dims);
    for (int32_t i = 1; i < x->ins->nopnd; i++) {
        const IrShape *s = infer_opnd(x, i);
        if ((st = infer_expect_array(x, i, "operand")) != IR_OK)
            return st;
        if (s->type != s0->type)
            return infer_fail(x, "operand %d has type %s, operand 0 has %s", (int)i,
                        ir_type_name(s->type), ir_type_name(s0->type));
        if (s->rank != s0->rank)
            return infer_fail(x, "operand %d %s has a different rank from operand 0 %s", (int)i,
                        infer_sstr(x, s), infer_sstr(x, s0));
        for (int32_t k = 0; k < s0->rank; k++)
            if (k != d && s->dims[k] != s0->dims[k])
                return infer_fail(x, "operand %d %s and operand 0 %s differ in dimension %d", (int)i,
                            infer_sstr(x, s), infer_sstr(x, s0), (int)k);
        if (infer_add_ovf(dims[d], s->dims[d], &dims[d]))
            return infer_fail(x, "concatenated size overflows");
    }
    return infer_make_array(x, out, s0->type, s0->rank, dims);
}

IrStatus infer_reverse(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    if ((st = infer_check_dim_list(x, &x->ins->a.dimensions, s->rank, "dimensions", false)) != IR_OK)
        return st;
    return infer_copy_shape(x, out, s);
}

/* ------------------------------------------------------------------ */
/* gather and scatter                                                  */
/* ------------------------------------------------------------------ */

/* The start indices with index_vector_dim == rank treated as a trailing
 * dimension of size 1 (XLA's "expanded" indices). */
static IrStatus expand_indices(Ctx *x, const IrShape *ix, int64_t ivd, int64_t **dims,
                               int32_t *rank)
{
    if (ivd < 0 || ivd > ix->rank)
        return infer_fail(x, "index_vector_dim=%lld is out of range [0, %d]", (long long)ivd,
                    (int)ix->rank);
    int32_t r = ix->rank + (ivd == ix->rank ? 1 : 0);
    int64_t *v = infer_scratch(x, r);
    if (!v)
        return infer_oom(x);
    if (ix->rank > 0)
        memcpy(v, ix->dims, (size_t)ix->rank * sizeof *v);
    if (r > ix->rank)
        v[ix->rank] = 1;
    *dims = v;
    *rank = r;
    return IR_OK;
}

/* Batching dimensions of gather/scatter: operand dims (sorted, unique, not
 * collapsed) paired with index dims (unique, not index_vector_dim) of equal
 * size. */
static IrStatus check_batching(Ctx *x, const IrShape *s, const IrI64List *ob, const char *obname,
                               const IrI64List *ib, const char *ibname, const int64_t *idims,
                               int32_t irank, int64_t ivd, const IrI64List *collapsed)
{
    IrStatus st;
    if ((st = infer_check_dim_list(x, ob, s->rank, obname, true)) != IR_OK ||
        (st = infer_check_dim_list(x, ib, irank, ibname, false)) != IR_OK)
        return st;
    if (ob->n != ib->n)
        return infer_fail(x, "%s=%s and %s=%s must have the same length", obname, infer_lstr(x, ob), ibname,
                    infer_lstr(x, ib));
    for (int32_t i = 0; i < ob->n; i++) {
        if (ir_list_has(collapsed, ob->v[i]))
            return infer_fail(x, "dimension %lld is both collapsed and a batching dimension",
                        (long long)ob->v[i]);
        if (ib->v[i] == ivd)
            return infer_fail(x, "%s cannot contain index_vector_dim %lld", ibname, (long long)ivd);
        if (s->dims[ob->v[i]] != idims[ib->v[i]])
            return infer_fail(x, "operand batching dimension %lld has size %lld but index batching "
                        "dimension %lld has size %lld", (long long)ob->v[i],
                        (long long)s->dims[ob->v[i]], (long long)ib->v[i],
                        (long long)idims[ib->v[i]]);
    }
    return IR_OK;
}

/* The index-to-operand map (start_index_map / scatter_dims_to_operand_dims):
 * one entry per element of the index vector, unique, in range, not a
 * batching dimension. */
static IrStatus check_index_map(Ctx *x, const IrI64List *map, const char *name, int64_t rank,
                                int64_t nvec, const IrI64List *batching)
{
    IrStatus st = infer_check_dim_list(x, map, rank, name, false);
    if (st != IR_OK)
        return st;
    if (map->n != nvec)
        return infer_fail(x, "%s=%s has %d entries but the index vector has %lld", name, infer_lstr(x, map),
                    (int)map->n, (long long)nvec);
    for (int32_t i = 0; i < map->n; i++)
        if (ir_list_has(batching, map->v[i]))
            return infer_fail(x, "%s cannot contain batching dimension %lld", name,
                        (long long)map->v[i]);
    return IR_OK;
}

/* gather: the result has offset dimensions (slice sizes of the operand
 * dimensions neither collapsed nor batching, at positions offset_dims) and
 * batch dimensions (the index dimensions except index_vector_dim, in the
 * other positions). Operand f32[5,4], indices s32[3,1], offset_dims={1},
 * collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1,
 * slice_sizes={1,4} -> f32[3,4]. */
IrStatus infer_gather(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK ||
        (st = infer_expect_array(x, 1, "start indices")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0), *ix = infer_opnd(x, 1);
    const IrGatherDnums *g = &x->ins->a.x->gather;
    const IrI64List *ss = &x->ins->a.x->slice_sizes;
    if (!ir_type_is_int(ix->type))
        return infer_fail(x, "start indices must be integers, got %s", infer_sstr(x, ix));
    int64_t *idims;
    int32_t irank;
    if ((st = expand_indices(x, ix, g->index_vector_dim, &idims, &irank)) != IR_OK)
        return st;
    int32_t orank = g->offset_dims.n + irank - 1;
    if ((st = infer_check_dim_list(x, &g->offset_dims, orank, "offset_dims", true)) != IR_OK ||
        (st = infer_check_dim_list(x, &g->collapsed_slice_dims, s->rank, "collapsed_slice_dims",
                             true)) != IR_OK ||
        (st = check_batching(x, s, &g->operand_batching_dims, "operand_batching_dims",
                             &g->start_indices_batching_dims, "start_indices_batching_dims",
                             idims, irank, g->index_vector_dim, &g->collapsed_slice_dims)) != IR_OK ||
        (st = check_index_map(x, &g->start_index_map, "start_index_map", s->rank,
                              idims[g->index_vector_dim], &g->operand_batching_dims)) != IR_OK)
        return st;
    if (g->offset_dims.n + g->collapsed_slice_dims.n + g->operand_batching_dims.n != s->rank)
        return infer_fail(x, "offset_dims (%d), collapsed_slice_dims (%d) and operand_batching_dims "
                    "(%d) must add up to the operand rank %d", (int)g->offset_dims.n,
                    (int)g->collapsed_slice_dims.n, (int)g->operand_batching_dims.n,
                    (int)s->rank);
    if (ss->n != s->rank)
        return infer_fail(x, "slice_sizes=%s must have one entry per operand dimension (%d)",
                    infer_lstr(x, ss), (int)s->rank);
    for (int32_t i = 0; i < s->rank; i++) {
        if (ss->v[i] < 0 || ss->v[i] > s->dims[i])
            return infer_fail(x, "slice size %lld of dimension %d is out of range [0, %lld]",
                        (long long)ss->v[i], (int)i, (long long)s->dims[i]);
        if ((ir_list_has(&g->collapsed_slice_dims, i) || ir_list_has(&g->operand_batching_dims, i)) &&
            ss->v[i] > 1)
            return infer_fail(x, "collapsed or batching dimension %d must have slice size 0 or 1, "
                        "got %lld", (int)i, (long long)ss->v[i]);
    }
    int64_t *dims = infer_scratch(x, orank);
    if (!dims)
        return infer_oom(x);
    int32_t od = 0, bd = 0;
    for (int32_t i = 0; i < orank; i++) {
        if (ir_list_has(&g->offset_dims, i)) {
            while (ir_list_has(&g->collapsed_slice_dims, od) ||
                   ir_list_has(&g->operand_batching_dims, od))
                od++;
            dims[i] = ss->v[od++];
        } else {
            if (bd == g->index_vector_dim)
                bd++;
            dims[i] = idims[bd++];
        }
    }
    return infer_make_array(x, out, s->type, orank, dims);
}

/* scatter: N inputs of one shape, indices, N updates; the update window
 * dimensions fit inside the operand dimensions that are neither inserted
 * nor batching, the other update dimensions are the index dimensions
 * without index_vector_dim. The result is the inputs' shape. */
static IrStatus check_scatter_updates(Ctx *x, const IrShape *s, const IrShape *u,
                                      const int64_t *idims, int32_t irank)
{
    const IrScatterDnums *g = &x->ins->a.x->scatter;
    int32_t want = g->update_window_dims.n + irank - 1;
    if (u->rank != want)
        return infer_fail(x, "updates %s must have rank %d (%d window dimensions + %d scatter "
                    "dimensions)", infer_sstr(x, u), (int)want, (int)g->update_window_dims.n,
                    (int)irank - 1);
    IrStatus st = infer_check_dim_list(x, &g->update_window_dims, u->rank, "update_window_dims", true);
    if (st != IR_OK)
        return st;
    int32_t od = 0, sd = 0;
    for (int32_t i = 0; i < u->rank; i++) {
        if (ir_list_has(&g->update_window_dims, i)) {
            while (ir_list_has(&g->inserted_window_dims, od) || ir_list_has(&g->input_batching_dims, od))
                od++;
            if (u->dims[i] > s->dims[od])
                return infer_fail(x, "update window dimension %d has size %lld, larger than operand "
                            "dimension %d (%lld)", (int)i, (long long)u->dims[i], (int)od,
                            (long long)s->dims[od]);
            od++;
        } else {
            if (sd == g->index_vector_dim)
                sd++;
            if (u->dims[i] != idims[sd])
                return infer_fail(x, "update scatter dimension %d has size %lld but index dimension "
                            "%d has size %lld", (int)i, (long long)u->dims[i], (int)sd,
                            (long long)idims[sd]);
            sd++;
        }
    }
    return IR_OK;
}

IrStatus infer_scatter(Ctx *x, IrShape *out)
{
    int32_t n = (x->ins->nopnd - 1) / 2;
    const IrShape *s = infer_opnd(x, 0), *ix = infer_opnd(x, n);
    const IrScatterDnums *g = &x->ins->a.x->scatter;
    IrStatus st;
    IrType *tin = ir_alloc_array(x->a, (size_t)n, sizeof(IrType));
    if (!tin)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++) {
        if ((st = infer_expect_array(x, i, "input")) != IR_OK ||
            (st = infer_expect_array(x, n + 1 + i, "updates")) != IR_OK)
            return st;
        if (!infer_same_dims(infer_opnd(x, i), s))
            return infer_fail(x, "inputs must have the same dimensions, got %s and %s", infer_sstr(x, s),
                        infer_sstr(x, infer_opnd(x, i)));
        if (infer_opnd(x, n + 1 + i)->type != infer_opnd(x, i)->type)
            return infer_fail(x, "updates %d type %s differs from input %d type %s", (int)i,
                        ir_type_name(infer_opnd(x, n + 1 + i)->type), (int)i,
                        ir_type_name(infer_opnd(x, i)->type));
        tin[i] = infer_opnd(x, i)->type;
    }
    if ((st = infer_expect_array(x, n, "scatter indices")) != IR_OK)
        return st;
    if (!ir_type_is_int(ix->type))
        return infer_fail(x, "scatter indices must be integers, got %s", infer_sstr(x, ix));
    int64_t *idims;
    int32_t irank;
    if ((st = expand_indices(x, ix, g->index_vector_dim, &idims, &irank)) != IR_OK)
        return st;
    if ((st = infer_check_dim_list(x, &g->inserted_window_dims, s->rank, "inserted_window_dims",
                             true)) != IR_OK ||
        (st = check_batching(x, s, &g->input_batching_dims, "input_batching_dims",
                             &g->scatter_indices_batching_dims, "scatter_indices_batching_dims",
                             idims, irank, g->index_vector_dim, &g->inserted_window_dims)) != IR_OK ||
        (st = check_index_map(x, &g->scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims",
                              s->rank, idims[g->index_vector_dim], &g->input_batching_dims)) != IR_OK)
        return st;
    if (g->update_window_dims.n + g->inserted_window_dims.n + g->input_batching_dims.n != s->rank)
        return infer_fail(x, "update_window_dims (%d), inserted_window_dims (%d) and "
                    "input_batching_dims (%d) must add up to the operand rank %d",
                    (int)g->update_window_dims.n, (int)g->inserted_window_dims.n,
                    (int)g->input_batching_dims.n, (int)s->rank);
    for (int32_t i = 0; i < n; i++)
        if ((st = check_scatter_updates(x, s, infer_opnd(x, n + 1 + i), idims, irank)) != IR_OK)
            return st;
    if ((st = infer_check_reducer(x, infer_callee(x, 0), n, tin, tin)) != IR_OK)
        return st;
    if (n == 1)
        return infer_copy_shape(x, out, s);
    IrShape *el = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!el)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++)
        el[i] = *infer_opnd(x, i);
    IrShape t = {.type = IR_TUPLE, .ntuple = n, .tuple = el};
    return infer_copy_shape(x, out, &t);
}

/* ------------------------------------------------------------------ */
/* dynamic dimensions                                                  */
/* ------------------------------------------------------------------ */

IrStatus infer_get_dimension_size(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    const IrI64List *dl = &x->ins->a.dimensions;
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= infer_opnd(x, 0)->rank)
        return infer_fail(x, "dimensions=%s must name one dimension of %s", infer_lstr(x, dl),
                    infer_sstr(x, infer_opnd(x, 0)));
    return infer_make_scalar(x, out, IR_S32);
}

/* set-dimension-size(operand, size s32[]): the operand, with dimension d
 * now dynamic (bounded by its size). */
IrStatus infer_set_dimension_size(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_array(x, 0, "operand")) != IR_OK || (st = infer_expect_scalar(x, 1, "size")) != IR_OK)
        return st;
    const IrShape *s = infer_opnd(x, 0);
    const IrI64List *dl = &x->ins->a.dimensions;
    if (!ir_type_is_int(infer_opnd(x, 1)->type))
        return infer_fail(x, "size must be an integer scalar, got %s", infer_sstr(x, infer_opnd(x, 1)));
    if (dl->n != 1 || dl->v[0] < 0 || dl->v[0] >= s->rank)
        return infer_fail(x, "dimensions=%s must name one dimension of %s", infer_lstr(x, dl), infer_sstr(x, s));
    if ((st = infer_make_array(x, out, s->type, s->rank, s->dims)) != IR_OK)
        return st;
    out->dynamic = ir_alloc_array(x->a, (size_t)s->rank, sizeof(bool));
    if (!out->dynamic)
        return infer_oom(x);
    for (int32_t i = 0; i < s->rank; i++)
        out->dynamic[i] = (s->dynamic && s->dynamic[i]) || i == dl->v[0];
    return IR_OK;
}

/* dynamic-reshape(operand, size_0, ..., size_{r-1}): one integer scalar
 * per result dimension; the declared shape holds the bounds. */
IrStatus infer_dynamic_reshape(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    IrStatus st = infer_expect_array(x, 0, "operand");
    if (st != IR_OK)
        return st;
    if (!infer_is_array(o) || x->ins->nopnd != o->rank + 1)
        return infer_fail(x, "needs 1 + %d operands (the operand and a size per result dimension), got %d",
                    (int)o->rank, (int)x->ins->nopnd);
    for (int32_t i = 1; i < x->ins->nopnd; i++)
        if ((st = infer_expect_scalar(x, i, "size")) != IR_OK)
            return st;
    if (o->type != infer_opnd(x, 0)->type)
        return infer_fail(x, "result type %s differs from the operand's %s", ir_type_name(o->type),
                    ir_type_name(infer_opnd(x, 0)->type));
    return infer_copy_shape(x, out, o);
}
