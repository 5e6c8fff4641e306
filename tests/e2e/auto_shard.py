#!/usr/bin/env python3
"""auto_shard.py: the quality bar of --auto-shard, on counted bytes.

For a training step (forward, loss, gradients, SGD update: `tessel grad
--sgd`) of an MLP, a transformer block, a conv net, a mixture-of-experts
layer, and of a language model JAX lowered (tests/e2e/auto_lm: an
embedding gather over a vocabulary table, two MLP layers, an output
projection, softmax cross entropy; untied, its step as JAX writes it with
value_and_grad, and tied, `tessel grad --sgd` of JAX's loss), on 2, 4 and
8 devices: the plan --auto-shard chooses moves no more
collective bytes per device, and needs no more peak memory per device,
than 1.1x the best hand-written plan (data parallel, Megatron tensor
parallel, FSDP: each compiled here from the same step with its parameters
annotated; for the language model also Megatron's vocabulary-parallel
embedding and output projection). Best: the hand-written plan with the fewest bytes, then the
least memory. Bytes and memory are the plan's own counts (tessel plan
--format json), not times. Every auto-sharded plan runs and equals the
reference run (the oracle's f32 tolerance, 1e-4 of the largest magnitude).

usage: auto_shard.py TESSEL WORKDIR [--devices 2,4,8] [--models mlp,...]
Prints one line per model and device count; exits 1 on a failure.
"""
import json
import os
import subprocess
import sys

import numpy as np

# Set by main() (bench/auto_shard.py imports the models and annotate()).
TESSEL = WORK = None
DEVICES = [2, 4, 8]
ONLY = None

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
"""


def loss(y, shape):
    """Lines computing the scalar loss sum(y*y) of y (rank len(shape))."""
    dims = ",".join(str(d) for d in shape)
    alld = ",".join(str(i) for i in range(len(shape)))
    return f"""  sq = f32[{dims}] multiply({y}, {y})
  z = f32[] constant(0)
  ROOT l = f32[] reduce(sq, z), dimensions={{{alld}}}, to_apply=add
"""


def mlp():
    B, D, H = 64, 128, 512
    text = f"""HloModule mlp
{ADD}
ENTRY main {{
  x = f32[{B},{D}] parameter(0)
  w1 = f32[{D},{H}] parameter(1)
  w2 = f32[{H},{D}] parameter(2)
  h = f32[{B},{H}] dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  zr = f32[] constant(0)
  zb = f32[{B},{H}] broadcast(zr), dimensions={{}}
  r = f32[{B},{H}] maximum(h, zb)
  y = f32[{B},{D}] dot(r, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{loss("y", [B, D])}}}
"""
    hand = {
        "data-parallel": {"x": [0]},
        "megatron": {"w1": [1], "w2": [0]},
        "fsdp": {"x": [0], "w1": [0], "w2": [0]},
    }
    return text, "w1,w2", hand


def transformer():
    B, S, E, NH, F = 8, 32, 64, 8, 256
    DH = E // NH
    text = f"""HloModule block
{ADD}
ENTRY main {{
  x = f32[{B},{S},{E}] parameter(0)
  wq = f32[{E},{E}] parameter(1)
  wk = f32[{E},{E}] parameter(2)
  wv = f32[{E},{E}] parameter(3)
  wo = f32[{E},{E}] parameter(4)
  w1 = f32[{E},{F}] parameter(5)
  w2 = f32[{F},{E}] parameter(6)
  q0 = f32[{B},{S},{E}] dot(x, wq), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  k0 = f32[{B},{S},{E}] dot(x, wk), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  v0 = f32[{B},{S},{E}] dot(x, wv), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  q1 = f32[{B},{S},{NH},{DH}] reshape(q0)
  k1 = f32[{B},{S},{NH},{DH}] reshape(k0)
  v1 = f32[{B},{S},{NH},{DH}] reshape(v0)
  s = f32[{B},{NH},{S},{S}] dot(q1, k1), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, rhs_batch_dims={{0,2}}, rhs_contracting_dims={{3}}
  ninf = f32[] constant(-inf)
  m = f32[{B},{NH},{S}] reduce(s, ninf), dimensions={{3}}, to_apply=max
  mb = f32[{B},{NH},{S},{S}] broadcast(m), dimensions={{0,1,2}}
  sm = f32[{B},{NH},{S},{S}] subtract(s, mb)
  e = f32[{B},{NH},{S},{S}] exponential(sm)
  z0 = f32[] constant(0)
  den = f32[{B},{NH},{S}] reduce(e, z0), dimensions={{3}}, to_apply=add
  db = f32[{B},{NH},{S},{S}] broadcast(den), dimensions={{0,1,2}}
  p = f32[{B},{NH},{S},{S}] divide(e, db)
  c = f32[{B},{NH},{S},{DH}] dot(p, v1), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}}, rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}
  ct = f32[{B},{S},{NH},{DH}] transpose(c), dimensions={{0,2,1,3}}
  cr = f32[{B},{S},{E}] reshape(ct)
  o0 = f32[{B},{S},{E}] dot(cr, wo), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  o = f32[{B},{S},{E}] add(o0, x)
  h = f32[{B},{S},{F}] dot(o, w1), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  zb = f32[{B},{S},{F}] broadcast(z0), dimensions={{}}
  r = f32[{B},{S},{F}] maximum(h, zb)
  y0 = f32[{B},{S},{E}] dot(r, w2), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  y = f32[{B},{S},{E}] add(y0, o)
{loss("y", [B, S, E])}}}
"""
    hand = {
        "data-parallel": {"x": [0]},
        "megatron": {"wq": [1], "wk": [1], "wv": [1], "wo": [0], "w1": [1], "w2": [0]},
        "fsdp": {"x": [0], "wq": [0], "wk": [0], "wv": [0], "wo": [0], "w1": [0], "w2": [0]},
    }
    return text, "wq,wk,wv,wo,w1,w2", hand


def convnet():
    B, H, C, F, K = 16, 8, 8, 16, 16
    text = f"""HloModule convnet
{ADD}
ENTRY main {{
  x = f32[{B},{H},{H},{C}] parameter(0)
  k1 = f32[3,3,{C},{F}] parameter(1)
  k2 = f32[3,3,{F},{F}] parameter(2)
  wd = f32[{F},{K}] parameter(3)
  c1 = f32[{B},{H},{H},{F}] convolution(x, k1), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  z0 = f32[] constant(0)
  zb = f32[{B},{H},{H},{F}] broadcast(z0), dimensions={{}}
  r1 = f32[{B},{H},{H},{F}] maximum(c1, zb)
  c2 = f32[{B},{H},{H},{F}] convolution(r1, k2), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  r2 = f32[{B},{H},{H},{F}] maximum(c2, zb)
  pool = f32[{B},{F}] reduce(r2, z0), dimensions={{1,2}}, to_apply=add
  y = f32[{B},{K}] dot(pool, wd), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{loss("y", [B, K])}}}
