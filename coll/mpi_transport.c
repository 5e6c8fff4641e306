/*
 * mpi_transport.c: coll/'s CollTransport over MPI (coll/coll.h says what
 * each function does): all-gathers and all-reduces among the hosts of a
 * color (a communicator split once per partition of the hosts and kept),
 * reduce-scatter, all-reduce with any reducer (a user-defined MPI
 * operation calling the HLO reducer), point to point, all in pieces of at
 * most the tuning's piece bytes; large buffers go through mpi_pipeline.c.
 */
#include "mpi_internal.h"

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- user-defined reductions ---- */

static bool g_bf16; /* which 2-byte type the next call is about: set per call (serialized) */

/* The element type an MPI user op is called on: f32, f64 or an 8- or
 * 16-bit integer by the datatype, else the 2-byte float the current call
 * is about (g_bf16). */
static IrType user_type(const MPI_Datatype *dt)
{
    if (*dt == MPI_DOUBLE)
        return IR_F64;
    if (*dt == MPI_FLOAT)
        return IR_F32;
    if (*dt == MPI_INT8_T)
        return IR_S8;
    if (*dt == MPI_UINT8_T)
        return IR_U8;
    if (*dt == MPI_INT16_T)
        return IR_S16;
    if (*dt == MPI_UINT16_T)
        return IR_U16;
    return g_bf16 ? IR_BF16 : IR_F16;
}

/* MPI has no f16/bf16 and no NaN-propagating max/min, and Open MPI's
 * MPI_SUM on 8- and 16-bit integers saturates where XLA wraps (its op/avx
 * component adds with _mm*_adds_epi8/16: open-mpi/ompi#8045, closed
 * wontfix; Debian's 4.1.4 has it): these ops combine with the reducer
 * algebra (device/reducer.c), as the devices do. */
#define USER_OP(NAME, OP)                                                     \
    void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)              \
    {                                                                         \
        dev_red_combine_array((OP), user_type(dt), inout, in, *len);          \
    }
USER_OP(cmpi_user_add, OP_ADD)
USER_OP(cmpi_user_mul, OP_MULTIPLY)
USER_OP(cmpi_user_max, OP_MAXIMUM)
USER_OP(cmpi_user_min, OP_MINIMUM)

/* ---- the transport ---- */

/* ---- transfers of any size ----
 *
 * MPI's counts are int (Open MPI 4 has no MPI-4 large-count calls), so a
 * rank's contribution of over 2 GiB travels in pieces of at most
 * MPI_PIECE bytes. Piece k of every rank must land at offset k * MPI_PIECE
 * of that rank's block, `bytes` apart: the receive type is a contiguous
 * piece resized to an extent of `bytes`, so MPI places the pieces where
 * they belong with no staging buffer and no copy. */

/* The piece (coll_piece_bytes of the run's tuning, rank 0's: coll_mpi_tune). */

/* A piece of n bytes whose rank blocks are `stride` bytes apart. */
static IrStatus cmpi_strided_piece(CollMpi *t, size_t n, size_t stride, MPI_Datatype *out, IrDiag *d)
{
    MPI_Datatype piece;
    *out = MPI_DATATYPE_NULL;
    MPI_TRY(d, t, "MPI_Type_contiguous", tmpi_type_contiguous((int)n, MPI_BYTE, &piece));
    int rc = tmpi_type_create_resized(piece, 0, (MPI_Aint)stride, out);
    tmpi_type_free(&piece);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(d, rc, "MPI_Type_create_resized", t->rank);
    rc = tmpi_type_commit(out);
    if (rc != MPI_SUCCESS) {
        tmpi_type_free(out);
        return cmpi_fail(d, rc, "MPI_Type_commit", t->rank);
    }
    return IR_OK;
}

