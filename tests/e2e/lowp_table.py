#!/usr/bin/env python3
"""lowp_table.py TYPE DIR: write DIR/{dec,enc}.hlo and their inputs;
lowp_table.py --check TYPE DIR: compare tessel's outputs with the table.

Each type from its definition (OCP 8-bit FP and MX specs; XLA/ml_dtypes for
the fnuz, b11 and e8m0 kinds): exponent bits E, mantissa bits M, bias B,
which codes are NaN or inf, and what overflow becomes. Values are exact
Fractions; numpy is used only for the .npy files."""
import functools, math, sys
from fractions import Fraction as F
import numpy as np

# name: (E, M, bias, kind, overflow) ; kind: ieee | fn | fnuz | e8m0 | none
TYPES = {
    'f8e5m2': (5, 2, 15, 'ieee', 'inf'), 'f8e4m3': (4, 3, 7, 'ieee', 'inf'),
    'f8e3m4': (3, 4, 3, 'ieee', 'inf'), 'f8e4m3fn': (4, 3, 7, 'fn', 'nan'),
    'f8e4m3b11fnuz': (4, 3, 11, 'fnuz', 'nan'), 'f8e5m2fnuz': (5, 2, 16, 'fnuz', 'nan'),
    'f8e4m3fnuz': (4, 3, 8, 'fnuz', 'nan'), 'f8e8m0fnu': (8, 0, 127, 'e8m0', 'nan'),
    'f4e2m1fn': (2, 1, 1, 'none', 'max'),
}

def decode(t, c):
    """'nan', ('inf', sign) or a Fraction (with -0 as ('zero', 1))."""
    E, M, B, kind, _ = TYPES[t]
    if kind == 'e8m0':
        return 'nan' if c == 0xff else F(2) ** (c - 127)
    nb = E + M
    s, mag = (c >> nb) & 1, c & ((1 << nb) - 1)
    e, m = mag >> M, mag & ((1 << M) - 1)
    if kind == 'fnuz' and c == 0x80:
        return 'nan'
    if kind == 'fn' and mag == (1 << nb) - 1:
        return 'nan'
    if kind == 'ieee' and e == (1 << E) - 1:
        return ('inf', s) if m == 0 else 'nan'
    v = F(m, 1 << M) * F(2) ** (1 - B) if e == 0 else (1 + F(m, 1 << M)) * F(2) ** (e - B)
    if v == 0 and s:
        return ('zero', 1)
    return -v if s else v

def ncodes(t):
    return 16 if t == 'f4e2m1fn' else 256

def sign_bit(t):
    return 0x08 if t == 'f4e2m1fn' else 0x80

def negate(t, c):
    kind = TYPES[t][3]
    if kind == 'e8m0' or (kind == 'fnuz' and c & 0x7f == 0):
        return c
    return c ^ sign_bit(t)

@functools.lru_cache(maxsize=None)
def specials(t):
    """(inf code, NaN code, max code), positive."""
    E, M, B, kind, ovf = TYPES[t]
    pos = [c for c in range(ncodes(t)) if isinstance(decode(t, c), F) and decode(t, c) >= 0]
    mx = max(pos, key=lambda c: decode(t, c))
    nan = {'ieee': ((1 << (E + M)) - 1) ^ ((1 << (M - 1)) - 1) if M else 0, 'fn': 0x7f,
           'fnuz': 0x80, 'e8m0': 0xff, 'none': 0x08}[kind]  # ieee: quiet NaN, top mantissa bit
    inf = {'inf': ((1 << E) - 1) << M, 'nan': nan, 'max': mx}[ovf]
    return inf, nan, mx

@functools.lru_cache(maxsize=None)
def grid(t):
    """Sorted (value, code) of the non-negative finite codes. e8m0fnu: XLA
    (ml_dtypes) rounds below 2^-126 on the grid {0 -> 0x00, 2^-126}."""
    g = {}
    for c in range(ncodes(t)):
        v = decode(t, c)
        if isinstance(v, F) and v >= 0 and v not in g:
            g[v] = c
    if TYPES[t][3] == 'e8m0':
        del g[F(2) ** -127]
        g[F(0)] = 0x00
    return tuple(sorted(g.items()))

def ulp_above(t, v):
    E, M, B = TYPES[t][:3]
    e = math.floor(math.log2(v))
    return F(2) ** (e - M)

