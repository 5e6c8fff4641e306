"""jax_shardy.py: tessel reads the shardings JAX writes (docs/hlo-text.md,
"Shardy"), checked against JAX itself.

Each case is a jitted function with NamedSharding in/out shardings (meshes
of 4 CPU devices, 1-D and 2-D) or a shard_map (psum, all_gather, ppermute,
all_to_all inside; fully manual, and partially manual with axis_names=),
lowered by JAX (`.lower(...).as_text("hlo")`). The GSPMD `sharding=`
attributes JAX also writes are stripped, so only Shardy's remain. Then:
- `tessel run --num-partitions 4` on the same inputs equals JAX's own
  execution (DESIGN.md's tolerance: 1e-4 of the largest magnitude, f32);
- the plan's input split trees and output concat trees give each device
  the block JAX's sharding gives it (Sharding.devices_indices_map).

Run with build/jax-venv/bin/python and TESSEL_JAX_TEST_ENV
(tests/CMakeLists.txt): XLA_FLAGS with 8 host devices, JAX_PLATFORMS=cpu,
TESSEL_BIN the command line.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

TESSEL = os.environ["TESSEL_BIN"]
DEVS = jax.devices()[:4]
MESH1 = Mesh(np.array(DEVS), ("x",))
MESH2 = Mesh(np.array(DEVS).reshape(2, 2), ("x", "y"))


def strip_gspmd(text):
    """Remove every `, sharding={...}` (balanced braces) from the text."""
    out, i = [], 0
    for m in re.finditer(r", sharding=\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 0, m.end() - 1
        while True:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    out.append(text[i:])
    return "".join(out)


def leaves(tree):
    """The leaves of a plan tree (docs/plan.md), runs of evenly spaced
    leaves ("leaves": k, "devices_step", "offset_step") spelled out."""
    if tree.get("leaf"):
        yield tree
        return
    if "leaves" in tree:
        for k in range(tree["leaves"]):
            yield {"devices": [d + k * tree["devices_step"] for d in tree["devices"]],
                   "offset": [o + k * s for o, s in zip(tree["offset"], tree["offset_step"])],
                   "shape": tree["shape"]}
        return
    for c in tree["children"]:
        yield from leaves(c)


def blocks(tree, shape):
    """device -> (offsets, sizes) from a plan's split or concat tree."""
    got = {}
    for leaf in leaves(tree):
        devs = range(4) if leaf["devices"] == "all" else leaf["devices"]
        for d in devs:
            got[d] = (tuple(leaf["offset"]), tuple(leaf["shape"]))
    if not got:  # a scalar or an unsplit value
        got = {d: ((0,) * len(shape), tuple(shape)) for d in range(4)}
    return got


def jax_blocks(sharding, shape):
    want = {}
    for dev, idx in sharding.devices_indices_map(tuple(shape)).items():
        off = tuple((s.start or 0) for s in idx)
        size = tuple(((s.stop if s.stop is not None else n) - (s.start or 0)) for s, n in zip(idx, shape))
        want[dev.id] = (off, size)
    return want


