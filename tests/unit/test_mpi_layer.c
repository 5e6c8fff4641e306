/*
 * test_mpi_layer.c: the MPI layer's failure injection (coll/mpi_layer.h)
 * and mpi_world.c's handling of a failed call, in one process.
 *
 * - Injection without MPI: an armed call returns MPI_ERR_OTHER without
 *   calling MPI (MPI is not initialized here, so a call that reached MPI
 *   would abort the test), is counted, and names itself.
 * - The tuning's injection (fail_mpi_after, fail_rank) and the launcher's
 *   rank (OMPI_COMM_WORLD_RANK, PMIX_RANK): each case runs in a
 *   forked child (the settings are read once per process) and reports
 *   whether they were accepted and how far away the armed failure is.
 * - A singleton MPI job (MPI_Init without mpirun, in a forked child that
 *   leaves with _exit: Open MPI's own allocations would otherwise be
 *   reported as leaks by the ASan build): coll_mpi_init whose
 *   MPI_Init_thread is failed, then a real one; agreement and collectives
 *   on one rank; injected failures of an all-reduce, an all-gather and an
 *   MPI_Op_free, each an IR_ERUNTIME naming rank 0 and the call; the
 *   release after a failure still frees the rest; finalize.
 * Multi-rank behaviour (a failed collective ends the job) is in
 * tests/e2e/faults.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll/mpi_layer.h"
#include "runtime/run_internal.h"

/* ---- injection without MPI ---- */

static void test_inject_without_mpi(void **state)
{
    (void)state;
    long c0 = coll_mpi_call_count();
    assert_null(coll_mpi_injected_call());
    coll_mpi_fail_after(1);
    assert_int_equal(coll_mpi_fail_pending(), 1);
    int size = -7;
    assert_int_equal(tmpi_comm_size(MPI_COMM_WORLD, &size), MPI_ERR_OTHER);
    assert_int_equal(size, -7); /* MPI was not called */
    assert_int_equal(coll_mpi_call_count(), c0 + 1);
    assert_string_equal(coll_mpi_injected_call(), "MPI_Comm_size");
    assert_int_equal(coll_mpi_fail_pending(), 0);
    /* the third call from now; switched off again; negative is off */
    coll_mpi_fail_after(3);
    assert_int_equal(coll_mpi_fail_pending(), 3);
    coll_mpi_fail_after(0);
    assert_int_equal(coll_mpi_fail_pending(), 0);
    coll_mpi_fail_after(-5);
    assert_int_equal(coll_mpi_fail_pending(), 0);
    /* two armed calls in a row: the countdown takes one step per call */
    coll_mpi_fail_after(2);
    coll_mpi_fail_after(1);
    int rank = -7;
    assert_int_equal(tmpi_comm_rank(MPI_COMM_WORLD, &rank), MPI_ERR_OTHER);
    assert_int_equal(rank, -7);
    assert_string_equal(coll_mpi_injected_call(), "MPI_Comm_rank");
    assert_int_equal(coll_mpi_call_count(), c0 + 2);
}

/* ---- the tuning's injection and the launcher's rank, one forked child per case ---- */

typedef struct EnvResult {
    long pending;      /* coll_mpi_fail_pending after coll_mpi_inject */
    long again_pending; /* after a second coll_mpi_inject (armed once: ignored) */
    int env_rank;      /* coll_launcher_rank */
} EnvResult;

/* In a child with these launcher variables (NULL: unset), arm
 * fail_mpi_after = after on launcher rank `rank` (-1: every rank) and
 * bring back what it saw. */
static EnvResult env_case(long after, int rank, const char *ompi_rank, const char *pmix_rank)
{
    int fd[2];
    EnvResult r;
    memset(&r, 0, sizeof r);
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
        const char *vals[] = {ompi_rank, pmix_rank, NULL};
        for (int k = 0; k < 3; k++)
            if (vals[k])
                setenv(names[k], vals[k], 1);
            else
                unsetenv(names[k]);
        EnvResult c;
        memset(&c, 0, sizeof c);
        CollTuning t = {.fail_mpi_after = after, .fail_one_rank = rank >= 0, .fail_rank = rank};
        c.env_rank = coll_launcher_rank();
        coll_mpi_inject(&t, c.env_rank);
        c.pending = coll_mpi_fail_pending();
        t.fail_mpi_after = 7;
        coll_mpi_inject(&t, c.env_rank);
        c.again_pending = coll_mpi_fail_pending();
        ssize_t w = write(fd[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fd[1]);
    assert_int_equal(read(fd[0], &r, sizeof r), (ssize_t)sizeof r);
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return r;
}

static void expect_env(EnvResult r, long pending, int env_rank)
{
    assert_int_equal(r.pending, pending);
    assert_int_equal(r.again_pending, pending);
    assert_int_equal(r.env_rank, env_rank);
}

static void test_env(void **state)
{
    (void)state;
    expect_env(env_case(0, -1, NULL, NULL), 0, -1);
    expect_env(env_case(2, -1, NULL, NULL), 2, -1);
    expect_env(env_case(0, -1, "3", NULL), 0, 3);
    /* only the named rank arms */
    expect_env(env_case(2, 1, "1", NULL), 2, 1);
    expect_env(env_case(2, 1, "0", NULL), 0, 0);
    expect_env(env_case(4, 1, NULL, "1"), 4, 1);
    /* OMPI_COMM_WORLD_RANK is asked first */
    expect_env(env_case(4, 1, "0", "1"), 0, 0);
    /* a rank filter with no launcher rank to match arms nothing */
    expect_env(env_case(2, 0, NULL, NULL), 0, -1);
    /* a malformed launcher rank is no rank */
    expect_env(env_case(5, 1, "x", NULL), 0, -1);
    expect_env(env_case(5, 1, "+1", NULL), 0, -1);
}

/* ---- a singleton MPI job, in a child ---- */

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            _exit(1);                                                         \
        }                                                                     \
    } while (0)

