/*
 * test_k_data.c: the data-movement kernels (device/k_data.c) against
 * values worked out by hand: constant, iota, broadcast, reshape, bitcast
 * across layouts, transpose (small, blocked, rank 3), slice with strides,
 * dynamic-slice and dynamic-update-slice with clamped starts of every
 * index type, pad with negative and interior padding, concatenate,
 * reverse, and the errors for attributes that do not fit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "attrs_test.h"
#include "device/device.h"

static IrModule *mod;

static int setup(void **state)
{
    (void)state;
    mod = ir_module_new("t");
    return mod ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(mod);
    return 0;
}

static DevValue *val(IrType t, int32_t rank, const int64_t *dims, const void *data)
{
    IrShape s = {.type = t, .rank = rank, .dims = (int64_t *)dims};
    DevValue *v = dev_value_new(&s);
    assert_non_null(v);
    if (data && v->nbytes)
        memcpy(v->data, data, (size_t)v->nbytes);
    return v;
}

static DevValue *iota_s32(int32_t rank, const int64_t *dims)
{
    DevValue *v = val(IR_S32, rank, dims, NULL);
    for (int64_t i = 0; i < dev_value_elements(v); i++)
        ((int32_t *)v->data)[i] = (int32_t)i;
    return v;
}

typedef IrStatus (*Kernel)(const DevKernelArgs *, DevValue **);

static Kernel kernel_of(IrOpcode op)
{
    switch (op) {
    case OP_CONSTANT: return dev_k_constant;
    case OP_IOTA: return dev_k_iota;
    case OP_BROADCAST: return dev_k_broadcast;
    case OP_RESHAPE: case OP_BITCAST: return dev_k_reshape;
    case OP_TRANSPOSE: return dev_k_transpose;
    case OP_SLICE: return dev_k_slice;
    case OP_DYNAMIC_SLICE: return dev_k_dynamic_slice;
    case OP_DYNAMIC_UPDATE_SLICE: return dev_k_dynamic_update_slice;
    case OP_PAD: return dev_k_pad;
    case OP_CONCATENATE: return dev_k_concatenate;
    case OP_REVERSE: return dev_k_reverse;
    default: return NULL;
    }
}

/* Run `ins` (op, shape and attributes filled by the caller) on n operands,
 * which are released. */
static IrStatus run(IrInstr *ins, int32_t n, DevValue **opnd, DevValue **out, IrDiag *d)
{
    ins->name = "k";
    ins->pos = (IrPos){2, 3};
    DevExecOptions opt = {0};
    DevKernelArgs k = {mod, NULL, ins, n, opnd, &opt, d};
    IrStatus st = kernel_of(ins->op)(&k, out);
    for (int32_t i = 0; i < n; i++)
        dev_value_unref(opnd[i]);
    return st;
}

static DevValue *run_ok(IrInstr *ins, int32_t n, DevValue **opnd)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    if (run(ins, n, opnd, &out, &d) != IR_OK)
        fail_msg("%s failed: %s", ir_op_name(ins->op), d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    assert_true(ir_shape_equal(&out->shape, &ins->shape));
    return out;
}

