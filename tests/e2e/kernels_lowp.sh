#!/usr/bin/env bash
# kernels_lowp.sh: tests/models/reduce_dot_lowp.hlo and data_lowp.hlo (the
# non-elementwise kernels on f8, s4 and u4) against NumPy on values rounded by
# tests/e2e/lowp_table.py, with the integers wrapped in Python.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

"$PY" - "$WORK" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(5)
np.save(f'{sys.argv[1]}/x.npy', rng.uniform(-4, 4, (4, 6)).astype(np.float32))
np.save(f'{sys.argv[1]}/i.npy', rng.integers(-9, 9, (4, 6)).astype(np.int32))
PY
for m in reduce_dot_lowp data_lowp; do
    expect_status 0 "$TESSEL" run "$TESSEL_SRC/tests/models/$m.hlo" --reference --output-dir "$WORK/$m" \
        --input 0="$WORK/x.npy" --input 1="$WORK/i.npy"
done
"$PY" - "$WORK" "$TESSEL_SRC/tests/e2e" <<'PY' || fail "results differ from NumPy"
import numpy as np, sys
w = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import lowp_table as L
def f(t, v):  # round to type t and back (these inputs stay finite)
    return np.array([float(L.decode(t, L.encode(t, float(e)))) for e in np.ravel(v)], np.float32).reshape(np.shape(v))
w4 = lambda v: ((v + 8) & 15) - 8
x, i = np.load(f'{w}/x.npy'), np.load(f'{w}/i.npy')
a, s, u, g5 = f('f8e4m3fn', x), w4(i), i & 15, f('f8e5m2', x)
o = [np.load(f'{w}/reduce_dot_lowp/output_{k}.npy') for k in range(8)]
gt = s[[2, 0]]
sc = u.copy(); sc[2] = (sc[2] + (gt[0] & 15)) & 15; sc[0] = (sc[0] + (gt[1] & 15)) & 15
checks = [
    ('reduce f8', o[0], f('f8e4m3fn', a.astype(np.float64).sum(1))),
    ('reduce s4', o[1], w4(s.sum(1))),
    ('dot f8', o[2], f('f8e4m3fn', a.astype(np.float64) @ a.T.astype(np.float64))),
    ('dot s4', o[3], w4(s @ s.T)),
    ('sort f8e5m2', o[4], np.sort(g5, 1)),
    ('transpose', o[5], g5.T),
    ('slice s4', o[6], s[:2]),
    ('reduce-window f8', o[7], f('f8e4m3fn', a[:, 0::2] + a[:, 1::2])),
]
o = [np.load(f'{w}/data_lowp/output_{k}.npy') for k in range(8)]
checks += [
    ('iota s4', o[0], np.arange(6)),
    ('pad f8', o[1], np.pad(a, 1, constant_values=0.5)),
    ('sort s4', o[2], np.sort(s, 1)),
    ('gather s4', o[3], gt),
    ('scatter u4', o[4], sc),
    ('concatenate f8', o[5], np.concatenate([a, a], 1)),
    ('reverse s4', o[6], s[:, ::-1]),
    ('broadcast f8', o[7], np.broadcast_to(a, (3, 4, 6))),
]
bad = [n for n, g, e in checks if not np.array_equal(g, e)]
for n, g, e in checks:
    if n in bad: print(n, '\n got ', g, '\n want', e)
sys.exit(1 if bad else 0)
PY
echo "kernels_lowp: ok"