/* The diag is an IR_ERUNTIME naming rank `rank`, the call, and injection. */
static void check_injected(IrStatus st, IrDiag *d, int rank, const char *call)
{
    char want[96];
    snprintf(want, sizeof want, "rank %d: %s failed: ", rank, call);
    CHECK(st == IR_ERUNTIME && d->status == IR_ERUNTIME && d->msg);
    if (strncmp(d->msg, want, strlen(want)) != 0 || !strstr(d->msg, "(injected: fail_mpi_after)")) {
        fprintf(stderr, "message '%s', expected '%s... (injected: ...)'\n", d->msg, want);
        _exit(1);
    }
    ir_diag_clear(d);
}

static void singleton_job(void)
{
    IrDiag d = {0};
    CollMpi *t = NULL;
    /* MPI_Init_thread failed: no transport, MPI never initialized */
    coll_mpi_fail_after(1);
    IrStatus st = coll_mpi_init(NULL, NULL, NULL, &t, &d);
    CHECK(st == IR_ERUNTIME && !t && d.msg);
    CHECK(strstr(d.msg, "MPI_Init_thread failed") && strstr(d.msg, "(injected: fail_mpi_after)"));
    ir_diag_clear(&d);
    int inited = 1;
    CHECK(MPI_Initialized(&inited) == MPI_SUCCESS && !inited);
    /* the real one: 16 calls (init, the world's errhandler, thread level,
     * the communicator's dup and errhandler, the heartbeat's dup, rank,
     * size, type x2, 6 ops) */
    long c0 = coll_mpi_call_count();
    CHECK(coll_mpi_init(NULL, NULL, NULL, &t, &d) == IR_OK && t);
    CHECK(coll_mpi_call_count() - c0 == 16);
    CHECK(coll_mpi_rank(t) == 0 && coll_mpi_size(t) == 1);
    CHECK(coll_mpi_agree(t, true) == -1);
    CHECK(coll_mpi_agree(t, false) == 0);
    CHECK(coll_mpi_max(t, 5) == 5);
    /* one rank: a reduction is the identity on the buffer */
    float buf[3] = {1.5f, NAN, -2.0f};
    CHECK(coll_mpi_allreduce(t, buf, 3, IR_F32, OP_MAXIMUM, &d) == IR_OK);
    CHECK(buf[0] == 1.5f && isnan(buf[1]) && buf[2] == -2.0f);
    /* injected: the buffer is untouched, the call named */
    coll_mpi_fail_after(1);
    st = coll_mpi_allreduce(t, buf, 3, IR_F32, OP_ADD, &d);
    check_injected(st, &d, 0, "MPI_Allreduce");
    CHECK(buf[0] == 1.5f && buf[2] == -2.0f);
    int32_t send[2] = {7, 8}, recv[2] = {0, 0};
    coll_mpi_fail_after(1);
    check_injected(coll_mpi_allgather(t, send, sizeof send, recv, &d), &d, 0, "MPI_Allgather");
    CHECK(recv[0] == 0 && recv[1] == 0);
    CHECK(coll_mpi_allgather(t, send, sizeof send, recv, &d) == IR_OK && recv[0] == 7 && recv[1] == 8);
    /* MPI_T's question (mpi_shm.c) leaves MPI's thread level as it was
     * (Open MPI's MPI_T_init_thread sets it to the level asked), and is
     * not counted */
    char btl[256];
    int level = -1;
    c0 = coll_mpi_call_count();
    CHECK(tmpi_cvar_string("btl", btl, sizeof btl) == MPI_SUCCESS && coll_mpi_call_count() == c0);
    CHECK(MPI_Query_thread(&level) == MPI_SUCCESS && level >= MPI_THREAD_SERIALIZED);
    /* the third MPI_Op_free fails; the other 5 ops and the type are still
     * freed: 7 calls, and MPI_Error_string for the message: 8; a second
     * release has nothing left to free; then the heartbeat's and tessel's
     * communicators are freed and MPI_Finalize: 11 */
    c0 = coll_mpi_call_count();
    coll_mpi_fail_after(3);
    check_injected(coll_mpi_release(t, &d), &d, 0, "MPI_Op_free");
    CHECK(coll_mpi_call_count() - c0 == 8);
    CHECK(coll_mpi_release(t, &d) == IR_OK && coll_mpi_call_count() - c0 == 8);
    CHECK(coll_mpi_end(t, &d) == IR_OK && coll_mpi_call_count() - c0 == 11);
    int fin = 0;
    CHECK(MPI_Finalized(&fin) == MPI_SUCCESS && fin);
    _exit(0);
}

static void test_singleton(void **state)
{
    (void)state;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        singleton_job();
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inject_without_mpi),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_singleton),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
