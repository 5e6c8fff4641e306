"""programs.py: the JAX programs tessel is checked against (issue 28).

A registry of small JAX programs with real structure, each with its
shardings over a named mesh of CPU devices, its example inputs and the
meshes it runs on. tests/jax/test_oracle.py lowers each one
(`jax.jit(fn, in_shardings, out_shardings).lower(...).as_text("hlo")`),
runs the HLO with tessel and compares with JAX's own execution; other tests
(replay of JAX's compiled modules, collective bytes against XLA, the Python
front end) import the same registry.

The interface (keep it stable; other tests import it):

    from programs import PROGRAMS, BY_NAME, GROUPS, Program

    PROGRAMS: list[Program]            every program, in a fixed order
    BY_NAME:  dict[str, Program]
    GROUPS:   tuple[str]               the ctest tests' groups (.group)

    Program fields
      .name          str, unique, a file-name-safe word
      .fn            the Python function; positional array arguments only
                     (no pytrees), returns one array or a tuple of arrays
      .mesh_shapes   tuple of mesh shapes it runs on: (1,), (2,), (4,), (8,),
                     (2, 2), (2, 4) ...; a 1-D mesh's axis is named "x", a 2-D
                     mesh's axes "x", "y" (AXES[len(shape)])
      .specs(axes)   -> (in_specs, out_specs): a tuple of PartitionSpec per
                     argument, and a PartitionSpec (one output) or a tuple
                     of them (several), over the axis names `axes`
      .make_inputs(rng) -> tuple of NumPy arrays (rng: np.random.Generator);
                     bf16 arrays are ml_dtypes.bfloat16 (jnp.bfloat16)
      .grad_wrt      None, or the argument numbers that `tessel grad --wrt`
                     and `jax.grad` differentiate (fn then returns a scalar
                     loss)
      .xfail         {} or {key: reason}: checks known to fail, with why;
                     a key is a check ("run", "mpi", "grad") on every mesh,
                     or CHECK@SHAPE ("run@2x2") on one; a marked check that
                     passes is an error (remove the mark)
      .doc           one line: what the program is
      .group         the ctest test that runs it (jax_oracle_GROUP)
      .jax_wrong     {} or {key: reason} (keys as xfail's): where JAX's own
                     sharded run is wrong (an XLA bug, shown in the reason);
                     there tessel is compared with JAX's run on one device,
                     and JAX's sharded run must still differ from it (else
                     the mark is an error)

    Program methods, for one mesh shape
      .mesh(shape)            the jax.sharding.Mesh (Auto axes) over the
                              first prod(shape) devices
      .in_specs(shape), .out_specs(shape)
      .in_shardings(shape), .out_shardings(shape)   NamedShardings
      .jit(shape)             jax.jit(fn, in_shardings=..., out_shardings=...);
                              lower and call it inside `with jax.set_mesh(
                              prog.mesh(shape)):` (shard_map programs take
                              their mesh from there), as the two below do
      .arg_structs(inputs)    jax.ShapeDtypeStructs of the inputs
      .lower_hlo(shape, inputs)  the HLO text JAX lowers the jitted fn to
      .execute(shape, inputs) JAX's own run of the jitted fn on the mesh: a
                              tuple of NumPy arrays, one per output
      .execute_grad(shape, inputs)  (grad_wrt programs) JAX's run of
                              jax.value_and_grad(fn, grad_wrt) on the mesh:
                              the loss, then one gradient per argument

JAX must see 8 CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=8
and JAX_PLATFORMS=cpu before jax is imported (set here when unset). Importing
this module before jax also adds two XLA flags for JAX's runs, the oracle:
  --xla_allow_excess_precision=false  XLA's CPU backend otherwise keeps bf16
      intermediates in f32 across fused ops, skipping roundings the HLO
      writes (a bf16 ulp here and there, then 2e-4 on an f32 loss computed
      from them); with it, JAX's execution is the HLO's, as tessel's is;
  --xla_backend_optimization_level=0  LLVM at -O0: compiles in half the
      time (the suite's largest cost), the same HLO passes and results.

Shapes are small so that the whole suite stays fast; the structure (the
shardings, the collectives they need, the ops) is what is being tested.
"""
import dataclasses
import math
import os
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
for _f in ("--xla_force_host_platform_device_count=8", "--xla_allow_excess_precision=false",
           "--xla_backend_optimization_level=0"):
    if _f.split("=")[0] not in _flags:
        _flags += " " + _f
os.environ["XLA_FLAGS"] = _flags.strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

AXES = {1: ("x",), 2: ("x", "y")}
MESHES_ALL = ((1,), (2,), (4,), (8,), (2, 2), (2, 4))
# 1, 2, 4 and 8 devices, 1-D and 2-D, for the programs JAX compiles slowly
MESHES = ((1,), (2,), (2, 2), (8,))
F32 = jnp.float32
BF16 = jnp.bfloat16


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fn: Callable
    mesh_shapes: tuple
    specs: Callable
    make_inputs: Callable
    grad_wrt: tuple = None
    xfail: dict = dataclasses.field(default_factory=dict)
    jax_wrong: dict = dataclasses.field(default_factory=dict)
    doc: str = ""
    group: str = ""

    @staticmethod
    def _mark(marks, check, shape):
        return marks.get("%s@%s" % (check, "x".join(map(str, shape)))) or marks.get(check)

    def xfail_reason(self, check, shape):
        """The reason `check` is expected to fail on mesh `shape`, or None."""
        return self._mark(self.xfail, check, shape)

    def jax_wrong_reason(self, check, shape):
        """Why JAX's own sharded run is wrong for `check` on `shape`, or None."""
        return self._mark(self.jax_wrong, check, shape)

    def mesh(self, shape):
        n = math.prod(shape)
        return Mesh(np.array(jax.devices()[:n]).reshape(shape), AXES[len(shape)])

    def in_specs(self, shape):
        return tuple(self.specs(AXES[len(shape)])[0])

    def out_specs(self, shape):
        return self.specs(AXES[len(shape)])[1]

    def in_shardings(self, shape):
        m = self.mesh(shape)
        return tuple(NamedSharding(m, s) for s in self.in_specs(shape))

    def out_shardings(self, shape):
        m = self.mesh(shape)
        out = self.out_specs(shape)
        if isinstance(out, P):
            return NamedSharding(m, out)
        return tuple(NamedSharding(m, s) for s in out)

    def jit(self, shape):
        return jax.jit(self.fn, in_shardings=self.in_shardings(shape),
                       out_shardings=self.out_shardings(shape))

    def arg_structs(self, inputs):
        return tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs)

    def lower_hlo(self, shape, inputs):
        with jax.set_mesh(self.mesh(shape)):
            return self.jit(shape).lower(*self.arg_structs(inputs)).as_text("hlo")

    def execute(self, shape, inputs):
        with jax.set_mesh(self.mesh(shape)):
            out = self.jit(shape)(*inputs)
        if not isinstance(out, tuple):
            out = (out,)
        return tuple(np.asarray(o) for o in out)

    def execute_grad(self, shape, inputs):
        with jax.set_mesh(self.mesh(shape)):
            vg = jax.jit(jax.value_and_grad(self.fn, argnums=self.grad_wrt),
                         in_shardings=self.in_shardings(shape))
            loss, grads = vg(*inputs)
        return (np.asarray(loss),) + tuple(np.asarray(g) for g in grads)


