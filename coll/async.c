/*
 * coll_async.c: a device's collectives in the background, for the
 * -start/-done pairs (DevCollectives.start and .wait; ir/schedule_overlap.c
 * puts independent work between them).
 *
 * Each device gets one communication thread, made at its first -start
 * from the device's executor thread (so it inherits its cpuset). A start
 * queues a job (the collective, references to its operands) and returns;
 * the thread runs the jobs one after the other in the order they were
 * queued, with the same code a blocking collective runs (local.c's
 * barriers among the host's devices, the leader's MPI calls through the
 * transport, heartbeat and check-ins included); a wait blocks until its
 * job is done. A blocking collective of the device first drains the
 * queue (coll_async_drain) and then runs on the executor thread, so a
 * device is in at most one collective at a time and its collectives run
 * in program order.
 *
 * The thread takes its device's allocator (dev_alloc_use): a result a
 * job makes is the device's value, counted in its measured peak
 * (`--stats`) as the executor's own are (partition/memory.c's estimate
 * counts it).
 *
 * Why this cannot deadlock: every device issues the same sequence of
 * starts, waits and blocking collectives (one program, one schedule). A
 * device blocked at the wait for collective k has queued every start
 * before it; take the device that is blocked earliest in the sequence:
 * every device has queued every collective up to its position, so the
 * collectives before it complete, one after the other, on every device's
 * thread. The transport's MPI calls are made by one thread at a time (the
 * leader's communication thread, or its executor thread after a drain),
 * which is what MPI_THREAD_SERIALIZED asks.
 *
 * Failure: a collective that fails returns its error at the wait (the
 * diagnostic copied to the waiter); a peer's failure aborts the world,
 * which wakes a job waiting in a barrier, so no wait is forever.
 */
#include "coll.h"

#include <pthread.h>
#include <string.h>

typedef struct Job {
    IrInstr ins;               /* a copy: the executor's may be a temporary */
    const IrModule *m;
    int32_t nopnd;
    DevValue **opnd;           /* references, released when the job has run */
    DevValue *out;
    IrStatus status;
    IrDiag diag;
    bool done;
    struct Job *next;
} Job;

struct CollAsync {
    CollFn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* jobs queued, jobs done, stop */
    Job *head, *tail;          /* queued, not yet taken by the thread */
    int64_t inflight;          /* started, not yet done */
    bool thread_on, stop;
    pthread_t thread;
    DevAllocator *alloc;       /* the starting thread's (its device's) allocator */
};

static void run_job(CollAsync *a, Job *j)
{
    j->status = a->fn(a->ctx, j->m, &j->ins, j->nopnd, j->opnd, &j->out, &j->diag);
    for (int32_t k = 0; k < j->nopnd; k++)
        dev_value_unref(j->opnd[k]);
    j->nopnd = 0;
}

static void *comm_main(void *arg)
{
    CollAsync *a = arg;
    dev_alloc_use(a->alloc);
    (void)dev_fp_flush_enter(); /* reduces as dev_execute computes (device/fpmode.c) */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop)
            pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head)
            break;
        Job *j = a->head;
        a->head = j->next;
        if (!a->head)
            a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        run_job(a, j);
        pthread_mutex_lock(&a->mu);
        j->done = true;
        a->inflight--;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

CollAsync *coll_async_new(CollFn fn, void *ctx)
{
    CollAsync *a = ts_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->fn = fn;
    a->ctx = ctx;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        ts_free(a);
        return NULL;
    }
    if (pthread_cond_init(&a->cv, NULL) != 0) {
        pthread_mutex_destroy(&a->mu);
        ts_free(a);
        return NULL;
    }
    return a;
}

IrStatus coll_async_start(CollAsync *a, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                        void **handle, IrDiag *d)
{
    Job *j = ts_calloc(1, sizeof *j);
    DevValue **opnd = ts_malloc((size_t)(nopnd > 0 ? nopnd : 1) * sizeof *opnd);
    if (!j || !opnd) {
        ts_free(j);
        ts_free(opnd);
        return ir_error(d, IR_ENOMEM, m->file, m->src, ins->pos, "%s: out of memory", ins->name);
    }
    for (int32_t k = 0; k < nopnd; k++)
        opnd[k] = dev_value_ref(operands[k]);
    *j = (Job){.ins = *ins, .m = m, .nopnd = nopnd, .opnd = opnd};
    pthread_mutex_lock(&a->mu);
    if (!a->thread_on) {
        a->alloc = dev_alloc_current();
        a->thread_on = pthread_create(&a->thread, NULL, comm_main, a) == 0;
    }
    bool queued = a->thread_on;
    if (queued) {
        if (a->tail)
            a->tail->next = j;
        else
            a->head = j;
        a->tail = j;
        a->inflight++;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    /* No thread: the collective runs now (nothing else is queued, since
     * every start would have failed to make one). */
    if (!queued) {
        run_job(a, j);
        j->done = true;
    }
    *handle = j;
    return IR_OK;
}

IrStatus coll_async_wait(CollAsync *a, void *handle, DevValue **out, IrDiag *d)
{
    Job *j = handle;
    pthread_mutex_lock(&a->mu);
    while (!j->done)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    IrStatus st = j->status;
    *out = st == IR_OK ? j->out : NULL;
    if (st != IR_OK) {
        dev_value_unref(j->out);
        ir_error(d, st, j->diag.file, j->m->src, j->diag.pos, "%s",
                 j->diag.msg ? j->diag.msg : "collective failed");
    }
    ir_diag_clear(&j->diag);
    ts_free(j->opnd);
    ts_free(j);
    return st;
}

void coll_async_drain(CollAsync *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    while (a->inflight > 0)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void coll_async_free(CollAsync *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    bool on = a->thread_on;
    pthread_mutex_unlock(&a->mu);
    if (on)
        pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    ts_free(a);
}
