/*
 * test_alloc_reuse.c: device allocators keep freed buffers for reuse
 * (device/alloc.c): a later request of the same allocator that a kept
 * buffer holds with at most an eighth to spare takes it, on the same NUMA
 * binding only; live and kept bytes together never pass the most bytes the
 * allocator had live; dev_alloc_trim and dev_shutdown give them all back
 * (ASan and valgrind check nothing leaks); devices on their own threads
 * share one allocator; under ASan a kept buffer stays poisoned.
 *
 * Expected reuse is read off the pointers handed out (the same address
 * again, or not), the bound on memory off the allocator's own counters
 * checked after every step of a seeded random sequence, and the absence of
 * overlap off a tag written into every live buffer and checked at its free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "device/device.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

enum { MIB = 1 << 20 };

static void shutdown_ok(void)
{
    IrDiag d = {0};
    IrStatus st = dev_shutdown(&d);
    if (st != IR_OK)
        fail_msg("dev_shutdown: %s", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
}

static DevAllocator *plain_allocator(const char *backend)
{
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_allocator_get(backend, 0, &a, &d), IR_OK);
    return a;
}

static DevAllocStats stats(DevAllocator *a)
{
    DevAllocStats st;
    dev_allocator_stats(a, &st);
    return st;
}

/* n devices of this machine (fails the test when they cannot be had). */
static DevDevices *devices(int32_t n)
{
    DevTopology *t = NULL;
    DevDevices *set = NULL;
    IrDiag d = {0};
    if (dev_topology_load(&t, &d) != IR_OK || dev_devices_create(t, n, NULL, &set, &d) != IR_OK)
        fail_msg("devices: %s", d.msg ? d.msg : "?");
    return set;
}

/* The same size again takes the freed buffer; a size it holds with an
 * eighth to spare too; half of it, or more than it, does not; small
 * buffers are not kept. */
static void test_reuse_by_size(void **state)
{
    (void)state;
    DevAllocator *a = plain_allocator("reuse");
    /* a peak of 4 MiB first: room to keep what follows */
    dev_alloc_free(dev_alloc(a, 4 * MIB));
    char *p = dev_alloc(a, MIB);
    assert_non_null(p);
    memset(p, 1, MIB);
    dev_alloc_free(p);
    DevAllocStats st = stats(a);
    assert_int_equal(st.nlive, 0);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.nkept, 1);
    assert_int_equal(st.kept_bytes, MIB);

    char *q = dev_alloc(a, MIB);
    assert_ptr_equal(q, p);
    st = stats(a);
    assert_int_equal(st.nreused, 1);
    assert_int_equal(st.nkept, 0);
    assert_int_equal(st.kept_bytes, 0);
    assert_int_equal(st.live_bytes, MIB);
    dev_alloc_free(q);

    size_t smaller = MIB - MIB / 9; /* MIB holds it with less than an eighth to spare */
    q = dev_alloc(a, smaller);
    assert_ptr_equal(q, p);
    assert_int_equal(stats(a).live_bytes, (int64_t)smaller);
    memset(q, 2, smaller);
    dev_alloc_free(q);
    assert_int_equal(stats(a).kept_bytes, MIB); /* what the block holds, not the last request */

    char *half = dev_alloc(a, MIB / 2);  /* would waste half the block */
    char *more = dev_alloc(a, MIB + 64); /* does not fit */
    assert_ptr_not_equal(half, p);
    assert_ptr_not_equal(more, p);
    st = stats(a);
    assert_int_equal(st.nreused, 2);
    assert_int_equal(st.nkept, 1);
    dev_alloc_free(half);
    dev_alloc_free(more);

    char *small = dev_alloc(a, 4096);
    int64_t kept = stats(a).nkept;
    dev_alloc_free(small);
    assert_int_equal(stats(a).nkept, kept); /* below DEV_KEEP_MIN: back at once */
    shutdown_ok();
}

/* Live and kept bytes stay within the peak: a fresh allocation pushes
 * kept buffers out, the oldest first; a freed buffer larger than the room
 * is not kept. */
