#!/usr/bin/env bash
# hostile_state.sh: files tessel did not write and state that was corrupted
# (issue 30, "Outputs and checkpoints verified").
#  1. Output-dir cleanup believes only a manifest tessel wrote: an
#     outputs.json of another "format", or one edited after tessel wrote it
#     (its manifest_sha256 no longer its digest), removes nothing it lists.
#     Even a well-formed manifest never removes the model the run ran, a
#     file the run read (--input), nor a listed file whose bytes are no
#     longer those the manifest gives. On main each of these was deleted.
#  2. A resume verifies the checkpoint: a bit flipped in a checkpointed
#     output, "step" edited in checkpoint.json, an outputs.json edited: the
#     checkpoint is named in a warning and passed over, the run resumes
#     from the last one that verifies and its result is bit for bit the
#     uninterrupted run's. With none left: status 2. On main the flipped
#     and edited ones resumed with exit 0 and other weights.
#     A checkpoint at the run's last step (killed while the outputs were
#     written) resumes by running the steps after the one before again.
#  3. checkpoint.json carries its own SHA-256 (checkpoint_sha256): an
#     edited "digest" is named and passed over (it was taken for another
#     program's checkpoint and skipped silently); a "step" edited and
#     re-signed is still caught by the directory's name.
#  4. A resume gives the inputs the checkpoint was taken with: another
#     --random-inputs seed, none, or another file for a parameter that is
#     not the state is refused naming it, exit 2, nothing written (on main
#     each resumed with exit 0 from other data).
#  5. A checkpoint directory is one run's: a new run into one that holds a
#     step it would write is refused before its first step (status 2; it
#     failed after a chunk, "Directory not empty", status 1), a resume
#     meeting a step it passed over likewise; a directory another process
#     holds (.tessel.lock) is refused at once; the output directory may be
#     the checkpoint directory. A killed run's temporary .step-S.XXXXXX is
#     cleared by the next run that writes checkpoints there.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# resign_ckpt FILE: give checkpoint.json the checkpoint_sha256 tessel would
# (what a forger who read tools/checkpoint.c could do).
resign_ckpt() {
    "$PY" - "$1" <<'PY'
import hashlib, sys
t = open(sys.argv[1]).read()
k = ', "checkpoint_sha256": "'
body = t[:t.rindex(k)]
open(sys.argv[1], "w").write(body + k + hashlib.sha256(body.encode()).hexdigest() + '"}\n')
PY
}
sha() { "$PY" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }
# resign DIR: give DIR/outputs.json the digest tessel would (what a forger
# who read the docs can do: cleanup must still hold).
resign() {
    "$PY" - "$1/outputs.json" <<'PY'
import hashlib, json, sys
m = json.load(open(sys.argv[1]))
m.pop("manifest_sha256", None)
m["manifest_sha256"] = hashlib.sha256(json.dumps(m, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
json.dump(m, open(sys.argv[1], "w"))
PY
}
M="$WORK/mlp.hlo"
sed 's/@N/2/g; s/@D/0,1/g' "$TESSEL_SRC/tests/models/mlp_megatron.hlo" >"$M"

# ---- 1. cleanup trusts only tessel's manifests ----
D="$WORK/out"
mkdir "$D"
cp "$M" "$D/model.npy"
echo keep >"$D/notes.npy"
printf '{"format": "mine", "version": 2, "files": [{"name": "notes.npy", "sha256": "%s"}, {"name": "model.npy", "sha256": "%s"}]}\n' \
    "$(sha "$D/notes.npy")" "$(sha "$D/model.npy")" >"$D/outputs.json"
expect_status 0 "$TESSEL" run --random-inputs 1 --output-dir "$D" "$D/model.npy"
[ -f "$D/model.npy" ] && [ -f "$D/notes.npy" ] || fail "a manifest of another format removed the files it lists"
# the run's own manifest: tessel's format, version 2, its own digest
"$PY" - "$D/outputs.json" <<'PY' || fail "outputs.json has not its own digest"
import hashlib, json, sys
m = json.load(open(sys.argv[1]))
assert m["format"] == "tessel-outputs" and m["version"] == 2, m
self = m.pop("manifest_sha256")
assert self == hashlib.sha256(json.dumps(m, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
PY
# tessel's manifest, edited to list more (digest now wrong): nothing listed goes
"$PY" - "$D/outputs.json" "$(sha "$D/notes.npy")" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["files"].append({"name": "notes.npy", "kind": "save", "dtype": "<f4", "shape": [1], "sha256": sys.argv[2]})
json.dump(m, open(sys.argv[1], "w"))
PY
expect_status 0 "$TESSEL" run --random-inputs 2 --output-dir "$D" "$M"
[ -f "$D/notes.npy" ] || fail "an edited manifest (its digest wrong) removed a file it lists"
# re-signed by hand: still, the model the run ran is never removed
"$PY" - "$D/outputs.json" "$(sha "$D/model.npy")" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["files"].append({"name": "model.npy", "kind": "save", "dtype": "<f4", "shape": [1], "sha256": sys.argv[2]})
json.dump(m, open(sys.argv[1], "w"))
PY
resign "$D"
expect_status 0 "$TESSEL" run --random-inputs 2 --output-dir "$D" "$D/model.npy"
[ -f "$D/model.npy" ] || fail "cleanup removed the model the run ran"

# A tessel_save result read back as the next run's input is not removed,
# though the earlier manifest lists it and this run does not save it.
cat >"$WORK/save.hlo" <<'HLO'
HloModule save
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] multiply(x, x)
  s = f32[4] custom-call(y), custom_call_target="tessel_save", backend_config="w"
  ROOT z = f32[4] add(s, x)
}
HLO
cat >"$WORK/double.hlo" <<'HLO'
HloModule double
ENTRY main {
  x = f32[4] parameter(0)
  ROOT z = f32[4] add(x, x)
}
HLO
npy_write "$WORK/x.npy" '<f4' 4 1 2 3 4
S="$WORK/saved"
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$S" "$WORK/save.hlo"
[ "$(npy_dump "$S/w.npy")" = "<f4 4 1 4 9 16" ] || fail "save wrote $(npy_dump "$S/w.npy")"
expect_status 0 "$TESSEL" run --reference --input 0="$S/w.npy" --output-dir "$S" "$WORK/double.hlo"
[ -f "$S/w.npy" ] || fail "the run removed the input it read from its output directory"
[ "$(npy_dump "$S/output_0.npy")" = "<f4 4 2 8 18 32" ] || fail "double gave $(npy_dump "$S/output_0.npy")"
# Without the run reading it, the same listed, unchanged file goes (the
# earlier run's set is not left to mix) ...
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$S" "$WORK/save.hlo"
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$S" "$WORK/double.hlo"
[ ! -e "$S/w.npy" ] || fail "the earlier run's saved w.npy stayed"
# ... but one changed since (not the bytes the manifest gives) stays.
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$S" "$WORK/save.hlo"
cp "$WORK/x.npy" "$S/w.npy"
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$S" "$WORK/double.hlo"
[ -f "$S/w.npy" ] || fail "cleanup removed a file changed since tessel wrote it"
# Under an output name, the same: an earlier output the user edited, and
# the user's own output_7.npy no manifest lists, stay (both were removed
# as "tessel's own names"); an unchanged listed one and a temporary go.
E="$WORK/edited"
cat >"$WORK/two.hlo" <<'HLO'
HloModule two
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] add(x, x)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(x, y, y)
}
HLO
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$E" "$WORK/two.hlo"
cp "$WORK/x.npy" "$E/output_1.npy"
echo "my notes" >"$E/output_7.npy"
: >"$E/.tessel-tmp-0123456789abcdef"
expect_status 0 "$TESSEL" run --reference --input 0="$WORK/x.npy" --output-dir "$E" "$WORK/double.hlo"
[ -f "$E/output_1.npy" ] && [ -f "$E/output_7.npy" ] || fail "cleanup removed a user's file under an output name: $(ls -A "$E")"
[ ! -e "$E/output_2.npy" ] && [ ! -e "$E/.tessel-tmp-0123456789abcdef" ] || fail "cleanup left the earlier set: $(ls -A "$E")"
echo "hostile_state: cleanup removes only what tessel's own manifest lists, unchanged, and nothing the run read"

