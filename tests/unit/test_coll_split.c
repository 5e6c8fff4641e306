/*
 * test_coll_split.c: the in-process reduce path of the collectives
 * (coll/kernels.c, coll/result.c's split parts, coll/steps.c's split_result):
 * a group's all-reduce (and all-gather) computed by all its members at
 * once, each its part, written into every member's result.
 *
 * Expected values are computed here independently, element by element,
 * from XLA's semantics: the reducer applied in group order, rounding to
 * the element type at each step (C's own f32 / f64 arithmetic), maximum
 * and minimum propagating NaN (the left one when both are) and keeping
 * the left operand on a tie (so max(-0, +0) is -0), integers wrapping.
 * Results are compared bit for bit.
 *
 *  1. coll_combine over 1..8 sources into 1..3 destinations, every
 *     type and reducer of the fast loops and one of the fallback (f16),
 *     counts not divisible by anything (tails, misaligned offsets),
 *     ordinary and streaming stores, a destination that is a source.
 *  2. coll_split_part: every part of 1..8 members over uneven counts,
 *     into per-member results and into one shared result; and
 *     coll_split_part_add (an all-reduce taking in its add): each
 *     member's result the sum in group order plus its own addend, f32
 *     and f64, ordinary and streaming stores; other types refused.
 *  3. Whole runs through the public API: replayed (--spmd) all-reduces of
 *     f32 add, f64 max and s32 add over 1..8 devices (threads of this
 *     process) with counts that do not divide by the device count, groups
 *     in a scattered order, an all-gather, one big enough for streaming
 *     stores, and (TsTuning.copies_bytes < 0) the shared result.
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
#include "coll/coll.h"
#include "tessel.h"

/* A deterministic value for element i of operand j (seeded), with NaNs,
 * signed zeros and ties among them for the floats. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double fval(uint64_t seed, int j, int64_t i)
{
    uint64_t h = mix(seed ^ mix((uint64_t)j * 1000003u + (uint64_t)i));
    switch (h % 16) {
    case 0: return NAN;
    case 1: return -0.0;
    case 2: return 0.0;
    case 3: return 1.0; /* ties */
    default: return ((double)(h >> 11) * 0x1p-53 - 0.5) * 1000.0;
    }
}

static int64_t ival(uint64_t seed, int j, int64_t i)
{
    uint64_t h = mix(seed ^ mix((uint64_t)j * 7919u + (uint64_t)i));
    return (int64_t)h; /* wraps when stored */
}

/* XLA's maximum / minimum, written out. */
static double ref_max(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return b > a ? b : a;
}

static double ref_min(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return b < a ? b : a;
}

/* Operand j of n elements of type t, element i from the generators. */
static void fill(IrType t, void *p, int j, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        switch (t) {
        case IR_F32: ((float *)p)[i] = (float)fval(seed, j, i); break;
        case IR_F64: ((double *)p)[i] = fval(seed, j, i); break;
        case IR_S32: ((int32_t *)p)[i] = (int32_t)(uint32_t)ival(seed, j, i); break;
        case IR_U8: ((uint8_t *)p)[i] = (uint8_t)ival(seed, j, i); break;
        case IR_S64: ((int64_t *)p)[i] = ival(seed, j, i); break;
        default: fail();
        }
}

/* Element i of op over the nsrc operands, in order, into out (one element
 * of type t). */
