/*
 * mpi.c: one MPI rank per host. The transport local.c's leader devices use
 * (all-gather, all-reduce with built-in or any reducer, reduce-scatter,
 * point to point; over tessel's communicator or a group's), agreement on failures
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
#include "../coll/coll.h"
#include "mpi_layer.h"
#include "transport.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Check-ins remembered per rank (a peer may run ahead of this rank by a
 * few collectives: a gather's senders finish before its root), and sends
 * in flight per peer. */
enum { RING = 64, NSLOT = 32, TAG_BEAT = 1, TAG_CHECKIN = 2 };

typedef struct Slot {
    MPI_Request req;
    int64_t msg[2];          /* {check-in number, what} ({0, 0}: a beat) */
} Slot;

/* The heartbeat of a transport (RELIABILITY.md, "Stuck jobs"). A thread
 * sends a beat to every peer every `period` seconds and reads theirs; a
 * peer not heard from for `seconds` (stopped, hung in the kernel, its
 * host lost) ends the job, naming it. Every collective is also a
 * check-in: its number and what it is (kind and size) go to every peer,
 * and a collective returns only when every peer has checked in at it
 * with the same thing, so a rank that skipped a collective or entered
 * another one ends the job (naming the two) instead of deadlocking or
 * mixing data. */
typedef struct Heartbeat {
    bool on;
    pthread_t thread;
    pthread_mutex_t mu;      /* everything below, and reading `hb` */
    pthread_cond_t cv;
    bool stop;
    double seconds, period;
    double *heard;           /* [size]: when each rank was last heard from */
    int64_t seq;             /* this rank's check-ins */
    int64_t hist[RING];      /* what each of the last RING was */
    int64_t *rx_hi, *rx_checked; /* [size]: highest received, highest compared */
    int64_t *rx;             /* [size][RING]: what each peer's check-ins were */
    Slot *slots;             /* [size][NSLOT] */
} Heartbeat;

/* A thread that ends the process if a call (MPI_Finalize, which no
 * heartbeat watches) has not returned within its seconds. */
typedef struct Watchdog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool armed, done;
    double seconds;
    int rank;
    const char *call;
} Watchdog;
static void watchdog_arm(Watchdog *w, double seconds, int rank, const char *call);
static void watchdog_disarm(Watchdog *w);

/* The communicator of one partition of the hosts into groups (a
 * collective's replica groups seen from the hosts: rt_transport_groups),
 * created with MPI_Comm_split on first use and kept for the run. */
typedef struct GroupComm {
    int32_t *color;          /* [size]: every host's group (-1: alone) */
    MPI_Comm comm;           /* this host's group; MPI_COMM_NULL when alone */
} GroupComm;

struct RtTransport {
    CollTransport base;      /* the collectives' interface (coll.h); first, so that a CollTransport * is an RtTransport * */
    MPI_Comm comm;           /* tessel's duplicate of the caller's communicator */
    GroupComm *gcomm;        /* host partitions seen so far (rt_mpi_release frees them) */
    int32_t ngcomm;
    int64_t sent[COLL_XK_COUNT], received[COLL_XK_COUNT]; /* bytes of collectives' data (rt_transport_bytes) */
    MPI_Comm hb_comm;        /* a second one, for beats and check-ins */
    Heartbeat hb;
    MPI_Comm abort_comm;     /* what MPI_Abort ends: comm, or the caller's before the dup exists */
    bool owns_mpi;           /* rt_mpi_init initialised MPI: rt_mpi_end finalizes it */
    int rank, size;
    MPI_Datatype half;       /* 2-byte elements (f16, bf16) for user ops */
    MPI_Op user[2][4];       /* [f16|bf16][add, mul, max, min] */
    MPI_Op fmax, fmin;       /* NaN-propagating max/min for f32/f64 */
    MPI_Op any[2];           /* any reducer (any_op): [not commutative | commutative], made on first use */
    uint8_t *slots;          /* the pipeline's receive slots, kept warm for the run (ir_big_alloc) */
    /* Message shapes from the run's tuning, rank 0's (rt_mpi_tune). */
    size_t piece, pipe_min, chunk_combine, chunk_plain;
    size_t nslots;           /* their bytes */
};

/* The CollTransport of an RtTransport (defined at the end). */
static const CollTransport mpi_transport;

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
                    injected ? " (injected: fail_mpi_after)" : "");
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
    return coll_launched();
}

/* The message shapes of tuning `c` (NULL: the defaults). */
static void set_shapes(RtTransport *t, const CollTuning *c)
{
    t->piece = coll_piece_bytes(c);
    t->pipe_min = coll_pipeline_bytes(c);
    t->chunk_combine = coll_chunk_bytes(c, true);
    t->chunk_plain = coll_chunk_bytes(c, false);
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
    t->comm = t->hb_comm = MPI_COMM_NULL;
    t->abort_comm = comm;
    t->rank = rank;
    t->owns_mpi = owns_mpi;
    set_shapes(t, NULL);
    t->base = mpi_transport;
    *out = t;
    int provided = 0;
    MPI_TRY(d, t, "MPI_Query_thread", tmpi_query_thread(&provided));
    MPI_TRY(d, t, "MPI_Comm_dup", tmpi_comm_dup(comm, &t->comm));
    t->abort_comm = t->comm;
    MPI_TRY(d, t, "MPI_Comm_set_errhandler", tmpi_comm_set_errhandler(t->comm, MPI_ERRORS_RETURN));
    MPI_TRY(d, t, "MPI_Comm_dup", tmpi_comm_dup(t->comm, &t->hb_comm));
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

IrStatus rt_mpi_init(int *argc, char ***argv, const CollTuning *tune, RtTransport **out, IrDiag *d)
{
    *out = NULL;
    /* Until MPI_Comm_rank answers, messages use the launcher's rank. */
    int env_rank = coll_launcher_rank(), provided = 0;
    rt_mpi_inject(tune, env_rank);
    int rc = tmpi_init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        /* MPI_Error_string is not allowed before MPI_Init (Open MPI aborts). */
        const char *inj = rt_mpi_injected_call();
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: MPI_Init_thread failed: MPI error %d%s",
                        env_rank, rc, inj && strcmp(inj, "MPI_Init_thread") == 0 ? " (injected: fail_mpi_after)" : "");
    }
    /* MPI_COMM_WORLD's errors return from here on: attach's own calls
     * (the dup included) must report, not abort. */
    rc = tmpi_comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        RtTransport *t = ts_calloc(1, sizeof *t);
        if (t) {
            t->comm = t->hb_comm = MPI_COMM_NULL;
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
    return attach(*(const MPI_Comm *)comm, coll_launcher_rank(), false, out, d);
}

