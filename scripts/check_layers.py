#!/usr/bin/env python3
"""check_layers.py: the layer table of README.md ("may include") holds in
the code. Every #include of every .c/.h file of a layer must name a header
of the same layer or of a layer the table allows; library headers (mpi.h,
hwloc.h, cblas.h, fftw3.h, jansson.h) only where the table names them.
runtime/ may use the data types of partition/ and cluster/, never their
passes: it must not call them (nor grad/'s transform, grad_module).
MPI: only coll/'s MPI transport includes mpi.h (coll/mpi_layer.h, the one
door every MPI call goes through), and only the MPI transport's files and
api/run_mpi.c (the caller's communicator) include that door; only the MPI
transport's files (coll/mpi_*) call MPI (its MPI_ functions or the door's
tmpi_ ones): the collectives reach other hosts through CollTransport, the runtime
through coll/coll.h's coll_mpi_* functions. The
library reads no environment variable: no getenv (nor environ) in any layer
but tools/, except coll/tuning.c (the MPI launcher's variables). Exits 1
listing every violation.

usage: check_layers.py [SOURCE_DIR]      (default: the parent of scripts/)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

# What a name in the "may include" column stands for among system headers.
LIBRARIES = {
    "hwloc": {"hwloc.h"},
    "BLAS": {"cblas.h", "lapacke.h", "lapack.h"},
    "FFTW": {"fftw3.h"},
    "MPI": {"mpi.h"},
    "jansson": {"jansson.h"},
    "nettle": {"nettle/sha2.h"},
    "GLPK": {"glpk.h"},
}
ALL_LIBRARY_HEADERS = set().union(*LIBRARIES.values())
# The MPI transport: the only files that include mpi.h, and the only ones
# (with api/run_mpi.c, which takes the caller's MPI_Comm) that include its door.
MPI_HEADER_FILES = {"coll/mpi_layer.h"}
MPI_DOOR_USERS = {"coll/mpi_internal.h", "coll/mpi_world.c", "coll/mpi_layer.c", "api/run_mpi.c"}
# The files that may call MPI (MPI_ functions or the door's tmpi_ ones): the MPI
# transport's, coll/mpi_*.
MPI_CALLERS = re.compile(r"coll/mpi_[a-z_]+\.[ch]$")
MPI_CALL = re.compile(r"\b(P?MPI_[A-Z][a-z0-9_]*|tmpi_[a-z0-9_]+)\s*\(")
# The one file of the library that reads the environment (tools/ is the
# command line, not the library).
ENV_READERS = {"coll/tuning.c"}
# Passes of the compile layers: runtime/ executes plans, it never compiles.
PASSES = ["shd_propagate", "spmd_partition", "clu_extract", "clu_cluster_module", "clu_place", "device_layout_build",
          "compile_module", "compile_replan", "compile_plan_load", "grad_module"]


def layer_table():
    """{folder: (allowed folders, allowed library headers)} from README.md."""
    rows = {}
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    order = []
    for line in text.splitlines():
        m = re.match(r"\|\s*`([a-z]+)/`\s*\|.*\|\s*([^|]*)\|\s*$", line)
        if not m or line.count("|") != 4:
            continue
        folder, may = m.group(1), m.group(2).strip()
        if not may:
            continue  # tests, bench, examples: not a layer of the library
        order.append(folder)
        allowed, libs = {folder}, set()
        for word in re.findall(r"[A-Za-z]+", may):
            if word in LIBRARIES:
                libs |= LIBRARIES[word]
            elif word == "include":
                allowed.add("include")
        for word in re.split(r"[,\s]+", may):
            if word in order:
                allowed.add(word)
        if "all of the above" in may:
            allowed |= set(order)
            for f in order[:-1]:
                libs |= rows[f][1]
        rows[folder] = (allowed, libs)
    return rows


def resolve(path, inc):
    """The folder (top-level directory under ROOT) a quoted include names."""
    for base in (os.path.dirname(path), ROOT, os.path.join(ROOT, "include")):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(cand):
            rel = os.path.relpath(cand, ROOT)
            return rel.split(os.sep)[0]
    return None


def main():
    rows = layer_table()
    if not rows:
        print("check_layers: no layer table with a 'may include' column in README.md")
        return 1
    bad = []
    for folder, (allowed, libs) in sorted(rows.items()):
        d = os.path.join(ROOT, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h", ".def")):
                continue
            path = os.path.join(d, name)
            src = open(path, encoding="utf-8", errors="replace").read()
            for n, line in enumerate(src.splitlines(), 1):
                m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
                if not m:
                    continue
                where = "%s/%s:%d" % (folder, name, n)
                rel = "%s/%s" % (folder, name)
                if m.group(2) == "mpi.h" and rel not in MPI_HEADER_FILES:
                    bad.append("%s: <mpi.h> outside the MPI transport (only %s)" % (where, ", ".join(sorted(MPI_HEADER_FILES))))
                if m.group(2).endswith("mpi_layer.h") and rel not in MPI_DOOR_USERS:
                    bad.append("%s: mpi_layer.h outside the MPI transport (only %s)" % (where, ", ".join(sorted(MPI_DOOR_USERS))))
                if m.group(1) == "<":
                    h = m.group(2)
                    if h in ALL_LIBRARY_HEADERS and h not in libs:
                        bad.append("%s: <%s> is not among what %s/ may include" % (where, h, folder))
                    continue
                target = resolve(path, m.group(2))
                if target is None:
                    bad.append('%s: "%s" not found' % (where, m.group(2)))
                elif target not in allowed:
                    bad.append('%s: "%s" is in %s/, which %s/ may not include' % (where, m.group(2), target, folder))
            code = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
            if not MPI_CALLERS.match("%s/%s" % (folder, name)):
                for n, line in enumerate(code.splitlines(), 1):
                    m = MPI_CALL.search(line)
                    if m:
                        bad.append("%s/%s: calls %s outside coll/'s MPI transport (coll/mpi_*: the rest "
                                   "reaches MPI through coll/coll.h)" % (folder, name, m.group(1)))
                        break
            if folder != "tools" and "%s/%s" % (folder, name) not in ENV_READERS:
                for n, line in enumerate(code.splitlines(), 1):
                    if re.search(r"\b(secure_getenv|getenv)\s*\(|\benviron\b", line):
                        bad.append("%s/%s: reads the environment (the library reads none but %s; the "
                                   "command line fills options)" % (folder, name, ", ".join(sorted(ENV_READERS))))
                        break
            if folder == "runtime":
                for p in PASSES:
                    if re.search(r"\b%s\s*\(" % p, code):
                        bad.append("runtime/%s: calls %s, a compile pass (runtime/ executes plans)" % (name, p))
    for b in bad:
        print("check_layers: " + b)
    if not bad:
        print("check_layers: %d layers, every include within the README's table" % len(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
