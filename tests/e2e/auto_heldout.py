#!/usr/bin/env python3
"""auto_heldout.py: --auto-shard on models it was not tuned on, against the oracle.

Each module of tests/models and its grad, memfit, memory and shardy folders (or the files given) with every sharding taken
out (XLA's sharding= attributes and Shardy's xla.sdy.sharding= frontend
attributes; @N and @D, the models' device templates, filled for N
devices), auto-sharded over a mesh of N devices, must run and equal the
reference run (the oracle's tolerance for each output's type, same()).
A module the reference cannot run (host work, infeed, ...) is skipped and
counted; one marked `// not-oracle:` (test_oracle.c's mark: its result is
not the oracle's to judge) must run, uncompared.

With --hand, a module that has shardings is its own hand-written plan: it
is planned as written on the same device count (where it compiles there),
and the auto-sharded plan's collective bytes per device and peak memory
(tessel plan --format json, auto_shard.py's counts) are printed as ratios
to it, each plan classed: "within" (both no more than 1.1x), "fewer
bytes" (bytes within, more memory: the plan the step-time model prefers
moves less and holds more), "more bytes" (memory within) or "dominated"
(over on both: the hand plan is better on each count). A dominated plan
fails unless it is one of KNOWN_DOMINATED (each with its reason). A
"fewer bytes" plan is planned again under --limit memory of 1.1x the hand
plan's peak (memory counts through a limit: docs/auto-shard.md; plus what
its host program holds, which the limit counts beside the peak), and
whether it then fits within both counts is printed and counted; that plan
runs too and must equal the reference, and one that fits no such limit, or
moves more than 1.1x the hand plan's bytes under it, fails unless it is one
of KNOWN_UNDER_LIMIT (each with what is short). A module no plan can make
equal the reference (a per-device program in part) is refused at compile,
exit 2; one of KNOWN_REFUSED, refused with the listed words, is counted
apart. A listed plan that is no longer so fails too: the lists stay true.

--manifest FILE (a conformance corpus's manifest.tsv: its first column the
file in modules/): its modules, each on its own device count where a
num_devices column gives one, else on --devices.

--mesh2x2: on 4 devices the module also runs over a 2x2 mesh (--mesh 2x2)
and must equal the reference.

usage: auto_heldout.py TESSEL WORKDIR [--devices 2,4,8] [--hand] [--mesh2x2] [--manifest FILE] [MODEL.hlo ...]
Prints one line per module and device count; exits 1 on a failure.
"""
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np

import auto_shard

HERE = os.path.dirname(os.path.abspath(__file__))
SHARDING = re.compile(r",\s*sharding=\{")  # XLA's tests break lines before it
SDY = re.compile(r'xla\.sdy\.sharding="(?:[^"\\]|\\.)*"')


def unsharded(text):
    """text without its shardings (nested braces and Shardy's included)."""
    out, i = [], 0
    while True:
        found = SHARDING.search(text, i)
        if not found:
            out.append(text[i:])
            break
        j = found.start()
        out.append(text[i:j])
        k, depth = found.end(), 1
        while depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        i = k
    text = SDY.sub("", "".join(out)).replace(", frontend_attributes={}", "")
    return text.replace("frontend_attributes={,", "frontend_attributes={").replace(",}", "}")


# (module, devices): why its auto-sharded plan is over the hand plan on both counts.
KNOWN_DOMINATED = {
    # memfit/relu_mom_jax on 2 was here (4 collectives of 152400 bytes for the batch plan's 8 smaller
    # all-reduces, peak 1.56x) until the tie-break weighed bytes, not seconds: within both (1.00x, 0.93x).
}


