#!/bin/bash
# models/gpu-train.sh — trains ResNet18 recipes on a CUDA machine, side by
# side on its one GPU, for at most MINUTES each, checkpointing every 10
# rounds (and at the round a run stops) into OUT/NAME/ckpt.pt. No export
# there: copy OUT/NAME/ckpt.pt to ~/.cache/fedcalib/train/NAME/ on the
# machine that writes the card and run NAME/train.py --export-only, so the
# final metrics and the ONNX come from the same CPU path as every other
# model of the zoo (and a later CPU run can resume the GPU's checkpoint).
#
#   FEDCALIB_DATA=/path/to/shared/data models/gpu-train.sh 6.5 /tmp/train \
#       resnet18-cifar10 resnet18-femnist
#
# PY (default python3) must have torch with CUDA. Run from the repository
# root. Per-model logs: OUT/NAME/train.log; round records: OUT/NAME/rounds.jsonl.
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 MINUTES OUT NAME..." >&2
	exit 2
fi
minutes=$1
out=$2
shift 2
export PYTHONUNBUFFERED=1
py=${PY:-python3}
pids=()
for name in "$@"; do
	mkdir -p "$out/$name"
	"$py" "models/$name/train.py" --device cuda --threads 4 --checkpoint-every 10 \
		--deadline-minutes "$minutes" --no-export --cache-dir "$out/$name" \
		>"$out/$name/train.log" 2>&1 &
	pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done
for name in "$@"; do
	echo "== $name: $(tail -n 1 "$out/$name/train.log")"
done
exit $rc
