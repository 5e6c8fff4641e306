/*
 * test_exec.c: the reference executor (device/exec.c): parameters, tuples,
 * while loops (and the iteration guard), conditionals in both forms with
 * out-of-range indices, nested calls and runaway recursion, partition and
 * replica ids, collectives alone and through a runtime hook, custom-calls,
 * unsupported ops reported at their position, values released after
 * their last use, cycles, argument checks, and failure injection.
 *
 * Modules are built with the ir/ builders, so the tests do not depend on
 * the parser or the verifier (the executor must not either).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "attrs_test.h"
#include "device/device.h"

/* ---- module building ---- */

static IrModule *M;

static IrShape shp(IrType t, int32_t rank, const int64_t *dims)
{
    IrShape s;
    assert_int_equal(ir_shape_make(M->arena, &s, t, rank, dims), IR_OK);
    return s;
}

static IrShape scal(IrType t)
{
    return shp(t, 0, NULL);
}

static IrShape vec_shape(IrType t, int64_t n)
{
    return shp(t, 1, &n);
}

static IrShape tup(int32_t n, const IrShape *el)
{
    IrShape s;
    assert_int_equal(ir_shape_make_tuple(M->arena, &s, n, el), IR_OK);
    return s;
}

static IrComputation *C(int32_t ci)
{
    return M->comp[ci];
}

static int32_t comp(const char *name)
{
    int32_t ci = ir_add_computation(M, name);
    assert_true(ci >= 0);
    return ci;
}

static int32_t param(int32_t ci, int64_t num, IrShape s)
{
    IrInstr in = {.a.x = &ir_no_attrs_x};
    in.op = OP_PARAMETER;
    in.name = ir_unique_name(M, "p");
    in.shape = s;
    in.a.parameter_number = num;
    int32_t i = ir_add_instr(M, C(ci), &in);
    assert_true(i >= 0);
    return i;
}

static int32_t op(int32_t ci, IrOpcode o, IrShape s, int32_t n, ...)
{
    int32_t opnd[8];
    va_list ap;
    va_start(ap, n);
    for (int32_t k = 0; k < n; k++)
        opnd[k] = va_arg(ap, int32_t);
    va_end(ap);
    int32_t i = ir_add_simple(M, C(ci), o, &s, n, opnd, NULL);
    assert_true(i >= 0);
    return i;
}

static IrInstr *I(int32_t ci, int32_t i)
{
    return &C(ci)->instr[i];
}

static void calls(int32_t ci, int32_t i, int32_t n, ...)
{
    int32_t *c = ir_alloc_array(M->arena, (size_t)n, sizeof *c);
    va_list ap;
    va_start(ap, n);
    for (int32_t k = 0; k < n; k++)
        c[k] = va_arg(ap, int32_t);
    va_end(ap);
    I(ci, i)->called = c;
    I(ci, i)->ncalled = n;
}

static int32_t const_bytes(int32_t ci, IrShape s, const void *bytes, size_t n)
{
    int32_t i = op(ci, OP_CONSTANT, s, 0);
    uint8_t *lit = ir_alloc(M->arena, n ? n : 1);
    memcpy(lit, bytes, n);
    I(ci, i)->a.literal = lit;
    I(ci, i)->a.literal_bytes = (int64_t)n;
    return i;
}

static int32_t const_s32(int32_t ci, int32_t v)
{
    return const_bytes(ci, scal(IR_S32), &v, sizeof v);
}

static int32_t const_f32(int32_t ci, float v)
{
    return const_bytes(ci, scal(IR_F32), &v, sizeof v);
}

static int32_t gte(int32_t ci, int32_t t, int64_t idx)
{
    IrShape *ts = &I(ci, t)->shape;
    int32_t i = op(ci, OP_GET_TUPLE_ELEMENT, ts->tuple[idx], 1, t);
    I(ci, i)->a.tuple_index = idx;
    return i;
}

static void root(int32_t ci, int32_t i)
{
    C(ci)->root = i;
}

static int setup(void **state)
{
    (void)state;
    M = ir_module_new("t");
    return M ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(M);
    M = NULL;
    return 0;
}

/* ---- values ---- */

static DevValue *f32v(int64_t n, const float *x)
{
    IrShape s = {.type = IR_F32, .rank = 1, .dims = &n};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    memcpy(v->data, x, (size_t)n * sizeof *x);
    return v;
}

static DevValue *scalar_v(IrType t, int64_t x)
{
    IrShape s = {.type = t};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    dev_store_i64(t, v->data, 0, x);
    return v;
}

static DevValue *f32s(float x)
{
    IrShape s = {.type = IR_F32};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    memcpy(v->data, &x, sizeof x);
    return v;
}

static float F(const DevValue *v, int64_t i)
{
    return ((const float *)v->data)[i];
}

static IrStatus exec(int32_t ci, int32_t n, DevValue **args, const DevExecOptions *opt,
                     DevValue **out, IrDiag *d)
{
    return dev_execute(M, ci, n, args, opt, out, d);
}

static DevValue *exec_ok(int32_t ci, int32_t n, DevValue **args, const DevExecOptions *opt)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    if (exec(ci, n, args, opt, &out, &d) != IR_OK)
        fail_msg("dev_execute failed: %s", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return out;
}

