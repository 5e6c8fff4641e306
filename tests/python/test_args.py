"""test_args.py: the Python module's argument checks (issue 30): seeds and
step counts that ctypes would wrap are refused (random=2**64+3 ran as seed
3, random=-1 as 2**64-1, steps=-1 as one step), and a 0-d array binds an
f32[] parameter, not an f32[1] one (np.ascontiguousarray made it 1-d).
Expected values are worked out by hand. Run as test_tessel.py is (ctest
python_args; exits 77 without numpy or, in sanitizer builds, without the
ASan runtime to preload).
"""
import os
import sys
import unittest

if os.environ.get("TESSEL_SANITIZE", "").upper() in ("1", "ON", "TRUE", "YES") and \
        "libasan" not in os.environ.get("LD_PRELOAD", ""):
    if os.environ.get("TESSEL_PRELOAD"):
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, LD_PRELOAD=os.environ["TESSEL_PRELOAD"]))
    print("SKIP: sanitizer build and no ASan runtime to preload into python (TESSEL_PRELOAD)")
    sys.exit(77)
try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by %s" % sys.executable)
    sys.exit(77)

import tessel  # noqa: E402

SCALAR = """HloModule s
ENTRY main {
  x = f32[] parameter(0)
  ROOT y = f32[] add(x, x)
}
"""
VECTOR = SCALAR.replace("f32[]", "f32[1]")


class Args(unittest.TestCase):
    def setUp(self):
        self.plan = tessel.compile(tessel.parse_module(SCALAR))

    def test_seed_range(self):
        for bad in (2**64 + 3, 2**64, -1):
            with self.assertRaises(ValueError) as cm:
                self.plan.run(random=bad)
            self.assertIn("random must be a seed from 0 to 2**64-1, not %d" % bad, str(cm.exception))
        # the largest seed is a seed
        self.plan.run(random=2**64 - 1)

    def test_steps_range(self):
        for bad in (-1, -7, 2**63):
            with self.assertRaises(ValueError) as cm:
                self.plan.run([np.float32(1)], steps=bad)
            self.assertIn("steps must be from 0 (one step) to 2**63-1, not %d" % bad, str(cm.exception))

    def test_zero_d(self):
        y, = self.plan.run([np.array(1.5, np.float32)])
        self.assertEqual(y.shape, ())
        self.assertEqual(float(y), 3.0)
        # a 0-d array is no f32[1]: refused, not bound silently
        vec = tessel.compile(tessel.parse_module(VECTOR))
        with self.assertRaises(tessel.Error):
            vec.run([np.array(1.5, np.float32)])
        y, = vec.run([np.array([1.5], np.float32)])
        self.assertEqual(y.tolist(), [3.0])


if __name__ == "__main__":
    unittest.main()
