"""why_all.py: every collective of every plan has a specific reason.

Partitions every model of tests/models (each @N/@D template for every
device count its "devices:" line lists but 1) and every module of the
conformance corpora (../shared/conformance: xla_spmd for its manifest's
device count, xla_wild as written; skipped where absent) with
`tessel plan --format json`, and checks each collective's "why": a known
kind, the instruction that asked for it with its line, a text that names
what the op needs rather than one of the generic fallbacks below, an
operand reshard saying in parentheses what the op does with the dim it
cannot take split, and an "avoid" line (where there is one) costed in
bytes per device. Modules tessel refuses are skipped (the conformance
tests hold them to account); at least MIN_COLLECTIVES collectives must
be checked (MIN_MODEL_COLLECTIVES of tests/models where the corpora are
absent), so that the test cannot pass on nothing.

usage: why_all.py TESSEL SRC_DIR SHARED_DIR WORK_DIR [STEP]

STEP (default 1): every STEP-th module of that list alone, and at least
MIN_COLLECTIVES / STEP collectives (the ASan build's fixed sample).
"""
import glob
import json
import os
import re
import subprocess
import sys

GENERIC = (
    "the partitioner needs it",
    "needs it (operand",
    "leaves a partial result",
    "contracts dims split over",
    "sums over input features split",
    "statistics over dims split",
    "its rule takes dim",
    "its rule splits dim",
)
KINDS = {"operand", "partial", "result", "output", "halo", "rule"}
MIN_COLLECTIVES = 500
MIN_MODEL_COLLECTIVES = 200   # tests/models alone, where ../shared is absent


def models(src, work):
    for f in sorted(glob.glob(os.path.join(src, "tests/models/**/*.hlo"), recursive=True)):
        text = open(f).read()
        if "@N" not in text:
            yield f, []
            continue
        m = re.search(r"devices:\s*([0-9][0-9, ]*)", text)
        for n in (m.group(1).replace(" ", "").split(",") if m else ["2"]):
            if not n or int(n) < 2:
                continue
            g = os.path.join(work, "%s.%s.hlo" % (os.path.basename(f)[:-4], n))
            with open(g, "w") as out:
                out.write(text.replace("@N", n).replace("@D", ",".join(map(str, range(int(n))))))
            yield g, []


def corpus(shared):
    spmd = os.path.join(shared, "conformance/xla_spmd")
    if os.path.isfile(os.path.join(spmd, "manifest.tsv")):
        for line in open(os.path.join(spmd, "manifest.tsv")).read().splitlines()[1:]:
            p = line.split("\t")
            yield os.path.join(spmd, "modules", p[0]), ["--num-partitions", p[2]]
    wild = os.path.join(shared, "conformance/xla_wild")
    if os.path.isfile(os.path.join(wild, "manifest.tsv")):
        for line in open(os.path.join(wild, "manifest.tsv")).read().splitlines()[1:]:
            yield os.path.join(wild, "modules", line.split("\t")[0]), []


def problems(col):
    w = col.get("why")
    if not w:
        return "no reason recorded"
    if w.get("kind") not in KINDS:
        return "kind %r" % w.get("kind")
    t = w.get("text") or ""
    if not t:
        return "empty text"
    if not w.get("instruction") or w.get("line") is None:
        return "no instruction or line"
    for g in GENERIC:
        if g in t:
            return "generic reason (%r)" % g
    if w["kind"] == "operand" and " (" not in t.split(" needs it ", 1)[-1]:
        return "operand reshard without what the op needs"
    a = w.get("avoid")
    if a is not None and "bytes per device" not in a:
        return "avoid line without its cost"
    return None


def main():
    tessel, src, shared, work = sys.argv[1:5]
    step = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    checked = plans = 0
    bad = []
    for f, flags in (list(models(src, work)) + list(corpus(shared)))[::step]:
        try:
            r = subprocess.run([tessel, "plan", f, "--format", "json"] + flags, capture_output=True, text=True,
                               timeout=120)
        except subprocess.TimeoutExpired:
            bad.append("%s: plan timed out" % f)
            continue
        if r.returncode != 0:
            continue
        plans += 1
        for c in json.loads(r.stdout).get("clusters", []):
            for col in c.get("collectives") or []:
                checked += 1
                p = problems(col)
                if p:
                    bad.append("%s: %s %s: %s: %s" % (os.path.basename(f), col.get("opcode"), col.get("name"), p,
                                                     (col.get("why") or {}).get("text")))
    print("why_all: %d plans, %d collectives checked, %d without a specific reason" % (plans, checked, len(bad)))
    for b in bad[:40]:
        print("  " + b)
    if bad:
        return 1
    least = MIN_COLLECTIVES
    if not os.path.isdir(os.path.join(shared, "conformance")):
        # Without the corpora (../shared absent) tests/models alone is
        # checked, which holds about 280 collectives.
        least = MIN_MODEL_COLLECTIVES
        print("why_all: the conformance corpora are absent (%s): tests/models only" % shared)
    if checked < least // step:
        print("why_all: only %d collectives (expected at least %d)" % (checked, least // step))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