/* Expect an IR_EINPUT whose message contains `want`. */
static void run_err(IrInstr *ins, int32_t n, DevValue **opnd, const char *want)
{
    IrDiag d = {0};
    DevValue *out = NULL;
    assert_int_equal(run(ins, n, opnd, &out, &d), IR_EINPUT);
    assert_null(out);
    if (!d.msg || !strstr(d.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", d.msg ? d.msg : "(none)", want);
    assert_int_equal(d.pos.line, 2);
    ir_diag_clear(&d);
}

static IrI64List list(int32_t n, int64_t *v)
{
    return (IrI64List){n, v};
}

#define CHECK_S32(v, ...)                                                    \
    do {                                                                     \
        DevValue *v_ = (v);                                                  \
        const int32_t want_[] = {__VA_ARGS__};                               \
        int64_t n_ = (int64_t)(sizeof want_ / sizeof *want_);                \
        assert_int_equal(dev_value_elements(v_), n_);                         \
        for (int64_t i_ = 0; i_ < n_; i_++)                                  \
            if (((int32_t *)v_->data)[i_] != want_[i_])                     \
                fail_msg("element %d: got %d, want %d", (int)i_,             \
                         ((int32_t *)v_->data)[i_], want_[i_]);             \
        dev_value_unref(v_);                                                  \
    } while (0)

/* ---- constant, iota ---- */

static void test_constant(void **state)
{
    (void)state;
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_CONSTANT;
    int64_t d2[] = {2};
    float lit[] = {1.5f, -2.0f};
    ins.shape = (IrShape){.type = IR_F32, .rank = 1, .dims = d2};
    ins.a.literal = (uint8_t *)lit;
    ins.a.literal_bytes = sizeof lit;
    DevValue *v = run_ok(&ins, 0, NULL);
    assert_memory_equal(v->data, lit, sizeof lit);
    dev_value_unref(v);
    /* A tuple (s32[], pred[2]) takes its leaves in order from one literal. */
    uint8_t tl[6] = {7, 0, 0, 0, 1, 0};
    IrShape leaves[2] = {{.type = IR_S32}, {.type = IR_PRED, .rank = 1, .dims = d2}};
    ins.shape = (IrShape){.type = IR_TUPLE, .ntuple = 2, .tuple = leaves};
    ins.a.literal = tl;
    ins.a.literal_bytes = 6;
    DevValue *t = run_ok(&ins, 0, NULL);
    assert_int_equal(t->nelems, 2);
    assert_int_equal(((int32_t *)t->elems[0]->data)[0], 7);
    assert_int_equal(t->elems[1]->data[0], 1);
    assert_int_equal(t->elems[1]->data[1], 0);
    dev_value_unref(t);
    ins.a.literal_bytes = 5;
    run_err(&ins, 0, NULL, "shorter than its shape");
}

static void test_iota(void **state)
{
    (void)state;
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_IOTA;
    int64_t d23[] = {2, 3};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    ins.a.iota_dimension = 1;
    CHECK_S32(run_ok(&ins, 0, NULL), 0, 1, 2, 0, 1, 2);
    ins.a.iota_dimension = 0;
    CHECK_S32(run_ok(&ins, 0, NULL), 0, 0, 0, 1, 1, 1);
    int64_t d4[] = {4};
    ins.shape = (IrShape){.type = IR_F32, .rank = 1, .dims = d4};
    DevValue *f = run_ok(&ins, 0, NULL);
    float want[] = {0, 1, 2, 3};
    assert_memory_equal(f->data, want, sizeof want);
    dev_value_unref(f);
    ins.shape.type = IR_BF16;
    DevValue *b = run_ok(&ins, 0, NULL);
    uint16_t wb[] = {0x0000, 0x3f80, 0x4000, 0x4040};
    assert_memory_equal(b->data, wb, sizeof wb);
    dev_value_unref(b);
    int64_t d232[] = {2, 3, 2};
    ins.shape = (IrShape){.type = IR_U8, .rank = 3, .dims = d232};
    ins.a.iota_dimension = 1;
    DevValue *u = run_ok(&ins, 0, NULL);
    uint8_t wu[] = {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2};
    assert_memory_equal(u->data, wu, sizeof wu);
    dev_value_unref(u);
    ins.a.iota_dimension = 3;
    run_err(&ins, 0, NULL, "iota_dimension=3 out of range");
}

/* ---- broadcast ---- */

static void test_broadcast(void **state)
{
    (void)state;
    int64_t d3[] = {3}, d23[] = {2, 3}, d32[] = {3, 2}, one[] = {1}, zero[] = {0};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_BROADCAST;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    ins.a.dimensions = list(1, one);
    DevValue *o[1] = {iota_s32(1, d3)};
    CHECK_S32(run_ok(&ins, 1, o), 0, 1, 2, 0, 1, 2);
    ins.shape.dims = d32;
    ins.a.dimensions = list(1, zero);
    o[0] = iota_s32(1, d3);
    CHECK_S32(run_ok(&ins, 1, o), 0, 0, 1, 1, 2, 2);
    int32_t seven = 7;
    ins.a.dimensions = list(0, NULL);
    o[0] = val(IR_S32, 0, NULL, &seven);
    CHECK_S32(run_ok(&ins, 1, o), 7, 7, 7, 7, 7, 7);
    /* [2,3] -> [2,4,3] with dims {0,2}. */
    int64_t d243[] = {2, 4, 3}, m02[] = {0, 2};
    ins.shape = (IrShape){.type = IR_S32, .rank = 3, .dims = d243};
    ins.a.dimensions = list(2, m02);
    o[0] = iota_s32(2, d23);
    DevValue *r = run_ok(&ins, 1, o);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                assert_int_equal(((int32_t *)r->data)[(i * 4 + j) * 3 + k], i * 3 + k);
    dev_value_unref(r);
    /* Operand dim 0 (size 3) cannot map to result dim 0 (size 2). */
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    ins.a.dimensions = list(1, zero);
    o[0] = iota_s32(1, d3);
    run_err(&ins, 1, o, "operand dim 0 does not map");
}

/* ---- reshape, bitcast ---- */

static void test_reshape_bitcast(void **state)
{
    (void)state;
    int64_t d23[] = {2, 3}, d32[] = {3, 2}, d6[] = {6}, d7[] = {7};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_RESHAPE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d32};
    DevValue *o[1] = {iota_s32(2, d23)};
    CHECK_S32(run_ok(&ins, 1, o), 0, 1, 2, 3, 4, 5);
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d7};
    o[0] = iota_s32(1, d6);
    run_err(&ins, 1, o, "cannot reshape");
    /* bitcast f32[2,3]{1,0} to f32[3,2]{0,1}: the same bytes in memory, so
     * logically a transpose: r[i][j] = a[j][i]. */
    int32_t l10[] = {1, 0}, l01[] = {0, 1};
    ins.op = OP_BITCAST;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d32, .has_layout = true,
                          .minor_to_major = l01};
    o[0] = iota_s32(2, d23);
    o[0]->shape.has_layout = true;
    o[0]->shape.minor_to_major = ts_malloc(2 * sizeof(int32_t));
    memcpy(o[0]->shape.minor_to_major, l10, sizeof l10);
    CHECK_S32(run_ok(&ins, 1, o), 0, 3, 1, 4, 2, 5);
    /* Without layouts a bitcast is a reshape. */
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d32};
    o[0] = iota_s32(2, d23);
    CHECK_S32(run_ok(&ins, 1, o), 0, 1, 2, 3, 4, 5);
}

