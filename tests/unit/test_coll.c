/*
 * test_coll.c: what each collective computes for one device
 * (coll/result.c and each collective's file), given every device's operands, against values worked
 * out by hand from XLA's semantics (docs/operation_semantics.md) in the
 * comments. Device d's operand is [10d, 10d+1, 10d+2, 10d+3] unless said.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "attrs_test.h"
#include "coll/coll.h"

static const char TEXT[] =
    "HloModule c, num_partitions=4\n"
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "mix {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ab = f32[] multiply(a, b)\n"
    "  s = f32[] add(a, b)\n  ROOT r = f32[] add(ab, s)\n}\n"
    "last {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] copy(b)\n}\n"
    "ENTRY main {\n"
    "  x = f32[4] parameter(0)\n"
    "  ar = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=add\n"
    "  ag = f32[8] all-gather(x), channel_id=2, replica_groups={{3,1},{0,2}}, dimensions={0}, use_global_device_ids=true\n"
    "  rs = f32[1] reduce-scatter(x), channel_id=3, replica_groups={{3,2,1,0}}, dimensions={0}, use_global_device_ids=true, to_apply=add\n"
    "  aa = f32[4] all-to-all(x), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}\n"
    "  cp = f32[4] collective-permute(x), channel_id=5, source_target_pairs={{0,1},{1,3}}\n"
    "  cb = f32[4] collective-broadcast(x), channel_id=6, replica_groups={{2,0},{1,3}}\n"
    "  bad = f32[4] all-reduce(x), channel_id=7, replica_groups={{0,4}}, use_global_device_ids=true, to_apply=add\n"
    "  twice = f32[4] all-reduce(x), channel_id=8, replica_groups={{0,1},{1,2}}, use_global_device_ids=true, to_apply=add\n"
    "  arm = f32[4] all-reduce(x), channel_id=9, replica_groups={{2,0},{1,3}}, use_global_device_ids=true, to_apply=mix\n"
    "  arl = f32[4] all-reduce(x), channel_id=10, replica_groups={{3,0,1,2}}, use_global_device_ids=true, to_apply=last\n"
    "  rsm = f32[2] reduce-scatter(x), channel_id=11, replica_groups={{1,0},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=mix\n"
    "  ROOT t = (f32[4], f32[8], f32[1], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[2]) tuple(ar, ag, rs, aa, cp, cb, bad, twice, arm, arl, rsm)\n"
    "}\n";

typedef struct Fixture {
    IrModule *m;
    DevValue *val[4];
    DevValue **ops[4];
} Fixture;

static int setup(void **state)
{
    Fixture *f = calloc(1, sizeof *f);
    IrDiag d = {0};
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    if (ir_parse("c.hlo", TEXT, strlen(TEXT), &po, &f->m, &d) != IR_OK) {
        print_message("%s\n", d.msg ? d.msg : "parse failed");
        return -1;
    }
    const IrComputation *e = ir_entry(f->m);
    const IrShape *s = &e->instr[ir_find_instr(e, "x")].shape; /* f32[4] */
    for (int g = 0; g < 4; g++) {
        f->val[g] = dev_value_new(s);
        float *p = (float *)(void *)f->val[g]->data;
        for (int i = 0; i < 4; i++)
            p[i] = (float)(10 * g + i);
        f->ops[g] = &f->val[g];
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    for (int g = 0; g < 4; g++)
        dev_value_unref(f->val[g]);
    ir_module_free(f->m);
    free(f);
    return 0;
}

static const IrInstr *instr(const Fixture *f, const char *name)
{
    const IrComputation *e = ir_entry(f->m);
    int32_t i = ir_find_instr(e, name);
    assert_true(i >= 0);
    return &e->instr[i];
}

