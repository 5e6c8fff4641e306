/*
 * mpi.c: one MPI rank per host. The transport local.c's leader devices use
 * (all-gather, all-reduce over MPI_COMM_WORLD), agreement on failures
 * before anything blocks, gathering the outputs' shards to rank 0, and
 * statistics across ranks.
 *
 * Every MPI call goes through the thin layer of mpi_layer.h (so a test can
 * make the Nth one fail) and its result is checked (the communicator's
 * error handler is MPI_ERRORS_RETURN); a failed call is an IR_ERUNTIME
 * naming the rank and the MPI function ("rank 1: MPI_Gather failed: ...").
 *
 * A collective that fails on one rank leaves its peers waiting in it (or
 * in the next one): the job cannot go on. The functions here that return a
 * status leave ending the job to their caller (rt_transport_abort, as
 * `tessel run` does after a failed run or gather); the agreement functions,
 * whose whole point is that every rank leaves them knowing the same thing,
 * end the job themselves when they cannot agree.
 *
 * Thread level: the host's leader device thread makes the MPI calls while
 * the main thread waits, so MPI_THREAD_SERIALIZED is what is needed.
 */
#include "mpi_layer.h"
#include "transport.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct RtTransport {
    MPI_Comm comm;           /* tessel's duplicate of the caller's communicator */
    MPI_Comm abort_comm;     /* what MPI_Abort ends: comm, or the caller's before the dup exists */
    bool owns_mpi;           /* rt_mpi_init initialised MPI: rt_mpi_end finalizes it */
    int rank, size;
    MPI_Datatype half;       /* 2-byte elements (f16, bf16) for user ops */
    MPI_Op user[2][4];       /* [f16|bf16][add, mul, max, min] */
    MPI_Op fmax, fmin;       /* NaN-propagating max/min for f32/f64 */
};

/* "rank R: CALL failed: MPI's text for rc", marked when the failure was
 * injected (mpi_layer.h) so a test's message cannot be mistaken for a
 * real MPI error. */
static IrStatus mpi_fail(IrDiag *d, int rc, const char *call, int rank)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (tmpi_error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    const char *inj = rt_mpi_injected_call();
    bool injected = inj && strcmp(inj, call) == 0;
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: %s failed: %s%s", rank, call, msg,
                    injected ? " (injected: TESSEL_FAIL_MPI_AFTER)" : "");
}

/* Run an MPI call (a tmpi_* wrapper) named NAME; return its failure. */
#define MPI_TRY(d, t, name, call)                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != MPI_SUCCESS)                                               \
            return mpi_fail((d), rc_, (name), (t)->rank);                     \
    } while (0)

/* A collective failed where every rank must leave knowing the same thing:
 * say why and end the job (never returns). */
static void fail_collective(RtTransport *t, int rc, const char *call, const char *what)
{
    IrDiag d = {0};
    mpi_fail(&d, rc, call, t->rank);
    char line[MPI_MAX_ERROR_STRING + 256];
    snprintf(line, sizeof line, "tessel: error: %s (%s); ending the job\n", d.msg ? d.msg : call, what);
    ir_diag_clear(&d);
    rt_transport_abort(t, line);
}

bool rt_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* ---- user-defined reductions ---- */

static bool g_bf16; /* which 2-byte type the next call is about: set per call (serialized) */

/* The element type an MPI user op is called on: the 2-byte type the
 * current call is about (g_bf16), else f32 or f64 by the datatype. */
static IrType user_type(const MPI_Datatype *dt)
{
    if (*dt == MPI_DOUBLE)
        return IR_F64;
    if (*dt == MPI_FLOAT)
        return IR_F32;
    return g_bf16 ? IR_BF16 : IR_F16;
}

/* MPI has no f16/bf16 and no NaN-propagating max/min: these ops combine
 * with the reducer algebra (device/reducer.c), as the devices do. */
