#!/usr/bin/env bash
# test.sh: the whole test suite: install what is missing, configure and
# build the release and the asan (ASan+UBSan) presets, and run every ctest
# test (all labels) on both. Fails on the first failing build or test run.
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
echo "== all tests passed (release and asan)"