/* Gather `bytes` from every rank into recv (rank r's at r * bytes): at
 * every rank (root < 0, MPI_Allgather) or at root (MPI_Gather). Each piece
 * is a collective of its own (its check-in included); every rank cuts the
 * same pieces. */
IrStatus coll_mpi_gather(CollMpi *t, const void *send, size_t bytes, void *recv, int root, IrDiag *d)
{
    const char *call = root < 0 ? "MPI_Allgather" : "MPI_Gather";
    int kind = root < 0 ? CK_ALLGATHER : CK_GATHER;
    for (size_t off = 0; off == 0 || off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        /* One piece: contiguous blocks; several: strided receive types. */
        MPI_Datatype rtype = MPI_BYTE;
        int rcount = (int)n;
        if (bytes > MPI_PIECE) {
            IrStatus st = cmpi_strided_piece(t, n, bytes, &rtype, d);
            if (st != IR_OK)
                return st;
            rcount = 1;
        }
        const uint8_t *s = (const uint8_t *)send + off;
        uint8_t *r = recv ? (uint8_t *)recv + off : NULL;
        int rc;
        COLLECTIVE(t, kind, (int64_t)n, 0, rc,
                   root < 0 ? tmpi_iallgather(s, (int)n, MPI_BYTE, r, rcount, rtype, t->comm, &req_)
                            : tmpi_igather(s, (int)n, MPI_BYTE, r, rcount, rtype, root, t->comm, &req_));
        if (rtype != MPI_BYTE)
            tmpi_type_free(&rtype);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(d, rc, call, t->rank);
    }
    return IR_OK;
}

IrStatus coll_mpi_allgather(CollMpi *t, const void *send, size_t bytes, void *recv, IrDiag *d)
{
    return coll_mpi_gather(t, send, bytes, recv, -1, d);
}
/* The MPI datatype and op for a simple reducer on type ty. */
bool cmpi_op_for(CollMpi *t, IrType ty, IrOpcode op, MPI_Datatype *dt, MPI_Op *mop)
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
    /* 8- and 16-bit integer sums and products wrap in the user ops, not
     * in MPI's (which may saturate: see USER_OP); the same datatype tells
     * the op the type. Example: two ranks' s16 partial sums 20000 and
     * 20000 give -25536, as in one process, where MPI_SUM gave 32767. */
    if (!fl && ty != IR_PRED && ir_type_size(ty) <= 2 && (k == 0 || k == 1)) {
        *mop = t->user[0][k];
        return true;
    }
    /* The reducer's MPI column (hlo_op_sem.def); floating max/min take
     * the NaN-propagating user operations the column's comment asks for. */
    switch (ir_op_mpi(dev_red_canonical(ty, op))) {
    case IR_MPI_SUM: *mop = MPI_SUM; break;
    case IR_MPI_PROD: *mop = MPI_PROD; break;
    case IR_MPI_MAX: *mop = fl ? t->fmax : MPI_MAX; break;
    case IR_MPI_MIN: *mop = fl ? t->fmin : MPI_MIN; break;
    case IR_MPI_BAND: *mop = MPI_BAND; break;
    case IR_MPI_BOR: *mop = MPI_BOR; break;
    case IR_MPI_BXOR: *mop = MPI_BXOR; break;
    case IR_MPI_NONE: return false;
    }
    return !(fl && (op == OP_AND || op == OP_OR || op == OP_XOR));
}

static bool cmpi_builtin_op(CollTransport *base, IrType ty, IrOpcode op)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    return op != OP_COUNT && cmpi_op_for(t, ty, op, &dt, &mop);
}

/* The MPI datatype and operation of reducing `ty` with `op` (cmpi_op_for),
 * or IR_EUNSUPPORTED naming the rank, the op and the type. */
static IrStatus cmpi_reduction(CollMpi *t, IrType ty, IrOpcode op, MPI_Datatype *dt, MPI_Op *mop, IrDiag *d)
{
    if (cmpi_op_for(t, ty, op, dt, mop))
        return IR_OK;
    return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s", t->rank,
                    ir_op_name(op), ir_type_name(ty));
}

