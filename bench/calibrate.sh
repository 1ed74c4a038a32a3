#!/usr/bin/env bash
# bench/calibrate.sh — time `fedcalib calibrate --central --method temp`
# against SciPy (minimize_scalar on log T of the same NLL) and `--method
# bbq` against a NumPy implementation of the same BBQ fit (SPEC §5), on the
# same .npz files, in one invocation, with repetitions; report medians,
# paired ratios and peak RSS (/usr/bin/time -v). See docs/BENCHMARKS.md,
# "calibrate (central) and the data path's memory".
#
#   bench/calibrate.sh                          # the default sizes, 5 repetitions
#   SIZES="1000000x10" METHODS=temp REPS=3 bench/calibrate.sh
#
# Environment:
#   SIZES    rows×classes (default "1000000x10"; the files hold logits and
#            labels only, as bench/npz.sh's, so every row is fitted)
#   METHODS  methods to time (default "temp bbq")
#   REPS     repetitions per tool, method and file (default 5)
#   DIR      where the generated .npz files go (default
#            /tmp/fedcalib-calibrate-bench; 10^7 × 10 takes 480 MB; kept)
#   PYTHON   Python with NumPy and SciPy (default /usr/bin/python3)
#   FEDCALIB the fedcalib binary to time (default: build bin/fedcalib here),
#            e.g. an older build to compare at the same load
#
# Each repetition runs the two tools back to back on the same file, so
# that they see the same page cache and machine load; a first, untimed
# run of each checks that they fit the same calibrator.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZES=${SIZES:-"1000000x10"}
METHODS=${METHODS:-"temp bbq"}
REPS=${REPS:-5}
DIR=${DIR:-/tmp/fedcalib-calibrate-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
PEER=bench/calibrate_peer.py
FEDCALIB=${FEDCALIB:-}

[ -x /usr/bin/time ] || { echo "bench/calibrate.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
"$PYTHON" -c 'import numpy, scipy' || { echo "bench/calibrate.sh: $PYTHON needs NumPy and SciPy (apt-get install python3-numpy python3-scipy)" >&2; exit 2; }

if [ -z "$FEDCALIB" ]; then
	FEDCALIB=bin/fedcalib
	go build -o "$FEDCALIB" ./cmd/fedcalib
fi
mkdir -p "$DIR"
TSV=$(mktemp "$DIR/times.XXXXXX.tsv")
LOG=$(mktemp "$DIR/time.XXXXXX.log")
trap 'rm -f "$LOG"' EXIT

# timed SIZE METHOD TOOL REP CMD... runs CMD under /usr/bin/time -v and
# appends "size method tool rep wall_seconds max_rss_kib" to $TSV.
timed() {
	local size=$1 method=$2 tool=$3 rep=$4
	shift 4
	/usr/bin/time -v -o "$LOG" "$@" >/dev/null
	local wall rss
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {
		n = split($2, t, ":"); s = 0
		for (i = 1; i <= n; i++) s = s * 60 + t[i]
		print s }' "$LOG")
	rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOG")
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$method" "$tool" "$rep" "$wall" "$rss" >>"$TSV"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); numpy $("$PYTHON" -c 'import numpy; print(numpy.__version__)'), scipy $("$PYTHON" -c 'import scipy; print(scipy.__version__)'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in $SIZES; do
	n=${size%x*}
	c=${size#*x}
	f="$DIR/${n}_${c}.npz"
	if [ ! -s "$f" ]; then
		echo "generating $f" >&2
		"$PYTHON" "$PEER" gen "$DIR" "$n" "$c"
	fi
	for method in $METHODS; do
		out="$DIR/$method.json"
		# Warm-up: page cache, and a check that the tools agree.
		"$PYTHON" "$PEER" "$method" "$f" >"$DIR/peer-$method.json"
		"$FEDCALIB" calibrate --central --method "$method" --logits "$f" --out "$out" >&2
		"$PYTHON" "$PEER" agree "$DIR/peer-$method.json" "$out" >&2
		for ((r = 1; r <= REPS; r++)); do
			timed "$size" "$method" peer "$r" "$PYTHON" "$PEER" "$method" "$f"
			timed "$size" "$method" fedcalib "$r" "$FEDCALIB" calibrate --central --method "$method" --logits "$f" --out "$out"
			echo "  $size $method repetition $r/$REPS done" >&2
		done
	done
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" "$PEER" summary "$TSV"
echo "(raw timings: $TSV)"
