#!/usr/bin/env python3
"""auto_heldout.py: --auto-shard on models it was not tuned on, against the oracle.

Each module of tests/models and tests/models/grad (or the files given) with every sharding taken
out (XLA's sharding= attributes and Shardy's xla.sdy.sharding= frontend
attributes; @N and @D, the models' device templates, filled for N
devices), auto-sharded over a mesh of N devices, must run and equal the
reference run (the oracle's tolerance, tests/e2e/auto_shard.py's same()).
A module the reference cannot run (host work, infeed, ...) is skipped and
counted. The bytes are not checked here: tests/models has no hand plans
to hold them to (auto_shard.py's models do).

usage: auto_heldout.py TESSEL WORKDIR [--devices 2,4,8] [MODEL.hlo ...]
Prints one line per module and device count; exits 1 on a failure.
"""
import glob
import os
import re
import subprocess
import sys

import auto_shard

HERE = os.path.dirname(os.path.abspath(__file__))
SDY = re.compile(r'xla\.sdy\.sharding="(?:[^"\\]|\\.)*"')


def unsharded(text):
    """text without its shardings (nested braces and Shardy's included)."""
    out, i = [], 0
    while True:
        j = text.find(", sharding={", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k, depth = j + len(", sharding={"), 1
        while depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        i = k
    text = SDY.sub("", "".join(out)).replace(", frontend_attributes={}", "")
    return text.replace("frontend_attributes={,", "frontend_attributes={").replace(",}", "}")


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    devices = [2, 4, 8]
    if "--devices" in args:
        k = args.index("--devices")
        devices = [int(x) for x in args[k + 1].split(",")]
        del args[k:k + 2]
    models = os.path.join(HERE, "..", "models")
    files = args or sorted(glob.glob(os.path.join(models, "*.hlo")) + glob.glob(os.path.join(models, "grad", "*.hlo")))
    os.makedirs(work, exist_ok=True)
    failed = skipped = passed = 0
    for f in files:
        name = os.path.basename(f)
        text = unsharded(open(f).read())
        ref = os.path.join(work, name + ".ref")
        for n in devices:
            path = os.path.join(work, f"{name}.{n}.hlo")
            open(path, "w").write(text.replace("@N", str(n)).replace("@D", "<=[%d]" % n))
            if n == devices[0]:
                r = run(tessel, "run", path, "--reference", "--random-inputs", "5", "--output-dir", ref)
                if r.returncode:
                    print(f"auto_heldout: {name}: skipped (the reference does not run: "
                          f"{(r.stderr.strip().splitlines() or ['?'])[-1][:100]})")
                    skipped += 1
                    break
            out = os.path.join(work, f"{name}.auto{n}")
            r = run(tessel, "run", path, "--auto-shard", "--mesh", str(n), "--num-partitions", str(n),
                    "--random-inputs", "5", "--output-dir", out)
            why = (r.stderr.strip().splitlines() or ["?"])[0][:200] if r.returncode else auto_shard.same(out, ref)
            print(f"auto_heldout: {name} on {n}: {'equal: ok' if why is None else 'FAIL: ' + why}")
            failed += why is not None
            passed += why is None
    print(f"auto_heldout: {passed} equal, {failed} failed, {skipped} modules skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