#define USER_OP(NAME, OP)                                                     \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)       \
    {                                                                         \
        dev_red_combine_array((OP), user_type(dt), inout, in, *len);          \
    }
USER_OP(user_add, OP_ADD)
USER_OP(user_mul, OP_MULTIPLY)
USER_OP(user_max, OP_MAXIMUM)
USER_OP(user_min, OP_MINIMUM)

/* tessel's own communicator on the caller's group (a duplicate, so that
 * its traffic never matches the caller's messages and its error handler
 * is its own), the reduction ops and datatype. `rank` names this process
 * in messages until MPI_Comm_rank answers. */
static IrStatus attach(MPI_Comm comm, int rank, bool owns_mpi, RtTransport **out, IrDiag *d)
{
    RtTransport *t = ts_calloc(1, sizeof *t);
    if (!t)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", rank);
    t->comm = MPI_COMM_NULL;
    t->abort_comm = comm;
    t->rank = rank;
    t->owns_mpi = owns_mpi;
    *out = t;
    int provided = 0;
    MPI_TRY(d, t, "MPI_Query_thread", tmpi_query_thread(&provided));
    MPI_TRY(d, t, "MPI_Comm_dup", tmpi_comm_dup(comm, &t->comm));
    t->abort_comm = t->comm;
    MPI_TRY(d, t, "MPI_Comm_set_errhandler", tmpi_comm_set_errhandler(t->comm, MPI_ERRORS_RETURN));
    MPI_TRY(d, t, "MPI_Comm_rank", tmpi_comm_rank(t->comm, &t->rank));
    MPI_TRY(d, t, "MPI_Comm_size", tmpi_comm_size(t->comm, &t->size));
    if (provided < MPI_THREAD_SERIALIZED)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "rank %d: MPI provides thread level %d; tessel needs MPI_THREAD_SERIALIZED", t->rank,
                        provided);
    MPI_TRY(d, t, "MPI_Type_contiguous", tmpi_type_contiguous(2, MPI_BYTE, &t->half));
    MPI_TRY(d, t, "MPI_Type_commit", tmpi_type_commit(&t->half));
    MPI_User_function *hf[4] = {user_add, user_mul, user_max, user_min};
    for (int k = 0; k < 4; k++)
        MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(hf[k], 1, &t->user[0][k]));
    MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(user_max, 1, &t->fmax));
    MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(user_min, 1, &t->fmin));
    return IR_OK;
}

IrStatus rt_mpi_init(int *argc, char ***argv, RtTransport **out, IrDiag *d)
{
    *out = NULL;
    const char *bad = NULL;
    if (!rt_mpi_fail_from_env(&bad))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "%s=%s: expected a non-negative integer", bad,
                        getenv(bad));
    /* Until MPI_Comm_rank answers, messages use the launcher's rank. */
    int env_rank = rt_mpi_env_rank(), provided = 0;
    int rc = tmpi_init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        /* MPI_Error_string is not allowed before MPI_Init (Open MPI aborts). */
        const char *inj = rt_mpi_injected_call();
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: MPI_Init_thread failed: MPI error %d%s",
                        env_rank, rc, inj && strcmp(inj, "MPI_Init_thread") == 0 ? " (injected: TESSEL_FAIL_MPI_AFTER)" : "");
    }
    /* MPI_COMM_WORLD's errors return from here on: attach's own calls
     * (the dup included) must report, not abort. */
    rc = tmpi_comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        RtTransport *t = ts_calloc(1, sizeof *t);
        if (t) {
            t->comm = MPI_COMM_NULL;
            t->abort_comm = MPI_COMM_WORLD;
            t->rank = env_rank;
            t->owns_mpi = true;
        }
        *out = t;
        return mpi_fail(d, rc, "MPI_Comm_set_errhandler", env_rank);
    }
    return attach(MPI_COMM_WORLD, env_rank, true, out, d);
}

