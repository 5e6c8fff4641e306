/*
 * test_compile_speed.c: what keeps `tessel compile` linear and its memory
 * small (issue #6): the arena (geometric blocks, zeroing, reset), reserved
 * instruction arrays, the parser's size estimate on odd layouts, interned
 * shardings, the plan's fallback marks, and the whole pipeline (parse,
 * propagate, partition, plan, print) scaling linearly in time and memory on
 * a generated Megatron-style model.
 *
 * Expected values are worked out by hand in the comments (the model's
 * collectives follow the rule written above spmd_dot), never printed by the
 * code under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compile.h"
#include "runtime/runtime.h"

/* ---- helpers ---- */

static IrModule *parse_text(const char *text)
{
    IrParseOptions o = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &o, &m, &d);
    if (st != IR_OK)
        print_error("parse: %s\n", d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    assert_int_equal(st, IR_OK);
    return m;
}

static IrComputation *comp_named(IrModule *m, const char *name)
{
    int32_t ci = ir_find_computation(m, name);
    assert_true(ci >= 0);
    return m->comp[ci];
}

/* A growable text buffer for generated modules. */
typedef struct Text {
    char *s;
    size_t n, cap;
} Text;

static void add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(Text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        assert_true(k >= 0);
        if (t->s && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        t->cap = (t->cap + (size_t)k + 1) * 2;
        t->s = realloc(t->s, t->cap);
        assert_non_null(t->s);
    }
}

/* ---- the arena ---- */

/* Every allocation is zero, also after a reset hands the same memory out
 * again; the arena grows in few blocks; reset keeps one block. */
static void test_arena_zero_and_reset(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    assert_non_null(a);
    unsigned char *first = NULL;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 97) + 1;
        unsigned char *p = ir_alloc(a, n);
        assert_non_null(p);
        assert_true(((uintptr_t)p & 15) == 0);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(p[k], 0);
        memset(p, 0xab, n);
        if (!first)
            first = p;
    }
    /* 20000 allocations of 16..112 bytes (rounded to 16): 1.3 MB. Blocks
     * of 64, 128, 256, 512 KiB, 1 MiB hold 1.94 MiB: at most 2 MiB. */
    size_t before = ir_arena_bytes(a);
    assert_true(before >= (size_t)1300000 && before <= ((size_t)2 << 20));
    ir_arena_reset(a);
    size_t after = ir_arena_bytes(a);
    assert_true(after > 0 && after < before);
    /* The newest block is reused: its memory comes back zeroed. */
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 97) + 1;
        unsigned char *p = ir_alloc(a, n);
        assert_non_null(p);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(p[k], 0);
        memset(p, 0xcd, n);
    }
    /* A request larger than a quarter block gets a block of its own. */
    unsigned char *big = ir_alloc(a, (size_t)5 << 20);
    assert_non_null(big);
    assert_int_equal(big[0], 0);
    assert_int_equal(big[((size_t)5 << 20) - 1], 0);
    unsigned char *small = ir_alloc(a, 8);
    assert_non_null(small);
    assert_int_equal(small[0], 0);
    ir_arena_reset(a);
    unsigned char *again = ir_alloc(a, 32);
    assert_non_null(again);
    assert_int_equal(again[31], 0);
    ir_arena_free(a);
    (void)first;
}

static void test_arena_overflow(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    assert_null(ir_alloc(a, SIZE_MAX));
    assert_null(ir_alloc(a, SIZE_MAX - 8));
    assert_null(ir_alloc_array(a, SIZE_MAX / 4, 8));
    /* Out of memory for a new block: NULL, and the arena still works. */
    ts_fail_alloc_after(1);
    void *p = ir_alloc(a, 100);
    ts_fail_alloc_after(0);
    assert_null(p);
    assert_non_null(ir_alloc(a, 100));
    ir_arena_free(a);
    /* The hint accepts anything and changes no byte. */
    ir_hint_huge(NULL, 0);
    ir_hint_huge(NULL, (size_t)4 << 20);
    char buf[64];
    memset(buf, 7, sizeof buf);
    ir_hint_huge(buf, sizeof buf);
    size_t n = (size_t)6 << 20;
    unsigned char *blk = ts_malloc(n);
    assert_non_null(blk);
    memset(blk, 9, n);
    ir_hint_huge(blk, n);
    assert_int_equal(blk[0], 9);
    assert_int_equal(blk[n - 1], 9);
    ts_free(blk);
    assert_int_equal(buf[63], 7);
}

