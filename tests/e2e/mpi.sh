#!/usr/bin/env bash
# mpi.sh: `mpirun -np H tessel run` through the oracle: models from
# tests/models partitioned over N devices on 1, 2 and 4 ranks (1 and 2 local
# devices per rank), over shared memory and over TCP (--mca btl tcp,self),
# from the model and from a plan; outputs equal --reference within the
# oracle's tolerance. Then the failures: a plan for another world size, an
# input file missing on one rank only, a corrupted plan: every rank ends,
# non-zero, and no output file is left. Then per-host shard reads (strace
# and --stats show each rank reads only its half of a sharded .npy),
# --steps with input_output_alias (an SGD step run 3 times equals 3
# reference runs chained by hand), and SIGTERM/SIGINT (status 143/130, no
# output file) in one process and under mpirun.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Under ASan, leaks are checked in every rank: Open MPI's own allocations
# are suppressed by tests/lsan_openmpi.supp (LSAN_OPTIONS, set by ctest),
# which needs full unwinding (its dlclose()d components leave frames
# LeakSanitizer cannot name; the libraries that called them it can).
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe)

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

# 1, 2 and 4 ranks; 2 and 1 local devices; shared memory and TCP. Under
# the asan build (its ranks unwind every allocation, above) each model of
# the loop runs one of its two transports, in turns: the release build
# checks every result on both, ASan looks for the C's memory errors.
ASAN_BUILD=0
if grep -qa __asan_init "$TESSEL"; then ASAN_BUILD=1; fi
oracle mlp_megatron 2 1
oracle mlp_megatron 2 2
oracle mlp_megatron 4 2
oracle mlp_megatron 4 4 --mca btl tcp,self
# The leak check (fully unwound stacks: ~3 s an ASan rank) runs on the
# mlp_megatron jobs above, the 13-byte pieces and the failures below; the
# loop's models run the same transport code with detect_leaks=0.
MPIRUN_LEAKS=("${MPIRUN[@]}")
[ "$ASAN_BUILD" = 0 ] || MPIRUN=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 120 mpirun --oversubscribe)
k=0
for name in softmax_reduced_dim reduce_init while_loop attention elementwise_uneven; do
    [ "$ASAN_BUILD" = 1 ] && [ $((k % 2)) = 1 ] || oracle "$name" 4 2
    [ "$ASAN_BUILD" = 1 ] && [ $((k % 2)) = 0 ] || oracle "$name" 4 4 --mca btl tcp,self
    k=$((k + 1))
done
oracle mesh_partial_replication 4 4 --mca btl tcp,self
oracle iota_offsets 8 4
MPIRUN=("${MPIRUN_LEAKS[@]}")
# MPI counts are int: transfers over 2 GiB go in pieces (coll/mpi_world.c).
# Pieces of 13 bytes (uneven against every element size) run that path on
# small arrays: all-gathers, all-reduces and the output gather.
MPIRUN_WHOLE=("${MPIRUN[@]}")
MPIRUN=(env TESSEL_MPI_PIECE_BYTES=13 "${MPIRUN[@]}")
oracle mlp_megatron 4 2 --mca btl tcp,self
oracle attention 4 2 --mca btl tcp,self
oracle mesh_partial_replication 4 4 --mca btl tcp,self
MPIRUN=("${MPIRUN_WHOLE[@]}")

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
expect_in "$ERR" "the plan file's digest does not match its contents"
plan_resign "$WORK/bad.plan" # behind a right digest: the same refusal by the loader
expect_status 2 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/bad.plan" --random-inputs 1
expect_in "$ERR" "its shard under the sharding is"

# ---- per-host shard reads ----
cat >"$WORK/big.hlo" <<'EOF'
HloModule big, num_partitions=2

ENTRY main {
  x = f32[256,256] parameter(0), sharding={devices=[2,1]0,1}
  ROOT y = f32[256,256] add(x, x), sharding={devices=[2,1]0,1}
}
EOF
"$PY" - "$WORK/bigx.npy" <<'PY'
import struct, sys
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (256, 256), }"
hdr += ' ' * ((64 - (10 + len(hdr) + 1) % 64) % 64) + '\n'
with open(sys.argv[1], 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode())
    f.write(struct.pack('<65536f', *[float(i % 1000) for i in range(65536)]))
