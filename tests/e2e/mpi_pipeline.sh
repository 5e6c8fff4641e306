#!/usr/bin/env bash
# mpi_pipeline.sh: the direct and pipelined collectives across hosts
# (coll/mpi_pipeline.c "pipelined all-reduce, reduce-scatter and all-gather",
# coll/allreduce.c reduce_one_across and the direct paths of coll/allgather.c,
# reduce_scatter.c and alltoall.c).
#  1. All-reduces (f32 add, f64 max, s32 add, uneven counts that no rank
#     count divides), all-gather, reduce-scatter and all-to-all along dim
#     0, over all 8 devices and over pairs of devices on different hosts,
#     replayed (--spmd) in one process and under mpirun -np 2, 4, 8 (4, 2,
#     1 local devices: the local combine before the pipeline, and one
#     device a host: straight from the operand), the pipeline forced on
#     small arrays (TESSEL_MPI_PIPELINE_BYTES=0) in chunks of a few
#     elements, uneven against the blocks, so the slots wrap around:
#     bit-equal files, each device's result checked against XLA's
#     semantics in NumPy.
#  2. The same at the default sizes, with arrays large enough for the
#     pipeline (>= 256 KiB), at -np 2 and 8 (the all-reduces of all the
#     ranks through shared memory, coll/mpi_shm.c), and at -np 2 with the
#     chunk size set (MPI's pipeline).
#  3. --stats: a reduce-scatter and an all-to-all over 8 hosts send and
#     receive 7/8 of a host's operand; an all-gather its block to each of
#     7 peers.
#  4. An all-gather into a result large enough for streaming stores (16
#     MiB and more, rt_coll_stream_into) into the devices' bound memory,
#     forced on and off (TESSEL_COLL_STREAM_BOUND=1, 0) and measured (the
#     variable unset), in one process and under mpirun -np 2 (one device a
#     host: the host's own block copied into the result beside the
#     transfer): the same bytes every way.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
mpi() { env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun --oversubscribe "$@"; }

module() { # N: per-device elements of the all-reduces (uneven); M: of the others (a multiple of 8)
    local n=$1 m=$2
    cat <<HLO
HloModule pipe, num_partitions=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] maximum(a, b)
}

addi {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY main {
  x = f32[$n] parameter(0)
  y = f64[$n] parameter(1)
  z = s32[$n] parameter(2)
  w = f32[$m] parameter(3)
  ar_all = f32[$n] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=add
  ar_pairs = f32[$n] all-reduce(x), channel_id=2, replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=add
  ar_max = f64[$n] all-reduce(y), channel_id=3, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=max64
  ar_int = s32[$n] all-reduce(z), channel_id=4, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=addi
  ag = f32[$((8 * m))] all-gather(w), channel_id=5, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  ag_pairs = f32[$((2 * m))] all-gather(w), channel_id=6, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}, use_global_device_ids=true
  rs = f32[$((m / 8))] reduce-scatter(w), channel_id=7, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  aa = f32[$m] all-to-all(w), channel_id=8, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  ROOT r = (f32[$n], f32[$n], f64[$n], s32[$n], f32[$((8 * m))], f32[$((2 * m))], f32[$((m / 8))], f32[$m]) tuple(ar_all, ar_pairs, ar_max, ar_int, ag, ag_pairs, rs, aa)
}
HLO
}

inputs() { # DIR N M: integer-valued floats (every order of adds is exact), NaN and -0 in y
    "$PY" - "$@" <<'PY'
import sys
import numpy as np
w, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(8):
    i = np.arange(n)
    np.save(f"{w}/x{d}.npy", ((i * 7 + d * 13) % 201 - 100).astype(np.float32))
    y = ((i * 5 + d * 11) % 97 - 48).astype(np.float64)
    y[(i + d) % 37 == 0] = np.nan
    y[(i + 2 * d) % 41 == 0] = -0.0
    np.save(f"{w}/y{d}.npy", y)
    np.save(f"{w}/z{d}.npy", ((i * 2654435761 + d * 40503) % (1 << 32) - (1 << 31)).astype(np.int64).astype(np.int32))
    np.save(f"{w}/w{d}.npy", ((np.arange(m) * 3 + d * 1000) % 4099).astype(np.float32))
PY
}

