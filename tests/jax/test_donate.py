"""test_donate.py: JAX's train-step dumps and `--donate auto` (docs/plan.md,
"Donation").

For the Adam and SGD steps of the Megatron MLP (tests/jax/programs.py:
mlp_adam, mlp_sgd) and the transformer block's SGD and Adam steps
(block_sgd, block_adam) on a 2-device mesh:
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
     tolerance; block_adam's state within one bf16 step of each gradient
     element carried through Adam's update, derived at compare_adam).
  4. `jax.jit(step, donate_argnums=...)` on arguments placed sharded, the
     output shardings left to the compiler (JAX then writes `buffer_donor`,
     not input_output_alias, when the mesh has more than one device) for
     the MLP's SGD and Adam steps and an SGD step of a wider MLP
     (mlp_sgd_wide, below) on 2 and 4 devices, and on 1 device JAX's
     pairs replaced by the 2-device module's buffer_donor: tessel pairs
     every donor with the output JAX returns it as, without --donate auto
     (the plan says so), and `tessel run --stats` measures, against the
     same module with buffer_donor removed, the drop docs/plan.md derives:
     the plan's estimate with and without the pairs (liveness over the
     executor's order; each measured peak within 10% of its estimate), at
     most the donated state's bytes per device (summed by hand below from
     the shapes and the mesh) and at most U - A (check_donor), equal to it
     for the SGD steps (0 for mlp_sgd), more than nothing for the others;
     the plan's own figure of the drop (memory.undonated_peak less the
     donated estimate: the estimate with nothing donated, the bare run's
     estimate exactly) within 1% of U of the measured drop (for Adam
     the tight figure: U - A is twice it); the outputs
     equal JAX's and `tessel run --reference`; the 2-device Adam and wide
     SGD steps again under mpirun -np 2 (each rank's peak within 10% of
     the donated estimate).
  5. --auto-shard (issue 33): the MLP's SGD and Adam steps lowered with
     donate_argnums and no shardings (JAX's one-device pairs written as
     buffer_donor, as part 4's graft), and lowered without donate_argnums
     under --donate auto, on meshes of 2 and 4: auto/ ties each update to
     the parameter whose buffer it takes, so every donor is paired with
     the output JAX returns it as (before, an update followed its gradient
     and could leave sharded unlike its weight: Adam's weights went
     unpaired and their moments took the weights' outputs); the outputs
     equal JAX's and the reference.
  6. --steps 4 (docs/cli.md): the MLP's SGD and Adam steps lowered with
     donate_argnums on 2 devices (buffer_donor) run 4 steps equal JAX
     running the same 4 steps, each step's updates fed back as the next
     step's arguments; so do the same steps with host work (the loss
     scaled on the host, compute_on("device_host"): a host program calling
     the cluster, whose donor pairs compile/driver.c carries up to the
     host's input_output_alias; before, every step ran on the first step's
     weights), with buffer_donor and, lowered without donate_argnums,
     under --donate auto; the SGD step with host work again from a saved
     plan under mpirun -np 2.
Exit 0 when all hold, 1 otherwise (77: JAX missing). The work directory
(tempfile's, tessel-donate-*) is removed on every way out: success, a
failed check, an exception, SIGTERM, SIGHUP or SIGINT (ctest's timeout
and a shell's Ctrl-C); `--keep DIR` works in DIR instead and leaves it
(tests/jax/test_donate_cleanup.py holds the cleanup).
"""
import argparse
import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
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
    from jax.numpy import bfloat16 as jnp_bf16
except ImportError as e:  # pragma: no cover
    print("SKIP: %s" % e)
    sys.exit(77)

from test_oracle import MPIRUN, TESSEL, compare_all, read_outputs, write_inputs  # noqa: E402

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


