"""test_docs_blocks.py: every code block of docs/bring-your-model.md runs
(ctest docs_blocks), so the page cannot drift from what tessel does.

The blocks run in order, in one temporary directory: a ```python block as
its own `python3` process (the JAX venv's), unless its first line is
`# file: NAME`, which writes it to NAME for a later block to run; a ```sh
block with `bash -euo pipefail`, `tessel` and the venv's `python3` first on
PATH, mpirun allowed as root, oversubscribed, over TCP. A block that exits
non-zero fails the test, naming its line in the page. Any other block
language is an error: the page holds only blocks that run.
"""
import sanitize  # noqa: F401  (first: an ASan build restarts with the runtime)
import os
import pathlib
import re
import subprocess
import sys
import tempfile

SRC = pathlib.Path(os.environ.get("TESSEL_SRC", pathlib.Path(__file__).resolve().parents[2]))
PAGE = SRC / "docs" / "bring-your-model.md"


def blocks(text):
    """(line, language, code) of every fenced block."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append((start, lang, "\n".join(body) + "\n"))
        i += 1
    return out


def main():
    tessel_bin = pathlib.Path(os.environ["TESSEL_BIN"]).parent
    found = blocks(PAGE.read_text())
    assert len(found) >= 6, "the page has %d code blocks" % len(found)
    with tempfile.TemporaryDirectory(prefix="tessel-docs.") as work:
        # `python3` is this interpreter (the venv's) however it is started:
        # mpirun's launcher execs it without the venv's own bin on its path
        py_bin = pathlib.Path(work, ".bin")
        py_bin.mkdir()
        wrapper = py_bin / "python3"
        wrapper.write_text('#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
        wrapper.chmod(0o755)
        env = dict(os.environ)
        env["PATH"] = "%s:%s:%s" % (tessel_bin, py_bin, env.get("PATH", ""))
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="tcp,self")
        for line, lang, code in found:
            where = "%s:%d (%s block)" % (PAGE.name, line, lang or "plain")
            if lang == "python" and code.startswith("# file: "):
                name = code.split("\n", 1)[0][len("# file: "):].strip()
                pathlib.Path(work, name).write_text(code)
                continue
            if lang == "python":
                cmd = [sys.executable, "-c", code]
            elif lang == "sh":
                cmd = ["bash", "-euo", "pipefail", "-c", code]
            else:
                raise AssertionError("%s: a block that does not run (language %r)" % (where, lang))
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=240)
            if r.returncode != 0:
                raise AssertionError("%s exited %d\n--- stdout:\n%s\n--- stderr:\n%s"
                                     % (where, r.returncode, r.stdout[-4000:], r.stderr[-4000:]))
            print("%s: ok" % where)
    print("test_docs_blocks: ok (%d blocks)" % len(found))


main()
