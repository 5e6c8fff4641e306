#!/usr/bin/python3
"""driver.py: tessel's command-line benchmarks against baselines measured in
the same run (python3, stdlib only). bench/run calls it once per benchmark:

    driver.py NAME [--quick] [--bin build/release]

NAME is mlp, mlp-tcp, train, train-remat, allreduce, allreduce-local, allgather,
allgather-local, reduce-scatter, reduce-scatter-local, alltoall,
alltoall-local, elementwise, softmax, layernorm, compile, compile-devices,
memory, parse or parse-wild (dot is the C program dot_bench). Every benchmark alternates tessel and its
baseline (A B A B ...), one warm-up pair then at least 5 timed pairs,
takes medians, validates both sides' results, and prints its figures
last as one line `bench NAME: ... ratio R`. Times are tessel's own
`--stats` phases or per-step times (process start, compile and input
generation excluded) and the baselines' own timers. A failure (a crash,
a wrong result) prints `bench NAME: FAILED ...` and exits 1.

mlp, mlp-tcp and train: each process runs 4 steps, `tessel run --steps 4` against
the baseline's first step plus 3 warm ones, so both sides pay one cold
step per process.

The collectives (allreduce ... alltoall-local): each process runs 10
steps (calls), the first on fresh buffers, the others on warm ones; a
run's figure is the median of its 9 warm steps (tessel's `--stats`
`steps:` line) or calls; 7 runs of each side give the min, median and
max printed. Under mpirun (2 ranks, one device each) the baseline is the
raw MPI call on the same buffers; in one process (2 devices, 2 threads)
it is the time the collective's memory traffic takes at the bandwidth
bench/stream_base measures with 2 threads in the same run.
"""
import json
import math
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "gen.py")
PY = "/usr/bin/python3"
REPS = 5
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


class Failed(Exception):
    pass


def run(cmd, check=True):
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if check and p.returncode != 0:
        raise Failed("%s exited %d: %s" % (" ".join(cmd[:4]), p.returncode,
                                           (p.stderr or p.stdout).strip()[-400:]))
    return p


def mpirun(np, cmd, mca=()):
    return ["mpirun", "-np", str(np), "--oversubscribe"] + list(mca) + cmd


def gen(kind, args, path):
    if not os.path.exists(path):
        run([PY, GEN, kind] + [str(a) for a in args] + [path])
    return path


def stat_mpi(stderr, phase):
    """The slowest rank's time of a phase from `tessel run --stats` under mpirun."""
    m = re.search(r"stats: %s\s+min ([\d.]+) ms\s+median ([\d.]+) ms\s+max ([\d.]+) ms"
                  % re.escape(phase), stderr)
    if not m:
        raise Failed("no '%s' in tessel's --stats: %s" % (phase, stderr.strip()[-300:]))
    return float(m.group(3))


def stat_one(stderr, phase):
    m = re.search(r"%s ([\d.]+) ms" % re.escape(phase), stderr)
    if not m:
        raise Failed("no '%s' in tessel's --stats: %s" % (phase, stderr.strip()[-300:]))
    return float(m.group(1))


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def base_times(out):
    m = re.search(r"base cold ([\d.]+) ms warm ([\d.]+) ms total ([\d.]+) ms", out)
    if not m:
        raise Failed("baseline printed no times: %s" % out.strip()[-300:])
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


STEPS = 4  # steps per process: the first (cold) and 3 warm ones, on both sides


def mpi_pair(o, name, hlo, base_cmd, mca=()):
    """Interleave `mpirun -np 2 tessel run HLO --steps 4` and the baseline
    doing the same 4 steps in one process. Returns medians of tessel's
    execute phase and collectives (slowest rank), and of the baseline's
    total, first step and warm step. The last tessel run writes its output,
    which the last baseline run validates."""
    t, coll, total, cold, warm = [], [], [], [], []
    outdir = os.path.join(o["work"], name + "_out")
    for r in range(-1, REPS):
        last = r == REPS - 1
        cmd = [o["tessel"], "run", hlo, "--random-inputs", "7", "--stats", "--steps", str(STEPS)]
        if last:
            cmd += ["--output-dir", outdir]
        p = run(mpirun(2, cmd, mca))
        tt = stat_mpi(p.stderr, "execute")
        tc = stat_mpi(p.stderr, "collectives") if "collectives" in p.stderr else float("nan")
        check = ["--check", os.path.join(outdir, "output_0.npy")] if last else []
        bc, bw, bt = base_times(run(mpirun(2, base_cmd + ["--warm", str(STEPS - 1)] + check, mca)).stdout)
        if r >= 0:
            t.append(tt)
            coll.append(tc)
            total.append(bt)
            cold.append(bc)
            warm.append(bw)
    return median(t), median(coll), median(total), median(cold), median(warm)


