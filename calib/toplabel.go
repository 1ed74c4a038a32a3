package calib

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// TopLabel holds the top-label calibration errors that calibration
// libraries report beside ECE (netcal, torch-uncertainty, Kumar et al.'s
// verified_calibration), over the top probability c_i = max_j p̂_ij and
// whether it is right, a_i = 1{argmax_j p̂_ij = y_i}. Bins are the
// equal-width bins of Bin unless said otherwise; acc_m and conf_m are the
// mean a_i and c_i of the n_m examples of bin m, N the number of
// examples. All are fractions. The zero value is a perfectly calibrated
// report on no data.
type TopLabel struct {
	// ECE is Σ_m (n_m/N)·|acc_m − conf_m| (as Metrics.ECE).
	ECE float64 `json:"ece"`
	// AdaptiveECE is the same sum over M = min(bins, N) equal-mass bins
	// (Nixon et al. 2019's adaptive binning of the top-label ECE; not
	// netcal's ACE, which averages classwise errors over classes): the
	// examples are sorted by c_i, equal confidences wrong before right,
	// and bin m holds sorted positions ⌊mN/M⌋ to ⌊(m+1)N/M⌋ − 1, so every
	// bin is populated and the value does not depend on the examples'
	// order. Nil (and left out of JSON) where it was not computed: see
	// Accumulator.KeepTopConfidences; an exact 0 is kept.
	AdaptiveECE *float64 `json:"adaptive_ece,omitempty"`
	// KS is the Kolmogorov–Smirnov calibration error of Gupta et al.
	// (2021, "Calibration of neural networks using splines"): with the
	// examples sorted by c_i, the largest gap between the cumulative sums
	// of confidence and accuracy, max_t |Σ_{c_i ≤ t} (c_i − a_i)| / N. It
	// is read only where the confidence changes (t runs over the distinct
	// c_i), so that it does not depend on the order of tied confidences.
	// It needs no bins. Nil (and left out of JSON) where it was not
	// computed, as AdaptiveECE.
	KS *float64 `json:"ks,omitempty"`
	// MCE is the maximum calibration error max_m |acc_m − conf_m| over
	// the non-empty bins (Naeini et al. 2015).
	MCE float64 `json:"mce"`
	// RMSCE is the root-mean-square calibration error
	// √(Σ_m (n_m/N)·(acc_m − conf_m)²).
	RMSCE float64 `json:"rmsce"`
	// DebiasedCE is the debiased estimator of the ℓ2 calibration error of
	// Kumar, Liang and Ma (2019, "Verified uncertainty calibration"):
	// √max(0, Σ_m (n_m/N)·[(acc_m − conf_m)² − acc_m(1 − acc_m)/(n_m − 1)])
	// over bins with n_m ≥ 2. The plug-in RMSCE is biased upwards by the
	// sampling noise of acc_m; this subtracts its estimate.
	DebiasedCE float64 `json:"debiased_ce"`
	// SignedGap is the mean confidence minus the accuracy,
	// (1/N) Σ_i (c_i − a_i): positive when the model is over-confident,
	// negative when under-confident. It needs no bins.
	SignedGap float64 `json:"signed_gap"`
}

