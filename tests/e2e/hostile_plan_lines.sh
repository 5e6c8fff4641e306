#!/usr/bin/env bash
# hostile_plan_lines.sh: plan lines that were not checked, and a plan that
# tessel wrote and then refused (issue 30).
#  1. A model whose strings hold a line break followed by "// TesselEnd"
#     (metadata, backend_config, frontend_attributes) compiles to a plan
#     that loads and runs: the printer escapes raw line breaks in strings.
#  2. Behind a right digest (re-signed, tests/e2e/lib.bash plan_resign),
#     an InputMapping that is not the parameters in order, a
#     TesselCollective whose byte count overflows or exceeds every value,
#     and a TesselOutputSharding that contradicts the root (the root is an
#     input as it came in) are refused with status 2 at the line.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# ---- 1. strings with line breaks ----
printf 'HloModule s, num_partitions=2\nENTRY main {\n  x = f32[4] parameter(0), sharding={devices=[2]0,1}, metadata={op_name="a\n// TesselEnd\nb"}\n  ROOT y = f32[4] add(x, x), sharding={devices=[2]0,1}, backend_config="{\\"k\\": \\"c\n// TesselEnd\n\\"}"\n}\n' >"$WORK/str.hlo"
expect_status 0 "$TESSEL" check "$WORK/str.hlo"
expect_status 0 "$TESSEL" compile "$WORK/str.hlo" -o "$WORK/str.plan"
[ "$(grep -c '^// TesselEnd$' "$WORK/str.plan")" = 1 ] || fail "a raw line break of a string reached the plan"
npy_write "$WORK/x.npy" '<f4' 4 1 2 3 4
expect_status 0 "$TESSEL" run "$WORK/str.plan" --input 0="$WORK/x.npy" --output-dir "$WORK/o"
[ "$(npy_dump "$WORK/o/output_0.npy")" = "<f4 4 2 4 6 8" ] || fail "the plan gave $(npy_dump "$WORK/o/output_0.npy")"
echo "hostile_plan_lines: a plan of strings holding '// TesselEnd' loads and runs"

# ---- 2. lines checked behind the digest ----
M="$WORK/mlp.hlo"
sed 's/@N/2/g; s/@D/0,1/g' "$TESSEL_SRC/tests/models/mlp_megatron.hlo" >"$M"
expect_status 0 "$TESSEL" compile "$M" -o "$WORK/mlp.plan"
grep -q '^// InputMapping {0, 1, 2}$' "$WORK/mlp.plan" || fail "no InputMapping {0, 1, 2}"
grep -q '^// TesselCollective ' "$WORK/mlp.plan" || fail "no TesselCollective line"
edit() { # edit SED_EXPR: a copy of mlp.plan edited and re-signed, as $WORK/e.plan
    sed "$1" "$WORK/mlp.plan" >"$WORK/e.plan"
    plan_resign "$WORK/e.plan"
}
edit 's/^\/\/ InputMapping {0, 1, 2}$/\/\/ InputMapping {0, 1, 99999999999}/'
expect_status 2 "$TESSEL" run "$WORK/e.plan" --random-inputs 1
expect_in "$ERR" "error: InputMapping must list the entry's 3 parameters in order, {0, 1, ..., 2}"
edit 's/^\/\/ InputMapping {0, 1, 2}$/\/\/ InputMapping {0, 2, 1}/'
expect_status 2 "$TESSEL" run "$WORK/e.plan" --random-inputs 1
expect_in "$ERR" "InputMapping must list the entry's 3 parameters in order"
edit 's/^\(\/\/ TesselCollective [^ ]* [^ ]* \)[0-9]*/\199999999999999999999999/'
expect_status 2 "$TESSEL" run "$WORK/e.plan" --random-inputs 1
expect_in "$ERR" "expected '// TesselCollective NAME OPCODE BYTES GROUPS'"
edit 's/^\(\/\/ TesselCollective [^ ]* [^ ]* \)[0-9]*/\19223372036854775807/'
expect_status 2 "$TESSEL" run "$WORK/e.plan" --random-inputs 1
expect_in "$ERR" "a collective moving 9223372036854775807 bytes per device, more than twice any value of the program"
# output 0 is input 0 as it came in: its sharding swapped is a contradiction
cat >"$WORK/pass.hlo" <<'HLO'
HloModule pass, num_partitions=2
ENTRY main {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  y = f32[4] negate(x), sharding={devices=[2]0,1}
  ROOT t = (f32[4], f32[4]) tuple(x, y), sharding={{devices=[2]0,1}, {devices=[2]0,1}}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/pass.hlo" -o "$WORK/pass.plan"
sed 's/^\/\/ TesselOutputSharding 0 {devices=\[2\]0,1}$/\/\/ TesselOutputSharding 0 {devices=[2]1,0}/' "$WORK/pass.plan" >"$WORK/e.plan"
grep -q 'TesselOutputSharding 0 {devices=\[2\]1,0}' "$WORK/e.plan" || fail "the edit did not apply"
plan_resign "$WORK/e.plan"
expect_status 2 "$TESSEL" run "$WORK/e.plan" --random-inputs 1
expect_in "$ERR" "output 0 is input 0 as it came in, but TesselOutputSharding 0 is not its TesselInputSharding 0"
expect_status 0 "$TESSEL" run "$WORK/pass.plan" --random-inputs 1
echo "hostile_plan_lines: InputMapping, TesselCollective bytes and a contradicting TesselOutputSharding refused"

# Extreme integers in a plan's lines (re-signed): an XlaInputShape of
# INT64_MAX elements overflowed computing its shard size (UBSan, partition/
# shd_ops.c), and outputs=-1 was reported as "inputs=1 but the module's
# entry has 1 parameters".
cat >"$WORK/ext.hlo" <<'HLO'
HloModule ext, num_partitions=2
ENTRY main {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  ROOT y = f32[4] add(x, x), sharding={devices=[2]0,1}
}
HLO
expect_status 0 "$TESSEL" compile "$WORK/ext.hlo" -o "$WORK/ext.plan"
sed 's/^\/\/ XlaInputShape f32\[4\]$/\/\/ XlaInputShape f32[9223372036854775807]/' "$WORK/ext.plan" >"$WORK/e1.plan"
grep -q 'XlaInputShape f32\[9223372036854775807\]' "$WORK/e1.plan" || fail "the edit did not apply"
plan_resign "$WORK/e1.plan"
expect_status 2 "$TESSEL" run "$WORK/e1.plan" --random-inputs 1
expect_in "$ERR" "e1.plan:9:1: error: input 0: its shard under the sharding is f32[4611686018427387904] but the module's is f32[2]"
sed 's/ outputs=1$/ outputs=-1/' "$WORK/ext.plan" >"$WORK/e2.plan"
grep -q ' outputs=-1$' "$WORK/e2.plan" || fail "the edit did not apply"
plan_resign "$WORK/e2.plan"
expect_status 2 "$TESSEL" run "$WORK/e2.plan" --random-inputs 1
expect_in "$ERR" "e2.plan:11:4: error: outputs=-1 is out of range [0, 1048576]"
echo "hostile_plan_lines: an XlaInputShape of INT64_MAX elements and outputs=-1 refused, named"
