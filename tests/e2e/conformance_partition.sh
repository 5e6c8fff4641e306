#!/usr/bin/env bash
# conformance_partition.sh: the conformance corpora (../shared/conformance
# xla_wild and xla_spmd) through `tessel compile` and `--auto-shard --mesh
# 2 and 4`, on a fixed sample (conformance_partition.py: its REFUSED and
# MUST_EQUAL modules and every 16th of each corpus, every 48th from the
# 16th under the asan build; --all walks them all):
# every compile ends with 0 or a clear exit 2, never an internal error;
# every auto-sharded run equals the reference; the modules with
# collectives of their own between partitions, or whose collectives'
# shapes need another device count, are refused at their instruction. And
# a reduce whose init is of a wider float type than its input (f16 values,
# an f32 init: 217_while_loop_all_reduce_code_motion's) partitions over a
# padded tiled dim and equals the reference and the values derived by hand.
# Skips the corpus part when ../shared/conformance is absent.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# The mixed-precision reduce: f16[250,64] tiled 4 ways (250 pads to 252),
# reduced with f32 inits -3 and 3. Its minimum under -3 is -3 (the init,
# used once, not per device), the others those of the values (the padding
# is the reducer's identity, never a value).
cat >"$WORK/mixed.hlo" <<'HLO'
HloModule mixed_reduce, num_partitions=4

mn {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT m = f16[] minimum(a, b)
}

mx {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT m = f16[] maximum(a, b)
}

ENTRY e {
  p = f16[250,64] parameter(0), sharding={devices=[4,1]0,1,2,3}
  low = f32[] constant(-3)
  high = f32[] constant(3)
  below = f16[] reduce(p, low), dimensions={0,1}, to_apply=mn
  least = f16[] reduce(p, high), dimensions={0,1}, to_apply=mn
  most = f16[] reduce(p, low), dimensions={0,1}, to_apply=mx
  ROOT t = (f16[], f16[], f16[]) tuple(below, least, most)
}
HLO
"$PY" - "$WORK/x.npy" <<'PY'
import sys
import numpy as np
x = (np.arange(250 * 64, dtype=np.float64).reshape(250, 64) % 97 - 48) / 64
np.save(sys.argv[1], x.astype(np.float16))
PY
expect_status 0 "$TESSEL" run "$WORK/mixed.hlo" --reference --input 0="$WORK/x.npy" --output-dir "$WORK/mref"
expect_status 0 "$TESSEL" run "$WORK/mixed.hlo" --input 0="$WORK/x.npy" --output-dir "$WORK/mpart"
same_outputs "$WORK/mref" "$WORK/mpart" "the mixed-precision reduce on 4"
"$PY" - "$WORK/mpart" <<'PY' || fail "the mixed-precision reduce's values"
import sys
import numpy as np
got = [float(np.load(f"{sys.argv[1]}/output_{i}.npy")) for i in range(3)]
# values (k % 97 - 48) / 64: least -48/64, most 48/64
want = [-3.0, -0.75, 0.75]
sys.exit(0 if got == want else f"got {got}, want {want}")
PY
echo "conformance_partition: the mixed-precision reduce on 4 equals the reference (-3, -0.75, 0.75)"

if [ ! -d "${TESSEL_SHARED:-/nonexistent}/conformance" ]; then
    echo "conformance_partition: corpora skipped (${TESSEL_SHARED:-}/conformance is absent)"
    exit 0
fi
# Under the asan build every 48th module of each corpus from the 16th (a
# third of the release build's sample, within it) and the listed ones:
# ASan looks for the C's memory errors, the release build checks every
# sampled module's result. From the 16th, not the first: the first is
# 001_large_loop_slow_compile (1.8 MB, 16,828 instructions), whose four
# auto-shard compiles alone took a minute under ASan.
STRIDE=()
case "${TESSEL_BUILD:-}" in */asan) STRIDE=(--stride 48 --offset 16) ;; esac
"$PY" "$TESSEL_SRC/tests/e2e/conformance_partition.py" "$TESSEL" "$TESSEL_SHARED" "$WORK/c" "${STRIDE[@]}" >"$OUT" 2>"$ERR" ||
    fail "conformance_partition.py: $(grep FAIL "$OUT" | head -5)"
tail -1 "$OUT"
echo "conformance_partition: ok"
