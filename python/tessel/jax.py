"""tessel.jax: JAX functions compiled and run by tessel (docs/python.md).

    import jax, numpy as np, tessel.jax
    f = jax.jit(lambda x, w: jnp.tanh(x @ w))
    c = tessel.jax.compile(f, x, w)      # lower for the examples, compile with tessel
    y = c(x, w)                          # NumPy out, in f's output structure

The function (a jax.jit function, or a plain one with in_shardings /
out_shardings) is lowered for example arguments (arrays or
jax.ShapeDtypeStructs, with shardings or not) to HLO text
(`Lowered.as_text("hlo")`), compiled by tessel for as many partitions as
the shardings' devices, and run on NumPy or JAX arrays: the arguments in
the structure (pytree) the function takes, the outputs in the structure it
returns, as NumPy arrays (or JAX arrays with the shardings JAX gives them,
jax_outputs=True).

Under mpirun, compile(..., comm=MPI.COMM_WORLD) makes a plan for one host
per rank; each rank then passes only its own part of every argument and
gets its own part of every output back (process_local_data). Partition p
is device p of the shardings' device assignment (`mesh.devices.flat[p]`
for a NamedSharding); rank r holds partitions r*L .. r*L+L-1.

Importing this module imports JAX; `import tessel` alone does not.
"""
import numpy as np

import jax

import tessel

__all__ = ["Compiled", "compile", "run", "grad", "process_local_data", "partition_devices"]


def _flat(args, kwargs):
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves, tree


def _device_count(lowered, examples, shardings):
    """The partitions: the device count JAX lowered for, else the largest
    device set among the examples' and the given shardings."""
    n = getattr(lowered, "_lowering", None)
    n = getattr(n, "compile_args", {}).get("num_devices") if n is not None else None
    if n:
        return int(n)
    best = 1
    for s in list(examples) + list(shardings):
        s = getattr(s, "sharding", s)
        ds = getattr(s, "device_set", None)
        if ds:
            best = max(best, len(ds))
    return best


def _kept(lowered, nleaves):
    """The argument leaves that are parameters of the lowered module, in
    order (jax.jit drops unused ones unless keep_unused=True)."""
    low = getattr(lowered, "_lowering", None)
    kept = getattr(low, "compile_args", {}).get("kept_var_idx") if low is not None else None
    return sorted(kept) if kept is not None else list(range(nleaves))


def partition_devices(sharding):
    """The devices of a JAX sharding in partition order: partition p of the
    HLO JAX lowers is partition_devices(s)[p]."""
    mesh = getattr(sharding, "mesh", None)
    if mesh is not None and hasattr(mesh, "devices"):
        return list(np.asarray(mesh.devices).flat)
    da = getattr(sharding, "_device_assignment", None)
    if da is not None:
        return list(da)
    return sorted(sharding.device_set, key=lambda d: d.id)


def _local_index(shape, sharding, process, nprocesses):
    """Per dimension, the sorted distinct (start, stop) intervals of the
    shards that partitions process*L .. process*L+L-1 hold (L = partitions
    / nprocesses)."""
    devs = partition_devices(sharding)
    n = len(devs)
    if n % nprocesses:
        raise ValueError("tessel.jax: %d partitions do not split into %d processes" % (n, nprocesses))
    l = n // nprocesses
    imap = sharding.devices_indices_map(tuple(shape))
    mine = [imap[d] for d in devs[process * l:(process + 1) * l]]
    per_dim = []
    for k, size in enumerate(shape):
        iv = sorted({sl[k].indices(size)[:2] for sl in mine})
        per_dim.append(iv)
    return per_dim


def process_local_data(x, sharding, process, nprocesses):
    """The part of the global array x that process `process` of
    `nprocesses` holds under `sharding` (its partitions' shards, each
    dimension the distinct shard intervals of those partitions laid end to
    end), as jax.make_array_from_process_local_data takes it and as a run
    under mpirun gives each rank its outputs. Replicated dimensions stay
    whole."""
    x = np.asarray(x)
    per_dim = _local_index(x.shape, sharding, process, nprocesses)
    for k, iv in enumerate(per_dim):
        if len(iv) == 1 and iv[0] == (0, x.shape[k]):
            continue
        x = np.concatenate([np.take(x, np.arange(a, b), axis=k) for a, b in iv], axis=k)
    return x


