/*
 * test_devices.c: local devices from hwloc (device/devices.c) and their
 * allocators (device/alloc.c).
 *
 * Expected values come from outside the code under test: the process's CPUs
 * from sched_getaffinity, cores from sysfs (core_id, physical_package_id),
 * binding from sched_getaffinity/sched_getcpu inside the executor thread,
 * memory policy from the get_mempolicy system call, and, for machines we do
 * not have (two packages, two NUMA nodes), hwloc's synthetic topologies
 * with cpusets worked out by hand from hwloc_distrib's rule (device.h).
 * Failure injection runs each scenario with the Nth hwloc call (or the Nth
 * allocation) failing until the scenario no longer reaches N; ASan and
 * valgrind check that nothing leaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device/blas.h"

enum { MAXCPU = 1024 };

/* ---- independent helpers ---- */

/* Parse hwloc's list syntax ("0-1,4,6-7") into cpus[]; returns the count,
 * -1 when malformed. */
static int parse_list(const char *s, bool *cpus)
{
    memset(cpus, 0, MAXCPU * sizeof *cpus);
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0 || a >= MAXCPU)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a || b >= MAXCPU)
                return -1;
            s = end;
        }
        for (long i = a; i <= b; i++)
            if (!cpus[i]) {
                cpus[i] = true;
                n++;
            }
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* The CPUs the calling thread may run on. */
static int affinity(bool *cpus)
{
    cpu_set_t cs;
    CPU_ZERO(&cs);
    assert_int_equal(sched_getaffinity(0, sizeof cs, &cs), 0);
    int n = 0;
    for (int i = 0; i < MAXCPU; i++) {
        cpus[i] = i < CPU_SETSIZE && CPU_ISSET(i, &cs);
        n += cpus[i];
    }
    return n;
}

static bool same_set(const bool *a, const bool *b)
{
    return memcmp(a, b, MAXCPU * sizeof *a) == 0;
}