CollTransport *rt_mpi_transport(RtTransport *t)
{
    return t ? &t->base : NULL;
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
    for (int32_t k = 0; k < t->ngcomm; k++) {
        GroupComm *g = &t->gcomm[k];
        if (g->comm != MPI_COMM_NULL) {
            int rc = tmpi_comm_free(&g->comm);
            g->comm = MPI_COMM_NULL;
            if (rc != MPI_SUCCESS && st == IR_OK)
                st = mpi_fail(d, rc, "MPI_Comm_free", t->rank);
        }
        ts_free(g->color);
    }
    ts_free(t->gcomm);
    t->gcomm = NULL;
    t->ngcomm = 0;
    ir_big_free(t->slots);
    t->slots = NULL;
    t->nslots = 0;
    for (int k = 0; k < 4; k++)
        free_op(t, &t->user[0][k], &st, d);
    free_op(t, &t->fmax, &st, d);
    free_op(t, &t->fmin, &st, d);
    free_op(t, &t->any[0], &st, d);
    free_op(t, &t->any[1], &st, d);
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
    rt_mpi_heartbeat_stop(t);
    IrStatus st = rt_mpi_release(t, d);
    int rank = t->rank;
    bool owns = t->owns_mpi;
    bool freed = true;
    if (t->hb_comm != MPI_COMM_NULL) {
        int rc = tmpi_comm_free(&t->hb_comm);
        freed = rc == MPI_SUCCESS;
        if (!freed && st == IR_OK)
            st = mpi_fail(d, rc, "MPI_Comm_free", rank);
    }
    if (freed && t->comm != MPI_COMM_NULL) {
        int rc = tmpi_comm_free(&t->comm);
        freed = rc == MPI_SUCCESS;
        if (!freed && st == IR_OK)
            st = mpi_fail(d, rc, "MPI_Comm_free", rank);
    }
    double guard = t->hb.seconds;
    ts_free(t);
    /* A rank that could not free its communicator does not finalize: it
     * exits, and mpirun ends the ranks that wait in MPI_Finalize for it
     * (so rank 0 never writes the outputs of a run that failed). */
    if (owns && freed) {
        /* MPI_Finalize waits for every rank, after the heartbeat stopped:
         * a rank lost now must not hold the others forever. */
        Watchdog w;
        watchdog_arm(&w, guard, rank, "MPI_Finalize");
        int rc = tmpi_finalize();
        watchdog_disarm(&w);
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

/* ---- a deadline on one blocking call ---- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


static void *watchdog_main(void *arg)
{
    Watchdog *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double s = floor(w->seconds);
    until.tv_sec += (time_t)s;
    until.tv_nsec += (long)((w->seconds - s) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0 && !w->done) {
            fprintf(stderr, "tessel: error: rank %d: %s has waited %.1f s for the other ranks (--heartbeat); "
                    "ending this rank\n", w->rank, w->call, w->seconds);
            fflush(stderr);
            _exit(1);
        }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* seconds <= 0: no deadline. */
static void watchdog_arm(Watchdog *w, double seconds, int rank, const char *call)
{
    *w = (Watchdog){.seconds = seconds, .rank = rank, .call = call};
    if (seconds <= 0)
        return;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->armed = pthread_create(&w->thread, NULL, watchdog_main, w) == 0;
}

static void watchdog_disarm(Watchdog *w)
{
    if (!w->armed)
        return;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* ---- the heartbeat ---- */

/* What a check-in is: a kind and a size, one 64-bit word. */
enum { CK_DEVICE_CALL = 1, CK_ALLGATHER, CK_ALLREDUCE, CK_GATHER, CK_AGREE, CK_MAX, CK_STATS, CK_SPLIT, CK_P2P,
       CK_REDUCE_SCATTER };

static int64_t checkin_code(int kind, int64_t size)
{
    return ((int64_t)kind << 56) | (size & ((INT64_C(1) << 56) - 1));
}

static void checkin_text(int64_t code, char *buf, size_t n)
{
    static const char *const kinds[] = {"?", "a device call", "an all-gather", "an all-reduce", "a gather",
                                        "an agreement on failures", "an agreement on the exit status",
                                        "a statistics gather", "a communicator split",
                                        "a point-to-point exchange", "a reduce-scatter"};
    int k = (int)(code >> 56);
    snprintf(buf, n, "%s (%lld)", kinds[k >= 1 && k <= CK_REDUCE_SCATTER ? k : 0],
             (long long)(code & ((INT64_C(1) << 56) - 1)));
}

/* End the job from wherever the heartbeat found the trouble (never returns). */
static void hb_end_job(RtTransport *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void hb_end_job(RtTransport *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "tessel: error: rank %d: ", t->rank);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof msg - len, "; ending the job, no output written\n");
    rt_transport_abort(t, msg);
}

/* Send {seq, what} to rank r on a free slot (hb.mu held). A beat finds
 * none when r has not taken the last NSLOT: it is dropped (r's silence
 * is the other side's business). A check-in must go: its slots are
 * waited for (a peer that never drains them is silent, and the
 * heartbeat thread ends the job). */
static void hb_send(RtTransport *t, int r, int64_t seq, int64_t what)
{
    Heartbeat *h = &t->hb;
    for (;;) {
        for (int k = 0; k < NSLOT; k++) {
            Slot *sl = &h->slots[(size_t)r * NSLOT + (size_t)k];
            int done = 1;
            if (sl->req != MPI_REQUEST_NULL && tmpi_test(&sl->req, &done) != MPI_SUCCESS)
                hb_end_job(t, "sending a heartbeat to rank %d failed", r);
            if (!done)
                continue;
            sl->msg[0] = seq;
            sl->msg[1] = what;
            if (tmpi_isend(sl->msg, 2, MPI_INT64_T, r, seq ? TAG_CHECKIN : TAG_BEAT, t->hb_comm, &sl->req) !=
                MPI_SUCCESS)
                hb_end_job(t, "sending a heartbeat to rank %d failed", r);
            return;
        }
        if (!seq)
            return;
        pthread_mutex_unlock(&h->mu);
        usleep(1000);
        pthread_mutex_lock(&h->mu);
    }
}

/* Compare every check-in received up to this rank's own count with this
 * rank's (hb.mu held): the same collective in the same place, or the
 * ranks diverged. */
static void hb_compare(RtTransport *t)
{
    Heartbeat *h = &t->hb;
    for (int r = 0; r < t->size; r++) {
        if (r == t->rank)
            continue;
        if (h->rx_hi[r] - h->rx_checked[r] >= RING)
            hb_end_job(t, "rank %d checked in %lld times more than this rank: the ranks diverged", r,
                       (long long)(h->rx_hi[r] - h->seq));
        int64_t upto = h->rx_hi[r] < h->seq ? h->rx_hi[r] : h->seq;
        while (h->rx_checked[r] < upto) {
            int64_t j = ++h->rx_checked[r];
            int64_t theirs = h->rx[(size_t)r * RING + (size_t)(j % RING)], mine = h->hist[j % RING];
            if (theirs == mine)
                continue;
            char a[96], b[96];
            checkin_text(theirs, a, sizeof a);
            checkin_text(mine, b, sizeof b);
            hb_end_job(t, "at collective %lld rank %d checked in at %s, this rank at %s: the ranks diverged "
                       "(one skipped a collective or took another path), a deadlock", (long long)j, r, a, b);
        }
    }
}

/* Read every beat and check-in that has arrived (hb.mu held). */
static void hb_drain(RtTransport *t)
{
    Heartbeat *h = &t->hb;
    for (;;) {
        int64_t msg[2];
        int got = 0;
        MPI_Status status;
        if (tmpi_improbe_recv(msg, 2, MPI_INT64_T, t->hb_comm, &got, &status) != MPI_SUCCESS)
            hb_end_job(t, "reading heartbeats failed");
        if (!got)
            break;
        int r = status.MPI_SOURCE;
        if (r < 0 || r >= t->size)
            continue;
        h->heard[r] = now();
        if (status.MPI_TAG != TAG_CHECKIN)
            continue;
        if (msg[0] != h->rx_hi[r] + 1)
            hb_end_job(t, "rank %d sent check-in %lld after %lld", r, (long long)msg[0], (long long)h->rx_hi[r]);
        h->rx_hi[r] = msg[0];
        h->rx[(size_t)r * RING + (size_t)(msg[0] % RING)] = msg[1];
    }
    hb_compare(t);
}

/* Any peer silent for longer than the heartbeat allows (hb.mu held). */
static void hb_check_silence(RtTransport *t)
{
    Heartbeat *h = &t->hb;
    double tnow = now();
    for (int r = 0; r < t->size; r++)
        if (r != t->rank && tnow - h->heard[r] > h->seconds)
            hb_end_job(t, "rank %d has not been heard from for %.1f s (--heartbeat %g s): it stopped, hung or "
                       "lost its host", r, tnow - h->heard[r], h->seconds);
}

static void *hb_main(void *arg)
{
    RtTransport *t = arg;
    Heartbeat *h = &t->hb;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        for (int r = 0; r < t->size; r++)
            if (r != t->rank)
                hb_send(t, r, 0, 0);
        hb_drain(t);
        hb_check_silence(t);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)(h->period * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        if (!h->stop)
            pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

IrStatus rt_mpi_heartbeat_start(RtTransport *t, double seconds, IrDiag *d)
{
    Heartbeat *h = &t->hb;
    if (h->on || seconds <= 0 || t->size < 2 || t->hb_comm == MPI_COMM_NULL)
        return IR_OK;
    size_t n = (size_t)t->size;
    h->heard = ts_calloc(n, sizeof *h->heard);
    h->rx_hi = ts_calloc(n, sizeof *h->rx_hi);
    h->rx_checked = ts_calloc(n, sizeof *h->rx_checked);
    h->rx = ts_calloc(n * RING, sizeof *h->rx);
    h->slots = ts_calloc(n * NSLOT, sizeof *h->slots);
    if (!h->heard || !h->rx_hi || !h->rx_checked || !h->rx || !h->slots) {
        ts_free(h->heard);
        ts_free(h->rx_hi);
        ts_free(h->rx_checked);
        ts_free(h->rx);
        ts_free(h->slots);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    double t0 = now();
    for (size_t r = 0; r < n; r++)
        h->heard[r] = t0;
    for (size_t k = 0; k < n * NSLOT; k++)
        h->slots[k].req = MPI_REQUEST_NULL;
    h->seconds = seconds;
    /* Four beats per allowed silence, at most one a second, at least 20 a
     * second apart: a busy rank's beats still come in time. */
    h->period = fmin(fmax(seconds / 4, 0.05), 1.0);
    h->seq = 0;
    h->stop = false;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thread, NULL, hb_main, t) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: cannot start the heartbeat thread",
                        t->rank);
    }
    h->on = true;
    return IR_OK;
}

void rt_mpi_heartbeat_stop(RtTransport *t)
{
    Heartbeat *h = &t->hb;
    if (!h->on)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    /* Sends still in flight: given 100 ms to complete (tiny messages
     * normally already have); one that has not (its peer stopped) is let
     * go with MPI_Request_free, and then its buffer must outlive it: the
     * slots are kept (NSLOT x ranks x 24 bytes, once). */
    bool pending = false;
    double until = now() + 0.1;
    for (size_t k = 0; k < (size_t)t->size * NSLOT; k++)
        while (h->slots[k].req != MPI_REQUEST_NULL) {
            int done = 0;
            if (tmpi_test(&h->slots[k].req, &done) != MPI_SUCCESS || (!done && now() > until)) {
                tmpi_request_free(&h->slots[k].req);
                pending = true;
            } else if (!done) {
                usleep(100);
            }
        }
    if (!pending)
        ts_free(h->slots);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    ts_free(h->heard);
    ts_free(h->rx_hi);
    ts_free(h->rx_checked);
    ts_free(h->rx);
    h->heard = NULL;
    h->rx_hi = h->rx_checked = h->rx = NULL;
    h->slots = NULL;
    h->on = false;
}

/* This rank reached a collective or device call (`code` says which):
 * tell every peer. */
static void checkin(RtTransport *t, int64_t code)
{
    Heartbeat *h = &t->hb;
    if (!h->on)
        return;
    pthread_mutex_lock(&h->mu);
    h->seq++;
    h->hist[h->seq % RING] = code;
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            hb_send(t, r, h->seq, code);
    hb_drain(t);
    pthread_mutex_unlock(&h->mu);
}

void rt_transport_checkin(RtTransport *t, int64_t cluster)
{
    checkin(t, checkin_code(CK_DEVICE_CALL, cluster));
}

/* A waiting rank's turns without progress (reset `spins` to 0 when
 * something moved). Spin for the first millisecond: data moves in this
 * rank's own MPI calls, and a peer's message is usually microseconds
 * away, while giving the core up costs a time slice whenever anything
 * else is runnable and a sleep at least the timer's slack (tens of
 * microseconds). Then yield the core until 20 ms (an idle host returns
 * at once; on a busy one the others run), then sleep 100 us a turn, and
 * 1 ms after 100 ms: a rank that waits long for a peer wakes about 1000
 * times a second. */
typedef struct Backoff {
    int spins;
    double since;            /* when this wait began (its first turn) */
} Backoff;

static void backoff(Backoff *b)
{
    if (b->spins++ == 0)
        b->since = now();
    double waited = now() - b->since;
    if (waited < 0.001)
        return;
    if (waited < 0.02) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (waited < 0.1 ? 100 : 1000) * 1000L};
    nanosleep(&ts, NULL);
}