/* A bitcast reads its operand in the layout the operand instruction
 * declares, also when that operand is a copy changing the layout (the
 * copy's value is its operand's, laid out otherwise): transpose s32[2,3]
 * iota to [3,2]{0,1}, copy to {1,0}, bitcast to [6]{0} is the transposed
 * values row-major, 0 3 1 4 2 5, as a reshape of the transpose. */
static void test_bitcast_after_copy(void **state)
{
    (void)state;
    const char *txt = "HloModule t\nENTRY e {\n  p = s32[2,3]{1,0} parameter(0)\n"
                      "  t = s32[3,2]{0,1} transpose(p), dimensions={1,0}\n"
                      "  c = s32[3,2]{1,0} copy(t)\n  ROOT b = s32[6]{0} bitcast(c)\n}\n";
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("t.hlo", txt, strlen(txt), &po, &m, &d), IR_OK);
    int64_t d23[] = {2, 3};
    DevValue *a[1] = {iota_s32(2, d23)}, *r = NULL;
    DevExecOptions opt = {0};
    assert_int_equal(dev_execute(m, m->entry, 1, a, &opt, &r, &d), IR_OK);
    CHECK_S32(r, 0, 3, 1, 4, 2, 5);
    dev_value_unref(a[0]);
    ir_module_free(m);
}

/* ---- transpose ---- */