def _split(axes):
    """(data axis, model axis): on a 2-D mesh "x" carries the batch and "y"
    the model; on a 1-D mesh "x" carries the model and nothing the batch."""
    return (axes[0], axes[1]) if len(axes) == 2 else (None, axes[0])


def _normal(rng, shape, dtype=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---------------------------------------------------------------- Megatron MLP
# y = gelu(x @ w1 + b1) @ w2 + b2: w1 split by columns, w2 by rows over the
# model axis (one all-reduce after the second dot), the batch over the data
# axis.

MLP_D, MLP_H, MLP_B = 16, 32, 8


def mlp(x, w1, b1, w2, b2):
    h = jax.nn.gelu(x @ w1 + b1)
    return h @ w2 + b2


def mlp_specs(axes):
    dp, mp = _split(axes)
    return ((P(dp, None), P(None, mp), P(mp), P(mp, None), P()), P(dp, None))


def mlp_inputs(rng):
    return (_normal(rng, (MLP_B, MLP_D)), _normal(rng, (MLP_D, MLP_H), scale=0.3),
            _normal(rng, (MLP_H,), scale=0.1), _normal(rng, (MLP_H, MLP_D), scale=0.3),
            _normal(rng, (MLP_D,), scale=0.1))


def mlp_loss(w1, b1, w2, b2, x, y):
    return jnp.mean((mlp(x, w1, b1, w2, b2) - y) ** 2)


def mlp_loss_specs(axes):
    dp, mp = _split(axes)
    return ((P(None, mp), P(mp), P(mp, None), P(), P(dp, None), P(dp, None)), P())


def mlp_loss_inputs(rng):
    x, w1, b1, w2, b2 = mlp_inputs(rng)
    return (w1, b1, w2, b2, x, _normal(rng, (MLP_B, MLP_D)))


def mlp_sgd(w1, b1, w2, b2, x, y):
    loss, g = jax.value_and_grad(mlp_loss, argnums=(0, 1, 2, 3))(w1, b1, w2, b2, x, y)
    return tuple(p - 0.1 * d for p, d in zip((w1, b1, w2, b2), g)) + (loss,)


def mlp_sgd_specs(axes):
    ins, _ = mlp_loss_specs(axes)
    return (ins, ins[:4] + (P(),))


# Adam (b1 0.9, b2 0.999, eps 1e-8, bias-corrected), written out: params,
# then first moments, then second moments, then the step count t (f32[]).
def _adam(params, grads, ms, vs, t, lr):
    t1 = t + 1.0
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, ms, vs):
        m1 = 0.9 * m + 0.1 * g
        v1 = 0.999 * v + 0.001 * g * g
        mh = m1 / (1.0 - 0.9 ** t1)
        vh = v1 / (1.0 - 0.999 ** t1)
        new_p.append((p - lr * mh / (jnp.sqrt(vh) + 1e-8)).astype(p.dtype))
        new_m.append(m1.astype(m.dtype))
        new_v.append(v1.astype(v.dtype))
    return tuple(new_p) + tuple(new_m) + tuple(new_v) + (t1,)


def mlp_adam(w1, b1, w2, b2, m1, mb1, m2, mb2, v1, vb1, v2, vb2, t, x, y):
    params = (w1, b1, w2, b2)
    loss, g = jax.value_and_grad(mlp_loss, argnums=(0, 1, 2, 3))(*params, x, y)
    return _adam(params, g, (m1, mb1, m2, mb2), (v1, vb1, v2, vb2), t, 0.01) + (loss,)


def mlp_adam_specs(axes):
    ins, _ = mlp_loss_specs(axes)
    p = ins[:4]
    return (p * 3 + (P(),) + ins[4:], p * 3 + (P(), P()))


def mlp_adam_inputs(rng):
    w1, b1, w2, b2, x, y = mlp_loss_inputs(rng)
    params = (w1, b1, w2, b2)
    ms = tuple(_normal(rng, p.shape, scale=0.01) for p in params)
    vs = tuple(np.abs(_normal(rng, p.shape, scale=0.01)) for p in params)
    return params + ms + vs + (np.float32(3.0), x, y)


# ------------------------------------------------------- transformer block
# Pre-LN block in bf16 with f32 accumulation: LN -> causal multi-head
# attention -> residual -> LN -> GELU MLP -> residual. Heads split over the
# model axis, the batch over the data axis.

TB, TS, TD, TH = 2, 8, 32, 8
THD = TD // TH
TF = 4 * TD


