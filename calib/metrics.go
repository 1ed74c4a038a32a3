package calib

import (
	"fmt"
	"math"
)

// DefaultMetricBins is the number of equal-width bins the metrics use when
// asked for 0 bins (SPEC §4).
const DefaultMetricBins = 15

// MaxMetricBins is the largest number of bins the metrics take. Calibration
// errors are measured with 10 to 100 bins; far more leaves most bins
// empty, and the per-class statistics take classes × bins memory.
const MaxMetricBins = 1000

// nllFloor is the smallest probability NLL takes the logarithm of.
const nllFloor = 1e-12

// probTolerance is how far outside [0, 1] a probability may stray through
// rounding before Evaluate rejects it.
const probTolerance = 1e-6

// Bin returns the equal-width bin of v among bins bins of [0, 1]:
// min(floor(v·bins), bins−1), so that v = 1 falls in the last bin and
// never in an extra one. Values below 0 (and NaN) fall in bin 0, values
// above 1 in the last bin. Bin panics if bins < 1.
//
// Every metric and binning calibrator in this package bins with Bin.
func Bin(v float64, bins int) int {
	if bins < 1 {
		panic("calib: Bin needs at least one bin")
	}
	if !(v > 0) {
		return 0
	}
	if v >= 1 {
		return bins - 1
	}
	b := int(v * float64(bins))
	if b >= bins { // v·bins rounded up to bins
		return bins - 1
	}
	return b
}

// Metrics summarises the calibration and accuracy of class probabilities
// on labelled examples (SPEC §4). All rates are fractions, not percentages.
type Metrics struct {
	// N is the number of examples.
	N int `json:"n"`
	// Classes is the number of classes C.
	Classes int `json:"classes"`
	// Accuracy is the fraction of examples whose most probable class (the
	// first one on ties) is the label.
	Accuracy float64 `json:"accuracy"`
	// CWECE is the classwise expected calibration error, the primary metric:
	// (1/C) Σ_j Σ_m (|B_jm|/N)·|mean p̂_ij − mean 1{y_i = j}| over the bins
	// B_jm of the class-j probabilities.
	CWECE float64 `json:"cwece"`
	// ECE is the top-label expected calibration error: bins over the top
	// probability, Σ_m (|B_m|/N)·|accuracy − confidence|.
	ECE float64 `json:"ece"`
	// NLL is the mean negative log-likelihood −log p̂_{i,y_i}, with p̂
	// floored at 1e-12.
	NLL float64 `json:"nll"`
	// Brier is the mean over examples of Σ_j (p̂_ij − 1{y_i = j})².
	Brier float64 `json:"brier"`
}

// Evaluate computes every metric of probs, an n×classes row-major matrix
// of class probabilities, against labels in one pass. bins is the number
// of equal-width bins for cwECE and ECE; 0 means DefaultMetricBins.
//
// It returns an error when the shapes do not match, a label is outside
// [0, classes), a probability is not finite or lies outside [0, 1] (beyond
// rounding), there are fewer than 2 classes, bins is negative, or there
// are no examples.
func Evaluate(probs []float64, labels []int, classes, bins int) (Metrics, error) {
	acc, err := newBinStats(probs, labels, classes, bins)
	if err != nil {
		return Metrics{}, err
	}
	return acc.metrics(), nil
}

// EvaluateSet computes the metrics of calibrator c on the set s; a nil c
// evaluates the uncalibrated softmax probabilities of s. bins is as for
// Evaluate.
func EvaluateSet(s *Set, c Calibrator, bins int) (Metrics, error) {
	p, err := Probabilities(s, c)
	if err != nil {
		return Metrics{}, err
	}
	return Evaluate(p, s.Labels, s.Classes, bins)
}