/* Wait for `req` and for every peer's check-in at this collective (the
 * heartbeat's; without one just the request). Returns the MPI result. */
static int finish(RtTransport *t, MPI_Request *req)
{
    Heartbeat *h = &t->hb;
    Backoff b = {0};
    int done = 0;
    for (;;) {
        int rc = tmpi_test(req, &done);
        if (rc != MPI_SUCCESS || done)
            break;
        if (h->on && b.spins % 16 == 15) {
            pthread_mutex_lock(&h->mu);
            hb_drain(t);
            pthread_mutex_unlock(&h->mu);
        }
        backoff(&b);
    }
    /* Everybody's check-in at this collective, compared. */
    while (h->on) {
        pthread_mutex_lock(&h->mu);
        hb_drain(t);
        bool all = true;
        for (int r = 0; r < t->size; r++)
            all = all && (r == t->rank || h->rx_hi[r] >= h->seq);
        pthread_mutex_unlock(&h->mu);
        if (all)
            break;
        backoff(&b);
    }
    return done ? MPI_SUCCESS : MPI_ERR_OTHER;
}

/* One collective: the check-in, the skip of TESSEL_SKIP_COLLECTIVE_AFTER,
 * the call (`post`'s non-blocking one), then its wait. */
#define COLLECTIVE(t, kind, size, rc, post)                                   \
    do {                                                                      \
        if (rt_mpi_skip_collective()) {                                       \
            (rc) = MPI_SUCCESS;                                               \
            break;                                                            \
        }                                                                     \
        checkin((t), checkin_code((kind), (size)));                           \
        MPI_Request req_ = MPI_REQUEST_NULL;                                  \
        (rc) = (post);                                                        \
        if ((rc) == MPI_SUCCESS)                                              \
            (rc) = finish((t), &req_);                                        \
    } while (0)

/* ---- the run's tuning, rank 0's ---- */

IrStatus rt_mpi_tune(RtTransport *t, const CollTuning *tune, IrDiag *d)
{
    int64_t mine[3] = {tune ? tune->piece_bytes : 0, tune ? tune->chunk_bytes : 0, tune ? tune->pipeline_bytes : 0};
    int64_t *all = ts_malloc((size_t)t->size * sizeof mine);
    if (!all)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    /* Not a collective of the program: neither checked in nor skipped. */
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = tmpi_iallgather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, t->comm, &req);
    if (rc == MPI_SUCCESS)
        rc = finish(t, &req);
    CollTuning c = tune ? *tune : (CollTuning){0};
    c.piece_bytes = all[0];
    c.chunk_bytes = all[1];
    c.pipeline_bytes = all[2];
    ts_free(all);
    if (rc != MPI_SUCCESS)
        return mpi_fail(d, rc, "MPI_Allgather", t->rank);
    set_shapes(t, &c);
    return IR_OK;
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

/* The piece (coll_piece_bytes of the run's tuning, rank 0's: rt_mpi_tune). */
#define MPI_PIECE (t->piece)

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
 * every rank (root < 0, MPI_Allgather) or at root (MPI_Gather). Each piece
 * is a collective of its own (its check-in included); every rank cuts the
 * same pieces. */
