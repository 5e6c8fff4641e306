"""test_grad_heldout.py: `tessel grad` on JAX programs written after the
fact by an outside-style review (docs/cli.md, `tessel grad`), each where
tessel's gradient once differed from JAX's or was refused:

  clamp_ties   lax.clamp with the operand on its bounds: JAX's rule is
               strict (no operand gets the gradient at a tie), tessel
               gave it to the operand;
  scatter_mul  x.at[i].mul(u, unique_indices=True): refused ("only
               scatters that add or overwrite");
  scatter_max  jax.ops.segment_max and x.at[i].max / .min, ties between
               updates and with the operand, an index out of range:
               refused ("only scatters that add or overwrite");
  scatter_oob  .at[i].add / .set with an index past the end (JAX drops
               the update, and its gradient is 0): tessel gathered the
               adjoint at the clamped index;
  cumprod      jnp.cumprod (a reduce-window by multiply), with zeros,
               and lax.cumlogsumexp (by JAX's logaddexp) over a range no
               exponential holds: refused ("only add, max and min pooling");
  sort_sgd     an SGD step of a sort loss (donated parameters): the run
               crashed (device/k_sort.c's nested run took the entry's
               donations).

And one refusal: a loss through shard_map (psum in a manual region),
which tessel grad does not differentiate, is refused with exit status 2
naming shard_map and the way round it (JAX's own value_and_grad lowered).

For each program, on 1 and 2 devices (its batch split): `tessel grad`
run partitioned equals jax.value_and_grad; `tessel grad --sgd 0.1` run
partitioned equals p - 0.1 * JAX's gradient; and on 2 devices `tessel
grad --jvp` equals jax.jvp (random tangents). Tolerances are test_oracle.py's.

usage: test_grad_heldout.py [NAME,...]     exit 0 when all hold, 1 otherwise
"""
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

import programs as registry  # noqa: E402  (first: it sets XLA_FLAGS for JAX)
import test_oracle as oracle  # noqa: E402
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESHES = ((1,), (2,))


def clamp_ties(x, lo):
    # x on lo, on lo + 1 and between; a scalar bound too
    return jnp.sum(lax.clamp(lo, x, lo + 1) * 1.5) + jnp.sum(lax.clamp(-1.0, x, 1.0) ** 2)


def clamp_ties_inputs(rng):
    x = (np.round(rng.standard_normal((4, 6)) * 2) / 2).astype(np.float32)
    lo = x.copy()
    lo[0] -= 0.25
    lo[1] -= 1.0
    x[2, :3] = [-1.0, 1.0, 0.5]
    return x, lo


def scatter_mul(x, u):
    return jnp.sum(jnp.sin(x.at[jnp.array([3, 0, 6])].mul(u, unique_indices=True)))


def scatter_oob(x, u):
    # row 9 of 8 is dropped by both scatters; the second index pair is out
    # of range in its column only
    a = x.at[jnp.array([1, 9, 1, 4])].add(u)
    b = x.at[jnp.array([0, 5, 7, 2]), jnp.array([0, 1, 4, 2])].set(u[:, 0])
    return jnp.sum(a ** 2) + jnp.sum(jnp.cos(b))


def scatter_max(x, u):
    a = x.at[jnp.array([0, 0, 2, 9])].max(u)        # rows 0 and 1 of u tie in places
    b = x.at[jnp.array([1, 1, 4, 3])].min(u * 0.5)
    c = jax.ops.segment_max(u, jnp.array([2, 0, 2, 1]), num_segments=4)   # segment 3 empty
    return jnp.sum(a * jnp.arange(1.0, 4.0)) + jnp.sum(jnp.sin(b)) + jnp.sum(jnp.maximum(c, -3.0) ** 2)


def scatter_max_inputs(rng):
    x = (np.round(rng.standard_normal((5, 3)) * 2) / 2).astype(np.float32)
    u = (np.round(rng.standard_normal((4, 3)) * 2) / 2).astype(np.float32)
    u[1, :2] = u[0, :2]
    x[0, 2] = u[0, 2]
    return x, u


def cumprod(x):
    z = jnp.where(jnp.abs(x) < 0.4, 0.0, x)  # a few zeros, two in some columns
    return (jnp.sum(jnp.cumprod(z, axis=0) * 0.5) + jnp.sum(lax.cumprod(1 + 0.1 * x, axis=1, reverse=True) ** 2)
            + jnp.sum(jnp.sin(lax.cumlogsumexp(x * 60, axis=0))) + jnp.sum(lax.cumlogsumexp(x, axis=1, reverse=True)))


def sort_sgd(x, w):
    return jnp.sum(jnp.sort(x * w, axis=1) * jnp.arange(6.0)) + jnp.sum(lax.top_k(x, 2)[0] ** 2)


def batch(axes):
    return P(axes[0])


PROGRAMS = [
    registry.Program("clamp_ties", clamp_ties, MESHES, lambda a: ((batch(a), batch(a)), P()),
                     clamp_ties_inputs, grad_wrt=(0, 1)),
    registry.Program("scatter_mul", scatter_mul, MESHES, lambda a: ((P(), P()), P()),
                     lambda r: (registry._normal(r, (8, 3)), registry._normal(r, (3, 3))), grad_wrt=(0, 1)),
    registry.Program("scatter_max", scatter_max, MESHES, lambda a: ((P(), P()), P()), scatter_max_inputs,
                     grad_wrt=(0, 1)),
    registry.Program("scatter_oob", scatter_oob, MESHES, lambda a: ((P(), P()), P()),
                     lambda r: (registry._normal(r, (8, 3)), registry._normal(r, (4, 3))), grad_wrt=(0, 1)),
    registry.Program("cumprod", cumprod, MESHES, lambda a: ((P(None, a[0]),), P()),
                     lambda r: (registry._normal(r, (5, 4)),), grad_wrt=(0,)),
    registry.Program("sort_sgd", sort_sgd, MESHES, lambda a: ((batch(a), P()), P()),
                     lambda r: (registry._normal(r, (4, 6)), registry._normal(r, (6,))), grad_wrt=(0, 1)),
]