# ---- 2. checkpoints are verified before a resume ----
SGD="$TESSEL_SRC/tests/e2e/sgd_step.hlo"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --output-dir "$WORK/full"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 9 --checkpoint-every 3 --checkpoint-dir "$WORK/ck" \
    --output-dir "$WORK/part"
expect_in "$WORK/ck/step-9/checkpoint.json" '"version": 3, "step": 9'
expect_in "$WORK/ck/step-9/checkpoint.json" "\"outputs_sha256\": \"$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifest_sha256"])' "$WORK/ck/step-9/outputs.json")\""
# a bit flipped in step 9's weights; "step" edited in step 6's checkpoint.json
"$PY" - "$WORK/ck/step-9/output_0.npy" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-3] ^= 1; open(sys.argv[1], "wb").write(b)
PY
sed -i 's/"step": 6,/"step": 7,/' "$WORK/ck/step-6/checkpoint.json"
resign_ckpt "$WORK/ck/step-6/checkpoint.json"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --resume "$WORK/ck" --output-dir "$WORK/res"
expect_in "$ERR" "tessel: warning: --resume: $WORK/ck/step-9 is not used: $WORK/ck/step-9/output_0.npy: its SHA-256 is"
expect_in "$ERR" "that outputs.json gives: the file was changed or corrupted"
expect_in "$ERR" "tessel: warning: --resume: $WORK/ck/step-6 is not used: checkpoint.json says step 7, its directory step 6: edited or corrupted"
expect_in "$ERR" "tessel: warning: --resume: resuming from $WORK/ck/step-3, the last checkpoint that verifies"
cmp "$WORK/full/output_0.npy" "$WORK/res/output_0.npy" || fail "resumed weights differ from the uninterrupted run's"
cmp "$WORK/full/output_1.npy" "$WORK/res/output_1.npy" || fail "resumed loss differs from the uninterrupted run's"
# step 3's outputs.json edited (a dtype), then none verifies: status 2
sed -i "0,/\"<f4\"/s//\"<f8\"/" "$WORK/ck/step-3/outputs.json"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --resume "$WORK/ck" --output-dir "$WORK/res2"
expect_in "$ERR" "step-3/outputs.json: not a manifest tessel wrote: its \"manifest_sha256\" is not the SHA-256 of its content"
expect_in "$ERR" "tessel: error: --resume $WORK/ck: no checkpoint there verifies (warnings above)"
[ ! -e "$WORK/res2" ] || fail "a refused resume wrote outputs"
echo "hostile_state: corrupted checkpoints named and passed over; the resume is bit for bit the uninterrupted run"
# The run's last step checkpointed (a run killed while it wrote its
# outputs): the resume runs the steps after the checkpoint before it again
# and keeps step-12 (on main it ran one step more, step 13's weights, exit
# 0, and with --checkpoint-every failed renaming onto step-12).
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --checkpoint-every 3 --checkpoint-dir "$WORK/ckf"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --resume "$WORK/ckf" --output-dir "$WORK/resf"
expect_in "$ERR" "step-12 is the run's last checkpoint, kept: its outputs come from steps 10 to 12 run again from $WORK/ckf/step-9"
cmp "$WORK/full/output_0.npy" "$WORK/resf/output_0.npy" || fail "a resume at the last step: weights differ from the uninterrupted run's"
cmp "$WORK/full/output_1.npy" "$WORK/resf/output_1.npy" || fail "a resume at the last step: loss differs from the uninterrupted run's"
rm -rf "$WORK/ckf/step-"[369]
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --checkpoint-every 3 --resume "$WORK/ckf" --output-dir "$WORK/resf2"
expect_in "$ERR" "its outputs come from the 12 steps run again from the start"
cmp "$WORK/full/output_0.npy" "$WORK/resf2/output_0.npy" || fail "a resume at the last step alone: weights differ"
[ "$(ls "$WORK/ckf")" = "$(printf 'step-12\nstep-3\nstep-6\nstep-9')" ] || fail "checkpoints after the resume: $(ls "$WORK/ckf")"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 4 --steps 12 --resume "$WORK/ckf" --output-dir "$WORK/resf3"
expect_in "$ERR" "it was taken with --random-inputs 3, this run gives --random-inputs 4"
echo "hostile_state: a resume whose last checkpoint is the run's last step gives the uninterrupted run's outputs"

