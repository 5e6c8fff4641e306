"""peers_models.py: the workloads of `bench/run peers` written once in JAX
(issue 34). tessel runs the HLO that JAX lowers each function to, JAX runs
the function itself, and bench/peers_torch.py writes the same computation
in PyTorch; all three read the same inputs (the .npy files `peers_jax.py
gen` writes) and their results are compared with each other.

Every workload runs on 2 devices (a 1-D mesh, axis "x"); f32 throughout.

    WORKLOADS: dict name -> Workload
    Workload fields
      .fn        the JAX function: positional array arguments, returns one
                 array or a tuple
      .specs     (in_specs, out_specs) over the axis "x"
      .inputs(rng, quick) -> tuple of NumPy arrays (f32, or int32 labels)
      .params    {output index: input index}: an output that is an updated
                 parameter (a training step), compared by its change from
                 the input (the update), not its value
      .doc       one line

Shapes (full; --quick: small ones for checking that everything runs):
  mlp, mlp-sgd   x[512,1024], W1[1024,4096] column-sharded, tanh, W2 row-
                 sharded (bench/ `mlp` and `train`); mlp-sgd: loss
                 sum(y^2)/2, SGD on W1 and W2
  block-*        a GPT-2-small block: pre-LN, causal self-attention (12
                 heads of 64), residual, LN, GELU MLP (3072), residual;
                 sequence 512, width 768, batch 2; -infer the forward alone
                 with the heads and the MLP split over the ranks (Megatron),
                 -tp and -dp forward + backward + Adam (mean squared error
                 against a target) split by heads or by the batch
  convnet        NHWC x[32,32,32,3]: conv 3x3 3->32, batch norm (batch
                 statistics over the global batch), relu, conv 3x3 stride 2
                 32->64, relu, mean pool, dense 64->10, softmax cross
                 entropy; SGD; the batch split over the ranks
  moe            a top-1 mixture of experts over 4 experts (2 a rank),
                 tokens x[2048,768] split over the ranks, each rank sends
                 every expert its gate-weighted tokens with an all-to-all,
                 runs its experts' relu MLPs (768->1536->768) and gets the
                 results back with a second all-to-all
"""
import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable
    specs: tuple
    inputs: Callable
    params: dict
    doc: str


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------- Megatron MLP

def mlp_shapes(quick):
    return (128, 512, 512) if quick else (512, 1024, 4096)


