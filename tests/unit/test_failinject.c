/*
 * test_failinject.c: failure injection across the whole pipeline. For each
 * operation (parse, verify, propagate+partition with rt_compile, plan load,
 * binding inputs + the reference run, and an in-process partitioned run
 * with rt_run_local) the walk makes allocation N fail for N = 1, 2, 3, ...
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "compile/compile.h"
#include "runtime/runtime.h"

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
    assert_null(r->plans);
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
    assert_non_null(r->plans[0]);
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

/* ---- bind + reference run ---- */

typedef struct {
    IrModule *m;
    RtArgs args;
    DevValue *out;
} RefCtx;

static void ref_prepare(void *ctx)
{
    RefCtx *r = ctx;
    r->m = parse_model(true);
    r->out = NULL;
}

static IrStatus ref_run(void *ctx, IrDiag *d)
{
    RefCtx *r = ctx;
    RtBindOptions bo = {.random = true, .seed = 7};
    IrStatus st = rt_bind_inputs(r->m, &bo, &r->args, d);
    if (st == IR_OK)
        st = rt_run_reference(r->m, &r->args, &r->out, d);
    return st;
}

static void ref_after_failure(void *ctx)
{
    assert_null(((RefCtx *)ctx)->out);
}

static void ref_check(void *ctx)
{
    DevValue *out = ((RefCtx *)ctx)->out;
    assert_non_null(out);
    assert_int_equal(out->shape.type, IR_F32);
    assert_int_equal(out->shape.rank, 2);
    assert_int_equal(out->shape.dims[0], 16);
    assert_int_equal(out->shape.dims[1], 24);
}

static void ref_release(void *ctx)
{
    RefCtx *r = ctx;
    dev_value_unref(r->out);
    r->out = NULL;
    rt_args_free(&r->args);
    ir_module_free(r->m);
    r->m = NULL;
}

static void test_reference_run(void **state)
{
    (void)state;
    RefCtx r = {0};
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

typedef struct {
    const char *name;
    char *text;
    IrModule *m;
    RtArgs args;
    DevValue *out;
} FamilyCtx;

static void family_prepare(void *ctx)
{
    FamilyCtx *f = ctx;
    IrParseOptions opt = ir_default_parse_options();
    IrDiag d = {0};
    if (ir_parse(f->name, f->text, strlen(f->text), &opt, &f->m, &d) != IR_OK)
        fail_msg("%s: %s", f->name, d.msg ? d.msg : "?");
    f->out = NULL;
}

static IrStatus family_run(void *ctx, IrDiag *d)
{
    FamilyCtx *f = ctx;
    RtBindOptions bo = {.random = true, .seed = 7};
    IrStatus st = rt_bind_inputs(f->m, &bo, &f->args, d);
    if (st == IR_OK)
        st = rt_run_reference(f->m, &f->args, &f->out, d);
    return st;
}

static void family_after_failure(void *ctx)
{
    assert_null(((FamilyCtx *)ctx)->out);
}

static void family_check(void *ctx)
{
    assert_non_null(((FamilyCtx *)ctx)->out);
}

static void family_release(void *ctx)
{
    FamilyCtx *f = ctx;
    dev_value_unref(f->out);
    f->out = NULL;
    rt_args_free(&f->args);
    ir_module_free(f->m);
    f->m = NULL;
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
        FamilyCtx f = {.name = family_models[i], .text = substitute(a, "@D", "0,1")};
        free(a);
        free(raw);
        char what[96];
        snprintf(what, sizeof what, "%s: bind + reference run", family_models[i]);
        Op op = {what, family_prepare, family_run, family_after_failure, family_check, family_release};
        walk(&op, &f);
        free(f.text);
    }
}

/* ---- partitioned in-process run ---- */

/* The compiled program, its arguments and the reference result are made
 * once; every run must leave them as they were. */
typedef struct {
    CompileResult r;
    PlanCluster c;     /* r.prog.cluster[0] */
    RtArgs args;
    DevValue *ref;
    DevValue *out;
} LocalCtx;

static void local_prepare(void *ctx)
{
    ((LocalCtx *)ctx)->out = NULL;
}

static IrStatus local_run(void *ctx, IrDiag *d)
{
    LocalCtx *l = ctx;
    return rt_run_local(&l->c, &l->args, &l->out, d);
}

static void local_inputs_intact(LocalCtx *l)
{
    for (int32_t i = 0; i < l->args.nargs; i++)
        assert_int_equal(l->args.args[i]->refs, 1);
    assert_non_null(l->c.spmd);
}

static void local_after_failure(void *ctx)
{
    LocalCtx *l = ctx;
    assert_null(l->out);
    local_inputs_intact(l);
}

/* The partitioned result equals the reference (the oracle's comparison). */
static void local_check(void *ctx)
{
    LocalCtx *l = ctx;
    char *why = NULL;
    assert_non_null(l->out);
    if (!rt_values_match(l->ref, l->out, &why))
        fail_msg("partitioned run differs from the reference: %s", why ? why : "?");
    ts_free(why);
    local_inputs_intact(l);
}

static void local_release(void *ctx)
{
    LocalCtx *l = ctx;
    dev_value_unref(l->out);
    l->out = NULL;
}

static void test_local_run(void **state)
{
    (void)state;
    LocalCtx l = {0};
    IrDiag d = {0};
    IrModule *m = parse_model(true);
    RtBindOptions bo = {.random = true, .seed = 11};
    assert_int_equal(rt_bind_inputs(m, &bo, &l.args, &d), IR_OK);
    assert_int_equal(rt_run_reference(m, &l.args, &l.ref, &d), IR_OK);
    ir_module_free(m);
    CompileOptions co = {.num_partitions = 2, .num_replicas = 1};
    assert_int_equal(compile_module(parse_model(true), &co, &l.r, &d), IR_OK);
    l.c = l.r.prog.cluster[0];
    Op op = {"partitioned run (rt_run_local, 2 devices)", local_prepare, local_run,
             local_after_failure, local_check, local_release};
    walk(&op, &l);
    dev_value_unref(l.ref);
    rt_args_free(&l.args);
    compile_result_free(&l.r);
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