static IrStatus gather_any_size(RtTransport *t, const void *send, size_t bytes, void *recv, int root, IrDiag *d)
{
    const char *call = root < 0 ? "MPI_Allgather" : "MPI_Gather";
    int kind = root < 0 ? CK_ALLGATHER : CK_GATHER;
    for (size_t off = 0; off == 0 || off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        /* One piece: contiguous blocks; several: strided receive types. */
        MPI_Datatype rtype = MPI_BYTE;
        int rcount = (int)n;
        if (bytes > MPI_PIECE) {
            IrStatus st = strided_piece(t, n, bytes, &rtype, d);
            if (st != IR_OK)
                return st;
            rcount = 1;
        }
        const uint8_t *s = (const uint8_t *)send + off;
        uint8_t *r = recv ? (uint8_t *)recv + off : NULL;
        int rc;
        COLLECTIVE(t, kind, (int64_t)n, rc,
                   root < 0 ? tmpi_iallgather(s, (int)n, MPI_BYTE, r, rcount, rtype, t->comm, &req_)
                            : tmpi_igather(s, (int)n, MPI_BYTE, r, rcount, rtype, root, t->comm, &req_));
        if (rtype != MPI_BYTE)
            tmpi_type_free(&rtype);
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

static bool mpi_builtin_op(CollTransport *base, IrType ty, IrOpcode op)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    return op != OP_COUNT && mpi_op_for(t, ty, op, &dt, &mop);
}

IrStatus rt_transport_allreduce(RtTransport *t, void *buf, int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    MPI_Datatype dt;
    MPI_Op mop;
    if (!mpi_op_for(t, ty, op, &dt, &mop))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    /* In place, so pieces of at most MPI_PIECE bytes simply follow each other. */
    size_t esize = ir_type_size(ty);
    int64_t piece = (int64_t)(MPI_PIECE / (esize ? esize : 1));
    piece = piece > 0 ? piece : 1;
    for (int64_t off = 0; off < count; off += piece) {
        int64_t n = count - off < piece ? count - off : piece;
        int rc;
        COLLECTIVE(t, CK_ALLREDUCE, n * (int64_t)esize, rc,
                   tmpi_iallreduce(MPI_IN_PLACE, (uint8_t *)buf + (size_t)off * esize, (int)n, dt, mop, t->comm,
                                   &req_));
        MPI_TRY(d, t, "MPI_Allreduce", rc);
    }
    return IR_OK;
}

/* ---- collectives over groups of hosts ---- */


void rt_transport_bytes(const RtTransport *t, CollXferKind kind, int64_t *sent, int64_t *received)
{
    bool ok = kind >= 0 && kind < COLL_XK_COUNT;
    *sent = ok ? t->sent[kind] : 0;
    *received = ok ? t->received[kind] : 0;
}

static void count_bytes(RtTransport *t, CollXferKind kind, int64_t sent, int64_t received)
{
    if (kind >= 0 && kind < COLL_XK_COUNT) {
        t->sent[kind] += sent;
        t->received[kind] += received;
    }
}

/* The check-in of a collective made of several MPI calls, or false when
 * TESSEL_SKIP_COLLECTIVE_AFTER skips it (as COLLECTIVE does). */
static bool begin_collective(RtTransport *t, int kind, int64_t size)
{
    if (rt_mpi_skip_collective())
        return false;
    checkin(t, checkin_code(kind, size));
    return true;
}

/* This host's communicator for the partition `color` ([size]), and how
 * many hosts share its color (*k; 1 when alone, *comm MPI_COMM_NULL).
 * One color for all: tessel's communicator. A partition seen for the
 * first time is split off (every rank meets it at the same collective:
 * one program) after every rank has checked in at the split, so the
 * blocking MPI_Comm_split never waits for a rank that is elsewhere. */
static IrStatus group_comm(RtTransport *t, const int32_t *color, MPI_Comm *comm, int *k, IrDiag *d)
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
    if (begin_collective(t, CK_SPLIT, t->ngcomm)) {
        MPI_Request none = MPI_REQUEST_NULL;
        finish(t, &none);
    }
    /* Split communicators inherit tessel's MPI_ERRORS_RETURN. */
    MPI_TRY(d, t, "MPI_Comm_split", tmpi_comm_split(t->comm, mine >= 0 ? mine : MPI_UNDEFINED, t->rank, &g->comm));
    *comm = g->comm;
    return IR_OK;
}

static IrStatus mpi_allgather_in(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                                   size_t bytes, void *recv, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Comm comm;
    int k = 1;
    IrStatus st = group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    /* Pieces as gather_any_size: every rank cuts the same ones (bytes is
     * the same everywhere: one program, nlocal devices per host). */
    for (size_t off = 0; off == 0 || off < bytes; off += MPI_PIECE) {
        size_t n = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        MPI_Datatype rtype = MPI_BYTE;
        int rcount = (int)n;
        if (bytes > MPI_PIECE && comm != MPI_COMM_NULL) {
            st = strided_piece(t, n, bytes, &rtype, d);
            if (st != IR_OK)
                return st;
            rcount = 1;
        }
        const uint8_t *s = (const uint8_t *)send + off;
        uint8_t *r = (uint8_t *)recv + off;
        int rc;
        COLLECTIVE(t, CK_ALLGATHER, (int64_t)n, rc,
                   comm == MPI_COMM_NULL ? MPI_SUCCESS
                                         : tmpi_iallgather(s, (int)n, MPI_BYTE, r, rcount, rtype, comm, &req_));
        if (rtype != MPI_BYTE)
            tmpi_type_free(&rtype);
        if (rc != MPI_SUCCESS)
            return mpi_fail(d, rc, "MPI_Allgather", t->rank);
    }
    if (comm == MPI_COMM_NULL && bytes)
        memcpy(recv, send, bytes);
    count_bytes(t, kind, (int64_t)bytes * (k - 1), (int64_t)bytes * (k - 1));
    return IR_OK;
}

static IrStatus mpi_allreduce_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what, void *buf,
                                   int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    if (!mpi_op_for(t, ty, op, &dt, &mop))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    MPI_Comm comm;
    int k = 1;
    IrStatus st = group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    /* One check-in for the whole reduction: the colors' buffers differ in
     * size, so their pieces do too. */
    if (!begin_collective(t, CK_ALLREDUCE, what))
        return IR_OK;
    size_t esize = ir_type_size(ty);
    int64_t piece = (int64_t)(MPI_PIECE / (esize ? esize : 1));
    piece = piece > 0 ? piece : 1;
    for (int64_t off = 0; comm != MPI_COMM_NULL && off < count; off += piece) {
        int64_t n = count - off < piece ? count - off : piece;
        MPI_Request req = MPI_REQUEST_NULL;
        int rc = tmpi_iallreduce(MPI_IN_PLACE, (uint8_t *)buf + (size_t)off * esize, (int)n, dt, mop, comm, &req);
        if (rc == MPI_SUCCESS)
            rc = finish(t, &req);
        MPI_TRY(d, t, "MPI_Allreduce", rc);
    }
    int64_t moved = k > 1 ? 2 * (k - 1) * count * (int64_t)esize / k : 0;
    count_bytes(t, kind, moved, moved);
    return IR_OK;
}

