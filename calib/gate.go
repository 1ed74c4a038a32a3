package calib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// AccuracyDropMark is the accuracy loss, as a fraction, beyond which a
// calibrated model is said to have dropped accuracy (SPEC §4: test
// accuracy after minus before below −1 percentage point). It is the
// paper's asterisk in the result tables and the default bar of Gate.
const AccuracyDropMark = 0.01

// AccuracyDropped reports whether after's accuracy is more than
// AccuracyDropMark below before's: the SPEC §4 "accuracy drop". The two
// metrics are taken to be of the same examples. The comparison is exact
// on the counts of correct predictions, round(Accuracy·N), so that a loss
// of exactly 1 point is not a drop however the fractions round.
func AccuracyDropped(before, after Metrics) bool {
	return accuracyLost(before, after, AccuracyDropMark)
}

// accuracyLost reports whether before.Accuracy − after.Accuracy exceeds
// mark, comparing the counts of correct predictions so that a loss of
// exactly mark is not beyond it.
func accuracyLost(before, after Metrics, mark float64) bool {
	if before.N <= 0 || after.N <= 0 {
		return before.Accuracy-after.Accuracy > mark
	}
	nb, na := float64(before.N), float64(after.N)
	cb := math.Round(before.Accuracy * nb)
	ca := math.Round(after.Accuracy * na)
	// cb/nb − ca/na > mark, multiplied through by nb·na. Every product of
	// counts below 2^53 is exact, and for mark = 1/100 the rounding of
	// mark·nb·na cannot move it across an integer.
	return cb*na-ca*nb > mark*nb*na
}

// Gate is the bar a calibration must clear, as `fedcalib check` applies
// it in CI: accuracy may fall by at most MaxAccuracyDrop and cwECE must
// fall by at least MinCWECEImprovement. Both are fractions, not
// percentages. The zero value allows no loss of accuracy and requires
// cwECE not to get worse; the check command's defaults are
// Gate{MaxAccuracyDrop: AccuracyDropMark}, so that it fails exactly on an
// "accuracy drop" (see AccuracyDropped).
type Gate struct {
	// MaxAccuracyDrop is the largest allowed accuracy(before) −
	// accuracy(after). Zero allows no loss; AccuracyDropMark is 1 point.
	MaxAccuracyDrop float64
	// MinCWECEImprovement is the smallest required cwECE(before) −
	// cwECE(after). Zero means cwECE must not get worse; a negative value
	// lets it get worse by that much.
	MinCWECEImprovement float64
	// CheckNLL adds the NLL bar: NLL(after) − NLL(before) may be at most
	// MaxNLLIncrease (in nats). False, the zero value, leaves NLL
	// unjudged: binning calibrators trade likelihood for calibration by
	// design.
	CheckNLL bool
	// MaxNLLIncrease is the largest allowed NLL(after) − NLL(before) when
	// CheckNLL; zero means NLL must not get worse.
	MaxNLLIncrease float64
}

// Validate reports whether g is a bar Judge can apply: both are
// differences of fractions, so MaxAccuracyDrop is in [0, 1] (1 allows any
// loss) and MinCWECEImprovement in [−1, 1] (−1 allows any worsening);
// values outside, infinities and NaN are refused.
func (g Gate) Validate() error {
	if !(g.MaxAccuracyDrop >= 0 && g.MaxAccuracyDrop <= 1) {
		return fmt.Errorf("calib: gate: max accuracy drop %v: want a fraction in [0, 1]", g.MaxAccuracyDrop)
	}
	if !(g.MinCWECEImprovement >= -1 && g.MinCWECEImprovement <= 1) {
		return fmt.Errorf("calib: gate: min cwECE improvement %v: want a fraction in [-1, 1]", g.MinCWECEImprovement)
	}
	if g.CheckNLL && !(g.MaxNLLIncrease >= 0 && !math.IsInf(g.MaxNLLIncrease, 1)) {
		return fmt.Errorf("calib: gate: max NLL increase %v: want a finite number of nats ≥ 0", g.MaxNLLIncrease)
	}
	return nil
}

