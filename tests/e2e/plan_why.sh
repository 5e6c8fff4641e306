#!/usr/bin/env bash
# plan_why.sh: why each collective is there (issue 31): every collective of
# a plan carries the instruction whose rule asked for it, that
# instruction's FILE:LINE:COL, the conflict in words, its bytes per device
# and, where one is cheaper, the change that avoids it; in the text, JSON
# and HTML plans and `tessel plan --why NAME`. Equal shardings written
# differently share a colour in the DOT and HTML graphs, with a legend in
# words. A multi-partition compile whose shardings split nothing warns.
# Every value below is worked out by hand in the comments.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
D="$TESSEL_SRC/tests/e2e/plan_why"
cd "$D"

# ---- Megatron's MLP (mlp_megatron.hlo) on 2 devices ----
# y = dot(a, w2) contracts dim 1 of a (f32[16,40] tiled [1,2]) against w2
# tiled [2,1]: each device holds a partial f32[16,24] = 1536 bytes; a ring
# all-reduce over 2 moves 2*(2-1)/2 * 1536 = 1536 bytes per device. y is
# at line 12, its name at column 8 ("  ROOT y"). Gathering the contracted
# dims instead would move a (2560 bytes) and w2 (3840): dearer, so no
# "avoid" line.
expect_status 0 "$TESSEL" plan mlp_megatron.hlo
expect_in "$OUT" "all-reduce               all-reduce           groups {{0,1}}, 1536 bytes per device, on y's value"
expect_in "$OUT" "why: asked for by y at mlp_megatron.hlo:12:8: dot y contracts dim 1 of a, which is tiled over 2 devices: partial sums are all-reduced"
! grep -q "avoid:" "$OUT" || fail "Megatron's all-reduce has no cheaper form, yet an avoid line is printed"
[ "$(grep -c 'why:' "$OUT")" = 1 ] || fail "Megatron's MLP should have exactly one collective"

# The README's examples/mlp.hlo, the same MLP smaller: act is f32[8,32]
# tiled [1,2], the partial y f32[8,8] is 256 bytes, all-reduced: 256 per
# device; "  ROOT %y" starts its name (with the %) at column 8 of line 13.
expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --why y
expect_in "$OUT" "y: 1 collective produces or consumes it"
expect_in "$OUT" "all-reduce (all-reduce, 256 bytes per device, groups {{0,1}}) on y's value"
expect_in "$OUT" "why: asked for by y at $TESSEL_SRC/examples/mlp.hlo:13:8: dot y contracts dim 1 of act, which is tiled over 2 devices: partial sums are all-reduced"

# ---- a forced reshard (forced.hlo) ----
# c = add(a, b) is tiled on dim 0 (line 6, col 3) but b is tiled on dim 1:
# b's shard f32[8,3] (96 bytes) is exchanged all-to-all, keeping half:
# 96*(2-1)/2 = 48 bytes per device. d = negate(c) (line 7, col 8) is
# replicated: c's shard f32[4,6] (96 bytes) is all-gathered from the other
# device: 96*(2-1) = 96 bytes per device.
expect_status 0 "$TESSEL" plan forced.hlo
expect_in "$OUT" "groups {{0,1}}, 48 bytes per device, on b -> c"
expect_in "$OUT" "why: asked for by c at forced.hlo:6:3: operand b is tiled on dim 1 over 2 devices but add c needs it tiled on dim 0 over 2 devices (an elementwise op takes its operands sharded as its result): exchanged by all-to-all"
expect_in "$OUT" "avoid: b with sharding={devices=[2,1]0,1} would make this edge local (a parameter: the caller can pass it so): 0 bytes per device here instead of 48"
expect_in "$OUT" "groups {{0,1}}, 96 bytes per device, on c -> d"
expect_in "$OUT" "why: asked for by d at forced.hlo:7:8: operand c is tiled on dim 0 over 2 devices but negate d needs it replicated (an elementwise op takes its operands sharded as its result): all-gathered"
expect_in "$OUT" "avoid: c with sharding={replicated} would make this edge local (if add c can compute it so): 0 bytes per device here instead of 96"

