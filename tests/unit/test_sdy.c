/*
 * test_sdy.c: Shardy's sharding text and XLA's named (V3) sharding text
 * (ir/sdy.c) and their import into a module (ir/sdy_import.c). Each
 * sharding's tile assignment is worked out by hand in the comments (mesh
 * axes major to minor, device = row-major index over the mesh); each is
 * printed back in GSPMD's syntax, which parses to the same sharding; each
 * error names its line and column.
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

static const char *const MESHES = "{mesh = #sdy.mesh<[\"x\"=2, \"y\"=4]>, "
                                  "m2 = #sdy.mesh<[\"a\"=2], device_ids=[1,0]>, "
                                  "maximal = #sdy.mesh<[], device_ids=[3]>}";

static IrSdyMeshes meshes(IrArena *a)
{
    IrSdyMeshes ms;
    IrDiag d = {0};
    if (ir_sdy_parse_meshes(a, MESHES, &ms, &d) != IR_OK)
        fail_msg("meshes: %s", d.msg ? d.msg : "?");
    return ms;
}

/* Parse `text` (manual axes `man`, may be NULL), print it, compare with
 * `want`, parse the print with ir_sharding_parse: the same sharding. */
static void check(const char *text, const char *man, const char *want)
{
    IrArena *a = ir_arena_new();
    IrSdyMeshes ms = meshes(a);
    IrSdyManual mv = {0};
    IrDiag d = {0};
    if (man && ir_sdy_parse_manual_axes(a, man, &mv, &d) != IR_OK)
        fail_msg("manual axes %s: %s", man, d.msg ? d.msg : "?");
    IrSharding s;
    if (ir_sdy_parse_sharding(a, &ms, man ? &mv : NULL, text, NULL, NULL, &s, &d) != IR_OK)
        fail_msg("%s: %s", text, d.msg ? d.msg : "?");
    char *got = ir_sharding_str(&s);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("%s gave %s, expected %s", text, got, want);
    IrSharding back;
    assert_int_equal(ir_sharding_parse(a, got, &back, &d), IR_OK);
    assert_true(ir_sharding_equal(&s, &back));
    free(got);
    ir_arena_free(a);
}

static void test_meshes(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    IrSdyMeshes ms = meshes(a);
    assert_int_equal(ms.n, 3);
    assert_string_equal(ms.mesh[0].name, "mesh");
    assert_int_equal(ms.mesh[0].naxis, 2);
    assert_string_equal(ms.mesh[0].axis[1], "y");
    assert_int_equal(ms.mesh[0].size[1], 4);
    assert_int_equal(ms.mesh[0].ndevice, 8);
    assert_null(ms.mesh[0].device_ids);
    assert_int_equal(ms.mesh[1].device_ids[0], 1);
    assert_int_equal(ms.mesh[1].device_ids[1], 0);
    assert_int_equal(ms.mesh[2].naxis, 0);
    assert_int_equal(ms.mesh[2].device_ids[0], 3);
    ir_arena_free(a);
}

