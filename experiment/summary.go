package experiment

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"
)

// paramTitles are the table headings of the parameters.
var paramTitles = map[string]string{
	"rounds": "T", "beta": "β", "epsilon": "ε", "delta": "δ", "mexp": "M", "clip": "C",
	"clip_pos": "C₊", "clip_neg": "C₋", "dp_alpha_z": "z", "clients_per_round": "k", "sample_rate": "p",
	"server_lr": "η_S", "accountant": "accountant",
}

// metricTitles are the headings and units of the metrics.
var metricTitles = map[string]string{
	"cwece": "Test cwECE (%)", "ece": "Test ECE (%)", "accuracy": "Test accuracy (%)", "nll": "Test NLL",
	"brier": "Test Brier score", "bytes_sent": "Bytes a client sends per round", "bytes_received": "Bytes a client receives per round",
	"participants": "Client participations over all rounds", "epsilon_spent": "ε spent", "sigma": "Noise standard deviation σ",
}

// lowerIsBetter lists the metrics whose best (lowest) value is bold.
var lowerIsBetter = map[string]bool{"cwece": true, "ece": true, "nll": true, "brier": true}

// format returns the metric's value for a table: percentages for cwECE,
// ECE and accuracy.
func format(metric string, v float64) string {
	switch metric {
	case "cwece", "ece":
		return strconv.FormatFloat(100*v, 'f', 3, 64)
	case "accuracy":
		return strconv.FormatFloat(100*v, 'f', 2, 64)
	case "nll", "brier":
		return strconv.FormatFloat(v, 'f', 4, 64)
	case "bytes_sent", "bytes_received":
		return strconv.FormatFloat(v, 'f', 0, 64)
	case "participants":
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// layout arranges rows into a table: one line per dataset and setting of
// the parameters that vary (other than method, weighting and seed), one
// column per method label.
type layout struct {
	params []string   // varying parameters, table columns after the dataset
	lines  [][]string // dataset then params values, in first-appearance order
	labels []string   // method labels in first-appearance order
}

// varying returns the parameters among names that take more than one
// value over the rows they apply to.
func varying(rows []Row, names []string) []string {
	var out []string
	for _, p := range names {
		vals := map[string]bool{}
		for i := range rows {
			if rows[i].applies(p) {
				vals[rows[i].param(p)] = true
			}
		}
		if len(vals) > 1 {
			out = append(out, p)
		}
	}
	return out
}

func newLayout(rows []Row) *layout {
	var names []string
	for _, p := range Params() {
		if p != "method" && p != "weighting" && p != "seed" {
			names = append(names, p)
		}
	}
	l := &layout{params: varying(rows, names)}
	labels := map[string]bool{}
	for i := range rows {
		if lb := rows[i].Label(); !labels[lb] {
			labels[lb] = true
			l.labels = append(l.labels, lb)
		}
	}
	// Lines come from the runs every varying parameter applies to; a run
	// that lacks one (FedBBQ on a table that varies FedTemp's C) gets a
	// line of its own only when it fits on none of those.
	seen := map[string]bool{}
	add := func(r *Row) {
		line := l.line(r)
		if k := strings.Join(line, "\x00"); !seen[k] {
			seen[k] = true
			l.lines = append(l.lines, line)
		}
	}
	complete := func(r *Row) bool {
		for _, p := range l.params {
			if !r.applies(p) {
				return false
			}
		}
		return true
	}
	for i := range rows {
		if complete(&rows[i]) {
			add(&rows[i])
		}
	}
	for i := range rows {
		r := &rows[i]
		if !complete(r) && !slices.ContainsFunc(l.lines, func(line []string) bool { return l.matches(line, r) }) {
			add(r)
		}
	}
	return l
}

func (l *layout) line(r *Row) []string {
	line := []string{r.Dataset}
	for _, p := range l.params {
		line = append(line, r.param(p))
	}
	return line
}

// matches reports whether r belongs on line: same dataset, and each
// varying parameter equal, unless it does not apply to r (FedTemp's
// weighting, the clip norms of a run without privacy): such a run is on
// every line its other parameters match.
func (l *layout) matches(line []string, r *Row) bool {
	if r.Dataset != line[0] {
		return false
	}
	for k, p := range l.params {
		if r.applies(p) && r.param(p) != line[k+1] {
			return false
		}
	}
	return true
}

// stats are the mean and sample standard deviation of values over seeds,
// and whether any of the runs dropped accuracy.
type stats struct {
	n          int
	mean, std  float64
	anyDropped bool
}

func summarise(vals []float64, dropped bool) stats {
	s := stats{n: len(vals), anyDropped: dropped}
	if s.n == 0 {
		return s
	}
	if s.n == 1 {
		s.mean = vals[0]
		return s
	}
	s.mean, s.std = stat.MeanStdDev(vals, nil)
	return s
}

// cell returns the statistics of metric over the runs of label on line.
func (l *layout) cell(rows []Row, line []string, label, metric string) stats {
	var vals []float64
	dropped := false
	for i := range rows {
		r := &rows[i]
		if r.Label() == label && l.matches(line, r) {
			vals = append(vals, r.metric(metric))
			dropped = dropped || r.AccuracyDrop
		}
	}
	return summarise(vals, dropped)
}

// base returns the mean base-model value of metric over the runs on line.
func (l *layout) base(rows []Row, line []string, metric string) (float64, bool) {
	var vals []float64
	for i := range rows {
		if l.matches(line, &rows[i]) {
			v, ok := rows[i].baseMetric(metric)
			if !ok {
				return 0, false
			}
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return 0, false
	}
	return stat.Mean(vals, nil), true
}

func (l *layout) header(w io.Writer, extra []string) {
	cols := []string{"Dataset"}
	for _, p := range l.params {
		cols = append(cols, paramTitles[p])
	}
	cols = append(cols, extra...)
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
}

func (l *layout) lineCells(line []string) []string {
	out := []string{line[0]}
	for k, p := range l.params {
		v := line[k+1]
		switch {
		case v == "" && p == "epsilon":
			v = "none"
		case v == "" && p == "dp_alpha_z":
			v = "0"
		case v == "":
			v = "–"
		}
		out = append(out, v)
	}
	return out
}

// WriteSummary writes the Markdown summary of rows: for each metric a
// table of the mean (standard deviation) over seeds of each method, with
// * marking a method of which some run lost more than 1 point of test
// accuracy, and the lowest error among unmarked methods in bold.
func WriteSummary(w io.Writer, cfg *Config, rows []Row) error {
	metrics := cfg.Summary.Metrics
	if len(metrics) == 0 {
		metrics = []string{"cwece", "accuracy"}
	}
	l := newLayout(rows)
	seeds := map[uint64]bool{}
	for i := range rows {
		seeds[rows[i].Seed] = true
	}
	fmt.Fprintf(w, "# %s\n\n", cfg.Name)
	if cfg.Description != "" {
		fmt.Fprintf(w, "%s\n\n", cfg.Description)
	}
	fmt.Fprintf(w, "Made by `fedcalib experiment` from %s: %s over %s. Each entry is the mean "+
		"(standard deviation) over seeds; * marks a method with a run whose test accuracy dropped by more "+
		"than 1 point after calibration; bold is the lowest error on a line among unmarked methods.\n",
		RunsFile, count(len(rows), "run"), count(len(seeds), "seed"))
	if len(rows) == 0 {
		return nil
	}
	for _, m := range metrics {
		_, hasBase := rows[0].baseMetric(m)
		extra := slices.Clone(l.labels)
		if hasBase {
			extra = append([]string{"Base"}, extra...)
		}
		fmt.Fprintf(w, "\n## %s\n\n", metricTitles[m])
		l.header(w, extra)
		for _, line := range l.lines {
			cells := l.lineCells(line)
			if hasBase {
				b, _ := l.base(rows, line, m)
				cells = append(cells, format(m, b))
			}
			st := make([]stats, len(l.labels))
			best := -1
			for k, lb := range l.labels {
				st[k] = l.cell(rows, line, lb, m)
				if lowerIsBetter[m] && st[k].n > 0 && !st[k].anyDropped && (best < 0 || st[k].mean < st[best].mean) {
					best = k
				}
			}
			for k, s := range st {
				if !hasBase {
					s.anyDropped = false // the asterisk is about calibration
				}
				cells = append(cells, s.text(m, k == best))
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	return nil
}

// text formats s as "mean* (std)", bold when best.
func (s stats) text(metric string, best bool) string {
	if s.n == 0 {
		return ""
	}
	t := format(metric, s.mean)
	if s.anyDropped {
		t += "\\*"
	}
	if s.n > 1 && metric != "bytes_sent" && metric != "bytes_received" {
		sd := s.std
		if metric == "cwece" || metric == "ece" || metric == "accuracy" {
			sd *= 100
		}
		t += " (" + strconv.FormatFloat(sd, 'f', decimals(metric), 64) + ")"
	}
	if best {
		t = "**" + t + "**"
	}
	return t
}

func decimals(metric string) int {
	switch metric {
	case "cwece", "ece":
		return 3
	case "accuracy":
		return 2
	case "nll", "brier":
		return 4
	}
	return 1
}

// WriteTimings writes the Markdown table of measured times: per method,
// a client's compute time in one round (mean over all participations,
// fastest and slowest) and the wall time of a run.
func WriteTimings(w io.Writer, cfg *Config, rows []Row, times map[string]Timing) error {
	l := newLayout(rows)
	fmt.Fprintf(w, "# %s: measured times\n\n", cfg.Name)
	fmt.Fprintf(w, "Made by `fedcalib experiment` from %s. Times are measurements: they vary between "+
		"runs and with the machine's load, and cells run in parallel share its cores (use --workers 1 "+
		"for timings). Client time is one client's local computation in one round.\n\n", TimingsFile)
	l.header(w, []string{"Method", "Client time mean (s)", "Client time min (s)", "Client time max (s)", "Wall time per run (s)", "Runs timed"})
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) }
	for _, line := range l.lines {
		for _, lb := range l.labels {
			var total, lo, hi, wall time.Duration
			parts, n := 0, 0
			for i := range rows {
				r := &rows[i]
				t, ok := times[r.ID]
				if !ok || r.Label() != lb || !l.matches(line, r) {
					continue
				}
				n++
				total += t.ComputeTotal
				parts += t.Participants
				wall += t.Wall
				if t.Participants > 0 && (lo == 0 || t.ComputeMin < lo) {
					lo = t.ComputeMin
				}
				hi = max(hi, t.ComputeMax)
			}
			if n == 0 {
				continue
			}
			mean := time.Duration(0)
			if parts > 0 {
				mean = total / time.Duration(parts)
			}
			cells := append(l.lineCells(line), lb, sec(mean), sec(lo), sec(hi), sec(wall/time.Duration(n)), strconv.Itoa(n))
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	return nil
}

// meanStd returns the mean and sample standard deviation (0 for one
// value) of vals.
func meanStd(vals []float64) (float64, float64) {
	if len(vals) == 1 {
		return vals[0], 0
	}
	m, s := stat.MeanStdDev(vals, nil)
	if math.IsNaN(s) {
		s = 0
	}
	return m, s
}

// count returns "1 run", "2 runs".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
