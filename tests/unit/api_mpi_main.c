/*
 * api_mpi_main.c: ts_plan_run_mpi from a program that has MPI of its own,
 * through the public API alone (tessel.h, and mpi.h for its own MPI).
 * Run as `mpirun -np 2 api_mpi_main MODEL.hlo` (ctest: e2e_api_mpi).
 *
 * It initialises MPI itself (MPI_Init_thread, MPI_THREAD_SERIALIZED) and
 * hands the library a communicator of its own: MPI_COMM_WORLD split with
 * the ranks reversed, so that rank 0 of that communicator is the last
 * rank of the world. The library must use that communicator: the outputs
 * must come out on its rank 0 (world rank size-1), NULL on the others; a
 * library that used MPI_COMM_WORLD behind the caller's back would put them
 * elsewhere. The model (2 partitions, one device per rank with 2 ranks)
 * runs on arrays in memory and, on the communicator's rank 0, must equal
 * ts_plan_run_reference within the oracle's f32 tolerance (1e-4 of the
 * largest magnitude). Then a failure found before the devices run (x of the
 * wrong shape) must be TS_EINPUT on every rank, and MPI must still work
 * after it. Exit 0 on every rank when all that holds, else 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "tessel.h"

static int failures;

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            fprintf(stderr, "api_mpi_main: FAIL (%s:%d): ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                                      \
            fputc('\n', stderr);                                                                               \
            failures++;                                                                                        \
        }                                                                                                      \
    } while (0)

/* The diag's text on stderr (prefixed with the rank) and clear it. */
static void report(int rank, TsDiag *d)
{
    char *s = ts_diag_format(d);
    fprintf(stderr, "api_mpi_main: rank %d: %s", rank, s ? s : "(out of memory)\n");
    ts_free(s);
    ts_diag_clear(d);
}

/* Output 0 of `out` (count floats) into a new buffer, NULL on failure. */
static float *read0(const TsOutputs *out, size_t count, int rank)
{
    TsDiag d = {0};
    TsArrayInfo info;
    if (ts_outputs_info(out, 0, &info, &d) != TS_OK) {
        report(rank, &d);
        return NULL;
    }
    if (info.nbytes != count * sizeof(float) || strcmp(info.dtype, "<f4") != 0) {
        fprintf(stderr, "api_mpi_main: output 0 is %s of %zu bytes, expected <f4 of %zu\n", info.dtype,
                info.nbytes, count * sizeof(float));
        return NULL;
    }
    float *y = malloc(info.nbytes);
    if (y && ts_outputs_read(out, 0, y, info.nbytes, &d) != TS_OK) {
        report(rank, &d);
        free(y);
        return NULL;
    }
    return y;
}

