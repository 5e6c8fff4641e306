#!/usr/bin/env bash
# mpi_tuning.sh: tuning comes in as options (TsTuning), read by the command
# line from TESSEL_* once; the values that shape messages between hosts are
# rank 0's on every rank (issue 30: ranks whose TESSEL_MPI_PIECE_BYTES,
# _CHUNK_BYTES or _PIPELINE_BYTES differed overflowed a pipeline slot, or
# hung with one rank pipelining point to point and the other in
# MPI_Iallreduce).
#  1. All-reduce (uneven count), all-gather, reduce-scatter and all-to-all
#     of a 4-device replay under mpirun -np 2 and -np 4 where each rank's
#     environment differs (`mpirun -np 1 env ... : -np 1 env ...`): tiny
#     pieces and a forced pipeline on one rank, the defaults (or other
#     chunks) on another. The files (s32: every order of adds is exact)
#     equal the run in one process, bit for bit, and nothing overflows (the
#     ASan build runs this too).
#  2. --stats says what the streaming-store probe decided, or that the
#     tuning fixed it (TESSEL_COLL_STREAM_BOUND).
#  3. A malformed tuning variable is a usage error naming it (exit 2).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
unset TESSEL_MPI_PIECE_BYTES TESSEL_MPI_CHUNK_BYTES TESSEL_MPI_PIPELINE_BYTES TESSEL_COLL_STREAM_BOUND

N=1003 M=1040
cat >"$WORK/t.hlo" <<HLO
HloModule tune, num_partitions=4

add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY main {
  x = s32[$N] parameter(0)
  w = s32[$M] parameter(1)
  ar = s32[$N] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ar2 = s32[$N] all-reduce(x), channel_id=2, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=add
  ag = s32[$((4 * M))] all-gather(w), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  rs = s32[$((M / 4))] reduce-scatter(w), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  aa = s32[$M] all-to-all(w), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT r = (s32[$N], s32[$N], s32[$((4 * M))], s32[$((M / 4))], s32[$M]) tuple(ar, ar2, ag, rs, aa)
}
HLO
RUN=(run "$WORK/t.hlo" --spmd --per-device --random-inputs 11)

same() { # REF DIR WHAT
    local n=0
    for f in "$1"/*.npy; do
        cmp -s "$f" "$2/$(basename "$f")" || fail "$(basename "$f") differs $3"
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] || fail "no outputs in $1"
}

# ---- 1. ranks with different environments ----
expect_status 0 "$TESSEL" "${RUN[@]}" --output-dir "$WORK/alone"
SMALL=(env TESSEL_MPI_PIECE_BYTES=13 TESSEL_MPI_PIPELINE_BYTES=0 TESSEL_MPI_CHUNK_BYTES=20)
BIG=(env TESSEL_MPI_CHUNK_BYTES=1000000)
case_np() { # NAME NP ENV0... -- ENV1...: rank 0 with the first env, the others with the second
    local name=$1 np=$2
    shift 2
    local e0=() e1=()
    while [ "$1" != -- ]; do e0+=("$1"); shift; done
    shift
    e1=("$@")
    local out="$WORK/$name"
    got=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun --oversubscribe \
        -np 1 "${e0[@]}" "$TESSEL" "${RUN[@]}" --output-dir "$out" : \
        -np $((np - 1)) "${e1[@]}" "$TESSEL" "${RUN[@]}" --output-dir "$out" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = 0 ] || { cat "$ERR" >&2; fail "$name: mpirun exited $got"; }
    same "$WORK/alone" "$out" "($name)"
}
case_np small_first 2 "${SMALL[@]}" -- "${BIG[@]}"
case_np small_second 2 "${BIG[@]}" -- "${SMALL[@]}"
case_np small_first_4 4 "${SMALL[@]}" -- env
case_np small_rest_4 4 env -- "${SMALL[@]}"

# ---- 2. --stats: the streaming-store verdict ----
expect_status 0 "$TESSEL" "${RUN[@]}" --output-dir "$WORK/s1" --stats
expect_in "$ERR" "streaming stores into bound memory: measured:"
expect_status 0 env TESSEL_COLL_STREAM_BOUND=1 "$TESSEL" "${RUN[@]}" --output-dir "$WORK/s2" --stats
expect_in "$ERR" "streaming stores into bound memory: on (tuning)"
expect_status 0 env TESSEL_COLL_STREAM_BOUND=0 "$TESSEL" "${RUN[@]}" --output-dir "$WORK/s3" --stats
expect_in "$ERR" "streaming stores into bound memory: off (tuning)"

# ---- 3. malformed variables ----
expect_status 2 env TESSEL_MPI_PIECE_BYTES=12x "$TESSEL" "${RUN[@]}" --output-dir "$WORK/bad1"
expect_in "$ERR" "TESSEL_MPI_PIECE_BYTES=12x: expected a non-negative integer"
expect_status 2 env TESSEL_COLL_STREAM_BOUND=yes "$TESSEL" "${RUN[@]}" --output-dir "$WORK/bad2"
expect_in "$ERR" "TESSEL_COLL_STREAM_BOUND=yes: expected 0 or 1"
expect_status 2 env TESSEL_FUSION=on "$TESSEL" "${RUN[@]}" --output-dir "$WORK/bad3"
expect_in "$ERR" "TESSEL_FUSION=on: expected off or all"
echo "mpi_tuning: ok"