static int read_int(const char *path)
{
    FILE *f = fopen(path, "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* Distinct (package, core) pairs among cpus[], from sysfs; -1 unknown. */
static int sysfs_cores(const bool *cpus)
{
    int pk[MAXCPU], co[MAXCPU], n = 0;
    for (int i = 0; i < MAXCPU; i++) {
        if (!cpus[i])
            continue;
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", i);
        int c = read_int(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", i);
        int k = read_int(p);
        if (c < 0 || k < 0)
            return -1;
        bool seen = false;
        for (int j = 0; j < n; j++)
            seen |= pk[j] == k && co[j] == c;
        if (!seen) {
            pk[n] = k;
            co[n] = c;
            n++;
        }
    }
    return n;
}

/* This test's machine: 2 CPUs, each its own core (the exact cases). */
static bool two_core_machine(int *c0, int *c1)
{
    bool cpus[MAXCPU];
    if (affinity(cpus) != 2 || sysfs_cores(cpus) != 2)
        return false;
    int k = 0;
    for (int i = 0; i < MAXCPU; i++)
        if (cpus[i])
            *(k++ ? c1 : c0) = i;
    return true;
}

static void shutdown_ok(void)
{
    IrDiag d = {0};
    IrStatus st = dev_shutdown(&d);
    if (st != IR_OK)
        fail_msg("dev_shutdown: %s", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
}

static DevTopology *load(void)
{
    DevTopology *t = NULL;
    IrDiag d = {0};
    IrStatus st = dev_topology_load(&t, &d);
    if (st != IR_OK)
        fail_msg("dev_topology_load: %s", d.msg ? d.msg : "?");
    assert_non_null(t);
    return t;
}

static DevDevices *create(DevTopology *t, int32_t L, const DevDevicesOptions *opt)
{
    DevDevices *set = NULL;
    IrDiag d = {0};
    IrStatus st = dev_devices_create(t, L, opt, &set, &d);
    if (st != IR_OK)
        fail_msg("dev_devices_create(%d): %s", (int)L, d.msg ? d.msg : "?");
    assert_non_null(set);
    assert_int_equal(set->n, L);
    return set;
}

static void use_synthetic(const char *desc)
{
    shutdown_ok();
    if (desc)
        setenv("HWLOC_SYNTHETIC", desc, 1);
    else
        unsetenv("HWLOC_SYNTHETIC");
}

/* ---- the topology ---- */

static void test_topology_this_machine(void **state)
{
    (void)state;
    use_synthetic(NULL);
    bool want[MAXCPU], got[MAXCPU];
    int ncpu = affinity(want);
    DevTopology *t = load();
    assert_ptr_equal(load(), t); /* loaded once, cached */
    const DevTopologyInfo *in = dev_topology_info(t);
    assert_true(in->this_system);
    assert_int_equal(parse_list(in->cpuset, got), ncpu);
    assert_true(same_set(got, want));
    assert_int_equal(in->npus, ncpu);
    int cores = sysfs_cores(want);
    if (cores > 0)
        assert_int_equal(in->ncores, cores);
    assert_true(in->npackages >= 1);
    assert_true(in->nnuma >= 1);
    assert_true(in->memory_bytes > 0);
    assert_true(in->hwloc_version[0] >= '2' && in->hwloc_version[1] == '.'); /* hwloc 2.x */
    shutdown_ok();
    DevTopology *t2 = load(); /* after shutdown: a fresh load works */
    assert_non_null(t2);
    shutdown_ok();
}

static void test_synthetic_topology(void **state)
{
    (void)state;
    /* 2 packages x 1 NUMA node (3 GiB each) x 2 cores x 2 PUs: PUs 0-7,
     * cores {0-1} {2-3} {4-5} {6-7}, node 0 = PUs 0-3, node 1 = PUs 4-7. */
    use_synthetic("pack:2 numa:1(memory=3221225472) core:2 pu:2");
    DevTopology *t = load();
    const DevTopologyInfo *in = dev_topology_info(t);
    assert_false(in->this_system);
    assert_false(in->cpubind);
    assert_false(in->membind);
    assert_string_equal(in->cpuset, "0-7");
    assert_int_equal(in->npackages, 2);
    assert_int_equal(in->ncores, 4);
    assert_int_equal(in->npus, 8);
    assert_int_equal(in->nnuma, 2);
    assert_int_equal(in->memory_bytes, 2 * 3221225472ull);
    use_synthetic(NULL);
}

/* ---- distribution ---- */

typedef struct Want {
    const char *cpuset;
    int ncores, numa;
    bool shares;
} Want;

static void check_set(const DevDevices *set, int32_t L, const Want *w, bool shared)
{
    for (int32_t i = 0; i < L; i++) {
        const DevDevice *dv = &set->dev[i];
        assert_int_equal(dv->ordinal, i);
        assert_string_equal(dv->cpuset, w[i].cpuset);
        assert_int_equal(dv->ncores, w[i].ncores);
        assert_int_equal(dv->numa_node, w[i].numa);
        assert_int_equal(dv->shares_cores, w[i].shares);
    }
    assert_int_equal(set->shared_cores, shared);
}

static void test_synthetic_distribution(void **state)
{
    (void)state;
    use_synthetic("pack:2 numa:1(memory=3221225472) core:2 pu:2");
    DevTopology *t = load();
    DevDevicesOptions keep = {.keep_blas_threads = true};
    /* L=1: everything; PUs split 4/4 between the nodes: the first wins. */
    static const Want w1[] = {{"0-7", 4, 0, false}};
    /* L=2: one package each. */
    static const Want w2[] = {{"0-3", 2, 0, false}, {"4-7", 2, 1, false}};
    /* L=3: package 0 gets ceil(3*4/8) = 2 devices (one core each), package
     * 1 the third (both its cores). */
    static const Want w3[] = {{"0-1", 1, 0, false}, {"2-3", 1, 0, false}, {"4-7", 2, 1, false}};
    /* L=4: one core each. */
    static const Want w4[] = {{"0-1", 1, 0, false}, {"2-3", 1, 0, false},
                              {"4-5", 1, 1, false}, {"6-7", 1, 1, false}};
    /* L=5: package 0 gets ceil(5*4/8) = 3: core 0 gets ceil(3*2/4) = 2
     * devices, core 1 one; package 1 gets 2: one core each. */
    static const Want w5[] = {{"0-1", 1, 0, true}, {"0-1", 1, 0, true}, {"2-3", 1, 0, false},
                              {"4-5", 1, 1, false}, {"6-7", 1, 1, false}};
    /* L=8: two devices per core, never a split core. */
    static const Want w8[] = {{"0-1", 1, 0, true}, {"0-1", 1, 0, true}, {"2-3", 1, 0, true},
                              {"2-3", 1, 0, true}, {"4-5", 1, 1, true}, {"4-5", 1, 1, true},
                              {"6-7", 1, 1, true}, {"6-7", 1, 1, true}};
    static const struct { int32_t L; const Want *w; bool shared; int blas; } cases[] = {
        {1, w1, false, 4}, {2, w2, false, 2}, {3, w3, false, 1},
        {4, w4, false, 1}, {5, w5, true, 1}, {8, w8, true, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        DevDevices *set = create(t, cases[k].L, &keep);
        check_set(set, cases[k].L, cases[k].w, cases[k].shared);
        assert_int_equal(dev_blas_threads_for(set), cases[k].blas);
        assert_int_equal(set->blas_threads, 0); /* kept */
        for (int32_t i = 0; i < set->n; i++) {
            assert_int_equal(set->dev[i].memory_bytes, 3221225472ull);
            assert_false(set->dev[i].bound);
            assert_string_equal(set->dev[i].bind_note,
                                "the topology is not this machine's (synthetic or XML)");
        }
        dev_devices_free(set);
    }
    use_synthetic(NULL);
}

/* On this machine (2 cores): L = 1..4, checked against the affinity mask. */
static void test_distribution_this_machine(void **state)
{
    (void)state;
    use_synthetic(NULL);
    bool proc[MAXCPU], s[MAXCPU], uni[MAXCPU], seen[MAXCPU];
    affinity(proc);
    DevTopology *t = load();
    int32_t ncores = dev_topology_info(t)->ncores;
    int c0 = -1, c1 = -1;
    bool exact = two_core_machine(&c0, &c1);
    char a[16], b[16], ab[32];
    snprintf(a, sizeof a, "%d", c0);
    snprintf(b, sizeof b, "%d", c1);
    snprintf(ab, sizeof ab, c1 == c0 + 1 ? "%d-%d" : "%d,%d", c0, c1);
    /* hwloc_distrib on 2 cores: L=1 {c0,c1}; L=2 {c0} {c1}; L=3 core 0
     * gets ceil(3/2) = 2: {c0} {c0} {c1}; L=4 {c0} {c0} {c1} {c1}. */
    const char *exp[5][4] = {{0}, {ab}, {a, b}, {a, a, b}, {a, a, b, b}};
    for (int32_t L = 1; L <= 4; L++) {
        DevDevices *set = create(t, L, NULL);
        memset(uni, 0, sizeof uni);
        memset(seen, 0, sizeof seen);
        for (int32_t i = 0; i < L; i++) {
            const DevDevice *dv = &set->dev[i];
            int n = parse_list(dv->cpuset, s);
            assert_true(n >= 1);
            assert_int_equal(dv->npus, n);
            assert_true(dv->ncores >= 1);
            for (int c = 0; c < MAXCPU; c++) {
                if (!s[c])
                    continue;
                assert_true(proc[c]); /* within the allowed set */
                if (L <= ncores)
                    assert_false(seen[c]); /* disjoint when cores suffice */
                seen[c] = uni[c] = true;
            }
            assert_true(dv->numa_node >= 0);
            assert_true(dv->memory_bytes > 0);
            if (exact)
                assert_string_equal(dv->cpuset, exp[L][i]);
        }
        assert_true(same_set(uni, proc)); /* the union is the whole process set */
        assert_int_equal(set->shared_cores, L > ncores);
        /* BLAS: max(1, fewest cores per device), set process-wide */
        int want_blas = L <= ncores ? ncores / L : 1;
        if (exact)
            assert_int_equal(set->blas_threads, L == 1 ? 2 : 1);
        assert_int_equal(set->blas_threads, want_blas);
        assert_int_equal(dev_blas()->get_num_threads(), want_blas); /* the library itself */
        assert_int_equal(dev_blas_threads(), want_blas);
        dev_devices_free(set);
    }
    shutdown_ok();
}

static void test_bad_device_counts(void **state)
{
    (void)state;
    DevTopology *t = load();
    DevDevices *set = (DevDevices *)1;
    IrDiag d = {0};
    assert_int_equal(dev_devices_create(t, 0, NULL, &set, &d), IR_EINPUT);
    assert_null(set);
    assert_string_equal(d.msg, "the number of local devices must be between 1 and 1024, not 0");
    ir_diag_clear(&d);
    assert_int_equal(dev_devices_create(t, DEV_MAX_LOCAL_DEVICES + 1, NULL, &set, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "not 1025"));
    ir_diag_clear(&d);
    assert_int_equal(dev_devices_create(NULL, 1, NULL, &set, &d), IR_EINTERNAL);
    ir_diag_clear(&d);
    shutdown_ok();
}

/* ---- executor threads ---- */

typedef struct Where {
    pthread_t self;
    bool mask[MAXCPU];
    bool ran_on[MAXCPU];
    int nsamples;
} Where;

/* Record the thread, its affinity, and where it runs over a few thousand
 * samples (yielding, so the scheduler may move it if it could). */
static IrStatus job_where(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)dev;
    (void)d;
    Where *w = arg;
    w->self = pthread_self();
    affinity(w->mask);
    memset(w->ran_on, 0, sizeof w->ran_on);
    for (int i = 0; i < 2000; i++) {
        int c = sched_getcpu();
        if (c >= 0 && c < MAXCPU)
            w->ran_on[c] = true;
        if (i % 100 == 0)
            sched_yield();
    }
    w->nsamples = 2000;
    return IR_OK;
}

static void test_executor_bound(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    if (!dev_topology_info(t)->cpubind)
        skip();
    bool cs[MAXCPU];
    for (int32_t L = 1; L <= 3; L++) {
        DevDevices *set = create(t, L, NULL);
        Where w[3];
        void *args[3] = {&w[0], &w[1], &w[2]};
        IrDiag d = {0};
        assert_int_equal(dev_devices_run_all(set, job_where, args, &d), IR_OK);
        for (int32_t i = 0; i < L; i++) {
            const DevDevice *dv = &set->dev[i];
            assert_true(dv->bound);
            assert_null(dv->bind_note);
            assert_false(pthread_equal(w[i].self, pthread_self()));
            parse_list(dv->cpuset, cs);
            assert_true(same_set(w[i].mask, cs)); /* the thread's mask is the cpuset */
            for (int c = 0; c < MAXCPU; c++)
                if (w[i].ran_on[c])
                    assert_true(cs[c]); /* and it ran only there */
        }
        /* the same thread runs every job of a device */
        Where again;
        assert_int_equal(dev_device_run(&set->dev[0], job_where, &again, &d), IR_OK);
        assert_true(pthread_equal(again.self, w[0].self));
        dev_devices_free(set);
    }
    shutdown_ok();
}

static void test_executor_unbound(void **state)
{
    (void)state;
    use_synthetic(NULL);
    bool proc[MAXCPU];
    affinity(proc);
    DevTopology *t = load();
    DevDevicesOptions o = {.no_bind = true};
    DevDevices *set = create(t, 2, &o);
    Where w;
    IrDiag d = {0};
    assert_int_equal(dev_device_run(&set->dev[1], job_where, &w, &d), IR_OK);
    assert_false(set->dev[1].bound);
    assert_string_equal(set->dev[1].bind_note, "binding not requested");
    assert_int_equal(set->dev[1].bind_errno, 0);
    assert_true(same_set(w.mask, proc)); /* inherits the process's mask */
    dev_devices_free(set);
    shutdown_ok();
}

/* A binding that fails is a warning, not an error: make exactly the
 * set_cpubind call of a one-device set fail (it is the last hwloc call of
 * dev_devices_create). */
static void test_bind_failure_is_a_warning(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    if (!dev_topology_info(t)->cpubind)
        skip();
    long c0 = dev_hw_call_count();
    DevDevices *set = create(t, 1, NULL);
    long calls = dev_hw_call_count() - c0;
    assert_true(set->dev[0].bound);
    dev_devices_free(set);

    dev_hw_fail_errno(EPERM);
    dev_hw_fail_after(calls);
    set = create(t, 1, NULL);
    dev_hw_fail_after(0);
    dev_hw_fail_errno(0);
    assert_false(set->dev[0].bound);
    assert_int_equal(set->dev[0].bind_errno, EPERM);
    assert_string_equal(set->dev[0].bind_note, "hwloc_set_cpubind failed");
    bool proc[MAXCPU];
    affinity(proc);
    Where w;
    IrDiag d = {0};
    assert_int_equal(dev_device_run(&set->dev[0], job_where, &w, &d), IR_OK);
    assert_true(same_set(w.mask, proc));
    dev_devices_free(set);
    shutdown_ok();
}

static IrStatus job_store_ordinal(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)d;
    *(int32_t *)arg = dev->ordinal + 100;
    return IR_OK;
}

static IrStatus job_fail_odd(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)arg;
    if (dev->ordinal % 2 == 0)
        return IR_OK;
    return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "boom on device %d",
                    (int)dev->ordinal);
}

static IrStatus job_sleep(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)dev;
    (void)d;
    usleep(20000);
    *(int *)arg = 1;
    return IR_OK;
}

