/*
 * reducer.c: the algebra of the simple reducers (add, multiply, maximum,
 * minimum, and, or, xor: what ir_simple_reducer recognises), written once
 * for the reduce kernels (k_reduce.c), the in-process collectives
 * (runtime/local.c) and the MPI user operations (coll/mpi_world.c), so that a
 * partitioned run combines exactly as the reference does.
 *
 * Values are combined in a 64-bit domain picked from the element type:
 *   floats (f16, bf16, f8, f32, f64) -> double; signed ints -> int64;
 *   unsigned ints -> uint64; pred -> 0/1.
 * Rules (XLA's) and the arithmetic itself: arith.h, whose lists
 * (DEV_FLOAT_REDUCERS, DEV_WRAP_REDUCERS, DEV_ORDER_REDUCERS) expand into
 * the switches below; pred folds through dev_red_canonical (add = maximum
 * = or, multiply = minimum = and).
 * f32 and f16/bf16 combined in double and rounded to the type each step
 * give the same bits as combining in the type (or in f32) and rounding:
 * a double holds every sum and product of two such values closely enough
 * that the second rounding never changes the result.
 */
#include "device.h"

#include <assert.h>
#include <math.h>

#include "arith.h"
#include "float_ops.h"

/* The domain of element type t; false for types without a fast path. */
bool dev_red_dom(IrType t, DevRedDom *d)
{
    if (ir_type_is_float(t))
        *d = DEV_RED_F;
    else if (ir_type_is_signed_int(t))
        *d = DEV_RED_S;
    else if (ir_type_is_unsigned_int(t))
        *d = DEV_RED_U;
    else if (t == IR_PRED)
        *d = DEV_RED_P;
    else
        return false;
    return true;
}

/* Does the fast path implement reducer `op` in domain d? */
bool dev_red_has(DevRedDom d, IrOpcode op)
{
    if (!ir_op_is_reducer(op))
        return false;
    return d != DEV_RED_F || !(op == OP_AND || op == OP_OR || op == OP_XOR); /* bitwise: no floats */
}

DevAcc dev_acc_load(DevRedDom d, IrType t, const void *base, int64_t i)
{
    DevAcc a = {.u = 0};
    switch (d) {
    case DEV_RED_F: a.f = dev_load_f64(t, base, i); break;
    case DEV_RED_S: a.s = dev_load_i64(t, base, i); break;
    case DEV_RED_U: a.u = dev_load_u64(t, base, i); break;
    case DEV_RED_P: a.u = dev_load_u64(t, base, i) != 0; break;
    }
    return a;
}

void dev_acc_store(DevRedDom d, IrType t, void *base, int64_t i, DevAcc a)
{
    switch (d) {
    case DEV_RED_F: dev_store_f64(t, base, i, a.f); break;
    case DEV_RED_S: dev_store_i64(t, base, i, a.s); break;
    case DEV_RED_U: case DEV_RED_P: dev_store_u64(t, base, i, a.u); break;
    }
}

/* The store loops of the float domain into f32 and f64, apart so they
 * vectorize: a column reduce's outputs (moe's [1024,768] sum over its
 * experts) went one dev_acc_store call and type switch an element, more
 * time than the fold itself. */
DEV_VECTOR_CLONES static void store_run_f32(float *restrict out, const DevAcc *restrict acc, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)acc[i].f;
}

DEV_VECTOR_CLONES static void store_run_f64(double *restrict out, const DevAcc *restrict acc, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = acc[i].f;
}

void dev_acc_store_run(DevRedDom d, IrType t, void *base, const DevAcc *acc, int64_t n)
{
    if (d == DEV_RED_F && t == IR_F32)
        store_run_f32(base, acc, n);
    else if (d == DEV_RED_F && t == IR_F64)
        store_run_f64(base, acc, n);
    else
        for (int64_t i = 0; i < n; i++)
            dev_acc_store(d, t, base, i, acc[i]);
}

