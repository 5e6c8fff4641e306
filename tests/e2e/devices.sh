#!/usr/bin/env bash
# devices.sh: `tessel devices`: text and JSON, L = 1..4 on this machine
# checked against the process's affinity (python's os.sched_getaffinity and
# sysfs, not hwloc), exact cpusets on a 2-core machine, a taskset-restricted
# process, hwloc's synthetic 2-package/2-node machine worked out by hand, and
# usage errors.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# help and the overview
expect_status 0 "$TESSEL" devices --help
expect_in "$OUT" "Usage: tessel devices [--local-devices L] [--format text|json]"
expect_status 0 "$TESSEL" --help
expect_in "$OUT" "devices "

# check_json L FILE: the JSON of `tessel devices --local-devices L` against
# the affinity mask; prints "cores exact" (exact: 1 on a 2-CPU, 2-core machine).
check_json() {
    "$PY" - "$1" "$2" <<'PY'
import json, os, sys
L, path = int(sys.argv[1]), sys.argv[2]
doc = json.load(open(path))
assert set(doc) == {"devices", "topology"}, doc.keys()
topo, devs = doc["topology"], doc["devices"]
def parse(s):
    out = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
proc = os.sched_getaffinity(0)
def core(c):
    base = "/sys/devices/system/cpu/cpu%d/topology/" % c
    return (open(base + "physical_package_id").read().strip(), open(base + "core_id").read().strip())
cores = len({core(c) for c in proc})
assert parse(topo["cpuset"]) == proc, (topo["cpuset"], proc)
assert topo["pus"] == len(proc) and topo["cores"] == cores, topo
assert topo["local_devices"] == L and len(devs) == L
assert topo["shared_cores"] == (L > cores), topo
assert topo["blas_threads"] == (cores // L if L <= cores else 1), topo
for key in ("hwloc_version", "packages", "numa_nodes", "memory_bytes", "this_system",
            "cpubind", "membind"):
    assert key in topo, key
union, seen = set(), set()
for i, d in enumerate(devs):
    for key in ("ordinal", "cpuset", "cores", "numa_node", "memory_bytes", "bound"):
        assert key in d, key
    assert d["ordinal"] == i
    s = parse(d["cpuset"])
    assert s and s <= proc, (d, proc)
    if L <= cores:
        assert not (s & seen), "devices share CPUs although cores suffice: %s" % devs
    seen |= s
    union |= s
    assert d["cores"] == len({core(c) for c in s}), d
    assert d["numa_node"] is not None and d["memory_bytes"] > 0, d
    assert d["bound"] == topo["cpubind"], d
    assert (d["bind_error"] is None) == d["bound"], d
assert union == proc
exact = len(proc) == 2 and cores == 2
if exact:
    c0, c1 = sorted(proc)
    both = "%d-%d" % (c0, c1) if c1 == c0 + 1 else "%d,%d" % (c0, c1)
    # hwloc_distrib on 2 cores: L=3 gives core 0 ceil(3/2) = 2 devices
    want = {1: [both], 2: [str(c0), str(c1)], 3: [str(c0), str(c0), str(c1)],
            4: [str(c0), str(c0), str(c1), str(c1)]}[L]
    assert [d["cpuset"] for d in devs] == want, ([d["cpuset"] for d in devs], want)
    assert [d["cores"] for d in devs] == ([2] if L == 1 else [1] * L)
print(cores, int(exact))
PY
}

for L in 1 2 3 4; do
    expect_status 0 "$TESSEL" devices --local-devices "$L" --format json
    read -r cores exact < <(check_json "$L" "$OUT") || fail "JSON for L=$L"
    [ -n "$cores" ] || fail "JSON for L=$L was not checked"
    # the text says the same
    expect_status 0 "$TESSEL" devices --local-devices "$L"
    expect_in "$OUT" "local devices: $L"
    [ "$(grep -c '^device ' "$OUT")" = "$L" ] || fail "text for L=$L lists the wrong number of devices"
    if [ "$L" -gt "$cores" ]; then
        expect_in "$OUT" "devices share cores"
        expect_in "$OUT" "(shared)"
    elif grep -qF "shared" "$OUT"; then
        fail "L=$L <= $cores cores, yet the text says devices share cores"
    fi
    if [ "$exact" = 1 ] && [ "$L" = 3 ]; then
        c=$("$PY" -c 'import os; print(*sorted(os.sched_getaffinity(0)))')
        set -- $c
        expect_in "$OUT" "device 0: cpuset $1, 1 core (shared), NUMA node 0"
        expect_in "$OUT" "device 1: cpuset $1, 1 core (shared), NUMA node 0"
        expect_in "$OUT" "device 2: cpuset $2, 1 core, NUMA node 0"
    fi
done

# default: one device per core
expect_status 0 "$TESSEL" devices
expect_in "$OUT" "local devices: $cores,"
expect_in "$OUT" "topology: hwloc "
grep -q "^device 0: cpuset .*, bound$" "$OUT" || fail "device 0 not bound"

# a process restricted to one CPU sees only that CPU
if command -v taskset >/dev/null; then
    first=$("$PY" -c 'import os; print(min(os.sched_getaffinity(0)))')
    expect_status 0 taskset -c "$first" "$TESSEL" devices --local-devices 2
    expect_in "$OUT" "cpuset $first: 1 package, 1 core, 1 PU"
    expect_in "$OUT" "device 0: cpuset $first, 1 core (shared)"
    expect_in "$OUT" "device 1: cpuset $first, 1 core (shared)"
fi

# hwloc's synthetic machine: 2 packages, each one NUMA node of 3 GiB and two
# cores of two PUs (PUs 0-7). L=5: package 0 gets ceil(5*4/8) = 3 devices
# (core 0 two of them, core 1 one), package 1 two: 0-1 0-1 2-3 4-5 6-7.
SYN="pack:2 numa:1(memory=3221225472) core:2 pu:2"
expect_status 0 env HWLOC_SYNTHETIC="$SYN" "$TESSEL" devices --local-devices 5
expect_in "$OUT" "cpuset 0-7: 2 packages, 4 cores, 8 PUs, 2 NUMA nodes (6.0 GiB)"
expect_in "$OUT" "binding: threads no, memory no (the topology is not this machine's)"
expect_in "$OUT" "local devices: 5 (more than cores: devices share cores), BLAS threads per device: 1"
expect_in "$OUT" "device 0: cpuset 0-1, 1 core (shared), NUMA node 0 (3.0 GiB), not bound: the topology is not this machine's (synthetic or XML)"
expect_in "$OUT" "device 1: cpuset 0-1, 1 core (shared), NUMA node 0 (3.0 GiB), not bound"
expect_in "$OUT" "device 2: cpuset 2-3, 1 core, NUMA node 0 (3.0 GiB), not bound"
expect_in "$OUT" "device 3: cpuset 4-5, 1 core, NUMA node 1 (3.0 GiB), not bound"
expect_in "$OUT" "device 4: cpuset 6-7, 1 core, NUMA node 1 (3.0 GiB), not bound"
expect_status 0 env HWLOC_SYNTHETIC="$SYN" "$TESSEL" devices --local-devices 2 --format=json
"$PY" - "$OUT" <<'PY' || fail "synthetic JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
t = doc["topology"]
assert (t["cpuset"], t["packages"], t["cores"], t["pus"], t["numa_nodes"]) == ("0-7", 2, 4, 8, 2), t
assert t["memory_bytes"] == 2 * 3221225472 and t["this_system"] is False, t
assert t["blas_threads"] == 2 and t["shared_cores"] is False, t
got = [(d["ordinal"], d["cpuset"], d["cores"], d["pus"], d["numa_node"], d["memory_bytes"], d["bound"])
       for d in doc["devices"]]
assert got == [(0, "0-3", 2, 4, 0, 3221225472, False), (1, "4-7", 2, 4, 1, 3221225472, False)], got
assert doc["devices"][0]["bind_error"] == "the topology is not this machine's (synthetic or XML)"
PY

# usage errors
expect_status 2 "$TESSEL" devices --format dot
expect_in "$ERR" "tessel: error: --format is text or json for 'tessel devices', not 'dot'"
expect_status 2 "$TESSEL" devices --format yaml
expect_status 2 "$TESSEL" devices extra.hlo
expect_in "$ERR" "devices takes no arguments, not 'extra.hlo'"
expect_status 2 "$TESSEL" devices --local-devices 0
expect_in "$ERR" "--local-devices needs a whole number >= 1"
expect_status 2 "$TESSEL" devices --local-devices 1025
expect_in "$ERR" "--local-devices is at most 1024, not 1025"
expect_status 2 "$TESSEL" devices --num-partitions 2
expect_in "$ERR" "option --num-partitions does not apply to 'tessel devices'"
expect_in "$ERR" "Try 'tessel devices --help'"
echo "devices.sh: ok"
