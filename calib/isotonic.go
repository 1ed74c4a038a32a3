package calib

import (
	"fmt"
	"math"
)

// Bins of isotonic regression.
const (
	// IsotonicMexp is the bin exponent of isotonic regression formed
	// from histograms (a federation, or a central fit given a bin
	// exponent) when Settings.Mexp or the federation's exponent is
	// zero: 2^10 = 1024 bins per class. The fit pools bins itself, so a
	// fine grid costs little accuracy, only histogram size (and, under
	// privacy, the noise of more bins). A central fit without a bin
	// exponent is exact and has no bins (Isotonic).
	IsotonicMexp = 10
	// IsotonicBins is the number of bins per class at IsotonicMexp:
	// 2^IsotonicMexp.
	IsotonicBins = 1 << IsotonicMexp
)

// Isotonic is one-vs-all isotonic regression (Zadrozny and Elkan 2002),
// method MethodIsotonic, in one of two forms: exact, fitted centrally on
// the rows themselves, or binned, formed from the same one-vs-all
// Histograms as Histogram and BBQ, so that a federation forms it from
// aggregated (and, under privacy, noisy) histograms exactly as it forms
// those. Bins says which: zero for exact, the bins per class otherwise.
//
// Exact (Bins = 0, as scikit-learn's IsotonicRegression with
// out_of_bounds="clip", y_min 0 and y_max 1, fitted per class on the
// softmax probabilities). For class j, sort the rows by their class-j
// probability p̂_j (then by target); merge scores less than
// IsotonicTieResolution above the first of their group into it, with
// the mean target 1[y = j] and the count of the group as its value and
// weight; fit the weighted least-squares non-decreasing sequence to the
// values by pool-adjacent-violators (pooling equal neighbours too, as
// scikit-learn does); clip it to [0, 1]; and keep only the first and
// last score and the scores whose fitted value differs from a
// neighbour's. X[j] and Y[j] hold these breakpoints: at most twice the
// number of pooled blocks, and at most the number of distinct scores,
// so at most 2·min(blocks, N) per class for N rows. The class-j map g_j
// clips p̂_j to [X[j][0], X[j][last]] and interpolates linearly between
// the breakpoints (see interpolate). A fit whose breakpoints would hold
// more than MaxSize values is refused.
//
// Binned (Bins > 0). For class j it fits a non-decreasing function g_j
// of the class-j softmax probability, constant on each of the Bins
// equal-width bins (see Bin), by weighted least squares to the
// indicator 1[y = j]: with P_j(m) and N_j(m) the positive and negative
// counts of bin m, it minimises
//
//	Σ_m (P_j(m) + N_j(m)) · (P_j(m)/(P_j(m)+N_j(m)) − g_j(m))²
//
// subject to g_j(0) ≤ g_j(1) ≤ … ≤ g_j(Bins−1), by the pool-adjacent-
// violators algorithm. This is the exact least-squares isotonic fit of the
// examples with their probabilities rounded to their bins; finer bins
// approach the unbinned fit. Bins without examples have no weight, so any
// monotone value is a least-squares solution there; Isotonic takes, in
// such a bin, the value of the nearest non-empty bin when all non-empty
// bins lie on one side of it, and otherwise the linear interpolation, at
// the bin's midpoint, between the values of the nearest non-empty bins on
// either side (so an empty bin inside a pooled block takes the block's
// value). A class none of whose bins holds an example keeps its
// probability, as an empty bin of Histogram does.
//
// Prediction of either form is that of Histogram: the C values g_j(p̂_j),
// optionally weighted (Weights), are normalised to sum to 1, and a row
// whose values sum to 0 keeps its softmax probabilities.
//
// Build one with Fit from labelled logits (exact when Bins is zero), or
// with NewIsotonic from (aggregated) Histograms (binned). Noisy counts
// are clamped at 0 first.
type Isotonic struct {
	// Bins is the number of equal-width bins per class of a binned fit,
	// at most MaxBins; zero means the exact fit.
	Bins int `json:"bins,omitempty"`
	// Table holds, for a binned fit, g_j(m) at Table[j*Bins+m],
	// Classes×Bins: for each class either non-decreasing probabilities
	// in [0, 1], or EmptyBin in every bin for a class without examples.
	// Nil for an exact fit.
	Table []float64 `json:"table,omitempty"`
	// X and Y hold, for an exact fit, the breakpoints of each class:
	// X[j] the scores (strictly increasing, in [0, 1]), Y[j] the fitted
	// values there (non-decreasing, in [0, 1]), at least one of each.
	// Nil for a binned fit.
	X [][]float64 `json:"x,omitempty"`
	Y [][]float64 `json:"y,omitempty"`
	// Weights optionally blends the predictions with the probabilities.
	Weights
}

