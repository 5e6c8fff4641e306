/*
 * test_failinject.c: failure injection across the whole pipeline. For each
 * operation (parse, verify, propagate+partition with compile_module, plan
 * load, and through the public API binding inputs + the reference run,
 * ts_run_reference, and an in-process partitioned run, ts_plan_run) the walk makes allocation N fail for N = 1, 2, 3, ...
 * until the operation completes without the injected failure firing. Each
 * failing run must return IR_ENOMEM with a message, leave its outputs
 * empty, leave its inputs intact (reference counts, a reusable compiled
 * program), and free everything: leaks are caught by the ASan build
 * (LeakSanitizer at exit) and by running this binary under valgrind.
 *
 * The model is tests/models/mlp_megatron.hlo with @N=2, @D=0,1: two dots,
 * a tanh, shardings on parameters, one all-reduce after partitioning.
 *
 * Bounded time: an operation whose successful run makes more than
 * MAX_POINTS allocations is walked with a stride (every k-th allocation,
 * k = ceil(total / MAX_POINTS)), plus the first FIRST_ALL allocations one
 * by one, where the set-up paths are. The walk prints its stride.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "compile/compile.h"
#include "tessel.h"

#define MAX_POINTS 400
#define FIRST_ALL 64

static char *model_text;   /* mlp_megatron, @N and @D substituted */
static size_t model_len;
static char *plan_text;    /* tests/fuzz/corpus/plan/mlp_megatron_n2.plan */
static size_t plan_len;

/* ---- fixtures ---- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

/* Replace every `key` of s with `val` (heap result). */
static char *substitute(const char *s, const char *key, const char *val)
{
    size_t kl = strlen(key), vl = strlen(val), n = 0;
    for (const char *p = s; (p = strstr(p, key)) != NULL; p += kl)
        n++;
    char *out = malloc(strlen(s) + n * vl + 1), *o = out;
    const char *p = s, *q;
    while ((q = strstr(p, key)) != NULL) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, val, vl);
        o += vl;
        p = q + kl;
    }
    strcpy(o, p);
    return out;
}

static int setup(void **state)
{
    (void)state;
    size_t n;
    char *raw = read_file(TESSEL_SRC_DIR "/tests/models/mlp_megatron.hlo", &n);
    plan_text = read_file(TESSEL_SRC_DIR "/tests/fuzz/corpus/plan/mlp_megatron_n2.plan", &plan_len);
    if (!raw || !plan_text)
        return -1;
    char *a = substitute(raw, "@N", "2");
    model_text = substitute(a, "@D", "0,1");
    model_len = strlen(model_text);
    free(a);
    free(raw);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(model_text);
    free(plan_text);
    dev_value_trim();
    return 0;
}

static IrModule *parse_model(bool verify)
{
    IrParseOptions opt = ir_default_parse_options();
    opt.verify = verify;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("mlp_megatron.hlo", model_text, model_len, &opt, &m, &d) != IR_OK)
        fail_msg("mlp_megatron.hlo: %s", d.msg ? d.msg : "?");
    return m;
}

/* ---- the walk ---- */

/* One operation under test: prepare (no injection) builds its inputs, run
 * (under injection) is the operation, check looks at a successful result,
 * release frees inputs and outputs. ctx is the operation's own state. */
typedef struct Op {
    const char *name;
    void (*prepare)(void *ctx);
    IrStatus (*run)(void *ctx, IrDiag *d);
    void (*after_failure)(void *ctx); /* outputs must be empty, inputs intact */
    void (*check)(void *ctx);
    void (*release)(void *ctx);
} Op;

/* One run with allocation n failing (0: none). *fired: the injected
 * failure was reached (the run made at least n allocations). */
static IrStatus run_once(const Op *op, void *ctx, long n, bool *fired, long *allocs)
{
    IrDiag d = {0};
    op->prepare(ctx);
    long before = ts_alloc_count();
    ts_fail_alloc_after(n);
    IrStatus st = op->run(ctx, &d);
    ts_fail_alloc_after(0);
    long used = ts_alloc_count() - before;
    *fired = n > 0 && used >= n;
    if (allocs)
        *allocs = used;
    if (st == IR_OK) {
        assert_int_equal(d.status, IR_OK);
        op->check(ctx);
    } else {
        if (st != IR_ENOMEM)
            fail_msg("%s, allocation %ld failing: status %d, expected IR_ENOMEM: %s", op->name, n,
                     (int)st, d.msg ? d.msg : "(no message)");
        if (!*fired)
            fail_msg("%s: IR_ENOMEM without an injected failure (n=%ld)", op->name, n);
        assert_int_equal(d.status, IR_ENOMEM);
        assert_non_null(d.msg);
        op->after_failure(ctx);
    }
    ir_diag_clear(&d);
    op->release(ctx);
    return st;
}

