/*
 * mpi_layer.c: the thin layer every MPI call of tessel goes through (see
 * mpi_layer.h): a counter, a one-shot failure-injection hook and one
 * wrapper per MPI function used. The wrappers add nothing else: same
 * arguments, same result.
 */
#include "mpi_layer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the hook ---- */

static _Atomic long fail_after;            /* 0: never; N: the Nth call from now fails */
static _Atomic long call_count;
static _Atomic(const char *) injected;     /* name of the call that was failed */
static atomic_bool env_read;

void coll_mpi_fail_after(long n)
{
    atomic_store(&fail_after, n > 0 ? n : 0);
}

long coll_mpi_call_count(void)
{
    return atomic_load(&call_count);
}

long coll_mpi_fail_pending(void)
{
    return atomic_load(&fail_after);
}

const char *coll_mpi_injected_call(void)
{
    return atomic_load(&injected);
}

/* Count a call; true when it is the one to fail. The countdown is a
 * compare-and-swap so that of two threads calling at once exactly one
 * takes the last step (from 1 to 0) and fails. */
static bool inject(const char *call)
{
    atomic_fetch_add(&call_count, 1);
    long left = atomic_load(&fail_after);
    while (left > 0 && !atomic_compare_exchange_weak(&fail_after, &left, left - 1))
        ;
    if (left != 1)
        return false;
    atomic_store(&injected, call);
    return true;
}

#define INJECT(call)                                                          \
    do {                                                                      \
        if (inject(call))                                                     \
            return MPI_ERR_OTHER;                                             \
    } while (0)

void coll_mpi_inject(const CollTuning *tune, int launcher_rank)
{
    if (!tune || atomic_exchange(&env_read, true))
        return;
    /* A rank filter this process cannot match (no launcher rank) injects
     * nothing: better no failure than one on the wrong rank. */
    bool here = !tune->fail_one_rank || tune->fail_rank == launcher_rank;
    if (here && tune->fail_mpi_after > 0)
        coll_mpi_fail_after((long)tune->fail_mpi_after);
    if (here && tune->skip_collective_after > 0)
        coll_mpi_skip_collective_after((long)tune->skip_collective_after);
}

/* ---- collectives skipped on purpose (a deadlock, injected) ---- */

static _Atomic long skip_after; /* 0: never; N: the Nth collective from now is skipped */

void coll_mpi_skip_collective_after(long n)
{
    atomic_store(&skip_after, n > 0 ? n : 0);
}

bool coll_mpi_skip_collective(void)
{
    long left = atomic_load(&skip_after);
    while (left > 0 && !atomic_compare_exchange_weak(&skip_after, &left, left - 1))
        ;
    return left == 1;
}

/* ---- one MPI call at a time ---- */

/* MPI_THREAD_SERIALIZED: the heartbeat thread (mpi_heartbeat.c) and the thread
 * running the devices' collectives both call MPI, never at once: every
 * wrapper holds this lock for its call. Collectives are non-blocking and
 * polled (mpi_heartbeat.c), so no call holds it for long. */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
/* The call holding the lock: when it began (0: none) and its text. */
static _Atomic double busy_since;
static _Atomic(const char *) busy_call;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The call's text and start are two stores (the text first): a text read
 * between two readings of the same start is that call's; a start that
 * moved between them means another call began, so it is read again. */
double coll_mpi_busy_seconds(const char **call)
{
    double since = atomic_load(&busy_since);
    const char *what = atomic_load(&busy_call);
    for (double again; (again = atomic_load(&busy_since)) != since; what = atomic_load(&busy_call))
        since = again;
    if (call)
        *call = what;
    return since > 0 ? mono_now() - since : 0;
}

/* ---- a watcher that never waits behind a stuck call ---- */

/* The calling thread's limit (coll_mpi_watch_lock): 0, wait forever. */
static _Thread_local double watch_seconds;
static _Thread_local void (*watch_stuck)(void *ctx);
static _Thread_local void *watch_ctx;

void coll_mpi_watch_lock(double seconds, void (*stuck)(void *ctx), void *ctx)
{
    watch_seconds = stuck ? seconds : 0;
    watch_stuck = stuck;
    watch_ctx = ctx;
}

/* Take the layer's lock; a watching thread looks every 0.1 s whether the
 * call holding it has run past its limit, and then calls its stuck(). */
