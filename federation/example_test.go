package federation_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// overconfident returns n examples of a 10-class model whose logits are
// too sharp: z_j = 3·(g_j + 1.8·1{j = y}), g_j ~ N(0, 1).
func overconfident(n int, seed uint64) *calib.Set {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &calib.Set{Logits: make([]float64, n*10), Labels: make([]int, n), Classes: 10}
	for i := range n {
		s.Labels[i] = i % 10
		for j := range 10 {
			v := rng.NormFloat64()
			if j == s.Labels[i] {
				v += 1.8
			}
			s.Logits[i*10+j] = 3 * v
		}
	}
	return s
}

// FedBBQ with the paper's "all" weighting over 100 label-skewed clients,
// 10 of them per round, for 12 rounds.
func Example() {
	data := overconfident(20000, 1)
	part, err := federation.Dirichlet(data.Labels, data.Classes, 100, 0.1, federation.PartitionOptions{Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	pop, err := federation.NewPopulation(data, part, federation.Calibration)
	if err != nil {
		log.Fatal(err)
	}
	fit := &federation.FedBBQ{Weighting: calib.WeightAll}
	res, err := fit.Fit(context.Background(), pop, federation.Rounds{T: 12, SampleRate: 0.1, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	test := data.Subset(part.Rows(federation.Test))
	before, _ := calib.EvaluateSet(test, nil, 0)
	after, _ := calib.EvaluateSet(test, res.Calibrator, 0)
	fmt.Printf("%s, %d rounds, %d bytes up per client\n", res.Protocol, len(res.Rounds), res.Rounds[0].UploadBytes)
	fmt.Printf("cwECE %.2f%% → %.2f%%, accuracy %.1f%% → %.1f%%\n", 100*before.CWECE, 100*after.CWECE, 100*before.Accuracy, 100*after.Accuracy)
	// Output:
	// FedBBQ, 12 rounds, 20480 bytes up per client
	// cwECE 3.55% → 1.91%, accuracy 61.4% → 60.0%
}

// DP-FedAvg temperature scaling at (ε, δ) = (1, 10⁻⁵) under zCDP: each
// client's update is clipped to 0.5 and the server adds noise of
// σ = 0.5·√(T/(2ρ)) to the sum every round.
func ExampleFedAvg_private() {
	data := overconfident(20000, 2)
	part, err := federation.Dirichlet(data.Labels, data.Classes, 100, 0.1, federation.PartitionOptions{Seed: 2})
	if err != nil {
		log.Fatal(err)
	}
	pop, err := federation.NewPopulation(data, part, federation.Calibration)
	if err != nil {
		log.Fatal(err)
	}
	fit := federation.FedTemp()
	fit.Privacy = &federation.Privacy{Epsilon: 1, Delta: 1e-5, Clip: 0.5}
	res, err := fit.Fit(context.Background(), pop, federation.Rounds{T: 12, SampleRate: 0.1, Seed: 2})
	if err != nil {
		log.Fatal(err)
	}
	p := res.Privacy
	fmt.Printf("%s: ε = %.3g, δ = %g, ρ = %.4f, σ = %.3f, %d noisy releases\n", res.Protocol, p.Epsilon, p.Delta, p.Rho, p.Sigma, len(res.Ledger.Releases()))
	fmt.Printf("T = %.2f\n", res.Calibrator.(*calib.Temperature).T)
	// Output:
	// FedTemp: ε = 1, δ = 1e-05, ρ = 0.0306, σ = 7.006, 12 noisy releases
	// T = 0.59
}
