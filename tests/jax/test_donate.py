"""test_donate.py: JAX's train-step dumps and `--donate auto` (docs/plan.md,
"Donation").

For the Adam and SGD steps of the Megatron MLP (tests/jax/programs.py:
mlp_adam, mlp_sgd) and the transformer block's SGD step (block_sgd) on a
2-device mesh:
  1. lowered without donate_argnums (no input_output_alias), `tessel plan
     --donate auto` pairs every parameter, moment and the step count with
     the output JAX returns it as (the function returns them in the order
     it takes them: output i is the update of argument i; x and y,
     the last two arguments, stay unpaired), each read no later than its
     output is written;
  2. lowered with donate_argnums of those arguments, JAX writes the same
     pairs itself: the plan lists them as declared, and --donate auto adds
     none;
  3. `tessel run --donate auto --stats`: the measured peak per device is
     below the undonated run's for Adam (not above it for SGD), within 10%
     of the plan's estimate (donated or not), and the
     outputs equal JAX's own execution of the jitted step (the oracle's
     tolerance).
Exit 0 when all hold, 1 otherwise (77: JAX missing).
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

try:
    import programs as registry  # sets XLA_FLAGS for JAX first
    import jax
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("SKIP: %s" % e)
    sys.exit(77)

from test_oracle import TESSEL, compare_all, read_outputs, write_inputs  # noqa: E402

SHAPE = (2,)
NP = ("--num-partitions", "2")


def tessel(*args):
    p = subprocess.run([TESSEL] + list(args), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit("FAIL: tessel %s: exit %d\n%s" % (" ".join(args[:3]), p.returncode, p.stderr[-2000:]))
    return p


def pairs(plan_json):
    ds = json.loads(plan_json)["clusters"][0]["memory"]["donations"]
    for d in ds:
        if d["read_step"] > d["write_step"]:
            sys.exit("FAIL: pair %r read after its output is written" % d)
    return sorted((d["parameter"], d["output"], d["inferred"]) for d in ds)


def peak(stderr):
    m = re.search(r"measured peak (.*?) bytes \(largest", stderr)
    if not m:
        sys.exit("FAIL: no memory line in --stats:\n" + stderr)
    return max(int(part.split()[-1]) for part in m.group(1).split(","))


def check(name, root):
    prog = registry.BY_NAME[name]
    inputs = prog.make_inputs(np.random.default_rng(5))
    nstate = len(inputs) - 2  # every argument but x and y comes back updated
    d = root / name
    d.mkdir()
    bare = d / "bare.hlo"
    bare.write_text(prog.lower_hlo(SHAPE, inputs))
    with jax.set_mesh(prog.mesh(SHAPE)):
        donated = jax.jit(prog.fn, in_shardings=prog.in_shardings(SHAPE), out_shardings=prog.out_shardings(SHAPE),
                          donate_argnums=tuple(range(nstate)))
        text = donated.lower(*prog.arg_structs(inputs)).as_text("hlo")
    decl = d / "donated.hlo"
    decl.write_text(text)
    if "input_output_alias" in bare.read_text():
        sys.exit("FAIL: %s: lowered without donate_argnums, yet aliased" % name)
    want = [(i, i) for i in range(nstate)]
    got = pairs(tessel("plan", str(bare), *NP, "--donate", "auto", "--format", "json").stdout)
    if [(p, o) for p, o, _ in got] != want or not all(inf for _, _, inf in got):
        sys.exit("FAIL: %s: --donate auto paired %r, want %r (all inferred)" % (name, got, want))
    got = pairs(tessel("plan", str(decl), *NP, "--donate", "auto", "--format", "json").stdout)
    if [(p, o) for p, o, _ in got] != want or any(inf for _, _, inf in got):
        sys.exit("FAIL: %s: with donate_argnums: %r, want %r (all declared)" % (name, got, want))
    args = write_inputs(d, inputs)
    plain = tessel("run", str(bare), *NP, "--stats", "--output-dir", str(d / "plain"), *args)
    auto = tessel("run", str(bare), *NP, "--donate", "auto", "--stats", "--output-dir", str(d / "auto"), *args)
    before, after = peak(plain.stderr), peak(auto.stderr)
    for run in (plain, auto):  # the plan's estimate is what the run holds (issue 32's 10% bar)
        r = float(re.search(r"largest/estimate ([0-9.]+)", run.stderr).group(1))
        if not 0.9 <= r <= 1.1:
            sys.exit("FAIL: %s: measured peak / estimate %.3f, beyond 10%%" % (name, r))
    # Adam's moments die before their updates are written: its peak must
    # drop; SGD's update already writes into the dying gradient, so its
    # peak may stay where it is (docs/plan.md, "Donation"), never rise.
    if after > before or (name == "mlp_adam" and after >= before):
        sys.exit("FAIL: %s: measured peak %d -> %d bytes with donation" % (name, before, after))
    want_out = prog.execute(SHAPE, inputs)
    err = compare_all(read_outputs(d / "auto", len(want_out)), want_out)
    print("ok %s: --donate auto pairs %d arguments (as donate_argnums does); measured peak per device %d -> %d "
          "bytes; outputs equal JAX's (worst relative error %.2g)" % (name, nstate, before, after, err))


def main():
    root = pathlib.Path(tempfile.mkdtemp(prefix="tessel-donate-"))
    for name in ("mlp_sgd", "mlp_adam", "block_sgd"):
        check(name, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
