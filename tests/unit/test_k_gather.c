/*
 * test_k_gather.c: gather and scatter (device/k_gather.c), run as HLO text
 * through dev_execute. Expected values are worked out by hand in the
 * comments, or by a naive formula written here (one element at a time,
 * straight from XLA's definition).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/device.h"
#include "kernel_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* Parse and run with n arguments, which it releases; returns the result. */
static DevValue *run(const char *txt, int n, DevValue **args)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = exec_module(m, n, args, &out, &d);
    if (st != IR_OK)
        print_message("run failed: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    ir_diag_clear(&d);
    ir_module_free(m);
    for (int i = 0; i < n; i++)
        dev_value_unref(args[i]);
    return out;
}

static void expect_f32(const DevValue *v, const float *want, int64_t n)
{
    assert_int_equal(v->shape.type, IR_F32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++)
        if (((const float *)v->data)[i] != want[i]) {
            print_message("element %lld: got %g want %g\n", (long long)i,
                          (double)((const float *)v->data)[i], (double)want[i]);
            fail();
        }
}

static void expect_s32(const DevValue *v, const int32_t *want, int64_t n)
{
    assert_int_equal(v->shape.type, IR_S32);
    assert_int_equal(dev_value_elements(v), n);
    for (int64_t i = 0; i < n; i++)
        if (((const int32_t *)v->data)[i] != want[i]) {
            print_message("element %lld: got %d want %d\n", (long long)i,
                          ((const int32_t *)v->data)[i], want[i]);
            fail();
        }
}

static const char *COMPS =
    "add {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] add(a, b)\n}\n"
    "set {\n  a = s32[] parameter(0)\n  ROOT b = s32[] parameter(1)\n}\n"
    "add_slow {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
    "  s = s32[] add(a, b)\n  z = s32[] subtract(a, a)\n  ROOT r = s32[] add(s, z)\n}\n"
    "addf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"
    "maxf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, b)\n}\n";

/* ------------------------------------------------------------------ */
/* gather                                                              */
/* ------------------------------------------------------------------ */

/* Rows of {{1,2},{3,4},{5,6}} at indices {2, 7, -3} with the implicit
 * index vector dim (index_vector_dim = rank of indices): 7 clamps to 2,
 * -3 clamps to 0 -> {{5,6},{5,6},{1,2}}. */
static void test_gather_rows_clamped(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = f32[3,2] parameter(0)\n  i = s32[3] parameter(1)\n"
        "  ROOT g = f32[3,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
        " start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n";
    DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6}),
                         val(IR_S32, 1, (int64_t[]){3}, (int32_t[]){2, 7, -3})};
    DevValue *r = run(txt, 2, args);
    expect_f32(r, (float[]){5, 6, 5, 6, 1, 2}, 6);
    dev_value_unref(r);
}

/* 2x2 windows of a 4x4 iota {0..15} at (index vectors along dim 0 of the
 * indices) (0,0), (3,3) -> clamped to (2,2), (1,-5) -> (1,0):
 * {{0,1},{4,5}}, {{10,11},{14,15}}, {{4,5},{8,9}}. The batch dim is the
 * last output dim (offset_dims={0,1}). */
static void test_gather_windows_offset_first(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = s32[4,4] parameter(0)\n  i = s64[2,3] parameter(1)\n"
        "  ROOT g = s32[2,2,3] gather(x, i), offset_dims={0,1}, collapsed_slice_dims={},"
        " start_index_map={0,1}, index_vector_dim=0, slice_sizes={2,2}\n}\n";
    int32_t x[16];
    for (int i = 0; i < 16; i++)
        x[i] = i;
    int64_t idx[] = {0, 3, 1, /* row coordinates */ 0, 3, -5 /* column coordinates */};
    DevValue *args[2] = {val(IR_S32, 2, (int64_t[]){4, 4}, x), val(IR_S64, 2, (int64_t[]){2, 3}, idx)};
    DevValue *r = run(txt, 2, args);
    /* out[a][b][n] = window n element (a, b). */
    int32_t win[3][4] = {{0, 1, 4, 5}, {10, 11, 14, 15}, {4, 5, 8, 9}}, want[12];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int n = 0; n < 3; n++)
                want[(a * 2 + b) * 3 + n] = win[n][a * 2 + b];
    expect_s32(r, want, 12);
    dev_value_unref(r);
}

/* Batching dims: operand [2,3,4] with batch dim 0, indices [2,1] with
 * batch dim 0: out[b] = x[b, idx[b], :]. idx = {2, 1}. Unsigned indices. */
