#!/usr/bin/env bash
# steps_tuple_alias.sh: --steps with aliases naming leaves of a tuple
# parameter (issue 32), the shape JAX and tessel grad give a tuple-shaped
# optimizer state: input_output_alias={ {0}: (0, {0}), {1}: (0, {1}) }.
#  1. p = (w, m, c) and x; the step writes w' = w - c*(m + w*x),
#     m' = m + w*x and g = w*x; w and m are aliased, c is not: the next
#     step's p is (w', m', c), c the same input again (as JAX feeds a
#     donated pytree's unaliased leaves). c's last read (c * m') is where
#     a donated tuple's leaf may be written over: the step loop keeps it.
#     3 steps on 1, 2 and 4 devices and under mpirun -np 2 (compile
#     --hosts 2, a plan) equal --reference --steps 3, equal 3 reference
#     steps fed by hand (outputs bound with --input 0.0, 0.1), equal NumPy.
#  2. A nested tuple p = ((w, m), c) with the pair {0}: (0, {0}) (the
#     inner tuple whole): the same answer on 2 devices.
#  3. With host work (a tessel_print between the device clusters) the host
#     program feeds the pair {0}: (0, {0}) of p = (w, c): 3 steps equal 3
#     reference steps fed by hand, with the same prints.
#  4. Bad pairs are refused before anything runs, status 2, at the pair's
#     line and column: shapes that differ, an index the parameter does not
#     have, a value named twice (the tuple whole and a leaf of it), a leaf
#     sharded unlike its output.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/tuple_alias.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# The inputs and NumPy's 3 steps (elementwise f32: no reduction order).
"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
r = np.random.default_rng(32)
w, m, c, x = (r.uniform(-1, 1, (64, 32)).astype(np.float32) for _ in range(4))
for name, v in (("w", w), ("m", m), ("c", c), ("x", x)):
    np.save("%s/%s.npy" % (d, name), v)
for _ in range(3):
    g = w * x
    m = m + g
    w = w - c * m
import os
os.makedirs(d + "/np", exist_ok=True)
for i, v in enumerate((w, m, g)):
    np.save("%s/np/output_%d.npy" % (d, i), v)
PY
IN=(--input 0.0="$WORK/w.npy" --input 0.1="$WORK/m.npy" --input 0.2="$WORK/c.npy" --input 1="$WORK/x.npy")

# 1. three reference steps fed by hand: the oracle independent of --steps
step_model 1 "$WORK/s1.hlo"
cp "$WORK/w.npy" "$WORK/h.w.npy"
cp "$WORK/m.npy" "$WORK/h.m.npy"
for s in 1 2 3; do
    expect_status 0 "$TESSEL" run "$WORK/s1.hlo" --reference --input 0.0="$WORK/h.w.npy" --input 0.1="$WORK/h.m.npy" \
        --input 0.2="$WORK/c.npy" --input 1="$WORK/x.npy" --output-dir "$WORK/hand$s"
    cp "$WORK/hand$s/output_0.npy" "$WORK/h.w.npy"
    cp "$WORK/hand$s/output_1.npy" "$WORK/h.m.npy"
done
same_outputs "$WORK/np" "$WORK/hand3" "3 reference steps fed by hand against NumPy"
expect_status 0 "$TESSEL" run "$WORK/s1.hlo" --reference --steps 3 "${IN[@]}" --output-dir "$WORK/ref3"
same_outputs "$WORK/hand3" "$WORK/ref3" "--reference --steps 3"
for n in 1 2 4; do
    step_model "$n" "$WORK/s$n.hlo"
    expect_status 0 "$TESSEL" run "$WORK/s$n.hlo" --steps 3 "${IN[@]}" --output-dir "$WORK/p$n"
    same_outputs "$WORK/hand3" "$WORK/p$n" "--steps 3 on $n device(s)"
done
expect_status 0 "$TESSEL" compile "$WORK/s2.hlo" --hosts 2 -o "$WORK/s2.plan"
expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2 \
    "$TESSEL" run "$WORK/s2.plan" --steps 3 "${IN[@]}" --output-dir "$WORK/mpi"
same_outputs "$WORK/hand3" "$WORK/mpi" "--steps 3 under mpirun -np 2"
echo "steps_tuple_alias: leaf pairs of a tuple parameter, c unaliased: 3 steps on 1, 2, 4 devices and mpirun -np 2 equal 3 reference steps by hand and NumPy"

# 2. the inner tuple of p = ((w, m), c) aliased whole
nested_model "$WORK/s2.hlo" "$WORK/nested.hlo"
expect_status 0 "$TESSEL" run "$WORK/nested.hlo" --steps 3 "${IN[@]}" --output-dir "$WORK/nested"
same_outputs "$WORK/hand3" "$WORK/nested" "the inner tuple aliased whole, --steps 3 on 2 devices"
expect_status 0 "$TESSEL" run "$WORK/nested.hlo" --reference --steps 3 "${IN[@]}" --output-dir "$WORK/nested.r"
same_outputs "$WORK/hand3" "$WORK/nested.r" "the inner tuple aliased whole, --reference --steps 3"