/* Walk n = 1, 2, ... (with a stride past FIRST_ALL when the operation is
 * large) until a run completes with its injected failure never reached. */
static void walk(const Op *op, void *ctx)
{
    bool fired;
    long total = 0;
    assert_int_equal(run_once(op, ctx, 0, &fired, &total), IR_OK);
    long stride = total > MAX_POINTS ? (total + MAX_POINTS - 1) / MAX_POINTS : 1;
    long failures = 0, recovered = 0, n = 1;
    for (;;) {
        IrStatus st = run_once(op, ctx, n, &fired, NULL);
        if (st != IR_OK)
            failures++;
        else if (fired) {
            recovered++; /* an allocation failure the operation worked around */
            print_message("%s: allocation %ld failed and the operation still succeeded\n", op->name, n);
        }
        else
            break;
        n += n < FIRST_ALL ? 1 : stride;
        if (n > total + stride + 1000)
            fail_msg("%s: walk does not end (n=%ld, %ld allocations when nothing fails)", op->name,
                     n, total);
    }
    print_message("%s: %ld allocations, stride %ld, %ld injected failures, %ld recovered\n",
                  op->name, total, stride, failures, recovered);
    assert_true(failures > 0);
}

/* ---- parse ---- */

typedef struct {
    IrModule *m;
} ParseCtx;

static void parse_prepare(void *ctx)
{
    ((ParseCtx *)ctx)->m = NULL;
}

static IrStatus parse_run(void *ctx, IrDiag *d)
{
    IrParseOptions opt = ir_default_parse_options();
    opt.verify = false;
    return ir_parse("mlp_megatron.hlo", model_text, model_len, &opt, &((ParseCtx *)ctx)->m, d);
}

static void parse_after_failure(void *ctx)
{
    assert_null(((ParseCtx *)ctx)->m);
}

static void parse_check(void *ctx)
{
    IrModule *m = ((ParseCtx *)ctx)->m;
    assert_non_null(m);
    assert_int_equal(m->num_partitions, 2);
}

static void parse_release(void *ctx)
{
    ir_module_free(((ParseCtx *)ctx)->m);
    ((ParseCtx *)ctx)->m = NULL;
}

static void test_parse(void **state)
{
    (void)state;
    ParseCtx c = {0};
    Op op = {"parse", parse_prepare, parse_run, parse_after_failure, parse_check, parse_release};
    walk(&op, &c);
}

/* ---- verify ---- */

static void verify_prepare(void *ctx)
{
    ((ParseCtx *)ctx)->m = parse_model(false);
}

static IrStatus verify_run(void *ctx, IrDiag *d)
{
    IrLimits lim = ir_default_limits();
    return ir_verify(((ParseCtx *)ctx)->m, &lim, d);
}

static void nothing(void *ctx)
{
    (void)ctx;
}

static void test_verify(void **state)
{
    (void)state;
    ParseCtx c = {0};
    Op op = {"verify", verify_prepare, verify_run, nothing, nothing, parse_release};
    walk(&op, &c);
}

/* ---- propagate + partition ---- */

typedef struct {
    IrModule *m;       /* handed to compile_module, which owns it from then on */
    CompileResult r;
} CompileCtx;

static void compile_prepare(void *ctx)
{
    CompileCtx *c = ctx;
    c->m = parse_model(true);
    memset(&c->r, 0x5a, sizeof c->r); /* compile_module must fill or clear it */
}

static IrStatus compile_run(void *ctx, IrDiag *d)
{
    CompileCtx *c = ctx;
    IrModule *m = c->m;
    c->m = NULL;
    CompileOptions co = {.num_partitions = 2, .num_replicas = 1};
    return compile_module(m, &co, &c->r, d);
}

static void compiled_empty(void *ctx)
{
    CompileResult *r = &((CompileCtx *)ctx)->r;
    assert_null(r->prog.cluster);
    assert_null(r->prog.host);
    assert_null(r->layouts);
    assert_int_equal(r->prog.ncluster, 0);
    memset(r, 0, sizeof *r);
}

/* One all-reduce and no all-gather: what the model's header expects. */
static int count_op(const IrModule *m, IrOpcode op)
{
    int n = 0;
    for (int32_t i = 0; i < m->ncomp; i++)
        for (int32_t j = 0; j < m->comp[i]->ninstr; j++)
            n += m->comp[i]->instr[j].op == op;
    return n;
}

