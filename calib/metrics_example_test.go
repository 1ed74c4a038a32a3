package calib_test

import (
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/calib"
)

func ExampleEvaluate() {
	// Four examples of two classes: class probabilities and labels.
	probs := []float64{
		0.9, 0.1,
		0.8, 0.2,
		0.3, 0.7,
		0.5, 0.5,
	}
	labels := []int{0, 1, 1, 0}
	m, err := calib.Evaluate(probs, labels, 2, 2) // 2 bins: [0, 0.5), [0.5, 1]
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("accuracy %.2f, cwECE %.3f, ECE %.3f, Brier %.3f\n", m.Accuracy, m.CWECE, m.ECE, m.Brier)
	// Output:
	// accuracy 0.75, cwECE 0.175, ECE 0.025, Brier 0.495
}

func ExampleNewReliability() {
	probs := []float64{0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.5, 0.5}
	labels := []int{0, 1, 1, 0}
	r, err := calib.NewReliability(probs, labels, 2, 2)
	if err != nil {
		log.Fatal(err)
	}
	for m, b := range r.Class[0] {
		fmt.Printf("class 0, bin %d: confidence %.3f, frequency %.3f, %d examples\n", m, b.Confidence, b.Frequency, b.Count)
	}
	// Output:
	// class 0, bin 0: confidence 0.300, frequency 0.000, 1 examples
	// class 0, bin 1: confidence 0.733, frequency 0.667, 3 examples
}

func ExampleBin() {
	// SPEC §4: min(floor(v·M), M−1); 1.0 falls in the last bin.
	fmt.Println(calib.Bin(0, 15), calib.Bin(0.5, 15), calib.Bin(1, 15))
	// Output:
	// 0 7 14
}
