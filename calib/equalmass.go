package calib

import "fmt"

// EqualMassMexp is the bin exponent of the fine equal-width histograms
// equal-mass binning forms its bins from when Settings.Mexp is zero:
// 2^10 = 1024 fine bins per class, as for isotonic regression and
// scaling-binning.
const EqualMassMexp = 10

// DefaultEqualMassBins returns the number of equal-mass bins of an
// equal-mass binning fit with 2^mexp fine bins that does not set
// MassBins: 100 (ScalingBinningBins), or 2^mexp when there are fewer fine
// bins. Unlike scaling-binning's (DefaultScalingBinningBins) it does not
// grow with the classes: a bin's value is a fraction of labels, whose
// variance grows as bins hold fewer rows (histogram binning needs
// O(B/ε²) samples, Kumar et al. 2019), so with more classes than bins
// the top bins of many classes share one value and the argmax suffers
// (docs/CALIBRATION.md, "Equal-mass binning at many classes").
func DefaultEqualMassBins(mexp int) int {
	if mexp < 0 || mexp >= 7 {
		return ScalingBinningBins
	}
	return min(ScalingBinningBins, 1<<mexp)
}

// EqualMass is one-vs-all histogram binning on equal-mass (quantile) bins,
// method MethodEqualMass: Histogram's estimator g_j = P/(P + N), the
// fraction of class-j examples in the bin, on bins that each hold about
// the same number of calibration examples instead of bins of equal width
// (netcal's HistogramBinning with equal_intervals=False; scikit-learn's
// strategy="quantile").
//
// It is formed from the one-vs-all Histograms of Bins fine equal-width
// bins that every binning method uses — so a federation sums them, and
// under privacy noises them, exactly as for Histogram — and merges, per
// class, the fine bins into MassBins equal-mass bins by the rule of
// scaling-binning (see NewScalingBinning): with c_m = P_j(m) + N_j(m) the
// count of fine bin m and n = Σ_m c_m, equal-mass bin k = 1, …, MassBins−1
// starts at the fine bin e_k, the largest e ≤ Bins − 1 with
// Σ_{m<e} c_m ≤ k·n/MassBins. The bin edges are thus chosen from the
// released (aggregated, and under privacy noisy) histograms — a
// post-processing of them, at no further privacy cost — on the public grid
// of fine-bin edges; the fine resolution 1/Bins bounds how equal the
// masses can be. Noisy counts are clamped at 0 first.
//
// The calibrator is stored as a lookup table over the fine bins, each
// holding the value of its equal-mass bin, so that it predicts, is
// weighted and is exported exactly as Histogram: the C values, optionally
// weighted (Weights), are normalised to sum to 1; an equal-mass bin
// without examples returns the probability unchanged (EmptyBin); a row
// whose values sum to 0 keeps its softmax probabilities.
//
// Build one with Fit from labelled logits, or with NewEqualMass from
// (aggregated) Histograms.
type EqualMass struct {
	// Bins is the number of fine equal-width bins per class, at most
	// MaxBins; zero means 2^EqualMassMexp when fitting.
	Bins int `json:"bins"`
	// MassBins is the number of equal-mass bins per class, 1 to Bins;
	// zero means DefaultEqualMassBins of the fine bins' exponent
	// (100 for 2^7 fine bins or more) when fitting.
	MassBins int `json:"mass_bins"`
	// Edges holds, for class j, the first fine bin of each equal-mass bin
	// and the end, Edges[j*(MassBins+1)+k] for k = 0, …, MassBins:
	// 0 = e_0 ≤ e_1 ≤ … ≤ e_MassBins = Bins. Equal-mass bin k covers the
	// fine bins e_k to e_{k+1} − 1 (none when they are equal).
	Edges []int `json:"edges"`
	// Table holds, at Table[j*Bins+m], the value of the equal-mass bin
	// holding fine bin m of class j — P/(P + N) summed over its fine
	// bins — or EmptyBin where that bin holds no example, Classes×Bins.
	Table []float64 `json:"table"`
	// Weights optionally blends the predictions with the probabilities.
	Weights
}

// NewEqualMass returns the equal-mass binning calibrator of the histograms
// h, which may hold noisy counts (negative counts are taken as 0), with
// massBins equal-mass bins per class (see EqualMass) and no weighting. It
// returns an error when h is invalid (see Histograms.Validate) or massBins
// is outside [1, h.Bins].
func NewEqualMass(h *Histograms, massBins int) (*EqualMass, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	fine := h.Bins
	if massBins < 1 || massBins > fine {
		return nil, fmt.Errorf("equal-mass binning: %d bins: want 1 to %d, the fine bins", massBins, fine)
	}
	b := &EqualMass{Bins: fine, MassBins: massBins, Edges: make([]int, h.Classes*(massBins+1)), Table: make([]float64, len(h.Pos))}
	cum := make([]float64, fine+1)
	for j := range h.Classes {
		pos, neg := h.Pos[j*fine:(j+1)*fine], h.Neg[j*fine:(j+1)*fine]
		for m := range fine {
			cum[m+1] = cum[m] + max(pos[m], 0) + max(neg[m], 0)
		}
		edges := b.Edges[j*(massBins+1) : (j+1)*(massBins+1)]
		equalMassEdges(edges, cum)
		for k := range massBins {
			lo, hi := edges[k], edges[k+1]
			var p, q float64
			for m := lo; m < hi; m++ {
				p += max(pos[m], 0)
				q += max(neg[m], 0)
			}
			v := float64(EmptyBin)
			if p+q > 0 {
				v = p / (p + q)
			}
			for m := lo; m < hi; m++ {
				b.Table[j*fine+m] = v
			}
		}
	}
	return b, nil
}

