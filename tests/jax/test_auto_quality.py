#!/usr/bin/env python3
"""test_auto_quality.py: --auto-shard on held-out JAX programs against hand plans (issue 33).

Small programs lowered by JAX, none tuned on: a 3-layer MLP, a GPT
block (layer norms, causal attention over 3 heads, a GELU MLP, residuals;
batch 4), a conv net (two convolutions, max and average pooling, a dense
layer), a top-2 mixture of experts, an embedding classifier (an embedding
lookup averaged over 5 tokens, a softmax classifier: its loss and its
probabilities), a lax.scan of 6 tanh layers with a per-layer sum, and an
Adam step of a 2-layer MLP from jax.value_and_grad. On 2, 4 and 8 devices
(and a 2x2 mesh where MESHES says):

  - the auto-sharded plan's run equals the reference run and JAX's result;
  - its collective bytes per device in one step (a collective in a loop
    body counted once an iteration) and its peak memory per device are no
    more than 1.1x those of the best hand-written plan (data parallel on
    the batch, Megatron on the weights, FSDP, expert parallel, the
    vocabulary-parallel embedding; the fewest bytes, then the least
    memory), each compiled from the same module with its parameters
    annotated;
  - a line over the bar is in KNOWN with its reason (a KNOWN line that
    meets the bar fails: the list stays true); such a line is planned again
    under --limit memory of the best hand plan's peak x 1.1, which must fit
    and equal the reference, and the bytes it then moves are printed (the
    scan's fit since a loop state resharded from its operand is charged
    both buffers: auto/loop_memory.c).

The default run checks the four programs the review found over the bar
(embcls, adam, scan, gpt), lax.scan over stacked weights at real sizes
(ws[6,128,128], x[256,128]: its forward, its SGD step from
jax.value_and_grad, a scan stacking every layer's output, and a GRU cell
over a sequence; on 2, 4, 8 and a 2x2 mesh, the hand plans data parallel,
FSDP and Megatron; they sliced the weights and gathered every layer,
663,588 bytes on 4 where data parallel moves 36), and two with
conditionals in the graph
(auto/cond.c): a layer chosen by a lax.switch of 3 branches, and a
lax.scan whose body applies its layer under a lax.cond (held whole, they
moved 24576-43008 and 49152-86016 bytes where data parallel moves 0 and
24-42); --all adds the MLP, the conv net, the MoE, an SGD step of the MoE
(its routing a lax.top_k) and an SGD step under loss scaling whose update
is a lax.cond, small and wide (--only NAME,... runs those named). Three
default programs nest loops in conditionals, on 2, 4, 8 and a 2x2 mesh:
a fori_loop over stacked layers in a lax.cond branch, a lax.scan in two
of a lax.switch's three branches, and a lax.scan whose body's lax.cond
runs a fori_loop of scans (held whole before, the fori_loop ran its
layers replicated or was left to propagation). On every program --explain
must hold no while whole. A collective in a loop body counts once an
iteration (every loop SCAN_LAYERS iterations), one in a conditional's
branch as if the branch ran (runs()).
Exit 0 when all hold, 1 otherwise (77: JAX missing).
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

try:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
except ImportError as e:  # pragma: no cover
    print("SKIP: %s" % e)
    sys.exit(77)

from test_oracle import TESSEL, compare_all, read_outputs, write_inputs  # noqa: E402

DEVICES = (2, 4, 8)
SCAN_LAYERS = 6


def mlp3(x, w1, b1, w2, b2, w3, b3):
    h = jax.nn.relu(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


def layer_norm(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5)


def gpt(x, wqkv, wo, w1, w2):
    b, t, d = x.shape
    heads = 3
    hd = d // heads
    q, k, v = jnp.split(layer_norm(x) @ wqkv, 3, -1)
    q, k, v = (a.reshape(b, t, heads, hd) for a in (q, k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(hd)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    a = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v).reshape(b, t, d)
    x = x + a @ wo
    return x + jax.nn.gelu(layer_norm(x) @ w1) @ w2


def conv(x, k1, k2, wd):
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn))
    h = lax.reduce_window(h, 0., lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
    return h.reshape(h.shape[0], -1) @ wd


def moe(x, wg, we1, we2):
    g = jax.nn.softmax(x @ wg, -1)
    top, idx = lax.top_k(g, 2)
    top = top / top.sum(-1, keepdims=True)
    gate = (jax.nn.one_hot(idx, wg.shape[1]) * top[..., None]).sum(1)
    h = jax.nn.relu(jnp.einsum("nd,edf->enf", x, we1))
    return jnp.einsum("ne,end->nd", gate, jnp.einsum("enf,efd->end", h, we2))


def embcls(ids, emb, w, labels):
    logits = emb[ids].mean(1) @ w
    lp = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(lp, labels[:, None], 1).mean(), jax.nn.softmax(logits, -1)


def scan(x, ws, bs):
    def body(h, wb):
        w, b = wb
        return jnp.tanh(h @ w + b), (h * h).sum()
    return lax.scan(body, x, (ws, bs))


def adam(w1, w2, m1, m2, v1, v2, x, y):
    def loss(w1, w2):
        return ((jnp.tanh(x @ w1) @ w2 - y) ** 2).mean()
    l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    outs = [l]
    for w, m, v, g in ((w1, m1, v1, g1), (w2, m2, v2, g2)):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        outs += [w - 0.01 * m / (jnp.sqrt(v) + 1e-8), m, v]
    return tuple(outs)


def moe_sgd(wg, we1, we2, x, y):
    """An SGD step of the top-2 mixture of experts (its routing a lax.top_k)."""
    def loss(wg, we1, we2):
        return ((moe(x, wg, we1, we2) - y) ** 2).mean()
    l, gs = jax.value_and_grad(loss, (0, 1, 2))(wg, we1, we2)
    return (l,) + tuple(w - 0.1 * g for w, g in zip((wg, we1, we2), gs))


def cond_sgd(w1, w2, x, y, scale):
    """An SGD step under loss scaling: the update applied only where the
    scaled loss is finite (a lax.cond, as mixed-precision training skips a
    step that overflowed)."""
    def loss(w1, w2):
        return ((jnp.tanh(x @ w1) @ w2 - y) ** 2).mean() * scale
    l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    w1, w2 = lax.cond(jnp.isfinite(l), lambda: (w1 - 0.01 * g1 / scale, w2 - 0.01 * g2 / scale),
                      lambda: (w1, w2))
    return l / scale, w1, w2


def switch3(i, x, w0, w1, w2, w3, w4):
    """A layer chosen by a lax.switch of 3 branches (a conditional of 3
    branch computations, one with a call inside)."""
    h = jax.nn.relu(x @ w0)
    h = lax.switch(i, [lambda h: jnp.tanh(h @ w1), lambda h: jax.nn.relu(h @ w2), lambda h: h @ w3], h)
    return h @ w4


def cond_scan(x, ws, flags):
    """A lax.scan of tanh layers each applied only where its flag is set (a
    lax.cond inside the loop body; the skip branch returns its parameter)."""
    def body(h, wf):
        w, f = wf
        return lax.cond(f > 0, lambda: jnp.tanh(h @ w), lambda: h), (h * h).sum()
    return lax.scan(body, x, (ws, flags))


def fori_cond(x, ws, flag):
    """A fori_loop over stacked layers inside a lax.cond branch (the other
    branch doubles its operand): a while in a conditional's branch."""
    def layers(h):
        return lax.fori_loop(0, SCAN_LAYERS, lambda i, h: jnp.tanh(h @ ws[i]), h)
    return lax.cond(flag > 0, layers, lambda h: h * 2, x)


