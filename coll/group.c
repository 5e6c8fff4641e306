/*
 * group.c: the groups of a collective (XLA's CollectiveOpGroupMode,
 * ir_group_mode; an empty replica_groups is everyone of the mode's
 * domain): each device's members in group order, and every collective of
 * a module checked before a replay runs.
 */
#include "coll.h"

#include <stdio.h>
#include <string.h>

static const char *mode_ids(IrGroupMode mode)
{
    return mode == IR_GROUPS_GLOBAL ? "devices" : mode == IR_GROUPS_PARTITION ? "partitions" : "replicas";
}

IrStatus coll_group(const IrModule *m, const IrInstr *ins, const CollWorld *w, int64_t me, int64_t *members,
                       int32_t *size, int32_t *my_index, IrDiag *d)
{
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    IrGroupMode mode = ir_group_mode(ins);
    int64_t rep = me / w->n, part = me % w->n;
    int64_t domain = mode == IR_GROUPS_GLOBAL ? w->n * w->r : mode == IR_GROUPS_PARTITION ? w->n : w->r;
    int64_t key = mode == IR_GROUPS_GLOBAL ? me : mode == IR_GROUPS_PARTITION ? part : rep;
    /* The keys of my group, into members[] first. */
    int32_t nkey = 0, found = -1;
    if (!g->present || g->ngroups == 0) {
        for (int64_t k = 0; k < domain; k++)
            members[nkey++] = k;
        found = 0;
    } else {
        for (int32_t k = 0; k < g->ngroups; k++)
            for (int32_t j = 0; j < g->group_size[k]; j++) {
                int64_t id = g->groups[k][j];
                if (id < 0 || id >= domain)
                    return coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld, but there are %lld %s",
                                     (long long)id, (long long)domain, mode_ids(mode));
                if (id != key)
                    continue;
                if (found >= 0)
                    return coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld twice", (long long)id);
                found = k;
            }
        if (found < 0) {
            members[nkey++] = key;
        } else {
            for (int32_t j = 0; j < g->group_size[found]; j++)
                members[nkey++] = g->groups[found][j];
        }
    }
    /* Keys to global ids. */
    int32_t n = 0;
    if (mode == IR_GROUPS_REPLICA_AND_PARTITION) {
        int64_t keys[nkey > 0 ? nkey : 1];
        memcpy(keys, members, (size_t)nkey * sizeof *keys);
        for (int64_t p = 0; p < w->n; p++)
            for (int32_t j = 0; j < nkey; j++)
                members[n++] = keys[j] * w->n + p;
    } else {
        for (int32_t j = 0; j < nkey; j++)
            members[n++] = mode == IR_GROUPS_GLOBAL      ? members[j]
                           : mode == IR_GROUPS_PARTITION ? rep * w->n + members[j]
                                                    : members[j] * w->n + part;
    }
    *my_index = 0;
    for (int32_t j = 0; j < n; j++)
        if (members[j] == me)
            *my_index = j;
    *size = n;
    return IR_OK;
}

/* The static half of coll_group and of the shape checks, once per
 * instruction: every id in range and named once, and each result shape
 * fits the group size. */
