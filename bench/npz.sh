#!/usr/bin/env bash
# bench/npz.sh — time `fedcalib eval --logits F` against NumPy loading the
# same .npz and computing accuracy and classwise ECE (15 bins, SPEC §4),
# in one invocation, with repetitions, and report medians, ratios to NumPy
# and peak RSS (/usr/bin/time -v). See docs/BENCHMARKS.md, "infer/logits".
#
#   bench/npz.sh                          # the default sizes, 5 repetitions
#   SIZES="1000000x10" REPS=7 bench/npz.sh
#   BEFORE=/tmp/fedcalib-old bench/npz.sh # also time an older binary
#
# Environment:
#   SIZES   rows×classes to test (default "1000000x10 2000000x100 10000000x10")
#   REPS    repetitions per tool and file (default 5)
#   DIR     where the generated .npz files go (default /tmp/fedcalib-npz-bench;
#           10^7 × 10 takes about 1 GB there; files are kept between runs)
#   FEDCALIB  the fedcalib binary to time (default: build bin/fedcalib here)
#   BEFORE  a second fedcalib binary to time beside it
#   BEFORE_MAX_ROWS  skip BEFORE above this many rows (default 1000000)
#   PYTHON  Python with NumPy (default /usr/bin/python3)
#
# Each repetition runs the tools in turn on the same file, so that they see
# the same page cache and machine load; the first, cold read of each new
# file is a warm-up and not counted.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZES=${SIZES:-"1000000x10 2000000x100 10000000x10"}
REPS=${REPS:-5}
DIR=${DIR:-/tmp/fedcalib-npz-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
BEFORE=${BEFORE:-}
BEFORE_MAX_ROWS=${BEFORE_MAX_ROWS:-1000000}
PEER=bench/npz_peer.py

[ -x /usr/bin/time ] || { echo "bench/npz.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
"$PYTHON" -c 'import numpy' || { echo "bench/npz.sh: $PYTHON has no NumPy (apt-get install python3-numpy)" >&2; exit 2; }

FEDCALIB=${FEDCALIB:-}
if [ -z "$FEDCALIB" ]; then
	go build -o bin/fedcalib ./cmd/fedcalib
	FEDCALIB=./bin/fedcalib
fi
mkdir -p "$DIR"
TSV=$(mktemp "$DIR/times.XXXXXX.tsv")
LOG=$(mktemp "$DIR/time.XXXXXX.log")
trap 'rm -f "$LOG"' EXIT

# timed SIZE FORMAT TOOL CMD... runs CMD under /usr/bin/time -v, appends
# "size format tool wall_seconds max_rss_kib" to $TSV and keeps stdout in
# $DIR/last-TOOL.json.
timed() {
	local size=$1 fmt=$2 tool=$3
	shift 3
	/usr/bin/time -v -o "$LOG" "$@" >"$DIR/last-$tool.json"
	local wall rss
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {
		n = split($2, t, ":"); s = 0
		for (i = 1; i <= n; i++) s = s * 60 + t[i]
		print s }' "$LOG")
	rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOG")
	printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$fmt" "$tool" "$wall" "$rss" >>"$TSV"
}

# agree checks that fedcalib and NumPy computed the same metrics.
agree() {
	"$PYTHON" - "$DIR/last-numpy.json" "$DIR/last-$1.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("n", "accuracy", "cwece"):
    if abs(a[k] - b[k]) > 1e-9 * max(1, abs(a[k])):
        sys.exit("metrics differ: %s numpy %r fedcalib %r" % (k, a[k], b[k]))
EOF
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); numpy $("$PYTHON" -c 'import numpy; print(numpy.__version__)'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in $SIZES; do
	n=${size%x*}
	c=${size#*x}
	for fmt in savez compressed; do
		f="$DIR/${n}_${c}_${fmt}.npz"
		if [ ! -s "$f" ]; then
			echo "generating ${n}_${c} (savez and savez_compressed) in $DIR" >&2
			"$PYTHON" "$PEER" gen "$DIR" "$n" "$c"
		fi
		# Warm-up: page cache, and a check that the tools agree.
		"$PYTHON" "$PEER" eval "$f" >"$DIR/last-numpy.json"
		"$FEDCALIB" eval --logits "$f" --json >"$DIR/last-fedcalib.json"
		agree fedcalib
		tools=(numpy fedcalib)
		if [ -n "$BEFORE" ] && [ "$n" -le "$BEFORE_MAX_ROWS" ]; then
			tools+=(before)
		fi
		for ((r = 1; r <= REPS; r++)); do
			for tool in "${tools[@]}"; do
				case $tool in
				numpy) timed "$size" "$fmt" numpy "$PYTHON" "$PEER" eval "$f" ;;
				fedcalib) timed "$size" "$fmt" fedcalib "$FEDCALIB" eval --logits "$f" --json ;;
				before) timed "$size" "$fmt" before "$BEFORE" eval --logits "$f" --json ;;
				esac
			done
			echo "  $size $fmt repetition $r/$REPS done" >&2
		done
	done
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" "$PEER" summary "$TSV"
echo "(raw timings: $TSV)"