// Verdict is the outcome of Gate.Judge, with the numbers it was reached
// on. Its JSON form is the report of `fedcalib check --json` (which adds
// the method). The zero value is a failed verdict on no data.
type Verdict struct {
	// Pass is true when no bar was failed.
	Pass bool `json:"pass"`
	// Failures holds one sentence per failed bar, saying by how much;
	// empty (not nil) when Pass.
	Failures []string `json:"failures"`
	// Before and After are the metrics of the uncalibrated and the
	// calibrated probabilities on the same examples.
	Before Metrics `json:"before"`
	After  Metrics `json:"after"`
	// AccuracyDrop is Before.Accuracy − After.Accuracy; negative when
	// calibration raised accuracy.
	AccuracyDrop float64 `json:"accuracy_drop"`
	// CWECEImprovement is Before.CWECE − After.CWECE; negative when
	// calibration made cwECE worse.
	CWECEImprovement float64 `json:"cwece_improvement"`
	// MaxAccuracyDrop and MinCWECEImprovement are the bars of the Gate
	// that judged.
	MaxAccuracyDrop     float64 `json:"max_accuracy_drop"`
	MinCWECEImprovement float64 `json:"min_cwece_improvement"`
	// NLLIncrease is After.NLL − Before.NLL, and MaxNLLIncrease the bar,
	// when the Gate checked NLL (CheckNLL); both nil otherwise.
	NLLIncrease    *float64 `json:"nll_increase,omitempty"`
	MaxNLLIncrease *float64 `json:"max_nll_increase,omitempty"`
	// Confidence is the level of the paired bootstrap intervals a
	// JudgePaired verdict was reached on; zero for Judge's point verdict.
	Confidence float64 `json:"confidence,omitempty"`
	// Intervals holds, for JudgePaired, the paired bootstrap interval of
	// each judged difference: "accuracy_drop", "cwece_improvement" and,
	// with CheckNLL, "nll_increase". Nil for Judge.
	Intervals map[string]Interval `json:"intervals,omitempty"`
}

// Judge applies g to the metrics of the same examples before and after
// calibration. Accuracy fails when it fell by more than MaxAccuracyDrop,
// compared on the counts of correct predictions as AccuracyDropped does
// (so with MaxAccuracyDrop = AccuracyDropMark it fails exactly on an
// accuracy drop); cwECE fails when it fell by less than
// MinCWECEImprovement.
func (g Gate) Judge(before, after Metrics) Verdict {
	v := Verdict{
		Failures:            []string{},
		Before:              before,
		After:               after,
		AccuracyDrop:        before.Accuracy - after.Accuracy,
		CWECEImprovement:    before.CWECE - after.CWECE,
		MaxAccuracyDrop:     g.MaxAccuracyDrop,
		MinCWECEImprovement: g.MinCWECEImprovement,
	}
	if accuracyLost(before, after, g.MaxAccuracyDrop) {
		v.Failures = append(v.Failures, fmt.Sprintf("accuracy dropped by %.2f points (%.2f%% → %.2f%%), more than the allowed %.2f",
			100*v.AccuracyDrop, 100*before.Accuracy, 100*after.Accuracy, 100*g.MaxAccuracyDrop))
	}
	if v.CWECEImprovement < g.MinCWECEImprovement {
		v.Failures = append(v.Failures, fmt.Sprintf("cwECE improved by %.3f points (%.3f%% → %.3f%%), less than the required %.3f",
			100*v.CWECEImprovement, 100*before.CWECE, 100*after.CWECE, 100*g.MinCWECEImprovement))
	}
	if g.CheckNLL {
		inc, bar := after.NLL-before.NLL, g.MaxNLLIncrease
		v.NLLIncrease, v.MaxNLLIncrease = &inc, &bar
		if inc > bar {
			v.Failures = append(v.Failures, fmt.Sprintf("NLL rose by %.4f nats (%.4f → %.4f), more than the allowed %.4f",
				inc, before.NLL, after.NLL, bar))
		}
	}
	v.Pass = len(v.Failures) == 0
	return v
}

// PairedBootstrap sets up the paired bootstrap of JudgePaired. The zero
// value means DefaultGateResamples resamples at DefaultBootstrapLevel,
// seed 0.
type PairedBootstrap struct {
	// Resamples is the number of bootstrap resamples, at most
	// MaxBootstrap; zero means DefaultGateResamples.
	Resamples int
	// Level is the confidence level of the intervals, in (0, 1); zero
	// means DefaultBootstrapLevel (0.95).
	Level float64
	// Seed seeds the PCG stream that draws the resamples: the same seed
	// gives the same verdict.
	Seed uint64
}

// DefaultGateResamples is the number of resamples of PairedBootstrap's
// zero value: enough for the 2.5% and 97.5% quantiles to settle to a few
// hundredths of their width.
const DefaultGateResamples = 1000

