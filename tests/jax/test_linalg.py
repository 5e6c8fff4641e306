"""test_linalg.py: JAX's LAPACK custom-calls on the CPU (lapack_?potrf_ffi,
lapack_?trsm_ffi) run as tessel's cholesky and triangular-solve
(ir/lapack_calls.c); lapack_?geqrf_ffi and lapack_?orgqr_ffi as XLA's Qr
and Householder product (device/k_qr.c); lapack_?getrf_ffi by its own
kernel (device/k_lu.c); and equal JAX.

One program per element type (f32, f64), its inputs batches of B matrices:
  cholesky of positive definite matrices (jnp.linalg.cholesky), and of a
    batch whose matrices 1 and 3 are not positive definite (JAX: those
    come out NaN below the diagonal, the rest exact);
  solve_triangular left side: lower and upper, trans 0 / 1 / 'T', a unit
    diagonal (jax.scipy.linalg.solve_triangular);
  lax.linalg.triangular_solve right side: lower and upper, transposed or
    not, a unit diagonal;
  cho_solve of the positive definite batch (potrf, then two trsm).
A second program, QR and LU, on batches of general matrices: jnp.linalg.qr
(reduced, and complete of a tall slice), solve, inv, det, slogdet,
jax.scipy.linalg.lu (P, L, U), and det and lu of a batch whose matrices
have a zero row (getrf's info > 0: det exactly 0, the factors kept).
A third, eigh and SVD (device/k_eigh_svd.c): jnp.linalg.eigh (syevd,
lower) and eigvalsh (upper) of symmetric matrices, eigh of Hermitian ones
(heevd), jnp.linalg.svd full of tall matrices (gesdd, mode A), reduced of
wide ones (S), lax.linalg.svd with the QR algorithm (gesvd), singular
values alone (N), of complex matrices, norm(ord=2) and pinv; the tall
batch holds a matrix with a zero column (rank deficient) and one with a
NaN (LAPACK's info -4: JAX and tessel give NaN for all of its results).
A fourth, eig (device/k_geev.c): jnp.linalg.eig of real matrices (geev:
conjugate pairs unpacked), lax.linalg.eig with left eigenvectors,
eigvals, and eig of complex matrices; a diagonal matrix, and one with a
NaN (info -4, every result NaN).
Each on 1, 2 and 4 devices with the batch split, `tessel run` and `tessel
run --reference` equal to JAX's own execution (test_oracle.compare's
tolerance); and the lowered HLO holds the LAPACK targets (so the test
fails if JAX stops emitting them). Then a trsm whose backend_config gives
an unknown transpose, a getrf of the wrong form, an SVD in mode O, an eigh
of a non-square matrix, a geev without compute_left and a Schur
decomposition (gees, not run) are refused naming the target (exit 2); and hand-written syevd and gesdd
calls on matrices holding an infinity end (OpenBLAS's own iterations spin
on one) with info -4 and NaN results. Exit 0 when all
hold, 1 otherwise (77: JAX missing).
"""
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

try:
    import programs as registry  # sets XLA_FLAGS for JAX first
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

import test_oracle as oracle  # noqa: E402

jax.config.update("jax_enable_x64", True)

B, N, K = 4, 6, 3


def fn(spd, bad, lo, up, b, br):
    tri = lax.linalg.triangular_solve
    return (
        jnp.linalg.cholesky(spd),
        jnp.linalg.cholesky(bad),
        jsl.solve_triangular(lo, b, lower=True),
        jsl.solve_triangular(lo, b, lower=True, trans=1),
        jsl.solve_triangular(up, b, lower=False),
        jsl.solve_triangular(up, b, lower=False, trans="T", unit_diagonal=True),
        tri(lo, br, left_side=False, lower=True),
        tri(up, br, left_side=False, lower=False, transpose_a=True),
        tri(lo, br, left_side=False, lower=True, transpose_a=True, unit_diagonal=True),
        jsl.cho_solve((jnp.linalg.cholesky(spd), True), b),
    )


def fn_qr_lu(a, b, z):
    q, r = jnp.linalg.qr(a)
    qc, rc = jnp.linalg.qr(a[:, :, :K], mode="complete")
    sgn, logdet = jnp.linalg.slogdet(a)
    p, lo, up = jax.vmap(jsl.lu)(a)
    pz, loz, upz = jax.vmap(jsl.lu)(z)
    return (q, r, qc, rc, jnp.linalg.solve(a, b), jnp.linalg.inv(a), jnp.linalg.det(a), sgn, logdet,
            p, lo, up, jnp.linalg.det(z), pz, loz, upz)


