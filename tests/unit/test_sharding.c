/*
 * test_sharding.c: XLA shardings (ir/sharding.c). Every text form parsed
 * into the right fields (iota device lists expanded by hand in the
 * comments), printed back identically, queries, semantic equality, deep
 * copies, parse errors with their positions, validation rejections, and
 * failure injection.
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

/* Parse into a fresh arena (kept in *arena), failing the test on error. */
static IrSharding parse_ok(IrArena **arena, const char *text)
{
    IrSharding s;
    IrDiag d = {0};
    *arena = ir_arena_new();
    assert_non_null(*arena);
    IrStatus st = ir_sharding_parse(*arena, text, &s, &d);
    if (st != IR_OK)
        fail_msg("parse of '%s' failed: %s", text, d.msg ? d.msg : "?");
    ir_diag_clear(&d);
    return s;
}

/* str(parse(text)) == text */
static void assert_round_trip(const char *text)
{
    IrArena *a;
    IrSharding s = parse_ok(&a, text);
    char *back = ir_sharding_str(&s);
    assert_non_null(back);
    assert_string_equal(back, text);
    /* and parse(str(s)) == s */
    IrSharding s2;
    IrDiag d = {0};
    assert_int_equal(ir_sharding_parse(a, back, &s2, &d), IR_OK);
    assert_true(ir_sharding_equal(&s, &s2));
    free(back);
    ir_arena_free(a);
}

static void assert_devices(const IrSharding *s, const int64_t *want, int64_t n)
{
    assert_int_equal(s->ndevices, n);
    for (int64_t i = 0; i < n; i++)
        if (s->devices[i] != want[i])
            fail_msg("device %lld is %lld, expected %lld", (long long)i, (long long)s->devices[i],
                     (long long)want[i]);
}

static void test_simple_kinds(void **state)
{
    (void)state;
    IrArena *a;
    IrSharding s = parse_ok(&a, "{replicated}");
    assert_int_equal(s.kind, SHD_REPLICATED);
    assert_false(s.unknown);
    assert_int_equal(ir_sharding_num_tiles(&s), 1);
    assert_int_equal(ir_sharding_replication(&s), 1);
    assert_int_equal(ir_sharding_data_rank(&s), 0);
    ir_arena_free(a);

    s = parse_ok(&a, "{manual}");
    assert_int_equal(s.kind, SHD_MANUAL);
    ir_arena_free(a);

    s = parse_ok(&a, "{unknown}");
    assert_int_equal(s.kind, SHD_REPLICATED);
    assert_true(s.unknown);
    ir_arena_free(a);

    s = parse_ok(&a, "{maximal device=3}");
    assert_int_equal(s.kind, SHD_MAXIMAL);
    assert_int_equal(s.device, 3);
    ir_arena_free(a);

    /* whitespace, comments and %-less spelling do not matter */
    s = parse_ok(&a, "  { maximal  /* c */ device=5 }  // trailing\n");
    assert_int_equal(s.kind, SHD_MAXIMAL);
    assert_int_equal(s.device, 5);
    ir_arena_free(a);

    assert_round_trip("{replicated}");
    assert_round_trip("{manual}");
    assert_round_trip("{unknown}");
    assert_round_trip("{maximal device=3}");
}

