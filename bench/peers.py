#!/usr/bin/python3
"""peers.py: tessel against JAX and PyTorch on the same CPUs (issue 34),
the lines of `bench/run peers`. One benchmark per call:

    peers.py NAME [--quick] [--bin build/release]

NAME is a workload of bench/peers_models.py: mlp, mlp-sgd, block-infer,
block-tp, block-dp, convnet, moe. Each is written once in JAX; tessel runs
the HLO JAX lowers it to (2 partitions), and five sides run it, 2 devices
or ranks each, one thread a device:

    tessel-2dev   `tessel run model.hlo --num-partitions 2` (2 devices, one
                  process)
    jax-1p        jax.jit on 2 devices in one process
                  (--xla_force_host_platform_device_count=2)
    tessel-mpi    `mpirun -np 2 tessel run PLAN` (`tessel compile --hosts 2`)
    jax-2p        2 processes joined by jax.distributed.initialize, gloo
    torch-2p      2 processes, torch.distributed gloo (DDP or Megatron by
                  hand, bench/peers_torch.py)

Each process runs STEPS steps on the same inputs; its figure is the median
of its warm steps (all but the first: tessel's `--stats` `steps:` line,
rank 0's under mpirun; the peers print the same line, the larger of the
two ranks' medians). The five sides run interleaved, one warm-up round then
REPS rounds (5; 1 with --quick); the line prints each side's median with
min and max, the ratios tessel-2dev / jax-1p and tessel-mpi / each
multi-process peer, then the same two comparisons round by round (each
round's tessel side over its round's peers: their range, median, and how
many rounds are at most 0.8, the noise under the medians), and last
`ratio R`: tessel over the faster peer, the worse of the in-process and
the multi-process comparison of the medians. Outputs of the last round of
every side are compared with JAX's reference (peers_jax.py gen), as the
bench fails loudly on a mismatch. Then the floor: the flops of a device's program as
XLA's cost analysis counts them (peers_jax.py gen), over the one-core FMA
peak (`gemm_bench --peak`, measured before the rounds), against the bar
(0.8 of the faster peer's step) in one process and across processes: a bar
under the floor cannot be met by any program doing JAX's arithmetic at
the peak (only by less arithmetic, as tessel's causal tiles and zero rows
do); and the share of the peak JAX's flops would run at in a step of the
in-process bar, beside the share they run at in tessel-2dev's step (how
close to the peak the bar asks a program doing JAX's arithmetic to run,
and how close tessel's runs). A peer that cannot be imported (no JAX venv, no
python3-torch) is skipped, saying so. TESSEL_SGEMM in the environment
fixes the library of tessel's f32 dots on both tessel sides (docs/cli.md,
`--sgemm`), and the line says so: `TESSEL_SGEMM=amx-bf16x3` runs them as
three bf16 products on AMX tiles, within the same tolerances of JAX's
outputs but not f32's bits (BENCHMARKS.md, "AMX").
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from driver import Failed, median  # noqa: E402  (bench/driver.py: the other lines' driver)

ROOT = os.path.dirname(HERE)
VENV_PY = os.path.join(ROOT, "build", "jax-venv", "bin", "python")
SYS_PY = "/usr/bin/python3"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
NAMES = ("mlp", "mlp-sgd", "block-infer", "block-tp", "block-dp", "convnet", "moe")
# Relative tolerances of the comparison with JAX's reference: a value's
# error over the reference's largest magnitude; an updated parameter's
# (the output minus the input it updates) over the largest update.
TOL_VALUE, TOL_UPDATE = 1e-3, 1e-2


def run(cmd, timeout=1800):
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    if p.returncode != 0:
        raise Failed("%s exited %d: %s" % (" ".join(cmd[:5]), p.returncode, (p.stderr or p.stdout).strip()[-600:]))
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_procs(make, timeout=1800):
    """Run make(rank) for ranks 0 and 1 at once; their outputs. A rank that
    fails ends the other (which would wait for it until gloo's timeout)."""
    logs = [tempfile.TemporaryFile(mode="w+") for _ in (0, 1)]
    ps = [subprocess.Popen(make(r), env=ENV, stdout=logs[r], stderr=subprocess.STDOUT,
                           universal_newlines=True) for r in (0, 1)]
    t0 = time.time()
    try:
        while any(p.poll() is None for p in ps):
            bad = [r for r, p in enumerate(ps) if p.returncode not in (None, 0)]
            if bad or time.time() - t0 > timeout:
                break
            time.sleep(0.05)
    finally:
        for p in ps:
            if p.poll() is None:
                p.kill()
                p.wait()
    outs = []
    for r, (p, log) in enumerate(zip(ps, logs)):
        log.seek(0)
        outs.append(log.read())
        log.close()
    for r, p in enumerate(ps):
        if p.returncode != 0:
            raise Failed("rank %d of %s exited %d: %s" % (r, " ".join(make(r)[:4]), p.returncode,
                                                           outs[r].strip()[-600:]))
    return outs


STEPS_RE = re.compile(r"steps: first ([\d.]+) ms, then median ([\d.]+) ms")


def warm(text):
    m = STEPS_RE.findall(text)
    if not m:
        raise Failed("no per-step times: %s" % text.strip()[-300:])
    return max(float(w) for _, w in m)


def inputs_args(d):
    args, k = [], 0
    while os.path.exists(os.path.join(d, "in_%d.npy" % k)):
        args += ["--input", "%d=%s" % (k, os.path.join(d, "in_%d.npy" % k))]
        k += 1
    return args


def versions():
    """The peers' versions, or why each is skipped: {side: text}."""
    v = {}
    if os.path.exists(VENV_PY):
        p = subprocess.run([VENV_PY, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        v["jax"] = ("jax %s jaxlib %s" % tuple(p.stdout.split()) if p.returncode == 0
                    else "skipped: JAX does not import (%s)" % p.stderr.strip()[-120:])
    else:
        v["jax"] = "skipped: no %s (scripts/setup.sh makes it)" % VENV_PY
    p = subprocess.run([SYS_PY, "-c", "import torch; print(torch.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    v["torch"] = ("torch %s" % p.stdout.strip() if p.returncode == 0
                  else "skipped: python3-torch does not import (bench/setup.sh installs it)")
    return v


def check(name, side, outdir, d, params):
    """Compare every output in outdir with JAX's reference in d."""
    i = 0
    while os.path.exists(os.path.join(d, "ref_%d.npy" % i)):
        ref = np.load(os.path.join(d, "ref_%d.npy" % i)).astype(np.float64)
        f = os.path.join(outdir, "output_%d.npy" % i)
        if not os.path.exists(f):
            raise Failed("%s wrote no output %d" % (side, i))
        got = np.load(f).astype(np.float64)
        if got.shape != ref.shape:
            raise Failed("%s output %d has shape %s, JAX's %s" % (side, i, got.shape, ref.shape))
        if i in params:
            base = np.load(os.path.join(d, "in_%d.npy" % params[i])).astype(np.float64)
            scale, tol, what = np.max(np.abs(ref - base)), TOL_UPDATE, "update"
        else:
            scale, tol, what = np.max(np.abs(ref)), TOL_VALUE, "value"
        err = np.max(np.abs(got - ref)) if ref.size else 0.0
        if not err <= tol * max(scale, 1e-30):
            raise Failed("%s output %d differs from JAX's: max error %.3g, %g of the largest %s %.3g"
                         % (side, i, err, tol, what, scale))
        i += 1
    if i == 0:
        raise Failed("no reference outputs in %s" % d)


def fma_peak(o):
    """The one-core FMA peak in GFLOP/s (gemm_bench --peak), or why not."""
    p = subprocess.run([o["gemm_bench"], "--peak"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    try:
        return float(p.stdout.strip()) if p.returncode == 0 else p.stderr.strip()[-120:] or "gemm_bench failed"
    except ValueError:
        return "gemm_bench --peak printed %r" % p.stdout.strip()[:60]


def floor_clause(d, peak, bar1, bar2, t2):
    """The floor of a device's step: JAX's program's flops at the FMA peak,
    beside the bars in one process (bar1 ms) and across processes (bar2),
    and the share of the peak the in-process bar asks for beside the one
    tessel-2dev's step (t2 ms) reached: JAX's flops over the step's time,
    over the peak (tessel may do fewer, as its causal tiles do, so its
    share may pass 1)."""
    with open(os.path.join(d, "cost.json")) as fh:
        flops = json.load(fh)["flops"]
    if isinstance(peak, str):
        return "floor not measured (%s)" % peak
    floor = flops / (peak * 1e9) * 1e3
    under = [w for w, bar in (("in one process", bar1), ("across processes", bar2)) if bar < floor]
    return ("floor: JAX's program %.2f GFLOP a device a step (XLA's cost analysis), %.2f ms at the peak %.1f "
            "GFLOP/s one core; the bar 0.8 of the faster peer %.2f ms in one process, %.2f across processes%s; "
            "at the bar in one process JAX's flops run at %.2f of the peak, in tessel-2dev's step at %.2f"
            % (flops * 1e-9, floor, peak, bar1, bar2,
               " (under the floor %s)" % " and ".join(under) if under else "", floor / bar1, floor / t2))


def bench(name, o):
    quick = o["quick"]
    # Five rounds: on a noisy machine three left a side's median to one
    # round's luck (BENCHMARKS.md, "Stop 53").
    steps, reps = (3, 1) if quick else (6, 5)
    ver = versions()
    if ver["jax"].startswith("skipped"):
        # Without JAX there is no program for tessel either.
        return "skipped (%s) ratio 0" % ver["jax"]
    d = os.path.join(o["work"], "peers_%s%s" % (name, "_quick" if quick else ""))
    if not all(os.path.exists(os.path.join(d, f)) for f in ("params.json", "cost.json")):
        run([VENV_PY, os.path.join(HERE, "peers_jax.py"), "gen", name, d] + (["--quick"] if quick else []))
    plan = os.path.join(d, "model.plan")
    hlo = os.path.join(d, "model.hlo")
    run([o["tessel"], "compile", hlo, "--num-partitions", "2", "--hosts", "2", "-o", plan])
    ins = inputs_args(d)
    pj = os.path.join(HERE, "peers_jax.py")
    pt = os.path.join(HERE, "peers_torch.py")
    torch_ok = not ver["torch"].startswith("skipped")

    def sides(out):
        """side name -> function running it once (out: write outputs to out/SIDE)."""
        def od(side):
            return ["--out" if not side.startswith("tessel") else "--output-dir", os.path.join(out, side)] if out else []

        s = {
            "tessel-2dev": lambda: warm(run([o["tessel"], "run", hlo, "--num-partitions", "2", "--steps", str(steps),
                                             "--stats"] + ins + od("tessel-2dev")).stderr),
            "jax-1p": lambda: warm(run([VENV_PY, pj, "run", name, d, "--steps", str(steps)] + od("jax-1p")).stdout),
            "tessel-mpi": lambda: warm(run(["mpirun", "-np", "2", "--oversubscribe", o["tessel"], "run", plan,
                                            "--steps", str(steps), "--stats"] + ins + od("tessel-mpi")).stderr),
        }
        port = free_port()
        s["jax-2p"] = lambda: warm("".join(two_procs(
            lambda r: [VENV_PY, pj, "dist", name, d, "--steps", str(steps), "--rank", str(r), "--port", str(port)]
            + od("jax-2p"))))
        if torch_ok:
            s["torch-2p"] = lambda: warm("".join(two_procs(
                lambda r: [SYS_PY, pt, name, d, "--steps", str(steps), "--rank", str(r), "--port", str(port)]
                + od("torch-2p"))))
        return s

    peak = fma_peak(o)
    times = {}
    outdir = os.path.join(d, "out")
    os.makedirs(outdir, exist_ok=True)
    for r in range(-1, reps):
        last = r == reps - 1
        for side, fn in sides(outdir if last else None).items():
            ms = fn()
            if r >= 0:
                times.setdefault(side, []).append(ms)
    with open(os.path.join(d, "params.json")) as fh:
        params = {int(k): v for k, v in json.load(fh).items()}
    for side in times:
        check(name, side, os.path.join(outdir, side), d, params)

    def fig(side):
        v = times[side]
        return "%s %.2f ms (min %.2f, max %.2f)" % (side, median(v), min(v), max(v))

    t2, tm = median(times["tessel-2dev"]), median(times["tessel-mpi"])
    j1, j2 = median(times["jax-1p"]), median(times["jax-2p"])
    parts = [fig(s) for s in times]
    ratios = ["tessel-2dev/jax-1p %.2f" % (t2 / j1), "tessel-mpi/jax-2p %.2f" % (tm / j2)]
    multi = [j2]
    if "torch-2p" in times:
        tt = median(times["torch-2p"])
        ratios.append("tessel-mpi/torch-2p %.2f" % (tm / tt))
        multi.append(tt)
    r = max(t2 / j1, tm / min(multi))
    # The same comparisons round by round: each round runs every side
    # once, minutes apart at most, so its ratios share the machine's state
    # of that moment; their spread is the noise under the medians' ratio.
    by_round = [("in one process", [t / j for t, j in zip(times["tessel-2dev"], times["jax-1p"])]),
                ("across processes", [t / min(p) for t, p in
                                      zip(times["tessel-mpi"], zip(*[times[s] for s in ("jax-2p", "torch-2p")
                                                                     if s in times]))])]
    rounds = "by round: " + ", ".join("%s %.2f-%.2f (median %.2f, %d of %d rounds at most 0.8)"
                                      % (w, min(v), max(v), median(v), sum(x <= 0.8 for x in v), len(v))
                                      for w, v in by_round)
    floor = floor_clause(d, peak, 0.8 * j1, 0.8 * min(multi), t2)
    # tessel's f32 dots as the environment fixed them (TESSEL_SGEMM reaches
    # every tessel side; amx-bf16x3 is not f32's bits, so the line says it)
    sgemm = "tessel TESSEL_SGEMM=%s; " % ENV["TESSEL_SGEMM"] if ENV.get("TESSEL_SGEMM") else ""
    return ("%s; %s; %s (%s%s; %s%s; warm step medians, %d steps a process, %d interleaved rounds; outputs match "
            "JAX's; %s) ratio %.2f"
            % ("; ".join(parts), ", ".join(ratios), rounds, sgemm, ver["jax"], ver["torch"],
               "" if torch_ok else " (no torch-2p)", steps, reps, floor, r))


def main(argv):
    args = [a for a in argv[1:] if a != "--quick"]
    bin_dir = "build/release"
    if "--bin" in args:
        i = args.index("--bin")
        bin_dir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1 or args[0] not in NAMES:
        sys.stderr.write("usage: peers.py %s [--quick] [--bin DIR]\n" % "|".join(NAMES))
        return 2
    name = args[0]
    o = {"quick": "--quick" in argv, "tessel": os.path.abspath(os.path.join(bin_dir, "tessel")),
         "gemm_bench": os.path.abspath(os.path.join(bin_dir, "bench", "gemm_bench")),
         "work": os.path.abspath(os.path.join(bin_dir, "bench", "work"))}
    os.makedirs(o["work"], exist_ok=True)
    try:
        line = bench(name, o)
    except (Failed, subprocess.TimeoutExpired) as e:
        print("bench peers-%s: FAILED %s" % (name, e))
        return 1
    print("bench peers-%s: %s" % (name, line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