/* Expect failure `st` whose message contains `want`. */
static void exec_err(int32_t ci, int32_t n, DevValue **args, const DevExecOptions *opt,
                     IrStatus st, const char *want)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    assert_int_equal(exec(ci, n, args, opt, &out, &d), st);
    assert_null(out);
    if (!d.msg || !strstr(d.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", d.msg ? d.msg : "(none)", want);
    ir_diag_clear(&d);
}

/* ---- tests ---- */

static void test_simple_and_tuples(void **state)
{
    (void)state;
    IrShape v3 = vec_shape(IR_F32, 3);
    int32_t e = comp("main");
    int32_t x = param(e, 0, v3), y = param(e, 1, v3);
    int32_t s = op(e, OP_ADD, v3, 2, x, y);
    int32_t m = op(e, OP_MULTIPLY, v3, 2, s, x);
    IrShape el[2] = {v3, v3};
    int32_t t = op(e, OP_TUPLE, tup(2, el), 2, m, y);
    root(e, t);
    float a[] = {1, 2, 3}, b[] = {10, 20, 30};
    DevValue *args[2] = {f32v(3, a), f32v(3, b)};
    DevValue *r = exec_ok(e, 2, args, NULL);
    assert_int_equal(r->nelems, 2);
    /* (a + b) * a */
    assert_true(F(r->elems[0], 0) == 11 && F(r->elems[0], 1) == 44 && F(r->elems[0], 2) == 99);
    /* The tuple holds the argument itself (a reference, not a copy). */
    assert_ptr_equal(r->elems[1], args[1]);
    assert_int_equal(args[1]->refs, 2);
    assert_int_equal(args[0]->refs, 1); /* released by the executor */
    dev_value_unref(r);
    assert_int_equal(args[1]->refs, 1);
    assert_ptr_equal(dev_value_leaf(args[0], 0), args[0]);

    /* get-tuple-element of a tuple parameter, and a nested tuple result. */
    int32_t g = comp("gte");
    int32_t tp = param(g, 0, tup(2, el));
    int32_t g1 = gte(g, tp, 1);
    IrShape inner[2] = {v3, tup(2, el)};
    int32_t nt = op(g, OP_TUPLE, tup(2, inner), 2, g1, tp);
    root(g, nt);
    DevValue *pair[2] = {f32v(3, a), f32v(3, b)};
    DevValue *tv = dev_value_tuple(NULL, 2, pair);
    assert_non_null(tv);
    DevValue *r2 = exec_ok(g, 1, &tv, NULL);
    assert_true(F(r2->elems[0], 2) == 30);
    assert_ptr_equal(r2->elems[1], tv);
    /* Leaves depth first: b, a, b. */
    assert_true(F(dev_value_leaf(r2, 0), 0) == 10);
    assert_true(F(dev_value_leaf(r2, 1), 0) == 1);
    assert_true(F(dev_value_leaf(r2, 2), 0) == 10);
    assert_null(dev_value_leaf(r2, 3));
    dev_value_unref(r2);
    dev_value_unref(tv);
    for (int i = 0; i < 2; i++)
        dev_value_unref(args[i]);
}

/* while (i < 5) { i += 1; acc *= 2 } from (0, 1) gives (5, 32). */
static int32_t build_while(int32_t *cond_out)
{
    IrShape st_el[2] = {scal(IR_S32), scal(IR_F32)};
    IrShape st = tup(2, st_el);
    int32_t cond = comp("cond");
    int32_t cp = param(cond, 0, st);
    int32_t ci = gte(cond, cp, 0);
    int32_t five = const_s32(cond, 5);
    int32_t lt = op(cond, OP_COMPARE, scal(IR_PRED), 2, ci, five);
    I(cond, lt)->a.direction = CMP_LT;
    root(cond, lt);
    int32_t body = comp("body");
    int32_t bp = param(body, 0, st);
    int32_t bi = gte(body, bp, 0), ba = gte(body, bp, 1);
    int32_t one = const_s32(body, 1), two = const_f32(body, 2);
    int32_t i1 = op(body, OP_ADD, scal(IR_S32), 2, bi, one);
    int32_t a2 = op(body, OP_MULTIPLY, scal(IR_F32), 2, ba, two);
    root(body, op(body, OP_TUPLE, st, 2, i1, a2));
    int32_t e = comp("loop");
    int32_t i0 = param(e, 0, scal(IR_S32)), a0 = param(e, 1, scal(IR_F32));
    int32_t t = op(e, OP_TUPLE, st, 2, i0, a0);
    int32_t w = op(e, OP_WHILE, st, 1, t);
    calls(e, w, 2, cond, body);
    root(e, w);
    if (cond_out)
        *cond_out = cond;
    return e;
}

static void test_while(void **state)
{
    (void)state;
    int32_t e = build_while(NULL);
    DevValue *args[2] = {scalar_v(IR_S32, 0), f32s(1)};
    DevValue *r = exec_ok(e, 2, args, NULL);
    assert_int_equal(((int32_t *)r->elems[0]->data)[0], 5);
    assert_true(F(r->elems[1], 0) == 32);
    dev_value_unref(r);
    /* Starting past the bound runs no iteration: the state comes back. */
    DevValue *args2[2] = {scalar_v(IR_S32, 9), f32s(3)};
    r = exec_ok(e, 2, args2, NULL);
    assert_int_equal(((int32_t *)r->elems[0]->data)[0], 9);
    assert_true(F(r->elems[1], 0) == 3);
    dev_value_unref(r);
    /* The iteration guard: 5 iterations are needed. */
    DevExecOptions opt = {.max_while_iterations = 4};
    exec_err(e, 2, args, &opt, IR_ERUNTIME, "while loop exceeded 4 iterations");
    opt.max_while_iterations = 5; /* exactly enough */
    r = exec_ok(e, 2, args, &opt);
    dev_value_unref(r);
    for (int i = 0; i < 2; i++) {
        dev_value_unref(args[i]);
        dev_value_unref(args2[i]);
    }
}

static void test_while_bad_condition(void **state)
{
    (void)state;
    /* A condition returning s32 instead of pred. */
    IrShape s = scal(IR_S32);
    int32_t cond = comp("c");
    param(cond, 0, s);
    root(cond, const_s32(cond, 1));
    int32_t body = comp("b");
    root(body, param(body, 0, s));
    int32_t e = comp("e");
    int32_t p = param(e, 0, s);
    int32_t w = op(e, OP_WHILE, s, 1, p);
    calls(e, w, 2, cond, body);
    root(e, w);
    DevValue *a = scalar_v(IR_S32, 0);
    exec_err(e, 1, &a, NULL, IR_EINPUT, "condition does not return pred[]");
    dev_value_unref(a);
}

/* Branch computations over f32[2]: negate, double, square. */
static int32_t branch(const char *name, IrOpcode o)
{
    IrShape v2 = vec_shape(IR_F32, 2);
    int32_t b = comp(name);
    int32_t p = param(b, 0, v2);
    root(b, o == OP_NEGATE ? op(b, o, v2, 1, p) : op(b, o, v2, 2, p, p));
    return b;
}

static void test_conditional(void **state)
{
    (void)state;
    IrShape v2 = vec_shape(IR_F32, 2);
    int32_t neg = branch("neg", OP_NEGATE), dbl = branch("dbl", OP_ADD);
    int32_t sq = branch("sq", OP_MULTIPLY);
    /* pred form: true -> branch 0, false -> branch 1. */
    int32_t e = comp("pc");
    int32_t p = param(e, 0, scal(IR_PRED)), x = param(e, 1, v2);
    int32_t c = op(e, OP_CONDITIONAL, v2, 3, p, x, x);
    calls(e, c, 2, neg, dbl);
    I(e, c)->cond_pred_form = true;
    root(e, c);
    float xv[] = {3, -4};
    DevValue *a[2] = {scalar_v(IR_PRED, 1), f32v(2, xv)};
    DevValue *r = exec_ok(e, 2, a, NULL);
    assert_true(F(r, 0) == -3 && F(r, 1) == 4);
    dev_value_unref(r);
    dev_value_unref(a[0]);
    a[0] = scalar_v(IR_PRED, 0);
    r = exec_ok(e, 2, a, NULL);
    assert_true(F(r, 0) == 6 && F(r, 1) == -8);
    dev_value_unref(r);
    dev_value_unref(a[0]);

    /* Indexed form: out of range (either side) runs the last branch. */
    int32_t e2 = comp("ic");
    int32_t ix = param(e2, 0, scal(IR_S32)), y = param(e2, 1, v2);
    int32_t c2 = op(e2, OP_CONDITIONAL, v2, 4, ix, y, y, y);
    calls(e2, c2, 3, neg, dbl, sq);
    root(e2, c2);
    const int32_t idx[] = {0, 1, 2, 7, -1, INT32_MIN};
    const float want0[] = {-3, 6, 9, 9, 9, 9};
    for (int k = 0; k < 6; k++) {
        a[0] = scalar_v(IR_S32, idx[k]);
        r = exec_ok(e2, 2, a, NULL);
        if (F(r, 0) != want0[k])
            fail_msg("index %d: got %g, want %g", idx[k], F(r, 0), want0[k]);
        dev_value_unref(r);
        dev_value_unref(a[0]);
    }
    /* An s64 selector is not allowed. */
    a[0] = scalar_v(IR_S64, 0);
    IrDiag d = {0};
    DevValue *out = NULL;
    I(e2, ix)->shape = scal(IR_S64);
    assert_int_equal(exec(e2, 2, a, NULL, &out, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "branch selector must be pred[] or s32[]"));
    ir_diag_clear(&d);
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

static void test_nested_calls_and_recursion(void **state)
{
    (void)state;
    IrShape v2 = vec_shape(IR_F32, 2);
    int32_t inner = comp("inner");
    int32_t ia = param(inner, 0, v2), ib = param(inner, 1, v2);
    root(inner, op(inner, OP_SUBTRACT, v2, 2, ia, ib));
    int32_t outer = comp("outer");
    int32_t oa = param(outer, 0, v2), ob = param(outer, 1, v2);
    int32_t call = op(outer, OP_CALL, v2, 2, ob, oa); /* arguments swapped */
    calls(outer, call, 1, inner);
    root(outer, op(outer, OP_NEGATE, v2, 1, call));
    int32_t e = comp("main2");
    int32_t x = param(e, 0, v2), y = param(e, 1, v2);
    int32_t c = op(e, OP_CALL, v2, 2, x, y);
    calls(e, c, 1, outer);
    root(e, c);
    float xv[] = {10, 1}, yv[] = {3, 5};
    DevValue *a[2] = {f32v(2, xv), f32v(2, yv)};
    DevValue *r = exec_ok(e, 2, a, NULL); /* -(y - x) = x - y */
    assert_true(F(r, 0) == 7 && F(r, 1) == -4);
    dev_value_unref(r);
    /* A computation that calls itself. */
    int32_t rec = comp("rec");
    int32_t rp = param(rec, 0, v2);
    int32_t rc = op(rec, OP_CALL, v2, 1, rp);
    calls(rec, rc, 1, rec);
    root(rec, rc);
    exec_err(rec, 1, a, NULL, IR_EINPUT, "nest deeper than");
    /* A call without a callee. */
    int32_t nc = comp("nocallee");
    int32_t np = param(nc, 0, v2);
    root(nc, op(nc, OP_CALL, v2, 1, np));
    exec_err(nc, 1, a, NULL, IR_EINPUT, "missing called computation 0");
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

static void test_ids_barrier_tokens(void **state)
{
    (void)state;
    int32_t e = comp("ids");
    int32_t pid = op(e, OP_PARTITION_ID, scal(IR_U32), 0);
    int32_t rid = op(e, OP_REPLICA_ID, scal(IR_U32), 0);
    IrShape el[2] = {scal(IR_U32), scal(IR_U32)};
    int32_t t = op(e, OP_TUPLE, tup(2, el), 2, pid, rid);
    int32_t b = op(e, OP_OPTIMIZATION_BARRIER, tup(2, el), 1, t);
    int32_t tok = op(e, OP_AFTER_ALL, scal(IR_TOKEN), 0);
    int32_t dep = op(e, OP_ADD_DEPENDENCY, tup(2, el), 2, b, tok);
    root(e, dep);
    DevExecOptions opt = {.partition_id = 3, .replica_id = 5};
    DevValue *r = exec_ok(e, 0, NULL, &opt);
    assert_int_equal(((uint32_t *)r->elems[0]->data)[0], 3);
    assert_int_equal(((uint32_t *)r->elems[1]->data)[0], 5);
    dev_value_unref(r);
    r = exec_ok(e, 0, NULL, NULL); /* defaults: one device */
    assert_int_equal(((uint32_t *)r->elems[0]->data)[0], 0);
    dev_value_unref(r);
    /* get-dimension-size of f32[2,7] dimension 1. */
    int32_t g = comp("gds");
    int64_t d27[] = {2, 7}, one = 1;
    int32_t p = param(g, 0, shp(IR_F32, 2, d27));
    int32_t s = op(g, OP_GET_DIMENSION_SIZE, scal(IR_S32), 1, p);
    I(g, s)->a.dimensions = (IrI64List){1, ir_alloc(M->arena, 8)};
    I(g, s)->a.dimensions.v[0] = one;
    root(g, s);
    IrShape sh = {.type = IR_F32, .rank = 2, .dims = d27};
    DevValue *arg = dev_value_new(&sh);
    r = exec_ok(g, 1, &arg, NULL);
    assert_int_equal(((int32_t *)r->data)[0], 7);
    dev_value_unref(r);
    dev_value_unref(arg);
}

/* ---- errors with positions ---- */

static void test_unsupported_op_position(void **state)
{
    (void)state;
    M->file = "model.hlo";
    /* rng runs now (k_rng.c); without distribution= it is a kernel error,
     * which carries the position the same way. */
    M->src = "HloModule m\n\nENTRY e {\n  r = f32[] rng(a, b)\n}\n";
    int32_t e = comp("rng");
    int32_t a = param(e, 0, scal(IR_F32)), b = param(e, 1, scal(IR_F32));
    int32_t r = op(e, OP_RNG, scal(IR_F32), 2, a, b);
    I(e, r)->name = "r";
    I(e, r)->pos = (IrPos){4, 3};
    root(e, r);
    DevValue *args[2] = {f32s(0), f32s(1)};
    IrDiag d = {0};
    DevValue *out = NULL;
    assert_int_equal(exec(e, 2, args, NULL, &out, &d), IR_EINPUT);
    assert_null(out);
    assert_string_equal(d.msg, "r: rng needs distribution=rng_uniform or rng_normal");
    assert_string_equal(d.file, "model.hlo");
    assert_int_equal(d.pos.line, 4);
    assert_int_equal(d.pos.col, 3);
    assert_non_null(d.line_text);
    assert_non_null(strstr(d.line_text, "rng(a, b)"));
    char *txt = ir_diag_format(&d, "tessel");
    assert_non_null(strstr(txt, "model.hlo:4:3: error: r: rng needs distribution="));
    ts_free(txt);
    ir_diag_clear(&d);
    /* fft of a type it does not take too (device/k_fft.c). */
    int32_t e2 = comp("fft");
    int32_t p = param(e2, 0, scal(IR_F32));
    root(e2, op(e2, OP_FFT, scal(IR_F32), 1, p));
    exec_err(e2, 1, args, NULL, IR_EUNSUPPORTED, "fft FFT of f32 to f32 is not supported");
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    M->file = NULL;
    M->src = NULL;
}

static void test_argument_checks_and_cycles(void **state)
{
    (void)state;
    int32_t e = comp("args");
    int32_t p = param(e, 0, vec_shape(IR_F32, 2));
    root(e, op(e, OP_NEGATE, vec_shape(IR_F32, 2), 1, p));
    float x[] = {1, 2, 3};
    DevValue *a = f32v(3, x);
    exec_err(e, 1, &a, NULL, IR_EINPUT, "argument 0 has shape f32[3], expected f32[2]");
    exec_err(e, 0, NULL, NULL, IR_EINPUT, "parameter(0) not given (0 arguments)");
    dev_value_unref(a);
    /* A kernel whose result disagrees with the declared shape. */
    int32_t e3 = comp("lies");
    int32_t q = param(e3, 0, vec_shape(IR_F32, 2));
    root(e3, op(e3, OP_NEGATE, vec_shape(IR_F32, 3), 1, q));
    float y[] = {1, 2};
    a = f32v(2, y);
    exec_err(e3, 1, &a, NULL, IR_EINPUT, "operand 0 has shape f32[2], result f32[3]");
    /* A cycle: n1 = negate(n2), n2 = negate(n1). */
    int32_t e2 = comp("cyc");
    IrShape v2 = vec_shape(IR_F32, 2);
    int32_t n1 = op(e2, OP_NEGATE, v2, 1, 1);
    int32_t n2 = op(e2, OP_NEGATE, v2, 1, n1);
    assert_int_equal(n1, 0);
    root(e2, n2);
    exec_err(e2, 0, NULL, NULL, IR_EINPUT, "cycle through");
    /* An operand index outside the computation. */
    I(e2, n1)->opnd[0] = 42;
    exec_err(e2, 0, NULL, NULL, IR_EINPUT, "operand 0 is not an instruction of cyc");
    /* No root. */
    int32_t e4 = comp("noroot");
    param(e4, 0, v2);
    exec_err(e4, 1, &a, NULL, IR_EINPUT, "computation noroot has no root");
    dev_value_unref(a);
}

/* ---- custom-calls ---- */

static int custom_calls;
static int64_t probe_refs = -1;
static DevValue *watched;
static void *probe_data[16];
static int nprobe;

/* "twice" doubles an f32 array; "probe" records how many references the
 * watched value has at that moment and passes its operand through. */
static IrStatus custom(void *ctx, const IrModule *m, const IrInstr *ins, int32_t n,
                       DevValue **opnd, DevValue **out, IrDiag *d)
{
    (void)ctx;
    (void)m;
    (void)d;
    custom_calls++;
    if (strcmp(ins->a.x->custom_call_target, "probe") == 0) {
        probe_refs = watched ? watched->refs : -1;
        if (nprobe < 16)
            probe_data[nprobe++] = opnd[0]->data;
        *out = dev_value_ref(opnd[0]);
        return IR_OK;
    }
    if (strcmp(ins->a.x->custom_call_target, "twice") != 0 || n != 1)
        return IR_EUNSUPPORTED;
    DevValue *r = dev_value_clone(opnd[0]);
    if (!r)
        return IR_ENOMEM;
    for (int64_t i = 0; i < dev_value_elements(r); i++)
        ((float *)r->data)[i] *= 2;
    *out = r;
    return IR_OK;
}

static int32_t cc(int32_t ci, const char *target, IrShape s, int32_t x)
{
    int32_t i = op(ci, OP_CUSTOM_CALL, s, 1, x);
    test_x(&I(ci, i)->a)->custom_call_target = target;
    return i;
}

static void test_custom_calls(void **state)
{
    (void)state;
    IrShape v2 = vec_shape(IR_F32, 2);
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks};
    float x[] = {1.5f, -2};
    DevValue *a = f32v(2, x);
    /* tessel's sharding markers are identities on one device. */
    int32_t e = comp("marks");
    int32_t p = param(e, 0, v2);
    int32_t s1 = cc(e, "Sharding", v2, p);
    int32_t s2 = cc(e, "SPMDFullToShardShape", v2, s1);
    root(e, cc(e, "SPMDShardToFullShape", v2, s2));
    DevValue *r = exec_ok(e, 1, &a, NULL);
    assert_ptr_equal(r, a);
    dev_value_unref(r);
    /* Unknown without hooks, and unknown to the hooks. */
    int32_t e2 = comp("unknown");
    int32_t q = param(e2, 0, v2);
    root(e2, cc(e2, "foo", v2, q));
    exec_err(e2, 1, &a, NULL, IR_EUNSUPPORTED, "unknown custom-call target foo");
    custom_calls = 0;
    exec_err(e2, 1, &a, &opt, IR_EUNSUPPORTED, "unknown custom-call target foo");
    assert_int_equal(custom_calls, 1);
    /* Known to the hooks; a side-effecting call the root does not use runs too. */
    int32_t e3 = comp("known");
    int32_t z = param(e3, 0, v2);
    cc(e3, "twice", v2, z); /* result unused */
    root(e3, cc(e3, "twice", v2, z));
    custom_calls = 0;
    r = exec_ok(e3, 1, &a, &opt);
    assert_true(F(r, 0) == 3 && F(r, 1) == -4);
    assert_int_equal(custom_calls, 2);
    dev_value_unref(r);
    dev_value_unref(a);
}

/* Values are released after their last use: the parameter's reference is
 * dropped as soon as its last user has run. */
static void test_liveness(void **state)
{
    (void)state;
    IrShape v2 = vec_shape(IR_F32, 2);
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks};
    float x[] = {1, 2};
    DevValue *a = f32v(2, x);
    watched = a;
    /* root = probe(negate(p)): p is dead when the probe runs. */
    int32_t e = comp("dead");
    int32_t p = param(e, 0, v2);
    int32_t n = op(e, OP_NEGATE, v2, 1, p);
    root(e, cc(e, "probe", v2, n));
    DevValue *r = exec_ok(e, 1, &a, &opt);
    assert_int_equal(probe_refs, 1); /* only the caller's */
    dev_value_unref(r);
    /* root = add(probe(negate(p)), p): p is still needed by add. */
    int32_t e2 = comp("alive");
    int32_t p2 = param(e2, 0, v2);
    int32_t n2 = op(e2, OP_NEGATE, v2, 1, p2);
    int32_t pr = cc(e2, "probe", v2, n2);
    root(e2, op(e2, OP_ADD, v2, 2, pr, p2));
    r = exec_ok(e2, 1, &a, &opt);
    assert_int_equal(probe_refs, 2);
    assert_true(F(r, 0) == 0 && F(r, 1) == 0);
    dev_value_unref(r);
    assert_int_equal(a->refs, 1);
    watched = NULL;
    dev_value_unref(a);
}

/* reshape of a value that dies there reuses its buffer; of a value still
 * used, copies it (the other user sees the old shape and data). */
static void test_reshape_in_place(void **state)
{
    (void)state;
    int64_t d23[] = {2, 3}, d6 = 6;
    IrShape s23 = shp(IR_F32, 2, d23), s6 = vec_shape(IR_F32, d6);
    int32_t e = comp("rs");
    int32_t p = param(e, 0, s6);
    int32_t n = op(e, OP_NEGATE, s6, 1, p);
    int32_t rs = op(e, OP_RESHAPE, s23, 1, n);
    root(e, op(e, OP_NEGATE, s23, 1, rs));
    float x[] = {1, 2, 3, 4, 5, 6};
    DevValue *a = f32v(6, x);
    DevValue *r = exec_ok(e, 1, &a, NULL);
    assert_int_equal(r->shape.rank, 2);
    for (int i = 0; i < 6; i++)
        assert_true(F(r, i) == x[i]);
    dev_value_unref(r);
    /* The argument itself is borrowed: reshape(p) must copy. */
    int32_t e2 = comp("rs2");
    int32_t q = param(e2, 0, s6);
    IrShape el[2] = {s23, s6};
    int32_t rq = op(e2, OP_RESHAPE, s23, 1, q);
    int32_t nq = op(e2, OP_NEGATE, s6, 1, q);
    root(e2, op(e2, OP_TUPLE, tup(2, el), 2, rq, nq));
    r = exec_ok(e2, 1, &a, NULL);
    assert_int_equal(a->shape.rank, 1);
    assert_true(F(r->elems[0], 5) == 6 && F(r->elems[1], 5) == -6);
    dev_value_unref(r);
    int32_t e3 = comp("rs3");
    int32_t q3 = param(e3, 0, s6);
    root(e3, op(e3, OP_RESHAPE, s23, 1, q3));
    r = exec_ok(e3, 1, &a, NULL);
    assert_ptr_not_equal(r, a);
    assert_int_equal(a->shape.rank, 1);
    dev_value_unref(r);
    dev_value_unref(a);
}

/* A lone elementwise op (no fusion group: its operand is a custom-call's)
 * at the last use of an operand of its size writes over that operand's
 * buffer (exec.c's elementwise_in_place): clamp with scalar bounds over
 * 5000 elements (two blocks of dev_k_elementwise_over), convert f32 to
 * s32 (the same bytes, another type). An operand used again later keeps
 * its buffer: the result is a new one. */
static void test_elementwise_in_place(void **state)
{
    (void)state;
    enum { N = 5000 };
    IrShape v = vec_shape(IR_F32, N), vi = vec_shape(IR_S32, N);
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks};
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 7) - 3.25f;
    DevValue *a = f32v(N, x);
    int32_t e = comp("clamp");
    int32_t p = param(e, 0, v);
    int32_t pr = cc(e, "probe", v, op(e, OP_NEGATE, v, 1, p));
    root(e, op(e, OP_CLAMP, v, 3, const_f32(e, -0.5f), pr, const_f32(e, 2.0f)));
    nprobe = 0;
    DevValue *r = exec_ok(e, 1, &a, &opt);
    assert_ptr_equal(r->data, probe_data[0]);
    for (int i = 0; i < N; i++)
        assert_true(F(r, i) == (-x[i] < -0.5f ? -0.5f : -x[i] > 2.0f ? 2.0f : -x[i]));
    dev_value_unref(r);
    int32_t e2 = comp("convert");
    int32_t p2 = param(e2, 0, v);
    root(e2, op(e2, OP_CONVERT, vi, 1, cc(e2, "probe", v, op(e2, OP_NEGATE, v, 1, p2))));
    nprobe = 0;
    r = exec_ok(e2, 1, &a, &opt);
    assert_ptr_equal(r->data, probe_data[0]);
    assert_int_equal(r->shape.type, IR_S32);
    for (int i = 0; i < N; i++)
        assert_int_equal(((const int32_t *)r->data)[i], (int32_t)-x[i]);
    dev_value_unref(r);
    int32_t e3 = comp("kept");
    int32_t p3 = param(e3, 0, v);
    int32_t pr3 = cc(e3, "probe", v, op(e3, OP_NEGATE, v, 1, p3));
    int32_t t3 = op(e3, OP_ABS, v, 1, pr3);
    IrShape el[2] = {v, v};
    root(e3, op(e3, OP_TUPLE, tup(2, el), 2, t3, pr3));
    nprobe = 0;
    r = exec_ok(e3, 1, &a, &opt);
    assert_ptr_not_equal(r->elems[0]->data, probe_data[0]);
    assert_ptr_equal(r->elems[1]->data, probe_data[0]);
    assert_true(F(r->elems[1], 3) == -x[3] && F(r->elems[0], 3) == 0.25f);
    dev_value_unref(r);
    assert_int_equal(a->refs, 1); /* the caller's argument is never written over */
    for (int i = 0; i < N; i++)
        assert_true(F(a, i) == x[i]);
    dev_value_unref(a);
}

