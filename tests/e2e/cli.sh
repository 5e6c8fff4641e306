#!/usr/bin/env bash
# cli.sh: the command line itself: --help and --version, each command's
# help, usage errors (status 2 with a hint), errors in input files in the
# FILE:LINE:COL format with the line and a caret.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# --version matches the project version in CMakeLists.txt
want=$(sed -n 's/^project(tessel VERSION \([0-9.]*\).*/\1/p' "$TESSEL_SRC/CMakeLists.txt")
expect_status 0 "$TESSEL" --version
[ "$(cat "$OUT")" = "tessel $want" ] || fail "--version printed '$(cat "$OUT")', expected 'tessel $want'"

expect_status 0 "$TESSEL" --help
expect_in "$OUT" "Usage: tessel <command>"
expect_in "$OUT" "check"
expect_in "$OUT" "run"
expect_status 0 "$TESSEL" -h
expect_status 2 "$TESSEL"
expect_in "$ERR" "Usage: tessel <command>"

for cmd in check run; do
    expect_status 0 "$TESSEL" "$cmd" --help
    expect_in "$OUT" "Usage: tessel $cmd"
    expect_status 0 "$TESSEL" help "$cmd"
    expect_in "$OUT" "Usage: tessel $cmd"
done
expect_in "$OUT" "--random-inputs SEED"
expect_in "$OUT" "--output-dir DIR"

# usage errors: status 2, "tessel: error:" and a hint
expect_status 2 "$TESSEL" frobnicate
expect_in "$ERR" "tessel: error: unknown command 'frobnicate'"
expect_in "$ERR" "tessel --help"
expect_status 2 "$TESSEL" --frobnicate
expect_in "$ERR" "unknown option '--frobnicate'"
expect_status 2 "$TESSEL" check
expect_in "$ERR" "tessel: error: missing MODEL.hlo"
expect_in "$ERR" "Try 'tessel check --help'"
expect_status 2 "$TESSEL" check a.hlo b.hlo
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --bogus
expect_in "$ERR" "tessel: error: unknown option '--bogus' for 'tessel run'"
expect_status 2 "$TESSEL" check "$TESSEL_SRC/examples/softmax.hlo" --output-dir x
expect_in "$ERR" "option --output-dir does not apply to 'tessel check'"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs
expect_in "$ERR" "option --random-inputs needs a value"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs -3
expect_in "$ERR" "needs a seed"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --num-partitions 0
expect_in "$ERR" "--num-partitions needs a whole number >= 1"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --input x.npy
expect_in "$ERR" "--input needs INDEX_OR_NAME=FILE.npy"
# an empty path names no file: a usage error (it reached the file system
# as "" before: "tessel: : error: cannot create the output directory", status 1)
for opt in --output-dir --checkpoint-dir --resume --infeed; do
    expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs 1 "$opt" ''
    expect_in "$ERR" "$opt needs a path, not ''"
done
expect_status 2 "$TESSEL" compile "$TESSEL_SRC/examples/softmax.hlo" -o ''
expect_in "$ERR" "-o needs a path, not ''"
expect_status 2 "$TESSEL" run '' --random-inputs 1
expect_in "$ERR" "tessel: error: an empty argument where a file is expected"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --reference --reference
expect_in "$ERR" "given twice"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --stats=yes
expect_in "$ERR" "takes no value"

# a missing model file: status 2, the file named
expect_status 2 "$TESSEL" check "$WORK/nope.hlo"
expect_in "$ERR" "tessel: "
expect_in "$ERR" "nope.hlo"
expect_in "$ERR" "error:"

