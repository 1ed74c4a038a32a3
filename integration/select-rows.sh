#!/usr/bin/env bash
# Private selection rows of docs/RESULTS.md: `fedcalib calibrate --select`
# (the base model against weighted FedIsotonic at 16 to 1,024 bins, chosen
# by private federated evaluation on 30% of each client's calibration
# rows; every selection default of calibrate) at ε = 1 and 8, T = 12,
# p = 0.1, δ = 1e-5, zCDP, seeds 1-5, on each model whose logits are
# committed (models/logits), with the model's own partition. Writes
# integration/selection/runs.csv: one row per run with
# the winner and the test metrics of what was written (the base model's
# when it won). Deterministic for the committed logits.
# Run from anywhere after `make build`; ONLY="name …" limits the models.
set -euo pipefail
cd "$(dirname "$0")/.."
FEDCALIB=${FEDCALIB:-bin/fedcalib}
OUT=integration/selection
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

partition_of() {
  case $1 in
    mnist-tiny|mnist-cnn|resnet18-mnist) echo models/partitions/mnist-dir0.1-k100.json.gz ;;
    fashion-cnn) echo models/partitions/fashion-dir0.1-k100.json.gz ;;
    cifar10-cnn|resnet18-cifar10) echo models/partitions/cifar10-dir0.1-k100.json.gz ;;
    femnist-cnn|resnet18-femnist) echo models/partitions/femnist-leaf-sample.json.gz ;;
    *) return 1 ;;
  esac
}

# A JSON number of eval --json: field $2 of the object $1 ("" = top level).
num() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[sys.argv[2]] if sys.argv[2] else d; print(repr(d[sys.argv[3]]))' "$tmp/eval.json" "$1" "$2"; }

rows=$tmp/rows.csv
: >"$rows"
for f in models/logits/*.npz; do
  name=$(basename "$f" .npz)
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  part=$(partition_of "$name") || { echo "select-rows: no partition known for $name" >&2; continue; }
  for eps in 1 8; do
    for seed in 1 2 3 4 5; do
      rm -f "$tmp/sel.json"
      set +e
      "$FEDCALIB" calibrate --method isotonic --weighting all --logits "$f" --partition "$part" \
        --rounds 12 --sample-rate 0.1 --epsilon "$eps" --delta 1e-5 --select --seed "$seed" \
        --ledger "$tmp/ledger-$name-$eps-$seed.json" --out "$tmp/sel.json" -q >"$tmp/out.txt" 2>&1
      code=$?
      set -e
      cal=()
      case $code in
        0) winner=$(grep -o 'isotonic M=[0-9]* won' "$tmp/out.txt" | head -1 | cut -d' ' -f2); cal=(--calibrator "$tmp/sel.json") ;;
        1) winner=base ;;
        *) cat "$tmp/out.txt" >&2; exit "$code" ;;
      esac
      "$FEDCALIB" eval --logits "$f" --partition "$part" --split test "${cal[@]}" --json >"$tmp/eval.json"
      if [ "$winner" = base ]; then
        after="$(num "" cwece),$(num "" accuracy)"; before=$after
      else
        after="$(num "" cwece),$(num "" accuracy)"; before="$(num before cwece),$(num before accuracy)"
      fi
      echo "$name,isotonic,all,$eps,$seed,$winner,$before,$after" >>"$rows"
      echo "select-rows: $name ε=$eps seed $seed: $winner" >&2
    done
  done
done
# Keep the rows of models not run now (ONLY, or logits absent here).
{
  echo "dataset,method,weighting,epsilon,seed,winner,base_cwece,base_accuracy,cwece,accuracy"
  if [ -f "$OUT/runs.csv" ]; then
    ran=$(cut -d, -f1 "$rows" | sort -u | tr '\n' ' ')
    tail -n +2 "$OUT/runs.csv" | while IFS= read -r l; do [[ " $ran " == *" ${l%%,*} "* ]] || echo "$l"; done
  fi
  cat "$rows"
} >"$tmp/runs.csv"
{ head -1 "$tmp/runs.csv"; tail -n +2 "$tmp/runs.csv" | LC_ALL=C sort -t, -k1,1 -k4,4n -k5,5n; } >"$OUT/runs.csv"
echo "wrote $OUT/runs.csv"
# summary.md: mean (sample standard deviation) over seeds, winners counted.
python3 - "$OUT/runs.csv" >"$OUT/summary.md" <<'PY'
import collections, csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("# select: calibrate --select, base vs weighted FedIsotonic M = 4, 6, 8, 10\n")
print("Test cwECE % and accuracy %, mean (standard deviation) over 5 seeds; winners: how often each candidate was written.\n")
print("| Dataset | ε | Base cwECE | Selected cwECE | Base accuracy | Selected accuracy | winners |")
print("|---|---|---|---|---|---|---|")
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["dataset"], r["epsilon"]), []).append(r)
for (d, e), rs in groups.items():
    def ms(k, p=3):
        v = [100 * float(r[k]) for r in rs]
        return f"{statistics.mean(v):.{p}f} ({statistics.stdev(v):.{p}f})" if len(v) > 1 else f"{v[0]:.{p}f}"
    w = collections.Counter(r["winner"] for r in rs)
    print(f"| {d} | {e} | {100*float(rs[0]['base_cwece']):.3f} | {ms('cwece')} | {100*float(rs[0]['base_accuracy']):.2f} | {ms('accuracy', 2)} | "
          + ", ".join(f"{k} ×{n}" for k, n in sorted(w.items())) + " |")
PY
echo "wrote $OUT/summary.md"
