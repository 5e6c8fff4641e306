#!/usr/bin/env bash
# demo.sh: the main job on a fresh machine: install what is missing, build
# tessel (release preset), check an example model and run it with the
# reference executor on deterministic random inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
# Quiet unless something fails: then the whole build log is shown.
log=$(mktemp)
if ! { cmake --preset release && cmake --build --preset release; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
TESSEL=build/release/tessel

set -x
"$TESSEL" check examples/mlp.hlo
"$TESSEL" run examples/mlp.hlo --reference --random-inputs 1
