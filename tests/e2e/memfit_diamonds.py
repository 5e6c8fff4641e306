#!/usr/bin/env python3
"""memfit_diamonds.py: inputs for, and an independent check of, the SGD
step of bench/gen.py's chain of diamonds (tests/e2e/memfit.sh).

    memfit_diamonds.py inputs DIR L B D     write h0 f32[B,D] and the 4L
                                            weights f32[D] as DIR/p<i>.npy
                                            (parameter i), seeded
    memfit_diamonds.py check IN OUT L LR    the step by hand in NumPy (f64)
                                            from IN's inputs against OUT's
                                            output_<i>.npy: the loss, then
                                            each weight updated, within the
                                            oracle's f32 tolerance (1e-4 of
                                            the output's largest magnitude)

The step, by hand: m_lk = h_l * w_lk (w_lk broadcast over the batch),
a_lk = tanh(m_lk), h_{l+1} = sum_k a_lk, loss = sum(h_L^2) / 2; backward
g_L = h_L, dm_lk = g_{l+1} (1 - a_lk^2), dw_lk = sum over the batch of
dm_lk h_l, g_l = sum_k dm_lk w_lk; w_lk' = w_lk - LR dw_lk.
"""
import os
import sys

import numpy as np


def load(d, i):
    return np.load(os.path.join(d, "p%d.npy" % i)).astype(np.float64)


def main(argv):
    if len(argv) == 6 and argv[1] == "inputs":
        d, layers, b, dim = argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        rng = np.random.default_rng(32)
        np.save(os.path.join(d, "p0.npy"), rng.uniform(-1, 1, (b, dim)).astype(np.float32))
        for i in range(4 * layers):
            np.save(os.path.join(d, "p%d.npy" % (i + 1)), rng.uniform(-1, 1, dim).astype(np.float32))
        return 0
    if len(argv) == 6 and argv[1] == "check":
        src, out, layers, lr = argv[2], argv[3], int(argv[4]), float(argv[5])
        h = [load(src, 0)]
        w = [[load(src, 1 + 4 * l + k) for k in range(4)] for l in range(layers)]
        a = []
        for l in range(layers):
            a.append([np.tanh(h[l] * w[l][k]) for k in range(4)])
            h.append(a[l][0] + a[l][1] + a[l][2] + a[l][3])
        want = [np.array(0.5 * np.sum(h[layers] ** 2))]
        g = h[layers]
        dw = [None] * layers
        for l in reversed(range(layers)):
            dm = [g * (1 - a[l][k] ** 2) for k in range(4)]
            dw[l] = [np.sum(dm[k] * h[l], axis=0) for k in range(4)]
            g = sum(dm[k] * w[l][k] for k in range(4))
        want += [w[l][k] - lr * dw[l][k] for l in range(layers) for k in range(4)]
        bad = 0
        for i, x in enumerate(want):
            got = np.load(os.path.join(out, "output_%d.npy" % i)).astype(np.float64)
            scale = max(np.max(np.abs(x)), 1e-30)
            err = np.max(np.abs(got - x)) / scale
            if got.shape != x.shape or not err <= 1e-4:
                print("output_%d: relative error %g (shape %s, expected %s)" % (i, err, got.shape, x.shape))
                bad += 1
        return 1 if bad else 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