IrStatus rt_mpi_attach(const void *comm, RtTransport **out, IrDiag *d)
{
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "MPI is not initialised: call MPI_Init_thread before running on a communicator");
    return attach(*(const MPI_Comm *)comm, rt_mpi_env_rank(), false, out, d);
}

int rt_mpi_rank(const RtTransport *t)
{
    return t->rank;
}

int rt_mpi_size(const RtTransport *t)
{
    return t->size;
}

/* Free one op / the datatype if it was created; the first failure is kept
 * in *st (later frees still run). */
static void free_op(RtTransport *t, MPI_Op *op, IrStatus *st, IrDiag *d)
{
    if (*op == MPI_OP_NULL || !*op)
        return;
    int rc = tmpi_op_free(op);
    *op = MPI_OP_NULL;
    if (rc != MPI_SUCCESS && *st == IR_OK)
        *st = mpi_fail(d, rc, "MPI_Op_free", t->rank);
}

IrStatus rt_mpi_release(RtTransport *t, IrDiag *d)
{
    IrStatus st = IR_OK;
    for (int k = 0; k < 4; k++)
        free_op(t, &t->user[0][k], &st, d);
    free_op(t, &t->fmax, &st, d);
    free_op(t, &t->fmin, &st, d);
    if (t->half && t->half != MPI_DATATYPE_NULL) {
        int rc = tmpi_type_free(&t->half);
        t->half = MPI_DATATYPE_NULL;
        if (rc != MPI_SUCCESS && st == IR_OK)
            st = mpi_fail(d, rc, "MPI_Type_free", t->rank);
    }
    return st;
}

IrStatus rt_mpi_end(RtTransport *t, IrDiag *d)
{
    if (!t)
        return IR_OK;
    IrStatus st = rt_mpi_release(t, d);
    int rank = t->rank;
    bool owns = t->owns_mpi;
    bool freed = true;
    if (t->comm != MPI_COMM_NULL) {
        int rc = tmpi_comm_free(&t->comm);
        freed = rc == MPI_SUCCESS;
        if (!freed && st == IR_OK)
            st = mpi_fail(d, rc, "MPI_Comm_free", rank);
    }
    ts_free(t);
    /* A rank that could not free its communicator does not finalize: it
     * exits, and mpirun ends the ranks that wait in MPI_Finalize for it
     * (so rank 0 never writes the outputs of a run that failed). */
    if (owns && freed) {
        int rc = tmpi_finalize();
        if (rc != MPI_SUCCESS && st == IR_OK)
            st = mpi_fail(d, rc, "MPI_Finalize", rank);
    }
    return st;
}

void rt_mpi_finalize(RtTransport *t)
{
    IrDiag d = {0};
    rt_mpi_end(t, &d);
    ir_diag_clear(&d);
}

/* ---- the transport ---- */

/* ---- transfers of any size ----
 *
 * MPI's counts are int (Open MPI 4 has no MPI-4 large-count calls), so a
 * rank's contribution of over 2 GiB travels in pieces of at most
 * MPI_PIECE bytes. Piece k of every rank must land at offset k * MPI_PIECE
 * of that rank's block, `bytes` apart: the receive type is a contiguous
 * piece resized to an extent of `bytes`, so MPI places the pieces where
 * they belong with no staging buffer and no copy. */

#define MPI_PIECE (mpi_piece_bytes())

/* 1 GiB; TESSEL_MPI_PIECE_BYTES (tests) makes pieces small enough for the
 * many-piece path to run on small arrays. */
static size_t mpi_piece_bytes(void)
{
    static size_t piece;
    if (!piece) {
        const char *e = getenv("TESSEL_MPI_PIECE_BYTES");
        char *end = NULL;
        unsigned long long v = e ? strtoull(e, &end, 10) : 0;
        piece = e && *e && !*end && v > 0 && v <= ((size_t)1 << 30) ? (size_t)v : (size_t)1 << 30;
    }
    return piece;
}

