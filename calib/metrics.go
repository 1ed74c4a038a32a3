package calib

import (
	"fmt"
)

// DefaultMetricBins is the number of equal-width bins the metrics use when
// asked for 0 bins (SPEC §4).
const DefaultMetricBins = 15

// MaxMetricBins is the largest number of bins the metrics take. Calibration
// errors are measured with 10 to 100 bins; far more leaves most bins
// empty, and the per-class statistics take classes × bins memory.
const MaxMetricBins = 1000

// nllFloor is the smallest probability NLL takes the logarithm of.
const nllFloor = 1e-12

// probTolerance is how far outside [0, 1] a probability may stray through
// rounding before Evaluate rejects it.
const probTolerance = 1e-6

// Bin returns the equal-width bin of v among bins bins of [0, 1]:
// min(floor(v·bins), bins−1), so that v = 1 falls in the last bin and
// never in an extra one. Values below 0 (and NaN) fall in bin 0, values
// above 1 in the last bin. Bin panics if bins < 1.
//
// Every metric and binning calibrator in this package bins with Bin.
func Bin(v float64, bins int) int {
	if bins < 1 {
		panic("calib: Bin needs at least one bin")
	}
	if !(v > 0) {
		return 0
	}
	if v >= 1 {
		return bins - 1
	}
	b := int(v * float64(bins))
	if b >= bins { // v·bins rounded up to bins
		return bins - 1
	}
	return b
}

// Metrics summarises the calibration and accuracy of class probabilities
// on labelled examples (SPEC §4). All rates are fractions, not percentages.
type Metrics struct {
	// N is the number of examples.
	N int `json:"n"`
	// Classes is the number of classes C.
	Classes int `json:"classes"`
	// Accuracy is the fraction of examples whose most probable class (the
	// first one on ties) is the label.
	Accuracy float64 `json:"accuracy"`
	// CWECE is the classwise expected calibration error, the primary metric:
	// (1/C) Σ_j Σ_m (|B_jm|/N)·|mean p̂_ij − mean 1{y_i = j}| over the bins
	// B_jm of the class-j probabilities.
	CWECE float64 `json:"cwece"`
	// ECE is the top-label expected calibration error: bins over the top
	// probability, Σ_m (|B_m|/N)·|accuracy − confidence|.
	ECE float64 `json:"ece"`
	// NLL is the mean negative log-likelihood −log p̂_{i,y_i}, with p̂
	// floored at 1e-12.
	NLL float64 `json:"nll"`
	// Brier is the mean over examples of Σ_j (p̂_ij − 1{y_i = j})².
	Brier float64 `json:"brier"`
}

// Evaluate computes every metric of probs, an n×classes row-major matrix
// of class probabilities, against labels in one pass. bins is the number
// of equal-width bins for cwECE and ECE; 0 means DefaultMetricBins.
//
// It returns an error when the shapes do not match, a label is outside
// [0, classes), a probability is not finite or lies outside [0, 1] (beyond
// rounding), there are fewer than 2 classes, bins is negative, or there
// are no examples.
func Evaluate(probs []float64, labels []int, classes, bins int) (Metrics, error) {
	if len(labels) == 0 {
		return Metrics{}, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	a, err := NewAccumulator(classes, bins)
	if err != nil {
		return Metrics{}, err
	}
	if err := a.Add(probs, labels); err != nil {
		return Metrics{}, err
	}
	return a.Metrics()
}

// EvaluateSet computes the metrics of calibrator c on the set s; a nil c
// evaluates the uncalibrated softmax probabilities of s. bins is as for
// Evaluate.
func EvaluateSet(s *Set, c Calibrator, bins int) (Metrics, error) {
	p, err := Probabilities(s, c)
	if err != nil {
		return Metrics{}, err
	}
	return Evaluate(p, s.Labels, s.Classes, bins)
}

// Probabilities returns the class probabilities that c predicts for the
// logits of s, or their softmax when c is nil. It returns an error when s
// is invalid or c was built for another number of classes.
func Probabilities(s *Set, c Calibrator) ([]float64, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p := make([]float64, len(s.Logits))
	if c == nil {
		SoftmaxRows(p, s.Logits, s.Classes)
		return p, nil
	}
	if c.Classes() != s.Classes {
		return nil, fmt.Errorf("%s calibrator is for %d classes but the data has %d", c.Method(), c.Classes(), s.Classes)
	}
	c.Predict(p, s.Logits)
	return p, nil
}
