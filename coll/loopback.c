/*
 * loopback.c: the loopback transport: `hosts` simulated hosts as threads
 * of one process, each with a CollTransport of its own, so that every
 * collective's across-hosts step runs in a unit test without mpirun
 * (tests/unit/test_coll_loopback.c: 1 to 8 hosts).
 *
 * Every call is a rendezvous of all the hosts (the interface's contract:
 * every host calls the same function at the same collective, with the
 * same colors): each host posts its arguments, all wait (barrier 1), each
 * computes its own result from the posts of the hosts of its color, in
 * host order, into memory of its own, all wait again (barrier 2: nobody
 * reads a post any more) and each writes its result where it belongs.
 * The combining is the reducer algebra's (dev_red_combine_array; any
 * reducer: dev_red_call), in host order, as the MPI transport combines.
 *
 * Failure: coll_loopback_abort (a simulated host whose run failed) wakes
 * every waiter; that call and every later one returns IR_ERUNTIME.
 */
#include "coll.h"

#include <pthread.h>
#include <string.h>

/* What a host posts at a rendezvous (only the fields of the call). */
typedef struct Post {
    const int32_t *color;
    const void *send;          /* allgather, reduce-scatter, alltoall: the send buffer; allreduce: the data */
    size_t bytes;
    const int64_t *counts;     /* reduce_scatter_in */
    const bool *present;       /* allreduce_any_in */
    const CollXfer *sends;     /* exchange */
    int32_t nsend;
} Post;

typedef struct LbHost {
    CollTransport base;        /* first: a CollTransport * is an LbHost * */
    struct CollLoopback *lb;
    int host;
} LbHost;

struct CollLoopback {
    int hosts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int64_t generation;
    bool aborted;
    Post *post;                /* [hosts] */
    LbHost *host;              /* [hosts] */
};

/* false when the loopback was aborted. */
static bool lb_barrier(CollLoopback *lb)
{
    pthread_mutex_lock(&lb->mu);
    int64_t gen = lb->generation;
    if (!lb->aborted && ++lb->arrived == lb->hosts) {
        lb->arrived = 0;
        lb->generation++;
        pthread_cond_broadcast(&lb->cv);
    }
    while (!lb->aborted && gen == lb->generation)
        pthread_cond_wait(&lb->cv, &lb->mu);
    bool ok = !lb->aborted;
    pthread_mutex_unlock(&lb->mu);
    return ok;
}

static IrStatus lb_fail(IrDiag *d, int host)
{
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "host %d: the loopback was aborted", host);
}

/* Post p, wait for every host's post. */
static IrStatus lb_enter(LbHost *h, const Post *p, IrDiag *d)
{
    h->lb->post[h->host] = *p;
    return lb_barrier(h->lb) ? IR_OK : lb_fail(d, h->host);
}

/* Everyone has read the posts. */
static IrStatus lb_leave(LbHost *h, IrDiag *d)
{
    return lb_barrier(h->lb) ? IR_OK : lb_fail(d, h->host);
}

/* The hosts of h's color in host order (a host of color -1: itself);
 * returns how many, and h's place among them in *q. */
static int lb_members(const LbHost *h, const int32_t *color, int *list, int *q)
{
    int k = 0;
    for (int r = 0; r < h->lb->hosts; r++)
        if (color[h->host] < 0 ? r == h->host : color[r] == color[h->host]) {
            if (r == h->host)
                *q = k;
            list[k++] = r;
        }
    return k;
}

static IrStatus lb_oom(IrDiag *d)
{
    return coll_oom(d);
}

static IrStatus lb_allgather_in(CollTransport *t, const int32_t *color, CollXferKind kind, const void *send,
                                size_t bytes, void *recv, IrDiag *d)
{
    (void)kind;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = send, .bytes = bytes}, d);
    int k = lb_members(h, color, list, &q);
    for (int j = 0; st == IR_OK && j < k; j++)
        if (bytes)
            memcpy((uint8_t *)recv + (size_t)j * bytes, h->lb->post[list[j]].send, bytes);
    return st == IR_OK ? lb_leave(h, d) : st;
}

static IrStatus lb_allgather_into(CollTransport *t, const int32_t *color, CollXferKind kind, const void *send,
                                  size_t bytes, void *recv, bool stream, IrDiag *d)
{
    (void)stream;
    return lb_allgather_in(t, color, kind, send, bytes, recv, d);
}

/* out = op over the color's hosts, in host order, of the count elements
 * at byte offset `off` of each host's post (send). */