def _layer_norm(x, g, b):
    xf = x.astype(F32)
    mu = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean((xf - mu) ** 2, axis=-1, keepdims=True)
    y = (xf - mu) * lax.rsqrt(var + 1e-5)
    return (y * g.astype(F32) + b.astype(F32)).astype(x.dtype)


def block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, w2):
    h = _layer_norm(x, g1, b1)
    q = jnp.einsum("bsd,dhk->bshk", h, wq, preferred_element_type=F32).astype(BF16)
    k = jnp.einsum("bsd,dhk->bshk", h, wk, preferred_element_type=F32).astype(BF16)
    v = jnp.einsum("bsd,dhk->bshk", h, wv, preferred_element_type=F32).astype(BF16)
    s = jnp.einsum("bqhk,bthk->bhqt", q, k, preferred_element_type=F32) / math.sqrt(THD)
    causal = lax.broadcasted_iota(jnp.int32, (TS, TS), 0) >= lax.broadcasted_iota(jnp.int32, (TS, TS), 1)
    s = jnp.where(causal, s, -1e9)
    p = jax.nn.softmax(s, axis=-1).astype(BF16)
    a = jnp.einsum("bhqt,bthk->bqhk", p, v, preferred_element_type=F32).astype(BF16)
    x = x + jnp.einsum("bqhk,hkd->bqd", a, wo, preferred_element_type=F32).astype(BF16)
    h = _layer_norm(x, g2, b2)
    f = jnp.einsum("bsd,df->bsf", h, w1, preferred_element_type=F32)
    f = jax.nn.gelu(f).astype(BF16)
    return x + jnp.einsum("bsf,fd->bsd", f, w2, preferred_element_type=F32).astype(BF16)


def _block_param_specs(mp):
    return (P(), P(), P(None, mp, None), P(None, mp, None), P(None, mp, None),
            P(mp, None, None), P(), P(), P(None, mp), P(mp, None))


def block_specs(axes):
    dp, mp = _split(axes)
    return ((P(dp, None, None),) + _block_param_specs(mp), P(dp, None, None))


def _block_params(rng):
    bf = BF16
    return (1.0 + _normal(rng, (TD,), bf, 0.1), _normal(rng, (TD,), bf, 0.1),
            _normal(rng, (TD, TH, THD), bf, TD ** -0.5), _normal(rng, (TD, TH, THD), bf, TD ** -0.5),
            _normal(rng, (TD, TH, THD), bf, TD ** -0.5), _normal(rng, (TH, THD, TD), bf, TD ** -0.5),
            1.0 + _normal(rng, (TD,), bf, 0.1), _normal(rng, (TD,), bf, 0.1),
            _normal(rng, (TD, TF), bf, TD ** -0.5), _normal(rng, (TF, TD), bf, TF ** -0.5))


def block_inputs(rng):
    return (_normal(rng, (TB, TS, TD), BF16),) + _block_params(rng)


def block_loss(g1, b1, wq, wk, wv, wo, g2, b2, w1, w2, x, y):
    out = block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, w2)
    return jnp.mean((out.astype(F32) - y) ** 2)


def block_loss_specs(axes):
    dp, mp = _split(axes)
    return (_block_param_specs(mp) + (P(dp, None, None), P(dp, None, None)), P())


def block_loss_inputs(rng):
    return _block_params(rng) + (_normal(rng, (TB, TS, TD), BF16), _normal(rng, (TB, TS, TD)))


def block_sgd(*args):
    params, data = args[:10], args[10:]
    loss, g = jax.value_and_grad(block_loss, argnums=tuple(range(10)))(*params, *data)
    return tuple((p - 0.1 * d).astype(p.dtype) for p, d in zip(params, g)) + (loss,)


def block_sgd_specs(axes):
    ins, _ = block_loss_specs(axes)
    return (ins, ins[:10] + (P(),))


def block_adam(*args):
    params, ms, vs, t, data = args[:10], args[10:20], args[20:30], args[30], args[31:]
    loss, g = jax.value_and_grad(block_loss, argnums=tuple(range(10)))(*params, *data)
    g = tuple(d.astype(F32) for d in g)
    return _adam(params, g, ms, vs, t, 0.01) + (loss,)


def block_adam_specs(axes):
    ins, _ = block_loss_specs(axes)
    p = ins[:10]
    return (p * 3 + (P(),) + ins[10:], p * 3 + (P(), P()))


def block_adam_inputs(rng):
    params = _block_params(rng)
    ms = tuple(_normal(rng, p.shape, np.float32, 0.01) for p in params)
    vs = tuple(np.abs(_normal(rng, p.shape, np.float32, 0.01)) for p in params)
    x, y = _normal(rng, (TB, TS, TD), BF16), _normal(rng, (TB, TS, TD))
    return params + ms + vs + (np.float32(0.0), x, y)


# ------------------------------------------------------ conv net, batch norm
# NHWC: conv 3x3 (SAME) -> batch norm with batch statistics -> relu -> conv
# 3x3 stride 2 -> relu -> global mean pool -> dense. The batch over "x", the
# second conv's output features over "y".

CN, CH, CC, CK = 8, 8, 3, 10


def convnet(x, k1, gamma, beta, kd, k2, wd):
    dn = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn)
    mu = jnp.mean(h, axis=(0, 1, 2))
    var = jnp.mean((h - mu) ** 2, axis=(0, 1, 2))
    h = (h - mu) * lax.rsqrt(var + 1e-5) * gamma + beta
    h = jax.nn.relu(h)
    h = lax.conv_general_dilated(h, kd, (1, 1), "SAME", dimension_numbers=dn, feature_group_count=8)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, k2, (2, 2), ((1, 1), (1, 1)), dimension_numbers=dn)
    h = jax.nn.relu(h)
    return jnp.mean(h, axis=(1, 2)) @ wd


def _convnet_param_specs(mp):
    return (P(), P(), P(), P(), P(None, None, None, mp), P(mp, None))


def convnet_specs(axes):
    dp = axes[0]
    mp = axes[1] if len(axes) == 2 else None
    return ((P(dp),) + _convnet_param_specs(mp), P(dp, None))