IrStatus coll_mpi_allreduce(CollMpi *t, void *buf, int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    MPI_Datatype dt;
    MPI_Op mop;
    IrStatus st = cmpi_reduction(t, ty, op, &dt, &mop, d);
    if (st != IR_OK)
        return st;
    /* In place, so pieces of at most MPI_PIECE bytes simply follow each other. */
    size_t esize = ir_type_size(ty);
    int64_t piece = (int64_t)(MPI_PIECE / (esize ? esize : 1));
    piece = piece > 0 ? piece : 1;
    for (int64_t off = 0; off < count; off += piece) {
        int64_t n = count - off < piece ? count - off : piece;
        int rc;
        COLLECTIVE(t, CK_ALLREDUCE, n * (int64_t)esize, cmpi_checkin_detail(op, ty), rc,
                   tmpi_iallreduce(MPI_IN_PLACE, (uint8_t *)buf + (size_t)off * esize, (int)n, dt, mop, t->comm,
                                   &req_));
        MPI_TRY(d, t, "MPI_Allreduce", rc);
    }
    return IR_OK;
}

/* ---- collectives over groups of hosts ---- */


void coll_mpi_bytes(const CollMpi *t, CollXferKind kind, int64_t *sent, int64_t *received)
{
    bool ok = kind >= 0 && kind < COLL_XK_COUNT;
    *sent = ok ? t->sent[kind] : 0;
    *received = ok ? t->received[kind] : 0;
}

void cmpi_count_bytes(CollMpi *t, CollXferKind kind, int64_t sent, int64_t received)
{
    if (kind >= 0 && kind < COLL_XK_COUNT) {
        t->sent[kind] += sent;
        t->received[kind] += received;
    }
}

/* The check-in of a collective made of several MPI calls, or false when
 * TESSEL_SKIP_COLLECTIVE_AFTER skips it (as COLLECTIVE does). */
bool cmpi_begin_collective(CollMpi *t, int kind, int64_t size, int64_t detail)
{
    if (coll_mpi_skip_collective())
        return false;
    cmpi_checkin(t, cmpi_checkin_code(kind, size), detail);
    return true;
}

/* This host's communicator for the partition `color` ([size]), and how
 * many hosts share its color (*k; 1 when alone, *comm MPI_COMM_NULL).
 * One color for all: tessel's communicator. A partition seen for the
 * first time is split off (every rank meets it at the same collective:
 * one program) after every rank has checked in at the split, so the
 * blocking MPI_Comm_split never waits for a rank that is elsewhere. */
IrStatus cmpi_group_comm(CollMpi *t, const int32_t *color, MPI_Comm *comm, int *k, IrDiag *d)
{
    int32_t mine = color[t->rank];
    *k = 0;
    bool all = true, alone = true;
    for (int r = 0; r < t->size; r++) {
        *k += mine >= 0 && color[r] == mine;
        all = all && color[r] == color[0] && color[r] >= 0;
        alone = alone && color[r] < 0;
    }
    if (all) {
        *comm = t->comm;
        return IR_OK;
    }
    *comm = MPI_COMM_NULL;
    if (mine < 0)
        *k = 1;
    if (alone)
        return IR_OK;
    for (int32_t j = 0; j < t->ngcomm; j++)
        if (memcmp(t->gcomm[j].color, color, (size_t)t->size * sizeof *color) == 0) {
            *comm = t->gcomm[j].comm;
            return IR_OK;
        }
    GroupComm *ng = ts_realloc(t->gcomm, (size_t)(t->ngcomm + 1) * sizeof *ng);
    if (ng)
        t->gcomm = ng;
    int32_t *c = ng ? ts_malloc((size_t)t->size * sizeof *c) : NULL;
    if (!c)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    memcpy(c, color, (size_t)t->size * sizeof *c);
    GroupComm *g = &t->gcomm[t->ngcomm++];
    *g = (GroupComm){.color = c, .comm = MPI_COMM_NULL};
    if (cmpi_begin_collective(t, CK_SPLIT, t->ngcomm, 0)) {
        MPI_Request none = MPI_REQUEST_NULL;
        cmpi_finish(t, &none);
    }
    /* Split communicators inherit tessel's MPI_ERRORS_RETURN. */
    MPI_TRY(d, t, "MPI_Comm_split", tmpi_comm_split(t->comm, mine >= 0 ? mine : MPI_UNDEFINED, t->rank, &g->comm));
    *comm = g->comm;
    return IR_OK;
}