# a syntax error: FILE:LINE:COL: error:, then the line, then a caret under
# the column
bad="$WORK/bad.hlo"
printf 'HloModule bad\n\nENTRY %%main (x: f32[4]) -> f32[4] {\n  %%x = f32[4]{0} parameter(0)\n  ROOT %%y = f32[4]{0} frobnicate(%%x)\n}\n' >"$bad"
expect_status 2 "$TESSEL" check "$bad"
head -1 "$ERR" | grep -Eq "^tessel: $bad:5:[0-9]+: error: " || fail "first line is not 'tessel: FILE:LINE:COL: error:'"
sed -n 2p "$ERR" | grep -qF "ROOT %y = f32[4]{0} frobnicate(%x)" || fail "second line is not the source line"
sed -n 3p "$ERR" | grep -Eq '^ *\^$' || fail "third line is not a caret"
col=$(head -1 "$ERR" | sed -E "s|^tessel: $bad:5:([0-9]+): .*|\\1|")
caret=$(sed -n 3p "$ERR")
# the caret line is indented like the source line ("  "), caret at column col
[ "${#caret}" = "$((col + 2))" ] || fail "caret at ${#caret}, expected column $col + 2"

# a verifier error (shape mismatch) is status 2 with a position too
bad2="$WORK/bad2.hlo"
printf 'HloModule bad2\n\nENTRY %%main (x: f32[4]) -> f32[5] {\n  %%x = f32[4]{0} parameter(0)\n  ROOT %%y = f32[5]{0} negate(%%x)\n}\n' >"$bad2"
expect_status 2 "$TESSEL" check "$bad2"
head -1 "$ERR" | grep -Eq "^tessel: $bad2:5:[0-9]+: error: " || fail "verifier error lacks FILE:LINE:COL"

# run: mlp has num_partitions=2: partitioned on 2 in-process devices, the
# same as the reference; --num-partitions overrides the header
# (the contracting dimension is sharded: partial sums and an all-reduce
# change the order of the float additions, so the oracle's tolerance applies)
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --output-dir "$WORK/mlp_part"
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --reference --output-dir "$WORK/mlp_ref"
npy_match "$WORK/mlp_ref/output_0.npy" "$WORK/mlp_part/output_0.npy" || fail "partitioned mlp differs from the reference"
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs 1 --num-partitions 4
expect_in "$OUT" "output 0: f32[4,10]"
# more hosts than one process without mpirun
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --hosts 2
expect_in "$ERR" "without mpirun one process runs all"
# ... and N*R == 1 without --reference is the reference run
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs 1
expect_in "$OUT" "output 0: f32[4,10]"
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/softmax.hlo" --random-inputs 1 --stats
expect_in "$ERR" "load+compile"
expect_in "$ERR" "execute"
expect_status 0 "$TESSEL" check "$TESSEL_SRC/examples/softmax.hlo" --stats
expect_in "$ERR" "parse+verify"

# --limit: what a model may declare, checked at parse (status 2 with a
# position), for check, run, compile and plan alike
expect_status 2 "$TESSEL" check "$TESSEL_SRC/examples/mlp.hlo" --limit elements=100
expect_in "$ERR" "more than the limit of 100"
head -1 "$ERR" | grep -Eq "mlp.hlo:[0-9]+:[0-9]+: error: " || fail "limit error lacks FILE:LINE:COL"
expect_status 0 "$TESSEL" check "$TESSEL_SRC/examples/mlp.hlo" --limit elements=512 --limit rank=2
# one NAME twice: refused as any option given twice (the last silently won)
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --limit memory=1 --limit rank=2 --limit memory=1G
expect_in "$ERR" "--limit memory given twice (memory=1 and memory=1G)"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --limit rank=1
expect_in "$ERR" "rank exceeds the limit of 1"
expect_status 2 "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" --limit name=3 -o "$WORK/limit.plan"
expect_in "$ERR" "name longer than 3 bytes"
[ ! -e "$WORK/limit.plan" ] || fail "a refused compile left a plan"
expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --limit elements=0
expect_in "$ERR" "--limit elements needs a whole number"
expect_status 2 "$TESSEL" check "$TESSEL_SRC/examples/mlp.hlo" --limit size=1
expect_in "$ERR" "--limit takes NAME=VALUE"
expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --limit memroy=8G
expect_in "$ERR" "not 'memroy=8G'; did you mean memory?"

