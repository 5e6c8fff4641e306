#!/usr/bin/env bash
# demo.sh: the main job on a fresh machine: install what is missing, build
# tessel (release preset), check an example model, run it with the
# reference executor, show its sharding plan, compile it for 2 hosts and
# run the plan under mpirun on deterministic random inputs (the same
# output as the reference run).
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
# The oracle: the unpartitioned module on one device.
"$TESSEL" run examples/mlp.hlo --reference --random-inputs 1
# The plan: what the partitioner decided (shardings, collectives, trees).
"$TESSEL" plan examples/mlp.hlo --hosts 2
# Compile for 2 hosts and run under mpirun, one rank per host (as root,
# Open MPI needs to be told that is fine; --oversubscribe: 2 ranks may
# share fewer cores). Where no cluster exists, mpirun starts both ranks on
# this machine.
"$TESSEL" compile examples/mlp.hlo --hosts 2 -o build/mlp.plan
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe "$TESSEL" run build/mlp.plan --random-inputs 1 --stats
