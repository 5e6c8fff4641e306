/*
 * test_attrs.c: the attribute tables generated from ir/hlo_attrs.def
 * (ir/ops.c), the ones the parser and the printer read.
 *
 *   names       every attribute found by its name, the alias too, unknown
 *               names not
 *   applies     generic attributes on every op, op attributes on their ops
 *               only (a few of XLA's rules), the -start ops as their base
 *   uses        every op's list is well formed: known ids, none twice, no
 *               generic one; every attribute but the generic ones is taken
 *               by some op (a row nobody uses is a mistake in the table)
 *   forms       the kept attributes are the ids from A_FIRST_KEPT on; WORD
 *               attributes have words, others a HAS flag only where
 *               hlo_attrs.def says
 *   edit        the out-of-line attributes (IrAttrsX): instructions without
 *               any share the zero block, ir_attrs_x_edit copies, so a
 *               changed copy of an instruction leaves the module's as parsed
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

static bool in_uses(const IrAttrUse *u, IrAttrId id)
{
    for (; u->id != A_COUNT; u++)
        if (u->id == id)
            return true;
    return false;
}

static void test_names(void **state)
{
    (void)state;
    for (int id = 0; id < A_COUNT; id++) {
        const char *n = ir_attr_info((IrAttrId)id)->name;
        assert_int_equal(ir_attr_from_name(n, strlen(n)), id);
    }
    assert_int_equal(ir_attr_from_name("statistics_viz", 14), A_STATISTICS);
    assert_int_equal(ir_attr_from_name("dimension", 9), A_COUNT); /* a prefix of a name */
    assert_int_equal(ir_attr_from_name("dimensionsx", 11), A_COUNT);
    assert_int_equal(ir_attr_from_name("", 0), A_COUNT);
    /* the length decides, not a NUL: "index" inside "index_vector_dim" */
    assert_int_equal(ir_attr_from_name("index_vector_dim", 5), A_INDEX);
}

