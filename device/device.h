/*
 * device.h: layer `device/`: values, the CPU backend that executes one
 * computation on one device (the reference executor and the per-device
 * executor of partitioned programs), and (later) local devices from hwloc.
 *
 * Files of this layer:
 *   value.c       DevValue: reference-counted arrays and tuples
 *   scalar.c      element load/store in any type, f16/bf16 conversion
 *   exec.c        the interpreter: instructions in topological order,
 *                 tuple/get-tuple-element/call/while/conditional, parameter,
 *                 partition-id/replica-id, collectives and custom-calls
 *                 through the hooks below
 *   k_elementwise.c  unary/binary/ternary ops, compare, convert,
 *                 bitcast-convert, reduce-precision, map
 *   k_data.c      constant, iota, broadcast, reshape, bitcast, transpose,
 *                 slice, dynamic-slice, dynamic-update-slice, pad,
 *                 concatenate, reverse, copy
 *   k_dot.c       dot (OpenBLAS GEMM for f32/f64, loops otherwise), convolution
 *   k_reduce.c    reduce, reduce-window, select-and-scatter
 *   k_gather.c    gather, scatter
 *   k_sort.c      sort
 *
 * Depends on ir/ and BLAS; never on MPI (collectives reach it through
 * DevCollectives, which the runtime provides).
 */
#ifndef TESSEL_DEVICE_H
#define TESSEL_DEVICE_H

#include "../ir/ir.h"

/* ------------------------------------------------------------------ */
/* value.c                                                             */
/* ------------------------------------------------------------------ */

/* A value at run time: an array (data in row-major logical order, element
 * representation as in IrAttrs.literal) or a tuple of values. Reference
 * counted: dev_value_unref frees at zero. `shape` is owned by the value (a
 * heap deep copy), so values outlive the module that produced them. */
typedef struct DevValue {
    IrShape shape;            /* heap-owned deep copy; see dev_value_* */
    uint8_t *data;            /* arrays: nbytes bytes (ts_malloc), NULL for empty */
    int64_t nbytes;
    int32_t nelems;           /* tuples */
    struct DevValue **elems;  /* tuples: owned references */
    int32_t refs;
} DevValue;

/* A new array value of `shape` (must be an array or token), data zeroed.
 * NULL on OOM or when the byte size overflows. */
DevValue *dev_value_new(const IrShape *shape);
/* A new array value with uninitialised data (callers overwrite all of it). */
DevValue *dev_value_new_uninit(const IrShape *shape);
/* A tuple of `n` values; takes ownership of the references in elems. On
 * failure (NULL) the references are released. */
DevValue *dev_value_tuple(const IrShape *shape, int32_t n, DevValue **elems);
/* (shape may be NULL: the tuple shape of the elements' shapes.) */
/* Consume the reference `v` and return an array value of `shape` with the
 * same bytes (reshape, bitcast): v's buffer is reused when it is the sole
 * owner, else copied. NULL (v released) on OOM or a byte-size mismatch. */
DevValue *dev_value_reshaped(DevValue *v, const IrShape *shape);
DevValue *dev_value_ref(DevValue *v);
void dev_value_unref(DevValue *v);
/* A deep copy (fresh buffers). */
DevValue *dev_value_clone(const DevValue *v);
/* Element count of an array value. */
int64_t dev_value_elements(const DevValue *v);
/* Leaf `i` (depth first) of a value; the value itself when an array. */
DevValue *dev_value_leaf(DevValue *v, int32_t i);

/* ------------------------------------------------------------------ */
/* scalar.c                                                            */
/* ------------------------------------------------------------------ */

/* IEEE half and bfloat16 conversions (round to nearest even). */
float dev_f16_to_f32(uint16_t h);
uint16_t dev_f32_to_f16(float f);
float dev_bf16_to_f32(uint16_t h);
uint16_t dev_f32_to_bf16(float f);
/* Load element `i` of an array of type t as double / int64 / uint64. */
double dev_load_f64(IrType t, const void *base, int64_t i);
int64_t dev_load_i64(IrType t, const void *base, int64_t i);
uint64_t dev_load_u64(IrType t, const void *base, int64_t i);
/* Store, converting with XLA's convert semantics (float->int saturates,
 * NaN->0; int->float rounds; narrowing ints wrap). */
