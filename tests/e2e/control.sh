#!/usr/bin/env bash
# control.sh: the wrapping ops and host transfers end to end, on the models
# of tests/models (fusion, async, scan, complex_io) and tests/models/host
# (infeed_outfeed, send_recv_host): outputs against values worked out by
# hand (in each model's header comment) or with NumPy; complex .npy in and
# out and the complex random-input rule against a Python re-implementation
# of DESIGN.md's splitmix64 rule; --infeed errors (too few files, a bad
# file, several devices) with status 2 and no output left behind.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 0; }

MODELS="$TESSEL_SRC/tests/models"
inst() { # inst NAME N: the model with @N/@D filled in
    sed -e "s/@N/$2/g" -e "s/@D/$(seq -s, 0 $(($2 - 1)))/g" "$MODELS/$1.hlo" >"$WORK/$1.$2.hlo"
    echo "$WORK/$1.$2.hlo"
}
# check DIR PYTHON: run PYTHON with o(i) = numpy array of DIR/output_i.npy
check() {
    "$PY" - "$1" "$2" <<'PY' || fail "check in $1"
import sys, numpy as np
d = sys.argv[1]
def o(i, kind="output"): return np.load("%s/%s_%d.npy" % (d, kind, i))
exec(sys.argv[2])
PY
}

# ---- fusion: r = x*y + x, s = sum(r) ----
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/x.npy", np.array([1,2,3,4], np.float32)); np.save("'"$WORK"'/y.npy", np.array([10,20,30,40], np.float32))'
for n in 1 2; do
    M=$(inst fusion $n)
    flags=(--reference); [ $n = 1 ] || flags=(--num-partitions $n)
    expect_status 0 "$TESSEL" run "$M" "${flags[@]}" --input 0="$WORK/x.npy" --input 1="$WORK/y.npy" --output-dir "$WORK/fu$n"
    check "$WORK/fu$n" 'assert o(0).tolist() == [11, 42, 93, 164], o(0); assert o(1) == 310, o(1)'
done

# ---- async, collective pairs, copy-start, domain: m + |x| ----
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/xa.npy", np.array([-1,2,-3,4], np.float32))'
expect_status 0 "$TESSEL" run "$(inst async 1)" --reference --input 0="$WORK/xa.npy" --output-dir "$WORK/as"
check "$WORK/as" 'assert o(0).tolist() == [2, 6, 12, 20], o(0)'
expect_status 0 "$TESSEL" run "$(inst async 1)" --input 0="$WORK/xa.npy" --output-dir "$WORK/as1"
check "$WORK/as1" 'assert o(0).tolist() == [2, 6, 12, 20], o(0)'

# ---- scan: cumsum from 0.5; reversed cumprod along dimension 1 ----
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/ys.npy", np.array([[1,2,3],[4,5,6]], np.float32))'
for n in 1 2; do
    flags=(--reference); [ $n = 1 ] || flags=(--num-partitions $n)
    expect_status 0 "$TESSEL" run "$(inst scan $n)" "${flags[@]}" --input 0="$WORK/x.npy" --input 1="$WORK/ys.npy" --output-dir "$WORK/sc$n"
    check "$WORK/sc$n" '
x = np.array([1,2,3,4], np.float32); y = np.array([[1,2,3],[4,5,6]], np.float32)
assert (o(0) == 0.5 + np.cumsum(x)).all(), o(0)
assert o(1) == 10.5
rev = np.cumprod(y[:, ::-1], axis=1)[:, ::-1]
assert (o(2) == rev).all(), o(2)
assert (o(3) == rev[:, 0]).all(), o(3)'
done

# ---- complex: .npy <c8/<c16 in and out ----
"$PY" - "$WORK" <<'PY'
import sys, numpy as np
w = sys.argv[1]
np.save(w + "/cx.npy", np.array([1+2j, -0.5+0.25j, 3-1j], np.complex64))
np.save(w + "/cy.npy", np.array([2-1j, 4+0j, 0.5+0.5j], np.complex64))
np.save(w + "/cz.npy", np.array([1e-300+7j, -2.5-0j], np.complex128))
PY
for n in 1 2; do
    flags=(--reference); [ $n = 1 ] || flags=(--num-partitions $n)
    expect_status 0 "$TESSEL" run "$(inst complex_io $n)" "${flags[@]}" --input 0="$WORK/cx.npy" --input 1="$WORK/cy.npy" --input 2="$WORK/cz.npy" --output-dir "$WORK/cx$n"
    check "$WORK/cx$n" '
x = np.load(d + "/../cx.npy"); y = np.load(d + "/../cy.npy"); z = np.load(d + "/../cz.npy")
assert o(0).dtype == np.complex64 and (o(0) == x * y + x).all(), o(0)
assert (o(1) == x.real).all() and (o(2) == x.imag).all()
assert o(3).dtype == np.complex128 and (o(3) == -z).all(), o(3)'
done
# a c64 file for the c128 parameter: status 2, naming the file
expect_status 2 "$TESSEL" run "$(inst complex_io 1)" --reference --input 0="$WORK/cx.npy" --input 1="$WORK/cy.npy" --input 2="$WORK/cx.npy"
expect_in "$ERR" "cx.npy: error: dtype <c8 does not match parameter 2 c128[2] (expected <c16)"

