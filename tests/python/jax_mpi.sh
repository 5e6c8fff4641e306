#!/usr/bin/env bash
# jax_mpi.sh: ctest's wrapper for jax_mpi.py: `mpirun -np 2` (TCP) of the
# JAX venv's python (TESSEL_JAX_PYTHON, build/jax-venv from
# scripts/setup.sh, with Debian's mpi4py visible). In sanitizer builds the
# ranks' python gets the ASan runtime preloaded (TESSEL_PRELOAD). Expects
# the environment of TESSEL_JAX_TEST_ENV (tests/CMakeLists.txt).
set -euo pipefail
: "${TESSEL_JAX_PYTHON:?}" "${TESSEL_SRC:?}"
RANK_CMD=("$TESSEL_JAX_PYTHON")
case "${TESSEL_SANITIZE:-}" in
ON | 1 | TRUE | YES)
    [ -n "${TESSEL_PRELOAD:-}" ] || { echo "SKIP: sanitizer build and no ASan runtime to preload"; exit 77; }
    RANK_CMD=(env LD_PRELOAD="$TESSEL_PRELOAD" "$TESSEL_JAX_PYTHON")
    ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
exec timeout 300 mpirun -np 2 --mca btl tcp,self "${RANK_CMD[@]}" "$TESSEL_SRC/tests/python/jax_mpi.py"
