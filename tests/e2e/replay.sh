#!/usr/bin/env bash
# replay.sh: `tessel run --spmd` replays an SPMD program as it is. Every
# collective's per-device result is checked against values worked out in
# NumPy from XLA's semantics (docs/operation_semantics.md), not from
# tessel: all-reduce over global ids, iota groups and two operands,
# all-gather, reduce-scatter in a permuted group order, all-to-all with a
# dimension and in tuple form, collective-permute with a device nobody
# sends to, collective-broadcast, ragged-all-to-all, send/recv between
# devices as XLA pipelines them, and the three group
# modes on 2 partitions x 2 replicas (cross-replica, cross-replica-and-
# partition, cross-partition). Each runs in one process and under
# `mpirun -np 2 --mca btl tcp,self` (bit-equal files), and the inputs:
# KEY@D per device, --random-inputs alone (every device the same) and
# --per-device (device d's seed, docs/cli.md), --output-device. Bad
# replays are refused with exit status 2 before anything runs.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
mpi() { env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self "$@"; }

cat >"$WORK/a.hlo" <<'HLO'
HloModule colls, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,4] parameter(0)
  y = f32[4] parameter(1)
  ar = f32[4,4] all-reduce(x), channel_id=1, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=add
  ag = f32[4,16] all-gather(x), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  rs = f32[1,4] reduce-scatter(x), channel_id=3, replica_groups={{3,2,1,0}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  aa = f32[4,4] all-to-all(x), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}
  t = (f32[4], f32[4], f32[4], f32[4]) all-to-all(y, y, y, y), channel_id=5, replica_groups={{0,1,2,3}}
  cp = f32[4,4] collective-permute(x), channel_id=6, source_target_pairs={{0,1},{1,2},{2,3}}
  cb = f32[4] collective-broadcast(y), channel_id=7, replica_groups={{1,0,3,2}}
  m = (f32[4,4], f32[4]) all-reduce(x, y), channel_id=8, replica_groups=[2,2]<=[4], use_global_device_ids=true, to_apply=add
  m2 = f32[4] all-reduce(y), channel_id=9, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add
  ROOT r = (f32[4,4], f32[4,16], f32[1,4], f32[4,4], (f32[4], f32[4], f32[4], f32[4]), f32[4,4], f32[4], (f32[4,4], f32[4]), f32[4]) tuple(ar, ag, rs, aa, t, cp, cb, m, m2)
}
HLO

# 2 partitions x 2 replicas: device d = replica * 2 + partition.
cat >"$WORK/b.hlo" <<'HLO'
HloModule modes, num_partitions=2, replica_count=2

add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY main {
  y = s32[3] parameter(0)
  xr = s32[3] all-reduce(y), replica_groups={{0,1}}, to_apply=add
  xrp = s32[3] all-reduce(y), channel_id=1, replica_groups={{0},{1}}, to_apply=add
  xp = s32[12] all-gather(y), channel_id=2, replica_groups={{1,0}}, dimensions={0}, use_global_device_ids=false
  cpr = s32[3] collective-permute(y), source_target_pairs={{0,1}}
  cpp = s32[3] collective-permute(y), channel_id=3, source_target_pairs={{1,0}}
  ROOT r = (s32[3], s32[3], s32[12], s32[3], s32[3]) tuple(xr, xrp, xp, cpr, cpp)
}
HLO

# ragged-all-to-all over 2 devices, one update per peer.
cat >"$WORK/c.hlo" <<'HLO'
HloModule ragged, num_partitions=2

ENTRY main {
  in = f32[4,2] parameter(0)
  out = f32[5,2] parameter(1)
  ioff = s64[2] parameter(2)
  send = s64[2] parameter(3)
  ooff = s64[2] parameter(4)
  recv = s64[2] parameter(5)
  ROOT r = f32[5,2] ragged-all-to-all(in, out, ioff, send, ooff, recv), channel_id=1, replica_groups={{0,1}}
}
HLO

