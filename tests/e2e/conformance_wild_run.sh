#!/usr/bin/env bash
# conformance_wild_run.sh: every module of ../shared/conformance/xla_wild
# that parses runs in the reference executor (`tessel run --reference
# --random-inputs 1`), and every one of them that declares several
# partitions or replicas and is not already partitioned gives the same
# outputs partitioned (the oracle, DESIGN.md). A module that does not run
# is listed below with the error it must stop at and why; a listed module
# that starts to run fails the test, so the list only shrinks.
#
# Budget: arrays are limited to 2^22 elements (--limit elements=4194304),
# so the whole walk takes a few minutes in a release build; under a
# sanitizer build (TESSEL_BUILD ends in /asan) a fixed sample of every
# eighth module runs. Skips when the corpus (../shared/conformance) is
# absent.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

MODS="${TESSEL_SHARED:-/nonexistent}/conformance/xla_wild/modules"
if [ ! -d "$MODS" ]; then
    echo "conformance_wild_run: skipped ($MODS is absent)"
    exit 0
fi
LIMIT=(--limit elements=4194304)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
STEP=1
case "${TESSEL_BUILD:-}" in */asan) STEP=8 ;; esac

# Module -> "substring of the error it stops at|why". TIMEOUT: not run.
declare -A REFUSED=(
    [003_bench_gpu_hlo]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [004_llama31_405b_bf16_16x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [005_llama31_405b_fp8_16x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [006_llama31_70b_bf16_32x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [007_llama31_70b_fp8_32x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [008_llama31_8b_bf16_1x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [009_llama3_8b_act_offload_1x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [010_mixtral_8x7b_bf16_1x8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [011_maxtext_1n1g_train_step]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [012_maxtext_deepseek_1n4g_train_step]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [015_mhr_fp8_gemm_loop]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [017_mhr_sharded_computation]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [018_mhr_te_softmax]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [019_jaxfft_1024_4x4_f32_fft]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [020_jaxfft_512_16x1_f64_ifft]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [021_pfft3d_512_16x1_f32_ifft_noncont]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [023_jaxfft_512_2x4_f32_fft]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [024_pfft3d_256_2x4_f64_ifft_noncont]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [025_pfft3d_512_4x2_f32_fft]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [026_jaxfft_v100_256_2x2_f32_fft]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [028_ptxla_gpt2_tp8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [029_ptxla_llama_tp8]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [031_ptxla_sharding_batch]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [032_ptxla_sharding_fsdp]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [033_ptxla_sharding_megatron]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [034_ptxla_mlp_dp]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [036_ptxla_bert_large_dp_tp_optimizer]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [037_ptxla_gptj_6b_tp2]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [042_gpu_hlo_schedule_LHSSendRecvAllReduce]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [043_async_collective_annotator_kHloString]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [046_dynamic_slice_fusion_AsyncDynamicSliceFusionWith]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [048_hlo_instruction_StringifyAsyncOpsWithReduceScatt]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [050_hlo_parser_AsyncOpsWithSyntaxSugarAndThreadName]="is not registered|a made-up target of XLA's pass tests"
    [051_collective_pipeliner_TransformRecvSendBackwards]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [053_ragged_all_to_all_e2e_RaggedAllToAll_2GPUs_S4]="over groups of more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [059_dynamic_reshape_Complicated]="is outside|its random s32 inputs are not valid dynamic sizes (needs real inputs)"
    [061_latency_hiding_scheduler_ResourceLimitWithinAnno]="exchanges data between devices|already partitioned: all-gathers over 4 devices (replayed by conformance_wild_replay.sh)"
    [074_auto_sharding_JaxRandomUniform]="rng-bit-generator|a state XLA's expander cannot expand (a pass-test module, never run by XLA)"
    [079_host_offloader_RemoveRedundantCopiesBackToHostOu]="more than the limit|over this test's size budget (--limit elements=2^22): 2^34.5 elements"
    [087_legalize_scheduling_annotations_CrossComputation]="exchanges data between devices|already partitioned: all-gathers over 4 devices (replayed by conformance_wild_replay.sh)"
    [090_hlo_replication_analysis_NoControlFlowSPMD]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [092_ragged_all_to_all_decomposer_RaggedAllToAllWitho]="over more than one device|a collective over its 2 replicas (num_partitions=1, replica_count=2): no one-device answer; replayed, its random offsets and sizes are not a valid ragged layout (needs real inputs)"
    [093_collective_pipeline_parallelism_PartiallyPipelin]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [096_host_offload_legalize_LlmActivationHostMemoryMul]="more than the limit|over this test's size budget (--limit elements=2^22): 2^34 elements"
    [099_while_loop_constant_sinking_TupleShapedConstants]="TIMEOUT|loops forever with the random inputs of seed 1 (its loop predicate draws true)"
    [103_infeed_token_propagation_ConditionalMixedInfeed]="infeed needs a value|reads the host's infeed: runs with --infeed FILE.npy"
    [107_collective_ops_e2e_MemcpyP2pWhileLoopCorrectness]="over more than one device|a collective-permute between its 4 devices (in a manual region, SPMDFullToShardShape, which only runs partitioned)"
    [109_nccl_group_execution_NcclGroupSendRecvNoWhileLoo]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [115_small_while_loop_hoisting_pass_NoInOutFeedWhileL]="infeed needs a value|reads the host's infeed: runs with --infeed FILE.npy"
    [119_convert_async_collectives_to_sync_SimpleCollecti]="over groups of more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [121_gpu_float_support_AllToAllTupleShapeS4IsNormaliz]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [123_simulator_SingleAsyncSliceCopyOverhead]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [129_double_buffer_loop_unrolling_FullUnrollEvenTripC]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [133_profile_guided_latency_estimator_TestProfileGuid]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [136_all_gather_combiner_CombineFromTwoDomainsWithSam]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [140_sharding_propagation_ShardAsWithShardBarrier]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [145_collective_ops_command_buffer_SendRecv_Simple]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [147_hlo_extractor_ReplaceTupleWithConstant]="rng-bit-generator|a state XLA's expander cannot expand (a pass-test module, never run by XLA)"
    [148_copy_insertion_NestedWhilesWithParamRoot2]="TIMEOUT|loops forever with the random inputs of seed 1 (its loop predicate draws true)"
    [152_analytical_latency_estimator_TestAnalyticalLaten]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [154_priority_fusion_DoNotFuseTransposeIntoReduce]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [157_collective_metadata_ConstructCollectiveMetadataW]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [159_gpu_copy_insertion_UnrolledLoopShouldNotHaveCopy]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [162_gpu_fused_mha_hlo_text]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [163_computation_partitioner_PartitioningIsDeterminis]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [169_collective_quantizer_AllToAllQuantizePartialRepl]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [170_while_loop_concat_code_motion_SimpleMotionMultip]="is not registered|a made-up target of XLA's pass tests"
    [174_ragged_all_to_all_multi_host_decomposer_SimpleRa]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [180_collective_pipelining_analyzer_ReduceScatterWith]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [182_hlo_constant_splitter_InstructionsWithOneUser]="needs the SPMD partitioner|a manual region (SPMDFullToShardShape) only runs partitioned"
    [194_memory_bound_loop_optimizer_OptimizerEndToEndNes]="TIMEOUT|loops forever with the random inputs of seed 1 (its loop predicate draws true)"
    [195_ar_crs_combiner_RewriteMultipleARsLeft]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [207_hlo_gumgraph_PreComputationsWorksMultiRoot]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [208_all_reduce_promotion_SimplePromotionReduceScatte]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [216_tfrt_gpu_client_HostExecuteRuntimeTest]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [217_while_loop_all_reduce_code_motion_MultipleDUSAnd]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [218_layout_assignment_SendRcvLayout]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [221_memory_space_assignment_TestCustomKernelColoring]="is not registered|another backend's custom-call target (Neuron, TPU, TransformerEngine or GPU)"
    [228_auto_sharding_SPMDShardToFullShapeWithUnusedPara]="needs the SPMD partitioner|a manual region (SPMDFullToShardShape) only runs partitioned"
    [229_legalize_scheduling_annotations_CrossComputation]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [230_hlo_domain_CheckDomainAroundIO]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [233_reduce_scatter_creator_ReproClampOnGroupLocalInd]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [235_hlo_parser_SendRecv]="between devices|device-to-device send/recv: the reference runs one device (replayed by conformance_wild_replay.sh)"
    [240_import_emit_stablehlo_67]="needs the SPMD partitioner|a manual region (SPMDFullToShardShape) only runs partitioned"
    [245_collective_ops_utils_DetectsSingleHost8Devices]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [248_collective_ops_e2e_CollectivePipelinerBackwardSt]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [249_collective_interpolator_LoadsDefaultProfile]="over more than one device|already partitioned: a collective over several devices (replayed by conformance_wild_replay.sh)"
    [255_stateful_rng_spmd_partitioner_EinsumDisableRewri]="more than the limit|over this test's size budget (--limit elements=2^22)"
    [260_windowed_einsum_handler_AgLoopsMultipleConsumers]="more than the limit|over this test's size budget (--limit elements=2^22)"
)

# Already partitioned programs: their collectives span devices, so the
# partitioned run and the one-device reference differ by design; they are
# replayed on their devices by conformance_wild_replay.sh. Their reference
# runs above.
declare -A NO_ORACLE=(
    [026_jaxfft_v100_256_2x2_f32_fft]="a JAX dump after spmd-partitioning (all-to-all between devices)"
    [169_collective_quantizer_AllToAllQuantizePartialRepl]="an SPMD program (all-to-all and all-reduce between devices)"
    [250_layout_assignment_AllReduceSpmd]="an SPMD program (channel_id, replica_groups={{0}}: replica 0 times both partitions)"
)

n=0 ran=0 refused=0 oracles=0 mpis=0 i=0
bad=""
for f in "$MODS"/*.hlo; do
    b=$(basename "$f" .hlo)
    i=$((i + 1))
    [ $(((i - 1) % STEP)) -eq 0 ] || continue
    # XLA's slow-compile module (a 1000-trip while) runs in the release
    # build only: under ASan its reference run alone takes about 5 minutes
    # on 2 busy cores, this test's whole budget.
    [ "$STEP" = 1 ] || [ "$b" != 001_large_loop_slow_compile ] || continue
    "$TESSEL" check --limit elements=1099511627776 "$f" >/dev/null 2>&1 || continue
    n=$((n + 1))
    want="${REFUSED[$b]:-}"
    if [ "${want%%|*}" = TIMEOUT ]; then
        refused=$((refused + 1))
        continue
    fi
    rm -rf "$WORK/ref" "$WORK/part"
    st=0
    timeout 300 "$TESSEL" run "$f" --reference --random-inputs 1 "${LIMIT[@]}" --output-dir "$WORK/ref" \
        >"$OUT" 2>"$ERR" || st=$?
    if [ -n "$want" ]; then
        refused=$((refused + 1))
        if [ "$st" -eq 0 ]; then
            bad="$bad\n  $b runs now: remove it from REFUSED (${want#*|})"
        elif [ "$st" -ne 2 ] || ! head -1 "$ERR" | grep -Fq -- "${want%%|*}" ||
             ! head -1 "$ERR" | grep -Eq "^tessel: $f:[0-9]+:[0-9]+: error: "; then
            bad="$bad\n  $b: status $st, not the listed refusal '${want%%|*}': $(head -1 "$ERR")"
        fi
        continue
    fi
    if [ "$st" -ne 0 ]; then
        bad="$bad\n  $b: reference run failed (status $st): $(head -1 "$ERR")"
        continue
    fi
    ran=$((ran + 1))
    np=$(grep -m1 -o 'num_partitions=[0-9]*' "$f" | cut -d= -f2 || true)
    nr=$(grep -m1 -o 'replica_count=[0-9]*' "$f" | cut -d= -f2 || true)
    if [ "${np:-1}" -le 1 ] && [ "${nr:-1}" -le 1 ] || [ -n "${NO_ORACLE[$b]:-}" ]; then
        continue
    fi
    st=0
    timeout 300 "$TESSEL" run "$f" --random-inputs 1 "${LIMIT[@]}" --output-dir "$WORK/part" \
        >"$OUT" 2>"$ERR" || st=$?
    if [ "$st" -ne 0 ]; then
        bad="$bad\n  $b: partitioned run failed (status $st): $(head -1 "$ERR")"
        continue
    fi
    oracles=$((oracles + 1))
    # The same under mpirun, one rank per host, where the devices split in two.
    ndev=$((${np:-1} * ${nr:-1}))
    if [ $((ndev % 2)) -eq 0 ]; then
        rm -rf "$WORK/mpi"
        st=0
        env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun --oversubscribe --mca btl tcp,self -np 2 "$TESSEL" run "$f" \
            --random-inputs 1 "${LIMIT[@]}" --output-dir "$WORK/mpi" >"$OUT" 2>"$ERR" || st=$?
        if [ "$st" -ne 0 ]; then
            bad="$bad\n  $b: partitioned run under mpirun -np 2 failed (status $st): $(grep -m1 error "$ERR")"
        elif ! (same_outputs "$WORK/ref" "$WORK/mpi" "$b under mpirun -np 2") >"$WORK/cmp" 2>&1; then
            bad="$bad\n  $(grep -m1 FAIL "$WORK/cmp")"
        else
            mpis=$((mpis + 1))
        fi
    fi
    for o in "$WORK/ref"/*.npy; do
        "$PY" - "$o" "$WORK/part/$(basename "$o")" <<'PY' || bad="$bad\n  $b: partitioned $(basename "$o") differs from the reference"
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
if a.shape != b.shape or a.dtype != b.dtype:
    sys.exit('shape or type differs')
if a.dtype.kind in 'fc':
    fin = np.isfinite(a)
    scale = float(np.max(np.abs(a[fin]))) if fin.any() else 0.0
    tol = {'f8': 1e-5, 'c16': 1e-5, 'f2': 2e-3}.get(a.dtype.str[1:], 1e-4) * scale
    same = (np.isnan(a) & np.isnan(b)) | (a == b) | (np.abs(a - b) <= tol)
    sys.exit(0 if same.all() else 1)
sys.exit(0 if np.array_equal(a, b) else 1)
PY
    done
done
echo "conformance_wild_run: $n modules: $ran run in the reference, $oracles of them partitioned equal it ($mpis also under mpirun -np 2); $refused refused as listed"
[ -z "$bad" ] || fail "$(printf "%b" "$bad")"