static void test_gather_batching_dims(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = f32[2,3,4] parameter(0)\n  i = u8[2,1] parameter(1)\n"
        "  ROOT g = f32[2,4] gather(x, i), offset_dims={1}, collapsed_slice_dims={1},"
        " start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0},"
        " index_vector_dim=1, slice_sizes={1,1,4}\n}\n";
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    DevValue *args[2] = {val(IR_F32, 3, (int64_t[]){2, 3, 4}, x),
                         val(IR_U8, 2, (int64_t[]){2, 1}, (uint8_t[]){2, 1})};
    DevValue *r = run(txt, 2, args);
    /* b=0: x[0][2][:] = 8..11; b=1: x[1][1][:] = 16+4.. = 16..19 */
    expect_f32(r, (float[]){8, 9, 10, 11, 16, 17, 18, 19}, 8);
    dev_value_unref(r);
}

/* Naive gather straight from the definition, compared on a 3-D case with
 * interleaved offset / batch output dims and a middle index_vector_dim:
 * operand [5,4,6], indices [3,2,2] (vector dim 1: (dim0, dim2) starts),
 * slice_sizes {1,3,2}, collapsed {0}, offset_dims {1,3} -> output
 * [3, 3(slice dim1), 2(batch idx dim 2), 2(slice dim2)]. */
static void test_gather_naive(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = s32[5,4,6] parameter(0)\n  i = s32[3,2,2] parameter(1)\n"
        "  ROOT g = s32[3,3,2,2] gather(x, i), offset_dims={1,3}, collapsed_slice_dims={0},"
        " start_index_map={0,2}, index_vector_dim=1, slice_sizes={1,3,2}\n}\n";
    int32_t x[120], idx[12] = {4, 9, 0, 5, -1, 2, 3, 1, 2, 2, 0, 4};
    for (int i = 0; i < 120; i++)
        x[i] = i * 3 + 1;
    int32_t want[36];
    for (int b0 = 0; b0 < 3; b0++)
        for (int o1 = 0; o1 < 3; o1++)
            for (int b1 = 0; b1 < 2; b1++)
                for (int o2 = 0; o2 < 2; o2++) {
                    int v0 = idx[(b0 * 2 + 0) * 2 + b1], v2 = idx[(b0 * 2 + 1) * 2 + b1];
                    int s0 = v0 < 0 ? 0 : v0 > 4 ? 4 : v0;   /* 5 - 1 */
                    int s2 = v2 < 0 ? 0 : v2 > 4 ? 4 : v2;   /* 6 - 2 */
                    want[((b0 * 3 + o1) * 2 + b1) * 2 + o2] = x[(s0 * 4 + o1) * 6 + s2 + o2];
                }
    DevValue *args[2] = {val(IR_S32, 3, (int64_t[]){5, 4, 6}, x), val(IR_S32, 3, (int64_t[]){3, 2, 2}, idx)};
    DevValue *r = run(txt, 2, args);
    expect_s32(r, want, 36);
    dev_value_unref(r);
}

/* No indices at all (batch size 0): an empty result. */
static void test_gather_empty(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = f32[3,2] parameter(0)\n  i = s32[0,1] parameter(1)\n"
        "  ROOT g = f32[0,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
        " start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n";
    DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){3, 2}, NULL), val(IR_S32, 2, (int64_t[]){0, 1}, NULL)};
    DevValue *r = run(txt, 2, args);
    assert_int_equal(dev_value_elements(r), 0);
    dev_value_unref(r);
}

/* ------------------------------------------------------------------ */
/* scatter                                                             */
/* ------------------------------------------------------------------ */

/* Scalar updates into s32[4] {0,0,0,0} at {1, 1, 9, -1} with {5,6,7,8}:
 * add -> {0,11,0,0} (9 and -1 are dropped); set -> {0,6,0,0} (in order). */
static void test_scatter_scalar_updates(void **state)
{
    (void)state;
    const char *comps[] = {"add", "add_slow", "set"};
    const int32_t want[][4] = {{0, 11, 0, 0}, {0, 11, 0, 0}, {0, 6, 0, 0}};
    for (int c = 0; c < 3; c++) {
        char txt[2048];
        snprintf(txt, sizeof txt,
                 "HloModule m\n%sENTRY e {\n  x = s32[4] parameter(0)\n  i = s32[4,1] parameter(1)\n"
                 "  u = s32[4] parameter(2)\n"
                 "  ROOT s = s32[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},"
                 " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%s\n}\n",
                 COMPS, comps[c]);
        DevValue *args[3] = {val(IR_S32, 1, (int64_t[]){4}, NULL),
                             val(IR_S32, 2, (int64_t[]){4, 1}, (int32_t[]){1, 1, 9, -1}),
                             val(IR_S32, 1, (int64_t[]){4}, (int32_t[]){5, 6, 7, 8})};
        DevValue *r = run(txt, 3, args);
        expect_s32(r, want[c], 4);
        dev_value_unref(r);
    }
}