DevAcc dev_red_combine(DevRedDom d, IrOpcode op, DevAcc a, DevAcc b)
{
    assert(dev_red_has(d, op)); /* callers ask dev_red_has first */
    DevAcc r = a;
#define CASE(FIELD, OPC, F) case OPC: r.FIELD = F(a.FIELD, b.FIELD); break;
#define CASE_F(OPC, F) CASE(f, OPC, F)
#define CASE_U(OPC, F) CASE(u, OPC, F)
#define CASE_S(OPC, F) CASE(s, OPC, F)
    if (d == DEV_RED_F) {
        switch (op) {
            DEV_FLOAT_REDUCERS(CASE_F)
        default: break;
        }
        return r;
    }
    if (d == DEV_RED_P)
        op = dev_red_canonical(IR_PRED, op);
    switch (op) {
        DEV_WRAP_REDUCERS(CASE_U) /* wraps: unsigned arithmetic */
    default: break;
    }
    if (d == DEV_RED_S) {
        switch (op) {
            DEV_ORDER_REDUCERS(CASE_S)
        default: break;
        }
    } else if (d == DEV_RED_U) {
        switch (op) {
            DEV_ORDER_REDUCERS(CASE_U)
        default: break;
        }
    }
#undef CASE_S
#undef CASE_U
#undef CASE_F
#undef CASE
    return r;
}

/* Load n consecutive elements of base (type t) from i0 into x. One switch
 * per run keeps the inner loops tight. */
void dev_red_load_run(DevRedDom d, IrType t, const uint8_t *base, int64_t i0, int64_t n, DevAcc *x)
{
#define RUN(FIELD, T, EXPR)                     \
    do {                                        \
        const T *p = (const T *)base + i0;      \
        for (int64_t j = 0; j < n; j++)         \
            x[j].FIELD = EXPR;                  \
    } while (0)
    switch (t) {
    case IR_F32: RUN(f, float, p[j]); return;
    case IR_F64: RUN(f, double, p[j]); return;
    case IR_F16: RUN(f, uint16_t, dev_f16_to_f32(p[j])); return;
    case IR_BF16: RUN(f, uint16_t, dev_bf16_to_f32(p[j])); return;
    case IR_S8: RUN(s, int8_t, p[j]); return;
    case IR_S16: RUN(s, int16_t, p[j]); return;
    case IR_S32: RUN(s, int32_t, p[j]); return;
    case IR_S64: RUN(s, int64_t, p[j]); return;
    case IR_U8: RUN(u, uint8_t, p[j]); return;
    case IR_U16: RUN(u, uint16_t, p[j]); return;
    case IR_U32: RUN(u, uint32_t, p[j]); return;
    case IR_U64: RUN(u, uint64_t, p[j]); return;
    case IR_PRED: RUN(u, uint8_t, p[j] != 0); return;
    default:
        for (int64_t j = 0; j < n; j++)
            x[j] = dev_acc_load(d, t, base, i0 + j);
        return;
    }
#undef RUN
}

/* acc[j] = op(acc[j], x[j]) for j < n: element-wise into a run of
 * accumulators. One switch per run; the loops are tight. */
static void fold_into(DevRedDom d, IrOpcode op, DevAcc *restrict acc, const DevAcc *restrict x, int64_t n)
{
#define INTO(FIELD, EXPR)                   \
    for (int64_t j = 0; j < n; j++)         \
        acc[j].FIELD = EXPR;                \
    return
#define INTO_F(OPC, F) case OPC: INTO(f, F(acc[j].f, x[j].f));
#define INTO_U(OPC, F) case OPC: INTO(u, F(acc[j].u, x[j].u));
    if (d == DEV_RED_F) {
        switch (op) {
            DEV_FLOAT_REDUCERS(INTO_F)
        default: break;
        }
    } else if (d != DEV_RED_P) {
        switch (op) {
            DEV_WRAP_REDUCERS(INTO_U)
        default: break;
        }
    }
#undef INTO_U
#undef INTO_F
#undef INTO
    for (int64_t j = 0; j < n; j++)
        acc[j] = dev_red_combine(d, op, acc[j], x[j]);
}

/* a = op(...op(op(a, x[0]), x[1])..., x[n-1]): a run folded in order into
 * one accumulator, kept in a register. */
DevAcc dev_red_fold_one(DevRedDom d, IrOpcode op, DevAcc a, const DevAcc *x, int64_t n)
{
#define ONE(FIELD, EXPR)                    \
    do {                                    \
        for (int64_t j = 0; j < n; j++)     \
            a.FIELD = EXPR;                 \
        return a;                           \
    } while (0)
#define ONE_F(OPC, F) case OPC: ONE(f, F(a.f, x[j].f));
#define ONE_U(OPC, F) case OPC: ONE(u, F(a.u, x[j].u));
    if (d == DEV_RED_F) {
        switch (op) {
            DEV_FLOAT_REDUCERS(ONE_F)
        default: break;
        }
    } else if (d != DEV_RED_P) {
        switch (op) {
            DEV_WRAP_REDUCERS(ONE_U)
        default: break;
        }
    }
#undef ONE_U
#undef ONE_F
#undef ONE
    for (int64_t j = 0; j < n; j++)
        a = dev_red_combine(d, op, a, x[j]);
    return a;
}

