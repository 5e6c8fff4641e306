/*
 * alloc.c: the allocators of local devices, cached per (backend, device
 * ordinal) for the life of the process. A device's buffers live on its NUMA
 * node when hwloc can bind memory there; otherwise (or when binding fails)
 * they are plain ts_malloc memory and the allocator's stats say why, so
 * `--stats` can report it. Allocators outlive device sets (buffers may
 * outlast the devices); dev_shutdown frees them through
 * dev_allocators_release.
 *
 * A device's executor thread names its allocator (dev_alloc_use, set by
 * the runtime before the device's program runs), and value.c takes the
 * thread's large tensors from it: a device's arrays are then allocated
 * on its NUMA node (hwloc_alloc_membind, HWLOC_MEMBIND_BIND), not left to
 * first touch. On a machine of one NUMA node the binding is to that node
 * (still made, and reported by hwloc, so the path is tested everywhere).
 *
 * Freed buffers of at least DEV_KEEP_MIN bytes are kept for reuse, not
 * given back to the system: a fresh mmap is page-faulted and zero-filled
 * by the kernel on first touch (27% of an Adam update's time when its
 * outputs were fresh each step), and a program allocates the same sizes
 * every step, as XLA assigns its temporaries once. A kept buffer serves a
 * request of its allocator that it holds with at most an eighth to spare
 * (the tightest such), on the binding it was made with. The bound: live
 * and kept bytes together never pass the most bytes the allocator ever
 * had live (peak_bytes), so what a run holds is what its peak held; the
 * oldest kept buffers go back first. dev_alloc_trim and dev_shutdown give
 * them all back. Under AddressSanitizer a kept buffer is poisoned, so a
 * use after dev_alloc_free is still reported.
 *
 * Every buffer starts with a 64-byte header in front of the pointer handed
 * out, naming its allocator and how to free it, so dev_alloc_free needs
 * only the pointer:
 *
 *     base ... [header 64 B][data n B]        plain: base from ts_malloc,
 *              ^ data - 64   ^ 64-aligned      padded to align data;
 *                              (2 MiB from     bound: base = page from hwloc
 *                               2 MiB up)      (2 MiB more from 2 MiB up)
 */
#include "device.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

enum { HDR = 64, ALIGN = 64 };

/* A buffer of HUGE bytes or more starts at a 2 MiB boundary, so that every
 * 2 MiB of it can be a huge page (value.c advises them): 64 bytes past a
 * page, an 8 MiB buffer had 6 MiB in huge pages and a 2 MiB one none, and
 * the GEMM's operands walked the rest in 4 KiB pages. The lead is address
 * space only: the pages before the header are never touched. Not under
 * AddressSanitizer, whose redzone must follow the data closely (a plain
 * block's slack after it stays under 64 bytes). */
#define HUGE ((size_t)2 << 20)

/* The alignment of the data of a buffer of n bytes. */
static size_t align_of(size_t n)
{
#if defined(__SANITIZE_ADDRESS__)
    (void)n;
    return ALIGN;
#else
    return n >= HUGE ? HUGE : ALIGN;
#endif
}

#define BUF_MAGIC 0x10c8b0f5u
#define KEPT_MAGIC 0x10c8cee9u /* freed, kept for reuse */

typedef struct BufHeader {
    uint32_t magic;
    int32_t node;        /* bound (from dev_hw_alloc_bound): its logical NUMA node; else -1 */
    DevAllocator *owner;
    DevTopology *topo;   /* bound: the topology it was bound with */
    void *base;          /* what to free */
    size_t len;          /* bytes at base (hwloc_free needs it) */
    size_t size;         /* bytes asked for now */
    size_t cap;          /* bytes asked for when the block was made: what it holds */
    struct BufHeader *next; /* kept: the next older kept buffer */
} BufHeader;

_Static_assert(sizeof(BufHeader) <= HDR, "buffer header must fit in HDR bytes");

