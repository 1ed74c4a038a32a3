#!/usr/bin/env bash
# bench/dirichlet.sh — central Dirichlet calibration against a plain
# PyTorch L-BFGS fit of the same objective (bench/dirichlet_peer.py), and
# the cost of fedcalib's cross-validation against one fit (issue #32),
# paired and interleaved: each repetition runs the peer, fedcalib's fixed
# fit (--lambda/--mu) and its cross-validated fit (the default) back to
# back on the same file. The peer stops once its objective reaches
# fedcalib's (the same optimum, within 1e-9). Prints median wall and CPU
# seconds, peak RSS, the paired ratios to the peer and the 1-minute load
# average of each repetition, then the ratios to fedcalib's fixed fit
# (the cross-validated row's: what the default cross-validation costs
# against one fit). See docs/BENCHMARKS.md, "Dirichlet against a plain
# PyTorch L-BFGS".
#
#   bench/dirichlet.sh                           # 50,000 × 10, 5 repetitions
#   ROWS=5000 CLASSES=10 REPS=3 bench/dirichlet.sh
#   ROWS=1000 CLASSES="50 100" REPS=1 TORCH=0 bench/dirichlet.sh
#                                                # Newton–CG's cross-validation (beyond 12 classes), no peer
#
# Environment: ROWS (default 50000), CLASSES (default 10; several, as
# "50 100", run the whole comparison once for each), REPS (default 5),
# TORCH (default 1; 0 leaves the PyTorch peer out, for the
# cross-validation against one fit alone), LAMBDA and MU (default 0.001,
# a federated fit's), DIR (default
# /tmp/fedcalib-dirichlet-bench), PYTHON (with NumPy and PyTorch; default
# /usr/bin/python3, Debian's python3-torch), FEDCALIB (default: build
# bin/fedcalib here).
set -euo pipefail

cd "$(dirname "$0")/.."
ROWS=${ROWS:-50000}
CLASSES=${CLASSES:-10}
if [ "$CLASSES" != "${CLASSES%% *}" ]; then
	for c in $CLASSES; do CLASSES=$c "$0"; done
	exit
fi
TORCH=${TORCH:-1}
REPS=${REPS:-5}
LAMBDA=${LAMBDA:-0.001}
MU=${MU:-0.001}
DIR=${DIR:-/tmp/fedcalib-dirichlet-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
FEDCALIB=${FEDCALIB:-}
PEER=bench/dirichlet_peer.py

# shellcheck source=bench/paired.sh
. bench/paired.sh
paired_setup bench/dirichlet.sh "numpy, torch" "python3-numpy python3-torch"
BASE=torch

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -srm), $(nproc) CPUs; $(go env GOVERSION); torch $("$PYTHON" -c 'import torch; print(torch.__version__, torch.get_num_threads(), "threads")'); $ROWS rows × $CLASSES classes, λ = $LAMBDA, μ = $MU"
fixed=(calibrate --central --method dirichlet --lambda "$LAMBDA" --mu "$MU" --logits "$f" --quiet)
if [ "$TORCH" != 0 ]; then
	"$FEDCALIB" "${fixed[@]}" --out "$DIR/fixed.json"
	target=$("$PYTHON" -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))["provenance"]["fit"]["objective"]))' "$DIR/fixed.json")
	echo "# fedcalib's objective $target; the peer's: $("$PYTHON" "$PEER" "$f" "$LAMBDA" "$MU" "$target")"
fi
for ((r = 1; r <= REPS; r++)); do
	[ "$TORCH" = 0 ] || run_timed torch "$r" "$PYTHON" "$PEER" "$f" "$LAMBDA" "$MU" "$target"
	run_timed fedcalib-fixed "$r" "$FEDCALIB" "${fixed[@]}" --out "$DIR/fixed.json"
	run_timed fedcalib-crossvalidated "$r" "$FEDCALIB" calibrate --central --method dirichlet --logits "$f" --quiet --out "$DIR/cv.json"
	echo "  repetition $r/$REPS done" >&2
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$TORCH" = 0 ] || summarise
echo "# the chosen λ, μ: $("$PYTHON" -c 'import json, sys; c = json.load(open(sys.argv[1]))["provenance"]["fit"]["dirichlet"]; print(c["lambda"], c["mu"])' "$DIR/cv.json")"
echo "# the same runs against fedcalib's fixed fit: the cross-validated row's ratios are what the default cross-validation costs against one fit (issue #32: ≤ 4×)"
BASE=fedcalib-fixed summarise
echo "(raw timings: $TSV)"