def check(name, f, args, in_s, out_s):
    jitted = jax.jit(f, in_shardings=in_s, out_shardings=out_s)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(args, in_s)]
    text = jitted.lower(*structs).as_text("hlo")
    assert "xla.sdy" in text, name + ": JAX wrote no Shardy attributes"
    hlo = strip_gspmd(text)
    assert "sharding={" not in hlo, name
    res = jitted(*[jax.device_put(a, s) for a, s in zip(args, in_s)])
    wants = [np.asarray(w) for w in (res if isinstance(res, tuple) else (res,))]
    outs = list(out_s) if isinstance(out_s, tuple) else [out_s]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, name + ".hlo")
        open(model, "w").write(hlo)
        cmd = [TESSEL, "run", model, "--num-partitions", "4", "--output-dir", os.path.join(tmp, "out")]
        for i, a in enumerate(args):
            p = os.path.join(tmp, "in%d.npy" % i)
            np.save(p, a)
            cmd += ["--input", "%d=%s" % (i, p)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr, "%s: %s" % (name, r.stderr)
        for i, want in enumerate(wants):
            got = np.load(os.path.join(tmp, "out", "output_%d.npy" % i))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(np.abs(want).max(), 1e-30),
                                       err_msg="%s output %d" % (name, i))
        r = subprocess.run([TESSEL, "plan", model, "--num-partitions", "4", "--format", "json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, "%s: %s" % (name, r.stderr)
        c = json.loads(r.stdout)["clusters"][0]
    for i, (a, s) in enumerate(zip(args, in_s)):
        assert blocks(c["inputs"][i]["split_tree"], a.shape) == jax_blocks(s, a.shape), \
            "%s: input %d is not cut as JAX cuts it" % (name, i)
    for i, (want, s) in enumerate(zip(wants, outs)):
        assert blocks(c["outputs"][i]["concat_tree"], want.shape) == jax_blocks(s, want.shape), \
            "%s: output %d is not put together as JAX's" % (name, i)
    print("%s: equals JAX, shardings as JAX's" % name)


def main():
    rng = np.random.default_rng(28)

    def arr(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    ns1 = lambda *spec: NamedSharding(MESH1, P(*spec))
    ns2 = lambda *spec: NamedSharding(MESH2, P(*spec))

    # jit with NamedShardings, 1-D and 2-D meshes
    check("mlp_1d", lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, [arr(8, 16), arr(16, 8), arr(8, 4)],
          [ns1(None, None), ns1(None, "x"), ns1("x", None)], ns1(None, None))
    check("dot_2d", lambda a, b: a @ b, [arr(8, 8), arr(8, 4)], [ns2("x", "y"), ns2("y", None)], ns2("x", None))
    check("rows_to_cols", lambda a: jnp.sin(a) * 2, [arr(8, 8)], [ns2(("x", "y"), None)], ns2(None, ("y", "x")))

    # shard_map, fully manual
    def sm(body, mesh, in_specs, out_specs, **kw):
        return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **kw)

    check("psum_2d", sm(lambda a, b: jax.lax.psum(a @ b, "y"), MESH2, (P("x", "y"), P("y", None)), P("x", None)),
          [arr(8, 8), arr(8, 4)], [ns2("x", "y"), ns2("y", None)], ns2("x", None))
    check("all_gather", sm(lambda a: jax.lax.all_gather(a, "x", tiled=True) * 3.0, MESH1, P("x", None), P(None, None),
                            check_vma=False),
          [arr(8, 4)], [ns1("x", None)], ns1(None, None))
    check("ppermute", sm(lambda a: jax.lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)]), MESH1,
                         P("x", None), P("x", None)),
          [arr(8, 4)], [ns1("x", None)], ns1("x", None))
    check("all_to_all", sm(lambda a: jax.lax.all_to_all(a, "x", 1, 0, tiled=True), MESH1, P("x", None),
                           P(None, "x")),
          [arr(8, 8)], [ns1("x", None)], ns1(None, "x"))
    # partially manual: x manual, y automatic
    check("partial_psum", sm(lambda a: jax.lax.psum(a * 2.0, "x"), MESH2, P("x", None), P(None, None),
                             axis_names={"x"}),
          [arr(8, 4)], [ns2("x", "y")], ns2(None, "y"))
    # several operands and results, one of them tuple-shaped in the HLO
    check("two_results", sm(lambda a, b: (jax.lax.psum(a, "x"), b * 2.0), MESH1, (P("x", None), P(None, "x")),
                            (P(None, None), P(None, "x"))),
          [arr(8, 4), arr(4, 8)], [ns1("x", None), ns1(None, "x")], (ns1(None, None), ns1(None, "x")))
    check_warning()
    return 0


WARNING_CHECK = r"""
import sys, warnings
import tessel
text = open(sys.argv[1]).read()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    tessel.compile(text, num_partitions=2).close()
    tessel.compile(text, num_partitions=1).close()
msgs = [str(x.message) for x in w if str(x.message).startswith("tessel:")]
assert len(msgs) == 1 and msgs[0].startswith("tessel: no value of module plain carries a sharding"), msgs
"""


def check_warning():
    """A compile for several partitions with no sharding on any value warns
    once, through the library (a Python warning from tessel.compile). In
    its own process, which a sanitizer build starts with its runtime
    preloaded (TESSEL_PRELOAD), as tests/python/test_tessel.py does; JAX's
    process is left as it is."""
    src = os.path.join(os.environ["TESSEL_SRC"], "tests", "models", "shardy", "unsharded.hlo")
    env = dict(os.environ)
    if os.environ.get("TESSEL_SANITIZE", "").upper() in ("1", "ON", "TRUE", "YES"):
        if not os.environ.get("TESSEL_PRELOAD"):
            print("unsharded: skipped (sanitizer build and no runtime to preload)")
            return
        env["LD_PRELOAD"] = os.environ["TESSEL_PRELOAD"]
    r = subprocess.run([sys.executable, "-c", WARNING_CHECK, src], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    print("unsharded: one warning from tessel.compile")


if __name__ == "__main__":
    sys.exit(main())
