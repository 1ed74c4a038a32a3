package calib

import (
	"fmt"
	"math"
)

// Weighting says which predictions of a binning calibrator are blended
// with the uncalibrated probabilities (paper §4.1, App. B.4; SPEC §5).
type Weighting string

// The weighting variants. The empty Weighting means WeightNone.
const (
	// WeightNone uses the binning calibrator as it is.
	WeightNone Weighting = "none"
	// WeightAll blends every prediction:
	// g̃_j(p̂) = α_j·g_j(p̂_j) + (1−α_j)·p̂_j, then normalises.
	WeightAll Weighting = "all"
	// WeightChanged blends only the predictions whose argmax the unweighted
	// calibrator changes, and leaves the others unweighted.
	WeightChanged Weighting = "changed"
)

// ParseWeighting returns the Weighting named s: "none", "all" or
// "changed".
func ParseWeighting(s string) (Weighting, error) {
	switch w := Weighting(s); w {
	case WeightNone, WeightAll, WeightChanged:
		return w, nil
	}
	return "", fmt.Errorf("unknown weighting %q: want none, all or changed", s)
}

// Weights holds the per-class weights of the weighting scheme and how they
// are applied. It is embedded in the binning calibrators, so its fields
// are part of their sidecar parameters. The zero value weights nothing.
type Weights struct {
	// Weighting selects the weighted predictions; "" means WeightNone.
	Weighting Weighting `json:"weighting,omitempty"`
	// Alpha holds α_j ∈ [0, 1] for each class j; required unless
	// Weighting is WeightNone. See Alpha and DPAlpha.
	Alpha []float64 `json:"alpha,omitempty"`
}

// active reports whether the weights change any prediction.
func (w *Weights) active() bool {
	return (w.Weighting == WeightAll || w.Weighting == WeightChanged) && w.Alpha != nil
}

// check reports the first problem with w for a calibrator of the given
// number of classes.
func (w *Weights) check(classes int) error {
	switch w.Weighting {
	case "", WeightNone, WeightAll, WeightChanged:
	default:
		return fmt.Errorf("unknown weighting %q: want none, all or changed", w.Weighting)
	}
	if w.Alpha == nil {
		if w.Weighting == WeightAll || w.Weighting == WeightChanged {
			return fmt.Errorf("weighting %q needs alpha, one weight per class", w.Weighting)
		}
		return nil
	}
	if len(w.Alpha) != classes {
		return fmt.Errorf("alpha has %d weights for %d classes", len(w.Alpha), classes)
	}
	for j, a := range w.Alpha {
		if !(a >= 0 && a <= 1) {
			return fmt.Errorf("alpha of class %d is %v: want a weight in [0, 1]", j, a)
		}
	}
	return nil
}

// set replaces w after checking the new weights.
func (w *Weights) set(mode Weighting, alpha []float64, classes int) error {
	nw := Weights{Weighting: mode, Alpha: append([]float64(nil), alpha...)}
	if alpha == nil {
		nw.Alpha = nil
	}
	if err := nw.check(classes); err != nil {
		return err
	}
	*w = nw
	return nil
}

// Alpha returns the non-private weights α_j = min(Ñ_j/N_j, 1), where
// seen[j] = Ñ_j is the number of class-j examples aggregated so far (see
// Histograms.Positives) and total[j] = N_j the number of class-j
// calibration examples in the whole federation. A class with no examples
// in the federation (N_j = 0) gets α_j = 1: all of its data has been
// seen. Weights are clamped to [0, 1]. Alpha panics if the lengths differ.
func Alpha(seen, total []float64) []float64 {
	if len(seen) != len(total) {
		panic("calib: Alpha length mismatch")
	}
	alpha := make([]float64, len(seen))
	for j, s := range seen {
		if total[j] <= 0 {
			alpha[j] = 1
			continue
		}
		alpha[j] = clampUnit(s / total[j])
	}
	return alpha
}

// DPAlpha returns the private weights
// α̃_j = min(Ñ_j / (√(2/π)·σ·|P_j|), 1), where Ñ_j is the sum of the noisy
// class-j positive histogram of h, |P_j| = h.Bins its number of bins, and
// sigmaAcc = σ the standard deviation of the total noise in each
// accumulated bin (σ_round·√t after t noisy rounds). √(2/π)·σ is the
// expected absolute noise of one bin, so α̃_j is the signal-to-noise ratio
// of the histogram, capped at 1. Negative noisy sums give 0; sigmaAcc = 0
// (no noise) gives 1. DPAlpha panics if sigmaAcc is negative or NaN.
func DPAlpha(h *Histograms, sigmaAcc float64) []float64 {
	if !(sigmaAcc >= 0) {
		panic("calib: DPAlpha needs a non-negative noise standard deviation")
	}
	seen := h.Positives()
	alpha := make([]float64, len(seen))
	noise := math.Sqrt(2/math.Pi) * sigmaAcc * float64(h.Bins)
	for j, s := range seen {
		if noise == 0 {
			alpha[j] = 1
			continue
		}
		alpha[j] = clampUnit(s / noise)
	}
	return alpha
}

