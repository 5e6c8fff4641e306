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
# One mesh axis moves from dim 0 to dim 2 past a dim tiled by the other,
# which stays: the devices listed in another order (JAX's P('y','x',None)
# to P(None,'x','y') on a 2x2 mesh, a lax.scan's xs sharded on its scanned
# dim) keep each device's place, so one all-to-all of half its shard
# (f32[8,8,16]: 512 bytes) does it, where two all-gathers (3,072) did.
# (from, to, devices, bytes a device of the one all-to-all)
for case in "2,2,1]0,2,1,3 1,2,2]0,1,2,3 4 512" "2,2,1]0,1,2,3 1,2,2]0,2,1,3 4 512" \
            "4,2,1]0,4,1,5,2,6,3,7 1,2,4]0,1,2,3,4,5,6,7 8 384"; do
    set -- $case
    cat >"$WORK/m.hlo" <<HLO
HloModule swapped_order, num_partitions=$3

ENTRY e {
  p = f32[8,8,16] parameter(0), sharding={devices=[$1}
  c = f32[8,8,16] copy(p), sharding={devices=[$2}
  ROOT r = f32[8,8,16] negate(c), sharding={devices=[$2}
}
HLO
    rm -rf "$WORK/ref" "$WORK/got"
    "$TESSEL" run "$WORK/m.hlo" --reference --random-inputs 3 --output-dir "$WORK/ref" >/dev/null
    "$TESSEL" run "$WORK/m.hlo" --random-inputs 3 --output-dir "$WORK/got" >/dev/null
    same_outputs "$WORK/ref" "$WORK/got" "[$1 -> [$2"
    "$TESSEL" plan "$WORK/m.hlo" --format json >"$WORK/plan.json"
    colls=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(" ".join("%s:%d" % (c["opcode"], c["bytes_per_device"]) for cl in p["clusters"] for c in cl["collectives"]))' "$WORK/plan.json")
    [ "$colls" = "all-to-all:$4" ] || fail "[$1 -> [$2: collectives '$colls', expected one all-to-all of $4 bytes"
done
echo "reshard_swapped: ok"
