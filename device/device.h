/*
 * device.h: layer `device/`: values, the CPU backend that executes one
 * computation on one device (the reference executor and the per-device
 * executor of partitioned programs), and the local devices from hwloc.
 *
 * Files of this layer:
 *   value.c       DevValue: reference-counted arrays and tuples
 *   scalar.c      element load/store in any type, f16/bf16 conversion
 *   reducer.c     the simple reducers' algebra: identity, combine, NaN
 *                 rules (kernels, in-process collectives, MPI ops)
 *   arith.h       the reducers' arithmetic, written once (float_ops.h: the
 *                 float ops' expressions)
 *   reducer_comp.c  any reducer computation elementwise, and whether it
 *                 provably commutes (collectives, MPI user ops)
 *   exec.c        the interpreter: instructions in topological order,
 *                 tuple/get-tuple-element/call/while/conditional, parameter,
 *                 partition-id/replica-id, collectives and custom-calls
 *                 through the hooks below
 *   k_elementwise.c  unary/binary/ternary ops, compare, convert,
 *                 bitcast-convert, reduce-precision, map
 *   vmath.c       libmvec's vector math over arrays (vmath.h)
 *   fpmode.c      XLA's CPU floating-point mode (subnormals flushed)
 *   fusion.c      elementwise chains as one blocked loop (fusion.h);
 *                 the AVX-512 register path
 *   fusion_rows.c row groups (fusion.h) run one row at a time
 *   op_times.c    per-instruction times (DevOpTimes), for `--stats=ops`
 *   k_data.c      constant, iota, broadcast, reshape, bitcast, transpose,
 *                 slice, dynamic-slice, dynamic-update-slice, pad,
 *                 concatenate, reverse, copy
 *   contract.c    what dot and convolution share (contract.h): compute
 *                 types, packed views, the GEMM (OpenBLAS for f32/f64,
 *                 loops otherwise)
 *   k_dot.c       dot (a causal mask's scores: only the tiles it keeps; products
 *                 over an operand's zero triangle without it)
 *   k_conv.c      convolution: im2col + GEMM, channels-last and sparse paths,
 *                 direct register tiles (AVX-512 or AVX2) for few channels
 *   k_reduce.c    reduce, reduce-window, select-and-scatter
 *   reduce_columns.c  reduce with a reducer of exact scalar ops (argmax),
 *                 run over blocks of outputs at once
 *   reducer_scalar.c  a reducer of scalar elementwise ops run per element
 *                 without the interpreter (nothing allocated a call)
 *   reduce_select.c  reduce and reduce-window with a reducer that compares
 *                 and picks (argmax, argmin): a table look-up an element
 *   k_gather.c    gather, scatter
 *   k_sort.c      sort
 *   k_fft.c       fft (FFT, IFFT, RFFT, IRFFT) with FFTW
 *   k_linalg.c    cholesky (LAPACK potrf), triangular-solve (BLAS trsm)
 *   k_norm.c      batch-norm-training, -inference, -grad
 *   k_topk.c      topk and the custom-call target TopK
 *   k_qr.c        custom-call targets Qr and
 *                 ProductOfElementaryHouseholderReflectors (LAPACK)
 *   k_lu.c        custom-call targets lapack_?getrf_ffi (JAX's LU) and
 *                 tessel_lu_permutation
 *   k_eigh_svd.c  custom-call targets lapack_?syevd_ffi / ?heevd_ffi (JAX's
 *                 eigh) and lapack_?gesdd_ffi / ?gesvd_ffi (JAX's SVD)
 *   k_geev.c      custom-call targets lapack_?geev_ffi (JAX's eig)
 *   k_markers.c   the registry of built-in custom-call targets; XLA's
 *                 annotation targets (identities on one device)
 *   k_ragged.c    ragged-dot, scaled-dot
 *   k_control.c   fusion, async-start/-done, copy-start/-done, scan
 *   k_dynamic.c   set-dimension-size, dynamic-reshape (run-time sizes)
 *   k_host.c      infeed/outfeed and host send/recv through DevHostTransfers
 *   k_rng.c       rng-bit-generator, rng, stochastic-convert
 *   devices.c     local devices from hwloc: topology, cpusets, executor
 *                 threads, BLAS thread policy, the dev_hw_* hwloc layer
 *   alloc.c       allocators cached per (backend, device ordinal), NUMA-bound;
 *                 large freed buffers kept for the device's reuse
 *   blas.c        OpenBLAS, loaded on first use (dev_blas); blas.h, its
 *                 entry points for the files that call BLAS or LAPACK
 *   blas_sgemm.c  the f32 GEMM of BLIS or oneDNN behind cblas_sgemm's
 *                 signature
 *   blas_choice.c which library computes f32 GEMMs: fixed by the caller or
 *                 measured before a run or at the first large one
 *                 (dev_blas_choose_sgemm, dev_blas_sgemm_prepare)
 *   blas_watch.c  the measured choice held against the program's first
 *                 large GEMMs, given to a faster library where they run slow
 *                 (at several BLAS threads a device)
 *   blas_shapes.c the measured choice made per product shape at one thread,
 *                 on each large shape's first product
 *   blas_small.c  the library of the products under the probe's size at one
 *                 thread (from 32^3: OpenBLAS or tessel's kernel, timed once)
 *   sgemm_avx512.c tessel's own f32 GEMM: an AVX-512 micro-kernel on packed
 *                 panels, one more candidate of the probe (`--sgemm avx512`)
 *   sgemm_amx.c   the f32 GEMM as three bf16 products on AMX's tiles
 *                 (`--sgemm amx-bf16x3`, opt-in), with B's kept copies
 *   packed.c      f32 weights packed once for oneDNN's matmul (or their bf16
 *                 copies for sgemm_amx.c), kept across a run's steps
 *                 (DevExecOptions.packed)
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
    uint8_t *data;            /* arrays: nbytes bytes (ts_malloc, or `alloc`'s), NULL for empty */
    int64_t nbytes;
    int32_t nelems;           /* tuples */
    struct DevValue **elems;  /* tuples: owned references */
    int32_t refs;
    /* Bounded dynamic dimensions: the data is laid out at the bounds
     * (shape.dims), as XLA's CPU backend holds it, and `sizes` (rank
     * entries, heap) gives each dimension's run-time size; NULL: every
     * dimension is at its bound. Set by set-dimension-size and
     * dynamic-reshape (k_dynamic.c), read by get-dimension-size and by
     * the output writer (which writes the run-time size). Other kernels
     * compute on the whole bound and give results without sizes. */
    int64_t *sizes;
    /* The device allocator `data` came from (dev_alloc: its NUMA node),
     * NULL for ts_malloc memory. value.c's business. */
    struct DevAllocator *alloc;
    /* The device whose memory counts this array's nbytes (the allocator
     * current on the thread that made it, or the one dev_value_charge
     * named; NULL: no device's), uncounted when the value is freed. */
    struct DevAllocator *charged;
    /* A share (dev_value_share): `data` is this array's buffer, which it
     * holds a reference to and never frees; NULL: the value owns `data`. */
    struct DevValue *base;
} DevValue;

/* A new array value of `shape` (must be an array or token), data zeroed.
 * NULL on OOM or when the byte size overflows. */
DevValue *dev_value_new(const IrShape *shape);
/* A zero value of any shape, tuples recursively (async contexts, tokens).
 * NULL on OOM. */
DevValue *dev_value_zeros(const IrShape *shape);
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
/* Is v an array (not NULL, a tuple or a token)? The kernels' operand check. */
bool dev_value_is_array(const DevValue *v);
/* Count v's arrays (tuple leaves too) against device allocator a instead
 * of whichever they counted against (DevValue.charged): the runtime hands
 * a device the argument shards the host thread made. */
