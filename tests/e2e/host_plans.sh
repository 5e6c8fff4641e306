#!/usr/bin/env bash
# host_plans.sh: plan files of every module, host work included
# (docs/plan.md). For each model of tests/models with host work and each
# example: compile a plan for H hosts, run it alone and under mpirun -np H
# (H = 1, 2, 4 where the N x R devices split), every output equal to
# --reference (npy_match) and its prints too; --steps 3 on the host-work
# ones, and on a host program with input_output_alias (alone, from its plan,
# under mpirun -np 2) equal to --reference --steps 3. `tessel plan PLAN`
# shows what `tessel plan MODEL` does (text, JSON, DOT). A truncated or
# byte-flipped host-work plan is refused naming FILE:LINE with status 2;
# random byte flips never crash.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # Open MPI's own allocations (see mpi.sh)
mpi() { # mpi RANKS ARGS...: tessel under mpirun
    local np=$1
    shift
    env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe -np "$np" "$TESSEL" "$@"
}

# One model for N devices: a plan per host count, runs, steps.
check_model() { # check_model MODEL N HOSTWORK
    local m=$1 n=$2 host=$3 tag h steps ranks=""
    tag="$(basename "$m" .hlo) N=$n"
    for steps in 1 3; do
        [ "$steps" = 1 ] || [ "$host" = 1 ] || continue
        expect_status 0 "$TESSEL" run "$m" --reference --random-inputs 5 --steps "$steps" --output-dir "$WORK/ref"
        cp "$OUT" "$WORK/ref.txt"
        for h in 1 2 4; do
            [ $((n % h)) = 0 ] || continue
            [ "$steps" != 1 ] || ranks="$ranks $h"
            expect_status 0 "$TESSEL" compile "$m" --hosts "$h" -o "$WORK/p.plan"
            if [ "$h" = 1 ]; then
                rm -rf "$WORK/alone"
                expect_status 0 "$TESSEL" run "$WORK/p.plan" --random-inputs 5 --steps "$steps" --output-dir "$WORK/alone"
                cmp -s "$OUT" "$WORK/ref.txt" || fail "$tag steps=$steps: the plan's prints differ: $(cat "$OUT")"
                same_outputs "$WORK/ref" "$WORK/alone" "$tag steps=$steps plan alone"
            fi
            rm -rf "$WORK/mpi"
            expect_status 0 mpi "$h" run "$WORK/p.plan" --random-inputs 5 --steps "$steps" --output-dir "$WORK/mpi"
            cmp -s "$OUT" "$WORK/ref.txt" || fail "$tag steps=$steps -np $h: the plan's prints differ: $(cat "$OUT")"
            same_outputs "$WORK/ref" "$WORK/mpi" "$tag steps=$steps plan under mpirun -np $h"
        done
        rm -rf "$WORK/ref"
    done
    echo "host_plans: $tag: plans alone and under mpirun -np$ranks equal --reference$([ "$host" = 1 ] && echo ", also with --steps 3")"
}

ndev_of() { # the device counts a tests/models file lists, or the header's N
    local l
    l=$(sed -n 's|^// devices: ||p' "$1")
    if [ -n "$l" ]; then echo "${l//,/ }"; else sed -n 's/^HloModule .*num_partitions=\([0-9]*\).*/\1/p' "$1" | head -1; fi
}

