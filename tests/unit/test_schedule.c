/*
 * test_schedule.c: the overlap schedule (ir/schedule_overlap.c). Each case
 * gives the instructions in the order written (a topological order, as
 * the executor's post-order is) and checks the reordering worked out by
 * hand: -starts as early as they can, -dones as late as they can, other
 * work in its first order, side effects in theirs. Then the executor
 * through a fake collectives hook: the work between a -start and its
 * -done runs after the start and before the wait.
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
    assert_int_equal(ir_schedule_overlap(c, order, c->ninstr), IR_OK);
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

/* ---- the executor: start, work, wait ---- */

static char events[256];

static void note(const char *e)
{
    strcat(events, e);
    strcat(events, " ");
}

/* The fake collective is the identity: its handle is the operand. */
static IrStatus fake_start(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                           void **handle, IrDiag *d)
{
    (void)ctx, (void)m, (void)d;
    assert_int_equal(nopnd, 1);
    note(ir_op_name(ins->op));
    *handle = dev_value_ref(operands[0]);
    return IR_OK;
}

static IrStatus fake_wait(void *ctx, void *handle, DevValue **out, IrDiag *d)
{
    (void)ctx, (void)d;
    note("wait");
    *out = handle;
    return IR_OK;
}

static IrStatus fake_run(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                         DevValue **out, IrDiag *d)
{
    (void)ctx, (void)m, (void)ins, (void)nopnd, (void)d;
    note("blocking");
    *out = dev_value_ref(operands[0]);
    return IR_OK;
}

static IrStatus work(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                     DevValue **out, IrDiag *d)
{
    (void)ctx, (void)m, (void)nopnd, (void)d;
    note(ins->a.x->custom_call_target);
    *out = dev_value_ref(operands[0]);
    return IR_OK;
}

static void test_executor_overlaps(void **state)
{
    (void)state;
    const char *text = "HloModule s\n" ADD "ENTRY e {\n x = f32[4] parameter(0)\n"
                       " s0 = f32[4] all-reduce-start(x), replica_groups={}, to_apply=add\n"
                       " r0 = f32[4] all-reduce-done(s0)\n"
                       " g = (f32[4], f32[4]) all-gather-start(x), replica_groups={}, dimensions={0}\n"
                       " gd = f32[4] all-gather-done(g)\n"
                       " w = f32[4] custom-call(x), custom_call_target=\"work\"\n"
                       " b = f32[4] all-reduce(w), replica_groups={}, to_apply=add\n"
                       " a = f32[4] add(r0, b)\n"
                       " ROOT t = (f32[4], f32[4]) tuple(a, gd)\n}\n";
    IrParseOptions po = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("s.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    DevCollectives coll = {.run = fake_run, .start = fake_start, .wait = fake_wait};
    DevCustomCalls cc = {.call = work};
    DevExecOptions opt = {.coll = &coll, .custom = &cc};
    int64_t four = 4;
    IrShape s = {.type = IR_F32, .rank = 1, .dims = &four};
    DevValue *x = dev_value_new(&s), *out = NULL;
    assert_non_null(x);
    float *xv = (float *)(void *)x->data;
    for (int i = 0; i < 4; i++)
        xv[i] = (float)(i + 1);
    events[0] = 0;
    assert_int_equal(dev_execute(m, m->entry, 1, &x, &opt, &out, &d), IR_OK);
    /* Both starts first, the work and the blocking all-reduce while they
     * are in flight, the waits last (their -dones are what is left). */
    assert_string_equal(events, "all-reduce all-gather work blocking wait wait ");
    assert_int_equal(out->nelems, 2);
    const float *a = (const float *)(const void *)out->elems[0]->data;
    const float *g = (const float *)(const void *)out->elems[1]->data;
    for (int i = 0; i < 4; i++) {
        assert_true(a[i] == 2.0f * (float)(i + 1));
        assert_true(g[i] == (float)(i + 1));
    }
    dev_value_unref(out);
    dev_value_unref(x);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_done_after_independent_work),
        cmocka_unit_test(test_chunks_pipeline),
        cmocka_unit_test(test_side_effects_in_order),
        cmocka_unit_test(test_no_pairs_unchanged),
        cmocka_unit_test(test_executor_overlaps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
