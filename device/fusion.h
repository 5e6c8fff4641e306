/*
 * fusion.h: fused elementwise loops, private to the device layer (exec.c
 * finds and runs them, fusion.c implements them).
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
 * A multi-output group also makes some interior values whole (extra): a
 * group whose root is read by one other group runs inside it (Adam's m'
 * and v', each read by the parameter's update, one pass over g, m, v and
 * w writing m', v' and w').
 *
 * A dot-transpose pair (dot_transposed) is a dot and the transpose that
 * is its one use, swapping its free dims: the dot writes its result
 * transposed (dev_k_dot_fused). A transpose read only by dots runs inside
 * each of them: the dot reads the transpose's operand through strides.
 */
#ifndef TESSEL_DEVICE_FUSION_H
#define TESSEL_DEVICE_FUSION_H

#include "device.h"

/* Smaller arrays run unfused: the loop's set-up would cost more than the
 * memory traffic it saves (and reducers, which run per element, stay on
 * the cheapest path). */
#define DEV_FUSION_MIN_ELEMENTS 1024
/* Nodes per group, bounding scratch memory and set-up. */
#define DEV_FUSION_MAX_NODES 64
/* Row groups: the row length (elements) bounds the scratch (one row per
 * node, at most DEV_FUSION_MAX_NODES * 8 * DEV_FUSION_ROW_MAX bytes);
 * shorter rows than DEV_FUSION_ROW_MIN cost more in per-row set-up than
 * fusion saves (unless fuse_small or fusion_block, for tests). */
#define DEV_FUSION_ROW_MAX 16384
#define DEV_FUSION_ROW_MIN 128
/* Transposes join a group only with an operand this small (elements): it
 * is read through strides, in cache. */
#define DEV_FUSION_TRANSPOSE_MAX (1 << 16)

typedef struct DevFusionGroup {
    int32_t root;        /* instruction whose value the group produces */
    int32_t nnodes;
    int32_t *nodes;      /* instruction indices, operands first, root last */
    int32_t nleaves;
    int32_t *leaves;     /* distinct instructions read from outside the group */
    int32_t *leaf_refs;  /* operand references to each leaf from the nodes */
    bool *leaf_direct;   /* every reference reads it element for element (not a
                          * broadcast's source, not a scalar operand): its
                          * buffer may take the result */
    bool chunked;        /* all f32, every op in float_ops.h's lists or a
                          * broadcast: runs in the chunk interpreter */
    int32_t nouter;      /* a row group: the number of outer dims of its
                          * shape (the dims of `space`); -1 otherwise */
    int32_t space;       /* a row group: an instruction of shape S */
    bool dot_transposed; /* nodes {dot, transpose}: the dot writes its result
                          * transposed (fusion.c's dot_transpose_pairs) */
    int32_t nextra;
    int32_t *extra;      /* a multi-output group (fusion.c's merge_outputs): the
                          * nodes besides the root whose values are read outside
                          * the group too, made whole when the group runs */
    int32_t dot;         /* the node that is a dot (a dot-transpose pair's, or
                          * one reading transposes in place:
                          * transposes_into_dots), else -1 */
} DevFusionGroup;

typedef struct DevFusion {
    int32_t ngroups;
    DevFusionGroup *groups;
    int32_t *group_of;   /* per instruction of the computation: its group, or -1
                          * (a broadcast run inside several groups: the first) */
} DevFusion;

/* Find the groups of computation c. order/norder: the instructions that
 * run, operands first (every user of an instruction is among them). With opt->no_fusion, or when nothing fuses,
 * *out is empty (group_of NULL). Fails only on OOM (IR_ENOMEM, recorded in
 * d). */
IrStatus dev_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order,
                         int32_t norder, const DevExecOptions *opt, DevFusion *out, IrDiag *d);
void dev_fusion_free(DevFusion *f);

/* Run group g of computation c. vals: the computation's values by
 * instruction (the leaves are present); rem: their remaining uses. When a
 * leaf is at its last use and solely owned, its buffer becomes the result
 * (or an extra output's): it is then taken out of vals (NULL) and rem (0).
 * Kernel errors name the node's instruction, as unfused. On success *out
 * is a new reference, and so is vals[x] for each extra output x. */
IrStatus dev_fusion_run(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                        const DevExecOptions *opt, IrDiag *d, DevValue **vals, int32_t *rem,
                        DevValue **out);

/* fusion.c: positions of an instruction among g's leaves and nodes, -1
 * when absent. */
int32_t dev_fusion_leaf_index(const DevFusionGroup *g, int32_t instr);
int32_t dev_fusion_node_index(const DevFusionGroup *g, int32_t instr);

/* fusion.c: has array shape t the outer dims of S (its first nouter),
 * up to dims of size 1 (f32[4,1] and f32[4] for S f32[4,32] and nouter
 * 1)? Such a value holds one element a row, in row order. */
bool dev_fusion_is_outer(const IrShape *S, int32_t nouter, const IrShape *t);

/* fusion.c: lview[l] = a borrowed view of leaf l's value (refs 1), lbase[l]
 * its data; IR_EINTERNAL (naming the leaf) when a leaf is not an array. */
IrStatus dev_fusion_bind_leaves(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                                DevValue **vals, DevValue *lview, uint8_t **lbase, IrDiag *d);

/* fusion_rows.c: run row group g (g->nouter >= 0), as dev_fusion_run
 * (vals are only read: a row group never takes over a leaf's buffer). */
IrStatus dev_fusion_run_rows(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                             const DevExecOptions *opt, IrDiag *d, DevValue **vals, DevValue **out);

#endif
