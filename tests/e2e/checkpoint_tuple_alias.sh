#!/usr/bin/env bash
# checkpoint_tuple_alias.sh: checkpoints and --resume of steps whose
# aliases name leaves of a tuple parameter (issue 32), p = (w, m, c) with
# input_output_alias={ {0}: (0, {0}), {1}: (0, {1}) } (steps_tuple_alias.sh's
# step: w, m the state, c a leaf no output takes, given again each step).
#  1. A checkpoint holds the state's leaves (checkpoint.json's "aliases"
#     name them: "leaf" 0 and 1 of parameter 0); c is an input: the chunks
#     after a checkpoint and a resume bind it from the run's inputs, whose
#     digests the checkpoint records. On 1 and 2 devices and under mpirun
#     -np 2: 5 steps checkpointed every 2, a run stopped at 3 (checkpoint
#     at 2) and resumed for the rest, equal 5 straight steps bit for bit,
#     and equal --reference --steps 5 (the oracle's tolerance).
#  2. c from --random-inputs (w, m bound by name, p.0 and p.1): resumed
#     equals straight; a resume giving c another file is refused naming it.
#  3. A run killed (SIGKILL) after a checkpoint resumes from it: the last
#     checkpoint's step + 3 steps equal as many straight steps.
#  4. The inner tuple of p = ((w, m), c) aliased whole ({0}: (0, {0})):
#     both its leaves are the state; stopped and resumed equals straight.
#  5. Bad resume directories, status 2 naming the file: a state leaf's file
#     missing; one of another shape (its manifests re-signed, as a forger
#     who read the docs could).
#  6. p marked tessel_state="zeros": c, the leaf no alias names, is zeros
#     with --init-state zeros and random without (--random-inputs 7), so
#     the option is recorded ("init_state") and a resume that differs in it
#     is refused naming it (it went on with a random c: another result, no
#     error); a checkpoint without the member (an older tessel's, re-signed
#     here) counts as taken without it.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/tuple_alias.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np 2)

# bit_equal A B WHAT: every output of A is in B, byte for byte
bit_equal() {
    local f n=0
    for f in "$1"/output_*.npy; do
        cmp -s "$f" "$2/$(basename "$f")" || fail "$3: $(basename "$f") differs"
        n=$((n + 1))
    done
    [ "$n" = 3 ] || fail "$3: $n outputs in $1"
}

"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
r = np.random.default_rng(32)
for name in ("w", "m", "c", "x", "c2"):
    np.save("%s/%s.npy" % (sys.argv[1], name), r.uniform(-0.5, 0.5, (64, 32)).astype(np.float32))
PY
IN=(--input 0.0="$WORK/w.npy" --input 0.1="$WORK/m.npy" --input 0.2="$WORK/c.npy" --input 1="$WORK/x.npy")

# ---- 1. stopped and resumed == straight == reference, 1 and 2 devices and mpirun ----
step_model 1 "$WORK/s1.hlo"
expect_status 0 "$TESSEL" run "$WORK/s1.hlo" --reference --steps 5 "${IN[@]}" --output-dir "$WORK/ref"
for n in 1 2; do
    step_model "$n" "$WORK/s$n.hlo"
    expect_status 0 "$TESSEL" run "$WORK/s$n.hlo" --steps 5 "${IN[@]}" --output-dir "$WORK/straight$n"
    same_outputs "$WORK/ref" "$WORK/straight$n" "--steps 5 on $n device(s) against --reference"
    expect_status 0 "$TESSEL" run "$WORK/s$n.hlo" --steps 5 "${IN[@]}" --checkpoint-every 2 \
        --checkpoint-dir "$WORK/ck$n" --output-dir "$WORK/every$n"
    bit_equal "$WORK/straight$n" "$WORK/every$n" "5 steps checkpointed every 2 on $n device(s)"
    expect_in "$WORK/ck$n/step-4/checkpoint.json" \
        '"aliases": [{"output": 0, "parameter": 0, "leaf": 0}, {"output": 1, "parameter": 0, "leaf": 1}]'
    expect_in "$WORK/ck$n/step-4/checkpoint.json" '{"key": "0.2", "sha256": '
    expect_status 0 "$TESSEL" run "$WORK/s$n.hlo" --steps 3 "${IN[@]}" --checkpoint-every 2 \
        --checkpoint-dir "$WORK/stop$n" --output-dir "$WORK/three$n"
    [ -d "$WORK/stop$n/step-2" ] && [ ! -d "$WORK/stop$n/step-3" ] || fail "$n device(s): not one checkpoint, step-2"
    expect_status 0 "$TESSEL" run "$WORK/s$n.hlo" --steps 5 "${IN[@]}" --checkpoint-every 2 --resume "$WORK/stop$n" \
        --output-dir "$WORK/resumed$n"
    expect_in "$ERR" "resumed from $WORK/stop$n/step-2 (step 2 of 5)"
    bit_equal "$WORK/straight$n" "$WORK/resumed$n" "stopped at 3, resumed at 2 for 5 on $n device(s)"