static void test_jobs(void **state)
{
    (void)state;
    DevTopology *t = load();
    DevDevices *set = create(t, 4, NULL);
    IrDiag d = {0};
    int32_t got[4] = {0};
    void *args[4] = {&got[0], &got[1], &got[2], &got[3]};
    assert_int_equal(dev_devices_run_all(set, job_store_ordinal, args, &d), IR_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(got[i], 100 + i);

    /* devices 1 and 3 fail: the first in ordinal order is reported */
    assert_int_equal(dev_devices_run_all(set, job_fail_odd, NULL, &d), IR_ERUNTIME);
    assert_string_equal(d.msg, "boom on device 1");
    ir_diag_clear(&d);

    /* one job at a time; waiting for nothing is a bug */
    int done = 0;
    assert_int_equal(dev_device_submit(&set->dev[2], job_sleep, &done, &d), IR_OK);
    assert_int_equal(dev_device_submit(&set->dev[2], job_sleep, &done, &d), IR_EINTERNAL);
    assert_string_equal(d.msg, "device 2 is busy: its last job was not waited for");
    ir_diag_clear(&d);
    assert_int_equal(dev_device_wait(&set->dev[2], &d), IR_OK);
    assert_int_equal(done, 1);
    assert_int_equal(dev_device_wait(&set->dev[2], &d), IR_EINTERNAL);
    assert_string_equal(d.msg, "device 2: nothing was submitted");
    ir_diag_clear(&d);
    assert_int_equal(dev_device_submit(&set->dev[0], NULL, NULL, &d), IR_EINTERNAL);
    ir_diag_clear(&d);

    /* a diag already holding an error keeps it */
    ir_error(&d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "earlier");
    assert_int_equal(dev_device_run(&set->dev[1], job_fail_odd, NULL, &d), IR_ERUNTIME);
    assert_string_equal(d.msg, "earlier");
    ir_diag_clear(&d);

    /* freeing with a failed job nobody collected, and one still running */
    assert_int_equal(dev_device_submit(&set->dev[3], job_fail_odd, NULL, &d), IR_OK);
    done = 0;
    assert_int_equal(dev_device_submit(&set->dev[0], job_sleep, &done, &d), IR_OK);
    dev_devices_free(set);
    assert_int_equal(done, 1); /* the running job finished before the join */
    shutdown_ok();
}

/* ---- allocators ---- */

#define MPOL_DEFAULT_ 0
#define MPOL_BIND_ 2
#define MPOL_F_ADDR_ (1 << 1)

/* The memory policy of the page at p: the kernel's word, not hwloc's. */
static int mempolicy_of(void *p, unsigned long *nodemask)
{
    int mode = -1;
    *nodemask = 0;
    long r = syscall(SYS_get_mempolicy, &mode, nodemask, 8 * sizeof *nodemask, p, MPOL_F_ADDR_);
    return r == 0 ? mode : -1;
}

static void test_alloc_bound(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    DevDevices *set = create(t, 2, NULL);
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_device_allocator(&set->dev[1], "cpu", &a, &d), IR_OK);
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    assert_int_equal(st.numa_node, set->dev[1].numa_node);
    bool can = dev_topology_info(t)->membind;
    assert_int_equal(st.membind, can);
    size_t n = 1 << 20;
    unsigned char *p = dev_alloc(a, n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    memset(p, 0xab, n);
    assert_int_equal(p[n - 1], 0xab);
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nallocs, 1);
    assert_int_equal(st.nlive, 1);
    assert_int_equal(st.live_bytes, (int64_t)n);
    assert_int_equal(st.peak_bytes, (int64_t)n);
    unsigned long mask;
    int mode = mempolicy_of(p, &mask);
    if (st.membind) {
        assert_int_equal(st.nbound, 1);
        assert_int_equal(mode, MPOL_BIND_);
        assert_int_equal(mask, 1ul << st.numa_node);
    } else {
        assert_int_equal(st.nbound, 0);
        assert_int_not_equal(st.membind_errno, 0);
    }
    void *q = dev_alloc(a, 100);
    assert_non_null(q);
    assert_int_equal((uintptr_t)q % 64, 0);
    dev_allocator_stats(a, &st);
    assert_int_equal(st.live_bytes, (int64_t)n + 100);
    dev_alloc_free(p);
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nlive, 1);
    assert_int_equal(st.live_bytes, 100);
    assert_int_equal(st.peak_bytes, (int64_t)n + 100);
    dev_alloc_free(q);
    dev_alloc_free(NULL);
    dev_devices_free(set);
    shutdown_ok();
}

