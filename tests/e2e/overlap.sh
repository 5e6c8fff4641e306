#!/usr/bin/env bash
# overlap.sh: the -start/-done pairs of a replayed SPMD program run
# asynchronously (runtime/coll_async.c, ir/schedule_overlap.c), with
# independent work, a blocking all-reduce and other pairs between each
# start and its done: every device's outputs are bit-equal to the same
# program written with blocking collectives, in one process on 1, 2, 4
# and 8 devices and under `mpirun -np 1, 2, 4 --mca btl tcp,self` on 4.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)

# model N: the program for N devices, pairs in async form
model() {
    local n=$1 pairs="" k
    for ((k = 0; k < n; k++)); do pairs="$pairs{$k,$(((k + 1) % n))},"; done
    cat <<HLO
HloModule ov, num_partitions=$n

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

wrapped {
  p = f32[16,8] parameter(0)
  ROOT r = f32[16,8] all-reduce(p), channel_id=5, replica_groups={}, use_global_device_ids=true, to_apply=add
}

ENTRY main {
  x = f32[16,8] parameter(0)
  y = f32[8,8] parameter(1)
  d0 = f32[16,8] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s0 = f32[16,8] all-reduce-start(d0), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=add
  s1 = (f32[16,8], f32[$((16 * n)),8]) all-gather-start(x), channel_id=2, replica_groups={}, dimensions={0}, use_global_device_ids=true
  b = f32[16,8] all-reduce(x), channel_id=3, replica_groups={}, use_global_device_ids=true, to_apply=add
  e = f32[16,8] exponential(x)
  c = (f32[16,8], f32[16,8], u32[], u32[]) collective-permute-start(e), channel_id=4, source_target_pairs={${pairs%,}}
  as = ((f32[16,8]), f32[16,8], s32[]) async-start(b), calls=wrapped
  d1 = f32[16,8] dot(e, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r0 = f32[16,8] all-reduce-done(s0)
  r1 = f32[$((16 * n)),8] all-gather-done(s1)
  r2 = f32[16,8] collective-permute-done(c)
  r3 = f32[16,8] async-done(as), calls=wrapped
  m = f32[16,8] multiply(r0, d1)
  ROOT t = (f32[16,8], f32[$((16 * n)),8], f32[16,8], f32[16,8]) tuple(m, r1, r2, r3)
}
HLO
}

# The blocking twin: each start the collective itself, each done a copy.
blocking() {
    sed -E -e 's/all-reduce-start\(/all-reduce(/' -e 's/all-reduce-done\(/copy(/' \
        -e 's/\(f32\[16,8\], (f32\[[0-9]+,8\])\) all-gather-start/\1 all-gather/' -e 's/all-gather-done\(/copy(/' \
        -e 's/\(f32\[16,8\], f32\[16,8\], u32\[\], u32\[\]\) collective-permute-start/f32[16,8] collective-permute/' \
        -e 's/collective-permute-done\(/copy(/' \
        -e 's/as = \(\(f32\[16,8\]\), f32\[16,8\], s32\[\]\) async-start\(b\), calls=wrapped/as = f32[16,8] call(b), to_apply=wrapped/' \
        -e 's/async-done\(as\), calls=wrapped/copy(as)/'
}

same_files() { # same_files DIR1 DIR2 WHAT
    local f k=0
    for f in "$1"/output_*.npy; do
        cmp -s "$f" "$2/$(basename "$f")" || fail "$3: $(basename "$f") differs"
        k=$((k + 1))
    done
    [ "$k" -gt 0 ] || fail "$3: no outputs"
}

for n in 1 2 4 8; do
    model "$n" >"$WORK/a$n.hlo"
    blocking <"$WORK/a$n.hlo" >"$WORK/b$n.hlo"
    ! grep -q -- '-start\|-done' "$WORK/b$n.hlo" || fail "the blocking twin kept a pair"
    expect_status 0 "$TESSEL" run "$WORK/b$n.hlo" --spmd --random-inputs 3 --per-device --output-dir "$WORK/b$n"
    expect_status 0 "$TESSEL" run "$WORK/a$n.hlo" --spmd --random-inputs 3 --per-device --output-dir "$WORK/a$n"
    same_files "$WORK/b$n" "$WORK/a$n" "$n devices in one process"
done
for h in 1 2 4; do
    for v in a b; do
        expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np "$h" \
            "$TESSEL" run "$WORK/${v}4.hlo" --spmd --random-inputs 3 --per-device --output-dir "$WORK/${v}4.mpi$h" </dev/null
    done
    same_files "$WORK/b4.mpi$h" "$WORK/a4.mpi$h" "4 devices under mpirun -np $h"
done
echo "overlap: ok"