# ---- 3. an edited "digest" is named, not taken for another program's ----
# corrupt_digest FILE: change the digest's first hex digit, whatever it is
# (writing "0" over it changed nothing where the digest began with 0: the
# test then failed for one program in 16).
corrupt_digest() {
    sed -i -e 's/"digest": "0/"digest": "#/' -e 's/"digest": "[1-9a-f]/"digest": "0/' \
        -e 's/"digest": "#/"digest": "1/' "$1"
}
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 9 --checkpoint-every 3 --checkpoint-dir "$WORK/ck3" \
    --output-dir "$WORK/part3"
corrupt_digest "$WORK/ck3/step-9/checkpoint.json"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --resume "$WORK/ck3" --output-dir "$WORK/res3"
expect_in "$ERR" "tessel: warning: --resume: $WORK/ck3/step-9 is not used: checkpoint.json's \"checkpoint_sha256\" is not the SHA-256 of its content"
expect_in "$ERR" "tessel: warning: --resume: resuming from $WORK/ck3/step-6, the last checkpoint that verifies"
cmp "$WORK/full/output_0.npy" "$WORK/res3/output_0.npy" || fail "resumed weights differ from the uninterrupted run's"
# every checkpoint's digest edited: each named, status 2 (not "another program's")
for s in 3 6; do corrupt_digest "$WORK/ck3/step-$s/checkpoint.json"; done
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 12 --resume "$WORK/ck3" --output-dir "$WORK/res3b"
expect_in "$ERR" "tessel: warning: --resume: $WORK/ck3/step-3 is not used: checkpoint.json's \"checkpoint_sha256\""
expect_in "$ERR" "tessel: error: --resume $WORK/ck3: no checkpoint there verifies (warnings above)"
[ ! -e "$WORK/res3b" ] || fail "a refused resume wrote outputs"
echo "hostile_state: an edited checkpoint digest is named and passed over"

