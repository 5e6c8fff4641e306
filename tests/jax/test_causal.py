"""test_causal.py: causal attention computes only what the mask keeps
(issue 34; ir/causal.c, device/k_dot.c), and equals JAX.

An attention written in JAX, q, k, v [B, H, S, D], scores q k^T / sqrt(D)
masked by select(mask, s, FILL), softmax, P v, lowered together with its
gradient (dq, dk, dv of sum(out * w), w an input: the backward's dots over the
probabilities' and the scores' gradient's zero triangles), for each mask:

  causal       iota(0) >= iota(1), FILL -1e9 (JAX's lowering: a call to
               _where): the scores' upper tiles are not computed, P.V, dQ,
               dK, dV skip P's and dS's zero triangles
  causal_inf   the same mask, FILL -inf
  window       causal and'ed with a window of 40 keys: recognised as
               within the causal triangle
  offset       iota(0) + 4 >= iota(1): keeps 4 diagonals above; must not
               be taken for causal
  upper        iota(0) <= iota(1): the other triangle
  arbitrary    a random mask passed in (its diagonal kept)

at sequence lengths 130 and 300 (tiles of 64 divide neither), on 2
devices with the heads split, and the causal mask also on 1 and 4 devices
with the heads split and on 2 and 4 with the batch split. Each run's outputs
(out, dq, dk, dv) equal JAX's own execution of the same jitted function
(test_oracle.compare's tolerance) and `tessel run --reference`.
Exit 0 when all hold, 1 otherwise (77: JAX missing).
"""
import math
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

try:
    import programs as registry  # sets XLA_FLAGS for JAX first
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

import test_oracle as oracle  # noqa: E402

B, H, D = 4, 4, 16


def mask_of(kind, s, given):
    i = lax.broadcasted_iota(jnp.int32, (s, s), 0)
    j = lax.broadcasted_iota(jnp.int32, (s, s), 1)
    if kind in ("causal", "causal_inf"):
        return i >= j
    if kind == "window":
        return (i >= j) & (j > i - 40)
    if kind == "offset":
        return i + 4 >= j
    if kind == "upper":
        return i <= j
    return given


def make_fn(kind):
    fill = -jnp.inf if kind == "causal_inf" else -1e9

    def attention(q, k, v, given):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
        s = jnp.where(mask_of(kind, q.shape[2], given), s, fill)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    def fn(q, k, v, w, given=None):
        out = attention(q, k, v, given)
        grads = jax.grad(lambda q, k, v: jnp.sum(attention(q, k, v, given) * w), argnums=(0, 1, 2))(q, k, v)
        return (out,) + tuple(grads)
    if kind == "arbitrary":
        return fn
    return lambda q, k, v, w: fn(q, k, v, w)


def make_inputs(s, kind):
    def inputs(rng):
        x = tuple(rng.standard_normal((B, H, s, D)).astype(np.float32) for _ in range(4))
        if kind != "arbitrary":
            return x
        given = rng.random((s, s)) < 0.5
        np.fill_diagonal(given, True)
        return x + (given,)
    return inputs


def specs(split, kind):
    def sp(axes):
        a = axes[0]
        t = P(None, a, None, None) if split == "heads" else P(a, None, None, None)
        return (t, t, t, t) + ((P(),) if kind == "arbitrary" else ()), (t, t, t, t)
    return sp


def cases():
    for kind in ("causal", "causal_inf", "window", "offset", "upper", "arbitrary"):
        for s in (130, 300):
            yield kind, s, 2, "heads"
    for n, split in ((1, "heads"), (4, "heads"), (2, "batch"), (4, "batch")):
        yield "causal", 300, n, split


def main():
    bad = 0
    with tempfile.TemporaryDirectory(prefix="tessel_causal_") as tmp:
        for kind, s, n, split in cases():
            name = "%s_s%d_%s%d" % (kind, s, split, n)
            prog = registry.Program(name, make_fn(kind), ((n,),), specs(split, kind), make_inputs(s, kind))
            d = pathlib.Path(tmp) / name
            d.mkdir()
            try:
                inputs = prog.make_inputs(np.random.default_rng(34))
                hlo = d / "model.hlo"
                hlo.write_text(prog.lower_hlo((n,), inputs))
                args = oracle.write_inputs(d, inputs)
                want = prog.execute((n,), inputs)
                worst = oracle.run_and_reference(d, hlo, args, n, want)
                print("ok   %-28s out, dq, dk, dv equal JAX's and the reference (worst %.2g of the largest)"
                      % (name, worst))
            except oracle.Mismatch as e:
                bad += 1
                print("FAIL %s: %s" % (name, e))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
