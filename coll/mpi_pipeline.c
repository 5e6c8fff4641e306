/*
 * mpi_pipeline.c: large buffers between hosts point to point in chunks
 * (all-reduce, reduce-scatter, all-gather, all-to-all of coll/'s
 * CollTransport), the combining of each chunk overlapping the transfers.
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
 * polled as cmpi_finish() polls (a peer that stops or diverges ends the job
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
 * rank 0's on every rank (coll_mpi_tune). */
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
    CollMpi *t;
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
    CollMpi *t = p->t;
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
    CmpiBackoff idle = {0};
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
            cmpi_idle(t, &idle);
    }
    if (rc != MPI_SUCCESS) {
        /* Requests may still be posted (into the slots, which the
         * transport keeps): the caller ends the job. */
        return cmpi_fail(d, rc, p->call ? p->call : "MPI_Wait", t->rank);
    }
    pl_free(p);
    /* Every peer's check-in at this collective, as cmpi_finish() waits for. */
    MPI_Request none = MPI_REQUEST_NULL;
    cmpi_finish(t, &none);
    return IR_OK;
}

/* This host's communicator among its color (cmpi_group_comm), the hosts in
 * it (*k) and this host's rank there (*q: the split keeps host order). */
static IrStatus pl_begin(CollMpi *t, const int32_t *color, MPI_Comm *comm, int *k, int *q, IrDiag *d)
{
    *q = 0;
    for (int r = 0; r < t->rank; r++)
        *q += color[r] == color[t->rank];
    return cmpi_group_comm(t, color, comm, k, d);
}

IrStatus cmpi_allreduce_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                     const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                                     IrOpcode op, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Datatype dt;
    MPI_Op mop;
    if (!cmpi_op_for(t, ty, op, &dt, &mop) || !coll_can_combine(op, ty))
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
    if (!cmpi_begin_collective(t, CK_ALLREDUCE, what, cmpi_checkin_detail(op, ty)))
        return IR_OK;
    /* Every rank on this host, a group of them all: shared memory
     * (mpi_shm.c), not MPI's messages. */
    int shm_rc = MPI_SUCCESS;
    if (pipe && k == t->size && cmpi_shm_usable(t, bytes, &shm_rc)) {
        const void **list = ts_malloc((size_t)k * sizeof *list);
        if (!list)
            return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
        cmpi_shm_allreduce(t, src, nsrc, dst, count, ty, op, list);
        ts_free(list);
        /* Every peer's check-in at this collective, as the pipeline waits for. */
        MPI_Request none = MPI_REQUEST_NULL;
        cmpi_finish(t, &none);
        pipe = false;
        comm = MPI_COMM_NULL;
    }
    MPI_TRY(d, t, "MPI_Allgather", shm_rc);
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
                rc = cmpi_finish(t, &req);
            MPI_TRY(d, t, "MPI_Allreduce", rc);
        }
    }
    if (st != IR_OK)
        return st;
    int64_t moved = k > 1 ? 2 * (k - 1) * count * (int64_t)es / k : 0;
    cmpi_count_bytes(t, kind, moved, moved);
    return IR_OK;
}

IrStatus cmpi_reduce_scatter_into(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                          const void *src, void *dst, int64_t count, IrType ty, IrOpcode op,
                                          IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    if (!coll_can_combine(op, ty))
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0}, "rank %d: no reduction for %s on %s",
                        t->rank, ir_op_name(op), ir_type_name(ty));
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    size_t es = ir_type_size(ty);
    if (!cmpi_begin_collective(t, CK_REDUCE_SCATTER, what, cmpi_checkin_detail(op, ty)))
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
    cmpi_count_bytes(t, kind, moved, moved);
    return IR_OK;
}

/* A byte pipeline (all-gather or all-to-all: no combine) of `count` bytes
 * into recv, `per` from each host, over comm; with no comm (one host) the
 * bytes this host sends are its result. */
static IrStatus byte_pipeline(CollMpi *t, MPI_Comm comm, PlMode mode, int q, int k, int64_t count, int64_t per,
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

IrStatus cmpi_allgather_into(CollTransport *base, const int32_t *color, CollXferKind kind, const void *send,
                                     size_t bytes, void *recv, bool stream, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    /* The same check-ins on every rank: the path depends on bytes alone
     * (the same everywhere), not on this host's color. */
    if (bytes < pipe_min())
        return cmpi_allgather_in(&t->base, color, kind, send, bytes, recv, d);
    if (!cmpi_begin_collective(t, CK_ALLGATHER, (int64_t)bytes, 0))
        return IR_OK;
    st = byte_pipeline(t, comm, PL_ALLGATHER, q, k, (int64_t)bytes * k, (int64_t)bytes, send, recv, bytes, stream, d);
    if (st != IR_OK || comm == MPI_COMM_NULL)
        return st;
    cmpi_count_bytes(t, kind, (int64_t)bytes * (k - 1), (int64_t)bytes * (k - 1));
    return IR_OK;
}

IrStatus cmpi_alltoall_in(CollTransport *base, const int32_t *color, CollXferKind kind, int64_t what,
                                  const void *send, void *recv, size_t bytes, bool stream, IrDiag *d)
{
    CollMpi *t = (CollMpi *)base;
    MPI_Comm comm;
    int k = 1, q = 0;
    IrStatus st = pl_begin(t, color, &comm, &k, &q, d);
    if (st != IR_OK)
        return st;
    if (!cmpi_begin_collective(t, CK_P2P, what, 0))
        return IR_OK;
    st = byte_pipeline(t, comm, PL_ALLTOALL, q, k, (int64_t)bytes, (int64_t)bytes / k, send, recv, bytes, stream, d);
    if (st != IR_OK || comm == MPI_COMM_NULL)
        return st;
    int64_t moved = (int64_t)(bytes / (size_t)k) * (k - 1);
    cmpi_count_bytes(t, kind, moved, moved);
    return IR_OK;
}

