#!/usr/bin/env bash
# kernels.sh: the numeric kernels of device/ (k_fft.c, k_linalg.c,
# k_norm.c, k_topk.c, k_ragged.c) run end to end: `tessel run --reference`
# on tests/models/<family>.hlo with inputs written by numpy, each output
# compared with numpy's own result (numpy.fft, numpy.linalg, the batch-norm
# formulas, a stable argsort). Families whose attributes the parser does
# not read yet are covered by tests/unit/test_k_linalg.c and friends.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
M="$TESSEL_SRC/tests/models"

# check.py FAMILY DIR: write DIR/in_<i>.npy (mode "inputs") or compare
# DIR/out/output_<i>.npy with numpy (mode "check"). Tolerance: the oracle's
# (1e-4 of the largest magnitude for f32, 1e-5 for f64; tighter where the
# computation is exact).
cat >"$WORK/check.py" <<'PY'
import sys
import numpy as np

fam, mode, d = sys.argv[1], sys.argv[2], sys.argv[3]
rng = np.random.default_rng(20261201)

def inputs_fft():
    return [rng.standard_normal((2, 5, 3)).astype(np.float32),
            rng.standard_normal((2, 5, 3)).astype(np.float32),
            rng.standard_normal((3, 4, 7)), rng.standard_normal((3, 4, 7))]

def expect_fft(x):
    c = x[0].astype(np.complex128) + 1j * x[1].astype(np.complex128)
    dd = x[2] + 1j * x[3]
    f1, f2, f3 = np.fft.fft(c, axis=-1), np.fft.ifft2(c), np.fft.rfft2(x[0].astype(np.float64))
    f4 = np.fft.irfft2(c[:, :, :2], s=(5, 3))
    f5, f6 = np.fft.fftn(dd), np.fft.rfft(x[2], axis=-1)
    f7, f8 = np.fft.irfft(dd[:, :, :4], n=7), np.fft.ifftn(dd, axes=(1, 2))
    f32 = [f1.real, f1.imag, f2.real, f2.imag, f3.real, f3.imag, f4]
    f64 = [f5.real, f5.imag, f6.real, f6.imag, f7, f8.real, f8.imag]
    return [a.astype(np.float32) for a in f32] + f64

def spd(batch, n):
    b = rng.standard_normal((batch, n, n))
    return b @ np.swapaxes(b, 1, 2) + n * np.eye(n)

def inputs_linalg():
    a = rng.standard_normal((2, 5, 5)) + 4 * np.eye(5)
    c = rng.standard_normal((2, 3, 3)) + 4 * np.eye(3)
    return [spd(3, 5).astype(np.float32), spd(2, 7), a, rng.standard_normal((2, 5, 3)), c]

def expect_linalg(x):
    a, b, c = x[2], x[3], x[4]
    # x op(T) = b  <=>  op(T)^T x^T = b^T
    right = lambda t, b: np.swapaxes(np.linalg.solve(np.swapaxes(t, 1, 2), np.swapaxes(b, 1, 2)), 1, 2)
    unit_u = np.triu(a, 1) + np.eye(5)
    return [np.linalg.cholesky(x[0].astype(np.float64)).astype(np.float32),
            np.swapaxes(np.linalg.cholesky(x[1]), 1, 2),
            np.linalg.solve(np.tril(a), b),
            np.linalg.solve(np.swapaxes(unit_u, 1, 2), b),
            right(np.swapaxes(np.tril(c), 1, 2), b),
            right(np.triu(c), b)]

def inputs_batch_norm():
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    pos = lambda n: rng.uniform(0.5, 1.5, n).astype(np.float32)
    return [f(4, 3, 5, 2), pos(3), f(3), f(4, 3, 5, 2), f(6, 7), pos(7), f(7)]

def bn_train(x, g, b, eps, axes, shp):
    x = x.astype(np.float64)
    mu, var = x.mean(axis=axes), x.var(axis=axes)
    y = g.reshape(shp) * (x - mu.reshape(shp)) / np.sqrt(var.reshape(shp) + eps) + b.reshape(shp)
    return y, mu, var

def expect_batch_norm(x):
    eps = float(np.float32(0.001))
    shp, axes = (1, 3, 1, 1), (0, 2, 3)
    y, mu, var = bn_train(x[0], x[1], x[2], eps, axes, shp)
    g, o = x[1].reshape(shp).astype(np.float64), x[2].reshape(shp).astype(np.float64)
    inf = g * (x[0] - o) / np.sqrt(g + 0.5) + o     # mean = offset, variance = scale
    xc, dy = x[0] - mu.reshape(shp), x[3].astype(np.float64)
    s = 1 / np.sqrt(var.reshape(shp) + eps)
    d = dy.mean(axis=axes).reshape(shp)
    c = (dy * xc).mean(axis=axes).reshape(shp) * s * s
    dx = g * s * (dy - d - c * xc)
    dg, db = (dy * xc * s).sum(axis=axes), dy.sum(axis=axes)
    zy = bn_train(x[4], x[5], x[6], float(np.float32(1e-05)), (0,), (1, 7))[0]
    return [a.astype(np.float32) for a in (y, mu, var, inf, dx, dg, db, zy)]

