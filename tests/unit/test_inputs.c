/*
 * test_inputs.c: runtime/inputs.c without the parser: a module built with
 * the ir builders (parameters "a" f32[4] and "t.1" (s32[], f32[4]), root
 * the tuple of both), bound by index, name, INDEX.LEAF, NAME.LEAF and
 * random fills; the errors; summaries; and every allocation failing in
 * turn without a leak; --steps with a pair at a leaf of the tuple
 * parameter (rt_run_reference_steps), also under failing allocations.
 * (Runs and outputs written all or nothing are the
 * public API's: tests/unit/test_api.c, test_failinject.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "runtime/run_internal.h"

static char dir[64];
static IrModule *mod;

static IrModule *build(void)
{
    IrModule *m = ir_module_new("t");
    int32_t ci = ir_add_computation(m, "main");
    IrComputation *c = m->comp[ci];
    c->is_entry = true;
    m->entry = ci;
    int64_t d4[] = {4};
    IrShape s4, el[2], tup, rs[2], rt;
    ir_shape_make(m->arena, &s4, IR_F32, 1, d4);
    ir_shape_make(m->arena, &el[0], IR_S32, 0, NULL);
    ir_shape_make(m->arena, &el[1], IR_F32, 1, d4);
    ir_shape_make_tuple(m->arena, &tup, 2, el);
    IrInstr p0 = {.a.x = &ir_no_attrs_x}, p1 = {.a.x = &ir_no_attrs_x};
    p0.op = p1.op = OP_PARAMETER;
    p0.name = "a";
    p0.shape = s4;
    p1.name = "t.1";
    p1.shape = tup;
    p1.a.parameter_number = 1;
    int32_t ops[2] = {ir_add_instr(m, c, &p0), ir_add_instr(m, c, &p1)};
    rs[0] = s4;
    rs[1] = tup;
    ir_shape_make_tuple(m->arena, &rt, 2, rs);
    c->root = ir_add_simple(m, c, OP_TUPLE, &rt, 2, ops, "r");
    return m;
}

static const char *path_of(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void rm_tree(const char *d)
{
    DIR *dp = opendir(d);
    struct dirent *e;
    char p[512];
    while (dp && (e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    if (dp)
        closedir(dp);
    rmdir(d);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessel_test_inputs_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    mod = build();
    int64_t d4[] = {4};
    IrShape s4 = {IR_F32, 1, d4, false, NULL, NULL, 0, NULL, NULL, false};
    IrShape s0 = {IR_S32, 0, NULL, false, NULL, NULL, 0, NULL, NULL, false};
    float v[4] = {1, 2, 3, 4};
    int32_t k = 42;
    double w[4] = {0};
    IrShape s8 = {IR_F64, 1, d4, false, NULL, NULL, 0, NULL, NULL, false};
    return mod && rt_npy_write_file(path_of("v.npy"), &s4, v, NULL) == IR_OK &&
                   rt_npy_write_file(path_of("k.npy"), &s0, &k, NULL) == IR_OK &&
                   rt_npy_write_file(path_of("w.npy"), &s8, w, NULL) == IR_OK
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(mod);
    rm_tree(dir);
    return 0;
}

static IrStatus bind(int32_t n, const RtInput *in, bool random, RtArgs *a, IrDiag *d)
{
    RtBindOptions o = {.ninputs = n, .inputs = in, .random = random, .seed = 7};
    return rt_bind_inputs(mod, &o, a, d);
}

static void test_leaf_count(void **state)
{
    (void)state;
    assert_int_equal(rt_entry_leaf_count(mod), 3);
}

static void test_bind_all_files(void **state)
{
    (void)state;
    RtInput in[] = {{"a", path_of("v.npy"), NULL}, {"1.0", path_of("k.npy"), NULL},
                    {"t.1.1", path_of("v.npy"), NULL}};
    RtArgs a;
    IrDiag d = {0};
    assert_int_equal(bind(3, in, false, &a, &d), IR_OK);
    assert_int_equal(a.nargs, 2);
    const float *f = (const float *)(const void *)a.args[0]->data;
    assert_true(f[0] == 1 && f[3] == 4);
    assert_int_equal(a.args[1]->nelems, 2);
    assert_int_equal(*(const int32_t *)(const void *)a.args[1]->elems[0]->data, 42);
    char *s = rt_value_summary(a.args[1]->elems[1]);
    assert_string_equal(s, "f32[4] min 1 max 4 mean 2.5 first [1, 2, 3, 4]");
    ts_free(s);
    s = rt_value_summary(a.args[1]->elems[0]);
    assert_string_equal(s, "s32[] min 42 max 42 mean 42 first [42]");
    ts_free(s);
    rt_args_free(&a);
}

/* Random leaves keep their global k: leaf 0 ("a") with seed 7 is the f32
 * vector of DESIGN.md, leaf 1 (t.1 leaf 0, s32[]) is element 0 of the s32
 * vector: 6. */
