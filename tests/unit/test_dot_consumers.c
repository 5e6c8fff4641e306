/*
 * test_dot_consumers.c: elementwise consumers of a dot run in its
 * epilogue (ir/fusion_find.c's dot_consumers, IrFusionGroup.dot_feeds;
 * device/fusion.c's run_feeds, k_dot.c, sgemm_avx512.c's strips). Which
 * dots take their consumers in (tanh(dot), SGD's w - lr * transpose(dot),
 * a GELU of dot + bias over batch dims) and which do not (a dot read
 * twice, a dot read by a reduce, an add of an all-reduce's sum), and
 * that the fused run equals the unfused one bit for bit: in tessel's own
 * GEMM, fixed for the process
 * (strips of its tile rows, k over two blocks, rows and columns that
 * fill no whole tile, columns over two of its blocks), from B packed
 * once and kept, in the loops without a BLAS (after the product), and
 * through the range kernels (fusion_block) instead of the chunk
 * interpreter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "device/blas.h"
#include "device/device.h"
#include "device/fusion.h"
#include "kernel_test.h"
#include "fusion_test.h"

static const char *tanh_hlo =
    "HloModule t\n"
    "ENTRY main {\n"
    "  x = f32[37,300] parameter(0)\n"
    "  w = f32[300,1000] parameter(1)\n"
    "  d = f32[37,1000] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT t = f32[37,1000] tanh(d)\n"
    "}\n";

/* SGD's update of a weight by its gradient, written transposed (more
 * than IR_FUSION_TRANSPOSE_MAX elements: a smaller transpose joins the
 * update's group as a strided read instead). */
static const char *sgd_hlo =
    "HloModule s\n"
    "ENTRY main {\n"
    "  g = f32[53,150] parameter(0)\n"
    "  x = f32[53,500] parameter(1)\n"
    "  w = f32[500,150] parameter(2)\n"
    "  lr = f32[] parameter(3)\n"
    "  d = f32[150,500] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  dw = f32[500,150] transpose(d), dimensions={1,0}\n"
    "  blr = f32[500,150] broadcast(lr), dimensions={}\n"
    "  u = f32[500,150] multiply(blr, dw)\n"
    "  ROOT n = f32[500,150] subtract(w, u)\n"
    "}\n";

/* GELU (tanh's form, as jax.nn.gelu writes it) of a projection plus a
 * bias, the lhs with two free dims. */
static const char *gelu_hlo =
    "HloModule g\n"
    "ENTRY main {\n"
    "  x = f32[2,29,64] parameter(0)\n"
    "  w = f32[64,96] parameter(1)\n"
    "  b = f32[96] parameter(2)\n"
    "  d = f32[2,29,96] dot(x, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
    "  bb = f32[2,29,96] broadcast(b), dimensions={2}\n"
    "  y = f32[2,29,96] add(d, bb)\n"
    "  y2 = f32[2,29,96] multiply(y, y)\n"
    "  y3 = f32[2,29,96] multiply(y2, y)\n"
    "  c1 = f32[] constant(0.044715)\n"
    "  bc1 = f32[2,29,96] broadcast(c1), dimensions={}\n"
    "  t1 = f32[2,29,96] multiply(bc1, y3)\n"
    "  t2 = f32[2,29,96] add(y, t1)\n"
    "  c2 = f32[] constant(0.7978846)\n"
    "  bc2 = f32[2,29,96] broadcast(c2), dimensions={}\n"
    "  t3 = f32[2,29,96] multiply(bc2, t2)\n"
    "  t4 = f32[2,29,96] tanh(t3)\n"
    "  one = f32[] constant(1)\n"
    "  b1 = f32[2,29,96] broadcast(one), dimensions={}\n"
    "  t5 = f32[2,29,96] add(b1, t4)\n"
    "  half = f32[] constant(0.5)\n"
    "  bh = f32[2,29,96] broadcast(half), dimensions={}\n"
    "  t6 = f32[2,29,96] multiply(bh, y)\n"
    "  ROOT r = f32[2,29,96] multiply(t6, t5)\n"
    "}\n";

/* An update of a weight 1000 columns wide: tessel's own GEMM hands its
 * strips over 384 columns at a time (256 + 128 elements a row: a whole
 * chunk and a half one in the register path), then 232 (the
 * interpreter's tail); the weight a leaf fetched ahead (feeds_ahead), a
 * math function in the chain. */
