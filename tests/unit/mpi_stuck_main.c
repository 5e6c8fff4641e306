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
#include "mpi_test_main.h"
#include "coll/mpi_layer.h"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fputs("usage: mpirun -np 2 mpi_stuck_main MODULE.hlo RANK HEARTBEAT_RANK HEARTBEAT_OTHERS N\n", stderr);
        return 2;
    }
    TsDiag d = {0};
    TsMpiWorld *w;
    TsModule *m;
    TsPlan *plan;
    if (!mpi_test_start("mpi_stuck_main", argv[1], &w, &m, &plan, &d))
        return 1;
    int rank = ts_mpi_rank(w), stuck = atoi(argv[2]);
    if (rank == stuck)
        coll_mpi_hang_in("MPI_Iallreduce", atol(argv[5]));
    TsRunOptions ro = {.random = true, .seed = 3, .per_device = true,
                       .heartbeat_seconds = atof(rank == stuck ? argv[3] : argv[4])};
    TsOutputs *out = NULL;
    TsStatus st = ts_plan_run_mpi(plan, ts_mpi_comm(w), &ro, &out, &d);
    return mpi_test_returned("mpi_stuck_main", "the heartbeat", st, w, m, plan, out, &d);
}