/* ---- collectives ---- */

static int coll_calls;

static IrStatus fake_coll(void *ctx, const IrModule *m, const IrInstr *ins, int32_t n,
                          DevValue **opnd, DevValue **out, IrDiag *d)
{
    (void)ctx;
    (void)m;
    (void)ins;
    (void)n;
    (void)d;
    coll_calls++;
    *out = dev_value_clone(opnd[0]);
    for (int64_t i = 0; i < dev_value_elements(*out); i++)
        ((float *)(*out)->data)[i] *= 4; /* "sum over 4 devices" */
    return IR_OK;
}

static int32_t permute(int32_t ci, IrShape s, int32_t x, int32_t npairs, const int64_t *pairs)
{
    int32_t i = op(ci, OP_COLLECTIVE_PERMUTE, s, 1, x);
    int64_t *v = ir_alloc_array(M->arena, (size_t)(2 * npairs), sizeof *v);
    memcpy(v, pairs, (size_t)(2 * npairs) * sizeof *v);
    test_x(&I(ci, i)->a)->source_target_pairs = (IrI64List){2 * npairs, v};
    I(ci, i)->a.channel_id = 1;
    return i;
}

static void test_collectives(void **state)
{
    (void)state;
    IrShape v2 = vec_shape(IR_F32, 2), v4 = vec_shape(IR_F32, 4);
    float x[] = {1, 2}, y[] = {3, 4};
    DevValue *a[2] = {f32v(2, x), f32v(2, y)};
    /* all-reduce of one and of two operands (a tuple), alone. */
    int32_t e = comp("ar");
    int32_t p = param(e, 0, v2), q = param(e, 1, v2);
    int32_t ar = op(e, OP_ALL_REDUCE, v2, 1, p);
    IrShape el[2] = {v2, v2};
    int32_t ar2 = op(e, OP_ALL_REDUCE, tup(2, el), 2, ar, q);
    root(e, ar2);
    DevValue *r = exec_ok(e, 2, a, NULL);
    assert_true(F(r->elems[0], 1) == 2 && F(r->elems[1], 0) == 3);
    dev_value_unref(r);
    /* Through the runtime's hook. */
    DevCollectives hook = {.run = fake_coll};
    DevExecOptions opt = {.coll = &hook};
    int32_t e2 = comp("ar_hook");
    int32_t h = param(e2, 0, v2);
    root(e2, op(e2, OP_ALL_REDUCE, v2, 1, h));
    coll_calls = 0;
    r = exec_ok(e2, 1, a, &opt);
    assert_int_equal(coll_calls, 1);
    assert_true(F(r, 0) == 4 && F(r, 1) == 8);
    dev_value_unref(r);
    /* all-gather over more than one device needs the runtime. */
    int32_t e3 = comp("ag");
    int32_t g = param(e3, 0, v2);
    root(e3, op(e3, OP_ALL_GATHER, v4, 1, g));
    exec_err(e3, 1, a, NULL, IR_EUNSUPPORTED, "all-gather over more than one device");
    /* collective-permute: a self pair copies, no pair gives zeros, a pair
     * from another device needs the runtime. */
    int32_t e4 = comp("cp_self");
    int32_t c4 = param(e4, 0, v2);
    root(e4, permute(e4, v2, c4, 2, (int64_t[]){1, 2, 0, 0}));
    r = exec_ok(e4, 1, a, NULL);
    assert_true(F(r, 0) == 1 && F(r, 1) == 2);
    dev_value_unref(r);
    int32_t e5 = comp("cp_none");
    int32_t c5 = param(e5, 0, v2);
    root(e5, permute(e5, v2, c5, 1, (int64_t[]){0, 1}));
    r = exec_ok(e5, 1, a, NULL);
    assert_true(F(r, 0) == 0 && F(r, 1) == 0);
    dev_value_unref(r);
    int32_t e6 = comp("cp_other");
    int32_t c6 = param(e6, 0, v2);
    root(e6, permute(e6, v2, c6, 1, (int64_t[]){1, 0}));
    exec_err(e6, 1, a, NULL, IR_EUNSUPPORTED, "receives from device 1");
    /* As partition 1, no pair of {1,0} targets us (zeros); {0,1} does. */
    DevExecOptions p1 = {.partition_id = 1};
    r = exec_ok(e6, 1, a, &p1);
    assert_true(F(r, 0) == 0 && F(r, 1) == 0);
    dev_value_unref(r);
    exec_err(e5, 1, a, &p1, IR_EUNSUPPORTED, "receives from device 0");
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

/* map through dev_call inside an execution (the plan cache path). */
static void test_map_in_execution(void **state)
{
    (void)state;
    IrShape s = scal(IR_F32), v3 = vec_shape(IR_F32, 3);
    int32_t f = comp("f");
    int32_t a = param(f, 0, s), b = param(f, 1, s);
    int32_t mx = op(f, OP_MAXIMUM, s, 2, a, b);
    root(f, op(f, OP_MULTIPLY, s, 2, mx, mx)); /* max(a, b)^2 */
    int32_t e = comp("mapper");
    int32_t x = param(e, 0, v3), y = param(e, 1, v3);
    int32_t m = op(e, OP_MAP, v3, 2, x, y);
    calls(e, m, 1, f);
    root(e, m);
    float xv[] = {1, -5, 3}, yv[] = {2, -6, -1};
    DevValue *args[2] = {f32v(3, xv), f32v(3, yv)};
    DevValue *r = exec_ok(e, 2, args, NULL);
    assert_true(F(r, 0) == 4 && F(r, 1) == 25 && F(r, 2) == 9);
    dev_value_unref(r);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

/* Fail each allocation in turn: every run either succeeds or reports
 * IR_ENOMEM, with nothing leaked (ASan / valgrind check the leaks). */
static void test_failure_injection(void **state)
{
    (void)state;
    int32_t e = build_while(NULL);
    DevValue *args[2] = {scalar_v(IR_S32, 0), f32s(1)};
    bool ok = false;
    for (long n = 1; n < 2000 && !ok; n++) {
        IrDiag d = {0};
        DevValue *out = NULL;
        ts_fail_alloc_after(n);
        IrStatus st = exec(e, 2, args, NULL, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            ok = true;
            assert_true(F(out->elems[1], 0) == 32);
        } else {
            assert_int_equal(st, IR_ENOMEM);
            assert_null(out);
        }
        dev_value_unref(out);
        ir_diag_clear(&d);
    }
    assert_true(ok);
    assert_int_equal(args[0]->refs, 1);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
}

static void test_value_basics(void **state)
{
    (void)state;
    IrShape tok = {.type = IR_TOKEN};
    DevValue *t = dev_value_new(&tok);
    assert_non_null(t);
    assert_null(t->data);
    assert_int_equal(dev_value_elements(t), 0);
    dev_value_unref(t);
    int64_t huge[] = {INT64_MAX / 2, 4};
    IrShape h = {.type = IR_F32, .rank = 2, .dims = huge};
    assert_null(dev_value_new(&h)); /* byte size overflows */
    IrShape tu = {.type = IR_TUPLE};
    assert_null(dev_value_new(&tu));
    float x[] = {1, 2};
    DevValue *a = f32v(2, x);
    DevValue *c = dev_value_clone(a);
    assert_ptr_not_equal(c->data, a->data);
    assert_memory_equal(c->data, a->data, 8);
    DevValue *el[2] = {a, c};
    DevValue *tv = dev_value_tuple(NULL, 2, el);
    assert_int_equal(tv->shape.ntuple, 2);
    assert_int_equal(tv->shape.tuple[1].dims[0], 2);
    DevValue *tc = dev_value_clone(tv);
    assert_ptr_not_equal(tc->elems[0], a);
    assert_true(F(tc->elems[1], 1) == 2);
    dev_value_unref(tc);
    dev_value_unref(tv);
    /* Failure releases the references it was given. */
    DevValue *b = f32v(2, x);
    DevValue *el2[1] = {dev_value_ref(b)};
    ts_fail_alloc_after(1);
    assert_null(dev_value_tuple(NULL, 1, el2));
    ts_fail_alloc_after(0);
    assert_int_equal(b->refs, 1);
    /* dev_value_reshaped: sole owner keeps its buffer, a shared one copies. */
    int64_t d21[] = {2, 1};
    IrShape s21 = {.type = IR_F32, .rank = 2, .dims = d21};
    uint8_t *buf = b->data;
    DevValue *rb = dev_value_reshaped(b, &s21);
    assert_ptr_equal(rb->data, buf);
    assert_int_equal(rb->shape.rank, 2);
    DevValue *keep = dev_value_ref(rb);
    DevValue *rc = dev_value_reshaped(rb, &(IrShape){.type = IR_F32, .rank = 1, .dims = &d21[0]});
    assert_ptr_not_equal(rc->data, buf);
    assert_int_equal(keep->shape.rank, 2);
    dev_value_unref(rc);
    dev_value_unref(keep);
}

/* Large freed buffers are reused for the next value of the same size; a
 * reused buffer is still zeroed by dev_value_new. */
static void test_buffer_cache(void **state)
{
    (void)state;
    int64_t n = 1 << 18; /* 1 MiB of f32 */
    IrShape s = {.type = IR_F32, .rank = 1, .dims = &n};
    DevValue *a = dev_value_new_uninit(&s);
    assert_non_null(a);
    uint8_t *buf = a->data;
    memset(buf, 0xab, (size_t)a->nbytes);
    dev_value_unref(a);
    DevValue *b = dev_value_new(&s);
    assert_ptr_equal(b->data, buf);
    for (int64_t i = 0; i < n; i++)
        if (F(b, i) != 0)
            fail_msg("element %lld not zeroed", (long long)i);
    /* A different size does not take it. */
    int64_t m = n + 1;
    IrShape s2 = {.type = IR_F32, .rank = 1, .dims = &m};
    dev_value_unref(b);
    DevValue *c = dev_value_new_uninit(&s2);
    assert_ptr_not_equal(c->data, buf);
    /* A large fresh array starts on a cache line (malloc's would start
     * 16 bytes into one), so 64-byte vector loads do not span two. */
    assert_int_equal((uintptr_t)c->data % 64, 0);
    dev_value_unref(c);
    /* After a trim nothing is cached: allocation goes to the system and
     * can fail under injection. */
    dev_value_trim();
    ts_fail_alloc_after(3); /* 1 the value, 2 its dims, 3 its buffer */
    DevValue *d = dev_value_new(&s);
    ts_fail_alloc_after(0);
    assert_null(d);
    dev_value_trim();
}


/* ---- HLO text (through the parser, without the verifier) ---- */

static IrModule *parse_text(const char *text)
{
    IrParseOptions po = ir_default_parse_options();
    po.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("test.hlo", text, strlen(text), &po, &m, &d) != IR_OK)
        fail_msg("parse: %d:%d: %s", d.pos.line, d.pos.col, d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return m;
}

/* Run the entry of `text`; on failure *d says why. */
static IrStatus run_text(const char *text, int32_t nargs, DevValue **args,
                         const DevExecOptions *opt, DevValue **out, IrDiag *d)
{
    IrModule *m = parse_text(text);
    IrStatus st = dev_execute(m, m->entry, nargs, args, opt, out, d);
    ir_module_free(m);
    return st;
}

static DevValue *run_text_ok(const char *text, int32_t nargs, DevValue **args)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    if (run_text(text, nargs, args, NULL, &out, &d) != IR_OK)
        fail_msg("run: %s", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return out;
}

static int32_t S32(const DevValue *v, int64_t i)
{
    return ((const int32_t *)v->data)[i];
}

/* A call whose operand is at its last use takes it over (exec.c,
 * call_moves): the callee's fused relu writes into the operand's buffer
 * (the probes see the same data before the call and after it). Used
 * again after the call, the operand is only lent: the relu gets a buffer
 * of its own and the operand keeps its values. */
static void test_call_moves_last_use(void **state)
{
    (void)state;
    const char *head =
        "HloModule m\nrelu {\n  p = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
        "  zb = f32[4] broadcast(z), dimensions={}\n  ROOT m = f32[4] maximum(p, zb)\n}\n"
        "ENTRY e {\n  x = f32[4] parameter(0)\n  n = f32[4] negate(x)\n"
        "  a = f32[4] custom-call(n), custom_call_target=\"probe\"\n"
        "  c = f32[4] call(a), to_apply=relu\n";
    char moved[1024], lent[1024];
    snprintf(moved, sizeof moved, "%s  ROOT r = f32[4] custom-call(c), custom_call_target=\"probe\"\n}\n", head);
    snprintf(lent, sizeof lent,
             "%s  q = f32[4] custom-call(c), custom_call_target=\"probe\"\n"
             "  ROOT t = (f32[4], f32[4]) tuple(q, a)\n}\n", head);
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks, .fuse_small = true};
    float x[] = {1, -2, 3, -4};
    DevValue *arg = f32v(4, x), *out = NULL;
    IrDiag d = {0};
    nprobe = 0;
    assert_int_equal(run_text(moved, 1, &arg, &opt, &out, &d), IR_OK);
    assert_int_equal(nprobe, 2);
    assert_ptr_equal(probe_data[0], probe_data[1]);
    for (int i = 0; i < 4; i++)
        assert_true(F(out, i) == (x[i] < 0 ? -x[i] : 0));
    dev_value_unref(out);
    nprobe = 0;
    assert_int_equal(run_text(lent, 1, &arg, &opt, &out, &d), IR_OK);
    assert_int_equal(nprobe, 2);
    assert_ptr_not_equal(probe_data[0], probe_data[1]);
    for (int i = 0; i < 4; i++) {
        assert_true(F(out->elems[0], i) == (x[i] < 0 ? -x[i] : 0));
        assert_true(F(out->elems[1], i) == -x[i]);
    }
    dev_value_unref(out);
    dev_value_unref(arg);
    ir_diag_clear(&d);
}

/* A scan: while loop over a counter that fills a buffer with
 * dynamic-update-slice, then the sum of squares through a reduce-free
 * chain; values worked out by hand. */
static void test_hlo_while_scan(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule scan\n"
        "\n"
        "cond {\n"
        "  p = (s32[], s32[5]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(5)\n"
        "  ROOT lt = pred[] compare(i, n), direction=LT\n"
        "}\n"
        "\n"
        "body {\n"
        "  p = (s32[], s32[5]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  buf = s32[5] get-tuple-element(p), index=1\n"
        "  sq = s32[] multiply(i, i)\n"
        "  v = s32[1] reshape(sq)\n"
        "  upd = s32[5] dynamic-update-slice(buf, v, i)\n"
        "  one = s32[] constant(1)\n"
        "  next = s32[] add(i, one)\n"
        "  ROOT t = (s32[], s32[5]) tuple(next, upd)\n"
        "}\n"
        "\n"
        "ENTRY main {\n"
        "  zero = s32[] constant(0)\n"
        "  init = s32[5] broadcast(zero), dimensions={}\n"
        "  t0 = (s32[], s32[5]) tuple(zero, init)\n"
        "  w = (s32[], s32[5]) while(t0), condition=cond, body=body\n"
        "  ROOT out = s32[5] get-tuple-element(w), index=1\n"
        "}\n";
    DevValue *r = run_text_ok(text, 0, NULL);
    int32_t want[] = {0, 1, 4, 9, 16};
    for (int i = 0; i < 5; i++)
        assert_int_equal(S32(r, i), want[i]);
    dev_value_unref(r);
}

static void test_hlo_conditionals(void **state)
{
    (void)state;
    static const char pred_form[] =
        "HloModule c\n"
        "t { p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p) }\n"
        "f { p = f32[2] parameter(0)\n ROOT a = f32[2] add(p, p) }\n"
        "ENTRY e {\n"
        "  b = pred[] parameter(0)\n"
        "  x = f32[2] parameter(1)\n"
        "  ROOT c = f32[2] conditional(b, x, x), true_computation=t, false_computation=f\n"
        "}\n";
    float xv[] = {3, -4};
    DevValue *a[2] = {scalar_v(IR_PRED, 1), f32v(2, xv)};
    DevValue *r = run_text_ok(pred_form, 2, a);
    assert_true(F(r, 0) == -3 && F(r, 1) == 4);
    dev_value_unref(r);
    dev_value_unref(a[0]);
    a[0] = scalar_v(IR_PRED, 0);
    r = run_text_ok(pred_form, 2, a);
    assert_true(F(r, 0) == 6 && F(r, 1) == -8);
    dev_value_unref(r);
    dev_value_unref(a[0]);
    static const char indexed[] =
        "HloModule c\n"
        "b0 { p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p) }\n"
        "b1 { p = f32[2] parameter(0)\n ROOT a = f32[2] add(p, p) }\n"
        "b2 { p = f32[2] parameter(0)\n ROOT m = f32[2] multiply(p, p) }\n"
        "ENTRY e {\n"
        "  i = s32[] parameter(0)\n"
        "  x = f32[2] parameter(1)\n"
        "  ROOT c = f32[2] conditional(i, x, x, x), branch_computations={b0, b1, b2}\n"
        "}\n";
    const int32_t idx[] = {0, 1, 2, 3, -1};
    const float want[] = {-3, 6, 9, 9, 9};
    for (int k = 0; k < 5; k++) {
        a[0] = scalar_v(IR_S32, idx[k]);
        r = run_text_ok(indexed, 2, a);
        assert_true(F(r, 0) == want[k]);
        dev_value_unref(r);
        dev_value_unref(a[0]);
    }
    dev_value_unref(a[1]);
}

/* Data movement and elementwise ops as XLA prints them. */
static void test_hlo_data_ops(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule d\n"
        "ENTRY e {\n"
        "  io = s32[2,3]{1,0} iota(), iota_dimension=1\n"
        "  tr = s32[3,2]{1,0} transpose(io), dimensions={1,0}\n"
        "  rs = s32[6]{0} reshape(tr)\n"
        "  sl = s32[3]{0} slice(rs), slice={[1:6:2]}\n"
        "  rv = s32[3]{0} reverse(sl), dimensions={0}\n"
        "  m1 = s32[] constant(-1)\n"
        "  pd = s32[5]{0} pad(rv, m1), padding=-1_1_1\n"
        "  c7 = s32[2]{0} constant({7, 8})\n"
        "  cc = s32[7]{0} concatenate(pd, c7), dimensions={0}\n"
        "  st = u32[] constant(4294967295)\n"
        "  ds = s32[3]{0} dynamic-slice(cc, st), dynamic_slice_sizes={3}\n"
        "  bc = s32[2,3]{1,0} broadcast(ds), dimensions={1}\n"
        "  cv = f32[2,3]{1,0} convert(bc)\n"
        "  h = f32[] constant(0.5)\n"
        "  hb = f32[2,3]{1,0} broadcast(h), dimensions={}\n"
        "  ml = f32[2,3]{1,0} multiply(cv, hb)\n"
        "  fl = f32[2,3]{1,0} floor(ml)\n"
        "  ROOT cmp = pred[2,3]{1,0} compare(fl, ml), direction=EQ, type=TOTALORDER\n"
        "}\n";
    /* io = {{0,1,2},{0,1,2}}; tr = {{0,0},{1,1},{2,2}}; rs = 0,0,1,1,2,2;
     * sl = [1:6:2] -> 0,1,2; rv = 2,1,0; interior 1 gives 2,-1,1,-1,0, lo
     * -1 cuts the 2, hi 1 appends -1: pd = -1,1,-1,0,-1 (5 = -1+1+3+2);
     * cc = pd ++ {7,8} (7); the u32 start 4294967295 clamps to 7-3 = 4:
     * ds = {-1,7,8}; halves -0.5, 3.5, 4; floor equals only 4. */
    DevValue *r = run_text_ok(text, 0, NULL);
    const uint8_t want[] = {0, 0, 1, 0, 0, 1};
    assert_memory_equal(r->data, want, 6);
    dev_value_unref(r);
}

static void test_hlo_constants_and_map(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule k\n"
        "sq { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
        "     d = f32[] subtract(a, b)\n ROOT m = f32[] multiply(d, d) }\n"
        "ENTRY e {\n"
        "  h = f16[3] constant({1.5, -2, 65504})\n"
        "  b = bf16[3] constant({1, 2.5, -0})\n"
        "  hf = f32[3] convert(h)\n"
        "  bf = f32[3] convert(b)\n"
        "  mp = f32[3] map(hf, bf), dimensions={0}, to_apply=sq\n"
        "  p = pred[3] constant({true, false, true})\n"
        "  ROOT s = f32[3] select(p, mp, bf)\n"
        "}\n";
    /* (1.5-1)^2 = 0.25; false -> bf[1] = 2.5; (65504 - -0)^2 = 4290774016. */
    DevValue *r = run_text_ok(text, 0, NULL);
    assert_true(F(r, 0) == 0.25f && F(r, 1) == 2.5f && F(r, 2) == 4290774016.0f);
    dev_value_unref(r);
}

/* An unsupported op in a parsed file is reported at its line and column. */
static void test_hlo_unsupported_position(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule u\n"
        "ENTRY e {\n"
        "  x = f16[2,2] parameter(0)\n"
        "  ROOT f = f16[2,2] cholesky(x), lower=true\n"
        "}\n";
    int64_t dims[2] = {2, 2};
    IrShape s16 = {.type = IR_F16, .rank = 2, .dims = dims};
    DevValue *a = dev_value_new(&s16);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrModule *m = parse_text(text);
    assert_int_equal(dev_execute(m, m->entry, 1, &a, NULL, &out, &d), IR_EUNSUPPORTED);
    assert_string_equal(d.msg, "f: cholesky of f16 is not supported (f32, f64, c64, c128)");
    assert_string_equal(d.file, "test.hlo");
    assert_int_equal(d.pos.line, 4);
    assert_int_equal(d.pos.col, 8);
    ir_diag_clear(&d);
    ir_module_free(m);
    dev_value_unref(a);
}

/* dynamic-update-slice works in place on a value at its last use, and
 * copies one that is used again (or borrowed from the caller). */
static void test_dus_in_place(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule ip\n"
        "ENTRY e {\n"
        "  p = f32[4] parameter(0)\n"
        "  n = f32[4] negate(p)\n"
        "  a = f32[4] custom-call(n), custom_call_target=\"probe\"\n"
        "  u = f32[1] constant({9})\n"
        "  i = s32[] constant(2)\n"
        "  d = f32[4] dynamic-update-slice(a, u, i)\n"
        "  ROOT b = f32[4] custom-call(d), custom_call_target=\"probe\"\n"
        "}\n";
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks};
    float x[] = {1, 2, 3, 4};
    DevValue *arg = f32v(4, x);
    IrDiag d = {0};
    DevValue *r = NULL;
    nprobe = 0;
    assert_int_equal(run_text(text, 1, &arg, &opt, &r, &d), IR_OK);
    assert_int_equal(nprobe, 2);
    assert_ptr_equal(probe_data[0], probe_data[1]); /* same buffer */
    assert_true(F(r, 0) == -1 && F(r, 2) == 9 && F(r, 3) == -4);
    dev_value_unref(r);
    /* n is used again by the root: the update must not touch it. */
    static const char text2[] =
        "HloModule ip2\n"
        "ENTRY e {\n"
        "  p = f32[4] parameter(0)\n"
        "  n = f32[4] negate(p)\n"
        "  u = f32[1] constant({9})\n"
        "  i = s32[] constant(0)\n"
        "  d = f32[4] dynamic-update-slice(n, u, i)\n"
        "  q = f32[4] dynamic-update-slice(p, u, i)\n"
        "  ROOT t = (f32[4], f32[4], f32[4]) tuple(d, n, q)\n"
        "}\n";
    assert_int_equal(run_text(text2, 1, &arg, &opt, &r, &d), IR_OK);
    assert_true(F(r->elems[0], 0) == 9 && F(r->elems[1], 0) == -1 && F(r->elems[2], 0) == 9);
    assert_true(F(arg, 0) == 1); /* the borrowed argument is untouched */
    dev_value_unref(r);
    dev_value_unref(arg);
}

