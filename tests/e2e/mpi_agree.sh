#!/usr/bin/env bash
# mpi_agree.sh: ranks that would run different things stop before running
# (issue 30), each rank's command line or environment differing under
# `mpirun -np 1 A : -np 1 B` over TCP.
#  1. The agreement before work (api/agree.c, runtime/mpi_agree.c): two
#     models whose shardings order the devices differently, two that differ
#     in one op, two a comment apart (one program, but the output
#     manifest's model_sha256 names every rank's model), plans compiled
#     from them, different --random-inputs seeds,
#     different input files under one key, --steps, --output-dir on one rank
#     only (either rank) or another on each (only rank 0 writes: rank 1's
#     would stay empty): exit 2 on every rank, each naming the field and the
#     rank, nothing written (the output directory is not left behind).
#  2. Tuning that differs (fusion, streaming stores, pieces and pipeline)
#     is rank 0's everywhere: the run goes through, its files bit for bit
#     the run in one process's.
#  3. The check-ins (coll/mpi_heartbeat.c), past the agreement (which
#     no option turns off: tests/unit/mpi_unagreed_main.c calls the
#     library's internal api_plan_run_mpi_unagreed): two --spmd modules
#     whose all-reduces reduce with add on one rank and maximum on the
#     other end the job naming both reducers, well before the heartbeat's
#     60 s (it used to hang Open MPI past the heartbeat, or mix data); and
#     the same modules through the command line: exit 2 before running.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=tcp,self
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
unset TESSEL_MPI_PIECE_BYTES TESSEL_MPI_CHUNK_BYTES TESSEL_MPI_PIPELINE_BYTES TESSEL_COLL_STREAM_BOUND \
    TESSEL_FUSION

model() { # FILE ORDER OP
    cat >"$1" <<HLO
HloModule agree, num_partitions=2

ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]$2}
  w = f32[8,4] parameter(1), sharding={replicated}
  d = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[4,4] $3(d), sharding={devices=[2,1]$2}
}
HLO
}
model "$WORK/a.hlo" 0,1 tanh
model "$WORK/order.hlo" 1,0 tanh
model "$WORK/op.hlo" 0,1 exponential
for m in a order op; do
    expect_status 0 "$TESSEL" compile "$WORK/$m.hlo" --hosts 2 -o "$WORK/$m.plan"
done

# mpirun with rank 0's arguments, then rank 1's: two tessel command lines
# (each an array name); the status in $got, the output in $OUT and $ERR.
pair() { # A B
    local -n a=$1 b=$2
    got=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 1 "${a[@]}" : -np 1 "${b[@]}" >"$OUT" 2>"$ERR" || got=$?
}
# Both ranks say it (each prefixes its own rank), exit 2, nothing written.
refused() { # NAME WHAT...
    local name=$1
    shift
    [ "$got" = 2 ] || fail "$name: mpirun exited $got, expected 2"
    for w in "$@"; do expect_in "$ERR" "$w"; done
    expect_in "$ERR" "rank 0: the ranks do not run the same thing"
    expect_in "$ERR" "rank 1: the ranks do not run the same thing"
    expect_in "$ERR" "every rank stops, nothing written"
    [ ! -e "$WORK/out" ] || fail "$name: $WORK/out was left behind"
}

