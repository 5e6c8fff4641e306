#!/usr/bin/env bash
# elementwise.sh: tests/models/elementwise_lowp.hlo, elementwise_complex.hlo
# and rng.hlo run by the reference executor, checked against answers worked
# out here: NumPy's complex64 and float32 functions, Python integers for the
# wrapping s4/u4/s2 arithmetic and mulhi, the f8/f4 rounding of
# tests/e2e/lowp_table.py (built from each type's definition), and a Python
# ThreeFry-2x32 / Philox-4x32 with XLA's layout of the words.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

M="$TESSEL_SRC/tests/models"
"$PY" - "$WORK" <<'PY'
import numpy as np, sys
w = sys.argv[1]
rng = np.random.default_rng(11)
x = rng.uniform(-3, 3, 16).astype(np.float32); x[:4] = [25, -30, 0.3, 7]
y = rng.uniform(0.5, 3, 16).astype(np.float32) * np.where(rng.random(16) < 0.5, -1, 1).astype(np.float32)
y[:4] = [20, 19, 0.7, 7]
i = rng.integers(-20, 20, 16).astype(np.int32); i[:6] = [2**31 - 1, -2**31, 123456789, -987654321, 7, -8]
j = rng.integers(-20, 20, 16).astype(np.int32); j[:6] = [2**31 - 1, 2**30 + 5, -55555, 77777777, 0, -1]
for n, a in (('x', x), ('y', y), ('i', i), ('j', j)):
    np.save(f'{w}/{n}.npy', a)
zr = rng.uniform(-2, 2, 8).astype(np.float32)
zi = (rng.uniform(0.1, 1.5, 8) * np.where(rng.random(8) < 0.5, -1, 1)).astype(np.float32)
wr = rng.uniform(-2, 2, 8).astype(np.float32); wi = rng.uniform(-1.5, 1.5, 8).astype(np.float32)
wr[0], wi[0] = zr[0], zi[0]
for n, a in (('zr', zr), ('zi', zi), ('wr', wr), ('wi', wi)):
    np.save(f'{w}/{n}.npy', a)
np.save(f'{w}/s2.npy', np.array([0x0123456789abcdef, 42], dtype=np.uint64))
np.save(f'{w}/s3.npy', np.array([0xfedcba9876543210, 2**64 - 2, 7], dtype=np.uint64))
PY
expect_status 0 "$TESSEL" run "$M/elementwise_lowp.hlo" --reference --output-dir "$WORK/lowp" \
    --input 0="$WORK/x.npy" --input 1="$WORK/y.npy" --input 2="$WORK/i.npy" --input 3="$WORK/j.npy"
expect_status 0 "$TESSEL" run "$M/elementwise_complex.hlo" --reference --output-dir "$WORK/cx" \
    --input 0="$WORK/zr.npy" --input 1="$WORK/zi.npy" --input 2="$WORK/wr.npy" --input 3="$WORK/wi.npy"
expect_status 0 "$TESSEL" run "$M/rng.hlo" --reference --output-dir "$WORK/rng" \
    --input 0="$WORK/s2.npy" --input 1="$WORK/s3.npy"

