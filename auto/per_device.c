/*
 * per_device.c: auto_per_device, for a module part of which is already a
 * per-device program. --auto-shard chooses shardings of a global program,
 * whose result is the same on any number of devices (the oracle: the
 * partitioned run equals the one-device reference). Outside a manual
 * region two instructions give each device a value of its own:
 *
 *   a collective whose groups join partitions (a channel_id:
 *   replica_groups={} spans every partition, use_global_device_ids groups
 *   list them). On one device the reference runs it over a group of one
 *   (a copy); on N the partitioned program runs it over N, as XLA's
 *   partitioner keeps it (HandleAllReduce: a replicated cross-partition
 *   all-reduce is elementwise), so no sharding makes the two agree. One
 *   whose value reaches its computation's result is refused at its
 *   instruction; one whose value goes nowhere (a send, a dead end) stays.
 *
 *   partition-id: the reference reads 0, device 0 of the partitioned run
 *   too, and a replicated output is device 0's. Where what it reaches in
 *   the entry computation are arrays (and the tuple that returns them),
 *   each without a sharding of the user's is held replicated (as if the
 *   user had written it), so every device computes device 0's program on
 *   its own value and the output is device 0's: 254_hlo_expand_SpmdHlo's
 *   dynamic-slice by partition-id feeding a dot, whose output the plan
 *   had tiled, each tile from another device's slice. Where it reaches a
 *   called computation's result or a loop, it is refused.
 *
 * A collective without a channel_id groups replicas (one here) and stays.
 * A module with a manual region (shard_map) is left alone: there such
 * instructions are the region's own, its per-device view.
 */
#include "auto.h"

#include <string.h>

/* Does s (or a leaf of it) hand a value to the user's own code? */
static bool manual_sharding(const IrSharding *s)
{
    if (!s)
        return false;
    for (int32_t i = 0; s->kind == SHD_TUPLE && i < s->ntuple; i++)
        if (manual_sharding(&s->tuple[i]))
            return true;
    return shd_is_manual(s) || shd_has_manual_subgroup(s);
}

static bool has_manual_region(const IrModule *m)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++) {
            const IrInstr *ins = &m->comp[c]->instr[i];
            if (manual_sharding(ins->sharding))
                return true;
            const char *t = ins->op == OP_CUSTOM_CALL ? ins->a.x->custom_call_target : NULL;
            if (t && (!strcmp(t, "SPMDFullToShardShape") || !strcmp(t, "SPMDShardToFullShape")))
                return true;
        }
    return false;
}

/* Does collective `ins` exchange data between partitions of a world of n
 * partitions and one replica? Writes what its groups are into *why. */
static bool joins_partitions(const IrInstr *ins, int64_t n, const char **why)
{
    if (ins->a.channel_id == 0) /* replica groups: one replica here */
        return false;
    if (ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_PERMUTE_START) {
        const IrI64List *p = &ins->a.x->source_target_pairs;
        *why = "its source_target_pairs move data between partitions";
        for (int32_t k = 0; k + 1 < p->n; k += 2)
            if (p->v[k] != p->v[k + 1])
                return true;
        return false;
    }
    const IrReplicaGroups *g = &ins->a.x->replica_groups;
    IrGroupMode mode = ir_group_mode(ins);
    if (mode == IR_GROUPS_REPLICA_AND_PARTITION || !g->ngroups) {
        *why = mode == IR_GROUPS_REPLICA_AND_PARTITION
                   ? "a channel_id without use_global_device_ids: each group spans every partition"
                   : "replica_groups={} with a channel_id: every partition";
        return n > 1;
    }
    *why = "its replica_groups join partitions";
    for (int32_t k = 0; k < g->ngroups; k++)
        if (g->group_size[k] > 1)
            return true;
    return false;
}

