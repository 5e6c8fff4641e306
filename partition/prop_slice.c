/*
 * prop_slice.c: sharding propagation through the ops that cut or join
 * arrays along dims: slice, dynamic-slice, dynamic-update-slice, pad,
 * concatenate (and reverse, below).
 *
 *   slice / dynamic-slice / pad / concatenate: the same sharding on the
 *     dims kept whole, the others untiled (their tiles join the
 *     replication), both ways: slice f32[8,4] {devices=[2,2]0,1,2,3}
 *     slice={[0:4], [0:4]} -> f32[4,4] {devices=[1,2,2]0,1,2,3
 *     last_tile_dim_replicate} (dim 0 cut);
 *   dynamic-update-slice: base, update and result alike, with the dims the
 *     update does not cover whole untiled (what the partitioner needs to
 *     update each shard locally);
 *   reverse: the same sharding, the rule of the elementwise ops
 *     (prop_elementwise.c; XLA also reverses the device order along
 *     reversed dims, tessel's partitioner reshards instead).
 */
#include "prop_internal.h"

/* Dims of `big` whose size differs in `small` (sliced, padded, updated). */
static int32_t changed_dims(const IrShape *a, const IrShape *b, int64_t *dims)
{
    int32_t n = 0;
    for (int32_t i = 0; i < a->rank && i < b->rank; i++)
        if (a->dims[i] != b->dims[i])
            dims[n++] = i;
    return n;
}

/* Pad: dims with any padding (also negative or interior). */
static int32_t padded_dims(const IrInstr *x, const IrShape *opnd, int64_t *dims)
{
    int32_t n = 0;
    for (int32_t i = 0; i < opnd->rank && i < x->shape.rank; i++) {
        bool p = opnd->dims[i] != x->shape.dims[i];
        p |= i < x->a.x->pad_lo.n && x->a.x->pad_lo.v[i] != 0;
        p |= i < x->a.x->pad_hi.n && x->a.x->pad_hi.v[i] != 0;
        p |= i < x->a.x->pad_interior.n && x->a.x->pad_interior.v[i] != 0;
        if (p)
            dims[n++] = i;
    }
    return n;
}

/* The dims whose tiles do not cross between the result of g, of shape
 * `res`, and its operand k of shape `opnd` (-1: operand k takes nothing). */
static int32_t cut_dims(Prop *p, int32_t g, int32_t k, const IrShape *res, const IrShape *opnd,
                        int64_t *dims)
{
    IrInstr *x = prop_ins(p, g);
    if (x->op == OP_PAD)
        return k != 0 ? -1 : padded_dims(x, opnd, dims);
    if (x->op == OP_CONCATENATE) {
        if (x->a.dimensions.n != 1)
            return -1;
        dims[0] = x->a.dimensions.v[0];
        return 1;
    }
    if (x->op == OP_DYNAMIC_UPDATE_SLICE) {
        if (k > 1 || x->nopnd < 2)
            return -1;
        return changed_dims(res, &prop_ins(p, prop_opnd(p, g, 1))->shape, dims);
    }
    return k != 0 ? -1 : changed_dims(res, opnd, dims);
}

/* Offer `s`, with the cut dims between g's result and its operand k
 * untiled, to slot 0 of `to` (g forward, the operand backward). */
static IrStatus emit_cut(Prop *p, int32_t g, int32_t k, int32_t to, const IrSharding *s,
                         const IrShape *res, const IrShape *opnd, const IrShape *src)
{
    int64_t dims[IR_MAX_RANK];
    const IrSharding *t = NULL;
    int32_t nd = cut_dims(p, g, k, res, opnd, dims);
    if (nd < 0)
        return IR_OK;
    if (nd > 0)
        NEED(t = shd_replicate_dims(p->tmp, s, nd, dims));
    return prop_emit(p, to, 0, nd > 0 ? t : s, src);
}

static IrStatus slice_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    IrInstr *x = prop_ins(p, g);
    if (!ir_shape_is_array(&x->shape) || os->rank != x->shape.rank)
        return IR_OK;
    return emit_cut(p, g, k, g, s, &x->shape, os, os);
}

static IrStatus slice_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                          const IrShape *us)
{
    const IrShape *gs = &prop_ins(p, g)->shape;
    if (us->rank != gs->rank)
        return IR_OK;
    return emit_cut(p, u, k, g, s, us, gs, us);
}

/* slice, dynamic-slice (and -update-slice), pad and concatenate */
const PropRule prop_rule_slice = {.fwd = slice_fwd, .bwd = slice_bwd};
