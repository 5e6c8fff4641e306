"""test_args.py: the Python module's argument checks (issue 30): seeds and
step counts that ctypes would wrap are refused (random=2**64+3 ran as seed
3, random=-1 as 2**64-1, steps=-1 as one step), and a 0-d array binds an
f32[] parameter, not an f32[1] one (np.ascontiguousarray made it 1-d); a NUL
inside a path or a key is a ValueError (the C string was cut at it, so
"in.npy\0junk" read in.npy and "0\0junk" bound parameter 0).
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
        for bad in (-1, -7, 10**12 + 1, 2**63 - 1, 2**63):
            with self.assertRaises(ValueError) as cm:
                self.plan.run([np.float32(1)], steps=bad)
            self.assertIn("steps must be from 0 (one step) to 1000000000000, not %d" % bad, str(cm.exception))

    def test_int_types(self):
        # steps=True ran one step and random=True drew seed 0 (a bool is an
        # int to operator.index); steps=False and steps=0.0 were "one step"
        # through `or 0`: every non-int is a TypeError naming the option
        for what, bad in (("steps", True), ("steps", False), ("steps", 2.0), ("steps", 0.0), ("steps", "3"),
                          ("random", True), ("random", False), ("random", 1.5), ("random", np.bool_(True))):
            with self.assertRaises(TypeError) as cm:
                self.plan.run([np.float32(1)], **{what: bad})
            self.assertIn("tessel: %s must be an int, not " % what, str(cm.exception))
        with self.assertRaises(TypeError):
            tessel.compile(SCALAR, num_partitions=True)
        # integer NumPy scalars are ints
        y, = self.plan.run([np.float32(1)], steps=np.int64(2))
        self.assertEqual(float(y), 2.0)
        y, = self.plan.run(random=np.uint64(3))

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

    def test_device_counts(self):
        # num_partitions=2**64+2 compiled for 2 partitions (ctypes wraps)
        for what in ("num_partitions", "num_replicas", "hosts", "local_devices"):
            for bad in (-1, 2**63, 2**64 + 2):
                with self.assertRaises(ValueError) as cm:
                    tessel.compile(SCALAR, **{what: bad})
                self.assertIn("%s must be from 0 (the default) to 2**63-1, not %d" % (what, bad), str(cm.exception))
        with self.assertRaises(TypeError):
            tessel.compile(SCALAR, num_partitions=2.5)

    def test_other_arrays(self):
        vec = tessel.compile(tessel.parse_module(VECTOR))
        # a strided view and a big-endian array are the values they hold
        y, = vec.run([np.arange(2, dtype=np.float32)[::2]])
        self.assertEqual(y.tolist(), [0.0])
        y, = vec.run([np.array([1.5], ">f4")])
        self.assertEqual(y.tolist(), [3.0])
        for bad in (np.array([1.5]), np.array([1], np.int64), np.array([None], object)):
            with self.assertRaises(tessel.Error) as cm:
                vec.run([bad])
            self.assertIn("expected <f4", str(cm.exception))

    def test_nul(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "in.npy")
            np.save(f, np.array(1.5, np.float32))
            y, = self.plan.run({0: f})
            self.assertEqual(float(y), 3.0)
            for inputs in ({0: f + "\0.does-not-exist"}, {"0\0 anything": np.array(1.5, np.float32)}):
                with self.assertRaises(ValueError) as cm:
                    self.plan.run(inputs)
                self.assertIn("holds a NUL character", str(cm.exception))
        with self.assertRaises(ValueError):
            self.plan.why("y\0z")


if __name__ == "__main__":
    unittest.main()
