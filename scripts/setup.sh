#!/usr/bin/env bash
# setup.sh: install what tessel needs to build and test on Debian/Ubuntu.
# Idempotent and silent when everything is present; runs `apt-get update`
# only when something must be installed. As root it installs; otherwise it
# says what is missing and how to install it, and fails.
set -euo pipefail

PACKAGES=(
    gcc make cmake pkg-config
    libopenmpi-dev openmpi-bin
    libhwloc-dev libcmocka-dev libopenblas-dev libjansson-dev
    libblis4-openmp libdnnl2   # f32 GEMMs: the probe times them beside OpenBLAS (device/blas_choice.c)
    libfftw3-dev     # fft (FFTW)
    libglpk-dev      # the integer program of --auto-shard (auto/ilp.c; docs/auto-shard.md says why GLPK)
    nettle-dev       # SHA-256 of plan files and of outputs (compile/digest.c, api/outdir.c)
    python3-numpy    # tests check kernels against NumPy (Debian's /usr/bin/python3)
    python3-mpi4py   # tests/python/mpi_run.py: the Python module under mpirun (skipped without)
    python3          # the end-to-end tests write and read .npy with it
    valgrind         # the valgrind ctest label
    strace           # tests/e2e/hostile_files.sh: outputs are fsync()ed before their renames
    clang libclang-rt-dev   # the libFuzzer targets (tests/fuzz/run.sh)
    graphviz         # dot: tessel plan --format html draws its graph with it; tests parse the DOT output
    chromium         # tests/e2e/plan_html.sh opens the HTML plan in a headless browser
    python3-venv     # build/jax-venv: JAX from PyPI for the JAX tests and tessel.jax (below)
)

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
        missing+=("$p")
    fi
done
# python3 may come from elsewhere (pyenv); any python3 on PATH will do.
if command -v python3 >/dev/null 2>&1; then
    kept=()
    for p in "${missing[@]}"; do [ "$p" = python3 ] || kept+=("$p"); done
    missing=("${kept[@]+"${kept[@]}"}")
fi

if [ "${#missing[@]}" -ne 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: missing packages: ${missing[*]}" >&2
        echo "setup.sh: run as root, or: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "setup.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# JAX from PyPI, pinned, in a venv over Debian's python3 (its mpi4py stays
# visible; the venv's numpy, which jaxlib needs, shadows Debian's). The JAX
# tests (tests/jax) and tessel.jax run with build/jax-venv/bin/python.
JAX_PINS=(jax==0.10.2 jaxlib==0.10.2)
venv="$(cd "$(dirname "$0")/.." && pwd)/build/jax-venv"
if ! "$venv/bin/python" -c 'import jax, sys; sys.exit(jax.__version__ != "0.10.2")' 2>/dev/null; then
    echo "setup.sh: installing ${JAX_PINS[*]} into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${JAX_PINS[@]}" >&2
fi
