/*
 * memfit_merge.c: instructions that compute the same value, merged
 * before a memory fit tries again (memfit.c), as XLA's CSE pass does.
 *
 * JAX writes some values twice: the layer norm's centred input x - mean
 * is one subtract for the normalized output and another, identical, for
 * its backward (each with its own broadcast of the mean). Kept apart,
 * both are live across the backward of what follows; merged, one is,
 * and recomputation may drop it in turn. Two instructions are the same
 * when their lines print alike (opcode, shape and layout, attributes,
 * called computations) with their operands merged first and their names
 * left out, and each may run a second time with the same result and
 * nothing else (mf_can_remat: no collective, random draw, side effect
 * or control edge). Each use of the later one then reads the first; the
 * later one is left where it is, read by nothing, so it no longer runs
 * (ir_exec_order_of runs what the root and the side effects reach), and
 * marked MF_SAME_ATTR="FIRST" (the plan text says `merged: ...`).
 * Results are the same bits: the same instruction on the same values.
 */
#include "memfit.h"

#include <string.h>

/* The line of ins with its operands read through rep[] and no name:
 * what two instructions computing the same value print alike. A heap
 * string, NULL on OOM. */
static char *key_of(const IrModule *m, const IrComputation *c, const IrInstr *ins, const int32_t *rep,
                    int32_t *scratch)
{
    IrInstr k = *ins;
    for (int32_t j = 0; j < ins->nopnd; j++)
        scratch[j] = ins->opnd[j] >= 0 && ins->opnd[j] < c->ninstr ? rep[ins->opnd[j]] : ins->opnd[j];
    k.opnd = scratch;
    k.name = "_";
    return ir_print_instr(m, c, &k);
}

static uint64_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* pos[i]: instruction i's position in order (n when it does not run);
 * pos[n + i]: its last reader's (-1: none). A heap array of 2n, NULL on
 * OOM. */
static int32_t *live_pos(const IrComputation *c, const int32_t *order, int32_t norder)
{
    int32_t n = c->ninstr;
    int32_t *pos = ts_malloc((size_t)(2 * n + 1) * sizeof *pos);
    for (int32_t i = 0; pos && i < n; i++)
        pos[i] = n, pos[n + i] = -1;
    for (int32_t k = 0; pos && k < norder; k++) {
        const IrInstr *ins = &c->instr[order[k]];
        pos[order[k]] = k;
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < n)
                pos[n + ins->opnd[j]] = k;
    }
    return pos;
}

int32_t mf_merge_same(IrModule *m, IrComputation *c)
{
    int32_t n = c->ninstr, norder = 0, merged = 0, width = 1;
    for (int32_t i = 0; i < n; i++)
        width = c->instr[i].nopnd > width ? c->instr[i].nopnd : width;
    int32_t *order = ts_malloc((size_t)(n ? n : 1) * sizeof *order);
    int32_t *rep = ts_malloc((size_t)(n ? n : 1) * sizeof *rep);
    int32_t *scratch = ts_malloc((size_t)width * sizeof *scratch);
    bool *pred = ts_calloc((size_t)(n ? n : 1), sizeof *pred);
    /* open addressing over the eligible instructions' keys */
    int32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    int32_t *slot = ts_malloc((size_t)cap * sizeof *slot);
    char **key = ts_calloc((size_t)(n ? n : 1), sizeof *key);
    uint64_t *hash = ts_malloc((size_t)(n ? n : 1) * sizeof *hash);
    IrExecOrderError err;
    bool ok = order && rep && scratch && pred && slot && key && hash &&
              ir_exec_order_of(m, c, order, &norder, &err) == IR_OK;
    for (int32_t i = 0; ok && i < n; i++) {
        rep[i] = i;
        const IrI64List *cp = &c->instr[i].a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                pred[cp->v[j]] = true;
    }
    for (int32_t s = 0; ok && s < cap; s++)
        slot[s] = -1;
    for (int32_t k = 0; ok && k < norder; k++) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        if (i == c->root || pred[i] || ins->op == OP_PARAMETER || !mf_can_remat(m, ins))
            continue;
        key[i] = key_of(m, c, ins, rep, scratch);
        if (!(ok = key[i] != NULL))
            break;
        hash[i] = hash_of(key[i]);
        int32_t s = (int32_t)(hash[i] & (uint64_t)(cap - 1));
        while (slot[s] >= 0 && (hash[slot[s]] != hash[i] || strcmp(key[slot[s]], key[i]) != 0))
            s = (s + 1) & (cap - 1);
        if (slot[s] < 0)
            slot[s] = i;
        else
            rep[i] = slot[s];
    }
    /* Only values worth holding once are read through the first: a
     * constant, iota, broadcast or reshape is made again freely (or runs
     * inside its reader's fused group), and one array for many readers
     * would be kept (it counts in the keys all the same); and only where
     * the first is still live, in the order as it is, when the second is
     * made (both held at once: merged, one is; else the first would be
     * kept across the gap). */
    int32_t *pos = order ? live_pos(c, order, norder) : NULL;
    ok = ok && pos;
    merged = 0;
    for (int32_t i = 0; ok && i < n; i++) {
        IrOpcode op = c->instr[i].op;
        if (op == OP_CONSTANT || op == OP_IOTA || op == OP_BROADCAST || op == OP_RESHAPE || op == OP_BITCAST ||
            pos[i] > pos[n + rep[i]])
            rep[i] = i;
        merged += rep[i] != i;
    }
    ts_free(pos);
    for (int32_t i = 0; ok && i < n; i++)
        if (rep[i] != i)
            ok = mf_mark(m->arena, &c->instr[i].a, MF_SAME_ATTR, c->instr[rep[i]].name);
    for (int32_t i = 0; ok && merged > 0 && i < n; i++) {
        IrInstr *ins = &c->instr[i];
        bool moves = false;
        for (int32_t j = 0; j < ins->nopnd; j++)
            moves = moves || (ins->opnd[j] >= 0 && ins->opnd[j] < n && rep[ins->opnd[j]] != ins->opnd[j]);
        if (!moves)
            continue;
        int32_t *no = ir_alloc_array(m->arena, (size_t)ins->nopnd, sizeof *no);
        if (!(ok = no != NULL))
            break;
        for (int32_t j = 0; j < ins->nopnd; j++)
            no[j] = ins->opnd[j] >= 0 && ins->opnd[j] < n ? rep[ins->opnd[j]] : ins->opnd[j];
        ins->opnd = no;
    }
    for (int32_t i = 0; key && i < n; i++)
        ts_free(key[i]);
    ts_free(order);
    ts_free(rep);
    ts_free(scratch);
    ts_free(pred);
    ts_free(slot);
    ts_free(key);
    ts_free(hash);
    return ok ? merged : -1;
}