static void test_transpose(void **state)
{
    (void)state;
    int64_t d23[] = {2, 3}, d32[] = {3, 2}, p10[] = {1, 0};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_TRANSPOSE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d32};
    ins.a.dimensions = list(2, p10);
    DevValue *o[1] = {iota_s32(2, d23)};
    CHECK_S32(run_ok(&ins, 1, o), 0, 3, 1, 4, 2, 5);
    /* Large enough for several 32x32 blocks and ragged edges. */
    int64_t da[] = {67, 45}, db[] = {45, 67};
    ins.shape.dims = db;
    o[0] = iota_s32(2, da);
    DevValue *r = run_ok(&ins, 1, o);
    for (int j = 0; j < 45; j++)
        for (int i = 0; i < 67; i++)
            assert_int_equal(((int32_t *)r->data)[j * 67 + i], i * 45 + j);
    dev_value_unref(r);
    /* 4-byte elements go through 4 x 4 blocks: every pairing of widths
     * below, at and past a block and a 32-wide tile, batched too, moves
     * each f32's bits (a NaN's payload, -0) to r[b][j][i] = a[b][i][j]. */
    static const int64_t sizes[] = {1, 3, 4, 5, 32, 33, 70};
    for (int si = 0; si < 7; si++)
        for (int sj = 0; sj < 7; sj++) {
            int64_t rows = sizes[si], cols = sizes[sj], nb = si == sj ? 2 : 1;
            int64_t din[] = {nb, rows, cols}, dout[] = {nb, cols, rows}, p021[] = {0, 2, 1};
            ins.shape = (IrShape){.type = IR_F32, .rank = 3, .dims = dout};
            ins.a.dimensions = list(3, p021);
            o[0] = val(IR_F32, 3, din, NULL);
            static uint32_t a[2 * 70 * 70]; /* the operand's bits, kept: run_ok releases it */
            for (int64_t e = 0; e < nb * rows * cols; e++)
                a[e] = e % 7 == 3 ? 0x7fc12345u + (uint32_t)e : e % 7 == 5 ? 0x80000000u : (uint32_t)e * 2654435761u;
            memcpy(o[0]->data, a, (size_t)(nb * rows * cols) * sizeof *a);
            r = run_ok(&ins, 1, o);
            const uint32_t *got = (const uint32_t *)r->data;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t j = 0; j < cols; j++)
                    for (int64_t i = 0; i < rows; i++) {
                        uint32_t want = a[(b * rows + i) * cols + j], g = got[(b * cols + j) * rows + i];
                        if (g != want)
                            fail_msg("f32 transpose of [%lld,%lld,%lld]: r[%lld][%lld][%lld] = 0x%08x, expected "
                                     "0x%08x", (long long)nb, (long long)rows, (long long)cols, (long long)b,
                                     (long long)j, (long long)i, g, want);
                    }
            dev_value_unref(r);
        }
    /* Rank 3, perm {2,0,1}: r[k][i][j] = a[i][j][k] for a of [2,3,4]. */
    int64_t d234[] = {2, 3, 4}, d423[] = {4, 2, 3}, p201[] = {2, 0, 1};
    ins.shape = (IrShape){.type = IR_S32, .rank = 3, .dims = d423};
    ins.a.dimensions = list(3, p201);
    o[0] = iota_s32(3, d234);
    r = run_ok(&ins, 1, o);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                assert_int_equal(((int32_t *)r->data)[(k * 2 + i) * 3 + j], (i * 3 + j) * 4 + k);
    dev_value_unref(r);
    /* Batched 2-D swap, perm {0,2,1}, on f64 (8-byte elements). */
    int64_t d243[] = {2, 4, 3}, p021[] = {0, 2, 1};
    ins.shape = (IrShape){.type = IR_F64, .rank = 3, .dims = d243};
    ins.a.dimensions = list(3, p021);
    o[0] = val(IR_F64, 3, d234, NULL);
    for (int i = 0; i < 24; i++)
        ((double *)o[0]->data)[i] = i;
    r = run_ok(&ins, 1, o);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++)
                assert_true(((double *)r->data)[(b * 4 + k) * 3 + j] == (b * 3 + j) * 4 + k);
    dev_value_unref(r);
    /* Rank 4, perm {1,3,0,2} on [2,3,2,2]: r[j][l][i][k] = a[i][j][k][l]. */
    int64_t d4[] = {2, 3, 2, 2}, r4[] = {3, 2, 2, 2}, p4[] = {1, 3, 0, 2};
    ins.shape = (IrShape){.type = IR_S32, .rank = 4, .dims = r4};
    ins.a.dimensions = list(4, p4);
    o[0] = iota_s32(4, d4);
    r = run_ok(&ins, 1, o);
    for (int j = 0; j < 3; j++)
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 2; k++)
                    assert_int_equal(((int32_t *)r->data)[((j * 2 + l) * 2 + i) * 2 + k],
                                     ((i * 3 + j) * 2 + k) * 2 + l);
    dev_value_unref(r);
    int64_t bad[] = {0, 0};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d32};
    ins.a.dimensions = list(2, bad);
    o[0] = iota_s32(2, d23);
    run_err(&ins, 1, o, "not a permutation");
}

/* ---- slice, reverse ---- */

