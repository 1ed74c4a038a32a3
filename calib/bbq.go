package calib

import (
	"fmt"
	"math"
)

// Bin exponents of BBQ.
const (
	// DefaultMexp is the bin exponent of a BBQ fitted with Mexp = 0: its
	// finest scheme has 2^7 = 128 bins (the paper's setting).
	DefaultMexp = 7
	// MaxMexp is the largest bin exponent.
	MaxMexp = 16
)

// bbqPrior is N′, the equivalent sample size of the Beta priors of BBQ.
const bbqPrior = 2

// BBQ is one-vs-all Bayesian binning into quantiles (Naeini et al. 2015)
// in the federated form of the paper (App. B.4; SPEC §5), method MethodBBQ.
//
// For each class, the 2^Mexp equal-width bins of the class probability are
// merged into schemes of 2, 4, …, 2^Mexp bins. A scheme with B bins scores
//
//	Π_b Γ(N′/B)/Γ(N_b+N′/B) · Γ(m_b+α_b)/Γ(α_b) · Γ(n_b+β_b)/Γ(β_b),
//
// with N′ = 2, m_b and n_b the positive and negative counts of bin b,
// N_b = m_b + n_b, α_b = (N′/B)·mid_b and β_b = (N′/B)·(1−mid_b) for the
// bin midpoint mid_b, and predicts the Beta-posterior mean
// (m_b+α_b)/(N_b+N′/B) in bin b (defined for empty bins too). The BBQ
// prediction is the score-weighted average of the schemes, computed in log
// space. Every scheme is constant on the finest bins, so the fitted BBQ is
// one lookup table of 2^Mexp values per class. The C class values are
// optionally weighted (Weights) and normalised to sum to 1.
//
// Build one with Fit from labelled logits, or with NewBBQ from
// (aggregated) Histograms. Noisy counts are clamped at 0 first.
type BBQ struct {
	// Mexp is the bin exponent: the finest scheme has 2^Mexp bins. It must
	// be in [1, MaxMexp]; zero means DefaultMexp when fitting.
	Mexp int `json:"mexp"`
	// Table holds the prediction for class j in fine bin m at
	// Table[j*2^Mexp+m]: Classes×2^Mexp values in (0, 1).
	Table []float64 `json:"table"`
	// Weights optionally blends the predictions with the probabilities.
	Weights
}

// NewBBQ returns the BBQ calibrator of the histograms h, which must have
// 2^Mexp bins with Mexp in [1, MaxMexp] and may hold noisy counts:
// negative counts are taken as 0. It has no weighting. It returns an error
// when h is invalid or its bin count is not such a power of two.
func NewBBQ(h *Histograms) (*BBQ, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	mexp := 0
	for 1<<mexp < h.Bins {
		mexp++
	}
	if 1<<mexp != h.Bins || mexp < 1 {
		return nil, fmt.Errorf("BBQ needs 2^Mexp bins with Mexp in [1, %d], have %d bins", MaxMexp, h.Bins)
	}
	b := &BBQ{Mexp: mexp, Table: make([]float64, len(h.Pos))}
	w := newBBQWork(mexp)
	for j := 0; j < h.Classes; j++ {
		k := j * h.Bins
		w.fit(b.Table[k:k+h.Bins], h.Pos[k:k+h.Bins], h.Neg[k:k+h.Bins])
	}
	return b, nil
}

// checkMexp returns the bin exponent that m stands for (DefaultMexp for 0)
// or an error when it is outside [1, MaxMexp].
func checkMexp(m int) (int, error) {
	if m == 0 {
		return DefaultMexp, nil
	}
	if m < 1 || m > MaxMexp {
		return 0, fmt.Errorf("BBQ bin exponent Mexp = %d: want 1 to %d (2 to %d bins)", m, MaxMexp, MaxBins)
	}
	return m, nil
}