def make_inputs_qr_lu(dtype):
    def inputs(rng):
        a = rng.standard_normal((B, N, N)) + 2 * np.eye(N)
        z = rng.standard_normal((B, N, N))
        z[:, 2, :] = 0.0                 # a zero row: a zero pivot, det 0
        b = rng.standard_normal((B, N, K))
        return tuple(x.astype(dtype) for x in (a, b, z))
    return inputs


def specs_qr_lu(axes):
    t = P(axes[0], None, None)
    v = P(axes[0])
    return (t,) * 3, (t, t, t, t, t, t, v, v, v, t, t, t, v, t, t, t)


def _swap(x):
    return jnp.swapaxes(x, -1, -2)


def fn_eig_svd(s, a, c):
    h = s + _swap(s)
    w, v = jnp.linalg.eigh(h)
    hc = jnp.conj(_swap(c)) @ c                  # [B, K, K], full rank: its eigenvectors are unique
    wc, vc = jnp.linalg.eigh(hc)
    u, sv, vh = jnp.linalg.svd(a)
    u2, sv2, vh2 = jnp.linalg.svd(_swap(a), full_matrices=False)
    u3, sv3, vh3 = lax.linalg.svd(a, full_matrices=False, algorithm=lax.linalg.SvdAlgorithm.QR)
    uc, svc, vhc = jnp.linalg.svd(c, full_matrices=False)
    return (w, v, jnp.linalg.eigvalsh(h, UPLO="U"), wc, vc, u, sv, vh, u2, sv2, vh2, u3, sv3, vh3,
            jnp.linalg.svd(a, compute_uv=False), uc, svc, vhc, jnp.linalg.norm(a, ord=2, axis=(1, 2)),
            jnp.linalg.pinv(_swap(a)))


def make_inputs_eig_svd(dtype):
    cplx = np.complex64 if dtype == np.float32 else np.complex128

    def inputs(rng):
        s = rng.standard_normal((B, N, N))
        a = rng.standard_normal((B, N, K))
        a[1, :, 2] = 0.0                 # rank deficient
        a[3, 4, 1] = np.nan              # LAPACK's info -4: every result NaN
        c = rng.standard_normal((B, N, K)) + 1j * rng.standard_normal((B, N, K))
        return s.astype(dtype), a.astype(dtype), c.astype(cplx)
    return inputs


def specs_eig_svd(axes):
    t = P(axes[0], None, None)
    v = P(axes[0], None)
    return (t,) * 3, (v, t, v, v, t, t, v, t, t, v, t, t, v, t, v, t, v, t, P(axes[0]), t)


def fn_eig(g, c):
    w, v = jnp.linalg.eig(g)                     # real matrices: conjugate pairs
    wl, vl, vr = lax.linalg.eig(g, compute_left_eigenvectors=True)
    wc, vc = jnp.linalg.eig(c)
    return w, v, wl, vl, vr, jnp.linalg.eigvals(g), wc, vc, jnp.linalg.eigvals(c)


def make_inputs_eig(dtype):
    cplx = np.complex64 if dtype == np.float32 else np.complex128

    def inputs(rng):
        g = rng.standard_normal((B, N, N))
        g[2] = np.diag(np.arange(1.0, N + 1))    # real eigenvalues, eigenvectors the unit vectors
        g[3, 1, 2] = np.nan                      # info -4: every result NaN
        c = rng.standard_normal((B, N, N)) + 1j * rng.standard_normal((B, N, N))
        return g.astype(dtype), c.astype(cplx)
    return inputs


def specs_eig(axes):
    t = P(axes[0], None, None)
    v = P(axes[0], None)
    return (t, t), (v, t, v, t, t, v, v, t, v)


def make_inputs(dtype):
    def inputs(rng):
        m = rng.standard_normal((B, N, N))
        spd = m @ np.swapaxes(m, 1, 2) + N * np.eye(N)
        bad = spd.copy()
        bad[1] = -spd[1]                 # negative definite
        bad[3][2, 2] = -100.0            # indefinite from the third pivot on
        lo = np.tril(rng.standard_normal((B, N, N))) + 3 * np.eye(N)
        up = np.triu(rng.standard_normal((B, N, N))) + 3 * np.eye(N)
        b = rng.standard_normal((B, N, K))
        br = rng.standard_normal((B, K, N))
        return tuple(x.astype(dtype) for x in (spd, bad, lo, up, b, br))
    return inputs


def specs(axes):
    t = P(axes[0], None, None)
    return (t,) * 6, (t,) * 10


