/*
 * mpi_internal.h: what the files of runtime/'s MPI transport share
 * (runtime-internal; only mpi_world.c, mpi_heartbeat.c, mpi_transport.c,
 * mpi_pipeline.c and mpi_agree.c include it): the transport's state, the checked-call
 * macros, the heartbeat's check-ins and the polling wait, the
 * communicators of groups of hosts.
 *
 *   mpi_world.c      the world: init, attach, end, the tuning from rank 0,
 *                    agreement, gathers of outputs, statistics
 *   mpi_heartbeat.c  the heartbeat, check-ins, the polling wait, a watchdog
 *   mpi_transport.c  coll/'s CollTransport over MPI: all-gather, all-reduce
 *                    (built-in and any reducer), reduce-scatter, point to
 *                    point, pieces of any size, group communicators
 *   mpi_pipeline.c   large buffers point to point in chunks (all-reduce,
 *                    reduce-scatter, all-gather, all-to-all)
 *   mpi_agree.c      the ranks agree on what they run (a record of named
 *                    fields, all-gathered and compared with rank 0's)
 */
#ifndef TESSEL_MPI_INTERNAL_H
#define TESSEL_MPI_INTERNAL_H

#include "../coll/coll.h"
#include "mpi_layer.h"
#include "transport.h"

#include <pthread.h>
#include <stdio.h>

/* Check-ins remembered per rank (a peer may run ahead of this rank by a
 * few collectives: a gather's senders rtm_finish before its root), and sends
 * in flight per peer. */
enum { RING = 64, NSLOT = 32, TAG_BEAT = 1, TAG_CHECKIN = 2 };

/* A check-in: what (kind and size: rtm_checkin_code) and its detail (the
 * reducer and element type of a reduction: rtm_checkin_detail; 0 none). */
typedef struct Checkin {
    int64_t code, detail;
} Checkin;

typedef struct Slot {
    MPI_Request req;
    int64_t msg[3];          /* {check-in number, code, detail} ({0, 0, 0}: a beat) */
} Slot;

/* The heartbeat of a transport (RELIABILITY.md, "Stuck jobs"). A thread
 * sends a beat to every peer every `period` seconds and reads theirs; a
 * peer not heard from for `seconds` (stopped, hung in the kernel, its
 * host lost) ends the job, naming it. Every collective is also a
 * check-in: its number and what it is (kind and size) go to every peer,
 * and a collective returns only when every peer has checked in at it
 * with the same thing (kind, size, and for a reduction its reducer and
 * element type), so a rank that skipped a collective, entered another one
 * or reduces with another reducer ends the job (naming the two) instead
 * of deadlocking or mixing data. */
typedef struct Heartbeat {
    bool on;
    pthread_t thread;
    pthread_mutex_t mu;      /* everything below, and reading `hb` */
    pthread_cond_t cv;
    bool stop;
    double seconds, period;
    double *heard;           /* [size]: when each rank was last heard from */
    int64_t seq;             /* this rank's check-ins */
    Checkin hist[RING];      /* what each of the last RING was */
    int64_t *rx_hi, *rx_checked; /* [size]: highest received, highest compared */
    Checkin *rx;             /* [size][RING]: what each peer's check-ins were */
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
void rtm_watchdog_arm(Watchdog *w, double seconds, int rank, const char *call);
void rtm_watchdog_disarm(Watchdog *w);

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

/* "rank R: CALL failed: MPI's text for rc" (marked when injected). */
IrStatus rtm_fail(IrDiag *d, int rc, const char *call, int rank);
/* Run an MPI call (a tmpi_* wrapper) named NAME; return its failure. */
#define MPI_TRY(d, t, name, call)                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != MPI_SUCCESS)                                               \
            return rtm_fail((d), rc_, (name), (t)->rank);                     \
    } while (0)
/* A collective failed where every rank must leave knowing the same thing:
 * say why and end the job (never returns). */
void rtm_fail_collective(RtTransport *t, int rc, const char *call, const char *what);
/* The message shapes of tuning c (NULL: the defaults). */
void rtm_set_shapes(RtTransport *t, const CollTuning *c);
double rtm_now(void);

