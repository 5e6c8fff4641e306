#!/usr/bin/env python3
"""lm.py: the held-out language model of the auto-shard quality test, lowered by JAX.

A token embedding gather over a vocabulary table, L residual tanh MLP
layers, an output projection (untied: its own [D, V] matrix; tied: the
embedding table transposed), log-softmax cross entropy of integer labels
(a gather of the log-probabilities), the mean over the tokens. JAX lowers
jnp.take, log_softmax and take_along_axis (and their transposes: the
scatter-adds of the backward) as calls of small computations, which is
what --auto-shard must see through.

    build/jax-venv/bin/python tests/e2e/auto_lm/lm.py step  > tests/e2e/auto_lm/lm_step.hlo
    build/jax-venv/bin/python tests/e2e/auto_lm/lm.py tied  > tests/e2e/auto_lm/lm_tied_fwd.hlo

`step`: one SGD step of the untied model (jax.value_and_grad, then
P - 0.1 dP; outputs the loss and the new parameters). `tied`: the tied
model's loss alone, whose step tests/e2e/auto_shard.py writes with
`tessel grad --sgd` (the other backward: tessel's own gradient of JAX's
calls). Parameters: the table, w1/w2 per layer, the projection (untied),
then tokens and labels, s32[B, S].
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

V, S, B, D, F, L = 1024, 32, 16, 128, 256, 2


def loss(params, tokens, labels, tied):
    embed = params[0]
    h = jnp.take(embed, tokens, axis=0)
    for layer in range(L):
        w1, w2 = params[1 + 2 * layer], params[2 + 2 * layer]
        h = h + jnp.tanh(h @ w1) @ w2
    logits = h @ (embed.T if tied else params[-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "step"
    tied = kind == "tied"
    shapes = [(V, D)] + [(D, F), (F, D)] * L + ([] if tied else [(D, V)])
    params = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    ids = jax.ShapeDtypeStruct((B, S), jnp.int32)
    if tied:
        fn = jax.jit(lambda params, tokens, labels: loss(params, tokens, labels, True))
        text = fn.lower(params, ids, ids).as_text(dialect="hlo")
    else:
        def step(*args):
            ps, tokens, labels = list(args[:-2]), args[-2], args[-1]
            value, grads = jax.value_and_grad(loss)(ps, tokens, labels, False)
            return (value,) + tuple(p - 0.1 * g for p, g in zip(ps, grads))
        text = jax.jit(step).lower(*params, ids, ids).as_text(dialect="hlo")
    print(f"// Written by tests/e2e/auto_lm/lm.py {kind} (jax {jax.__version__}): V={V} S={S} B={B} D={D} "
          f"F={F} L={L}; do not edit.")
    print(text)


if __name__ == "__main__":
    main()
