#!/usr/bin/env bash
# hostile_options.sh: limits and options that were accepted and then did
# the wrong thing (issue 30).
#  1. --limit memory counts the reference run (its entry's peak of live
#     bytes) and what a host program holds between its clusters, not only
#     the largest cluster's per-device estimate. On main a 100-byte limit
#     let --reference run anything.
#  2. --heartbeat below 1 s is refused (1e-9 was accepted, and then every
#     MPI run failed).
#  3. A sharding whose last_tile_dims take every tile dimension says so,
#     not just "tiles 0 dimensions".
#  4. replica_groups naming a device out of range: `tessel check` refused
#     nothing (exit 0) where run stopped on the first device; now check,
#     compile and run give one error at the instruction, for the module's
#     counts or --num-partitions/--num-replicas (with which it runs).
#  5. --random-inputs 010 is seed 10: it was read as octal (strtoull's base
#     0), seed 8, silently; 0x10 stays hex; 2^64 and signs are refused
#     saying the range.
#  6. A number too large for its option says so and names the largest
#     (issue 32: --limit memory=99999999999999999999999 said "needs a
#     number of bytes >= 1", as if it were malformed): --limit (memory in
#     bytes and with a suffix, the other names at their bounds), --mesh,
#     the counts (--num-partitions, --steps to 10^12, ...), --output-device, the
#     durations, and the tuning variables; malformed ones keep their
#     message, exit 2 everywhere.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# ---- 1. --limit memory ----
M="$WORK/mlp.hlo"
sed 's/@N/2/g; s/@D/0,1/g' "$TESSEL_SRC/tests/models/mlp_megatron.hlo" >"$M"
# By hand: x f32[16,24] 1536 bytes, w1 f32[24,40] 3840, w2 f32[40,24] 3840
# (the caller holds the parameters to the end), h = x.w1 f32[16,40] 2560,
# a = tanh(h) 2560: all five live at a, the peak: 14336 bytes.
expect_status 2 "$TESSEL" run --reference --limit memory=14335 --random-inputs 1 "$M"
expect_in "$ERR" "tessel: error: the reference run needs an estimated 14336 bytes of memory, more than --limit memory of 14335 bytes; nothing was run"
expect_status 0 "$TESSEL" run --reference --limit memory=14336 --random-inputs 1 "$M"
# A host program between two clusters (tests/models/host_ops_chain.hlo):
# its own values count on top of the largest cluster's per device.
H="$WORK/host.hlo"
sed 's/@N/2/g; s/@D/0,1/g' "$TESSEL_SRC/tests/models/host_ops_chain.hlo" >"$H"
expect_status 0 "$TESSEL" plan --format json -o "$WORK/plan.json" "$H"
dev=$("$PY" -c 'import json,sys; print(max(c["memory"]["peak_bytes_per_device"] for c in json.load(open(sys.argv[1]))["clusters"]))' "$WORK/plan.json")
expect_status 2 "$TESSEL" run --limit memory="$dev" --random-inputs 1 "$H"
expect_in "$ERR" "bytes its host program holds, more than --limit memory=$dev"
expect_status 0 "$TESSEL" run --limit memory=1M --random-inputs 1 "$H"
echo "hostile_options: --limit memory counts the reference run and the host program"

# ---- 2. --heartbeat ----
for bad in 1e-9 0.5 0.999; do
    expect_status 2 "$TESSEL" run --heartbeat "$bad" --random-inputs 1 "$M"
    expect_in "$ERR" "tessel: error: --heartbeat needs a number of seconds >= 1 (a shorter one would end jobs whose ranks are busy, not lost), not '$bad'"
done
echo "hostile_options: a heartbeat under 1 s is refused"

# ---- 3. last_tile_dims that leave the data no dimension ----
cat >"$WORK/ltd.hlo" <<'HLO'
HloModule ltd, num_partitions=4
ENTRY main {
  x = f32[8] parameter(0), sharding={devices=[2,2]0,1,2,3 last_tile_dims={replicated, manual}}
  ROOT y = f32[8] add(x, x)
}
HLO
expect_status 2 "$TESSEL" check "$WORK/ltd.hlo"
expect_in "$ERR" "ltd.hlo:3:28: error: sharding {devices=[2,2]0,1,2,3 last_tile_dims={replicated, manual}}: its 2 tile dimensions less 2 subgroup dimensions (last_tile_dims or last_tile_dim_replicate) tile 0 dimensions of the data, but shape f32[8] has rank 1"
echo "hostile_options: last_tile_dims taking every tile dimension is named"

