package experiment

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// synthLogits writes a logits file of n examples of c classes from a
// deliberately overconfident model (logits 3·(g + 1.5·1{j = y}), g
// standard normal; about 55% accurate for c = 4) and a Dirichlet(β = 0.5)
// partition of it into k clients, and returns their paths.
func synthLogits(t testing.TB, dir string, n, c, k int) (logitsPath, partPath string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	f := &logits.File{Logits: make([]float32, n*c), Labels: make([]int32, n), Classes: c}
	labels := make([]int, n)
	for i := range n {
		y := rng.IntN(c)
		f.Labels[i], labels[i] = int32(y), y
		for j := range c {
			v := rng.NormFloat64()
			if j == y {
				v += 1.5
			}
			f.Logits[i*c+j] = float32(3 * v)
		}
	}
	logitsPath = filepath.Join(dir, "synth.npz")
	if err := logits.Write(logitsPath, f); err != nil {
		t.Fatal(err)
	}
	p, err := federation.Dirichlet(labels, c, k, 0.5, federation.PartitionOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	partPath = filepath.Join(dir, "part.json")
	if err := federation.WritePartition(partPath, p); err != nil {
		t.Fatal(err)
	}
	return logitsPath, partPath
}

// tinyConfig is a small experiment over synth.npz and part.json in the
// configuration's directory: FedBBQ with and without weighting and
// FedTemp, T = 2, three of six clients per round, seeds 1 and 2, with and
// without privacy.
const tinyConfig = `
name: tiny
description: A tiny grid for tests.
datasets:
  - name: synth
    logits: synth.npz
    partition: {file: part.json}
grid:
  method: [bbq, temp]
  weighting: [none, all]
  rounds: 2
  epsilon: [none, 2]
  mexp: 4
  clients_per_round: 3
  seed: [1, 2]
summary:
  metrics: [cwece, accuracy, bytes_sent]
plots:
  - {name: cw, x: epsilon, y: cwece, log_x: true}
`

// tinyExperiment writes the synthetic data and the configuration text
// into a new directory and returns the parsed configuration and the
// directory.
func tinyExperiment(t testing.TB, config string) (*Config, string) {
	t.Helper()
	dir := t.TempDir()
	synthLogits(t, dir, 900, 4, 6)
	path := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

// countingRunner returns a runner that counts the fits it starts.
func countingRunner(fits *atomic.Int64) *runner {
	return &runner{newFitter: func(method string, o federation.Options) (federation.Fitter, error) {
		fits.Add(1)
		return federation.New(method, o)
	}}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// csvLines returns the lines of a CSV text without the header.
func csvLines(s string) []string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[1:]
}
