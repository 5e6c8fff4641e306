#!/usr/bin/env python3
"""gradcheck.py: the numerical gradient checker of `tessel grad`, as
TensorFlow's gradient_checker: for each MODEL.hlo given, `tessel grad` writes
the gradient module, `tessel run --reference` runs it on small random f64
inputs (given as .npy), and the analytic gradient of each --wrt parameter is
compared with central differences of the forward module run by tessel at
x + h v and x - h v, for random directions v: (f(x+hv) - f(x-hv)) / 2h must
equal <grad, v> within a relative error of 1e-6. The forward runs are
independent of the gradient module (only the forward rules of the reference
are shared).

A model says how it is checked in its first lines:
  // grad: ARGS             the `tessel grad` arguments (--wrt ..., --loss K)
  // input K: ints LO HI    parameter K is an integer array drawn in [LO, HI)
  // partitions N           also run the gradient module on N partitions and
                            compare it with the reference run

With --jvp the forward mode is checked instead: `tessel grad --jvp` writes
the module that takes a tangent per --wrt parameter and returns the outputs
and their tangents; for random tangents v (all parameters at once), every
floating output's tangent must equal (f(x+hv) - f(x-hv)) / 2h elementwise,
within a relative error of 1e-6 (relative to the output's largest entry).
usage: gradcheck.py TESSEL WORKDIR [--jvp] MODEL.hlo...
"""
import os
import re
import subprocess
import sys
import zlib

import numpy as np

TESSEL, WORK = sys.argv[1], sys.argv[2]
H = 1e-5
TOL = 1e-6


