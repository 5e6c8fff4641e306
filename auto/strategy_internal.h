/*
 * strategy_internal.h: the roles of one instruction (strategy.c), shared
 * with the files that describe the roles of an op family of their own:
 *   strategy_window.c  reduce-window: batch and feature dims tiled alone,
 *                      spatial dims with the partitioner's halo exchange;
 *                      a convolution's spatial dims, the same halo
 *   strategy_local.c   fft, topk, sort, reverse, cholesky, triangular-solve:
 *                      batch dims tiled,
 *                      the dims they work on whole (partition/spmd_local.c,
 *                      partition/spmd_ops.c); batch-norm (inference,
 *                      training, grad): every dim, the statistics'
 *                      all-reduces priced (partition/spmd_norm.c)
 *   strategy_ragged.c  ragged-dot: the output dims an operand dim gives,
 *                      or its contracting dim alone (partial sums)
 *   strategy_tuple.c   a reduce of several inputs (argmax), a topk, an
 *                      rng-bit-generator, a batch-norm's training or grad,
 *                      and their get-tuple-elements: one spec for the
 *                      tuple's elements (the bits'; x's, the vectors
 *                      taking its feature dim's axes)
 */
#ifndef TESSEL_AUTO_STRATEGY_INTERNAL_H
#define TESSEL_AUTO_STRATEGY_INTERNAL_H

#include "auto.h"

/* The most roles an instruction may have to be sharded automatically,
 * and the most strategies enumerated for one. */
#define MAX_ROLES 16
#define MAX_STRATEGIES 4096
#define MAX_OPERANDS 8

/* An instruction's roles (strategy.c's file comment): its output dims,
 * then the dims it contracts or reduces, each with a size, whether it may
 * be tiled, and which dim of each operand plays it. */
typedef struct Roles {
    int32_t nout, nred, nopnd;
    int64_t size[MAX_ROLES];
    bool tileable[MAX_ROLES];
    int8_t map[MAX_OPERANDS][MAX_ROLES]; /* operand dim playing each role, -1 none */
    double flops;
    bool uneven; /* output dims may be cut into unequal tiles (padded) */
    bool regrouped[MAX_ROLES]; /* a reshape's dim that merges or splits: even tiles only, uneven or not */
    bool gathers_partials; /* a reduced dim tiled: partials all-gathered (strategy_tuple.c), not all-reduced */
    bool uneven_red; /* reduced roles may be cut into unequal tiles too (a scatter's: padding rows dropped) */
    double widen; /* the partial sums' bytes over the output's: 2 for an f16 dot's, summed in f32 (1 unset) */
} Roles;

/* ---- strategy_window.c ---- */

/* The roles of reduce-window x (one operand and its init; r's output
 * roles already set, nothing mapped): false where the partitioner would
 * not run it sharded (several operands, a window of another rank).
 * Select-and-scatter (operand, source, init) too. */
bool auto_window_roles(Roles *r, const IrModule *mod, const IrComputation *c, const IrInstr *x);
/* May reduce-window or select-and-scatter x tile its dim d `t` ways
 * (a one-row window; for reduce-window a halo the partitioner plans, the
 * dim divided evenly)? */
bool auto_window_tiles_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t);
/* May convolution x tile its output dim d `t` ways: any but a spatial
 * dim, and a spatial dim where the partitioner plans a halo exchange
 * (partition/spmd_conv.c: each device's windows reach no further than
 * its neighbours' rows; no base dilation)? */
bool auto_conv_tiles_ok(const IrComputation *c, const IrInstr *x, int32_t d, int64_t t);
/* Seconds of the elementwise work by which the partitioner masks the
 * rows of convolution x's input outside its dims, for each spatial dim
 * `out` tiles (0 for other ops). */
double auto_conv_mask_seconds(const AutoMesh *m, const AutoCost *cost, const IrComputation *c, const IrInstr *x,
                              const AutoSpec *out);
/* Seconds of the halo exchange reduce-window or convolution x runs with
 * its output under `out` (0: every tiled dim has a window of one row, or
 * is no spatial dim). */
double auto_window_halo_seconds(const AutoMesh *m, const AutoCost *cost, int64_t local, const IrComputation *c,
                                const IrInstr *x, const AutoSpec *out);

/* ---- strategy_local.c ---- */

/* The roles of an fft, topk, sort, reverse, cholesky or triangular-solve x
 * (r's output roles set, nothing mapped): its batch dims, every operand's
 * alike; of a batch-norm (inference, training, grad): every dim, its
 * vectors along the feature dim; false for another op. */
bool auto_local_roles(Roles *r, const IrComputation *c, const IrInstr *x);
/* Seconds of the all-reduces that complete a batch-norm-training's or
 * -grad's per-feature sums where `out` tiles a dim other than the
 * feature (0 otherwise, and for other ops). */
double auto_norm_stats_seconds(const AutoMesh *m, const AutoCost *cost, int64_t local, const IrInstr *x,
                               const AutoSpec *out);

/* ---- strategy_ragged.c ---- */

/* The roles of ragged-dot x (r's output roles set, nothing mapped): the
 * output dims an operand dim plays, its contracting dim; false where the
 * partitioner runs it whole (the ragged dim contracted). */
bool auto_ragged_roles(Roles *r, const IrComputation *c, const IrInstr *x);
/* May ragged-dot x take the assignment role[] (a contracted role tiled
 * alone: the partitioner computes the whole result from partial sums)?
 * True for other ops. */
bool auto_ragged_tiles_ok(const Roles *r, const IrInstr *x, const int32_t *role, int32_t naxes);

/* ---- strategy_tuple.c ---- */

/* The roles of a get-tuple-element of a reduce of several inputs (r's
 * output roles set, nothing mapped): its dims the reduce's; false for
 * another get-tuple-element. */
bool auto_gte_roles(Roles *r, const IrComputation *c, const IrInstr *x);
/* The roles of rng-bit-generator x of (state, bits) (r's output roles
 * the bits', nothing mapped: the state replicated); false for another
 * shape. */
bool auto_rng_roles(Roles *r, const IrInstr *x);
/* Does rng-bit-generator x with its bits under `out` draw the whole
 * array on each device (a dim other than 0 tiled)? False for other ops. */
bool auto_rng_draws_whole(const AutoMesh *m, const IrInstr *x, const AutoSpec *out);
/* Seconds of the all-gathers of reduce x's partial results (each element
 * and the valid flags) over a group of nred, its output shard `bytes`. */
double auto_partials_gather_seconds(const AutoCost *cost, const IrInstr *x, int64_t nred, int scope, double bytes);

#endif