/* ---- mpi_heartbeat.c ---- */
enum { CK_DEVICE_CALL = 1, CK_ALLGATHER, CK_ALLREDUCE, CK_GATHER, CK_AGREE, CK_MAX, CK_STATS, CK_SPLIT, CK_P2P,
       CK_REDUCE_SCATTER };
int64_t rtm_checkin_code(int kind, int64_t size);
/* The detail of a reduction's check-in: its reducer (a built-in opcode)
 * and element type; rtm_checkin_reducer for any other reducer (a digest
 * of its computation's instructions). Never 0. */
int64_t rtm_checkin_detail(IrOpcode op, IrType ty);
int64_t rtm_checkin_reducer(const CollReducer *red, IrType ty);
/* This rank reached a collective (code and detail say which): tell every
 * peer. */
void rtm_checkin(RtTransport *t, int64_t code, int64_t detail);
/* Read what peers sent (heartbeat lock held). */
void rtm_hb_drain(RtTransport *t);
/* A waiting rank's turns without progress (backoff). */
typedef struct RtmBackoff {
    int spins;
    double since;            /* when this wait began (its first turn) */
} RtmBackoff;
void rtm_backoff(RtmBackoff *b);
/* Wait for req and for every peer's check-in at this collective. */
int rtm_finish(RtTransport *t, MPI_Request *req);
/* A deadline on one blocking call (MPI_Finalize). */
void rtm_watchdog_arm(Watchdog *w, double seconds, int rank, const char *call);
void rtm_watchdog_disarm(Watchdog *w);
/* One collective: the check-in, the skip of skip_collective_after, the
 * call (`post`'s non-blocking one), then its wait. */
#define COLLECTIVE(t, kind, size, detail, rc, post)                           \
    do {                                                                      \
        if (rt_mpi_skip_collective()) {                                       \
            (rc) = MPI_SUCCESS;                                               \
            break;                                                            \
        }                                                                     \
        rtm_checkin((t), rtm_checkin_code((kind), (size)), (detail));         \
        MPI_Request req_ = MPI_REQUEST_NULL;                                  \
        (rc) = (post);                                                        \
        if ((rc) == MPI_SUCCESS)                                              \
            (rc) = rtm_finish((t), &req_);                                    \
    } while (0)
/* The check-in of a collective of several MPI calls, or false when it is
 * skipped (as COLLECTIVE). */
bool rtm_begin_collective(RtTransport *t, int kind, int64_t size, int64_t detail);

/* ---- mpi_transport.c ---- */
/* The piece (coll_piece_bytes of the run's tuning, rank 0's). */
#define MPI_PIECE (t->piece)
extern const CollTransport rtm_transport;
void rtm_user_add(void *in, void *inout, int *len, MPI_Datatype *dt);
void rtm_user_mul(void *in, void *inout, int *len, MPI_Datatype *dt);
void rtm_user_max(void *in, void *inout, int *len, MPI_Datatype *dt);
void rtm_user_min(void *in, void *inout, int *len, MPI_Datatype *dt);
IrStatus rtm_gather_any_size(RtTransport *t, const void *send, size_t bytes, void *recv, int root, IrDiag *d);
bool rtm_op_for(RtTransport *t, IrType ty, IrOpcode op, MPI_Datatype *dt, MPI_Op *mop);
void rtm_count_bytes(RtTransport *t, CollXferKind kind, int64_t sent, int64_t received);
IrStatus rtm_group_comm(RtTransport *t, const int32_t *color, MPI_Comm *comm, int *k, IrDiag *d);
IrStatus rtm_allgather_in(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                          size_t bytes, void *recv, IrDiag *d);
IrStatus rtm_allreduce_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what, void *buf,
                          int64_t count, IrType ty, IrOpcode op, IrDiag *d);

/* ---- mpi_pipeline.c ---- */
IrStatus rtm_allreduce_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                            const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty, IrOpcode op,
                            IrDiag *d);
IrStatus rtm_reduce_scatter_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                 const void *src, void *dst, int64_t count, IrType ty, IrOpcode op, IrDiag *d);
IrStatus rtm_allgather_into(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                            size_t bytes, void *recv, bool stream, IrDiag *d);
IrStatus rtm_alltoall_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                         const void *send, void *recv, size_t bytes, bool stream, IrDiag *d);

#endif /* TESSEL_MPI_INTERNAL_H */
