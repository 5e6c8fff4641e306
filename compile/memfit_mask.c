/*
 * memfit_mask.c: masks kept apart, one more way memfit.c lowers a peak.
 *
 * A comparison whose one reader is an elementwise op of its dims runs
 * inside that reader's fused group (ir/fusion_find.c): its pred result
 * never exists, and the group reads the comparison's wider operands when
 * the reader runs. In a training step the reader is in the backward
 * (JAX's relu gradient: select(h > 0, g, 0)) and so the forward's f32
 * operand h is held for it, or made again there, beside the backward's
 * own values. A copy between the comparison and its reader (a reference:
 * no bytes of its own, device/k_elementwise.c; no fused group takes a
 * copy in) leaves the comparison alone in its group: its mask, a quarter
 * of h's bytes, is made where the order puts it, and h may die in the
 * forward. The values are those of the same comparison: bit for bit.
 *
 * Example: the SGD-with-momentum step of a 4-layer relu MLP (review32's,
 * batch split over 2 devices) reached 0.64 P holding each layer's f32
 * pre-activation (or making it again) for its mask; with the masks kept
 * apart it reaches 0.60 P (0.76 -> 0.71 P on 4 devices).
 */
#include "memfit.h"

#include <stdio.h>
#include <string.h>

/* Is i a comparison whose pred result is narrower than an operand of it
 * and whose one reader (returned, else -1) is an elementwise op of its
 * dims, neither with control edges nor the root? */
static int32_t fused_mask_reader(const IrComputation *c, const int32_t *nuse, const int32_t *reader, int32_t i)
{
    const IrInstr *ins = &c->instr[i];
    if (ins->op != OP_COMPARE || !ir_shape_is_array(&ins->shape) || nuse[i] != 1 || i == c->root ||
        ir_shape_elements(&ins->shape) < IR_FUSION_MIN_ELEMENTS || /* a small one saves nothing */
        ins->a.x->control_predecessors.n > 0)
        return -1;
    bool narrower = false;
    for (int32_t j = 0; j < ins->nopnd; j++) {
        const IrInstr *o = &c->instr[ins->opnd[j]];
        narrower = narrower || (o->op != OP_BROADCAST && o->op != OP_CONSTANT && ir_shape_is_array(&o->shape) &&
                                ir_shape_bytes(&o->shape) > ir_shape_bytes(&ins->shape));
    }
    int32_t u = reader[i];
    const IrInstr *ui = &c->instr[u];
    if (!narrower || u == c->root || !ir_op_is_elementwise(ui->op) || ui->op == OP_COPY || ui->op == OP_MAP ||
        !ir_shape_is_array(&ui->shape) || !ir_shape_same_dims(&ui->shape, &ins->shape) ||
        ui->a.x->control_predecessors.n > 0)
        return -1;
    return u;
}

/* ins reads `to` where it read `from` (a new operand array: the old one
 * may be shared). */
static bool redirect(IrModule *m, IrInstr *ins, int32_t from, int32_t to)
{
    int32_t *opnd = ir_alloc_array(m->arena, (size_t)ins->nopnd, sizeof *opnd);
    for (int32_t j = 0; opnd && j < ins->nopnd; j++)
        opnd[j] = ins->opnd[j] == from ? to : ins->opnd[j];
    if (opnd)
        ins->opnd = opnd;
    return opnd != NULL;
}

/* A copy of instruction i appended to c, named NAME.suffix and marked
 * MF_APART_ATTR="NAME" (the plan says what it keeps apart); -1 when out
 * of memory. */
static int32_t add_copy(IrModule *m, IrComputation *c, int32_t i, const char *suffix)
{
    char base[512];
    snprintf(base, sizeof base, "%s.%s", c->instr[i].name, suffix);
    IrShape shape = c->instr[i].shape;
    const char *of = c->instr[i].name;
    int32_t k = ir_add_simple(m, c, OP_COPY, &shape, 1, &i, base);
    IrKeyValue *kv = k >= 0 ? ir_alloc_array(m->arena, 1, sizeof *kv) : NULL;
    if (!kv)
        return -1;
    kv->key = MF_APART_ATTR;
    kv->value = of;
    c->instr[k].a.frontend = kv;
    c->instr[k].a.nfrontend = 1;
    return k;
}

