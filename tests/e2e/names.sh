#!/usr/bin/env bash
# names.sh: one naming rule for parameters and "did you mean" (issue 31).
# `tessel grad --adam` names the state it appends after its parameter
# (m_w.1, v_w.1, t: docs/cli.md), those names bind it (--input m_w.1=...,
# a name with dots), and --init-state zeros starts it at zero: the first
# Adam step from zero state moves each weight by -lr * sign(grad) (worked
# out by hand: m = 0.1 g, v = 0.001 g^2, bias-corrected m/sqrt(v) = g/|g|),
# alone, from a plan and under mpirun -np 2. An unbound state is an error
# that says --init-state, not --random-inputs. A plan keeps the model's
# instruction names (Arg_0.1, parameter.12, dot.5), and --input
# parameter.12=FILE binds by it. Unknown options, commands, opcodes and
# inputs name the nearest valid one.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

cat >"$WORK/sq.hlo" <<'HLO'
HloModule sq, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[8] parameter(0), sharding={devices=[2]0,1}
  w.1 = f32[8] parameter(1), sharding={devices=[2]0,1}
  xw = f32[8] multiply(x, w.1)
  ww = f32[8] multiply(xw, w.1)
  zero = f32[] constant(0)
  ROOT loss = f32[] reduce(ww, zero), dimensions={0}, to_apply=add
}
HLO
# loss = sum(x w^2): dloss/dw = 2 x w
npy_write "$WORK/x.npy" '<f4' 8 1 2 3 4 5 6 7 8
npy_write "$WORK/w.npy" '<f4' 8 0.5 -1 2 -0.25 1 1 -3 0.125
expect_status 0 "$TESSEL" grad "$WORK/sq.hlo" --wrt w.1 --adam 0.01 -o "$WORK/step.hlo"
expect_in "$WORK/step.hlo" 'm_w.1 = f32[8] parameter(2), sharding={devices=[2]0,1}, frontend_attributes={tessel_state="zeros"}'
expect_in "$WORK/step.hlo" 'v_w.1 = f32[8] parameter(3)'
expect_in "$WORK/step.hlo" 't = f32[] parameter(4), frontend_attributes={tessel_state="zeros"}'
expect_status 0 "$TESSEL" grad "$WORK/sq.hlo" --wrt w.1 --jvp -o "$WORK/jvp.hlo"
expect_in "$WORK/jvp.hlo" 'tangent_w.1 = f32[8] parameter(2)'

# unbound state: the error names it and --init-state, never --random-inputs
expect_status 2 "$TESSEL" run "$WORK/step.hlo" --input x="$WORK/x.npy" --input w.1="$WORK/w.npy"
expect_in "$ERR" "no input for the optimizer state parameter 2 (m_w.1: f32[8]), parameter 3 (v_w.1: f32[8]), parameter 4 (t: f32[]); start it at zero with --init-state zeros"
grep -q -- "--random-inputs" "$ERR" && fail "the error for unbound optimizer state suggests --random-inputs"
expect_status 2 "$TESSEL" run "$WORK/step.hlo" --input x="$WORK/x.npy" --init-state ones
expect_in "$ERR" "--init-state is zeros"

# one Adam step from zero state: w - 0.01 sign(2 x w)
adam_one() { # DIR: output 1 is w after one step, output 4 is t = 1
    "$PY" - "$1" <<'PY' || fail "one Adam step from zero state in $1"
import numpy as np, sys
w = np.array([0.5, -1, 2, -0.25, 1, 1, -3, 0.125], np.float32)
want = w - 0.01 * np.sign(w)  # x > 0, so sign(2 x w) = sign(w)
got = np.load(sys.argv[1] + "/output_1.npy")
assert np.allclose(got, want, rtol=0, atol=1e-6), (got, want)
assert np.load(sys.argv[1] + "/output_4.npy") == 1
PY
}
IN=(--input x="$WORK/x.npy" --input w.1="$WORK/w.npy" --init-state zeros)
expect_status 0 "$TESSEL" run "$WORK/step.hlo" --reference "${IN[@]}" --output-dir "$WORK/ref"
adam_one "$WORK/ref"
expect_status 0 "$TESSEL" run "$WORK/step.hlo" "${IN[@]}" --output-dir "$WORK/part"
adam_one "$WORK/part"
expect_status 0 "$TESSEL" compile "$WORK/step.hlo" -o "$WORK/step.plan"
expect_in "$WORK/step.plan" 'tessel_state="zeros"'
expect_status 0 "$TESSEL" run "$WORK/step.plan" "${IN[@]}" --output-dir "$WORK/plan"
adam_one "$WORK/plan"
# bound by name (dots in it), the state is the file's: zeros from files equal --init-state
npy_write "$WORK/z8.npy" '<f4' 8 0 0 0 0 0 0 0 0
npy_write "$WORK/z.npy" '<f4' "" 0
expect_status 0 "$TESSEL" run "$WORK/step.hlo" --input x="$WORK/x.npy" --input w.1="$WORK/w.npy" --input m_w.1="$WORK/z8.npy" \
    --input v_w.1="$WORK/z8.npy" --input t="$WORK/z.npy" --steps 3 --output-dir "$WORK/files"
