package dp_test

import (
	"errors"
	"fmt"
	"log"
	"slices"

	"github.com/fedcalib/fedcalib/dp"
)

func ExampleZCDPRho() {
	// The zCDP budget equivalent to (ε, δ) = (1, 1e-5), and back.
	rho, err := dp.ZCDPRho(1, 1e-5)
	if err != nil {
		log.Fatal(err)
	}
	eps, err := dp.ZCDPEpsilon(rho, 1e-5)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rho = %.6f, back to epsilon = %.6f\n", rho, eps)
	// Output:
	// rho = 0.030557, back to epsilon = 1.000000
}

func ExamplePlan_NoiseMultiplier() {
	// Noise per unit of clip norm for T = 30 rounds at (ε, δ) = (1, 1e-5),
	// for scaling (one clipped update per round) and for binning with
	// c = 10 classes (2c histograms per round), under the paper's zCDP
	// accounting and under RDP with 10% of clients sampled per round.
	for _, p := range []dp.Plan{
		{Epsilon: 1, Delta: 1e-5, Rounds: 30},
		{Epsilon: 1, Delta: 1e-5, Rounds: 30, PerRound: 20},
		{Epsilon: 1, Delta: 1e-5, Rounds: 30, SampleRate: 0.1, Accountant: dp.RDP},
	} {
		z, err := p.NoiseMultiplier()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v, %2d per round: z = %.4f, sigma at C=0.5: %.4f\n",
			p.Accountant, max(p.PerRound, 1), z, dp.DefaultClip*z)
	}
	// Output:
	// zcdp,  1 per round: z = 22.1561, sigma at C=0.5: 11.0780
	// zcdp, 20 per round: z = 99.0851, sigma at C=0.5: 49.5425
	// rdp,  1 per round: z = 2.6237, sigma at C=0.5: 1.3119
}

func ExampleRDPAccountant() {
	// 1000 steps of the Poisson-subsampled Gaussian mechanism with q = 0.01
	// and noise multiplier 1.1, reported at δ = 1e-5.
	var acc dp.RDPAccountant // the zero value tracks dp.DefaultOrders()
	if err := acc.ComposePoissonGaussian(0.01, 1.1, 1000); err != nil {
		log.Fatal(err)
	}
	eps, order, err := acc.Epsilon(1e-5)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("epsilon = %.4f at order %v\n", eps, order)
	// Output:
	// epsilon = 1.7118 at order 9.6
}

func ExampleLedger() {
	budget := dp.Budget{Epsilon: 1, Delta: 1e-5}
	z, err := dp.Plan{Epsilon: 1, Delta: 1e-5, Rounds: 3}.NoiseMultiplier()
	if err != nil {
		log.Fatal(err)
	}
	ledger, err := dp.NewLedger(dp.ZCDP, budget)
	if err != nil {
		log.Fatal(err)
	}
	round := dp.Release{
		Mechanism: "FedTemp",
		Noise:     []dp.Gaussian{{Sigma: dp.DefaultClip * z, Sensitivity: dp.DefaultClip}},
		Rounds:    1,
	}
	for i := 1; i <= 4; i++ {
		if err := ledger.Spend(round); errors.Is(err, dp.ErrBudgetExceeded) {
			fmt.Printf("round %d refused\n", i)
			break
		}
		fmt.Printf("round %d: epsilon spent %.4f\n", i, ledger.Spent().Epsilon)
	}
	// Output:
	// round 1: epsilon spent 0.5512
	// round 2: epsilon spent 0.8023
	// round 3: epsilon spent 1.0000
	// round 4 refused
}

func ExampleClipL2() {
	update := []float64{3, 4}
	norm := dp.ClipL2(update, dp.DefaultClip)
	fmt.Println(norm, update, dp.Norm(update))
	// Output:
	// 5 [0.3 0.4] 0.5
}

func ExampleAddGaussian() {
	// Simulation: the same seed gives the same noise. A real release would
	// use dp.NewSecure() instead.
	sum := func(seed uint64) []float64 {
		x := []float64{10, 20, 30}
		dp.AddGaussian(x, 2.5, dp.NewSeeded(seed))
		return x
	}
	fmt.Println(slices.Equal(sum(42), sum(42)), slices.Equal(sum(42), sum(43)))
	// Output:
	// true false
}
