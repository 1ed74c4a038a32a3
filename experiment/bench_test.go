package experiment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchConfig is Table 1's grid (FedBBQ with and without weighting,
// FedCal, FedOPVector, FedTemp; T = 12; p = 0.1; 5 seeds) over a synthetic
// data set of 20,000 examples, 10 classes and 100 clients.
const benchConfig = `
datasets:
  - {name: synth, logits: synth.npz, partition: {file: part.json}}
grid:
  method: [bbq, fedcal, opvector, temp]
  weighting: [none, all]
  rounds: 12
  sample_rate: 0.1
  seed: [1, 2, 3, 4, 5]
`

func benchExperiment(b *testing.B) (*Config, string) {
	dir := b.TempDir()
	synthLogits(b, dir, 20000, 10, 100)
	path := filepath.Join(dir, "bench.yaml")
	os.WriteFile(path, []byte(benchConfig), 0o644)
	cfg, err := ReadConfig(path)
	if err != nil {
		b.Fatal(err)
	}
	return cfg, dir
}

// BenchmarkRun runs the 25 cells afresh with 1 and 2 workers (the ratio is
// the parallel speed-up), and once more reading every cell back from
// runs.csv (resumed).
func BenchmarkRun(b *testing.B) {
	cfg, dir := benchExperiment(b)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("fresh/workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				if _, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{Workers: workers, Fresh: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("resumed", func(b *testing.B) {
		for b.Loop() {
			rep, err := Run(context.Background(), cfg, filepath.Join(dir, "out"), Options{})
			if err != nil || rep.Computed != 0 {
				b.Fatal(err, rep.Computed)
			}
		}
	})
}
