#!/usr/bin/env bash
# auto_held_whole.sh: the ops --auto-shard held whole before issue 33's
# follow-up (batch-norm training and its gradient, ...) now have
# strategies: each module of auto_held_whole.py's list, auto-sharded on 2,
# 4 and 8 devices and a 2x2 mesh, equals the reference run, --explain holds
# none of its ops whole, and where its shardings are a hand plan (data
# parallel) the auto plan's bytes and peak are within 1.1x of it.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

DEVICES=2,4,8
case "${TESSEL_BUILD:-}" in */asan) DEVICES=4 ;; esac
"$PY" "$TESSEL_SRC/tests/e2e/auto_held_whole.py" "$TESSEL" "$WORK/w" --devices "$DEVICES" >"$OUT" 2>"$ERR" ||
    fail "auto_held_whole.py: $(grep -v ': ok' "$OUT" | head -5)"
cat "$OUT"
echo "auto_held_whole: ok"

# A conditional is in the graph (auto/cond.c): its branches' instructions
# get strategies and none is held whole; one the graph does not take in
# (both branches one computation) is named held whole, with why, in the
# text and the JSON, beside a dot that is sharded.
cat >"$WORK/cond.hlo" <<'HLO'
HloModule cond

neg {
  a = f32[16,8] parameter(0)
  ROOT n = f32[16,8] negate(a)
}

same {
  ROOT b = f32[16,8] parameter(0)
}

ENTRY main {
  p = pred[] parameter(0)
  x = f32[16,32] parameter(1)
  w = f32[32,8] parameter(2)
  h = f32[16,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT c = f32[16,8] conditional(p, h, h), true_computation=neg, false_computation=same
}
HLO
expect_status 0 "$TESSEL" plan "$WORK/cond.hlo" --auto-shard --mesh 4 --explain
expect_in "$OUT" "c.result[0] = conditional result"
expect_in "$OUT" "n = negate"
grep -q "held whole" "$OUT" && fail "a conditional in the graph is held whole"
sed -e 's/false_computation=same/false_computation=neg/' "$WORK/cond.hlo" >"$WORK/cond_shared.hlo"
expect_status 0 "$TESSEL" plan "$WORK/cond_shared.hlo" --auto-shard --mesh 4 --explain
expect_in "$OUT" "held whole: c = conditional (line 17): a conditional the graph does not take in (a branch shared"
grep -q "held whole: h = " "$OUT" && fail "the dot is held whole"
expect_status 0 "$TESSEL" plan "$WORK/cond_shared.hlo" --auto-shard --mesh 4 --explain --format json -o "$WORK/cond.json"
"$PY" - "$WORK/cond.json" <<'PY' || fail "held_whole in the JSON"
import json, sys
held = json.load(open(sys.argv[1]))["held_whole"]
assert [(h["name"], h["op"], h["line"]) for h in held] == [("c", "conditional", 17)], held
assert "branch shared" in held[0]["why"], held
PY
echo "auto_held_whole: the conditional in the graph, a shared one named: ok"
