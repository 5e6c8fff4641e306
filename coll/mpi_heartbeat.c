/*
 * mpi_heartbeat.c: the heartbeat of the MPI transport (RELIABILITY.md,
 * "Stuck jobs"): beats to every peer, every collective a check-in compared
 * across ranks, the polling wait of every collective (cmpi_finish), the
 * goodbye that reads every peer's last message before the communicator is
 * freed, and a watchdog on MPI_Finalize.
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

/* ---- a deadline on one blocking call ---- */

double cmpi_now(void)
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
void cmpi_watchdog_arm(Watchdog *w, double seconds, int rank, const char *call)
{
    *w = (Watchdog){.seconds = seconds, .rank = rank, .call = call};
    if (seconds <= 0)
        return;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->armed = pthread_create(&w->thread, NULL, watchdog_main, w) == 0;
}

void cmpi_watchdog_disarm(Watchdog *w)
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

int64_t cmpi_checkin_code(int kind, int64_t size)
{
    return ((int64_t)kind << 56) | (size & ((INT64_C(1) << 56) - 1));
}

int64_t cmpi_checkin_detail(IrOpcode op, IrType ty)
{
    return ((int64_t)1 << 48) | ((int64_t)op << 16) | (int64_t)ty;
}

int64_t cmpi_checkin_reducer(const CollReducer *red, IrType ty)
{
    /* FNV-1a over the reducer's instructions (opcodes and operands): two
     * reducers that compute the same way match, others almost surely not. */
    uint64_t h = 1469598103934665603ULL;
    const IrComputation *c = red && red->m && red->comp >= 0 && red->comp < red->m->ncomp ? red->m->comp[red->comp]
                                                                                           : NULL;
    for (int32_t i = 0; c && i < c->ninstr; i++) {
        h = (h ^ (uint64_t)c->instr[i].op) * 1099511628211ULL;
        for (int32_t k = 0; k < c->instr[i].nopnd; k++)
            h = (h ^ (uint64_t)c->instr[i].opnd[k]) * 1099511628211ULL;
    }
    return ((int64_t)2 << 48) | ((int64_t)(h & 0xffffffffu) << 16) | (int64_t)ty;
}

/* " with reducer R on T" for a reduction's detail, "" for none. */
static void detail_text(int64_t detail, char *buf, size_t n)
{
    int64_t form = detail >> 48, mid = (detail >> 16) & 0xffffffff, ty = detail & 0xffff;
    const char *tn = ty >= 0 && ty < IR_NTYPES ? ir_type_name((IrType)ty) : "?";
    if (form == 1)
        snprintf(buf, n, " reducing with %s on %s", mid >= 0 && mid < OP_COUNT ? ir_op_name((IrOpcode)mid) : "?", tn);
    else if (form == 2)
        snprintf(buf, n, " reducing with a computation (digest %08llx) on %s", (unsigned long long)mid, tn);
    else
        buf[0] = 0;
}

static void checkin_text(Checkin ck, char *buf, size_t n)
{
    int64_t code = ck.code;
    static const char *const kinds[] = {"?", "a device call", "an all-gather", "an all-reduce", "a gather",
                                        "an agreement on failures", "an agreement on the exit status",
                                        "a statistics gather", "a communicator split",
                                        "a point-to-point exchange", "a reduce-scatter"};
    int k = (int)(code >> 56);
    char det[96];
    detail_text(ck.detail, det, sizeof det);
    snprintf(buf, n, "%s (%lld)%s", kinds[k >= 1 && k <= CK_REDUCE_SCATTER ? k : 0],
             (long long)(code & ((INT64_C(1) << 56) - 1)), det);
}

/* End the job from wherever the heartbeat found the trouble (never returns). */
static void hb_end_job(CollMpi *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void hb_end_job(CollMpi *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "tessel: error: rank %d: ", t->rank);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof msg - len, "; ending the job, no output written\n");
    coll_mpi_abort(t, msg);
}

/* Send {seq, what} to rank r on a free slot (hb.mu held): seq > 0 a
 * check-in, 0 a beat, -1 the goodbye. A beat finds none when r has not
 * taken the last NSLOT: it is dropped (r's silence is the other side's
 * business). A check-in or the goodbye must go: its slots are waited for
 * (a peer that never drains them is silent, and the heartbeat thread
 * ends the job). */
static void hb_send(CollMpi *t, int r, int64_t seq, Checkin what)
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
            sl->msg[1] = what.code;
            sl->msg[2] = what.detail;
            int tag = seq > 0 ? TAG_CHECKIN : seq < 0 ? TAG_BYE : TAG_BEAT;
            if (tmpi_isend(sl->msg, 3, MPI_INT64_T, r, tag, t->hb_comm, &sl->req) !=
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
static void cmpi_hb_compare(CollMpi *t)
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
            Checkin theirs = h->rx[(size_t)r * RING + (size_t)(j % RING)], mine = h->hist[j % RING];
            if (theirs.code == mine.code && theirs.detail == mine.detail)
                continue;
            char a[192], b[192];
            checkin_text(theirs, a, sizeof a);
            checkin_text(mine, b, sizeof b);
            hb_end_job(t, "at collective %lld rank %d checked in at %s, this rank at %s: the ranks diverged "
                       "(one skipped a collective, took another path or runs another program)", (long long)j, r, a, b);
        }
    }
}