# (module, devices): why, under --limit memory of 1.1x the hand plan's peak,
# no auto plan fits (no plan fits) or the plan moves more than 1.1x the hand
# plan's bytes (more bytes). Each says which part is short: a strategy the
# auto-sharder does not have, its estimate of a plan's peak against the
# partitioner's (partition/memory.c, which the limit is checked by), or the
# module. A "fewer bytes" plan that fits no such limit, or moves more bytes
# under it, and is not listed fails; so does a listed one that no longer does.
LAPACK_OPAQUE = ("strategy: the auto-sharder's roles have no rule for the QR and LU custom-calls (the "
                 "partitioner keeps their batch dims local: partition/spmd_local.c), so it takes them as opaque "
                 "and every plan it weighs holds the 5 matrices whole beside the hand plan's shards")
KNOWN_UNDER_LIMIT = {
    ("lapack_sharded.hlo", 2): LAPACK_OPAQUE,
    ("lapack_sharded.hlo", 4): LAPACK_OPAQUE,
    ("lapack_sharded.hlo", 8): LAPACK_OPAQUE,
    # ../shared/conformance/xla_spmd (auto_heldout_wide.sh)
    ("GatherParallelIndexAndOperand.hlo", 8): "estimate: the gather's operand, tiled on a dim it indexes, is "
                                              "all-gathered for the batch's tiles at the peak, which the memory "
                                              "row does not charge (672 bytes, the limit 492); without a limit "
                                              "0 bytes at 1.36x the peak (dominated while gathers of two index "
                                              "dims were opaque)",
    ("DotInputsAreIdentical.hlo", 8): "strategy: the hand plan tiles the 4000x4000 operand [2,4], which --mesh 8 "
                                      "(one axis) cannot express; each plan over it holds a whole operand "
                                      "(64 MB: the limit 70.4 MB) beside its shard (0 bytes at 1.25x the peak "
                                      "unlimited; skipped where the reference takes over 20 s)",
    ("memory_attn_softmax_u.hlo", 4): "more bytes: under the limit the plan gathers k and v (224640 bytes), "
                                      "estimated faster than the batch plan's padded third; the hand plan, "
                                      "given as constraints, fits with none",
}


# (module, devices): the words its auto-shard compile stops at (exit 2), and
# why no plan can equal the reference: the module is already a per-device
# program in part (auto/per_device.c), or its collectives name more devices
# than it runs on (ir/verify.c). tests/e2e/conformance_partition.py checks
# the same refusals on 2 and 4. A listed module that runs fails (the lists
# stay true).
BETWEEN = "between partitions outside a manual region"
KNOWN_REFUSED = {
    # ../shared/conformance/xla_wild (auto_heldout_wide.sh)
    ("165_whole_graph_manual_pass_SimplePartitionIdCollect.hlo", 2):
        ("replica_groups names 2", "its all-gather's group lists the devices 0 to 3; as written it is refused "
                                   "on 2 alike"),
    ("250_layout_assignment_AllReduceSpmd.hlo", 2):
        (BETWEEN, "an all-reduce with a channel_id, groups {{0}}: it sums every partition's copy (the plan as "
                  "written gives 2x the reference's values), the reference's one copy"),
    ("250_layout_assignment_AllReduceSpmd.hlo", 4): (BETWEEN, "as on 2 (4x)"),
    ("250_layout_assignment_AllReduceSpmd.hlo", 8): (BETWEEN, "as on 2 (8x)"),
}


# The folders of tests/models swept besides its own modules (fed/'s need a
# host or dynamic shapes the reference does not run).
SUBFOLDERS = ("grad", "memfit", "memory", "shardy")


# Seconds a module's reference run may take before it is skipped (the
# conformance corpora hold einsums of gigabytes).
REFERENCE_SECONDS = 20


ROOT_TYPES = re.compile(r"\b(bf16|f16|f8\w*|f32|f64|c64|c128|pred|[su]\d+)\[")
ENTRY_ROOT = re.compile(r"ENTRY[^{]*\{.*?\n\s*ROOT [^=]*=\s*(\([^=]*?\)|\S+)\s", re.S)


