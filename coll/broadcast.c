/*
 * broadcast.c: collective-broadcast, in a host and across hosts. Every
 * member of a group receives the operand of the group's first member (its
 * root). Group {d0,d1,d2}, operands A, B, C:
 *
 *     d0, d1, d2:  A
 *
 * In a host each member copies the root's operand (coll_broadcast_part;
 * the members on one host share one result, steps.c). Across hosts only
 * the root's operand travels, to the hosts holding members
 * (coll_p2p_operands, p2p.c):
 *
 *     h0 {d0, d1}, h1 {d2}:   h0 -> h1: A
 */
#include "coll.h"

IrStatus coll_broadcast_part(const IrModule *m, const IrInstr *ins, DevValue *const *const *ops,
                             const int64_t *members, int32_t size, int32_t k, const IrShape *ps, const IrShape *rs,
                             DevValue **out, IrDiag *d)
{
    if (!coll_dims_equal(ps, rs))
        return coll_shape_fail(m, ins, d, ps, rs, size);
    *out = dev_value_clone(ops[members[0]][k]);
    return *out ? IR_OK : IR_ENOMEM;
}

IrStatus coll_broadcast_across(CollHost *w, const IrInstr *ins, const CollHostGroups *hg, IrDiag *d)
{
    return coll_p2p_operands(w, ins, hg->src, d);
}