int main(int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fputs("api_mpi_main: MPI_Init_thread failed\n", stderr);
        return 1;
    }
    int wrank = 0, wsize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI gives thread level %d", provided);
    MPI_Comm comm;
    CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - 1 - wrank, &comm) == MPI_SUCCESS, "MPI_Comm_split");
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    CHECK(rank == wsize - 1 - wrank, "comm rank %d for world rank %d", rank, wrank);
    const char *model = argc > 1 ? argv[1] : "examples/mlp.hlo";

    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    TsCompileOptions co = {.num_partitions = 2, .hosts = size};
    if (ts_module_load(model, &m, &d) != TS_OK || ts_compile(m, &co, &plan, &d) != TS_OK) {
        report(rank, &d);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK(ts_plan_hosts(plan) == size, "plan for %lld hosts", (long long)ts_plan_hosts(plan));

    /* every parameter from a fixed pattern (the same on every rank) */
    int32_t nin = ts_plan_num_inputs(plan);
    TsArrayInfo info[8];
    TsArray arr[8];
    TsInput in[8];
    float *vals[8] = {0};
    CHECK(nin > 0 && nin <= 8, "%d inputs", nin);
    for (int32_t i = 0; i < nin && i < 8; i++) {
        if (ts_plan_input_info(plan, i, &info[i], &d) != TS_OK) {
            report(rank, &d);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        size_t count = info[i].nbytes / sizeof(float);
        vals[i] = malloc(info[i].nbytes);
        for (size_t j = 0; j < count; j++)
            vals[i][j] = (float)((double)((j * 7919 + (size_t)i * 104729) % 2003) / 1001.5 - 1.0);
        arr[i] = (TsArray){.dtype = info[i].dtype, .rank = info[i].rank, .dims = info[i].dims, .data = vals[i],
                           .nbytes = info[i].nbytes};
        in[i] = (TsInput){.key = info[i].name, .array = &arr[i]};
    }
    TsArrayInfo oinfo;
    if (ts_plan_output_info(plan, 0, &oinfo, &d) != TS_OK) {
        report(rank, &d);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t count = oinfo.nbytes / sizeof(float);

    TsRunOptions ro = {.ninputs = nin, .inputs = in};
    TsOutputs *out = NULL;
    TsStatus st = ts_plan_run_mpi(plan, &comm, &ro, &out, &d);
    CHECK(st == TS_OK, "ts_plan_run_mpi: status %d", (int)st);
    if (st != TS_OK)
        report(rank, &d);
    if (rank == 0) {
        CHECK(out != NULL, "no outputs on the communicator's rank 0 (world rank %d)", wrank);
        TsOutputs *ref = NULL;
        if (ts_plan_run_reference(plan, &ro, &ref, &d) != TS_OK)
            report(rank, &d);
        float *y = out ? read0(out, count, rank) : NULL, *yr = ref ? read0(ref, count, rank) : NULL;
        CHECK(y && yr, "outputs not read");
        if (y && yr) {
            double scale = 0, err = 0;
            for (size_t i = 0; i < count; i++) {
                scale = fmax(scale, fabs((double)yr[i]));
                err = fmax(err, fabs((double)y[i] - yr[i]));
            }
            CHECK(scale > 0 && err <= 1e-4 * scale, "max error %g > 1e-4 x %g", err, scale);
            printf("api_mpi_main: %s on %d ranks (a communicator of the caller's, ranks reversed): outputs on "
                   "its rank 0 (world rank %d), max error %.3g of %.3g vs ts_plan_run_reference\n",
                   model, size, wrank, err, scale);
        }
        free(y);
        free(yr);
        ts_outputs_free(ref);
    } else {
        CHECK(out == NULL, "outputs on communicator rank %d", rank);
    }
    ts_outputs_free(out);
    out = NULL;

    /* x of the wrong shape: every rank refuses it, before the devices run */
    int64_t bad[2] = {info[0].dims[0], info[0].dims[1] - 1};
    TsArray xbad = arr[0];
    xbad.dims = bad;
    xbad.nbytes = (size_t)(bad[0] * bad[1]) * sizeof(float);
    TsInput inbad[8];
    memcpy(inbad, in, sizeof in);
    inbad[0].array = &xbad;
    TsRunOptions robad = {.ninputs = nin, .inputs = inbad};
    st = ts_plan_run_mpi(plan, &comm, &robad, &out, &d);
    CHECK(st == TS_EINPUT, "wrong shape: status %d on rank %d", (int)st, rank);
    CHECK(out == NULL, "wrong shape: outputs on rank %d", rank);
    if (rank == 0 && d.msg)
        printf("api_mpi_main: wrong shape, every rank: %s\n", d.msg);
    ts_diag_clear(&d);

    for (int32_t i = 0; i < 8; i++)
        free(vals[i]);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_shutdown();

    /* MPI still works; every rank exits with the verdict of all */
    int all = 0;
    CHECK(MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS, "MPI_Allreduce");
    MPI_Comm_free(&comm);
    MPI_Finalize();
    if (rank == 0)
        printf("api_mpi_main: %s\n", all ? "FAILED" : "ok");
    return all ? 1 : 0;
}