done
expect_status 0 "$TESSEL" compile "$WORK/s2.hlo" --hosts 2 -o "$WORK/s2.plan"
expect_status 0 "${MPIRUN[@]}" "$TESSEL" run "$WORK/s2.plan" --steps 3 "${IN[@]}" --checkpoint-every 2 \
    --checkpoint-dir "$WORK/mck" --output-dir "$WORK/mthree"
expect_status 0 "${MPIRUN[@]}" "$TESSEL" run "$WORK/s2.plan" --steps 5 "${IN[@]}" --checkpoint-every 2 \
    --resume "$WORK/mck" --output-dir "$WORK/mresumed"
bit_equal "$WORK/straight2" "$WORK/mresumed" "mpirun -np 2: stopped at 3, resumed at 2 for 5"
echo "checkpoint_tuple_alias: state leaves p.0, p.1 checkpointed, c bound from the inputs: stopped and resumed == straight (bit for bit) == reference on 1, 2 devices and mpirun -np 2"

# ---- 2. c from --random-inputs; another c refused ----
RIN=(--input p.0="$WORK/w.npy" --input p.1="$WORK/m.npy" --random-inputs 7)
expect_status 0 "$TESSEL" run "$WORK/s2.hlo" --steps 5 "${RIN[@]}" --output-dir "$WORK/rstraight"
expect_status 0 "$TESSEL" run "$WORK/s2.hlo" --steps 3 "${RIN[@]}" --checkpoint-every 2 --checkpoint-dir "$WORK/rck" \
    --output-dir "$WORK/rthree"
expect_status 0 "$TESSEL" run "$WORK/s2.hlo" --steps 5 "${RIN[@]}" --resume "$WORK/rck" --output-dir "$WORK/rresumed"
bit_equal "$WORK/rstraight" "$WORK/rresumed" "c random: stopped at 3, resumed at 2 for 5"
expect_status 2 "$TESSEL" run "$WORK/s2.hlo" --steps 5 "${IN[@]:0:4}" --input 0.2="$WORK/c2.npy" --input 1="$WORK/x.npy" \
    --resume "$WORK/stop2" --output-dir "$WORK/other"
expect_in "$ERR" "--resume $WORK/stop2/step-4: input '0.2' has other content"
[ ! -e "$WORK/other" ] || fail "a refused resume wrote outputs"
echo "checkpoint_tuple_alias: c drawn by --random-inputs resumes the same; another c refused, naming 0.2"

# ---- 3. killed after a checkpoint, resumed ----
"$TESSEL" run "$WORK/s1.hlo" --steps 100000000 "${IN[@]}" --checkpoint-every 300 --checkpoint-dir "$WORK/kk" \
    >/dev/null 2>&1 &
pid=$!
for _ in $(seq 300); do [ -d "$WORK/kk/step-300" ] && break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[ -d "$WORK/kk/step-300" ] || fail "no checkpoint step-300 after 30 s"
last=$(ls "$WORK/kk" | sed -n 's/^step-//p' | sort -n | tail -1)
expect_status 0 "$TESSEL" run "$WORK/s1.hlo" --steps $((last + 3)) "${IN[@]}" --resume "$WORK/kk" --output-dir "$WORK/kres"
expect_in "$ERR" "resumed from $WORK/kk/step-$last"
expect_status 0 "$TESSEL" run "$WORK/s1.hlo" --steps $((last + 3)) "${IN[@]}" --output-dir "$WORK/kstraight"
bit_equal "$WORK/kstraight" "$WORK/kres" "killed after step-$last, resumed for 3 more"
echo "checkpoint_tuple_alias: killed after checkpoint step-$last, resumed: $((last + 3)) steps == straight"

# ---- 4. the inner tuple of p = ((w, m), c) aliased whole ----
nested_model "$WORK/s2.hlo" "$WORK/nested.hlo"
expect_status 0 "$TESSEL" run "$WORK/nested.hlo" --steps 3 "${IN[@]}" --checkpoint-every 2 --checkpoint-dir "$WORK/nck" \
    --output-dir "$WORK/nthree"
expect_in "$WORK/nck/step-2/checkpoint.json" \
    '"aliases": [{"output": 0, "parameter": 0, "leaf": 0}, {"output": 1, "parameter": 0, "leaf": 1}]'
expect_status 0 "$TESSEL" run "$WORK/nested.hlo" --steps 5 "${IN[@]}" --resume "$WORK/nck" --output-dir "$WORK/nresumed"
bit_equal "$WORK/straight2" "$WORK/nresumed" "the inner tuple aliased whole: stopped at 3, resumed at 2 for 5"
echo "checkpoint_tuple_alias: the inner tuple aliased whole: its two leaves checkpointed, resumed == straight"

