/*
 * devices.c: the local devices of one process, from hwloc. Loads the
 * topology once per process, divides the process's cpuset into L devices
 * (hwloc_distrib over cores), gives each device a NUMA node and one executor
 * thread bound to its cpuset, runs jobs on those threads, and sets
 * OpenBLAS's thread count so that devices never oversubscribe their cores.
 * See device.h for the model and the lifetime rules.
 *
 * Every hwloc call of the project is in the dev_hw_* section below: a thin
 * wrapper per call, so that failure injection (dev_hw_fail_after) can make
 * the Nth fallible call fail, as ts_fail_alloc_after does for memory. Calls
 * that cannot fail (queries of a loaded topology, frees) are wrapped too but
 * not counted.
 */
#include "blas.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The hwloc layer                                                     */
/* ------------------------------------------------------------------ */

struct DevTopology {
    DevTopologyInfo info;
    hwloc_topology_t hw;
    hwloc_bitmap_t cpuset;      /* the process's cpuset */
    char *cpuset_text;
};

static atomic_long hw_fail_after; /* 0: never; N: the Nth fallible call from now fails */
static atomic_long hw_calls;
static atomic_int hw_errno = ENOMEM;

void dev_hw_fail_after(long n)
{
    atomic_store(&hw_fail_after, n);
}

long dev_hw_call_count(void)
{
    return atomic_load(&hw_calls);
}

void dev_hw_fail_errno(int e)
{
    atomic_store(&hw_errno, e ? e : ENOMEM);
}

/* True when this fallible hwloc call must fail (sets errno like hwloc). */
static bool hw_inject(void)
{
    atomic_fetch_add(&hw_calls, 1);
    long f = atomic_load(&hw_fail_after);
    while (f > 0) {
        if (atomic_compare_exchange_weak(&hw_fail_after, &f, f - 1)) {
            if (f == 1) {
                errno = atomic_load(&hw_errno);
                return true;
            }
            return false;
        }
    }
    return false;
}

/* Fallible calls: each consumes one count of the injection counter. */

static int dev_hw_topology_init(hwloc_topology_t *t)
{
    return hw_inject() ? -1 : hwloc_topology_init(t);
}

static int dev_hw_topology_load(hwloc_topology_t t)
{
    return hw_inject() ? -1 : hwloc_topology_load(t);
}

static hwloc_bitmap_t dev_hw_bitmap_alloc(void)
{
    return hw_inject() ? NULL : hwloc_bitmap_alloc();
}

static int dev_hw_bitmap_copy(hwloc_bitmap_t dst, hwloc_const_bitmap_t src)
{
    return hw_inject() ? -1 : hwloc_bitmap_copy(dst, src);
}

static int dev_hw_bitmap_and(hwloc_bitmap_t r, hwloc_const_bitmap_t a, hwloc_const_bitmap_t b)
{
    return hw_inject() ? -1 : hwloc_bitmap_and(r, a, b);
}

static int dev_hw_get_proc_cpubind(hwloc_topology_t t, hwloc_bitmap_t set)
{
    return hw_inject() ? -1 : hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS);
}

static int dev_hw_set_thread_cpubind(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    return hw_inject() ? -1 : hwloc_set_cpubind(t, set, HWLOC_CPUBIND_THREAD);
}

static int dev_hw_largest_objs_inside(hwloc_topology_t t, hwloc_const_bitmap_t set,
                                      hwloc_obj_t *objs, int max)
{
    return hw_inject() ? -1 : hwloc_get_largest_objs_inside_cpuset(t, set, objs, max);
}

/* hwloc_distrib writes a fresh bitmap (hwloc_bitmap_dup) into each sets[i]
 * without checking it: the caller checks every entry for NULL. */
static int dev_hw_distrib(hwloc_topology_t t, hwloc_obj_t *roots, unsigned nroots,
                          hwloc_bitmap_t *sets, unsigned n, int until)
{
    return hw_inject() ? -1 : hwloc_distrib(t, roots, nroots, sets, n, until, 0);
}