/* ---- pipelined all-reduce, reduce-scatter and all-gather ----
 *
 * Buffers of pipe_min() bytes (256 KiB) and more travel point to point in chunks, so
 * that nothing is staged and the combining overlaps the transfers. The
 * buffer is cut into k blocks, one per host of the color (host order);
 * host q owns block q:
 *   reduce-scatter phase: every host sends block p of its contribution to
 *     host p, chunk by chunk (straight from the operand when the host has
 *     one device; else from the result buffer, where the host's devices
 *     were combined chunk by chunk first, each chunk sent as soon as it is
 *     combined); host q receives the others' chunks of block q into a few
 *     chunk-sized slots and combines each chunk, as soon as every host's
 *     has arrived, in host order, into its result;
 *   all-gather phase: each finished chunk of block q goes to every other
 *     host, which receives it straight into its result.
 * An all-reduce is both phases, a reduce-scatter the first (the result is
 * block q), an all-gather the second (block q is the operand). Every
 * element of the result is combined once, in host order, on its block's
 * host and copied to the others, so all hosts hold the same bits. Each
 * host sends (k-1)/k of the buffer and receives as much per phase: what
 * the ring of MPI_Allreduce moves, without its copy of the send buffer
 * into the receive buffer and without an intermediate buffer per step.
 *
 * Example: an all-reduce (add) of 8 elements over 2 hosts with one
 * device each, operands a (host 0) and b (host 1), blocks of 4, chunks
 * of 2 elements; r is each host's result:
 *            host 0                        host 1
 *   sends    a[4:6] a[6:8] to host 1       b[0:2] b[2:4] to host 0
 *   slot     b[0:2]                        a[4:6]
 *   combine  r[0:2] = a[0:2] + b[0:2]      r[4:6] = a[4:6] + b[4:6]
 *   sends    r[0:2] to host 1              r[4:6] to host 0
 *   slot     b[2:4] ... r[2:4]             a[6:8] ... r[6:8]
 *   receives r[4:6] r[6:8] into r          r[0:2] r[2:4] into r
 * (the host-order sum is a + b on both blocks, whichever host owns it).
 *
 * One check-in for the whole collective (the caller's); the requests are
 * polled as finish() polls (a peer that stops or diverges ends the job
 * through the heartbeat), spinning while data arrives (the receiver's
 * own MPI calls copy it) and yielding, then sleeping, when idle. */

enum { TAG_RS = 4, TAG_AG = 5, PL_DEPTH = 4 };

/* Buffers of at least this many bytes take the pipelined path (smaller
 * ones: MPI's own latency-optimised algorithms): coll_pipeline_bytes of
 * the run's tuning, at most a piece so that the tests' tiny pieces run it
 * on small arrays. The chunk: coll_chunk_bytes (512 KiB where chunks are
 * combined, half a core's L2: a chunk just received is still in cache
 * when it is combined; where nothing is combined, all-gather and
 * all-to-all, there is nothing to overlap: one message a piece). Both
 * rank 0's on every rank (rt_mpi_tune). */
#define pipe_min() (t->pipe_min)
#define pipe_chunk(combine) ((combine) ? t->chunk_combine : t->chunk_plain)

typedef enum PlMode { PL_ALLREDUCE, PL_REDUCE_SCATTER, PL_ALLGATHER, PL_ALLTOALL } PlMode;

typedef struct PlPeer {
    int r;                     /* its rank in the communicator (its block) */
    MPI_Request *rs_send;      /* [chunks of block r]: my contribution to it */
    int64_t rs_posted, rs_done;
    MPI_Request rs_recv[PL_DEPTH]; /* its chunks of my block, slot c % PL_DEPTH */
    int64_t rr_posted;
    uint8_t *slot;             /* PL_DEPTH chunks (of the transport's slots) */
    MPI_Request *ag_send;      /* [chunks of my block]: my finished chunks to it */
    int64_t ag_posted, ag_done;
    MPI_Request *ag_recv;      /* [chunks of block r]: its finished chunks, into dst */
    int64_t ar_posted, ar_done;
} PlPeer;

typedef struct Pl {
    RtTransport *t;
    MPI_Comm comm;
    PlMode mode;
    int q, k;                  /* my rank in comm, hosts */
    IrOpcode op;
    IrType ty;
    size_t es;
    int64_t count, per, chunk; /* elements: the whole buffer, a block, a chunk */
    const void *const *src;    /* my devices' operands (AR, RS: count; AG: one block) */
    int32_t nsrc;
    uint8_t *dst;              /* AR, AG: count; RS: my block */
    PlPeer *peer;              /* [k - 1] */
    const void **list;         /* [k]: the final combine's sources */
    const char *call;          /* the MPI function called last (for a failure's message) */
    bool stream;               /* dst may take streaming stores (coll_stream_into) */
    int64_t combined;          /* chunks of my block finished */
    int64_t local;             /* several devices: (chunk, peer) pairs combined locally and sent */
} Pl;

static int64_t pl_lo(const Pl *p, int b)
{
    int64_t lo = p->per * b;
    return lo < p->count ? lo : p->count;
}

static int64_t pl_len(const Pl *p, int b)
{
    int64_t hi = p->per * (b + 1);
    return (hi < p->count ? hi : p->count) - pl_lo(p, b);
}

static int64_t pl_chunks(const Pl *p, int b)
{
    return (pl_len(p, b) + p->chunk - 1) / p->chunk;
}

/* Chunk c of block b: its first element (of the whole buffer) and length. */
static int64_t pl_at(const Pl *p, int b, int64_t c, int64_t *n)
{
    int64_t o = c * p->chunk, len = pl_len(p, b) - o;
    *n = len < p->chunk ? len : p->chunk;
    return pl_lo(p, b) + o;
}

/* Where element i of the whole buffer is in my operand, and in dst. */
static const uint8_t *pl_src(const Pl *p, int64_t i)
{
    int64_t base = p->mode == PL_ALLGATHER ? pl_lo(p, p->q) : 0;
    return (const uint8_t *)p->src[0] + (size_t)(i - base) * p->es;
}

static uint8_t *pl_dst(const Pl *p, int64_t i)
{
    int64_t base = p->mode == PL_REDUCE_SCATTER ? pl_lo(p, p->q) : 0;
    return p->dst + (size_t)(i - base) * p->es;
}

/* My devices' operands combined into dst at [i, i + n) (several devices). */
static void pl_local(Pl *p, int64_t i, int64_t n)
{
    void *d = pl_dst(p, i);
    coll_combine(p->op, p->ty, &d, 1, 0, p->src, p->nsrc, i, n, false);
}

static int pl_isend(Pl *p, const void *buf, int64_t n, int r, int tag, MPI_Request *req)
{
    p->call = "MPI_Isend";
    return tmpi_isend_data(buf, (int)((size_t)n * p->es), MPI_BYTE, r, tag, p->comm, req);
}

static int pl_irecv(Pl *p, void *buf, int64_t n, int r, int tag, MPI_Request *req)
{
    p->call = "MPI_Irecv";
    return tmpi_irecv(buf, (int)((size_t)n * p->es), MPI_BYTE, r, tag, p->comm, req);
}

/* Test the oldest of requests [*done, posted) and those after it that
 * completed: advances *done. *moved when one did. */
static int pl_test(Pl *p, MPI_Request *req, int64_t posted, int64_t *done, bool *moved)
{
    p->call = "MPI_Wait";
    while (*done < posted) {
        int flag = 0;
        int rc = tmpi_test(&req[*done], &flag);
        if (rc != MPI_SUCCESS)
            return rc;
        if (!flag)
            break;
        ++*done;
        *moved = true;
    }
    return MPI_SUCCESS;
}

/* Every peer's chunk `c` of my block arrived: the final combine in host
 * order into dst, then (all-reduce) the chunk goes to every peer and the
 * slots take chunk c + PL_DEPTH. */
static int pl_finish_chunk(Pl *p, int64_t c)
{
    int64_t n, i = pl_at(p, p->q, c, &n);
    const uint8_t *mine = pl_src(p, i);
    if (p->nsrc > 1) {
        pl_local(p, i, n);
        mine = pl_dst(p, i);
    }
    size_t slot = (size_t)(c % PL_DEPTH) * (size_t)p->chunk * p->es;
    for (int r = 0, j = 0; r < p->k; r++)
        p->list[r] = r == p->q ? (const void *)mine : p->peer[j++].slot + slot;
    void *d = pl_dst(p, i);
    coll_combine(p->op, p->ty, &d, 1, 0, p->list, p->k, 0, n, false);
    int rc = MPI_SUCCESS;
    for (int j = 0; rc == MPI_SUCCESS && j < p->k - 1; j++) {
        PlPeer *e = &p->peer[j];
        if (p->mode == PL_ALLREDUCE)
            rc = pl_isend(p, d, n, e->r, TAG_AG, &e->ag_send[e->ag_posted++]);
        int64_t next = c + PL_DEPTH, m;
        if (rc == MPI_SUCCESS && next < pl_chunks(p, p->q)) {
            pl_at(p, p->q, next, &m);
            rc = pl_irecv(p, e->slot + (size_t)(next % PL_DEPTH) * (size_t)p->chunk * p->es, m, e->r, TAG_RS,
                          &e->rs_recv[next % PL_DEPTH]);
            e->rr_posted++;
        }
    }
    return rc;
}

