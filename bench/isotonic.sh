#!/usr/bin/env bash
# bench/isotonic.sh — central isotonic regression, exact and on 1,024
# bins, against the plain scikit-learn fit a user would write
# (bench/isotonic_peer.py: one IsotonicRegression per class on the
# float64 softmax, normalised), paired and interleaved: each repetition
# runs the peer, then `fedcalib calibrate --central --method isotonic`
# (exact), then the same with --bins-exp 10 (binned, as a federation
# fits it), on the same .npz file: half calibration rows (split 1), half
# test rows (split 2). Prints each one's test NLL (once, outside the
# timings), then median wall and CPU seconds, peak RSS, the paired ratios
# to the peer and the 1-minute load average of each repetition (issue
# #32). See docs/BENCHMARKS.md, "Exact isotonic regression".
#
#   bench/isotonic.sh                            # 10^5 × 10, 5 repetitions
#   ROWS=20000 REPS=3 bench/isotonic.sh
#
# Every process does the whole job a user runs: the peer reads the file,
# fits and scores the test rows; fedcalib reads the file, fits, measures
# the calibration and test rows before and after (its summary) and writes
# the calibrator file.
#
# Environment: ROWS (default 100000), CLASSES (default 10), REPS
# (default 5), DIR (default /tmp/fedcalib-isotonic-bench), PYTHON (with
# NumPy, SciPy and scikit-learn; default /usr/bin/python3), FEDCALIB
# (default: build bin/fedcalib here).
set -euo pipefail

cd "$(dirname "$0")/.."
ROWS=${ROWS:-100000}
CLASSES=${CLASSES:-10}
REPS=${REPS:-5}
DIR=${DIR:-/tmp/fedcalib-isotonic-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
FEDCALIB=${FEDCALIB:-}
PEER=bench/isotonic_peer.py

# shellcheck source=bench/paired.sh
. bench/paired.sh
paired_setup bench/isotonic.sh "numpy, scipy, sklearn" "python3-numpy python3-scipy python3-sklearn"
BASE=sklearn

# test_nll CALIBRATOR prints the test rows' NLL under the calibrator, in
# full (fedcalib eval --split test --json).
test_nll() { "$FEDCALIB" eval --logits "$f" --split test --calibrator "$1" --json | sed -n 's/^  "nll": \([0-9.e-]*\),$/\1/p'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); numpy $("$PYTHON" -c 'import numpy; print(numpy.__version__)'), scikit-learn $("$PYTHON" -c 'import sklearn; print(sklearn.__version__)'); $ROWS rows × $CLASSES classes, half calibration, half test"
peer=$("$PYTHON" "$PEER" "$f")
exact=$("$FEDCALIB" calibrate --central --method isotonic --logits "$f" --out "$DIR/exact.json")
binned=$("$FEDCALIB" calibrate --central --method isotonic --bins-exp 10 --logits "$f" --out "$DIR/binned.json")
echo "# the peer: $peer"
echo "# fedcalib exact: $exact"
echo "# fedcalib binned: $binned"
echo "# test NLL: scikit-learn $(sed 's/.*"test_nll": \([0-9.e-]*\).*/\1/' <<<"$peer"), fedcalib exact $(test_nll "$DIR/exact.json"), fedcalib binned (1,024 bins) $(test_nll "$DIR/binned.json")"
echo "# calibrator files: exact $(stat -c %s "$DIR/exact.json") bytes, binned $(stat -c %s "$DIR/binned.json") bytes"
for ((r = 1; r <= REPS; r++)); do
	run_timed sklearn "$r" "$PYTHON" "$PEER" "$f"
	run_timed fedcalib-exact "$r" "$FEDCALIB" calibrate --central --method isotonic --logits "$f" --quiet --out "$DIR/exact.json"
	run_timed fedcalib-binned "$r" "$FEDCALIB" calibrate --central --method isotonic --bins-exp 10 --logits "$f" --quiet --out "$DIR/binned.json"
	echo "  repetition $r/$REPS done" >&2
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
summarise
echo "(raw timings: $TSV)"
