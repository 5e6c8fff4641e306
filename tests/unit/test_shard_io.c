/*
 * test_shard_io.c: per-host input reads (runtime/shard_io.c) and the parts
 * of inputs.c they share: the shard boxes (rt_shard_box) worked out by
 * hand, a device's shards of a .npy file read box by box (values by hand,
 * padding zero), random shards equal to cutting the whole random input,
 * keys resolved as rt_bind_inputs resolves them, a replicated input shared
 * by the devices but a donated one each device's own, the errors (missing file,
 * wrong shape, unknown key) leaving nothing behind, the --steps aliases
 * (checked, and fed without copying), and every allocation failing in turn.
 *
 * The module: x f32[5] in 2 tiles (uneven: 3 + 2, one element of padding),
 * w f32[3] replicated, t (s32[], f32[2,3]) with its f32 leaf tiled along
 * dim 1 (2 + 1). Leaves for random inputs: x 0, w 1, t.0 2, t.1 3.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile/compile.h"
#include "runtime/run_internal.h"

static const char MODEL[] =
    "HloModule m, num_partitions=2\n"
    "\n"
    "ENTRY main {\n"
    "  x = f32[5] parameter(0), sharding={devices=[2]0,1}\n"
    "  w = f32[3] parameter(1), sharding={replicated}\n"
    "  t = (s32[], f32[2,3]) parameter(2), sharding={{replicated}, {devices=[1,2]0,1}}\n"
    "  w2 = f32[3] add(w, w)\n"
    "  x2 = f32[5] add(x, x)\n"
    "  ROOT r = (f32[3], f32[5]) tuple(w2, x2), sharding={{replicated}, {devices=[2]0,1}}\n"
    "}\n";

static char dir[64];
static CompileResult compiled;
static PlanCluster comp; /* compiled.prog.cluster[0] */
static IrModule *sig;
/* The alias {0}: (1, {}) of the program, set on the partitioned module by
 * hand (as the partitioner carries a source module's aliases). */
static int64_t out0[] = {0};
static IrAlias alias0 = {.output_index = {1, out0}, .param_number = 1};

static const char *path_of(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_f32(const char *name, int32_t rank, const int64_t *dims, const float *v)
{
    IrArena *a = ir_arena_new();
    IrShape s;
    assert_int_equal(ir_shape_make(a, &s, IR_F32, rank, dims), IR_OK);
    IrDiag d = {0};
    assert_int_equal(rt_npy_write_file(path_of(name), &s, v, &d), IR_OK);
    ir_arena_free(a);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessel-shard-io.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    IrParseOptions opt = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("m.hlo", MODEL, strlen(MODEL), &opt, &m, &d) != IR_OK)
        return -1;
    CompileOptions co = {.num_partitions = 2, .num_replicas = 1};
    if (compile_module(m, &co, &compiled, &d) != IR_OK) {
        fprintf(stderr, "%s\n", d.msg ? d.msg : "?");
        ir_diag_clear(&d);
        return -1;
    }
    comp = compiled.prog.cluster[0];
    comp.spmd->nalias = 1;
    comp.spmd->alias = &alias0;
    sig = rt_signature_module(&comp);
    int64_t d5[] = {5}, d4[] = {4};
    float x[5] = {1, 2, 3, 4, 5}, bad[4] = {0};
    write_f32("x.npy", 1, d5, x);
    write_f32("x4.npy", 1, d4, bad);
    return sig ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(sig);
    compile_result_free(&compiled);
    remove(path_of("x.npy"));
    remove(path_of("x4.npy"));
    rmdir(dir);
    return 0;
}

/* Boxes by hand: D in t tiles has shards of ceil(D/t). */
static void test_boxes(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    IrShape s5, s23;
    int64_t d5[] = {5}, d23[] = {2, 3};
    ir_shape_make(a, &s5, IR_F32, 1, d5);
    ir_shape_make(a, &s23, IR_F32, 2, d23);
    int64_t off[2], ext[2], size[2];
    /* f32[5] in 2: [0,3) and [3,5) + 1 padding */
    const IrSharding *x = plan_param_sharding(&comp, 0);
    rt_shard_box(&s5, x, 0, off, ext, size);
    assert_true(off[0] == 0 && ext[0] == 3 && size[0] == 3);
    rt_shard_box(&s5, x, 1, off, ext, size);
    assert_true(off[0] == 3 && ext[0] == 2 && size[0] == 3);
    /* f32[5] in 4 tiles of 2: tile 3 starts at 6, past the end: nothing valid */
    int64_t tile[] = {4}, devs[] = {0, 1, 2, 3};
    IrSharding *four = shd_tiled(a, 1, tile, devs, 0);
    rt_shard_box(&s5, four, 3, off, ext, size);
    assert_true(off[0] == 6 && ext[0] == 0 && size[0] == 2);
    rt_shard_box(&s5, four, 2, off, ext, size);
    assert_true(off[0] == 4 && ext[0] == 1 && size[0] == 2);
    /* replicated: the whole array */
    rt_shard_box(&s23, plan_param_sharding(&comp, 1), 1, off, ext, size);
    assert_true(off[0] == 0 && off[1] == 0 && ext[0] == 2 && ext[1] == 3 && size[0] == 2 && size[1] == 3);
    ir_arena_free(a);
}

