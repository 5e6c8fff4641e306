/*
 * mpi_goodbye_main.c: nothing of one heartbeat reaches the next. Open MPI
 * holds a message sent on a communicator its receiver has freed and hands
 * it to the next communicator given the same context id, with its old
 * sequence number, where it takes the place of a new message; a process
 * that runs several programs (the Python API) then lost a check-in of its
 * second run ("rank 1 sent check-in 4 after 2"). coll_mpi_heartbeat_stop
 * ends with a goodbye each way (coll/mpi_heartbeat.c), so every beat is
 * read before a communicator is freed.
 *
 * Run as `mpirun -np 2 mpi_goodbye_main` (ctest mpi_goodbye): two
 * transports one after the other on MPI_COMM_WORLD, each with a 1 s
 * heartbeat (a beat every 0.25 s). In the first, rank 1 waits 0.8 s
 * before ending it while rank 0 ends at once: rank 1's beats of those
 * 0.8 s come after rank 0's last read. In the second, 40 check-ins 10 ms
 * apart, then an agreement. Exit 0 on every rank when both ended; a lost
 * or stale check-in ends the job (MPI_Abort, non-zero).
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

#include "coll/coll.h"

static void nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int transport(MPI_Comm world, int round)
{
    IrDiag d = {0};
    CollMpi *t = NULL;
    if (coll_mpi_attach(&world, &t, &d) != IR_OK || coll_mpi_heartbeat_start(t, 1.0, &d) != IR_OK) {
        fprintf(stderr, "mpi_goodbye_main: round %d: %s\n", round, d.msg ? d.msg : "attach failed");
        ir_diag_clear(&d);
        return 1;
    }
    int rank = coll_mpi_rank(t);
    int n = round == 0 ? 2 : 40;
    for (int k = 0; k < n; k++) {
        coll_mpi_checkin(t, k);
        nap(10);
    }
    bool ok = coll_mpi_agree(t, true) < 0;
    if (round == 0 && rank == 1)
        nap(800);
    IrStatus st = coll_mpi_end(t, &d);
    if (st != IR_OK || !ok) {
        fprintf(stderr, "mpi_goodbye_main: round %d: rank %d: %s\n", round, rank, d.msg ? d.msg : "not agreed");
        ir_diag_clear(&d);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return 1;
    int bad = transport(MPI_COMM_WORLD, 0) || transport(MPI_COMM_WORLD, 1);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!bad)
        printf("mpi_goodbye_main: rank %d: both transports ended\n", rank);
    MPI_Finalize();
    return bad;
}