static void test_shardings(void **state)
{
    (void)state;
    /* x over dim 0, y (4) replicated: devices x*4+y in order. */
    check("#sdy.sharding<@mesh, [{\"x\"}, {}]>", NULL, "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
    /* y over dim 0, x over dim 1: tile (j, i) is device i*4+j: 0,4,1,5,2,6,3,7. */
    check("#sdy.sharding<@mesh, [{\"y\"}, {\"x\"}]>", NULL, "{devices=[4,2]<=[2,4]T(1,0)}");
    /* y then x (major to minor) both on dim 0: the same order, one dim of 8. */
    check("#sdy.sharding<@mesh, [{\"y\", \"x\"}, {}]>", NULL, "{devices=[8,1]<=[2,4]T(1,0)}");
    check("#sdy.sharding<@mesh, [{\"x\", \"y\"}, {}]>", NULL, "{devices=[8,1]<=[8]}");
    /* y:(2)2 is y's minor half: y = 2*y1 + y2. Pieces x, y1, y2; dim 0 y2,
     * dim 1 x, y1 replicated: (y2, x, y1) -> x*4+y1*2+y2 = 0,2,4,6,1,3,5,7
     * = iota [4,2] transposed. */
    check("#sdy.sharding<@mesh, [{\"y\":(2)2}, {\"x\"}]>", NULL,
          "{devices=[2,2,2]<=[4,2]T(1,0) last_tile_dim_replicate}");
    /* Open dims, priorities and replicated axes change nothing here. */
    check("#sdy.sharding<@mesh, [{\"x\", ?}p1, {?}p0], replicated={\"y\"}>", NULL,
          "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
    /* device_ids [1,0]: a over dim 0 puts device 1 first. */
    check("#sdy.sharding<@m2, [{\"a\"}]>", NULL, "{devices=[2]1,0}");
    check("#sdy.sharding<@maximal, []>", NULL, "{maximal device=3}");
    check("#sdy.sharding<@mesh, [{}, {}]>", NULL, "{replicated}");
    /* An inline mesh. */
    check("#sdy.sharding<mesh<[\"z\"=2]>, [{\"z\"}]>", NULL, "{devices=[2]<=[2]}");
    /* One per value. */
    check("#sdy.sharding_per_value<[<@mesh, [{\"x\"}]>, <@mesh, []>]>", NULL,
          "{{devices=[2,4]<=[8] last_tile_dim_replicate}, {replicated}}");
    /* A shard_map body manual over x: y over dim 1, x the manual subgroup:
     * (y, x) -> 0,4,1,5,2,6,3,7. */
    check("#sdy.sharding<@mesh, [{}, {\"y\"}]>", "#sdy<manual_axes{\"x\"}>",
          "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dims={manual}}");
    /* A manual axis a dimension names is already in the local shape. */
    check("#sdy.sharding<@mesh, [{\"x\"}, {}]>", "#sdy<manual_axes{\"x\"}>",
          "{devices=[1,1,2,4]<=[8] last_tile_dims={manual, replicated}}");
    check("#sdy.sharding<@mesh, [{\"x\"}, {}]>", "#sdy<manual_axes{\"x\", \"y\"}>", "{manual}");
}

/* V3 through ir_sharding_parse, printed in GSPMD's syntax. */
static void check_v3(const char *text, const char *want)
{
    IrArena *a = ir_arena_new();
    IrSharding s;
    IrDiag d = {0};
    if (ir_sharding_parse(a, text, &s, &d) != IR_OK)
        fail_msg("%s: %s", text, d.msg ? d.msg : "?");
    char *got = ir_sharding_str(&s);
    if (strcmp(got, want) != 0)
        fail_msg("%s gave %s, expected %s", text, got, want);
    IrSharding back;
    assert_int_equal(ir_sharding_parse(a, got, &back, &d), IR_OK);
    assert_true(ir_sharding_equal(&s, &back));
    free(got);
    ir_arena_free(a);
}

static void test_v3(void **state)
{
    (void)state;
    check_v3("{@mesh<x=2,y=4>, [{y}, {x}]}", "{devices=[4,2]<=[2,4]T(1,0)}");
    check_v3("{@mesh<a=2,b=4,c=3,d=8>, [{c}, {a, b:(2)2, ?}]}",
             /* pieces a, b1, b2, c, d; c on dim 0, a b2 on dim 1; b1 d replicated */
             "{devices=[3,4,16]<=[2,2,2,3,8]T(3,0,2,1,4) last_tile_dim_replicate}");
    check_v3("{mesh['x'=2,'y'=2], [{x}, {}]}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
    /* device_ids ([2,2]T(1,0)): the mesh lists 0,2,1,3; a over dim 0. */
    check_v3("{@mesh<a=2,b=2>, device_ids=([2,2]T(1,0)), [{a}, {}]}",
             "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
    check_v3("{@mesh<x=2,y=2>, [{y}], manual={x}}", "{devices=[2,2]<=[2,2]T(1,0) last_tile_dims={manual}}");
    check_v3("{@mesh<x=2,y=2>, [{x}, {}], replicated={y}, metadata={op_name=\"a\"}}",
             "{devices=[2,1,2]<=[4] last_tile_dim_replicate metadata={op_name=\"a\"}}");
    check_v3("{{@mesh<x=2>, [{x}]}, {replicated}}", "{{devices=[2]<=[2]}, {replicated}}");
}

/* The error of `text` is at the column of `at` (its first occurrence) and
 * says `msg`. */
static void check_error(const char *text, const char *man, const char *at, const char *msg)
{
    IrArena *a = ir_arena_new();
    IrSdyMeshes ms = meshes(a);
    IrSdyManual mv = {0};
    IrDiag d = {0};
    if (man)
        assert_int_equal(ir_sdy_parse_manual_axes(a, man, &mv, &d), IR_OK);
    IrSharding s;
    assert_int_equal(ir_sdy_parse_sharding(a, &ms, man ? &mv : NULL, text, NULL, NULL, &s, &d), IR_EINPUT);
    assert_non_null(d.msg);
    if (!strstr(d.msg, msg))
        fail_msg("%s: '%s' does not say '%s'", text, d.msg, msg);
    assert_int_equal(d.pos.line, 1);
    assert_int_equal(d.pos.col, (int)(strstr(text, at) - text) + 1);
    ir_diag_clear(&d);
    ir_arena_free(a);
}

static void test_errors(void **state)
{
    (void)state;
    check_error("#sdy.sharding<@mesh, [{\"z\"}]>", NULL, "\"z\"", "axis \"z\" is not in mesh @mesh");
    check_error("#sdy.sharding<@nope, [{}]>", NULL, "@nope", "mesh @nope is not defined");
    check_error("#sdy.sharding<@mesh, [{\"x\"}, {\"x\"}]>", NULL, "<@", "axis \"x\" is used twice");
    check_error("#sdy.sharding<@mesh, [{\"y\":(3)2}]>", NULL, "\"y\"", "does not fit axis \"y\"");
    check_error("#sdy.sharding<@mesh, [{\"y\":(1)2, \"y\"}]>", NULL, "<@", "overlaps");
    check_error("#sdy.sharding<@mesh, [{}], unreduced={\"x\"}>", NULL, "unreduced", "unreduced axes are not supported");
    check_error("#sdy.sharding<@mesh, [{\"x\"}]> ?", NULL, "?", "expected the end of the attribute");
    check_error("#sdy.shardin<@mesh, []>", NULL, "sdy.", "expected sdy.sharding");
    check_error("#sdy.sharding<@maximal, [{\"x\"}]>", NULL, "\"x\"", "axis \"x\" is not in mesh @maximal");

    IrArena *a = ir_arena_new();
    IrSdyMeshes ms;
    IrDiag d = {0};
    const char *dup = "{m = #sdy.mesh<[\"x\"=2, \"x\"=2]>}";
    assert_int_equal(ir_sdy_parse_meshes(a, dup, &ms, &d), IR_EINPUT);
    assert_int_equal(d.pos.col, (int)(strstr(dup, ", \"x\"") - dup) + 3);
    assert_non_null(strstr(d.msg, "appears twice"));
    ir_diag_clear(&d);
    const char *ids = "{m = #sdy.mesh<[\"x\"=2], device_ids=[0,0]>}";
    assert_int_equal(ir_sdy_parse_meshes(a, ids, &ms, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "appears twice in device_ids"));
    ir_diag_clear(&d);
    /* A budget of device-list entries shared across calls: y over dim 0
     * of mesh x=2, y=4 lists 8 devices out of order (no shared table). */
    IrSdyMeshes m8 = meshes(a);
    IrSharding s;
    int64_t budget = 12;
    const char *yx = "#sdy.sharding<@mesh, [{\"y\"}, {\"x\"}]>";
    assert_int_equal(ir_sdy_parse_sharding(a, &m8, NULL, yx, NULL, &budget, &s, &d), IR_OK);
    assert_int_equal(budget, 4);
    assert_int_equal(ir_sdy_parse_sharding(a, &m8, NULL, yx, NULL, &budget, &s, &d), IR_EINPUT);
    assert_non_null(strstr(d.msg, "device lists expand to more than"));
    ir_diag_clear(&d);
    assert_int_equal(ir_sharding_parse(a, "{@mesh<x=2>, [{x}], unreduced={x}}", &s, &d), IR_EINPUT);
    assert_int_equal(d.pos.col, 21);
    ir_diag_clear(&d);
    ir_arena_free(a);
}

/* ---- modules ---- */

static IrModule *parse_module(const char *text, IrDiag *d)
{
    IrModule *m = NULL;
    IrParseOptions o = ir_default_parse_options();
    o.verify = true;
    ir_parse("m.hlo", text, strlen(text), &o, &m, d);
    return m;
}

static const IrInstr *find(const IrModule *m, const char *name)
{
    const IrComputation *c = ir_entry(m);
    int32_t i = ir_find_instr(c, name);
    return i >= 0 ? &c->instr[i] : NULL;
}

static void test_module(void **state)
{
    (void)state;
    const char *text =
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2]>}}\n"
        "\n"
        "ENTRY e {\n"
        "  a = f32[8,4] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"x\\\"}, {}]>\"}\n"
        "  b = f32[8,4] parameter(1), sharding={devices=[2,1]0,1}, frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"x\\\"}, {}]>\"}\n"
        "  g = () custom-call(b), custom_call_target=\"xla.sdy.ShardingGroup\", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding_group_id=\"7 : i64\"}\n"
        "  s = f32[8,4] add(a, b)\n"
        "  ROOT r = f32[8,4] custom-call(s), custom_call_target=\"xla.sdy.FuncResultSharding\", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding=\"#sdy.sharding_per_value<[<@mesh, [{}, {\\\"x\\\"}]>]>\"}\n"
        "}\n";
    IrDiag d = {0};
    IrModule *m = parse_module(text, &d);
    if (!m)
        fail_msg("%s", d.msg ? d.msg : "?");
    char *s = ir_sharding_str(find(m, "a")->sharding);
    assert_string_equal(s, "{devices=[2,1]<=[2]}");
    free(s);
    s = ir_sharding_str(find(m, "r")->sharding);
    assert_string_equal(s, "{devices=[1,2]<=[2]}");
    free(s);
    /* the group: b is in shard_as 7; the custom-call is gone */
    assert_int_equal(find(m, "b")->sharding->shard_group, 1);
    assert_int_equal(find(m, "b")->sharding->shard_group_id, 7);
    assert_null(find(m, "g"));
    /* read attributes are gone: it prints as the GSPMD module it is */
    assert_null(ir_frontend_attr(find(m, "a"), "xla.sdy.sharding"));
    char *p = ir_print_module(m);
    IrModule *m2 = parse_module(p, &d);
    assert_non_null(m2);
    char *p2 = ir_print_module(m2);
    assert_string_equal(p, p2);
    free(p);
    free(p2);
    ir_module_free(m2);
    ir_module_free(m);
}

/* A module error is at its place in the file: line 4, the column of the
 * escaped axis name in the source. */
static void test_module_errors(void **state)
{
    (void)state;
    const char *text = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2]>}}\n"
                       "\n"
                       "ENTRY e {\n"
                       "  ROOT a = f32[8] parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, "
                       "[{\\\"z\\\"}]>\"}\n"
                       "}\n";
    IrDiag d = {0};
    assert_null(parse_module(text, &d));
    assert_int_equal(d.status, IR_EINPUT);
    assert_int_equal(d.pos.line, 4);
    const char *line = strstr(text, "  ROOT a");
    assert_int_equal(d.pos.col, (int)(strstr(line, "\\\"z") - line) + 1);
    assert_non_null(strstr(d.msg, "in xla.sdy.sharding: axis \"z\" is not in mesh @mesh"));
    ir_diag_clear(&d);

    const char *dis = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2, \"y\"=2]>}}\n"
                      "ENTRY e {\n"
                      "  ROOT a = f32[8] parameter(0), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}, "
                      "frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"y\\\"}]>\"}\n"
                      "}\n";
    assert_null(parse_module(dis, &d));
    assert_int_equal(d.pos.line, 3);
    assert_non_null(strstr(d.msg, "the shardings of 'a' disagree"));
    ir_diag_clear(&d);

    /* The same mapping spelled differently agrees: [2,2] iota T(1,0) with
     * the replicated dim is y over dim 0. */
    const char *agree = "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2, \"y\"=2]>}}\n"
                        "ENTRY e {\n"
                        "  ROOT a = f32[8] parameter(0), sharding={devices=[2,2]0,2,1,3 last_tile_dim_replicate}, "
                        "frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"y\\\"}]>\"}\n"
                        "}\n";
    IrModule *m = parse_module(agree, &d);
    if (!m)
        fail_msg("%s", d.msg ? d.msg : "?");
    ir_module_free(m);
}