static IrStatus read2(int32_t n, const RtInput *in, bool random, RtArgs *sh, RtReadStats *rs, IrDiag *d)
{
    RtBindOptions o = {.ninputs = n, .inputs = in, .random = random, .seed = 7};
    memset(sh, 0, 2 * sizeof *sh);
    return rt_read_shards(&comp, sig, &o, 0, 2, sh, rs, d);
}

static void free2(RtArgs *sh)
{
    rt_args_free(&sh[0]);
    rt_args_free(&sh[1]);
}

/* x from a file: device 0 [1, 2, 3], device 1 [4, 5, 0 (padding)]. */
static void test_file_boxes(void **state)
{
    (void)state;
    RtInput in[] = {{"x", path_of("x.npy"), NULL}};
    RtArgs sh[2];
    RtReadStats rs = {0};
    IrDiag d = {0};
    assert_int_equal(read2(1, in, true, sh, &rs, &d), IR_OK);
    assert_int_equal(sh[0].nargs, 3);
    const float *a = (const float *)sh[0].args[0]->data, *b = (const float *)sh[1].args[0]->data;
    assert_int_equal(sh[0].args[0]->shape.dims[0], 3);
    assert_true(a[0] == 1 && a[1] == 2 && a[2] == 3);
    assert_true(b[0] == 4 && b[1] == 5 && b[2] == 0);
    /* 5 elements of 4 bytes read in all (3 + 2), never 2 x 5 */
    assert_int_equal(rs.file_bytes, 20);
    /* random, valid elements only: w 3 for each device (replicated but
     * donated: each its own, which the program may write over), t.0 1
     * (replicated: drawn once, shared by both devices), t.1 2x2 + 2x1 */
    assert_int_equal(rs.random_elems, 13);
    assert_ptr_not_equal(sh[0].args[1], sh[1].args[1]);
    assert_true(dev_value_sole(sh[0].args[1]) && dev_value_sole(sh[1].args[1]));
    assert_memory_equal(sh[0].args[1]->data, sh[1].args[1]->data, 3 * sizeof(float));
    assert_ptr_equal(sh[0].args[2]->elems[0], sh[1].args[2]->elems[0]);
    /* t's f32 leaf: device 1 holds column 2 and a zero column */
    DevValue *t1 = sh[1].args[2]->elems[1];
    assert_int_equal(t1->shape.dims[0], 2);
    assert_int_equal(t1->shape.dims[1], 2);
    assert_true(((const float *)t1->data)[1] == 0 && ((const float *)t1->data)[3] == 0);
    free2(sh);
}

static bool same_bytes(const DevValue *a, const DevValue *b)
{
    if (a->shape.type == IR_TUPLE) {
        if (b->shape.type != IR_TUPLE || a->nelems != b->nelems)
            return false;
        for (int32_t k = 0; k < a->nelems; k++)
            if (!same_bytes(a->elems[k], b->elems[k]))
                return false;
        return true;
    }
    return ir_shape_equal(&a->shape, &b->shape) && a->nbytes == b->nbytes &&
           memcmp(a->data, b->data, (size_t)a->nbytes) == 0;
}

/* Every shard read box by box equals the shard cut from the whole input
 * bound by rt_bind_inputs (files and random leaves alike). */
static void test_equals_cut_whole(void **state)
{
    (void)state;
    RtInput in[] = {{"0", path_of("x.npy"), NULL}};
    RtBindOptions o = {.ninputs = 1, .inputs = in, .random = true, .seed = 7};
    RtArgs sh[2], whole = {0};
    IrDiag d = {0};
    assert_int_equal(read2(1, in, true, sh, NULL, &d), IR_OK);
    assert_int_equal(rt_bind_inputs(sig, &o, &whole, &d), IR_OK);
    for (int64_t p = 0; p < 2; p++)
        for (int32_t k = 0; k < 3; k++) {
            DevValue *cut = NULL;
            assert_int_equal(rt_shard_value(whole.args[k], plan_param_sharding(&comp, k), p, &cut, &d), IR_OK);
            assert_true(same_bytes(cut, sh[p].args[k]));
            dev_value_unref(cut);
        }
    rt_args_free(&whole);
    free2(sh);
}