/* acc[j * astride] = op(acc[j * astride], x[j]) for j < n; astride 0 folds
 * the whole run into acc[0] in order. */
void dev_red_fold_run(DevRedDom d, IrOpcode op, DevAcc *acc, int64_t astride, const DevAcc *x, int64_t n)
{
    assert(dev_red_has(d, op) && n >= 0);
    if (astride == 0)
        *acc = dev_red_fold_one(d, op, *acc, x, n);
    else
        fold_into(d, op, acc, x, n);
}

/* Columns a block of the column folds: their accumulators are copied to a
 * double array on the stack (the vector loops need plain doubles, not
 * DevAcc's union) and back. */
enum { COLS_CHUNK = 256 };

/* The float column folds: a[j] = op(a[j], x[r * stride + j]) for rows
 * r < rows in order, j < n <= COLS_CHUNK, one loop per reducer and element
 * type, compiled for the vector width at hand. */
#define FLOAT_COLS(NAME, T)                                                                       \
    DEV_VECTOR_CLONES static bool NAME(IrOpcode op, const T *restrict x, int64_t stride, int64_t rows, \
                                       int64_t n, double *restrict a)                             \
    {                                                                                             \
        switch (op) {                                                                             \
            DEV_FLOAT_REDUCERS(COLS_CASE)                                                         \
        default: return false;                                                                    \
        }                                                                                         \
    }
#define COLS_CASE(OPC, F)                              \
    case OPC:                                          \
        for (int64_t r = 0; r < rows; r++, x += stride) \
            for (int64_t j = 0; j < n; j++)            \
                a[j] = F(a[j], (double)x[j]);          \
        return true;
FLOAT_COLS(cols_f32, float)
FLOAT_COLS(cols_f64, double)
#undef COLS_CASE
#undef FLOAT_COLS

/* dev_red_fold_cols for f32 and f64 floats; false (nothing done) for
 * other types and reducers. */
static bool fold_cols_float(IrOpcode op, IrType t, const uint8_t *base, int64_t i0, int64_t rows, int64_t n,
                            DevAcc *acc)
{
    if (t != IR_F32 && t != IR_F64)
        return false;
    double a[COLS_CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += COLS_CHUNK) {
        int64_t len = n - j0 < COLS_CHUNK ? n - j0 : COLS_CHUNK;
        for (int64_t j = 0; j < len; j++)
            a[j] = acc[j0 + j].f;
        bool ok = t == IR_F32 ? cols_f32(op, (const float *)base + i0 + j0, n, rows, len, a)
                              : cols_f64(op, (const double *)base + i0 + j0, n, rows, len, a);
        if (!ok)
            return false;
        for (int64_t j = 0; j < len; j++)
            acc[j0 + j].f = a[j];
    }
    return true;
}

void dev_red_fold_cols(DevRedDom d, IrOpcode op, IrType t, const uint8_t *base, int64_t i0, int64_t rows,
                       int64_t n, DevAcc *acc)
{
    assert(dev_red_has(d, op) && rows >= 0 && n >= 0);
    if (d == DEV_RED_F && fold_cols_float(op, t, base, i0, rows, n, acc))
        return;
    DevAcc x[COLS_CHUNK];
    for (int64_t r = 0; r < rows; r++, i0 += n)
        for (int64_t j = 0; j < n; j += COLS_CHUNK) {
            int64_t len = n - j < COLS_CHUNK ? n - j : COLS_CHUNK;
            dev_red_load_run(d, t, base, i0 + j, len, x);
            fold_into(d, op, acc + j, x, len);
        }
}

/* Floating reductions of a run in LANES interleaved partial results
 * (double), combined in lane order after the init: lane j folds elements
 * j, j + LANES, j + 2 LANES, ... and the tail after the last full round
 * goes to the total. One sequential accumulator waits on every add (4
 * cycles each: 16 us for a row of 4096, and softmax's denominators over
 * a [12,512,512] score array took 3% of a transformer's training step);
 * LANES of them fill a vector register and the fold costs about one cycle
 * per LANES elements. The order differs from element order, so sums may
 * differ from a sequential fold in the last bits of the double before
 * rounding: within the oracle's tolerance, and nearly always the same
 * f32. max and min give the same value either way (up to the sign of a
 * zero, and which NaN). */
