#!/usr/bin/env bash
# plan_views.sh: seeing what the partitioner did (issue 18): the sharding
# grids of `tessel plan --show` against golden files and against NumPy's
# reading of the iota tile assignments; colour on a terminal only; the DOT
# output parsed by Graphviz with each collective on the edge it serves;
# --dump-dir on compile, plan and run (files in pass order, each parses
# back with `tessel check`); progress lines under a pseudo-terminal, with
# --progress off one, and under mpirun (rank 0 alone).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
D="$TESSEL_SRC/tests/e2e/plan_views"

# ---- grids: golden files (1-D, 2-D, uneven, partially replicated, iota) ----
expect_status 0 "$TESSEL" plan "$D/grids.hlo" --show all --ascii
diff -u "$D/grids_ascii.txt" "$OUT" >&2 || fail "--show all --ascii differs from grids_ascii.txt"
expect_status 0 "$TESSEL" plan "$D/grids.hlo" --show e --show f --show b
diff -u "$D/grids_box.txt" "$OUT" >&2 || fail "--show e --show f --show b differs from grids_box.txt"
# -o FILE writes the same text
expect_status 0 "$TESSEL" plan "$D/grids.hlo" --show e --show f --show b -o "$WORK/g.txt"
cmp -s "$D/grids_box.txt" "$WORK/g.txt" || fail "--show -o wrote other text"

# The devices in the boxes, read back from the ASCII grids, are NumPy's
# tile assignment: devices=[T]<=[dims]T(perm) is arange.reshape(dims).transpose(perm).reshape(T).
"$PY" - "$D/grids_ascii.txt" <<'PY'
import re, sys
import numpy as np
text = open(sys.argv[1]).read()
def boxes(name):
    """Labels of every grid of NAME, row-major, grid by grid."""
    block = text.split("\n\n")
    blk = [b for b in block if b.startswith(name + " (")][0]
    out = []
    for line in blk.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if any(cells):
                out.append(cells)
    return out
def expand(lbl):
    devs = []
    for part in lbl.split(","):
        if "-" in part:
            a, b = map(int, part.split("-")); devs += list(range(a, b + 1))
        else:
            devs.append(int(part))
    return devs
# a: [4,2]<=[8]
want = np.arange(8).reshape(4, 2)
got = np.array([[expand(c)[0] for c in row] for row in boxes("a")])
assert (got == want).all(), ("a", got, want)
# c: [2,2,2]<=[2,2,2]T(2,1,0): one grid per tile of dim 2, rows dim 0, columns dim 1
ta = np.arange(8).reshape(2, 2, 2).transpose(2, 1, 0)
rows = boxes("c")
for k in range(2):
    got = np.array([[expand(c)[0] for c in row] for row in rows[2 * k:2 * k + 2]])
    assert (got == ta[:, :, k]).all(), ("c", k, got, ta[:, :, k])
# f: [2,4]<=[4,2]T(1,0)
want = np.arange(8).reshape(4, 2).transpose(1, 0)
got = np.array([[expand(c)[0] for c in row] for row in boxes("f")])
assert (got == want).all(), ("f", got, want)
# b: 4 tiles, each on 2 devices (last_tile_dim_replicate): row-major pairs
got = [expand(c) for c in boxes("b")[0]]
assert got == [[0, 1], [2, 3], [4, 5], [6, 7]], got
# d: rows split in 2, each tile on 4 devices
got = [expand(r[0]) for r in boxes("d")]
assert got == [[0, 1, 2, 3], [4, 5, 6, 7]], got
# e: 10 in tiles of ceil(10/8) = 2: widths in proportion (the empty tiles narrowest)
line = [l for l in text.split("\n\n") if l.startswith("e (")][0].splitlines()[2]
widths = [len(s) for s in line.strip("+").split("+")]
assert widths[:5] == [widths[0]] * 5 and all(w < widths[0] for w in widths[5:]), widths
# a: the short last row (1 of 10) is drawn lower than the others (3 of 10)
blk = [l for l in text.split("\n\n") if l.startswith("a (")][0].splitlines()
heights, h = [], 0
for l in blk[3:]:
    if l.startswith("+"):
        heights.append(h); h = 0
    elif l.startswith("|"):
        h += 1
heights = heights[1:]
assert heights[-1] < heights[0] and heights[0] == heights[1] == heights[2], heights
print("grids: device order matches NumPy's tile assignments; sizes in proportion")
PY

