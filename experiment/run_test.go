package experiment

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

func TestRunRowsMatchDirectFits(t *testing.T) {
	cfg, dir := tinyExperiment(t, tinyConfig)
	out := filepath.Join(dir, "out")
	rep, err := Run(context.Background(), cfg, out, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	// bbq: 2 weightings × (no privacy, ε = 2) × 2 seeds; temp: its
	// weighting is blanked, so 2 × 2.
	if len(rep.Rows) != 12 || rep.Computed != 12 || rep.Reused != 0 {
		t.Fatalf("%d rows, %d computed, %d reused; want 12, 12, 0", len(rep.Rows), rep.Computed, rep.Reused)
	}
	csvText := readFile(t, filepath.Join(out, RunsFile))
	if lines := csvLines(csvText); len(lines) != 12 {
		t.Fatalf("runs.csv has %d rows, want 12", len(lines))
	}

	// Recompute every cell independently, through the federation API.
	f, err := logits.Read(filepath.Join(dir, "synth.npz"))
	if err != nil {
		t.Fatal(err)
	}
	data := f.Set(nil)
	part, err := federation.ReadPartition(filepath.Join(dir, "part.json"))
	if err != nil {
		t.Fatal(err)
	}
	pop, err := federation.NewPopulation(data, part, federation.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	test := data.Subset(part.Rows(federation.Test))
	base, err := calib.EvaluateSet(test, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{
		"bbq none  1", "bbq none  2", "bbq none 2 1", "bbq none 2 2",
		"bbq all  1", "bbq all  2", "bbq all 2 1", "bbq all 2 2",
		"temp   1", "temp   2", "temp  2 1", "temp  2 2",
	}
	for i, r := range rep.Rows {
		if got := strings.Join([]string{r.Method, string(r.Weighting), r.param("epsilon"), r.param("seed")}, " "); got != wantOrder[i] {
			t.Errorf("row %d is %q, want %q", i, got, wantOrder[i])
		}
		o := federation.Options{}
		if r.Method == "bbq" {
			o.Mexp, o.Weighting = 4, r.Weighting
		}
		if r.Epsilon > 0 {
			o.Privacy = &federation.Privacy{Epsilon: 2, Delta: 1e-5}
		}
		fit, err := federation.New(r.Method, o)
		if err != nil {
			t.Fatal(err)
		}
		res, err := fit.Fit(context.Background(), pop, federation.Rounds{T: 2, SampleRate: 0.5, Seed: r.Seed})
		if err != nil {
			t.Fatal(err)
		}
		after, err := calib.EvaluateSet(test, res.Calibrator, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.After != after || r.Base != base {
			t.Errorf("row %d (%s): metrics %+v / base %+v; direct fit gives %+v / %+v", i, r.Label(), r.After, r.Base, after, base)
		}
		if r.Clients != 6 || r.TestRows != test.Len() || r.SampleRate != 0.5 || r.ClientsPerRound != 3 || r.Beta != 0.5 {
			t.Errorf("row %d: K %d, test rows %d, p %v, k %d, β %v", i, r.Clients, r.TestRows, r.SampleRate, r.ClientsPerRound, r.Beta)
		}
		var parts int
		for _, s := range res.Rounds {
			parts += s.Participants
		}
		if r.Participants != parts {
			t.Errorf("row %d: %d participations, direct fit %d", i, r.Participants, parts)
		}
		// Bytes per client per round: 2 histograms of 2^4 bins per class
		// for FedBBQ, and FedTemp's one parameter each way (8 bytes each).
		wantUp, wantDown := 8, 8
		if r.Method == "bbq" {
			wantUp, wantDown = 8*2*4*16, 0
		}
		if r.BytesSent != wantUp || r.BytesReceived != wantDown {
			t.Errorf("row %d (%s): bytes %d up, %d down; want %d, %d", i, r.Label(), r.BytesSent, r.BytesReceived, wantUp, wantDown)
		}
		switch {
		case r.Epsilon == 0 && (r.EpsilonSpent != 0 || r.Delta != 0 || r.Accountant != "" || r.ClipPos != 0):
			t.Errorf("row %d: a run without privacy records privacy: %+v", i, r)
		case r.Epsilon > 0 && (r.EpsilonSpent <= 0 || r.EpsilonSpent > 2+1e-9 || res.Privacy == nil || r.Sigma != res.Privacy.Sigma):
			t.Errorf("row %d: ε spent %v, σ %v", i, r.EpsilonSpent, r.Sigma)
		case r.Method == "temp" && r.Epsilon > 0 && r.Clip != dp.DefaultClip:
			t.Errorf("row %d: private FedTemp clip %v, want the default %v", i, r.Clip, dp.DefaultClip)
		case r.Method == "bbq" && r.Epsilon > 0 && (r.ClipPos != dp.DefaultClipPos || r.ClipNeg != dp.DefaultClipNeg):
			t.Errorf("row %d: private FedBBQ clips %v, %v", i, r.ClipPos, r.ClipNeg)
		}
		if r.AccuracyDrop != (after.Accuracy-base.Accuracy < -0.01-1e-12) {
			t.Errorf("row %d: accuracy drop flag %v for %v → %v", i, r.AccuracyDrop, base.Accuracy, after.Accuracy)
		}
	}
	// The blanks: FedTemp has no weighting, M or C₊; runs without privacy
	// have no δ.
	if !strings.Contains(csvText, ",temp,,2,0.5,,,,,,,,3,0.5,1,,1,") {
		t.Errorf("runs.csv lacks the blanks of a non-private FedTemp run:\n%s", csvText)
	}
	for _, name := range []string{RunsFile, TimingsFile, SummaryFile, TimingsSummary, "cw-synth.png"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("missing output: %v", err)
		}
	}
	// The plot has x = ε, so only the private runs are on it.
	img, err := os.ReadFile(filepath.Join(out, "cw-synth.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(img)); err != nil {
		t.Errorf("cw-synth.png: %v", err)
	}
}

func TestResumeRecomputesNothing(t *testing.T) {
	cfg, dir := tinyExperiment(t, tinyConfig)
	out := filepath.Join(dir, "out")
	var fits atomic.Int64
	r := countingRunner(&fits)
	if _, err := r.run(context.Background(), cfg, out, Options{}); err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 12 {
		t.Fatalf("first run: %d fits, want 12", fits.Load())
	}
	first := readFile(t, filepath.Join(out, RunsFile))
	firstSummary := readFile(t, filepath.Join(out, SummaryFile))
	fits.Store(0)
	var progress []Progress
	rep, err := r.run(context.Background(), cfg, out, Options{Progress: func(p Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 0 || rep.Computed != 0 || rep.Reused != 12 {
		t.Errorf("second run: %d fits, %d computed, %d reused; want 0, 0, 12", fits.Load(), rep.Computed, rep.Reused)
	}
	if len(progress) != 1 || progress[0] != (Progress{Done: 12, Total: 12, Reused: 12}) {
		t.Errorf("progress of a resumed run: %+v", progress)
	}
	if readFile(t, filepath.Join(out, RunsFile)) != first || readFile(t, filepath.Join(out, SummaryFile)) != firstSummary {
		t.Error("a resumed run rewrote runs.csv or summary.md differently")
	}

	// A third seed adds 6 cells; only they run, and the rows of the first
	// two seeds are kept.
	cfg.Grids[0].Seed = append(cfg.Grids[0].Seed, 3)
	fits.Store(0)
	rep, err = r.run(context.Background(), cfg, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 6 || rep.Reused != 12 || len(rep.Rows) != 18 {
		t.Errorf("extended grid: %d fits, %d reused, %d rows; want 6, 12, 18", fits.Load(), rep.Reused, len(rep.Rows))
	}
	for _, line := range csvLines(first) {
		if !strings.Contains(readFile(t, filepath.Join(out, RunsFile)), line+"\n") {
			t.Errorf("row lost after extending the grid: %s", line)
		}
	}

	// Fresh recomputes everything, to the same rows.
	fits.Store(0)
	before := readFile(t, filepath.Join(out, RunsFile))
	if _, err := r.run(context.Background(), cfg, out, Options{Fresh: true}); err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 18 || readFile(t, filepath.Join(out, RunsFile)) != before {
		t.Errorf("fresh run: %d fits (want 18), same runs.csv: %v", fits.Load(), readFile(t, filepath.Join(out, RunsFile)) == before)
	}

	// A changed input file changes every cell's identity.
	os.WriteFile(filepath.Join(dir, "part.json"), append([]byte(readFile(t, filepath.Join(dir, "part.json"))), '\n'), 0o644)
	fits.Store(0)
	if _, err := r.run(context.Background(), cfg, out, Options{}); err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 18 {
		t.Errorf("after the partition file changed: %d fits, want 18", fits.Load())
	}
}

func TestDeterministicAcrossWorkers(t *testing.T) {
	cfg, dir := tinyExperiment(t, tinyConfig)
	var want string
	for _, workers := range []int{1, 3, 8} {
		out := filepath.Join(dir, "out", string(rune('a'+workers)))
		if _, err := Run(context.Background(), cfg, out, Options{Workers: workers}); err != nil {
			t.Fatal(err)
		}
		got := readFile(t, filepath.Join(out, RunsFile)) + readFile(t, filepath.Join(out, SummaryFile))
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("%d workers: runs.csv or summary.md differs from 1 worker's", workers)
		}
	}
}

func TestCheckpointOnError(t *testing.T) {
	cfg, dir := tinyExperiment(t, tinyConfig)
	out := filepath.Join(dir, "out")
	var fits atomic.Int64
	r := &runner{newFitter: func(method string, o federation.Options) (federation.Fitter, error) {
		if method == "temp" {
			return nil, os.ErrPermission
		}
		fits.Add(1)
		return federation.New(method, o)
	}}
	_, err := r.run(context.Background(), cfg, out, Options{Workers: 1})
	if err == nil || !strings.Contains(err.Error(), "synth, FedTemp, T = 2, seed 1") {
		t.Fatalf("error %v; want one naming the failing cell", err)
	}
	rows, err := DecodeRuns(strings.NewReader(readFile(t, filepath.Join(out, RunsFile))))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != int(fits.Load()) || len(rows) != 8 {
		t.Errorf("after the error runs.csv holds %d rows; %d cells had finished (want 8)", len(rows), fits.Load())
	}
}

func TestCancelSavesFinishedCells(t *testing.T) {
	cfg, dir := tinyExperiment(t, tinyConfig)
	out := filepath.Join(dir, "out")
	ctx, cancel := context.WithCancel(context.Background())
	done := 0
	_, err := Run(ctx, cfg, out, Options{Workers: 1, Progress: func(p Progress) {
		if done = p.Done; done == 3 {
			cancel()
		}
	}})
	if err != context.Canceled {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	rows, err := DecodeRuns(strings.NewReader(readFile(t, filepath.Join(out, RunsFile))))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 3 {
		t.Errorf("runs.csv holds %d rows after cancelling at 3", len(rows))
	}
}

func TestOptionalDatasetSkipped(t *testing.T) {
	config := strings.Replace(tinyConfig, "datasets:\n", `datasets:
  - name: absent
    logits: ${FEDCALIB_TEST_NOWHERE:-nowhere}/absent.npz
    optional: true
    partition: {file: part.json}
`, 1)
	cfg, dir := tinyExperiment(t, config)
	rep, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 12 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "absent") {
		t.Errorf("%d rows, skipped %q", len(rep.Rows), rep.Skipped)
	}
	cfg.Datasets[0].Optional = false
	_, err = Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
	if err == nil || !strings.Contains(err.Error(), "absent.npz does not exist") {
		t.Errorf("a required dataset without logits: %v", err)
	}
}

func TestHoldoutRepartition(t *testing.T) {
	config := `
datasets:
  - name: heldout
    logits: synth.npz
    partition: {clients: 4, seed: 5, holdout: part.json}
grid:
  method: temp
  rounds: 1
  beta: [0.2, 5]
  sample_rate: 1
  seed: 1
`
	cfg, dir := tinyExperiment(t, config)
	rep, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	part, err := federation.ReadPartition(filepath.Join(dir, "part.json"))
	if err != nil {
		t.Fatal(err)
	}
	held := len(part.Rows(federation.Calibration)) + len(part.Rows(federation.Test))
	for _, r := range rep.Rows {
		// The held-out rows are split 0/50/50: the test half, rounded down
		// per client, is at most half of them.
		if r.Clients != 4 || r.TestRows > held/2 || r.TestRows < held/2-4 {
			t.Errorf("β %v: %d clients, %d test rows of %d held out", r.Beta, r.Clients, r.TestRows, held)
		}
	}
	if rep.Rows[0].Beta != 0.2 || rep.Rows[1].Beta != 5 || rep.Rows[0].Base == rep.Rows[1].Base {
		t.Errorf("β column %v, %v; base metrics should differ between partitions", rep.Rows[0].Beta, rep.Rows[1].Beta)
	}
}