static void lb_combine(const LbHost *h, const int *list, int k, size_t off, IrType ty, IrOpcode op, int64_t count,
                       void *out)
{
    size_t es = ir_type_size(ty);
    memcpy(out, (const uint8_t *)h->lb->post[list[0]].send + off, (size_t)count * es);
    for (int j = 1; j < k; j++)
        dev_red_combine_array(op, ty, out, (const uint8_t *)h->lb->post[list[j]].send + off, count);
}

static IrStatus lb_allreduce_in(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what, void *buf,
                                int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    size_t b = (size_t)count * ir_type_size(ty);
    uint8_t *tmp = ts_malloc(b + 1);
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = buf, .bytes = b}, d);
    int k = lb_members(h, color, list, &q);
    if (st == IR_OK && tmp)
        lb_combine(h, list, k, 0, ty, op, count, tmp);
    if (st == IR_OK)
        st = lb_leave(h, d);
    if (st == IR_OK && !tmp)
        st = lb_oom(d);
    if (st == IR_OK && b)
        memcpy(buf, tmp, b);
    ts_free(tmp);
    return st;
}

static IrStatus lb_reduce_scatter_in(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                     const void *send, const int64_t *counts, void *recv, IrType ty, IrOpcode op,
                                     IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    size_t es = ir_type_size(ty);
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = send, .counts = counts}, d);
    int k = lb_members(h, color, list, &q);
    int64_t off = 0;
    for (int r = 0; r < h->host; r++)
        off += counts[r];
    if (st == IR_OK && counts[h->host] > 0)
        lb_combine(h, list, k, (size_t)off * es, ty, op, counts[h->host], recv);
    return st == IR_OK ? lb_leave(h, d) : st;
}

/* The types and simple reducers the MPI transport has an operation for
 * (coll/mpi_world.c, mpi_op_for): the loopback takes the same, so the
 * across-hosts steps choose the same paths under both. */
static bool lb_builtin_op(CollTransport *t, IrType ty, IrOpcode op)
{
    (void)t;
    bool fl = ty == IR_F16 || ty == IR_BF16 || ty == IR_F32 || ty == IR_F64;
    bool in = ty == IR_PRED || ty == IR_S8 || ty == IR_S16 || ty == IR_S32 || ty == IR_S64 || ty == IR_U8 ||
              ty == IR_U16 || ty == IR_U32 || ty == IR_U64;
    bool arith = op == OP_ADD || op == OP_MULTIPLY || op == OP_MAXIMUM || op == OP_MINIMUM;
    bool bits = op == OP_AND || op == OP_OR || op == OP_XOR;
    return (fl && arith) || (in && (arith || bits));
}

static IrStatus lb_allreduce_any_in(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                    void *buf, int64_t nslice, int64_t count, const bool *present, IrType ty,
                                    const CollReducer *r, IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    size_t sb = (size_t)count * ir_type_size(ty), b = sb * (size_t)nslice;
    uint8_t *tmp = ts_malloc(b + 1);
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = buf, .present = present}, d);
    int k = lb_members(h, color, list, &q);
    IrStatus cst = tmp ? IR_OK : lb_oom(d);
    for (int64_t s = 0; st == IR_OK && cst == IR_OK && s < nslice; s++) {
        bool first = true;
        for (int j = 0; cst == IR_OK && j < k; j++) {
            const Post *p = &h->lb->post[list[j]];
            if (!p->present[s])
                continue;
            const uint8_t *x = (const uint8_t *)p->send + (size_t)s * sb;
            if (first)
                memcpy(tmp + (size_t)s * sb, x, sb);
            else
                cst = dev_red_call(r->m, r->comp, ty, tmp + (size_t)s * sb, tmp + (size_t)s * sb, x, count, d);
            first = false;
        }
    }
    if (st == IR_OK)
        st = lb_leave(h, d);
    if (st == IR_OK && cst != IR_OK)
        st = cst;
    if (st == IR_OK && b)
        memcpy(buf, tmp, b);
    ts_free(tmp);
    return st;
}

static IrStatus lb_allreduce_into(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                  const void *const *src, int32_t nsrc, void *dst, int64_t count, IrType ty,
                                  IrOpcode op, IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    size_t b = (size_t)count * ir_type_size(ty);
    /* This host's devices combined first, in order. */
    uint8_t *part = ts_malloc(b + 1);
    if (part && b && nsrc > 0) {
        memcpy(part, src[0], b);
        for (int32_t i = 1; i < nsrc; i++)
            dev_red_combine_array(op, ty, part, src[i], count);
    }
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = part}, d);
    int k = lb_members(h, color, list, &q);
    bool all = true;
    for (int j = 0; j < k; j++)
        all = all && h->lb->post[list[j]].send;
    if (st == IR_OK && all && b)
        lb_combine(h, list, k, 0, ty, op, count, dst);
    if (st == IR_OK)
        st = lb_leave(h, d);
    if (st == IR_OK && !all)
        st = lb_oom(d);
    ts_free(part);
    return st;
}

