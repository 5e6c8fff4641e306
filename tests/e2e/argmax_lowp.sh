#!/usr/bin/env bash
# argmax_lowp.sh: tests/models/argmax_lowp.hlo (test_auto_heldout45.py's
# lowp with its shardings fixed) on 2, 3 and 4 devices moves what the
# partitioner must and no more, and gives NumPy's answers:
#   - the f16 dot whose contracting dim is tiled all-reduces its partial
#     sums once, in f32: f32[7,6] is 168 bytes, 2(n-1)/n of it a device
#     (168, 224, 252; in f16 it would be half);
#   - the argmax over rows whose values are replicated and whose iota is
#     tiled on the kept columns, as its result is, slices the values: no
#     all-gather of the s32[7,6] iota (it gathered 126 to 252 bytes);
#   - the argmax over rows tiled (7 over 2, 3, 4: padded) all-gathers
#     only the partial values, indices and "valid" flags: 3 all-gathers.
# The inputs are small integers, so every sum is exact in f16 and f32 and
# ties are many: the first index of the maximum wins, as in NumPy.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

"$PY" - "$WORK" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
rng = np.random.default_rng(47)
x = rng.integers(-3, 4, (7, 40)).astype(np.float16)
k = rng.integers(-3, 4, (40, 6)).astype(np.float16)
h = (x.astype(np.float32) @ k.astype(np.float32)).astype(np.float16)
np.save(f"{w}/x.npy", x)
np.save(f"{w}/w.npy", k)
for j, v in enumerate((h, h.argmax(0).astype(np.int32), h.argmax(0).astype(np.int32), h.max(0))):
    np.save(f"{w}/want{j}.npy", v)
PY

for n in 1 2 3 4; do
    m=$(instantiate "$TESSEL_SRC/tests/models/argmax_lowp.hlo" "$n")
    expect_status 0 "$TESSEL" compile "$m" -o "$WORK/p$n.plan"
    if [ "$n" -gt 1 ]; then
        grep -q '^// TesselFallback' "$WORK/p$n.plan" && fail "$n devices: a fallback"
        ar=$(sed -n 's|^// TesselCollective [^ ]* all-reduce \([0-9]*\) .*|\1|p' "$WORK/p$n.plan")
        [ "$ar" = "$((168 * 2 * (n - 1) / n))" ] ||
            fail "$n devices: the dot's all-reduce moves '$ar' bytes, not f32[7,6]'s $((168 * 2 * (n - 1) / n))"
        [ "$(grep -c '^// TesselCollective .* all-gather ' "$WORK/p$n.plan")" = 3 ] ||
            fail "$n devices: expected 3 all-gathers (the tiled argmax's values, indices, flags): $(grep -c '^// TesselCollective' "$WORK/p$n.plan") collectives"
        grep -q '^// TesselCollective .* \(all-to-all\|collective-permute\|reduce-scatter\) ' "$WORK/p$n.plan" &&
            fail "$n devices: a collective beyond the dot's all-reduce and the partial results' all-gathers"
    fi
    expect_status 0 "$TESSEL" run "$WORK/p$n.plan" --input x="$WORK/x.npy" --input w="$WORK/w.npy" \
        --output-dir "$WORK/o$n"
    for j in 0 1 2 3; do
        npy_match "$WORK/want$j.npy" "$WORK/o$n/output_$j.npy" || fail "$n devices: output $j differs from NumPy"
    done
done
expect_status 0 "$TESSEL" run "$m" --reference --input x="$WORK/x.npy" --input w="$WORK/w.npy" --output-dir "$WORK/ref"
for j in 0 1 2 3; do
    npy_match "$WORK/want$j.npy" "$WORK/ref/output_$j.npy" || fail "--reference: output $j differs from NumPy"
done
echo "argmax_lowp: ok"
