#!/usr/bin/env python3
"""test_replay_suite.py: JAX's compiled per-device module of every program of
tests/jax/programs.py, replayed with `tessel run --spmd`, gives each device
JAX's own shard (issue 28).

For each program, on the mesh of its list with the most devices, JAX lowers
and compiles `jax.jit(fn, in_shardings, out_shardings, keep_unused=True)`;
each device gets its shard of every input, and every device's outputs are
compared with JAX's `addressable_shards` by tests/e2e/jax_replay.py's
`replay` and `compare` (DESIGN.md's tolerances, integers and random bits
exactly). jax_replay.py covers its own programs on every mesh; this file
covers the registry's (training steps, MoE, the conv net with batch norm,
the losses) on one mesh each.

  test_replay_suite.py [-k SUBSTRING]
Environment: TESSEL_BIN and TESSEL_JAX_TEST_ENV's XLA_FLAGS, JAX_PLATFORMS.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "e2e")]

import numpy as np  # noqa: E402

import programs  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import jax  # noqa: E402
import jax_replay  # noqa: E402


def prepare(p, shape, root):
    """Compile p on `shape`, write its module, input shards and JAX's output
    shards in jax_replay's layout; return replay's arguments."""
    inputs = p.make_inputs(np.random.default_rng(0))
    mesh = p.mesh(shape)
    with jax.set_mesh(mesh):
        jf = jax.jit(p.fn, in_shardings=p.in_shardings(shape), out_shardings=p.out_shardings(shape),
                     keep_unused=True)
        compiled = jf.lower(*inputs).compile()
        order = list(compiled._executable.xla_executable.local_devices())
        pid = {d: i for i, d in enumerate(order)}
        d = os.path.join(root, "%s_%s" % (p.name, "x".join(map(str, shape))))
        os.makedirs(d)
        with open(os.path.join(d, "module.hlo"), "w") as fh:
            fh.write(compiled.as_text())
        flags, placed = [], []
        for k, (a, sh) in enumerate(zip(inputs, p.in_shardings(shape))):
            arr = jax.device_put(a, sh)
            placed.append(arr)
            for s in arr.addressable_shards:
                path = os.path.join(d, "in_%d.dev%d.npy" % (k, pid[s.device]))
                np.save(path, jax_replay.disk(s.data))
                flags.append("--input=%d@%d=%s" % (k, pid[s.device], path))
        out = compiled(*placed)
    dtypes = []
    for i, leaf in enumerate(jax.tree_util.tree_leaves(out)):
        dtypes.append(leaf.dtype.name)
        for s in leaf.addressable_shards:
            np.save(os.path.join(d, "want_%d.dev%d.npy" % (i, pid[s.device])), jax_replay.disk(s.data))
    return d, flags, mesh.size, dtypes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    tessel = os.environ.get("TESSEL_BIN", "tessel")
    root = tempfile.mkdtemp(prefix="tessel-replay-suite.")
    failed = n = 0
    try:
        for p in programs.PROGRAMS:
            if a.k not in p.name:
                continue
            shape = max(p.mesh_shapes, key=math.prod)
            errs = jax_replay.replay(tessel, *prepare(p, shape, root))
            n += 1
            failed += bool(errs)
            print("%-14s %-5s %s" % (p.name, "x".join(map(str, shape)), "ok" if not errs else "FAIL"))
            for e in errs:
                print("    " + e)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("%d of %d programs: every device's replay equals JAX's shard" % (n - failed, n))
    return 1 if failed or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