def ulp_bf16(x):
    """bf16's spacing at |x| (8 significant bits): 2^(floor(log2 |x|) - 7);
    one step from x either way is at most this (a step down from a power
    of two is half of it)."""
    x = np.abs(np.asarray(x, np.float64))
    return np.where(x > 0, np.exp2(np.floor(np.log2(np.where(x > 0, x, 1.0))) - 7), 0.0)


def ulp_f32(x):
    return np.abs(np.spacing(np.abs(np.asarray(x, np.float32)))).astype(np.float64)


def compare_adam(got, want, inputs, nparam, lr):
    """block_adam's outputs against JAX's, with the tolerance its arithmetic
    gives when one bf16 rounding lands the other way.

    The step casts each bf16 gradient g to f32 and runs Adam (programs.py,
    _adam; t1 = t + 1, c1 = 1 - 0.9^t1, c2 = 1 - 0.999^t1):
        m1 = 0.9 m + 0.1 g            v1 = 0.999 v + 0.001 g g
        p1 = bf16(p - lr (m1 / c1) / (sqrt(v1 / c2) + 1e-8))
    On seed 5 one bf16 rounding in the feed-forward layer (gelu's output
    or a gradient on its way) lands the other way in tessel's run and
    JAX's: the gradient element it feeds comes out one bf16 step from
    JAX's (traced: every moment element that differs, recovered as
    g = (m1 - 0.9 m) / 0.1, is exactly one ulp_bf16(g) away: 1 of w1's
    4096, 5 of w2's, all in one row). Carried through the update, a step
    u = ulp_bf16(g) of g moves, per element:
        m1 by 0.1 u        (+ the f32 roundings of 0.1 g and m1, in both runs)
        v1 by 0.001 (2 |g| + u) u  (+ those of 0.001 g g and v1, in both runs)
        p1 by lr |r(g +- u) - r(g)|, r = (m1 / c1) / (sqrt(v1 / c2) + 1e-8),
              plus one bf16 step of p1 (its rounding may flip)
    g comes from JAX's own m1 (rounded to bf16: the gradient's type), so
    the bound is JAX's arithmetic, not tessel's. Every element is held to
    it (a gradient more than one bf16 step off fails); the loss and t to
    the oracle's tolerance. Returns the largest |error| / bound."""
    t1 = float(inputs[3 * nparam]) + 1.0
    c1, c2 = 1.0 - 0.9 ** t1, 1.0 - 0.999 ** t1
    worst = 0.0
    for k in range(nparam):
        p, m, v = (np.asarray(inputs[j * nparam + k], np.float32).astype(np.float64) for j in range(3))
        m1j, v1j, p1j = (np.asarray(want[j * nparam + k]).astype(np.float32).astype(np.float64) for j in (1, 2, 0))
        g = np.asarray(np.asarray((m1j - 0.9 * m) / 0.1, np.float32).astype(jnp_bf16), np.float64)
        u = ulp_bf16(g)

        def r(gg):
            return ((0.9 * m + 0.1 * gg) / c1) / (np.sqrt((0.999 * v + 0.001 * gg * gg) / c2) + 1e-8)
        bounds = (lr * np.maximum(np.abs(r(g + u) - r(g)), np.abs(r(g - u) - r(g))) + ulp_bf16(p1j),
                  0.1 * u * (1 + 2 ** -20) + 2 * (ulp_f32(m1j) + ulp_f32(0.1 * g)),
                  0.001 * (2 * np.abs(g) + u) * u * (1 + 2 ** -20) + 2 * (ulp_f32(v1j) + ulp_f32(0.001 * g * g)))
        for j, (want_j, bound) in enumerate(zip((p1j, m1j, v1j), bounds)):
            i = j * nparam + k
            err = np.abs(got[i].astype(np.float64) - want_j)
            ratio = float(np.max(err / np.maximum(bound, 1e-45)))
            if ratio > 1.0:
                at = tuple(np.unravel_index(np.argmax(err / np.maximum(bound, 1e-45)), err.shape))
                sys.exit("FAIL: block_adam output %d at %s: %r, JAX %r: beyond one bf16 step of the gradient "
                         "carried through Adam (bound %.3g)" % (i, list(at), got[i][at], want_j[at], bound[at]))
            worst = max(worst, ratio)
    compare_all(got[3 * nparam:], want[3 * nparam:])
    return worst


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
    if name == "block_adam":
        err = compare_adam(read_outputs(d / "auto", len(want_out)), want_out, inputs, 10, 0.01)
    else:
        err = compare_all(read_outputs(d / "auto", len(want_out)), want_out)
    print("ok %s: --donate auto pairs %d arguments (as donate_argnums does); measured peak per device %d -> %d "
          "bytes; outputs equal JAX's (worst %s %.5g)" % (name, nstate, before, after,
                                                 "error / bound" if name == "block_adam" else "relative error", err))