static bool is_collective(IrOpcode op)
{
    return op == OP_ALL_REDUCE || op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER || op == OP_ALL_TO_ALL ||
           op == OP_COLLECTIVE_BROADCAST || op == OP_COLLECTIVE_REDUCE || op == OP_RAGGED_ALL_TO_ALL ||
           op == OP_ALL_REDUCE_START || op == OP_ALL_GATHER_START || op == OP_COLLECTIVE_PERMUTE ||
           op == OP_COLLECTIVE_PERMUTE_START;
}

/* Mark in t (one per instruction of c) what depends on a marked
 * instruction, to a fixed point (parse order need not define before use). */
static void spread(const IrComputation *c, bool *t)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t i = 0; i < c->ninstr; i++)
            for (int32_t k = 0; !t[i] && k < c->instr[i].nopnd; k++)
                if (c->instr[i].opnd[k] >= 0 && t[c->instr[i].opnd[k]])
                    t[i] = changed = true;
    }
}

/* Can what partition-id reaches in t be held replicated? Arrays of the
 * entry computation, and tuples (which only forward them). */
static bool pinnable(const IrComputation *c, const bool *t)
{
    if (!c->is_entry)
        return false;
    for (int32_t i = 0; i < c->ninstr; i++)
        if (t[i] && c->instr[i].op != OP_TUPLE && !ir_shape_is_array(&c->instr[i].shape))
            return false;
    return true;
}

static IrStatus pin(IrModule *m, IrComputation *c, const bool *t, IrDiag *d)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        IrInstr *x = &c->instr[i];
        if (!t[i] || x->op == OP_TUPLE || x->sharding)
            continue;
        if (!(x->sharding = shd_replicated(m->arena)))
            return ir_oom(d, NULL);
    }
    return IR_OK;
}

/* Source i of computation c: refused, held replicated, or left alone. */
static IrStatus one_source(IrModule *m, IrComputation *c, int32_t i, const char *why, bool *t, IrDiag *d)
{
    memset(t, 0, (size_t)c->ninstr * sizeof *t);
    t[i] = true;
    spread(c, t);
    if (c->root < 0 || !t[c->root])
        return IR_OK;
    const IrInstr *ins = &c->instr[i];
    if (ins->op != OP_PARTITION_ID)
        return ir_error(d, IR_EINPUT, m->file, NULL, ins->pos,
                        "%s: %s between partitions outside a manual region (%s), and its value reaches the "
                        "result of %s: the result depends on how many devices run it, so that part of the "
                        "module is already a per-device program, and --auto-shard shards global ones; "
                        "compile it without --auto-shard",
                        ins->name, ir_op_name(ins->op), why, c->name);
    if (pinnable(c, t))
        return pin(m, c, t, d);
    return ir_error(d, IR_EINPUT, m->file, NULL, ins->pos,
                    "%s: partition-id outside a manual region, whose value reaches the result of %s through "
                    "a loop, a call or a computation's result: each device's value differs, so that part of the "
                    "module is already a per-device program, and --auto-shard shards global ones (the "
                    "one-device reference reads 0); compile it without --auto-shard",
                    ins->name, c->name);
}

IrStatus auto_per_device(IrModule *m, int64_t n, IrDiag *d)
{
    if (n <= 1 || has_manual_region(m))
        return IR_OK;
    IrStatus st = IR_OK;
    for (int32_t c = 0; c < m->ncomp && st == IR_OK; c++) {
        IrComputation *comp = m->comp[c];
        bool *t = NULL;
        for (int32_t i = 0; i < comp->ninstr && st == IR_OK; i++) {
            const IrInstr *ins = &comp->instr[i];
            const char *why = NULL;
            if (ins->op != OP_PARTITION_ID && !(is_collective(ins->op) && joins_partitions(ins, n, &why)))
                continue;
            if (!t && !(t = ts_calloc((size_t)comp->ninstr, sizeof *t)))
                st = ir_oom(d, NULL);
            else
                st = one_source(m, comp, i, why, t, d);
        }
        ts_free(t);
    }
    return st;
}
