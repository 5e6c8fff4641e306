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
