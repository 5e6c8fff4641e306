/*
 * test_parse_mesh_groups.c: replica_groups in XLA's mesh-axes form
 * (ir/parse_mesh_groups.c), as JAX's compiled modules carry them: each form
 * parses to the device groups worked out by hand below (the mesh's device
 * array, cut at its sub-axes, the named pieces last in the order named,
 * read row-major), prints back as XLA spells it, and the printed module
 * parses to the same groups. Bad forms are refused with a message and the
 * line and column of the culprit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* The all-reduce of line 9, its replica_groups value starting at column 63. */
static const char *const FMT = "HloModule m, num_partitions=8\n"
                               "add {\n"
                               "  a = f32[] parameter(0)\n"
                               "  b = f32[] parameter(1)\n"
                               "  ROOT s = f32[] add(a, b)\n"
                               "}\n"
                               "ENTRY e {\n"
                               "  p = f32[4] parameter(0)\n"
                               "  ROOT r = f32[4] all-reduce(p), channel_id=1, replica_groups=%s, "
                               "use_global_device_ids=true, to_apply=add\n"
                               "}\n";
enum { GROUPS_LINE = 9, GROUPS_COL = 63 };

static IrModule *parse(const char *text, IrDiag *d)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    IrModule *m = NULL;
    IrStatus st = ir_parse("t.hlo", text, strlen(text), &o, &m, d);
    return st == IR_OK ? m : NULL;
}

static const IrInstr *root(const IrModule *m)
{
    const IrComputation *c = m->comp[m->entry];
    return &c->instr[c->root];
}

/* The groups as {{0,1},{2,3}}. */
static void groups_text(const IrReplicaGroups *g, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "{");
    for (int32_t i = 0; i < g->ngroups && o < n; i++) {
        o += (size_t)snprintf(buf + o, n - o, "%s{", i ? "," : "");
        for (int32_t j = 0; j < g->group_size[i] && o < n; j++)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", j ? "," : "", (long long)g->groups[i][j]);
        o += (size_t)snprintf(buf + o, n - o, "}");
    }
    snprintf(buf + o, o < n ? n - o : 0, "}");
}

typedef struct Case {
    const char *text;    /* as written */
    const char *groups;  /* the groups, worked out by hand */
    const char *printed; /* as XLA prints it (NULL: as written) */
} Case;

/* Devices of mesh['a'=2,'b'=4] are a*4+b: b's groups are the rows of
 * [[0,1,2,3],[4,5,6,7]], a's its columns; {'b','a'} is one group read with
 * b major. 'b':(2)2 is b's minor half (b = 2*b0 + b1, groups over b1),
 * 'b':(1)2 its major half. mesh['a'=8] used as 'a':(1)2 and 'a':(4)2 is
 * cut [2,2,2] (device 4*a0+2*a1+a2); the groups run over (a0, a2) for each
 * a1, in the order named. device_ids=(3,1,2,0) lays the devices out
 * [[3,1],[2,0]]; device_ids=([2,2]T(1,0)) is iota [2,2] transposed,
 * 0,2,1,3, laid out over x=2, y=1, z=2 (JAX's 2x2 meshes). */
static const Case CASES[] = {
    {"mesh['a'=2,'b'=4] {'b'}", "{{0,1,2,3},{4,5,6,7}}", NULL},
    {"mesh['a'=2,'b'=4] {'a'}", "{{0,4},{1,5},{2,6},{3,7}}", NULL},
    {"mesh['a'=2,'b'=4] {'b', 'a'}", "{{0,4,1,5,2,6,3,7}}", "mesh['a'=2,'b'=4] {'b','a'}"},
    {"mesh['a'=2,'b'=4] {'a','b'}", "{{0,1,2,3,4,5,6,7}}", NULL},
    {"mesh['a'=2,'b'=4] {'b':(2)2}", "{{0,1},{2,3},{4,5},{6,7}}", NULL},
    {"mesh['a'=2,'b'=4] {'b':(1)2}", "{{0,2},{1,3},{4,6},{5,7}}", NULL},
    {"mesh['a'=8] {'a':(1)2,'a':(4)2}", "{{0,1,4,5},{2,3,6,7}}", NULL},
    {"mesh['a'=8] {'a':(4)2,'a':(1)2}", "{{0,4,1,5},{2,6,3,7}}", NULL},
    {"mesh['a'=2,'b'=2,'c'=2] {'a','c'}", "{{0,1,4,5},{2,3,6,7}}", NULL},
    {"mesh['a'=4,'b'=2] {'a':(2)2,'b'}", "{{0,1,2,3},{4,5,6,7}}", NULL},
    {"mesh['a'=2,'b'=2], device_ids=(3,1,2,0) {'b'}", "{{3,1},{2,0}}", NULL},
    {"mesh['a'=2,'b'=2], device_ids=(3,1,2,0) {'a'}", "{{3,2},{1,0}}", NULL},
    {"mesh['x'=2,'y'=1,'z'=2], device_ids=([2,2]T(1,0)) {'x'}", "{{0,1},{2,3}}", NULL},
    {"mesh['axis_0'=1,'axis_1'=2] {'axis_1'}", "{{0,1}}", NULL},
    {"mesh['<a> b.c'=2] {'<a> b.c'}", "{{0,1}}", NULL},
};