struct DevAllocator {
    DevAllocator *next;        /* the cache's list */
    char *backend;
    int32_t ordinal;
    pthread_mutex_t mu;        /* guards everything below */
    DevTopology *topo;         /* NULL: plain memory only */
    int32_t numa_index;        /* logical node to bind to; -1 none */
    BufHeader *kept;           /* freed buffers kept for reuse, newest first */
    DevAllocStats st;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static DevAllocator *cache;    /* guarded by cache_lock */

/* ---- counting, and freed buffers kept for reuse ---- */

/* Count a buffer of n bytes handed out. The caller holds a->mu. */
static void count_alloc(DevAllocator *a, size_t n, bool bound)
{
    a->st.nallocs++;
    a->st.nbound += bound;
    a->st.nlive++;
    a->st.live_bytes += (int64_t)n;
    if (a->st.live_bytes > a->st.peak_bytes)
        a->st.peak_bytes = a->st.live_bytes;
}

/* Write the header in front of the data inside [base, base+len), aligned
 * for n bytes (align_of). */
static void *finish(DevAllocator *a, void *base, size_t len, size_t n, bool bound)
{
    uintptr_t data = ((uintptr_t)base + HDR + align_of(n) - 1) & ~(uintptr_t)(align_of(n) - 1);
    BufHeader *h = (BufHeader *)(data - HDR);
    *h = (BufHeader){.magic = BUF_MAGIC, .node = bound ? a->numa_index : -1, .owner = a,
                     .topo = bound ? a->topo : NULL, .base = base, .len = len, .size = n, .cap = n};
    count_alloc(a, n, bound);
    return (void *)data;
}

/* The bytes a buffer holds: what was asked for when its block was made. */
static size_t capacity(const BufHeader *h)
{
    return h->cap;
}

/* Give a buffer back to the system (not its allocator's business). */
static void release_block(BufHeader *h)
{
    ir_unpoison((char *)h + HDR, capacity(h));
    h->magic = 0;
    if (h->node >= 0)
        dev_hw_free_bound(h->topo, h->base, h->len);
    else
        ts_free(h->base);
}

static void release_list(BufHeader *h)
{
    while (h) {
        BufHeader *next = h->next;
        release_block(h);
        h = next;
    }
}

/* Detach every kept buffer of `a` (to release once a->mu is let go). The
 * caller holds a->mu. */
static BufHeader *kept_detach_all(DevAllocator *a)
{
    BufHeader *all = a->kept;
    a->kept = NULL;
    a->st.nkept = 0;
    a->st.kept_bytes = 0;
    return all;
}

/* A kept buffer for n bytes on a's present binding, taken off the list,
 * or NULL: the tightest that holds n with at most n/8 to spare. The
 * caller holds a->mu. */
static void *kept_take(DevAllocator *a, size_t n)
{
    if ((int64_t)n < DEV_KEEP_MIN || !a->kept)
        return NULL;
    int32_t node = a->st.membind && a->topo ? a->numa_index : -1;
    BufHeader **best = NULL;
    size_t best_cap = 0;
    for (BufHeader **pp = &a->kept; *pp; pp = &(*pp)->next) {
        BufHeader *h = *pp;
        size_t c = capacity(h);
        if (h->node != node || (node >= 0 && h->topo != a->topo) || c < n || c - n > n / 8)
            continue;
        if (!best || c < best_cap) {
            best = pp;
            best_cap = c;
        }
        if (c == n)
            break;
    }
    if (!best)
        return NULL;
    BufHeader *h = *best;
    *best = h->next;
    a->st.nkept--;
    a->st.kept_bytes -= (int64_t)best_cap;
    a->st.nreused++;
    h->magic = BUF_MAGIC;
    h->size = n;
    h->next = NULL;
    /* The spare bytes past n stay poisoned: an overrun is still reported. */
    ir_unpoison((char *)h + HDR, n);
    count_alloc(a, n, h->node >= 0);
    return (char *)h + HDR;
}

/* Keep the newest kept buffers of `a` that fit in `room` bytes together;
 * detach the rest (the first that does not fit and everything older) and
 * return them, to release once a->mu is let go. The caller holds a->mu. */
static BufHeader *kept_fit(DevAllocator *a, int64_t room)
{
    if (a->st.kept_bytes <= room)
        return NULL;
    int64_t sum = 0, n = 0;
    BufHeader **pp = &a->kept;
    while (*pp && sum + (int64_t)capacity(*pp) <= room) {
        sum += (int64_t)capacity(*pp);
        n++;
        pp = &(*pp)->next;
    }
    BufHeader *cut = *pp;
    *pp = NULL;
    a->st.nkept = n;
    a->st.kept_bytes = sum;
    return cut;
}

/* Keep freed buffer h (already uncounted from the live bytes) when live
 * and kept bytes stay within the peak; older kept buffers make room
 * (those pushed out go to *evicted, to release once a->mu is let go).
 * false: h is not kept (small, or larger than the peak allows). The
 * caller holds a->mu. */
static bool kept_put(DevAllocator *a, BufHeader *h, BufHeader **evicted)
{
    *evicted = NULL;
    int64_t c = (int64_t)capacity(h);
    int64_t room = a->st.peak_bytes - a->st.live_bytes;
    if (c < DEV_KEEP_MIN || c > room)
        return false;
    *evicted = kept_fit(a, room - c);
    h->magic = KEPT_MAGIC;
    h->next = a->kept;
    a->kept = h;
    a->st.nkept++;
    a->st.kept_bytes += c;
    ir_poison((char *)h + HDR, (size_t)c);
    return true;
}

void dev_alloc_trim(DevAllocator *a)
{
    pthread_mutex_lock(&a->mu);
    BufHeader *all = kept_detach_all(a);
    pthread_mutex_unlock(&a->mu);
    release_list(all);
}

/* ---- the cache ---- */

static DevAllocator *cache_find(const char *backend, int32_t ordinal)
{
    for (DevAllocator *a = cache; a; a = a->next)
        if (a->ordinal == ordinal && strcmp(a->backend, backend) == 0)
            return a;
    return NULL;
}

static DevAllocator *allocator_new(const char *backend, int32_t ordinal)
{
    DevAllocator *a = ts_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    if (!(a->backend = ts_strdup(backend)) || pthread_mutex_init(&a->mu, NULL) != 0) {
        ts_free(a->backend);
        ts_free(a);
        return NULL;
    }
    a->ordinal = ordinal;
    a->numa_index = -1;
    a->st.numa_node = -1;
    return a;
}

/* Find or create (backend, ordinal); the caller holds cache_lock. */
static IrStatus cache_get(const char *backend, int32_t ordinal, DevAllocator **out, IrDiag *d)
{
    *out = NULL;
    if (!backend || !*backend || ordinal < 0)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "an allocator needs a backend name and an ordinal >= 0");
    DevAllocator *a = cache_find(backend, ordinal);
    if (!a) {
        if (!(a = allocator_new(backend, ordinal)))
            return ir_oom(d, NULL);
        a->next = cache;
        cache = a;
    }
    *out = a;
    return IR_OK;
}