/* The list syntax of `set` ("0-1,4") as a ts_malloc string; NULL on OOM. */
static char *dev_hw_list_text(hwloc_const_bitmap_t set)
{
    if (hw_inject())
        return NULL;
    int n = hwloc_bitmap_list_snprintf(NULL, 0, set);
    if (n < 0)
        return NULL;
    char *s = ts_malloc((size_t)n + 1);
    if (s)
        hwloc_bitmap_list_snprintf(s, (size_t)n + 1, set);
    return s;
}

void *dev_hw_alloc_bound(DevTopology *t, int32_t numa_index, size_t len)
{
    if (hw_inject())
        return NULL;
    hwloc_obj_t node = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, (unsigned)numa_index);
    if (!node || numa_index < 0) {
        errno = EINVAL;
        return NULL;
    }
    return hwloc_alloc_membind(t->hw, len, node->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
}

/* Calls that cannot fail: not counted. */

void dev_hw_free_bound(DevTopology *t, void *p, size_t len)
{
    hwloc_free(t->hw, p, len);
}

int32_t dev_hw_area_node(DevTopology *t, const void *p, size_t len)
{
    hwloc_nodeset_t set = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
    int32_t node = -1;
    if (set && hwloc_get_area_membind(t->hw, p, len, set, &policy, HWLOC_MEMBIND_BYNODESET) == 0 &&
        policy == HWLOC_MEMBIND_BIND && hwloc_bitmap_weight(set) == 1)
        node = (int32_t)hwloc_bitmap_first(set);
    hwloc_bitmap_free(set);
    return node;
}

static void dev_hw_topology_destroy(hwloc_topology_t t)
{
    hwloc_topology_destroy(t);
}

static void dev_hw_bitmap_free(hwloc_bitmap_t b)
{
    hwloc_bitmap_free(b);
}

static int dev_hw_weight(hwloc_const_bitmap_t b)
{
    return hwloc_bitmap_weight(b);
}

static bool dev_hw_intersects(hwloc_const_bitmap_t a, hwloc_const_bitmap_t b)
{
    return hwloc_bitmap_intersects(a, b) != 0;
}

static bool dev_hw_iszero(hwloc_const_bitmap_t b)
{
    return hwloc_bitmap_iszero(b) != 0;
}

/* Number of bits set in both a and b (no temporary bitmap). */
static int dev_hw_overlap(hwloc_const_bitmap_t a, hwloc_const_bitmap_t b)
{
    int n = 0;
    for (int i = hwloc_bitmap_first(a); i >= 0; i = hwloc_bitmap_next(a, i))
        n += hwloc_bitmap_isset(b, (unsigned)i) != 0;
    return n;
}

static int dev_hw_nbobjs(hwloc_topology_t t, hwloc_obj_type_t type)
{
    return hwloc_get_nbobjs_by_type(t, type);
}

static hwloc_obj_t dev_hw_obj(hwloc_topology_t t, hwloc_obj_type_t type, int i)
{
    return hwloc_get_obj_by_type(t, type, (unsigned)i);
}

static int dev_hw_type_depth(hwloc_topology_t t, hwloc_obj_type_t type)
{
    return hwloc_get_type_depth(t, type);
}

static hwloc_const_bitmap_t dev_hw_allowed_cpuset(hwloc_topology_t t)
{
    return hwloc_topology_get_allowed_cpuset(t);
}

static bool dev_hw_is_thissystem(hwloc_topology_t t)
{
    return hwloc_topology_is_thissystem(t) != 0;
}

static void dev_hw_support(hwloc_topology_t t, bool *cpubind, bool *membind)
{
    const struct hwloc_topology_support *s = hwloc_topology_get_support(t);
    *cpubind = s->cpubind->set_thisthread_cpubind != 0;
    *membind = s->membind->alloc_membind != 0 && s->membind->bind_membind != 0;
}

/* ------------------------------------------------------------------ */
/* The topology, cached per process                                    */
/* ------------------------------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static DevTopology *g_topo;   /* guarded by g_lock */
static int32_t g_live_sets;   /* device sets created and not yet freed */

static IrStatus hw_error(IrDiag *d, const char *what)
{
    int e = errno;
    if (e == ENOMEM)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "%s: out of memory", what);
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "%s failed: %s", what,
                    e ? strerror(e) : "unknown error");
}