/* In a while loop the body owns the state, so after the first iteration
 * the buffer is updated in place: the same data pointer every time. */
static void test_while_scan_in_place(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule scan2\n"
        "cond {\n"
        "  p = (s32[], f32[8]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(6)\n"
        "  ROOT lt = pred[] compare(i, n), direction=LT\n"
        "}\n"
        "body {\n"
        "  p = (s32[], f32[8]) parameter(0)\n"
        "  i = s32[] get-tuple-element(p), index=0\n"
        "  buf = f32[8] get-tuple-element(p), index=1\n"
        "  f = f32[] convert(i)\n"
        "  v = f32[1] reshape(f)\n"
        "  upd = f32[8] dynamic-update-slice(buf, v, i)\n"
        "  pr = f32[8] custom-call(upd), custom_call_target=\"probe\"\n"
        "  one = s32[] constant(1)\n"
        "  next = s32[] add(i, one)\n"
        "  ROOT t = (s32[], f32[8]) tuple(next, pr)\n"
        "}\n"
        "ENTRY main {\n"
        "  zero = s32[] constant(0)\n"
        "  m = f32[] constant(-1)\n"
        "  init = f32[8] broadcast(m), dimensions={}\n"
        "  t0 = (s32[], f32[8]) tuple(zero, init)\n"
        "  w = (s32[], f32[8]) while(t0), condition=cond, body=body\n"
        "  ROOT out = f32[8] get-tuple-element(w), index=1\n"
        "}\n";
    DevCustomCalls hooks = {NULL, custom};
    DevExecOptions opt = {.custom = &hooks};
    IrDiag d = {0};
    DevValue *r = NULL;
    nprobe = 0;
    assert_int_equal(run_text(text, 0, NULL, &opt, &r, &d), IR_OK);
    assert_int_equal(nprobe, 6);
    for (int k = 2; k < 6; k++)
        assert_ptr_equal(probe_data[k], probe_data[1]);
    const float want[] = {0, 1, 2, 3, 4, 5, -1, -1};
    for (int k = 0; k < 8; k++)
        assert_true(F(r, k) == want[k]);
    dev_value_unref(r);
}

