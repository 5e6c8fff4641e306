#!/usr/bin/env bash
# qr.sh: XLA's custom-call targets run by the executor itself (device/k_qr.c,
# device/k_markers.c) end to end.
#   Qr / ProductOfElementaryHouseholderReflectors: tests/models/qr.hlo on
#   numpy inputs (f32, f64, c64, c128; batched; m > n and m < n), checked
#   against a numpy re-implementation of XLA's unblocked Householder QR
#   (QrExpander's House(): LAPACK's reflector convention), Q R = A,
#   Q^H Q = I, Q^H A upper triangular, Q as the product of the reflectors,
#   and numpy.linalg.qr up to the phases of the columns; with
#   --num-partitions 2 too; an unsupported type is refused at the
#   instruction.
#   LU: lapack_sgetrf_ffi and tessel_lu_permutation (device/k_lu.c)
#   checked by NumPy (P A = L U from the pivots), a zero pivot's info, on 2
#   partitions too; a pivot out of range refused.
#   Annotation targets (annotate_device_placement, MoveToHost, ...,
#   SetBound): identities, on the reference and on 2 partitions with a
#   sharded operand; one that changes the shape is refused.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 0; }
M="$TESSEL_SRC/tests/models"

cat >"$WORK/check.py" <<'PY'
import sys
import numpy as np

mode, d = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(20261211)
cplx = lambda *s: rng.standard_normal(s) + 1j * rng.standard_normal(s)
x = [rng.standard_normal((2, 5, 3)).astype(np.float32), rng.standard_normal((3, 4)),
     cplx(2, 4, 3).astype(np.complex64), cplx(3, 5)]
if mode == 'inputs':
    for i, a in enumerate(x):
        np.save('%s/in_%d.npy' % (d, i), a)
    sys.exit(0)
o = lambda i: np.load('%s/output_%d.npy' % (d, i))

def house_qr(a):
    """XLA's unblocked Householder QR (qr_expander.cc's QrBlock and House)
    in float64/complex128: returns (vectors below the diagonal and R, taus)."""
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64).copy()
    m, n = a.shape
    taus = np.zeros(min(m, n), a.dtype)
    for j in range(min(m, n)):
        xj = a[j:, j].copy()
        alpha, sigma = xj[0], float(np.vdot(xj[1:], xj[1:]).real)
        if sigma == 0 and np.imag(alpha) == 0:
            tau, beta, v = 0, np.real(alpha), np.eye(m - j, 1, dtype=a.dtype)[:, 0]
        else:
            mu = np.sqrt(abs(alpha) ** 2 + sigma)
            beta = mu if np.real(alpha) < 0 else -mu
            tau = (beta - alpha) / beta
            v = xj / (alpha - beta)
            v[0] = 1
        a[j:, j:] -= np.conj(tau) * np.outer(v, np.conj(v) @ a[j:, j:])
        a[j, j], a[j + 1:, j], taus[j] = beta, v[1:], tau
    return a, taus

def reflectors(vr, taus):
    """H_1 ... H_p with H_j = I - tau_j v_j v_j^H, the vectors read from vr."""
    m = vr.shape[0]
    q = np.eye(m, dtype=np.complex128)
    for j, t in enumerate(taus):
        v = np.concatenate([np.zeros(j), [1], vr[j + 1:, j]])
        q = q @ (np.eye(m) - t * np.outer(v, np.conj(v)))
    return q

def close(what, got, want, tol):
    scale = max(float(np.max(np.abs(want))), 1.0)
    err = float(np.max(np.abs(np.asarray(got, np.complex128) - want)))
    if not err <= tol * scale:
        sys.exit('%s: max error %g > %g\n%s\nwant:\n%s' % (what, err, tol * scale, got, want))

# (input, vectors+R output, taus output, Q outputs [(index, columns)])
cases = [(0, 0, 1, [(2, 3), (3, 5)]), (1, 4, 5, [(6, 3)]), (2, 7, 8, [(9, 3)]),
         (3, 10, 11, [(12, 3)])]
