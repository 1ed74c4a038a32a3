# bench/paired.sh — sourced by the paired benchmarks (dirichlet.sh,
# temperature.sh): run_timed NAME REP CMD... runs CMD under
# /usr/bin/time -v and appends "name rep wall_s cpu_s rss_kib load1" to
# $TSV; summarise prints, per name, the median wall and CPU seconds and
# peak RSS, and the median of the paired ratios of each name to $BASE
# (the peer), rep by rep.

run_timed() {
	local name=$1 rep=$2 load
	shift 2
	load=$(cut -d' ' -f1 /proc/loadavg)
	/usr/bin/time -v -o "$TIMELOG" "$@" >"$OUTLOG" 2>&1 || { cat "$OUTLOG" >&2; return 1; }
	awk -F': ' -v n="$name" -v r="$rep" -v l="$load" '
		/Elapsed \(wall clock\)/ { k = split($2, t, ":"); w = 0; for (i = 1; i <= k; i++) w = w * 60 + t[i] }
		/User time/ { u = $2 } /System time/ { s = $2 }
		/Maximum resident set size/ { m = $2 }
		END { printf "%s\t%s\t%.3f\t%.3f\t%d\t%s\n", n, r, w, u + s, m, l }' "$TIMELOG" >>"$TSV"
}

summarise() {
	sort -k1,1 -k2,2n "$TSV" | awk -F'\t' -v base="$BASE" '
		function median(a, n,   i, j, t) {
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
			return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
		}
		{ W[$1, $2] = $3; C[$1, $2] = $4; R[$1] = R[$1] > $5 ? R[$1] : $5; L[$1] = L[$1] " " $6
		  if (!($1 in seen)) { seen[$1] = 1; names[++k] = $1 } reps[$1] = $2 }
		END {
			printf "%-24s %9s %9s %9s %11s %10s  %s\n", "run", "wall_s", "cpu_s", "rss_MiB", "wall_ratio", "cpu_ratio", "load1 per rep"
			for (q = 1; q <= k; q++) {
				nm = names[q]; n = 0
				for (r = 1; r <= reps[nm]; r++) { n++; w[n] = W[nm, r]; c[n] = C[nm, r]
					if ((base, r) in W && W[base, r] > 0) { wr[n] = W[nm, r] / W[base, r]; cr[n] = C[nm, r] / C[base, r] } }
				printf "%-24s %9.3f %9.3f %9.1f %11.3f %10.3f  %s\n", nm, median(w, n), median(c, n), R[nm] / 1024, median(wr, n), median(cr, n), L[nm]
			}
		}'
}
