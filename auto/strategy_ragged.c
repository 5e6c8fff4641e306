/*
 * strategy_ragged.c: the roles of a ragged-dot, as partition/spmd_ragged.c
 * runs it. A ragged-dot is a dot whose lhs rows (the ragged dim) fall into
 * groups, each group multiplied by its own rhs matrix (rhs_group_dims),
 * or whose ragged dim is a batch dim (the plain batched dot).
 *
 * Its output dims that come from an operand dim (shd_ragged_dot_maps: the
 * rhs free dims; the batch dims and the lhs free dims but the ragged one
 * when group_sizes is one-dimensional) tile with that operand dim, each
 * device multiplying its own rows or columns by every group's matrix, no
 * collective; the ragged dim never (a tile would split a group), nor the
 * rhs group dim. Its one contracting dim is a contracted role: tiled, each
 * device computes the partial ragged-dot of its slice of the sum over the
 * whole result, and one all-reduce adds them; the partitioner then keeps
 * every other dim whole, so a contracted role is tiled alone. group_sizes
 * is replicated. A ragged dim that is contracted (the groups cut the sum)
 * has no strategy: the partitioner runs it whole.
 * Example: r = f32[64,32] ragged-dot(l f32[64,16], w f32[4,16,32],
 * g s32[4]), lhs_ragged_dims={0} on 4 devices: the 32 columns over 4
 * (w [-,-,x]), or the 16 contracted over 4 (l [-,x], w [-,x,-], an
 * all-reduce of r); never the 64 ragged rows.
 */
#include "strategy_internal.h"

bool auto_ragged_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    const IrShape *ls = &c->instr[x->opnd[0]].shape, *rs = &c->instr[x->opnd[1]].shape;
    int64_t fl[IR_MAX_RANK], fr[IR_MAX_RANK];
    const IrDotDnums *dn = &x->a.dot;
    if (x->op != OP_RAGGED_DOT || x->nopnd != 3 || !x->a.x || x->shape.rank > IR_MAX_RANK ||
        !shd_ragged_dot_maps(x, ls, rs, &c->instr[x->opnd[2]].shape, fl, fr) || dn->lhs_contracting.n != 1 ||
        dn->rhs_contracting.n != 1 || r->nout + 1 > MAX_ROLES)
        return false;
    for (int32_t d = 0; d < x->shape.rank; d++) {
        r->tileable[d] = fl[d] >= 0 || fr[d] >= 0;
        r->map[0][d] = (int8_t)fl[d];
        r->map[1][d] = (int8_t)fr[d];
    }
    /* Its output dims padded where they do not divide (6 columns, 5
     * batches over 4: tests/models/ragged_dot_sharded.hlo). */
    r->uneven = true;
    int32_t role = r->nout + r->nred++;
    r->size[role] = ls->dims[dn->lhs_contracting.v[0]];
    r->tileable[role] = true;
    r->map[0][role] = (int8_t)dn->lhs_contracting.v[0];
    r->map[1][role] = (int8_t)dn->rhs_contracting.v[0];
    r->flops = 2.0 * (double)ir_shape_elements(&x->shape) * (double)r->size[role];
    return true;
}

bool auto_ragged_tiles_ok(const Roles *r, const IrInstr *x, const int32_t *role, int32_t naxes)
{
    if (x->op != OP_RAGGED_DOT)
        return true;
    bool out = false, red = false;
    for (int32_t a = 0; a < naxes; a++) {
        out |= role[a] >= 0 && role[a] < r->nout;
        red |= role[a] >= r->nout;
    }
    return !(out && red);
}