/* A scatter at its operand's last use updates it in place (k_gather.c,
 * as dynamic-update-slice; partition/memory.c's reused_operand): n dies
 * at s. An operand read again (n2, in the result) keeps its values and
 * the scatter writes a copy. x = {1,2,3,4}; rows 1 and 3 get 10 and 20
 * added: {-1, 8, -3, 16}. */
static void test_scatter_in_place(void **state)
{
    (void)state;
    DevValue *a[3] = {val(IR_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4}),
                      val(IR_S32, 2, (int64_t[]){2, 1}, (int32_t[]){1, 3}),
                      val(IR_F32, 1, (int64_t[]){2}, (float[]){10, 20})};
    DevValue *r = run("HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                      " ROOT s = f32[] add(a, b) }\n"
                      "ENTRY e {\n x = f32[4] parameter(0)\n i = s32[2,1] parameter(1)\n"
                      " u = f32[2] parameter(2)\n n = f32[4] negate(x)\n"
                      " s = f32[4] scatter(n, i, u), update_window_dims={}, inserted_window_dims={0},"
                      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
                      " n2 = f32[4] negate(x)\n"
                      " s2 = f32[4] scatter(n2, i, u), update_window_dims={}, inserted_window_dims={0},"
                      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
                      " ROOT t = (f32[4], f32[4], f32[4]) tuple(s, s2, n2)\n}\n",
                      3, a);
    expect_f32(r->elems[0], (float[]){-1, 8, -3, 16}, 4);
    expect_f32(r->elems[1], (float[]){-1, 8, -3, 16}, 4);
    expect_f32(r->elems[2], (float[]){-1, -2, -3, -4}, 4);
    dev_value_unref(r);
}
/* Windows that do not fit are dropped whole: operand s32[6] {0..5},
 * windows of 3 at {1, 4, -1} (implicit index vector dim) with updates
 * {{10,20,30},{40,50,60},{70,80,90}}: only the first lands ->
 * {0, 11, 22, 33, 4, 5}. */
static void test_scatter_window_out_of_bounds(void **state)
{
    (void)state;
    char txt[2048];
    snprintf(txt, sizeof txt,
             "HloModule m\n%sENTRY e {\n  x = s32[6] parameter(0)\n  i = s32[3] parameter(1)\n"
             "  u = s32[3,3] parameter(2)\n"
             "  ROOT s = s32[6] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={},"
             " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
             COMPS);
    DevValue *args[3] = {val(IR_S32, 1, (int64_t[]){6}, (int32_t[]){0, 1, 2, 3, 4, 5}),
                         val(IR_S32, 1, (int64_t[]){3}, (int32_t[]){1, 4, -1}),
                         val(IR_S32, 2, (int64_t[]){3, 3}, (int32_t[]){10, 20, 30, 40, 50, 60, 70, 80, 90})};
    DevValue *r = run(txt, 3, args);
    expect_s32(r, (int32_t[]){0, 11, 22, 33, 4, 5}, 6);
    dev_value_unref(r);
}

/* Row updates of a 3x4 matrix (TF's scatter_nd_add on rows), f32 max:
 * rows {2, 0} get max with {{1,9,1,9},{5,5,5,5}} over x = 4 everywhere:
 * row 0 {5,5,5,5}, row 1 {4,4,4,4}, row 2 {4,9,4,9}. */
static void test_scatter_rows_max(void **state)
{
    (void)state;
    char txt[2048];
    snprintf(txt, sizeof txt,
             "HloModule m\n%sENTRY e {\n  x = f32[3,4] parameter(0)\n  i = s32[2,1] parameter(1)\n"
             "  u = f32[2,4] parameter(2)\n"
             "  ROOT s = f32[3,4] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0},"
             " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=maxf\n}\n",
             COMPS);
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = 4;
    DevValue *args[3] = {val(IR_F32, 2, (int64_t[]){3, 4}, x),
                         val(IR_S32, 2, (int64_t[]){2, 1}, (int32_t[]){2, 0}),
                         val(IR_F32, 2, (int64_t[]){2, 4}, (float[]){1, 9, 1, 9, 5, 5, 5, 5})};
    DevValue *r = run(txt, 3, args);
    expect_f32(r, (float[]){5, 5, 5, 5, 4, 4, 4, 4, 4, 9, 4, 9}, 12);
    dev_value_unref(r);
}