static void lock_mu(void)
{
    if (watch_seconds <= 0) {
        pthread_mutex_lock(&mpi_mu);
        return;
    }
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (pthread_mutex_timedlock(&mpi_mu, &until) == 0)
            return;
        if (coll_mpi_busy_seconds(NULL) > watch_seconds)
            watch_stuck(watch_ctx);
    }
}

/* ---- a call that never returns (a test of the heartbeat) ---- */

static _Atomic(const char *) hang_name; /* NULL: none armed */
static _Atomic long hang_left;

void coll_mpi_hang_in(const char *name, long n)
{
    atomic_store(&hang_left, n > 0 ? n : 0);
    atomic_store(&hang_name, n > 0 ? name : NULL);
}

/* The armed call (`text` starts with its name followed by '('), the n-th
 * time: sleep here, under the layer's lock, until the process ends. */
static void maybe_hang(const char *text)
{
    const char *name = atomic_load(&hang_name);
    if (!name)
        return;
    size_t n = strlen(name);
    if (strncmp(text, name, n) != 0 || text[n] != '(')
        return;
    long left = atomic_load(&hang_left);
    while (left > 0 && !atomic_compare_exchange_weak(&hang_left, &left, left - 1))
        ;
    while (left == 1)
        sleep(1);
}

#define LOCKED(call)                                                          \
    do {                                                                      \
        lock_mu();                                                            \
        atomic_store(&busy_call, #call);                                      \
        atomic_store(&busy_since, mono_now());                                \
        maybe_hang(#call);                                                    \
        int rc_ = (call);                                                     \
        atomic_store(&busy_since, 0.0);                                       \
        pthread_mutex_unlock(&mpi_mu);                                        \
        return rc_;                                                           \
    } while (0)

/* ---- the wrappers ---- */

int tmpi_init_thread(int *argc, char ***argv, int required, int *provided)
{
    INJECT("MPI_Init_thread");
    return MPI_Init_thread(argc, argv, required, provided);
}

int tmpi_finalize(void)
{
    INJECT("MPI_Finalize");
    LOCKED(MPI_Finalize());
}

int tmpi_abort(MPI_Comm comm, int code)
{
    INJECT("MPI_Abort");
    /* Another thread may be inside a call: wait for it a little, then
     * abort anyway (the job ends either way). */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    pthread_mutex_timedlock(&mpi_mu, &until);
    return MPI_Abort(comm, code);
}

int tmpi_error_string(int code, char *msg, int *len)
{
    INJECT("MPI_Error_string");
    LOCKED(MPI_Error_string(code, msg, len));
}

int tmpi_comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h)
{
    INJECT("MPI_Comm_set_errhandler");
    LOCKED(MPI_Comm_set_errhandler(comm, h));
}

int tmpi_comm_rank(MPI_Comm comm, int *rank)
{
    INJECT("MPI_Comm_rank");
    LOCKED(MPI_Comm_rank(comm, rank));
}

int tmpi_comm_size(MPI_Comm comm, int *size)
{
    INJECT("MPI_Comm_size");
    LOCKED(MPI_Comm_size(comm, size));
}

int tmpi_comm_dup(MPI_Comm comm, MPI_Comm *out)
{
    INJECT("MPI_Comm_dup");
    LOCKED(MPI_Comm_dup(comm, out));
}

int tmpi_comm_free(MPI_Comm *comm)
{
    INJECT("MPI_Comm_free");
    LOCKED(MPI_Comm_free(comm));
}

int tmpi_comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out)
{
    INJECT("MPI_Comm_split");
    LOCKED(MPI_Comm_split(comm, color, key, out));
}

int tmpi_query_thread(int *provided)
{
    INJECT("MPI_Query_thread");
    LOCKED(MPI_Query_thread(provided));
}

/* MPI_T: the string value of control variable `name`. Not counted, never
 * injected: what it answers only picks a path (mpi_shm.c). MPI_T is
 * initialised at MPI's own thread level: Open MPI 4.1 sets MPI's level to
 * the one MPI_T_init_thread is asked for, so asking for less made the
 * next MPI_Query_thread answer MPI_THREAD_SINGLE (and the next attach of
 * the process refuse MPI). */