// Fit fits b to the labelled logits of s with 2^b.Mexp bins (DefaultMexp
// if zero): it accumulates their Histograms and builds the calibrator from
// them. Any weighting is removed. It returns an error for an invalid or
// empty set or Mexp outside [1, MaxMexp], leaving b unchanged.
func (b *BBQ) Fit(s *Set) error {
	mexp, err := checkMexp(b.Mexp)
	if err != nil {
		return err
	}
	if err := checkFit(s); err != nil {
		return err
	}
	h := NewHistograms(s.Classes, 1<<mexp)
	if err := h.Accumulate(s); err != nil {
		return err
	}
	nb, err := NewBBQ(h)
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// Predict writes the calibrated probabilities of the rows of logits into
// dst; see Calibrator. It panics if b is not fitted.
func (b *BBQ) Predict(dst, logits []float64) {
	if b.Mexp < 1 || b.Mexp > MaxMexp {
		panic("calib: Predict on a BBQ that is not fitted")
	}
	predictTable(dst, logits, b.Table, 1<<b.Mexp, &b.Weights)
}

// Method returns MethodBBQ.
func (b *BBQ) Method() string { return MethodBBQ }

// Classes returns the number of classes of the fitted calibrator, 0 before
// fitting.
func (b *BBQ) Classes() int {
	if b.Mexp < 1 || b.Mexp > MaxMexp {
		return 0
	}
	return len(b.Table) >> b.Mexp
}

// SetWeighting sets the weighting of b's predictions: mode, with one
// weight α_j ∈ [0, 1] per class in alpha (nil for WeightNone). It copies
// alpha. It returns an error, leaving b unchanged, for an unknown mode or
// weights that do not fit.
func (b *BBQ) SetWeighting(mode Weighting, alpha []float64) error {
	return b.Weights.set(mode, alpha, b.Classes())
}

// validate checks decoded parameters.
func (b *BBQ) validate() error {
	if b.Mexp < 1 || b.Mexp > MaxMexp {
		return fmt.Errorf("mexp is %d: want 1 to %d", b.Mexp, MaxMexp)
	}
	if err := checkTable(b.Table, 1<<b.Mexp, false); err != nil {
		return err
	}
	return b.Weights.check(b.Classes())
}

// bbqWork holds the scratch space of fitting one class of a BBQ.
type bbqWork struct {
	mexp     int
	pos, neg []float64   // counts of the current scheme, clamped at 0
	pred     [][]float64 // pred[s-1][b]: posterior mean of scheme s (2^s bins) in bin b
	score    []float64   // log score of each scheme
}

func newBBQWork(mexp int) *bbqWork {
	w := &bbqWork{
		mexp:  mexp,
		pos:   make([]float64, 1<<mexp),
		neg:   make([]float64, 1<<mexp),
		pred:  make([][]float64, mexp),
		score: make([]float64, mexp),
	}
	for s := 1; s <= mexp; s++ {
		w.pred[s-1] = make([]float64, 1<<s)
	}
	return w
}

// fit writes into table (2^mexp values) the BBQ predictions of one class
// with fine positive and negative counts pos and neg.
func (w *bbqWork) fit(table, pos, neg []float64) {
	w.scores(pos, neg)
	lse := LogSumExp(w.score)
	clear(table)
	for s := 1; s <= w.mexp; s++ {
		weight := math.Exp(w.score[s-1] - lse)
		if weight == 0 {
			continue
		}
		pred, shift := w.pred[s-1], w.mexp-s
		for m := range table {
			table[m] += weight * pred[m>>shift]
		}
	}
	for m, v := range table { // guard against rounding past 1
		table[m] = min(v, 1)
	}
}

// scores sets w.score[s-1] to the log score and w.pred[s-1] to the
// posterior means of each scheme s = 1, …, mexp (2^s bins), merging the
// fine counts pairwise from the finest scheme down.
func (w *bbqWork) scores(pos, neg []float64) {
	for m := range pos {
		w.pos[m], w.neg[m] = max(pos[m], 0), max(neg[m], 0)
	}
	for s := w.mexp; s >= 1; s-- {
		nb := 1 << s
		if s < w.mexp { // merge neighbouring bins of scheme s+1
			for b := 0; b < nb; b++ {
				w.pos[b] = w.pos[2*b] + w.pos[2*b+1]
				w.neg[b] = w.neg[2*b] + w.neg[2*b+1]
			}
		}
		w.score[s-1] = bbqScheme(w.pred[s-1], w.pos[:nb], w.neg[:nb])
	}
}

// bbqScheme returns the log score of the scheme with positive counts m and
// negative counts n per bin (non-negative), and writes the posterior mean
// of each bin into pred.
func bbqScheme(pred, m, n []float64) float64 {
	B := float64(len(m))
	prior := bbqPrior / B
	lgPrior := bbqLgamma(prior)
	var score float64
	for b := range m {
		mid := (float64(b) + 0.5) / B
		alpha, beta := prior*mid, prior*(1-mid)
		N := m[b] + n[b]
		score += lgPrior - bbqLgamma(N+prior) +
			bbqLgamma(m[b]+alpha) - bbqLgamma(alpha) +
			bbqLgamma(n[b]+beta) - bbqLgamma(beta)
		pred[b] = (m[b] + alpha) / (N + prior)
	}
	return score
}

// bbqLgamma returns log Γ(x) for x > 0.
func bbqLgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}
