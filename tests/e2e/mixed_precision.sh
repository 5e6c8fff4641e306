#!/usr/bin/env bash
# mixed_precision.sh: reduce and reduce-window whose init value has another
# float precision than the reducer, and inputs of another precision than
# the reducer's (XLA's CompatibleIgnoringFpPrecision):
# values worked out by hand, and the partitioned run equals the reference.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
M="$WORK/rmp.hlo"
sed -e "s/@N/2/g" -e "s/@D/0,1/g" "$TESSEL_SRC/tests/models/reduce_mixed_precision.hlo" >"$M"

# x = [[1, 2, 3, 4], [-1, -5, 0.5, 2], [7, 0, 0, -3]] (exact in f16)
npy_write "$WORK/x.npy" '<f2' 3,4 1 2 3 4 -1 -5 0.5 2 7 0 0 -3
expect_status 0 "$TESSEL" run "$M" --reference --input x="$WORK/x.npy" --output-dir "$WORK/ref"
# rows: max of each row from -inf: 4, 2, 7
[ "$(npy_dump "$WORK/ref/output_0.npy")" = "<f2 3 4 2 7" ] || fail "rows: $(npy_dump "$WORK/ref/output_0.npy")"
# cols: 0.5 + column sums: 7.5, -2.5, 4, 3.5
[ "$(npy_dump "$WORK/ref/output_1.npy")" = "<f2 4 7.5 -2.5 4 3.5" ] || fail "cols: $(npy_dump "$WORK/ref/output_1.npy")"
# win: 0.5 + pairs along each row: 3.5 7.5, -5.5 3, 7.5 -2.5
[ "$(npy_dump "$WORK/ref/output_2.npy")" = "<f2 3,2 3.5 7.5 -5.5 3 7.5 -2.5" ] || fail "win: $(npy_dump "$WORK/ref/output_2.npy")"
# sums: bf16 rows summed by an f32 reducer: 10, -3.5, 4
[ "$(npy_dump "$WORK/ref/output_3.npy")" = "<f4 3 10 -3.5 4" ] || fail "sums: $(npy_dump "$WORK/ref/output_3.npy")"

expect_status 0 "$TESSEL" run "$M" --num-partitions 2 --input x="$WORK/x.npy" --output-dir "$WORK/part"
for i in 0 1 2 3; do
    npy_match "$WORK/ref/output_$i.npy" "$WORK/part/output_$i.npy" || fail "partitioned output $i differs"
done
echo "mixed_precision: ok"