def scan_switch(i, x, ws, bs):
    """A lax.switch of 3 branches: two a lax.scan over the stacked layers
    (tanh with a bias and a per-layer sum; relu and a per-layer mean), the
    third passing its operand through."""
    def tanh_layers(h):
        return lax.scan(lambda h, wb: (jnp.tanh(h @ wb[0] + wb[1]), (h * h).sum()), h, (ws, bs))

    def relu_layers(h):
        return lax.scan(lambda h, w: (jax.nn.relu(h @ w), h.mean()), h, ws)
    return lax.switch(i, [tanh_layers, relu_layers, lambda h: (h, jnp.zeros((SCAN_LAYERS,), h.dtype))], x)


def scan_cond_fori(x, ws, flags):
    """A lax.scan over layers whose body, where the layer's flag is set,
    applies the layer SCAN_LAYERS times as a fori_loop, each time through
    a scan of SCAN_LAYERS steps: a while in a while's body in a
    conditional's branch in a loop's body."""
    def body(h, wf):
        w, f = wf

        def repeat(h):
            def twice(j, h):
                return lax.scan(lambda h, _: (jnp.tanh(h @ w), None), h, None, length=SCAN_LAYERS)[0]
            return lax.fori_loop(0, SCAN_LAYERS, twice, h)
        return lax.cond(f > 0, repeat, lambda h: h, h), (h * h).sum()
    return lax.scan(body, x, (ws, flags))


