"""test_jax_front.py: tessel.jax in one process (ctest jax_front), every
result against JAX's own execution of the same jitted function on the
same mesh of CPU devices, within DESIGN.md's tolerances (f32: 1e-4 of the
output's largest magnitude):
- the Megatron MLP (pytree in: a dict of weights; pytree out: a dict),
  lowered from jax.ShapeDtypeStructs with shardings on a mesh of 2;
- a 2-D mesh (2x2) program lowered from a plain function with
  in_shardings / out_shardings, and from concrete arrays;
- JAX arrays in, JAX arrays out with JAX's shardings (jax_outputs=True);
- tessel.jax.grad against jax.grad, and value_and_grad;
- an unused argument (jax.jit drops it from the module);
- process_local_data against JAX's own shards;
- input names: JAX's names bind (Plan.run with a dict), a wrong name
  raises tessel.Error listing the names that work, nearest first;
- `import tessel` works without JAX (a subprocess with jax hidden).
"""
import sanitize  # noqa: F401  (first: an ASan build restarts with the runtime)
import os
import subprocess
import sys

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import tessel
import tessel.jax as tj

RTOL = 1e-4


def close(got, want, what):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, g.dtype, w.shape, w.dtype)
        tol = RTOL * max(float(np.abs(w).max(initial=0)), 1e-30)
        np.testing.assert_allclose(g, w, rtol=0, atol=tol, err_msg=what)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want), (what, got, want)


rng = np.random.default_rng(0)
devs = np.array(jax.devices()[:4])


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"])
    return {"y": h @ params["w2"], "sum": h.sum()}


params = {"w1": rng.standard_normal((16, 8)).astype(np.float32),
          "w2": rng.standard_normal((8, 4)).astype(np.float32)}
x = rng.standard_normal((4, 16)).astype(np.float32)

# ---- the MLP from ShapeDtypeStructs with shardings, mesh of 2 ----
m1 = Mesh(devs[:2], ("x",))
s = lambda spec, m=m1: NamedSharding(m, spec)
specs = ({"w1": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=s(P(None, "x"))),
          "w2": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=s(P("x", None)))},
         jax.ShapeDtypeStruct((4, 16), jnp.float32, sharding=s(P())))
f = jax.jit(mlp)
c = tj.compile(f, *specs)
assert c.num_partitions == 2 and c.plan.num_partitions == 2, c.plan
assert "params__w1__" in c.hlo and "sharding=" in c.hlo, c.hlo[:400]
close(c(params, x), f(params, x), "mlp, mesh 2")
close(c.reference(params, x), f(params, x), "mlp, reference")
# JAX arrays in, JAX arrays out, placed as JAX places them
jparams = jax.device_put(params, {"w1": s(P(None, "x")), "w2": s(P("x", None))})
cj = tj.compile(f, *specs, jax_outputs=True)
out = cj(jparams, jnp.asarray(x))
want = f(jparams, jnp.asarray(x))
assert isinstance(out["y"], jax.Array) and out["y"].sharding.is_equivalent_to(want["y"].sharding, 2), out["y"].sharding
close(out, want, "mlp, jax outputs")
# one-shot run
close(tj.run(f, params, x), f(params, x), "run")
# a wrong structure is a TypeError
try:
    c(params)
    raise AssertionError("a wrong structure ran")
except TypeError as e:
    assert "structure" in str(e), e

# ---- a 2-D mesh, a plain function with in/out shardings ----
m2 = Mesh(devs.reshape(2, 2), ("d", "m"))
s2 = lambda spec: NamedSharding(m2, spec)


def block(x, w1, w2, b):
    h = jax.nn.gelu(x @ w1 + b)
    y = h @ w2
    return y + x, (h.max(axis=1), jnp.mean(y))