/* A device thread's large tensors come from its allocator
 * (dev_alloc_use): bound to its NUMA node as hwloc reports it, back to
 * the allocator when freed on another thread; small ones and other
 * threads' stay with malloc. On one NUMA node the binding is to node 0,
 * and the path is the same. */
typedef struct TensorJob {
    DevAllocator *a;
    DevValue *big, *small, *big2;
} TensorJob;

static IrStatus tensor_job(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)dev;
    (void)d;
    TensorJob *j = arg;
    dev_alloc_use(j->a);
    int64_t dims[1] = {DEV_BOUND_MIN / 4};
    IrShape big = {.type = IR_F32, .rank = 1, .dims = dims};
    int64_t sdims[1] = {1000};
    IrShape small = {.type = IR_F32, .rank = 1, .dims = sdims};
    j->big = dev_value_zeros(&big);
    j->small = dev_value_new(&small);
    /* freed and made again on the device: its own cache, its own node */
    DevValue *t = dev_value_new_uninit(&big);
    dev_value_unref(t);
    j->big2 = dev_value_new_uninit(&big);
    dev_alloc_use(NULL);
    dev_value_trim();
    return IR_OK;
}

static void test_alloc_device_tensors(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    DevDevices *set = create(t, 1, NULL);
    TensorJob j = {0};
    IrDiag d = {0};
    assert_int_equal(dev_device_allocator(&set->dev[0], "cpu", &j.a, &d), IR_OK);
    DevAllocStats st;
    dev_allocator_stats(j.a, &st);
    int64_t before = st.nlive;
    assert_int_equal(dev_device_run(&set->dev[0], tensor_job, &j, &d), IR_OK);
    assert_non_null(j.big);
    assert_non_null(j.small);
    assert_non_null(j.big2);
    assert_null(j.small->alloc);
    assert_float_equal(((float *)j.big->data)[dev_value_elements(j.big) - 1], 0.0f, 0.0f);
    dev_allocator_stats(j.a, &st);
    if (st.membind) {
        assert_ptr_equal(j.big->alloc, j.a);
        assert_ptr_equal(j.big2->alloc, j.a);
        assert_int_equal(st.nlive, before + 2);
        assert_int_equal(dev_alloc_node_of(j.big->data, (size_t)j.big->nbytes), st.numa_node);
        assert_int_equal(dev_alloc_node_of(j.big2->data, (size_t)j.big2->nbytes), st.numa_node);
    } else {
        assert_null(j.big->alloc);
        assert_int_equal(dev_alloc_node_of(NULL, 0), -1);
    }
    /* on this thread (no allocator of its own): back to the allocator now */
    dev_value_unref(j.big);
    dev_value_unref(j.big2);
    dev_value_unref(j.small);
    dev_allocator_stats(j.a, &st);
    assert_int_equal(st.nlive, before);
    /* the main thread's own large tensors: plain */
    int64_t dims[1] = {DEV_BOUND_MIN};
    IrShape big = {.type = IR_F32, .rank = 1, .dims = dims};
    DevValue *v = dev_value_new(&big);
    assert_non_null(v);
    assert_null(v->alloc);
    dev_value_unref(v);
    dev_value_trim();
    dev_devices_free(set);
    shutdown_ok();
}