/* Is every peer's chunk c of my block here? */
static int pl_arrived(Pl *p, int64_t c, bool *all)
{
    *all = true;
    for (int j = 0; j < p->k - 1; j++) {
        MPI_Request *r = &p->peer[j].rs_recv[c % PL_DEPTH];
        int flag = 1;
        p->call = "MPI_Wait";
        if (*r != MPI_REQUEST_NULL) {
            int rc = tmpi_test(r, &flag);
            if (rc != MPI_SUCCESS)
                return rc;
        }
        *all = *all && flag;
    }
    return MPI_SUCCESS;
}

/* A turn without progress: the heartbeat's messages read every 16,
 * then backoff()'s spin, yield and sleep. */
static void pl_idle(RtTransport *t, Backoff *b)
{
    if (t->hb.on && b->spins % 16 == 15) {
        pthread_mutex_lock(&t->hb.mu);
        hb_drain(t);
        pthread_mutex_unlock(&t->hb.mu);
    }
    backoff(b);
}

static void pl_free(Pl *p)
{
    for (int j = 0; p->peer && j < p->k - 1; j++) {
        ts_free(p->peer[j].rs_send);
        ts_free(p->peer[j].ag_send);
        ts_free(p->peer[j].ag_recv);
    }
    ts_free(p->peer);
    ts_free(p->list);
}

/* The pipeline among the k > 1 hosts of comm (the caller checked in).
 * What each mode does:
 *   combine   my block's chunks from every peer into slots, combined
 *             into dst (all-reduce, reduce-scatter);
 *   contrib   block p of my contribution to host p, chunk by chunk
 *             (all-reduce, reduce-scatter, all-to-all);
 *   gather    block p of dst from host p, received in place (all-reduce:
 *             its finished chunks; all-gather: its operand; all-to-all:
 *             its operand's block q);
 *   mine out  my block's chunks to every peer (all-reduce: as each is
 *             finished; all-gather: the operand, at once). */
static IrStatus pipeline(Pl *p, IrDiag *d)
{
    RtTransport *t = p->t;
    int k = p->k, q = p->q;
    bool combine = p->mode == PL_ALLREDUCE || p->mode == PL_REDUCE_SCATTER;
    bool contrib = p->mode != PL_ALLGATHER, gather = p->mode != PL_REDUCE_SCATTER;
    bool mine_out = p->mode == PL_ALLREDUCE || p->mode == PL_ALLGATHER;
    /* All-to-all data travels under one tag each way, as the all-gather's. */
    int ctag = p->mode == PL_ALLTOALL ? TAG_AG : TAG_RS;
    int64_t mine = pl_chunks(p, q);
    p->peer = ts_calloc((size_t)(k - 1), sizeof *p->peer);
    p->list = ts_calloc((size_t)k, sizeof *p->list);
    bool ok = p->peer && p->list;
    /* The slots live in the transport from call to call: warm memory,
     * no page faults per collective. */
    size_t per_peer = (size_t)PL_DEPTH * (size_t)p->chunk * p->es;
    if (ok && combine && t->nslots < per_peer * (size_t)(k - 1)) {
        ir_big_free(t->slots);
        t->nslots = 0;
        t->slots = ir_big_alloc(per_peer * (size_t)(k - 1)); /* huge pages: fewer for the kernel to pin */
        ok = t->slots != NULL;
        if (ok)
            t->nslots = per_peer * (size_t)(k - 1);
    }
    for (int j = 0; ok && j < k - 1; j++) {
        PlPeer *e = &p->peer[j];
        e->r = j < q ? j : j + 1;
        int64_t theirs = pl_chunks(p, e->r);
        for (int s = 0; s < PL_DEPTH; s++)
            e->rs_recv[s] = MPI_REQUEST_NULL;
        if (combine)
            e->slot = t->slots + per_peer * (size_t)j;
        if (contrib)
            ok = ok && (e->rs_send = ts_malloc((size_t)(theirs + 1) * sizeof *e->rs_send));
        if (mine_out)
            ok = ok && (e->ag_send = ts_malloc((size_t)(mine + 1) * sizeof *e->ag_send));
        if (gather)
            ok = ok && (e->ag_recv = ts_malloc((size_t)(theirs + 1) * sizeof *e->ag_recv));
    }
    if (!ok) {
        pl_free(p);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    int rc = MPI_SUCCESS;
    /* Sends first, so that the peers' receives find them (a large message
     * moves when its receiver matches it: the receiver copies it, inside
     * its own MPI calls). All-gather: my block to every peer, straight
     * from the operand. */
    for (int64_t c = 0; p->mode == PL_ALLGATHER && rc == MPI_SUCCESS && c < mine; c++)
        for (int j = 0; rc == MPI_SUCCESS && j < k - 1; j++) {
            int64_t m, i = pl_at(p, q, c, &m);
            PlPeer *e = &p->peer[j];
            rc = pl_isend(p, pl_src(p, i), m, e->r, TAG_AG, &e->ag_send[e->ag_posted++]);
        }
    /* One device: my contribution to every block, straight from the
     * operand, chunk by chunk and peer by peer. */
    int64_t most = 0;
    for (int j = 0; j < k - 1; j++)
        most = pl_chunks(p, p->peer[j].r) > most ? pl_chunks(p, p->peer[j].r) : most;
    for (int64_t c = 0; contrib && p->nsrc == 1 && rc == MPI_SUCCESS && c < most; c++)
        for (int j = 0; rc == MPI_SUCCESS && j < k - 1; j++) {
            PlPeer *e = &p->peer[j];
            int64_t n, i;
            if (c >= pl_chunks(p, e->r))
                continue;
            i = pl_at(p, e->r, c, &n);
            rc = pl_isend(p, pl_src(p, i), n, e->r, ctag, &e->rs_send[e->rs_posted++]);
        }
    /* Then the receives: my block's first chunks from every peer into the
     * slots; their blocks straight into dst where nothing is sent from
     * there (one device, or no combining). */
    bool early = !combine || p->nsrc == 1;
    for (int j = 0; rc == MPI_SUCCESS && j < k - 1; j++) {
        PlPeer *e = &p->peer[j];
        for (int64_t c = 0; combine && rc == MPI_SUCCESS && c < mine && c < PL_DEPTH; c++, e->rr_posted++) {
            int64_t n;
            pl_at(p, q, c, &n);
            rc = pl_irecv(p, e->slot + (size_t)c * (size_t)p->chunk * p->es, n, e->r, TAG_RS, &e->rs_recv[c]);
        }
        int64_t theirs = pl_chunks(p, e->r);
        for (int64_t c = 0; gather && early && rc == MPI_SUCCESS && c < theirs; c++) {
            int64_t n, i = pl_at(p, e->r, c, &n);
            rc = pl_irecv(p, pl_dst(p, i), n, e->r, TAG_AG, &e->ag_recv[e->ar_posted++]);
        }
    }
    /* No combining: my own block stays, copied into my result while the
     * peers take theirs (around the caches when large). */
    if (rc == MPI_SUCCESS && !combine) {
        size_t n = (size_t)pl_len(p, q) * p->es;
        void *d = pl_dst(p, pl_lo(p, q));
        coll_copy(&d, 1, 0, pl_src(p, pl_lo(p, q)), n, p->stream && coll_stream((int64_t)n));
    }
    Backoff idle = {0};
    for (;;) {
        bool moved = false;
        /* Several devices: combine the next chunk of some peer's block
         * locally and send it (one a turn: the transfers go on). */
        if (rc == MPI_SUCCESS && contrib && p->nsrc > 1 && p->local < most * (k - 1)) {
            int64_t c = p->local / (k - 1);
            PlPeer *e = &p->peer[p->local % (k - 1)];
            p->local++;
            moved = true;
            if (c < pl_chunks(p, e->r)) {
                int64_t n, i = pl_at(p, e->r, c, &n);
                pl_local(p, i, n);
                rc = pl_isend(p, pl_dst(p, i), n, e->r, ctag, &e->rs_send[e->rs_posted++]);
            }
        }
        /* My block's next chunk, when every peer's has arrived. */
        while (rc == MPI_SUCCESS && combine && p->combined < mine) {
            bool all = false;
            rc = pl_arrived(p, p->combined, &all);
            if (rc != MPI_SUCCESS || !all)
                break;
            rc = pl_finish_chunk(p, p->combined++);
            moved = true;
        }
        bool done = !combine || p->combined == mine;
        for (int j = 0; rc == MPI_SUCCESS && j < k - 1; j++) {
            PlPeer *e = &p->peer[j];
            int64_t theirs = pl_chunks(p, e->r);
            if (contrib)
                rc = pl_test(p, e->rs_send, e->rs_posted, &e->rs_done, &moved);
            if (rc == MPI_SUCCESS && mine_out)
                rc = pl_test(p, e->ag_send, e->ag_posted, &e->ag_done, &moved);
            /* Several devices, all-reduce: block r's chunk c lands in dst
             * once my contribution has left from there (in chunk order). */
            while (rc == MPI_SUCCESS && gather && !early && e->ar_posted < e->rs_done) {
                int64_t n, i = pl_at(p, e->r, e->ar_posted, &n);
                rc = pl_irecv(p, pl_dst(p, i), n, e->r, TAG_AG, &e->ag_recv[e->ar_posted++]);
                moved = true;
            }
            if (rc == MPI_SUCCESS && gather)
                rc = pl_test(p, e->ag_recv, e->ar_posted, &e->ar_done, &moved);
            done = done && (!contrib || e->rs_done == theirs) && (!mine_out || e->ag_done == mine) &&
                   (!gather || e->ar_done == theirs);
        }
        if (rc != MPI_SUCCESS || done)
            break;
        if (moved)
            idle.spins = 0;
        else
            pl_idle(t, &idle);
    }
    if (rc != MPI_SUCCESS) {
        /* Requests may still be posted (into the slots, which the
         * transport keeps): the caller ends the job. */
        return mpi_fail(d, rc, p->call ? p->call : "MPI_Wait", t->rank);
    }
    pl_free(p);
    /* Every peer's check-in at this collective, as finish() waits for. */
    MPI_Request none = MPI_REQUEST_NULL;
    finish(t, &none);
    return IR_OK;
}

/* This host's communicator among its color (group_comm), the hosts in
 * it (*k) and this host's rank there (*q: the split keeps host order). */
static IrStatus pl_begin(RtTransport *t, const int32_t *color, MPI_Comm *comm, int *k, int *q, IrDiag *d)
{
    *q = 0;
    for (int r = 0; r < t->rank; r++)
        *q += color[r] == color[t->rank];
    return group_comm(t, color, comm, k, d);
}

static IrStatus mpi_allreduce_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                     const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                                     IrOpcode op, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    if (!mpi_op_for(t, ty, op, &dt, &mop) || !coll_can_combine(op, ty))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    size_t es = ir_type_size(ty), bytes = (size_t)count * es;
    bool pipe = comm != MPI_COMM_NULL && bytes >= pipe_min() && count >= k;
    /* The host's devices combined first (the pipeline does it chunk by
     * chunk itself); alone, that is the result. */
    if (!pipe)
        coll_combine(op, ty, &dst, 1, 0, src, nsrc, 0, count, false);
    if (!begin_collective(t, CK_ALLREDUCE, what))
        return IR_OK;
    if (pipe) {
        int64_t chunk = (int64_t)(pipe_chunk(true) / es);
        Pl p = {.t = t, .comm = comm, .mode = PL_ALLREDUCE, .q = q, .k = k, .op = op, .ty = ty, .es = es,
                .count = count, .per = (count + k - 1) / k, .chunk = chunk > 0 ? chunk : 1, .src = src,
                .nsrc = nsrc, .dst = dst};
        st = pipeline(&p, d);
    } else {
        int64_t piece = (int64_t)(MPI_PIECE / (es ? es : 1));
        piece = piece > 0 ? piece : 1;
        for (int64_t off = 0; st == IR_OK && comm != MPI_COMM_NULL && off < count; off += piece) {
            int64_t n = count - off < piece ? count - off : piece;
            MPI_Request req = MPI_REQUEST_NULL;
            int rc = tmpi_iallreduce(MPI_IN_PLACE, (uint8_t *)dst + (size_t)off * es, (int)n, dt, mop, comm, &req);
            if (rc == MPI_SUCCESS)
                rc = finish(t, &req);
            MPI_TRY(d, t, "MPI_Allreduce", rc);
        }
    }
    if (st != IR_OK)
        return st;
    int64_t moved = k > 1 ? 2 * (k - 1) * count * (int64_t)es / k : 0;
    count_bytes(t, kind, moved, moved);
    return IR_OK;
}

