#!/usr/bin/env bash
# stats_ops.sh: `tessel run --stats=ops` (docs/cli.md), the per-instruction
# times of each device. Checked, never a time itself: which instructions
# each device's table lists (the dot, the all-reduce the partitioner put
# after it with its wait and transfer, the fused chain at its root with
# its size), how many calls each made (the steps after the first; a while
# body's instructions once a trip), that the rows, the others and the
# time outside the instructions add up to the step (100%) and that the
# instructions hold most of it (a model of milliseconds a step, whose
# executor bookkeeping is microseconds); under mpirun every rank's table,
# gathered to rank 0 in rank order; results bit for bit those of a run
# without it; no table without =ops; and the refusals.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self)
M="$TESSEL_SRC/tests/models/stats_ops.hlo"

# Device D's table: the sum of every share (rows, others, outside) and of
# the instructions' alone (outside left out).
shares() { # shares FILE D
    "$PY" - "$@" <<'PY'
import re, sys
text, dev = open(sys.argv[1]).read(), sys.argv[2]
table = text.split("tessel: stats: ops of device %s:" % dev)[1].split("tessel: stats: ops of device")[0]
total = inner = 0.0
for line in table.splitlines()[2:]:
    m = re.search(r" ([0-9.]+)%", line)
    if not m or "stats:   " not in line:
        continue
    total += float(m.group(1))
    if "outside the instructions" not in line:
        inner += float(m.group(1))
print("%.1f %.1f" % (total, inner))
PY
}

calls_of() { # calls_of FILE D NAME: the calls column of NAME's row
    "$PY" - "$@" <<'PY'
import re, sys
text, dev, name = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
table = text.split("tessel: stats: ops of device %s:" % dev)[1].split("tessel: stats: ops of device")[0]
for line in table.splitlines():
    m = re.match(r"tessel: stats:   (\S+) +(\S+) +(.*?) +(\d+) +[0-9.]+ +[0-9.]+%", line)
    if m and m.group(1) == name:
        print(m.group(4))
        break
PY
}

# ---- two devices in one process, 4 steps: 3 timed ----
expect_status 0 "$TESSEL" run "$M" --random-inputs 1 --steps 4 --stats=ops --output-dir "$WORK/ops"
cp "$ERR" "$WORK/ops.err"
for d in 0 1; do
    expect_in "$WORK/ops.err" "tessel: stats: ops of device $d: 3 steps timed"
    grep -qE "tessel: stats:   h +dot +f32\[256,256\] +3 " "$WORK/ops.err" || fail "no row of the dot h"
    grep -qE "tessel: stats:   all-reduce[^ ]* +all-reduce +f32\[256,256\] +3 .*  wait [0-9.]+, transfer [0-9.]+$" \
        "$WORK/ops.err" || fail "no row of the all-reduce with its wait and transfer"
    grep -qE "tessel: stats:   r +add +f32\[256,256\] +3 .*  fusion of 3$" "$WORK/ops.err" ||
        fail "no row of the fused chain at its root r"
    # tanh and multiply run inside r's loop: no rows of their own
    ! grep -qE "tessel: stats:   (t|m) " "$WORK/ops.err" || fail "a fused instruction has its own row"
    read -r total inner <<<"$(shares "$WORK/ops.err" $d)"
    "$PY" -c "import sys; t, i = $total, $inner; sys.exit(not (99.0 <= t <= 101.0 and i > 50.0))" ||
        fail "device $d: shares add up to $total% (instructions $inner%)"
done
# The same bits as a run without the clock.
expect_status 0 "$TESSEL" run "$M" --random-inputs 1 --steps 4 --output-dir "$WORK/plain"
cmp -s "$WORK/ops/output_0.npy" "$WORK/plain/output_0.npy" || fail "--stats=ops changed the result"
! grep -q "ops of device" "$ERR" || fail "a table without --stats=ops"
expect_status 0 "$TESSEL" run "$M" --random-inputs 1 --steps 4 --stats
! grep -q "ops of device" "$ERR" || fail "a table with --stats alone"

# ---- one step: that one is timed ----
expect_status 0 "$TESSEL" run "$M" --random-inputs 1 --stats=ops
expect_in "$ERR" "tessel: stats: ops of device 0: 1 step timed"
[ "$(calls_of "$ERR" 0 h)" = 1 ] || fail "one step: the dot's calls"

# ---- a while loop: its body's instructions once a trip (5), its own self time ----
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/while_loop.hlo" --random-inputs 1 --steps 3 --stats=ops
expect_in "$ERR" "tessel: stats: ops of device 0: 2 steps timed"
[ "$(calls_of "$ERR" 0 loop)" = 2 ] || fail "while: the loop's calls"
[ "$(calls_of "$ERR" 0 sum)" = 10 ] || fail "while: the body's add, once a trip"
[ "$(calls_of "$ERR" 0 more)" = 12 ] || fail "while: the condition, once a trip and once more"
read -r total inner <<<"$(shares "$ERR" 0)"
"$PY" -c "import sys; sys.exit(not 99.0 <= $total <= 101.0)" || fail "while: shares add up to $total%"

# ---- under mpirun: rank 0 prints every rank's device table, in order ----
expect_status 0 "$TESSEL" compile "$M" --hosts 2 -o "$WORK/m.plan"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/m.plan" --random-inputs 1 --steps 3 --stats=ops \
    --output-dir "$WORK/mpi"
expect_in "$ERR" "tessel: stats: ops of device 0: 2 steps timed"
expect_in "$ERR" "tessel: stats: ops of device 1: 2 steps timed"
[ "$(grep -c "tessel: stats: ops of device" "$ERR")" = 2 ] || fail "mpirun: not one table a rank"
grep "tessel: stats: ops of device" "$ERR" | head -1 | grep -q "device 0:" || fail "mpirun: rank 1's table first"
[ "$(grep -cE "tessel: stats:   all-reduce[^ ]* +all-reduce +f32\[256,256\] +2 .*  wait [0-9.]+, transfer [0-9.]+$" \
    "$ERR")" = 2 ] || fail "mpirun: not a row of the all-reduce in each table"
for dev in 0 1; do
    read -r total inner <<<"$(shares "$ERR" $dev)"
    "$PY" -c "import sys; sys.exit(not 99.0 <= $total <= 101.0)" || fail "mpirun: device $dev's shares add up to $total%"
done
"$PY" - "$WORK/ops/output_0.npy" "$WORK/mpi/output_0.npy" <<'PY' || fail "mpirun: the result differs"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert np.abs(a - b).max() <= 1e-4 * np.abs(a).max()
PY

# ---- refusals: status 2, saying why ----
expect_status 2 "$TESSEL" run "$M" --random-inputs 1 --stats=op
expect_in "$ERR" "--stats takes no value, or =ops (per-instruction times), not 'op'"
expect_status 2 "$TESSEL" run "$M" --random-inputs 1 --stats=ops --reference
expect_in "$ERR" "--stats=ops times the devices of a partitioned run"
expect_status 2 "$TESSEL" check "$M" --stats=ops
expect_in "$ERR" "--stats=ops times the instructions of a run: 'tessel run', not 'tessel check'"
expect_status 2 "$TESSEL" run "$M" --random-inputs 1 --stats=ops --stats
expect_in "$ERR" "option --stats given twice"
echo "stats_ops: ok"
