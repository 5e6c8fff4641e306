#!/usr/bin/env bash
# mpi_collectives.sh: every collective (all-reduce, all-gather,
# reduce-scatter, all-to-all, collective-permute, collective-broadcast)
# on 1, 2, 3, 4, 6 and 8 devices, replayed (--spmd) in one process and
# under mpirun on 1, 2 and 4 ranks where the devices split evenly, over
# groups that span hosts, groups inside a host, groups in reverse order
# and uneven groups; every device's result is checked against values
# worked out in NumPy from XLA's semantics, and every mpirun run is
# bit-equal to the one process (the data are small integers, so every
# order of a sum is exact).
#
# The all-reduces include reducers MPI has no operation for, which cross
# hosts as a user-defined MPI operation running the HLO computation
# (coll/mpi_world.c): `multiply(a, b) + (a + b)` on s32 (commutative, as
# device/reducer_comp.c proves), "the first operand" on s32 (not
# commutative: rank order, or the operands travel where the group is not
# in host order), complex add; and and/or on pred, multiply on s32, max
# on bf16 and f16 (MPI's or tessel's built-in ops). The largest case runs
# again in 13-byte MPI pieces (TESSEL_MPI_PIECE_BYTES), so the chunked
# paths (records of the user operation, reduce-scatter segments,
# point-to-point blocks, all-gathers) run on small data.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
mpi() { env ASAN_OPTIONS="$MPI_ASAN" timeout 180 mpirun --oversubscribe --mca btl tcp,self "$@" </dev/null; }

# gen.py N DIR: the module DIR/c.N.hlo, its inputs DIR/N.{x,k}<d>.npy and
# DIR/N.want.npz (each output of each device, worked out in NumPy).
cat >"$WORK/gen.py" <<'PY'
import sys
import numpy as np
N, w = int(sys.argv[1]), sys.argv[2]
L = 24   # every group size here divides it