/* Device me's result of `name`, compared with want[0..n). */
static void expect(const Fixture *f, const char *name, int64_t me, const float *want, int n)
{
    CollWorld w = {.n = 4, .r = 1};
    DevValue *out = NULL;
    IrDiag d = {0};
    IrStatus st = coll_result(f->m, instr(f, name), &w, me, (DevValue *const *const *)f->ops, 1, NULL, &out, &d);
    if (st != IR_OK)
        print_message("%s on %lld: %s\n", name, (long long)me, d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    assert_int_equal(dev_value_elements(out), n);
    const float *got = (const float *)(const void *)out->data;
    for (int i = 0; i < n; i++)
        assert_true(got[i] == want[i]);
    dev_value_unref(out);
    ir_diag_clear(&d);
}

static void all_reduce(void **state)
{
    /* {0,2}: [0,1,2,3] + [20,21,22,23]; {1,3}: [10..13] + [30..33] */
    expect(*state, "ar", 0, (float[]){20, 22, 24, 26}, 4);
    expect(*state, "ar", 2, (float[]){20, 22, 24, 26}, 4);
    expect(*state, "ar", 3, (float[]){40, 42, 44, 46}, 4);
}

static void any_reducer(void **state)
{
    /* mix(a, b) = a*b + a + b over {2,0}: mix([20..23], [0..3]) =
     * [20, 21*1+22, 22*2+24, 23*3+26] = [20, 43, 68, 95] */
    expect(*state, "arm", 0, (float[]){20, 43, 68, 95}, 4);
    expect(*state, "arm", 2, (float[]){20, 43, 68, 95}, 4);
    /* {1,3}: mix([10..13], [30..33]) = [340, 11*31+42, 12*32+44, 13*33+46] */
    expect(*state, "arm", 3, (float[]){340, 383, 428, 475}, 4);
    /* last(a, b) = b, folded in group order {3,0,1,2}: device 2's operand */
    expect(*state, "arl", 1, (float[]){20, 21, 22, 23}, 4);
    /* reduce-scatter with mix over {1,0}: mix([10..13], [0..3]) =
     * [10, 11+12, 24+14, 39+16]; device 1 (first) takes [10, 23], 0 [38, 55] */
    expect(*state, "rsm", 1, (float[]){10, 23}, 2);
    expect(*state, "rsm", 0, (float[]){38, 55}, 2);
}

static void all_gather(void **state)
{
    /* group {3,1} in that order: device 3's operand first */
    expect(*state, "ag", 1, (float[]){30, 31, 32, 33, 10, 11, 12, 13}, 8);
    expect(*state, "ag", 0, (float[]){0, 1, 2, 3, 20, 21, 22, 23}, 8);
}

static void reduce_scatter(void **state)
{
    /* the sum is [60, 64, 68, 72]; device 3 is first in {3,2,1,0}: chunk 0 */
    expect(*state, "rs", 3, (float[]){60}, 1);
    expect(*state, "rs", 0, (float[]){72}, 1);
}

static void all_to_all(void **state)
{
    /* device 2 receives element 2 of every member, in group order */
    expect(*state, "aa", 2, (float[]){2, 12, 22, 32}, 4);
}

static void permute_and_broadcast(void **state)
{
    /* 1 receives from 0, 3 from 1, 0 and 2 from nobody (zeros) */
    expect(*state, "cp", 1, (float[]){0, 1, 2, 3}, 4);
    expect(*state, "cp", 3, (float[]){10, 11, 12, 13}, 4);
    expect(*state, "cp", 2, (float[]){0, 0, 0, 0}, 4);
    /* the group's first id is the source: 2 for {2,0}, 1 for {1,3} */
    expect(*state, "cb", 0, (float[]){20, 21, 22, 23}, 4);
    expect(*state, "cb", 3, (float[]){10, 11, 12, 13}, 4);
}

static void groups(void **state)
{
    Fixture *f = *state;
    CollWorld w = {.n = 4, .r = 1};
    int64_t members[4];
    int32_t size = 0, mine = -1;
    IrDiag d = {0};
    assert_int_equal(coll_group(f->m, instr(f, "ag"), &w, 1, members, &size, &mine, &d), IR_OK);
    assert_int_equal(size, 2);
    assert_int_equal(members[0], 3);
    assert_int_equal(members[1], 1);
    assert_int_equal(mine, 1);
    /* an id past the devices, and an id in two groups, are errors */
    assert_int_equal(coll_check_module(f->m, &w, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "replica_groups names 4, but there are 4 devices"));
    ir_diag_clear(&d);
    assert_int_equal(coll_group(f->m, instr(f, "twice"), &w, 1, members, &size, &mine, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "names 1 twice"));
    ir_diag_clear(&d);
    /* cross-replica-and-partition: replicas {0,1} x 2 partitions,
     * partition-major: (r0,p0) (r1,p0) (r0,p1) (r1,p1) = 0 2 1 3 */
    IrInstr rp = *instr(f, "ar");
    rp.a.use_global_device_ids = false;
    int64_t grp[2] = {0, 1};
    int64_t *gp = grp;
    int32_t gs = 2;
    test_x(&rp.a)->replica_groups = (IrReplicaGroups){.present = true, .ngroups = 1, .group_size = &gs, .groups = &gp};
    CollWorld w22 = {.n = 2, .r = 2};
    assert_int_equal(coll_group(f->m, &rp, &w22, 3, members, &size, &mine, &d), IR_OK);
    assert_int_equal(size, 4);
    assert_int_equal(members[0], 0);
    assert_int_equal(members[1], 2);
    assert_int_equal(members[2], 1);
    assert_int_equal(members[3], 3);
    assert_int_equal(mine, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_reduce),
        cmocka_unit_test(any_reducer),
        cmocka_unit_test(all_gather),
        cmocka_unit_test(reduce_scatter),
        cmocka_unit_test(all_to_all),
        cmocka_unit_test(permute_and_broadcast),
        cmocka_unit_test(groups),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
