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

# What stays held whole is named in --explain with why, as text and JSON:
# a conditional (its branches are not in the graph) beside a dot that is
# sharded.
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
expect_in "$OUT" "held whole: c = conditional (line 17): a conditional: its branches are not in the graph"
grep -q "held whole: h = " "$OUT" && fail "the dot is held whole"
expect_status 0 "$TESSEL" plan "$WORK/cond.hlo" --auto-shard --mesh 4 --explain --format json -o "$WORK/cond.json"
"$PY" - "$WORK/cond.json" <<'PY' || fail "held_whole in the JSON"
import json, sys
held = json.load(open(sys.argv[1]))["held_whole"]
assert [(h["name"], h["op"], h["line"]) for h in held] == [("c", "conditional", 17)], held
assert "branches" in held[0]["why"], held
PY
echo "auto_held_whole: the conditional named: ok"
