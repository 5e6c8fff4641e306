/*
 * tuning_env.c: the one place the command line reads tessel's tuning
 * from the environment (the library never does). `tessel run` calls
 * cli_tuning_from_env once, before anything runs, and hands the result to
 * the library as TsRunOptions.tuning (and ts_mpi_init_ex). docs/cli.md
 * ("Environment") lists the variables:
 *
 *   TESSEL_MPI_PIECE_BYTES=N       piece_bytes (largest MPI message)
 *   TESSEL_MPI_CHUNK_BYTES=N       chunk_bytes (0: the default)
 *   TESSEL_MPI_PIPELINE_BYTES=N    pipeline_bytes (0: every buffer)
 *   TESSEL_COLL_COPIES_BYTES=N     copies_bytes (0: members share one result)
 *   TESSEL_COLL_STREAM_BOUND=0|1   stream_bound off / on (unset: measured)
 *   TESSEL_FUSION=off|all          fusion
 *   TESSEL_FUSION_BLOCK=N          fusion_block (1 .. 2^20)
 *   TESSEL_SGEMM=openblas|blis|onednn|avx512|amx-bf16x3|probe
 *                                  sgemm (unset: probe; `tessel run --sgemm`
 *                                  wins over it)
 *   TESSEL_FAIL_MPI_AFTER=N        fail_mpi_after (tests)
 *   TESSEL_FAIL_MPI_RANK=R         fail_one_rank, fail_rank (tests)
 *   TESSEL_SKIP_COLLECTIVE_AFTER=N skip_collective_after (tests)
 *   OPENBLAS_NUM_THREADS           unset: openblas_num_threads_unset (tessel
 *                                  may size OpenBLAS's pool at its load)
 *
 * A malformed value is a usage error naming the variable (exit 2).
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A non-negative decimal integer at most max, or -1. */
static long long env_count(const char *s, long long max)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || *end || v > max ? -1 : v;
}

static int bad(const char *name, const char *v, const char *what)
{
    fprintf(stderr, "tessel: error: %s=%s: expected %s\n", name, v, what);
    return CLI_USAGE;
}

/* *out = the variable's count (unchanged when unset); *set: it was. */
static int count_var(const char *name, long long max, int64_t *out, bool *set)
{
    const char *v = getenv(name);
    if (set)
        *set = v != NULL;
    if (!v)
        return CLI_OK;
    long long x = env_count(v, max);
    if (x < 0 && *v >= '0' && *v <= '9' && strspn(v, "0123456789") == strlen(v)) {
        /* digits only: a number too large, not a malformed one */
        fprintf(stderr, "tessel: error: %s=%s: too large: the largest is %lld\n", name, v, max);
        return CLI_USAGE;
    }
    if (x < 0)
        return bad(name, v, "a non-negative integer");
    *out = x;
    return CLI_OK;
}

int cli_tuning_from_env(TsTuning *t)
{
    memset(t, 0, sizeof *t);
    const long long big = (long long)1 << 62;
    int64_t pipe = 0, copies = 0, block = 0, rank = 0;
    bool pipe_set = false, copies_set = false, block_set = false;
    int rc = CLI_OK;
    if ((rc = count_var("TESSEL_MPI_PIECE_BYTES", big, &t->piece_bytes, NULL)) != CLI_OK ||
        (rc = count_var("TESSEL_MPI_CHUNK_BYTES", big, &t->chunk_bytes, NULL)) != CLI_OK ||
        (rc = count_var("TESSEL_MPI_PIPELINE_BYTES", big, &pipe, &pipe_set)) != CLI_OK ||
        (rc = count_var("TESSEL_COLL_COPIES_BYTES", big, &copies, &copies_set)) != CLI_OK ||
        (rc = count_var("TESSEL_FUSION_BLOCK", 1 << 20, &block, &block_set)) != CLI_OK ||
        (rc = count_var("TESSEL_FAIL_MPI_AFTER", big, &t->fail_mpi_after, NULL)) != CLI_OK ||
        (rc = count_var("TESSEL_FAIL_MPI_RANK", 0x7fffffff, &rank, &t->fail_one_rank)) != CLI_OK ||
        (rc = count_var("TESSEL_SKIP_COLLECTIVE_AFTER", big, &t->skip_collective_after, NULL)) != CLI_OK)
        return rc;
    /* 0 means "none" for these two; the library's 0 is its default. */
    t->pipeline_bytes = pipe_set && pipe == 0 ? -1 : pipe;
    t->copies_bytes = copies_set && copies == 0 ? -1 : copies;
    t->fusion_block = (int32_t)block;
    t->fail_rank = (int32_t)rank;
    const char *sb = getenv("TESSEL_COLL_STREAM_BOUND"), *fu = getenv("TESSEL_FUSION");
    if (sb && strcmp(sb, "0") && strcmp(sb, "1"))
        return bad("TESSEL_COLL_STREAM_BOUND", sb, "0 or 1");
    t->stream_bound = !sb ? TS_STREAM_MEASURE : sb[0] == '1' ? TS_STREAM_ON : TS_STREAM_OFF;
    if (fu && strcmp(fu, "off") && strcmp(fu, "all"))
        return bad("TESSEL_FUSION", fu, "off or all");
    t->fusion = !fu ? TS_FUSION_DEFAULT : !strcmp(fu, "off") ? TS_FUSION_OFF : TS_FUSION_ALL;
    if (block_set && block == 0)
        return bad("TESSEL_FUSION_BLOCK", getenv("TESSEL_FUSION_BLOCK"), "a block of 1 to 1048576 elements");
    const char *sg = getenv("TESSEL_SGEMM");
    int lib = sg ? cli_sgemm_parse(sg) : TS_SGEMM_PROBE;
    if (lib < 0)
        return bad("TESSEL_SGEMM", sg, "openblas, blis, onednn, avx512, amx-bf16x3 or probe");
    t->sgemm = lib;
    t->openblas_num_threads_unset = getenv("OPENBLAS_NUM_THREADS") == NULL;
    return CLI_OK;
}

int cli_sgemm_parse(const char *v)
{
    return !strcmp(v, "openblas") ? TS_SGEMM_OPENBLAS
           : !strcmp(v, "blis")   ? TS_SGEMM_BLIS
           : !strcmp(v, "onednn") ? TS_SGEMM_ONEDNN
           : !strcmp(v, "avx512") ? TS_SGEMM_AVX512
           : !strcmp(v, "amx-bf16x3") ? TS_SGEMM_AMX_BF16X3
           : !strcmp(v, "probe")  ? TS_SGEMM_PROBE
                                  : -1;
}
