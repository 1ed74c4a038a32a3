package experiment

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/logits"
)

// TestInputProbabilities runs one grid over a logits file and over its
// softmax probabilities read with input: probabilities. Binning sees only
// the probabilities and temperature scaling only softmax(z/T), which a
// per-row shift of z (log-probabilities are logits shifted by log Σ e^z)
// does not change, so every run measures the same metrics on both.
func TestInputProbabilities(t *testing.T) {
	config := strings.Replace(tinyConfig, "datasets:\n", `datasets:
  - name: probs
    logits: probs.npz
    input: probabilities
    partition: {file: part.json}
`, 1)
	config = strings.Replace(config, "  epsilon: [none, 2]\n", "", 1)
	cfg, dir := tinyExperiment(t, config)
	f, err := logits.Read(filepath.Join(dir, "synth.npz"))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Classes
	for i := 0; i < f.Len(); i++ {
		row, sum := f.Logits[i*c:(i+1)*c], 0.0
		for _, z := range row {
			sum += math.Exp(float64(z))
		}
		for j, z := range row {
			row[j] = float32(math.Exp(float64(z)) / sum)
		}
	}
	if err := logits.Write(filepath.Join(dir, "probs.npz"), f); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	byCell := map[Cell]Row{}
	for _, r := range rep.Rows {
		if r.Dataset == "synth" {
			byCell[r.Cell] = r
		}
	}
	n := 0
	for _, r := range rep.Rows {
		if r.Dataset != "probs" {
			continue
		}
		cell := r.Cell
		cell.Dataset = "synth"
		w, ok := byCell[cell]
		if !ok {
			t.Fatalf("no synth run for %+v", r.Cell)
		}
		n++
		for name, pair := range map[string][2]float64{
			"base cwECE": {r.Base.CWECE, w.Base.CWECE}, "cwECE": {r.After.CWECE, w.After.CWECE},
			"accuracy": {r.After.Accuracy, w.After.Accuracy}, "NLL": {r.After.NLL, w.After.NLL},
		} {
			if math.Abs(pair[0]-pair[1]) > 1e-5 {
				t.Errorf("%s %s seed %d: %s %v from probabilities, %v from logits", r.Method, r.Weighting, r.Seed, name, pair[0], pair[1])
			}
		}
	}
	if n != 6 {
		t.Errorf("%d runs on probs, want 6 (bbq × 2 weightings + temp, × 2 seeds)", n)
	}

	cfg.Datasets[0].Logits = filepath.Join(dir, "synth.npz") // logits read as probabilities
	cfg.Datasets = cfg.Datasets[:1]
	if _, err := Run(context.Background(), cfg, filepath.Join(dir, "out2"), Options{}); err == nil || !strings.Contains(err.Error(), "(input: probabilities): not probabilities: row 0") {
		t.Errorf("logits read as probabilities: %v", err)
	}
}

// TestInputRecorded runs the grid of TestInputProbabilities over a
// probabilities file that records what it holds (its input array, as
// infer writes it for a Softmax model) and a dataset that says nothing:
// it is read as probabilities, so every run equals the one on the
// logits; a dataset that says input: logits of that file is refused.
func TestInputRecorded(t *testing.T) {
	config := strings.Replace(tinyConfig, "datasets:\n", `datasets:
  - name: probs
    logits: probs.npz
    partition: {file: part.json}
`, 1)
	config = strings.Replace(config, "  epsilon: [none, 2]\n", "", 1)
	cfg, dir := tinyExperiment(t, config)
	f, err := logits.Read(filepath.Join(dir, "synth.npz"))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Classes
	for i := 0; i < f.Len(); i++ {
		row, sum := f.Logits[i*c:(i+1)*c], 0.0
		for _, z := range row {
			sum += math.Exp(float64(z))
		}
		for j, z := range row {
			row[j] = float32(math.Exp(float64(z)) / sum)
		}
	}
	f.Input = logits.InputProbabilities
	if err := logits.Write(filepath.Join(dir, "probs.npz"), f); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	byCell := map[Cell]Row{}
	for _, r := range rep.Rows {
		if r.Dataset == "synth" {
			byCell[r.Cell] = r
		}
	}
	n := 0
	for _, r := range rep.Rows {
		if r.Dataset != "probs" {
			continue
		}
		cell := r.Cell
		cell.Dataset = "synth"
		if w, ok := byCell[cell]; !ok || math.Abs(r.After.CWECE-w.After.CWECE) > 1e-5 || math.Abs(r.Base.NLL-w.Base.NLL) > 1e-5 {
			t.Errorf("%+v: cwECE %v, base NLL %v from the recorded probabilities; %+v from logits", r.Cell, r.After.CWECE, r.Base.NLL, w)
		}
		n++
	}
	if n != 6 {
		t.Errorf("%d runs on probs, want 6", n)
	}
	cfg.Datasets[0].Input = logits.InputLogits
	cfg.Datasets = cfg.Datasets[:1]
	if _, err := Run(context.Background(), cfg, filepath.Join(dir, "out2"), Options{}); err == nil || !strings.Contains(err.Error(), "the file records that it holds probabilities") {
		t.Errorf("input: logits of a recorded probabilities file: %v", err)
	}
}
