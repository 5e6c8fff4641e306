#!/usr/bin/env bash
# reduce_general.sh: reduces whose reducer is not one opcode, over a dim
# split unevenly (13 columns on 1 to 8 devices), are partitioned, not
# gathered: tests/models/reduce_general.hlo's argmax (a variadic reduce of
# value/index pairs) and (a+1)(b+1)-1 on s32 from init 5 (not its
# identity) reduce each device's shard and all-gather only the partial
# results and their "valid" flags (partition/spmd_reduce.c). Every result,
# in one process and under mpirun on 2 and 4 ranks over TCP, is checked
# against NumPy (argmax: the first index of the maximum; mix: init 5
# counted once).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
mpi() { env ASAN_OPTIONS="$MPI_ASAN" timeout 180 mpirun --oversubscribe --mca btl tcp,self "$@" </dev/null; }

"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
rng = np.random.default_rng(7)
x = rng.integers(-4, 5, (5, 13)).astype(np.float32)   # ties: the first index wins
k = rng.integers(-2**31, 2**31, (3, 13, 2), dtype=np.int64).astype(np.int32)
np.save(f"{w}/x.npy", x)
np.save(f"{w}/k.npy", k)
np.save(f"{w}/want0.npy", x.max(axis=1))
np.save(f"{w}/want1.npy", x.argmax(axis=1).astype(np.int32))
# (a+1)(b+1)-1 over all 26 values of a row from init 5, modulo 2^32
m = np.full(3, 6, dtype=np.uint64)
for v in k.reshape(3, -1).T:
    m = (m * ((v.astype(np.int64) + 1) % 2**32).astype(np.uint64)) % 2**32
np.save(f"{w}/want2.npy", (m - 1 + 2**32).astype(np.uint64).astype(np.uint32).view(np.int32))
PY

check() { # DIR WHAT: DIR's outputs equal NumPy's
    for j in 0 1 2; do
        npy_match "$WORK/want$j.npy" "$1/output_$j.npy" || fail "$2: output $j differs from NumPy"
    done
}

for n in 1 2 3 4 5 8; do
    m=$(instantiate "$TESSEL_SRC/tests/models/reduce_general.hlo" "$n")
    expect_status 0 "$TESSEL" compile "$m" -o "$WORK/p$n.plan"
    if [ "$n" -gt 1 ]; then
        grep -q '^// TesselFallback' "$WORK/p$n.plan" && fail "$n devices: a fallback"
        # argmax: value, index, flag; mix: value, flag. Never the inputs.
        [ "$(grep -c '^// TesselCollective .* all-gather ' "$WORK/p$n.plan")" = 5 ] ||
            fail "$n devices: expected 5 all-gathers of partial results and flags"
        grep -q '^// TesselCollective .* all-reduce ' "$WORK/p$n.plan" && fail "$n devices: an all-reduce"
    fi
    expect_status 0 "$TESSEL" run "$m" --input x="$WORK/x.npy" --input k="$WORK/k.npy" --output-dir "$WORK/o$n"
    check "$WORK/o$n" "$n devices in one process"
done
for h in 2 4; do
    expect_status 0 "$TESSEL" compile "$WORK/reduce_general.8.hlo" --hosts "$h" -o "$WORK/h$h.plan"
    mpi -np "$h" "$TESSEL" run "$WORK/h$h.plan" --input x="$WORK/x.npy" --input k="$WORK/k.npy" \
        --output-dir "$WORK/m$h" || fail "mpirun -np $h failed"
    check "$WORK/m$h" "8 devices on $h ranks"
done
echo "reduce_general: ok"
