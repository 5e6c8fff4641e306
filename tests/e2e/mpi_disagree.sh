#!/usr/bin/env bash
# mpi_disagree.sh: the class "ranks that disagree" (issue 30), table-driven
# over every TESSEL_* variable the command line reads (tools/tuning_env.c)
# and every option of `tessel run` (its --help), under
# `mpirun -np 1 A : -np 1 B` over TCP: rank 1 (B) differs from rank 0 (A)
# in one thing. Each row is one of
#   same      harmless: the value travels from rank 0 or changes nothing
#             the ranks share; the run's output_0.npy equals the
#             one-process run's bit for bit (the variables of this class
#             differ all at once, in one run)
#   stop      stopped before work: exit 2, every rank naming what differs
#             (the row's text) and rank 1, nothing written (no --output-dir)
#   fail      failure injection, acting on its rank alone: the job ends
#             with an error (exit non-zero), nothing written
#   n/a       not a thing two ranks can differ in here (the row says why)
# A variable or option missing from the table fails the test, so a knob
# added later must be classed (and, if it must match, agreed on).
# Then rank 1 running another build of tessel (stopped, naming the build),
# and 4 ranks where only rank 3 differs: a seed (stopped, naming rank 3);
# rank 2's steps and rank 3's seed (both named, the second after "also
# different:");
# and TESSEL_MPI_PIECE_BYTES (the same result).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=tcp,self
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
unset TESSEL_MPI_PIECE_BYTES TESSEL_MPI_CHUNK_BYTES TESSEL_MPI_PIPELINE_BYTES TESSEL_COLL_COPIES_BYTES \
    TESSEL_COLL_STREAM_BOUND TESSEL_FUSION TESSEL_FUSION_BLOCK TESSEL_FAIL_MPI_AFTER TESSEL_FAIL_MPI_RANK \
    TESSEL_SKIP_COLLECTIVE_AFTER

M="$WORK/m.hlo"
cat >"$M" <<'HLO'
HloModule disagree, num_partitions=2

ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  w = f32[8,4] parameter(1), sharding={devices=[2,1]0,1}
  d = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[4,4] tanh(d), sharding={devices=[2,1]0,1}
}
HLO
npy_write "$WORK/x1.npy" '<f4' 4,8 $(seq 1 32)
npy_write "$WORK/x2.npy" '<f4' 4,8 $(seq 2 33)
printf 'key one\n' >"$WORK/key"
expect_status 0 "$TESSEL" run "$M" --random-inputs 7 --output-dir "$WORK/alone"
REF="$WORK/alone/output_0.npy"

