/*
 * mpi_layer.h: the one door through which tessel calls MPI, so that a test
 * can make the Nth MPI call fail (coll-internal; the MPI transport's
 * files, through mpi_internal.h, and api/run_mpi.c, for the MPI_Comm type
 * of the caller's communicator, are its only users).
 *
 * Every tmpi_* function is a thin wrapper with the arguments and the
 * return value of the MPI function it names (tmpi_iallreduce ->
 * MPI_Iallreduce), called under one lock (MPI_THREAD_SERIALIZED: the
 * heartbeat thread and the devices' leader both call MPI, never at
 * once). Before calling MPI it counts the call (an atomic
 * counter: the host's leader device thread and the main thread both make
 * calls) and asks the failure-injection hook whether this call is the one
 * to fail; if so it returns MPI_ERR_OTHER *without calling MPI*. For a
 * collective that means the failing rank never enters it while its peers
 * do: the job must then end (coll_mpi_abort after a failed collective:
 * coll.h, "The MPI transport"), never wait for it.
 *
 * Injection, in the style of ts_fail_alloc_after (ir/arena.c):
 *   coll_mpi_fail_after(n)   the n-th MPI call from now fails (n = 1: the
 *                          next one); 0 switches injection off. One shot:
 *                          the calls after the failing one (the error
 *                          path's MPI_Error_string and MPI_Abort included)
 *                          go to MPI.
 *   CollTuning.fail_mpi_after = N (TsTuning; the command line's
 *                          TESSEL_FAIL_MPI_AFTER): the same, armed once by
 *                          coll_mpi_inject at the start of coll_mpi_init, so
 *                          N = 1 fails MPI_Init_thread itself. For e2e
 *                          tests under mpirun.
 *   .fail_one_rank, .fail_rank = R (TESSEL_FAIL_MPI_RANK): only the
 *                          process whose launcher rank (coll_launcher_rank)
 *                          is R injects; else every rank does.
 *   .skip_collective_after = N (TESSEL_SKIP_COLLECTIVE_AFTER): the N-th
 *                          collective tessel makes (data moved between
 *                          hosts, agreements, gathers: mpi_internal.h's COLLECTIVE counts, 1 the
 *                          first) is skipped on this rank (fail_rank
 *                          selects it as above): it returns as if done
 *                          without entering MPI or checking in, a rank
 *                          whose control flow took another path. Its peers
 *                          must see the ranks diverge and end the job
 *                          (mpi_heartbeat.c's check-ins), never wait forever.
 * The injected call's name is kept (coll_mpi_injected_call) so messages can
 * say the failure was injected, and every call is counted
 * (coll_mpi_call_count) so a test can learn how many calls a clean run
 * makes and walk N over all of them.
 */
#ifndef TESSEL_MPI_LAYER_H
#define TESSEL_MPI_LAYER_H

#include "coll.h"

#include <mpi.h>
#include <stdbool.h>

/* ---- failure injection ---- */

/* The n-th MPI call from now returns MPI_ERR_OTHER without calling MPI
 * (n <= 0: never). Can't fail. */
void coll_mpi_fail_after(long n);
/* MPI calls made through the layer so far (failed ones included). */
long coll_mpi_call_count(void);
/* How long the MPI call in progress (another thread's, under the layer's
 * lock) has run, in seconds, and its text in *call; 0 when none is. The
 * heartbeat's way to see its rank stuck inside MPI. Can't fail. */
double coll_mpi_busy_seconds(const char **call);
/* For the calling thread only (the heartbeat's): its calls wait for the
 * layer's lock only while the call holding it has run at most `seconds`;
 * past that, stuck(ctx) is called, which must not return (it ends the
 * job). So the thread watching for a stuck call never waits behind it
 * forever. stuck NULL: wait forever (every thread's default). */
void coll_mpi_watch_lock(double seconds, void (*stuck)(void *ctx), void *ctx);
/* How many calls from now the armed failure is (1: the next call), 0 when
 * none is armed. */