static void test_forms(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
        const Case *c = &CASES[k];
        char text[1024], got[256];
        snprintf(text, sizeof text, FMT, c->text);
        IrDiag d = {0};
        IrModule *m = parse(text, &d);
        if (!m)
            fail_msg("%s: %s", c->text, d.msg ? d.msg : "?");
        const IrReplicaGroups *g = &root(m)->a.x->replica_groups;
        groups_text(g, got, sizeof got);
        if (strcmp(got, c->groups) != 0)
            fail_msg("%s: groups %s, want %s", c->text, got, c->groups);
        /* Printed back as XLA spells it; that text parses to the same groups. */
        const char *want = c->printed ? c->printed : c->text;
        char *out = ir_print_module(m);
        assert_non_null(out);
        char needle[256];
        snprintf(needle, sizeof needle, "replica_groups=%s,", want);
        if (!strstr(out, needle))
            fail_msg("%s: printed\n%s\nwithout %s", c->text, out, needle);
        IrModule *m2 = parse(out, &d);
        assert_non_null(m2);
        char again[256];
        groups_text(&root(m2)->a.x->replica_groups, again, sizeof again);
        assert_string_equal(again, c->groups);
        /* A copy of the module keeps the form. */
        IrModule *m3 = ir_module_clone(m2);
        assert_non_null(m3);
        char *out3 = ir_print_module(m3);
        assert_non_null(strstr(out3, needle));
        free(out3);
        free(out);
        ir_module_free(m3);
        ir_module_free(m2);
        ir_module_free(m);
    }
}

typedef struct Bad {
    const char *text;
    const char *msg;
    int col; /* within the groups text, from 0 */
} Bad;

static const Bad BAD[] = {
    {"mesh['a'=2] {'c'}", "the mesh has no axis 'c'", 13},
    {"mesh['a'=2,'a'=2] {'a'}", "axis 'a' appears twice in the mesh", 11},
    {"mesh['a'=0] {'a'}", "a mesh holds 1 to", 5},
    {"mesh[] {}", "has no axes", 0},
    {"mesh['a'=4] {'a':(2)4}", "does not divide axis 'a'", 13},
    {"mesh['a'=4] {'a':(1)1}", "does not divide axis 'a'", 13},
    {"mesh['a'=8] {'a':(1)2,'a':(2)2}", "follow each other", 22},
    {"mesh['a'=8] {'a','a':(1)2}", "parts overlap", 17},
    {"mesh['a'=8] {'a':(1)4,'a':(2)2}", "parts overlap", 22},
    {"mesh['a'=2,'b'=2] {}", "more than one device per group", 18},
    {"mesh['a'=1,'b'=2] {'a'}", "more than one device per group", 18},
    {"mesh['a'=2], device_ids=(0,0) {'a'}", "permutation of 0..1", 13},
    {"mesh['a'=2], device_ids=(1) {'a'}", "lists 1 devices but the mesh has 2", 13},
    {"mesh['a'=2], device_ids=([2]) {'a'}", "T(...) after the device_ids iota", 28},
    {"mesh['a'=2], device_ids=([3]T(0)) {'a'}", "iota size 3", 13},
    {"mesh['a'=2], ids=(0,1) {'a'}", "device_ids=", 13},
    {"mesh[a=2] {'a'}", "a quoted axis name", 5},
    {"mesh['a'=2] 'a'", "'{' to start the replica groups' axes", 12},
};

static void test_errors(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof BAD / sizeof *BAD; k++) {
        const Bad *b = &BAD[k];
        char text[1024];
        snprintf(text, sizeof text, FMT, b->text);
        IrDiag d = {0};
        IrModule *m = parse(text, &d);
        if (m)
            fail_msg("%s: parsed", b->text);
        if (!d.msg || !strstr(d.msg, b->msg))
            fail_msg("%s: message '%s' lacks '%s'", b->text, d.msg ? d.msg : "(none)", b->msg);
        if (d.pos.line != GROUPS_LINE || d.pos.col != GROUPS_COL + b->col)
            fail_msg("%s: error at %d:%d, want %d:%d", b->text, (int)d.pos.line, (int)d.pos.col, GROUPS_LINE,
                     GROUPS_COL + b->col);
        ir_diag_clear(&d);
    }
    /* A quote left open at the end of the line. */
    const char *open = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                       "  ROOT r = f32[4] all-gather(p), dimensions={0}, replica_groups=mesh['a\n}\n";
    IrDiag d = {0};
    assert_null(parse(open, &d));
    assert_non_null(strstr(d.msg, "unterminated"));
    assert_int_equal(d.pos.line, 4);
    assert_int_equal(d.pos.col, 70);
    ir_diag_clear(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
