/*
 * memfit.h: inside compile/, the graph that fitting a memory limit works
 * on (memfit.c builds it from a computation and writes it back,
 * memfit_schedule.c orders it, memfit_remat.c recomputes values in it).
 *
 * A node computes one instruction of the computation: the instruction
 * itself or, after rematerialization, a copy of it placed later. seq is
 * the order the nodes run in (instructions the executor does not run are
 * nodes outside it); a node's value lives from its position to its last
 * user's (the root's to the end; a referring user's, mf_refers, as long as
 * that user; an elementwise user may take the buffer of an operand of its
 * size that dies there), the parameters throughout unless donated (then
 * to their last read, as the run frees them): the model of the plan's peak
 * estimate (partition/memory.c) without the executor's run-time fusion,
 * its buffer reuse and called computations. It errs high; the fit's
 * verdict is the estimate's own (plan_peak_bytes).
 */
#ifndef TESSEL_COMPILE_MEMFIT_H
#define TESSEL_COMPILE_MEMFIT_H

#include "compile.h"

typedef struct MfNode {
    int32_t src;          /* instruction of the computation it computes */
    int32_t nopnd;
    int32_t *opnd;        /* node ids (arena; replaced, never edited, when redirected) */
    int64_t bytes;        /* what its value holds (mf_value_bytes; a held parameter: 0) */
    bool clone;           /* a recomputation (memfit_remat.c) */
    bool held;            /* a parameter the caller holds throughout (in start_bytes); a
                           * donated one (input_output_alias) is a value that dies at its
                           * last read, as the run frees it */
} MfNode;

typedef struct MfGraph {
    IrArena *arena;
    const IrModule *m;
    const IrComputation *c;
    int32_t nnode, capnode;
    MfNode *node;
    int32_t nseq;         /* nodes that run (each once) */
    int32_t *seq;         /* node ids in running order */
    int32_t root;         /* the node of the computation's root */
    int64_t start_bytes;  /* the held parameters, from before the first step to the end */
    bool fusion;          /* model the executor's fused elementwise groups (mf_profile) */
    bool elements;        /* recompute a get-tuple-element of a recomputable call (with
                           * the call): memfit_remat.c */
} MfGraph;

/* Liveness of g's order: the peak of live bytes, the first position where
 * it falls (-1: the parameters alone), and how many positions reach it. pos[] and last[] (nnode
 * entries each, may be NULL) receive each node's position and the
 * position of its last user (the root: nseq). */
typedef struct MfProfile {
    int64_t peak;
    int32_t at, npeak;
} MfProfile;

/* Does an order of g fit the limit (by the plan's own estimate)?
 * fits(ctx, g, &peak, &at): 1 fits, 0 not, -1 out of memory; peak gets
 * the estimate, at the position in g->seq of its peak (-1 none). */
typedef int (*MfFits)(void *ctx, const MfGraph *g, int64_t *peak, int32_t *at);

/* ---- memfit.c ---- */

/* The bytes a value of ins holds in the plan's estimate (its array
 * leaves; a referring instruction, mf_refers, nothing of its own). */
int64_t mf_value_bytes(const IrInstr *ins);
/* Does an instruction of this opcode refer to its operands' buffers
 * instead of making its own (tuple, get-tuple-element, copy, ...; as
 * partition/memory.c counts them)? */
bool mf_refers(IrOpcode op);
/* Must ins run exactly once, where the program puts it (collectives,
 * their -start/-done, send/recv, feeds, custom-calls, stateful rng)? */
bool mf_ordered(IrOpcode op);
/* Must ins keep its place in the sequence of such instructions (all of
 * them but the collectives over device groups, whose order is free: every
 * device runs the one scheduled program, so each issues them alike)? */
bool mf_sequenced(IrOpcode op);
/* Frontend attributes `a` replaced by a copy (in ar) with key=value set;
 * false when out of memory. */
bool mf_mark(IrArena *ar, IrAttrs *a, const char *key, const char *value);
/* Every node of g->seq from position `from` on that reads node `old`
 * reads `nw` instead (its operands replaced by a new array in g's arena,
 * never edited in place); each node changed and its former operands are
 * appended to undo_node and undo_opnd (*nundo counts them; room for
 * g->nseq). false when out of memory. */
bool mf_redirect(MfGraph *g, int32_t from, int32_t old, int32_t nw, int32_t *undo_node, int32_t **undo_opnd,
                 int32_t *nundo);
/* Undo a trial: the nundo nodes mf_redirect changed get their former
 * operands back, and g's order is seq0 (nseq0 nodes) again. */
void mf_restore(MfGraph *g, const int32_t *undo_node, int32_t *const *undo_opnd, int32_t nundo, const int32_t *seq0,
                int32_t nseq0);
/* g's profile (pos/last may be NULL); false when out of memory. */
bool mf_profile(const MfGraph *g, MfProfile *p, int32_t *pos, int32_t *last);

/* ---- memfit_bound.c ---- */

/* fit->bound, bound_at, nbound and bound_v of m's entry (fit->floor
 * set): the largest of the parameters alone and, at each collective over
 * groups of two devices or more, the bytes that must coexist there under
 * every order and recomputation; the values' list in `ar`. false when out
 * of memory. */
bool mf_bound(const IrModule *m, IrArena *ar, CompileFit *fit);

/* ---- memfit_ckpt.c ---- */

