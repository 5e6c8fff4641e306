#!/usr/bin/env bash
# bounds.sh: runs that must end (issue 16, finding 6) and long runs that
# can be resumed. A while loop that never ends (tests/e2e/bounds/forever.hlo)
# under --limit trips and --timeout, alone and under mpirun; under mpirun
# the heartbeat: each rank in turn stopped with SIGSTOP (the other must
# end the job, naming it, in about --heartbeat seconds, without spinning a
# core meanwhile), and a collective one rank skips (injected with
# TESSEL_SKIP_COLLECTIVE_AFTER): the ranks diverge and the job ends
# instead of deadlocking. --limit memory refuses a plan that does not fit.
# Checkpoints: a run cut into chunks, resumed from its checkpoints, and a
# job whose rank is SIGKILLed mid-run then resumed, all bit-identical to an
# uninterrupted run. Prints the figures RELIABILITY.md quotes.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2)
FOREVER="$TESSEL_SRC/tests/e2e/bounds/forever.hlo"

no_output() { # DIR: no .npy left there
    if [ -d "$1" ] && [ -n "$(ls -A "$1")" ]; then fail "$1 is not empty: $(ls "$1")"; fi
}

# ---- --limit trips: the loop named at its position, exit 1 ----
expect_status 1 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit trips=50 --output-dir "$WORK/t1"
# both devices reach the limit; the one that got there first is named
grep -qE "forever.hlo:37:3: error: device [01] \(replica 0, partition [01]\): loop: while loop exceeded 50 iterations \(--limit trips=50\)" "$ERR" ||
    fail "no trip-limit error naming the loop and a device"
no_output "$WORK/t1"
expect_status 1 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit trips=50 --reference
expect_in "$ERR" "forever.hlo:37:3: error: loop: while loop exceeded 50 iterations"
# enough trips: the 5-trip example runs
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/while_loop.hlo" --random-inputs 1 --limit trips=5
expect_status 1 "$TESSEL" run "$TESSEL_SRC/examples/while_loop.hlo" --random-inputs 1 --limit trips=4
expect_status 2 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit trips=0
expect_in "$ERR" "--limit trips needs a whole number"

# ---- --limit memory: refused before running, exit 2 ----
# The figure is the plan's own estimate (tests/unit/test_memory.c and
# memory_plan.sh check the estimate itself).
expect_status 0 "$TESSEL" plan "$FOREVER" --format json -o "$WORK/forever.json"
need=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["clusters"][0]["memory"]["peak_bytes_per_device"])' "$WORK/forever.json")
expect_status 2 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit memory=100
# (the compile first tries to fit it, compile/memfit.c, and names the
# smallest peak it reached from the estimate $need)
expect_in "$ERR" "bytes per device, more than --limit memory=100: the smallest estimated peak that reordering and rematerialization reached ($need before)"
expect_status 1 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit memory=1K --limit trips=3
expect_status 2 "$TESSEL" run "$FOREVER" --random-inputs 1 --limit memory=12Q
expect_in "$ERR" "K, M, G or T"
# T is 1024^4, as docs/cli.md says (it was refused)
expect_status 0 "$TESSEL" compile "$FOREVER" --limit memory=1T -o "$WORK/t.plan"
"${MPIRUN[@]}" "$TESSEL" run "$FOREVER" --random-inputs 1 --limit memory=100 </dev/null >"$OUT" 2>"$ERR" && fail "mpirun --limit memory=100 ran"
expect_in "$ERR" "more than --limit memory=100"

# ---- --timeout: alone and under mpirun, exit 1, no output ----
t0=$(date +%s.%N)
expect_status 1 "$TESSEL" run "$FOREVER" --random-inputs 1 --timeout 1 --output-dir "$WORK/t2"
expect_in "$ERR" "the run took longer than --timeout 1 s and was ended; no output written"
no_output "$WORK/t2"
expect_status 1 "$TESSEL" run "$FOREVER" --random-inputs 1 --timeout 0.5 --reference
expect_in "$ERR" "--timeout 0.5 s"
expect_status 2 "$TESSEL" run "$FOREVER" --timeout -1
got=0
"${MPIRUN[@]}" "$TESSEL" run "$FOREVER" --random-inputs 1 --timeout 1.5 --output-dir "$WORK/t3" </dev/null >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 1 ] || fail "mpirun --timeout exited $got, expected 1"
expect_in "$ERR" "the run took longer than --timeout 1.5 s"
no_output "$WORK/t3"
echo "bounds: --timeout ended 3 runs in $("$PY" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"

