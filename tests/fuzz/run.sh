#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan+UBSan) and run each for SECONDS
# (default 60) from its seed corpus. Fails (exit 1) on any finding: a
# crash, a sanitizer report, a leak, a timeout or an out-of-memory, whose
# input libFuzzer leaves in $BUILD/artifacts/. New interesting inputs go to
# $BUILD/work/<target>/, never into the seed corpora in the tree.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     (TARGET: parse sharding npy plan)
#   TESSEL_FUZZ_BUILD=dir   build directory (default: build/fuzz in the tree)
#   TESSEL_FUZZ_JOBS=n      build parallelism (default 2)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse sharding npy plan)
build=${TESSEL_FUZZ_BUILD:-$src/build/fuzz}

command -v clang >/dev/null || { echo "run.sh: clang not found" >&2; exit 1; }
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTESSEL_FUZZ=ON >/dev/null
cmake --build "$build" -j"${TESSEL_FUZZ_JOBS:-2}" $(printf -- '--target fuzz_%s ' "${targets[@]}") >/dev/null

mkdir -p "$build/artifacts"
failed=0
for t in "${targets[@]}"; do
    work="$build/work/$t"
    mkdir -p "$work"
    dict=()
    [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
    log="$build/fuzz_$t.log"
    echo "== fuzz_$t for ${secs}s (log: $log)"
    # -rss_limit_mb: a finding if one input needs more; -timeout: per input.
    if "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dict[@]}" \
        "$work" "$here/corpus_$t" >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done' "$log" | tr '\n' ' '
        echo
    else
        echo "fuzz_$t: FINDING (see $log and $build/artifacts/$t-*)" >&2
        grep -E 'ERROR:|SUMMARY:|fuzz contract broken' "$log" | head -5 >&2
        failed=1
    fi
done
exit $failed
