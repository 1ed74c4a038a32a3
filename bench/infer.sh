#!/usr/bin/env bash
# bench/infer.sh — fedcalib infer against the bare onnxruntime_go loop a user
# would write, and against PyTorch's DataLoader (issues #29, #32; results in
# docs/BENCHMARKS.md, "infer against a bare ONNX Runtime loop").
#
#   bench/infer.sh                    # both cases, PAIRS=5, quiet and busy
#   CASES=mnist PAIRS=9 bench/infer.sh
#
# Cases (CASES, space-separated; default "mnist resnet50 batch1 cli"):
#   mnist     models/mnist-tiny/model.onnx over MNIST's test file (10,000
#             gzip-compressed IDX images: make -s mnist-dir), batch 256.
#   resnet50  a ResNet-shaped model with random weights (RDEPTH, 50: the
#             ResNet-50 topology; 18: ResNet-18), built in Go by
#             bench/resnetshaped into DIR (not committed; no Python), over
#             N generated JPEG photos (500×375 and 375×500, quality 90, made by
#             bench/resnet50_shaped.py) in an ImageFolder, --preprocess
#             imagenet (resize 256 bilinear, crop 224), batch RBATCH.
#             TORCH=1 also runs PyTorch's DataLoader peer (it exports
#             torchvision's own resnet50 with bench/resnet50_shaped.py).
# For each case and each load (LOADS, default "as-is busy": the machine as it
# is, then with one extra busy-looping process beside it), it runs
# infer/BenchmarkInferOverhead for PAIRS iterations: per iteration, in
# rotating order, the variants VARIANTS (default
# peer,peer-nospin,infer,infer-1run,infer-seq): the bare loop at ONNX
# Runtime's defaults ("peer", spinning pool threads), the same with spinning
# off ("peer-nospin"), Infer end to end at its defaults ("infer": reading,
# decoding, preprocessing, one run per core at once on one thread each),
# one run at a time on all the threads ("infer-1run", the plan before,
# its reader at background priority) and reading between runs
# ("infer-seq"); "infer-fg" (one run, reader at normal priority),
# "infer-less1" (one intra-op thread fewer), "peer-par" (the bare loop
# on as many goroutines, one thread each), "peer-sessions" (the same,
# a session per goroutine), "infer-mN" (infer with --batch N),
# "infer-xN" (batches of N, not capped), "infer-uncapped" (concurrent
# runs' batches not capped at 256 KiB of input: the plan before) and
# "infer-spare" (GOMAXPROCS one above the runs, as the commands do) may
# be added; a peer's name may end in -bN for batches of N records (e.g.
# peer-b64, peer-par-b83). All use THREADS
# threads in all (default: GOMAXPROCS). "busy"
# is one extra process busy-looping on a core. It prints the median
# records/s of each, the medians of the paired ratios (records/s; process CPU
# time), the test process's peak RSS and the 1-minute load average before and
# after. For resnet50 it then runs torchvision's ImageFolder + DataLoader
# (WORKERS=2 workers, torch.set_num_threads(THREADS or 2)) feeding the same
# model in PyTorch, once per load, and prints its images/s.
#
# Case batch1: export/BenchmarkBatch1Overhead on the resnet50 model, B1 (20)
# iterations, one intra-op thread: per iteration, in rotating order, one
# batch-1 run of the plain model and of the model with temp, bbq and
# opvector appended; it prints the median plain latency and the median
# share each calibrator adds (goal <= 1 %).
#
# Case cli: the whole `fedcalib infer` process on mnist-tiny over all 70,000
# MNIST images at its defaults, with --runs 1 (one run at a time on all
# the cores), --threads 1 (one run on one thread) and --runs 1 --spin,
# and BEFORE (another fedcalib binary, at its defaults) when set,
# PAIRS rounds of them in turn, for each load of LOADS; it
# prints each run's wall time, CPU time and peak RSS, then the median of the
# paired wall ratios to the default.
#
# Environment: PAIRS (5), BEFORE (unset), THREADS (0: the default), N (64 images), RBATCH (16),
# RDEPTH (50), TORCH (0), WORKERS (2), PYTHON (/usr/bin/python3, with PIL for
# the images; torch and torchvision for TORCH=1 and batch1), DIR
# (/tmp/fedcalib-infer-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${CASES:-mnist resnet50 batch1 cli}
B1=${B1:-20}
LOADS=${LOADS:-as-is busy}
PAIRS=${PAIRS:-5}
BEFORE=${BEFORE:-}
THREADS=${THREADS:-0}
N=${N:-64}
RBATCH=${RBATCH:-16}
RDEPTH=${RDEPTH:-50}
TORCH=${TORCH:-0}
VARIANTS=${VARIANTS:-peer,peer-nospin,infer,infer-1run,infer-seq}
WORKERS=${WORKERS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
DIR=${DIR:-/tmp/fedcalib-infer-bench}
mkdir -p "$DIR"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); PAIRS=$PAIRS THREADS=$THREADS"
go test -c -o "$DIR/infer.test" ./infer
busy_pid=
stop_busy() { if [ -n "$busy_pid" ]; then kill "$busy_pid" 2>/dev/null || true; wait "$busy_pid" 2>/dev/null || true; busy_pid=; fi; }
trap stop_busy EXIT
start_busy() { (while :; do :; done) & busy_pid=$!; }