def scan_sgd(x, ws, bs, y):
    """An SGD step of scan (its loss the squared error of the last layer's
    output): a forward scan saving the activations, a backward scan
    writing each layer's gradient."""
    def loss(ws, bs):
        return ((scan(x, ws, bs)[0] - y) ** 2).mean()
    l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(ws, bs)
    return l, ws - 0.1 * gw, bs - 0.1 * gb


def scan_ys(x, ws, bs):
    """A scan carrying its activations and stacking every layer's output
    (ys [L, B, D] beside the carry)."""
    def body(h, wb):
        w, b = wb
        h = jnp.tanh(h @ w + b)
        return h, h
    return lax.scan(body, x, (ws, bs))


def gru(xs, h0, wz, wr, wh, uz, ur, uh):
    """A GRU cell over a sequence xs [T, B, D] (lax.scan over time, its
    weights shared by every step)."""
    def cell(h, x):
        z = jax.nn.sigmoid(x @ wz + h @ uz)
        r = jax.nn.sigmoid(x @ wr + h @ ur)
        c = jnp.tanh(x @ wh + (r * h) @ uh)
        h = (1 - z) * h + z * c
        return h, h.sum()
    return lax.scan(cell, h0, xs)


def inputs_of(name):
    rng = np.random.default_rng(7)

    def r(*s, scale=0.3):
        return (rng.standard_normal(s) * scale).astype(np.float32)

    return {
        "mlp3": lambda: [r(16, 24), r(24, 40), r(40), r(40, 32), r(32), r(32, 8), r(8)],
        "gpt": lambda: [r(4, 8, 48), r(48, 144), r(48, 48), r(48, 96), r(96, 48)],
        "conv": lambda: [r(8, 8, 8, 3), r(3, 3, 3, 8), r(3, 3, 8, 16), r(2 * 2 * 16, 10)],
        "moe": lambda: [r(16, 24), r(24, 4), r(4, 24, 32), r(4, 32, 24)],
        "embcls": lambda: [rng.integers(0, 50, (16, 5)).astype(np.int32), r(50, 32), r(32, 12),
                           rng.integers(0, 12, (16,)).astype(np.int32)],
        "scan": lambda: [r(8, 16), r(SCAN_LAYERS, 16, 16), r(SCAN_LAYERS, 16)],
        "scan_wide": lambda: [r(256, 128), r(SCAN_LAYERS, 128, 128, scale=.1), r(SCAN_LAYERS, 128)],
        "scan_wide_sgd": lambda: [r(256, 128), r(SCAN_LAYERS, 128, 128, scale=.1), r(SCAN_LAYERS, 128),
                                  r(256, 128)],
        "scan_ys": lambda: [r(256, 128), r(SCAN_LAYERS, 128, 128, scale=.1), r(SCAN_LAYERS, 128)],
        "gru": lambda: [r(SCAN_LAYERS, 256, 64), r(256, 64)] + [r(64, 64, scale=.2) for _ in range(6)],
        "moe_sgd": lambda: [r(24, 4), r(4, 24, 32), r(4, 32, 24), r(16, 24), r(16, 24)],
        "cond_sgd": lambda: [r(16, 32), r(32, 8), r(32, 16), r(32, 8), np.array(128, np.float32)],
        "switch3": lambda: [np.array(1, np.int32), r(32, 16), r(16, 64), r(64, 64), r(64, 64), r(64, 64),
                            r(64, 8)],
        "cond_scan": lambda: [r(128, 64), r(SCAN_LAYERS, 64, 64, scale=.1), np.array([1, 0, 1, 1, 0, 1], np.int32)],
        "fori_cond": lambda: [r(256, 128), r(SCAN_LAYERS, 128, 128, scale=.1), np.array(1, np.int32)],
        "scan_switch": lambda: [np.array(0, np.int32), r(256, 128), r(SCAN_LAYERS, 128, 128, scale=.1),
                                r(SCAN_LAYERS, 128)],
        "scan_cond_fori": lambda: [r(128, 64), r(SCAN_LAYERS, 64, 64, scale=.1),
                                   np.array([1, 0, 1, 1, 0, 1], np.int32)],
        "cond_sgd_wide": lambda: [r(128, 256, scale=.1), r(256, 64, scale=.1), r(256, 128), r(256, 64),
                                  np.array(128, np.float32)],
        "adam": lambda: [r(16, 32), r(32, 8), r(16, 32, scale=.01), r(32, 8, scale=.01),
                         np.abs(r(16, 32, scale=.01)), np.abs(r(32, 8, scale=.01)), r(32, 16), r(32, 8)],
    }[name]()