void dev_value_charge(DevValue *v, struct DevAllocator *a);
/* A new reference to v's contents counted against device allocator a as
 * if a held them alone: each array becomes a share, a value of its own
 * (its own count and charge) whose data is the array's, which it keeps
 * alive; the array itself is then counted against no device (its holders'
 * shares count it). Devices of one process that take a value another made
 * (a collective's result, a replicated argument) hold shares, so each
 * device's measured peak is what it holds, as under mpirun where each has
 * its own copy. NULL on OOM. */
DevValue *dev_value_share(DevValue *v, struct DevAllocator *a);
/* Count *v against device allocator a as a device holding it alone
 * would: an array only *v holds is charged to a (dev_value_charge), a
 * shared one is replaced by a share (the reference *v released), a tuple
 * only *v holds keeps its elements, each held so. Can't fail: where a
 * share cannot be allocated the value is charged to a as it is. The
 * runtime hands each device its arguments so (a replicated input is one
 * array for the process's devices). */
void dev_value_hold(DevValue **v, struct DevAllocator *a);
/* May a kernel write into v (the in-place rule below)? Its reference is
 * the only one, and when it is a share, the share is its array's only
 * holder. */
bool dev_value_sole(const DevValue *v);
/* Free the large data buffers this thread keeps for reuse (value.c
 * recycles freed buffers of at least 256 KiB; they are also freed when
 * the thread exits). Can't fail. */
void dev_value_trim(void);
/* Run-time sizes (see DevValue.sizes): set (copied; NULL clears), each
 * within its bound, else IR_EINPUT; IR_ENOMEM. */
IrStatus dev_value_set_sizes(DevValue *v, const int64_t *sizes);
/* The run-time size of dimension d. */
int64_t dev_value_dim_size(const DevValue *v, int32_t d);
/* A value with the run-time sizes as its static shape, the data packed
 * (a new reference to v itself when it has no sizes). NULL on OOM. */
DevValue *dev_value_trimmed(DevValue *v);
/* Copy the box [0, box) between row-major arrays of dims sdims and ddims. */
void dev_copy_box(size_t esize, int32_t rank, const uint8_t *src, const int64_t *sdims,
                  uint8_t *dst, const int64_t *ddims, const int64_t *box);
/* Element count of an array value. */
int64_t dev_value_elements(const DevValue *v);
/* Leaf `i` (depth first) of a value; the value itself when an array. */
DevValue *dev_value_leaf(DevValue *v, int32_t i);
/* Every leaf of v, depth first, into out[0 .. leaf count) (borrowed): one
 * walk, where dev_value_leaf per leaf is quadratic in a wide tuple.
 * Returns the count. */
int32_t dev_value_leaves(DevValue *v, DevValue **out);

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
/* Element i of a float array as its rank in IEEE totalOrder (sort,
 * select-and-scatter and topk compare floats by it). */
int64_t dev_total_order_key(IrType t, const void *base, int64_t i);
/* The canonical byte of s2/s4/u2/u4 holding v's low bits (sign- or
 * zero-extended); other types: the low byte. Can't fail. */
uint8_t dev_subbyte_wrap(IrType t, uint64_t v);

/* ------------------------------------------------------------------ */
/* reducer.c: the simple reducers (add, multiply, maximum, minimum, and, */
/* or, xor) in one place                                               */
/* ------------------------------------------------------------------ */

/* The domain values are combined in: floats in double, signed ints in
 * int64, unsigned in uint64, pred as 0/1. */
typedef enum DevRedDom {
    DEV_RED_F, /* every float type: double */
    DEV_RED_S, /* signed ints: int64 */
    DEV_RED_U, /* unsigned ints: uint64 */
    DEV_RED_P  /* pred: 0 or 1 */
} DevRedDom;

/* One accumulator: the field of its domain (f, s, or u for U and P). */
typedef union DevAcc {
    double f;
    int64_t s;
    uint64_t u;
} DevAcc;

/* The domain of element type t; false for types without one (complex). */
bool dev_red_dom(IrType t, DevRedDom *d);
/* Is `op` a reducer of domain d? (and/or/xor are not, for floats.) */
bool dev_red_has(DevRedDom d, IrOpcode op);
/* Element i of an array of type t as an accumulator of domain d, and back
 * (rounded or wrapped to t). */
DevAcc dev_acc_load(DevRedDom d, IrType t, const void *base, int64_t i);
void dev_acc_store(DevRedDom d, IrType t, void *base, int64_t i, DevAcc a);
/* dev_acc_store of acc[0..n) into elements 0..n of base: the same values. */
void dev_acc_store_run(DevRedDom d, IrType t, void *base, const DevAcc *acc, int64_t n);
/* op(a, b): NaN propagates through maximum/minimum (a's when both are
 * NaN), ties keep a, integers wrap, pred add/max = or, multiply/min = and. */
DevAcc dev_red_combine(DevRedDom d, IrOpcode op, DevAcc a, DevAcc b);
/* The identity of op on type t: 0 (add, or, xor), 1 (multiply), the
 * lowest value (-inf, INT_MIN, 0; maximum), the highest (minimum), all
 * ones (and); pred: true for multiply, minimum and and. */
DevAcc dev_red_identity(DevRedDom d, IrType t, IrOpcode op);
/* The same reducer in bitwise form where the type has one: on pred, add
 * and maximum are or, multiply and minimum are and (for MPI's built-in
 * ops, whose sum of two trues is 2). Other types: op. */
IrOpcode dev_red_canonical(IrType t, IrOpcode op);
/* Runs: load n elements of base (type t) from i0 into x; fold x into acc:
 * acc[j * astride] = op(acc[j * astride], x[j]), or with astride 0 the
 * whole run into acc[0] in order; fold_one returns op(...op(a, x[0])...). */
void dev_red_load_run(DevRedDom d, IrType t, const uint8_t *base, int64_t i0, int64_t n, DevAcc *x);
void dev_red_fold_run(DevRedDom d, IrOpcode op, DevAcc *acc, int64_t astride, const DevAcc *x, int64_t n);
DevAcc dev_red_fold_one(DevRedDom d, IrOpcode op, DevAcc a, const DevAcc *x, int64_t n);
/* Column folds: acc[j] = op(acc[j], x[r][j]) for r < rows and j < n, the
 * rows n consecutive elements of base (type t) from i0, folded row by row
 * (each accumulator takes its column in order): the sums over outer dims
 * of a reduce whose kept dims are innermost (batch norm over NHWC), with
 * f32 and f64 floats in vector loops instead of one run per row. */
void dev_red_fold_cols(DevRedDom d, IrOpcode op, IrType t, const uint8_t *base, int64_t i0, int64_t rows,
                       int64_t n, DevAcc *acc);
/* *acc = op(...op(*acc, x[0])..., x[n-1]) for the n f32 or f64 elements x
 * of base from i0 and a floating reducer, folded in 8 interleaved partial
 * results in double (not in element order: a sum's last bits may differ
 * from dev_red_fold_one's); false, nothing done, for other types and
 * reducers. The reduce of a row, fused or not. */
bool dev_red_fold_lanes(IrOpcode op, IrType t, const uint8_t *base, int64_t i0, int64_t n, double *acc);
/* out[k] = op(out[k], in[k]) for n elements of type t, rounded to t each
 * element (collectives); false, nothing written, if op is no reducer of t. */
bool dev_red_combine_array(IrOpcode op, IrType t, void *out, const void *in, int64_t n);
/* n elements of buf = the identity of op on t; false as above. */
bool dev_red_fill_identity(IrOpcode op, IrType t, void *buf, int64_t n);

/* reducer_comp.c: any reducer computation (XLA's to_apply of a
 * collective: two scalar parameters of type t), elementwise:
 * out[i] = comp(lhs[i], rhs[i]) for n elements; out may be lhs or rhs.
 * Errors of the computation are reported in d. */
IrStatus dev_red_call(const IrModule *m, int32_t comp, IrType t, void *out, const void *lhs, const void *rhs,
                      int64_t n, IrDiag *d);
