#!/usr/bin/env bash
# reduce_scatter.sh: partial sums that end sharded are reduce-scattered
# (partition/spmd_partial.c), and every such plan still computes what the
# unpartitioned module does (the oracle: `tessel run --num-partitions N`
# equals `--reference`), in one process on 2, 3, 4 and 8 devices with
# uneven shapes, and under mpirun -np 2 over TCP. The collectives' kinds,
# groups and bytes worked out by hand are tests/unit/test_spmd_partial.c;
# here each plan must hold a reduce-scatter, and the issue's dot its
# figure: 128 bytes per device where the all-reduce and slice took 256.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)

# rows N: the dot y[11,8] = a[11,13] . b[13,8], the contracting dim (13,
# uneven) tiled on N devices, y in N row tiles (11, uneven).
rows() {
    cat <<HLO
HloModule rows, num_partitions=$1

ENTRY main {
  a = f32[11,13] parameter(0), sharding={devices=[1,$1]<=[$1]}
  b = f32[13,8] parameter(1), sharding={devices=[$1,1]<=[$1]}
  ROOT y = f32[11,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[$1,1]<=[$1]}
}
HLO
}

# mesh D M: data x model mesh; x[10,13] batch on data, contracting on
# model; w[13,9] contracting on model; y batch on data, columns on model.
mesh() {
    cat <<HLO
HloModule mesh, num_partitions=$(($1 * $2))

ENTRY main {
  x = f32[10,13] parameter(0), sharding={devices=[$1,$2]<=[$(($1 * $2))]}
  w = f32[13,9] parameter(1), sharding={devices=[$2,1,$1]<=[$1,$2]T(1,0) last_tile_dim_replicate}
  ROOT y = f32[10,9] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[$1,$2]<=[$(($1 * $2))]}
}
HLO
}

# partial N: the contracting dim on N devices, y in 2 row tiles each on
# N/2 devices (reduce-scatter, then all-reduce over the copies).
partial() {
    cat <<HLO
HloModule partial, num_partitions=$1

ENTRY main {
  a = f32[9,16] parameter(0), sharding={devices=[1,$1]<=[$1]}
  b = f32[16,6] parameter(1), sharding={devices=[$1,1]<=[$1]}
  ROOT y = f32[9,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1,$(($1 / 2))]<=[$1] last_tile_dim_replicate}
}
HLO
}

# reduce N: a sum over the sharded dim 1 of x[9,14] whose result ends in N
# tiles; then a Megatron-like chain on it (tanh, a second reduce).
reduce() {
    cat <<HLO
HloModule reduce, num_partitions=$1

add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}

ENTRY main {
  x = f32[9,14] parameter(0), sharding={devices=[1,$1]<=[$1]}
  z = f32[] constant(0)
  r = f32[9] reduce(x, z), dimensions={1}, to_apply=add, sharding={devices=[$1]<=[$1]}
  t = f32[9] tanh(r)
  ROOT u = (f32[9], f32[]) tuple(t, z)
}
HLO
}

# wide N: an f16 sum over a sharded dim whose partials travel in f32
# (spmd_reduce.c's wide_sum), reduce-scattered into N tiles.
wide() {
    cat <<HLO
HloModule wide, num_partitions=$1

add {
  p = f16[] parameter(0)
  q = f16[] parameter(1)
  ROOT s = f16[] add(p, q)
}

ENTRY main {
  x = f16[10,12] parameter(0), sharding={devices=[1,$1]<=[$1]}
  z = f16[] constant(0.5)
  ROOT r = f16[10] reduce(x, z), dimensions={1}, to_apply=add, sharding={devices=[$1]<=[$1]}
}
HLO
}

# mlp N: x replicated, w1 column-, w2 row-sharded, the output in rows:
# the second dot's partial sums are reduce-scattered.
mlp() {
    cat <<HLO
HloModule mlp, num_partitions=$1

ENTRY main {
  x = f32[12,10] parameter(0), sharding={replicated}
  w1 = f32[10,20] parameter(1), sharding={devices=[1,$1]<=[$1]}
  w2 = f32[20,10] parameter(2), sharding={devices=[$1,1]<=[$1]}
  h = f32[12,20] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[12,20] tanh(h)
  ROOT y = f32[12,10] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[$1,1]<=[$1]}
}
HLO
}

# oracle NAME FILE: the plan holds a reduce-scatter; the run equals the
# reference on seeded random inputs.
oracle() {
    expect_status 0 "$TESSEL" plan "$2" --format text
    grep -q 'reduce-scatter .*bytes per device' "$OUT" || fail "$1: no reduce-scatter in the plan"
    expect_status 0 "$TESSEL" run "$2" --reference --random-inputs 3 --output-dir "$WORK/ref.$1"
    expect_status 0 "$TESSEL" run "$2" --random-inputs 3 --output-dir "$WORK/got.$1"
    same_outputs "$WORK/ref.$1" "$WORK/got.$1" "$1"
}

for n in 2 3 4 8; do
    rows $n >"$WORK/rows$n.hlo"
    oracle rows$n "$WORK/rows$n.hlo"
    reduce $n >"$WORK/reduce$n.hlo"
    oracle reduce$n "$WORK/reduce$n.hlo"
    wide $n >"$WORK/wide$n.hlo"
    oracle wide$n "$WORK/wide$n.hlo"
    mlp $n >"$WORK/mlp$n.hlo"
    oracle mlp$n "$WORK/mlp$n.hlo"
done
for n in 2 4 8; do
    partial $n >"$WORK/partial$n.hlo"
    oracle partial$n "$WORK/partial$n.hlo"
done
mesh 2 2 >"$WORK/mesh22.hlo"
oracle mesh22 "$WORK/mesh22.hlo"
mesh 2 4 >"$WORK/mesh24.hlo"
oracle mesh24 "$WORK/mesh24.hlo"
mesh 4 2 >"$WORK/mesh42.hlo"
oracle mesh42 "$WORK/mesh42.hlo"

# The issue's figure: f32[8,8] partial sums on 2 devices, 128 bytes each.
cat >"$WORK/issue.hlo" <<'HLO'
HloModule issue, num_partitions=2

ENTRY main {
  a = f32[8,16] parameter(0), sharding={devices=[1,2]0,1}
  b = f32[16,8] parameter(1), sharding={devices=[2,1]0,1}
  ROOT y = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}
}
HLO
expect_status 0 "$TESSEL" plan "$WORK/issue.hlo" --format json
"$PY" - "$OUT" <<'PY' || fail "issue dot: not one reduce-scatter of 128 bytes"
import json, sys
c = json.load(open(sys.argv[1]))["clusters"][0]["collectives"]
assert [(x["opcode"], x["replica_groups"], x["bytes_per_device"]) for x in c] == \
    [("reduce-scatter", "{{0,1}}", 128)], c
PY
oracle issue "$WORK/issue.hlo"

# Under mpirun: 2 ranks over TCP, 2 devices each (the groups cross hosts).
for m in rows4 mesh22 partial4; do
    expect_status 0 "$TESSEL" compile "$WORK/$m.hlo" --hosts 2 -o "$WORK/$m.plan"
    expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" mpirun -np 2 --oversubscribe --mca btl tcp,self \
        "$TESSEL" run "$WORK/$m.plan" --random-inputs 3 --output-dir "$WORK/mpi.$m" </dev/null
    same_outputs "$WORK/ref.$m" "$WORK/mpi.$m" "$m under mpirun -np 2"
done
echo "reduce_scatter: ok"