static IrStatus mpi_reduce_scatter_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                          const void *src, void *dst, int64_t count, IrType ty, IrOpcode op,
                                          IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    if (!coll_can_combine(op, ty))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    size_t es = ir_type_size(ty);
    if (!begin_collective(t, CK_REDUCE_SCATTER, what))
        return IR_OK;
    if (comm == MPI_COMM_NULL) {
        memcpy(dst, src, (size_t)count * es);
        return IR_OK;
    }
    int64_t chunk = (int64_t)(pipe_chunk(true) / es);
    const void *one[1] = {src};
    Pl p = {.t = t, .comm = comm, .mode = PL_REDUCE_SCATTER, .q = q, .k = k, .op = op, .ty = ty, .es = es,
            .count = count, .per = count / k, .chunk = chunk > 0 ? chunk : 1, .src = one, .nsrc = 1, .dst = dst};
    st = pipeline(&p, d);
    if (st != IR_OK)
        return st;
    int64_t moved = (k - 1) * (count / k) * (int64_t)es;
    count_bytes(t, kind, moved, moved);
    return IR_OK;
}

/* A byte pipeline (all-gather or all-to-all: no combine) of `count` bytes
 * into recv, `per` from each host, over comm; with no comm (one host) the
 * bytes this host sends are its result. */
static IrStatus byte_pipeline(RtTransport *t, MPI_Comm comm, PlMode mode, int q, int k, int64_t count, int64_t per,
                              const void *send, void *recv, size_t bytes, bool stream, IrDiag *d)
{
    if (comm == MPI_COMM_NULL) {
        if (bytes)
            memcpy(recv, send, bytes);
        return IR_OK;
    }
    const void *one[1] = {send};
    Pl p = {.t = t, .comm = comm, .mode = mode, .q = q, .k = k, .op = OP_COUNT, .ty = IR_U8, .es = 1,
            .count = count, .per = per, .chunk = (int64_t)pipe_chunk(false), .src = one, .nsrc = 1, .dst = recv,
            .stream = stream};
    return pipeline(&p, d);
}

static IrStatus mpi_allgather_into(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                                     size_t bytes, void *recv, bool stream, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    /* The same check-ins on every rank: the path depends on bytes alone
     * (the same everywhere), not on this host's color. */
    if (bytes < pipe_min())
        return mpi_allgather_in(&t->base, color, kind, send, bytes, recv, d);
    if (!begin_collective(t, CK_ALLGATHER, (int64_t)bytes))
        return IR_OK;
    st = byte_pipeline(t, comm, PL_ALLGATHER, q, k, (int64_t)bytes * k, (int64_t)bytes, send, recv, bytes, stream, d);
    if (st != IR_OK || comm == MPI_COMM_NULL)
        return st;
    count_bytes(t, kind, (int64_t)bytes * (k - 1), (int64_t)bytes * (k - 1));
    return IR_OK;
}

