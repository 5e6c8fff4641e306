#!/usr/bin/env bash
# model_plans.sh: every model of tests/models (its `// devices:` line
# lists the device counts it is written for; a model without one is for
# one device) runs from its plan file as from the model: for the largest
# device count N, `tessel compile
# --hosts H` for H = 1, 2 and 4 where N splits into H hosts, then the plan
# alone (H = 1) and under `mpirun -np H`; every output equals --reference
# (the oracle's tolerance, compared with NumPy). Host-work models are covered, with
# --steps, by host_plans.sh. Each plan's text is also replayed with
# --spmd on 1, 2 and 4 hosts (inputs cut and outputs joined with NumPy by
# replay_io.py). A fixed sample runs, to keep the suite's time: the
# release build every second model (the 1st, 3rd, ...), the asan build
# every eighth of the others (the 2nd, 10th, ...); with --all every model
# (ctest label model_plans_sweep: `TESSEL_MODEL_PLANS_SWEEP=1 ctest -L
# model_plans_sweep`, about 2 minutes; --if-asked skips, 77, without that
# variable). A model's comparisons are
# made together after its runs, in one same_outputs.py process (and its
# joins in one replay_io.py): NumPy's import, not the comparing, was most
# of the test's time (10 Python processes a model before, 4 now).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
RIO="$TESSEL_SRC/tests/e2e/replay_io.py"
SAME="$TESSEL_SRC/tests/e2e/same_outputs.py"
STEP=2 FIRST=0
case "${TESSEL_BUILD:-}" in */asan) STEP=8 FIRST=1 ;; esac
for arg in "$@"; do
    case "$arg" in
    --all) STEP=1 FIRST=0 ;;
    --if-asked) [ "${TESSEL_MODEL_PLANS_SWEEP:-0}" = 1 ] || {
        echo "model_plans: the sweep runs only with TESSEL_MODEL_PLANS_SWEEP=1"
        exit 77
    } ;;
    *) fail "unknown argument $arg" ;;
    esac
done

i=0
ran=0
for model in "$TESSEL_SRC"/tests/models/*.hlo; do
    ! grep -q 'tessel_print\|tessel_save\|_xla_compute_type' "$model" || continue
    i=$((i + 1))
    [ $(((i - 1) % STEP)) = "$FIRST" ] || continue
    name=$(basename "$model" .hlo)
    # the largest device count the model lists; one device without a list
    n=$(sed -n 's|^// devices: *||p' "$model" | tr ',' '\n' | sort -n | tail -1)
    n=${n:-1}
    m=$(instantiate "$model" "$n")
    ref="$WORK/$name.ref"
    if ! "$TESSEL" run "$m" --reference --random-inputs 5 --output-dir "$ref" >"$OUT" 2>"$ERR"; then
        # a model the reference needs real inputs for (test_oracle.c feeds
        # it the same way and skips it too)
        echo "model_plans: $name: --reference refuses random inputs: $(head -1 "$ERR")"
        continue
    fi
    hosts=""
    cmp=() # REF DIR WHAT triples, compared after the model's runs
    for h in 1 2 4; do
        [ $((n % h)) = 0 ] || continue
        plan="$WORK/$name.h$h.plan"
        expect_status 0 "$TESSEL" compile "$m" --hosts "$h" -o "$plan"
        if [ "$h" = 1 ]; then
            expect_status 0 "$TESSEL" run "$plan" --random-inputs 5 --output-dir "$WORK/$name.alone"
            cmp+=("$ref" "$WORK/$name.alone" "$name N=$n from its plan")
        fi
        expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np "$h" "$TESSEL" run "$plan" \
            --random-inputs 5 --output-dir "$WORK/$name.mpi$h"
        cmp+=("$ref" "$WORK/$name.mpi$h" "$name N=$n from its plan under mpirun -np $h")
        hosts="$hosts $h"
    done
    # The round trip: the plan's text replayed as an SPMD program (--spmd),
    # each device given its shard of inputs cut by NumPy from the plan's
    # split trees, the devices' outputs joined by its concat trees, equals
    # the reference on the whole inputs (alone and under mpirun -np H).
    pj="$WORK/$name.json"
    mkdir -p "$WORK/$name.in"
    "$TESSEL" plan "$WORK/$name.h1.plan" --format json >"$pj"
    rc=0
    whole=$("$PY" "$RIO" inputs "$pj" "$WORK/$name.in" 11) || rc=$?
    if [ "$rc" = 3 ]; then
        echo "model_plans: $name: not replayed (tuple, complex or sub-byte inputs: replay_io.py draws arrays only)"
        "$PY" "$SAME" "${cmp[@]}" || fail "$name: differs from --reference"
        ran=$((ran + 1))
        continue
    fi
    [ "$rc" = 0 ] || fail "$name: replay_io.py inputs failed"
    # shellcheck disable=SC2086
    expect_status 0 "$TESSEL" run "$m" --reference $whole --output-dir "$WORK/$name.fref"
    r=$(sed -n 's/^HloModule [^,]*,.*replica_count=\([0-9]*\).*/\1/p' "$WORK/$name.h1.plan")
    cut=$("$PY" "$RIO" cut "$pj" "$WORK/$name.in" "$n" "${r:-1}")
    joins=()
    for h in $hosts; do
        launch=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np "$h")
        [ "$h" != 1 ] || launch=()
        # shellcheck disable=SC2086
        expect_status 0 "${launch[@]}" "$TESSEL" run "$WORK/$name.h$h.plan" --spmd $cut --output-dir "$WORK/$name.rep$h"
        joins+=("$WORK/$name.rep$h" "$WORK/$name.joined$h" "$n")
        cmp+=("$WORK/$name.fref" "$WORK/$name.joined$h" "$name N=$n replayed from its plan's text on $h hosts")
    done
    "$PY" "$RIO" join "$pj" "${joins[@]}"
    "$PY" "$SAME" "${cmp[@]}" || fail "$name: differs from --reference"
    ran=$((ran + 1))
    echo "model_plans: $name N=$n: its plan alone and under mpirun -np$hosts, and its text replayed, equal --reference"
done
[ "$ran" -gt 0 ] || fail "no model ran"
echo "model_plans: $ran models from their plans"
