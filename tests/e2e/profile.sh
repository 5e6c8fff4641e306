#!/usr/bin/env bash
# profile.sh: tessel profile (docs/auto-shard.md, "Profile"). It writes a
# profile whose every figure has its median inside its interquartile
# range, an alpha above its floor and a beta > 0 (or the figure
# "_rejected" and the output saying the default was kept), and the check
# behind work; the command's output gives each figure; --profile reads it;
# a profile of the first format (tessel_profile 1, no spreads) is still
# read, and the same figures in the two formats give the same plan; a bad
# field is an error naming it; under mpirun -np 2 the across-hosts
# ("remote") figures the same. Release build only: minutes of collectives
# under ASan on a loaded machine.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

case "${TESSEL_BUILD:-}" in */asan)
    echo "profile: skipped under asan (minutes of collectives)"
    exit 0
    ;;
esac
# The MLP without its shardings (for 2 devices): --auto-shard chooses them all.
S="$WORK/mlp.hlo"
sed 's/, sharding={[^}]*}//g' "$TESSEL_SRC/examples/mlp.hlo" >"$S"
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own allocations (see mpi.sh)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Every figure sane, with its spread; scopes: the ones it must have.
check_profile() { # FILE SCOPES HOSTS
    "$PY" - "$@" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1]))
scopes, hosts = sys.argv[2].split(","), int(sys.argv[3])
assert p["tessel_profile"] == 2 and p["repeats"] == 5 and p.get("hosts", 0) == hosts, p
def figure(obj, name, floor):
    lo, hi = obj[name + "_iqr"]
    value = obj[name] if name in obj else obj[name + "_rejected"]
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= value <= hi, (name, lo, value, hi)
    assert (name in obj) != (name + "_rejected" in obj), (name, obj)
    if name in obj:
        assert value > floor, (name, value)
    return name in obj
figure(p, "flops", 0)
figure(p, "bytes", 0)
for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
    for scope in scopes:
        s = p["collectives"][k][scope]
        figure(s, "alpha", 1e-7)
        figure(s, "beta", 0)
        assert math.isfinite(s["alpha_behind_work"]), s
PY
}

expect_status 0 "$TESSEL" profile -o "$WORK/prof.json"
check_profile "$WORK/prof.json" local 0 || fail "the profile is not a full one"
expect_in "$ERR" "each figure the median of 5 runs [its interquartile range]"
expect_in "$ERR" "all-to-all local beta"
expect_in "$ERR" "alpha behind work"
# Its rejected figures (if any) are said to keep the default.
if grep -q '_rejected' "$WORK/prof.json"; then expect_in "$ERR" "the default kept"; fi
expect_status 0 "$TESSEL" plan "$S" --auto-shard --mesh 4 --profile "$WORK/prof.json" --explain
expect_in "$OUT" "auto-shard of mlp over mesh x=4"
# The profile says the cores its devices shared (this machine's).
"$PY" - "$WORK/prof.json" "$("$TESSEL" devices --format json)" <<'PY' || fail "the profile's host_cores is not this machine's"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["host_cores"] == json.loads(sys.argv[2])["topology"]["cores"], p
PY

# The first format (tessel_profile 1, as tessel profile wrote it to
# 2026-12-05) is still read; the same figures in the second, with their
# spreads, give the same costs to every alternative --explain lists
# (collectives' among them), and a rejected alpha keeps the default as an
# absent one does; given instead, that alpha changes them.
cat >"$WORK/v1.json" <<'JSON'
{"tessel_profile": 1, "devices": 4, "host_cores": 2,
 "flops": 2.1e+10, "bytes": 4.7e+09,
 "collectives": {
  "all-reduce": {"local": {"alpha": 0.0003, "beta": 2e-09}},
  "all-gather": {"local": {"beta": 1e-09}},
  "reduce-scatter": {"local": {"alpha": 2e-05, "beta": 3e-10}},
  "all-to-all": {"local": {"alpha": 4e-05, "beta": 5e-10}}}}
JSON
cat >"$WORK/v2.json" <<'JSON'
{"tessel_profile": 2, "devices": 4, "host_cores": 2, "repeats": 5,
 "flops": 2.1e+10, "flops_iqr": [2e+10, 2.2e+10], "bytes": 4.7e+09, "bytes_iqr": [4e+09, 5e+09],
 "collectives": {
  "all-reduce": {"local": {"alpha": 0.0003, "alpha_iqr": [0.0002, 0.0004], "beta": 2e-09, "beta_iqr": [1e-09, 3e-09], "alpha_behind_work": 1e-06}},
  "all-gather": {"local": {"alpha_rejected": 1e-07, "alpha_iqr": [-1e-05, 1e-05], "beta": 1e-09, "beta_iqr": [1e-09, 2e-09], "alpha_behind_work": 3e-06}},
  "reduce-scatter": {"local": {"alpha": 2e-05, "alpha_iqr": [1e-05, 3e-05], "beta": 3e-10, "beta_iqr": [2e-10, 4e-10], "alpha_behind_work": 1e-07}},
  "all-to-all": {"local": {"alpha": 4e-05, "alpha_iqr": [3e-05, 5e-05], "beta": 5e-10, "beta_iqr": [4e-10, 6e-10], "alpha_behind_work": 2e-06}}}}
JSON
sed 's/"alpha_rejected": 1e-07/"alpha": 1e-03/' "$WORK/v2.json" >"$WORK/v2given.json"
expect_status 0 "$TESSEL" plan "$S" --auto-shard --mesh 4 --profile "$WORK/v1.json" --explain
cp "$OUT" "$WORK/v1.explain"
expect_status 0 "$TESSEL" plan "$S" --auto-shard --mesh 4 --profile "$WORK/v2.json" --explain
cmp -s "$OUT" "$WORK/v1.explain" || fail "the same figures in the two formats priced the alternatives apart"
expect_status 0 "$TESSEL" plan "$S" --auto-shard --mesh 4 --profile "$WORK/v2given.json" --explain
! cmp -s "$OUT" "$WORK/v1.explain" || fail "an all-gather's alpha of 1 ms priced the alternatives as the default's 20 us"

echo '{"tessel_profile": 1, "collectives": {"all-gather": {"local": {"beta": -1}}}}' >"$WORK/bad.json"
expect_status 2 "$TESSEL" compile "$S" --auto-shard --profile "$WORK/bad.json" -o -
expect_in "$ERR" "profile: collectives.all-gather.local.beta must be a number > 0"
echo '{"tessel_profile": 1, "host_cores": 1.5}' >"$WORK/bad.json"
expect_status 2 "$TESSEL" compile "$S" --auto-shard --profile "$WORK/bad.json" -o -
expect_in "$ERR" "profile: host_cores must be a whole count of cores"

# Under mpirun -np 2: the across-hosts figures too, measured the same way,
# read for a mesh over 2 hosts.
expect_status 0 env ASAN_OPTIONS="$MPI_ASAN" timeout 300 mpirun --oversubscribe -np 2 "$TESSEL" profile \
    -o "$WORK/prof2.json"
check_profile "$WORK/prof2.json" local,remote 2 || fail "the profile under mpirun has no sane across-hosts figures"
expect_in "$ERR" "all-to-all remote beta"
expect_status 0 "$TESSEL" plan "$S" --auto-shard --mesh data=2,model=2 --hosts 2 --profile "$WORK/prof2.json" --explain
expect_in "$OUT" "auto-shard of mlp over mesh data=2,model=2"
echo "profile: ok"
