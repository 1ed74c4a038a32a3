#!/usr/bin/env bash
# bench/resnet18.sh — ResNet18 through fedcalib against bare ONNX Runtime and
# PyTorch, and the batch-1 cost of appended calibrators (issue #16; results
# in docs/BENCHMARKS.md, "ResNet18").
#
#   bench/resnet18.sh                 # resnet18-cifar10, 512 test images
#   NAME=resnet18-mnist N=1024 bench/resnet18.sh
#
# 1. infer/BenchmarkInferOverhead on N images (an .npz of the data set's
#    first N test rows, uint8 HWC): per iteration, in rotating order, the bare
#    loop (Session.Run over batches decoded and preprocessed beforehand) and
#    Infer end to end; it prints the median paired ratios infer/peer (goal ≥ 0.97).
# 2. PyTorch (bench/resnet18_peer.py): the same weights over the same
#    preprocessed batches, same threads, interleaved with the Go runs.
# 3. export/BenchmarkBatch1Latency: batch 1, one thread, the plain model and
#    the model with temp, bbq and opvector appended (goal: ≤ 1 % added).
#
# Environment: NAME (default resnet18-cifar10: models/NAME/model.onnx and its
# checkpoint ~/.cache/fedcalib/train/NAME/ckpt.pt), N (512), THREADS (2),
# REPS (3 rounds of Go + PyTorch), PYTHON (/usr/bin/python3, with torch),
# DIR (/tmp/fedcalib-resnet-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${NAME:-resnet18-cifar10}
N=${N:-512}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
DIR=${DIR:-/tmp/fedcalib-resnet-bench}
MODEL=$PWD/models/$NAME/model.onnx
[ -f "$MODEL" ] || { echo "bench/resnet18.sh: $MODEL is absent (see models/$NAME/CARD.md)" >&2; exit 2; }
mkdir -p "$DIR"
IMAGES=$DIR/$NAME-$N.npz
echo "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $NAME, $N images, $THREADS threads"
"$PYTHON" - "$NAME" "$IMAGES" "$N" <<'PY'
import os, sys, importlib.util
import numpy as np
name, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
repo = os.getcwd()
sys.path.insert(0, os.path.join(repo, "models", "common"))
spec = importlib.util.spec_from_file_location("recipe", os.path.join(repo, "models", name, "train.py"))
recipe = importlib.util.module_from_spec(spec); spec.loader.exec_module(recipe)
import fedrecipe as fr
d = recipe.TASK["load"]()
part = fr.load_partition(recipe.TASK["partition"], d["labels"])
rows = part.rows(fr.SPLIT_TEST)[:n]
x = d["x"][rows]
if x.ndim == 4 and x.shape[1] in (1, 3):
    x = x.transpose(0, 2, 3, 1)  # the recipe's CHW -> the HWC images fedcalib's npz input reads
np.savez(out, x=np.ascontiguousarray(x), y=d["labels"][rows])
print(f"wrote {out}: x {x.shape} {x.dtype}")
PY
go test -c -o "$DIR/infer.test" ./infer
go test -c -o "$DIR/export.test" ./export
for r in $(seq "$REPS"); do
	echo "-- round $r: fedcalib (Go) bare session vs Infer"
	(cd infer && FEDCALIB_BENCH_MODEL=$MODEL FEDCALIB_BENCH_DATA=npz:$IMAGES FEDCALIB_BENCH_THREADS=$THREADS \
		"$DIR/infer.test" -test.run '^$' -test.bench InferOverhead -test.benchtime 3x | grep -E 'Benchmark|ok')
	echo "-- round $r: PyTorch"
	"$PYTHON" bench/resnet18_peer.py "$NAME" "$IMAGES" 256 "$THREADS" 2
done
echo "-- batch-1 latency, one thread (plain vs calibrated)"
(cd export && FEDCALIB_BENCH_MODEL=$MODEL "$DIR/export.test" -test.run '^$' -test.bench Batch1Latency -test.benchtime 200x -test.count 5 | grep -E 'Benchmark')