static void test_reuse_bound_by_peak(void **state)
{
    (void)state;
    DevAllocator *a = plain_allocator("peak");
    char *x = dev_alloc(a, MIB), *y = dev_alloc(a, MIB), *z = dev_alloc(a, MIB);
    assert_int_equal(stats(a).peak_bytes, 3 * MIB);
    dev_alloc_free(x);
    dev_alloc_free(y);
    dev_alloc_free(z);
    DevAllocStats st = stats(a);
    assert_int_equal(st.nkept, 3);
    assert_int_equal(st.kept_bytes, 3 * MIB);
    /* 1.5 MiB fits none; live 1.5 MiB leaves room for 1.5 MiB kept: the
     * newest (z) stays, y and x go */
    char *w = dev_alloc(a, MIB + MIB / 2);
    st = stats(a);
    assert_int_equal(st.nkept, 1);
    assert_int_equal(st.kept_bytes, MIB);
    assert_true(st.live_bytes + st.kept_bytes <= st.peak_bytes);
    assert_ptr_equal(dev_alloc(a, MIB), z);
    dev_alloc_free(z);
    dev_alloc_free(w);
    st = stats(a);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.kept_bytes, MIB + MIB + MIB / 2);
    dev_alloc_trim(a);

    /* a freed block larger than the room left (it served a smaller
     * request, near the peak) is given back, not kept */
    DevAllocator *b = plain_allocator("peak2");
    x = dev_alloc(b, MIB);
    y = dev_alloc(b, MIB); /* peak 2 MiB */
    dev_alloc_free(y);
    size_t n = MIB - MIB / 9;
    char *y2 = dev_alloc(b, n); /* y's block */
    assert_ptr_equal(y2, y);
    char *small = dev_alloc(b, 100 << 10); /* live 2 MiB - 13 KiB: below the peak */
    assert_int_equal(stats(b).peak_bytes, 2 * MIB);
    dev_alloc_free(y2); /* room 2 MiB - 1.1 MiB < the block's 1 MiB */
    st = stats(b);
    assert_int_equal(st.nkept, 0);
    assert_true(st.live_bytes + st.kept_bytes <= st.peak_bytes);
    dev_alloc_free(x);
    dev_alloc_free(small);
    shutdown_ok();
}

/* A seeded random walk of allocations and frees of a few sizes: after
 * every step live + kept <= peak, and every live buffer still holds its
 * own tag (two live buffers never share memory). */
static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void test_reuse_random_walk(void **state)
{
    (void)state;
    DevAllocator *a = plain_allocator("walk");
    static const size_t sizes[] = {256 << 10, 300 << 10, 1 << 20, 3 << 20, 4096};
    enum { SLOTS = 12 };
    unsigned char *buf[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    uint64_t seed = 34;
    for (int step = 0; step < 2000; step++) {
        int k = (int)(next_rand(&seed) % SLOTS);
        if (buf[k]) {
            for (size_t i = 0; i < len[k]; i += 4093)
                assert_int_equal(buf[k][i], (unsigned char)k);
            assert_int_equal(buf[k][len[k] - 1], (unsigned char)k);
            dev_alloc_free(buf[k]);
            buf[k] = NULL;
        } else {
            len[k] = sizes[next_rand(&seed) % 5];
            buf[k] = dev_alloc(a, len[k]);
            assert_non_null(buf[k]);
            memset(buf[k], k, len[k]);
        }
        DevAllocStats st = stats(a);
        assert_true(st.live_bytes + st.kept_bytes <= st.peak_bytes);
        assert_true(st.nkept >= 0 && st.kept_bytes >= 0);
    }
    DevAllocStats st = stats(a);
    assert_true(st.nreused > 100); /* the walk does reuse */
    for (int k = 0; k < SLOTS; k++)
        dev_alloc_free(buf[k]);
    st = stats(a);
    assert_int_equal(st.nlive, 0);
    dev_alloc_trim(a);
    st = stats(a);
    assert_int_equal(st.nkept, 0);
    assert_int_equal(st.kept_bytes, 0);
    shutdown_ok();
}

/* Kept buffers go back at dev_alloc_trim and at dev_shutdown (which
 * refuses, freeing nothing, while a buffer is live); ASan and valgrind
 * see no leak either way. */
static void test_reuse_released(void **state)
{
    (void)state;
    DevAllocator *a = plain_allocator("released");
    char *p = dev_alloc(a, 2 * MIB), *q = dev_alloc(a, MIB);
    dev_alloc_free(p);
    assert_int_equal(stats(a).nkept, 1);
    IrDiag d = {0};
    assert_int_equal(dev_shutdown(&d), IR_EINTERNAL);
    ir_diag_clear(&d);
    assert_int_equal(stats(a).nkept, 1); /* nothing freed */
    assert_ptr_equal(dev_alloc(a, 2 * MIB), p);
    dev_alloc_free(p);
    dev_alloc_free(q);
    assert_int_equal(stats(a).nkept, 2);
    dev_alloc_trim(a);
    assert_int_equal(stats(a).nkept, 0);
    assert_ptr_not_equal(p = dev_alloc(a, 2 * MIB), NULL);
    dev_alloc_free(p);
    assert_int_equal(stats(a).nkept, 1);
    shutdown_ok(); /* frees the kept one */
}

/* Devices on their own threads allocate from one allocator at once;
 * every buffer keeps its thread's tag until freed, and the counts add up. */
static IrStatus job_churn(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)d;
    DevAllocator *a = arg;
    unsigned char tag = (unsigned char)(dev->ordinal + 1);
    for (int i = 0; i < 150; i++) {
        size_t n = (size_t)(256 << 10) * (size_t)(1 + (i + dev->ordinal) % 3);
        unsigned char *p = dev_alloc(a, n), *q = dev_alloc(a, 512 << 10);
        if (!p || !q)
            return IR_ENOMEM;
        memset(p, tag, n);
        memset(q, tag, 512 << 10);
        bool ok = p[0] == tag && p[n - 1] == tag && q[0] == tag && q[(512 << 10) - 1] == tag;
        dev_alloc_free(p);
        dev_alloc_free(q);
        if (!ok)
            return IR_EINTERNAL;
    }
    return IR_OK;
}

