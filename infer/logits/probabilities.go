package logits

import (
	"errors"
	"fmt"
	"math"
)

// ProbabilitySumTolerance is how far from 1 the sum of a row of
// probabilities may be: float32 rounding of a softmax over thousands of
// classes stays far below it, a row that is not a distribution does not.
const ProbabilitySumTolerance = 1e-3

// ProbabilityFloor is the smallest probability FromProbabilities takes
// the log of: a probability below it, 0 included, becomes log
// ProbabilityFloor ≈ −27.6, the floor the NLL applies (SPEC §4).
const ProbabilityFloor = 1e-12

// ErrNotProbabilities is wrapped by the errors of FromProbabilities: a
// row that is not a probability distribution.
var ErrNotProbabilities = errors.New("not probabilities")

// Input kinds: what the "logits" array of a file holds.
const (
	InputLogits        = "logits"        // logits, as SPEC §3 says
	InputProbabilities = "probabilities" // probabilities, as a model ending in softmax gives
)

// FromProbabilities turns f's "logits" array, which holds probabilities
// (a model that ends in a softmax), into log-probabilities in place:
// each value p becomes log max(p, ProbabilityFloor). Softmax of the
// result gives back p, up to the floor, so every calibrator and metric
// sees the model's probabilities. Each row must be a distribution: every
// value in [0, 1] and the sum within ProbabilitySumTolerance of 1;
// otherwise f is left unchanged and the error, wrapping
// ErrNotProbabilities, names the first row that is not.
func (f *File) FromProbabilities() error {
	c := f.Classes
	for r := 0; r < f.Len(); r++ {
		sum := 0.0
		for j, p := range f.Logits[r*c : (r+1)*c] {
			if !(p >= 0 && p <= 1) {
				return fmt.Errorf("%w: row %d, class %d is %v, outside [0, 1]", ErrNotProbabilities, r, j, p)
			}
			sum += float64(p)
		}
		if math.Abs(sum-1) > ProbabilitySumTolerance {
			return fmt.Errorf("%w: row %d sums to %v, not 1 within %v", ErrNotProbabilities, r, sum, ProbabilitySumTolerance)
		}
	}
	for i, p := range f.Logits {
		f.Logits[i] = float32(math.Log(math.Max(float64(p), ProbabilityFloor)))
	}
	return nil
}

// ConvertInput makes f's "logits" array hold logits, given the kind of
// input it holds: InputLogits leaves it as it is, InputProbabilities
// calls FromProbabilities; any other kind is an error.
func (f *File) ConvertInput(kind string) error {
	switch kind {
	case InputLogits:
		return nil
	case InputProbabilities:
		return f.FromProbabilities()
	}
	return fmt.Errorf("input kind %q: want %q or %q", kind, InputLogits, InputProbabilities)
}
