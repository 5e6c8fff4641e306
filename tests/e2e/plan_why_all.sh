#!/usr/bin/env bash
# plan_why_all.sh: no collective without its specific reason (issue 31).
# Every model of tests/models and every module of the conformance corpora
# (../shared; only tests/models where it is absent) is planned with `plan
# --format json`; plan_why/why_all.py checks each collective's "why" (a
# known kind, the instruction and line that asked for it, no generic
# fallback text, what the op does with the dim it cannot take split, an
# avoid line costed in bytes). About 5 s in release; under the asan build
# (35 s whole) a fixed sample, every 4th module: the release build checks
# every reason, the asan build looks for the C's memory errors.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
STEP=1
case "${TESSEL_BUILD:-}" in */asan) STEP=4 ;; esac
"$PY" "$TESSEL_SRC/tests/e2e/plan_why/why_all.py" "$TESSEL" "$TESSEL_SRC" "${TESSEL_SHARED:-/nonexistent}" "$WORK" "$STEP" ||
    fail "a collective without a specific reason (above)"
echo "plan_why_all: ok"
