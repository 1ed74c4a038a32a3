package experiment

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// committedResults holds the experiment results committed to the
// repository.
const committedResults = "../integration/experiments/results"

// linesOf returns the lines of the CSV text s whose second field is
// dataset, in order.
func linesOf(s, dataset string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if f := strings.SplitN(line, ",", 3); len(f) == 3 && f[1] == dataset {
			out = append(out, line)
		}
	}
	return out
}

// datasetsOf returns the datasets of the CSV text s (second field), in
// order of first appearance, without the header's.
func datasetsOf(s string) []string {
	var out []string
	for i, line := range strings.Split(s, "\n") {
		if f := strings.SplitN(line, ",", 3); i > 0 && len(f) == 3 && !slices.Contains(out, f[1]) {
			out = append(out, f[1])
		}
	}
	return out
}

// TestCommittedRowsSurviveMissingLogits is the machine with the logits of
// only one dataset: Table 1's committed runs.csv and timings.csv are the
// earlier results, mnist-tiny's logits are a synthetic file and the other
// datasets of the committed table have none. The run computes
// mnist-tiny's cells only; every committed row survives byte for byte, in
// place (mnist-tiny's, for other logits, before the new ones), and the
// summary is made from the new rows and the skipped datasets' rows.
func TestCommittedRowsSurviveMissingLogits(t *testing.T) {
	runs, err := os.ReadFile(filepath.Join(committedResults, "table1", RunsFile))
	if err != nil {
		t.Fatal(err)
	}
	timings, err := os.ReadFile(filepath.Join(committedResults, "table1", TimingsFile))
	if err != nil {
		t.Fatal(err)
	}
	var others []string // every committed dataset but mnist-tiny, in file order
	kept := 0
	for _, name := range datasetsOf(string(runs)) {
		if name != "mnist-tiny" {
			others = append(others, name)
			kept += len(linesOf(string(runs), name))
		}
	}
	tinyCommitted := len(linesOf(string(runs), "mnist-tiny"))
	if len(others) < 5 || tinyCommitted == 0 {
		t.Fatalf("committed table1 lists %v besides %d mnist-tiny rows: want mnist-tiny first and the paper's five", others, tinyCommitted)
	}
	var b strings.Builder
	b.WriteString("name: table1\ndatasets:\n  - {name: mnist-tiny, logits: synth.npz, partition: {file: part.json}}\n")
	for _, name := range others {
		b.WriteString("  - {name: " + name + ", logits: absent/" + name + ".npz, partition: {file: part.json}, optional: true}\n")
	}
	b.WriteString("grid: {method: [bbq, temp], rounds: 2, mexp: 4, clients_per_round: 3, seed: [1, 2]}\nsummary: {metrics: [cwece, accuracy, ece]}\n")
	cfg, dir := tinyExperiment(t, b.String())
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, RunsFile), runs, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, TimingsFile), timings, 0o644); err != nil {
		t.Fatal(err)
	}

	rep, err := Run(context.Background(), cfg, out, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Computed != 4 || rep.Reused != 0 || rep.Kept != kept+tinyCommitted || len(rep.Rows) != 4+kept || len(rep.Skipped) != len(others)+1 {
		t.Fatalf("%d computed, %d reused, %d kept, %d rows, notices %q; want 4, 0, %d, %d and %d notices",
			rep.Computed, rep.Reused, rep.Kept, len(rep.Rows), rep.Skipped, kept+tinyCommitted, 4+kept, len(others)+1)
	}
	i := slices.Index(others, "cifar10-cnn")
	cifar := len(linesOf(string(runs), "cifar10-cnn"))
	if want := fmt.Sprintf("skipped dataset cifar10-cnn: no logits file %s; kept its %d earlier rows from ", filepath.Join(dir, "absent", "cifar10-cnn.npz"), cifar); i < 0 || cifar == 0 || !strings.HasPrefix(rep.Skipped[i], want) {
		t.Errorf("notices %q, want cifar10-cnn's to start %q", rep.Skipped, want)
	}
	after := readFile(t, filepath.Join(out, RunsFile))
	afterTimings := readFile(t, filepath.Join(out, TimingsFile))
	// The committed file lists mnist-tiny first, then the others: so
	// does the new one, whose tail is the committed tail byte for byte.
	committedLines := strings.Split(strings.TrimSuffix(string(runs), "\n"), "\n")
	afterLines := strings.Split(strings.TrimSuffix(after, "\n"), "\n")
	if len(afterLines) != 1+4+kept+tinyCommitted || afterLines[0] != committedLines[0] {
		t.Fatalf("runs.csv has %d lines, want %d, and the same header", len(afterLines), 1+4+kept+tinyCommitted)
	}
	if !slices.Equal(afterLines[1:1+tinyCommitted], committedLines[1:1+tinyCommitted]) {
		t.Error("mnist-tiny's committed rows changed")
	}
	if !slices.Equal(afterLines[5+tinyCommitted:], committedLines[1+tinyCommitted:]) {
		t.Error("the committed rows of the skipped datasets changed")
	}
	for _, name := range others {
		if got, want := linesOf(after, name), linesOf(string(runs), name); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: %d rows after the run, %d committed, or they differ", name, len(got), len(want))
		}
		if got, want := linesOf(afterTimings, name), linesOf(string(timings), name); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: %d timings after the run, %d committed, or they differ", name, len(got), len(want))
		}
	}
	// mnist-tiny's committed rows were for other logits: kept, then the
	// 4 cells run now.
	if tiny := linesOf(after, "mnist-tiny"); len(tiny) != tinyCommitted+4 || slices.Contains(committedLines, tiny[tinyCommitted]) {
		t.Errorf("mnist-tiny has %d rows: want the %d committed and the 4 cells run now", len(tiny), tinyCommitted)
	}
	// The summary is made from all the rows, every dataset.
	summary := readFile(t, filepath.Join(out, SummaryFile))
	if !strings.Contains(summary, fmt.Sprintf("from runs.csv: %d runs over 5 seeds", 4+kept)) {
		t.Errorf("summary does not count the kept rows:\n%s", summary[:min(len(summary), 600)])
	}
	for _, name := range append(others, "mnist-tiny") {
		if !strings.Contains(summary, "| "+name+" |") {
			t.Errorf("summary lacks dataset %s", name)
		}
	}
}

