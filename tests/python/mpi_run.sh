#!/usr/bin/env bash
# mpi_run.sh: ctest's wrapper for mpi_run.py: `mpirun -np 2 PYTHON
# mpi_run.py MODEL` (tessel's Python module on mpi4py's communicator).
# Exits 77 (ctest: skipped) where mpi4py or numpy is not importable by
# PYTHON. In sanitizer builds (TESSEL_SANITIZE=ON) the ranks' python gets
# the ASan runtime preloaded (TESSEL_PRELOAD, which ctest passes), without
# which a ctypes-loaded ASan library does not load: skipped when unset.
# Expects PYTHON, TESSEL_SRC, TESSEL_LIBRARY and PYTHONPATH (ctest sets them).
set -euo pipefail
: "${PYTHON:?}" "${TESSEL_SRC:?}"
RANK_CMD=("$PYTHON")
case "${TESSEL_SANITIZE:-}" in
ON | 1 | TRUE | YES)
    if [ -z "${TESSEL_PRELOAD:-}" ]; then
        echo "SKIP: sanitizer build and no ASan runtime to preload into python (TESSEL_PRELOAD)"
        exit 77
    fi
    RANK_CMD=(env LD_PRELOAD="$TESSEL_PRELOAD" "$PYTHON")
    ;;
esac
if ! "$PYTHON" -c 'import numpy, mpi4py' 2>/dev/null; then
    echo "SKIP: $PYTHON cannot import numpy and mpi4py (Debian: apt-get install python3-numpy python3-mpi4py)"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
exec timeout 300 mpirun -np 2 "${RANK_CMD[@]}" "$TESSEL_SRC/tests/python/mpi_run.py" "${1:-$TESSEL_SRC/examples/mlp.hlo}"
