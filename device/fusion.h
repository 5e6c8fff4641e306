/*
 * fusion.h: fused elementwise loops, private to the device layer (exec.c
 * runs them, fusion.c and fusion_rows.c implement them). The groups are
 * found on the IR (ir/fusion_find.c), by the same finder the memory
 * estimate counts them with.
 *
 * A fusion group is a tree of elementwise instructions (and broadcasts
 * feeding them) whose interior values are used only inside the tree: the
 * executor skips the interior instructions and, at the root, runs the
 * whole tree a block of output elements at a time, each node's block in a
 * small scratch buffer that stays in cache. Each input element is read
 * once and each output element written once, where the unfused chain
 * writes and reads back a full array per instruction.
 *
 * A row group (fusion_rows.c) also holds reductions over the minor
 * dimensions: its nodes live in a row space [outer dims | row dims] of
 * the group's shape S. Row nodes have S's dims, outer nodes have the outer
 * dims (one element a row); a reduce over exactly the row dims turns a
 * row node into an outer node, a broadcast along the outer dims turns an
 * outer node back into a row node (outer nodes may carry dims of size 1,
 * and reshapes between them are copies). Softmax over the rows of x is one
 * group: max, broadcast, subtract, exp, sum, broadcast, divide, run a row
 * at a time with every intermediate row in cache.
 *
 * A column group (fusion.c's run_columns) is a reduce over major dims
 * (its innermost dims kept: batch norm's sums over N, H, W of NHWC) with
 * the elementwise tree that makes its input: the tree runs a block of its
 * input at a time, folded into the reduce's accumulators from cache.
 *
 * A multi-output group also makes some interior values whole (extra): a
 * group whose root is read by one other group runs inside it (Adam's m'
 * and v', each read by the parameter's update, one pass over g, m, v and
 * w writing m', v' and w').
 *
 * A dot-transpose pair (dot_transposed) is a dot and the transpose that
 * is its one use, swapping its free dims: the dot writes its result
 * transposed (dev_k_dot_fused). A transpose read only by dots runs inside
 * each of them: the dot reads the transpose's operand through strides.
 *
 * A dot epilogue (IrFusionGroup.dot_select) is a dot, the scale by a
 * scalar that is its one reader and the select under a pred [M,N] mask
 * that reads that (attention's masked scores, JAX's `_where` call taken
 * in whole): the group is rooted at the select or the call, and k_dot.c
 * scales and masks each block of the GEMM's rows while it is in cache.
 * Where the masked scores' one reader is a softmax over their rows
 * (IrFusionGroup.dot_softmax, ir_fusion_softmax), its row group joins
 * too: the group is rooted at the softmax's divide, and each row is
 * scaled, masked and turned into probabilities in cache, exp'ed only up
 * to its last kept column. Where those probabilities P are causal (the
 * scores' dot is dot_lower) and read only by P.V, that dot joins as well
 * (IrFusionGroup.dot_then, the root): each block of P's rows is
 * multiplied by V while in cache (dev_k_dot_attention), P never whole.
 *
 * A dot's elementwise consumers (IrFusionGroup.dot_feeds: an elementwise
 * group, or a lone op, that alone reads an f32 dot's result or its pair's
 * transpose) run in its epilogue (fusion.c's run_feeds): on each block of
 * the GEMM's result as it is finished (DevDotEpilogue.then; in tessel's
 * own GEMM a strip of its tile rows, in L1), written over it.
 */
#ifndef TESSEL_DEVICE_FUSION_H
#define TESSEL_DEVICE_FUSION_H

#include "device.h"

/* The groups (IrFusionGroup, ir/fusion_find.c) as the executor runs them. */
typedef IrFusionGroup DevFusionGroup;
typedef IrFusion DevFusion;

/* ir_fusion_find with the executor's options: none with opt->no_fusion;
 * arrays and rows of any size with opt->fuse_small or a fusion_block. */
IrStatus dev_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order,
                         int32_t norder, const DevExecOptions *opt, DevFusion *out, IrDiag *d);
/* Does group g run in the chunk interpreter (an elementwise group, all
 * f32, every node an op of float_ops.h's lists or a broadcast)? */
bool dev_fusion_chunked(const IrComputation *c, const DevFusionGroup *g);

/* Run group g of computation c. vals: the computation's values by
 * instruction (the leaves are present); rem: their remaining uses. When a
 * leaf is at its last use and solely owned, its buffer becomes the result
 * (or an extra output's): it is then taken out of vals (NULL) and rem (0).
 * Kernel errors name the node's instruction, as unfused. On success *out
 * is a new reference, and so is vals[x] for each extra output x. */
IrStatus dev_fusion_run(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                        const DevExecOptions *opt, IrDiag *d, DevValue **vals, int32_t *rem,
                        DevValue **out);

/* fusion.c: lview[l] = a borrowed view of leaf l's value (refs 1), lbase[l]
 * its data; IR_EINTERNAL (naming the leaf) when a leaf is not an array. */
IrStatus dev_fusion_bind_leaves(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                                DevValue **vals, DevValue *lview, uint8_t **lbase, IrDiag *d);

/* fusion_rows.c: run row group g (g->nouter >= 0), as dev_fusion_run
 * (vals are only read: a row group never takes over a leaf's buffer). */
IrStatus dev_fusion_run_rows(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                             const DevExecOptions *opt, IrDiag *d, DevValue **vals, DevValue **out);

/* fusion_rows.c: the reduce of x[0..n) with f32 reducer op (add,
 * multiply, maximum, minimum) from init, as a row group folds a row (the
 * same bits); the dot epilogue's softmax (k_dot.c) folds with it. */
float dev_fusion_fold_f32(IrOpcode op, float init, const float *x, int64_t n);

#endif
