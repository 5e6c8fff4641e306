#!/usr/bin/env bash
# shardy.sh: the shardings JAX writes (Shardy's round-trip attributes,
# docs/hlo-text.md "Shardy") and XLA's named (V3) sharding text are the
# shardings tessel partitions with: each model of tests/models/shardy runs
# partitioned and equals the reference run (or, for a shard_map, NumPy),
# and its plan shows the shardings and collectives worked out by hand.
# test_oracle.c runs the others on 1 and 2 replicas (`// devices:`); the
# shard_maps (`// not-oracle:`) run on 4 partitions x 2 replicas here.
set -euo pipefail
. "$(dirname "$0")/lib.bash"
M="$TESSEL_SRC/tests/models/shardy"

# plan_field MODEL N EXPR: a Python expression over the plan's first cluster `c`.
plan_field() {
    "$TESSEL" plan "$1" --num-partitions "$2" --format json >"$WORK/plan.json" || fail "plan $1"
    "$PY" - "$WORK/plan.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["clusters"][0]
print(eval(sys.argv[2]))
PY
}

oracle() { # oracle MODEL N
    expect_status 0 "$TESSEL" run "$1" --num-partitions "$2" --random-inputs 5 --output-dir "$WORK/p"
    expect_status 0 "$TESSEL" run "$1" --reference --random-inputs 5 --output-dir "$WORK/r"
    same_outputs "$WORK/r" "$WORK/p" "$(basename "$1")"
    rm -rf "$WORK/p" "$WORK/r"
}

# Parameters sharded only by xla.sdy.sharding: [{"x"}, {}] on x=2 is
# {devices=[2,1]<=[2]}; the add needs no collective.
oracle "$M/params.hlo" 2
[ "$(plan_field "$M/params.hlo" 2 'c["inputs"][0]["sharding"]')" = "{devices=[2,1]<=[2]}" ] ||
    fail "params: input 0 is not {devices=[2,1]<=[2]}"
[ "$(plan_field "$M/params.hlo" 2 'len(c["collectives"])')" = 0 ] || fail "params: collectives"

# The output sharded only by xla.sdy.FuncResultSharding ([{}, {"x"}]): the
# output is column-sharded, not replicated, and nothing is all-gathered
# (rows to columns is one all-to-all).
oracle "$M/func_result.hlo" 2
[ "$(plan_field "$M/func_result.hlo" 2 'c["outputs"][0]["sharding"] in ("{devices=[1,2]<=[2]}", "{devices=[1,2]0,1}")')" = True ] ||
    fail "func_result: output 0 is not {devices=[1,2]<=[2]}"
[ "$(plan_field "$M/func_result.hlo" 2 'sorted(x["opcode"] for x in c["collectives"])')" = "['all-to-all']" ] ||
    fail "func_result: collectives are not one all-to-all"

# A PropagationBarrier with no allowed direction stops the rows sharding
# (output 0 replicated), one allowing forward passes it (output 1); the
# ShardingGroup gives exp(b) the sharding of its group's negate(a) (output 2).
oracle "$M/barrier_group.hlo" 2
[ "$(plan_field "$M/barrier_group.hlo" 2 '[o["sharding"] for o in c["outputs"]]')" = \
    "['{replicated}', '{devices=[2,1]0,1}', '{devices=[2,1]0,1}']" ] || fail "barrier_group: output shardings"

# sharding= and xla.sdy.sharding that map devices differently: refused
# where the Shardy attribute is, with both readings.
expect_status 2 "$TESSEL" check "$M/disagree.hlo"
expect_in "$ERR" "disagree.hlo:4:"
expect_in "$ERR" "the shardings of 'a' disagree: sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}, but xla.sdy.sharding means {devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"

# shard_map over x=2, y=2 (JAX 0.10.2's lowering of a psum over y of
# a_block @ b_block): a manual region whose all-reduce runs per device;
# the result is a @ b, checked with NumPy.
expect_status 0 "$TESSEL" run "$M/shard_map_full.hlo" --num-partitions 4 --random-inputs 5 --output-dir "$WORK/p"
[ "$(plan_field "$M/shard_map_full.hlo" 4 'len(c["collectives"])')" = 0 ] ||
    fail "shard_map_full: the partitioner added collectives"