for c in $CASES; do
	case $c in
	cli)
		go build -o "$DIR/fedcalib" ./cmd/fedcalib
		mdir=$(make -s mnist-dir)
		for l in $LOADS; do
			[ "$l" = busy ] && start_busy
			echo "-- cli: fedcalib infer, mnist-tiny, mnist:all (70,000), load $l ($(load) before)"
			: >"$DIR/cli.times"
			for r in $(seq "$PAIRS"); do
				vs=(default "--runs 1" "--threads 1" "--runs 1 --spin"); [ -n "$BEFORE" ] && vs+=(before)
				for v in "${vs[@]}"; do
					a=(); bin=$DIR/fedcalib
					case $v in default) ;; before) bin=$BEFORE ;; *) a=($v) ;; esac
					/usr/bin/time -f "$r	$v	%e	%U	%S	%M" -o "$DIR/cli.time" "$bin" infer \
						--model models/mnist-tiny/model.onnx --data "mnist:$mdir:all" \
						--out "$DIR/mnist.npz" --quiet "${a[@]}"
					cat "$DIR/cli.time" >>"$DIR/cli.times"
				done
			done
			awk -F'\t' 'function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
					return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
				{ w[$1, $2] = $3; if (!($2 in v)) { v[$2] = 1; order[++nv] = $2 }
				  printf "   %s %s: %.2f s wall, %.2f s CPU, peak RSS %d KiB\n", $1, $2, $3, $4 + $5, $6 }
				END { for (k = 1; k <= nv; k++) { n = 0; for (r = 1; (r SUBSEP "default") in w; r++) x[++n] = w[r, order[k]] / w[r, "default"]
					printf "   median paired wall %s / default: %.3f\n", order[k], median(x, n); delete x } }' "$DIR/cli.times"
			echo "   load $(load) after"
			stop_busy
		done
		continue
		;;
	batch1)
		model=$DIR/resnet50.onnx
		[ -f "$model" ] || "$PYTHON" bench/resnet50_shaped.py model "$model"
		go test -c -o "$DIR/export.test" ./export
		before=$(load)
		out=$(cd export && FEDCALIB_BENCH_MODEL="$model" /usr/bin/time -f 'peak RSS %M KiB' "$DIR/export.test" \
			-test.run '^$' -test.bench Batch1Overhead -test.benchtime "${B1}x" 2>&1)
		echo "-- batch1 (resnet50, one thread, load $before before, $(load) after), $B1 iterations:"
		echo "$out" | tr '\t' '\n' | sed -n 's/^ *\(-\{0,1\}[0-9.]*\) \([a-z].*\)$/   \2 \1/p' | sort
		echo "$out" | grep 'peak RSS' | sed 's/^/   /'
		continue
		;;
	mnist)
		model=$PWD/models/mnist-tiny/model.onnx
		spec=mnist:$(make -s mnist-dir):test
		env=()
		;;
	resnet50)
		model=$DIR/resnet$RDEPTH-shaped.onnx
		[ -f "$model" ] || go run ./bench/resnetshaped -depth "$RDEPTH" -out "$model"
		imgs=$DIR/jpeg-$N
		[ -d "$imgs" ] || "$PYTHON" bench/resnet50_shaped.py images "$imgs" "$N"
		spec=imagefolder:$imgs
		env=(FEDCALIB_BENCH_PREPROCESS=imagenet FEDCALIB_BENCH_BATCH=$RBATCH)
		;;
	*) echo "bench/infer.sh: unknown case $c" >&2; exit 2 ;;
	esac
	for l in $LOADS; do
		[ "$l" = busy ] && start_busy
		before=$(load)
		out=$(cd infer && env "${env[@]}" FEDCALIB_BENCH_MODEL="$model" FEDCALIB_BENCH_DATA="$spec" \
			FEDCALIB_BENCH_THREADS="$THREADS" FEDCALIB_BENCH_VARIANTS="$VARIANTS" \
			/usr/bin/time -f 'peak RSS %M KiB' "$DIR/infer.test" -test.run '^$' -test.bench InferOverhead \
			-test.benchtime "${PAIRS}x" 2>&1 | grep -v WARN)
		echo "-- $c ($(basename "$model"), $spec), load $l ($before before, $(load) after), $PAIRS pairs:"
		echo "$out" | tr '\t' '\n' | sed -n 's/^ *\(-\{0,1\}[0-9.]*\) \([a-z].*\)$/   \2 \1/p' | sort
		echo "$out" | grep 'peak RSS' | sed 's/^/   /'
		if [ "$c" = resnet50 ] && [ "$TORCH" = 1 ]; then
			t=$THREADS; [ "$t" = 0 ] && t=$(nproc)
			echo "   $("$PYTHON" bench/resnet50_shaped.py torch "$imgs" "$t" "$WORKERS" "$RBATCH")"
		fi
		stop_busy
	done
done