# ---- a sort along a tiled dim (sort_rows.hlo) ----
# x f32[4,8] is tiled on dim 1 over 2 devices; sort s sorts along dim 1
# (line 13, col 8), so its rule moves the tiles to dim 0: x's shard f32[4,4]
# (64 bytes) is exchanged all-to-all, keeping half: 64*(2-1)/2 = 32 bytes
# per device. x is a parameter: passed tiled on dim 0 it costs nothing.
expect_status 0 "$TESSEL" plan sort_rows.hlo
expect_in "$OUT" "groups {{0,1}}, 32 bytes per device, on x -> s"
expect_in "$OUT" "why: asked for by s at sort_rows.hlo:13:8: operand x is tiled on dim 1 over 2 devices but sort s needs it tiled on dim 0 over 2 devices (it sorts along dim 1, which is tiled over 2 devices): exchanged by all-to-all"
expect_in "$OUT" "avoid: x with sharding={devices=[2,1]0,1} would make this edge local (a parameter: the caller can pass it so): 0 bytes per device here instead of 32"

# ---- a sum over a tiled dim (reduce_rows.hlo) ----
# r sums dim 1 of x f32[2,64], tiled over 2 devices: each device holds a
# partial f32[2] (8 bytes), all-reduced: 2*(2-1)/2*8 = 8 bytes per device.
# Gathering dim 1 of x instead moves its shard f32[2,32] (256 bytes) from
# the other device: 256 > 8, so no avoid line.
expect_status 0 "$TESSEL" plan reduce_rows.hlo
expect_in "$OUT" "groups {{0,1}}, 8 bytes per device, on r's value"
expect_in "$OUT" "why: asked for by r at reduce_rows.hlo:14:8: reduce r reduces dim 1 of x, which is tiled over 2 devices: partial sums are all-reduced"
! grep -q "avoid:" "$OUT" || fail "reduce_rows's all-reduce has no cheaper form, yet an avoid line is printed"

# ---- batching dims next to the dims that need a merge (batching_mesh.hlo) ----
# m2 (take_along_axis) and s3 (its gradient) have their batching dim 0
# tiled over the first mesh axis, where they are local; each all-reduce
# is caused by the other axis: m2's looked-up dim 1 of logp, s3's updates
# g3 split on their scatter dim 1. The reasons name those dims, not dim 0.
expect_status 0 "$TESSEL" plan "$TESSEL_SRC/tests/models/batching_mesh.hlo"
expect_in "$OUT" "gather m2 reads from operand logp, which is tiled on dim 1 over 2 devices (each device gathers from the part it holds): partial sums are all-reduced"
expect_in "$OUT" "scatter s3 writes updates g3, tiled on dim 1 over 2 devices, into a whole operand (each device scatters its part of the updates): partial sums are all-reduced"

# --why: the collectives that produce or consume one value
expect_status 0 "$TESSEL" plan forced.hlo --why c
expect_in "$OUT" "c: 2 collectives produce or consume it"
expect_in "$OUT" "all-to-all (all-to-all, 48 bytes per device, groups {{0,1}}) on b -> c"
expect_in "$OUT" "all-gather (all-gather, 96 bytes per device, groups {{0,1}}) on c -> d"
expect_status 0 "$TESSEL" plan forced.hlo --why b
expect_in "$OUT" "b: 1 collective produces or consumes it"
expect_status 0 "$TESSEL" plan forced.hlo --why a
expect_in "$OUT" "a: no collective produces or consumes it"
expect_status 2 "$TESSEL" plan forced.hlo --why nosuch
expect_in "$ERR" "--why nosuch: no instruction or collective of that name in the plan"
# A slip of a name (an instruction's, a collective's) is answered with the nearest.
expect_status 2 "$TESSEL" plan forced.hlo --why cc
expect_in "$ERR" "--why cc: no instruction or collective of that name in the plan; did you mean c?"
expect_status 2 "$TESSEL" plan forced.hlo --why all-gathr
expect_in "$ERR" "did you mean all-gather?"
expect_status 2 "$TESSEL" plan forced.hlo --why c --format json
expect_in "$ERR" "--why prints the reasons of one value's collectives"