# NAME | CLASS | rank 0's extra (env VAR=V ... -- then arguments) | rank 1's | the text (stop)
ROWS=(
"TESSEL_MPI_PIECE_BYTES|same||TESSEL_MPI_PIECE_BYTES=13 --|"
"TESSEL_MPI_CHUNK_BYTES|same|TESSEL_MPI_CHUNK_BYTES=7 --|TESSEL_MPI_CHUNK_BYTES=1000000 --|"
"TESSEL_MPI_PIPELINE_BYTES|same||TESSEL_MPI_PIPELINE_BYTES=0 --|"
"TESSEL_COLL_COPIES_BYTES|same|TESSEL_COLL_COPIES_BYTES=0 --|TESSEL_COLL_COPIES_BYTES=1 --|"
"TESSEL_COLL_STREAM_BOUND|same|TESSEL_COLL_STREAM_BOUND=0 --|TESSEL_COLL_STREAM_BOUND=1 --|"
"TESSEL_FUSION|same|TESSEL_FUSION=off --|TESSEL_FUSION=all --|"
"TESSEL_FUSION_BLOCK|same||TESSEL_FUSION_BLOCK=3 --|"
# The f32 GEMM library asked for: each gives its own last bits on a large
# dot (amx-bf16x3 not f32's), so ranks asking for different ones would
# join shards of different computations (issue 30; it ran, class same).
"TESSEL_SGEMM|stop|TESSEL_SGEMM=openblas --|TESSEL_SGEMM=probe --|rank 1's f32 GEMM library (--sgemm, TESSEL_SGEMM) is \"probe\", rank 0's is \"openblas\""
"TESSEL_FAIL_MPI_AFTER|fail||TESSEL_FAIL_MPI_AFTER=30 --|"
"TESSEL_FAIL_MPI_RANK|fail||TESSEL_FAIL_MPI_AFTER=30 TESSEL_FAIL_MPI_RANK=1 --|"
"TESSEL_SKIP_COLLECTIVE_AFTER|fail||TESSEL_SKIP_COLLECTIVE_AFTER=1 --|"
"--random-inputs|stop|--random-inputs 7|--random-inputs 8|rank 1's random inputs' seed is \"8\", rank 0's is \"7\""
"--input|stop|--input 0=\$WORK/x1.npy|--input 0=\$WORK/x2.npy|rank 1's input of parameter 0 (by content)"
"--steps|stop||--steps 2|rank 1's steps is \"2\""
"--output-dir|stop|--output-dir \$WORK/out|--output-dir \$WORK/out2|/out2\", rank 0's is \""
"--stats|stop||--stats|rank 1's statistics (stats) is \"on\""
"--stats|stop|--stats|--stats=ops|rank 1's statistics (stats) is \"ops\", rank 0's is \"on\""
"--limit|stop||--limit trips=1000|rank 1's limit on loop trips"
"--watch|stop||--watch t|rank 1"
"--init-state|stop||--init-state zeros|rank 1's optimizer state (zero_state)"
"--num-partitions|stop||--num-partitions 4|rank 1"
"--num-replicas|stop||--num-replicas 2|rank 1"
"--hosts|stop||--hosts 1|rank 1"
"--local-devices|stop||--local-devices 2|rank 1"
"--spmd|stop||--spmd|rank 1"
"--per-device|stop|--spmd|--spmd --per-device|rank 1's random inputs' seed is \"7 per device\""
"--output-device|stop|--spmd|--spmd --output-device 1|rank 1's output device"
"--auto-shard|stop||--auto-shard|rank 1's compiled program (plan text)"
"--mesh|stop|--auto-shard --mesh 2|--auto-shard --mesh 2x1|rank 1's compiled program (plan text)"
"--donate|same||--donate auto|"
"--checkpoint-every|stop||--checkpoint-every 1 --checkpoint-dir \$WORK/ck|rank 1"
"--checkpoint-dir|stop||--checkpoint-every 1 --checkpoint-dir \$WORK/ck|rank 1"
"--resume|stop||--resume \$WORK/nock|rank 1"
"--infeed|stop||--infeed \$WORK/x1.npy|--infeed feeds one device"
"--sign-key|same||--sign-key \$WORK/key|"
"--link-gbps|same||--link-gbps 1|"
"--sgemm|stop|--sgemm openblas|--sgemm blis|rank 1's f32 GEMM library (--sgemm, TESSEL_SGEMM) is \"blis\", rank 0's is \"openblas\""
"--no-verify|same||--no-verify|"
"--dump-dir|same||--dump-dir \$WORK/dump|"
"--heartbeat|same||--heartbeat 30|"
"--timeout|same||--timeout 300|"
"--progress|same||--progress|"
"--adam|n/a|||an option of tessel grad the run usage lists for --init-state: run refuses it (usage error on every rank alike)"
"--profile|n/a|||read with --auto-shard only: a rank with another profile compiles another program, the --auto-shard row"
"--host-cores|n/a|||read with --auto-shard only: a rank with another count may compile another program (the tie-break off), the --auto-shard row"
"--reference|n/a|||runs one process without MPI: mpirun of a rank that never joins ends as a failed launch"
"--help|n/a|||prints the usage"
)

