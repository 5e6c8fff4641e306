/*
 * bcast_clone.c: a broadcast of a scalar, and an iota, read by several
 * instructions made one copy per reader before the graph is built, as
 * XLA's HloConstantSplitter does before its auto-sharding.
 *
 * JAX's lowering shares such values across a whole model: one
 * `broadcast(0.5)` of [B,T,D] serves the GELU of every layer, one
 * `broadcast(-inf)` every softmax. In the graph each is a group with a
 * choice of its own (its scalar has no dim to lead it, strategy.c's
 * auto_follows) and an edge to every layer, so elimination's factors
 * widened with the model's depth: a 12-layer attention stack (924
 * instructions) on mesh 2x4 went past elimination's budget to GLPK, whose
 * simplex had not ended after 10 minutes; 4 layers took 2.2 s. A copy per
 * reader joins only that reader: the layers are a chain again (12 layers
 * in 0.2 s), and each copy takes the sharding its reader wants (at worst
 * the one the shared value had). The copies compute the same values; the
 * executor fuses a broadcast into its elementwise reader, and where it is
 * made whole each copy lives only as long as its reader needs it.
 *
 * The entry computation only, where JAX unrolls a model's layers (a
 * scan's or a fori_loop's body is one layer: nothing there is shared
 * across layers). Left shared: an instruction with the user's sharding (a constraint
 * stays where it was written), one that takes part in control
 * dependencies (they name instruction indices), one read by a single
 * instruction, and one read by more than CLONE_MAX_READERS (below).
 * Requires a verified module; keeps it verified.
 */
#include "auto.h"

#include <string.h>

enum { CLONE_MAX_READERS = 64 };

/* Is c's instruction i a value cheap to make again for each reader: an
 * iota, or a broadcast of a scalar? */
static bool clonable(const IrComputation *c, int32_t i)
{
    const IrInstr *x = &c->instr[i];
    if ((x->sharding && !x->sharding->unknown) || ir_attrs_x(&x->a)->control_predecessors.n > 0)
        return false;
    if (x->op == OP_IOTA)
        return x->nopnd == 0;
    return x->op == OP_BROADCAST && x->nopnd == 1 && c->instr[x->opnd[0]].shape.rank == 0 &&
           x->shape.type != IR_TUPLE;
}

/* The copies in c: each reader of a clonable value after its first reads
 * a copy of its own. readers[i] counts the distinct readers seen so far,
 * last[i] is the latest (plus one). */
static IrStatus clone_in(IrModule *m, IrComputation *c, int32_t *nclone, IrDiag *d)
{
    int32_t n = c->ninstr;
    int32_t *readers = ts_calloc((size_t)n + 1, sizeof *readers);
    int32_t *last = ts_calloc((size_t)n + 1, sizeof *last);
    bool *ok = ts_calloc((size_t)n + 1, sizeof *ok);
    if (!readers || !last || !ok) {
        ts_free(readers);
        ts_free(last);
        ts_free(ok);
        return ir_oom(d, NULL);
    }
    for (int32_t i = 0; i < n; i++) {
        const IrI64List *cp = &ir_attrs_x(&c->instr[i].a)->control_predecessors;
        ok[i] = clonable(c, i);
        for (int64_t k = 0; k < cp->n; k++)
            if (cp->v[k] >= 0 && cp->v[k] < n)
                ok[cp->v[k]] = false; /* a control successor's predecessor */
    }
    /* Its readers, first: a value read by more than CLONE_MAX_READERS
     * stays shared. A few constants joining a model's layers have a reader
     * or a few a layer; hundreds of readers are the program's own fan-out
     * (XLA's 001_large_loop_slow_compile: 325 broadcasts read by up to 564
     * instructions, 7195 copies, and elimination over that many more
     * groups took 22 s a compile where the shared values took 1.6; those
     * read by 64 or fewer make 376 copies). */
    for (int32_t u = 0; u < n; u++)
        for (int32_t o = 0; o < c->instr[u].nopnd; o++) {
            int32_t v = c->instr[u].opnd[o];
            if (v < n && ok[v] && last[v] != u + 1) {
                last[v] = u + 1;
                readers[v]++;
            }
        }
    for (int32_t v = 0; v < n; v++)
        ok[v] = ok[v] && readers[v] <= CLONE_MAX_READERS;
    memset(readers, 0, ((size_t)n + 1) * sizeof *readers);
    memset(last, 0, ((size_t)n + 1) * sizeof *last);
    IrStatus st = IR_OK;
    for (int32_t u = 0; st == IR_OK && u < n; u++) {
        for (int32_t o = 0; st == IR_OK && o < c->instr[u].nopnd; o++) {
            int32_t v = c->instr[u].opnd[o];
            /* u reading v twice (x * x) is one reader: one copy. */
            if (v >= n || !ok[v] || last[v] == u + 1 || (last[v] = u + 1, readers[v]++ == 0))
                continue;
            IrInstr y = c->instr[v];
            int32_t *opnd = y.nopnd ? ir_alloc_array(m->arena, (size_t)y.nopnd, sizeof *opnd) : NULL;
            int32_t *uop = ir_alloc_array(m->arena, (size_t)c->instr[u].nopnd, sizeof *uop);
            if ((y.nopnd && !opnd) || !uop || !(y.name = ir_unique_name(m, c->instr[v].name))) {
                st = ir_oom(d, NULL);
                break;
            }
            if (y.nopnd)
                memcpy(opnd, y.opnd, (size_t)y.nopnd * sizeof *opnd);
            y.opnd = opnd;
            int32_t at = ir_add_instr(m, c, &y); /* may move c->instr */
            if (at < 0) {
                st = ir_oom(d, NULL);
                break;
            }
            memcpy(uop, c->instr[u].opnd, (size_t)c->instr[u].nopnd * sizeof *uop);
            for (int32_t p = o; p < c->instr[u].nopnd; p++)
                if (uop[p] == v)
                    uop[p] = at;
            c->instr[u].opnd = uop;
            (*nclone)++;
        }
    }
    ts_free(readers);
    ts_free(last);
    ts_free(ok);
    return st;
}

IrStatus auto_clone_broadcasts(IrModule *m, int32_t *nclone, IrDiag *d)
{
    *nclone = 0;
    return clone_in(m, ir_entry(m), nclone, d);
}
