#!/usr/bin/env bash
# hostile_confine.sh: what a run may touch (issue 16, findings 1, 5 and 7).
#  1. tessel_save names an output, NAME.npy inside --output-dir, never a
#     path: '/', '..', control characters, a leading '.', the run's own
#     names are refused at the instruction (FILE:LINE:COL, status 2) before
#     anything runs, with --reference and under mpirun too; a saved file is
#     part of the run's all-or-nothing set (a run failing after the save
#     leaves none). On main the model wrote wherever it said.
#  5. A symbolic link planted at the old predictable temporary names
#     (output_0.npy.tmp.PID) or anywhere in DIR is never followed.
#  7. Runs cannot mix: outputs.json lists the run's files with their
#     shapes and SHA-256; a run with fewer outputs removes what an earlier
#     run left; a second run into a directory another run holds fails at
#     once, naming it, and the first run's set is complete.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# save_model FILE NAME: x*x saved under NAME (backend_config as written), x*x+x returned.
save_model() {
    cat >"$1" <<HLO
HloModule save, num_partitions=2

ENTRY main {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  y = f32[4] multiply(x, x)
  s = f32[4] custom-call(y), custom_call_target="tessel_save", backend_config=$2
  ROOT z = f32[4] add(s, x)
}
HLO
}
npy_write "$WORK/x.npy" '<f4' 4 1 2 3 4
mkdir "$WORK/victim" && echo precious >"$WORK/victim/target"

# ---- 1. names, not paths ----
i=0
for name in '"../victim/target"' "\"$WORK/victim/target\"" '"a/b"' '".."' '"..x"' '".hidden"' \
    '"output_0"' '"outfeed_1"' '"outputs"' '"tab\there"' '""'; do
    i=$((i + 1))
    save_model "$WORK/bad$i.hlo" "$name"
    # Every name partitioned; the first three also --reference and compiled.
    modes=("--num-partitions 2")
    [ $i -gt 3 ] || modes+=("--reference")
    for mode in "${modes[@]}"; do
        # shellcheck disable=SC2086
        expect_status 2 "$TESSEL" run $mode --input 0="$WORK/x.npy" --output-dir "$WORK/o$i" "$WORK/bad$i.hlo"
        expect_in "$ERR" "bad$i.hlo:6:3: error: s: tessel_save"
        [ ! -e "$WORK/o$i" ] || fail "a refused save left $WORK/o$i"
    done
    [ $i -gt 3 ] || expect_status 2 "$TESSEL" compile -o "$WORK/bad$i.plan" "$WORK/bad$i.hlo"
done
[ "$(cat "$WORK/victim/target")" = precious ] || fail "a save reached outside the output directory"
[ -z "$(ls "$WORK" | grep -v -e '^bad' -e '^x.npy$' -e '^victim$' -e '^stdout$' -e '^stderr$')" ] ||
    fail "a refused run wrote into $WORK: $(ls "$WORK")"
# A plan cannot smuggle a path either (re-signed after the edit).
save_model "$WORK/good.hlo" '"saved"'
expect_status 0 "$TESSEL" compile -o "$WORK/good.plan" "$WORK/good.hlo"
sed 's|backend_config="saved"|backend_config="../victim/target"|' "$WORK/good.plan" >"$WORK/evil.plan"
plan_resign "$WORK/evil.plan"
expect_status 2 "$TESSEL" run --input 0="$WORK/x.npy" --output-dir "$WORK/oe" "$WORK/evil.plan"
expect_in "$ERR" "tessel_save names an output"
# A good name: DIR/saved.npy, with the outputs, listed in the manifest.
for mode in "--num-partitions 2" "--reference"; do
    rm -rf "$WORK/g"
    # shellcheck disable=SC2086
    expect_status 0 "$TESSEL" run $mode --input 0="$WORK/x.npy" --output-dir "$WORK/g" "$WORK/good.hlo"
    [ "$(npy_dump "$WORK/g/saved.npy")" = "<f4 4 1 4 9 16" ] || fail "$mode: saved.npy is $(npy_dump "$WORK/g/saved.npy")"
    [ "$(npy_dump "$WORK/g/output_0.npy")" = "<f4 4 2 6 12 20" ] || fail "$mode: output_0.npy"
done
# Under mpirun: rank 0 writes it, inside the directory; a path is refused on every rank.
if command -v mpirun >/dev/null; then
    MPIRUN=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0" timeout 120 mpirun --allow-run-as-root
        --oversubscribe --mca btl tcp,self -np 2)
    expect_status 0 "${MPIRUN[@]}" "$TESSEL" run --input 0="$WORK/x.npy" --output-dir "$WORK/gm" "$WORK/good.hlo"
    [ "$(npy_dump "$WORK/gm/saved.npy")" = "<f4 4 1 4 9 16" ] || fail "mpirun: saved.npy"
    got=0
    "${MPIRUN[@]}" "$TESSEL" run --input 0="$WORK/x.npy" --output-dir "$WORK/om" "$WORK/bad1.hlo" >"$OUT" 2>"$ERR" </dev/null || got=$?
    [ "$got" = 2 ] || fail "mpirun with a save to a path exited $got"
    expect_in "$ERR" "tessel_save names an output"
    [ ! -e "$WORK/om" ] && [ "$(cat "$WORK/victim/target")" = precious ] || fail "mpirun: the save escaped"