# ---- 5. bad resume directories: status 2, the file named ----
mkdir "$WORK/gone" && cp -r "$WORK/stop2/step-2" "$WORK/gone/"
rm "$WORK/gone/step-2/output_1.npy"
expect_status 2 "$TESSEL" run "$WORK/s2.hlo" --steps 5 "${IN[@]}" --resume "$WORK/gone" --output-dir "$WORK/bad1"
expect_in "$ERR" "$WORK/gone/step-2 is not used"
expect_in "$ERR" "output_1.npy"
expect_in "$ERR" "--resume $WORK/gone: no checkpoint there verifies"
mkdir "$WORK/shape" && cp -r "$WORK/stop2/step-2" "$WORK/shape/"
"$PY" - "$WORK/shape/step-2" <<'PY'
import hashlib, json, sys
import numpy as np
d = sys.argv[1]
np.save(d + "/output_1.npy", np.zeros((32, 64), np.float32))
m = json.load(open(d + "/outputs.json"))
for f in m["files"]:
    if f["name"] == "output_1.npy":
        f["shape"] = [32, 64]
        f["sha256"] = hashlib.sha256(open(d + "/output_1.npy", "rb").read()).hexdigest()
m.pop("manifest_sha256")
m["manifest_sha256"] = hashlib.sha256(json.dumps(m, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
json.dump(m, open(d + "/outputs.json", "w"))
t = open(d + "/checkpoint.json").read()
i = t.index('"outputs_sha256": "') + len('"outputs_sha256": "')
t = t[:i] + m["manifest_sha256"] + t[i + 64:]
k = ', "checkpoint_sha256": "'
body = t[:t.rindex(k)]
open(d + "/checkpoint.json", "w").write(body + k + hashlib.sha256(body.encode()).hexdigest() + '"}\n')
PY
expect_status 2 "$TESSEL" run "$WORK/s2.hlo" --steps 5 "${IN[@]}" --resume "$WORK/shape" --output-dir "$WORK/bad2"
expect_in "$ERR" "$WORK/shape/step-2/output_1.npy"
[ ! -e "$WORK/bad1" ] && [ ! -e "$WORK/bad2" ] || fail "a refused resume wrote outputs"
echo "checkpoint_tuple_alias: a state leaf's file missing, or of another shape: status 2 naming it"

# ---- 6. --init-state recorded: a resume without it (c random, not zeros) refused ----
sed 's/\(p = .* parameter(0), sharding={.*}\)$/\1, frontend_attributes={tessel_state="zeros"}/' "$WORK/s2.hlo" \
    >"$WORK/zs.hlo"
expect_in "$WORK/zs.hlo" 'frontend_attributes={tessel_state="zeros"}'
ZIN=(--input p.0="$WORK/w.npy" --input p.1="$WORK/m.npy" --random-inputs 7)
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --init-state zeros --output-dir "$WORK/zstraight"
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --output-dir "$WORK/zrandom"
! cmp -s "$WORK/zstraight/output_0.npy" "$WORK/zrandom/output_0.npy" || fail "c zeros and c random gave one w"
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 3 "${ZIN[@]}" --init-state zeros --checkpoint-every 2 \
    --checkpoint-dir "$WORK/zck" --output-dir "$WORK/zthree"
expect_in "$WORK/zck/step-2/checkpoint.json" '"random_inputs": "7", "inputs": [], "init_state": "zeros", "checkpoint_sha256"'
expect_status 2 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --resume "$WORK/zck" --output-dir "$WORK/zbad"
expect_in "$ERR" "--resume $WORK/zck/step-2: it was taken with --init-state zeros, this run gives no --init-state"
[ ! -e "$WORK/zbad" ] || fail "a refused resume wrote outputs"
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --init-state zeros --resume "$WORK/zck" \
    --output-dir "$WORK/zresumed"
bit_equal "$WORK/zstraight" "$WORK/zresumed" "--init-state zeros: stopped at 3, resumed at 2 for 5"
# a checkpoint without "init_state" (re-signed as before it was recorded): taken without it
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 3 "${ZIN[@]}" --checkpoint-every 2 --checkpoint-dir "$WORK/zold" \
    --output-dir "$WORK/zthree2"
"$PY" - "$WORK/zold/step-2/checkpoint.json" <<'PY'
import hashlib, sys
t = open(sys.argv[1]).read()
k = ', "checkpoint_sha256": "'
body = t[:t.rindex(k)]
assert body.endswith(', "init_state": "none"'), body
body = body[:-len(', "init_state": "none"')]
open(sys.argv[1], "w").write(body + k + hashlib.sha256(body.encode()).hexdigest() + '"}\n')
PY
expect_status 2 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --init-state zeros --resume "$WORK/zold" \
    --output-dir "$WORK/zbad"
expect_in "$ERR" "--resume $WORK/zold/step-2: it was taken with no --init-state, this run gives --init-state zeros"
expect_status 0 "$TESSEL" run "$WORK/zs.hlo" --steps 5 "${ZIN[@]}" --resume "$WORK/zold" --output-dir "$WORK/zoldres"
bit_equal "$WORK/zrandom" "$WORK/zoldres" "a checkpoint without init_state, resumed without --init-state"
echo "checkpoint_tuple_alias: --init-state recorded; a resume differing in it refused naming it; an older checkpoint counts as without"
