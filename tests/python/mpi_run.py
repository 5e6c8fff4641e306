"""mpi_run.py: tessel's Python module under mpirun through mpi4py, one rank
per host: `mpirun -np H python3 mpi_run.py MODEL.hlo` compiles the model
for 2 partitions on H hosts (on every rank), runs it on a communicator of
its own (plan.run(..., comm=...)): MPI.COMM_WORLD split with the ranks
reversed, so its rank 0 is the world's last rank; a library that used
MPI_COMM_WORLD behind the caller's back would put the outputs on the
wrong rank. NumPy inputs drawn from a fixed seed (the same
on every rank), and on rank 0 compares the outputs with plan.run_reference
and with NumPy's tanh(x @ w1) @ w2; the other ranks must get None. Then
the same from a plan file saved by rank 0 and loaded by all, and with
random=SEED. Every rank exits with rank 0's verdict (0 or 1).

Exits 77 (ctest: skipped) when numpy or mpi4py is not importable; the
ctest wrapper, mpi_run.sh, checks that before starting mpirun.
"""
import os
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    from mpi4py import MPI
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(SKIP)

import tessel  # noqa: E402


def close(got, want, what):
    want = np.asarray(want, np.float64)
    if got is None or tuple(got.shape) != want.shape:
        return "%s: got %r, expected shape %s" % (what, None if got is None else got.shape, want.shape)
    scale = float(np.max(np.abs(want)))
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    if not err <= 1e-4 * scale:  # the oracle's f32 tolerance (DESIGN.md)
        return "%s: max error %g > 1e-4 x %g" % (what, err, scale)
    return None


def main():
    world = MPI.COMM_WORLD
    comm = world.Split(0, world.Get_size() - 1 - world.Get_rank())
    rank, size = comm.Get_rank(), comm.Get_size()
    assert rank == size - 1 - world.Get_rank()
    model = sys.argv[1]
    text = open(model).read()
    plan = tessel.compile(text, num_partitions=2, hosts=size)
    shapes = [i.shape for i in plan.inputs]
    rng = np.random.default_rng(21)
    ins = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    problems = []

    outs = plan.run(ins, comm=comm)
    if rank == 0:
        ref = plan.run_reference(ins)
        problems += [close(outs[0], ref[0], "rank 0: output 0 vs run_reference"),
                     close(outs[0], np.tanh(ins[0].astype(np.float64) @ ins[1]) @ ins[2],
                           "rank 0: output 0 vs numpy")]
    elif outs is not None:
        problems.append("rank %d: outputs %r, expected None" % (rank, outs))

    # a plan file written by rank 0, loaded by every rank
    d = comm.bcast(tempfile.mkdtemp(prefix="tessel-mpi-py.") if rank == 0 else None, root=0)
    path = os.path.join(d, "model.plan")
    if rank == 0:
        plan.save(path)
    comm.Barrier()
    loaded = tessel.load_plan(path)
    if (loaded.hosts, loaded.num_partitions) != (size, 2):
        problems.append("rank %d: loaded plan for %d hosts x %d partitions" % (rank, loaded.hosts,
                                                                                 loaded.num_partitions))
    louts = loaded.run(random=5, comm=comm)
    comm.Barrier()
    if rank == 0:
        os.remove(path)
        os.rmdir(d)
        ref5 = plan.run_reference(random=5)
        problems.append(close(louts[0], ref5[0], "rank 0: loaded plan, random=5, vs run_reference"))
    elif louts is not None:
        problems.append("rank %d: loaded plan outputs %r, expected None" % (rank, louts))

    # an error before the devices run is agreed on: every rank raises
    try:
        plan.run([np.zeros((3, 3), np.float32)] + ins[1:], comm=comm)
        problems.append("rank %d: a wrong input shape did not raise" % rank)
    except tessel.Error as e:
        if e.status != tessel.Status.EINPUT:
            problems.append("rank %d: wrong shape raised status %s: %s" % (rank, e.status, e))

    problems = [p for p in problems if p]
    allp = comm.gather(problems, root=0)
    verdict = None
    if rank == 0:
        allp = [p for ps in allp for p in ps]
        for p in allp:
            print("FAIL: " + p, flush=True)
        if not allp:
            print("mpi_run: %s on %d ranks x %d devices (comm: COMM_WORLD split, ranks reversed): its rank 0 "
                  "(world rank %d) got outputs matching run_reference and numpy; other ranks got None"
                  % (os.path.basename(model), size, plan.local_devices, world.Get_rank()), flush=True)
        verdict = 1 if allp else 0
    verdict = comm.bcast(verdict, root=0)
    comm.Free()
    return verdict


if __name__ == "__main__":
    sys.exit(main())