// TestSkippedDatasetRowsKept runs two datasets, then again without the
// logits of one: with Fresh, and then with a larger grid. The absent
// dataset's rows stay byte for byte; a dataset no longer configured is
// dropped with a notice.
func TestSkippedDatasetRowsKept(t *testing.T) {
	config := strings.Replace(tinyConfig, "datasets:\n", `datasets:
  - name: other
    logits: other.npz
    partition: {file: part.json}
    optional: true
`, 1)
	cfg, dir := tinyExperiment(t, config)
	synth, err := os.ReadFile(filepath.Join(dir, "synth.npz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.npz"), synth, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if _, err := Run(context.Background(), cfg, out, Options{}); err != nil {
		t.Fatal(err)
	}
	first := readFile(t, filepath.Join(out, RunsFile))
	firstSummary := readFile(t, filepath.Join(out, SummaryFile))
	otherRows := linesOf(first, "other")
	if len(otherRows) != 12 || len(linesOf(first, "synth")) != 12 {
		t.Fatalf("first run: %d rows of other, %d of synth; want 12 each", len(otherRows), len(linesOf(first, "synth")))
	}
	if err := os.Remove(filepath.Join(dir, "other.npz")); err != nil {
		t.Fatal(err)
	}

	// Fresh recomputes synth, and still keeps other's rows.
	rep, err := Run(context.Background(), cfg, out, Options{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Computed != 12 || rep.Kept != 12 || len(rep.Rows) != 24 {
		t.Errorf("fresh run: %d computed, %d kept, %d rows; want 12, 12, 24", rep.Computed, rep.Kept, len(rep.Rows))
	}
	// The fits are deterministic, so the whole file and the summary are
	// as before.
	if got := readFile(t, filepath.Join(out, RunsFile)); got != first {
		t.Errorf("runs.csv changed:\n%s\nwas\n%s", got, first)
	}
	if got := readFile(t, filepath.Join(out, SummaryFile)); got != firstSummary {
		t.Errorf("summary.md changed:\n%s\nwas\n%s", got, firstSummary)
	}

	// A third seed: synth's 12 cells are reused and 6 computed; other's
	// rows are kept, still byte for byte.
	cfg.Grids[0].Seed = append(cfg.Grids[0].Seed, 3)
	rep, err = Run(context.Background(), cfg, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Computed != 6 || rep.Reused != 12 || rep.Kept != 12 || len(rep.Rows) != 30 {
		t.Errorf("third seed: %d computed, %d reused, %d kept, %d rows; want 6, 12, 12, 30", rep.Computed, rep.Reused, rep.Kept, len(rep.Rows))
	}
	third := readFile(t, filepath.Join(out, RunsFile))
	if got := linesOf(third, "other"); !slices.Equal(got, otherRows) {
		t.Errorf("other's rows changed:\n%q\nwere\n%q", got, otherRows)
	}
	if !strings.HasPrefix(strings.SplitN(third, "\n", 2)[1], otherRows[0]+"\n") {
		t.Error("other's rows are no longer first, where the configuration lists it")
	}

	// A configuration without other keeps its rows, byte for byte, last,
	// out of the summaries, and says so.
	cfg.Datasets = cfg.Datasets[1:]
	rep, err = Run(context.Background(), cfg, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 18 || rep.Kept != 12 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "kept 12 rows of dataset other") {
		t.Errorf("%d rows, %d kept, notices %q", len(rep.Rows), rep.Kept, rep.Skipped)
	}
	fourth := readFile(t, filepath.Join(out, RunsFile))
	if got := linesOf(fourth, "other"); !slices.Equal(got, otherRows) {
		t.Errorf("other's rows changed:\n%q\nwere\n%q", got, otherRows)
	}
	if !strings.HasSuffix(fourth, strings.Join(otherRows, "\n")+"\n") {
		t.Error("the rows of the unlisted dataset are not last")
	}
	if strings.Contains(readFile(t, filepath.Join(out, SummaryFile)), "| other |") {
		t.Error("the summary tabulates a dataset the configuration does not list")
	}
}

// TestCommittedResultsRoundTrip decodes and re-encodes every committed
// runs.csv and timings.csv: kept rows are written back through them, so
// the round trip must be exact.
func TestCommittedResultsRoundTrip(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(committedResults, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no committed results under %s: %v", committedResults, err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			runs, err := os.ReadFile(filepath.Join(dir, RunsFile))
			if err != nil {
				t.Fatal(err)
			}
			rows, err := DecodeRuns(bytes.NewReader(runs))
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := EncodeRuns(&b, rows); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), runs) {
				t.Errorf("%s does not round-trip", RunsFile)
			}
			timings, err := os.ReadFile(filepath.Join(dir, TimingsFile))
			if err != nil {
				t.Fatal(err)
			}
			times, err := decodeTimings(bytes.NewReader(timings))
			if err != nil {
				t.Fatal(err)
			}
			b.Reset()
			if err := encodeTimings(&b, rows, times); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), timings) {
				t.Errorf("%s does not round-trip", TimingsFile)
			}
		})
	}
}