# 3. host work: the host program's steps
cat >"$WORK/host.hlo" <<'HLO'
HloModule host_tuple_steps, input_output_alias={ {0}: (0, {0}, may-alias) }, num_partitions=2

ENTRY main {
  p = (f32[64,32], f32[64,32]) parameter(0), sharding={{devices=[2,1]0,1}, {replicated}}
  x = f32[64,32] parameter(1), sharding={replicated}
  w = f32[64,32] get-tuple-element(p), index=0
  c = f32[64,32] get-tuple-element(p), index=1
  a = f32[64,32] multiply(w, x)
  shown = f32[64,32] custom-call(a), custom_call_target="tessel_print"
  b = f32[64,32] multiply(shown, c)
  w1 = f32[64,32] add(b, w)
  ROOT r = (f32[64,32], f32[64,32]) tuple(w1, a)
}
HLO
cp "$WORK/w.npy" "$WORK/h.w.npy"
: >"$WORK/host.hand.txt"
for s in 1 2 3; do
    expect_status 0 "$TESSEL" run "$WORK/host.hlo" --reference --input 0.0="$WORK/h.w.npy" --input 0.1="$WORK/c.npy" \
        --input 1="$WORK/x.npy" --output-dir "$WORK/hh$s"
    cat "$OUT" >>"$WORK/host.hand.txt"
    cp "$WORK/hh$s/output_0.npy" "$WORK/h.w.npy"
done
expect_status 0 "$TESSEL" run "$WORK/host.hlo" --steps 3 --input 0.0="$WORK/w.npy" --input 0.1="$WORK/c.npy" \
    --input 1="$WORK/x.npy" --output-dir "$WORK/hp"
same_outputs "$WORK/hh3" "$WORK/hp" "host work, --steps 3"
grep '^shown' "$WORK/host.hand.txt" >"$WORK/host.hand.shown"
grep '^shown' "$OUT" >"$WORK/host.shown"
[ "$(wc -l <"$WORK/host.shown")" = 3 ] && cmp -s "$WORK/host.hand.shown" "$WORK/host.shown" ||
    fail "host work, --steps 3: prints $(cat "$WORK/host.shown"), by hand $(cat "$WORK/host.hand.shown")"

# 4. bad pairs: status 2 at the pair
bad() { # bad ALIASES TEXT [RUN OPTIONS]: the pairs ALIASES refused with TEXT
    local al=$1 text=$2
    shift 2
    sed "1s/input_output_alias={.*}/input_output_alias={ $al }/" "$WORK/s2.hlo" >"$WORK/bad.hlo"
    expect_status 2 "$TESSEL" run "$WORK/bad.hlo" --steps 2 --random-inputs 1 "$@"
    expect_in "$ERR" "$text"
    expect_in "$ERR" "bad.hlo:1:"
}
bad "{0}: (7, {}, may-alias), {1}: (0, {2}, may-alias)" "parameter 7 does not exist" --reference
sed -i 's/ROOT t = (f32\[64,32\], f32\[64,32\], f32\[64,32\]) tuple(w1, m1, g)/s = f32[64] slice(w1), slice={[0:64], [0:1]}\n  ROOT t = (f32[64,32], f32[64,32], f32[64,32], f32[64,1]) tuple(w1, m1, g, s)/' \
    "$WORK/s2.hlo"
sed -i 's/^  s = f32\[64\] /  s = f32[64,1] /' "$WORK/s2.hlo"
bad "{0}: (0, {0}, may-alias), {3}: (0, {1}, may-alias)" \
    "the output at {3}, of shape f32[64,1], cannot be parameter 0 at {1}, of shape f32[64,32], in the next step"
bad "{0}: (0, {0}, may-alias), {1}: (0, {3}, may-alias)" "has no value at index {3}" --reference
bad "{0}: (0, {0}, may-alias), {1}: (0, {0,1}, may-alias)" "has no value at index {0,1}"
bad "{0}: (0, {1}, may-alias), {1}: (0, {1}, may-alias)" "parameter 0 is aliased twice (at {1}, and by alias 0 at {1})"
sed "1s/input_output_alias={.*}/input_output_alias={ {0}: (0, {0}, may-alias) }/; s/\(  w1 = f32\[64,32\] subtract(w, cm)\), sharding=.*/\1, sharding={replicated}/" \
    "$WORK/s2.hlo" >"$WORK/bad.hlo"
expect_status 0 "$TESSEL" run "$WORK/bad.hlo" --random-inputs 1 --output-dir "$WORK/one"
expect_status 2 "$TESSEL" run "$WORK/bad.hlo" --steps 2 --random-inputs 1
expect_in "$ERR" "bad.hlo:1:"
expect_in "$ERR" "the output aliased to parameter 0 (a value inside it) is sharded {replicated} but the parameter {devices=[2,1]0,1}"
echo "steps_tuple_alias: the inner tuple aliased whole and a host program feeding a leaf equal them; bad pairs refused at their place, status 2"
