"""peers_jax.py: the JAX side of `bench/run peers` (issue 34), run with
build/jax-venv/bin/python (JAX 0.10.2 on the CPU). Three commands:

    peers_jax.py gen NAME DIR [--quick]
        writes DIR/in_K.npy (the inputs, drawn once here and read by every
        side), DIR/params.json (which outputs update which inputs),
        DIR/model.hlo (jax.jit(fn, in_shardings, out_shardings) on a
        2-device mesh, lowered: tessel's program) and DIR/ref_I.npy (JAX's
        outputs on the 2-device mesh in this process: the reference every
        side is compared with)
    peers_jax.py run NAME DIR --steps S [--out OUT]
        one process, 2 devices (--xla_force_host_platform_device_count=2);
        S steps of the jitted function on the same inputs (compiled before
        the first), prints `steps: first A ms, then median B ms`; writes
        the last step's outputs to OUT/output_I.npy
    peers_jax.py dist NAME DIR --steps S --rank R --port P [--out OUT]
        one of 2 processes joined by jax.distributed.initialize (gloo CPU
        collectives, jax_cpu_collectives_implementation), one device each;
        the same steps and line; rank 0 writes the (gathered) outputs

Each device computes on one thread (--xla_cpu_multi_thread_eigen=false), as
tessel's devices and the PyTorch ranks (torch.set_num_threads(1)) do.
"""
import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
_flags = os.environ.get("XLA_FLAGS", "")
if MODE in ("gen", "run"):
    _flags += " --xla_force_host_platform_device_count=2"
_flags += " --xla_cpu_multi_thread_eigen=false"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_models import WORKLOADS  # noqa: E402


def shardings(w, mesh):
    ins, outs = w.specs
    si = tuple(NamedSharding(mesh, s) for s in ins)
    so = NamedSharding(mesh, outs) if isinstance(outs, P) else tuple(NamedSharding(mesh, s) for s in outs)
    return si, so


def load_inputs(d):
    arrs = []
    while os.path.exists(os.path.join(d, "in_%d.npy" % len(arrs))):
        arrs.append(np.load(os.path.join(d, "in_%d.npy" % len(arrs))))
    return arrs


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def time_steps(f, args, steps):
    """Step times in ms of `steps` calls of f(*args), each waited for."""
    times, out = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        out = f(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def print_steps(times):
    warm = sorted(times[1:]) or times
    n = len(warm)
    med = warm[n // 2] if n % 2 else (warm[n // 2 - 1] + warm[n // 2]) / 2
    print("steps: first %.3f ms, then median %.3f ms" % (times[0], med), flush=True)


def save(outdir, outs):
    os.makedirs(outdir, exist_ok=True)
    for i, o in enumerate(outs):
        np.save(os.path.join(outdir, "output_%d.npy" % i), np.asarray(o))


def cmd_gen(name, d, quick):
    w = WORKLOADS[name]
    os.makedirs(d, exist_ok=True)
    inputs = w.inputs(np.random.default_rng(7), quick)
    for k, a in enumerate(inputs):
        np.save(os.path.join(d, "in_%d.npy" % k), np.asarray(a))
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    si, so = shardings(w, mesh)
    with jax.set_mesh(mesh):
        f = jax.jit(w.fn, in_shardings=si, out_shardings=so)
        structs = tuple(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in inputs)
        lowered = f.lower(*structs)
        with open(os.path.join(d, "model.hlo"), "w") as fh:
            fh.write(lowered.as_text("hlo"))
        # XLA's count of the compiled program's arithmetic, a device's
        # (the SPMD program): bench/peers.py's floor at the FMA peak.
        cost = lowered.compile().cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        with open(os.path.join(d, "cost.json"), "w") as fh:
            json.dump({"flops": float(cost.get("flops", 0.0))}, fh)
        outs = as_tuple(f(*inputs))
    for i, o in enumerate(outs):
        np.save(os.path.join(d, "ref_%d.npy" % i), np.asarray(o))
    # Written last: its presence says the directory is complete.
    with open(os.path.join(d, "params.json"), "w") as fh:
        json.dump({str(k): v for k, v in w.params.items()}, fh)


def cmd_run(name, d, steps, outdir):
    w = WORKLOADS[name]
    inputs = load_inputs(d)
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    si, so = shardings(w, mesh)
    with jax.set_mesh(mesh):
        args = [jax.device_put(a, s) for a, s in zip(inputs, si)]
        f = jax.jit(w.fn, in_shardings=si, out_shardings=so).lower(*args).compile()
        times, out = time_steps(f, args, steps)
    print_steps(times)
    if outdir:
        save(outdir, as_tuple(out))


def cmd_dist(name, d, steps, rank, port, outdir):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address="127.0.0.1:%d" % port, num_processes=2, process_id=rank)
    from jax.experimental import multihost_utils

    w = WORKLOADS[name]
    inputs = load_inputs(d)
    mesh = Mesh(np.array(jax.devices()), ("x",))
    si, so = shardings(w, mesh)
    with jax.set_mesh(mesh):
        args = [jax.make_array_from_callback(np.shape(a), s, lambda idx, a=a: np.asarray(a)[idx])
                for a, s in zip(inputs, si)]
        f = jax.jit(w.fn, in_shardings=si, out_shardings=so).lower(*args).compile()
        multihost_utils.sync_global_devices("compiled")
        times, out = time_steps(f, args, steps)
        full = [multihost_utils.process_allgather(o, tiled=True) for o in as_tuple(out)]
    print_steps(times)
    if outdir and rank == 0:
        save(outdir, full)
    jax.distributed.shutdown()
    # Leave without running the C++ static destructors: jaxlib 0.10.2 can
    # abort in one of them (a raw_hash_set destructor, seen under load on
    # mlp-sgd) after everything above is printed and saved, which would fail
    # the line for a teardown it does not time. Flush first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv):
    def opt(name, default=None):
        return argv[argv.index(name) + 1] if name in argv else default

    if len(argv) < 4 or MODE not in ("gen", "run", "dist"):
        sys.stderr.write(__doc__)
        return 2
    name, d = argv[2], argv[3]
    if MODE == "gen":
        cmd_gen(name, d, "--quick" in argv)
    elif MODE == "run":
        cmd_run(name, d, int(opt("--steps", "5")), opt("--out"))
    else:
        cmd_dist(name, d, int(opt("--steps", "5")), int(opt("--rank")), int(opt("--port")), opt("--out"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
