"""peers_torch.py: the PyTorch side of `bench/run peers` (issue 34), run
with Debian's /usr/bin/python3 and python3-torch, one of 2 processes:

    peers_torch.py NAME DIR --steps S --rank R --port P [--out OUT]

torch.distributed with the gloo backend over TCP on 127.0.0.1:P, one thread
a rank (torch.set_num_threads(1)). The workloads of bench/peers_models.py,
written as a PyTorch user writes them: data parallel with
DistributedDataParallel (block-dp, convnet), tensor parallel as Megatron
does by hand (mlp, mlp-sgd, block-*: the column-parallel weights' input
goes through an operator that all-reduces its gradient, the row-parallel
output through one that all-reduces its value), the experts exchanged with
all_to_all_single (moe). The inputs are DIR/in_K.npy (peers_jax.py gen),
each rank taking its shard. S steps; prints `steps: first A ms, then median
B ms` (this rank's step times, each from a barrier). Rank 0 writes the
FIRST step's outputs, gathered, in JAX's layouts, to OUT/output_I.npy (a
training step's later steps start from updated weights).
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RANK = 0
WORLD = 2
MLP_LR, ADAM_LR, CONV_LR = 1e-3, 1e-3, 0.05  # as bench/peers_models.py


def shard(a, axis):
    return np.ascontiguousarray(np.split(a, WORLD, axis=axis)[RANK])


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def param(a):
    return torch.nn.Parameter(t(a))


def gather(x, axis):
    """The full tensor from every rank's shard along axis."""
    parts = [torch.empty_like(x) for _ in range(WORLD)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=axis)


class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class AllReduceSum(torch.autograd.Function):
    """A sum over the ranks whose gradient is the sum over the ranks (batch
    statistics of the global batch: sync batch norm). On its own group, so
    that it never interleaves with DDP's bucket all-reduces."""
    group = None

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x, group=AllReduceSum.group)
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=AllReduceSum.group)
        return g


# ---------------------------------------------------------------- MLP

def mlp_setup(inp, train):
    x, w1, w2 = inp
    x = t(x)
    w1s, w2s = param(shard(w1, 1)), param(shard(w2, 0))
    if not train:
        def step():
            with torch.no_grad():
                y = torch.tanh(x @ w1s) @ w2s
                dist.all_reduce(y)
            return lambda: [y]
        return step
    opt = torch.optim.SGD([w1s, w2s], lr=MLP_LR)

    def step():
        opt.zero_grad(set_to_none=True)
        y = ReduceFromTP.apply(torch.tanh(x @ w1s) @ w2s)
        loss = (y * y).sum() / 2
        loss.backward()
        opt.step()
        return lambda: [gather(w1s.detach(), 1), gather(w2s.detach(), 0), loss.detach()]
    return step


# ---------------------------------------------------------------- block

def layer_norm(x, g, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-5) * g + b


# The axis of each block parameter split by tensor parallelism (None: kept
# whole): g1 b1 wq wk wv wo g2 b2 w1 w2.
TP_AXES = (None, None, 1, 1, 1, 0, None, None, 1, 0)


class Block(torch.nn.Module):
    """The GPT-2 block of peers_models.block, JAX's layouts; tp: this rank
    holds its heads and MLP columns (TP_AXES) and the all-reduces are
    Megatron's."""

    def __init__(self, params, tp):
        super().__init__()
        self.tp = tp
        self.ps = torch.nn.ParameterList([param(p) for p in params])

    def forward(self, x):
        g1, b1, wq, wk, wv, wo, g2, b2, w1, w2 = self.ps
        copy = CopyToTP.apply if self.tp else (lambda v: v)
        reduce = ReduceFromTP.apply if self.tp else (lambda v: v)
        s_len, k_dim = x.shape[1], wq.shape[2]
        h = copy(layer_norm(x, g1, b1))
        q = torch.einsum("bsd,dhk->bhsk", h, wq)
        k = torch.einsum("bsd,dhk->bhsk", h, wk)
        v = torch.einsum("bsd,dhk->bhsk", h, wv)
        s = torch.einsum("bhqk,bhtk->bhqt", q, k) / float(np.sqrt(k_dim))
        causal = torch.ones(s_len, s_len, dtype=torch.bool).tril()
        s = torch.where(causal, s, torch.tensor(-1e9))
        p = torch.softmax(s, dim=-1)
        a = torch.einsum("bhqt,bhtk->bhqk", p, v)
        x = x + reduce(torch.einsum("bhqk,hkd->bqd", a, wo))
        h = copy(layer_norm(x, g2, b2))
        f = F.gelu(h @ w1, approximate="tanh")
        return x + reduce(f @ w2)