check() { # DIR(inputs) OUT(outputs) N M
    "$PY" - "$@" <<'PY' || fail "a collective differs from XLA's semantics"
import sys
import numpy as np
w, o, n, m = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = [np.load(f"{w}/x{d}.npy") for d in range(8)]
y = [np.load(f"{w}/y{d}.npy") for d in range(8)]
z = [np.load(f"{w}/z{d}.npy") for d in range(8)]
v = [np.load(f"{w}/w{d}.npy") for d in range(8)]
def xmax(a, b):  # XLA: NaN from the left first, the left on a tie
    r = np.where(b > a, b, a)
    r = np.where(np.isnan(b), b, r)
    return np.where(np.isnan(a), a, r)
def want(i, d):
    pair = [d % 4, d % 4 + 4]
    if i == 0: return sum(x[j] for j in range(8))
    if i == 1: return x[pair[0]] + x[pair[1]]
    if i == 2:
        r = y[0]
        for j in range(1, 8): r = xmax(r, y[j])
        return r
    if i == 3:
        with np.errstate(over="ignore"):
            return sum(z[j].astype(np.int64) for j in range(8)).astype(np.int32)
    if i == 4: return np.concatenate(v)
    if i == 5: return np.concatenate([v[j] for j in pair])
    b = m // 8
    if i == 6: return sum(v[j] for j in range(8))[d * b:(d + 1) * b]
    if i == 7: return np.concatenate([v[j][d * b:(d + 1) * b] for j in range(8)])
for d in range(8):
    for i in range(8):
        g = np.load(f"{o}/output_{i}.device_{d}.npy")
        e = want(i, d)
        if g.shape != e.shape or g.tobytes() != e.astype(g.dtype).tobytes():
            bad = np.flatnonzero(g.view(np.uint8) != e.astype(g.dtype).view(np.uint8))
            sys.exit(f"output {i} of device {d}: differs at byte {bad[:5]}")
PY
}

args() { # DIR: the inputs of every device
    local a=()
    for d in 0 1 2 3 4 5 6 7; do
        for p in x y z w; do a+=(--input "$p@$d=$1/$p$d.npy"); done
    done
    echo "${a[@]}"
}