# custom-call targets only from the registry: check accepts the syntax (as
# XLA's parser does), run/compile refuse an unknown target before anything
# runs, with its position
cc="$WORK/cc.hlo"
printf 'HloModule cc\nENTRY main {\n  p = f32[4] parameter(0)\n  ROOT c = f32[4] custom-call(p), custom_call_target="evil"\n}\n' >"$cc"
expect_status 0 "$TESSEL" check "$cc"
for args in "run $cc --random-inputs 1" "run $cc --random-inputs 1 --reference" "compile $cc -o $WORK/cc.plan"; do
    # shellcheck disable=SC2086
    expect_status 2 "$TESSEL" $args
    expect_in "$ERR" 'cc.hlo:4:8: error: c: custom-call target "evil" is not registered'
done
[ ! -e "$WORK/cc.plan" ] || fail "a refused compile left a plan"
# a slip of a target tessel knows is named
sed 's/"evil"/"Shardng"/' "$cc" >"$WORK/cc2.hlo"
expect_status 2 "$TESSEL" compile "$WORK/cc2.hlo" -o "$WORK/cc2.plan"
expect_in "$ERR" 'cc2.hlo:4:8: error: c: custom-call target "Shardng" is not registered'
expect_in "$ERR" '; did you mean "Sharding"?'
# a plan's shardings are chosen: --auto-shard and --mesh with one are refused
# (they were ignored without a word)
expect_status 0 "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" -o "$WORK/as.plan"
expect_status 2 "$TESSEL" run "$WORK/as.plan" --random-inputs 1 --auto-shard
expect_in "$ERR" "as.plan: error: --auto-shard chooses the shardings when a model is compiled, and this plan is compiled: give the model, or leave --auto-shard out"
expect_status 2 "$TESSEL" plan "$WORK/as.plan" --mesh 2x2
expect_in "$ERR" "--mesh chooses the shardings when a model is compiled"
# devices takes text or json only (it was told "text, json, dot or html")
expect_status 2 "$TESSEL" devices --format xml
expect_in "$ERR" "--format is text or json for 'tessel devices', not 'xml'"
# names a slip away in --show and --expand
expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --show w11
expect_in "$ERR" "--show w11: no such instruction, input or output (names: an instruction, an entry parameter, 'input K', 'output K', or 'all'); did you mean w1?"
expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --expand mian --format dot
expect_in "$ERR" "--expand mian: no computation or instruction of that name; did you mean main?"
# help's command, the top-level options and a command's --help: a slip names it
expect_status 2 "$TESSEL" help rn
expect_in "$ERR" "unknown command 'rn'; did you mean run?"
expect_status 2 "$TESSEL" --hepl
expect_in "$ERR" "unknown option '--hepl'; did you mean --help?"
expect_status 2 "$TESSEL" run --hlep
expect_in "$ERR" "unknown option '--hlep' for 'tessel run'; did you mean --help?"
# the words an option takes: a slip names the word
expect_status 2 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --format jsn
expect_in "$ERR" "--format is text, json, dot or html, not 'jsn'; did you mean json?"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --stats=op
expect_in "$ERR" "not 'op'; did you mean ops?"
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --donate auot
expect_in "$ERR" "--donate takes auto or declared, not 'auot'; did you mean auto?"
expect_status 2 "$TESSEL" grad "$TESSEL_SRC/examples/mlp_loss.hlo" --wrt w1 --sgd 0.1 --remat dot -o "$WORK/remat.hlo"
expect_in "$ERR" "--remat takes dots, nothing or names=A,B (the values the backward keeps), not 'dot'; did you mean dots?"
# JAX's Python callbacks: one without results (jax.debug.print; an ordered
# one threads a token) runs as a no-op, said once by the compile; one with
# results (jax.pure_callback) is refused before anything runs
cb="$WORK/cb.hlo"
printf 'HloModule cb\nENTRY main {\n  p = f32[4] parameter(0)\n  t = token[] after-all()\n  d = () custom-call(p), custom_call_target="xla_ffi_python_cpu_callback", custom_call_has_side_effect=true\n  o = token[] custom-call(t, p), custom_call_target="xla_ffi_python_cpu_callback", custom_call_has_side_effect=true\n  ROOT r = f32[4] negate(p)\n}\n' >"$cb"
expect_status 0 "$TESSEL" run "$cb" --random-inputs 1 --num-partitions 2 --output-dir "$WORK/cbo"
expect_in "$ERR" "warning: module cb: 2 JAX Python callbacks without results (jax.debug.print, jax.debug.callback; the first d) skipped"
expect_status 0 "$TESSEL" run "$cb" --random-inputs 1 --reference --output-dir "$WORK/cbr"
sed 's|d = () custom-call(p)|d = f32[4] custom-call(p)|' "$cb" >"$WORK/cb2.hlo"
for args in "run $WORK/cb2.hlo --random-inputs 1" "run $WORK/cb2.hlo --random-inputs 1 --reference" "compile $WORK/cb2.hlo -o $WORK/cb2.plan"; do
    # shellcheck disable=SC2086
    expect_status 2 "$TESSEL" $args
    expect_in "$ERR" 'cb2.hlo:5:3: error: d: custom-call target "xla_ffi_python_cpu_callback" is a JAX Python callback with results'
