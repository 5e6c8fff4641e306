/*
 * mpi_internal.h: what the files of coll/'s MPI transport share (coll-
 * internal; only the coll/mpi_*.c files include it): the transport's
 * state (CollMpi), the checked-call macros, the heartbeat's check-ins and
 * the polling wait, the communicators of groups of hosts. What the rest of
 * the library may call is in coll.h ("The MPI transport").
 *
 *   mpi_world.c      the world: init, attach, end, the tuning from rank 0,
 *                    agreement on failures, statistics across ranks
 *   mpi_heartbeat.c  the heartbeat, check-ins, the polling wait, a watchdog
 *   mpi_transport.c  coll/'s CollTransport over MPI: all-gather, all-reduce
 *                    (built-in and any reducer), reduce-scatter, point to
 *                    point, gathers of any size, group communicators
 *   mpi_pipeline.c   large buffers point to point in chunks (all-reduce,
 *                    reduce-scatter, all-gather, all-to-all)
 *   mpi_shm.c        the all-reduce through shared memory where every rank
 *                    is on one host
 *   mpi_layer.c      every MPI call, with failure injection (mpi_layer.h)
 */
#ifndef TESSEL_MPI_INTERNAL_H
#define TESSEL_MPI_INTERNAL_H

#include "coll.h"
#include "mpi_layer.h"

#include <pthread.h>
#include <stdio.h>

/* Check-ins remembered per rank (a peer may run ahead of this rank by a
 * few collectives: a gather's senders cmpi_finish before its root), and sends
 * in flight per peer. */
enum { RING = 64, NSLOT = 32, TAG_BEAT = 1, TAG_CHECKIN = 2, TAG_BYE = 3 };

/* A check-in: what (kind and size: cmpi_checkin_code) and its detail (the
 * reducer and element type of a reduction: cmpi_checkin_detail; 0 none). */
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
    bool *bye;               /* [size]: the peer's last message came (coll_mpi_heartbeat_stop) */
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
void cmpi_watchdog_arm(Watchdog *w, double seconds, int rank, const char *call);
void cmpi_watchdog_disarm(Watchdog *w);

/* The communicator of one partition of the hosts into groups (a
 * collective's replica groups seen from the hosts: coll_host_colors),
 * created with MPI_Comm_split on first use and kept for the run. */
typedef struct GroupComm {
    int32_t *color;          /* [size]: every host's group (-1: alone) */
    MPI_Comm comm;           /* this host's group; MPI_COMM_NULL when alone */
} GroupComm;

struct CollMpi {
    CollTransport base;      /* the collectives' interface (coll.h); first, so that a CollTransport * is an CollMpi * */
    MPI_Comm comm;           /* tessel's duplicate of the caller's communicator */
    GroupComm *gcomm;        /* host partitions seen so far (coll_mpi_release frees them) */
    int32_t ngcomm;
    int64_t sent[COLL_XK_COUNT], received[COLL_XK_COUNT]; /* bytes of collectives' data (coll_mpi_bytes) */
    MPI_Comm hb_comm;        /* a second one, for beats and check-ins */
    Heartbeat hb;
    MPI_Comm abort_comm;     /* what MPI_Abort ends: comm, or the caller's before the dup exists */
    bool owns_mpi;           /* coll_mpi_init initialised MPI: coll_mpi_end finalizes it */
    int rank, size;
    MPI_Datatype half;       /* 2-byte elements (f16, bf16) for user ops */
    MPI_Op user[2][4];       /* [f16|bf16][add, mul, max, min] */
    MPI_Op fmax, fmin;       /* NaN-propagating max/min for f32/f64 */
    MPI_Op any[2];           /* any reducer (any_op): [not commutative | commutative], made on first use */
    uint8_t *slots;          /* the pipeline's receive slots, kept warm for the run (ir_big_alloc) */
    /* Message shapes from the run's tuning, rank 0's (coll_mpi_tune). */
    size_t piece, pipe_min, chunk_combine, chunk_plain;
    size_t nslots;           /* their bytes */
    /* The shared-memory all-reduce (mpi_shm.c): the segment, its size and
     * each rank's region's, the calls through it; shm_state 0 not yet
     * looked at, 1 every rank on one host, -1 not usable (for good);
     * shm_allowed: message shapes at their defaults (cmpi_set_shapes). */
    uint8_t *shm;
    size_t shm_bytes, shm_region;
    int64_t shm_seq, shm_calls;
    int8_t shm_state;
    bool shm_allowed;
};

/* The CollTransport of an CollMpi (defined at the end). */

/* "rank R: CALL failed: MPI's text for rc" (marked when injected). */
IrStatus cmpi_fail(IrDiag *d, int rc, const char *call, int rank);
/* Run an MPI call (a tmpi_* wrapper) named NAME; return its failure. */
#define MPI_TRY(d, t, name, call)                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != MPI_SUCCESS)                                               \
            return cmpi_fail((d), rc_, (name), (t)->rank);                     \
    } while (0)
/* A collective failed where every rank must leave knowing the same thing:
 * say why and end the job (never returns). */