def mlp(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def mlp_inputs(rng, quick):
    b, d, f = mlp_shapes(quick)
    return (_normal(rng, (b, d)), _normal(rng, (d, f), d ** -0.5), _normal(rng, (f, d), f ** -0.5))


MLP_LR = 1e-3


def mlp_sgd(x, w1, w2):
    def loss_fn(w1, w2):
        y = mlp(x, w1, w2)
        return jnp.sum(y * y) / 2

    loss, (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w1, w2)
    return w1 - MLP_LR * g1, w2 - MLP_LR * g2, loss


MLP_SPECS = ((P(), P(None, "x"), P("x", None)), P())
MLP_SGD_SPECS = ((P(), P(None, "x"), P("x", None)), (P(None, "x"), P("x", None), P()))


# ------------------------------------------------------- transformer block
# GPT-2 small: width 768, 12 heads of 64, MLP 3072, pre-LN, causal.

def block_shapes(quick):
    """(batch, sequence, width, heads, mlp width)"""
    return (2, 64, 128, 4, 512) if quick else (2, 512, 768, 12, 3072)


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, w2):
    """x[B,S,D]; wq, wk, wv [D,H,K]; wo [H,K,D]; w1 [D,F]; w2 [F,D]."""
    s_len, k_dim = x.shape[1], wq.shape[2]
    h = layer_norm(x, g1, b1)
    q = jnp.einsum("bsd,dhk->bhsk", h, wq)
    k = jnp.einsum("bsd,dhk->bhsk", h, wk)
    v = jnp.einsum("bsd,dhk->bhsk", h, wv)
    s = jnp.einsum("bhqk,bhtk->bhqt", q, k) / math.sqrt(k_dim)
    causal = lax.broadcasted_iota(jnp.int32, (s_len, s_len), 0) >= lax.broadcasted_iota(jnp.int32, (s_len, s_len), 1)
    s = jnp.where(causal, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    a = jnp.einsum("bhqt,bhtk->bhqk", p, v)
    x = x + jnp.einsum("bhqk,hkd->bqd", a, wo)
    h = layer_norm(x, g2, b2)
    f = jax.nn.gelu(h @ w1)  # the tanh approximation, as GPT-2
    return x + f @ w2


def block_params(rng, quick):
    _, _, d, nh, f = block_shapes(quick)
    k = d // nh
    return (1.0 + _normal(rng, (d,), 0.1), _normal(rng, (d,), 0.1),
            _normal(rng, (d, nh, k), d ** -0.5), _normal(rng, (d, nh, k), d ** -0.5),
            _normal(rng, (d, nh, k), d ** -0.5), _normal(rng, (nh, k, d), d ** -0.5),
            1.0 + _normal(rng, (d,), 0.1), _normal(rng, (d,), 0.1),
            _normal(rng, (d, f), d ** -0.5), _normal(rng, (f, d), f ** -0.5))


def block_infer_inputs(rng, quick):
    b, s, d, _, _ = block_shapes(quick)
    return (_normal(rng, (b, s, d)),) + block_params(rng, quick)


def _block_param_specs(mp):
    return (P(), P(), P(None, mp, None), P(None, mp, None), P(None, mp, None),
            P(mp, None, None), P(), P(), P(None, mp), P(mp, None))


BLOCK_INFER_SPECS = ((P(),) + _block_param_specs("x"), P())

ADAM_LR = 1e-3


def block_loss(params, x, y):
    out = block(x, *params)
    return jnp.mean((out - y) ** 2)


def block_adam(*args):
    """Params (10), first moments (10), second moments (10), the step count
    t (f32[]), then x and the target y; returns the updated params, moments,
    t + 1 and the loss. Adam: b1 0.9, b2 0.999, eps 1e-8, bias-corrected
    (torch.optim.Adam's update)."""
    params, ms, vs, t, x, y = args[:10], args[10:20], args[20:30], args[30], args[31], args[32]
    loss, g = jax.value_and_grad(block_loss)(params, x, y)
    t1 = t + 1.0
    c1, c2 = 1.0 - 0.9 ** t1, 1.0 - 0.999 ** t1
    new_p, new_m, new_v = [], [], []
    for p, d, m, v in zip(params, g, ms, vs):
        m1 = 0.9 * m + 0.1 * d
        v1 = 0.999 * v + 0.001 * d * d
        new_p.append(p - ADAM_LR * (m1 / c1) / (jnp.sqrt(v1 / c2) + 1e-8))
        new_m.append(m1)
        new_v.append(v1)
    return tuple(new_p) + tuple(new_m) + tuple(new_v) + (t1, loss)


def block_adam_inputs(rng, quick):
    b, s, d, _, _ = block_shapes(quick)
    params = block_params(rng, quick)
    ms = tuple(_normal(rng, p.shape, 0.01) for p in params)
    vs = tuple(np.abs(_normal(rng, p.shape, 0.01)) for p in params)
    return params + ms + vs + (np.float32(3.0), _normal(rng, (b, s, d)), _normal(rng, (b, s, d)))


def _block_adam_specs(mp, dp):
    p = _block_param_specs(mp)
    return (p * 3 + (P(), P(dp), P(dp)), p * 3 + (P(), P()))


# Outputs 0..29 (params and moments) are updates of inputs 0..29.
BLOCK_ADAM_PARAMS = {i: i for i in range(30)}


# ------------------------------------------------------ conv net, batch norm

def convnet_shapes(quick):
    """(batch, image side, in channels, conv1 channels, conv2 channels, classes)"""
    return (8, 8, 3, 8, 16, 10) if quick else (32, 32, 3, 32, 64, 10)


CONV_LR = 0.05


def convnet_logits(k1, gamma, beta, k2, wd, x):
    dn = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn)
    mu = jnp.mean(h, axis=(0, 1, 2))
    var = jnp.mean((h - mu) ** 2, axis=(0, 1, 2))
    h = jax.nn.relu((h - mu) * lax.rsqrt(var + 1e-5) * gamma + beta)
    h = lax.conv_general_dilated(h, k2, (2, 2), ((1, 1), (1, 1)), dimension_numbers=dn)
    h = jax.nn.relu(h)
    return jnp.mean(h, axis=(1, 2)) @ wd


