#!/usr/bin/env bash
# allreduce_add.sh: an all-reduce whose one reader is an add of a value of
# its shape takes that add in (ir/allreduce_add.c, docs/cli.md): the add
# has no row of its own in --stats=ops (its time is the all-reduce's),
# and the outputs are bit for bit those of the run that does not fold
# (TESSEL_FUSION=off runs every instruction on its own): 2 and 4 devices
# in one process (the in-host split path writes sum + addend in one pass;
# 4 devices with 2 replicas: two groups of 2 on the host), under mpirun
# with one device a rank (the result across hosts, then the add) and two
# (groups spanning hosts). An all-reduce read twice keeps its add apart.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self)

same_bits() { # same_bits DIR_A DIR_B WHAT: both outputs byte for byte
    for k in 0 1; do
        cmp -s "$1/output_$k.npy" "$2/output_$k.npy" || fail "$3: output $k differs from the unfolded run"
    done
}

no_add_rows() { # no_add_rows FILE WHAT: r, r2 and z ran inside their all-reduces
    grep -qE "tessel: stats:   all-reduce[^ ]* +all-reduce +f32\[17,24\] " "$1" || fail "$2: no all-reduce row"
    ! grep -qE "tessel: stats:   (r|r2|z) +add " "$1" || fail "$2: an add ran on its own: $(grep -E ' add ' "$1")"
}

for n in 2 4; do
    m=$(instantiate "$TESSEL_SRC/tests/models/allreduce_add.hlo" $n)
    for r in 1 2; do
        [ $((n * r)) -le 4 ] || continue
        expect_status 0 "$TESSEL" run "$m" --num-replicas $r --random-inputs 5 --steps 2 --stats=ops \
            --output-dir "$WORK/fold.$n.$r"
        no_add_rows "$ERR" "$n devices x $r replicas"
        expect_status 0 env TESSEL_FUSION=off "$TESSEL" run "$m" --num-replicas $r --random-inputs 5 --steps 2 \
            --stats=ops --output-dir "$WORK/apart.$n.$r"
        grep -qE "tessel: stats:   r +add +f32\[17,24\] " "$ERR" || fail "fusion off: the add r has no row"
        same_bits "$WORK/fold.$n.$r" "$WORK/apart.$n.$r" "$n devices x $r replicas"
    done
    expect_status 0 "$TESSEL" run "$m" --reference --random-inputs 5 --output-dir "$WORK/ref.$n"
    same_outputs "$WORK/ref.$n" "$WORK/fold.$n.1" "$n devices"
done

# ---- under mpirun: one device a rank, then two ----
for n in 2 4; do
    m=$(instantiate "$TESSEL_SRC/tests/models/allreduce_add.hlo" $n)
    expect_status 0 "$TESSEL" compile "$m" --hosts 2 -o "$WORK/m.$n.plan"
    expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/m.$n.plan" --random-inputs 5 --steps 2 --stats=ops \
        --output-dir "$WORK/mpi.$n"
    no_add_rows "$ERR" "mpirun, $n devices"
    expect_status 0 "${MPIRUN[@]}" -np 2 env TESSEL_FUSION=off "$TESSEL" run "$WORK/m.$n.plan" --random-inputs 5 \
        --steps 2 --output-dir "$WORK/mpi_apart.$n"
    same_bits "$WORK/mpi.$n" "$WORK/mpi_apart.$n" "mpirun, $n devices"
done

# ---- an all-reduce read twice: its adds run on their own ----
cat >"$WORK/twice.hlo" <<'HLO'
HloModule twice, num_partitions=2

ENTRY main {
  x = f32[8,16] parameter(0), sharding={replicated}
  w = f32[16,16] parameter(1), sharding={devices=[2,1]0,1}
  xs = f32[8,16] parameter(2), sharding={devices=[1,2]0,1}
  s = f32[8,16] dot(xs, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  a = f32[8,16] add(x, s), sharding={replicated}
  b = f32[8,16] multiply(s, a), sharding={replicated}
  ROOT t = (f32[8,16], f32[8,16]) tuple(a, b)
}
HLO
expect_status 0 "$TESSEL" run "$WORK/twice.hlo" --random-inputs 5 --steps 2 --stats=ops --output-dir "$WORK/twice"
grep -qE "tessel: stats:   a +add +f32\[8,16\] " "$ERR" || fail "an all-reduce read twice: its add was taken in"
echo "allreduce_add: ok"