def block_infer_setup(inp):
    x, params = t(inp[0]), [shard(p, a) if a is not None else p for p, a in zip(inp[1:], TP_AXES)]
    blk = Block(params, True)

    def step():
        with torch.no_grad():
            # ReduceFromTP.apply under no_grad is a plain all-reduce.
            y = blk(x)
        return lambda: [y]
    return step


def block_adam_setup(inp, tp):
    params, ms, vs, t0, x, y = inp[:10], inp[10:20], inp[20:30], inp[30], inp[31], inp[32]
    if tp:
        cut = [(lambda a, ax=ax: shard(a, ax) if ax is not None else a) for ax in TP_AXES]
        params, ms, vs = ([c(a) for c, a in zip(cut, arrs)] for arrs in (params, ms, vs))
        x, y = t(x), t(y)
        model = Block(params, True)
        net = model
    else:
        x, y = t(shard(x, 0)), t(shard(y, 0))
        model = Block(params, False)
        net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.ps, lr=ADAM_LR, betas=(0.9, 0.999), eps=1e-8)
    for p, m, v in zip(model.ps, ms, vs):
        opt.state[p] = {"step": torch.tensor(float(t0)), "exp_avg": t(m).clone(), "exp_avg_sq": t(v).clone()}

    def full(a, ax):
        return gather(a, ax) if tp and ax is not None else a

    def step():
        opt.zero_grad(set_to_none=True)
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()

        def outputs():
            ls = loss.detach().clone()
            if not tp:
                dist.all_reduce(ls)
                ls /= WORLD
            ps = [full(p.detach(), ax) for p, ax in zip(model.ps, TP_AXES)]
            m = [full(opt.state[p]["exp_avg"], ax) for p, ax in zip(model.ps, TP_AXES)]
            v = [full(opt.state[p]["exp_avg_sq"], ax) for p, ax in zip(model.ps, TP_AXES)]
            return ps + m + v + [opt.state[model.ps[0]]["step"].clone(), ls]
        return outputs
    return step


# ---------------------------------------------------------------- conv net

class ConvNet(torch.nn.Module):
    """peers_models.convnet_logits in NCHW (the kernels OIHW), batch norm
    with the global batch's statistics."""

    def __init__(self, k1, gamma, beta, k2, wd, n_global):
        super().__init__()
        self.k1 = param(k1.transpose(3, 2, 0, 1))
        self.gamma, self.beta = param(gamma), param(beta)
        self.k2 = param(k2.transpose(3, 2, 0, 1))
        self.wd = param(wd)
        self.n_global = n_global

    def forward(self, x):
        h = F.conv2d(x, self.k1, padding=1)
        cnt = float(self.n_global * h.shape[2] * h.shape[3])
        mu = AllReduceSum.apply(h.sum((0, 2, 3))) / cnt
        c = h - mu[None, :, None, None]
        var = AllReduceSum.apply((c * c).sum((0, 2, 3))) / cnt
        h = c * torch.rsqrt(var + 1e-5)[None, :, None, None] * self.gamma[None, :, None, None] \
            + self.beta[None, :, None, None]
        h = F.relu(h)
        h = F.relu(F.conv2d(h, self.k2, stride=2, padding=1))
        return h.mean((2, 3)) @ self.wd