[ "$(plan_field "$M/shard_map_full.hlo" 4 \
    '[(x["opcode"], x["sharding"], x["device_shape"]) for x in c["instructions"] if x["opcode"] in ("all-reduce", "dot")]')" = \
    "[('dot', '{manual}', 'f32[4,4]'), ('all-reduce', '{manual}', 'f32[4,4]')]" ] ||
    fail "shard_map_full: the body is not manual"
[ "$(plan_field "$M/shard_map_full.hlo" 4 'c["outputs"][0]["sharding"]')" = \
    "{devices=[2,1,2]<=[4] last_tile_dim_replicate}" ] || fail "shard_map_full: output sharding"
"$PY" - "$WORK/p/output_0.npy" <<'PY' || fail "shard_map_full: not a @ b"
import sys
import numpy as np
def sm(x):
    M = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def draw(leaf, n):  # DESIGN.md's --random-inputs, seed 5
    return np.array([np.float32(((sm(sm(sm(5) ^ leaf) ^ i) >> 11) * 2.0 ** -53) * 2 - 1) for i in range(n)], np.float32)
a, b = draw(0, 64).reshape(8, 8), draw(1, 32).reshape(8, 4)
got = np.load(sys.argv[1])
np.testing.assert_allclose(got, a @ b, rtol=0, atol=1e-4 * np.abs(a @ b).max())
PY
# On 4 partitions x 2 replicas: the result NumPy checked, from each replica.
expect_status 0 "$TESSEL" run "$M/shard_map_full.hlo" --num-partitions 4 --num-replicas 2 --random-inputs 5 \
    --output-dir "$WORK/p2"
same_outputs "$WORK/p" "$WORK/p2" "shard_map_full on 4 partitions x 2 replicas"

# Partially manual (JAX 0.10.2: shard_map over x of a mesh x=2, y=2 with
# axis_names={'x'}, psum over x of 2a): y stays automatic inside
# ({devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}); the
# result is 2 (a[:4] + a[4:]).
expect_status 0 "$TESSEL" run "$M/shard_map_partial.hlo" --num-partitions 4 --random-inputs 5 --output-dir "$WORK/q"
[ "$(plan_field "$M/shard_map_partial.hlo" 4 \
    '[x["sharding"] for x in c["instructions"] if x["opcode"] == "all-reduce"]')" = \
    "['{devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}']" ] ||
    [ "$(plan_field "$M/shard_map_partial.hlo" 4 \
    '[x["sharding"] for x in c["instructions"] if x["opcode"] == "all-reduce"]')" = \
    "['{devices=[1,1,2,2]0,2,1,3 last_tile_dims={replicated, manual}}']" ] ||
    fail "shard_map_partial: the body's all-reduce is not manual over x, replicated over y"
"$PY" - "$WORK/q/output_0.npy" <<'PY' || fail "shard_map_partial: not 2 (a[:4] + a[4:])"
import sys
import numpy as np
def sm(x):
    M = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
a = np.array([np.float32(((sm(sm(sm(5) ^ 0) ^ i) >> 11) * 2.0 ** -53) * 2 - 1) for i in range(32)], np.float32).reshape(8, 4)
np.testing.assert_allclose(np.load(sys.argv[1]), 2 * (a[:4] + a[4:]), rtol=0, atol=1e-6)
PY
expect_status 0 "$TESSEL" run "$M/shard_map_partial.hlo" --num-partitions 4 --num-replicas 2 --random-inputs 5 \
    --output-dir "$WORK/q2"
same_outputs "$WORK/q" "$WORK/q2" "shard_map_partial on 4 partitions x 2 replicas"

# XLA's named (V3) sharding text: {@mesh<x=2,y=2>, [{y}, {}]} is y over
# rows, replicated over x: {devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}.
oracle "$M/v3.hlo" 4
[ "$(plan_field "$M/v3.hlo" 4 'c["inputs"][0]["sharding"]')" = \
    "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}" ] || fail "v3: input 0"
[ "$(plan_field "$M/v3.hlo" 4 'c["outputs"][0]["sharding"]')" = "{devices=[2,2]<=[2,2]T(1,0)}" ] ||
    fail "v3: output"
