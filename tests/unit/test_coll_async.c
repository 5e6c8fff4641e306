/*
 * test_coll_async.c: a device's communication thread pauses while its
 * device computes and is woken when the device begins to wait
 * (runtime/coll_async.c, rt_async_pause, which mpi.c's backoff calls).
 *
 *  1. Off a communication thread rt_async_pause returns false at once.
 *  2. On one, with nobody waiting for its jobs, it pauses and returns
 *     true; a wait (and a drain) that begins makes the pause in progress
 *     return and the next one return false. The jobs below pause for an
 *     hour a turn until told the device waits: without the wake-up they
 *     never finish, and ctest's timeout fails the test.
 *  3. Jobs still run in the order they were started, and results and
 *     errors reach the waiter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <semaphore.h>
#include <string.h>

#include "runtime/coll.h"

enum { HOUR_US = 3600L * 1000 * 1000 };

typedef struct Ctx {
    sem_t started;     /* posted by a job once it has paused alone */
    int alone;         /* pauses that returned true */
    int order[4];      /* job k's place in the order they ran */
    int ran;
} Ctx;

/* A job that pauses as a transport waiting for a peer does, until the
 * device waits for it; its result is null, its status says which job it
 * was (job 2 fails). */
static IrStatus job(void *arg, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                    DevValue **out, IrDiag *d)
{
    (void)m;
    (void)nopnd;
    (void)operands;
    Ctx *c = arg;
    int k = ins->name[0] - '0';
    c->order[k] = c->ran++;
    /* Nobody waits yet: the main thread is blocked on the semaphore. */
    if (rt_async_pause(1))
        c->alone++;
    sem_post(&c->started);
    while (rt_async_pause(HOUR_US))
        ;
    *out = NULL;
    if (k == 2)
        return ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "job %d failed", k);
    return IR_OK;
}

static void pause_off_thread(void **state)
{
    (void)state;
    assert_false(rt_async_pause(HOUR_US));
}

static void pause_until_wait(void **state)
{
    (void)state;
    Ctx c;
    memset(&c, 0, sizeof c);
    assert_int_equal(sem_init(&c.started, 0, 0), 0);
    RtAsync *a = rt_async_new(job, &c);
    assert_non_null(a);
    IrModule m;
    memset(&m, 0, sizeof m);
    IrInstr ins[4];
    char names[4][2] = {"0", "1", "2", "3"};
    void *h[4];
    IrDiag d = {0};
    for (int k = 0; k < 4; k++) {
        memset(&ins[k], 0, sizeof ins[k]);
        ins[k].name = names[k];
    }
    /* A wait wakes job 0's pause. */
    assert_int_equal(rt_async_start(a, &m, &ins[0], 0, NULL, &h[0], &d), IR_OK);
    sem_wait(&c.started);
    DevValue *out = NULL;
    assert_int_equal(rt_async_wait(a, h[0], &out, &d), IR_OK);
    assert_null(out);
    assert_int_equal(c.alone, 1);
    /* Jobs 1 to 3 queued at once run in order; a drain wakes each pause
     * (the drain waits for all three, counted as waiting throughout). */
    for (int k = 1; k < 4; k++)
        assert_int_equal(rt_async_start(a, &m, &ins[k], 0, NULL, &h[k], &d), IR_OK);
    sem_wait(&c.started);
    rt_async_drain(a);
    for (int k = 1; k < 4; k++) {
        IrStatus st = rt_async_wait(a, h[k], &out, &d);
        assert_int_equal(st, k == 2 ? IR_ERUNTIME : IR_OK);
        if (k == 2) {
            assert_non_null(d.msg);
            assert_non_null(strstr(d.msg, "job 2 failed"));
            ir_diag_clear(&d);
        }
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(c.order[k], k);
    /* Job 1 paused alone (the main thread was on the semaphore); jobs 2
     * and 3 found the drain waiting. */
    assert_int_equal(c.alone, 2);
    rt_async_free(a);
    sem_destroy(&c.started);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pause_off_thread),
        cmocka_unit_test(pause_until_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