/* ---- instruction arrays ---- */

static int32_t add_param(IrModule *m, IrComputation *c, int64_t number)
{
    IrInstr ins = {.a.x = &ir_no_attrs_x};
    ins.op = OP_PARAMETER;
    ins.a.parameter_number = number;
    char name[32];
    snprintf(name, sizeof name, "p%lld", (long long)number);
    ins.name = ir_unique_name(m, name);
    assert_non_null(ins.name);
    assert_int_equal(ir_shape_make(m->arena, &ins.shape, IR_F32, 0, NULL), IR_OK);
    return ir_add_instr(m, c, &ins);
}

/* A reserved array does not move while it fills; a large one (5000 * ~1 KiB
 * = 5 MB, past the 2 MiB huge-page path) keeps every instruction and the
 * parameter table when it grows; a failed reservation changes nothing. */
static void test_reserve_instrs(void **state)
{
    (void)state;
    IrModule *m = ir_module_new("r");
    int32_t ci = ir_add_computation(m, "c");
    assert_true(ci >= 0);
    IrComputation *c = m->comp[ci];
    assert_int_equal(ir_reserve_instrs(c, 1000), IR_OK);
    assert_true(c->cap >= 1000);
    assert_int_equal(c->ninstr, 0);
    IrInstr *arr = c->instr;
    for (int32_t i = 0; i < 1000; i++)
        assert_int_equal(add_param(m, c, i), i);
    assert_ptr_equal(c->instr, arr);
    /* Smaller than what is there: nothing to do. */
    assert_int_equal(ir_reserve_instrs(c, 10), IR_OK);
    assert_ptr_equal(c->instr, arr);
    /* Out of memory: IR_ENOMEM, the computation as it was. */
    int32_t cap = c->cap;
    ts_fail_alloc_after(1);
    IrStatus st = ir_reserve_instrs(c, 100000);
    ts_fail_alloc_after(0);
    assert_int_equal(st, IR_ENOMEM);
    assert_int_equal(c->cap, cap);
    assert_ptr_equal(c->instr, arr);
    assert_int_equal(c->ninstr, 1000);
    /* Grow by doubling past 2 MiB. */
    for (int32_t i = 1000; i < 5000; i++)
        assert_int_equal(add_param(m, c, i), i);
    assert_int_equal(c->ninstr, 5000);
    assert_int_equal(c->nparam, 5000);
    for (int32_t i = 0; i < 5000; i += 499) {
        char name[32];
        snprintf(name, sizeof name, "p%d", (int)i);
        assert_string_equal(c->instr[i].name, name);
        assert_int_equal(c->param[i], i);
        assert_int_equal(c->instr[i].a.parameter_number, i);
    }
    /* A clone is sized exactly and equal. */
    m->entry = ci;
    IrModule *k = ir_module_clone(m);
    assert_non_null(k);
    IrComputation *kc = comp_named(k, "c");
    assert_int_equal(kc->ninstr, 5000);
    assert_int_equal(kc->cap, 5000);
    assert_string_equal(kc->instr[4999].name, "p4999");
    assert_true(kc->instr[4999].name != c->instr[4999].name);
    ir_module_free(k);
    ir_module_free(m);
}

/* ---- the parser's size estimate ---- */

/* The estimate (lines up to the next line starting with '}') is only a
 * hint: layouts where it is wrong parse the same. */