"$PY" - "$WORK" "$TESSEL_SRC/tests/e2e" <<'PY' || fail "results differ from NumPy / Python"
import numpy as np, sys
w, here = sys.argv[1], sys.argv[2]
sys.path.insert(0, here)
import lowp_table as L
np.seterr(all="ignore")
bad = []
def check(name, got, want, exact=True, tol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    if exact:
        ok = np.array_equal(got, want) if got.dtype.kind != 'f' else np.array_equal(got, want, equal_nan=True)
    else:
        with np.errstate(invalid='ignore'):
            close = np.abs(got - want) <= tol * np.maximum(1, np.abs(want))
        ok = np.all(close | (got == want) | (np.isnan(got) & np.isnan(want)))
    if not ok:
        bad.append(name); print(name, '\n got ', got, '\n want', want)

ld = lambda d, k: np.load(f'{w}/{d}/output_{k}.npy')
x, y, i, j = (np.load(f'{w}/{n}.npy') for n in 'xyij')

# ---- f8/f4: f32 arithmetic on the rounded operands, rounded back ----
def q(t, v):
    return np.array([L.decode(t, L.encode(t, float(e))) if not isinstance(L.decode(t, L.encode(t, float(e))), str)
                     else np.nan for e in np.atleast_1d(v)], dtype=object)
def f(t, v):
    out = []
    for e in np.atleast_1d(v):
        d = L.decode(t, L.encode(t, float(e)))
        out.append(np.nan if d == 'nan' else (float(d[1] and -np.inf or np.inf) if isinstance(d, tuple) and d[0] == 'inf'
                   else -0.0 if isinstance(d, tuple) else float(d)))
    return np.array(out, dtype=np.float32)
fl = ld('lowp', 0)
a8, b8 = f('f8e4m3fn', x), f('f8e4m3fn', y)
check('f8e4m3fn add', fl[0:16], f('f8e4m3fn', a8 + b8))
check('f8e4m3fn multiply', fl[16:32], f('f8e4m3fn', a8 * b8))
check('f8e4m3fn divide', fl[32:48], f('f8e4m3fn', a8 / b8))
a5, b5 = f('f8e5m2', x), f('f8e5m2', y)
check('f8e5m2 multiply', fl[48:64], f('f8e5m2', a5 * b5))
e = np.exp(a5)  # a 1-ulp f32 difference may move a value across an f8 midpoint: accept either side
lo_, hi_ = f('f8e5m2', e * np.float32(1 - 2e-7)), f('f8e5m2', e * np.float32(1 + 2e-7))
if not np.all((fl[64:80] == lo_) | (fl[64:80] == hi_)): bad.append('f8e5m2 exp'); print('exp', fl[64:80], lo_, hi_)
a4, b4 = f('f4e2m1fn', x), f('f4e2m1fn', y)
check('f4e2m1fn subtract', fl[80:96], f('f4e2m1fn', a4 - b4))
t = np.tanh(f('f8e4m3fnuz', x))
lo_, hi_ = f('f8e4m3fnuz', t * np.float32(1 - 2e-7)), f('f8e4m3fnuz', t * np.float32(1 + 2e-7))
if not np.all((fl[96:112] == lo_) | (fl[96:112] == hi_)): bad.append('fnuz tanh'); print('tanh', fl[96:112], lo_, hi_)

# ---- sub-byte integers, wrapping in their width ----
w4 = lambda v: ((v + 8) & 15) - 8
w2 = lambda v: ((v + 2) & 3) - 2
def div(a, b):
    if b == 0: return -1
    if a == -8 and b == -1: return -8
    r = abs(a) // abs(b)
    return r if (a < 0) == (b < 0) else -r
I, J = [int(v) for v in i], [int(v) for v in j]
A4, B4 = [w4(v) for v in I], [w4(v) for v in J]
U4a, U4b = [v & 15 for v in I], [v & 15 for v in J]
want = []
want += [w4(a + b) for a, b in zip(A4, B4)]
want += [w4(a * b) for a, b in zip(A4, B4)]
want += [w4(((a & 15) >> (b & 15)) if (b & 15) < 4 else 0) for a, b in zip(A4, B4)]
want += [w4(div(a, b)) for a, b in zip(A4, B4)]
want += [bin(a & 15).count('1') for a in A4]
want += [(a - b) & 15 for a, b in zip(U4a, U4b)]
want += [4 - a.bit_length() for a in U4a]
want += [(a * b) >> 4 for a, b in zip(U4a, U4b)]
want += [w2(w2(a) * w2(b)) for a, b in zip(I, J)]
check('s4/u4/s2', ld('lowp', 1), np.array(want, dtype=np.int32))

# ---- mulhi: the high half of the double-width product ----
s64 = lambda v: ((v + 2**63) % 2**64) - 2**63
s8 = lambda v: ((v + 128) & 255) - 128
K = [s64(a * b) for a, b in zip(I, J)]
want = [(a * b) >> 32 for a, b in zip(I, J)]
want += [((a & 0xffffffff) * (b & 0xffffffff)) >> 32 for a, b in zip(I, J)]
want += [s64((k * k) >> 64) for k in K]
want += [s64(((k % 2**64) ** 2) >> 64) for k in K]
want += [(s8(a) * s8(b)) >> 8 for a, b in zip(I, J)]
check('mulhi', ld('lowp', 2), np.array(want, dtype=np.int64))

# ---- real inverse trigonometric and hyperbolic functions ----
p = x / np.float32(3.5)  # correctly rounded both sides; acos, atanh are ill-conditioned near +-1
want = np.concatenate([np.arccos(p), np.arcsin(p), np.arctan(x), np.arctanh(p), np.cosh(x),
                       np.sinh(x), np.arcsinh(x), np.arccosh(np.abs(x) + np.float32(1))]).astype(np.float32)
check('acos..acosh', ld('lowp', 3), want, exact=False, tol=2e-6)

# ---- complex: NumPy's complex64 functions (C99 branch cuts) ----
zr, zi, wr, wi = (np.load(f'{w}/{n}.npy') for n in ('zr', 'zi', 'wr', 'wi'))
z, v = (zr + 1j * zi).astype(np.complex64), (wr + 1j * wi).astype(np.complex64)
ops = [z + v, z - v, z * v, z / v, np.power(z, v), -z, np.exp(z), np.log(z), np.sqrt(z), 1 / np.sqrt(z),
       np.tanh(z), np.sin(z), np.cos(z), np.tan(z), np.arccos(z), np.arccosh(z), np.arcsin(z),
       np.arcsinh(z), np.arctan(z), np.arctanh(z), np.cosh(z), np.sinh(z), np.log1p(z), np.expm1(z),
       z / np.abs(z)]
want = np.concatenate(ops).astype(np.complex64)
got = ld('cx', 0) + 1j * ld('cx', 1)
for k, name in enumerate('add sub mul div pow neg exp log sqrt rsqrt tanh sin cos tan acos acosh asin '
                         'asinh atan atanh cosh sinh log1p expm1 sign'.split()):
    check('c64 ' + name, got[8 * k:8 * k + 8], want[8 * k:8 * k + 8], exact=False, tol=1e-5)
check('c64 abs', ld('cx', 2), np.abs(z), exact=False, tol=1e-6)
check('c64 eq', ld('cx', 3), z == v)
check('c64 ne', ld('cx', 4), np.zeros(8, bool))

# ---- rng-bit-generator: ThreeFry / Philox as XLA lays them out ----
M32 = 0xffffffff
def rotl(v, r): return ((v << r) | (v >> (32 - r))) & M32
def threefry(c, k):
    ks = [k[0], k[1], 0x1BD11BDA ^ k[0] ^ k[1]]
    x0, x1 = (c[0] + ks[0]) & M32, (c[1] + ks[1]) & M32
    R = [13, 15, 26, 6, 17, 29, 16, 24]
    for g in range(5):
        for r in range(4):
            x0 = (x0 + x1) & M32; x1 = rotl(x1, R[(g % 2) * 4 + r]) ^ x0
        x0 = (x0 + ks[(g + 1) % 3]) & M32; x1 = (x1 + ks[(g + 2) % 3] + g + 1) & M32
    return x0, x1
def philox(c, k):
    c, k = list(c), list(k)
    for _ in range(10):
        p0, p1 = c[0] * 0xD2511F53, c[2] * 0xCD9E8D57
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
        k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
    return c
split = lambda v: (v & M32, v >> 32)
s2, s3 = [int(v) for v in np.load(f'{w}/s2.npy')], [int(v) for v in np.load(f'{w}/s3.npy')]
key, ctr = s2
# u32[3,5]: cut along dim 0 (no even dim; 5 is the largest -> dim 1), half [3,3,1]
out = np.zeros((3, 5), np.uint32)
for r in range(3):
    for h in range(3):
        a, b = threefry(split(ctr + r * 3 + h), split(key))
        out[r, 2 * h] = a
        if 2 * h + 1 < 5: out[r, 2 * h + 1] = b
check('threefry u32 state', ld('rng', 0), np.array([key, ctr + 9], np.uint64))
check('threefry u32[3,5]', ld('rng', 1), out)
tf64 = [threefry(split(ctr + n), split(key)) for n in range(7)]
check('threefry u64 state', ld('rng', 2), np.array([key, ctr + 7], np.uint64))
check('threefry u64[7]', ld('rng', 3), np.array([a | b << 32 for a, b in tf64], np.uint64))
def philox_words(key, lo, hi, nwords):
    out = []
    for b in range((nwords + 3) // 4):
        cl = (lo + b) % 2**64; ch = (hi + (1 if cl < lo else 0)) % 2**64
        out += philox(list(split(cl)) + list(split(ch)), split(key))
    return out, (nwords + 3) // 4
key, lo, hi = s3
ws, nb = philox_words(key, lo, hi, 10)
nl = (lo + nb) % 2**64
check('philox u32 state', ld('rng', 4), np.array([key, nl, (hi + (nl < lo)) % 2**64], np.uint64))
check('philox u32[2,5]', ld('rng', 5), np.array(ws[:10], np.uint32).reshape(2, 5))
ws, nb = philox_words(key, lo, hi, 10)
check('philox u64[5]', ld('rng', 7), np.array([ws[2 * n] | ws[2 * n + 1] << 32 for n in range(5)], np.uint64))
key, ctr = s2  # rng_default is Philox; a u64[2] state's counter is (state[1], state[0])
ws, nb = philox_words(key, ctr, key, 6)
check('default state', ld('rng', 8), np.array([key, ctr + nb], np.uint64))
check('default u32[6]', ld('rng', 9), np.array(ws[:6], np.uint32))
u = ld('rng', 10)
if not (np.all((u >= 1) & (u < 2)) and u.std() > 0.2): bad.append('rng uniform'); print(u)
print('elementwise: %d failed: %s' % (len(bad), ' '.join(bad)))
sys.exit(1 if bad else 0)
PY
echo "elementwise: ok"