nmodels=0
for f in $(grep -l 'tessel_print\|tessel_save\|_xla_compute_type' "$TESSEL_SRC"/tests/models/*.hlo); do
    for n in $(ndev_of "$f"); do
        check_model "$(instantiate "$f" "$n")" "$n" 1
        nmodels=$((nmodels + 1))
    done
done
[ "$nmodels" -gt 0 ] || fail "no model with host work found in tests/models"
for f in "$TESSEL_SRC"/examples/*.hlo; do
    n=$(ndev_of "$f")
    check_model "$f" "${n:-1}" 0
done

# ---- --steps with input_output_alias in a host program ----
cat >"$WORK/host_steps.hlo" <<'EOF'
HloModule host_steps, input_output_alias={ {0}: (0, {}, may-alias) }, num_partitions=2

ENTRY main {
  w = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  x = f32[8,4] parameter(1), sharding={replicated}
  a = f32[8,4] multiply(w, x)
  shown = f32[8,4] custom-call(a), custom_call_target="tessel_print"
  c = f32[] constant(0.5)
  cb = f32[8,4] broadcast(c), dimensions={}
  b = f32[8,4] multiply(shown, cb)
  w1 = f32[8,4] add(b, w)
  ROOT r = (f32[8,4], f32[8,4]) tuple(w1, a)
}
EOF
m="$WORK/host_steps.hlo"
expect_status 0 "$TESSEL" run "$m" --reference --random-inputs 2 --steps 3 --output-dir "$WORK/sr"
cp "$OUT" "$WORK/sref.txt"
[ "$(grep -c '^shown:' "$OUT")" = 3 ] || fail "the reference did not run 3 steps"
expect_status 0 "$TESSEL" run "$m" --reference --random-inputs 2 --output-dir "$WORK/s1"
! npy_match "$WORK/s1/output_0.npy" "$WORK/sr/output_0.npy" 2>/dev/null || fail "steps did not feed the alias"
expect_status 0 "$TESSEL" run "$m" --random-inputs 2 --steps 3 --output-dir "$WORK/sp"
cmp -s "$OUT" "$WORK/sref.txt" || fail "host_steps --steps 3 prints: $(cat "$OUT")"
same_outputs "$WORK/sr" "$WORK/sp" "host_steps --steps 3"
expect_status 0 "$TESSEL" compile "$m" -o "$WORK/steps1.plan"
expect_status 0 "$TESSEL" run "$WORK/steps1.plan" --random-inputs 2 --steps 3 --output-dir "$WORK/spl"
same_outputs "$WORK/sr" "$WORK/spl" "host_steps --steps 3 from its plan"
expect_status 0 "$TESSEL" compile "$m" --hosts 2 -o "$WORK/steps2.plan"
expect_status 0 mpi 2 run "$WORK/steps2.plan" --random-inputs 2 --steps 3 --output-dir "$WORK/spm"
cmp -s "$OUT" "$WORK/sref.txt" || fail "host_steps --steps 3 under mpirun prints: $(cat "$OUT")"
same_outputs "$WORK/sr" "$WORK/spm" "host_steps --steps 3 from its plan under mpirun -np 2"
expect_status 0 mpi 2 run "$m" --random-inputs 2 --steps 3 --output-dir "$WORK/spm2"
same_outputs "$WORK/sr" "$WORK/spm2" "host_steps --steps 3 under mpirun -np 2"
echo "host_plans: host_steps: --steps 3 with an alias equals --reference alone, from its plan, under mpirun -np 2"

# ---- tessel plan PLAN shows what tessel plan MODEL does ----
for spec in host_ops_chain:2 host_attr_while:3; do
    name=${spec%:*}
    n=${spec#*:}
    m=$(instantiate "$TESSEL_SRC/tests/models/$name.hlo" "$n")
    expect_status 0 "$TESSEL" compile "$m" -o "$WORK/$name.plan"
    for fmt in text json dot; do
        expect_status 0 "$TESSEL" plan "$m" --format "$fmt"
        cp "$OUT" "$WORK/model.$fmt"
        expect_status 0 "$TESSEL" plan "$WORK/$name.plan" --format "$fmt"
        diff "$WORK/model.$fmt" "$OUT" >"$WORK/diff" || fail "$name: tessel plan --format $fmt of the plan differs: $(cat "$WORK/diff")"
    done
done
# Without host work the plan keeps the partitioner's report (not the
# logical module): its dump still lists the collective it inserted.
expect_status 0 "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" -o "$WORK/mlp.plan"
expect_status 0 "$TESSEL" plan "$WORK/mlp.plan"
grep -Eq "all-reduce +all-reduce +groups \{\{0,1\}\}, 256 bytes per device" "$OUT" || fail "mlp.plan: the dump lost the all-reduce"
echo "host_plans: tessel plan PLAN = tessel plan MODEL (text, json, dot) for host_ops_chain, host_attr_while; mlp.plan keeps its all-reduce"

# ---- altered host-work plans: FILE:LINE, status 2 ----
P="$WORK/host_ops_chain.plan"
total=$(wc -l <"$P")
refused() { # refused FILE LINE WHAT: tessel run FILE exits 2 naming FILE:LINE
    expect_status 2 "$TESSEL" run "$1" --random-inputs 1
    grep -q "$1:$2:" "$ERR" || fail "$3: no $1:$2: in the error"
}
head -n $((total - 2)) "$P" >"$WORK/cut.plan"                      # inside the last cluster's lines
refused "$WORK/cut.plan" $((total - 2)) "a plan cut in its last cluster"
second=$(grep -n '^HloModule ' "$P" | sed -n 3p | cut -d: -f1)      # before cluster 1's module
head -n $((second - 1)) "$P" >"$WORK/cut2.plan"
refused "$WORK/cut2.plan" $((second - 1)) "a plan cut before a cluster"
hostend=$(grep -n '^// TesselHostEnd' "$P" | cut -d: -f1)          # in the host lines
head -n $((hostend - 1)) "$P" >"$WORK/cut3.plan"
refused "$WORK/cut3.plan" $((hostend - 1)) "a plan cut in the host lines"
flip() { # flip LINE FROM TO: $P with the first FROM of LINE replaced by TO
    sed "$1s/$2/$3/" "$P" >"$WORK/flip.plan"
    cmp -s "$P" "$WORK/flip.plan" && fail "flip $1 $2 $3 changed nothing"
    plan_resign "$WORK/flip.plan" # the checks behind the digest
    return 0
}
l=$(grep -n '^// TesselClusterIn 1 w ' "$P" | cut -d: -f1)
flip "$l" ' w 1 ' ' w 9 '
refused "$WORK/flip.plan" "$l" "an operand out of range"
l=$(grep -n '^// XlaInputShape f32\[6,4\]' "$P" | cut -d: -f1)
flip "$l" '6,4' '7,4'
refused "$WORK/flip.plan" "$l" "a cluster input of another shape"
l=$(grep -n '_tessel_cluster="1"' "$P" | head -1 | cut -d: -f1)
flip "$l" '_tessel_cluster="1"' '_tessel_cluster="7"'
refused "$WORK/flip.plan" "$l" "a call of no cluster"
l=$(grep -n '^// TesselHost ' "$P" | cut -d: -f1)
flip "$l" 'clusters=2' 'clusters=3'
refused "$WORK/flip.plan" "$hostend" "one cluster too many in the TesselHost line"
# Any byte flipped: refused (2) or still a plan (0), never a crash.
size=$(stat -c %s "$P")
for k in $(seq 1 40); do
    off=$(( (k * 7919) % size ))
    "$PY" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[int(sys.argv[2])] ^= 0x5a; open(sys.argv[3], "wb").write(b)' "$P" "$off" "$WORK/rand.plan"
    got=0
    "$TESSEL" plan "$WORK/rand.plan" >/dev/null 2>&1 || got=$?
    [ "$got" = 0 ] || [ "$got" = 2 ] || fail "tessel plan of a plan with byte $off flipped exited $got"
done
echo "host_plans: truncated and altered host-work plans refused with FILE:LINE and status 2"