"""
    hand = {
        "data-parallel": {"x": [0]},
        "megatron": {"k1": [3], "k2": [2]},
        "fsdp": {"x": [0], "k1": [3], "k2": [3], "wd": [0]},
    }
    return text, "k1,k2,wd", hand


def moe():
    T, M, X, C, F = 64, 64, 8, 16, 128
    text = f"""HloModule moe
{ADD}
ENTRY main {{
  x = f32[{T},{M}] parameter(0)
  d = f32[{T},{X},{C}] parameter(1)
  w1 = f32[{X},{M},{F}] parameter(2)
  w2 = f32[{X},{F},{M}] parameter(3)
  ein = f32[{X},{C},{M}] dot(d, x), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  h = f32[{X},{C},{F}] dot(ein, w1), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  z0 = f32[] constant(0)
  zb = f32[{X},{C},{F}] broadcast(z0), dimensions={{}}
  r = f32[{X},{C},{F}] maximum(h, zb)
  o = f32[{X},{C},{M}] dot(r, w2), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  y = f32[{T},{M}] dot(d, o), lhs_contracting_dims={{1,2}}, rhs_contracting_dims={{0,1}}
{loss("y", [T, M])}}}
"""
    hand = {
        "data-parallel": {"x": [0], "d": [0]},
        "megatron": {"w1": [2], "w2": [1]},
        "expert-parallel": {"d": [1], "w1": [0], "w2": [0]},
        "fsdp": {"x": [0], "d": [0], "w1": [0], "w2": [0]},
    }
    return text, "w1,w2", hand


LM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "auto_lm")


def lm_hand(params, tied):
    """The hand plans of the language model (parameter names params)."""
    table, layers, out, tokens, labels = params[0], params[1:5], params[5:-2], params[-2], params[-1]
    megatron = {table: [0], layers[0]: [1], layers[1]: [0], layers[2]: [1], layers[3]: [0]}
    if not tied:
        megatron[out[0]] = [1]
    return {
        "data-parallel": {tokens: [0], labels: [0]},
        "megatron": megatron,
        "fsdp": dict({p: [0] for p in params[:-2]}, **{tokens: [0], labels: [0]}),
    }


def lm():
    """The untied language model's SGD step as JAX lowers it (no grad here)."""
    text = open(os.path.join(LM_DIR, "lm_step.hlo")).read()
    params = [f"args_{i}_.1" for i in range(8)]
    return text, None, lm_hand(params, False)


