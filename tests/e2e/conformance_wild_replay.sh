#!/usr/bin/env bash
# conformance_wild_replay.sh: every module of ../shared/conformance/xla_wild
# that is an SPMD program (it holds an all-reduce, all-gather,
# reduce-scatter, all-to-all, ragged-all-to-all, collective-permute,
# collective-broadcast or send/recv between devices, and no manual region: those go through the
# partitioner, conformance_wild_run.sh) replays with `tessel run --spmd` on
# its devices (the header's, else the fewest its collectives name), in one
# process and under `mpirun -np 2 --mca btl tcp,self` where its devices
# split in two, and the two runs give the same output_<i>.device_<d>.npy
# (integers bit-equal, floats within the oracle's tolerance: across hosts
# an all-reduce adds in another order). A module that does not replay is listed with
# the error it stops at and why; a listed module that starts to replay
# fails the test, so the list only shrinks.
#
# Budget: arrays up to 2^22 elements, as conformance_wild_run.sh; under a
# sanitizer build (TESSEL_BUILD ends in /asan) every fourth module. Skips
# when the corpus is absent.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

MODS="${TESSEL_SHARED:-/nonexistent}/conformance/xla_wild/modules"
if [ ! -d "$MODS" ]; then
    echo "conformance_wild_replay: skipped ($MODS is absent)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
LIMIT=(--limit elements=4194304)
STEP=1
case "${TESSEL_BUILD:-}" in */asan) STEP=4 ;; esac

BUDGET="more than the limit|over this test's size budget (--limit elements=2^22)"
P2P="needs its pairs|a send/recv naming no _xla_send_recv_source_target_pairs (XLA's parser and pass tests: nothing says which device it reaches)"
OTHER="is not registered|another backend's custom-call target (Neuron)"
declare -A REFUSED=(
    [004_llama31_405b_bf16_16x8]="$BUDGET"
    [005_llama31_405b_fp8_16x8]="$BUDGET"
    [006_llama31_70b_bf16_32x8]="$BUDGET"
    [007_llama31_70b_fp8_32x8]="$BUDGET"
    [008_llama31_8b_bf16_1x8]="$BUDGET"
    [009_llama3_8b_act_offload_1x8]="$BUDGET"
    [010_mixtral_8x7b_bf16_1x8]="$BUDGET"
    [019_jaxfft_1024_4x4_f32_fft]="$BUDGET"
    [020_jaxfft_512_16x1_f64_ifft]="$BUDGET"
    [023_jaxfft_512_2x4_f32_fft]="$BUDGET"
    [028_ptxla_gpt2_tp8]="$BUDGET"
    [029_ptxla_llama_tp8]="$BUDGET"
    [037_ptxla_gptj_6b_tp2]="$BUDGET"
    [041_import]="$BUDGET"
    [090_hlo_replication_analysis_NoControlFlowSPMD]="$BUDGET"
    [152_analytical_latency_estimator_TestAnalyticalLaten]="$BUDGET"
    [233_reduce_scatter_creator_ReproClampOnGroupLocalInd]="$BUDGET"
    [260_windowed_einsum_handler_AgLoopsMultipleConsumers]="$BUDGET"
    [032_ptxla_sharding_fsdp]="$OTHER"
    [033_ptxla_sharding_megatron]="$OTHER"
    [034_ptxla_mlp_dp]="$OTHER"
    [207_hlo_gumgraph_PreComputationsWorksMultiRoot]="$P2P"
    [218_layout_assignment_SendRcvLayout]="$P2P"
    [230_hlo_domain_CheckDomainAroundIO]="$P2P"
    [235_hlo_parser_SendRecv]="$P2P"
    [030_ptxla_llama2_tp4_pp2]="is out of range for operand|a reduce-scatter of a scalar: PyTorch/XLA's dump is not valid HLO"
    [083_p2p_schedule_preparation_PipelinedP2PChain2Trans]="does not match|a while whose declared shape is not its body's (XLA's pass-test input, rejected by its verifier too)"
    [134_collective_permute_decomposer_OneSendRecvWithCon]="must be a token|a send whose operand 1 is not a token (a pass-test module XLA's verifier rejects)"
    [220_collective_permute_combiner_CombineCollectivePer]="does not match|a broadcast declared f32 of an f64 operand (a pass-test module XLA's verifier rejects)"
    [234_hlo_dimension_analysis_OneMatmul]="elements for a shape with|a tuple sharding with fewer elements than its shape's leaves"
    [053_ragged_all_to_all_e2e_RaggedAllToAll_2GPUs_S4]="is out of bounds|its random offsets and sizes are not a valid ragged layout (needs real inputs)"
    [092_ragged_all_to_all_decomposer_RaggedAllToAllWitho]="is out of bounds|its random offsets and sizes are not a valid ragged layout (needs real inputs)"
    [174_ragged_all_to_all_multi_host_decomposer_SimpleRa]="is out of bounds|its random offsets and sizes are not a valid ragged layout (needs real inputs)"
)
# Modules whose loop predicate is a parameter: seed 1 draws true (the loop
# never ends), seed 3 draws false.
declare -A SEED=(
    [061_latency_hiding_scheduler_ResourceLimitWithinAnno]=3
    [087_legalize_scheduling_annotations_CrossComputation]=3
)

