#!/usr/bin/env bash
# demo.sh: the main job on a fresh machine: install what is missing, build
# tessel (release preset), check an example model and run it with the
# reference executor on deterministic random inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release >/dev/null
TESSEL=build/release/tessel

set -x
"$TESSEL" check examples/mlp.hlo
"$TESSEL" run examples/mlp.hlo --reference --random-inputs 1