def lm_tied():
    """The tied language model's loss as JAX lowers it (tessel grad writes the step)."""
    text = open(os.path.join(LM_DIR, "lm_tied_fwd.hlo")).read()
    params = [f"params_{i}_.1" for i in range(5)] + ["tokens.1", "labels.1"]
    return text, ",".join(params[:5]), lm_hand(params, True)


# Lines over the bar, each with its reason (docs/auto-shard.md, "Quality"); their oracle still holds.
KNOWN = {}

MODELS = {"mlp": mlp, "transformer": transformer, "convnet": convnet, "moe": moe, "lm": lm,
          "lm_tied": lm_tied}


def run(*args, check=True):
    p = subprocess.run([TESSEL, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"auto_shard: tessel {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def annotate(step, shardings, n):
    """The step with each named parameter tiled on its dim over n devices."""
    out = []
    for line in step.splitlines():
        s = line.strip()
        name = s.split(" = ")[0].lstrip("%") if " = " in s else None
        if name in shardings and " parameter(" in s and "sharding=" not in s:
            rank = s.split("[", 1)[1].split("]", 1)[0].count(",") + 1
            tile = ["1"] * rank
            tile[shardings[name][0]] = str(n)
            line = line.rstrip() + ", sharding={devices=[%s]<=[%d]}" % (",".join(tile), n)
        out.append(line)
    return "\n".join(out) + "\n"


def counts(plan_json):
    j = json.loads(plan_json)
    b = m = 0
    for c in j["clusters"]:
        b += sum(x["bytes_per_device"] for x in c["collectives"])
        m = max(m, c["memory"]["peak_bytes_per_device"])
    return b, m


def same(a_dir, b_dir):
    k = 0
    while os.path.exists(os.path.join(b_dir, f"output_{k}.npy")):
        a = np.load(os.path.join(a_dir, f"output_{k}.npy")).astype(np.float64)
        b = np.load(os.path.join(b_dir, f"output_{k}.npy")).astype(np.float64)
        scale = max(np.abs(b).max(), 1e-30)
        if a.shape != b.shape or np.abs(a - b).max() > 1e-4 * scale:
            return f"output {k} differs by {np.abs(a - b).max()} (scale {scale})"
        k += 1
    return None if k else "no outputs"


def main():
    global TESSEL, WORK, DEVICES, ONLY
    TESSEL, WORK = sys.argv[1], sys.argv[2]
    for i, a in enumerate(sys.argv):
        if a == "--devices":
            DEVICES = [int(x) for x in sys.argv[i + 1].split(",")]
        if a == "--models":
            ONLY = sys.argv[i + 1].split(",")
    failed = 0
    os.makedirs(WORK, exist_ok=True)
    for name, make in MODELS.items():
        if ONLY and name not in ONLY:
            continue
        text, wrt, hand = make()
        fwd = os.path.join(WORK, name + ".hlo")
        open(fwd, "w").write(text)
        step_path = os.path.join(WORK, name + ".step.hlo")
        if wrt is None:
            step_path = fwd
        else:
            run("grad", fwd, "--wrt", wrt, "--sgd", "0.01", "-o", step_path)
        step = open(step_path).read()
        ref = os.path.join(WORK, name + ".ref")
        run("run", step_path, "--reference", "--random-inputs", "3", "--output-dir", ref)
        for n in DEVICES:
            best = None
            for hname, sh in hand.items():
                hp = os.path.join(WORK, f"{name}.{hname}.{n}.hlo")
                open(hp, "w").write(annotate(step, sh, n))
                b, m = counts(run("plan", hp, "--num-partitions", str(n), "--format", "json").stdout)
                if best is None or (b, m) < best[1:]:
                    best = (hname, b, m)
            ab, am = counts(run("plan", step_path, "--auto-shard", "--mesh", str(n), "--format", "json").stdout)
            out = os.path.join(WORK, f"{name}.auto.{n}")
            run("run", step_path, "--auto-shard", "--mesh", str(n), "--random-inputs", "3", "--output-dir", out)
            why = same(out, ref)
            ok = ab <= 1.1 * best[1] and am <= 1.1 * best[2] and why is None
            verdict = "ok" if ok else "FAIL"
            if (name, n) in KNOWN and why is None:
                # Listed: reported, not failed; a listed line that meets the bar fails (the
                # list must stay true).
                verdict = "FAIL (listed as known but meets the bar)" if ok else "known: " + KNOWN[(name, n)]
                ok = not ok
            print(f"auto_shard: {name} on {n}: auto {ab} bytes {am} peak; best hand-written {best[0]} "
                  f"{best[1]} bytes {best[2]} peak; oracle {'equal' if why is None else why}: {verdict}")
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