# ---- 4. replica_groups out of range: one check for check, compile, run ----
cat >"$WORK/rg.hlo" <<'HLO'
HloModule rg, num_partitions=2, replica_count=1

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4] parameter(0), sharding={replicated}
  ROOT r = f32[4] all-reduce(x), replica_groups={{0,7}}, to_apply=add, sharding={replicated}
}
HLO
want="rg.hlo:11:8: error: r: replica_groups names 7, but there are 1 replicas (--num-replicas, else the header's replica_count, else 1)"
expect_status 2 "$TESSEL" check "$WORK/rg.hlo"
expect_in "$ERR" "$want"
expect_status 2 "$TESSEL" compile "$WORK/rg.hlo" -o "$WORK/rg.plan"
expect_in "$ERR" "$want"
[ ! -e "$WORK/rg.plan" ] || fail "a refused compile wrote a plan"
expect_status 2 "$TESSEL" run "$WORK/rg.hlo" --random-inputs 1 --output-dir "$WORK/rg"
expect_in "$ERR" "$want"
expect_status 2 "$TESSEL" check "$WORK/rg.hlo" --num-replicas 7
expect_in "$ERR" "replica_groups names 7, but there are 7 replicas"
# with 8 replicas it is a valid module, and runs
expect_status 0 "$TESSEL" check "$WORK/rg.hlo" --num-replicas 8
expect_status 0 "$TESSEL" run "$WORK/rg.hlo" --num-replicas 8 --random-inputs 1 --output-dir "$WORK/rg8"
# global ids (use_global_device_ids): partitions x replicas; permute pairs
sed 's/replica_groups={{0,7}}, /replica_groups={{0,3}}, channel_id=1, use_global_device_ids=true, /' "$WORK/rg.hlo" >"$WORK/rgg.hlo"
expect_status 2 "$TESSEL" check "$WORK/rgg.hlo"
expect_in "$ERR" "rgg.hlo:11:8: error: r: replica_groups names 3, but there are 2 devices (partitions x replicas)"
expect_status 0 "$TESSEL" check "$WORK/rgg.hlo" --num-replicas 2
sed 's/all-reduce(x), replica_groups={{0,7}}, to_apply=add/collective-permute(x), source_target_pairs={{0,1},{1,0}}/' "$WORK/rg.hlo" >"$WORK/cp.hlo"
expect_status 2 "$TESSEL" check "$WORK/cp.hlo"
expect_in "$ERR" "cp.hlo:11:8: error: collective-permute: source_target_pairs: id 1 is out of range"
sed 's/, replica_count=1//' "$WORK/cp.hlo" >"$WORK/cpn.hlo"
expect_status 2 "$TESSEL" run "$WORK/cpn.hlo" --random-inputs 1
expect_in "$ERR" "cpn.hlo:11:8: error: collective-permute: source_target_pairs: id 1 is out of range (there are 1 replicas)"
expect_status 0 "$TESSEL" check "$WORK/cpn.hlo" --num-replicas 2
expect_status 0 "$TESSEL" run "$WORK/cpn.hlo" --num-replicas 2 --random-inputs 1
expect_status 2 "$TESSEL" check "$WORK/rg.hlo" --num-replicas -1
# a header without replica_count leaves the replicas to the compile: check
# passes the module, and run (1 replica) refuses it with the same error
sed 's/, replica_count=1//' "$WORK/rg.hlo" >"$WORK/rgn.hlo"
expect_status 0 "$TESSEL" check "$WORK/rgn.hlo"
expect_status 2 "$TESSEL" check "$WORK/rgn.hlo" --num-replicas 1
expect_in "$ERR" "rgn.hlo:11:8: error: r: replica_groups names 7, but there are 1 replicas"
expect_status 2 "$TESSEL" run "$WORK/rgn.hlo" --random-inputs 1
expect_in "$ERR" "rgn.hlo:11:8: error: r: replica_groups names 7, but there are 1 replicas"
echo "hostile_options: replica_groups out of range are one error in check, compile and run"

# ---- 5. a seed with leading zeros is decimal ----
S="$TESSEL_SRC/tests/e2e/sgd_step.hlo"
for seed in 010 10 0x0a 8; do
    expect_status 0 "$TESSEL" run "$S" --random-inputs "$seed" --output-dir "$WORK/seed_$seed"
done
cmp -s "$WORK/seed_010/output_0.npy" "$WORK/seed_10/output_0.npy" || fail "--random-inputs 010 is not seed 10"
cmp -s "$WORK/seed_0x0a/output_0.npy" "$WORK/seed_10/output_0.npy" || fail "--random-inputs 0x0a is not seed 10"
cmp -s "$WORK/seed_010/output_0.npy" "$WORK/seed_8/output_0.npy" && fail "--random-inputs 010 is seed 8 (octal)"
for bad in -1 +1 0x 08x 0x-1; do
    expect_status 2 "$TESSEL" run "$S" --random-inputs "$bad"
    expect_in "$ERR" "--random-inputs needs a seed from 0 to 18446744073709551615 (decimal, or hexadecimal after 0x), not '$bad'"