static void test_parse_odd_layouts(void **state)
{
    (void)state;
    /* Several instructions on one line, the '}' on the same line: the
     * estimate finds no closing line for the first computation. */
    IrModule *m = parse_text("HloModule one\n"
                             "add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }\n"
                             "ENTRY e { p = f32[4] parameter(0) z = f32[] constant(0) "
                             "ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add }\n");
    assert_int_equal(comp_named(m, "add")->ninstr, 3);
    IrComputation *e = comp_named(m, "e");
    assert_int_equal(e->ninstr, 3);
    assert_int_equal(e->instr[2].called[0], ir_find_computation(m, "add"));
    ir_module_free(m);

    /* A multi-line literal with lines starting with '}' inside the entry:
     * the estimate (2 lines) is short; the array grows. */
    m = parse_text("HloModule lit\n"
                   "ENTRY e {\n"
                   "  c = f32[2,2] constant({\n"
                   "{1, 2},\n"
                   "{3, 4}\n"
                   "})\n"
                   "  n = f32[2,2] negate(c)\n"
                   "  m = f32[2,2] negate(n)\n"
                   "  ROOT r = f32[2,2] add(n, m)\n"
                   "}\n");
    e = comp_named(m, "e");
    assert_int_equal(e->ninstr, 4);
    assert_int_equal(e->root, 3);
    ir_module_free(m);

    /* 300,000 blank lines and one instruction: the reservation stops at
     * 2^18 instructions (a hint must not reserve gigabytes). */
    Text t = {0};
    add(&t, "HloModule blank\nENTRY e {\n");
    for (int i = 0; i < 300000; i++)
        add(&t, "\n");
    add(&t, "  ROOT p = f32[] parameter(0)\n}\n");
    m = parse_text(t.s);
    e = comp_named(m, "e");
    assert_int_equal(e->ninstr, 1);
    assert_true(e->cap <= (1 << 18));
    ir_module_free(m);
    free(t.s);
}

/* Errors read the same whether or not the message was formatted early. */
static void test_parse_messages(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"ENTRY e {\n  ROOT p = f32[2] broadcast(q), dimensions={x}\n  q = f32[] parameter(0)\n}\n",
         "expected integer in dimensions, found 'x'"},
        {"ENTRY e {\n  ROOT p = f32[2] broadcast(q), dimensions=(0)\n  q = f32[] parameter(0)\n}\n",
         "expected '{' to start dimensions, found '('"},
        {"ENTRY e {\n  ROOT p = f32[2] broadcast(q), dimensions={0\n  q = f32[] parameter(0)\n}\n",
         "expected '}' to end dimensions, found 'q'"},
        {"ENTRY e {\n  ROOT p = f32[2] negate q\n}\n", "expected '(' to start the operands of negate, found 'q'"},
        {"ENTRY e {\n  ROOT p = f32[2] parameter(0), sharding={devices=[2 0,1}\n}\n",
         "expected ']' to end tile assignment dimensions, found '0'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        IrParseOptions o = ir_default_parse_options();
        IrModule *m = NULL;
        IrDiag d = {0};
        assert_int_equal(ir_parse("e.hlo", cases[i].text, strlen(cases[i].text), &o, &m, &d), IR_EINPUT);
        assert_null(m);
        assert_non_null(d.msg);
        if (!strstr(d.msg, cases[i].msg))
            fail_msg("case %zu: message '%s' lacks '%s'", i, d.msg, cases[i].msg);
        ir_diag_clear(&d);
    }
}

/* ---- the generated model ---- */

/* L Megatron layers on 2 partitions, 7 instructions each:
 *   w1 = f32[16,32] parameter, {devices=[1,2]0,1}   (column-sharded)
 *   h  = dot(x, w1)            x replicated: a local dot, h column-sharded
 *   t  = tanh(h)
 *   w2 = f32[32,16] parameter, {devices=[2,1]0,1}   (row-sharded)
 *   y  = dot(t, w2)            contracting dim tiled on both: a local dot
 *                              and one all-reduce per layer (spmd_dot)
 *   x' = add(x, y)
 *   g  = custom-call(x'), custom_call_target="user_op"  (a target tessel does
 *        not know: the fallback, marked in the plan)
 * plus x0, the neg computation's 2 instructions and the root. */