/* Shares (dev_value_share): each holder of one array counts it against
 * its own device, from taking it to dropping it; the array counts against
 * none while shared; a share is sole (writable) only as the array's one
 * holder. dev_value_hold charges an array only it holds, shares one held
 * elsewhere too, and holds a tuple's elements so. */
static int64_t held_bytes(DevAllocator *a)
{
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    return st.value_bytes;
}

static void test_value_shares(void **state)
{
    (void)state;
    DevAllocator *a0 = NULL, *a1 = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_allocator_get("shares", 0, &a0, &d), IR_OK);
    assert_int_equal(dev_allocator_get("shares", 1, &a1, &d), IR_OK);
    int64_t dims[1] = {100};
    IrShape s = {.type = IR_F32, .rank = 1, .dims = dims};
    dev_alloc_use(a0);
    DevValue *v = dev_value_new(&s);
    dev_alloc_use(NULL);
    assert_non_null(v);
    ((float *)v->data)[7] = 3.5f;
    assert_int_equal(held_bytes(a0), 400);
    assert_true(dev_value_sole(v));
    DevValue *s1 = dev_value_share(v, a1);
    assert_non_null(s1);
    assert_ptr_equal(s1->data, v->data);
    assert_int_equal(held_bytes(a1), 400);
    assert_int_equal(held_bytes(a0), 0); /* the array counts against none */
    DevValue *s0 = dev_value_share(s1, a0); /* a share of a share: of the array */
    assert_ptr_equal(s0->base, v);
    assert_int_equal(held_bytes(a0), 400);
    dev_value_unref(v);
    assert_int_equal(held_bytes(a0), 400);
    assert_false(dev_value_sole(s0)); /* s1 holds the array too */
    assert_float_equal(((float *)s0->data)[7], 3.5f, 0.0f);
    dev_value_unref(s1);
    assert_int_equal(held_bytes(a1), 0);
    assert_true(dev_value_sole(s0));
    dev_value_unref(s0);
    assert_int_equal(held_bytes(a0), 0);

    /* hold: a tuple only it holds keeps its elements, a shared element
     * becomes a share, a sole one is charged */
    DevValue *x = dev_value_new(&s), *y = dev_value_new(&s);
    DevValue *keep = dev_value_ref(x); /* x is shared with "another device" */
    DevValue *el[2] = {x, y};
    DevValue *t = dev_value_tuple(NULL, 2, el);
    dev_value_hold(&t, a1);
    assert_int_equal(held_bytes(a1), 800);
    assert_ptr_equal(t->elems[0]->base, x);
    assert_ptr_equal(t->elems[1], y);
    dev_value_hold(&keep, a0); /* the other holder: its own share */
    assert_int_equal(held_bytes(a0), 400);
    assert_int_equal(held_bytes(a1), 800);
    dev_value_unref(t);
    assert_int_equal(held_bytes(a1), 0);
    assert_true(dev_value_sole(keep));
    dev_value_unref(keep);
    assert_int_equal(held_bytes(a0), 0);
    shutdown_ok();
}