def gsets(n):
    s = {"all": [list(range(n))], "rev": [list(reversed(range(n)))]}
    if n % 2 == 0 and n >= 4:
        s["stride"] = [list(range(k, n, 2)) for k in (0, 1)]      # spans hosts
        s["pairs"] = [[2 * k, 2 * k + 1] for k in range(n // 2)]  # inside a host of >= 2 devices
    if n >= 3:
        s["uneven"] = [[0, n - 1], list(range(1, n - 1))]
    return s

def text(groups):
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"

rng = np.random.default_rng(N)
x = [rng.integers(-8, 9, (2, L)).astype(np.float32) for _ in range(N)]
k = [rng.integers(-3, 4, (2, L)).astype(np.int32) for _ in range(N)]
for d in range(N):
    np.save(f"{w}/{N}.x{d}.npy", x[d])
    np.save(f"{w}/{N}.k{d}.npy", k[d])
pr = [kk > 0 for kk in k]
cx = [(xx + 1j * kk).astype(np.complex64) for xx, kk in zip(x, k)]

comps = """
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
add_c64 {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT r = c64[] add(a, b)
}
mix {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ab = s32[] multiply(a, b)
  s = s32[] add(b, a)
  ROOT r = s32[] add(ab, s)
}
first {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] copy(a)
}
mul {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] multiply(a, b)
}
and_p {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT r = pred[] and(a, b)
}
or_p {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT r = pred[] or(a, b)
}
max_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] maximum(a, b)
}
max_f16 {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT r = f16[] maximum(a, b)
}
"""
body = [f"  x = f32[2,{L}] parameter(0)", f"  k = s32[2,{L}] parameter(1)",
        "  zero = s32[] constant(0)", f"  zb = s32[2,{L}] broadcast(zero), dimensions={{}}",
        f"  p = pred[2,{L}] compare(k, zb), direction=GT", f"  kf = f32[2,{L}] convert(k)",
        f"  c = c64[2,{L}] complex(x, kf)", f"  h = bf16[2,{L}] convert(x)", f"  g = f16[2,{L}] convert(x)"]
outs, want = [], []   # output names and shapes; want[i][d]
ch = [0]

def add(line, shape, per_device):
    ch[0] += 1
    name = f"o{len(outs)}"
    body.append(f"  {name} = {shape} {line}, channel_id={ch[0]}")
    outs.append((name, shape))
    want.append([per_device(d) for d in range(N)])

def conv(src, ty, name):   # an f32 copy of a low-precision result, for the .npy
    body.append(f"  {name} = f32[2,{L}] convert({src})")

def fold(f, vals):
    acc = vals[0]
    for v in vals[1:]:
        acc = f(acc, v)
    return acc

def group(groups, d):
    return next(g for g in groups if d in g)

for gname, G in gsets(N).items():
    gt = text(G)
    ar = f"replica_groups={gt}, use_global_device_ids=true"
    add(f"all-reduce(x), {ar}, to_apply=add_f32", f"f32[2,{L}]",
        lambda d: fold(np.add, [x[j] for j in group(G, d)]))
    add(f"all-reduce(k), {ar}, to_apply=mix", f"s32[2,{L}]",
        lambda d: fold(lambda a, b: (a * b + (a + b)).astype(np.int32), [k[j] for j in group(G, d)]))
    add(f"all-reduce(k), {ar}, to_apply=first", f"s32[2,{L}]", lambda d: k[group(G, d)[0]])
    add(f"all-reduce(k), {ar}, to_apply=mul", f"s32[2,{L}]",
        lambda d: fold(lambda a, b: (a * b).astype(np.int32), [k[j] for j in group(G, d)]))
    add(f"all-reduce(p), {ar}, to_apply=and_p", f"pred[2,{L}]",
        lambda d: fold(np.logical_and, [pr[j] for j in group(G, d)]))
    add(f"all-reduce(p), {ar}, to_apply=or_p", f"pred[2,{L}]",
        lambda d: fold(np.logical_or, [pr[j] for j in group(G, d)]))
    add(f"all-reduce(c), {ar}, to_apply=add_c64", f"c64[2,{L}]",
        lambda d: fold(np.add, [cx[j] for j in group(G, d)]))
    for ty, comp in (("bf16", "max_bf16"), ("f16", "max_f16")):
        src = "h" if ty == "bf16" else "g"
        ch[0] += 1
        body.append(f"  m{ch[0]} = {ty}[2,{L}] all-reduce({src}), {ar}, to_apply={comp}, channel_id={ch[0]}")
        name = f"o{len(outs)}"
        conv(f"m{ch[0]}", ty, name)
        outs.append((name, f"f32[2,{L}]"))
        want.append([fold(np.maximum, [x[j] for j in group(G, d)]) for d in range(N)])
    s = len(G[0])
    add(f"collective-broadcast(x), replica_groups={gt}", f"f32[2,{L}]", lambda d: x[group(G, d)[0]])
    if any(len(g) != s for g in G):
        continue   # uneven: the shapes below depend on the group size
    add(f"all-gather(x), {ar}, dimensions={{0}}", f"f32[{2 * s},{L}]",
        lambda d: np.concatenate([x[j] for j in group(G, d)], axis=0))
    b = L // s
    add(f"reduce-scatter(x), {ar}, dimensions={{1}}, to_apply=add_f32", f"f32[2,{b}]",
        lambda d: fold(np.add, [x[j] for j in group(G, d)])[:, group(G, d).index(d) * b:(group(G, d).index(d) + 1) * b])
    add(f"reduce-scatter(k), {ar}, dimensions={{1}}, to_apply=mix", f"s32[2,{b}]",
        lambda d: fold(lambda a, c: (a * c + (a + c)).astype(np.int32), [k[j] for j in group(G, d)])
        [:, group(G, d).index(d) * b:(group(G, d).index(d) + 1) * b])
    add(f"all-to-all(x), replica_groups={gt}, dimensions={{1}}", f"f32[2,{L}]",
        lambda d: np.concatenate([x[j][:, group(G, d).index(d) * b:(group(G, d).index(d) + 1) * b]
                                  for j in group(G, d)], axis=1))
    if 2 % s == 0:
        add(f"all-to-all(k), replica_groups={gt}, dimensions={{0}}", f"s32[2,{L}]",
            lambda d: np.concatenate([k[j][group(G, d).index(d) * (2 // s):(group(G, d).index(d) + 1) * (2 // s)]
                                      for j in group(G, d)], axis=0))
pairs = "{" + ",".join("{%d,%d}" % (i, (i + 1) % N) for i in range(N)) + "}"
add(f"collective-permute(x), source_target_pairs={pairs}", f"f32[2,{L}]", lambda d: x[(d - 1) % N])
far = {0: N - 1, N - 1: 0} if N > 2 else {}
fp = "{" + ",".join("{%d,%d}" % (a, b) for b, a in far.items()) + "}" if far else "{{0,0}}"
add(f"collective-permute(k), source_target_pairs={fp}", f"s32[2,{L}]",
    lambda d: k[far[d]] if d in far else (k[0] if not far and d == 0 else np.zeros((2, L), np.int32)))

root = ", ".join(n for n, _ in outs)
shapes = ", ".join(s for _, s in outs)
hlo = f"HloModule colls_{N}, num_partitions={N}\n{comps}\nENTRY main {{\n" + "\n".join(body) + \
    f"\n  ROOT r = ({shapes}) tuple({root})\n}}\n"
open(f"{w}/c.{N}.hlo", "w").write(hlo)
np.savez(f"{w}/{N}.want.npz", **{f"o{i}_d{d}": want[i][d] for i in range(len(outs)) for d in range(N)})
open(f"{w}/{N}.n", "w").write(str(len(outs)))
PY

cat >"$WORK/check.py" <<'PY'
import sys
import numpy as np
N, w, got = int(sys.argv[1]), sys.argv[2], sys.argv[3]
want = np.load(f"{w}/{N}.want.npz")
n = int(open(f"{w}/{N}.n").read())
lines = open(f"{w}/c.{N}.hlo").read().splitlines()
for i in range(n):
    for d in range(N):
        g, e = np.load(f"{got}/output_{i}.device_{d}.npy"), want[f"o{i}_d{d}"]
        if g.shape != e.shape or not np.array_equal(g, e):
            what = next((l.strip() for l in lines if l.strip().startswith(f"o{i} =")), f"output {i}")
            sys.exit(f"N={N}: {what}: device {d}: got {g.tolist()}, want {e.tolist()}")
print(f"N={N}: {n} collectives x {N} devices equal XLA's semantics")
PY

for N in 1 2 3 4 6 8; do
    "$PY" "$WORK/gen.py" "$N" "$WORK" || fail "gen.py $N"
    IN=()
    for ((d = 0; d < N; d++)); do IN+=(--input "x@$d=$WORK/$N.x$d.npy" --input "k@$d=$WORK/$N.k$d.npy"); done
    expect_status 0 "$TESSEL" run "$WORK/c.$N.hlo" --spmd "${IN[@]}" --output-dir "$WORK/$N.alone"
    "$PY" "$WORK/check.py" "$N" "$WORK" "$WORK/$N.alone" || fail "N=$N in one process differs from XLA's semantics"
    for np in 1 2 4; do
        [ $((N % np)) = 0 ] || continue
        expect_status 0 mpi -np $np "$TESSEL" run "$WORK/c.$N.hlo" --spmd "${IN[@]}" --output-dir "$WORK/$N.mpi$np"
        for f in "$WORK/$N.alone"/*.npy; do
            cmp -s "$f" "$WORK/$N.mpi$np/$(basename "$f")" || fail "N=$N: $(basename "$f") differs under mpirun -np $np"
        done
    done
done
# 13-byte pieces: every chunked path on small data.
for spec in "8 4" "6 2"; do
    set -- $spec
    IN=()
    for ((d = 0; d < $1; d++)); do IN+=(--input "x@$d=$WORK/$1.x$d.npy" --input "k@$d=$WORK/$1.k$d.npy"); done
    expect_status 0 mpi -np "$2" -x TESSEL_MPI_PIECE_BYTES=13 "$TESSEL" run "$WORK/c.$1.hlo" --spmd "${IN[@]}" \
        --output-dir "$WORK/$1.pieces"
    for f in "$WORK/$1.alone"/*.npy; do
        cmp -s "$f" "$WORK/$1.pieces/$(basename "$f")" || fail "N=$1: $(basename "$f") differs in 13-byte pieces"
    done
done
echo "mpi_collectives: ok"
