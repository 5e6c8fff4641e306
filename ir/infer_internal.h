/*
 * infer_internal.h: what the files of shape inference share, private to
 * ir/infer*.c (nothing else includes it): the context of a rule, the helpers
 * defined in infer.c and the rules of the op-family files, which infer.c's
 * dispatcher (ir_infer_shape) calls. Every rule reads the instruction x->ins
 * and writes its inferred shape to *out, arrays in the arena x->a, and
 * returns IR_OK, IR_EINPUT (with a message in x->d) or IR_ENOMEM.
 */
#ifndef TESSEL_IR_INFER_INTERNAL_H
#define TESSEL_IR_INFER_INTERNAL_H

#include "ir.h"

/* Everything a rule needs. */
typedef struct Ctx {
    const IrModule *m;
    const IrComputation *c;
    const IrInstr *ins;
    IrArena *a;
    IrDiag *d;
} Ctx;

/* ---- infer.c: errors and small helpers ---- */

/* Record "OPNAME: message" at the instruction's position; IR_EINPUT. */
__attribute__((format(printf, 2, 3)))
IrStatus infer_fail(Ctx *x, const char *fmt, ...);
/* Record "out of memory"; IR_ENOMEM. */
IrStatus infer_oom(Ctx *x);
/* Shape text for messages, in the arena ("?" when out of memory). */
const char *infer_sstr(Ctx *x, const IrShape *s);
/* "{1,2,3}" for messages, in the arena. */
const char *infer_lstr(Ctx *x, const IrI64List *l);
/* The shape of operand i. */
const IrShape *infer_opnd(Ctx *x, int32_t i);
/* The name of operand i. */
const char *infer_opnd_name(Ctx *x, int32_t i);
/* An array shape (not a tuple, token or opaque). */
bool infer_is_array(const IrShape *s);
/* An array of rank 0. */
bool infer_is_scalar(const IrShape *s);
/* Same rank and dimension sizes (element types may differ). */
bool infer_same_dims(const IrShape *a, const IrShape *b);
/* Operand i (`what` in the message) is an array. */
IrStatus infer_expect_array(Ctx *x, int32_t i, const char *what);
/* Operand i (`what` in the message) is a scalar. */
IrStatus infer_expect_scalar(Ctx *x, int32_t i, const char *what);
/* Deep copy of src into dst (arrays in the arena), without layouts. */
IrStatus infer_copy_shape(Ctx *x, IrShape *dst, const IrShape *src);
/* dst = t[dims] of rank `rank`, dimensions copied into the arena. */
IrStatus infer_make_array(Ctx *x, IrShape *dst, IrType t, int32_t rank, const int64_t *dims);
/* dst = t[]. */
IrStatus infer_make_scalar(Ctx *x, IrShape *dst, IrType t);
/* A scratch array of n int64 in the arena (n may be 0). */
int64_t *infer_scratch(Ctx *x, int64_t n);
/* Dimension numbers each in [0, rank), no repeats, ascending when `sorted`. */
IrStatus infer_check_dim_list(Ctx *x, const IrI64List *l, int64_t rank, const char *what,
                        bool sorted);
/* *r = a + b; true on overflow. */
bool infer_add_ovf(int64_t a, int64_t b, int64_t *r);
/* *r = a * b; true on overflow. */
bool infer_mul_ovf(int64_t a, int64_t b, int64_t *r);
/* The real type of a complex type (c64 -> f32, c128 -> f64), else t. */
IrType infer_component_type(IrType t);

/* ---- infer.c: called computations ---- */

/* Called computation k of the instruction. */
const IrComputation *infer_callee(Ctx *x, int32_t k);
/* The shape of parameter i of `comp`, or NULL (with an error) if absent. */
const IrShape *infer_callee_param(Ctx *x, const IrComputation *comp, int32_t i);
/* The shape of `comp`'s root, or NULL (with an error) if absent. */
const IrShape *infer_callee_root(Ctx *x, const IrComputation *comp);
/* `comp` (a `role` computation) takes n parameters. */
IrStatus infer_expect_nparams(Ctx *x, const IrComputation *comp, const char *role, int32_t n);
/* `comp` takes scalars of ptypes[0..np) and returns scalars of
 * rtypes[0..nr) (a tuple when nr > 1): reducers, comparators, map functions. */
IrStatus infer_check_scalar_comp(Ctx *x, const IrComputation *comp, const char *role, int32_t np,
                           const IrType *ptypes, int32_t nr, const IrType *rtypes);
/* The type of reducer parameter i where it is a float and t another
 * float (XLA ignores float precision in reducers), else t. */
IrType infer_reducer_param_type(Ctx *x, const IrComputation *comp, int32_t i, IrType t);
/* A reducer over n values: (acc..., x...) -> (acc...); acc becomes the
 * reducer's accumulator types. */
IrStatus infer_check_reducer(Ctx *x, const IrComputation *comp, int32_t n, IrType *acc,
                       const IrType *in);

/* ---- infer.c: windows ---- */

/* v, or 1 when v is 0 (an unset stride, dilation or group count). */
int64_t infer_dflt1(int64_t v);
/* Output size of window dimension i over a dimension of size n. */
IrStatus infer_window_dim(Ctx *x, int32_t i, const IrWindowDim *w, int64_t n, int64_t *out);
/* The dimensions of `s` under the instruction's window, in the arena. */
IrStatus infer_window_shape(Ctx *x, const IrShape *s, int64_t **dims);