static void expect_at(IrType t, IrOpcode op, const void *const *src, int nsrc, int64_t i, void *out)
{
    switch (t) {
    case IR_F32: {
        float a = ((const float *)src[0])[i];
        for (int j = 1; j < nsrc; j++) {
            float b = ((const float *)src[j])[i];
            a = op == OP_ADD ? a + b : op == OP_MULTIPLY ? a * b : op == OP_MAXIMUM ? (float)ref_max(a, b)
                                                                                    : (float)ref_min(a, b);
        }
        memcpy(out, &a, sizeof a);
        return;
    }
    case IR_F64: {
        double a = ((const double *)src[0])[i];
        for (int j = 1; j < nsrc; j++) {
            double b = ((const double *)src[j])[i];
            a = op == OP_ADD ? a + b : op == OP_MULTIPLY ? a * b : op == OP_MAXIMUM ? ref_max(a, b) : ref_min(a, b);
        }
        memcpy(out, &a, sizeof a);
        return;
    }
    case IR_S32: {
        int32_t a = ((const int32_t *)src[0])[i];
        for (int j = 1; j < nsrc; j++) {
            int32_t b = ((const int32_t *)src[j])[i];
            a = op == OP_ADD        ? (int32_t)((uint32_t)a + (uint32_t)b)
                : op == OP_MULTIPLY ? (int32_t)((uint32_t)a * (uint32_t)b)
                : op == OP_MAXIMUM  ? (b > a ? b : a)
                : op == OP_MINIMUM  ? (b < a ? b : a)
                : op == OP_AND      ? (a & b)
                : op == OP_OR       ? (a | b)
                                    : (a ^ b);
        }
        memcpy(out, &a, sizeof a);
        return;
    }
    case IR_U8: {
        uint8_t a = ((const uint8_t *)src[0])[i];
        for (int j = 1; j < nsrc; j++) {
            uint8_t b = ((const uint8_t *)src[j])[i];
            a = op == OP_ADD ? (uint8_t)(a + b) : op == OP_MAXIMUM ? (b > a ? b : a) : (b < a ? b : a);
        }
        *(uint8_t *)out = a;
        return;
    }
    case IR_S64: {
        int64_t a = ((const int64_t *)src[0])[i];
        for (int j = 1; j < nsrc; j++) {
            int64_t b = ((const int64_t *)src[j])[i];
            a = op == OP_ADD ? (int64_t)((uint64_t)a + (uint64_t)b) : op == OP_MAXIMUM ? (b > a ? b : a)
                                                                                     : (b < a ? b : a);
        }
        memcpy(out, &a, sizeof a);
        return;
    }
    default:
        fail();
    }
}

/* ---- 1. the combine loop ---- */

static void check_combine(IrType t, IrOpcode op, int nsrc, int ndst, int64_t count, int64_t soff, int64_t doff,
                          bool stream, bool in_place)
{
    size_t es = ir_type_size(t);
    void *src[8], *dst[3];
    for (int j = 0; j < nsrc; j++) {
        src[j] = malloc((size_t)(count + soff + 1) * es);
        fill(t, src[j], j, count + soff, (uint64_t)(count * 31 + nsrc));
    }
    for (int k = in_place ? 1 : 0; k < ndst; k++) {
        dst[k] = malloc((size_t)(count + doff + 1) * es + 64);
        memset(dst[k], 0xA5, (size_t)(count + doff + 1) * es + 64);
    }
    /* The expected bytes, from the sources as they are before the call. */
    uint8_t *want = malloc((size_t)count * es + 1);
    for (int64_t i = 0; i < count; i++)
        expect_at(t, op, (const void *const *)src, nsrc, soff + i, want + (size_t)i * es);
    if (in_place) /* destination 0 is source 0 (same offset) */
        dst[0] = src[0];
    int64_t d0 = in_place ? soff : doff;
    assert_true(coll_combine(op, t, dst, ndst, d0, (const void *const *)src, nsrc, soff, count, stream));
    for (int k = 0; k < ndst; k++) {
        const uint8_t *got = (const uint8_t *)dst[k] + (size_t)d0 * es;
        if (memcmp(got, want, (size_t)count * es) != 0) {
            int64_t i = 0;
            while (memcmp(got + (size_t)i * es, want + (size_t)i * es, es) == 0)
                i++;
            fail_msg("%s %s, %d sources, count %lld, stream %d, destination %d: element %lld differs",
                     ir_type_name(t), ir_op_name(op), nsrc, (long long)count, (int)stream, k, (long long)i);
        }
        /* Nothing written past the end. */
        if (!in_place || k > 0)
            assert_int_equal(((const uint8_t *)dst[k])[(size_t)(count + d0) * es], 0xA5);
    }
    free(want);
    for (int j = 0; j < nsrc; j++)
        free(src[j]);
    for (int k = in_place ? 1 : 0; k < ndst; k++)
        free(dst[k]);
}