static void test_tiled_explicit(void **state)
{
    (void)state;
    IrArena *a;
    IrSharding s = parse_ok(&a, "{devices=[2,1]0,1}");
    assert_int_equal(s.kind, SHD_TILED);
    assert_int_equal(s.ntile, 2);
    assert_int_equal(s.tile[0], 2);
    assert_int_equal(s.tile[1], 1);
    assert_devices(&s, (int64_t[]){0, 1}, 2);
    assert_int_equal(s.nsubgroup, 0);
    assert_false(s.iota);
    assert_int_equal(ir_sharding_data_rank(&s), 2);
    assert_int_equal(ir_sharding_num_tiles(&s), 2);
    assert_int_equal(ir_sharding_replication(&s), 1);
    ir_arena_free(a);

    s = parse_ok(&a, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    assert_int_equal(s.ntile, 3);
    assert_int_equal(s.nsubgroup, 1);
    assert_int_equal(s.subgroup[0], SUBGROUP_REPLICATED);
    assert_true(s.last_tile_dim_replicate);
    assert_devices(&s, (int64_t[]){0, 1, 2, 3}, 4);
    assert_int_equal(ir_sharding_data_rank(&s), 2);
    assert_int_equal(ir_sharding_num_tiles(&s), 2);
    assert_int_equal(ir_sharding_replication(&s), 2);
    ir_arena_free(a);

    s = parse_ok(&a, "{devices=[1,2,2]3,1,2,0 last_tile_dims={manual}}");
    assert_int_equal(s.nsubgroup, 1);
    assert_int_equal(s.subgroup[0], SUBGROUP_MANUAL);
    assert_false(s.last_tile_dim_replicate);
    assert_devices(&s, (int64_t[]){3, 1, 2, 0}, 4);
    ir_arena_free(a);

    assert_round_trip("{devices=[2,1]0,1}");
    assert_round_trip("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    assert_round_trip("{devices=[1,2,2]3,1,2,0 last_tile_dims={manual}}");
    assert_round_trip("{devices=[2,1,2,2]0,1,2,3,4,5,6,7 last_tile_dims={manual, replicated}}");
}

static void test_tiled_iota(void **state)
{
    (void)state;
    IrArena *a;
    /* [2,4]<=[8]: iota(8) read row-major */
    IrSharding s = parse_ok(&a, "{devices=[2,4]<=[8]}");
    assert_true(s.iota);
    assert_int_equal(s.niota, 1);
    assert_int_equal(s.iota_dims[0], 8);
    assert_null(s.iota_perm);
    assert_devices(&s, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    ir_arena_free(a);

    /* [4,2]<=[2,2,2]T(1,0,2): A[i0,i1,i2] = 4*i0+2*i1+i2; T[j0,j1,j2] =
     * A[j1,j0,j2] = 4*j1+2*j0+j2; row-major over j: 0,1,4,5,2,3,6,7. */
    s = parse_ok(&a, "{devices=[4,2]<=[2,2,2]T(1,0,2)}");
    assert_int_equal(s.niota, 3);
    assert_non_null(s.iota_perm);
    assert_int_equal(s.iota_perm[0], 1);
    assert_int_equal(s.iota_perm[1], 0);
    assert_int_equal(s.iota_perm[2], 2);
    assert_devices(&s, (int64_t[]){0, 1, 4, 5, 2, 3, 6, 7}, 8);
    ir_arena_free(a);

    /* [3,2]<=[2,3]T(1,0): T[j0,j1] = A[j1,j0] = 3*j1+j0: 0,3,1,4,2,5 */
    s = parse_ok(&a, "{devices=[3,2]<=[2,3]T(1,0)}");
    assert_devices(&s, (int64_t[]){0, 3, 1, 4, 2, 5}, 6);
    ir_arena_free(a);

    /* [2,2,2]<=[8] with two subgroup dims */
    s = parse_ok(&a, "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}");
    assert_int_equal(s.nsubgroup, 2);
    assert_int_equal(s.subgroup[0], SUBGROUP_MANUAL);
    assert_int_equal(s.subgroup[1], SUBGROUP_REPLICATED);
    assert_int_equal(ir_sharding_data_rank(&s), 1);
    assert_int_equal(ir_sharding_num_tiles(&s), 2);
    assert_int_equal(ir_sharding_replication(&s), 4);
    assert_devices(&s, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    ir_arena_free(a);

    /* [2,1,4]<=[2,2,2]T(2,1,0): T[j0,j1,j2] over dims (2,2,2) with
     * A index i[2]=j0, i[1]=j1, i[0]=j2 -> 4*j2+2*j1+j0; flattened over
     * the tile dims (2,1,4) = the same 8 entries: 0,4,2,6,1,5,3,7. */
    s = parse_ok(&a, "{devices=[2,1,4]<=[2,2,2]T(2,1,0) last_tile_dim_replicate}");
    assert_devices(&s, (int64_t[]){0, 4, 2, 6, 1, 5, 3, 7}, 8);
    ir_arena_free(a);

    assert_round_trip("{devices=[2,4]<=[8]}");
    assert_round_trip("{devices=[4,2]<=[2,2,2]T(1,0,2)}");
    assert_round_trip("{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}");
    assert_round_trip("{devices=[2,1,4]<=[2,2,2]T(2,1,0) last_tile_dim_replicate}");
    /* `<=[2,4]` without T is read as the identity, and printed with it
     * (XLA's parser requires T(...) for a multi-dimensional iota) */
    s = parse_ok(&a, "{devices=[4,2]<=[2,4]}");
    assert_null(s.iota_perm);
    assert_devices(&s, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    char *text = ir_sharding_str(&s);
    assert_string_equal(text, "{devices=[4,2]<=[2,4]T(0,1)}");
    free(text);
    ir_arena_free(a);

    /* the iota form and its explicit list are the same sharding */
    IrArena *b;
    IrSharding x = parse_ok(&a, "{devices=[4,2]<=[2,2,2]T(1,0,2)}");
    IrSharding y = parse_ok(&b, "{devices=[4,2]0,1,4,5,2,3,6,7}");
    assert_true(ir_sharding_equal(&x, &y));
    ir_arena_free(b);
    y = parse_ok(&b, "{devices=[4,2]0,1,2,3,4,5,6,7}");
    assert_false(ir_sharding_equal(&x, &y));
    ir_arena_free(b);
    ir_arena_free(a);
}

static void test_tuple(void **state)
{
    (void)state;
    IrArena *a;
    IrSharding s = parse_ok(&a, "{{replicated}, {devices=[2]0,1}}");
    assert_int_equal(s.kind, SHD_TUPLE);
    assert_int_equal(s.ntuple, 2);
    assert_int_equal(s.tuple[0].kind, SHD_REPLICATED);
    assert_int_equal(s.tuple[1].kind, SHD_TILED);
    assert_devices(&s.tuple[1], (int64_t[]){0, 1}, 2);
    ir_arena_free(a);

    s = parse_ok(&a, "{}");
    assert_int_equal(s.kind, SHD_TUPLE);
    assert_int_equal(s.ntuple, 0);
    ir_arena_free(a);

    assert_round_trip("{{replicated}, {devices=[2]0,1}}");
    assert_round_trip("{}");
    assert_round_trip("{{maximal device=0}, {manual}, {unknown}}");
    /* XLA marks every fifth element with an index comment */
    assert_round_trip("{{replicated}, {replicated}, {replicated}, {replicated}, {replicated}, "
                      "/*index=5*/{devices=[2]1,0}}");
}

static void test_metadata_and_groups(void **state)
{
    (void)state;
    IrArena *a;
    IrSharding s = parse_ok(&a, "{devices=[2]0,1 metadata={op_name=\"a\" source_line=3}}");
    assert_string_equal(s.metadata, "op_name=\"a\" source_line=3");
    ir_arena_free(a);
    s = parse_ok(&a, "{replicated shard_as 1}");
    assert_int_equal(s.shard_group, 1);
    assert_int_equal(s.shard_group_id, 1);
    ir_arena_free(a);
    s = parse_ok(&a, "{devices=[2]0,1 shard_like 7}");
    assert_int_equal(s.shard_group, 2);
    assert_int_equal(s.shard_group_id, 7);
    ir_arena_free(a);

    assert_round_trip("{devices=[2]0,1 metadata={op_name=\"a\" source_line=3}}");
    assert_round_trip("{replicated metadata={op_name=\"x}y\"}}");
    assert_round_trip("{replicated shard_as 1}");
    assert_round_trip("{devices=[2]0,1 last_tile_dim_replicate shard_like 7 metadata={op_name=\"b\"}}");
    assert_round_trip("{maximal device=1 metadata={{op_name=\"a\"}, {op_name=\"b\"}}}");

    /* metadata and spelling do not change meaning */
    IrArena *b;
    IrSharding x = parse_ok(&a, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    IrSharding y = parse_ok(&b, "{devices=[2,1,2]0,1,2,3 last_tile_dims={replicated} metadata={op_name=\"q\"}}");
    assert_true(ir_sharding_equal(&x, &y));
    ir_arena_free(b);
    y = parse_ok(&b, "{devices=[2,1,2]0,1,2,3 last_tile_dims={manual}}");
    assert_false(ir_sharding_equal(&x, &y));
    ir_arena_free(b);
    y = parse_ok(&b, "{replicated shard_as 1}");
    ir_arena_free(a);
    x = parse_ok(&a, "{replicated}");
    assert_false(ir_sharding_equal(&x, &y));
    ir_arena_free(b);
    ir_arena_free(a);
}

static void test_copy(void **state)
{
    (void)state;
    IrArena *a;
    IrSharding s = parse_ok(&a, "{{devices=[4,2]<=[2,2,2]T(1,0,2) metadata={op_name=\"m\"}}, {maximal device=2}}");
    IrArena *b = ir_arena_new();
    IrSharding c;
    assert_int_equal(ir_sharding_copy(b, &c, &s), IR_OK);
    char *before = ir_sharding_str(&s);
    ir_arena_free(a); /* the copy must not point into the old arena */
    assert_true(c.tuple[0].devices != NULL);
    char *after = ir_sharding_str(&c);
    assert_string_equal(before, after);
    assert_string_equal(after, "{{devices=[4,2]<=[2,2,2]T(1,0,2) metadata={op_name=\"m\"}}, {maximal device=2}}");
    free(before);
    free(after);
    ir_arena_free(b);
}

/* A parse error: message fragment and column (line 1). */
static void assert_parse_error(const char *text, const char *fragment, int line, int col)
{
    IrArena *a = ir_arena_new();
    IrSharding s;
    IrDiag d = {0};
    IrStatus st = ir_sharding_parse(a, text, &s, &d);
    if (st != IR_EINPUT)
        fail_msg("'%s' parsed (status %d)", text, (int)st);
    assert_non_null(d.msg);
    if (!strstr(d.msg, fragment))
        fail_msg("'%s': message '%s' lacks '%s'", text, d.msg, fragment);
    if (d.pos.line != line || d.pos.col != col)
        fail_msg("'%s': error at %d:%d, expected %d:%d (%s)", text, (int)d.pos.line, (int)d.pos.col, line, col,
                 d.msg);
    ir_diag_clear(&d);
    ir_arena_free(a);
}

static void test_parse_errors(void **state)
{
    (void)state;
    assert_parse_error("{devices=[2,2]0,1,2}", "lists 3 devices but the tile assignment holds 4", 1, 1);
    assert_parse_error("{maximal}", "maximal shardings need device=N", 1, 1);
    assert_parse_error("{replicated devices=[2]0,1}", "replicated shardings should not have any devices", 1, 1);
    assert_parse_error("{bogus}", "unknown word 'bogus' in sharding", 1, 2);
    assert_parse_error("{replicated foo=1}", "unknown attribute 'foo' in sharding", 1, 13);
    assert_parse_error("{devices=[2]<=[3]}", "iota size 3 does not match the tile assignment size 2", 1, 1);
    assert_parse_error("{devices=[2,2]<=[2,2]T(0,0)}", "not a permutation", 1, 1);
    assert_parse_error("{devices=[2,2]<=[2,2]T(0,2)}", "out of range", 1, 1);
    assert_parse_error("{devices=[4]<=[2,2]T(1)}", "T(...) has 1 entries", 1, 1);
    assert_parse_error("{devices=[2]0,1", "expected '}' to end sharding, found end of input", 1, 16);
    assert_parse_error("{unreduced device=1}", "device= is only valid with maximal", 1, 1);
    assert_parse_error("{replicated} x", "expected end of sharding, found 'x'", 1, 14);
    assert_parse_error("{replicated manual}", "conflicting sharding kinds", 1, 1);
    assert_parse_error("{devices=[0,2]0,1}", "dimension 0 must be >= 1", 1, 1);
    assert_parse_error("{devices=[2]0,1 last_tile_dim_replicate last_tile_dims={manual}}", "both", 1, 1);
    assert_parse_error("{devices=[2]0,1 last_tile_dims={maximal}}", "expected 'manual' or 'replicated'", 1, 33);
    assert_parse_error("{devices=[2]0,x}", "expected device id, found 'x'", 1, 15);
    assert_parse_error("{{replicated}, replicated}", "expected '{' to start sharding", 1, 16);
    assert_parse_error("{device=1}", "device= is only valid with maximal", 1, 1);
    assert_parse_error("{devices=[2]0,1 /* open", "unterminated comment", 1, 17);
    assert_parse_error("{devices=[2]0,99999999999999999999}", "does not fit in 64 bits", 1, 15);
    assert_parse_error("", "expected '{' to start sharding, found end of input", 1, 1);
    /* line and column count over newlines */
    assert_parse_error("{\n  devices=[2]\n  0,1,2}", "lists 3 devices", 1, 1);
    assert_parse_error("{\n  bogus}", "unknown word", 2, 3);
    /* its '}' left out: the next instruction is no attribute of it */
    assert_parse_error("{devices=[2]0,1\n  w = f32[2] parameter(1)", "expected '}' to end this sharding on its line, found 'w' on line 2", 1, 1);
    assert_parse_error("{replicated\n  ROOT w = f32[2] parameter(1)", "found 'ROOT' on line 2", 1, 1);
    assert_parse_error("{devices=[16777216,2]<=[33554432]}", "more than", 1, 1);
    assert_parse_error("{devices=[2]0,1 devices=[2]1,0}", "duplicate devices= in sharding", 1, 17);
    assert_parse_error("{replicated shard_as 1 shard_like 2}", "more than one shard group", 1, 24);
    assert_parse_error("{last_tile_dim_replicate}", "sharding needs devices=[...] or one of replicated, maximal, manual", 1, 1);
    assert_parse_error("{replicated metadata=1}", "expected '{' after metadata=, found '1'", 1, 22);
    assert_parse_error("{maximal device=x}", "expected integer after device=, found 'x'", 1, 17);
    /* dimension counts are bounded before anything is expanded */
    char text[512];
    int n = snprintf(text, sizeof text, "{devices=[");
    for (int i = 0; i < 67; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, i ? ",1" : "1");
    snprintf(text + n, sizeof text - (size_t)n, "]0}");
    assert_parse_error(text, "tile assignment has 67 dimensions, more than the limit of 66", 1, 1);
    n = snprintf(text, sizeof text, "{devices=[1]<=[");
    for (int i = 0; i < 65; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, i ? ",1" : "1");
    snprintf(text + n, sizeof text - (size_t)n, "]}");
    assert_parse_error(text, "iota has 65 dimensions, more than the limit of 64", 1, 1);
}

static void assert_valid(const char *text, const IrShape *shape, int64_t nd)
{
    IrArena *a;
    IrSharding s = parse_ok(&a, text);
    IrDiag d = {0};
    IrStatus st = ir_sharding_validate(&s, shape, nd, &d, "f.hlo", NULL, (IrPos){3, 7});
    if (st != IR_OK)
        fail_msg("'%s' rejected: %s", text, d.msg ? d.msg : "?");
    ir_arena_free(a);
}

static void assert_invalid(const char *text, const IrShape *shape, int64_t nd, const char *fragment)
{
    IrArena *a;
    IrSharding s = parse_ok(&a, text);
    IrDiag d = {0};
    IrStatus st = ir_sharding_validate(&s, shape, nd, &d, "f.hlo", NULL, (IrPos){3, 7});
    if (st != IR_EINPUT)
        fail_msg("'%s' accepted", text);
    if (!strstr(d.msg, fragment))
        fail_msg("'%s': message '%s' lacks '%s'", text, d.msg, fragment);
    assert_int_equal(d.pos.line, 3);
    assert_int_equal(d.pos.col, 7);
    assert_string_equal(d.file, "f.hlo");
    ir_diag_clear(&d);
    ir_arena_free(a);
}

static void test_validate(void **state)
{
    (void)state;
    IrArena *a = ir_arena_new();
    IrShape v4, m46, tok, tup, nested, empty;
    assert_int_equal(ir_shape_make(a, &v4, IR_F32, 1, (int64_t[]){4}), IR_OK);
    assert_int_equal(ir_shape_make(a, &m46, IR_F32, 2, (int64_t[]){4, 6}), IR_OK);
    assert_int_equal(ir_shape_make(a, &tok, IR_TOKEN, 0, NULL), IR_OK);
    assert_int_equal(ir_shape_make_tuple(a, &tup, 2, (IrShape[]){v4, m46}), IR_OK);
    IrShape inner;
    assert_int_equal(ir_shape_make_tuple(a, &inner, 2, (IrShape[]){v4, v4}), IR_OK);
    assert_int_equal(ir_shape_make_tuple(a, &nested, 2, (IrShape[]){inner, tok}), IR_OK);
    assert_int_equal(ir_shape_make_tuple(a, &empty, 0, NULL), IR_OK);

    assert_valid("{replicated}", &v4, 4);
    assert_valid("{devices=[4]0,1,2,3}", &v4, 4);
    assert_valid("{devices=[2,2]3,2,1,0}", &m46, 4);
    assert_valid("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", &m46, 4);
    assert_valid("{devices=[2]0,1}", &v4, 0); /* device count unknown: only range >= 0, uniqueness */
    assert_valid("{maximal device=3}", &v4, 4);
    assert_valid("{devices=[2,2]0,1,2,3}", &tok, 4); /* anything goes for a token (XLA) */
    assert_valid("{{replicated}, {devices=[1,2]0,1}}", &tup, 2);
    /* one sharding on a tuple applies to every leaf (XLA normalizes so) */
    assert_valid("{devices=[2]0,1}", &nested, 2);
    assert_invalid("{devices=[2]0,1}", &tup, 2, "tiles 1 dimensions but shape f32[4,6] has rank 2");
    assert_valid("{{devices=[2]0,1}, {replicated}, {manual}}", &nested, 2);
    assert_valid("{}", &empty, 4);
    assert_valid("{{replicated}}", &empty, 4);

    assert_invalid("{devices=[2,1]0,1}", &v4, 2, "tiles 2 dimensions but shape f32[4] has rank 1");
    assert_invalid("{devices=[2]0,5}", &v4, 4, "device 5 is out of range [0, 4)");
    assert_invalid("{devices=[2]1,1}", &v4, 0, "device 1 appears more than once");
    assert_invalid("{devices=[2]0,1}", &v4, 4, "uses 2 devices but there are 4");
    assert_invalid("{maximal device=7}", &v4, 4, "device 7 is out of range");
    assert_invalid("{{replicated}}", &tup, 2, "1 elements for a shape with 2 leaves");
    assert_invalid("{{replicated}, {replicated}}", &v4, 2, "a tuple sharding for a non-tuple shape");
    assert_invalid("{devices=[1]0}", &v4, 1, "single device");
    assert_invalid("{{devices=[2,2]0,1,2,3}, {replicated}}", &tup, 4, "f32[4] has rank 1");

    /* hand-built shardings: tile dims below 1, counts that disagree */
    IrSharding s = {0};
    int64_t tile[2] = {0, 2}, dev[2] = {0, 1};
    s.kind = SHD_TILED;
    s.ntile = 2;
    s.tile = tile;
    s.ndevices = 0;
    s.devices = dev;
    IrDiag d = {0};
    assert_int_equal(ir_sharding_validate(&s, &m46, 0, &d, NULL, NULL, (IrPos){1, 1}), IR_EINPUT);
    assert_non_null(strstr(d.msg, "tile dimension 0 is 0"));
    ir_diag_clear(&d);
    tile[0] = 2;
    s.ndevices = 2;
    assert_int_equal(ir_sharding_validate(&s, &m46, 0, &d, NULL, NULL, (IrPos){1, 1}), IR_EINPUT);
    assert_non_null(strstr(d.msg, "lists 2 devices but its dimensions hold 4"));
    ir_diag_clear(&d);
    ir_arena_free(a);
}

/* Every allocation failure is reported as IR_ENOMEM (or the parse
 * succeeds); the arena and diag are then freed, so leaks show up under
 * ASan/valgrind. */
static void test_failure_injection(void **state)
{
    (void)state;
    const char *text = "{{devices=[4,2]<=[2,2,2]T(1,0,2) last_tile_dims={manual} metadata={op_name=\"m\"}}, "
                       "{devices=[2]1,0}, {maximal device=1}}";
    bool succeeded = false;
    for (long n = 1; n < 200 && !succeeded; n++) {
        IrArena *a = ir_arena_new();
        assert_non_null(a);
        IrSharding s;
        IrDiag d = {0};
        ts_fail_alloc_after(n);
        IrStatus st = ir_sharding_parse(a, text, &s, &d);
        char *str = st == IR_OK ? ir_sharding_str(&s) : NULL;
        ts_fail_alloc_after(0);
        if (st == IR_OK && str) {
            succeeded = true;
            assert_string_equal(str, text);
        } else {
            assert_true(st == IR_ENOMEM || st == IR_OK);
        }
        free(str);
        ir_diag_clear(&d);
        ir_arena_free(a);
    }
    assert_true(succeeded);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_kinds),
        cmocka_unit_test(test_tiled_explicit),
        cmocka_unit_test(test_tiled_iota),
        cmocka_unit_test(test_tuple),
        cmocka_unit_test(test_metadata_and_groups),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_failure_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