# ---- 4. a resume with other inputs than the checkpoint's is refused ----
"$PY" -c "
import numpy as np
np.save('$WORK/x1.npy', np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
np.save('$WORK/x2.npy', np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)[::-1].copy())"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 6 --checkpoint-every 3 --checkpoint-dir "$WORK/ck4" \
    --output-dir "$WORK/part4"
expect_in "$WORK/ck4/step-6/checkpoint.json" '"random_inputs": "3", "inputs": []'
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 4 --steps 9 --resume "$WORK/ck4" --output-dir "$WORK/res4"
expect_in "$ERR" "tessel: error: --resume $WORK/ck4/step-6: it was taken with --random-inputs 3, this run gives --random-inputs 4; resume with the inputs the checkpoint was taken with"
expect_status 2 "$TESSEL" run "$SGD" --input x="$WORK/x1.npy" --input w="$WORK/x1.npy" --steps 9 --resume "$WORK/ck4" \
    --output-dir "$WORK/res4"
expect_in "$ERR" "it was taken with --random-inputs 3, this run gives no --random-inputs"
[ ! -e "$WORK/res4" ] || fail "a refused resume wrote outputs"
# x (not the state) from a file: another file, or none, is refused; the
# same file resumes, and the state's own binding (w) may differ (the
# checkpoint replaces it)
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input x="$WORK/x1.npy" --steps 9 --output-dir "$WORK/full4"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input x="$WORK/x1.npy" --steps 6 --checkpoint-every 3 \
    --checkpoint-dir "$WORK/ck5" --output-dir "$WORK/part5"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --input x="$WORK/x2.npy" --steps 9 --resume "$WORK/ck5" \
    --output-dir "$WORK/res5"
expect_in "$ERR" "tessel: error: --resume $WORK/ck5/step-6: parameter 0's input has other content (SHA-256 "
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 9 --resume "$WORK/ck5" --output-dir "$WORK/res5"
expect_in "$ERR" "tessel: error: --resume $WORK/ck5/step-6: parameter 0's input was given then and is not now"
[ ! -e "$WORK/res5" ] || fail "a refused resume wrote outputs"
# x given by its index now, by its name then: the same input
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --input 0="$WORK/x1.npy" --input w="$WORK/x2.npy" --steps 9 \
    --resume "$WORK/ck5" --output-dir "$WORK/res5"
