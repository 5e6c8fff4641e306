#!/usr/bin/python3
"""gen.py: HLO modules for tessel's benchmarks (python3, stdlib only).

    gen.py transformer N OUT        a transformer-like module of about N
                                    instructions (whole layers), shardings
                                    on the weights, for 2 partitions
    gen.py mlp B D F OUT            one Megatron MLP step: x[B,D] replicated,
                                    W1[D,F] column-sharded, tanh, W2[F,D]
                                    row-sharded, replicated result
    gen.py train B D F OUT          the mlp with a loss, sum(y^2) / 2, as its
                                    root: `tessel grad --sgd` makes the
                                    training step of the `train` benchmark
    gen.py deep L B D OUT           a deep tanh MLP (L layers of D x D, x[B,D]
                                    split over 2 devices) with that loss: the
                                    step of the `train-remat` benchmark
    gen.py diamonds L B D OUT       a chain of L diamonds with that loss: each
                                    layer's input h[B,D] (split over 2 devices)
                                    read 4 ways, tanh(h * w_k) with w_k f32[D],
                                    and the 4 joined by adds: the memory fit's
                                    walks over many paths (tests/e2e/memfit.sh)
    gen.py allreduce N OUT          an explicit all-reduce over 2 partitions
                                    of a replicated f32[N]
    gen.py allgather N OUT          a per-device program (`tessel run --spmd`)
                                    of 2 partitions: all-gather of each
                                    device's f32[N] into f32[2N]
    gen.py reducescatter N OUT      the same: reduce-scatter (add) of f32[N]
                                    into f32[N/2]
    gen.py alltoall N OUT           the same: all-to-all of f32[N] along its
                                    only dimension
    gen.py memory N OUT             a sum over an f32[N] input sharded over
                                    2 partitions (the input is the memory)
    gen.py elementwise N OUT        8 elementwise ops over two f32[N]
    gen.py softmax N D OUT          softmax over the rows of an f32[N,D]:
                                    max, subtract, exp, sum, divide
    gen.py layernorm N D OUT        layer norm over the rows of an f32[N,D]
                                    with scale and bias f32[D] (eps 1e-5)
    gen.py mlp_layers L N F OUT     L Megatron MLP layers over N devices,
                                    hidden width F: W1 f32[64,F]
                                    {devices=[1,N]<=[N]}, tanh, W2 f32[F,64]
                                    {devices=[N,1]<=[N]}, the activations
                                    chained (5 instructions a layer)

The transformer layer (why these ops: it exercises propagation through
dots, reductions, broadcasts and elementwise chains the way a real model
does, and the partitioner inserts all-reduces where a dot contracts a
sharded dimension):

    layernorm   reduce, broadcast, multiply, subtract, multiply, reduce,
                broadcast, multiply, broadcast, add, rsqrt, multiply (12)
    attention   wq, wk, wv [D,D] column-sharded; q, k, v dots; scores dot
                contracting the sharded D; softmax (reduce max, broadcast,
                subtract, exp, reduce add, broadcast, divide); o dot; wo
                [D,D] row-sharded; output dot; residual add      (18)
    mlp         w1 [D,F] column-sharded, dot, tanh, w2 [F,D] row-sharded,
                dot, residual add                                 (6)

36 instructions a layer (with the eps broadcast and the scores dot);
the module has ceil((N - 12) / 36) layers plus
12 fixed instructions (the add and max computations, constants).
"""
import sys

B, D, F = 8, 64, 256  # tokens, hidden, ffn: small, compile time is per instruction


