#!/usr/bin/env python3
"""test_jax_edges.py: JAX programs where tessel once differed from JAX or
moved more than XLA (issue 28's held-out probes), each lowered once a mesh
and checked by test_oracle.py's machinery.

  reduce_precision   lax.reduce_precision to (8, 0), (5, 0), (5, 10),
                     (8, 7), (4, 3) of NaNs of both signs, infinities, -0,
                     ties and values past each range: JAX gives a NaN back
                     as it came at every mantissa_bits; tessel made it +inf
                     at mantissa_bits=0 (device/k_elementwise.c)
  scan_xs            lax.scan over xs sharded on its scanned dim, the
                     carry over both axes of the mesh: the body's
                     dynamic-slice needs xs off the scanned dim, which
                     XLA moves with one all-to-all; tessel all-gathered it
                     twice (3,072 bytes a device where 512 do, on 2x2:
                     partition/reshard.c's swapped_dim). Checked: the
                     collectives serving that dynamic-slice are
                     all-to-alls of XLA's bytes.
  sort_tiled         jnp.sort, argsort and a two-operand lax.sort along
                     each dim of an array tiled on both (2x2, 2x4): the
                     sort dim has no untiled dim to move to, and the whole
                     value was gathered (768 bytes a device on 2x2); now
                     the sort dim alone (partition/spmd_ops.c's spmd_sort).
                     Checked: the bytes of those gathers, by hand.
  narrow_int_sums    s8, u8, s16 and u16 sums, an s16 dot and an s8
                     product over a sharded dim, wrapping past each range
                     as XLA does: under mpirun the ranks' partial sums
                     crossed hosts by MPI_SUM, which Open MPI's op/avx
                     saturates (32767 where JAX gives -28602:
                     coll/mpi_transport.c's user ops now).

Each program runs `tessel run --num-partitions N` on every mesh it lists
against JAX's run on that mesh (test_oracle.py's check_run, its
tolerances), and under `mpirun -np 2` on its largest mesh (check_mpi).
About 10 s. Exit 0 when all hold, 1 otherwise, 77 without JAX.
usage: test_jax_edges.py [--only NAME,...] [-v]
"""
import argparse
import json
import math
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

try:
    import programs as registry  # first: it gives JAX its 8 CPU devices
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P
except ImportError as e:  # pragma: no cover
    print("SKIP: %s" % e)
    sys.exit(77)

import test_oracle  # noqa: E402


def _both(axes):
    return P(axes[0], axes[1] if len(axes) > 1 else None)


# -------------------------------------------------------- reduce_precision
def reduce_precision(x):
    return (lax.reduce_precision(x, 8, 0), lax.reduce_precision(x, 5, 0), lax.reduce_precision(x, 5, 10),
            lax.reduce_precision(x, 8, 7), lax.reduce_precision(x, 4, 3))


def reduce_precision_inputs(rng):
    x = (rng.standard_normal((8, 16)) * 100).astype(np.float32)
    x[0, :8] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 65504.0, 65520.0, 3.0]
    x[1, :8] = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 6.1e-5, 1e38, -1e38, 448.0]
    x[2, :4] = [240.0, 241.0, 1.5, 2.5]
    x[5, 3] = np.nan
    return (x,)


def reduce_precision_specs(axes):
    return (_both(axes),), (_both(axes),) * 5


# ----------------------------------------------------------- narrow_int_sums
def narrow_int_sums(s, b, u, w):
    return (lax.dot(s, s), jnp.sum(s, axis=1, dtype=jnp.int16), jnp.sum(b, axis=1, dtype=jnp.int8),
            jnp.sum(u, axis=1, dtype=jnp.uint8), jnp.sum(w, axis=1, dtype=jnp.uint16),
            jnp.prod(b, axis=1, dtype=jnp.int8), jnp.max(b, axis=1))


def narrow_int_sums_inputs(rng):
    return (rng.integers(-30000, 30000, size=(8, 8), dtype=np.int16),
            rng.integers(-128, 128, size=(8, 8), dtype=np.int8),
            rng.integers(0, 256, size=(8, 8), dtype=np.uint8),
            rng.integers(0, 65536, size=(8, 8), dtype=np.uint16))


def narrow_int_sums_specs(axes):
    t = P(None, axes[0])
    return (t,) * 4, (P(),) * 7


# --------------------------------------------------------------- sort_tiled
def sort_tiled(h, k):
    return jnp.sort(h, axis=0), jnp.argsort(h, axis=1).astype(jnp.int32), lax.sort((k, h), dimension=0, num_keys=1)[1]


def sort_tiled_inputs(rng):
    h = np.round(rng.standard_normal((8, 32)), 1).astype(np.float32)
    h[0, :3] = [np.nan, -0.0, 0.0]
    return h, rng.integers(0, 4, size=(8, 32), dtype=np.int32)


def sort_tiled_specs(axes):
    t = P(axes[0], axes[1])
    return (t, t), (t, t, t)


# ------------------------------------------------------------------ scan_xs
def scan_xs(h0, xs, w):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, jnp.sum(h, axis=1)
    return lax.scan(step, h0, xs)


def scan_xs_specs(axes):
    dp, mp = (axes[0], axes[1]) if len(axes) > 1 else (None, axes[0])
    return ((P(dp, mp), P(axes[-1], dp, None), P(None, mp)), (P(dp, mp), P(axes[-1], None)))