static void topology_free(DevTopology *t)
{
    if (!t)
        return;
    if (t->cpuset)
        dev_hw_bitmap_free(t->cpuset);
    if (t->hw)
        dev_hw_topology_destroy(t->hw);
    ts_free(t->cpuset_text);
    ts_free(t);
}

/* The process's cpuset: its binding within the allowed cpuset. A process
 * that hwloc cannot query (or whose binding lies outside what is allowed)
 * gets the whole allowed cpuset. */
static IrStatus process_cpuset(DevTopology *t, IrDiag *d)
{
    hwloc_const_bitmap_t allowed = dev_hw_allowed_cpuset(t->hw);
    if (!(t->cpuset = dev_hw_bitmap_alloc()))
        return hw_error(d, "hwloc_bitmap_alloc");
    if (t->info.this_system && t->info.cpubind && dev_hw_get_proc_cpubind(t->hw, t->cpuset) == 0 &&
        dev_hw_bitmap_and(t->cpuset, t->cpuset, allowed) == 0 && !dev_hw_iszero(t->cpuset))
        return IR_OK;
    if (dev_hw_bitmap_copy(t->cpuset, allowed) != 0)
        return hw_error(d, "hwloc_bitmap_copy");
    if (dev_hw_iszero(t->cpuset))
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "hwloc finds no CPU this process may run on");
    return IR_OK;
}

/* Objects of `type` whose cpuset intersects the process's cpuset. */
static int32_t count_near(const DevTopology *t, hwloc_obj_type_t type)
{
    int32_t n = 0;
    int all = dev_hw_nbobjs(t->hw, type);
    for (int i = 0; i < all; i++) {
        hwloc_obj_t o = dev_hw_obj(t->hw, type, i);
        if (o && o->cpuset && dev_hw_intersects(o->cpuset, t->cpuset))
            n++;
    }
    return n;
}

static void fill_info(DevTopology *t)
{
    DevTopologyInfo *in = &t->info;
    in->hwloc_version = HWLOC_VERSION;
    in->cpuset = t->cpuset_text;
    in->npackages = count_near(t, HWLOC_OBJ_PACKAGE);
    in->ncores = count_near(t, HWLOC_OBJ_CORE);
    in->npus = dev_hw_weight(t->cpuset);
    in->nnuma = 0;
    in->memory_bytes = 0;
    int all = dev_hw_nbobjs(t->hw, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < all; i++) {
        hwloc_obj_t o = dev_hw_obj(t->hw, HWLOC_OBJ_NUMANODE, i);
        if (o && o->cpuset && dev_hw_intersects(o->cpuset, t->cpuset)) {
            in->nnuma++;
            in->memory_bytes += o->attr ? o->attr->numanode.local_memory : 0;
        }
    }
}

static IrStatus topology_new(DevTopology **out, IrDiag *d)
{
    DevTopology *t = ts_calloc(1, sizeof *t);
    if (!t)
        return ir_oom(d, NULL);
    IrStatus st = IR_OK;
    if (dev_hw_topology_init(&t->hw) != 0) {
        t->hw = NULL;
        st = hw_error(d, "hwloc_topology_init");
        goto fail;
    }
    if (dev_hw_topology_load(t->hw) != 0) {
        st = hw_error(d, "hwloc_topology_load");
        goto fail;
    }
    t->info.this_system = dev_hw_is_thissystem(t->hw);
    dev_hw_support(t->hw, &t->info.cpubind, &t->info.membind);
    t->info.cpubind = t->info.cpubind && t->info.this_system;
    t->info.membind = t->info.membind && t->info.this_system;
    if ((st = process_cpuset(t, d)) != IR_OK)
        goto fail;
    if (!(t->cpuset_text = dev_hw_list_text(t->cpuset))) {
        st = ir_oom(d, NULL);
        goto fail;
    }
    fill_info(t);
    *out = t;
    return IR_OK;
fail:
    topology_free(t);
    return st;
}

IrStatus dev_topology_load(DevTopology **out, IrDiag *d)
{
    *out = NULL;
    IrStatus st = IR_OK;
    pthread_mutex_lock(&g_lock);
    if (!g_topo)
        st = topology_new(&g_topo, d);
    *out = g_topo;
    pthread_mutex_unlock(&g_lock);
    return st;
}