/* Every allocation of reading a shard_map module (the rewrite's arrays
 * included) failing in turn: IR_ENOMEM and nothing leaked (ASan), until
 * the reading succeeds and gives what it gives without failures. */
static void test_failure_injection(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/models/shardy/shard_map_partial.hlo", TESSEL_SRC_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    IrDiag d = {0};
    IrModule *want = parse_module(text, &d);
    assert_non_null(want);
    char *wp = ir_print_module(want);
    ir_module_free(want);
    bool succeeded = false;
    for (long k = 1; k < 5000 && !succeeded; k++) {
        ts_fail_alloc_after(k);
        IrModule *m = parse_module(text, &d);
        ts_fail_alloc_after(0);
        if (m) {
            char *p = ir_print_module(m);
            assert_string_equal(p, wp);
            free(p);
            ir_module_free(m);
            succeeded = true;
            assert_true(k > 20); /* it did fail its allocations before */
        } else {
            assert_int_equal(d.status, IR_ENOMEM);
        }
        ir_diag_clear(&d);
    }
    assert_true(succeeded);
    free(wp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meshes),      cmocka_unit_test(test_shardings), cmocka_unit_test(test_v3),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_module),    cmocka_unit_test(test_module_errors),
        cmocka_unit_test(test_failure_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