# name -> (function, hand plans: plan -> {parameter number: the dim it tiles})
PROGRAMS = {
    "embcls": (embcls, {"data-parallel": {0: 0, 3: 0}, "vocabulary": {1: 0}}),
    "adam": (adam, {"data-parallel": {6: 0, 7: 0}, "fsdp": {k: 0 for k in range(6)}}),
    "scan": (scan, {"data-parallel": {0: 0}}),
    "gpt": (gpt, {"data-parallel": {0: 0}, "megatron": {1: 1, 2: 0, 3: 1, 4: 0}}),
    "mlp3": (mlp3, {"data-parallel": {0: 0}, "megatron": {1: 1, 2: 0, 3: 0}}),
    "conv": (conv, {"data-parallel": {0: 0}}),
    "moe": (moe, {"data-parallel": {0: 0}, "expert": {2: 0, 3: 0}}),
    "moe_sgd": (moe_sgd, {"data-parallel": {3: 0, 4: 0}, "expert": {1: 0, 2: 0}}),
    "cond_sgd": (cond_sgd, {"data-parallel": {2: 0, 3: 0}, "megatron": {0: 1, 1: 0}}),
    "switch3": (switch3, {"data-parallel": {1: 0}, "megatron": {2: 1, 3: 0, 4: 0, 5: 0}}),
    "cond_scan": (cond_scan, {"data-parallel": {0: 0}}),
    # Whiles inside conditionals' branches (auto/cond.c takes them in as auto/loop.c the entry's):
    # FSDP tiles the stacked weights on their input dim, Megatron on their output dim.
    "fori_cond": (fori_cond, {"data-parallel": {0: 0}, "fsdp": {0: 0, 1: 1}, "megatron": {1: 2}}),
    "scan_switch": (scan_switch, {"data-parallel": {1: 0}, "fsdp": {1: 0, 2: 1, 3: 1}, "megatron": {2: 2, 3: 1}}),
    "scan_cond_fori": (scan_cond_fori, {"data-parallel": {0: 0}, "fsdp": {0: 0, 1: 1}, "megatron": {1: 2}}),
    "cond_sgd_wide": (cond_sgd, {"data-parallel": {2: 0, 3: 0}, "megatron": {0: 1, 1: 0}}),
    # lax.scan over stacked weights at real sizes (ws[6,128,128], x[256,128]): FSDP tiles each
    # stacked weight on its input dim (the layer sliced, then gathered), Megatron on its output dim.
    "scan_wide": (scan, {"data-parallel": {0: 0}, "fsdp": {0: 0, 1: 1, 2: 1}, "megatron": {1: 2, 2: 1}}),
    "scan_wide_sgd": (scan_sgd, {"data-parallel": {0: 0, 3: 0}, "fsdp": {0: 0, 3: 0, 1: 1, 2: 1},
                                 "megatron": {1: 2, 2: 1}}),
    "scan_ys": (scan_ys, {"data-parallel": {0: 0}, "fsdp": {0: 0, 1: 1, 2: 1}}),
    "gru": (gru, {"data-parallel": {0: 1, 1: 0}, "fsdp": {0: 1, 1: 0, **{k: 0 for k in range(2, 8)}}}),
}
# The meshes a program is planned on (DEVICES where not named): a 2x2 mesh's hand plans tile
# over its 4 devices as one axis.
MESHES = {name: DEVICES + ("2x2",) for name in ("scan_wide", "scan_wide_sgd", "scan_ys", "gru", "fori_cond",
                                                "scan_switch", "scan_cond_fori")}
