/*
 * test_parse_split.c: a large computation read by two threads
 * (ir/parse_split.c) gives what the sequential reading gives, byte for
 * byte: the same printed module, or the same error at the same place.
 * Every module text the project has (the conformance corpora, the test
 * models, the fuzz seeds) is read both ways with the split lowered to two
 * lines, so that every computation of more than a few lines is split; and
 * hand-made texts put at the split point each thing the helper must not
 * take over on its own: a name the first half defined, a second ROOT, an
 * inline computation, a nested operand, a shape left to inference, a
 * sugared async op, a forward reference, a parameter number used twice,
 * the instruction limit, a literal that spans the split line, an error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/ir.h"

/* Read `text` sequentially and split (at `split` lines), with verify on or
 * off, and check both give the same. Returns whether it parsed. */
static bool same_both_ways(const char *name, const char *text, size_t len, int32_t split, bool verify,
                           int64_t max_instructions)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = verify;
    o.limits.max_elements = (int64_t)1 << 40;
    if (max_instructions > 0)
        o.limits.max_instructions = max_instructions;
    IrModule *a = NULL, *b = NULL;
    IrDiag da = {0}, db = {0};
    o.split_lines = -1;
    IrStatus sa = ir_parse(name, text, len, &o, &a, &da);
    o.split_lines = split;
    IrStatus sb = ir_parse(name, text, len, &o, &b, &db);
    if (sa != sb)
        fail_msg("%s: status %d sequential, %d split (%s / %s)", name, sa, sb, da.msg ? da.msg : "",
                 db.msg ? db.msg : "");
    if (sa == IR_OK) {
        char *pa = ir_print_module(a), *pb = ir_print_module(b);
        assert_non_null(pa);
        assert_non_null(pb);
        if (strcmp(pa, pb) != 0)
            fail_msg("%s: the split reading prints differently", name);
        /* Indices too, which printing does not show all of. */
        assert_int_equal(a->ncomp, b->ncomp);
        for (int32_t i = 0; i < a->ncomp; i++) {
            const IrComputation *ca = a->comp[i], *cb = b->comp[i];
            assert_int_equal(ca->ninstr, cb->ninstr);
            assert_int_equal(ca->root, cb->root);
            assert_int_equal(ca->nparam, cb->nparam);
            for (int32_t k = 0; k < ca->nparam; k++)
                assert_int_equal(ca->param[k], cb->param[k]);
            for (int32_t k = 0; k < ca->ninstr; k++) {
                assert_int_equal(ca->instr[k].nopnd, cb->instr[k].nopnd);
                for (int32_t q = 0; q < ca->instr[k].nopnd; q++)
                    assert_int_equal(ca->instr[k].opnd[q], cb->instr[k].opnd[q]);
                assert_int_equal(ca->instr[k].ncalled, cb->instr[k].ncalled);
                for (int32_t q = 0; q < ca->instr[k].ncalled; q++)
                    assert_int_equal(ca->instr[k].called[q], cb->instr[k].called[q]);
            }
        }
        free(pa);
        free(pb);
    } else {
        if (!da.msg || !db.msg || strcmp(da.msg, db.msg) != 0 || da.pos.line != db.pos.line ||
            da.pos.col != db.pos.col)
            fail_msg("%s: sequential %d:%d %s, split %d:%d %s", name, da.pos.line, da.pos.col,
                     da.msg ? da.msg : "", db.pos.line, db.pos.col, db.msg ? db.msg : "");
    }
    ir_module_free(a);
    ir_module_free(b);
    ir_diag_clear(&da);
    ir_diag_clear(&db);
    return sa == IR_OK;
}

static char *slurp(const char *path, size_t *len)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    *len = fread(s, 1, (size_t)n, f);
    s[*len] = 0;
    fclose(f);
    return s;
}

/* Every regular file of dir: returns how many were read. */
static int every_file(const char *dir, int32_t split)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".md") || strstr(e->d_name, ".tsv"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *t = slurp(path, &len);
        if (!t)
            continue;
        same_both_ways(path, t, len, split, false, 0);
        same_both_ways(path, t, len, split, true, 0);
        free(t);
        n++;
    }
    closedir(d);
    return n;
}

static void test_corpora(void **state)
{
    (void)state;
    int models = every_file(TESSEL_SRC_DIR "/tests/models", 2);
    assert_true(models > 20);
    assert_true(every_file(TESSEL_SRC_DIR "/examples", 2) >= 1);
    assert_true(every_file(TESSEL_SRC_DIR "/tests/fuzz/corpus/parse", 2) > 10);
    int wild = every_file(TESSEL_SHARED_DIR "/conformance/xla_wild/modules", 2);
    int spmd = every_file(TESSEL_SHARED_DIR "/conformance/xla_spmd/modules", 2);
    if (wild < 0 || spmd < 0)
        print_message("conformance corpora absent: only the project's own texts were read\n");
    else
        assert_true(wild > 100 && spmd > 300);
}

