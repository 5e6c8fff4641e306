#!/usr/bin/env bash
# mpi.sh: `mpirun -np H tessel run` through the oracle: models from
# tests/models partitioned over N devices on 1, 2 and 4 ranks (1 and 2 local
# devices per rank), over shared memory and over TCP (--mca btl tcp,self),
# from the model and from a plan; outputs equal --reference within the
# oracle's tolerance. Then the failures: a plan for another world size, an
# input file missing on one rank only, a corrupted plan: every rank ends,
# non-zero, and no output file is left.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(timeout 120 mpirun --oversubscribe)

# The oracle's comparison (DESIGN.md): ints bit-equal, floats within 1e-4
# (f32) / 1e-5 (f64) of the reference's largest magnitude.
npy_match() {
    "$PY" - "$1" "$2" <<'PY'
import ast, math, struct, sys
def load(p):
    data = open(p, 'rb').read()
    hl, off = (struct.unpack('<H', data[8:10])[0], 10) if data[6] == 1 else (struct.unpack('<I', data[8:12])[0], 12)
    h = ast.literal_eval(data[off:off + hl].decode())
    fmt = {'<f4': 'f', '<f8': 'd', '<i4': 'i', '<i8': 'q', '|b1': '?', '|u1': 'B', '<u4': 'I'}[h['descr']]
    body = data[off + hl:]
    n = len(body) // struct.calcsize(fmt)
    return h['descr'], h['shape'], struct.unpack('<%d%s' % (n, fmt), body)
(da, sa, a), (db, sb, b) = load(sys.argv[1]), load(sys.argv[2])
if (da, sa) != (db, sb):
    sys.exit('%s %s vs reference %s %s' % (db, sb, da, sa))
if da[1] != 'f':
    if a != b:
        sys.exit('integers differ')
    sys.exit(0)
scale = max([abs(x) for x in a if math.isfinite(x)] + [0.0])
tol = (1e-5 if da == '<f8' else 1e-4) * scale
for i, (x, y) in enumerate(zip(a, b)):
    ok = math.isnan(y) if math.isnan(x) else (x == y if math.isinf(x) else abs(x - y) <= tol)
    if not ok:
        sys.exit('element %d: %r, reference %r' % (i, y, x))
PY
}

# model_for NAME N: tests/models/NAME.hlo with @N and @D filled in.
model_for() {
    local devs
    devs=$(seq -s, 0 $(($2 - 1)))
    sed -e "s/@N/$2/g" -e "s/@D/$devs/g" "$TESSEL_SRC/tests/models/$1.hlo" >"$WORK/$1.$2.hlo"
    echo "$WORK/$1.$2.hlo"
}

# oracle NAME N RANKS [mpirun options...]: reference vs mpirun, from the
# model and from a plan compiled for RANKS hosts.
oracle() {
    local name=$1 n=$2 ranks=$3
    shift 3
    local m ref got
    m=$(model_for "$name" "$n")
    ref="$WORK/ref.$name.$n"
    got="$WORK/got.$name.$n.$ranks"
    rm -rf "$ref" "$got" "$got.plan"
    expect_status 0 "$TESSEL" run "$m" --reference --random-inputs 5 --output-dir "$ref"
    expect_status 0 "${MPIRUN[@]}" -np "$ranks" "$@" "$TESSEL" run "$m" --random-inputs 5 --output-dir "$got"
    for f in "$ref"/*.npy; do
        npy_match "$f" "$got/$(basename "$f")" || fail "$name N=$n ranks=$ranks: $(basename "$f") differs"
    done
    expect_status 0 "$TESSEL" compile "$m" --hosts "$ranks" -o "$WORK/plan.$name"
    expect_status 0 "${MPIRUN[@]}" -np "$ranks" "$@" "$TESSEL" run "$WORK/plan.$name" --random-inputs 5 --output-dir "$got.plan"
    for f in "$ref"/*.npy; do
        npy_match "$f" "$got.plan/$(basename "$f")" || fail "$name N=$n ranks=$ranks (plan): $(basename "$f") differs"
    done
}

# 1, 2 and 4 ranks; 2 and 1 local devices; shared memory and TCP.
oracle mlp_megatron 2 1
oracle mlp_megatron 2 2
oracle mlp_megatron 4 2
oracle mlp_megatron 4 4 --mca btl tcp,self
for name in softmax_reduced_dim reduce_init while_loop attention elementwise_uneven; do
    oracle "$name" 4 2
    oracle "$name" 4 4 --mca btl tcp,self
done
oracle mesh_partial_replication 4 4 --mca btl tcp,self
oracle iota_offsets 8 4

# ---- failures ----
m=$(model_for mlp_megatron 2)
expect_status 0 "$TESSEL" compile "$m" --hosts 2 -o "$WORK/two.plan"
# a plan compiled for another world size: every rank says so
expect_status 2 "${MPIRUN[@]}" -np 1 "$TESSEL" run "$WORK/two.plan" --random-inputs 1
expect_in "$ERR" "the plan was compiled for 2 hosts, but mpirun started 1"
# an input file present on rank 0 only: every rank ends, no output
npy_write "$WORK/x_0.npy" '<f4' 16,24 $(seq 1 384)
expect_status 2 "${MPIRUN[@]}" -np 2 sh -c "exec \"$TESSEL\" run \"$WORK/two.plan\" --random-inputs 1 --input 0=\"$WORK/x_\$OMPI_COMM_WORLD_RANK.npy\" --output-dir \"$WORK/partial\""
expect_in "$ERR" "rank 1:"
[ ! -e "$WORK/partial" ] || [ -z "$(ls -A "$WORK/partial")" ] || fail "a failed run left output files"
# a corrupted plan
sed 's/TesselInputSharding 1 {devices=\[1,2\]0,1}/TesselInputSharding 1 {devices=[2,1]0,1}/' "$WORK/two.plan" >"$WORK/bad.plan"
expect_status 2 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/bad.plan" --random-inputs 1
expect_in "$ERR" "its shard under the sharding is"
echo "mpi: ok"
