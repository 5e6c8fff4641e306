/*
 * mpi_world.c: one MPI rank per host: the world (init, attach, end), the
 * run's tuning from rank 0, agreement on failures before anything blocks,
 * and statistics across ranks. The transport coll/'s leader devices use is
 * mpi_transport.c and mpi_pipeline.c; the heartbeat mpi_heartbeat.c
 * (mpi_internal.h). What a run agrees on and gathers (its program, its
 * outputs) is the runtime's: runtime/mpi_agree.c and mpi_gather.c, over
 * coll_mpi_gather.
 *
 * Every MPI call goes through the thin layer of mpi_layer.h (so a test can
 * make the Nth one fail) and its result is checked (the communicator's
 * error handler is MPI_ERRORS_RETURN); a failed call is an IR_ERUNTIME
 * naming the rank and the MPI function ("rank 1: MPI_Gather failed: ...").
 *
 * A collective that fails on one rank leaves its peers waiting in it (or
 * in the next one): the job cannot go on. The functions here that return a
 * status leave ending the job to their caller (coll_mpi_abort, as
 * `tessel run` does after a failed run or gather); the agreement functions,
 * whose whole point is that every rank leaves them knowing the same thing,
 * end the job themselves when they cannot agree.
 *
 * Thread level: the host's leader device thread makes the MPI calls while
 * the main thread waits, so MPI_THREAD_SERIALIZED is what is needed.
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

/* "rank R: CALL failed: MPI's text for rc", marked when the failure was
 * injected (mpi_layer.h) so a test's message cannot be mistaken for a
 * real MPI error. */
IrStatus cmpi_fail(IrDiag *d, int rc, const char *call, int rank)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (tmpi_error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    const char *inj = coll_mpi_injected_call();
    bool injected = inj && strcmp(inj, call) == 0;
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: %s failed: %s%s", rank, call, msg,
                    injected ? " (injected: fail_mpi_after)" : "");
}

/* A collective failed where every rank must leave knowing the same thing:
 * say why and end the job (never returns). */
void cmpi_fail_collective(CollMpi *t, int rc, const char *call, const char *what)
{
    IrDiag d = {0};
    cmpi_fail(&d, rc, call, t->rank);
    char line[MPI_MAX_ERROR_STRING + 256];
    snprintf(line, sizeof line, "tessel: error: %s (%s); ending the job\n", d.msg ? d.msg : call, what);
    ir_diag_clear(&d);
    coll_mpi_abort(t, line);
}

/* The message shapes of tuning `c` (NULL: the defaults). */
void cmpi_set_shapes(CollMpi *t, const CollTuning *c)
{
    t->piece = coll_piece_bytes(c);
    t->pipe_min = coll_pipeline_bytes(c);
    t->chunk_combine = coll_chunk_bytes(c, true);
    t->chunk_plain = coll_chunk_bytes(c, false);
    /* A run that shapes MPI's messages asks for them: no shared memory
     * (mpi_shm.c). */
    t->shm_allowed = !c || (c->piece_bytes == 0 && c->chunk_bytes == 0 && c->pipeline_bytes == 0);
}

/* tessel's own communicator on the caller's group (a duplicate, so that
 * its traffic never matches the caller's messages and its error handler
 * is its own), the reduction ops and datatype. `rank` names this process
 * in messages until MPI_Comm_rank answers. */
static IrStatus attach(MPI_Comm comm, int rank, bool owns_mpi, CollMpi **out, IrDiag *d)
{
    CollMpi *t = ts_calloc(1, sizeof *t);
    if (!t)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", rank);
    t->comm = t->hb_comm = MPI_COMM_NULL;
    t->abort_comm = comm;
    t->rank = rank;
    t->owns_mpi = owns_mpi;
    cmpi_set_shapes(t, NULL);
    t->base = cmpi_transport;
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
    MPI_User_function *hf[4] = {cmpi_user_add, cmpi_user_mul, cmpi_user_max, cmpi_user_min};
    for (int k = 0; k < 4; k++)
        MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(hf[k], 1, &t->user[0][k]));
    MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(cmpi_user_max, 1, &t->fmax));
    MPI_TRY(d, t, "MPI_Op_create", tmpi_op_create(cmpi_user_min, 1, &t->fmin));
    return IR_OK;
}

