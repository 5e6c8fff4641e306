/*
 * mpi.c: one MPI rank per host. The transport local.c's leader devices use
 * (all-gather, all-reduce over MPI_COMM_WORLD), agreement on failures
 * before anything blocks, gathering the outputs' shards to rank 0, and
 * statistics across ranks.
 *
 * Every MPI call's result is checked (the communicator's error handler is
 * MPI_ERRORS_RETURN); a failed call is an IR_ERUNTIME naming the call.
 * Thread level: the host's leader device thread makes the MPI calls while
 * the main thread waits, so MPI_THREAD_SERIALIZED is what is needed.
 */
#include "transport.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct RtTransport {
    MPI_Comm comm;
    int rank, size;
    MPI_Datatype half;       /* 2-byte elements (f16, bf16) for user ops */
    MPI_Op user[2][4];       /* [f16|bf16][add, mul, max, min] */
    MPI_Op fmax, fmin;       /* NaN-propagating max/min for f32/f64 */
};

static IrStatus mpi_fail(IrDiag *d, int rc, const char *call, int rank)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: %s failed: %s", rank, call, msg);
}

#define MPI_TRY(d, t, call)                                                   \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != MPI_SUCCESS)                                               \
            return mpi_fail((d), rc_, #call, (t)->rank);                     \
    } while (0)

bool rt_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* ---- user-defined reductions ---- */

static bool g_bf16; /* which 2-byte type the next call is about: set per call (serialized) */

static float half_load(const void *p, int64_t i)
{
    uint16_t h = ((const uint16_t *)p)[i];
    return g_bf16 ? dev_bf16_to_f32(h) : dev_f16_to_f32(h);
}

static void half_store(void *p, int64_t i, float v)
{
    ((uint16_t *)p)[i] = g_bf16 ? dev_f32_to_bf16(v) : dev_f32_to_f16(v);
}

static float fmaxn(float a, float b) { return a != a ? a : b != b ? b : (a > b ? a : b); }
static float fminn(float a, float b) { return a != a ? a : b != b ? b : (a < b ? a : b); }

#define HALF_OP(NAME, EXPR)                                                   \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)       \
    {                                                                         \
        (void)dt;                                                             \
        for (int i = 0; i < *len; i++) {                                      \
            float a = half_load(inout, i), b = half_load(in, i);              \
            half_store(inout, i, (EXPR));                                     \
        }                                                                     \
    }
HALF_OP(half_add, a + b)
HALF_OP(half_mul, a * b)
HALF_OP(half_max, fmaxn(a, b))
HALF_OP(half_min, fminn(a, b))

#define FLOAT_OP(NAME, PICK)                                                  \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)       \
    {                                                                         \
        if (*dt == MPI_DOUBLE) {                                              \
            double *o = inout;                                                \
            const double *x = in;                                             \
            for (int i = 0; i < *len; i++) {                                  \
                double a = o[i], b = x[i];                                    \
                o[i] = a != a ? a : b != b ? b : (PICK);                      \
            }                                                                 \
        } else {                                                              \
            float *o = inout;                                                 \
            const float *x = in;                                              \
            for (int i = 0; i < *len; i++) {                                  \
                float a = o[i], b = x[i];                                     \
                o[i] = a != a ? a : b != b ? b : (PICK);                      \
            }                                                                 \
        }                                                                     \
    }
FLOAT_OP(float_max, a > b ? a : b)
FLOAT_OP(float_min, a < b ? a : b)

IrStatus rt_mpi_init(int *argc, char ***argv, RtTransport **out, IrDiag *d)
{
    *out = NULL;
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "MPI_Init_thread failed");
    RtTransport *t = ts_calloc(1, sizeof *t);
    if (!t)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    t->comm = MPI_COMM_WORLD;
    *out = t;
    MPI_TRY(d, t, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_TRY(d, t, MPI_Comm_rank(t->comm, &t->rank));
    MPI_TRY(d, t, MPI_Comm_size(t->comm, &t->size));
    if (provided < MPI_THREAD_SERIALIZED)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "rank %d: MPI provides thread level %d; tessel needs MPI_THREAD_SERIALIZED", t->rank,
                        provided);
    MPI_TRY(d, t, MPI_Type_contiguous(2, MPI_BYTE, &t->half));
    MPI_TRY(d, t, MPI_Type_commit(&t->half));
    MPI_User_function *hf[4] = {half_add, half_mul, half_max, half_min};
    for (int k = 0; k < 4; k++)
        MPI_TRY(d, t, MPI_Op_create(hf[k], 1, &t->user[0][k]));
    MPI_TRY(d, t, MPI_Op_create(float_max, 1, &t->fmax));
    MPI_TRY(d, t, MPI_Op_create(float_min, 1, &t->fmin));
    return IR_OK;
}

