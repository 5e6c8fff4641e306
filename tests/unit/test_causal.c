/*
 * test_causal.c: causal attention computes only what the mask keeps.
 *
 * ir/causal.c: which dots' results are read only on and below the
 * diagonal (JAX's causal mask, inside its `_where` call or not, GE, a
 * strict LT with the operands swapped, and'ed with a sliding window), and
 * which are not (a mask with an offset, an arbitrary mask, the upper
 * triangle, the scores also returned or reduced whole). device/k_dot.c:
 * such a dot's tiles above the diagonal are skipped and the attention's
 * output is bit for bit the unfused run's (which computes them all), at
 * sequence lengths that no tile divides; a product over an operand's zero
 * triangle (P.V and the backward's dQ, dK, dV shapes) equals a naive
 * product in double, and a non-finite value that the skipped zeros would
 * have multiplied still reaches the result (0 * inf is NaN).
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
#include "device/fusion.h"
#include "kernel_test.h"
#include "fusion_test.h"

/* text with every '@' replaced by the decimal s (into a static buffer). */
static char *subst(const char *text, int s)
{
    static char buf[4][8192];
    static int turn;
    char *out = buf[turn++ % 4], num[16];
    int nl = snprintf(num, sizeof num, "%d", s);
    size_t o = 0;
    for (const char *p = text; *p && o + 16 < sizeof buf[0]; p++) {
        if (*p == '@') {
            memcpy(out + o, num, (size_t)nl);
            o += (size_t)nl;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return out;
}

/* The masked scores' value: JAX's -1e9 (its exp is 0 beside any kept
 * score) unless a test sets another. */
static const char *mask_fill = "-1e9";

/* An attention over S positions, 2 x 3 heads of 4: scores q k^T / 2,
 * masked by `mask` (text defining pred[S,S] `ge` from i0, i1: iotas along
 * dims 0 and 1; '@' stands for S) to mask_fill, softmax, then P v.
 * in_call: JAX's form, the select inside a call to _where. */
static char *attention(int s, const char *mask, bool in_call)
{
    static char buf[8192];
    const char *sel = in_call ? "  sm = f32[2,3,@,@] call(ge, sc, c), to_apply=_where\n"
                              : "  mb = pred[2,3,@,@] broadcast(ge), dimensions={2,3}\n"
                                "  cb = f32[2,3,@,@] broadcast(c), dimensions={}\n"
                                "  sm = f32[2,3,@,@] select(mb, sc, cb)\n";
    char fill_line[64];
    snprintf(fill_line, sizeof fill_line, "  c = f32[] constant(%s)\n", mask_fill);
    snprintf(buf, sizeof buf, "%s%s%s%s%s",
             subst("HloModule attn\n"
                   "_where {\n"
                   "  p0 = pred[@,@] parameter(0)\n"
                   "  b0 = pred[2,3,@,@] broadcast(p0), dimensions={2,3}\n"
                   "  p1 = f32[2,3,@,@] parameter(1)\n"
                   "  p2 = f32[] parameter(2)\n"
                   "  b2 = f32[2,3,@,@] broadcast(p2), dimensions={}\n"
                   "  ROOT r = f32[2,3,@,@] select(b0, p1, b2)\n"
                   "}\n"
                   "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, b)\n}\n"
                   "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"
                   "ENTRY main {\n"
                   "  q = f32[2,3,@,4] parameter(0)\n"
                   "  k = f32[2,3,@,4] parameter(1)\n"
                   "  v = f32[2,3,@,4] parameter(2)\n"
                   "  s = f32[2,3,@,@] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
                   "  two = f32[] constant(2)\n"
                   "  twob = f32[2,3,@,@] broadcast(two), dimensions={}\n"
                   "  sc = f32[2,3,@,@] divide(s, twob)\n"
                   "  i0 = s32[@,@] iota(), iota_dimension=0\n"
                   "  i1 = s32[@,@] iota(), iota_dimension=1\n", s),
             subst(mask, s), subst(sel, s), fill_line,
             subst("  ninf = f32[] constant(-inf)\n"
                   "  zero = f32[] constant(0)\n"
                   "  mx = f32[2,3,@] reduce(sm, ninf), dimensions={3}, to_apply=max\n"
                   "  mxb = f32[2,3,@,@] broadcast(mx), dimensions={0,1,2}\n"
                   "  d = f32[2,3,@,@] subtract(sm, mxb)\n"
                   "  e = f32[2,3,@,@] exponential(d)\n"
                   "  z = f32[2,3,@] reduce(e, zero), dimensions={3}, to_apply=add\n"
                   "  zb = f32[2,3,@,@] broadcast(z), dimensions={0,1,2}\n"
                   "  p = f32[2,3,@,@] divide(e, zb)\n"
                   "  ROOT o = f32[2,3,@,4] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
                   "}\n", s));
    return buf;
}

#define CAUSAL_GE "  ge = pred[@,@] compare(i0, i1), direction=GE\n"

static bool scores_lower(const char *txt)
{
    IrModule *m = parse_ok(txt);
    const IrComputation *c = ir_entry(m);
    int32_t s = instr_named(m, "s");
    bool lower = ir_dot_reads_lower(m, c, s);
    /* The executor's groups say the same: the scores' group is dot_lower. */
    DevFusion f = find(m, 0);
    int32_t g = f.group_of ? f.group_of[s] : -1;
    assert_true(lower == (g >= 0 && f.groups[g].dot_lower));
    if (g >= 0 && lower)
        assert_int_equal(f.groups[g].nodes[f.groups[g].dot], s);
    ir_fusion_free(&f);
    ir_module_free(m);
    return lower;
}

/* The masks that keep nothing above the diagonal are recognised: JAX's
 * (GE, in its _where call and not), a strict one written the other way
 * (LT with the iotas swapped), a sliding window (GE and'ed with another
 * compare), iotas broadcast from one dimension. */
static void causal_masks_recognised(void **state)
{
    (void)state;
    assert_true(scores_lower(attention(6, CAUSAL_GE, true)));
    assert_true(scores_lower(attention(6, CAUSAL_GE, false)));
    assert_true(scores_lower(attention(6, "  ge = pred[@,@] compare(i1, i0), direction=LT\n", true)));
    assert_true(scores_lower(attention(
        6, "  w = s32[] constant(3)\n"
                     "  wb = s32[@,@] broadcast(w), dimensions={}\n"
                     "  lo = s32[@,@] subtract(i0, wb)\n"
                     "  win = pred[@,@] compare(i1, lo), direction=GT\n"
                     "  causal = pred[@,@] compare(i0, i1), direction=GE\n"
                     "  ge = pred[@,@] and(win, causal)\n",
        true)));
    assert_true(scores_lower(attention(
        6, "  r = s32[@] iota(), iota_dimension=0\n"
                     "  rr = s32[@,@] broadcast(r), dimensions={0}\n"
                     "  rc = s32[@,@] broadcast(r), dimensions={1}\n"
                     "  ge = pred[@,@] compare(rr, rc), direction=GE\n",
        false)));
}

/* Masks that keep a position above the diagonal, or that are not iotas'
 * own indices, are not: an offset (i0 + 1 >= i1), the upper triangle, an
 * arbitrary mask (a constant), a window alone (or'ed). */
static void other_masks_not(void **state)
{
    (void)state;
    assert_false(scores_lower(attention(6, "  one = s32[] constant(1)\n"
                                                     "  oneb = s32[@,@] broadcast(one), dimensions={}\n"
                                                     "  i0p = s32[@,@] add(i0, oneb)\n"
                                                     "  ge = pred[@,@] compare(i0p, i1), direction=GE\n",
                                        true)));
    assert_false(scores_lower(attention(6, "  ge = pred[@,@] compare(i0, i1), direction=LE\n", true)));
    assert_false(scores_lower(attention(6, "  t = pred[] constant(true)\n"
                                                     "  ge = pred[@,@] broadcast(t), dimensions={}\n",
                                        false)));
    assert_false(scores_lower(attention(6, "  a = pred[@,@] compare(i0, i1), direction=GE\n"
                                                     "  b = pred[@,@] compare(i0, i1), direction=LT\n"
                                                     "  ge = pred[@,@] or(a, b)\n",
                                        true)));
    /* The upper triangle written as GE with the iotas swapped. */
    assert_false(scores_lower(attention(6, "  ge = pred[@,@] compare(i1, i0), direction=GE\n", false)));
}

/* The scores read elsewhere too: returned beside the output, or reduced
 * whole; then every tile is computed. */
static void scores_read_elsewhere(void **state)
{
    (void)state;
    char txt[8192], *at;
    /* Returned: the root becomes a tuple of the output and the scores. */
    snprintf(txt, sizeof txt, "%s", attention(6, CAUSAL_GE, true));
    assert_non_null(at = strstr(txt, "  ROOT o = "));
    memmove(at + 2, at + 7, strlen(at + 7) + 1); /* "  ROOT o" -> "  o" */
    at = strrchr(txt, '}');
    snprintf(at, sizeof txt - (size_t)(at - txt), "  ROOT t = (f32[2,3,6,4], f32[2,3,6,6]) tuple(o, sc)\n}\n");
    assert_false(scores_lower(txt));
    /* Reduced whole beside the mask (a reader outside it, though dead). */
    snprintf(txt, sizeof txt, "%s", attention(6, CAUSAL_GE, false));
    at = strrchr(txt, '}');
    snprintf(at, sizeof txt - (size_t)(at - txt),
             "  whole = f32[2,3,6] reduce(s, zero), dimensions={3}, to_apply=add\n}\n");
    assert_false(scores_lower(txt));
}

static void fill(float *x, int64_t n, uint32_t seed)
{
    uint32_t h = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        h = h * 1664525u + 1013904223u;
        x[i] = (float)((h >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static DevValue *run_fused(const IrModule *m, DevValue **args, bool fuse)
{
    DevExecOptions opt = {.no_fusion = !fuse};
    DevValue *out = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_execute(m, m->entry, 3, args, &opt, &out, &d), IR_OK);
    return out;
}

/* Every f32 dot in tessel's own kernel (main: TESSEL_SGEMM=avx512). */
static bool own_kernel;

/* At sequence lengths 130, 300 and, in tessel's own kernel, 520 (tiles of
 * 64 that do not divide them; P.V's sums past a k block of 256, the
 * scores past a column block of 384; under the probe a block's products
 * of 64 rows and the unfused ones of 520 may go to different libraries by
 * their size, whose sums differ), the attention with its scores' upper
 * tiles skipped (the softmax of a block's rows written up to the block's
 * last column, the rest known +0) is the unfused run's (every tile
 * computed), bit for bit; and a softmax row is what the masked scores
 * give (checked against a double-precision attention, the masked columns
 * at `masked`, whose exp is 0 at -1e9 and not at -4: then every column of
 * P counts and P.V reads them all). */
static void attention_against_unfused(double masked)
{
    int lens[] = {130, 300, 520};
    for (size_t t = 0; t < (own_kernel ? 3 : 2); t++) {
        int s = lens[t];
        for (int in_call = 0; in_call < 2; in_call++) {
            IrModule *m = parse_ok(attention(s, CAUSAL_GE, in_call));
            int64_t dims[] = {2, 3, s, 4}, n = 2 * 3 * (int64_t)s * 4;
            float *x[3];
            DevValue *args[3];
            for (int a = 0; a < 3; a++) {
                x[a] = malloc((size_t)n * sizeof(float));
                fill(x[a], n, (uint32_t)(a + 1 + 10 * s));
                args[a] = val(IR_F32, 4, dims, x[a]);
            }
            DevValue *fused = run_fused(m, args, true), *plain = run_fused(m, args, false);
            assert_int_equal(fused->nbytes, n * 4);
            assert_memory_equal(fused->data, plain->data, (size_t)plain->nbytes);
            /* Independent: head (1, 2), a few rows, in double. */
            const float *o = (const float *)fused->data;
            int64_t head = (1 * 3 + 2) * (int64_t)s * 4;
            int rows[] = {0, 63, 64, s - 1};
            for (size_t ri = 0; ri < 4; ri++) {
                int r = rows[ri];
                double w[1024], mx = -INFINITY, z = 0;
                for (int j = 0; j < s; j++) {
                    double dot = 0;
                    for (int e = 0; e < 4; e++)
                        dot += (double)x[0][head + r * 4 + e] * x[1][head + j * 4 + e];
                    w[j] = j <= r ? dot / 2 : masked;
                    mx = fmax(mx, w[j]);
                }
                for (int j = 0; j < s; j++)
                    z += (w[j] = exp(w[j] - mx));
                for (int e = 0; e < 4; e++) {
                    double want = 0;
                    for (int j = 0; j < s; j++)
                        want += w[j] / z * x[2][head + j * 4 + e];
                    assert_true(fabs(o[head + r * 4 + e] - want) < 1e-5);
                }
            }
            dev_value_unref(fused);
            dev_value_unref(plain);
            for (int a = 0; a < 3; a++) {
                dev_value_unref(args[a]);
                free(x[a]);
            }
            ir_module_free(m);
        }
    }
}

static void skipped_tiles_change_nothing(void **state)
{
    (void)state;
    attention_against_unfused(-1e9);
}

/* A fill whose exp is not 0 (-4): the masked columns of every row weigh
 * in, so no block may stop at its last column. */
static void finite_fill_reads_every_column(void **state)
{
    (void)state;
    mask_fill = "-4";
    attention_against_unfused(-4);
    mask_fill = "-1e9";
}

/* C = A B of one [n,n] operand with a zero triangle and one [n,w] (or
 * [w,n]) operand, against a naive product in double. kind: 0 A lower
 * (A[m,k] = 0 for k > m: P.V, dQ), 1 A upper (k < m: dK), 2 B upper
 * (B[k,n] = 0 for k < n: dV^T = dO^T P), 3 B lower. nan_at >= 0 puts a
 * NaN in the dense operand at that row (A kinds) or column (B kinds):
 * the result must be NaN wherever the naive product is. */
static void tri_case(int kind, int n, int w, int nan_at)
{
    bool on_a = kind < 2;
    char txt[1024];
    int ar = on_a ? n : w, ac = n, br = n, bc = on_a ? w : n;
    snprintf(txt, sizeof txt,
             "HloModule tri\nENTRY main {\n  a = f32[%d,%d] parameter(0)\n  b = f32[%d,%d] parameter(1)\n"
             "  ROOT c = f32[%d,%d] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
             ar, ac, br, bc, ar, bc);
    IrModule *m = parse_ok(txt);
    float *a = malloc((size_t)ar * ac * 4), *b = malloc((size_t)br * bc * 4);
    fill(a, (int64_t)ar * ac, 7);
    fill(b, (int64_t)br * bc, 8);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            bool zero = kind == 0 ? j > i : kind == 1 ? j < i : kind == 2 ? i < j : i > j;
            if (zero && on_a)
                a[i * ac + j] = 0;
            if (zero && !on_a)
                b[i * bc + j] = 0;
        }
    if (nan_at >= 0) {
        if (on_a)
            b[nan_at * bc] = NAN;
        else
            a[nan_at] = NAN;
    }
    int64_t ad[] = {ar, ac}, bd[] = {br, bc};
    DevValue *args[2] = {val(IR_F32, 2, ad, a), val(IR_F32, 2, bd, b)}, *out = NULL;
    IrDiag d = {0};
    assert_int_equal(exec_module(m, 2, args, &out, &d), IR_OK);
    const float *c = (const float *)out->data;
    for (int i = 0; i < ar; i++)
        for (int j = 0; j < bc; j++) {
            double want = 0;
            for (int k = 0; k < ac; k++)
                want += (double)a[i * ac + k] * b[k * bc + j];
            if (isnan(want))
                assert_true(isnan(c[i * bc + j]));
            else if (fabs(c[i * bc + j] - want) > 1e-4)
                fail_msg("kind %d n %d: c[@,@] = %g, want %g", kind, n, i, j, c[i * bc + j], want);
        }
    dev_value_unref(out);
    dev_value_unref(args[0]);
    dev_value_unref(args[1]);
    free(a);
    free(b);
    ir_module_free(m);
}

static void zero_triangles(void **state)
{
    (void)state;
    for (int kind = 0; kind < 4; kind++) {
        tri_case(kind, 130, 8, -1);
        tri_case(kind, 300, 5, -1);
        /* NaN where a skipped zero would meet it: at the end (A lower, B
         * lower skip the high k) or the start (the upper kinds). */
        tri_case(kind, 200, 3, kind == 0 || kind == 3 ? 199 : 0);
    }
}

/* text with its first occurrence of `from` replaced by `to` (S
 * substituted in both), into a static buffer. */
static char *swap_line(const char *text, const char *from, const char *to, int s)
{
    static char buf[2][8192];
    static int turn;
    char *out = buf[turn++ % 2], f[512], t[512];
    snprintf(f, sizeof f, "%s", subst(from, s));
    snprintf(t, sizeof t, "%s", subst(to, s));
    const char *at = strstr(text, f);
    assert_non_null(at);
    snprintf(out, sizeof buf[0], "%.*s%s%s", (int)(at - text), text, t, at + strlen(f));
    return out;
}

/* The attention of txt over S s: the scores' group is a dot epilogue
 * (root sm, the select or the call; scale `sc` where scaled) when fuses,
 * and not otherwise; with soft, the softmax `p` of sm joins it (the
 * root), and with soft 2 (a causal mask) P.V `o` too (the root,
 * dot_then). Either way the fused run is the unfused one bit for bit.
 * nargs 4: a pred [S,S] mask parameter (alternating rows of true). */
/* The fused run's outputs equal the plain run's bit for bit (a tuple's
 * elements each, or the one array); then a case's values and module freed. */
static void same_then_free(DevValue *fused, DevValue *plain, DevValue **args, float **x, uint8_t *mask, IrModule *m)
{
    assert_int_equal(fused->nelems, plain->nelems);
    for (int32_t e = 0; e < (fused->nelems > 0 ? fused->nelems : 1); e++) {
        const DevValue *a = fused->nelems > 0 ? fused->elems[e] : fused, *b = plain->nelems > 0 ? plain->elems[e] : plain;
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, (size_t)b->nbytes);
    }
    dev_value_unref(fused);
    dev_value_unref(plain);
    for (int a = 0; a < 4; a++)
        dev_value_unref(args[a]);
    for (int a = 0; a < 3; a++)
        free(x[a]);
    free(mask);
    ir_module_free(m);
}

static void epilogue_case(const char *txt, int s, int nargs, bool fuses, int soft, bool scaled)
{
    IrModule *m = parse_ok(txt);
    int32_t dot = instr_named(m, "s");
    DevFusion f = find(m, 1); /* arrays of any size fuse, as fuse_small below */
    int32_t g = f.group_of ? f.group_of[dot] : -1;
    if (fuses) {
        assert_true(g >= 0);
        assert_int_equal(f.groups[g].root, instr_named(m, soft == 2 ? "o" : soft ? "p" : "sm"));
        assert_int_equal(f.groups[g].dot_select, instr_named(m, "sm"));
        assert_int_equal(f.groups[g].dot_softmax, soft ? instr_named(m, "p") : -1);
        assert_int_equal(f.groups[g].dot_then, soft == 2 ? f.groups[g].nnodes - 1 : -1);
        assert_int_equal(f.groups[g].dot_scale, scaled ? instr_named(m, "sc") : -1);
        assert_int_equal(f.groups[g].nodes[f.groups[g].dot], dot);
    } else {
        assert_true(g < 0 || f.groups[g].dot_select < 0);
    }
    ir_fusion_free(&f);
    int64_t dims[] = {2, 3, s, 4}, n = 2 * 3 * (int64_t)s * 4, mdims[] = {s, s};
    float *x[3];
    uint8_t *mask = malloc((size_t)s * s);
    DevValue *args[4];
    for (int a = 0; a < 3; a++) {
        x[a] = malloc((size_t)n * sizeof(float));
        fill(x[a], n, (uint32_t)(a + 5 + 10 * s));
        args[a] = val(IR_F32, 4, dims, x[a]);
    }
    for (int i = 0; i < s * s; i++)
        mask[i] = (uint8_t)((i / s + i % 3) % 2);
    args[3] = val(IR_PRED, 2, mdims, mask);
    DevExecOptions on = {.fuse_small = true}, off = {.no_fusion = true};
    DevValue *fused = NULL, *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_execute(m, m->entry, nargs, args, &on, &fused, &d), IR_OK);
    assert_int_equal(dev_execute(m, m->entry, nargs, args, &off, &plain, &d), IR_OK);
    same_then_free(fused, plain, args, x, mask, m);
}

/* The attention with the masked scores returned beside its output: in
 * the entry, a select read only by the softmax joins its row group
 * (fusion_rows.c) rather than the dot; read twice, it stays the dot's. */
static char *returned(const char *txt, int s)
{
    static char buf[8192];
    const char *t = swap_line(txt, "  ROOT o = ", "  o = ", s);
    snprintf(buf, sizeof buf, "%.*s%s", (int)(strrchr(t, '}') - t), t,
             subst("  ROOT t = (f32[2,3,@,4], f32[2,3,@,@]) tuple(o, sm)\n}\n", s));
    return buf;
}

#define SCALE_LINE "  sc = f32[2,3,@,@] divide(s, twob)\n"
#define SELECT_LINE "  sm = f32[2,3,@,@] select(mb, sc, cb)\n"

/* Dot epilogues (ir/fusion_find.c, k_dot.c): the scores' scale and mask
 * run on the GEMM's blocks of rows, in JAX's form (the select in its
 * `_where` call) and in the entry, at S 6 (one block) and 130 (tiled,
 * causal: the upper tiles skipped too); a multiply by the scalar on
 * either side; no scale; the value kept on the select's false side; an
 * arbitrary mask (a parameter). Not taken in: a scale by a row vector, the
 * dot as the divisor, a mask broadcast from a [3,S,S], scores read
 * twice. Each bit for bit the unfused run. */
static void dot_epilogues(void **state)
{
    (void)state;
    int lens[] = {6, 130};
    for (size_t t = 0; t < 2; t++) {
        int s = lens[t];
        epilogue_case(attention(s, CAUSAL_GE, true), s, 3, true, 2, true);
        epilogue_case(returned(attention(s, CAUSAL_GE, false), s), s, 3, true, 0, true);
        epilogue_case(swap_line(returned(attention(s, CAUSAL_GE, false), s), "  two = f32[] constant(2)\n  twob = f32[2,3,@,@] broadcast(two), dimensions={}\n" SCALE_LINE,
                                "  two = f32[] constant(0.3)\n  twob = f32[2,3,@,@] broadcast(two), dimensions={}\n"
                                "  sc = f32[2,3,@,@] multiply(twob, s)\n", s),
                      s, 3, true, false, true);
        epilogue_case(swap_line(attention(s, CAUSAL_GE, true), SCALE_LINE, "  sc = f32[2,3,@,@] multiply(s, twob)\n", s),
                      s, 3, true, 2, true);
        epilogue_case(swap_line(swap_line(returned(attention(s, CAUSAL_GE, false), s), SCALE_LINE, "", s), SELECT_LINE,
                                "  sm = f32[2,3,@,@] select(mb, s, cb)\n", s),
                      s, 3, true, false, false);
        epilogue_case(swap_line(returned(attention(s, "  ge = pred[@,@] compare(i0, i1), direction=LT\n", false), s), SELECT_LINE,
                                "  sm = f32[2,3,@,@] select(mb, cb, sc)\n", s),
                      s, 3, true, false, true);
        epilogue_case(attention(s, "  ge = pred[@,@] parameter(3)\n", true), s, 4, true, 1, true);
        /* Not taken in. */
        epilogue_case(swap_line(returned(attention(s, CAUSAL_GE, false), s), SCALE_LINE,
                                "  row = f32[@] iota(), iota_dimension=0\n  rowb = f32[2,3,@,@] broadcast(row), dimensions={3}\n"
                                "  sc = f32[2,3,@,@] divide(s, rowb)\n", s),
                      s, 3, false, false, false);
        epilogue_case(swap_line(returned(attention(s, CAUSAL_GE, false), s), SCALE_LINE, "  sc = f32[2,3,@,@] divide(twob, s)\n", s),
                      s, 3, false, false, false);
        epilogue_case(swap_line(returned(attention(s, CAUSAL_GE, false), s), "  mb = pred[2,3,@,@] broadcast(ge), dimensions={2,3}\n",
                                "  mt = pred[@,@] transpose(ge), dimensions={1,0}\n"
                                "  mb = pred[2,3,@,@] broadcast(mt), dimensions={2,3}\n", s),
                      s, 3, true, false, true); /* a transposed mask is still a pred [S,S] */
        epilogue_case(swap_line(returned(attention(s, CAUSAL_GE, false), s), "  mb = pred[2,3,@,@] broadcast(ge), dimensions={2,3}\n",
                                "  g3 = pred[3,@,@] broadcast(ge), dimensions={1,2}\n"
                                "  mb = pred[2,3,@,@] broadcast(g3), dimensions={1,2,3}\n", s),
                      s, 3, false, false, false);
        epilogue_case(swap_line(swap_line(returned(attention(s, CAUSAL_GE, false), s), "  ROOT t = ",
                                          "  twice = f32[2,3,@,@] add(sc, sc)\n  ROOT t = ", s),
                                "f32[2,3,@,@]) tuple(o, sm)", "f32[2,3,@,@], f32[2,3,@,@]) tuple(o, sm, twice)", s),
                      s, 3, false, false, false);
    }
}

/* text with '@' replaced by s and '#' by h (into a static buffer). */
static char *subst2(const char *text, int s, int h)
{
    static char buf[4][4096];
    static int turn;
    char *out = buf[turn++ % 4], ns[16], nh[16];
    int ls = snprintf(ns, sizeof ns, "%d", s), lh = snprintf(nh, sizeof nh, "%d", h);
    size_t o = 0;
    for (const char *p = text; *p && o + 16 < sizeof buf[0]; p++) {
        if (*p == '@' || *p == '#') {
            memcpy(out + o, *p == '@' ? ns : nh, (size_t)(*p == '@' ? ls : lh));
            o += (size_t)(*p == '@' ? ls : lh);
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return out;
}

enum {
    SM_CLAMP_FIRST = 1, /* maximum(-inf, m) rather than maximum(m, -inf) */
    SM_MASK_PARAM = 2,  /* the mask a parameter (3) rather than causal */
    SM_FILL_HALF = 4,   /* the fill 0.5: its exp is no zero */
    SM_EXP_OUT = 8,     /* exp returned too: the softmax stays a row group */
    SM_OUT_ONLY = 16,   /* P not returned: P.V joins the group where causal */
};

/* Block-infer's attention as JAX lowers it, 2 x h heads of 4 over s
 * positions: the scores / 8 masked in `_where`, the softmax with its
 * max clamped at -inf and its outer values reshaped to [2,h,s,1] and
 * back, then P v. */
static char *jax_attention(int s, int h, int flags)
{
    static char buf[8192];
    const char *mask = flags & SM_MASK_PARAM ? "  ge = pred[@,@] parameter(3)\n"
                                             : "  i0 = s32[@,@] iota(), iota_dimension=0\n"
                                               "  i1 = s32[@,@] iota(), iota_dimension=1\n"
                                               "  ge = pred[@,@] compare(i0, i1), direction=GE\n";
    char head[4096], tail[4096];
    snprintf(head, sizeof head, "%s",
             subst2("HloModule attn\n"
                    "_where {\n"
                    "  p0 = pred[@,@] parameter(0)\n"
                    "  b0 = pred[2,#,@,@] broadcast(p0), dimensions={2,3}\n"
                    "  p1 = f32[2,#,@,@] parameter(1)\n"
                    "  p2 = f32[] parameter(2)\n"
                    "  b2 = f32[2,#,@,@] broadcast(p2), dimensions={}\n"
                    "  ROOT r = f32[2,#,@,@] select(b0, p1, b2)\n"
                    "}\n"
                    "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, b)\n}\n"
                    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"
                    "ENTRY main {\n"
                    "  q = f32[2,#,@,4] parameter(0)\n"
                    "  k = f32[2,#,@,4] parameter(1)\n"
                    "  v = f32[2,#,@,4] parameter(2)\n",
                    s, h));
    snprintf(tail, sizeof tail, "%s%s%s%s",
             subst2("  s = f32[2,#,@,@] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
                    "  eight = f32[] constant(8)\n"
                    "  eightb = f32[2,#,@,@] broadcast(eight), dimensions={}\n"
                    "  sc = f32[2,#,@,@] divide(s, eightb)\n",
                    s, h),
             flags & SM_FILL_HALF ? "  c = f32[] constant(0.5)\n" : "  c = f32[] constant(-1e+09)\n",
             subst2("  sm = f32[2,#,@,@] call(ge, sc, c), to_apply=_where\n"
                    "  ninf = f32[] constant(-inf)\n"
                    "  mx = f32[2,#,@] reduce(sm, ninf), dimensions={3}, to_apply=max\n"
                    "  ninf2 = f32[] constant(-inf)\n"
                    "  ninfb = f32[2,#,@] broadcast(ninf2), dimensions={}\n",
                    s, h),
             subst2(flags & SM_CLAMP_FIRST ? "  mc = f32[2,#,@] maximum(ninfb, mx)\n" : "  mc = f32[2,#,@] maximum(mx, ninfb)\n",
                    s, h));
    snprintf(buf, sizeof buf, "%s%s%s%s", head, subst(mask, s), tail,
             subst2("  m1 = f32[2,#,@,1] reshape(mc)\n"
                    "  m2 = f32[2,#,@,1] broadcast(m1), dimensions={0,1,2,3}\n"
                    "  m3 = f32[2,#,@] reshape(m2)\n"
                    "  mb = f32[2,#,@,@] broadcast(m3), dimensions={0,1,2}\n"
                    "  d = f32[2,#,@,@] subtract(sm, mb)\n"
                    "  e = f32[2,#,@,@] exponential(d)\n"
                    "  zero = f32[] constant(0)\n"
                    "  z = f32[2,#,@] reduce(e, zero), dimensions={3}, to_apply=add\n"
                    "  z1 = f32[2,#,@,1] reshape(z)\n"
                    "  z2 = f32[2,#,@,1] broadcast(z1), dimensions={0,1,2,3}\n"
                    "  z3 = f32[2,#,@] reshape(z2)\n"
                    "  zb = f32[2,#,@,@] broadcast(z3), dimensions={0,1,2}\n"
                    "  p = f32[2,#,@,@] divide(e, zb)\n"
                    "  o = f32[2,#,@,4] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n",
                    s, h));
    size_t at = strlen(buf);
    snprintf(buf + at, sizeof buf - at, "%s",
             subst2(flags & SM_EXP_OUT    ? "  ROOT t = (f32[2,#,@,4], f32[2,#,@,@]) tuple(o, e)\n}\n"
                    : flags & SM_OUT_ONLY ? "  ROOT t = (f32[2,#,@,4]) tuple(o)\n}\n"
                                          : "  ROOT t = (f32[2,#,@,4], f32[2,#,@,@]) tuple(o, p)\n}\n",
                    s, h));
    return buf;
}

/* jax_attention(s, h, flags) on inputs from seed (mask: row i keeps
 * column j when (i + j / 3) % 3 != 0, and row 1 nothing; with poison a
 * NaN in q's row 2 of batch 1): the softmax joins the scores' epilogue
 * (unless SM_EXP_OUT), and the outputs (o and P, or e) are the unfused
 * run's bit for bit. At s 1 the softmax is no row group (its rows of one
 * element fuse as elementwise groups): not taken in either. */
static void softmax_case(int s, int h, int flags, uint32_t seed, bool poison)
{
    IrModule *m = parse_ok(jax_attention(s, h, flags));
    int32_t dot = instr_named(m, "s"), p = instr_named(m, "p");
    DevFusion f = find(m, 1);
    int32_t g = f.group_of ? f.group_of[dot] : -1;
    assert_true(g >= 0);
    bool fuses = !(flags & SM_EXP_OUT) && s > 1; /* rows of 1: no row group */
    bool pv = fuses && (flags & SM_OUT_ONLY) && !(flags & SM_MASK_PARAM);
    assert_int_equal(f.groups[g].root, pv ? instr_named(m, "o") : fuses ? p : instr_named(m, "sm"));
    assert_int_equal(f.groups[g].dot_softmax, fuses ? p : -1);
    assert_int_equal(f.groups[g].dot_then, pv ? f.groups[g].nnodes - 1 : -1);
    assert_int_equal(f.groups[g].dot_select, instr_named(m, "sm"));
    ir_fusion_free(&f);
    int64_t dims[] = {2, h, s, 4}, n = 2 * (int64_t)h * s * 4, mdims[] = {s, s};
    float *x[3];
    uint8_t *mask = malloc((size_t)s * s);
    DevValue *args[4];
    for (int a = 0; a < 3; a++) {
        x[a] = malloc((size_t)n * sizeof(float));
        fill(x[a], n, seed + (uint32_t)a);
        if (poison && a == 0 && s > 2)
            x[a][((int64_t)h * s + 2) * 4 + 1] = NAN;
        args[a] = val(IR_F32, 4, dims, x[a]);
    }
    for (int i = 0; i < s; i++)
        for (int j = 0; j < s; j++)
            mask[i * s + j] = (uint8_t)(i != 1 && (i + j / 3) % 3 != 0);
    args[3] = val(IR_PRED, 2, mdims, mask);
    int nargs = flags & SM_MASK_PARAM ? 4 : 3;
    DevExecOptions on = {.fuse_small = true}, off = {.no_fusion = true};
    DevValue *fused = NULL, *plain = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_execute(m, m->entry, nargs, args, &on, &fused, &d), IR_OK);
    assert_int_equal(dev_execute(m, m->entry, nargs, args, &off, &plain, &d), IR_OK);
    assert_int_equal(fused->nelems, flags & SM_OUT_ONLY ? 1 : 2);
    same_then_free(fused, plain, args, x, mask, m);
}

/* The softmax in the dot epilogue (ir_fusion_softmax, k_dot.c): JAX's
 * form, its clamp either way round, 1 and 3 heads, sequences of 1 to 130
 * (one block, a partial block, tiled causal rows), a mask parameter with
 * an empty row and kept columns after masked ones, a fill whose exp is no
 * zero (the whole row summed), a NaN in the scores (the max's fallback),
 * and the exp read elsewhere (not taken in): each the unfused run's bit
 * for bit. */
static void dot_softmaxes(void **state)
{
    (void)state;
    int lens[] = {1, 6, 77, 130};
    for (size_t t = 0; t < 4; t++) {
        int s = lens[t];
        softmax_case(s, 3, 0, 11, false);
        softmax_case(s, 1, SM_CLAMP_FIRST, 12, false);
        softmax_case(s, 1, SM_MASK_PARAM, 13, false);
        softmax_case(s, 3, SM_MASK_PARAM | SM_FILL_HALF, 14, false);
        softmax_case(s, 1, SM_FILL_HALF, 15, false);
        softmax_case(s, 3, 0, 16, true);
        softmax_case(s, 1, SM_MASK_PARAM, 17, true);
        softmax_case(s, 1, SM_EXP_OUT, 18, false);
        softmax_case(s, 3, SM_OUT_ONLY, 19, false);
        softmax_case(s, 1, SM_OUT_ONLY | SM_CLAMP_FIRST | SM_FILL_HALF, 20, false);
        softmax_case(s, 3, SM_OUT_ONLY, 21, true);
        softmax_case(s, 1, SM_OUT_ONLY | SM_MASK_PARAM, 22, false);
    }
}

int main(void)
{
    /* TESSEL_SGEMM=avx512 (ctest's test_causal_avx512): every f32 dot in
     * tessel's own kernel, so the fused attention packs K and V once a
     * head (k_dot.c's attention_packs) where the unfused run packs each
     * product's B; otherwise as the library decides */
    const char *sgemm = getenv("TESSEL_SGEMM");
    own_kernel = sgemm && !strcmp(sgemm, "avx512");
    if (own_kernel)
        dev_blas_choose_sgemm(DEV_SGEMM_AVX512);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(causal_masks_recognised),
        cmocka_unit_test(other_masks_not),
        cmocka_unit_test(scores_read_elsewhere),
        cmocka_unit_test(skipped_tiles_change_nothing),
        cmocka_unit_test(finite_fill_reads_every_column),
        cmocka_unit_test(zero_triangles),
        cmocka_unit_test(dot_epilogues),
        cmocka_unit_test(dot_softmaxes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
