#!/usr/bin/env bash
# new_ops_rules.sh: the ops the HLO language issue added have partitioner
# rules, not the fallback: each model of tests/models exercising them
# (the oracle runs them in test_oracle.c) compiles on 3 devices with no
# `// TesselFallback` line in its plan, and the plans show the collectives
# each rule is meant to emit: batch-norm's statistics all-reduce,
# ragged-dot's sharded contracting dim reduce-scatters into its sharded
# result, rng-bit-generator moves nothing, bitcast-convert moves only
# what its users' shardings ask.
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

for m in batch_norm_sharded fft_sharded topk_sharded linalg_sharded lapack_sharded ragged_dot_sharded \
         rng_sharded fusion_async_sharded bitcast_convert_sharded; do
    plan "$m"
done
# bitcast_convert_sharded: the one all-gather is the reshard of its bytes
# from rows to columns (the add's sharding), which both of the add's
# operands read (partition/reshard_cache.c; two before), none for a
# bitcast-convert.
[ "$(grep -c '^// TesselCollective' "$WORK/bitcast_convert_sharded.plan")" = 1 ] ||
    fail "bitcast_convert_sharded: expected the 1 all-gather of the rows-to-columns reshard"
# A narrowing bitcast-convert whose result tiles its new minor dim (the
# bytes of one element) as well as its rows: each device converts its rows
# whole and keeps its half of the bytes, no collective, the reference's bits.
cat >"$WORK/bc_minor.hlo" <<'HLO'
HloModule s, num_partitions=4

ENTRY e {
  x = f32[4,6] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT b = u8[4,6,4] bitcast-convert(x), sharding={devices=[2,1,2]0,1,2,3}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/bc_minor.hlo" -o "$WORK/bc_minor.plan"
grep -q '^// TesselFallback' "$WORK/bc_minor.plan" && fail "bc_minor: a fallback"
grep -q '^// TesselCollective' "$WORK/bc_minor.plan" && fail "bc_minor: a collective"
expect_status 0 "$TESSEL" run "$WORK/bc_minor.hlo" --reference --random-inputs 4 --output-dir "$WORK/bcr"
expect_status 0 "$TESSEL" run "$WORK/bc_minor.hlo" --random-inputs 4 --output-dir "$WORK/bcp"
npy_match "$WORK/bcr/output_0.npy" "$WORK/bcp/output_0.npy" || fail "bc_minor partitioned differs"
[ "$(grep -c '^// TesselCollective .* all-reduce ' "$WORK/batch_norm_sharded.plan")" = 4 ] ||
    fail "batch_norm_sharded: expected 4 all-reduces of statistics"
expect_in "$WORK/ragged_dot_sharded.plan" ' reduce-scatter('
expect_in "$WORK/fusion_async_sharded.plan" 'abs-start('
expect_in "$WORK/fusion_async_sharded.plan" 'kind=kInput'
if grep -q '^// TesselCollective' "$WORK/rng_sharded.plan"; then
    fail "rng_sharded: the bits need no collective"
fi

# Shard draws: on 3 devices u32[8,3]'s rows are 3,3,2 (a shard of 3 rows is
# odd: its pairs would straddle devices, so it is drawn whole), u32[9,4]
# (Philox) draws 12 words + 3 of slack from the moved counter, u32[5,3,4]
# (ThreeFry cut on dim 2) 2 rows drawn as 3 (dim 0 kept odd); u32[7,5]
# has no even dim and is drawn whole.
plan rng_shard_draw
for want in 'u32[7,5]) rng-bit-generator' 'u32[8,3]) rng-bit-generator' 'u32[15]) rng-bit-generator' \
            'u32[3,3,4]) rng-bit-generator' 'u64[7]) rng-bit-generator' 'u64[2,3]) rng-bit-generator' \
            'u8[15]) rng-bit-generator' 'u16[4,1,3]) rng-bit-generator'; do
    expect_in "$WORK/rng_shard_draw.plan" "$want"
done
# Counters that wrap past 2^64 (a carry into Philox's high word, ThreeFry's
# 64-bit wrap) give the reference's bits too.
"$PY" -c "
import numpy as np
np.save('$WORK/s2.npy', np.array([0x1234567890abcdef, 2**64 - 3], dtype=np.uint64))
np.save('$WORK/s3.npy', np.array([0xfedcba0987654321, 2**64 - 2, 2**64 - 1], dtype=np.uint64))"
m=$(instantiate "$TESSEL_SRC/tests/models/rng_shard_draw.hlo" 3)
expect_status 0 "$TESSEL" run "$m" --reference --input 0="$WORK/s2.npy" --input 1="$WORK/s3.npy" --output-dir "$WORK/wr"
expect_status 0 "$TESSEL" run "$m" --input 0="$WORK/s2.npy" --input 1="$WORK/s3.npy" --output-dir "$WORK/wp"
for f in "$WORK"/wr/output_*.npy; do
    npy_match "$f" "$WORK/wp/$(basename "$f")" || fail "rng_shard_draw: $(basename "$f") differs after the counter wraps"
done
# Ops still without a rule are named: rng (its draws follow the run's
# seed, element by element over the whole shape). map is elementwise.
cat >"$WORK/rng.hlo" <<'HLO'
HloModule s, num_partitions=2

ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  ROOT r = f32[4,3] rng(lo, hi), distribution=rng_uniform, sharding={devices=[2,1]0,1}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/rng.hlo" -o "$WORK/rng.plan"
expect_in "$WORK/rng.plan" '// TesselFallback r'
cat >"$WORK/map.hlo" <<'HLO'
HloModule s, num_partitions=2

neg {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}

ENTRY e {
  x = f32[5] parameter(0), sharding={devices=[2]0,1}
  ROOT m = f32[5] map(x), dimensions={0}, to_apply=neg
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/map.hlo" -o "$WORK/map.plan"
grep -q '^// TesselFallback' "$WORK/map.plan" && fail "map: a fallback"
grep -q '^// TesselCollective' "$WORK/map.plan" && fail "map: a collective"
expect_status 0 "$TESSEL" run "$WORK/map.hlo" --reference --random-inputs 4 --output-dir "$WORK/mr"
expect_status 0 "$TESSEL" run "$WORK/map.hlo" --random-inputs 4 --output-dir "$WORK/mp"
npy_match "$WORK/mr/output_0.npy" "$WORK/mp/output_0.npy" || fail "map partitioned differs"
# A scan is a while loop by then (partition/expand_scan.c): over its
# sharded scanned dim only the step's dynamic-slice gathers; no scan is
# left in the program.
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
grep -q ' scan(' "$WORK/scan.plan" && fail "scan: still a scan in the SPMD program"
expect_in "$WORK/scan.plan" ' while('
expect_status 0 "$TESSEL" run "$WORK/scan.hlo" --reference --random-inputs 4 --output-dir "$WORK/scr"
expect_status 0 "$TESSEL" run "$WORK/scan.hlo" --random-inputs 4 --output-dir "$WORK/scp"
for f in "$WORK"/scr/output_*.npy; do
    npy_match "$f" "$WORK/scp/$(basename "$f")" || fail "scan over its sharded dim: $(basename "$f") differs"
done
echo "new_ops_rules: ok"