long coll_mpi_fail_pending(void);
/* The name of the MPI function whose call was failed by injection
 * ("MPI_Allreduce"), or NULL when none was. Static text. */
const char *coll_mpi_injected_call(void);
/* Arm the failure injection of `tune` (its fail_mpi_after,
 * skip_collective_after, and with fail_one_rank only where fail_rank is
 * `launcher_rank`) once per process; later calls and NULL do nothing. */
void coll_mpi_inject(const CollTuning *tune, int launcher_rank);
/* The n-th collective from now is skipped (n <= 0: none); whether this
 * collective is the one (counts it down). */
void coll_mpi_skip_collective_after(long n);
bool coll_mpi_skip_collective(void);
/* The n-th call from now of the MPI function `name` ("MPI_Iallreduce",
 * static text) never returns: it sleeps inside the layer's lock, as a
 * call stuck inside MPI would (n <= 0: none). For the test of the
 * heartbeat's end of a rank stuck inside one call
 * (tests/unit/mpi_stuck_main.c); no option of the library or the
 * command line reaches it. */
void coll_mpi_hang_in(const char *name, long n);
/* ---- the wrappers: same arguments and results as MPI_* ---- */

int tmpi_init_thread(int *argc, char ***argv, int required, int *provided);
int tmpi_finalize(void);
int tmpi_abort(MPI_Comm comm, int code);
int tmpi_error_string(int code, char *msg, int *len);
int tmpi_comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h);
int tmpi_comm_rank(MPI_Comm comm, int *rank);
int tmpi_comm_size(MPI_Comm comm, int *size);
int tmpi_comm_dup(MPI_Comm comm, MPI_Comm *out);
int tmpi_comm_free(MPI_Comm *comm);
/* Blocking (MPI has no non-blocking split): mpi_transport.c calls it only after
 * every rank has checked in at the split, so no rank waits in it for a
 * peer that is elsewhere. */
int tmpi_comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out);
int tmpi_query_thread(int *provided);
/* The string value of MPI's control variable `name` (MPI_T; Open MPI's MCA
 * parameters, "btl"), "" where it has none; not counted, never injected. */
int tmpi_cvar_string(const char *name, char *out, int len);
int tmpi_type_contiguous(int count, MPI_Datatype old, MPI_Datatype *out);
int tmpi_type_create_resized(MPI_Datatype old, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *out);
int tmpi_type_commit(MPI_Datatype *t);
int tmpi_type_free(MPI_Datatype *t);
int tmpi_op_create(MPI_User_function *f, int commute, MPI_Op *op);
int tmpi_op_free(MPI_Op *op);
/* Collectives are non-blocking only (no call may block forever: mpi_heartbeat.c
 * polls them with tmpi_test), counted and injected under the names of the
 * MPI functions they stand for ("MPI_Allreduce"). */
int tmpi_iallgather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                    MPI_Comm comm, MPI_Request *req);
int tmpi_iallreduce(const void *send, void *recv, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                    MPI_Request *req);
int tmpi_ireduce_scatter(const void *send, void *recv, const int *rcounts, MPI_Datatype dt, MPI_Op op,
                         MPI_Comm comm, MPI_Request *req);
int tmpi_igather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                 int root, MPI_Comm comm, MPI_Request *req);
/* Point to point data of a collective between the hosts that hold its
 * sources and targets (counted and injected as "MPI_Isend" /
 * "MPI_Irecv", polled like the collectives). */
int tmpi_isend_data(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req);
int tmpi_irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Request *req);
/* The heartbeat's calls (mpi_heartbeat.c), neither counted nor injected. */
int tmpi_test(MPI_Request *req, int *done);
int tmpi_isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req);
/* A message from any rank with any tag on comm, if one is there (*got):
 * MPI_Improbe then MPI_Mrecv, under the layer's lock. */
int tmpi_improbe_recv(void *buf, int count, MPI_Datatype dt, MPI_Comm comm, int *got, MPI_Status *status);
int tmpi_request_free(MPI_Request *req);

#endif /* TESSEL_MPI_LAYER_H */
