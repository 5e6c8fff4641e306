#!/usr/bin/env bash
# test.sh: the whole test suite: install what is missing, configure and
# build the release and the asan (ASan+UBSan) presets, run every ctest
# test (all labels) on both, then each libFuzzer target for
# TESSEL_FUZZ_SECONDS (default 60) from its seed corpus. Fails on the first
# failing build, test run or fuzz finding.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
for preset in release asan; do
    echo "== $preset: configure and build"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset"
    echo "== $preset: ctest"
    ctest --preset "$preset" -j2
done
echo "== fuzz: ${TESSEL_FUZZ_SECONDS:-60} s per target"
tests/fuzz/run.sh "${TESSEL_FUZZ_SECONDS:-60}"
echo "== all tests passed (release, asan, fuzz)"
