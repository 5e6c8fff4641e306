#!/usr/bin/env bash
# install.sh: `cmake --install` into a fresh prefix, then the installed
# Python module, run with TESSEL_LIBRARY unset and the build tree out of
# reach, finds the installed libtessel.so beside it (through _install.py)
# and compiles and runs examples/mlp.hlo on 2 devices against NumPy. Also
# checks the installed files: bin/tessel, lib/libtessel.a, libtessel.so
# with its soname link, include/tessel.h, lib/pkgconfig/tessel.pc and the
# package in lib/python3/dist-packages/tessel (TESSEL_PYTHON_DIR's default);
# `pkg-config --cflags --libs tessel` names the prefix installed into, and
# a C program compiles and links with those flags and runs.
# Exits 77 (ctest: skipped) where PYTHON cannot import numpy. In sanitizer
# builds python runs with LD_PRELOAD=$TESSEL_PRELOAD (the ASan runtime, which
# an ASan library loaded by ctypes needs), or only the files are checked.
# Expects PYTHON, TESSEL_BUILD and TESSEL_SRC (ctest sets them).
set -euo pipefail
: "${PYTHON:?}" "${TESSEL_BUILD:?}" "${TESSEL_SRC:?}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessel-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

cmake --install "$TESSEL_BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "cmake --install"; }
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$WORK/prefix"/lib*/pkgconfig/tessel.pc)
[ -n "$libdir" ] || fail "no libdir in tessel.pc"
P=$WORK/prefix
for f in bin/tessel "$libdir/libtessel.a" "$libdir/libtessel.so" include/tessel.h "$libdir/pkgconfig/tessel.pc" \
    "$libdir/python3/dist-packages/tessel/__init__.py" "$libdir/python3/dist-packages/tessel/_capi.py" \
    "$libdir/python3/dist-packages/tessel/_install.py"; do
    [ -e "$P/$f" ] || fail "cmake --install did not install $f"
done
soname=$(readelf -d "$P/$libdir/libtessel.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -e "$P/$libdir/$soname" ] || fail "no $soname beside libtessel.so"
echo "install: files in place ($libdir/libtessel.so, soname $soname, $libdir/python3/dist-packages/tessel)"

# pkg-config finds the prefix the tree was installed under (not the one
# configured), and a C program compiles and links against it
flags=$(PKG_CONFIG_PATH="$P/$libdir/pkgconfig" pkg-config --cflags --libs tessel) || fail "pkg-config tessel"
case " $flags " in
*" -I$P/include "*" -L$P/$libdir -ltessel "*) ;;
*) fail "pkg-config --cflags --libs tessel does not name the prefix installed into ($P): $flags" ;;
esac
cat >"$WORK/hello.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <tessel.h>
int main(void) { printf("%s\n", ts_version()); return strlen(ts_version()) ? 0 : 1; }
C
SAN=()
case "${TESSEL_SANITIZE:-}" in ON | 1 | TRUE | YES) SAN=(-fsanitize=address,undefined) ;; esac
# shellcheck disable=SC2086 # the flags are words
cc "${SAN[@]}" -o "$WORK/hello" "$WORK/hello.c" $flags || fail "a C program does not build with pkg-config's flags"
ver=$(LD_LIBRARY_PATH="$P/$libdir" "$WORK/hello") || fail "the program linked against the installed library failed"
echo "install: pkg-config tessel gives $flags; a C program built with it prints ts_version() $ver"

PRELOAD=()
case "${TESSEL_SANITIZE:-}" in
ON | 1 | TRUE | YES)
    if [ -z "${TESSEL_PRELOAD:-}" ]; then
        echo "install: sanitizer build and no ASan runtime to preload (TESSEL_PRELOAD): the module is not loaded"
        exit 0
    fi
    PRELOAD=(LD_PRELOAD="$TESSEL_PRELOAD")
    ;;
esac
if ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: $PYTHON cannot import numpy"
    exit 77
fi
# move the installed tree: the module finds the library relative to itself
mv "$P" "$WORK/moved"
cd "$WORK"
env -u TESSEL_LIBRARY -u LD_LIBRARY_PATH "${PRELOAD[@]}" PYTHONPATH="$WORK/moved/$libdir/python3/dist-packages" \
    "$PYTHON" - "$TESSEL_SRC/examples/mlp.hlo" "$WORK/moved" <<'PY' || fail "the installed module"
import os, sys
import numpy as np
import tessel
lib = os.path.realpath(tessel.library_path)
assert lib.startswith(os.path.realpath(sys.argv[2]) + os.sep), "loaded %s, not the installed library" % lib
plan = tessel.compile(open(sys.argv[1]).read(), num_partitions=2)
rng = np.random.default_rng(3)
x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32, 8)])
y, = plan.run([x, w1, w2])
want = np.tanh(x.astype(np.float64) @ w1) @ w2
err = np.max(np.abs(y - want))
assert err <= 1e-4 * np.max(np.abs(want)), err
print("install: the moved installed module loaded %s and ran mlp.hlo on 2 devices (max error %.3g)"
      % (os.path.relpath(lib, sys.argv[2]), err))
PY
