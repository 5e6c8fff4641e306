/*
 * test_infer.c: shape inference (ir/infer.c), one group of cases per op
 * family, over modules built by hand (no parser involved).
 *
 * Every expected shape is worked out by hand in the comment next to the
 * case, from XLA's operation semantics; error cases check the message says
 * what was expected.
 */
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
/* a tiny module builder                                               */
/* ------------------------------------------------------------------ */

static IrModule *M;
static IrComputation *C; /* the computation instructions are added to */
static int32_t nparams;

static int setup(void **state)
{
    (void)state;
    M = ir_module_new("t");
    assert_non_null(M);
    int32_t ci = ir_add_computation(M, "main");
    assert_true(ci >= 0);
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

/* Shapes from text: "f32[2,3]", "s32[]", "token[]", "(f32[2], (s32[], pred[]))". */
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

/* "1,0,2" -> an arena list; "" -> empty. */
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

static int32_t add_in(IrComputation *c, IrOpcode op, const char *shape, int n, const int32_t *ops)
{
    IrShape s = S(shape);
    int32_t i = ir_add_simple(M, c, op, &s, n, ops, NULL);
    assert_true(i >= 0);
    return i;
}

static int32_t param_in(IrComputation *c, int64_t num, const char *shape)
{
    IrShape s = S(shape);
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_PARAMETER;
    ins.name = ir_unique_name(M, "p");
    ins.shape = s;
    ins.a.parameter_number = num;
    int32_t i = ir_add_instr(M, c, &ins);
    assert_true(i >= 0);
    return i;
}

static int32_t P(const char *shape)
{
    return param_in(C, nparams++, shape);
}

static int32_t OP(IrOpcode op, const char *shape, int n, ...)
{
    int32_t ops[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        ops[i] = va_arg(ap, int32_t);
    va_end(ap);
    return add_in(C, op, shape, n, ops);
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

/* A computation `name` of scalar parameters of `types` (space separated)
 * whose root is `op` over parameters `a` and `b` with result `rtype`. */
static int32_t scalar_comp(const char *name, const char *ptypes, IrOpcode op, int a, int b,
                           const char *rshape)
{
    int32_t ci = ir_add_computation(M, name);
    IrComputation *c = M->comp[ci];
    int32_t ps[8], n = 0;
    char buf[16];
    for (const char *p = ptypes; *p;) {
        int k = 0;
        while (*p && *p != ' ')
            buf[k++] = *p++;
        buf[k] = 0;
        while (*p == ' ')
            p++;
        char sh[24];
        snprintf(sh, sizeof sh, "%s[]", buf);
        ps[n] = param_in(c, n, sh);
        n++;
    }
    int32_t ops[2] = {ps[a], ps[b]};
    c->root = add_in(c, op, rshape, 2, ops);
    if (op == OP_COMPARE)
        c->instr[c->root].a.direction = CMP_GT;
    return ci;
}

/* Infer instruction i: its shape as text, or "error: MESSAGE". */
static char *infer(int32_t i)
{
    IrShape out;
    IrDiag d = {0};
    IrStatus st = ir_infer_shape(M, C, I(i), &out, M->arena, &d);
    char *r;
    if (st == IR_OK) {
        r = ir_shape_str(&out, true);
    } else {
        r = malloc(strlen(d.msg ? d.msg : "?") + 8);
        sprintf(r, "error: %s", d.msg ? d.msg : "?");
    }
    ir_diag_clear(&d);
    return r;
}

static void expect_shape(int32_t i, const char *want)
{
    char *got = infer(i);
    if (strcmp(got, want) != 0)
        fail_msg("instruction %s: inferred '%s', expected '%s'", I(i)->name, got, want);
    free(got);
}

static void expect_error(int32_t i, const char *fragment)
{
    char *got = infer(i);
    if (strncmp(got, "error: ", 7) != 0 || !strstr(got, fragment))
        fail_msg("instruction %s: got '%s', expected an error containing '%s'", I(i)->name, got,
                 fragment);
    free(got);
}

static void groups(int32_t i, int ngroups, int size)
{
    IrReplicaGroups *g = &test_x(&I(i)->a)->replica_groups;
    g->present = true;
    g->ngroups = ngroups;
    g->group_size = ir_alloc_array(M->arena, (size_t)ngroups, sizeof(int32_t));
    g->groups = ir_alloc_array(M->arena, (size_t)ngroups, sizeof(int64_t *));
    for (int k = 0; k < ngroups; k++) {
        g->group_size[k] = size;
        g->groups[k] = ir_alloc_array(M->arena, (size_t)size, sizeof(int64_t));
        for (int j = 0; j < size; j++)
            g->groups[k][j] = k * size + j;
    }
}

static void window(int32_t i, int rank, const int64_t *size, const int64_t *stride,
                   const int64_t *lo, const int64_t *hi, const int64_t *ld, const int64_t *rd)
{
    IrWindow *w = &test_x(&I(i)->a)->window;
    w->rank = rank;
    w->dim = ir_alloc_array(M->arena, (size_t)rank, sizeof(IrWindowDim));
    for (int k = 0; k < rank; k++) {
        w->dim[k].size = size[k];
        w->dim[k].stride = stride ? stride[k] : 1;
        w->dim[k].pad_lo = lo ? lo[k] : 0;
        w->dim[k].pad_hi = hi ? hi[k] : 0;
        w->dim[k].lhs_dilate = ld ? ld[k] : 1;
        w->dim[k].rhs_dilate = rd ? rd[k] : 1;
    }
}

/* ------------------------------------------------------------------ */
/* elementwise                                                         */
/* ------------------------------------------------------------------ */

static void test_binary(void **state)
{
    (void)state;
    int32_t a = P("f32[2,3]"), b = P("f32[2,3]"), c = P("f32[3,2]"), s = P("s32[2,3]");
    expect_shape(OP(OP_ADD, "f32[2,3]", 2, a, b), "f32[2,3]");
    expect_shape(OP(OP_MAXIMUM, "f32[2,3]", 2, a, b), "f32[2,3]");
    expect_error(OP(OP_ADD, "f32[2,3]", 2, a, c), "same dimensions, got f32[2,3] and f32[3,2]");
    expect_error(OP(OP_ADD, "f32[2,3]", 2, a, s), "same element type, got f32 and s32");
    expect_error(OP(OP_ADD, "f32[2,3]", 1, a), "expects 2 operands, got 1");
    expect_shape(OP(OP_SHL, "s32[2,3]", 2, s, s), "s32[2,3]");
    expect_error(OP(OP_SHL, "f32[2,3]", 2, a, b), "integer element type, got f32");
    expect_shape(OP(OP_AND, "s32[2,3]", 2, s, s), "s32[2,3]");
    expect_error(OP(OP_XOR, "f32[2,3]", 2, a, b), "pred or integer");
    /* complex(f32, f32) -> c64 */
    expect_shape(OP(OP_COMPLEX, "c64[2,3]", 2, a, b), "c64[2,3]");
    expect_error(OP(OP_COMPLEX, "c64[2,3]", 2, s, s), "f32 or f64");
    expect_error(OP(OP_ATAN2, "s32[2,3]", 2, s, s), "floating-point or complex");
}

static void test_compare(void **state)
{
    (void)state;
    int32_t a = P("s32[4]"), b = P("s32[4]"), f = P("f32[4]");
    int32_t c = OP(OP_COMPARE, "pred[4]", 2, a, b);
    I(c)->a.direction = CMP_LT;
    expect_shape(c, "pred[4]");
    int32_t nd = OP(OP_COMPARE, "pred[4]", 2, a, b);
    expect_error(nd, "needs a direction");
    int32_t tf = OP(OP_COMPARE, "pred[4]", 2, a, b);
    I(tf)->a.direction = CMP_EQ;
    I(tf)->a.cmp_type = CMPT_TOTALORDER;
    expect_error(tf, "comparison type does not fit element type s32");
    int32_t ff = OP(OP_COMPARE, "pred[4]", 2, f, f);
    I(ff)->a.direction = CMP_GE;
    I(ff)->a.cmp_type = CMPT_TOTALORDER;
    expect_shape(ff, "pred[4]");
}

static void test_unary(void **state)
{
    (void)state;
    int32_t f = P("f32[2]"), s = P("s32[2]"), u = P("u32[2]"), c = P("c64[2]"), z = P("c128[3]"),
            pr = P("pred[2]");
    expect_shape(OP(OP_NEGATE, "f32[2]", 1, f), "f32[2]");
    expect_shape(OP(OP_NEGATE, "u32[2]", 1, u), "u32[2]");
    expect_shape(OP(OP_ABS, "f32[2]", 1, c), "f32[2]"); /* |c64| is f32 */
    expect_error(OP(OP_ABS, "u32[2]", 1, u), "signed integer, floating-point or complex");
    expect_shape(OP(OP_IS_FINITE, "pred[2]", 1, f), "pred[2]");
    expect_error(OP(OP_FLOOR, "s32[2]", 1, s), "floating-point element type, got s32");
    expect_shape(OP(OP_EXP, "c64[2]", 1, c), "c64[2]");
    expect_error(OP(OP_SQRT, "s32[2]", 1, s), "floating-point or complex");
    expect_shape(OP(OP_NOT, "pred[2]", 1, pr), "pred[2]");
    expect_error(OP(OP_POPCNT, "f32[2]", 1, f), "integer element type");
    expect_shape(OP(OP_REAL, "f64[3]", 1, z), "f64[3]");
    expect_shape(OP(OP_IMAG, "f32[2]", 1, c), "f32[2]");
    expect_shape(OP(OP_REAL, "f32[2]", 1, f), "f32[2]"); /* real of a float is itself */
    int32_t rp = OP(OP_REDUCE_PRECISION, "f32[2]", 1, f);
    test_x(&I(rp)->a)->exponent_bits = 5;
    test_x(&I(rp)->a)->mantissa_bits = 10;
    expect_shape(rp, "f32[2]");
    int32_t rpb = OP(OP_REDUCE_PRECISION, "f32[2]", 1, f);
    expect_error(rpb, "exponent_bits >= 1");
    /* copy passes tuples through */
    int32_t t = OP(OP_TUPLE, "(f32[2], s32[2])", 2, f, s);
    expect_shape(OP(OP_COPY, "(f32[2], s32[2])", 1, t), "(f32[2], s32[2])");
    expect_error(OP(OP_NEGATE, "f32[2]", 1, t), "must be an array");
}

static void test_convert(void **state)
{
    (void)state;
    int32_t f = P("f32[2]"), c = P("c64[2]"), s = P("s32[4]"), b = P("u8[4,2]"), b3 = P("u8[4,3]"),
            pr = P("pred[2]");
    /* convert keeps the dimensions and takes the declared element type */
    expect_shape(OP(OP_CONVERT, "s32[2]", 1, f), "s32[2]");
    expect_shape(OP(OP_CONVERT, "c64[2]", 1, f), "c64[2]");
    expect_error(OP(OP_CONVERT, "f32[2]", 1, c), "cannot convert complex c64");
    /* bitcast-convert: 32 -> 8 bits adds a minor dimension of 4 */
    expect_shape(OP(OP_BITCAST_CONVERT, "s8[4,4]", 1, s), "s8[4,4]");
    /* 8 -> 16 bits removes a minor dimension that must be 2 */
    expect_shape(OP(OP_BITCAST_CONVERT, "u16[4]", 1, b), "u16[4]");
    expect_error(OP(OP_BITCAST_CONVERT, "u16[4]", 1, b3), "minor dimension of size 2");
    /* same width: same dimensions */
    expect_shape(OP(OP_BITCAST_CONVERT, "u32[2]", 1, f), "u32[2]");
    expect_error(OP(OP_BITCAST_CONVERT, "u8[2]", 1, pr), "pred");
}

static void test_select_clamp(void **state)
{
    (void)state;
    int32_t p = P("pred[2,3]"), ps = P("pred[]"), a = P("f32[2,3]"), b = P("f32[2,3]"),
            s = P("f32[]"), v = P("f32[4]"), w = P("f32[3]");
    expect_shape(OP(OP_SELECT, "f32[2,3]", 3, p, a, b), "f32[2,3]");
    expect_error(OP(OP_SELECT, "f32[2,3]", 3, ps, a, b), "must have the dimensions of on_true");
    expect_error(OP(OP_SELECT, "f32[2,3]", 3, a, a, b), "predicate must be pred");
    expect_shape(OP(OP_CLAMP, "f32[4]", 3, s, v, s), "f32[4]");
    expect_shape(OP(OP_CLAMP, "f32[4]", 3, v, v, v), "f32[4]");
    expect_error(OP(OP_CLAMP, "f32[4]", 3, w, v, s), "min f32[3] must be a f32 scalar");
}

/* ------------------------------------------------------------------ */
/* data movement                                                       */
/* ------------------------------------------------------------------ */

static void test_broadcast_reshape_transpose(void **state)
{
    (void)state;
    int32_t x = P("f32[3]"), y = P("f32[2,3,4]"), z = P("f32[2,3]");
    int32_t b = OP(OP_BROADCAST, "f32[2,3]", 1, x);
    I(b)->a.dimensions = L("1"); /* operand dim 0 (3) -> result dim 1 (3) */
    expect_shape(b, "f32[2,3]");
    int32_t bb = OP(OP_BROADCAST, "f32[2,3]", 1, x);
    I(bb)->a.dimensions = L("0");
    expect_error(bb, "operand dimension 0 has size 3 but result dimension 0 has size 2");
    int32_t bo = OP(OP_BROADCAST, "f32[3,2,3]", 1, z);
    I(bo)->a.dimensions = L("2,0");
    expect_error(bo, "ascending");
    int32_t bs = OP(OP_BROADCAST, "f32[5,7]", 1, P("f32[]"));
    I(bs)->a.dimensions = L("");
    expect_shape(bs, "f32[5,7]");

    expect_shape(OP(OP_RESHAPE, "f32[6]", 1, z), "f32[6]");
    expect_error(OP(OP_RESHAPE, "f32[7]", 1, z), "cannot reshape f32[2,3] (6 elements)");
    expect_shape(OP(OP_BITCAST, "s32[3,2]", 1, z), "s32[3,2]"); /* 24 bytes both */
    expect_error(OP(OP_BITCAST, "s8[3,2]", 1, z), "(24 bytes)");

    /* transpose: result dim i = operand dim perm[i]: {2,0,1} of [2,3,4] -> [4,2,3] */
    int32_t t = OP(OP_TRANSPOSE, "f32[4,2,3]", 1, y);
    I(t)->a.dimensions = L("2,0,1");
    expect_shape(t, "f32[4,2,3]");
    int32_t tb = OP(OP_TRANSPOSE, "f32[4,2,3]", 1, y);
    I(tb)->a.dimensions = L("0,0,1");
    expect_error(tb, "dimension 0 appears twice");
    int32_t tr = OP(OP_TRANSPOSE, "f32[4,2,3]", 1, y);
    I(tr)->a.dimensions = L("1,0");
    expect_error(tr, "permutation of the 3 operand dimensions");
}

static void test_slices(void **state)
{
    (void)state;
    int32_t x = P("f32[10,8]"), i = P("s32[]"), j = P("s32[]"), k = P("s64[]"), f = P("f32[]"),
            u = P("f32[2,8]"), ub = P("f32[11,8]"), v = P("s32[2]");
    /* [2:8:2] -> ceil(6/2) = 3; [0:8:3] -> ceil(8/3) = 3 */
    int32_t s = OP(OP_SLICE, "f32[3,3]", 1, x);
    test_x(&I(s)->a)->slice_start = L("2,0");
    test_x(&I(s)->a)->slice_limit = L("8,8");
    test_x(&I(s)->a)->slice_stride = L("2,3");
    expect_shape(s, "f32[3,3]");
    int32_t s1 = OP(OP_SLICE, "f32[4,8]", 1, x); /* no strides: all 1 */
    test_x(&I(s1)->a)->slice_start = L("1,0");
    test_x(&I(s1)->a)->slice_limit = L("5,8");
    expect_shape(s1, "f32[4,8]");
    int32_t sb = OP(OP_SLICE, "f32[3,3]", 1, x);
    test_x(&I(sb)->a)->slice_start = L("0,0");
    test_x(&I(sb)->a)->slice_limit = L("11,8");
    expect_error(sb, "slice [0:11] of dimension 0 is out of bounds [0:10]");
    int32_t sr = OP(OP_SLICE, "f32[3]", 1, x);
    test_x(&I(sr)->a)->slice_start = L("0");
    test_x(&I(sr)->a)->slice_limit = L("3");
    expect_error(sr, "has rank 2");

    int32_t ds = OP(OP_DYNAMIC_SLICE, "f32[2,8]", 3, x, i, j);
    test_x(&I(ds)->a)->dynamic_slice_sizes = L("2,8");
    expect_shape(ds, "f32[2,8]");
    int32_t dsb = OP(OP_DYNAMIC_SLICE, "f32[2,9]", 3, x, i, j);
    test_x(&I(dsb)->a)->dynamic_slice_sizes = L("2,9");
    expect_error(dsb, "slice size 9 of dimension 1 is out of range [0, 8]");
    int32_t dst = OP(OP_DYNAMIC_SLICE, "f32[2,8]", 3, x, i, k);
    test_x(&I(dst)->a)->dynamic_slice_sizes = L("2,8");
    expect_error(dst, "one type, got s32 and s64");
    int32_t dsf = OP(OP_DYNAMIC_SLICE, "f32[2,8]", 3, x, i, f);
    test_x(&I(dsf)->a)->dynamic_slice_sizes = L("2,8");
    expect_error(dsf, "start index 1");
    int32_t dsn = OP(OP_DYNAMIC_SLICE, "f32[2,8]", 2, x, i);
    test_x(&I(dsn)->a)->dynamic_slice_sizes = L("2,8");
    expect_error(dsn, "needs 2 start indices");
    int32_t dsv = OP(OP_DYNAMIC_SLICE, "f32[2,8]", 2, x, v); /* legacy vector form */
    test_x(&I(dsv)->a)->dynamic_slice_sizes = L("2,8");
    expect_shape(dsv, "f32[2,8]");

    expect_shape(OP(OP_DYNAMIC_UPDATE_SLICE, "f32[10,8]", 4, x, u, i, j), "f32[10,8]");
    expect_error(OP(OP_DYNAMIC_UPDATE_SLICE, "f32[10,8]", 4, x, ub, i, j),
                 "update dimension 0 has size 11, larger than the operand's 10");
}

static void test_pad_concat_reverse(void **state)
{
    (void)state;
    int32_t x = P("f32[3]"), y = P("f32[2,4]"), z = P("f32[4,4]"), w = P("f32[2,5]"),
            v = P("f32[]"), vs = P("s32[]");
    /* 1 + 2 + 3 + (3-1)*1 = 8 */
    int32_t p = OP(OP_PAD, "f32[8]", 2, x, v);
    test_x(&I(p)->a)->pad_lo = L("1");
    test_x(&I(p)->a)->pad_hi = L("2");
    test_x(&I(p)->a)->pad_interior = L("1");
    expect_shape(p, "f32[8]");
    /* negative edge padding cuts: 4 - 1 - 1 = 2 */
    int32_t pn = OP(OP_PAD, "f32[2,2]", 2, y, v);
    test_x(&I(pn)->a)->pad_lo = L("0,-1");
    test_x(&I(pn)->a)->pad_hi = L("0,-1");
    expect_shape(pn, "f32[2,2]");
    int32_t pneg = OP(OP_PAD, "f32[0]", 2, x, v);
    test_x(&I(pneg)->a)->pad_lo = L("-4");
    test_x(&I(pneg)->a)->pad_hi = L("0");
    expect_error(pneg, "negative size -1");
    int32_t pt = OP(OP_PAD, "f32[3]", 2, x, vs);
    test_x(&I(pt)->a)->pad_lo = L("0");
    test_x(&I(pt)->a)->pad_hi = L("0");
    expect_error(pt, "padding value type s32 differs");
    int32_t pi = OP(OP_PAD, "f32[3]", 2, x, v);
    test_x(&I(pi)->a)->pad_lo = L("0");
    test_x(&I(pi)->a)->pad_hi = L("0");
    test_x(&I(pi)->a)->pad_interior = L("-1");
    expect_error(pi, "interior padding -1");

    /* [2,4] ++ [4,4] along 0 -> [6,4] */
    int32_t c = OP(OP_CONCATENATE, "f32[6,4]", 2, y, z);
    I(c)->a.dimensions = L("0");
    expect_shape(c, "f32[6,4]");
    int32_t cb = OP(OP_CONCATENATE, "f32[4,4]", 2, y, w);
    I(cb)->a.dimensions = L("0");
    expect_error(cb, "differ in dimension 1");
    int32_t c2 = OP(OP_CONCATENATE, "f32[2,9]", 2, y, w);
    I(c2)->a.dimensions = L("1");
    expect_shape(c2, "f32[2,9]");

    int32_t r = OP(OP_REVERSE, "f32[2,4]", 1, y);
    I(r)->a.dimensions = L("1");
    expect_shape(r, "f32[2,4]");
    int32_t rb = OP(OP_REVERSE, "f32[2,4]", 1, y);
    I(rb)->a.dimensions = L("2");
    expect_error(rb, "dimension 2 is out of range for rank 2");
}

static void test_values_and_tuples(void **state)
{
    (void)state;
    int32_t f = P("f32[2]"), s = P("s32[]"), tk = P("token[]");
    int32_t io = OP(OP_IOTA, "s32[4,5]", 0);
    I(io)->a.iota_dimension = 1;
    expect_shape(io, "s32[4,5]");
    int32_t iob = OP(OP_IOTA, "s32[4,5]", 0);
    I(iob)->a.iota_dimension = 2;
    expect_error(iob, "iota_dimension=2 is out of range for rank 2");

    int32_t t = OP(OP_TUPLE, "(f32[2], s32[])", 2, f, s);
    expect_shape(t, "(f32[2], s32[])");
    int32_t g = OP(OP_GET_TUPLE_ELEMENT, "s32[]", 1, t);
    I(g)->a.tuple_index = 1;
    expect_shape(g, "s32[]");
    int32_t gb = OP(OP_GET_TUPLE_ELEMENT, "s32[]", 1, t);
    I(gb)->a.tuple_index = 2;
    expect_error(gb, "index=2 is out of range for a tuple of 2 elements");
    int32_t gn = OP(OP_GET_TUPLE_ELEMENT, "s32[]", 1, f);
    expect_error(gn, "must be a tuple");

    expect_shape(OP(OP_PARTITION_ID, "u32[]", 0), "u32[]");
    expect_shape(OP(OP_REPLICA_ID, "u32[]", 0), "u32[]");
    expect_shape(OP(OP_AFTER_ALL, "token[]", 2, tk, tk), "token[]");
    expect_shape(OP(OP_AFTER_ALL, "token[]", 0), "token[]");
    expect_error(OP(OP_AFTER_ALL, "token[]", 1, f), "must be a token");
    expect_shape(OP(OP_ADD_DEPENDENCY, "f32[2]", 2, f, tk), "f32[2]");
    expect_shape(OP(OP_OPTIMIZATION_BARRIER, "(f32[2], s32[])", 1, t), "(f32[2], s32[])");
    int32_t gd = OP(OP_GET_DIMENSION_SIZE, "s32[]", 1, f);
    I(gd)->a.dimensions = L("0");
    expect_shape(gd, "s32[]");
    /* declared shapes stand for parameters and constants */
    expect_shape(f, "f32[2]");
}

/* ------------------------------------------------------------------ */
/* contractions                                                        */
/* ------------------------------------------------------------------ */

static void test_dot(void **state)
{
    (void)state;
    int32_t a = P("f32[2,3,4]"), b = P("f32[2,4,5]"), m = P("f32[3,4]"), n = P("f32[4,5]"),
            q = P("f32[5,6]"), t = P("f32[4,3]"), u = P("f32[5,4]"), i8 = P("s8[2,3]"),
            j8 = P("s8[3,4]");
    /* batch [2], lhs free [3], rhs free [5] */
    int32_t d = OP(OP_DOT, "f32[2,3,5]", 2, a, b);
    I(d)->a.dot.lhs_batch = L("0");
    I(d)->a.dot.rhs_batch = L("0");
    I(d)->a.dot.lhs_contracting = L("2");
    I(d)->a.dot.rhs_contracting = L("1");
    expect_shape(d, "f32[2,3,5]");
    int32_t mm = OP(OP_DOT, "f32[3,5]", 2, m, n);
    I(mm)->a.dot.lhs_contracting = L("1");
    I(mm)->a.dot.rhs_contracting = L("0");
    expect_shape(mm, "f32[3,5]");
    int32_t bad = OP(OP_DOT, "f32[3,6]", 2, m, q);
    I(bad)->a.dot.lhs_contracting = L("1");
    I(bad)->a.dot.rhs_contracting = L("0");
    expect_error(bad, "dot: lhs contracting dimension 1 has size 4, rhs contracting dimension 0 "
                      "has size 5");
    /* contracting the leading lhs dim and trailing rhs dim: [4,3] x [5,4] -> [3,5] */
    int32_t tt = OP(OP_DOT, "f32[3,5]", 2, t, u);
    I(tt)->a.dot.lhs_contracting = L("0");
    I(tt)->a.dot.rhs_contracting = L("1");
    expect_shape(tt, "f32[3,5]");
    /* the declared element type is XLA's preferred_element_type */
    int32_t q8 = OP(OP_DOT, "s32[2,4]", 2, i8, j8);
    I(q8)->a.dot.lhs_contracting = L("1");
    I(q8)->a.dot.rhs_contracting = L("0");
    expect_shape(q8, "s32[2,4]");
    int32_t mix = OP(OP_DOT, "f32[2,4]", 2, i8, n);
    I(mix)->a.dot.lhs_contracting = L("1");
    I(mix)->a.dot.rhs_contracting = L("0");
    expect_error(mix, "different kinds");
    int32_t nb = OP(OP_DOT, "f32[3,5]", 2, a, n);
    I(nb)->a.dot.lhs_batch = L("0");
    I(nb)->a.dot.lhs_contracting = L("2");
    I(nb)->a.dot.rhs_contracting = L("0");
    expect_error(nb, "lhs has 1 batch dimensions, rhs has 0");
    int32_t oor = OP(OP_DOT, "f32[3,5]", 2, m, n);
    I(oor)->a.dot.lhs_contracting = L("2");
    I(oor)->a.dot.rhs_contracting = L("0");
    expect_error(oor, "lhs_contracting_dims={2}: dimension 2 is out of range for rank 2");
}

static void conv_dnums(int32_t i, int nsp)
{
    /* b01f_01io->b01f for nsp = 2 */
    IrConvDnums *c = &test_x(&I(i)->a)->conv;
    c->present = true;
    c->nspatial = nsp;
    c->in_batch = 0;
    c->in_feature = nsp + 1;
    c->k_in_feature = nsp;
    c->k_out_feature = nsp + 1;
    c->out_batch = 0;
    c->out_feature = nsp + 1;
    c->in_spatial = ir_alloc_array(M->arena, (size_t)nsp, sizeof(int64_t));
    c->k_spatial = ir_alloc_array(M->arena, (size_t)nsp, sizeof(int64_t));
    c->out_spatial = ir_alloc_array(M->arena, (size_t)nsp, sizeof(int64_t));
    for (int k = 0; k < nsp; k++) {
        c->in_spatial[k] = k + 1;
        c->k_spatial[k] = k;
        c->out_spatial[k] = k + 1;
    }
}

static void test_convolution(void **state)
{
    (void)state;
    int32_t in = P("f32[1,5,5,2]"), k = P("f32[3,3,2,4]"), kb = P("f32[3,3,3,4]"),
            g = P("f32[1,4,4,4]"), kg = P("f32[1,1,2,4]"), bi = P("f32[4,3,3,2]"),
            kbi = P("f32[1,1,2,4]");
    const int64_t three[2] = {3, 3}, one[2] = {1, 1}, two[2] = {2, 2};
    /* same padding: (5 + 2 - 3) / 1 + 1 = 5 */
    int32_t c = OP(OP_CONVOLUTION, "f32[1,5,5,4]", 2, in, k);
    conv_dnums(c, 2);
    window(c, 2, three, NULL, one, one, NULL, NULL);
    expect_shape(c, "f32[1,5,5,4]");
    /* stride 2, no padding: (5 - 3) / 2 + 1 = 2 */
    int32_t cs = OP(OP_CONVOLUTION, "f32[1,2,2,4]", 2, in, k);
    conv_dnums(cs, 2);
    window(cs, 2, three, two, NULL, NULL, NULL, NULL);
    expect_shape(cs, "f32[1,2,2,4]");
    /* lhs_dilate 2: base (5-1)*2+1 = 9, (9 - 3) + 1 = 7 */
    int32_t cl = OP(OP_CONVOLUTION, "f32[1,7,7,4]", 2, in, k);
    conv_dnums(cl, 2);
    window(cl, 2, three, NULL, NULL, NULL, two, NULL);
    expect_shape(cl, "f32[1,7,7,4]");
    /* rhs_dilate 2: window (3-1)*2+1 = 5, (5 - 5) + 1 = 1 */
    int32_t cr = OP(OP_CONVOLUTION, "f32[1,1,1,4]", 2, in, k);
    conv_dnums(cr, 2);
    window(cr, 2, three, NULL, NULL, NULL, NULL, two);
    expect_shape(cr, "f32[1,1,1,4]");
    /* kernel input features 3 != input features 2 */
    int32_t cb = OP(OP_CONVOLUTION, "f32[1,5,5,4]", 2, in, kb);
    conv_dnums(cb, 2);
    window(cb, 2, three, NULL, one, one, NULL, NULL);
    expect_error(cb, "must equal the kernel input feature size 3");
    /* feature groups: 4 input features / 2 groups = 2 kernel input features */
    int32_t cg = OP(OP_CONVOLUTION, "f32[1,4,4,4]", 2, g, kg);
    conv_dnums(cg, 2);
    window(cg, 2, one, NULL, NULL, NULL, NULL, NULL);
    test_x(&I(cg)->a)->feature_group_count = 2;
    expect_shape(cg, "f32[1,4,4,4]");
    /* batch groups: batch 4 / 2 = 2 */
    int32_t cbg = OP(OP_CONVOLUTION, "f32[2,3,3,4]", 2, bi, kbi);
    conv_dnums(cbg, 2);
    window(cbg, 2, one, NULL, NULL, NULL, NULL, NULL);
    test_x(&I(cbg)->a)->batch_group_count = 2;
    expect_shape(cbg, "f32[2,3,3,4]");
    /* window size must be the kernel's spatial size */
    int32_t cw = OP(OP_CONVOLUTION, "f32[1,5,5,4]", 2, in, k);
    conv_dnums(cw, 2);
    window(cw, 2, two, NULL, NULL, NULL, NULL, NULL);
    expect_error(cw, "window dimension 0 has size 2 but kernel spatial dimension 0 has size 3");
    int32_t cn = OP(OP_CONVOLUTION, "f32[1,5,5,4]", 2, in, k);
    window(cn, 2, three, NULL, one, one, NULL, NULL);
    expect_error(cn, "needs a dim_labels");
}

/* ------------------------------------------------------------------ */
/* reductions, windows, gather/scatter, sort, map                      */
/* ------------------------------------------------------------------ */

static void test_reduce(void **state)
{
    (void)state;
    int32_t add = scalar_comp("add", "f32 f32", OP_ADD, 0, 1, "f32[]");
    int32_t x = P("f32[4,5]"), y = P("s32[4,5]"), z = P("f32[]"), zs = P("s32[]");
    int32_t r = OP(OP_REDUCE, "f32[4]", 2, x, z);
    I(r)->a.dimensions = L("1");
    call(r, add);
    expect_shape(r, "f32[4]");
    /* variadic: (acc_f, acc_s, x_f, x_s) -> (f32, s32) */
    int32_t pair = ir_add_computation(M, "pair");
    IrComputation *pc = M->comp[pair];
    int32_t p0 = param_in(pc, 0, "f32[]"), p1 = param_in(pc, 1, "s32[]");
    param_in(pc, 2, "f32[]");
    param_in(pc, 3, "s32[]");
    int32_t tops[2] = {p0, p1};
    pc->root = add_in(pc, OP_TUPLE, "(f32[], s32[])", 2, tops);
    int32_t rv = OP(OP_REDUCE, "(f32[5], s32[5])", 4, x, y, z, zs);
    I(rv)->a.dimensions = L("0");
    call(rv, pair);
    expect_shape(rv, "(f32[5], s32[5])");
    /* the reducer must take the init type */
    int32_t rb = OP(OP_REDUCE, "s32[4]", 2, y, zs);
    I(rb)->a.dimensions = L("1");
    call(rb, add);
    expect_error(rb, "reduction computation add: parameter 0 must be s32[], got f32[]");
    int32_t rd = OP(OP_REDUCE, "f32[4]", 2, x, z);
    I(rd)->a.dimensions = L("1,1");
    call(rd, add);
    expect_error(rd, "appears twice");
    int32_t rc = OP(OP_REDUCE, "f32[4]", 2, x, z);
    I(rc)->a.dimensions = L("1");
    expect_error(rc, "expects 1 called computation, got 0");
    int32_t ro = OP(OP_REDUCE, "f32[4]", 3, x, z, z);
    I(ro)->a.dimensions = L("1");
    call(ro, add);
    expect_error(ro, "even number of operands");
}

static void test_windows(void **state)
{
    (void)state;
    int32_t add = scalar_comp("add", "f32 f32", OP_ADD, 0, 1, "f32[]");
    int32_t ge = scalar_comp("ge", "f32 f32", OP_COMPARE, 0, 1, "pred[]");
    int32_t x = P("f32[4,6]"), z = P("f32[]"), src = P("f32[2,2]"), bad = P("f32[2,3]");
    const int64_t sz[2] = {2, 3};
    /* (4-2)/2+1 = 2, (6-3)/3+1 = 2 */
    int32_t rw = OP(OP_REDUCE_WINDOW, "f32[2,2]", 2, x, z);
    window(rw, 2, sz, sz, NULL, NULL, NULL, NULL);
    call(rw, add);
    expect_shape(rw, "f32[2,2]");
    /* padding 1_1 on dim 1: (6 + 2 - 3)/3 + 1 = 2; pad 0_1 on dim 0: (4+1-2)/2+1 = 2 */
    const int64_t lo[2] = {0, 1}, hi[2] = {1, 1};
    int32_t rp = OP(OP_REDUCE_WINDOW, "f32[2,2]", 2, x, z);
    window(rp, 2, sz, sz, lo, hi, NULL, NULL);
    call(rp, add);
    expect_shape(rp, "f32[2,2]");
    int32_t rr = OP(OP_REDUCE_WINDOW, "f32[2,2]", 2, x, z);
    window(rr, 1, sz, sz, NULL, NULL, NULL, NULL);
    call(rr, add);
    expect_error(rr, "window has 1 dimensions but the operand f32[4,6] has rank 2");

    int32_t ss = OP(OP_SELECT_AND_SCATTER, "f32[4,6]", 3, x, src, z);
    window(ss, 2, sz, sz, NULL, NULL, NULL, NULL);
    call(ss, ge);
    call(ss, add);
    expect_shape(ss, "f32[4,6]");
    int32_t sb = OP(OP_SELECT_AND_SCATTER, "f32[4,6]", 3, x, bad, z);
    window(sb, 2, sz, sz, NULL, NULL, NULL, NULL);
    call(sb, ge);
    call(sb, add);
    expect_error(sb, "source f32[2,3] must have the windowed operand's shape f32[2,2]");
    int32_t sw = OP(OP_SELECT_AND_SCATTER, "f32[4,6]", 3, x, src, z);
    window(sw, 2, sz, sz, NULL, NULL, NULL, NULL);
    call(sw, add);
    call(sw, add);
    expect_error(sw, "select computation add must return pred[]");
}

static void test_gather(void **state)
{
    (void)state;
    int32_t x = P("f32[5,4]"), ix = P("s32[3,1]"), iv = P("s32[3]"), bx = P("f32[2,5,4]"),
            bix = P("s32[2,3,1]"), fx = P("f32[3,1]");
    /* offset dim 1 = slice of operand dim 1 (4); batch dim 0 = indices dim 0 (3) */
    /* (instruction pointers move when the array grows: keep values) */
    IrGatherDnums dn = {0};
    dn.offset_dims = L("1");
    dn.collapsed_slice_dims = L("0");
    dn.start_index_map = L("0");
    dn.index_vector_dim = 1;
    const IrGatherDnums *d = &dn;
    int32_t g = OP(OP_GATHER, "f32[3,4]", 2, x, ix);
    test_x(&I(g)->a)->gather = dn;
    test_x(&I(g)->a)->slice_sizes = L("1,4");
    expect_shape(g, "f32[3,4]");
    /* index_vector_dim == rank: indices s32[3] read as [3,1] */
    int32_t gv = OP(OP_GATHER, "f32[3,4]", 2, x, iv);
    test_x(&I(gv)->a)->gather = *d;
    test_x(&I(gv)->a)->slice_sizes = L("1,4");
    expect_shape(gv, "f32[3,4]");
    /* batching: operand dim 0 pairs with indices dim 0 (2); output
     * [2 (index dim 0), 3 (index dim 1), 4 (operand dim 2)] */
    int32_t gb = OP(OP_GATHER, "f32[2,3,4]", 2, bx, bix);
    IrGatherDnums *e = &test_x(&I(gb)->a)->gather; /* no instruction is added while e is used */
    e->offset_dims = L("2");
    e->collapsed_slice_dims = L("1");
    e->start_index_map = L("1");
    e->operand_batching_dims = L("0");
    e->start_indices_batching_dims = L("0");
    e->index_vector_dim = 2;
    test_x(&I(gb)->a)->slice_sizes = L("1,1,4");
    expect_shape(gb, "f32[2,3,4]");
    int32_t gs = OP(OP_GATHER, "f32[3,5]", 2, x, ix);
    test_x(&I(gs)->a)->gather = *d;
    test_x(&I(gs)->a)->slice_sizes = L("1,5");
    expect_error(gs, "slice size 5 of dimension 1 is out of range [0, 4]");
    int32_t gc = OP(OP_GATHER, "f32[3,4]", 2, x, ix);
    test_x(&I(gc)->a)->gather = *d;
    test_x(&I(gc)->a)->slice_sizes = L("2,4");
    expect_error(gc, "collapsed or batching dimension 0 must have slice size 0 or 1");
    int32_t gm = OP(OP_GATHER, "f32[3,4]", 2, x, ix);
    test_x(&I(gm)->a)->gather = *d;
    test_x(&I(gm)->a)->gather.start_index_map = L("0,1");
    test_x(&I(gm)->a)->slice_sizes = L("1,4");
    expect_error(gm, "start_index_map={0,1} has 2 entries but the index vector has 1");
    int32_t gf = OP(OP_GATHER, "f32[3,4]", 2, x, fx);
    test_x(&I(gf)->a)->gather = *d;
    test_x(&I(gf)->a)->slice_sizes = L("1,4");
    expect_error(gf, "start indices must be integers");
}

static void test_scatter(void **state)
{
    (void)state;
    int32_t add = scalar_comp("add", "f32 f32", OP_ADD, 0, 1, "f32[]");
    int32_t x = P("f32[5,4]"), ix = P("s32[3,1]"), u = P("f32[3,4]"), ub = P("f32[3,5]"),
            un = P("f32[2,4]");
    IrScatterDnums dn = {0};
    dn.update_window_dims = L("1");
    dn.inserted_window_dims = L("0");
    dn.scatter_dims_to_operand_dims = L("0");
    dn.index_vector_dim = 1;
    const IrScatterDnums *d = &dn;
    int32_t s = OP(OP_SCATTER, "f32[5,4]", 3, x, ix, u);
    test_x(&I(s)->a)->scatter = dn;
    call(s, add);
    expect_shape(s, "f32[5,4]");
    int32_t sb = OP(OP_SCATTER, "f32[5,4]", 3, x, ix, ub);
    test_x(&I(sb)->a)->scatter = *d;
    call(sb, add);
    expect_error(sb, "update window dimension 1 has size 5, larger than operand dimension 1 (4)");
    int32_t sn = OP(OP_SCATTER, "f32[5,4]", 3, x, ix, un);
    test_x(&I(sn)->a)->scatter = *d;
    call(sn, add);
    expect_error(sn, "update scatter dimension 0 has size 2 but index dimension 0 has size 3");
    int32_t se = OP(OP_SCATTER, "f32[5,4]", 2, x, ix);
    test_x(&I(se)->a)->scatter = *d;
    call(se, add);
    expect_error(se, "expects at least 3 operands, got 2");
    int32_t sr = OP(OP_SCATTER, "f32[5,4]", 3, x, ix, u);
    test_x(&I(sr)->a)->scatter = *d;
    test_x(&I(sr)->a)->scatter.update_window_dims = L("");
    call(sr, add);
    expect_error(sr, "must add up to the operand rank 2");
}

static void test_sort_map(void **state)
{
    (void)state;
    int32_t gt = scalar_comp("gt", "f32 f32", OP_COMPARE, 0, 1, "pred[]");
    int32_t gt2 = scalar_comp("gt2", "f32 f32 s32 s32", OP_COMPARE, 0, 1, "pred[]");
    int32_t add = scalar_comp("add", "f32 f32", OP_ADD, 0, 1, "f32[]");
    int32_t x = P("f32[10]"), y = P("s32[10]"), z = P("f32[4]");
    int32_t s = OP(OP_SORT, "f32[10]", 1, x);
    I(s)->a.dimensions = L("0");
    call(s, gt);
    expect_shape(s, "f32[10]");
    int32_t s2 = OP(OP_SORT, "(f32[10], s32[10])", 2, x, y);
    I(s2)->a.dimensions = L("0");
    call(s2, gt2);
    expect_shape(s2, "(f32[10], s32[10])");
    int32_t sb = OP(OP_SORT, "f32[10]", 1, x);
    I(sb)->a.dimensions = L("0");
    call(sb, add);
    expect_error(sb, "comparator computation add must return pred[], it returns f32[]");
    int32_t sc = OP(OP_SORT, "(f32[10], s32[10])", 2, x, y);
    I(sc)->a.dimensions = L("0");
    call(sc, gt);
    expect_error(sc, "comparator computation gt must take 4 parameters, it takes 2");

    int32_t mp = OP(OP_MAP, "f32[4]", 2, z, z);
    call(mp, add);
    expect_shape(mp, "f32[4]");
    int32_t mb = OP(OP_MAP, "f32[4]", 2, z, x);
    call(mb, add);
    expect_error(mb, "same dimensions");
}

/* ------------------------------------------------------------------ */
/* control flow                                                        */
/* ------------------------------------------------------------------ */

static void test_control_flow(void **state)
{
    (void)state;
    /* callee (f32[2]) -> f32[2] */
    int32_t ci = ir_add_computation(M, "neg");
    IrComputation *cc = M->comp[ci];
    int32_t cp = param_in(cc, 0, "f32[2]");
    cc->root = add_in(cc, OP_NEGATE, "f32[2]", 1, &cp);
    /* condition (s32[]) -> pred[], body (s32[]) -> s32[] */
    int32_t wc = ir_add_computation(M, "cond");
    IrComputation *wcc = M->comp[wc];
    int32_t wp = param_in(wcc, 0, "s32[]");
    int32_t wops[2] = {wp, wp};
    wcc->root = add_in(wcc, OP_COMPARE, "pred[]", 2, wops);
    wcc->instr[wcc->root].a.direction = CMP_LT;
    int32_t wb = ir_add_computation(M, "body");
    IrComputation *wbc = M->comp[wb];
    int32_t bp = param_in(wbc, 0, "s32[]");
    int32_t bops[2] = {bp, bp};
    wbc->root = add_in(wbc, OP_ADD, "s32[]", 2, bops);
    /* branches: (f32[2]) -> f32[3] and (s32[]) -> f32[3] */
    int32_t b0 = ir_add_computation(M, "b0");
    param_in(M->comp[b0], 0, "f32[2]");
    M->comp[b0]->root = add_in(M->comp[b0], OP_CONSTANT, "f32[3]", 0, NULL);
    int32_t b1 = ir_add_computation(M, "b1");
    param_in(M->comp[b1], 0, "s32[]");
    M->comp[b1]->root = add_in(M->comp[b1], OP_CONSTANT, "f32[3]", 0, NULL);

    int32_t f = P("f32[2]"), s = P("s32[]"), pr = P("pred[]");
    int32_t c = OP(OP_CALL, "f32[2]", 1, f);
    call(c, ci);
    expect_shape(c, "f32[2]");
    int32_t cb = OP(OP_CALL, "f32[2]", 1, s);
    call(cb, ci);
    expect_error(cb, "operand 0 is s32[] but parameter 0 of neg is f32[2]");

    int32_t w = OP(OP_WHILE, "s32[]", 1, s);
    call(w, wc);
    call(w, wb);
    expect_shape(w, "s32[]");
    int32_t wbad = OP(OP_WHILE, "s32[]", 1, s);
    call(wbad, wb);
    call(wbad, wb);
    expect_error(wbad, "condition computation body must return pred[], it returns s32[]");
    int32_t wf = OP(OP_WHILE, "f32[2]", 1, f);
    call(wf, wc);
    call(wf, wb);
    expect_error(wf, "condition computation cond takes s32[] but is given f32[2]");

    int32_t k = OP(OP_CONDITIONAL, "f32[3]", 3, s, f, s);
    call(k, b0);
    call(k, b1);
    expect_shape(k, "f32[3]");
    int32_t kp = OP(OP_CONDITIONAL, "f32[3]", 4, pr, f, s, s);
    call(kp, b0);
    call(kp, b1);
    call(kp, b1);
    expect_error(kp, "a pred selector needs 2 branch computations, got 3");
    int32_t kn = OP(OP_CONDITIONAL, "f32[3]", 2, s, f);
    call(kn, b0);
    call(kn, b1);
    expect_error(kn, "2 branch computations need 3 operands, got 2");
    int32_t kf = OP(OP_CONDITIONAL, "f32[3]", 3, f, f, s);
    call(kf, b0);
    call(kf, b1);
    expect_error(kf, "branch selector must be pred[] or s32[]");
}

/* ------------------------------------------------------------------ */
/* collectives                                                         */
/* ------------------------------------------------------------------ */

static void test_collectives(void **state)
{
    (void)state;
    int32_t add = scalar_comp("add", "f32 f32", OP_ADD, 0, 1, "f32[]");
    int32_t x = P("f32[2,4]"), y = P("f32[8,4]"), s = P("s32[3]"), v = P("f32[8]");
    /* all-gather over groups of 4 along dim 0: 2 * 4 = 8 */
    int32_t ag = OP(OP_ALL_GATHER, "f32[8,4]", 1, x);
    I(ag)->a.dimensions = L("0");
    groups(ag, 1, 4);
    expect_shape(ag, "f32[8,4]");
    /* no groups, no counts in the header: the size is read off the
     * declared shape (6 / 2 = 3 participants) */
    int32_t agd = OP(OP_ALL_GATHER, "f32[6,4]", 1, x);
    I(agd)->a.dimensions = L("0");
    I(agd)->a.channel_id = 1;
    expect_shape(agd, "f32[6,4]");
    /* reduce-scatter over groups of 2: 8 / 2 = 4 */
    int32_t rs = OP(OP_REDUCE_SCATTER, "f32[4,4]", 1, y);
    I(rs)->a.dimensions = L("0");
    groups(rs, 2, 2);
    call(rs, add);
    expect_shape(rs, "f32[4,4]");
    int32_t rsb = OP(OP_REDUCE_SCATTER, "f32[2,4]", 1, y);
    I(rsb)->a.dimensions = L("0");
    groups(rsb, 1, 3);
    call(rsb, add);
    expect_error(rsb, "dimension 0 of size 8 is not divisible by the group size 3");
    /* all-reduce of two operands is a tuple */
    int32_t ar = OP(OP_ALL_REDUCE, "(f32[2,4], f32[8,4])", 2, x, y);
    call(ar, add);
    expect_shape(ar, "(f32[2,4], f32[8,4])");
    int32_t arb = OP(OP_ALL_REDUCE, "s32[3]", 1, s);
    call(arb, add);
    expect_error(arb, "parameter 0 must be s32[], got f32[]");
    int32_t a2a = OP(OP_ALL_TO_ALL, "f32[8]", 1, v);
    I(a2a)->a.dimensions = L("0");
    groups(a2a, 1, 3);
    expect_error(a2a, "split dimension 0 of size 8 is not divisible by the group size 3");
    int32_t a2b = OP(OP_ALL_TO_ALL, "f32[8]", 1, v);
    I(a2b)->a.dimensions = L("0");
    groups(a2b, 2, 4);
    expect_shape(a2b, "f32[8]");
    int32_t a2t = OP(OP_ALL_TO_ALL, "(f32[8], f32[8])", 2, v, v);
    groups(a2t, 1, 2);
    expect_shape(a2t, "(f32[8], f32[8])");
    int32_t a2n = OP(OP_ALL_TO_ALL, "(f32[8], f32[8])", 2, v, v);
    groups(a2n, 1, 4);
    expect_error(a2n, "the tuple form with 2 operands needs groups of 2 participants, got 4");
    int32_t gu = OP(OP_ALL_GATHER, "f32[8,4]", 1, x);
    I(gu)->a.dimensions = L("0");
    groups(gu, 2, 2);
    I(gu)->a.x->replica_groups.group_size[1] = 1;
    expect_error(gu, "replica groups must all have the same size");
    int32_t cp = OP(OP_COLLECTIVE_PERMUTE, "f32[8]", 1, v);
    test_x(&I(cp)->a)->source_target_pairs = L("0,1,1,0");
    expect_shape(cp, "f32[8]");
    int32_t cpd = OP(OP_COLLECTIVE_PERMUTE, "f32[8]", 1, v);
    test_x(&I(cpd)->a)->source_target_pairs = L("0,1,0,2");
    expect_error(cpd, "source 0 appears twice");
    /* with the header's counts: cross-replica all-gather over 2 replicas */
    M->replica_count = 2;
    int32_t agr = OP(OP_ALL_GATHER, "f32[4,4]", 1, x);
    I(agr)->a.dimensions = L("0");
    expect_shape(agr, "f32[4,4]");
    int32_t agw = OP(OP_ALL_GATHER, "f32[6,4]", 1, x);
    I(agw)->a.dimensions = L("0");
    expect_shape(agw, "f32[4,4]"); /* the declared f32[6,4] is wrong */
}

/* ------------------------------------------------------------------ */
/* custom-call, host ops, randomness, fft                              */
/* ------------------------------------------------------------------ */

static void test_custom_and_host(void **state)
{
    (void)state;
    int32_t x = P("f32[8,4]"), tk = P("token[]"), a = P("f32[]"), b = P("f32[]"), si = P("s32[]"),
            st = P("u64[2]");
    int32_t cc = OP(OP_CUSTOM_CALL, "(s32[3], f32[])", 1, x);
    test_x(&I(cc)->a)->custom_call_target = "anything";
    expect_shape(cc, "(s32[3], f32[])"); /* the declared shape stands */
    int32_t fs = OP(OP_CUSTOM_CALL, "f32[4,4]", 1, x);
    test_x(&I(fs)->a)->custom_call_target = "SPMDFullToShardShape";
    expect_shape(fs, "f32[4,4]");
    int32_t fr = OP(OP_CUSTOM_CALL, "f32[4]", 1, x);
    test_x(&I(fr)->a)->custom_call_target = "SPMDFullToShardShape";
    expect_error(fr, "keeps the element type and rank of f32[8,4], declared f32[4]");
    int32_t sh = OP(OP_CUSTOM_CALL, "f32[8,2]", 1, x);
    test_x(&I(sh)->a)->custom_call_target = "Sharding";
    expect_error(sh, "Sharding keeps the operand shape");

    expect_shape(OP(OP_INFEED, "((f32[2]), token[])", 1, tk), "((f32[2]), token[])");
    expect_error(OP(OP_INFEED, "f32[2]", 1, tk), "(data, token[]) tuple");
    expect_shape(OP(OP_OUTFEED, "token[]", 2, x, tk), "token[]");
    expect_error(OP(OP_OUTFEED, "token[]", 2, x, x), "must be a token");

    int32_t r = OP(OP_RNG, "f32[3,3]", 2, a, b);
    test_x(&I(r)->a)->distribution = "rng_uniform";
    expect_shape(r, "f32[3,3]");
    int32_t rn = OP(OP_RNG, "s32[3]", 2, si, si);
    test_x(&I(rn)->a)->distribution = "rng_normal";
    expect_error(rn, "rng_normal needs floating-point parameters");
    int32_t rm = OP(OP_RNG, "f32[3]", 2, a, si);
    test_x(&I(rm)->a)->distribution = "rng_uniform";
    expect_error(rm, "one type");
    expect_shape(OP(OP_RNG_BIT_GENERATOR, "(u64[2], u32[4,4])", 1, st), "(u64[2], u32[4,4])");
    expect_error(OP(OP_RNG_BIT_GENERATOR, "(u64[3], u32[4,4])", 1, st), "result state u64[3]");
}

static void test_fft(void **state)
{
    (void)state;
    int32_t c = P("c64[4,8]"), f = P("f32[4,8]"), h = P("c64[4,5]");
    int32_t a = OP(OP_FFT, "c64[4,8]", 1, c);
    test_x(&I(a)->a)->fft_type = "FFT";
    test_x(&I(a)->a)->fft_length = L("8");
    expect_shape(a, "c64[4,8]");
    /* RFFT: 8 reals -> 8/2+1 = 5 complex */
    int32_t r = OP(OP_FFT, "c64[4,5]", 1, f);
    test_x(&I(r)->a)->fft_type = "RFFT";
    test_x(&I(r)->a)->fft_length = L("8");
    expect_shape(r, "c64[4,5]");
    int32_t ir = OP(OP_FFT, "f32[4,8]", 1, h);
    test_x(&I(ir)->a)->fft_type = "IRFFT";
    test_x(&I(ir)->a)->fft_length = L("8");
    expect_shape(ir, "f32[4,8]");
    int32_t bad = OP(OP_FFT, "c64[4,8]", 1, f);
    test_x(&I(bad)->a)->fft_type = "FFT";
    test_x(&I(bad)->a)->fft_length = L("8");
    expect_error(bad, "FFT needs a complex operand");
    int32_t bl = OP(OP_FFT, "c64[4,8]", 1, c);
    test_x(&I(bl)->a)->fft_type = "FFT";
    test_x(&I(bl)->a)->fft_length = L("4");
    expect_error(bl, "operand dimension 1 is 8 but fft_length says 4");
}

static void test_bad_references(void **state)
{
    (void)state;
    int32_t x = P("f32[2]");
    int32_t n = OP(OP_NEGATE, "f32[2]", 1, x);
    I(n)->opnd[0] = 99;
    expect_error(n, "operand 0 refers to instruction index 99, out of range");
    int32_t r = OP(OP_CALL, "f32[2]", 1, x);
    call(r, 42);
    expect_error(r, "called computation 0 has index 42, out of range");
    int32_t e = OP(OP_NEGATE, "f32[2]", 1, x);
    call(e, 0);
    expect_error(e, "expects 0 called computations, got 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_binary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_convert, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_clamp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_reshape_transpose, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad_concat_reverse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_values_and_tuples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_convolution, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reduce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scatter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sort_map, setup, teardown),
        cmocka_unit_test_setup_teardown(test_control_flow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collectives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom_and_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_references, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
