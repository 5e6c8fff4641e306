/*
 * mpi_stuck_main.c: the heartbeat ends a rank stuck inside one MPI call.
 * Run as `mpirun -np 2 mpi_stuck_main MODULE.hlo RANK HEARTBEAT_RANK
 * HEARTBEAT_OTHERS N` (tests/e2e/mpi_stuck.sh): every rank replays the
 * SPMD module (TsCompileOptions.spmd, one device each, per-device random
 * inputs of seed 3); on rank RANK the N-th MPI_Iallreduce never returns
 * (coll_mpi_hang_in, coll/mpi_layer.h: it sleeps inside the MPI layer's
 * lock, as a call stuck inside MPI would; no option of the library or the
 * command line reaches it). RANK's heartbeat is HEARTBEAT_RANK seconds,
 * the others' HEARTBEAT_OTHERS (the heartbeat is each rank's own
 * patience). The job must end (the heartbeat's error, then MPI_Abort): a
 * return from the run is a failure (exit 1, saying what it returned).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tessel.h"
#include "coll/mpi_layer.h"

static int report(const char *what, TsDiag *d)
{
    char *s = ts_diag_format(d);
    fprintf(stderr, "mpi_stuck_main: %s: %s", what, s ? s : "(out of memory)\n");
    ts_free(s);
    ts_diag_clear(d);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fputs("usage: mpirun -np 2 mpi_stuck_main MODULE.hlo RANK HEARTBEAT_RANK HEARTBEAT_OTHERS N\n", stderr);
        return 2;
    }
    TsDiag d = {0};
    TsMpiWorld *w = NULL;
    if (ts_mpi_init(&w, &d) != TS_OK) {
        if (w)
            ts_mpi_abort(w, "mpi_stuck_main: ts_mpi_init failed\n");
        return report("ts_mpi_init", &d);
    }
    int rank = ts_mpi_rank(w), stuck = atoi(argv[2]);
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    TsCompileOptions co = {.spmd = true, .hosts = ts_mpi_size(w)};
    if (ts_module_load(argv[1], &m, &d) != TS_OK || ts_compile(m, &co, &plan, &d) != TS_OK) {
        report(argv[1], &d);
        ts_mpi_abort(w, "mpi_stuck_main: the module did not compile\n");
        return 1;
    }
    if (rank == stuck)
        coll_mpi_hang_in("MPI_Iallreduce", atol(argv[5]));
    TsRunOptions ro = {.random = true, .seed = 3, .per_device = true,
                       .heartbeat_seconds = atof(rank == stuck ? argv[3] : argv[4])};
    TsOutputs *out = NULL;
    TsStatus st = ts_plan_run_mpi(plan, ts_mpi_comm(w), &ro, &out, &d);
    fprintf(stderr, "mpi_stuck_main: rank %d: the run returned status %d (the heartbeat should have ended the "
                    "job)\n", rank, (int)st);
    if (st != TS_OK)
        report("the run", &d);
    ts_outputs_free(out);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_mpi_finalize(w, false, &d);
    ts_diag_clear(&d);
    return 1;
}