static void test_applies(void **state)
{
    (void)state;
    for (int op = 0; op < OP_COUNT; op++) {
        assert_true(ir_attr_applies(A_SHARDING, (IrOpcode)op));
        assert_true(ir_attr_applies(A_METADATA, (IrOpcode)op));
        assert_true(ir_attr_applies(A_CONTROL, (IrOpcode)op));
    }
    static const struct {
        IrAttrId id;
        IrOpcode op;
        bool applies;
    } cases[] = {
        {A_DIMENSIONS, OP_BROADCAST, true},     {A_DIMENSIONS, OP_ADD, false},
        {A_TO_APPLY, OP_REDUCE, true},          {A_TO_APPLY, OP_WHILE, false},
        {A_CONDITION, OP_WHILE, true},          {A_RESULT_ACCURACY, OP_EXP, true},
        {A_RESULT_ACCURACY, OP_ADD, false},     {A_ALGORITHM, OP_CONVOLUTION, true},
        {A_CMP_ORDER, OP_COMPARE, true},        {A_GLOBAL_IDS, OP_COLLECTIVE_REDUCE, false},
        {A_CHANNEL_ID, OP_SEND, true},          {A_REPLICA_GROUPS, OP_COLLECTIVE_PERMUTE, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_int_equal(ir_attr_applies(cases[i].id, cases[i].op), cases[i].applies);
    /* a -start takes its base op's attributes */
    for (int id = 0; id < A_COUNT; id++) {
        assert_int_equal(ir_attr_applies((IrAttrId)id, OP_ALL_REDUCE),
                         ir_attr_applies((IrAttrId)id, OP_ALL_REDUCE_START));
        assert_int_equal(ir_attr_applies((IrAttrId)id, OP_ALL_GATHER),
                         ir_attr_applies((IrAttrId)id, OP_ALL_GATHER_START));
        assert_int_equal(ir_attr_applies((IrAttrId)id, OP_COLLECTIVE_PERMUTE),
                         ir_attr_applies((IrAttrId)id, OP_COLLECTIVE_PERMUTE_START));
    }
}

static void test_uses(void **state)
{
    (void)state;
    bool used[A_COUNT] = {false};
    const IrAttrUse *g = ir_attr_generic();
    for (const IrAttrUse *u = g; u->id != A_COUNT; u++)
        used[u->id] = true;
    for (int op = 0; op < OP_COUNT; op++) {
        bool seen[A_COUNT] = {false};
        for (const IrAttrUse *u = ir_op_attrs((IrOpcode)op); u->id != A_COUNT; u++) {
            assert_true(u->id >= 0 && u->id < A_COUNT);
            assert_false(seen[u->id]);
            assert_false(in_uses(g, u->id));
            seen[u->id] = true;
            used[u->id] = true;
            /* what no list prints is read only */
            IrAttrForm f = ir_attr_info(u->id)->form;
            if (f == IR_AF_KEEP || f == IR_AF_CALLEE || f == IR_AF_CALLEES)
                assert_int_equal(u->mode, IR_AM_READ);
        }
    }
    for (int id = 0; id < A_COUNT; id++)
        assert_true(used[id]);
    assert_int_equal(ir_op_attrs(OP_ADD)[0].id, A_COUNT);
    assert_int_equal(ir_op_attrs(OP_COUNT)[0].id, A_COUNT);
}

static void test_forms(void **state)
{
    (void)state;
    for (int id = 0; id < A_COUNT; id++) {
        const IrAttrInfo *ai = ir_attr_info((IrAttrId)id);
        assert_int_equal(ai->form == IR_AF_KEEP, id >= A_FIRST_KEPT);
        assert_int_equal(ai->form == IR_AF_WORD, ai->words != NULL);
        if (ai->words)
            assert_non_null(ai->words->w[0]);
    }
    assert_true(ir_attr_info(A_DIMENSIONS)->has_flag);
    assert_int_equal(ir_attr_info(A_DIMENSIONS)->has, offsetof(IrAttrs, has_dimensions));
    assert_false(ir_attr_info(A_DIMENSIONS)->has_cold);
    assert_false(ir_attr_info(A_DIMENSIONS)->cold);
    assert_int_equal(ir_attr_info(A_DIMENSIONS)->field, offsetof(IrAttrs, dimensions));
    /* gather's dims live out of line, in IrAttrsX */
    assert_true(ir_attr_info(A_OFFSET_DIMS)->cold);
    assert_int_equal(ir_attr_info(A_OFFSET_DIMS)->field, offsetof(IrAttrsX, gather.offset_dims));
    assert_false(ir_attr_info(A_INDEX)->has_flag);
    assert_string_equal(ir_attr_info(A_FFT_TYPE)->words->w[0], "FFT");
}

static const IrInstr *find(const IrModule *m, const char *name)
{
    const IrComputation *c = ir_entry(m);
    int32_t i = ir_find_instr(c, name);
    assert_true(i >= 0);
    return &c->instr[i];
}

static void test_edit(void **state)
{
    (void)state;
    static const char text[] = "HloModule m\n"
                               "ENTRY e {\n"
                               "  p = f32[4,8] parameter(0)\n"
                               "  n = f32[4,8] negate(p)\n"
                               "  ROOT s = f32[2,8] slice(n), slice={[1:3], [0:8]}\n"
                               "}\n";
    IrParseOptions o = ir_default_parse_options();
    IrModule *m = NULL;
    IrDiag d = {0};
    assert_int_equal(ir_parse("t.hlo", text, strlen(text), &o, &m, &d), IR_OK);
    const IrInstr *n = find(m, "n"), *sl = find(m, "s");
    assert_ptr_equal(n->a.x, &ir_no_attrs_x);
    assert_ptr_not_equal(sl->a.x, &ir_no_attrs_x);
    assert_int_equal(sl->a.x->slice_start.n, 2);
    assert_int_equal(sl->a.x->slice_start.v[0], 1);
    assert_int_equal(sl->a.x->slice_limit.v[0], 3);

    /* A copy edited: its own block, the original as parsed. */
    IrInstr copy = *sl;
    IrAttrsX *x = ir_attrs_x_edit(m->arena, &copy.a);
    assert_non_null(x);
    assert_ptr_equal(copy.a.x, x);
    assert_ptr_not_equal(x, sl->a.x);
    assert_int_equal(x->slice_limit.v[0], 3); /* copied from the original */
    x->slice_start = (IrI64List){0};
    x->is_stable = true;
    assert_int_equal(sl->a.x->slice_start.n, 2);
    assert_false(sl->a.x->is_stable);

    /* Editing an instruction that had none: a fresh block, the shared
     * zero one untouched. */
    IrInstr neg = *n;
    IrAttrsX *y = ir_attrs_x_edit(m->arena, &neg.a);
    assert_non_null(y);
    assert_ptr_not_equal(y, &ir_no_attrs_x);
    y->feature_index = 3;
    assert_int_equal(ir_no_attrs_x.feature_index, 0);
    assert_ptr_equal(n->a.x, &ir_no_attrs_x);

    /* A builder's zero IrAttrs (x NULL) reads as the zero block. */
    IrAttrs none = {0};
    assert_ptr_equal(ir_attrs_x(&none), &ir_no_attrs_x);
    ir_module_free(m);
    ir_diag_clear(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_uses),
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_edit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
