package calib

import (
	"fmt"
	"math"
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
	v.Pass = len(v.Failures) == 0
	return v
}