# The table covers every variable and option.
vars=$(grep -o '"TESSEL_[A-Z_]*"' "$TESSEL_SRC/tools/tuning_env.c" | tr -d '"' | sort -u)
opts=$("$TESSEL" run --help 2>&1 | grep -o -- '--[a-z][a-z-]*' | sort -u)
names=$(for r in "${ROWS[@]}"; do echo "${r%%|*}"; done | sort -u)
for k in $vars $opts; do
    grep -qx -- "$k" <<<"$names" || fail "$k is not in mpi_disagree.sh's table: class it (same, stop, fail or n/a)"
done

# Split "VAR=V ... -- ARGS" into ENVS and ARGS (no "--": arguments only).
split() {
    local s
    s=$(eval "echo \"$1\"")
    ENVS=() ARGS=()
    if [[ "$s" == *"--"* && "$s" =~ ^([A-Z_]+=[^ ]*( [A-Z_]+=[^ ]*)*)\ --(.*)$ ]]; then
        read -r -a ENVS <<<"${BASH_REMATCH[1]}"
        read -r -a ARGS <<<"${BASH_REMATCH[3]}"
    else
        read -r -a ARGS <<<"$s"
    fi
}

# The variables of class same differ all at once, in one run (below).
ENV_A=() ENV_B=() ENV_NAMES=""
for row in "${ROWS[@]}"; do
    IFS='|' read -r name class a b text <<<"$row"
    [ "$class" != n/a ] || continue
    if [ "$class" = same ] && [[ "$name" == TESSEL_* ]]; then
        split "$a"
        ENV_A+=("${ENVS[@]}")
        split "$b"
        ENV_B+=("${ENVS[@]}")
        ENV_NAMES+=" $name"
        continue
    fi
    rm -rf "$WORK/out" "$WORK/out2" "$WORK/ck" "$WORK/dump"
    # seed 7 on both unless the row gives one
    seed=(--random-inputs 7)
    [[ "$b" != *--random-inputs* ]] || seed=()
    split "$a"
    A=(env "${ENVS[@]}" "$TESSEL" run "$M" "${seed[@]}" "${ARGS[@]}")
    split "$b"
    B=(env "${ENVS[@]}" "$TESSEL" run "$M" "${seed[@]}" "${ARGS[@]}")
    # a row without its own --output-dir writes both into $WORK/out
    [[ "$a$b" == *--output-dir* ]] || { A+=(--output-dir "$WORK/out"); B+=(--output-dir "$WORK/out"); }
    got=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 1 "${A[@]}" : -np 1 "${B[@]}" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" != 124 ] || fail "$name: a hang (timeout)"
    case $class in
    same)
        [ "$got" = 0 ] || fail "$name differing per rank: exit $got, expected the run"
        cmp -s "$REF" "$WORK/out/output_0.npy" || fail "$name differing per rank: output_0.npy is not the one-process run's"
        [ ! -e "$WORK/out2" ] || fail "$name differing per rank: rank 1's --output-dir was made (rank 0 writes)"
        ;;
    stop)
        [ "$got" = 2 ] || fail "$name differing per rank: exit $got, expected 2"
        expect_in "$ERR" "$text"
        [ ! -e "$WORK/out" ] && [ ! -e "$WORK/out2" ] && [ ! -e "$WORK/ck" ] ||
            fail "$name differing per rank: a directory was written"
        ;;
    fail)
        [ "$got" != 0 ] || fail "$name on rank 1 alone: exit 0, expected the injected failure"
        expect_in "$ERR" "rank 1"
        [ ! -e "$WORK/out/output_0.npy" ] || fail "$name on rank 1 alone: an output was written"
        ;;
    esac
    echo "mpi_disagree: $name ($class): exit $got"
done

# the variables of class same, every one differing at once
rm -rf "$WORK/out"
got=0
env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 1 env "${ENV_A[@]}" "$TESSEL" run "$M" --random-inputs 7 \
    --output-dir "$WORK/out" : -np 1 env "${ENV_B[@]}" "$TESSEL" run "$M" --random-inputs 7 --output-dir "$WORK/out" \
    >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 0 ] || fail "$ENV_NAMES differing per rank: exit $got, expected the run"
