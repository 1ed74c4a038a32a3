package logits

import (
	"errors"
	"fmt"
	"math"

	"github.com/fedcalib/fedcalib/calib"
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
	InputLogits        = calib.InputLogits        // logits, as SPEC §3 says
	InputProbabilities = calib.InputProbabilities // probabilities, as a model ending in softmax gives
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
	return convertInput(InputProbabilities, f.Logits, f.Classes, 0)
}

// checkProbabilities reports the first row of vals, rows of c values
// numbered from first, that is not a probability distribution.
func checkProbabilities(vals []float32, c, first int) error {
	for r := 0; r < len(vals)/c; r++ {
		sum := 0.0
		for j, p := range vals[r*c : (r+1)*c] {
			if !(p >= 0 && p <= 1) {
				return fmt.Errorf("%w: row %d, class %d is %v, outside [0, 1]", ErrNotProbabilities, first+r, j, p)
			}
			sum += float64(p)
		}
		if math.Abs(sum-1) > ProbabilitySumTolerance {
			return fmt.Errorf("%w: row %d sums to %v, not 1 within %v", ErrNotProbabilities, first+r, sum, ProbabilitySumTolerance)
		}
	}
	return nil
}

// logProbabilities replaces each probability p of vals by
// log max(p, ProbabilityFloor).
func logProbabilities(vals []float32) {
	for i, p := range vals {
		vals[i] = float32(math.Log(math.Max(float64(p), ProbabilityFloor)))
	}
}

// ConvertInput makes f's "logits" array hold logits, given the kind of
// input it holds: InputLogits leaves it as it is, InputProbabilities
// calls FromProbabilities; any other kind is an error.
func (f *File) ConvertInput(kind string) error {
	return convertInput(kind, f.Logits, f.Classes, 0)
}

// ConvertInput is File.ConvertInput of the rows of a block: errors name
// the row in the file.
func (b *Block) ConvertInput(kind string) error {
	c := 1
	if b.Len() > 0 {
		c = len(b.Logits) / b.Len()
	}
	return convertInput(kind, b.Logits, c, b.First)
}

// convertInput is ConvertInput of the rows of c values vals, numbered
// from first.
func convertInput(kind string, vals []float32, c, first int) error {
	switch kind {
	case InputLogits:
		return nil
	case InputProbabilities:
		if err := checkProbabilities(vals, c, first); err != nil {
			return err
		}
		logProbabilities(vals)
		return nil
	}
	return fmt.Errorf("input kind %q: want %q or %q", kind, InputLogits, InputProbabilities)
}