const DevTopologyInfo *dev_topology_info(const DevTopology *t)
{
    return &t->info;
}

IrStatus dev_shutdown(IrDiag *d)
{
    pthread_mutex_lock(&g_lock);
    IrStatus st = IR_OK;
    if (g_live_sets > 0)
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                      "dev_shutdown: %d device set%s still alive", (int)g_live_sets,
                      g_live_sets == 1 ? "" : "s");
    else if ((st = dev_allocators_release(d)) == IR_OK) {
        topology_free(g_topo);
        g_topo = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* ------------------------------------------------------------------ */
/* Dividing the cpuset                                                 */
/* ------------------------------------------------------------------ */

/*
 * Rule (hwloc_distrib): starting from the largest objects inside the
 * process's cpuset, give each object a share of the L devices in
 * proportion to its PUs, rounding up first; recurse into an object while
 * its share is more than one device and it is above the core level. A share
 * of several devices on one core (or PU) gives each the same cpuset.
 * Example, 2 cores {0} {1}: L=3 gives core 0 ceil(3*1/2) = 2 devices and
 * core 1 the other: {0} {0} {1}.
 */
static IrStatus distribute(DevTopology *t, int32_t L, hwloc_bitmap_t *sets, IrDiag *d)
{
    int max = t->info.npus > 0 ? t->info.npus : 1;
    hwloc_obj_t *roots = ts_calloc((size_t)max, sizeof *roots);
    if (!roots)
        return ir_oom(d, NULL);
    IrStatus st = IR_OK;
    int nroots = dev_hw_largest_objs_inside(t->hw, t->cpuset, roots, max);
    if (nroots <= 0) {
        st = nroots < 0 ? hw_error(d, "hwloc_get_largest_objs_inside_cpuset")
                        : ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                                   "hwloc finds no object inside cpuset %s", t->cpuset_text);
        goto out;
    }
    int until = dev_hw_type_depth(t->hw, HWLOC_OBJ_CORE);
    if (until < 0)
        until = INT_MAX; /* no core level: distribute down to PUs */
    if (dev_hw_distrib(t->hw, roots, (unsigned)nroots, sets, (unsigned)L, until) != 0) {
        st = hw_error(d, "hwloc_distrib");
        goto out;
    }
    for (int32_t i = 0; i < L; i++)
        if (!sets[i]) {
            st = ir_oom(d, NULL); /* a hwloc_bitmap_dup inside hwloc_distrib failed */
            goto out;
        }
    for (int32_t i = 0; i < L; i++)
        if (dev_hw_bitmap_and(sets[i], sets[i], t->cpuset) != 0) {
            st = hw_error(d, "hwloc_bitmap_and");
            goto out;
        }
out:
    ts_free(roots);
    return st;
}

/* Cores whose cpuset intersects `set` (PUs when hwloc knows no cores). */
static int32_t cores_of(const DevTopology *t, hwloc_const_bitmap_t set)
{
    int all = dev_hw_nbobjs(t->hw, HWLOC_OBJ_CORE);
    if (all <= 0)
        return dev_hw_weight(set);
    int32_t n = 0;
    for (int i = 0; i < all; i++) {
        hwloc_obj_t o = dev_hw_obj(t->hw, HWLOC_OBJ_CORE, i);
        if (o && o->cpuset && dev_hw_intersects(o->cpuset, set))
            n++;
    }
    return n;
}