def bench_mlp(o, mca=(), name="mlp"):
    b, d, f = (512, 1024, 4096) if not o["quick"] else (128, 512, 512)
    hlo = gen("mlp", [b, d, f], os.path.join(o["work"], "mlp_%d_%d_%d.hlo" % (b, d, f)))
    t, tc, bt, bc, bw = mpi_pair(o, name, hlo, [o["base"] + "mlp_base", str(b), str(d), str(f), "7"], mca)
    return ("tessel %.2f ms a step (collectives %.2f) mpi+blas %.2f ms a step (first %.2f, warm %.2f) "
            "(x[%d,%d] W1[%d,%d], 2 ranks%s, %d steps a process, median of %d) ratio %.2f"
            % (t / STEPS, tc / STEPS, bt / STEPS, bc, bw, b, d, d, f, " " + " ".join(mca) if mca else "",
               STEPS, REPS, t / bt))


def bench_mlp_tcp(o):
    """mlp with both sides over TCP (`--mca btl tcp,self`: the ranks talk as
    separate hosts would, so the all-reduce costs more): tessel's windowed
    dot overlaps it with compute, the baseline's MPI_Allreduce blocks."""
    return bench_mlp(o, ("--mca", "btl", "tcp,self"), "mlp-tcp")


LR = "1e-6"  # the train benchmark's SGD step (small: the weights stay in tanh's range)


def bench_train(o):
    """One SGD step of the Megatron MLP with loss sum(y^2)/2: `tessel grad
    --wrt w1,w2 --sgd LR` of gen.py train writes it (forward, backward,
    update, the weights aliased so --steps carries them), against
    train_base.c doing the same by hand."""
    b, d, f = (512, 1024, 4096) if not o["quick"] else (128, 512, 512)
    fwd = gen("train", [b, d, f], os.path.join(o["work"], "train_%d_%d_%d.hlo" % (b, d, f)))
    step = os.path.join(o["work"], "train_step_%d_%d_%d.hlo" % (b, d, f))
    run([o["tessel"], "grad", fwd, "--wrt", "w1,w2", "--sgd", LR, "-o", step])
    t, tc, bt, bc, bw = mpi_pair(o, "train", step, [o["base"] + "train_base", str(b), str(d), str(f), "7", LR])
    return ("tessel %.2f ms a step (collectives %.2f) mpi+blas %.2f ms a step (first %.2f, warm %.2f) "
            "(x[%d,%d] W1[%d,%d], forward + backward + SGD, 2 ranks, %d steps a process, median of %d) "
            "ratio %.2f" % (t / STEPS, tc / STEPS, bt / STEPS, bc, bw, b, d, d, f, STEPS, REPS, t / bt))


