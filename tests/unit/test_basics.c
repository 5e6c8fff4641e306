/*
 * test_basics.c: the shared basics of ir/ (strbuf.c, grow.c): the growable
 * string, growable arrays in the heap and in an arena, list membership,
 * and how each behaves when an allocation fails (failure injection).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include <string.h>

#include "ir/ir.h"

static void test_strbuf_appends(void **state)
{
    (void)state;
    IrStrBuf b = {0};
    ir_sb_puts(&b, "f32[");
    ir_sb_printf(&b, "%d,%s", 8, "16");
    ir_sb_putn(&b, "]xyz", 1);
    ir_sb_put_owned(&b, ts_strdup("{1,0}"));
    char *s = ir_sb_take(&b);
    assert_string_equal(s, "f32[8,16]{1,0}");
    ts_free(s);
    assert_null(b.s); /* take empties the buffer */
    /* A formatted piece longer than any first capacity (300 bytes). */
    ir_sb_printf(&b, "%300s|", "x");
    assert_int_equal(b.n, 301);
    assert_int_equal(b.s[299], 'x');
    ir_sb_free(&b);
    s = ir_sb_take(&b); /* nothing appended: an empty string, not NULL */
    assert_string_equal(s, "");
    ts_free(s);
}

static void test_strbuf_oom_is_sticky(void **state)
{
    (void)state;
    IrStrBuf b = {0};
    ts_fail_alloc_after(1);
    ir_sb_puts(&b, "lost");
    ts_fail_alloc_after(0);
    ir_sb_puts(&b, "later appends do nothing");
    assert_true(b.oom);
    assert_null(ir_sb_take(&b));
    ir_sb_put_owned(&b, NULL); /* a maker that ran out of memory */
    assert_null(ir_sb_take(&b));
}

static void test_grow(void **state)
{
    (void)state;
    int32_t *v = NULL;
    int64_t cap = 0;
    for (int32_t i = 0; i < 100; i++) {
        assert_true(IR_GROW(v, cap, i + 1));
        v[i] = i;
    }
    assert_true(cap >= 100 && cap == 128); /* 8, 16, ..., 128 */
    assert_int_equal(v[99], 99);
    /* A refused allocation leaves the array and its capacity as they were. */
    ts_fail_alloc_after(1);
    assert_false(IR_GROW(v, cap, 129));
    ts_fail_alloc_after(0);
    assert_int_equal(cap, 128);
    assert_int_equal(v[0], 0);
    /* A size that overflows size_t fails before any allocation. */
    assert_false(IR_GROW(v, cap, INT64_MAX));
    ts_free(v);
}

static void test_arena_grow(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    int64_t *v = NULL, cap = 0;
    for (int32_t i = 0; i < 20; i++) {
        assert_true(IR_ARENA_GROW(a, v, cap, i, i + 1));
        v[i] = 3 * i;
    }
    assert_int_equal(cap, 32);
    assert_int_equal(v[19], 57); /* the first n elements were carried over */
    assert_int_equal(v[0], 0);
    ir_arena_free(a);
}

static void test_membership(void **state)
{
    (void)state;
    int64_t dims[] = {3, 0, 7};
    IrI64List l = {3, dims};
    assert_int_equal(ir_list_index(&l, 7), 2);
    assert_int_equal(ir_list_index(&l, 1), -1);
    assert_true(ir_list_has(&l, 0));
    IrI64List empty = {0, NULL};
    assert_false(ir_list_has(&empty, 0));
    static const char *const names[] = {"FFT", "IFFT", NULL};
    assert_int_equal(ir_str_index("IFFT", names), 1);
    assert_int_equal(ir_str_index("RFFT", names), -1);
    assert_int_equal(ir_str_index(NULL, names), -1);
}

/* The reducer identities, worked out by hand: max over s4 starts at -8,
 * min over s4 at 7, min and and over u64 at 2^64-1 (exact: the identity
 * constants the partitioner emits used to go through a double, which
 * rounds 2^64-1 up to 2^64), and over u4 at 15. */
