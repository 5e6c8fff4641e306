#!/usr/bin/env bash
# conformance_check.sh: `tessel check` over XLA's own SPMD partitioner test
# modules (as XLA prints them): each one either checks (status 0, the
# one-line summary) or is refused as bad input (status 2) with a
# FILE:LINE:COL error; never status 1, never a crash. Skips when the
# modules (../shared/conformance) are absent.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

MODS="${TESSEL_SHARED:-/nonexistent}/conformance/xla_spmd/modules"
if [ ! -d "$MODS" ]; then
    echo "conformance_check: skipped ($MODS is absent)"
    exit 0
fi

n=0
ok=0
for f in "$MODS"/*.hlo; do
    n=$((n + 1))
    st=0
    "$TESSEL" check "$f" >"$OUT" 2>"$ERR" || st=$?
    case "$st" in
    0)
        ok=$((ok + 1))
        grep -q "^$f: ok: module " "$OUT" || fail "$f: no summary line"
        ;;
    2)
        head -1 "$ERR" | grep -Eq "^tessel: $f:[0-9]+:[0-9]+: error: " ||
            fail "$f: status 2 without a FILE:LINE:COL error"
        ;;
    *) fail "$f: status $st" ;;
    esac
done
echo "conformance_check: $ok of $n modules check"
# nearly all of XLA's modules are valid HLO; a few exceed tessel's size
# limits or are illegal on purpose
[ "$ok" -ge $((n * 9 / 10)) ] || fail "only $ok of $n modules check"
