#!/usr/bin/env bash
# hostile_reference.sh: --reference refuses what cannot agree (issue 16,
# finding 9). A module that declares several devices and already holds a
# collective exchanging data between them has no one-device answer: on
# main an empty replica_groups={} ran as an identity under --reference.
# Now it is refused at the collective (status 2), pointing to --spmd; a
# collective whose groups are single devices, or a module of one device,
# still runs.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# module FILE NUM_PARTITIONS COLLECTIVE-LINE
module() {
    cat >"$1" <<HLO
HloModule coll, num_partitions=$2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4] parameter(0), sharding={replicated}
  $3
}
HLO
}
refused() { # refused FILE WHAT
    expect_status 2 "$TESSEL" run --reference --random-inputs 1 "$1"
    expect_in "$ERR" "$(basename "$1"):9:8: error: r: --reference runs the module on one device, but this"
    expect_in "$ERR" "is a collective over more than one device"
    expect_in "$ERR" "replay it as an SPMD program with --spmd"
}
module "$WORK/empty.hlo" 2 'ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=add'
refused "$WORK/empty.hlo"
module "$WORK/absent.hlo" 2 'ROOT r = f32[4] all-reduce(x), to_apply=add'
refused "$WORK/absent.hlo"
module "$WORK/pair.hlo" 2 'ROOT r = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add'
refused "$WORK/pair.hlo"
module "$WORK/gather.hlo" 2 'ROOT r = f32[8] all-gather(x), dimensions={0}, replica_groups={}'
refused "$WORK/gather.hlo"
module "$WORK/permute.hlo" 2 'ROOT r = f32[4] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}'
refused "$WORK/permute.hlo"
# The same modules replay on their devices (what the message points to).
expect_status 0 "$TESSEL" run --spmd --random-inputs 1 "$WORK/empty.hlo"
# What has a one-device answer still runs: groups of one device, a self-permute, one device.
module "$WORK/single.hlo" 2 'ROOT r = f32[4] all-reduce(x), replica_groups={{0},{1}}, to_apply=add'
expect_status 0 "$TESSEL" run --reference --random-inputs 1 "$WORK/single.hlo"
module "$WORK/self.hlo" 2 'ROOT r = f32[4] collective-permute(x), channel_id=1, source_target_pairs={{0,0},{1,1}}'
expect_status 0 "$TESSEL" run --reference --random-inputs 1 "$WORK/self.hlo"
module "$WORK/one.hlo" 1 'ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=add'
expect_status 0 "$TESSEL" run --reference --random-inputs 1 --output-dir "$WORK/one" "$WORK/one.hlo"
npy_write "$WORK/x.npy" '<f4' 4 1 2 3 4
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$WORK/one" "$WORK/one.hlo"
[ "$(npy_dump "$WORK/one/output_0.npy")" = "<f4 4 1 2 3 4" ] || fail "one device: $(npy_dump "$WORK/one/output_0.npy")"
echo "hostile_reference: ok"
