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
Each on 1, 2 and 4 devices with the batch split, `tessel run` and `tessel
run --reference` equal to JAX's own execution (test_oracle.compare's
tolerance); and the lowered HLO holds the LAPACK targets (so the test
fails if JAX stops emitting them). Then a trsm whose backend_config gives
an unknown transpose, a getrf of the wrong form, and an eigendecomposition
(syevd, not run), are refused naming the target (exit 2). Exit 0 when all
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


def refusals(tmp):
    bad = 0
    for what, text, want in (
            ("an unknown trans_x", TRSM % ("lapack_strsm_ffi", 88), 'custom-call target "lapack_strsm_ffi"'),
            ("getrf of trsm's form", TRSM % ("lapack_sgetrf_ffi", 78), 'custom-call target "lapack_sgetrf_ffi"'),
            ("syevd", SYEVD, '"lapack_ssyevd_ffi" is not registered')):
        f = pathlib.Path(tmp) / "refuse.hlo"
        f.write_text(text)
        p = subprocess.run([oracle.TESSEL, "run", str(f), "--reference"], capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 2 or want not in p.stderr or ":5:" not in p.stderr:
            bad += 1
            print("FAIL %s: exit %d, stderr %r" % (what, p.returncode, p.stderr[-500:]))
        else:
            print("ok   %-20s refused: %s" % (what, p.stderr.strip().splitlines()[0]))
    return bad


def main():
    with tempfile.TemporaryDirectory(prefix="tessel_linalg_") as tmp:
        bad = run_cases(tmp) + refusals(tmp)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
