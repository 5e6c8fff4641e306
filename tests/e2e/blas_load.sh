#!/usr/bin/env bash
# blas_load.sh: OpenBLAS is loaded only by processes that execute
# (device/blas.c): its constructor starts a thread pool that spins, which
# check, compile and plan must not pay. The glibc loader's own trace
# (LD_DEBUG=files) names every library a process loads: check, compile and
# plan of a model with a dot load no libopenblas; a run of it does, and
# gets the GEMM's values (2x2 . 2x2 on known inputs).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

cat >"$WORK/dot.hlo" <<'HLO'
HloModule dot, num_partitions=2
ENTRY e {
  a = f32[2,2] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[2,2] parameter(1), sharding={replicated}
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
HLO

loads_blas() { grep -q 'file=[^ ]*libopenblas' "$ERR"; }

for cmd in "check $WORK/dot.hlo" "compile $WORK/dot.hlo -o $WORK/dot.plan" "plan $WORK/dot.hlo -o $WORK/dot.txt"; do
    # shellcheck disable=SC2086
    expect_status 0 env LD_DEBUG=files "$TESSEL" $cmd
    ! loads_blas || fail "tessel $cmd loaded OpenBLAS: $(grep -m1 libopenblas "$ERR")"
done

npy_write "$WORK/a.npy" "<f4" 2,2 1 2 3 4
npy_write "$WORK/b.npy" "<f4" 2,2 5 6 7 8
expect_status 0 env LD_DEBUG=files "$TESSEL" run "$WORK/dot.hlo" --input 0="$WORK/a.npy" --input 1="$WORK/b.npy" \
    --output-dir "$WORK/out"
loads_blas || fail "tessel run of a dot did not load OpenBLAS"
"$PY" - "$WORK/out/output_0.npy" <<'PY'
import sys
import numpy as np
got = np.load(sys.argv[1])
want = np.array([[19, 22], [43, 50]], np.float32)
assert (got == want).all(), got
PY
echo "blas_load: ok"
