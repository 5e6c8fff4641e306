#!/usr/bin/env bash
# faults.sh: faults of one rank of `mpirun -np 2 tessel run` end the whole
# job: a non-zero status from mpirun, within a timeout (a hang is a
# failure), a message naming the rank and the cause, no output file or
# directory left, no process left running.
#
#  1. Injected MPI failures (coll/mpi_layer.h): a clean run of
#     tests/models/mlp_megatron.hlo (N=2, --stats) says how many MPI calls a
#     rank makes (C); then for each rank R in 1, 0 and N = 1..C,
#     TESSEL_FAIL_MPI_AFTER=N TESSEL_FAIL_MPI_RANK=R makes R's N-th MPI call
#     fail without calling MPI; the message must be "rank R: MPI_<call>
#     failed: ... (injected ...)". N = C+1 is no longer reached: that run
#     must succeed with the clean run's output. Rank 1's MPI_Finalize (after
#     the last agreement) may let rank 0 write whole outputs before mpirun
#     ends it: there they must equal the clean run's. All N up to 40 are walked,
#     then a stride (at most ~20 more runs per rank; the script says so);
#     under ASan rank 1 takes the odd points and rank 0 the even ones.
#     The same, rank 1 only, for a module with host work (host_attr_while:
#     every rank runs the host program, clusters on the ranks' devices).
#  2. SIGKILL of rank 1, then of rank 0, in the middle of a long run
#     (--steps): the other rank ends within 15 s, mpirun exits non-zero.
#  3. A rank out of memory: rank 1 runs under `ulimit -v` 1 GiB and the
#     model's broadcast needs 1 GiB per device: "rank 1: ... out of memory".
#     Skipped on ASan builds (ASan reserves terabytes of virtual memory).
# Prints one line per run (what failed, status, seconds) for RELIABILITY.md.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's own allocations are reported as leaks under ASan (see mpi.sh).
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
ASAN_BUILD=0
if grep -qa __asan_init "$TESSEL"; then ASAN_BUILD=1; fi
unset TESSEL_FAIL_MPI_AFTER TESSEL_FAIL_MPI_RANK