def bench_train_remat(o):
    """The SGD step of a deep tanh MLP (gen.py deep: activations far
    outweigh the weights) whose natural estimated peak per device is P,
    compiled with --limit memory=P/2 (reordered, values recomputed:
    docs/plan.md, "Fitting a memory limit"), against the unlimited step:
    time per step (execute, slowest rank), the measured peak under the
    limit (`--stats`, device 0), outputs bit for bit equal. Both sides use
    one f32 GEMM library (--sgemm openblas): the default probe chooses per
    process by timing the program's first calls (device/blas_watch.c), so
    two runs may differ in their last bits whatever the limit."""
    layers, b, d = (16, 2048, 128) if not o["quick"] else (16, 512, 64)
    fwd = gen("deep", [layers, b, d], os.path.join(o["work"], "deep_%d_%d_%d.hlo" % (layers, b, d)))
    step = os.path.join(o["work"], "deep_step_%d_%d_%d.hlo" % (layers, b, d))
    wrt = ",".join("w%d" % (k + 1) for k in range(layers))
    run([o["tessel"], "grad", fwd, "--wrt", wrt, "--sgd", "1e-3", "-o", step])
    plan = json.loads(run([o["tessel"], "plan", step, "--format", "json"]).stdout)
    peak = plan["clusters"][0]["memory"]["peak_bytes_per_device"]
    limit = peak // 2
    fit = json.loads(run([o["tessel"], "plan", step, "--format", "json", "--limit", "memory=%d" % limit]).stdout)
    fit = fit["clusters"][0]["memory"]["fit"]
    times = {0: [], limit: []}
    measured = 0
    outs = {}
    for r in range(-1, REPS):
        last = r == REPS - 1
        for lim in (0, limit):
            cmd = [o["tessel"], "run", step, "--random-inputs", "7", "--stats", "--steps", str(STEPS),
                   "--sgemm", "openblas"]
            if lim:
                cmd += ["--limit", "memory=%d" % lim]
            if last:
                outs[lim] = os.path.join(o["work"], "deep_out_%d" % lim)
                cmd += ["--output-dir", outs[lim]]
            p = run(mpirun(2, cmd))
            if r >= 0:
                times[lim].append(stat_mpi(p.stderr, "execute"))
            if lim:
                m = re.findall(r"measured peak device \d+ (\d+) bytes", p.stderr)
                if not m:
                    raise Failed("no measured peak in tessel's --stats: %s" % p.stderr.strip()[-300:])
                measured = max([measured] + [int(x) for x in m])
    if measured > limit:
        raise Failed("measured peak %d bytes over the limit %d" % (measured, limit))
    for f in sorted(os.listdir(outs[0])):
        if f.endswith(".npy") and open(os.path.join(outs[0], f), "rb").read() != \
                open(os.path.join(outs[limit], f), "rb").read():
            raise Failed("%s differs under the limit" % f)
    t0, t1 = median(times[0]) / STEPS, median(times[limit]) / STEPS
    return ("unlimited %.2f ms a step, --limit memory=P/2 %.2f ms a step (estimated peak P %d -> %d bytes, "
            "measured %d <= %d; %d values recomputed, %.3g extra FLOPs per device a step; outputs bit-equal) "
            "(%d layers, x[%d,%d] over 2 ranks, %d steps a process, median of %d) ratio %.2f"
            % (t0, t1, peak, fit["peak_after"], measured, limit, len(fit["recomputed"]), fit["extra_flops"],
               layers, b, d, STEPS, REPS, t1 / t0))


# The collective benchmarks: each process runs CSTEPS steps (tessel) or
# calls (the baseline), the first cold (fresh buffers), the others warm
# (buffers reused: tessel's from its buffer cache, the baseline's its own);
# a run's figure is the median of its warm steps (tessel's --stats
# `steps: first A ms, then median B ms`) or calls; CREPS timed runs of
# each side, interleaved after one warm-up pair, give min / median / max.
CSTEPS = 10
CREPS = 7
MIB = 1 << 20


def warm_steps(stderr):
    m = re.search(r"steps: first ([\d.]+) ms, then median ([\d.]+) ms", stderr)
    if not m:
        raise Failed("no per-step times in tessel's --stats: %s" % stderr.strip()[-300:])
    return float(m.group(1)), float(m.group(2))


def base_calls(out):
    m = re.search(r"base cold ([\d.]+) ms warm ([\d.]+) ms total [\d.]+ ms min ([\d.]+) ms max ([\d.]+) ms", out)
    if not m:
        raise Failed("baseline printed no times: %s" % out.strip()[-300:])
    return float(m.group(1)), float(m.group(2))


def spread(v):
    return "min %.2f, max %.2f" % (min(v), max(v))


def coll_mpi(o, name, hlo, spmd, base_cmd):
    """Interleave `mpirun -np 2 tessel run HLO --steps CSTEPS` and the
    baseline's CSTEPS calls under mpirun. Returns per run: tessel's first
    and warm step, the baseline's first and warm call. The last tessel
    run writes device 0's output, which the last baseline run validates."""
    tf, tw, bf, bw = [], [], [], []
    outdir = os.path.join(o["work"], name + "_out")
    for r in range(-1, CREPS):
        last = r == CREPS - 1
        cmd = [o["tessel"], "run", hlo, "--random-inputs", "7", "--stats", "--steps", str(CSTEPS)]
        if spmd:
            cmd += ["--spmd", "--per-device"]
        if last:
            cmd += ["--output-dir", outdir] + (["--output-device", "0"] if spmd else [])
        first, warm = warm_steps(run(mpirun(2, cmd)).stderr)
        check = ["--check", os.path.join(outdir, "output_0.npy")] if last else []
        bc, bm = base_calls(run(mpirun(2, base_cmd + ["--warm", str(CSTEPS - 1)] + check)).stdout)
        if r >= 0:
            tf.append(first)
            tw.append(warm)
            bf.append(bc)
            bw.append(bm)
    return tf, tw, bf, bw