def _convnet_params(rng):
    return (_normal(rng, (3, 3, CC, 8), scale=0.3), 1.0 + _normal(rng, (8,), scale=0.1),
            _normal(rng, (8,), scale=0.1), _normal(rng, (3, 3, 1, 8), scale=0.3),
            _normal(rng, (3, 3, 8, 16), scale=0.2), _normal(rng, (16, CK), scale=0.3))


def convnet_inputs(rng):
    return (_normal(rng, (CN, CH, CH, CC)),) + _convnet_params(rng)


# softmax cross entropy of the conv net's logits against integer labels
def convnet_loss(k1, gamma, beta, kd, k2, wd, x, labels):
    logits = convnet(x, k1, gamma, beta, kd, k2, wd)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def convnet_loss_specs(axes):
    dp = axes[0]
    mp = axes[1] if len(axes) == 2 else None
    return (_convnet_param_specs(mp) + (P(dp), P(dp)), P())


def convnet_loss_inputs(rng):
    return _convnet_params(rng) + (_normal(rng, (CN, CH, CH, CC)),
                                   rng.integers(0, CK, size=(CN,), dtype=np.int32))


# ------------------------------------------------------------- scan RNN
# h_{t+1} = tanh(x_t @ wx + h_t @ wh + b) over T steps with lax.scan; the
# final state and every step's state. The batch over the data axis, the
# hidden units over the model axis (h @ wh then gathers every step).

RT, RB, RD, RH = 6, 8, 8, 16


def rnn(xs, h0, wx, wh, b):
    def step(h, x):
        h = jnp.tanh(x @ wx + h @ wh + b)
        return h, h
    h, hs = lax.scan(step, h0, xs)
    return h, hs


def rnn_specs(axes):
    dp, mp = _split(axes)
    return ((P(None, dp, None), P(dp, mp), P(None, mp), P(None, mp), P(mp)),
            (P(dp, mp), P(None, dp, mp)))


def rnn_inputs(rng):
    return (_normal(rng, (RT, RB, RD)), _normal(rng, (RB, RH)), _normal(rng, (RD, RH), scale=0.4),
            _normal(rng, (RH, RH), scale=0.3), _normal(rng, (RH,), scale=0.1))


def rnn_loss(h0, wx, wh, b, xs, ys):
    _, hs = rnn(xs, h0, wx, wh, b)
    return jnp.mean((hs - ys) ** 2)


def rnn_loss_specs(axes):
    dp, mp = _split(axes)
    return ((P(dp, mp), P(None, mp), P(None, mp), P(mp), P(None, dp, None), P(None, dp, mp)), P())


def rnn_loss_inputs(rng):
    xs, h0, wx, wh, b = rnn_inputs(rng)
    return (h0, wx, wh, b, xs, _normal(rng, (RT, RB, RH)))


# --------------------------------------------------- mixture of experts
# Top-1 routing of tokens to E experts, experts spread over "x" and tokens
# sharded over "x": inside shard_map each device scores its tokens, sends
# every expert its (gate-masked) tokens with an all-to-all, runs its own
# experts' MLPs, and gets the results back with a second all-to-all.

ME, MT, MD, MHD = 8, 16, 8, 16


def _moe_local(x, wr, w1, w2):
    n = lax.axis_size("x")
    logits = x @ wr                                         # [t, E]
    gate = jax.nn.softmax(logits, axis=-1)
    top = jnp.argmax(logits, axis=-1)
    mask = jax.nn.one_hot(top, ME, dtype=x.dtype) * gate    # [t, E]
    disp = jnp.einsum("te,td->etd", mask, x)                # [E, t, D]
    disp = lax.all_to_all(disp, "x", 0, 1, tiled=True)      # [E/n, n*t, D]
    h = jax.nn.relu(jnp.einsum("etd,edh->eth", disp, w1))
    out = jnp.einsum("eth,ehd->etd", h, w2)
    out = lax.all_to_all(out, "x", 1, 0, tiled=True)        # [E, t, D]
    del n
    return jnp.sum(out, axis=0)


def moe(x, wr, w1, w2):
    return jax.shard_map(_moe_local, in_specs=(P("x"), P(), P("x"), P("x")),
                         out_specs=P("x"))(x, wr, w1, w2)


def moe_specs(axes):
    return ((P("x"), P(), P("x"), P("x")), P("x"))


def moe_inputs(rng):
    return (_normal(rng, (MT, MD)), _normal(rng, (MD, ME)), _normal(rng, (ME, MD, MHD), scale=0.4),
            _normal(rng, (ME, MHD, MD), scale=0.3))


# ---------------------------------------------------------- top-k, argmax
# Over the sharded dimension: top-4 values and indices of each row, argmax
# of each row and of each column.

def topk(x):
    vals, idx = lax.top_k(x, 4)
    return vals, idx, jnp.argmax(x, axis=1), jnp.argmax(x, axis=0)


def topk_specs(axes):
    if len(axes) == 2:
        return ((P(axes[0], axes[1]),), (P(axes[0]), P(axes[0]), P(axes[0]), P(axes[1])))
    return ((P(None, axes[0]),), (P(), P(), P(), P(axes[0])))


def topk_inputs(rng):
    return (rng.permutation(16 * 32).reshape(16, 32).astype(np.float32) / 7.0,)


# ---------------------------------------------------- argmax, ties and NaN
# jnp.argmax and argmin over each axis of values with ties (whole rows of
# them), -0 beside +0 and NaNs (a row and a column with several: the first
# NaN's index wins), x tiled on the rows: one reduce over the tiled dim,
# one over the other (the executor's table of reduce_select.c, issue 34);
# on 2x2 tiled on both.

def argmax_ties(x):
    return (jnp.argmax(x, axis=0), jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.argmin(x, axis=1),
            jnp.argmax(x.reshape(3, 4, 12), axis=1))