static void combine_loops(void **state)
{
    (void)state;
    static const IrOpcode fops[] = {OP_ADD, OP_MULTIPLY, OP_MAXIMUM, OP_MINIMUM};
    static const IrOpcode iops[] = {OP_ADD, OP_MULTIPLY, OP_MAXIMUM, OP_MINIMUM, OP_AND, OP_OR, OP_XOR};
    static const int64_t counts[] = {1, 3, 17, 100, 1037};
    for (int c = 0; c < 5; c++)
        for (int nsrc = 1; nsrc <= 8; nsrc++)
            for (int s = 0; s < 2; s++) {
                int ndst = 1 + (nsrc + c) % 3;
                int64_t soff = (c + nsrc) % 3, doff = (c * 5 + nsrc) % 7;
                for (int k = 0; k < 4; k++) {
                    check_combine(IR_F32, fops[k], nsrc, ndst, counts[c], soff, doff, s, false);
                    check_combine(IR_F64, fops[k], nsrc, ndst, counts[c], soff, doff, s, false);
                }
                for (int k = 0; k < 7; k++)
                    check_combine(IR_S32, iops[k], nsrc, ndst, counts[c], soff, doff, s, false);
                check_combine(IR_U8, OP_MAXIMUM, nsrc, ndst, counts[c], soff, doff, s, false);
                check_combine(IR_S64, OP_MINIMUM, nsrc, ndst, counts[c], soff, doff, s, false);
                check_combine(IR_F32, OP_ADD, nsrc, ndst, counts[c], soff, soff, s, true);
            }
}

/* The fallback types go through dev_red_combine_array: f16 add of exact
 * small integers against the sum worked out here. */
static void combine_fallback(void **state)
{
    (void)state;
    enum { N = 1001 };
    /* f16 bits of 0..12 (exact: small integers). */
    static const uint16_t F16[13] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600,
                                     0x4700, 0x4800, 0x4880, 0x4900, 0x4980, 0x4A00};
    uint16_t a[N], b[N], c[N], out[N];
    for (int i = 0; i < N; i++) {
        a[i] = F16[i % 8];
        b[i] = F16[i % 5];
        c[i] = F16[1];
    }
    const void *src[3] = {a, b, c};
    void *dst[1] = {out};
    assert_true(coll_combine(OP_ADD, IR_F16, dst, 1, 0, src, 3, 0, N, false));
    for (int i = 0; i < N; i++)
        assert_int_equal(out[i], F16[i % 8 + i % 5 + 1]);
    /* f16 xor is not a reducer of floats: refused. */
    assert_false(coll_combine(OP_XOR, IR_F16, dst, 1, 0, src, 3, 0, N, false));
}

/* ---- 2. the parts ---- */

static const char AR_TEXT[] =
    "HloModule s\n"
    "max {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n  ROOT m = f64[] maximum(a, b)\n}\n"
    "ENTRY main {\n  x = f64[%lld] parameter(0)\n"
    "  ROOT r = f64[%lld] all-reduce(x), replica_groups={}, to_apply=max\n}\n";