static void test_slice_reverse(void **state)
{
    (void)state;
    int64_t d5[] = {5}, d3[] = {3}, s0[] = {0}, l5[] = {5}, st2[] = {2};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_SLICE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d3};
    test_x(&ins.a)->slice_start = list(1, s0);
    test_x(&ins.a)->slice_limit = list(1, l5);
    test_x(&ins.a)->slice_stride = list(1, st2);
    DevValue *o[1] = {iota_s32(1, d5)};
    CHECK_S32(run_ok(&ins, 1, o), 0, 2, 4);
    /* [4,5] slice {[1:4:2], [1:5:3]} -> rows 1,3; cols 1,4. */
    int64_t d45[] = {4, 5}, d22[] = {2, 2}, ss[] = {1, 1}, ll[] = {4, 5}, sd[] = {2, 3};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d22};
    test_x(&ins.a)->slice_start = list(2, ss);
    test_x(&ins.a)->slice_limit = list(2, ll);
    test_x(&ins.a)->slice_stride = list(2, sd);
    o[0] = iota_s32(2, d45);
    CHECK_S32(run_ok(&ins, 1, o), 6, 9, 16, 19);
    /* Whole rows 1..3 without strides. */
    int64_t d25[] = {2, 5}, s10[] = {1, 0}, l35[] = {3, 5};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d25};
    test_x(&ins.a)->slice_start = list(2, s10);
    test_x(&ins.a)->slice_limit = list(2, l35);
    test_x(&ins.a)->slice_stride = list(0, NULL);
    o[0] = iota_s32(2, d45);
    CHECK_S32(run_ok(&ins, 1, o), 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    int64_t l6[] = {3, 6};
    test_x(&ins.a)->slice_limit = list(2, l6);
    o[0] = iota_s32(2, d45);
    run_err(&ins, 1, o, "does not fit");

    int64_t d23[] = {2, 3}, r1[] = {1}, r01[] = {0, 1};
    ins = (IrInstr){.a.x = &ir_no_attrs_x};
    ins.op = OP_REVERSE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    ins.a.dimensions = list(1, r1);
    o[0] = iota_s32(2, d23);
    CHECK_S32(run_ok(&ins, 1, o), 2, 1, 0, 5, 4, 3);
    ins.a.dimensions = list(2, r01);
    o[0] = iota_s32(2, d23);
    CHECK_S32(run_ok(&ins, 1, o), 5, 4, 3, 2, 1, 0);
    ins.a.dimensions = list(1, (int64_t[]){2});
    o[0] = iota_s32(2, d23);
    run_err(&ins, 1, o, "reverse dimension 2 out of range");
}

/* ---- dynamic-slice, dynamic-update-slice ---- */

static DevValue *scalar(IrType t, int64_t v)
{
    DevValue *s = val(t, 0, NULL, NULL);
    dev_store_i64(t, s->data, 0, v);
    return s;
}

static void test_dynamic_slice(void **state)
{
    (void)state;
    int64_t d5[] = {5}, d2[] = {2};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_DYNAMIC_SLICE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d2};
    test_x(&ins.a)->dynamic_slice_sizes = list(1, d2);
    /* Starts are clamped into [0, 5 - 2] = [0, 3]. */
    DevValue *o[3] = {iota_s32(1, d5), scalar(IR_S32, 7)};
    CHECK_S32(run_ok(&ins, 2, o), 3, 4);
    o[0] = iota_s32(1, d5);
    o[1] = scalar(IR_S32, -1);
    CHECK_S32(run_ok(&ins, 2, o), 0, 1);
    o[0] = iota_s32(1, d5);
    o[1] = scalar(IR_U32, 0xffffffffll); /* unsigned: huge, not -1 */
    CHECK_S32(run_ok(&ins, 2, o), 3, 4);
    o[0] = iota_s32(1, d5);
    o[1] = scalar(IR_U8, 2);
    CHECK_S32(run_ok(&ins, 2, o), 2, 3);
    o[0] = iota_s32(1, d5);
    o[1] = scalar(IR_S64, INT64_MIN);
    CHECK_S32(run_ok(&ins, 2, o), 0, 1);
    /* 2-D, s16 indices: [4,5] window 2x3 at (3, 1) -> clamped row 2. */
    int64_t d45[] = {4, 5}, d23[] = {2, 3};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    test_x(&ins.a)->dynamic_slice_sizes = list(2, d23);
    o[0] = iota_s32(2, d45);
    o[1] = scalar(IR_S16, 3);
    o[2] = scalar(IR_S16, 1);
    CHECK_S32(run_ok(&ins, 3, o), 11, 12, 13, 16, 17, 18);
    o[0] = iota_s32(2, d45);
    o[1] = scalar(IR_F32, 0);
    o[2] = scalar(IR_S32, 0);
    run_err(&ins, 3, o, "start indices must be integer scalars");
    o[0] = iota_s32(2, d45);
    o[1] = scalar(IR_S32, 0);
    run_err(&ins, 2, o, "1 start indices for a rank-2 operand");
}