# Planned under --limit memory of FSDP's peak x 1.1 too, where memory asks for FSDP: the plan
# fits, equals the reference and moves no more than 1.1x FSDP's bytes (on the 2x2 mesh too
# since gathering a layer over both axes is priced as the one all-gather the partitioner runs,
# auto/cost.c: before, as two, it tiled the batch and the weights' columns, 1.65x FSDP's
# bytes; the SGD steps since a weight gradient's partial sums may be reduce-scattered into its
# tiles, auto/strategy.c: before, up to 2.15x: docs/auto-shard.md, Loops).
# The loops in a conditional's branch too, since such a loop is charged at the shardings chosen
# for it (auto/loop_memory.c, auto_cond_charge_branch): charged whole in the conditional's part,
# fori_cond on 2, 4 and 8 and scan_switch on 4 and 8 were refused ("no sharding over the mesh
# fits": 278,532 bytes the least on 8 under fori_cond's 180,232); now FSDP's plan (its bytes).
UNDER_FSDP = {"scan_wide": DEVICES + ("2x2",), "scan_wide_sgd": DEVICES + ("2x2",),
              "fori_cond": DEVICES + ("2x2",), "scan_switch": DEVICES + ("2x2",)}
SAMPLE = ("embcls", "adam", "scan", "gpt", "switch3", "cond_scan", "scan_wide", "scan_wide_sgd", "scan_ys", "gru",
          "fori_cond", "scan_switch", "scan_cond_fori")

# Lines over the bar, with their reasons (docs/auto-shard.md, "Memory without a limit").
FASTER = ("replicated, it moves no bytes and is estimated %s the hand plan's step, which pays a "
          "collective's latency (20 us) on a step of microseconds")
COND = ("the conditional is in the graph (auto/cond.c), but at a collective's latency (20 us) against a step of "
        "microseconds the plan with every operand of the update replicated, 0 bytes (the updated weights leave "
        "sliced, no collective), is estimated %s the Megatron plan's step, over its peak")
KNOWN = {
    ("embcls", 2): FASTER % "1/3 of",
    ("embcls", 4): FASTER % "1/3 of",
    ("embcls", 8): FASTER % "1/3 of",
    ("adam", 2): FASTER % "1/4 of",
    ("adam", 4): FASTER % "1/6 of",
    ("adam", 8): FASTER % "1/7 of",
    ("scan", 4): FASTER % "1/3 of",
    ("scan", 8): FASTER % "1/3 of",
    # Training steps added for issue 33's held-whole follow-up (run with --all or --only): equal
    # to the reference and JAX on 2/4/8. The MoE's SGD step: the expert plan needs two
    # all-reduces (the combine's [16,24] and, in the backward, the gate gradient's sum over the
    # experts), and at a collective's latency (20 us) against a few microseconds of bytes, one
    # larger collective or none is estimated faster.
    ("moe_sgd", 2): ("replicated: 0 bytes against the expert plan's 1664, 1.83x its peak, estimated 0.061 ms "
                     "against the expert plan's 0.082"),
    ("moe_sgd", 4): ("the experts' hidden dim tiled (Megatron in every expert): one all-reduce of their "
                     "outputs [4,16,24] and a backward with none, 9216 bytes (3.69x) against the expert "
                     "plan's two all-reduces' 2496; estimated 0.049 ms against 0.064"),
    ("moe_sgd", 8): ("as on 4: one all-reduce, 10752 bytes (3.69x) against the expert plan's two, 2912, "
                     "its peak 0.98x; estimated 0.041 ms against 0.065"),
    ("cond_sgd", 2): COND % "0.43x",
    ("cond_sgd", 4): COND % "0.37x",
    ("cond_sgd", 8): COND % "0.34x",
}