# send/recv between devices, pipelined as XLA issues them (recv, send,
# recv-done, send-done; the two ends on different channel_ids, matched by
# their pairs): device d receives device d-1's x, device 0 nothing.
cat >"$WORK/d.hlo" <<'HLO'
HloModule p2p, num_partitions=4

ENTRY main {
  x = f32[2] parameter(0)
  t = token[] after-all()
  r = (f32[2], u32[], token[]) recv(t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}
  s = (f32[2], u32[], token[]) send(x, t), channel_id=2, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}, control-predecessors={r}
  rd = (f32[2], token[]) recv-done(r), channel_id=1
  sd = token[] send-done(s), channel_id=2
  ROOT v = f32[2] get-tuple-element(rd), index=0
}
HLO

"$PY" - "$WORK" <<'PY'
import os, sys
import numpy as np
w = sys.argv[1]
for d in range(4):
    np.save(f"{w}/a.x{d}.npy", (d * 100 + np.arange(16)).reshape(4, 4).astype(np.float32))
    np.save(f"{w}/a.y{d}.npy", (d * 10 + np.arange(4)).astype(np.float32))
    np.save(f"{w}/b.y{d}.npy", np.array([d + 1, 10 * (d + 1), 100 * (d + 1)], np.int32))
    np.save(f"{w}/d.x{d}.npy", np.array([d + 0.5, -d], np.float32))
# device 0 sends row 0 to itself and rows 1,2 to device 1 (at its row 0);
# device 1 sends row 0 to device 0 (at its row 1) and row 1 to itself at row 3
rag = {0: ([0, 1], [1, 2], [0, 0]), 1: ([0, 1], [1, 1], [1, 3])}
for d, (io, sz, oo) in rag.items():
    np.save(f"{w}/c.in{d}.npy", (d * 10 + np.arange(8)).reshape(4, 2).astype(np.float32))
    np.save(f"{w}/c.out{d}.npy", np.full((5, 2), -1, np.float32))
    for k, v in (("ioff", io), ("send", sz), ("ooff", oo), ("recv", [0, 0])):
        np.save(f"{w}/c.{k}{d}.npy", np.array(v, np.int64))
PY

A_IN=() B_IN=() C_IN=() D_IN=()
for d in 0 1 2 3; do
    A_IN+=(--input "x@$d=$WORK/a.x$d.npy" --input "y@$d=$WORK/a.y$d.npy")
    B_IN+=(--input "y@$d=$WORK/b.y$d.npy")
    D_IN+=(--input "x@$d=$WORK/d.x$d.npy")
done
for d in 0 1; do
    for k in in out ioff send ooff recv; do C_IN+=(--input "$k@$d=$WORK/c.$k$d.npy"); done
done

