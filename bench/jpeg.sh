#!/usr/bin/env bash
# bench/jpeg.sh — JPEG decoding speed before and after the move from
# internal/ljpeg (a copy of Go's image/jpeg with libjpeg's IDCT) to
# libjpeg-turbo: BenchmarkJPEGDecode (infer/data/jpeg_bench_test.go) built
# against both trees and run paired and interleaved (old, new, old, new,
# ...), each case in its own process, on CIFAR-10's 32×32 JPEGs (when
# ../shared/data has the archive), a 32×32 JPEG and a 1600×1200 one. It
# prints, per case, the median wall ns per image of each (the benchmark's
# ns/op), the median process CPU µs per image (user + sys over the
# iterations, set-up included), their new/old ratios, the peak RSS, and the
# 1-minute load average. See docs/BENCHMARKS.md, "JPEG decoding".
#
#   bench/jpeg.sh                      # 5 pairs of 1 s runs per case
#   REPS=3 BENCHTIME=300ms bench/jpeg.sh
#
# Environment:
#   OLD        the commit with the old decoder (default 8ed7d0f, the last one
#              with infer/data/internal/ljpeg)
#   REPS       pairs of runs (default 5)
#   BENCHTIME  -test.benchtime of each run (default 1s)
set -euo pipefail

cd "$(dirname "$0")/.."
OLD=${OLD:-8ed7d0f}
REPS=${REPS:-5}
BENCHTIME=${BENCHTIME:-1s}
[ -x /usr/bin/time ] || { echo "bench/jpeg.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/fedcalib-jpeg-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/old"
git archive "$OLD" | tar -x -C "$TMP/old"
cp infer/data/jpeg_bench_test.go "$TMP/old/infer/data/"
(cd "$TMP/old" && go test -c -o "$TMP/old.test" ./infer/data)
go test -c -o "$TMP/new.test" ./infer/data

CASES=$(cd infer/data && "$TMP/new.test" -test.run '^$' -test.bench '^BenchmarkJPEGDecode$' -test.benchtime 1x -test.cpu 1 |
	awk '/^BenchmarkJPEGDecode\// { sub(/^BenchmarkJPEGDecode\//, "", $1); print $1 }')

# Each case runs in its own process, old then new, REPS times; both
# binaries run in this tree's infer/data, so that they read the same
# files. A line of $TMP/runs: version case iterations ns/image CPU-seconds
# peak-RSS-KiB (the CPU includes the case's set-up, reading its files).
for rep in $(seq "$REPS"); do
	for c in $CASES; do
		for v in old new; do
			(cd infer/data && /usr/bin/time -f "%U %S %M" -o "$TMP/time" "$TMP/$v.test" \
				-test.run '^$' -test.bench "^BenchmarkJPEGDecode\$/^$c\$" -test.benchtime "$BENCHTIME" -test.cpu 1) >"$TMP/out"
			read -r user sys rss <"$TMP/time"
			awk -v v="$v" -v c="$c" -v cpu="$(echo "$user + $sys" | bc -l)" -v rss="$rss" \
				'/^BenchmarkJPEGDecode\// { print v, c, $2, $3, cpu, rss }' "$TMP/out" >>"$TMP/runs"
		done
	done
done

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v v="$1" -v c="$2" "\$1 == v && \$2 == c { print $3 }" "$TMP/runs" | median; }
printf '%-10s %13s %13s %8s %13s %13s %8s %9s %9s\n' case "old ns/img" "new ns/img" "wall" "old CPU µs" "new CPU µs" "CPU" "old MiB" "new MiB"
for c in $CASES; do
	ow=$(col old "$c" '$4'); nw=$(col new "$c" '$4')
	oc=$(col old "$c" '1e6 * $5 / $3'); nc=$(col new "$c" '1e6 * $5 / $3')
	orss=$(awk -v c="$c" '$1 == "old" && $2 == c && $6 > m { m = $6 } END { print m / 1024 }' "$TMP/runs")
	nrss=$(awk -v c="$c" '$1 == "new" && $2 == c && $6 > m { m = $6 } END { print m / 1024 }' "$TMP/runs")
	printf '%-10s %13.0f %13.0f %8.3f %13.2f %13.2f %8.3f %9.1f %9.1f\n' "$c" "$ow" "$nw" "$(echo "$nw / $ow" | bc -l)" \
		"$oc" "$nc" "$(echo "$nc / $oc" | bc -l)" "$orss" "$nrss"
done
echo "medians of $REPS paired runs; wall and CPU columns: new/old; load average (1 min): $(cut -d' ' -f1 /proc/loadavg); $(nproc) CPUs; go test -cpu 1"
