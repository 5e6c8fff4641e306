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
 * Every buffer starts with a 64-byte header in front of the pointer handed
 * out, naming its allocator and how to free it, so dev_alloc_free needs
 * only the pointer:
 *
 *     base ... [header 64 B][data n B]        plain: base from ts_malloc,
 *              ^ data - 64   ^ 64-aligned      padded to align data;
 *                                              bound: base = page from hwloc
 */
#include "device.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

enum { HDR = 64, ALIGN = 64 };

#define BUF_MAGIC 0x7e55e1a110c8b0f5ull

typedef struct BufHeader {
    uint64_t magic;
    DevAllocator *owner;
    DevTopology *topo;   /* bound: the topology it was bound with */
    void *base;          /* what to free */
    size_t len;          /* bytes at base (hwloc_free needs it) */
    size_t size;         /* bytes asked for */
    bool bound;          /* base came from dev_hw_alloc_bound */
} BufHeader;

_Static_assert(sizeof(BufHeader) <= HDR, "buffer header must fit in HDR bytes");

struct DevAllocator {
    DevAllocator *next;        /* the cache's list */
    char *backend;
    int32_t ordinal;
    pthread_mutex_t mu;        /* guards everything below */
    DevTopology *topo;         /* NULL: plain memory only */
    int32_t numa_index;        /* logical node to bind to; -1 none */
    DevAllocStats st;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static DevAllocator *cache;    /* guarded by cache_lock */

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
    const DevTopologyInfo *in = dev_topology_info(dev->topo);
    a->topo = dev->topo;
    a->numa_index = dev->numa_index;
    a->st.numa_node = dev->numa_node;
    a->st.membind = in->membind && dev->numa_index >= 0;
    a->st.membind_errno = a->st.membind ? 0 : ENOSYS;
    pthread_mutex_unlock(&a->mu);
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

/* Write the header in front of the 64-aligned data inside [base, base+len). */
static void *finish(DevAllocator *a, void *base, size_t len, size_t n, bool bound)
{
    uintptr_t data = ((uintptr_t)base + HDR + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    BufHeader *h = (BufHeader *)(data - HDR);
    *h = (BufHeader){BUF_MAGIC, a, bound ? a->topo : NULL, base, len, n, bound};
    a->st.nallocs++;
    a->st.nbound += bound;
    a->st.nlive++;
    a->st.live_bytes += (int64_t)n;
    if (a->st.live_bytes > a->st.peak_bytes)
        a->st.peak_bytes = a->st.live_bytes;
    return (void *)data;
}

/* Bound when the allocator binds and hwloc agrees, else plain. The caller
 * holds a->mu (allocations of one device are serialised: cheap next to the
 * mmap or malloc of a buffer). */
static void *alloc_locked(DevAllocator *a, size_t n)
{
    if (a->st.membind && a->topo) {
        bool fallback;
        void *base = alloc_bound(a, n + HDR, &fallback); /* pages: aligned already */
        if (base)
            return finish(a, base, n + HDR, n, true);
        if (!fallback)
            return NULL;
    }
    void *base = ts_malloc(n + HDR + ALIGN - 1); /* header + alignment slack */
    return base ? finish(a, base, n + HDR + ALIGN - 1, n, false) : NULL;
}

void *dev_alloc(DevAllocator *a, size_t n)
{
    bool fits = n <= SIZE_MAX - HDR - ALIGN && n <= (size_t)INT64_MAX / 2;
    pthread_mutex_lock(&a->mu);
    void *p = fits ? alloc_locked(a, n) : NULL;
    if (!p)
        a->st.nfailed++;
    pthread_mutex_unlock(&a->mu);
    return p;
}

void dev_alloc_free(void *p)
{
    if (!p)
        return;
    BufHeader *h = (BufHeader *)((char *)p - HDR);
    if (h->magic != BUF_MAGIC)
        __builtin_trap(); /* not from dev_alloc, or freed twice: a bug */
    BufHeader hd = *h;
    DevAllocator *a = hd.owner;
    h->magic = 0;
    pthread_mutex_lock(&a->mu);
    a->st.nlive--;
    a->st.live_bytes -= (int64_t)hd.size;
    pthread_mutex_unlock(&a->mu);
    if (hd.bound)
        dev_hw_free_bound(hd.topo, hd.base, hd.len);
    else
        ts_free(hd.base);
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
    if (h->magic != BUF_MAGIC || !h->bound)
        return -1;
    (void)n;
    return dev_hw_area_node(h->topo, h->base, h->len);
}
