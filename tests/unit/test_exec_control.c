/*
 * test_exec_control.c: the wrapping ops of the executor (device/k_control.c,
 * device/k_host.c and their cases in exec.c): fusion run as a call, XLA's
 * async tuple, copy-start/done, scan forwards and reversed, the collective
 * -start/-done pairs through the collectives hook and alone,
 * rng-get-and-update-state's counter, ragged-all-to-all within one device,
 * host transfers (infeed/outfeed, send/recv) through DevHostTransfers,
 * refused without it and between devices, and the run-time sizes of
 * bounded dynamic dimensions (k_dynamic.c). Expected values are worked out
 * by hand in the comments. Modules are built with the ir/ builders, so the
 * tests need neither the parser nor the verifier.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "attrs_test.h"
#include "device/device.h"

static IrModule *M;

static IrShape shp(IrType t, int32_t rank, const int64_t *dims)
{
    IrShape s;
    assert_int_equal(ir_shape_make(M->arena, &s, t, rank, dims), IR_OK);
    return s;
}

static IrShape vec(IrType t, int64_t n)
{
    return shp(t, 1, &n);
}

static IrShape scal(IrType t)
{
    return shp(t, 0, NULL);
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

static void calls(int32_t ci, int32_t i, int32_t callee)
{
    int32_t *c = ir_alloc(M->arena, sizeof *c);
    *c = callee;
    I(ci, i)->called = c;
    I(ci, i)->ncalled = 1;
}

static int32_t gte(int32_t ci, int32_t t, int64_t idx)
{
    int32_t i = op(ci, OP_GET_TUPLE_ELEMENT, I(ci, t)->shape.tuple[idx], 1, t);
    I(ci, i)->a.tuple_index = idx;
    return i;
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

static DevValue *f32v(int64_t n, const float *x)
{
    IrShape s = {.type = IR_F32, .rank = 1, .dims = &n};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    memcpy(v->data, x, (size_t)n * sizeof *x);
    return v;
}

static DevValue *run_ok(int32_t ci, int32_t n, DevValue **args, const DevExecOptions *opt)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    if (dev_execute(M, ci, n, args, opt, &out, &d) != IR_OK)
        fail_msg("dev_execute failed: %s", d.msg ? d.msg : "?");
    return out;
}

static void run_err(int32_t ci, int32_t n, DevValue **args, const DevExecOptions *opt,
                    IrStatus st, const char *want)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    assert_int_equal(dev_execute(M, ci, n, args, opt, &out, &d), st);
    assert_null(out);
    if (!d.msg || !strstr(d.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", d.msg ? d.msg : "(none)", want);
    ir_diag_clear(&d);
}

static void expect_f32(const DevValue *v, int64_t n, const float *want)
{
    assert_int_equal(v->shape.type, IR_F32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++)
        if (((const float *)v->data)[i] != want[i])
            fail_msg("element %lld: %g, expected %g", (long long)i,
                     (double)((const float *)v->data)[i], (double)want[i]);
}

/* A computation (p0, p1) -> o(p0, p1) on f32[n]. */
static int32_t binary_comp(const char *name, IrOpcode o, int64_t n)
{
    int32_t f = comp(name);
    int32_t a = param(f, 0, vec(IR_F32, n)), b = param(f, 1, vec(IR_F32, n));
    C(f)->root = op(f, o, vec(IR_F32, n), 2, a, b);
    return f;
}

