# lib.bash: helpers sourced by the end-to-end tests (tests/e2e/*.sh).
# Not a test itself (ctest runs *.sh only). Expects TESSEL and TESSEL_SRC.
#
#   npy_write FILE DTYPE SHAPE VALUES...   write a .npy with python3's struct
#                                          module (no numpy): DTYPE like <f4,
#                                          SHAPE like "4,10" or "" (scalar)
#   npy_dump FILE                          print "DESCR SHAPE v0 v1 ..." (floats %.9g)
#   expect_status WANT CMD...              run CMD, save stdout/stderr in
#                                          $OUT/$ERR, fail unless status WANT
#   expect_in FILE TEXT                    fail unless FILE contains TEXT
#   expect_through_fifo FIFO FILE CMD...   run CMD (which writes FIFO) while
#                                          a background cat copies FIFO into
#                                          FILE; fail unless status 0
#   same_outputs REF DIR WHAT              every REF/*.npy has its twin in DIR
#                                          within the oracle's tolerance (NumPy)
#   fail MSG                               print and exit 1

: "${TESSEL:?TESSEL must name the tessel binary}"
: "${TESSEL_SRC:?TESSEL_SRC must name the source tree}"

# The system "$PY" starts in a fraction of the time of a pyenv shim.
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessel-e2e.XXXXXX")
# mpirun is tests/bin/mpirun, which launches once more only after Open
# MPI's launcher race (its header says when); each such launch is noted
# and the notes printed when the test ends.
PATH="$TESSEL_SRC/tests/bin:$PATH"
export TESSEL_MPIRUN_NOTES="$WORK/mpirun.notes"
# Open MPI's point-to-point layer named (ob1, the one it selects here
# anyway): without it every rank's MPI_Init first opens the cm component,
# which probes the psm and psm2 transports this machine lacks; 0.2 s of
# each launch (mpirun -np 2 tessel run: 0.69 -> 0.48 s on a busy machine).
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
trap '[ ! -s "$TESSEL_MPIRUN_NOTES" ] || cat "$TESSEL_MPIRUN_NOTES"; rm -rf "$WORK"' EXIT
OUT="$WORK/stdout"
ERR="$WORK/stderr"

fail() {
    echo "FAIL: $*" >&2
    if [ -f "$OUT" ]; then echo "--- stdout:" >&2; cat "$OUT" >&2; fi
    if [ -f "$ERR" ]; then echo "--- stderr:" >&2; cat "$ERR" >&2; fi
    exit 1
}

expect_status() {
    local want=$1
    shift
    local got=0
    "$@" >"$OUT" 2>"$ERR" || got=$?
    [ "$got" = "$want" ] || fail "'$*' exited $got, expected $want"
}

expect_in() {
    grep -qF -- "$2" "$1" || fail "$1 does not contain: $2"
}

# A reader is there for tessel only once the background cat is inside its
# open() of the FIFO (which then waits for a writer); until then tessel
# finds no process reading it and refuses (status 2, nothing written), so
# CMD is run again on that refusal, for up to 10 s: started at once, cat lost
# that race now and then (CI, e2e_hostile_files). The reader is bounded and
# killed on a failure: left waiting on the FIFO it held the test's output
# open, and the test hung until ctest's timeout.
expect_through_fifo() {
    local fifo=$1 file=$2 got=2
    shift 2
    timeout 60 cat "$fifo" >"$file" &
    local reader=$!
    for _ in $(seq 100); do
        got=0
        "$@" >"$OUT" 2>"$ERR" || got=$?
        [ "$got" = 2 ] && grep -qF "a FIFO that no process reads" "$ERR" || break
        sleep 0.1
    done
    if [ "$got" != 0 ]; then
        kill "$reader" 2>/dev/null || true
        fail "'$*' exited $got, expected 0 (with a reader on $fifo)"
    fi
    wait "$reader" || fail "the reader of $fifo failed"
}

npy_write() {
    "$PY" - "$@" <<'PY'
import struct, sys
path, descr, shape = sys.argv[1], sys.argv[2], sys.argv[3]
vals = sys.argv[4:]
dims = [int(d) for d in shape.split(',') if d != '']
fmt = {'<f4': 'f', '<f8': 'd', '<f2': 'e', '<i4': 'i', '<i8': 'q', '|i1': 'b', '|u1': 'B',
       '|b1': '?', '<u4': 'I', '<i2': 'h', '<u2': 'H', '<u8': 'Q'}[descr]
conv = float if fmt in 'fde' else (lambda s: s in ('1', 'True', 'true')) if fmt == '?' else int
tup = '()' if not dims else '(%d,)' % dims[0] if len(dims) == 1 else '(' + ', '.join(map(str, dims)) + ')'
hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, tup)
pad = (64 - (10 + len(hdr) + 1) % 64) % 64
hdr = hdr + ' ' * pad + '\n'
with open(path, 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode())
    f.write(struct.pack('<%d%s' % (len(vals), fmt), *[conv(v) for v in vals]))
PY
}

