#!/usr/bin/env bash
# auto_heldout.sh: --auto-shard on modules it was not tuned on. Every module
# of tests/models and its grad, memfit, memory and shardy folders, its
# shardings taken out, auto-sharded on 2, 4 and 8 devices (and on 4 over a
# 2x2 mesh), equals the reference run (none crashes: a clear exit 2 fails
# the module too); where the
# module has shardings of its own (its hand-written plan), the auto plan's
# collective bytes per device and peak memory are compared with that
# plan's, and no plan is over it on both counts but the ones
# auto_heldout.py lists as known (auto_heldout.py --hand); a plan planned
# again under --limit memory of 1.1x the hand plan's peak equals the
# reference, and fits within both counts but where auto_heldout.py says
# why not (KNOWN_UNDER_LIMIT). The
# conformance corpora are checked the same way by auto_heldout_wide.sh
# (label heldout).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# Under the asan build (about 8x slower) 4 devices alone, no 2x2 mesh.
DEVICES=2,4,8 MESH=(--mesh2x2)
case "${TESSEL_BUILD:-}" in */asan) DEVICES=4 MESH=() ;; esac
"$PY" "$TESSEL_SRC/tests/e2e/auto_heldout.py" "$TESSEL" "$WORK/held" --devices "$DEVICES" --hand "${MESH[@]}" >"$OUT" 2>"$ERR" ||
    fail "auto_heldout.py: $(grep -v ': ok' "$OUT" | head -5)"
grep -c "vs the hand plan" "$OUT" >/dev/null || fail "no module was compared with its hand plan"
tail -1 "$OUT"
echo "auto_heldout: ok"