/* A piece of n bytes whose rank blocks are `stride` bytes apart. */
static IrStatus strided_piece(RtTransport *t, size_t n, size_t stride, MPI_Datatype *out, IrDiag *d)
{
    MPI_Datatype piece;
    *out = MPI_DATATYPE_NULL;
    MPI_TRY(d, t, "MPI_Type_contiguous", tmpi_type_contiguous((int)n, MPI_BYTE, &piece));
    int rc = tmpi_type_create_resized(piece, 0, (MPI_Aint)stride, out);
    tmpi_type_free(&piece);
    if (rc != MPI_SUCCESS)
        return mpi_fail(d, rc, "MPI_Type_create_resized", t->rank);
    rc = tmpi_type_commit(out);
    if (rc != MPI_SUCCESS) {
        tmpi_type_free(out);
        return mpi_fail(d, rc, "MPI_Type_commit", t->rank);
    }
    return IR_OK;
}

/* Gather `bytes` from every rank into recv (rank r's at r * bytes): at
 * every rank (root < 0, MPI_Allgather) or at root (MPI_Gather). */
static IrStatus gather_any_size(RtTransport *t, const void *send, size_t bytes, void *recv, int root, IrDiag *d)
{
    const char *call = root < 0 ? "MPI_Allgather" : "MPI_Gather";
    if (bytes <= MPI_PIECE) {
        int rc = root < 0 ? tmpi_allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, t->comm)
                          : tmpi_gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, t->comm);
        return rc == MPI_SUCCESS ? IR_OK : mpi_fail(d, rc, call, t->rank);
    }
    for (size_t off = 0; off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        MPI_Datatype rt;
        IrStatus st = strided_piece(t, n, bytes, &rt, d);
        if (st != IR_OK)
            return st;
        const uint8_t *s = (const uint8_t *)send + off;
        uint8_t *r = recv ? (uint8_t *)recv + off : NULL;
        int rc = root < 0 ? tmpi_allgather(s, (int)n, MPI_BYTE, r, 1, rt, t->comm)
                          : tmpi_gather(s, (int)n, MPI_BYTE, r, 1, rt, root, t->comm);
        tmpi_type_free(&rt);
        if (rc != MPI_SUCCESS)
            return mpi_fail(d, rc, call, t->rank);
    }
    return IR_OK;
}

IrStatus rt_transport_allgather(RtTransport *t, const void *send, size_t bytes, void *recv, IrDiag *d)
{
    return gather_any_size(t, send, bytes, recv, -1, d);
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
    switch (dev_red_canonical(ty, op)) {
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
    /* In place, so pieces of at most 2^30 elements simply follow each other. */
    size_t esize = ir_type_size(ty);
    int64_t piece = (int64_t)(MPI_PIECE / (esize ? esize : 1));
    piece = piece > 0 ? piece : 1;
    for (int64_t off = 0; off < count; off += piece) {
        int64_t n = count - off < piece ? count - off : piece;
        MPI_TRY(d, t, "MPI_Allreduce",
                tmpi_allreduce(MPI_IN_PLACE, (uint8_t *)buf + (size_t)off * esize, (int)n, dt, mop, t->comm));
    }
    return IR_OK;
}

void rt_transport_abort(RtTransport *t, const char *msg)
{
    if (msg)
        fprintf(stderr, "%s", msg);
    fflush(stderr);
    tmpi_abort(!t ? MPI_COMM_WORLD : t->comm != MPI_COMM_NULL ? t->comm : t->abort_comm, 1);
    /* MPI_Abort returned (it must not): leave without finalizing, which
     * mpirun also treats as the end of the job. */
    _exit(1);
}

/* ---- agreement, outputs, statistics ---- */

/* A rank that cannot take part in an agreement cannot return an answer
 * the others share (they may be waiting in it): it ends the job. */
int rt_mpi_agree(RtTransport *t, bool ok)
{
    int mine = ok ? INT_MAX : t->rank, first = INT_MAX;
    int rc = tmpi_allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, t->comm);
    if (rc != MPI_SUCCESS)
        fail_collective(t, rc, "MPI_Allreduce", "agreeing whether every rank is fine");
    return first == INT_MAX ? -1 : first;
}