# ---- complex random inputs: element i = (draw 2i, draw 2i+1), leaf k ----
for n in 1 2; do
    flags=(--reference); [ $n = 1 ] || flags=(--num-partitions $n)
    expect_status 0 "$TESSEL" run "$(inst complex_io $n)" "${flags[@]}" --random-inputs 11 --output-dir "$WORK/cr$n"
    check "$WORK/cr$n" '
M = (1 << 64) - 1
def sm(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def draw(seed, k, i): return ((sm(sm(sm(seed) ^ k) ^ i) >> 11) * 2.0 ** -53) * 2 - 1
def leaf(k, n, ft, ct):
    return np.array([complex(ft(draw(11, k, 2 * i)), ft(draw(11, k, 2 * i + 1))) for i in range(n)], ct)
x = leaf(0, 3, np.float32, np.complex64); y = leaf(1, 3, np.float32, np.complex64)
z = leaf(2, 2, np.float64, np.complex128)
assert (o(1) == x.real).all() and (o(2) == x.imag).all(), (o(1), x)
assert (o(3) == -z).all(), (o(3), z)
assert np.allclose(o(0), x * y + x, rtol=1e-6, atol=1e-7), o(0)'
done

# ---- infeed / outfeed from files ----
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/A.npy", np.array([[1,2,3],[4,5,6]], np.float32)); np.save("'"$WORK"'/B.npy", np.array(2, np.int32))'
H="$MODELS/host"
for mode in --reference ""; do
    rm -rf "$WORK/io"
    expect_status 0 "$TESSEL" run "$H/infeed_outfeed.hlo" $mode --infeed "$WORK/A.npy" --infeed "$WORK/B.npy" --output-dir "$WORK/io"
    check "$WORK/io" '
assert o(0).tolist() == [5, 7, 9], o(0)
assert o(0, "outfeed").tolist() == [[2,4,6],[8,10,12]], o(0, "outfeed")'
done
# without output dir: the outfeed is summarised after the outputs
expect_status 0 "$TESSEL" run "$H/infeed_outfeed.hlo" --reference --infeed "$WORK/A.npy" --infeed "$WORK/B.npy"
expect_in "$OUT" "outfeed 0: f32[2,3]"
# too few files: status 2, names the infeed, nothing written
rm -rf "$WORK/io2"
expect_status 2 "$TESSEL" run "$H/infeed_outfeed.hlo" --reference --infeed "$WORK/A.npy" --output-dir "$WORK/io2"
expect_in "$ERR" "infeed_outfeed.hlo:17:3:"
expect_in "$ERR" "in: infeed needs a value from the host: give one with --infeed FILE.npy (1 given, all used)"
[ ! -e "$WORK/io2" ] || fail "a failed run left $WORK/io2"
# a file of the wrong dtype or shape names the file and the infeed
expect_status 2 "$TESSEL" run "$H/infeed_outfeed.hlo" --reference --infeed "$WORK/A.npy" --infeed "$WORK/A.npy"
expect_in "$ERR" "A.npy: error: dtype <f4 does not match the value of infeed in s32[] (expected <i4)"
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/A3.npy", np.zeros((3,2), np.float32))'
expect_status 2 "$TESSEL" run "$H/infeed_outfeed.hlo" --reference --infeed "$WORK/A3.npy" --infeed "$WORK/B.npy"
expect_in "$ERR" "A3.npy: error: shape (3, 2) does not match the value of infeed in f32[2,3]"
# several devices: refused up front
expect_status 2 "$TESSEL" run "$H/infeed_outfeed.hlo" --num-partitions 2 --infeed "$WORK/A.npy" --infeed "$WORK/B.npy"
expect_in "$ERR" "--infeed feeds one device"
# and without --infeed on several devices the infeed itself is refused
expect_status 2 "$TESSEL" run "$H/infeed_outfeed.hlo" --num-partitions 2
expect_in "$ERR" "infeed talks to the host"

# ---- send / recv with the host ----
"$PY" -c 'import numpy as np; np.save("'"$WORK"'/sx.npy", np.array([1,2], np.float32)); np.save("'"$WORK"'/sr.npy", np.array([10,20], np.float32))'
expect_status 0 "$TESSEL" run "$H/send_recv_host.hlo" --reference --input 0="$WORK/sx.npy" --infeed "$WORK/sr.npy" --output-dir "$WORK/sr"
check "$WORK/sr" 'assert o(0).tolist() == [10, 40], o(0); assert o(0, "outfeed").tolist() == [11, 22]'
# recv between devices (no is_host_transfer): refused, naming it
sed -e 's/recv(tok), channel_id=1, is_host_transfer=true/recv(tok), channel_id=1/' \
    -e 's/recv-done(rv), channel_id=1, is_host_transfer=true/recv-done(rv), channel_id=1/' \
    "$H/send_recv_host.hlo" >"$WORK/dev_recv.hlo"
expect_status 2 "$TESSEL" run "$WORK/dev_recv.hlo" --reference --input 0="$WORK/sx.npy" --infeed "$WORK/sr.npy"
expect_in "$ERR" "rv: recv between devices (channel_id=1, no is_host_transfer=true) is not supported"
echo "control.sh: ok"
