#!/usr/bin/env python3
"""jax_replay.py: JAX's compiled per-device modules, replayed by tessel.

For every program of the suite below and every mesh it is run on (1, 2, 4
and 8 CPU devices, 1-D and 2-D), JAX lowers and compiles
`jax.jit(f, in_shardings=..., out_shardings=...)`; the text of the compiled
module (`.compile().as_text()`: XLA's SPMD program after every CPU pass,
per-device shapes, collectives, fusions, mesh-axes replica groups, stack
frame tables) is replayed with `tessel run --spmd`, each device given its
own shard of every input (`--input K@D=FILE`), and every device's outputs
are compared with the shards of JAX's own result (`out.addressable_shards`):
within DESIGN.md's tolerances of the output's largest magnitude (f32 1e-4,
bf16 2e-2), integers and random bits exactly.

One JAX process lowers every program; the tessel runs go two at a time.
A few cases (MPI_CASES) are also replayed under `mpirun -np 2` (two hosts,
the collectives over MPI) when mpirun is on the PATH.

  jax_replay.py [-k SUBSTRING] [--keep DIR] [--list]

Needs TESSEL_BIN (the tessel binary) and JAX on 8 host devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu), as
tests/CMakeLists.txt's TESSEL_JAX_TEST_ENV sets them.
"""
import argparse
import concurrent.futures
import functools
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

TOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-3, "float64": 1e-5}

# ---- the programs ---------------------------------------------------------
# Each program: a function, its global inputs (NumPy, drawn from a fixed
# seed), the meshes it runs on, and its input and output specs as functions
# of the mesh's axis names: `D` is the data axis and `M` the model axis
# (1-D meshes: D none, M the one axis; 2-D: D the first, M the second).

MESHES_ALL = [(1,), (2,), (4,), (8,), (2, 2), (2, 4)]


def axes_of(shape):
    return ("x",) if len(shape) == 1 else ("x", "y")


def roles(shape):
    return {"D": None, "M": "x"} if len(shape) == 1 else {"D": "x", "M": "y"}


def spec(shape, *dims):
    r = roles(shape)
    return P(*[None if d is None else r[d] for d in dims])


def rng(seed=0):
    return np.random.default_rng(seed)