// equalMassEdges writes into edges (B+1 of them, for B equal-mass bins)
// the first fine bin of each equal-mass bin, from the cumulative counts
// cum of the fine bins (len(cum) = fine + 1, cum[e] = Σ_{m<e} c_m):
// e_0 = 0, e_B = fine, and for k = 1, …, B−1 the largest e ≤ fine − 1 with
// cum[e] ≤ k·n/B, n = cum[fine] — the fine bin holding the example of
// rank k·n/B (0-based), where Kumar et al. start bin k. The rule of
// EqualMass and ScalingBinning.
func equalMassEdges(edges []int, cum []float64) {
	fine, bins := len(cum)-1, len(edges)-1
	n := cum[fine]
	edges[0], edges[bins] = 0, fine
	e := 0
	for k := 1; k < bins; k++ {
		target := float64(k) * n / float64(bins)
		for e+1 < fine && cum[e+1] <= target {
			e++
		}
		edges[k] = e
	}
}

// Fit fits b to the labelled logits of s: it accumulates the Histograms
// of b.Bins fine bins (2^EqualMassMexp if zero) and forms b.MassBins
// equal-mass bins (DefaultEqualMassBins if zero) from them. Any
// weighting is removed. It returns an error, leaving b unchanged, for an
// invalid or empty set, fine bins outside [1, MaxBins] or equal-mass bins
// outside [1, fine bins].
func (b *EqualMass) Fit(s *Set) error {
	fine := b.Bins
	if fine == 0 {
		fine = 1 << EqualMassMexp
	}
	if fine < 1 || fine > MaxBins {
		return fmt.Errorf("equal-mass binning: %d fine bins: want 1 to %d", fine, MaxBins)
	}
	mass := b.MassBins
	if mass == 0 {
		mass = min(DefaultEqualMassBins(exponentOf(fine)), fine)
	}
	if err := checkFit(s); err != nil {
		return err
	}
	h := NewHistograms(s.Classes, fine)
	if err := h.Accumulate(s); err != nil {
		return err
	}
	nb, err := NewEqualMass(h, mass)
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// exponentOf returns the largest M with 2^M ≤ bins (0 for bins < 2).
func exponentOf(bins int) int {
	m := 0
	for 2<<m <= bins {
		m++
	}
	return m
}

// Predict writes the calibrated probabilities of the rows of logits into
// dst; see Calibrator. It panics if b is not fitted.
func (b *EqualMass) Predict(dst, logits []float64) {
	predictTable(dst, logits, b.Table, b.Bins, &b.Weights)
}

// Method returns MethodEqualMass.
func (b *EqualMass) Method() string { return MethodEqualMass }

// Classes returns the number of classes of the fitted calibrator, 0 before
// fitting.
func (b *EqualMass) Classes() int {
	if b.Bins < 1 {
		return 0
	}
	return len(b.Table) / b.Bins
}

// SetWeighting sets the weighting of b's predictions: mode, with one
// weight α_j ∈ [0, 1] per class in alpha (nil for WeightNone). It copies
// alpha. It returns an error, leaving b unchanged, for an unknown mode or
// weights that do not fit.
func (b *EqualMass) SetWeighting(mode Weighting, alpha []float64) error {
	return b.Weights.set(mode, alpha, b.Classes())
}

// validate checks decoded parameters: a table of probabilities (or
// EmptyBin), edges that split each class's fine bins into MassBins
// ordered runs, and a table constant on each run.
func (b *EqualMass) validate() error {
	if err := checkTable(b.Table, b.Bins, true); err != nil {
		return err
	}
	c := b.Classes()
	switch {
	case b.MassBins < 1 || b.MassBins > b.Bins:
		return fmt.Errorf("mass_bins is %d: want 1 to %d, the fine bins", b.MassBins, b.Bins)
	case len(b.Edges) != c*(b.MassBins+1):
		return fmt.Errorf("edges has %d values: want classes × (mass_bins + 1) = %d", len(b.Edges), c*(b.MassBins+1))
	}
	for j := range c {
		e := b.Edges[j*(b.MassBins+1) : (j+1)*(b.MassBins+1)]
		if e[0] != 0 || e[b.MassBins] != b.Bins {
			return fmt.Errorf("class %d: edges run from %d to %d: want 0 to %d", j, e[0], e[b.MassBins], b.Bins)
		}
		for k := range b.MassBins {
			if e[k+1] < e[k] {
				return fmt.Errorf("class %d: edge %d (%d) is below edge %d (%d): want non-decreasing edges", j, k+1, e[k+1], k, e[k])
			}
			for m := e[k]; m < e[k+1]; m++ {
				if b.Table[j*b.Bins+m] != b.Table[j*b.Bins+e[k]] {
					return fmt.Errorf("class %d: fine bin %d holds %v, but its equal-mass bin %d starts with %v: want one value per equal-mass bin", j, m, b.Table[j*b.Bins+m], k, b.Table[j*b.Bins+e[k]])
				}
			}
		}
	}
	return b.Weights.check(c)
}
