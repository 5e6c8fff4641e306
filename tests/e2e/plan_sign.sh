#!/usr/bin/env bash
# plan_sign.sh: `--sign-key FILE` (issue 30): a plan compiled with a key
# carries an HMAC-SHA256 signature (compile/digest.c; the HMAC itself is
# checked against RFC 4231 in tests/unit/test_plan_sign.c). It runs with
# that key only: without a key, with another key, or edited and its
# SHA-256 digest made again (what anyone can do to an unsigned plan), it is
# refused with exit 2 and nothing runs; an unsigned plan is refused when a
# key is given; `tessel plan` checks the same; a key file that is empty or
# missing is a usage error.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

cat >"$WORK/m.hlo" <<'HLO'
HloModule signed, num_partitions=2

ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  ROOT y = f32[4,8] add(x, x), sharding={devices=[2,1]0,1}
}
HLO
printf 'first secret' >"$WORK/k1"
printf 'second secret' >"$WORK/k2"
: >"$WORK/empty"
expect_status 0 "$TESSEL" compile "$WORK/m.hlo" --sign-key "$WORK/k1" -o "$WORK/s.plan"
expect_in "$WORK/s.plan" "// TesselSignature hmac-sha256="
expect_status 0 "$TESSEL" compile "$WORK/m.hlo" -o "$WORK/u.plan"
grep -q TesselSignature "$WORK/u.plan" && fail "an unsigned plan has a signature line"

# The right key: runs, the same as the unsigned plan.
expect_status 0 "$TESSEL" run "$WORK/s.plan" --sign-key "$WORK/k1" --random-inputs 1 --output-dir "$WORK/o1"
expect_status 0 "$TESSEL" run "$WORK/u.plan" --random-inputs 1 --output-dir "$WORK/o2"
cmp -s "$WORK/o1/output_0.npy" "$WORK/o2/output_0.npy" || fail "the signed plan's output differs"
expect_status 0 "$TESSEL" plan "$WORK/s.plan" --sign-key "$WORK/k1"

# No key, another key: refused.
expect_status 2 "$TESSEL" run "$WORK/s.plan" --random-inputs 1
expect_in "$ERR" "the plan is signed with a key (// TesselSignature): give that key (--sign-key FILE)"
expect_status 2 "$TESSEL" run "$WORK/s.plan" --sign-key "$WORK/k2" --random-inputs 1
expect_in "$ERR" "the plan's signature does not match"
expect_status 2 "$TESSEL" plan "$WORK/s.plan" --sign-key "$WORK/k2"
expect_in "$ERR" "the plan's signature does not match"

# Edited (add -> multiply) and re-digested as anyone can: the digest
# passes, the signature does not.
"$PY" - "$WORK/s.plan" "$WORK/e.plan" <<'PY'
import hashlib, sys
text = open(sys.argv[1]).read()
body = text[:text.rindex("// TesselDigest sha256=")].replace(" add(", " multiply(")
open(sys.argv[2], "w").write(body + "// TesselDigest sha256=" + hashlib.sha256(body.encode()).hexdigest() + "\n")
PY
grep -q ' multiply(' "$WORK/e.plan" || fail "the edit did not happen"
expect_status 2 "$TESSEL" run "$WORK/e.plan" --sign-key "$WORK/k1" --random-inputs 1
expect_in "$ERR" "the plan's signature does not match"
# ... and with its signature line dropped too: unsigned, refused with a key.
grep -v TesselSignature "$WORK/e.plan" | "$PY" -c '
import hashlib, sys
text = sys.stdin.read()
body = text[:text.rindex("// TesselDigest sha256=")]
sys.stdout.write(body + "// TesselDigest sha256=" + hashlib.sha256(body.encode()).hexdigest() + "\n")' >"$WORK/d.plan"
expect_status 2 "$TESSEL" run "$WORK/d.plan" --sign-key "$WORK/k1" --random-inputs 1
expect_in "$ERR" "the plan is not signed, and a key was given"

# Unsigned plan with a key: refused. Bad key files: usage errors.
expect_status 2 "$TESSEL" run "$WORK/u.plan" --sign-key "$WORK/k1" --random-inputs 1
expect_in "$ERR" "the plan is not signed, and a key was given"
expect_status 2 "$TESSEL" compile "$WORK/m.hlo" --sign-key "$WORK/empty" -o "$WORK/x.plan"
expect_in "$ERR" "the file is empty: a key needs bytes"
expect_status 2 "$TESSEL" compile "$WORK/m.hlo" --sign-key "$WORK/nokey" -o "$WORK/x.plan"
expect_in "$ERR" "--sign-key $WORK/nokey: cannot open: No such file or directory"
[ ! -e "$WORK/x.plan" ] || fail "a plan was written with a bad key"
echo "plan_sign: ok"
