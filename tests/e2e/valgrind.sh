#!/usr/bin/env bash
# valgrind.sh: `tessel run` (reference, and partitioned over 2 in-process
# devices, from the model and from a plan), `tessel compile` and a failing
# run (a bad input file: exit 2) under valgrind --leak-check=full: no
# invalid access, no uninitialised read, no definitely or possibly lost
# block. Skips (exit 0 with a message) when valgrind is not installed or
# when tessel is an ASan build.
# ctest labels: e2e, valgrind (ctest -L valgrind).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

if ! command -v valgrind >/dev/null; then
    echo "SKIP: valgrind not installed"
    exit 0
fi
# valgrind cannot run a sanitizer build (the asan preset runs every e2e test).
if grep -qa __asan_init "$TESSEL"; then
    echo "SKIP: $TESSEL is built with AddressSanitizer; valgrind needs a plain build"
    exit 0
fi

# One BLAS thread: valgrind serialises threads anyway, and OpenBLAS's idle
# pool only adds noise.
export OPENBLAS_NUM_THREADS=1
VG=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible
    --error-exitcode=99 --track-origins=yes)

# model NAME N: tests/models/NAME.hlo with @N and @D for N devices.
model() {
    local d=0 i
    for ((i = 1; i < $2; i++)); do d="$d,$i"; done
    sed -e "s/@N/$2/g" -e "s/@D/$d/g" "$TESSEL_SRC/tests/models/$1.hlo" >"$WORK/$1.hlo"
    echo "$WORK/$1.hlo"
}

# vg WANT CMD...: CMD under valgrind exits WANT (99: valgrind found errors).
vg() {
    local want=$1
    shift
    echo "== valgrind $*"
    expect_status "$want" "${VG[@]}" "$@"
}

for m in mlp_megatron while_loop slice_pad_concat reduce_init; do
    f=$(model "$m" 2)
    vg 0 "$TESSEL" run "$f" --reference --random-inputs 1 --output-dir "$WORK/ref_$m"
    vg 0 "$TESSEL" run "$f" --num-partitions 2 --random-inputs 1 --output-dir "$WORK/part_$m"
    [ -f "$WORK/part_$m/output_0.npy" ] || fail "$m: no output written"
done

f=$(model mlp_megatron 2)
vg 0 "$TESSEL" compile "$f" --num-partitions 2 -o "$WORK/mlp.plan"
vg 0 "$TESSEL" run "$WORK/mlp.plan" --random-inputs 1 --output-dir "$WORK/plan_out"
cmp -s "$WORK/plan_out/output_0.npy" "$WORK/part_mlp_megatron/output_0.npy" ||
    fail "the plan's output differs from the model's partitioned run"

# Failure paths free everything too: a .npy of the wrong dtype (exit 2),
# a truncated plan (exit 2).
npy_write "$WORK/x.npy" '<f8' "16,24" $(seq 1 384)
vg 2 "$TESSEL" run "$f" --num-partitions 2 --input 0="$WORK/x.npy" --random-inputs 1
expect_in "$ERR" "x.npy"
head -c 300 "$WORK/mlp.plan" >"$WORK/cut.plan"
vg 2 "$TESSEL" run "$WORK/cut.plan" --random-inputs 1
echo "valgrind: all clean"