IrStatus cmpi_allgather_in(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                                   size_t bytes, void *recv, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Comm comm;
    int k = 1;
    IrStatus st = cmpi_group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    /* Pieces as coll_mpi_gather: every rank cuts the same ones (bytes is
     * the same everywhere: one program, nlocal devices per host). */
    for (size_t off = 0; off == 0 || off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        MPI_Datatype rtype = MPI_BYTE;
        int rcount = (int)n;
        if (bytes > MPI_PIECE && comm != MPI_COMM_NULL) {
            st = cmpi_strided_piece(t, n, bytes, &rtype, d);
            if (st != IR_OK)
                return st;
            rcount = 1;
        }
        const uint8_t *s = (const uint8_t *)send + off;
        uint8_t *r = (uint8_t *)recv + off;
        int rc;
        COLLECTIVE(t, CK_ALLGATHER, (int64_t)n, 0, rc,
                   comm == MPI_COMM_NULL ? MPI_SUCCESS
                                         : tmpi_iallgather(s, (int)n, MPI_BYTE, r, rcount, rtype, comm, &req_));
        if (rtype != MPI_BYTE)
            tmpi_type_free(&rtype);
        if (rc != MPI_SUCCESS)
            return cmpi_fail(d, rc, "MPI_Allgather", t->rank);
    }
    if (comm == MPI_COMM_NULL && bytes)
        memcpy(recv, send, bytes);
    cmpi_count_bytes(t, kind, (int64_t)bytes * (k - 1), (int64_t)bytes * (k - 1));
    return IR_OK;
}

static IrStatus cmpi_allreduce_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what, void *buf,
                                   int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    IrStatus st = cmpi_reduction(t, ty, op, &dt, &mop, d);
    if (st != IR_OK)
        return st;
    MPI_Comm comm;
    int k = 1;
    st = cmpi_group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    /* One check-in for the whole reduction: the colors' buffers differ in
     * size, so their pieces do too. */
    if (!cmpi_begin_collective(t, CK_ALLREDUCE, what, cmpi_checkin_detail(op, ty)))
        return IR_OK;
    size_t esize = ir_type_size(ty);
    int64_t piece = (int64_t)(MPI_PIECE / (esize ? esize : 1));
    piece = piece > 0 ? piece : 1;
    for (int64_t off = 0; comm != MPI_COMM_NULL && off < count; off += piece) {
        int64_t n = count - off < piece ? count - off : piece;
        MPI_Request req = MPI_REQUEST_NULL;
        int rc = tmpi_iallreduce(MPI_IN_PLACE, (uint8_t *)buf + (size_t)off * esize, (int)n, dt, mop, comm, &req);
        if (rc == MPI_SUCCESS)
            rc = cmpi_finish(t, &req);
        MPI_TRY(d, t, "MPI_Allreduce", rc);
    }
    int64_t moved = k > 1 ? 2 * (k - 1) * count * (int64_t)esize / k : 0;
    cmpi_count_bytes(t, kind, moved, moved);
    return IR_OK;
}

