/*
 * tuning.c: the collectives' tuning (CollTuning, the internal form of
 * TsTuning) with its defaults and limits, and the one place the library
 * reads the process environment: the MPI launcher's variables (was this
 * process started by mpirun, and which rank is it before MPI answers).
 * Tuning never comes from the environment here: the command line reads
 * TESSEL_* once and fills TsTuning (tools/options.c).
 */
#include "coll.h"

#include <errno.h>
#include <stdlib.h>

/* The largest piece MPI's int counts carry comfortably. */
#define PIECE_MAX ((int64_t)1 << 30)

size_t coll_piece_bytes(const CollTuning *t)
{
    int64_t v = t ? t->piece_bytes : 0;
    return (size_t)(v > 0 && v <= PIECE_MAX ? v : PIECE_MAX);
}

size_t coll_chunk_bytes(const CollTuning *t, bool combine)
{
    size_t piece = coll_piece_bytes(t);
    int64_t v = t ? t->chunk_bytes : 0;
    size_t c = v > 0 ? (size_t)v : combine ? (size_t)512 << 10 : piece;
    c = c < piece ? c : piece;
    return c ? c : 1;
}

size_t coll_pipeline_bytes(const CollTuning *t)
{
    int64_t v = t ? t->pipeline_bytes : 0;
    size_t p = v < 0 ? 0 : v == 0 ? (size_t)256 << 10 : (size_t)v;
    size_t piece = coll_piece_bytes(t);
    return p < piece ? p : piece;
}

int64_t coll_copies_bytes(const CollTuning *t)
{
    int64_t v = t ? t->copies_bytes : 0;
    return v < 0 ? 0 : v == 0 ? COLL_COPIES_BYTES : v;
}

/* ---- the launcher's variables ---- */

/* A non-negative decimal integer, or -1 (empty, sign, junk, overflow). */
static long parse_count(const char *s)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || *end ? -1 : v;
}

bool coll_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int coll_launcher_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (int k = 0; k < 3; k++) {
        long r = parse_count(getenv(vars[k]));
        if (r >= 0 && r <= 0x7fffffff)
            return (int)r;
    }
    return -1;
}