devs=0,1
M="$WORK/mlp_megatron.hlo"
sed -e "s/@N/2/g" -e "s/@D/$devs/g" "$TESSEL_SRC/tests/models/mlp_megatron.hlo" >"$M"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# alive PID: the process exists and is not a zombie waiting to be reaped
alive() { [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# job DIR CMD-PREFIX...: `timeout 60 mpirun -np 2 [PREFIX] tessel run $JM
# --random-inputs 3 --stats --output-dir DIR`; sets $got (status) and $ms.
JM=$M
job() {
    local dir=$1 t0
    shift
    t0=$(now_ms)
    got=0
    ASAN_OPTIONS="$MPI_ASAN" timeout 60 mpirun --oversubscribe -np 2 "$@" "$TESSEL" run "$JM" \
        --random-inputs 3 --stats --output-dir "$dir" >"$OUT" 2>"$ERR" || got=$?
    ms=$(($(now_ms) - t0))
}

# ended_clean DIR WHAT: the failed job left no output and no process.
ended_clean() {
    [ "$got" != 0 ] || fail "$2: mpirun exited 0"
    [ "$got" != 124 ] || fail "$2: still running after 60 s (a hang)"
    [ ! -e "$1" ] || fail "$2: left $1 behind ($(ls -A "$1" | tr '\n' ' '))"
    if pgrep -f -- "--output-dir $1" >/dev/null; then
        sleep 1
        ! pgrep -f -- "--output-dir $1" >/dev/null || fail "$2: a rank outlived mpirun"
    fi
}

# 1..40, then a stride that keeps the walk at ~60 runs per rank; C always.
walk_points() {
    local c=$1 n stride
    for ((n = 1; n <= c && n <= 40; n++)); do echo "$n"; done
    if [ "$c" -gt 40 ]; then
        stride=$(((c - 40 + 19) / 20))
        echo "faults: $c calls: walking 1..40, then every $stride-th call, and $c" >&2
        for ((n = 40 + stride; n < c; n += stride)); do echo "$n"; done
        echo "$c"
    fi
}

# walk NAME MODEL RANKS...: the clean run's MPI call count C, then every
# walk point on each of RANKS, then C+1 (not reached: success, same output).
walk() {
    local name=$1 c r n dir what call total_ms=0 max_ms=0 runs=0
    JM=$2
    shift 2
    job "$WORK/clean.$name"
    [ "$got" = 0 ] || fail "$name: the clean run exited $got"
    c=$(sed -n 's/^tessel: stats: MPI calls *\([0-9]*\) on rank 0$/\1/p' "$ERR")
    [ -n "$c" ] && [ "$c" -ge 20 ] || fail "$name: the clean run's MPI call count is '$c'"
    echo "faults: $name: the clean run makes $c MPI calls per rank (with --stats)"
    local k
    for r in "$@"; do
        k=0
        for n in $(walk_points "$c"); do
            # Under ASan rank 1 takes the odd points, rank 0 the even ones
            # (and both C), so every point still fails once there; the
            # release build walks every point on every rank.
            k=$((k + 1))
            [ "$ASAN_BUILD" = 0 ] || [ "$n" = "$c" ] || [ $(((k + r) % 2)) = 0 ] || continue
            dir="$WORK/out.$name.$r.$n"
            what="$name: TESSEL_FAIL_MPI_AFTER=$n on rank $r"
            job "$dir" -x TESSEL_FAIL_MPI_AFTER="$n" -x TESSEL_FAIL_MPI_RANK="$r"
            call=$(grep -oE "rank $r: MPI_[A-Za-z_]+ failed: .*\(injected" "$ERR" | head -1 | cut -d' ' -f3) ||
                true
            [ -n "$call" ] || fail "$what: no message 'rank $r: MPI_... failed: ... (injected'"
            # A failed MPI_Finalize on rank 1 comes after every rank agreed that
            # the run is done; Open MPI's finalize usually holds rank 0 until
            # mpirun kills it, but may let it through first (seen under ASan in
            # CI): then its outputs stand, and they must be the clean run's.
            if [ "$call" = MPI_Finalize ] && [ "$r" != 0 ] && [ -e "$dir" ]; then
                [ "$got" != 0 ] || fail "$what: mpirun exited 0"
                cmp -s "$WORK/clean.$name/output_0.npy" "$dir/output_0.npy" ||
                    fail "$what: rank 0 wrote outputs that differ from the clean run's"
                rm -rf "$dir"
            fi
            ended_clean "$dir" "$what"
            printf 'faults: %s rank %d call %2d %-24s exit %d, %5d ms\n' "$name" "$r" "$n" "$call" "$got" "$ms"
            total_ms=$((total_ms + ms))
            runs=$((runs + 1))
            [ "$ms" -le "$max_ms" ] || max_ms=$ms
        done
        # one call more than the clean run makes: never reached, so it succeeds
        job "$WORK/past.$name.$r" -x TESSEL_FAIL_MPI_AFTER=$((c + 1)) -x TESSEL_FAIL_MPI_RANK="$r"
        [ "$got" = 0 ] || fail "$name: TESSEL_FAIL_MPI_AFTER=$((c + 1)) on rank $r (past the last call) exited $got"
        cmp -s "$WORK/clean.$name/output_0.npy" "$WORK/past.$name.$r/output_0.npy" ||
            fail "$name: TESSEL_FAIL_MPI_AFTER=$((c + 1)) on rank $r: the output differs from the clean run's"
    done
    echo "faults: $name: $runs injected MPI failures all ended the job; slowest $max_ms ms, total $((total_ms / 1000)) s"
}

# ---- 1. the walk over injected MPI failures ----
walk mlp_megatron "$M" 1 0
# a module with host work (a host-side while around device clusters) runs
# another path (every rank runs the host program); rank 1 only
sed -e "s/@N/4/g" -e "s/@D/0,1,2,3/g" "$TESSEL_SRC/tests/models/host_attr_while.hlo" >"$WORK/host_attr_while.hlo"
walk host_attr_while "$WORK/host_attr_while.hlo" 1
JM=$M

# a malformed setting is refused before MPI starts
job "$WORK/bad_env" -x TESSEL_FAIL_MPI_AFTER=3x
ended_clean "$WORK/bad_env" "TESSEL_FAIL_MPI_AFTER=3x"
expect_in "$ERR" "TESSEL_FAIL_MPI_AFTER=3x: expected a non-negative integer"

# ---- 2. SIGKILL of one rank in the middle of a long run ----
# kill_rank R: start a long run whose ranks write their pids, kill -9 rank
# R after 3 s, the other rank and mpirun must end within 15 s.
kill_rank() {
    local victim=$1 other=$((1 - $1)) dir="$WORK/kill.$1" mp vp op t0 waited
    rm -f "$WORK"/pid.*
    # shellcheck disable=SC2016 # $$ and $OMPI_COMM_WORLD_RANK are the rank's
    ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np 2 \
        sh -c 'echo $$ >"$0.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$WORK/pid" \
        "$TESSEL" run "$M" --random-inputs 3 --steps 1000000000 --output-dir "$dir" >"$OUT" 2>"$ERR" &
    mp=$!
    for _ in $(seq 100); do
        [ -s "$WORK/pid.0" ] && [ -s "$WORK/pid.1" ] && break
        sleep 0.1
    done
    vp=$(cat "$WORK/pid.$victim" 2>/dev/null) || fail "rank $victim did not start"
    op=$(cat "$WORK/pid.$other" 2>/dev/null) || fail "rank $other did not start"
    sleep 3
    alive "$vp" && alive "$op" || fail "a rank ended before it was killed"
    kill -9 "$vp"
    t0=$(now_ms)
    while alive "$op" || alive "$mp"; do
        [ $(($(now_ms) - t0)) -le 15000 ] || fail "rank $victim killed: rank $other or mpirun still running after 15 s"
        sleep 0.05
    done
    waited=$(($(now_ms) - t0))
    got=0
    wait "$mp" || got=$?
    ended_clean "$dir" "SIGKILL of rank $victim"
    echo "faults: SIGKILL of rank $victim: rank $other and mpirun ended in $waited ms, mpirun exit $got"
}
kill_rank 1
kill_rank 0

# ---- 3. a rank out of memory ----
if [ "$ASAN_BUILD" = 1 ]; then
    echo "faults: SKIP the out-of-memory rank: $TESSEL is an ASan build (ulimit -v and ASan do not mix)"
else
    # per device, b is f32[1,16384,16384]: 1 GiB, the whole of rank 1's
    # address space limit (a rank needs ~0.5 GiB before it allocates); the
    # executor materialises a broadcast feeding a reduce (fusion covers
    # elementwise chains only: if that changes, this run stops failing and
    # the check says so)
    cat >"$WORK/oom.hlo" <<'EOF'
HloModule oom, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[2,16384] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[2,16384,16384] broadcast(x), dimensions={0,2}, sharding={devices=[2,1,1]0,1}
  zero = f32[] constant(0)
  ROOT r = f32[2] reduce(b, zero), dimensions={1,2}, to_apply=add, sharding={devices=[2]0,1}
}
EOF
    dir="$WORK/oom_out"
    t0=$(now_ms)
    got=0
    # shellcheck disable=SC2016 # expanded by each rank's sh
    timeout 60 mpirun --oversubscribe -np 2 \
        sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then ulimit -v 1048576 || exit 99; fi; exec "$@"' sh \
        "$TESSEL" run "$WORK/oom.hlo" --random-inputs 3 --output-dir "$dir" >"$OUT" 2>"$ERR" || got=$?
    ms=$(($(now_ms) - t0))
    ended_clean "$dir" "rank 1 out of memory"
    grep -qE "error: rank 1: .*out of memory" "$ERR" || fail "rank 1 out of memory: no 'rank 1: ... out of memory' message"
    echo "faults: rank 1 out of memory: exit $got in $ms ms: $(grep -m1 -oE 'rank 1: .*out of memory.*' "$ERR")"
fi
echo "faults: ok"
