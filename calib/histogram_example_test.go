package calib_test

import (
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/calib"
)

func ExampleHistogram() {
	s := &calib.Set{
		Logits:  []float64{3, 0, 2, 1, 0, 1, 1, 1, 0, 2},
		Labels:  []int{0, 1, 1, 0, 1},
		Classes: 2,
	}
	b := &calib.Histogram{Bins: 4}
	if err := b.Fit(s); err != nil {
		log.Fatal(err)
	}
	// softmax(3, 0) = (0.953, 0.047): bin 3 of class 0 holds one example,
	// of class 0 (g_0 = 1); bin 0 of class 1 holds one, not of class 1
	// (g_1 = 0).
	p := make([]float64, 2)
	b.Predict(p, []float64{3, 0})
	fmt.Printf("%s calibrator, %d classes: %.3f\n", b.Method(), b.Classes(), p)
	// Output:
	// bin calibrator, 2 classes: [1.000 0.000]
}