def run(args):
    p = subprocess.run([TESSEL] + args, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("FAIL: tessel %s: %s%s" % (" ".join(args), p.stdout, p.stderr))
    return p.stdout


def params(path):
    """(name, dtype, shape) of each entry parameter, from the ENTRY text."""
    text = open(path).read()
    entry = text[text.index("ENTRY"):]
    out = []
    for m in re.finditer(r"^\s*%?([\w.\-]+) = (\w+)\[([\d,]*)\](?:\{[\d,]*\})? parameter\((\d+)\)", entry, re.M):
        dims = tuple(int(d) for d in m.group(3).split(",") if d)
        out.append((int(m.group(4)), m.group(1), m.group(2), dims))
    return [o[1:] for o in sorted(out)]


def evaluate(model, inputs, tag, extra=()):
    d = os.path.join(WORK, tag)
    os.makedirs(d, exist_ok=True)
    args = ["run", model, "--output-dir", d] + list(extra)
    for k, x in enumerate(inputs):
        f = os.path.join(d, "in%d.npy" % k)
        np.save(f, x)
        args += ["--input", "%d=%s" % (k, f)]
    run(args)
    outs = []
    k = 0
    while os.path.exists(os.path.join(d, "output_%d.npy" % k)):
        outs.append(np.load(os.path.join(d, "output_%d.npy" % k)))
        os.remove(os.path.join(d, "output_%d.npy" % k))
        k += 1
    return outs


def header(model):
    lines = open(model).read().splitlines()
    gargs, ints, parts = [], {}, []
    for ln in lines[:8]:
        if ln.startswith("// grad:"):
            gargs = ln[len("// grad:"):].split()
        m = re.match(r"// input (\d+): ints (-?\d+) (-?\d+)", ln)
        if m:
            ints[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        m = re.match(r"// partitions (.*)", ln)
        if m:
            parts = [int(p) for p in m.group(1).split()]
    return gargs, ints, parts


def wrt_and_inputs(model, gargs, ints, rng):
    ps = params(model)
    wrt = []
    if "--wrt" in gargs:
        for w in gargs[gargs.index("--wrt") + 1].split(","):
            wrt.append(int(w) if w.isdigit() else [p[0] for p in ps].index(w))
    else:
        wrt = [k for k, p in enumerate(ps) if p[1].startswith("f")]
    xs = []
    for k, (pname, dt, dims) in enumerate(ps):
        if k in ints:
            xs.append(rng.integers(ints[k][0], ints[k][1], size=dims).astype(np.int32 if dt == "s32" else np.int64))
        else:
            xs.append(rng.uniform(-1, 1, size=dims).astype(np.float64))
    return ps, wrt, xs


def check_jvp(model, rng):
    gargs, ints, parts = header(model)
    name = os.path.basename(model)[:-4]
    jargs = ["--wrt", gargs[gargs.index("--wrt") + 1]] if "--wrt" in gargs else []
    jmod = os.path.join(WORK, name + ".jvp.hlo")
    run(["grad", model, "--jvp", "-o", jmod] + jargs)
    run(["check", jmod])
    ps, wrt, xs = wrt_and_inputs(model, jargs, ints, rng)
    vs = [rng.standard_normal(xs[k].shape) for k in wrt]
    outs = evaluate(jmod, xs + vs, name + "_j", ["--reference"])
    nout = len(outs) // 2
    xp, xm = list(xs), list(xs)
    for k, v in zip(wrt, vs):
        xp[k] = xs[k] + H * v
        xm[k] = xs[k] - H * v
    fp = evaluate(model, xp, name + "_f", ["--reference"])
    fm = evaluate(model, xm, name + "_f", ["--reference"])
    assert len(fp) == nout, (name, len(fp), nout)
    worst = 0.0
    for o in range(nout):
        if not np.issubdtype(fp[o].dtype, np.floating):
            continue
        fd = (fp[o].astype(np.float64) - fm[o].astype(np.float64)) / (2 * H)
        an = outs[nout + o].astype(np.float64)
        scale = max(np.max(np.abs(fd), initial=0), np.max(np.abs(an), initial=0), 1e-3)
        err = np.max(np.abs(fd - an), initial=0) / scale
        worst = max(worst, err)
        if err > TOL:
            raise SystemExit("FAIL: %s: jvp of output %d: central differences\n%s\ntangent\n%s\n"
                             "(relative error %.3g)" % (name, o, fd, an, err))
    print("ok jvp %-10s %d tangent(s), %d output(s), worst relative error %.2g" % (name, len(wrt), nout, worst))


def check(model, rng):
    gargs, ints, parts = header(model)
    name = os.path.basename(model)[:-4]
    gmod = os.path.join(WORK, name + ".grad.hlo")
    run(["grad", model, "-o", gmod] + gargs)
    run(["check", gmod])
    ps, wrt, xs = wrt_and_inputs(model, gargs, ints, rng)
    loss = int(gargs[gargs.index("--loss") + 1]) if "--loss" in gargs else 0
    outs = evaluate(gmod, xs, name + "_g", ["--reference"])
    grads = outs[len(outs) - len(wrt):]
    for n in parts:
        pouts = evaluate(gmod, xs, name + "_p%d" % n, ["--num-partitions", str(n)])
        for a, b in zip(outs, pouts):
            if not np.allclose(a, b, rtol=1e-9, atol=1e-9):
                raise SystemExit("FAIL: %s: partitioned on %d devices differs from the reference:\n%s\n%s"
                                 % (name, n, a, b))
    worst = 0.0
    for gi, k in enumerate(wrt):
        for _ in range(2):
            v = rng.standard_normal(xs[k].shape)
            xp = list(xs)
            xm = list(xs)
            xp[k] = xs[k] + H * v
            xm[k] = xs[k] - H * v
            fp = evaluate(model, xp, name + "_f", ["--reference"])[loss]
            fm = evaluate(model, xm, name + "_f", ["--reference"])[loss]
            fd = (float(fp) - float(fm)) / (2 * H)
            an = float(np.sum(grads[gi] * v))
            err = abs(fd - an) / max(abs(fd), abs(an), 1e-3)
            worst = max(worst, err)
            if err > TOL:
                raise SystemExit("FAIL: %s: parameter %s: central difference %.12g, analytic %.12g "
                                 "(relative error %.3g)" % (name, ps[k][0], fd, an, err))
    print("ok %-14s %d parameter(s), worst relative error %.2g%s"
          % (name, len(wrt), worst, "".join(", partitioned on %d" % n for n in parts)))
    return xs, outs


def main():
    models = sys.argv[3:]
    jvp = bool(models) and models[0] == "--jvp"
    for model in models[1:] if jvp else models:
        # Each model draws from its own generator, seeded by its name: a
        # model added to the directory leaves the others' inputs as they
        # were (one shared generator shifted them, and could put two
        # elements of a max pool within the step h of each other, where the
        # central difference straddles the kink).
        rng = np.random.default_rng(zlib.crc32(os.path.basename(model).encode()))
        (check_jvp if jvp else check)(model, rng)


if __name__ == "__main__":
    main()