class Compiled:
    """A JAX function lowered for example arguments and compiled by tessel.

    Attributes: hlo (the HLO text JAX lowered), lowered (jax.stages.Lowered),
    plan (tessel.Plan), num_partitions, in_tree / out_tree (the pytree
    structures of the arguments (args, kwargs) and of the outputs),
    out_info (the outputs' jax.ShapeDtypeStructs), comm (the mpi4py
    communicator or None). Call it as the function: c(*args, **kwargs)."""

    def __init__(self, lowered, plan, comm=None, jax_outputs=False, kept=None):
        self.lowered = lowered
        self.hlo = lowered.as_text("hlo")
        self.plan = plan
        self.num_partitions = plan.num_partitions
        self.in_tree = lowered.in_tree
        self.out_tree = lowered.out_tree
        self.out_info = lowered.out_info
        self.comm = comm
        self.jax_outputs = jax_outputs
        self._kept = kept
        self._inputs = plan.inputs
        self._out_dtypes = [np.dtype(o.dtype) for o in jax.tree_util.tree_leaves(self.out_info)]

    def _bind(self, args, kwargs):
        leaves, tree = _flat(args, kwargs)
        if tree != self.in_tree:
            raise TypeError("tessel.jax: the arguments' structure %s is not the one compiled for, %s"
                            % (tree, self.in_tree))
        vals = []
        for j, k in enumerate(self._kept):
            info = self._inputs[j]
            a = np.asarray(leaves[k])
            if a.dtype != info.dtype:
                a = a.astype(info.dtype)
            vals.append(a)
        return vals

    def _run(self, vals):
        """The plan's output leaves for bound inputs (this rank's parts
        under a communicator)."""
        if self.comm is None:
            return self.plan.run(vals)
        return self.plan.run(vals, comm=self.comm, process_local=True)

    def _unflatten(self, outs, jax_outputs):
        if len(outs) != self.out_tree.num_leaves:
            raise tessel.Error(tessel.Status.EINTERNAL, "%d outputs for %d leaves of %s"
                               % (len(outs), self.out_tree.num_leaves, self.out_tree))
        leaves = [a.astype(dt) if a.dtype != dt else a for a, dt in zip(outs, self._out_dtypes)]
        if jax_outputs and self.comm is None:
            leaves = [jax.device_put(a, s) for a, s in zip(leaves, self._jax_out_shardings())]
        return jax.tree_util.tree_unflatten(self.out_tree, leaves)

    def _jax_out_shardings(self):
        low = getattr(self.lowered, "_lowering", None)
        outs = getattr(low, "compile_args", {}).get("out_shardings") if low is not None else None
        if outs is None or not all(isinstance(s, jax.sharding.Sharding) for s in outs):
            outs = jax.tree_util.tree_leaves(self.lowered.compile().output_shardings)
        return list(outs)

    def __call__(self, *args, **kwargs):
        """Run on these arguments (NumPy or JAX arrays, the structure
        compiled for); the outputs in the function's structure. Under a
        communicator: this rank's parts in and out (process_local_data)."""
        return self._unflatten(self._run(self._bind(args, kwargs)), self.jax_outputs)

    def reference(self, *args, **kwargs):
        """The unpartitioned module on one device (tessel's oracle), on
        whole arguments; outputs as __call__ (NumPy)."""
        return self._unflatten(self.plan.run_reference(self._bind(args, kwargs)), False)


def _lower(fun, args, kwargs, in_shardings, out_shardings):
    if not hasattr(fun, "lower"):
        opts = {}
        if in_shardings is not None:
            opts["in_shardings"] = in_shardings
        if out_shardings is not None:
            opts["out_shardings"] = out_shardings
        fun = jax.jit(fun, **opts)
    elif in_shardings is not None or out_shardings is not None:
        raise TypeError("tessel.jax: in_shardings and out_shardings go with a plain function; "
                        "this one is jitted already (give them to jax.jit)")
    return fun.lower(*args, **(kwargs or {}))


def compile(fun, *example_args, example_kwargs=None, in_shardings=None, out_shardings=None, comm=None,
            jax_outputs=False, **options):
    """Lower `fun` for the example arguments and compile it with tessel.

    fun: a jax.jit function, or a plain function (jitted here with
    in_shardings / out_shardings when given). example_args (and
    example_kwargs): arrays or jax.ShapeDtypeStructs (with sharding= for a
    sharded argument), in the structure fun takes. comm: an mpi4py
    communicator: a plan for comm.Get_size() hosts, run with each rank's
    own parts (see the module's doc). jax_outputs: outputs as JAX arrays
    with the shardings JAX gives them (one process only). options go to
    tessel.compile (limits, link_gbps, verify, num_partitions to override
    the device count). Returns a Compiled."""
    lowered = _lower(fun, example_args, example_kwargs, in_shardings, out_shardings)
    leaves, _ = _flat(example_args, example_kwargs)
    shardings = [s for s in jax.tree_util.tree_leaves((in_shardings, out_shardings))
                 if isinstance(s, jax.sharding.Sharding)]
    n = options.pop("num_partitions", 0) or _device_count(lowered, leaves, shardings)
    hosts = comm.Get_size() if comm is not None else options.pop("hosts", 0)
    plan = tessel.compile(lowered.as_text("hlo"), num_partitions=n, hosts=hosts,
                          name=options.pop("name", "<jax %s>" % getattr(fun, "__name__", "function")), **options)
    kept = _kept(lowered, len(leaves))
    if len(plan.inputs) != len(kept):
        raise tessel.Error(tessel.Status.EUNSUPPORTED, "the lowered module has %d input leaves, the arguments %d "
                           "(%d kept by jax.jit)" % (len(plan.inputs), len(leaves), len(kept)))
    return Compiled(lowered, plan, comm=comm, jax_outputs=jax_outputs, kept=kept)