# colour only on a terminal (and never with NO_COLOR); pipes get plain box characters
grep -q $'\033' "$D/grids_box.txt" && fail "golden grids contain escape codes"
script -qec "$TESSEL plan $D/grids.hlo --show a" /dev/null >"$WORK/tty.txt"
grep -q $'\033\[48;5;' "$WORK/tty.txt" || fail "--show on a terminal has no colour"
NO_COLOR=1 script -qec "$TESSEL plan $D/grids.hlo --show a" /dev/null >"$WORK/tty.txt"
grep -q $'\033\[48;5;' "$WORK/tty.txt" && fail "NO_COLOR: still coloured"

# bad names and combinations: status 2, said clearly
expect_status 2 "$TESSEL" plan "$D/grids.hlo" --show nosuch
expect_in "$ERR" "--show nosuch: no such instruction, input or output"
expect_status 2 "$TESSEL" plan "$D/grids.hlo" --show a --format json
expect_status 2 "$TESSEL" plan "$D/grids.hlo" --ascii
expect_status 2 "$TESSEL" plan "$D/grids.hlo" --expand x
# a plan file keeps its inputs' and outputs' shardings
expect_status 0 "$TESSEL" compile "$D/grids.hlo" -o "$WORK/grids.plan"
expect_status 0 "$TESSEL" plan "$WORK/grids.plan" --show c --ascii
expect_in "$OUT" "one grid per tile of dim 2 (4) in 2 tiles of 2"
expect_status 2 "$TESSEL" plan "$WORK/grids.plan" --show r
expect_in "$ERR" "a plan keeps the shardings of its inputs and outputs only"

# models/host_ops_chain.hlo (host work: tessel_print between clusters) for 2 partitions
sed -e 's/@N/2/g' -e 's/@D/0,1/g' "$TESSEL_SRC/tests/models/host_ops_chain.hlo" >"$WORK/host_chain.hlo"

# ---- DOT: Graphviz parses it; the collective is on the edge it serves ----
if command -v dot >/dev/null 2>&1; then
    expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --format dot -o "$WORK/mlp.dot"
    dot -Tsvg "$WORK/mlp.dot" -o "$WORK/mlp.svg" || fail "dot -Tsvg refused mlp.dot"
    "$PY" - "$WORK/mlp.dot" <<'PY'
import re, sys
dot = open(sys.argv[1]).read()
label = {m.group(1): m.group(2) for m in re.finditer(r'^\s*(\w+) \[id="[^"]*", label="((?:[^"\\]|\\.)*)"', dot, re.M)}
edges = re.findall(r'^\s*(\w+) -> (\w+)', dot, re.M)
name = lambda n: label.get(n, n).split("\\n")[0]
coll = [n for n, l in label.items() if l.startswith("all-reduce")]
assert len(coll) == 1, coll
c = coll[0]
assert "groups {{0,1}}" in label[c] and "256 bytes per device" in label[c], label[c]
ins = [name(a) for a, b in edges if b == c]
outs = [name(b) for a, b in edges if a == c]
# the partial dot y -> all-reduce -> the program's result
assert ins == ["y"] and outs == ["result\\n{replicated}".split("\\n")[0]], (ins, outs)
# every node carries its per-device shape
assert "per device f32[16,16]" in label[[n for n in label if name(n) == "w1"][0]]
print("dot: the all-reduce sits between y and the result")
PY
    # a reshard: x is sharded along the contracted dim, the consumer needs it
    # whole: an all-gather on x -> y (cheaper than the all-reduce of partial
    # sums; x cut by rows would rather give a local dot and gather y)
    cat >"$WORK/gather.hlo" <<'HLO'
HloModule gather, num_partitions=2

ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[4,4] parameter(1), sharding={replicated}
  ROOT y = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
HLO
    expect_status 0 "$TESSEL" plan "$WORK/gather.hlo" --format dot -o "$WORK/gather.dot"
    dot -Tsvg "$WORK/gather.dot" -o /dev/null || fail "dot -Tsvg refused gather.dot"
    "$PY" - "$WORK/gather.dot" <<'PY'