/* fusion(x, y), calls=add: [1,2] + [10,20] = [11,22]. */
static void test_fusion(void **state)
{
    (void)state;
    int32_t f = binary_comp("fused", OP_ADD, 2);
    int32_t e = comp("e");
    int32_t x = param(e, 0, vec(IR_F32, 2)), y = param(e, 1, vec(IR_F32, 2));
    int32_t fu = op(e, OP_FUSION, vec(IR_F32, 2), 2, x, y);
    calls(e, fu, f);
    C(e)->root = fu;
    DevValue *a[2] = {f32v(2, (float[]){1, 2}), f32v(2, (float[]){10, 20})};
    DevValue *r = run_ok(e, 2, a, NULL);
    expect_f32(r, 2, (float[]){11, 22});
    dev_value_unref(r);
    /* without calls= it is an error at the fusion, not a crash */
    I(e, fu)->ncalled = 0;
    run_err(e, 2, a, NULL, IR_EINPUT, "calls=");
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

/* async-start(x, y), calls=multiply: ((x, y), x*y, s32[] 0); async-update
 * passes it on; async-done gives x*y = [3*5, 4*6] = [15, 24]. */
static void test_async(void **state)
{
    (void)state;
    int32_t f = binary_comp("wrapped", OP_MULTIPLY, 2);
    int32_t e = comp("e");
    IrShape v2 = vec(IR_F32, 2);
    int32_t x = param(e, 0, v2), y = param(e, 1, v2);
    IrShape ops[2] = {v2, v2};
    IrShape el[3] = {tup(2, ops), v2, scal(IR_S32)};
    IrShape st = tup(3, el);
    int32_t s = op(e, OP_ASYNC_START, st, 2, x, y);
    calls(e, s, f);
    int32_t u = op(e, OP_ASYNC_UPDATE, st, 1, s);
    int32_t d = op(e, OP_ASYNC_DONE, v2, 1, u);
    IrShape both[2] = {st, v2};
    C(e)->root = op(e, OP_TUPLE, tup(2, both), 2, u, d);
    DevValue *a[2] = {f32v(2, (float[]){3, 4}), f32v(2, (float[]){5, 6})};
    DevValue *r = run_ok(e, 2, a, NULL);
    DevValue *start = r->elems[0];
    assert_int_equal(start->nelems, 3);
    assert_ptr_equal(start->elems[0]->elems[0], a[0]); /* the operands themselves */
    assert_ptr_equal(start->elems[0]->elems[1], a[1]);
    expect_f32(start->elems[1], 2, (float[]){15, 24});
    assert_int_equal(*(int32_t *)start->elems[2]->data, 0);
    expect_f32(r->elems[1], 2, (float[]){15, 24});
    dev_value_unref(r);
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

/* copy-start(x) = (x, x, u32[] 0); copy-done = element 0 = x. */
static void test_copy_start(void **state)
{
    (void)state;
    int32_t e = comp("e");
    IrShape v3 = vec(IR_F32, 3);
    int32_t x = param(e, 0, v3);
    IrShape el[3] = {v3, v3, scal(IR_U32)};
    int32_t s = op(e, OP_COPY_START, tup(3, el), 1, x);
    int32_t d = op(e, OP_COPY_DONE, v3, 1, s);
    C(e)->root = op(e, OP_NEGATE, v3, 1, d);
    DevValue *a = f32v(3, (float[]){1, -2, 3});
    DevValue *r = run_ok(e, 1, &a, NULL);
    expect_f32(r, 3, (float[]){-1, 2, -3});
    expect_f32(a, 3, (float[]){1, -2, 3}); /* the source is unchanged */
    dev_value_unref(r);
    dev_value_unref(a);
}

/* scan(in, init), dimensions={0}, num_carries=1 with the combiner
 * (in, carry) -> (carry + in, carry + in): a cumulative sum.
 * in [1,2,3,4], init 0.5: outputs [1.5, 3.5, 6.5, 10.5], carry 10.5.
 * Reversed (j = 3, 2, 1, 0): carry 0.5+4 = 4.5, +3 = 7.5, +2 = 9.5, +1 =
 * 10.5, stored at j: outputs [10.5, 9.5, 7.5, 4.5], carry 10.5. */
static int32_t build_scan(bool reverse)
{
    int32_t f = comp("combiner");
    int32_t in = param(f, 0, scal(IR_F32)), carry = param(f, 1, scal(IR_F32));
    int32_t add = op(f, OP_ADD, scal(IR_F32), 2, carry, in);
    IrShape two[2] = {scal(IR_F32), scal(IR_F32)};
    C(f)->root = op(f, OP_TUPLE, tup(2, two), 2, add, add);
    int32_t e = comp("e");
    int32_t x = param(e, 0, vec(IR_F32, 4)), init = param(e, 1, scal(IR_F32));
    IrShape res[2] = {vec(IR_F32, 4), scal(IR_F32)};
    int32_t s = op(e, OP_SCAN, tup(2, res), 2, x, init);
    calls(e, s, f);
    int64_t *dim = ir_alloc(M->arena, sizeof *dim);
    *dim = 0;
    I(e, s)->a.dimensions = (IrI64List){1, dim};
    test_x(&I(e, s)->a)->num_carries = 1;
    test_x(&I(e, s)->a)->is_reverse = reverse;
    C(e)->root = s;
    return e;
}

static void test_scan(void **state)
{
    (void)state;
    for (int rev = 0; rev < 2; rev++) {
        int32_t e = build_scan(rev);
        DevValue *a[2] = {f32v(4, (float[]){1, 2, 3, 4}), f32v(1, (float[]){0.5f})};
        IrShape s0 = {.type = IR_F32};
        DevValue *init = dev_value_new(&s0);
        ((float *)init->data)[0] = 0.5f;
        dev_value_unref(a[1]);
        a[1] = init;
        DevValue *r = run_ok(e, 2, a, NULL);
        if (rev)
            expect_f32(r->elems[0], 4, (float[]){10.5f, 9.5f, 7.5f, 4.5f});
        else
            expect_f32(r->elems[0], 4, (float[]){1.5f, 3.5f, 6.5f, 10.5f});
        expect_f32(r->elems[1], 1, (float[]){10.5f});
        dev_value_unref(r);
        /* num_carries beyond the results: an error, not a crash */
        test_x(&I(e, C(e)->root)->a)->num_carries = 3;
        run_err(e, 2, a, NULL, IR_EINPUT, "num_carries");
        dev_value_unref(a[0]);
        dev_value_unref(a[1]);
    }
}

static int coll_calls;
static IrOpcode coll_op;

/* A collectives hook that records the op it is asked for and returns the
 * operand times 4 ("a sum over 4 devices"). */
static IrStatus fake_coll(void *ctx, const IrModule *m, const IrInstr *ins, int32_t n,
                          DevValue **opnd, DevValue **out, IrDiag *d)
{
    (void)ctx, (void)m, (void)n, (void)d;
    coll_calls++;
    coll_op = ins->op;
    if (!ir_shape_equal(&ins->shape, &opnd[0]->shape))
        return IR_EINTERNAL;
    *out = dev_value_clone(opnd[0]);
    for (int64_t i = 0; i < dev_value_elements(*out); i++)
        ((float *)(*out)->data)[i] *= 4;
    return IR_OK;
}

/* all-reduce-start has the all-reduce's shape and -done passes it on;
 * collective-permute-start is (operand, result, u32[], u32[]) and -done
 * gives element 1. Through the hook each is asked for as its base op. */
static void test_collective_pairs(void **state)
{
    (void)state;
    int32_t e = comp("e");
    IrShape v2 = vec(IR_F32, 2);
    int32_t x = param(e, 0, v2);
    int32_t ars = op(e, OP_ALL_REDUCE_START, v2, 1, x);
    int32_t ard = op(e, OP_ALL_REDUCE_DONE, v2, 1, ars);
    IrShape el[4] = {v2, v2, scal(IR_U32), scal(IR_U32)};
    int32_t cps = op(e, OP_COLLECTIVE_PERMUTE_START, tup(4, el), 1, ard);
    int64_t *pairs = ir_alloc_array(M->arena, 2, sizeof *pairs);
    pairs[0] = pairs[1] = 0;
    test_x(&I(e, cps)->a)->source_target_pairs = (IrI64List){2, pairs};
    C(e)->root = op(e, OP_COLLECTIVE_PERMUTE_DONE, v2, 1, cps);
    DevValue *a = f32v(2, (float[]){1, 2});
    /* alone: identities */
    DevValue *r = run_ok(e, 1, &a, NULL);
    expect_f32(r, 2, (float[]){1, 2});
    dev_value_unref(r);
    /* through the hook: x4 for each collective, asked as the base op */
    DevCollectives coll = {.run = fake_coll};
    DevExecOptions o = {.coll = &coll};
    coll_calls = 0;
    r = run_ok(e, 1, &a, &o);
    expect_f32(r, 2, (float[]){16, 32});
    assert_int_equal(coll_calls, 2);
    assert_int_equal(coll_op, OP_COLLECTIVE_PERMUTE);
    dev_value_unref(r);
    /* a two-operand reduce-scatter f32[2] -> f32[1] scatters over two
     * devices: alone it is refused, not returned with the wrong shape */
    int32_t e2 = comp("e2");
    int32_t p0 = param(e2, 0, v2), p1 = param(e2, 1, v2);
    IrShape h[2] = {vec(IR_F32, 1), vec(IR_F32, 1)};
    C(e2)->root = op(e2, OP_REDUCE_SCATTER, tup(2, h), 2, p0, p1);
    DevValue *b[2] = {a, a};
    run_err(e2, 2, b, NULL, IR_EUNSUPPORTED,
            "over more than one device needs a collective runtime");
    dev_value_unref(a);
}

/* collective-broadcast runs where its group is the device alone; over a
 * group of two it is refused. ragged-all-to-all within one device: input
 * [a b c d] = [1 2 3 4], output [0 0 0 0 0], input_offsets {1},
 * send_sizes {2}, output_offsets {3}: [0 0 0 2 3]. */
static void test_one_member_collectives(void **state)
{
    (void)state;
    int32_t e = comp("e");
    int32_t x = param(e, 0, vec(IR_F32, 4)), o = param(e, 1, vec(IR_F32, 5));
    int32_t io = param(e, 2, vec(IR_S32, 1)), ss = param(e, 3, vec(IR_S32, 1));
    int32_t oo = param(e, 4, vec(IR_S32, 1)), rs = param(e, 5, vec(IR_S32, 1));
    int32_t opnd[6] = {x, o, io, ss, oo, rs};
    IrShape v5 = vec(IR_F32, 5);
    int32_t r2a = ir_add_simple(M, C(e), OP_RAGGED_ALL_TO_ALL, &v5, 6, opnd, NULL);
    int32_t cb = op(e, OP_COLLECTIVE_BROADCAST, vec(IR_F32, 5), 1, r2a);
    C(e)->root = cb;
    DevValue *a[6] = {f32v(4, (float[]){1, 2, 3, 4}), f32v(5, (float[]){0, 0, 0, 0, 0})};
    int32_t iv[4] = {1, 2, 3, 2};
    for (int k = 0; k < 4; k++) {
        IrShape s = vec(IR_S32, 1);
        a[2 + k] = dev_value_new(&s);
        memcpy(a[2 + k]->data, &iv[k], 4);
    }
    DevValue *r = run_ok(e, 6, a, NULL);
    expect_f32(r, 5, (float[]){0, 0, 0, 2, 3});
    dev_value_unref(r);
    /* a chunk past the end */
    ((int32_t *)a[4]->data)[0] = 4;
    run_err(e, 6, a, NULL, IR_EINPUT, "out of bounds");
    ((int32_t *)a[4]->data)[0] = 3;
    /* a group of two devices */
    IrReplicaGroups *g = &test_x(&I(e, cb)->a)->replica_groups;
    g->present = true;
    g->ngroups = 1;
    g->group_size = ir_alloc(M->arena, sizeof *g->group_size);
    g->group_size[0] = 2;
    run_err(e, 6, a, NULL, IR_EUNSUPPORTED, "more than one device");
    for (int k = 0; k < 6; k++)
        dev_value_unref(a[k]);
}

/* XLA's CPU counter: 0x7012395 first, then + delta at each execution of
 * the same instruction. Calling one computation twice runs its
 * rng-get-and-update-state twice: 0x7012395, then 0x7012395 + 7. A second
 * run starts afresh. */
static void test_rng_state(void **state)
{
    (void)state;
    IrShape u2 = vec(IR_U64, 2);
    int32_t f = comp("f");
    int32_t g = op(f, OP_RNG_GET_AND_UPDATE_STATE, u2, 0);
    test_x(&I(f, g)->a)->rng_delta = 7;
    C(f)->root = g;
    int32_t e = comp("e");
    int32_t c1 = op(e, OP_CALL, u2, 0), c2 = op(e, OP_CALL, u2, 0);
    calls(e, c1, f);
    calls(e, c2, f);
    IrShape both[2] = {u2, u2};
    C(e)->root = op(e, OP_TUPLE, tup(2, both), 2, c1, c2);
    for (int run = 0; run < 2; run++) {
        DevValue *r = run_ok(e, 0, NULL, NULL);
        const uint64_t *a = (const uint64_t *)(void *)r->elems[0]->data;
        const uint64_t *b = (const uint64_t *)(void *)r->elems[1]->data;
        assert_true(a[0] == 0x7012395u && a[1] == 0);
        assert_true(b[0] == 0x7012395u + 7 && b[1] == 0);
        dev_value_unref(r);
    }
}

/* ---- host transfers ---- */

typedef struct Host {
    DevValue *fed[4];
    int nfed, next;
    DevValue *taken[4];
    int ntaken;
} Host;

static IrStatus host_feed(void *ctx, const IrModule *m, const IrInstr *ins, const IrShape *s,
                          DevValue **out, IrDiag *d)
{
    (void)m, (void)s;
    Host *h = ctx;
    if (h->next >= h->nfed)
        return ir_error(d, IR_EINPUT, NULL, NULL, ins->pos, "%s: no value left", ins->name);
    *out = dev_value_ref(h->fed[h->next++]);
    return IR_OK;
}

static IrStatus host_take(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *v,
                          IrDiag *d)
{
    (void)m, (void)ins, (void)d;
    Host *h = ctx;
    h->taken[h->ntaken++] = dev_value_ref(v);
    return IR_OK;
}

/* infeed(tok) -> (x, tok); outfeed(-x, tok); recv(tok), host -> (y, u32,
 * tok); recv-done -> (y, tok); send(x + y, tok), host; send-done. Fed
 * [1, 2] then [10, 20]: outfeeds [-1, -2] and [11, 22], result x + y. */
static void test_host_transfers(void **state)
{
    (void)state;
    int32_t e = comp("e");
    IrShape v2 = vec(IR_F32, 2), tok = scal(IR_TOKEN), u32 = scal(IR_U32);
    int32_t t0 = op(e, OP_AFTER_ALL, tok, 0);
    IrShape inf_el[2] = {v2, tok};
    int32_t inf = op(e, OP_INFEED, tup(2, inf_el), 1, t0);
    int32_t x = gte(e, inf, 0), t1 = gte(e, inf, 1);
    int32_t neg = op(e, OP_NEGATE, v2, 1, x);
    int32_t of = op(e, OP_OUTFEED, tok, 2, neg, t1);
    IrShape recv_el[3] = {v2, u32, tok};
    int32_t rv = op(e, OP_RECV, tup(3, recv_el), 1, of);
    test_x(&I(e, rv)->a)->is_host_transfer = true;
    I(e, rv)->a.channel_id = 2;
    int32_t rd = op(e, OP_RECV_DONE, tup(2, inf_el), 1, rv);
    test_x(&I(e, rd)->a)->is_host_transfer = true;
    int32_t y = gte(e, rd, 0), t2 = gte(e, rd, 1);
    int32_t sum = op(e, OP_ADD, v2, 2, x, y);
    int32_t sd = op(e, OP_SEND, tup(3, recv_el), 2, sum, t2);
    test_x(&I(e, sd)->a)->is_host_transfer = true;
    I(e, sd)->a.channel_id = 3;
    int32_t sdd = op(e, OP_SEND_DONE, tok, 1, sd);
    test_x(&I(e, sdd)->a)->is_host_transfer = true;
    C(e)->root = sum;
    Host h = {{f32v(2, (float[]){1, 2}), f32v(2, (float[]){10, 20})}, 2, 0, {0}, 0};
    DevHostTransfers ht = {&h, host_feed, host_take};
    DevExecOptions o = {.host = &ht};
    DevValue *r = run_ok(e, 0, NULL, &o);
    expect_f32(r, 2, (float[]){11, 22});
    assert_int_equal(h.ntaken, 2); /* send-done is not the root's operand: it ran anyway */
    expect_f32(h.taken[0], 2, (float[]){-1, -2});
    expect_f32(h.taken[1], 2, (float[]){11, 22});
    dev_value_unref(r);
    for (int i = 0; i < h.ntaken; i++)
        dev_value_unref(h.taken[i]);
    /* no value left: the feed's error, no hang */
    h.next = 1;
    h.ntaken = 0;
    run_err(e, 0, NULL, &o, IR_EINPUT, "no value left");
    for (int i = 0; i < h.ntaken; i++)
        dev_value_unref(h.taken[i]);
    /* no host transfers in this run: refused, naming the op */
    run_err(e, 0, NULL, NULL, IR_EUNSUPPORTED, "infeed talks to the host");
    /* recv between devices: refused */
    test_x(&I(e, rv)->a)->is_host_transfer = false;
    h.next = 0;
    h.ntaken = 0;
    run_err(e, 0, NULL, &o, IR_EUNSUPPORTED, "recv between devices (channel_id=2");
    for (int i = 0; i < h.ntaken; i++)
        dev_value_unref(h.taken[i]);
    dev_value_unref(h.fed[0]);
    dev_value_unref(h.fed[1]);
}

/* set-dimension-size(x, 4) on f32[6] [1..6] gives f32[<=6] holding all 6
 * with size 4; get-dimension-size reads 4; dynamic-reshape(d, 2, 2) into
 * f32[<=3,<=2] gives [[1 2] [3 4] [0 0]] with sizes (2, 2); trimmed, a
 * static f32[2,2] [[1 2] [3 4]]. A size of 7 is refused. */
static void test_dynamic_sizes(void **state)
{
    (void)state;
    int32_t e = comp("e");
    int32_t x = param(e, 0, vec(IR_F32, 6)), n = param(e, 1, scal(IR_S32));
    IrShape d6 = vec(IR_F32, 6);
    d6.dynamic = ir_alloc(M->arena, sizeof *d6.dynamic);
    d6.dynamic[0] = true;
    int32_t sd = op(e, OP_SET_DIMENSION_SIZE, d6, 2, x, n);
    int64_t *dim = ir_alloc(M->arena, sizeof *dim);
    *dim = 0;
    I(e, sd)->a.dimensions = (IrI64List){1, dim};
    int32_t g = op(e, OP_GET_DIMENSION_SIZE, scal(IR_S32), 1, sd);
    I(e, g)->a.dimensions = (IrI64List){1, dim};
    int32_t c2 = op(e, OP_CONSTANT, scal(IR_S32), 0);
    int32_t two = 2;
    I(e, c2)->a.literal = ir_alloc(M->arena, 4);
    memcpy(I(e, c2)->a.literal, &two, 4);
    I(e, c2)->a.literal_bytes = 4;
    int64_t rd[2] = {3, 2};
    IrShape r32 = shp(IR_F32, 2, rd);
    r32.dynamic = ir_alloc_array(M->arena, 2, sizeof *r32.dynamic);
    r32.dynamic[0] = r32.dynamic[1] = true;
    int32_t dr = op(e, OP_DYNAMIC_RESHAPE, r32, 3, sd, c2, c2);
    IrShape el[3] = {d6, scal(IR_S32), r32};
    C(e)->root = op(e, OP_TUPLE, tup(3, el), 3, sd, g, dr);
    IrShape s0 = scal(IR_S32);
    DevValue *a[2] = {f32v(6, (float[]){1, 2, 3, 4, 5, 6}), dev_value_new(&s0)};
    *(int32_t *)a[1]->data = 4;
    DevValue *r = run_ok(e, 2, a, NULL);
    assert_non_null(r->elems[0]->sizes);
    assert_int_equal(r->elems[0]->sizes[0], 4);
    expect_f32(r->elems[0], 6, (float[]){1, 2, 3, 4, 5, 6}); /* held at the bound */
    assert_int_equal(*(int32_t *)r->elems[1]->data, 4);
    DevValue *m = r->elems[2];
    expect_f32(m, 6, (float[]){1, 2, 3, 4, 0, 0});
    assert_int_equal(m->sizes[0], 2);
    assert_int_equal(m->sizes[1], 2);
    DevValue *t = dev_value_trimmed(m);
    assert_int_equal(t->shape.rank, 2);
    assert_true(t->shape.dims[0] == 2 && t->shape.dims[1] == 2 && !t->sizes);
    expect_f32(t, 4, (float[]){1, 2, 3, 4});
    dev_value_unref(t);
    /* a copy keeps the sizes */
    DevValue *cl = dev_value_clone(r->elems[0]);
    assert_int_equal(cl->sizes[0], 4);
    dev_value_unref(cl);
    dev_value_unref(r);
    *(int32_t *)a[1]->data = 7;
    run_err(e, 2, a, NULL, IR_EINPUT, "size 7 is outside [0, 6]");
    *(int32_t *)a[1]->data = 3;
    run_err(e, 2, a, NULL, IR_EINPUT, "3 elements cannot be reshaped into 4");
    dev_value_unref(a[0]);
    dev_value_unref(a[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fusion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collective_pairs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_member_collectives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rng_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_transfers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dynamic_sizes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