n = 0
for ai, vi, ti, qs in cases:
    A, V, T = x[ai], o(vi), o(ti)
    if V.dtype != A.dtype or T.dtype != A.dtype:
        sys.exit('output %d/%d: %s %s for %s' % (vi, ti, V.dtype, T.dtype, A.dtype))
    tol = 1e-4 if A.dtype in (np.float32, np.complex64) else 1e-10
    Ab, Vb, Tb = A.reshape((-1,) + A.shape[-2:]), V.reshape((-1,) + A.shape[-2:]), T.reshape(-1, T.shape[-1])
    Qb = {qi: o(qi).reshape((len(Ab),) + o(qi).shape[-2:]) for qi, _ in qs}
    for b in range(len(Ab)):
        a, v, t = Ab[b].astype(np.complex128), Vb[b], Tb[b]
        m, nn = a.shape
        p = min(m, nn)
        rv, rt = house_qr(Ab[b])
        close('output %d[%d] (vectors and R) vs XLA' % (vi, b), v, rv, tol)
        close('output %d[%d] (taus) vs XLA' % (ti, b), t, rt, tol)
        r = np.triu(v[:p, :])
        h = reflectors(v.astype(np.complex128), t.astype(np.complex128))
        for qi, cols in qs:
            q = Qb[qi][b]
            if q.shape != (m, cols) or q.dtype != A.dtype:
                sys.exit('output %d: %s %s' % (qi, q.dtype, q.shape))
            close('output %d[%d]: Q vs the reflectors' % (qi, b), q, h[:, :cols], tol)
            close('output %d[%d]: Q^H Q = I' % (qi, b), np.conj(q.T) @ q, np.eye(cols), tol)
            close('output %d[%d]: Q R = A' % (qi, b), q[:, :p] @ r, a, tol)
            close('output %d[%d]: Q^H A upper' % (qi, b), np.tril(np.conj(q[:, :p].T) @ a, -1), 0 * r, tol)
            qn, rn = np.linalg.qr(a)
            ph = np.array([np.vdot(qn[:, j], q[:, j]) for j in range(p)])
            close('output %d[%d]: |phases| = 1' % (qi, b), np.abs(ph), np.ones(p), tol)
            close('output %d[%d]: Q vs numpy.linalg.qr' % (qi, b), q[:, :p], qn * ph, tol)
            close('output %d[%d]: R vs numpy.linalg.qr' % (qi, b), r, np.conj(ph)[:, None] * rn, tol)
            n += 1
print('qr: %d factorizations match XLA and numpy' % n)
PY

# ---- Qr and ProductOfElementaryHouseholderReflectors ----
"$PY" "$WORK/check.py" inputs "$WORK" || fail "numpy inputs"
args=()
for i in 0 1 2 3; do args+=(--input "$i=$WORK/in_$i.npy"); done
expect_status 0 "$TESSEL" run "$M/qr.hlo" --reference "${args[@]}" --output-dir "$WORK/ref"
"$PY" "$WORK/check.py" check "$WORK/ref" >"$OUT" 2>"$ERR" || fail "qr: differs"
cat "$OUT"
# Partitioned: nothing is sharded, so every device runs the whole of it.
expect_status 0 "$TESSEL" run "$M/qr.hlo" --num-partitions 2 "${args[@]}" --output-dir "$WORK/p2"
"$PY" "$WORK/check.py" check "$WORK/p2" >"$OUT" 2>"$ERR" || fail "qr on 2 partitions: differs"

# A type LAPACK has no QR for is refused at the instruction, status 2.
cat >"$WORK/bad_qr.hlo" <<'HLO'
HloModule bad
ENTRY main {
  x = f16[4,3] parameter(0)
  ROOT q = (f16[4,3], f16[3]) custom-call(x), custom_call_target="Qr"
}
HLO
expect_status 2 "$TESSEL" run "$WORK/bad_qr.hlo" --reference --random-inputs 1 --output-dir "$WORK/bad"
expect_in "$ERR" 'bad_qr.hlo:4:8: error: q: Qr of f16 is not supported (f32, f64, c64, c128)'
[ ! -e "$WORK/bad/output_0.npy" ] || fail "a refused run left an output"
# ProductOfElementaryHouseholderReflectors needs m >= n, as XLA's builder.
cat >"$WORK/bad_q.hlo" <<'HLO'
HloModule bad
ENTRY main {
  a = f32[3,4] parameter(0)
  t = f32[3] parameter(1)
  ROOT q = f32[3,4] custom-call(a, t), custom_call_target="ProductOfElementaryHouseholderReflectors"
}
HLO
expect_status 2 "$TESSEL" run "$WORK/bad_q.hlo" --reference --random-inputs 1 --output-dir "$WORK/bad"
expect_in "$ERR" 'bad_q.hlo:5:8: error: q: needs m >= n >= k'