PY
expect_status 0 "$TESSEL" run "$WORK/big.hlo" --reference --input 0="$WORK/bigx.npy" --output-dir "$WORK/bigref"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/big.hlo" --input 0="$WORK/bigx.npy" --output-dir "$WORK/bigmpi" --stats
npy_match "$WORK/bigref/output_0.npy" "$WORK/bigmpi/output_0.npy" || fail "big: mpirun output differs"
# the counter: every rank read exactly its half (256*256*4/2 bytes) of the file
expect_in "$ERR" "input read     min 131072  median 131072  max 131072 bytes per rank"
expect_in "$ERR" "collectives    min"
expect_in "$ERR" "executor threads bound to their cores"
# in one process the two devices read the two halves: the whole array once
expect_status 0 "$TESSEL" run "$WORK/big.hlo" --input 0="$WORK/bigx.npy" --stats
expect_in "$ERR" "input read 262144 bytes from files"
# strace: the bytes each rank's read(2) calls take from the file are its
# half plus stdio's buffering (the header and at most a buffer per seek),
# never the whole 262 KB file; its pread64(2) calls are the ranks'
# agreement hashing the file (api/agree.c: whole up to 64 MiB), once
if command -v strace >/dev/null && strace -o /dev/null true 2>/dev/null; then
    rm -f "$WORK"/trace.*
    # LeakSanitizer cannot run under ptrace (strace): off for this job alone.
    expect_status 0 env ASAN_OPTIONS="$MPI_ASAN:detect_leaks=0" timeout 120 mpirun --oversubscribe -np 2 sh -c "exec strace -f -y -e trace=read,pread64 -o \"$WORK/trace.\$OMPI_COMM_WORLD_RANK\" \"$TESSEL\" run \"$WORK/big.hlo\" --input 0=\"$WORK/bigx.npy\""
    size=$(stat -c %s "$WORK/bigx.npy")
    for r in 0 1; do
        got=$(grep -F 'bigx.npy>' "$WORK/trace.$r" | grep '^[0-9]* *read(' | awk -F'= ' '{s += $NF} END {print s + 0}')
        [ "$got" -ge 131072 ] && [ "$got" -le $((131072 + 3 * 4096)) ] ||
            fail "rank $r read $got bytes of bigx.npy; its shard is 131072"
        hashed=$(grep -F 'bigx.npy>' "$WORK/trace.$r" | grep '^[0-9]* *pread64(' | awk -F'= ' '{s += $NF} END {print s + 0}')
        [ "$hashed" = "$size" ] || fail "rank $r's agreement read $hashed bytes of bigx.npy to hash it, not its $size once"
    done
else
    echo "mpi: strace unavailable; shard reads checked by the --stats counter only"
fi

# ---- --steps with input_output_alias: w' = w - 0.1 * x^T (x w) ----
cp "$TESSEL_SRC/tests/e2e/sgd_step.hlo" "$WORK/sgd.hlo"
npy_write "$WORK/sx.npy" '<f4' 8,4 $(for i in $(seq 0 31); do echo "$(( (i * 5) % 9 - 4 )).25"; done)
npy_write "$WORK/w0.npy" '<f4' 4 0.5 -0.25 0.125 1
# chained by hand: each reference step reads the w the previous one wrote
for k in 1 2 3; do
    expect_status 0 "$TESSEL" run "$WORK/sgd.hlo" --reference --input 0="$WORK/sx.npy" \
        --input 1="$WORK/w$((k - 1)).npy" --output-dir "$WORK/step$k"
    cp "$WORK/step$k/output_0.npy" "$WORK/w$k.npy"