IrStatus coll_mpi_init(int *argc, char ***argv, const CollTuning *tune, CollMpi **out, IrDiag *d)
{
    *out = NULL;
    /* Until MPI_Comm_rank answers, messages use the launcher's rank. */
    int env_rank = coll_launcher_rank(), provided = 0;
    coll_mpi_inject(tune, env_rank);
    int rc = tmpi_init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        /* MPI_Error_string is not allowed before MPI_Init (Open MPI aborts). */
        const char *inj = coll_mpi_injected_call();
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "rank %d: MPI_Init_thread failed: MPI error %d%s",
                        env_rank, rc, inj && strcmp(inj, "MPI_Init_thread") == 0 ? " (injected: fail_mpi_after)" : "");
    }
    /* MPI_COMM_WORLD's errors return from here on: attach's own calls
     * (the dup included) must report, not abort. */
    rc = tmpi_comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        CollMpi *t = ts_calloc(1, sizeof *t);
        if (t) {
            t->comm = t->hb_comm = MPI_COMM_NULL;
            t->abort_comm = MPI_COMM_WORLD;
            t->rank = env_rank;
            t->owns_mpi = true;
        }
        *out = t;
        return cmpi_fail(d, rc, "MPI_Comm_set_errhandler", env_rank);
    }
    return attach(MPI_COMM_WORLD, env_rank, true, out, d);
}

IrStatus coll_mpi_attach(const void *comm, CollMpi **out, IrDiag *d)
{
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "MPI is not initialised: call MPI_Init_thread before running on a communicator");
    return attach(*(const MPI_Comm *)comm, coll_launcher_rank(), false, out, d);
}

CollTransport *coll_mpi_transport(CollMpi *t)
{
    return t ? &t->base : NULL;
}

int coll_mpi_rank(const CollMpi *t)
{
    return t->rank;
}

int coll_mpi_size(const CollMpi *t)
{
    return t->size;
}

/* Free one op / the datatype if it was created; the first failure is kept
 * in *st (later frees still run). */
static void free_op(CollMpi *t, MPI_Op *op, IrStatus *st, IrDiag *d)
{
    if (*op == MPI_OP_NULL || !*op)
        return;
    int rc = tmpi_op_free(op);
    *op = MPI_OP_NULL;
    if (rc != MPI_SUCCESS && *st == IR_OK)
        *st = cmpi_fail(d, rc, "MPI_Op_free", t->rank);
}

IrStatus coll_mpi_release(CollMpi *t, IrDiag *d)
{
    IrStatus st = IR_OK;
    for (int32_t k = 0; k < t->ngcomm; k++) {
        GroupComm *g = &t->gcomm[k];
        if (g->comm != MPI_COMM_NULL) {
            int rc = tmpi_comm_free(&g->comm);
            g->comm = MPI_COMM_NULL;
            if (rc != MPI_SUCCESS && st == IR_OK)
                st = cmpi_fail(d, rc, "MPI_Comm_free", t->rank);
        }
        ts_free(g->color);
    }
    ts_free(t->gcomm);
    t->gcomm = NULL;
    t->ngcomm = 0;
    ir_big_free(t->slots);
    t->slots = NULL;
    t->nslots = 0;
    cmpi_shm_release(t);
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
            st = cmpi_fail(d, rc, "MPI_Type_free", t->rank);
    }
    return st;
}