def argmax_ties_specs(axes):
    if len(axes) == 2:
        return ((P(axes[0], axes[1]),), (P(axes[1]), P(axes[0]), P(axes[1]), P(axes[0]), P()))
    return ((P(axes[0], None),), (P(), P(axes[0]), P(), P(axes[0]), P()))


def argmax_ties_inputs(rng):
    x = rng.integers(-2, 3, (12, 12)).astype(np.float32)
    x[2, :] = 1.0                      # a row of ties
    x[5, 3] = x[5, 9] = np.nan         # the first NaN of row 5 is at 3
    x[7, 4] = x[10, 4] = np.nan        # and of column 4 at row 7
    x[0, 0], x[0, 1] = -0.0, 0.0       # equal: the first wins
    x[11, 11] = -np.nan
    return (x,)


# ----------------------------------------------------------- uneven shards
# 7 rows and 10 columns split over 2, 4 and 8 devices (padded shards). jit
# takes only arguments and results that divide evenly, so the uneven
# shardings are constraints inside: softmax(x @ w) with its rows over "x"
# (and its columns over "y"), then a running sum down the columns and the
# columns' sums of squares.

def uneven(x, w):
    axes = jax.sharding.get_abstract_mesh().axis_names
    x = lax.with_sharding_constraint(x, P(axes[0], None))
    w = lax.with_sharding_constraint(w, P(None, axes[-1]))
    z = jax.nn.softmax(x @ w, axis=1)
    z = lax.with_sharding_constraint(z, P(axes[0], axes[1] if len(axes) == 2 else None))
    return z + jnp.cumsum(z, axis=0), jnp.sum(z * z, axis=0)


def uneven_specs(axes):
    return ((P(), P()), (P(), P()))


def uneven_inputs(rng):
    return (_normal(rng, (7, 12)), _normal(rng, (12, 10), scale=0.5))


# ---------------------------------------------------------- jax.random
# threefry2x32 inside the program, from a raw key input: dropout of a
# sharded activation, the raw bits, normal draws, and a fold_in/split key.

def rand(key, x):
    k = jax.random.wrap_key_data(key, impl="threefry2x32")
    k1, k2 = jax.random.split(k)
    keep = jax.random.bernoulli(k1, 0.75, x.shape)
    drop = jnp.where(keep, x / 0.75, 0.0)
    bits = jax.random.bits(jax.random.fold_in(k2, 3), (8, 6))
    noise = jax.random.normal(k2, (x.shape[0], 4))
    return drop, bits, noise


def rand_specs(axes):
    dp, mp = _split(axes)
    return ((P(), P(dp, mp)), (P(dp, mp), P(), P(mp)))


def rand_inputs(rng):
    return (rng.integers(0, 2 ** 32, size=(2,), dtype=np.uint32), _normal(rng, (16, 8)))


# ----------------------------------------------------- language model loss
# f32 token model: embedding lookup from a vocabulary-parallel table (a
# gather over the sharded vocabulary), learned positions, one causal
# single-head attention layer, logits tied to the embedding, and the softmax
# cross entropy of integer labels (a gather of the log-probabilities).

LV, LS, LB, LD = 32, 8, 4, 16


def lm_loss(embed, pos, wq, wk, wv, wo, tokens, labels):
    h = jnp.take(embed, tokens, axis=0) + pos                # [B, S, D]
    q, k, v = h @ wq, h @ wk, h @ wv
    s = jnp.einsum("bqd,btd->bqt", q, k) / math.sqrt(LD)
    causal = jnp.tril(jnp.ones((LS, LS), bool))
    s = jnp.where(causal, s, -jnp.inf)
    h = h + jnp.einsum("bqt,btd->bqd", jax.nn.softmax(s, axis=-1), v) @ wo
    logits = h @ embed.T                                     # [B, S, V]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def lm_loss_specs(axes):
    dp, mp = _split(axes)
    return ((P(mp, None), P(), P(None, mp), P(None, mp), P(None, mp), P(mp, None),
             P(dp, None), P(dp, None)), P())


def lm_loss_inputs(rng):
    return (_normal(rng, (LV, LD), scale=0.5), _normal(rng, (LS, LD), scale=0.1),
            _normal(rng, (LD, LD), scale=0.3), _normal(rng, (LD, LD), scale=0.3),
            _normal(rng, (LD, LD), scale=0.3), _normal(rng, (LD, LD), scale=0.3),
            rng.integers(0, LV, size=(LB, LS), dtype=np.int32),
            rng.integers(0, LV, size=(LB, LS), dtype=np.int32))


# ---------------------------------------------------------- more array ops
# sort and argsort over a sharded dimension, a cumulative sum, a scatter-add
# (.at[].add) of sharded updates, a dynamic slice at a data-dependent
# offset, and an int8 matmul accumulated in int32 (exact) then rescaled.

def array_ops(x, idx, upd, q, w, scale):
    srt = jnp.sort(x, axis=1)
    order = jnp.argsort(x, axis=0, stable=True).astype(jnp.int32)
    csum = jnp.cumsum(x, axis=1)
    seg = jnp.zeros((8, x.shape[1]), x.dtype).at[idx].add(upd)
    start = jnp.clip(idx[0], 0, x.shape[0] - 4)
    win = lax.dynamic_slice(x, (start, 0), (4, x.shape[1]))
    acc = lax.dot(q, w, preferred_element_type=jnp.int32)
    return srt, order, csum, seg, win, acc, acc.astype(F32) * scale


def array_ops_specs(axes):
    dp, mp = _split(axes)
    return ((P(dp, mp), P(), P(None, mp), P(dp, None), P(None, mp), P(mp)),
            (P(dp, mp), P(dp, mp), P(dp, mp), P(None, mp), P(None, mp), P(dp, mp), P(dp, mp)))


def array_ops_inputs(rng):
    return (rng.permutation(8 * 16).reshape(8, 16).astype(np.float32) / 9.0,
            rng.integers(0, 8, size=(12,), dtype=np.int32), _normal(rng, (12, 16)),
            rng.integers(-128, 128, size=(8, 32), dtype=np.int8),
            rng.integers(-128, 128, size=(32, 16), dtype=np.int8),
            np.abs(_normal(rng, (16,), scale=0.01)))