def lower_donated(prog, shape, inputs, nstate):
    """JAX's text for jit(fn, donate_argnums) on arguments placed sharded,
    output shardings left open: buffer_donor on more than one device."""
    with jax.set_mesh(prog.mesh(shape)):
        args = [jax.device_put(a, s) for a, s in zip(inputs, prog.in_shardings(shape))]
        return jax.jit(prog.fn, donate_argnums=tuple(range(nstate))).lower(*args).as_text("hlo")


DONOR = re.compile(r"buffer_donor=\{ [^\n]*?\) \}, ")
ALIAS = re.compile(r"input_output_alias=\{ [^\n]*?may-alias\) \}, ")


def state_bytes(prog, shape, inputs, nstate):
    """The donated arguments' bytes per device, by hand: f32 elements x 4
    over the mesh axes each one's PartitionSpec splits it along."""
    n = 0
    for a, spec in zip(inputs[:nstate], prog.in_specs(shape)[:nstate]):
        parts = 1
        for ax in spec:
            for name in (ax if isinstance(ax, tuple) else (ax,)):
                parts *= shape[registry.AXES[len(shape)].index(name)] if name else 1
        n += np.asarray(a).size * 4 // parts
    return n


def estimate(stderr):
    return int(re.search(r"plan estimate (\d+) bytes", stderr).group(1))


