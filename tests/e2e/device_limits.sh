#!/usr/bin/env bash
# device_limits.sh: modules of more than the default 4096 devices compile
# with --limit devices=N (up to 65,536, IR_MAX_DEVICES), plans of them
# load (no 4096 cap left in the plan loader), a module over the limit and
# a limit over 65,536 are clear errors (status 2), and the text dump of a
# plan of 8192 devices collapses its device runs and leaf runs into a few
# lines (docs/plan.md); replica groups over 64 ids in XLA's iota form run.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

cat >"$WORK/big.hlo" <<'HLO'
HloModule big, num_partitions=8192

ENTRY main {
  x = f32[8192,4] parameter(0), sharding={devices=[8192,1]<=[8192]}
  ROOT y = f32[8192,4] add(x, x), sharding={devices=[8192,1]<=[8192]}
}
HLO
expect_status 2 "$TESSEL" compile "$WORK/big.hlo" -o "$WORK/big.plan"
expect_in "$ERR" "8192 partitions x 1 replicas: at most 4096 devices (--limit devices=N)"
expect_status 2 "$TESSEL" compile "$WORK/big.hlo" --limit devices=65537 -o "$WORK/big.plan"
expect_in "$ERR" "--limit devices=65537 is too large: the largest is 65536"
expect_status 0 "$TESSEL" compile "$WORK/big.hlo" --limit devices=8192 --hosts 4 -o "$WORK/big.plan"
expect_status 0 "$TESSEL" plan "$WORK/big.plan"
expect_in "$OUT" "module big: 8192 partitions x 1 replicas on 4 hosts x 2048 local devices"
expect_in "$OUT" "  replica 0 partitions 0-2047 -> devices 0-2047 -> host 0"
expect_in "$OUT" "  replica 0 partitions 6144-8191 -> devices 6144-8191 -> host 3"
expect_in "$OUT" "  host 2 replica 0: devices 4096-6143"
expect_in "$OUT" "      8192 leaves, j = 0..8191: devices {0}+1*j offset [0,0]+[1,0]*j shape [1,4]"
lines=$(wc -l <"$OUT")
[ "$lines" -lt 40 ] || fail "the dump of an 8192-device plan has $lines lines"
# the JSON keeps every device
expect_status 0 "$TESSEL" plan "$WORK/big.plan" --format json
"$PY" - "$OUT" <<'PY' || fail "the JSON dump lost devices"
import json, sys
j = json.load(open(sys.argv[1]))
tree = j["clusters"][0]["inputs"][0]["split_tree"]
assert len(j["device_assignment"][0]) == 8192 and j["device_assignment"][0][8191] == 8191
# the 8192 tiles are one run (docs/plan.md): leaf j at device 0+j, offset [j,0]
assert tree["pieces"] == 8192 and len(tree["children"]) == 1, tree
run = tree["children"][0]
assert run["leaves"] == 8192 and run["devices"] == [0] and run["devices_step"] == 1, run
assert run["offset"] == [0, 0] and run["offset_step"] == [1, 0] and run["shape"] == [1, 4], run
PY
# an irregular assignment is not collapsed where it does not step evenly
cat >"$WORK/odd.hlo" <<'HLO'
HloModule odd, num_partitions=4

ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[4,1]0,1,3,2}
  ROOT y = f32[8,4] add(x, x), sharding={devices=[4,1]0,1,3,2}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/odd.hlo" -o "$WORK/odd.plan"
expect_status 0 "$TESSEL" plan "$WORK/odd.plan"
expect_in "$OUT" "leaf devices {3} offset [4,0] shape [2,4]"
expect_in "$OUT" "  replica 0 partitions 0-3 -> devices 0-3 -> host 0"
# a plan file that claims more than 65,536 devices is refused, naming the line
sed 's/partitions=8192/partitions=70000/' "$WORK/big.plan" >"$WORK/bad.plan"
plan_resign "$WORK/bad.plan" # past the digest: the device check itself
expect_status 2 "$TESSEL" plan "$WORK/bad.plan"
expect_in "$ERR" "bad.plan:11:4: error: at most 65536 devices (partitions x replicas)"
# Over 64 ids, iota-layout replica groups are written in XLA's iota form
# (the instruction and its // TesselCollective line), and the plan file
# runs from that form: a data x model MLP on 8 x 16 devices, one process,
# equal to the reference.
cat >"$WORK/m128.hlo" <<'HLO'
HloModule m128, num_partitions=128

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[16,24] parameter(0), sharding={devices=[8,1,16]<=[128] last_tile_dim_replicate}
  w1 = f32[24,32] parameter(1), sharding={devices=[1,16,8]<=[8,16]T(1,0) last_tile_dim_replicate}
  h = f32[16,32] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[8,16]<=[128]}
  w2 = f32[32,8] parameter(2), sharding={devices=[16,1,8]<=[8,16]T(1,0) last_tile_dim_replicate}
  o = f32[16,8] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[8,1,16]<=[128] last_tile_dim_replicate}
  zero = f32[] constant(0)
  ROOT s = f32[8] reduce(o, zero), dimensions={0}, to_apply=add, sharding={replicated}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/m128.hlo" -o "$WORK/m128.plan"
grep -qF "replica_groups=[8,16]<=[128]," "$WORK/m128.plan" || fail "no iota-form groups [8,16]<=[128] in the plan"
grep -qF "replica_groups=[16,8]<=[8,16]T(1,0)," "$WORK/m128.plan" || fail "no iota-form groups [16,8]<=[8,16]T(1,0)"
grep -qF "// TesselCollective all-reduce all-reduce 120 [8,16]<=[128]" "$WORK/m128.plan" ||
    fail "the collective's record does not have the iota form"
expect_status 0 "$TESSEL" run "$WORK/m128.hlo" --reference --random-inputs 7 --output-dir "$WORK/m128.ref"
expect_status 0 "$TESSEL" run "$WORK/m128.plan" --random-inputs 7 --output-dir "$WORK/m128.got"
npy_match "$WORK/m128.ref/output_0.npy" "$WORK/m128.got/output_0.npy" || fail "the 128-device plan's output differs"
echo "device_limits: ok"