fi
# All or nothing: a run that fails after its save (an infeed with no file) leaves nothing.
cat >"$WORK/late.hlo" <<'HLO'
HloModule late
ENTRY main {
  x = f32[4] parameter(0)
  s = f32[4] custom-call(x), custom_call_target="tessel_save", backend_config="early"
  t = token[] after-all()
  f = (f32[4], token[]) infeed(t)
  v = f32[4] get-tuple-element(f), index=0
  ROOT r = f32[4] add(s, v)
}
HLO
expect_status 2 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$WORK/late" "$WORK/late.hlo"
expect_in "$ERR" "infeed needs a value"
[ ! -e "$WORK/late" ] || fail "a failed run left $(ls -A "$WORK/late")"
mkdir "$WORK/late2"
expect_status 2 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$WORK/late2" "$WORK/late.hlo"
[ -z "$(ls "$WORK/late2")" ] || fail "a failed run left $(ls "$WORK/late2")"
echo "hostile_confine: tessel_save confined to the output set"

# ---- 5. planted links are not followed ----
M="$TESSEL_SRC/examples/mlp.hlo"
mkdir "$WORK/p"
for pid in $(seq $$ $(($$ + 400))); do ln -s "$WORK/victim/target" "$WORK/p/output_0.npy.tmp.$pid"; done
ln -s "$WORK/victim/target" "$WORK/p/.tessel-tmp-0000000000000000"
expect_status 0 "$TESSEL" run --random-inputs 1 --output-dir "$WORK/p" "$M"
[ "$(cat "$WORK/victim/target")" = precious ] || fail "a planted link was followed"
[ -f "$WORK/p/output_0.npy" ] && [ ! -L "$WORK/p/output_0.npy" ] || fail "output_0.npy is not a file of its own"
[ -z "$(find "$WORK/p" -name '*.tmp.*' -o -name '.tessel-tmp-*')" ] || fail "old temporaries (links) left"
# A plan written over a planted link at its temporary name: the same.
ln -s "$WORK/victim/target" "$WORK/mlp.plan.tmp.$$"
expect_status 0 "$TESSEL" compile -o "$WORK/mlp.plan" "$M"
[ "$(cat "$WORK/victim/target")" = precious ] || fail "compile followed a planted link"
echo "hostile_confine: planted links not followed"

# ---- 7. runs do not mix ----
D="$WORK/mix"
expect_status 0 "$TESSEL" run --reference --random-inputs 1 --output-dir "$D" "$TESSEL_SRC/examples/while_loop.hlo"
[ -f "$D/output_1.npy" ] || fail "while_loop has two outputs"
echo mine >"$D/notes.txt"
expect_status 0 "$TESSEL" run --random-inputs 1 --output-dir "$D" "$M"
[ ! -e "$D/output_1.npy" ] || fail "the earlier run's output_1.npy stayed beside this run's"
[ "$(cat "$D/notes.txt")" = mine ] || fail "a file that is not tessel's was touched"
"$PY" - "$D" "$M" <<'PY' || fail "outputs.json does not describe the run"
import hashlib, json, os, sys
import numpy as np
d, model = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(d, "outputs.json")))
assert m["format"] == "tessel-outputs" and m["version"] == 2 and len(m["run_id"]) == 32, m
assert m["model_sha256"] == hashlib.sha256(open(model, "rb").read()).hexdigest(), "model digest"
names = sorted(f["name"] for f in m["files"])
assert names == ["output_0.npy"], names
for f in m["files"]:
    b = open(os.path.join(d, f["name"]), "rb").read()
    assert f["sha256"] == hashlib.sha256(b).hexdigest(), f
    a = np.load(os.path.join(d, f["name"]))
    assert list(a.shape) == f["shape"] and a.dtype.str == f["dtype"], (a.shape, a.dtype.str, f)
PY
# Two runs into one directory: the second fails at once, naming the first.
cp "$TESSEL_SRC/tests/e2e/hostile_spin.hlo" "$WORK/spin.hlo" # 2 s in release, more under ASan
"$TESSEL" run --reference --random-inputs 1 --output-dir "$D" "$WORK/spin.hlo" >"$WORK/a.out" 2>"$WORK/a.err" &
a=$!
for _ in $(seq 1 200); do
    [ "$(cat "$D/.tessel.lock" 2>/dev/null)" = "$a" ] && break
    sleep 0.05
done
[ "$(cat "$D/.tessel.lock")" = "$a" ] || fail "the first run never held the directory"
expect_status 1 "$TESSEL" run --random-inputs 2 --output-dir "$D" "$M"
expect_in "$ERR" "another tessel run (pid $a) is writing into this directory"
kill -0 "$a" 2>/dev/null || fail "the first run ended before the second started: make spin.hlo longer"
wait "$a" || fail "the first run failed: $(cat "$WORK/a.err")"
"$PY" - "$D" <<'PY' || fail "the directory holds a mix"
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "outputs.json")))
npy = sorted(f for f in os.listdir(d) if f.endswith(".npy"))
assert npy == sorted(f["name"] for f in m["files"]) == ["output_0.npy"], (npy, m["files"])
assert m["files"][0]["shape"] == [4], m["files"]
PY
echo "hostile_confine: runs do not mix"