static IrStatus mpi_alltoall_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                  const void *send, void *recv, size_t bytes, bool stream, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    if (!begin_collective(t, CK_P2P, what))
        return IR_OK;
    st = byte_pipeline(t, comm, PL_ALLTOALL, q, k, (int64_t)bytes, (int64_t)bytes / k, send, recv, bytes, stream, d);
    if (st != IR_OK || comm == MPI_COMM_NULL)
        return st;
    int64_t moved = (int64_t)(bytes / (size_t)k) * (k - 1);
    count_bytes(t, kind, moved, moved);
    return IR_OK;
}

static IrStatus mpi_reduce_scatter_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                        const void *send, const int64_t *counts, void *recv, IrType ty, IrOpcode op,
                                        IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    if (!mpi_op_for(t, ty, op, &dt, &mop))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no MPI reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    MPI_Comm comm;
    int k = 1;
    IrStatus st = group_comm(t, color, &comm, &k, d);
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
    if (!begin_collective(t, CK_REDUCE_SCATTER, what)) {
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
            rc = finish(t, &req);
        if (one)
            break;
    }
    ts_free(stage);
    ts_free(host);
    ts_free(rc_n);
    if (st == IR_OK && rc != MPI_SUCCESS)
        st = mpi_fail(d, rc, "MPI_Reduce_scatter", t->rank);
    /* What a direct reduce-scatter moves: every other host's segment of
     * this host's buffer out, this host's segment from each of them in. */
    if (st == IR_OK && k > 1)
        count_bytes(t, kind, (total - own) * (int64_t)esize, own * (int64_t)(k - 1) * (int64_t)esize);
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

static IrStatus mpi_allreduce_any_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                       void *buf, int64_t nslice, int64_t count, const bool *present, IrType ty,
                                       const CollReducer *red, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    MPI_Comm comm;
    int k = 1;
    IrStatus st = group_comm(t, color, &comm, &k, d);
    if (st != IR_OK)
        return st;
    if (!begin_collective(t, CK_ALLREDUCE, what))
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
            rc = finish(t, &req);
    }
    AnyReg done = {.failed = false};
    if (slot >= 0)
        any_unregister(slot, &done);
    if (dt != MPI_DATATYPE_NULL)
        tmpi_type_free(&dt);
    if (rc != MPI_SUCCESS && st == IR_OK)
        st = mpi_fail(d, rc, call, t->rank);
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
        count_bytes(t, kind, moved, moved);
    return st;
}

enum { TAG_DATA = 3 };

static IrStatus mpi_exchange(CollTransport *base, CollXferKind kind, int64_t what, const CollXfer *sends, int32_t nsend,
                               const CollXfer *recvs, int32_t nrecv, IrDiag *d)
{
    RtTransport *t = (RtTransport *)base;
    if (!begin_collective(t, CK_P2P, what))
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
        rc = finish(t, &req[j]);
        call = "MPI_Wait";
    }
    ts_free(req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(d, rc, call, t->rank);
    count_bytes(t, kind, sent, received);
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
    int mine = ok ? INT_MAX : t->rank, first = INT_MAX, rc;
    COLLECTIVE(t, CK_AGREE, 1, rc, tmpi_iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, t->comm, &req_));
    if (rc != MPI_SUCCESS)
        fail_collective(t, rc, "MPI_Allreduce", "agreeing whether every rank is fine");
    return first == INT_MAX ? -1 : first;
}

int rt_mpi_max(RtTransport *t, int value)
{
    int out = value, rc;
    COLLECTIVE(t, CK_MAX, 1, rc, tmpi_iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, t->comm, &req_));
    if (rc != MPI_SUCCESS)
        fail_collective(t, rc, "MPI_Allreduce", "agreeing on the exit status");
    return out;
}

IrStatus rt_mpi_gather_devices(RtTransport *t, int64_t nlocal, DevValue **local, const bool *wanted, DevValue **all,
                               IrDiag *d)
{
    /* Every device's root has the same per-device shape (one program):
     * serialize its leaves, gather the wanted devices at rank 0. Every
     * rank knows which devices each rank holds (rank r: [r * nlocal,
     * (r + 1) * nlocal)), so each sends its own wanted ones, padded to the
     * most any rank sends (one gather of equal blocks). */
    const IrShape *ds = &local[0]->shape;
    int32_t nleaf = ir_shape_leaf_count(ds);
    size_t b = 0;
    for (int32_t l = 0; l < nleaf; l++)
        b += (size_t)dev_value_leaf(local[0], l)->nbytes;
    int64_t ndev = nlocal * t->size, most = 0;
    for (int r = 0; r < t->size; r++) {
        int64_t c = 0;
        for (int64_t k = 0; k < nlocal; k++)
            c += !wanted || wanted[r * nlocal + k];
        most = c > most ? c : most;
    }
    uint8_t *send = ts_malloc(b * (size_t)most + 1);
    uint8_t *recv = t->rank == 0 ? ts_malloc(b * (size_t)most * (size_t)t->size + 1) : NULL;
    if (!send || (t->rank == 0 && !recv)) {
        ts_free(send);
        ts_free(recv);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    size_t o = 0;
    for (int64_t k = 0; k < nlocal; k++) {
        if (wanted && !wanted[t->rank * nlocal + k])
            continue;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(local[k], l);
            if (v->nbytes)
                memcpy(send + o, v->data, (size_t)v->nbytes);
            o += (size_t)v->nbytes;
        }
    }
    if (o < b * (size_t)most)
        memset(send + o, 0, b * (size_t)most - o);
    IrStatus gst = gather_any_size(t, send, b * (size_t)most, recv, 0, d);
    ts_free(send);
    if (gst != IR_OK) {
        ts_free(recv);
        return gst;
    }
    if (t->rank != 0)
        return IR_OK;
    /* Device g's root from its bytes: the j-th wanted device of rank r is
     * block r * most + j. */
    IrStatus st = IR_OK;
    int64_t j = 0;
    for (int64_t g = 0; g < ndev; g++) {
        if (g % nlocal == 0)
            j = 0;
        all[g] = NULL;
        if (wanted && !wanted[g])
            continue;
        all[g] = dev_value_clone(local[0]);
        if (!all[g]) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        size_t off = ((size_t)(g / nlocal) * (size_t)most + (size_t)j++) * b;
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
    /* Replica 0's partitions hold the root; of them, the first holder of
     * each tile is enough. Every rank computes the same set. */
    bool *wanted = ts_calloc((size_t)ndev, sizeof *wanted);
    if (!wanted || rt_unshard_needed(&c->out_shape, plan_root_sharding(c), c->num_partitions, wanted) != IR_OK) {
        ts_free(wanted); /* the caller ends the job */
        ts_free(all);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    IrStatus st = rt_mpi_gather_devices(t, nlocal, local, wanted, all, d);
    ts_free(wanted);
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
    int rc;
    COLLECTIVE(t, CK_STATS, nphase, rc, tmpi_igather(mine, nphase, MPI_DOUBLE, all, nphase, MPI_DOUBLE, 0, t->comm, &req_));
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

static const CollTransport mpi_transport = {
    .allgather_in = mpi_allgather_in, .allreduce_in = mpi_allreduce_in,
    .reduce_scatter_in = mpi_reduce_scatter_in, .builtin_op = mpi_builtin_op,
    .allreduce_any_in = mpi_allreduce_any_in, .allreduce_into = mpi_allreduce_into,
    .reduce_scatter_into = mpi_reduce_scatter_into, .allgather_into = mpi_allgather_into,
    .alltoall_in = mpi_alltoall_in, .exchange = mpi_exchange,
};