def mpi_line(call, tf, tw, bf, bw, what):
    return ("tessel %.2f ms a warm step (%s; first step %.2f) %s %.2f ms a call (%s; first %.2f) "
            "(%s, 2 ranks, %d steps a process, median of %d runs) ratio %.3f"
            % (median(tw), spread(tw), median(tf), call, median(bw), spread(bw), median(bf), what, CSTEPS, CREPS,
               median(tw) / median(bw)))


def bench_allreduce(o):
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    hlo = gen("allreduce", [n], os.path.join(o["work"], "allreduce_%d.hlo" % n))
    r = coll_mpi(o, "allreduce", hlo, False, [o["base"] + "allreduce_base", str(n), "7"])
    return mpi_line("MPI_Allreduce", *r, what="%g MiB f32" % (n * 4 / MIB))


def spmd_mpi(o, name, kind, call, n, what):
    hlo = gen(kind, [n], os.path.join(o["work"], "%s_%d.hlo" % (kind, n)))
    r = coll_mpi(o, name, hlo, True, [o["base"] + "coll_base", kind, str(n), "7"])
    return mpi_line(call, *r, what=what)


def bench_allgather(o):
    n = (32 * MIB) // 4 if not o["quick"] else (2 * MIB) // 4
    return spmd_mpi(o, "allgather", "allgather", "MPI_Allgather", n,
                    "f32[%d] a rank into %g MiB" % (n, 2 * n * 4 / MIB))


def bench_reduce_scatter(o):
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    return spmd_mpi(o, "reduce-scatter", "reducescatter", "MPI_Reduce_scatter_block", n,
                    "%g MiB f32 a rank, half each" % (n * 4 / MIB))


def bench_alltoall(o):
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    return spmd_mpi(o, "alltoall", "alltoall", "MPI_Alltoall", n, "%g MiB f32 a rank" % (n * 4 / MIB))


def coll_local(o, name, hlo, spmd, n_stream, traffic, rate_kind, check_cmd, what):
    """In one process (2 devices, 2 threads, no mpirun): tessel's warm step
    against the time `traffic` bytes take at the bandwidth stream_base
    measures with 2 threads (rate_kind: triad or memcpy) on arrays of
    n_stream f32, interleaved. The last run's output of device 0 is
    validated by check_cmd (its file appended)."""
    tf, tw, rate = [], [], []
    outdir = os.path.join(o["work"], name + "_out")
    for r in range(-1, CREPS):
        last = r == CREPS - 1
        cmd = [o["tessel"], "run", hlo, "--random-inputs", "7", "--stats", "--steps", str(CSTEPS)]
        if spmd:
            cmd += ["--spmd", "--per-device"]
        if last:
            cmd += ["--output-dir", outdir] + (["--output-device", "0"] if spmd else [])
        first, warm = warm_steps(run(cmd).stderr)
        out = run([o["base"] + "stream_base", str(n_stream), "2", "10"]).stdout
        m = re.search(r"stream triad ([\d.]+) GB/s memcpy ([\d.]+) GB/s", out)
        if not m:
            raise Failed("stream_base printed no rates: %s" % out.strip()[-300:])
        if r >= 0:
            tf.append(first)
            tw.append(warm)
            rate.append(float(m.group(1) if rate_kind == "triad" else m.group(2)))
    run(check_cmd + [os.path.join(outdir, "output_0.npy")])
    gbs = median(rate)
    ideal = traffic / (gbs * 1e6)  # ms
    return ("tessel %.2f ms a warm step (%s; first step %.2f) %g MiB at the %s rate %.2f GB/s (%s) = %.2f ms "
            "(%s, 2 devices in one process, %d steps a process, median of %d runs) ratio %.3f"
            % (median(tw), spread(tw), median(tf), traffic / MIB, rate_kind, gbs, spread(rate), ideal, what, CSTEPS,
               CREPS, median(tw) / ideal))


def bench_allreduce_local(o):
    """The issue's figure: read both inputs once, write the result into
    both devices' buffers (256 MiB at 64 MiB), at the STREAM triad rate."""
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    hlo = gen("allreduce", [n], os.path.join(o["work"], "allreduce_%d.hlo" % n))
    check = mpirun(2, [o["base"] + "allreduce_base", str(n), "7", "--warm", "0", "--check"])
    return coll_local(o, "allreduce-local", hlo, False, n, 4 * n * 4, "triad", check, "%g MiB f32" % (n * 4 / MIB))


