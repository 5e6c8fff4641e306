/*
 * prop_reshape.c: sharding propagation through the ops that move dims
 * around: broadcast, reshape (and bitcast), transpose, bitcast-convert.
 *
 *   broadcast f32[8] {devices=[2]0,1} dimensions={0} -> f32[8,4]:
 *     forward {devices=[2,1]0,1} (the new dims untiled; only in the second
 *     round, so that a broadcast first takes what its users want);
 *     backward the result projected on the operand's dims (the new dims'
 *     tiles join the replication);
 *   reshape: the tiles that cross the reshape (reshape_map), both ways;
 *   transpose dimensions={1,0} of {devices=[2,1]0,1}: {devices=[1,2]0,1},
 *     backward through the inverse permutation;
 *   bitcast-convert: the same sharding where the widths are equal (f32 ->
 *     s32: elementwise); to a narrower type the result's new minor dim is
 *     untiled (f32[8] {devices=[2]0,1} -> u8[8,4] {devices=[2,1]0,1}), to
 *     a wider one the operand's minor dim is dropped, its tiles joining the
 *     replication; backward the same the other way.
 */
#include "prop_internal.h"

/* Reshape: which dim of `from` each dim of `to` inherits its tiles from
 * (map[j] = i, or -1). The dims are cut into groups of equal products:
 * [4,6] -> [24] is one group (a merge), [24] -> [4,6] one group (a split),
 * [8,6] -> [8,2,3] two groups ([8]->[8] unchanged, [6]->[2,3] a split).
 * A tiled dim crosses when its group is one dim to one dim (unchanged), or
 * when it is the major dim of its group and its tile count t divides both
 * that dim and the major dim on the other side: then the t contiguous
 * blocks are the same elements on both sides. [4,6]{2,1} -> [24] gives {2};
 * [4,6]{1,2} -> [24] crosses nothing (the minor dim of a merge); [24]{3} ->
 * [4,6] crosses nothing (3 does not divide 4). Size-1 dims never carry
 * tiles. Uncrossed tiles join the replication (shd_project). */
static void reshape_map(const IrShape *from, const IrShape *to, const IrSharding *s, int64_t *map)
{
    for (int32_t j = 0; j < to->rank; j++)
        map[j] = -1;
    if (s->kind != SHD_TILED || ir_shape_elements(from) != ir_shape_elements(to) ||
        ir_shape_elements(from) <= 0)
        return;
    int32_t i = 0, j = 0;
    for (;;) {
        while (i < from->rank && from->dims[i] == 1)
            i++;
        while (j < to->rank && to->dims[j] == 1)
            j++;
        if (i >= from->rank || j >= to->rank)
            return;
        int32_t i0 = i++, j0 = j++;
        int64_t pa = from->dims[i0], pb = to->dims[j0];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= from->rank)
                    return;
                pa *= from->dims[i++];
            } else {
                if (j >= to->rank)
                    return;
                pb *= to->dims[j++];
            }
        }
        int64_t t = shd_tiles(s, i0);
        if (i - i0 == 1 && j - j0 == 1)
            map[j0] = i0;
        else if (t > 1 && from->dims[i0] % t == 0 && to->dims[j0] % t == 0)
            map[j0] = i0;
    }
}

static IrStatus broadcast_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    int32_t r = x->shape.rank;
    const IrSharding *t = NULL;
    if (p->phase == 0 || !ir_shape_is_array(&x->shape) || x->a.dimensions.n != os->rank)
        return IR_OK;
    for (int32_t i = 0; i < os->rank; i++)
        if (x->a.dimensions.v[i] < 0 || x->a.dimensions.v[i] >= r)
            return IR_OK;
    NEED(t = shd_insert_dims(p->tmp, s, r, x->a.dimensions.v));
    return prop_emit(p, g, 0, t, os);
}