import re, sys
dot = open(sys.argv[1]).read()
label = {m.group(1): m.group(2) for m in re.finditer(r'^\s*(\w+) \[id="[^"]*", label="((?:[^"\\]|\\.)*)"', dot, re.M)}
edges = re.findall(r'^\s*(\w+) -> (\w+)(.*);$', dot, re.M)
name = lambda n: label.get(n, n).split("\\n")[0]
coll = [n for n, l in label.items() if "groups" in l]
assert coll, dot
# the collectives lie on the path x -> ... -> y, the first edge marked as a reshard
path = [name(b) for a, b, _ in edges if name(a) == "x"]
assert path and path[0] in [name(c) for c in coll], path
first = [s for a, b, s in edges if name(a) == "x"][0]
assert "reshard" in first and "{devices=[1,2]0,1}" in first, first
last = [name(a) for a, b, _ in edges if name(b) == "y"]
assert any(n in [name(c) for c in coll] for n in last), last
print("dot: the reshard of x is on the edge x -> y")
PY
    # a while loop is one node; --expand draws its body
    expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/while_loop.hlo" --format dot -o "$WORK/w.dot"
    dot -Tsvg "$WORK/w.dot" -o /dev/null || fail "dot -Tsvg refused the folded while"
    grep -q "shape=box3d" "$WORK/w.dot" || fail "the while is not folded into one node"
    body=$(sed -n 's/.*calls \([^,)( ]*\).*/\1/p' "$WORK/w.dot" | head -1)
    [ -n "$body" ] || fail "the folded while names no computation"
    expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/while_loop.hlo" --format dot --expand "$body" -o "$WORK/we.dot"
    dot -Tsvg "$WORK/we.dot" -o /dev/null || fail "dot -Tsvg refused the expanded while"
    grep -q "called by" "$WORK/we.dot" || fail "--expand $body drew no box"
    expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/while_loop.hlo" --format dot --expand nosuch
    expect_in "$ERR" "--expand nosuch: no computation or instruction of that name"
    # host work: the host program and each cluster boxed
    expect_status 0 "$TESSEL" plan "$WORK/host_chain.hlo" --format dot -o "$WORK/h.dot"
    dot -Tsvg "$WORK/h.dot" -o /dev/null || fail "dot -Tsvg refused the host program"
    grep -q 'subgraph "cluster_host"' "$WORK/h.dot" || fail "no host box"
else
    echo "plan_views: Graphviz's dot is not installed (scripts/setup.sh installs it); DOT checks skipped"
fi

