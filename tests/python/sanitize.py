"""sanitize.py: imported first by the Python tests (test_tessel.py,
test_jax_front.py, jax_mpi.py, test_docs_blocks.py). In a sanitizer build (TESSEL_SANITIZE=ON) an
ASan libtessel.so loads into python only after the ASan runtime: the test
starts again with LD_PRELOAD=$TESSEL_PRELOAD (ctest gives the compiler's
runtimes), or exits 77 (skip) where there are none."""
import os
import sys

if os.environ.get("TESSEL_SANITIZE", "").upper() in ("1", "ON", "TRUE", "YES") and \
        "libasan" not in os.environ.get("LD_PRELOAD", ""):
    if os.environ.get("TESSEL_PRELOAD"):
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, LD_PRELOAD=os.environ["TESSEL_PRELOAD"]))
    print("SKIP: sanitizer build and no ASan runtime to preload into python (TESSEL_PRELOAD)")
    sys.exit(77)