static char *model(int layers)
{
    Text t = {0};
    add(&t, "HloModule mlp_%d, num_partitions=2\n\n", layers);
    add(&t, "neg {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n\n");
    add(&t, "ENTRY main {\n  x0 = f32[8,16] parameter(0), sharding={replicated}\n");
    for (int i = 0; i < layers; i++) {
        add(&t, "  w1_%d = f32[16,32] parameter(%d), sharding={devices=[1,2]0,1}\n", i, 2 * i + 1);
        add(&t, "  h%d = f32[8,32] dot(x%d, w1_%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n", i, i,
            i);
        add(&t, "  t%d = f32[8,32] tanh(h%d)\n", i, i);
        add(&t, "  w2_%d = f32[32,16] parameter(%d), sharding={devices=[2,1]0,1}\n", i, 2 * i + 2);
        add(&t, "  y%d = f32[8,16] dot(t%d, w2_%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n", i, i,
            i);
        add(&t, "  x%d = f32[8,16] add(x%d, y%d)\n", i + 1, i, i);
        add(&t, "  g%d = f32[8,16] custom-call(x%d), custom_call_target=\"user_op\"\n", i, i + 1);
    }
    add(&t, "  ROOT r = f32[8,16] add(x%d, g%d)\n}\n", layers, layers - 1);
    return t.s;
}

typedef struct Run {
    double secs;        /* CPU time of parse .. print */
    size_t spmd_bytes;  /* arena of the partitioned module */
    size_t plan_bytes;  /* arena of the plan */
    size_t report_bytes;
    int32_t all_reduces, fallbacks, marked;
    size_t text_len;
} Run;

static Run compile_model(int layers)
{
    char *text = model(layers);
    Run r = {0};
    clock_t t0 = clock();
    IrModule *m = parse_text(text);
    CompileResult res;
    IrDiag d = {0};
    CompileOptions co = {.num_partitions = 2, .num_replicas = 1};
    IrStatus st = compile_module(m, &co, &res, &d);
    if (st != IR_OK)
        print_error("compile: %s\n", d.msg ? d.msg : "?");
    assert_int_equal(st, IR_OK);
    const PlanCluster c = res.prog.cluster[0];
    const DeviceLayout *plan = res.layouts[0];
    char *out = compile_plan_file_text(&res);
    assert_non_null(out);
    r.secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    r.text_len = strlen(out);
    r.spmd_bytes = ir_arena_bytes(c.spmd->arena);
    r.plan_bytes = ir_arena_bytes(plan->arena);
    r.report_bytes = ir_arena_bytes(c.report.arena);
    const IrComputation *e = ir_entry(c.spmd);
    for (int32_t i = 0; i < e->ninstr; i++)
        r.all_reduces += e->instr[i].op == OP_ALL_REDUCE;
    r.fallbacks = c.report.nfallback;
    /* The plan marks exactly the custom-calls (g0, g1, ...). */
    for (int32_t i = 0; i < plan->ninstrs; i++) {
        bool is_user_op = strcmp(plan->instrs[i].opcode, "custom-call") == 0;
        assert_true(plan->instrs[i].fallback == is_user_op);
        r.marked += plan->instrs[i].fallback;
    }
    ts_free(out);
    compile_result_free(&res);
    ir_diag_clear(&d);
    free(text);
    return r;
}

/* Per layer: one all-reduce (y's contracting dim is tiled on both
 * operands) and one fallback (the custom-call). */
static void test_model_collectives(void **state)
{
    (void)state;
    Run r = compile_model(5);
    assert_int_equal(r.all_reduces, 5);
    assert_int_equal(r.fallbacks, 5);
    assert_int_equal(r.marked, 5);
}

/* Shardings are interned: instructions whose sharding is the same value
 * share one copy (propagation gives the 3 column-sharded values of a layer
 * {devices=[1,2]0,1}: h, t and the weight w1 are annotated or derived). */
static void test_interned_shardings(void **state)
{
    (void)state;
    char *text = model(3);
    IrModule *m = parse_text(text);
    free(text);
    ShdPropagateOptions o = {.num_devices = 2};
    IrDiag d = {0};
    assert_int_equal(shd_propagate(m, &o, &d), IR_OK);
    IrComputation *e = ir_entry(m);
    const IrSharding *h0 = e->instr[ir_find_instr(e, "h0")].sharding;
    const IrSharding *t2 = e->instr[ir_find_instr(e, "t2")].sharding;
    assert_non_null(h0);
    assert_ptr_equal(h0, t2);
    assert_int_equal(h0->kind, SHD_TILED);
    assert_int_equal(h0->ntile, 2);
    assert_int_equal(h0->tile[0], 1);
    assert_int_equal(h0->tile[1], 2);
    /* A clone has its own copies, equal in value. */
    IrModule *k = ir_module_clone(m);
    IrComputation *ke = ir_entry(k);
    const IrSharding *kh0 = ke->instr[ir_find_instr(ke, "h0")].sharding;
    assert_true(kh0 != h0);
    assert_true(ir_sharding_equal(kh0, h0));
    char *a = ir_print_module(m), *b = ir_print_module(k);
    assert_string_equal(a, b);
    ts_free(a);
    ts_free(b);
    ir_module_free(k);
    ir_module_free(m);
}