COLL='(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)(-start)?\(|[ =](send|recv)\('
n=0 replayed=0 mpi=0 refused=0 i=0
bad=""
for f in "$MODS"/*.hlo; do
    b=$(basename "$f" .hlo)
    grep -Eq "$COLL" "$f" || continue
    ! grep -q 'SPMDFullToShardShape\|SPMDShardToFullShape' "$f" || continue
    i=$((i + 1))
    [ $(((i - 1) % STEP)) -eq 0 ] || continue
    n=$((n + 1))
    want="${REFUSED[$b]:-}"
    seed="${SEED[$b]:-1}"
    rm -rf "$WORK/alone" "$WORK/mpi"
    st=0
    timeout 300 "$TESSEL" run "$f" --spmd --random-inputs "$seed" "${LIMIT[@]}" --stats --output-dir "$WORK/alone" \
        >"$OUT" 2>"$ERR" || st=$?
    if [ -n "$want" ]; then
        refused=$((refused + 1))
        if [ "$st" -eq 0 ]; then
            bad="$bad\n  $b replays now: remove it from REFUSED (${want#*|})"
        elif [ "$st" -ne 2 ] || ! head -1 "$ERR" | grep -Fq -- "${want%%|*}" ||
             ! head -1 "$ERR" | grep -Eq "^tessel: $f:[0-9]+:[0-9]+: error: "; then
            bad="$bad\n  $b: status $st, not the listed refusal '${want%%|*}': $(head -1 "$ERR")"
        fi
        continue
    fi
    if [ "$st" -ne 0 ]; then
        bad="$bad\n  $b: the replay failed (status $st): $(head -1 "$ERR")"
        continue
    fi
    replayed=$((replayed + 1))
    ndev=$(sed -n 's/^tessel: stats: devices: \([0-9]*\),.*/\1/p' "$ERR")
    [ -n "$ndev" ] && [ "$ndev" -ge 2 ] && [ $((ndev % 2)) -eq 0 ] || continue
    st=0
    env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun --oversubscribe --mca btl tcp,self -np 2 "$TESSEL" run "$f" \
        --spmd --random-inputs "$seed" "${LIMIT[@]}" --output-dir "$WORK/mpi" >"$OUT" 2>"$ERR" || st=$?
    if [ "$st" -ne 0 ]; then
        bad="$bad\n  $b: the replay under mpirun -np 2 failed (status $st): $(grep -m1 error "$ERR")"
        continue
    fi
    mpi=$((mpi + 1))
    # Across hosts an all-reduce sums each host's devices first, then the
    # hosts: float results may round differently (the oracle's tolerance).
    (same_outputs "$WORK/alone" "$WORK/mpi" "$b under mpirun -np 2") >"$WORK/cmp" 2>&1 ||
        bad="$bad\n  $(grep -m1 FAIL "$WORK/cmp")"
done
echo "conformance_wild_replay: $n SPMD programs: $replayed replay on their devices, $mpi of them under mpirun -np 2 too (equal); $refused refused as listed"
[ "$replayed" -gt 0 ] || fail "nothing replayed"
[ -z "$bad" ] || fail "$(printf "%b" "$bad")"
