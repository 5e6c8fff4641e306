#!/usr/bin/env bash
# bench/coll_ab.sh: the collective lines of bench/run (allreduce ...
# alltoall-local, bench/driver.py) for two commits, each built in a clean
# clone of this repository under /tmp, run one after the other on the same
# machine; prints each line's figures and the ratio of the second commit's
# warm step to the first's (issue 29: within 5 %, so at most 1.05).
#
#   bench/coll_ab.sh [--quick] [--lines "allreduce alltoall-local"]
#                    [--rounds K] [--fresh] [--dir DIR] COMMIT_A COMMIT_B
#
# COMMIT_A is the reference (e.g. the commit before a change), COMMIT_B the
# candidate. Each commit is cloned (git clone, then a detached checkout)
# into DIR/<sha> (default /tmp/tessel_coll_ab) and built with its own
# release preset; a clone already built at that sha is reused unless
# --fresh. Each side runs its own bench/driver.py, so each commit is
# measured by the benchmark it shipped with. A round runs every line of A,
# then every line of B; with --rounds K the rounds alternate the order
# (A B, B A, A B, ...) so a drift in the machine's load falls on both
# sides, and each line's figure is the median over the rounds. --quick is
# bench/run's (smaller arrays). Exit status: 0 when every line ran on both
# sides, 1 when one failed, 2 on bad usage.
#
# Run it on an idle machine: every line takes minutes (7 timed runs of
# each side a line, 2 MPI ranks for the lines without "-local").
set -euo pipefail

usage() {
    sed -n '8,9p' "$0" | sed 's/^# \{0,3\}//' >&2
    exit 2
}

quick=()
lines=(allreduce allreduce-local allgather allgather-local reduce-scatter reduce-scatter-local alltoall alltoall-local)
rounds=1
fresh=0
top=/tmp/tessel_coll_ab
commits=()
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=(--quick) ;;
    --lines) [ $# -ge 2 ] || usage; read -r -a lines <<<"$2"; shift ;;
    --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift ;;
    --fresh) fresh=1 ;;
    --dir) [ $# -ge 2 ] || usage; top=$2; shift ;;
    -h|--help) usage ;;
    -*) echo "coll_ab: unknown option '$1'" >&2; usage ;;
    *) commits+=("$1") ;;
    esac
    shift
done
[ "${#commits[@]}" -eq 2 ] || usage
case "$rounds" in ''|*[!0-9]*|0) echo "coll_ab: --rounds wants a positive count" >&2; exit 2 ;; esac
[ "${#lines[@]}" -gt 0 ] || usage

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
shas=()
for c in "${commits[@]}"; do
    if ! s=$(git -C "$repo" rev-parse --verify --quiet "$c^{commit}"); then
        echo "coll_ab: $c: no such commit in $repo" >&2
        exit 2
    fi
    shas+=("$s")
done
mkdir -p "$top"

# A clean clone of sha in $top/<sha>, built with its release preset.
build() {
    local sha=$1 dir=$top/$1
    if [ "$fresh" = 1 ] || [ ! -f "$dir/.coll_ab_built" ]; then
        rm -rf "$dir"
        git clone -q "$repo" "$dir"
        git -C "$dir" checkout -q --detach "$sha"
        echo "== build ${sha:0:12} in $dir"
        if ! (cd "$dir" && cmake --preset release && cmake --build --preset release) >"$dir.build.log" 2>&1; then
            tail -40 "$dir.build.log" >&2
            echo "coll_ab: the build of ${sha:0:12} failed (log: $dir.build.log)" >&2
            exit 1
        fi
        touch "$dir/.coll_ab_built"
    else
        echo "== reuse the build of ${sha:0:12} in $dir"
    fi
}
for s in "${shas[@]}"; do
    build "$s"
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
res=$(mktemp -d)
trap 'rm -rf "$res"' EXIT
failed=0

# One line of one side: the driver's last line kept in $res/<side>.<line>.<round>.
run_line() {
    local side=$1 line=$2 round=$3 dir=$top/${shas[$1]} out
    if [ ! -f "$dir/bench/driver.py" ] || ! grep -q "\"$line\"" "$dir/bench/driver.py"; then
        echo "bench $line: MISSING (not in ${shas[$side]:0:12}'s bench/driver.py)" | tee "$res/$side.$line.$round"
        failed=1
        return
    fi
    out=$(cd "$dir" && /usr/bin/python3 bench/driver.py "$line" "${quick[@]+"${quick[@]}"}" 2>&1) || failed=1
    printf '%s\n' "$out" | tail -1 | tee "$res/$side.$line.$round"
}

echo "== load: $(uptime)"
for ((r = 0; r < rounds; r++)); do
    order=(0 1)
    [ $((r % 2)) = 1 ] && order=(1 0)
    for side in "${order[@]}"; do
        echo "== round $((r + 1)) of $rounds: ${commits[$side]} (${shas[$side]:0:12}) ${quick[*]-}"
        for line in "${lines[@]}"; do
            run_line "$side" "$line" "$r"
        done
    done
done
echo "== load: $(uptime)"

# The summary: tessel's warm step (the median over the rounds) of each
# side, B/A, and each side's own ratio against its baseline.
python3 - "$res" "$rounds" "${commits[0]}" "${commits[1]}" "${lines[@]}" <<'EOF'
import os, re, statistics, sys
res, rounds, a, b, lines = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]

def figures(side, line):
    warm, ratio = [], []
    for r in range(rounds):
        try:
            text = open(os.path.join(res, "%d.%s.%d" % (side, line, r))).read()
        except OSError:
            continue
        m = re.search(r"tessel ([\d.]+) ms a warm step", text)
        q = re.search(r"ratio ([\d.]+)\s*$", text)
        if m:
            warm.append(float(m.group(1)))
        if q:
            ratio.append(float(q.group(1)))
    med = lambda v: statistics.median(v) if v else None
    return med(warm), med(ratio)

fmt = lambda v, f: (f % v) if v is not None else "-"
print("== %s (A) against %s (B): tessel's warm step, median of %d round(s)" % (a, b, rounds))
print("%-22s %12s %12s %8s %10s %10s" % ("line", "A ms", "B ms", "B/A", "A ratio", "B ratio"))
worst = None
for line in lines:
    (wa, ra), (wb, rb) = figures(0, line), figures(1, line)
    ba = wb / wa if wa and wb else None
    if ba is not None:
        worst = ba if worst is None else max(worst, ba)
    print("%-22s %12s %12s %8s %10s %10s" % (line, fmt(wa, "%.2f"), fmt(wb, "%.2f"), fmt(ba, "%.3f"),
                                            fmt(ra, "%.3f"), fmt(rb, "%.3f")))
if worst is not None:
    print("worst B/A %.3f: %s" % (worst, "within 5 %" if worst <= 1.05 else "more than 5 % slower"))
EOF
exit "$failed"
