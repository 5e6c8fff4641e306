/*
 * memfit_ckpt.c: the dots checkpoint, one more start memfit.c gives the
 * search when nothing it found fits: the graph as `tessel grad --remat
 * dots` (grad/remat_policy.c, JAX's dots_saveable) would have written
 * it, the backward recomputing every value of the forward it reads but
 * the dots and convolutions.
 *
 * The remat step (memfit_remat.c) adds one copy at a time and keeps it
 * only when it lowers the peak: where the copies pay only together, as
 * an attention's softmax chain (its max, shifted scores, exp, sum and
 * quotient each read again by the backward, each copy alone moving the
 * peak rather than lowering it), it stops short. Here they are all made
 * at once, before the order is chosen, so the scheduler places them
 * (each copy just before the first of its readers a depth-first order
 * reaches) and the remat step goes on from there.
 *
 * The program carries no mark of where its backward starts: the split
 * is the peak of the model in its given order (a training step peaks
 * where its backward begins, every activation held), so the readers
 * after it are the backward's. Splitting after the loss's cone instead
 * (the last instruction the root's floating scalar depends on: where the
 * backward starts) was measured on tests/models/memfit, the SGD steps of
 * tests/models/grad's models and bench/gen.py diamonds at 0.7, 0.5, 0.4
 * and 0.3 of their peaks: it fitted no case more; the attention step at
 * P/2 fitted with fewer copies (180, 0.58 M FLOPs, against 236, 0.73 M),
 * but the conv net step of tests/models/grad/convnet.hlo went no lower
 * than 7776 bytes, where the peak's split fits 7300 (0.72 P):
 * tests/e2e/memfit.sh. Each value made at or before the split
 * and read after it, unless saved, gets one copy (made from copies of
 * its own unsaved operands in turn), which every reader after the split
 * reads (but the root: it returns the forward's outputs). Saved, as the
 * policy keeps them: dots and convolutions, parameters, constants, calls,
 * referring instructions and what may not run twice (mf_can_remat); and
 * a value MAX_DEPTH copies down a chain, kept alive instead (a long
 * elementwise forward is not copied whole). Calls are kept as the policy
 * keeps them, and the remat step may still copy one: made again here
 * too, the attention step's masked scores (a call of jnp.where's) came
 * no lower than 55428 bytes, over P/2, where kept they fit at 53901.
 * The values are those of the same instructions: bit for bit.
 *
 * Example: s = dot(q, k); p = exp(s - max(s)); out = dot(p, v); the
 * backward reads s, p and out's operands: p's copy is made from s (a
 * dot, saved) just before its first backward reader, and p itself dies
 * at the forward's dot.
 */
#include "memfit.h"

#include <string.h>

#define MAX_DEPTH 64 /* copies made from copies, levels deep (memfit_remat.c's MAX_CHAIN) */

/* Does the checkpoint keep node x from the forward (read as it is)? */
static bool saved(const MfGraph *g, int32_t x)
{
    const IrInstr *ins = &g->c->instr[g->node[x].src];
    return g->node[x].held || ins->op == OP_DOT || ins->op == OP_CONVOLUTION || ins->op == OP_CONSTANT ||
           ins->op == OP_CALL || mf_refers(ins->op) || !mf_can_remat(g->m, ins);
}

typedef struct Ckpt {
    MfGraph *g;
    int32_t split;
    int32_t *pos;   /* a node's position in the given order (-1: does not run) */
    int32_t *copy;  /* its copy (-1: none yet) */
    int32_t *out;   /* the new order */
    int32_t nout;
} Ckpt;

/* The node a reader after the split reads for o (depth copies down): o
 * itself (saved, made after the split, or MAX_DEPTH down), or o's copy,
 * made (its operands' copies first) and appended to the new order when it
 * is not yet; -1 when out of memory. */
static int32_t copy_of(Ckpt *k, int32_t o, int depth)
{
    MfGraph *g = k->g;
    if (k->pos[o] < 0 || k->pos[o] > k->split || depth >= MAX_DEPTH || saved(g, o))
        return o;
    if (k->copy[o] >= 0)
        return k->copy[o];
    int32_t n = g->node[o].nopnd;
    int32_t *opnd = ir_alloc_array(g->arena, (size_t)(n ? n : 1), sizeof *opnd);
    if (!opnd)
        return -1;
    for (int32_t j = 0; j < n; j++)
        if ((opnd[j] = copy_of(k, g->node[o].opnd[j], depth + 1)) < 0)
            return -1;
    int32_t x = g->nnode++;
    g->node[x] = (MfNode){.src = g->node[o].src, .nopnd = n, .opnd = opnd, .bytes = g->node[o].bytes,
                          .clone = true};
    k->pos[x] = -1;
    k->copy[o] = x;
    k->out[k->nout++] = x;
    return x;
}

bool mf_checkpoint_dots(MfGraph *g)
{
    MfProfile pr;
    if (!mf_profile(g, &pr, NULL, NULL))
        return false;
    if (pr.at < 0)
        return true;
    /* at most one copy per node */
    int32_t cap = 2 * g->nnode + 16;
    MfNode *node = ir_alloc_array(g->arena, (size_t)cap, sizeof *node);
    int32_t *seq = ir_alloc_array(g->arena, (size_t)cap, sizeof *seq);
    Ckpt k = {.g = g, .split = pr.at, .out = seq};
    k.pos = ts_malloc((size_t)cap * sizeof *k.pos);
    k.copy = ts_malloc((size_t)cap * sizeof *k.copy);
    bool ok = node && seq && k.pos && k.copy;
    if (ok) {
        memcpy(node, g->node, (size_t)g->nnode * sizeof *node);
        g->node = node;
        g->capnode = cap;
        for (int32_t x = 0; x < cap; x++)
            k.pos[x] = k.copy[x] = -1;
        for (int32_t p = 0; p < g->nseq; p++)
            k.pos[g->seq[p]] = p;
    }
    for (int32_t p = 0; ok && p < g->nseq; p++) {
        int32_t u = g->seq[p];
        MfNode *x = &g->node[u];
        if (p > k.split && u != g->root && x->nopnd > 0) {
            int32_t *no = ir_alloc_array(g->arena, (size_t)x->nopnd, sizeof *no);
            bool changed = false;
            ok = no != NULL;
            for (int32_t j = 0; ok && j < x->nopnd; j++) {
                no[j] = copy_of(&k, x->opnd[j], 0);
                ok = no[j] >= 0;
                changed = changed || no[j] != x->opnd[j];
            }
            if (ok && changed)
                x->opnd = no;
        }
        k.out[k.nout++] = u;
    }
    if (ok) {
        g->seq = seq;
        g->nseq = k.nout;
    }
    ts_free(k.pos);
    ts_free(k.copy);
    return ok;
}