static const char *wide_hlo =
    "HloModule w\n"
    "ENTRY main {\n"
    "  x = f32[24,64] parameter(0)\n"
    "  g = f32[24,1000] parameter(1)\n"
    "  w = f32[64,1000] parameter(2)\n"
    "  lr = f32[] parameter(3)\n"
    "  d = f32[64,1000] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  blr = f32[64,1000] broadcast(lr), dimensions={}\n"
    "  u = f32[64,1000] multiply(blr, d)\n"
    "  n = f32[64,1000] subtract(w, u)\n"
    "  t = f32[64,1000] tanh(n)\n"
    "  ROOT r = f32[64,1000] multiply(t, w)\n"
    "}\n";

/* A batched dot, its consumer a divide by another array. */
static const char *batched_hlo =
    "HloModule b\n"
    "ENTRY main {\n"
    "  a = f32[3,17,40] parameter(0)\n"
    "  b = f32[3,40,50] parameter(1)\n"
    "  y = f32[3,17,50] parameter(2)\n"
    "  d = f32[3,17,50] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n"
    "  ROOT q = f32[3,17,50] divide(d, y)\n"
    "}\n";

/* The group holding dot `dot` (of nnodes nodes, or none: -1) reads
 * `feeds` in its epilogue. */
static void assert_feeds(const IrModule *m, const char *dot, const char *feeds, int32_t nnodes)
{
    DevFusion f = find(m, 0);
    int32_t d = instr_named(m, dot), g = f.group_of ? f.group_of[d] : -1;
    if (nnodes < 0) {
        assert_true(g < 0 || f.groups[g].dot_feeds < 0);
    } else {
        assert_true(g >= 0);
        assert_int_equal(f.groups[g].dot_feeds, instr_named(m, feeds));
        assert_int_equal(f.groups[g].nnodes, nnodes);
        assert_int_equal(f.groups[g].nodes[f.groups[g].dot], d);
    }
    ir_fusion_free(&f);
}

static void which_dots(void **state)
{
    (void)state;
    IrModule *m = parse_ok(tanh_hlo);
    assert_feeds(m, "d", "d", 2);
    ir_module_free(m);
    m = parse_ok(sgd_hlo);
    assert_feeds(m, "d", "dw", 5); /* d, dw, blr, u, n */
    ir_module_free(m);
    m = parse_ok(gelu_hlo);
    assert_feeds(m, "d", "d", 16);
    ir_module_free(m);
    m = parse_ok(wide_hlo);
    assert_feeds(m, "d", "d", 6); /* d, blr, u, n, t, r */
    ir_module_free(m);
    m = parse_ok(batched_hlo);
    assert_feeds(m, "d", "d", 2);
    ir_module_free(m);
    /* Not taken in: the dot is also an output; read by a reduce. */
    m = parse_ok("HloModule n\n"
                 "ENTRY main {\n"
                 "  x = f32[8,16] parameter(0)\n"
                 "  w = f32[16,32] parameter(1)\n"
                 "  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  t = f32[8,32] tanh(d)\n"
                 "  ROOT r = (f32[8,32], f32[8,32]) tuple(t, d)\n"
                 "}\n");
    assert_feeds(m, "d", NULL, -1);
    ir_module_free(m);
    m = parse_ok("HloModule n\n"
                 "ENTRY main {\n"
                 "  x = f32[8,16] parameter(0)\n"
                 "  w = f32[16,32] parameter(1)\n"
                 "  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  z = f32[] constant(0)\n"
                 "  ROOT r = f32[8] reduce(d, z), dimensions={1}, to_apply=add\n"
                 "}\n"
                 "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n");
    assert_feeds(m, "d", NULL, -1);
    ir_module_free(m);
    /* An add of an all-reduce's sum: left for the all-reduce to take in. */
    m = parse_ok("HloModule n\n"
                 "ENTRY main {\n"
                 "  x = f32[64,16] parameter(0)\n"
                 "  w = f32[16,32] parameter(1)\n"
                 "  p = f32[64,32] parameter(2)\n"
                 "  d = f32[64,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  s = f32[64,32] all-reduce(p), replica_groups={}, to_apply=add\n"
                 "  ROOT r = f32[64,32] add(d, s)\n"
                 "}\n"
                 "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n");
    assert_feeds(m, "d", NULL, -1);
    ir_module_free(m);
}

/* got against want (f32, n elements): the same bits, or where `close`
 * within 1e-6 of want's largest magnitude. */
static void assert_f32_same(const DevValue *got, const DevValue *want, bool close)
{
    assert_int_equal(got->nbytes, want->nbytes);
    if (!close) {
        assert_memory_equal(got->data, want->data, (size_t)want->nbytes);
        return;
    }
    const float *g = (const float *)got->data, *w = (const float *)want->data;
    int64_t n = want->nbytes / 4;
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fabs(w[i]) > scale ? fabs(w[i]) : scale;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)g[i] - w[i]) > 1e-6 * scale)
            fail_msg("element %lld: %.9g, unfused %.9g", (long long)i, g[i], w[i]);
}

