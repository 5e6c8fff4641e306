#!/usr/bin/env bash
# inputs.sh: binding inputs to entry parameters (index, name, INDEX.LEAF,
# NAME.LEAF), the deterministic random inputs end to end (DESIGN.md's test
# vectors come out of the outputs bit for bit), and every input error:
# status 2, a message naming the file or parameter, no output written.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# Parameters: 0 "a" f32[4]; 1 "t.1" (s32[6], u8[5]); 2 "p" pred[5].
# Random leaves: k=0 a, k=1 t.1 leaf 0, k=2 t.1 leaf 1, k=3 p.
M="$WORK/leaves.hlo"
cat >"$M" <<'HLO'
HloModule leaves

ENTRY %main (a: f32[4], t.1: (s32[6], u8[5]), p: pred[5]) -> (f32[4], s32[6], u8[5], pred[5]) {
  %a = f32[4]{0} parameter(0)
  %t.1 = (s32[6]{0}, u8[5]{0}) parameter(1)
  %p = pred[5]{0} parameter(2)
  %s = s32[6]{0} get-tuple-element(%t.1), index=0
  %u = u8[5]{0} get-tuple-element(%t.1), index=1
  ROOT %r = (f32[4]{0}, s32[6]{0}, u8[5]{0}, pred[5]{0}) tuple(%a, %s, %u, %p)
}
HLO

