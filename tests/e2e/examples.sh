#!/usr/bin/env bash
# examples.sh: every example checks and runs with --reference, and its
# outputs equal values worked out independently: by hand where the inputs
# make that easy, else by a small double-precision computation in python3
# (no numpy) on the same inputs.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
EX="$TESSEL_SRC/examples"

# ---- check: the one-line summaries ----
expect_status 0 "$TESSEL" check "$EX/mlp.hlo"
expect_in "$OUT" "$EX/mlp.hlo: ok: module mlp, 1 computation, 6 instructions, entry main (3 parameters -> f32[8,8]), num_partitions=2 replica_count=1"
expect_status 0 "$TESSEL" check "$EX/softmax.hlo"
expect_in "$OUT" "$EX/softmax.hlo: ok: module softmax, 3 computations, 16 instructions, entry main (1 parameter -> f32[4,10]), num_partitions=1 replica_count=1"
expect_status 0 "$TESSEL" check "$EX/while_loop.hlo"
expect_in "$OUT" "$EX/while_loop.hlo: ok: module while_loop, 3 computations, 21 instructions, entry main (1 parameter -> (s32[], f32[4])), num_partitions=1 replica_count=1"

# ---- while_loop: v = [1,2,3,4] added 5 times: (5, [5,10,15,20]) ----
npy_write "$WORK/v.npy" '<f4' 4 1 2 3 4
expect_status 0 "$TESSEL" run "$EX/while_loop.hlo" --reference --input 0="$WORK/v.npy" --output-dir "$WORK/wl"
[ "$(npy_dump "$WORK/wl/output_0.npy")" = "<i4  5" ] || fail "while_loop output_0: $(npy_dump "$WORK/wl/output_0.npy")"
[ "$(npy_dump "$WORK/wl/output_1.npy")" = "<f4 4 5 10 15 20" ] || fail "while_loop output_1: $(npy_dump "$WORK/wl/output_1.npy")"
[ "$(ls "$WORK/wl")" = "$(printf 'output_0.npy\noutput_1.npy\noutputs.json')" ] || fail "while_loop wrote $(ls "$WORK/wl")"
# the summary form, by name
expect_status 0 "$TESSEL" run "$EX/while_loop.hlo" --reference --input v="$WORK/v.npy"
expect_in "$OUT" "output 0: s32[] min 5 max 5 mean 5 first [5]"
expect_in "$OUT" "output 1: f32[4] min 5 max 20 mean 12.5 first [5, 10, 15, 20]"

# ---- softmax: rows worked out by hand ----
# row 0: x_j = ln(j+1)       -> (j+1)/55
# row 1: all 0               -> 0.1 each
# row 2: [1000, 0, ..., 0]   -> [1, 0, ..., 0] (exp(-1000) underflows to 0;
#                               without the max shift exp(1000) would be inf)
# row 3: x_j = -3 (all equal, negative) -> 0.1 each
vals=$("$PY" -c '
import math
r0 = [math.log(j + 1) for j in range(10)]
print(" ".join(repr(v) for v in r0 + [0.0] * 10 + [1000.0] + [0.0] * 9 + [-3.0] * 10))')
# shellcheck disable=SC2086
npy_write "$WORK/sx.npy" '<f4' 4,10 $vals
expect_status 0 "$TESSEL" run "$EX/softmax.hlo" --reference --input x="$WORK/sx.npy" --output-dir "$WORK/sm"
npy_dump "$WORK/sm/output_0.npy" >"$WORK/sm.txt"
"$PY" - "$WORK/sm.txt" <<'PY' || fail "softmax values"
import sys
f = open(sys.argv[1]).read().split()
assert f[0] == '<f4' and f[1] == '4,10', f[:2]
y = [float(v) for v in f[2:]]
want = [(j + 1) / 55 for j in range(10)] + [0.1] * 10 + [1.0] + [0.0] * 9 + [0.1] * 10
for i, (a, b) in enumerate(zip(y, want)):
    assert abs(a - b) <= 1e-6, (i, a, b)
for r in range(4):
    s = sum(y[10 * r:10 * r + 10])
    assert abs(s - 1) <= 1e-6, (r, s)
PY

# ---- mlp: y = tanh(x . W1) . W2, inputs exact in f32, expected in double ----
"$PY" - "$WORK" <<'PY'
import sys
w = sys.argv[1]
x = [((i * 16 + k) % 7 - 3) / 4 for i in range(8) for k in range(16)]
w1 = [((k * 32 + j) % 5 - 2) / 8 for k in range(16) for j in range(32)]
w2 = [((j * 8 + o) % 3 - 1) / 2 for j in range(32) for o in range(8)]
for name, v in (('x', x), ('w1', w1), ('w2', w2)):
    open('%s/%s.txt' % (w, name), 'w').write(' '.join(repr(a) for a in v))
PY
npy_write "$WORK/x.npy" '<f4' 8,16 $(cat "$WORK/x.txt")
npy_write "$WORK/w1.npy" '<f4' 16,32 $(cat "$WORK/w1.txt")
npy_write "$WORK/w2.npy" '<f4' 32,8 $(cat "$WORK/w2.txt")
expect_status 0 "$TESSEL" run "$EX/mlp.hlo" --reference --input 0="$WORK/x.npy" \
    --input w1="$WORK/w1.npy" --input 2="$WORK/w2.npy" --output-dir "$WORK/mlp"
npy_dump "$WORK/mlp/output_0.npy" >"$WORK/mlp.txt"
"$PY" - "$WORK" <<'PY' || fail "mlp values"
import math, sys
w = sys.argv[1]
x = [float(a) for a in open(w + '/x.txt').read().split()]
w1 = [float(a) for a in open(w + '/w1.txt').read().split()]
w2 = [float(a) for a in open(w + '/w2.txt').read().split()]
h = [[math.tanh(sum(x[i * 16 + k] * w1[k * 32 + j] for k in range(16))) for j in range(32)]
     for i in range(8)]
want = [sum(h[i][j] * w2[j * 8 + o] for j in range(32)) for i in range(8) for o in range(8)]
f = open(w + '/mlp.txt').read().split()
assert f[0] == '<f4' and f[1] == '8,8', f[:2]
y = [float(v) for v in f[2:]]
big = max(abs(v) for v in want)
assert big > 0.1, big
for i, (a, b) in enumerate(zip(y, want)):
    assert abs(a - b) <= 1e-4 * big, (i, a, b)
PY
# and with W1 = 0 the hidden layer is tanh(0) = 0, so y is exactly 0
npy_write "$WORK/w1z.npy" '<f4' 16,32 $(printf '0 %.0s' $(seq 512))
expect_status 0 "$TESSEL" run "$EX/mlp.hlo" --reference --input 0="$WORK/x.npy" \
    --input 1="$WORK/w1z.npy" --input 2="$WORK/w2.npy"
expect_in "$OUT" "output 0: f32[8,8] min 0 max 0 mean 0 first [0, 0, 0, 0, ...]"

# ---- every example runs with random inputs ----
for m in mlp softmax while_loop; do
    expect_status 0 "$TESSEL" run "$EX/$m.hlo" --reference --random-inputs 1
    expect_in "$OUT" "output 0: "
done
echo "examples: ok"