static IrStatus cmpi_reduce_scatter_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                        const void *send, const int64_t *counts, void *recv, IrType ty, IrOpcode op,
                                        IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    IrStatus st = cmpi_reduction(t, ty, op, &dt, &mop, d);
    if (st != IR_OK)
        return st;
    MPI_Comm comm;
    int k = 1;
    st = cmpi_group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    /* The color's hosts in host order: their ranks in comm (split by
     * tessel's rank, or tessel's communicator itself). */
    int32_t mine = color[t->rank];
    int *host = ts_malloc((size_t)t->size * sizeof *host), *rc_n = ts_malloc((size_t)t->size * sizeof *rc_n);
    if (!host || !rc_n) {
        ts_free(host);
        ts_free(rc_n);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    int nh = 0;
    int64_t most = 0, total = 0, own = 0;
    size_t own_off = 0;
    for (int r = 0; r < t->size; r++)
        if (mine >= 0 ? color[r] == mine : r == t->rank) {
            if (r == t->rank) {
                own = counts[r];
                own_off = (size_t)total;
            }
            host[nh++] = r;
            most = counts[r] > most ? counts[r] : most;
            total += counts[r];
        }
    size_t esize = ir_type_size(ty);
    esize = esize ? esize : 1;
    if (!cmpi_begin_collective(t, CK_REDUCE_SCATTER, what, cmpi_checkin_detail(op, ty))) {
        ts_free(host);
        ts_free(rc_n);
        return IR_OK;
    }
    /* Piece q is elements [q * ph, (q + 1) * ph) of every host's segment:
     * at most MPI_PIECE bytes in all, each count an int. */
    int64_t ph = (int64_t)(MPI_PIECE / esize) / nh;
    ph = ph > 0 ? ph : 1;
    bool one = most <= ph;
    uint8_t *stage = one || comm == MPI_COMM_NULL ? NULL : ts_malloc((size_t)ph * (size_t)nh * esize);
    int rc = MPI_SUCCESS;
    if (comm == MPI_COMM_NULL) {
        if (own)
            memcpy(recv, (const uint8_t *)send + own_off * esize, (size_t)own * esize);
    } else if (!one && !stage) {
        st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    for (int64_t q = 0; st == IR_OK && rc == MPI_SUCCESS && comm != MPI_COMM_NULL && q * ph < (most ? most : 1);
         q++) {
        const uint8_t *src = send;
        size_t so = 0, seg = 0;
        for (int j = 0; j < nh; j++) {
            int64_t c = counts[host[j]], lo = q * ph < c ? q * ph : c, hi = (q + 1) * ph < c ? (q + 1) * ph : c;
            rc_n[j] = (int)(one ? c : hi - lo);
            if (!one && hi > lo)
                memcpy(stage + so, (const uint8_t *)send + (seg + (size_t)lo) * esize, (size_t)(hi - lo) * esize);
            so += (size_t)(hi - lo) * esize;
            seg += (size_t)c;
        }
        if (!one)
            src = stage;
        MPI_Request req = MPI_REQUEST_NULL;
        rc = tmpi_ireduce_scatter(src, (uint8_t *)recv + (size_t)(q * ph) * esize, rc_n, dt, mop, comm, &req);
        if (rc == MPI_SUCCESS)
            rc = cmpi_finish(t, &req);
        if (one)
            break;
    }
    ts_free(stage);
    ts_free(host);
    ts_free(rc_n);
    if (st == IR_OK && rc != MPI_SUCCESS)
        st = cmpi_fail(d, rc, "MPI_Reduce_scatter", t->rank);
    /* What a direct reduce-scatter moves: every other host's segment of
     * this host's buffer out, this host's segment from each of them in. */
    if (st == IR_OK && k > 1)
        cmpi_count_bytes(t, kind, (total - own) * (int64_t)esize, own * (int64_t)(k - 1) * (int64_t)esize);
    return st;
}

/* ---- all-reduce with any reducer ----
 *
 * MPI's user functions get no context pointer: (in, inout, len,
 * datatype) is all. So each such all-reduce makes a datatype of its own
 * (one record: below) and registers it here with the reducer; any_op
 * finds its reducer by the datatype it is called with, under a lock (it
 * may run on whichever thread drives MPI's progress: the leader's polls
 * or the heartbeat's). The registration lives from before the first
 * piece is posted until the last has finished, and the datatype is
 * freed only after it is unregistered, so no call can find a stale
 * entry. A failure inside the reducer is kept in the entry and returned
 * after the call (the caller then ends the job: the peers hold wrong
 * values).
 *
 * A record is an int64 count of valid elements (0: this host holds no
 * member of the group, so nothing to combine) and up to `chunk`
 * elements: a general reducer has no identity to fill absent groups
 * with, and records keep every MPI count and piece small. */

enum { ANY_SLOTS = 8 };

typedef struct AnyReg {
    MPI_Datatype dt;         /* the key; MPI_DATATYPE_NULL: a free slot */
    const IrModule *m;
    int32_t comp;
    IrType ty;
    size_t esize, rec;       /* element and record bytes */
    bool failed;
    char msg[256];
} AnyReg;

static pthread_mutex_t any_mu = PTHREAD_MUTEX_INITIALIZER;
static AnyReg any_reg[ANY_SLOTS];
static bool any_init;

static int any_register(const AnyReg *r)
{
    int slot = -1;
    pthread_mutex_lock(&any_mu);
    if (!any_init) {
        for (int k = 0; k < ANY_SLOTS; k++)
            any_reg[k].dt = MPI_DATATYPE_NULL;
        any_init = true;
    }
    for (int k = 0; slot < 0 && k < ANY_SLOTS; k++)
        if (any_reg[k].dt == MPI_DATATYPE_NULL) {
            any_reg[k] = *r;
            slot = k;
        }
    pthread_mutex_unlock(&any_mu);
    return slot;
}

/* Unregister slot k; its failure (if any) copied to *out. */
static void any_unregister(int k, AnyReg *out)
{
    pthread_mutex_lock(&any_mu);
    *out = any_reg[k];
    any_reg[k].dt = MPI_DATATYPE_NULL;
    pthread_mutex_unlock(&any_mu);
}

/* inout = reducer(in, inout), record by record: MPI hands the lower
 * ranks' partial result as `in` (MPI 4.0, 6.9.5), which is the order a
 * non-commutative reducer needs. */
static void any_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    AnyReg r = {.dt = MPI_DATATYPE_NULL};
    pthread_mutex_lock(&any_mu);
    for (int k = 0; any_init && k < ANY_SLOTS && r.dt == MPI_DATATYPE_NULL; k++)
        if (any_reg[k].dt != MPI_DATATYPE_NULL && any_reg[k].dt == *dt)
            r = any_reg[k];
    pthread_mutex_unlock(&any_mu);
    if (r.dt == MPI_DATATYPE_NULL)
        return; /* cannot happen: registered before the first piece */
    for (int i = 0; i < *len; i++) {
        uint8_t *a = (uint8_t *)in + (size_t)i * r.rec, *b = (uint8_t *)inout + (size_t)i * r.rec;
        int64_t na, nb;
        memcpy(&na, a, sizeof na);
        memcpy(&nb, b, sizeof nb);
        if (na <= 0)
            continue;
        if (nb <= 0) {
            memcpy(b, a, r.rec);
            continue;
        }
        IrDiag d = {0};
        if (dev_red_call(r.m, r.comp, r.ty, b + 8, a + 8, b + 8, na < nb ? na : nb, &d) != IR_OK) {
            pthread_mutex_lock(&any_mu);
            for (int k = 0; k < ANY_SLOTS; k++)
                if (any_reg[k].dt == *dt && !any_reg[k].failed) {
                    any_reg[k].failed = true;
                    snprintf(any_reg[k].msg, sizeof any_reg[k].msg, "%s", d.msg ? d.msg : "the reducer failed");
                }
            pthread_mutex_unlock(&any_mu);
        }
        ir_diag_clear(&d);
    }
}