def local_spmd(o, name, kind, n, traffic, what):
    hlo = gen(kind, [n], os.path.join(o["work"], "%s_%d.hlo" % (kind, n)))
    check = [o["base"] + "coll_base", kind, str(n), "7", "--devices", "2", "--device", "0", "--check"]
    n_stream = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    return coll_local(o, name, hlo, True, n_stream, traffic, "memcpy", check, what)


def bench_allgather_local(o):
    """Read each device's operand once, write both devices' results."""
    n = (32 * MIB) // 4 if not o["quick"] else (2 * MIB) // 4
    return local_spmd(o, "allgather-local", "allgather", n, 2 * n * 4 + 2 * (2 * n * 4),
                      "f32[%d] a device into %g MiB" % (n, 2 * n * 4 / MIB))


def bench_reduce_scatter_local(o):
    """Read both operands once, write each device's half."""
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    return local_spmd(o, "reduce-scatter-local", "reducescatter", n, 2 * n * 4 + n * 4,
                      "%g MiB f32 a device, half each" % (n * 4 / MIB))


def bench_alltoall_local(o):
    """Read both operands once, write both results."""
    n = (64 * MIB) // 4 if not o["quick"] else (4 * MIB) // 4
    return local_spmd(o, "alltoall-local", "alltoall", n, 4 * n * 4, "%g MiB f32 a device" % (n * 4 / MIB))


def bench_elementwise(o):
    """One process runs STEPS steps; tessel's figure is the median of the
    steps after the first (--stats), as STREAM times its kernels on arrays
    it has already touched. The first step, which also pays for the first
    touch of the fresh result buffer, is reported beside it."""
    n = 16 << 20 if not o["quick"] else 1 << 20
    steps = 6
    hlo = gen("elementwise", [n], os.path.join(o["work"], "elementwise_%d.hlo" % n))
    outdir = os.path.join(o["work"], "elementwise_out")
    t, first, s = [], [], []
    for r in range(-1, REPS):
        cmd = [o["tessel"], "run", hlo, "--random-inputs", "7", "--steps", str(steps), "--stats"]
        if r == REPS - 1:
            cmd += ["--output-dir", outdir]
        err = run(cmd).stderr
        m = re.search(r"steps: first ([\d.]+) ms, then median ([\d.]+) ms", err)
        if not m:
            raise Failed("no per-step times in tessel's --stats: %s" % err.strip()[-300:])
        b = re.search(r"stream triad ([\d.]+) GB/s", run([o["base"] + "elementwise_base", str(n), "1"]).stdout)
        if r >= 0:
            first.append(float(m.group(1)))
            t.append(float(m.group(2)))
            s.append(float(b.group(1)))
    run([o["base"] + "elementwise_base", str(n), "--check", "7", os.path.join(outdir, "output_0.npy")])
    gbs = 3.0 * n * 4 / (median(t) * 1e6)  # read x and y once, write the result once
    stream = median(s)
    return ("tessel %.2f GB/s (%.2f ms a warm step; first step %.2f ms) stream-triad %.2f GB/s "
            "(8 fused ops over %g M f32, one thread, %d steps a process, median of %d) ratio %.2f"
            % (gbs, median(t), median(first), stream, n / 2**20, steps, REPS, gbs / stream))


def rows_pair(o, name):
    """softmax and layernorm: `tessel run --steps 6` of gen.py's module over
    the rows of an f32[4096,4096] (quick: [512,4096]), one device, against
    the hand-written single-threaded loop bench/NAME_base.c on the same
    random inputs, interleaved; tessel's time is the median of its warm
    steps (--stats), the baseline's the median of 3 timed runs after a
    warm-up, both into output buffers touched before. The last tessel
    output is checked against a double-precision recomputation by the
    baseline, which checks its own result the same way."""
    n, d = (4096, 4096) if not o["quick"] else (512, 4096)
    steps = 6
    hlo = gen(name, [n, d], os.path.join(o["work"], "%s_%d_%d.hlo" % (name, n, d)))
    outdir = os.path.join(o["work"], name + "_out")
    t, first, b = [], [], []
    for r in range(-1, REPS):
        cmd = [o["tessel"], "run", hlo, "--random-inputs", "7", "--steps", str(steps), "--stats"]
        if r == REPS - 1:
            cmd += ["--output-dir", outdir]
        err = run(cmd).stderr
        m = re.search(r"steps: first ([\d.]+) ms, then median ([\d.]+) ms", err)
        if not m:
            raise Failed("no per-step times in tessel's --stats: %s" % err.strip()[-300:])
        out = run([o["base"] + name + "_base", str(n), str(d), "3"]).stdout
        bm = re.search(r"base %s ([\d.]+) ms" % name, out)
        if not bm:
            raise Failed("baseline printed no time: %s" % out.strip()[-300:])
        if r >= 0:
            first.append(float(m.group(1)))
            t.append(float(m.group(2)))
            b.append(float(bm.group(1)))
    run([o["base"] + name + "_base", str(n), str(d), "--check", "7", os.path.join(outdir, "output_0.npy")])
    return ("tessel %.2f ms a warm step (first step %.2f ms) hand-written loop %.2f ms (f32[%d,%d] rows, "
            "one thread, %d steps a process, median of %d) ratio %.2f"
            % (median(t), median(first), median(b), n, d, steps, REPS, median(t) / median(b)))