static void split_parts(void **state)
{
    (void)state;
    for (int size = 1; size <= 8; size++)
        for (int64_t count = 1; count < 3000; count = count * 3 + size) {
            char text[sizeof AR_TEXT + 64];
            snprintf(text, sizeof text, AR_TEXT, (long long)count, (long long)count);
            IrModule *m = NULL;
            IrDiag d = {0};
            IrParseOptions po = ir_default_parse_options();
            assert_int_equal(ir_parse("s.hlo", text, strlen(text), &po, &m, &d), IR_OK);
            const IrComputation *e = ir_entry(m);
            const IrInstr *ins = &e->instr[e->root];
            const IrShape *s = &e->instr[ir_find_instr(e, "x")].shape;
            DevValue *val[8], **ops[8], *own[8], *shared;
            int64_t members[8];
            for (int j = 0; j < size; j++) {
                val[j] = dev_value_new(s);
                fill(IR_F64, val[j]->data, j, count, 77);
                ops[j] = &val[j];
                members[j] = size - 1 - j; /* group order reversed */
                own[j] = dev_value_new_uninit(s);
            }
            shared = dev_value_new_uninit(s);
            IrOpcode op = OP_COUNT;
            assert_true(coll_split_ok(m, ins, (DevValue *const *const *)ops, members, size, 1, &op));
            assert_int_equal(op, OP_MAXIMUM);
            /* Every part into every member's own result, then into the shared one. */
            void *scratch[16];
            for (int part = size - 1; part >= 0; part--) {
                coll_split_part(ins, (DevValue *const *const *)ops, members, size, op, part, own, size, scratch,
                                   part % 2);
                coll_split_part(ins, (DevValue *const *const *)ops, members, size, op, part, &shared, 1, scratch,
                                   false);
            }
            const void *src[8];
            for (int j = 0; j < size; j++)
                src[j] = val[members[j]]->data;
            for (int64_t i = 0; i < count; i++) {
                double want;
                expect_at(IR_F64, OP_MAXIMUM, src, size, i, &want);
                for (int j = 0; j <= size; j++) {
                    const double *got = (const double *)(j < size ? own[j] : shared)->data;
                    if (memcmp(&got[i], &want, sizeof want) != 0)
                        fail_msg("%d members, count %lld, result %d, element %lld: %g, want %g", size,
                                 (long long)count, j, (long long)i, got[i], want);
                }
            }
            for (int j = 0; j < size; j++) {
                dev_value_unref(val[j]);
                dev_value_unref(own[j]);
            }
            dev_value_unref(shared);
            ir_module_free(m);
        }
}

static const char AR_ADD_TEXT[] =
    "HloModule s\n"
    "add {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n  ROOT m = %s[] add(a, b)\n}\n"
    "ENTRY main {\n  x = %s[%lld] parameter(0)\n"
    "  ROOT r = %s[%lld] all-reduce(x), replica_groups={}, to_apply=add\n}\n";

/* Element i of member j's result: the sum over src in order, then + its
 * addend, rounded to t at each step. */
static void expect_add_at(IrType t, const void *const *src, int nsrc, const void *add, int64_t i, void *out)
{
    expect_at(t, OP_ADD, src, nsrc, i, out);
    if (t == IR_F32)
        *(float *)out = *(float *)out + ((const float *)add)[i];
    else
        *(double *)out = *(double *)out + ((const double *)add)[i];
}