def output_types(text):
    """The element types of the entry's outputs, in order (its ROOT's shape), [] if not found."""
    m = ENTRY_ROOT.search(text)
    return ROOT_TYPES.findall(m.group(1)) if m else []


# The oracle's relative tolerance by the module's output type (docs/cli.md, --reference):
# bf16 and f16 results travel as f32 in .npy, so the .npy's own type does not say.
LOW_PRECISION = {"f16": 2e-3, "bf16": 2e-2}


def same(got, ref, types=()):
    """None when every output of got equals ref's within the oracle's tolerance for its
    type (docs/cli.md: 1e-5 for f64 and c128, 2e-3 for f16, 2e-2 for bf16 and the f8
    kinds, else 1e-4; `types` the module's output types; integers exactly; NaN where the
    reference has NaN), else why not."""
    k = 0
    while os.path.exists(os.path.join(ref, f"output_{k}.npy")):
        a = np.load(os.path.join(ref, f"output_{k}.npy"))
        g = os.path.join(got, f"output_{k}.npy")
        if not os.path.exists(g):
            return f"no output {k}"
        b = np.load(g)
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"output {k} is {b.dtype}{b.shape}, the reference {a.dtype}{a.shape}"
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                return f"output {k}: integers differ"
        else:
            tol = ({8: 1e-5, 16: 1e-5, 2: 2e-3}.get(a.dtype.itemsize, 1e-4) if a.dtype.kind == "f"
                   else (1e-5 if a.dtype.itemsize == 16 else 1e-4))
            t = types[k] if k < len(types) else ""
            tol = max(tol, LOW_PRECISION.get(t, 2e-2 if t.startswith("f8") else 0))
            fin = np.isfinite(a)
            if not np.array_equal(np.isnan(a), np.isnan(b)) or not np.array_equal(a[~fin & ~np.isnan(a)],
                                                                                  b[~fin & ~np.isnan(a)]):
                return f"output {k}: NaN or infinities differ"
            scale = float(np.max(np.abs(a[fin]))) if fin.any() else 0.0
            off = float(np.max(np.abs(a[fin].astype(np.complex128) - b[fin]))) if fin.any() else 0.0
            if off > tol * scale:
                return f"output {k} differs by {off} (tolerance {tol * scale})"
        k += 1
    if k:
        return None
    # A module that returns () (its work is outfeed or host transfers: 047
    # of xla_wild) has no output files in the reference run, nor in a run
    # that equals it; one that writes any there differs.
    if os.path.isdir(ref) and os.path.isdir(got):
        return "outputs where the reference has none" if glob.glob(os.path.join(got, "output_*.npy")) else None
    return "no outputs"


def run(*args, timeout=600):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"over {timeout} s")


def counts(*args):
    """(collective bytes per device, peak bytes per device, bytes the host program holds) of
    `tessel plan ARGS`, None if it fails."""
    r = run(args[0], "plan", *args[1:], "--format", "json")
    if r.returncode:
        return None
    return auto_shard.counts(r.stdout) + (json.loads(r.stdout).get("host_peak_bytes", 0),)


def verdict(why, not_oracle):
    """A run's word: why it failed, else that it equals the reference, or only that it ran."""
    if why is not None:
        return "FAIL: " + why
    return "runs: ok (not-oracle: not compared)" if not_oracle else "equal: ok"