def encode(t, x):
    """Expected code of the double x. XLA's CPU runtime reads a subnormal
    double as zero (DAZ; tessel's device/fpmode.c does the same), which
    changes only e8m0fnu's code (NaN for zero, not 2^-127's 0x00)."""
    inf, nan, mx = specials(t)
    kind = TYPES[t][3]
    if 0 < abs(x) < 2.0 ** -1022:
        x = math.copysign(0.0, x)
    if math.isnan(x):
        return negate(t, nan) if math.copysign(1, x) < 0 else nan
    neg = math.copysign(1, x) < 0
    if math.isinf(x):
        return negate(t, inf) if neg else inf
    if kind == 'e8m0' and (x == 0 or neg):
        return nan
    a = abs(F(x))
    g = list(grid(t))
    top = g[-1][0]
    g = g + [(top + ulp_above(t, top), 'ovf')]
    lo = max((p for p in g if p[0] <= a), key=lambda p: p[0])
    hi = min((p for p in g if p[0] >= a), key=lambda p: p[0], default=g[-1])
    if a > g[-1][0]:
        pick = g[-1]
    elif lo[0] == a:
        pick = lo
    elif a - lo[0] != hi[0] - a:
        pick = lo if a - lo[0] < hi[0] - a else hi
    else:  # tie: the even significand at the spacing of the two neighbours
        sp = hi[0] - lo[0]
        pick = lo if (lo[0] / sp).numerator % 2 == 0 else hi
    c = pick[1]
    if c == 'ovf':
        c = inf
    return negate(t, c) if neg else c

def probes(t):
    g = [v for v, _ in grid(t)]
    top = g[-1]
    g.append(top + ulp_above(t, top))
    xs = [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan]
    for i, v in enumerate(g):
        xs += [float(v), -float(v)]
        if i + 1 < len(g):
            mid = float((v + g[i + 1]) / 2)
            for y in (mid, math.nextafter(mid, math.inf), math.nextafter(mid, -math.inf)):
                xs += [y, -y]
    xs += [float(top) * 4, 1e300, 5e-324]
    return xs

def write(t, d):
    import os
    os.makedirs(d, exist_ok=True)
    n = ncodes(t)
    if n == 16:  # f4 is 4 bits wide: bitcast from u4
        dec = (f"HloModule dec\nENTRY e {{\n  c = u8[16] parameter(0)\n  n = u4[16] convert(c)\n"
               f"  f = {t}[16] bitcast-convert(n)\n  ROOT r = f32[16] convert(f)\n}}\n")
    else:
        dec = (f"HloModule dec\nENTRY e {{\n  c = u8[256] parameter(0)\n"
               f"  f = {t}[256] bitcast-convert(c)\n  ROOT r = f32[256] convert(f)\n}}\n")
    np.save(f"{d}/dec_in.npy", np.arange(n, dtype=np.uint8))
    xs = probes(t)
    k = len(xs)
    if n == 16:
        enc = (f"HloModule enc\nENTRY e {{\n  x = f64[{k}] parameter(0)\n  f = {t}[{k}] convert(x)\n"
               f"  b = u4[{k}] bitcast-convert(f)\n  ROOT r = u8[{k}] convert(b)\n}}\n")
    else:
        enc = (f"HloModule enc\nENTRY e {{\n  x = f64[{k}] parameter(0)\n  f = {t}[{k}] convert(x)\n"
               f"  ROOT r = u8[{k}] bitcast-convert(f)\n}}\n")
    np.save(f"{d}/enc_in.npy", np.array(xs, dtype=np.float64))
    open(f"{d}/dec.hlo", "w").write(dec)
    open(f"{d}/enc.hlo", "w").write(enc)

def check(t, d):
    bad = 0
    got = np.load(f"{d}/dec_out/output_0.npy")
    for c in range(ncodes(t)):
        v, g = decode(t, c), float(got[c])
        if v == 'nan':
            ok = math.isnan(g)
        elif isinstance(v, tuple):
            ok = (g == -math.inf if v[1] else g == math.inf) if v[0] == 'inf' else (g == 0 and math.copysign(1, g) < 0)
        else:
            ok = F(g) == v and (v != 0 or math.copysign(1, g) > 0)
        if not ok:
            bad += 1
            print(f"{t}: decode 0x{c:02x}: got {g!r}, want {v}")
    xs = np.load(f"{d}/enc_in.npy")
    got = np.load(f"{d}/enc_out/output_0.npy")
    for x, g in zip(xs, got):
        w = encode(t, float(x))
        if int(g) != w:
            bad += 1
            if bad < 20:
                print(f"{t}: encode {float(x)!r}: got 0x{int(g):02x}, want 0x{w:02x}")
    print(f"{t}: {ncodes(t)} codes, {len(xs)} values, {bad} wrong")
    return bad == 0

if __name__ == '__main__':
    if sys.argv[1] == '--check':
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) else 1)
    write(sys.argv[1], sys.argv[2])