static void split_parts_add_one(IrType t, int size, int64_t count)
{
    const char *ty = ir_type_name(t);
    char text[sizeof AR_ADD_TEXT + 128];
    snprintf(text, sizeof text, AR_ADD_TEXT, ty, ty, ty, ty, (long long)count, ty, (long long)count);
    IrModule *m = NULL;
    IrDiag d = {0};
    IrParseOptions po = ir_default_parse_options();
    assert_int_equal(ir_parse("s.hlo", text, strlen(text), &po, &m, &d), IR_OK);
    const IrComputation *e = ir_entry(m);
    const IrInstr *ins = &e->instr[e->root];
    const IrShape *s = &e->instr[ir_find_instr(e, "x")].shape;
    DevValue *val[8], **ops[8], *own[8], *add[8];
    int64_t members[8];
    for (int j = 0; j < size; j++) {
        val[j] = dev_value_new(s);
        fill(t, val[j]->data, j, count, 91);
        ops[j] = &val[j];
        members[j] = (j + size / 2) % size; /* group order rotated */
        own[j] = dev_value_new_uninit(s);
        add[j] = dev_value_new(s);
        fill(t, add[j]->data, 16 + j, count, 92);
    }
    IrOpcode op = OP_COUNT;
    assert_true(coll_split_ok(m, ins, (DevValue *const *const *)ops, members, size, 1, &op));
    assert_int_equal(op, OP_ADD);
    /* out[q] and add[q] are member members[q]'s result and addend. */
    DevValue *out[8], *with[8];
    for (int q = 0; q < size; q++) {
        out[q] = own[members[q]];
        with[q] = add[members[q]];
    }
    void *scratch[24];
    for (int part = 0; part < size; part++)
        coll_split_part_add((DevValue *const *const *)ops, members, size, part, out, with, scratch, part % 2);
    const void *src[8];
    for (int j = 0; j < size; j++)
        src[j] = val[members[j]]->data;
    size_t es = ir_type_size(t);
    for (int64_t i = 0; i < count; i++)
        for (int j = 0; j < size; j++) {
            uint8_t want[8];
            expect_add_at(t, src, size, add[j]->data, i, want);
            if (memcmp(own[j]->data + (size_t)i * es, want, es) != 0)
                fail_msg("%s, %d members, count %lld, member %d, element %lld differs", ty, size, (long long)count, j,
                         (long long)i);
        }
    for (int j = 0; j < size; j++) {
        dev_value_unref(val[j]);
        dev_value_unref(own[j]);
        dev_value_unref(add[j]);
    }
    ir_module_free(m);
}

static void split_parts_add(void **state)
{
    (void)state;
    for (int size = 1; size <= 8; size++)
        for (int64_t count = 1; count < 5000; count = count * 3 + size) {
            split_parts_add_one(IR_F32, size, count);
            split_parts_add_one(IR_F64, size, count);
        }
    /* Other types: refused (the all-reduce then runs apart from its add). */
    int32_t a[4] = {1, 2, 3, 4}, o[4];
    const void *src[1] = {a}, *with[1] = {a};
    void *dst[1] = {o};
    assert_false(coll_combine_add(IR_S32, dst, 1, 0, src, 1, 0, with, 4, false));
    assert_false(coll_combine_add(IR_F32, dst, 0, 0, src, 1, 0, with, 4, false));
}

/* ---- 3. whole runs ---- */

typedef struct Run {
    const char *type;         /* HLO element type */
    IrType t;
    const char *dtype;        /* numpy's */
    const char *reducer;      /* HLO opcode */
    IrOpcode op;
    int devices;
    int64_t count;            /* per-device elements */
    const char *groups;       /* replica_groups text */
    bool gather;              /* all-gather instead (dimensions={0}) */
} Run;

/* Group members of device d (from a list of groups in text form as
 * {{a,b},{c,d}}, or every device for "{}"): into g, returns the count. */
static int group_of(const Run *r, int dev, int *g)
{
    if (strcmp(r->groups, "{}") == 0) {
        for (int j = 0; j < r->devices; j++)
            g[j] = j;
        return r->devices;
    }
    const char *p = r->groups + 1;
    while (*p == '{') {
        int n = 0, mine = 0;
        p++;
        while (*p != '}') {
            g[n] = (int)strtol(p, (char **)&p, 10);
            mine |= g[n++] == dev;
            if (*p == ',')
                p++;
        }
        p++;
        if (mine)
            return n;
        if (*p == ',')
            p++;
    }
    fail();
    return 0;
}

/* The tuning of the runs (the cases below set copies and streaming). */
static TsTuning g_tuning;