# ---- --dump-dir: the module after each pass, in order; each parses back ----
expect_status 0 "$TESSEL" compile "$WORK/host_chain.hlo" --dump-dir "$WORK/dump" -o "$WORK/h.plan"
ls "$WORK/dump" >"$WORK/list"
"$PY" - "$WORK/list" <<'PY'
import sys
names = open(sys.argv[1]).read().split()
assert names == sorted(names) and len(names) >= 5, names
nums = [int(n.split(".")[0]) for n in names]
assert nums == list(range(1, len(names) + 1)), names
passes = [n.split(".", 2)[2] for n in names]
order = ["after_parse.hlo", "after_propagate.hlo", "after_outline.hlo"]
assert passes[:3] == order, passes
assert any(p.endswith("after_outline.hlo") and p.startswith("cluster_0") for p in passes), passes
assert any(p == "cluster_0.after_spmd_partition.hlo" for p in passes), passes
assert passes[-1] == "plan.json", passes
print("dump-dir:", " ".join(names))
PY
for f in "$WORK"/dump/*.hlo; do
    "$TESSEL" check "$f" >/dev/null 2>"$ERR" || fail "$f does not parse back"
done
"$PY" -c "import json,sys; json.load(open(sys.argv[1]))" "$WORK"/dump/*.plan.json || fail "plan.json is not JSON"
# the propagated module carries a sharding on every instruction of the entry
grep -q "sharding=" "$WORK"/dump/0002.*.after_propagate.hlo || fail "after_propagate has no shardings"
# plan and run write them too; a plan file dumps what it loaded
expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --dump-dir "$WORK/d2" -o /dev/null
[ -f "$WORK/d2/0001.mlp.after_parse.hlo" ] && [ -f "$WORK/d2/0003.mlp.cluster_0.after_spmd_partition.hlo" ] ||
    fail "plan --dump-dir: $(ls "$WORK/d2")"
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --dump-dir "$WORK/d3"
[ "$(ls "$WORK/d3" | wc -l)" = 4 ] || fail "run --dump-dir: $(ls "$WORK/d3")"
for f in "$WORK"/d3/*.hlo; do "$TESSEL" check "$f" >/dev/null || fail "$f does not parse back"; done
expect_status 0 "$TESSEL" plan "$WORK/h.plan" --dump-dir "$WORK/d4" -o /dev/null
ls "$WORK/d4" | grep -q "host.after_load.hlo" || fail "plan PLAN --dump-dir: $(ls "$WORK/d4")"
for f in "$WORK"/d4/*.hlo; do "$TESSEL" check "$f" >/dev/null || fail "$f does not parse back"; done
: >"$WORK/afile"
expect_status 2 "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" --dump-dir "$WORK/afile" -o /dev/null
expect_in "$ERR" "not a directory"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --reference --random-inputs 1 --dump-dir "$WORK/d5"

# ---- progress ----
SGD="$D/sgd_loss.hlo"
# off a terminal: nothing without --progress, one line per step with it
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 1 --steps 4 --watch loss
[ -s "$ERR" ] && fail "progress printed off a terminal without --progress"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 1 --steps 4 --watch loss --progress
[ "$(grep -c '^tessel: step [1-4] of 4: .* ms, loss ' "$ERR")" = 4 ] || fail "--progress: not one line per step"
# the watched values are the losses of runs of 1, 2, 3, 4 steps (the reference, chained by --steps)
for k in 1 2 3 4; do
    "$TESSEL" run "$SGD" --reference --random-inputs 1 --steps $k --output-dir "$WORK/ref$k" >/dev/null
    want=$("$PY" -c "import numpy as np,sys; print('%.6g' % np.load(sys.argv[1]))" "$WORK/ref$k/output_1.npy")
    got=$(sed -n "s/^tessel: step $k of 4: .*, loss \(.*\)$/\1/p" "$ERR")
    "$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b) > 1e-4*max(1,abs(a)))" "$want" "$got" ||
        fail "step $k: watched loss $got, the reference says $want"
done
# under a pseudo-terminal: one line redrawn in place, then the summary
script -qec "$TESSEL run $SGD --random-inputs 1 --steps 5 --watch loss" /dev/null >"$WORK/pty.txt"
grep -q $'\r\033\[Ktessel: step 3 of 5, .* a step, loss ' "$WORK/pty.txt" || fail "no progress line on a terminal: $(od -c "$WORK/pty.txt" | head)"
grep -q $'\r\033\[Ktessel: 5 of 5 steps, .* a step, loss ' "$WORK/pty.txt" || fail "no summary line on a terminal"
grep -q "output 1: f32\[\]" "$WORK/pty.txt" || fail "the outputs are missing under a terminal"
# one step that lasts more than a second: the ticker shows it running
cat >"$WORK/slow.hlo" <<'HLO'
HloModule slow

cond {
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(12)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[1024,1024]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[1024,1024] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  d = f32[1024,1024] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[1024,1024] sine(d)
  ROOT t = (s32[], f32[1024,1024]) tuple(j, s)
}

ENTRY main {
  a = f32[1024,1024] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[1024,1024]) tuple(z, a)
  w = (s32[], f32[1024,1024]) while(t), condition=cond, body=body
  ROOT r = f32[1024,1024] get-tuple-element(w), index=1
}
HLO
# (TESSEL_PROGRESS_DELAY shortens the second a one-step run waits)
start=$(date +%s.%N)
TESSEL_PROGRESS_DELAY=0.1 script -qec "$TESSEL run $WORK/slow.hlo --reference --random-inputs 1" /dev/null >"$WORK/pty.txt"
took=$("$PY" -c "import sys,time; print(time.time() - float(sys.argv[1]))" "$start")
if "$PY" -c "import sys; sys.exit(float(sys.argv[1]) < 0.4)" "$took"; then
    grep -q $'\r\033\[Ktessel: step 1 of 1, running ' "$WORK/pty.txt" || fail "a run of ${took}s showed no progress line"
    grep -q $'\r\033\[Ktessel: 1 of 1 steps, ' "$WORK/pty.txt" || fail "a long run of one step ended without its summary"
else
    echo "plan_views: the slow run took only ${took}s here; the ticker check needs more"
fi
# a short run of one step on a terminal prints no progress at all
script -qec "$TESSEL run $SGD --random-inputs 1" /dev/null >"$WORK/pty.txt"
grep -q "tessel: step" "$WORK/pty.txt" && fail "a short one-step run printed a progress line"
# errors of --watch: status 2 before anything runs
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 1 --watch nosuch
expect_in "$ERR" "--watch nosuch: no output has that name"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 1 --watch los
expect_in "$ERR" "did you mean loss?"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 1 --watch w2
expect_in "$ERR" "a watched output has one element"
# under mpirun: rank 0 alone prints the lines
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run "$SGD" --random-inputs 1 --steps 3 --watch loss --progress </dev/null
    [ "$(grep -c '^tessel: step [1-3] of 3: .*, loss ' "$ERR")" = 3 ] || fail "mpirun --progress: not 3 lines (rank 0 alone)"
fi
echo "plan_views: ok"
