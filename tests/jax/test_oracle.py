"""test_oracle.py: JAX's own execution is tessel's second oracle (issue 28,
DESIGN.md "The oracle").

For each program of tests/jax/programs.py and each of its meshes, one
Python process:
  1. lowers `jax.jit(fn, in_shardings, out_shardings)` to HLO text and runs
     the same jitted function with JAX on the same mesh of CPU devices, on
     inputs drawn from a fixed seed;
  2. check "run": `tessel run MODEL.hlo --num-partitions N --input K=FILE
     --output-dir D` (every device in this process) equals JAX's outputs;
  3. check "mpi" (N even; see MPI_MESHES below for which meshes): `tessel
     compile MODEL.hlo --num-partitions N --hosts 2 -o PLAN`, then `mpirun
     -np 2 ... tessel run PLAN ...` over TCP, equals JAX's outputs;
  4. check "grad" (programs with grad_wrt): `tessel grad MODEL.hlo --wrt
     ...` of the lowered forward module, run on N partitions, equals
     `jax.value_and_grad` of the function run by JAX on the same mesh (the
     loss, then one gradient per --wrt argument).
Equality is DESIGN.md's: integer, bool and random-bit outputs exactly,
floating ones within 1e-4 (f32), 2e-2 (bf16), 2e-3 (f16), 1e-5 (f64) of the
output's largest magnitude, NaNs in the same places. bf16 inputs are
written as f32 .npy files (DESIGN.md), bf16 outputs come back as f32.

Where a program marks JAX's own sharded run wrong (`jax_wrong`, an XLA bug
named in the mark), tessel is compared with JAX's run on one device, and
JAX's sharded run must still differ from that run.

A check a program marks in its `xfail` must fail (its failure is printed
with the reason); one that passes is an error, so that no mark outlives
the support it waits for.

MPI_MESHES: mpirun costs a second or two a launch on this 2-core machine,
so the mpi check runs on a representative subset: each program on its
mesh with the most devices (4 devices per rank and more, the collectives
crossing the ranks), plus every program's 2-device mesh where it has one
(one device per rank). --mpi all runs every mesh with an even device count.

usage: test_oracle.py [--programs NAME,... | --group G --groups G1,G2,...]
                      [--checks run,mpi,grad]
                      [--meshes all|SHAPE;...] [--mpi subset|all|none]
                      [--keep DIR] [-v]
Environment: TESSEL_BIN (the tessel binary), TESSEL_SRC (the source tree,
for tests/bin/mpirun); XLA_FLAGS and JAX_PLATFORMS as tests/CMakeLists.txt's
TESSEL_JAX_TEST_ENV sets them. Exit status 0 when every check is as
expected, 1 otherwise.
"""
import argparse
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import programs as registry  # noqa: E402  (first: it sets XLA_FLAGS for JAX)
import numpy as np  # noqa: E402
import jax  # noqa: E402

SRC = pathlib.Path(os.environ.get("TESSEL_SRC", HERE.parents[1]))
TESSEL = os.environ.get("TESSEL_BIN") or str(SRC / "build" / "release" / "tessel")
MPIRUN = [str(SRC / "tests" / "bin" / "mpirun"), "--allow-run-as-root", "--oversubscribe",
          "--mca", "btl", "tcp,self", "-np", "2"]
TOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-3, "float64": 1e-5}
SEED = 28


class Mismatch(Exception):
    pass


def compare(what, got, want):
    """Raise Mismatch unless `got` (from tessel's .npy) equals `want` (JAX's)
    as DESIGN.md's oracle says."""
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch("%s: shape %s, JAX %s" % (what, got.shape, want.shape))
    kind = want.dtype.name
    if kind in ("complex64", "complex128"):
        # A complex value is its two parts, each held to its part type's
        # tolerance against the largest magnitude of either part.
        part = "float32" if kind == "complex64" else "float64"
        got = np.stack([got.real, got.imag]).astype(part)
        want = np.stack([want.real, want.imag]).astype(part)
        kind = part
    if kind not in TOL:
        if not np.array_equal(got.astype(want.dtype), want):
            bad = np.argwhere(got.astype(want.dtype) != want)
            i = tuple(bad[0])
            raise Mismatch("%s (%s): %d elements differ, first at %s: %s, JAX %s"
                           % (what, kind, len(bad), list(i), got[i], want[i]))
        return 0.0
    g = got.astype(np.float64)
    w = want.astype(np.float32).astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        raise Mismatch("%s: NaNs in other places than JAX's" % what)
    g, w = np.nan_to_num(g, nan=0.0), np.nan_to_num(w, nan=0.0)
    if not np.array_equal(np.isinf(g), np.isinf(w)) or not np.array_equal(g[np.isinf(g)], w[np.isinf(w)]):
        raise Mismatch("%s: infinities differ from JAX's" % what)
    fin = np.isfinite(w)
    scale = float(np.max(np.abs(w[fin]))) if fin.any() else 0.0
    err = float(np.max(np.abs(g[fin] - w[fin]))) if fin.any() else 0.0
    if err > TOL[kind] * max(scale, 1e-30):
        i = tuple(np.unravel_index(np.argmax(np.where(fin, np.abs(g - w), -1)), w.shape))
        raise Mismatch("%s (%s): max error %.3g > %g x largest magnitude %.3g; at %s: %r, JAX %r"
                       % (what, kind, err, TOL[kind], scale, list(i), g[i], w[i]))
    return err / scale if scale else 0.0