int32_t mf_keep_masks(IrModule *m, IrComputation *c)
{
    int32_t n = c->ninstr, kept = 0;
    int32_t *nuse = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *nuse);
    int32_t *reader = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *reader);
    bool ok = nuse && reader;
    for (int32_t i = 0; ok && i < n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            nuse[ins->opnd[j]]++;
            reader[ins->opnd[j]] = i;
        }
        const IrI64List *cp = &ins->a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                nuse[cp->v[j]] += 2; /* never a mask kept apart */
    }
    for (int32_t i = 0; ok && i < n; i++) {
        int32_t u = fused_mask_reader(c, nuse, reader, i);
        if (u < 0)
            continue;
        int32_t k = add_copy(m, c, i, "mask");
        ok = k >= 0 && redirect(m, &c->instr[u], i, k);
        /* A broadcast the comparison shares with others (JAX's zero for
         * both the relu's mask and its select) gets its own, which runs
         * inside the comparison's group: made apart, it never exists. */
        for (int32_t j = 0; ok && j < c->instr[i].nopnd; j++) {
            int32_t o = c->instr[i].opnd[j];
            if (c->instr[o].op != OP_BROADCAST || nuse[o] < 2)
                continue;
            IrInstr b = c->instr[o];
            char base[512];
            snprintf(base, sizeof base, "%s.mask", b.name);
            b.name = ir_unique_name(m, base);
            int32_t ob = b.name ? ir_add_instr(m, c, &b) : -1;
            ok = ob >= 0 && redirect(m, &c->instr[i], o, ob);
        }
        kept += ok;
    }
    ts_free(nuse);
    ts_free(reader);
    return ok ? kept : -1;
}

/* Is node x of g the copy of a mask kept apart (a copy of a comparison)? */
static bool mask_copy(const MfGraph *g, int32_t x)
{
    const MfNode *n = &g->node[x];
    return g->c->instr[n->src].op == OP_COPY && n->nopnd == 1 &&
           g->c->instr[g->node[n->opnd[0]].src].op == OP_COMPARE;
}

static int32_t add_once(int32_t *list, int32_t n, int32_t x)
{
    for (int32_t t = 0; t < n; t++)
        if (list[t] == x)
            return n;
    list[n] = x;
    return n + 1;
}

bool mf_hoist_masks(MfGraph *g)
{
    int32_t *pos = ts_malloc((size_t)g->nnode * sizeof *pos), *moved = ts_malloc((size_t)g->nseq * sizeof *moved);
    int32_t *out = ts_malloc((size_t)g->nseq * sizeof *out);
    bool ok = pos && moved && out;
    for (int32_t k = 0; ok && k < g->nseq; k++) {
        int32_t x = g->seq[k];
        if (!mask_copy(g, x))
            continue;
        for (int32_t i = 0; i < g->nnode; i++)
            pos[i] = -1;
        for (int32_t q = 0; q < g->nseq; q++)
            pos[g->seq[q]] = q;
        /* The group moved: the comparison's broadcasts and constants (no
         * operand that runs), the comparison and the copy; placed just
         * after the last of the other operands. */
        int32_t cmp = g->node[x].opnd[0], nmove = 0, after = -1;
        const MfNode *cn = &g->node[cmp];
        for (int32_t pass = 0; pass < 2; pass++)
            for (int32_t j = 0; j < cn->nopnd; j++) {
                int32_t o = cn->opnd[j], oc = g->node[o].nopnd == 1 ? g->node[o].opnd[0] : -1;
                IrOpcode op = g->c->instr[g->node[o].src].op;
                bool free_b = op == OP_BROADCAST && oc >= 0 && g->c->instr[g->node[oc].src].op == OP_CONSTANT;
                if (op != OP_CONSTANT && !free_b) {
                    after = pos[o] > after ? pos[o] : after;
                    continue;
                }
                if (pass == 0)
                    continue;
                if (free_b && pos[oc] > after)
                    nmove = add_once(moved, nmove, oc);
                if (pos[o] > after)
                    nmove = add_once(moved, nmove, o);
            }
        nmove = add_once(moved, nmove, cmp);
        nmove = add_once(moved, nmove, x);
        if (after + 1 >= pos[cmp])
            continue;
        int32_t nout = 0;
        for (int32_t q = 0; q < g->nseq; q++) {
            bool member = false;
            for (int32_t t = 0; t < nmove; t++)
                member = member || g->seq[q] == moved[t];
            if (q == after + 1)
                for (int32_t t = 0; t < nmove; t++)
                    out[nout++] = moved[t];
            if (!member)
                out[nout++] = g->seq[q];
        }
        memcpy(g->seq, out, (size_t)nout * sizeof *out);
    }
    ts_free(pos);
    ts_free(moved);
    ts_free(out);
    return ok;
}