/* Read every beat and check-in that has arrived (hb.mu held). */
void cmpi_hb_drain(CollMpi *t)
{
    Heartbeat *h = &t->hb;
    for (;;) {
        int64_t msg[3];
        int got = 0;
        MPI_Status status;
        if (tmpi_improbe_recv(msg, 3, MPI_INT64_T, t->hb_comm, &got, &status) != MPI_SUCCESS)
            hb_end_job(t, "reading heartbeats failed");
        if (!got)
            break;
        int r = status.MPI_SOURCE;
        if (r < 0 || r >= t->size)
            continue;
        h->heard[r] = cmpi_now();
        if (status.MPI_TAG == TAG_BYE)
            h->bye[r] = true;
        if (status.MPI_TAG != TAG_CHECKIN)
            continue;
        if (msg[0] != h->rx_hi[r] + 1)
            hb_end_job(t, "rank %d sent check-in %lld after %lld", r, (long long)msg[0], (long long)h->rx_hi[r]);
        h->rx_hi[r] = msg[0];
        h->rx[(size_t)r * RING + (size_t)(msg[0] % RING)] = (Checkin){msg[1], msg[2]};
    }
    cmpi_hb_compare(t);
}

/* Any peer silent for longer than the heartbeat allows (hb.mu held). */
static void hb_check_silence(CollMpi *t)
{
    Heartbeat *h = &t->hb;
    double tnow = cmpi_now();
    for (int r = 0; r < t->size; r++)
        if (r != t->rank && tnow - h->heard[r] > h->seconds)
            hb_end_job(t, "rank %d has not been heard from for %.1f s (--heartbeat %g s): it stopped, hung or "
                       "lost its host", r, tnow - h->heard[r], h->seconds);
}

/* This rank has been inside one MPI call for longer than the heartbeat
 * (hb.mu held): end the job naming the call and the collective of this
 * rank's last check-in. */
static void hb_stuck(void *arg)
{
    CollMpi *t = arg;
    Heartbeat *h = &t->hb;
    const char *call = NULL;
    double busy = coll_mpi_busy_seconds(&call);
    char at[160] = "";
    if (h->seq > 0) {
        char ck[128];
        checkin_text(h->hist[h->seq % RING], ck, sizeof ck);
        snprintf(at, sizeof at, " at collective %lld, %s,", (long long)h->seq, ck);
    }
    hb_end_job(t, "this rank has been inside %.*s%s for %.1f s (--heartbeat %g s): stuck inside MPI",
               call ? (int)strcspn(call, "(") : 12, call ? call : "an MPI call", at, busy, h->seconds);
}