/* A module of n instructions in ENTRY, body line `at` replaced by `line`
 * (several lines if it has newlines), the others `vK = f32[4] add(vJ, p)`
 * with vJ the instruction before. */
static char *module_with(int n, int at, const char *line, const char *tail, size_t *len)
{
    size_t cap = (size_t)n * 64 + strlen(line) + 4096;
    char *t = malloc(cap);
    size_t k = (size_t)snprintf(t, cap, "HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                                        "  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  p = f32[4] parameter(0)\n");
    for (int i = 1; i < n; i++) {
        if (i == at)
            k += (size_t)snprintf(t + k, cap - k, "%s\n", line);
        else if (i == 1 || i - 1 == at)
            k += (size_t)snprintf(t + k, cap - k, "  v%d = f32[4] add(p, p)\n", i);
        else
            k += (size_t)snprintf(t + k, cap - k, "  v%d = f32[4] add(v%d, p)\n", i, i - 1);
    }
    k += (size_t)snprintf(t + k, cap - k, "%s}\n", tail);
    *len = k;
    return t;
}

static void test_cuts(void **state)
{
    (void)state;
    const int n = 40; /* the split falls on about line n/2 */
    static const char *lines[] = {
        "  v3 = f32[4] add(p, p)",                                   /* a name of the first half again */
        "  ROOT r1 = f32[4] add(p, p)",                              /* a ROOT, then another below */
        "  r2 = f32[4] map(p), dimensions={0}, to_apply={\n    a = f32[] parameter(0)\n    ROOT n = f32[] negate(a)\n  }",
        "  r3 = f32[4] add(p, f32[4] negate(p))",                    /* a nested operand */
        "  r4 = tuple(p, p)",                                        /* a shape to infer */
        "  r5 = f32[4] negate-start(p)",                             /* a sugared async op */
        "  r6 = f32[4] add(v39, p)",                                 /* a forward reference */
        "  r7 = f32[4] parameter(0)",                                /* parameter 0 twice */
        "  r8 = f32[4] parameter(1)",                                /* a gap-free new parameter */
        "  r9 = f32[4] constant({1,\n 2, 3,\n 4})",                   /* a literal over lines */
        "  r10 = f32[4] add(undefined_name, p)",                     /* an undefined operand */
        "  r11 = f32[4] add(p p)",                                   /* a syntax error */
        "  r12 = f32[4] add(p, p), sharding={devices=[2]0,1}",       /* an annotation */
        "  r13 = f32[4] reduce-precision(p), exponent_bits=5, mantissa_bits=10",
        "  r14 = f32[4] add(p, p), control-predecessors={v2, v30}",
        "  /* a comment */ r15 = f32[4] add(p, p)",
        "",
        "  r16 = f32[] reduce(p, f32[] constant(0)), dimensions={0}, to_apply=add",
        "  r17 = f32[] reduce(p, z), dimensions={0}, to_apply=add\n  z = f32[] constant(0)",
        "  r18 = f32[4] add(p, p), metadata={op_name=\"x\n y\"}",
    };
    int parsed = 0;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        for (int at = n / 2 - 3; at <= n / 2 + 3; at++) {
            size_t len;
            char *t = module_with(n, at, lines[i], "", &len);
            char name[64];
            snprintf(name, sizeof name, "cut%zu_at%d.hlo", i, at);
            parsed += same_both_ways(name, t, len, 2, false, 0);
            parsed += same_both_ways(name, t, len, 2, true, 0);
            /* The instruction limit, reached in the second half. */
            same_both_ways(name, t, len, 2, false, n - 5);
            free(t);
        }
    /* Something in the first half, something at the end of the second:
     * a ROOT in each, a parameter number in each, a name in each. */
    static const char *pairs[][2] = {
        {"  ROOT r1 = f32[4] add(p, p)", "  ROOT r2 = f32[4] add(p, p)\n"},
        {"  q = f32[4] parameter(1)", "  q2 = f32[4] parameter(1)\n"},
        {"  q = f32[4] parameter(2)", "  q2 = f32[4] parameter(1)\n"},
        {"  w = f32[4] add(p, p)", "  w = f32[4] add(p, p)\n"},
        {"  w = f32[4] add(p, v38)", "  ROOT x = f32[4] add(w, v39)\n"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
        for (int at = 3; at <= 8; at++) {
            size_t len;
            char *t = module_with(n, at, pairs[i][0], pairs[i][1], &len);
            char name[64];
            snprintf(name, sizeof name, "pair%zu_at%d.hlo", i, at);
            parsed += same_both_ways(name, t, len, 2, true, 0);
            free(t);
        }
    /* Some of them are modules, some errors: both kinds were compared. */
    assert_true(parsed > 20);
    assert_true(parsed < 2 * 20 * 7 + 5 * 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpora),
        cmocka_unit_test(test_cuts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