# ---- the heartbeat: SIGSTOP each rank in turn ----
# rank_pid TAG R: the pid of rank R of the job whose environment has TAG.
rank_pid() {
    local p
    for p in $(pgrep -x tessel || true); do
        if grep -qzx "TESSEL_TEST_TAG=$1" "/proc/$p/environ" 2>/dev/null &&
            grep -qzx "OMPI_COMM_WORLD_RANK=$2" "/proc/$p/environ" 2>/dev/null; then
            echo "$p"
            return
        fi
    done
}
# wait_rank TAG R: its pid, once both ranks run the loop.
wait_rank() {
    local k pid
    for k in $(seq 100); do
        pid=$(rank_pid "$1" "$2")
        [ -n "$pid" ] && [ -n "$(rank_pid "$1" $((1 - $2)))" ] && { sleep 0.5; echo "$pid"; return; }
        sleep 0.1
    done
    fail "rank $2 of $1 never started"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for victim in 0 1; do
    tag="stop$victim.$$"
    "${MPIRUN[@]}" -x TESSEL_TEST_TAG="$tag" "$TESSEL" run "$FOREVER" --random-inputs 1 --heartbeat 2 \
        --output-dir "$WORK/hb$victim" </dev/null >"$OUT" 2>"$ERR" &
    job=$!
    pid=$(wait_rank "$tag" $victim)
    survivor=$(rank_pid "$tag" $((1 - victim)))
    t0=$(date +%s.%N)
    kill -STOP "$pid"
    # the survivor waits in a collective, polling: it must not spin a core
    c0=$(cpu_ticks "$survivor" 2>/dev/null || echo 0)
    sleep 1
    c1=$(cpu_ticks "$survivor" 2>/dev/null || echo "$c0")
    got=0
    wait "$job" || got=$?
    t1=$(date +%s.%N)
    kill -CONT "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    [ "$got" = 1 ] || fail "SIGSTOP of rank $victim: mpirun exited $got, expected 1"
    expect_in "$ERR" "rank $victim has not been heard from for"
    expect_in "$ERR" "(--heartbeat 2 s): it stopped, hung or lost its host; ending the job, no output written"
    no_output "$WORK/hb$victim"
    # 1 s of waiting: under 50 ticks (0.5 s of CPU at 100 ticks a second)
    [ $((c1 - c0)) -lt 50 ] || fail "the survivor used $((c1 - c0)) ticks of CPU in 1 s of waiting"
    secs=$("$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
    "$PY" -c "import sys; sys.exit(float(sys.argv[1]) > 10)" "$secs" || fail "rank $victim stopped: the job took $secs s to end"
    echo "bounds: rank $victim stopped (SIGSTOP), --heartbeat 2: the job ended after $secs s; the waiting rank used $((c1 - c0)) CPU ticks in 1 s"
done

# a never-ending loop under mpirun with every rank alive: --limit trips ends it
got=0
"${MPIRUN[@]}" "$TESSEL" run "$FOREVER" --random-inputs 1 --limit trips=200 </dev/null >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 1 ] || fail "mpirun --limit trips exited $got"
expect_in "$ERR" "while loop exceeded 200 iterations (--limit trips=200)"

# ---- a deadlocked collective: rank 1 skips one ----
# mlp on 2 ranks: collectives 1-2 the load agreement (the world's), then
# the run's agreements 1-2, device call 3, the all-reduce 4 (the 5th
# collective counted), the gather 5. Skipping the all-reduce leaves rank 1
# at the gather while rank 0 waits in the all-reduce.
for n in 5 3; do
    got=0
    "${MPIRUN[@]}" -x TESSEL_SKIP_COLLECTIVE_AFTER=$n -x TESSEL_FAIL_MPI_RANK=1 "$TESSEL" run \
        "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --num-partitions 2 --heartbeat 5 \
        --output-dir "$WORK/skip$n" </dev/null >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = 1 ] || fail "skipped collective $n: mpirun exited $got"
    expect_in "$ERR" "the ranks diverged (one skipped a collective, took another path or runs another program); ending the job"
    no_output "$WORK/skip$n"
done
expect_in "$ERR" "an agreement on the exit status"
"${MPIRUN[@]}" -x TESSEL_SKIP_COLLECTIVE_AFTER=x "$TESSEL" run "$FOREVER" </dev/null >"$OUT" 2>"$ERR" && fail "a bad TESSEL_SKIP_COLLECTIVE_AFTER ran"
expect_in "$ERR" "TESSEL_SKIP_COLLECTIVE_AFTER=x: expected a non-negative integer"

# ---- checkpoints: alone ----
SGD="$WORK/sgd.hlo"
sed 's/constant(0.1)/constant(0.01)/' "$TESSEL_SRC/tests/e2e/sgd_step.hlo" >"$SGD"
npy_write "$WORK/w0.npy" '<f4' 4 0.5 -0.25 0.125 1
same_bits() { cmp "$1/output_0.npy" "$2/output_0.npy" && cmp "$1/output_1.npy" "$2/output_1.npy" || fail "$2 differs from $1"; }
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input w="$WORK/w0.npy" --steps 40 --output-dir "$WORK/full"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input w="$WORK/w0.npy" --steps 39 --output-dir "$WORK/short"
cmp -s "$WORK/full/output_0.npy" "$WORK/short/output_0.npy" && fail "39 and 40 steps give the same w"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input w="$WORK/w0.npy" --steps 40 --checkpoint-every 7 \
    --checkpoint-dir "$WORK/ck" --output-dir "$WORK/chunked"
same_bits "$WORK/full" "$WORK/chunked"
[ "$(ls "$WORK/ck")" = "$(printf 'step-14\nstep-21\nstep-28\nstep-35\nstep-7')" ] || fail "checkpoints: $(ls "$WORK/ck")"
expect_in "$WORK/ck/step-35/checkpoint.json" '"step": 35, "steps": 40'
expect_in "$WORK/ck/step-35/checkpoint.json" '"aliases": [{"output": 0, "parameter": 1}]'
# the checkpoint's w is the 35-step w
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input w="$WORK/w0.npy" --steps 35 --output-dir "$WORK/s35"
cmp "$WORK/s35/output_0.npy" "$WORK/ck/step-35/output_0.npy" || fail "step-35 is not the state after 35 steps"
# resume from the last complete one, and from an earlier one
rm -rf "$WORK/ck/step-35" && mkdir "$WORK/ck/.step-35.half" # a temporary left by a killed run is ignored
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input w="$WORK/w0.npy" --steps 40 --resume "$WORK/ck" \
    --output-dir "$WORK/resumed"
same_bits "$WORK/full" "$WORK/resumed"
# refused: another program's checkpoints, past the steps, missing options
sed 's/0.01/0.02/' "$SGD" >"$WORK/sgd2.hlo"
expect_status 2 "$TESSEL" run "$WORK/sgd2.hlo" --random-inputs 3 --steps 40 --resume "$WORK/ck"
expect_in "$ERR" "its checkpoints belong to another program"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 20 --resume "$WORK/ck"
expect_in "$ERR" "the last checkpoint is at step 28, past --steps 20"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 20 --checkpoint-every 5
expect_in "$ERR" "checkpoints need both --checkpoint-every M and --checkpoint-dir DIR"
expect_status 2 "$TESSEL" run "$FOREVER" --random-inputs 3 --checkpoint-every 5 --checkpoint-dir "$WORK/ckf"
expect_in "$ERR" "this module aliases no output to a parameter"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 20 --resume "$WORK/nothing"

# ---- checkpoints under mpirun: SIGKILL a rank mid-run, resume ----
STEPS=2000
"${MPIRUN[@]}" "$TESSEL" run "$SGD" --random-inputs 3 --steps $STEPS --output-dir "$WORK/mfull" </dev/null >"$OUT" 2>"$ERR" ||
    fail "mpirun --steps $STEPS failed"
tag="kill.$$"
"${MPIRUN[@]}" -x TESSEL_TEST_TAG="$tag" "$TESSEL" run "$SGD" --random-inputs 3 --steps $STEPS --checkpoint-every 100 \
    --checkpoint-dir "$WORK/mck" --output-dir "$WORK/mkilled" </dev/null >"$OUT" 2>"$ERR" &
job=$!
for k in $(seq 300); do [ -d "$WORK/mck/step-300" ] && break; sleep 0.05; done
[ -d "$WORK/mck/step-300" ] || fail "no checkpoint step-300 after 15 s"
victim=$(rank_pid "$tag" 1)
[ -n "$victim" ] || fail "rank 1 ended before it could be killed"
kill -KILL "$victim"
got=0
wait "$job" || got=$?
[ "$got" != 0 ] || fail "the killed job exited 0"
no_output "$WORK/mkilled"
last=$(ls "$WORK/mck" | grep '^step-' | sed 's/step-//' | sort -n | tail -1)
[ "$last" -lt $STEPS ] || fail "the job finished before the kill"
"${MPIRUN[@]}" "$TESSEL" run "$SGD" --random-inputs 3 --steps $STEPS --checkpoint-every 100 --resume "$WORK/mck" \
    --output-dir "$WORK/mresumed" --stats </dev/null >"$OUT" 2>"$ERR" || fail "mpirun --resume failed"
same_bits "$WORK/mfull" "$WORK/mresumed"
echo "bounds: rank 1 killed after step $last of $STEPS; resumed: bit-identical; $(grep 'checkpoints:' "$ERR" | sed 's/tessel: stats: //')"

echo "bounds: all passed"