def bench_softmax(o):
    return rows_pair(o, "softmax")


def bench_layernorm(o):
    return rows_pair(o, "layernorm")


def fit_exponent(counts, ms):
    """Least-squares slope of log(time) over log(instructions): 1.0 is linear."""
    xs = [math.log(c) for c in counts]
    ys = [math.log(m) for m in ms]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def bench_compile(o):
    sizes = [1000, 4000, 16000, 64000] if not o["quick"] else [500, 1000, 2000, 4000]
    files = [gen("transformer", [n], os.path.join(o["work"], "transformer_%d.hlo" % n)) for n in sizes]
    counts = []
    for f in files:
        m = re.search(r"(\d+) instructions", run([o["tessel"], "check", f]).stdout)
        counts.append(int(m.group(1)))
    times = {n: [] for n in sizes}
    cpu = {n: [] for n in sizes}  # user+sys of the compile process: less sensitive to a busy machine
    null, nullcpu = [], []
    plan = os.path.join(o["work"], "transformer.plan")
    broken = None  # (instructions, why): the first size tessel could not compile
    for r in range(-1, REPS):
        # Process start, measured each round: `tessel --version` loads the
        # same binary and libraries and does nothing.
        t0 = time.perf_counter()
        u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        run([o["tessel"], "--version"])
        nt = (time.perf_counter() - t0) * 1e3
        u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        ncpu = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) * 1e3
        for n, f, c in zip(sizes, files, counts):
            if broken and c >= broken[0]:
                break
            t0 = time.perf_counter()
            u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = run([o["tessel"], "compile", f, "-o", plan], check=False)
            ms = (time.perf_counter() - t0) * 1e3
            u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cms = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) * 1e3
            if p.returncode != 0:
                why = "signal %d" % -p.returncode if p.returncode < 0 else "status %d" % p.returncode
                broken = (c, why + (" " + p.stderr.strip()[-200:] if p.stderr.strip() else ""))
                break
            text = open(plan).read()
            layers = (c - 12) // 36
            if "// TesselEnd" not in text or text.count(" all-reduce(") < layers:
                raise Failed("plan of %d instructions has %d all-reduces for %d layers"
                             % (c, text.count(" all-reduce("), layers))
            if r >= 0:
                times[n].append(ms)
                cpu[n].append(cms)
        if r >= 0:
            null.append(nt)
            nullcpu.append(ncpu)
    start = median(null)
    done = [(c, max(median(times[n]) - start, 1e-3)) for n, c in zip(sizes, counts) if times[n]]
    per = ", ".join("%d: %.1f ms" % cm for cm in done)
    startcpu = median(nullcpu)
    cdone = [(c, max(median(cpu[n]) - startcpu, 1e-3)) for n, c in zip(sizes, counts) if cpu[n]]
    cpus = ", ".join("%.1f" % m for _, m in cdone)
    kc = fit_exponent([c for c, _ in cdone], [m for _, m in cdone]) if len(cdone) >= 2 else float("nan")
    k = fit_exponent([c for c, _ in done], [m for _, m in done]) if len(done) >= 2 else float("nan")
    line = ("%s (process start %.1f ms subtracted; cpu time %s ms, exponent %.2f, %.2f us/instruction; "
            "median of %d) %.2f us/instruction at %d ratio %.2f"
            % (per, start, cpus, kc, cdone[-1][1] * 1e3 / cdone[-1][0] if cdone else float("nan"), REPS,
               done[-1][1] * 1e3 / done[-1][0], done[-1][0], k)
            if done else "")
    if broken:
        raise Failed("tessel compile of %d instructions: %s; %s" % (broken[0], broken[1], line))
    return line


