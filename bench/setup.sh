#!/usr/bin/env bash
# bench/setup.sh: what `bench/run peers` needs beyond scripts/setup.sh (which
# the build and the tests need): Debian's PyTorch (the torch-2p side of
# bench/peers.py) and the GEMM libraries bench/gemm_bench.c measures (BLIS,
# oneDNN). Not needed to build or test tessel; a line whose peer is missing
# says it was skipped. Idempotent; as root it installs, otherwise it says
# what is missing.
set -euo pipefail
PACKAGES=(python3-torch libblis-dev libdnnl-dev)
missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ "${#missing[@]}" -ne 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bench/setup.sh: missing packages: ${missing[*]}" >&2
        echo "bench/setup.sh: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "bench/setup.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
