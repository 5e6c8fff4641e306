#!/usr/bin/env bash
# input_names.sh: the names an input binds by (docs/cli.md, "Input names"):
# the index, the HLO name, and the names JAX records: the argument name an
# HLO name like x.1 carries, the op_name of a compiled module's metadata,
# a pytree path as JAX prints it (params['w1'] for params__w1__.1); the
# same names through a plan file; a wrong name (status 2, the names that
# work listed nearest first) and an ambiguous one.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# As JAX 0.10.2 lowers f(x, params) with params = {'w1': ..., 'w2': ...}
# (jax.jit(f).lower(...).as_text("hlo")): x.1, params__w1__.1, params__w2__.1.
M="$WORK/lowered.hlo"
cat >"$M" <<'HLO'
HloModule jit_f, entry_computation_layout={(f32[2]{0}, f32[2]{0}, f32[2]{0})->f32[2]{0}}

ENTRY main.1 {
  x.1 = f32[2]{0} parameter(0)
  params__w1__.1 = f32[2]{0} parameter(1)
  params__w2__.1 = f32[2]{0} parameter(2)
  m = f32[2]{0} multiply(params__w1__.1, params__w2__.1)
  ROOT a = f32[2]{0} add(x.1, m)
}
HLO
npy_write "$WORK/one.npy" '<f4' 2 1 1
npy_write "$WORK/two.npy" '<f4' 2 2 2
npy_write "$WORK/ten.npy" '<f4' 2 10 10
# x + w1 * w2 = 1 + 2 * 10 = 21, whatever names bind them
for keys in "0 1 2" "x.1 params__w1__.1 params__w2__.1" "x params__w1__ params__w2__" \
            "x params['w1'] params['w2']" "x 1 params['w2']"; do
    set -- $keys
    expect_status 0 "$TESSEL" run "$M" --reference --input "$1=$WORK/one.npy" --input "$2=$WORK/two.npy" \
        --input "$3=$WORK/ten.npy"
    expect_in "$OUT" "output 0: f32[2] min 21 max 21 mean 21"
done
# the same names on a plan file, partitioned
expect_status 0 "$TESSEL" compile "$M" --num-partitions 2 -o "$WORK/lowered.plan"
expect_status 0 "$TESSEL" run "$WORK/lowered.plan" --input "x=$WORK/one.npy" --input "params['w1']=$WORK/two.npy" \
    --input "params__w2__.1=$WORK/ten.npy"
expect_in "$OUT" "output 0: f32[2] min 21 max 21 mean 21"

# a wrong name: status 2, the names that work, nearest first
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input "params['w3']=$WORK/one.npy"
expect_in "$ERR" "input params['w3']: no entry parameter has this name or index; the names that work, nearest first: params__w1__ (parameter 1), params__w2__ (parameter 2), params__w1__.1 (parameter 1), params__w2__.1 (parameter 2), x (parameter 0), x.1 (parameter 0); or an index 0..2"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input "y=$WORK/one.npy"
expect_in "$ERR" "nearest first: x (parameter 0), x.1 (parameter 0),"

# As XLA compiles it (.compile().as_text()): param, param.1 carrying
# JAX's names in metadata; and two pytree leaves JAX spells alike
# (p['a.b'] and p['a b'] are both p__a_b__).
C="$WORK/compiled.hlo"
cat >"$C" <<'HLO'
HloModule jit_g, entry_computation_layout={(f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0})->f32[2]{0}}

ENTRY main {
  param = f32[2]{0} parameter(0), metadata={op_name="x"}
  param.1 = f32[2]{0} parameter(1), metadata={op_name="params[\'w1\']"}
  p__a_b__.2 = f32[2]{0} parameter(2)
  p__a_b__.3 = f32[2]{0} parameter(3)
  m = f32[2]{0} multiply(param.1, p__a_b__.2)
  s = f32[2]{0} add(param, m)
  ROOT r = f32[2]{0} add(s, p__a_b__.3)
}
HLO
expect_status 0 "$TESSEL" run "$C" --reference --input "x=$WORK/one.npy" --input "params['w1']=$WORK/two.npy" \
    --input "p__a_b__.2=$WORK/ten.npy" --input "3=$WORK/one.npy"
expect_in "$OUT" "output 0: f32[2] min 22 max 22 mean 22"
# "param" is parameter 0's HLO name: an exact name wins over param.1's stem
expect_status 0 "$TESSEL" run "$C" --reference --input "param=$WORK/one.npy" --input "param.1=$WORK/two.npy" \
    --input "2=$WORK/ten.npy" --input "3=$WORK/one.npy"
expect_in "$OUT" "output 0: f32[2] min 22 max 22 mean 22"
expect_status 0 "$TESSEL" compile "$C" --num-partitions 2 -o "$WORK/compiled.plan"
expect_status 0 "$TESSEL" run "$WORK/compiled.plan" --input "x=$WORK/one.npy" --input "params['w1']=$WORK/two.npy" \
    --input "2=$WORK/ten.npy" --input "3=$WORK/one.npy"
expect_in "$OUT" "output 0: f32[2] min 22 max 22 mean 22"
# ambiguous: two parameters answer to p['a.b'] (and to the stem p__a_b__)
expect_status 2 "$TESSEL" run "$C" --reference --random-inputs 1 --input "p['a.b']=$WORK/one.npy"
expect_in "$ERR" "input p['a.b']: ambiguous: it is the name JAX records for parameter 2 (p__a_b__.2) and parameter 3 (p__a_b__.3); bind it by index or by HLO name"
# parameters named like each other's index: refused, not bound crosswise
# (--input 1=... bound the parameter named 1, parameter 0, silently)
cat >"$WORK/digits.hlo" <<'HLO'
HloModule digits
ENTRY main {
  %1 = f32[2] parameter(0)
  %0 = f32[2] parameter(1)
  ROOT r = f32[2] subtract(%1, %0)
}
HLO
expect_status 2 "$TESSEL" run "$WORK/digits.hlo" --input 1="$WORK/one.npy" --input 0="$WORK/two.npy"
expect_in "$ERR" "input 1: ambiguous: it is the HLO name of parameter 0 and the index of parameter 1"
expect_status 2 "$TESSEL" run "$C" --reference --random-inputs 1 --input "p__a_b__=$WORK/one.npy"
expect_in "$ERR" "ambiguous"
# the ambiguous stem is not offered as a name that works
expect_status 2 "$TESSEL" run "$C" --reference --random-inputs 1 --input "w1=$WORK/one.npy"
expect_in "$ERR" "nearest first: x (parameter 0), param (parameter 0), param.1 (parameter 1), params['w1'] (parameter 1), p__a_b__.2 (parameter 2), p__a_b__.3 (parameter 3); or an index 0..3"
echo "input_names: ok"
