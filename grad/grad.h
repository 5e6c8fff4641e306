/*
 * grad.h: layer `grad/`, gradients of HLO modules: a module -> module
 * transform on the IR (it uses ir/ only). From a forward module it writes
 * a module that returns the forward outputs and then the gradient of a
 * scalar loss with respect to chosen entry parameters (reverse mode), or
 * the outputs and their tangents (forward mode, --jvp), or a training step
 * (--sgd, --adam) whose outputs are the updated parameters aliased to the
 * inputs (input_output_alias).
 *
 * How reverse mode works (reverse.c): the forward instructions stay as they
 * are; after them the backward pass is appended to the same computation,
 * walking the forward instructions in reverse topological order. Every
 * instruction has one adjoint per leaf of its shape (a tuple's leaves depth
 * first); a rule (one per op family, rules_*.c) reads the adjoint of an
 * instruction and adds contributions to the adjoints of its operands. Only
 * "active" instructions are visited: those that depend on a chosen
 * parameter through floating values and that the loss depends on. Called
 * computations (call, conditional branches, while bodies) are inlined into
 * new backward computations and differentiated the same way (control.c).
 *
 * Files of this layer (the header reads as a table of contents):
 *   build.c             instruction builders over ir/ (shapes inferred by
 *                       ir_infer_shape), constants, reducers, inlining
 *   reverse.c           the reverse-mode driver: activity, adjoints per leaf,
 *                       the entry's outputs, the rule dispatcher
 *   rules_elementwise.c unary, binary, select, clamp, convert
 *   rules_data.c        broadcast, reshape, transpose, slice, pad, concatenate,
 *                       reverse, dynamic-slice, dynamic-update-slice, gather,
 *                       scatter
 *   rules_reduce.c      reduce, reduce-window, sort, topk, dot, convolution,
 *                       batch-norm-training
 *   rules_linalg.c      triangular-solve, cholesky, JAX's LU custom-call
 *   control.c           tuples, call, conditional, while
 *   custom.c            custom gradients: frontend_attributes
 *                       tessel_gradient / tessel_tangent name a computation;
 *                       JAX's custom_jvp functions relu, relu6, softplus
 *   forward.c           forward mode (--jvp): the driver and a rule per
 *                       op family, control flow included
 *   step.c              grad_module: options, SGD and Adam steps, aliases
 *   remat_policy.c      checkpoint policies (--remat): forward values the
 *                       backward recomputes instead of keeping
 *
 * Depends on ir/ only.
 */
#ifndef TESSEL_GRAD_H
#define TESSEL_GRAD_H

#include "../ir/ir.h"

/* The stack length (trips) of a while loop whose trip count is only known
 * at run time, unless the while says frontend_attributes=
 * {tessel_max_trips="B"} (control.c). */
#define GRAD_MAX_TRIPS 1024

/* ------------------------------------------------------------------ */
/* step.c: the entry point                                             */
/* ------------------------------------------------------------------ */

typedef struct GradOptions {
    /* Parameters to differentiate: comma-separated entry parameter numbers
     * or names ("0,w1"); NULL or "" = every parameter with a floating leaf. */
    const char *wrt;
    /* The loss: an index into the root tuple or the name of the root
     * tuple's operand; NULL = the root (which must then be a scalar). */
    const char *loss;
    bool jvp;            /* forward mode: outputs, then tangents of the outputs */
    double sgd;          /* > 0: a training step w' = w - sgd * g */
    double adam;         /* > 0: an Adam step with this learning rate */
    /* Reverse mode: the checkpoint policy (remat_policy.c); NULL or "": the
     * backward reads every forward value as it was computed. */
    const char *remat;
} GradOptions;

/* Write the gradient module of `m` (verified) into *out (a new module the
 * caller frees with ir_module_free). m is not changed. Errors: IR_EINPUT
 * for bad options (naming them) or a loss that is not a floating scalar;
 * IR_EUNSUPPORTED naming the op and its FILE:LINE:COL when an active op has
 * no rule; IR_ENOMEM. On failure *out is NULL. */
