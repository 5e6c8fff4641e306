/*
 * mpi_unagreed_main.c: what the collectives' check-ins catch when ranks
 * run different programs past the agreement. The agreement before work
 * (api/agree.c) stops such ranks before any collective, and no option of
 * the library or the command line turns it off; this program reaches the
 * check-ins through api_plan_run_mpi_unagreed (api/api_internal.h, not
 * exported by the shared library), linked from the static library.
 *
 * Run as `mpirun -np 1 mpi_unagreed_main A.hlo : -np 1 mpi_unagreed_main
 * B.hlo` (tests/e2e/mpi_agree.sh): each rank replays its own SPMD module
 * (TsCompileOptions.spmd) on its one device with per-device random inputs
 * of seed 3 and a 60 s heartbeat. Modules whose collectives differ must
 * end the job (the check-in's error, then MPI_Abort) well before the
 * heartbeat: a return from the run is a failure of the check-ins (exit 1,
 * saying what the run returned).
 */
#include <stdio.h>

#include "tessel.h"
#include "api/api_internal.h"

static int report(const char *what, TsDiag *d)
{
    char *s = ts_diag_format(d);
    fprintf(stderr, "mpi_unagreed_main: %s: %s", what, s ? s : "(out of memory)\n");
    ts_free(s);
    ts_diag_clear(d);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: mpirun ... mpi_unagreed_main MODULE.hlo\n", stderr);
        return 2;
    }
    TsDiag d = {0};
    TsMpiWorld *w = NULL;
    if (ts_mpi_init(&w, &d) != TS_OK) {
        if (w)
            ts_mpi_abort(w, "mpi_unagreed_main: ts_mpi_init failed\n");
        return report("ts_mpi_init", &d);
    }
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    TsCompileOptions co = {.spmd = true, .hosts = ts_mpi_size(w)};
    if (ts_module_load(argv[1], &m, &d) != TS_OK || ts_compile(m, &co, &plan, &d) != TS_OK) {
        report(argv[1], &d);
        ts_mpi_abort(w, "mpi_unagreed_main: the module did not compile\n");
        return 1;
    }
    TsRunOptions ro = {.random = true, .seed = 3, .per_device = true, .heartbeat_seconds = 60};
    TsOutputs *out = NULL;
    TsStatus st = api_plan_run_mpi_unagreed(plan, ts_mpi_comm(w), &ro, &out, &d);
    fprintf(stderr, "mpi_unagreed_main: rank %d: the run returned status %d (the check-ins should have ended the "
                    "job)\n", ts_mpi_rank(w), (int)st);
    if (st != TS_OK)
        report("the run", &d);
    ts_outputs_free(out);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_mpi_finalize(w, false, &d);
    ts_diag_clear(&d);
    return 1;
}