/* ---- XLA's SPMD partitioner test modules, run whole on one device ---- */

/* Largest leaf (bytes) of any instruction of the module. */
static int64_t largest_leaf(const IrModule *m)
{
    int64_t big = 0;
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        for (int32_t i = 0; i < m->comp[ci]->ninstr; i++) {
            const IrShape *s = &m->comp[ci]->instr[i].shape;
            for (int32_t l = 0; l < ir_shape_leaf_count(s); l++) {
                int64_t b = ir_shape_bytes(ir_shape_leaf(s, l));
                if (b < 0 || b > big)
                    big = b < 0 ? INT64_MAX : b;
            }
        }
    return big;
}

/* Deterministic small values: element i of input k is (7i + k) mod 5. */
static DevValue *input_of(const IrShape *s, int32_t k)
{
    if (s->type == IR_TUPLE) {
        DevValue *el[64];
        assert_true(s->ntuple <= 64);
        for (int32_t i = 0; i < s->ntuple; i++)
            el[i] = input_of(&s->tuple[i], k + i);
        return dev_value_tuple(s, s->ntuple, el);
    }
    DevValue *v = dev_value_new(s);
    assert_non_null(v);
    for (int64_t i = 0; i < dev_value_elements(v); i++)
        dev_store_i64(s->type, v->data, i, (7 * i + k) % 5);
    return v;
}

