package calib

import (
	"fmt"
	"math"
)

// DefaultBins is the number of bins per class of a Histogram fitted with
// Bins = 0: 2^DefaultMexp = 128.
const DefaultBins = 1 << DefaultMexp

// EmptyBin marks, in the Table of a Histogram, a bin that held no
// examples: the calibrator returns the class probability unchanged there.
const EmptyBin = -1

// Histogram is one-vs-all histogram binning (Zadrozny and Elkan 2002; paper
// App. B.3; SPEC §5), method MethodBin. For class j and equal-width bin m of
// the class-j softmax probability it predicts
// g_j = P_j(m)/(P_j(m) + N_j(m)), or the probability unchanged when the bin
// is empty, optionally weighted (Weights), then normalises the C values to
// sum to 1; a row whose values sum to 0 keeps its softmax probabilities.
//
// Build one with Fit from labelled logits, or with NewHistogramBinning
// from (aggregated) Histograms. Noisy counts are clamped at 0 first.
type Histogram struct {
	// Bins is the number of equal-width bins per class, at most MaxBins.
	// Zero means DefaultBins when fitting.
	Bins int `json:"bins"`
	// Table holds g_j(m) at Table[j*Bins+m], Classes×Bins, or EmptyBin
	// where bin m of class j is empty.
	Table []float64 `json:"table"`
	// Weights optionally blends the predictions with the probabilities.
	Weights
}

// NewHistogramBinning returns the histogram-binning calibrator of the
// histograms h, which may hold noisy counts: negative counts are taken as
// 0. It has h.Bins bins and no weighting. It returns an error when h is
// invalid (see Histograms.Validate).
func NewHistogramBinning(h *Histograms) (*Histogram, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	b := &Histogram{Bins: h.Bins, Table: make([]float64, len(h.Pos))}
	for k := range b.Table {
		pos, neg := max(h.Pos[k], 0), max(h.Neg[k], 0)
		if pos+neg > 0 {
			b.Table[k] = pos / (pos + neg)
		} else {
			b.Table[k] = EmptyBin
		}
	}
	return b, nil
}

// Fit fits b to the labelled logits of s with b.Bins bins (DefaultBins if
// zero): it accumulates their Histograms and builds the calibrator from
// them. Any weighting is removed. It returns an error for an invalid or
// empty set or a bin count outside [0, MaxBins], leaving b unchanged.
func (b *Histogram) Fit(s *Set) error {
	bins := b.Bins
	if bins == 0 {
		bins = DefaultBins
	}
	if bins < 1 || bins > MaxBins {
		return fmt.Errorf("histogram binning: %d bins: want 1 to %d", bins, MaxBins)
	}
	if err := checkFit(s); err != nil {
		return err
	}
	h := NewHistograms(s.Classes, bins)
	if err := h.Accumulate(s); err != nil {
		return err
	}
	nb, err := NewHistogramBinning(h)
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// Predict writes the calibrated probabilities of the rows of logits into
// dst; see Calibrator. It panics if b is not fitted.
func (b *Histogram) Predict(dst, logits []float64) {
	predictTable(dst, logits, b.Table, b.Bins, &b.Weights)
}

// Method returns MethodBin.
func (b *Histogram) Method() string { return MethodBin }

// Classes returns the number of classes of the fitted calibrator, 0 before
// fitting.
func (b *Histogram) Classes() int {
	if b.Bins < 1 {
		return 0
	}
	return len(b.Table) / b.Bins
}

// SetWeighting sets the weighting of b's predictions: mode, with one
// weight α_j ∈ [0, 1] per class in alpha (nil for WeightNone). It copies
// alpha. It returns an error, leaving b unchanged, for an unknown mode or
// weights that do not fit.
func (b *Histogram) SetWeighting(mode Weighting, alpha []float64) error {
	return b.Weights.set(mode, alpha, b.Classes())
}

// validate checks decoded parameters.
func (b *Histogram) validate() error {
	if err := checkTable(b.Table, b.Bins, true); err != nil {
		return err
	}
	return b.Weights.check(b.Classes())
}

// checkTable checks a binning calibrator's lookup table of Classes×bins
// entries in [0, 1] (or EmptyBin where empty is true).
func checkTable(table []float64, bins int, empty bool) error {
	switch {
	case bins < 1 || bins > MaxBins:
		return fmt.Errorf("have %d bins: want 1 to %d", bins, MaxBins)
	case len(table)%bins != 0 || len(table)/bins < 2:
		return fmt.Errorf("table has %d entries: want classes × %d bins with at least 2 classes", len(table), bins)
	}
	for k, v := range table {
		if (v < 0 || v > 1 || math.IsNaN(v)) && !(empty && v == EmptyBin) {
			want := "a probability in [0, 1]"
			if empty {
				want += fmt.Sprintf(" or %d (empty bin)", EmptyBin)
			}
			return fmt.Errorf("table entry of class %d, bin %d is %v: want %s", k/bins, k%bins, v, want)
		}
	}
	return nil
}