int rt_mpi_max(RtTransport *t, int value)
{
    int out = value;
    int rc = tmpi_allreduce(&value, &out, 1, MPI_INT, MPI_MAX, t->comm);
    if (rc != MPI_SUCCESS)
        fail_collective(t, rc, "MPI_Allreduce", "agreeing on the exit status");
    return out;
}

IrStatus rt_mpi_gather_devices(RtTransport *t, int64_t nlocal, DevValue **local, DevValue **all, IrDiag *d)
{
    /* Every device's root has the same per-device shape (one program):
     * serialize its leaves, gather all devices at rank 0. */
    const IrShape *ds = &local[0]->shape;
    int32_t nleaf = ir_shape_leaf_count(ds);
    size_t b = 0;
    for (int32_t l = 0; l < nleaf; l++)
        b += (size_t)dev_value_leaf(local[0], l)->nbytes;
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
    IrStatus gst = gather_any_size(t, send, b * (size_t)nlocal, recv, 0, d);
    ts_free(send);
    if (gst != IR_OK) {
        ts_free(recv);
        return gst;
    }
    if (t->rank != 0)
        return IR_OK;
    /* Device g's root from its bytes. */
    int64_t ndev = nlocal * t->size;
    IrStatus st = IR_OK;
    for (int64_t g = 0; g < ndev; g++) {
        all[g] = dev_value_clone(local[0]);
        if (!all[g]) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        size_t off = (size_t)g * b;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(all[g], l);
            if (v->nbytes)
                memcpy(v->data, recv + off, (size_t)v->nbytes);
            off += (size_t)v->nbytes;
        }
    }
    for (int64_t g = 0; st != IR_OK && g < ndev; g++) {
        dev_value_unref(all[g]);
        all[g] = NULL;
    }
    ts_free(recv);
    return st;
}

IrStatus rt_mpi_gather_results(RtTransport *t, const PlanCluster *c, int64_t nlocal, DevValue **local,
                               DevValue **out, IrDiag *d)
{
    *out = NULL;
    int64_t ndev = nlocal * t->size;
    DevValue **all = t->rank == 0 ? ts_calloc((size_t)ndev, sizeof *all) : NULL;
    if (t->rank == 0 && !all) /* the caller ends the job: the others wait in the gather */
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank 0: out of memory");
    IrStatus st = rt_mpi_gather_devices(t, nlocal, local, all, d);
    if (st != IR_OK || t->rank != 0) {
        ts_free(all);
        return st;
    }
    /* Replica 0's partitions hold the root. */
    st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, all, out, d);
    for (int64_t g = 0; g < ndev; g++)
        dev_value_unref(all[g]);
    ts_free(all);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rank 0 may fail to allocate where the others cannot know it: agree
 * first, so that either every rank gathers or none does. */
bool rt_mpi_phase_stats(RtTransport *t, const double *mine, int nphase, double *min, double *median, double *max)
{
    double *all = t->rank == 0 ? ts_malloc((size_t)nphase * (size_t)t->size * sizeof(double)) : NULL;
    if (rt_mpi_agree(t, t->rank != 0 || all) >= 0) {
        ts_free(all);
        return false;
    }
    int rc = tmpi_gather(mine, nphase, MPI_DOUBLE, all, nphase, MPI_DOUBLE, 0, t->comm);
    if (rc != MPI_SUCCESS) {
        ts_free(all);
        fail_collective(t, rc, "MPI_Gather", "gathering statistics");
    }
    if (t->rank != 0) {
        ts_free(all);
        return true;
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
