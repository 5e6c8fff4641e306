#!/usr/bin/python3
"""same_outputs.py REF DIR WHAT [REF DIR WHAT ...]: the oracle's comparison
(DESIGN.md), with NumPy: every REF/*.npy has its twin in DIR (and DIR no
other), within 1e-4 of the reference's largest magnitude for f32 and c64,
1e-5 for f64 and c128, 2e-3 for f16; integers and pred equal; NaN and the
infinities where the reference has them. Several triples in one process
(NumPy's import is most of a call's time): exits with the first mismatch's
message. tests/e2e/lib.bash's same_outputs runs it for one triple.
"""
import glob
import os
import sys

import numpy as np


def same(ref, got, what):
    names = sorted(os.path.basename(f) for f in glob.glob(os.path.join(ref, "*.npy")))
    if not names:
        return "%s: the reference wrote no output" % what
    if sorted(os.path.basename(f) for f in glob.glob(os.path.join(got, "*.npy"))) != names:
        return "%s: other outputs than the reference's" % what
    for n in names:
        g = os.path.join(got, n)
        if not os.path.exists(g):
            return "%s: no %s" % (what, n)
        a, b = np.load(os.path.join(ref, n)), np.load(g)
        if a.dtype != b.dtype or a.shape != b.shape:
            return "%s: %s is %s%s, the reference %s%s" % (what, n, b.dtype, b.shape, a.dtype, a.shape)
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                return "%s: %s: integers differ" % (what, n)
            continue
        tol = {8: 1e-5, 16: 1e-5, 2: 2e-3}.get(a.dtype.itemsize, 1e-4) if a.dtype.kind == "f" else \
            (1e-5 if a.dtype.itemsize == 16 else 1e-4)
        fin = np.isfinite(a)
        scale = float(np.max(np.abs(a[fin]))) if fin.any() else 0.0
        inf = ~fin & ~np.isnan(a)
        if not np.array_equal(np.isnan(a), np.isnan(b)) or not np.array_equal(a[inf], b[inf]):
            return "%s: %s: NaN or infinities differ" % (what, n)
        if fin.any() and float(np.max(np.abs(a[fin] - b[fin]))) > tol * scale:
            return "%s: %s: off by %g (tolerance %g)" % (what, n, float(np.max(np.abs(a[fin] - b[fin]))),
                                                      tol * scale)
    return None


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3:
        sys.exit("usage: same_outputs.py REF DIR WHAT [REF DIR WHAT ...]")
    for i in range(0, len(args), 3):
        why = same(*args[i:i + 3])
        if why:
            sys.exit(why)


if __name__ == "__main__":
    main()
