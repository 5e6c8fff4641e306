#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan+UBSan) and run each for SECONDS
# (default 60) from its seed corpus. Fails (exit 1) on any finding: a
# crash, a sanitizer report, a leak, a timeout or an out-of-memory, whose
# input libFuzzer leaves in $BUILD/artifacts/. The corpus accumulates:
# each run starts from the seeds in the tree (tests/fuzz/corpus/<target>/)
# and from $BUILD/work/<target>/, the copy grown by every earlier run in
# that build directory, and adds what it finds there; the seeds in the
# tree are never written by a run.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     (TARGET: parse sharding npy plan manifest)
#   tests/fuzz/run.sh --merge [TARGET...]       by hand: minimise seeds + $BUILD/work/<target>
#                                               into tests/fuzz/corpus/<target>/ (libFuzzer
#                                               -merge=1: the smallest set with the same
#                                               coverage), to commit what runs have found
#   TESSEL_FUZZ_BUILD=dir   build directory (default: build/fuzz in the tree)
#   TESSEL_FUZZ_JOBS=n      build parallelism (default 2)
#   TESSEL_FUZZ_PARALLEL=n  targets fuzzed at once (default 2)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
merge=0
if [ "${1:-}" = --merge ]; then
    merge=1
    shift
    secs=0
else
    secs=${1:-60}
    shift || true
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse sharding npy plan manifest)
build=${TESSEL_FUZZ_BUILD:-$src/build/fuzz}

command -v clang >/dev/null || { echo "run.sh: clang not found" >&2; exit 1; }
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTESSEL_FUZZ=ON >/dev/null
cmake --build "$build" -j"${TESSEL_FUZZ_JOBS:-2}" $(printf -- '--target fuzz_%s ' "${targets[@]}") >/dev/null

mkdir -p "$build/artifacts"
if [ $merge = 1 ]; then
    for t in "${targets[@]}"; do
        new=$(mktemp -d "$build/merge-$t.XXXXXX")
        mkdir -p "$build/work/$t"
        # Inputs larger than 4 KiB stay out: the seeds are kept small.
        "$build/tests/fuzz/fuzz_$t" -merge=1 -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
            "$new" "$here/corpus/$t" "$build/work/$t" >"$build/merge_$t.log" 2>&1
        # What is already a seed stays as it is; the rest (named by libFuzzer) is new.
        for f in "$new"/*; do
            [ -e "$f" ] || continue
            dup=$(for s in "$here/corpus/$t"/*; do cmp -s "$f" "$s" && echo "$s" && break; done)
            [ -n "$dup" ] && rm "$f"
        done
        n=$(ls "$new" | wc -l)
        mv "$new"/* "$here/corpus/$t/" 2>/dev/null || true
        rmdir "$new"
        echo "fuzz_$t: $n new seeds in tests/fuzz/corpus/$t (review and commit them)"
    done
    exit 0
fi
# The targets run TESSEL_FUZZ_PARALLEL at a time (default 2: a core
# each on the 2-core machine the suite is timed on), each for SECONDS;
# their lines are printed in order once each is done.
fuzz_one() {
    local t=$1 work="$build/work/$1" log="$build/fuzz_$1.log"
    mkdir -p "$work"
    local dict=()
    [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
    # -rss_limit_mb: a finding if one input needs more; -timeout: per input.
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dict[@]}" \
        "$work" "$here/corpus/$t" >"$log" 2>&1
}
failed=0
par=${TESSEL_FUZZ_PARALLEL:-2}
for ((i = 0; i < ${#targets[@]}; i += par)); do
    batch=("${targets[@]:i:par}")
    pids=()
    for t in "${batch[@]}"; do
        echo "== fuzz_$t for ${secs}s (log: $build/fuzz_$t.log)"
        fuzz_one "$t" &
        pids+=($!)
    done
    for k in "${!batch[@]}"; do
        t=${batch[$k]}
        log="$build/fuzz_$t.log"
        if wait "${pids[$k]}"; then
            echo -n "fuzz_$t: "
            grep -E '^stat::number_of_executed_units|^Done' "$log" | tr '\n' ' '
            echo
        else
            echo "fuzz_$t: FINDING (see $log and $build/artifacts/$t-*)" >&2
            grep -E 'ERROR:|SUMMARY:|fuzz contract broken' "$log" | head -5 >&2
            failed=1
        fi
    done
done
exit $failed