def scan_xs_inputs(rng):
    return ((rng.standard_normal((8, 16))).astype(np.float32), (rng.standard_normal((8, 8, 16))).astype(np.float32),
            (rng.standard_normal((16, 16)) * 0.3).astype(np.float32))


# XLA's all-to-all of xs f32[8,8,16] for the body's dynamic-slice: each
# device's shard (8*8*16*4 / n bytes) less the part it keeps (1/t of it,
# t the devices of the moved axis). 2x2: 1024 - 512; 2x4: 512 - 128.
SCAN_XS_BYTES = {(2, 2): 512, (2, 4): 384}

PROGRAMS = [
    registry.Program("reduce_precision", reduce_precision, ((1,), (2,), (2, 2)), reduce_precision_specs,
                     reduce_precision_inputs),
    registry.Program("scan_xs", scan_xs, ((2,), (2, 2), (2, 4)), scan_xs_specs, scan_xs_inputs),
    registry.Program("sort_tiled", sort_tiled, ((2, 2), (2, 4)), sort_tiled_specs, sort_tiled_inputs),
    registry.Program("narrow_int_sums", narrow_int_sums, ((2,), (4,)), narrow_int_sums_specs,
                     narrow_int_sums_inputs),
]
BY_NAME = {p.name: p for p in PROGRAMS}


def check_scan_xs_bytes(case, d):
    """The collectives that bring xs to the body's dynamic-slice are
    all-to-alls moving XLA's bytes."""
    want = SCAN_XS_BYTES[case.shape]
    plan = d / "bytes.plan"
    test_oracle.tessel(["compile", str(case.hlo), "--num-partitions", str(case.n), "-o", str(plan)])
    got = json.loads(test_oracle.tessel(["plan", str(plan), "--format", "json"]))
    moves = [(c["opcode"], c["bytes_per_device"]) for cl in got["clusters"] for c in cl["collectives"]
             if "dynamic-slice" in (c.get("why") or {}).get("text", "")]
    if not moves or any(k != "all-to-all" for k, _ in moves) or sum(b for _, b in moves) > want:
        raise test_oracle.Mismatch("xs to the dynamic-slice: %s, XLA one all-to-all of %d bytes" % (moves, want))


# sort_tiled's bytes worked out by hand, the sort dim alone gathered for
# each operand of each sort: on 2x2 a shard of f32[8,32] is 256 bytes and
# each dim is split 2 ways (256 a gather): sort 256, argsort 256, the
# two-operand sort 512; on 2x4 a shard is 128, dim 0 split 2 ways (128 a
# gather), dim 1 4 ways (384): 128 + 384 + 256. (XLA's module moves 896
# and 544: all-to-alls that move the sort dim's tiles onto the other dim,
# half a shard each; tessel's reshard has no all-to-all onto a tiled dim.)
SORT_TILED_BYTES = {(2, 2): 1024, (2, 4): 768}


def check_sort_tiled_bytes(case, d):
    """Only the sort dims are gathered (the whole value was: 1536 bytes)."""
    plan = d / "bytes.plan"
    test_oracle.tessel(["compile", str(case.hlo), "--num-partitions", str(case.n), "-o", str(plan)])
    got = json.loads(test_oracle.tessel(["plan", str(plan), "--format", "json"]))
    moves = [(c["opcode"], c["bytes_per_device"]) for cl in got["clusters"] for c in cl["collectives"]]
    if sum(b for _, b in moves) != SORT_TILED_BYTES[case.shape]:
        raise test_oracle.Mismatch("collectives %s, %d bytes a device, the sort dims alone %d"
                                   % (moves, sum(b for _, b in moves), SORT_TILED_BYTES[case.shape]))


EXTRA = {"scan_xs": (check_scan_xs_bytes, SCAN_XS_BYTES), "sort_tiled": (check_sort_tiled_bytes, SORT_TILED_BYTES)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(BY_NAME)
    for n in names:
        if n not in BY_NAME:
            sys.exit("unknown program %s (known: %s)" % (n, ", ".join(BY_NAME)))
    if not pathlib.Path(test_oracle.TESSEL).is_file():
        sys.exit("FAIL: no tessel binary at %s (TESSEL_BIN)" % test_oracle.TESSEL)
    root = pathlib.Path(tempfile.mkdtemp(prefix="tessel-edges-"))
    bad = 0
    for name in names:
        prog = BY_NAME[name]
        biggest = max(prog.mesh_shapes, key=math.prod)
        for shape in prog.mesh_shapes:
            case = test_oracle.Case(prog, shape, root)
            checks = [("run", test_oracle.check_run)]
            if shape == biggest and case.n % 2 == 0:
                checks.append(("mpi", test_oracle.check_mpi))
            if name in EXTRA and shape in EXTRA[name][1]:
                checks.append(("bytes", EXTRA[name][0]))
            for check, fn in checks:
                try:
                    err = fn(case, case.dir)
                    detail = "ok" if err is None else "ok, worst relative error %.2g" % err
                except test_oracle.Mismatch as e:
                    detail, bad = "FAIL: %s" % e, bad + 1
                print("%-17s %-5s %-5s %s" % (name, "x".join(map(str, shape)), check, detail), flush=True)
    if bad:
        print("%d checks failed; models and outputs kept in %s" % (bad, root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