same() { # REF DIR WHAT
    for f in "$1"/*.npy; do
        cmp -s "$f" "$2/$(basename "$f")" || fail "$(basename "$f") differs $3"
    done
}

# ---- 1. forced pipeline, tiny uneven chunks ----
N=1003 M=1040
module $N $M >"$WORK/p.hlo"
mkdir -p "$WORK/in1"
inputs "$WORK/in1" $N $M
read -r -a IN <<<"$(args "$WORK/in1")"
expect_status 0 "$TESSEL" run "$WORK/p.hlo" --spmd "${IN[@]}" --output-dir "$WORK/alone"
check "$WORK/in1" "$WORK/alone" $N $M
for np in 2 4 8; do
    for chunk in 20 1000; do
        expect_status 0 mpi -np $np -x TESSEL_MPI_PIPELINE_BYTES=0 -x TESSEL_MPI_CHUNK_BYTES=$chunk \
            "$TESSEL" run "$WORK/p.hlo" --spmd "${IN[@]}" --output-dir "$WORK/forced_${np}_$chunk"
        same "$WORK/alone" "$WORK/forced_${np}_$chunk" "under mpirun -np $np in chunks of $chunk bytes"
    done
done

# ---- 2. default sizes, large enough for the pipeline ----
N=70001 M=65536
module $N $M >"$WORK/big.hlo"
mkdir -p "$WORK/in2"
inputs "$WORK/in2" $N $M
read -r -a IN <<<"$(args "$WORK/in2")"
expect_status 0 "$TESSEL" run "$WORK/big.hlo" --spmd "${IN[@]}" --output-dir "$WORK/big_alone"
check "$WORK/in2" "$WORK/big_alone" $N $M
for np in 2 8; do
    expect_status 0 mpi -np $np "$TESSEL" run "$WORK/big.hlo" --spmd "${IN[@]}" --output-dir "$WORK/big_$np" --stats
    same "$WORK/big_alone" "$WORK/big_$np" "under mpirun -np $np"
    cp "$ERR" "$WORK/stats$np"
done
# -np 2 above: the all-reduces of both ranks went through shared memory
# (coll/mpi_shm.c); a chunk size set (the default's) keeps them in MPI's
# pipeline: the same bits.
# The path each run took, from --stats: shared memory by default; a chunk
# size set, or Open MPI told to leave its shared memory out (--mca btl
# tcp,self: the ranks talk as separate hosts would), keep MPI's messages;
# 8 ranks on one host use it too.
expect_in "$WORK/stats2" "all-reduces through shared memory (every rank on one host): 3 on rank 0"
expect_in "$WORK/stats8" "all-reduces through shared memory (every rank on one host): 3 on rank 0"
expect_status 0 mpi -np 2 -x TESSEL_MPI_CHUNK_BYTES=524288 "$TESSEL" run "$WORK/big.hlo" --spmd "${IN[@]}" \
    --output-dir "$WORK/big_2_pipeline" --stats
same "$WORK/big_alone" "$WORK/big_2_pipeline" "under mpirun -np 2 in MPI's pipeline"
expect_in "$ERR" "all-reduces through shared memory (every rank on one host): 0 on rank 0"
expect_status 0 mpi -np 2 --mca btl tcp,self "$TESSEL" run "$WORK/big.hlo" --spmd "${IN[@]}" \
    --output-dir "$WORK/big_2_tcp" --stats
same "$WORK/big_alone" "$WORK/big_2_tcp" "under mpirun -np 2 over TCP"
expect_in "$ERR" "all-reduces through shared memory (every rank on one host): 0 on rank 0"

# ---- 3. bytes per rank, -np 8 ----
# reduce-scatter and all-to-all: 7/8 of the 256 KiB operand each way;
# all-gather: ag sends the 256 KiB block to 7 peers, ag_pairs to 1 (8 x
# 256 KiB).
expect_in "$WORK/stats8" "sent     reduce-scatter min 229376  median 229376  max 229376 bytes per rank"
expect_in "$WORK/stats8" "received reduce-scatter min 229376  median 229376  max 229376 bytes per rank"
expect_in "$WORK/stats8" "sent     all-to-all     min 229376  median 229376  max 229376 bytes per rank"
expect_in "$WORK/stats8" "received all-to-all     min 229376  median 229376  max 229376 bytes per rank"
expect_in "$WORK/stats8" "sent     all-gather     min 2097152  median 2097152  max 2097152 bytes per rank"

# ---- 4. streaming stores into bound results, on, off and measured ----
cat >"$WORK/agbig.hlo" <<'HLO'
HloModule agbig, num_partitions=2

ENTRY main {
  x = f32[2621447] parameter(0)
  ROOT g = f32[5242894] all-gather(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
}
HLO
AG=(run "$WORK/agbig.hlo" --spmd --per-device --random-inputs 5)
expect_status 0 env TESSEL_COLL_STREAM_BOUND=0 "$TESSEL" "${AG[@]}" --output-dir "$WORK/ag_ref"
for mode in 1 0 measured; do
    envs=() xs=() # measured: the variable unset
    [ $mode = measured ] || envs=(TESSEL_COLL_STREAM_BOUND=$mode) xs=(-x TESSEL_COLL_STREAM_BOUND=$mode)
    expect_status 0 env "${envs[@]}" "$TESSEL" "${AG[@]}" --steps 2 --output-dir "$WORK/ag_local_$mode"
    same "$WORK/ag_ref" "$WORK/ag_local_$mode" "in one process (TESSEL_COLL_STREAM_BOUND $mode)"
    expect_status 0 mpi -np 2 "${xs[@]}" "$TESSEL" "${AG[@]}" --steps 2 --output-dir "$WORK/ag_mpi_$mode"
    same "$WORK/ag_ref" "$WORK/ag_mpi_$mode" "under mpirun -np 2 (TESSEL_COLL_STREAM_BOUND $mode)"
done