def gelu(x):
    return 0.5 * x * (1 + jnp.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def mlp(x, w1, w2):
    return gelu(x @ w1) @ w2


def layer_norm(x, g, b):
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) * (x - m), axis=-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def attention(x, g, b, wq, wk, wv, wo, heads=4):
    """Pre-norm causal self-attention with a residual; x [B,S,E]. Low
    precision inputs compute their matmuls with f32 accumulation."""
    acc = jnp.float32
    h = layer_norm(x.astype(acc), g.astype(acc), b.astype(acc)).astype(x.dtype)
    B, S, E = x.shape
    dh = E // heads

    def proj(w):
        y = jnp.einsum("bse,ef->bsf", h, w, preferred_element_type=acc)
        return y.reshape(B, S, heads, dh)

    q, k, v = proj(wq), proj(wk), proj(wv)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dh).astype(np.float32)
    mask = jnp.tril(jnp.ones((S, S), bool))
    s = jnp.where(mask, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(B, S, E).astype(x.dtype)
    return (x.astype(acc) + jnp.einsum("bse,ef->bsf", o, wo, preferred_element_type=acc)).astype(x.dtype)


def attention_args(dtype, seed):
    r = rng(seed)
    E = 16
    a = [r.standard_normal((2, 8, E)), 1 + 0.1 * r.standard_normal(E), 0.1 * r.standard_normal(E)]
    a += [r.standard_normal((E, E)) / 4 for _ in range(4)]
    return [np.asarray(v, np.float32).astype(dtype) for v in a]


def conv(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + b)


def reduce_sharded(x):
    return jnp.sum(x, axis=1), jnp.max(x, axis=0), jnp.mean(x * x)


def scan_rnn(h0, xs, w, u):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, h.sum(axis=1)
    return lax.scan(step, h0, xs)


def topk(x):
    v, i = lax.top_k(x, 3)
    return v, i, jnp.argmax(x, axis=1).astype(jnp.int32), jnp.argmin(x, axis=0).astype(jnp.int32)


def random_bits(key, x):
    k = jax.random.wrap_key_data(key)
    k1, k2 = jax.random.split(k)
    bits = jax.random.bits(k1, x.shape, jnp.uint32)
    return bits, x + jax.random.uniform(k2, x.shape, jnp.float32)


def uneven_fn(mesh, shape):
    """Sizes the mesh does not divide inside the program: 5 columns cut
    over M (XLA pads them), then a reduction over them and a matmul."""
    def f(x, w):
        y = lax.with_sharding_constraint(jnp.tanh(x[:, 1:]), NamedSharding(mesh, spec(shape, None, "M")))
        return jnp.sum(y * y, axis=1), y @ w
    return f


def collectives_fn(mesh, ax):
    """shard_map over axis `ax`: psum_scatter, all_gather, all_to_all,
    ppermute and psum of one [n*2, 4] block per device."""
    n = mesh.shape[ax]
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(a):
        rs = lax.psum_scatter(a, ax, scatter_dimension=0, tiled=True)
        ag = lax.all_gather(a, ax, axis=1, tiled=True)
        aa = lax.all_to_all(a, ax, 0, 0, tiled=True)
        pp = lax.ppermute(a, ax, perm)
        ps = lax.psum(a * a, ax)
        return rs, ag, aa, pp, ps

    other = [a for a in mesh.axis_names if a != ax]
    lead = P((*other, ax)) if other else P(ax)
    out = (lead, lead, lead, lead, lead)
    return shard_map(body, mesh=mesh, in_specs=lead, out_specs=out, check_vma=False)


class Program:
    def __init__(self, name, fn, args, in_specs, out_specs, meshes=MESHES_ALL, make=None):
        self.name, self.fn, self.args = name, fn, args
        self.in_specs, self.out_specs, self.meshes, self.make = in_specs, out_specs, meshes, make


def programs():
    r = rng(1)
    f32 = np.float32
    ps = []
    ps.append(Program(
        "mlp", mlp,
        [r.standard_normal((8, 16)).astype(f32), (r.standard_normal((16, 32)) / 4).astype(f32),
         (r.standard_normal((32, 16)) / 4).astype(f32)],
        lambda s: (spec(s, "D", None), spec(s, None, "M"), spec(s, "M", None)),
        lambda s: spec(s, "D", None)))
    for dt, seed in (("float32", 2), ("bfloat16", 3)):
        dtype = jnp.bfloat16 if dt == "bfloat16" else np.float32
        ps.append(Program(
            "attention_" + ("bf16" if dt == "bfloat16" else "f32"), attention, attention_args(dtype, seed),
            lambda s: (spec(s, "D", None, None), P(), P(), spec(s, None, "M"), spec(s, None, "M"),
                       spec(s, None, "M"), spec(s, "M", None)),
            lambda s: spec(s, "D", None, None)))
    ps.append(Program(
        "conv", conv,
        [r.standard_normal((4, 6, 6, 3)).astype(f32), (r.standard_normal((3, 3, 3, 8)) / 3).astype(f32),
         r.standard_normal(8).astype(f32)],
        lambda s: (spec(s, "D", None, None, None), spec(s, None, None, None, "M"), spec(s, "M")),
        lambda s: spec(s, "D", None, None, "M")))
    ps.append(Program(
        "reduce", reduce_sharded, [r.standard_normal((8, 16)).astype(f32)],
        lambda s: (spec(s, "D", "M"),),
        lambda s: (spec(s, "D"), spec(s, "M"), P())))
    ps.append(Program(
        "scan", scan_rnn,
        [r.standard_normal((8, 8)).astype(f32), r.standard_normal((5, 8, 8)).astype(f32),
         (r.standard_normal((8, 8)) / 3).astype(f32), (r.standard_normal((8, 8)) / 3).astype(f32)],
        lambda s: (spec(s, "M", None), spec(s, None, "M", None), P(), P()),
        lambda s: (spec(s, "M", None), spec(s, None, "M"))))
    ps.append(Program(
        "topk", topk, [r.standard_normal((8, 32)).astype(f32)],
        lambda s: (spec(s, "M", None),),
        lambda s: (spec(s, "M", None), spec(s, "M", None), spec(s, "M"), P())))
    ps.append(Program(
        "random", random_bits, [np.array([7, 42], np.uint32), r.standard_normal((8, 16)).astype(f32)],
        lambda s: (P(), spec(s, "D", "M")),
        lambda s: (spec(s, "D", "M"), spec(s, "D", "M"))))
    ps.append(Program(
        "uneven", None, [r.standard_normal((8, 6)).astype(f32), r.standard_normal((5, 3)).astype(f32)],
        lambda s: (P(), P()),
        lambda s: (spec(s, "M"), P()),
        meshes=[(2,), (4,), (2, 2)], make=uneven_fn))
    ps.append(Program(
        "collectives", None, [],
        None, None, meshes=[(2,), (4,), (8,), (2, 2), (2, 4)], make=collectives_fn))
    return ps


# ---- lowering and expected shards -----------------------------------------

def make_mesh(shape):
    n = int(np.prod(shape))
    return Mesh(np.array(jax.devices()[:n]).reshape(shape), axes_of(shape))


def case_name(p, shape):
    return p.name + "_" + "x".join(map(str, shape))


def disk(a):
    a = np.asarray(a)
    if a.dtype.name in ("bfloat16", "float16"):
        return a.astype(np.float32)
    return a


def prepare(p, shape, root):
    """Lower, compile and run one case; write DIR/module.hlo, DIR/in_<k>.dev<d>.npy
    and DIR/want_<i>.dev<d>.npy. Returns (dir, inputs, ndev, dtypes of outputs)."""
    mesh = make_mesh(shape)
    n = mesh.size
    if p.make and p.in_specs is None:
        ax = mesh.axis_names[-1]
        f = p.make(mesh, ax)
        lead = P((*mesh.axis_names[:-1], ax)) if len(mesh.axis_names) > 1 else P(ax)
        in_sh = (NamedSharding(mesh, lead),)
        out_sh = tuple(NamedSharding(mesh, lead) for _ in range(5))
        args = [rng(5).standard_normal((2 * n * n, 4)).astype(np.float32)]
    else:
        f = p.make(mesh, shape) if p.make else p.fn
        in_sh = tuple(NamedSharding(mesh, s) for s in p.in_specs(shape))
        o = p.out_specs(shape)
        out_sh = tuple(NamedSharding(mesh, s) for s in o) if isinstance(o, tuple) else NamedSharding(mesh, o)
        args = p.args
    jf = jax.jit(f, in_shardings=in_sh, out_shardings=out_sh, keep_unused=True)
    compiled = jf.lower(*args).compile()
    text = compiled.as_text()
    # Partition p of the compiled program is device_assignment[p].
    order = list(compiled._executable.xla_executable.local_devices())
    pid = {d: i for i, d in enumerate(order)}
    d = os.path.join(root, case_name(p, shape))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "module.hlo"), "w") as fh:
        fh.write(text)
    inputs = []
    placed = []
    for k, (a, sh) in enumerate(zip(args, in_sh)):
        arr = jax.device_put(a, sh)
        placed.append(arr)
        for s in arr.addressable_shards:
            path = os.path.join(d, "in_%d.dev%d.npy" % (k, pid[s.device]))
            np.save(path, disk(s.data))
            inputs.append("--input=%d@%d=%s" % (k, pid[s.device], path))
    out = compiled(*placed)
    leaves = jax.tree_util.tree_leaves(out)
    dtypes = []
    for i, leaf in enumerate(leaves):
        dtypes.append(leaf.dtype.name)
        for s in leaf.addressable_shards:
            np.save(os.path.join(d, "want_%d.dev%d.npy" % (i, pid[s.device])), disk(s.data))
    return d, inputs, n, dtypes