/* Is comp(a, b) == comp(b, a) provably (simple reducers, and expressions
 * of attribute-free elementwise ops equal with the parameters swapped up
 * to commutative operand order)? false: not proven, not "not commutative". */
bool dev_red_commutes(const IrModule *m, int32_t comp);


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
    /* All-reduce `ins` (ir_allreduce_adds: one f32 or f64 array operand,
     * reducer add) with the add that reads its result taken in: *out =
     * the all-reduce's result + addend (this device's own, of the result's
     * shape), the bits of the two run apart. NULL: the executor runs them
     * apart. Same contract as run. */
    IrStatus (*run_add)(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *operand, DevValue *addend,
                        DevValue **out, IrDiag *d);
    /* send, recv, send-done and recv-done between devices (no
     * is_host_transfer); NULL: refused. Same contract as run. */
    IrStatus (*p2p)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                    DevValue **operands, DevValue **out, IrDiag *d);
    /* Asynchronous collectives (the -start/-done pairs, ir/schedule_overlap.c): start
     * begins collective `ins` (the base op: all-reduce, all-gather, ...;
     * copied, so it may be a temporary) on new references to the operands
     * and returns at once with *handle; wait(handle) blocks until it is
     * done and gives its result as run would, and frees the handle (also
     * on failure). Every device starts and waits its collectives in one
     * order (one program), and a device may run other instructions,
     * blocking collectives included, between a start and its wait. NULL:
     * a -start runs its collective at once (through run). */
    IrStatus (*start)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                      DevValue **operands, void **handle, IrDiag *d);
    IrStatus (*wait)(void *ctx, void *handle, DevValue **out, IrDiag *d);
} DevCollectives;

/* Per-instruction times (op_times.c; `tessel run --stats=ops`): while
 * `on`, the executor reads a monotonic clock around every instruction it
 * runs (a fusion group at its root, a while or call around its body) and
 * adds the time to the instruction's entry. A call, while or conditional
 * keeps its self time: what its body's timed instructions took is theirs,
 * so the entries of one step add up to the step less the executor's own
 * bookkeeping. Computations a kernel runs per element (reducers,
 * comparators, fusion bodies through dev_call) are not timed: they are in
 * their kernel's time. Off (DevExecOptions.op_times NULL, or !on), the
 * executor reads no clock. */
typedef struct DevOpTime {
    const IrInstr *ins;
    int32_t fused;            /* the instructions of the fusion group it is the root of (0: none) */
    int64_t calls;
    double seconds;           /* self time, summed over calls */
    double wait_seconds;      /* of it, waited in collectives (*DevOpTimes.waited's growth) */
} DevOpTime;
typedef struct DevOpTimes {
    const IrModule *m;
    bool on;                  /* record now (the runtime: over the steps it counts) */
    const double *waited;     /* seconds the device has waited for its peers in collectives so
                               * far, kept by the collectives' runtime; NULL: none */
    int32_t *first;           /* m->ncomp + 1 entries: computation k's instructions are
                               * entries first[k] .. first[k+1]-1 of t */
    DevOpTime *t;
    double nested;            /* the executor's: time of the running instruction's timed callees */
    double nested_wait;       /*   and what they waited */
} DevOpTimes;

/* An empty table for module m's instructions (every entry at 0 calls).
 * IR_ENOMEM (t left empty, safe to free). */
IrStatus dev_op_times_init(DevOpTimes *t, const IrModule *m);
void dev_op_times_free(DevOpTimes *t);
/* The entry of instruction i of computation comp. */
DevOpTime *dev_op_time(DevOpTimes *t, int32_t comp, int32_t i);
/* The entries that ran (calls > 0), most seconds first (ties: module
 * order), into rows (room for max); returns how many there are in all
 * (more than max: the rest left out). Can't fail. */
int32_t dev_op_times_top(const DevOpTimes *t, DevOpTime *rows, int32_t max);

/* Custom-call targets registered by the runtime (host targets such as
 * tessel_print); NULL or a target the callback does not know: the executor
 * reports "unknown custom-call target NAME". */
typedef struct DevCustomCalls {
    void *ctx;
    /* Returns IR_EUNSUPPORTED (without touching d) for unknown targets. */
    IrStatus (*call)(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                     DevValue **operands, DevValue **out, IrDiag *d);
} DevCustomCalls;

/* Host transfers, provided by the runtime (`tessel run --infeed FILE.npy`):
 * infeed and recv with is_host_transfer take values from `feed`, outfeed
 * and send with is_host_transfer give them to `take`, in program order.
 * NULL: those ops are refused with an error naming the instruction. */
typedef struct DevHostTransfers {
    void *ctx;
    /* The next value for `ins`, of `shape` (an array or a tuple); *out a new
     * reference. Fails (never blocks) when no value is left. */
    IrStatus (*feed)(void *ctx, const IrModule *m, const IrInstr *ins, const IrShape *shape,
                     DevValue **out, IrDiag *d);
    /* Keep `v` (borrowed: take a reference to keep it). */
    IrStatus (*take)(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *v, IrDiag *d);
} DevHostTransfers;

typedef struct DevExecOptions {
    int64_t partition_id;        /* 0 on one device */
    int64_t replica_id;          /* 0 on one device */
    const DevCollectives *coll;  /* NULL: one device, collectives are identities */
    const DevCustomCalls *custom;/* NULL: no registered targets */
    bool no_blas;                /* use the loop kernels even for f32/f64 dot (tests) */
    bool no_avx512;              /* kernels with an AVX-512 and an AVX2 form run the AVX2 one (tests) */
    /* Fusion (fusion.c): chains of elementwise ops, and broadcasts feeding
     * them, run as one blocked loop over the output. no_fusion: one kernel
     * call per instruction (the reference path). fusion_block: elements
     * per block through the range kernels for every group, and every
     * array is fused however small (tests use uneven small blocks); 0: f32
     * groups run in the chunk interpreter, others in blocks sized to a
     * cache budget, and only arrays of at least IR_FUSION_MIN_ELEMENTS
     * are fused, unless fuse_small (tests). Results are the same bit for
     * bit every way: the same expressions run, a block at a time; except
     * float sums and products of fused row reductions (fusion_rows.c),
     * folded in interleaved partial results. */
    bool no_fusion;
    int32_t fusion_block;
    bool fuse_small;
    int64_t max_while_iterations;/* 0: unlimited */
    /* Calls to outlined device clusters (a `call` carrying the frontend
     * attribute _tessel_cluster, see cluster/cluster.h): when set, the
     * runtime launches the cluster on its devices instead of the executor
     * running the callee here. IR_EUNSUPPORTED (d untouched): run it here. */
    const DevCustomCalls *cluster_calls;
    const DevHostTransfers *host; /* NULL: infeed, outfeed, host send/recv refused */
    /* Seed of `rng` (k_rng.c; docs/cli.md, "Random numbers of `rng`"). */
    uint64_t rng_seed;
    /* Donated arguments of dev_execute (ndonated >= nargs, else none):
     * donated[k] hands argument k's reference to the executor, which
     * releases it at its parameter's last use and sets args[k] to NULL
     * (an input_output_alias: a kernel may then write its output into the
     * buffer). */
    const bool *donated;
    int32_t ndonated;
    /* Per-instruction times (above); NULL: none, no clock read. */
    DevOpTimes *op_times;
    /* f32 weights packed once for the GEMM (packed.c): set by a runtime
     * that runs the entry computation step after step on the same
     * undonated arguments; NULL: every product packs its own. */
    struct DevPacked *packed;
} DevExecOptions;

