#!/usr/bin/env bash
# lowered_count.sh: a module as JAX lowers it (`.as_text("hlo")`) names its
# devices in its shardings but has no num_partitions in its header (JAX
# leaves the count to the compile options). Compiled without
# --num-partitions, tessel says which count to pass, at the first sharded
# value's FILE:LINE:COL, with exit status 2 (it said "device 1 is out of
# range [0, 1)" before); with the count it compiles.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

M="$WORK/lowered.hlo"
cat >"$M" <<'HLO'
HloModule jit_f, entry_computation_layout={(f32[8,4]{1,0})->f32[8,4]{1,0}}

ENTRY main.1 {
  x.1 = f32[8,4]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT n = f32[8,4]{1,0} negate(x.1), sharding={devices=[4,1]<=[4]}
}
HLO
expect_status 2 "$TESSEL" plan "$M"
expect_in "$ERR" "lowered.hlo:4:3: error: the sharding of x.1 names 4 devices but module jit_f sets no num_partitions: pass --num-partitions 4"
expect_status 2 "$TESSEL" compile "$M" -o "$WORK/f.plan"
expect_in "$ERR" "pass --num-partitions 4"
expect_status 0 "$TESSEL" plan "$M" --num-partitions 4
expect_in "$OUT" "f32[2,4]"
# a module that names its count keeps it, and a replicated one needs none
sed 's/HloModule jit_f,/HloModule jit_f, num_partitions=4,/' "$M" >"$WORK/counted.hlo"
expect_status 0 "$TESSEL" plan "$WORK/counted.hlo"
sed 's/sharding={devices=\[4,1\]<=\[4\]}/sharding={replicated}/' "$M" >"$WORK/replicated.hlo"
expect_status 0 "$TESSEL" plan "$WORK/replicated.hlo"
echo "lowered_count: ok"