static void test_reuse_threads(void **state)
{
    (void)state;
    DevDevices *set = devices(4);
    IrDiag d = {0};
    DevAllocator *a = plain_allocator("threads");
    void *args[4] = {a, a, a, a};
    assert_int_equal(dev_devices_run_all(set, job_churn, args, &d), IR_OK);
    DevAllocStats st = stats(a);
    assert_int_equal(st.nallocs, 4 * 150 * 2);
    assert_int_equal(st.nlive, 0);
    assert_int_equal(st.live_bytes, 0);
    /* how many were reused depends on how the threads interleave: not
     * asserted; the bound holds whatever the order */
    assert_true(st.kept_bytes <= st.peak_bytes);
    assert_true(st.nreused <= st.nallocs);
    dev_devices_free(set);
    shutdown_ok();
}

/* A kept buffer serves only its binding: bound to a NUMA node, it is not
 * handed out once the allocator has fallen back to plain memory. */
static void test_reuse_same_binding(void **state)
{
    (void)state;
    DevDevices *set = devices(1);
    IrDiag d = {0};
    if (!dev_topology_info(set->dev[0].topo)->membind) {
        dev_devices_free(set);
        shutdown_ok();
        skip();
    }
    DevAllocator *a = NULL;
    assert_int_equal(dev_device_allocator(&set->dev[0], "binding", &a, &d), IR_OK);
    char *p = dev_alloc(a, MIB);
    assert_int_equal(dev_alloc_node_of(p, MIB), stats(a).numa_node);
    dev_alloc_free(p);
    char *q = dev_alloc(a, MIB); /* bound, as p: reused */
    assert_ptr_equal(q, p);
    assert_int_equal(dev_alloc_node_of(q, MIB), stats(a).numa_node);
    dev_alloc_free(q);
    /* binding refused (EXDEV): the allocator falls back to plain memory */
    dev_hw_fail_errno(EXDEV);
    dev_hw_fail_after(1);
    char *r = dev_alloc(a, 2 * MIB);
    dev_hw_fail_after(0);
    dev_hw_fail_errno(0);
    assert_non_null(r);
    assert_false(stats(a).membind);
    char *s = dev_alloc(a, MIB);
    assert_ptr_not_equal(s, p); /* the bound buffer is not handed out */
    assert_int_equal(dev_alloc_node_of(s, MIB), -1);
    DevAllocStats st = stats(a);
    assert_int_equal(st.nreused, 1);
    dev_alloc_free(r);
    dev_alloc_free(s);
    dev_devices_free(set);
    shutdown_ok();
}

/* Buffers start on a 64-byte line; from 2 MiB up (not under ASan, whose
 * redzone follows the data) at a 2 MiB boundary, so every 2 MiB of them can
 * be a huge page, bound or plain, fresh or kept; the whole buffer is usable
 * and a kept one holds what was asked for, no more. */