npy_dump() {
    "$PY" - "$1" <<'PY'
import ast, struct, sys
data = open(sys.argv[1], 'rb').read()
assert data[:6] == b'\x93NUMPY', 'bad magic'
if data[6] == 1:
    hl = struct.unpack('<H', data[8:10])[0]; off = 10
else:
    hl = struct.unpack('<I', data[8:12])[0]; off = 12
h = ast.literal_eval(data[off:off + hl].decode())
assert not h['fortran_order']
fmt = {'<f4': 'f', '<f8': 'd', '<f2': 'e', '<i4': 'i', '<i8': 'q', '|i1': 'b', '|u1': 'B',
       '|b1': '?', '<u4': 'I', '<i2': 'h', '<u2': 'H', '<u8': 'Q'}[h['descr']]
n = 1
for d in h['shape']:
    n *= d
body = data[off + hl:]
size = struct.calcsize('<' + fmt)
assert len(body) == n * size, 'data size %d != %d' % (len(body), n * size)
vals = struct.unpack('<%d%s' % (n, fmt), body)
out = ['%.9g' % v if fmt in 'fde' else str(int(v)) for v in vals]
print(h['descr'], ','.join(map(str, h['shape'])), *out)
PY
}

# The oracle's comparison (DESIGN.md): ints bit-equal, floats within 1e-4
# (f32) / 1e-5 (f64) / 2e-3 (f16) of the reference's largest magnitude.
npy_match() {
    "$PY" - "$1" "$2" <<'PY'
import ast, math, struct, sys
def load(p):
    data = open(p, 'rb').read()
    hl, off = (struct.unpack('<H', data[8:10])[0], 10) if data[6] == 1 else (struct.unpack('<I', data[8:12])[0], 12)
    h = ast.literal_eval(data[off:off + hl].decode())
    fmt = {'<f2': 'e', '<f4': 'f', '<f8': 'd', '<i4': 'i', '<i8': 'q', '|b1': '?', '|u1': 'B',
           '|i1': 'b', '<u4': 'I', '<i2': 'h', '<u2': 'H', '<u8': 'Q'}[h['descr']]
    body = data[off + hl:]
    n = len(body) // struct.calcsize(fmt)
    return h['descr'], h['shape'], struct.unpack('<%d%s' % (n, fmt), body)
(da, sa, a), (db, sb, b) = load(sys.argv[1]), load(sys.argv[2])
if (da, sa) != (db, sb):
    sys.exit('%s %s vs reference %s %s' % (db, sb, da, sa))
if da[1] != 'f':
    if a != b:
        sys.exit('integers differ')
    sys.exit(0)
scale = max([abs(x) for x in a if math.isfinite(x)] + [0.0])
tol = {'<f8': 1e-5, '<f2': 2e-3}.get(da, 1e-4) * scale
for i, (x, y) in enumerate(zip(a, b)):
    ok = math.isnan(y) if math.isnan(x) else (x == y if math.isinf(x) else abs(x - y) <= tol)
    if not ok:
        sys.exit('element %d: %r, reference %r' % (i, y, x))
PY
}

# Every output of REF has its twin in DIR within the oracle's tolerance
# (DESIGN.md: 1e-4 of the largest magnitude for f32 and c64, 1e-5 for f64
# and c128, 2e-3 for f16; integers and pred equal), with NumPy
# (same_outputs.py, which also takes several triples in one process).
same_outputs() { # same_outputs REF DIR WHAT
    "$PY" "$TESSEL_SRC/tests/e2e/same_outputs.py" "$1" "$2" "$3" || fail "$3: differs from --reference"
}

# instantiate FILE N: a model template of tests/models with @N (the device
# count) and @D (the device list 0,...,N-1) filled in, as $WORK/NAME.N.hlo
# (its path is printed). One device: a tile assignment of one device is
# spelled {replicated}, as test_oracle.c's instantiate does, both as an
# instruction's sharding={devices=[..]0} and as an element of a tuple's
# sharding={{devices=[..]0}, ...}.
instantiate() {
    local name one=""
    name=$(basename "$1" .hlo)
    [ "$2" != 1 ] || one='s/{devices=\[[0-9,]*\]0}/{replicated}/g'
    sed -e "s/@N/$2/g" -e "s/@D/$(seq -s, 0 $(($2 - 1)))/g" -e "${one:-s/^\$//}" "$1" >"$WORK/$name.$2.hlo"
    echo "$WORK/$name.$2.hlo"
}

# plan_resign FILE: give an edited plan file the digest line of its
# contents (docs/plan.md), so that a test reaches the checks behind the
# digest (a plan is never trusted, even when its digest is right).
plan_resign() {
    "$PY" - "$1" <<'PY'
import hashlib, sys
b = open(sys.argv[1], "rb").read()
lines = b.splitlines(keepends=True)
if lines and lines[-1].startswith(b"// TesselDigest "):
    lines = lines[:-1]
body = b"".join(lines)
if body and not body.endswith(b"\n"):
    body += b"\n"
open(sys.argv[1], "wb").write(body + b"// TesselDigest sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n")
PY
}
