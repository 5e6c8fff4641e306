#!/usr/bin/env bash
# conformance_spmd_replay.sh: the round trip on XLA's SPMD partitioner test
# modules (../shared/conformance/xla_spmd): `tessel compile` each module
# for its device count, replay the plan's text with `tessel run --spmd`
# under `mpirun -np H` for H = 1, 2 and 4 where the devices split (each
# device given its shard of the inputs, cut by NumPy from the plan's split
# trees; the outputs joined by its concat trees: replay_io.py), and the
# result equals the reference on the whole inputs (the oracle's
# tolerance). What XLA's tools would read is what tessel runs, on any
# number of hosts.
#
# Skipped per module, and counted: the reference refuses it (ops it cannot
# run, arrays over 2^18 elements as in test_oracle.c), its partitioned run
# does not run (infeed/outfeed on several devices), or its inputs are
# not plain arrays replay_io.py draws (tuple, complex, sub-byte). Known
# modules that must fail are listed; a listed module that passes fails.
#
# Budget: a fixed sample of every 8th module (about 40; a few minutes);
# TESSEL_SWEEP=full runs all 346. Under a sanitizer build (TESSEL_BUILD
# ends in /asan) every 32nd. Skips when the corpus is absent.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

DIR="${TESSEL_SHARED:-/nonexistent}/conformance/xla_spmd"
if [ ! -f "$DIR/manifest.tsv" ]; then
    echo "conformance_spmd_replay: skipped ($DIR is absent)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
RIO="$TESSEL_SRC/tests/e2e/replay_io.py"
LIMIT=(--limit elements=262144)
STEP=8
[ "${TESSEL_SWEEP:-}" != full ] || STEP=1
case "${TESSEL_BUILD:-}" in */asan) STEP=32 ;; esac

# An all-reduce across manual groups: each group holds its own copy of the
# logical value, so the partitioned program sums copies the one-device
# reference has once (test_oracle.c's KNOWN list says the same).
declare -A KNOWN=(
    [SubgroupManualAllReduce]="all-reduce across manual groups (per-group data)"
)

i=0 n=0 ok=0 skipped=0 runs=0
bad=""
while IFS=$'\t' read -r -u 3 file test ndev _; do
    [ "$file" != file ] || continue
    i=$((i + 1))
    [ $(((i - 1) % STEP)) -eq 0 ] || continue
    n=$((n + 1))
    f="$DIR/modules/$file"
    w="$WORK/$test"
    mkdir -p "$w/in"
    if ! "$TESSEL" compile "$f" "${LIMIT[@]}" --num-partitions "$ndev" -o "$w/h1.plan" >"$OUT" 2>"$ERR" ||
       ! "$TESSEL" plan "$w/h1.plan" --format json >"$w/plan.json" 2>"$ERR"; then
        skipped=$((skipped + 1))
        continue
    fi
    rc=0
    whole=$("$PY" "$RIO" inputs "$w/plan.json" "$w/in" 7) || rc=$?
    if [ "$rc" != 0 ]; then
        skipped=$((skipped + 1))
        continue
    fi
    # shellcheck disable=SC2086
    if ! timeout 120 "$TESSEL" run "$f" --reference "${LIMIT[@]}" $whole --output-dir "$w/ref" >"$OUT" 2>"$ERR"; then
        skipped=$((skipped + 1))
        continue
    fi
    # Only modules that pass partitioned (conformance_spmd_run.sh keeps the
    # list of those that do not) make the round trip.
    # shellcheck disable=SC2086
    if ! timeout 120 "$TESSEL" run "$w/h1.plan" $whole --output-dir "$w/part" >"$OUT" 2>"$ERR" </dev/null; then
        skipped=$((skipped + 1))
        continue
    fi
    r=$(sed -n 's/^HloModule [^,]*,.*replica_count=\([0-9]*\).*/\1/p' "$w/h1.plan")
    cut=$("$PY" "$RIO" cut "$w/plan.json" "$w/in" "$ndev" "${r:-1}")
    fails=""
    for h in 1 2 4; do
        [ $((ndev % h)) -eq 0 ] || continue
        runs=$((runs + 1))
        # shellcheck disable=SC2086
        if ! env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np "$h" \
            "$TESSEL" run "$w/h1.plan" --spmd $cut --output-dir "$w/rep$h" >"$OUT" 2>"$ERR"; then
            fails="$fails h=$h: $(grep -m1 error "$ERR")"
            continue
        fi
        "$PY" "$RIO" join "$w/plan.json" "$w/rep$h" "$w/joined$h" "$ndev"
        (same_outputs "$w/ref" "$w/joined$h" "$test replayed on $h hosts") >"$w/cmp" 2>&1 ||
            fails="$fails h=$h: $(grep -m1 FAIL "$w/cmp")"
    done
    if [ -n "${KNOWN[$test]:-}" ]; then
        [ -n "$fails" ] || bad="$bad\n  $test passes now: remove it from KNOWN"
        continue
    fi
    if [ -n "$fails" ]; then
        bad="$bad\n  $test ($ndev devices):$fails"
    else
        ok=$((ok + 1))
    fi
    rm -rf "$w"
done 3<"$DIR/manifest.tsv"
echo "conformance_spmd_replay: $n modules (every ${STEP}th): $ok replayed equal the reference ($runs replays on 1, 2, 4 hosts); $skipped skipped (reference, partitioned run, size or input kinds)"
[ "$ok" -gt 0 ] || fail "nothing replayed"
[ -z "$bad" ] || fail "$(printf "%b" "$bad")"