/* The NUMA node holding most of the device's PUs (the first on a tie). */
static void numa_of(const DevTopology *t, hwloc_const_bitmap_t set, DevDevice *dev)
{
    dev->numa_node = -1;
    dev->numa_index = -1;
    dev->memory_bytes = 0;
    int best = 0;
    int all = dev_hw_nbobjs(t->hw, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < all; i++) {
        hwloc_obj_t o = dev_hw_obj(t->hw, HWLOC_OBJ_NUMANODE, i);
        int k = o && o->cpuset ? dev_hw_overlap(set, o->cpuset) : 0;
        if (k > best) {
            best = k;
            dev->numa_node = (int32_t)o->os_index;
            dev->numa_index = (int32_t)o->logical_index;
            dev->memory_bytes = o->attr ? o->attr->numanode.local_memory : 0;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Executor threads                                                    */
/* ------------------------------------------------------------------ */

typedef enum JobState {
    JOB_IDLE,     /* nothing to do, no result waiting */
    JOB_QUEUED,   /* submitted, not started */
    JOB_RUNNING,
    JOB_DONE,     /* finished; dev_device_wait collects it */
} JobState;

struct DevDeviceImpl {
    hwloc_bitmap_t cpuset;
    char *cpuset_text;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_ok;            /* mu and cv initialised */
    bool started;            /* thread created */
    bool ready;              /* the thread has tried to bind itself */
    bool want_bind;
    bool quit;
    JobState state;
    DevJob fn;
    void *arg;
    IrStatus st;
    IrDiag diag;
};

/* Bind the calling executor thread to its device's cpuset, or say why not. */
static void bind_self(DevDevice *dev)
{
    const DevTopologyInfo *in = &dev->topo->info;
    dev->bound = false;
    dev->bind_errno = 0;
    if (!dev->impl->want_bind)
        dev->bind_note = "binding not requested";
    else if (!in->this_system)
        dev->bind_note = "the topology is not this machine's (synthetic or XML)";
    else if (!in->cpubind)
        dev->bind_note = "hwloc cannot bind threads on this system";
    else if (dev_hw_set_thread_cpubind(dev->topo->hw, dev->impl->cpuset) != 0) {
        dev->bind_errno = errno;
        dev->bind_note = "hwloc_set_cpubind failed";
    } else {
        dev->bound = true;
        dev->bind_note = NULL;
    }
}

static void *executor_main(void *p)
{
    DevDevice *dev = p;
    DevDeviceImpl *x = dev->impl;
    bind_self(dev);
    pthread_mutex_lock(&x->mu);
    x->ready = true;
    pthread_cond_broadcast(&x->cv);
    for (;;) {
        while (x->state != JOB_QUEUED && !x->quit)
            pthread_cond_wait(&x->cv, &x->mu);
        if (x->state != JOB_QUEUED)
            break; /* quit, nothing queued */
        x->state = JOB_RUNNING;
        DevJob fn = x->fn;
        void *arg = x->arg;
        pthread_mutex_unlock(&x->mu);
        IrDiag jd = {0};
        IrStatus st = fn(dev, arg, &jd);
        pthread_mutex_lock(&x->mu);
        x->st = st;
        x->diag = jd;
        x->state = JOB_DONE;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* Start device `dev`'s thread and wait until it has tried to bind, so that
 * hwloc calls happen in a fixed order (failure injection is repeatable). */
static IrStatus start_executor(DevDevice *dev, IrDiag *d)
{
    DevDeviceImpl *x = dev->impl;
    if (pthread_mutex_init(&x->mu, NULL) != 0)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "device %d: cannot create a mutex", (int)dev->ordinal);
    if (pthread_cond_init(&x->cv, NULL) != 0) {
        pthread_mutex_destroy(&x->mu);
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "device %d: cannot create a condition variable", (int)dev->ordinal);
    }
    x->sync_ok = true;
    int e = pthread_create(&x->thread, NULL, executor_main, dev);
    if (e != 0)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0},
                        "device %d: cannot start its executor thread: %s", (int)dev->ordinal,
                        strerror(e));
    x->started = true;
    pthread_mutex_lock(&x->mu);
    while (!x->ready)
        pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
    return IR_OK;
}

static void stop_executor(DevDeviceImpl *x)
{
    if (x->started) {
        pthread_mutex_lock(&x->mu);
        x->quit = true;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->thread, NULL);
        x->started = false;
    }
    if (x->sync_ok) {
        pthread_cond_destroy(&x->cv);
        pthread_mutex_destroy(&x->mu);
        x->sync_ok = false;
    }
    ir_diag_clear(&x->diag);
}

/* ------------------------------------------------------------------ */
/* Device sets                                                         */
/* ------------------------------------------------------------------ */

