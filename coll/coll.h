/*
 * coll.h: layer `coll/`: the collectives, apart from the devices that run
 * them and the programs that call them. Reads as a table of contents, one
 * section per file.
 *
 *   options.c   the tuning of a run (CollTuning) with its defaults; the one
 *               file of the library that reads the environment (the MPI
 *               launcher's variables only)
 *
 * Library code: never prints, never exits; errors are IrStatus with an
 * IrDiag. May use ir/ and device/ (values, reducers); only the MPI
 * transport includes mpi.h.
 */
#ifndef TESSEL_COLL_COLL_H
#define TESSEL_COLL_COLL_H

#include "../device/device.h"
#include "../ir/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* options.c                                                           */
/* ------------------------------------------------------------------ */

/* The tuning of a run: TsTuning (include/tessel.h) field for field, which
 * says what each does. All zero: the defaults. */
enum { COLL_STREAM_MEASURE = 0, COLL_STREAM_ON = 1, COLL_STREAM_OFF = 2 };
enum { COLL_FUSION_DEFAULT = 0, COLL_FUSION_OFF = 1, COLL_FUSION_ALL = 2 };
typedef struct CollTuning {
    int64_t piece_bytes, chunk_bytes, pipeline_bytes, copies_bytes;
    int32_t stream_bound;      /* COLL_STREAM_* */
    int32_t fusion;            /* COLL_FUSION_* */
    int32_t fusion_block;
    int64_t fail_mpi_after, skip_collective_after;
    bool fail_one_rank;
    int32_t fail_rank;
} CollTuning;

/* Size classes of the streaming-store probe (16-32 MiB, 32 MiB and more). */
#define COLL_PROBE_CLASSES 2

/* An in-host all-reduce/all-gather's own result copies, at most (coll_copies_bytes's default). */
#define COLL_COPIES_BYTES ((int64_t)256 << 20)

/* The values in effect (t may be NULL: the defaults): the largest MPI
 * message (1 GiB default and most); a pipelined chunk (512 KiB where
 * chunks are combined, else a piece; at most a piece, at least 1); the
 * smallest buffer that goes pipelined (256 KiB; at most a piece); the
 * bytes of result copies an in-host group may make (256 MiB). */
size_t coll_piece_bytes(const CollTuning *t);
size_t coll_chunk_bytes(const CollTuning *t, bool combine);
size_t coll_pipeline_bytes(const CollTuning *t);
int64_t coll_copies_bytes(const CollTuning *t);

/* True when this process was started by an MPI launcher (Open MPI, PMI,
 * PMIx variables). */
bool coll_launched(void);
/* This process's rank as its launcher says (OMPI_COMM_WORLD_RANK,
 * PMIX_RANK, PMI_RANK), -1 when none is set: for messages before
 * MPI_Comm_rank has answered, and for fail_one_rank. */
int coll_launcher_rank(void);

#endif /* TESSEL_COLL_COLL_H */