static IrStatus check_one(const IrModule *m, const IrComputation *c, const IrInstr *ins, const CollWorld *w,
                          IrDiag *d)
{
    IrGroupMode mode = ir_group_mode(ins);
    int64_t domain = mode == IR_GROUPS_GLOBAL ? w->n * w->r : mode == IR_GROUPS_PARTITION ? w->n : w->r;
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    if ((ins->op == OP_SEND || ins->op == OP_RECV) && !ins->a.x->is_host_transfer) {
        /* A link between devices: its pairs, at most one per target. */
        int32_t cap = (int32_t)(2 * w->n * w->r), n = 0;
        int64_t *v = ts_malloc((size_t)cap * sizeof *v);
        IrStatus st = v ? IR_OK : coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
        /* A send that names no pairs reaches no recv (its data is dropped);
         * a recv must say where its data comes from. */
        bool named = ir_frontend_attr(ins, "_xla_send_recv_source_target_pairs") != NULL;
        if (st == IR_OK && (named || ins->op == OP_RECV) && !ir_send_recv_pairs(ins, v, cap, &n))
            st = coll_fail(m, ins, d, IR_EINPUT, "a %s between devices needs its pairs (frontend_attributes="
                           "{_xla_send_recv_source_target_pairs=\"{{0,1},...}\"}, at most one for each of the %lld "
                           "devices)", ir_op_name(ins->op), (long long)(w->n * w->r));
        for (int32_t k = 0; st == IR_OK && k < n; k++)
            if (v[k] >= domain)
                st = coll_fail(m, ins, d, IR_EINPUT, "_xla_send_recv_source_target_pairs names %lld, but there are "
                               "%lld %s", (long long)v[k], (long long)domain, mode_ids(mode));
        ts_free(v);
        return st;
    }
    if (ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_PERMUTE_START) {
        const IrI64List *p = &ins->a.x->source_target_pairs;
        for (int32_t k = 0; k < p->n; k++)
            if (p->v[k] < 0 || (p->v[k] >= domain && !(mode == IR_GROUPS_PARTITION && p->v[k] < w->n * w->r)))
                return coll_fail(m, ins, d, IR_EINPUT, "source_target_pairs names %lld, but there are %lld %s",
                                 (long long)p->v[k], (long long)domain, mode_ids(mode));
        return IR_OK;
    }
    uint8_t *seen = ts_calloc((size_t)(domain > 0 ? domain : 1), 1);
    if (!seen)
        return coll_fail(m, ins, d, IR_ENOMEM, "out of memory");
    IrStatus st = IR_OK;
    int64_t size = g->present && g->ngroups > 0 ? g->group_size[0] : domain;
    for (int32_t k = 0; st == IR_OK && g->present && k < g->ngroups; k++)
        for (int32_t j = 0; st == IR_OK && j < g->group_size[k]; j++) {
            int64_t id = g->groups[k][j];
            if (id < 0 || id >= domain)
                st = coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld, but there are %lld %s", (long long)id,
                               (long long)domain, mode_ids(mode));
            else if (seen[id]++)
                st = coll_fail(m, ins, d, IR_EINPUT, "replica_groups names %lld twice", (long long)id);
        }
    ts_free(seen);
    if (mode == IR_GROUPS_REPLICA_AND_PARTITION)
        size *= w->n;
    /* The shapes a group of `size` gives (one operand, arrays). */
    const IrShape *rs = &ins->shape;
    if (st != IR_OK || ins->nopnd != 1 || rs->type == IR_TUPLE || ins->opnd[0] < 0)
        return st;
    const IrShape *ps = &c->instr[ins->opnd[0]].shape;
    int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    if (ps->type == IR_TUPLE || dim < 0 || dim >= ps->rank || size < 1)
        return st;
    bool fits = ins->op == OP_ALL_GATHER      ? coll_scaled(ps, rs, dim, size)
                : ins->op == OP_REDUCE_SCATTER ? coll_scaled(rs, ps, dim, size)
                : ins->op == OP_ALL_TO_ALL     ? ps->dims[dim] % size == 0
                                               : true;
    return fits ? IR_OK : coll_shape_fail(m, ins, d, ps, rs, (int32_t)size);
}

IrStatus coll_check_module(const IrModule *m, const CollWorld *w, IrDiag *d)
{
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            const IrInstr *ins = &m->comp[k]->instr[i];
            bool coll = ins->op == OP_ALL_REDUCE || ins->op == OP_ALL_GATHER || ins->op == OP_REDUCE_SCATTER ||
                        ins->op == OP_ALL_TO_ALL || ins->op == OP_COLLECTIVE_PERMUTE ||
                        ins->op == OP_COLLECTIVE_BROADCAST || ins->op == OP_COLLECTIVE_REDUCE ||
                        ins->op == OP_RAGGED_ALL_TO_ALL || ins->op == OP_ALL_REDUCE_START ||
                        ins->op == OP_ALL_GATHER_START || ins->op == OP_COLLECTIVE_PERMUTE_START ||
                        ((ins->op == OP_SEND || ins->op == OP_RECV) && !ins->a.x->is_host_transfer);
            IrStatus st = coll ? check_one(m, m->comp[k], ins, w, d) : IR_OK;
            if (st != IR_OK)
                return st;
        }
    return IR_OK;
}