static void test_errors(void **state)
{
    (void)state;
    RtArgs sh[2];
    IrDiag d = {0};
    RtInput missing[] = {{"x", path_of("nope.npy"), NULL}};
    assert_int_equal(read2(1, missing, true, sh, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.file, "nope.npy"));
    assert_non_null(strstr(d.msg, "cannot open"));
    assert_true(sh[0].args == NULL && sh[1].args == NULL && sh[0].nargs == 0);
    ir_diag_clear(&d);
    RtInput wrong[] = {{"x", path_of("x4.npy"), NULL}};
    assert_int_equal(read2(1, wrong, true, sh, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 0"));
    ir_diag_clear(&d);
    RtInput unknown[] = {{"y", path_of("x.npy"), NULL}};
    assert_int_equal(read2(1, unknown, true, sh, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "input y: no entry parameter"));
    ir_diag_clear(&d);
    /* without random inputs every leaf must be bound; all are named */
    assert_int_equal(read2(1, (RtInput[]){{"x", path_of("x.npy"), NULL}}, false, sh, NULL, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 1 (w: f32[3]), parameter 2 leaf 0"));
    ir_diag_clear(&d);
}

/* Key resolution alone (rt_resolve_inputs): "t.1" is not a parameter name
 * here, so it reads as NAME.LEAF: parameter 2 leaf 1, flat leaf 3. */
static void test_resolve(void **state)
{
    (void)state;
    RtInput in[] = {{"t.1", "a.npy", NULL}, {"1", "b.npy", NULL}};
    RtBindOptions o = {.ninputs = 2, .inputs = in, .random = true, .seed = 0};
    RtLeafBinding lb;
    IrDiag d = {0};
    assert_int_equal(rt_resolve_inputs(sig, &o, &lb, &d), IR_OK);
    assert_int_equal(lb.nparam, 3);
    assert_int_equal(lb.first[2], 2);
    assert_int_equal(lb.first[3], 4);
    assert_null(lb.path[0]);
    assert_string_equal(lb.path[1], "b.npy");
    assert_null(lb.path[2]);
    assert_string_equal(lb.path[3], "a.npy");
    rt_leaf_binding_free(&lb);
    RtInput twice[] = {{"w", "a.npy", NULL}, {"1", "b.npy", NULL}};
    RtBindOptions o2 = {.ninputs = 2, .inputs = twice, .random = true, .seed = 0};
    assert_int_equal(rt_resolve_inputs(sig, &o2, &lb, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "bound twice"));
    assert_null(lb.first);
    ir_diag_clear(&d);
}

/* Aliases: {0} -> parameter 1 checks; feeding moves the output's buffer. */
static void test_aliases(void **state)
{
    (void)state;
    IrDiag d = {0};
    assert_int_equal(rt_check_aliases(comp.spmd, &d), IR_OK);
    RtArgs sh[2];
    assert_int_equal(read2(0, NULL, true, sh, NULL, &d), IR_OK);
    DevValue *res = NULL;
    DevExecOptions eo = {0};
    /* run the per-device program of device 0 with collectives as identities */
    assert_int_equal(dev_execute(comp.spmd, comp.spmd->entry, sh[0].nargs, sh[0].args, &eo, &res, &d), IR_OK);
    float w0 = ((const float *)sh[0].args[1]->data)[0];
    DevValue *out0 = res->elems[0];
    assert_int_equal(rt_feed_aliases(comp.spmd, res, sh[0].args, NULL, &d), IR_OK);
    assert_ptr_equal(sh[0].args[1], out0); /* moved, not copied */
    assert_true(((const float *)sh[0].args[1]->data)[0] == 2 * w0);
    free2(sh);
    /* a bad alias: parameter 7 */
    IrAlias bad = comp.spmd->alias[0];
    bad.param_number = 7;
    IrAlias *keep = comp.spmd->alias;
    comp.spmd->alias = &bad;
    assert_int_equal(rt_check_aliases(comp.spmd, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 7 does not exist"));
    ir_diag_clear(&d);
    /* output {1} (x2: f32[3] shards) into parameter 2 (a tuple): shapes differ */
    bad = keep[0];
    int64_t one = 1;
    bad.output_index = (IrShapeIndex){.n = 1, .v = &one};
    bad.param_number = 2;
    assert_int_equal(rt_check_aliases(comp.spmd, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "cannot be parameter 2"));
    ir_diag_clear(&d);
    comp.spmd->alias = keep;
}

static void test_alloc_failures(void **state)
{
    (void)state;
    RtInput in[] = {{"x", path_of("x.npy"), NULL}};
    bool ok = false;
    for (long n = 1; n < 400 && !ok; n++) {
        RtArgs sh[2];
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = read2(1, in, true, sh, NULL, &d);
        ts_fail_alloc_after(0);
        ok = st == IR_OK;
        if (!ok) {
            assert_int_equal(st, IR_ENOMEM);
            assert_true(sh[0].args == NULL && sh[1].args == NULL);
        }
        free2(sh);
        ir_diag_clear(&d);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boxes),
        cmocka_unit_test(test_file_boxes),
        cmocka_unit_test(test_equals_cut_whole),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