# ---- replay and compare ---------------------------------------------------

def compare(d, n, dtypes, out="out"):
    errs = []
    for i, dt in enumerate(dtypes):
        for g in range(n):
            want = np.load(os.path.join(d, "want_%d.dev%d.npy" % (i, g)))
            path = os.path.join(d, out, "output_%d.device_%d.npy" % (i, g))
            if not os.path.exists(path):
                errs.append("output %d device %d: no file %s" % (i, g, path))
                continue
            got = np.load(path)
            if got.shape != want.shape:
                errs.append("output %d device %d: shape %s, JAX's shard %s" % (i, g, got.shape, want.shape))
                continue
            if dt in TOL:
                scale = max(float(np.max(np.abs(want.astype(np.float64)))), 1e-30) if want.size else 1
                diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
                worst = float(np.max(diff)) / scale if want.size else 0
                if not np.all(np.isfinite(got) == np.isfinite(want)) or worst > TOL[dt]:
                    errs.append("output %d device %d (%s): relative error %.3g > %g" % (i, g, dt, worst, TOL[dt]))
            elif not np.array_equal(got, want):
                bad = int(np.sum(got != want))
                errs.append("output %d device %d (%s): %d of %d elements differ" % (i, g, dt, bad, want.size))
    return errs


# Cases also replayed under `mpirun -np 2` (two hosts of n/2 devices, the
# collectives over MPI between them).
MPI_CASES = ("mlp_2x4", "collectives_2x4", "topk_4")


