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
#include "mpi_test_main.h"
#include "api/api_internal.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: mpirun ... mpi_unagreed_main MODULE.hlo\n", stderr);
        return 2;
    }
    TsDiag d = {0};
    TsMpiWorld *w;
    TsModule *m;
    TsPlan *plan;
    if (!mpi_test_start("mpi_unagreed_main", argv[1], &w, &m, &plan, &d))
        return 1;
    TsRunOptions ro = {.random = true, .seed = 3, .per_device = true, .heartbeat_seconds = 60};
    TsOutputs *out = NULL;
    TsStatus st = api_plan_run_mpi_unagreed(plan, ts_mpi_comm(w), &ro, &out, &d);
    return mpi_test_returned("mpi_unagreed_main", "the check-ins", st, w, m, plan, out, &d);
}