static void test_alloc_plain(void **state)
{
    (void)state;
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_allocator_get("cpu", 7, &a, &d), IR_OK);
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    assert_false(st.membind);
    assert_int_equal(st.membind_errno, 0); /* binding was never wanted */
    assert_int_equal(st.numa_node, -1);
    void *p = dev_alloc(a, 0), *q = dev_alloc(a, 0);
    assert_non_null(p);
    assert_non_null(q);
    assert_ptr_not_equal(p, q);
    char *r = dev_alloc(a, 4096);
    assert_non_null(r);
    assert_int_equal((uintptr_t)r % 64, 0);
    unsigned long mask;
    assert_int_equal(mempolicy_of(r, &mask), MPOL_DEFAULT_);
    /* sizes that cannot be allocated */
    assert_null(dev_alloc(a, SIZE_MAX));
    assert_null(dev_alloc(a, SIZE_MAX - 64));
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nallocs, 3);
    assert_int_equal(st.nbound, 0);
    assert_int_equal(st.nfailed, 2);
    assert_int_equal(st.nlive, 3);
    assert_int_equal(st.live_bytes, 4096);
    dev_alloc_free(p);
    dev_alloc_free(q);
    dev_alloc_free(r);
    shutdown_ok();
}

static void test_alloc_synthetic_falls_back(void **state)
{
    (void)state;
    use_synthetic("pack:2 numa:1(memory=3221225472) core:2 pu:2");
    DevTopology *t = load();
    DevDevices *set = create(t, 2, NULL);
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_device_allocator(&set->dev[1], "cpu", &a, &d), IR_OK);
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    assert_int_equal(st.numa_node, 1);
    assert_false(st.membind);
    assert_int_equal(st.membind_errno, ENOSYS);
    void *p = dev_alloc(a, 1000);
    assert_non_null(p);
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nallocs, 1);
    assert_int_equal(st.nbound, 0);
    dev_alloc_free(p);
    dev_devices_free(set);
    use_synthetic(NULL);
}

/* Binding refused for a reason other than memory (EXDEV): the allocator
 * falls back to plain memory for this and later allocations, and says why. */