static void *hb_main(void *arg)
{
    CollMpi *t = arg;
    Heartbeat *h = &t->hb;
    /* Its own calls never wait behind a stuck one (a beat's MPI_Test would). */
    coll_mpi_watch_lock(h->seconds, hb_stuck, t);
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        /* This rank stuck inside one MPI call (the others may be too: a
         * collective that crossed) ends the job; while a call is merely
         * long, beats wait (their sends would queue behind it). */
        double busy = coll_mpi_busy_seconds(NULL);
        if (busy > h->seconds)
            hb_stuck(t);
        if (busy <= h->period) {
            for (int r = 0; r < t->size; r++)
                if (r != t->rank)
                    hb_send(t, r, 0, (Checkin){0, 0});
            cmpi_hb_drain(t);
            hb_check_silence(t);
        }
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

IrStatus coll_mpi_heartbeat_start(CollMpi *t, double seconds, IrDiag *d)
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
    h->bye = ts_calloc(n, sizeof *h->bye);
    if (!h->heard || !h->rx_hi || !h->rx_checked || !h->rx || !h->slots || !h->bye) {
        ts_free(h->bye);
        ts_free(h->heard);
        ts_free(h->rx_hi);
        ts_free(h->rx_checked);
        ts_free(h->rx);
        ts_free(h->slots);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", t->rank);
    }
    double t0 = cmpi_now();
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

/* The last message on hb_comm, after the heartbeat thread stopped: a
 * goodbye to every peer, then every peer's read, with whatever came
 * before it (messages between two ranks keep their order). Without it
 * the beats and check-ins still in flight when the communicator is freed
 * are not lost: Open MPI holds messages for a context id it does not
 * know and hands them to the next communicator given the same id, the
 * next run's in a process that runs several (the Python API), where an
 * old check-in number among the new ones ended that run ("rank 1 sent
 * check-in 4 after 2"). Every rank gets here right after the run's last
 * agreement, so the wait is short; it is bounded by the heartbeat (at
 * most 5 s), for a peer that ended otherwise. */
static void hb_goodbye(CollMpi *t)
{
    Heartbeat *h = &t->hb;
    pthread_mutex_lock(&h->mu);
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            hb_send(t, r, -1, (Checkin){0, 0});
    double until = cmpi_now() + fmin(h->seconds, 5.0);
    CmpiBackoff b = {0};
    for (;;) {
        cmpi_hb_drain(t);
        int r = 0;
        while (r < t->size && (r == t->rank || h->bye[r]))
            r++;
        if (r == t->size || cmpi_now() > until)
            break;
        pthread_mutex_unlock(&h->mu);
        cmpi_backoff(&b);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

void coll_mpi_heartbeat_stop(CollMpi *t)
{
    Heartbeat *h = &t->hb;
    if (!h->on)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    hb_goodbye(t);
    /* Sends still in flight: given 100 ms to complete (tiny messages
     * normally already have); one that has not (its peer stopped) is let
     * go with MPI_Request_free, and then its buffer must outlive it: the
     * slots are kept (NSLOT x ranks x 24 bytes, once). */
    bool pending = false;
    double until = cmpi_now() + 0.1;
    for (size_t k = 0; k < (size_t)t->size * NSLOT; k++)
        while (h->slots[k].req != MPI_REQUEST_NULL) {
            int done = 0;
            if (tmpi_test(&h->slots[k].req, &done) != MPI_SUCCESS || (!done && cmpi_now() > until)) {
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
    ts_free(h->bye);
    h->bye = NULL;
    h->heard = NULL;
    h->rx_hi = h->rx_checked = NULL;
    h->rx = NULL;
    h->slots = NULL;
    h->on = false;
}

/* This rank reached a collective or device call (`code` says which):
 * tell every peer. */
void cmpi_checkin(CollMpi *t, int64_t code, int64_t detail)
{
    Heartbeat *h = &t->hb;
    if (!h->on)
        return;
    pthread_mutex_lock(&h->mu);
    h->seq++;
    h->hist[h->seq % RING] = (Checkin){code, detail};
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            hb_send(t, r, h->seq, h->hist[h->seq % RING]);
    cmpi_hb_drain(t);
    pthread_mutex_unlock(&h->mu);
}

void coll_mpi_checkin(CollMpi *t, int64_t cluster)
{
    cmpi_checkin(t, cmpi_checkin_code(CK_DEVICE_CALL, cluster), 0);
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

void cmpi_backoff(CmpiBackoff *b)
{
    if (b->spins++ == 0)
        b->since = cmpi_now();
    double waited = cmpi_now() - b->since;
    if (waited < 0.001)
        return;
    if (waited < 0.02) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (waited < 0.1 ? 100 : 1000) * 1000L};
    nanosleep(&ts, NULL);
}

void cmpi_idle(CollMpi *t, CmpiBackoff *b)
{
    if (t->hb.on && b->spins % 16 == 15) {
        pthread_mutex_lock(&t->hb.mu);
        cmpi_hb_drain(t);
        pthread_mutex_unlock(&t->hb.mu);
    }
    cmpi_backoff(b);
}

/* Wait for `req` and for every peer's check-in at this collective (the
 * heartbeat's; without one just the request). Returns the MPI result. */
int cmpi_finish(CollMpi *t, MPI_Request *req)
{
    Heartbeat *h = &t->hb;
    CmpiBackoff b = {0};
    int done = 0, rc = MPI_SUCCESS;
    for (;;) {
        rc = tmpi_test(req, &done);
        if (rc != MPI_SUCCESS || done)
            break;
        if (h->on && b.spins % 16 == 15) {
            pthread_mutex_lock(&h->mu);
            cmpi_hb_drain(t);
            pthread_mutex_unlock(&h->mu);
        }
        cmpi_backoff(&b);
    }
    /* Everybody's check-in at this collective, compared. When MPI itself
     * failed (a message truncated because the ranks crossed), the
     * check-ins are given a few seconds to say why: a divergence ends the
     * job naming both sides, which beats MPI's "message truncated". */
    double until = cmpi_now() + (h->on ? fmin(h->seconds, 5.0) : 0);
    while (h->on) {
        pthread_mutex_lock(&h->mu);
        cmpi_hb_drain(t);
        bool all = true;
        for (int r = 0; r < t->size; r++)
            all = all && (r == t->rank || h->rx_hi[r] >= h->seq);
        pthread_mutex_unlock(&h->mu);
        if (all || (rc != MPI_SUCCESS && cmpi_now() > until))
            break;
        cmpi_backoff(&b);
    }
    return rc != MPI_SUCCESS ? rc : done ? MPI_SUCCESS : MPI_ERR_OTHER;
}