int rt_mpi_rank(const RtTransport *t)
{
    return t->rank;
}

int rt_mpi_size(const RtTransport *t)
{
    return t->size;
}

void rt_mpi_finalize(RtTransport *t)
{
    if (!t)
        return;
    for (int k = 0; k < 4; k++)
        if (t->user[0][k])
            MPI_Op_free(&t->user[0][k]);
    if (t->fmax)
        MPI_Op_free(&t->fmax);
    if (t->fmin)
        MPI_Op_free(&t->fmin);
    if (t->half)
        MPI_Type_free(&t->half);
    ts_free(t);
    MPI_Finalize();
}

/* ---- the transport ---- */

IrStatus rt_transport_allgather(RtTransport *t, const void *send, size_t bytes, void *recv, IrDiag *d)
{
    if (bytes > INT_MAX)
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                        "rank %d: a collective moves %zu bytes per host; at most 2 GiB are supported", t->rank,
                        bytes);
    MPI_TRY(d, t, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, t->comm));
    return IR_OK;
}

/* The MPI datatype and op for a simple reducer on type ty. */
static bool mpi_op_for(RtTransport *t, IrType ty, IrOpcode op, MPI_Datatype *dt, MPI_Op *mop)
{
    int k = op == OP_ADD ? 0 : op == OP_MULTIPLY ? 1 : op == OP_MAXIMUM ? 2 : op == OP_MINIMUM ? 3 : -1;
    if (ty == IR_F16 || ty == IR_BF16) {
        if (k < 0)
            return false;
        g_bf16 = ty == IR_BF16;
        *dt = t->half;
        *mop = t->user[0][k];
        return true;
    }
    static const MPI_Datatype none = MPI_DATATYPE_NULL;
    MPI_Datatype map[IR_NTYPES];
    for (int i = 0; i < IR_NTYPES; i++)
        map[i] = none;
    map[IR_PRED] = MPI_UINT8_T;
    map[IR_S8] = MPI_INT8_T;
    map[IR_S16] = MPI_INT16_T;
    map[IR_S32] = MPI_INT32_T;
    map[IR_S64] = MPI_INT64_T;
    map[IR_U8] = MPI_UINT8_T;
    map[IR_U16] = MPI_UINT16_T;
    map[IR_U32] = MPI_UINT32_T;
    map[IR_U64] = MPI_UINT64_T;
    map[IR_F32] = MPI_FLOAT;
    map[IR_F64] = MPI_DOUBLE;
    if (ty <= IR_INVALID || ty >= IR_NTYPES || map[ty] == none)
        return false;
    *dt = map[ty];
    bool fl = ir_type_is_float(ty);
    switch (op) {
    case OP_ADD: *mop = MPI_SUM; break;
    case OP_MULTIPLY: *mop = MPI_PROD; break;
    case OP_MAXIMUM: *mop = fl ? t->fmax : MPI_MAX; break;
    case OP_MINIMUM: *mop = fl ? t->fmin : MPI_MIN; break;
    case OP_AND: *mop = MPI_BAND; break;
    case OP_OR: *mop = MPI_BOR; break;
    case OP_XOR: *mop = MPI_BXOR; break;
    default: return false;
    }
    return !(fl && (op == OP_AND || op == OP_OR || op == OP_XOR));
}

IrStatus rt_transport_allreduce(RtTransport *t, void *buf, int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    MPI_Datatype dt;
    MPI_Op mop;
    if (!mpi_op_for(t, ty, op, &dt, &mop))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    if (count > INT_MAX)
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                        "rank %d: all-reduce of %lld elements; at most 2^31-1 are supported", t->rank,
                        (long long)count);
    MPI_TRY(d, t, MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, mop, t->comm));
    return IR_OK;
}

void rt_transport_abort(RtTransport *t, const char *msg)
{
    if (msg)
        fprintf(stderr, "%s", msg);
    fflush(stderr);
    MPI_Abort(t ? t->comm : MPI_COMM_WORLD, 1);
}