/* Everything of a set except the live-set count; safe on a partial set. */
static void set_free(DevDevices *set)
{
    if (!set)
        return;
    for (int32_t i = 0; set->dev && i < set->n; i++) {
        DevDeviceImpl *x = set->dev[i].impl;
        if (!x)
            continue;
        stop_executor(x);
        if (x->cpuset)
            dev_hw_bitmap_free(x->cpuset);
        ts_free(x->cpuset_text);
    }
    if (set->dev)
        ts_free(set->dev[0].impl); /* one array for all impls */
    ts_free(set->dev);
    ts_free(set);
}

void dev_devices_free(DevDevices *set)
{
    if (!set)
        return;
    set_free(set);
    pthread_mutex_lock(&g_lock);
    g_live_sets--;
    pthread_mutex_unlock(&g_lock);
}

/* Describe device i from its cpuset (taken over from sets[i]). */
static IrStatus describe(DevDevices *set, int32_t i, hwloc_bitmap_t cpuset, IrDiag *d)
{
    DevDevice *dev = &set->dev[i];
    DevDeviceImpl *x = dev->impl;
    x->cpuset = cpuset;
    if (!(x->cpuset_text = dev_hw_list_text(cpuset)))
        return ir_oom(d, NULL);
    dev->ordinal = i;
    dev->topo = set->topo;
    dev->cpuset = x->cpuset_text;
    dev->npus = dev_hw_weight(cpuset);
    dev->ncores = cores_of(set->topo, cpuset);
    numa_of(set->topo, cpuset, dev);
    dev->bind_note = "not started";
    return IR_OK;
}

/* Mark devices whose cpusets meet another's. Sets come from hwloc_distrib,
 * whose sets are whole cores (within the process), so sharing a PU means
 * sharing a core. */
static void mark_shared(DevDevices *set)
{
    for (int32_t i = 0; i < set->n; i++)
        for (int32_t j = i + 1; j < set->n; j++)
            if (dev_hw_intersects(set->dev[i].impl->cpuset, set->dev[j].impl->cpuset)) {
                set->dev[i].shares_cores = set->dev[j].shares_cores = true;
                set->shared_cores = true;
            }
}

/* Allocate the set and its L devices and impls (cpusets not yet there). */
static IrStatus set_new(DevTopology *t, int32_t L, DevDevices **out, IrDiag *d)
{
    DevDevices *set = ts_calloc(1, sizeof *set);
    if (!set)
        return ir_oom(d, NULL);
    set->topo = t;
    set->dev = ts_calloc((size_t)L, sizeof *set->dev);
    DevDeviceImpl *impls = ts_calloc((size_t)L, sizeof *impls);
    if (!set->dev || !impls) {
        ts_free(impls);
        set_free(set);
        return ir_oom(d, NULL);
    }
    set->n = L;
    for (int32_t i = 0; i < L; i++)
        set->dev[i].impl = &impls[i];
    *out = set;
    return IR_OK;
}

/* Cpusets from distribute() handed to the devices; leftovers freed. */
static IrStatus place(DevDevices *set, IrDiag *d)
{
    int32_t L = set->n;
    hwloc_bitmap_t *sets = ts_calloc((size_t)L, sizeof *sets);
    if (!sets)
        return ir_oom(d, NULL);
    IrStatus st = distribute(set->topo, L, sets, d);
    for (int32_t i = 0; i < L; i++) {
        if (st == IR_OK)
            st = describe(set, i, sets[i], d);
        else if (sets[i])
            dev_hw_bitmap_free(sets[i]);
    }
    ts_free(sets);
    if (st == IR_OK)
        mark_shared(set);
    return st;
}

IrStatus dev_devices_create(DevTopology *t, int32_t L, const DevDevicesOptions *opt,
                            DevDevices **out, IrDiag *d)
{
    *out = NULL;
    if (!t)
        return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                        "dev_devices_create: no topology");
    if (L < 1 || L > DEV_MAX_LOCAL_DEVICES)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "the number of local devices must be between 1 and %d, not %lld",
                        DEV_MAX_LOCAL_DEVICES, (long long)L);
    DevDevicesOptions none = {0};
    if (!opt)
        opt = &none;
    DevDevices *set = NULL;
    IrStatus st = set_new(t, L, &set, d);
    if (st != IR_OK)
        return st;
    if ((st = place(set, d)) != IR_OK)
        goto fail;
    if (!opt->keep_blas_threads) {
        set->blas_threads = dev_blas_threads_for(set);
        dev_blas_set_threads(set->blas_threads);
    }
    for (int32_t i = 0; i < L; i++) {
        set->dev[i].impl->want_bind = !opt->no_bind;
        if ((st = start_executor(&set->dev[i], d)) != IR_OK)
            goto fail;
    }
    pthread_mutex_lock(&g_lock);
    g_live_sets++;
    pthread_mutex_unlock(&g_lock);
    *out = set;
    return IR_OK;
