#!/usr/bin/env bash
# memory_plan.sh: the plan's per-device memory estimate (partition/memory.c)
# is what the run holds. For every model of tests/models that runs in one
# process (no host work, random inputs accepted) on 1, 2 and 4 devices
# where its `// devices:` line lists them (else its one count), `tessel
# run --stats` prints the plan's estimate beside each device's measured
# peak (the most bytes of values the device held at once, counted in its
# allocator); every device's measured peak is within 10% of the estimate,
# and never over it (the models of tests/models themselves), and every
# rank's under mpirun for a few models (at the end)
# (in one process a device counts what it holds as under mpirun: a value
# the devices share, a collective's result or a replicated argument, is
# counted by each holder, device/value.c dev_value_share).
# Also the models of tests/models' subfolders on their one count (memory/:
# held-out JAX programs), and the benchmark's training step. Not a timing: byte counts.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# each_within FILE: every device's measured peak of the --stats memory
# line within 10% of the plan's estimate (and a line there at all)
each_within() {
    grep -m1 'memory per device' "$1" | sed 's/.*plan estimate \([0-9]*\) bytes; measured peak/\1/' |
        grep -o '^[0-9]*\|device [0-9]* [0-9]*' | awk '
            NR == 1 { est = $1; next }
            { n++; r = $3 / est; if (r < 0.9 || r > 1.1) bad++ }
            END { exit !(est > 0 && n > 0 && !bad) }'
}

# never_under FILE: no device's measured peak over the plan's estimate
# (--limit memory holds a run to the estimate: under it, a run admitted
# could hold more than the limit). fusion_async_sharded measured 4 bytes
# over on 2, 3 and 4 devices: the estimate took the executor's post-order,
# where a run with collectives issues each -start early and each -done
# late (ir/schedule_overlap.c), so abs-start's s32[] context lived across
# the topk's gather.
never_under() {
    grep -m1 'memory per device' "$1" | sed 's/.*plan estimate \([0-9]*\) bytes; measured peak/\1/' |
        grep -o '^[0-9]*\|device [0-9]* [0-9]*' | awk '
            NR == 1 { est = $1; next }
            { n++; if ($3 > est) bad++ }
            END { exit !(est > 0 && n > 0 && !bad) }'
}

# Models where the two still differ by more than 10%, and why (each is a
# gap in the model of partition/memory.c, listed so that it is not hidden;
# the run prints both figures): none. (fused_rows was, 0.77/0.78 of the
# estimate on 1/2 devices, until the estimate took fusion's groups from
# the executor's own finder, ir/fusion_find.c: row groups never make their
# interior values.)
KNOWN=" "

