/*
 * test_namemap.c: the parser's name tables (ir/parse.c, NameMap): keys
 * that collide in a small table, growth past the reserved size, names that
 * differ only in their last bytes, keys as (text, length) spans of a longer
 * text, and the probe hint (prs_map_find_hint / prs_map_put_at) that must
 * fall back to a plain put whenever the table changed in between.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ir/parse_internal.h"

/* Keys live as long as the map: one static pool of formatted names. */
static char pool[4096][48];

/* Fill pool[i]; returns its length (called apart from the use of pool[i]:
 * the order arguments are evaluated in is unspecified). */
static size_t key(int i, const char *fmt)
{
    snprintf(pool[i], sizeof pool[i], fmt, i);
    return strlen(pool[i]);
}

/* 32 slots, 16 keys: at that load some keys share a first slot (for 16
 * keys in 32 slots a collision is all but certain) and probe past each other. */
static void test_collisions(void **state)
{
    (void)state;
    NameMap m = {0};
    assert_true(prs_map_reserve(&m, 16));
    assert_int_equal(m.cap, 32);
    for (int i = 0; i < 16; i++) {
        size_t n = key(i, "k%d");
        assert_true(prs_map_put(&m, pool[i], n, i));
    }
    for (int i = 0; i < 16; i++)
        assert_int_equal(prs_map_find(&m, pool[i], strlen(pool[i])), i);
    assert_int_equal(prs_map_find(&m, "k16", 3), -1);
    assert_int_equal(prs_map_find(&m, "k1", 1), -1); /* a prefix is another key */
    assert_int_equal(m.cap, 32);
    prs_map_free(&m);
    assert_int_equal(prs_map_find(&m, "k1", 2), -1);
}

/* From an empty map to 4000 keys: every key keeps its value across each
 * doubling; names differ only in their last digits. */
static void test_growth_and_late_differences(void **state)
{
    (void)state;
    NameMap m = {0};
    for (int i = 0; i < 4000; i++) {
        size_t n = key(i, "transformer_layer_attention_%06d");
        assert_true(prs_map_put(&m, pool[i], n, i));
    }
    assert_true(m.cap >= 8000);
    for (int i = 0; i < 4000; i++)
        assert_int_equal(prs_map_find(&m, pool[i], strlen(pool[i])), i);
    assert_int_equal(prs_map_find(&m, "transformer_layer_attention_004000", 34), -1);
    /* A key given as a span of a longer text (no NUL after it). */
    const char *text = "transformer_layer_attention_000123)";
    assert_int_equal(prs_map_find(&m, text, strlen(text) - 1), 123);
    prs_map_free(&m);
}

/* The hint of an absent key puts it where its probe ended; after another
 * put, a growth or a free the hint is stale and the put probes anew. */
static void test_hint(void **state)
{
    (void)state;
    NameMap m = {0};
    MapHint h;
    assert_int_equal(prs_map_find_hint(&m, "a", 1, &h), -1); /* empty: no table, no hint */
    assert_true(prs_map_put_at(&m, &h, "a", 1, 7));
    assert_int_equal(prs_map_find(&m, "a", 1), 7);
    for (int i = 0; i < 15; i++) {
        size_t n = key(i, "x%d");
        assert_int_equal(prs_map_find_hint(&m, pool[i], n, &h), -1);
        assert_true(prs_map_put_at(&m, &h, pool[i], n, i));
    }
    assert_int_equal(m.cap, 32); /* 16 keys: full at load 1/2 */
    /* Stale after another put: both keys end up findable. */
    assert_int_equal(prs_map_find_hint(&m, "late_0", 6, &h), -1);
    MapHint h2;
    assert_int_equal(prs_map_find_hint(&m, "late_1", 6, &h2), -1);
    assert_true(prs_map_put_at(&m, &h2, "late_1", 6, 101)); /* grows: 17 keys need 64 slots */
    assert_true(prs_map_put_at(&m, &h, "late_0", 6, 100));
    assert_int_equal(m.cap, 64);
    assert_int_equal(prs_map_find(&m, "late_0", 6), 100);
    assert_int_equal(prs_map_find(&m, "late_1", 6), 101);
    for (int i = 0; i < 15; i++)
        assert_int_equal(prs_map_find(&m, pool[i], strlen(pool[i])), i);
    /* A present key gives its value (the hint is not used). */
    assert_int_equal(prs_map_find_hint(&m, "x3", 2, &h), 3);
    /* Stale after a free and a new table of the same size. */
    assert_int_equal(prs_map_find_hint(&m, "gone", 4, &h), -1);
    prs_map_free(&m);
    assert_true(prs_map_reserve(&m, 20));
    assert_true(prs_map_put_at(&m, &h, "gone", 4, 5));
    assert_int_equal(prs_map_find(&m, "gone", 4), 5);
    prs_map_prefetch(&m, "gone", 4); /* changes nothing */
    assert_int_equal(prs_map_find(&m, "gone", 4), 5);
    prs_map_free(&m);
    prs_map_prefetch(&m, "gone", 4); /* an empty map is fine too */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collisions),
        cmocka_unit_test(test_growth_and_late_differences),
        cmocka_unit_test(test_hint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