static void test_random_fill_keeps_k(void **state)
{
    (void)state;
    RtInput in[] = {{"t.1.1", path_of("v.npy"), NULL}};
    RtArgs a;
    assert_int_equal(bind(1, in, true, &a, NULL), IR_OK);
    uint32_t bits;
    memcpy(&bits, a.args[0]->data, 4);
    assert_int_equal(bits, 0x3e600a3d);
    assert_int_equal(*(const int32_t *)(const void *)a.args[1]->elems[0]->data, 6);
    rt_args_free(&a);
}

static void expect_bind_error(int32_t n, const RtInput *in, bool random, const char *words)
{
    RtArgs a;
    IrDiag d = {0};
    assert_int_equal(bind(n, in, random, &a, &d), IR_EINPUT);
    assert_int_equal(a.nargs, 0);
    assert_null(a.args);
    if (!strstr(d.msg, words))
        fail_msg("'%s' lacks '%s'", d.msg, words);
    ir_diag_clear(&d);
}

static void test_bind_errors(void **state)
{
    (void)state;
    RtInput in1[] = {{"0", path_of("v.npy"), NULL}};
    expect_bind_error(1, in1, false, "no input for parameter 1 leaf 0 (t.1: s32[]), parameter "
                                     "1 leaf 1 (t.1: f32[4]); bind them");
    RtInput in2[] = {{"t.1", path_of("v.npy"), NULL}};
    expect_bind_error(1, in2, true, "parameter 1 is a tuple of 2 leaves");
    RtInput in3[] = {{"b", path_of("v.npy"), NULL}};
    expect_bind_error(1, in3, true, "input b: no entry parameter");
    RtInput in4[] = {{"2", path_of("v.npy"), NULL}};
    expect_bind_error(1, in4, true, "has 2 parameters");
    RtInput in5[] = {{"0.1", path_of("v.npy"), NULL}};
    expect_bind_error(1, in5, true, "parameter 0 has 1 leaf");
    RtInput in6[] = {{"0", path_of("v.npy"), NULL}, {"a.0", path_of("v.npy"), NULL}};
    expect_bind_error(2, in6, true, "bound twice");
    RtInput in7[] = {{"0", path_of("w.npy"), NULL}};
    expect_bind_error(1, in7, true, "dtype <f8 does not match parameter 0 f32[4] (expected <f4)");
    int64_t d4[] = {4};
    IrShape s4 = {IR_S32, 1, d4, false, NULL, NULL, 0, NULL, NULL, false};
    int32_t k4[4] = {0};
    assert_int_equal(rt_npy_write_file(path_of("k4.npy"), &s4, k4, NULL), IR_OK);
    RtInput in8[] = {{"1.0", path_of("k4.npy"), NULL}};
    expect_bind_error(1, in8, true, "shape (4,) does not match parameter 1 leaf 0 s32[]");
    RtInput in9[] = {{"0.", path_of("v.npy"), NULL}};
    expect_bind_error(1, in9, true, "no entry parameter");
}

static void test_alloc_failures(void **state)
{
    (void)state;
    char v[256];
    snprintf(v, sizeof v, "%s", path_of("v.npy")); /* path_of's buffers rotate */
    RtInput in[] = {{"t.1.1", v, NULL}};
    bool ok = false;
    for (long n = 1; n < 200 && !ok; n++) {
        RtArgs a;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = bind(1, in, true, &a, &d);
        char *s = st == IR_OK ? rt_value_summary(a.args[1]->elems[1]) : NULL;
        ts_fail_alloc_after(0);
        ok = st == IR_OK && s != NULL;
        if (st != IR_OK && st != IR_ENOMEM)
            fail_msg("allocation %ld: status %d: %s", n, st, d.msg ? d.msg : "");
        if (st != IR_OK)
            assert_int_equal(a.nargs, 0);
        ts_free(s);
        rt_args_free(&a);
        ir_diag_clear(&d);
    }
    assert_true(ok);
}