xb = rng.standard_normal((8, 16)).astype(np.float32)
w1 = rng.standard_normal((16, 32)).astype(np.float32) / 4
w2 = rng.standard_normal((32, 16)).astype(np.float32) / 4
b = rng.standard_normal((32,)).astype(np.float32)
ins = (s2(P("d", None)), s2(P(None, "m")), s2(P("m", None)), s2(P("m")))
outs = (s2(P("d", None)), (s2(P("d")), s2(P())))
c2 = tj.compile(block, xb, w1, w2, b, in_shardings=ins, out_shardings=outs)
assert c2.num_partitions == 4, c2.num_partitions
jb = jax.jit(block, in_shardings=ins, out_shardings=outs)
close(c2(xb, w1, w2, b), jb(xb, w1, w2, b), "block, mesh 2x2")

# ---- grad and value_and_grad against JAX ----
loss = lambda p, x: jnp.sum(mlp(p, x)["y"] ** 2)
g = tj.grad(loss, *specs)
close(g(params, x), jax.grad(loss)(params, x), "grad")
vg = tj.grad(loss, *specs, argnums=(0, 1), value_and_grad=True)
v, (gp, gx) = vg(params, x)
jv, (jgp, jgx) = jax.value_and_grad(loss, argnums=(0, 1))(params, x)
close(v, jv, "value")
close((gp, gx), (jgp, jgx), "grads (0, 1)")

# ---- an unused argument: jax.jit drops it ----
cu = tj.compile(lambda a, unused, c: a * c, x, x, x)
assert len(cu.plan.inputs) == 2, cu.plan.inputs
close(cu(x, x, x), x * x, "unused argument")

# ---- bf16 in and out (travels as f32, comes back as JAX's bf16) ----
xb16 = jnp.asarray(rng.standard_normal((4, 8)), jnp.bfloat16)
fb = jax.jit(lambda a: (a * 3).sum(axis=1).astype(jnp.bfloat16))
ob = tj.compile(fb, xb16)(xb16)
assert ob.dtype == jnp.bfloat16, ob.dtype
np.testing.assert_allclose(ob.astype(np.float32), np.asarray(fb(xb16), np.float32),
                           atol=2e-2 * float(np.abs(np.asarray(fb(xb16), np.float32)).max()))

# ---- process_local_data is JAX's own shards put together ----
sh = s2(P("d", "m"))
arr = jax.device_put(xb, sh)
for proc in range(2):  # 2 processes of 2 partitions: process p has mesh row p
    part = tj.process_local_data(xb, sh, proc, 2)
    rows = [shd for shd in arr.addressable_shards if shd.device in set(devs.reshape(2, 2)[proc])]
    want = np.concatenate([np.asarray(r.data) for r in sorted(rows, key=lambda r: r.index[1].start or 0)], axis=1)
    np.testing.assert_array_equal(part, want)
np.testing.assert_array_equal(tj.process_local_data(xb, s2(P()), 1, 2), xb)

# ---- input names: JAX's names bind; a wrong one lists what works ----
plan = c.plan
y1 = plan.run({"x": x, "params['w1']": params["w1"], "params['w2']": params["w2"]})
close(y1[1], np.asarray(f(params, x)["y"]), "bound by JAX's names")
try:
    plan.run({"x": x, "params['w3']": params["w1"], "params['w2']": params["w2"]})
    raise AssertionError("a wrong name ran")
except tessel.Error as e:
    assert e.status == tessel.Status.EINPUT, e
    assert "input params['w3']: no entry parameter has this name or index; the names that work, nearest first: " \
           "params__w1__ (parameter 0), params__w2__ (parameter 1)" in str(e), str(e)
try:
    plan.run({0: params["w1"], "params__w1__": params["w1"], 2: x})
    raise AssertionError("a leaf bound twice ran")
except tessel.Error as e:
    assert "bound twice" in str(e), str(e)

# ---- import tessel without JAX ----
code = ("import sys; sys.modules['jax'] = None\n"
        "import tessel; print(tessel.version())\n"
        "try:\n    import tessel.jax\nexcept ImportError:\n    print('no jax')\n")
r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
assert r.returncode == 0 and r.stdout.split() == [tessel.version(), "no", "jax"], (r.stdout, r.stderr)
print("test_jax_front: ok")