/* 8x the layers: time and memory 8x (linear), not 64x (quadratic). CPU
 * time, best of 3, with slack for a shared machine and for caches and page
 * faults (linear measures 8 to 12 here; the limit is 32). Arena sizes are
 * deterministic, so their bound is tight. */
static void test_linear_pipeline(void **state)
{
    (void)state;
    const int small = 300, large = 8 * small;
    Run a = {0}, b = {0};
    for (int k = 0; k < 3; k++) {
        Run x = compile_model(small), y = compile_model(large);
        if (k == 0 || x.secs < a.secs)
            a = x;
        if (k == 0 || y.secs < b.secs)
            b = y;
    }
    assert_int_equal(b.all_reduces, large);
    assert_int_equal(b.fallbacks, large);
    print_message("%d layers: %.3f s, %d layers: %.3f s (ratio %.1f)\n", small, a.secs, large, b.secs,
                  a.secs > 0 ? b.secs / a.secs : 0);
    assert_true(b.secs < 32 * (a.secs > 0.002 ? a.secs : 0.002));
    /* Arenas grow in blocks of up to 2x what is used, so 8x the content
     * can take up to 16x the bytes; quadratic growth would be 64x. */
    assert_true(b.spmd_bytes <= 16 * a.spmd_bytes);
    assert_true(b.plan_bytes <= 16 * a.plan_bytes);
    assert_true(b.report_bytes <= 16 * a.report_bytes + (64 << 10));
    assert_true(b.text_len < 9 * a.text_len);
}

/* compile_is_plan_text looks at the first line and the last line only: a
 * plan starts with its header or ends with its digest line (either one
 * left is enough to refuse a damaged plan rather than run it as a model);
 * a model whose comments name plan lines is a model. */
static void test_plan_text_detection(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        bool plan;
    } cases[] = {
        {"// TesselPlanFile format=tessel-plan version=1\n", true},          /* the header */
        {"// TesselPlanFile format=tessel-plan version=9\nHloModule m\n", true}, /* any version */
        {"HloModule m\n// TesselDigest sha256=00\n", true},                  /* the digest line */
        {"HloModule m\n// TesselDigest sha256=00", true},                     /* without its newline */
        {"x\n// TesselPlan version=1\n", false},     /* plan lines in a model's comments */
        {"// TesselPlan version=1\n// TesselEnd\n", false},
        {"x\n// TesselPlanFile format=tessel-plan version=1\n", false}, /* the header not at the start */
        {"// TesselDigest sha256=00\nHloModule m\n", false},             /* the digest line not last */
        {"// TesselPlanFile format=tessel-plan version", false},         /* one byte short */
        {"", false},
        {"/", false},
        {"HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (compile_is_plan_text(cases[i].text, strlen(cases[i].text)) != cases[i].plan)
            fail_msg("case %zu: '%s'", i, cases[i].text);
    /* The length bounds what is read: the header past len is not seen. */
    static const char hdr[] = "// TesselPlanFile format=tessel-plan version=1\n";
    assert_false(compile_is_plan_text(hdr, 20));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_zero_and_reset),
        cmocka_unit_test(test_arena_overflow),
        cmocka_unit_test(test_reserve_instrs),
        cmocka_unit_test(test_parse_odd_layouts),
        cmocka_unit_test(test_parse_messages),
        cmocka_unit_test(test_model_collectives),
        cmocka_unit_test(test_interned_shardings),
        cmocka_unit_test(test_linear_pipeline),
        cmocka_unit_test(test_plan_text_detection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