cmp -s "$REF" "$WORK/out/output_0.npy" || fail "$ENV_NAMES differing per rank: output_0.npy is not the one-process run's"
echo "mpi_disagree:$ENV_NAMES (same, at once): exit 0"

# ---- rank 1 runs another build of tessel ----
# The binary without its GNU build id note stands for another build (an
# upgrade on some hosts only): stopped before work, naming the build (it
# ran, and another build's kernels could give another answer).
objcopy --remove-section .note.gnu.build-id "$TESSEL" "$WORK/tessel_other_build"
rm -rf "$WORK/out"
got=0
env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 1 "$TESSEL" run "$M" --random-inputs 7 --output-dir "$WORK/out" \
    : -np 1 "$WORK/tessel_other_build" run "$M" --random-inputs 7 --output-dir "$WORK/out" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 2 ] || fail "another build on rank 1: exit $got, expected 2"
expect_in "$ERR" "rank 1's tessel build (version and GNU build id) is \"$("$TESSEL" --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1), no build id\""
[ ! -e "$WORK/out" ] || fail "another build on rank 1: $WORK/out was written"
echo "mpi_disagree: another build on rank 1 (stop): exit $got"

# ---- 4 ranks, rank 3 alone differs ----
rm -rf "$WORK/out" "$WORK/out2" "$WORK/ck" "$WORK/dump"
sed 's/num_partitions=2/num_partitions=4/; s/devices=\[2,1\]0,1/devices=[4,1]0,1,2,3/g' "$M" >"$WORK/m4.hlo"
sed -i 's/f32\[4,8\]/f32[8,8]/; s/f32\[4,4\] dot/f32[8,4] dot/; s/ROOT t = f32\[4,4\]/ROOT t = f32[8,4]/' "$WORK/m4.hlo"
expect_status 0 "$TESSEL" run "$WORK/m4.hlo" --random-inputs 7 --output-dir "$WORK/alone4"
R4=("$TESSEL" run "$WORK/m4.hlo" --random-inputs 7 --output-dir "$WORK/out")
got=0
env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 3 "${R4[@]}" : -np 1 "$TESSEL" run "$WORK/m4.hlo" \
    --random-inputs 9 --output-dir "$WORK/out" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 2 ] || fail "4 ranks, rank 3's seed: exit $got, expected 2"
expect_in "$ERR" "rank 3's random inputs' seed is \"9\", rank 0's is \"7\""
for r in 0 1 2 3; do expect_in "$ERR" "rank $r: the ranks do not run the same thing"; done
[ ! -e "$WORK/out" ] || fail "4 ranks, rank 3's seed: $WORK/out was written"
# Two fields differ (rank 2's steps, rank 3's seed): the first is named
# with both values, the other after it with its rank, on every rank.
got=0
env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 2 "${R4[@]}" : -np 1 "${R4[@]}" --steps 2 : -np 1 "$TESSEL" run \
    "$WORK/m4.hlo" --random-inputs 9 --output-dir "$WORK/out" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 2 ] || fail "4 ranks, rank 2's steps and rank 3's seed: exit $got, expected 2"
for r in 0 1 2 3; do
    expect_in "$ERR" "rank $r: the ranks do not run the same thing: rank 3's random inputs' seed is \"9\", rank 0's is \"7\"; also different: steps (rank 2)"
done
[ ! -e "$WORK/out" ] || fail "4 ranks, two differences: $WORK/out was written"
got=0
env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun -np 3 "${R4[@]}" : -np 1 env TESSEL_MPI_PIECE_BYTES=13 \
    TESSEL_MPI_PIPELINE_BYTES=0 "${R4[@]}" >"$OUT" 2>"$ERR" || got=$?
[ "$got" = 0 ] || fail "4 ranks, rank 3's pieces: exit $got"
cmp -s "$WORK/alone4/output_0.npy" "$WORK/out/output_0.npy" || fail "4 ranks, rank 3's pieces: another result"
echo "mpi_disagree: ok"