# (name, function, specs, inputs, the LAPACK targets its HLO must hold, a check of JAX's own outputs:
# "" or what is wrong)
CASES = (
    ("linalg", fn, specs, make_inputs, ("potrf", "trsm"),
     lambda want: "" if np.isnan(np.asarray(want[1])[1]).any()
     else "JAX gave no NaN for the matrix that is not positive definite"),
    ("qr_lu", fn_qr_lu, specs_qr_lu, make_inputs_qr_lu, ("geqrf", "orgqr", "getrf", "trsm"),
     lambda want: "" if (np.asarray(want[12]) == 0).all() else "JAX's det of the matrices with a zero row is not 0"),
    ("eig_svd", fn_eig_svd, specs_eig_svd, make_inputs_eig_svd, ("syevd", "gesdd", "gesvd"),
     lambda want: "" if np.isnan(np.asarray(want[6])[3]).all() and not np.isnan(np.asarray(want[6])[:3]).any()
     else "JAX's singular values are not NaN exactly for the matrix with a NaN"),
    ("eig", fn_eig, specs_eig, make_inputs_eig, ("geev",),
     lambda want: "" if np.isnan(np.asarray(want[0])[3]).all() and not np.isnan(np.asarray(want[0])[:3]).any()
     else "JAX's eigenvalues are not NaN exactly for the matrix with a NaN"),
)


def run_cases(tmp):
    bad = 0
    for case, f, sp, mk, targets, check in CASES:
        for dtype in (np.float32, np.float64):
            for n in (1, 2, 4):
                name = "%s_%s_%d" % (case, np.dtype(dtype).name, n)
                prog = registry.Program(name, f, ((n,),), sp, mk(dtype))
                d = pathlib.Path(tmp) / name
                d.mkdir()
                try:
                    inputs = prog.make_inputs(np.random.default_rng(48))
                    text = prog.lower_hlo((n,), inputs)
                    c = "s" if dtype == np.float32 else "d"
                    for t in targets:
                        if "lapack_%s%s_ffi" % (c, t) not in text:
                            raise oracle.Mismatch("JAX's HLO has no lapack_%s%s_ffi" % (c, t))
                    hlo = d / "model.hlo"
                    hlo.write_text(text)
                    args = oracle.write_inputs(d, inputs)
                    want = prog.execute((n,), inputs)
                    wrong = check(want)
                    if wrong:
                        raise oracle.Mismatch(wrong)
                    worst = oracle.run_and_reference(d, hlo, args, n, want)
                    print("ok   %-20s %d outputs equal JAX's and the reference (worst %.2g of the largest)"
                          % (name, len(want), worst))
                except oracle.Mismatch as e:
                    bad += 1
                    print("FAIL %s: %s" % (name, e))
    return bad


TRSM = """HloModule m
ENTRY e {
  a = f32[4,4]{1,0} parameter(0)
  b = f32[4,2]{1,0} parameter(1)
  ROOT x = f32[4,2]{0,1} custom-call(a, b), custom_call_target="%s", api_version=API_VERSION_TYPED_FFI, backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = %d : ui8, uplo = 76 : ui8}
}
"""


SYEVD = """HloModule m
ENTRY e {
  a = f32[4,4]{1,0} parameter(0)
  b = f32[4,4]{1,0} add(a, a)
  p = (f32[4,4]{0,1}, f32[4]{0}, s32[]) custom-call(b), custom_call_target="lapack_ssyevd_ffi", api_version=API_VERSION_TYPED_FFI
  ROOT v = f32[4]{0} get-tuple-element(p), index=1
}
"""


GESDD = """HloModule m
ENTRY e {
  a = f32[2,4,3]{2,1,0} parameter(0)
  p = (f32[2,4,3]{1,2,0}, f32[2,3]{1,0}, f32[2,4,3]{1,2,0}, f32[2,3,3]{1,2,0}, s32[2]{0}) custom-call(a), custom_call_target="lapack_sgesdd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={mode = %d : ui8}
  ROOT s = f32[2,3]{1,0} get-tuple-element(p), index=1
}
"""

GEEV = """HloModule m
ENTRY e {
  a = f32[4,4]{1,0} parameter(0)
  b = f32[4,4]{1,0} add(a, a)
  p = (f32[4]{0}, f32[4]{0}, c64[4,4]{0,1}, c64[4,4]{0,1}, s32[]) custom-call(b), custom_call_target="lapack_sgeev_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={compute_right = 86 : ui8}
  ROOT v = f32[4]{0} get-tuple-element(p), index=1
}
"""