static void test_dynamic_update_slice(void **state)
{
    (void)state;
    int64_t d5[] = {5}, d2[] = {2};
    int32_t nine[] = {9, 8};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_DYNAMIC_UPDATE_SLICE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d5};
    DevValue *o[4] = {val(IR_S32, 1, d5, NULL), val(IR_S32, 1, d2, nine), scalar(IR_S32, 4)};
    CHECK_S32(run_ok(&ins, 3, o), 0, 0, 0, 9, 8); /* start 4 clamped to 3 */
    o[0] = val(IR_S32, 1, d5, NULL);
    o[1] = val(IR_S32, 1, d2, nine);
    o[2] = scalar(IR_S64, -3);
    CHECK_S32(run_ok(&ins, 3, o), 9, 8, 0, 0, 0);
    o[0] = val(IR_S32, 1, d5, NULL);
    o[1] = val(IR_S32, 1, d2, nine);
    o[2] = scalar(IR_U64, 1);
    CHECK_S32(run_ok(&ins, 3, o), 0, 9, 8, 0, 0);
    /* 2-D: a [3,3] of zeros, update [2,2] {1,2,3,4} at (1, 5) -> (1, 1). */
    int64_t d33[] = {3, 3}, d22[] = {2, 2};
    int32_t u[] = {1, 2, 3, 4};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d33};
    o[0] = val(IR_S32, 2, d33, NULL);
    o[1] = val(IR_S32, 2, d22, u);
    o[2] = scalar(IR_S32, 1);
    o[3] = scalar(IR_S32, 5);
    CHECK_S32(run_ok(&ins, 4, o), 0, 0, 0, 0, 1, 2, 0, 3, 4);
    /* The operand is not modified. */
    DevValue *base = iota_s32(1, d5);
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d5};
    o[0] = dev_value_ref(base);
    o[1] = val(IR_S32, 1, d2, nine);
    o[2] = scalar(IR_S32, 0);
    CHECK_S32(run_ok(&ins, 3, o), 9, 8, 2, 3, 4);
    CHECK_S32(base, 0, 1, 2, 3, 4);
    int64_t d6[] = {6};
    int32_t six[6] = {0};
    o[0] = val(IR_S32, 1, d5, NULL);
    o[1] = val(IR_S32, 1, d6, six);
    o[2] = scalar(IR_S32, 0);
    run_err(&ins, 3, o, "larger than the operand");
}

/* ---- pad ---- */

