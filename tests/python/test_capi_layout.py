"""test_capi_layout.py: python/tessel/_capi.py declares the structs of
include/tessel.h for ctypes by hand; they must match the C compiler's
layout byte for byte. api_layout (built from tests/python/api_layout.c,
path in TESSEL_API_LAYOUT) prints every struct's size and every field's
offset; this compares them with the ctypes declarations, and checks that
every function of the header that the module declares exists with that
name in the header. _capi.py is loaded from its file, without loading the
library (so this runs in sanitizer builds too).
"""
import ctypes
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

SRC = pathlib.Path(os.environ.get("TESSEL_SRC", pathlib.Path(__file__).resolve().parents[2]))
spec = importlib.util.spec_from_file_location("tessel_capi", SRC / "python" / "tessel" / "_capi.py")
capi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capi)

want = subprocess.run([os.environ["TESSEL_API_LAYOUT"]], check=True, capture_output=True,
                      text=True).stdout.split("\n")
bad = []
n = 0
for line in filter(None, want):
    name, value = line.rsplit(" ", 1)
    value = int(value)
    if name.endswith(" size"):
        got = ctypes.sizeof(getattr(capi, name[:-5]))
    elif "." in name:
        struct, field = name.split(".")
        got = getattr(getattr(capi, struct), field).offset
    elif name == "TS_MAX_RANK":
        got = capi.TS_MAX_RANK
    else:
        continue
    n += 1
    if got != value:
        bad.append("%s: C says %d, _capi.py %d" % (name, value, got))
# every struct's field list is complete: as many fields as the C side lists
for struct in ("TsDiag", "TsLimits", "TsCompileOptions", "TsGradOptions", "TsArray", "TsArrayInfo", "TsInput", "TsRunOptions", "TsTuning", "TsStepInfo",
               "TsDumpOptions"):
    c_fields = [l.split(" ")[0].split(".")[1] for l in want if l.startswith(struct + ".")]
    py_fields = [f[0] for f in getattr(capi, struct)._fields_]
    if c_fields != py_fields:
        bad.append("%s: fields %s in C, %s in _capi.py" % (struct, c_fields, py_fields))
header = (SRC / "include" / "tessel.h").read_text()
for fn in capi.PROTOTYPES:
    if not re.search(r"\b%s\(" % fn, header):
        bad.append("%s: declared in _capi.py, not in tessel.h" % fn)
for b in bad:
    print("FAIL: " + b)
if not bad:
    print("capi layout: %d sizes and offsets match tessel.h; %d functions declared" % (n, len(capi.PROTOTYPES)))
sys.exit(1 if bad else 0)
