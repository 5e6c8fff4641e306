#!/usr/bin/env bash
# lowp_convert.sh: the f8 and f4 conversions of the reference executor,
# exhaustively, against a table that tests/e2e/lowp_table.py builds from each
# type's definition with exact fractions (no code shared with tessel):
#   decode: every code, bitcast from u8 and converted to f32, is its value;
#   encode: every code's value, every midpoint between neighbouring values
#   (and past the largest, where overflow begins), the f64 neighbours of each
#   midpoint, +-0, +-inf and +-NaN, converted from f64, give the code the
#   definition says (nearest, ties to the even significand; overflow to inf,
#   NaN or the largest value as the type has them).
set -euo pipefail
source "$(dirname "$0")/lib.bash"

TABLE="$TESSEL_SRC/tests/e2e/lowp_table.py"
for t in f8e5m2 f8e4m3 f8e4m3fn f8e4m3b11fnuz f8e5m2fnuz f8e4m3fnuz f8e3m4 f8e8m0fnu f4e2m1fn; do
    "$PY" "$TABLE" "$t" "$WORK/$t" || fail "$t: could not build the table"
    for dir in dec enc; do
        expect_status 0 "$TESSEL" run "$WORK/$t/$dir.hlo" --reference \
            --input 0="$WORK/$t/${dir}_in.npy" --output-dir "$WORK/$t/${dir}_out"
    done
    "$PY" "$TABLE" --check "$t" "$WORK/$t" || fail "$t: conversions differ from the definition"
done
echo "lowp_convert: ok"