// TopLabelErrors computes the top-label calibration errors of probs (an
// n×classes row-major matrix of class probabilities) against labels, with
// bins bins (0 means DefaultMetricBins). Its errors are those of
// Evaluate.
func TopLabelErrors(probs []float64, labels []int, classes, bins int) (TopLabel, error) {
	if len(labels) == 0 {
		return TopLabel{}, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	a, err := NewAccumulator(classes, bins)
	if err != nil {
		return TopLabel{}, err
	}
	if err := a.Add(probs, labels); err != nil {
		return TopLabel{}, err
	}
	t := a.TopLabel()
	t.setMass(sortPacked(topConfidences(probs, labels, classes)), a.bins)
	return t, nil
}

// TopLabel returns the top-label calibration errors of the examples
// accumulated so far. AdaptiveECE, whose equal-mass bins need every
// example's top confidence, is computed only when a kept them for every
// example (KeepTopConfidences); TopLabel then sorts those records into
// a buffer that a keeps for ClassErrors (until ClassErrors or Forget),
// so it must not run concurrently with another use of a. The
// other errors merge exactly across accumulators. It returns the zero
// TopLabel when nothing was accumulated.
func (a *Accumulator) TopLabel() TopLabel {
	if a.n == 0 {
		return TopLabel{}
	}
	var t TopLabel
	if a.keepTops && records(a.tops) == a.n {
		a.sorted = sortPackedInto(a.sorted, a.tops...)
		t.setMass(a.sorted, a.bins)
	}
	n := float64(a.n)
	var sq, debiased, confSum float64
	for m, c := range a.topCount {
		if c == 0 {
			continue
		}
		nm := float64(c)
		sum := a.topConf[m].float() / probScale
		confSum += sum
		acc, conf := float64(a.topFreq[m])/nm, sum/nm
		gap := acc - conf
		t.ECE += absDiff(a.topConf[m], a.topFreq[m])
		t.MCE = max(t.MCE, math.Abs(gap))
		sq += nm / n * gap * gap
		if c >= 2 {
			debiased += nm / n * (gap*gap - acc*(1-acc)/(nm-1))
		}
	}
	t.ECE /= n // as Metrics computes it, to the bit
	t.RMSCE = math.Sqrt(sq)
	t.DebiasedCE = math.Sqrt(max(0, debiased))
	t.SignedGap = (confSum - float64(a.correct)) / n
	return t
}

// setMass sets the adaptive ECE and the KS error of t from the packed
// top confidences s of every example, sorted (sortPacked).
func (t *TopLabel) setMass(s []uint64, bins int) {
	e := equalMass(s, bins, nil)
	n := float64(len(s))
	ece, ks := e.gap/n, e.ks/n
	t.AdaptiveECE, t.KS = &ece, &ks
}

// packTop packs an example's top confidence c ∈ [0, 1] and whether it is
// right into 8 bytes whose unsigned order is that of equalMass's sort:
// by c (the bits of a non-negative float64 increase with it), then wrong
// (0) before right (1).
func packTop(conf float64, correct bool) uint64 {
	u := math.Float64bits(min(max(conf, 0), 1)) << 1
	if correct {
		u |= 1
	}
	return u
}

// unpackTop inverts packTop.
func unpackTop(u uint64) (conf float64, correct bool) {
	return math.Float64frombits(u >> 1), u&1 == 1
}

// topConfidences returns each row's packed top probability (the first on
// ties) and whether it is the label. The rows have been validated.
func topConfidences(probs []float64, labels []int, classes int) []uint64 {
	out := make([]uint64, len(labels))
	for i, y := range labels {
		row := probs[i*classes : (i+1)*classes]
		arg := 0
		for j, p := range row {
			if p > row[arg] {
				arg = j
			}
		}
		out[i] = packTop(row[arg], arg == y)
	}
	return out
}

// Interval is a bootstrap confidence interval [Lo, Hi]. The zero value is
// the point interval at 0.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Bootstrap holds percentile bootstrap confidence intervals for every
// metric of Metrics, TopLabel and Classwise, keyed by their JSON names ("cwece",
// "accuracy", "mce", ...).
type Bootstrap map[string]Interval

// DefaultBootstrapLevel is the confidence level of BootstrapIntervals
// when none is given.
const DefaultBootstrapLevel = 0.95

// MaxBootstrap is the largest number of bootstrap resamples: more than
// any interval needs, and a bound on the work.
const MaxBootstrap = 100000

// BootstrapIntervals returns percentile bootstrap intervals at level (0
// means DefaultBootstrapLevel) for every metric of probs against labels:
// resamples resamples of the examples drawn with replacement from a PCG
// stream seeded by seed, each evaluated as Evaluate, TopLabelErrors and
// ClasswiseErrors do with bins bins (the equal-mass errors from the
// examples sorted once, walked with each resample's multiplicities, which
// is the resample's sorted order); the interval of a metric is its (1−level)/2 and
// (1+level)/2 empirical quantiles over the resamples. The same seed gives
// the same intervals. It returns an error for resamples outside
// [1, MaxBootstrap], a level outside (0, 1), or the errors of Evaluate.
func BootstrapIntervals(probs []float64, labels []int, classes, bins, resamples int, level float64, seed uint64) (Bootstrap, error) {
	if level == 0 {
		level = DefaultBootstrapLevel
	}
	switch {
	case resamples < 1 || resamples > MaxBootstrap:
		return nil, fmt.Errorf("%d bootstrap resamples: want 1 to %d", resamples, MaxBootstrap)
	case !(level > 0 && level < 1):
		return nil, fmt.Errorf("confidence level %v: want a fraction in (0, 1), e.g. 0.95", level)
	}
	if _, err := Evaluate(probs, labels, classes, bins); err != nil {
		return nil, err
	}
	if bins == 0 {
		bins = DefaultMetricBins
	}
	n := len(labels)
	// The equal-mass errors of a resample walk the examples sorted once
	// (the top confidences, then each class's probabilities), each
	// example counted as often as it was drawn: the resample's own sorted
	// order, without sorting it.
	sorted := make([]sortedKeys, 1+classes)
	sorted[0] = sortKeys(topConfidences(probs, labels, classes))
	for j := range classes {
		s := make([]uint64, n)
		for i, y := range labels {
			s[i] = packTop(probs[i*classes+j], y == j)
		}
		sorted[1+j] = sortKeys(s)
	}
	rng := rand.New(rand.NewPCG(seed, 0x626f6f74)) // "boot"
	draws := map[string][]float64{}
	rp := make([]float64, n*classes)
	rl := make([]int, n)
	drawn := make([]int, n)
	parts := make([]ClassErrors, classes)
	for range resamples {
		clear(drawn)
		for i := range n {
			k := rng.IntN(n)
			copy(rp[i*classes:(i+1)*classes], probs[k*classes:(k+1)*classes])
			rl[i] = labels[k]
			drawn[k]++
		}
		a, err := NewAccumulator(classes, bins)
		if err != nil {
			return nil, err
		}
		if err := a.Add(rp, rl); err != nil {
			return nil, err
		}
		m, err := a.Metrics()
		if err != nil {
			return nil, err
		}
		t := a.TopLabel()
		e := sorted[0].equalMass(bins, drawn)
		ece, ks := e.gap/float64(n), e.ks/float64(n)
		t.AdaptiveECE, t.KS = &ece, &ks
		for j := range parts {
			e := sorted[1+j].equalMass(bins, drawn)
			parts[j] = ClassErrors{N: n, Gap: e.gap, Debiased: e.debiased, KS: e.ks}
		}
		for name, v := range metricValues(m, t, CombineClasswise(parts)) {
			draws[name] = append(draws[name], v)
		}
	}
	out := Bootstrap{}
	for name, v := range draws {
		slices.Sort(v)
		out[name] = Interval{Lo: quantile(v, (1-level)/2), Hi: quantile(v, (1+level)/2)}
	}
	return out, nil
}

// metricValues names every metric by its JSON key.
func metricValues(m Metrics, t TopLabel, cw Classwise) map[string]float64 {
	return map[string]float64{
		"accuracy": m.Accuracy, "cwece": m.CWECE, "ece": m.ECE, "nll": m.NLL, "brier": m.Brier,
		"adaptive_ece": *t.AdaptiveECE, "ks": *t.KS, "mce": t.MCE, "rmsce": t.RMSCE, "debiased_ce": t.DebiasedCE, "signed_gap": t.SignedGap,
		"adaptive_cwece": cw.AdaptiveCWECE, "debiased_cwce": cw.DebiasedCWCE, "cw_ks": cw.KS,
	}
}

// sortedKeys are packed examples (packTop) sorted, with the index of
// each in the original order.
type sortedKeys struct {
	keys []uint64
	idx  []int
}

// sortKeys sorts the packed examples s, keeping their indices; equal
// keys are identical examples, so their order does not matter.
func sortKeys(s []uint64) sortedKeys {
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(s[a], s[b]) })
	keys := make([]uint64, len(s))
	for r, i := range idx {
		keys[r] = s[i]
	}
	return sortedKeys{keys, idx}
}

// equalMass returns the equal-mass errors of the resample that drew
// example i drawn[i] times.
func (sk sortedKeys) equalMass(bins int, drawn []int) massErrors {
	return equalMass(sk.keys, bins, func(r int) int { return drawn[sk.idx[r]] })
}

// quantile returns the q-quantile of sorted v by linear interpolation
// between order statistics (NumPy's default).
func quantile(v []float64, q float64) float64 {
	pos := q * float64(len(v)-1)
	i := int(pos)
	if i >= len(v)-1 {
		return v[len(v)-1]
	}
	f := pos - float64(i)
	return v[i]*(1-f) + v[i+1]*f
}