def bench_compile_devices(o):
    """`tessel compile --hosts 1` of the 50-layer MLP (gen.py mlp_layers) at
    8 to 65,536 devices: the compile's wall time (process start
    subtracted) and the plan's size at each; the ratio is the largest
    count's time over the smallest's (GSPMD's property: 1).
    One model at every count: its hidden width (65,536) divides by each,
    so every count partitions the same program. (A width below the device
    count pads the shards, and the masks that padding needs make a
    different, larger program: at width 1024, 65,536 devices get 2.1
    times the instructions of 8.)"""
    sizes = [8, 64, 512, 4096, 65536] if not o["quick"] else [8, 64, 512, 4096]
    files = [gen("mlp_layers", [50, n, 65536], os.path.join(o["work"], "mlp50_%d_65536.hlo" % n)) for n in sizes]
    plan = os.path.join(o["work"], "mlp50.plan")
    times = {n: [] for n in sizes}
    size = {}
    null = []
    # A compile takes a few ms, as long as the process start: the median
    # of many runs (the fastest, a single sample, jumps by a millisecond).
    reps = 4 * REPS
    for r in range(-1, reps):
        t0 = time.perf_counter()
        run([o["tessel"], "--version"])
        nt = (time.perf_counter() - t0) * 1e3
        for n, f in zip(sizes, files):
            t0 = time.perf_counter()
            run([o["tessel"], "compile", f, "--hosts", "1", "--limit", "devices=%d" % max(n, 4096), "-o", plan])
            ms = (time.perf_counter() - t0) * 1e3
            text = open(plan).read()
            if "// TesselEnd" not in text or text.count(" all-reduce(") < 50:
                raise Failed("plan of %d devices has %d all-reduces for 50 layers" % (n, text.count(" all-reduce(")))
            size[n] = len(text)
            if r >= 0:
                times[n].append(ms)
        if r >= 0:
            null.append(nt)
    start = median(null)
    done = [(n, max(median(times[n]) - start, 1e-3), min(times[n]) - min(null)) for n in sizes]
    per = ", ".join("%d: %.1f ms (fastest %.1f) %.0f KB" % (n, ms, fast, size[n] / 1e3) for n, ms, fast in done)
    return ("%s (process start %.1f ms subtracted; median of %d) plan size x%.1f ratio %.2f"
            % (per, start, reps, size[sizes[-1]] / size[sizes[0]], done[-1][1] / done[0][1]))


def bench_memory(o):
    n = (1 << 30) // 4 if not o["quick"] else (64 << 20) // 4
    hlo = gen("memory", [n], os.path.join(o["work"], "memory_%d.hlo" % n))
    shard = n * 4 // 2
    rss = []
    rssf = os.path.join(o["work"], "rss.")

    def peak_rss(cmd):
        """Peak RSS in bytes of each of 2 ranks: /usr/bin/time -o a file per
        rank (mpirun's forwarding of stderr can lose the last lines)."""
        for k in range(2):
            if os.path.exists(rssf + str(k)):
                os.remove(rssf + str(k))
        sh = '/usr/bin/time -f "%%M" -o %s"$OMPI_COMM_WORLD_RANK" "$@"' % rssf
        p = run(mpirun(2, ["/bin/sh", "-c", sh, "sh"] + cmd))
        try:
            return p, [int(open(rssf + str(k)).read().split()[-1]) * 1024 for k in range(2)]
        except (OSError, ValueError, IndexError):
            raise Failed("no peak RSS from /usr/bin/time for both ranks")

    for r in range(3 if not o["quick"] else 1):
        p, kb = peak_rss([o["tessel"], "run", hlo, "--random-inputs", "7", "--stats"])
        rss.append(max(kb))
        m = re.search(r"output 0: f32\[\] min (\S+)", p.stdout)
        if not m:
            raise Failed("no output from tessel: %s" % p.stdout.strip()[-200:])
        got = float(m.group(1))
    want = float(run([o["base"] + "elementwise_base", str(n), "--sum", "7"]).stdout.split()[1])
    if not abs(got - want) <= 1e-5 * n / 2 + 1e-3:
        raise Failed("tessel's sum is %g, expected %g" % (got, want))
    # The floor: the peak RSS of an MPI process that holds nothing.
    floor = max(peak_rss([o["base"] + "allreduce_base", "1", "1", "--warm", "0"])[1])
    peak = median(rss)
    return ("peak RSS %.0f MiB per rank, shard %.0f MiB (input %.0f MiB over 2 ranks; an empty MPI "
            "process peaks at %.0f MiB) ratio %.2f"
            % (peak / 2**20, shard / 2**20, n * 4 / 2**20, floor / 2**20, peak / shard))