IrStatus coll_mpi_end(CollMpi *t, IrDiag *d)
{
    if (!t)
        return IR_OK;
    coll_mpi_heartbeat_stop(t);
    IrStatus st = coll_mpi_release(t, d);
    int rank = t->rank;
    bool owns = t->owns_mpi;
    bool freed = true;
    if (t->hb_comm != MPI_COMM_NULL) {
        int rc = tmpi_comm_free(&t->hb_comm);
        freed = rc == MPI_SUCCESS;
        if (!freed && st == IR_OK)
            st = cmpi_fail(d, rc, "MPI_Comm_free", rank);
    }
    if (freed && t->comm != MPI_COMM_NULL) {
        int rc = tmpi_comm_free(&t->comm);
        freed = rc == MPI_SUCCESS;
        if (!freed && st == IR_OK)
            st = cmpi_fail(d, rc, "MPI_Comm_free", rank);
    }
    double guard = t->hb.seconds;
    ts_free(t);
    /* A rank that could not free its communicator does not finalize: it
     * exits, and mpirun ends the ranks that wait in MPI_Finalize for it
     * (so rank 0 does not write the outputs of a run that failed; Open
     * MPI's finalize has once let rank 0 through first: RELIABILITY.md). */
    if (owns && freed) {
        /* MPI_Finalize waits for every rank, after the heartbeat stopped:
         * a rank lost cmpi_now must not hold the others forever. */
        Watchdog w;
        cmpi_watchdog_arm(&w, guard, rank, "MPI_Finalize");
        int rc = tmpi_finalize();
        cmpi_watchdog_disarm(&w);
        if (rc != MPI_SUCCESS && st == IR_OK)
            st = cmpi_fail(d, rc, "MPI_Finalize", rank);
    }
    return st;
}

/* ---- the run's tuning, rank 0's ---- */

IrStatus coll_mpi_tune(CollMpi *t, CollTuning *tune, IrDiag *d)
{
    enum { N = 7 };
    CollTuning c = tune ? *tune : (CollTuning){0};
    int64_t mine[N] = {c.piece_bytes, c.chunk_bytes, c.pipeline_bytes, c.copies_bytes, c.stream_bound, c.fusion,
                       c.fusion_block};
    int64_t *all = ts_malloc((size_t)t->size * sizeof mine);
    if (!all)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    /* Not a collective of the program: neither checked in nor skipped. */
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = tmpi_iallgather(mine, N, MPI_INT64_T, all, N, MPI_INT64_T, t->comm, &req);
    if (rc == MPI_SUCCESS)
        rc = cmpi_finish(t, &req);
    c.piece_bytes = all[0];
    c.chunk_bytes = all[1];
    c.pipeline_bytes = all[2];
    c.copies_bytes = all[3];
    c.stream_bound = (int32_t)all[4];
    c.fusion = (int32_t)all[5];
    c.fusion_block = (int32_t)all[6];
    ts_free(all);
    if (rc != MPI_SUCCESS)
        return cmpi_fail(d, rc, "MPI_Allgather", t->rank);
    cmpi_set_shapes(t, &c);
    if (tune)
        *tune = c;
    return IR_OK;
}

void coll_mpi_abort(CollMpi *t, const char *msg)
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
int coll_mpi_agree(CollMpi *t, bool ok)
{
    int mine = ok ? INT_MAX : t->rank, first = INT_MAX, rc;
    COLLECTIVE(t, CK_AGREE, 1, 0, rc, tmpi_iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, t->comm, &req_));
    if (rc != MPI_SUCCESS)
        cmpi_fail_collective(t, rc, "MPI_Allreduce", "agreeing whether every rank is fine");
    return first == INT_MAX ? -1 : first;
}

int coll_mpi_max(CollMpi *t, int value)
{
    int out = value, rc;
    COLLECTIVE(t, CK_MAX, 1, 0, rc, tmpi_iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, t->comm, &req_));
    if (rc != MPI_SUCCESS)
        cmpi_fail_collective(t, rc, "MPI_Allreduce", "agreeing on the exit status");
    return out;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rank 0 may fail to allocate where the others cannot know it: agree
 * first, so that either every rank gathers or none does. */
bool coll_mpi_phase_stats(CollMpi *t, const double *mine, int nphase, double *min, double *median, double *max)
{
    double *all = t->rank == 0 ? ts_malloc((size_t)nphase * (size_t)t->size * sizeof(double)) : NULL;
    if (coll_mpi_agree(t, t->rank != 0 || all) >= 0) {
        ts_free(all);
        return false;
    }
    int rc;
    COLLECTIVE(t, CK_STATS, nphase, 0, rc, tmpi_igather(mine, nphase, MPI_DOUBLE, all, nphase, MPI_DOUBLE, 0, t->comm, &req_));
    if (rc != MPI_SUCCESS) {
        ts_free(all);
        cmpi_fail_collective(t, rc, "MPI_Gather", "gathering statistics");
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

