"""test_collective_bytes.py: tessel's plan moves no more collective bytes
per device than XLA's compiled module (issue 28), or docs/plan.md says for
that program why, with the figures.

For each program and each of its meshes of 2 devices or more, one lowering
by JAX gives both sides:
  - XLA: `lower(...).compile().as_text()`, the per-device module XLA
    compiled, its collectives summed by tests/jax/xla_bytes.py;
  - tessel: `tessel plan PLAN --format json` of `tessel compile MODEL.hlo
    --num-partitions N` of the uncompiled `lower(...).as_text("hlo")`: its
    collectives' bytes_per_device, and the collectives the program wrote
    itself (shard_map's all-to-all), which the plan lists among its
    instructions, counted in the plan's SPMD modules by xla_bytes.py
    (which must give the plan's figure for each of the plan's own).
Both count what docs/plan.md ("Bytes moved per device") states. Where
tessel's total is larger, the table of docs/plan.md ("Where tessel moves
more than XLA") must hold a row for that program and mesh whose two
figures are the measured ones: no silent exception. A row whose program
now moves no more than XLA, or whose figures differ, is an error too, so
the table stays true.

The programs: this file's own (the Megatron MLP with x replicated, w1
column- and w2 row-sharded; a dot whose contracting dim and result are
sharded, which must be one reduce-scatter with the bytes worked out by
hand; the data-parallel MLP gradient step; a 2-D mesh (data x model) MLP)
and every program of tests/jax/programs.py, on 2, 4 and 8 devices.

usage: test_collective_bytes.py [--programs NAME,...] [--except NAME,...] [-v]
Environment: TESSEL_BIN, TESSEL_SRC; XLA_FLAGS and JAX_PLATFORMS as
tests/CMakeLists.txt's TESSEL_JAX_TEST_ENV sets them. Exit status 0 when
every figure is as expected, 1 otherwise.
"""
import argparse
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import programs as registry  # noqa: E402  (first: it sets XLA_FLAGS for JAX)
import xla_bytes  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

SRC = pathlib.Path(os.environ.get("TESSEL_SRC", HERE.parents[1]))
TESSEL = os.environ.get("TESSEL_BIN") or str(SRC / "build" / "release" / "tessel")
DOC = SRC / "docs" / "plan.md"
TABLE_HEADING = "### Where tessel moves more than XLA"


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ------------------------------------------------------------ own programs

def megatron(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def megatron_specs(axes):
    m = axes[-1]
    return ((P(), P(None, m), P(m, None)), P())


def megatron_inputs(rng):
    return (_normal(rng, (8, 16)), _normal(rng, (16, 32), 0.3), _normal(rng, (32, 16), 0.3))


def dot_rs(a, b):
    return a @ b


def dot_rs_specs(axes):
    return ((P(None, axes[0]), P(axes[0], None)), P(axes[0], None))


def dot_rs_inputs(rng):
    return (_normal(rng, (8, 16)), _normal(rng, (16, 8)))


def dp_loss(w1, w2, x, y):
    return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)


def dp_grad(w1, w2, x, y):
    g1, g2 = jax.grad(dp_loss, argnums=(0, 1))(w1, w2, x, y)
    return w1 - 0.1 * g1, w2 - 0.1 * g2


def dp_grad_specs(axes):
    d = axes[0]
    return ((P(), P(), P(d, None), P(d, None)), (P(), P()))


def dp_grad_inputs(rng):
    return (_normal(rng, (16, 32), 0.3), _normal(rng, (32, 8), 0.3), _normal(rng, (16, 16)),
            _normal(rng, (16, 8)))


def mlp2d_specs(axes):
    d, m = axes
    return ((P(d, None), P(None, m), P(m, None)), P(d, None))