static IrStatus cmpi_allreduce_any_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                       void *buf, int64_t nslice, int64_t count, const bool *present, IrType ty,
                                       const CollReducer *red, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Comm comm;
    int k = 1;
    IrStatus st = cmpi_group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    if (!cmpi_begin_collective(t, CK_ALLREDUCE, what, cmpi_checkin_reducer(red, ty)))
        return IR_OK;
    MPI_Op *op = &t->any[red->commute ? 1 : 0];
    if (*op == MPI_OP_NULL || !*op)
        MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(any_op, red->commute ? 1 : 0, op));
    size_t esize = ir_type_size(ty);
    esize = esize ? esize : 1;
    int64_t chunk = (int64_t)((MPI_PIECE > 8 + esize ? MPI_PIECE - 8 : esize) / esize);
    chunk = count < chunk ? count : chunk;
    chunk = chunk > 0 ? chunk : 1;
    int64_t per = (count + chunk - 1) / chunk, nrec = per * nslice;
    size_t rec = 8 + (size_t)chunk * esize;
    uint8_t *recs = ts_calloc((size_t)(nrec ? nrec : 1), rec);
    if (!recs)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    for (int64_t j = 0; j < nslice; j++)
        for (int64_t q = 0; q < per; q++) {
            int64_t off = q * chunk, n = count - off < chunk ? count - off : chunk;
            uint8_t *r = recs + (size_t)(j * per + q) * rec;
            int64_t valid = present[j] ? n : 0;
            memcpy(r, &valid, sizeof valid);
            if (valid)
                memcpy(r + 8, (const uint8_t *)buf + ((size_t)(j * count + off)) * esize, (size_t)n * esize);
        }
    MPI_Datatype dt = MPI_DATATYPE_NULL;
    int rc = tmpi_type_contiguous((int)rec, MPI_BYTE, &dt);
    const char *call = "MPI_Type_contiguous";
    if (rc == MPI_SUCCESS) {
        rc = tmpi_type_commit(&dt);
        call = "MPI_Type_commit";
    }
    int slot = -1;
    if (rc == MPI_SUCCESS) {
        AnyReg r = {.dt = dt, .m = red->m, .comp = red->comp, .ty = ty, .esize = esize, .rec = rec};
        if ((slot = any_register(&r)) < 0)
            st = ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                          "rank %d: more than %d reductions with user reducers at once", t->rank, ANY_SLOTS);
    }
    /* Pieces of whole records, at most MPI_PIECE bytes each (one record
     * when a record is larger). */
    int64_t step = (int64_t)(MPI_PIECE / rec);
    step = step > 0 ? step : 1;
    for (int64_t off = 0; rc == MPI_SUCCESS && st == IR_OK && comm != MPI_COMM_NULL && off < nrec; off += step) {
        int64_t n = nrec - off < step ? nrec - off : step;
        MPI_Request req = MPI_REQUEST_NULL;
        call = "MPI_Allreduce";
        rc = tmpi_iallreduce(MPI_IN_PLACE, recs + (size_t)off * rec, (int)n, dt, *op, comm, &req);
        if (rc == MPI_SUCCESS)
            rc = cmpi_finish(t, &req);
    }
    AnyReg done = {.failed = false};
    if (slot >= 0)
        any_unregister(slot, &done);
    if (dt != MPI_DATATYPE_NULL)
        tmpi_type_free(&dt);
    if (rc != MPI_SUCCESS && st == IR_OK)
        st = cmpi_fail(d, rc, call, t->rank);
    if (st == IR_OK && done.failed)
        st = ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: the all-reduce's reducer failed: %s",
                      t->rank, done.msg);
    for (int64_t j = 0; st == IR_OK && j < nslice; j++)
        for (int64_t q = 0; q < per; q++) {
            int64_t off = q * chunk, n = count - off < chunk ? count - off : chunk;
            const uint8_t *r = recs + (size_t)(j * per + q) * rec;
            int64_t valid;
            memcpy(&valid, r, sizeof valid);
            if (valid > 0)
                memcpy((uint8_t *)buf + ((size_t)(j * count + off)) * esize, r + 8, (size_t)n * esize);
        }
    ts_free(recs);
    int64_t moved = k > 1 ? 2 * (k - 1) * nrec * (int64_t)rec / k : 0;
    if (st == IR_OK)
        cmpi_count_bytes(t, kind, moved, moved);
    return st;
}