// NewIsotonic returns the binned isotonic-regression calibrator of the
// histograms h, which may hold noisy counts: negative counts are taken as
// 0. It has h.Bins bins and no weighting. It returns an error when h is
// invalid (see Histograms.Validate).
func NewIsotonic(h *Histograms) (*Isotonic, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	b := &Isotonic{Bins: h.Bins, Table: make([]float64, len(h.Pos))}
	w := &isotonicWork{}
	for j := 0; j < h.Classes; j++ {
		k := j * h.Bins
		w.fit(b.Table[k:k+h.Bins], h.Pos[k:k+h.Bins], h.Neg[k:k+h.Bins])
	}
	return b, nil
}

// Fit fits b to the labelled logits of s: exactly when b.Bins is zero,
// otherwise on b.Bins bins, accumulating their Histograms and building
// the calibrator from them. Any weighting is removed. It returns an error
// for an invalid or empty set, a bin count outside [0, MaxBins], or an
// exact fit of more than MaxSize values, leaving b unchanged.
func (b *Isotonic) Fit(s *Set) error {
	bins := b.Bins
	if bins == 0 {
		return b.fitExact(s)
	}
	if bins < 1 || bins > MaxBins {
		return fmt.Errorf("isotonic regression: %d bins: want 1 to %d (0: exact)", bins, MaxBins)
	}
	if err := checkFit(s); err != nil {
		return err
	}
	h := NewHistograms(s.Classes, bins)
	if err := h.Accumulate(s); err != nil {
		return err
	}
	nb, err := NewIsotonic(h)
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// Exact reports whether b is an exact fit (breakpoints), not a binned
// one (a table).
func (b *Isotonic) Exact() bool { return b.Bins == 0 }

// Predict writes the calibrated probabilities of the rows of logits into
// dst; see Calibrator. It panics if b is not fitted.
func (b *Isotonic) Predict(dst, logits []float64) {
	if b.Exact() {
		b.predictExact(dst, logits)
		return
	}
	predictTable(dst, logits, b.Table, b.Bins, &b.Weights)
}

// Method returns MethodIsotonic.
func (b *Isotonic) Method() string { return MethodIsotonic }

// Classes returns the number of classes of the fitted calibrator, 0 before
// fitting.
func (b *Isotonic) Classes() int {
	if b.Exact() {
		return len(b.X)
	}
	if b.Bins < 1 {
		return 0
	}
	return len(b.Table) / b.Bins
}

// SetWeighting sets the weighting of b's predictions: mode, with one
// weight α_j ∈ [0, 1] per class in alpha (nil for WeightNone). It copies
// alpha. It returns an error, leaving b unchanged, for an unknown mode or
// weights that do not fit.
func (b *Isotonic) SetWeighting(mode Weighting, alpha []float64) error {
	return b.Weights.set(mode, alpha, b.Classes())
}

// validate checks decoded parameters: either breakpoints (validateExact)
// and no bins or table, or a table of probabilities that is
// non-decreasing within each class, or EmptyBin throughout a class, and
// no breakpoints.
func (b *Isotonic) validate() error {
	if b.Bins == 0 && b.Table == nil {
		if err := b.validateExact(); err != nil {
			return err
		}
		return b.Weights.check(b.Classes())
	}
	if b.X != nil || b.Y != nil {
		return fmt.Errorf("parameters hold both a binned fit (bins, table) and an exact one (x, y): want one")
	}
	if err := checkTable(b.Table, b.Bins, true); err != nil {
		return err
	}
	for j := 0; j < b.Classes(); j++ {
		row := b.Table[j*b.Bins : (j+1)*b.Bins]
		empty := row[0] == EmptyBin
		for m, v := range row {
			switch {
			case (v == EmptyBin) != empty:
				return fmt.Errorf("table of class %d mixes empty (%d) and fitted bins at bin %d: a class is empty throughout or nowhere", j, EmptyBin, m)
			case m > 0 && v < row[m-1]:
				return fmt.Errorf("table of class %d decreases from %v in bin %d to %v in bin %d: isotonic fits are non-decreasing", j, row[m-1], m-1, v, m)
			}
		}
	}
	return b.Weights.check(b.Classes())
}

// isotonicWork holds the scratch space of fitting the classes of an
// Isotonic one after another; the zero value is ready to use.
type isotonicWork struct {
	bins []int     // the non-empty bins, in order
	y, w []float64 // their positive rates and weights (counts)
}

// fit writes into table the isotonic fit of one class with bin counts pos
// and neg (clamped at 0), filling the empty bins as Isotonic describes.
func (w *isotonicWork) fit(table, pos, neg []float64) {
	w.bins, w.y, w.w = w.bins[:0], w.y[:0], w.w[:0]
	for m := range pos {
		p, n := max(pos[m], 0), max(neg[m], 0)
		if p+n > 0 {
			w.bins = append(w.bins, m)
			w.y = append(w.y, p/(p+n))
			w.w = append(w.w, p+n)
		}
	}
	if len(w.bins) == 0 {
		for m := range table {
			table[m] = EmptyBin
		}
		return
	}
	fit := pav(w.y, w.w)
	for i, v := range fit { // guard against rounding past 1
		fit[i] = min(v, 1)
	}
	first, last := w.bins[0], w.bins[len(w.bins)-1]
	for m := 0; m <= first; m++ {
		table[m] = fit[0]
	}
	for m := last; m < len(table); m++ {
		table[m] = fit[len(fit)-1]
	}
	for i := 1; i < len(w.bins); i++ {
		a, b := w.bins[i-1], w.bins[i]
		fa, fb := fit[i-1], fit[i]
		table[b] = fb
		for m := a + 1; m < b; m++ {
			if fa == fb {
				table[m] = fa
			} else {
				table[m] = fa + (fb-fa)*float64(m-a)/float64(b-a)
			}
		}
	}
}

// pav returns the weighted least-squares non-decreasing fit to y: the x
// with x_0 ≤ x_1 ≤ … that minimises Σ_i w_i·(y_i − x_i)², computed by the
// pool-adjacent-violators algorithm in O(n). Each x_i is the weighted mean
// of y over the block of consecutive indices pooled with i. It panics when
// the lengths differ, a weight is not positive and finite, or a value is
// not finite.
func pav(y, w []float64) []float64 {
	if len(y) != len(w) {
		panic(fmt.Sprintf("calib: pav of %d values with %d weights", len(y), len(w)))
	}
	type block struct {
		sw, swy float64 // Σw and Σw·y over the block
		n       int     // its length
	}
	blocks := make([]block, 0, len(y))
	for i, v := range y {
		if !(w[i] > 0) || math.IsInf(w[i], 1) || math.IsNaN(v) || math.IsInf(v, 0) {
			panic(fmt.Sprintf("calib: pav value %v with weight %v: need a finite value and a positive, finite weight", v, w[i]))
		}
		b := block{sw: w[i], swy: w[i] * v, n: 1}
		// Pool with the previous block while it violates the order.
		for len(blocks) > 0 {
			last := blocks[len(blocks)-1]
			if last.swy/last.sw <= b.swy/b.sw {
				break
			}
			b = block{sw: last.sw + b.sw, swy: last.swy + b.swy, n: last.n + b.n}
			blocks = blocks[:len(blocks)-1]
		}
		blocks = append(blocks, b)
	}
	x := make([]float64, 0, len(y))
	for _, b := range blocks {
		mean := b.swy / b.sw
		for range b.n {
			x = append(x, mean)
		}
	}
	return x
}
