#!/usr/bin/env bash
# fused_rows.sh: tests/models/fused_rows.hlo (row reductions fused with
# their producers and broadcast consumers, device/fusion_rows.c) on one
# and two devices, with the default fusion (rows of 160 fuse) and with
# TESSEL_FUSION=all (the short rows too), against NumPy in double: softmax,
# layer norm, x - max and a sum of squares over two minor dims (f64),
# softmax over rows of length 1, a min reduce, and a normalisation over
# the major dim (not fused). And tests/models/fused_rows_jax.hlo, softmax
# and layer norm as JAX lowers them (reduced rows reshaped to [..,1] and
# back: the row groups see through the copies), on 1, 2 and 4 devices
# with the default fusion and with TESSEL_FUSION=off.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

M="$TESSEL_SRC/tests/models/fused_rows.hlo"
"$PY" - "$WORK" <<'PY'
import numpy as np, sys
w = sys.argv[1]
r = np.random.default_rng(17)
shapes = [((63, 160), np.float32), ((160,), np.float32), ((160,), np.float32), ((5, 3, 7), np.float64),
          ((6, 1), np.float32), ((4, 24), np.float32)]
for k, (s, t) in enumerate(shapes):
    a = r.uniform(-4, 4, s).astype(t)
    if k == 0:
        a[3, :] = 0  # a constant row: variance 0, layer norm by eps alone
    np.save(f'{w}/in{k}.npy', a)
x = r.uniform(-4, 4, (4, 24, 160)).astype(np.float32)
x[1, 5, :] = 0
np.save(f'{w}/j0.npy', x)
np.save(f'{w}/j1.npy', r.uniform(-2, 2, 160).astype(np.float32))
np.save(f'{w}/j2.npy', r.uniform(-2, 2, 160).astype(np.float32))
np.save(f'{w}/j3.npy', r.uniform(1, 3, (4, 24, 1)).astype(np.float32))
PY
inputs=()
for k in 0 1 2 3 4 5; do inputs+=(--input "$k=$WORK/in$k.npy"); done
for n in 1 2; do
    m=$(instantiate "$M" "$n")
    expect_status 0 "$TESSEL" run "$m" --num-partitions "$n" "${inputs[@]}" --output-dir "$WORK/d$n"
    TESSEL_FUSION=all expect_status 0 "$TESSEL" run "$m" --num-partitions "$n" "${inputs[@]}" --output-dir "$WORK/a$n"
done
J="$TESSEL_SRC/tests/models/fused_rows_jax.hlo"
inputs=()
for k in 0 1 2 3; do inputs+=(--input "$k=$WORK/j$k.npy"); done
for n in 1 2 4; do
    m=$(instantiate "$J" "$n")
    expect_status 0 "$TESSEL" run "$m" --num-partitions "$n" "${inputs[@]}" --output-dir "$WORK/jd$n"
    TESSEL_FUSION=off expect_status 0 "$TESSEL" run "$m" --num-partitions "$n" "${inputs[@]}" --output-dir "$WORK/jo$n"
done

"$PY" - "$WORK" <<'PY' || fail "fused rows differ from NumPy"
import numpy as np, sys
w = sys.argv[1]
x, g, b, y, z, v = (np.load(f'{w}/in{k}.npy').astype(np.float64) for k in range(6))
sm = np.exp(x - x.max(1, keepdims=True)); sm /= sm.sum(1, keepdims=True)
xc = x - x.mean(1, keepdims=True)
ln = xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5) * g + b
zs = np.exp(z - z.max(1, keepdims=True)); zs /= zs.sum(1, keepdims=True)
wa = np.abs(v)
bad = 0
def check(runs, want, tol):
    global bad
    for run in runs:
        for k, (want_k, t) in enumerate(zip(want, tol)):
            got = np.load(f'{w}/{run}/output_{k}.npy').astype(np.float64)
            err = np.abs(got - want_k).max() / max(1.0, np.abs(want_k).max())
            if got.shape != want_k.shape or not err <= t:
                print(run, 'output', k, 'error', err, 'tolerance', t)
                bad += 1
check(('d1', 'd2', 'a1', 'a2'),
      [sm, ln, y - y.max((1, 2), keepdims=True), (y * y).sum((1, 2)), zs, x.min(1), wa / wa.sum(0)],
      [1e-6, 1e-4, 1e-12, 1e-12, 0, 0, 1e-6])
x, g, b, d = (np.load(f'{w}/j{k}.npy').astype(np.float64) for k in range(4))
sm = np.exp(x - x.max(2, keepdims=True)); sm /= sm.sum(2, keepdims=True)
xc = x - x.mean(2, keepdims=True)
ln = xc / np.sqrt((xc * xc).mean(2, keepdims=True) + 1e-5) * g + b
check(('jd1', 'jd2', 'jd4', 'jo1', 'jo2', 'jo4'), [sm, ln, x - x.sum(2, keepdims=True) / d], [1e-6, 1e-4, 1e-5])
sys.exit(1 if bad else 0)
PY
echo "fused_rows: ok"