def convnet_step(k1, gamma, beta, k2, wd, x, labels):
    def loss_fn(params):
        logits = convnet_logits(*params, x)
        logp = jax.nn.log_softmax(logits, axis=-1)
        onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=F32)
        return -jnp.mean(jnp.sum(logp * onehot, axis=-1))

    params = (k1, gamma, beta, k2, wd)
    loss, g = jax.value_and_grad(loss_fn)(params)
    return tuple(p - CONV_LR * d for p, d in zip(params, g)) + (loss,)


def convnet_inputs(rng, quick):
    n, s, c, c1, c2, k = convnet_shapes(quick)
    return (_normal(rng, (3, 3, c, c1), (9 * c) ** -0.5), 1.0 + _normal(rng, (c1,), 0.1),
            _normal(rng, (c1,), 0.1), _normal(rng, (3, 3, c1, c2), (9 * c1) ** -0.5),
            _normal(rng, (c2, k), c2 ** -0.5), _normal(rng, (n, s, s, c)),
            rng.integers(0, k, size=(n,), dtype=np.int32))


CONVNET_SPECS = ((P(), P(), P(), P(), P(), P("x"), P("x")), (P(), P(), P(), P(), P(), P()))


# --------------------------------------------------- mixture of experts

def moe_shapes(quick):
    """(tokens, width, experts, expert hidden width)"""
    return (64, 32, 4, 64) if quick else (2048, 768, 4, 1536)


def _moe_local(x, wr, w1, w2):
    e = wr.shape[1]
    logits = x @ wr                                         # [t, E]
    gate = jax.nn.softmax(logits, axis=-1)
    mask = jax.nn.one_hot(jnp.argmax(logits, axis=-1), e, dtype=x.dtype) * gate
    disp = jnp.einsum("te,td->etd", mask, x)                # [E, t, D]
    disp = lax.all_to_all(disp, "x", 0, 1, tiled=True)      # [E/n, n*t, D]
    h = jax.nn.relu(jnp.einsum("etd,edh->eth", disp, w1))
    out = jnp.einsum("eth,ehd->etd", h, w2)
    out = lax.all_to_all(out, "x", 1, 0, tiled=True)        # [E, t, D]
    return jnp.sum(out, axis=0)


def moe(x, wr, w1, w2):
    return jax.shard_map(_moe_local, in_specs=(P("x"), P(), P("x"), P("x")),
                         out_specs=P("x"))(x, wr, w1, w2)


def moe_inputs(rng, quick):
    t, d, e, h = moe_shapes(quick)
    return (_normal(rng, (t, d)), _normal(rng, (d, e), d ** -0.5), _normal(rng, (e, d, h), d ** -0.5),
            _normal(rng, (e, h, d), h ** -0.5))


MOE_SPECS = ((P("x"), P(), P("x"), P("x")), P("x"))


WORKLOADS = {w.name: w for w in (
    Workload("mlp", mlp, MLP_SPECS, mlp_inputs, {},
             "the Megatron MLP forward: tanh(x W1) W2, W1 column-, W2 row-sharded"),
    Workload("mlp-sgd", mlp_sgd, MLP_SGD_SPECS, mlp_inputs, {0: 1, 1: 2},
             "the Megatron MLP's SGD step, loss sum(y^2)/2"),
    Workload("block-infer", block, BLOCK_INFER_SPECS, block_infer_inputs, {},
             "a GPT-2-small block forward, heads and MLP split (Megatron)"),
    Workload("block-tp", block_adam, _block_adam_specs("x", None), block_adam_inputs, BLOCK_ADAM_PARAMS,
             "a GPT-2-small block forward + backward + Adam, heads and MLP split (Megatron)"),
    Workload("block-dp", block_adam, _block_adam_specs(None, "x"), block_adam_inputs, BLOCK_ADAM_PARAMS,
             "a GPT-2-small block forward + backward + Adam, the batch split (data parallel)"),
    Workload("convnet", convnet_step, CONVNET_SPECS, convnet_inputs, {i: i for i in range(5)},
             "a conv net SGD step with batch norm, the batch split"),
    Workload("moe", moe, MOE_SPECS, moe_inputs, {},
             "a top-1 mixture-of-experts layer, experts and tokens split, two all-to-alls"),
)}