# ---- 1. the agreement ----
R=(--random-inputs 7 --output-dir "$WORK/out")
A=("$TESSEL" run "$WORK/a.hlo" "${R[@]}") B=("$TESSEL" run "$WORK/order.hlo" "${R[@]}")
pair A B
refused "device order (models)" "rank 1's compiled program (plan text) is SHA-256"
B=("$TESSEL" run "$WORK/op.hlo" "${R[@]}")
pair A B
refused "one op (models)" "rank 1's compiled program (plan text) is SHA-256"
# One program from two model files (a comment apart): the manifest's
# model_sha256 would be rank 0's alone, so the model's SHA-256 is agreed on.
{ cat "$WORK/a.hlo"; echo "// a comment"; } >"$WORK/comment.hlo"
B=("$TESSEL" run "$WORK/comment.hlo" "${R[@]}")
pair A B
refused "the model file" "rank 1's model (its file's SHA-256) is SHA-256"
A=("$TESSEL" run "$WORK/a.plan" "${R[@]}") B=("$TESSEL" run "$WORK/order.plan" "${R[@]}")
pair A B
refused "device order (plans)" "rank 1's compiled program (plan text)"
B=("$TESSEL" run "$WORK/op.plan" "${R[@]}")
pair A B
refused "one op (plans)" "rank 1's compiled program (plan text)"
B=("$TESSEL" run "$WORK/a.plan" --random-inputs 8 --output-dir "$WORK/out")
pair A B
refused seed "rank 1's random inputs' seed is \"8\", rank 0's is \"7\""
B=("$TESSEL" run "$WORK/a.plan" "${R[@]}" --steps 2)
pair A B
refused steps "rank 1's steps is \"2\", rank 0's is \"1\""
npy_write "$WORK/x1.npy" '<f4' 4,8 $(seq 1 32)
npy_write "$WORK/x2.npy" '<f4' 4,8 $(seq 2 33)
A=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/x1.npy" "${R[@]}")
B=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/x2.npy" "${R[@]}")
pair A B
refused "input files" "rank 1's input of parameter 0 (by content) is SHA-256"
# One path, one size, other bytes: each rank in its own directory (as two
# hosts' copies of a file), x.npy 4x8 f32 on both.
mkdir -p "$WORK/h0" "$WORK/h1"
cp "$WORK/x1.npy" "$WORK/h0/x.npy"
cp "$WORK/x2.npy" "$WORK/h1/x.npy"
A=(-wdir "$WORK/h0" "$TESSEL" run "$WORK/a.plan" --input 0=x.npy "${R[@]}")
B=(-wdir "$WORK/h1" "$TESSEL" run "$WORK/a.plan" --input 0=x.npy "${R[@]}")
pair A B
refused "input files (one path and size, other bytes)" "rank 1's input of parameter 0 (by content) is SHA-256"
# The second input differs while the first is alike: named as such.
npy_write "$WORK/w1.npy" '<f4' 8,4 $(seq 1 32)
npy_write "$WORK/w2.npy" '<f4' 8,4 $(seq 1 31) 0
A=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/x1.npy" --input 1="$WORK/w1.npy" --output-dir "$WORK/out")
B=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/x1.npy" --input 1="$WORK/w2.npy" --output-dir "$WORK/out")
pair A B
refused "the second input file" "rank 1's input of parameter 1 (by content) is SHA-256"
# Files of another dtype or shape are named with both (issue 30: they
# were two digests, "by content"); a file missing on one rank likewise.
npy_write "$WORK/x1d.npy" '<f8' 4,8 $(seq 1 32)
npy_write "$WORK/x1t.npy" '<f4' 8,4 $(seq 1 32)
for other in x1d x1t missing; do
    A=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/x1.npy" "${R[@]}")
    B=("$TESSEL" run "$WORK/a.plan" --input 0="$WORK/$other.npy" "${R[@]}")
    pair A B
    case $other in
    x1d) want="is \"<f8 (4, 8)\", rank 0's is \"<f4 (4, 8)\"" ;;
    x1t) want="is \"<f4 (8, 4)\", rank 0's is \"<f4 (4, 8)\"" ;;
    *) want="is \"no regular file\", rank 0's is \"<f4 (4, 8)\"" ;;
    esac
    refused "an input file ($other)" "rank 1's input of parameter 0 (dtype and shape) $want"
done
# The same thing spelled otherwise runs: the model by a relative path on
# rank 0 and an absolute one on rank 1 (the plan's `// TesselWhyFile`
# differs); the same bindings in another order; one file bound by index
# on rank 0 and by the parameter's name on rank 1.
agreed() { # NAME
    [ "$got" = 0 ] || fail "$1: mpirun exited $got, expected 0: $(tail -3 "$ERR")"
    [ -f "$WORK/out/output_0.npy" ] || fail "$1: no output_0.npy"
    rm -rf "$WORK/out"
}
A=(-wdir "$WORK" "$TESSEL" run a.hlo --input 0="$WORK/x1.npy" --input 1="$WORK/w1.npy" --output-dir "$WORK/out")
B=(-wdir "$WORK" "$TESSEL" run "$WORK/a.hlo" --input 1="$WORK/w1.npy" --input x="$WORK/x1.npy" --output-dir "$WORK/out")
pair A B
agreed "one model by two paths, bindings in another order and by name"
A=("$TESSEL" run "$WORK/a.plan" --random-inputs 7) B=("$TESSEL" run "$WORK/a.plan" "${R[@]}")
pair A B
refused "--output-dir on rank 1" "rank 1's --output-dir is \"$WORK/out\", rank 0's is \"not given\""
pair B A
refused "--output-dir on rank 0" "rank 1's --output-dir is \"not given\", rank 0's is \"$WORK/out\""
# Each rank its own --output-dir: only rank 0 writes, so rank 1's would
# stay empty (it was accepted, rank 0's used): refused naming both paths,
# neither directory made.
A=("$TESSEL" run "$WORK/a.plan" --random-inputs 7 --output-dir "$WORK/out")
B=("$TESSEL" run "$WORK/a.plan" --random-inputs 7 --output-dir "$WORK/out1")
pair A B
refused "--output-dir per rank" "rank 1's --output-dir is \"$WORK/out1\", rank 0's is \"$WORK/out\""
[ ! -e "$WORK/out1" ] || fail "--output-dir per rank: $WORK/out1 was made"
# 4. Ranks that disagree touch neither --checkpoint-dir nor --output-dir:
# fresh ones do not exist afterwards, an existing output directory gets no
# lock file (.tessel.lock) nor anything else.
SGD="$TESSEL_SRC/tests/e2e/sgd_step.hlo"
CK=(--checkpoint-every 1 --checkpoint-dir "$WORK/ck" --output-dir "$WORK/out")
A=("$TESSEL" run "$SGD" --random-inputs 7 --steps 2 "${CK[@]}")
B=("$TESSEL" run "$SGD" --random-inputs 8 --steps 2 "${CK[@]}")
pair A B
refused "checkpoints (fresh directories)" "rank 1's random inputs' seed is \"8\", rank 0's is \"7\""
[ ! -e "$WORK/ck" ] || fail "ranks that disagree: the checkpoint directory $WORK/ck was created"
mkdir "$WORK/out"
echo keep >"$WORK/out/mine.txt"
pair A B
[ "$got" = 2 ] || fail "checkpoints (existing output dir): mpirun exited $got, expected 2"
[ "$(ls -A "$WORK/out")" = mine.txt ] || fail "ranks that disagree touched the output directory: $(ls -A "$WORK/out")"
[ ! -e "$WORK/ck" ] || fail "ranks that disagree: the checkpoint directory $WORK/ck was created"
rm -r "$WORK/out"
# The same on both: checkpoints and outputs are written.
pair A A
[ "$got" = 0 ] || fail "checkpoints (ranks alike): mpirun exited $got"
[ -d "$WORK/ck" ] && [ -f "$WORK/out/output_0.npy" ] || fail "checkpoints (ranks alike): nothing written"
rm -r "$WORK/ck" "$WORK/out"