IrStatus dev_allocator_get(const char *backend, int32_t ordinal, DevAllocator **out, IrDiag *d)
{
    pthread_mutex_lock(&cache_lock);
    IrStatus st = cache_get(backend, ordinal, out, d);
    pthread_mutex_unlock(&cache_lock);
    return st;
}

/* Point new allocations of `a` at dev's NUMA node. A node we cannot bind
 * to (unknown node, or hwloc cannot bind memory here) is recorded as a
 * fallback to plain memory, with ENOSYS as the reason. */
static void bind_to(DevAllocator *a, const DevDevice *dev)
{
    pthread_mutex_lock(&a->mu);
    /* Buffers kept on another binding would serve no request now. */
    BufHeader *stale = a->topo != dev->topo || a->numa_index != dev->numa_index ? kept_detach_all(a) : NULL;
    const DevTopologyInfo *in = dev_topology_info(dev->topo);
    a->topo = dev->topo;
    a->numa_index = dev->numa_index;
    a->st.numa_node = dev->numa_node;
    a->st.membind = in->membind && dev->numa_index >= 0;
    a->st.membind_errno = a->st.membind ? 0 : ENOSYS;
    pthread_mutex_unlock(&a->mu);
    release_list(stale);
}

IrStatus dev_device_allocator(const DevDevice *dev, const char *backend, DevAllocator **out,
                              IrDiag *d)
{
    pthread_mutex_lock(&cache_lock);
    IrStatus st = cache_get(backend, dev->ordinal, out, d);
    pthread_mutex_unlock(&cache_lock);
    if (st == IR_OK)
        bind_to(*out, dev);
    return st;
}

IrStatus dev_allocators_release(IrDiag *d)
{
    pthread_mutex_lock(&cache_lock);
    for (DevAllocator *a = cache; a; a = a->next) {
        pthread_mutex_lock(&a->mu);
        int64_t nlive = a->st.nlive, bytes = a->st.live_bytes;
        pthread_mutex_unlock(&a->mu);
        if (nlive > 0) {
            pthread_mutex_unlock(&cache_lock);
            return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                            "allocator %s:%d still has %lld live buffer%s (%lld bytes)",
                            a->backend, (int)a->ordinal, (long long)nlive,
                            nlive == 1 ? "" : "s", (long long)bytes);
        }
    }
    while (cache) {
        DevAllocator *a = cache;
        cache = a->next;
        release_list(kept_detach_all(a));
        pthread_mutex_destroy(&a->mu);
        ts_free(a->backend);
        ts_free(a);
    }
    pthread_mutex_unlock(&cache_lock);
    return IR_OK;
}

/* ---- allocation ---- */

/* A NUMA-bound block of `len` bytes, or NULL. A refusal for want of memory
 * (ENOMEM) fails the allocation; any other refusal means binding is not
 * possible: the allocator records why and falls back to plain memory
 * (*fallback set). The caller holds a->mu. */