// JudgePaired is Judge for a small test set: it judges each difference by
// its paired bootstrap interval instead of its point value, so that a
// gate fails only when the loss is real at the interval's level. before
// and after are the n×classes probabilities of the same n examples
// (labels) without and with calibration; each resample draws n example
// indices with replacement and evaluates both on the same draw (bins as
// Evaluate). With [lo, hi] the percentile interval of a difference:
//
//	accuracy fails when lo(accuracy(before) − accuracy(after)) > MaxAccuracyDrop
//	cwECE fails when hi(cwECE(before) − cwECE(after)) < MinCWECEImprovement
//	NLL fails (CheckNLL) when lo(NLL(after) − NLL(before)) > MaxNLLIncrease
//
// The Verdict's point values are those of Judge on all n examples; its
// Intervals and Confidence record the intervals. It returns the errors of
// Evaluate and of a PairedBootstrap or Gate out of range.
func (g Gate) JudgePaired(before, after []float64, labels []int, classes, bins int, pb PairedBootstrap) (Verdict, error) {
	if err := g.Validate(); err != nil {
		return Verdict{}, err
	}
	resamples, level := pb.Resamples, pb.Level
	if resamples == 0 {
		resamples = DefaultGateResamples
	}
	if level == 0 {
		level = DefaultBootstrapLevel
	}
	switch {
	case resamples < 1 || resamples > MaxBootstrap:
		return Verdict{}, fmt.Errorf("calib: gate: %d bootstrap resamples: want 1 to %d", resamples, MaxBootstrap)
	case !(level > 0 && level < 1):
		return Verdict{}, fmt.Errorf("calib: gate: confidence level %v: want a fraction in (0, 1), e.g. 0.95", level)
	case len(before) != len(after):
		return Verdict{}, fmt.Errorf("calib: gate: %d probabilities before calibration but %d after", len(before), len(after))
	}
	mb, err := Evaluate(before, labels, classes, bins)
	if err != nil {
		return Verdict{}, fmt.Errorf("before calibration: %w", err)
	}
	ma, err := Evaluate(after, labels, classes, bins)
	if err != nil {
		return Verdict{}, fmt.Errorf("after calibration: %w", err)
	}
	v := g.Judge(mb, ma)
	n := len(labels)
	rng := rand.New(rand.NewPCG(pb.Seed, 0x70616972)) // "pair"
	rb, ra := make([]float64, n*classes), make([]float64, n*classes)
	rl := make([]int, n)
	var drop, gain, nll []float64
	for range resamples {
		for i := range n {
			k := rng.IntN(n)
			copy(rb[i*classes:(i+1)*classes], before[k*classes:(k+1)*classes])
			copy(ra[i*classes:(i+1)*classes], after[k*classes:(k+1)*classes])
			rl[i] = labels[k]
		}
		b, err := Evaluate(rb, rl, classes, bins)
		if err != nil {
			return Verdict{}, err
		}
		a, err := Evaluate(ra, rl, classes, bins)
		if err != nil {
			return Verdict{}, err
		}
		drop = append(drop, b.Accuracy-a.Accuracy)
		gain = append(gain, b.CWECE-a.CWECE)
		nll = append(nll, a.NLL-b.NLL)
	}
	interval := func(d []float64) Interval {
		slices.Sort(d)
		return Interval{Lo: quantile(d, (1-level)/2), Hi: quantile(d, (1+level)/2)}
	}
	v.Confidence = level
	v.Intervals = map[string]Interval{"accuracy_drop": interval(drop), "cwece_improvement": interval(gain)}
	if g.CheckNLL {
		v.Intervals["nll_increase"] = interval(nll)
	}
	// The point verdict's failures are replaced by the intervals'.
	v.Failures = []string{}
	if iv := v.Intervals["accuracy_drop"]; iv.Lo > g.MaxAccuracyDrop {
		v.Failures = append(v.Failures, fmt.Sprintf("accuracy dropped by %.2f points (%.0f%% interval %.2f to %.2f), surely more than the allowed %.2f",
			100*v.AccuracyDrop, 100*level, 100*iv.Lo, 100*iv.Hi, 100*g.MaxAccuracyDrop))
	}
	if iv := v.Intervals["cwece_improvement"]; iv.Hi < g.MinCWECEImprovement {
		v.Failures = append(v.Failures, fmt.Sprintf("cwECE improved by %.3f points (%.0f%% interval %.3f to %.3f), surely less than the required %.3f",
			100*v.CWECEImprovement, 100*level, 100*iv.Lo, 100*iv.Hi, 100*g.MinCWECEImprovement))
	}
	if iv, ok := v.Intervals["nll_increase"]; ok && iv.Lo > g.MaxNLLIncrease {
		v.Failures = append(v.Failures, fmt.Sprintf("NLL rose by %.4f nats (%.0f%% interval %.4f to %.4f), surely more than the allowed %.4f",
			*v.NLLIncrease, 100*level, iv.Lo, iv.Hi, g.MaxNLLIncrease))
	}
	v.Pass = len(v.Failures) == 0
	return v, nil
}