# The same on both: runs.
A=("$TESSEL" run "$WORK/a.plan" --random-inputs 7) B=("$TESSEL" run "$WORK/a.plan" "${R[@]}")
pair B B
[ "$got" = 0 ] || fail "the same command line on both ranks exited $got"
[ -f "$WORK/out/output_0.npy" ] || fail "no output_0.npy"
mv "$WORK/out" "$WORK/same"

# ---- 2. tuning: rank 0's on every rank ----
expect_status 0 "$TESSEL" run "$WORK/a.plan" --random-inputs 7 --output-dir "$WORK/alone"
A=(env TESSEL_FUSION=off TESSEL_COLL_STREAM_BOUND=1 TESSEL_MPI_PIECE_BYTES=13 TESSEL_MPI_PIPELINE_BYTES=0
   "$TESSEL" run "$WORK/a.plan" --random-inputs 7 --output-dir "$WORK/tuned")
B=(env TESSEL_FUSION=all TESSEL_COLL_STREAM_BOUND=0 TESSEL_MPI_CHUNK_BYTES=1000000
   "$TESSEL" run "$WORK/a.plan" --random-inputs 7 --output-dir "$WORK/tuned")
pair A B
[ "$got" = 0 ] || fail "tuning that differs per rank: mpirun exited $got"
cmp -s "$WORK/alone/output_0.npy" "$WORK/tuned/output_0.npy" || fail "tuned: output_0.npy differs from the run alone"
cmp -s "$WORK/same/output_0.npy" "$WORK/tuned/output_0.npy" || fail "tuned: output_0.npy differs from the run alike"

# ---- 3. the check-ins: reducers that differ ----
reducer() { # FILE OP
    cat >"$1" <<HLO
HloModule reducers, num_partitions=2

red {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] $2(a, b)
}

ENTRY main {
  x = f32[64] parameter(0)
  ROOT ar = f32[64] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=red
}
HLO
}
reducer "$WORK/add.hlo" add
reducer "$WORK/max.hlo" maximum
A=("$TESSEL" run "$WORK/add.hlo" --spmd --per-device --random-inputs 3 --heartbeat 60)
B=("$TESSEL" run "$WORK/max.hlo" --spmd --per-device --random-inputs 3 --heartbeat 60)
pair A B
refused "reducers (agreement)" "rank 1's compiled program (plan text) is SHA-256"
# Past the agreement (no option turns it off: tests/unit/mpi_unagreed_main.c
# links the library's internal api_plan_run_mpi_unagreed), the check-ins.
UNAGREED="$TESSEL_BUILD/tests/mpi_unagreed_main"
[ -x "$UNAGREED" ] || fail "no $UNAGREED (built with the tests)"
A=("$UNAGREED" "$WORK/add.hlo") B=("$UNAGREED" "$WORK/max.hlo")
t0=$(date +%s)
pair A B
t1=$(date +%s)
[ "$got" != 0 ] || fail "reducers that differ (no agreement): exit 0"
[ "$got" != 124 ] || fail "reducers that differ (no agreement): a hang (timeout)"
expect_in "$ERR" "reducing with add on f32"
expect_in "$ERR" "reducing with maximum on f32"
expect_in "$ERR" "the ranks diverged"
[ $((t1 - t0)) -lt 30 ] || fail "reducers that differ: $((t1 - t0)) s, the heartbeat's time rather than the check-in's"
! grep -q "the run returned status" "$ERR" || fail "reducers that differ: the run returned (the check-ins did not end the job)"
echo "mpi_agree: ok"
