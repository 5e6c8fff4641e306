#!/usr/bin/env python3
"""check_headers.py: every layer's header is a true table of contents.

Each layer folder has one header whose opening comment lists its files
(STYLE.md: "the header reads as a table of contents"). A folder's private
headers that this comment names (partition/prop_internal.h, ...) may hold
the list of a group of files in their own opening comment. This check
fails when a .c file, a private .h header or a .def table of a layer is
named in neither, or when they name a
.c file the folder does not have (a deleted or renamed file; files of
another folder are written with it, runtime/local.c, and not checked).
It also fails when two .c files of these folders share a base name
(api/plan.c beside partition/plan.c): a name says what its file does, and
a file is found, cited and merged by its name alone.

Usage: check_headers.py [SOURCE_DIR] | --self-test   (default: the repository this
script lives in). Exit 0 when every header is true, 1 otherwise, with one
line per problem: HEADER: error: ...
"""
import os
import re
import sys

# folder -> the header that is its table of contents
LAYERS = {
    "ir": "ir.h",
    "partition": "partition.h",
    "auto": "auto.h",
    "cluster": "cluster.h",
    "device": "device.h",
    "compile": "compile.h",
    "coll": "coll.h",
    "runtime": "runtime.h",
    "grad": "grad.h",
    "api": "api_internal.h",
    "tools": "cli.h",
}


# A file name not preceded by a folder ("runtime/local.c") or a letter.
NAME = r"(?<![\w/.-])([A-Za-z_][\w-]*\.%s)\b"


def opening_comment(path):
    """The first /* ... */ block of a C header: its table of contents."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"/\*.*?\*/", text, re.S)
    return m.group(0) if m else ""


def check(root):
    problems = []
    for folder, header in LAYERS.items():
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        files = sorted(f for f in os.listdir(d) if f.endswith(".c"))
        if not files:
            continue
        hpath = os.path.join(d, header)
        rel = os.path.join(folder, header)
        if not os.path.isfile(hpath):
            problems.append("%s: error: missing: the header of %s/" % (rel, folder))
            continue
        text = opening_comment(hpath)
        for h in sorted(set(re.findall(NAME % "h", text))):
            if h != header and os.path.isfile(os.path.join(d, h)):
                text += opening_comment(os.path.join(d, h))
        named = set(re.findall(NAME % "c", text))
        for c in files:
            if c not in named:
                problems.append("%s: error: %s/%s is not named in its folder's header" % (rel, folder, c))
        # The folder's private headers and op tables are files too.
        parts = set(re.findall(NAME % "h", text)) | set(re.findall(NAME % "def", text))
        for h in sorted(f for f in os.listdir(d) if f.endswith((".h", ".def")) and f != header):
            if h not in parts:
                problems.append("%s: error: %s/%s is not named in its folder's header" % (rel, folder, h))
        # A placeholder such as prop_FAMILY.c names no file.
        for c in sorted(n for n in named - set(files) if not re.search(r"[A-Z]{2}", n)):
            # Files of other folders are named with their folder (runtime/local.c).
            problems.append("%s: error: names %s, which %s/ does not have" % (rel, c, folder))
    return problems + duplicate_names(root)


def duplicate_names(root):
    """One problem per .c base name found in more than one layer folder."""
    where = {}
    for folder in LAYERS:
        d = os.path.join(root, folder)
        if os.path.isdir(d):
            for f in sorted(os.listdir(d)):
                if f.endswith(".c"):
                    where.setdefault(f, []).append(folder + "/" + f)
    return ["%s: error: %s share a base name: name each file for what it does" % (paths[0], " and ".join(paths))
            for name, paths in sorted(where.items()) if len(paths) > 1]


def self_test():
    """The check catches a file (or private header) without its line and a line without its file."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "ir"))
        os.mkdir(os.path.join(root, "cluster"))
        for name, text in [("ir/ir.h", "/*\n * a.c  one\n * gone.c  two\n */\n"), ("ir/a.c", ""), ("ir/b.c", ""),
                           ("ir/hidden.h", ""), ("cluster/cluster.h", "/*\n * a.c  the same name\n */\n"),
                           ("cluster/a.c", "")]:
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = check(root)
    want = ["ir/ir.h: error: ir/b.c is not named in its folder's header",
            "ir/ir.h: error: ir/hidden.h is not named in its folder's header",
            "ir/ir.h: error: names gone.c, which ir/ does not have",
            "ir/a.c: error: ir/a.c and cluster/a.c share a base name: name each file for what it does"]
    if got != want:
        print("self-test failed: %r" % got)
        return 1
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