# A compile for several partitions where no value has a sharding tessel
# reads: one warning naming the frontend attributes it did not read; none
# on one partition, none where a sharding was read.
expect_status 0 "$TESSEL" plan "$M/unsharded.hlo" --num-partitions 2
[ "$(grep -c "^tessel: warning: " "$ERR")" = 1 ] || fail "unsharded: not one warning"
expect_in "$ERR" "tessel: warning: no value of module plain carries a sharding tessel read, so it runs replicated on all 2 partitions (not read: frontend attributes mhlo.sharding_whatever, mhlo.sharding); the forms tessel reads are in docs/hlo-text.md"
expect_status 0 "$TESSEL" plan "$M/unsharded.hlo" --num-partitions 1
[ ! -s "$ERR" ] || fail "unsharded: a warning on one partition"
expect_status 0 "$TESSEL" run "$M/params.hlo" --num-partitions 2 --random-inputs 1 --output-dir "$WORK/w"
[ ! -s "$ERR" ] || fail "params: a warning where the shardings were read"

# replicated={"x"} with "x" sharding a dim (or part of it, or named twice)
# is Shardy's "duplicate axis ref" at the attribute (it was accepted);
# disjoint sub-axes of one axis are fine.
sdy_param() { # sdy_param FILE SHARDING: a module whose parameter carries it
    printf '%s\n' 'HloModule r, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=4, "y"=2]>}}' '' \
        'ENTRY main {' "  a = f32[8,4]{1,0} parameter(0), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, $2>\"}" \
        '  ROOT n = f32[8,4]{1,0} negate(a)' '}' >"$1"
}
for bad in '[{\"x\"}, {}], replicated={\"x\"}' '[{\"x\":(1)2}, {}], replicated={\"x\"}' \
    '[{}, {}], replicated={\"y\", \"y\"}'; do
    sdy_param "$WORK/rep.hlo" "$bad"
    expect_status 2 "$TESSEL" check "$WORK/rep.hlo"
    expect_in "$ERR" "rep.hlo:4:"
    expect_in "$ERR" "error: in xla.sdy.sharding: duplicate axis ref: "
done
sdy_param "$WORK/rep.hlo" '[{\"x\":(1)2}, {}], replicated={\"x\":(2)2, \"y\"}'
expect_status 0 "$TESSEL" check "$WORK/rep.hlo"
# a sharding of another rank than its value's is said in Shardy's terms at
# the sharding (it was GSPMD's tile dimensions at the instruction, and a
# replicated one of another rank was taken)
for bad in '[{\"x\"}, {}, {}]' '[{}, {}, {}]' '[{\"x\"}]'; do
    sdy_param "$WORK/rank.hlo" "$bad"
    expect_status 2 "$TESSEL" check "$WORK/rank.hlo"
    expect_in "$ERR" "rank.hlo:4:87: error: in xla.sdy.sharding: the sharding gives "
    expect_in "$ERR" "but the value is f32[8,4], of rank 2: write one {...} per dimension"