def compare(tessel, hand_path, auto_path, n, ref, types, judged=True):
    """The auto plan's bytes and peak over the hand plan's, its class, and why the plan under the
    limit (a "fewer bytes" plan planned again under 1.1x the hand plan's peak) does not run or
    does not equal the reference run `ref` (compared where `judged`; None: it does, or there is
    none); None: no hand plan here."""
    h = counts(tessel, hand_path, "--num-partitions", str(n))
    a = counts(tessel, auto_path, "--auto-shard", "--mesh", str(n), "--num-partitions", str(n))
    if h is None or a is None:
        return None
    rb = a[0] / h[0] if h[0] else (1.0 if a[0] == 0 else float("inf"))
    rm = a[1] / h[1] if h[1] else 1.0
    cls = {(True, True): "within", (True, False): "fewer bytes", (False, True): "more bytes",
           (False, False): "dominated"}[(rb <= 1.1, rm <= 1.1)]
    detail, wrong = "", None
    if cls == "fewer bytes":
        # Memory counts through a limit: 1.1x the hand plan's peak, and what
        # its host program holds (--limit memory counts it beside the peak).
        limit = ("--auto-shard", "--mesh", str(n), "--num-partitions", str(n),
                 "--limit", "memory=%d" % (int(1.1 * h[1]) + h[2]))
        lim = counts(tessel, auto_path, *limit)
        if lim is not None:
            # The plan under the limit runs too, and equals the reference.
            out = auto_path + ".limited"
            r = run(tessel, "run", auto_path, *limit, "--random-inputs", "5", "--output-dir", out)
            wrong = ("under the limit: " + (r.stderr.strip().splitlines() or ["?"])[0][:200] if r.returncode
                     else same(out, ref, types) if judged else None)
        if lim is None:
            cls, detail = "fewer bytes (no plan fits 1.1x its peak)", ""
        else:
            lb = lim[0] / h[0] if h[0] else (1.0 if lim[0] == 0 else float("inf"))
            ok = lb <= 1.1 and lim[1] <= 1.1 * h[1]
            cls = "fewer bytes (within under a limit of 1.1x its peak)" if ok else \
                "fewer bytes (more bytes under a limit of 1.1x its peak)"
            detail = f"; under the limit bytes x{lb:.2f} peak x{lim[1] / h[1]:.2f}"
    return rb, rm, cls + detail, wrong


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    devices = [2, 4, 8]
    if "--devices" in args:
        k = args.index("--devices")
        devices = [int(x) for x in args[k + 1].split(",")]
        del args[k:k + 2]
    meshes = []  # 2-D meshes of 4 devices run besides --mesh 4 (--mesh2x2)
    if "--mesh2x2" in args:
        args.remove("--mesh2x2")
        meshes = ["2x2"]
    hand = "--hand" in args
    if hand:
        args.remove("--hand")
    own = {}  # file -> its own device count (a manifest's)
    if "--manifest" in args:
        k = args.index("--manifest")
        man = args[k + 1]
        del args[k:k + 2]
        rows = [line.split("\t") for line in open(man).read().splitlines()]
        nd = rows[0].index("num_devices") if "num_devices" in rows[0] else None
        for cols in rows[1:]:
            own[os.path.join(os.path.dirname(man), "modules", cols[0])] = int(cols[nd]) if nd is not None else None
        args += sorted(own)
    models = os.path.join(HERE, "..", "models")
    files = args or sorted(glob.glob(os.path.join(models, "*.hlo")) +
                           [f for sub in SUBFOLDERS for f in glob.glob(os.path.join(models, sub, "*.hlo"))])
    os.makedirs(work, exist_ok=True)
    failed = skipped = passed = refused = 0
    classes = {}
    for f in files:
        name = os.path.basename(f)
        if os.path.basename(os.path.dirname(f)) in SUBFOLDERS:  # tests/models/grad/x.hlo beside tests/models/x.hlo
            name = os.path.basename(os.path.dirname(f)) + "_" + name
        written = open(f).read()
        text = unsharded(written)
        # `// not-oracle: WHY` (tests/unit/test_oracle.c): a module whose result the oracle
        # cannot judge runs, uncompared.
        not_oracle = re.search(r"^// not-oracle:", written, re.M) is not None
        ref = os.path.join(work, name + ".ref")
        for n in ([own[f]] if own.get(f) else devices):
            path = os.path.join(work, f"{name}.{n}.hlo")
            open(path, "w").write(text.replace("@N", str(n)).replace("@D", "<=[%d]" % n))
            if not os.path.isdir(ref):
                r = run(tessel, "run", path, "--reference", "--random-inputs", "5", "--output-dir", ref,
                        timeout=REFERENCE_SECONDS)
                if r.returncode:
                    print(f"auto_heldout: {name}: skipped (the reference does not run: "
                          f"{(r.stderr.strip().splitlines() or ['?'])[-1][:100]})", flush=True)
                    skipped += 1
                    break
            out = os.path.join(work, f"{name}.auto{n}")
            r = run(tessel, "run", path, "--auto-shard", "--mesh", str(n), "--num-partitions", str(n),
                    "--random-inputs", "5", "--output-dir", out)
            why = (r.stderr.strip().splitlines() or ["?"])[0][:200] if r.returncode else \
                None if not_oracle else same(out, ref, output_types(text))
            versus = ""
            if (name, n) in KNOWN_REFUSED:
                words, reason = KNOWN_REFUSED[(name, n)]
                if r.returncode == 2 and words in r.stderr:
                    print(f"auto_heldout: {name} on {n}: refused: ok (known: {reason})", flush=True)
                    refused += 1
                    continue
                why = why or "listed in KNOWN_REFUSED, but runs"
            if why is None and hand and written != text:
                hp = os.path.join(work, f"{name}.hand{n}.hlo")
                open(hp, "w").write(written.replace("@N", str(n)).replace("@D", "<=[%d]" % n))
                c = compare(tessel, hp, path, n, ref, output_types(text), not not_oracle)
                if c and c[3]:
                    why = c[3]
                if c:
                    versus = f"; vs the hand plan bytes x{c[0]:.2f} peak x{c[1]:.2f}: {c[2]}"
                    key = c[2].split(";")[0]
                    classes[key] = classes.get(key, 0) + 1
                    if c[2].startswith(("fewer bytes (no plan", "fewer bytes (more bytes")):
                        known = KNOWN_UNDER_LIMIT.get((name, n))
                        versus += f" (known: {known})" if known else ""
                        why = why or (None if known else "under the limit of 1.1x the hand plan's peak: "
                                      "no plan fits or more bytes, not listed in KNOWN_UNDER_LIMIT")
                    if c[2] == "dominated":
                        known = KNOWN_DOMINATED.get((name, n))
                        versus += f" (known: {known})" if known else ""
                        why = None if known else "dominated by the hand plan"
                    # The lists stay true: an entry whose plan is no longer what it says fails.
                    elif (name, n) in KNOWN_DOMINATED:
                        why = why or "listed in KNOWN_DOMINATED, but not dominated"
                    if (name, n) in KNOWN_UNDER_LIMIT and not c[2].startswith(("fewer bytes (no plan",
                                                                              "fewer bytes (more bytes")):
                        why = why or "listed in KNOWN_UNDER_LIMIT, but fits within both under the limit, or needs none"
            print(f"auto_heldout: {name} on {n}: {verdict(why, not_oracle)}{versus}", flush=True)
            failed += why is not None
            passed += why is None
            for mesh in (meshes if n == 4 else ()):
                out = os.path.join(work, f"{name}.auto{mesh}")
                r = run(tessel, "run", path, "--auto-shard", "--mesh", mesh, "--num-partitions", str(n),
                        "--random-inputs", "5", "--output-dir", out)
                why = (r.stderr.strip().splitlines() or ["?"])[0][:200] if r.returncode else \
                    None if not_oracle else same(out, ref, output_types(text))
                print(f"auto_heldout: {name} on mesh {mesh}: {verdict(why, not_oracle)}", flush=True)
                failed += why is not None
                passed += why is None
    print(f"auto_heldout: {passed} passed, {failed} failed, {skipped} modules skipped" +
          (f", {refused} refused as known" if refused else "") +
          (f"; vs the hand plans: {', '.join(f'{v} {k}' for k, v in sorted(classes.items()))}" if hand else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