# SEED 7: f32[4] bits 0x3e600a3d 0x3f6d3c70 0xbed4554f 0xbf4cc276; s32[6]
# 6 4 -7 -2 2 -8; u8[5] 4 15 1 1 3; pred[5] true true true false false.
expect_status 0 "$TESSEL" run "$M" --reference --random-inputs 7 --output-dir "$WORK/r7"
bits=$("$PY" -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
print(" ".join("0x%08x" % v for v in struct.unpack("<4I", d[-16:])))' "$WORK/r7/output_0.npy")
[ "$bits" = "0x3e600a3d 0x3f6d3c70 0xbed4554f 0xbf4cc276" ] || fail "f32 random bits: $bits"
[ "$(npy_dump "$WORK/r7/output_1.npy")" = "<i4 6 6 4 -7 -2 2 -8" ] || fail "s32 random: $(npy_dump "$WORK/r7/output_1.npy")"
[ "$(npy_dump "$WORK/r7/output_2.npy")" = "|u1 5 4 15 1 1 3" ] || fail "u8 random: $(npy_dump "$WORK/r7/output_2.npy")"
[ "$(npy_dump "$WORK/r7/output_3.npy")" = "|b1 5 1 1 1 0 0" ] || fail "pred random: $(npy_dump "$WORK/r7/output_3.npy")"

# a leaf bound by INDEX.LEAF, another by NAME.LEAF (the name has a dot);
# the rest random: bound leaves come from the files, others keep their k
npy_write "$WORK/s.npy" '<i4' 6 10 20 30 40 50 60
npy_write "$WORK/u.npy" '|u1' 5 9 8 7 6 5
expect_status 0 "$TESSEL" run "$M" --reference --random-inputs 7 --input 1.0="$WORK/s.npy" \
    --input t.1.1="$WORK/u.npy" --output-dir "$WORK/b"
[ "$(npy_dump "$WORK/b/output_1.npy")" = "<i4 6 10 20 30 40 50 60" ] || fail "1.0 binding"
[ "$(npy_dump "$WORK/b/output_2.npy")" = "|u1 5 9 8 7 6 5" ] || fail "t.1.1 binding"
[ "$(npy_dump "$WORK/b/output_3.npy")" = "|b1 5 1 1 1 0 0" ] || fail "pred still random leaf 3"

# everything bound, no random: by index and by name
npy_write "$WORK/a.npy" '<f4' 4 1.5 -2 0 3
npy_write "$WORK/p.npy" '|b1' 5 0 1 0 1 1
expect_status 0 "$TESSEL" run "$M" --input a="$WORK/a.npy" --input 1.0="$WORK/s.npy" \
    --input 1.1="$WORK/u.npy" --input 2="$WORK/p.npy"
expect_in "$OUT" "output 0: f32[4] min -2 max 3 mean 0.625 first [1.5, -2, 0, 3]"
expect_in "$OUT" "output 3: pred[5] min 0 max 1 mean 0.6 first [0, 1, 0, 1, ...]"

# ---- errors: status 2, a clear message, no output directory ----
no_output() { [ ! -e "$WORK/none" ] || fail "a failed run left $(ls -R "$WORK/none")"; }

expect_status 2 "$TESSEL" run "$M" --reference --input 0="$WORK/a.npy" --output-dir "$WORK/none"
expect_in "$ERR" "no input for parameter 1 leaf 0 (t.1: s32[6]), parameter 1 leaf 1 (t.1: u8[5]), parameter 2 (p: pred[5])"
no_output
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input t.1="$WORK/s.npy" --output-dir "$WORK/none"
expect_in "$ERR" "parameter 1 is a tuple of 2 leaves"
no_output
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input q="$WORK/s.npy"
expect_in "$ERR" "input q: no entry parameter has this name or index"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 3="$WORK/s.npy"
expect_in "$ERR" "the entry computation has 3 parameters"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 1.2="$WORK/s.npy"
expect_in "$ERR" "parameter 1 has 2 leaves"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/a.npy" --input a="$WORK/a.npy"
expect_in "$ERR" "bound twice"
# wrong dtype, wrong shape, missing file, not a .npy, truncated
npy_write "$WORK/a64.npy" '<f8' 4 1 2 3 4
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/a64.npy" --output-dir "$WORK/none"
expect_in "$ERR" "tessel: $WORK/a64.npy: error: dtype <f8 does not match parameter 0 f32[4] (expected <f4)"
no_output
npy_write "$WORK/a5.npy" '<f4' 5 1 2 3 4 5
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/a5.npy"
expect_in "$ERR" "shape (5,) does not match parameter 0 f32[4]"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/missing.npy"
expect_in "$ERR" "missing.npy: error: cannot open"
echo "not numpy" >"$WORK/text.npy"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/text.npy"
expect_in "$ERR" "not a .npy file"
head -c 70 "$WORK/a.npy" >"$WORK/short.npy"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 0="$WORK/short.npy"
expect_in "$ERR" "truncated"
npy_write "$WORK/p1.npy" '|b1' 5 0 1 0 1 1
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 1 --input 1.1="$WORK/p1.npy"
expect_in "$ERR" "dtype |b1 does not match parameter 1 leaf 1 u8[5] (expected |u1)"

# ---- a failure while writing outputs leaves none: output_3.npy is a
# directory, so the last rename fails after output_0..2 were renamed ----
mkdir -p "$WORK/partial/output_3.npy"
expect_status 1 "$TESSEL" run "$M" --reference --random-inputs 7 --output-dir "$WORK/partial"
expect_in "$ERR" "output_3.npy"
[ "$(ls "$WORK/partial")" = "output_3.npy" ] || fail "partial outputs left: $(ls "$WORK/partial")"
# the output dir is a file: status 2
touch "$WORK/afile"
expect_status 2 "$TESSEL" run "$M" --reference --random-inputs 7 --output-dir "$WORK/afile"
expect_in "$ERR" "not a directory"

# ---- the same seed gives the same outputs; another seed others ----
expect_status 0 "$TESSEL" run "$M" --reference --random-inputs 7 --output-dir "$WORK/r7b"
cmp -s "$WORK/r7/output_0.npy" "$WORK/r7b/output_0.npy" || fail "seed 7 is not deterministic"
expect_status 0 "$TESSEL" run "$M" --reference --random-inputs 8 --output-dir "$WORK/r8"
! cmp -s "$WORK/r7/output_0.npy" "$WORK/r8/output_0.npy" || fail "seeds 7 and 8 agree"
echo "inputs: ok"