IrStatus grad_module(const IrModule *m, const GradOptions *o, IrModule **out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* build.c: builders                                                   */
/* ------------------------------------------------------------------ */

/* One transform: the module being written and what it caches. */
typedef struct Grad {
    IrModule *m;              /* the output module (a clone of the input) */
    IrDiag *d;
    int32_t sum[IR_NTYPES];   /* scalar add reducers per type, -1 until made */
    int32_t ge[IR_NTYPES];    /* select-and-scatter's select (a >= b), -1 */
} Grad;

/* Where new instructions go: one computation of g->m. */
typedef struct GB {
    Grad *g;
    IrComputation *c;
} GB;

/* Append an instruction: operands copied, attributes `a` (NULL: none,
 * shallow copy: arrays must live in the module's arena), callees copied.
 * `hint` gives what the operands do not say (broadcast's dims, a convert's
 * type, constants, parameters); ir_infer_shape gives the rest. Returns the
 * index, or -1 with g->d set (an operand that is -1 propagates silently:
 * the failure that made it was recorded). */
int32_t gb_emit(GB *b, IrOpcode op, const IrShape *hint, int32_t nopnd, const int32_t *opnd,
                const IrAttrs *a, int32_t ncalled, const int32_t *called);
const IrShape *gb_shape(const GB *b, int32_t v);   /* valid until the next emit */
IrStatus gb_oom(Grad *g);
/* An internal error (a builder produced something the verifier refuses). */
IrStatus gb_bug(Grad *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A list in the module's arena (NULL on OOM, recorded). */
int64_t *gb_list(Grad *g, int32_t n, const int64_t *v);
IrI64List gb_ilist(Grad *g, int32_t n, const int64_t *v);

int32_t gb_un(GB *b, IrOpcode op, int32_t x);
int32_t gb_bin(GB *b, IrOpcode op, int32_t x, int32_t y);
/* A scalar constant of type t (any float or integer type). */
int32_t gb_const(GB *b, IrType t, double v);
/* An array of `shape` (its type and dims) filled with v. */
int32_t gb_full(GB *b, const IrShape *shape, double v);
int32_t gb_full_like(GB *b, int32_t x, double v);
/* x * v, x + v with a scalar v broadcast. */
int32_t gb_scale(GB *b, int32_t x, double v);
int32_t gb_bcast(GB *b, int32_t x, IrType t, int32_t rank, const int64_t *dims, int32_t ndims,
                 const int64_t *bdims);
/* A scalar broadcast to x's shape. */
int32_t gb_bcast_like(GB *b, int32_t scalar, int32_t x);
int32_t gb_reshape(GB *b, int32_t x, int32_t rank, const int64_t *dims);
int32_t gb_transpose(GB *b, int32_t x, const int64_t *perm);
int32_t gb_convert(GB *b, int32_t x, IrType t);
int32_t gb_cmp(GB *b, int32_t x, int32_t y, IrCmpDir dir);
int32_t gb_select(GB *b, int32_t p, int32_t x, int32_t y);
/* Sum of x over dimensions dims[0..n) (reduce with an add reducer). */
int32_t gb_sum(GB *b, int32_t x, int32_t n, const int64_t *dims);
/* Sum of every element: a scalar. */
int32_t gb_sum_all(GB *b, int32_t x);
int32_t gb_slice(GB *b, int32_t x, const int64_t *start, const int64_t *limit, const int64_t *stride);
/* pad(x, 0) with lo/hi/interior per dimension. */
int32_t gb_pad0(GB *b, int32_t x, const int64_t *lo, const int64_t *hi, const int64_t *interior);
int32_t gb_tuple(GB *b, int32_t n, const int32_t *elems);
int32_t gb_gte(GB *b, int32_t t, int64_t index);
int32_t gb_parameter(GB *b, int64_t number, const IrShape *shape);
/* The same, named PREFIX followed by parameter `of`'s name ("m_" and w1.1
 * give m_w1.1; an empty `of` gives PREFIX alone), kept as it is unless
 * the module uses that name (ir_keep_name): the name a user binds it by. */
int32_t gb_parameter_named(GB *b, int64_t number, const IrShape *shape, const char *prefix, const char *of);
/* The scalar reducer computation `add` of type t (made once). */
int32_t gb_sum_comp(Grad *g, IrType t);
/* select-and-scatter's select computation `a >= b` of type t. */
int32_t gb_ge_comp(Grad *g, IrType t);
/* The reducer of a variadic reduce(-window) over (value, tangent) pairs
 * that keeps the pair whose value wins compare(a, c, dir), a's when it
 * holds: max pooling's jvp, select-and-scatter's source adjoint. */
int32_t gb_pick_comp(Grad *g, IrType t, IrCmpDir dir);
/* A new computation named from base; -1 on OOM (recorded). */
int32_t gb_new_comp(Grad *g, const char *base);
/* Zeros of any shape (tuples: a tuple of zeros). */
int32_t gb_zeros(GB *b, const IrShape *s);
/* Copy computation `src` of g->m into b's computation, parameter k being
 * args[k]; returns the copy of src's root. Copies keep no sharding. map
 * (src->ninstr entries, may be NULL) receives the copy of each instruction. */
int32_t gb_inline(GB *b, int32_t src, const int32_t *args, int32_t *map);

/* ------------------------------------------------------------------ */
/* reverse.c: the driver                                               */
/* ------------------------------------------------------------------ */

/* The backward pass of one computation, appended to it. */
typedef struct Rev {
    Grad *g;
    GB b;
    int32_t n0;          /* instructions of the forward part */
    int32_t *base;       /* leaf offset of each forward instruction (n0+1) */
    int32_t *adj;        /* adjoint instruction per leaf, -1: none (zero) */
    bool *active;        /* depends on a source and the seed depends on it */
} Rev;

/* Differentiate computation c of g->m, whose instructions [0, c->ninstr)
 * are the forward part: sources[0..nsrc) the instructions to differentiate
 * against, seed the instruction whose leaves get the adjoints seed_adj
 * (one per leaf of its shape, -1 for none). On success r holds the
 * adjoints (ts_free them with rev_free); read a source's with rev_full. */
IrStatus rev_run(Rev *r, Grad *g, int32_t c, int32_t nsrc, const int32_t *sources, int32_t seed,
                 const int32_t *seed_adj);
void rev_free(Rev *r);
/* The adjoint of forward instruction x as one value of x's shape (zeros
 * where no adjoint arrived; tuples rebuilt). */
int32_t rev_full(Rev *r, int32_t x);
/* Adjoint of leaf `leaf` of x, or -1 (zero). */
int32_t rev_leaf(const Rev *r, int32_t x, int32_t leaf);
/* Add v to the adjoint of leaf `leaf` of x (converted to the leaf's type;
 * ignored when x is not active). IR_OK or the failure that made v. */
IrStatus rev_acc(Rev *r, int32_t x, int32_t leaf, int32_t v);
bool rev_on(const Rev *r, int32_t x);   /* x active: worth a contribution */
/* "no gradient rule for OP" at the instruction's position. */
IrStatus rev_no_rule(Rev *r, int32_t i, const char *why);

/* One rule: the adjoint of forward instruction i (ins, a copy) is known;
 * add its contributions to the operands. */
typedef IrStatus (*RevRule)(Rev *r, int32_t i, const IrInstr *ins);
IrStatus rev_elementwise(Rev *r, int32_t i, const IrInstr *ins);   /* rules_elementwise.c */
IrStatus rev_data(Rev *r, int32_t i, const IrInstr *ins);          /* rules_data.c */
IrStatus rev_reduce(Rev *r, int32_t i, const IrInstr *ins);        /* rules_reduce.c */
IrStatus rev_control(Rev *r, int32_t i, const IrInstr *ins);       /* control.c */
IrStatus rev_linalg(Rev *r, int32_t i, const IrInstr *ins);        /* rules_linalg.c */
/* rules_linalg.c: whether ins is JAX's LU custom-call (lapack_?getrf_ffi,
 * real types), which rev_linalg differentiates. */
bool grad_is_getrf(const IrInstr *ins);
/* Forward mode: the tangent of the (first) result of a triangular-solve,
 * cholesky or JAX's LU (self: the instruction), from its operands'
 * tangents tan[k] (zeros where none); -2 when it has no rule. */
int32_t grad_linalg_tangent(GB *b, const IrInstr *ins, int32_t self, const int32_t *tan);
/* Whether an op's floating result has derivative zero everywhere it is
 * defined (floor, sign, iota, rng): gradients stop there. */
bool rev_is_constant_op(IrOpcode op);
/* reverse.c: why op ins has no rule in either mode where the op alone
 * does not say (shard_map's boundaries and collectives), else NULL. */
const char *grad_why_none(const IrInstr *ins);
/* rules_elementwise.c, shared with forward mode: the derivative factor of
 * unary op `op` at x (y = op(x)), -2 when it has none; and the share of an
 * operand of maximum/minimum (1 where p, 0.5 where t, else 0). */
int32_t grad_unary_factor(GB *b, IrOpcode op, int32_t x, int32_t y);
int32_t grad_tie_share(GB *b, int32_t p, int32_t t, int32_t like);
/* rules_data.c, shared with forward mode: the shares of the operand and
 * of each update in a scatter by maximum or minimum (self: its result). */
void grad_scatter_extremal(GB *b, const IrInstr *ins, int32_t self, int32_t part[2]);
/* The pred masks of clamp(lo, x, hi) (lo, hi broadcast to x's shape) where
 * lo, x and hi in turn get the derivative: JAX's strict rule, no operand
 * at a tie with a bound. */
void grad_clamp_masks(GB *b, int32_t lob, int32_t x, int32_t hib, int32_t mask[3]);

/* rules_reduce.c, shared with forward mode: an s32 array of shape s's
 * dims holding each element's row-major index; and what output k of a
 * variadic reduce is (see grad_reduce_kind there). */
int32_t grad_linear_iota(GB *b, const IrShape *s);
/* rules_reduce.c, shared with forward mode: reduce-window multiply's
 * parts (zero mask, x with zeros as 1, the window products of that, the
 * zeros per window), and the reduce-window add of v with ins's window. */
void grad_window_mul(GB *b, const IrInstr *ins, int32_t part[4]);
/* Whether reducer computation ci is JAX's logaddexp (lax.cumlogsumexp's). */
bool grad_is_logaddexp(const IrModule *m, int32_t ci);
/* The tangent of logaddexp pooling ins (self: its result) from its
 * operand's tangent tx; -1 past 1024 window positions. */
int32_t grad_window_lse_tangent(GB *b, const IrInstr *ins, int32_t self, int32_t tx);
int32_t grad_window_sum(GB *b, const IrInstr *ins, int32_t v);
enum { GRAD_ROTHER, GRAD_RSUM, GRAD_RSELECT };
/* For a topk (or TopK custom-call) i with operand [..., n] and k results:
 * v [..., k] routed to the operand's shape (to_operand: out[..., n] = sum
 * of v[..., j] where indices[..., j] == n), or v [..., n] gathered to the
 * values' shape (out[..., j] = v[..., indices[..., j]]). */
int32_t grad_topk_route(GB *b, int32_t i, int32_t v, bool to_operand);
/* For a reduce by multiply: an array of its operand's shape, each element
 * the product of the other elements it is reduced with. */
int32_t grad_prod_others(GB *b, const IrInstr *ins);
int32_t grad_reduce_kind(GB *b, const IrInstr *ins, int32_t k, int32_t *idx);

/* ------------------------------------------------------------------ */
/* custom.c: custom gradients (frontend attributes)                    */
/* ------------------------------------------------------------------ */

/* The value of frontend attribute `key` of ins ("tessel_gradient",
 * "tessel_tangent"), or NULL. */
const char *grad_custom_name(const IrInstr *ins, const char *key);
/* Reverse mode: call the tessel_gradient computation of instruction i. */
IrStatus rev_custom(Rev *r, int32_t i, const IrInstr *ins);
/* A call of JAX's relu, relu6 or softplus (custom.c's header): the
 * derivative factor of its result by its operand, JAX's custom rule (self:
 * the call's result), or -2 when ins is no such call. */
int32_t grad_jax_call_factor(GB *b, const IrInstr *ins, int32_t self);
/* Forward mode: the call of ins's tessel_tangent computation (in b's
 * computation) on its operands, self (the instruction) and the operands'
 * tangents; -1 with an error recorded. */
int32_t fwd_custom(Grad *g, GB *b, const IrInstr *ins, int32_t self, const int32_t *tangents);

/* ------------------------------------------------------------------ */
/* forward.c: forward mode (--jvp)                                     */
/* ------------------------------------------------------------------ */

/* The tangents of one computation, appended to it. */
typedef struct Fwd {
    Grad *g;
    GB b;
    int32_t n0;          /* instructions of the forward part */
    int32_t *base;       /* leaf offset of each forward instruction (n0+1) */
    int32_t *tan;        /* tangent instruction per leaf, -1: zero */
} Fwd;

/* The tangents of computation ci of g->m (its instructions so far are the
 * forward part), given the tangents seed_tan[k] (a value of src[k]'s
 * shape) of instructions src[0..nsrc); fwd_free releases them. */
IrStatus fwd_run(Fwd *f, Grad *g, int32_t ci, int32_t nsrc, const int32_t *src, const int32_t *seed_tan);
void fwd_free(Fwd *f);
/* The tangent of forward instruction x as one value of x's shape (zeros
 * where none; integer leaves zeros of their type; tuples rebuilt). */
int32_t fwd_full(Fwd *f, int32_t x);

/* ------------------------------------------------------------------ */
/* remat_policy.c: checkpoint policies                                 */
/* ------------------------------------------------------------------ */

/* Apply the checkpoint policy `policy` ("dots", "nothing", "names=A,B")
 * to computation comp of g->m, whose instructions [0, n_fwd) are the
 * forward pass and the rest its backward: every forward value the backward
 * (not the root) reads and the policy does not save is recomputed there
 * (remat_policy.c). IR_EINPUT for an unknown policy; IR_ENOMEM. */
IrStatus grad_checkpoint(Grad *g, int32_t comp, int32_t n_fwd, const char *policy);

#endif /* TESSEL_GRAD_H */
