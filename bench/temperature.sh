#!/usr/bin/env bash
# bench/temperature.sh — central temperature scaling against the plain
# SciPy fit a user would write (bench/temp_peer.py: float64 logits,
# logsumexp, minimize_scalar bounded to [0.01, 100]), paired and
# interleaved: each repetition runs the peer and then
# `fedcalib calibrate --central --method temp` on the same .npz file.
# Prints median wall and CPU seconds, peak RSS, the paired ratios to the
# peer and the 1-minute load average of each repetition (issue #32). See
# docs/BENCHMARKS.md, "Dirichlet, matrix and temperature against plain
# peers".
#
#   bench/temperature.sh                         # 10^6 × 10, 5 repetitions
#   ROWS=100000 REPS=3 bench/temperature.sh
#
# Environment: ROWS (default 1000000), CLASSES (default 10), REPS
# (default 5), DIR (default /tmp/fedcalib-temperature-bench), PYTHON
# (with NumPy and SciPy; default /usr/bin/python3), FEDCALIB (default:
# build bin/fedcalib here).
set -euo pipefail

cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
CLASSES=${CLASSES:-10}
REPS=${REPS:-5}
DIR=${DIR:-/tmp/fedcalib-temperature-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
FEDCALIB=${FEDCALIB:-}
PEER=bench/temp_peer.py

# shellcheck source=bench/paired.sh
. bench/paired.sh
paired_setup bench/temperature.sh "numpy, scipy" "python3-numpy python3-scipy"
BASE=scipy

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); numpy $("$PYTHON" -c 'import numpy; print(numpy.__version__)'), scipy $("$PYTHON" -c 'import scipy; print(scipy.__version__)'); $ROWS rows × $CLASSES classes"
echo "# the peer: $("$PYTHON" "$PEER" "$f")"
echo "# fedcalib: $("$FEDCALIB" calibrate --central --method temp --logits "$f" --out "$DIR/temp.json")"
for ((r = 1; r <= REPS; r++)); do
	run_timed scipy "$r" "$PYTHON" "$PEER" "$f"
	run_timed fedcalib "$r" "$FEDCALIB" calibrate --central --method temp --logits "$f" --quiet --out "$DIR/temp.json"
	echo "  repetition $r/$REPS done" >&2
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
summarise
echo "(raw timings: $TSV)"