static void run_one(const Run *r)
{
    char text[1024];
    int64_t out = r->gather ? 0 : r->count;
    int g[8];
    if (r->gather)
        out = r->count * group_of(r, 0, g);
    snprintf(text, sizeof text,
             "HloModule w, num_partitions=%d\n"
             "red {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n  ROOT c = %s[] %s(a, b)\n}\n"
             "ENTRY main {\n  x = %s[%lld] parameter(0)\n"
             "  ROOT r = %s[%lld] %s(x), channel_id=1, replica_groups=%s, use_global_device_ids=true%s\n}\n",
             r->devices, r->type, r->type, r->type, r->reducer, r->type, (long long)r->count, r->type,
             (long long)out, r->gather ? "all-gather" : "all-reduce", r->groups,
             r->gather ? ", dimensions={0}" : ", to_apply=red");
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    TsOutputs *o = NULL;
    if (ts_module_parse("w.hlo", text, strlen(text), NULL, &m, &d) != TS_OK)
        fail_msg("%s\n%s", d.msg ? d.msg : "parse failed", text);
    TsCompileOptions co = {.num_partitions = r->devices, .spmd = true};
    assert_int_equal(ts_compile(m, &co, &plan, &d), TS_OK);
    size_t es = ir_type_size(r->t);
    void *x[8];
    TsArray arr[8];
    TsInput in[8];
    char keys[8][16];
    int64_t dims[1] = {r->count};
    for (int dev = 0; dev < r->devices; dev++) {
        x[dev] = malloc((size_t)r->count * es);
        fill(r->t, x[dev], dev, r->count, (uint64_t)(r->devices * 100 + r->count));
        if (r->t == IR_F32 && r->op == OP_ADD) /* no NaN: sums of finite values */
            for (int64_t i = 0; i < r->count; i++)
                if (isnan(((float *)x[dev])[i]))
                    ((float *)x[dev])[i] = (float)dev;
        snprintf(keys[dev], sizeof keys[dev], "x@%d", dev);
        arr[dev] = (TsArray){.dtype = r->dtype, .rank = 1, .dims = dims, .data = x[dev],
                             .nbytes = (size_t)r->count * es};
        in[dev] = (TsInput){.key = keys[dev], .array = &arr[dev]};
    }
    TsRunOptions ro = {.ninputs = r->devices, .inputs = in, .steps = 3, .tuning = g_tuning};
    if (ts_plan_run(plan, &ro, &o, &d) != TS_OK)
        fail_msg("%s", d.msg ? d.msg : "run failed");
    assert_int_equal(ts_outputs_num_devices(o), r->devices);
    uint8_t *got = malloc((size_t)out * es), *want = malloc(es);
    for (int dev = 0; dev < r->devices; dev++) {
        assert_int_equal(ts_outputs_read(o, dev, got, (size_t)out * es, &d), TS_OK);
        int n = group_of(r, dev, g);
        const void *src[8];
        for (int j = 0; j < n; j++)
            src[j] = x[g[j]];
        for (int64_t i = 0; i < out; i++) {
            if (r->gather)
                memcpy(want, (const uint8_t *)x[g[i / r->count]] + (size_t)(i % r->count) * es, es);
            else
                expect_at(r->t, r->op, src, n, i, want);
            if (memcmp(got + (size_t)i * es, want, es) != 0)
                fail_msg("%s %s over %d devices (groups %s), %lld elements: device %d element %lld differs",
                         r->type, r->gather ? "all-gather" : r->reducer, r->devices, r->groups,
                         (long long)r->count, dev, (long long)i);
        }
    }
    free(got);
    free(want);
    for (int dev = 0; dev < r->devices; dev++)
        free(x[dev]);
    ts_outputs_free(o);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_diag_clear(&d);
}

static void runs(void **state)
{
    (void)state;
    for (int n = 1; n <= 8; n++) {
        run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, n, 1000 + 3 * n + 1, "{}", false});
        run_one(&(Run){"f64", IR_F64, "<f8", "maximum", OP_MAXIMUM, n, 37 * n + 5, "{}", false});
        run_one(&(Run){"s32", IR_S32, "<i4", "add", OP_ADD, n, 4099, "{}", false});
        run_one(&(Run){"f32", IR_F32, "<f4", "minimum", OP_MINIMUM, n, 7, "{}", false});
    }
    run_one(&(Run){"f32", IR_F32, "<f4", "maximum", OP_MAXIMUM, 8, 10007, "{{5,0,3},{7,1},{2,6,4}}", false});
    run_one(&(Run){"s32", IR_S32, "<i4", "multiply", OP_MULTIPLY, 6, 333, "{{4,2,0},{1,3,5}}", false});
    run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, 6, 1001, "{{4,1,3},{0,2,5}}", true});
    /* Big enough for streaming stores (coll_stream: 16 MiB written). */
    run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, 3, (3 << 20) + 5, "{}", false});
}