static void test_summary_forms(void **state)
{
    (void)state;
    int64_t d6[] = {6};
    IrShape s = {IR_F32, 1, d6, false, NULL, NULL, 0, NULL, NULL, false};
    DevValue *v = dev_value_new(&s);
    float *f = (float *)(void *)v->data;
    f[0] = 0.5f;
    f[1] = -1.25f;
    f[2] = 0.0f / 0.0f;
    f[3] = 3;
    f[4] = 1e-7f;
    f[5] = 2;
    char *t = rt_value_summary(v);
    assert_string_equal(t, "f32[6] min -1.25 max 3 mean 0.85 nan 1 first [0.5, -1.25, nan, 3, ...]");
    ts_free(t);
    dev_value_unref(v);
    int64_t d0[] = {0};
    IrShape e = {IR_U8, 1, d0, false, NULL, NULL, 0, NULL, NULL, false};
    v = dev_value_new(&e);
    t = rt_value_summary(v);
    assert_string_equal(t, "u8[0]");
    ts_free(t);
    dev_value_unref(v);
}

/* 3 steps of (a, t.1) -> (a, t.1) with the pair {0}: (1, {1}): a feeds
 * t.1's leaf 1, t.1's leaf 0 (no pair's) is the same input at every step:
 * step 1 returns t.1 as bound ((42, x), x drawn), steps 2 and 3 (42, a). */
static IrStatus run_steps(int64_t steps, DevValue **out, IrDiag *d)
{
    RtInput in[] = {{"a", path_of("v.npy"), NULL}, {"1.0", path_of("k.npy"), NULL}};
    RtArgs a;
    *out = NULL;
    IrStatus st = bind(2, in, true, &a, d);
    if (st == IR_OK)
        st = rt_run_reference_steps(mod, &a, steps, 0, NULL, NULL, out, d);
    rt_args_free(&a);
    return st;
}

static void test_steps_tuple_leaf(void **state)
{
    (void)state;
    int64_t zero = 0, one = 1, two = 2;
    IrShapeIndex out0 = {.n = 1, .v = &zero}, leaf1 = {.n = 1, .v = &one};
    assert_int_equal(ir_add_alias_at(mod, 1, &leaf1, &out0, false, false), IR_OK);
    IrDiag d = {0};
    DevValue *r = NULL;
    assert_int_equal(run_steps(1, &r, &d), IR_OK);
    assert_true(((const float *)(const void *)r->elems[1]->elems[1]->data)[0] != 1.0f); /* drawn */
    dev_value_unref(r);
    assert_int_equal(run_steps(3, &r, &d), IR_OK);
    const float *f = (const float *)(const void *)r->elems[1]->elems[1]->data;
    assert_true(f[0] == 1 && f[1] == 2 && f[2] == 3 && f[3] == 4);
    assert_int_equal(*(const int32_t *)(const void *)r->elems[1]->elems[0]->data, 42);
    dev_value_unref(r);
    bool ok = false;
    for (long n = 1; n < 400 && !ok; n++) {
        ts_fail_alloc_after(n);
        IrStatus st = run_steps(3, &r, &d);
        ts_fail_alloc_after(0);
        ok = st == IR_OK;
        if (st != IR_OK && st != IR_ENOMEM)
            fail_msg("allocation %ld: status %d: %s", n, st, d.msg ? d.msg : "");
        if (ok)
            assert_int_equal(*(const int32_t *)(const void *)r->elems[1]->elems[0]->data, 42);
        dev_value_unref(r);
        ir_diag_clear(&d);
    }
    assert_true(ok);
    /* an index t.1 does not have; then t.1 whole beside its leaf: twice */
    mod->alias[0].param_index.v = &two;
    assert_int_equal(run_steps(2, &r, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 1 ((s32[], f32[4])) has no value at index {2}"));
    ir_diag_clear(&d);
    mod->alias[0].param_index.v = &one;
    IrShapeIndex whole = {0}, out1 = {.n = 1, .v = &one};
    assert_int_equal(ir_add_alias_at(mod, 1, &whole, &out1, false, false), IR_OK);
    assert_int_equal(run_steps(2, &r, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 1 is aliased twice (at {}, and by alias 0 at {1})"));
    ir_diag_clear(&d);
    mod->nalias = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaf_count),
        cmocka_unit_test(test_bind_all_files),
        cmocka_unit_test(test_random_fill_keeps_k),
        cmocka_unit_test(test_bind_errors),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_summary_forms),
        cmocka_unit_test(test_steps_tuple_leaf),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