/* packed.c: a dot's B operand that is an undonated parameter of the entry
 * computation, packed at its first product for oneDNN's matmul (AMX's
 * tiles or tessel's own kernel, where the products run there) and kept
 * (with a reference to its value, so its buffer stays unwritten) until
 * dev_packed_free, for the products of the same shape on it afterwards.
 * dev_packed_new: NULL on OOM (then nothing is packed).
 * dev_packed_sgemm: C[m,n] = A op(B) row-major from B's packed form (made
 * now if new), v the value whose buffer holds B; false where it did not
 * run (no library that keeps B is the one at one thread, the product is
 * small, the device's budget is spent, or packing failed): the caller
 * computes it.
 * dev_packed_stats: the weights kept packed, their bytes, and the
 * products run from them. One device thread uses a DevPacked. */
typedef struct DevPacked DevPacked;
/* What a row-major f32 product runs on each block of its C as soon as
 * the block holds its final values (rows [i0, i0 + rows), columns [j0,
 * j0 + cols), at c, row stride ldc), while it is still in cache: tessel's
 * own GEMM calls it a strip of its tile rows at a time, other paths on
 * the whole C after the product. Each element is in exactly one call. */
typedef struct DevGemmThen {
    void (*fn)(void *ctx, float *c, int64_t i0, int64_t rows, int64_t j0, int64_t cols, int64_t ldc);
    void *ctx;
    /* NULL, or told of each tile of C (rows [i0, i0 + rows), columns
     * [j0, j0 + cols)) as tessel's own GEMM stores its last k block:
     * while the GEMM computes, fn's operands for later blocks may be
     * fetched a little at a time. */
    void (*tile)(void *ctx, int64_t i0, int64_t rows, int64_t j0, int64_t cols);
} DevGemmThen;
DevPacked *dev_packed_new(void);
void dev_packed_free(DevPacked *pc);
bool dev_packed_sgemm(DevPacked *pc, DevValue *v, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, bool tb, int64_t ldb, float *c, int64_t ldc);
/* dev_packed_sgemm, then `then` (NULL: nothing) on every block of C
 * where it ran (not where it returns false). */
bool dev_packed_sgemm_then(DevPacked *pc, DevValue *v, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b, bool tb, int64_t ldb, float *c, int64_t ldc, const DevGemmThen *then);
void dev_packed_stats(const DevPacked *pc, int32_t *weights, size_t *bytes, int64_t *runs);

/* fpmode.c: XLA's CPU floating-point mode (subnormals flushed to zero,
 * operands and results) for the calling thread; dev_execute holds it while
 * it runs. enter returns the thread's previous mode; restore puts it back.
 * Neither can fail (on targets without the controls they do nothing). */
typedef struct DevFpMode {
    uint64_t bits;
} DevFpMode;
DevFpMode dev_fp_flush_enter(void);
void dev_fp_restore(DevFpMode saved);

/* Execute computation `comp` of `m` with `nargs` arguments (references are
 * borrowed). On success *out is a new reference to the result. Values that
 * are no longer used are released as execution proceeds (liveness). */
IrStatus dev_execute(const IrModule *m, int32_t comp, int32_t nargs, DevValue **args,
                     const DevExecOptions *opt, DevValue **out, IrDiag *d);
/* The custom-call targets the executor itself runs (k_markers.c's
 * registry): XLA's annotation targets, identities on one device (the SPMD
 * markers Sharding, SPMDFullToShardShape, SPMDShardToFullShape, the memory
 * placement and shard-barrier annotations, SetBound),
 * TopK (k_topk.c), Qr and ProductOfElementaryHouseholderReflectors
 * (k_qr.c). Others need DevExecOptions.custom. */
bool dev_builtin_target(const char *target);
/* "Did you mean": the registry's target that `target` is a slip of
 * (ir_nearest: SPMDFullToShardShap, Shardng), else NULL. */
const char *dev_builtin_target_nearest(const char *target);

/* ------------------------------------------------------------------ */
/* Kernels: one entry per op family. Each reads operands and writes a new  */
/* reference to its result into *out. `k->ins` gives shape and attributes. */
/* ------------------------------------------------------------------ */

/* In-place rule: during a kernel call, an operand that is sole
 * (dev_value_sole: refs == 1, its buffer shared with no one) is at its
 * last use and owned by nobody else (the executor pins operands it still
 * needs), so a kernel may return it (a new reference) with its data
 * updated, e.g. dynamic-update-slice. Otherwise operands are read-only. */

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
/* The kernels' one out-of-memory error: "out of memory in WHAT" (WHAT
 * NULL: the instruction's opcode), IR_ENOMEM. */
IrStatus dev_kernel_oom(const DevKernelArgs *k, const char *what);

