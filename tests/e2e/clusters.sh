#!/usr/bin/env bash
# clusters.sh: modules with host work through the command line: tessel_print
# between device work (two clusters), a host-side while whose body has a
# host op, tessel_save writing a .npy; partitioned runs equal --reference;
# the plan lists the clusters, host instructions and cut values; a plan file
# of such a module compiles (tests/e2e/host_plans.sh runs them).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

inst() { # inst NAME N: tests/models/NAME.hlo with @N/@D filled in
    sed -e "s/@N/$2/g" -e "s/@D/$(seq -s, 0 $(($2 - 1)))/g" "$TESSEL_SRC/tests/models/$1.hlo" >"$WORK/$1.$2.hlo"
    echo "$WORK/$1.$2.hlo"
}

for n in 2 4; do
    m=$(inst host_ops_chain "$n")
    expect_status 0 "$TESSEL" run "$m" --random-inputs 3 --reference
    cp "$OUT" "$WORK/ref.txt"
    expect_status 0 "$TESSEL" run "$m" --random-inputs 3
    cmp -s "$OUT" "$WORK/ref.txt" || fail "host_ops_chain N=$n differs from the reference: $(cat "$OUT")"
    expect_in "$OUT" "shown: f32[8,6]"
done
m=$(inst host_attr_while 3)
expect_status 0 "$TESSEL" run "$m" --random-inputs 4 --reference --output-dir "$WORK/wr"
expect_status 0 "$TESSEL" run "$m" --random-inputs 4 --output-dir "$WORK/wp"
cmp -s "$WORK/wr/output_0.npy" "$WORK/wp/output_0.npy" || fail "host_attr_while differs from the reference"

# under mpirun: every rank runs the host program, each cluster runs on the
# ranks' devices, only rank 0 prints; 2 and 4 ranks, shared memory and TCP
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # Open MPI's own allocations (see mpi.sh)
m=$(inst host_ops_chain 4)
expect_status 0 "$TESSEL" run "$m" --random-inputs 3 --reference
cp "$OUT" "$WORK/ref4.txt"
expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np 2 "$TESSEL" run "$m" --random-inputs 3
cmp -s "$OUT" "$WORK/ref4.txt" || fail "host_ops_chain under mpirun -np 2: $(cat "$OUT")"
[ "$(grep -c '^shown:' "$OUT")" = 1 ] || fail "tessel_print printed on more than rank 0"
m=$(inst host_attr_while 4)
expect_status 0 "$TESSEL" run "$m" --random-inputs 4 --reference --output-dir "$WORK/w4r"
expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np 4 --mca btl tcp,self "$TESSEL" run "$m" --random-inputs 4 --output-dir "$WORK/w4m"
cmp -s "$WORK/w4r/output_0.npy" "$WORK/w4m/output_0.npy" || fail "host_attr_while under mpirun -np 4 differs"

# the plan: two clusters, the host op, the cut values
m=$(inst host_ops_chain 2)
expect_status 0 "$TESSEL" plan "$m"
expect_in "$OUT" "cluster cluster_0 (called by"
expect_in "$OUT" "cluster cluster_1 (called by"
expect_in "$OUT" "main/shown host-op"
expect_in "$OUT" "main/a: cluster 0 -> host"
expect_status 0 "$TESSEL" plan "$m" --format json
"$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert [c["name"] for c in d["clusters"]] == ["cluster_0", "cluster_1"], d["clusters"]
assert d["clusters"][0]["source_instructions"] == ["a"]
assert any(h["name"] == "shown" and h["kind"] == "host-op" for h in d["host_instructions"])
assert any(c["value"] == "a" and c["from"] == 0 and c["to"] == -1 for c in d["cuts"])
' "$OUT" || fail "plan JSON"
expect_status 0 "$TESSEL" plan "$m" --format dot
expect_in "$OUT" 'subgraph "cluster_1"'
expect_status 0 "$TESSEL" compile "$m" -o "$WORK/x.plan"

# tessel_save names an output, NAME.npy inside --output-dir, written with
# the run's outputs; the result is its operand unchanged
cat >"$WORK/save.hlo" <<HLO
HloModule save, num_partitions=2

ENTRY main {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  y = f32[4] multiply(x, x)
  s = f32[4] custom-call(y), custom_call_target="tessel_save", backend_config="saved"
  ROOT z = f32[4] add(s, x)
}
HLO
npy_write "$WORK/x.npy" '<f4' 4 1 2 3 4
expect_status 0 "$TESSEL" run "$WORK/save.hlo" --input 0="$WORK/x.npy" --output-dir "$WORK/so"
[ "$(npy_dump "$WORK/so/saved.npy")" = "<f4 4 1 4 9 16" ] || fail "saved: $(npy_dump "$WORK/so/saved.npy")"
[ "$(npy_dump "$WORK/so/output_0.npy")" = "<f4 4 2 6 12 20" ] || fail "save output: $(npy_dump "$WORK/so/output_0.npy")"
# ... never a path (tests/e2e/hostile_confine.sh has the rest)
sed 's|backend_config="saved"|backend_config="../saved"|' "$WORK/save.hlo" >"$WORK/savepath.hlo"
expect_status 2 "$TESSEL" run "$WORK/savepath.hlo" --input 0="$WORK/x.npy" --output-dir "$WORK/sp"
expect_in "$ERR" "savepath.hlo:6:3: error: s: tessel_save names an output"
echo "clusters: ok"
