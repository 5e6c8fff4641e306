/*
 * mpi_test_main.h: what the MPI test programs that must never return from
 * their run share (mpi_stuck_main.c, mpi_unagreed_main.c): start the
 * world, load and compile the SPMD module for one device a rank, and end
 * by reporting the run's return as the failure it is. Include after
 * <stdio.h> and "tessel.h".
 */
#ifndef TESSEL_MPI_TEST_MAIN_H
#define TESSEL_MPI_TEST_MAIN_H

/* Print d's error under prog and what, clear it, and return 1. */
static int mpi_test_report(const char *prog, const char *what, TsDiag *d)
{
    char *s = ts_diag_format(d);
    fprintf(stderr, "%s: %s: %s", prog, what, s ? s : "(out of memory)\n");
    ts_free(s);
    ts_diag_clear(d);
    return 1;
}

/* Start MPI and compile `path` for TsCompileOptions.spmd, one host a rank.
 * false: the error is reported (and the job aborted once the world is up). */
static bool mpi_test_start(const char *prog, const char *path, TsMpiWorld **w, TsModule **m, TsPlan **plan,
                           TsDiag *d)
{
    *w = NULL;
    *m = NULL;
    *plan = NULL;
    if (ts_mpi_init(w, d) != TS_OK) {
        if (*w)
            ts_mpi_abort(*w, "ts_mpi_init failed\n");
        mpi_test_report(prog, "ts_mpi_init", d);
        return false;
    }
    TsCompileOptions co = {.spmd = true, .hosts = ts_mpi_size(*w)};
    if (ts_module_load(path, m, d) != TS_OK || ts_compile(*m, &co, plan, d) != TS_OK) {
        mpi_test_report(prog, path, d);
        ts_mpi_abort(*w, "the module did not compile\n");
        return false;
    }
    return true;
}

/* The run returned st, which it must not (what should have ended the job:
 * `expected`): say so, free everything and return the exit status 1. */
static int mpi_test_returned(const char *prog, const char *expected, TsStatus st, TsMpiWorld *w, TsModule *m,
                             TsPlan *plan, TsOutputs *out, TsDiag *d)
{
    fprintf(stderr, "%s: rank %d: the run returned status %d (%s should have ended the job)\n", prog,
            ts_mpi_rank(w), (int)st, expected);
    if (st != TS_OK)
        mpi_test_report(prog, "the run", d);
    ts_outputs_free(out);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_mpi_finalize(w, false, d);
    ts_diag_clear(d);
    return 1;
}

#endif
