"""jax_mpi.py: tessel.jax under `mpirun -np 2` (ctest jax_mpi, through
jax_mpi.sh): each rank passes only its own part of every argument
(tessel.jax.process_local_data, as jax.make_array_from_process_local_data
takes it) and gets its own part of every output back; those parts must
equal the same parts of JAX's own execution of the jitted function (in
every rank's process, on 8 CPU devices), within DESIGN.md's tolerances.
Programs: the Megatron MLP on a 1-D mesh of 2 (one device per rank) and a
2-D mesh of 2x2 (two devices per rank), with a pytree in and out.
"""
import sanitize  # noqa: F401  (first: an ASan build restarts with the runtime)
import sys

import numpy as np
from mpi4py import MPI

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import tessel.jax as tj

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
assert size == 2, "run with mpirun -np 2"
RTOL = 1e-4  # f32, of the output's largest magnitude


def check(name, got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, "%s: rank %d: shape %s, JAX's part %s" % (name, rank, got.shape, want.shape)
    tol = RTOL * max(float(np.abs(want).max(initial=0)), 1e-30)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg="%s (rank %d)" % (name, rank))


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"])
    y = h @ params["w2"]
    return {"y": y, "h": h}


def run_case(name, mesh, xs, s1, s2, hs, ys):
    rng = np.random.default_rng(42)  # the same global values on every rank
    params = {"w1": rng.standard_normal((16, 8)).astype(np.float32),
              "w2": rng.standard_normal((8, 4)).astype(np.float32)}
    x = rng.standard_normal((8, 16)).astype(np.float32)
    shard = lambda spec: NamedSharding(mesh, spec)
    in_sh = ({"w1": shard(s1), "w2": shard(s2)}, shard(xs))
    out_sh = {"y": shard(ys), "h": shard(hs)}
    f = jax.jit(mlp, in_shardings=in_sh, out_shardings=out_sh)
    specs = ({"w1": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=in_sh[0]["w1"]),
              "w2": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=in_sh[0]["w2"])},
             jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=in_sh[1]))
    c = tj.compile(f, *specs, comm=comm)
    assert c.plan.hosts == 2, c.plan
    local = lambda a, s: tj.process_local_data(a, s, rank, size)
    lp = {"w1": local(params["w1"], in_sh[0]["w1"]), "w2": local(params["w2"], in_sh[0]["w2"])}
    lx = local(x, in_sh[1])
    out = c(lp, lx)
    want = f(params, x)
    for k in ("y", "h"):
        check("%s %s" % (name, k), out[k], local(np.asarray(want[k]), out_sh[k]))
    return out


devs = np.array(jax.devices()[:4])
# 1-D mesh of 2: rank r holds device r. x's rows and h's rows split over
# the ranks; w1 split by columns, w2 by rows (Megatron).
m1 = Mesh(devs[:2], ("x",))
out = run_case("mesh 2", m1, P(), P(None, "x"), P("x", None), P(None, "x"), P())
assert out["h"].shape == (8, 4), out["h"].shape  # this rank's columns of h
# 2-D mesh 2x2: rank r holds devices 2r, 2r+1 (row r of the mesh).
m2 = Mesh(devs.reshape(2, 2), ("d", "m"))
out = run_case("mesh 2x2", m2, P("d", None), P(None, "m"), P("m", None), P("d", "m"), P("d", None))
assert out["h"].shape == (4, 8) and out["y"].shape == (4, 4), (out["h"].shape, out["y"].shape)

# a wrong local shape is an error on every rank, nothing hangs
f = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(m1, P("x")), out_shardings=NamedSharding(m1, P("x")))
c = tj.compile(f, jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(m1, P("x"))), comm=comm)
try:
    c(np.zeros(3, np.float32))
    raise AssertionError("a wrong local shape ran")
except tj.tessel.Error as e:
    assert "process-local data" in str(e) and "(4,)" in str(e), str(e)
np.testing.assert_array_equal(c(np.arange(4, dtype=np.float32) + 4 * rank),
                              2 * (np.arange(4, dtype=np.float32) + 4 * rank))
comm.Barrier()
if rank == 0:
    print("jax_mpi: ok")
sys.stdout.flush()
