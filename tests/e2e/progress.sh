#!/usr/bin/env bash
# progress.sh: what a long run says (issue 31): steps counted over the
# whole run, across checkpoints and resumes (step 1501 of 2000, never
# "step 1 of 500" again), each watched loss on the line of its own step
# (checked against the reference's loss after that many steps), a line for
# each checkpoint written and one where a run resumes; a run killed with
# SIGKILL and resumed, alone and under mpirun -np 2, where rank 0 prints
# --watch lines without --progress.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2)
SGD="$TESSEL_SRC/tests/e2e/plan_views/sgd_loss.hlo"

# loss_after K: the reference's loss after K steps (output 1 of the K-th step)
loss_after() {
    "$TESSEL" run "$SGD" --reference --random-inputs 3 --steps "$1" --output-dir "$WORK/ref$1" >/dev/null
    "$PY" -c "import struct,sys; d=open(sys.argv[1],'rb').read(); print('%.6g' % struct.unpack('<f', d[-4:])[0])" \
        "$WORK/ref$1/output_1.npy"
}
# steps_are FILE FIRST LAST: FILE's progress lines name steps FIRST..LAST of K, in order, once each
steps_are() {
    local got want
    got=$(sed -n 's/^tessel: step \([0-9]*\) of [0-9]*: .*/\1/p' "$1" | tr '\n' ' ')
    want=$(seq "$2" "$3" | tr '\n' ' ')
    [ "$got" = "$want" ] || fail "progress lines name steps '$got', expected $2..$3"
}
# same_loss FILE STEP: the loss on step STEP's line is the reference's after STEP steps
same_loss() {
    local got want
    got=$(sed -n "s/^tessel: step $2 of [0-9]*: .*, loss \(.*\)$/\1/p" "$1")
    want=$(loss_after "$2")
    "$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b) > 1e-5*max(1,abs(b)))" \
        "$got" "$want" || fail "the line of step $2 shows loss '$got'; after $2 steps the reference's is $want"
}

# ---- alone: a checkpointed run counts its steps over the whole run ----
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 40 --checkpoint-every 10 --checkpoint-dir "$WORK/ck" \
    --watch loss --progress --output-dir "$WORK/o1"
steps_are "$ERR" 1 40
grep -q "^tessel: step 11 of 40: " "$ERR" || fail "the second chunk's first step is not step 11 of 40"
for s in 10 20 30 40; do
    expect_in "$ERR" "tessel: checkpoint $WORK/ck/step-$s written (step $s of 40)"
done
[ "$(grep -c 'written (step' "$ERR")" = 4 ] || fail "not one line per checkpoint"
for s in 1 10 11 40; do same_loss "$ERR" $s; done
# a checkpoint directory whose name holds an escape byte: the line shows it
# as \x1b (as errors do), never the terminal's escape sequence itself
esc="$WORK/ck"$'\e'"[1m"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 2 --checkpoint-every 1 --checkpoint-dir "$esc" --progress
expect_in "$ERR" 'tessel: checkpoint '"$WORK"'/ck\x1b[1m/step-2 written (step 2 of 2)'
! grep -q $'\e' "$ERR" || fail "a progress line printed the directory's escape byte raw"
# resumed: a line says from where, and the steps go on from there
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 60 --checkpoint-every 10 --resume "$WORK/ck" \
    --watch loss --progress --output-dir "$WORK/o2"
expect_in "$ERR" "tessel: resumed from $WORK/ck/step-40 (step 40 of 60)"
steps_are "$ERR" 41 60
same_loss "$ERR" 41
same_loss "$ERR" 60
echo "progress: alone: steps 1..40 across 4 checkpoints, resumed at 41..60, each loss that of its step"

# ---- on a terminal: the redrawn line shows a step with its own loss ----
if command -v script >/dev/null 2>&1; then
    script -qec "$TESSEL run $SGD --random-inputs 3 --steps 30 --checkpoint-every 10 --checkpoint-dir $WORK/ckt --watch loss" \
        /dev/null >"$WORK/pty.txt"
    tr '\r' '\n' <"$WORK/pty.txt" | sed 's/\x1b\[K//g' >"$WORK/pty.lines"
    # every redrawn "step N of 30, ... a step, loss X" shows step N's loss
    n=0
    while read -r s x; do
        want=$(loss_after "$s")
        "$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b) > 1e-5*max(1,abs(b)))" \
            "$x" "$want" || fail "on a terminal the line of step $s shows loss $x; after $s steps the reference's is $want"
        n=$((n + 1))
    done < <(sed -n 's/^tessel: step \([0-9]*\) of 30, .* a step, loss \(.*\)$/\1 \2/p' "$WORK/pty.lines" | sort -u | head -5)
    [ "$n" -gt 0 ] || fail "no redrawn progress line on a terminal: $(od -c "$WORK/pty.txt" | head)"
    grep -q "^tessel: 30 of 30 steps, " "$WORK/pty.lines" || fail "no summary of 30 of 30 steps on a terminal"
    grep -q "^tessel: 10 of 30 steps" "$WORK/pty.lines" && fail "a chunk's end printed a summary of its own"
    grep -q "^tessel: checkpoint $WORK/ckt/step-20 written (step 20 of 30)" "$WORK/pty.lines" ||
        fail "no checkpoint line on a terminal"
    echo "progress: on a terminal: $n redrawn lines checked, each with its own step's loss"