/* Every module small enough for a unit test runs, or fails with
 * IR_EUNSUPPORTED naming what is missing (infeed, rng, an unknown
 * custom-call target, ...), or stops at the while-loop guard; never
 * anything else. */
static void test_xla_spmd_modules(void **state)
{
    (void)state;
    char path[8192];
    snprintf(path, sizeof path, "%s/conformance/xla_spmd/manifest.tsv", TESSEL_SHARED_DIR);
    FILE *f = fopen(path, "r");
    if (!f)
        skip();
    char line[1024];
    int ran = 0, ok = 0, unsupported = 0;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab || strncmp(line, "file\t", 5) == 0)
            continue;
        *tab = 0;
        snprintf(path, sizeof path, "%s/conformance/xla_spmd/modules/%s", TESSEL_SHARED_DIR, line);
        IrParseOptions po = ir_default_parse_options();
        po.verify = false;
        IrModule *m = NULL;
        IrDiag d = {0};
        if (ir_parse_file(path, &po, &m, &d) != IR_OK || largest_leaf(m) > (1 << 20)) {
            ir_diag_clear(&d);
            ir_module_free(m);
            continue; /* the parser's tests judge parse errors */
        }
        IrComputation *e = ir_entry(m);
        DevValue *args[64] = {0};
        assert_true(e->nparam <= 64);
        for (int32_t i = 0; i < e->nparam; i++)
            args[i] = input_of(&e->instr[e->param[i]].shape, i);
        DevExecOptions opt = {.max_while_iterations = 1000};
        DevValue *out = NULL;
        IrStatus st = dev_execute(m, m->entry, e->nparam, args, &opt, &out, &d);
        ran++;
        ok += st == IR_OK;
        unsupported += st == IR_EUNSUPPORTED;
        if (st != IR_OK && st != IR_EUNSUPPORTED &&
            !(st == IR_ERUNTIME && d.msg && strstr(d.msg, "exceeded")))
            fail_msg("%s: status %d: %s", line, (int)st, d.msg ? d.msg : "?");
        if (st == IR_OK && !ir_shape_equal(&out->shape, &e->instr[e->root].shape))
            fail_msg("%s: result shape differs from the root's", line);
        dev_value_unref(out);
        for (int32_t i = 0; i < e->nparam; i++)
            dev_value_unref(args[i]);
        ir_diag_clear(&d);
        ir_module_free(m);
    }
    fclose(f);
    print_message("xla_spmd: %d modules run, %d ok, %d unsupported\n", ran, ok, unsupported);
    assert_true(ran > 0);
    dev_value_trim();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_simple_and_tuples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_while, setup, teardown),
        cmocka_unit_test_setup_teardown(test_while_bad_condition, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conditional, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_calls_and_recursion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_barrier_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsupported_op_position, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argument_checks_and_cycles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_liveness, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reshape_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_elementwise_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collectives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_in_execution, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_injection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_value_basics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffer_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hlo_while_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call_moves_last_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hlo_conditionals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hlo_data_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hlo_constants_and_map, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hlo_unsupported_position, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dus_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_while_scan_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xla_spmd_modules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