done
# ... and in a plan file (a plan is never trusted): the same refusal
expect_status 0 "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" -o "$WORK/good.plan"
sed 's|tanh(hidden)|custom-call(hidden), custom_call_target="evil"|' "$WORK/good.plan" >"$WORK/evil.plan"
grep -q 'custom_call_target="evil"' "$WORK/evil.plan" || fail "the plan has no tanh(hidden) to replace"
expect_status 2 "$TESSEL" run "$WORK/evil.plan" --random-inputs 1
expect_in "$ERR" "evil.plan:$(wc -l <"$WORK/evil.plan"):24: error: the plan file's digest does not match"
plan_resign "$WORK/evil.plan" # behind a right digest: checked all the same
expect_status 2 "$TESSEL" run "$WORK/evil.plan" --random-inputs 1
expect_in "$ERR" 'evil.plan:15:3: error: act: custom-call target "evil" is not registered'
# a collective naming a device the plan lacks (behind a right digest):
# refused when the plan is loaded, by `plan` as by `run` (plan printed it,
# exit 0; run failed on each device as it ran)
sed 's/replica_groups={{0,1}}/replica_groups={{0,5}}/' "$WORK/good.plan" >"$WORK/groups.plan"
grep -q 'replica_groups={{0,5}}' "$WORK/groups.plan" || fail "the plan has no replica_groups={{0,1}} to edit"
plan_resign "$WORK/groups.plan"
for cmd in plan run; do
    expect_status 2 "$TESSEL" $cmd "$WORK/groups.plan"
    expect_in "$ERR" "error: all-reduce: replica_groups names 5, but there are 2 devices"
done

# fusion changes no bit: the partitioned run unfused (TESSEL_FUSION=off)
# prints the same as fused with the defaults, with every array fused
# (=all) and in blocks of 3 (mlp: dot, tanh, dot; softmax: elementwise
# chains around reductions). (--reference may differ in the last digits:
# the partitioned sums are added in another order.)
for model in mlp softmax; do
    expect_status 0 env TESSEL_FUSION=off "$TESSEL" run "$TESSEL_SRC/examples/$model.hlo" --random-inputs 5 \
        --output-dir "$WORK/fuse.$model.off"
    for env in TESSEL_FUSION=all TESSEL_FUSION_BLOCK=3 TESSEL_UNSET=1; do
        expect_status 0 env "$env" "$TESSEL" run "$TESSEL_SRC/examples/$model.hlo" --random-inputs 5 \
            --output-dir "$WORK/fuse.$model.$env"
        cmp -s "$WORK/fuse.$model.off/output_0.npy" "$WORK/fuse.$model.$env/output_0.npy" ||
            fail "$model with $env differs from unfused"
    done
