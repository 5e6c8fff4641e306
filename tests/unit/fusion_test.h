/*
 * fusion_test.h: what the fusion tests (test_fusion.c, test_fusion_rows.c)
 * share: the groups dev_fusion_find makes of a module's entry, and an
 * instruction by name. Include after "kernel_test.h".
 */
#ifndef TESSEL_FUSION_TEST_H
#define TESSEL_FUSION_TEST_H

/* The groups dev_fusion_find makes of the entry, in a plain post-order
 * (the module's instructions are written operands first). */
static inline DevFusion find(const IrModule *m, int32_t block)
{
    const IrComputation *c = ir_entry(m);
    int32_t n = c->ninstr, order[64];
    assert_true(n <= 64);
    for (int32_t i = 0; i < n; i++)
        order[i] = i;
    DevExecOptions opt = {.fusion_block = block};
    DevFusion f;
    IrDiag d = {0};
    assert_int_equal(dev_fusion_find(m, c, order, n, &opt, &f, &d), IR_OK);
    return f;
}

static inline int32_t instr_named(const IrModule *m, const char *name)
{
    const IrComputation *c = ir_entry(m);
    for (int32_t i = 0; i < c->ninstr; i++)
        if (strcmp(c->instr[i].name, name) == 0)
            return i;
    fail_msg("no instruction %s", name);
    return -1;
}

#endif /* TESSEL_FUSION_TEST_H */