def bench_parse(o):
    n = 64000 if not o["quick"] else 16000
    f = gen("transformer", [n], os.path.join(o["work"], "transformer_%d.hlo" % n))
    size = os.path.getsize(f)
    t, rd = [], []
    for r in range(-1, REPS):
        p = run([o["tessel"], "check", f, "--stats"])
        if ": ok: " not in p.stdout:
            raise Failed("tessel check: %s" % p.stdout.strip())
        tt = stat_one(p.stderr, "parse+verify")
        t0 = time.perf_counter()
        with open(f, "rb", buffering=0) as fh:  # a read loop, 1 MiB at a time
            got = 0
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                got += len(b)
        ms = (time.perf_counter() - t0) * 1e3
        if got != size:
            raise Failed("read %d of %d bytes" % (got, size))
        if r >= 0:
            t.append(tt)
            rd.append(ms)
    mbs, rmbs = size / 1e3 / median(t), size / 1e3 / median(rd)
    return ("tessel check %.1f MB/s (%.1f ms) read %.0f MB/s (%.1f MB, %s, median of %d) ratio %.4f"
            % (mbs, median(t), rmbs, size / 1e6, p.stdout.split(": ok: ")[1].split(",")[2].strip(),
               REPS, mbs / rmbs))


def bench_parse_wild(o):
    """Parsing a real dump (XLA's benchmark dump of Mixtral 8x7B, 3.9 MB,
    from ../shared/conformance/xla_wild) against the generated transformer
    module, per megabyte, interleaved in one run: ratio = Mixtral's ms/MB
    over the transformer's (target <= 1)."""
    wild = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                        "conformance", "xla_wild", "modules", "010_mixtral_8x7b_bf16_1x8.hlo")
    if not os.path.exists(wild):
        return "skipped (%s is absent) ratio 0" % os.path.normpath(wild)
    n = 64000 if not o["quick"] else 16000
    gen_f = gen("transformer", [n], os.path.join(o["work"], "transformer_%d.hlo" % n))
    files = [(wild, os.path.getsize(wild)), (gen_f, os.path.getsize(gen_f))]
    per = [[], []]
    for r in range(-1, REPS):
        for k, (f, size) in enumerate(files):
            p = run([o["tessel"], "check", f, "--stats"])
            if ": ok: " not in p.stdout:
                raise Failed("tessel check %s: %s" % (f, p.stdout.strip()))
            if r >= 0:
                per[k].append(stat_one(p.stderr, "parse+verify") / (size / 1e6))
    mw, mt = median(per[0]), median(per[1])
    return ("mixtral %.1f ms/MB (%.1f MB) transformer %.1f ms/MB (%.1f MB) (median of %d) ratio %.3f"
            % (mw, files[0][1] / 1e6, mt, files[1][1] / 1e6, REPS, mw / mt))


BENCHES = {"mlp": bench_mlp, "mlp-tcp": bench_mlp_tcp, "train": bench_train, "train-remat": bench_train_remat,
           "allreduce": bench_allreduce,
           "allreduce-local": bench_allreduce_local, "allgather": bench_allgather,
           "allgather-local": bench_allgather_local, "reduce-scatter": bench_reduce_scatter,
           "reduce-scatter-local": bench_reduce_scatter_local, "alltoall": bench_alltoall,
           "alltoall-local": bench_alltoall_local, "elementwise": bench_elementwise, "softmax": bench_softmax,
           "layernorm": bench_layernorm,
           "compile": bench_compile, "compile-devices": bench_compile_devices, "memory": bench_memory, "parse": bench_parse,
           "parse-wild": bench_parse_wild}


def main(argv):
    args = [a for a in argv[1:] if a != "--quick"]
    binDir = "build/release"
    if "--bin" in args:
        i = args.index("--bin")
        binDir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1 or args[0] not in BENCHES:
        sys.stderr.write("usage: driver.py %s [--quick] [--bin DIR]\n" % "|".join(BENCHES))
        return 2
    name = args[0]
    o = {"quick": "--quick" in argv, "tessel": os.path.join(binDir, "tessel"),
         "base": os.path.join(binDir, "bench") + "/", "work": os.path.join(binDir, "bench", "work")}
    os.makedirs(o["work"], exist_ok=True)
    try:
        line = BENCHES[name](o)
    except Failed as e:
        print("bench %s: FAILED %s" % (name, e))
        return 1
    print("bench %s: %s" % (name, line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
