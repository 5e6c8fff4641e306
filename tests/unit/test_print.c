/*
 * test_print.c: the HLO printer (ir/print.c).
 *
 *   literals   every element type, special floats, nesting, empty arrays,
 *              tuples (expected texts computed independently: Python's
 *              '%.9g' / '%.17g' of the same values)
 *   golden     one instruction line per attribute kind, over a module built
 *              by hand; whole-module text (header attributes, callees
 *              before callers, signatures, topological order, names that
 *              need XLA's '%')
 *   round trip hand-written HLO modules: parse, print, parse, print; the two
 *              printed texts are identical and the first equals the
 *              expected golden text; printed literals of every type read
 *              back to the same bytes
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attrs_test.h"
#include "ir/ir.h"

/* ------------------------------------------------------------------ */
/* a tiny module builder (as in test_infer.c)                          */
/* ------------------------------------------------------------------ */

static IrModule *M;
static IrComputation *C;
static int32_t nparams;

static int setup(void **state)
{
    (void)state;
    M = ir_module_new("m");
    assert_non_null(M);
    int32_t ci = ir_add_computation(M, "main");
    M->entry = ci;
    C = M->comp[ci];
    C->is_entry = true;
    nparams = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ir_module_free(M);
    M = NULL;
    return 0;
}

static IrShape parse_shape(const char **p)
{
    IrShape s;
    while (**p == ' ')
        (*p)++;
    if (**p == '(') {
        IrShape el[16];
        int32_t n = 0;
        (*p)++;
        while (**p != ')') {
            el[n++] = parse_shape(p);
            while (**p == ',' || **p == ' ')
                (*p)++;
        }
        (*p)++;
        assert_int_equal(ir_shape_make_tuple(M->arena, &s, n, el), IR_OK);
        return s;
    }
    const char *b = *p;
    while (**p != '[')
        (*p)++;
    IrType t = ir_type_from_name(b, (size_t)(*p - b));
    assert_int_not_equal(t, IR_INVALID);
    (*p)++;
    int64_t dims[16];
    int32_t rank = 0;
    while (**p != ']') {
        dims[rank++] = strtoll(*p, (char **)p, 10);
        if (**p == ',')
            (*p)++;
    }
    (*p)++;
    if (t == IR_TOKEN) {
        memset(&s, 0, sizeof s);
        s.type = IR_TOKEN;
        return s;
    }
    assert_int_equal(ir_shape_make(M->arena, &s, t, rank, dims), IR_OK);
    return s;
}

static IrShape S(const char *text)
{
    return parse_shape(&text);
}

static IrI64List L(const char *csv)
{
    IrI64List l = {0, NULL};
    l.v = ir_alloc_array(M->arena, 16, sizeof(int64_t));
    while (*csv) {
        char *end;
        l.v[l.n++] = strtoll(csv, &end, 10);
        csv = *end == ',' ? end + 1 : end;
    }
    return l;
}

static int32_t add_named(IrComputation *c, IrOpcode op, const char *shape, const char *name, int n,
                         const int32_t *ops)
{
    IrShape s = S(shape);
    int32_t i = ir_add_simple(M, c, op, &s, n, ops, name);
    assert_true(i >= 0);
    return i;
}

static int32_t param_in(IrComputation *c, int64_t num, const char *shape, const char *name)
{
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_PARAMETER;
    ins.name = ir_unique_name(M, name);
    ins.shape = S(shape);
    ins.a.parameter_number = num;
    int32_t i = ir_add_instr(M, c, &ins);
    assert_true(i >= 0);
    return i;
}

static int32_t P(const char *shape, const char *name)
{
    return param_in(C, nparams++, shape, name);
}