def tessel(*args, check=True):
    p = subprocess.run([TESSEL] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        sys.exit("FAIL: tessel %s: exit %d\n%s" % (" ".join(map(str, args[:3])), p.returncode, p.stderr[-2000:]))
    return p


def annotate(text, tiles, n):
    """The module with entry parameter k tiled on dim tiles[k] over n devices."""
    head, entry = text.split("\nENTRY ", 1)
    out = []
    for line in entry.splitlines():
        m = re.match(r"\s*(\S+) = (\w+)\[([0-9,]*)\]\S* parameter\((\d+)\)", line)
        if m and int(m.group(4)) in tiles and "sharding=" not in line:
            tile = ["1"] * (m.group(3).count(",") + 1)
            tile[tiles[int(m.group(4))]] = str(n)
            line = line.rstrip() + ", sharding={devices=[%s]<=[%d]}" % (",".join(tile), n)
        out.append(line)
    return head + "\nENTRY " + "\n".join(out) + "\n"


def runs(text):
    """Per computation of the module, the times it runs in one step: the
    entry once, a while's body and condition SCAN_LAYERS times their
    caller's, any other callee (a conditional's branch, counted as if it
    ran, a reducer) as often as its caller."""
    calls, cur, entry = {}, None, None
    for line in text.splitlines():
        head = re.match(r"(ENTRY )?(\S+) \{$", line)
        if head:
            cur = head.group(2)
            calls[cur] = []
            entry = cur if head.group(1) else entry
            continue
        for kind, braced, name in re.findall(r"\b(body|condition|to_apply|calls|branch_computations|"
                                             r"true_computation|false_computation)=(?:\{([^}]*)\}|([\w.\-]+))", line):
            names = braced or name
            calls[cur] += [(n.strip(), kind in ("body", "condition")) for n in names.split(",")]
    times, todo = {entry: 1}, [entry]
    while todo:
        c = todo.pop()
        for callee, loop in calls.get(c, []):
            if callee not in times:
                times[callee] = times[c] * (SCAN_LAYERS if loop else 1)
                todo.append(callee)
    return entry, times


def counts(plan_json, times):
    """Collective bytes per device in one step (a loop body's once an
    iteration: runs(); a computation it does not name, SCAN_LAYERS times)
    and the peak memory per device."""
    entry, times = times
    j = json.loads(plan_json)
    b = m = 0
    for c in j["clusters"]:
        for x in c["collectives"]:
            comp = (x.get("site") or {}).get("computation", entry)
            b += x["bytes_per_device"] * times.get(comp, SCAN_LAYERS)
        m = max(m, c["memory"]["peak_bytes_per_device"])
    return b, m


def within(b, m, best):
    return b <= 1.1 * best[1] and m <= 1.1 * best[2]


def check(name, root):
    fn, hand = PROGRAMS[name]
    inputs = inputs_of(name)
    d = root / name
    d.mkdir()
    text = jax.jit(fn).lower(*inputs).as_text(dialect="hlo")
    entry = runs(text)
    hlo = d / "bare.hlo"
    hlo.write_text(text)
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]
    args = write_inputs(d, inputs)
    tessel("run", hlo, "--reference", "--output-dir", d / "ref", *args)
    compare_all(read_outputs(d / "ref", len(want)), want)
    failed = 0
    for mesh in MESHES.get(name, DEVICES):
        n = int(np.prod([int(k) for k in str(mesh).split("x")]))
        best, plans = None, {}
        for hname, tiles in hand.items():
            hp = d / ("%s.%d.hlo" % (hname, n))
            hp.write_text(annotate(text, tiles, n))
            b, m = counts(tessel("plan", hp, "--num-partitions", n, "--format", "json").stdout, entry)
            plans[hname] = (hname, b, m)
            if best is None or (b, m) < best[1:]:
                best = (hname, b, m)
        ab, am = counts(tessel("plan", hlo, "--auto-shard", "--mesh", mesh, "--format", "json").stdout, entry)
        out = d / ("auto.%s" % mesh)
        tessel("run", hlo, "--auto-shard", "--mesh", mesh, "--output-dir", out, *args)
        got = read_outputs(out, len(want))
        compare_all(got, read_outputs(d / "ref", len(want)))
        err = compare_all(got, want)
        ok = within(ab, am, best)
        verdict = "ok" if ok else "FAIL: over 1.1x the best hand plan"
        if (name, mesh) in KNOWN:
            verdict = "FAIL: listed as known but meets the bar" if ok else "known: " + KNOWN[(name, mesh)]
            ok = not ok
        print("%s on %s: auto %d bytes %d peak; best hand-written %s %d bytes %d peak; equal to the reference "
              "and to JAX (relative error %.3g): %s" % (name, mesh, ab, am, best[0], best[1], best[2], err, verdict))
        failed += not ok
        # Every while in the graph, wherever it is nested (a loop's body, a conditional's branch).
        held = re.findall(r"held whole: (\S+) = while ", tessel("plan", hlo, "--auto-shard", "--mesh", mesh,
                                                               "--explain").stdout)
        if held:
            print("FAIL %s on %s: --explain holds %s whole" % (name, mesh, ", ".join(held)))
            failed += 1
        if (name, mesh) in KNOWN and ok:
            failed += check_limit(name, hlo, args, d, mesh, entry, best, len(want))
        if mesh in UNDER_FSDP.get(name, ()):
            failed += check_limit(name, hlo, args, d, mesh, entry, plans["fsdp"], len(want), bytes_bar=True)
    return failed