/* The dots checkpoint of g in its given order: each value made at or
 * before the model's peak and read after it, but dots, convolutions,
 * parameters, constants, referring instructions and what may not run
 * twice, gets one copy (from copies of its own such operands), which
 * every reader after the peak but the root reads, placed just before
 * the first of them (as `tessel grad --remat dots` writes a step).
 * false when out of memory (g then unusable). */
bool mf_checkpoint_dots(MfGraph *g);

/* ---- memfit_mask.c ---- */

/* The attribute of a copy memfit_mask.c adds: the name of what it reads. */
#define MF_APART_ATTR "_tessel_apart"

/* Put a copy (a reference) between each comparison and its one reader
 * when that reader, an elementwise op of its dims, would run it inside
 * its fused group, so that the comparison's mask is made apart and its
 * wider operands may die before the reader runs. The number of copies
 * added to c (appended, c's order otherwise unchanged), -1 when out of
 * memory (c may then hold some). */
int32_t mf_keep_masks(IrModule *m, IrComputation *c);

/* Move each such mask (its comparison, the copy, and the broadcasts of
 * constants and constants it reads that run after its other operands)
 * to just after its last other operand in g's order: made as soon as it
 * can be, the wider operand may die there. false when out of memory. */
bool mf_hoist_masks(MfGraph *g);

/* ---- memfit_merge.c ---- */

/* The attribute of an instruction merged with an earlier one computing
 * the same value: that one's name (the plan says what it merged). */
#define MF_SAME_ATTR "_tessel_same"

/* Merge the instructions of c (m's entry) that compute the same value
 * (the same line but for their names, operands merged first, each
 * mf_can_remat): every use of a later one reads the first, and the later
 * one, read by nothing, no longer runs. The number merged, -1 when out
 * of memory (c may then hold some). */
int32_t mf_merge_same(IrModule *m, IrComputation *c);

/* ---- memfit_schedule.c ---- */

/* The orders mf_schedule proposes (its `variant`). */
#define MF_SCHEDULES 5

/* Reorder g->seq to lower the peak. Variant 0: a list scheduler over operands,
 * control predecessors and the ordered instructions' original sequence
 * (mf_ordered: the collectives keep their relative order, so every
 * device issues them alike); parameters first. Greedy: of the ready
 * instructions, the one whose run adds the fewest bytes (its value less
 * the operands it is the last user of), ties to the earlier in the
 * original order. Keeps the original order when that peaks lower.
 * Variants 1 and 2: a depth-first post-order from the root, its
 * operands visited last to first (1: a training step's updates run as
 * soon as their gradients exist) or first to last (2), parameters first;
 * variants 3, 4: as 1, but the root's operands by the size of their
 * cones (4: of what is left of them), smallest first (an Adam step's root
 * groups its outputs by kind, not by layer).
 * Recomputation may do better on one than on another of them, whatever
 * their own peaks: memfit.c tries each in turn. Deterministic. false
 * when out of memory (g unchanged). */
bool mf_schedule(MfGraph *g, int32_t variant);

/* ---- memfit_prune.c ---- */

/* g fitting the limit (fits(ctx, g) is 1): each recomputation, most
 * FLOPs first, dropped (its readers read the value it recomputes, which
 * runs before them; the copies then read by nothing dropped too) when the
 * order still fits. false when out of memory (g as it was or pruned). */
bool mf_prune(MfGraph *g, MfFits fits, void *ctx);

/* ---- memfit_remat.c ---- */

/* Recompute values of g until it fits (fits(ctx, g)) or nothing
 * more helps: a value live across the peak and not used there is
 * computed again just before its first later use, which then reads the
 * copy; cheapest recomputation per byte saved first (FLOPs, as XLA's cost
 * analysis counts them, plus elements), each kept only when it lowers the
 * peak (or the positions at the peak). Before each, fits(ctx, g) says
 * whether the order fits by the plan's own estimate (1 yes: stop; 0 no;
 * -1 out of memory), which counts what the graph's model does not. Never
 * recomputes parameters,
 * ordered instructions (mf_ordered), random draws, control flow or
 * tuples; an operand no longer live at the copy is recomputed with it
 * when it can be (else the value is not a candidate), parameters stay
 * live. Where nothing lowers the model's peak, the values across the
 * estimate's own peak (fits' `at`) are tried, each kept when the
 * estimate falls. false when out of memory. */
bool mf_remat(MfGraph *g, MfFits fits, void *ctx);
/* After recomputation (memfit_schedule.c): a donated parameter that a
 * copy still reads after its update wrote the output (the run then keeps
 * the parameter and gives the update a buffer of its own) has that update,
 * what depends on it up to the copy and what only it reads, moved to just
 * after the copy's read: the update is the last reader again and takes
 * the buffer. Each move kept when the estimate (fits) falls; stops once
 * it fits. false when out of memory. */
bool mf_sink_writers(MfGraph *g, MfFits fits, void *ctx);
/* May ins, an instruction of m's entry, run a second time with the same
 * result and nothing else (no parameter, collective or other ordered
 * instruction, random draw, control flow or edge, custom-call, tuple;
 * a call whose callee is all such, and a get-tuple-element of one)? */
bool mf_can_remat(const IrModule *m, const IrInstr *ins);
/* The FLOPs of one run of ins in c (dot, convolution: 2 per multiply-add;
 * elementwise: one per element; reduce, reduce-window: one per input
 * element combined; a call: its callee's; others 0). */
int64_t mf_flops(const IrModule *m, const IrComputation *c, const IrInstr *ins);

#endif /* TESSEL_COMPILE_MEMFIT_H */
