#!/usr/bin/env python3
"""conformance_partition.py: the conformance corpora through the partitioner and the auto-sharder.

For each module of ../shared/conformance/xla_wild and xla_spmd that `tessel
check` accepts (every one with --all; else the fixed sample: the modules of
REFUSED and every STRIDE-th module of each corpus):

- `tessel compile` as written, and `tessel compile --auto-shard --mesh N
  --num-partitions N` for N = 2 and 4 on the module as written and with its
  shardings taken out (auto_heldout.unsharded), end with status 0, or with 2
  and an error that says where or what (`tessel: ...error: ...`, never an
  internal error); never 1, a crash or a hang;
- where the module without shardings runs in the reference (within
  REFERENCE_SECONDS), its auto-sharded run on N devices runs and equals it
  (auto_heldout.same: the oracle's tolerance) wherever the compile on N
  succeeded;
- a module of REFUSED stops its auto-shard compile on N, shardings taken
  out, at file:line:col with the listed words (exit 2): the modules with
  collectives between partitions, which no plan can make equal their
  one-device reference, and those whose collectives' shapes need another
  device count; a module of MUST_EQUAL runs auto-sharded and equals it.

Prints a line per failure and a summary; exits 1 on a failure.

--stride K: every K-th module of each corpus instead of every STRIDE-th
(the asan build's 48: a subset of the release build's sample, the listed
modules still all); --offset J: from the J-th (default 0).

usage: conformance_partition.py TESSEL SHARED WORKDIR [--all] [--stride K [--offset J]]
"""
import glob
import os
import re
import subprocess
import sys

import auto_heldout

REFERENCE_SECONDS = 20
STRIDE = 16
LIMIT = ["--limit", "elements=4194304"]

# (module, N): the words its auto-shard compile on N stops at, and why.
SHAPES = "take part"  # ir/verify.c: a gather or scatter whose shapes need groups of another size
BETWEEN = "between partitions outside a manual region"  # auto/per_device.c
PID = "partition-id outside a manual region"  # auto/per_device.c
REFUSED = {
    ("048_hlo_instruction_StringifyAsyncOpsWithReduceScatt", 2): SHAPES,  # f32[20] -> f32[10] over the replicas: 2
    ("048_hlo_instruction_StringifyAsyncOpsWithReduceScatt", 4): SHAPES,
    ("133_profile_guided_latency_estimator_TestProfileGuid", 2): SHAPES,  # 16 -> 4 over every partition: 4
    ("133_profile_guided_latency_estimator_TestProfileGuid", 4): BETWEEN,  # ... which on 4 is per device
    ("136_all_gather_combiner_CombineFromTwoDomainsWithSam", 2): SHAPES,  # 32 -> 128 over the replicas: 4
    ("136_all_gather_combiner_CombineFromTwoDomainsWithSam", 4): SHAPES,
    ("208_all_reduce_promotion_SimplePromotionReduceScatte", 2): SHAPES,  # u16[2] -> u16[1] over the replicas: 2
    ("208_all_reduce_promotion_SimplePromotionReduceScatte", 4): SHAPES,
    ("248_collective_ops_e2e_CollectivePipelinerBackwardSt", 2): SHAPES,  # [1,2,16] -> [1,4,16] over the replicas
    ("248_collective_ops_e2e_CollectivePipelinerBackwardSt", 4): SHAPES,
    ("217_while_loop_all_reduce_code_motion_MultipleDUSAnd", 2): "replica_groups names 2",  # its groups name 4 devices
    ("217_while_loop_all_reduce_code_motion_MultipleDUSAnd", 4): BETWEEN,  # an all-reduce over the 4 global ids
    ("165_whole_graph_manual_pass_SimplePartitionIdCollect", 2): "replica_groups names 2",  # a group of 4 ids
    ("250_layout_assignment_AllReduceSpmd", 2): BETWEEN,  # channel_id, groups {{0}}: replica 0's partitions
    ("250_layout_assignment_AllReduceSpmd", 4): BETWEEN,
    ("043_async_collective_annotator_kHloString", 2): SHAPES,  # f32[2] -> f32[1] over the replicas: 2
    ("043_async_collective_annotator_kHloString", 4): SHAPES,
    ("026_jaxfft_v100_256_2x2_f32_fft", 4): BETWEEN,  # JAX's all-to-all over partitions {0,1},{2,3}
    ("129_double_buffer_loop_unrolling_FullUnrollEvenTripC", 2): BETWEEN,  # all-gathers of an SPMD loop
    ("129_double_buffer_loop_unrolling_FullUnrollEvenTripC", 4): BETWEEN,
    ("159_gpu_copy_insertion_UnrolledLoopShouldNotHaveCopy", 2): BETWEEN,
    ("159_gpu_copy_insertion_UnrolledLoopShouldNotHaveCopy", 4): BETWEEN,
    ("197_nvptx_compiler_RemovesUnnecessaryCopyInPostSched", 2): BETWEEN,
    ("197_nvptx_compiler_RemovesUnnecessaryCopyInPostSched", 4): BETWEEN,
    ("SubgroupManualAllReduce", 4): BETWEEN,  # its manual subgroup taken out with the shardings
}

