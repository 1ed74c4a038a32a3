#!/bin/bash
# models/gpu-zoo.sh — the ResNet18 recipes end to end on a CUDA machine that
# has no Go toolchain: each NAME trains on the GPU (side by side, for at most
# MINUTES from its start, 4 torch threads, a checkpoint every 10 rounds),
# then is evaluated on the GPU and
# exported (train.py --export-only --device cuda: the ONNX file from the CPU
# copy, TorchScript exporter, opset 17), then its logits over its whole data
# set are computed on the CPU by Python's onnxruntime with fedcalib's
# preprocessing (common/onnx_logits.py). Everything of NAME lands in
# OUT/NAME/ (ckpt.pt, model.onnx, results.json, rounds.jsonl, logits.npz
# and .npz.json, *.log) and, without the model and checkpoint, in
# OUT/NAME.tar.gz as soon as NAME is done. Pack the logits on a machine with
# Go: go run ./cmd/zoo-logits pack --model-sha256 (see models/logits/README.md).
#
#   FEDCALIB_DATA=/path/to/shared/data MNIST_DIR=/path/to/GoMNIST/data \
#       models/gpu-zoo.sh 5 /tmp/zoo resnet18-mnist resnet18-cifar10 resnet18-femnist
#
# PY (default python3) must have torch with CUDA, onnx and onnxruntime.
# CPU_THREADS (default 8): onnxruntime threads per model. DEVICE (default
# cuda) and TRAIN_ARGS (extra train.py flags) exist for a dry run on a CPU.
# Run from the repository root.
set -uo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 MINUTES OUT NAME..." >&2
	exit 2
fi
minutes=$1
out=$2
shift 2
export PYTHONUNBUFFERED=1
read -r -a py <<<"${PY:-python3}"
cpu=${CPU_THREADS:-8}
device=${DEVICE:-cuda}
read -r -a extra <<<"${TRAIN_ARGS:-}"

pipeline() {
	local name=$1 d=$out/$1 t0=$SECONDS
	mkdir -p "$d"
	if ! "${py[@]}" "models/$name/train.py" --device "$device" --threads 4 --checkpoint-every 10 \
		--deadline-minutes "$minutes" --no-export --cache-dir "$d" "${extra[@]}" >"$d/train.log" 2>&1; then
		echo "== $name: training failed: $(tail -n 3 "$d/train.log")"
	elif ! "${py[@]}" "models/$name/train.py" --export-only --device "$device" --threads 4 \
		--cache-dir "$d" --out "$d" "${extra[@]}" >"$d/export.log" 2>&1; then
		echo "== $name: export failed: $(tail -n 3 "$d/export.log")"
	elif ! "${py[@]}" models/common/onnx_logits.py "$name" --model "$d/model.onnx" \
		--out "$d/logits.npz" --threads "$cpu" >"$d/logits.log" 2>&1; then
		echo "== $name: logits failed: $(tail -n 3 "$d/logits.log")"
	else
		echo "== $name: done in $((SECONDS - t0)) s: $(tail -n 1 "$d/export.log")"
		cat "$d/logits.npz.json"
	fi
	(cd "$out" && tar czf "$name.tar.gz" --exclude=model.onnx --exclude='ckpt.pt*' "$name")
}

for name in "$@"; do
	pipeline "$name" &
done
wait
