#!/usr/bin/env bash
# bench/classes1000.sh — fit time and peak memory of every calibrator's
# central fit at C = 1,000 classes (issue #29, "1,000 classes end to end";
# issue #32): `fedcalib calibrate --central --method M` on generated
# logits shaped as ImageNet validation's (50,000 rows by default), one
# method after another, under /usr/bin/time -v. Prints, per method, wall
# and CPU seconds, peak RSS and how the fit ended (provenance.fit), and the
# 1-minute load average before each run. See docs/BENCHMARKS.md, "calib
# at 1,000 classes".
#
#   bench/classes1000.sh                       # 50,000 rows, every method
#   ROWS=2000 METHODS="temp vector" bench/classes1000.sh
#   ROWS=2000 METHODS=fedcal EXTRA="--max-iterations 5" bench/classes1000.sh
#
# Environment:
#   ROWS     rows of logits (default 50000)
#   CLASSES  classes (default 1000)
#   METHODS  methods (default: every method of `fedcalib calibrate --help`;
#            matrix and dirichlet refuse beyond 256 classes in one line)
#   EXTRA    extra calibrate flags (e.g. --max-iterations N)
#   DIR      where the .npz and the calibrators go (default
#            /tmp/fedcalib-classes1000-bench; 50,000 × 1,000 is 200 MB; kept)
#   PYTHON   Python with NumPy (default /usr/bin/python3)
#   FEDCALIB the fedcalib binary (default: build bin/fedcalib here)
set -euo pipefail

cd "$(dirname "$0")/.."
ROWS=${ROWS:-50000}
CLASSES=${CLASSES:-1000}
DIR=${DIR:-/tmp/fedcalib-classes1000-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
EXTRA=${EXTRA:-}
FEDCALIB=${FEDCALIB:-}
HELP=bench/classes1000.py

[ -x /usr/bin/time ] || { echo "bench/classes1000.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
"$PYTHON" -c 'import numpy' || { echo "bench/classes1000.sh: $PYTHON needs NumPy (apt-get install python3-numpy)" >&2; exit 2; }
if [ -z "$FEDCALIB" ]; then
	FEDCALIB=bin/fedcalib
	go build -o "$FEDCALIB" ./cmd/fedcalib
fi
METHODS=${METHODS:-$("$FEDCALIB" calibrate --help 2>&1 | awk '/^Methods/ {on = 1; next} on && /^  [a-z]+ / {print $1} on && /^$/ {exit}')}
mkdir -p "$DIR"
f="$DIR/${ROWS}x${CLASSES}.npz"
if [ ! -s "$f" ]; then
	echo "generating $f" >&2
	"$PYTHON" "$HELP" gen "$ROWS" "$CLASSES" "$f"
fi
LOG=$(mktemp "$DIR/time.XXXXXX.log")
trap 'rm -f "$LOG"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); $ROWS rows × $CLASSES classes; extra flags: ${EXTRA:-none}"
printf '%-9s %9s %9s %9s %6s %s\n' method wall_s cpu_s rss_MiB load1 fit
for m in $METHODS; do
	load=$(cut -d' ' -f1 /proc/loadavg)
	out="$DIR/$m.json"
	rm -f "$out"
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	if /usr/bin/time -v -o "$LOG" "$FEDCALIB" calibrate --central --method "$m" --logits "$f" --out "$out" --quiet $EXTRA >"$DIR/$m.out" 2>&1; then
		fit=$("$PYTHON" "$HELP" fit "$out")
	else
		fit="refused: $(head -c 120 "$DIR/$m.out")"
	fi
	awk -F': ' -v m="$m" -v load="$load" -v fit="$fit" '
		/Elapsed \(wall clock\)/ { n = split($2, t, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + t[i] }
		/User time/ { u = $2 } /System time/ { s = $2 }
		/Maximum resident set size/ { r = $2 / 1024 }
		END { printf "%-9s %9.2f %9.2f %9.1f %6s %s\n", m, w, u + s, r, load, fit }' "$LOG"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
