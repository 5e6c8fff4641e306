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
} DevFusionGroup;

typedef struct DevFusion {
    int32_t ngroups;
    DevFusionGroup *groups;
    int32_t *group_of;   /* per instruction of the computation: its group, or -1 */
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
 * leaf is at its last use and solely owned, its buffer becomes the result:
 * it is then taken out of vals (NULL) and rem (0). Kernel errors name the
 * node's instruction, as unfused. On success *out is a new reference. */
IrStatus dev_fusion_run(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                        const DevExecOptions *opt, IrDiag *d, DevValue **vals, int32_t *rem,
                        DevValue **out);

#endif