def smap_loss(w, x):
    def local(w, x):
        return jax.lax.psum(jnp.tanh(x @ w), "x")
    y = jax.shard_map(local, in_specs=(P(None, "x"), P()), out_specs=P(), check_vma=False)(w, x)
    return jnp.sum(y ** 2)


def check_refusal(root):
    """tessel grad of a shard_map loss: exit 2, the reason named."""
    prog = registry.Program("smap", smap_loss, ((2,),), lambda a: ((P(None, a[0]), P()), P()),
                            lambda r: (registry._normal(r, (4, 6)), registry._normal(r, (3, 4))), grad_wrt=(0,))
    ins = prog.make_inputs(np.random.default_rng(1))
    (root / "smap.hlo").write_text(prog.lower_hlo((2,), ins))
    p = subprocess.run([oracle.TESSEL, "grad", str(root / "smap.hlo"), "--wrt", "0", "-o", str(root / "g.hlo")],
                       capture_output=True, text=True)
    if p.returncode != 2 or "does not differentiate through shard_map" not in p.stderr or (root / "g.hlo").exists():
        raise oracle.Mismatch("shard_map loss: exit %d, %s" % (p.returncode, p.stderr.strip()[-400:]))
    return 0.0


def outputs(d):
    out, k = [], 0
    while (d / ("output_%d.npy" % k)).exists():
        out.append(np.load(d / ("output_%d.npy" % k)))
        k += 1
    return out


def check_jvp(case):
    prog, d = case.prog, case.dir / "jvp"
    d.mkdir()
    wrt = ",".join(map(str, prog.grad_wrt))
    oracle.tessel(["grad", str(case.hlo), "--jvp", "--wrt", wrt, "-o", str(d / "jvp.hlo")])
    rng = np.random.default_rng(5)
    tans = [rng.standard_normal(case.inputs[i].shape).astype(case.inputs[i].dtype) for i in prog.grad_wrt]
    args = list(case.input_args)
    for j, t in enumerate(tans):
        np.save(d / ("t%d.npy" % j), t)
        args += ["--input", "%d=%s" % (len(case.inputs) + j, d / ("t%d.npy" % j))]
    oracle.tessel(["run", str(d / "jvp.hlo"), "--num-partitions", str(case.n), "--output-dir", str(d)] + args)

    def f(*ps):
        xs = list(case.inputs)
        for i, p in zip(prog.grad_wrt, ps):
            xs[i] = p
        return prog.fn(*xs)
    y, ty = jax.jit(lambda ps, ts: jax.jvp(f, ps, ts))(tuple(case.inputs[i] for i in prog.grad_wrt), tuple(tans))
    return oracle.compare_all(outputs(d), [np.asarray(y), np.asarray(ty)])


def check_sgd(case):
    prog, d = case.prog, case.dir / "sgd"
    d.mkdir()
    wrt = ",".join(map(str, prog.grad_wrt))
    oracle.tessel(["grad", str(case.hlo), "--wrt", wrt, "--sgd", "0.1", "-o", str(d / "step.hlo")])
    oracle.tessel(["run", str(d / "step.hlo"), "--num-partitions", str(case.n), "--output-dir", str(d)]
                  + case.input_args)
    want = case.expected("grad")
    new = [(case.inputs[i].astype(np.float64) - 0.1 * g.astype(np.float64)).astype(g.dtype)
           for i, g in zip(prog.grad_wrt, want[1:])]
    got = outputs(d)
    if len(got) != 1 + len(new):
        raise oracle.Mismatch("%d outputs, expected %d" % (len(got), 1 + len(new)))
    return oracle.compare_all(got, [want[0]] + new)


CHECKS = (("grad", lambda case: oracle.check_grad(case, case.dir)), ("jvp", check_jvp), ("sgd", check_sgd))


def main():
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else [p.name for p in PROGRAMS]
    bad = []
    t_all = time.time()
    with tempfile.TemporaryDirectory(prefix="tessel-grad-heldout-") as t:
        root = pathlib.Path(t)
        for prog in PROGRAMS:
            if prog.name not in names:
                continue
            for shape in prog.mesh_shapes:
                case = oracle.Case(prog, shape, root)
                for check, fn in CHECKS:
                    if check == "jvp" and case.n != 2:
                        continue
                    t0 = time.time()
                    try:
                        err = fn(case)
                        status, detail = "ok", "worst relative error %.2g" % err
                    except oracle.Mismatch as e:
                        status, detail = "FAIL", str(e)
                        bad.append("%s on %d, %s" % (prog.name, case.n, check))
                    print("%-4s %-12s %d %-4s %4.1fs  %s" % (status, prog.name, case.n, check, time.time() - t0, detail),
                          flush=True)
        if len(sys.argv) == 1 or "smap" in names:
            try:
                check_refusal(root)
                print("ok   smap         2 refused with exit 2, shard_map named")
            except oracle.Mismatch as e:
                print("FAIL smap: %s" % e)
                bad.append("smap refusal")
    print("%d failures in %.0f s" % (len(bad), time.time() - t_all))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
