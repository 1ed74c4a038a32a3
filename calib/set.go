package calib

import (
	"errors"
	"fmt"
	"math"
)

// Calibrator maps logits to calibrated class probabilities.
type Calibrator interface {
	// Fit fits the calibrator's parameters to the labelled logits of s.
	// It returns an error for an empty or invalid set.
	Fit(s *Set) error

	// Predict writes the calibrated probabilities of the rows of logits
	// (n×c, row-major, c = Classes()) into dst, which must have the same
	// length. Each output row sums to 1. Predict panics if the lengths do
	// not match, and is safe for concurrent use once fitting is done.
	Predict(dst, logits []float64)

	// Method returns the method name used in sidecar files and on the
	// command line: one of MethodNames().
	Method() string

	// Classes returns the number of classes c the calibrator was built for.
	Classes() int
}

// Set is a set of labelled logits. The zero value is an empty set with no
// classes.
type Set struct {
	// Logits holds len(Labels) rows of Classes logits each, row-major.
	Logits []float64
	// Labels holds the true class of each row, in [0, Classes).
	Labels []int
	// Classes is the number of classes c.
	Classes int
}

// ErrEmpty is returned (wrapped) when a set has no examples.
var ErrEmpty = errors.New("no examples")

// Len returns the number of examples in s.
func (s *Set) Len() int { return len(s.Labels) }

// Row returns the logits of example i, aliasing s.Logits.
func (s *Set) Row(i int) []float64 { return s.Logits[i*s.Classes : (i+1)*s.Classes] }

// Subset returns a new set holding the examples of s at the given indices,
// in that order. The logits are copied.
func (s *Set) Subset(idx []int) *Set {
	out := &Set{
		Logits:  make([]float64, 0, len(idx)*s.Classes),
		Labels:  make([]int, 0, len(idx)),
		Classes: s.Classes,
	}
	for _, i := range idx {
		out.Logits = append(out.Logits, s.Row(i)...)
		out.Labels = append(out.Labels, s.Labels[i])
	}
	return out
}

// Validate reports the first problem that makes s unusable: fewer than two
// classes, mismatched lengths, a non-finite logit, or a label outside
// [0, Classes). An empty set is valid; callers that need examples check
// Len.
func (s *Set) Validate() error {
	if s.Classes < 2 {
		return fmt.Errorf("need at least 2 classes, have %d", s.Classes)
	}
	if len(s.Logits) != len(s.Labels)*s.Classes {
		return fmt.Errorf("have %d logits for %d labels and %d classes: lengths do not match", len(s.Logits), len(s.Labels), s.Classes)
	}
	for i, v := range s.Logits {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("logit of example %d, class %d is %v: logits must be finite", i/s.Classes, i%s.Classes, v)
		}
	}
	for i, y := range s.Labels {
		if y < 0 || y >= s.Classes {
			return fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, s.Classes)
		}
	}
	return nil
}

// checkFit validates s for fitting: valid and not empty.
func checkFit(s *Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Len() == 0 {
		return fmt.Errorf("cannot fit: %w", ErrEmpty)
	}
	return nil
}
