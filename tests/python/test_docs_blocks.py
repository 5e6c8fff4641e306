"""test_docs_blocks.py: the command examples of the README and docs/ run
(ctest docs_blocks and docs_commands), so the pages cannot drift from what
tessel does.

Two modes. Without arguments (docs_blocks): every code block of
docs/bring-your-model.md, in order, in one temporary directory. With
--marked (docs_commands): the blocks of README.md and every other
docs/*.md page whose info string says `runs` (```sh runs, ```python runs),
each page's in order in a temporary directory of its own that holds
`examples/` (a link to the source tree's), as a reader runs them from the
source tree.

A ```python block runs as its own `python3` process (this interpreter),
unless its first line is `# file: NAME`, which writes it to NAME for a
later block to run; a ```sh block with `bash -euo pipefail`, `tessel` and
this `python3` first on PATH, mpirun allowed as root, oversubscribed, over
TCP. A block that exits non-zero fails the test, naming its line in the
page. In bring-your-model.md any other block language is an error: the
page holds only blocks that run.
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
    """(line, language, info, code) of every fenced block."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^( *)```(\S*)(.*)$", lines[i])  # indented: a block in a list item
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        start, lang, info, body = i + 1, m.group(2), m.group(3).split(), []
        i += 1
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        out.append((start, lang, info, "\n".join(body) + "\n"))
        i += 1
    return out


def environment(work):
    """PATH with tessel and this interpreter as `python3` first; mpirun's
    variables."""
    tessel_bin = pathlib.Path(os.environ["TESSEL_BIN"]).parent
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
    return env


def run_blocks(page, found, work, env):
    for line, lang, _, code in found:
        where = "%s:%d (%s block)" % (page.name, line, lang or "plain")
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


def main():
    if sys.argv[1:] == ["--marked"]:
        pages = [SRC / "README.md"] + sorted(p for p in (SRC / "docs").glob("*.md") if p != PAGE)
        total = 0
        for page in pages:
            found = [b for b in blocks(page.read_text()) if "runs" in b[2]]
            if not found:
                continue
            with tempfile.TemporaryDirectory(prefix="tessel-docs.") as work:
                os.symlink(SRC / "examples", pathlib.Path(work, "examples"))
                run_blocks(page, found, work, environment(work))
            total += len(found)
        assert total >= 3, "only %d blocks marked `runs` in README.md and docs/" % total
        print("test_docs_blocks --marked: ok (%d blocks)" % total)
        return
    found = blocks(PAGE.read_text())
    assert len(found) >= 6, "the page has %d code blocks" % len(found)
    with tempfile.TemporaryDirectory(prefix="tessel-docs.") as work:
        run_blocks(PAGE, found, work, environment(work))
    print("test_docs_blocks: ok (%d blocks)" % len(found))


main()