static void test_alloc_bind_refused_falls_back(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    if (!dev_topology_info(t)->membind)
        skip();
    DevDevices *set = create(t, 1, NULL);
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_device_allocator(&set->dev[0], "cpu", &a, &d), IR_OK);
    dev_hw_fail_errno(EXDEV);
    dev_hw_fail_after(1);
    void *p = dev_alloc(a, 8192);
    dev_hw_fail_after(0);
    dev_hw_fail_errno(0);
    assert_non_null(p);
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    assert_false(st.membind);
    assert_int_equal(st.membind_errno, EXDEV);
    assert_int_equal(st.nbound, 0);
    unsigned long mask;
    assert_int_equal(mempolicy_of(p, &mask), MPOL_DEFAULT_);
    long c0 = dev_hw_call_count();
    void *q = dev_alloc(a, 8192); /* no more binding attempts */
    assert_int_equal(dev_hw_call_count(), c0);
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nbound, 0);
    /* out of memory while binding is a failed allocation, not a fallback */
    DevAllocator *b = NULL;
    assert_int_equal(dev_device_allocator(&set->dev[0], "other", &b, &d), IR_OK);
    dev_hw_fail_after(1);
    assert_null(dev_alloc(b, 8192));
    dev_hw_fail_after(0);
    dev_allocator_stats(b, &st);
    assert_true(st.membind);
    assert_int_equal(st.nfailed, 1);
    assert_int_equal(st.nlive, 0);
    /* and a refused ts_malloc turn also refuses a bound allocation */
    ts_fail_alloc_after(1);
    assert_null(dev_alloc(b, 8192));
    ts_fail_alloc_after(0);
    dev_allocator_stats(b, &st);
    assert_int_equal(st.nfailed, 2);
    void *r = dev_alloc(b, 8192);
    assert_non_null(r);
    dev_allocator_stats(b, &st);
    assert_int_equal(st.nbound, 1);
    dev_alloc_free(p);
    dev_alloc_free(q);
    dev_alloc_free(r);
    dev_devices_free(set);
    shutdown_ok();
}

static void test_allocator_cache(void **state)
{
    (void)state;
    use_synthetic(NULL);
    DevTopology *t = load();
    DevDevices *set = create(t, 2, NULL);
    DevAllocator *a, *a2, *a3, *b, *c;
    IrDiag d = {0};
    assert_int_equal(dev_device_allocator(&set->dev[0], "cpu", &a, &d), IR_OK);
    assert_int_equal(dev_device_allocator(&set->dev[0], "cpu", &a2, &d), IR_OK);
    assert_int_equal(dev_allocator_get("cpu", 0, &a3, &d), IR_OK);
    assert_int_equal(dev_device_allocator(&set->dev[1], "cpu", &b, &d), IR_OK);
    assert_int_equal(dev_allocator_get("gpu", 0, &c, &d), IR_OK);
    assert_ptr_equal(a, a2);
    assert_ptr_equal(a, a3);
    assert_ptr_not_equal(a, b);
    assert_ptr_not_equal(a, c);
    assert_ptr_not_equal(b, c);

    /* buffers and allocators outlive the devices */
    char *p = dev_alloc(a, 256);
    assert_non_null(p);
    dev_devices_free(set);
    memset(p, 7, 256);
    assert_int_equal(p[255], 7);
    DevAllocator *again;
    assert_int_equal(dev_allocator_get("cpu", 0, &again, &d), IR_OK);
    assert_ptr_equal(again, a);
    set = create(t, 2, NULL);
    assert_int_equal(dev_device_allocator(&set->dev[0], "cpu", &again, &d), IR_OK);
    assert_ptr_equal(again, a);

    /* shutdown refuses while devices or buffers are alive */
    assert_int_equal(dev_shutdown(&d), IR_EINTERNAL);
    assert_string_equal(d.msg, "dev_shutdown: 1 device set still alive");
    ir_diag_clear(&d);
    dev_devices_free(set);
    assert_int_equal(dev_shutdown(&d), IR_EINTERNAL);
    assert_string_equal(d.msg, "allocator cpu:0 still has 1 live buffer (256 bytes)");
    ir_diag_clear(&d);
    assert_int_equal(p[0], 7); /* nothing was freed */
    dev_alloc_free(p);
    shutdown_ok();

    /* bad keys */
    DevAllocator *x = (DevAllocator *)1;
    assert_int_equal(dev_allocator_get(NULL, 0, &x, &d), IR_EINPUT);
    assert_null(x);
    ir_diag_clear(&d);
    assert_int_equal(dev_allocator_get("", 0, &x, &d), IR_EINPUT);
    ir_diag_clear(&d);
    assert_int_equal(dev_allocator_get("cpu", -1, &x, &d), IR_EINPUT);
    assert_string_equal(d.msg, "an allocator needs a backend name and an ordinal >= 0");
    ir_diag_clear(&d);
}

/* Allocators are shared between threads: every device allocates and frees
 * from the same allocator at once; the counts add up. */
static IrStatus job_alloc_many(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)dev;
    (void)d;
    DevAllocator *a = arg;
    for (int i = 0; i < 200; i++) {
        void *p = dev_alloc(a, 64 + (size_t)i);
        if (!p)
            return IR_ENOMEM;
        dev_alloc_free(p);
    }
    return IR_OK;
}