void dev_store_f64(IrType t, void *base, int64_t i, double v);
void dev_store_i64(IrType t, void *base, int64_t i, int64_t v);
void dev_store_u64(IrType t, void *base, int64_t i, uint64_t v);

/* ------------------------------------------------------------------ */
/* exec.c                                                              */
/* ------------------------------------------------------------------ */

/* Collectives, provided by whoever runs several devices (the runtime). */
typedef struct DevCollectives {
    void *ctx;
    /* Execute collective `ins` (all-reduce, all-gather, reduce-scatter,
     * all-to-all, collective-permute) as device (replica_id, partition_id) of
     * the run; on success *out holds a new reference to the result. Must
     * report failure (never hang) when a peer fails. */
    IrStatus (*run)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                    DevValue **operands, DevValue **out, IrDiag *d);
} DevCollectives;

/* Custom-call targets registered by the runtime (host targets such as
 * tessel_print); NULL or a target the callback does not know: the executor
 * reports "unknown custom-call target NAME". */
typedef struct DevCustomCalls {
    void *ctx;
    /* Returns IR_EUNSUPPORTED (without touching d) for unknown targets. */
    IrStatus (*call)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                     DevValue **operands, DevValue **out, IrDiag *d);
} DevCustomCalls;

typedef struct DevExecOptions {
    int64_t partition_id;        /* 0 on one device */
    int64_t replica_id;          /* 0 on one device */
    const DevCollectives *coll;  /* NULL: one device, collectives are identities */
    const DevCustomCalls *custom;/* NULL: no registered targets */
    bool no_blas;                /* use the loop kernels even for f32/f64 dot (tests) */
    int64_t max_while_iterations;/* 0: unlimited */
} DevExecOptions;

/* Execute computation `comp` of `m` with `nargs` arguments (references are
 * borrowed). On success *out is a new reference to the result. Values that
 * are no longer used are released as execution proceeds (liveness). */
IrStatus dev_execute(const IrModule *m, int32_t comp, int32_t nargs, DevValue **args,
                     const DevExecOptions *opt, DevValue **out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* Kernels: one entry per op family. Each reads operands and writes a new  */
/* reference to its result into *out. `k->ins` gives shape and attributes. */
/* ------------------------------------------------------------------ */

typedef struct DevKernelArgs {
    const IrModule *m;
    const IrComputation *c;
    const IrInstr *ins;
    int32_t nopnd;
    DevValue **opnd;
    const DevExecOptions *opt;
    IrDiag *d;
} DevKernelArgs;

/* Report a run-time kernel error at the instruction's position. */
IrStatus dev_kernel_error(const DevKernelArgs *k, IrStatus st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* k_elementwise.c */
IrStatus dev_k_elementwise(const DevKernelArgs *k, DevValue **out); /* unary/binary/ternary/compare/convert */
IrStatus dev_k_bitcast_convert(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_map(const DevKernelArgs *k, DevValue **out);
/* k_data.c */
IrStatus dev_k_constant(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_iota(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_broadcast(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_reshape(const DevKernelArgs *k, DevValue **out);   /* reshape, bitcast */
IrStatus dev_k_transpose(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_dynamic_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_dynamic_update_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_pad(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_concatenate(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_reverse(const DevKernelArgs *k, DevValue **out);
/* k_dot.c */
IrStatus dev_k_dot(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_convolution(const DevKernelArgs *k, DevValue **out);
/* k_reduce.c */
IrStatus dev_k_reduce(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_reduce_window(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_select_and_scatter(const DevKernelArgs *k, DevValue **out);
/* k_gather.c */
IrStatus dev_k_gather(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_scatter(const DevKernelArgs *k, DevValue **out);
/* k_sort.c */
IrStatus dev_k_sort(const DevKernelArgs *k, DevValue **out);

/* Call a (scalar) computation, e.g. a reducer or comparator, from a kernel:
 * the fast paths detect add/max/min/... reducers and avoid this. Arguments
 * are borrowed; *out is a new reference. */
IrStatus dev_call(const DevKernelArgs *k, int32_t comp, int32_t nargs, DevValue **args,
                  DevValue **out);

#endif /* TESSEL_DEVICE_H */
