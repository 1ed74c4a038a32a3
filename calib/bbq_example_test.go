package calib_test

import (
	"fmt"
	"log"
	"math"

	"github.com/fedcalib/fedcalib/calib"
)

// A federated server builds BBQ from the sum of its clients' histograms.
func ExampleNewBBQ() {
	clients := []*calib.Set{
		{Logits: []float64{2, 0, 0, 1, 0, 3}, Labels: []int{0, 1}, Classes: 3},
		{Logits: []float64{0, 0, 4, 1, 2, 0}, Labels: []int{2, 0}, Classes: 3},
	}
	sum := calib.NewHistograms(3, 1<<calib.DefaultMexp)
	for _, s := range clients {
		local := calib.NewHistograms(3, 1<<calib.DefaultMexp) // the client's work
		if err := local.Accumulate(s); err != nil {
			log.Fatal(err)
		}
		if err := sum.Add(local); err != nil { // the server's aggregation
			log.Fatal(err)
		}
	}
	bbq, err := calib.NewBBQ(sum)
	if err != nil {
		log.Fatal(err)
	}
	// Weight each class by the share of its examples seen (here all).
	if err := bbq.SetWeighting(calib.WeightAll, calib.Alpha(sum.Positives(), []float64{2, 1, 1})); err != nil {
		log.Fatal(err)
	}
	p := make([]float64, 3)
	bbq.Predict(p, []float64{2, 0, 0})
	fmt.Printf("Mexp %d, %d classes, p = (%.3f, %.3f, %.3f), sum %.0f\n", bbq.Mexp, bbq.Classes(), p[0], p[1], p[2], math.Round(p[0]+p[1]+p[2]))
	// Output:
	// Mexp 7, 3 classes, p = (0.881, 0.108, 0.011), sum 1
}

func ExampleDPAlpha() {
	// Noisy positive histograms of 2 classes, 4 bins each, after rounds
	// whose accumulated noise has standard deviation σ = 2.
	h := &calib.Histograms{
		Classes: 2, Bins: 4,
		Pos: []float64{20, 3.5, -1, 9, 1.2, -0.4, 0.9, 1.3},
		Neg: []float64{40, 10, 2, 0.5, 30, 21, 7, 4},
	}
	fmt.Printf("%.3f\n", calib.DPAlpha(h, 2))
	// Output:
	// [1.000 0.470]
}