# ------------------------------------------------------------ control flow
# fori_loop (a counted while), a while_loop whose trip count depends on the
# data, and lax.cond on a reduction of sharded data.

def loops(x, w):
    y = lax.fori_loop(0, 4, lambda i, y: jnp.tanh(y @ w) + i.astype(F32) * 0.1, x)

    def cond(c):
        return jnp.logical_and(jnp.max(jnp.abs(c[0])) > 0.05, c[1] < 30)

    z, n = lax.while_loop(cond, lambda c: (c[0] * 0.5, c[1] + 1), (y, jnp.int32(0)))
    r = lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a) @ w, lambda a: jnp.cos(a) @ w.T, y)
    return y, z, n, r


def loops_specs(axes):
    dp, mp = _split(axes)
    return ((P(dp, mp), P(None, mp)), (P(dp, mp), P(dp, mp), P(), P(dp, None)))


def loops_inputs(rng):
    return (_normal(rng, (8, 16)), _normal(rng, (16, 16), scale=0.3))


# the fori_loop's gradient (a loop whose trip count tessel grad knows)
def loops_loss(w, x):
    y = lax.fori_loop(0, 4, lambda i, y: jnp.tanh(y @ w) + i.astype(F32) * 0.1, x)
    return jnp.sum(y * y)


def loops_loss_specs(axes):
    dp, mp = _split(axes)
    return ((P(None, mp), P(dp, mp)), P())


def loops_loss_inputs(rng):
    x, w = loops_inputs(rng)
    return (w, x)


# ------------------------------------------------------ batched indexing
# What JAX lowers to gathers and scatters with batching dims
# (operand_batching_dims, input_batching_dims; issue 33): take_along_axis
# (cross entropy's label pick) over log-probabilities whose vocabulary is
# split over "y" on a 2-D mesh, vmap'd dynamic indexing (a row, a
# dynamic_slice window) and a vmap'd .at[].add, the batch over "x". With
# operand and indices tiled alike on the batch, XLA's partitioner runs them
# with no collective, and so does tessel's.

def batched_index(logits, labels, x, idx, upd):
    logp = jax.nn.log_softmax(logits, axis=-1)
    pick = jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]
    row = jax.vmap(lambda r, i: r[i])(x, idx)
    win = jax.vmap(lambda r, i: lax.dynamic_slice(r, (i, 0), (2, r.shape[1])))(x, idx)
    acc = jax.vmap(lambda r, i, u: r.at[i].add(u))(x, idx, upd)
    return pick, row, win, acc


def _batch_split(axes):
    """(batch axis, model axis): "x" carries the batch on every mesh, "y"
    the model on a 2-D one (nothing on a 1-D one)."""
    return axes[0], (axes[1] if len(axes) == 2 else None)


def batched_index_specs(axes):
    dp, mp = _batch_split(axes)
    return ((P(dp, mp), P(dp), P(dp, None, mp), P(dp), P(dp, mp)),
            (P(dp), P(dp, mp), P(dp, None, mp), P(dp, None, mp)))


def batched_index_inputs(rng):
    return (_normal(rng, (8, 12)), rng.integers(0, 12, size=(8,), dtype=np.int32),
            _normal(rng, (8, 6, 4)), rng.integers(-6, 6, size=(8,), dtype=np.int32),
            _normal(rng, (8, 4)))