checked=0
for model in "$TESSEL_SRC"/tests/models/*.hlo; do
    ! grep -q 'tessel_print\|tessel_save\|_xla_compute_type' "$model" || continue
    name=$(basename "$model" .hlo)
    case "$KNOWN" in *" $name "*) echo "memory_plan: $name: a known gap, not checked (see the list above)"; continue ;; esac
    counts=$(sed -n 's|^// devices: *||p' "$model" | tr ',' ' ')
    counts=${counts:-1}
    for n in $counts; do
        case " 1 2 4 " in *" $n "*) ;; *) [ "$counts" = "$n" ] || continue ;; esac
        m=$(instantiate "$model" "$n")
        rc=0
        "$TESSEL" run "$m" --random-inputs 3 --stats --output-dir "$WORK/$name.$n" >"$OUT" 2>"$ERR" || rc=$?
        if [ "$rc" != 0 ]; then
            # refused as input (status 2: real inputs needed, a sharding
            # written for more devices); other failures are failures
            [ "$rc" = 2 ] || fail "$name N=$n: run failed: $(head -3 "$ERR")"
            echo "memory_plan: $name N=$n: refused ($(head -1 "$ERR" | cut -c1-100)), skipped"
            continue
        fi
        line=$(grep "memory per device" "$ERR" || true)
        [ -n "$line" ] || fail "$name N=$n: no memory line in --stats: $(cat "$ERR")"
        each_within "$ERR" || fail "$name N=$n: a device's measured peak and the estimate differ by more than 10%: $line"
        never_under "$ERR" || fail "$name N=$n: a device's measured peak is over the estimate: $line"
        checked=$((checked + 1))
    done
done
[ "$checked" -ge 40 ] || fail "only $checked model runs checked"

# The subfolders' models (grad, memfit, shardy, fed, and memory: JAX's
# lowerings of softmax, layer norm, GELU and Adam held out from the
# estimate's tuning, uneven splits on 1, 2 and 4 devices) are written for
# one partition count (their `// devices:` line, else 1) and name it
# themselves: run on that count; those that need a host or more devices
# are refused (status 2) and skipped as above.
sub=0
for model in "$TESSEL_SRC"/tests/models/{grad,memfit,shardy,fed,memory}/*.hlo; do
    ! grep -q 'tessel_print\|tessel_save\|_xla_compute_type' "$model" || continue
    name=$(basename "$(dirname "$model")")/$(basename "$model" .hlo)
    n=$(sed -n 's|^// devices: *\([0-9]*\).*|\1|p' "$model" | head -1)
    rc=0
    "$TESSEL" run "$model" --num-partitions "${n:-1}" --random-inputs 3 --stats \
        --output-dir "$WORK/sub.$sub" >"$OUT" 2>"$ERR" || rc=$?
    sub=$((sub + 1))
    if [ "$rc" != 0 ]; then
        [ "$rc" = 2 ] || fail "$name: run failed: $(head -3 "$ERR")"
        echo "memory_plan: $name: refused ($(head -1 "$ERR" | cut -c1-100)), skipped"
        continue
    fi
    line=$(grep "memory per device" "$ERR" || true)
    [ -n "$line" ] || fail "$name: no memory line in --stats: $(cat "$ERR")"
    each_within "$ERR" || fail "$name: a device's measured peak and the estimate differ by more than 10%: $line"
    checked=$((checked + 1))
done

# The benchmark's training step (bench/driver.py's `train`, its --quick
# size): gen.py's MLP with its loss, `tessel grad --sgd`, on 2 devices.
"$PY" "$TESSEL_SRC/bench/gen.py" train 128 512 512 "$WORK/train.hlo"
expect_status 0 "$TESSEL" grad "$WORK/train.hlo" --wrt w1,w2 --sgd 1e-6 -o "$WORK/step.hlo"
expect_status 0 "$TESSEL" run "$WORK/step.hlo" --random-inputs 1 --stats --output-dir "$WORK/step"
each_within "$ERR" ||
    fail "the training step: measured peak and estimate differ by more than 10%: $(grep "memory per" "$ERR")"
checked=$((checked + 1))

# A parameter nothing reads is still handed over and held to the end: the
# estimate counts it (it left it out, 1024 bytes under the run). On 1 and
# 2 devices (tiled: 512 a device), never under, and within 10%.
cat >"$WORK/unread.hlo" <<'EOF'
HloModule unread
ENTRY e {
  x = f32[64] parameter(0), sharding={devices=[2]0,1}
  w = f32[256] parameter(1), sharding={devices=[2]0,1}
  ROOT y = f32[64] exponential(x), sharding={devices=[2]0,1}
}
EOF
sed 's/, sharding={devices=\[2\]0,1}//' "$WORK/unread.hlo" >"$WORK/unread1.hlo"
for n in 1 2; do
    m="$WORK/unread.hlo"
    [ "$n" = 2 ] || m="$WORK/unread1.hlo"
    expect_status 0 "$TESSEL" run "$m" --num-partitions "$n" --random-inputs 1 --stats --output-dir "$WORK/unread.$n"
    est=$(sed -n 's/.*memory per device: plan estimate \([0-9]*\) bytes.*/\1/p' "$ERR" | head -1)
    [ "${est:-0}" -ge $((1024 / n + 2 * 256 / n)) ] || fail "unread parameter on $n: estimate $est leaves w out"
    never_under "$ERR" || fail "unread parameter on $n: a device measured over the estimate: $(grep 'memory per' "$ERR")"
    each_within "$ERR" || fail "unread parameter on $n: estimate and measured differ by more than 10%: $(grep 'memory per' "$ERR")"
    checked=$((checked + 1))
done

# Under mpirun (one device a rank): every rank's measured peak within 10%
# of the estimate, its smallest and its largest (rank 0's --stats line
# over every rank), on models whose devices hold different things: a
# replicated input beside sharded weights (mlp_megatron), a shard_map's
# psum over a mesh axis (shard_map_partial), a call that takes its
# operand over (call_moved); and the training step on 2.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
ranks_within() { # ranks_within FILE: the smallest and largest rank over the estimate, within 10%
    local est
    est=$(sed -n 's/.*memory per device: plan estimate \([0-9]*\) bytes.*/\1/p' "$1" | head -1)
    sed -n 's/.*memory per rank: measured peak largest \([0-9]*\) bytes.*smallest \([0-9]*\) over.*/\1 \2/p' "$1" |
        awk -v est="${est:-0}" '{ n++; if ($1 / est > 1.1 || $2 / est < 0.9) bad++ } END { exit !(est > 0 && n == 1 && !bad) }'
}
for spec in mlp_megatron:4 call_moved:4 shardy/shard_map_partial:4 step:2; do
    name=${spec%:*} n=${spec#*:}
    case $name in
    step) m="$WORK/step.hlo" ;;
    shardy/*) m="$TESSEL_SRC/tests/models/$name.hlo" ;;
    *) m=$(instantiate "$TESSEL_SRC/tests/models/$name.hlo" "$n") ;;
    esac
    env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self -np "$n" \
        "$TESSEL" run "$m" --num-partitions "$n" --random-inputs 3 --stats --output-dir "$WORK/mpi.$n" >"$OUT" 2>"$ERR" ||
        fail "mpirun -np $n $name: $(head -3 "$ERR")"
    ranks_within "$ERR" || fail "mpirun -np $n $name: a rank's measured peak and the estimate differ by more than 10%: $(grep 'memory per' "$ERR")"
    checked=$((checked + 1))
done
echo "memory_plan: $checked model runs: the measured peak per device within 10% of the plan's estimate"