fail:
    set_free(set);
    return st;
}

/* ------------------------------------------------------------------ */
/* Running jobs                                                        */
/* ------------------------------------------------------------------ */

IrStatus dev_device_submit(DevDevice *dev, DevJob fn, void *arg, IrDiag *d)
{
    DevDeviceImpl *x = dev->impl;
    if (!fn)
        return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                        "device %d: no job to submit", (int)dev->ordinal);
    pthread_mutex_lock(&x->mu);
    bool idle = x->state == JOB_IDLE;
    if (idle) {
        x->fn = fn;
        x->arg = arg;
        x->state = JOB_QUEUED;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    if (!idle)
        return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                        "device %d is busy: its last job was not waited for",
                        (int)dev->ordinal);
    return IR_OK;
}

/* Move the job's diag into d unless d already holds the first error. */
static void take_diag(IrDiag *d, IrDiag *jd)
{
    if (d && d->status == IR_OK && jd->status != IR_OK) {
        *d = *jd;
        memset(jd, 0, sizeof *jd);
    } else {
        ir_diag_clear(jd);
    }
}

IrStatus dev_device_wait(DevDevice *dev, IrDiag *d)
{
    DevDeviceImpl *x = dev->impl;
    pthread_mutex_lock(&x->mu);
    if (x->state == JOB_IDLE) {
        pthread_mutex_unlock(&x->mu);
        return ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                        "device %d: nothing was submitted", (int)dev->ordinal);
    }
    while (x->state != JOB_DONE)
        pthread_cond_wait(&x->cv, &x->mu);
    IrStatus st = x->st;
    take_diag(d, &x->diag);
    x->state = JOB_IDLE;
    pthread_mutex_unlock(&x->mu);
    return st;
}

IrStatus dev_device_run(DevDevice *dev, DevJob fn, void *arg, IrDiag *d)
{
    IrStatus st = dev_device_submit(dev, fn, arg, d);
    return st != IR_OK ? st : dev_device_wait(dev, d);
}

IrStatus dev_devices_run_all(DevDevices *set, DevJob fn, void **args, IrDiag *d)
{
    IrStatus first = IR_OK;
    int32_t submitted = 0;
    for (; submitted < set->n; submitted++) {
        void *arg = args ? args[submitted] : NULL;
        if ((first = dev_device_submit(&set->dev[submitted], fn, arg, d)) != IR_OK)
            break;
    }
    for (int32_t i = 0; i < submitted; i++) {
        IrStatus st = dev_device_wait(&set->dev[i], d);
        if (first == IR_OK)
            first = st;
    }
    return first;
}

/* ------------------------------------------------------------------ */
/* BLAS threads (the policy is in device.h)                            */
/* ------------------------------------------------------------------ */

static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

int dev_blas_threads_for(const DevDevices *set)
{
    int32_t fewest = INT32_MAX;
    for (int32_t i = 0; i < set->n; i++)
        if (set->dev[i].ncores < fewest)
            fewest = set->dev[i].ncores;
    return fewest < 1 || fewest == INT32_MAX ? 1 : (int)fewest;
}

void dev_blas_set_threads(int n)
{
    if (n < 1)
        n = 1;
    dev_blas_sgemm_threads(n, false);
    const DevBlas *b = dev_blas_for_threads(n);
    if (!b)
        return;
    pthread_mutex_lock(&blas_lock);
    if (b->get_num_threads() != n)
        b->set_num_threads(n);
    pthread_mutex_unlock(&blas_lock);
}

int dev_blas_threads(void)
{
    const DevBlas *b = dev_blas();
    if (!b)
        return 1;
    pthread_mutex_lock(&blas_lock);
    int n = b->get_num_threads();
    pthread_mutex_unlock(&blas_lock);
    return n;
}
