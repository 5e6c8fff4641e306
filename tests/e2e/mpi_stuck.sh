#!/usr/bin/env bash
# mpi_stuck.sh: the heartbeat ends a rank stuck inside one MPI call
# (issue 30), under `mpirun -np 2` over TCP. tests/unit/mpi_stuck_main.c
# replays an SPMD all-reduce on 2 ranks with the N-th MPI_Iallreduce of
# one rank never returning (coll_mpi_hang_in: it sleeps inside the MPI
# layer's lock, as a call stuck inside MPI would). Each case must end the
# job, exit non-zero, in a few heartbeats, never hang (timeout 120 s):
#  1. rank 1 stuck in the devices' all-reduce (its 3rd MPI_Iallreduce),
#     its heartbeat 2 s, rank 0's 30 s: rank 1 itself says so, naming the
#     call and the collective (an all-reduce of 256 bytes reducing with
#     add on f32), in under 15 s. This used to hang until rank 0's
#     heartbeat: rank 1's heartbeat thread waited behind the stuck call
#     for the MPI lock (a beat's MPI_Test) and never looked again.
#  2. rank 0 stuck there, both heartbeats 2 s: the job ends in under 15 s
#     naming rank 0 (its own message or rank 1's "rank 0 has not been
#     heard from").
#  3. rank 1 stuck in its 1st MPI_Iallreduce, before its heartbeat runs
#     (the exchange of rank 0's tuning): rank 0's heartbeat (2 s) names
#     rank 1 as silent, in under 15 s.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=tcp,self
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # the job is aborted: Open MPI's own blocks
STUCK="$TESSEL_BUILD/tests/mpi_stuck_main"
[ -x "$STUCK" ] || fail "no $STUCK (built with the tests)"
cat >"$WORK/add.hlo" <<'HLO'
HloModule stuck, num_partitions=2

red {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY main {
  x = f32[64] parameter(0)
  ROOT ar = f32[64] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=red
}
HLO

# stuck RANK HEARTBEAT_RANK HEARTBEAT_OTHERS N: the status in $got, the
# seconds in $secs.
stuck() {
    got=0
    local t0 t1
    t0=$(date +%s.%N)
    env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun -np 2 "$STUCK" "$WORK/add.hlo" "$@" >"$OUT" 2>"$ERR" || got=$?
    t1=$(date +%s.%N)
    secs=$("$PY" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
    [ "$got" != 0 ] || fail "rank $1 stuck (call $4): exit 0"
    [ "$got" != 124 ] || fail "rank $1 stuck (call $4): a hang (timeout 120 s)"
    ! grep -q "the run returned status" "$ERR" || fail "rank $1 stuck (call $4): a run returned"
    "$PY" -c "import sys; sys.exit(float(sys.argv[1]) >= 15)" "$secs" || fail "rank $1 stuck (call $4): $secs s"
    echo "mpi_stuck: rank $1 stuck in MPI_Iallreduce number $4 (heartbeats $2 s / $3 s): exit $got after $secs s"
}

stuck 1 2 30 3
expect_in "$ERR" "rank 1: this rank has been inside MPI_Iallreduce at collective"
expect_in "$ERR" "an all-reduce (256) reducing with add on f32, for"
expect_in "$ERR" "(--heartbeat 2 s): stuck inside MPI; ending the job, no output written"

stuck 0 2 2 3
grep -q "rank 0: this rank has been inside MPI_Iallreduce\|rank 0 has not been heard from" "$ERR" ||
    fail "rank 0 stuck: no message names it"

stuck 1 2 2 1
expect_in "$ERR" "rank 0: rank 1 has not been heard from for"
echo "mpi_stuck: ok"