/* ---- agreement, outputs, statistics ---- */

int rt_mpi_agree(RtTransport *t, bool ok)
{
    int mine = ok ? INT_MAX : t->rank, first = INT_MAX;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, t->comm) != MPI_SUCCESS)
        return t->rank; /* cannot agree: treat as a failure here */
    return first == INT_MAX ? -1 : first;
}

int rt_mpi_max(RtTransport *t, int value)
{
    int out = value;
    if (MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, t->comm) != MPI_SUCCESS)
        return value;
    return out;
}

IrStatus rt_mpi_gather_results(RtTransport *t, const RtCompiled *c, int64_t nlocal, DevValue **local,
                               DevValue **out, IrDiag *d)
{
    *out = NULL;
    /* Every device's root has the same per-device shape (one program):
     * serialize its leaves, gather all devices at rank 0. */
    const IrShape *ds = &local[0]->shape;
    int32_t nleaf = ir_shape_leaf_count(ds);
    size_t b = 0;
    for (int32_t l = 0; l < nleaf; l++)
        b += (size_t)dev_value_leaf(local[0], l)->nbytes;
    if (b * (size_t)nlocal > INT_MAX)
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: outputs over 2 GiB per host", t->rank);
    uint8_t *send = ts_malloc(b * (size_t)nlocal + 1);
    uint8_t *recv = t->rank == 0 ? ts_malloc(b * (size_t)nlocal * (size_t)t->size + 1) : NULL;
    if (!send || (t->rank == 0 && !recv)) {
        ts_free(send);
        ts_free(recv);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    size_t o = 0;
    for (int64_t k = 0; k < nlocal; k++)
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(local[k], l);
            if (v->nbytes)
                memcpy(send + o, v->data, (size_t)v->nbytes);
            o += (size_t)v->nbytes;
        }
    int rc = MPI_Gather(send, (int)(b * (size_t)nlocal), MPI_BYTE, recv, (int)(b * (size_t)nlocal), MPI_BYTE, 0, t->comm);
    ts_free(send);
    if (rc != MPI_SUCCESS) {
        ts_free(recv);
        return mpi_fail(d, rc, "MPI_Gather", t->rank);
    }
    if (t->rank != 0)
        return IR_OK;
    /* Rebuild partition p's root (replica 0) from device p's bytes. */
    int64_t n = c->num_partitions;
    DevValue **parts = ts_calloc((size_t)n, sizeof *parts);
    IrStatus st = parts ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int64_t p = 0; st == IR_OK && p < n; p++) {
        parts[p] = dev_value_clone(local[0]);
        if (!parts[p]) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        size_t off = (size_t)p * b;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(parts[p], l);
            if (v->nbytes)
                memcpy(v->data, recv + off, (size_t)v->nbytes);
            off += (size_t)v->nbytes;
        }
    }
    if (st == IR_OK)
        st = rt_unshard_value(&c->out_shape, rt_root_sharding(c), n, parts, out, d);
    for (int64_t p = 0; parts && p < n; p++)
        dev_value_unref(parts[p]);
    ts_free(parts);
    ts_free(recv);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bool rt_mpi_phase_stats(RtTransport *t, const double *mine, int nphase, double *min, double *median, double *max)
{
    double *all = t->rank == 0 ? ts_malloc((size_t)nphase * (size_t)t->size * sizeof(double)) : NULL;
    if (t->rank == 0 && !all)
        return false;
    int rc = MPI_Gather((void *)mine, nphase, MPI_DOUBLE, all, nphase, MPI_DOUBLE, 0, t->comm);
    if (rc != MPI_SUCCESS || t->rank != 0) {
        ts_free(all);
        return rc == MPI_SUCCESS;
    }
    double *col = ts_malloc((size_t)t->size * sizeof(double));
    if (!col) {
        ts_free(all);
        return false;
    }
    for (int k = 0; k < nphase; k++) {
        for (int r = 0; r < t->size; r++)
            col[r] = all[r * nphase + k];
        qsort(col, (size_t)t->size, sizeof(double), cmp_double);
        min[k] = col[0];
        max[k] = col[t->size - 1];
        median[k] = t->size % 2 ? col[t->size / 2] : (col[t->size / 2 - 1] + col[t->size / 2]) / 2;
    }
    ts_free(col);
    ts_free(all);
    return true;
}
