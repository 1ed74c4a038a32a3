#!/usr/bin/env bash
# bench/eval.sh — the CPU cost of `fedcalib eval --json` against its floor
# and against plain NumPy, in one invocation, paired and interleaved
# (floor, eval, NumPy, [before], floor, eval, ...), so that every tool sees
# the same page cache and load. See docs/BENCHMARKS.md, "eval's CPU time".
#
#   bench/eval.sh                              # 10^6 × 10, 5 rounds
#   SIZE=200000x100 REPS=7 bench/eval.sh
#   BEFORE=/tmp/fedcalib-old bench/eval.sh     # also time an older binary
#
#   floor  bench/evalfloor: read the file as eval does, one exp per logit,
#          one thread — what any evaluation must at least do
#   eval   fedcalib eval --logits F --split all --json (every core)
#   numpy  bench/eval_peer.py: the same metrics in NumPy, blocks of 2^18 rows
#
# Prints, per tool, the median wall and CPU (user + sys) seconds and peak
# RSS, then eval's CPU over the floor's and over NumPy's, its wall over
# NumPy's, and the 1-minute load average before and after.
#
# Environment: SIZE rows×classes (default 1000000x10), REPS (default 5),
# DIR for the generated file (default /tmp/fedcalib-eval-bench), PYTHON
# (default /usr/bin/python3), FEDCALIB (default: build bin/fedcalib here),
# BEFORE (a second fedcalib binary, timed as "before").
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-1000000x10}
REPS=${REPS:-5}
DIR=${DIR:-/tmp/fedcalib-eval-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
BEFORE=${BEFORE:-}

[ -x /usr/bin/time ] || { echo "bench/eval.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
"$PYTHON" -c 'import numpy' || { echo "bench/eval.sh: $PYTHON has no NumPy" >&2; exit 2; }
mkdir -p "$DIR" bin
FEDCALIB=${FEDCALIB:-}
if [ -z "$FEDCALIB" ]; then
	go build -o bin/fedcalib ./cmd/fedcalib
	FEDCALIB=./bin/fedcalib
fi
go build -o bin/evalfloor ./bench/evalfloor

ROWS=${SIZE%x*}
CLASSES=${SIZE#*x}
FILE="$DIR/logits-$SIZE.npz"
if [ ! -f "$FILE" ]; then
	"$PYTHON" - "$FILE" "$ROWS" "$CLASSES" <<'EOF'
import sys
import numpy as np
path, n, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
y = rng.integers(0, c, n)
z = rng.normal(0, 1, (n, c))
z[np.arange(n), y] += rng.normal(4, 1.5, n)
np.savez(path, logits=(1.5 * z).astype(np.float32), labels=y.astype(np.int64))
EOF
fi

TSV=$(mktemp "$DIR/times.XXXXXX.tsv")
trap 'rm -f "$TSV"' EXIT
# timed TOOL CMD... appends "tool wall cpu rss_kib" to $TSV.
timed() {
	local tool=$1
	shift
	/usr/bin/time -f "$tool %e %U %S %M" -a -o "$TSV" "$@" >"$DIR/last-$tool.json"
}
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
"$FEDCALIB" eval --logits "$FILE" --split all --json >/dev/null # warm the page cache
for r in $(seq "$REPS"); do
	timed floor bin/evalfloor "$FILE"
	timed eval "$FEDCALIB" eval --logits "$FILE" --split all --json
	timed numpy "$PYTHON" bench/eval_peer.py "$FILE"
	if [ -n "$BEFORE" ]; then timed before "$BEFORE" eval --logits "$FILE" --split all --json; fi
done
LOAD1=$(cut -d' ' -f1 /proc/loadavg)

awk -v size="$SIZE" -v reps="$REPS" -v l0="$LOAD0" -v l1="$LOAD1" '
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{ k = ++cnt[$1]; wall[$1, k] = $2; cpu[$1, k] = $3 + $4; if ($5 > rss[$1]) rss[$1] = $5 }
END {
	printf "eval bench, %s, %d paired rounds, load %s → %s (1-minute average)\n", size, reps, l0, l1
	printf "%-7s %9s %9s %10s\n", "tool", "wall s", "CPU s", "peak RSS"
	for (t in cnt) {
		n = cnt[t]
		for (i = 1; i <= n; i++) { w[i] = wall[t, i]; c[i] = cpu[t, i] }
		mw[t] = median(w, n); mc[t] = median(c, n)
		printf "%-7s %9.3f %9.3f %7.0f MiB\n", t, mw[t], mc[t], rss[t] / 1024
	}
	printf "eval CPU / floor CPU  %.2f× (target ≤ 2)\n", mc["eval"] / mc["floor"]
	printf "eval CPU / NumPy CPU  %.2f× (target ≤ 0.5)\n", mc["eval"] / mc["numpy"]
	printf "eval wall / NumPy wall %.2f×\n", mw["eval"] / mw["numpy"]
	if ("before" in cnt) printf "eval CPU / before CPU %.2f×\n", mc["eval"] / mc["before"]
}' "$TSV"
