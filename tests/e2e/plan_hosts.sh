#!/usr/bin/env bash
# plan_hosts.sh: a plan's hosts as docs/cli.md says (issue 31). A plan
# compiled for 2 hosts runs without mpirun too, this process running all
# its devices, with the reference's results (examples/mlp.hlo: y =
# tanh(x W1) W2, checked against NumPy); under mpirun with another number
# of ranks every rank stops, status 2, saying what to do (mpirun -np 2, or
# compile again with --hosts N; for a model, --hosts against mpirun's count).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MLP="$TESSEL_SRC/examples/mlp.hlo"

expect_status 0 "$TESSEL" compile "$MLP" --hosts 2 -o "$WORK/two.plan"
[ -s "$OUT" ] && fail "compile -o printed on stdout"
"$PY" - "$WORK" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(5)
for name, shape in (("x", (8, 16)), ("w1", (16, 32)), ("w2", (32, 8))):
    np.save("%s/%s.npy" % (sys.argv[1], name), rng.standard_normal(shape).astype(np.float32))
PY
IN=(--input x="$WORK/x.npy" --input w1="$WORK/w1.npy" --input w2="$WORK/w2.npy")
expect_status 0 "$TESSEL" run "$WORK/two.plan" "${IN[@]}" --output-dir "$WORK/alone"
"$PY" - "$WORK" <<'PY' || fail "a 2-host plan run in one process is not tanh(x W1) W2"
import numpy as np, sys
x, w1, w2 = (np.load("%s/%s.npy" % (sys.argv[1], n)).astype(np.float64) for n in ("x", "w1", "w2"))
y = np.load(sys.argv[1] + "/alone/output_0.npy")
assert np.allclose(y, np.tanh(x @ w1) @ w2, rtol=1e-5, atol=1e-5)
PY
if command -v mpirun >/dev/null 2>&1; then
    expect_status 2 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 1 \
        "$TESSEL" run "$WORK/two.plan" "${IN[@]}" </dev/null
    expect_in "$ERR" 'the plan was compiled for 2 hosts, but mpirun started 1: run it with `mpirun -np 2`, or compile it again with `tessel compile --hosts 1`'
    expect_status 2 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run "$MLP" --hosts 3 "${IN[@]}" </dev/null
    expect_in "$ERR" 'rank 0: --hosts asks for 3 hosts, but mpirun started 2: run `mpirun -np 3`, or drop --hosts'
    expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run "$WORK/two.plan" "${IN[@]}" --output-dir "$WORK/mpi" </dev/null
    same_outputs "$WORK/alone" "$WORK/mpi" "the 2-host plan under mpirun -np 2"
fi
echo "plan_hosts: ok"