enum { TAG_DATA = 3 };

static IrStatus cmpi_exchange(CollTransport *base, CollXferKind kind, int64_t what, const CollXfer *sends,
                              int32_t nsend, const CollXfer *recvs, int32_t nrecv, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    if (!cmpi_begin_collective(t, CK_P2P, what, 0))
        return IR_OK;
    /* Every block in pieces of at most MPI_PIECE bytes (int counts); the
     * pieces of one pair arrive in order (one tag, one communicator). */
    size_t nreq = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t j = 0; j < (pass ? nrecv : nsend); j++) {
            size_t b = (pass ? recvs : sends)[j].bytes;
            nreq += b ? (b + MPI_PIECE - 1) / MPI_PIECE : 0;
        }
    MPI_Request *req = ts_malloc((nreq ? nreq : 1) * sizeof *req);
    if (!req)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    size_t posted = 0;
    int rc = MPI_SUCCESS;
    const char *call = "MPI_Irecv";
    int64_t sent = 0, received = 0;
    /* Receives first, so a send finds its buffer posted. */
    for (int pass = 1; rc == MPI_SUCCESS && pass >= 0; pass--) {
        call = pass ? "MPI_Irecv" : "MPI_Isend";
        for (int32_t j = 0; rc == MPI_SUCCESS && j < (pass ? nrecv : nsend); j++) {
            const CollXfer *x = pass ? &recvs[j] : &sends[j];
            for (size_t off = 0; rc == MPI_SUCCESS && off < x->bytes; off += MPI_PIECE) {
                int n = (int)(x->bytes - off < MPI_PIECE ? x->bytes - off : MPI_PIECE);
                uint8_t *p = (uint8_t *)x->buf + off;
                rc = pass ? tmpi_irecv(p, n, MPI_BYTE, x->host, TAG_DATA, t->comm, &req[posted])
                          : tmpi_isend_data(p, n, MPI_BYTE, x->host, TAG_DATA, t->comm, &req[posted]);
                posted += rc == MPI_SUCCESS;
            }
            *(pass ? &received : &sent) += (int64_t)x->bytes;
        }
    }
    /* A failed post ends the job (the caller aborts): the posted ones are
     * left to it. */
    for (size_t j = 0; rc == MPI_SUCCESS && j < posted; j++) {
        rc = cmpi_finish(t, &req[j]);
        call = "MPI_Wait";
    }
    ts_free(req);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(d, rc, call, t->rank);
    cmpi_count_bytes(t, kind, sent, received);
    return IR_OK;
}


const CollTransport cmpi_transport = {
    .allgather_in = cmpi_allgather_in, .allreduce_in = cmpi_allreduce_in,
    .reduce_scatter_in = cmpi_reduce_scatter_in, .builtin_op = cmpi_builtin_op,
    .allreduce_any_in = cmpi_allreduce_any_in, .allreduce_into = cmpi_allreduce_into,
    .reduce_scatter_into = cmpi_reduce_scatter_into, .allgather_into = cmpi_allgather_into,
    .alltoall_in = cmpi_alltoall_in, .exchange = cmpi_exchange,
};
