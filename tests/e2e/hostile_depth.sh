#!/usr/bin/env bash
# hostile_depth.sh: deep but acyclic call nesting (issue 16, finding 3).
# 25,000 levels of `call` (a 2 MB file, generated here) crashed run, plan
# and compile with a stack overflow in the partitioner; now every command,
# --reference too, refuses it with the position of the call past
# `--limit depth` (default 64), status 2, no signal. The limit's edge: 200
# levels (the most --limit depth allows) run, partitioned and --reference,
# with the same result; 201 are refused the same way everywhere.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# chain FILE LEVELS: ENTRY calls c1, c1 calls c2, ... (LEVELS computations
# below the entry), the innermost negates.
chain() {
    "$PY" - "$1" "$2" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
out = ["HloModule deep"]
for k in range(n, 0, -1):
    body = "f32[4] negate(p)" if k == n else "f32[4] call(p), to_apply=c%d" % (k + 1)
    out.append("c%d {\n  p = f32[4] parameter(0)\n  ROOT r = %s\n}" % (k, body))
out.append("ENTRY main {\n  x = f32[4] parameter(0), sharding={devices=[2]0,1}\n"
           "  ROOT y = f32[4] call(x), to_apply=c1\n}")
open(path, "w").write("\n".join(out) + "\n")
PY
}

# refused WANT_TEXT CMD...: status 2, an error at a position, no crash.
refused() {
    local want=$1
    shift
    local got=0
    timeout 120 "$@" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = 2 ] || fail "'$*' exited $got, expected 2 (a refusal, not a signal or a hang)"
    grep -qE '^tessel: .*deep.*\.hlo:[0-9]+:[0-9]+: error: ' "$ERR" || fail "'$*': no FILE:LINE:COL error"
    expect_in "$ERR" "$want"
}

chain "$WORK/deep.hlo" 25000
for args in "check" "compile -o $WORK/deep.plan" "plan" "run --random-inputs 1 --output-dir $WORK/o" \
    "run --reference --random-inputs 1 --output-dir $WORK/o" "run --num-partitions 2 --random-inputs 1 --output-dir $WORK/o"; do
    # shellcheck disable=SC2086
    refused "nested more than 64 levels deep (--limit depth)" "$TESSEL" $args "$WORK/deep.hlo"
done
[ ! -e "$WORK/deep.plan" ] && [ ! -e "$WORK/o" ] || fail "a refused module left a plan or outputs"
# Raising the limit does not open the door past what the passes can walk.
refused "nested more than 200 levels deep" "$TESSEL" run --limit depth=200 --random-inputs 1 "$WORK/deep.hlo"
expect_status 2 "$TESSEL" check --limit depth=201 "$WORK/deep.hlo"
expect_in "$ERR" "--limit depth=201 is too large: the largest is 200"

# The edge: 199 computations below the entry are 200 levels.
chain "$WORK/deep200.hlo" 199
expect_status 0 "$TESSEL" check --limit depth=200 "$WORK/deep200.hlo"
expect_status 0 "$TESSEL" run --limit depth=200 --reference --random-inputs 3 --output-dir "$WORK/ref" "$WORK/deep200.hlo"
expect_status 0 "$TESSEL" run --limit depth=200 --num-partitions 2 --random-inputs 3 --output-dir "$WORK/got" "$WORK/deep200.hlo"
same_outputs "$WORK/ref" "$WORK/got" "200 levels of calls"
expect_status 0 "$TESSEL" compile --limit depth=200 --num-partitions 2 -o "$WORK/deep200.plan" "$WORK/deep200.hlo"
expect_status 0 "$TESSEL" run --limit depth=200 --random-inputs 3 --output-dir "$WORK/plan" "$WORK/deep200.plan"
same_outputs "$WORK/ref" "$WORK/plan" "200 levels of calls, from a plan"
chain "$WORK/deep201.hlo" 200
for c in check plan; do
    refused "nested more than 200 levels deep" "$TESSEL" $c --limit depth=200 "$WORK/deep201.hlo"
done
refused "nested more than 200 levels deep" "$TESSEL" run --reference --limit depth=200 --random-inputs 1 "$WORK/deep201.hlo"
echo "hostile_depth: ok"