def wide_inputs(rng, b=8, d=128, h=256):
    """mlp_sgd's arguments (w1, b1, w2, b2, x, y) with weights far larger
    than the batch's activations: the step's tail, where each update
    lives beside its weight, is its peak (mlp_sgd's is in the backward)."""
    def n(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    return (n((d, h), 0.1), n((h,), 0.1), n((h, d), 0.1), n((d,), 0.1), n((b, d)), n((b, d)))


WIDE = dataclasses.replace(registry.BY_NAME["mlp_sgd"], name="mlp_sgd_wide", make_inputs=wide_inputs)


def check_donor(name, n, root, twin=None):
    """Part 4 for program `name` on n devices (1: the 2-device donors
    grafted onto JAX's 1-device text in place of its pairs). Returns the
    2-device donated text for the 1-device graft."""
    prog = WIDE if name == WIDE.name else registry.BY_NAME[name]
    inputs = prog.make_inputs(np.random.default_rng(5))
    nstate = len(inputs) - 2
    d = root / ("%s_donor%d" % (name, n))
    d.mkdir()
    text = lower_donated(prog, (n,), inputs, nstate)
    if n == 1:  # JAX pairs them itself on one device: give it the donors instead
        if not ALIAS.search(text):
            sys.exit("FAIL: %s on 1 device: JAX wrote no input_output_alias" % name)
        text = ALIAS.sub(DONOR.search(twin).group(0), text, count=1)
    elif "input_output_alias" in text or not DONOR.search(text):
        sys.exit("FAIL: %s on %d devices: JAX wrote no buffer_donor (or pairs): %s" % (name, n, text[:300]))
    donated, bare = d / "donated.hlo", d / "bare.hlo"
    donated.write_text(text)
    bare.write_text(DONOR.sub("", text, count=1))
    np_ = ("--num-partitions", str(n))
    got = pairs(tessel("plan", str(donated), *np_, "--format", "json").stdout)
    want = [(i, i, False) for i in range(nstate)]
    if got != want:
        sys.exit("FAIL: %s on %d: buffer_donor paired %r, want %r" % (name, n, got, want))
    js = json.loads(tessel("plan", str(donated), *np_, "--format", "json").stdout)["clusters"][0]["memory"]
    if not all(x["buffer_donor"] for x in js["donations"]) or js["unpaired_donors"]:
        sys.exit("FAIL: %s on %d: pairs not marked buffer_donor, or donors left: %r" % (name, n, js))
    # docs/plan.md's derivation: nothing is released before the first
    # donated parameter's last read (step s0; the order is the same with
    # and without the pairs), so the live bytes up to it are the undonated
    # ones and the donated peak is at least their highest, A: the drop is
    # at most U - A (U the undonated peak), and at most the donated state.
    jb = json.loads(tessel("plan", str(bare), *np_, "--format", "json").stdout)["clusters"][0]["memory"]
    s0 = min(x["read_step"] for x in js["donations"])
    live_d, live_b = js["live_bytes_by_step"], jb["live_bytes_by_step"]
    if live_d[:s0] != live_b[:s0]:
        sys.exit("FAIL: %s on %d: live bytes differ before step %d, the first donated read" % (name, n, s0))
    headroom = max(live_b) - max(live_b[:s0], default=0)
    args = write_inputs(d, inputs)
    runs = {}
    for tag, f in (("donated", donated), ("bare", bare)):
        p = tessel("run", str(f), *np_, "--stats", "--output-dir", str(d / tag), *args)
        runs[tag] = (peak(p.stderr), estimate(p.stderr))
        r = runs[tag][0] / runs[tag][1]
        if not 0.9 <= r <= 1.1:
            sys.exit("FAIL: %s on %d (%s): measured peak / estimate %.3f, beyond 10%%" % (name, n, tag, r))
    drop, drop_est = runs["bare"][0] - runs["donated"][0], runs["bare"][1] - runs["donated"][1]
    # The plan's own figure (memory.undonated_peak: the estimate with
    # nothing donated, the same order) is the estimates' drop exactly, and
    # the measured drop is within 1% of U of it: for Adam a tight figure
    # where U - A (s0 is the early read of m1 in 0.9 * m1) is twice it.
    plan_drop = js["undonated_peak"] - runs["donated"][1]
    if js["undonated_peak"] != runs["bare"][1] or abs(drop - plan_drop) > 0.01 * runs["bare"][1]:
        sys.exit("FAIL: %s on %d: the plan says the pairs lower the peak by %d bytes (undonated %d, the bare run's "
                 "estimate %d); measured %d" % (name, n, plan_drop, js["undonated_peak"], runs["bare"][1], drop))
    bound = state_bytes(prog, (n,), inputs, nstate)
    if abs(drop - drop_est) > 0.1 * runs["bare"][1] or drop_est > min(bound, headroom) or drop < 0 or \
            drop > min(bound, headroom) + 0.1 * runs["bare"][1] or (name != "mlp_sgd" and drop <= 0) or \
            ("sgd" in name and abs(drop - headroom) > 0.01 * runs["bare"][1]):
        sys.exit("FAIL: %s on %d: measured peak drops %d bytes (%d -> %d), the plan's derivation %d, U - A %d, the "
                 "donated state %d" % (name, n, drop, runs["bare"][0], runs["donated"][0], drop_est, headroom, bound))
    want_out = prog.execute((n,), inputs)
    err = compare_all(read_outputs(d / "donated", len(want_out)), want_out)
    tessel("run", str(donated), *np_, "--reference", "--output-dir", str(d / "ref"), *args)
    compare_all(read_outputs(d / "ref", len(want_out)), read_outputs(d / "donated", len(want_out)))
    mpi = ""
    if n == 2 and name in ("mlp_adam", "mlp_sgd_wide"):
        plan = d / "donated.plan"
        tessel("compile", str(donated), *np_, "--hosts", "2", "-o", str(plan))
        p = subprocess.run(MPIRUN + [TESSEL, "run", str(plan), "--stats", "--output-dir", str(d / "mpi"), *args],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            sys.exit("FAIL: %s under mpirun: exit %d\n%s" % (name, p.returncode, p.stderr[-2000:]))
        compare_all(read_outputs(d / "mpi", len(want_out)), want_out)
        m = re.search(r"measured peak largest (\d+) bytes", p.stderr)
        if not m or int(m.group(1)) > runs["donated"][1] * 1.1:
            sys.exit("FAIL: %s under mpirun: peak per rank %s against the estimate %d" % (
                name, m and m.group(1), runs["donated"][1]))
        mpi = "; under mpirun -np 2 the same outputs, peak per rank %s bytes" % m.group(1)
    print("ok %s on %d device(s): buffer_donor pairs %d arguments; measured peak per device %d -> %d bytes "
          "(-%d; the plan's figure -%d; bounded by U - A %d and the donated state %d); outputs equal JAX's (worst "
          "relative error %.2g) and the reference%s" % (name, n, nstate, runs["bare"][0], runs["donated"][0], drop,
                                                       plan_drop, headroom, bound, err, mpi))
    return text


def check_auto(name, root):
    """Part 5 for program `name`."""
    prog = registry.BY_NAME[name]
    inputs = prog.make_inputs(np.random.default_rng(5))
    nstate = len(inputs) - 2
    d = root / (name + "_auto")
    d.mkdir()
    text = jax.jit(prog.fn, donate_argnums=tuple(range(nstate))).lower(*prog.arg_structs(inputs)).as_text("hlo")
    if not ALIAS.search(text) or "sharding=" in text:
        sys.exit("FAIL: %s: JAX's one-device text has no pairs, or shardings" % name)
    donor = "buffer_donor={ %s }, " % ", ".join("(%d, {})" % i for i in range(nstate))
    donated, bare = d / "donated.hlo", d / "bare.hlo"
    donated.write_text(ALIAS.sub(donor, text, count=1))
    bare.write_text(ALIAS.sub("", text, count=1))
    args = write_inputs(d, inputs)
    want_out = prog.execute((1,), inputs)
    for n in (2, 4):
        auto = ("--auto-shard", "--mesh", str(n), "--num-partitions", str(n))
        for f, extra, inferred in ((donated, (), False), (bare, ("--donate", "auto"), True)):
            js = json.loads(tessel("plan", str(f), *auto, *extra, "--format", "json").stdout)["clusters"][0]["memory"]
            got = pairs(json.dumps({"clusters": [{"memory": js}]}))
            if got != [(i, i, inferred) for i in range(nstate)] or js["unpaired_donors"]:
                sys.exit("FAIL: %s --auto-shard on %d %s: paired %r, unpaired %r" % (
                    name, n, " ".join(extra) or "(buffer_donor)", got, js["unpaired_donors"]))
        out = d / ("o%d" % n)
        tessel("run", str(donated), *auto, "--output-dir", str(out), *args)
        err = compare_all(read_outputs(out, len(want_out)), want_out)
        tessel("run", str(donated), *auto, "--reference", "--output-dir", str(d / ("r%d" % n)), *args)
        compare_all(read_outputs(d / ("r%d" % n), len(want_out)), read_outputs(out, len(want_out)))
        print("ok %s --auto-shard --mesh %d: every one of %d donors paired with its update (buffer_donor and "
              "--donate auto); outputs equal JAX's (worst relative error %.2g) and the reference" % (
                  name, n, nstate, err))


def on_host_loss(prog):
    """prog with its loss (the last output) doubled on the host: the step
    becomes a host program calling one device cluster."""
    from jax.experimental.compute_on import compute_on

    def step(*args):
        out = prog.fn(*args)
        with compute_on("device_host"):
            loss = jax.jit(lambda v: v * 2.0)(out[-1])
        return out[:-1] + (loss,)
    return dataclasses.replace(prog, name=prog.name + "_host", fn=step)


def check_steps(name, root, host, donate_auto=False, mpi=False, steps=4):
    """Part 6 for program `name` on 2 devices."""
    prog = registry.BY_NAME[name]
    if host:
        prog = on_host_loss(prog)
    inputs = prog.make_inputs(np.random.default_rng(5))
    nstate = len(inputs) - 2
    d = root / ("%s_steps%s" % (prog.name, "_auto" if donate_auto else ""))
    d.mkdir()
    text = lower_donated(prog, SHAPE, inputs, nstate)
    if not DONOR.search(text) or ("_xla_compute_type=\"host\"" in text) != host:
        sys.exit("FAIL: %s: JAX wrote no buffer_donor, or host work where none was asked" % prog.name)
    if donate_auto:
        text = DONOR.sub("", text, count=1)
    f = d / "step.hlo"
    f.write_text(text)
    args = write_inputs(d, inputs)
    extra = ("--donate", "auto") if donate_auto else ()
    tessel("run", str(f), *NP, *extra, "--steps", str(steps), "--output-dir", str(d / "o"), *args)
    cur = list(inputs)
    for _ in range(steps):
        want = prog.execute(SHAPE, tuple(cur))
        cur[:nstate] = want[:nstate]
    err = compare_all(read_outputs(d / "o", len(want)), want)
    how = "in one process"
    if mpi:
        plan = d / "step.plan"
        tessel("compile", str(f), *NP, *extra, "--hosts", "2", "-o", str(plan))
        p = subprocess.run(MPIRUN + [TESSEL, "run", str(plan), "--steps", str(steps), "--output-dir", str(d / "mpi"),
                                     *args], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            sys.exit("FAIL: %s under mpirun: exit %d\n%s" % (prog.name, p.returncode, p.stderr[-2000:]))
        compare_all(read_outputs(d / "mpi", len(want)), want)
        how += " and from a saved plan under mpirun -np 2"
    print("ok %s%s --steps %d on 2 devices: equal to JAX's %d steps %s (worst relative error %.2g)" % (
        prog.name, " --donate auto" if donate_auto else " (buffer_donor)", steps, steps, how, err))


def exit_on_signal(signum, _frame):
    """A termination signal becomes SystemExit, so main's finally runs and
    subprocess.run kills the tessel or mpirun it waits on."""
    sys.exit("FAIL: %s" % signal.Signals(signum).name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (emptied first) and leave it there")
    a = ap.parse_args()
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, exit_on_signal)
    if a.keep:
        shutil.rmtree(a.keep, ignore_errors=True)
        pathlib.Path(a.keep).mkdir(parents=True)
        return run_all(pathlib.Path(a.keep))
    root = None
    try:  # made inside: a signal between mkdtemp and the try would leave it
        root = pathlib.Path(tempfile.mkdtemp(prefix="tessel-donate-"))
        return run_all(root)
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)


def run_all(root):
    for name in ("mlp_sgd", "mlp_adam", "block_sgd", "block_adam"):
        check(name, root)
    for name in ("mlp_sgd", "mlp_sgd_wide", "mlp_adam"):
        twin = check_donor(name, 2, root)
        check_donor(name, 4, root)
        check_donor(name, 1, root, twin)
    for name in ("mlp_sgd", "mlp_adam"):
        check_auto(name, root)
    check_steps("mlp_adam", root, host=False)
    check_steps("mlp_sgd", root, host=True, mpi=True)
    check_steps("mlp_adam", root, host=True)
    check_steps("mlp_adam", root, host=True, donate_auto=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
