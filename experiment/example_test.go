package experiment_test

import (
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/experiment"
)

// A grid crossed with a dataset: FedTemp has no weighting, so it runs
// once per ε and seed, while FedBBQ runs with and without weighting. A
// private run records δ = 1e-5 and, for FedTemp, the default clip norm.
func ExampleConfig_Cells() {
	cfg, err := experiment.ParseConfig([]byte(`
datasets:
  - name: mnist
    logits: mnist.npz
    partition: {file: mnist-dir0.1-k100.json.gz}
grid:
  method: [bbq, temp]
  weighting: [none, all]
  rounds: 12
  epsilon: [none, 1]
  clients_per_round: 10
  seed: 1
`), "/data")
	if err != nil {
		log.Fatal(err)
	}
	cells, err := cfg.Cells()
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range cells {
		fmt.Printf("%-18s T=%d ε=%v δ=%v C=%v\n", c.Label(), c.Rounds, c.Epsilon, c.Delta, c.Clip)
	}
	fmt.Println(cfg.Datasets[0].Partition.File)
	// Output:
	// FedBBQ             T=12 ε=0 δ=0 C=0
	// FedBBQ             T=12 ε=1 δ=1e-05 C=0
	// FedBBQ all weight  T=12 ε=0 δ=0 C=0
	// FedBBQ all weight  T=12 ε=1 δ=1e-05 C=0
	// FedTemp            T=12 ε=0 δ=0 C=0
	// FedTemp            T=12 ε=1 δ=1e-05 C=0.5
	// /data/mnist-dir0.1-k100.json.gz
}
