/*
 * test_shd_text.c: shardings for people (partition/shd_text.c): the
 * canonical text that makes equal shardings written differently read the
 * same (the plan graph's colours), and the words the plan's reasons and
 * legend use. Each expected string is written out by hand from XLA's
 * meaning of the sharding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "partition/partition.h"

static char *canon(const char *text)
{
    IrArena *a = ir_arena_new();
    IrSharding s;
    IrDiag d = {0};
    assert_non_null(a);
    if (ir_sharding_parse(a, text, &s, &d) != IR_OK)
        fail_msg("parse of '%s' failed: %s", text, d.msg ? d.msg : "?");
    char *c = shd_canonical_str(&s);
    assert_non_null(c);
    ir_diag_clear(&d);
    ir_arena_free(a);
    return c;
}

static void assert_canon(const char *text, const char *want)
{
    char *c = canon(text);
    if (strcmp(c, want) != 0)
        fail_msg("canonical form of '%s' is '%s', want '%s'", text, c, want);
    ts_free(c);
}

static void assert_words(const char *text, const char *want)
{
    IrArena *a = ir_arena_new();
    IrSharding s;
    IrDiag d = {0};
    assert_non_null(a);
    if (ir_sharding_parse(a, text, &s, &d) != IR_OK)
        fail_msg("parse of '%s' failed: %s", text, d.msg ? d.msg : "?");
    char *w = shd_describe_str(&s);
    assert_non_null(w);
    if (strcmp(w, want) != 0)
        fail_msg("'%s' reads '%s', want '%s'", text, w, want);
    ts_free(w);
    ir_diag_clear(&d);
    ir_arena_free(a);
}

/* The same sharding in its several spellings: one text. */
static void test_canonical_equal(void **state)
{
    (void)state;
    /* iota and explicit device lists: <=[2] is 0,1 */
    assert_canon("{devices=[1,2]<=[2]}", "{devices=[1,2]0,1}");
    assert_canon("{devices=[1,2]0,1}", "{devices=[1,2]0,1}");
    /* <=[2,2]T(1,0) is arange(4).reshape(2,2).T: 0,2,1,3 */
    assert_canon("{devices=[2,2]<=[2,2]T(1,0)}", "{devices=[2,2]0,2,1,3}");
    /* partial replication, in both spellings */
    assert_canon("{devices=[2,1,2]0,1,2,3 last_tile_dims={replicated}}",
                 "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    assert_canon("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    /* nothing tiled is replicated, whatever the text */
    assert_canon("{devices=[1,1,4]<=[4] last_tile_dim_replicate}", "{replicated}");
    assert_canon("{replicated}", "{replicated}");
    assert_canon("{unknown}", "{replicated}");
    assert_canon("{maximal device=1}", "{maximal device=1}");
    /* metadata does not change the meaning */
    assert_canon("{devices=[2]0,1 metadata={op_name=\"x\"}}", "{devices=[2]0,1}");
    /* and a different device order is a different sharding */
    assert_canon("{devices=[2]1,0}", "{devices=[2]1,0}");
    char *a = canon("{devices=[1,2]0,1}"), *b = canon("{devices=[2,1]0,1}");
    assert_string_not_equal(a, b);
    ts_free(a);
    ts_free(b);
}

static void test_words(void **state)
{
    (void)state;
    assert_words("{replicated}", "replicated");
    assert_words("{devices=[1,1,4]<=[4] last_tile_dim_replicate}", "replicated");
    assert_words("{devices=[1,2]<=[2]}", "tiled on dim 1 over 2 devices");
    assert_words("{devices=[2,1]0,1}", "tiled on dim 0 over 2 devices");
    assert_words("{devices=[2,2]<=[4]}", "tiled on dims 0 and 1 (2x2) over 4 devices");
    assert_words("{devices=[2,1,3,1]<=[6]}", "tiled on dims 0 and 2 (2x3) over 6 devices");
    assert_words("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "tiled on dim 0 over 2 devices, each tile on 2 devices");
    assert_words("{devices=[2]1,0}", "tiled on dim 0 over 2 devices, devices in the order 1,0");
    assert_words("{maximal device=3}", "whole on device 3 only (maximal)");
    assert_words("{manual}", "manual (each device holds its own value)");
    assert_words("{{replicated}, {devices=[2]0,1}}", "(replicated; tiled on dim 0 over 2 devices)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canonical_equal),
        cmocka_unit_test(test_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
