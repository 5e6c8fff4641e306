#!/usr/bin/env bash
# auto_heldout_wide.sh: auto_heldout.sh over the conformance corpora
# (../shared/conformance/xla_spmd and xla_wild: XLA's partitioner tests
# and modules from the wild, each on its own device count), their
# shardings taken out: every auto-sharded module equals the reference run,
# and none is over its hand-written shardings on both bytes and peak
# memory but the known ones. Long (hundreds of modules, some of
# gigabytes): runs only with TESSEL_HELDOUT_WIDE=1 (label heldout:
# `TESSEL_HELDOUT_WIDE=1 ctest -L heldout`), else skipped (77); a module whose
# reference run takes over 20 s is skipped and counted.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

[ "${TESSEL_HELDOUT_WIDE:-0}" = 1 ] || { echo "auto_heldout_wide: skipped (TESSEL_HELDOUT_WIDE=1 runs it)"; exit 77; }
CONF="${TESSEL_SHARED:-/nonexistent}/conformance"
[ -d "$CONF" ] || { echo "auto_heldout_wide: skipped ($CONF is absent)"; exit 77; }
for corpus in xla_spmd xla_wild; do
    "$PY" "$TESSEL_SRC/tests/e2e/auto_heldout.py" "$TESSEL" "$WORK/$corpus" --hand \
        --manifest "$CONF/$corpus/manifest.tsv" >"$OUT" 2>"$ERR" ||
        fail "auto_heldout.py on $corpus: $(grep -v ': ok' "$OUT" | head -5)"
    echo "$corpus: $(tail -1 "$OUT")"
done
echo "auto_heldout_wide: ok"