cmp "$WORK/full4/output_0.npy" "$WORK/res5/output_0.npy" || fail "resumed weights differ from the uninterrupted run's"
echo "hostile_state: a resume with another seed or other inputs than its checkpoint's is refused, naming the difference"

# ---- 5. a checkpoint directory is one run's ----
C6="$WORK/ck4"   # step-3 and step-6 of part 4's run
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 6 --checkpoint-every 3 --checkpoint-dir "$C6" \
    --output-dir "$WORK/res6"
expect_in "$ERR" "tessel: error: --checkpoint-dir $C6 already holds step-3, a checkpoint this run would write: go on from its checkpoints with --resume $C6"
[ ! -e "$WORK/res6" ] || fail "a refused run wrote outputs"
# steps past the ones there (every 4: step-4 and step-8) run
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 8 --checkpoint-every 4 --checkpoint-dir "$C6"
[ -d "$C6/step-8" ] || fail "no step-8 checkpoint: $(ls -A "$C6")"
# a resume from step 4 (step-6 made unusable) would write step-6 again
sed -i 's/"step": 6,/"step": 5,/' "$C6/step-6/checkpoint.json"
rm -rf "$C6/step-8"
expect_status 2 "$TESSEL" run "$SGD" --random-inputs 3 --steps 9 --checkpoint-every 3 --resume "$C6"
expect_in "$ERR" "tessel: warning: --resume: $C6/step-6 is not used"
expect_in "$ERR" "tessel: error: $C6 already holds step-6, a checkpoint this run (from step 4) would write again: move it away"
# held by another process: refused at once, status 1
expect_status 1 flock "$C6/.tessel.lock" "$TESSEL" run "$SGD" --random-inputs 3 --steps 10 --checkpoint-every 10 \
    --checkpoint-dir "$C6"
# flock(1) is no tessel run: no pid is named (an earlier run's was, stale)
expect_in "$ERR" "tessel: $C6: error: another process is writing into this directory (.tessel.lock is locked)"
[ ! -s "$C6/.tessel.lock" ] || fail "a run that ended left its pid in the lock: $(cat "$C6/.tessel.lock")"
# the pid of a killed run (no live process has it) is not named either
sh -c 'exit 0' &
dead=$!
wait "$dead"
echo "$dead" >"$C6/.tessel.lock"
expect_status 1 flock "$C6/.tessel.lock" "$TESSEL" run "$SGD" --random-inputs 3 --steps 10 --checkpoint-every 10 \
    --checkpoint-dir "$C6"
expect_in "$ERR" "tessel: $C6: error: another process is writing into this directory"
[ ! -e "$C6/step-10" ] || fail "a run into a held checkpoint directory wrote a checkpoint"
# the output directory may be the checkpoint directory (one lock, held once)
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 4 --checkpoint-every 2 --checkpoint-dir "$WORK/both" \
    --output-dir "$WORK/both"
[ -d "$WORK/both/step-4" ] && [ -f "$WORK/both/outputs.json" ] || fail "outputs and checkpoints in one directory: $(ls -A "$WORK/both")"
echo "hostile_state: a checkpoint directory is one run's: steps it would write again and a held directory are refused before the first step"
# A checkpoint's temporary that a killed run left (.step-S.XXXXXX) goes
# when the next writer holds the directory (each killed run left one
# before); one holding a file tessel does not write there stays.
C7="$WORK/ck7"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 2 --checkpoint-every 2 --checkpoint-dir "$C7"
mkdir "$C7/.step-4.Ab3dEf" "$C7/.step-4.zzzzzz" "$C7/.step-4.half"
cp "$C7/step-2/"* "$C7/.step-4.Ab3dEf/" && : >"$C7/.step-4.Ab3dEf/.tessel-tmp-0123456789abcdef"
echo mine >"$C7/.step-4.zzzzzz/notes.txt"
expect_status 0 "$TESSEL" run "$SGD" --random-inputs 3 --steps 4 --checkpoint-every 2 --resume "$C7"
[ "$(cd "$C7" && ls -d .step-*)" = "$(printf '.step-4.half\n.step-4.zzzzzz')" ] ||
    fail "temporaries after the next writer: $(ls -A "$C7")"
expect_in "$C7/.step-4.zzzzzz/notes.txt" mine
echo "hostile_state: a killed run's checkpoint temporary is cleared by the next writer, a user's file kept"
