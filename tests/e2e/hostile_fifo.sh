#!/usr/bin/env bash
# hostile_fifo.sh: FIFOs, sockets and devices as a model, a plan, an --input
# or an --infeed are refused before they are opened (issue 16, finding 4:
# an --input FIFO blocked forever on main), alone and under mpirun. Every
# command runs under `timeout`, so a regression fails instead of hanging.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

mkfifo "$WORK/fifo"
"$PY" -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$WORK/sock"
[ -S "$WORK/sock" ] || fail "no socket made"
M="$TESSEL_SRC/examples/mlp.hlo"
cat >"$WORK/infeed.hlo" <<'HLO'
HloModule feed
ENTRY main {
  t = token[] after-all()
  f = (f32[4], token[]) infeed(t)
  ROOT v = f32[4] get-tuple-element(f), index=0
}
HLO

refused() { # refused KIND CMD...: status 2 within the timeout, the kind named
    local kind=$1
    shift
    local got=0
    timeout 20 "$@" >"$OUT" 2>"$ERR" </dev/null || got=$?
    [ "$got" != 124 ] || fail "'$*' hung (a ${kind} was opened and waited on)"
    [ "$got" = 2 ] || fail "'$*' exited $got, expected 2"
    expect_in "$ERR" "not a regular file ($kind)"
}
for kind in fifo sock; do
    name=$([ $kind = fifo ] && echo "a FIFO" || echo "a socket")
    refused "$name" "$TESSEL" check "$WORK/$kind"
    refused "$name" "$TESSEL" run --random-inputs 1 "$WORK/$kind"
    refused "$name" "$TESSEL" run --random-inputs 1 --input "0=$WORK/$kind" "$M"
    refused "$name" "$TESSEL" run --reference --random-inputs 1 --input "x=$WORK/$kind" "$M"
    refused "$name" "$TESSEL" run --reference --infeed "$WORK/$kind" "$WORK/infeed.hlo"
done
refused "a character device" "$TESSEL" run --random-inputs 1 --input 0=/dev/zero "$M"
refused "a character device" "$TESSEL" compile -o "$WORK/x.plan" /dev/zero
refused "a directory" "$TESSEL" run --random-inputs 1 --input "0=$WORK" "$M"

# Under mpirun: every rank refuses, the job ends (no rank waits on the FIFO).
if command -v mpirun >/dev/null; then
    MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0" # leaks checked (tests/lsan_openmpi.supp)
    got=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 60 mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run --random-inputs 1 --input "0=$WORK/fifo" --output-dir "$WORK/o" "$M" >"$OUT" 2>"$ERR" </dev/null || got=$?
    [ "$got" != 124 ] || fail "mpirun with a FIFO input hung"
    [ "$got" != 0 ] || fail "mpirun with a FIFO input succeeded"
    expect_in "$ERR" "not a regular file (a FIFO)"
    [ ! -e "$WORK/o" ] || fail "a refused run under mpirun left outputs"
    got=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 60 mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
        "$TESSEL" run --random-inputs 1 "$WORK/fifo" >"$OUT" 2>"$ERR" </dev/null || got=$?
    [ "$got" != 124 ] && [ "$got" != 0 ] || fail "mpirun with a FIFO model exited $got"
    expect_in "$ERR" "not a regular file (a FIFO)"
fi
echo "hostile_fifo: ok"
