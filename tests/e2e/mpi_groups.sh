#!/usr/bin/env bash
# mpi_groups.sh: collectives across hosts move data only among the hosts
# their groups join (coll/steps.c host_colors, coll/mpi_world.c's cached
# per-partition communicators), point to point for permute and broadcast.
#  1. Every collective kind over 8 devices with groups inside one host,
#     groups spanning hosts and uneven groups, replayed (--spmd) in one
#     process and under mpirun -np 2, 4, 8 (4, 2, 1 local devices):
#     bit-equal files, each device's result checked against values worked
#     out in NumPy from XLA's semantics; again in 13-byte MPI pieces.
#  2. --stats: the bytes each rank sent and received per collective kind
#     equal the ones worked out by hand for -np 4 (transport.h says what
#     is counted).
#  3. Simulated scale: data x model (8 ranks) and data x model x replica
#     (16 ranks) meshes of a small MLP, 2 local devices per rank, through
#     the oracle (outputs equal --reference); the bytes each rank sent
#     within 5% of what the plan's per-collective estimate says a host
#     moves. TESSEL_SWEEP=full adds 16
#     ranks on the 2-D mesh and 8 ranks on the 3-D one. A reshard by
#     all-to-all on 8 ranks checks the all-to-all's bytes the same way.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
mpi() { env ASAN_OPTIONS="$MPI_ASAN" timeout 180 mpirun --oversubscribe --mca btl tcp,self "$@"; }

# ---- 1. every collective, every group layout ----
# With 2 local devices (-np 4) hosts hold {0,1} {2,3} {4,5} {6,7}.
cat >"$WORK/g.hlo" <<'HLO'
HloModule groups, num_partitions=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[2,4] parameter(0)
  y = f32[4] parameter(1)
  ar_in = f32[2,4] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=add
  ar_span = f32[2,4] all-reduce(x), channel_id=2, replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, to_apply=add
  ar_uneven = f32[4] all-reduce(y), channel_id=3, replica_groups={{0,5},{1,2,3},{4},{6,7}}, use_global_device_ids=true, to_apply=add
  ag_span = f32[8,4] all-gather(x), channel_id=4, replica_groups={{0,3,5,6},{1,2,4,7}}, dimensions={0}, use_global_device_ids=true
  ag_in = f32[8] all-gather(y), channel_id=5, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}, use_global_device_ids=true
  rs = f32[2,1] reduce-scatter(x), channel_id=6, replica_groups={{7,5,3,1},{6,4,2,0}}, dimensions={1}, use_global_device_ids=true, to_apply=add
  aa = f32[2,4] all-to-all(x), channel_id=7, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={1}
  cp_ring = f32[4] collective-permute(y), channel_id=8, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  cp_far = f32[4] collective-permute(y), channel_id=9, source_target_pairs={{0,7},{7,0},{2,5}}
  cb = f32[4] collective-broadcast(y), channel_id=10, replica_groups={{5,0},{1,2,3,4},{7,6}}
  ar_max = f32[4] all-reduce(y), channel_id=11, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true, to_apply=max
  m = (f32[2,4], f32[4]) all-reduce(x, y), channel_id=12, replica_groups={{0,7},{1,6},{2,5},{3,4}}, use_global_device_ids=true, to_apply=add
  ROOT r = (f32[2,4], f32[2,4], f32[4], f32[8,4], f32[8], f32[2,1], f32[2,4], f32[4], f32[4], f32[4], f32[4], (f32[2,4], f32[4])) tuple(ar_in, ar_span, ar_uneven, ag_span, ag_in, rs, aa, cp_ring, cp_far, cb, ar_max, m)
}
HLO
"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
for d in range(8):
    np.save(f"{w}/x{d}.npy", (d * 100 + np.arange(8)).reshape(2, 4).astype(np.float32))
    np.save(f"{w}/y{d}.npy", ((d * 37) % 11 + 10 * np.arange(4)).astype(np.float32) - 20)