done
expect_status 0 "$TESSEL" run "$S" --random-inputs 18446744073709551615
for big in 18446744073709551616 0x10000000000000000; do
    expect_status 2 "$TESSEL" run "$S" --random-inputs "$big"
    expect_in "$ERR" "--random-inputs $big is too large: the largest seed is 18446744073709551615 (0xffffffffffffffff)"
done
echo "hostile_options: seeds are decimal (leading zeros too) or 0x hex, within 64 bits"

# ---- 6. numbers too large say so, and name the largest ----
too_large() { # too_large MESSAGE ARGS...: exit 2 and MESSAGE
    local want=$1
    shift
    expect_status 2 "$@"
    expect_in "$ERR" "tessel: error: $want"
}
M1="$TESSEL_SRC/examples/mlp.hlo"
too_large "--limit memory=99999999999999999999999 is too large: the largest is 9223372036854775807 bytes (8589934591G)" \
    "$TESSEL" plan "$M1" --limit memory=99999999999999999999999
too_large "--limit memory=8589934592G is too large: the largest is 9223372036854775807 bytes (8589934591G)" \
    "$TESSEL" plan "$M1" --limit memory=8589934592G
expect_status 0 "$TESSEL" plan "$M1" --limit memory=8589934591G
too_large "--limit memory needs a number of bytes >= 1" "$TESSEL" plan "$M1" --limit memory=-99999999999999999999999
too_large "--limit instructions=99999999999999999999 is too large: the largest is 2147483647" \
    "$TESSEL" compile "$M1" --limit instructions=99999999999999999999 -o "$WORK/big.plan"
too_large "--limit trips=9223372036854775808 is too large: the largest is 9223372036854775807" \
    "$TESSEL" run "$M1" --limit trips=9223372036854775808 --random-inputs 1
too_large "--mesh '99999999999999999999x2': a size is too large: the largest is 65536" \
    "$TESSEL" plan "$M1" --auto-shard --mesh 99999999999999999999x2
too_large "--mesh 'data=65537': a size is too large: the largest is 65536" "$TESSEL" plan "$M1" --auto-shard --mesh data=65537
too_large "--mesh '0x2': a size is a whole number from 1 to 65536" "$TESSEL" plan "$M1" --auto-shard --mesh 0x2
for opt in --num-partitions --num-replicas --hosts --local-devices; do
    too_large "$opt 99999999999999999999 is too large: the largest is 9223372036854775807" \
        "$TESSEL" plan "$M1" "$opt" 99999999999999999999
done
too_large "--num-partitions needs a whole number >= 1, not '-99999999999999999999'" \
    "$TESSEL" plan "$M1" --num-partitions -99999999999999999999
# --steps stops at TS_MAX_STEPS (10^12): 2^63-1 started a run no one can
# wait for; 2^63 overflows strtoll and says the same
for s in 9223372036854775808 9223372036854775807 1000000000001; do
    too_large "--steps $s is too large: the largest is 1000000000000" \
        "$TESSEL" run "$M1" --random-inputs 1 --steps "$s"
done
too_large "--steps needs a whole number >= 1, not '-99999999999999999999'" \
    "$TESSEL" run "$M1" --random-inputs 1 --steps -99999999999999999999
too_large "--output-device 99999999999999999999 is too large: the largest is 9223372036854775807" \
    "$TESSEL" run "$M1" --random-inputs 1 --output-device 99999999999999999999
for t in 1e10 1e999; do
    too_large "--timeout $t is too large: the largest is 31622400" "$TESSEL" run "$M1" --random-inputs 1 --timeout "$t"
done
too_large "--link-gbps 2000000 is too large: the largest is 1000000" "$TESSEL" plan "$M1" --link-gbps 2000000
# numbers as written: a leading blank or '+', a hexadecimal float, "inf":
# refused as --random-inputs ' 5' is (strtoll/strtod took them: --timeout
# 0x10 was 16 s)
for a in "--steps| 3" "--steps|+3" "--checkpoint-every|+1" "--timeout|0x10" "--timeout| 5" "--timeout|inf" \
    "--heartbeat|+5"; do
    expect_status 2 "$TESSEL" run "$M1" --random-inputs 1 "${a%%|*}" "${a#*|}"
    expect_in "$ERR" "${a%%|*} needs"
    expect_in "$ERR" "not '${a#*|}'"
done
expect_status 2 "$TESSEL" plan "$M1" --link-gbps 0x10
expect_in "$ERR" "--link-gbps needs"
too_large "TESSEL_FUSION_BLOCK=99999999999999999999: too large: the largest is 1048576" \
    env TESSEL_FUSION_BLOCK=99999999999999999999 "$TESSEL" run "$M1" --random-inputs 1
too_large "TESSEL_FUSION_BLOCK=1x: expected a non-negative integer" env TESSEL_FUSION_BLOCK=1x "$TESSEL" run "$M1" --random-inputs 1
echo "hostile_options: numbers too large for --limit, --mesh, the counts and durations say so and name the largest"
