/*
 * permute.c: collective-permute, in a host and across hosts. Each device
 * receives the operand of the device a pair names as its source (zeros
 * where no pair targets it). Pairs {d0->d1, d1->d2, d2->d0}:
 *
 *     d0: C      d1: A      d2: B        (operands A, B, C)
 *
 * In a host each device copies its source's operand (coll_permute_part).
 * Across hosts the operands travel point to point to the hosts whose
 * devices read them, nothing else (coll_p2p_operands, p2p.c). The pairs
 * above with h0 {d0, d1} and h1 {d2}:
 *
 *     h0 -> h1: B (d2 reads d1)      h1 -> h0: C (d0 reads d2)
 *     A stays in h0 (d1 reads d0 there)
 */
#include "coll.h"

#include <string.h>

int64_t coll_permute_source(const IrInstr *ins, const CollWorld *w, int64_t me)
{
    const IrI64List *p = &ins->a.x->source_target_pairs;
    IrGroupMode mode = ir_group_mode(ins);
    int64_t rep = me / w->n, part = me % w->n;
    int64_t key = mode == IR_GROUPS_GLOBAL ? me : mode == IR_GROUPS_PARTITION ? part : rep;
    int64_t src = -1;
    for (int32_t k = 0; k + 1 < p->n; k += 2)
        if (p->v[k + 1] == key)
            src = p->v[k];
    if (src < 0)
        return -1;
    /* IrGroupMode ids to global ids. tessel's partitioner repeats partition
     * pairs for every replica as global ids (partition + replica * N);
     * a pair naming the ids of this replica's partitions is the same. */
    if (mode == IR_GROUPS_PARTITION)
        src = src < w->n ? rep * w->n + src : src;
    else if (mode == IR_GROUPS_REPLICA)
        src = src * w->n + part;
    return src < w->n * w->r ? src : -1;
}

IrStatus coll_permute_part(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me,
                           DevValue *const *const *ops, int32_t size, int32_t k, const IrShape *rs, DevValue **out,
                           IrDiag *d)
{
    int64_t src = coll_permute_source(ins, w, me);
    if (src >= 0 && !coll_dims_equal(&ops[src][k]->shape, rs))
        return coll_shape_fail(m, ins, d, &ops[src][k]->shape, rs, size);
    *out = src >= 0 ? dev_value_clone(ops[src][k]) : dev_value_new(rs);
    return *out ? IR_OK : IR_ENOMEM;
}

IrStatus coll_permute_across(CollHost *w, const IrInstr *ins, const CollHostGroups *hg, IrDiag *d)
{
    return coll_p2p_operands(w, ins, hg->src, d);
}