static void test_alignment(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    const uintptr_t big_align = 64;
#else
    const uintptr_t big_align = 2 * MIB;
#endif
    DevDevices *set = devices(1);
    IrDiag d = {0};
    DevAllocator *bound = NULL, *plain = plain_allocator("align");
    assert_int_equal(dev_device_allocator(&set->dev[0], "align-bound", &bound, &d), IR_OK);
    DevAllocator *as[2] = {plain, bound};
    static const size_t sizes[] = {100, 4096 + 3, MIB + 1, 2 * MIB - 1, 2 * MIB, 5 * MIB + 7};
    for (int x = 0; x < 2; x++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            char *p = dev_alloc(as[x], n);
            assert_non_null(p);
            uintptr_t want = n >= 2 * MIB ? big_align : 64;
            assert_int_equal((uintptr_t)p % want, 0);
            memset(p, 0x5a, n);
            dev_alloc_free(p);
            char *q = dev_alloc(as[x], n); /* kept and taken again where large */
            assert_int_equal((uintptr_t)q % want, 0);
            memset(q, 0xa5, n);
            dev_alloc_free(q);
        }
    assert_int_equal(stats(plain).kept_bytes, 5 * MIB + 7); /* what was asked for */
    dev_devices_free(set);
    shutdown_ok();
}

/* A device's value freed on another thread (a step's output, dropped by
 * the host) goes to the allocator, and the device's next value of that
 * size takes its buffer: no fresh pages. */
typedef struct MakeJob {
    DevAllocator *a;
    DevValue *v;
} MakeJob;

static IrStatus job_make(DevDevice *dev, void *arg, IrDiag *d)
{
    (void)dev;
    (void)d;
    MakeJob *j = arg;
    dev_alloc_use(j->a);
    int64_t dims[2] = {512, 768};
    IrShape s = {.type = IR_F32, .rank = 2, .dims = dims};
    j->v = dev_value_new_uninit(&s);
    dev_alloc_use(NULL);
    return j->v ? IR_OK : IR_ENOMEM;
}

static void test_reuse_across_threads(void **state)
{
    (void)state;
    DevDevices *set = devices(1);
    IrDiag d = {0};
    MakeJob j = {0};
    assert_int_equal(dev_device_allocator(&set->dev[0], "across", &j.a, &d), IR_OK);
    if (!stats(j.a).membind) { /* unbound: values stay with malloc */
        dev_devices_free(set);
        shutdown_ok();
        skip();
    }
    assert_int_equal(dev_device_run(&set->dev[0], job_make, &j, &d), IR_OK);
    void *first = j.v->data;
    dev_value_unref(j.v); /* on this thread: back to the allocator, kept */
    assert_int_equal(stats(j.a).nkept, 1);
    assert_int_equal(dev_device_run(&set->dev[0], job_make, &j, &d), IR_OK);
    assert_ptr_equal(j.v->data, first);
    DevAllocStats st = stats(j.a);
    assert_int_equal(st.nreused, 1);
    assert_int_equal(st.nkept, 0);
    dev_value_unref(j.v);
    dev_devices_free(set);
    shutdown_ok();
}

/* Under AddressSanitizer a kept buffer is poisoned (a use after
 * dev_alloc_free is reported), a reused one open for what was asked and
 * still poisoned past it. */
static void test_reuse_poisoned(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    DevAllocator *a = plain_allocator("poison");
    char *p = dev_alloc(a, MIB);
    assert_false(__asan_address_is_poisoned(p));
    dev_alloc_free(p);
    assert_true(__asan_address_is_poisoned(p));
    assert_true(__asan_address_is_poisoned(p + MIB - 1));
    size_t n = MIB - 4096;
    char *q = dev_alloc(a, n);
    assert_ptr_equal(q, p);
    assert_null(__asan_region_is_poisoned(q, n));
    assert_true(__asan_address_is_poisoned(q + n));
    dev_alloc_free(q);
    shutdown_ok();
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_by_size),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_reuse_bound_by_peak),
        cmocka_unit_test(test_reuse_random_walk),
        cmocka_unit_test(test_reuse_released),
        cmocka_unit_test(test_reuse_threads),
        cmocka_unit_test(test_reuse_same_binding),
        cmocka_unit_test(test_reuse_across_threads),
        cmocka_unit_test(test_reuse_poisoned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