/* ---- infer.c: the tuples -start ops return ---- */

/* The declared shape is a tuple of at least n elements (`form` names
 * them in the message). */
IrStatus infer_expect_tuple_result(Ctx *x, int32_t n, const char *form);
/* Element k of the declared tuple is operand i's shape. */
IrStatus infer_expect_like_operand(Ctx *x, int32_t k, int32_t i);

/* ---- rules of infer_elementwise.c ---- */

IrStatus infer_unary(Ctx *x, IrShape *out);
IrStatus infer_bitcast_convert(Ctx *x, IrShape *out);
IrStatus infer_stochastic_convert(Ctx *x, IrShape *out);
IrStatus infer_binary(Ctx *x, IrShape *out);
IrStatus infer_select(Ctx *x, IrShape *out);
IrStatus infer_clamp(Ctx *x, IrShape *out);

/* ---- rules of infer_data.c ---- */

IrStatus infer_broadcast(Ctx *x, IrShape *out);
IrStatus infer_reshape(Ctx *x, IrShape *out);
IrStatus infer_transpose(Ctx *x, IrShape *out);
IrStatus infer_slice(Ctx *x, IrShape *out);
IrStatus infer_dynamic_slice(Ctx *x, IrShape *out);
IrStatus infer_dynamic_update_slice(Ctx *x, IrShape *out);
IrStatus infer_pad(Ctx *x, IrShape *out);
IrStatus infer_concatenate(Ctx *x, IrShape *out);
IrStatus infer_reverse(Ctx *x, IrShape *out);
IrStatus infer_gather(Ctx *x, IrShape *out);
IrStatus infer_scatter(Ctx *x, IrShape *out);
IrStatus infer_get_dimension_size(Ctx *x, IrShape *out);
IrStatus infer_set_dimension_size(Ctx *x, IrShape *out);
IrStatus infer_dynamic_reshape(Ctx *x, IrShape *out);

/* ---- rules of infer_reduce.c ---- */

IrStatus infer_map(Ctx *x, IrShape *out);
IrStatus infer_sort(Ctx *x, IrShape *out);
IrStatus infer_reduce(Ctx *x, IrShape *out);
IrStatus infer_reduce_window(Ctx *x, IrShape *out);
IrStatus infer_select_and_scatter(Ctx *x, IrShape *out);
IrStatus infer_scan(Ctx *x, IrShape *out);

/* ---- rules of infer_contract.c ---- */

IrStatus infer_dot(Ctx *x, IrShape *out);
IrStatus infer_ragged_dot(Ctx *x, IrShape *out);
IrStatus infer_convolution(Ctx *x, IrShape *out);
IrStatus infer_fft(Ctx *x, IrShape *out);
IrStatus infer_topk(Ctx *x, IrShape *out);
IrStatus infer_cholesky(Ctx *x, IrShape *out);
IrStatus infer_triangular_solve(Ctx *x, IrShape *out);
IrStatus infer_batch_norm(Ctx *x, IrShape *out);

/* ---- rules of infer_collective.c ---- */

IrStatus infer_all_reduce(Ctx *x, IrShape *out);
IrStatus infer_gather_scatter_collective(Ctx *x, IrShape *out);
IrStatus infer_all_to_all(Ctx *x, IrShape *out);
IrStatus infer_ragged_all_to_all(Ctx *x, IrShape *out);
IrStatus infer_collective_permute(Ctx *x, IrShape *out);
IrStatus infer_all_gather_start(Ctx *x, IrShape *out);
IrStatus infer_permute_start(Ctx *x, IrShape *out);
IrStatus infer_send_recv(Ctx *x, IrShape *out);
IrStatus infer_send_recv_done(Ctx *x, IrShape *out);

/* ---- rules of infer_control.c ---- */

IrStatus infer_declared(Ctx *x, IrShape *out);
IrStatus infer_iota(Ctx *x, IrShape *out);
IrStatus infer_tuple(Ctx *x, IrShape *out);
IrStatus infer_gte(Ctx *x, IrShape *out);
IrStatus infer_call(Ctx *x, IrShape *out);
IrStatus infer_while(Ctx *x, IrShape *out);
IrStatus infer_conditional(Ctx *x, IrShape *out);
IrStatus infer_after_all(Ctx *x, IrShape *out);
IrStatus infer_add_dependency(Ctx *x, IrShape *out);
IrStatus infer_passthrough(Ctx *x, IrShape *out);
IrStatus infer_custom_call(Ctx *x, IrShape *out);
IrStatus infer_infeed(Ctx *x, IrShape *out);
IrStatus infer_outfeed(Ctx *x, IrShape *out);
IrStatus infer_rng(Ctx *x, IrShape *out);
IrStatus infer_rng_bit_generator(Ctx *x, IrShape *out);
IrStatus infer_rng_state(Ctx *x, IrShape *out);
IrStatus infer_id(Ctx *x, IrShape *out);
IrStatus infer_async_start(Ctx *x, IrShape *out);
IrStatus infer_async_next(Ctx *x, IrShape *out);
IrStatus infer_done_element(Ctx *x, IrShape *out, int32_t k);
IrStatus infer_copy_start(Ctx *x, IrShape *out);

#endif