void cmpi_fail_collective(CollMpi *t, int rc, const char *call, const char *what);
/* The message shapes of tuning c (NULL: the defaults). */
void cmpi_set_shapes(CollMpi *t, const CollTuning *c);
double cmpi_now(void);

/* ---- mpi_heartbeat.c ---- */
enum { CK_DEVICE_CALL = 1, CK_ALLGATHER, CK_ALLREDUCE, CK_GATHER, CK_AGREE, CK_MAX, CK_STATS, CK_SPLIT, CK_P2P,
       CK_REDUCE_SCATTER };
int64_t cmpi_checkin_code(int kind, int64_t size);
/* The detail of a reduction's check-in: its reducer (a built-in opcode)
 * and element type; cmpi_checkin_reducer for any other reducer (a digest
 * of its computation's instructions). Never 0. */
int64_t cmpi_checkin_detail(IrOpcode op, IrType ty);
int64_t cmpi_checkin_reducer(const CollReducer *red, IrType ty);
/* This rank reached a collective (code and detail say which): tell every
 * peer. */
void cmpi_checkin(CollMpi *t, int64_t code, int64_t detail);
/* Read what peers sent (heartbeat lock held). */
void cmpi_hb_drain(CollMpi *t);
/* A waiting rank's turns without progress (backoff). */
typedef struct CmpiBackoff {
    int spins;
    double since;            /* when this wait began (its first turn) */
} CmpiBackoff;
void cmpi_backoff(CmpiBackoff *b);
/* A waiting turn without progress: the heartbeat's messages read every
 * 16 turns, then cmpi_backoff. */
void cmpi_idle(CollMpi *t, CmpiBackoff *b);
/* Wait for req and for every peer's check-in at this collective. */
int cmpi_finish(CollMpi *t, MPI_Request *req);
/* A deadline on one blocking call (MPI_Finalize). */
void cmpi_watchdog_arm(Watchdog *w, double seconds, int rank, const char *call);
void cmpi_watchdog_disarm(Watchdog *w);
/* One collective: the check-in, the skip of skip_collective_after, the
 * call (`post`'s non-blocking one), then its wait. */
#define COLLECTIVE(t, kind, size, detail, rc, post)                           \
    do {                                                                      \
        if (coll_mpi_skip_collective()) {                                       \
            (rc) = MPI_SUCCESS;                                               \
            break;                                                            \
        }                                                                     \
        cmpi_checkin((t), cmpi_checkin_code((kind), (size)), (detail));         \
        MPI_Request req_ = MPI_REQUEST_NULL;                                  \
        (rc) = (post);                                                        \
        if ((rc) == MPI_SUCCESS)                                              \
            (rc) = cmpi_finish((t), &req_);                                    \
    } while (0)
/* The check-in of a collective of several MPI calls, or false when it is
 * skipped (as COLLECTIVE). */
bool cmpi_begin_collective(CollMpi *t, int kind, int64_t size, int64_t detail);

/* ---- mpi_transport.c ---- */
/* The piece (coll_piece_bytes of the run's tuning, rank 0's). */
#define MPI_PIECE (t->piece)
extern const CollTransport cmpi_transport;
void cmpi_user_add(void *in, void *inout, int *len, MPI_Datatype *dt);
void cmpi_user_mul(void *in, void *inout, int *len, MPI_Datatype *dt);
void cmpi_user_max(void *in, void *inout, int *len, MPI_Datatype *dt);
void cmpi_user_min(void *in, void *inout, int *len, MPI_Datatype *dt);
bool cmpi_op_for(CollMpi *t, IrType ty, IrOpcode op, MPI_Datatype *dt, MPI_Op *mop);
void cmpi_count_bytes(CollMpi *t, CollXferKind kind, int64_t sent, int64_t received);
IrStatus cmpi_group_comm(CollMpi *t, const int32_t *color, MPI_Comm *comm, int *k, IrDiag *d);
IrStatus cmpi_allgather_in(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                          size_t bytes, void *recv, IrDiag *d);

/* ---- mpi_pipeline.c ---- */
IrStatus cmpi_allreduce_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                            const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty, IrOpcode op,
                            IrDiag *d);
IrStatus cmpi_reduce_scatter_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                 const void *src, void *dst, int64_t count, IrType ty, IrOpcode op, IrDiag *d);
IrStatus cmpi_allgather_into(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                            size_t bytes, void *recv, bool stream, IrDiag *d);
IrStatus cmpi_alltoall_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                         const void *send, void *recv, size_t bytes, bool stream, IrDiag *d);

/* ---- mpi_shm.c ---- */
/* The shared-memory all-reduce takes `bytes` (made ready now, collectively,
 * where needed: every rank calls it at the same all-reduce). MPI failures
 * in *rc. */
bool cmpi_shm_usable(CollMpi *t, size_t bytes, int *rc);
/* The all-reduce of the world's ranks through the segment; list: k
 * pointers of scratch. */
void cmpi_shm_allreduce(CollMpi *t, const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                        IrOpcode op, const void **list);
void cmpi_shm_release(CollMpi *t);

#endif /* TESSEL_MPI_INTERNAL_H */