def replay(tessel, d, inputs, n, dtypes, mpi=False):
    out = "out_mpi" if mpi else "out"
    cmd = [tessel, "run", os.path.join(d, "module.hlo"), "--spmd", "--num-partitions", str(n),
           "--output-dir", os.path.join(d, out)] + inputs
    env = None
    if mpi:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "tcp,self", "-np", "2"] + cmd
        # Open MPI's own allocations leak by LeakSanitizer's count (as in replay.sh).
        asan = os.environ.get("ASAN_OPTIONS", "")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   ASAN_OPTIONS=(asan + ":" if asan else "") + "detect_leaks=0",
                   PATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin") + os.pathsep +
                   os.environ.get("PATH", ""))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        return ["%stessel exit %d: %s" % ("mpirun -np 2 " if mpi else "", r.returncode, r.stderr.strip()[-2000:])]
    return ["mpirun -np 2: " + e for e in compare(d, n, dtypes, out)] if mpi else compare(d, n, dtypes, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--keep", help="keep the cases in this directory")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    tessel = os.environ.get("TESSEL_BIN", "tessel")
    if len(jax.devices()) < 8:
        sys.exit("jax_replay.py: JAX sees %d devices, wants 8 "
                 "(XLA_FLAGS=--xla_force_host_platform_device_count=8)" % len(jax.devices()))
    root = a.keep or tempfile.mkdtemp(prefix="tessel-jax-replay.")
    cases = [(p, s) for p in programs() for s in p.meshes if a.k in case_name(p, s)]
    if a.list:
        print("\n".join(case_name(p, s) for p, s in cases))
        return 0
    failed = 0
    futs = []
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for p, s in cases:
                prep = prepare(p, s, root)
                futs.append((case_name(p, s), pool.submit(replay, tessel, *prep)))
                if case_name(p, s) in MPI_CASES and shutil.which("mpirun"):
                    futs.append((case_name(p, s) + " (mpirun)", pool.submit(replay, tessel, *prep, mpi=True)))
            for name, fut in futs:
                errs = fut.result()
                print("%-26s %s" % (name, "ok" if not errs else "FAIL"))
                for e in errs:
                    print("    " + e)
                failed += bool(errs)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("%d of %d replays gave JAX's shards" % (len(futs) - failed, len(futs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