static void test_allocator_threads(void **state)
{
    (void)state;
    DevTopology *t = load();
    DevDevices *set = create(t, 4, NULL);
    DevAllocator *a;
    IrDiag d = {0};
    assert_int_equal(dev_allocator_get("shared", 0, &a, &d), IR_OK);
    void *args[4] = {a, a, a, a};
    assert_int_equal(dev_devices_run_all(set, job_alloc_many, args, &d), IR_OK);
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    assert_int_equal(st.nallocs, 800);
    assert_int_equal(st.nlive, 0);
    assert_int_equal(st.live_bytes, 0);
    dev_devices_free(set);
    shutdown_ok();
}

/* ---- failure injection ---- */

/* The whole life of a device set: load, create 2 devices (bound), a bound
 * allocation on device 1, a job, free. Returns the status; *degraded says
 * the run succeeded with a binding warning. Leaves nothing behind. */
static IrStatus scenario(IrDiag *d, bool *bind_warned, bool *alloc_refused)
{
    *bind_warned = *alloc_refused = false;
    DevTopology *t = NULL;
    IrStatus st = dev_topology_load(&t, d);
    if (st != IR_OK)
        return st;
    DevDevices *set = NULL;
    if ((st = dev_devices_create(t, 2, NULL, &set, d)) != IR_OK)
        return st;
    for (int32_t i = 0; i < set->n; i++)
        if (!set->dev[i].bound && dev_topology_info(t)->cpubind) {
            *bind_warned = true;
            assert_non_null(set->dev[i].bind_note);
        }
    DevAllocator *a = NULL;
    if ((st = dev_device_allocator(&set->dev[1], "cpu", &a, d)) == IR_OK) {
        void *p = dev_alloc(a, 10000);
        if (!p) {
            *alloc_refused = true;
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        }
        dev_alloc_free(p);
    }
    int32_t got = 0;
    if (st == IR_OK)
        st = dev_device_run(&set->dev[1], job_store_ordinal, &got, d);
    if (st == IR_OK)
        assert_int_equal(got, 101);
    dev_devices_free(set);
    return st;
}

static void test_hwloc_failure_injection(void **state)
{
    (void)state;
    use_synthetic(NULL);
    int failures = 0, warnings = 0, refusals = 0, silent = 0;
    for (long n = 1;; n++) {
        shutdown_ok();
        IrDiag d = {0};
        bool warned, refused;
        dev_hw_fail_after(n);
        long c0 = dev_hw_call_count();
        IrStatus st = scenario(&d, &warned, &refused);
        long calls = dev_hw_call_count() - c0;
        dev_hw_fail_after(0);
        if (calls < n) { /* the injected failure was never reached: a clean run */
            assert_int_equal(st, IR_OK);
            assert_false(warned);
            assert_true(n > 5);
            break;
        }
        if (st != IR_OK) {
            assert_true(st == IR_ENOMEM || st == IR_ERUNTIME);
            assert_non_null(d.msg);
            assert_true(strlen(d.msg) > 0);
            failures++;
            refusals += refused;
        } else if (warned) {
            warnings++;
        } else {
            silent++; /* e.g. the process binding query failed: the allowed set is used */
        }
        ir_diag_clear(&d);
        assert_true(n < 1000);
    }
    assert_true(failures >= 3);
    if (dev_topology_info(load())->cpubind)
        assert_int_equal(warnings, 2); /* one per device's set_cpubind */
    if (dev_topology_info(load())->membind)
        assert_int_equal(refusals, 1);
    (void)silent;
    shutdown_ok();
}

static void test_alloc_failure_injection(void **state)
{
    (void)state;
    use_synthetic(NULL);
    int failures = 0;
    for (long n = 1;; n++) {
        shutdown_ok();
        IrDiag d = {0};
        bool warned, refused;
        ts_fail_alloc_after(n);
        long c0 = ts_alloc_count();
        IrStatus st = scenario(&d, &warned, &refused);
        long calls = ts_alloc_count() - c0;
        ts_fail_alloc_after(0);
        if (st == IR_OK && calls < n) {
            assert_true(n > 5);
            ir_diag_clear(&d);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_string_equal(d.msg, "out of memory");
        failures++;
        ir_diag_clear(&d);
        assert_true(n < 1000);
    }
    assert_true(failures >= 5);
    shutdown_ok();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology_this_machine),
        cmocka_unit_test(test_synthetic_topology),
        cmocka_unit_test(test_synthetic_distribution),
        cmocka_unit_test(test_distribution_this_machine),
        cmocka_unit_test(test_bad_device_counts),
        cmocka_unit_test(test_executor_bound),
        cmocka_unit_test(test_executor_unbound),
        cmocka_unit_test(test_bind_failure_is_a_warning),
        cmocka_unit_test(test_jobs),
        cmocka_unit_test(test_alloc_bound),
        cmocka_unit_test(test_alloc_plain),
        cmocka_unit_test(test_alloc_synthetic_falls_back),
        cmocka_unit_test(test_alloc_bind_refused_falls_back),
        cmocka_unit_test(test_alloc_device_tensors),
        cmocka_unit_test(test_value_shares),
        cmocka_unit_test(test_allocator_cache),
        cmocka_unit_test(test_allocator_threads),
        cmocka_unit_test(test_hwloc_failure_injection),
        cmocka_unit_test(test_alloc_failure_injection),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    IrDiag d = {0};
    dev_shutdown(&d);
    ir_diag_clear(&d);
    return rc;
}