static void *alloc_bound(DevAllocator *a, size_t len, bool *fallback)
{
    *fallback = false;
    /* The bound block does not come from ts_malloc, yet must count against
     * ts_fail_alloc_after: a probe allocation takes its turn. */
    void *probe = ts_malloc(0);
    if (!probe)
        return NULL;
    ts_free(probe);
    errno = 0;
    void *p = dev_hw_alloc_bound(a->topo, a->numa_index, len);
    if (!p && errno != ENOMEM) {
        a->st.membind = false;
        a->st.membind_errno = errno ? errno : ENOSYS;
        *fallback = true;
    }
    return p;
}

/* A fresh block: bound when the allocator binds and hwloc agrees, else
 * plain. The caller holds a->mu (allocations of one device are
 * serialised: cheap next to the mmap or malloc of a buffer). */
static void *alloc_fresh(DevAllocator *a, size_t n)
{
    if (a->st.membind && a->topo) {
        bool fallback;
        /* pages: 64-aligned already; a 2 MiB boundary needs the lead */
        size_t len = n + HDR + (align_of(n) > ALIGN ? align_of(n) : 0);
        void *base = alloc_bound(a, len, &fallback);
        if (base)
            return finish(a, base, len, n, true);
        if (!fallback)
            return NULL;
    }
    void *base = ts_malloc(n + HDR + align_of(n) - 1); /* header + alignment slack */
    return base ? finish(a, base, n + HDR + align_of(n) - 1, n, false) : NULL;
}

void *dev_alloc(DevAllocator *a, size_t n)
{
    bool fits = n <= SIZE_MAX - HDR - HUGE && n <= (size_t)INT64_MAX / 2;
    BufHeader *evicted = NULL;
    pthread_mutex_lock(&a->mu);
    void *p = fits ? kept_take(a, n) : NULL;
    if (!p && fits && (p = alloc_fresh(a, n)) != NULL)
        evicted = kept_fit(a, a->st.peak_bytes - a->st.live_bytes); /* live and kept within the peak */
    if (!p)
        a->st.nfailed++;
    pthread_mutex_unlock(&a->mu);
    release_list(evicted);
    return p;
}

void dev_alloc_free(void *p)
{
    if (!p)
        return;
    BufHeader *h = (BufHeader *)((char *)p - HDR);
    if (h->magic != BUF_MAGIC)
        __builtin_trap(); /* not from dev_alloc, or freed twice: a bug */
    DevAllocator *a = h->owner;
    BufHeader *evicted = NULL;
    pthread_mutex_lock(&a->mu);
    a->st.nlive--;
    a->st.live_bytes -= (int64_t)h->size;
    bool kept = kept_put(a, h, &evicted);
    pthread_mutex_unlock(&a->mu);
    release_list(evicted);
    if (!kept)
        release_block(h);
}

void dev_allocator_stats(DevAllocator *a, DevAllocStats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    pthread_mutex_unlock(&a->mu);
    out->value_bytes = __atomic_load_n(&a->st.value_bytes, __ATOMIC_ACQUIRE);
    out->value_peak = __atomic_load_n(&a->st.value_peak, __ATOMIC_ACQUIRE);
}

/* value_bytes and value_peak change without the mutex: a value is made on
 * every kernel's path (reducers make scalars per element), and the
 * counters are all a charge touches. */
void dev_alloc_charge(DevAllocator *a, int64_t delta)
{
    if (!a || delta == 0)
        return;
    int64_t now = __atomic_add_fetch(&a->st.value_bytes, delta, __ATOMIC_ACQ_REL);
    int64_t peak = __atomic_load_n(&a->st.value_peak, __ATOMIC_ACQUIRE);
    while (now > peak &&
           !__atomic_compare_exchange_n(&a->st.value_peak, &peak, now, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

void dev_alloc_reset_peak(DevAllocator *a)
{
    if (a)
        __atomic_store_n(&a->st.value_peak, __atomic_load_n(&a->st.value_bytes, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELEASE);
}

/* ---- the allocator of this thread's tensors ---- */

static _Thread_local DevAllocator *thread_alloc;

void dev_alloc_use(DevAllocator *a)
{
    thread_alloc = a;
}

DevAllocator *dev_alloc_current(void)
{
    return thread_alloc;
}

bool dev_alloc_binds(DevAllocator *a)
{
    pthread_mutex_lock(&a->mu);
    bool on = a->st.membind && a->topo;
    pthread_mutex_unlock(&a->mu);
    return on;
}

int32_t dev_alloc_node_of(const void *p, size_t n)
{
    if (!p)
        return -1;
    const BufHeader *h = (const BufHeader *)((const char *)p - HDR);
    if (h->magic != BUF_MAGIC || h->node < 0)
        return -1;
    (void)n;
    return dev_hw_area_node(h->topo, h->base, h->len);
}
