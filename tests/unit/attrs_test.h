/*
 * attrs_test.h: a writable IrAttrsX for the instructions tests build by
 * hand. A module's IrAttrsX is read-only and may be shared (ir/ir.h); the
 * code under test copies one with ir_attrs_x_edit, and a test that sets
 * attributes directly takes its own copy from a pool here instead (no arena
 * at hand, nothing to free).
 */
#ifndef TESSEL_TESTS_ATTRS_TEST_H
#define TESSEL_TESTS_ATTRS_TEST_H

#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>

/* a's IrAttrsX, writable: a->x itself when a test set it up before, else a
 * copy of it that a->x now points at. */
static inline IrAttrsX *test_x(IrAttrs *a)
{
    static IrAttrsX pool[1024];
    static size_t used;
    if (a->x >= pool && a->x < pool + used)
        return (IrAttrsX *)(pool + (a->x - pool));
    if (used == sizeof pool / sizeof *pool) {
        fprintf(stderr, "attrs_test.h: pool of %zu IrAttrsX exhausted\n", used);
        abort();
    }
    pool[used] = *ir_attrs_x(a);
    a->x = &pool[used];
    return &pool[used++];
}

#endif