def inputs_topk():
    # Few distinct values, so that rows have ties; -0.0 and +0.0 both occur.
    x = rng.integers(-3, 4, (5, 7)).astype(np.float32) / 2
    x[1, 2], x[1, 5] = -0.0, 0.0
    return [x, rng.integers(-4, 5, (3, 2, 9)).astype(np.int32)]

def topk(x, k, largest):
    # Stable: on equal keys the smaller index first. Descending by a stable
    # sort of the negated key (total order: -0 below +0, via the sign bit).
    key = x.astype(np.float64) + np.where(np.signbit(x) & (x == 0), -1e-300, 0) if x.dtype.kind == 'f' else x
    idx = np.argsort(-key if largest else key, axis=-1, kind='stable')[..., :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)

def expect_topk(x):
    out = []
    for a, k, largest in [(x[0], 3, True), (x[1], 4, False), (x[0], 7, True), (x[0], 2, True),
                          (x[0], 2, False)]:
        out += list(topk(a, k, largest))
    return out

def inputs_ragged_dot():
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    pos = lambda *s: rng.uniform(0.5, 2, s).astype(np.float32)
    return [f(7, 5), f(3, 5, 4), f(2, 6, 5), f(5, 4), f(3, 6, 5), f(3, 5, 4),
            f(6, 8), f(3, 8), pos(6, 2), pos(3, 2)]

def groups(sizes, n):
    # group of each of n rows (-1: past the last group)
    g = np.full(n, -1)
    at = 0
    for j, s in enumerate(sizes):
        g[at:at + s] = j
        at += s
    return g

def expect_ragged_dot(x):
    x = [a.astype(np.float64) for a in x]
    l, r, l2, r5, lb, rb = x[:6]
    r1 = np.zeros((7, 4))
    for i, j in enumerate(groups([2, 0, 4], 7)):
        if j >= 0:
            r1[i] = l[i] @ r[j]
    r2 = np.zeros((2, 6, 4))
    for b, sizes in enumerate([[1, 3, 2], [0, 6, 0]]):
        for i, j in enumerate(groups(sizes, 6)):
            r2[b, i] = l2[b, i] @ r[j]
    gk = groups([1, 3, 1], 5)
    r3 = np.stack([l[:, gk == j] @ r5[gk == j, :] for j in range(3)])
    r4 = np.einsum('bmk,bkn->bmn', lb, rb)
    sl = x[6] * np.repeat(x[8], 4, axis=1)
    sr = x[7] * np.repeat(x[9], 4, axis=1)
    return [a.astype(np.float32) for a in (r1, r2, r3, r4, sl @ sr.T)]

def check(got, want, i):
    if got.shape != want.shape or got.dtype != want.dtype:
        sys.exit('output %d: %s %s, numpy %s %s' % (i, got.dtype, got.shape, want.dtype, want.shape))
    if got.dtype.kind in 'iub':
        if not np.array_equal(got, want):
            sys.exit('output %d differs:\n%s\nnumpy:\n%s' % (i, got, want))
        return
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    tol = (1e-5 if got.dtype == np.float64 else 1e-4) * scale
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    if not err <= tol:
        sys.exit('output %d: max error %g > %g\n%s\nnumpy:\n%s' % (i, err, tol, got, want))

gen = globals()['inputs_' + fam]
x = gen()
if mode == 'inputs':
    for i, a in enumerate(x):
        np.save('%s/in_%d.npy' % (d, i), a)
else:
    want = globals()['expect_' + fam](x)
    for i, w in enumerate(want):
        check(np.load('%s/out/output_%d.npy' % (d, i)), w, i)
    print('%s: %d outputs match numpy' % (fam, len(want)))
PY

# run_family FAMILY NINPUTS: inputs from numpy, tessel's reference run,
# numpy's check.
run_family() {
    local fam=$1 n=$2 dir="$WORK/$1" args=()
    mkdir -p "$dir"
    "$PY" "$WORK/check.py" "$fam" inputs "$dir" || fail "$fam: numpy inputs"
    for ((i = 0; i < n; i++)); do args+=(--input "$i=$dir/in_$i.npy"); done
    expect_status 0 "$TESSEL" run "$M/$fam.hlo" --reference "${args[@]}" --output-dir "$dir/out"
    "$PY" "$WORK/check.py" "$fam" check "$dir" >"$OUT" 2>"$ERR" || fail "$fam: differs from numpy"
    cat "$OUT"
}

run_family fft 4
run_family linalg 5
run_family batch_norm 7
run_family topk 2
run_family ragged_dot 10

# A type fft does not take is refused at the instruction (the verifier
# already knows fft's types: status 2, FILE:LINE:COL).
cat >"$WORK/bad_fft.hlo" <<'HLO'
HloModule bad
ENTRY main {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fft(x), fft_type=FFT, fft_length={4}
}
HLO
expect_status 2 "$TESSEL" run "$WORK/bad_fft.hlo" --reference --random-inputs 1 --output-dir "$WORK/bad"
expect_in "$ERR" "bad_fft.hlo:4:8: error: fft"

echo "kernels: ok"