done
! cmp -s "$WORK/w1.npy" "$WORK/w3.npy" || fail "sgd: the steps do not change w"
check_steps() { # DIR WHAT
    npy_match "$WORK/w3.npy" "$1/output_0.npy" || fail "sgd --steps 3 ($2): w differs"
    npy_match "$WORK/step3/output_1.npy" "$1/output_1.npy" || fail "sgd --steps 3 ($2): loss differs"
}
S=(--input 0="$WORK/sx.npy" --input 1="$WORK/w0.npy" --steps 3)
expect_status 0 "$TESSEL" run "$WORK/sgd.hlo" --reference "${S[@]}" --output-dir "$WORK/k3ref"
cmp -s "$WORK/w3.npy" "$WORK/k3ref/output_0.npy" || fail "sgd --steps 3 --reference: w is not bit-equal to the chain"
expect_status 0 "$TESSEL" run "$WORK/sgd.hlo" "${S[@]}" --output-dir "$WORK/k3local" --stats
check_steps "$WORK/k3local" "one process"
expect_in "$ERR" "collective calls per device"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/sgd.hlo" "${S[@]}" --output-dir "$WORK/k3mpi"
check_steps "$WORK/k3mpi" "mpirun -np 2"
expect_status 0 "$TESSEL" compile "$WORK/sgd.hlo" --hosts 2 -o "$WORK/sgd.plan"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/sgd.plan" "${S[@]}" --output-dir "$WORK/k3plan"
check_steps "$WORK/k3plan" "plan, mpirun -np 2"
# an aliased output sharded unlike its parameter is refused, naming both
sed 's/sharding={{replicated}, {replicated}}/sharding={{devices=[2]0,1}, {replicated}}/' \
    "$WORK/sgd.hlo" >"$WORK/sgd_bad.hlo"
expect_status 2 "$TESSEL" run "$WORK/sgd_bad.hlo" "${S[@]}" --output-dir "$WORK/k3bad"
expect_in "$ERR" "the output aliased to parameter 1 is sharded {devices=[2]0,1} but the parameter {replicated}"
[ ! -e "$WORK/k3bad" ] || fail "a refused run left an output directory"

# ---- signals: a long while loop, interrupted ----
cat >"$WORK/long.hlo" <<'EOF'
HloModule long, num_partitions=2

cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(2000000000)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v2 = f32[8] add(v, v)
  ROOT t = (s32[], f32[8]) tuple(i2, v2)
}

ENTRY main {
  x = f32[8] parameter(0), sharding={devices=[2]0,1}
  z = s32[] constant(0)
  init = (s32[], f32[8]) tuple(z, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
EOF
# interrupt SIGNAL WANT DIR CMD...: start CMD, send SIGNAL after 2 s, expect
# status WANT and no file in DIR
interrupt() {
    local sig=$1 want=$2 dir=$3 got=0
    shift 3
    "$@" >"$OUT" 2>"$ERR" &
    local pid=$!
    sleep 2
    kill -"$sig" "$pid"
    wait "$pid" || got=$?
    [ "$got" = "$want" ] || fail "'$*' after SIG$sig exited $got, expected $want"
    [ ! -e "$dir" ] || [ -z "$(ls -A "$dir")" ] || fail "an interrupted run left files in $dir"
}
interrupt TERM 143 "$WORK/sig1" "$TESSEL" run "$WORK/long.hlo" --random-inputs 1 --output-dir "$WORK/sig1"
expect_in "$ERR" "terminated (SIGTERM); no output written"
interrupt INT 130 "$WORK/sig2" "$TESSEL" run "$WORK/long.hlo" --reference --random-inputs 1 --output-dir "$WORK/sig2"
expect_in "$ERR" "interrupted (SIGINT)"
# under mpirun: mpirun forwards SIGTERM to every rank; the job fails, no
# output, no rank left running
got=0
ASAN_OPTIONS="$MPI_ASAN" mpirun --oversubscribe -np 2 "$TESSEL" run "$WORK/long.hlo" --random-inputs 1 --output-dir "$WORK/sig3" >"$OUT" 2>"$ERR" &
pid=$!
sleep 3
kill -TERM "$pid"
wait "$pid" || got=$?
[ "$got" != 0 ] || fail "mpirun after SIGTERM exited 0"
[ ! -e "$WORK/sig3" ] || [ -z "$(ls -A "$WORK/sig3")" ] || fail "an interrupted mpirun left output files"
sleep 1
! pgrep -f "run $WORK/long.hlo" >/dev/null || fail "a rank outlived the interrupted mpirun"
echo "mpi: ok"
