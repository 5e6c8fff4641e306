#!/usr/bin/env bash
# hostile_cost.sh: costs linear in the input (issue 16, finding 8), on
# generated inputs. Behaviour is asserted, not time; the generous `timeout`
# of each command only turns a regression to quadratic cost into a failure
# instead of a stuck CI job (on main: 3.5-6 s for the caret of an error at
# column 512k, 6 s for a tuple-width error, 16-29 s for a 65,536-leaf
# tuple; now each is well under a second).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

"$PY" - "$WORK" <<'PY'
import sys
w = sys.argv[1]
pad = " " * (512 * 1024)
open(w + "/caret.hlo", "w").write("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)" + pad + " @\n}\n")
k = 70000
open(w + "/wide.hlo", "w").write("HloModule t\nENTRY e {\n  ROOT p = (" + ", ".join(["f32[]"] * k) + ") parameter(0)\n}\n")
k = 65536
t = "(" + ", ".join(["f32[]"] * k) + ")"
open(w + "/leaves.hlo", "w").write("HloModule t\nENTRY e {\n  p = %s parameter(0)\n  ROOT r = %s copy(p)\n}\n" % (t, t))
k = 100000
body = ["c%d {\n  a = f32[] parameter(0)\n  ROOT r = f32[] negate(a)\n}" % i for i in range(k)]
entry = ["ENTRY e {", "  x0 = f32[] parameter(0)"] + ["  x%d = f32[] call(x%d), to_apply=c%d" % (i + 1, i, i) for i in range(k)]
open(w + "/comps.hlo", "w").write("HloModule many\n" + "\n".join(body + entry) + "\n  ROOT y = f32[] copy(x%d)\n}\n" % k)
PY

# The caret of an error at column 524,319: the whole line, the caret under the column.
got=0
timeout 60 "$TESSEL" check "$WORK/caret.hlo" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 2 ] || fail "an error at column 524319 exited $got"
expect_in "$ERR" "caret.hlo:3:524319: error: expected instruction name or '}', found '@'"
"$PY" - "$ERR" <<'PY' || fail "the caret is not under column 524319"
import sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[2] == "  " + " " * 524318 + "^", len(lines[2])
PY
# A tuple wider than the limit: refused at its position.
got=0
timeout 60 "$TESSEL" check "$WORK/wide.hlo" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 2 ] || fail "a 70000-wide tuple exited $got"
expect_in "$ERR" "error: tuple wider than 65536 elements"
# A 65,536-leaf tuple runs (the reference, summary and files) and its outputs are right.
expect_status 0 timeout 120 "$TESSEL" run --reference --random-inputs 5 "$WORK/leaves.hlo"
[ "$(grep -c '^output ' "$OUT")" = 65536 ] || fail "the summary has not 65536 outputs"
expect_status 0 timeout 300 "$TESSEL" run --reference --random-inputs 5 --output-dir "$WORK/o" "$WORK/leaves.hlo"
"$PY" - "$WORK/o" <<'PY' || fail "the 65536 outputs are not the random inputs copied"
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "outputs.json")))
assert len(m["files"]) == 65536 and len([f for f in os.listdir(d) if f.endswith(".npy")]) == 65536
PY
# 100,000 computations load, verify and run.
expect_status 0 timeout 120 "$TESSEL" check "$WORK/comps.hlo"
expect_in "$OUT" "100001 computations"
expect_status 0 timeout 120 "$TESSEL" run --reference --random-inputs 1 "$WORK/comps.hlo"
# --limit instructions: refused at the first instruction past it, before the rest is read.
expect_status 2 "$TESSEL" check --limit instructions=1000 "$WORK/comps.hlo"
expect_in "$ERR" "comps.hlo:2003:3: error: the module has more than 1000 instructions (--limit instructions)"
expect_status 2 "$TESSEL" run --limit instructions=1000 --random-inputs 1 "$WORK/comps.hlo"
expect_in "$ERR" "more than 1000 instructions"
expect_status 2 "$TESSEL" check --limit instructions=0 "$WORK/comps.hlo"
expect_in "$ERR" "--limit instructions needs a whole number from 1 to"
echo "hostile_cost: ok"