# (module, N): auto-sharded runs that must have equalled the reference (a
# partition-id held replicated, auto/per_device.c; or one whose value goes
# nowhere): 254's dynamic-slice by partition-id feeds a dot the plan tiled,
# each tile from another device's slice, before.
MUST_EQUAL = {
    ("254_hlo_expand_SpmdHlo", 2), ("254_hlo_expand_SpmdHlo", 4),
    ("ManualPartitionId", 2), ("ManualPartitionId", 4),
    ("165_whole_graph_manual_pass_SimplePartitionIdCollect", 4),  # its partition-id and all-gather feed a send
}


def run(args, timeout=120):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        return 124, f"over {timeout} s"


def clear(status, err):
    """None when a compile ended as the bar says (0, or 2 with a clear error), else why not."""
    first = next((l for l in err.splitlines() if "error" in l), "")
    if status == 0:
        return None
    if status == 2 and re.match(r"tessel: (\S+:\d+:\d+: )?error: ", first) and "internal error" not in first:
        return None
    return f"status {status}: {(first or err.strip()[:200])[:240]}"


def main():
    tessel, shared, work = sys.argv[1:4]
    everything = "--all" in sys.argv[4:]
    stride = int(sys.argv[sys.argv.index("--stride") + 1]) if "--stride" in sys.argv[4:] else STRIDE
    offset = int(sys.argv[sys.argv.index("--offset") + 1]) if "--offset" in sys.argv[4:] else 0
    os.makedirs(work, exist_ok=True)
    wanted = {m for m, _ in REFUSED} | {m for m, _ in MUST_EQUAL}
    files = []
    for corpus in ("xla_wild", "xla_spmd"):
        mods = sorted(glob.glob(os.path.join(shared, "conformance", corpus, "modules", "*.hlo")))
        files += [f for k, f in enumerate(mods)
                  if everything or k % stride == offset or os.path.basename(f)[:-4] in wanted]
    failures, checked, oracles, refused, equal = [], 0, 0, 0, set()
    for f in files:
        b = os.path.basename(f)[:-4]
        if run([tessel, "check", f] + LIMIT)[0] != 0:
            continue
        checked += 1
        text = open(f).read()
        bare = os.path.join(work, b + ".hlo")
        open(bare, "w").write(auto_heldout.unsharded(text))
        why = clear(*run([tessel, "compile", f, "-o", os.devnull] + LIMIT))
        if why:
            failures.append(f"{b}: compile: {why}")
        ref = os.path.join(work, b + ".ref")
        st, err = run([tessel, "run", bare, "--reference", "--random-inputs", "5", "--output-dir", ref] + LIMIT,
                      timeout=REFERENCE_SECONDS)
        has_ref = st == 0
        for n in (2, 4):
            auto = ["--auto-shard", "--mesh", str(n), "--num-partitions", str(n)]
            for what, path in (("as written", f), ("shardings out", bare)):
                st, err = run([tessel, "compile", path, "-o", os.devnull] + auto + LIMIT)
                why = clear(st, err)
                if why:
                    failures.append(f"{b}: --auto-shard on {n} ({what}): {why}")
                if path != bare:
                    continue
                want = REFUSED.get((b, n))
                if want:
                    refused += 1
                    if st != 2 or want not in err or not re.search(re.escape(bare) + r":\d+:\d+: error: ", err):
                        failures.append(f"{b}: --auto-shard on {n}: not refused at its instruction with "
                                        f"'{want}' (status {st}: {err.strip()[:200]})")
                    continue
                if st != 0 or not has_ref:
                    continue
                out = os.path.join(work, f"{b}.auto{n}")
                st, err = run([tessel, "run", bare, "--random-inputs", "5", "--output-dir", out] + auto + LIMIT)
                why = f"status {st}: {err.strip()[:200]}" if st else auto_heldout.same(
                    out, ref, auto_heldout.output_types(text))
                if why:
                    failures.append(f"{b}: --auto-shard on {n} differs from the reference: {why}")
                else:
                    oracles += 1
                    equal.add((b, n))
    for b, n in sorted(MUST_EQUAL - equal):
        if any(os.path.basename(f)[:-4] == b for f in files):
            failures.append(f"{b}: --auto-shard on {n} was not run against the reference")
    for line in failures:
        print("conformance_partition: FAIL:", line)
    print(f"conformance_partition: {checked} modules compiled as written and auto-sharded on 2 and 4; "
          f"{oracles} auto-sharded runs equal the reference, {refused} refusals as listed, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
