#!/usr/bin/env bash
# bench/reader.sh — the CPU that `fedcalib infer`'s reader costs per record
# (issue #32), before and after libdeflate and the unrolled lookup loop:
# infer/BenchmarkReader (infer/reader_bench_test.go: data.Open, reading,
# decompressing, encoding into batch rows, no model run) built against two
# trees and run paired and interleaved (old, new, new-nolib in an order
# that rotates from round to round),
# each run in its own process. "new-nolib" is the new tree with
# FEDCALIB_LIBDEFLATE naming a missing file: the klauspost/compress
# fallback. It prints, per variant, the median CPU milliseconds per
# 10,000 records (the benchmark's cpu-ms/10k-rec: process user + system
# time over the timed iterations), the median of the paired ratios to
# "old", the peak RSS of the process, and the 1-minute load average
# before and after. See docs/BENCHMARKS.md, "Reader cost per record
# (issue #32)".
#
#   bench/reader.sh                     # 5 rounds, MNIST's test set
#   REPS=9 SPEC=mnist:$(make -s mnist-dir):train bench/reader.sh
#
# Environment:
#   OLD    the commit before (default 219b2f6, the last one without
#          infer/data/internal/deflate)
#   REPS   rounds (default 5)
#   ITERS  reads of the whole data per run (-test.benchtime, default 20x)
#   MODEL  the model that fixes the encoding (default models/mnist-tiny)
#   SPEC   the data spec (default mnist:$(make -s mnist-dir):test, 10,000
#          gzip-compressed IDX images)
#   CLI    1 (the default) also runs the whole `fedcalib infer` of both
#          trees, REPS pairs, over mnist:all (70,000 records) with
#          --read-ahead=false --threads 1 (reading between runs, one
#          ONNX Runtime thread, no spinning: process CPU = reader + model),
#          and prints each one's median wall and CPU seconds, peak RSS, the
#          median paired CPU ratio, and whether the logits files are
#          identical; 0 skips it
set -euo pipefail

cd "$(dirname "$0")/.."
OLD=${OLD:-219b2f6}
REPS=${REPS:-5}
ITERS=${ITERS:-20x}
MODEL=${MODEL:-$PWD/models/mnist-tiny/model.onnx}
SPEC=${SPEC:-mnist:$(make -s mnist-dir):test}
[ -x /usr/bin/time ] || { echo "bench/reader.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/fedcalib-reader-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/old"
git archive "$OLD" | tar -x -C "$TMP/old"
cp infer/reader_bench_test.go "$TMP/old/infer/"
(cd "$TMP/old" && go test -c -o "$TMP/old.test" ./infer)
go test -c -o "$TMP/new.test" ./infer
CLI=${CLI:-1}
if [ "$CLI" = 1 ]; then
	(cd "$TMP/old" && go build -o "$TMP/old.bin" ./cmd/fedcalib)
	go build -o "$TMP/new.bin" ./cmd/fedcalib
fi

load() { cut -d' ' -f1 /proc/loadavg; }
before=$(load)
echo "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $SPEC, $(basename "$(dirname "$MODEL")"), REPS=$REPS ITERS=$ITERS"
# A line of $TMP/runs: round variant cpu-ms/10k-rec rec/s peak-RSS-KiB.
variants=(old new new-nolib)
for rep in $(seq "$REPS"); do
	for j in 0 1 2; do
		v=${variants[$(((rep + j) % 3))]}
		bin=$TMP/${v%-nolib}.test
		lib=${FEDCALIB_LIBDEFLATE:-}
		[ "$v" = new-nolib ] && lib=$TMP/missing/libdeflate.so.0
		(cd infer && FEDCALIB_LIBDEFLATE=$lib FEDCALIB_BENCH_MODEL="$MODEL" FEDCALIB_BENCH_DATA="$SPEC" \
			/usr/bin/time -f "%M" -o "$TMP/time" "$bin" -test.run '^$' -test.bench '^BenchmarkReader$' \
			-test.benchtime "$ITERS") >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; exit 1; }
		awk -v r="$rep" -v v="$v" -v rss="$(cat "$TMP/time")" '/^BenchmarkReader/ {
			for (i = 1; i < NF; i++) { if ($(i+1) == "cpu-ms/10k-rec") c = $i; if ($(i+1) == "rec/s") s = $i }
			printf "%s %s %s %s %s\n", r, v, c, s, rss }' "$TMP/out" >>"$TMP/runs"
	done
done
awk -v before="$before" -v after="$(load)" '
	function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{ C[$2, $1] = $3; S[$2, $1] = $4; if ($5 > R[$2]) R[$2] = $5; if ($1 > reps) reps = $1
	  if (!($2 in seen)) { seen[$2] = 1; names[++k] = $2 } }
	END {
		printf "%-10s %16s %12s %16s %12s\n", "variant", "cpu-ms/10k-rec", "rec/s", "cpu vs old", "peak RSS"
		for (q = 1; q <= k; q++) { v = names[q]
			for (r = 1; r <= reps; r++) { c[r] = C[v, r]; s[r] = S[v, r]; x[r] = C[v, r] / C["old", r] }
			printf "%-10s %16.2f %12.0f %16.3f %9.1f MiB\n", v, median(c, reps), median(s, reps), median(x, reps), R[v] / 1024 }
		printf "load %s before, %s after\n", before, after }' "$TMP/runs"

[ "$CLI" = 1 ] || exit 0
all=mnist:$(make -s mnist-dir):all
before=$(load)
echo "-- fedcalib infer --read-ahead=false --threads 1, mnist-tiny, $all, $REPS pairs"
for rep in $(seq "$REPS"); do
	order="old new"; [ $((rep % 2)) = 0 ] && order="new old"
	for v in $order; do
		/usr/bin/time -f "$rep $v %e %U %S %M" -a -o "$TMP/cli" "$TMP/$v.bin" infer --model "$MODEL" --data "$all" \
			--out "$TMP/$v.npz" --quiet --read-ahead=false --threads 1
	done
	cmp -s "$TMP/old.npz" "$TMP/new.npz" || echo "   round $rep: the logits files differ"
done
awk -v before="$before" -v after="$(load)" '
	function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{ W[$2, $1] = $3; C[$2, $1] = $4 + $5; if ($6 > R[$2]) R[$2] = $6; if ($1 > reps) reps = $1 }
	END {
		for (q = 1; q <= 2; q++) { v = q == 1 ? "old" : "new"
			for (r = 1; r <= reps; r++) { w[r] = W[v, r]; c[r] = C[v, r]; x[r] = C[v, r] / C["old", r] }
			printf "   %s: %.2f s wall, %.2f s CPU (median), CPU vs old %.3f (median of pairs), peak RSS %.1f MiB\n", v, median(w, reps), median(c, reps), median(x, reps), R[v] / 1024 }
		printf "   load %s before, %s after; logits files identical unless said above\n", before, after }' "$TMP/cli"
