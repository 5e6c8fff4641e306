#!/usr/bin/env bash
# reshard_swapped.sh: a reshard that moves one dim's tiles to another dim
# with a tiled dim between them (f32[8,16,4] from [2,2,1] to [1,2,2] over
# 0,1,2,3, and back) computes what the unpartitioned module does. The
# partitioner exchanged it by one all-to-all along the first dim
# (partition/reshard.c's swapped_dim), which holds only where no dim
# between the two is tiled: the flat position of a device counts the middle
# dim's tile as a different digit under each sharding, so each device kept
# the wrong tile of it (1.68 off the reference). Now the value is gathered
# and sliced; auto/cost.c prices it so (tests/unit/test_auto.c's
# reshard_prices checks every pair of specs on 2x2 and 2x4 meshes).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

for pair in "2,2,1 1,2,2" "1,2,2 2,2,1" "4,1,2 1,4,2"; do
    set -- $pair
    n=$(( ${1//,/*} ))
    cat >"$WORK/m.hlo" <<HLO
HloModule swapped, num_partitions=$n

ENTRY e {
  p = f32[8,16,4] parameter(0), sharding={devices=[$1]<=[$n]}
  c = f32[8,16,4] copy(p), sharding={devices=[$2]<=[$n]}
  ROOT r = f32[8,16,4] negate(c), sharding={devices=[$2]<=[$n]}
}
HLO
    rm -rf "$WORK/ref" "$WORK/got"
    "$TESSEL" run "$WORK/m.hlo" --reference --random-inputs 3 --output-dir "$WORK/ref" >/dev/null
    "$TESSEL" run "$WORK/m.hlo" --random-inputs 3 --output-dir "$WORK/got" >/dev/null
    same_outputs "$WORK/ref" "$WORK/got" "[$1] -> [$2] over $n"
done
echo "reshard_swapped: ok"