expect_status 0 "$TESSEL" run "$WORK/step.hlo" "${IN[@]}" --steps 3 --output-dir "$WORK/zeros"
for i in 0 1 2 3 4; do cmp -s "$WORK/files/output_$i.npy" "$WORK/zeros/output_$i.npy" || fail "output $i: zero files and --init-state differ"; done
# a typo in a state name: the nearest names first
expect_status 2 "$TESSEL" run "$WORK/step.hlo" "${IN[@]}" --input m_w1="$WORK/z8.npy"
expect_in "$ERR" "input m_w1: no entry parameter has this name or index; did you mean m_w? the names that work, nearest first: m_w (parameter 2), m_w.1 (parameter 2)"
if command -v mpirun >/dev/null 2>&1; then
    expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run "$WORK/step.hlo" "${IN[@]}" --output-dir "$WORK/mpi" </dev/null
    adam_one "$WORK/mpi"
fi
echo "names: Adam state m_w.1, v_w.1, t; --init-state zeros: one step moves w by -lr sign(g) (reference, partitioned, plan, mpirun)"

# ---- a plan keeps the model's names ----
cat >"$WORK/names.hlo" <<'HLO'
HloModule names, num_partitions=2

ENTRY main {
  Arg_0.1 = f32[4,2] parameter(0), sharding={devices=[2,1]0,1}
  parameter.12 = f32[2,2] parameter(1), sharding={replicated}
  dot.5 = f32[4,2] dot(Arg_0.1, parameter.12), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT tanh.7 = f32[4,2] tanh(dot.5)
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/names.hlo" -o "$WORK/names.plan"
expect_in "$WORK/names.plan" "dot.5 = f32[2,2] dot(Arg_0.1, parameter.12)"
expect_in "$WORK/names.plan" "ROOT tanh.7 = f32[2,2] tanh(dot.5)"
npy_write "$WORK/a.npy" '<f4' 4,2 1 2 3 4 5 6 7 8
npy_write "$WORK/i.npy" '<f4' 2,2 1 0 0 1
expect_status 0 "$TESSEL" run "$WORK/names.plan" --input Arg_0.1="$WORK/a.npy" --input parameter.12="$WORK/i.npy" \
    --output-dir "$WORK/nm"
"$PY" -c "
import numpy as np, sys
a = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
assert np.allclose(np.load(sys.argv[1]), np.tanh(a), atol=1e-6)" "$WORK/nm/output_0.npy" || fail "tanh(a . I)"
# get-tuple-elements keep theirs too, in called computations as in the entry
expect_status 0 "$TESSEL" compile "$TESSEL_SRC/examples/while_loop.hlo" -o "$WORK/while.plan"
expect_in "$WORK/while.plan" "bacc = f32[4]{0} get-tuple-element(bs), index=1"
expect_in "$WORK/while.plan" "acc = f32[4]{0} get-tuple-element(loop), index=1"
echo "names: a plan keeps dot.5, tanh.7, bacc; --input parameter.12=FILE binds it"

# ---- did you mean ----
expect_status 2 "$TESSEL" run "$WORK/names.hlo" --stpes 3
expect_in "$ERR" "unknown option '--stpes' for 'tessel run'; did you mean --steps?"
expect_status 2 "$TESSEL" compil "$WORK/names.hlo"
expect_in "$ERR" "unknown command 'compil'; did you mean compile?"
sed 's/ tanh(dot.5)/ tnh(dot.5)/' "$WORK/names.hlo" >"$WORK/typo.hlo"
expect_status 2 "$TESSEL" check "$WORK/typo.hlo"
expect_in "$ERR" "typo.hlo:7:26: error: unknown opcode 'tnh'; did you mean tanh?"
expect_status 2 "$TESSEL" run "$WORK/names.hlo" --random-inputs 1 --frobnicate
grep -q "did you mean" "$ERR" && fail "a hint for an option nothing is near"
echo "names: ok"