static void compiled_check(void *ctx)
{
    CompileResult *r = &((CompileCtx *)ctx)->r;
    assert_int_equal(r->prog.ncluster, 1);
    assert_non_null(r->layouts[0]);
    PlanCluster *c = &r->prog.cluster[0];
    assert_non_null(c->spmd);
    assert_int_equal(c->num_partitions, 2);
    assert_int_equal(c->nparam, 3);
    assert_int_equal(count_op(c->spmd, OP_ALL_REDUCE), 1);
    assert_int_equal(count_op(c->spmd, OP_ALL_GATHER), 0);
    /* The report (what `tessel plan` shows) lists the all-reduce: a
     * failed allocation while recording it fails the compile instead.
     * Loaded plans have no report. */
    if (c->src)
        assert_int_equal(c->report.ncoll, 1);
}

static void compiled_release(void *ctx)
{
    compile_result_free(&((CompileCtx *)ctx)->r);
}

static void test_compile(void **state)
{
    (void)state;
    CompileCtx c = {0};
    Op op = {"compile", compile_prepare, compile_run, compiled_empty, compiled_check, compiled_release};
    walk(&op, &c);
}

/* ---- plan load ---- */

static void plan_prepare(void *ctx)
{
    memset(&((CompileCtx *)ctx)->r, 0x5a, sizeof(CompileResult));
}

static IrStatus plan_run(void *ctx, IrDiag *d)
{
    return compile_plan_load("mlp_megatron_n2.plan", plan_text, plan_len, 0, &((CompileCtx *)ctx)->r, d);
}

static void test_plan_load(void **state)
{
    (void)state;
    CompileCtx c = {0};
    Op op = {"plan load", plan_prepare, plan_run, compiled_empty, compiled_check, compiled_release};
    walk(&op, &c);
}

/* ---- the public API's runs ---- */

/* A TsStatus and TsDiag of the public API as the walk's IrStatus and
 * IrDiag (the same values: api/common.c asserts it). The strings move,
 * nothing is allocated: the walk's injected failure may still be armed. */
static IrStatus take_diag(TsStatus st, TsDiag *from, IrDiag *to)
{
    to->status = (IrStatus)from->status;
    to->file = from->file;
    to->pos = (IrPos){from->line, from->col};
    to->line_text = from->line_text;
    to->msg = from->msg;
    memset(from, 0, sizeof *from);
    return (IrStatus)st;
}

static TsModule *parse_public(const char *name, const char *text)
{
    TsModule *m = NULL;
    TsDiag d = {0};
    if (ts_module_parse(name, text, strlen(text), NULL, &m, &d) != TS_OK)
        fail_msg("%s: %s", name, d.msg ? d.msg : "?");
    return m;
}

/* ---- bind + reference run (ts_run_reference) ---- */

typedef struct {
    const char *name;
    const char *text;
    TsModule *m;
    TsOutputs *out;
} RefCtx;

static void ref_prepare(void *ctx)
{
    RefCtx *r = ctx;
    r->m = parse_public(r->name, r->text);
    r->out = NULL;
}

static IrStatus ref_run(void *ctx, IrDiag *d)
{
    RefCtx *r = ctx;
    TsRunOptions ro = {.random = true, .seed = 7};
    TsDiag td = {0};
    return take_diag(ts_run_reference(r->m, &ro, &r->out, &td), &td, d);
}

static void ref_after_failure(void *ctx)
{
    assert_null(((RefCtx *)ctx)->out);
}

/* mlp_megatron's result: f32[16,24]. */
static void ref_check(void *ctx)
{
    TsOutputs *out = ((RefCtx *)ctx)->out;
    assert_non_null(out);
    assert_int_equal(ts_outputs_count(out), 1);
    TsArrayInfo info;
    assert_int_equal(ts_outputs_info(out, 0, &info, NULL), TS_OK);
    assert_string_equal(info.dtype, "<f4");
    assert_int_equal(info.rank, 2);
    assert_int_equal(info.dims[0], 16);
    assert_int_equal(info.dims[1], 24);
}

static void ref_release(void *ctx)
{
    RefCtx *r = ctx;
    ts_outputs_free(r->out);
    r->out = NULL;
    ts_module_free(r->m);
    r->m = NULL;
}

static void test_reference_run(void **state)
{
    (void)state;
    RefCtx r = {.name = "mlp_megatron.hlo", .text = model_text};
    Op op = {"bind + reference run", ref_prepare, ref_run, ref_after_failure, ref_check, ref_release};
    walk(&op, &r);
}