# the cross entropy of integer labels: its gradient scatter-adds into the
# log-probabilities along the batch (a scatter with input_batching_dims)
def batched_index_loss(w, x, labels):
    logp = jax.nn.log_softmax(jnp.tanh(x @ w), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def batched_index_loss_specs(axes):
    dp, mp = _batch_split(axes)
    return ((P(None, mp), P(dp, None), P(dp)), P())


def batched_index_loss_inputs(rng):
    return (_normal(rng, (16, 12), scale=0.5), _normal(rng, (8, 16)),
            rng.integers(0, 12, size=(8,), dtype=np.int32))



def grad_edges(x, w):
    """Where differentiating JAX's lowered HLO parts from JAX's own rules:
    exact GELU (erfc's selected branches) and silu far into the negatives
    (e^-x overflows) under adjoints that are exactly 0 (the mask's first
    column), erf_inv's select of x * inf, relu, relu6, softplus, abs and
    logaddexp at their kinks (x exactly 0, 1.5 where relu6's 4x is 6, ties),
    and products with zeros in them."""
    h = x @ w
    mask = (jnp.arange(h.shape[1]) > 0).astype(F32)
    smooth = jax.nn.gelu(h, approximate=False) + jax.nn.silu(h * 40) + lax.erf_inv(jnp.tanh(h) * 0.5)
    kinks = (jax.nn.relu(x) + jax.nn.relu6(x * 4) + jax.nn.softplus(x) + jnp.abs(x) + jnp.logaddexp(x, -x)
             + jnp.logaddexp(x, x[:, ::-1]))
    prods = jnp.prod(x[:, :4], axis=1) + jnp.prod(x * 0.5 + 1, axis=0).sum()
    return jnp.sum(smooth * mask) + jnp.sum(kinks * jnp.arange(1, 1 + x.shape[1], dtype=F32)) + jnp.sum(prods)


def grad_edges_specs(axes):
    return (P(axes[0]), P()), P()


def grad_edges_inputs(rng):
    x = _normal(rng, (8, 6))
    x[0, :] = [0.0, -0.0, 1.5, -1.5, 2.0, 0.0]      # kinks; the row's product has two zeros
    x[1, 1] = 0.0                                    # one zero in the row's product
    x[2, :] = [0.5, 0.5, -3.0, -3.0, 0.5, 0.5]      # x == x[::-1]: logaddexp's tie
    x[3, 0] = 1.5
    return x, _normal(rng, (6, 5))


def linalg_loss(a, b, s):
    """Gradients through JAX's LAPACK calls: cholesky, triangular solves
    (both sides, transposed, unit diagonal), cho_solve, and LU's solve,
    inv, det and slogdet, on a batch split over the devices."""
    eye = jnp.eye(a.shape[-1], dtype=F32)
    spd = s @ jnp.swapaxes(s, -1, -2) + 5 * eye
    lo = jnp.linalg.cholesky(spd)
    x1 = jax.scipy.linalg.solve_triangular(lo, b, lower=True)
    x2 = jax.scipy.linalg.solve_triangular(lo, b, lower=True, trans=1)
    x3 = jax.scipy.linalg.solve_triangular(jnp.swapaxes(lo, -1, -2), b, lower=False, unit_diagonal=True)
    x4 = lax.linalg.triangular_solve(lo, jnp.swapaxes(b, -1, -2), left_side=False, lower=True, transpose_a=True)
    cs = jax.vmap(lambda c, y: jax.scipy.linalg.cho_solve((c, True), y))(lo, b)
    g = a + 4 * eye
    return (jnp.sum(x1 ** 2) + jnp.sum(jnp.sin(x2)) + jnp.sum(x3 * x3) + jnp.sum(x4 ** 3) + jnp.sum(cs)
            + jnp.sum(jnp.linalg.inv(g) ** 2) + jnp.sum(jnp.linalg.det(g)) + jnp.sum(jnp.linalg.slogdet(g)[1])
            + jnp.sum(jnp.linalg.solve(g, b) ** 2) + jnp.sum(jnp.log(jnp.diagonal(lo, axis1=-2, axis2=-1))))


def linalg_loss_specs(axes):
    t = P(axes[0], None, None)
    return (t, t, t), P()


def linalg_loss_inputs(rng):
    return _normal(rng, (4, 5, 5)), _normal(rng, (4, 5, 3)), _normal(rng, (4, 5, 5))


def subnormals(x, y):
    """XLA's CPU runtime flushes subnormals to zero (operands and results:
    MXCSR's DAZ and FTZ), so JAX sees 1e-40f != 0 false, sign(1e-40f) 0 and
    1e-30f * 1e-10f as 0; conversions are bit operations and keep them
    (f32 -> bf16, abs, f32 <-> f8e8m0fnu, whose code 0 is 2^-127). Scaled
    by 2^100 so a subnormal that should have been flushed shows at full
    relative size."""
    big = np.float32(2.0 ** 100)
    e8m0 = lax.bitcast_convert_type((jnp.abs(x) > 0.1).astype(jnp.uint8), jnp.float8_e8m0fnu)
    return (x != 0, jnp.sign(x), x * big, (x * y) * big, (x @ y[:4]) * big, jnp.sum(x, axis=0) * big,
            x.astype(BF16), jnp.abs(-x), jnp.exp(y * -100.0) * big, jnp.cumsum(x, axis=0) * big,
            lax.bitcast_convert_type(x.astype(jnp.float8_e8m0fnu), jnp.uint8), e8m0.astype(F32),
            e8m0.astype(BF16))


def subnormals_specs(axes):
    t = P(axes[0])
    return (t, t), (t,) * 5 + (P(),) + (t,) * 7


def subnormals_inputs(rng):
    x = np.array([[1e-40, -3e-39, 0.0, 2.0], [1.17e-38, -1e-45, 1.0, -5e-39], [7e-39, 7e-39, -7e-39, 1e-38],
                  [0.5, -2e-39, 1e-39, -0.0]], np.float32)
    x = np.concatenate([x, x[::-1] * np.float32(0.5)])
    y = np.array([[1e-30, -1.0, 0.9, 1e-38], [1e-8, 1e-9, -1.0, 0.5], [1.0, 0.5, 1e-37, 2.0],
                  [-1e-35, 0.25, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0], [0.8, 0.9, 0.87, 0.89],
                  [0.875, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    return x, y

def debug_print(x):
    """jax.debug.print at the top, in a fori_loop and inside a shard_map
    body (Shardy puts that one on <@empty_mesh, []> in a manual region),
    and jax.debug.callback: Python callbacks without results, which tessel
    skips (it runs no Python) with one warning."""
    jax.debug.print("x {x}", x=x)
    y = lax.fori_loop(0, 3, lambda i, v: (jax.debug.print("i {i} {s}", i=i, s=v.sum()), v * 1.5)[1], x)
    z = jax.shard_map(lambda a: (jax.debug.print("shard {a}", a=a), lax.psum(a, "x"))[1],
                      in_specs=P("x"), out_specs=P())(y)
    jax.debug.callback(lambda v: None, z)
    return y, z


def debug_print_specs(axes):
    return (P(axes[0]),), (P(axes[0]), P())


def debug_print_inputs(rng):
    return (_normal(rng, (8, 3)),)

ALL_1D = ((1,), (2,), (4,), (8,))
DEPTHWISE_GRAD = (
    "XLA's SPMD partitioner (jaxlib 0.10.2) doubles the kernel gradient of a depthwise convolution "
    "whose batch is split over x and replicated over y: its compiled module all-reduces the "
    "kernel's partial sums over all 4 devices, replica_groups={{0,1,2,3}}, where the batch has "
    "only 2 shards; JAX on 1, 2 and 8 devices gives the gradient tessel gives")

PROGRAMS = [
    Program("mlp", mlp, MESHES_ALL, mlp_specs, mlp_inputs,
            doc="Megatron MLP, f32"),
    Program("mlp_loss", mlp_loss, MESHES_ALL, mlp_loss_specs, mlp_loss_inputs, grad_wrt=(0, 1, 2, 3),
            doc="the MLP's mean squared error, for tessel grad against jax.grad"),
    Program("mlp_sgd", mlp_sgd, MESHES_ALL, mlp_sgd_specs, mlp_loss_inputs,
            doc="one SGD step of the MLP (jax.value_and_grad)"),
    Program("mlp_adam", mlp_adam, MESHES, mlp_adam_specs, mlp_adam_inputs,
            doc="one Adam step of the MLP"),
    Program("block", block, MESHES_ALL, block_specs, block_inputs,
            doc="pre-LN transformer block, bf16 with f32 accumulation"),
    Program("block_loss", block_loss, ((1,), (2, 2), (8,)), block_loss_specs, block_loss_inputs,
            grad_wrt=tuple(range(10)), doc="the block's mean squared error, for tessel grad"),
    Program("block_sgd", block_sgd, ((2,), (2, 4)), block_sgd_specs, block_loss_inputs,
            doc="one SGD step of the transformer block"),
    # block_adam on every mesh: tessel's outputs are the same on 1, 2, 4 and 2x2 devices, and so are JAX's.
    # On other inputs (test_donate's seed 5) the moments of w1 and w2 differ from JAX's in 1 and 5 of 4096
    # elements (m of w2 by 4.1e-4 of its largest magnitude; 8 other moment tensors and every parameter
    # bit for bit, on every mesh of both): a single bf16 rounding in the FFN (w1, w2) falling the other way,
    # not Adam's epsilon, bias correction or a reduction order, which would move every moment tensor and
    # differ between meshes. Traced: each of those elements' gradients (g = (m1 - 0.9 m) / 0.1) is exactly
    # one bf16 step from JAX's; test_donate.py's compare_adam derives the tolerance from it.
    Program("block_adam", block_adam, ((1,), (2,), (4,), (2, 2)), block_adam_specs, block_adam_inputs,
            doc="one Adam step of the transformer block"),
    Program("convnet", convnet, MESHES, convnet_specs, convnet_inputs,
            doc="conv net: batch norm, depthwise conv, max pool"),
    Program("convnet_loss", convnet_loss, MESHES, convnet_loss_specs, convnet_loss_inputs,
            grad_wrt=tuple(range(6)), jax_wrong={"grad@2x2": DEPTHWISE_GRAD},
            doc="the conv net's cross entropy, for tessel grad"),
    Program("rnn", rnn, MESHES, rnn_specs, rnn_inputs, doc="lax.scan RNN"),
    Program("rnn_loss", rnn_loss, MESHES, rnn_loss_specs, rnn_loss_inputs, grad_wrt=(0, 1, 2, 3),
            doc="the RNN's mean squared error, for tessel grad"),
    Program("lm_loss", lm_loss, MESHES, lm_loss_specs, lm_loss_inputs, grad_wrt=tuple(range(6)),
            doc="embedding gather, attention, tied logits, cross entropy"),
    Program("array_ops", array_ops, MESHES, array_ops_specs, array_ops_inputs,
            doc="sort, argsort, cumsum, scatter-add, dynamic slice, int8 matmul"),
    Program("loops", loops, MESHES, loops_specs, loops_inputs,
            doc="fori_loop, while_loop, cond"),
    Program("loops_loss", loops_loss, MESHES, loops_loss_specs, loops_loss_inputs, grad_wrt=(0, 1),
            doc="a fori_loop's gradient"),
    Program("moe", moe, ALL_1D, moe_specs, moe_inputs,
            doc="top-1 mixture of experts, shard_map and all-to-all"),
    Program("topk", topk, MESHES_ALL, topk_specs, topk_inputs, doc="top-k and argmax"),
    Program("argmax_ties", argmax_ties, ((1,), (2,), (3,), (4,), (2, 2)), argmax_ties_specs, argmax_ties_inputs,
            doc="argmax and argmin over each axis with ties, -0 and NaNs, tiled on the reduced dim and another"),
    Program("uneven", uneven, ((2,), (4,), (8,), (2, 4)), uneven_specs, uneven_inputs,
            doc="7 rows and 10 columns over 2, 4 and 8"),
    Program("random", rand, MESHES, rand_specs, rand_inputs,
            doc="jax.random threefry: dropout, bits, normal"),
    Program("batched_index", batched_index, MESHES_ALL, batched_index_specs, batched_index_inputs,
            doc="take_along_axis, vmap'd indexing and .at[].add: batching-dim gathers and scatters"),
    Program("grad_edges", grad_edges, ((1,), (2,), (4,)), grad_edges_specs, grad_edges_inputs, grad_wrt=(0, 1),
            doc="gradients at kinks, zero adjoints through infinite branches, products with zeros"),
    Program("linalg_loss", linalg_loss, ((1,), (2,), (4,)), linalg_loss_specs, linalg_loss_inputs,
            grad_wrt=(0, 1, 2), doc="gradients through cholesky, triangular solves and LU (solve, inv, det)"),
    Program("batched_index_loss", batched_index_loss, MESHES_ALL, batched_index_loss_specs,
            batched_index_loss_inputs, grad_wrt=(0, 1),
            doc="cross entropy of integer labels, for tessel grad (a batched scatter-add)"),
    Program("subnormals", subnormals, ((1,), (2,), (4,)), subnormals_specs, subnormals_inputs,
            doc="subnormals flushed to zero in arithmetic (XLA's CPU mode), kept by conversions"),
    Program("debug_print", debug_print, ((1,), (2,), (4,)), debug_print_specs, debug_print_inputs,
            doc="jax.debug.print and jax.debug.callback (skipped: no results), also in a shard_map body"),
]

_GROUPS = {"mlp": "mlp mlp_loss mlp_sgd mlp_adam", "block": "block block_loss", "train": "block_sgd block_adam",
           "nets": "convnet convnet_loss rnn rnn_loss moe", "lm": "lm_loss loops loops_loss",
           "ops": "topk argmax_ties uneven random array_ops batched_index batched_index_loss grad_edges linalg_loss subnormals debug_print"}
_GROUP_OF = {n: g for g, names in _GROUPS.items() for n in names.split()}
assert sorted(_GROUP_OF) == sorted(p.name for p in PROGRAMS), "each program in one ctest group"
GROUPS = tuple(_GROUPS)
PROGRAMS = [dataclasses.replace(p, group=_GROUP_OF[p.name]) for p in PROGRAMS]
BY_NAME = {p.name: p for p in PROGRAMS}
assert len(BY_NAME) == len(PROGRAMS)