// Probabilities returns the class probabilities that c predicts for the
// logits of s, or their softmax when c is nil. It returns an error when s
// is invalid or c was built for another number of classes.
func Probabilities(s *Set, c Calibrator) ([]float64, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p := make([]float64, len(s.Logits))
	if c == nil {
		SoftmaxRows(p, s.Logits, s.Classes)
		return p, nil
	}
	if c.Classes() != s.Classes {
		return nil, fmt.Errorf("%s calibrator is for %d classes but the data has %d", c.Method(), c.Classes(), s.Classes)
	}
	c.Predict(p, s.Logits)
	return p, nil
}

// binStats holds the per-bin sums from which every metric and the
// reliability data are read.
type binStats struct {
	n, classes, bins int

	// Classwise, classes×bins row-major: Σ p̂_ij, Σ 1{y_i = j}, |B_jm|.
	conf, freq []float64
	count      []int

	// Top label, per bin: Σ max_j p̂_ij, Σ 1{argmax = y}, |B_m|.
	topConf, topFreq []float64
	topCount         []int

	correct    int
	nll, brier float64
}

func newBinStats(probs []float64, labels []int, classes, bins int) (*binStats, error) {
	switch {
	case classes < 2:
		return nil, fmt.Errorf("need at least 2 classes, have %d", classes)
	case bins < 0 || bins > MaxMetricBins:
		return nil, fmt.Errorf("number of bins is %d: want 1 to %d (or 0 for the default %d)", bins, MaxMetricBins, DefaultMetricBins)
	case len(probs) != len(labels)*classes:
		return nil, fmt.Errorf("have %d probabilities for %d labels and %d classes: lengths do not match", len(probs), len(labels), classes)
	case len(labels) == 0:
		return nil, fmt.Errorf("cannot evaluate: %w", ErrEmpty)
	}
	if bins == 0 {
		bins = DefaultMetricBins
	}
	a := &binStats{
		n: len(labels), classes: classes, bins: bins,
		conf:     make([]float64, classes*bins),
		freq:     make([]float64, classes*bins),
		count:    make([]int, classes*bins),
		topConf:  make([]float64, bins),
		topFreq:  make([]float64, bins),
		topCount: make([]int, bins),
	}
	for i, y := range labels {
		if y < 0 || y >= classes {
			return nil, fmt.Errorf("label of example %d is %d, outside [0, %d)", i, y, classes)
		}
		row := probs[i*classes : (i+1)*classes]
		top, arg := math.Inf(-1), 0
		var sq float64
		for j, p := range row {
			if math.IsNaN(p) || math.IsInf(p, 0) {
				return nil, fmt.Errorf("probability of example %d, class %d is %v: probabilities must be finite", i, j, p)
			}
			if p < -probTolerance || p > 1+probTolerance {
				return nil, fmt.Errorf("probability of example %d, class %d is %v: want a probability in [0, 1] (logits need a softmax first)", i, j, p)
			}
			k := j*bins + Bin(p, bins)
			a.conf[k] += p
			a.count[k]++
			d := p
			if j == y {
				a.freq[k]++
				d = p - 1
			}
			sq += d * d
			if p > top {
				top, arg = p, j
			}
		}
		m := Bin(top, bins)
		a.topConf[m] += top
		a.topCount[m]++
		if arg == y {
			a.topFreq[m]++
			a.correct++
		}
		a.nll -= math.Log(max(row[y], nllFloor))
		a.brier += sq
	}
	return a, nil
}

func (a *binStats) metrics() Metrics {
	n := float64(a.n)
	var cw float64
	for k, c := range a.count {
		// (|B|/N)·|mean conf − mean freq| = |Σ conf − Σ freq| / N.
		if c > 0 {
			cw += math.Abs(a.conf[k] - a.freq[k])
		}
	}
	var top float64
	for m, c := range a.topCount {
		if c > 0 {
			top += math.Abs(a.topConf[m] - a.topFreq[m])
		}
	}
	return Metrics{
		N:        a.n,
		Classes:  a.classes,
		Accuracy: float64(a.correct) / n,
		CWECE:    cw / n / float64(a.classes),
		ECE:      top / n,
		NLL:      a.nll / n,
		Brier:    a.brier / n,
	}
}