# ---- annotation targets: identities ----
# One marker per output; p is sharded on 2 partitions (rows), so the
# partitioned run moves shards through every marker.
cat >"$WORK/markers.hlo" <<'HLO'
HloModule markers, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=2]>}}

ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[2,1]0,1}
  i = s32[3] parameter(1)
  a = f32[4,6] custom-call(p), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="pinned_host"}
  h = f32[4,6] custom-call(p), custom_call_target="MoveToHost"
  d = f32[4,6] custom-call(h), custom_call_target="MoveToDevice"
  pd = f32[4,6] custom-call(p), custom_call_target="PinToDevice"
  ps = f32[4,6] custom-call(p), custom_call_target="PinToDeviceSram"
  bf = f32[4,6] custom-call(p), custom_call_target="ShardBarrierFrom", custom_call_has_side_effect=true
  bt = f32[4,6] custom-call(p), custom_call_target="ShardBarrierTo", custom_call_has_side_effect=true
  fr = s32[3] custom-call(i), custom_call_target="xla.sdy.FuncResultSharding", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{}]>]>"}
  pin = f32[4,6] custom-call(p), custom_call_target="Pin"
  unpin = f32[4,6] custom-call(pin), custom_call_target="Unpin"
  sb = f32[4,6] custom-call(p), custom_call_target="SetBound", literal=s32[] 1
  s = f32[4,6] add(bf, bt)
  ROOT t = (f32[4,6], f32[4,6], f32[4,6], f32[4,6], f32[4,6], f32[4,6], f32[4,6], s32[3], f32[4,6], f32[4,6], f32[4,6])
    tuple(a, h, d, pd, ps, bf, bt, fr, unpin, sb, s)
}
HLO
"$PY" -c '
import numpy as np, sys
np.save(sys.argv[1] + "/p.npy", np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5)
np.save(sys.argv[1] + "/i.npy", np.array([3, -1, 7], np.int32))' "$WORK"
for n in 1 2; do
    flags=(--reference); [ $n = 1 ] || flags=(--num-partitions $n)
    rm -rf "$WORK/m$n"
    expect_status 0 "$TESSEL" run "$WORK/markers.hlo" "${flags[@]}" --input "p=$WORK/p.npy" \
        --input "i=$WORK/i.npy" --output-dir "$WORK/m$n"
    "$PY" - "$WORK" "$n" <<'PY' || fail "markers on $n partition(s) are not identities"
import sys, numpy as np
w, n = sys.argv[1], sys.argv[2]
p, i = np.load(w + '/p.npy'), np.load(w + '/i.npy')
o = lambda k: np.load('%s/m%s/output_%d.npy' % (w, n, k))
names = ['annotate_device_placement', 'MoveToHost', 'MoveToDevice', 'PinToDevice', 'PinToDeviceSram',
         'ShardBarrierFrom', 'ShardBarrierTo', 'xla.sdy.FuncResultSharding', 'Pin/Unpin', 'SetBound']
for k, name in enumerate(names):
    want = i if k == 7 else p
    got = o(k)
    if got.dtype != want.dtype or not np.array_equal(got, want):
        sys.exit('%s: %r, expected %r' % (name, got, want))
if not np.array_equal(o(10), p + p):
    sys.exit('add after the barriers: %r' % o(10))
