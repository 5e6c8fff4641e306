#!/usr/bin/env bash
# window_cost.sh: the partitioner's cost model for windowed dots
# (partition/spmd_dot.c, window_pays) and `--link-gbps G`, which tells it
# the links between hosts. The model: y = a . W2 with the contracting dim
# sharded over n devices is cut into K = 4 chunks where
#   (K-1)/K * (B / LINK - B / COMM_CPU) > ((K-1) W + R) / PACK + K CHUNK
# with R the local result's bytes, B = 2 R (n-1)/n, W the local rhs bytes,
# COMM_CPU 1000 B/us, PACK 10000 B/us, CHUNK 50 us, LINK 125 G B/us.
#
# Worked out by hand for a[256,512] . W2[512,1024] over 2 devices: R = W =
# 256 * 1024 * 4 = 1048576, B = R; the right side is 4 * 1048576 / 10000
# + 200 = 619.43 us, so windowing needs B / LINK - 1048.576 > 825.91, i.e.
# LINK < 1048576 / 1874.49 = 559.4 B/us: G < 4.475. So 4.4 windows, 4.5
# and the default 10 do not. Windowed or not, every run equals
# --reference (the oracle), in one process on 2 and 3 devices (3: the
# contracting dim 512 cut unevenly) and under mpirun -np 2 over TCP; a bad
# --link-gbps is a usage error (exit 2) that writes nothing.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)

model() { # model N: the MLP's second half over N devices
    cat <<HLO
HloModule window_cost, num_partitions=$1

ENTRY main {
  x = f32[256,1024] parameter(0), sharding={replicated}
  w1 = f32[1024,512] parameter(1), sharding={devices=[1,$1]<=[$1]}
  w2 = f32[512,1024] parameter(2), sharding={devices=[$1,1]<=[$1]}
  h = f32[256,512] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[256,512] tanh(h)
  ROOT y = f32[256,1024] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
HLO
}

starts() { # starts PLAN: the plan's all-reduce-starts
    grep -c ' all-reduce-start(' "$1" || true
}

model 2 >"$WORK/m2.hlo"
model 3 >"$WORK/m3.hlo"

for g in default 10 4.5 4.4 1; do
    args=()
    [ $g = default ] || args=(--link-gbps $g)
    expect_status 0 "$TESSEL" compile "$WORK/m2.hlo" "${args[@]}" -o "$WORK/p_$g.plan"
    n=$(starts "$WORK/p_$g.plan")
    case $g in
    4.4 | 1) [ "$n" = 4 ] || fail "--link-gbps $g: $n all-reduce-starts, the model windows into 4 chunks" ;;
    *) [ "$n" = 0 ] || fail "--link-gbps $g: $n all-reduce-starts, the model does not window" ;;
    esac
done
# tessel plan and tessel run take it too (the same compile): the plan
# lists the four chunks' all-reduces, a quarter of the result each.
expect_status 0 "$TESSEL" plan "$WORK/m2.hlo" --link-gbps 1 --format text
[ "$(grep -c 'all-reduce .*262144 bytes per device' "$OUT")" = 4 ] || fail "plan --link-gbps 1: not 4 chunks"
expect_status 0 "$TESSEL" plan "$WORK/m2.hlo" --format text
[ "$(grep -c 'all-reduce .*1048576 bytes per device' "$OUT")" = 1 ] || fail "plan: not one all-reduce"

for n in 2 3; do
    expect_status 0 "$TESSEL" run "$WORK/m$n.hlo" --reference --random-inputs 5 --output-dir "$WORK/ref$n"
    for g in 10 1; do
        expect_status 0 "$TESSEL" run "$WORK/m$n.hlo" --link-gbps $g --random-inputs 5 --output-dir "$WORK/got${n}_$g" \
            --dump-dir "$WORK/dump${n}_$g"
        same_outputs "$WORK/ref$n" "$WORK/got${n}_$g" "$n devices, --link-gbps $g"
    done
    # The windowed program is the one that ran.
    grep -q ' all-reduce-start(' "$WORK/dump${n}_1/"*after_spmd_partition.hlo ||
        fail "$n devices, --link-gbps 1: the partitioned module has no all-reduce-start"
done
expect_status 0 "$TESSEL" compile "$WORK/m2.hlo" --link-gbps 1 --hosts 2 -o "$WORK/h2.plan"
expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" mpirun -np 2 --oversubscribe --mca btl tcp,self \
    "$TESSEL" run "$WORK/h2.plan" --random-inputs 5 --output-dir "$WORK/mpi" </dev/null
same_outputs "$WORK/ref2" "$WORK/mpi" "mpirun -np 2 over TCP, --link-gbps 1"

for bad in 0 -1 abc 1e7 nan; do
    expect_status 2 "$TESSEL" compile "$WORK/m2.hlo" --link-gbps "$bad" -o "$WORK/bad.plan"
    case $bad in
    1e7) expect_in "$ERR" "--link-gbps 1e7 is too large: the largest is 1000000" ;;
    *) expect_in "$ERR" "--link-gbps needs a bandwidth in Gb/s" ;;
    esac
    [ ! -e "$WORK/bad.plan" ] || fail "--link-gbps $bad: a plan was written"
done
echo "window_cost: ok"