def run(fun, *args, **kwargs):
    """compile(fun, *args, **kwargs)(*args): one run on these arguments
    (keyword arguments are compile's)."""
    return compile(fun, *args, **kwargs)(*args)


class _Grad(Compiled):
    """A Compiled whose call returns the gradient of the scalar output with
    respect to the arguments argnums (structured as they are), as jax.grad
    does, or (value, grads) as jax.value_and_grad."""

    def __init__(self, lowered, plan, kept, wrt_leaves, argnums, value_and_grad, comm):
        super().__init__(lowered, plan, comm=comm, kept=kept)
        self._wrt_leaves = wrt_leaves
        self._argnums_spec = argnums
        self._argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        self._value_and_grad = value_and_grad

    def __call__(self, *args, **kwargs):
        outs = self._run(self._bind(args, kwargs))
        nfwd = self.out_tree.num_leaves
        value = outs[0].astype(self._out_dtypes[0])
        grads_of = dict(zip(self._wrt_leaves, outs[nfwd:]))
        result = []
        for i in self._argnums:
            a_leaves, a_tree = jax.tree_util.tree_flatten(args[i])
            first = sum(len(jax.tree_util.tree_leaves(args[j])) for j in range(i))
            g = []
            for k, leaf in enumerate(a_leaves):
                arr = grads_of.get(first + k)
                leaf = np.asarray(leaf)
                g.append(np.zeros(leaf.shape, leaf.dtype) if arr is None else arr.astype(leaf.dtype))
            result.append(jax.tree_util.tree_unflatten(a_tree, g))
        grads = result[0] if isinstance(self._argnums_spec, int) else tuple(result)
        return (value, grads) if self._value_and_grad else grads


def grad(fun, *example_args, argnums=0, value_and_grad=False, in_shardings=None, out_shardings=None,
         comm=None, **options):
    """jax.grad of fun, by tessel: fun's lowered forward module through
    tessel.grad (reverse mode, `tessel grad`), compiled and run by tessel.
    fun returns a scalar; argnums (an int or a tuple) picks the arguments to
    differentiate, which come back structured as they are.
    value_and_grad=True returns (value, grads). Returns a callable Compiled."""
    lowered = _lower(fun, example_args, None, in_shardings, out_shardings)
    leaves, _ = _flat(example_args, None)
    kept = _kept(lowered, len(leaves))
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    wrt_leaves = []
    for i in nums:
        first = sum(len(jax.tree_util.tree_leaves(example_args[j])) for j in range(i))
        for k in range(len(jax.tree_util.tree_leaves(example_args[i]))):
            if first + k in kept:
                wrt_leaves.append(first + k)
    params = [kept.index(k) for k in wrt_leaves]
    if lowered.out_tree.num_leaves != 1 or jax.tree_util.tree_leaves(lowered.out_info)[0].shape != ():
        raise TypeError("tessel.jax.grad: the function must return a scalar, not %s" % (lowered.out_info,))
    if not params:
        raise ValueError("tessel.jax.grad: the function uses none of the arguments %s" % (argnums,))
    shardings = [s for s in jax.tree_util.tree_leaves((in_shardings, out_shardings))
                 if isinstance(s, jax.sharding.Sharding)]
    n = options.pop("num_partitions", 0) or _device_count(lowered, leaves, shardings)
    gm = tessel.grad(lowered.as_text("hlo"), wrt=params, name="<jax grad %s>" % getattr(fun, "__name__", "f"))
    try:
        plan = tessel.compile(gm, num_partitions=n, hosts=comm.Get_size() if comm is not None else 0, **options)
    finally:
        gm.close()
    return _Grad(lowered, plan, kept, wrt_leaves, argnums, value_and_grad, comm)