static void test_pad(void **state)
{
    (void)state;
    int64_t d3[] = {3}, d5[] = {5}, lo[] = {-1}, hi[] = {1}, in[] = {1};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_PAD;
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d5};
    test_x(&ins.a)->pad_lo = list(1, lo);
    test_x(&ins.a)->pad_hi = list(1, hi);
    test_x(&ins.a)->pad_interior = list(1, in);
    int32_t v123[] = {1, 2, 3};
    /* Interior 1 gives 1,0,2,0,3; lo -1 cuts the 1; hi 1 appends a 0. */
    DevValue *o[2] = {val(IR_S32, 1, d3, v123), scalar(IR_S32, 0)};
    CHECK_S32(run_ok(&ins, 2, o), 0, 2, 0, 3, 0);
    /* [2,2] padding=1_0_0x0_1_1 with 9 -> [3,4]. */
    int64_t d22[] = {2, 2}, d34[] = {3, 4}, l2[] = {1, 0}, h2[] = {0, 1}, i2[] = {0, 1};
    int32_t v4[] = {1, 2, 3, 4};
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d34};
    test_x(&ins.a)->pad_lo = list(2, l2);
    test_x(&ins.a)->pad_hi = list(2, h2);
    test_x(&ins.a)->pad_interior = list(2, i2);
    o[0] = val(IR_S32, 2, d22, v4);
    o[1] = scalar(IR_S32, 9);
    CHECK_S32(run_ok(&ins, 2, o), 9, 9, 9, 9, 1, 9, 2, 9, 3, 9, 4, 9);
    /* Negative on both sides: {1,2,3} padding=-1_-1 -> {2}. */
    int64_t d1[] = {1}, m1[] = {-1};
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d1};
    test_x(&ins.a)->pad_lo = list(1, m1);
    test_x(&ins.a)->pad_hi = list(1, m1);
    test_x(&ins.a)->pad_interior = list(0, NULL);
    o[0] = val(IR_S32, 1, d3, v123);
    o[1] = scalar(IR_S32, 0);
    CHECK_S32(run_ok(&ins, 2, o), 2);
    /* Everything cut: padding=-2_-1 -> s32[0]. */
    int64_t d0[] = {0}, m2[] = {-2};
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d0};
    test_x(&ins.a)->pad_lo = list(1, m2);
    o[0] = val(IR_S32, 1, d3, v123);
    o[1] = scalar(IR_S32, 0);
    DevValue *e = run_ok(&ins, 2, o);
    assert_int_equal(dev_value_elements(e), 0);
    dev_value_unref(e);
    /* Padding an empty array: f32[0] padding=2_1_3 -> three pad values. */
    int64_t p2[] = {2}, p1[] = {1}, p3[] = {3};
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d3};
    test_x(&ins.a)->pad_lo = list(1, p2);
    test_x(&ins.a)->pad_hi = list(1, p1);
    test_x(&ins.a)->pad_interior = list(1, p3);
    o[0] = val(IR_S32, 1, d0, NULL);
    o[1] = scalar(IR_S32, 5);
    CHECK_S32(run_ok(&ins, 2, o), 5, 5, 5);
    /* Negative lo cutting into interior padding: {1,2} interior 2 gives
     * 1,p,p,2; lo -2 leaves p,2. */
    int64_t d2[] = {2}, z[] = {0}, i3[] = {2};
    int32_t v12[] = {1, 2};
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d2};
    test_x(&ins.a)->pad_lo = list(1, m2);
    test_x(&ins.a)->pad_hi = list(1, z);
    test_x(&ins.a)->pad_interior = list(1, i3);
    o[0] = val(IR_S32, 1, d2, v12);
    o[1] = scalar(IR_S32, 7);
    CHECK_S32(run_ok(&ins, 2, o), 7, 2);
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d5};
    o[0] = val(IR_S32, 1, d2, v12);
    o[1] = scalar(IR_S32, 7);
    run_err(&ins, 2, o, "padding dim 0 gives 2, result has 5");
}

/* ---- concatenate ---- */

static void test_concatenate(void **state)
{
    (void)state;
    int64_t d21[] = {2, 1}, d22[] = {2, 2}, d23[] = {2, 3}, one[] = {1}, zero[] = {0};
    int32_t a[] = {1, 2}, b[] = {3, 4, 5, 6};
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_CONCATENATE;
    ins.shape = (IrShape){.type = IR_S32, .rank = 2, .dims = d23};
    ins.a.dimensions = list(1, one);
    DevValue *o[3] = {val(IR_S32, 2, d21, a), val(IR_S32, 2, d22, b)};
    CHECK_S32(run_ok(&ins, 2, o), 1, 3, 4, 2, 5, 6);
    int64_t d2[] = {2}, d0[] = {0}, d3[] = {3}, d5[] = {5};
    int32_t c[] = {7, 8, 9};
    ins.shape = (IrShape){.type = IR_S32, .rank = 1, .dims = d5};
    ins.a.dimensions = list(1, zero);
    o[0] = val(IR_S32, 1, d2, a);
    o[1] = val(IR_S32, 1, d0, NULL);
    o[2] = val(IR_S32, 1, d3, c);
    CHECK_S32(run_ok(&ins, 3, o), 1, 2, 7, 8, 9);
    o[0] = val(IR_S32, 1, d2, a);
    o[1] = val(IR_S32, 1, d2, a);
    run_err(&ins, 2, o, "sum to 4, result has 5");
    o[0] = val(IR_S32, 1, d2, a);
    o[1] = val(IR_F32, 1, d3, c);
    run_err(&ins, 2, o, "does not match the result");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant),
        cmocka_unit_test(test_iota),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_reshape_bitcast),
        cmocka_unit_test(test_bitcast_after_copy),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_slice_reverse),
        cmocka_unit_test(test_dynamic_slice),
        cmocka_unit_test(test_dynamic_update_slice),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_concatenate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
