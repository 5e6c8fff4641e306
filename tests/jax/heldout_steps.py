"""heldout_steps.py: training steps written by audit32 for issue 32's
held-out check (tests/jax/test_memfit_heldout.py), unlike the MLPs, blocks
and conv nets of tests/models and tests/jax: a GRU and a two-layer LSTM
over lax.scan, a ResNet block with batch norm (running statistics updated)
and a residual, a transformer with tied embeddings (gather forward,
scatter-add backward, logits through E^T) and Adam, an MLP with dropout
drawn by jax.random from a key argument, f32 master weights with bf16
matmuls, an RMSNorm/SwiGLU stack with AdamW and global-norm clipping;
their parameters pytrees (dicts, tuples, lists), labels int32.

    lower(name, n) -> the HLO text of jax.jit(step, in_shardings,
    out_shardings, donate_argnums).lower(...) on n CPU devices, batch split
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

F32 = jnp.float32


def xent(logits, labels):
    lp = jax.nn.log_softmax(logits.astype(F32), -1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], 1))


# 1. GRU over lax.scan, params a dict, int32 labels, SGD.
def gru_loss(p, xs, labels):
    def cell(h, x):
        z = jax.nn.sigmoid(x @ p["wz"] + h @ p["uz"])
        r = jax.nn.sigmoid(x @ p["wr"] + h @ p["ur"])
        c = jnp.tanh(x @ p["wh"] + (r * h) @ p["uh"])
        h = (1 - z) * h + z * c
        return h, None
    h0 = jnp.zeros((xs.shape[1], p["uz"].shape[0]), F32)
    h, _ = jax.lax.scan(cell, h0, xs)
    return xent(h @ p["wo"], labels)


def gru_step(p, xs, labels):
    loss, g = jax.value_and_grad(gru_loss)(p, xs, labels)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), loss


def gru_args(rng, T=6, B=16, D=24, H=32, C=5):
    n = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    p = {"wz": n(D, H), "uz": n(H, H), "wr": n(D, H), "ur": n(H, H), "wh": n(D, H), "uh": n(H, H), "wo": n(H, C)}
    return (p, n(T, B, D), rng.integers(0, C, B).astype(np.int32))


def gru_specs():
    return ("rep", P(None, "x"), P("x")), ("rep", P())


# 2. ResNet block: conv, batch norm (batch stats, running stats updated),
# relu, conv, batch norm, residual, relu, pool, dense; momentum SGD.
def bn(x, g, b, eps=1e-5):
    mu = x.mean((0, 1, 2))
    var = ((x - mu) ** 2).mean((0, 1, 2))
    return (x - mu) / jnp.sqrt(var + eps) * g + b, mu, var


def conv(x, k):
    return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def resnet_loss(p, x, labels):
    h, m1, v1 = bn(conv(x, p["k1"]), p["g1"], p["b1"])
    h = jax.nn.relu(h)
    h, m2, v2 = bn(conv(h, p["k2"]), p["g2"], p["b2"])
    h = jax.nn.relu(h + x)
    return xent(h.mean((1, 2)) @ p["wd"], labels), (m1, v1, m2, v2)


def resnet_step(p, mom, stats, x, labels):
    (loss, (m1, v1, m2, v2)), g = jax.value_and_grad(resnet_loss, has_aux=True)(p, x, labels)
    mom = jax.tree.map(lambda m, d: 0.9 * m + d, mom, g)
    p = jax.tree.map(lambda a, m: a - 0.05 * m, p, mom)
    new = [0.9 * s + 0.1 * v for s, v in zip(stats, (m1, v1, m2, v2))]
    return p, mom, new, loss


def resnet_args(rng, B=8, S=8, C=8, K=10):
    n = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    p = {"k1": n(3, 3, C, C), "g1": np.ones(C, np.float32), "b1": np.zeros(C, np.float32),
         "k2": n(3, 3, C, C), "g2": np.ones(C, np.float32), "b2": np.zeros(C, np.float32), "wd": n(C, K)}
    mom = jax.tree.map(lambda a: np.zeros_like(a), p)
    stats = [np.zeros(C, np.float32), np.ones(C, np.float32), np.zeros(C, np.float32), np.ones(C, np.float32)]
    return (p, mom, stats, n(B, S, S, C), rng.integers(0, K, B).astype(np.int32))


def resnet_specs():
    return ("rep", "rep", "rep", P("x"), P("x")), ("rep", "rep", "rep", P())


# 3. Transformer with tied embeddings (gather forward, scatter-add
# backward, logits through E^T), causal attention, Adam, int32 labels.
def lm_loss(p, tokens, labels):
    E = p[0]
    wq, wk, wv, wo, w1, w2 = p[1:]
    b, t = tokens.shape
    x = E[tokens]
    h = x / jnp.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    q, k, v = h @ wq, h @ wk, h @ wv
    a = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    a = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((t, t), bool)), a, -1e9), -1)
    x = x + (a @ v) @ wo
    x = x + jax.nn.relu(x @ w1) @ w2
    logits = x @ E.T
    lp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], -1))


def adam(p, m, v, t, g, lr=1e-3):
    t1 = t + 1.0
    m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    v = jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
    c1, c2 = 1 - 0.9 ** t1, 1 - 0.999 ** t1
    p = jax.tree.map(lambda a, mm, vv: a - lr * (mm / c1) / (jnp.sqrt(vv / c2) + 1e-8), p, m, v)
    return p, m, v, t1


def lm_step(p, m, v, t, tokens, labels):
    loss, g = jax.value_and_grad(lm_loss)(p, tokens, labels)
    p, m, v, t1 = adam(p, m, v, t, g)
    return p, m, v, t1, loss


def lm_args(rng, V=50, D=32, B=8, T=12, F=64):
    n = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    p = (n(V, D), n(D, D), n(D, D), n(D, D), n(D, D), n(D, F), n(F, D))
    z = tuple(np.zeros_like(a) for a in p)
    return (p, z, tuple(np.zeros_like(a) + 1e-4 for a in p), np.float32(3.0),
            rng.integers(0, V, (B, T)).astype(np.int32), rng.integers(0, V, (B, T)).astype(np.int32))


def lm_specs():
    return ("rep", "rep", "rep", "rep", P("x"), P("x")), ("rep", "rep", "rep", "rep", P())


# 4. MLP with dropout from jax.random (the key an argument), weight
# decay, int32 labels.
def drop_loss(p, key, x, labels):
    h = x
    for i, (w, b) in enumerate(p[:-1]):
        h = jax.nn.relu(h @ w + b)
        keep = jax.random.bernoulli(jax.random.fold_in(key, i), 0.8, h.shape)
        h = jnp.where(keep, h / 0.8, 0.0)
    w, b = p[-1]
    return xent(h @ w + b, labels)


def drop_step(p, key, x, labels):
    loss, g = jax.value_and_grad(drop_loss)(p, key, x, labels)
    return jax.tree.map(lambda a, d: a * (1 - 1e-4) - 0.05 * d, p, g), loss


def drop_args(rng, B=32, dims=(40, 96, 96, 7)):
    n = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    p = [(n(a, b), n(b)) for a, b in zip(dims, dims[1:])]
    return (p, np.array([0, 42], np.uint32), n(B, dims[0]), rng.integers(0, dims[-1], B).astype(np.int32))


def drop_specs():
    return ("rep", "rep", P("x"), P("x")), ("rep", P())


# 5. Mixed precision: f32 master weights, bf16 matmuls, f32 loss/update;
# layer norm in f32.
def mixed_loss(p, x, y):
    h = x.astype(jnp.bfloat16)
    for w in p["ws"]:
        h = jax.nn.gelu(h @ w.astype(jnp.bfloat16))
        hf = h.astype(F32)
        hf = (hf - hf.mean(-1, keepdims=True)) / jnp.sqrt(hf.var(-1, keepdims=True) + 1e-5)
        h = hf.astype(jnp.bfloat16)
    out = (h @ p["out"].astype(jnp.bfloat16)).astype(F32)
    return jnp.mean((out - y) ** 2)


def mixed_step(p, x, y):
    loss, g = jax.value_and_grad(mixed_loss)(p, x, y)
    return jax.tree.map(lambda a, d: a - 0.01 * d, p, g), loss


def mixed_args(rng, B=32, D=64, L=3, O=16):
    n = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    return ({"ws": [n(D, D) for _ in range(L)], "out": n(D, O)}, n(B, D), n(B, O))


def mixed_specs():
    return ("rep", P("x"), P("x")), ("rep", P())


# 6. RMSNorm + SwiGLU stack, nested dict pytree, AdamW with global-norm
# gradient clipping (every gradient feeds every update).
def swiglu_loss(p, x, y):
    h = x
    for L in p["layers"]:
        n = h / jnp.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * L["scale"]
        h = h + (jax.nn.silu(n @ L["wg"]) * (n @ L["wu"])) @ L["wd"]
    return jnp.mean((h @ p["head"] - y) ** 2)


def swiglu_step(p, opt, x, y):
    loss, g = jax.value_and_grad(swiglu_loss)(p, x, y)
    norm = jnp.sqrt(sum(jnp.sum(a * a) for a in jax.tree.leaves(g)))
    g = jax.tree.map(lambda a: a * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), g)
    m, v, t = opt
    p2, m, v, t = adam(p, m, v, t, g)
    p2 = jax.tree.map(lambda a, b: a - 1e-3 * 0.01 * b, p2, p)
    return p2, (m, v, t), loss


def swiglu_args(rng, B=16, D=32, F=48, L=2, O=8):
    n = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    p = {"layers": [{"scale": np.ones(D, np.float32), "wg": n(D, F), "wu": n(D, F), "wd": n(F, D)}
                    for _ in range(L)], "head": n(D, O)}
    z = jax.tree.map(np.zeros_like, p)
    return (p, (z, jax.tree.map(lambda a: a + 1e-4, z), np.float32(0.0)), n(B, D), n(B, O))


def swiglu_specs():
    return ("rep", "rep", P("x"), P("x")), ("rep", "rep", P())


# 7. Two-layer LSTM over lax.scan, Adagrad, regression on every step's
# output (the scan's ys).
def lstm_layer(w, u, b, xs):
    H = u.shape[0]

    def cell(c, x):
        h, s = c
        g = x @ w + h @ u + b
        i, f, o, z = (g[:, k * H:(k + 1) * H] for k in range(4))
        s = jax.nn.sigmoid(f) * s + jax.nn.sigmoid(i) * jnp.tanh(z)
        h = jax.nn.sigmoid(o) * jnp.tanh(s)
        return (h, s), h
    z = jnp.zeros((xs.shape[1], H), F32)
    _, hs = jax.lax.scan(cell, (z, z), xs)
    return hs


def lstm_loss(p, xs, ys):
    hs = xs
    for (w, u, b) in p["cells"]:
        hs = lstm_layer(w, u, b, hs)
    return jnp.mean((hs @ p["out"] - ys) ** 2)


def lstm_step(p, acc, xs, ys):
    loss, g = jax.value_and_grad(lstm_loss)(p, xs, ys)
    acc = jax.tree.map(lambda a, d: a + d * d, acc, g)
    p = jax.tree.map(lambda a, d, s: a - 0.05 * d / (jnp.sqrt(s) + 1e-7), p, g, acc)
    return p, acc, loss


def lstm_args(rng, T=5, B=8, D=12, H=16, O=4):
    n = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    p = {"cells": [(n(D, 4 * H), n(H, 4 * H), n(4 * H)), (n(H, 4 * H), n(H, 4 * H), n(4 * H))], "out": n(H, O)}
    acc = jax.tree.map(lambda a: np.full_like(a, 0.1), p)
    return (p, acc, n(T, B, D), n(T, B, O))


def lstm_specs():
    return ("rep", "rep", P(None, "x"), P(None, "x")), ("rep", "rep", P())


# name: (step fn, args fn, specs fn, donated argnums, forward loss fn, wrt argnum)
PROGS = {
    "gru-sgd": (gru_step, gru_args, gru_specs, (0,), gru_loss),
    "resnet-bn-mom": (resnet_step, resnet_args, resnet_specs, (0, 1, 2), lambda p, x, l: resnet_loss(p, x, l)[0]),
    "tied-lm-adam": (lm_step, lm_args, lm_specs, (0, 1, 2, 3), lm_loss),
    "dropout-mlp": (drop_step, drop_args, drop_specs, (0,), drop_loss),
    "mixed-bf16": (mixed_step, mixed_args, mixed_specs, (0,), mixed_loss),
    "swiglu-adamw-clip": (swiglu_step, swiglu_args, swiglu_specs, (0, 1), swiglu_loss),
    "lstm2-adagrad": (lstm_step, lstm_args, lstm_specs, (0, 1), lstm_loss),
}


def _shard(spec, mesh, tree):
    s = NamedSharding(mesh, P() if spec == "rep" else spec)
    return jax.tree.map(lambda _: s, tree)


def lower(name, n):
    fn, argsf, specsf, don, _ = PROGS[name]
    args = argsf(np.random.default_rng(0))
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    ins, outs = specsf()
    si = tuple(_shard(s, mesh, a) for s, a in zip(ins, args))
    so = tuple(_shard(s, mesh, o) for s, o in zip(outs, jax.eval_shape(fn, *args)))
    f = jax.jit(fn, in_shardings=si, out_shardings=so, donate_argnums=don)
    structs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), args)
    return f.lower(*structs).as_text("hlo")