static int cvar_string(const char *name, char *out, int len)
{
    int provided = 0, idx = -1, count = 0, level = MPI_THREAD_SINGLE;
    int rc = MPI_Query_thread(&level);
    if (rc == MPI_SUCCESS)
        rc = MPI_T_init_thread(level, &provided);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = MPI_T_cvar_get_index(name, &idx);
    MPI_T_cvar_handle h = MPI_T_CVAR_HANDLE_NULL;
    if (rc == MPI_SUCCESS)
        rc = MPI_T_cvar_handle_alloc(idx, NULL, &h, &count);
    if (rc == MPI_SUCCESS) {
        char *buf = calloc((size_t)(count > 0 ? count : 1) + 1, 1);
        rc = buf ? MPI_T_cvar_read(h, buf) : MPI_ERR_NO_MEM;
        if (rc == MPI_SUCCESS)
            snprintf(out, (size_t)len, "%s", buf);
        free(buf);
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return rc;
}

int tmpi_cvar_string(const char *name, char *out, int len)
{
    out[0] = 0;
    lock_mu();
    int rc = cvar_string(name, out, len);
    pthread_mutex_unlock(&mpi_mu);
    return rc;
}

int tmpi_type_contiguous(int count, MPI_Datatype old, MPI_Datatype *out)
{
    INJECT("MPI_Type_contiguous");
    LOCKED(MPI_Type_contiguous(count, old, out));
}

int tmpi_type_create_resized(MPI_Datatype old, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *out)
{
    INJECT("MPI_Type_create_resized");
    LOCKED(MPI_Type_create_resized(old, lb, extent, out));
}

int tmpi_type_commit(MPI_Datatype *t)
{
    INJECT("MPI_Type_commit");
    LOCKED(MPI_Type_commit(t));
}

int tmpi_type_free(MPI_Datatype *t)
{
    INJECT("MPI_Type_free");
    LOCKED(MPI_Type_free(t));
}

int tmpi_op_create(MPI_User_function *f, int commute, MPI_Op *op)
{
    INJECT("MPI_Op_create");
    LOCKED(MPI_Op_create(f, commute, op));
}

int tmpi_op_free(MPI_Op *op)
{
    INJECT("MPI_Op_free");
    LOCKED(MPI_Op_free(op));
}

int tmpi_iallgather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                    MPI_Comm comm, MPI_Request *req)
{
    INJECT("MPI_Allgather");
    LOCKED(MPI_Iallgather(send, scount, stype, recv, rcount, rtype, comm, req));
}

int tmpi_iallreduce(const void *send, void *recv, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                    MPI_Request *req)
{
    INJECT("MPI_Allreduce");
    LOCKED(MPI_Iallreduce(send, recv, count, dt, op, comm, req));
}

int tmpi_ireduce_scatter(const void *send, void *recv, const int *rcounts, MPI_Datatype dt, MPI_Op op,
                         MPI_Comm comm, MPI_Request *req)
{
    INJECT("MPI_Reduce_scatter");
    LOCKED(MPI_Ireduce_scatter(send, recv, rcounts, dt, op, comm, req));
}

int tmpi_igather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                 int root, MPI_Comm comm, MPI_Request *req)
{
    INJECT("MPI_Gather");
    LOCKED(MPI_Igather(send, scount, stype, recv, rcount, rtype, root, comm, req));
}

int tmpi_isend_data(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    INJECT("MPI_Isend");
    LOCKED(MPI_Isend(buf, count, dt, dest, tag, comm, req));
}

int tmpi_irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Request *req)
{
    INJECT("MPI_Irecv");
    LOCKED(MPI_Irecv(buf, count, dt, src, tag, comm, req));
}

/* The heartbeat's own calls are not counted nor injected: how many a run
 * makes depends on timing, and TESSEL_FAIL_MPI_AFTER must name the same
 * call on every run. */
int tmpi_test(MPI_Request *req, int *done)
{
    LOCKED(MPI_Test(req, done, MPI_STATUS_IGNORE));
}

int tmpi_isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    LOCKED(MPI_Isend(buf, count, dt, dest, tag, comm, req));
}

int tmpi_improbe_recv(void *buf, int count, MPI_Datatype dt, MPI_Comm comm, int *got, MPI_Status *status)
{
    lock_mu();
    MPI_Message msg;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, got, &msg, status);
    if (rc == MPI_SUCCESS && *got)
        rc = MPI_Mrecv(buf, count, dt, &msg, status);
    pthread_mutex_unlock(&mpi_mu);
    return rc;
}

int tmpi_request_free(MPI_Request *req)
{
    LOCKED(MPI_Request_free(req));
}