for mod in a b c d; do
    case $mod in a) args=("${A_IN[@]}") ;; b) args=("${B_IN[@]}") ;; c) args=("${C_IN[@]}") ;; d) args=("${D_IN[@]}") ;; esac
    expect_status 0 "$TESSEL" run "$WORK/$mod.hlo" --spmd "${args[@]}" --output-dir "$WORK/$mod.alone"
    expect_status 0 mpi -np 2 "$TESSEL" run "$WORK/$mod.hlo" --spmd "${args[@]}" --output-dir "$WORK/$mod.mpi"
    for f in "$WORK/$mod.alone"/*.npy; do
        cmp -s "$f" "$WORK/$mod.mpi/$(basename "$f")" || fail "$mod: $(basename "$f") differs under mpirun -np 2"
    done
done

"$PY" - "$WORK" <<'PY' || fail "a replayed collective differs from XLA's semantics"
import sys
import numpy as np
w = sys.argv[1]
def got(mod, i, d):
    return np.load(f"{w}/{mod}.alone/output_{i}.device_{d}.npy")
def check(mod, i, d, want, what):
    g = got(mod, i, d)
    if g.shape != np.shape(want) or not np.array_equal(g, want):
        sys.exit(f"{mod} {what} on device {d}: got {g.tolist()}, want {np.asarray(want).tolist()}")
x = [np.load(f"{w}/a.x{d}.npy") for d in range(4)]
y = [np.load(f"{w}/a.y{d}.npy") for d in range(4)]
for d in range(4):
    check("a", 0, d, x[d % 2] + x[d % 2 + 2], "all-reduce {{0,2},{1,3}}")
    check("a", 1, d, np.concatenate(x, axis=1), "all-gather dim 1")
    rank = [3, 2, 1, 0].index(d)          # group order {3,2,1,0}
    check("a", 2, d, sum(x)[rank:rank + 1], "reduce-scatter in group order")
    check("a", 3, d, np.concatenate([x[j][d:d + 1] for j in range(4)], axis=0), "all-to-all dim 0")
    for j in range(4):                     # tuple all-to-all: result j is what device j sent here
        check("a", 4 + j, d, y[j], "tuple all-to-all element %d" % j)
    check("a", 8, d, x[d - 1] if d > 0 else np.zeros((4, 4), np.float32), "collective-permute")
    check("a", 9, d, y[1], "collective-broadcast from the group's first id")
    g = [0, 1] if d < 2 else [2, 3]        # [2,2]<=[4]
    check("a", 10, d, x[g[0]] + x[g[1]], "two-operand all-reduce, operand 0")
    check("a", 11, d, y[g[0]] + y[g[1]], "two-operand all-reduce, operand 1")
    g = [0, 2] if d % 2 == 0 else [1, 3]   # [2,2]<=[2,2]T(1,0)
    check("a", 12, d, y[g[0]] + y[g[1]], "all-reduce over transposed iota groups")
b = [np.load(f"{w}/b.y{d}.npy") for d in range(4)]
for d in range(4):
    rep, part = divmod(d, 2)
    check("b", 0, d, b[part] + b[2 + part], "cross-replica all-reduce")
    check("b", 1, d, b[2 * rep] + b[2 * rep + 1], "cross-replica-and-partition all-reduce (replica group x partitions)")
    # replicas {1,0} times every partition, partition-major: devices 2, 0, 3, 1
    check("b", 2, d, np.concatenate([b[2], b[0], b[3], b[1]]), "cross-replica-and-partition all-gather {1,0}")
    check("b", 3, d, b[part] if rep == 1 else np.zeros(3, np.int32), "cross-replica collective-permute 0->1")
    check("b", 4, d, b[2 * rep + 1] if part == 0 else np.zeros(3, np.int32), "cross-partition collective-permute 1->0")
cin = [np.load(f"{w}/c.in{d}.npy") for d in range(2)]
want0 = np.full((5, 2), -1, np.float32); want0[0] = cin[0][0]; want0[1] = cin[1][0]
want1 = np.full((5, 2), -1, np.float32); want1[0:2] = cin[0][1:3]; want1[3] = cin[1][1]
check("c", 0, 0, want0, "ragged-all-to-all")
check("c", 0, 1, want1, "ragged-all-to-all")
for d in range(4):
    want = np.load(f"{w}/d.x{d - 1}.npy") if d > 0 else np.zeros(2, np.float32)
    check("d", 0, d, want, "recv-done of the send of pairs {{0,1},{1,2},{2,3}}")
PY

# Inputs: the same random values everywhere, or each device its own.
expect_status 0 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 3 --output-dir "$WORK/same"
expect_status 0 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 3 --per-device --output-dir "$WORK/own"
expect_status 0 mpi -np 4 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 3 --per-device --output-dir "$WORK/own4"
for f in "$WORK/own"/*.npy; do
    cmp -s "$f" "$WORK/own4/$(basename "$f")" || fail "--per-device: $(basename "$f") differs under mpirun -np 4"
done
"$PY" - "$WORK" <<'PY' || fail "random replay inputs"
import sys
import numpy as np
w = sys.argv[1]
# cross-replica all-reduce of y: with the same inputs, every device holds 2 y
same = [np.load(f"{w}/same/output_0.device_{d}.npy") for d in range(4)]
if not all(np.array_equal(s, same[0]) for s in same) or np.any(same[0] % 2):
    sys.exit("--random-inputs without --per-device: devices differ or the sums are not 2 y")
# with --per-device the two replicas' y differ: partition 0's sum is y0 + y2
own = [np.load(f"{w}/own/output_3.device_{d}.npy") for d in range(4)]  # collective-permute 0->1 (replicas)
if not np.array_equal(own[0], np.zeros(3, np.int32)) or np.array_equal(own[2], own[3]):
    sys.exit("--per-device: device 2 and 3 received the same values from different replicas")
PY
expect_status 0 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 3 --per-device --output-device 2 --output-dir "$WORK/one"
[ "$(ls "$WORK/one" | tr '\n' ' ')" = "output_0.npy output_1.npy output_2.npy output_3.npy output_4.npy outputs.json " ] ||
    fail "--output-device 2 wrote $(ls "$WORK/one")"
for i in 0 1 2 3 4; do
    cmp -s "$WORK/one/output_$i.npy" "$WORK/own/output_$i.device_2.npy" || fail "--output-device 2: output $i"
done

# Refused with exit status 2, nothing written.
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --input "y@4=$WORK/b.y0.npy" --output-dir "$WORK/bad1"
expect_in "$ERR" "input y@4: there is no device 4 (the program runs on 4)"
# a device number past int64 is named as given (it read 9223372036854775807)
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --input "y@99999999999999999999=$WORK/b.y0.npy"
expect_in "$ERR" "there is no device 99999999999999999999 (the program runs on 4)"
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --random-inputs 1 --input "y@1=$WORK/b.y0.npy"
expect_in "$ERR" "KEY@DEVICE binds one device of a replay: add --spmd"
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --random-inputs 1 --per-device
expect_in "$ERR" "--per-device applies to replays: add --spmd"
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --reference --random-inputs 1
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --output-device 4
expect_in "$ERR" "--output-device 4: the program runs on devices 0 to 3"
# a group naming a replica that is not there (the verifier cannot know:
# --num-replicas 1 is given at run time)
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --num-replicas 1 --output-dir "$WORK/bad2"
expect_in "$ERR" "replica_groups names 1, but there are 1 replicas"
# an all-gather whose result does not fit its group at run time
expect_status 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --num-partitions 3
expect_in "$ERR" "over a group of"
expect_status 2 mpi -np 2 "$TESSEL" run "$WORK/b.hlo" --spmd --random-inputs 1 --num-replicas 1 --output-dir "$WORK/bad4"
# a recv that names no pairs cannot say where its data comes from
sed 's/, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}, control/, control/; s/recv(t), channel_id=1, frontend_attributes=[^ ]*$/recv(t), channel_id=1/' "$WORK/d.hlo" >"$WORK/bad5.hlo"
expect_status 2 "$TESSEL" run "$WORK/bad5.hlo" --spmd --random-inputs 1 --output-dir "$WORK/bad5"
expect_in "$ERR" "r: a recv between devices needs its pairs"
# devices that take different trip counts (partition-id bounds a loop
# with an all-reduce inside): the waiting device is told, nobody hangs
cat >"$WORK/stray.hlo" <<'HLO'
HloModule stray, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  pid = u32[] partition-id()
  n = s32[] convert(pid)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  ROOT t = (s32[], f32[4]) tuple(j, y)
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}
HLO
expect_status 1 timeout 60 "$TESSEL" run "$WORK/stray.hlo" --spmd --random-inputs 1 --output-dir "$WORK/bad6"
expect_in "$ERR" "the other devices finished their program without reaching this collective"
# a plan with host work is several programs, not one to replay
hoc=$(instantiate "$TESSEL_SRC/tests/models/host_ops_chain.hlo" 2)
expect_status 0 "$TESSEL" compile "$hoc" -o "$WORK/host.plan"
expect_status 2 "$TESSEL" run "$WORK/host.plan" --spmd --random-inputs 1
expect_in "$ERR" "--spmd replays one SPMD program: run this plan without --spmd"
for dir in bad1 bad2 bad4 bad5 bad6; do [ ! -e "$WORK/$dir" ] || fail "a refused replay wrote $dir"; done
echo "replay: every collective equals XLA's semantics per device, alone and under mpirun; inputs and errors"