def check_limit(name, hlo, args, d, n, entry, best, nout, bytes_bar=False):
    """Under --limit memory of the hand plan `best`'s peak x 1.1: the plan
    fits and equals the reference; its bytes are printed (with bytes_bar,
    they must be no more than 1.1x the hand plan's too)."""
    lim = int(best[2] * 1.1)
    flags = ["--auto-shard", "--mesh", n, "--limit", "memory=%d" % lim]
    p = tessel("plan", hlo, *flags, "--format", "json", check=False)
    if p.returncode != 0:
        print("FAIL %s on %s under --limit memory=%d: refused: %s" % (name, n, lim, p.stderr.strip()[-300:]))
        return 1
    b, m = counts(p.stdout, entry)
    out = d / ("limit.%s" % n)
    tessel("run", hlo, *flags, "--output-dir", out, *args)
    compare_all(read_outputs(out, nout), read_outputs(d / "ref", nout))
    bad = m > lim or (bytes_bar and b > 1.1 * best[1])
    print("  %s on %s under --limit memory=%d (%s's peak x 1.1): %d bytes (%s) %d peak, equal to the reference: %s" %
          (name, n, lim, best[0], b, "%.3gx" % (b / best[1]) if best[1] else "hand 0", m,
           "FAIL: over the limit or 1.1x its bytes" if bad else "ok"))
    return bad


def main():
    names = list(PROGRAMS) if "--all" in sys.argv else list(SAMPLE)
    if "--only" in sys.argv:
        names = sys.argv[sys.argv.index("--only") + 1].split(",")
    failed = 0
    with tempfile.TemporaryDirectory() as t:
        for name in names:
            failed += check(name, pathlib.Path(t))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