static IrStatus broadcast_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                              const IrShape *us)
{
    (void)k;
    IrInstr *x = prop_ins(p, u);
    int32_t gr = prop_ins(p, g)->shape.rank;
    const IrSharding *t = NULL;
    if (x->a.dimensions.n != gr)
        return IR_OK;
    for (int32_t i = 0; i < gr; i++)
        if (x->a.dimensions.v[i] < 0 || x->a.dimensions.v[i] >= us->rank)
            return IR_OK;
    NEED(t = shd_project(p->tmp, s, gr, x->a.dimensions.v));
    return prop_emit(p, g, 0, t, us);
}

static IrStatus reshape_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    int64_t map[IR_MAX_RANK];
    const IrSharding *t = NULL;
    if (!ir_shape_is_array(&x->shape))
        return IR_OK;
    reshape_map(os, &x->shape, s, map);
    NEED(t = shd_project(p->tmp, s, x->shape.rank, map));
    return prop_emit(p, g, 0, t, os);
}

static IrStatus reshape_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                            const IrShape *us)
{
    (void)u;
    (void)k;
    const IrShape *gs = &prop_ins(p, g)->shape;
    int64_t map[IR_MAX_RANK];
    const IrSharding *t = NULL;
    reshape_map(us, gs, s, map);
    NEED(t = shd_project(p->tmp, s, gs->rank, map));
    return prop_emit(p, g, 0, t, us);
}

static IrStatus transpose_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    int32_t r = x->shape.rank;
    const IrSharding *t = NULL;
    if (!ir_shape_is_array(&x->shape) || x->a.dimensions.n != r || os->rank != r)
        return IR_OK;
    NEED(t = shd_transpose(p->tmp, s, x->a.dimensions.v));
    return prop_emit(p, g, 0, t, os);
}

static IrStatus transpose_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                              const IrShape *us)
{
    (void)k;
    IrInstr *x = prop_ins(p, u);
    int32_t gr = prop_ins(p, g)->shape.rank;
    int64_t inv[IR_MAX_RANK];
    const IrSharding *t = NULL;
    if (x->a.dimensions.n != gr || us->rank != gr)
        return IR_OK;
    prop_invert(x->a.dimensions.v, gr, inv, gr);
    NEED(t = shd_transpose(p->tmp, s, inv));
    return prop_emit(p, g, 0, t, us);
}

/* bitcast-convert: s of a value of rank `from` for one of rank `to`, the
 * leading dims shared, a trailing dim added untiled or dropped (see the
 * file comment). */
static IrStatus bitcast_convert_emit(Prop *p, int32_t g, const IrSharding *s, const IrShape *src, int32_t from,
                                     int32_t to)
{
    int64_t map[IR_MAX_RANK];
    const IrSharding *t = s;
    if (from > IR_MAX_RANK || to > IR_MAX_RANK || from - to > 1 || to - from > 1)
        return IR_OK;
    for (int32_t d = 0; d < IR_MAX_RANK; d++)
        map[d] = d;
    if (to > from)
        NEED(t = shd_insert_dims(p->tmp, s, to, map));
    else if (to < from)
        NEED(t = shd_project(p->tmp, s, to, map));
    return prop_emit(p, g, 0, t, src);
}

static IrStatus bitcast_convert_fwd(Prop *p, int32_t g, int32_t k, const IrSharding *s, const IrShape *os)
{
    (void)k;
    IrInstr *x = prop_ins(p, g);
    if (!ir_shape_is_array(&x->shape))
        return IR_OK;
    return bitcast_convert_emit(p, g, s, os, os->rank, x->shape.rank);
}

static IrStatus bitcast_convert_bwd(Prop *p, int32_t u, int32_t k, int32_t g, const IrSharding *s,
                                    const IrShape *us)
{
    (void)u;
    (void)k;
    return bitcast_convert_emit(p, g, s, us, us->rank, prop_ins(p, g)->shape.rank);
}

const PropRule prop_rule_broadcast = {.fwd = broadcast_fwd, .bwd = broadcast_bwd};
const PropRule prop_rule_reshape = {.fwd = reshape_fwd, .bwd = reshape_bwd};
const PropRule prop_rule_transpose = {.fwd = transpose_fwd, .bwd = transpose_bwd};
const PropRule prop_rule_bitcast_convert = {.fwd = bitcast_convert_fwd, .bwd = bitcast_convert_bwd};
