#!/usr/bin/env bash
# new_ops_partition.sh: a module using opcodes of XLA's full list that the
# partitioner has no handler for (fusion, a sugared abs-start/abs-done,
# topk, cholesky, batch-norm-training, send/recv) goes through `tessel
# compile --num-partitions 2` by the fallback (replicate, compute whole):
# status 0 and a plan that prints the ops back, the sugared async form
# included; and `tessel run` on it either runs or refuses with a
# FILE:LINE:COL error (status 2), never an internal error or a crash.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

cat >"$WORK/m.hlo" <<'HLO'
HloModule m, num_partitions=2

fused {
  p = f32[8,4] parameter(0)
  ROOT n = f32[8,4] negate(p)
}

ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  sc = f32[4] parameter(1)
  f = f32[8,4] fusion(x), kind=kLoop, calls=fused
  s = ((f32[8,4]), f32[8,4], s32[]) abs-start(f), async_execution_thread="parallel_thread"
  d = f32[8,4] abs-done(s)
  bn = (f32[8,4], f32[4], f32[4]) batch-norm-training(d, sc, sc), epsilon=0.001, feature_index=1
  g = f32[8,4] get-tuple-element(bn), index=0
  t = (f32[8,2], s32[8,2]) topk(g), k=2, largest=true
  ROOT v = f32[8,2] get-tuple-element(t), index=0
}
HLO

expect_status 0 "$TESSEL" compile "$WORK/m.hlo" --num-partitions 2 -o "$WORK/plan.hlo"
expect_in "$WORK/plan.hlo" 'abs-start(f), async_execution_thread="parallel_thread"'
expect_in "$WORK/plan.hlo" 'fusion(all-gather), kind=kLoop, calls=fused'
expect_in "$WORK/plan.hlo" ') topk(get-tuple-element), k=2, largest=true'
expect_in "$WORK/plan.hlo" 'epsilon=0.00100000005, feature_index=1'
# the wrapper computation is printed inside abs-start, not on its own
if grep -q '\.wrapped' "$WORK/plan.hlo"; then fail "the async wrapper computation was printed"; fi

st=0
"$TESSEL" run "$WORK/m.hlo" --num-partitions 2 --random-inputs 1 --output-dir "$WORK/o" >"$OUT" 2>"$ERR" || st=$?
case "$st" in
0) ;;
2) head -1 "$ERR" | grep -Eq "^tessel: $WORK/m.hlo:[0-9]+:[0-9]+: error: " ||
       fail "run refused the module without a FILE:LINE:COL error" ;;
*) fail "run exited $st" ;;
esac
if grep -qi "internal" "$ERR"; then fail "run reported an internal error"; fi
echo "new_ops_partition: ok (run status $st)"