# JSON: every collective's "why" with its fields and values
expect_status 0 "$TESSEL" plan forced.hlo --format json
"$PY" - "$OUT" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["clusters"][0]["collectives"]
assert [x["opcode"] for x in c] == ["all-to-all", "all-gather"], c
assert [x["bytes_per_device"] for x in c] == [48, 96], c
w = c[0]["why"]
assert w == {"kind": "operand", "instruction": "c", "file": "forced.hlo", "line": 6, "column": 3,
             "text": "operand b is tiled on dim 1 over 2 devices but add c needs it tiled on dim 0 over 2 devices "
                     "(an elementwise op takes its operands sharded as its result): exchanged by all-to-all",
             "avoid": "b with sharding={devices=[2,1]0,1} would make this edge local (a parameter: the caller can "
                      "pass it so): 0 bytes per device here instead of 48"}, w
w = c[1]["why"]
assert (w["kind"], w["instruction"], w["line"], w["column"]) == ("operand", "d", 7, 8), w
PY
expect_status 0 "$TESSEL" plan mlp_megatron.hlo --format json
"$PY" - "$OUT" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["clusters"][0]["collectives"]
assert len(c) == 1 and c[0]["bytes_per_device"] == 1536, c
w = c[0]["why"]
assert (w["kind"], w["instruction"], w["line"], w["column"], w["avoid"]) == ("partial", "y", 12, 8, None), w
assert w["text"] == "dot y contracts dim 1 of a, which is tiled over 2 devices: partial sums are all-reduced", w
PY

# DOT: each collective's reason is its node's tooltip (shown on hover in the SVG)
expect_status 0 "$TESSEL" plan forced.hlo --format dot
expect_in "$OUT" 'tooltip="why: asked for by c at forced.hlo:6:3: operand b is tiled on dim 1 over 2 devices'

# ---- plan files keep the reasons; plans written before them still load ----
expect_status 0 "$TESSEL" compile forced.hlo -o "$WORK/forced.plan"
expect_in "$WORK/forced.plan" "// TesselWhyFile forced.hlo"
expect_in "$WORK/forced.plan" "// TesselWhy operand 6 3 0 main c b operand b is tiled on dim 1 over 2 devices but add c needs it tiled on dim 0 over 2 devices (an elementwise op takes its operands sharded as its result): exchanged by all-to-all"
expect_in "$WORK/forced.plan" "// TesselAvoid b with sharding={devices=[2,1]0,1} would make this edge local"
expect_status 0 "$TESSEL" plan "$WORK/forced.plan" --why c
expect_in "$OUT" "why: asked for by c at forced.hlo:6:3: operand b is tiled on dim 1"
expect_in "$OUT" "why: asked for by d at forced.hlo:7:8: operand c is tiled on dim 0"
# the same plan as an older tessel wrote it: no reason lines, digest redone
"$PY" - "$WORK/forced.plan" "$WORK/old.plan" <<'PY'
import hashlib, sys
lines = open(sys.argv[1], "rb").read().splitlines(keepends=True)
body = b"".join(l for l in lines[:-1] if not l.startswith((b"// TesselWhy", b"// TesselAvoid")))
open(sys.argv[2], "wb").write(body + b"// TesselDigest sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n")
PY
expect_status 0 "$TESSEL" plan "$WORK/old.plan"
expect_in "$OUT" "groups {{0,1}}, 48 bytes per device"
expect_in "$OUT" "why: not recorded (a plan file written before tessel kept reasons)"
expect_status 0 "$TESSEL" plan "$WORK/old.plan" --format json
"$PY" -c 'import json,sys; w=json.load(open(sys.argv[1]))["clusters"][0]["collectives"][0]["why"]; assert w["kind"]=="unknown" and w["text"] is None, w' "$OUT"
expect_status 0 "$TESSEL" run "$WORK/old.plan" --random-inputs 1 --output-dir "$WORK/o1"
# a reason line out of place is an error naming the line
"$PY" - "$WORK/forced.plan" "$WORK/bad.plan" <<'PY'
import hashlib, sys
lines = open(sys.argv[1], "rb").read().splitlines(keepends=True)[:-1]
i = next(k for k, l in enumerate(lines) if l.startswith(b"// TesselCollective"))
lines.insert(i, b"// TesselAvoid nothing\n")
body = b"".join(lines)
open(sys.argv[2], "wb").write(body + b"// TesselDigest sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n")
PY
expect_status 2 "$TESSEL" plan "$WORK/bad.plan"
expect_in "$ERR" "a reason line before any '// TesselCollective' line"

