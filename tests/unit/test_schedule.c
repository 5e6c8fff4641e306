/*
 * test_schedule.c: the overlap schedule (device/schedule.c). Each case
 * gives the instructions in the order written (a topological order, as
 * the executor's post-order is) and checks the reordering worked out by
 * hand: -starts as early as they can, -dones as late as they can, other
 * work in its first order, side effects in theirs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "device/device.h"

/* Schedule the entry of `text` and compare with the names in `want`
 * (space-separated). */
static void check(const char *text, const char *want)
{
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("s.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    const IrComputation *c = m->comp[m->entry];
    int32_t order[64];
    assert_true(c->ninstr <= 64);
    for (int32_t i = 0; i < c->ninstr; i++)
        order[i] = i;
    assert_int_equal(dev_schedule_overlap(c, order, c->ninstr), IR_OK);
    char got[512] = "";
    for (int32_t i = 0; i < c->ninstr; i++) {
        if (i)
            strcat(got, " ");
        strcat(got, c->instr[order[i]].name);
    }
    assert_string_equal(got, want);
    ir_module_free(m);
}

#define ADD "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"

/* done(start(dot)) written as a chain: the independent dot moves between. */
static void test_done_after_independent_work(void **state)
{
    (void)state;
    check("HloModule s\n" ADD "ENTRY e {\n x = f32[4,4] parameter(0)\n y = f32[4,4] parameter(1)\n"
          " d0 = f32[4,4] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
          " s0 = f32[4,4] all-reduce-start(d0), replica_groups={}, to_apply=add\n"
          " r0 = f32[4,4] all-reduce-done(s0)\n"
          " d1 = f32[4,4] dot(y, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
          " ROOT t = (f32[4,4], f32[4,4]) tuple(r0, d1)\n}\n",
          "x y d0 s0 d1 r0 t");
}

/* Windowed chunks: each start right after its dot, the dones at the end
 * in their first order. */
static void test_chunks_pipeline(void **state)
{
    (void)state;
    check("HloModule s\n" ADD "ENTRY e {\n x = f32[4] parameter(0)\n"
          " a = f32[4] negate(x)\n sa = f32[4] all-reduce-start(a), replica_groups={}, to_apply=add\n"
          " da = f32[4] all-reduce-done(sa)\n"
          " b = f32[4] exponential(x)\n sb = f32[4] all-reduce-start(b), replica_groups={}, to_apply=add\n"
          " db = f32[4] all-reduce-done(sb)\n"
          " ROOT c = f32[8] concatenate(da, db), dimensions={0}\n}\n",
          "x a sa b sb da db c");
}

/* Side effects keep their order even where one waits for a done. */
static void test_side_effects_in_order(void **state)
{
    (void)state;
    check("HloModule s\n" ADD "ENTRY e {\n x = f32[4] parameter(0)\n"
          " sa = f32[4] all-reduce-start(x), replica_groups={}, to_apply=add\n"
          " da = f32[4] all-reduce-done(sa)\n"
          " p0 = f32[4] custom-call(da), custom_call_target=\"first\"\n"
          " p1 = f32[4] custom-call(x), custom_call_target=\"second\"\n"
          " ROOT t = (f32[4], f32[4]) tuple(p0, p1)\n}\n",
          "x sa da p0 p1 t");
}

/* No -start: unchanged. */
static void test_no_pairs_unchanged(void **state)
{
    (void)state;
    check("HloModule s\nENTRY e {\n x = f32[4] parameter(0)\n a = f32[4] negate(x)\n b = f32[4] abs(x)\n"
          " ROOT c = f32[4] add(b, a)\n}\n",
          "x a b c");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_done_after_independent_work),
        cmocka_unit_test(test_chunks_pipeline),
        cmocka_unit_test(test_side_effects_in_order),
        cmocka_unit_test(test_no_pairs_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
