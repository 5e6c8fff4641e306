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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_uses),
        cmocka_unit_test(test_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