static int32_t OP(IrOpcode op, const char *shape, const char *name, int n, ...)
{
    int32_t ops[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        ops[i] = va_arg(ap, int32_t);
    va_end(ap);
    return add_named(C, op, shape, name, n, ops);
}

static IrInstr *I(int32_t i)
{
    return &C->instr[i];
}

static void call(int32_t i, int32_t comp)
{
    IrInstr *ins = I(i);
    int32_t *c = ir_alloc_array(M->arena, (size_t)ins->ncalled + 1, sizeof *c);
    for (int32_t k = 0; k < ins->ncalled; k++)
        c[k] = ins->called[k];
    c[ins->ncalled] = comp;
    ins->called = c;
    ins->ncalled++;
}

/* A computation `name` (lhs: T[], rhs: T[]) -> T[] returning op(lhs, rhs). */
static int32_t binary_comp(const char *name, IrOpcode op, const char *type)
{
    int32_t ci = ir_add_computation(M, name);
    IrComputation *c = M->comp[ci];
    char sh[16];
    snprintf(sh, sizeof sh, "%s[]", type);
    int32_t ps[2] = {param_in(c, 0, sh, "lhs"), param_in(c, 1, sh, "rhs")};
    c->root = add_named(c, op, op == OP_COMPARE ? "pred[]" : sh, NULL, 2, ps);
    if (op == OP_COMPARE)
        c->instr[c->root].a.direction = CMP_GT;
    return ci;
}

static void expect_line(int32_t i, const char *want)
{
    char *got = ir_print_instr(M, C, I(i));
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("printed\n  %s\nexpected\n  %s", got, want);
    ts_free(got);
}

static void expect_text(char *got, const char *want)
{
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("printed\n%s\nexpected\n%s", got, want);
    ts_free(got);
}

/* ------------------------------------------------------------------ */
/* literals                                                            */
/* ------------------------------------------------------------------ */

static void expect_literal(const char *shape, const void *data, const char *want)
{
    IrShape s = S(shape);
    expect_text(ir_literal_str(&s, data), want);
}

static void test_literal_ints(void **state)
{
    (void)state;
    const uint8_t pr[3] = {1, 0, 1};
    expect_literal("pred[3]", pr, "{true, false, true}");
    const uint8_t pf[1] = {0};
    expect_literal("pred[]", pf, "false");
    const int8_t s8[2] = {-128, 127};
    expect_literal("s8[2]", s8, "{-128, 127}");
    const int16_t s16[1] = {-32768};
    expect_literal("s16[1]", s16, "{-32768}");
    const int32_t s32[6] = {1, 2, 3, 4, 5, 6};
    expect_literal("s32[2,3]", s32, "{ {1, 2, 3}, {4, 5, 6} }");
    expect_literal("s32[3,2]", s32, "{ {1, 2}, {3, 4}, {5, 6} }");
    expect_literal("s32[2,1,3]", s32, "{ { {1, 2, 3} }, { {4, 5, 6} } }");
    const int64_t s64[2] = {INT64_MIN, INT64_MAX};
    expect_literal("s64[2]", s64, "{-9223372036854775808, 9223372036854775807}");
    const uint8_t u8[2] = {0, 255};
    expect_literal("u8[2]", u8, "{0, 255}");
    const uint16_t u16[1] = {65535};
    expect_literal("u16[1]", u16, "{65535}");
    const uint32_t u32[1] = {4294967295u};
    expect_literal("u32[1]", u32, "{4294967295}");
    const uint64_t u64[1] = {UINT64_MAX};
    expect_literal("u64[1]", u64, "{18446744073709551615}");
    const int32_t scalar = -7;
    expect_literal("s32[]", &scalar, "-7");
}

static void test_literal_floats(void **state)
{
    (void)state;
    /* '%.9g' of the f32 values (checked with Python's struct + '%.9g') */
    const float f32[8] = {1.0f, 0.1f, -2.5f, INFINITY, -INFINITY, NAN, 1.40129846e-45f,
                          3.40282347e+38f};
    expect_literal("f32[8]", f32,
                   "{1, 0.100000001, -2.5, inf, -inf, nan, 1.40129846e-45, 3.40282347e+38}");
    const double f64[4] = {0.1, 1e300, -0.0, -INFINITY};
    expect_literal("f64[4]", f64, "{0.10000000000000001, 1.0000000000000001e+300, -0, -inf}");
    /* f16 bits: 1, 0.333251953125, smallest subnormal 2^-24, 65504, inf, -inf, nan */
    const uint16_t f16[7] = {0x3c00, 0x3555, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x7e00};
    expect_literal("f16[7]", f16, "{1, 0.333251953, 5.96046448e-08, 65504, inf, -inf, nan}");
    /* bf16 bits: 1, 3.140625, smallest subnormal 2^-133, -123.5, -inf, nan */
    const uint16_t bf16[6] = {0x3f80, 0x4049, 0x0001, 0xc2f7, 0xff80, 0x7fc0};
    expect_literal("bf16[6]", bf16, "{1, 3.140625, 9.18354962e-41, -123.5, -inf, nan}");
    const float c64[4] = {1.0f, -2.0f, 0.5f, INFINITY};
    expect_literal("c64[2]", c64, "{(1, -2), (0.5, inf)}");
    const double c128[2] = {0.25, -NAN};
    expect_literal("c128[]", c128, "(0.25, -nan)"); /* XLA keeps the sign of a NaN: -nan */
    const float one = 1.5f;
    expect_literal("f32[]", &one, "1.5");
}

static void test_literal_shapes(void **state)
{
    (void)state;
    expect_literal("f32[0]", "", "{}");
    expect_literal("f32[2,0]", "", "{ {}, {} }");
    expect_literal("f32[0,2]", "", "{}");
    /* a tuple: leaves depth first */
    struct {
        float a[2];
        int32_t b;
        uint8_t c;
    } __attribute__((packed)) t = {{1.0f, 2.0f}, 3, 1};
    expect_literal("(f32[2], (s32[], pred[]))", &t, "({1, 2}, (3, true))");
    IrShape s = S("f32[2]");
    expect_text(ir_literal_str(&s, NULL), "{...}");
}

/* ------------------------------------------------------------------ */
/* instruction lines                                                   */
/* ------------------------------------------------------------------ */

static void test_basic_lines(void **state)
{
    (void)state;
    int32_t x = P("f32[4,8]", "x"), y = P("f32[4,8]", "y"), i = P("s32[]", "i");
    expect_line(x, "x = f32[4,8] parameter(0)");
    int32_t a = OP(OP_ADD, "f32[4,8]", "add", 2, x, y);
    expect_line(a, "add = f32[4,8] add(x, y)");
    /* layouts print as stored */
    I(a)->shape.has_layout = true;
    I(a)->shape.minor_to_major = ir_alloc_array(M->arena, 2, sizeof(int32_t));
    I(a)->shape.minor_to_major[0] = 1;
    I(a)->shape.minor_to_major[1] = 0;
    expect_line(a, "add = f32[4,8]{1,0} add(x, y)");
    C->root = a;
    expect_line(a, "ROOT add = f32[4,8]{1,0} add(x, y)");
    int32_t c = OP(OP_COMPARE, "pred[4,8]", "lt", 2, x, y);
    I(c)->a.direction = CMP_LT;
    expect_line(c, "lt = pred[4,8] compare(x, y), direction=LT");
    I(c)->a.cmp_type = CMPT_TOTALORDER;
    expect_line(c, "lt = pred[4,8] compare(x, y), direction=LT, type=TOTALORDER");
    int32_t k = OP(OP_CONSTANT, "s32[2,2]", "k", 0);
    int32_t kv[4] = {1, 2, 3, 4};
    I(k)->a.literal = ir_alloc(M->arena, sizeof kv);
    memcpy(I(k)->a.literal, kv, sizeof kv);
    I(k)->a.literal_bytes = sizeof kv;
    expect_line(k, "k = s32[2,2] constant({ {1, 2}, {3, 4} })");
    int32_t io = OP(OP_IOTA, "s32[4,8]", "iota", 0);
    I(io)->a.iota_dimension = 1;
    expect_line(io, "iota = s32[4,8] iota(), iota_dimension=1");
    int32_t t = OP(OP_TUPLE, "(f32[4,8], s32[])", "t", 2, x, i);
    expect_line(t, "t = (f32[4,8], s32[]) tuple(x, i)");
    int32_t g = OP(OP_GET_TUPLE_ELEMENT, "s32[]", "g", 1, t);
    I(g)->a.tuple_index = 1;
    expect_line(g, "g = s32[] get-tuple-element(t), index=1");
    int32_t pid = OP(OP_PARTITION_ID, "u32[]", "pid", 0);
    expect_line(pid, "pid = u32[] partition-id()");
    int32_t rp = OP(OP_REDUCE_PRECISION, "f32[4,8]", "rp", 1, x);
    test_x(&I(rp)->a)->exponent_bits = 5;
    test_x(&I(rp)->a)->mantissa_bits = 10;
    expect_line(rp, "rp = f32[4,8] reduce-precision(x), exponent_bits=5, mantissa_bits=10");
    /* names that cannot be read back bare get XLA's % */
    int32_t odd = OP(OP_NEGATE, "f32[4,8]", "f32", 1, x);
    expect_line(odd, "%f32 = f32[4,8] negate(x)");
    int32_t use = OP(OP_NEGATE, "f32[4,8]", "n", 1, odd);
    expect_line(use, "n = f32[4,8] negate(%f32)");
}

static void test_data_movement_lines(void **state)
{
    (void)state;
    int32_t x = P("f32[10,8]", "x"), v = P("f32[]", "v"), i = P("s32[]", "i"), s = P("f32[3]", "s");
    int32_t b = OP(OP_BROADCAST, "f32[2,3]", "b", 1, s);
    I(b)->a.dimensions = L("1");
    expect_line(b, "b = f32[2,3] broadcast(s), dimensions={1}");
    int32_t bs = OP(OP_BROADCAST, "f32[2,3]", "bs", 1, v);
    expect_line(bs, "bs = f32[2,3] broadcast(v), dimensions={}");
    int32_t t = OP(OP_TRANSPOSE, "f32[8,10]", "t", 1, x);
    I(t)->a.dimensions = L("1,0");
    expect_line(t, "t = f32[8,10] transpose(x), dimensions={1,0}");
    int32_t sl = OP(OP_SLICE, "f32[4,8]", "sl", 1, x);
    test_x(&I(sl)->a)->slice_start = L("0,0");
    test_x(&I(sl)->a)->slice_limit = L("4,8");
    test_x(&I(sl)->a)->slice_stride = L("1,1");
    expect_line(sl, "sl = f32[4,8] slice(x), slice={[0:4], [0:8]}");
    test_x(&I(sl)->a)->slice_stride = L("2,1");
    expect_line(sl, "sl = f32[4,8] slice(x), slice={[0:4:2], [0:8:1]}");
    int32_t p = OP(OP_PAD, "f32[12,8]", "p", 2, x, v);
    test_x(&I(p)->a)->pad_lo = L("1,0");
    test_x(&I(p)->a)->pad_hi = L("1,0");
    test_x(&I(p)->a)->pad_interior = L("0,0");
    expect_line(p, "p = f32[12,8] pad(x, v), padding=1_1x0_0");
    test_x(&I(p)->a)->pad_lo = L("0,-1");
    test_x(&I(p)->a)->pad_interior = L("0,1");
    expect_line(p, "p = f32[12,8] pad(x, v), padding=0_1_0x-1_0_1");
    int32_t ds = OP(OP_DYNAMIC_SLICE, "f32[2,8]", "ds", 3, x, i, i);
    test_x(&I(ds)->a)->dynamic_slice_sizes = L("2,8");
    expect_line(ds, "ds = f32[2,8] dynamic-slice(x, i, i), dynamic_slice_sizes={2,8}");
    int32_t c = OP(OP_CONCATENATE, "f32[20,8]", "c", 2, x, x);
    I(c)->a.dimensions = L("0");
    expect_line(c, "c = f32[20,8] concatenate(x, x), dimensions={0}");
    int32_t r = OP(OP_REVERSE, "f32[10,8]", "r", 1, x);
    I(r)->a.dimensions = L("0,1");
    expect_line(r, "r = f32[10,8] reverse(x), dimensions={0,1}");
    int32_t rs = OP(OP_RESHAPE, "f32[80]", "rs", 1, x);
    expect_line(rs, "rs = f32[80] reshape(x)");
}

static void test_contraction_lines(void **state)
{
    (void)state;
    int32_t a = P("f32[2,3,4]", "a"), b = P("f32[2,4,5]", "b"), in = P("f32[1,5,5,2]", "in"),
            k = P("f32[3,3,2,4]", "k");
    int32_t d = OP(OP_DOT, "f32[2,3,5]", "d", 2, a, b);
    I(d)->a.dot.lhs_batch = L("0");
    I(d)->a.dot.rhs_batch = L("0");
    I(d)->a.dot.lhs_contracting = L("2");
    I(d)->a.dot.rhs_contracting = L("1");
    expect_line(d, "d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                   "rhs_batch_dims={0}, rhs_contracting_dims={1}");
    I(d)->a.precision_config = "{HIGH,DEFAULT}";
    expect_line(d, "d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                   "rhs_batch_dims={0}, rhs_contracting_dims={1}, "
                   "operand_precision={HIGH,DEFAULT}");
    int32_t c = OP(OP_CONVOLUTION, "f32[1,5,5,4]", "conv", 2, in, k);
    IrConvDnums *cd = &test_x(&I(c)->a)->conv;
    cd->present = true;
    cd->nspatial = 2;
    cd->in_batch = 0, cd->in_feature = 3, cd->k_in_feature = 2, cd->k_out_feature = 3;
    cd->out_batch = 0, cd->out_feature = 3;
    cd->in_spatial = L("1,2").v;
    cd->k_spatial = L("0,1").v;
    cd->out_spatial = L("1,2").v;
    IrWindow *w = &test_x(&I(c)->a)->window;
    w->rank = 2;
    w->dim = ir_alloc_array(M->arena, 2, sizeof(IrWindowDim));
    for (int q = 0; q < 2; q++)
        w->dim[q] = (IrWindowDim){.size = 3, .stride = 1, .pad_lo = 1, .pad_hi = 1,
                                  .lhs_dilate = 1, .rhs_dilate = 1};
    expect_line(c, "conv = f32[1,5,5,4] convolution(in, k), window={size=3x3 pad=1_1x1_1}, "
                   "dim_labels=b01f_01io->b01f");
    w->dim[0].stride = 2;
    w->dim[1].lhs_dilate = 2;
    w->dim[0].rhs_dilate = 3;
    w->dim[1].reversal = true;
    test_x(&I(c)->a)->feature_group_count = 2;
    test_x(&I(c)->a)->batch_group_count = 1;
    expect_line(c, "conv = f32[1,5,5,4] convolution(in, k), window={size=3x3 stride=2x1 "
                   "pad=1_1x1_1 lhs_dilate=1x2 rhs_dilate=3x1 rhs_reversal=0x1}, "
                   "dim_labels=b01f_01io->b01f, feature_group_count=2");
    /* dim_labels of another arrangement: input bf01, kernel oi01, output bf01 */
    cd->in_batch = 0, cd->in_feature = 1, cd->k_in_feature = 1, cd->k_out_feature = 0;
    cd->out_batch = 0, cd->out_feature = 1;
    cd->in_spatial = L("2,3").v;
    cd->k_spatial = L("2,3").v;
    cd->out_spatial = L("2,3").v;
    test_x(&I(c)->a)->feature_group_count = 1;
    w->dim[0] = w->dim[1] = (IrWindowDim){.size = 3, .stride = 1, .lhs_dilate = 1,
                                          .rhs_dilate = 1};
    expect_line(c, "conv = f32[1,5,5,4] convolution(in, k), window={size=3x3}, "
                   "dim_labels=bf01_oi01->bf01");
}

static void test_called_lines(void **state)
{
    (void)state;
    int32_t add = binary_comp("add", OP_ADD, "f32");
    int32_t gt = binary_comp("gt", OP_COMPARE, "f32");
    int32_t x = P("f32[4,8]", "x"), z = P("f32[]", "z"), pr = P("pred[]", "p"),
            ix = P("s32[3,1]", "ix"), u = P("f32[3,8]", "u"), s = P("s32[]", "s");
    int32_t r = OP(OP_REDUCE, "f32[4]", "r", 2, x, z);
    I(r)->a.dimensions = L("1");
    call(r, add);
    expect_line(r, "r = f32[4] reduce(x, z), dimensions={1}, to_apply=add");
    int32_t so = OP(OP_SORT, "f32[4,8]", "so", 1, x);
    I(so)->a.dimensions = L("1");
    test_x(&I(so)->a)->is_stable = true;
    call(so, gt);
    expect_line(so, "so = f32[4,8] sort(x), dimensions={1}, is_stable=true, to_apply=gt");
    int32_t w = OP(OP_WHILE, "f32[4,8]", "w", 1, x);
    call(w, gt);
    call(w, add);
    expect_line(w, "w = f32[4,8] while(x), condition=gt, body=add");
    int32_t k = OP(OP_CONDITIONAL, "f32[]", "k", 3, pr, z, z);
    call(k, add);
    call(k, gt);
    expect_line(k, "k = f32[] conditional(p, z, z), true_computation=add, false_computation=gt");
    int32_t kb = OP(OP_CONDITIONAL, "f32[]", "kb", 3, s, z, z);
    call(kb, add);
    call(kb, gt);
    expect_line(kb, "kb = f32[] conditional(s, z, z), branch_computations={add, gt}");
    int32_t ss = OP(OP_SELECT_AND_SCATTER, "f32[4,8]", "ss", 3, x, x, z);
    IrWindow *win = &test_x(&I(ss)->a)->window;
    win->rank = 2;
    win->dim = ir_alloc_array(M->arena, 2, sizeof(IrWindowDim));
    win->dim[0] = win->dim[1] = (IrWindowDim){.size = 1};
    call(ss, gt);
    call(ss, add);
    expect_line(ss, "ss = f32[4,8] select-and-scatter(x, x, z), window={size=1x1}, select=gt, "
                    "scatter=add");
    int32_t g = OP(OP_GATHER, "f32[3,8]", "g", 2, x, ix);
    IrGatherDnums *gd = &test_x(&I(g)->a)->gather;
    gd->offset_dims = L("1");
    gd->collapsed_slice_dims = L("0");
    gd->start_index_map = L("0");
    gd->index_vector_dim = 1;
    test_x(&I(g)->a)->slice_sizes = L("1,8");
    test_x(&I(g)->a)->indices_are_sorted = true;
    expect_line(g, "g = f32[3,8] gather(x, ix), offset_dims={1}, collapsed_slice_dims={0}, "
                   "start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}, "
                   "indices_are_sorted=true");
    gd->operand_batching_dims = L("1");
    gd->start_indices_batching_dims = L("0");
    expect_line(g, "g = f32[3,8] gather(x, ix), offset_dims={1}, collapsed_slice_dims={0}, "
                   "start_index_map={0}, operand_batching_dims={1}, "
                   "start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,8}, "
                   "indices_are_sorted=true");
    int32_t sc = OP(OP_SCATTER, "f32[4,8]", "sc", 3, x, ix, u);
    IrScatterDnums *sd = &test_x(&I(sc)->a)->scatter;
    sd->update_window_dims = L("1");
    sd->inserted_window_dims = L("0");
    sd->scatter_dims_to_operand_dims = L("0");
    sd->index_vector_dim = 1;
    test_x(&I(sc)->a)->unique_indices = true;
    call(sc, add);
    expect_line(sc, "sc = f32[4,8] scatter(x, ix, u), update_window_dims={1}, "
                    "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                    "index_vector_dim=1, unique_indices=true, to_apply=add");
    int32_t cl = OP(OP_CALL, "f32[]", "cl", 2, z, z);
    call(cl, add);
    expect_line(cl, "cl = f32[] call(z, z), to_apply=add");
    int32_t mp = OP(OP_MAP, "f32[4,8]", "mp", 2, x, x);
    call(mp, add);
    I(mp)->a.dimensions = L("0,1");
    I(mp)->a.has_dimensions = true;
    expect_line(mp, "mp = f32[4,8] map(x, x), dimensions={0,1}, to_apply=add");
}

static void set_groups(int32_t i, int n, int size)
{
    IrReplicaGroups *g = &test_x(&I(i)->a)->replica_groups;
    g->present = true;
    g->ngroups = n;
    g->group_size = ir_alloc_array(M->arena, (size_t)n, sizeof(int32_t));
    g->groups = ir_alloc_array(M->arena, (size_t)n, sizeof(int64_t *));
    for (int k = 0; k < n; k++) {
        g->group_size[k] = size;
        g->groups[k] = ir_alloc_array(M->arena, (size_t)size, sizeof(int64_t));
        for (int j = 0; j < size; j++)
            g->groups[k][j] = k * size + j;
    }
}

static void test_collective_lines(void **state)
{
    (void)state;
    int32_t add = binary_comp("add", OP_ADD, "f32");
    int32_t x = P("f32[8]", "x");
    int32_t ar = OP(OP_ALL_REDUCE, "f32[8]", "ar", 1, x);
    call(ar, add);
    expect_line(ar, "ar = f32[8] all-reduce(x), replica_groups={}, to_apply=add");
    set_groups(ar, 2, 2);
    I(ar)->a.channel_id = 3;
    I(ar)->a.use_global_device_ids = true;
    expect_line(ar, "ar = f32[8] all-reduce(x), channel_id=3, replica_groups={{0,1},{2,3}}, "
                    "use_global_device_ids=true, to_apply=add");
    int32_t ag = OP(OP_ALL_GATHER, "f32[32]", "ag", 1, x);
    set_groups(ag, 1, 4);
    I(ag)->a.dimensions = L("0");
    expect_line(ag, "ag = f32[32] all-gather(x), replica_groups={{0,1,2,3}}, dimensions={0}");
    /* the iota form prints as it was written */
    IrReplicaGroups *g = &test_x(&I(ag)->a)->replica_groups;
    g->iota = true;
    g->iota_shape = L("2,2");
    g->iota_reshape = L("2,2");
    g->iota_perm = ir_alloc_array(M->arena, 2, sizeof(int32_t));
    g->iota_perm[0] = 1;
    g->iota_perm[1] = 0;
    g->niota_perm = 2;
    expect_line(ag, "ag = f32[32] all-gather(x), replica_groups=[2,2]<=[2,2]T(1,0), "
                    "dimensions={0}");
    g->niota_perm = 0;
    g->iota_reshape = L("4");
    expect_line(ag, "ag = f32[32] all-gather(x), replica_groups=[2,2]<=[4], dimensions={0}");
    int32_t rs = OP(OP_REDUCE_SCATTER, "f32[4]", "rs", 1, x);
    set_groups(rs, 1, 2);
    I(rs)->a.dimensions = L("0");
    I(rs)->a.channel_id = 1;
    I(rs)->a.use_global_device_ids = true;
    call(rs, add);
    expect_line(rs, "rs = f32[4] reduce-scatter(x), channel_id=1, replica_groups={{0,1}}, "
                    "use_global_device_ids=true, dimensions={0}, to_apply=add");
    int32_t a2a = OP(OP_ALL_TO_ALL, "f32[8]", "a2a", 1, x);
    set_groups(a2a, 1, 2);
    I(a2a)->a.dimensions = L("0");
    expect_line(a2a, "a2a = f32[8] all-to-all(x), replica_groups={{0,1}}, dimensions={0}");
    int32_t cp = OP(OP_COLLECTIVE_PERMUTE, "f32[8]", "cp", 1, x);
    I(cp)->a.channel_id = 2;
    test_x(&I(cp)->a)->source_target_pairs = L("0,1,1,0");
    expect_line(cp, "cp = f32[8] collective-permute(x), channel_id=2, "
                    "source_target_pairs={{0,1},{1,0}}");
}

static void test_misc_lines(void **state)
{
    (void)state;
    int32_t x = P("f32[8]", "x"), tk = P("token[]", "tk"), a = P("f32[]", "a"),
            c = P("c64[8]", "c"), st = P("u64[2]", "st");
    int32_t cc = OP(OP_CUSTOM_CALL, "f32[8]", "cc", 1, x);
    test_x(&I(cc)->a)->custom_call_target = "my \"fn\"\\x";
    test_x(&I(cc)->a)->custom_call_has_side_effect = true;
    test_x(&I(cc)->a)->api_version = "API_VERSION_STATUS_RETURNING";
    test_x(&I(cc)->a)->backend_config = "\"cfg\"";
    expect_line(cc, "cc = f32[8] custom-call(x), custom_call_target=\"my \\\"fn\\\"\\\\x\", "
                    "custom_call_has_side_effect=true, api_version=API_VERSION_STATUS_RETURNING, "
                    "backend_config=\"cfg\"");
    test_x(&I(cc)->a)->noperand_layouts = 1;
    IrShape ol = S("f32[8]");
    ol.has_layout = true;
    ol.minor_to_major = ir_alloc_array(M->arena, 1, sizeof(int32_t));
    test_x(&I(cc)->a)->operand_layout_constraints = ir_alloc(M->arena, sizeof(IrShape));
    *I(cc)->a.x->operand_layout_constraints = ol;
    test_x(&I(cc)->a)->custom_call_has_side_effect = false;
    test_x(&I(cc)->a)->api_version = NULL;
    test_x(&I(cc)->a)->backend_config = "{\"k\": 1}";
    expect_line(cc, "cc = f32[8] custom-call(x), custom_call_target=\"my \\\"fn\\\"\\\\x\", "
                    "operand_layout_constraints={f32[8]{0}}, backend_config={\"k\": 1}");
    int32_t rng = OP(OP_RNG, "f32[8]", "rng", 2, a, a);
    test_x(&I(rng)->a)->distribution = "rng_uniform";
    expect_line(rng, "rng = f32[8] rng(a, a), distribution=rng_uniform");
    int32_t rb = OP(OP_RNG_BIT_GENERATOR, "(u64[2], u32[8])", "rb", 1, st);
    test_x(&I(rb)->a)->rng_algorithm = "rng_three_fry";
    expect_line(rb, "rb = (u64[2], u32[8]) rng-bit-generator(st), algorithm=rng_three_fry");
    int32_t f = OP(OP_FFT, "c64[8]", "f", 1, c);
    test_x(&I(f)->a)->fft_type = "IFFT";
    test_x(&I(f)->a)->fft_length = L("8");
    expect_line(f, "f = c64[8] fft(c), fft_type=IFFT, fft_length={8}");
    int32_t of = OP(OP_OUTFEED, "token[]", "of", 2, x, tk);
    test_x(&I(of)->a)->has_outfeed_shape = true;
    test_x(&I(of)->a)->outfeed_shape = S("f32[8]");
    test_x(&I(of)->a)->outfeed_config = "cfg";
    expect_line(of, "of = token[] outfeed(x, tk), outfeed_shape=f32[8], outfeed_config=\"cfg\"");
    int32_t inf = OP(OP_INFEED, "(f32[8], token[])", "inf", 1, tk);
    /* `inf` is a keyword to XLA's lexer: it needs the % */
    expect_line(inf, "%inf = (f32[8], token[]) infeed(tk)");
    /* generic attributes in XLA's order: sharding (tested with the parser),
     * frontend_attributes (sorted), control-predecessors, metadata,
     * backend_config */
    int32_t n = OP(OP_NEGATE, "f32[8]", "n", 1, x);
    IrKeyValue *kv = ir_alloc_array(M->arena, 3, sizeof(IrKeyValue));
    kv[0] = (IrKeyValue){"zeta", "1"};
    kv[1] = (IrKeyValue){"_xla_compute_type", "host"};
    kv[2] = (IrKeyValue){"json", "{\"a\":2}"};
    I(n)->a.frontend = kv;
    I(n)->a.nfrontend = 3;
    I(n)->a.metadata = "op_type=\"Neg\" op_name=\"n\"";
    test_x(&I(n)->a)->control_predecessors = L("0,1");
    test_x(&I(n)->a)->backend_config = "{}";
    expect_line(n, "n = f32[8] negate(x), frontend_attributes={_xla_compute_type=\"host\","
                   "json={\"a\":2},zeta=\"1\"}, control-predecessors={x, tk}, "
                   "metadata={op_type=\"Neg\" op_name=\"n\"}, backend_config={}");
    I(n)->a.nfrontend = 0;
    test_x(&I(n)->a)->control_predecessors.n = 0;
    test_x(&I(n)->a)->statistics_viz = "{visualizing_index=1,stat-1=33}";
    test_x(&I(n)->a)->origin = "{{\"v\"}}";
    expect_line(n, "n = f32[8] negate(x), statistics={visualizing_index=1,stat-1=33}, "
                   "metadata={op_type=\"Neg\" op_name=\"n\"}, backend_config={}, "
                   "origin={{\"v\"}}");
}

/* ------------------------------------------------------------------ */
/* whole modules                                                       */
/* ------------------------------------------------------------------ */

static void test_module_text(void **state)
{
    (void)state;
    /* main calls `sum`, which is added after it: printed first */
    int32_t x = P("f32[4]", "x"), y = P("f32[4]", "y");
    int32_t sum = binary_comp("sum", OP_ADD, "f32");
    M->comp[sum]->has_signature = true;
    int32_t z = OP(OP_CONSTANT, "f32[]", "zero", 0);
    float zero = 0;
    I(z)->a.literal = ir_alloc(M->arena, 4);
    memcpy(I(z)->a.literal, &zero, 4);
    I(z)->a.literal_bytes = 4;
    int32_t a = OP(OP_ADD, "f32[4]", "a", 2, x, y);
    int32_t r = OP(OP_REDUCE, "f32[]", "r", 2, a, z);
    I(r)->a.dimensions = L("0");
    call(r, sum);
    C->root = r;
    M->is_scheduled = true;
    M->num_partitions = 2;
    M->replica_count = 1;
    M->entry_computation_layout = "(f32[4]{0}, f32[4]{0})->f32[]";
    M->nalias = 2;
    M->alias = ir_alloc_array(M->arena, 2, sizeof(IrAlias));
    M->alias[0] = (IrAlias){.output_index = L("0"), .param_number = 1, .param_index = L("")};
    M->alias[1] = (IrAlias){.output_index = L("1"), .param_number = 0, .param_index = L("2,0"),
                            .must_alias = true};
    M->nheader_attr = 1;
    M->header_attr = ir_alloc(M->arena, sizeof(IrKeyValue));
    M->header_attr[0] = (IrKeyValue){"alias_passthrough_params", "true"};
    expect_text(ir_print_module(M),
                "HloModule m, is_scheduled=true, input_output_alias={ {0}: (1, {}, may-alias), "
                "{1}: (0, {2,0}, must-alias) }, entry_computation_layout={(f32[4]{0}, "
                "f32[4]{0})->f32[]}, replica_count=1, num_partitions=2, "
                "alias_passthrough_params=true\n"
                "\n"
                "sum (lhs: f32[], rhs: f32[]) -> f32[] {\n"
                "  lhs = f32[] parameter(0)\n"
                "  rhs = f32[] parameter(1)\n"
                "  ROOT add = f32[] add(lhs, rhs)\n"
                "}\n"
                "\n"
                "ENTRY main {\n"
                "  x = f32[4] parameter(0)\n"
                "  y = f32[4] parameter(1)\n"
                "  zero = f32[] constant(0)\n"
                "  a = f32[4] add(x, y)\n"
                "  ROOT r = f32[] reduce(a, zero), dimensions={0}, to_apply=sum\n"
                "}\n");
}

static void test_topological_print(void **state)
{
    (void)state;
    /* Instructions appended out of order (a pass built them so): the
     * printer puts operands first, keeping definition order otherwise. */
    int32_t n = OP(OP_NEGATE, "f32[2]", "n", 1, 0); /* operand patched below */
    int32_t x = P("f32[2]", "x");
    int32_t e = OP(OP_EXP, "f32[2]", "e", 1, x);
    I(n)->opnd[0] = e;
    int32_t s = OP(OP_SINE, "f32[2]", "s", 1, n);
    C->root = s;
    test_x(&I(s)->a)->control_predecessors = L("");
    expect_text(ir_print_module(M), "HloModule m\n"
                                    "\n"
                                    "ENTRY main {\n"
                                    "  x = f32[2] parameter(0)\n"
                                    "  e = f32[2] exponential(x)\n"
                                    "  n = f32[2] negate(e)\n"
                                    "  ROOT s = f32[2] sine(n)\n"
                                    "}\n");
    /* a control predecessor counts as an edge */
    int32_t c = OP(OP_COSINE, "f32[2]", "c", 1, x);
    test_x(&I(e)->a)->control_predecessors = L("4");
    (void)c;
    expect_text(ir_print_module(M), "HloModule m\n"
                                    "\n"
                                    "ENTRY main {\n"
                                    "  x = f32[2] parameter(0)\n"
                                    "  c = f32[2] cosine(x)\n"
                                    "  e = f32[2] exponential(x), control-predecessors={c}\n"
                                    "  n = f32[2] negate(e)\n"
                                    "  ROOT s = f32[2] sine(n)\n"
                                    "}\n");
}

/* ------------------------------------------------------------------ */
/* round trips through the parser                                      */
/* ------------------------------------------------------------------ */

/* Hand-written modules in the forms XLA writes (percent names, operand
 * shapes, header attributes in any order) and the text tessel prints for
 * them: bare names, operands by name, XLA's attribute order. */
static const struct {
    const char *in, *out;
} trips[] = {
    {"HloModule m, replica_count=1, num_partitions=8, entry_computation_layout={(f32[8,8]{1,0})->"
     "f32[8,8]{1,0}}, input_output_alias={ {}: (0, {}, may-alias) }, is_scheduled=true\n"
     "\n"
     "ENTRY %main (p: f32[8,8]) -> f32[8,8] {\n"
     "  %p = f32[8,8]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
     "  %a = f32[8,8]{1,0} copy(f32[8,8]{1,0} %p), sharding={devices=[4,2]<=[2,2,2]T(1,0,2)}\n"
     "  %b = f32[8,8]{1,0} copy(%a), sharding={devices=[2,2,2]0,1,2,3,4,5,6,7 "
     "last_tile_dim_replicate}\n"
     "  %c = f32[8,8]{1,0} copy(%b), sharding={devices=[2,1,2,2]<=[8] last_tile_dims={manual, "
     "replicated}}\n"
     "  %d = f32[8,8]{1,0} copy(%c), sharding={maximal device=3}\n"
     "  %e = f32[8,8]{1,0} copy(%d), sharding={manual}\n"
     "  %t = (f32[8,8]{1,0}, f32[8,8]{1,0}) tuple(%d, %e), sharding={{replicated}, "
     "{devices=[8,1]<=[8]}}\n"
     "  ROOT %f = f32[8,8]{1,0} copy(%e), sharding={replicated}, metadata={op_type=\"Copy\" "
     "op_name=\"f\"}\n"
     "}\n",
     "HloModule m, is_scheduled=true, input_output_alias={ {}: (0, {}, may-alias) }, "
     "entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}, replica_count=1, "
     "num_partitions=8\n"
     "\n"
     "ENTRY main (p: f32[8,8]) -> f32[8,8] {\n"
     "  p = f32[8,8]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
     "  a = f32[8,8]{1,0} copy(p), sharding={devices=[4,2]<=[2,2,2]T(1,0,2)}\n"
     "  b = f32[8,8]{1,0} copy(a), sharding={devices=[2,2,2]0,1,2,3,4,5,6,7 "
     "last_tile_dim_replicate}\n"
     "  c = f32[8,8]{1,0} copy(b), sharding={devices=[2,1,2,2]<=[8] last_tile_dims={manual, "
     "replicated}}\n"
     "  d = f32[8,8]{1,0} copy(c), sharding={maximal device=3}\n"
     "  e = f32[8,8]{1,0} copy(d), sharding={manual}\n"
     "  t = (f32[8,8]{1,0}, f32[8,8]{1,0}) tuple(d, e), sharding={{replicated}, "
     "{devices=[8,1]<=[8]}}\n"
     "  ROOT f = f32[8,8]{1,0} copy(e), sharding={replicated}, metadata={op_type=\"Copy\" "
     "op_name=\"f\"}\n"
     "}\n"},
    {"HloModule attrs\n"
     "%add (a: f32[], b: f32[]) -> f32[] {\n"
     "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
     "  ROOT %s = f32[] add(f32[] %a, f32[] %b)\n}\n"
     "%gt (a: f32[], b: f32[]) -> pred[] {\n"
     "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
     "  ROOT %c = pred[] compare(%a, %b), direction=GT, type=TOTALORDER\n}\n"
     "ENTRY %e {\n"
     "  %x = f32[4,6] parameter(0)\n  %i = s32[3,1] parameter(1)\n  %u = f32[3,6] parameter(2)\n"
     "  %k = f32[1,5,5,2] parameter(3)\n  %w = f32[3,3,2,4] parameter(4)\n"
     "  %z = f32[] constant(0)\n"
     "  %lit = f32[2,2] constant({ { 1.5, -inf }, { nan, 1e-3 } })\n"
     "  %sl = f32[2,3] slice(%x), slice={[0:4:2], [0:6:2]}\n"
     "  %pd = f32[9,6] pad(%x, %z), padding=1_1_1x0_0_0\n"
     "  %rw = f32[2,2] reduce-window(%x, %z), window={size=2x3 stride=2x3}, to_apply=%add\n"
     "  %cv = f32[1,5,5,4] convolution(%k, %w), window={size=3x3 pad=1_1x1_1}, "
     "dim_labels=b01f_01io->b01f, operand_precision={HIGH,DEFAULT}\n"
     "  %g = f32[3,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}, indices_are_sorted=true\n"
     "  %sc = f32[4,6] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add\n"
     "  %so = f32[4,6] sort(%x), dimensions={1}, is_stable=true, to_apply=%gt\n"
     "  %ar = f32[4,6] all-reduce(%x), channel_id=1, replica_groups=[2,2]<=[4], "
     "use_global_device_ids=true, to_apply=%add\n"
     "  %cc = f32[4,6] custom-call(%x), custom_call_target=\"foo\\\"bar\", "
     "backend_config={\"a\": [1, 2]}, frontend_attributes={b=\"2\",a=\"1\"}\n"
     "  ROOT %t = (f32[2,3], f32[9,6], f32[2,2]) tuple(%sl, %pd, %rw), "
     "control-predecessors={%cv, %g, %sc, %so, %ar, %cc, %lit}\n"
     "}\n",
     "HloModule attrs\n"
     "\n"
     "add (a: f32[], b: f32[]) -> f32[] {\n"
     "  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
     "\n"
     "gt (a: f32[], b: f32[]) -> pred[] {\n"
     "  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
     "  ROOT c = pred[] compare(a, b), direction=GT, type=TOTALORDER\n}\n"
     "\n"
     "ENTRY e {\n"
     "  x = f32[4,6] parameter(0)\n  i = s32[3,1] parameter(1)\n  u = f32[3,6] parameter(2)\n"
     "  k = f32[1,5,5,2] parameter(3)\n  w = f32[3,3,2,4] parameter(4)\n"
     "  z = f32[] constant(0)\n"
     "  lit = f32[2,2] constant({ {1.5, -inf}, {nan, 0.00100000005} })\n"
     "  sl = f32[2,3] slice(x), slice={[0:4:2], [0:6:2]}\n"
     "  pd = f32[9,6] pad(x, z), padding=1_1_1x0_0_0\n"
     "  rw = f32[2,2] reduce-window(x, z), window={size=2x3 stride=2x3}, to_apply=add\n"
     "  cv = f32[1,5,5,4] convolution(k, w), window={size=3x3 pad=1_1x1_1}, "
     "dim_labels=b01f_01io->b01f, operand_precision={HIGH,DEFAULT}\n"
     "  g = f32[3,6] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}, indices_are_sorted=true\n"
     "  sc = f32[4,6] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, "
     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
     "  so = f32[4,6] sort(x), dimensions={1}, is_stable=true, to_apply=gt\n"
     "  ar = f32[4,6] all-reduce(x), channel_id=1, replica_groups=[2,2]<=[4], "
     "use_global_device_ids=true, to_apply=add\n"
     "  cc = f32[4,6] custom-call(x), custom_call_target=\"foo\\\"bar\", "
     "frontend_attributes={a=\"1\",b=\"2\"}, backend_config={\"a\": [1, 2]}\n"
     "  ROOT t = (f32[2,3], f32[9,6], f32[2,2]) tuple(sl, pd, rw), "
     "control-predecessors={cv, g, sc, so, ar, cc, lit}\n"
     "}\n"},
    /* control flow: a callee defined after its caller prints first; the
     * pred conditional prints in the true/false form */
    {"HloModule cf\n"
     "ENTRY e {\n"
     "  p = pred[] parameter(0)\n  x = f32[2] parameter(1)\n  i = s32[] parameter(2)\n"
     "  c = f32[2] conditional(p, x, x), true_computation=neg, false_computation=neg\n"
     "  k = f32[2] conditional(i, x, c), branch_computations={neg, neg}\n"
     "  t = (s32[], f32[2]) tuple(i, k)\n"
     "  ROOT w = (s32[], f32[2]) while(t), condition=cond, body=body\n"
     "}\n"
     "neg {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\n"
     "cond {\n  s = (s32[], f32[2]) parameter(0)\n  ROOT f = pred[] constant(false)\n}\n"
     "body {\n  s = (s32[], f32[2]) parameter(0)\n  ROOT c = (s32[], f32[2]) copy(s)\n}\n",
     "HloModule cf\n"
     "\n"
     "neg {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\n"
     "\n"
     "cond {\n  s = (s32[], f32[2]) parameter(0)\n  ROOT f = pred[] constant(false)\n}\n"
     "\n"
     "body {\n  s = (s32[], f32[2]) parameter(0)\n  ROOT c = (s32[], f32[2]) copy(s)\n}\n"
     "\n"
     "ENTRY e {\n"
     "  p = pred[] parameter(0)\n  x = f32[2] parameter(1)\n  i = s32[] parameter(2)\n"
     "  c = f32[2] conditional(p, x, x), true_computation=neg, false_computation=neg\n"
     "  k = f32[2] conditional(i, x, c), branch_computations={neg, neg}\n"
     "  t = (s32[], f32[2]) tuple(i, k)\n"
     "  ROOT w = (s32[], f32[2]) while(t), condition=cond, body=body\n"
     "}\n"},
};

static char *print_text(const char *in)
{
    IrParseOptions o = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    if (ir_parse("t.hlo", in, strlen(in), &o, &m, &d) != IR_OK)
        fail_msg("does not parse: %s at %d:%d\n%s", d.msg, (int)d.pos.line, (int)d.pos.col, in);
    char *s = ir_print_module(m);
    ir_module_free(m);
    return s;
}

static void test_round_trips(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof trips / sizeof *trips; i++) {
        char *once = print_text(trips[i].in);
        char *twice = print_text(once);
        if (strcmp(once, trips[i].out) != 0)
            fail_msg("module %zu printed\n%s\nexpected\n%s", i, once, trips[i].out);
        if (strcmp(once, twice) != 0)
            fail_msg("module %zu: printing the printed text changed it:\n%s\n----\n%s", i, once,
                     twice);
        ts_free(once);
        ts_free(twice);
    }
}

/* The literal printer's output reads back to the same bytes for every
 * element type, special values included. */
static void test_literal_round_trip(void **state)
{
    (void)state;
    static const char *const shapes[] = {"f32[8]", "f64[4]", "f16[7]", "bf16[6]", "c64[2]",
                                         "s64[2]", "u64[1]", "pred[3]", "s8[2]"};
    const float f32[8] = {1.0f, 0.1f, -2.5f, INFINITY, -INFINITY, 3.0f, 1.40129846e-45f,
                          3.40282347e+38f};
    const double f64[4] = {0.1, 1e300, -0.0, 4.9406564584124654e-324};
    const uint16_t f16[7] = {0x3c00, 0x3555, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x8000};
    const uint16_t bf16[6] = {0x3f80, 0x4049, 0x0001, 0xc2f7, 0xff80, 0x0080};
    const float c64[4] = {1.0f, -2.0f, 0.5f, 1e-30f};
    const int64_t s64[2] = {INT64_MIN, INT64_MAX};
    const uint64_t u64[1] = {UINT64_MAX};
    const uint8_t pr[3] = {1, 0, 1};
    const int8_t s8[2] = {-128, 127};
    const void *data[] = {f32, f64, f16, bf16, c64, s64, u64, pr, s8};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        IrShape s = S(shapes[i]);
        char *text = ir_literal_str(&s, data[i]);
        uint8_t *back = NULL;
        int64_t n = 0;
        IrDiag d = {0};
        if (ir_literal_parse(M->arena, &s, text, strlen(text), &back, &n, &d) != IR_OK)
            fail_msg("%s %s does not parse back: %s", shapes[i], text, d.msg);
        assert_int_equal(n, ir_shape_bytes(&s));
        if (memcmp(back, data[i], (size_t)n) != 0)
            fail_msg("%s %s reads back to other bytes", shapes[i], text);
        ts_free(text);
    }
}

static void test_print_oom(void **state)
{
    (void)state;
    int32_t x = P("f32[2]", "x");
    C->root = OP(OP_NEGATE, "f32[2]", "n", 1, x);
    /* Fail each allocation of the printer in turn: NULL, never a crash. */
    for (long k = 1; k < 200; k++) {
        ts_fail_alloc_after(k);
        char *s = ir_print_module(M);
        ts_fail_alloc_after(0);
        if (s) {
            assert_string_equal(s, "HloModule m\n\nENTRY main {\n  x = f32[2] parameter(0)\n"
                                   "  ROOT n = f32[2] negate(x)\n}\n");
            ts_free(s);
            return;
        }
    }
    fail_msg("the printer never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_literal_ints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_literal_floats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_literal_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_basic_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_data_movement_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contraction_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_called_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collective_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misc_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_module_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topological_print, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_literal_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_oom, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
