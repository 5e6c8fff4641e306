#!/usr/bin/env bash
# new_ops_rules.sh: the ops the HLO language issue added have partitioner
# rules, not the fallback: each model of tests/models exercising them
# (the oracle runs them in test_oracle.c) compiles on 3 devices with no
# `// TesselFallback` line in its plan, and the plans show the collectives
# each rule is meant to emit: batch-norm's statistics and ragged-dot's
# sharded contracting dim all-reduce, rng-bit-generator moves nothing.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

plan() { # MODEL: the plan of tests/models/MODEL.hlo on 3 devices, in $WORK/MODEL.plan
    local m
    m=$(instantiate "$TESSEL_SRC/tests/models/$1.hlo" 3)
    expect_status 0 "$TESSEL" compile "$m" -o "$WORK/$1.plan"
    if grep -q '^// TesselFallback' "$WORK/$1.plan"; then
        fail "$1: fallback for $(grep '^// TesselFallback' "$WORK/$1.plan" | cut -d' ' -f3 | tr '\n' ' ')"
    fi
}

for m in batch_norm_sharded fft_sharded topk_sharded linalg_sharded ragged_dot_sharded \
         rng_sharded fusion_async_sharded; do
    plan "$m"
done
[ "$(grep -c '^// TesselCollective .* all-reduce ' "$WORK/batch_norm_sharded.plan")" = 4 ] ||
    fail "batch_norm_sharded: expected 4 all-reduces of statistics"
expect_in "$WORK/ragged_dot_sharded.plan" ' all-reduce('
expect_in "$WORK/fusion_async_sharded.plan" 'abs-start('
expect_in "$WORK/fusion_async_sharded.plan" 'kind=kInput'
if grep -q '^// TesselCollective' "$WORK/rng_sharded.plan"; then
    fail "rng_sharded: the bits need no collective"
fi
# Ops still without a rule are named: scan over its scanned (sharded) dim.
cat >"$WORK/scan.hlo" <<'HLO'
HloModule s, num_partitions=2

sum {
  in = f32[] parameter(0)
  carry = f32[] parameter(1)
  add = f32[] add(carry, in)
  ROOT t = (f32[], f32[]) tuple(add, add)
}

ENTRY e {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  init = f32[] constant(0.5)
  ROOT s = (f32[4], f32[]) scan(x, init), dimensions={0}, num_carries=1, to_apply=sum
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/scan.hlo" -o "$WORK/scan.plan"
expect_in "$WORK/scan.plan" '// TesselFallback s'
echo "new_ops_rules: ok"
