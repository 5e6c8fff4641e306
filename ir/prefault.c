/*
 * prefault.c: a thread that faults in fresh memory ahead of its writer.
 *
 * The first write to a fresh page makes the kernel clear it, in the
 * writer's time: on the virtual machines tessel is built and measured on,
 * clearing the pages of a 64k-instruction module's instruction array and
 * arena blocks is a third of its parse. A parse knows before it writes a
 * computation how many instructions it will write (it counted the lines),
 * so it hands those ranges to this thread, which populates them
 * (MADV_POPULATE_WRITE: page tables filled, contents unchanged) on the
 * other core while the parse goes on.
 *
 * Only a hint, and safe whatever happens to a range before the thread gets
 * to it: populating changes no byte of a mapping, so a range that was
 * already written, freed and reused by malloc, or unmapped (an error the
 * thread ignores) is left as it was. Where the kernel lacks the advice
 * (before Linux 5.14), a thread cannot start, or the queue is full, the
 * range is skipped and the writer faults its pages itself, as before.
 */
#include "ir.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

/* A few computations and arena blocks are in flight at once; more are
 * dropped (the writer faults them in itself). */
enum { QUEUE_CAP = 16 };
/* One madvise call: a huge page, so that a stop waits for one at most. */
enum { STEP = 2 << 20 };

typedef struct Range {
    uintptr_t lo, hi;
} Range;

struct IrPrefault {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    Range queue[QUEUE_CAP];
    int head, count;     /* under mu */
    atomic_bool stop;    /* read between steps without mu */
    size_t page;
};

static void populate(IrPrefault *f, Range r)
{
#ifdef MADV_POPULATE_WRITE
    for (uintptr_t p = r.lo; p < r.hi && !atomic_load_explicit(&f->stop, memory_order_relaxed);) {
        uintptr_t n = r.hi - p < STEP ? r.hi - p : STEP;
        if (madvise((void *)p, n, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
            /* No such advice in this kernel: nothing more to do here. */
            atomic_store(&f->stop, true);
            return;
        }
        p += n;
    }
#else
    (void)f;
    (void)r;
#endif
}

static void *prefault_main(void *arg)
{
    IrPrefault *f = arg;
    (void)pthread_setname_np(pthread_self(), "tessel-prefault"); /* for perf and gdb */
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->count == 0 && !atomic_load(&f->stop))
            pthread_cond_wait(&f->cv, &f->mu);
        if (atomic_load(&f->stop))
            break;
        Range r = f->queue[f->head];
        f->head = (f->head + 1) % QUEUE_CAP;
        f->count--;
        pthread_mutex_unlock(&f->mu);
        populate(f, r);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

IrPrefault *ir_prefault_start(void)
{
#ifdef MADV_POPULATE_WRITE
    IrPrefault *f = ts_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    long ps = sysconf(_SC_PAGESIZE);
    f->page = ps > 0 ? (size_t)ps : 4096;
    atomic_init(&f->stop, false);
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        ts_free(f);
        return NULL;
    }
    if (pthread_cond_init(&f->cv, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        ts_free(f);
        return NULL;
    }
    if (pthread_create(&f->thread, NULL, prefault_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        ts_free(f);
        return NULL;
    }
    return f;
#else
    return NULL;
#endif
}

void ir_prefault(IrPrefault *f, void *p, size_t n)
{
    if (!f || !p || n == 0)
        return;
    /* The whole pages inside [p, p+n): a partial page at either end may be
     * another allocation's, which the writer of that one faults in. */
    uintptr_t lo = ((uintptr_t)p + f->page - 1) & ~(uintptr_t)(f->page - 1);
    uintptr_t end = (uintptr_t)p + n < (uintptr_t)p ? UINTPTR_MAX : (uintptr_t)p + n;
    uintptr_t hi = end & ~(uintptr_t)(f->page - 1);
    if (hi <= lo)
        return;
    pthread_mutex_lock(&f->mu);
    if (f->count < QUEUE_CAP) {
        f->queue[(f->head + f->count) % QUEUE_CAP] = (Range){lo, hi};
        f->count++;
        pthread_cond_signal(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
}

void ir_prefault_stop(IrPrefault *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    atomic_store(&f->stop, true);
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    ts_free(f);
}