static void test_reducer_identities(void **state)
{
    (void)state;
    assert_true(ir_identity_float(OP_ADD) == 0 && ir_identity_float(OP_MULTIPLY) == 1);
    assert_true(isinf(ir_identity_float(OP_MAXIMUM)) && ir_identity_float(OP_MAXIMUM) < 0);
    assert_true(isinf(ir_identity_float(OP_MINIMUM)) && ir_identity_float(OP_MINIMUM) > 0);
    assert_int_equal(ir_identity_signed(OP_MAXIMUM, 4), -8);
    assert_int_equal(ir_identity_signed(OP_MINIMUM, 4), 7);
    assert_true(ir_identity_signed(OP_MAXIMUM, 64) == INT64_MIN && ir_identity_signed(OP_MINIMUM, 64) == INT64_MAX);
    assert_int_equal(ir_identity_signed(OP_AND, 32), -1);
    assert_int_equal(ir_identity_signed(OP_XOR, 8), 0);
    assert_true(ir_identity_unsigned(OP_MINIMUM, 64) == UINT64_MAX && ir_identity_unsigned(OP_AND, 64) == UINT64_MAX);
    assert_int_equal(ir_identity_unsigned(OP_MINIMUM, 4), 15);
    assert_int_equal(ir_identity_unsigned(OP_MAXIMUM, 16), 0);
    assert_int_equal(ir_identity_unsigned(OP_MULTIPLY, 8), 1);
}

/* The prefault thread populates pages and changes no byte: of a block
 * written before it gets there, of one freed before it gets there (ASan
 * and valgrind watch that run), past a full queue, and after a stop. */
/* ir_big_alloc: every block on a 64-byte line, from 2 MiB up (but under
 * ASan) at a 2 MiB boundary; all of it usable. */
static void test_big_alloc_alignment(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    const uintptr_t big = 64;
#else
    const uintptr_t big = 2u << 20;
#endif
    static const size_t sizes[] = {1, 17, 4096, (1u << 20) + 5, 2u << 20, (3u << 20) + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = ir_big_alloc(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % (sizes[i] >= (2u << 20) ? big : 64), 0);
        memset(p, 0x3c, sizes[i]);
        ir_big_free(p);
    }
}

static void test_prefault_changes_nothing(void **state)
{
    (void)state;
    ir_prefault(NULL, &state, sizeof state); /* no thread: nothing */
    ir_prefault_stop(NULL);
    const size_t n = 12u << 20;
    unsigned char *a = ir_big_alloc(n);
    assert_non_null(a);
    for (size_t i = 0; i < n / 2; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    IrPrefault *f = ir_prefault_start();
    if (!f) { /* a kernel without MADV_POPULATE_WRITE: nothing to test */
        ir_big_free(a);
        skip();
    }
    unsigned char *gone = ir_big_alloc(n);
    assert_non_null(gone);
    ir_prefault(f, gone, n);
    ir_big_free(gone);
    ir_prefault(f, a + 1, n - 2); /* unaligned ends: the whole pages inside */
    for (int i = 0; i < 40; i++)  /* more than the queue holds: dropped */
        ir_prefault(f, a + (size_t)i * 4096, 4096);
    ir_prefault(f, a, 0);
    /* The writer goes on while the thread runs: both halves keep it. */
    for (size_t i = n / 2; i < n; i++)
        a[i] = (unsigned char)(i * 5 + 3);
    ir_prefault_stop(f);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += a[i] != (unsigned char)(i < n / 2 ? i * 7 + 1 : i * 5 + 3);
    assert_int_equal(bad, 0);
    /* A stop right after a start, with work queued. */
    f = ir_prefault_start();
    assert_non_null(f);
    ir_prefault(f, a, n);
    ir_prefault_stop(f);
    assert_int_equal(a[n - 1], (unsigned char)((n - 1) * 5 + 3));
    ir_big_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strbuf_appends),
        cmocka_unit_test(test_strbuf_oom_is_sticky),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_reducer_identities),
        cmocka_unit_test(test_arena_grow),
        cmocka_unit_test(test_prefault_changes_nothing),
        cmocka_unit_test(test_big_alloc_alignment),
        cmocka_unit_test(test_membership),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