fi

# ---- alone: killed with SIGKILL, resumed ----
STEPS=400000
"$TESSEL" run "$SGD" --random-inputs 3 --steps $STEPS --checkpoint-every 2000 --checkpoint-dir "$WORK/kk" \
    --output-dir "$WORK/killed" >"$OUT" 2>"$ERR" &
job=$!
for k in $(seq 600); do [ -d "$WORK/kk/step-4000" ] && break; sleep 0.05; done
[ -d "$WORK/kk/step-4000" ] || fail "no checkpoint step-4000 after 30 s"
kill -KILL $job
wait $job && fail "the killed run exited 0"
last=$(ls "$WORK/kk" | grep '^step-' | sed 's/step-//' | sort -n | tail -1)
[ "$last" -lt $STEPS ] || fail "the run finished before the kill"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps $((last + 3)) --checkpoint-every 2000 --resume "$WORK/kk" \
    --watch loss --progress --output-dir "$WORK/r1"
expect_in "$ERR" "tessel: resumed from $WORK/kk/step-$last (step $last of $((last + 3)))"
steps_are "$ERR" $((last + 1)) $((last + 3))
echo "progress: alone: killed after checkpoint step-$last, resumed at step $((last + 1))"

# ---- under mpirun -np 2: --watch prints on rank 0 alone, without --progress ----
if command -v mpirun >/dev/null 2>&1; then
    expect_status 0 "${MPIRUN[@]}" "$TESSEL" run "$SGD" --random-inputs 3 --steps 20 --checkpoint-every 10 \
        --checkpoint-dir "$WORK/mk" --watch loss --output-dir "$WORK/m1" </dev/null
    steps_are "$ERR" 1 20
    same_loss "$ERR" 20
    [ "$(grep -c "checkpoint $WORK/mk/step-10 written" "$ERR")" = 1 ] || fail "mpirun: not one checkpoint line (rank 0's)"
    # SIGKILL rank 1 mid-run, resume
    tag="progress.$$"
    "${MPIRUN[@]}" -x TESSEL_TEST_TAG="$tag" "$TESSEL" run "$SGD" --random-inputs 3 --steps 100000 \
        --checkpoint-every 200 --checkpoint-dir "$WORK/mkk" --output-dir "$WORK/mkilled" </dev/null >"$OUT" 2>"$ERR" &
    job=$!
    for k in $(seq 600); do [ -d "$WORK/mkk/step-400" ] && break; sleep 0.05; done
    [ -d "$WORK/mkk/step-400" ] || fail "mpirun: no checkpoint step-400 after 30 s"
    victim=
    for p in $(pgrep -x tessel || true); do
        if grep -qzx "TESSEL_TEST_TAG=$tag" "/proc/$p/environ" 2>/dev/null &&
            grep -qzx "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2>/dev/null; then victim=$p; fi
    done
    [ -n "$victim" ] || fail "rank 1 ended before it could be killed"
    kill -KILL "$victim"
    wait $job && fail "the job whose rank was killed exited 0"
    last=$(ls "$WORK/mkk" | grep '^step-' | sed 's/step-//' | sort -n | tail -1)
    expect_status 0 "${MPIRUN[@]}" "$TESSEL" run "$SGD" --random-inputs 3 --steps $((last + 3)) --checkpoint-every 200 \
        --resume "$WORK/mkk" --watch loss --output-dir "$WORK/mr" </dev/null
    [ "$(grep -c "tessel: resumed from $WORK/mkk/step-$last (step $last of $((last + 3)))" "$ERR")" = 1 ] ||
        fail "mpirun: not one line saying where the run resumed"
    steps_are "$ERR" $((last + 1)) $((last + 3))
    echo "progress: mpirun -np 2: rank 0 prints --watch lines; rank 1 killed after step-$last, resumed at $((last + 1))"
fi
echo "progress: ok"