static IrStatus lb_reduce_scatter_into(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                                       const void *src, void *dst, int64_t count, IrType ty, IrOpcode op, IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = src}, d);
    int k = lb_members(h, color, list, &q);
    int64_t per = count / k;
    if (st == IR_OK && per > 0)
        lb_combine(h, list, k, (size_t)(per * q) * ir_type_size(ty), ty, op, per, dst);
    return st == IR_OK ? lb_leave(h, d) : st;
}

static IrStatus lb_alltoall_in(CollTransport *t, const int32_t *color, CollXferKind kind, int64_t what,
                               const void *send, void *recv, size_t bytes, bool stream, IrDiag *d)
{
    (void)kind;
    (void)what;
    (void)stream;
    LbHost *h = (LbHost *)t;
    int list[COLL_LOOPBACK_MAX_HOSTS] = {0}, q = 0;
    IrStatus st = lb_enter(h, &(Post){.color = color, .send = send, .bytes = bytes}, d);
    int k = lb_members(h, color, list, &q);
    size_t blk = bytes / (size_t)k;
    for (int j = 0; st == IR_OK && j < k && blk; j++)
        memcpy((uint8_t *)recv + (size_t)j * blk, (const uint8_t *)h->lb->post[list[j]].send + (size_t)q * blk, blk);
    return st == IR_OK ? lb_leave(h, d) : st;
}

static IrStatus lb_exchange(CollTransport *t, CollXferKind kind, int64_t what, const CollXfer *sends, int32_t nsend,
                            const CollXfer *recvs, int32_t nrecv, IrDiag *d)
{
    (void)kind;
    (void)what;
    LbHost *h = (LbHost *)t;
    IrStatus st = lb_enter(h, &(Post){.sends = sends, .nsend = nsend}, d);
    for (int32_t i = 0; st == IR_OK && i < nrecv; i++) {
        const Post *p = &h->lb->post[recvs[i].host];
        const CollXfer *x = NULL;
        for (int32_t j = 0; j < p->nsend; j++)
            if (p->sends[j].host == h->host)
                x = &p->sends[j];
        if (!x || x->bytes != recvs[i].bytes)
            st = ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                          "host %d: host %d sends %zu bytes where %zu are expected", h->host, recvs[i].host,
                          x ? x->bytes : 0, recvs[i].bytes);
        else if (x->bytes)
            memcpy(recvs[i].buf, x->buf, x->bytes);
    }
    IrStatus lst = lb_leave(h, d);
    return st == IR_OK ? lst : st;
}

static const CollTransport lb_transport = {
    .allgather_in = lb_allgather_in, .allreduce_in = lb_allreduce_in, .reduce_scatter_in = lb_reduce_scatter_in,
    .builtin_op = lb_builtin_op, .allreduce_any_in = lb_allreduce_any_in, .allreduce_into = lb_allreduce_into,
    .reduce_scatter_into = lb_reduce_scatter_into, .allgather_into = lb_allgather_into,
    .alltoall_in = lb_alltoall_in, .exchange = lb_exchange,
};

CollLoopback *coll_loopback_new(int hosts)
{
    if (hosts < 1 || hosts > COLL_LOOPBACK_MAX_HOSTS)
        return NULL;
    CollLoopback *lb = ts_calloc(1, sizeof *lb);
    if (!lb)
        return NULL;
    lb->hosts = hosts;
    lb->post = ts_calloc((size_t)hosts, sizeof *lb->post);
    lb->host = ts_calloc((size_t)hosts, sizeof *lb->host);
    if (!lb->post || !lb->host) {
        ts_free(lb->post);
        ts_free(lb->host);
        ts_free(lb);
        return NULL;
    }
    for (int r = 0; r < hosts; r++)
        lb->host[r] = (LbHost){.base = lb_transport, .lb = lb, .host = r};
    pthread_mutex_init(&lb->mu, NULL);
    pthread_cond_init(&lb->cv, NULL);
    return lb;
}

CollTransport *coll_loopback_host(CollLoopback *lb, int host)
{
    return lb && host >= 0 && host < lb->hosts ? &lb->host[host].base : NULL;
}

void coll_loopback_abort(CollLoopback *lb)
{
    pthread_mutex_lock(&lb->mu);
    lb->aborted = true;
    pthread_cond_broadcast(&lb->cv);
    pthread_mutex_unlock(&lb->mu);
}

void coll_loopback_free(CollLoopback *lb)
{
    if (!lb)
        return;
    pthread_mutex_destroy(&lb->mu);
    pthread_cond_destroy(&lb->cv);
    ts_free(lb->post);
    ts_free(lb->host);
    ts_free(lb);
}