PY
IN=()
for d in 0 1 2 3 4 5 6 7; do IN+=(--input "x@$d=$WORK/x$d.npy" --input "y@$d=$WORK/y$d.npy"); done
expect_status 0 "$TESSEL" run "$WORK/g.hlo" --spmd "${IN[@]}" --output-dir "$WORK/alone"
for np in 2 4 8; do
    expect_status 0 mpi -np $np "$TESSEL" run "$WORK/g.hlo" --spmd "${IN[@]}" --output-dir "$WORK/mpi$np" --stats
    cp "$ERR" "$WORK/stats$np"
    for f in "$WORK/alone"/*.npy; do
        cmp -s "$f" "$WORK/mpi$np/$(basename "$f")" || fail "$(basename "$f") differs under mpirun -np $np"
    done
done
# pieces of 13 bytes (coll/mpi_world.c, TESSEL_MPI_PIECE_BYTES): the split
# communicators' all-gathers and all-reduces and the point-to-point
# blocks cut into many uneven pieces
expect_status 0 mpi -np 4 -x TESSEL_MPI_PIECE_BYTES=13 "$TESSEL" run "$WORK/g.hlo" --spmd "${IN[@]}" --output-dir "$WORK/pieces"
for f in "$WORK/alone"/*.npy; do
    cmp -s "$f" "$WORK/pieces/$(basename "$f")" || fail "$(basename "$f") differs in 13-byte pieces"
done
"$PY" - "$WORK" <<'PY' || fail "a collective across hosts differs from XLA's semantics"
import sys
import numpy as np
w = sys.argv[1]
x = [np.load(f"{w}/x{d}.npy") for d in range(8)]
y = [np.load(f"{w}/y{d}.npy") for d in range(8)]
def check(i, d, want, what):
    g = np.load(f"{w}/alone/output_{i}.device_{d}.npy")
    if g.shape != np.shape(want) or not np.array_equal(g, want):
        sys.exit(f"{what} on device {d}: got {g.tolist()}, want {np.asarray(want).tolist()}")
def group(groups, d):
    return next(g for g in groups if d in g)
zeros = np.zeros(4, np.float32)
for d in range(8):
    check(0, d, x[d - d % 2] + x[d - d % 2 + 1], "all-reduce inside hosts")
    check(1, d, sum(x[j] for j in range(d % 2, 8, 2)), "all-reduce across hosts")
    g = group([[0, 5], [1, 2, 3], [4], [6, 7]], d)
    check(2, d, sum(y[j] for j in g), "all-reduce over uneven groups")
    g = group([[0, 3, 5, 6], [1, 2, 4, 7]], d)
    check(3, d, np.concatenate([x[j] for j in g], axis=0), "all-gather across hosts, scattered groups")
    g = group([[0, 1], [2, 3], [4, 5], [6, 7]], d)
    check(4, d, np.concatenate([y[j] for j in g]), "all-gather inside hosts")
    g = group([[7, 5, 3, 1], [6, 4, 2, 0]], d)
    k = g.index(d)
    check(5, d, sum(x[j] for j in g)[:, k:k + 1], "reduce-scatter in group order")
    g = group([[0, 4], [1, 5], [2, 6], [3, 7]], d)
    k = g.index(d)
    check(6, d, np.concatenate([x[j][:, 2 * k:2 * k + 2] for j in g], axis=1), "all-to-all dim 1")
    check(7, d, y[(d - 1) % 8], "collective-permute ring")
    far = {7: 0, 0: 7, 5: 2}
    check(8, d, y[far[d]] if d in far else zeros, "collective-permute, uneven pairs")
    g = group([[5, 0], [1, 2, 3, 4], [7, 6]], d)
    check(9, d, y[g[0]], "collective-broadcast from the group's first id")
    check(10, d, np.maximum.reduce([y[j] for j in range(d % 2, 8, 2)]), "max all-reduce over iota groups")
    check(11, d, x[d] + x[7 - d], "two-operand all-reduce, operand 0")
    check(12, d, y[d] + y[7 - d], "two-operand all-reduce, operand 1")
PY

# ---- 2. bytes per rank and kind, -np 4 (2 local devices; hosts 0-3) ----
# all-reduce: a host's buffer holds one slice per group spanning hosts of
# its color, moved 2 (k-1)/k of it each way among k hosts:
#   ar_span: 2 groups x 32 B among 4 hosts -> 96; ar_uneven: {0,5} and
#   {1,2,3} join hosts 0-2 (host 3 alone): 2 x 16 B among 3 -> 42 (host 3:
#   0); ar_max: 2 x 16 B among 4 -> 48; m (two operands: every operand
#   of the host, 2 devices x 48 B, to its one peer of {0,3} or {1,2}): 96.
#   Hosts 0-2: 282, host 3: 240.
# all-gather: ag_span joins all 4 hosts: 64 B (2 devices x 32) to each
#   of 3 peers = 192; ag_in stays inside the hosts.
# reduce-scatter (hierarchical: each host combines its members of a group,
#   one MPI reduce-scatter among the hosts): each host holds one member of
#   each of the 2 groups, so its buffer is 2 x 4 blocks of 8 B and its
#   segment 2 blocks: 64 - 16 = 48 out, 16 from each of 3 peers = 48 in.
# all-to-all: {0,4}... joins hosts 0-2 and 1-3; a host sends its peer
#   only the blocks the peer's members read: 2 devices x one 16 B block
#   = 32 each way.
# permute: the ring sends each host's last y (16 B) to the next host;
#   cp_far: host 0 <-> host 3 and host 1 -> host 2 (16 B each): sent
#   32 32 16 32, received 32 16 32 32.
# broadcast: host 0 sends y1 to hosts 1 and 2 (32), host 2 sends y5 to
#   host 0 (16): sent 32 0 16 0, received 16 16 16 0.
S="$WORK/stats4"
expect_in_file() { grep -qF -- "$2" "$1" || fail "--stats: no line '$2' in: $(cat "$1")"; }
expect_in_file "$S" "sent     all-reduce     min 240  median 282  max 282 bytes per rank"
expect_in_file "$S" "received all-reduce     min 240  median 282  max 282 bytes per rank"
expect_in_file "$S" "sent     all-gather     min 192  median 192  max 192 bytes per rank"
expect_in_file "$S" "received all-gather     min 192  median 192  max 192 bytes per rank"
expect_in_file "$S" "sent     reduce-scatter min 48  median 48  max 48 bytes per rank"
expect_in_file "$S" "received reduce-scatter min 48  median 48  max 48 bytes per rank"
expect_in_file "$S" "sent     all-to-all     min 32  median 32  max 32 bytes per rank"
expect_in_file "$S" "received all-to-all     min 32  median 32  max 32 bytes per rank"
expect_in_file "$S" "sent     permute        min 16  median 32  max 32 bytes per rank"
expect_in_file "$S" "received permute        min 16  median 32  max 32 bytes per rank"
expect_in_file "$S" "sent     broadcast      min 0  median 8  max 32 bytes per rank"
expect_in_file "$S" "received broadcast      min 0  median 16  max 16 bytes per rank"
# one rank: nothing crosses hosts, no such lines
expect_status 0 mpi -np 1 "$TESSEL" run "$WORK/g.hlo" --spmd "${IN[@]}" --output-dir "$WORK/mpi1" --stats
if grep -q "bytes per rank$" "$ERR"; then fail "-np 1 counted collective bytes: $(cat "$ERR")"; fi

# ---- 3. simulated scale: meshes of a small MLP, 2 local devices per rank ----
# mlp DIMS: a 2-layer MLP on a data x model mesh (D M) or data x model x
# replica (D M R: the last dim replicates every tile).
mlp() {
    local D=$1 M=$2 R=${3:-1} n rep="" t
    n=$((D * M * R))
    [ "$R" -gt 1 ] && rep=" last_tile_dim_replicate"
    t=$([ "$R" -gt 1 ] && echo ",$R" || echo "")
    cat <<HLO
HloModule mlp_mesh, num_partitions=$n

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[16,24] parameter(0), sharding={devices=[$D,1,$((M * R))]<=[$n] last_tile_dim_replicate}
  w1 = f32[24,32] parameter(1), sharding={devices=[1,$M,$((D * R))]<=[$D,$M$t]T(1,0$([ "$R" -gt 1 ] && echo ",2")) last_tile_dim_replicate}
  h = f32[16,32] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[$D,$M$t]<=[$n]$rep}
  z = f32[16,32] maximum(h, h), sharding={devices=[$D,$M$t]<=[$n]$rep}
  w2 = f32[32,8] parameter(2), sharding={devices=[$M,1,$((D * R))]<=[$D,$M$t]T(1,0$([ "$R" -gt 1 ] && echo ",2")) last_tile_dim_replicate}
  o = f32[16,8] dot(z, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[$D,1,$((M * R))]<=[$n] last_tile_dim_replicate}
  zero = f32[] constant(0)
  s = f32[8] reduce(o, zero), dimensions={0}, to_apply=add, sharding={replicated}
  ROOT r = (f32[16,8], f32[8]) tuple(o, s)
}
HLO
}
# scale NAME RANKS D M [R]: reference vs mpirun (2 local devices a rank).
scale() {
    local name=$1 ranks=$2
    shift 2
    mlp "$@" >"$WORK/$name.hlo"
    expect_status 0 "$TESSEL" run "$WORK/$name.hlo" --reference --random-inputs 7 --output-dir "$WORK/$name.ref"
    expect_status 0 "$TESSEL" compile "$WORK/$name.hlo" --hosts "$ranks" -o "$WORK/$name.plan"
    expect_status 0 mpi -np "$ranks" "$TESSEL" run "$WORK/$name.plan" --random-inputs 7 --output-dir "$WORK/$name.got" --stats
    expect_in "$ERR" "bytes per rank"
    cp "$ERR" "$WORK/$name.stats"
    for f in "$WORK/$name.ref"/*.npy; do
        npy_match "$f" "$WORK/$name.got/$(basename "$f")" || fail "$name on $ranks ranks: $(basename "$f") differs"
    done
    # The bytes each rank moved, against the plan's estimate: each
    # collective's per-device figure (bytes_per_device: 2 (k-1)/k of the
    # buffer for an all-reduce over k devices, k-1 operands for an
    # all-gather) turned into what a host moves when its devices' data
    # is combined first and crosses only between the hosts of its groups.
    expect_status 0 "$TESSEL" plan "$WORK/$name.plan" --format json
    "$PY" - "$OUT" "$WORK/$name.stats" <<'PY' || fail "$name on $ranks ranks: bytes per rank off the plan's estimate"
import json, re, sys
plan = json.load(open(sys.argv[1]))
hosts, local = plan["hosts"], plan["local_devices"]
want = {"all-reduce": [0.0] * hosts, "all-gather": [0.0] * hosts, "all-to-all": [0.0] * hosts}
for c in plan["clusters"][0]["collectives"]:
    text = c["replica_groups"]
    m = re.fullmatch(r"\[(\d+),(\d+)\]<=\[(\d+)\]", text)
    t = re.fullmatch(r"\[(\d+),(\d+)\]<=\[(\d+),(\d+)\]T\(1,0\)", text)
    if m:    # XLA's iota form: iota(N) reshaped to [G,S]
        G, S = int(m.group(1)), int(m.group(2))
        groups = [[k * S + j for j in range(S)] for k in range(G)]
    elif t:  # iota reshaped to [S,G], transposed
        G, S = int(t.group(1)), int(t.group(2))
        groups = [[j * G + k for j in range(S)] for k in range(G)]
    else:
        groups = json.loads(text.replace("{", "[").replace("}", "]"))
    k = len(groups[0])
    e = c["bytes_per_device"]
    # hosts joined by groups that span several (union-find)
    root = list(range(hosts))
    def find(h):
        while root[h] != h:
            h = root[h]
        return h
    for g in groups:
        for d in g[1:]:
            a, b = find(g[0] // local), find(d // local)
            root[max(a, b)] = min(a, b)
    for h in range(hosts):
        color = [j for j in range(hosts) if find(j) == find(h)]
        if len(color) < 2:
            continue
        kh = len(color)
        if c["opcode"] == "all-reduce":
            s = e * k / (2 * (k - 1))   # the buffer of one device
            spanning = [g for g in groups if find(g[0] // local) == find(h) and len({d // local for d in g}) > 1]
            want["all-reduce"][h] += 2 * (kh - 1) / kh * s * len(spanning)
        elif c["opcode"] == "all-gather":
            want["all-gather"][h] += e / (k - 1) * local * (kh - 1)
        elif c["opcode"] == "all-to-all":
            # a host sends each of its members' blocks only to the
            # members on other hosts (block: e / (k - 1) bytes)
            for g in groups:
                mine = sum(1 for d in g if d // local == h)
                want["all-to-all"][h] += e / (k - 1) * mine * (k - mine)
        else:
            sys.exit("no estimate for " + c["opcode"])
stats = open(sys.argv[2]).read()
for kind, per in want.items():
    if not any(per) and kind == "all-to-all":
        continue
    m = re.search(r"sent     %-14s min (\d+)  median (\d+)  max (\d+) bytes per rank" % kind, stats)
    got = [int(x) for x in m.groups()] if m else [0, 0, 0]
    per = sorted(per)
    n = len(per)
    exp = [per[0], per[n // 2] if n % 2 else (per[n // 2 - 1] + per[n // 2]) / 2, per[-1]]
    for g, x in zip(got, exp):
        if abs(g - x) > 0.05 * max(x, 1):
            sys.exit(f"{kind}: sent min/median/max {got}, the plan's estimate {exp}")
    print(f"{kind}: sent {got} bytes per rank, plan's estimate {exp}")
PY
}
scale mesh2d_8 8 4 4
scale mesh3d_16 16 2 4 4
if [ "${TESSEL_SWEEP:-}" = full ]; then
    scale mesh2d_16 16 8 4
    scale mesh3d_8 8 2 2 4
fi
# A reshard by all-to-all (rows to columns over 16 devices, 8 ranks): each
# host sends only the blocks of the 14 devices on other hosts.
reshard() {
    cat <<HLO
HloModule reshard_a2a, num_partitions=16

ENTRY main {
  x = f32[32,48] parameter(0), sharding={devices=[16,1]<=[16]}
  ROOT c = f32[32,48] copy(x), sharding={devices=[1,16]<=[16]}
}
HLO
}
mlp() { reshard; }
scale reshard_16 8
echo "mpi_groups: ok"
