package calib

import (
	"fmt"
	"math"
)

// MaxBins is the largest number of bins a binning calibrator may have
// (2^16, from Mexp ≤ 16).
const MaxBins = 1 << MaxMexp

// Histograms holds the one-vs-all class-positive and class-negative
// histograms of softmax probabilities (paper Alg. 1): for class j and bin
// m, P_j(m) counts the examples with label j whose class-j probability
// falls in bin m (see Bin), and N_j(m) those with another label. They are
// the sufficient statistic of the binning calibrators: a federated client
// sends its Histograms, the server adds them up and builds a Histogram
// (NewHistogramBinning) or BBQ (NewBBQ) from the sums.
//
// Counts are float64 so that aggregated, noisy (differentially private)
// histograms, whose counts may be fractional or negative, fit the same
// type. The zero value has no classes and no bins; use NewHistograms.
type Histograms struct {
	// Classes is the number of classes C.
	Classes int `json:"classes"`
	// Bins is the number of equal-width bins B per class.
	Bins int `json:"bins"`
	// Pos holds P_j(m) at Pos[j*Bins+m]: C×B, row-major by class.
	Pos []float64 `json:"pos"`
	// Neg holds N_j(m) at Neg[j*Bins+m]: C×B, row-major by class.
	Neg []float64 `json:"neg"`
}

// NewHistograms returns empty histograms for classes classes and bins
// bins per class. It panics if classes < 2 or bins is outside
// [1, MaxBins].
func NewHistograms(classes, bins int) *Histograms {
	if classes < 2 || bins < 1 || bins > MaxBins {
		panic(fmt.Sprintf("calib: NewHistograms(%d classes, %d bins): need ≥ 2 classes and 1 to %d bins", classes, bins, MaxBins))
	}
	return &Histograms{
		Classes: classes,
		Bins:    bins,
		Pos:     make([]float64, classes*bins),
		Neg:     make([]float64, classes*bins),
	}
}

// Validate reports the first problem with h: fewer than 2 classes, a bin
// count outside [1, MaxBins], slices whose lengths are not Classes×Bins,
// or a count that is not finite. Negative and fractional counts are valid.
func (h *Histograms) Validate() error {
	switch {
	case h.Classes < 2:
		return fmt.Errorf("histograms: need at least 2 classes, have %d", h.Classes)
	case h.Bins < 1 || h.Bins > MaxBins:
		return fmt.Errorf("histograms: have %d bins: want 1 to %d", h.Bins, MaxBins)
	case len(h.Pos) != h.Classes*h.Bins || len(h.Neg) != h.Classes*h.Bins:
		return fmt.Errorf("histograms: have %d positive and %d negative counts: want %d classes × %d bins = %d each", len(h.Pos), len(h.Neg), h.Classes, h.Bins, h.Classes*h.Bins)
	}
	for k := range h.Pos {
		for _, v := range [2]float64{h.Pos[k], h.Neg[k]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("histograms: count of class %d, bin %d is %v: counts must be finite", k/h.Bins, k%h.Bins, v)
			}
		}
	}
	return nil
}

// Accumulate adds the examples of s to h: the softmax probabilities of
// each row, binned with Bin. It returns an error when s is invalid or has
// another number of classes, and leaves h unchanged then.
func (h *Histograms) Accumulate(s *Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Classes != h.Classes {
		return fmt.Errorf("histograms are for %d classes but the set has %d", h.Classes, s.Classes)
	}
	p := make([]float64, s.Classes)
	for i, y := range s.Labels {
		Softmax(p, s.Row(i))
		h.addRow(p, y)
	}
	return nil
}

// AccumulateProbs adds examples given as class probabilities (n×Classes,
// row-major) and labels to h. It returns an error, leaving h unchanged,
// when the lengths do not match, a label is outside [0, Classes) or a
// probability is not finite.
func (h *Histograms) AccumulateProbs(probs []float64, labels []int) error {
	c := h.Classes
	if len(probs) != len(labels)*c {
		return fmt.Errorf("have %d probabilities for %d labels and %d classes: lengths do not match", len(probs), len(labels), c)
	}
	for i, y := range labels {
		if y < 0 || y >= c {
			return fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, c)
		}
	}
	for k, v := range probs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("probability of example %d, class %d is %v: probabilities must be finite", k/c, k%c, v)
		}
	}
	for i, y := range labels {
		h.addRow(probs[i*c:(i+1)*c], y)
	}
	return nil
}

func (h *Histograms) addRow(p []float64, y int) {
	for j, v := range p {
		k := j*h.Bins + Bin(v, h.Bins)
		if j == y {
			h.Pos[k]++
		} else {
			h.Neg[k]++
		}
	}
}

// Add adds the counts of o to h, as a server sums its clients'
// histograms. It returns an error when the shapes differ.
func (h *Histograms) Add(o *Histograms) error {
	if o.Classes != h.Classes || o.Bins != h.Bins || len(o.Pos) != len(h.Pos) || len(o.Neg) != len(h.Neg) {
		return fmt.Errorf("cannot add histograms of %d classes × %d bins to histograms of %d classes × %d bins", o.Classes, o.Bins, h.Classes, h.Bins)
	}
	for k, v := range o.Pos {
		h.Pos[k] += v
	}
	for k, v := range o.Neg {
		h.Neg[k] += v
	}
	return nil
}

// Clone returns a deep copy of h.
func (h *Histograms) Clone() *Histograms {
	return &Histograms{
		Classes: h.Classes,
		Bins:    h.Bins,
		Pos:     append([]float64(nil), h.Pos...),
		Neg:     append([]float64(nil), h.Neg...),
	}
}

// Reset sets every count of h to zero.
func (h *Histograms) Reset() {
	clear(h.Pos)
	clear(h.Neg)
}

// Positives returns, for each class j, the sum of its positive histogram
// Σ_m P_j(m): the number of class-j examples in h (a noisy estimate of it
// for private histograms). It is the Ñ_j of Alpha and DPAlpha.
func (h *Histograms) Positives() []float64 {
	out := make([]float64, h.Classes)
	for j := range out {
		var s float64
		for _, v := range h.Pos[j*h.Bins : (j+1)*h.Bins] {
			s += v
		}
		out[j] = s
	}
	return out
}