/* The entry run with opt against unfused, bit for bit; nargs random
 * arguments of the parameters' shapes (scalars 0.01). A dot written
 * transposed (a dot-transpose pair) by a BLAS other than tessel's own
 * GEMM only within rounding: the library computes C^T as B^T A^T, and
 * OpenBLAS's sums round differently in that orientation (its Zen
 * kernels: an ulp or two). */
static void fused_is_unfused(const char *hlo, DevExecOptions opt, int32_t runs)
{
    IrModule *m = parse_ok(hlo);
    const IrComputation *c = ir_entry(m);
    DevValue *args[8];
    int n = 0;
    uint64_t rng = 4242;
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        if (ins->op != OP_PARAMETER)
            continue;
        int p = (int)ins->a.parameter_number;
        args[p] = val(IR_F32, ins->shape.rank, ins->shape.dims, NULL);
        if (ins->shape.rank == 0)
            *(float *)args[p]->data = 0.01f;
        else
            fill_uniform(args[p], &rng);
        n++;
    }
    bool transposed = strstr(hlo, "transpose(") != NULL;
    DevExecOptions plain_opt = {.no_fusion = true, .no_blas = opt.no_blas}; /* the same GEMM */
    DevValue *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_execute(m, m->entry, n, args, &plain_opt, &plain, &d), IR_OK);
    for (int32_t r = 0; r < runs; r++) { /* again: from B kept packed, where opt keeps it */
        DevValue *fused = NULL;
        assert_int_equal(dev_execute(m, m->entry, n, args, &opt, &fused, &d), IR_OK);
        assert_f32_same(fused, plain, transposed && !opt.no_blas && dev_blas_sgemm_current() != DEV_SGEMM_AVX512);
        dev_value_unref(fused);
    }
    dev_value_unref(plain);
    for (int a = 0; a < n; a++)
        dev_value_unref(args[a]);
    ir_module_free(m);
}

static void equal_unfused(void **state)
{
    (void)state;
    const char *hlo[] = {tanh_hlo, sgd_hlo, gelu_hlo, wide_hlo, batched_hlo};
    for (size_t i = 0; i < sizeof hlo / sizeof *hlo; i++) {
        fused_is_unfused(hlo[i], (DevExecOptions){.fuse_small = true}, 1);
        fused_is_unfused(hlo[i], (DevExecOptions){.fusion_block = 7}, 1);
        fused_is_unfused(hlo[i], (DevExecOptions){.fuse_small = true, .no_blas = true}, 1);
    }
}

/* A weight fed again: its product from B packed once (packed.c), the
 * consumers in the same strips. 256^3 multiply-adds at least. */
static void equal_unfused_kept(void **state)
{
    (void)state;
    DevPacked *pc = dev_packed_new();
    assert_non_null(pc);
    fused_is_unfused("HloModule k\n"
                     "ENTRY main {\n"
                     "  x = f32[200,1100] parameter(0)\n"
                     "  w = f32[1100,300] parameter(1)\n"
                     "  d = f32[200,300] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                     "  ROOT t = f32[200,300] tanh(d)\n"
                     "}\n",
                     (DevExecOptions){.packed = pc}, 2);
    int32_t weights = 0;
    size_t bytes = 0;
    int64_t runs = 0;
    dev_packed_stats(pc, &weights, &bytes, &runs);
    if (dev_blas_sgemm_current() == DEV_SGEMM_AVX512)
        assert_int_equal(runs, 2);
    dev_packed_free(pc);
}

/* Tessel's own GEMM for the process, where the CPU has AVX-512F, else
 * OpenBLAS (the consumers then run after each product). Not the probe:
 * it times each shape's first calls on every library, so the fused and
 * the unfused run of one shape may reach different ones, whose sums
 * round differently. */
static int own_gemm(void **state)
{
    (void)state;
    bool have = dev_sgemm_avx512_rowmajor(false, false, 0, 0, 0, 1, NULL, 1, NULL, 1, 0, NULL, 1);
    dev_blas_choose_sgemm(have ? DEV_SGEMM_AVX512 : DEV_SGEMM_OPENBLAS);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(which_dots),
        cmocka_unit_test(equal_unfused),
        cmocka_unit_test(equal_unfused_kept),
    };
    return cmocka_run_group_tests(tests, own_gemm, NULL);
}
