package calib

import (
	"fmt"
	"math"
)

// ValueHistograms holds, for each class j and equal-width bin m of the
// class-j softmax probability (see Bin), the number of examples whose
// probability falls in the bin and the sum of those probabilities. They
// are the sufficient statistic of scaling-binning's bins
// (NewScalingBinning), which a federated client sends for its scaled
// probabilities and a server adds up, as the one-vs-all Histograms are
// for the binning methods. Unlike Histograms they ignore the labels.
//
// The zero value has no classes and no bins; use NewValueHistograms.
type ValueHistograms struct {
	// Classes is the number of classes C.
	Classes int `json:"classes"`
	// Bins is the number of equal-width bins B per class.
	Bins int `json:"bins"`
	// Count holds the number of examples of bin m of class j at
	// Count[j*Bins+m]: C×B, row-major by class.
	Count []float64 `json:"count"`
	// Sum holds the sum of their class-j probabilities at
	// Sum[j*Bins+m].
	Sum []float64 `json:"sum"`
}

// NewValueHistograms returns empty value histograms for classes classes
// and bins bins per class. It panics if classes < 2 or bins is outside
// [1, MaxBins].
func NewValueHistograms(classes, bins int) *ValueHistograms {
	if classes < 2 || bins < 1 || bins > MaxBins {
		panic(fmt.Sprintf("calib: NewValueHistograms(%d classes, %d bins): need ≥ 2 classes and 1 to %d bins", classes, bins, MaxBins))
	}
	return &ValueHistograms{Classes: classes, Bins: bins, Count: make([]float64, classes*bins), Sum: make([]float64, classes*bins)}
}

// Validate reports the first problem with h: fewer than 2 classes, a bin
// count outside [1, MaxBins], slices whose lengths are not Classes×Bins,
// or a value that is not finite.
func (h *ValueHistograms) Validate() error {
	switch {
	case h.Classes < 2:
		return fmt.Errorf("value histograms: need at least 2 classes, have %d", h.Classes)
	case h.Bins < 1 || h.Bins > MaxBins:
		return fmt.Errorf("value histograms: have %d bins: want 1 to %d", h.Bins, MaxBins)
	case len(h.Count) != h.Classes*h.Bins || len(h.Sum) != h.Classes*h.Bins:
		return fmt.Errorf("value histograms: have %d counts and %d sums: want %d classes × %d bins = %d each", len(h.Count), len(h.Sum), h.Classes, h.Bins, h.Classes*h.Bins)
	}
	for k := range h.Count {
		for _, v := range [2]float64{h.Count[k], h.Sum[k]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("value histograms: class %d, bin %d holds %v: counts and sums must be finite", k/h.Bins, k%h.Bins, v)
			}
		}
	}
	return nil
}

// Accumulate adds the softmax probabilities of the rows of s to h. It
// returns an error, leaving h unchanged, when s is invalid or has another
// number of classes.
func (h *ValueHistograms) Accumulate(s *Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Classes != h.Classes {
		return fmt.Errorf("value histograms are for %d classes but the set has %d", h.Classes, s.Classes)
	}
	p := make([]float64, s.Classes)
	for i := range s.Labels {
		Softmax(p, s.Row(i))
		for j, v := range p {
			k := j*h.Bins + Bin(v, h.Bins)
			h.Count[k]++
			h.Sum[k] += v
		}
	}
	return nil
}

// Add adds the counts and sums of o to h, as a server sums its clients'.
// It returns an error when the shapes differ.
func (h *ValueHistograms) Add(o *ValueHistograms) error {
	if o.Classes != h.Classes || o.Bins != h.Bins || len(o.Count) != len(h.Count) || len(o.Sum) != len(h.Sum) {
		return fmt.Errorf("cannot add value histograms of %d classes × %d bins to value histograms of %d classes × %d bins", o.Classes, o.Bins, h.Classes, h.Bins)
	}
	for k, v := range o.Count {
		h.Count[k] += v
	}
	for k, v := range o.Sum {
		h.Sum[k] += v
	}
	return nil
}