// DPAlphaLower returns private weights from a lower confidence bound of
// each class's noisy count instead of the count itself:
//
//	α̃_j = min(max(Ñ_j − z·σ·√|P_j|, 0) / (√(2/π)·σ·|P_j|), 1).
//
// The sum of the |P_j| = h.Bins noisy bins of class j carries Gaussian
// noise of standard deviation σ·√|P_j|, so the bound undershoots the
// true count with probability Φ(z) (97.7% for z = 2). DPAlpha (z = 0)
// gives a noise-dominated calibrator a weight of order 0.1 half the time,
// which a normalised blend of ten such classes turns into a large
// calibration error; with the bound the weight stays 0 until the signal
// clearly exceeds the noise, and it tends to DPAlpha as the noise
// vanishes. This goes beyond the paper (App. B.4). DPAlphaLower panics if
// sigmaAcc or z is negative or NaN.
func DPAlphaLower(h *Histograms, sigmaAcc, z float64) []float64 {
	if !(z >= 0) {
		panic("calib: DPAlphaLower needs a non-negative z")
	}
	alpha := DPAlpha(h, sigmaAcc)
	if sigmaAcc == 0 {
		return alpha
	}
	noise := math.Sqrt(2/math.Pi) * sigmaAcc * float64(h.Bins)
	margin := z * sigmaAcc * math.Sqrt(float64(h.Bins))
	for j, s := range h.Positives() {
		alpha[j] = clampUnit((s - margin) / noise)
	}
	return alpha
}

func clampUnit(v float64) float64 {
	switch {
	case v > 1:
		return 1
	case v > 0:
		return v
	}
	return 0 // also NaN
}

// predictTable is the prediction of the binning calibrators: for each row
// of logits, p̂ = softmax(z), g_j = table[j·bins + Bin(p̂_j, bins)] (or p̂_j
// where the entry is EmptyBin), weighted by w, normalised; a row whose g
// sums to 0 gets p̂.
func predictTable(dst, logits, table []float64, bins int, w *Weights) {
	if bins < 1 || len(table) == 0 || len(table)%bins != 0 {
		panic("calib: Predict on a binning calibrator that is not fitted")
	}
	predictOneVsAll(dst, logits, len(table)/bins, w, func(g, p []float64) {
		for j, v := range p {
			t := table[j*bins+Bin(v, bins)]
			if t < 0 { // EmptyBin
				t = v
			}
			g[j] = t
		}
	})
}

// predictOneVsAll is the prediction of the one-vs-all calibrators that
// map each class's softmax probability on its own (the binning
// calibrators, exact isotonic regression): for each row of c logits,
// p̂ = softmax(z), g_j = the class-j map of p̂_j as lookup writes it into
// g, weighted by w, normalised; a row whose g sums to 0 gets p̂. It panics
// when the shapes do not fit.
func predictOneVsAll(dst, logits []float64, c int, w *Weights, lookup func(g, p []float64)) {
	if c < 1 || len(dst) != len(logits) || len(logits)%c != 0 {
		panic("calib: Predict shape mismatch")
	}
	buf := make([]float64, 3*c)
	p, g, u := buf[:c], buf[c:2*c], buf[2*c:]
	weighted := w.active()
	for i := 0; i < len(logits); i += c {
		Softmax(p, logits[i:i+c])
		lookup(g, p)
		out := dst[i : i+c]
		if !weighted {
			normaliseOr(out, g, p)
			continue
		}
		if w.Weighting == WeightChanged {
			normaliseOr(u, g, p)
			if topIndex(u) == topIndex(p) {
				copy(out, u)
				continue
			}
		}
		for j, a := range w.Alpha {
			g[j] = a*g[j] + (1-a)*p[j]
		}
		normaliseOr(out, g, p)
	}
}

// normaliseOr writes g/Σg into dst, or p when Σg is not positive.
func normaliseOr(dst, g, p []float64) {
	var sum float64
	for _, v := range g {
		sum += v
	}
	if !(sum > 0) {
		copy(dst, p)
		return
	}
	for j, v := range g {
		dst[j] = v / sum
	}
}

// topIndex returns the index of the first largest element of x.
func topIndex(x []float64) int {
	k := 0
	for j, v := range x {
		if v > x[k] {
			k = j
		}
	}
	return k
}