def transformer(n):
    layers = max(1, -(-(n - 12) // 36))
    out = ["HloModule transformer_%d, num_partitions=2" % n, ""]
    out += ["add {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
            "  ROOT s = f32[] add(a, b)", "}", ""]
    out += ["max {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
            "  ROOT m = f32[] maximum(a, b)", "}", ""]
    out += ["ENTRY main {"]
    e = out.append
    e("  x0 = f32[%d,%d] parameter(0), sharding={replicated}" % (B, D))
    e("  zero = f32[] constant(0)")
    e("  ninf = f32[] constant(-inf)")
    e("  c_invd = f32[] constant(%r)" % (1.0 / D))
    e("  invd = f32[%d,%d] broadcast(c_invd), dimensions={}" % (B, D))
    e("  c_eps = f32[] constant(1e-05)")
    p = 1
    x = "x0"
    bd, bb, bf = "f32[%d,%d]" % (B, D), "f32[%d,%d]" % (B, B), "f32[%d,%d]" % (B, F)
    col, row = "sharding={devices=[1,2]0,1}", "sharding={devices=[2,1]0,1}"
    dot = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    for i in range(layers):
        L = "l%d_" % i

        def param(name, shape, sh):
            nonlocal p
            e("  %s%s = %s parameter(%d), %s" % (L, name, shape, p, sh))
            p += 1
        e("  %ss = f32[%d] reduce(%s, zero), dimensions={1}, to_apply=add" % (L, B, x))
        e("  %ssb = %s broadcast(%ss), dimensions={0}" % (L, bd, L))
        e("  %smu = %s multiply(%ssb, invd)" % (L, bd, L))
        e("  %sxc = %s subtract(%s, %smu)" % (L, bd, x, L))
        e("  %ssq = %s multiply(%sxc, %sxc)" % (L, bd, L, L))
        e("  %svs = f32[%d] reduce(%ssq, zero), dimensions={1}, to_apply=add" % (L, B, L))
        e("  %svb = %s broadcast(%svs), dimensions={0}" % (L, bd, L))
        e("  %svar = %s multiply(%svb, invd)" % (L, bd, L))
        e("  %seps = %s broadcast(c_eps), dimensions={}" % (L, bd))
        e("  %sve = %s add(%svar, %seps)" % (L, bd, L, L))
        e("  %sr = %s rsqrt(%sve)" % (L, bd, L))
        e("  %sn = %s multiply(%sxc, %sr)" % (L, bd, L, L))
        for w in ("q", "k", "v"):
            param("w" + w, "f32[%d,%d]" % (D, D), col)
            e("  %s%s = %s dot(%sn, %sw%s), %s" % (L, w, bd, L, L, w, dot))
        e("  %ssc = %s dot(%sq, %sk), lhs_contracting_dims={1}, rhs_contracting_dims={1}"
          % (L, bb, L, L))
        e("  %sm = f32[%d] reduce(%ssc, ninf), dimensions={1}, to_apply=max" % (L, B, L))
        e("  %smb = %s broadcast(%sm), dimensions={0}" % (L, bb, L))
        e("  %sd = %s subtract(%ssc, %smb)" % (L, bb, L, L))
        e("  %se = %s exponential(%sd)" % (L, bb, L))
        e("  %sz = f32[%d] reduce(%se, zero), dimensions={1}, to_apply=add" % (L, B, L))
        e("  %szb = %s broadcast(%sz), dimensions={0}" % (L, bb, L))
        e("  %sp = %s divide(%se, %szb)" % (L, bb, L, L))
        e("  %so = %s dot(%sp, %sv), %s" % (L, bd, L, L, dot))
        param("wo", "f32[%d,%d]" % (D, D), row)
        e("  %sao = %s dot(%so, %swo), %s" % (L, bd, L, L, dot))
        e("  %sh = %s add(%s, %sao)" % (L, bd, x, L))
        param("w1", "f32[%d,%d]" % (D, F), col)
        e("  %sh1 = %s dot(%sh, %sw1), %s" % (L, bf, L, L, dot))
        e("  %sg = %s tanh(%sh1)" % (L, bf, L))
        param("w2", "f32[%d,%d]" % (F, D), row)
        e("  %sh2 = %s dot(%sg, %sw2), %s" % (L, bd, L, L, dot))
        last = i == layers - 1
        e("  %s%sy = %s add(%sh, %sh2)%s" % ("ROOT " if last else "", L, bd, L, L,
                                            ", sharding={replicated}" if last else ""))
        x = L + "y"
    e("}")
    return "\n".join(out) + "\n"


def mlp(b, d, f):
    return """HloModule mlp_bench, num_partitions=2

ENTRY main {
  x = f32[%(b)d,%(d)d] parameter(0), sharding={replicated}
  w1 = f32[%(d)d,%(f)d] parameter(1), sharding={devices=[1,2]0,1}
  w2 = f32[%(f)d,%(d)d] parameter(2), sharding={devices=[2,1]0,1}
  h = f32[%(b)d,%(f)d] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[%(b)d,%(f)d] tanh(h)
  ROOT y = f32[%(b)d,%(d)d] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
""" % {"b": b, "d": d, "f": f}


def train(b, d, f):
    return """HloModule train_bench, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[%(b)d,%(d)d] parameter(0), sharding={replicated}
  w1 = f32[%(d)d,%(f)d] parameter(1), sharding={devices=[1,2]0,1}
  w2 = f32[%(f)d,%(d)d] parameter(2), sharding={devices=[2,1]0,1}
  h = f32[%(b)d,%(f)d] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[%(b)d,%(f)d] tanh(h)
  y = f32[%(b)d,%(d)d] dot(a, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  sq = f32[%(b)d,%(d)d] multiply(y, y)
  z = f32[] constant(0)
  s = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add
  half = f32[] constant(0.5)
  ROOT l = f32[] multiply(s, half)
}
""" % {"b": b, "d": d, "f": f}


def deep(layers, b, d):
    """A deep tanh MLP with loss sum(y^2)/2, its batch x[b,d] split over 2
    devices and its square weights replicated: activations (layers x b x d)
    far outweigh the weights, so its SGD step is what rematerialization
    fits to half its peak (BENCHMARKS.md, train-remat)."""
    out = ["HloModule deep_bench, num_partitions=2", "", "add {", "  a = f32[] parameter(0)",
           "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}", "", "ENTRY main {",
           "  h0 = f32[%d,%d] parameter(0), sharding={devices=[2,1]0,1}" % (b, d)]
    for l in range(layers):
        out.append("  w%d = f32[%d,%d] parameter(%d), sharding={replicated}" % (l + 1, d, d, l + 1))
    for l in range(1, layers + 1):
        out.append("  d%d = f32[%d,%d] dot(h%d, w%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                   % (l, b, d, l - 1, l))
        out.append("  h%d = f32[%d,%d] tanh(d%d)" % (l, b, d, l))
    out += ["  sq = f32[%d,%d] multiply(h%d, h%d)" % (b, d, layers, layers), "  z = f32[] constant(0)",
            "  s = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add", "  half = f32[] constant(0.5)",
            "  ROOT l = f32[] multiply(s, half)", "}", ""]
    return "\n".join(out)


def diamonds(layers, b, d):
    """A chain of diamonds: h_{l+1} = (a0 + a1) + (a2 + a3), a_k = tanh(h_l *
    broadcast(w_lk)), loss sum(h_L^2)/2, the batch h0[b,d] split over 2
    devices, the weights w_lk f32[d] replicated. Every value is read four
    ways and joined again: the paths down k layers are 4^k."""
    out = ["HloModule diamonds, num_partitions=2", "", "add {", "  a = f32[] parameter(0)",
           "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}", "", "ENTRY main {",
           "  h0 = f32[%d,%d] parameter(0), sharding={devices=[2,1]0,1}" % (b, d)]
    bd = "f32[%d,%d]" % (b, d)
    for l in range(layers):
        for k in range(4):
            out.append("  w%d_%d = f32[%d] parameter(%d), sharding={replicated}" % (l, k, d, 1 + 4 * l + k))
    for l in range(layers):
        for k in range(4):
            out.append("  b%d_%d = %s broadcast(w%d_%d), dimensions={1}" % (l, k, bd, l, k))
            out.append("  m%d_%d = %s multiply(h%d, b%d_%d)" % (l, k, bd, l, l, k))
            out.append("  a%d_%d = %s tanh(m%d_%d)" % (l, k, bd, l, k))
        out.append("  s%d_0 = %s add(a%d_0, a%d_1)" % (l, bd, l, l))
        out.append("  s%d_1 = %s add(a%d_2, a%d_3)" % (l, bd, l, l))
        out.append("  h%d = %s add(s%d_0, s%d_1)" % (l + 1, bd, l, l))
    out += ["  sq = %s multiply(h%d, h%d)" % (bd, layers, layers), "  z = f32[] constant(0)",
            "  s = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add", "  half = f32[] constant(0.5)",
            "  ROOT l = f32[] multiply(s, half)", "}", ""]
    return "\n".join(out)


def mlp_layers(layers, n, f):
    bb, d = 8, 64
    out = ["HloModule mlp_layers, num_partitions=%d" % n, "", "ENTRY main {",
           "  x0 = f32[%d,%d] parameter(0), sharding={replicated}" % (bb, d)]
    for l in range(layers):
        out.append("  w1_%d = f32[%d,%d] parameter(%d), sharding={devices=[1,%d]<=[%d]}" % (l, d, f, 2 * l + 1, n, n))
        out.append("  w2_%d = f32[%d,%d] parameter(%d), sharding={devices=[%d,1]<=[%d]}" % (l, f, d, 2 * l + 2, n, n))
        out.append("  h%d = f32[%d,%d] dot(x%d, w1_%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                   % (l, bb, f, l, l))
        out.append("  a%d = f32[%d,%d] tanh(h%d)" % (l, bb, f, l))
        out.append("  %sx%d = f32[%d,%d] dot(a%d, w2_%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s"
                   % ("ROOT " if l == layers - 1 else "", l + 1, bb, d, l, l,
                      ", sharding={replicated}" if l == layers - 1 else ""))
    return "\n".join(out + ["}"]) + "\n"


def allreduce(n):
    return """HloModule allreduce_bench, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[%(n)d] parameter(0), sharding={replicated}
  ROOT r = f32[%(n)d] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add, sharding={replicated}
}
""" % {"n": n}


def spmd_collective(kind, n):
    """One explicit collective over 2 partitions, written per device (the
    entry's shapes are each device's): run with --spmd, and with
    --per-device so that each device draws its own operand."""
    ops = {
        "allgather": "f32[%d] all-gather(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, "
                     "use_global_device_ids=true" % (2 * n),
        "reducescatter": "f32[%d] reduce-scatter(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, "
                         "use_global_device_ids=true, to_apply=add" % (n // 2),
        "alltoall": "f32[%d] all-to-all(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}" % n,
    }
    return """HloModule %(kind)s_bench, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[%(n)d] parameter(0)
  ROOT r = %(op)s
}
""" % {"kind": kind, "n": n, "op": ops[kind]}


def memory(n):
    return """HloModule memory_bench, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[%(n)d] parameter(0), sharding={devices=[2]0,1}
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(x, zero), dimensions={0}, to_apply=add, sharding={replicated}
}
""" % {"n": n}


def elementwise(n):
    return """HloModule elementwise_bench

ENTRY main {
  x = f32[%(n)d] parameter(0)
  y = f32[%(n)d] parameter(1)
  t1 = f32[%(n)d] add(x, y)
  t2 = f32[%(n)d] multiply(t1, x)
  t3 = f32[%(n)d] subtract(t2, y)
  t4 = f32[%(n)d] maximum(t3, x)
  t5 = f32[%(n)d] multiply(t4, t4)
  t6 = f32[%(n)d] add(t5, y)
  t7 = f32[%(n)d] negate(t6)
  ROOT t8 = f32[%(n)d] abs(t7)
}
""" % {"n": n}


REDUCERS = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


def softmax(n, d):
    return """HloModule softmax_bench

%(red)s
ENTRY main {
  x = f32[%(n)d,%(d)d] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[%(n)d] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[%(n)d,%(d)d] broadcast(m), dimensions={0}
  xm = f32[%(n)d,%(d)d] subtract(x, mb)
  e = f32[%(n)d,%(d)d] exponential(xm)
  zero = f32[] constant(0)
  z = f32[%(n)d] reduce(e, zero), dimensions={1}, to_apply=add
  zb = f32[%(n)d,%(d)d] broadcast(z), dimensions={0}
  ROOT p = f32[%(n)d,%(d)d] divide(e, zb)
}
""" % {"n": n, "d": d, "red": REDUCERS}


def layernorm(n, d):
    return """HloModule layernorm_bench

%(red)s
ENTRY main {
  x = f32[%(n)d,%(d)d] parameter(0)
  gamma = f32[%(d)d] parameter(1)
  beta = f32[%(d)d] parameter(2)
  zero = f32[] constant(0)
  s = f32[%(n)d] reduce(x, zero), dimensions={1}, to_apply=add
  c_invd = f32[] constant(%(invd)r)
  invd = f32[%(n)d] broadcast(c_invd), dimensions={}
  mu = f32[%(n)d] multiply(s, invd)
  mub = f32[%(n)d,%(d)d] broadcast(mu), dimensions={0}
  xc = f32[%(n)d,%(d)d] subtract(x, mub)
  sq = f32[%(n)d,%(d)d] multiply(xc, xc)
  vs = f32[%(n)d] reduce(sq, zero), dimensions={1}, to_apply=add
  var = f32[%(n)d] multiply(vs, invd)
  c_eps = f32[] constant(1e-05)
  eps = f32[%(n)d] broadcast(c_eps), dimensions={}
  ve = f32[%(n)d] add(var, eps)
  rs = f32[%(n)d] rsqrt(ve)
  rb = f32[%(n)d,%(d)d] broadcast(rs), dimensions={0}
  xn = f32[%(n)d,%(d)d] multiply(xc, rb)
  gb = f32[%(n)d,%(d)d] broadcast(gamma), dimensions={1}
  xg = f32[%(n)d,%(d)d] multiply(xn, gb)
  bb = f32[%(n)d,%(d)d] broadcast(beta), dimensions={1}
  ROOT y = f32[%(n)d,%(d)d] add(xg, bb)
}
""" % {"n": n, "d": d, "invd": 1.0 / d, "red": REDUCERS}


def main(argv):
    kinds = {"transformer": (transformer, 1), "mlp": (mlp, 3), "train": (train, 3), "deep": (deep, 3), "diamonds": (diamonds, 3), "allreduce": (allreduce, 1),
             "memory": (memory, 1), "elementwise": (elementwise, 1), "mlp_layers": (mlp_layers, 3), "softmax": (softmax, 2),
             "layernorm": (layernorm, 2),
             "allgather": (lambda n: spmd_collective("allgather", n), 1),
             "reducescatter": (lambda n: spmd_collective("reducescatter", n), 1),
             "alltoall": (lambda n: spmd_collective("alltoall", n), 1)}
    if len(argv) < 3 or argv[1] not in kinds or len(argv) != kinds[argv[1]][1] + 3:
        sys.stderr.write(__doc__)
        return 2
    fn, nargs = kinds[argv[1]]
    text = fn(*[int(a) for a in argv[2:2 + nargs]])
    with open(argv[-1], "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
