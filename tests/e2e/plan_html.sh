#!/usr/bin/env bash
# plan_html.sh: `tessel plan --format html` in a real browser: Debian's
# chromium, headless. The page (examples/mlp.hlo; a module with host work;
# the graph by Graphviz and by tessel's own layout) loads with no console
# message (an error, or a blocked fetch: the page's Content-Security-Policy
# refuses every outside source), its SVG and tables are in the DOM after
# its script ran, clicking a node selects its row, and a screenshot is
# kept in the build directory (test-artifacts/plan_html/*.png).
# Skips (status 77) only where chromium is not installed.
set -euo pipefail
source "$(dirname "$0")/lib.bash"

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    echo "plan_html: chromium is not installed (scripts/setup.sh installs it): skipped"
    exit 77
fi
ART="${TESSEL_BUILD:-$WORK}/test-artifacts/plan_html"
mkdir -p "$ART"
# chromium wants a writable home for its profile; root needs --no-sandbox
export HOME="$WORK/home"
mkdir -p "$HOME"
chrome() {
    timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
        --user-data-dir="$WORK/profile" --enable-logging=stderr --v=0 "$@"
}

check_page() { # check_page NAME PAGE.html NODE: NODE (n-K-I) is clicked
    local name=$1 page=$2 node=$3
    grep -Eiq '<script[^>]+src=|<link[^>]+href=|https?://[a-z]' "$page" &&
        grep -Ei '<script[^>]+src=|<link[^>]+href=|https?://[a-z]' "$page" | grep -v 'http://www.w3.org/' |
        grep -q . && fail "$name: the page refers to something outside itself"
    chrome --dump-dom "file://$page#select=$node" >"$WORK/$name.dom" 2>"$WORK/$name.log" ||
        fail "$name: chromium failed: $(tail -5 "$WORK/$name.log")"
    if grep -q ':CONSOLE' "$WORK/$name.log"; then
        grep ':CONSOLE' "$WORK/$name.log" >&2
        fail "$name: the page logged to the console"
    fi
    "$PY" - "$name" "$WORK/$name.dom" "$node" <<'PY'
import sys
from html.parser import HTMLParser
name, path, node = sys.argv[1], sys.argv[2], sys.argv[3]
row = node.replace("n-", "row-", 1)
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.ids, self.classes, self.ready = {}, {}, {}, False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if "id" in a:
            self.ids[a["id"]] = a
        for c in (a.get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
p = P()
p.feed(open(path).read())
assert p.ready, name + ": the page's script did not run to its end"
assert p.tags.get("svg", 0) >= 1, name + ": no SVG"
assert p.tags.get("table", 0) >= 4, (name, "tables", p.tags.get("table"))
for c in ("instrs", "memory"):
    assert p.classes.get(c), (name, "no table", c)
assert p.classes.get("grid", 0) >= 1, name + ": no sharding grid"
assert row in p.ids and "sel" in (p.ids[row].get("class") or ""), name + ": clicking " + node + " selected no row"
assert node in p.ids and "sel" in (p.ids[node].get("class") or ""), name + ": node " + node + " not selected"
print("%s: loads cleanly; svg, %d tables, %d grids; a click selects the row" %
      (name, p.tags["table"], p.classes["grid"]))
PY
    chrome --window-size=1280,1800 --screenshot="$ART/$name.png" "file://$page" >/dev/null 2>&1 ||
        fail "$name: no screenshot"
    [ -s "$ART/$name.png" ] || fail "$name: empty screenshot"
}

# the MLP: Graphviz's SVG when dot is installed, and tessel's own layout
expect_status 0 "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --format html -o "$WORK/mlp.html"
if command -v dot >/dev/null 2>&1; then
    expect_in "$WORK/mlp.html" "<!-- drawn by Graphviz -->"
fi
expect_in "$WORK/mlp.html" "all-reduce"
check_page mlp "$WORK/mlp.html" n-0-3
TESSEL_DOT=none "$TESSEL" plan "$TESSEL_SRC/examples/mlp.hlo" --format html -o "$WORK/mlp_own.html"
expect_in "$WORK/mlp_own.html" "drawn by tessel's own layout"
check_page mlp_own "$WORK/mlp_own.html" n-0-5
# host work: the host program's tables too
sed -e 's/@N/2/g' -e 's/@D/0,1/g' "$TESSEL_SRC/tests/models/host_ops_chain.hlo" >"$WORK/host_chain.hlo"
expect_status 0 "$TESSEL" plan "$WORK/host_chain.hlo" --format html -o "$WORK/host.html"
expect_in "$WORK/host.html" "Host program"
check_page host "$WORK/host.html" n-1-0
echo "plan_html: ok (screenshots in $ART)"