#define LANES 8

#define LANE_FOLD(NAME, T, EXPR)                                                 \
    DEV_VECTOR_CLONES static double NAME(const T *x, int64_t n, double init)     \
    {                                                                            \
        double a = init, b, acc[LANES];                                          \
        int64_t i = 0;                                                           \
        if (n >= 2 * LANES) {                                                    \
            for (int32_t j = 0; j < LANES; j++)                                  \
                acc[j] = x[j];                                                   \
            for (i = LANES; i + LANES <= n; i += LANES)                          \
                for (int32_t j = 0; j < LANES; j++) {                            \
                    double p = acc[j], q = x[i + j];                             \
                    acc[j] = EXPR(p, q);                                         \
                }                                                                \
            for (int32_t j = 0; j < LANES; j++) {                                \
                b = acc[j];                                                      \
                a = EXPR(a, b);                                                  \
            }                                                                    \
        }                                                                        \
        for (; i < n; i++) {                                                     \
            b = x[i];                                                            \
            a = EXPR(a, b);                                                      \
        }                                                                        \
        return a;                                                                \
    }
/* One fold per floating reducer of arith.h and type: lanes_<F>_f32/_f64. */
#define LANE_FOLDS(OPC, F)               \
    LANE_FOLD(lanes_##F##_f32, float, F) \
    LANE_FOLD(lanes_##F##_f64, double, F)
DEV_FLOAT_REDUCERS(LANE_FOLDS)
#undef LANE_FOLDS
#undef LANE_FOLD

bool dev_red_fold_lanes(IrOpcode op, IrType t, const uint8_t *base, int64_t i0, int64_t n, double *acc)
{
#define PICK(F32, F64) (t == IR_F32 ? F32((const float *)(const void *)base + i0, n, *acc) \
                                    : F64((const double *)(const void *)base + i0, n, *acc))
    if (t != IR_F32 && t != IR_F64)
        return false;
#define CASE(OPC, F) case OPC: *acc = PICK(lanes_##F##_f32, lanes_##F##_f64); return true;
    switch (op) {
        DEV_FLOAT_REDUCERS(CASE)
    default: return false;
    }
#undef CASE
#undef PICK
}

DevAcc dev_red_identity(DevRedDom d, IrType t, IrOpcode op)
{
    DevAcc r = {.u = 0};
    switch (d) {
    case DEV_RED_F: r.f = ir_identity_float(op); break;
    case DEV_RED_S: r.s = ir_identity_signed(op, ir_type_bits(t)); break;
    case DEV_RED_U: r.u = ir_identity_unsigned(op, ir_type_bits(t)); break;
    case DEV_RED_P: r.u = op == OP_MULTIPLY || op == OP_MINIMUM || op == OP_AND; break;
    }
    return r;
}

IrOpcode dev_red_canonical(IrType t, IrOpcode op)
{
    if (t != IR_PRED)
        return op;
    return op == OP_ADD || op == OP_MAXIMUM ? OP_OR : op == OP_MULTIPLY || op == OP_MINIMUM ? OP_AND : op;
}

/* Elements a chunk: the accumulators live on the stack. */
enum { RED_CHUNK = 256 };

bool dev_red_combine_array(IrOpcode op, IrType t, void *out, const void *in, int64_t n)
{
    DevRedDom d;
    if (!dev_red_dom(t, &d) || !dev_red_has(d, op))
        return false;
    DevAcc acc[RED_CHUNK], x[RED_CHUNK];
    for (int64_t i = 0; i < n; i += RED_CHUNK) {
        int64_t len = n - i < RED_CHUNK ? n - i : RED_CHUNK;
        dev_red_load_run(d, t, out, i, len, acc);
        dev_red_load_run(d, t, in, i, len, x);
        dev_red_fold_run(d, op, acc, 1, x, len);
        for (int64_t j = 0; j < len; j++)
            dev_acc_store(d, t, out, i + j, acc[j]);
    }
    return true;
}

bool dev_red_fill_identity(IrOpcode op, IrType t, void *buf, int64_t n)
{
    DevRedDom d;
    if (!dev_red_dom(t, &d) || !dev_red_has(d, op))
        return false;
    DevAcc id = dev_red_identity(d, t, op);
    for (int64_t i = 0; i < n; i++)
        dev_acc_store(d, t, buf, i, id);
    return true;
}