# An infinity in matrix 1 of each: info -4 and NaN results there, finite ones for matrix 0.
INF = """HloModule m
ENTRY e {
  a = f32[2,3,3]{2,1,0} parameter(0)
  i = f32[] constant(inf)
  z = f32[] constant(0)
  b = f32[1,3,3]{2,1,0} broadcast(i), dimensions={}
  pad = f32[2,3,3]{2,1,0} pad(b, z), padding=1_0x0_0x0_0
  x = f32[2,3,3]{2,1,0} add(a, pad)
  s = (f32[2,3,3]{1,2,0}, f32[2,3]{1,0}, f32[2,3,3]{1,2,0}, f32[2,3,3]{1,2,0}, s32[2]{0}) custom-call(x), custom_call_target="lapack_sgesdd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={mode = 65 : ui8}
  e = (f32[2,3,3]{1,2,0}, f32[2,3]{1,0}, s32[2]{0}) custom-call(x), custom_call_target="lapack_ssyevd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={mode = 86 : ui8, uplo = 76 : ui8}
  s1 = f32[2,3]{1,0} get-tuple-element(s), index=1
  s4 = s32[2]{0} get-tuple-element(s), index=4
  e1 = f32[2,3]{1,0} get-tuple-element(e), index=1
  e2 = s32[2]{0} get-tuple-element(e), index=2
  ROOT t = (f32[2,3]{1,0}, s32[2]{0}, f32[2,3]{1,0}, s32[2]{0}) tuple(s1, s4, e1, e2)
}
"""


def infinities(tmp):
    """The INF module ends, matrix 1's results NaN with info -4, matrix 0's
    equal to NumPy's singular values and eigenvalues."""
    d = pathlib.Path(tmp) / "inf"
    d.mkdir()
    (d / "m.hlo").write_text(INF)
    a = np.random.default_rng(5).standard_normal((2, 3, 3)).astype(np.float32)
    np.save(d / "a.npy", a)
    p = subprocess.run([oracle.TESSEL, "run", str(d / "m.hlo"), "--input", "0=%s" % (d / "a.npy"),
                        "--output-dir", str(d / "out")], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        print("FAIL infinities: exit %d, stderr %r" % (p.returncode, p.stderr[-500:]))
        return 1
    sv, si, ev, ei = (np.load(d / "out" / ("output_%d.npy" % i)) for i in range(4))
    want_sv = np.linalg.svd(a[0].astype(np.float64), compute_uv=False)
    lower = np.tril(a[0]).astype(np.float64)
    want_ev = np.linalg.eigvalsh(lower + np.tril(lower, -1).T)
    wrong = []
    if list(si) != [0, -4] or list(ei) != [0, -4]:
        wrong.append("infos %s %s, expected [0, -4]" % (list(si), list(ei)))
    if not (np.isnan(sv[1]).all() and np.isnan(ev[1]).all()):
        wrong.append("matrix 1's results are not all NaN: %s %s" % (sv[1], ev[1]))
    if not (np.allclose(sv[0], want_sv, rtol=1e-5) and np.allclose(ev[0], want_ev, rtol=1e-5, atol=1e-5)):
        wrong.append("matrix 0: %s %s, NumPy %s %s" % (sv[0], ev[0], want_sv, want_ev))
    if wrong:
        print("FAIL infinities: " + "; ".join(wrong))
        return 1
    print("ok   %-20s info -4 and NaN for the matrix with an infinity, NumPy's values for the other"
          % "infinities")
    return 0


def refusals(tmp):
    bad = 0
    for what, text, want in (
            ("an unknown trans_x", TRSM % ("lapack_strsm_ffi", 88), ':5:8: error: custom-call target "lapack_strsm_ffi"'),
            ("getrf of trsm's form", TRSM % ("lapack_sgetrf_ffi", 78), ':5:8: error: custom-call target "lapack_sgetrf_ffi"'),
            ("gesdd in mode O", GESDD % 79, ':4:3: error: custom-call target "lapack_sgesdd_ffi": mode O (overwrite a) '
             'is not supported'),
            ("gesdd of a wrong U", GESDD % 65, ':4:3: error: custom-call target "lapack_sgesdd_ffi": must give'),
            ("syevd without mode", SYEVD, ':5:3: error: custom-call target "lapack_ssyevd_ffi": backend_config must give '
             'mode'),
            ("geev without compute_left", GEEV, ':5:3: error: custom-call target "lapack_sgeev_ffi": backend_config '
             'must give compute_left and compute_right'),
            ("gees", GEEV.replace("sgeev", "sgees"), ':5:3: error: p: custom-call target "lapack_sgees_ffi" is not '
             'registered')):
        f = pathlib.Path(tmp) / "refuse.hlo"
        f.write_text(text)
        p = subprocess.run([oracle.TESSEL, "run", str(f), "--reference"], capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 2 or want not in p.stderr:
            bad += 1
            print("FAIL %s: exit %d, stderr %r" % (what, p.returncode, p.stderr[-500:]))
        else:
            print("ok   %-20s refused: %s" % (what, p.stderr.strip().splitlines()[0]))
    return bad


def main():
    with tempfile.TemporaryDirectory(prefix="tessel_linalg_") as tmp:
        bad = run_cases(tmp) + refusals(tmp) + infinities(tmp)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