def convnet_setup(inp):
    k1, gamma, beta, k2, wd, x, labels = inp
    AllReduceSum.group = dist.new_group(list(range(WORLD)))
    model = ConvNet(k1, gamma, beta, k2, wd, x.shape[0])
    net = torch.nn.parallel.DistributedDataParallel(model)
    x = t(shard(x, 0).transpose(0, 3, 1, 2))
    labels = t(shard(labels, 0)).long()
    opt = torch.optim.SGD(model.parameters(), lr=CONV_LR)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), labels)
        loss.backward()
        opt.step()

        def outputs():
            ls = loss.detach().clone()
            dist.all_reduce(ls)
            return [model.k1.detach().permute(2, 3, 1, 0), model.gamma.detach(), model.beta.detach(),
                    model.k2.detach().permute(2, 3, 1, 0), model.wd.detach(), ls / WORLD]
        return outputs
    return step


# ---------------------------------------------------------------- MoE

def moe_setup(inp):
    x, wr, w1, w2 = inp
    x, wr, w1, w2 = t(shard(x, 0)), t(wr), t(shard(w1, 0)), t(shard(w2, 0))
    e = wr.shape[1]
    el = e // WORLD

    def step():
        with torch.no_grad():
            tl, d = x.shape
            logits = x @ wr
            gate = torch.softmax(logits, dim=-1)
            mask = F.one_hot(logits.argmax(-1), e).to(x.dtype) * gate
            disp = torch.einsum("te,td->etd", mask, x).contiguous()          # [E, t, D]
            recv = torch.empty_like(disp)
            dist.all_to_all_single(recv, disp)                               # [W, E/W, t, D]
            recv = recv.reshape(WORLD, el, tl, d).permute(1, 0, 2, 3).reshape(el, WORLD * tl, d)
            h = torch.relu(torch.einsum("etd,edh->eth", recv, w1))
            out = torch.einsum("eth,ehd->etd", h, w2)                        # [E/W, W*t, D]
            send = out.reshape(el, WORLD, tl, d).permute(1, 0, 2, 3).contiguous()
            back = torch.empty_like(send)
            dist.all_to_all_single(back, send)                               # [W, E/W, t, D]
            y = back.reshape(e, tl, d).sum(0)
        return lambda: [gather(y, 0)]
    return step


SETUPS = {
    "mlp": lambda inp: mlp_setup(inp, False),
    "mlp-sgd": lambda inp: mlp_setup(inp, True),
    "block-infer": block_infer_setup,
    "block-tp": lambda inp: block_adam_setup(inp, True),
    "block-dp": lambda inp: block_adam_setup(inp, False),
    "convnet": convnet_setup,
    "moe": moe_setup,
}


def main(argv):
    global RANK

    def opt(name, default=None):
        return argv[argv.index(name) + 1] if name in argv else default

    if len(argv) < 3 or argv[1] not in SETUPS:
        sys.stderr.write(__doc__)
        return 2
    name, d = argv[1], argv[2]
    steps, RANK, port, outdir = int(opt("--steps", "5")), int(opt("--rank")), int(opt("--port")), opt("--out")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=RANK, world_size=WORLD)
    inp = []
    while os.path.exists(os.path.join(d, "in_%d.npy" % len(inp))):
        inp.append(np.load(os.path.join(d, "in_%d.npy" % len(inp))))
    step = SETUPS[name](inp)
    times, first = [], None
    for s in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        outs = step()
        times.append((time.perf_counter() - t0) * 1e3)
        if s == 0:
            first = [o.detach().numpy().copy() for o in outs()]
    warm = sorted(times[1:]) or times
    n = len(warm)
    med = warm[n // 2] if n % 2 else (warm[n // 2 - 1] + warm[n // 2]) / 2
    print("steps: first %.3f ms, then median %.3f ms" % (times[0], med), flush=True)
    if outdir and RANK == 0:
        os.makedirs(outdir, exist_ok=True)
        for i, o in enumerate(first):
            np.save(os.path.join(outdir, "output_%d.npy" % i), np.asarray(o, dtype=np.float32))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