/* ---- the reference run of every op family ---- */

/* The models of tests/models that exercise the kernels, control ops and
 * types beyond mlp_megatron's: each is walked through bind + reference run
 * (sharding templates filled for two devices, as mlp_megatron's). */
static const char *const family_models[] = {
    "fft", "linalg", "batch_norm", "topk", "ragged_dot", "qr", "fusion", "async", "scan",
    "rng", "elementwise_complex", "elementwise_lowp", "reduce_dot_lowp", "data_lowp",
    "reduce_mixed_precision", "complex_io",
};

static void family_check(void *ctx)
{
    assert_non_null(((RefCtx *)ctx)->out);
}

static void test_family_reference_runs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof family_models / sizeof *family_models; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/models/%s.hlo", TESSEL_SRC_DIR, family_models[i]);
        size_t n;
        char *raw = read_file(path, &n);
        if (!raw)
            fail_msg("cannot read %s", path);
        char *a = substitute(raw, "@N", "2");
        char *text = substitute(a, "@D", "0,1");
        free(a);
        free(raw);
        RefCtx f = {.name = family_models[i], .text = text};
        char what[96];
        snprintf(what, sizeof what, "%s: bind + reference run", family_models[i]);
        Op op = {what, ref_prepare, ref_run, ref_after_failure, family_check, ref_release};
        walk(&op, &f);
        free(text);
    }
}

/* ---- partitioned in-process run (ts_plan_run) ---- */

/* The compiled plan and the reference result are made once; every run
 * must leave the plan as it was (the next run uses it again). */
typedef struct {
    TsPlan *plan;
    float ref[16 * 24];
    TsOutputs *out;
} LocalCtx;

static void local_prepare(void *ctx)
{
    ((LocalCtx *)ctx)->out = NULL;
}

static IrStatus local_run(void *ctx, IrDiag *d)
{
    LocalCtx *l = ctx;
    TsRunOptions ro = {.random = true, .seed = 11};
    TsDiag td = {0};
    return take_diag(ts_plan_run(l->plan, &ro, &l->out, &td), &td, d);
}

static void local_after_failure(void *ctx)
{
    LocalCtx *l = ctx;
    assert_null(l->out);
    assert_int_equal(ts_plan_num_partitions(l->plan), 2);
}

/* The partitioned result equals the reference within the oracle's f32
 * tolerance (1e-4 of the largest magnitude: the all-reduce sums the two
 * halves of the contraction in another order). */
static void local_check(void *ctx)
{
    LocalCtx *l = ctx;
    float got[16 * 24];
    assert_non_null(l->out);
    assert_int_equal(ts_outputs_read(l->out, 0, got, sizeof got, NULL), TS_OK);
    float big = 0;
    for (int i = 0; i < 16 * 24; i++)
        big = fabsf(l->ref[i]) > big ? fabsf(l->ref[i]) : big;
    for (int i = 0; i < 16 * 24; i++)
        if (!(fabsf(got[i] - l->ref[i]) <= 1e-4f * big))
            fail_msg("partitioned run differs from the reference at %d: %g, expected %g", i, got[i], l->ref[i]);
}

static void local_release(void *ctx)
{
    LocalCtx *l = ctx;
    ts_outputs_free(l->out);
    l->out = NULL;
}

static void test_local_run(void **state)
{
    (void)state;
    LocalCtx l = {0};
    TsModule *m = parse_public("mlp_megatron.hlo", model_text);
    TsRunOptions ro = {.random = true, .seed = 11};
    TsOutputs *ref = NULL;
    assert_int_equal(ts_run_reference(m, &ro, &ref, NULL), TS_OK);
    assert_int_equal(ts_outputs_read(ref, 0, l.ref, sizeof l.ref, NULL), TS_OK);
    ts_outputs_free(ref);
    TsCompileOptions co = {.num_partitions = 2, .num_replicas = 1};
    assert_int_equal(ts_compile(m, &co, &l.plan, NULL), TS_OK);
    ts_module_free(m);
    Op op = {"partitioned run (ts_plan_run, 2 devices)", local_prepare, local_run,
             local_after_failure, local_check, local_release};
    walk(&op, &l);
    ts_plan_free(l.plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_compile),
        cmocka_unit_test(test_plan_load),
        cmocka_unit_test(test_reference_run),
        cmocka_unit_test(test_family_reference_runs),
        cmocka_unit_test(test_local_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