OWN = [
    registry.Program("megatron", megatron, ((2,), (4,), (8,)), megatron_specs, megatron_inputs,
                     doc="x replicated, w1 column-, w2 row-sharded, y replicated"),
    registry.Program("dot_rs", dot_rs, ((2,), (4,), (8,)), dot_rs_specs, dot_rs_inputs,
                     doc="contracting dim and result sharded: one reduce-scatter"),
    registry.Program("dp_grad", dp_grad, ((2,), (4,), (8,)), dp_grad_specs, dp_grad_inputs,
                     doc="data-parallel MLP gradient step"),
    registry.Program("mlp2d", megatron, ((1, 2), (2, 2), (2, 4)), mlp2d_specs, megatron_inputs,
                     doc="2-D mesh (data x model) MLP"),
]


def dot_rs_expected(n):
    """The dot's partial sums are f32[8,8] (256 bytes) on every device; one
    reduce-scatter over all n devices along dim 0 receives 256 (n-1)/n."""
    return [("reduce-scatter", 256 * (n - 1) // n)]


# ------------------------------------------------------------ measuring

def shape_name(shape):
    return "x".join(map(str, shape))


def measure(prog, shape, work):
    """(tessel bytes, XLA bytes, tessel's [(name, opcode, bytes)]) of one program on one mesh."""
    inputs = prog.make_inputs(np.random.default_rng(0))
    with jax.set_mesh(prog.mesh(shape)):
        low = prog.jit(shape).lower(*prog.arg_structs(inputs))
        hlo = low.as_text("hlo")
        compiled = low.compile().as_text()
    n = math.prod(shape)
    path = work / ("%s.%s.hlo" % (prog.name, shape_name(shape)))
    path.write_text(hlo)
    (work / ("%s.%s.compiled.txt" % (prog.name, shape_name(shape)))).write_text(compiled)
    colls = tessel_collectives(path, n)
    return sum(b for _, _, b in colls), xla_bytes.total_bytes(compiled), colls


def tessel_collectives(path, n):
    """[(name, opcode, bytes)] of every collective in tessel's partitioned
    program: the ones the partitioner inserted (the plan's JSON) and the
    ones the program wrote itself (shard_map's), counted in the plan file's
    SPMD modules by xla_bytes.py; the two counts must agree on the first."""
    plan_file = path.with_suffix(".plan")
    run([TESSEL, "compile", str(path), "--num-partitions", str(n), "-o", str(plan_file)])
    plan = json.loads(run([TESSEL, "plan", str(plan_file), "--format", "json"]))
    text = plan_file.read_text()
    modules = re.split(r"(?m)^(?=HloModule )", text)[1:]
    if "// TesselHost " in text:
        modules = modules[1:]          # the host program: logical clusters
    if len(modules) != len(plan["clusters"]):
        raise RuntimeError("%s: %d SPMD modules, %d clusters" % (plan_file.name, len(modules), len(plan["clusters"])))
    out = []
    for mod, cluster in zip(modules, plan["clusters"]):
        counted = {c.name: (c.kind, c.bytes_per_device) for c in xla_bytes.collectives(mod)}
        for c in cluster["collectives"]:
            if counted.get(c["name"], (None, None))[1] != c["bytes_per_device"]:
                raise RuntimeError("%s: the plan says %s moves %d bytes a device, xla_bytes.py counts %s" % (
                    plan_file.name, c["name"], c["bytes_per_device"], counted.get(c["name"])))
        out += [(name, kind, b) for name, (kind, b) in counted.items()]
    return out


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[1:3]), r.returncode, r.stderr.strip()))
    return r.stdout


def documented():
    """The rows of docs/plan.md's table: {(program, mesh): (tessel, xla, why)}."""
    text = DOC.read_text()
    i = text.find(TABLE_HEADING)
    if i < 0:
        raise SystemExit("docs/plan.md has no section %r" % TABLE_HEADING)
    rows = {}
    for line in text[i:].splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not line.startswith("|") or cells[0] in ("program", "") or set(cells[0]) <= set("-: "):
            continue
        prog, mesh, tb, xb, why = cells
        rows[(prog.strip("`"), mesh)] = (int(tb), int(xb), why)
    return rows