def tessel(args, cmd=None, timeout=300):
    p = subprocess.run((cmd or [TESSEL]) + args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise Mismatch("`%s` exit %d:\n%s%s" % (" ".join(["tessel"] + args[:3]) + " ...", p.returncode,
                                               p.stdout[-2000:], p.stderr[-2000:]))
    return p.stdout


def write_inputs(d, inputs):
    args = []
    for k, a in enumerate(inputs):
        a = np.asarray(a)
        if a.dtype.name in ("bfloat16",) or a.dtype.name.startswith("float8"):
            a = a.astype(np.float32)
        f = d / ("in%d.npy" % k)
        np.save(f, a)
        args += ["--input", "%d=%s" % (k, f)]
    return args


def read_outputs(d, n):
    outs = []
    for i in range(n):
        f = d / ("output_%d.npy" % i)
        if not f.exists():
            raise Mismatch("no %s (tessel wrote %s)" % (f.name, sorted(p.name for p in d.iterdir())))
        outs.append(np.load(f))
    if (d / ("output_%d.npy" % n)).exists():
        raise Mismatch("tessel wrote more than the %d outputs JAX gives" % n)
    return outs


def compare_all(got, want):
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        worst = max(worst, compare("output %d" % i, g, w))
    return worst


def run_and_reference(d, hlo, args, n, want):
    """`tessel run HLO --num-partitions n` and `tessel run HLO --reference`
    (outputs in d/run, d/reference) both equal to JAX's outputs `want`: the
    worst relative error of the two."""
    worst = 0.0
    for mode, extra in (("run", ["--num-partitions", str(n)]), ("reference", ["--reference"])):
        out = d / mode
        out.mkdir()
        tessel(["run", str(hlo), "--output-dir", str(out)] + extra + args)
        worst = max(worst, compare_all(read_outputs(out, len(want)), want))
    return worst


def check_run(case, d):
    out = d / "run"
    out.mkdir()
    tessel(["run", str(case.hlo), "--num-partitions", str(case.n), "--output-dir", str(out)] + case.input_args)
    want = case.expected("run")
    return compare_all(read_outputs(out, len(want)), want)


def check_mpi(case, d):
    plan = d / "model.plan"
    tessel(["compile", str(case.hlo), "--num-partitions", str(case.n), "--hosts", "2", "-o", str(plan)])
    out = d / "mpi"
    out.mkdir()
    tessel([TESSEL, "run", str(plan), "--output-dir", str(out)] + case.input_args, cmd=MPIRUN)
    want = case.expected("mpi")
    return compare_all(read_outputs(out, len(want)), want)


def check_grad(case, d):
    prog = case.prog
    g = d / "grad.hlo"
    tessel(["grad", str(case.hlo), "--wrt", ",".join(str(i) for i in prog.grad_wrt), "-o", str(g)])
    want = case.expected("grad")
    out = d / "grad"
    out.mkdir()
    tessel(["run", str(g), "--num-partitions", str(case.n), "--output-dir", str(out)] + case.input_args)
    return compare_all(read_outputs(out, len(want)), want)


CHECKS = {"run": check_run, "mpi": check_mpi, "grad": check_grad}


class Case:
    def __init__(self, prog, shape, root):
        self.prog, self.shape, self.n = prog, shape, math.prod(shape)
        self.dir = root / ("%s_%s" % (prog.name, "x".join(map(str, shape))))
        self.dir.mkdir(parents=True)
        self.inputs = prog.make_inputs(np.random.default_rng(SEED))
        self.hlo = self.dir / "model.hlo"
        self.hlo.write_text(prog.lower_hlo(shape, self.inputs))
        self.input_args = write_inputs(self.dir, self.inputs)
        self.cache = {}

    def _jax(self, kind, shape):
        if (kind, shape) not in self.cache:
            run = self.prog.execute_grad if kind == "grad" else self.prog.execute
            self.cache[(kind, shape)] = run(shape, self.inputs)
        return self.cache[(kind, shape)]

    def expected(self, check):
        """JAX's outputs for `check`: its run on this mesh, or, where the
        program marks JAX's sharded run wrong (jax_wrong), its run on one
        device, after checking that the sharded run still differs."""
        kind = "grad" if check == "grad" else "run"
        wrong = self.prog.jax_wrong_reason(check, self.shape)
        if not wrong:
            return self._jax(kind, self.shape)
        one = self._jax(kind, (1,))
        try:
            compare_all(self._jax(kind, self.shape), one)
        except Mismatch:
            return one
        raise Mismatch("JAX's sharded run equals its run on one device: remove the jax_wrong mark (%s)"
                       % wrong)


def mpi_meshes(prog, mode):
    even = [s for s in prog.mesh_shapes if math.prod(s) % 2 == 0]
    if mode == "all":
        return even
    if mode == "none" or not even:
        return []
    pick = {max(even, key=math.prod)}
    pick.update(s for s in even if math.prod(s) == 2)
    return [s for s in even if s in pick]


def parse_shapes(text):
    return [tuple(int(x) for x in s.split(",")) for s in text.split(";") if s]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="")
    ap.add_argument("--group", default="")
    ap.add_argument("--groups", default="", help="every group ctest runs: each program must be in one")
    ap.add_argument("--checks", default="run,mpi,grad")
    ap.add_argument("--meshes", default="all")
    ap.add_argument("--mpi", default="subset", choices=("subset", "all", "none"))
    ap.add_argument("--keep", default="")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    if a.groups and sorted(a.groups.split(",")) != sorted(registry.GROUPS):
        sys.exit("FAIL: ctest runs the groups %s, programs.py has %s" % (a.groups, ",".join(registry.GROUPS)))
    names = [n for n in a.programs.split(",") if n] or [p.name for p in registry.PROGRAMS
                                                         if not a.group or p.group == a.group]
    if not names:
        sys.exit("FAIL: no program in group %s" % a.group)
    checks = [c for c in a.checks.split(",") if c]
    for n in names:
        if n not in registry.BY_NAME:
            sys.exit("unknown program %s (known: %s)" % (n, ", ".join(registry.BY_NAME)))
    if not pathlib.Path(TESSEL).is_file():
        sys.exit("FAIL: no tessel binary at %s (TESSEL_BIN)" % TESSEL)
    root = pathlib.Path(a.keep) if a.keep else pathlib.Path(tempfile.mkdtemp(prefix="tessel-jax-"))
    if a.keep and root.exists():
        shutil.rmtree(root)
    results = []   # (program, shape, check, status, detail)
    t_start = time.time()
    for name in names:
        prog = registry.BY_NAME[name]
        shapes = prog.mesh_shapes if a.meshes == "all" else [s for s in parse_shapes(a.meshes)
                                                            if s in prog.mesh_shapes]
        mpi = mpi_meshes(prog, a.mpi)
        for shape in shapes:
            t0 = time.time()
            try:
                case = Case(prog, shape, root)
            except Exception as e:  # JAX itself refused: a registry bug
                results.append((name, shape, "jax", "FAIL", "%s: %s" % (type(e).__name__, e)))
                continue
            t_jax = time.time() - t0
            for check in checks:
                if check == "mpi" and shape not in mpi or check == "grad" and not prog.grad_wrt:
                    continue
                t1 = time.time()
                reason = prog.xfail_reason(check, shape)
                try:
                    err = CHECKS[check](case, case.dir)
                    status, detail = ("XPASS", "passes but is marked: " + reason) if reason else \
                        ("ok", "worst relative error %.2g" % err)
                    if prog.jax_wrong_reason(check, shape):
                        detail += ", against JAX on one device (JAX's sharded run is wrong: jax_wrong)"
                except (Mismatch, subprocess.TimeoutExpired) as e:
                    status, detail = ("xfail", reason + "\n    " + str(e).splitlines()[0]) if reason \
                        else ("FAIL", str(e))
                results.append((name, shape, check, status, detail))
                print("%-6s %-12s %-6s %-5s %5.1fs (lowering %4.1fs)  %s" % (
                    status, name, "x".join(map(str, shape)), check, time.time() - t1, t_jax,
                    detail if (a.v or status != "ok") else detail), flush=True)
                t_jax = 0.0
    bad = [r for r in results if r[3] in ("FAIL", "XPASS")]
    print("\n%d checks in %.0f s: %d ok, %d expected failures, %d unexpected"
          % (len(results), time.time() - t_start, sum(r[3] == "ok" for r in results),
             sum(r[3] == "xfail" for r in results), len(bad)))
    for r in bad:
        print("%s: %s on mesh %s, %s: %s" % (r[3], r[0], r[1], r[2], r[4]))
    if not a.keep and not bad:
        shutil.rmtree(root, ignore_errors=True)
    elif not a.keep:
        print("inputs, models and outputs kept in %s" % root)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