/* Variadic scatter through the general path: (sum, count) pairs.
 * operands f32[3] {0,0,0}, s32[3] {0,0,0}; indices {0, 2, 0};
 * updates {1.5, 2, 3} and {1, 1, 1} -> ({4.5, 0, 2}, {2, 0, 1}). */
static void test_scatter_variadic(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\npair {\n  a = f32[] parameter(0)\n  b = s32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = s32[] parameter(3)\n"
        "  s = f32[] add(a, c)\n  n = s32[] add(b, d)\n  ROOT t = (f32[], s32[]) tuple(s, n)\n}\n"
        "ENTRY e {\n  x = f32[3] parameter(0)\n  y = s32[3] parameter(1)\n  i = s32[3] parameter(2)\n"
        "  u = f32[3] parameter(3)\n  v = s32[3] parameter(4)\n"
        "  ROOT s = (f32[3], s32[3]) scatter(x, y, i, u, v), update_window_dims={},"
        " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
        " to_apply=pair\n}\n";
    DevValue *args[5] = {val(IR_F32, 1, (int64_t[]){3}, NULL), val(IR_S32, 1, (int64_t[]){3}, NULL),
                         val(IR_S32, 1, (int64_t[]){3}, (int32_t[]){0, 2, 0}),
                         val(IR_F32, 1, (int64_t[]){3}, (float[]){1.5f, 2, 3}),
                         val(IR_S32, 1, (int64_t[]){3}, (int32_t[]){1, 1, 1})};
    DevValue *r = run(txt, 5, args);
    assert_int_equal(r->shape.type, IR_TUPLE);
    expect_f32(r->elems[0], (float[]){4.5f, 0, 2}, 3);
    expect_s32(r->elems[1], (int32_t[]){2, 0, 1}, 3);
    dev_value_unref(r);
}

/* Batching dims: operand [2,4] (batch dim 0), indices [2,2] (batch dim 0,
 * two scalar updates per batch, implicit vector dim), updates [2,2]:
 * x[b][idx[b][j]] += u[b][j]. idx {{1,3},{0,0}}, u {{1,2},{3,4}} ->
 * {{0,1,0,2},{7,0,0,0}}. */
static void test_scatter_batching_dims(void **state)
{
    (void)state;
    char txt[2048];
    snprintf(txt, sizeof txt,
             "HloModule m\n%sENTRY e {\n  x = s32[2,4] parameter(0)\n  i = s32[2,2] parameter(1)\n"
             "  u = s32[2,2] parameter(2)\n"
             "  ROOT s = s32[2,4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={1},"
             " input_batching_dims={0}, scatter_indices_batching_dims={0},"
             " scatter_dims_to_operand_dims={1}, index_vector_dim=2, to_apply=add\n}\n",
             COMPS);
    DevValue *args[3] = {val(IR_S32, 2, (int64_t[]){2, 4}, NULL),
                         val(IR_S32, 2, (int64_t[]){2, 2}, (int32_t[]){1, 3, 0, 0}),
                         val(IR_S32, 2, (int64_t[]){2, 2}, (int32_t[]){1, 2, 3, 4})};
    DevValue *r = run(txt, 3, args);
    expect_s32(r, (int32_t[]){0, 1, 0, 2, 7, 0, 0, 0}, 8);
    dev_value_unref(r);
}

/* Fast path (add) and general path (add_slow) agree on a 2-D window
 * scatter with duplicate and out-of-bounds indices; a naive formula
 * checks one of them. Operand [5,6], 2x3 windows at (r, c) pairs along
 * dim 1 of indices [4,2]: (0,0), (3,3), (4,0) dropped (row 4+2 > 5),
 * (0,0) again. */
static void test_scatter_fast_vs_general(void **state)
{
    (void)state;
    int32_t idx[] = {0, 0, 3, 3, 4, 0, 0, 0}, u[24], want[30];
    for (int i = 0; i < 24; i++)
        u[i] = i * 10 + 1;
    for (int i = 0; i < 30; i++)
        want[i] = i;
    for (int n = 0; n < 4; n++) {
        int r0 = idx[n * 2], c0 = idx[n * 2 + 1];
        if (r0 < 0 || r0 > 5 - 2 || c0 < 0 || c0 > 6 - 3)
            continue;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                want[(r0 + a) * 6 + c0 + b] += u[(n * 2 + a) * 3 + b];
    }
    for (int slow = 0; slow < 2; slow++) {
        char txt[2048];
        snprintf(txt, sizeof txt,
                 "HloModule m\n%sENTRY e {\n  x = s32[5,6] parameter(0)\n  i = s32[4,2] parameter(1)\n"
                 "  u = s32[4,2,3] parameter(2)\n"
                 "  ROOT s = s32[5,6] scatter(x, i, u), update_window_dims={1,2}, inserted_window_dims={},"
                 " scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%s\n}\n",
                 COMPS, slow ? "add_slow" : "add");
        int32_t x[30];
        for (int i = 0; i < 30; i++)
            x[i] = i;
        DevValue *args[3] = {val(IR_S32, 2, (int64_t[]){5, 6}, x), val(IR_S32, 2, (int64_t[]){4, 2}, idx),
                             val(IR_S32, 3, (int64_t[]){4, 2, 3}, u)};
        DevValue *r = run(txt, 3, args);
        expect_s32(r, want, 30);
        dev_value_unref(r);
    }
}

/* Failure injection over gather + general-path scatter. */
static void test_gather_scatter_oom(void **state)
{
    (void)state;
    char txt[4096];
    snprintf(txt, sizeof txt,
             "HloModule m\n%sENTRY e {\n  x = s32[5,6] parameter(0)\n  i = s32[4,2] parameter(1)\n"
             "  g = s32[4,2,3] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={},"
             " start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}\n"
             "  ROOT s = s32[5,6] scatter(x, i, g), update_window_dims={1,2}, inserted_window_dims={},"
             " scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=add_slow\n}\n",
             COMPS);
    IrModule *m = parse_ok(txt);
    int32_t x[30], idx[] = {0, 0, 3, 3, 1, 2, 0, 0};
    for (int i = 0; i < 30; i++)
        x[i] = i;
    DevValue *args[2] = {val(IR_S32, 2, (int64_t[]){5, 6}, x), val(IR_S32, 2, (int64_t[]){4, 2}, idx)};
    DevValue *ref = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_module(m, 2, args, &ref, &d), IR_OK);
    int failures = 0;
    for (long n = 1; n < 100000; n++) {
        DevValue *out = NULL;
        ts_fail_alloc_after(n);
        IrStatus st = exec_module(m, 2, args, &out, &d);
        ts_fail_alloc_after(0);
        if (st == IR_OK) {
            assert_memory_equal(out->data, ref->data, (size_t)ref->nbytes);
            dev_value_unref(out);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        ir_diag_clear(&d);
        failures++;
    }
    assert_true(failures > 3);
    dev_value_unref(ref);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

/* A kernel-level error: slice sizes larger than the operand, planted after
 * parsing, give IR_EINPUT. */
static void test_gather_bad_slice(void **state)
{
    (void)state;
    const char *txt =
        "HloModule m\nENTRY e {\n  x = f32[3,2] parameter(0)\n  i = s32[3] parameter(1)\n"
        "  ROOT g = f32[3,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},"
        " start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n";
    IrModule *m = parse_ok(txt);
    IrComputation *c = ir_entry(m);
    c->instr[c->root].a.x->slice_sizes.v[1] = 9;
    DevValue *args[2] = {val(IR_F32, 2, (int64_t[]){3, 2}, NULL), val(IR_S32, 1, (int64_t[]){3}, NULL)};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_module(m, 2, args, &out, &d), IR_EINPUT);
    assert_null(out);
    assert_non_null(strstr(d.msg, "gather"));
    ir_diag_clear(&d);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_rows_clamped),
        cmocka_unit_test(test_gather_windows_offset_first),
        cmocka_unit_test(test_gather_batching_dims),
        cmocka_unit_test(test_gather_naive),
        cmocka_unit_test(test_gather_empty),
        cmocka_unit_test(test_scatter_scalar_updates),
        cmocka_unit_test(test_scatter_in_place),
        cmocka_unit_test(test_scatter_window_out_of_bounds),
        cmocka_unit_test(test_scatter_rows_max),
        cmocka_unit_test(test_scatter_variadic),
        cmocka_unit_test(test_scatter_batching_dims),
        cmocka_unit_test(test_scatter_fast_vs_general),
        cmocka_unit_test(test_gather_scatter_oom),
        cmocka_unit_test(test_gather_bad_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