/* The same with one result shared by each group's members. */
static void runs_shared(void **state)
{
    (void)state;
    g_tuning.copies_bytes = -1; /* no copies */
    for (int n = 2; n <= 8; n += 3)
        run_one(&(Run){"f64", IR_F64, "<f8", "minimum", OP_MINIMUM, n, 5003, "{}", false});
    run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, 4, 999, "{{3,1},{0,2}}", true});
    g_tuning.copies_bytes = 0;
}

/* The big cases again with streaming stores into the devices' bound
 * results forced on and then off (TsTuning.stream_bound): the same
 * bits either way. */
static void runs_stream_bound(void **state)
{
    (void)state;
    for (int on = 1; on >= 0; on--) {
        g_tuning.stream_bound = on ? TS_STREAM_ON : TS_STREAM_OFF;
        run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, 3, (3 << 20) + 5, "{}", false});
        run_one(&(Run){"f32", IR_F32, "<f4", "add", OP_ADD, 2, (3 << 20) + 7, "{}", true});
    }
    g_tuning.stream_bound = TS_STREAM_MEASURE;
}

/* coll_stream_into for a result from an allocator (DevValue.alloc):
 * the override decides at each call; without it (first in this process)
 * the measured verdict is
 * the same at every call and the probe gives its memory back. Below
 * COLL_STREAM_BYTES nothing streams. */
static void stream_into_bound(void **state)
{
    (void)state;
    DevAllocator *a = NULL;
    IrDiag d = {0};
    assert_int_equal(dev_allocator_get("test_coll_split", 0, &a, &d), IR_OK);
    DevValue v;
    memset(&v, 0, sizeof v);
    v.alloc = a;
    DevValue *out[1] = {&v};
    assert_true(coll_stream_into(COLL_STREAM_ON, out, 1, COLL_STREAM_BYTES));
    assert_false(coll_stream_into(COLL_STREAM_ON, out, 1, COLL_STREAM_BYTES - 1));
    assert_false(coll_stream_into(COLL_STREAM_OFF, out, 1, COLL_STREAM_BYTES));
    int8_t v0[COLL_PROBE_CLASSES];
    coll_stream_verdicts(v0);
    assert_int_equal(v0[0], 0); /* not probed yet */
    DevAllocStats before, after;
    dev_allocator_stats(a, &before);
    bool first = coll_stream_into(COLL_STREAM_MEASURE, out, 1, COLL_STREAM_BYTES);
    coll_stream_verdicts(v0);
    assert_int_equal(v0[0], first ? 1 : -1); /* what --stats reports */
    dev_allocator_stats(a, &after);
    assert_int_equal(after.nlive, before.nlive);
    assert_int_equal(after.nallocs, before.nallocs + 2);
    for (int k = 0; k < 3; k++)
        assert_int_equal(coll_stream_into(COLL_STREAM_MEASURE, out, 1, COLL_STREAM_BYTES), first);
    /* Measured once: no more probes. */
    dev_allocator_stats(a, &before);
    assert_int_equal(before.nallocs, after.nallocs);
    /* Unbound results stream by size alone. */
    v.alloc = NULL;
    assert_true(coll_stream_into(COLL_STREAM_MEASURE, out, 1, COLL_STREAM_BYTES));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* First: before any run has measured the verdict. */
        cmocka_unit_test(stream_into_bound),
        cmocka_unit_test(combine_loops),
        cmocka_unit_test(combine_fallback),
        cmocka_unit_test(split_parts),
        cmocka_unit_test(split_parts_add),
        cmocka_unit_test(runs),
        cmocka_unit_test(runs_shared),
        cmocka_unit_test(runs_stream_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