/* k_rng.c: rng-bit-generator (ThreeFry, Philox as XLA), rng, stochastic-convert */
IrStatus dev_k_rng_bit_generator(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_rng(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_stochastic_convert(const DevKernelArgs *k, DevValue **out);
/* The block functions, for known-answer tests: Random123's threefry2x32
 * with 20 rounds and philox4x32 with 10. Can't fail. */
void dev_threefry2x32(const uint32_t ctr[2], const uint32_t key[2], uint32_t out[2]);
void dev_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* k_elementwise.c */
IrStatus dev_k_elementwise(const DevKernelArgs *k, DevValue **out); /* unary/binary/ternary/compare/convert */
/* The same kernel in two halves, for fused loops (fusion.c): check the
 * operands' shapes against the instruction (once; data is not read), then
 * compute n elements, where every operand and r are views of the same n
 * elements (data pointing at the first; scalar operands of select/clamp
 * stay scalars). copy and map have no range kernel. */
IrStatus dev_k_elementwise_check(const DevKernelArgs *k);
IrStatus dev_k_elementwise_range(const DevKernelArgs *k, int64_t n, DevValue *r);
/* The kernel written over operand j's buffer, which must have the
 * result's dims and bytes (its last use, the caller's alone: exec.c's
 * elementwise_in_place); the caller then gives that value the result's
 * shape (dev_value_reshaped). The operand's data is the result's on
 * IR_OK, undefined on failure. Not for copy or map. */
IrStatus dev_k_elementwise_over(const DevKernelArgs *k, int32_t j);
IrStatus dev_k_bitcast_convert(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_map(const DevKernelArgs *k, DevValue **out);
/* k_data.c */
IrStatus dev_k_constant(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_iota(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_broadcast(const DevKernelArgs *k, DevValue **out);
/* broadcast for fused loops: check k (as dev_k_broadcast) and give the
 * stride in the operand of each result dimension (0 where broadcast);
 * then write elements [first, first + n) of the row-major result. */
IrStatus dev_k_broadcast_strides(const DevKernelArgs *k, int64_t *sstr);
void dev_broadcast_range(const IrShape *rs, const int64_t *sstr, const uint8_t *src, int64_t first,
                         int64_t n, uint8_t *dst);
IrStatus dev_k_reshape(const DevKernelArgs *k, DevValue **out);   /* reshape, bitcast */
IrStatus dev_k_transpose(const DevKernelArgs *k, DevValue **out);
/* transpose for fused loops: check k (as dev_k_transpose) and give the
 * stride in the operand of each result dimension, for dev_broadcast_range
 * (which then reads a transpose as it reads a broadcast). */
IrStatus dev_k_transpose_strides(const DevKernelArgs *k, int64_t *sstr);
IrStatus dev_k_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_dynamic_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_dynamic_update_slice(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_pad(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_concatenate(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_reverse(const DevKernelArgs *k, DevValue **out);
/* k_dot.c */
IrStatus dev_k_dot(const DevKernelArgs *k, DevValue **out);
/* The dot k->ins as a fusion group runs it (fusion.c): operand j is
 * k->opnd[j] read transposed by perm[j] (a transpose's dimensions, NULL:
 * as it is), through strides where its matrices allow, without the
 * transpose's array; with tshape non-NULL the result is written
 * transposed, free dims of the rhs before those of the lhs ([batch, rhs
 * free, lhs free], the shape tshape of a transpose that
 * ir_dot_transpose_swaps accepts), without the dot's own result. lower:
 * the result is read only on and below the diagonal of its last two dims
 * (ir_dot_reads_lower): the tiles above it are not computed, and hold 0. */
/* A dot epilogue (ir/fusion_find.c's dot_epilogues): each element r of
 * the f32 result [batch..., M, N] becomes r / scale or r * scale (where
 * scaled), then (mask[i,j] != 0) == keep ? r : fill
 * where mask is a pred [M,N] (NULL: no select), applied to a block of rows
 * while it is in cache. */
typedef struct DevDotEpilogue {
    bool scaled, divide; /* r / scale (divide) or r * scale, where scaled */
    float scale;
    const uint8_t *mask;
    bool keep;
    float fill;
    /* Then, where softmax, each row r of N becomes its softmax (the
     * dot's group is rooted at ir_fusion_softmax's divide): m = the
     * row's max folded from max_init, then maximum(m, clamp) (or
     * maximum(clamp, m) with clamp_first) where clamped; e = exp(r - m);
     * z = e's sum folded from sum_init; r = e / z. Each fold as a row
     * group folds its row (dev_fusion_fold_f32). */
    bool softmax, clamped, clamp_first;
    float max_init, clamp, sum_init;
    /* NULL, or for each row i of the mask, 1 + the last column j with
     * (mask[i,j] != 0) == keep (0: none): k_dot.c works it out once a
     * dot for the softmax's rows, which every batch element reads. */
    const int64_t *kept_ends;
    /* Then, where `then` is set, elementwise consumers of the result
     * (IrFusionGroup.dot_feeds): then(ctx, c, first, n) turns c[0..n),
     * the result's elements [first, first + n) (row-major over the whole
     * result, as written: transposed where it is), into the group's
     * values; each element in exactly one call. With nothing else in the
     * epilogue it runs inside tessel's own GEMM on each strip of rows it
     * finishes (DevGemmThen), else after each block of rows. */
    void (*then)(void *ctx, float *c, int64_t first, int64_t n);
    void *ctx;
    /* NULL, or: elements [first, first + n) come to `then` soon (their
     * other operands may be fetched now). */
    void (*ahead)(void *ctx, int64_t first, int64_t n);
} DevDotEpilogue;
IrStatus dev_k_dot_fused(const DevKernelArgs *k, const IrI64List *const perm[2], const IrShape *tshape,
                         bool lower, const DevDotEpilogue *epi, DevValue **out);
/* Attention as one group (IrFusionGroup.dot_then): the scores dot k (its
 * operands read as dev_k_dot_fused reads them; lower as there) with its
 * epilogue epi (a softmax), whose probabilities P [batch..., M, N] are
 * only read by the dot kv->ins as its lhs (batch dims first and in order,
 * contracted over N); kv->opnd[1] is its rhs V, read transposed by vperm
 * (NULL: as it is). *out is P.V, P made a block of 64 rows at a time in
 * scratch and never whole (k_dot.c). Fails as dev_k_dot_fused does, and
 * IR_EINTERNAL when the dots do not fit that form. */
IrStatus dev_k_dot_attention(const DevKernelArgs *k, const IrI64List *const perm[2], bool lower,
                             const DevDotEpilogue *epi, const DevKernelArgs *kv, const IrI64List *vperm,
                             DevValue **out);
/* k_conv.c */
IrStatus dev_k_convolution(const DevKernelArgs *k, DevValue **out);
/* k_reduce.c */
IrStatus dev_k_reduce(const DevKernelArgs *k, DevValue **out);
/* reduce_columns.c: reduce k (n inputs, the reduced dims red, checked by
 * dev_k_reduce) whose reducer dev_reduce_columns_fit accepts: 2n scalar
 * parameters, scalar compares, selects, logic and exactly rounded
 * arithmetic, and 64 outputs or more; the results (res, n arrays of the result's leaves) are the
 * element-by-element evaluation's bit for bit. IR_ENOMEM, or the kernels'
 * errors. */
bool dev_reduce_columns_fit(const DevKernelArgs *k, int32_t n);
IrStatus dev_reduce_columns(const DevKernelArgs *k, int32_t n, const bool *red, DevValue **res);
/* reducer_scalar.c: a computation of scalar elementwise ops
 * (ir_scalar_computation) run per element without the interpreter: each
 * instruction a fixed scalar view, its elementwise kernel on one element. */
typedef struct DevScalarProg {
    const DevKernelArgs *k;
    const IrComputation *c;  /* NULL: no program */
    int32_t *order, norder;
    DevValue *val;           /* per instruction: a scalar view of store[i] */
    uint8_t (*store)[16];
} DevScalarProg;
/* A program for computation comp, run on k's behalf; false (nothing
 * held) when comp does not qualify or memory runs out. */
bool dev_scalar_prog_init(DevScalarProg *p, const DevKernelArgs *k, int32_t comp);
void dev_scalar_prog_free(DevScalarProg *p);
/* Run on scalar arguments args[0..nargs) (their bytes are copied in);
 * IR_EINPUT when they do not fit, or the kernels' errors. */
IrStatus dev_scalar_prog_run(DevScalarProg *p, int32_t nargs, const DevValue *const *args);
/* The number of results (the root tuple's elements, else 1) and result j
 * of the last run, valid until the next. */
int32_t dev_scalar_prog_results(const DevScalarProg *p);
const DevValue *dev_scalar_prog_result(const DevScalarProg *p, int32_t j);
/* reduce_select.c: the step of a reduce or reduce-window whose reducer
 * compares and picks (ir_select_reducer: argmax, argmin): the table, and
 * the accumulators as values to compare and bits to store. */
typedef struct DevSelectFold {
    IrSelectReducer r;
    DevRedDom dom[IR_SELECT_REDUCER_MAX];
    size_t size[IR_SELECT_REDUCER_MAX];
} DevSelectFold;
typedef struct DevSelectAcc {
    DevAcc v[IR_SELECT_REDUCER_MAX];
    uint64_t bits[IR_SELECT_REDUCER_MAX];
} DevSelectAcc;
/* Is k (n inputs, then n inits, as received) such a reduce? Fills *f. */
bool dev_select_fold_init(const DevKernelArgs *k, int32_t n, DevSelectFold *f);
/* *acc = the inits (k's operands n..2n-1). */
void dev_select_acc_init(const DevSelectFold *f, const DevKernelArgs *k, DevSelectAcc *acc);
/* *acc = reducer(*acc, the inputs x[0..n) at element off). */
void dev_select_fold(const DevSelectFold *f, DevSelectAcc *acc, const DevValue *const *x, int64_t off);
/* res[j][o] = acc's result j, for each of the n results. */
void dev_select_acc_store(const DevSelectFold *f, const DevSelectAcc *acc, DevValue **res, int64_t o);
IrStatus dev_k_reduce_window(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_select_and_scatter(const DevKernelArgs *k, DevValue **out);
/* k_gather.c */
IrStatus dev_k_gather(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_scatter(const DevKernelArgs *k, DevValue **out);
/* k_sort.c */
IrStatus dev_k_sort(const DevKernelArgs *k, DevValue **out);
/* k_fft.c: FFTW plans are made under one process-wide lock (devices are
 * threads and FFTW's planner is not thread-safe). */
IrStatus dev_k_fft(const DevKernelArgs *k, DevValue **out);
/* k_linalg.c */
IrStatus dev_k_cholesky(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_triangular_solve(const DevKernelArgs *k, DevValue **out);
/* k_norm.c */
IrStatus dev_k_batch_norm_training(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_batch_norm_inference(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_batch_norm_grad(const DevKernelArgs *k, DevValue **out);
/* k_topk.c: the topk op, and custom-call target TopK (k from the result). */
IrStatus dev_k_topk(const DevKernelArgs *k, DevValue **out);
/* k_qr.c: custom-call targets Qr (LAPACK geqrf) and
 * ProductOfElementaryHouseholderReflectors (orgqr/ungqr). */
IrStatus dev_k_qr(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_householder_product(const DevKernelArgs *k, DevValue **out);
/* k_lu.c: custom-call targets lapack_?getrf_ffi (LAPACK getrf), and
 * tessel_lu_permutation (the pivots' permutation, for the LU's gradient). */
IrStatus dev_k_getrf(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_lu_permutation(const DevKernelArgs *k, DevValue **out);
/* k_eigh_svd.c: custom-call targets lapack_?syevd_ffi / lapack_?heevd_ffi
 * (LAPACK syevd, heevd) and lapack_?gesdd_ffi / lapack_?gesvd_ffi (gesdd,
 * gesvd). */
IrStatus dev_k_syevd(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_gesdd(const DevKernelArgs *k, DevValue **out);
/* k_geev.c: custom-call targets lapack_?geev_ffi (LAPACK geev: the
 * eigendecomposition of a general matrix, jnp.linalg.eig). */
IrStatus dev_k_geev(const DevKernelArgs *k, DevValue **out);
/* k_markers.c: run a target for which dev_builtin_target is true. */
IrStatus dev_k_builtin_custom_call(const DevKernelArgs *k, DevValue **out);
/* k_ragged.c */
IrStatus dev_k_ragged_dot(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_scaled_dot(const DevKernelArgs *k, DevValue **out);
/* k_control.c: fusion, async wrappers, copy-start, scan */
IrStatus dev_k_fusion(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_async_start(const DevKernelArgs *k, DevValue **out);
/* XLA's async tuple of k->ins: ((operands), result, zeroed context...);
 * takes the reference `result` (released on failure). */
IrStatus dev_async_tuple(const DevKernelArgs *k, DevValue *result, DevValue **out);
/* The same tuple from element 0 already made (dev_async_operands: the
 * operands, or the one array operand itself) and the result; takes both
 * references (released on failure). For a -done completing a start. */
IrStatus dev_async_assemble(const DevKernelArgs *k, DevValue *el0, DevValue *result, DevValue **out);
DevValue *dev_async_operands(const DevKernelArgs *k);
/* The collective an async-start wraps, when its computation is one
 * collective over its parameters (XLA's async all-reduce, reduce-scatter,
 * ...): its instruction, and in arg[j] which async-start operand is that
 * collective's operand j (at most `max`); NULL otherwise (the computation
 * then runs at the start). */
const IrInstr *dev_async_wrapped_collective(const DevKernelArgs *k, int32_t *arg, int32_t max);
/* Element i of the tuple operand: async-done (1), copy-done (0), ... */
IrStatus dev_k_tuple_part(const DevKernelArgs *k, int32_t i, DevValue **out);
IrStatus dev_k_copy_start(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_scan(const DevKernelArgs *k, DevValue **out);
/* k_dynamic.c: set-dimension-size, dynamic-reshape (get-dimension-size is
 * exec.c's) */
IrStatus dev_k_set_dimension_size(const DevKernelArgs *k, DevValue **out);
IrStatus dev_k_dynamic_reshape(const DevKernelArgs *k, DevValue **out);
/* ragged-all-to-all where the group is the device alone */
IrStatus dev_k_ragged_all_to_all_self(const DevKernelArgs *k, DevValue **out);
/* k_host.c: infeed, outfeed, send, send-done, recv, recv-done */
IrStatus dev_k_host_transfer(const DevKernelArgs *k, DevValue **out);

/* Call a (scalar) computation, e.g. a reducer or comparator, from a kernel:
 * the fast paths detect add/max/min/... reducers and avoid this. Arguments
 * are borrowed; *out is a new reference. */
IrStatus dev_call(const DevKernelArgs *k, int32_t comp, int32_t nargs, DevValue **args,
                  DevValue **out);

/* ------------------------------------------------------------------ */
/* devices.c: local devices from hwloc                                 */
/* ------------------------------------------------------------------ */

/*
 * A process (one MPI rank, one host) runs L local devices. A device is a
 * set of cores (an hwloc cpuset), one executor thread bound to those cores,
 * and memory on its NUMA node (through its allocator, alloc.c below).
 *
 * Placement: the process's cpuset (its binding, e.g. from `mpirun
 * --bind-to` or `taskset`, within the cpuset the system allows) is divided
 * into L parts by hwloc_distrib, which never splits a core: on 2 cores,
 * L=2 gives cpusets {0} {1}; L=1 gives {0-1}; L=3 gives {0} {0} {1} (more
 * devices than cores: devices share cores, and DevDevices.shared_cores
 * says so). Each device's NUMA node is the node holding most of its PUs.
 *
 * Lifetime: dev_topology_load loads hwloc's topology once per process and
 * caches it; device sets borrow it. Allocators are cached per (backend,
 * device ordinal) for the life of the process and outlive device sets,
 * since buffers they handed out may outlast the devices. dev_shutdown
 * releases the cache (allocators, then the topology) once no device set
 * and no buffer is alive, so valgrind sees nothing leaked.
 *
 * hwloc: every hwloc call goes through the dev_hw_* layer at the top of
 * devices.c (the only file that includes hwloc.h), so a test can make the
 * Nth call fail (dev_hw_fail_after). A failed binding of an executor thread
 * is a warning (DevDevice.bound false, with the reason), never fatal; a
 * topology that is not this machine's (HWLOC_SYNTHETIC, HWLOC_XMLFILE) is
 * described but never bound to.
 *
 * BLAS threads (policy): the OpenBLAS we link (pthread build) keeps one
 * process-global thread count, so it cannot differ per device thread.
 * dev_devices_create sets it once, before the executor threads start, to
 * max(1, the fewest cores of any device of the set): L devices each running
 * a GEMM then use at most L * that many threads, never more than the cores
 * (when devices share cores each has 1 core, so BLAS runs single-threaded
 * on the calling executor thread, inside its cpuset). OpenBLAS's helper
 * threads themselves are not bound to a device's cpuset.
 *
 * No MPI here: the runtime builds its devices from these.
 */

enum { DEV_MAX_LOCAL_DEVICES = 1024 }; /* limit on L per process */

typedef struct DevTopology DevTopology; /* opaque: hwloc's topology, cached */

/* What hwloc sees for this process (`tessel devices` prints it). Strings
 * are owned by the topology. */
typedef struct DevTopologyInfo {
    const char *hwloc_version;  /* e.g. "2.9.0" */
    const char *cpuset;         /* the process's cpuset, hwloc list syntax ("0-1") */
    int32_t npackages;          /* packages, cores, PUs and NUMA nodes that */
    int32_t ncores;             /*   intersect the process's cpuset */
    int32_t npus;
    int32_t nnuma;
    uint64_t memory_bytes;      /* local memory of those NUMA nodes */
    bool this_system;           /* false: a synthetic or XML topology; nothing is bound */
    bool cpubind;               /* threads can be bound to CPUs here */
    bool membind;               /* memory can be allocated bound to a NUMA node here */
} DevTopologyInfo;

typedef struct DevDeviceImpl DevDeviceImpl; /* executor thread, hwloc sets */

/* One local device. Fields are read-only for users. */
typedef struct DevDevice {
    int32_t ordinal;            /* 0 .. L-1 within this process */
    const char *cpuset;         /* hwloc list syntax, e.g. "0-1" (owned by the set) */
    int32_t ncores;             /* cores its cpuset touches (PUs when hwloc has no cores) */
    int32_t npus;               /* PUs in its cpuset */
    int32_t numa_node;          /* OS index of its NUMA node; -1 when unknown */
    int32_t numa_index;         /* hwloc's logical index of that node; -1 when unknown */
    uint64_t memory_bytes;      /* local memory of that node; 0 when unknown */
    bool shares_cores;          /* another device of the set uses some of its cores */
    bool bound;                 /* its executor thread is bound to `cpuset` */
    int bind_errno;             /* !bound: errno of the failed binding; 0 if not tried */
    const char *bind_note;      /* !bound: why, in words (static); NULL when bound */
    DevTopology *topo;          /* borrowed */
    DevDeviceImpl *impl;
} DevDevice;

/* The L local devices of this process. */
typedef struct DevDevices {
    DevTopology *topo;          /* borrowed from dev_topology_load */
    int32_t n;                  /* L */
    DevDevice *dev;             /* dev[i].ordinal == i */
    bool shared_cores;          /* some devices share cores (L > cores) */
    int blas_threads;           /* OpenBLAS thread count set at creation; 0: left alone */
} DevDevices;

typedef struct DevDevicesOptions {
    bool no_bind;               /* leave executor threads unbound (bind_note says so) */
    bool keep_blas_threads;     /* do not touch OpenBLAS's thread count */
} DevDevicesOptions;

/* Work run on a device's executor thread. `d` is the job's own diag: the
 * first error it records reaches the caller of dev_device_wait. */
typedef IrStatus (*DevJob)(DevDevice *dev, void *arg, IrDiag *d);

/* Failure injection of hwloc calls: the Nth hwloc call that can fail, from
 * now on, fails (1 = the next one; 0 disables), as ts_fail_alloc_after does
 * for allocations. Thread-safe. dev_hw_call_count counts the calls that
 * can fail, so a test knows whether its injected failure was reached. */
void dev_hw_fail_after(long n);
long dev_hw_call_count(void);
/* The errno an injected failure sets (default ENOMEM; 0 restores it), so a
 * test can also play "binding not possible" (e.g. EXDEV). */
void dev_hw_fail_errno(int e);

/* The process's topology, loaded by the first call and cached (thread-safe);
 * later calls return the same one until dev_shutdown. Borrowed: never free
 * it. Fails with IR_ERUNTIME (hwloc could not load it) or IR_ENOMEM,
 * leaving nothing behind. Honours hwloc's environment (HWLOC_SYNTHETIC,
 * HWLOC_XMLFILE, ...). */
IrStatus dev_topology_load(DevTopology **out, IrDiag *d);
/* What the topology holds. Can't fail. */
const DevTopologyInfo *dev_topology_info(const DevTopology *t);

/* Divide the process's cpuset into L devices (see above), start one executor
 * thread per device, bind it (unless opt->no_bind) and wait until every
 * thread has tried; set OpenBLAS's thread count (the policy above) unless
 * opt->keep_blas_threads. `opt` may be NULL. On success *out is owned by the
 * caller (dev_devices_free). IR_EINPUT when L is outside 1..
 * DEV_MAX_LOCAL_DEVICES; IR_ERUNTIME when hwloc or thread creation fails;
 * IR_ENOMEM. On failure nothing is left behind. */
IrStatus dev_devices_create(DevTopology *t, int32_t L, const DevDevicesOptions *opt,
                            DevDevices **out, IrDiag *d);
/* Stop and join the executor threads (a job queued or running is run to
 * its end first; a result nobody collected is dropped) and free the set.
 * NULL is a no-op. Allocators of these devices stay cached. */
void dev_devices_free(DevDevices *set);

/* Queue fn(dev, arg) on the device's executor thread and return at once.
 * One job at a time per device: IR_EINTERNAL when a job is queued or its
 * result not yet collected. */
IrStatus dev_device_submit(DevDevice *dev, DevJob fn, void *arg, IrDiag *d);
/* Wait for the job submitted last and return its status; its diag moves
 * into `d` (when `d` holds no error yet; else it is dropped). IR_EINTERNAL
 * when nothing was submitted. */
IrStatus dev_device_wait(DevDevice *dev, IrDiag *d);
/* dev_device_submit then dev_device_wait. */
IrStatus dev_device_run(DevDevice *dev, DevJob fn, void *arg, IrDiag *d);
/* Run fn(dev[i], args ? args[i] : NULL) on every device at once and wait
 * for all; returns the first failure in ordinal order (its diag in d). */
IrStatus dev_devices_run_all(DevDevices *set, DevJob fn, void **args, IrDiag *d);

/* blas.c: OpenBLAS, loaded on first use (not linked: its constructor
 * starts a thread pool that spins, which processes that never execute must
 * not pay). The table of entry points is in device/blas.h (for the kernels
 * that call BLAS and LAPACK). dev_blas_error: why the library cannot be
 * loaded, or NULL once it is; loads it if not yet tried. Thread safe. */
const char *dev_blas_error(void);
/* Load OpenBLAS now (once per process), before anything is timed, in a
 * process that is about to execute: loading it (a few ms) and its
 * constructor then cost nothing inside the run's phases. Starts no BLAS
 * threads (a pool of one; dev_blas_set_threads raises it) when env_unset
 * (the caller saw OPENBLAS_NUM_THREADS unset: it is set for the load and
 * removed after); else leaves the environment alone. Cannot fail: a
 * library that cannot be loaded is reported by the kernels that need it. */
void dev_blas_preload(bool env_unset);
/* The f32 GEMM's library (blas_choice.c): DEV_SGEMM_PROBE times the
 * libraries present at the process's first large f32 GEMM (or before a
 * run: dev_blas_sgemm_prepare) and keeps the fastest;
 * the others fix one (a fixed BLIS or oneDNN that cannot be loaded makes
 * dev_blas_error say so). dev_blas_choose_sgemm: call before the library is
 * loaded (dev_blas_preload); only the first caller's word counts, later
 * ones are ignored. dev_blas_sgemm_verdict: a line saying what was chosen
 * and, when measured, the rates ("onednn, measured: openblas 96.1, ..."),
 * and where the program's first large GEMMs ran far slower than measured,
 * the library that took them over and why ("openblas, on the program's
 * calls: onednn, measured ...; onednn's first 3 calls ran 69.3 GFLOP/s
 * (0.35 of its probe), then ..."), at one BLAS thread a device each large
 * product shape's library and rates ("...; per product shape (M x K x N:
 * GFLOP/s in thread CPU time): 512x1024x2048 avx512 (onednn 141.2 avx512
 * 154.4), ..."), or that no f32 GEMM has run yet; a
 * static or thread-local string, stable once the first few large GEMMs
 * ran. Thread safe. */
enum {
    DEV_SGEMM_PROBE = 0, DEV_SGEMM_OPENBLAS = 1, DEV_SGEMM_BLIS = 2, DEV_SGEMM_ONEDNN = 3,
    DEV_SGEMM_AMX_BF16X3 = 4, /* AMX's bf16 tiles, three products (sgemm_amx.c): never the probe's pick */
    DEV_SGEMM_AVX512 = 5,     /* tessel's own AVX-512 kernel (sgemm_avx512.c), one thread a call */
};
void dev_blas_choose_sgemm(int lib);
const char *dev_blas_sgemm_verdict(void);
/* The library DevBlas.sgemm calls now (DEV_SGEMM_OPENBLAS, _BLIS, _ONEDNN,
 * _AVX512, or _AMX_BF16X3 where fixed so), DEV_SGEMM_PROBE while the probe's choice
 * is not yet measured or held against the program's calls; at one BLAS
 * thread a device the probe's own pick, which a product shape's choice
 * overrides (dev_blas_sgemm_shape_lib). Thread safe. */
int dev_blas_sgemm_current(void);
/* How many large product shapes the probe gave a library of their own (at
 * one BLAS thread a device each shape's first product times the probe's
 * two fastest on it: blas_shapes.c); 0 where the choice is fixed or none
 * was measured. Thread safe. */
int dev_blas_sgemm_shapes(void);
/* Under the probe, measure now (loading the library first) when the
 * program's largest f32 GEMM, largest_macs multiply-adds on one device, is
 * one the probe times for (256^3 or more) and the BLAS runs one thread:
 * before a run's clock starts, as dev_blas_preload. Otherwise nothing (the
 * first large product measures, as before). Thread safe. */
void dev_blas_sgemm_prepare(int64_t largest_macs);
/* After dev_blas_sgemm_prepare, under the probe at one BLAS thread: the
 * library for a product shape the program will run (row-major C[m,n] =
 * op(A) op(B), A transposed where ta, B where tb) chosen now, on operands
 * of its own, before a run's clock starts (blas_shapes.c), timed in the
 * form the program runs it: `kept`, B is a weight packed.c keeps packed
 * (each candidate's kept path); `devices` > 1, a second thread computes
 * the same product beside each timed call, as the other devices do.
 * Otherwise, for a shape under 256^3 multiply-adds or one already chosen,
 * nothing. Thread safe. */
void dev_blas_sgemm_prepare_shape(bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool kept, int devices);

/* BLAS threads. dev_blas_threads_for: the policy value for a set,
 * max(1, fewest cores of a device). dev_blas_set_threads: set OpenBLAS's
 * (process-global) thread count to max(1, n); a no-op when already n.
 * dev_blas_threads: the current count (1 when BLAS cannot be loaded: the
 * kernels then say so, and the setter does nothing). */
int dev_blas_threads_for(const DevDevices *set);
void dev_blas_set_threads(int n);
int dev_blas_threads(void);

/* The hwloc layer's memory calls, for alloc.c. dev_hw_alloc_bound:
 * `len` bytes (page aligned) bound strictly to NUMA node `numa_index`
 * (logical); NULL with errno set (ENOMEM, or why binding is impossible:
 * ENOSYS, EXDEV, ...). dev_hw_free_bound frees what it returned. */
void *dev_hw_alloc_bound(DevTopology *t, int32_t numa_index, size_t len);
void dev_hw_free_bound(DevTopology *t, void *p, size_t len);
/* The single NUMA node (OS index) the area [p, p+len) is bound to
 * (hwloc_get_area_membind, policy BIND), or -1 (another policy, several
 * nodes, or hwloc cannot tell). */
int32_t dev_hw_area_node(DevTopology *t, const void *p, size_t len);

/* Release the process cache: every allocator, then the topology. Refuses
 * (IR_EINTERNAL, nothing freed) while a device set or an allocated buffer
 * is alive. Afterwards dev_topology_load loads afresh. */
IrStatus dev_shutdown(IrDiag *d);

/* ------------------------------------------------------------------ */
/* alloc.c: allocators cached per (backend, device ordinal)            */
/* ------------------------------------------------------------------ */

/*
 * An allocator hands out a device's buffers: on its NUMA node when the
 * allocator was obtained for a device and hwloc can bind memory (else, or
 * when binding fails, plain ts_malloc memory, and its stats say why).
 * Allocators are created on demand, cached per (backend name, ordinal) for
 * the life of the process (dev_shutdown frees them) and thread-safe.
 * Every allocation counts against ts_fail_alloc_after (bound ones too),
 * and bound ones against dev_hw_fail_after as well (a kept buffer reused
 * against neither). Buffers are 64-byte aligned.
 *
 * Freed buffers of DEV_KEEP_MIN bytes and more are kept for reuse, not
 * unmapped (fresh pages cost a fault and the kernel's zeroing each): a
 * request its allocator gets later, on the same NUMA binding, that a kept
 * buffer holds with at most an eighth to spare takes it. Live and kept
 * bytes together stay within the most bytes the allocator ever had live
 * (peak_bytes); the oldest kept go back to the system first, all of them
 * at dev_alloc_trim and dev_shutdown. Under AddressSanitizer kept buffers
 * are poisoned (a use after free is reported).
 */

/* Freed buffers smaller than this go back at once (malloc reuses them). */
#define DEV_KEEP_MIN ((int64_t)256 << 10)

typedef struct DevAllocator DevAllocator;

typedef struct DevAllocStats {
    int64_t nallocs;            /* successful allocations */
    int64_t nfailed;            /* refused (out of memory, injected) */
    int64_t nbound;             /* of nallocs, NUMA-bound */
    int64_t nlive;              /* buffers not yet freed */
    int64_t live_bytes;         /* their requested bytes */
    int64_t peak_bytes;         /* most live_bytes ever */
    /* Freed buffers kept for reuse (of DEV_KEEP_MIN bytes and more; not
     * live, not in live_bytes): how many, the bytes they can hold, and
     * how many of nallocs one served. */
    int64_t nkept;
    int64_t kept_bytes;
    int64_t nreused;
    /* The values counted against the device (DevValue.charged), every
     * size, wherever their buffers came from: what the device holds, the
     * figure the memory estimate predicts (partition/memory.c). */
    int64_t value_bytes;        /* now */
    int64_t value_peak;         /* most value_bytes since dev_alloc_reset_peak */
    int32_t numa_node;          /* OS index of the node it binds to; -1 none */
    bool membind;               /* new allocations are bound to numa_node */
    int membind_errno;          /* binding was wanted but fell back: why (errno); else 0 */
} DevAllocStats;

/* The allocator of (backend, ordinal), created on first use (unbound). The
 * pointer stays valid until dev_shutdown. IR_EINPUT for a NULL/empty backend
 * or a negative ordinal; IR_ENOMEM. */
IrStatus dev_allocator_get(const char *backend, int32_t ordinal, DevAllocator **out,
                           IrDiag *d);
/* The allocator of (backend, dev->ordinal), created on first use; it binds
 * new allocations to dev's NUMA node (re-pointed there if it was created
 * for another node or unbound). Fails as dev_allocator_get. */
IrStatus dev_device_allocator(const DevDevice *dev, const char *backend, DevAllocator **out,
                              IrDiag *d);
/* `n` bytes, 64-byte aligned, uninitialised; dev_alloc(a, 0) is a unique
 * pointer. NULL when memory is refused or n is too large. */
void *dev_alloc(DevAllocator *a, size_t n);
/* Free a buffer from dev_alloc (whichever allocator): kept for reuse, or
 * given back; NULL is a no-op. Thread-safe. */
void dev_alloc_free(void *p);
/* Give every buffer `a` keeps for reuse back to the system. */
void dev_alloc_trim(DevAllocator *a);
void dev_allocator_stats(DevAllocator *a, DevAllocStats *out);
/* Count delta bytes of values against a (negative: released); the
 * high-water mark follows. Lock-free; a NULL a is a no-op. */
void dev_alloc_charge(DevAllocator *a, int64_t delta);
/* Start a new high-water mark of a's values at what it holds now. */
void dev_alloc_reset_peak(DevAllocator *a);
/* The allocator this thread's large tensors come from: a device's
 * executor sets its own (the runtime, before running the device's
 * program; NULL: ts_malloc memory, first touch). Values of at least
 * DEV_BOUND_MIN bytes created on the thread then live on the device's
 * NUMA node; smaller ones stay with malloc (an mmap per small buffer
 * would cost more than their placement gains, and malloc's arena of a
 * bound thread is first touched on its node anyway). */
#define DEV_BOUND_MIN ((int64_t)256 << 10)
void dev_alloc_use(DevAllocator *a);
DevAllocator *dev_alloc_current(void);
/* Does `a` bind new allocations to a NUMA node (not fallen back)? */
bool dev_alloc_binds(DevAllocator *a);
/* The NUMA node (OS index) hwloc reports the pages of buffer p (from
 * dev_alloc, n bytes) bound to, or -1 when they are not bound (plain
 * memory, or hwloc cannot tell). For tests and --stats. */
int32_t dev_alloc_node_of(const void *p, size_t n);
/* For dev_shutdown: free every cached allocator. IR_EINTERNAL (nothing
 * freed) when one still has live buffers. */
IrStatus dev_allocators_release(IrDiag *d);

#endif /* TESSEL_DEVICE_H */