# replica_groups in XLA's three forms, worked out by hand: a mesh [x=2, y=4]
# numbers device (i, j) as 4i + j; grouping over y keeps i, over x keeps j.
# The sub-axis x:(2)2 of x=8 splits it into [2, 2, 2] and groups over the
# middle part (device 4a + 2b + c, b varying). device_ids=([2,4]T(1,0))
# lists iota(8) as a [2,4] array transposed: 0,4,1,5,2,6,3,7.
GROUPS = [
    ("{{0,1},{2,3}}", [[0, 1], [2, 3]]),
    ("[2,4]<=[8]", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("[2,4]<=[4,2]T(1,0)", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("mesh['x'=2,'y'=4] {'y'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("mesh['x'=2,'y'=4] {'x'}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("mesh['x'=2,'y'=4] {'y','x'}", [[0, 4, 1, 5, 2, 6, 3, 7]]),
    ("mesh['x'=8] {'x':(2)2}", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'y'}", [[0, 2], [1, 3]]),
    ("{}", [list(range(8))]),
]


def check_groups():
    bad = []
    for text, want in GROUPS:
        got = xla_bytes.replica_groups(text, 8)
        if got != want:
            bad.append("replica_groups=%s: %s, worked out by hand %s" % (text, got, want))
    return bad


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="", help="only these programs")
    ap.add_argument("--except", dest="skip", default="", help="every program but these")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args(argv)
    progs = OWN + list(registry.PROGRAMS)
    names = [p.name for p in progs]
    for w in [w for w in (args.programs + "," + args.skip).split(",") if w]:
        if w not in names:
            raise SystemExit("unknown program %r (known: %s)" % (w, ", ".join(names)))
    if args.programs:
        progs = [p for p in progs if p.name in args.programs.split(",")]
    progs = [p for p in progs if p.name not in args.skip.split(",")]
    rows = documented()
    failures, seen = check_groups(), set()
    with tempfile.TemporaryDirectory(prefix="tessel-bytes.") as tmp:
        work = pathlib.Path(tmp)
        for prog in progs:
            for shape in prog.mesh_shapes:
                n = math.prod(shape)
                if n < 2:
                    continue
                key = (prog.name, shape_name(shape))
                seen.add(key)
                t0 = time.time()
                try:
                    tb, xb, colls = measure(prog, shape, work)
                except Exception as e:  # noqa: BLE001 -- any failure is this program's
                    failures.append("%s on %s: %s" % (prog.name, key[1], e))
                    continue
                row = rows.get(key)
                verdict = "ok"
                if prog.name == "dot_rs" and [(k, b) for _, k, b in colls] != dot_rs_expected(n):
                    verdict = "FAIL: collectives %s, expected %s" % (colls, dot_rs_expected(n))
                elif tb > xb and not row:
                    verdict = "FAIL: tessel moves more than XLA and docs/plan.md has no row for it"
                elif row and (row[0], row[1]) != (tb, xb):
                    verdict = "FAIL: docs/plan.md says tessel %d, XLA %d" % row[:2]
                elif row and tb <= xb:
                    verdict = "FAIL: docs/plan.md lists it, but tessel moves no more than XLA: remove the row"
                elif row:
                    verdict = "documented: " + row[2]
                print("%-12s %-5s tessel %7d  XLA %7d  %s  (%.1f s)%s" % (
                    prog.name, key[1], tb, xb, verdict, time.time() - t0,
                    ("\n    tessel: %s" % colls) if args.v else ""), flush=True)
                if verdict.startswith("FAIL"):
                    failures.append("%s on %s: %s" % (prog.name, key[1], verdict[6:]))
    measured_names = {p.name for p in progs}
    for key in rows:
        if key[0] in measured_names and key not in seen:
            failures.append("docs/plan.md lists %s on %s, which is not measured" % key)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