done

# --stats with --steps: the first step and the median of the others
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --steps 3 --stats
grep -Eq "^tessel: stats: steps: first [0-9.]+ ms, then median [0-9.]+ ms a step \(of the 2 after it\)$" "$ERR" ||
    fail "no per-step line: $(cat "$ERR")"
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --stats
! grep -q "stats: steps:" "$ERR" || fail "a per-step line for one step"

# The f32 dots' library: --sgemm probe times the libraries present before
# a run whose program has a dot of 256^3 multiply-adds or more on a device
# (else at the first such dot) and --stats says what it chose
# and measured (ctest fixes TESSEL_SGEMM=openblas, which the option
# overrides); smaller dots stay in OpenBLAS without a probe; a fixed
# library says "(tuning)" and gives OpenBLAS's result within the dot's
# rounding (npy_match); unknown names are usage errors.
cat >"$WORK/dot256.hlo" <<'HLO'
HloModule dot256
ENTRY main {
  a = f32[256,256] parameter(0)
  b = f32[256,256] parameter(1)
  ROOT d = f32[256,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
HLO
# The probe measures at the devices' BLAS thread count: one a device where
# devices share the cores (2 devices on 2 PUs or fewer), several where one
# device spans several cores (one thread on a machine of one).
sed 's/256/512/g' "$WORK/dot256.hlo" >"$WORK/dot512.hlo"
# (at several threads, products from 64^3 go to the library chosen when it is not OpenBLAS: its pool would wake;
# at one thread, those from 32^3 to the faster of OpenBLAS and tessel's kernel, blas_small.c; and where two
# libraries were timed, each large product shape's library and its rates follow)
verdict_rates="openblas [0-9.]+ GFLOP/s, blis ([0-9.]+ GFLOP/s|skipped \(.*\)), onednn ([0-9.]+ GFLOP/s|skipped \(.*\)), avx512 ([0-9.]+ GFLOP/s|skipped \(.*\)); under 256\^3 multiply-adds: (openblas|openblas below 32\^3, from there the faster of openblas and avx512 \(blas_small\.c\)|(blis|onednn|avx512) from 64\^3 \(OpenBLAS's pool would wake\), openblas below)(; per product shape \(M x K x N: GFLOP/s in thread CPU time\): [0-9]+x[0-9]+x[0-9]+( A\^T)?( B\^T)? (openblas|blis|onednn|avx512) \(.*\))?"
cores=$(nproc)
for parts in 2 1; do
    expect_status 0 "$TESSEL" run "$WORK/dot512.hlo" --random-inputs 1 --stats --sgemm probe --num-partitions $parts
    if [ "$cores" -le "$parts" ]; then
        measured="f32 384\^3, one thread"
    elif [ "$parts" = 1 ]; then
        measured="f32 [0-9]+\^3, [0-9]+ threads"
    else # more cores than 2 devices: one thread each or more (SMT: threads are not cores)
        measured="f32 [0-9]+\^3, ([0-9]+ threads|one thread)"
    fi
    grep -Eq "^tessel: stats: f32 GEMM: (openblas|blis|onednn|avx512), measured \($measured\): $verdict_rates$" "$ERR" ||
        fail "no probe verdict on $parts device(s) of $cores cores: $(cat "$ERR")"
done
expect_status 0 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --stats --sgemm probe
expect_in "$ERR" "tessel: stats: f32 GEMM: openblas: no f32 GEMM of 256^3 multiply-adds or more"
expect_status 0 env TESSEL_SGEMM=openblas "$TESSEL" run "$WORK/dot256.hlo" --random-inputs 5 --stats \
    --output-dir "$WORK/sgemm.openblas"
expect_in "$ERR" "tessel: stats: f32 GEMM: openblas (tuning)"
for lib in blis:libblis.so.4 onednn:libdnnl.so.2; do
    if [ "$(ldconfig -p 2>/dev/null | grep -cF "${lib#*:}")" = 0 ]; then # -c: grep reads all (pipefail)
        echo "cli.sh: --sgemm ${lib%%:*} skipped: no ${lib#*:} (scripts/setup.sh installs it)"
        continue
    fi
    expect_status 0 "$TESSEL" run "$WORK/dot256.hlo" --random-inputs 5 --stats --sgemm "${lib%%:*}" \
        --output-dir "$WORK/sgemm.${lib%%:*}"
    expect_in "$ERR" "tessel: stats: f32 GEMM: ${lib%%:*} (tuning)"
    npy_match "$WORK/sgemm.openblas/output_0.npy" "$WORK/sgemm.${lib%%:*}/output_0.npy" ||
        fail "--sgemm ${lib%%:*} differs from OpenBLAS beyond rounding"
done
# tessel's own AVX-512 kernel: f32's products, summed in its order
if grep -qw avx512f /proc/cpuinfo; then
    expect_status 0 "$TESSEL" run "$WORK/dot256.hlo" --random-inputs 5 --stats --sgemm avx512 \
        --output-dir "$WORK/sgemm.avx512"
    expect_in "$ERR" "tessel: stats: f32 GEMM: avx512 (tuning)"
    npy_match "$WORK/sgemm.openblas/output_0.npy" "$WORK/sgemm.avx512/output_0.npy" ||
        fail "--sgemm avx512 differs from OpenBLAS beyond rounding"
else
    echo "cli.sh: --sgemm avx512 skipped: the CPU has no AVX-512F"
fi
# three bf16 products on AMX tiles: within rounding of OpenBLAS's product
if grep -qw amx_bf16 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo; then
    expect_status 0 "$TESSEL" run "$WORK/dot256.hlo" --random-inputs 5 --stats --sgemm amx-bf16x3 \
        --output-dir "$WORK/sgemm.amx"
    expect_in "$ERR" "tessel: stats: f32 GEMM: amx-bf16x3 (tuning"
    npy_match "$WORK/sgemm.openblas/output_0.npy" "$WORK/sgemm.amx/output_0.npy" ||
        fail "--sgemm amx-bf16x3 differs from OpenBLAS beyond rounding"
else
    echo "cli.sh: --sgemm amx-bf16x3 skipped: the CPU has no AMX bf16 tiles"
fi
expect_status 2 "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1 --sgemm mkl
expect_in "$ERR" "--sgemm is openblas, blis, onednn, avx512, amx-bf16x3 or probe, not 'mkl'"
expect_status 2 env TESSEL_SGEMM=mkl "$TESSEL" run "$TESSEL_SRC/examples/mlp.hlo" --random-inputs 1
expect_in "$ERR" "TESSEL_SGEMM=mkl: expected openblas, blis, onednn, avx512, amx-bf16x3 or probe"

# -o onto something that is not a regular file (a pipe here; /dev/null as
# root) writes into it: renaming a temporary over it would replace it
mkfifo "$WORK/pipe"
expect_through_fifo "$WORK/pipe" "$WORK/piped.plan" "$TESSEL" compile "$TESSEL_SRC/examples/mlp.hlo" -o "$WORK/pipe"
[ -p "$WORK/pipe" ] || fail "compile -o replaced the pipe with a file"
grep -q "TesselPlan" "$WORK/piped.plan" || fail "the plan did not go through the pipe"
echo "cli: ok"