done
# slips of Shardy's words, meshes and axes are named
sdy_param "$WORK/slip.hlo" '[{\"x\"}, {}], replicatd={\"y\"}'
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "found 'replicatd'; did you mean replicated?"
sdy_param "$WORK/slip.hlo" '[{\"x\"}, {\"yy\"}]'
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" 'axis "yy" is not in mesh @mesh (its axes: "x", "y")'
sed 's/#sdy.sharding</#sdy.shardng</' "$WORK/rank.hlo" >"$WORK/slip.hlo"
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "found 'sdy.shardng'; did you mean sdy.sharding?"
sed 's/@mesh,/@mesh2,/' "$WORK/rank.hlo" >"$WORK/slip.hlo"
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "mesh @mesh2 is not defined (the module's xla.sdy.meshes does not name it); did you mean @mesh?"
# a slip of a Shardy attribute tessel reads is named (it was passed over:
# the value ran unsharded, without a word when another value was sharded)
sed 's/xla.sdy.sharding=/xla.sdy.shardng=/' "$WORK/rank.hlo" >"$WORK/slip.hlo"
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "slip.hlo:4:57: error: 'a' has the frontend attribute xla.sdy.shardng, which tessel does not read; did you mean xla.sdy.sharding?"
sed 's/xla.sdy.meshes=/xla.sdy.meshs=/' "$WORK/rank.hlo" >"$WORK/slip.hlo"
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "slip.hlo:1:35: error: the module's frontend attribute xla.sdy.meshs is not read; did you mean xla.sdy.meshes?"
# a mesh wider than the run's partitions: the mesh, its devices and the
# partitions (it was "device 2 is out of range [0, 2)" at the first value)
sdy_param "$WORK/wide.hlo" '[{\"x\"}, {}]'
expect_status 2 "$TESSEL" plan "$WORK/wide.hlo" --num-partitions 4
expect_in "$ERR" "wide.hlo:1:51: error: mesh @mesh has 8 devices but this run has 4 partitions (--num-partitions 4): "
expect_in "$ERR" "pass --num-partitions 8, or give the mesh 4 devices"
# a shard_map whose ends disagree or name no mesh's axis, or whose local
# shape is written wrong: said there (the axis was reported in the other
# end's in_shardings; the other two were taken without a word)
SM="$M/shard_map_full.hlo"
sed 's/manual_axes{\\"x\\", \\"y\\"}>",xla.sdy.out/manual_axes{\\"x\\", \\"z\\"}>",xla.sdy.out/' "$SM" >"$WORK/sm.hlo"
expect_status 2 "$TESSEL" check "$WORK/sm.hlo"
expect_in "$ERR" 'sm.hlo:23:208: error: in xla.sdy.manual_axes: manual axis "z" is in none of the module'"'"'s meshes'
sed 's/manual_axes{\\"x\\", \\"y\\"}>",xla.sdy.out/manual_axes{\\"x\\"}>",xla.sdy.out/' "$SM" >"$WORK/sm.hlo"
expect_status 2 "$TESSEL" check "$WORK/sm.hlo"
expect_in "$ERR" "the manual axes of xla.sdy.LocalToGlobalShape 'shard_map.14' are not those of the other end of its shard_map"
sed 's/shard_map.11 = f32\[4,4\]/shard_map.11 = f32[4,3]/' "$SM" >"$WORK/sm.hlo"
expect_status 2 "$TESSEL" check "$WORK/sm.hlo"
expect_in "$ERR" "sm.hlo:20:3: error: shard_map.11: declared shape f32[4,3] does not match element 0 of 'shard_map.10', f32[4,4]"
# a maximal mesh on a device past the partitions: the device, not a count
printf '%s\n' 'HloModule r, frontend_attributes={xla.sdy.meshes={mm = #sdy.mesh<[], device_ids=[5]>}}' '' 'ENTRY main {' \
    '  a = f32[8,4]{1,0} parameter(0), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mm, []>"}' \
    '  ROOT n = f32[8,4]{1,0} negate(a)' '}' >"$WORK/max5.hlo"
expect_status 2 "$TESSEL" plan "$WORK/max5.hlo" --num-partitions 2
expect_in "$ERR" "max5.hlo:1:51: error: mesh @mm names device 5 but this run has 2 partitions (--num-partitions 2), devices 0 to 1: pass --num-partitions 6, or give the mesh device ids below 2"
# a priority gone wrong ({"x"}q1)
sdy_param "$WORK/slip.hlo" '[{\"x\"}q1, {}]'
expect_status 2 "$TESSEL" check "$WORK/slip.hlo"
expect_in "$ERR" "expected a priority p<N> after the dimension's '}', then ',' or ']', found 'q1'"
sed 's/HloModule r,/HloModule r, num_partitions=4,/' "$WORK/wide.hlo" >"$WORK/wide4.hlo"
expect_status 2 "$TESSEL" check "$WORK/wide4.hlo"
expect_in "$ERR" "error: mesh @mesh has 8 devices but this run has 4 partitions (num_partitions=4 in the module header): a sharding over the mesh puts a piece on each of its devices; write num_partitions=8 in the header, or give the mesh 4 devices"
printf '%s\n' 'HloModule v' '' 'ENTRY main {' '  a = f32[8,4]{1,0} parameter(0), sharding={@mesh<x=2,y=2>, [{x}, {}], replicated={x}}' \
    '  ROOT n = f32[8,4]{1,0} negate(a)' '}' >"$WORK/v3rep.hlo"
expect_status 2 "$TESSEL" check "$WORK/v3rep.hlo"
expect_in "$ERR" 'v3rep.hlo:4:72: error: duplicate axis ref: "x"'

echo "shardy: Shardy parameters, FuncResultSharding, disagreement, shard_map and V3 as worked out"
