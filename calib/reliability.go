package calib

import "fmt"

// ReliabilityBin is one bin of a reliability diagram.
type ReliabilityBin struct {
	// Confidence is the mean predicted probability of the examples in the
	// bin; 0 for an empty bin.
	Confidence float64 `json:"confidence"`
	// Frequency is the observed frequency of the event in the bin (the
	// class for classwise bins, a correct prediction for top-label bins);
	// 0 for an empty bin.
	Frequency float64 `json:"frequency"`
	// Count is the number of examples in the bin.
	Count int `json:"count"`
}

// Reliability holds the data of classwise and top-label reliability
// diagrams, binned with Bin as the metrics are.
type Reliability struct {
	// N is the number of examples.
	N int `json:"n"`
	// Bins is the number of equal-width bins.
	Bins int `json:"bins"`
	// Class holds, for each class j, the Bins bins of the class-j
	// probabilities against 1{y = j}.
	Class [][]ReliabilityBin `json:"class"`
	// Top holds the Bins bins of the top probability against accuracy.
	Top []ReliabilityBin `json:"top"`
}

// NewReliability bins probs (n×classes, row-major) against labels for
// reliability diagrams. Its arguments and errors are those of Evaluate.
//
// The calibration errors follow from the bins: cwECE is
// (1/C) Σ_j Σ_m (Count/N)·|Confidence − Frequency| over Class, and ECE the
// same sum over Top.
func NewReliability(probs []float64, labels []int, classes, bins int) (*Reliability, error) {
	if len(labels) == 0 {
		return nil, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	a, err := NewAccumulator(classes, bins)
	if err != nil {
		return nil, err
	}
	if err := a.Add(probs, labels); err != nil {
		return nil, err
	}
	return a.Reliability(), nil
}
