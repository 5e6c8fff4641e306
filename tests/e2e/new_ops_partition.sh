#!/usr/bin/env bash
# new_ops_partition.sh: a module using opcodes the HLO language issue added
# (fusion, a sugared abs-start/abs-done, batch-norm-training, topk) goes
# through `tessel compile --num-partitions 2` by their own rules, none by
# the fallback: the fusion and the async pair run on the row shards (the
# fused and the wrapped computations partitioned as calls, the sugared
# form kept), batch-norm-training all-reduces its statistics over the
# sharded rows, topk sorts each device's rows; status 0 and a plan that
# prints the ops back; `tessel run` on it equals --reference.
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
expect_in "$WORK/plan.hlo" 'f = f32[4,4] fusion(x), kind=kLoop, calls=fused'
expect_in "$WORK/plan.hlo" 's = ((f32[4,4]), f32[4,4], s32[]) abs-start(f)'
expect_in "$WORK/plan.hlo" 'all-reduce('
if grep -q 'TesselFallback' "$WORK/plan.hlo"; then fail "the plan names a fallback: $(grep TesselFallback "$WORK/plan.hlo")"; fi
if grep -q 'all-gather' "$WORK/plan.hlo"; then fail "the plan gathers an operand"; fi
expect_in "$WORK/plan.hlo" ') topk(g), k=2, largest=true' # the model's names kept
expect_in "$WORK/plan.hlo" 'epsilon=0.00100000005, feature_index=1'
# the wrapper computation is printed inside abs-start, not on its own
if grep -q '\.wrapped' "$WORK/plan.hlo"; then fail "the async wrapper computation was printed"; fi

expect_status 0 "$TESSEL" run "$WORK/m.hlo" --num-partitions 2 --random-inputs 1 --output-dir "$WORK/o"
expect_status 0 "$TESSEL" run "$WORK/m.hlo" --reference --random-inputs 1 --output-dir "$WORK/r"
npy_match "$WORK/r/output_0.npy" "$WORK/o/output_0.npy" || fail "partitioned run differs from the reference"
echo "new_ops_partition: ok"
