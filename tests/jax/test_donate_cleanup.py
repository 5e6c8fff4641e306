"""test_donate_cleanup.py: tests/jax/test_donate.py leaves no work
directory behind, whatever way it ends (issue 32: 29 /tmp/tessel-donate-*
directories were left after a day's runs: it made one with mkdtemp and
never removed it, passed or failed).

test_donate.py runs with TMPDIR a fresh directory of this test's own and
TESSEL_BIN a stand-in for tessel:
  1. a failed check: the stand-in exits 1 (/bin/false), so test_donate's
     first `tessel plan` fails; test_donate exits 1, and no
     tessel-donate-* is left in TMPDIR;
  2. a signal: the stand-in writes a mark and sleeps; once the mark is
     there (test_donate is waiting on it, its work directory made), this
     test sends SIGTERM (what ctest's timeout and a job's end send);
     test_donate exits 1 within 60 s, having killed the stand-in, and no
     tessel-donate-* is left.
Exit 0 when both hold, 1 otherwise (77: JAX missing).
"""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
DONATE = HERE / "test_donate.py"

try:
    import jax  # noqa: F401  (test_donate needs it; without it both skip)
except ImportError as e:  # pragma: no cover
    print("SKIP: %s" % e)
    sys.exit(77)


def left(tmp):
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("tessel-donate-"))


def env_with(tmp, tessel):
    e = dict(os.environ)
    e["TMPDIR"] = str(tmp)
    e["TESSEL_BIN"] = str(tessel)
    return e


def failed_check(tmp):
    p = subprocess.run([sys.executable, str(DONATE)], env=env_with(tmp, "/bin/false"), capture_output=True,
                       text=True, timeout=240)
    if p.returncode != 1 or "FAIL: tessel plan" not in p.stderr:
        sys.exit("FAIL: test_donate with a failing tessel: exit %d, want 1 and 'FAIL: tessel plan'\n%s" % (
            p.returncode, p.stderr[-2000:]))
    if left(tmp):
        sys.exit("FAIL: test_donate failed a check and left %s in %s" % (", ".join(left(tmp)), tmp))
    print("ok a failed check: test_donate exits 1 and leaves no tessel-donate-* behind")


def signalled(tmp):
    mark = tmp / "tessel-started"
    stand_in = tmp / "tessel-stand-in"
    stand_in.write_text("#!/bin/sh\necho $$ > '%s'\nexec sleep 120\n" % mark)
    stand_in.chmod(0o755)
    p = subprocess.Popen([sys.executable, str(DONATE)], env=env_with(tmp, stand_in), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (mark.exists() and mark.read_text().strip()) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not mark.exists() or p.poll() is not None:
            sys.exit("FAIL: test_donate never ran the stand-in tessel (exit %s)\n%s" % (
                p.poll(), p.stderr.read()[-2000:] if p.poll() is not None else ""))
        if not left(tmp):
            sys.exit("FAIL: test_donate runs tessel with no tessel-donate-* work directory in TMPDIR %s" % tmp)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    child = int(mark.read_text())
    try:
        os.kill(child, 0)
        alive = True
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        alive = False
    if p.returncode != 1 or "FAIL: SIGTERM" not in err:
        sys.exit("FAIL: test_donate on SIGTERM: exit %d, want 1 and 'FAIL: SIGTERM'\n%s" % (p.returncode, err[-2000:]))
    if left(tmp) or alive:
        sys.exit("FAIL: test_donate on SIGTERM left %s in %s%s" % (
            ", ".join(left(tmp)) or "nothing", tmp, " and its tessel running" if alive else ""))
    print("ok SIGTERM while tessel runs: test_donate kills it, exits 1 and leaves no tessel-donate-* behind")


def main():
    with tempfile.TemporaryDirectory(prefix="tessel-donate-cleanup.") as t:
        for case in (failed_check, signalled):
            tmp = pathlib.Path(t) / case.__name__
            tmp.mkdir()
            case(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