# ---- colours by meaning ----
# w1 {devices=[1,2]<=[2]} and h {devices=[1,2]0,1} are one sharding (and a,
# which propagation gives h's): one colour; w2 (tiled on dim 0) another;
# x and y replicated grey. The legend says each in words.
expect_status 0 "$TESSEL" plan mlp_megatron.hlo --format dot
"$PY" - "$OUT" <<'PY'
import re, sys
dot = open(sys.argv[1]).read()
fill = {m.group(1): m.group(2) for m in re.finditer(r'label="(\w+)\\n[^"]*", fillcolor="(#[0-9a-f]{6})"', dot)}
assert fill["w1"] == fill["h"] == fill["a"], fill
assert fill["w2"] != fill["w1"], fill
assert fill["x"] == fill["y"] == "#eeeeee", fill
legend = dict(re.findall(r'legend_\d+ \[id="legend-\d+", label="([^"\\]*)\\n[^"]*", fillcolor="(#[0-9a-f]{6})"', dot))
assert legend == {"tiled on dim 1 over 2 devices": fill["w1"], "tiled on dim 0 over 2 devices": fill["w2"],
                  "replicated": "#eeeeee"}, legend
PY
TESSEL_DOT=none expect_status 0 "$TESSEL" plan mlp_megatron.hlo --format html
"$PY" - "$OUT" <<'PY'
import re, sys
html = open(sys.argv[1]).read()
# the legend table: colour, meaning, canonical sharding
rows = re.findall(r'<tr><td style="background:(#[0-9a-f]{6})">#[0-9a-f]{6}</td><td>([^<]*)</td><td><code>([^<]*)</code>', html)
legend = {words: col for col, words, key in rows}
assert set(legend) == {"tiled on dim 1 over 2 devices", "tiled on dim 0 over 2 devices", "replicated"}, rows
# the graph's boxes (tessel's own layout): w1 and h share the dim-1 colour
fills = {}
for m in re.finditer(r'<g[^>]*id="n-0-(\d)"[^>]*>\s*<rect[^>]*fill="(#[0-9a-f]{6})"', html):
    fills[int(m.group(1))] = m.group(2)
assert fills and fills.get(1) == fills.get(3) == legend["tiled on dim 1 over 2 devices"], fills
assert fills.get(2) == legend["tiled on dim 0 over 2 devices"], fills
# the instruction table's sharding cells in the same colours
cells = dict(re.findall(r'<tr id="row-0-\d+"><td>\d+</td><td>(\w+)</td><td>[^<]*</td><td>[^<]*</td>'
                        r'<td style="background:(#[0-9a-f]{6})">', html))
assert cells["w1"] == cells["h"] == cells["a"] == legend["tiled on dim 1 over 2 devices"], cells
assert cells["w2"] == legend["tiled on dim 0 over 2 devices"] and cells["x"] == cells["y"] == "#eeeeee", cells
# the collective's reason in its table row
assert "contracts dim 1 of a, which is tiled over 2 devices: partial sums are all-reduced" in html
assert "<code>mlp_megatron.hlo:12:8</code>" in html
PY

# ---- nothing partitioned: shardings given, none splits a value ----
# x is {replicated}, y {devices=[1,1,4]<=[4] last_tile_dim_replicate} (no data
# dim tiled: replicated too).
expect_status 0 "$TESSEL" plan all_replicated.hlo
expect_in "$ERR" "warning: module all_replicated: 2 values carry a sharding, but every one is {replicated}, so nothing is partitioned: each of the 4 partitions computes the whole module"
expect_in "$ERR" "docs/hlo-text.md, Shardings"
# every value on one device (maximal): said so
sed 's/sharding={[^}]*}/sharding={maximal device=0}/' all_replicated.hlo >"$WORK/all_maximal.hlo"
expect_status 0 "$TESSEL" plan "$WORK/all_maximal.hlo"
expect_in "$ERR" "2 values carry a sharding, but every one puts its value whole on one device ({maximal}), so nothing is partitioned"
expect_status 0 "$TESSEL" plan all_replicated.hlo
# ... and once only; none when something is split
[ "$(grep -c warning: "$ERR")" = 1 ] || fail "the warning is said more than once"
expect_status 0 "$TESSEL" plan forced.hlo
! grep -q "nothing is partitioned" "$ERR" || fail "forced.hlo is partitioned, yet warned"
echo "plan_why: ok"