PY
done
# A marker that changes the shape is refused at the instruction.
cat >"$WORK/bad_marker.hlo" <<'HLO'
HloModule bad
ENTRY main {
  p = f32[4] parameter(0)
  ROOT h = f32[2,2] custom-call(p), custom_call_target="MoveToHost"
}
HLO
expect_status 2 "$TESSEL" run "$WORK/bad_marker.hlo" --reference --random-inputs 1
expect_in "$ERR" 'bad_marker.hlo:4:8: error: h: custom-call MoveToHost takes one operand and returns it'

# LU (device/k_lu.c): lapack_sgetrf_ffi on a batch of 3 matrices, one with
# a zero column (a zero pivot: info > 0, the factors complete), checked by
# NumPy: P A = L U with P from the 1-based pivots swapped in order, which
# tessel_lu_permutation must give too; on 2 partitions (the batch split)
# equal to the reference. A pivot outside [1, m] is refused at the call.
cat >"$WORK/lu.hlo" <<'HLO'
HloModule lu, num_partitions=2

ENTRY e {
  a = f32[3,4,4] parameter(0), sharding={devices=[2,1,1]0,1}
  f = (f32[3,4,4], s32[3,4], s32[3]) custom-call(a), custom_call_target="lapack_sgetrf_ffi"
  lu = f32[3,4,4] get-tuple-element(f), index=0
  piv = s32[3,4] get-tuple-element(f), index=1
  info = s32[3] get-tuple-element(f), index=2
  perm = s32[3,4] custom-call(piv), custom_call_target="tessel_lu_permutation"
  ROOT t = (f32[3,4,4], s32[3,4], s32[3], s32[3,4]) tuple(lu, piv, info, perm)
}
HLO
"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
a = np.random.default_rng(5).standard_normal((3, 4, 4)).astype(np.float32)
a[2, :, 1] = 0.0
np.save(sys.argv[1] + "/lu_a.npy", a)
PY
expect_status 0 "$TESSEL" run "$WORK/lu.hlo" --reference --input "0=$WORK/lu_a.npy" --output-dir "$WORK/lu_ref"
expect_status 0 "$TESSEL" run "$WORK/lu.hlo" --input "0=$WORK/lu_a.npy" --output-dir "$WORK/lu_p2"
for k in 0 1 2 3; do
    npy_match "$WORK/lu_ref/output_$k.npy" "$WORK/lu_p2/output_$k.npy" || fail "lu: output $k on 2 partitions differs"
done
"$PY" - "$WORK" <<'PY' || fail "lu: P A = L U, the pivots or the permutation (above)"
import sys
import numpy as np
d = sys.argv[1]
a = np.load(d + "/lu_a.npy").astype(np.float64)
lu, piv, info, perm = (np.load("%s/lu_ref/output_%d.npy" % (d, k)) for k in range(4))
for b in range(3):
    p = list(range(4))
    for i, j in enumerate(piv[b]):
        assert 1 <= j <= 4, piv[b]
        p[i], p[j - 1] = p[j - 1], p[i]
    assert list(perm[b]) == p, (perm[b], p)
    l = np.tril(lu[b], -1) + np.eye(4)
    u = np.triu(lu[b])
    err = np.abs(l @ u - a[b][p]).max()
    assert err < 1e-5 * np.abs(a[b]).max(), (b, err)
    assert np.all(np.abs(np.tril(lu[b], -1)) <= 1 + 1e-6), "partial pivoting keeps |L| <= 1"
assert info[0] == 0 and info[1] == 0 and info[2] > 0, info
PY
cat >"$WORK/bad_piv.hlo" <<'HLO'
HloModule bad_piv

ENTRY e {
  p = s32[2,3] parameter(0)
  ROOT q = s32[2,4] custom-call(p), custom_call_target="tessel_lu_permutation"
}
HLO
"$PY" -c "import numpy as np, sys; np.save(sys.argv[1], np.array([[3, 3, 3], [1, 9, 2]], np.int32))" "$WORK/bad_piv.npy"
expect_status 2 "$TESSEL" run "$WORK/bad_piv.hlo" --input "0=$WORK/bad_piv.npy"
expect_in "$ERR" 'bad_piv.hlo:5:8: error'
expect_in "$ERR" 'pivot 1 of matrix 1 is 9, outside [1, 4]'

echo "qr: ok"
