#!/usr/bin/env bash
# hostile_plan.sh: plans that cannot be mistaken (issue 16, finding 2). A
# plan cut anywhere, a byte flipped anywhere, an edit that changes meaning
# (a sharding's device order, replica_groups, tanh -> sine, an all-reduce's
# add -> max) are refused with status 2 before the plan runs (on main they
# ran: exit 0, results doubled or changed); a model that names
# "// TesselPlan" in a comment is a model; a plan that lost its header is
# refused, not run as a model; `tessel run PLAN --spmd` (a replay of the
# plan's text) still works and checks the digest too.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

expect_status 0 "$TESSEL" compile --num-partitions 2 -o "$WORK/mlp.plan" "$TESSEL_SRC/examples/mlp.hlo"
P="$WORK/mlp.plan"
head -n1 "$P" | grep -qx '// TesselPlanFile format=tessel-plan version=1' || fail "no header line"
tail -n1 "$P" | grep -Eqx '// TesselDigest sha256=[0-9a-f]{64}' || fail "no digest line"
# The digest is SHA-256 of every byte before its line (checked with Python's hashlib).
"$PY" - "$P" <<'PY' || fail "the digest is not the SHA-256 of the bytes before it"
import hashlib, sys
b = open(sys.argv[1], "rb").read()
body, last = b[:b.rstrip(b"\n").rfind(b"\n") + 1], b[b.rstrip(b"\n").rfind(b"\n") + 1:]
assert last.strip() == b"// TesselDigest sha256=" + hashlib.sha256(body).hexdigest().encode(), last
PY
expect_status 0 "$TESSEL" run --random-inputs 1 --output-dir "$WORK/good" "$P"

# Cut at many offsets: every one refused (status 2), none runs.
size=$(stat -c %s "$P")
for off in $(seq 1 53 "$((size - 1))") $((size - 2)) $((size - 66)); do
    head -c "$off" "$P" >"$WORK/cut.plan"
    got=0
    "$TESSEL" run --random-inputs 1 --output-dir "$WORK/cut" "$WORK/cut.plan" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = 2 ] || fail "the plan cut at byte $off exited $got, expected 2"
    grep -q "^tessel: .*cut.plan:[0-9]*:[0-9]*: error: " "$ERR" || fail "cut at $off: no FILE:LINE:COL error"
    [ ! -e "$WORK/cut" ] || fail "cut at $off left outputs"
done
# A byte flipped anywhere: refused.
"$PY" - "$P" "$WORK" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
for k in range(1, 41):
    c = bytearray(b)
    c[(k * 7919) % len(b)] ^= 0x20
    open("%s/flip%d.plan" % (sys.argv[2], k), "wb").write(c)
PY
for k in $(seq 1 40); do
    got=0
    "$TESSEL" plan "$WORK/flip$k.plan" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = 2 ] || fail "the plan with byte $(((k * 7919) % size)) flipped exited $got, expected 2"
done
# Edits that change meaning: refused by the digest, naming its line.
last=$(wc -l <"$P")
edit() { # edit SED WHAT
    sed "$1" "$P" >"$WORK/edit.plan"
    cmp -s "$P" "$WORK/edit.plan" && fail "$2: the edit changed nothing"
    expect_status 2 "$TESSEL" run --random-inputs 1 "$WORK/edit.plan"
    expect_in "$ERR" "edit.plan:$last:24: error: the plan file's digest does not match its contents"
}
edit 's/tanh(/sine(/' "tanh -> sine"
edit 's/devices=\[2,1\]0,1/devices=[2,1]1,0/' "a sharding's device order"
edit 's/replica_groups={{0,1}}/replica_groups={{0},{1}}/' "replica_groups"
edit '/all-reduce/s/to_apply=\([a-z_.0-9]*\)/to_apply=\1/; s/ROOT \(.*\) = f32\[\] add(/ROOT \1 = f32[] maximum(/' "an all-reduce's add -> max"
# The header lost: the digest line says it is a plan, so it is refused.
tail -n +2 "$P" >"$WORK/nohdr.plan"
expect_status 2 "$TESSEL" run --random-inputs 1 "$WORK/nohdr.plan"
expect_in "$ERR" "nohdr.plan:1:1: error: not a valid plan file: it does not start with the header line"
# An unknown format version.
sed '1s/version=1/version=7/' "$P" >"$WORK/v7.plan"
expect_status 2 "$TESSEL" plan "$WORK/v7.plan"
expect_in "$ERR" "plan file format version '7': this tessel reads version 1"
# `check PLAN` and a replay check the frame too; an intact plan replays.
expect_status 2 "$TESSEL" check "$WORK/edit.plan"
expect_status 2 "$TESSEL" run --spmd --random-inputs 1 "$WORK/edit.plan"
expect_in "$ERR" "digest does not match"
expect_status 0 "$TESSEL" run --spmd --random-inputs 1 --output-dir "$WORK/replay" "$P"

# A model whose comments hold plan lines is a model: compiled, run, equal to --reference.
{ echo "// TesselPlan version=1 partitions=2 replicas=1 hosts=1 local_devices=2 inputs=3 outputs=1"
  cat "$TESSEL_SRC/examples/mlp.hlo"
  echo "// TesselEnd"; } >"$WORK/commented.hlo"
expect_status 0 "$TESSEL" run --num-partitions 2 --random-inputs 1 --output-dir "$WORK/c" "$WORK/commented.hlo"
expect_status 0 "$TESSEL" run --reference --random-inputs 1 --output-dir "$WORK/cref" "$WORK/commented.hlo"
same_outputs "$WORK/cref" "$WORK/c" "a model with plan lines in its comments"
same_outputs "$WORK/cref" "$WORK/good" "the plan"
echo "hostile_plan: ok"
